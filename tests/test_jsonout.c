/* core/jsonout.h: numbers rounded or null, strings always valid UTF-8, one
 * line per object on stdout, and write errors reported. */
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/jsonout.h"
#include "test.h"

static void check_real(json_t *j, double want)
{
    CHECK_MSG(json_is_real(j) && json_real_value(j) == want, "got %g, want %g",
              json_is_real(j) ? json_real_value(j) : NAN, want);
    json_decref(j);
}

static void check_string(const char *in, const char *want)
{
    json_t *j = jsonout_string(in);
    CHECK_MSG(json_is_string(j) && strcmp(json_string_value(j), want) == 0,
              "jsonout_string gave \"%s\", want \"%s\"", j ? json_string_value(j) : "(null)", want);
    json_decref(j);
}

/* Runs jsonout_print(j) with stdout on path; returns its result, the bytes
 * written in out. */
static int print_to(const char *path, json_t *j, char *out, size_t cap)
{
    fflush(stdout);
    int saved = dup(1), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(saved >= 0 && fd >= 0);
    dup2(fd, 1);
    close(fd);
    int rc = jsonout_print(j);
    fflush(stdout);
    clearerr(stdout);
    dup2(saved, 1);
    close(saved);
    out[0] = 0;
    FILE *f = fopen(path, "r");
    if (f) {
        size_t n = fread(out, 1, cap - 1, f);
        out[n] = 0;
        fclose(f);
    }
    return rc;
}

/* numbers: rounded to the places asked, kept whole when decimals < 0,
 * null when JSON cannot hold them */
TEST(numbers)
{
    check_real(jsonout_real(0.1234567, 6), 0.123457);
    check_real(jsonout_real(-2.5e-7, 6), -0.0);
    check_real(jsonout_real(1234.5678, 2), 1234.57);
    check_real(jsonout_real(0.1234567, -1), 0.1234567);
    check_real(jsonout_real(1e300, 6), 1e300); /* too big to scale: as is */
    json_t *n = jsonout_real(NAN, 3);
    CHECK(json_is_null(n));
    json_decref(n);
    n = jsonout_real(-INFINITY, 3);
    CHECK(json_is_null(n));
    json_decref(n);
}

/* strings: valid UTF-8 as is, each invalid byte as U+FFFD */
TEST(strings)
{
    check_string("a\"b\\c/d", "a\"b\\c/d");
    check_string("caf\xc3\xa9 \xf0\x9f\x98\x80", "caf\xc3\xa9 \xf0\x9f\x98\x80");
    check_string("x\xffy", "x\xef\xbf\xbdy");
    check_string("\xe2\x82", "\xef\xbf\xbd\xef\xbf\xbd");                 /* truncated */
    check_string("\xc0\xaf", "\xef\xbf\xbd\xef\xbf\xbd");                 /* overlong */
    check_string("\xed\xa0\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"); /* surrogate */
    json_t *n = jsonout_string(NULL);
    CHECK(json_is_null(n));
    json_decref(n);
}

/* printing: one line that parses back to the same values; errors: nothing
 * to print, and a device that takes nothing */
TEST(print)
{
    char path[] = "/tmp/shardswap_jsonout_XXXXXX", out[4096];
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    json_t *j =
        json_pack("{s:o, s:o, s:o, s:i, s:[o, o]}", "model", jsonout_string("di\"r\\\xff"),
                  "load_s", jsonout_real(0.000123456789, 6), "ratio", jsonout_real(INFINITY, 3),
                  "n", 3, "xs", jsonout_real(0.25, 6), jsonout_real(1e-9, 6));
    CHECK(print_to(path, j, out, sizeof(out)) == 0);
    CHECK_MSG(strcmp(out,
                     "{\"model\": \"di\\\"r\\\\\xef\xbf\xbd\", \"load_s\": 0.000123, \"ratio\": "
                     "null, \"n\": 3, \"xs\": [0.25, 0.0]}\n") == 0,
              "printed %s", out);
    json_error_t je;
    json_t *back = json_loads(out, 0, &je);
    CHECK_MSG(back && strcmp(json_string_value(json_object_get(back, "model")),
                             "di\"r\\\xef\xbf\xbd") == 0,
              "%s", je.text);
    json_decref(back);

    CHECK(print_to(path, NULL, out, sizeof(out)) == ERR_NOMEM && out[0] == 0);
    CHECK(strstr(err_msg(), "out of memory"));
    CHECK(print_to("/dev/full", json_pack("{s:i}", "a", 1), out, sizeof(out)) == ERR_IO);
    CHECK_MSG(strcmp(err_msg(), "writing to stdout: No space left on device") == 0, "%s",
              err_msg());
    unlink(path);
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, NULL);
}
