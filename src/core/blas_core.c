#include "core/blas_core.h"

#include <cblas.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define MARKER "SHARDSWAP_BLAS_CORE"

/* OpenBLAS's x86 core names by the vector ISA their kernels use: 3 AVX-512,
 * 2 AVX2, 1 AVX, 0 anything older. Names not listed (a newer OpenBLAS's
 * cores, other architectures) rank as good enough: never downgrade. */
static int core_rank(const char *name)
{
    static const struct {
        const char *name;
        int rank;
    } ranks[] = {
        {"SkylakeX", 3},   {"Cooperlake", 3},  {"SapphireRapids", 3}, {"Haswell", 2},
        {"Zen", 2},        {"Excavator", 2},   {"Sandybridge", 1},    {"Bulldozer", 1},
        {"Piledriver", 1}, {"Steamroller", 1}, {"Prescott", 0},       {"Katmai", 0},
        {"Coppermine", 0}, {"Northwood", 0},   {"Banias", 0},         {"Core2", 0},
        {"Penryn", 0},     {"Dunnington", 0},  {"Nehalem", 0},        {"Atom", 0},
        {"Athlon", 0},     {"Opteron", 0},     {"Opteron(SSE3)", 0},  {"Barcelona", 0},
        {"Nano", 0},       {"Bobcat", 0},      {"Unknown", 0},
    };
    for (size_t i = 0; i < sizeof(ranks) / sizeof(ranks[0]); i++)
        if (strcasecmp(name, ranks[i].name) == 0)
            return ranks[i].rank;
    return 3;
}

const char *blas_core_best(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    bool amd = __builtin_cpu_is("amd");
    /* Zen's AVX-512 gains little over its AVX2 kernels: Haswell/Zen are fine */
    if (!amd && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return "Haswell";
    if (__builtin_cpu_supports("avx"))
        return "Sandybridge";
#endif
    return NULL;
}

const char *blas_core_name(void)
{
    const char *n = openblas_get_corename();
    return n ? n : "unknown";
}

void blas_core_check(char **argv)
{
    const char *best = blas_core_best();
    const char *now = blas_core_name();
    const char *user = getenv("OPENBLAS_CORETYPE");
    const char *ours = getenv(MARKER);
    if (user && ours && strcmp(user, ours) == 0) {
        /* set by us (this process re-executed, or a parent did it) */
        if (strcasecmp(now, user) != 0)
            fprintf(stderr,
                    "shardswap: OpenBLAS did not take OPENBLAS_CORETYPE=%s (it runs %s kernels); "
                    "matmuls may be slower than this CPU allows\n",
                    user, now);
        return;
    }
    if (!best || core_rank(now) >= core_rank(best))
        return; /* OpenBLAS knows this CPU (or there is nothing better) */
    if (user) {
        fprintf(stderr,
                "shardswap: OPENBLAS_CORETYPE=%s from the environment kept: OpenBLAS runs %s "
                "kernels, this CPU could run %s\n",
                user, now, best);
        return;
    }
    if (setenv("OPENBLAS_CORETYPE", best, 1) != 0 || setenv(MARKER, best, 1) != 0) {
        fprintf(stderr,
                "shardswap: cannot set OPENBLAS_CORETYPE=%s: %s; OpenBLAS runs %s kernels\n", best,
                strerror(errno), now);
        return;
    }
    execv("/proc/self/exe", argv);
    int e = errno;
    unsetenv("OPENBLAS_CORETYPE"); /* this process keeps its old core: say so truthfully */
    unsetenv(MARKER);
    fprintf(stderr,
            "shardswap: OpenBLAS does not know this CPU and runs %s kernels; re-executing with "
            "OPENBLAS_CORETYPE=%s failed (%s): set it yourself for faster matmuls\n",
            now, best, strerror(e));
}
