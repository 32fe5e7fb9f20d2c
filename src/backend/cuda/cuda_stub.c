/* device_open_cuda when the library is built without CUDA (CMake found no
 * nvcc, or SHARDSWAP_CUDA=OFF): every CUDA device is refused with a message
 * saying why. In CUDA builds cuda_device.c replaces this file. */
#include <assert.h>
#include <stddef.h>

#include "backend/device.h"
#include "core/error.h"

int device_open_cuda(int index, int part, uint64_t budget_bytes, struct device **out)
{
    (void)part;
    (void)budget_bytes;
    assert(out);
    *out = NULL;
    return err_set(ERR_UNSUPPORTED,
                   "device cuda:%d: built without CUDA support (rebuild where nvcc is found, "
                   "or with -DSHARDSWAP_CUDA=ON)",
                   index);
}

int device_cuda_memory(int gpu, uint64_t *free_bytes, uint64_t *total)
{
    *free_bytes = *total = 0;
    return err_set(ERR_UNSUPPORTED,
                   "device cuda:%d: built without CUDA support (rebuild where nvcc is found, "
                   "or with -DSHARDSWAP_CUDA=ON)",
                   gpu);
}

const struct kernel_ops *cuda_kernel_table(void)
{
    return NULL; /* built without CUDA */
}
