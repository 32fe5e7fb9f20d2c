/* The CUDA backend's shared internals (C only; the .cu files see
 * cuda_launch.h instead): the contexts behind a CUDA device and stream, and
 * the CHECK macros every CUDA runtime and cuBLAS call goes through.
 *
 * Files:
 *   cuda_device.c   device_ops: the budget as one cudaMalloc carved by
 *                   backend/arena.h, the pinned host pool, the H2D and D2H
 *                   copy streams, events, compute streams
 *   cuda_kernels.c  kernel_ops: the table, each slot a launcher call
 *   cuda_linear.c   kern_linear: the GEMV kernel for few rows, cuBLAS above
 *   cuda_qlinear.c  kern_linear with block-type weights (qgemv.cu, qconvert.cu)
 *   *.cu            kernels and their launchers (cuda_launch.h)
 *   cuda_error.c    CUDA and cuBLAS status -> project error code + message
 *
 * Threads: every function that calls the runtime first makes the device's
 * GPU current on the calling thread (cudaSetDevice is a thread-local store),
 * so loaders, compute threads and the engine may all call in.
 */
#ifndef SHARDSWAP_BACKEND_CUDA_CUDA_IMPL_H
#define SHARDSWAP_BACKEND_CUDA_CUDA_IMPL_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stddef.h>

#include "backend/device_impl.h"
#include "core/error.h"

/* A compute stream's context (struct stream's ctx). */
struct cuda_stream {
    cudaStream_t s;
    int gpu;                      /* CUDA ordinal of the stream's device */
    struct cuda_kernels_ctx *kern; /* cuda_kernels_stream_init's: cuBLAS handle, workspace */
};

/* The CUDA ordinal behind a CUDA device (partitions of one GPU share it). */
int cuda_device_gpu(const struct device *d);
/* A compute stream's CUDA stream. */
cudaStream_t cuda_stream_handle(const struct stream *s);

/* Called by stream_create once s->ctx's cudaStream exists (on the stream's
 * GPU): the kernels' per-stream state, a cuBLAS handle bound to the stream
 * and its workspace, allocated outside the device's budget (fixed per
 * stream, like the CUDA context itself). 0 or a negative code with a
 * message. cuda_kernels_stream_free undoes it; NULL-safe in kern. */
int cuda_kernels_stream_init(struct stream *s);
void cuda_kernels_stream_free(struct stream *s);

extern const struct kernel_ops cuda_kernel_ops;

/* A failed runtime or cuBLAS call as a project error: ERR_NOMEM for out of
 * memory, ERR_DEVICE otherwise, with "DEV: CALL: what the runtime says"
 * as the message. */
int cuda_error(const char *dev, const char *call, cudaError_t e);
int cublas_error(const char *dev, const char *call, cublasStatus_t st);

/* Every CUDA runtime call: on failure, return its error from the enclosing
 * function (which must return int). dev names the device ("cuda:0"). */
#define CUDA_CHECK(dev, call)                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            return cuda_error((dev), #call, e_);                                                   \
    } while (0)

#define CUBLAS_CHECK(dev, call)                                                                    \
    do {                                                                                           \
        cublasStatus_t st_ = (call);                                                               \
        if (st_ != CUBLAS_STATUS_SUCCESS)                                                          \
            return cublas_error((dev), #call, st_);                                                \
    } while (0)

#endif
