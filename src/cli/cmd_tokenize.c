#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "tokenizer/bpe.h"

/* Reads all of stdin into a malloc'd buffer. */
static int read_stdin(char **out, size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    if (!buf)
        return err_set(ERR_NOMEM, "out of memory");
    size_t got;
    while ((got = fread(buf + n, 1, cap - n, stdin)) > 0) {
        n += got;
        if (n == cap) {
            char *b = realloc(buf, cap * 2);
            if (!b) {
                free(buf);
                return err_set(ERR_NOMEM, "out of memory reading stdin");
            }
            buf = b;
            cap *= 2;
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

int cmd_tokenize(int argc, char **argv)
{
    const char *dir = NULL;
    bool no_bos = false;
    struct flag flags[] = {
        FLAG_REQUIRED("model", FLAG_STR, &dir, "DIR", "directory with the tokenizer files"),
        FLAG("no-bos", FLAG_BOOL, &no_bos, NULL, "do not prepend the BOS token"),
    };
    int rc = args_parse("tokenize",
                        "Reads UTF-8 text on stdin (all of it, newlines included) and prints "
                        "its token ids on one line, separated by single spaces.",
                        argc, argv, flags, sizeof(flags) / sizeof(flags[0]));
    if (rc)
        return rc;
    struct bpe *tok = NULL;
    char *text = NULL;
    int32_t *ids = NULL;
    size_t len = 0, n = 0;
    if ((rc = bpe_open(dir, &tok)) < 0 || (rc = read_stdin(&text, &len)) < 0 ||
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
