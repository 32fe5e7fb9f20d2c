/* Loading BPE merges, from merges.txt or tokenizer.json, into the pair table.
 *
 * merges.txt (OpenAI's name: vocab.bpe):
 *   UTF-8 text, one merge per line: "<A> <B>", two symbols and one space.
 *   Lines starting with "#version" and empty lines are skipped; a trailing
 *   "\r" is ignored. Line order is priority: the first merge applies first.
 *   A, B and the merged symbol AB must all be in the vocab.
 *
 * tokenizer.json "model"."merges": a JSON array in the same order whose
 *   items are either "<A> <B>" strings or ["<A>", "<B>"] pairs.
 */
#include "core/error.h"
#include "tokenizer/bpe_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Where a merge came from, for error messages; formatted only on error. */
struct bpe_merge_src {
    const char *path;
    const char *field; /* field[index] of a JSON list (model.merges), else NULL: line `index` */
    size_t index;
};

static const char *bpe_merge_where(const struct bpe_merge_src *src, char *buf, size_t cap)
{
    if (src->field)
        snprintf(buf, cap, "%s: %s[%zu]", src->path, src->field, src->index);
    else
        snprintf(buf, cap, "%s:%zu", src->path, src->index);
    return buf;
}

/* Looks up the merge A B (and AB) in vocab and adds it to the pair table with
 * the given rank. */
static int bpe_merge_add(struct bpe *t, const struct bpe_symtab *vocab, const char *a, size_t alen,
                         const char *b, size_t blen, int32_t rank, const struct bpe_merge_src *src)
{
    char q[96], where[512];
    int32_t ia = bpe_symtab_get(vocab, a, alen);
    if (ia < 0)
        return err_set(ERR_FORMAT, "%s: symbol %s is not in the vocabulary",
                       bpe_merge_where(src, where, sizeof(where)),
                       bpe_quote(a, alen, q, sizeof(q)));
    int32_t ib = bpe_symtab_get(vocab, b, blen);
    if (ib < 0)
        return err_set(ERR_FORMAT, "%s: symbol %s is not in the vocabulary",
                       bpe_merge_where(src, where, sizeof(where)),
                       bpe_quote(b, blen, q, sizeof(q)));
    char small[256];
    char *ab = alen + blen <= sizeof(small) ? small : malloc(alen + blen);
    if (!ab)
        return err_set(ERR_NOMEM, "%s: out of memory", bpe_merge_where(src, where, sizeof(where)));
    memcpy(ab, a, alen);
    memcpy(ab + alen, b, blen);
    int32_t iab = bpe_symtab_get(vocab, ab, alen + blen);
    int rc = 0;
    if (iab < 0)
        rc = err_set(ERR_FORMAT, "%s: merged symbol %s is not in the vocabulary",
                     bpe_merge_where(src, where, sizeof(where)),
                     bpe_quote(ab, alen + blen, q, sizeof(q)));
    else
        bpe_pairs_put(&t->pairs, ia, ib, rank, iab);
    if (ab != small)
        free(ab);
    return rc;
}

int bpe_merges_load_txt(struct bpe *t, const struct bpe_symtab *vocab, const char *path)
{
    char *data;
    size_t len = 0;
    int rc = bpe_file_read(path, &data, &len);
    if (rc < 0)
        return rc;
    size_t n_lines = 1;
    for (size_t i = 0; i < len; i++)
        n_lines += data[i] == '\n';
    if ((rc = bpe_pairs_init(&t->pairs, n_lines)) < 0)
        goto out;

    int32_t rank = 0;
    size_t line_no = 0;
    for (char *line = data; line < data + len;) {
        char *eol = memchr(line, '\n', (size_t)(data + len - line));
        if (!eol)
            eol = data + len;
        char *next = eol + 1;
        line_no++;
        if (eol > line && eol[-1] == '\r')
            eol--;
        size_t n = (size_t)(eol - line);
        if (n == 0 || (n >= 8 && memcmp(line, "#version", 8) == 0)) {
            line = next;
            continue;
        }
        struct bpe_merge_src src = {.path = path, .index = line_no};
        char *sp = memchr(line, ' ', n);
        if (!sp || sp == line || sp + 1 == eol || memchr(sp + 1, ' ', (size_t)(eol - sp - 1))) {
            char where[512];
            /* the line is not quoted: the file may be any file a link names */
            rc = err_set(ERR_FORMAT,
                         "%s: expected two symbols separated by one space (a line "
                         "of %zu bytes)",
                         bpe_merge_where(&src, where, sizeof(where)), n);
            goto out;
        }
        rc = bpe_merge_add(t, vocab, line, (size_t)(sp - line), sp + 1, (size_t)(eol - sp - 1),
                           rank++, &src);
        if (rc < 0)
            goto out;
        line = next;
    }
out:
    free(data);
    return rc;
}

int bpe_merges_load_json(struct bpe *t, const struct bpe_symtab *vocab, json_t *merges,
                         const char *path)
{
    return bpe_merges_load_list(t, vocab, merges, path, "model.merges");
}

int bpe_merges_load_list(struct bpe *t, const struct bpe_symtab *vocab, json_t *merges,
                         const char *path, const char *field)
{
    if (!json_is_array(merges))
        return err_set(ERR_FORMAT, "%s: %s is not an array", path, field);
    int rc = bpe_pairs_init(&t->pairs, json_array_size(merges));
    if (rc < 0)
        return rc;
    size_t i;
    json_t *m;
    json_array_foreach(merges, i, m)
    {
        struct bpe_merge_src src = {.path = path, .field = field, .index = i};
        const char *a = NULL, *b = NULL;
        size_t alen = 0, blen = 0;
        if (json_is_string(m)) {
            a = json_string_value(m);
            size_t n = json_string_length(m);
            const char *sp = memchr(a, ' ', n);
            if (sp && sp != a && sp + 1 != a + n &&
                !memchr(sp + 1, ' ', (size_t)(a + n - sp - 1))) {
                alen = (size_t)(sp - a);
                b = sp + 1;
                blen = n - alen - 1;
            }
        } else if (json_is_array(m) && json_array_size(m) == 2 &&
                   json_is_string(json_array_get(m, 0)) && json_is_string(json_array_get(m, 1))) {
            a = json_string_value(json_array_get(m, 0));
            alen = json_string_length(json_array_get(m, 0));
            b = json_string_value(json_array_get(m, 1));
            blen = json_string_length(json_array_get(m, 1));
        }
        if (!b || alen == 0 || blen == 0) {
            char where[512];
            return err_set(ERR_FORMAT,
                           "%s: expected \"A B\" or [\"A\", \"B\"] with two non-empty symbols",
                           bpe_merge_where(&src, where, sizeof(where)));
        }
        if ((rc = bpe_merge_add(t, vocab, a, alen, b, blen, (int32_t)i, &src)) < 0)
            return rc;
    }
    return 0;
}
