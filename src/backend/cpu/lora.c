/* The CPU backend's segmented low-rank update (kern_lora, backend/kernels.h):
 * for each segment of rows, t = x @ A^T (the shrink, rank r) and then
 * y += scale * (t @ B^T) (the expansion), as PEFT's LoRA layer computes
 * `result + lora_B(lora_A(x)) * scaling`.
 *
 * Precision: in f32 mode x, A and B are used as they are (f16 and bf16
 * weights widened exactly) and t stays f32; in bf16 mode x is rounded to
 * bf16 before the shrink and t before the expansion (what a bf16 model's two
 * Linear calls get), the weights widened exactly as the linear layer does.
 * Sums are f32 either way. The scale multiplies the expansion's result, not
 * t: PEFT multiplies B(A(x)) by scaling, and in bf16 mode scaling t first
 * would round a different number to bf16.
 *
 * Every row is computed alone (lora.h: its sums in an order fixed by its
 * pair's shapes), so a row gets the same bits whatever other rows, segments
 * or adapters share the call and however the work is split. Two jobs over
 * the kernel pool: the shrinks (tasks of a few rows of one segment), then
 * the expansions (tasks of a few rows and a range of outputs of one
 * segment), each writing rows and outputs no other task writes. A call
 * with little work runs on the calling thread. */
#include "backend/cpu/lora.h"

#include <assert.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#include "backend/cpu/isa.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/linear.h"
#include "backend/cpu/scratch.h"
#include "backend/cpu/vec.h"
#include "core/dtype.h"
#include "core/error.h"

/* ---- the plain C row kernels (any CPU) ---- */

static float elem_w(enum dtype t, const char *row, int c)
{
    uint16_t h;
    switch (t) {
    case DTYPE_F16:
        memcpy(&h, row + (size_t)c * 2, 2);
        return f16_to_f32(h);
    case DTYPE_BF16:
        memcpy(&h, row + (size_t)c * 2, 2);
        return bf16_to_f32(h);
    default: {
        float f;
        memcpy(&f, row + (size_t)c * 4, 4);
        return f;
    }
    }
}

/* x . row over n columns: 16 lane sums over the whole 16s, the lanes
 * pairwise, then the rest in order. */
static float dot_scalar(const float *x, enum dtype t, const char *row, int n)
{
    float lane[16] = {0};
    const int nv = n / 16 * 16;
    for (int c = 0; c < nv; c += 16)
        for (int l = 0; l < 16; l++)
            lane[l] += x[c + l] * elem_w(t, row, c + l);
    for (int w = 8; w > 0; w /= 2)
        for (int l = 0; l < w; l++)
            lane[l] += lane[l + w];
    float s = lane[0];
    for (int c = nv; c < n; c++)
        s += x[c] * elem_w(t, row, c);
    return s;
}

void lora_shrink_scalar(float *t, const float *x, const struct weight_view *a)
{
    for (int j = 0; j < a->rows; j++)
        t[j] = dot_scalar(x, a->dtype, weight_row(a, j), a->cols);
}

void lora_expand_scalar(float *y, const float *t, const struct weight_view *b, int o0, int o1,
                        float scale)
{
    assert(o0 % LORA_OUT_BLOCK == 0);
    const size_t ldb = b->ld * dtype_size(b->dtype);
    for (int o = o0; o < o1; o++) {
        const float u = dot_scalar(t, b->dtype, (const char *)b->data + (size_t)o * ldb, b->cols);
        const float p = scale * u;
        y[o] = y[o] + p;
    }
}

/* ---- which row kernels run ---- */

struct lora_isa {
    const char *name;
    void (*shrink)(float *t, const float *x, const struct weight_view *a);
    void (*expand)(float *y, const float *t, const struct weight_view *b, int o0, int o1,
                   float scale);
};

static const struct lora_isa isa_avx512 = {"avx512", lora_shrink_avx512, lora_expand_avx512};
static const struct lora_isa isa_scalar = {"scalar", lora_shrink_scalar, lora_expand_scalar};

/* Per process, never per call: a row's bits must not depend on the call. */
static const struct lora_isa *_Atomic isa_forced;
static const struct lora_isa *isa_best;
static pthread_once_t isa_once = PTHREAD_ONCE_INIT;

static void isa_pick(void)
{
    isa_best = cpu_isa_avx512() ? &isa_avx512 : &isa_scalar;
}

static const struct lora_isa *isa_get(void)
{
    const struct lora_isa *f = isa_forced;
    if (f)
        return f;
    pthread_once(&isa_once, isa_pick);
    return isa_best;
}

int cpu_lora_force(const char *name)
{
    if (!name) {
        isa_forced = NULL;
        return 0;
    }
    if (strcmp(name, "scalar") == 0) {
        isa_forced = &isa_scalar;
        return 0;
    }
    if (strcmp(name, "avx512") == 0) {
        if (!cpu_isa_avx512())
            return err_set(ERR_UNSUPPORTED, "this CPU lacks avx512");
        isa_forced = &isa_avx512;
        return 0;
    }
    return err_set(ERR_INVALID, "unknown LoRA kernel \"%s\" (expected avx512 or scalar)", name);
}

const char *cpu_lora_kernel(void)
{
    return isa_get()->name;
}

/* ---- the call: tasks over the pool ---- */

/* Rows per shrink task (each reads its segment's A once per row, from the
 * caches after the first), rows and outputs per expansion task. */
#define SHRINK_ROWS 4
#define EXPAND_ROWS 8
#define EXPAND_OUTS 1024
/* Below this many multiply-adds in all the pool's dispatch costs more than
 * it saves. */
#define LORA_POOL_MACS (1 << 16)

struct lora_job {
    const struct lora_isa *isa;
    float *y;
    const float *x; /* rows [x_row0, ...) as the shrink reads them (rounded in bf16 mode) */
    int x_row0;
    int in, out;
    float *t; /* (m, ts): row i's intermediate at t + i * ts */
    int ts;
    bool round_t;
    const int *seg;
    const struct lora_pair *pairs;
    const int *first; /* per segment: its first task in the current job; nseg + 1 */
    int nseg;
    int out_tasks; /* expansion tasks per block of rows */
};

/* The segment of task `task`: first[s] <= task < first[s + 1]. */
static int task_segment(const struct lora_job *j, int task)
{
    int lo = 0, hi = j->nseg - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (j->first[mid] <= task)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

static void shrink_task(void *ctx, int task)
{
    const struct lora_job *j = ctx;
    const int s = task_segment(j, task);
    const struct weight_view *a = &j->pairs[s].a;
    const int i0 = j->seg[s] + (task - j->first[s]) * SHRINK_ROWS;
    const int i1 = i0 + SHRINK_ROWS < j->seg[s + 1] ? i0 + SHRINK_ROWS : j->seg[s + 1];
    for (int i = i0; i < i1; i++) {
        float *t = j->t + (size_t)i * j->ts;
        j->isa->shrink(t, j->x + (size_t)(i - j->x_row0) * j->in, a);
        if (j->round_t)
            vec_round_bf16(t, t, (size_t)a->rows);
    }
}

static void expand_task(void *ctx, int task)
{
    const struct lora_job *j = ctx;
    const int s = task_segment(j, task);
    const struct lora_pair *p = &j->pairs[s];
    const int k = task - j->first[s];
    const int i0 = j->seg[s] + k / j->out_tasks * EXPAND_ROWS;
    const int i1 = i0 + EXPAND_ROWS < j->seg[s + 1] ? i0 + EXPAND_ROWS : j->seg[s + 1];
    const int o0 = k % j->out_tasks * EXPAND_OUTS;
    const int o1 = o0 + EXPAND_OUTS < j->out ? o0 + EXPAND_OUTS : j->out;
    for (int i = i0; i < i1; i++)
        j->isa->expand(j->y + (size_t)i * j->out, j->t + (size_t)i * j->ts, &p->b, o0, o1,
                       p->scale);
}

/* fn over n tasks: on the pool, or here when the call is small. */
static void lora_run(pool_task_fn fn, struct lora_job *j, int n, double macs)
{
    if (macs < LORA_POOL_MACS) {
        for (int i = 0; i < n; i++)
            fn(j, i);
        return;
    }
    cpu_kernels_run(fn, j, n);
}

static bool active(const struct lora_pair *p, int rows)
{
    return p->a.data && rows > 0;
}

int cpu_lora(float *y, const float *x, int m, int nseg, const int *seg,
             const struct lora_pair *pairs, enum kern_compute c, float *scratch)
{
    struct lora_job j = {.isa = isa_get(),
                         .y = y,
                         .x = x,
                         .seg = seg,
                         .pairs = pairs,
                         .nseg = nseg,
                         .t = scratch,
                         .round_t = c == KERN_COMPUTE_BF16};
    int lo = m, hi = 0; /* the rows of active segments */
    for (int s = 0; s < nseg; s++) {
        if (!active(&pairs[s], seg[s + 1] - seg[s]))
            continue;
        j.in = pairs[s].a.cols;
        j.out = pairs[s].b.rows;
        if (pairs[s].a.rows > j.ts)
            j.ts = pairs[s].a.rows;
        lo = seg[s] < lo ? seg[s] : lo;
        hi = seg[s + 1] > hi ? seg[s + 1] : hi;
    }
    if (lo >= hi)
        return 0; /* nothing adds anything */

    int *first = cpu_scratch(CPU_SCRATCH_LORA_TASKS, (size_t)(nseg + 1) * sizeof(int));
    if (!first)
        return err_set(ERR_NOMEM, "out of host memory for a LoRA call's %d segments", nseg);
    j.first = first;
    if (c == KERN_COMPUTE_BF16) {
        /* x's rows rounded once, where every shrink task reads them */
        float *xr = cpu_scratch(CPU_SCRATCH_LORA_X, (size_t)(hi - lo) * j.in * sizeof(float));
        if (!xr)
            return err_set(ERR_NOMEM, "out of host memory for %d x %d activations", hi - lo, j.in);
        vec_round_bf16(xr, x + (size_t)lo * j.in, (size_t)(hi - lo) * j.in);
        j.x = xr;
        j.x_row0 = lo;
    }

    /* the shrinks */
    double macs = 0;
    int n = 0;
    for (int s = 0; s < nseg; s++) {
        first[s] = n;
        const int rows = seg[s + 1] - seg[s];
        if (active(&pairs[s], rows)) {
            n += (rows + SHRINK_ROWS - 1) / SHRINK_ROWS;
            macs += (double)rows * pairs[s].a.rows * (j.in + j.out);
        }
    }
    first[nseg] = n;
    lora_run(shrink_task, &j, n, macs);

    /* the expansions */
    j.out_tasks = (j.out + EXPAND_OUTS - 1) / EXPAND_OUTS;
    n = 0;
    for (int s = 0; s < nseg; s++) {
        first[s] = n;
        const int rows = seg[s + 1] - seg[s];
        if (active(&pairs[s], rows))
            n += (rows + EXPAND_ROWS - 1) / EXPAND_ROWS * j.out_tasks;
    }
    first[nseg] = n;
    lora_run(expand_task, &j, n, macs);
    return 0;
}
