/* device_open_cuda when the library is built without CUDA.
 *
 * The library currently always builds this file: there is no CUDA backend
 * yet. When one exists, src/backend/cuda/ (cudaMalloc of the budget once,
 * sub-allocated with backend/arena.h, pinned host memory, copy and compute
 * streams, device events as cudaEvents, and a kernel table of cuBLAS calls
 * and .cu kernels: device_impl.h and kernels_impl.h) replaces this file in
 * builds where CMake finds nvcc, and CMake leaves this stub out. Everything CUDA-specific stays under src/backend/cuda/. */
#include <assert.h>
#include <stddef.h>

#include "backend/device.h"
#include "core/error.h"

int device_open_cuda(int index, uint64_t budget_bytes, struct device **out)
{
    (void)budget_bytes;
    assert(out);
    *out = NULL;
    return err_set(ERR_UNSUPPORTED, "device cuda:%d: built without CUDA support", index);
}
