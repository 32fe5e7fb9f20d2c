/* core/pyre.h: patterns from config files read as Python's re reads them
 * (each expected value below is what Python 3.11's re.match/re.fullmatch
 * gives), and the bounds a hostile file meets: nested quantifiers that
 * made glibc's regcomp allocate gigabytes (the fuzz target's out-of-memory
 * input), nested counted repeats, catastrophic backtracking, length. */
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "core/pyre.h"
#include "test.h"

struct pyre_case {
    const char *pattern, *s;
    enum pyre_anchor anchor;
    bool match; /* Python's answer */
};

TEST(python)
{
    static const struct pyre_case cases[] = {
        {".*\\.(k_proj|o_proj)", "model.layers.0.self_attn.k_proj", PYRE_FULLMATCH, true},
        {".*\\.(k_proj|o_proj)", "model.layers.0.self_attn.k_proj.x", PYRE_FULLMATCH, false},
        {".*\\.(?:q_proj|v_proj)", "model.layers.3.self_attn.v_proj", PYRE_FULLMATCH, true},
        {"model\\.layers\\.\\d+\\.mlp\\.\\w+_proj", "model.layers.12.mlp.down_proj",
         PYRE_FULLMATCH, true},
        {"model\\.layers\\.\\d+\\.mlp\\.\\w+_proj", "model.layers.x.mlp.down_proj", PYRE_FULLMATCH,
         false},
        {".*?q_proj", "a.q_proj", PYRE_FULLMATCH, true},
        {"(?P<p>[qkv])_proj", "k_proj", PYRE_FULLMATCH, true},
        {"model\\.layers", "model.layers.0", PYRE_MATCH, true},
        {"model\\.layers", "model.layers.0", PYRE_FULLMATCH, false},
        {"layers", "model.layers", PYRE_MATCH, false}, /* re.match: from the start only */
        {".*(?<!lm_head)$", "model.lm_head", PYRE_FULLMATCH, false},
        {"(?i)Q_PROJ", "q_proj", PYRE_FULLMATCH, true},
        {"[^.]+\\.[^.]+", "a.b.c", PYRE_MATCH, true},
        {"a|b$", "bc", PYRE_MATCH, false},
        {"x++", "xxx", PYRE_FULLMATCH, true}, /* possessive, as Python 3.11 */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct pyre_case *c = &cases[i];
        bool m = !c->match;
        int rc = pyre_match_once(c->pattern, c->s, c->anchor, &m);
        CHECK_MSG(rc == 0, "\"%s\": %s", c->pattern, err_msg());
        CHECK_MSG(m == c->match, "\"%s\" against \"%s\" (%s): %d, Python says %d", c->pattern,
                  c->s, c->anchor == PYRE_MATCH ? "match" : "fullmatch", m, c->match);
    }
    /* one compiled pattern, many subjects */
    struct pyre *re;
    CHECK(pyre_compile("model\\.layers\\.[0-9]+\\.self_attn\\.[qkv]_proj", &re) == 0);
    if (!re)
        return;
    char s[64];
    for (int l = 0; l < 40; l++) {
        bool m = false;
        snprintf(s, sizeof(s), "model.layers.%d.self_attn.%c_proj", l, "qkvo"[l % 4]);
        CHECK(pyre_match(re, s, PYRE_FULLMATCH, &m) == 0 && m == (l % 4 != 3));
    }
    pyre_free(re);
    pyre_free(NULL);
}

/* A refusal: the code, one line, the needle in it, in bounded time. */
static void expect_refused(const char *label, const char *pattern, const char *s, int code,
                           const char *needle)
{
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    bool m = true;
    int rc = pyre_match_once(pattern, s, PYRE_FULLMATCH, &m);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const char *msg = err_msg();
    CHECK_MSG(rc == code, "%s: rc %d (expected %d): %s", label, rc, code, msg);
    CHECK_MSG(!strchr(msg, '\n') && strstr(msg, needle), "%s: message \"%s\" lacks \"%s\"", label,
              msg, needle);
    printf("%s: %s (%.1f ms)\n", label, msg,
           (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6);
}

TEST(hostile)
{
    /* the fuzz target's input: glibc's regcomp took 1.5 GB for it */
    char plus[160] = "down";
    memset(plus + 4, '+', 100);
    strcpy(plus + 104, "_proj");
    expect_refused("pluses", plus, "down_proj", ERR_FORMAT, "is not a regular expression");
    /* counted repeats of groups are copies of the group: bounded by the
     * compiled size (a counted repeat of one character is one opcode) */
    expect_refused("nested counts", "((a|b){1000}){1000}", "a", ERR_FORMAT, "too large");
    expect_refused("deep counts", "(((a|bc){100}){100}){100}", "a", ERR_FORMAT, "too large");
    bool m = true;
    CHECK(pyre_match_once("(a{1000}){1000}", "a", PYRE_FULLMATCH, &m) == 0 && !m);
    /* b is in the subject, so the match is tried: every split of the a's */
    char as[4096];
    memset(as, 'a', sizeof(as) - 3);
    memcpy(as + sizeof(as) - 3, "cb", 3);
    expect_refused("backtracking", "(a|aa)*(a|aa)*(a|aa)*b", as, ERR_UNSUPPORTED,
                   "does not backtrack without bound");
    char longp[PYRE_MAX_PATTERN + 2];
    memset(longp, 'a', sizeof(longp) - 1);
    longp[sizeof(longp) - 1] = '\0';
    expect_refused("long", longp, "a", ERR_UNSUPPORTED, "expected at most 1024");
    expect_refused("syntax", "(unclosed", "x", ERR_FORMAT, "at offset 9");
    expect_refused("bad repeat", "x+++", "x", ERR_FORMAT, "is not a regular expression");
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, NULL);
}
