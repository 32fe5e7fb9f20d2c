/* The fused matrix-vector product of the CPU backend's linear layers for a
 * few input rows: bound by reading the weights, so each weight row is
 * widened in registers once and fed to every input row. */
#include "backend/cpu/linear.h"

#include "backend/cpu/pool.h"
#include "core/dtype.h"
#include "core/error.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

/* Weight rows per pool task of the fused product. */
#define GEMV_TASK_ROWS 32

struct gemv_job {
    float *y;
    const float *x;
    int m;
    const struct weight_view *w;
};

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
static inline __m256 load8(enum dtype t, const void *p)
{
    switch (t) {
    case DTYPE_F16:
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
    case DTYPE_BF16:
        return _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
    default:
        return _mm256_loadu_ps((const float *)p);
    }
}

static inline float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}
#endif

/* Dot products of weight rows ra, rb (ra == rb when only one is left) with
 * input rows i0 .. i0 + mi - 1 (mi <= 4): a 2 x 4 register block, so each
 * widened weight vector feeds four FMAs and each input vector two. Missing
 * input rows repeat the last one and their results are dropped. */
static void gemv_block(const struct gemv_job *j, int ra, int rb, int i0, int mi)
{
    const struct weight_view *w = j->w;
    const int k = w->cols, n = w->rows;
    const size_t es = dtype_size(w->dtype);
    const char *wa = weight_row(w, ra), *wb = weight_row(w, rb);
    const float *x[4];
    for (int i = 0; i < 4; i++)
        x[i] = j->x + (size_t)(i0 + (i < mi ? i : mi - 1)) * k;
    float ya[4] = {0}, yb[4] = {0};
    int c = 0;
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    __m256 b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    for (; c + 8 <= k; c += 8) {
        __m256 va = load8(w->dtype, wa + (size_t)c * es), vb = load8(w->dtype, wb + (size_t)c * es);
        __m256 x0 = _mm256_loadu_ps(x[0] + c), x1 = _mm256_loadu_ps(x[1] + c);
        __m256 x2 = _mm256_loadu_ps(x[2] + c), x3 = _mm256_loadu_ps(x[3] + c);
        a0 = _mm256_fmadd_ps(va, x0, a0);
        b0 = _mm256_fmadd_ps(vb, x0, b0);
        a1 = _mm256_fmadd_ps(va, x1, a1);
        b1 = _mm256_fmadd_ps(vb, x1, b1);
        a2 = _mm256_fmadd_ps(va, x2, a2);
        b2 = _mm256_fmadd_ps(vb, x2, b2);
        a3 = _mm256_fmadd_ps(va, x3, a3);
        b3 = _mm256_fmadd_ps(vb, x3, b3);
    }
    ya[0] = hsum8(a0), ya[1] = hsum8(a1), ya[2] = hsum8(a2), ya[3] = hsum8(a3);
    yb[0] = hsum8(b0), yb[1] = hsum8(b1), yb[2] = hsum8(b2), yb[3] = hsum8(b3);
#endif
    for (; c < k; c++) {
        float va, vb;
        dtype_to_f32(w->dtype, wa + (size_t)c * es, &va, 1);
        dtype_to_f32(w->dtype, wb + (size_t)c * es, &vb, 1);
        for (int i = 0; i < 4; i++) {
            ya[i] += va * x[i][c];
            yb[i] += vb * x[i][c];
        }
    }
    for (int i = 0; i < mi; i++) {
        j->y[(size_t)(i0 + i) * n + ra] = ya[i];
        j->y[(size_t)(i0 + i) * n + rb] = yb[i];
    }
}

/* One input row: four accumulators hide the FMA latency; bound by memory. */
static float gemv_dot1(const struct gemv_job *j, int r)
{
    const struct weight_view *w = j->w;
    const int k = w->cols;
    const size_t es = dtype_size(w->dtype);
    const char *wr = weight_row(w, r);
    const float *x = j->x;
    float sum = 0;
    int c = 0;
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (; c + 32 <= k; c += 32) {
        a0 = _mm256_fmadd_ps(load8(w->dtype, wr + (size_t)c * es), _mm256_loadu_ps(x + c), a0);
        a1 = _mm256_fmadd_ps(load8(w->dtype, wr + (size_t)(c + 8) * es), _mm256_loadu_ps(x + c + 8), a1);
        a2 = _mm256_fmadd_ps(load8(w->dtype, wr + (size_t)(c + 16) * es), _mm256_loadu_ps(x + c + 16), a2);
        a3 = _mm256_fmadd_ps(load8(w->dtype, wr + (size_t)(c + 24) * es), _mm256_loadu_ps(x + c + 24), a3);
    }
    for (; c + 8 <= k; c += 8)
        a0 = _mm256_fmadd_ps(load8(w->dtype, wr + (size_t)c * es), _mm256_loadu_ps(x + c), a0);
    sum = hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
#endif
    for (; c < k; c++) {
        float v;
        dtype_to_f32(w->dtype, wr + (size_t)c * es, &v, 1);
        sum += v * x[c];
    }
    return sum;
}

/* y[:, rows of task] for every input row. */
static void gemv_task(void *ctx, int task)
{
    const struct gemv_job *j = ctx;
    const int n = j->w->rows;
    int r0 = task * GEMV_TASK_ROWS, r1 = r0 + GEMV_TASK_ROWS < n ? r0 + GEMV_TASK_ROWS : n;
    if (j->m == 1) {
        for (int r = r0; r < r1; r++)
            j->y[r] = gemv_dot1(j, r);
        return;
    }
    for (int r = r0; r < r1; r += 2)
        for (int i0 = 0; i0 < j->m; i0 += 4)
            gemv_block(j, r, r + 1 < r1 ? r + 1 : r, i0, j->m - i0 < 4 ? j->m - i0 : 4);
}

int cpu_gemv(float *y, const float *x, int m, const struct weight_view *w,
             enum kern_compute cm)
{
    if (cm == KERN_COMPUTE_BF16 && !(x = cpu_round_bf16(x, (size_t)m * w->cols)))
        return err_set(ERR_NOMEM, "out of host memory for %d x %d bf16 activations", m,
                       w->cols);
    struct gemv_job j = {.y = y, .x = x, .m = m, .w = w};
    cpu_kernels_run(gemv_task, &j, (w->rows + GEMV_TASK_ROWS - 1) / GEMV_TASK_ROWS);
    return 0;
}
