/* device_open_cuda when the library is built without CUDA.
 *
 * The library currently always builds this file: there is no CUDA backend
 * yet. When one exists, src/backend/cuda/cuda_device.cu (cudaMalloc of the
 * budget once, sub-allocated with the arena, pinned host memory from
 * cudaHostAlloc, a copy stream with cudaEvents completing struct events)
 * replaces this file in builds where CMake finds nvcc, and CMake leaves this
 * stub out. Everything CUDA-specific stays under src/backend/cuda/. */
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
