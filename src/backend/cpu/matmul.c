/* The CPU backend's linear layers for many input rows: a matrix product
 * through BLAS, narrow weights widened a block of rows at a time. */
#include "backend/cpu/linear.h"

#include <cblas.h>
#include <pthread.h>
#include <stdlib.h>

#include "backend/cpu/pool.h"
#include "core/dtype.h"
#include "core/error.h"

/* Rows of a narrow weight widened per BLAS call. */
#define WIDEN_BLOCK_ROWS 512

struct widen_job {
    float *dst;
    const struct weight_view *w;
    int r0, nb;
};

static void widen_task(void *ctx, int task)
{
    const struct widen_job *j = ctx;
    const int per = 16, k = j->w->cols;
    for (int r = task * per; r < (task + 1) * per && r < j->nb; r++)
        dtype_to_f32(j->w->dtype, weight_row(j->w, j->r0 + r), j->dst + (size_t)r * k, (size_t)k);
}

/* The widened block of the large-m path: one per thread, kept and grown, so
 * the hot path does not allocate per call. Freed at thread exit. */
static _Thread_local float *widen_buf;
static _Thread_local size_t widen_cap;
static pthread_key_t widen_key;
static pthread_once_t widen_once = PTHREAD_ONCE_INIT;

static void widen_key_make(void)
{
    (void)pthread_key_create(&widen_key, free);
}

static float *widen_block(size_t floats)
{
    if (floats <= widen_cap)
        return widen_buf;
    float *p = realloc(widen_buf, floats * sizeof(float));
    if (!p)
        return NULL;
    pthread_once(&widen_once, widen_key_make);
    (void)pthread_setspecific(widen_key, p);
    widen_buf = p;
    widen_cap = floats;
    return p;
}

int cpu_matmul(float *y, const float *x, int m, const struct weight_view *w,
               enum kern_compute cm)
{
    const int n = w->rows, k = w->cols;
    if (cm == KERN_COMPUTE_BF16 && !(x = cpu_round_bf16(x, (size_t)m * k)))
        return err_set(ERR_NOMEM, "out of host memory for %d x %d bf16 activations", m, k);
    if (w->dtype == DTYPE_F32) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, x, k, w->data,
                    (int)w->ld, 0.0f, y, n);
        return 0;
    }
    /* widen a block of rows on the pool, multiply it with BLAS */
    float *blk = widen_block((size_t)WIDEN_BLOCK_ROWS * k);
    if (!blk)
        return err_set(ERR_NOMEM, "out of host memory for a %d x %d weight block",
                       WIDEN_BLOCK_ROWS, k);
    for (int r0 = 0; r0 < n; r0 += WIDEN_BLOCK_ROWS) {
        int nb = n - r0 < WIDEN_BLOCK_ROWS ? n - r0 : WIDEN_BLOCK_ROWS;
        struct widen_job j = {.dst = blk, .w = w, .r0 = r0, .nb = nb};
        cpu_kernels_run(widen_task, &j, (nb + 15) / 16);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, nb, k, 1.0f, x, k, blk, k, 0.0f,
                    y + r0, n);
    }
    return 0;
}
