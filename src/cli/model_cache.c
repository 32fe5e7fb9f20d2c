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
#include "model/random.h"

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
                     uint64_t seed, struct model_config **cfg, enum dtype *dtype, char *dir,
                     size_t cap)
{
    if (dtype_parse(dtype_s, dtype) < 0)
        return err_set(ERR_INVALID, "--dtype \"%s\" is not one of f16, bf16, f32", dtype_s);
    int rc = model_preset(preset, cfg);
    if (rc < 0)
        return rc;
    if (layers > 0)
        (*cfg)->info.n_layers = layers;
    snprintf(dir, cap, "%s/%s-l%d-%s-s%llu", cache, preset, (*cfg)->info.n_layers,
             dtype_name(*dtype), (unsigned long long)seed);
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
        struct model_config *cfg;
        enum dtype dt;
        char dir[4096];
        int rc = cache_dir(cache, preset, layers, dtype_s, (uint64_t)s, &cfg, &dt, dir,
                           sizeof(dir));
        if (rc < 0)
            return rc;
        if (!is_dir(dir))
            need += model_checkpoint_bytes(cfg, dt) + SLACK_BYTES;
        model_config_free(cfg);
    }
    return cli_check_space(cache, need, "--cache");
}

int model_cache_preset(const char *cache, const char *preset, int layers, const char *dtype_s,
                       uint64_t seed, char *dir, size_t cap)
{
    struct model_config *cfg = NULL;
    struct model_random_opts o = {.seed = seed};
    int rc = cache_dir(cache, preset, layers, dtype_s, seed, &cfg, &o.dtype, dir, cap);
    if (rc < 0 || is_dir(dir))
        goto out;
    if ((rc = cli_check_space(cache, model_checkpoint_bytes(cfg, o.dtype) + SLACK_BYTES,
                              "--cache")) < 0)
        goto out;
    char partial[4200];
    snprintf(partial, sizeof(partial), "%s.partial", dir);
    if (mkdir(cache, 0755) != 0 && errno != EEXIST) {
        rc = err_set(ERR_IO, "cannot create the model cache %s: %s", cache, strerror(errno));
        goto out;
    }
    if ((rc = fs_tree_remove(partial)) < 0) /* a previous interrupted attempt */
        goto out;
    if (mkdir(partial, 0755) != 0) {
        rc = err_set(ERR_IO, "cannot create %s: %s", partial, strerror(errno));
        goto out;
    }
    fprintf(stderr, "generating %s (%d layers, %s, seed %llu) into %s (cached for next time)\n",
            preset, cfg->info.n_layers, dtype_name(o.dtype), (unsigned long long)seed, dir);
    if ((rc = model_random_write(cfg, partial, &o)) < 0) {
        fs_tree_remove(partial); /* best effort: the next run clears it too */
        goto out;
    }
    if (rename(partial, dir) != 0)
        rc = err_set(ERR_IO, "cannot rename %s to %s: %s", partial, dir, strerror(errno));
out:
    model_config_free(cfg);
    return rc;
}

int model_cache_adapters(const char *base_dir, int n, int rank, const char *dtype_s, char *dir,
                         size_t cap)
{
    struct model_config *cfg = NULL;
    struct model_random_opts o = {0};
    if (dtype_parse(dtype_s, &o.dtype) < 0)
        return err_set(ERR_INVALID, "--dtype \"%s\" is not one of f16, bf16, f32", dtype_s);
    int rc = model_config_load(base_dir, &cfg);
    if (rc < 0)
        return rc;
    snprintf(dir, cap, "%s-lora-r%d", base_dir, rank);
    int said = 0;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        rc = err_set(ERR_IO, "cannot create %s: %s", dir, strerror(errno));
        goto out;
    }
    for (int k = 0; k < n && rc == 0; k++) {
        char ad[4200], partial[4300];
        snprintf(ad, sizeof(ad), "%s/adapter_%d", dir, k);
        if (is_dir(ad))
            continue;
        snprintf(partial, sizeof(partial), "%s.partial", ad);
        if ((rc = fs_tree_remove(partial)) < 0) /* a previous interrupted attempt */
            break;
        if (mkdir(partial, 0755) != 0) {
            rc = err_set(ERR_IO, "cannot create %s: %s", partial, strerror(errno));
            break;
        }
        if (!said++)
            fprintf(stderr, "generating LoRA adapters of rank %d into %s (cached for next time)\n",
                    rank, dir);
        o.seed = (uint64_t)k;
        if ((rc = model_random_adapter_write(cfg, partial, rank, &o)) < 0) {
            fs_tree_remove(partial);
            break;
        }
        if (rename(partial, ad) != 0)
            rc = err_set(ERR_IO, "cannot rename %s to %s: %s", partial, ad, strerror(errno));
    }
out:
    model_config_free(cfg);
    return rc;
}
