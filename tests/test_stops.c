/* Stop strings over a growing text (server/stops.c): each case feeds a
 * completion piece by piece, as tokens decode, and checks where the text is
 * cut, that what is sendable never contains or runs into a stop string, and
 * that it only grows. */
#include <string.h>

#include "server/stops.h"
#include "test.h"

struct stop_case {
    const char *pieces[8]; /* NULL-terminated */
    char *stops[4];
    int n_stops;
    const char *want; /* the text once cut (or all of it) */
    int want_piece;   /* the piece at which the match is found (-1: none) */
};

static const struct stop_case cases[] = {
    {{" hold", " hold", " 15", NULL}, {" 15"}, 1, " hold hold", 2},
    {{" hol", "d h", "old", NULL}, {"d h"}, 1, " hol", 1},
    {{"ab", "c", "d", NULL}, {"bcd"}, 1, "a", 2},
    {{"abc", NULL}, {"x"}, 1, "abc", -1},
    {{"a", "b", "a", "b", "c", NULL}, {"abc"}, 1, "ab", 4},
    {{"xx", "yy", NULL}, {"zz", "xy"}, 2, "x", 1},
    {{"one two", NULL}, {"two", "one"}, 2, "", 0},
    {{"caf", "\xc3\xa9", " ok", NULL}, {"\xc3\xa9 "}, 1, "caf", 2},
    {{"end", NULL}, {"end of"}, 1, "end", -1},
    {{"aaa", "a", NULL}, {"aab"}, 1, "aaaa", -1},
};

TEST(cases)
{
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        const struct stop_case *k = &cases[c];
        char text[256] = "";
        size_t len = 0, safe = 0;
        int found_at = -1;
        for (int p = 0; k->pieces[p]; p++) {
            size_t old = len;
            memcpy(text + len, k->pieces[p], strlen(k->pieces[p]));
            len += strlen(k->pieces[p]);
            long at = stops_find(text, len, old, k->stops, k->n_stops);
            if (at >= 0) {
                len = (size_t)at;
                found_at = p;
                CHECK_MSG(len >= safe, "case %zu: cut at %zu before sent %zu", c, len, safe);
                break;
            }
            size_t s = stops_safe(text, len, k->stops, k->n_stops);
            CHECK_MSG(s >= safe, "case %zu: safe went back from %zu to %zu", c, safe, s);
            safe = s;
        }
        text[len] = '\0';
        CHECK_MSG(strcmp(text, k->want) == 0, "case %zu: got '%s', want '%s'", c, text, k->want);
        CHECK_MSG(found_at == k->want_piece, "case %zu: matched at piece %d, want %d", c, found_at,
                  k->want_piece);
    }
}

TEST(edges)
{
    /* nothing to match */
    CHECK(stops_find("abc", 3, 0, NULL, 0) == -1);
    /* no text yet: a request's buffer is NULL until its first bytes */
    {
        char *one[] = {"x"};
        CHECK(stops_find(NULL, 0, 0, one, 1) == -1 && stops_safe(NULL, 0, one, 1) == 0);
    }
    CHECK(stops_safe("abc", 3, NULL, 0) == 3);
    char *st[] = {"\xc3\xa9t\xc3\xa9"};
    /* a held-back tail starts on a character boundary */
    CHECK(stops_safe("caf\xc3\xa9", 5, st, 1) == 3);
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, NULL);
}
