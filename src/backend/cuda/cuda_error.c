/* CUDA runtime and cuBLAS failures as project errors (cuda_impl.h). */
#include "backend/cuda/cuda_impl.h"

int cuda_error(const char *dev, const char *call, cudaError_t e)
{
    int code = e == cudaErrorMemoryAllocation ? ERR_NOMEM : ERR_DEVICE;
    (void)cudaGetLastError(); /* clear a non-sticky error so the next call starts clean */
    return err_set(code, "%s: %s: %s (%s)", dev, call, cudaGetErrorString(e), cudaGetErrorName(e));
}

int cublas_error(const char *dev, const char *call, cublasStatus_t st)
{
    int code = st == CUBLAS_STATUS_ALLOC_FAILED ? ERR_NOMEM : ERR_DEVICE;
    return err_set(code, "%s: %s: %s (%s)", dev, call, cublasGetStatusString(st),
                   cublasGetStatusName(st));
}
