/* shardswap bench gemv --devices cuda:G: the linear layer of decode on a
 * GPU (kern_linear with 1..8 input rows, the GEMV paths of every weight
 * type, GGUF's and compressed-tensors' block types computed in place), its
 * weight bytes per second set against a device-to-device copy measured in
 * the same run (bytes read plus bytes written: what the GPU's memory moves
 * at its limit). Copies of the matrix are cycled through, as on the CPU,
 * so that the weights come from device memory and not from L2. Timing is
 * wall-clock around queued calls closed by a sync point, so the launch
 * cost is in it, as in a forward. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/qlinear.h"
#include "backend/device.h"
#include "backend/kernels.h"
#include "cli/bench_gemv.h"
#include "core/error.h"
#include "core/jsonout.h"
#include "core/timing.h"

#define GPU_GEMV_PASSES 7
#define GPU_COPY_BYTES ((size_t)256 << 20)

/* Seconds per call of fn on s: a warm-up, then GPU_GEMV_PASSES passes of
 * at least min_s each (calls queued, then a sync point), the best. */
struct gpu_call {
    struct stream *s;
    float *y, *x, *host;
    struct weight_view w;
    size_t bytes; /* between copies */
    int copies, m;
    enum kern_compute cm;
    void *src, *dst; /* the copy's */
};

static int gpu_sync(const struct gpu_call *g)
{
    return kern_to_host(g->s, g->host, g->y, sizeof(float));
}

static int gpu_one(const struct gpu_call *g, int c)
{
    if (!g->src) {
        struct weight_view w = g->w;
        w.data = (const char *)g->w.data + g->bytes * (size_t)c;
        return kern_linear(g->s, g->y, g->x, g->m, &w, NULL, g->cm);
    }
    return kern_copy(g->s, g->dst, g->src, GPU_COPY_BYTES);
}

static double gpu_time(const struct gpu_call *g, double min_s, int *rc)
{
    double best = 1e30;
    for (int c = 0; c < g->copies && *rc == 0; c++)
        *rc = gpu_one(g, c);
    if (*rc == 0)
        *rc = gpu_sync(g);
    for (int rep = 0; rep < GPU_GEMV_PASSES && *rc == 0; rep++) {
        long calls = 0;
        double t0 = time_now(), t;
        do {
            for (int c = 0; c < g->copies && *rc == 0; c++, calls++)
                *rc = gpu_one(g, c);
            if (*rc == 0)
                *rc = gpu_sync(g);
        } while ((t = time_now() - t0) < min_s && *rc == 0);
        if (t / calls < best)
            best = t / calls;
    }
    return best;
}

int bench_gemv_gpu(const struct bench_gemv_opts *o)
{
    struct device *d = NULL;
    struct stream *s = NULL;
    struct dbuf *wb = NULL, *xb = NULL, *yb = NULL, *ca = NULL, *cb = NULL;
    char *host = NULL;
    float *hx = NULL, yhost[1];
    json_t *results = o->json ? json_array() : NULL;
    size_t most = 0;
    for (int t = 0; t < o->n_types; t++) {
        size_t mb = (size_t)o->rows * dtype_row_bytes(o->dtypes[t], (size_t)o->cols);
        most = mb > most ? mb : most;
    }
    const size_t footprint = (size_t)o->footprint_mb << 20;
    const size_t wcap = footprint > most ? footprint : most;
    const size_t xbytes = (size_t)BENCH_GEMV_GPU_MAX_M * o->cols * sizeof(float);
    const size_t ybytes = (size_t)BENCH_GEMV_GPU_MAX_M * o->rows * sizeof(float);
    const uint64_t budget = wcap + xbytes + ybytes + 2 * GPU_COPY_BYTES + ((uint64_t)64 << 20);
    int rc = device_open_cuda(o->gpu, 0, budget, &d);
    if (rc == 0)
        rc = device_stream_create(d, &s);
    if (rc == 0) {
        device_compute_thread_init(d);
        rc = device_alloc(d, wcap, &wb);
    }
    if (rc == 0)
        rc = device_alloc(d, xbytes, &xb);
    if (rc == 0)
        rc = device_alloc(d, ybytes, &yb);
    if (rc == 0)
        rc = device_alloc(d, GPU_COPY_BYTES, &ca);
    if (rc == 0)
        rc = device_alloc(d, GPU_COPY_BYTES, &cb);
    if (rc < 0)
        goto out;
    host = malloc(most);
    hx = malloc(xbytes);
    if (!host || !hx) {
        rc = err_set(ERR_NOMEM, "out of host memory");
        goto out;
    }
    for (size_t i = 0; i < xbytes / sizeof(float); i++)
        hx[i] = (float)((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
    if ((rc = kern_to_device(s, dbuf_ptr(xb), hx, xbytes)) < 0)
        goto out;

    /* the limit: a device-to-device copy, bytes read plus written */
    struct gpu_call cp = {.s = s,
                          .y = dbuf_ptr(yb),
                          .host = yhost,
                          .copies = 1,
                          .src = dbuf_ptr(ca),
                          .dst = dbuf_ptr(cb)};
    const double copy_s = gpu_time(&cp, o->min_s, &rc);
    if (rc < 0)
        goto out;
    const double copy_gbs = 2.0 * GPU_COPY_BYTES / copy_s / 1e9;
    if (!o->json)
        printf("gemv on %s, %d x %d weights, compute %s, %d MB cycled per dtype; device copy "
               "%.0f GB/s (read + write)\n%-5s %3s %9s %9s %8s %8s\n",
               device_name(d), o->rows, o->cols, kern_compute_name(o->cm), o->footprint_mb,
               copy_gbs, "dtype", "m", "ms/call", "GB/s", "/copy", "/m=1");

    for (int t = 0; t < o->n_types && rc == 0; t++) {
        const enum dtype dt = o->dtypes[t];
        const size_t mbytes = (size_t)o->rows * dtype_row_bytes(dt, (size_t)o->cols);
        int copies = (int)(wcap / mbytes);
        /* one matrix's bytes made on the host, uploaded into every copy */
        if (dtype_is_block(dt))
            cpu_qlinear_random_blocks(dt, host,
                                      mbytes / dtype_row_bytes(dt, (size_t)dtype_block(dt)), 1);
        else
            for (size_t i = 0; i < mbytes; i++)
                host[i] = (char)(dt == DTYPE_F32 ? (i % 4 == 3 ? 0x3c : i) : (i % 2 ? 0x3c : i));
        for (int c = 0; c < copies && rc == 0; c++)
            rc = kern_to_device(s, (char *)dbuf_ptr(wb) + mbytes * (size_t)c, host, mbytes);
        struct gpu_call g = {.s = s,
                             .y = dbuf_ptr(yb),
                             .x = dbuf_ptr(xb),
                             .host = yhost,
                             .w = {.dtype = dt,
                                   .data = dbuf_ptr(wb),
                                   .rows = o->rows,
                                   .cols = o->cols,
                                   .ld = (size_t)o->cols},
                             .bytes = mbytes,
                             .copies = copies,
                             .cm = o->cm};
        double one = 0;
        for (int m = 1; m <= o->max_m && m <= BENCH_GEMV_GPU_MAX_M && rc == 0; m *= 2) {
            g.m = m;
            const double sec = gpu_time(&g, o->min_s, &rc);
            if (rc < 0)
                break;
            if (m == 1)
                one = sec;
            const double gbs = mbytes / sec / 1e9;
            if (o->json)
                json_array_append_new(results, json_pack("{s:s, s:i, s:o, s:o, s:o, s:o}", "dtype",
                                                         dtype_name(dt), "m", m, "ms_per_call",
                                                         jsonout_real(sec * 1e3, 4), "weight_gb_s",
                                                         jsonout_real(gbs, 3), "vs_copy",
                                                         jsonout_real(gbs / copy_gbs, 3), "vs_m1",
                                                         jsonout_real(sec / one, 3)));
            else
                printf("%-5s %3d %9.4f %9.1f %8.2f %8.2f\n", dtype_name(dt), m, sec * 1e3, gbs,
                       gbs / copy_gbs, sec / one);
        }
    }
    if (rc == 0 && o->json)
        rc = jsonout_print(json_pack("{s:s, s:i, s:i, s:s, s:o, s:o}", "device", device_name(d),
                                     "rows", o->rows, "cols", o->cols, "compute",
                                     kern_compute_name(o->cm), "copy_gb_s",
                                     jsonout_real(copy_gbs, 3), "results", results));
    else
        json_decref(results);
    results = NULL;
out:
    json_decref(results);
    device_free(cb);
    device_free(ca);
    device_free(yb);
    device_free(xb);
    device_free(wb);
    device_stream_destroy(s);
    device_close(d);
    free(host);
    free(hx);
    return rc;
}
