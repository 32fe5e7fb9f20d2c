/* GPT-2's pre-tokenizer: the regex that cuts text into words before BPE.
 *
 * The pattern is compiled once (with the JIT when available) and shared;
 * each call makes its own match data, so concurrent calls are safe. With
 * PCRE2_MATCH_INVALID_UTF, bytes that are not valid UTF-8 never match, so
 * they show up as gaps between matches; each gap becomes a word of its own
 * and goes through the byte-level table like any other bytes. Valid text
 * leaves no gaps: every character is whitespace, a letter, a number or
 * something else, and one of the alternatives takes it.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "core/error.h"
#include "tokenizer/bpe_impl.h"

#include <assert.h>
#include <pcre2.h>
#include <stdlib.h>

static const char PRETOK_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

struct pretok {
    pcre2_code *re;
};

int pretok_open(struct pretok **out)
{
    *out = NULL;
    struct pretok *p = calloc(1, sizeof(*p));
    if (!p)
        return err_set(ERR_NOMEM, "out of memory for the pre-tokenizer");
    int errcode;
    PCRE2_SIZE erroff;
    p->re = pcre2_compile((PCRE2_SPTR)PRETOK_PATTERN, PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &errcode, &erroff, NULL);
    if (!p->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(errcode, msg, sizeof(msg));
        free(p);
        return err_set(ERR_UNSUPPORTED, "PCRE2 rejects the GPT-2 pre-tokenizer pattern at %zu: %s",
                       (size_t)erroff, (const char *)msg);
    }
    /* Without the JIT (not built in, or no executable memory) the interpreter
     * gives the same matches, only slower. */
    (void)pcre2_jit_compile(p->re, PCRE2_JIT_COMPLETE);
    *out = p;
    return 0;
}

void pretok_close(struct pretok *p)
{
    if (!p)
        return;
    pcre2_code_free(p->re);
    free(p);
}

int pretok_split(const struct pretok *p, const unsigned char *text, size_t n, pretok_word_fn fn,
                 void *ctx)
{
    if (n == 0)
        return 0;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(p->re, NULL);
    if (!md)
        return err_set(ERR_NOMEM, "out of memory for pre-tokenizer match data");
    int rc = 0;
    size_t pos = 0;
    uint32_t opts = 0;
    while (pos < n) {
        int m = pcre2_match(p->re, text, n, pos, opts, md, NULL);
        if (m == PCRE2_ERROR_JIT_STACKLIMIT && !(opts & PCRE2_NO_JIT)) {
            opts |= PCRE2_NO_JIT; /* a pathological word: let the interpreter's heap take it */
            continue;
        }
        size_t start = n, end = n;
        if (m >= 0) {
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            start = ov[0];
            end = ov[1];
        } else if (m != PCRE2_ERROR_NOMATCH) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(m, msg, sizeof(msg));
            rc = err_set(ERR_INVALID, "pre-tokenizer failed at byte %zu: %s", pos,
                         (const char *)msg);
            goto done;
        }
        if (start > pos && (rc = fn(ctx, text + pos, start - pos)) < 0)
            goto done; /* a gap of invalid UTF-8 */
        if (end > start && (rc = fn(ctx, text + start, end - start)) < 0)
            goto done;
        assert(end > pos); /* every alternative of the pattern takes a character */
        pos = end;
    }
done:
    pcre2_match_data_free(md);
    return rc < 0 ? rc : 0;
}
