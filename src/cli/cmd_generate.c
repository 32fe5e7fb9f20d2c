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

/* The tokenizer: needed for a text prompt and for one named with
 * --tokenizer; for ids from a model directory, text when it loads (else
 * *out stays NULL and the ids print as ids). */
static int open_tokenizer(const char *model_dir, const char *tok_dir, bool text_prompt,
                          struct bpe **out)
{
    *out = NULL;
    int rc = bpe_open(tok_dir ? tok_dir : model_dir, out);
    if (rc == 0)
        return 0;
    *out = NULL;
    if (text_prompt && !tok_dir) {
        char why[512];
        snprintf(why, sizeof(why), "%s", err_msg());
        return err_set(rc, "model %s has no tokenizer that loads (%s); give the prompt as token "
                           "ids with --ids I,J,...", model_dir, why);
    }
    if (tok_dir)
        return err_wrap(rc, "--tokenizer");
    return 0;
}

/* The output side of a run: o streams through tok (NULL: as ids). */
static int stream_open(struct stream_out *o, const struct bpe *tok)
{
    o->tok = tok;
    if (tok) {
        bpe_stream_init(&o->st, tok);
        o->cap = bpe_stream_chunk_max(tok);
    } else {
        o->cap = 16; /* ",2147483647" */
    }
    if (!(o->buf = malloc(o->cap)))
        return err_set(ERR_NOMEM, "out of memory");
    return 0;
}

/* What is left once generation ended: the decoder's held-back bytes, the
 * line's end, and a note about ids the tokenizer has no text for. */
static void stream_finish(struct stream_out *o)
{
    int n = o->tok ? bpe_stream_finish(&o->st, o->buf, o->cap) : 0;
    if (n > 0)
        fwrite(o->buf, 1, (size_t)n, stdout);
    putchar('\n');
    if (o->n_unknown)
        fprintf(stderr,
                "shardswap generate: note: %d of %d generated ids are outside the "
                "tokenizer's %d entries and print as nothing (a random-weight model with "
                "gen-model's minimal tokenizer?)\n",
                o->n_unknown, o->n_tokens, bpe_vocab_size(o->tok));
}

struct generate_args {
    const char *model_dir, *prompt, *tok_dir;
    int32_t *ids; /* --ids (n_ids), owned by the caller; NULL with a prompt */
    int n_ids, max_tokens;
    struct sampler_params sp;
    struct cli_device_flags dev;
};

/* Streams the completion of a's prompt or ids to stdout. */
static int generate_run(const struct generate_args *a)
{
    struct cli_model cm = {0};
    struct bpe *tok = NULL;
    struct sampler s = {0};
    int32_t *ids = a->ids, *encoded = NULL;
    int n_ids = a->n_ids, n_out = 0, rc;
    struct stream_out o = {.rc = 0};
    if ((rc = sampler_init(&s, &a->sp)) < 0 ||
        (rc = open_tokenizer(a->model_dir, a->tok_dir, a->prompt != NULL, &tok)) < 0)
        goto out;
    if (a->prompt) {
        size_t n = 0;
        if ((rc = bpe_encode(tok, a->prompt, strlen(a->prompt), true, &encoded, &n)) < 0)
            goto out;
        ids = encoded;
        n_ids = (int)n;
    }
    /* a device sized for the longest run model_generate may make (its
     * positions capped at the model's) */
    long len = (long)n_ids + a->max_tokens;
    const struct model_exec_shape shape = {.batch = 1, .max_len = len > INT_MAX ? INT_MAX : (int)len};
    if ((rc = cli_model_open(&a->dev, a->model_dir, &shape, &cm)) < 0)
        goto out;
    for (int i = 0; !a->prompt && i < n_ids; i++)
        if (ids[i] >= model_info(cm.m)->vocab) {
            rc = err_set(ERR_INVALID,
                         "--ids: token id %d (at %d) is outside the model's "
                         "vocabulary of %d tokens",
                         (int)ids[i], i, model_info(cm.m)->vocab);
            goto out;
        }
    if ((rc = stream_open(&o, tok)) < 0)
        goto out;
    rc = model_generate_lora(cm.m, cm.adapter, ids, n_ids, a->max_tokens, &s, print_token, &o, NULL,
                             &n_out);
    if (rc == 0 && o.rc < 0)
        rc = o.rc;
    if (rc == 0)
        stream_finish(&o);
out:
    free(encoded);
    free(o.buf);
    sampler_free(&s);
    bpe_close(tok);
    cli_model_close(&cm);
    return rc;
}

int cmd_generate(int argc, char **argv)
{
    const char *ids_s = NULL, *compute_s = NULL, *devices = NULL;
    struct generate_args a = {.max_tokens = 32,
                              .sp = {.temperature = 0, .top_k = 0, .top_p = 1, .seed = 0}};
    struct flag flags[] = {
        MODEL_FLAG(&a.model_dir),
        {.name = "prompt",
         .kind = FLAG_STR,
         .dst = &a.prompt,
         .metavar = "TEXT",
         .help = "the prompt (UTF-8; may be empty), through the model's tokenizer with its BOS",
         .empty_ok = true},
        FLAG("ids", FLAG_STR, &ids_s, "I,J,...",
             "the prompt as token ids, used as given (no BOS added); instead of --prompt, and "
             "for models without a tokenizer, which then print the generated ids"),
        FLAG_RANGE("max-tokens", FLAG_INT, &a.max_tokens, "N",
                   "most tokens to generate (default 32)", 1, 1 << 20, "1..1048576"),
        FLAG_RANGE("temperature", FLAG_FLOAT, &a.sp.temperature, "T", "0 = greedy (default 0)", 0,
                   FLT_MAX, "a finite T >= 0"),
        FLAG_RANGE("top-k", FLAG_INT, &a.sp.top_k, "K",
                   "sample among the K most likely (default 0 = off)", 0, INT_MAX, "K >= 0"),
        FLAG_RANGE("top-p", FLAG_FLOAT, &a.sp.top_p, "P", "nucleus sampling mass (default 1 = off)",
                   FLT_TRUE_MIN, 1, "0 < P <= 1"),
        FLAG("seed", FLAG_U64, &a.sp.seed, "S", "random seed; same seed, same output (default 0)"),
        FLAG("tokenizer", FLAG_STR, &a.tok_dir, "DIR",
             "tokenizer directory (default: the model's)"),
        COMPUTE_FLAG(&compute_s),
        DEVICE_FLAG(&devices),
        ADAPTER_FLAG(&a.dev.adapter),
    };
    int rc = args_parse("generate",
                        "Prints the completion of --prompt or --ids (without the prompt), "
                        "streaming it as it is generated: its text, or, with --ids on a model "
                        "whose tokenizer cannot be loaded, its token ids comma-separated on one "
                        "line. Stops at any of the model's EOS ids or after --max-tokens.",
                        argc, argv, flags, sizeof(flags) / sizeof(flags[0]));
    if (rc)
        return rc;
    if (!a.prompt == !ids_s) {
        fprintf(stderr, "shardswap generate: give exactly one of --prompt TEXT or --ids I,J,... "
                        "(see --help)\n");
        return EXIT_USAGE;
    }
    if (cli_device_flags_parse(compute_s, devices, &a.dev) < 0 ||
        (ids_s && cli_ids_parse("ids", ids_s, &a.ids, &a.n_ids) < 0))
        return args_usage_fail("generate");
    rc = generate_run(&a);
    free(a.ids);
    return rc < 0 ? cli_fail("generate") : 0;
}
