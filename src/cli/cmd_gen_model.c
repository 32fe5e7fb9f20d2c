#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <dirent.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_cache.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/timing.h"
#include "core/utf8.h"
#include "model/random.h"
#include "template/chat.h"
#include "tokenizer/bpe.h"
#include "tokenizer/byte_level.h"

/* dir/name into buf; ERR_INVALID when it does not fit. */
static int path_join(char *buf, size_t cap, const char *dir, const char *name)
{
    int n = snprintf(buf, cap, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= cap)
        return err_set(ERR_INVALID, "%s/%s: path too long (expected under %zu bytes)", dir, name,
                       cap);
    return 0;
}

static int write_json(json_t *j, const char *dir, const char *name)
{
    char path[4096];
    int rc = path_join(path, sizeof(path), dir, name);
    if (rc < 0) {
        json_decref(j);
        return rc;
    }
    if (!j || json_dump_file(j, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER) != 0)
        rc = err_set(ERR_IO, "%s: cannot write", path);
    json_decref(j);
    return rc;
}

/* A valid byte-level BPE tokenizer with no merges: the four OPT specials,
 * then the 256 byte symbols. Every text round-trips, one token per byte. */
static int write_minimal_tokenizer(const char *dir)
{
    json_t *vocab = json_object();
    static const char *specials[] = {"<s>", "<pad>", "</s>", "<unk>"};
    for (int i = 0; i < 4; i++)
        json_object_set_new(vocab, specials[i], json_integer(i));
    for (unsigned b = 0; b < 256; b++) {
        unsigned char sym[5];
        sym[utf8_encode_one(byte_level_cp((unsigned char)b), sym)] = 0;
        json_object_set_new(vocab, (const char *)sym, json_integer(4 + b));
    }
    int rc = write_json(vocab, dir, "vocab.json");
    if (rc < 0)
        return rc;
    char path[4096];
    if ((rc = path_join(path, sizeof(path), dir, "merges.txt")) < 0)
        return rc;
    FILE *f = fopen(path, "w");
    if (!f || fputs("#version: 0.2\n", f) < 0 || fclose(f) != 0)
        return err_set(ERR_IO, "%s: cannot write", path);
    json_t *cfg = json_pack("{s:b, s:b, s:s, s:s, s:s, s:s, s:s, s:s}", "add_bos_token", 1,
                            "add_prefix_space", 0, "bos_token", "</s>", "eos_token", "</s>",
                            "pad_token", "<pad>", "unk_token", "</s>", "errors", "replace",
                            "tokenizer_class", "GPT2Tokenizer");
    if ((rc = write_json(cfg, dir, "tokenizer_config.json")) < 0)
        return rc;
    json_t *map = json_pack("{s:s, s:s, s:s, s:s}", "bos_token", "</s>", "eos_token", "</s>",
                            "pad_token", "<pad>", "unk_token", "</s>");
    return write_json(map, dir, "special_tokens_map.json");
}

static int copy_file(const char *from, const char *to)
{
    /* the checked open: a FIFO, device or directory of that name is
     * refused before it is read (a FIFO would block here) */
    int fd, rc = fs_open_regular(from, &fd, NULL);
    if (rc == ERR_NOT_FOUND)
        return 0; /* absent: nothing to copy */
    if (rc < 0)
        return rc;
    FILE *in = fdopen(fd, "rb"), *out = NULL;
    if (!in) {
        rc = err_set(ERR_IO, "%s: cannot read: %s", from, strerror(errno));
        close(fd);
        return rc;
    }
    char buf[1 << 16];
    size_t n;
    if (!(out = fopen(to, "wb"))) {
        rc = err_set(ERR_IO, "%s: cannot write: %s", to, strerror(errno));
        goto out;
    }
    while ((n = fread(buf, 1, sizeof(buf), in)) > 0)
        if (fwrite(buf, 1, n, out) != n) {
            rc = err_set(ERR_IO, "%s: write failed: %s", to, strerror(errno));
            goto out;
        }
    if (ferror(in))
        rc = err_set(ERR_IO, "%s: read failed", from);
out:
    fclose(in);
    if (out && fclose(out) != 0 && rc == 0)
        rc = err_set(ERR_IO, "%s: write failed: %s", to, strerror(errno));
    return rc == 0 ? 1 : rc;
}

/* Copies the tokenizer files of a real checkpoint (those that exist). */
static int copy_tokenizer(const char *from, const char *dir)
{
    static const char *files[] = {"vocab.json",         "merges.txt",
                                  "tokenizer.json",     "tokenizer_config.json",
                                  "special_tokens_map.json", "added_tokens.json",
                                  "chat_template.jinja"};
    bool bpe_files = false, json_file = false;
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        char a[4096], b[4096];
        int rc;
        if ((rc = path_join(a, sizeof(a), from, files[i])) < 0 ||
            (rc = path_join(b, sizeof(b), dir, files[i])) < 0 || (rc = copy_file(a, b)) < 0)
            return rc;
        if (rc == 1 && i < 2)
            bpe_files = true;
        if (rc == 1 && i == 2)
            json_file = true;
    }
    if (!bpe_files && !json_file)
        return err_set(ERR_NOT_FOUND, "--tokenizer-from %s: no vocab.json + merges.txt or "
                                      "tokenizer.json there", from);
    return 0;
}

/* Writes FILE as dir's chat_template.jinja and loads it back as the server
 * will (with dir's tokenizer_config.json): it must parse. Before any weight
 * is written. */
static int copy_chat_template(const char *file, const char *dir)
{
    char b[4096];
    struct chat_template *ct = NULL;
    int rc = path_join(b, sizeof(b), dir, "chat_template.jinja");
    if (rc == 0 && (rc = copy_file(file, b)) == 0)
        rc = err_set(ERR_NOT_FOUND, "--chat-template %s: no such file", file);
    if (rc >= 0 && (rc = chat_template_load(dir, NULL, &ct)) < 0)
        err_wrap(rc, "--chat-template %s", file);
    chat_template_free(ct);
    return rc < 0 ? rc : 0;
}

static void show_progress(void *ctx, uint64_t done, uint64_t total)
{
    double *last = ctx;
    double now = time_now();
    if (now - *last < 0.2 && done < total)
        return;
    *last = now;
    fprintf(stderr, "\rwriting weights: %.2f / %.2f GB (%3.0f%%)", done / 1e9, total / 1e9,
            total ? 100.0 * done / total : 100.0);
    if (done >= total)
        fputc('\n', stderr);
}

/* --out may be absent, an empty directory, or with --force a directory
 * whose files of the same names get replaced. Checked before anything is
 * written, so a refused --out costs nothing. */
static int check_out_dir(const char *dir, bool force)
{
    struct stat st;
    if (stat(dir, &st) != 0) {
        if (errno == ENOENT || errno == ENOTDIR) /* made later (fs_mkdir_parents says why not) */
            return 0;
        return err_set(ERR_IO, "--out %s: %s", dir, strerror(errno));
    }
    if (!S_ISDIR(st.st_mode))
        return err_set(ERR_INVALID, "--out %s: exists and is not a directory", dir);
    DIR *d = opendir(dir);
    if (!d)
        return err_set(ERR_IO, "--out %s: cannot read: %s", dir, strerror(errno));
    struct dirent *e;
    bool empty = true;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            empty = false;
    closedir(d);
    if (!empty && !force)
        return err_set(ERR_INVALID, "--out %s: exists and is not empty (use --force to write "
                                    "over it)", dir);
    return 0;
}

/* --tokenizer-from must hold a Hugging Face tokenizer (vocab.json +
 * merges.txt, or tokenizer.json) that loads, with no more tokens than the
 * model has embeddings: checked before the weights are written. */
static int check_tokenizer(const char *from, const struct model_config *cfg)
{
    char a[4096], b[4096], c[4096];
    int rc;
    if ((rc = path_join(a, sizeof(a), from, "vocab.json")) < 0 ||
        (rc = path_join(b, sizeof(b), from, "merges.txt")) < 0 ||
        (rc = path_join(c, sizeof(c), from, "tokenizer.json")) < 0)
        return err_wrap(rc, "--tokenizer-from");
    struct stat st;
    if (stat(from, &st) != 0)
        return err_set(ERR_NOT_FOUND, "--tokenizer-from %s: %s (expected a tokenizer directory)",
                       from, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return err_set(ERR_INVALID, "--tokenizer-from %s: not a directory (expected one with "
                                    "vocab.json + merges.txt or tokenizer.json)", from);
    if (access(c, F_OK) != 0 && (access(a, F_OK) != 0 || access(b, F_OK) != 0))
        return err_set(ERR_NOT_FOUND, "--tokenizer-from %s: no vocab.json + merges.txt or "
                                      "tokenizer.json there", from);
    struct bpe *t = NULL;
    rc = bpe_open(from, &t);
    if (rc < 0)
        return err_wrap(rc, "--tokenizer-from %s", from);
    int n = bpe_vocab_size(t);
    bpe_close(t);
    if (n > cfg->info.vocab)
        return err_set(ERR_INVALID, "--tokenizer-from %s: %d tokens, more than the model's "
                                    "vocab_size %d (expected a tokenizer for this preset)",
                       from, n, cfg->info.vocab);
    return 0;
}

/* Writes cfg's checkpoint (weights as o says, a tokenizer, a chat template)
 * to out, checked first so that a refused --out or --tokenizer-from costs
 * nothing; staged in a directory beside out and renamed to it when
 * complete, so an interrupted or failed run leaves no half model there. */
static int gen_model_write(const struct model_config *cfg, const char *out, bool force,
                           const char *tok_from, const char *chat,
                           const struct model_random_opts *o)
{
    char staged[4096] = "";
    int rc;
    if ((rc = check_out_dir(out, force)) < 0 ||
        (tok_from && (rc = check_tokenizer(tok_from, cfg)) < 0) ||
        (rc = cli_check_space(out, model_checkpoint_bytes(cfg, o->dtype) + (1u << 20), "--out")) < 0)
        return rc;
    /* the directories above --out as mkdir -p makes them; the staging
     * directory beside it names --out in its errors */
    if ((rc = fs_mkdir_parents(out)) < 0 || (rc = fs_dir_stage(out, staged, sizeof(staged))) < 0)
        return err_wrap(rc, "--out %s", out);
    /* gen-model's minimal tokenizer has OPT's special tokens and ids: right
     * for OPT only; the other families get none unless told */
    bool opt = strcmp(cfg->info.family, "opt") == 0;
    if (!tok_from && !opt)
        fprintf(stderr, "shardswap gen-model: note: writing no tokenizer (a %s model takes token-id "
                        "prompts: generate --ids, or \"prompt\": [ids] when served; "
                        "--tokenizer-from DIR copies a real one)\n",
                cfg->info.family);
    if ((rc = tok_from ? copy_tokenizer(tok_from, staged)
              : opt    ? write_minimal_tokenizer(staged)
                       : 0) < 0 ||
        (chat && (rc = copy_chat_template(chat, staged)) < 0) ||
        (rc = model_random_write(cfg, staged, o)) < 0 || (rc = fs_dir_commit(staged, out)) < 0) {
        char why[1024], left[1024];
        if (strstr(err_msg(), staged)) /* a file of the staged copy: the --out it is for */
            err_wrap(rc, "--out %s", out);
        snprintf(why, sizeof(why), "%s", err_msg());
        if (fs_tree_remove(staged) < 0) {
            snprintf(left, sizeof(left), "%s", err_msg());
            err_set(rc, "%s (and %s is left behind: %s)", why, staged, left);
        }
        return rc;
    }
    return 0;
}

int cmd_gen_model(int argc, char **argv)
{
    const char *preset = NULL, *dtype_s = "f16", *out = NULL, *tok_from = NULL, *chat = NULL;
    int layers = -1; /* -1: the preset's */
    bool force = false;
    struct model_random_opts o = {.seed = 0};
    struct flag flags[] = {
        {.name = "preset",
         .kind = FLAG_STR,
         .dst = &preset,
         .metavar = "NAME",
         .help = "the model's shape",
         .choices = model_preset_names(),
         .required = true},
        FLAG_RANGE("layers", FLAG_INT, &layers, "N",
                   "number of decoder layers (default: the preset's)", 1, 4096, "1..4096"),
        FLAG("dtype", FLAG_STR, &dtype_s, "f16|bf16|f32", "storage dtype (default f16)"),
        FLAG("seed", FLAG_U64, &o.seed, "S", "random seed (default 0)"),
        FLAG_REQUIRED("out", FLAG_STR, &out, "DIR",
                      "output directory, absent or empty (written beside it, renamed when done)"),
        FLAG("tokenizer-from", FLAG_STR, &tok_from, "DIR",
             "copy a real tokenizer (vocab.json + merges.txt, or tokenizer.json) from DIR "
             "(default: a minimal byte-level one for OPT presets, none for the Llama family's, "
             "whose models then take token-id prompts)"),
        FLAG("chat-template", FLAG_STR, &chat, "FILE",
             "write the Jinja chat template in FILE as the model's chat_template.jinja (checked: "
             "it must parse), for /v1/chat/completions"),
        FLAG("max-shard-bytes", FLAG_U64, &o.max_shard_bytes, "N",
             "split the weights into files of at most N bytes (default 5000000000)"),
        FLAG("force", FLAG_BOOL, &force, NULL, "write into a non-empty --out"),
    };
    int rc = args_parse("gen-model",
                        "Writes a random-weight checkpoint of a preset's shape (OPT, Llama, "
                        "Mistral, Qwen2, Qwen3, Phi-3, Mixtral, Qwen3-MoE, Gemma 2, Gemma 3) in "
                        "Hugging Face layout (config.json, "
                        "generation_config.json, safetensors weights, sharded with an index when "
                        "large, and for OPT a tokenizer), initialised as transformers initialises "
                        "the family.",
                        argc, argv, flags, sizeof(flags) / sizeof(flags[0]));
    if (rc)
        return rc;
    struct model_config *cfg = NULL;
    double last = 0;
    if ((rc = model_preset(preset, &cfg)) < 0)
        goto out;
    if (dtype_parse(dtype_s, &o.dtype) < 0) {
        rc = err_set(ERR_INVALID, "--dtype \"%s\" is not one of f16, bf16, f32", dtype_s);
        goto out;
    }
    if (layers != -1)
        cfg->info.n_layers = layers;
    if (isatty(fileno(stderr))) {
        o.progress = show_progress;
        o.progress_ctx = &last;
    }
    if ((rc = gen_model_write(cfg, out, force, tok_from, chat, &o)) < 0)
        goto out;
    fprintf(stderr, "wrote %s: %s, %d layers, %s, %.3f GB of weights\n", out, preset,
            cfg->info.n_layers, dtype_name(o.dtype), model_checkpoint_bytes(cfg, o.dtype) / 1e9);
out:
    model_config_free(cfg);
    return rc < 0 ? cli_fail("gen-model") : 0;
}
