#include <errno.h>
#include <float.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/device_model.h"
#include "core/error.h"
#include "model/generate.h"
#include "tokenizer/bpe.h"

/* Where generated ids go: through the tokenizer's streaming decoder as
 * text, or, for a model without a tokenizer (tok NULL), as ids. */
struct stream_out {
    struct bpe_stream st;
    const struct bpe *tok;   /* NULL: print ids instead */
    int rc;
    int n_tokens, n_unknown; /* ids the tokenizer has no text for */
    char *buf;               /* bpe_stream_chunk_max() bytes */
    size_t cap;
};

static int print_token(void *ctx, int32_t id)
{
    struct stream_out *o = ctx;
    int n;
    o->n_tokens++;
    if (o->tok) {
        o->n_unknown += id >= bpe_vocab_size(o->tok);
        n = bpe_stream_push(&o->st, id, o->buf, o->cap);
    } else {
        n = snprintf(o->buf, o->cap, "%s%d", o->n_tokens > 1 ? "," : "", (int)id);
    }
    if (n < 0) {
        o->rc = n;
        return 1;
    }
    /* streamed, so a full disk or quota stops generation at once */
    errno = 0;
    if ((n > 0 && fwrite(o->buf, 1, (size_t)n, stdout) != (size_t)n) || fflush(stdout) != 0) {
        o->rc = err_set(ERR_IO, "writing to stdout: %s", strerror(errno ? errno : EIO));
        return 1;
    }
    return 0;
}

int cmd_generate(int argc, char **argv)
{
    const char *model_dir = NULL, *prompt = NULL, *ids_s = NULL, *tok_dir = NULL,
               *compute_s = NULL, *devices = NULL;
    int max_tokens = 32;
    struct sampler_params sp = {.temperature = 0, .top_k = 0, .top_p = 1, .seed = 0};
    struct flag flags[] = {
        MODEL_FLAG(&model_dir),
        {.name = "prompt", .kind = FLAG_STR, .dst = &prompt, .metavar = "TEXT",
         .help = "the prompt (UTF-8; may be empty), through the model's tokenizer with its BOS",
         .empty_ok = true},
        FLAG("ids", FLAG_STR, &ids_s, "I,J,...",
             "the prompt as token ids, used as given (no BOS added); instead of --prompt, and "
             "for models without a tokenizer, which then print the generated ids"),
        FLAG_RANGE("max-tokens", FLAG_INT, &max_tokens, "N", "most tokens to generate (default 32)",
                   1, 1 << 20, "1..1048576"),
        FLAG_RANGE("temperature", FLAG_FLOAT, &sp.temperature, "T", "0 = greedy (default 0)", 0,
                   FLT_MAX, "a finite T >= 0"),
        FLAG_RANGE("top-k", FLAG_INT, &sp.top_k, "K",
                   "sample among the K most likely (default 0 = off)", 0, INT_MAX, "K >= 0"),
        FLAG_RANGE("top-p", FLAG_FLOAT, &sp.top_p, "P", "nucleus sampling mass (default 1 = off)",
                   FLT_TRUE_MIN, 1, "0 < P <= 1"),
        FLAG("seed", FLAG_U64, &sp.seed, "S", "random seed; same seed, same output (default 0)"),
        FLAG("tokenizer", FLAG_STR, &tok_dir, "DIR", "tokenizer directory (default: the model's)"),
        COMPUTE_FLAG(&compute_s),
        DEVICE_FLAG(&devices),
    };
    int rc = args_parse("generate",
                        "Prints the completion of --prompt or --ids (without the prompt), "
                        "streaming it as it is generated: its text, or, with --ids on a model "
                        "whose tokenizer cannot be loaded, its token ids comma-separated on one "
                        "line. Stops at any of the model's EOS ids or after --max-tokens.",
                        argc, argv, flags, sizeof(flags) / sizeof(flags[0]));
    if (rc)
        return rc;
    if (!prompt == !ids_s) {
        fprintf(stderr, "shardswap generate: give exactly one of --prompt TEXT or --ids I,J,... "
                        "(see --help)\n");
        return EXIT_USAGE;
    }
    bool compute_set;
    enum kern_compute compute;
    int gpu;
    if (cli_compute(compute_s, &compute_set, &compute) < 0 || cli_device_parse(devices, &gpu) < 0)
        return args_usage_fail("generate");
    struct cli_model cm = {0};
    struct model *m = NULL;
    struct bpe *tok = NULL;
    struct sampler s = {0};
    int32_t *ids = NULL;
    int n_ids = 0;
    int n_out = 0;
    struct stream_out o = {.rc = 0};
    if (ids_s && cli_ids_parse("ids", ids_s, &ids, &n_ids) < 0)
        return args_usage_fail("generate");
    if ((rc = sampler_init(&s, &sp)) < 0)
        goto out;
    /* the tokenizer: needed for a text prompt and for one named with
     * --tokenizer; for ids from a model directory, text when it loads */
    if ((rc = bpe_open(tok_dir ? tok_dir : model_dir, &tok)) < 0) {
        if (prompt && !tok_dir) {
            char why[512];
            snprintf(why, sizeof(why), "%s", err_msg());
            err_set(rc, "model %s has no tokenizer that loads (%s); give the prompt as token "
                        "ids with --ids I,J,...", model_dir, why);
            goto out;
        }
        if (tok_dir) {
            err_wrap(rc, "--tokenizer");
            goto out;
        }
        tok = NULL;
        rc = 0;
    }
    if (prompt) {
        size_t n = 0;
        if ((rc = bpe_encode(tok, prompt, strlen(prompt), true, &ids, &n)) < 0)
            goto out;
        n_ids = (int)n;
    }
    /* a device sized for the longest run model_generate may make (its
     * positions capped at the model's) */
    long len = (long)n_ids + max_tokens;
    const struct model_exec_shape shape = {.batch = 1, .max_len = len > INT_MAX ? INT_MAX : (int)len};
    if ((rc = cli_model_open(gpu, model_dir, &shape, &cm)) < 0)
        goto out;
    m = cm.m;
    if (compute_set)
        m->compute = compute;
    for (int i = 0; ids_s && i < n_ids; i++)
        if (ids[i] >= m->info->vocab) {
            rc = err_set(ERR_INVALID, "--ids: token id %d (at %d) is outside the model's "
                                      "vocabulary of %d tokens",
                         (int)ids[i], i, m->info->vocab);
            goto out;
        }
    o.tok = tok;
    if (tok) {
        bpe_stream_init(&o.st, tok);
        o.cap = bpe_stream_chunk_max(tok);
    } else {
        o.cap = 16; /* ",2147483647" */
    }
    if (!(o.buf = malloc(o.cap))) {
        rc = err_set(ERR_NOMEM, "out of memory");
        goto out;
    }
    rc = model_generate(m, ids, n_ids, max_tokens, &s, print_token, &o, NULL, &n_out);
    if (rc == 0 && o.rc < 0)
        rc = o.rc;
    if (rc == 0) {
        int n = tok ? bpe_stream_finish(&o.st, o.buf, o.cap) : 0;
        if (n > 0)
            fwrite(o.buf, 1, (size_t)n, stdout);
        putchar('\n');
        if (o.n_unknown)
            fprintf(stderr,
                    "shardswap generate: note: %d of %d generated ids are outside the "
                    "tokenizer's %d entries and print as nothing (a random-weight model with "
                    "gen-model's minimal tokenizer?)\n",
                    o.n_unknown, o.n_tokens, bpe_vocab_size(tok));
    }
out:
    if (rc < 0)
        rc = cli_fail("generate");
    free(ids);
    free(o.buf);
    sampler_free(&s);
    bpe_close(tok);
    cli_model_close(&cm);
    return rc;
}
