/* Flag parsing for the subcommands: "--name value" or "--name=value",
 * typed, with one-line errors and a generated --help. */
#ifndef SHARDSWAP_CLI_ARGS_H
#define SHARDSWAP_CLI_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/kernels.h"

enum flag_kind { FLAG_STR, FLAG_INT, FLAG_U64, FLAG_FLOAT, FLAG_BOOL, FLAG_STRS };

/* FLAG_STRS: a string flag that may be given again; each value in turn
 * into v[n++] (v, the caller's, has room for cap: argc is always enough). */
struct flag_strs {
    const char **v;
    int n, cap;
};

struct flag {
    const char *name;    /* without the dashes */
    enum flag_kind kind;
    void *dst;           /* const char **, int *, uint64_t *, float *, bool *,
                            struct flag_strs * */
    const char *metavar; /* "N", "DIR", ... (NULL for FLAG_BOOL) */
    const char *help;    /* one line; mention the default */
    bool required;
    bool empty_ok;       /* FLAG_STR: "" is a value (otherwise refused) */
    /* FLAG_STR, FLAG_STRS: the values allowed, "a|b|c" (NULL: any); another
     * is refused with the list, as a bad flag is */
    const char *choices;
    /* numeric kinds: when range is set, a value outside lo..hi (inclusive)
     * is refused with "--NAME V is out of range (expected RANGE)" */
    double lo, hi;
    const char *range;
    bool seen;           /* set by the parser */
};

/* Table entries: FLAG(name, kind, dst, metavar, help), the same with
 * FLAG_REQUIRED, and FLAG_RANGE(..., lo, hi, range) for a number that must
 * lie in lo..hi, range saying so in words ("1..4096", "0 < P <= 1"). */
#define FLAG(n, k, d, mv, h) {.name = n, .kind = k, .dst = d, .metavar = mv, .help = h}
#define FLAG_REQUIRED(n, k, d, mv, h)                                                        \
    {.name = n, .kind = k, .dst = d, .metavar = mv, .help = h, .required = true}
#define FLAG_RANGE(n, k, d, mv, h, l, u, r)                                                  \
    {.name = n, .kind = k, .dst = d, .metavar = mv, .help = h, .lo = l, .hi = u, .range = r}

/* A string flag whose value is one of choices ("a|b|c"), which --help
 * lists after the help. */
#define FLAG_CHOICE(n, d, mv, h, c)                                                                \
    {                                                                                              \
        .name = n, .kind = FLAG_STR, .dst = d, .metavar = mv, .help = h, .choices = c              \
    }

/* Exit statuses of the CLI. */
enum { EXIT_USAGE = 2, EXIT_HELP = -100 };

/* Parses argv[0..argc) (argv[0] is the first flag, not the command). Returns
 * 0, EXIT_HELP after printing help for --help/-h, or EXIT_USAGE after printing
 * "shardswap CMD: <what is wrong>" to stderr. */
int args_parse(const char *cmd, const char *summary, int argc, char **argv, struct flag *flags,
               int n_flags);

/* Prints "shardswap CMD: --NAME V is out of range (expected RANGE)" to
 * stderr for a check the table cannot express (a limit of this machine, of
 * the model); returns EXIT_USAGE. */
int args_range_fail(const char *cmd, const char *name, const char *value, const char *range);

/* Prints "shardswap CMD: <err_msg()>" to stderr; returns EXIT_USAGE (a bad
 * flag value whose message a check elsewhere set). */
int args_usage_fail(const char *cmd);

/* Prints "shardswap CMD: <err_msg()>" to stderr; returns 1. */
int cli_fail(const char *cmd);
/* Reads all of stdin, at most max bytes, into a malloc'd buffer (the
 * caller's); more than max is ERR_INVALID, saying so. */
int cli_read_stdin(size_t max, char **out, size_t *len);
/* --model DIR, required: the checkpoint every single-model command reads. */
#define MODEL_FLAG(dst)                                                                            \
    FLAG_REQUIRED("model", FLAG_STR, dst, "DIR",                                                   \
                  "Hugging Face checkpoint directory (config.json, safetensors weights: OPT, "     \
                  "Llama, Mistral, Qwen2, Qwen3, Phi-3, Gemma 2, Gemma 3), or a GGUF file "        \
                  "(F32/F16/BF16, Q8_0, "                                                          \
                  "Q4_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K; llama, qwen2), the first file of a split "  \
                  "one, or a directory holding one")
/* --compute: the linear layers' precision (backend/kernels.h). */
#define COMPUTE_FLAG(dst)                                                                          \
    FLAG("compute", FLAG_STR, dst, "f32|bf16|auto",                                                \
         "precision of the linear layers: f32 (exact), bf16 (bf16 activations and weights, f32 "  \
         "sums, as transformers runs a bf16 model; for GGUF quantized weights, x quantized per "  \
         "block as llama.cpp does) or auto (default: bf16 for bf16 and quantized checkpoints, "   \
         "else f32)")
/* Checks a --compute value: NULL or "auto" leave *set false; else f32 or
 * bf16 into *c. 0, or ERR_INVALID naming the flag and the choices. */
int cli_compute(const char *s, bool *set, enum kern_compute *c);

/* --out-dir DIR: created if absent, and writable; checked before a run so
 * that its results have somewhere to go. ERR_IO / ERR_INVALID naming it. */
int cli_check_out_dir(const char *dir);

/* Parses token ids "2,250,1345" (the value of --FLAG) into *out (malloc'd,
 * the caller's) and *n_out. ERR_INVALID naming --FLAG and the value for
 * anything else (empty, not a number, negative, over INT32_MAX). */
int cli_ids_parse(const char *flag, const char *s, int32_t **out, int *n_out);

#endif
