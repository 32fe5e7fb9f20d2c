/* kern_linear on CUDA: y[m, N] = x[m, K] @ W^T (+ bias), W (N, K) with row
 * stride ld in f32, f16 or bf16, in the precision of enum kern_compute
 * (GGUF's block types go to cuda_qlinear.c).
 *
 * Which path runs:
 * - m <= CUDA_GEMV_MAX_M: the fused GEMV (gemv.cu), W read once in its own
 *   type, bias in the same pass; in bf16 mode x is first rounded to bf16
 *   into the scratch (exactly the CPU backend's bf16 GEMV).
 * - above, cuBLAS cublasGemmEx with f32 accumulation (CUBLAS_COMPUTE_32F,
 *   default math: no TF32). Row-major y = x W^T is column-major
 *   y^T = W^T' x^T: A = W read transposed (lda = ld, any ld >= K), B = x
 *   (ldb = K), C = y^T (ldc = N).
 *   - f32 W, f32 mode: one f32 GEMM.
 *   - f32 W, bf16 mode: x rounded to bf16 (kept in f32) into the scratch a
 *     block of rows at a time, an f32 GEMM per block: the CPU's semantics
 *     (x rounded, f32 weights as they are).
 *   - 16-bit W, bf16 mode: x narrowed to W's own type (f16 or bf16) into
 *     the scratch a block of rows at a time, a 16 x 16 -> f32 GEMM per
 *     block on the tensor cores. For f16 weights x becomes f16, not bf16:
 *     more mantissa than the CPU's bf16 rounding (results agree within the
 *     mode's ~1e-2), but |x| above 65504 would overflow to inf; OPT's
 *     activations stay far below.
 *   - 16-bit W, f32 mode ("weights widened exactly"): a block of W's rows
 *     widened to f32 in the scratch, an f32 GEMM per block writing y's
 *     columns [r0, r1) (ldc = N still).
 *   Then the bias, broadcast over the rows by one kernel.
 * The scratch (CUDA_KERN_SCRATCH, per stream) bounds every block; a row
 * wider than the whole scratch (K > 8M) is refused with ERR_UNSUPPORTED.
 * Blocks reuse the scratch in stream order, so nothing waits on the host.
 */
#include <assert.h>
#include <limits.h>
#include <stdint.h>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_launch.h"
#include "backend/device_impl.h"
#include "core/error.h"

static cudaDataType_t cuda_type_of(enum dtype t)
{
    return t == DTYPE_F16 ? CUDA_R_16F : t == DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

/* C[n, m] (column-major, ldc) = A^T B: A is the weight block (K x n
 * column-major = n rows of K, stride lda), B is x (K x m, ldb = K). */
int cuda_linear_gemm(const char *dev, cublasHandle_t h, int n, int m, int k, const void *a,
                     cudaDataType_t at, size_t lda, const void *b, cudaDataType_t bt, float *c,
                     int ldc)
{
    const float one = 1.0f, zero = 0.0f;
    assert(lda <= INT_MAX);
    CUBLAS_CHECK(dev,
                 cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, a, at, (int)lda, b, bt, k,
                              &zero, c, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return 0;
}

/* Rows of `row_bytes` that fit in the scratch (0: not even one). */
static int scratch_rows(size_t row_bytes, int most)
{
    size_t r = CUDA_KERN_SCRATCH / row_bytes;
    return r < (size_t)most ? (int)r : most;
}

int cuda_linear_too_wide(const char *dev, int k)
{
    return err_set(ERR_UNSUPPORTED,
                   "%s: linear layer with %d input columns: a row does not fit the %zu MiB "
                   "conversion scratch",
                   dev, k, CUDA_KERN_SCRATCH >> 20);
}

/* y[m, N] = (x converted a block of rows at a time into the scratch) @ W^T:
 * bf16 mode, W in its own type (f32: x rounded to bf16 in f32; f16/bf16: x
 * narrowed to W's type). */
static int gemm_x_blocks(const char *dev, struct cuda_stream *cs, float *y, const float *x, int m,
                         const struct weight_view *w)
{
    const int n = w->rows, k = w->cols;
    const bool narrow = w->dtype != DTYPE_F32;
    const size_t es = narrow ? 2 : sizeof(float);
    const int block = scratch_rows((size_t)k * es, m);
    if (block == 0)
        return cuda_linear_too_wide(dev, k);
    const cudaDataType_t wt = cuda_type_of(w->dtype);
    for (int i0 = 0; i0 < m; i0 += block) {
        const int rows = m - i0 < block ? m - i0 : block;
        const float *xi = x + (size_t)i0 * k;
        const size_t count = (size_t)rows * k;
        if (narrow)
            CUDA_CHECK(dev, cuda_launch_to_16bit(cs->s, cs->kern->scratch, xi, count,
                                                 cuda_wtype_of(w->dtype)));
        else
            CUDA_CHECK(dev, cuda_launch_round_bf16(cs->s, cs->kern->scratch, xi, count));
        int rc = cuda_linear_gemm(dev, cs->kern->blas, n, rows, k, w->data, wt, w->ld,
                                  cs->kern->scratch, wt, y + (size_t)i0 * n, n);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* y[m, N] = x @ (W widened to f32 a block of rows at a time)^T: f32 mode on
 * 16-bit weights. Block [r0, r1) of W gives y's columns [r0, r1). */
static int gemm_w_blocks(const char *dev, struct cuda_stream *cs, float *y, const float *x, int m,
                         const struct weight_view *w)
{
    const int n = w->rows, k = w->cols;
    const int block = scratch_rows((size_t)k * sizeof(float), n);
    if (block == 0)
        return cuda_linear_too_wide(dev, k);
    for (int r0 = 0; r0 < n; r0 += block) {
        const int rows = n - r0 < block ? n - r0 : block;
        CUDA_CHECK(dev, cuda_launch_widen_rows(cs->s, cs->kern->scratch, weight_row(w, r0),
                                               cuda_wtype_of(w->dtype), rows, k, w->ld));
        int rc = cuda_linear_gemm(dev, cs->kern->blas, rows, m, k, cs->kern->scratch, CUDA_R_32F,
                                  (size_t)k, x, CUDA_R_32F, y + r0, n);
        if (rc < 0)
            return rc;
    }
    return 0;
}

int cuda_linear(struct stream *s, float *y, const float *x, int m, const struct weight_view *w,
                const float *bias, enum kern_compute c)
{
    const char *dev = s->dev->name;
    const int n = w->rows, k = w->cols;
    struct cuda_stream *cs;
    int rc = cuda_kern_enter(s, &cs);
    if (rc < 0)
        return rc;
    if (dtype_is_block(w->dtype))
        return cuda_qlinear(cs, dev, y, x, m, w, bias, c);
    if (w->ld > INT_MAX)
        return err_set(ERR_UNSUPPORTED, "%s: weight row stride %zu exceeds cuBLAS's int", dev,
                       w->ld);

    if (m <= CUDA_GEMV_MAX_M) {
        /* decode: the GEMV; in bf16 mode x is rounded into the scratch
         * first (one small launch more; m * K floats, so K up to 1M) */
        const float *xg = x;
        if (c == KERN_COMPUTE_BF16) {
            if ((size_t)m * k * sizeof(float) > CUDA_KERN_SCRATCH)
                return cuda_linear_too_wide(dev, k);
            CUDA_CHECK(dev, cuda_launch_round_bf16(cs->s, cs->kern->scratch, x, (size_t)m * k));
            xg = cs->kern->scratch;
        }
        CUDA_CHECK(dev, cuda_launch_gemv(cs->s, y, xg, m, w->data, cuda_wtype_of(w->dtype), n, k,
                                         w->ld, bias));
        return 0;
    }

    if (c == KERN_COMPUTE_BF16)
        rc = gemm_x_blocks(dev, cs, y, x, m, w);
    else if (w->dtype == DTYPE_F32)
        rc = cuda_linear_gemm(dev, cs->kern->blas, n, m, k, w->data, CUDA_R_32F, w->ld, x,
                              CUDA_R_32F, y, n);
    else
        rc = gemm_w_blocks(dev, cs, y, x, m, w);
    if (rc < 0)
        return rc;
    if (bias)
        CUDA_CHECK(dev, cuda_launch_add_bias(cs->s, y, bias, m, n));
    return 0;
}
