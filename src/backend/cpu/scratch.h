/* Scratch buffers of the CPU kernels, one set per thread: kept and grown,
 * so a kernel allocates nothing once warm, and freed when the thread exits.
 * Internal to backend/cpu/. Each user has its own slot, so one kernel's
 * buffer is never another's. */
#ifndef SHARDSWAP_BACKEND_CPU_SCRATCH_H
#define SHARDSWAP_BACKEND_CPU_SCRATCH_H

#include <stddef.h>

enum cpu_scratch_slot {
    CPU_SCRATCH_ROUND,      /* cpu_round_bf16: x rounded to bf16 */
    CPU_SCRATCH_GEMV_X,     /* gemv: x padded to its row stride (and in bf16) */
    CPU_SCRATCH_MM_BLOCK,   /* matmul: a block of weights converted */
    CPU_SCRATCH_MM_XB,      /* matmul: x in bf16 */
    CPU_SCRATCH_MM_Y,       /* matmul: a task's output block */
    CPU_SCRATCH_MM_PAD,     /* matmul: the primitive's scratchpad */
    CPU_SCRATCH_MM_ACC,     /* matmul on AMX: a task's partial sums */
    CPU_SCRATCH_ATTN,       /* attention: a task's scores */
    CPU_SCRATCH_Q_X,        /* qlinear: x quantized to Q8_0 / Q8_K blocks */
    CPU_SCRATCH_Q_DEQ,      /* qlinear: a block of weight rows dequantized */
    CPU_SCRATCH_Q_XR,       /* qlinear's vnni-near: a row of x laid out (qdot_xr.h) */
    CPU_SCRATCH_Q_ROW,      /* qlinear: a packed weight row written back (cpu_qlinear_row) */
    CPU_SCRATCH_LORA_X,     /* lora: x rounded to bf16 */
    CPU_SCRATCH_LORA_TASKS, /* lora: each segment's first task */
    CPU_SCRATCH_CT_DEQ,     /* ctlinear: a block of weight rows dequantized */
    CPU_SCRATCH_CT_XB,      /* ctlinear: x in bf16 */
    CPU_SCRATCH_SLOTS
};

/* The calling thread's buffer of slot, at least bytes long and 64-byte
 * aligned; its contents are not kept when it grows. NULL when it cannot
 * grow (the old buffer stays). */
void *cpu_scratch(enum cpu_scratch_slot slot, size_t bytes);

#endif
