#include "cli/args.h"

#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
        printf("  %-24s %s\n", left, flags[i].help);
    }
    printf("  %-24s %s\n", "--help", "show this help and exit");
}

static int args_value(const char *cmd, struct flag *f, const char *v)
{
    char *end;
    errno = 0;
    switch (f->kind) {
    case FLAG_STR:
        *(const char **)f->dst = v;
        return 0;
    case FLAG_INT: {
        long x = strtol(v, &end, 10);
        if (*v == '\0' || *end || errno || x < INT_MIN || x > INT_MAX)
            break;
        *(int *)f->dst = (int)x;
        return 0;
    }
    case FLAG_U64: {
        unsigned long long x = strtoull(v, &end, 10);
        if (*v == '\0' || *v == '-' || *end || errno)
            break;
        *(uint64_t *)f->dst = x;
        return 0;
    }
    case FLAG_FLOAT: {
        float x = strtof(v, &end);
        if (*v == '\0' || *end || errno || !isfinite(x))
            break;
        *(float *)f->dst = x;
        return 0;
    }
    case FLAG_BOOL:
        break;
    }
    static const char *what[] = {"a string", "an integer", "a non-negative integer", "a number",
                                 "no value"};
    fprintf(stderr, "shardswap %s: --%s expects %s, got \"%s\"\n", cmd, f->name, what[f->kind], v);
    return EXIT_USAGE;
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
        if (f->seen) {
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

int cli_fail(const char *cmd)
{
    fprintf(stderr, "shardswap %s: %s\n", cmd, err_msg());
    return 1;
}
