#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "tokenizer/bpe.h"

/* The most text tokenize reads: the tokenizer holds the whole input and works
 * on it at about 35 bytes of memory per input byte, so 16 MiB of text costs
 * about 600 MB and seconds of work; more is refused, not read. */
#define TOKENIZE_MAX_BYTES ((size_t)16 << 20) /* --help says "16 MiB" */

int cmd_tokenize(int argc, char **argv)
{
    const char *dir = NULL;
    bool no_bos = false;
    struct flag flags[] = {
        FLAG_REQUIRED("model", FLAG_STR, &dir, "DIR",
                      "directory with the tokenizer files, or a GGUF checkpoint (.gguf file, "
                      "directory holding one, split set's first file)"),
        FLAG("no-bos", FLAG_BOOL, &no_bos, NULL,
             "add no special tokens (the BOS and whatever else the post-processor adds)"),
    };
    int rc = args_parse("tokenize",
                        "Reads UTF-8 text on stdin (all of it, newlines included, at most "
                        "16 MiB) and prints its token ids on one line, separated by single "
                        "spaces.",
                        argc, argv, flags, sizeof(flags) / sizeof(flags[0]));
    if (rc)
        return rc;
    struct bpe *tok = NULL;
    char *text = NULL;
    int32_t *ids = NULL;
    size_t len = 0, n = 0;
    if ((rc = bpe_open(dir, &tok)) < 0 || (rc = cli_read_stdin(TOKENIZE_MAX_BYTES, &text, &len)) < 0 ||
        (rc = bpe_encode(tok, text, len, !no_bos, &ids, &n)) < 0)
        goto out;
    for (size_t i = 0; i < n; i++)
        printf(i ? " %d" : "%d", ids[i]);
    putchar('\n');
out:
    if (rc < 0)
        rc = cli_fail("tokenize");
    free(ids);
    free(text);
    bpe_close(tok);
    return rc;
}
