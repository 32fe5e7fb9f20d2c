#include "cli/args.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"

static void args_help(const char *cmd, const char *summary, const struct flag *flags, int n)
{
    printf("usage: shardswap %s", cmd);
    for (int i = 0; i < n; i++) {
        const struct flag *f = &flags[i];
        const char *open = f->required ? "" : "[", *close = f->required ? "" : "]";
        if (f->kind == FLAG_BOOL)
            printf(" %s--%s%s", open, f->name, close);
        else
            printf(" %s--%s %s%s", open, f->name, f->metavar, close);
    }
    printf("\n\n%s\n\n", summary);
    for (int i = 0; i < n; i++) {
        char left[64];
        snprintf(left, sizeof(left), "--%s%s%s", flags[i].name, flags[i].metavar ? " " : "",
                 flags[i].metavar ? flags[i].metavar : "");
        if (flags[i].range) /* the range a value is checked against, as the error says it */
            printf("  %-24s %s [%s]\n", left, flags[i].help, flags[i].range);
        else if (flags[i].choices)
            printf("  %-24s %s: %s\n", left, flags[i].help, flags[i].choices);
        else
            printf("  %-24s %s\n", left, flags[i].help);
    }
    printf("  %-24s %s\n", "--help", "show this help and exit");
}

int args_range_fail(const char *cmd, const char *name, const char *value, const char *range)
{
    fprintf(stderr, "shardswap %s: --%s %s is out of range (expected %s)\n", cmd, name, value,
            range);
    return EXIT_USAGE;
}

/* Parses v into f->dst. Numbers are refused with leading blanks (strtoull
 * reads " -1" as 2^64-1) and checked against the flag's range when it has
 * one; a float too small for a float's normal range (1e-45, a denormal) is a
 * number, one too large is out of range. */
/* Whether v is one of the names in choices ("a|b|c"). */
static bool choice_of(const char *choices, const char *v)
{
    size_t n = strlen(v);
    for (const char *p = choices; *p; p += strcspn(p, "|"), p += *p == '|')
        if (strncmp(p, v, n) == 0 && (p[n] == '|' || p[n] == '\0'))
            return n > 0;
    return false;
}

static int args_value(const char *cmd, struct flag *f, const char *v)
{
    char *end;
    double x = 0;
    errno = 0;
    if (f->kind != FLAG_STR && f->kind != FLAG_STRS && f->kind != FLAG_BOOL &&
        (*v == '\0' || isspace((unsigned char)*v)))
        goto bad;
    switch (f->kind) {
    case FLAG_STR:
    case FLAG_STRS:
        if (*v == '\0' && !f->empty_ok) {
            fprintf(stderr, "shardswap %s: --%s expects a non-empty %s, got \"\"\n", cmd,
                    f->name, f->metavar);
            return EXIT_USAGE;
        }
        if (f->choices && !choice_of(f->choices, v)) {
            fprintf(stderr, "shardswap %s: --%s \"%s\" is not one of %s\n", cmd, f->name, v,
                    f->choices);
            return EXIT_USAGE;
        }
        if (f->kind == FLAG_STR) {
            *(const char **)f->dst = v;
            return 0;
        }
        struct flag_strs *list = f->dst;
        if (list->n == list->cap) {
            fprintf(stderr, "shardswap %s: --%s given more than %d times\n", cmd, f->name,
                    list->cap);
            return EXIT_USAGE;
        }
        list->v[list->n++] = v;
        return 0;
    case FLAG_INT: {
        long n = strtol(v, &end, 10);
        if (*end)
            goto bad;
        if (errno || n < INT_MIN || n > INT_MAX)
            goto range;
        x = (double)n;
        if (f->range && (x < f->lo || x > f->hi))
            goto range;
        *(int *)f->dst = (int)n;
        return 0;
    }
    case FLAG_U64: {
        unsigned long long n = strtoull(v, &end, 10);
        if (*v == '-' || *end)
            goto bad;
        if (errno)
            goto range;
        x = (double)n;
        if (f->range && (x < f->lo || x > f->hi))
            goto range;
        *(uint64_t *)f->dst = n;
        return 0;
    }
    case FLAG_FLOAT: {
        float y = strtof(v, &end);
        if (*end || isnan(y))
            goto bad;
        if (!isfinite(y)) /* overflow, or "inf" */
            goto range;
        /* ERANGE with a finite result is underflow: still the nearest float */
        x = y;
        if (f->range && (x < f->lo || x > f->hi))
            goto range;
        *(float *)f->dst = y;
        return 0;
    }
    case FLAG_BOOL:
        break;
    }
bad:;
    static const char *what[] = {"a string", "an integer", "a non-negative integer", "a number",
                                 "no value", "a string"};
    fprintf(stderr, "shardswap %s: --%s expects %s, got \"%s\"\n", cmd, f->name, what[f->kind], v);
    return EXIT_USAGE;
range:
    return args_range_fail(cmd, f->name, v,
                           f->range ? f->range
                           : f->kind == FLAG_INT ? "an int"
                           : f->kind == FLAG_U64 ? "a 64-bit integer"
                                                 : "a finite float");
}

int args_parse(const char *cmd, const char *summary, int argc, char **argv, struct flag *flags,
               int n_flags)
{
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            args_help(cmd, summary, flags, n_flags);
            return EXIT_HELP;
        }
        if (strncmp(a, "--", 2) != 0) {
            fprintf(stderr, "shardswap %s: unexpected argument \"%s\" (see --help)\n", cmd, a);
            return EXIT_USAGE;
        }
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        struct flag *f = NULL;
        for (int j = 0; j < n_flags; j++)
            if (strlen(flags[j].name) == len && strncmp(flags[j].name, name, len) == 0)
                f = &flags[j];
        if (!f) {
            fprintf(stderr, "shardswap %s: unknown flag --%.*s (see --help)\n", cmd, (int)len,
                    name);
            return EXIT_USAGE;
        }
        if (f->seen && f->kind != FLAG_STRS) {
            fprintf(stderr, "shardswap %s: --%s given twice\n", cmd, f->name);
            return EXIT_USAGE;
        }
        f->seen = true;
        if (f->kind == FLAG_BOOL) {
            if (eq) {
                fprintf(stderr, "shardswap %s: --%s takes no value\n", cmd, f->name);
                return EXIT_USAGE;
            }
            *(bool *)f->dst = true;
            continue;
        }
        const char *v = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!v) {
            fprintf(stderr, "shardswap %s: --%s needs a value (%s)\n", cmd, f->name, f->metavar);
            return EXIT_USAGE;
        }
        int rc = args_value(cmd, f, v);
        if (rc)
            return rc;
    }
    for (int j = 0; j < n_flags; j++) {
        if (flags[j].required && !flags[j].seen) {
            fprintf(stderr, "shardswap %s: missing required flag --%s %s (see --help)\n", cmd,
                    flags[j].name, flags[j].metavar ? flags[j].metavar : "");
            return EXIT_USAGE;
        }
    }
    return 0;
}

int args_usage_fail(const char *cmd)
{
    fprintf(stderr, "shardswap %s: %s\n", cmd, err_msg());
    return EXIT_USAGE;
}

int cli_fail(const char *cmd)
{
    fprintf(stderr, "shardswap %s: %s\n", cmd, err_msg());
    return 1;
}

int cli_compute(const char *s, bool *set, enum kern_compute *c)
{
    if (kern_compute_choice(s, set, c) < 0)
        return err_set(ERR_INVALID, "--compute %s: expected f32, bf16 or auto", s);
    return 0;
}

int cli_check_out_dir(const char *dir)
{
    struct stat st;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return err_set(ERR_IO, "--out-dir %s: cannot create it: %s", dir, strerror(errno));
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return err_set(ERR_INVALID, "--out-dir %s: not a directory", dir);
    if (access(dir, W_OK | X_OK) != 0)
        return err_set(ERR_IO, "--out-dir %s: cannot write there: %s", dir, strerror(errno));
    return 0;
}

int cli_ids_parse(const char *flag, const char *s, int32_t **out, int *n_out)
{
    int cap = 16, n = 0;
    int32_t *ids = malloc((size_t)cap * sizeof(int32_t));
    if (!ids)
        return err_set(ERR_NOMEM, "out of memory");
    const char *p = s;
    for (;;) {
        char *end;
        errno = 0;
        /* digits only: strtol would take leading blanks and a sign */
        long v = *p >= '0' && *p <= '9' ? strtol(p, &end, 10) : (end = (char *)p, 0);
        if (end == p || errno || v < 0 || v > INT32_MAX || (*end != ',' && *end != '\0')) {
            free(ids);
            return err_set(ERR_INVALID, "--%s: \"%s\" is not a comma-separated list of token ids "
                                        "(expected e.g. 2,250,1345)", flag, s);
        }
        if (n == cap) {
            int32_t *b = realloc(ids, (size_t)(cap *= 2) * sizeof(int32_t));
            if (!b) {
                free(ids);
                return err_set(ERR_NOMEM, "out of memory");
            }
            ids = b;
        }
        ids[n++] = (int32_t)v;
        if (*end == '\0')
            break;
        p = end + 1;
    }
    *out = ids;
    *n_out = n;
    return 0;
}

/* Reads all of stdin, at most max bytes, into a malloc'd buffer. */
int cli_read_stdin(size_t max, char **out, size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    if (!buf)
        return err_set(ERR_NOMEM, "out of memory");
    size_t got;
    while ((got = fread(buf + n, 1, cap - n, stdin)) > 0) {
        n += got;
        if (n > max) {
            free(buf);
            return err_set(ERR_INVALID,
                           "stdin holds more than %zu bytes of text (expected at most %zu "
                           "bytes, %zu MiB: split the input)",
                           max, max, max >> 20);
        }
        if (n == cap) {
            /* one byte past max is enough to tell that the input is too long */
            size_t grown = cap * 2 < max + 1 ? cap * 2 : max + 1;
            char *b = realloc(buf, grown);
            if (!b) {
                free(buf);
                return err_set(ERR_NOMEM, "out of memory reading stdin");
            }
            buf = b;
            cap = grown;
        }
    }
    if (ferror(stdin)) {
        free(buf);
        return err_set(ERR_IO, "cannot read stdin");
    }
    *out = buf;
    *len = n;
    return 0;
}
