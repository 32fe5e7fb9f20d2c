#include "cli/model_cache.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "core/error.h"
#include "core/fs.h"
#include "model/opt_random.h"

int cli_check_space(const char *path, uint64_t bytes, const char *what)
{
    char p[4096];
    struct statvfs vfs;
    snprintf(p, sizeof(p), "%s", path);
    /* path itself may not exist yet: the nearest ancestor that does holds it */
    while (statvfs(p, &vfs) != 0) {
        if ((errno != ENOENT && errno != ENOTDIR) || strcmp(p, ".") == 0 || strcmp(p, "/") == 0)
            return err_set(ERR_IO, "%s %s: cannot tell the free space: %s", what, p,
                           strerror(errno));
        char *slash = strrchr(p, '/');
        if (!slash)
            snprintf(p, sizeof(p), ".");
        else if (slash == p)
            p[1] = '\0';
        else
            *slash = '\0';
    }
    uint64_t avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
    if (bytes > avail)
        return err_set(ERR_IO, "%s %s: writing %.2f GB needs more than the %.2f GB free on %s",
                       what, path, bytes / 1e9, avail / 1e9, p);
    return 0;
}

/* The config, dtype and cache directory of preset cut to layers (> 0) with
 * seed. */
static int cache_dir(const char *cache, const char *preset, int layers, const char *dtype_s,
                     uint64_t seed, struct opt_config *cfg, enum dtype *dtype, char *dir,
                     size_t cap)
{
    int rc = opt_preset(preset, cfg);
    if (rc < 0)
        return rc;
    if (dtype_parse(dtype_s, dtype) < 0)
        return err_set(ERR_INVALID, "--dtype \"%s\" is not one of f16, bf16, f32", dtype_s);
    if (layers > 0)
        cfg->n_layers = layers;
    snprintf(dir, cap, "%s/%s-l%d-%s-s%llu", cache, preset, cfg->n_layers, dtype_name(*dtype),
             (unsigned long long)seed);
    return 0;
}

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* A checkpoint's bytes on disk: the weights, and room for its JSON files. */
#define SLACK_BYTES (1u << 20)

int model_cache_check(const char *cache, const char *preset, int layers, const char *dtype_s,
                      int n_seeds)
{
    uint64_t need = 0;
    for (int s = 0; s < n_seeds; s++) {
        struct opt_config cfg;
        enum dtype dt;
        char dir[4096];
        int rc = cache_dir(cache, preset, layers, dtype_s, (uint64_t)s, &cfg, &dt, dir,
                           sizeof(dir));
        if (rc < 0)
            return rc;
        if (!is_dir(dir))
            need += opt_checkpoint_bytes(&cfg, dt) + SLACK_BYTES;
    }
    return cli_check_space(cache, need, "--cache");
}

int model_cache_preset(const char *cache, const char *preset, int layers, const char *dtype_s,
                       uint64_t seed, char *dir, size_t cap)
{
    struct opt_config cfg;
    struct opt_random_opts o = {.seed = seed};
    int rc = cache_dir(cache, preset, layers, dtype_s, seed, &cfg, &o.dtype, dir, cap);
    if (rc < 0)
        return rc;
    if (is_dir(dir))
        return 0;
    if ((rc = cli_check_space(cache, opt_checkpoint_bytes(&cfg, o.dtype) + SLACK_BYTES,
                              "--cache")) < 0)
        return rc;
    char partial[4200];
    snprintf(partial, sizeof(partial), "%s.partial", dir);
    if (mkdir(cache, 0755) != 0 && errno != EEXIST)
        return err_set(ERR_IO, "cannot create the model cache %s: %s", cache, strerror(errno));
    if ((rc = fs_tree_remove(partial)) < 0) /* a previous interrupted attempt */
        return rc;
    if (mkdir(partial, 0755) != 0)
        return err_set(ERR_IO, "cannot create %s: %s", partial, strerror(errno));
    fprintf(stderr, "generating %s (%d layers, %s, seed %llu) into %s (cached for next time)\n",
            preset, cfg.n_layers, dtype_name(o.dtype), (unsigned long long)seed, dir);
    if ((rc = opt_random_write(&cfg, partial, &o)) < 0) {
        fs_tree_remove(partial); /* best effort: the next run clears it too */
        return rc;
    }
    if (rename(partial, dir) != 0)
        return err_set(ERR_IO, "cannot rename %s to %s: %s", partial, dir, strerror(errno));
    return 0;
}
