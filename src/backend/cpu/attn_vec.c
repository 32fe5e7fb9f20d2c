/* attn_vec.h's choice of width: attn_avx512.c's products where the CPU has
 * AVX-512 F, else attn_avx2.c's where it has AVX2 and FMA. This file is
 * built for the baseline instruction set, so the test runs anywhere. */
#include "backend/cpu/attn_vec.h"

static bool have_avx512(void)
{
#if defined(__x86_64__)
    return __builtin_cpu_supports("avx512f");
#else
    return false;
#endif
}

bool attn_vec_have(void)
{
#if defined(__x86_64__)
    return have_avx512() || (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"));
#else
    return false;
#endif
}

void attn_scores(float *s, size_t lds, const float *q, size_t ldq, int rows, int head_dim,
                 const float *k, const float *v, int n)
{
    (have_avx512() ? attn_scores_avx512 : attn_scores_avx2)(s, lds, q, ldq, rows, head_dim, k, v,
                                                            n);
}

void attn_values(float *out, size_t ldo, const float *p, size_t ldp, int rows, int head_dim,
                 const float *v, int n, bool add)
{
    (have_avx512() ? attn_values_avx512 : attn_values_avx2)(out, ldo, p, ldp, rows, head_dim, v, n,
                                                            add);
}
