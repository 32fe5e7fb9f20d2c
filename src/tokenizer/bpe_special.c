/* Added and special tokens, and the BOS rule.
 *
 * Sources, all optional, in the order they are read:
 *
 * tokenizer.json (when that is the layout):
 *   "added_tokens": [{"id": 2, "content": "</s>", "special": true,
 *                     "lstrip": false, "rstrip": false, ...}, ...]
 *   "post_processor": {"type": "TemplateProcessing",
 *                      "single": [{"SpecialToken": {"id": "<s>", ...}}, {"Sequence": {"id": "A"}}],
 *                      "special_tokens": {"<s>": {"ids": [1], ...}}}
 *     (or ByteLevel, Bert/RobertaProcessing, or a "Sequence" of them): the ids
 *     put before and after the text; the first one before is the BOS.
 * tokenizer_config.json:
 *   "add_bos_token": true | false, "add_eos_token": true | false (without tokenizer.json),
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
        tok->single_word = json_is_true(json_object_get(v, "single_word"));
        json_t *nv = json_object_get(v, "normalized");
        tok->normalized = nv ? json_is_true(nv) : !tok->special; /* AddedToken's default */
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
        old->single_word |= tok->single_word;
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

/* What a post-processor puts around a single sequence: ids before and after. */
struct bpe_tpl {
    int32_t pre[8], suf[8];
    size_t n_pre, n_suf;
};

static int bpe_tpl_add(struct bpe_tpl *tp, bool before, const int32_t *ids, size_t n)
{
    int32_t *dst = before ? tp->pre : tp->suf;
    size_t *dn = before ? &tp->n_pre : &tp->n_suf;
    if (*dn + n > 8)
        return err_set(ERR_UNSUPPORTED,
                       "tokenizer.json: post_processor adds more than 8 ids on one side");
    if (before) { /* a later processor wraps what the earlier ones made */
        memmove(dst + n, dst, *dn * sizeof(*dst));
        memcpy(dst, ids, n * sizeof(*dst));
    } else {
        memcpy(dst + *dn, ids, n * sizeof(*dst));
    }
    *dn += n;
    return 0;
}

/* A [token, id] pair of Bert/RobertaProcessing. */
static int bpe_tpl_pair(json_t *pair, const char *field, int32_t *id)
{
    json_t *v = json_array_get(pair, 1);
    if (json_array_size(pair) != 2 || !json_is_integer(v) || json_integer_value(v) < 0 ||
        json_integer_value(v) >= BPE_MAX_ID)
        return err_set(ERR_FORMAT, "tokenizer.json: post_processor \"%s\" is not [token, id]",
                       field);
    *id = (int32_t)json_integer_value(v);
    return 0;
}

/* Reads tokenizer.json's "post_processor" (not null) into *tp, composing
 * those of a Sequence in order. */
static int bpe_tpl_parse(const struct bpe_special_ctx *c, json_t *pp, struct bpe_tpl *tp, int depth)
{
    json_t *type = json_object_get(pp, "type");
    if (!json_is_object(pp) || !json_is_string(type))
        return err_set(ERR_FORMAT,
                       "tokenizer.json: post_processor: expected an object with a \"type\" string");
    const char *ty = json_string_value(type);
    int rc;
    if (strcmp(ty, "Sequence") == 0) {
        json_t *list = json_object_get(pp, "processors");
        if (!json_is_array(list) || depth > 4)
            return err_set(ERR_FORMAT,
                           "tokenizer.json: post_processor Sequence: \"processors\" is not an "
                           "array (or is nested too deep)");
        size_t i;
        json_t *sub;
        json_array_foreach(list, i, sub)
        {
            if ((rc = bpe_tpl_parse(c, sub, tp, depth + 1)) < 0)
                return rc;
        }
        return 0;
    }
    if (strcmp(ty, "ByteLevel") == 0)
        return 0; /* offsets only */
    if (strcmp(ty, "BertProcessing") == 0 || strcmp(ty, "RobertaProcessing") == 0) {
        int32_t cls, sep;
        if ((rc = bpe_tpl_pair(json_object_get(pp, "cls"), "cls", &cls)) < 0 ||
            (rc = bpe_tpl_pair(json_object_get(pp, "sep"), "sep", &sep)) < 0 ||
            (rc = bpe_tpl_add(tp, true, &cls, 1)) < 0)
            return rc;
        return bpe_tpl_add(tp, false, &sep, 1);
    }
    if (strcmp(ty, "TemplateProcessing") != 0)
        return err_set(ERR_UNSUPPORTED,
                       "tokenizer.json: post_processor type \"%.40s\" is not supported "
                       "(supported: TemplateProcessing, ByteLevel, BertProcessing, "
                       "RobertaProcessing, Sequence)",
                       ty);
    json_t *single = json_object_get(pp, "single");
    json_t *specials = json_object_get(pp, "special_tokens");
    if (!json_is_array(single))
        return err_set(ERR_FORMAT,
                       "tokenizer.json: TemplateProcessing: \"single\" is not an array");
    struct bpe_tpl own = {0};
    bool seen_a = false;
    size_t i;
    json_t *piece;
    json_array_foreach(single, i, piece)
    {
        json_t *seq = json_object_get(piece, "Sequence");
        json_t *sp = json_object_get(piece, "SpecialToken");
        if (seq) {
            json_t *id = json_object_get(seq, "id");
            if (!json_is_string(id) || strcmp(json_string_value(id), "A") != 0 || seen_a)
                return err_set(ERR_FORMAT,
                               "tokenizer.json: TemplateProcessing: \"single\" must hold "
                               "Sequence A once");
            seen_a = true;
            continue;
        }
        json_t *name = json_object_get(sp, "id");
        json_t *ent =
            json_is_string(name) ? json_object_get(specials, json_string_value(name)) : NULL;
        json_t *ids = json_object_get(ent, "ids");
        if (!json_is_array(ids) && json_is_string(name)) {
            /* Not in "special_tokens": the token of that name, as older files mean it. */
            const char *nm = json_string_value(name);
            const struct bpe_added *a = bpe_added_find(c, nm, strlen(nm));
            int32_t id = a ? a->id : bpe_symtab_get(c->vocab, nm, strlen(nm));
            if (id >= 0) {
                if ((rc = bpe_tpl_add(&own, !seen_a, &id, 1)) < 0)
                    return rc;
                continue;
            }
        }
        if (!json_is_array(ids))
            return err_set(ERR_FORMAT,
                           "tokenizer.json: TemplateProcessing: single[%zu] names a special "
                           "token that is neither in \"special_tokens\" nor a known token",
                           i);
        size_t k;
        json_t *v;
        json_array_foreach(ids, k, v)
        {
            if (!json_is_integer(v) || json_integer_value(v) < 0 ||
                json_integer_value(v) >= BPE_MAX_ID)
                return err_set(ERR_FORMAT,
                               "tokenizer.json: TemplateProcessing: special token ids must be "
                               "integers in [0, %d)",
                               BPE_MAX_ID);
            int32_t id = (int32_t)json_integer_value(v);
            if ((rc = bpe_tpl_add(&own, !seen_a, &id, 1)) < 0)
                return rc;
        }
    }
    if (!seen_a)
        return err_set(ERR_FORMAT,
                       "tokenizer.json: TemplateProcessing: \"single\" has no Sequence A");
    if ((rc = bpe_tpl_add(tp, true, own.pre, own.n_pre)) < 0)
        return rc;
    return bpe_tpl_add(tp, false, own.suf, own.n_suf);
}

int bpe_special_load(struct bpe *t, const char *dir, enum bpe_layout layout, json_t *tokjson,
                     const struct bpe_symtab *vocab, int32_t *n_ids)
{
    char cfg_name[4096], map_name[4096];
    snprintf(cfg_name, sizeof(cfg_name), "%s/tokenizer_config.json", dir);
    snprintf(map_name, sizeof(map_name), "%s/special_tokens_map.json", dir);
    json_t *cfg = NULL, *map = NULL;
    int rc;
    if ((rc = bpe_json_load_flags(cfg_name, true, JSON_DECODE_INT_AS_REAL, &cfg)) == 0 &&
        (rc = bpe_json_load_flags(map_name, true, JSON_DECODE_INT_AS_REAL, &map)) == 0) {
        const struct bpe_special_src src = {.dir = dir,
                                            .tokjson_name = "tokenizer.json",
                                            .cfg = cfg,
                                            .cfg_name = cfg_name,
                                            .map = map,
                                            .map_name = map_name};
        rc = bpe_special_apply(t, &src, layout, tokjson, vocab, n_ids);
    }
    json_decref(cfg);
    json_decref(map);
    return rc;
}

int bpe_special_apply(struct bpe *t, const struct bpe_special_src *from, enum bpe_layout layout,
                      json_t *tokjson, const struct bpe_symtab *vocab, int32_t *n_ids)
{
    static const char *const OPT_DEFAULTS[N_ROLES] = {"</s>", "</s>", "</s>", "<pad>"};
    static const char *const GPT2_DEFAULTS[N_ROLES] = {"<|endoftext|>", "<|endoftext|>",
                                                       "<|endoftext|>", NULL};
    const char *const *defaults = layout == BPE_LAYOUT_OPENAI ? GPT2_DEFAULTS : OPT_DEFAULTS;
    const char *dir = from->dir, *cfg_name = from->cfg_name, *map_name = from->map_name;
    json_t *cfg = from->cfg, *map = from->map;
    int rc;
    int32_t *roles[N_ROLES] = {&t->bos, &t->eos, &t->unk, &t->pad};
    struct bpe_special_ctx c = {.t = t, .vocab = vocab, .n_ids = n_ids};

    /* Tokens with their own ids first, so that new ids go past them. */
    if (tokjson && (rc = bpe_special_from_tokjson(&c, tokjson, from->tokjson_name)) < 0)
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

    /* What encode adds around the text. With tokenizer.json, its
     * post_processor alone (null: nothing): transformers 5 drops
     * tokenizer_config.json's add_bos_token / add_eos_token when there is a
     * tokenizer.json (PreTrainedTokenizerBase.from_pretrained), and only
     * classes with their own defaults (LlamaTokenizer, ...) rebuild the
     * template, which a file-driven tokenizer does not imitate. Without
     * tokenizer.json, the config's flags, else OPT's habit (BOS first) for
     * vocab.json + merges.txt and nothing for OpenAI's GPT-2 files. */
    json_t *flag_bos = cfg ? json_object_get(cfg, "add_bos_token") : NULL;
    json_t *flag_eos = cfg ? json_object_get(cfg, "add_eos_token") : NULL;
    json_t *pp = tokjson ? json_object_get(tokjson, "post_processor") : NULL;
    struct bpe_tpl tp = {0};
    if ((flag_bos && !json_is_boolean(flag_bos)) || (flag_eos && !json_is_boolean(flag_eos))) {
        rc = err_set(ERR_FORMAT, "%s: add_bos_token and add_eos_token must be true or false",
                     cfg_name);
        goto out;
    }
    if (layout == BPE_LAYOUT_TOKENIZER_JSON) {
        if (pp && !json_is_null(pp) && (rc = bpe_tpl_parse(&c, pp, &tp, 0)) < 0)
            goto out;
        if (tp.n_pre > 0)
            t->bos = tp.pre[0];
    } else if (flag_bos || flag_eos) {
        if (json_is_true(flag_bos) && t->bos >= 0)
            tp.pre[tp.n_pre++] = t->bos;
        if (json_is_true(flag_eos) && t->eos >= 0)
            tp.suf[tp.n_suf++] = t->eos;
    } else if (layout == BPE_LAYOUT_HF && t->bos >= 0) {
        tp.pre[tp.n_pre++] = t->bos;
    }
    for (size_t i = 0; i < tp.n_pre + tp.n_suf; i++) {
        int32_t id = i < tp.n_pre ? tp.pre[i] : tp.suf[i - tp.n_pre];
        if (id >= *n_ids) {
            rc = err_set(ERR_FORMAT,
                         "tokenizer.json: post_processor adds id %d, past the vocabulary (%d ids)",
                         id, *n_ids);
            goto out;
        }
    }
    memcpy(t->tpl_pre, tp.pre, sizeof(tp.pre));
    memcpy(t->tpl_suf, tp.suf, sizeof(tp.suf));
    t->n_pre = tp.n_pre;
    t->n_suf = tp.n_suf;
    t->add_bos = tp.n_pre > 0 && tp.pre[0] == t->bos;

out:
    free(c.by_content);
    free(c.by_id);
    return rc;
}
