/* Opening a tokenizer directory: which files it has, and putting the parts together.
 *
 * Layouts, tried in this order (the first whose main file exists wins):
 *   tokenizer.json            Hugging Face tokenizers' single file (what AutoTokenizer prefers)
 *   vocab.json + merges.txt   Hugging Face's GPT-2/OPT files
 *   encoder.json + vocab.bpe  OpenAI's original GPT-2 release
 * tokenizer.json, as its parts are read:
 *   "model": {"type": "BPE", "vocab": {...}, "merges": ["a b", ...] or [["a", "b"], ...],
 *             "ignore_merges", "byte_fallback", "fuse_unk": bool, "unk_token": str | null,
 *             "dropout": null, "continuing_subword_prefix" / "end_of_word_suffix": "" | null}
 *   "normalizer" (normalize.c), "pre_tokenizer" (pretokenize.c), "decoder"
 *   (bpe_decoder.c), "added_tokens" and "post_processor" (bpe_special.c).
 * A ByteLevel pre-tokenizer makes the model byte-level (symbols in GPT-2's
 * alphabet); without one it is SentencePiece-style (symbols are text). A
 * part we do not implement is refused with an error naming it, never
 * half-honoured: it would tokenize differently. The other two layouts are
 * GPT-2's pipeline: its regex, byte-level symbols and decoder.
 */
#include "core/error.h"
#include "core/fs.h"
#include "core/jsonout.h"
#include "format/gguf.h"
#include "tokenizer/bpe_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Reads a whole file; *data is malloc'd and NUL-terminated. Through the
 * project's checked open: a regular file (a FIFO, a device, a directory in
 * its place is refused before it is read, and nothing blocks) of at most
 * BPE_FILE_MAX bytes. */
int bpe_file_read(const char *path, char **data, size_t *len)
{
    return fs_read_regular(path, BPE_FILE_MAX, data, len);
}

int bpe_json_load(const char *path, bool optional, json_t **out)
{
    return bpe_json_load_flags(path, optional, 0, out);
}

int bpe_json_load_flags(const char *path, bool optional, size_t flags, json_t **out)
{
    *out = NULL;
    char *data = NULL;
    size_t len = 0;
    int rc = bpe_file_read(path, &data, &len);
    if (rc == ERR_NOT_FOUND && optional)
        return 0;
    if (rc < 0)
        return rc;
    /* json_loadb, not json_loadf: jansson reads a FILE one getc at a time. */
    json_error_t je;
    json_t *j = json_loadb(data, len, JSON_REJECT_DUPLICATES | flags, &je);
    free(data);
    if (!j) {
        char why[JSON_ERROR_TEXT_LENGTH]; /* je.text less the bytes it quotes */
        return err_set(ERR_FORMAT, "%s: malformed JSON at line %d column %d: %s", path, je.line,
                       je.column, jsonout_parse_error(&je, why, sizeof(why)));
    }
    if (!json_is_object(j)) {
        json_decref(j);
        return err_set(ERR_FORMAT, "%s: expected a JSON object at the top level", path);
    }
    *out = j;
    return 0;
}

static bool bpe_file_exists(const char *dir, const char *name)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    struct stat st;
    return stat(path, &st) == 0;
}

static bool bpe_json_type_is(json_t *obj, const char *type)
{
    json_t *v = json_object_get(obj, "type");
    return json_is_string(v) && strcmp(json_string_value(v), type) == 0;
}

/* Reads tokenizer.json's "model" (a BPE: vocab, merges and its options) into
 * t's flags; *vocab and *merges borrow from tj. */
static int bpe_tokjson_model(struct bpe *t, json_t *tj, const char *path, json_t **vocab,
                             json_t **merges)
{
    json_t *model = json_object_get(tj, "model");
    if (!json_is_object(model))
        return err_set(ERR_FORMAT, "%s: no \"model\" object", path);
    json_t *type = json_object_get(model, "type");
    if (type && !bpe_json_type_is(model, "BPE"))
        return err_set(ERR_UNSUPPORTED,
                       "%s: model type \"%.40s\" is not supported (supported: BPE)", path,
                       json_is_string(type) ? json_string_value(type) : "?");
    static const char *const AFFIXES[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (size_t i = 0; i < 2; i++) {
        json_t *v = json_object_get(model, AFFIXES[i]);
        if (json_is_string(v) && json_string_length(v) > 0)
            return err_set(ERR_UNSUPPORTED, "%s: model.%s is not supported", path, AFFIXES[i]);
    }
    json_t *dropout = json_object_get(model, "dropout");
    if (dropout && !json_is_null(dropout) &&
        !(json_is_number(dropout) && json_number_value(dropout) == 0.0))
        return err_set(ERR_UNSUPPORTED, "%s: model.dropout is not supported (random merges)", path);
    static const char *const FLAGS[] = {"ignore_merges", "byte_fallback", "fuse_unk"};
    bool *dst[] = {&t->ignore_merges, &t->byte_fallback, &t->fuse_unk};
    for (size_t i = 0; i < 3; i++) {
        json_t *v = json_object_get(model, FLAGS[i]);
        if (v && !json_is_null(v) && !json_is_boolean(v))
            return err_set(ERR_FORMAT, "%s: model.%s is not true or false", path, FLAGS[i]);
        *dst[i] = json_is_true(v);
    }
    json_t *unk = json_object_get(model, "unk_token");
    if (unk && !json_is_null(unk) && !json_is_string(unk))
        return err_set(ERR_FORMAT, "%s: model.unk_token is not a string", path);
    *vocab = json_object_get(model, "vocab");
    *merges = json_object_get(model, "merges");
    if (!json_is_object(*vocab) || !json_is_array(*merges))
        return err_set(ERR_FORMAT, "%s: model needs a \"vocab\" object and a \"merges\" array",
                       path);
    return 0;
}

/* Puts a tokenizer together from its parts: tokjson (the tokenizer.json
 * layout; NULL for GPT-2's files at vocab_path and merges_path), the roles
 * from dir's files or from special when it is non-NULL, and the merges from
 * tokjson's list or from merges_fn. name labels errors. */
struct bpe_parts {
    enum bpe_layout layout;
    json_t *tokjson;
    const char *name, *merges_path, *dir;
    const struct bpe_special_src *special;
    int (*merges_fn)(struct bpe *t, const struct bpe_symtab *vocab, void *ctx);
    void *merges_ctx;
};

static int bpe_assemble(const struct bpe_parts *p, struct bpe **out)
{
    struct bpe *t = calloc(1, sizeof(*t));
    if (!t)
        return err_set(ERR_NOMEM, "out of memory for a tokenizer");
    t->bos = t->eos = t->pad = t->unk = t->model_unk = t->eot = -1;
    json_t *tokjson = p->tokjson, *merges = NULL;
    const char *vocab_path = p->name;
    struct bpe_symtab vocab = {0};
    struct bpe_decoder dec = {0};
    int rc;

    /* The pipeline and the vocabulary: from tokenizer.json, or GPT-2's. */
    if (p->layout == BPE_LAYOUT_TOKENIZER_JSON) {
        json_t *vocab_obj = NULL;
        if ((rc = bpe_tokjson_model(t, tokjson, vocab_path, &vocab_obj, &merges)) < 0 ||
            (rc = norm_open_json(json_object_get(tokjson, "normalizer"), vocab_path,
                                 &t->normalizer)) < 0 ||
            (rc = pretok_open_json(json_object_get(tokjson, "pre_tokenizer"), vocab_path,
                                   &t->pretok, &t->byte_level)) < 0 ||
            (rc = bpe_decoder_parse(&dec, json_object_get(tokjson, "decoder"), t->byte_level,
                                    vocab_path)) < 0 ||
            (rc = bpe_symtab_from_json(&vocab, vocab_obj, vocab_path)) < 0)
            goto fail;
    } else {
        t->byte_level = true;
        if ((rc = pretok_open_gpt2(&t->pretok)) < 0 ||
            (rc = bpe_decoder_parse(&dec, NULL, true, vocab_path)) < 0 ||
            (rc = bpe_symtab_load_file(&vocab, vocab_path)) < 0)
            goto fail;
    }

    /* Special tokens may add ids, so they come before the token table. */
    int32_t n_ids = vocab.n_ids;
    rc = p->special ? bpe_special_apply(t, p->special, p->layout, tokjson, &vocab, &n_ids)
                    : bpe_special_load(t, p->dir, p->layout, tokjson, &vocab, &n_ids);
    if (rc < 0)
        goto fail;
    if ((rc = bpe_added_sort(t)) < 0 ||
        (rc = bpe_vocab_build(t, &vocab, n_ids, &dec, vocab_path)) < 0)
        goto fail;
    memcpy(t->strip_char, dec.strip_char, sizeof(t->strip_char));
    t->strip_char_len = dec.strip_char_len;
    t->strip_start = dec.strip_start;
    if (tokjson) {
        json_t *unk = json_object_get(json_object_get(tokjson, "model"), "unk_token");
        if (json_is_string(unk))
            t->model_unk = bpe_symtab_get(&vocab, json_string_value(unk), json_string_length(unk));
    }

    /* Merges, from their own file, tokenizer.json or the caller. */
    if (p->merges_fn)
        rc = p->merges_fn(t, &vocab, p->merges_ctx);
    else if (p->layout == BPE_LAYOUT_TOKENIZER_JSON)
        rc = bpe_merges_load_json(t, &vocab, merges, vocab_path);
    else
        rc = bpe_merges_load_txt(t, &vocab, p->merges_path);
    if (rc < 0)
        goto fail;

    /* The symbol table stays: characters and whole words are looked up in it. */
    if (!(t->syms = malloc(sizeof(*t->syms)))) {
        rc = err_set(ERR_NOMEM, "out of memory for a tokenizer");
        goto fail;
    }
    *t->syms = vocab;
    if (!t->byte_level) {
        size_t n = 0;
        const char *c = norm_space_replacement(t->normalizer, &n);
        if (!c)
            c = pretok_space_replacement(t->pretok, &n);
        bpe_split_check(t, c, n);
    }
    bpe_decoder_free(&dec);
    *out = t;
    return 0;

fail:
    bpe_symtab_free(&vocab);
    bpe_decoder_free(&dec);
    bpe_close(t);
    return rc;
}

int bpe_open_parsed(json_t *tokjson, const char *name, const struct bpe_special_src *special,
                    int (*merges_fn)(struct bpe *t, const struct bpe_symtab *vocab, void *ctx),
                    void *merges_ctx, struct bpe **out)
{
    *out = NULL;
    const struct bpe_parts p = {.layout = BPE_LAYOUT_TOKENIZER_JSON,
                                .tokjson = tokjson,
                                .name = name,
                                .special = special,
                                .merges_fn = merges_fn,
                                .merges_ctx = merges_ctx};
    return bpe_assemble(&p, out);
}

int bpe_open(const char *dir, struct bpe **out)
{
    if (!out)
        return err_set(ERR_INVALID, "bpe_open: out is NULL");
    *out = NULL;
    if (!dir || !*dir)
        return err_set(ERR_INVALID, "bpe_open: no tokenizer directory given");
    struct stat st;
    if (stat(dir, &st) != 0)
        return err_set(errno == ENOENT ? ERR_NOT_FOUND : ERR_IO, "%s: %s", dir, strerror(errno));
    /* A GGUF checkpoint carries its tokenizer in its metadata (bpe_gguf.c). */
    bool has_files = S_ISDIR(st.st_mode) &&
                     (bpe_file_exists(dir, "tokenizer.json") ||
                      bpe_file_exists(dir, "vocab.json") || bpe_file_exists(dir, "encoder.json"));
    if (!has_files && gguf_is_checkpoint(dir))
        return bpe_open_gguf_path(dir, out);
    if (!S_ISDIR(st.st_mode))
        return err_set(ERR_INVALID, "%s: not a directory or a .gguf file", dir);

    struct bpe_parts p = {.dir = dir};
    const char *vocab_file, *merges_file;
    if (bpe_file_exists(dir, "tokenizer.json")) {
        p.layout = BPE_LAYOUT_TOKENIZER_JSON;
        vocab_file = "tokenizer.json";
        merges_file = NULL;
    } else if (bpe_file_exists(dir, "vocab.json")) {
        p.layout = BPE_LAYOUT_HF;
        vocab_file = "vocab.json";
        merges_file = "merges.txt";
    } else if (bpe_file_exists(dir, "encoder.json")) {
        p.layout = BPE_LAYOUT_OPENAI;
        vocab_file = "encoder.json";
        merges_file = "vocab.bpe";
    } else {
        return err_set(ERR_NOT_FOUND,
                       "%s: no tokenizer files (expected tokenizer.json, vocab.json + merges.txt, "
                       "encoder.json + vocab.bpe, or a .gguf file)",
                       dir);
    }
    char vocab_path[4096], merges_path[4096];
    snprintf(vocab_path, sizeof(vocab_path), "%s/%s", dir, vocab_file);
    p.name = vocab_path;
    if (merges_file) {
        snprintf(merges_path, sizeof(merges_path), "%s/%s", dir, merges_file);
        p.merges_path = merges_path;
    }
    json_t *tokjson = NULL;
    int rc;
    if (p.layout == BPE_LAYOUT_TOKENIZER_JSON &&
        (rc = bpe_json_load(vocab_path, false, &tokjson)) < 0)
        return rc;
    p.tokjson = tokjson;
    rc = bpe_assemble(&p, out);
    json_decref(tokjson);
    return rc;
}

void bpe_close(struct bpe *t)
{
    if (!t)
        return;
    pretok_close(t->pretok);
    norm_close(t->normalizer);
    if (t->syms)
        bpe_symtab_free(t->syms);
    free(t->syms);
    free(t->first_id);
    free(t->first_off);
    free(t->first_bytes);
    bpe_addset_free(&t->raw_set);
    bpe_addset_free(&t->norm_set);
    for (size_t i = 0; i < t->n_added; i++)
        free(t->added[i].content);
    free(t->added);
    bpe_pairs_free(&t->pairs);
    free(t->tok_off);
    free(t->tok_bytes);
    free(t->tok_flags);
    free(t);
}

int32_t bpe_vocab_size(const struct bpe *t)
{
    return t->n_vocab;
}

int32_t bpe_bos_id(const struct bpe *t)
{
    return t->bos;
}

int32_t bpe_eos_id(const struct bpe *t)
{
    return t->eos;
}

int32_t bpe_pad_id(const struct bpe *t)
{
    return t->pad;
}

int32_t bpe_unk_id(const struct bpe *t)
{
    return t->unk;
}

int32_t bpe_eot_id(const struct bpe *t)
{
    return t->eot;
}

bool bpe_adds_bos(const struct bpe *t)
{
    return t->add_bos;
}

bool bpe_is_special(const struct bpe *t, int32_t id)
{
    return id >= 0 && id < t->n_vocab && (t->tok_flags[id] & BPE_TOK_SPECIAL);
}

int32_t bpe_token_id(const struct bpe *t, const char *s, size_t n)
{
    if (!t || (!s && n > 0))
        return -1;
    for (size_t i = 0; i < t->n_added; i++) {
        if (t->added[i].len == n && memcmp(t->added[i].content, s, n) == 0)
            return t->added[i].id;
    }
    for (int32_t id = 0; id < t->n_vocab; id++) {
        if ((t->tok_flags[id] & BPE_TOK_PRESENT) && t->tok_off[id + 1] - t->tok_off[id] == n &&
            (n == 0 || memcmp(t->tok_bytes + t->tok_off[id], s, n) == 0))
            return id;
    }
    return -1;
}
