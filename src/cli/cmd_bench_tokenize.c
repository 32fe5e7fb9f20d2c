/* shardswap bench tokenize: encode and decode speed of one tokenizer on one
 * text, one thread, in MB of UTF-8 per second and tokens per second.
 *
 * The text is a file (--text; tools/bench_tokenizer.py writes one and runs
 * Hugging Face tokenizers on the same file for the comparison), cut into
 * documents at blank lines, or a built-in mix of English, code, numbers and
 * other scripts. Each document is encoded whole with add_bos false, as a
 * server encodes prompts; a pass encodes every document, and the best of
 * several passes is kept, so that another process's bursts on a shared
 * machine stay out. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/jsonout.h"
#include "core/timing.h"
#include "tokenizer/bpe.h"

#define BENCH_TOK_PASSES 5

/* The built-in text: a few kinds of content, repeated to about `bytes`. */
static char *bench_tok_builtin(size_t bytes, size_t *len)
{
    static const char *const PARTS[] = {
        "The quick brown fox jumps over the lazy dog. It's 2026, and we'll see what they've "
        "done with the 1234567 tokens they didn't count.\n\n",
        "int main(int argc, char **argv)\n{\n    for (int i = 0; i < argc; i++)\n        "
        "printf(\"%s\\n\", argv[i]);\n    return 0;\n}\n\n",
        "Les modèles de langue découpent le texte en unités. Straße, naïve café, ¿qué tal?\n\n",
        "大型语言模型把文本切分成词元。日本語のテキストも同じです。한국어 문장도 있습니다.\n\n",
        "Привет, мир! Γειά σου κόσμε. مرحبا بالعالم. नमस्ते दुनिया "
        "🙂👍🏽\n\n",
        "   indented\tlines\r\n\twith   runs of    spaces and 3.14159 2.71828 1e-9\n\n",
    };
    size_t n_parts = sizeof(PARTS) / sizeof(PARTS[0]);
    char *buf = malloc(bytes + 4096);
    if (!buf)
        return NULL;
    size_t n = 0;
    for (size_t i = 0; n < bytes; i++) {
        size_t k = strlen(PARTS[i % n_parts]);
        memcpy(buf + n, PARTS[i % n_parts], k);
        n += k;
    }
    *len = n;
    return buf;
}

static int bench_tok_read(const char *path, char **out, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return err_set(ERR_IO, "%s: cannot open", path);
    size_t cap = 1 << 20, n = 0, got;
    char *buf = malloc(cap);
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            char *b = realloc(buf, cap * 2);
            if (!b) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = b;
            cap *= 2;
        }
    }
    fclose(f);
    if (!buf)
        return err_set(ERR_NOMEM, "%s: out of memory reading it", path);
    *out = buf;
    *len = n;
    return 0;
}

/* Document boundaries: documents are separated by blank lines ("\n\n");
 * doc i is text[start[i], start[i + 1]). Returns the count. */
static size_t bench_tok_split(const char *text, size_t len, size_t **start)
{
    size_t n = 0, cap = 1024;
    size_t *s = malloc((cap + 1) * sizeof(*s));
    if (!s)
        return 0;
    s[n++] = 0;
    for (size_t i = 0; i + 1 < len; i++) {
        if (text[i] == '\n' && text[i + 1] == '\n') {
            if (n == cap) {
                size_t *g = realloc(s, (2 * cap + 1) * sizeof(*s));
                if (!g)
                    break;
                s = g;
                cap *= 2;
            }
            s[n++] = i + 2;
            i++;
        }
    }
    s[n] = len;
    *start = s;
    return n;
}

int bench_tokenize(int argc, char **argv)
{
    const char *dir = NULL, *text_path = NULL;
    int mb = 4;
    bool json = false;
    struct flag flags[] = {
        FLAG_REQUIRED("model", FLAG_STR, &dir, "DIR", "directory with the tokenizer files"),
        FLAG("text", FLAG_STR, &text_path, "FILE",
             "UTF-8 text, documents separated by blank lines (default: a built-in mix)"),
        FLAG_RANGE("mb", FLAG_INT, &mb, "N", "size of the built-in text in MB (default 4)", 1, 1024,
                   "1..1024"),
        FLAG("json", FLAG_BOOL, &json, NULL, "print one JSON object instead of a table"),
    };
    int rc = args_parse("bench tokenize",
                        "Measures one tokenizer's encode and decode speed on one thread: each "
                        "document of the text encoded whole (no BOS), best of 5 passes, in MB "
                        "of text and tokens per second. tools/bench_tokenizer.py runs Hugging "
                        "Face tokenizers on the same text beside it.",
                        argc, argv, flags, sizeof(flags) / sizeof(flags[0]));
    if (rc)
        return rc;
    struct bpe *tok = NULL;
    char *text = NULL, *dec = NULL;
    size_t len = 0, *start = NULL, n_docs = 0, n_ids = 0;
    int32_t *all = NULL;
    double t_open = time_now();
    if ((rc = bpe_open(dir, &tok)) < 0)
        goto out;
    t_open = time_now() - t_open;
    if (text_path) {
        if ((rc = bench_tok_read(text_path, &text, &len)) < 0)
            goto out;
    } else if (!(text = bench_tok_builtin((size_t)mb << 20, &len))) {
        rc = err_set(ERR_NOMEM, "out of memory for %d MB of text", mb);
        goto out;
    }
    if ((n_docs = bench_tok_split(text, len, &start)) == 0) {
        rc = err_set(ERR_NOMEM, "out of memory splitting the text");
        goto out;
    }

    /* Encode: every document, best of the passes. */
    double best_enc = 1e30;
    for (int pass = 0; pass < BENCH_TOK_PASSES && rc == 0; pass++) {
        size_t total = 0;
        double t0 = time_now();
        for (size_t d = 0; d < n_docs && rc == 0; d++) {
            int32_t *ids = NULL;
            size_t n = 0;
            rc = bpe_encode(tok, text + start[d], start[d + 1] - start[d], false, &ids, &n);
            total += n;
            free(ids);
        }
        double t = time_now() - t0;
        best_enc = t < best_enc ? t : best_enc;
        n_ids = total;
    }
    if (rc < 0)
        goto out;

    /* Decode: the whole text's ids at once. */
    size_t n_all = 0, dec_len = 0;
    if ((rc = bpe_encode(tok, text, len, false, &all, &n_all)) < 0)
        goto out;
    double best_dec = 1e30;
    for (int pass = 0; pass < BENCH_TOK_PASSES && rc == 0; pass++) {
        free(dec);
        dec = NULL;
        double t0 = time_now();
        rc = bpe_decode(tok, all, n_all, true, &dec, &dec_len);
        double t = time_now() - t0;
        best_dec = t < best_dec ? t : best_dec;
    }
    if (rc < 0)
        goto out;

    double mbytes = (double)len / 1e6;
    if (json) {
        rc = jsonout_print(json_pack(
            "{s:s, s:o, s:o, s:I, s:I, s:I, s:o, s:o, s:o, s:o, s:o}", "bench", "tokenize", "model",
            jsonout_string(dir), "text", jsonout_string(text_path ? text_path : "builtin"), "bytes",
            (json_int_t)len, "documents", (json_int_t)n_docs, "ids", (json_int_t)n_ids, "open_ms",
            jsonout_real(t_open * 1e3, 1), "encode_s", jsonout_real(best_enc, 6), "encode_mb_s",
            jsonout_real(mbytes / best_enc, 2), "encode_mtok_s",
            jsonout_real((double)n_ids / best_enc / 1e6, 3), "decode_mb_s",
            jsonout_real((double)dec_len / 1e6 / best_dec, 1)));
    } else {
        printf("tokenizer %s: opened in %.0f ms; text %s: %.2f MB in %zu documents, %zu ids "
               "(%.2f bytes per id)\n",
               dir, t_open * 1e3, text_path ? text_path : "(built-in mix)", mbytes, n_docs, n_ids,
               n_ids ? (double)len / (double)n_ids : 0.0);
        printf("%-8s %10s %10s %12s\n", "", "seconds", "MB/s", "Mtokens/s");
        printf("%-8s %10.3f %10.2f %12.3f\n", "encode", best_enc, mbytes / best_enc,
               (double)n_ids / best_enc / 1e6);
        printf("%-8s %10.3f %10.2f %12.3f\n", "decode", best_dec, (double)dec_len / 1e6 / best_dec,
               (double)n_all / best_dec / 1e6);
        printf("one thread, best of %d passes; encode is per document, decode the whole text\n",
               BENCH_TOK_PASSES);
    }
out:
    free(all);
    free(dec);
    free(start);
    free(text);
    bpe_close(tok);
    return rc < 0 ? cli_fail("bench tokenize") : 0;
}
