/* The server's model table: what it keeps per served model beyond the
 * engine's registry (the tokenizer, the context length, the path), each
 * entry reference counted (server_impl.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core/error.h"
#include "format/gguf.h"
#include "server/log.h"
#include "server/server_impl.h"

/* Adds id to m's turn ends unless it is one already. */
static void turn_end_add(struct srv_model *m, int32_t id)
{
    if (id < 0 || id >= m->vocab)
        return;
    for (int i = 0; i < m->n_turn_end; i++)
        if (m->turn_end[i] == id)
            return;
    if (m->n_turn_end < (int)(sizeof(m->turn_end) / sizeof(m->turn_end[0])))
        m->turn_end[m->n_turn_end++] = id;
}

/* The token that ends an assistant's turn in m's template: what the
 * template writes right after an assistant message's content, when that
 * begins with a special token (Llama 3's <|eot_id|>, ChatML's <|im_end|>,
 * Mistral's </s>, Gemma's <end_of_turn>). Found by rendering a probe
 * conversation, so that no family's token is written down here. */
static void turn_end_probe(struct srv_model *m)
{
    static const char probe[] = "PrObE7q";
    const char *convs[] = {
        "[{\"role\": \"user\", \"content\": \"hi\"}, "
        "{\"role\": \"assistant\", \"content\": \"PrObE7q\"}]",
        "[{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", \"content\": \"hi\"}, "
        "{\"role\": \"assistant\", \"content\": \"PrObE7q\"}]",
    };
    for (size_t c = 0; c < sizeof(convs) / sizeof(convs[0]); c++) {
        json_t *msgs = json_loads(convs[c], 0, NULL);
        struct chat_render_opts o = {.add_generation_prompt = false};
        char *out = NULL;
        size_t len = 0;
        int rc = msgs ? chat_template_render(m->chat, msgs, &o, &out, &len) : ERR_NOMEM;
        json_decref(msgs);
        const char *at = rc == 0 ? strstr(out, probe) : NULL;
        if (at) {
            const char *after = at + strlen(probe);
            int32_t *ids = NULL;
            size_t n = 0;
            if (bpe_encode(m->tok, after, strlen(after), false, &ids, &n) == 0 && n > 0 &&
                bpe_is_special(m->tok, ids[0]))
                turn_end_add(m, ids[0]);
            free(ids);
        }
        free(out);
        if (at)
            return;
    }
}

/* The ids that end an assistant's turn in m->chat, in m->tok's ids. */
static void turn_ends_find(struct srv_model *m)
{
    m->n_turn_end = 0;
    turn_end_probe(m);
    turn_end_add(m, bpe_eot_id(m->tok));
    const char *eos = chat_template_eos(m->chat);
    if (eos[0])
        turn_end_add(m, bpe_token_id(m->tok, eos, strlen(eos)));
}

/* m's chat template: the file the config names (an error when it does not
 * load), else the checkpoint's (a warning when it does not). Needs m->tok. */
static int chat_load(struct srv_model *m, const char *path, const char *override)
{
    if (!m->tok) {
        snprintf(m->no_chat, sizeof(m->no_chat), "it has no tokenizer");
        if (override)
            return err_set(ERR_INVALID, "model %s: chat_template %s: the model has no tokenizer "
                                        "to encode the rendered prompt with",
                           m->name, override);
        return 0;
    }
    /* a checkpoint's chat_template.jinja that is there (by name, whatever it
     * is: a link that leads nowhere counts) but cannot be read as a template
     * file (a FIFO, a device, a link out of the root, too large, not UTF-8)
     * is the add's error, as its tokenizer files are; only a template whose
     * text does not parse leaves the model without chat */
    char file[4096];
    struct stat sb;
    snprintf(file, sizeof(file), "%s/chat_template.jinja", path);
    if (!override && lstat(file, &sb) == 0) {
        char *text;
        size_t len;
        int rc = chat_template_read(file, &text, &len);
        if (rc < 0)
            return err_wrap(rc, "model %s: its chat template does not load", m->name);
        free(text);
    }
    int rc = chat_template_load(path, override, &m->chat);
    if (rc < 0 && override)
        return err_wrap(rc, "model %s: chat_template %s", m->name, override);
    if (rc < 0) {
        snprintf(m->no_chat, sizeof(m->no_chat), "its chat template does not load: %s",
                 err_msg());
        log_warn("model %s: %s; /v1/chat/completions refuses it", m->name, m->no_chat);
        m->chat = NULL;
        return 0;
    }
    if (!m->chat) {
        snprintf(m->no_chat, sizeof(m->no_chat),
                 "it has no chat template (tokenizer_config.json's chat_template, "
                 "chat_template.jinja, a GGUF file's tokenizer.chat_template, or the server "
                 "config's chat_template: FILE)");
        return 0;
    }
    turn_ends_find(m);
    return 0;
}

/* Whether dir holds an entry under any of the n names (lstat: a link that
 * leads nowhere counts). */
static bool any_file(const char *dir, const char *const *names, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char p[4096];
        struct stat sb;
        snprintf(p, sizeof(p), "%s/%s", dir, names[i]);
        if (lstat(p, &sb) == 0)
            return true;
    }
    return false;
}

/* Whether dir has any tokenizer file (by name, whatever it is), or is a
 * GGUF checkpoint (whose metadata holds its tokenizer), so that one that
 * does not load is an error. */
static bool tokenizer_files(const char *dir)
{
    static const char *const names[] = {"tokenizer.json", "vocab.json", "merges.txt",
                                        "encoder.json", "vocab.bpe"};
    return gguf_is_checkpoint(dir) || any_file(dir, names, sizeof(names) / sizeof(names[0]));
}

/* What an entry is charged for: fixed bytes (a model's MODEL_CHARGE: its
 * swap model's layouts and events, the checkpoint's tensor table, the
 * engine's statistics; an adapter's ADAPTER_CHARGE: the same for a few
 * small tensors per layer, its tokenizer and template its base's) and 4x
 * the bytes of its own tokenizer and chat template files, which is what their
 * parsed tables take (OPT's 1.36 MB of vocab.json + merges.txt held 5.7 MB
 * resident). An estimate: the bound is on memory, not only on a count. */
#define MODEL_CHARGE (1u << 20)
#define ADAPTER_CHARGE (64u << 10)
static uint64_t model_charge(const char *dir, uint64_t fixed)
{
    static const char *names[] = {"tokenizer.json",     "vocab.json", "merges.txt",
                                  "encoder.json",       "vocab.bpe",  "tokenizer_config.json",
                                  "chat_template.jinja"};
    uint64_t n = fixed;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        char p[4096];
        struct stat sb;
        snprintf(p, sizeof(p), "%s/%s", dir, names[i]);
        if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode))
            n += 4 * (uint64_t)sb.st_size;
    }
    return n;
}

/* Takes bytes of the registration bound for a new entry; ERR_NOMEM naming
 * the numbers when the served models' charges would pass the host budget. */
static int charge_take(struct server *s, const char *name, uint64_t bytes)
{
    struct swap_stats st;
    swap_get_stats(s->stack->mgr, &st);
    uint64_t was = atomic_fetch_add(&s->registered_bytes, bytes);
    if (st.host_budget == 0 || was + bytes <= st.host_budget)
        return 0;
    atomic_fetch_sub(&s->registered_bytes, bytes);
    return err_set(ERR_NOMEM,
                   "model %s: the served models' tokenizers and tables would take %.1f MiB of "
                   "host memory with its %.1f MiB, more than the host budget of %.1f MiB "
                   "(remove a model, or raise --host-budget)",
                   name, (double)(was + bytes) / (1 << 20), (double)bytes / (1 << 20),
                   (double)st.host_budget / (1 << 20));
}

static void hist_add(struct engine_hist *to, const struct engine_hist *h)
{
    for (int i = 0; i < ENGINE_HIST_LE; i++)
        to->le[i] += h->le[i];
    to->count += h->count;
    to->sum += h->sum;
}

static void counts_add(struct srv_counts *to, const struct srv_counts *c)
{
    to->ok += c->ok;
    to->failed += c->failed;
    to->cancelled += c->cancelled;
    to->timed_out += c->timed_out;
    to->rejected += c->rejected;
    to->invalid += c->invalid;
    to->route[0] += c->route[0];
    to->route[1] += c->route[1];
    to->loads += c->loads;
    to->bytes_loaded += c->bytes_loaded;
    to->trims += c->trims;
    to->bytes_trimmed += c->bytes_trimmed;
    to->evictions += c->evictions;
    to->unloads += c->unloads;
    to->idle_unloads += c->idle_unloads;
    to->removal_unloads += c->removal_unloads;
    to->preempt_unloads += c->preempt_unloads;
    hist_add(&to->ttft, &c->ttft);
    hist_add(&to->latency, &c->latency);
    hist_add(&to->load, &c->load);
}

void srv_counts_of(const struct srv_model *m, const struct engine_model_stats *st,
                   struct srv_counts *out)
{
    struct srv_counts c = {
        .ok = st->ok,
        .failed = st->failed,
        .cancelled = st->cancelled,
        .timed_out = st->timed_out,
        .rejected = st->rejected,
        .invalid = atomic_load(&m->n_invalid),
        .route = {atomic_load(&m->n_route[0]), atomic_load(&m->n_route[1])},
        .loads = st->loads,
        .bytes_loaded = st->bytes_loaded,
        .trims = st->trims,
        .bytes_trimmed = st->bytes_trimmed,
        .evictions = st->evictions,
        .unloads = st->unloads,
        .idle_unloads = st->idle_unloads,
        .removal_unloads = st->removal_unloads,
        .preempt_unloads = st->preempt_unloads,
        .ttft = st->ttft_hist,
        .latency = st->latency_hist,
        .load = st->load_hist,
    };
    *out = m->base;
    counts_add(out, &c);
}

/* m's name's retained counters become its base (server.lock held). */
static void retained_take(struct server *s, struct srv_model *m)
{
    for (int i = 0; i < s->n_retained; i++)
        if (strcmp(s->retained[i].name, m->name) == 0) {
            m->base = s->retained[i].c;
            memmove(&s->retained[i], &s->retained[i + 1],
                    (size_t)(s->n_retained - i - 1) * sizeof(s->retained[0]));
            s->n_retained--;
            return;
        }
}

/* Retains c under name, the newest; the oldest name goes when
 * SRV_MAX_RETAINED are kept (server.lock held). Out of memory, the counters
 * are dropped (logged): a series restarts, nothing fails. */
static void retained_put(struct server *s, const char *name, const char *base,
                         const struct srv_counts *c)
{
    if (s->n_retained == SRV_MAX_RETAINED) {
        memmove(&s->retained[0], &s->retained[1],
                (size_t)(s->n_retained - 1) * sizeof(s->retained[0]));
        s->n_retained--;
    }
    if (s->n_retained == s->cap_retained) {
        int cap = s->cap_retained ? 2 * s->cap_retained : 8;
        cap = cap < SRV_MAX_RETAINED ? cap : SRV_MAX_RETAINED;
        struct srv_retained *t = realloc(s->retained, (size_t)cap * sizeof(*t));
        if (!t) {
            log_warn("model %s: out of memory for its counters: /metrics drops them", name);
            return;
        }
        s->retained = t;
        s->cap_retained = cap;
    }
    struct srv_retained *r = &s->retained[s->n_retained++];
    snprintf(r->name, sizeof(r->name), "%s", name);
    snprintf(r->base, sizeof(r->base), "%s", base);
    r->c = *c;
}

/* Frees an entry that never entered the table (what it owns, its
 * reference to its parent). */
static void entry_free(struct srv_model *m)
{
    if (!m)
        return;
    if (!m->parent || m->own_tok)
        bpe_close(m->tok);
    if (!m->parent || m->own_chat)
        chat_template_free(m->chat);
    srv_model_put(m->parent);
    free(m->aliases);
    free(m->path);
    free(m);
}

/* A new entry for sm served as id, what it needs of sm copied: the entry
 * outlives the swap model (the engine's removal unregisters it). */
static struct srv_model *entry_new(struct server *s, const struct swap_model *sm, const char *path,
                                   int n_aliases, int id)
{
    struct srv_model *m = calloc(1, sizeof(*m));
    if (m && n_aliases > 0 && !(m->aliases = calloc((size_t)n_aliases, sizeof(*m->aliases)))) {
        free(m);
        m = NULL;
    }
    if (!m || !(m->path = strdup(path))) {
        if (m)
            free(m->aliases);
        free(m);
        err_set(ERR_NOMEM, "out of memory for model %s", swap_model_name(sm));
        return NULL;
    }
    snprintf(m->name, sizeof(m->name), "%s", swap_model_name(sm));
    m->id = id;
    m->tp = swap_model_tp(sm);
    m->pp = swap_model_pp(sm);
    m->compute = swap_model_compute(sm);
    m->max_pos = swap_model_info(sm)->max_pos;
    m->vocab = swap_model_info(sm)->vocab;
    m->family = swap_model_info(sm)->family;
    const struct st_checkpoint *ck = swap_model_checkpoint(sm);
    m->format = st_format(ck);
    for (size_t i = 0; i < st_count(ck); i++)
        m->type_bytes[st_get(ck, i)->dtype] += st_get(ck, i)->nbytes;
    snprintf(m->architecture, sizeof(m->architecture), "%s", swap_model_info(sm)->architecture);
    m->created = (long long)time(NULL);
    m->s = s;
    return m;
}

/* Puts m (charged) into the table with the table's reference. */
static void entry_insert(struct server *s, struct srv_model *m)
{
    atomic_init(&m->refs, 1); /* the table's */
    pthread_mutex_lock(&s->lock);
    retained_take(s, m);
    /* the admin lock and srv_model_find keep names unique: nothing to replace */
    m->next = s->models;
    s->models = m;
    pthread_mutex_unlock(&s->lock);
}

/* Charges m for what it holds (m->charge); on failure that is 0 again. */
static int entry_charge(struct server *s, struct srv_model *m)
{
    int rc = charge_take(s, m->name, m->charge);
    if (rc < 0)
        m->charge = 0;
    return rc;
}

/* Undoes entry_charge and frees m (never in the table). */
static void entry_drop(struct server *s, struct srv_model *m)
{
    atomic_fetch_sub(&s->registered_bytes, m->charge);
    entry_free(m);
}

/* Any non-engine thread; opens the tokenizer and the chat template outside
 * s->lock. */
int srv_model_add(struct server *s, const struct swap_model *sm, const char *path,
                  const char *chat_template, char *const *aliases, int n_aliases, int id)
{
    struct srv_model *m = entry_new(s, sm, path, n_aliases, id);
    if (!m)
        return ERR_NOMEM;
    for (int i = 0; i < n_aliases; i++)
        snprintf(m->aliases[i], sizeof(m->aliases[i]), "%s", aliases[i]);
    m->n_aliases = n_aliases;
    int rc = bpe_open(path, &m->tok);
    /* a GGUF file without tokenizer.ggml.model is a model without a tokenizer */
    bool gguf_without = rc == ERR_NOT_FOUND && gguf_is_checkpoint(path);
    if (rc < 0 && tokenizer_files(path) && !gguf_without) {
        /* files that are there but do not load (a FIFO, a link out of the
         * root, a malformed vocabulary) are the model's error, not a model
         * without a tokenizer whose completions would all fail later */
        err_wrap(rc, "model %s: its tokenizer does not load", m->name);
        m->tok = NULL;
        entry_free(m);
        return rc;
    }
    if (rc < 0) {
        log_info("model %s: no tokenizer files: it serves token-id prompts only, its completions "
                 "carry token_ids",
                 m->name);
        m->tok = NULL;
    }
    /* charged after the tokenizer's own checks (a file over its cap is
     * named as such), before anything else is built on it */
    m->charge = model_charge(path, MODEL_CHARGE);
    if ((rc = entry_charge(s, m)) < 0 || (rc = chat_load(m, path, chat_template)) < 0) {
        entry_drop(s, m);
        return rc;
    }
    entry_insert(s, m);
    return 0;
}

/* Whether dir holds a chat template's files (by name, whatever they are). */
static bool template_files(const char *dir)
{
    static const char *const names[] = {"tokenizer_config.json", "chat_template.jinja"};
    return any_file(dir, names, sizeof(names) / sizeof(names[0]));
}

int srv_adapter_add(struct server *s, const struct swap_model *sm, const char *dir,
                    struct srv_model *parent, int id)
{
    struct srv_model *m = entry_new(s, sm, dir, 0, id);
    if (!m)
        return ERR_NOMEM;
    atomic_fetch_add(&parent->refs, 1);
    m->parent = parent;
    m->compute = parent->compute; /* its matrices run in its base's precision */
    snprintf(m->base_name, sizeof(m->base_name), "%s", parent->name);
    int rc = 0;
    /* the adapter directory's own tokenizer, else its base's */
    m->own_tok = tokenizer_files(dir);
    if (m->own_tok && (rc = bpe_open(dir, &m->tok)) < 0) {
        err_wrap(rc, "adapter %s: its tokenizer does not load", m->name);
        m->tok = NULL;
        entry_free(m);
        return rc;
    }
    if (!m->own_tok)
        m->tok = parent->tok;
    m->charge = model_charge(dir, ADAPTER_CHARGE);
    if ((rc = entry_charge(s, m)) < 0) {
        entry_free(m);
        return rc;
    }
    /* its own template when it has the files, else its base's (whose
     * end-of-turn ids are found again in its own tokenizer's ids) */
    m->own_chat = template_files(dir);
    if (m->own_chat) {
        rc = chat_load(m, dir, NULL);
    } else if (parent->chat && m->tok) {
        m->chat = parent->chat;
        if (m->own_tok) {
            turn_ends_find(m);
        } else {
            memcpy(m->turn_end, parent->turn_end, sizeof(m->turn_end));
            m->n_turn_end = parent->n_turn_end;
        }
    } else {
        snprintf(m->no_chat, sizeof(m->no_chat), "%s", parent->no_chat);
    }
    if (rc < 0) {
        entry_drop(s, m);
        return rc;
    }
    entry_insert(s, m);
    return 0;
}

/* Whether m answers to name, its own or an alias. */
static bool model_named(const struct srv_model *m, const char *name)
{
    if (strcmp(m->name, name) == 0)
        return true;
    for (int i = 0; i < m->n_aliases; i++)
        if (strcmp(m->aliases[i], name) == 0)
            return true;
    return false;
}

struct srv_model *srv_model_find(struct server *s, const char *name)
{
    pthread_mutex_lock(&s->lock);
    struct srv_model *m = s->models;
    while (m && !model_named(m, name))
        m = m->next;
    if (m)
        atomic_fetch_add(&m->refs, 1);
    pthread_mutex_unlock(&s->lock);
    return m;
}

void srv_model_put(struct srv_model *m)
{
    if (!m || atomic_fetch_sub(&m->refs, 1) != 1)
        return;
    atomic_fetch_sub(&m->s->registered_bytes, m->charge);
    entry_free(m);
}

void srv_model_remove(struct server *s, struct srv_model *m, const struct engine_model_stats *last)
{
    struct srv_counts c;
    if (last)
        srv_counts_of(m, last, &c);
    pthread_mutex_lock(&s->lock);
    bool listed = !m->removed;
    if (listed) {
        /* in the same hold as it leaves the table: a scrape sees the name
         * in one place or the other, never both */
        if (last)
            retained_put(s, m->name, m->base_name, &c);
        struct srv_model **p = &s->models;
        while (*p && *p != m)
            p = &(*p)->next;
        if (*p)
            *p = m->next;
        m->next = NULL;
        m->removed = true;
    }
    pthread_mutex_unlock(&s->lock);
    if (listed)
        srv_model_put(m); /* the table's */
}

void srv_models_free(struct server *s)
{
    struct srv_model *m = s->models;
    s->models = NULL;
    while (m) {
        struct srv_model *next = m->next;
        m->removed = true;
        srv_model_put(m); /* the table's; requests are gone by now */
        m = next;
    }
    free(s->retained);
    s->retained = NULL;
    s->n_retained = s->cap_retained = 0;
}

/* srv_models_list_all's listing (server.lock held). */
static int list_locked(struct server *s, struct srv_model **out, int max)
{
    int n = 0;
    for (struct srv_model *m = s->models; m; m = m->next) {
        if (n < max) {
            atomic_fetch_add(&m->refs, 1);
            /* insertion by id: the list is short */
            int i = n;
            while (i > 0 && out[i - 1]->id > m->id) {
                out[i] = out[i - 1];
                i--;
            }
            out[i] = m;
        }
        n++;
    }
    return n;
}

int srv_models_list_all(struct server *s, struct srv_model **out, int max)
{
    pthread_mutex_lock(&s->lock);
    int n = list_locked(s, out, max);
    pthread_mutex_unlock(&s->lock);
    return n;
}

struct srv_retained *srv_models_snapshot(struct server *s, struct srv_model **out, int max,
                                         int *n_out, int *n_ret)
{
    pthread_mutex_lock(&s->lock);
    int n = list_locked(s, out, max);
    *n_out = n < max ? n : max;
    struct srv_retained *r = s->n_retained ? malloc((size_t)s->n_retained * sizeof(*r)) : NULL;
    *n_ret = r ? s->n_retained : 0;
    if (r)
        memcpy(r, s->retained, (size_t)s->n_retained * sizeof(*r));
    pthread_mutex_unlock(&s->lock);
    return r;
}

void srv_models_put_all(struct srv_model **ms, int n)
{
    for (int i = 0; i < n; i++)
        srv_model_put(ms[i]);
}

const char *srv_residency_name(enum residency r)
{
    switch (r) {
    case RES_ON_DISK:
        return "on_disk";
    case RES_IN_HOST:
        return "in_host";
    case RES_LOADING:
        return "loading";
    case RES_ON_DEVICE:
        return "on_device";
    case RES_OFFLOADING:
        return "offloading";
    case RES_PARTIAL:
        return "partial";
    }
    return "unknown";
}
