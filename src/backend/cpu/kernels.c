#include "backend/cpu/kernels.h"

#include "backend/cpu/pool.h"
#include "core/error.h"

#include <assert.h>
#include <pthread.h>
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

/* Below this many input rows a linear layer is a matrix-vector product
 * bound by memory bandwidth: one fused pass that widens each weight row in
 * registers and feeds it to every input row beats widening into a buffer. */
#define GEMV_MAX_M 8
/* Weight rows per pool task of the fused product. */
#define GEMV_TASK_ROWS 32
/* Rows of a narrow weight widened per BLAS call on the large-m path. */
#define WIDEN_BLOCK_ROWS 512

static _Thread_local bool kernels_alone;

void cpu_kernels_single_thread(bool alone)
{
    kernels_alone = alone;
}

/* pool_run, or the tasks in order on this thread when it computes alone. */
static void kernels_run(pool_task_fn fn, void *ctx, int n_tasks)
{
    if (!kernels_alone) {
        pool_run(fn, ctx, n_tasks);
        return;
    }
    for (int i = 0; i < n_tasks; i++)
        fn(ctx, i);
}

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

int cpu_linear(float *y, const float *x, int m, const struct weight_view *w, const float *bias)
{
    const int n = w->rows, k = w->cols;
    if (m <= GEMV_MAX_M) {
        struct gemv_job j = {.y = y, .x = x, .m = m, .w = w};
        kernels_run(gemv_task, &j, (n + GEMV_TASK_ROWS - 1) / GEMV_TASK_ROWS);
    } else if (w->dtype == DTYPE_F32) {
        if (m == 1)
            cblas_sgemv(CblasRowMajor, CblasNoTrans, n, k, 1.0f, w->data, (int)w->ld, x, 1, 0.0f,
                        y, 1);
        else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, x, k, w->data,
                        (int)w->ld, 0.0f, y, n);
    } else {
        /* widen a block of rows on the pool, multiply it with BLAS */
        float *blk = widen_block((size_t)WIDEN_BLOCK_ROWS * k);
        if (!blk)
            return err_set(ERR_NOMEM, "out of host memory for a %d x %d weight block",
                           WIDEN_BLOCK_ROWS, k);
        for (int r0 = 0; r0 < n; r0 += WIDEN_BLOCK_ROWS) {
            int nb = n - r0 < WIDEN_BLOCK_ROWS ? n - r0 : WIDEN_BLOCK_ROWS;
            struct widen_job j = {.dst = blk, .w = w, .r0 = r0, .nb = nb};
            kernels_run(widen_task, &j, (nb + 15) / 16);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, nb, k, 1.0f, x, k, blk, k,
                        0.0f, y + r0, n);
        }
    }
    if (bias)
        for (int i = 0; i < m; i++)
            cpu_add(y + (size_t)i * n, bias, (size_t)n);
    return 0;
}

void cpu_embed(float *y, const struct weight_view *w, const int32_t *ids, int n)
{
    for (int i = 0; i < n; i++) {
        assert(ids[i] >= 0 && ids[i] < w->rows);
        dtype_to_f32(w->dtype, weight_row(w, ids[i]), y + (size_t)i * w->cols, (size_t)w->cols);
    }
}

void cpu_layernorm(float *y, const float *x, int m, int n, const float *gamma, const float *beta,
                   float eps)
{
    for (int i = 0; i < m; i++) {
        const float *xi = x + (size_t)i * n;
        float *yi = y + (size_t)i * n;
        /* two passes in double: torch reduces in f32 with a different order, so
         * the most accurate result is the closest to it on average */
        double mean = 0, var = 0;
        for (int j = 0; j < n; j++)
            mean += xi[j];
        mean /= n;
        for (int j = 0; j < n; j++) {
            double d = xi[j] - mean;
            var += d * d;
        }
        var /= n;
        float rstd = (float)(1.0 / sqrt(var + eps));
        float fmean = (float)mean;
        for (int j = 0; j < n; j++) {
            float v = (xi[j] - fmean) * rstd;
            if (gamma)
                v = v * gamma[j] + beta[j];
            yi[j] = v;
        }
    }
}

void cpu_activation(float *x, size_t n, enum kern_act act)
{
    switch (act) {
    case KERN_ACT_RELU:
        for (size_t i = 0; i < n; i++)
            x[i] = x[i] > 0 ? x[i] : 0;
        return;
    case KERN_ACT_GELU:
        for (size_t i = 0; i < n; i++)
            x[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678118654752f));
        return;
    case KERN_ACT_GELU_TANH:
        for (size_t i = 0; i < n; i++) {
            float v = x[i];
            x[i] = 0.5f * v * (1.0f + tanhf(0.79788456080286536f * (v + 0.044715f * v * v * v)));
        }
        return;
    case KERN_ACT_SILU:
        for (size_t i = 0; i < n; i++)
            x[i] = x[i] / (1.0f + expf(-x[i]));
        return;
    }
}

void cpu_add(float *y, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] += x[i];
}

void cpu_attention(float *out, size_t ldo, const float *q, size_t ldq, const float *kc,
                   const float *vc, int n_heads, int head_dim, size_t max_t, int past, int t_new,
                   const uint8_t *key_ok, float *scores)
{
    const int t_all = past + t_new;
    for (int h = 0; h < n_heads; h++) {
        const float *qh = q + (size_t)h * head_dim;
        const float *kh = kc + (size_t)h * max_t * head_dim;
        const float *vh = vc + (size_t)h * max_t * head_dim;
        float *oh = out + (size_t)h * head_dim;
        /* scores = q_h @ k_h^T over every cached key */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, t_new, t_all, head_dim, 1.0f, qh,
                    (int)ldq, kh, head_dim, 0.0f, scores, t_all);
        /* causal + padding mask, softmax per query row */
        for (int t = 0; t < t_new; t++) {
            float *s = scores + (size_t)t * t_all;
            int visible = past + t + 1;
            float mx = -INFINITY;
            for (int j = 0; j < visible; j++)
                if (key_ok[j] && s[j] > mx)
                    mx = s[j];
            if (mx == -INFINITY) {
                memset(s, 0, (size_t)t_all * sizeof(float));
                continue;
            }
            float sum = 0;
            for (int j = 0; j < t_all; j++) {
                float e = (j < visible && key_ok[j]) ? expf(s[j] - mx) : 0.0f;
                s[j] = e;
                sum += e;
            }
            float inv = 1.0f / sum;
            for (int j = 0; j < visible; j++)
                s[j] *= inv;
        }
        /* out_h = P @ v_h */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, t_new, head_dim, t_all, 1.0f,
                    scores, t_all, vh, head_dim, 0.0f, oh, (int)ldo);
    }
}

void cpu_set_threads(int n)
{
    if (n < 1)
        n = (int)sysconf(_SC_NPROCESSORS_ONLN);
    openblas_set_num_threads(n);
    pool_set_threads(n);
}

int cpu_threads(void)
{
    return openblas_get_num_threads();
}
