/* The K-quants' single-row dot products on 512-bit vectors (AVX-512 BW and
 * VNNI): included by qdot_body.h where its includer defines QD_K512
 * (qdot_vnni.c), after the helpers it shares (qd_f16, qd_sum8).
 *
 * Per block of 256: the weights' quants unpacked into four vectors of 64
 * unsigned bytes, each multiplied with its 64 bytes of x in pairs
 * (VPMADDUBSW: no pair leaves 16 bits, at most 2 * 63 * 127) and the pairs
 * times their sub-block's scale summed into 32 bits (VPDPWSSD), so a block
 * is 4 + 4 multiplies and the scales never need a horizontal sum of their
 * own. Eight blocks' 16-lane sums are then reduced together into one lane
 * per block, and those 8 lanes scaled as qdot.h says: each block's integer
 * sums are exact, so the bits are the scalar reference's.
 *
 * Where the quants sit: a Q4_K/Q5_K run of 32 packed bytes holds sub-block
 * 2v in its low nibbles and 2v + 1 in its high ones, so the run broadcast
 * to both halves of a vector, shifted by 0 in the low half and 4 in the
 * high one (one VPSRLVW) and masked, is quants 64v .. 64v + 63 in order,
 * and its x is one load (two loads of x put together cost 11% more a
 * block); a Q6_K vector of 64 low-nibble bytes holds 64 consecutive quants
 * (its top bits are the same 32 bytes of qh shifted by 0/2 or 4/6), so its
 * x is one load too. */

/* 8 f16 `stride` bytes apart, lanes n and above 0 */
QD_INLINE __m256 qd5_f16x8(const char *p, size_t stride, int n)
{
    __m128i h = _mm_cvtsi32_si128(qd_u16(p));
    h = _mm_insert_epi16(h, 1 < n ? qd_u16(p + stride) : 0, 1);
    h = _mm_insert_epi16(h, 2 < n ? qd_u16(p + 2 * stride) : 0, 2);
    h = _mm_insert_epi16(h, 3 < n ? qd_u16(p + 3 * stride) : 0, 3);
    h = _mm_insert_epi16(h, 4 < n ? qd_u16(p + 4 * stride) : 0, 4);
    h = _mm_insert_epi16(h, 5 < n ? qd_u16(p + 5 * stride) : 0, 5);
    h = _mm_insert_epi16(h, 6 < n ? qd_u16(p + 6 * stride) : 0, 6);
    h = _mm_insert_epi16(h, 7 < n ? qd_u16(p + 7 * stride) : 0, 7);
    return _mm256_cvtph_ps(h);
}

/* The f16 d and dmin of n <= 8 Q4_K/Q5_K blocks (bytes 0-1 and 2-3 of
 * each, `stride` bytes apart), lanes n and above 0: one 4-byte insert a
 * block for both, where qd5_f16x8 twice took two 2-byte inserts */
QD_INLINE void qd5_dmin8(const char *p, size_t stride, int n, __m256 *d, __m256 *dmin)
{
    uint32_t u[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        u[i] = 0;
        if (i < n)
            memcpy(&u[i], p + (size_t)i * stride, 4);
    }
    __m128i lo = _mm_cvtsi32_si128((int)u[0]), hi = _mm_cvtsi32_si128((int)u[4]);
    lo = _mm_insert_epi32(lo, (int)u[1], 1);
    lo = _mm_insert_epi32(lo, (int)u[2], 2);
    lo = _mm_insert_epi32(lo, (int)u[3], 3);
    hi = _mm_insert_epi32(hi, (int)u[5], 1);
    hi = _mm_insert_epi32(hi, (int)u[6], 2);
    hi = _mm_insert_epi32(hi, (int)u[7], 3);
    /* 16 floats: d0, dmin0, d1, dmin1, ... (exact, as f16_to_f32) */
    const __m512 f = _mm512_cvtph_ps(_mm256_set_m128i(hi, lo));
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 0, 0, 0, 0, 0, 0, 0, 0);
    *d = _mm512_castps512_ps256(_mm512_permutexvar_ps(even, f));
    *dmin = _mm512_castps512_ps256(_mm512_permutexvar_ps(odd, f));
}

/* x's block scales (Q8_K: f32 at the block's start) of n <= 8 blocks, in
 * a register (8 stores and a wide load back would stall on store
 * forwarding) */
QD_INLINE float qd5_f32(const char *x, int i, int n)
{
    float v = 0.0f;
    if (i < n)
        memcpy(&v, x + (size_t)i * sizeof(struct quant_q8_k), 4);
    return v;
}

QD_INLINE __m256 qd5_dx8(const char *x, int n)
{
    return _mm256_setr_ps(qd5_f32(x, 0, n), qd5_f32(x, 1, n), qd5_f32(x, 2, n), qd5_f32(x, 3, n),
                          qd5_f32(x, 4, n), qd5_f32(x, 5, n), qd5_f32(x, 6, n), qd5_f32(x, 7, n));
}

/* Dword 4 l + k = the sum of s[k]'s four dwords in 128-bit lane l. */
QD_INLINE __m512i qd5_sum4_lanes(const __m512i s[4])
{
    const __m512i u0 =
        _mm512_add_epi32(_mm512_unpacklo_epi32(s[0], s[1]), _mm512_unpackhi_epi32(s[0], s[1]));
    const __m512i u1 =
        _mm512_add_epi32(_mm512_unpacklo_epi32(s[2], s[3]), _mm512_unpackhi_epi32(s[2], s[3]));
    return _mm512_add_epi32(_mm512_unpacklo_epi64(u0, u1), _mm512_unpackhi_epi64(u0, u1));
}

/* lane k = the sum of s[k]'s 16 lanes */
QD_INLINE __m256i qd5_hsum16x8(const __m512i s[8])
{
    /* each 128-bit lane: the partial sums of s0 .. s3, and of s4 .. s7 */
    const __m512i v0 = qd5_sum4_lanes(s), v1 = qd5_sum4_lanes(s + 4);
    /* lanes [v0.0 + v0.2, v0.1 + v0.3, v1.0 + v1.2, v1.1 + v1.3] */
    const __m512i w = _mm512_add_epi32(_mm512_shuffle_i64x2(v0, v1, _MM_SHUFFLE(1, 0, 1, 0)),
                                       _mm512_shuffle_i64x2(v0, v1, _MM_SHUFFLE(3, 2, 3, 2)));
    const __m512i z = _mm512_add_epi32(_mm512_shuffle_i64x2(w, w, _MM_SHUFFLE(3, 1, 2, 0)),
                                       _mm512_shuffle_i64x2(w, w, _MM_SHUFFLE(2, 0, 3, 1)));
    return _mm512_castsi512_si256(z);
}

/* lane k = the sum of v[k]'s 8 lanes */
QD_INLINE __m256i qd5_hsum8x8(const __m256i v[8])
{
    const __m256i a =
        _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    const __m256i b =
        _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20),
                            _mm256_permute2x128_si256(a, b, 0x31));
}

/* The 8 scales and 8 mins of a Q4_K/Q5_K block (its 12 bytes at p, 16
 * read) as 16 words, scales then mins (quant_scale_min): scale and min j <
 * 4 the low six bits of bytes j and j + 4; j >= 4 the nibbles of byte j +
 * 4 with bits 6-7 of bytes j - 4 (scale) and j (min) above them. */
QD_INLINE __m256i qd5_scales_mins(const char *p)
{
    const __m256i q = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)p));
    const char z = -1; /* a zero byte */
    /* a: bytes 0-3, 8-11 | 4-7, 8-11 (the min's nibble shifted down below);
     * b: bits 6-7 of bytes 0-3 | 4-7 under scales and mins 4-7 */
    const __m256i ia = _mm256_setr_epi8(0, z, 1, z, 2, z, 3, z, 8, z, 9, z, 10, z, 11, z, 4, z, 5,
                                        z, 6, z, 7, z, 8, z, 9, z, 10, z, 11, z);
    const __m256i ib = _mm256_setr_epi8(z, z, z, z, z, z, z, z, 0, z, 1, z, 2, z, 3, z, z, z, z, z,
                                        z, z, z, z, 4, z, 5, z, 6, z, 7, z);
    const __m256i shift = _mm256_setr_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4);
    const __m256i low =
        _mm256_setr_epi16(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 15, 15, 15, 15);
    const __m256i a = _mm256_srlv_epi16(_mm256_shuffle_epi8(q, ia), shift);
    const __m256i b = _mm256_srli_epi16(_mm256_shuffle_epi8(q, ib), 2); /* bits 6-7 to 4-5 */
    /* a where low has a bit, b elsewhere (b is 0 under scales 0-3) */
    return _mm256_ternarylogic_epi32(low, a, b, 0xca);
}

#ifdef QD_GFNI_BUILD
/* With QD_GFNI_BUILD (qdot_vnni_near_gfni.c, qdot_vnni_far_gfni.c, built
 * with -mgfni and run only where the CPU has GFNI) the nibbles and Q6_K's
 * top bits are moved and masked by GF2P8AFFINEQB, one instruction where a
 * shift and a mask (Q6_K's high nibbles: two shifts and a mask) took two
 * or three; the same bytes, so the same bits (the matrices: qdot_gf.h). */
#include "backend/cpu/qdot_gf.h"

/* the matrix a in the low 256 bits, b in the high */
QD_INLINE __m512i qd5_gf2(long long a, long long b)
{
    return _mm512_inserti64x4(_mm512_set1_epi64(a), _mm256_set1_epi64x(b), 1);
}
#endif

/* words 0-15 index a, 16-31 index b */
QD_INLINE __m512i qd5_idx2(int a, int b)
{
    return _mm512_inserti64x4(_mm512_set1_epi16((short)a), _mm256_set1_epi16((short)b), 1);
}

/* the constants of qd5_blk_45k */
struct qd5_k45 {
    __m512i lo4, sixteen, bit, sc[4]; /* bit: Q5_K's fifth bits of vector 0 */
    __m512i nib;  /* shifts: the low nibbles in the low half, the high ones above
                   * (with GFNI: the matrices that take them to bits 0-3) */
    __m256i mins; /* each min twice, against x's sums of 16 */
};

QD_INLINE struct qd5_k45 qd5_k45_init(void)
{
    struct qd5_k45 c;
    c.lo4 = _mm512_set1_epi8(15);
    c.sixteen = _mm512_set1_epi8(16);
    c.bit = _mm512_inserti64x4(_mm512_set1_epi8(1), _mm256_set1_epi8(2), 1);
#ifdef QD_GFNI_BUILD
    c.nib = qd5_gf2(qdot_gf_bits(0, 0, 4), qdot_gf_bits(4, 0, 4));
#else
    c.nib = qd5_idx2(0, 4);
#endif
    /* vector v holds sub-blocks 2v and 2v + 1 */
    for (int v = 0; v < 4; v++)
        c.sc[v] = qd5_idx2(2 * v, 2 * v + 1);
    c.mins = _mm256_setr_epi16(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
    return c;
}

/* One Q4_K/Q5_K block: *is its integer sum spread over 16 lanes, *ms its
 * mins times x's sums spread over 8 */
QD_INLINE void qd5_blk_45k(const char *w, const char *x, const bool five, const struct qd5_k45 *c,
                           __m512i *is, __m256i *ms)
{
    const size_t wb = five ? sizeof(struct quant_q5_k) : sizeof(struct quant_q4_k);
    const int8_t *xq = (const int8_t *)x + 4;
    qd_prefetch(w, wb);
    const __m256i sm = qd5_scales_mins(w + 4);
    const __m512i smz = _mm512_castsi256_si512(sm);
    const char *qs = w + (five ? 48 : 16);
    __m512i q[4];
#pragma GCC unroll 4
    for (int v = 0; v < 4; v++) {
        const __m512i b =
            _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(qs + 32 * v)));
#ifdef QD_GFNI_BUILD
        /* one GF2P8AFFINEQB for the shift and the mask */
        q[v] = _mm512_gf2p8affine_epi64_epi8(b, c->nib, 0);
#else
        q[v] = _mm512_and_si512(_mm512_srlv_epi16(b, c->nib), c->lo4);
#endif
    }
    if (five) {
        const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(w + 16)));
        const __m512i b2 = _mm512_slli_epi16(c->bit, 2);
        const __m512i bits[4] = {c->bit, b2, _mm512_slli_epi16(c->bit, 4),
                                 _mm512_slli_epi16(b2, 4)};
#pragma GCC unroll 4
        for (int v = 0; v < 4; v++)
            q[v] = _mm512_mask_add_epi8(q[v], _mm512_test_epi8_mask(qh, bits[v]), q[v], c->sixteen);
    }
    __m512i acc = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int v = 0; v < 4; v++)
        acc = _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(q[v], _mm512_loadu_si512(xq + 64 * v)),
                                  _mm512_permutexvar_epi16(c->sc[v], smz));
    *is = acc;
    *ms = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(x + 4 + QUANT_QKK)),
                            _mm256_permutexvar_epi16(c->mins, sm));
}

/* n <= 8 blocks' steps (qdot.h's, lane k for block k: a missing block
 * adds 0 * 0) */
QD_INLINE __m256 qd5_group_45k(__m256 acc, const char *w, const char *x, const int n,
                               const bool five, const struct qd5_k45 *c)
{
    const size_t wb = five ? sizeof(struct quant_q5_k) : sizeof(struct quant_q4_k);
    const size_t xb = sizeof(struct quant_q8_k);
    __m512i is[8];
    __m256i ms[8];
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) {
        if (k < n) {
            qd5_blk_45k(w + k * wb, x + k * xb, five, c, &is[k], &ms[k]);
        } else {
            is[k] = _mm512_setzero_si512();
            ms[k] = _mm256_setzero_si256();
        }
    }
    const __m256 dx = qd5_dx8(x, n);
    __m256 dw, dminw;
    qd5_dmin8(w, wb, n, &dw, &dminw);
    const __m256 d = _mm256_mul_ps(dw, dx);
    const __m256 dm = _mm256_sub_ps(_mm256_setzero_ps(), _mm256_mul_ps(dminw, dx));
    /* the mins' sums of blocks k and k + 4 in one vector, reduced as the
     * types of 32 reduce their pairs (integer adds: the same sums as
     * qd5_hsum8x8's VPHADDD tree, 30 instructions a group where it took 37) */
    __m512i mp[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++)
        mp[k] = _mm512_inserti64x4(_mm512_castsi256_si512(ms[k]), ms[k + 4], 1);
    const __m512i mv = qd5_sum4_lanes(mp);
    const __m512i mr = _mm512_add_epi32(_mm512_shuffle_i64x2(mv, mv, _MM_SHUFFLE(2, 0, 2, 0)),
                                        _mm512_shuffle_i64x2(mv, mv, _MM_SHUFFLE(3, 1, 3, 1)));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(qd5_hsum16x8(is)), acc);
    return _mm256_fmadd_ps(dm, _mm256_cvtepi32_ps(_mm512_castsi512_si256(mr)), acc);
}

/* whole groups of 8 blocks straight, then the rest */
QD_INLINE float qd5_q45_k_body(const char *w, const char *x, int nb, const bool five)
{
    const size_t wb = five ? sizeof(struct quant_q5_k) : sizeof(struct quant_q4_k);
    const size_t xb = sizeof(struct quant_q8_k);
    const struct qd5_k45 c = qd5_k45_init();
    __m256 acc = _mm256_setzero_ps();
    int b0 = 0;
    for (; b0 + 8 <= nb; b0 += 8)
        acc = qd5_group_45k(acc, w + (size_t)b0 * wb, x + (size_t)b0 * xb, 8, five, &c);
    if (b0 < nb)
        acc = qd5_group_45k(acc, w + (size_t)b0 * wb, x + (size_t)b0 * xb, nb - b0, five, &c);
    return qd_sum8(acc);
}

/* word-index vector: 128-bit lane i of Q6_K vector v holds sub-block 4v + i */
QD_INLINE __m512i qd5_idx4(int v)
{
    const __m256i lo =
        _mm256_set_m128i(_mm_set1_epi16((short)(4 * v + 1)), _mm_set1_epi16((short)(4 * v)));
    const __m256i hi =
        _mm256_set_m128i(_mm_set1_epi16((short)(4 * v + 3)), _mm_set1_epi16((short)(4 * v + 2)));
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

struct qd5_k6 {
    __m512i lo4, top, up, down, sc[4];
#ifdef QD_GFNI_BUILD
    __m512i hi4; /* the high nibbles to bits 0-3 */
#endif
};

QD_INLINE struct qd5_k6 qd5_k6_init(void)
{
    struct qd5_k6 c;
    c.lo4 = _mm512_set1_epi8(15);
    c.top = _mm512_set1_epi8(0x30);
    /* qh's bits 0-1 and 2-3 up to 4-5 (low nibbles), 4-5 and 6-7 down to them (high) */
#ifdef QD_GFNI_BUILD
    /* the same moves as GF2P8AFFINEQB matrices, each clearing the rest */
    c.up = qd5_gf2(qdot_gf_bits(0, 4, 2), qdot_gf_bits(2, 4, 2));
    c.down = qd5_gf2(qdot_gf_bits(4, 4, 2), qdot_gf_bits(6, 4, 2));
    c.hi4 = _mm512_set1_epi64(qdot_gf_bits(4, 0, 4));
#else
    c.up = qd5_idx2(4, 2);
    c.down = qd5_idx2(0, 2);
#endif
    for (int v = 0; v < 4; v++)
        c.sc[v] = qd5_idx4(v);
    return c;
}

/* One Q6_K block's integer sum, spread over 16 lanes */
QD_INLINE __m512i qd5_blk_6k(const char *w, const char *x, const struct qd5_k6 *c)
{
    const int8_t *xq = (const int8_t *)x + 4;
    qd_prefetch(w, sizeof(struct quant_q6_k));
    const __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(w + 192)));
    const __m512i scz = _mm512_castsi256_si512(sc);
    const __m512i l0 = _mm512_loadu_si512(w), l1 = _mm512_loadu_si512(w + 64);
    const __m512i h0 = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(w + 128)));
    const __m512i h1 = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(w + 160)));
#ifdef QD_GFNI_BUILD
    /* quants 64 v .. 64 v + 63: nibbles | top bits, each moved into place
     * and masked by one GF2P8AFFINEQB (0xea: (a & b) | c) */
    const __m512i q[4] = {
        _mm512_ternarylogic_epi32(l0, c->lo4, _mm512_gf2p8affine_epi64_epi8(h0, c->up, 0), 0xea),
        _mm512_or_si512(_mm512_gf2p8affine_epi64_epi8(l0, c->hi4, 0),
                        _mm512_gf2p8affine_epi64_epi8(h0, c->down, 0)),
        _mm512_ternarylogic_epi32(l1, c->lo4, _mm512_gf2p8affine_epi64_epi8(h1, c->up, 0), 0xea),
        _mm512_or_si512(_mm512_gf2p8affine_epi64_epi8(l1, c->hi4, 0),
                        _mm512_gf2p8affine_epi64_epi8(h1, c->down, 0))};
#else
    /* quants 64 v .. 64 v + 63: nibbles | top bits (0xf8: a | (b & c)) */
    const __m512i q[4] = {
        _mm512_ternarylogic_epi32(_mm512_and_si512(l0, c->lo4), _mm512_sllv_epi16(h0, c->up),
                                  c->top, 0xf8),
        _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(l0, 4), c->lo4),
                                  _mm512_srlv_epi16(h0, c->down), c->top, 0xf8),
        _mm512_ternarylogic_epi32(_mm512_and_si512(l1, c->lo4), _mm512_sllv_epi16(h1, c->up),
                                  c->top, 0xf8),
        _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(l1, 4), c->lo4),
                                  _mm512_srlv_epi16(h1, c->down), c->top, 0xf8)};
#endif
    __m512i acc = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int v = 0; v < 4; v++)
        acc = _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(q[v], _mm512_loadu_si512(xq + 64 * v)),
                                  _mm512_permutexvar_epi16(c->sc[v], scz));
    /* the quants' bias of 32: 32 x the scales times x's sums of 16 */
    const __m256i off =
        _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(xq + QUANT_QKK)), sc);
    return _mm512_sub_epi32(acc, _mm512_zextsi256_si512(_mm256_slli_epi32(off, 5)));
}

QD_INLINE __m256 qd5_group_6k(__m256 acc, const char *w, const char *x, const int n,
                              const struct qd5_k6 *c)
{
    const size_t wb = sizeof(struct quant_q6_k), xb = sizeof(struct quant_q8_k);
    __m512i is[8];
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++)
        is[k] = k < n ? qd5_blk_6k(w + k * wb, x + k * xb, c) : _mm512_setzero_si512();
    /* qdot.h's first step; its second adds -(0 * dx) * 0, which leaves a
     * partial as it was */
    const __m256 d = _mm256_mul_ps(qd5_f16x8(w + 208, wb, n), qd5_dx8(x, n));
    return _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(qd5_hsum16x8(is)), acc);
}

QD_INLINE float qd5_q6_k_body(const char *w, const char *x, int nb)
{
    const size_t wb = sizeof(struct quant_q6_k), xb = sizeof(struct quant_q8_k);
    const struct qd5_k6 c = qd5_k6_init();
    __m256 acc = _mm256_setzero_ps();
    int b0 = 0;
    for (; b0 + 8 <= nb; b0 += 8)
        acc = qd5_group_6k(acc, w + (size_t)b0 * wb, x + (size_t)b0 * xb, 8, &c);
    if (b0 < nb)
        acc = qd5_group_6k(acc, w + (size_t)b0 * wb, x + (size_t)b0 * xb, nb - b0, &c);
    return qd_sum8(acc);
}

/* Q4_0 against Q8_0 x, 8 blocks a step: blocks k and k + 4 in one vector
 * (each block's 16 packed bytes broadcast to two 128-bit lanes, shifted by
 * 0 and 4 and masked: its quants 0-31 in order, so its x is one run of
 * 32), the unsigned quants times x by VPDPBUSD less 8 times x's sums (the
 * same exact sums as |w| against x with w's sign), the four vectors'
 * 16-lane sums reduced into one lane a block in block order. The rest of
 * the row is qd_q4_0's. */
QD_INLINE float qd5_q4_0_body(const char *w, const char *x, int nb)
{
    const size_t wb = sizeof(struct quant_q4_0), xb = sizeof(struct quant_q8_0);
    const __m512i lo4 = _mm512_set1_epi8(15), eight = _mm512_set1_epi8(8);
    const long long f = 0x0004000400040004LL; /* words shifted by 4 */
    const __m512i nib = _mm512_set_epi64(f, f, 0, 0, f, f, 0, 0);
    __m256 acc = _mm256_setzero_ps();
    int b = 0;
    for (; b + 8 <= nb; b += 8) {
        const char *w8 = w + (size_t)b * wb, *x8 = x + (size_t)b * xb;
        qd_prefetch(w8, 8 * wb);
        __m512i t[4];
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            __m512i n = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(w8 + i * wb + 2)));
            n = _mm512_mask_broadcast_i32x4(
                n, 0xff00, _mm_loadu_si128((const __m128i *)(w8 + (i + 4) * wb + 2)));
            const __m512i q = _mm512_and_si512(_mm512_srlv_epi16(n, nib), lo4);
            const __m512i xv = _mm512_inserti64x4(
                _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(x8 + i * xb + 2))),
                _mm256_loadu_si256((const __m256i *)(x8 + (i + 4) * xb + 2)), 1);
            t[i] = _mm512_sub_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), q, xv),
                                    _mm512_dpbusd_epi32(_mm512_setzero_si512(), eight, xv));
        }
        /* per 128-bit lane the sums of t0 .. t3, then the lanes of each
         * half added: blocks 0-3 (low halves), 4-7 (high) */
        const __m512i v = qd5_sum4_lanes(t);
        const __m512i r = _mm512_add_epi32(_mm512_shuffle_i64x2(v, v, _MM_SHUFFLE(2, 0, 2, 0)),
                                           _mm512_shuffle_i64x2(v, v, _MM_SHUFFLE(3, 1, 3, 1)));
        const __m256 d = _mm256_mul_ps(qd_f16x8_span(w8, wb), qd_f16x8_span(x8, xb));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(_mm512_castsi512_si256(r)), acc);
    }
    if (b < nb) {
        const int n = nb - b;
        const char *w8 = w + (size_t)b * wb, *x8 = x + (size_t)b * xb;
        __m256i v[8];
        float dw[8] = {0}, dx[8] = {0};
        for (int k = 0; k < 8; k++) {
            v[k] = k < n ? qd_q4_0_blk(w8, x8, k) : _mm256_setzero_si256();
            if (k < n) {
                dw[k] = qd_f16(w8 + (size_t)k * wb);
                dx[k] = qd_f16(x8 + (size_t)k * xb);
            }
        }
        const __m256 d = _mm256_mul_ps(_mm256_loadu_ps(dw), _mm256_loadu_ps(dx));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(qd_hsum8(v)), acc);
    }
    return qd_sum8(acc);
}

/* One call per row and type (GCC unrolls the 8 blocks of a step only in a
 * function of its own, not inlined into the rows' loops); unused where the
 * includer defines no rows function (qdot_vnni_far.c) */
static __attribute__((noinline, unused)) float qd5_q4_k(const char *w, const char *x, int nb)
{
    return qd5_q45_k_body(w, x, nb, false);
}

static __attribute__((noinline, unused)) float qd5_q5_k(const char *w, const char *x, int nb)
{
    return qd5_q45_k_body(w, x, nb, true);
}

static __attribute__((noinline, unused)) float qd5_q6_k(const char *w, const char *x, int nb)
{
    return qd5_q6_k_body(w, x, nb);
}

static __attribute__((noinline, unused)) float qd5_q4_0(const char *w, const char *x, int nb)
{
    return qd5_q4_0_body(w, x, nb);
}

#define qd5_q45_k(w, x, nb, five) ((five) ? qd5_q5_k(w, x, nb) : qd5_q4_k(w, x, nb))

#ifdef QD_XR
#include "backend/cpu/qdot_xr.h"
#endif
