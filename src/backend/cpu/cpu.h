/* What only the CPU backend has: how many cores its kernels use, and which
 * instruction set its GEMV runs.
 * (device_open_cpu and device_cpu_set_link are in backend/device.h.) */
#ifndef SHARDSWAP_BACKEND_CPU_CPU_H
#define SHARDSWAP_BACKEND_CPU_CPU_H

#include <stdbool.h>

#include "backend/kernels.h"

/* Threads the CPU kernels may use: the matmul, GEMV and attention split
 * their work over the kernel pool, and oneDNN and OpenBLAS run one thread
 * per task; n < 1 means all cores. The pool starts at the first job with
 * the count set by then. */
void cpu_set_threads(int n);
int cpu_threads(void);

/* Makes the calling thread run every kernel on itself alone (no worker pool;
 * oneDNN's matmul on this thread only): the compute thread of a CPU device
 * is one core. */
void cpu_kernels_single_thread(bool alone);

/* The machine's matmul ceiling: GFLOP/s of the large-m linear layer
 * (cpu_matmul) on y[m, n] = x[m, k] @ w^T with dense f32 weights in f32
 * mode and bf16 weights in bf16 mode, best of 5 after one warm-up call, on
 * threads threads (< 1: the current count), and the oneDNN implementation
 * it ran ("brg:avx512_core", ...; "" where OpenBLAS ran). Allocates and
 * frees its operands. 0, or a negative error code with a message. */
struct cpu_matmul_ceiling {
    double gflops;
    char impl[64];
};
int cpu_matmul_ceiling(int m, int n, int k, enum kern_compute cm, int threads,
                       struct cpu_matmul_ceiling *out);

/* Which GEMV kernel runs per class of weights (f32, f16, bf16, bf16 in
 * bf16 mode) and bucket of input rows (m1, m2-4, m5-8, m9-16), as one line:
 * "f32: avx512; ...; bf16/bf16: m1 avx512pairs, m2-4 avx512bf16, ...
 * (measured in 12 ms)", calibrating every class not measured yet; or the
 * one kernel SHARDSWAP_GEMV or cpu_gemv_force names, "NAME (every call, by
 * request)". Valid until this thread's next call. */
const char *cpu_gemv_kernels(void);
/* The GEMV kernels' names, as one line: "amx, avx512bf16, ... matmul or
 * scalar" (gemv.c's table, whether this CPU runs each or not). */
const char *cpu_gemv_kernel_names(void);
/* Makes cpu_gemv run kernel `name` (one of cpu_gemv_kernel_names) for every call (NULL: the
 * measured choices again), for tests and benchmarks; not while a cpu_gemv runs. 0, ERR_UNSUPPORTED
 * when the CPU lacks it, ERR_INVALID for an unknown name (the choice is then unchanged). */
int cpu_gemv_force(const char *name);
/* Spreads cpu_gemv's and the quantized products' tasks over the threads in
 * lanes (true: each thread a contiguous run of rows, the default; lanes.h)
 * or in the pool's order (false, as SHARDSWAP_GEMV_SPLIT=tasks), for
 * benchmarks comparing the two; not while a product runs. The results are
 * the same either way. */
void cpu_gemv_split_lanes(bool lanes);
/* cpu_gemv's and the quantized products' calls in claims (true, the
 * default: a task per lane taking small steps, lanes.h) or one 128 KiB step
 * per pool task (false, as SHARDSWAP_GEMV_SPLIT=steps), for benchmarks
 * comparing the two; not while a product runs. The results are the same
 * either way. */
void cpu_gemv_split_claims(bool claims);
/* whether cpu_gemv's and the quantized products' calls run in claims
 * (cpu_gemv_split_claims) */
bool cpu_gemv_claims(void);

/* "vnni, vnni-near, ... or scalar": the quantized dot-product kernels'
 * names, for errors and help (made once, from the table in qlinear.c) */
const char *cpu_qlinear_kernel_names(void);
/* Which quantized dot-product kernel (one of cpu_qlinear_kernel_names)
 * runs per GGUF block type with a bf16-mode linear layer (x quantized), for
 * one input row, 2-4, 5-8, 9-15 and 16 or more, as one line: "Q8_0: m1
 * vnni, m2-4 vnni-mr, m5-8 vnni-mr, m9-15 vnni-mr, m16+ vnni-m8; ...
 * (measured in 40 ms)", calibrating every type not measured yet; or "NAME
 * (every call, by request)" under SHARDSWAP_QDOT or cpu_qlinear_force.
 * Valid until this thread's next call. */
const char *cpu_qlinear_kernels(void);
/* Makes the quantized linear layer run kernel `name` (one of
 * cpu_qlinear_kernel_names) for every call (NULL: the measured choices
 * again), for tests and benchmarks; not while a product runs. 0,
 * ERR_UNSUPPORTED when the CPU lacks it, ERR_INVALID for an unknown name. */
int cpu_qlinear_force(const char *name);
/* Whether blobs filled for this CPU pack the rows of the types that have
 * a packed layout (cpu_qlinear_packs: the K-quants in groups of 16, vnni-x16): by
 * measurement (-1, the default), never (0) or wherever the CPU has AVX-512
 * VNNI (1), as SHARDSWAP_QPACK=on|off starts a process; for tests and
 * benchmarks, before the blobs are filled (a view keeps its layout). */
void cpu_qlinear_pack_force(int on);
/* Whether vnni-near, vnni-far and vnni-x16 run their builds with GFNI where the CPU
 * has it (true, the default; SHARDSWAP_QDOT_GFNI=off starts a process with
 * false): the same bits either way, for tests and A/B timing; not while a
 * product runs. */
void cpu_qlinear_gfni(bool on);

/* Which compressed-tensors kernel (avx512bf16, avx512, avx2, deq, scalar)
 * runs per CT type, compute mode and bucket of input rows (1; 2-16), as one
 * line: "CT_I8: f32 m1 avx512, f32 m2-16 avx512, bf16 m1 avx512bf16, ...;
 * ... (measured in 60 ms)", calibrating every type not measured yet; or
 * "NAME (every call, by request)" under SHARDSWAP_CTDOT or
 * cpu_ctlinear_force. Valid until this thread's next call. */
const char *cpu_ctlinear_kernels(void);
/* Makes the compressed-tensors linear layer run kernel `name` for every
 * call up to 16 input rows (NULL: the measured choices again; avx512bf16
 * runs avx512 in f32 mode), for tests and benchmarks; not while a product
 * runs. 0, ERR_UNSUPPORTED when the CPU lacks it, ERR_INVALID for an
 * unknown name. */
int cpu_ctlinear_force(const char *name);

/* Which row kernels the LoRA update (kern_lora) runs: "avx512" or
 * "scalar", chosen once per process from the CPU (never per call: a row's
 * result must not depend on the call). Static. */
const char *cpu_lora_kernel(void);
/* Makes kern_lora run `name` (avx512, scalar) from now on (NULL: the
 * CPU's choice again), for tests and benchmarks; not while one runs. 0,
 * ERR_UNSUPPORTED when the CPU lacks it, ERR_INVALID for an unknown name. */
int cpu_lora_force(const char *name);

/* Which path the matmul (prefill's linear layers) runs per class, as one
 * line: "f32: onednn (onednn 161, openblas 146 GFLOP/s); bf16: onednn-bf16
 * (round-f32 128, onednn-bf16 938 GFLOP/s), 1 thread, 128x1024x1024,
 * measured in 30 ms", calibrating a class not measured yet; a class
 * SHARDSWAP_MATMUL or cpu_matmul_force names says "(by request)". f32
 * products: onednn or openblas; bf16 mode: round-f32 (x rounded to bf16,
 * the f32 product) or onednn-bf16 (oneDNN's bf16 x bf16 primitive). Valid
 * until this thread's next call. */
const char *cpu_matmul_paths(void);
/* The oneDNN library the matmul runs, as it reports itself at run time:
 * "3.2.0 (commit 04b180b...)" (the headers built against may be another).
 * Valid until this thread's next call. */
const char *cpu_matmul_onednn(void);
/* Makes cpu_matmul run path `name` for its class (onednn, openblas,
 * round-f32, onednn-bf16) for every call (NULL: the measured choices of
 * both classes again), for tests and benchmarks; not while a product runs.
 * 0, or ERR_INVALID for an unknown name (the choice is then unchanged). */
int cpu_matmul_force(const char *name);

#endif
