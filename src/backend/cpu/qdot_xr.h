/* The types of 32 (Q8_0, Q4_0, Q5_0, Q5_1) on 512-bit vectors against x
 * laid out once per input row (qd_xr), for `vnni-near` (qdot_vnni_near.c): included by qdot_k512.h
 * where its includer defines QD_XR.
 *
 * `vnni`'s qd_q8_0 spent about 10 cycles a 34-byte block on an Intel Xeon
 * (KVM; AVX-512 on ports 0 and 5), most of it in VPSIGNB, the horizontal
 * sums and the scales' inserts; its Q5_0 the same plus the fifth bits by
 * VPSHUFB and VPCMPEQB, its Q5_1 a horizontal sum per block and no
 * prefetch (0.14 of the read limit). Here a run of 8 blocks is four 512-bit
 * products, blocks k and k + 4 in the halves of one vector: the weights as
 * unsigned bytes (Q8_0: plus 128, one XOR; Q4_0: its nibbles; Q5_0/Q5_1:
 * the nibbles plus 16 where the block's 32 bits of qh, moved into a mask
 * register, have a bit: one masked VPADDB) against x by VPDPBUSD, whose sum
 * exceeds the exact one by 128 (Q8_0), 8 (Q4_0) or 16 (Q5_0) times x's sum
 * over the block, subtracted once the four vectors are reduced to one lane
 * a block (Q5_1's quants are unsigned as they are: x's sum is its min's
 * operand instead). x's sums, its scales in f32 and its quants in the
 * vectors' order are laid out once per input row (qd_xr_fill, qdot_body.h,
 * which also has the 256-bit runs and the rows' loop): by qlinear.c once
 * per call, else once per task. A row's last run of fewer than 8 blocks (a
 * row of 896 columns is 3 runs and 4 blocks) is the same code with its loads
 * masked to the blocks there, x zero past them. With the weights in L2
 * (2026-12-05, that Xeon, one thread): Q8_0 29 -> 41 GB/s, Q4_0 15 -> 21
 * GB/s. Each block's integer sum is exact and the float steps are qdot.h's
 * in its order, so the bits are the scalar reference's. */

/* lane k = the sum of block k's 16 lanes, t[i] holding blocks i and i + 4 */
QD_INLINE __m256i qd5_hsum_pairs(const __m512i t[4])
{
    const __m512i v = qd5_sum4_lanes(t);
    const __m512i r = _mm512_add_epi32(_mm512_shuffle_i64x2(v, v, _MM_SHUFFLE(2, 0, 2, 0)),
                                       _mm512_shuffle_i64x2(v, v, _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_castsi512_si256(r);
}

/* The 16 bytes at p, zeros where !have (nothing read then); FULL: have is
 * true, a plain load */
QD_INLINE __m128i qd5_load16(const char *p, bool have, const bool full)
{
    return full ? _mm_loadu_si128((const __m128i *)p) : _mm_maskz_loadu_epi8(have ? 0xffff : 0, p);
}

QD_INLINE __m256i qd5_load32(const char *p, bool have, const bool full)
{
    return full ? _mm256_loadu_si256((const __m256i *)p)
                : _mm256_maskz_loadu_epi8(have ? 0xffffffffu : 0, p);
}

QD_INLINE uint32_t qd5_u32(const char *p, bool have)
{
    uint32_t v = 0;
    if (have)
        memcpy(&v, p, 4);
    return v;
}

/* Blocks k and k + 4 of a run of T weights (n of its blocks there) as
 * unsigned bytes: Q8_0 plus 128, the others' quants as stored (Q4_0 0-15,
 * Q5_0/Q5_1 0-31), quants 0-31 of each in order */
QD_INLINE __m512i qd5_wpair(const char *w8, int k, const enum dtype T, const int n)
{
    const size_t wb = qd_xr_wb(T), qs = qd_xr_qs_at(T);
    const bool full = n == 8, h0 = k < n, h1 = k + 4 < n;
    const char *b0 = w8 + (size_t)k * wb, *b1 = w8 + (size_t)(k + 4) * wb;
    if (T == DTYPE_Q8_0) {
        const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(qd5_load32(b0 + qs, h0, full)),
                                             qd5_load32(b1 + qs, h1, full), 1);
        return _mm512_xor_si512(v, _mm512_set1_epi8((char)0x80));
    }
    /* each block's 16 packed bytes in two 128-bit lanes, shifted by 0 and 4 */
    const long long f = 0x0004000400040004LL; /* words shifted by 4 */
    __m512i v = _mm512_broadcast_i32x4(qd5_load16(b0 + qs, h0, full));
    v = _mm512_mask_broadcast_i32x4(v, 0xff00, qd5_load16(b1 + qs, h1, full));
    __m512i q = _mm512_and_si512(_mm512_srlv_epi16(v, _mm512_set_epi64(f, f, 0, 0, f, f, 0, 0)),
                                 _mm512_set1_epi8(15));
    if (T == DTYPE_Q5_0 || T == DTYPE_Q5_1) {
        /* byte j of the vector is quant j % 32 of its block, whose fifth
         * bit is bit j % 32 of the block's qh */
        const uint64_t h = (uint64_t)qd5_u32(b1 + qs - 4, h1) << 32 | qd5_u32(b0 + qs - 4, h0);
        q = _mm512_mask_add_epi8(q, _cvtu64_mask64(h), q, _mm512_set1_epi8(16));
    }
    return q;
}

/* The f16 at p + k stride in lanes k < 8 and, TWO, at p + k stride + 2 in
 * lanes 8 + k; lanes of blocks k >= n zero. Masked loads of the words up
 * to the last one used (nothing past it is read), gathered by VPERMT2W:
 * a few instructions where inserts took 16. */
QD_INLINE __m512 qd5_f16x16(const char *p, const size_t stride, const int n, const bool two)
{
    const int st = (int)stride / 2, words = (n - 1) * st + (two ? 2 : 1);
    __m512i z[4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        const int c = words - 32 * j < 0 ? 0 : words - 32 * j > 32 ? 32 : words - 32 * j;
        z[j] = c == 0    ? _mm512_setzero_si512()
               : c == 32 ? _mm512_loadu_si512(p + 64 * j)
                         : _mm512_maskz_loadu_epi16((1u << c) - 1u, p + 64 * j);
    }
    /* word k st (lanes 8 + k: k st + 1), lanes of missing blocks zero */
    const __m256i k8 = _mm256_setr_epi16(0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i one = _mm256_setr_epi16(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    const __m512i idx = _mm512_zextsi256_si512(
        _mm256_add_epi16(_mm256_mullo_epi16(k8, _mm256_set1_epi16((short)st)), one));
    const __mmask32 have = (__mmask32)(((1u << n) - 1u) * 0x101u);
    /* words 0-63 from z0:z1, 64-127 from z2:z3 (the index's bit 6 dropped) */
    __m512i d = _mm512_maskz_permutex2var_epi16(have, z[0], idx, z[1]);
    if (words > 64) {
        const __m512i hi = _mm512_maskz_permutex2var_epi16(have, z[2], idx, z[3]);
        d = _mm512_mask_blend_epi16(_mm512_cmpge_epi16_mask(idx, _mm512_set1_epi16(64)), d, hi);
    }
    return two ? _mm512_cvtph_ps(_mm512_castsi512_si256(d))
               : _mm512_castps256_ps512(_mm256_cvtph_ps(_mm512_castsi512_si128(d)));
}

/* qdot.h's steps for the run of 8 blocks from block b of a T row (n of
 * them there, the rest of the lanes adding 0 x 0), w8 its first */
QD_INLINE __m256 qd5_run(__m256 acc, const char *w8, const struct qd_xr *r, int b,
                         const enum dtype T, const int n)
{
    const size_t wb = qd_xr_wb(T);
    const int8_t *xq = r->q + (size_t)b * 32;
#ifdef QD_PREFETCH_Q5
    /* the includer's distances for Q5_0/Q5_1, whose runs take the most
     * instructions of the four (qdot_vnni_near.c) */
    if (T == DTYPE_Q5_0 || T == DTYPE_Q5_1)
        qd_prefetch_at(w8, (size_t)n * wb, QD_PREFETCH_Q5, 0);
    else
#endif
        qd_prefetch(w8, (size_t)n * wb);
    __m512i t[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++)
        t[k] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), qd5_wpair(w8, k, T, n),
                                   _mm512_load_si512(xq + 64 * k));
    const __m256i s = _mm256_loadu_si256((const __m256i *)(r->s + b));
    __m256i is = qd5_hsum_pairs(t);
    if (T != DTYPE_Q5_1) /* the bias of the unsigned weights */
        is = _mm256_sub_epi32(is, _mm256_slli_epi32(s, T == DTYPE_Q8_0   ? 7
                                                       : T == DTYPE_Q4_0 ? 3
                                                                         : 4));
    const __m256 dx = _mm256_loadu_ps(r->d + b);
    const __m512 dm = qd5_f16x16(w8, wb, n, T == DTYPE_Q5_1);
    acc =
        _mm256_fmadd_ps(_mm256_mul_ps(_mm512_castps512_ps256(dm), dx), _mm256_cvtepi32_ps(is), acc);
    if (T == DTYPE_Q5_1) {
        /* qdot.h's -(dmin dx) with dmin = -m: m dx exactly (negation is
         * exact and rounding symmetric) */
        const __m256 m = _mm512_extractf32x8_ps(dm, 1);
        acc = _mm256_fmadd_ps(_mm256_mul_ps(m, dx), _mm256_cvtepi32_ps(s), acc);
    }
    return acc;
}

#define QD_XR_RUN qd5_run
