/* A whole model copied onto one device of any backend: the swap engine's
 * blob layout, one allocation per blob, filled in place on this process's
 * CPU device, else through a host staging buffer from the device's
 * backend. What the single-device commands and the GPU tests run on. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/arch.h"

/* Bytes device_alloc counts for an allocation of n. */
static uint64_t alloc_bytes(size_t n)
{
    return ((uint64_t)n + 63) / 64 * 64;
}

/* The checkpoint at dir, opened, and its whole model as one unbound shard
 * with its blob layout; on failure nothing is left open. */
static int open_whole(const char *dir, struct st_checkpoint **ck, struct model **m,
                      struct model_layout *lay)
{
    struct model_config *cfg = NULL;
    int rc;
    if ((rc = model_config_load(dir, &cfg)) < 0)
        return rc;
    if ((rc = st_open(dir, ck)) < 0)
        goto out;
    struct model_shard whole = {.tp_size = 1, .layer_end = cfg->info.n_layers};
    if ((rc = model_shard_open(cfg, *ck, &whole, m, lay)) < 0) {
        err_wrap(rc, "%s", dir);
        st_close(*ck);
        *ck = NULL;
    }
out:
    model_config_free(cfg);
    return rc;
}

int model_device_bytes(const char *dir, const struct model_exec_shape *shape, uint64_t *weights,
                           uint64_t *exec)
{
    struct st_checkpoint *ck = NULL;
    struct model *m = NULL;
    struct model_layout lay;
    int rc;
    *weights = *exec = 0;
    if ((rc = open_whole(dir, &ck, &m, &lay)) < 0)
        return rc;
    for (int b = 0; b < lay.n_blobs; b++)
        *weights += alloc_bytes(lay.blob_bytes[b]);
    if (shape && (*exec = model_exec_bytes_bound(m, shape)) == 0)
        rc = err_set(ERR_INVALID, "%s: a batch of %d x %d positions fits no device", dir,
                     shape->batch, shape->max_len);
    model_layout_free(&lay);
    model_close(m);
    st_close(ck);
    return rc;
}

/* On this process's CPU device each blob is filled in place (its memory is
 * the host's): one pass over the weights, not a fill of the staging buffer
 * and a copy. */
int model_upload_blobs(struct model *m, const struct model_layout *lay,
                       const struct st_checkpoint *ck, struct device *dev)
{
    m->dev = dev;
    if (!(m->blobs = calloc((size_t)lay->n_blobs, sizeof(*m->blobs))))
        return err_set(ERR_NOMEM, "out of memory");
    m->n_blobs = lay->n_blobs;
    const bool in_place = device_kind(dev) == DEVICE_CPU && device_proc(dev) < 0;
    size_t max = 0;
    for (int b = 0; b < lay->n_blobs; b++)
        max = lay->blob_bytes[b] > max ? lay->blob_bytes[b] : max;
    if (max == 0)
        return 0;
    void *host = NULL;
    int rc = in_place ? 0 : device_host_alloc(dev, max, &host);
    if (rc < 0)
        return err_wrap(rc, "a %zu-byte staging buffer for %s", max, device_name(dev));
    for (int b = 0; b < lay->n_blobs; b++) {
        size_t n = lay->blob_bytes[b];
        if (n == 0) /* an empty blob binds nothing */
            continue;
        if ((rc = device_alloc(dev, n, &m->blobs[b])) < 0) {
            err_wrap(rc, "the model's weights (blob %d of %d)", b, lay->n_blobs);
            break;
        }
        if (in_place) {
            if ((rc = model_shard_fill(m, lay, ck, b, dbuf_ptr(m->blobs[b]))) < 0)
                break;
        } else {
            if ((rc = model_shard_fill(m, lay, ck, b, host)) < 0)
                break;
            /* the staging buffer is refilled for the next blob: wait for this copy */
            if ((rc = device_copy_h2d(dev, m->blobs[b], 0, host, n, NULL)) < 0)
                break;
            device_sync(dev);
        }
        model_shard_bind(m, lay, b, dbuf_ptr(m->blobs[b]));
    }
    device_sync(dev); /* nothing may still read host when it is freed */
    if (host)
        device_host_free(dev, host, max);
    return rc;
}

int model_open_on(const char *dir, struct device *dev, const enum kern_compute *compute,
                  struct model **out)
{
    struct st_checkpoint *ck = NULL;
    struct model *m = NULL;
    struct model_layout lay;
    int rc;
    *out = NULL;
    if ((rc = open_whole(dir, &ck, &m, &lay)) < 0)
        return rc;
    if ((rc = model_check_device(m->cfg, dev)) < 0) {
        err_wrap(rc, "%s", dir);
        goto out;
    }
    if (compute)
        model_layout_set_compute(m, &lay, *compute);
    model_layout_set_pack(&lay, dev);
    if ((rc = model_upload_blobs(m, &lay, ck, dev)) < 0) {
        err_wrap(rc, "%s on %s", dir, device_name(dev));
        goto out;
    }
    *out = m;
    m = NULL;
out:
    model_layout_free(&lay);
    model_close(m);
    st_close(ck);
    return rc;
}
