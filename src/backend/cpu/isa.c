#include "backend/cpu/isa.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

/* F16C from CPUID leaf 1 (ECX bit 29): clang does not know "f16c" as a
 * __builtin_cpu_supports name */
static bool has_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}

bool cpu_isa_avx2(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
}

bool cpu_isa_avx512(void)
{
    __builtin_cpu_init();
    return cpu_isa_avx2() && __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
}

bool cpu_isa_avx512bf16(void)
{
    return cpu_isa_avx512() && __builtin_cpu_supports("avx512bf16");
}
#else
bool cpu_isa_avx2(void)
{
    return false;
}

bool cpu_isa_avx512(void)
{
    return false;
}

bool cpu_isa_avx512bf16(void)
{
    return false;
}
#endif
