/* The compressed-tensors dot products in bf16 mode on AVX512-BF16
 * (ctdot.h): each block widened to f32 with its scale and zero point,
 * rounded to 32 bf16 (VCVTNE2PS2BF16, nearest even) and multiplied in
 * pairs with x's bf16 (VDPBF16PS): one multiply per 32 weights and input
 * row, the sums in another order than the reference's. This file alone is
 * compiled with AVX512-BF16 (CMakeLists.txt); ctlinear.c runs it only
 * where the CPU has it, and only in bf16 mode. */
#if defined(__x86_64__) || defined(__i386__)

#define CT_PREPARE(rnd, w0, w1)                                                                    \
    (void)(rnd);                                                                                   \
    const __m512bh wb_ = _mm512_cvtne2ps_pbh(w1, w0)
#define CT_FMA_BLOCK(a, acc, w0, w1, i, b)                                                         \
    acc = _mm512_dpbf16_ps(                                                                        \
        acc, wb_,                                                                                  \
        (__m512bh)_mm512_loadu_si512((a)->xb + (size_t)(i) * (a)->w->cols + (size_t)(b)*QK))

#include "backend/cpu/ctdot_avx512_body.h"

#include <pthread.h>

void ctdot_rows_avx512bf16(const struct ctdot_args *a, int r0, int r1)
{
    ct_rows(a, r0, r1);
}

/* ---- the table kernel ----
 *
 * A block's 32 weights rounded to bf16 take at most 16 values for CT_I4
 * (d * (n - 8 - z), n a nibble) and 128 magnitudes for CT_F8 (d times an
 * e4m3 magnitude, the sign apart): a table of those bf16 values, built when
 * a block's scale (and zero point) differs from the table's, so once per
 * group, channel or tensor the checkpoint shares them, turns the widening
 * into word permutes (VPERMW, VPERMT2W) of the packed values. CT_F8's
 * table (12 instructions, about two widenings) is built only when a
 * block's scale equals the block before's: a block whose scale is its
 * own is widened as above. The
 * table holds what the widening above computes (the product in f32,
 * rounded once to bf16 by VCVTNE2PS2BF16), so the weights are the same
 * bits; only the sums' order differs (several sums a row in flight).
 * CT_I8's 256 values a block gain nothing from a table: it runs the
 * widening above. */

/* the e4m3 magnitudes 0..127 as f32 (quant_f8e4m3_to_f32); 127 is NaN */
static float ct_f8_mag[128] __attribute__((aligned(64)));
static pthread_once_t ct_f8_mag_once = PTHREAD_ONCE_INIT;

static void ct_f8_mag_init(void)
{
    for (int v = 0; v < 128; v++)
        ct_f8_mag[v] = quant_f8e4m3_to_f32((uint8_t)v);
}

/* input rows per pass over a task's weight rows: 4 rows of x (16 KiB at
 * 2048 columns) stay in the 32 KiB L1 while the weights stream through it,
 * 8 did not (8 rows cost 3-4x 4 rows from memory); a later pass reads the
 * task's weights (ctlinear.c: 128 KiB) from L2 */
#define LUT_GROUP 4

/* sums a weight row keeps per input row: several in flight so one input
 * row is not bound by VDPBF16PS's latency */
#define LUT_ACC(nm) ((nm) == 1 ? 4 : (nm) <= 3 ? 2 : 1)

/* no block's key (a key has at most 40 bits) */
#define LUT_NO_KEY UINT64_MAX

struct lut_tab {
    uint64_t key;  /* the scale's bytes (and CT_I4's zero point) it was built for */
    uint64_t last; /* the block before's key */
    __m512i t[4]; /* CT_I4: t[0], its 16 values twice; CT_F8: magnitudes 0-127 */
};

CT_INLINE void lut_build(enum dtype t, const unsigned char *p, struct lut_tab *tab)
{
    float df;
    memcpy(&df, p, 4);
    const __m512 d = _mm512_set1_ps(df);
    if (t == DTYPE_CT_I4) {
        const __m512i n = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
        const __m512 f = _mm512_mul_ps(
            d, _mm512_cvtepi32_ps(_mm512_sub_epi32(n, _mm512_set1_epi32(8 + (int8_t)p[4]))));
        tab->t[0] = (__m512i)_mm512_cvtne2ps_pbh(f, f);
        return;
    }
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++)
        tab->t[k] =
            (__m512i)_mm512_cvtne2ps_pbh(_mm512_mul_ps(d, _mm512_load_ps(ct_f8_mag + 32 * k + 16)),
                                         _mm512_mul_ps(d, _mm512_load_ps(ct_f8_mag + 32 * k)));
}

/* the 32 weights of the block at p as bf16, elements in order */
CT_INLINE __m512i lut_block(enum dtype t, const unsigned char *p, const struct lut_tab *tab)
{
    if (t == DTYPE_CT_I4) {
        /* dword j = byte j | byte j << 12: word 2j's low 5 bits index the
         * doubled table at the low nibble, word 2j + 1 is the high nibble */
        const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(p + 5)));
        return _mm512_permutexvar_epi16(_mm512_or_si512(v, _mm512_slli_epi32(v, 12)), tab->t[0]);
    }
    /* word j = byte j: bits 0-5 index 64 magnitudes, bit 6 which 64, bit 7 the sign */
    const __m512i v = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(p + 4)));
    const __m512i b6 = _mm512_set1_epi16(0x40);
    const __m512i lo =
        _mm512_mask2_permutex2var_epi16(tab->t[0], v, _mm512_testn_epi16_mask(v, b6), tab->t[1]);
    const __m512i m =
        _mm512_mask2_permutex2var_epi16(tab->t[2], lo, _mm512_test_epi16_mask(v, b6), tab->t[3]);
    /* m ^ (v << 8 & 0x8000): the sign flips d's */
    return _mm512_ternarylogic_epi32(m, _mm512_slli_epi16(v, 8), _mm512_set1_epi16((short)0x8000),
                                     0x78);
}

CT_INLINE uint64_t lut_key(enum dtype t, const unsigned char *p)
{
    uint64_t k;
    memcpy(&k, p, 8);
    return k & (t == DTYPE_CT_I4 ? 0xffffffffffull : 0xffffffffull);
}

/* weight rows [r0, r1) times nm input rows from i0 */
CT_INLINE void lut_rows_nm(const struct ctdot_args *a, int r0, int r1, enum dtype t, int i0, int nm,
                           struct lut_tab *tab_io)
{
    struct lut_tab tab_ = *tab_io, *tab = &tab_; /* in registers */
    const struct weight_view *w = a->w;
    const int nb = w->cols / QK, na = LUT_ACC(nm);
    const size_t bb = ct_bb(t);
    const uint16_t *xb = a->xb + (size_t)i0 * w->cols;
    for (int r = r0; r < r1; r++) {
        const unsigned char *row = weight_row(w, r);
        __m512 acc[LUT_GROUP][4];
#pragma GCC unroll 8
        for (int i = 0; i < nm; i++)
#pragma GCC unroll 4
            for (int u = 0; u < na; u++)
                acc[i][u] = _mm512_setzero_ps();
        for (int b0 = 0; b0 < nb; b0 += na) {
#pragma GCC unroll 4
            for (int u = 0; u < na; u++) {
                const int b = b0 + u;
                if (b >= nb)
                    break;
                const unsigned char *p = row + (size_t)b * bb;
                const uint64_t key = lut_key(t, p);
                __m512bh wb;
                if (__builtin_expect(key == tab->key, 1)) {
                    wb = (__m512bh)lut_block(t, p, tab);
                } else if (t == DTYPE_CT_I4 || key == tab->last) {
                    /* a CT_I4 table costs about one widening; CT_F8's 128
                     * entries are built only for a scale that repeats */
                    lut_build(t, p, tab);
                    tab->key = key;
                    wb = (__m512bh)lut_block(t, p, tab);
                } else {
                    __m512 w0, w1;
                    ct_block(t, p, &w0, &w1);
                    wb = _mm512_cvtne2ps_pbh(w1, w0);
                }
                tab->last = key;
#pragma GCC unroll 8
                for (int i = 0; i < nm; i++)
                    acc[i][u] = _mm512_dpbf16_ps(
                        acc[i][u], wb,
                        (__m512bh)_mm512_loadu_si512(xb + (size_t)i * w->cols + (size_t)b * QK));
            }
        }
#pragma GCC unroll 8
        for (int i = 0; i < nm; i++) {
            __m512 s = acc[i][0];
#pragma GCC unroll 4
            for (int u = 1; u < na; u++)
                s = _mm512_add_ps(s, acc[i][u]);
            a->y[(size_t)(i0 + i) * a->ldy + r] = ct_tree(s);
        }
    }
    *tab_io = tab_;
}

CT_INLINE void lut_rows_t(const struct ctdot_args *a, int r0, int r1, enum dtype t)
{
    struct lut_tab tab = {.key = LUT_NO_KEY, .last = LUT_NO_KEY};
    for (int i0 = 0; i0 < a->m; i0 += LUT_GROUP) {
        switch (a->m - i0 < LUT_GROUP ? a->m - i0 : LUT_GROUP) {
        case 1:
            lut_rows_nm(a, r0, r1, t, i0, 1, &tab);
            break;
        case 2:
            lut_rows_nm(a, r0, r1, t, i0, 2, &tab);
            break;
        case 3:
            lut_rows_nm(a, r0, r1, t, i0, 3, &tab);
            break;
        default:
            lut_rows_nm(a, r0, r1, t, i0, 4, &tab);
            break;
        }
    }
}

/* CT_I8: the widening above, input rows LUT_GROUP at a time */
static void lut_rows_i8(const struct ctdot_args *a, int r0, int r1)
{
    for (int i0 = 0; i0 < a->m; i0 += LUT_GROUP) {
        const int nm = a->m - i0 < LUT_GROUP ? a->m - i0 : LUT_GROUP;
        for (int r = r0; r < r1; r++)
            ct_tile1(a, DTYPE_CT_I8, true, r, i0, nm);
    }
}

void ctdot_rows_avx512bf16_lut(const struct ctdot_args *a, int r0, int r1)
{
    switch (a->w->dtype) {
    case DTYPE_CT_I4:
        lut_rows_t(a, r0, r1, DTYPE_CT_I4);
        break;
    case DTYPE_CT_F8:
        pthread_once(&ct_f8_mag_once, ct_f8_mag_init);
        lut_rows_t(a, r0, r1, DTYPE_CT_F8);
        break;
    default:
        lut_rows_i8(a, r0, r1);
        break;
    }
}

#else
#include <assert.h>

#include "backend/cpu/ctdot.h"

void ctdot_rows_avx512bf16(const struct ctdot_args *a, int r0, int r1)
{
    (void)a, (void)r0, (void)r1;
    assert(!"ctdot_rows_avx512bf16 on a CPU without AVX512-BF16");
}

void ctdot_rows_avx512bf16_lut(const struct ctdot_args *a, int r0, int r1)
{
    (void)a, (void)r0, (void)r1;
    assert(!"ctdot_rows_avx512bf16_lut on a CPU without AVX512-BF16");
}
#endif
