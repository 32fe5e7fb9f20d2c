#include "backend/cpu/isa.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <pthread.h>

/* What the CPU has, probed once per process: CPUID traps to the hypervisor
 * on virtual machines, so a chooser asking per call pays for it each time. */
static struct {
    bool avx2, avx512, avx512bf16;
} isa;
static pthread_once_t isa_once = PTHREAD_ONCE_INIT;

static void isa_probe(void)
{
    unsigned a, b, c, d;
    /* F16C from CPUID leaf 1 (ECX bit 29): clang does not know "f16c" as a
     * __builtin_cpu_supports name */
    bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
    __builtin_cpu_init();
    isa.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
    isa.avx512 = isa.avx2 && __builtin_cpu_supports("avx512f") &&
                 __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
    isa.avx512bf16 = isa.avx512 && __builtin_cpu_supports("avx512bf16");
}

bool cpu_isa_avx2(void)
{
    pthread_once(&isa_once, isa_probe);
    return isa.avx2;
}

bool cpu_isa_avx512(void)
{
    pthread_once(&isa_once, isa_probe);
    return isa.avx512;
}

bool cpu_isa_avx512bf16(void)
{
    pthread_once(&isa_once, isa_probe);
    return isa.avx512bf16;
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
