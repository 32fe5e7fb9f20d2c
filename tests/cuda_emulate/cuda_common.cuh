/* Host stand-ins for what src/backend/cuda/quant.cuh and quant_ct.cuh take
 * from the real cuda_common.cuh, cuda_launch.h and the CUDA headers, so
 * that their device code compiles as host C++ (run.sh): each intrinsic as
 * the single IEEE operation it is. */
#ifndef SHARDSWAP_TESTS_CUDA_EMULATE_CUDA_COMMON_CUH
#define SHARDSWAP_TESTS_CUDA_EMULATE_CUDA_COMMON_CUH
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#define __device__
#define __forceinline__ inline
enum cuda_qtype {
    CUDA_Q8_0 = 0,
    CUDA_Q4_0 = 1,
    CUDA_Q5_0 = 2,
    CUDA_Q5_1 = 3,
    CUDA_Q4_K = 4,
    CUDA_Q5_K = 5,
    CUDA_Q6_K = 6,
    CUDA_CT_I8 = 7,
    CUDA_CT_I4 = 8,
    CUDA_CT_F8 = 9
};
static inline int cuda_qtype_is_ct(int qtype)
{
    return qtype >= CUDA_CT_I8 && qtype <= CUDA_CT_F8;
}
typedef int cudaError_t;
static inline float __fmul_rn(float a, float b)
{
    volatile float r = a * b;
    return r;
}
static inline float __fadd_rn(float a, float b)
{
    volatile float r = a + b;
    return r;
}
static inline float __fsub_rn(float a, float b)
{
    volatile float r = a - b;
    return r;
}
static inline int __dp4a(int a, int b, int c)
{
    for (int i = 0; i < 4; i++)
        c += (int)(int8_t)(a >> (8 * i)) * (int)(int8_t)(b >> (8 * i));
    return c;
}
extern "C" float f16_to_f32(uint16_t h);
extern "C" uint16_t f32_to_f16(float f);
static inline float cuda_f16_bits_to_f32(uint16_t h)
{
    return f16_to_f32(h);
}
static inline float __uint_as_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}
/* the real one is core/dtype.h's bf16_round in device code (checked
 * against the CPU by test_backend_ops where a GPU is); the CPU's here */
extern "C" {
#include "core/dtype.h"
}
static inline float cuda_bf16_round(float f)
{
    return bf16_round(f);
}

/* ---- the threads of a block, for route.cuh (route_emulate.cpp) ----
 * Each CUDA thread of a launch is a host thread, one block at a time
 * (emu_launch): __syncthreads and __syncwarp are barriers over the block
 * and over the thread's warp of 32, a shuffle is a slot per thread written,
 * a warp barrier, the source's slot read, a warp barrier. __shared__
 * arrays are function statics, which the one block running shares. The
 * kernels launch whole warps, and a warp leaves a kernel whole, or with
 * its other lanes gone past their last warp operation. */
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>
#define __global__
#define __shared__ static
#define CUDA_ROUTE_MAX_EXPERTS 256
#define CUDA_ROUTE_MAX_K 16
struct emu_dim {
    unsigned x, y, z;
};
static thread_local emu_dim threadIdx, blockIdx;
static emu_dim blockDim;
struct emu_barrier {
    std::mutex m;
    std::condition_variable cv;
    int n = 0, waiting = 0;
    unsigned gen = 0;
    void wait()
    {
        std::unique_lock<std::mutex> l(m);
        const unsigned g = gen;
        if (++waiting == n) {
            waiting = 0;
            gen++;
            cv.notify_all();
        } else {
            cv.wait(l, [&] { return gen != g; });
        }
    }
};
static emu_barrier emu_block_bar, emu_warp_bar[32];
static uint64_t emu_xchg[1024];
static inline void __syncthreads()
{
    emu_block_bar.wait();
}
static inline void __syncwarp()
{
    emu_warp_bar[threadIdx.x / 32].wait();
}
template <class T> static T emu_shfl(T v, unsigned lane)
{
    const unsigned t = threadIdx.x;
    memcpy(&emu_xchg[t], &v, sizeof(v));
    __syncwarp();
    T r;
    memcpy(&r, &emu_xchg[(t & ~31u) | lane], sizeof(r));
    __syncwarp();
    return r;
}
template <class T> static T __shfl_xor_sync(unsigned, T v, int o)
{
    return emu_shfl(v, (threadIdx.x & 31u) ^ (unsigned)o);
}
template <class T> static T __shfl_sync(unsigned, T v, int src)
{
    return emu_shfl(v, (unsigned)src);
}
/* kernel<<<grid, block>>>, f calling the kernel: block a multiple of 32,
 * at most 1024 */
static void emu_launch(unsigned grid, unsigned block, const std::function<void()> &f)
{
    blockDim = {block, 1, 1};
    for (unsigned b = 0; b < grid; b++) {
        emu_block_bar.n = (int)block;
        for (unsigned w = 0; w < block / 32; w++)
            emu_warp_bar[w].n = 32;
        std::vector<std::thread> th;
        for (unsigned t = 0; t < block; t++)
            th.emplace_back([&f, b, t] {
                threadIdx = {t, 0, 0};
                blockIdx = {b, 0, 0};
                f();
            });
        for (auto &x : th)
            x.join();
    }
}

#endif
