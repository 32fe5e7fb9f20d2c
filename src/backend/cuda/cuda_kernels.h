/* The kernel table's private half, shared by cuda_kernels.c (the table and
 * the per-stream state) and cuda_linear.c (the linear layer): what a
 * compute stream holds for the kernels, and the linear slot. */
#ifndef SHARDSWAP_BACKEND_CUDA_CUDA_KERNELS_H
#define SHARDSWAP_BACKEND_CUDA_CUDA_KERNELS_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stddef.h>

#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/cuda_launch.h"
#include "backend/kernels.h"

/* cuBLAS's workspace per stream (what NVIDIA recommends for Hopper), and the
 * conversion scratch of the linear layer: activations narrowed to 16 bits or
 * rounded to bf16, or weight rows widened to f32, a bounded block at a time
 * (cuda_linear.c). Both are cudaMalloc'ed at stream creation, outside the
 * device's budget: a fixed cost per stream, like the CUDA context and the
 * cuBLAS handle's own allocations. */
#define CUDA_CUBLAS_WORKSPACE ((size_t)32 << 20)
#define CUDA_KERN_SCRATCH ((size_t)32 << 20)

/* The kernels' state of one compute stream (struct cuda_stream's kern),
 * used only by the thread that owns the stream. Everything queued on the
 * stream runs in order, so the scratch is reused by one linear layer after
 * another without a wait. */
struct cuda_kernels_ctx {
    cublasHandle_t blas; /* bound to the stream; default math (no TF32) */
    void *workspace;     /* CUDA_CUBLAS_WORKSPACE bytes, cuBLAS's */
    void *scratch;       /* CUDA_KERN_SCRATCH bytes, 256-byte aligned */
};

/* A weight dtype as the launchers know it. */
static inline int cuda_wtype_of(enum dtype t)
{
    return t == DTYPE_F16 ? CUDA_W_F16 : t == DTYPE_BF16 ? CUDA_W_BF16 : CUDA_W_F32;
}

/* A block type as the launchers know it (dtype_is_block(t)). */
static inline int cuda_qtype_of(enum dtype t)
{
    switch (t) {
    case DTYPE_Q8_0:
        return CUDA_Q8_0;
    case DTYPE_Q4_0:
        return CUDA_Q4_0;
    case DTYPE_Q5_0:
        return CUDA_Q5_0;
    case DTYPE_Q5_1:
        return CUDA_Q5_1;
    case DTYPE_Q4_K:
        return CUDA_Q4_K;
    case DTYPE_Q5_K:
        return CUDA_Q5_K;
    case DTYPE_Q6_K:
        return CUDA_Q6_K;
    case DTYPE_CT_I8:
        return CUDA_CT_I8;
    case DTYPE_CT_I4:
        return CUDA_CT_I4;
    case DTYPE_CT_F8:
        return CUDA_CT_F8;
    case DTYPE_F32:
    case DTYPE_F16:
    case DTYPE_BF16:
        break;
    }
    return -1; /* not a block type: every launcher refuses it */
}

/* The stream's context after making its GPU current on the calling thread:
 * 0, or the error of cudaSetDevice with a message. */
int cuda_kern_enter(struct stream *s, struct cuda_stream **out);

/* The kernel table's linear slot (backend/kernels.h's kern_linear). */
int cuda_linear(struct stream *s, float *y, const float *x, int m, const struct weight_view *w,
                const float *bias, enum kern_compute c);
/* kern_linear with a block-type w, GGUF's or compressed-tensors'
 * (cuda_qlinear.c), called by cuda_linear after cuda_kern_enter. */
int cuda_qlinear(struct cuda_stream *cs, const char *dev, float *y, const float *x, int m,
                 const struct weight_view *w, const float *bias, enum kern_compute c);

/* cuda_linear.c's cuBLAS call: C[n, m] (column-major, ldc) = A^T B with A
 * the weight block (n rows of k, stride lda) and B x (k x m, ldb = k), f32
 * accumulation, no TF32. 0 or the cuBLAS error with a message. */
int cuda_linear_gemm(const char *dev, cublasHandle_t h, int n, int m, int k, const void *a,
                     cudaDataType_t at, size_t lda, const void *b, cudaDataType_t bt, float *c,
                     int ldc);
/* ERR_UNSUPPORTED: a row of k inputs does not fit the conversion scratch. */
int cuda_linear_too_wide(const char *dev, int k);

#endif
