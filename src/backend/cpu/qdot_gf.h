/* GF2P8AFFINEQB's bit-moving matrices, for the quantized kernels' builds
 * with GFNI (qdot_k512.h's, qdot_x16.c's): the scalar part, usable in any
 * translation unit. Internal to backend/cpu/. */
#ifndef SHARDSWAP_BACKEND_CPU_QDOT_GF_H
#define SHARDSWAP_BACKEND_CPU_QDOT_GF_H

/* The matrix (one per 64-bit lane) that moves each byte's bits lo .. lo +
 * n - 1 (bits past 7: none) to bits at .. at + n - 1 and clears the rest:
 * output bit i is the parity of the matrix's byte 7 - i with the input, so
 * byte 7 - (at + k) holds bit lo + k */
static inline long long qdot_gf_bits(int lo, int at, int n)
{
    unsigned long long m = 0;
    for (int k = 0; k < n; k++)
        m |= (unsigned long long)(1u << (lo + k)) << (8 * (7 - (at + k)));
    return (long long)m;
}

#endif
