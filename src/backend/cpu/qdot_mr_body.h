/* The multi-row quantized kernel with a weight row's blocks in the lanes
 * (qdot.h's qdot_mr_vnni), for a decode batch of a few input rows: included
 * by qdot_vnni.c after qdot_body.h (AVX512-BW, -VL and -VNNI).
 *
 * A 512-bit vector holds two weight rows' runs of 8 blocks, one 32-bit lane
 * each: lane 8 h + k is block k of row h, and one vector per quad of the
 * blocks (quad j: elements 4 j .. 4 j + 3 of every block). Each run is
 * unpacked once (an 8 x 8 transpose of 32-bit words, the nibbles split in
 * the transposed form), and then every input row multiplies it: one VPDPBUSD
 * per quad adds that quad of all 16 blocks at once, each lane summing its
 * own block, so a block's integer sum never needs a horizontal sum; the
 * sub-block scales multiply a lane each (VPMULLD), the mins and Q6_K's bias
 * come from x's sums in pairs (VPDPWSSD). x is laid out to match once per
 * call (qdot_pack_x_mr: the same transpose, its 256 bits twice, for both
 * rows). The lanes are then the blocks' lanes of qdot.h's partial sums (block
 * b into b % 8), so the f32 steps are the single-row kernels' in the same
 * order: the same bits. A run short of 8 blocks, or a missing second row,
 * is zeros, which add 0 x 0 to a partial. */

/* vectors of one unpacked run (a pair of rows, 8 blocks), in the scratch:
 * w[64] the quads; sc[16] the sub-block scales; pr[8] pairs of words
 * against x's pairs of sums (Q4_K/Q5_K: mins, Q6_K: scales); d, dmin; corr */
#define QMR_W 0
#define QMR_SC 64
#define QMR_PR 80
#define QMR_D 88
#define QMR_DMIN 89
#define QMR_CORR 90
#define QMR_VECS 91

/* 16 lanes of 32 bits: dword j (from `off`, `bytes` = 16 or 32 read, all
 * inside the block) of block k of rows a (lanes 0-7) and b (8-15, b may be
 * NULL) in t[j], blocks n.. zero. (Plain loads: masked ones ran 6x slower
 * from memory.) */
QD_INLINE __m256i qmr_load(const char *p, int bytes)
{
    return bytes == 32 ? _mm256_loadu_si256((const __m256i *)p)
                       : _mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)p));
}

QD_INLINE void qmr_transpose(const char *a, const char *b, size_t bb, int n, int off, int bytes,
                             __m512i t[8])
{
    __m512i r[8];
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) {
        const __m256i lo =
            k < n ? qmr_load(a + (size_t)k * bb + off, bytes) : _mm256_setzero_si256();
        const __m256i hi =
            k < n && b ? qmr_load(b + (size_t)k * bb + off, bytes) : _mm256_setzero_si256();
        r[k] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    }
    __m512i u[8], v[8];
#pragma GCC unroll 4
    for (int k = 0; k < 8; k += 2) {
        u[k] = _mm512_unpacklo_epi32(r[k], r[k + 1]);
        u[k + 1] = _mm512_unpackhi_epi32(r[k], r[k + 1]);
    }
    /* v[c] (c < 4): dword c of each 128-bit lane's rows 0-3; v[c + 4]: rows 4-7 */
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        v[4 * h + 0] = _mm512_unpacklo_epi64(u[4 * h], u[4 * h + 2]);
        v[4 * h + 1] = _mm512_unpackhi_epi64(u[4 * h], u[4 * h + 2]);
        v[4 * h + 2] = _mm512_unpacklo_epi64(u[4 * h + 1], u[4 * h + 3]);
        v[4 * h + 3] = _mm512_unpackhi_epi64(u[4 * h + 1], u[4 * h + 3]);
    }
    const __m512i lo = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13);
    const __m512i hi = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        t[c] = _mm512_permutex2var_epi64(v[c], lo, v[c + 4]);
        t[c + 4] = _mm512_permutex2var_epi64(v[c], hi, v[c + 4]);
    }
}

/* the 32 bits at a + off of a's and b's blocks, `bb` bytes apart, in the
 * lanes (n of each, the rest 0) */
QD_INLINE __m512i qmr_u32(const char *a, const char *b, size_t bb, int n, int off)
{
    const __m512i k =
        _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7),
                           _mm512_set1_epi32((int)bb));
    const __m512i idx = _mm512_add_epi32(
        k, _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi32(b ? (int)(b - a) : 0), 1));
    const __mmask16 lanes = (__mmask16)(((1u << n) - 1) | (b ? ((1u << n) - 1) << 8 : 0));
    return _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), lanes, idx, a + off, 1);
}

/* the f16 in the high (hi: 1) or low (hi: 0) half of those 32 bits */
QD_INLINE __m512 qmr_f16(const char *a, const char *b, size_t bb, int n, int off, int hi)
{
    __m512i v = qmr_u32(a, b, bb, n, off);
    v = hi ? _mm512_srli_epi32(v, 16) : v;
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v));
}

/* byte `i` of each lane of v, bits `bits` of it from `shift`, as a lane */
QD_INLINE __m512i qmr_byte(__m512i v, int i, int shift, int bits)
{
    return _mm512_and_si512(_mm512_srli_epi32(v, 8 * i + shift),
                            _mm512_set1_epi32((1 << bits) - 1));
}

/* One run unpacked into u (QMR_VECS vectors): rows a and b (or NULL),
 * blocks [0, n) from those pointers */
QD_INLINE void qmr_unpack(enum dtype t, const char *a, const char *b, int n, __m512i *u)
{
    const size_t bb = quant_block_bytes(t);
    const __m512i lo4 = _mm512_set1_epi8(15);
    __m512i tr[8];
    switch (t) {
    case DTYPE_Q8_0:
    case DTYPE_Q4_0: {
        if (t == DTYPE_Q8_0) {
            qmr_transpose(a, b, bb, n, 2, 32, tr);
            for (int q = 0; q < 8; q++)
                u[QMR_W + q] = tr[q];
        } else {
            qmr_transpose(a, b, bb, n, 2, 16, tr);
            const __m512i eight = _mm512_set1_epi8(8);
            for (int q = 0; q < 4; q++) {
                u[QMR_W + q] = _mm512_sub_epi8(_mm512_and_si512(tr[q], lo4), eight);
                u[QMR_W + q + 4] =
                    _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(tr[q], 4), lo4), eight);
            }
        }
        /* x comes plus 128: take back 128 x the weights' sum */
        __m512i c = _mm512_setzero_si512();
        for (int q = 0; q < 8; q++)
            c = _mm512_dpbusd_epi32(c, _mm512_set1_epi8(-128), u[QMR_W + q]);
        u[QMR_CORR] = _mm512_sub_epi32(_mm512_setzero_si512(), c);
        u[QMR_D] = _mm512_castps_si512(qmr_f16(a, b, bb, n, 0, 0));
        break;
    }
    case DTYPE_Q5_0:
    case DTYPE_Q5_1: {
        /* d (and Q5_1's m) in a block's first 32 bits, then qh, then qs */
        const bool one = t == DTYPE_Q5_1;
        const int qh_at = one ? 4 : 2;
        const __m512i hd = qmr_u32(a, b, bb, n, 0), qh = qmr_u32(a, b, bb, n, qh_at);
        qmr_transpose(a, b, bb, n, qh_at + 4, 16, tr);
        /* quad j's fifth bits, qh's bits 4 j .. 4 j + 3, as 16 in the
         * bytes: a lane's 4 bits index a table of the 16 patterns (VPERMD
         * reads an index's low 4 bits) */
        const __m512i spread = _mm512_setr_epi32(0x00000000, 0x00000010, 0x00001000, 0x00001010,
                                                 0x00100000, 0x00100010, 0x00101000, 0x00101010,
                                                 0x10000000, 0x10000010, 0x10001000, 0x10001010,
                                                 0x10100000, 0x10100010, 0x10101000, 0x10101010);
        /* Q5_0's quants less 16, signed; Q5_1's as stored (0-31), its min
         * against x's sums */
        const __m512i bias = _mm512_set1_epi8(one ? 0 : 16);
        for (int q = 0; q < 4; q++) {
            const __m512i lo = _mm512_and_si512(tr[q], lo4);
            const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(tr[q], 4), lo4);
            const __m512i h0 = _mm512_permutexvar_epi32(_mm512_srli_epi32(qh, 4 * q), spread);
            const __m512i h1 = _mm512_permutexvar_epi32(_mm512_srli_epi32(qh, 4 * q + 16), spread);
            u[QMR_W + q] = _mm512_sub_epi8(_mm512_or_si512(lo, h0), bias);
            u[QMR_W + q + 4] = _mm512_sub_epi8(_mm512_or_si512(hi, h1), bias);
        }
        /* x comes plus 128: take back 128 x the weights' sum */
        __m512i c = _mm512_setzero_si512();
        for (int q = 0; q < 8; q++)
            c = _mm512_dpbusd_epi32(c, _mm512_set1_epi8(-128), u[QMR_W + q]);
        u[QMR_CORR] = _mm512_sub_epi32(_mm512_setzero_si512(), c);
        u[QMR_D] = _mm512_castps_si512(_mm512_cvtph_ps(_mm512_cvtepi32_epi16(hd)));
        if (one)
            u[QMR_DMIN] = _mm512_castps_si512(
                _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(hd, 16))));
        break;
    }
    case DTYPE_Q4_K:
    case DTYPE_Q5_K: {
        const bool five = t == DTYPE_Q5_K;
        qmr_transpose(a, b, bb, n, 0, 16, tr);
        u[QMR_D] = _mm512_castps_si512(_mm512_cvtph_ps(_mm512_cvtepi32_epi16(tr[0])));
        u[QMR_DMIN] = _mm512_castps_si512(
            _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(tr[0], 16))));
        /* quant_scale_min: the 12 bytes as words u0 = tr[1], u1, u2 */
        __m512i mn[8];
        for (int j = 0; j < 4; j++) {
            u[QMR_SC + j] = qmr_byte(tr[1], j, 0, 6);
            mn[j] = qmr_byte(tr[2], j, 0, 6);
            u[QMR_SC + j + 4] = _mm512_or_si512(qmr_byte(tr[3], j, 0, 4),
                                                _mm512_slli_epi32(qmr_byte(tr[1], j, 6, 2), 4));
            mn[j + 4] = _mm512_or_si512(qmr_byte(tr[3], j, 4, 4),
                                        _mm512_slli_epi32(qmr_byte(tr[2], j, 6, 2), 4));
        }
        for (int p = 0; p < 4; p++)
            u[QMR_PR + p] = _mm512_or_si512(mn[2 * p], _mm512_slli_epi32(mn[2 * p + 1], 16));
        __m512i qh[8];
        if (five)
            qmr_transpose(a, b, bb, n, 16, 32, qh);
        const int qs = five ? 48 : 16;
        for (int c = 0; c < 4; c++) {
            qmr_transpose(a, b, bb, n, qs + 32 * c, 32, tr);
            for (int q = 0; q < 8; q++) {
                __m512i w0 = _mm512_and_si512(tr[q], lo4);
                __m512i w1 = _mm512_and_si512(_mm512_srli_epi16(tr[q], 4), lo4);
                if (five) {
                    /* bit s of each byte of qh to bit 4, for s = 2c, 2c + 1 */
                    const __m512i sixteen = _mm512_set1_epi8(16);
                    const int s0 = 2 * c, s1 = 2 * c + 1;
                    const __m512i h0 = s0 <= 4 ? _mm512_slli_epi32(qh[q], 4 - s0)
                                               : _mm512_srli_epi32(qh[q], s0 - 4);
                    const __m512i h1 = s1 <= 4 ? _mm512_slli_epi32(qh[q], 4 - s1)
                                               : _mm512_srli_epi32(qh[q], s1 - 4);
                    w0 = _mm512_ternarylogic_epi32(w0, h0, sixteen, 0xf8);
                    w1 = _mm512_ternarylogic_epi32(w1, h1, sixteen, 0xf8);
                }
                u[QMR_W + 8 * (2 * c) + q] = w0;
                u[QMR_W + 8 * (2 * c + 1) + q] = w1;
            }
        }
        break;
    }
    case DTYPE_Q6_K: {
        /* element quad 32 h + 8 g + l: ql word 16 h + 8 (g & 1) + l, nibble
         * g >> 1; qh word 32 + 8 h + l, bits 2 g */
        const __m512i top = _mm512_set1_epi8(0x30);
        for (int h = 0; h < 2; h++) {
            __m512i qh[8];
            qmr_transpose(a, b, bb, n, 128 + 32 * h, 32, qh);
            for (int g1 = 0; g1 < 2; g1++) {
                qmr_transpose(a, b, bb, n, 64 * h + 32 * g1, 32, tr);
                for (int nib = 0; nib < 2; nib++) {
                    const int g = g1 + 2 * nib;
                    for (int l = 0; l < 8; l++) {
                        const __m512i lo = nib ? _mm512_and_si512(_mm512_srli_epi16(tr[l], 4), lo4)
                                               : _mm512_and_si512(tr[l], lo4);
                        const __m512i hb = g < 3 ? _mm512_slli_epi32(qh[l], 4 - 2 * g)
                                                 : _mm512_srli_epi32(qh[l], 2);
                        u[QMR_W + 32 * h + 8 * g + l] =
                            _mm512_ternarylogic_epi32(lo, hb, top, 0xf8);
                    }
                }
            }
        }
        qmr_transpose(a, b, bb, n, 192, 16, tr);
        for (int s = 0; s < 16; s++)
            u[QMR_SC + s] = _mm512_srai_epi32(_mm512_slli_epi32(tr[s / 4], 8 * (3 - s % 4)), 24);
        /* word pairs (4 v, 4 v + 2) and (4 v + 1, 4 v + 3) */
        for (int v = 0; v < 4; v++) {
            u[QMR_PR + 2 * v] = _mm512_srai_epi16(_mm512_slli_epi16(tr[v], 8), 8);
            u[QMR_PR + 2 * v + 1] = _mm512_srai_epi16(tr[v], 8);
        }
        u[QMR_D] = _mm512_castps_si512(qmr_f16(a, b, bb, n, 206, 1));
        break;
    }
    default:
        break;
    }
}

/* x's vector v of a run (qdot.h: its 256 bits in both halves) */
QD_INLINE __m512i qmr_xv(const char *run, int v)
{
    return _mm512_loadu_si512(run + 64 * v);
}

/* One unpacked run u times M (<= 8) input rows' runs xr[i] (qdot_pack_x_mr's
 * layout), their partial sums p[i] (both rows' lanes) updated */
QD_INLINE void qmr_run1(enum dtype t, const __m512i *u, const char *const *xr, __m512 *p,
                        const int M)
{
    __m512i is[8];
    switch (t) {
    case DTYPE_Q8_0:
    case DTYPE_Q4_0:
    case DTYPE_Q5_0:
    case DTYPE_Q5_1: {
        const bool one = t == DTYPE_Q5_1;
        for (int i = 0; i < M; i++)
            is[i] = u[QMR_CORR];
#pragma GCC unroll 8
        for (int q = 0; q < 8; q++) {
            const __m512i w = u[QMR_W + q];
#pragma GCC unroll 8
            for (int i = 0; i < M; i++)
                is[i] = _mm512_dpbusd_epi32(is[i], qmr_xv(xr[i], q), w);
        }
#pragma GCC unroll 8
        for (int i = 0; i < M; i++) {
            const __m512 dx = _mm512_castsi512_ps(qmr_xv(xr[i], one ? 9 : 8));
            const __m512 d = _mm512_mul_ps(_mm512_castsi512_ps(u[QMR_D]), dx);
            p[i] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(is[i]), p[i]);
            /* qdot.h's -(dmin dx) with dmin = -m is m dx exactly, times
             * the sum of x's quants */
            if (one)
                p[i] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_castsi512_ps(u[QMR_DMIN]), dx),
                                       _mm512_cvtepi32_ps(qmr_xv(xr[i], 8)), p[i]);
        }
        break;
    }
    case DTYPE_Q4_K:
    case DTYPE_Q5_K:
    case DTYPE_Q6_K: {
        const bool k6 = t == DTYPE_Q6_K;
        const int nsub = k6 ? 16 : 8, per = 64 / nsub, npr = k6 ? 8 : 4;
        for (int i = 0; i < M; i++)
            is[i] = _mm512_setzero_si512();
        /* a sub-block at a time (unrolled further, GCC spills the sums) */
#pragma GCC unroll 1
        for (int s = 0; s < nsub; s++) {
            __m512i acc[8];
            for (int i = 0; i < M; i++)
                acc[i] = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int q = 0; q < per; q++) {
                const __m512i w = u[QMR_W + per * s + q];
#pragma GCC unroll 8
                for (int i = 0; i < M; i++)
                    acc[i] = _mm512_dpbusd_epi32(acc[i], w, qmr_xv(xr[i], (per * s + q)));
            }
            const __m512i sc = u[QMR_SC + s];
#pragma GCC unroll 8
            for (int i = 0; i < M; i++)
                is[i] = _mm512_add_epi32(is[i], _mm512_mullo_epi32(acc[i], sc));
        }
#pragma GCC unroll 8
        for (int i = 0; i < M; i++) {
            __m512i ms = _mm512_setzero_si512();
            for (int pr = 0; pr < npr; pr++)
                ms = _mm512_dpwssd_epi32(ms, u[QMR_PR + pr], qmr_xv(xr[i], (64 + pr)));
            const __m512 dx = _mm512_castsi512_ps(qmr_xv(xr[i], (64 + npr)));
            const __m512 d = _mm512_mul_ps(_mm512_castsi512_ps(u[QMR_D]), dx);
            if (k6) {
                /* the quants' bias of 32 */
                is[i] = _mm512_sub_epi32(is[i], _mm512_slli_epi32(ms, 5));
                p[i] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(is[i]), p[i]);
            } else {
                const __m512 dm = _mm512_sub_ps(
                    _mm512_setzero_ps(), _mm512_mul_ps(_mm512_castsi512_ps(u[QMR_DMIN]), dx));
                p[i] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(is[i]), p[i]);
                p[i] = _mm512_fmadd_ps(dm, _mm512_cvtepi32_ps(ms), p[i]);
            }
        }
        break;
    }
    default:
        break;
    }
}

/* nrun runs from u on (QMR_VECS vectors apart) times M input rows (row i's
 * runs from xr[i] on, run_bytes apart); the partials p[i] kept in registers */
QD_INLINE void qmr_run(enum dtype t, const __m512i *u, int nrun, size_t run_bytes,
                       const char *const *xr0, __m512 *pm, const int M)
{
    __m512 p[8];
    const char *xr[8];
    for (int i = 0; i < M; i++) {
        p[i] = pm[i];
        xr[i] = xr0[i];
    }
    for (int c = 0; c < nrun; c++, u += QMR_VECS) {
        qmr_run1(t, u, xr, p, M);
        for (int i = 0; i < M; i++)
            xr[i] += run_bytes;
    }
    for (int i = 0; i < M; i++)
        pm[i] = p[i];
}

/* rows i0 .. i0 + M of x against one run: one copy per class of type and
 * count of rows, so that each loop unrolls whole */
#define QMR_RUN_M(name, T)                                                                         \
    static __attribute__((noinline)) void name(const __m512i *u, int nrun, size_t rb,              \
                                               const char *const *xr, __m512 *p, int M)            \
    {                                                                                              \
        switch (M) {                                                                               \
        case 1:                                                                                    \
            qmr_run(T, u, nrun, rb, xr, p, 1);                                                     \
            break;                                                                                 \
        case 2:                                                                                    \
            qmr_run(T, u, nrun, rb, xr, p, 2);                                                     \
            break;                                                                                 \
        case 3:                                                                                    \
            qmr_run(T, u, nrun, rb, xr, p, 3);                                                     \
            break;                                                                                 \
        case 4:                                                                                    \
            qmr_run(T, u, nrun, rb, xr, p, 4);                                                     \
            break;                                                                                 \
        case 5:                                                                                    \
            qmr_run(T, u, nrun, rb, xr, p, 5);                                                     \
            break;                                                                                 \
        case 6:                                                                                    \
            qmr_run(T, u, nrun, rb, xr, p, 6);                                                     \
            break;                                                                                 \
        case 7:                                                                                    \
            qmr_run(T, u, nrun, rb, xr, p, 7);                                                     \
            break;                                                                                 \
        default:                                                                                   \
            qmr_run(T, u, nrun, rb, xr, p, 8);                                                     \
            break;                                                                                 \
        }                                                                                          \
    }

QMR_RUN_M(qmr_run_32, DTYPE_Q8_0)
QMR_RUN_M(qmr_run_51, DTYPE_Q5_1)
QMR_RUN_M(qmr_run_45k, DTYPE_Q4_K)
QMR_RUN_M(qmr_run_6k, DTYPE_Q6_K)

static void qmr_run_m(enum dtype t, const __m512i *u, int nrun, size_t rb, const char *const *xr,
                      __m512 *p, int M)
{
    if (t == DTYPE_Q8_0 || t == DTYPE_Q4_0 || t == DTYPE_Q5_0)
        qmr_run_32(u, nrun, rb, xr, p, M);
    else if (t == DTYPE_Q5_1)
        qmr_run_51(u, nrun, rb, xr, p, M);
    else if (t == DTYPE_Q6_K)
        qmr_run_6k(u, nrun, rb, xr, p, M);
    else
        qmr_run_45k(u, nrun, rb, xr, p, M);
}

/* qdot_sum8 of lanes 8 h .. 8 h + 7 */
QD_INLINE float qmr_sum8(__m512 p, int h)
{
    return qd_sum8(h ? _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(p), 1))
                     : _mm512_castps512_ps256(p));
}

/* weight rows prefetched ahead of the pair being unpacked */
#ifndef QMR_AHEAD
#define QMR_AHEAD 4
#endif

int qdot_mr_vnni(const struct qdot_args *a, int r0, int r1)
{
    const struct weight_view *w = a->w;
    const enum dtype t = w->dtype;
    if (t != DTYPE_Q8_0 && t != DTYPE_Q4_0 && t != DTYPE_Q5_0 && t != DTYPE_Q5_1 &&
        t != DTYPE_Q4_K && t != DTYPE_Q5_K && t != DTYPE_Q6_K) {
        qdot_rows_vnni(a, r0, r1);
        return 0;
    }
    const int nb = w->cols / dtype_block(t), nrun = (nb + 7) / 8;
    const size_t bb = quant_block_bytes(t), w_ld = dtype_row_bytes(t, w->ld);
    /* a pair's unpacked runs, then the partial sums of every input row */
    const size_t ubytes = (size_t)nrun * QMR_VECS * 64;
    char *buf = cpu_scratch(CPU_SCRATCH_Q_DEQ, ubytes + (size_t)a->m * 64);
    if (!buf)
        return ERR_NOMEM;
    __m512i *u = (__m512i *)buf;
    __m512 *p = (__m512 *)(buf + ubytes);
    const size_t row_bytes = dtype_row_bytes(t, (size_t)w->cols);
    for (int r = r0; r < r1; r += 2) {
        const char *ra = (const char *)w->data + (size_t)r * w_ld;
        const char *rb = r + 1 < r1 ? ra + w_ld : NULL;
        /* the pair after next: the transposes read a row in several passes,
         * which the hardware's prefetchers follow poorly */
        for (int k = QMR_AHEAD; k < QMR_AHEAD + 2 && r + k < r1; k++)
            for (size_t o = 0; o < row_bytes; o += 64)
                _mm_prefetch(ra + (size_t)k * w_ld + o, _MM_HINT_T0);
        for (int c = 0; c < nrun; c++) {
            const int n = nb - 8 * c < 8 ? nb - 8 * c : 8;
            qmr_unpack(t, ra + (size_t)c * 8 * bb, rb ? rb + (size_t)c * 8 * bb : NULL, n,
                       u + (size_t)c * QMR_VECS);
        }
        for (int i = 0; i < a->m; i++)
            p[i] = _mm512_setzero_ps();
        for (int i0 = 0; i0 < a->m; i0 += 8) {
            const int M = a->m - i0 < 8 ? a->m - i0 : 8;
            const char *xr[8];
            for (int i = 0; i < M; i++)
                xr[i] = a->xp + (size_t)(i0 + i) * a->xp_ld;
            qmr_run_m(t, u, nrun, qdot_xmr_run_bytes(t), xr, p + i0, M);
        }
        for (int i = 0; i < a->m; i++) {
            a->y[(size_t)i * a->ldy + r] = qmr_sum8(p[i], 0);
            if (rb)
                a->y[(size_t)i * a->ldy + r + 1] = qmr_sum8(p[i], 1);
        }
    }
    return 0;
}
