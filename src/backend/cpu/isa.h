/* What instruction sets this CPU runs, as the CPU kernels need them: one
 * probe, run once per process, for every chooser (the GEMV, the compressed-tensors dots, the LoRA
 * update), so they agree on what "avx2" and "avx512" mean. Internal to
 * backend/cpu/. */
#ifndef SHARDSWAP_BACKEND_CPU_ISA_H
#define SHARDSWAP_BACKEND_CPU_ISA_H

#include <stdbool.h>

bool cpu_isa_avx2(void);       /* AVX2, FMA and F16C */
bool cpu_isa_avx512(void);     /* cpu_isa_avx2, AVX-512 F, BW and VL */
bool cpu_isa_avx512bf16(void); /* cpu_isa_avx512 and AVX512-BF16 */

#endif
