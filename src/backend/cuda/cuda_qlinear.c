/* kern_linear on CUDA with weights in GGUF's block types (core/quant.h)
 * or compressed-tensors' (core/quant_ct.h): y[m, N] = x[m, K] @ W^T
 * (+ bias), W computed in place, never dequantized to a whole copy.
 *
 * Which path runs:
 * - m <= CUDA_GEMV_MAX_M (decode): a GEMV reading W once.
 *   - GGUF's types, f32 mode (qgemv.cu): W dequantized exactly in
 *     registers, f32 products.
 *   - GGUF's types, bf16 mode (qgemv.cu): x quantized into the scratch as
 *     the CPU backend does (Q8_0 blocks of 32 for Q8_0/Q4_0/Q5_0/Q5_1,
 *     Q8_K blocks of 256 for the K-quants), then integer dot products
 *     (dp4a) scaled and summed in the CPU's order: the CPU's bf16-mode bits.
 *   - compressed-tensors' types, both modes (ctgemv.cu): W dequantized
 *     exactly in registers and f32 products, as the CPU's ctlinear.c; in
 *     bf16 mode the weights rounded to bf16 there and x rounded to bf16
 *     into the scratch first. The CPU's values, summed in another order.
 * - above: blocks of W's rows dequantized into the scratch and one cuBLAS
 *   GEMM per block (cuda_linear_gemm: f32 accumulation, no TF32).
 *   - f32 mode: the rows dequantized to f32 (exactly the CPU's values),
 *     f32 x as it is: the CPU's f32 mode within f32 rounding.
 *   - bf16 mode: the rows dequantized and rounded to bf16, x rounded to
 *     bf16 a block of rows at a time, bf16 x bf16 -> f32 on the tensor
 *     cores. For GGUF's types not the CPU's arithmetic (which quantizes x
 *     to 8 bits for every m): both are within their own rounding of the
 *     exact product, bf16's (2^-8 relative per product) well inside x's
 *     quantization error (amax / 254 per block). For compressed-tensors'
 *     types exactly the CPU's products (its bf16 mode rounds both too).
 *     CT_F8 takes this path too, not cuBLASLt's FP8 GEMM: that scales a
 *     whole operand (one scale per tensor on Hopper), while a CT_F8 block
 *     carries its own scale every 32 elements (a checkpoint's channel,
 *     group or 128x128 block scale, repeated), so it would need a GEMM
 *     per scale group or the scales folded into an f32 rescale of partial
 *     sums; and it would round x to e4m3, far from the CPU's bf16 x.
 *   Then the bias, broadcast over the rows by one kernel.
 * The scratch (CUDA_KERN_SCRATCH per stream) bounds every block; in bf16
 * mode its first half holds x's block, the second W's. A row that does not
 * fit (K above 8M; in the bf16-mode GEMV, m x K quantized x, or for
 * compressed-tensors' types m x K f32 x, above 32 MiB) is refused with
 * ERR_UNSUPPORTED, as the plain paths do.
 */
#include <assert.h>
#include <limits.h>
#include <stdint.h>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_launch.h"
#include "core/error.h"

/* The rows of `row_bytes` that fit in `bytes` (0: not even one), at most
 * `most`. */
static int fit_rows(size_t bytes, size_t row_bytes, int most)
{
    size_t r = bytes / row_bytes;
    return r < (size_t)most ? (int)r : most;
}

/* f32 mode above the GEMV: W's rows dequantized to f32 a block at a time;
 * block [r0, r1) gives y's columns [r0, r1). */
static int q_gemm_f32(const char *dev, struct cuda_stream *cs, float *y, const float *x, int m,
                      const struct weight_view *w, int qt, size_t row_bytes)
{
    const int n = w->rows, k = w->cols;
    const int block = fit_rows(CUDA_KERN_SCRATCH, (size_t)k * sizeof(float), n);
    if (block == 0)
        return cuda_linear_too_wide(dev, k);
    for (int r0 = 0; r0 < n; r0 += block) {
        const int rows = n - r0 < block ? n - r0 : block;
        CUDA_CHECK(dev, cuda_launch_dequant_rows(cs->s, cs->kern->scratch, 0, weight_row(w, r0), qt,
                                                 rows, k, row_bytes));
        int rc = cuda_linear_gemm(dev, cs->kern->blas, rows, m, k, cs->kern->scratch, CUDA_R_32F,
                                  (size_t)k, x, CUDA_R_32F, y + r0, n);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* bf16 mode above the GEMV: x rounded to bf16 a block of its rows at a
 * time into the scratch's first half, and for each, W's rows dequantized
 * to bf16 a block at a time into the second. */
static int q_gemm_bf16(const char *dev, struct cuda_stream *cs, float *y, const float *x, int m,
                       const struct weight_view *w, int qt, size_t row_bytes)
{
    const int n = w->rows, k = w->cols;
    const size_t half = CUDA_KERN_SCRATCH / 2, row16 = (size_t)k * 2;
    const int xblock = fit_rows(half, row16, m), wblock = fit_rows(half, row16, n);
    if (xblock == 0 || wblock == 0)
        return cuda_linear_too_wide(dev, k);
    void *xs = cs->kern->scratch, *ws = (char *)cs->kern->scratch + half;
    for (int i0 = 0; i0 < m; i0 += xblock) {
        const int xr = m - i0 < xblock ? m - i0 : xblock;
        CUDA_CHECK(
            dev, cuda_launch_to_16bit(cs->s, xs, x + (size_t)i0 * k, (size_t)xr * k, CUDA_W_BF16));
        for (int r0 = 0; r0 < n; r0 += wblock) {
            const int rows = n - r0 < wblock ? n - r0 : wblock;
            CUDA_CHECK(dev, cuda_launch_dequant_rows(cs->s, ws, 1, weight_row(w, r0), qt, rows, k,
                                                     row_bytes));
            int rc = cuda_linear_gemm(dev, cs->kern->blas, rows, xr, k, ws, CUDA_R_16BF, (size_t)k,
                                      xs, CUDA_R_16BF, y + (size_t)i0 * n + r0, n);
            if (rc < 0)
                return rc;
        }
    }
    return 0;
}

int cuda_qlinear(struct cuda_stream *cs, const char *dev, float *y, const float *x, int m,
                 const struct weight_view *w, const float *bias, enum kern_compute c)
{
    const int n = w->rows, k = w->cols, qt = cuda_qtype_of(w->dtype);
    const size_t row_bytes = dtype_row_bytes(w->dtype, w->ld);
    assert(qt >= 0);

    if (m <= CUDA_GEMV_MAX_M && cuda_qtype_is_ct(qt)) {
        /* in bf16 mode x rounded into the scratch (m * K floats: K up to 1M) */
        const float *xg = x;
        if (c == KERN_COMPUTE_BF16) {
            if ((size_t)m * k * sizeof(float) > CUDA_KERN_SCRATCH)
                return cuda_linear_too_wide(dev, k);
            CUDA_CHECK(dev, cuda_launch_round_bf16(cs->s, cs->kern->scratch, x, (size_t)m * k));
            xg = cs->kern->scratch;
        }
        CUDA_CHECK(dev, cuda_launch_ctgemv(cs->s, y, xg, m, w->data, qt, n, k, row_bytes, bias,
                                           c == KERN_COMPUTE_BF16));
        return 0;
    }
    if (m <= CUDA_GEMV_MAX_M) {
        if (c == KERN_COMPUTE_F32) {
            CUDA_CHECK(dev,
                       cuda_launch_qgemv_f32(cs->s, y, x, m, w->data, qt, n, k, row_bytes, bias));
            return 0;
        }
        /* x quantized into the scratch (m * K * 1.125 bytes: K up to 3M) */
        if (cuda_qx_bytes(qt, m, k) > CUDA_KERN_SCRATCH)
            return cuda_linear_too_wide(dev, k);
        CUDA_CHECK(dev, cuda_launch_quantize_x(cs->s, cs->kern->scratch, x, m, k, qt));
        CUDA_CHECK(dev, cuda_launch_qgemv_dot(cs->s, y, cs->kern->scratch, m, w->data, qt, n, k,
                                              row_bytes, bias));
        return 0;
    }

    int rc = c == KERN_COMPUTE_F32 ? q_gemm_f32(dev, cs, y, x, m, w, qt, row_bytes)
                                   : q_gemm_bf16(dev, cs, y, x, m, w, qt, row_bytes);
    if (rc < 0)
        return rc;
    if (bias)
        CUDA_CHECK(dev, cuda_launch_add_bias(cs->s, y, bias, m, n));
    return 0;
}
