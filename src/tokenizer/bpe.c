/* Opening a tokenizer directory: which files it has, and putting the parts together.
 *
 * Layouts, tried in this order (the first whose main file exists wins):
 *   tokenizer.json            Hugging Face tokenizers' single file (what AutoTokenizer prefers)
 *   vocab.json + merges.txt   Hugging Face's GPT-2/OPT files
 *   encoder.json + vocab.bpe  OpenAI's original GPT-2 release
 * Of tokenizer.json we need "model" {"type": "BPE", "vocab": {...},
 * "merges": [...]}, a null "normalizer" and a ByteLevel "pre_tokenizer"
 * (add_prefix_space false, use_regex true); anything else would tokenize
 * differently, so it is refused as unsupported rather than half-honoured.
 */
#include "core/error.h"
#include "tokenizer/bpe_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Reads a whole file; *data is malloc'd and NUL-terminated. */
int bpe_file_read(const char *path, char **data, size_t *len)
{
    *data = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return err_set(errno == ENOENT ? ERR_NOT_FOUND : ERR_IO, "%s: %s", path, strerror(errno));
    int rc = 0;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (cap - n < 65536) {
            cap = cap ? cap * 2 : 1 << 20;
            char *nb = realloc(buf, cap + 1);
            if (!nb) {
                rc = err_set(ERR_NOMEM, "%s: out of memory reading the file", path);
                goto fail;
            }
            buf = nb;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
    }
    if (ferror(f)) {
        rc = err_set(ERR_IO, "%s: read error", path);
        goto fail;
    }
    fclose(f);
    buf[n] = '\0';
    *data = buf;
    *len = n;
    return 0;
fail:
    fclose(f);
    free(buf);
    return rc;
}

int bpe_json_load(const char *path, bool optional, json_t **out)
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
    json_t *j = json_loadb(data, len, JSON_REJECT_DUPLICATES, &je);
    free(data);
    if (!j)
        return err_set(ERR_FORMAT, "%s: malformed JSON at line %d column %d: %s", path, je.line,
                       je.column, je.text);
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

/* Whether a pre_tokenizer is GPT-2's plain ByteLevel. */
static bool bpe_pretok_supported(json_t *pt)
{
    if (bpe_json_type_is(pt, "Sequence")) {
        json_t *list = json_object_get(pt, "pretokenizers");
        return json_array_size(list) == 1 && bpe_pretok_supported(json_array_get(list, 0));
    }
    return bpe_json_type_is(pt, "ByteLevel") &&
           !json_is_true(json_object_get(pt, "add_prefix_space")) &&
           !json_is_false(json_object_get(pt, "use_regex"));
}

/* Checks that tokenizer.json describes a tokenizer we reproduce exactly;
 * *vocab and *merges borrow from tj. */
static int bpe_tokjson_check(json_t *tj, const char *path, json_t **vocab, json_t **merges)
{
    json_t *model = json_object_get(tj, "model");
    if (!json_is_object(model))
        return err_set(ERR_FORMAT, "%s: no \"model\" object", path);
    json_t *type = json_object_get(model, "type");
    if (type && !bpe_json_type_is(model, "BPE"))
        return err_set(ERR_UNSUPPORTED, "%s: model type '%s' is not supported (only BPE)", path,
                       json_is_string(type) ? json_string_value(type) : "?");
    static const char *const AFFIXES[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (size_t i = 0; i < 2; i++) {
        json_t *v = json_object_get(model, AFFIXES[i]);
        if (json_is_string(v) && json_string_length(v) > 0)
            return err_set(ERR_UNSUPPORTED, "%s: model.%s is not supported", path, AFFIXES[i]);
    }
    json_t *norm = json_object_get(tj, "normalizer");
    if (norm && !json_is_null(norm))
        return err_set(ERR_UNSUPPORTED, "%s: a normalizer is not supported (GPT-2 BPE has none)",
                       path);
    if (!bpe_pretok_supported(json_object_get(tj, "pre_tokenizer")))
        return err_set(ERR_UNSUPPORTED,
                       "%s: pre_tokenizer must be ByteLevel with add_prefix_space false and "
                       "use_regex true",
                       path);
    *vocab = json_object_get(model, "vocab");
    *merges = json_object_get(model, "merges");
    if (!json_is_object(*vocab) || !json_is_array(*merges))
        return err_set(ERR_FORMAT, "%s: model needs a \"vocab\" object and a \"merges\" array",
                       path);
    return 0;
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
    if (!S_ISDIR(st.st_mode))
        return err_set(ERR_INVALID, "%s: not a directory", dir);

    enum bpe_layout layout;
    const char *vocab_file, *merges_file;
    if (bpe_file_exists(dir, "tokenizer.json")) {
        layout = BPE_LAYOUT_TOKENIZER_JSON;
        vocab_file = "tokenizer.json";
        merges_file = NULL;
    } else if (bpe_file_exists(dir, "vocab.json")) {
        layout = BPE_LAYOUT_HF;
        vocab_file = "vocab.json";
        merges_file = "merges.txt";
    } else if (bpe_file_exists(dir, "encoder.json")) {
        layout = BPE_LAYOUT_OPENAI;
        vocab_file = "encoder.json";
        merges_file = "vocab.bpe";
    } else {
        return err_set(ERR_NOT_FOUND,
                       "%s: no tokenizer files (expected tokenizer.json, vocab.json + merges.txt, "
                       "or encoder.json + vocab.bpe)",
                       dir);
    }
    char vocab_path[4096], merges_path[4096];
    snprintf(vocab_path, sizeof(vocab_path), "%s/%s", dir, vocab_file);
    if (merges_file)
        snprintf(merges_path, sizeof(merges_path), "%s/%s", dir, merges_file);

    struct bpe *t = calloc(1, sizeof(*t));
    if (!t)
        return err_set(ERR_NOMEM, "out of memory for a tokenizer");
    t->bos = t->eos = t->pad = t->unk = -1;
    json_t *tokjson = NULL, *merges = NULL;
    struct bpe_symtab vocab = {0};
    int rc;

    /* The vocabulary: its own file, or inside tokenizer.json. */
    if (layout == BPE_LAYOUT_TOKENIZER_JSON) {
        json_t *vocab_obj = NULL;
        if ((rc = bpe_json_load(vocab_path, false, &tokjson)) < 0 ||
            (rc = bpe_tokjson_check(tokjson, vocab_path, &vocab_obj, &merges)) < 0 ||
            (rc = bpe_symtab_from_json(&vocab, vocab_obj, vocab_path)) < 0)
            goto fail;
    } else if ((rc = bpe_symtab_load_file(&vocab, vocab_path)) < 0) {
        goto fail;
    }

    /* Special tokens may add ids, so they come before the token table. */
    int32_t n_ids = vocab.n_ids;
    if ((rc = bpe_special_load(t, dir, layout, tokjson, &vocab, &n_ids)) < 0)
        goto fail;
    bpe_added_sort(t);
    if ((rc = bpe_vocab_build(t, &vocab, n_ids, vocab_path)) < 0)
        goto fail;

    /* Merges, from their own file or tokenizer.json. */
    if (layout == BPE_LAYOUT_TOKENIZER_JSON)
        rc = bpe_merges_load_json(t, &vocab, merges, vocab_path);
    else
        rc = bpe_merges_load_txt(t, &vocab, merges_path);
    if (rc < 0)
        goto fail;

    if ((rc = pretok_open(&t->pretok)) < 0)
        goto fail;
    bpe_symtab_free(&vocab);
    json_decref(tokjson);
    *out = t;
    return 0;

fail:
    bpe_symtab_free(&vocab);
    json_decref(tokjson);
    bpe_close(t);
    return rc;
}

void bpe_close(struct bpe *t)
{
    if (!t)
        return;
    pretok_close(t->pretok);
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

bool bpe_adds_bos(const struct bpe *t)
{
    return t->add_bos;
}

bool bpe_is_special(const struct bpe *t, int32_t id)
{
    return id >= 0 && id < t->n_vocab && (t->tok_flags[id] & BPE_TOK_SPECIAL);
}
