/* Python-syntax regular expressions from config files, by PCRE2 (pyre.h).
 *
 * The bounds: PCRE2 reads the pattern's length from its compile context;
 * its memory comes through a general context whose allocator refuses any
 * block over PYRE_MAX_BLOCK, so a pattern whose counted repeats nest
 * ("(a{999}){999}") fails to compile instead of allocating gigabytes (glibc's
 * regcomp, which this replaces, duplicated the tree of each repeat: 1.5 GB
 * for "x++++...+" of 100 pluses); the compiled size is checked after. A match
 * runs under match and heap limits far above what a module name against a
 * config's pattern takes (hundreds of steps) and far below what makes a
 * load slow. */
#include "core/pyre.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

#define PYRE_MAX_BLOCK (1u << 20)    /* bytes: any one allocation PCRE2 asks for */
#define PYRE_MATCH_LIMIT 100000u     /* PCRE2's backtracking steps for one match */
#define PYRE_HEAP_LIMIT_KIB 1024u    /* PCRE2's backtracking memory for one match */

struct pyre {
    pcre2_code *code;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    char pattern[]; /* for messages */
};

static void *pyre_malloc(PCRE2_SIZE n, void *ctx)
{
    (void)ctx;
    return n > PYRE_MAX_BLOCK ? NULL : malloc(n);
}

static void pyre_mfree(void *p, void *ctx)
{
    (void)ctx;
    free(p);
}

static pcre2_general_context *pyre_general;
static pthread_once_t pyre_general_once = PTHREAD_ONCE_INIT;

static void pyre_general_make(void)
{
    pyre_general = pcre2_general_context_create(pyre_malloc, pyre_mfree, NULL);
}

void pyre_free(struct pyre *re)
{
    if (!re)
        return;
    pcre2_match_data_free(re->md);
    pcre2_match_context_free(re->mctx);
    pcre2_code_free(re->code);
    free(re);
}

int pyre_compile(const char *pattern, struct pyre **out)
{
    *out = NULL;
    size_t len = strlen(pattern);
    if (len > PYRE_MAX_PATTERN)
        return err_set(ERR_UNSUPPORTED, "regular expression of %zu bytes (expected at most %d)",
                       len, PYRE_MAX_PATTERN);
    pthread_once(&pyre_general_once, pyre_general_make);
    pcre2_general_context *g = pyre_general;
    struct pyre *re = calloc(1, sizeof(*re) + len + 1);
    pcre2_compile_context *cc = g ? pcre2_compile_context_create(g) : NULL;
    if (!re || !cc) {
        free(re);
        pcre2_compile_context_free(cc);
        return err_set(ERR_NOMEM, "out of memory compiling a regular expression");
    }
    memcpy(re->pattern, pattern, len + 1);
    int code;
    PCRE2_SIZE off;
    re->code = pcre2_compile((PCRE2_SPTR)pattern, len, 0, &code, &off, cc);
    pcre2_compile_context_free(cc);
    if (!re->code) {
        PCRE2_UCHAR why[160];
        pcre2_get_error_message(code, why, sizeof(why));
        pyre_free(re);
        return err_set(ERR_FORMAT,
                       "\"%.200s\" is not a regular expression: %s at offset %zu (expected "
                       "Python's re syntax, compiling to at most %d KiB)",
                       pattern, (const char *)why, (size_t)off, PYRE_MAX_COMPILED >> 10);
    }
    size_t size = 0;
    pcre2_pattern_info(re->code, PCRE2_INFO_SIZE, &size);
    if (size > PYRE_MAX_COMPILED) {
        pyre_free(re);
        return err_set(ERR_UNSUPPORTED,
                       "regular expression \"%.200s\" compiles to %zu bytes (expected at most %d: "
                       "nested counted repeats?)",
                       pattern, size, PYRE_MAX_COMPILED);
    }
    re->md = pcre2_match_data_create(1, g);
    re->mctx = pcre2_match_context_create(g);
    if (!re->md || !re->mctx) {
        pyre_free(re);
        return err_set(ERR_NOMEM, "out of memory compiling a regular expression");
    }
    pcre2_set_match_limit(re->mctx, PYRE_MATCH_LIMIT);
    pcre2_set_heap_limit(re->mctx, PYRE_HEAP_LIMIT_KIB);
    *out = re;
    return 0;
}

int pyre_match(const struct pyre *re, const char *s, enum pyre_anchor anchor, bool *match)
{
    uint32_t opts = PCRE2_ANCHORED | (anchor == PYRE_FULLMATCH ? PCRE2_ENDANCHORED : 0);
    int rc = pcre2_match(re->code, (PCRE2_SPTR)s, strlen(s), 0, opts, re->md, re->mctx);
    *match = rc >= 0;
    if (rc >= 0 || rc == PCRE2_ERROR_NOMATCH)
        return 0;
    PCRE2_UCHAR why[160];
    pcre2_get_error_message(rc, why, sizeof(why));
    return err_set(ERR_UNSUPPORTED,
                   "regular expression \"%.200s\" against \"%.200s\": %s (expected a pattern that "
                   "does not backtrack without bound)",
                   re->pattern, s, (const char *)why);
}

int pyre_match_once(const char *pattern, const char *s, enum pyre_anchor anchor, bool *match)
{
    struct pyre *re;
    int rc = pyre_compile(pattern, &re);
    if (rc < 0)
        return rc;
    rc = pyre_match(re, s, anchor, match);
    pyre_free(re);
    return rc;
}
