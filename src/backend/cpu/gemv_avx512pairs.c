/* The fused GEMV for bf16 weights on AVX-512 (F + BW + VL), widened in
 * pairs: one 64-byte load of 32 bf16 is 16 dwords, each holding an even
 * column in its low half and the next odd one in its high half, so a shift
 * left by 16 gives the even columns as floats and a mask of the low half the
 * odd ones: two uops for 32 columns, where gemv_avx512 widens 16 with two
 * (zero-extend, shift). The inputs are read in the same order: a->xp holds
 * x with each 32 columns reordered as its 16 even then its 16 odd ones
 * (gemv.c), so the products and f32 sums are the widening kernel's up to
 * summation order. Other dtypes, or no reordered x, go to gemv_rows_avx512.
 * This file alone is compiled with those instruction sets (CMakeLists.txt)
 * and runs only where gemv.c found them. */
#include "backend/cpu/gemv_isa.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

typedef __m512 gv_t;
#define GV_LANES 16
#define GV_COLS 32 /* a pair of vectors per step */
typedef struct {
    __m512 even, odd;
} gv_pair;
#define GV_WT gv_pair
#define GV_XT gv_pair
#define GV_XELEM float
#define GV_XROWS(a) ((a)->xp)
#define GEMV_BF16_ONLY

static inline gv_t gv_zero(void)
{
    return _mm512_setzero_ps();
}

static inline gv_pair gv_load_w(enum dtype t, const char *row, int c)
{
    (void)t;
    __m512i d = _mm512_loadu_si512(row + (size_t)c * 2);
    gv_pair p = {
        _mm512_castsi512_ps(_mm512_slli_epi32(d, 16)),
        _mm512_castsi512_ps(_mm512_and_si512(d, _mm512_set1_epi32((int)0xffff0000u))),
    };
    return p;
}

static inline gv_pair gv_load_x(const float *p)
{
    gv_pair x = {_mm512_loadu_ps(p), _mm512_loadu_ps(p + 16)};
    return x;
}

static inline gv_t gv_fma(gv_pair w, gv_pair x, gv_t acc)
{
    return _mm512_fmadd_ps(w.odd, x.odd, _mm512_fmadd_ps(w.even, x.even, acc));
}

static inline float gv_hsum(gv_t v)
{
    return _mm512_reduce_add_ps(v);
}

static void gemv_rows_pairs(const struct gemv_args *a, int r0, int r1);
#define GEMV_ROWS_FN gemv_rows_pairs
#include "backend/cpu/gemv_body.h"

void gemv_rows_avx512pairs(const struct gemv_args *a, int r0, int r1)
{
    if (a->xp && a->w->dtype == DTYPE_BF16)
        gemv_rows_pairs(a, r0, r1);
    else
        gemv_rows_avx512(a, r0, r1);
}

#else
/* not x86: gemv.c never picks it */
void gemv_rows_avx512pairs(const struct gemv_args *a, int r0, int r1)
{
    gemv_rows_scalar(a, r0, r1);
}
#endif
