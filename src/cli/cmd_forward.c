#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/device_model.h"
#include "core/error.h"
#include "core/fs.h"
#include "model/model.h"

/* --out must be a regular file this process can create or replace: checked before
 * the model is opened and run, so a bad path costs nothing (and an existing
 * file is left as it was). */
static int check_out_path(const char *path)
{
    struct stat st;
    if (stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode))
            return err_set(ERR_INVALID, "--out %s: is a directory (expected a file to write)",
                           path);
        if (!S_ISREG(st.st_mode) && !S_ISCHR(st.st_mode) && !S_ISFIFO(st.st_mode))
            return err_set(ERR_INVALID, "--out %s: is %s (expected a file to write)", path,
                           fs_kind_name(st.st_mode));
        if (access(path, W_OK) != 0)
            return err_set(ERR_IO, "--out %s: cannot write: %s", path, strerror(errno));
        return 0;
    }
    if (errno != ENOENT)
        return err_set(ERR_IO, "--out %s: %s", path, strerror(errno));
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, sizeof(dir), ".");
    else if (slash == path)
        snprintf(dir, sizeof(dir), "/");
    else
        snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
    if (access(dir, W_OK | X_OK) != 0)
        return err_set(ERR_IO, "--out %s: cannot create it in %s: %s", path, dir,
                       strerror(errno));
    return 0;
}

/* The logits of every position of ids_s's ids through the model in dir,
 * written to path (beside it, then renamed over it). */
static int forward_run(const char *dir, const char *ids_s, const char *path,
                       const struct cli_device_flags *f)
{
    struct cli_model cm = {0};
    struct model_exec *ex = NULL;
    int32_t *ids = NULL;
    float *logits = NULL;
    FILE *fp = NULL;
    char tmp[4200];
    int n = 0, rc;
    if ((rc = check_out_path(path)) < 0 || (rc = cli_ids_parse("ids", ids_s, &ids, &n)) < 0)
        goto out;
    const struct model_exec_shape shape = {.batch = 1, .max_len = n, .max_rows = n};
    if ((rc = cli_model_open(f, dir, &shape, &cm)) < 0 ||
        (rc = cli_model_exec_open(&cm, &shape, &ex)) < 0)
        goto out;
    size_t count = (size_t)n * model_info(cm.m)->vocab;
    if (!(logits = malloc(count * sizeof(float)))) {
        rc = err_set(ERR_NOMEM, "out of memory for %zu logits", count);
        goto out;
    }
    if ((rc = model_forward(cm.m, ex, ids, NULL, n, true, logits)) < 0)
        goto out;
    /* written beside --out and renamed over it when complete: a full disk
     * leaves an existing file as it was */
    if ((rc = fs_file_begin(path, tmp, sizeof(tmp), &fp)) < 0)
        goto out;
    /* the in-memory floats are the file format on a little-endian machine */
    _Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "--out is little-endian");
    fwrite(logits, sizeof(float), count, fp); /* a short write shows in ferror at the commit */
    rc = fs_file_commit(fp, tmp, path, "the logits");
    fp = NULL;
out:
    if (fp)
        fs_file_abort(fp, tmp);
    free(ids);
    free(logits);
    model_exec_free(ex);
    cli_model_close(&cm);
    return rc;
}

int cmd_forward(int argc, char **argv)
{
    const char *dir = NULL, *ids_s = NULL, *path = NULL, *compute_s = NULL, *devices = NULL,
               *adapter = NULL;
    struct flag flags[] = {
        MODEL_FLAG(&dir),
        FLAG_REQUIRED("ids", FLAG_STR, &ids_s, "I,J,...", "token ids, comma-separated"),
        FLAG_REQUIRED("out", FLAG_STR, &path, "FILE", "where to write the logits"),
        COMPUTE_FLAG(&compute_s),
        DEVICE_FLAG(&devices),
        ADAPTER_FLAG(&adapter),
    };
    int rc = args_parse("forward",
                        "Runs the token ids through the model and writes the logits of every "
                        "position to FILE as float32 little-endian, shape [n_ids, vocab_size], "
                        "row-major.",
                        argc, argv, flags, sizeof(flags) / sizeof(flags[0]));
    if (rc)
        return rc;
    struct cli_device_flags f = {.adapter = adapter, .cpu_mapped = true};
    if (cli_device_flags_parse(compute_s, devices, &f) < 0)
        return args_usage_fail("forward");
    return forward_run(dir, ids_s, path, &f) < 0 ? cli_fail("forward") : 0;
}
