/* The shardswap binary, end to end: the exact command forms other issues
 * rely on, --help everywhere, and one-line errors with non-zero exits. */
#include <ctype.h>
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/device.h"
#include "core/error.h"
#include "engine/stack.h"
#include "format/safetensors.h"
#include "model/random.h"
#include "sched/sched.h"
#include "test.h"

#define BIN SHARDSWAP_BINARY
#define FIXTURE SHARDSWAP_SOURCE_DIR "/tests/fixtures/models/pre_ln_f32"
#define OPT_TOKENIZER SHARDSWAP_SOURCE_DIR "/data/tokenizer/opt"
#define TOKENIZER_DATA SHARDSWAP_SOURCE_DIR "/data/tokenizer"

static char tmp[64];

/* Runs a shell command with stdout to stdout_path (NULL: a file read back
 * into out, cap bytes) and stderr into err; returns its exit status. */
static int run_to(const char *cmd, const char *stdout_path, char *out, size_t cap, char *err,
                  size_t err_cap)
{
    char full[4096], path[128];
    snprintf(path, sizeof(path), "%s/out", tmp);
    snprintf(full, sizeof(full), "%s >%s 2>%s/err", cmd, stdout_path ? stdout_path : path, tmp);
    int st = system(full);
    FILE *f;
    if (out && !stdout_path && (f = fopen(path, "rb"))) {
        size_t n = fread(out, 1, cap - 1, f);
        out[n] = 0;
        fclose(f);
    }
    snprintf(path, sizeof(path), "%s/err", tmp);
    if (err && (f = fopen(path, "rb"))) {
        size_t n = fread(err, 1, err_cap - 1, f);
        err[n] = 0;
        fclose(f);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int run(const char *cmd, char *out, size_t cap, char *err, size_t err_cap)
{
    return run_to(cmd, NULL, out, cap, err, err_cap);
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

/* out is one line holding one JSON object; returns it parsed (NULL after
 * a failed check). */
static json_t *parse_json_line(const char *cmd, const char *out)
{
    json_error_t je;
    json_t *j = json_loads(out, 0, &je);
    CHECK_MSG(j && json_is_object(j), "%s: output is not a JSON object (%s at line %d column %d)",
              cmd, je.text, je.line, je.column);
    CHECK_MSG(count_lines(out) == 1 && out[strlen(out) - 1] == '\n', "%s: want one line, got %d",
              cmd, count_lines(out));
    return j;
}

static int json_str_eq(const json_t *j, const char *s)
{
    return json_is_string(j) && strcmp(json_string_value(j), s) == 0;
}

/* With stdout on a full device a command exits 1 with one line saying so;
 * name is the command as the message names it ("" for shardswap itself). */
static void expect_stdout_full(const char *cmd, const char *name)
{
    char err[4096] = "", want[128];
    int rc = run_to(cmd, "/dev/full", NULL, 0, err, sizeof(err));
    snprintf(want, sizeof(want), "shardswap%s%s: writing to stdout: No space left on device\n",
             *name ? " " : "", name);
    CHECK_MSG(rc == 1, "%s >/dev/full: exit %d, expected 1", cmd, rc);
    CHECK_MSG(strcmp(err, want) == 0, "%s >/dev/full: stderr \"%s\", expected \"%s\"", cmd, err,
              want);
}

/* A failing command exits non-zero with exactly one line on stderr containing needle. */
static void expect_fail(const char *cmd, int code, const char *needle)
{
    char err[4096] = "";
    int rc = run(cmd, NULL, 0, err, sizeof(err));
    CHECK_MSG(rc == code, "%s: exit %d, expected %d", cmd, rc, code);
    CHECK_MSG(count_lines(err) == 1 && strstr(err, needle), "%s: stderr \"%s\" lacks \"%s\"", cmd,
              err, needle);
}

/* Whether tmp holds an entry whose name contains part. */
static int tmp_has(const char *part)
{
    DIR *d = opendir(tmp);
    struct dirent *e;
    int found = 0;
    while (d && (e = readdir(d)))
        found |= strstr(e->d_name, part) != NULL;
    if (d)
        closedir(d);
    return found;
}

static void put_file(const char *path, const char *content)
{
    FILE *f = fopen(path, "w");
    CHECK_MSG(f && fputs(content, f) >= 0 && fclose(f) == 0, "cannot write %s", path);
}

/* gen-model checks --tokenizer-from and --out before writing anything, and
 * writes beside --out: a failed run leaves neither --out nor its staging
 * directory behind. */
/* gen-model --tokenizer-from with a FIFO or a device as a tokenizer file:
 * refused naming the file, at once (before: the FIFO blocked the copy). */
static void test_gen_model_fifo(void)
{
    static const char *names[] = {"vocab.json", "merges.txt", "special_tokens_map.json",
                                  "tokenizer_config.json", "chat_template.jinja"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        for (int dev = 0; dev < 2; dev++) {
            char dir[512], cmd[4096];
            snprintf(dir, sizeof(dir), "%s/fifotok%zu%d", tmp, i, dev);
            snprintf(cmd, sizeof(cmd),
                     "rm -rf %s && mkdir %s && ln -s %s/data/tokenizer/opt/vocab.json "
                     "%s/data/tokenizer/opt/merges.txt %s/ && rm -f %s/%s && %s %s/%s",
                     dir, dir, SHARDSWAP_SOURCE_DIR, SHARDSWAP_SOURCE_DIR, dir, dir, names[i],
                     dev ? "ln -s /dev/zero" : "mkfifo", dir, names[i]);
            CHECK_MSG(system(cmd) == 0, "%s", cmd);
            char want[600];
            snprintf(want, sizeof(want), "%s/%s: is %s, expected a regular file", dir, names[i],
                     dev ? "a character device" : "a FIFO");
            snprintf(cmd, sizeof(cmd),
                     "timeout 20 %s gen-model --preset opt-125m --layers 1 "
                     "--out %s/fifo-out --tokenizer-from %s",
                     BIN, tmp, dir);
            expect_fail(cmd, 1, want);
        }
    CHECK(!tmp_has("fifo-out"));
}

static void test_gen_model_out(void)
{
    char cmd[2048], path[512], bad[256], err[4096] = "";
    static const struct {
        const char *setup, *needle;
    } cases[] = {
        {NULL, "--tokenizer-from /nonexistent/tok: No such file or directory"},
        {"encoder.json", "no vocab.json + merges.txt or tokenizer.json there"},
        {"vocab.json", "merges.txt"},
        {"vocab.json+merges.txt", "vocab.json: malformed JSON"},
    };
    snprintf(bad, sizeof(bad), "%s/badtok", tmp);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *from = "/nonexistent/tok";
        if (cases[i].setup) {
            snprintf(cmd, sizeof(cmd), "rm -rf %s && mkdir %s", bad, bad);
            CHECK(system(cmd) == 0);
            snprintf(path, sizeof(path), "%s/%s", bad, strstr(cases[i].setup, "encoder") ?
                                                        "encoder.json" : "vocab.json");
            put_file(path, strchr(cases[i].setup, '+') ? "{\"a\": " : "{\"<s>\": 0}");
            if (strchr(cases[i].setup, '+')) {
                snprintf(path, sizeof(path), "%s/merges.txt", bad);
                put_file(path, "#version: 0.2\n");
            }
            from = bad;
        }
        snprintf(cmd, sizeof(cmd), "%s gen-model --preset opt-125m --layers 1 --tokenizer-from %s "
                                   "--out %s/tokfail", BIN, from, tmp);
        expect_fail(cmd, 1, cases[i].needle);
        CHECK_MSG(!tmp_has("tokfail"), "%s left tokfail or its staging directory behind", cmd);
    }
    CHECK(!tmp_has(".partial-")); /* nor did the successful runs before */

    /* --out a file, or under a missing directory: refused, nothing written */
    snprintf(path, sizeof(path), "%s/plainfile", tmp);
    put_file(path, "x");
    snprintf(cmd, sizeof(cmd), "%s gen-model --preset opt-125m --layers 1 --out %s", BIN, path);
    expect_fail(cmd, 1, "exists and is not a directory");
    /* under missing directories: they are made, as mkdir -p makes them */
    snprintf(cmd, sizeof(cmd), "%s gen-model --preset opt-125m --layers 1 --out %s/nodir/a/m", BIN,
             tmp);
    CHECK_MSG(run(cmd, NULL, 0, err, sizeof(err)) == 0, "%s: %s", cmd, err);
    snprintf(path, sizeof(path), "%s/nodir/a/m/config.json", tmp);
    struct stat sb;
    CHECK_MSG(stat(path, &sb) == 0, "%s: no %s", cmd, path);
    /* ... unless a file is in the way: the message names --out and the file */
    snprintf(cmd, sizeof(cmd), "%s gen-model --preset opt-125m --layers 1 --out %s/plainfile/b/m",
             BIN, tmp);
    snprintf(bad, sizeof(bad), "--out %s/plainfile/b/m: cannot create the directory %s/plainfile",
             tmp, tmp);
    expect_fail(cmd, 1, bad);
    CHECK(!tmp_has(".partial-"));

    /* --force into a non-empty directory: its other files stay, the model's
     * files are replaced, no staging directory is left */
    snprintf(cmd, sizeof(cmd), "mkdir %s/forced && echo keep >%s/forced/notes.txt && echo old "
                               ">%s/forced/config.json", tmp, tmp, tmp);
    CHECK(system(cmd) == 0);
    snprintf(cmd, sizeof(cmd), "%s gen-model --preset opt-125m --layers 1 --force --out %s/forced",
             BIN, tmp);
    CHECK_MSG(run(cmd, NULL, 0, err, sizeof(err)) == 0, "%s: %s", cmd, err);
    snprintf(cmd, sizeof(cmd), "grep -q keep %s/forced/notes.txt && grep -q hidden_size "
                               "%s/forced/config.json && test -f %s/forced/model.safetensors",
             tmp, tmp, tmp);
    CHECK_MSG(system(cmd) == 0, "--force: %s", cmd);
    CHECK(!tmp_has(".partial-"));

    /* a NaN in a weight: generate warns once that the logits are not finite */
    snprintf(cmd, sizeof(cmd), "cp -r %s/forced %s/nan125", tmp, tmp);
    CHECK(system(cmd) == 0);
    snprintf(path, sizeof(path), "%s/nan125/model.safetensors", tmp);
    struct st_checkpoint *ck = NULL;
    CHECK(st_open(path, &ck) == 0);
    const struct st_tensor *w = ck ? st_find(ck, "model.decoder.final_layer_norm.weight") : NULL;
    if (!w && ck)
        w = st_find(ck, "decoder.final_layer_norm.weight");
    CHECK(w != NULL);
    size_t off = w ? w->file_offset : 0;
    enum dtype dt = w ? w->dtype : DTYPE_F16;
    st_close(ck);
    /* a quiet NaN of the tensor's dtype, little-endian */
    static const unsigned char nan_f32[4] = {0, 0, 0xc0, 0x7f}, nan_f16[2] = {0, 0x7e},
                               nan_bf16[2] = {0xc0, 0x7f};
    const unsigned char *nan_bits = dt == DTYPE_F32 ? nan_f32 : dt == DTYPE_F16 ? nan_f16 : nan_bf16;
    FILE *f = fopen(path, "r+b");
    CHECK(f && fseek(f, (long)off, SEEK_SET) == 0 &&
          fwrite(nan_bits, 1, dtype_size(dt), f) == dtype_size(dt));
    if (f)
        fclose(f);
    snprintf(cmd, sizeof(cmd), "%s generate --model %s/nan125 --prompt hi --max-tokens 2", BIN,
             tmp);
    char out2[4096];
    run(cmd, out2, sizeof(out2), err, sizeof(err));
    CHECK_MSG(strstr(err, "NaN or Inf logits at generated token 1"), "%s: %s", cmd, err);
}

/* Flag values are checked as they are parsed: a number with a leading
 * blank is not one, an empty path is not one, a denormal float is a number,
 * and an out-of-range value names the flag and the range and exits 2. Needs
 * the model tmp/m. */
static void test_flag_values(void)
{
    char cmd[2048], out[4096], err[4096] = "";
    static const struct {
        const char *args, *needle;
    } cases[] = {
        {"--seed ' -1'", "--seed expects a non-negative integer, got \" -1\""},
        {"--seed -1", "--seed expects a non-negative integer"},
        {"--max-tokens ' 5'", "--max-tokens expects an integer"},
        {"--top-p 1.5", "--top-p 1.5 is out of range (expected 0 < P <= 1)"},
        {"--top-p 0", "--top-p 0 is out of range"},
        {"--top-k -1", "--top-k -1 is out of range (expected K >= 0)"},
        {"--temperature -1", "--temperature -1 is out of range"},
        {"--temperature 1e39", "--temperature 1e39 is out of range"},
        {"--temperature nan", "--temperature expects a number"},
        {"--max-tokens -3", "--max-tokens -3 is out of range (expected 1..1048576)"},
        {"--max-tokens 0", "--max-tokens 0 is out of range"},
        {"--tokenizer ''", "--tokenizer expects a non-empty DIR"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(cmd, sizeof(cmd), "%s generate --model %s/m --prompt hi %s", BIN, tmp,
                 cases[i].args);
        expect_fail(cmd, 2, cases[i].needle);
    }
    expect_fail(BIN " generate --model '' --prompt hi", 2, "--model expects a non-empty DIR");
    expect_fail(BIN " forward --model '' --ids 2 --out /dev/null", 2,
                "--model expects a non-empty DIR");
    /* 1e-45 is a float (a denormal): accepted, and as good as greedy */
    snprintf(cmd, sizeof(cmd), "%s generate --model %s/m --prompt hi --max-tokens 3 "
                               "--temperature 1e-45 --seed 5", BIN, tmp);
    CHECK_MSG(run(cmd, out, sizeof(out), err, sizeof(err)) == 0, "%s: %s", cmd, err);
    char greedy[4096] = "";
    snprintf(cmd, sizeof(cmd), "%s generate --model %s/m --prompt hi --max-tokens 3", BIN, tmp);
    CHECK_MSG(run(cmd, greedy, sizeof(greedy), err, sizeof(err)) == 0, "%s: %s", cmd, err);
    CHECK_MSG(strcmp(out, greedy) == 0, "--temperature 1e-45 \"%s\" vs greedy \"%s\"", out,
              greedy);
    /* an empty prompt is a prompt */
    snprintf(cmd, sizeof(cmd), "%s generate --model %s/m --prompt '' --max-tokens 2", BIN, tmp);
    CHECK_MSG(run(cmd, out, sizeof(out), err, sizeof(err)) == 0, "%s: %s", cmd, err);
}

/* Sizes and paths a user gives are checked before any work is sized by them:
 * forward's ids against the model's positions, its --out before the model
 * runs, bench forward's threads against this machine. */
static void test_checked_first(void)
{
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "%s forward --model %s --ids $(yes 2 | head -n 40000 | paste -sd,) "
                               "--out %s/long.bin", BIN, FIXTURE, tmp);
    expect_fail(cmd, 1, "sequence of 40000 tokens exceeds max_position_embeddings 64");
    CHECK(!tmp_has("long.bin"));
    snprintf(cmd, sizeof(cmd), "%s forward --model %s --ids 2,250 --out %s/nodir/x.bin", BIN,
             FIXTURE, tmp);
    expect_fail(cmd, 1, "nodir/x.bin: cannot create it in");
    snprintf(cmd, sizeof(cmd), "%s forward --model %s --ids 2,250 --out %s", BIN, FIXTURE, tmp);
    expect_fail(cmd, 1, "is a directory (expected a file to write)");
    /* a failed write leaves an existing --out as it was, and nothing beside
     * it: a size limit (SIGXFSZ ignored, so the write fails with EFBIG) as a
     * full disk would; and the device itself on /dev/full */
    {
        char keep[512], got[64] = "", e2[4096] = "";
        snprintf(keep, sizeof(keep), "%s/keep.bin", tmp);
        put_file(keep, "previous logits");
        snprintf(cmd, sizeof(cmd),
                 "sh -c \"trap '' XFSZ; ulimit -f 1; exec %s forward --model %s "
                 "--ids 2,3,4,5,6,7,8,9 --out %s\"",
                 BIN, FIXTURE, keep);
        int rc = run(cmd, NULL, 0, e2, sizeof(e2));
        FILE *f = fopen(keep, "rb");
        size_t n = f ? fread(got, 1, sizeof(got) - 1, f) : 0;
        got[n] = 0;
        if (f)
            fclose(f);
        CHECK_MSG(rc == 1 && strstr(e2, "keep.bin: cannot write the logits: File too large (the "
                                        "file was left as it was)"),
                  "%s: exit %d, stderr \"%s\"", cmd, rc, e2);
        CHECK_MSG(strcmp(got, "previous logits") == 0, "--out was replaced: \"%s\"", got);
        CHECK_MSG(!tmp_has("keep.bin.tmp"), "a temporary was left beside --out");
        snprintf(cmd, sizeof(cmd), "%s forward --model %s --ids 2,3 --out /dev/full", BIN, FIXTURE);
        expect_fail(cmd, 1, "/dev/full: cannot write the logits: No space left on device");
        struct stat sb;
        CHECK(stat("/dev/full", &sb) == 0 && S_ISCHR(sb.st_mode));
        /* and a complete write replaces it */
        snprintf(cmd, sizeof(cmd), "%s forward --model %s --ids 2,3 --out %s", BIN, FIXTURE, keep);
        CHECK_MSG(run(cmd, NULL, 0, e2, sizeof(e2)) == 0 && stat(keep, &sb) == 0 &&
                      sb.st_size == 2 * 256 * 4 && !tmp_has("keep.bin.tmp"),
                  "%s: %s", cmd, e2);
        /* ids are digits: no blank or sign before one, as flags refuse */
        static const char *bad_ids[] = {"' 2'", "'2, 3'", "+2", "-0", "'2 '"};
        for (size_t i = 0; i < sizeof(bad_ids) / sizeof(bad_ids[0]); i++) {
            snprintf(cmd, sizeof(cmd), "%s forward --model %s --ids %s --out %s", BIN, FIXTURE,
                     bad_ids[i], keep);
            expect_fail(cmd, 1, "is not a comma-separated list of token ids");
        }
    }
    /* the path is checked before the model: a missing model is not what it says */
    snprintf(cmd, sizeof(cmd), "%s forward --model /nonexistent --ids 2 --out %s/nodir/x.bin",
             BIN, tmp);
    expect_fail(cmd, 1, "--out");
    snprintf(cmd, sizeof(cmd), "%s bench forward --model %s --threads 100000", BIN, FIXTURE);
    expect_fail(cmd, 2, "--threads 100000 is out of range (expected 0..");
    snprintf(cmd, sizeof(cmd), "%s bench forward --model %s --threads -1", BIN, FIXTURE);
    expect_fail(cmd, 2, "--threads -1 is out of range");
    snprintf(cmd, sizeof(cmd), "%s bench forward --model %s --batch 0", BIN, FIXTURE);
    expect_fail(cmd, 2, "--batch 0 is out of range (expected 1..4096)");
    snprintf(cmd, sizeof(cmd), "%s bench forward --model %s --prompt-len 60 --gen 10", BIN,
             FIXTURE);
    expect_fail(cmd, 1, "exceeds the model's 64 positions");
}

/* The benchmarks' and gen-model's flags are checked before any model is
 * generated: ranges exit 2 naming the flag, and a model that cannot fit the
 * disk is refused with both sizes before a byte is written. */
static void test_bench_flags(void)
{
    char cmd[2048], path[256];
    struct stat sb;
    static const struct {
        const char *args, *needle;
    } cases[] = {
        {"gen-model --preset opt-125m --layers -3 --out T/g",
         "--layers -3 is out of range (expected 1..4096)"},
        {"bench workload --layers 99999 --cache T/c",
         "--layers 99999 is out of range (expected 1..4096)"},
        {"bench workload --layers -1 --cache T/c", "--layers -1 is out of range"},
        {"bench workload --max-batch -1 --cache T/c",
         "--max-batch -1 is out of range (expected 1..256)"},
        {"bench workload --slo -1 --cache T/c",
         "--slo -1 is out of range (expected 0 < S <= 86400)"},
        {"bench workload --link-gbps 1e-30 --cache T/c",
         "--link-gbps 1e-30 is out of range (expected 0.001..10000 GB/s)"},
        {"bench workload --policy , --cache T/c", "--policy \",\" names no policy"},
        {"bench workload --policy computron,swapwise,lru,fifo,computron,swapwise --cache T/c",
         "at most 5 policies"},
        {"bench workload --seed ' -1' --cache T/c", "--seed expects a non-negative integer"},
        {"bench workload --keep-alive 5 --cache T/c", "--pinned need --simulate"},
        {"bench workload --simulate --keep-alive x --cache T/c",
         "--keep-alive: \"x\" is not seconds >= 0, or -1 (forever)"},
        {"bench workload --simulate --config custom --rates 1,1,1 --priority 1,2 --cache T/c",
         "--priority 1,2: 2 values for 3 models (expected one value, or one per model)"},
        {"bench workload --simulate --priority 2000 --cache T/c",
         "--priority: \"2000\" is not an integer from -1000 to 1000"},
        {"bench workload --simulate --min-resident -1 --cache T/c",
         "--min-resident: \"-1\" is not seconds >= 0 (0: none)"},
        {"bench workload --simulate --config custom --rates 1,1 --pinned true,maybe --cache T/c",
         "--pinned: \"maybe\" is not true or false"},
        {"bench workload --simulate --config computron:all --max-queue-wait 1,2 --cache T/c",
         "--max-queue-wait 1,2: one value only here"},
        {"bench workload --adapter-dir T/a --cache T/c", "--adapter-dir needs --adapters"},
        {"bench workload --config round-robin --models 2 --adapters 2 --cache T/c",
         "--adapters replays open-loop arrivals"},
        {"bench workload --simulate --config custom --rates 1,1,1 --adapters 2 --cache T/c",
         "--adapters 2: the workload has 3 models; expected one per fine-tune"},
        {"bench workload --simulate --preset qwen3-30b-a3b --expert-residency maybe --cache T/c",
         "--expert-residency maybe: expected on, off or both"},
        {"bench workload --simulate --preset qwen3-30b-a3b --routing-skew 0,x --cache T/c",
         "--routing-skew 0,x: expected 1..8 comma-separated Zipf exponents in 0..10"},
        {"bench workload --simulate --preset mixtral-8x7b --routing-skew 11 --cache T/c",
         "--routing-skew 11: expected 1..8"},
        {"bench workload --preset qwen3-30b-a3b --expert-residency on --cache T/c",
         "need --simulate and one config"},
        {"bench workload --simulate --expert-residency on --cache T/c",
         "preset opt-1.3b has no routed experts: expected mixtral-8x7b or qwen3-30b-a3b"},
        {"bench workload --simulate --preset qwen3-30b-a3b --expert-residency on --cache T/c",
         "give every cost"},
        {"bench workload --simulate --preset qwen3-30b-a3b --room 0.5 --cache T/c",
         "--room 0.5 is out of range (expected 1..1000000)"},
        {"bench workload --simulate --preset qwen3-30b-a3b --routing-drift 0 --cache T/c",
         "--routing-drift 0 is out of range"},
        {"bench swap --preset opt-125m --layers -2 --cache T/c", "--layers -2 is out of range"},
        {"bench swap --preset opt-125m --prompt-len 513 --cache T/c",
         "--prompt-len 513 is out of range (expected 1..512)"},
        {"bench serve --out-dir T/o", "--url is required (or --compare)"},
        {"bench serve --url ftp://127.0.0.1 --out-dir T/o",
         "--url ftp://127.0.0.1: scheme ftp (expected http:// or https://)"},
        {"bench serve --url nowhere --out-dir T/o", "--url nowhere: not a URL"},
        {"bench serve --url http://127.0.0.1:1 --config computron:19 --out-dir T/o",
         "--config computron:19 does not exist (0..18)"},
        {"bench serve --url http://127.0.0.1:1 --config computron:6 --models a,b --out-dir T/o",
         "--models names 2 models; computron:6 has 3"},
        {"bench serve --url http://127.0.0.1:1 --warm-requests 0 --out-dir T/o",
         "--warm-requests 0 needs --slo"},
        {"bench serve --url http://127.0.0.1:1 --max-connections 0 --out-dir T/o",
         "--max-connections 0 is out of range (expected 1..100000)"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char args[512] = "";
        for (const char *p = cases[i].args; *p; p++) { /* "T/": tmp's */
            size_t n = strlen(args);
            if (p[0] == 'T' && p[1] == '/')
                snprintf(args + n, sizeof(args) - n, "%s", tmp);
            else
                snprintf(args + n, sizeof(args) - n, "%c", *p);
        }
        snprintf(cmd, sizeof(cmd), "%s %s", BIN, args);
        expect_fail(cmd, 2, cases[i].needle);
    }
    /* ~10 TB per model: more than any test machine's disk */
    snprintf(cmd, sizeof(cmd), "%s gen-model --preset opt-30b --layers 4096 --dtype f32 --out "
                               "%s/huge", BIN, tmp);
    expect_fail(cmd, 1, "huge: writing 10104.79 GB needs more than the");
    /* bench serve: no server there, or --compare of a file that is not a run: one line, exit 1 */
    snprintf(cmd, sizeof(cmd), "%s bench serve --url http://127.0.0.1:1 --out-dir %s/o", BIN, tmp);
    expect_fail(cmd, 1, "GET http://127.0.0.1:1/v1/models: ");
    snprintf(cmd, sizeof(cmd), "%s bench serve --compare %s/none.json --out-dir %s/o", BIN, tmp,
             tmp);
    expect_fail(cmd, 1, "none.json");
    snprintf(cmd, sizeof(cmd), "%s bench workload --preset opt-30b --layers 4096 --dtype f32 "
                               "--config custom --rates 1,1 --cache %s/c --out-dir %s/o", BIN,
             tmp, tmp);
    expect_fail(cmd, 1, "--cache");
    expect_fail(cmd, 1, "writing 20209.58 GB needs more than the");
    snprintf(cmd, sizeof(cmd), "%s bench swap --preset opt-30b --layers 4096 --dtype f32 --cache "
                               "%s/c", BIN, tmp);
    expect_fail(cmd, 1, "writing 10104.79 GB needs more than the");
    /* --out-dir is checked before a model is generated */
    snprintf(path, sizeof(path), "%s/notadir", tmp);
    put_file(path, "x");
    snprintf(cmd, sizeof(cmd), "%s bench workload --config custom --rates 1 --preset opt-125m "
                               "--layers 1 --cache %s/c --out-dir %s/notadir", BIN, tmp, tmp);
    expect_fail(cmd, 1, "--out-dir");
    CHECK(!tmp_has("huge"));
    snprintf(path, sizeof(path), "%s/c", tmp);
    CHECK_MSG(stat(path, &sb) != 0, "%s was created by a refused run", path);
}

/* --devices: one parser (stack_parse_devices) behind every command; a bad
 * list is a usage error of one line, checked before a model is opened or
 * generated; cuda:G without CUDA support is an error of one line too. */
/* Greedy case `which` of an expected.json (transformers' or PEFT's): its
 * prompt as generate's --ids "a,b,..." into ids, its output as generate
 * prints it (with the newline) into want; the number of output ids. */
static size_t greedy_case(const char *path, int which, char *ids, size_t ids_cap, char *want,
                          size_t want_cap)
{
    json_t *j = json_load_file(path, 0, NULL);
    json_t *g = json_array_get(json_object_get(j, "greedy"), (size_t)which);
    json_t *prompt = json_object_get(g, "prompt"), *output = json_object_get(g, "output");
    CHECK_MSG(json_array_size(prompt) > 0 && json_array_size(output) > 0, "%s", path);
    ids[0] = want[0] = '\0';
    for (size_t i = 0; i < json_array_size(prompt); i++)
        snprintf(ids + strlen(ids), ids_cap - strlen(ids), "%s%lld", i ? "," : "",
                 (long long)json_integer_value(json_array_get(prompt, i)));
    for (size_t i = 0; i < json_array_size(output); i++)
        snprintf(want + strlen(want), want_cap - strlen(want), "%s%lld", i ? "," : "",
                 (long long)json_integer_value(json_array_get(output, i)));
    snprintf(want + strlen(want), want_cap - strlen(want), "\n");
    size_t n = json_array_size(output);
    json_decref(j);
    return n;
}

/* --adapter DIR: generate prints PeftModel's greedy ids (on the mapped
 * checkpoint and, with bench forward's device copy, through the device
 * path); an adapter of another base or no adapter directory is one line. */
static void test_adapter(void)
{
    char cmd[4096], out[4096], err[4096], path[512];
    const char *base = SHARDSWAP_SOURCE_DIR "/tests/fixtures/models/llama_gqa_f32";
    const char *lora = SHARDSWAP_SOURCE_DIR "/tests/fixtures/lora";
    snprintf(path, sizeof(path), "%s/llama_r16_all_rslora/expected.json", lora);
    char ids[1024], want[1024];
    const size_t n_out = greedy_case(path, 1, ids, sizeof(ids), want, sizeof(want));
    snprintf(cmd, sizeof(cmd),
             "%s generate --model %s --adapter %s/llama_r16_all_rslora --ids %s "
             "--max-tokens %zu",
             BIN, base, lora, ids, n_out);
    CHECK_MSG(run(cmd, out, sizeof(out), err, sizeof(err)) == 0 && strcmp(out, want) == 0,
              "%s: printed \"%s\", PEFT \"%s\" (%s)", cmd, out, want, err);
    snprintf(cmd, sizeof(cmd),
             "%s bench forward --model %s --adapter %s/llama_r8_qv --batch 2 "
             "--prompt-len 4 --gen 2 --repeat 1 --json",
             BIN, base, lora);
    CHECK_MSG(run(cmd, out, sizeof(out), err, sizeof(err)) == 0 && strstr(out, "llama_r8_qv"),
              "%s: %s", cmd, err);
    /* several: a batch spread over them against the base alone, both timed */
    snprintf(cmd, sizeof(cmd),
             "%s bench forward --model %s --adapter %s/llama_r8_qv --adapters "
             "%s/llama_r16_all_rslora,%s/llama_r32_mlp_layer1 --batch 4 --prompt-len 4 --gen 2 "
             "--repeat 2 --json",
             BIN, base, lora, lora, lora);
    CHECK_MSG(run(cmd, out, sizeof(out), err, sizeof(err)) == 0 &&
                  strstr(out, "llama_r32_mlp_layer1\"]") && strstr(out, "\"decode_ratio\"") &&
                  strstr(out, "\"base_decode_tok_s\"") && strstr(out, "\"prefill_ratio\""),
              "%s: %s %s", cmd, out, err);
    snprintf(cmd, sizeof(cmd),
             "%s bench forward --model %s --adapters %s/llama_r8_qv,%s/opt_r8_all --gen 1", BIN,
             base, lora, lora);
    expect_fail(cmd, 1, "base_model_class is OPTForCausalLM, but the base is LlamaForCausalLM");
    snprintf(cmd, sizeof(cmd), "%s generate --model %s --adapter %s/opt_r8_all --ids 1,2", BIN,
             base, lora);
    expect_fail(cmd, 1, "base_model_class is OPTForCausalLM, but the base is LlamaForCausalLM");
    snprintf(cmd, sizeof(cmd),
             "%s forward --model %s --adapter %s/nonexistent --ids 1,2 --out %s/f", BIN, base, lora,
             tmp);
    expect_fail(cmd, 1, "adapter_config.json");
}

/* bench forward on a model with experts counts what a decode step reads:
 * every weight but the routed experts, and of those the ones the step's
 * tokens routed to. One sequence reads top-k experts per layer a step
 * (mixtral_moe_f32: 2 layers, top 2 of 4); a batch of several, at least
 * that and at most every expert. A dense model reads every weight. */
static void test_bench_experts(void)
{
    const char *moe = SHARDSWAP_SOURCE_DIR "/tests/fixtures/models/mixtral_moe_f32";
    const int layers = 2, top_k = 2, experts = 4;
    char cmd[4096], out[4096], err[4096];
    for (int batch = 1; batch <= 4; batch += 3) {
        snprintf(cmd, sizeof(cmd),
                 "%s bench forward --model %s --batch %d --prompt-len 6 --gen 5 --repeat 1 "
                 "--threads 1 --json",
                 BIN, moe, batch);
        CHECK_MSG(run(cmd, out, sizeof(out), err, sizeof(err)) == 0, "%s: %s", cmd, err);
        json_t *j = parse_json_line(cmd, out);
        if (!j)
            continue;
        double all = json_number_value(json_object_get(j, "weight_bytes"));
        double eb = json_number_value(json_object_get(j, "expert_bytes"));
        double reads = json_number_value(json_object_get(j, "expert_reads_per_step"));
        double step = json_number_value(json_object_get(j, "decode_weight_bytes_per_step"));
        CHECK_MSG(eb > 0 && eb < all, "%s: expert_bytes %g of %g", cmd, eb, all);
        if (batch == 1)
            CHECK_MSG(reads == layers * top_k, "%s: %g experts read a step, want %d", cmd, reads,
                      layers * top_k);
        else
            CHECK_MSG(reads >= layers * top_k && reads <= layers * experts,
                      "%s: %g experts read a step, want %d..%d", cmd, reads, layers * top_k,
                      layers * experts);
        const double want = all - eb + reads * eb / (layers * experts);
        CHECK_MSG(fabs(step - want) <= 1, "%s: %g bytes a step, want %g", cmd, step, want);
        /* the touched figures: the experts' share of the step, and its
         * bandwidth, the decode's over those bytes */
        double ebs = json_number_value(json_object_get(j, "decode_expert_bytes_per_step"));
        CHECK_MSG(fabs(ebs - reads * eb / (layers * experts)) <= 1,
                  "%s: %g expert bytes a step, want %g", cmd, ebs, reads * eb / (layers * experts));
        double touched = json_number_value(json_object_get(j, "decode_touched_gb_s"));
        double gbs = json_number_value(json_object_get(j, "decode_weight_gb_s"));
        CHECK_MSG(touched > 0 && fabs(touched - gbs) <= 1e-3 * gbs, "%s: touched %g GB/s, want %g",
                  cmd, touched, gbs);
        CHECK_MSG(json_is_number(json_object_get(j, "touched_vs_read")), "%s: no touched_vs_read",
                  cmd);
        json_decref(j);
    }
    snprintf(cmd, sizeof(cmd),
             "%s bench forward --model %s/tests/fixtures/models/llama_gqa_f32 --prompt-len 4 "
             "--gen 2 --repeat 1 --threads 1 --json",
             BIN, SHARDSWAP_SOURCE_DIR);
    CHECK_MSG(run(cmd, out, sizeof(out), err, sizeof(err)) == 0, "%s: %s", cmd, err);
    json_t *j = parse_json_line(cmd, out);
    if (j) {
        CHECK_MSG(json_number_value(json_object_get(j, "expert_bytes")) == 0 &&
                      json_number_value(json_object_get(j, "decode_weight_bytes_per_step")) ==
                          json_number_value(json_object_get(j, "weight_bytes")),
                  "%s: a dense model's step reads every weight: %s", cmd, out);
        CHECK_MSG(!json_object_get(j, "decode_touched_gb_s"),
                  "%s: a dense model has no touched figures: %s", cmd, out);
        json_decref(j);
    }
}

/* generate on a Llama-family fixture, which has no tokenizer: --ids gives
 * transformers' greedy ids back (expected.json), comma-separated on one
 * line; --prompt there is one line saying so and pointing at --ids; the
 * two flags are one or the other. gen-model of a Llama preset writes no
 * tokenizer (its checkpoints are hundreds of MB even with one layer, so
 * only the refusals before writing are run here). */
static void test_llama_ids(void)
{
    static const char *names[] = {"llama_gqa_f32", "qwen2_bias_f32", "phi3_partial_f32"};
    char cmd[4096], out[4096], err[4096], path[512];
    for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
        char dir[256];
        snprintf(dir, sizeof(dir), "%s/tests/fixtures/models/%s", SHARDSWAP_SOURCE_DIR, names[k]);
        snprintf(path, sizeof(path), "%s/expected.json", dir);
        char ids[1024], want[1024];
        const size_t n_out = greedy_case(path, 0, ids, sizeof(ids), want, sizeof(want));
        snprintf(cmd, sizeof(cmd), "%s generate --model %s --ids %s --max-tokens %zu", BIN, dir,
                 ids, n_out);
        CHECK_MSG(run(cmd, out, sizeof(out), err, sizeof(err)) == 0 && strcmp(out, want) == 0,
                  "%s: printed \"%s\", transformers \"%s\" (%s)", cmd, out, want, err);
        if (k == 0) {
            snprintf(cmd, sizeof(cmd), "%s generate --model %s --prompt hi", BIN, dir);
            expect_fail(cmd, 1, "has no tokenizer that loads");
            expect_fail(cmd, 1, "--ids I,J,...");
            snprintf(cmd, sizeof(cmd), "%s generate --model %s --ids 1,9999", BIN, dir);
            expect_fail(cmd, 1, "outside the model's vocabulary of 256 tokens");
            snprintf(cmd, sizeof(cmd), "%s inspect --model %s", BIN, dir);
            CHECK_MSG(run(cmd, out, sizeof(out), err, sizeof(err)) == 0 &&
                          strstr(out, "LlamaForCausalLM") && strstr(out, "llama"),
                      "%s: %s %s", cmd, out, err);
        }
    }
    /* an OPT model with its tokenizer prints text for --ids, as for --prompt */
    snprintf(cmd, sizeof(cmd), "%s generate --model %s --tokenizer %s --ids 2,250 --max-tokens 2",
             BIN, FIXTURE, OPT_TOKENIZER);
    CHECK_MSG(run(cmd, out, sizeof(out), err, sizeof(err)) == 0 && !strchr(out, ','), "%s: %s %s",
              cmd, out, err);
    /* exactly one of --prompt and --ids */
    expect_fail(BIN " generate --model x", 2, "exactly one of --prompt TEXT or --ids");
    expect_fail(BIN " generate --model x --prompt hi --ids 1,2", 2,
                "exactly one of --prompt TEXT or --ids");
    expect_fail(BIN " generate --model x --ids 1,-2", 2, "comma-separated list of token ids");
    expect_fail(BIN " generate --model x --ids ''", 2, "--ids expects a non-empty");
    CHECK(run(BIN " generate --help", out, sizeof(out), NULL, 0) == 0 && strstr(out, "--ids") &&
          !strstr(out, "OPT checkpoint"));
    /* gen-model's refusals come before anything is written, for a Llama
     * preset as for OPT */
    snprintf(cmd, sizeof(cmd), "%s gen-model --preset llama-3.2-1b --layers 1 --tokenizer-from "
             "%s/none --out %s/llama", BIN, tmp, tmp);
    expect_fail(cmd, 1, "--tokenizer-from");
    snprintf(path, sizeof(path), "%s/llama", tmp);
    struct stat sb;
    CHECK_MSG(stat(path, &sb) != 0, "%s exists after a refused gen-model", path);
    CHECK(run(BIN " gen-model --help", out, sizeof(out), NULL, 0) == 0 &&
          strstr(out, "none for the Llama family"));
}

static void test_devices(void)
{
    /* the parser itself */
    struct stack_config sc = {0};
    CHECK(stack_parse_devices("--devices", "3", &sc) == 0 && strcmp(sc.device_kind, "cpu") == 0 &&
          sc.n_devices == 3 && !sc.gpus_set);
    CHECK(stack_parse_devices("--devices", "cpu:0,cpu:1", &sc) == 0 &&
          strcmp(sc.device_kind, "cpu") == 0 && sc.n_devices == 2 && !sc.gpus_set);
    CHECK(stack_parse_devices("--devices", "cuda:0,cuda:0,cuda:3", &sc) == 0 &&
          strcmp(sc.device_kind, "cuda") == 0 && sc.n_devices == 3 && sc.gpus_set &&
          sc.gpus[0] == 0 && sc.gpus[1] == 0 && sc.gpus[2] == 3);
    CHECK(!sc.procs_set && sc.procs[0] == 0 && sc.procs[2] == 0);
    /* items of other processes (P/): CPU indices count on each process */
    CHECK_MSG(stack_parse_devices("--devices", "cpu:0,1/cpu:0,1/cpu:1", &sc) == 0, "%s", err_msg());
    CHECK(strcmp(sc.device_kind, "cpu") == 0 && sc.n_devices == 3 && !sc.gpus_set && sc.procs_set &&
          sc.procs[0] == 0 && sc.procs[1] == 1 && sc.procs[2] == 1);
    CHECK(stack_parse_devices("--devices", "1/cpu:0,0/cpu:0,2/cpu:0,1/cpu:1", &sc) == 0 &&
          sc.n_devices == 4 && sc.procs_set && sc.procs[0] == 1 && sc.procs[1] == 0 &&
          sc.procs[2] == 2 && sc.procs[3] == 1);
    CHECK(stack_parse_devices("--devices", "0/cuda:0,1/cuda:0,1/cuda:0,1/cuda:3", &sc) == 0 &&
          strcmp(sc.device_kind, "cuda") == 0 && sc.n_devices == 4 && sc.gpus_set && sc.procs_set &&
          sc.procs[0] == 0 && sc.procs[1] == 1 && sc.procs[3] == 1 && sc.gpus[0] == 0 &&
          sc.gpus[1] == 0 && sc.gpus[2] == 0 && sc.gpus[3] == 3);
    CHECK(stack_parse_devices("--devices", "0/cpu:0,0/cpu:1", &sc) == 0 && sc.procs_set &&
          sc.procs[0] == 0 && sc.procs[1] == 0); /* a prefix given, if only 0's */
    /* the count form and a list without prefixes reset what a list set */
    CHECK(stack_parse_devices("--devices", "2", &sc) == 0 && !sc.procs_set && sc.procs[1] == 0 &&
          sc.procs[3] == 0);
    CHECK(stack_parse_devices("--devices", "1/cpu:0", &sc) == 0 && sc.procs_set);
    CHECK(stack_parse_devices("--devices", "cpu:0,cpu:1", &sc) == 0 && !sc.procs_set &&
          sc.procs[0] == 0);
    static const struct {
        const char *list, *needle;
    } bad[] = {
        {"", "expected N, or a list like cpu:0,cpu:1 or cuda:0,cuda:1"},
        {"0", "expected 1..64 CPU devices"},
        {"65", "expected 1..64 CPU devices"},
        {"-1", "expected N, or a list"},
        {"gpu:0", "expected N, or a list"},
        {"cuda:0,", "expected N, or a list"},
        {"cuda:0,,cuda:1", "expected N, or a list"},
        {"cuda:", "expected cuda:INDEX items separated by commas"},
        {"cuda:x", "expected cuda:INDEX items"},
        {"cuda:0 ", "expected cuda:INDEX items"},
        {"cuda:+1", "expected cuda:INDEX items"},
        {"cuda:-1", "a negative index"},
        {"cuda:1024", "GPU ordinal 1024 (expected 0..1023)"},
        {"cuda:99999999999999999999", "expected cuda:INDEX items"},
        {"cpu:0,cuda:1", "one kind of device only"},
        {"cuda:0,cpu:1", "one kind of device only"},
        {"cpu:1", "expected CPU indices 0, 1, ... in order"},
        {"cpu:0,cpu:0", "expected CPU indices 0, 1, ... in order"},
        /* process prefixes */
        {"-1/cpu:0", "a negative process number"},
        {"cpu:0,-2/cpu:0", "a negative process number"},
        {"x/cpu:0", "expected a process number 0..1023 before '/' (like 1/cpu:0)"},
        {"1x/cpu:0", "expected a process number 0..1023 before '/'"},
        {"/cpu:0", "expected a process number 0..1023 before '/'"},
        {"+1/cpu:0", "expected a process number 0..1023 before '/'"},
        {"1024/cpu:0", "expected a process number 0..1023 before '/'"},
        {"99999999999999999999/cpu:0", "expected a process number 0..1023"},
        {"1/", "'1/' without a device after it (expected P/cpu:INDEX or P/cuda:INDEX)"},
        {"cpu:0,1/", "'1/' without a device after it"},
        {"1/,cpu:0", "'1/' without a device after it"},
        {"1/2", "expected N, or a list like cpu:0,cpu:1 or cuda:0,cuda:1 (an item of process P "
                "as P/cpu:0)"},
        {"1//cpu:0", "expected N, or a list"},
        {"1/gpu:0", "expected N, or a list"},
        {"1/cpu:1", "expected CPU indices 0, 1, ... in order within each process (process 1's "
                    "cpu:1 where its cpu:0 comes next)"},
        {"cpu:0,1/cpu:0,cpu:2", "(process 0's cpu:2 where its cpu:1 comes next)"},
        {"cpu:0,1/cpu:0,1/cpu:0", "(process 1's cpu:0 where its cpu:1 comes next)"},
        {"0/cpu:0,1/cuda:0", "one kind of device only"},
        {"1/cuda:-1", "a negative index"},
        {"1/cuda:1024", "GPU ordinal 1024"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct stack_config c = {.n_devices = 7};
        int rc = stack_parse_devices("--devices", bad[i].list, &c);
        CHECK_MSG(rc == ERR_INVALID && strstr(err_msg(), bad[i].needle) &&
                      strncmp(err_msg(), "--devices ", 10) == 0 && !strchr(err_msg(), '\n'),
                  "\"%s\": %d '%s' lacks '%s'", bad[i].list, rc, err_msg(), bad[i].needle);
        CHECK_MSG(c.n_devices == 7, "\"%s\": the config changed on an error", bad[i].list);
    }
    char many[65 * 8 + 1] = "";
    for (int i = 0; i < 65; i++)
        strcat(many, i ? ",cuda:0" : "cuda:0");
    CHECK(stack_parse_devices("--devices", many, &sc) == ERR_INVALID &&
          strstr(err_msg(), "more than 64 devices"));

    /* CPU device budgets plus the host budget above the machine's memory:
     * refused at start, before any arena is touched, naming the numbers */
    {
        unsigned long long phys =
            (unsigned long long)sysconf(_SC_PHYS_PAGES) * (unsigned long long)sysconf(_SC_PAGESIZE);
        const uint64_t G = 1ull << 30, two[2] = {12 * G, 12 * G};
        const uint64_t machine = 23 * G + G / 2; /* the 23.5 GiB machine */
        CHECK(stack_check_memory(two, 1, 4 * G, false, machine) == 0);
        int rc = stack_check_memory(two, 2, 0, false, machine);
        CHECK_MSG(rc == ERR_NOMEM && strstr(err_msg(), "(2 devices, 24.00 GiB in all)") &&
                      strstr(err_msg(), "are 24.00 GiB, more than the machine's 23.50 GiB of "
                                        "physical memory (MemTotal)"),
                  "%d %s", rc, err_msg());
        rc = stack_check_memory(two, 1, 12 * G, true, machine);
        CHECK_MSG(rc == ERR_NOMEM && strstr(err_msg(), "(1 device, 12.00 GiB in all)") &&
                      strstr(err_msg(), "host budget (12.00 GiB, sized for every model's weights)"),
                  "%d %s", rc, err_msg());
        CHECK(stack_check_memory(two, 2, 0, false, 0) == 0); /* unknown */
        /* end to end with a host budget above the machine (never touched at
         * start, so a server that does not refuse listens, and the timeout
         * ends it) */
        char c2[2048], e2[4096] = "";
        snprintf(c2, sizeof(c2),
                 "timeout 20 %s serve --model a=%s --device-budget 64MiB "
                 "--host-budget %llu --port 0",
                 BIN, FIXTURE, phys / 10 * 12);
        rc = run(c2, NULL, 0, e2, sizeof(e2));
        const char *last = strstr(e2, "shardswap serve: ");
        CHECK_MSG(rc == 1 && last && strstr(last, "the CPU device budgets (1 device, ") &&
                      strstr(last, "GiB of physical memory (MemTotal)") && count_lines(last) == 1,
                  "%s: exit %d, stderr \"%s\"", c2, rc, e2);
    }

    /* serve with a FIFO as a model's vocab.json: refused at start, naming it
     * (before: it blocked before listening, deaf to SIGTERM) */
    {
        char dir[512], c3[4096], e3[4096] = "";
        snprintf(dir, sizeof(dir), "%s/fifomodel", tmp);
        snprintf(c3, sizeof(c3),
                 "rm -rf %s && mkdir %s && ln -s %s/config.json %s/model.safetensors "
                 "%s/ && ln -s %s/data/tokenizer/opt/merges.txt %s/ && mkfifo %s/vocab.json",
                 dir, dir, FIXTURE, FIXTURE, dir, SHARDSWAP_SOURCE_DIR, dir, dir);
        CHECK_MSG(system(c3) == 0, "%s", c3);
        snprintf(c3, sizeof(c3), "timeout 20 %s serve --model a=%s --port 0", BIN, dir);
        int rc = run(c3, NULL, 0, e3, sizeof(e3));
        CHECK_MSG(rc == 1 && strstr(e3, "vocab.json: is a FIFO, expected a regular file"),
                  "%s: exit %d, stderr \"%s\"", c3, rc, e3);
    }

    /* every command that takes the flag: usage errors (exit 2) of one line */
    char cmd[4096];
    static const struct {
        const char *args, *needle;
    } usage[] = {
        {"serve --devices cpu:0,cuda:1 --model a=F", "shardswap serve: --devices cpu:0,cuda:1: "
                                                     "one kind of device only"},
        {"serve --devices cuda:-1 --model a=F", "--devices cuda:-1: a negative index"},
        {"serve --devices 65 --model a=F", "--devices 65: expected 1..64 CPU devices"},
        /* another process's device: the flag reads, the job (none: 1 process) refuses */
        {"serve --devices cpu:0,1/cpu:0 --model a=F",
         "devices: device 1 is on process 1, but the job has 1 process (start it with mpirun "
         "-n 2 or more)"},
        {"serve --devices 1/cpu:0,1/cpu:2 --model a=F",
         "--devices 1/cpu:0,1/cpu:2: expected CPU indices 0, 1, ... in order within each "
         "process"},
        /* the ranges config.h gives the YAML keys too */
        {"serve --http-threads 257 --model a=F", "--http-threads 257 is out of range (expected "
                                                 "1..256)"},
        {"serve --header-timeout 0 --model a=F", "(expected 1..86400)"},
        {"serve --max-connections-per-client -1 --model a=F", "(expected 0..1048576)"},
        {"serve --port-file /dev/null --model a=F", "shardswap serve: --port-file /dev/null: a "
                                                    "character device, expected a regular file or "
                                                    "no file"},
        {"generate --model F --prompt hi --devices cuda:0,cuda:0",
         "shardswap generate: --devices cuda:0,cuda:0: this command runs on one device (got 2)"},
        {"generate --model F --prompt hi --devices cpu:1", "in order"},
        {"generate --model F --prompt hi --devices 1/cpu:0",
         "shardswap generate: --devices 1/cpu:0: this command runs on a device of its own "
         "process, not process 1's"},
        {"forward --model F --ids 2 --out T/o.bin --devices tpu:0", "shardswap forward: --devices "
                                                                    "tpu:0: expected N"},
        {"bench forward --model F --devices 2", "shardswap bench forward: --devices 2: this "
                                                "command runs on one device (got 2)"},
        {"bench forward --model F --devices cuda:0 --profile",
         "shardswap bench forward: --profile times CPU kernels"},
        {"bench forward --model F --step-batch 4097", "--step-batch"},
        {"bench forward --model F --step-batch 2 --adapters F",
         "shardswap bench forward: --step-batch times the base model; not with --adapter"},
        {"bench swap --preset opt-125m --devices cuda:0 --layouts 1x1,2x1 --cache T/c",
         "shardswap bench swap: layout 2x1 needs 2 devices; --devices cuda:0 lists 1"},
        {"bench swap --preset opt-125m --devices cuda:0,cpu:1 --cache T/c",
         "one kind of device only"},
        {"bench workload --devices cuda:0 --link-gbps 10 --cache T/c",
         "--link-gbps is for CPU devices only"},
        {"bench workload --devices 3 --tp 2 --cache T/c",
         "--devices 3 names 3 devices but --tp is 2"},
        {"bench workload --devices cuda:0,cuda:1,cuda:2,cuda:3,cuda:4,cuda:5,cuda:6,cuda:7,cuda:8 "
         "--cache T/c",
         "9 devices, at most 8"},
    };
    for (size_t i = 0; i < sizeof(usage) / sizeof(usage[0]); i++) {
        char args[1024] = "";
        for (const char *p = usage[i].args; *p; p++) { /* "T/": tmp's; "F": the fixture */
            size_t n = strlen(args);
            if (p[0] == 'T' && p[1] == '/')
                snprintf(args + n, sizeof(args) - n, "%s", tmp);
            else if (p[0] == 'F' && (p[1] == ' ' || p[1] == '\0') && p[-1] != '-')
                snprintf(args + n, sizeof(args) - n, "%s", FIXTURE);
            else
                snprintf(args + n, sizeof(args) - n, "%c", *p);
        }
        snprintf(cmd, sizeof(cmd), "%s %s", BIN, args);
        expect_fail(cmd, 2, usage[i].needle);
    }
    char path[256];
    struct stat sb;
    snprintf(path, sizeof(path), "%s/c", tmp);
    CHECK_MSG(stat(path, &sb) != 0, "%s was created by a refused run", path);

    /* cuda:0 where no CUDA device opens: one line, exit 1 (without CUDA
     * support the stub's "built without CUDA"); not run where one does */
    struct device *d = NULL;
    int rc = device_open_cuda(0, 0, 1u << 20, &d);
    device_close(d);
    if (rc == 0) {
        printf("a CUDA device opens: the no-CUDA errors are not checked\n");
        return;
    }
    const char *needle = rc == ERR_UNSUPPORTED ? "built without CUDA" : "cuda";
    snprintf(cmd, sizeof(cmd), "%s generate --model %s --tokenizer %s --prompt hi --devices cuda:0",
             BIN, FIXTURE, OPT_TOKENIZER);
    expect_fail(cmd, 1, needle);
    snprintf(cmd, sizeof(cmd), "%s forward --model %s --ids 2,5 --out %s/l.bin --devices cuda:0",
             BIN, FIXTURE, tmp);
    expect_fail(cmd, 1, needle);
    snprintf(cmd, sizeof(cmd), "%s bench forward --model %s --devices cuda:0 --prompt-len 2 --gen 1",
             BIN, FIXTURE);
    expect_fail(cmd, 1, needle);
    snprintf(cmd, sizeof(cmd), "%s bench swap --model %s --layouts 1x1 --devices cuda:0", BIN,
             FIXTURE);
    expect_fail(cmd, 1, needle);
    snprintf(cmd, sizeof(cmd), "%s serve --model a=%s --port 0 --log-level error --devices cuda:0",
             BIN, FIXTURE);
    expect_fail(cmd, 1, needle);
}


/* chat-template: the rendered prompt exactly (no newline added), bos/eos and
 * the template from the model directory, tools passed through, and one-line
 * errors for raise_exception, bad requests and a missing template. */
/* text has word as a whole word: not within a longer name (swapwise in
 * swapwise-preempt does not count) */
static bool names_word(const char *text, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = strstr(text, word); p; p = strstr(p + 1, word)) {
        bool before = p == text || !(isalnum((unsigned char)p[-1]) || p[-1] == '-');
        bool after = !(isalnum((unsigned char)p[n]) || p[n] == '-');
        if (before && after)
            return true;
    }
    return false;
}

static void test_chat_template(void)
{
    char dir[256], path[512], cmd[2048], out[4096], err[4096];
    snprintf(dir, sizeof(dir), "%s/chat", tmp);
    CHECK(mkdir(dir, 0755) == 0);
    snprintf(path, sizeof(path), "%s/tokenizer_config.json", dir);
    test_write_text(path, "{\"bos_token\": {\"content\": \"<s>\"}, \"eos_token\": \"</s>\", \"chat_template\": "
                     "\"{{ bos_token }}{% for m in messages %}[{{ m.role }}:{{ m.content }}]"
                     "{% endfor %}{% if add_generation_prompt %}>{% endif %}{{ eos_token }}\"}");
    snprintf(cmd, sizeof(cmd),
             "printf '%%s' '{\"messages\": [{\"role\": \"user\", \"content\": \"h\\u00e9\"}], "
             "\"add_generation_prompt\": true}' | %s chat-template --model %s",
             BIN, dir);
    CHECK_MSG(run(cmd, out, sizeof(out), err, sizeof(err)) == 0 && strcmp(out, "<s>[user:h\xc3\xa9]></s>") == 0,
              "%s: [%s] %s", cmd, out, err);

    /* --template, tools, --now (strftime_now in local time: TZ=UTC) */
    snprintf(path, sizeof(path), "%s/t.jinja", dir);
    test_write_text(path, "{{ tools | tojson }}|{{ strftime_now('%Y-%m-%d') }}\n");
    snprintf(cmd, sizeof(cmd),
             "printf '%%s' '{\"messages\": [], \"tools\": [{\"type\": \"function\"}]}' | TZ=UTC %s "
             "chat-template --model %s --template %s --now 86400",
             BIN, dir, path);
    CHECK_MSG(run(cmd, out, sizeof(out), err, sizeof(err)) == 0 &&
                  strcmp(out, "[{\"type\": \"function\"}]|1970-01-02") == 0,
              "%s: [%s] %s", cmd, out, err);

    /* chat_template_kwargs become variables */
    test_write_text(path, "{{ enable_thinking }}|{{ reasoning_effort }}");
    snprintf(cmd, sizeof(cmd),
             "printf '%%s' '{\"messages\": [], \"chat_template_kwargs\": {\"enable_thinking\": false, "
             "\"reasoning_effort\": \"low\"}}' | %s chat-template --model %s --template %s",
             BIN, dir, path);
    CHECK_MSG(run(cmd, out, sizeof(out), err, sizeof(err)) == 0 && strcmp(out, "False|low") == 0,
              "%s: [%s] %s", cmd, out, err);

    /* raise_exception: non-zero, the template's message on stderr */
    test_write_text(path, "{% if messages[0].role == 'system' %}{{ raise_exception('System role not "
                     "supported') }}{% endif %}");
    snprintf(cmd, sizeof(cmd),
             "printf '%%s' '{\"messages\": [{\"role\": \"system\", \"content\": \"x\"}]}' | %s "
             "chat-template --model %s --template %s",
             BIN, dir, path);
    expect_fail(cmd, 1, "System role not supported");

    /* bad requests, a template that does not parse, no template */
    snprintf(cmd, sizeof(cmd), "printf 'not json' | %s chat-template --model %s", BIN, dir);
    expect_fail(cmd, 1, "malformed JSON");
    snprintf(cmd, sizeof(cmd), "printf '{\"messages\": 3}' | %s chat-template --model %s", BIN, dir);
    expect_fail(cmd, 1, "\"messages\" array");
    snprintf(cmd, sizeof(cmd), "printf '{\"messages\": [1]}' | %s chat-template --model %s", BIN, dir);
    expect_fail(cmd, 1, "messages[0] is not an object");
    test_write_text(path, "line 1\n{% for x in y %}\n{{ x|wordwrap }}{% endfor %}");
    snprintf(cmd, sizeof(cmd), "printf '{\"messages\": []}' | %s chat-template --model %s --template %s",
             BIN, dir, path);
    expect_fail(cmd, 1, "chat template line 3: filter \"wordwrap\" is not supported");
    snprintf(cmd, sizeof(cmd), "printf '{\"messages\": []}' | %s chat-template --model %s", BIN, tmp);
    expect_fail(cmd, 1, "no chat template");
    expect_fail(BIN " chat-template", 2, "--model");

    /* chat_template as a list of {name, template}, and chat_template.jinja */
    snprintf(path, sizeof(path), "%s/tokenizer_config.json", dir);
    test_write_text(path, "{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"T\"}, "
                     "{\"name\": \"default\", \"template\": \"D{{ bos_token }}\"}]}");
    snprintf(cmd, sizeof(cmd), "printf '{\"messages\": []}' | %s chat-template --model %s", BIN, dir);
    CHECK_MSG(run(cmd, out, sizeof(out), err, sizeof(err)) == 0 && strcmp(out, "D") == 0, "%s: [%s] %s",
              cmd, out, err);
    test_write_text(path, "{\"eos_token\": \"E\"}");
    snprintf(path, sizeof(path), "%s/chat_template.jinja", dir);
    test_write_text(path, "J{{ eos_token }}\n");
    CHECK_MSG(run(cmd, out, sizeof(out), err, sizeof(err)) == 0 && strcmp(out, "JE") == 0, "%s: [%s] %s",
              cmd, out, err);
}

/* Every command and benchmark there is: the top-level help lists each. */
static const char *const commands[] = {
    "serve",       "generate",   "tokenize",      "chat-template", "forward",
    "gen-model",   "inspect",    "bench forward", "bench swap",    "bench workload",
    "bench serve", "bench comm", "bench gemv",    "bench lora",    "bench tokenize",
    "bench read"};

/* The top-level help, asked for (stdout, exit 0) or not (no command: the
 * same on stderr, exit 2), lists every command, one line each, serve's
 * saying what it serves. */
static void test_top_help(void)
{
    char out[1 << 14], err[1 << 14];
    CHECK(run(BIN " --help", out, sizeof(out), NULL, 0) == 0);
    CHECK(run(BIN, NULL, 0, err, sizeof(err)) == 2);
    CHECK_MSG(strcmp(out, err) == 0, "shardswap with no command: \"%s\", --help: \"%s\"", err, out);
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        char line[64];
        snprintf(line, sizeof(line), "\n  %s ", commands[i]);
        bool bench = strncmp(commands[i], "bench ", 6) == 0;
        if (bench)
            snprintf(line, sizeof(line), "\n    %s ", commands[i]);
        CHECK_MSG(strstr(out, line), "shardswap --help has no line for %s:\n%s", commands[i], out);
    }
    const char *serve = strstr(out, "\n  serve ");
    const char *end = serve ? strchr(serve + 1, '\n') : NULL;
    char line[512] = "";
    if (serve && end)
        snprintf(line, sizeof(line), "%.*s", (int)(end - serve), serve);
    CHECK_MSG(strstr(line, "completions") && strstr(line, "chat"),
              "serve's line does not say it serves completions and chat: \"%s\"", line);
    /* an unknown command names them all */
    expect_fail(BIN " frobnicate", 2, "unknown command");
    CHECK(run(BIN " frobnicate", NULL, 0, err, sizeof(err)) == 2);
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        if (strncmp(commands[i], "bench ", 6) != 0)
            CHECK_MSG(strstr(err, commands[i]), "unknown command: \"%s\" lacks %s", err,
                      commands[i]);
}

/* serve --help's --policy names every policy the engine runs and the
 * default. */
static void test_policy_help(void)
{
    char out[1 << 16], names[512], want[128];
    CHECK(run(BIN " serve --help", out, sizeof(out), NULL, 0) == 0);
    const char *line = strstr(out, "\n  --policy NAME");
    const char *end = line ? strchr(line + 1, '\n') : NULL;
    char help[1024] = "";
    if (line && end)
        snprintf(help, sizeof(help), "%.*s", (int)(end - line), line);
    snprintf(names, sizeof(names), "%s", sched_policy_names());
    for (char *save = NULL, *p = strtok_r(names, "|", &save); p; p = strtok_r(NULL, "|", &save))
        CHECK_MSG(names_word(help, p), "serve --help's --policy does not name %s: \"%s\"", p, help);
    snprintf(want, sizeof(want), "(default %s)", sched_policy_default());
    CHECK_MSG(strstr(help, want), "serve --help's --policy lacks \"%s\": \"%s\"", want, help);
}

/* An unknown preset, wherever one is taken, exits 2 as another bad flag
 * value does, with the list of presets; nothing is written. */
static void test_presets(void)
{
    char cmd[2048], want[1024];
    snprintf(want, sizeof(want), "--preset \"opt-1b\" is not one of %s", model_preset_names());
    static const char *const takers[] = {"gen-model --out %s/nopreset-out",
                                         "bench swap --cache %s/nopreset-out",
                                         "bench workload --out-dir %s/nopreset-out"};
    for (size_t i = 0; i < sizeof(takers) / sizeof(takers[0]); i++) {
        char rest[512];
        snprintf(rest, sizeof(rest), takers[i], tmp);
        snprintf(cmd, sizeof(cmd), "%s %s --preset opt-1b", BIN, rest);
        expect_fail(cmd, 2, want);
    }
    CHECK(!tmp_has("nopreset-out"));
    /* --help lists them */
    char out[1 << 14];
    CHECK(run(BIN " gen-model --help", out, sizeof(out), NULL, 0) == 0 &&
          strstr(out, model_preset_names()));
}

int main(void)
{
    snprintf(tmp, sizeof(tmp), "/tmp/shardswap_cli_XXXXXX");
    CHECK(mkdtemp(tmp) != NULL);
    char out[1 << 16], err[4096], cmd[2048];

    /* help */
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        snprintf(cmd, sizeof(cmd), "%s %s --help", BIN, commands[i]);
        CHECK_MSG(run(cmd, out, sizeof(out), NULL, 0) == 0 && strstr(out, "usage:"), "%s", cmd);
    }
    test_top_help();
    test_policy_help();
    /* bench workload's --help names every policy it can run (it listed
     * four of the five engine policies once) */
    {
        char names[512];
        snprintf(names, sizeof(names), "%s", sched_policy_names_sim());
        CHECK(run(BIN " bench workload --help", out, sizeof(out), NULL, 0) == 0);
        for (char *save = NULL, *p = strtok_r(names, "|", &save); p;
             p = strtok_r(NULL, "|", &save)) {
            CHECK_MSG(names_word(out, p), "bench workload --help does not name policy %s", p);
        }
    }
    test_devices();
    test_adapter();
    test_bench_experts();
    test_chat_template();
    test_gen_model_fifo();
    /* bench gemv refuses an ISA it does not know before measuring anything */
    expect_fail(BIN " bench gemv --kernel sse9", 2, "unknown GEMV kernel");
    expect_fail(BIN " bench gemv --qkernel vnni-m9", 2,
                "unknown quantized kernel \"vnni-m9\" (expected vnni, ");
    /* bench lora refuses more adapters than rows, and a kernel it does not know */
    expect_fail(BIN " bench lora --adapters 9", 2, "--adapters 9 is out of range (expected 1..8");
    expect_fail(BIN " bench lora --kernel sse9", 2, "--kernel");
    /* bench swap skips a layout a quantized checkpoint cannot be cut into
     * (Q4_K columns across TP 2), saying why, and measures the others */
    {
        const char *q4 = SHARDSWAP_SOURCE_DIR "/tests/fixtures/gguf/llama_quant/model-q4_k_m.gguf";
        snprintf(cmd, sizeof(cmd), "%s bench swap --model %s --layouts 2x1,1x1 --repeat 1", BIN,
                 q4);
        CHECK_MSG(run(cmd, out, sizeof(out), err, sizeof(err)) == 0, "%s: %s", cmd, err);
        CHECK_MSG(strstr(out, "layout 2x1 skipped: ") && strstr(out, "block boundaries") &&
                      strstr(out, "\n1x1 "),
                  "%s", out);
        snprintf(cmd, sizeof(cmd), "%s bench swap --model %s --layouts 2x1,1x1 --repeat 1 --json",
                 BIN, q4);
        CHECK(run(cmd, out, sizeof(out), err, sizeof(err)) == 0);
        json_t *j = parse_json_line(cmd, out);
        json_t *sk = j ? json_array_get(json_object_get(j, "skipped_layouts"), 0) : NULL;
        const char *why = json_string_value(json_object_get(sk, "reason"));
        CHECK_MSG(j && json_array_size(json_object_get(j, "layouts")) == 1 && sk &&
                      json_integer_value(json_object_get(sk, "tp")) == 2 && why &&
                      strstr(why, "block boundaries"),
                  "%s", out);
        json_decref(j);
    }
    /* --help states the range each value is checked against */
    CHECK(run(BIN " generate --help", out, sizeof(out), NULL, 0) == 0 &&
          strstr(out, "[0 < P <= 1]") && strstr(out, "[1..1048576]"));

    /* NaN in a weight: inspect names the tensor */
    {
        char nan_dir[256], path[512];
        snprintf(nan_dir, sizeof(nan_dir), "%s/nanmodel", tmp);
        snprintf(cmd, sizeof(cmd), "cp -r %s %s", FIXTURE, nan_dir);
        CHECK(system(cmd) == 0);
        snprintf(path, sizeof(path), "%s/model.safetensors", nan_dir);
        struct st_checkpoint *ck = NULL;
        CHECK(st_open(path, &ck) == 0);
        const struct st_tensor *w = ck ? st_find(ck, "model.decoder.layers.0.fc1.weight") : NULL;
        CHECK(w && w->dtype == DTYPE_F32);
        size_t off = w ? w->file_offset + 4 * 7 : 0;
        st_close(ck);
        FILE *f = fopen(path, "r+b");
        const float nan = NAN;
        CHECK(f && fseek(f, (long)off, SEEK_SET) == 0 && fwrite(&nan, 4, 1, f) == 1);
        if (f)
            fclose(f);
        snprintf(cmd, sizeof(cmd), "%s inspect --model %s", BIN, nan_dir);
        CHECK(run(cmd, out, sizeof(out), err, sizeof(err)) == 0);
        CHECK_MSG(strstr(out, "finite           no: model.decoder.layers.0.fc1.weight") &&
                      strstr(out, "(element 7)") && strstr(err, "warning"),
                  "%s: %s / %s", cmd, out, err);
        snprintf(cmd, sizeof(cmd), "%s inspect --model %s", BIN, FIXTURE);
        CHECK(run(cmd, out, sizeof(out), NULL, 0) == 0 && strstr(out, "finite           yes"));
    }

    /* bench comm: one JSON object with every measurement; bad flags are usage errors */
    snprintf(cmd, sizeof(cmd), "%s bench comm --iters 20 --max-ranks 3 --json", BIN);
    CHECK_MSG(run(cmd, out, sizeof(out), err, sizeof(err)) == 0, "%s: %s", cmd, err);
    json_t *bc = parse_json_line(cmd, out);
    CHECK_MSG(bc && json_array_size(json_object_get(bc, "results")) == 9, "%s: want 9 rows", cmd);
    json_decref(bc);
    snprintf(cmd, sizeof(cmd), "%s bench comm --max-ranks 99", BIN);
    expect_fail(cmd, 2, "--max-ranks 99 is out of range (expected 2..16)");
    snprintf(cmd, sizeof(cmd), "%s bench comm --iters 0", BIN);
    expect_fail(cmd, 2, "--iters 0 is out of range (expected 1..10000000)");

    /* forward on a fixture equals transformers' logits */
    snprintf(cmd, sizeof(cmd), "%s forward --model %s --ids 2,250,13,45,7 --out %s/logits.bin",
             BIN, FIXTURE, tmp);
    CHECK_MSG(run(cmd, NULL, 0, err, sizeof(err)) == 0, "%s: %s", cmd, err);
    json_t *exp = json_load_file(FIXTURE "/expected.json", 0, NULL);
    json_t *p0 = json_object_get(json_array_get(json_object_get(exp, "greedy"), 0), "prompt");
    char ids[256] = "";
    for (size_t i = 0; i < json_array_size(p0); i++)
        snprintf(ids + strlen(ids), sizeof(ids) - strlen(ids), "%s%lld", i ? "," : "",
                 (long long)json_integer_value(json_array_get(p0, i)));
    snprintf(cmd, sizeof(cmd), "%s forward --model %s --ids %s --out %s/logits.bin", BIN, FIXTURE,
             ids, tmp);
    CHECK_MSG(run(cmd, NULL, 0, err, sizeof(err)) == 0, "%s: %s", cmd, err);
    struct st_checkpoint *ref = NULL;
    CHECK(st_open(FIXTURE "/expected_logits.safetensors", &ref) == 0);
    const struct st_tensor *t = ref ? st_find(ref, "logits_greedy0") : NULL;
    char path[256];
    snprintf(path, sizeof(path), "%s/logits.bin", tmp);
    struct stat sb;
    CHECK(t && stat(path, &sb) == 0 && (size_t)sb.st_size == t->nbytes);
    if (t && (size_t)sb.st_size == t->nbytes) {
        float *got = malloc(t->nbytes);
        FILE *f = fopen(path, "rb");
        CHECK(fread(got, 1, t->nbytes, f) == t->nbytes);
        fclose(f);
        double e = test_rel_err(got, t->data, t->numel);
        CHECK_MSG(e <= 1e-4, "forward --out rel err %g", e);
        free(got);
    }
    st_close(ref);
    json_decref(exp);

    /* gen-model -> inspect -> tokenize -> generate, with the minimal tokenizer */
    snprintf(cmd, sizeof(cmd), "%s gen-model --preset opt-125m --layers 1 --dtype bf16 --seed 3 "
                               "--out %s/m", BIN, tmp);
    CHECK_MSG(run(cmd, NULL, 0, err, sizeof(err)) == 0, "%s: %s", cmd, err);
    snprintf(cmd, sizeof(cmd), "%s inspect --model %s/m", BIN, tmp);
    CHECK(run(cmd, out, sizeof(out), NULL, 0) == 0 && strstr(out, "BF16") &&
          strstr(out, "layer 0") && strstr(out, "weights          match config.json"));
    /* inspect runs the loader's shape checks: a checkpoint that forward refuses is reported */
    snprintf(cmd, sizeof(cmd),
             "cp -r %s/m %s/mbad && sed -i 's/\"ffn_dim\": 3072/\"ffn_dim\": 1024/' "
             "%s/mbad/config.json",
             tmp, tmp, tmp);
    CHECK(system(cmd) == 0);
    snprintf(cmd, sizeof(cmd), "%s inspect --model %s/mbad", BIN, tmp);
    expect_fail(cmd, 1, "fc1.weight has shape [3072, 768], expected [1024, 768]");
    snprintf(cmd, sizeof(cmd), "rm -rf %s/mbad", tmp);
    CHECK(system(cmd) == 0);
    snprintf(cmd, sizeof(cmd), "printf 'hi\\n' | %s tokenize --model %s/m", BIN, tmp);
    CHECK(run(cmd, out, sizeof(out), NULL, 0) == 0 && strcmp(out, "2 108 109 14\n") == 0);
    snprintf(cmd, sizeof(cmd), "printf 'hi' | %s tokenize --model %s/m --no-bos", BIN, tmp);
    CHECK(run(cmd, out, sizeof(out), NULL, 0) == 0 && strcmp(out, "108 109\n") == 0);
    char first[4096];
    snprintf(cmd, sizeof(cmd), "%s generate --model %s/m --prompt 'Hello' --max-tokens 5 "
                               "--temperature 0.8 --top-k 40 --top-p 0.9 --seed 11", BIN, tmp);
    CHECK_MSG(run(cmd, first, sizeof(first), err, sizeof(err)) == 0, "%s", err);
    CHECK(run(cmd, out, sizeof(out), NULL, 0) == 0 && strcmp(out, first) == 0);

    /* the real OPT tokenizer committed in data/tokenizer/opt, copied by gen-model */
    snprintf(cmd, sizeof(cmd), "%s gen-model --preset opt-125m --layers 1 --seed 3 "
                               "--tokenizer-from '%s' --out %s/mt", BIN, OPT_TOKENIZER, tmp);
    CHECK_MSG(run(cmd, NULL, 0, err, sizeof(err)) == 0, "%s: %s", cmd, err);
    snprintf(cmd, sizeof(cmd), "printf 'A photo of a cat' | %s tokenize --model %s/mt", BIN, tmp);
    CHECK(run(cmd, out, sizeof(out), NULL, 0) == 0 && strcmp(out, "2 250 1345 9 10 4758\n") == 0);

    /* every family's tokenizer.json committed in data/tokenizer, with and without the
     * special tokens its post-processor adds (Hugging Face's ids) */
    static const struct {
        const char *family, *with, *without;
    } FAMILIES[] = {
        {"llama3", "128000 9906 1917\n", "9906 1917\n"},
        {"qwen2", "9707 1879\n", "9707 1879\n"},
        {"llama2", "1 15043 3186\n", "15043 3186\n"},
        {"phi3", "1 15043 3186\n", "15043 3186\n"},
    };
    for (size_t i = 0; i < sizeof(FAMILIES) / sizeof(FAMILIES[0]); i++) {
        for (int no_bos = 0; no_bos < 2; no_bos++) {
            snprintf(cmd, sizeof(cmd), "printf 'Hello world' | %s tokenize --model '%s/%s'%s", BIN,
                     TOKENIZER_DATA, FAMILIES[i].family, no_bos ? " --no-bos" : "");
            const char *want = no_bos ? FAMILIES[i].without : FAMILIES[i].with;
            CHECK_MSG(run(cmd, out, sizeof(out), err, sizeof(err)) == 0 && strcmp(out, want) == 0,
                      "%s: got \"%s\", want \"%s\" (%s)", cmd, out, want, err);
        }
    }
    snprintf(cmd, sizeof(cmd), "%s bench tokenize --model '%s/llama2' --mb 1 --json", BIN,
             TOKENIZER_DATA);
    CHECK_MSG(run(cmd, out, sizeof(out), err, sizeof(err)) == 0 &&
                  strstr(out, "\"encode_mb_s\"") && strstr(out, "\"bench\": \"tokenize\""),
              "%s: %s %s", cmd, out, err);

    /* tokenize reads at most 16 MiB of stdin, says so in --help, and refuses more with one
     * line before tokenizing any of it */
    snprintf(cmd, sizeof(cmd), "%s tokenize --help", BIN);
    CHECK(run(cmd, out, sizeof(out), NULL, 0) == 0 && strstr(out, "at most 16 MiB"));
    snprintf(path, sizeof(path), "%s/big.txt", tmp);
    FILE *big = fopen(path, "wb");
    CHECK_MSG(big != NULL, "cannot write %s", path);
    if (big) {
        char line[4096];
        memset(line, 'a', sizeof(line));
        for (size_t i = 0; i < ((size_t)16 << 20) / sizeof(line); i++)
            fwrite(line, 1, sizeof(line), big);
        fputc('a', big);
        CHECK(fclose(big) == 0);
    }
    snprintf(cmd, sizeof(cmd), "%s tokenize --model %s/mt <%s", BIN, tmp, path);
    expect_fail(cmd, 1, "stdin holds more than 16777216 bytes of text (expected at most");
    CHECK(unlink(path) == 0);

    /* a write error on stdout fails the command, whichever prints */
    struct stat full;
    CHECK_MSG(stat("/dev/full", &full) == 0 && S_ISCHR(full.st_mode), "no /dev/full to test with");
    expect_stdout_full(BIN " --help", "");
    expect_stdout_full(BIN " gen-model --help", "gen-model");
    snprintf(cmd, sizeof(cmd), "%s inspect --model %s/m", BIN, tmp);
    expect_stdout_full(cmd, "inspect");
    snprintf(cmd, sizeof(cmd), "printf 'hi' | %s tokenize --model %s/mt", BIN, tmp);
    expect_stdout_full(cmd, "tokenize");
    snprintf(cmd, sizeof(cmd), "%s generate --model %s/mt --prompt 'A photo of' --max-tokens 8",
             BIN, tmp);
    expect_stdout_full(cmd, "generate");
    snprintf(cmd, sizeof(cmd), "%s bench swap --model %s --layouts 1x1 --repeat 1 --json", BIN,
             FIXTURE);
    expect_stdout_full(cmd, "bench swap");

    /* --json output is valid JSON whatever the paths in it: the fixture
     * through a link whose name holds a quote and a backslash */
    char weird[128];
    snprintf(weird, sizeof(weird), "%s/q\"uo\\te", tmp);
    CHECK(symlink(FIXTURE, weird) == 0);
    snprintf(cmd, sizeof(cmd), "%s bench forward --model '%s' --prompt-len 4 --gen 2 --repeat 1 "
                               "--threads 1 --json", BIN, weird);
    CHECK_MSG(run(cmd, out, sizeof(out), err, sizeof(err)) == 0, "%s: %s", cmd, err);
    json_t *fj = parse_json_line(cmd, out);
    CHECK(json_str_eq(json_object_get(fj, "model"), weird));
    CHECK(json_real_value(json_object_get(fj, "decode_tok_s")) > 0 &&
          json_integer_value(json_object_get(fj, "weight_bytes")) > 0);
    CHECK(json_object_get(fj, "profile") == NULL);
    CHECK(json_object_get(fj, "step_ratio") == NULL);
    json_decref(fj);

    /* --step-batch: a second batch timed beside the first in this process,
     * its step time over the first's per run, median inside the runs' range */
    snprintf(cmd, sizeof(cmd),
             "%s bench forward --model %s --prompt-len 4 --gen 2 --repeat 3 --threads 1 "
             "--step-batch 3 --json",
             BIN, FIXTURE);
    CHECK_MSG(run(cmd, out, sizeof(out), err, sizeof(err)) == 0, "%s: %s", cmd, err);
    fj = parse_json_line(cmd, out);
    const double sr = json_real_value(json_object_get(fj, "step_ratio"));
    CHECK(json_integer_value(json_object_get(fj, "step_batch")) == 3);
    CHECK(json_real_value(json_object_get(fj, "step_decode_ms_per_step")) > 0);
    CHECK_MSG(sr > 0 && json_real_value(json_object_get(fj, "step_ratio_min")) <= sr &&
                  sr <= json_real_value(json_object_get(fj, "step_ratio_max")),
              "%s: %s", cmd, out);
    /* each run against the read samples around it: median inside the range;
     * no sample around a run beats the best one, so the best paired run is
     * at least the best run over the best sample (3 decimals each) */
    const double pr = json_real_value(json_object_get(fj, "decode_vs_read_paired"));
    const double pr_max = json_real_value(json_object_get(fj, "decode_vs_read_paired_max"));
    CHECK_MSG(json_real_value(json_object_get(fj, "decode_vs_read_paired_min")) > 0 &&
                  json_real_value(json_object_get(fj, "decode_vs_read_paired_min")) <= pr &&
                  pr <= pr_max &&
                  pr_max >= json_real_value(json_object_get(fj, "decode_vs_read")) - 2e-3,
              "%s: %s", cmd, out);
    json_decref(fj);

    /* --profile: every decode step's kernels add up to the step, less what
     * falls outside them; OPT's head is its one linear without a bias, its
     * layers attend once each */
    snprintf(cmd, sizeof(cmd),
             "%s bench forward --model '%s' --prompt-len 4 --gen 3 --repeat 2 "
             "--threads 1 --profile --json",
             BIN, FIXTURE);
    CHECK_MSG(run(cmd, out, sizeof(out), err, sizeof(err)) == 0, "%s: %s", cmd, err);
    fj = parse_json_line(cmd, out);
    json_t *prof = json_object_get(fj, "profile");
    CHECK(json_integer_value(json_object_get(prof, "steps")) == 6);
    double step_ms = json_real_value(json_object_get(prof, "ms_per_step")), sum_ms = 0;
    double attn = 0, head = 0;
    size_t ki;
    json_t *kp;
    json_array_foreach(json_object_get(prof, "kernels"), ki, kp)
    {
        const char *name = json_string_value(json_object_get(kp, "kernel"));
        double calls = json_real_value(json_object_get(kp, "calls_per_step"));
        sum_ms += json_real_value(json_object_get(kp, "ms_per_step"));
        if (name && strcmp(name, "attention") == 0)
            attn = calls;
        if (name && strcmp(name, "linear") == 0)
            head = calls;
    }
    sum_ms += json_real_value(json_object_get(prof, "outside_kernels_ms_per_step"));
    CHECK_MSG(step_ms > 0 && fabs(sum_ms - step_ms) <= 1e-3 * step_ms + 1e-3,
              "profile: kernels + outside %.4f ms, step %.4f ms", sum_ms, step_ms);
    CHECK_MSG(head == 1 && attn >= 1 && attn == (int)attn, "profile: head %g, attention %g", head,
              attn);
    /* the named parts add up to the step too: the head is the one linear
     * call with the vocabulary's rows, the greedy pick one a step, and the
     * remainder is the step less the layers' GEMVs, grouped or not */
    double parts_ms = 0, gemv_ms = -1, head_calls = 0, pick_calls = 0;
    json_array_foreach(json_object_get(prof, "parts"), ki, kp)
    {
        const char *name = json_string_value(json_object_get(kp, "part"));
        const double ms = json_real_value(json_object_get(kp, "ms_per_step"));
        const double calls = json_real_value(json_object_get(kp, "calls_per_step"));
        parts_ms += ms;
        if (name && (strcmp(name, "GEMVs (layers)") == 0 ||
                     strcmp(name, "grouped GEMVs (layers)") == 0))
            gemv_ms = (gemv_ms < 0 ? 0 : gemv_ms) + ms;
        if (name && strcmp(name, "the head") == 0)
            head_calls = calls;
        if (name && strncmp(name, "sampling", 8) == 0)
            pick_calls = calls;
    }
    const double rem_ms = json_real_value(json_object_get(prof, "remainder_ms_per_step"));
    CHECK_MSG(fabs(parts_ms - step_ms) <= 1e-3 * step_ms + 1e-3 &&
                  fabs(step_ms - gemv_ms - rem_ms) <= 1e-3 * step_ms + 1e-3,
              "profile: parts %.4f ms, step %.4f ms, GEMVs %.4f + remainder %.4f", parts_ms,
              step_ms, gemv_ms, rem_ms);
    CHECK_MSG(head_calls == 1 && pick_calls == 1, "profile parts: head %g calls, sampling %g",
              head_calls, pick_calls);
    int head_shapes = 0;
    json_array_foreach(json_object_get(prof, "shapes"), ki, kp)
    {
        head_shapes += json_is_true(json_object_get(kp, "head"));
        CHECK(json_real_value(json_object_get(kp, "calls_per_step")) > 0);
    }
    CHECK(head_shapes == 1);
    json_t *pool = json_object_get(prof, "pool");
    CHECK(pool && json_real_value(json_object_get(pool, "wait_ms_per_step")) >= 0);
    /* the read limit: one sample before each timed run and one after */
    json_t *rl = json_object_get(fj, "read_limit");
    CHECK_MSG(json_array_size(json_object_get(rl, "samples")) == 3, "read_limit: %zu samples",
              json_array_size(json_object_get(rl, "samples")));
    json_decref(fj);

    /* bench read: the limit is its best sample, every way is listed, and
     * the machine's state comes with each sample */
    snprintf(cmd, sizeof(cmd),
             "%s bench read --threads 1 --mb-per-thread 8 --rounds 1 --samples 2 --json", BIN);
    CHECK_MSG(run(cmd, out, sizeof(out), err, sizeof(err)) == 0, "%s: %s", cmd, err);
    fj = parse_json_line(cmd, out);
    json_t *samples = json_object_get(fj, "samples");
    double best = 0, least = 1e30;
    json_array_foreach(samples, ki, kp)
    {
        const double g = json_real_value(json_object_get(kp, "gb_s"));
        best = g > best ? g : best;
        least = g < least ? g : least;
        CHECK(json_string_value(json_object_get(kp, "best_way")) != NULL);
        CHECK(json_object_get(kp, "huge_page_share") && json_object_get(kp, "best_on_cpu"));
    }
    CHECK_MSG(json_array_size(samples) == 2 && best > 0 &&
                  fabs(json_real_value(json_object_get(fj, "gb_s")) - best) < 2e-3 &&
                  fabs(json_real_value(json_object_get(fj, "min_gb_s")) - least) < 2e-3,
              "bench read: %zu samples, best %g, least %g", json_array_size(samples), best, least);
    CHECK(json_array_size(json_object_get(fj, "ways")) >= 2);
#if defined(__x86_64__) && defined(__GNUC__)
    /* the two-step prefetch the bf16 GEMV's kernels use is among the ways
     * (a limit below a kernel's own way of reading is no limit) */
    if (__builtin_cpu_supports("avx512f")) {
        bool two_step = false;
        json_array_foreach(json_object_get(fj, "ways"), ki, kp)
        {
            const char *way = json_string_value(json_object_get(kp, "way"));
            two_step = two_step || (way && strncmp(way, "avx512x4+pf1k+4k ", 17) == 0);
        }
        CHECK_MSG(two_step, "bench read: no avx512x4+pf1k+4k way");
    } else if (__builtin_cpu_supports("avx2")) {
        /* AVX2 alone (AMD EPYC Zen 2): its 32-byte ways, streaming among them */
        bool nt = false;
        json_array_foreach(json_object_get(fj, "ways"), ki, kp)
        {
            const char *way = json_string_value(json_object_get(kp, "way"));
            nt = nt || (way && strncmp(way, "avx2x4-nt ", 10) == 0);
        }
        CHECK_MSG(nt, "bench read: no avx2x4-nt way");
    }
#endif
    json_decref(fj);
    expect_fail(BIN " bench read --rounds 0", 2, "--rounds");
    expect_fail(BIN " bench read --threads 100000", 2, "--threads");

    /* bench swap end to end on a fixture: every layout loads and answers */
    snprintf(cmd, sizeof(cmd), "%s bench swap --model '%s' --layouts 1x1,2x1,1x2 --tp 4 --repeat 1 "
                               "--json", BIN, weird);
    CHECK_MSG(run(cmd, out, sizeof(out), err, sizeof(err)) == 0, "%s: %s", cmd, err);
    json_t *bj = parse_json_line(cmd, out);
    CHECK(json_str_eq(json_object_get(bj, "model"), weird));
    json_t *layouts = json_object_get(bj, "layouts");
    CHECK(json_array_size(layouts) == 4);
    for (size_t i = 0; i < json_array_size(layouts); i++) {
        json_t *l = json_array_get(layouts, i);
        CHECK(json_real_value(json_object_get(l, "load_s")) > 0);
        CHECK(json_real_value(json_object_get(l, "cold_overlap_s")) > 0);
    }
    json_decref(bj);

    /* bench workload end to end: tiny generated models, both policies, files written */
    char out_dir[160], plot[200];
    snprintf(out_dir, sizeof(out_dir), "%s/o\"ut\\dir", tmp);
    snprintf(plot, sizeof(plot), "%s/custom-cdf.svg", out_dir);
    snprintf(cmd, sizeof(cmd), "%s bench workload --config custom --rates 4,4 --cv 1 --duration 1 "
                               "--preset opt-125m --layers 1 --cache %s/wl --out-dir '%s' "
                               "--json", BIN, tmp, out_dir);
    CHECK_MSG(run(cmd, out, sizeof(out), err, sizeof(err)) == 0, "%s: %s", cmd, err);
    json_t *wj = parse_json_line(cmd, out);
    CHECK(json_str_eq(json_object_get(wj, "plot"), plot));
    json_t *pols = json_object_get(wj, "policies");
    CHECK(json_array_size(pols) == 2);
    for (size_t i = 0; i < json_array_size(pols); i++) {
        json_t *p = json_array_get(pols, i);
        CHECK(json_integer_value(json_object_get(p, "failed")) == 0);
        CHECK(json_integer_value(json_object_get(p, "requests")) > 0);
    }
    json_decref(wj);

    /* the same fine-tunes as adapters of model 0 (generated beside it), in
     * real time: both rows per policy, every request answered once in each,
     * the adapters loaded, fewer bytes moved than as models */
    snprintf(cmd, sizeof(cmd),
             "%s bench workload --config custom --rates 4,4,4 --cv 1 --duration 1 "
             "--max-loaded 2 --adapters 3 --adapter-rank 4 --preset opt-125m "
             "--layers 1 --cache %s/wl --out-dir %s/ad --json",
             BIN, tmp, tmp);
    CHECK_MSG(run(cmd, out, sizeof(out), err, sizeof(err)) == 0, "%s: %s", cmd, err);
    wj = parse_json_line(cmd, out);
    pols = json_object_get(wj, "policies");
    json_t *ad_rows = json_object_get(json_object_get(wj, "adapters"), "rows");
    CHECK_MSG(json_array_size(pols) == 2 && json_array_size(ad_rows) == 4, "%s", out);
    for (size_t i = 0; i + 1 < json_array_size(ad_rows); i += 2) {
        json_t *m = json_array_get(ad_rows, i), *a = json_array_get(ad_rows, i + 1);
        json_int_t n = json_integer_value(json_object_get(json_array_get(pols, i / 2), "requests"));
        CHECK(json_str_eq(json_object_get(m, "served_as"), "models") &&
              json_str_eq(json_object_get(a, "served_as"), "adapters"));
        for (int k = 0; k < 2; k++) {
            json_t *r = k ? a : m;
            CHECK_MSG(n > 0 && json_integer_value(json_object_get(r, "requests")) == n &&
                          json_integer_value(json_object_get(r, "failed")) == 0,
                      "row %zu: %lld requests of %lld", i + (size_t)k,
                      (long long)json_integer_value(json_object_get(r, "requests")), (long long)n);
        }
        json_int_t ab = json_integer_value(json_object_get(a, "bytes_moved"));
        json_int_t mb = json_integer_value(json_object_get(m, "bytes_moved"));
        CHECK_MSG(json_integer_value(json_object_get(a, "adapter_loads")) > 0 &&
                      json_integer_value(json_object_get(m, "adapter_loads")) == 0 && ab > 0 &&
                      ab < mb,
                  "adapters: %lld loads, %lld bytes; models: %lld bytes",
                  (long long)json_integer_value(json_object_get(a, "adapter_loads")), (long long)ab,
                  (long long)mb);
    }
    json_decref(wj);
    /* an --adapter-dir without adapter_2: one line naming it */
    snprintf(cmd, sizeof(cmd),
             "%s bench workload --config custom --rates 4,4,4 --duration 1 "
             "--adapters 3 --adapter-dir %s/wl --preset opt-125m --layers 1 "
             "--cache %s/wl --out-dir %s/ad",
             BIN, tmp, tmp, tmp);
    expect_fail(cmd, 1, "no directory adapter_0");

    /* the same on a simulated clock: costs measured on those models, 3 seeds */
    snprintf(cmd, sizeof(cmd), "%s bench workload --simulate --seeds 3 --config custom --rates 4,4 "
                               "--cv 1 --duration 5 --preset opt-125m --layers 1 --cache %s/wl "
                               "--json", BIN, tmp);
    CHECK_MSG(run(cmd, out, sizeof(out), err, sizeof(err)) == 0, "%s: %s", cmd, err);
    wj = parse_json_line(cmd, out);
    CHECK(json_is_true(json_object_get(wj, "simulated")) &&
          json_real_value(json_object_get(wj, "load_s")) > 0);
    pols = json_object_get(json_array_get(json_object_get(wj, "configs"), 0), "policies");
    CHECK(json_array_size(pols) == 2);
    /* the floor: a bound under every policy, beside them */
    json_t *fl = json_object_get(json_array_get(json_object_get(wj, "configs"), 0), "floor");
    double floor99 = json_real_value(json_object_get(fl, "p99_s"));
    CHECK_MSG(fl && floor99 > 0 && json_real_value(json_object_get(fl, "swaps")) == 0,
              "floor p99 %g", floor99);
    for (size_t i = 0; i < json_array_size(pols); i++) {
        json_t *p = json_array_get(pols, i);
        double p50 = json_real_value(json_object_get(p, "p50_s"));
        double p99 = json_real_value(json_object_get(p, "p99_s"));
        CHECK_MSG(p50 > 0 && p99 >= p50 && p99 >= floor99, "simulated p50 %g p99 %g", p50, p99);
    }
    json_decref(wj);

    /* every policy side by side, clairvoyant too: a table with a floor row */
    snprintf(cmd, sizeof(cmd), "%s bench workload --simulate --seeds 2 --config custom --rates 4,4 "
                               "--cv 1 --duration 5 --preset opt-125m --layers 1 --cache %s/wl "
                               "--policy swapwise,computron,lru,fifo,clairvoyant", BIN, tmp);
    CHECK_MSG(run(cmd, out, sizeof(out), err, sizeof(err)) == 0, "%s: %s", cmd, err);
    const char *rows[] = {" swapwise ", " computron ", " lru ", " fifo ", " clairvoyant ",
                          " floor "};
    for (int i = 0; i < 6; i++)
        CHECK_MSG(strstr(out, rows[i]) != NULL, "no %s row in:\n%s", rows[i], out);

    /* given costs: a run writes the costs it measured, and two runs on that
     * file print the same table as it, byte for byte; cost flags alone
     * measure nothing and reproduce too */
    char costs[200], out2[1 << 14], sim_cmd[1024];
    snprintf(costs, sizeof(costs), "%s/costs.json", tmp);
    snprintf(sim_cmd, sizeof(sim_cmd),
             "%s bench workload --simulate --seeds 2 --config custom "
             "--rates 4,4 --cv 1 --duration 5 --preset opt-125m "
             "--layers 1 --cache %s/wl",
             BIN, tmp);
    snprintf(cmd, sizeof(cmd), "%s --costs-out %s", sim_cmd, costs);
    CHECK_MSG(run(cmd, out, sizeof(out), err, sizeof(err)) == 0, "%s: %s", cmd, err);
    CHECK_MSG(strstr(out, "costs measured here: load ") && strstr(out, "batch costs"), "%s", out);
    snprintf(cmd, sizeof(cmd), "%s --costs %s", sim_cmd, costs);
    for (int k = 0; k < 2; k++) {
        CHECK_MSG(run(cmd, out2, sizeof(out2), err, sizeof(err)) == 0, "%s: %s", cmd, err);
        CHECK_MSG(strstr(out2, "costs from ") && strstr(out2, "costs.json: load ") &&
                      strstr(err, "measuring") == NULL,
                  "%s: %s", cmd, out2);
        const char *t1 = strstr(out, "\nconfig "), *t2 = strstr(out2, "\nconfig ");
        CHECK_MSG(t1 && t2 && strcmp(t1, t2) == 0, "tables differ:\n%s\n%s", out, out2);
    }
    snprintf(cmd, sizeof(cmd), "%s --load-s-per-gb 0.5 --batch-cost 1:0.02,8:0.05 --json", sim_cmd);
    CHECK_MSG(run(cmd, out, sizeof(out), err, sizeof(err)) == 0, "%s: %s", cmd, err);
    CHECK_MSG(run(cmd, out2, sizeof(out2), err, sizeof(err)) == 0 && strcmp(out, out2) == 0 &&
                  strstr(err, "measuring") == NULL,
              "%s: %s\n%s", cmd, out, out2);
    wj = parse_json_line(cmd, out);
    json_t *cj = json_object_get(wj, "costs");
    CHECK(json_str_eq(json_object_get(wj, "costs_from"), "from flags") &&
          json_real_value(json_object_get(cj, "load_s_per_gb")) == 0.5 &&
          json_array_size(json_object_get(cj, "batch_s")) == 8 &&
          json_real_value(json_array_get(json_array_get(json_object_get(cj, "batch_s"), 7), 1)) ==
              0.05 &&
          json_real_value(json_object_get(wj, "slo_s")) == 0.1); /* 5 x a batch of 1 */
    json_decref(wj);
    /* the same two fine-tunes as adapters of one base: both rows per policy,
     * the adapters' loads moving megabytes where the models' move more */
    snprintf(cmd, sizeof(cmd),
             "%s --load-s-per-gb 0.5 --batch-cost 1:0.02,8:0.05 --adapters 2 --adapter-rank 8 "
             "--json",
             sim_cmd);
    CHECK_MSG(run(cmd, out, sizeof(out), err, sizeof(err)) == 0, "%s: %s", cmd, err);
    wj = parse_json_line(cmd, out);
    json_t *aj = json_object_get(wj, "adapters"), *arows = json_object_get(aj, "rows");
    CHECK_MSG(json_integer_value(json_object_get(aj, "rank")) == 8 && json_array_size(arows) == 4 &&
                  json_str_eq(json_object_get(json_array_get(arows, 1), "served_as"), "adapters"),
              "%s", out);
    for (size_t i = 0; i + 1 < json_array_size(arows); i += 2) {
        json_t *m = json_array_get(arows, i), *a = json_array_get(arows, i + 1);
        double mb = json_real_value(json_object_get(m, "bytes_moved"));
        double ab = json_real_value(json_object_get(a, "bytes_moved"));
        CHECK_MSG(mb > 0 && ab > 0 && ab < mb &&
                      json_real_value(json_object_get(a, "adapter_loads")) >= 1,
                  "models moved %g bytes, adapters %g", mb, ab);
    }
    json_decref(wj);
    /* a bad costs file: one line naming the file and the key */
    put_file(costs, "{\"load_s_per_gb\": 0.5, \"batch_s\": [[1, 0.02], [0, 0.03]]}");
    snprintf(cmd, sizeof(cmd), "%s --costs %s", sim_cmd, costs);
    expect_fail(cmd, 1, "costs.json: \"batch_s\" point 2: expected [[size, seconds], ...]");
    put_file(costs, "{\"load_s_per_gb\": 0.5, \"overlap\": 1}");
    expect_fail(cmd, 1, "costs.json: unknown key \"overlap\"");
    put_file(costs, "{\"load_s_per_gb\": 0, \"batch_s\": [[1, 0.02]]}");
    expect_fail(cmd, 1, "costs.json: \"load_s_per_gb\": expected seconds per GB > 0");
    put_file(costs, "{\"batch_s\": [[1, 0.02], [4, 0.03]]}");
    expect_fail(cmd, 1, "batch costs given (batch_s) reach batches of 4; this run's reach 8");
    snprintf(cmd, sizeof(cmd), "%s --batch-cost 2:0.1", sim_cmd);
    expect_fail(cmd, 2, "--batch-cost \"2:0.1\": expected SIZE:SECONDS");
    expect_fail(BIN " bench workload --costs-out x.json", 2, "need --simulate");

    /* chat traffic on the same clock: the token SLOs per policy */
    snprintf(cmd, sizeof(cmd), "%s bench workload --simulate --seeds 2 --config chat:4:0.5 "
                               "--duration 5 --preset opt-125m --layers 1 --cache %s/wl --json",
             BIN, tmp);
    CHECK_MSG(run(cmd, out, sizeof(out), err, sizeof(err)) == 0, "%s: %s", cmd, err);
    wj = parse_json_line(cmd, out);
    CHECK(json_real_value(json_object_get(wj, "slo_ttft_s")) == 5 &&
          json_real_value(json_object_get(wj, "prefill_token_s")) >= 0 &&
          json_array_size(json_object_get(wj, "step_s")) == 8);
    pols = json_object_get(json_array_get(json_object_get(wj, "configs"), 0), "policies");
    CHECK(json_array_size(pols) == 2);
    for (size_t i = 0; i < json_array_size(pols); i++) {
        json_t *p = json_array_get(pols, i);
        double att = json_real_value(json_object_get(p, "token_slo_attainment"));
        double tpot = json_real_value(json_object_get(p, "tpot_p50_s"));
        CHECK_MSG(att >= 0 && att <= 1 && tpot > 0 &&
                      json_real_value(json_object_get(p, "ttft_p50_s")) > 0 &&
                      json_real_value(json_object_get(p, "goodput_rps")) >= 0,
                  "chat: attainment %g tpot %g", att, tpot);
    }
    json_decref(wj);
    CHECK(stat(plot, &sb) == 0 && sb.st_size > 500);
    snprintf(path, sizeof(path), "%s/custom-swapwise.csv", out_dir);
    CHECK(stat(path, &sb) == 0);

    /* errors: one line, non-zero */
    test_llama_ids();
    expect_fail(BIN " generate --model x --prompt hi --max-tokens ten", 2,
                "--max-tokens expects an integer");
    expect_fail(BIN " forward --model /nonexistent --ids 1 --out /dev/null", 1, "config.json");
    snprintf(cmd, sizeof(cmd), "%s forward --model %s --ids 2,x --out /dev/null", BIN, FIXTURE);
    expect_fail(cmd, 1, "comma-separated");
    snprintf(cmd, sizeof(cmd), "%s forward --model %s --ids 2,99999 --out /dev/null", BIN,
             FIXTURE);
    expect_fail(cmd, 1, "outside the vocabulary");
    test_presets();
    snprintf(cmd, sizeof(cmd), "%s gen-model --preset opt-125m --out %s/m", BIN, tmp);
    expect_fail(cmd, 1, "not empty");
    test_flag_values();
    test_checked_first();
    test_bench_flags();
    test_gen_model_out();
    snprintf(cmd, sizeof(cmd), "%s bench swap --model %s --layouts 3x1", BIN, FIXTURE);
    expect_fail(cmd, 1, "must divide num_attention_heads");
    snprintf(cmd, sizeof(cmd), "%s bench swap --model %s --layouts 1x9", BIN, FIXTURE);
    expect_fail(cmd, 1, "exceeds the model's 2 layers");
    /* A cold request longer than the fixture's 64 positions, on one stage and
     * on two (it once hung with 1x2, stage 1 waiting for a stage 0 that had
     * failed, and printed an empty message with 1x1, read on the wrong
     * thread): a one-line error naming the limit, well within the alarm. */
    alarm(120);
    snprintf(cmd, sizeof(cmd),
             "timeout 60 %s bench swap --model %s --layouts 1x1 --repeat 1 "
             "--prompt-len 100",
             BIN, FIXTURE);
    expect_fail(cmd, 1, "exceeds max_position_embeddings 64");
    snprintf(cmd, sizeof(cmd),
             "timeout 60 %s bench swap --model %s --layouts 1x2 --repeat 1 "
             "--prompt-len 100",
             BIN, FIXTURE);
    expect_fail(cmd, 1, "exceeds max_position_embeddings 64");
    alarm(0);
    expect_fail(BIN " bench swap --layouts 1x1", 2, "exactly one of --preset");
    expect_fail(BIN " bench workload --config computron:19", 2, "does not exist");
    expect_fail(BIN " bench workload --config chat:0:1", 2, "chat:MODELS:RATE[:CV[:ZIPF]]");
    expect_fail(BIN " bench workload --policy nosuch", 2, "unknown scheduling policy");
    expect_fail(BIN " bench workload --policy lru,clairvoyant", 2,
                "needs the future arrivals, which only the simulator has");
    expect_fail(BIN " bench workload --simulate --policy swapwise,nosuch", 2,
                "swapwise|swapwise-preempt|computron|lru|fifo|clairvoyant");
    expect_fail(BIN " bench workload --config computron:all", 2, "needs --simulate");
    expect_fail(BIN " bench workload --simulate --config round-robin", 1, "closed loop");

    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp);
    CHECK(system(cmd) == 0);
    return test_finish();
}
