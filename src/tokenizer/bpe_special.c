/* Added and special tokens, and the BOS rule.
 *
 * Sources, all optional, in the order they are read:
 *
 * tokenizer.json (when that is the layout):
 *   "added_tokens": [{"id": 2, "content": "</s>", "special": true,
 *                     "lstrip": false, "rstrip": false, ...}, ...]
 *   "post_processor": {"type": "TemplateProcessing",
 *                      "single": [{"SpecialToken": {"id": "</s>", ...}}, {"Sequence": ...}], ...}
 *     (possibly inside {"type": "Sequence", "processors": [...]}); a template
 *     that starts with a special token means "prepend it".
 * tokenizer_config.json:
 *   "add_bos_token": true | false,
 *   "bos_token" / "eos_token" / "unk_token" / "pad_token":
 *       "</s>" | {"content": "</s>", "lstrip": false, "rstrip": false, ...} | null,
 *   "additional_special_tokens": [<token>, ...],
 *   "added_tokens_decoder": {"<id>": {"content": ..., "special": ..., "lstrip": ..., ...}}
 * special_tokens_map.json: the same role and additional keys; where both
 *   name a role, this file wins, as in transformers.
 *
 * A role nobody names takes the layout's default: OPT's for vocab.json and
 * tokenizer.json (bos = eos = unk = "</s>", pad = "<pad>", prepend BOS),
 * GPT-2's for encoder.json (bos = eos = unk = "<|endoftext|>", no BOS) --
 * each only when the vocabulary has that token. A token a file names that the
 * vocabulary lacks gets the next free id, as transformers does. Every role and
 * added token is matched whole in input text; roles and tokens marked
 * "special" are what decode's skip_special drops.
 */
#include "core/error.h"
#include "tokenizer/bpe_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ROLE_BOS, ROLE_EOS, ROLE_UNK, ROLE_PAD, N_ROLES };
static const char *const ROLE_KEYS[N_ROLES] = {"bos_token", "eos_token", "unk_token", "pad_token"};

/* Reads a token given as "text" or {"content": "text", ...}: 1 with *tok
 * filled, 0 for null, or an error naming file and field. */
static int bpe_token_parse(json_t *v, const char *file, const char *field, struct bpe_added *tok)
{
    memset(tok, 0, sizeof(*tok));
    tok->id = -1;
    if (json_is_null(v))
        return 0;
    json_t *content = json_is_object(v) ? json_object_get(v, "content") : v;
    if (!json_is_string(content) || json_string_length(content) == 0)
        return err_set(ERR_FORMAT,
                       "%s: %s is neither a non-empty string nor an object with a \"content\" "
                       "string",
                       file, field);
    tok->content = (char *)json_string_value(content); /* borrowed until copied by bpe_added_put */
    tok->len = json_string_length(content);
    if (json_is_object(v)) {
        tok->lstrip = json_is_true(json_object_get(v, "lstrip"));
        tok->rstrip = json_is_true(json_object_get(v, "rstrip"));
        tok->special = json_is_true(json_object_get(v, "special"));
        json_t *id = json_object_get(v, "id");
        if (json_is_integer(id))
            tok->id = (int32_t)(json_integer_value(id) >= 0 && json_integer_value(id) < BPE_MAX_ID
                                    ? json_integer_value(id)
                                    : -2);
        if (tok->id == -2)
            return err_set(ERR_FORMAT, "%s: %s has an id outside [0, %d)", file, field, BPE_MAX_ID);
    }
    return 1;
}

/* ---- the added tokens while loading ---- */

/* What the readers below share: the tokenizer being filled, the vocabulary,
 * the next free id, and an index of t->added by content and by id, so that
 * each token costs O(1) however many there are (open addressing; a slot
 * holds an index into t->added plus one, 0 when free). */
struct bpe_special_ctx {
    struct bpe *t;
    const struct bpe_symtab *vocab;
    int32_t *n_ids;
    size_t cap;           /* entries allocated in t->added */
    uint32_t *by_content; /* (mask + 1) */
    uint32_t *by_id;      /* (mask + 1) */
    size_t mask;
};

/* The slot of content[0..len) in the index: its entry, or the free slot where it would go. */
static uint32_t *bpe_added_slot(const struct bpe_special_ctx *c, const char *content, size_t len)
{
    for (size_t k = bpe_hash_bytes(content, len) & c->mask;; k = (k + 1) & c->mask) {
        uint32_t e = c->by_content[k];
        const struct bpe_added *a = e ? &c->t->added[e - 1] : NULL;
        if (!a || (a->len == len && memcmp(a->content, content, len) == 0))
            return &c->by_content[k];
    }
}

/* The slot of id in the index: its entry, or the free slot where it would go. */
static uint32_t *bpe_added_id_slot(const struct bpe_special_ctx *c, int32_t id)
{
    size_t h = (size_t)(((uint64_t)(uint32_t)id * 0x9E3779B97F4A7C15ULL) >> 32);
    for (size_t k = h & c->mask;; k = (k + 1) & c->mask) {
        uint32_t e = c->by_id[k];
        if (!e || c->t->added[e - 1].id == id)
            return &c->by_id[k];
    }
}

static struct bpe_added *bpe_added_find(const struct bpe_special_ctx *c, const char *content,
                                        size_t len)
{
    uint32_t e = c->by_content ? *bpe_added_slot(c, content, len) : 0;
    return e ? &c->t->added[e - 1] : NULL;
}

/* Makes room for one more token in t->added and in the index (kept at most
 * half full). */
static int bpe_added_reserve(struct bpe_special_ctx *c)
{
    struct bpe *t = c->t;
    if (t->n_added == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 64;
        struct bpe_added *grown = realloc(t->added, cap * sizeof(*grown));
        if (!grown)
            return err_set(ERR_NOMEM, "out of memory for %zu added tokens", cap);
        t->added = grown;
        c->cap = cap;
    }
    if ((t->n_added + 1) * 2 <= (c->by_content ? c->mask + 1 : 0))
        return 0;
    size_t slots = c->by_content ? 2 * (c->mask + 1) : 128;
    uint32_t *by_content = calloc(slots, sizeof(*by_content));
    uint32_t *by_id = calloc(slots, sizeof(*by_id));
    if (!by_content || !by_id) {
        free(by_content);
        free(by_id);
        return err_set(ERR_NOMEM, "out of memory for an index of %zu added tokens", t->n_added);
    }
    free(c->by_content);
    free(c->by_id);
    c->by_content = by_content;
    c->by_id = by_id;
    c->mask = slots - 1;
    for (size_t i = 0; i < t->n_added; i++) {
        *bpe_added_slot(c, t->added[i].content, t->added[i].len) = (uint32_t)i + 1;
        *bpe_added_id_slot(c, t->added[i].id) = (uint32_t)i + 1;
    }
    return 0;
}

/* Adds tok (copying its content) unless a token with that content is already
 * there, in which case the flags are merged. A token without an id takes its
 * vocab entry's, or the next free one. An id another added token has is
 * ERR_FORMAT naming both (file: where tok comes from). Returns the id or an
 * error. */
static int bpe_added_put(struct bpe_special_ctx *c, const struct bpe_added *tok, const char *file)
{
    struct bpe *t = c->t;
    struct bpe_added *old = bpe_added_find(c, tok->content, tok->len);
    if (old) {
        old->special |= tok->special;
        old->lstrip |= tok->lstrip;
        old->rstrip |= tok->rstrip;
        return old->id;
    }
    int32_t id = tok->id;
    if (id < 0) {
        id = bpe_symtab_get(c->vocab, tok->content, tok->len);
        id = id >= 0 ? id : *c->n_ids;
    }
    if (id >= BPE_MAX_ID)
        return err_set(ERR_FORMAT, "too many added tokens: ids reach %d", id + 1);
    int rc = bpe_added_reserve(c);
    if (rc < 0)
        return rc;
    uint32_t *id_slot = bpe_added_id_slot(c, id);
    if (*id_slot) {
        char q1[96], q2[96];
        const struct bpe_added *same = &t->added[*id_slot - 1];
        return err_set(ERR_FORMAT,
                       "%s: added tokens %s and %s both have id %d; expected one token per id",
                       file, bpe_quote(same->content, same->len, q1, sizeof(q1)),
                       bpe_quote(tok->content, tok->len, q2, sizeof(q2)), id);
    }
    struct bpe_added *a = &t->added[t->n_added];
    *a = *tok;
    a->id = id;
    a->content = malloc(tok->len + 1);
    if (!a->content)
        return err_set(ERR_NOMEM, "out of memory for added tokens");
    memcpy(a->content, tok->content, tok->len);
    a->content[tok->len] = '\0';
    *bpe_added_slot(c, a->content, a->len) = (uint32_t)t->n_added + 1;
    *id_slot = (uint32_t)t->n_added + 1;
    t->n_added++;
    if (id >= *c->n_ids)
        *c->n_ids = id + 1;
    return id;
}

/* tokenizer.json's "added_tokens" array. */
static int bpe_special_from_tokjson(struct bpe_special_ctx *c, json_t *tokjson, const char *file)
{
    json_t *list = json_object_get(tokjson, "added_tokens");
    if (!list || json_is_null(list))
        return 0;
    if (!json_is_array(list))
        return err_set(ERR_FORMAT, "%s: added_tokens is not an array", file);
    size_t i;
    json_t *v;
    json_array_foreach(list, i, v)
    {
        char field[64];
        snprintf(field, sizeof(field), "added_tokens[%zu]", i);
        struct bpe_added tok;
        int rc = bpe_token_parse(v, file, field, &tok);
        if (rc == 0 || (rc > 0 && tok.id < 0))
            return err_set(ERR_FORMAT, "%s: %s needs an \"id\" and a \"content\"", file, field);
        if (rc < 0 || (rc = bpe_added_put(c, &tok, file)) < 0)
            return rc;
    }
    return 0;
}

/* tokenizer_config.json's "added_tokens_decoder" object, keyed by id. */
static int bpe_special_from_decoder(struct bpe_special_ctx *c, json_t *cfg, const char *file)
{
    json_t *dec = json_object_get(cfg, "added_tokens_decoder");
    if (!dec)
        return 0;
    if (!json_is_object(dec))
        return err_set(ERR_FORMAT, "%s: added_tokens_decoder is not an object", file);
    const char *key;
    json_t *v;
    json_object_foreach(dec, key, v)
    {
        char field[96], *end;
        snprintf(field, sizeof(field), "added_tokens_decoder[\"%.40s\"]", key);
        errno = 0;
        long id = strtol(key, &end, 10);
        if (*key == '\0' || *end != '\0' || errno || id < 0 || id >= BPE_MAX_ID ||
            !json_is_object(v))
            return err_set(ERR_FORMAT, "%s: %s: expected an id key and a token object", file,
                           field);
        struct bpe_added tok;
        int rc = bpe_token_parse(v, file, field, &tok);
        if (rc == 0)
            continue;
        tok.id = (int32_t)id;
        if (rc < 0 || (rc = bpe_added_put(c, &tok, file)) < 0)
            return rc;
    }
    return 0;
}

/* "additional_special_tokens" of a config file. */
static int bpe_special_additional(struct bpe_special_ctx *c, json_t *cfg, const char *file)
{
    json_t *list = cfg ? json_object_get(cfg, "additional_special_tokens") : NULL;
    if (!list || json_is_null(list))
        return 0;
    if (!json_is_array(list))
        return err_set(ERR_FORMAT, "%s: additional_special_tokens is not an array", file);
    size_t i;
    json_t *v;
    json_array_foreach(list, i, v)
    {
        char field[64];
        snprintf(field, sizeof(field), "additional_special_tokens[%zu]", i);
        struct bpe_added tok;
        int rc = bpe_token_parse(v, file, field, &tok);
        if (rc == 0)
            continue;
        tok.special = true;
        tok.id = -1;
        if (rc < 0 || (rc = bpe_added_put(c, &tok, file)) < 0)
            return rc;
    }
    return 0;
}

/* The special token a TemplateProcessing post-processor puts first for a
 * single sequence, or NULL. */
static const char *bpe_template_first_special(json_t *pp)
{
    if (!json_is_object(pp))
        return NULL;
    json_t *type = json_object_get(pp, "type");
    if (json_is_string(type) && strcmp(json_string_value(type), "Sequence") == 0) {
        size_t i;
        json_t *sub;
        json_array_foreach(json_object_get(pp, "processors"), i, sub)
        {
            const char *s = bpe_template_first_special(sub);
            if (s)
                return s;
        }
        return NULL;
    }
    if (!json_is_string(type) || strcmp(json_string_value(type), "TemplateProcessing") != 0)
        return NULL;
    json_t *first = json_array_get(json_object_get(pp, "single"), 0);
    json_t *id = json_object_get(json_object_get(first, "SpecialToken"), "id");
    return json_is_string(id) ? json_string_value(id) : NULL;
}

int bpe_special_load(struct bpe *t, const char *dir, enum bpe_layout layout, json_t *tokjson,
                     const struct bpe_symtab *vocab, int32_t *n_ids)
{
    static const char *const OPT_DEFAULTS[N_ROLES] = {"</s>", "</s>", "</s>", "<pad>"};
    static const char *const GPT2_DEFAULTS[N_ROLES] = {"<|endoftext|>", "<|endoftext|>",
                                                       "<|endoftext|>", NULL};
    const char *const *defaults = layout == BPE_LAYOUT_OPENAI ? GPT2_DEFAULTS : OPT_DEFAULTS;
    char cfg_name[4096], map_name[4096];
    snprintf(cfg_name, sizeof(cfg_name), "%s/tokenizer_config.json", dir);
    snprintf(map_name, sizeof(map_name), "%s/special_tokens_map.json", dir);
    json_t *cfg = NULL, *map = NULL;
    int rc;
    int32_t *roles[N_ROLES] = {&t->bos, &t->eos, &t->unk, &t->pad};
    struct bpe_special_ctx c = {.t = t, .vocab = vocab, .n_ids = n_ids};

    if ((rc = bpe_json_load(cfg_name, true, &cfg)) < 0 ||
        (rc = bpe_json_load(map_name, true, &map)) < 0)
        goto out;

    /* Tokens with their own ids first, so that new ids go past them. */
    if (tokjson && (rc = bpe_special_from_tokjson(&c, tokjson, "tokenizer.json")) < 0)
        goto out;
    if (cfg && (rc = bpe_special_from_decoder(&c, cfg, cfg_name)) < 0)
        goto out;

    /* The four roles. */
    for (int r = 0; r < N_ROLES; r++) {
        *roles[r] = -1;
        json_t *src = map ? json_object_get(map, ROLE_KEYS[r]) : NULL;
        const char *file = map_name;
        if (!src && cfg) {
            src = json_object_get(cfg, ROLE_KEYS[r]);
            file = cfg_name;
        }
        struct bpe_added tok;
        if (src) {
            if ((rc = bpe_token_parse(src, file, ROLE_KEYS[r], &tok)) <= 0) {
                if (rc < 0)
                    goto out;
                continue; /* null: no such role */
            }
            tok.id = -1;
        } else {
            /* A default applies only when the vocabulary has it. */
            const char *d = defaults[r];
            if (!d ||
                (bpe_symtab_get(vocab, d, strlen(d)) < 0 && !bpe_added_find(&c, d, strlen(d))))
                continue;
            tok = (struct bpe_added){.content = (char *)d, .len = strlen(d), .id = -1};
            file = dir;
        }
        tok.special = true;
        if ((rc = bpe_added_put(&c, &tok, file)) < 0)
            goto out;
        *roles[r] = rc;
    }
    if ((rc = bpe_special_additional(&c, map, map_name)) < 0 ||
        (rc = bpe_special_additional(&c, cfg, cfg_name)) < 0)
        goto out;
    rc = 0;

    /* The BOS rule: the config's flag, else the template's first token, else
     * the layout's habit. */
    json_t *flag = cfg ? json_object_get(cfg, "add_bos_token") : NULL;
    const char *first =
        tokjson ? bpe_template_first_special(json_object_get(tokjson, "post_processor")) : NULL;
    if (flag && !json_is_boolean(flag)) {
        rc = err_set(ERR_FORMAT, "%s: add_bos_token is not true or false", cfg_name);
        goto out;
    } else if (flag) {
        t->add_bos = json_is_true(flag);
    } else if (first) {
        struct bpe_added *a = bpe_added_find(&c, first, strlen(first));
        int32_t id = bpe_symtab_get(vocab, first, strlen(first));
        if (!a && id < 0) {
            rc = err_set(ERR_FORMAT,
                         "tokenizer.json: post_processor prepends '%.64s', which is "
                         "not a known token",
                         first);
            goto out;
        }
        t->bos = a ? a->id : id;
        t->add_bos = true;
    } else {
        t->add_bos = layout != BPE_LAYOUT_OPENAI;
    }
    if (t->bos < 0)
        t->add_bos = false;

out:
    free(c.by_content);
    free(c.by_id);
    json_decref(cfg);
    json_decref(map);
    return rc;
}
