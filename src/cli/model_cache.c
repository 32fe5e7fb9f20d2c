#include "cli/model_cache.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/fs.h"
#include "model/opt_random.h"

int model_cache_preset(const char *cache, const char *preset, int layers, const char *dtype_s,
                       uint64_t seed, char *dir, size_t cap)
{
    struct opt_config cfg;
    struct opt_random_opts o = {.seed = seed};
    int rc = opt_preset(preset, &cfg);
    if (rc < 0)
        return rc;
    if (dtype_parse(dtype_s, &o.dtype) < 0)
        return err_set(ERR_INVALID, "--dtype \"%s\" is not one of f16, bf16, f32", dtype_s);
    if (layers > 0)
        cfg.n_layers = layers;
    snprintf(dir, cap, "%s/%s-l%d-%s-s%llu", cache, preset, cfg.n_layers, dtype_name(o.dtype),
             (unsigned long long)seed);
    struct stat st;
    if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode))
        return 0;
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
