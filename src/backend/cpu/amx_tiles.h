/* AMX's tile configuration (LDTILECFG's 64-byte operand, palette 1) for
 * the files compiled for AMX-TILE (gemv_amx.c, matmul_amx.c, qdot_amx.c):
 * tile t colsb[t] bytes wide and rows[t] rows (NULL: every tile 16); and
 * the transpose of a stored tile of f32 sums, which the bf16 kernels put
 * into y's rows. Internal to backend/cpu/. */
#ifndef SHARDSWAP_BACKEND_CPU_AMX_TILES_H
#define SHARDSWAP_BACKEND_CPU_AMX_TILES_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

static inline void amx_tiles_configure(const uint16_t *colsb, const uint8_t *rows, int n_tiles)
{
    struct {
        uint8_t palette;
        uint8_t start_row;
        uint8_t reserved[14];
        uint16_t colsb[16];
        uint8_t rows[16];
    } c;
    memset(&c, 0, sizeof(c));
    c.palette = 1;
    for (int t = 0; t < n_tiles; t++) {
        c.rows[t] = rows ? rows[t] : 16;
        c.colsb[t] = colsb[t];
    }
    /* not _tile_loadconfig: GCC 12's names only the pointer's 8 bytes as the
     * asm's input, so once inlined the stores to the rest of c can be
     * dropped as dead (a standalone loop's LDTILECFG then read garbage and
     * faulted); the whole struct as the operand keeps them */
    __asm__ volatile("ldtilecfg %0" : : "m"(c));
}

/* The 16 x 16 floats of r transposed in registers: r[j] becomes column j
 * (a stored tile of sums, 16 weight rows x 16 input rows, into rows of y). */
static inline void amx_transpose16(__m512 r[16])
{
    __m512 t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    /* r[4i + q], lane L: rows 4i..4i+3 of column 4L + q */
    for (int i = 0; i < 4; i++) {
        const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
        const __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
        r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    /* column 4L + q: lane L of r[q], r[4 + q], r[8 + q], r[12 + q] */
    for (int q = 0; q < 4; q++) {
        const __m512 lo0 = _mm512_shuffle_f32x4(r[q], r[4 + q], 0x44);
        const __m512 hi0 = _mm512_shuffle_f32x4(r[q], r[4 + q], 0xee);
        const __m512 lo1 = _mm512_shuffle_f32x4(r[8 + q], r[12 + q], 0x44);
        const __m512 hi1 = _mm512_shuffle_f32x4(r[8 + q], r[12 + q], 0xee);
        t[q] = _mm512_shuffle_f32x4(lo0, lo1, 0x88);
        t[4 + q] = _mm512_shuffle_f32x4(lo0, lo1, 0xdd);
        t[8 + q] = _mm512_shuffle_f32x4(hi0, hi1, 0x88);
        t[12 + q] = _mm512_shuffle_f32x4(hi0, hi1, 0xdd);
    }
    for (int j = 0; j < 16; j++)
        r[j] = t[j];
}

#endif
