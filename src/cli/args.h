/* Flag parsing for the subcommands: "--name value" or "--name=value",
 * typed, with one-line errors and a generated --help. */
#ifndef SHARDSWAP_CLI_ARGS_H
#define SHARDSWAP_CLI_ARGS_H

#include <stdbool.h>
#include <stdint.h>

enum flag_kind { FLAG_STR, FLAG_INT, FLAG_U64, FLAG_FLOAT, FLAG_BOOL };

struct flag {
    const char *name;    /* without the dashes */
    enum flag_kind kind;
    void *dst;           /* const char **, int *, uint64_t *, float *, bool * */
    const char *metavar; /* "N", "DIR", ... (NULL for FLAG_BOOL) */
    const char *help;    /* one line; mention the default */
    bool required;
    bool seen;           /* set by the parser */
};

/* Table entries: FLAG(name, kind, dst, metavar, help) and the same with
 * FLAG_REQUIRED. */
#define FLAG(n, k, d, mv, h) {.name = n, .kind = k, .dst = d, .metavar = mv, .help = h}
#define FLAG_REQUIRED(n, k, d, mv, h)                                                        \
    {.name = n, .kind = k, .dst = d, .metavar = mv, .help = h, .required = true}

/* Exit statuses of the CLI. */
enum { EXIT_USAGE = 2, EXIT_HELP = -100 };

/* Parses argv[0..argc) (argv[0] is the first flag, not the command). Returns
 * 0, EXIT_HELP after printing help for --help/-h, or EXIT_USAGE after printing
 * "shardswap CMD: <what is wrong>" to stderr. */
int args_parse(const char *cmd, const char *summary, int argc, char **argv, struct flag *flags,
               int n_flags);

/* Prints "shardswap CMD: <err_msg()>" to stderr; returns 1. */
int cli_fail(const char *cmd);

#endif
