/* safetensors writer: declare every tensor, then stream their bytes.
 *
 * The header (see safetensors.c for the format) is written on the first
 * st_writer_write() or at st_writer_close(): "__metadata__": {"format": "pt"} first,
 * then the tensors in declaration order with contiguous data_offsets in that order.
 * Like the official writer we pad the header JSON with spaces so that the data
 * section starts at a multiple of 8 bytes. Tensors then sit at their element size's
 * alignment when declared largest element size first (or when every tensor's size
 * is a multiple of 8); otherwise some are unaligned, which readers tolerate (the
 * official writer sorts by alignment instead; we keep the caller's order so data
 * can be streamed).
 *
 * Any error is sticky: the writer then only accepts st_writer_close() (which fails
 * and removes the file) or st_writer_abort().
 */
#include "format/safetensors.h"

#include <assert.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"

struct st_decl {
    char *name;
    enum dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    size_t nbytes;
};

struct st_writer {
    char *path;
    FILE *fp;
    int regular;            /* only a regular file is ever removed */
    struct st_decl *decls;
    size_t ndecl, cap;
    size_t total;           /* declared data bytes */
    size_t written;         /* data bytes written so far */
    int started;            /* header written */
    int failed;             /* an error happened: the file is not a checkpoint */
};

static int writer_fail(struct st_writer *w, int code)
{
    w->failed = 1;
    return code;
}

static int writer_io_err(struct st_writer *w, const char *what)
{
    return writer_fail(w, err_set(ERR_IO, "%s %s: %s", what, w->path,
                                  errno ? strerror(errno) : "unknown error"));
}

static void writer_free(struct st_writer *w)
{
    for (size_t i = 0; i < w->ndecl; i++)
        free(w->decls[i].name);
    free(w->decls);
    free(w->path);
    free(w);
}

int st_writer_open(const char *path, struct st_writer **out)
{
    assert(path && out);
    *out = NULL;
    struct st_writer *w = calloc(1, sizeof(*w));
    if (!w)
        return err_set(ERR_NOMEM, "out of memory creating %s", path);
    w->path = strdup(path);
    if (!w->path) {
        free(w);
        return err_set(ERR_NOMEM, "out of memory creating %s", path);
    }
    w->fp = fopen(path, "wbe");
    if (!w->fp) {
        int rc = err_set(ERR_IO, "cannot create %s: %s", path, strerror(errno));
        writer_free(w);
        return rc;
    }
    struct stat sb;
    w->regular = fstat(fileno(w->fp), &sb) == 0 && S_ISREG(sb.st_mode);
    *out = w;
    return 0;
}

int st_writer_declare(struct st_writer *w, const char *name, enum dtype dtype, int ndim,
                      const int64_t *shape)
{
    assert(w && name);
    if (w->failed)
        return err_set(ERR_INVALID, "%s: writer already failed", w->path);
    if (w->started)
        return writer_fail(w, err_set(ERR_INVALID,
                                      "%s: tensor '%s' declared after data was written", w->path,
                                      name));
    if (ndim < 0 || ndim > ST_MAX_DIMS || (ndim > 0 && !shape))
        return writer_fail(w, err_set(ERR_INVALID, "%s: tensor '%s' has %d dimensions, at most %d",
                                      w->path, name, ndim, ST_MAX_DIMS));
    if (strcmp(name, "__metadata__") == 0)
        return writer_fail(w, err_set(ERR_INVALID, "%s: tensor name __metadata__ is reserved",
                                      w->path));
    json_t *probe = json_string(name); /* NULL unless valid UTF-8 */
    if (!probe)
        return writer_fail(w, err_set(ERR_INVALID, "%s: tensor name '%s' is not valid UTF-8",
                                      w->path, name));
    json_decref(probe);
    for (size_t i = 0; i < w->ndecl; i++) {
        if (strcmp(w->decls[i].name, name) == 0)
            return writer_fail(w, err_set(ERR_INVALID, "%s: tensor '%s' declared twice",
                                          w->path, name));
    }
    size_t numel = 1, nbytes;
    int empty = 0, overflow = 0;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return writer_fail(w, err_set(ERR_INVALID, "%s: tensor '%s' has shape[%d] = %lld",
                                          w->path, name, i, (long long)shape[i]));
        empty |= shape[i] == 0;
        overflow |= __builtin_mul_overflow(numel, (size_t)shape[i], &numel);
    }
    overflow |= __builtin_mul_overflow(numel, dtype_size(dtype), &nbytes);
    if (empty)
        nbytes = 0;
    /* data_offsets are written as JSON integers (int64). */
    if ((overflow && !empty) || __builtin_add_overflow(w->total, nbytes, &w->total) ||
        w->total > (size_t)INT64_MAX)
        return writer_fail(w, err_set(ERR_INVALID, "%s: tensor '%s' is too large", w->path,
                                      name));

    if (w->ndecl == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 64;
        struct st_decl *d = realloc(w->decls, cap * sizeof(*d));
        if (!d)
            return writer_fail(w, err_set(ERR_NOMEM, "%s: out of memory declaring '%s'",
                                          w->path, name));
        w->decls = d;
        w->cap = cap;
    }
    struct st_decl *d = &w->decls[w->ndecl];
    memset(d, 0, sizeof(*d));
    d->name = strdup(name);
    if (!d->name)
        return writer_fail(w, err_set(ERR_NOMEM, "%s: out of memory declaring '%s'", w->path,
                                      name));
    d->dtype = dtype;
    d->ndim = ndim;
    if (ndim > 0)
        memcpy(d->shape, shape, (size_t)ndim * sizeof(*shape));
    d->nbytes = nbytes;
    w->ndecl++;
    return 0;
}

/* The header JSON, unpadded, malloc'd. */
static char *header_build(const struct st_writer *w)
{
    char *text = NULL;
    json_t *root = json_object();
    json_t *meta = json_pack("{s:s}", "format", "pt");
    if (!root || !meta || json_object_set_new(root, "__metadata__", meta) != 0) {
        json_decref(meta);
        goto out;
    }
    size_t at = 0;
    for (size_t i = 0; i < w->ndecl; i++) {
        const struct st_decl *d = &w->decls[i];
        json_t *shape = json_array();
        if (!shape)
            goto out;
        for (int k = 0; k < d->ndim; k++) {
            if (json_array_append_new(shape, json_integer(d->shape[k])) != 0) {
                json_decref(shape);
                goto out;
            }
        }
        json_t *t = json_pack("{s:s, s:o, s:[I, I]}", "dtype", dtype_name(d->dtype), "shape",
                              shape, "data_offsets", (json_int_t)at,
                              (json_int_t)(at + d->nbytes));
        if (!t || json_object_set_new(root, d->name, t) != 0)
            goto out;
        at += d->nbytes;
    }
    text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
out:
    json_decref(root);
    return text;
}

static int header_write(struct st_writer *w)
{
    char *text = header_build(w);
    if (!text)
        return writer_fail(w, err_set(ERR_NOMEM, "%s: out of memory building the header",
                                      w->path));
    size_t len = strlen(text);
    size_t pad = (8 - len % 8) % 8;
    uint64_t hlen = len + pad;
    uint8_t le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (uint8_t)(hlen >> (8 * i));
    static const char spaces[8] = "        ";
    errno = 0;
    int ok = fwrite(le, 1, 8, w->fp) == 8 && fwrite(text, 1, len, w->fp) == len &&
             fwrite(spaces, 1, pad, w->fp) == pad;
    free(text);
    w->started = 1;
    return ok ? 0 : writer_io_err(w, "writing");
}

int st_writer_write(struct st_writer *w, const void *data, size_t nbytes)
{
    assert(w && (data || nbytes == 0));
    if (w->failed)
        return err_set(ERR_INVALID, "%s: writer already failed", w->path);
    if (!w->started) {
        int rc = header_write(w);
        if (rc)
            return rc;
    }
    if (nbytes > w->total - w->written)
        return writer_fail(w, err_set(ERR_INVALID,
                                      "%s: writing %zu more bytes would exceed the %zu declared "
                                      "(%zu written)",
                                      w->path, nbytes, w->total, w->written));
    errno = 0;
    if (nbytes && fwrite(data, 1, nbytes, w->fp) != nbytes)
        return writer_io_err(w, "writing");
    w->written += nbytes;
    return 0;
}

int st_writer_close(struct st_writer *w)
{
    int rc = 0;
    assert(w);
    if (w->failed)
        rc = err_set(ERR_INVALID, "%s: writer already failed", w->path);
    if (!rc && !w->started)
        rc = header_write(w);
    if (!rc && w->written != w->total)
        rc = writer_fail(w, err_set(ERR_INVALID, "%s: %zu of %zu declared data bytes written",
                                    w->path, w->written, w->total));
    errno = 0;
    if (!rc && fflush(w->fp) != 0)
        rc = writer_io_err(w, "writing");
    errno = 0;
    int closed = fclose(w->fp);
    if (!rc && closed != 0)
        rc = writer_io_err(w, "closing");
    if (rc && w->regular)
        unlink(w->path);
    writer_free(w);
    return rc;
}

void st_writer_abort(struct st_writer *w)
{
    if (!w)
        return;
    fclose(w->fp);
    if (w->regular)
        unlink(w->path);
    writer_free(w);
}
