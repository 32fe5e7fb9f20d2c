/* The low-rank update's row kernels for AVX-512 (F + BW + VL), sixteen
 * lanes. The functions carry their instruction sets as target attributes,
 * so the file builds with the project's flags and lora.c calls these only
 * where the CPU has them. */
#include "backend/cpu/lora.h"

#include <assert.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")))
#define INLINE static inline __attribute__((always_inline)) AVX512

/* Sixteen elements of a weight row from column c, widened to f32. */
INLINE __m512 load_w(enum dtype t, const char *row, int c)
{
    switch (t) {
    case DTYPE_F16:
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(row + (size_t)c * 2)));
    case DTYPE_BF16: {
        __m512i u =
            _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(row + (size_t)c * 2)));
        return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
    }
    default:
        return _mm512_loadu_ps(row + (size_t)c * 4);
    }
}

/* The same for the lanes of k, zeros elsewhere (nothing read past them). */
INLINE __m512 load_w_mask(enum dtype t, const char *row, int c, __mmask16 k)
{
    switch (t) {
    case DTYPE_F16:
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, row + (size_t)c * 2));
    case DTYPE_BF16: {
        __m512i u = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, row + (size_t)c * 2));
        return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
    }
    default:
        return _mm512_maskz_loadu_ps(k, row + (size_t)c * 4);
    }
}

static inline __mmask16 lanes(int n)
{
    return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1);
}

/* R rows of a from j: two accumulators per row (even and odd vectors of
 * columns), so eight FMA chains run at once for R = 4. */
INLINE void shrink_rows(float *t, const float *x, const struct weight_view *a, enum dtype dt, int j,
                        const int R)
{
    const int k = a->cols, kv = k / 16 * 16;
    const char *wr[4];
    __m512 acc0[4], acc1[4];
#pragma GCC unroll 4
    for (int p = 0; p < R; p++) {
        wr[p] = weight_row(a, j + p);
        acc0[p] = acc1[p] = _mm512_setzero_ps();
    }
    int c = 0;
    for (; c + 32 <= kv; c += 32) {
        const __m512 x0 = _mm512_loadu_ps(x + c), x1 = _mm512_loadu_ps(x + c + 16);
#pragma GCC unroll 4
        for (int p = 0; p < R; p++) {
            acc0[p] = _mm512_fmadd_ps(load_w(dt, wr[p], c), x0, acc0[p]);
            acc1[p] = _mm512_fmadd_ps(load_w(dt, wr[p], c + 16), x1, acc1[p]);
        }
    }
    if (c < kv) {
        const __m512 x0 = _mm512_loadu_ps(x + c);
#pragma GCC unroll 4
        for (int p = 0; p < R; p++)
            acc0[p] = _mm512_fmadd_ps(load_w(dt, wr[p], c), x0, acc0[p]);
    }
    const __mmask16 tail = lanes(k - kv);
    const __m512 xt = _mm512_maskz_loadu_ps(tail, x + kv);
#pragma GCC unroll 4
    for (int p = 0; p < R; p++) {
        float s = _mm512_reduce_add_ps(_mm512_add_ps(acc0[p], acc1[p]));
        if (kv < k)
            s += _mm512_reduce_add_ps(_mm512_mul_ps(load_w_mask(dt, wr[p], kv, tail), xt));
        t[j + p] = s;
    }
}

INLINE void shrink_typed(float *t, const float *x, const struct weight_view *a, enum dtype dt)
{
    int j = 0;
    for (; j + 4 <= a->rows; j += 4)
        shrink_rows(t, x, a, dt, j, 4);
    for (; j < a->rows; j++)
        shrink_rows(t, x, a, dt, j, 1);
}

AVX512 void lora_shrink_avx512(float *t, const float *x, const struct weight_view *a)
{
    /* one loop per dtype: the conversion is chosen outside the inner loop */
    switch (a->dtype) {
    case DTYPE_F16:
        shrink_typed(t, x, a, DTYPE_F16);
        break;
    case DTYPE_BF16:
        shrink_typed(t, x, a, DTYPE_BF16);
        break;
    default:
        shrink_typed(t, x, a, DTYPE_F32);
        break;
    }
}

/* The sums of the lanes of v[0..15], output q's in lane q, by a tree of
 * shuffles and adds (4 levels, 45 instructions for 16 sums, where one
 * horizontal sum per output costs about 8). Each add joins partial sums of
 * one output only, so an output's sum is the same whatever the other
 * fifteen hold. Level by level, v[i] of level 0 ends in lane
 * 4 * (i % 4) + i / 4: the caller stores output q's products in v[pos(q)]
 * (pos below) so that the result comes out in order. */
INLINE __m512 sum16(__m512 v[16])
{
    __m512 s[8], w[4], z[2];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) /* halves: [a.lo + a.hi | b.lo + b.hi] */
        s[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44),
                             _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xee));
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) /* quarters: one output each */
        w[i] = _mm512_add_ps(_mm512_shuffle_f32x4(s[2 * i], s[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(s[2 * i], s[2 * i + 1], 0xdd));
#pragma GCC unroll 2
    for (int i = 0; i < 2; i++) /* pairs within each quarter */
        z[i] = _mm512_add_ps(_mm512_shuffle_ps(w[2 * i], w[2 * i + 1], 0x44),
                             _mm512_shuffle_ps(w[2 * i], w[2 * i + 1], 0xee));
    return _mm512_add_ps(_mm512_shuffle_ps(z[0], z[1], 0x88), _mm512_shuffle_ps(z[0], z[1], 0xdd));
}

/* Where sum16 wants output q's vector (and where v[i] comes out: the
 * mapping is its own inverse). */
static inline int pos(int q)
{
    return 4 * (q % 4) + q / 4;
}

/* Outputs [o, o + n) (n <= 16) of one row: the products of t (nc vectors
 * of the rank, the last masked by tail) and each b row, summed per output
 * in the order of the vectors, then y += scale * sum. NC > 0: nc as a
 * constant, t's vectors held in registers (ranks up to 64); 0: any nc,
 * t's vectors loaded as they are needed. Either way each output gets the
 * same operations. */
INLINE void expand_block(float *y, const float *t, const int NC, int nc, __mmask16 tail,
                         const char *b0, size_t ldb, enum dtype dt, int o, int n, __m512 scale)
{
    __m512 tv[4];
    if (NC > 0)
#pragma GCC unroll 4
        for (int c = 0; c < NC; c++)
            tv[c] = _mm512_maskz_loadu_ps(c == NC - 1 ? tail : (__mmask16)0xffff, t + 16 * c);
    __m512 v[16];
#pragma GCC unroll 16
    for (int q = 0; q < 16; q++) {
        __m512 acc = _mm512_setzero_ps();
        if (q < n) {
            const char *row = b0 + (size_t)(o + q) * ldb;
            if (NC > 0) {
#pragma GCC unroll 4
                for (int c = 0; c < NC; c++)
                    acc = _mm512_fmadd_ps(
                        load_w_mask(dt, row, 16 * c, c == NC - 1 ? tail : (__mmask16)0xffff), tv[c],
                        acc);
            } else {
                for (int c = 0; c < nc; c++) {
                    const __mmask16 k = c == nc - 1 ? tail : (__mmask16)0xffff;
                    acc = _mm512_fmadd_ps(load_w_mask(dt, row, 16 * c, k),
                                          _mm512_maskz_loadu_ps(k, t + 16 * c), acc);
                }
            }
        }
        v[pos(q)] = acc;
    }
    const __mmask16 k = lanes(n);
    const __m512 u = sum16(v);
    const __m512 yv = _mm512_maskz_loadu_ps(k, y + o);
    _mm512_mask_storeu_ps(y + o, k, _mm512_add_ps(yv, _mm512_mul_ps(scale, u)));
}

INLINE void expand_nc(float *y, const float *t, const struct weight_view *b, enum dtype dt,
                      const int NC, int o0, int o1, float scale)
{
    const int r = b->cols, nc = (r + 15) / 16;
    const __mmask16 tail = lanes(r - 16 * (nc - 1));
    const __m512 sc = _mm512_set1_ps(scale);
    const size_t ldb = b->ld * dtype_size(dt); /* bytes: weight_row is a call */
    for (int o = o0; o < o1; o += 16)
        expand_block(y, t, NC, nc, tail, b->data, ldb, dt, o, o1 - o < 16 ? o1 - o : 16, sc);
}

INLINE void expand_typed(float *y, const float *t, const struct weight_view *b, enum dtype dt,
                         int o0, int o1, float scale)
{
    switch ((b->cols + 15) / 16) {
    case 1:
        expand_nc(y, t, b, dt, 1, o0, o1, scale);
        break;
    case 2:
        expand_nc(y, t, b, dt, 2, o0, o1, scale);
        break;
    case 3:
        expand_nc(y, t, b, dt, 3, o0, o1, scale);
        break;
    case 4:
        expand_nc(y, t, b, dt, 4, o0, o1, scale);
        break;
    default:
        expand_nc(y, t, b, dt, 0, o0, o1, scale);
        break;
    }
}

AVX512 void lora_expand_avx512(float *y, const float *t, const struct weight_view *b, int o0,
                               int o1, float scale)
{
    assert(o0 % LORA_OUT_BLOCK == 0);
    switch (b->dtype) {
    case DTYPE_F16:
        expand_typed(y, t, b, DTYPE_F16, o0, o1, scale);
        break;
    case DTYPE_BF16:
        expand_typed(y, t, b, DTYPE_BF16, o0, o1, scale);
        break;
    default:
        expand_typed(y, t, b, DTYPE_F32, o0, o1, scale);
        break;
    }
}

#else
/* not x86: lora.c never picks these */
void lora_shrink_avx512(float *t, const float *x, const struct weight_view *a)
{
    lora_shrink_scalar(t, x, a);
}

void lora_expand_avx512(float *y, const float *t, const struct weight_view *b, int o0, int o1,
                        float scale)
{
    lora_expand_scalar(y, t, b, o0, o1, scale);
}
#endif
