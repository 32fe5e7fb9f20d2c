/* The CPU linear layer with compressed-tensors' weights (ctlinear.h): a
 * block of weight rows dequantized into a thread's scratch (exactly, then
 * rounded to bf16 in bf16 mode) and multiplied by the f32 GEMV kernel that
 * gemv.c chose for m rows; for a prefill's many rows, cpu_matmul, which
 * widens a block of rows per task through dtype_to_f32 the same way. */
#include "backend/cpu/ctlinear.h"

#include <stdatomic.h>
#include <string.h>

#include "backend/cpu/gemv_isa.h"
#include "backend/cpu/linear.h"
#include "backend/cpu/scratch.h"
#include "core/error.h"

/* weight rows dequantized at a time */
#define CT_DEQ_ROWS 16
/* weight bytes a pool task reads, and the fewest tasks a call is split into */
#define CT_TASK_BYTES (128 << 10)
#define CT_MIN_TASKS 8

struct ct_job {
    float *y;
    const float *x; /* (m, cols), rounded to bf16 in bf16 mode */
    int m;
    const struct weight_view *w;
    bool to_bf16;
    gemv_rows_fn rows;
    int task_rows;
    atomic_int rc;
};

static void ct_task(void *ctx, int task)
{
    struct ct_job *j = ctx;
    const struct weight_view *w = j->w;
    const int k = w->cols, r0 = task * j->task_rows;
    const int r1 = r0 + j->task_rows < w->rows ? r0 + j->task_rows : w->rows;
    float *blk = cpu_scratch(CPU_SCRATCH_CT_DEQ, (size_t)CT_DEQ_ROWS * k * sizeof(float));
    if (!blk) {
        atomic_store(&j->rc, ERR_NOMEM);
        return;
    }
    for (int r = r0; r < r1; r += CT_DEQ_ROWS) {
        const int nr = r1 - r < CT_DEQ_ROWS ? r1 - r : CT_DEQ_ROWS;
        for (int i = 0; i < nr; i++)
            quant_ct_dequantize(w->dtype, weight_row(w, r + i), blk + (size_t)i * k, (size_t)k);
        for (size_t i = 0; j->to_bf16 && i < (size_t)nr * k; i++)
            blk[i] = bf16_round(blk[i]);
        const struct weight_view f = {
            .dtype = DTYPE_F32, .data = blk, .rows = nr, .cols = k, .ld = (size_t)k};
        const struct gemv_args a = {
            .y = j->y + r, .ldy = (size_t)w->rows, .x = j->x, .ldx = (size_t)k, .m = j->m, .w = &f};
        j->rows(&a, 0, nr);
    }
}

static int ct_task_rows(const struct weight_view *w)
{
    size_t row_bytes = dtype_row_bytes(w->dtype, (size_t)w->cols);
    size_t rows = CT_TASK_BYTES / (row_bytes ? row_bytes : 1);
    size_t most = ((size_t)w->rows + CT_MIN_TASKS - 1) / CT_MIN_TASKS;
    if (rows > most)
        rows = most;
    rows = (rows + CT_DEQ_ROWS - 1) / CT_DEQ_ROWS * CT_DEQ_ROWS;
    return rows ? (int)rows : CT_DEQ_ROWS;
}

int cpu_ctlinear(float *y, const float *x, int m, const struct weight_view *w, enum kern_compute cm)
{
    if (m > CPU_GEMV_MAX_M)
        return cpu_matmul(y, x, m, w, cm);
    const bool to_bf16 = cm == KERN_COMPUTE_BF16;
    if (to_bf16 && !(x = cpu_round_bf16(x, (size_t)m * w->cols)))
        return err_set(ERR_NOMEM, "out of host memory for %d x %d activations in bf16", m, w->cols);
    struct ct_job j = {.y = y,
                       .x = x,
                       .m = m,
                       .w = w,
                       .to_bf16 = to_bf16,
                       .rows = cpu_gemv_rows_f32(m),
                       .task_rows = ct_task_rows(w)};
    atomic_init(&j.rc, 0);
    cpu_kernels_run(ct_task, &j, (w->rows + j.task_rows - 1) / j.task_rows);
    if (atomic_load(&j.rc) < 0)
        return err_set(ERR_NOMEM, "out of host memory for %d x %d dequantized weights", CT_DEQ_ROWS,
                       w->cols);
    return 0;
}
