/* The bf16-mode matrix product on AMX tiles (matmul_amx.h): this file alone,
 * with gemv_amx.c, is compiled with AMX-TILE and AMX-BF16 (CMakeLists.txt).
 *
 * Tiles: 0-3 accumulate C blocks (16 weight rows x 16 input rows, f32), 4
 * holds the weights' A tile (16 rows x 32 bf16), 5 and 6 alternate as x's B
 * tiles (16 column pairs x 16 input rows). A weight tile, once loaded, is
 * multiplied into four blocks of input rows before the next is loaded, so
 * a prefill of 128 rows reads a weight block from memory once and from
 * the cache once more. */
#include "backend/cpu/matmul_amx.h"

#include "backend/cpu/scratch.h"
#include "backend/cpu/vec.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "backend/cpu/amx_tiles.h"

#define ROWS 16  /* input rows per B tile and weight rows per A tile */
#define CHUNK 32 /* bf16 columns per tile */
#define PAIRS (CHUNK / 2)
#define PACK_SPAN 1024 /* columns of an input row rounded at a time */

bool matmul_amx_fits(const struct weight_view *w)
{
    return w->dtype == DTYPE_BF16 && w->rows % ROWS == 0 && w->cols % CHUNK == 0;
}

size_t matmul_amx_packed_bytes(int m, int k)
{
    const size_t blocks = ((size_t)m + ROWS - 1) / ROWS;
    return blocks * (size_t)k * ROWS * sizeof(uint16_t);
}

/* Where block b, chunk c of the packed x starts, in 32-bit pairs: 16
 * pairs x 16 rows. */
static size_t packed_tile(int k, int b, int c)
{
    return ((size_t)b * (k / CHUNK) + c) * PAIRS * ROWS;
}

void matmul_amx_pack(uint16_t *xv, const float *x, int m, int k, int b0, int b1)
{
    uint32_t span[PACK_SPAN / 2];
    for (int b = b0; b < b1; b++)
        for (int j = 0; j < ROWS; j++) {
            const int i = b * ROWS + j;
            for (int c0 = 0; c0 < k; c0 += PACK_SPAN) {
                const int len = k - c0 < PACK_SPAN ? k - c0 : PACK_SPAN;
                if (i < m)
                    vec_to_bf16((uint16_t *)span, x + (size_t)i * k + c0, (size_t)len);
                else
                    memset(span, 0, (size_t)len * sizeof(uint16_t));
                for (int c = 0; c < len / CHUNK; c++) {
                    uint32_t *t = (uint32_t *)xv + packed_tile(k, b, c0 / CHUNK + c);
                    for (int p = 0; p < PAIRS; p++)
                        t[p * ROWS + j] = span[c * PAIRS + p];
                }
            }
        }
}

/* every tile 64 bytes wide: 16 f32, 32 bf16 or 16 pairs */
static void tiles_configure(void)
{
    amx_tiles_configure((const uint16_t[]){64, 64, 64, 64, 64, 64, 64}, NULL, 7);
}

/* C block (weight rows r.., input rows 16 b..) from tile memory to y: a
 * tile row is one weight row over the inputs, a row of y one input over
 * the weights. */
static void store_block(float *y, size_t ldy, int m, int r, int b, const float c[ROWS][ROWS])
{
    const int n = m - b * ROWS < ROWS ? m - b * ROWS : ROWS;
    __m512 v[ROWS];
    for (int i = 0; i < ROWS; i++)
        v[i] = _mm512_loadu_ps(c[i]);
    amx_transpose16(v);
    for (int j = 0; j < n; j++)
        _mm512_storeu_ps(y + (size_t)(b * ROWS + j) * ldy + r, v[j]);
}

/* A quarter of the L2 (sysconf; 2 MiB when it does not say): the packed
 * x of one column block. */
static size_t x_block_bytes(void)
{
    static atomic_size_t bytes;
    size_t b = atomic_load(&bytes);
    if (!b) {
        long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
        b = (l2 > 0 ? (size_t)l2 : (size_t)2 << 20) / 4;
        atomic_store(&bytes, b);
    }
    return b;
}

/* The accumulators of one C block between column blocks: tile 0-3's
 * contents kept in f32, so continuing the sum is exact (the same result as
 * one pass over every column). */
#define LOAD_OR_ZERO(t, first, a)                                                                 \
    do {                                                                                           \
        if (first)                                                                                 \
            _tile_zero(t);                                                                         \
        else                                                                                       \
            _tile_loadd(t, (a), 64);                                                               \
    } while (0)

void matmul_amx_rows(float *y, size_t ldy, const uint16_t *xv, int m, const struct weight_view *w,
                     int r0, int r1)
{
    const int k = w->cols, chunks = k / CHUNK, blocks = (m + ROWS - 1) / ROWS;
    const size_t stride = w->ld * sizeof(uint16_t);
    const uint32_t *xp = (const uint32_t *)xv;
    float c[ROWS][ROWS];
    /* columns in blocks whose packed x fits a quarter of the L2, so it
     * stays there over every weight row (x's whole rows, re-read per 16
     * weight rows from further out, cost opt-1.3b's 8192-column down
     * projection 15% of a prefill; a block of an eighth measured slower
     * than none); the partial sums wait in acc, or, where it cannot be
     * had, one block */
    const size_t tile_x = (size_t)PAIRS * ROWS * sizeof(uint32_t);
    int kb = (int)(x_block_bytes() / ((size_t)blocks * tile_x));
    kb = kb < 8 ? 8 : kb;
    float(*acc)[ROWS][ROWS] = NULL;
    if (chunks > kb)
        acc = cpu_scratch(CPU_SCRATCH_MM_ACC, (size_t)(r1 - r0) / ROWS * blocks * sizeof(*acc));
    if (!acc)
        kb = chunks;
    tiles_configure();
    for (int c0 = 0; c0 < chunks; c0 += kb) {
        const int c1 = c0 + kb < chunks ? c0 + kb : chunks;
        const bool first = c0 == 0, last = c1 == chunks;
        for (int r = r0; r < r1; r += ROWS) {
            const uint16_t *wr = (const uint16_t *)w->data + (size_t)r * w->ld;
            float(*a)[ROWS][ROWS] = acc ? acc + (size_t)(r - r0) / ROWS * blocks : NULL;
            int b = 0;
            for (; b + 4 <= blocks; b += 4) {
                LOAD_OR_ZERO(0, first, a ? a[b] : NULL);
                LOAD_OR_ZERO(1, first, a ? a[b + 1] : NULL);
                LOAD_OR_ZERO(2, first, a ? a[b + 2] : NULL);
                LOAD_OR_ZERO(3, first, a ? a[b + 3] : NULL);
                for (int ch = c0; ch < c1; ch++) {
                    _tile_loadd(4, wr + (size_t)ch * CHUNK, stride);
                    _tile_loadd(5, xp + packed_tile(k, b, ch), 64);
                    _tile_dpbf16ps(0, 4, 5);
                    _tile_loadd(6, xp + packed_tile(k, b + 1, ch), 64);
                    _tile_dpbf16ps(1, 4, 6);
                    _tile_loadd(5, xp + packed_tile(k, b + 2, ch), 64);
                    _tile_dpbf16ps(2, 4, 5);
                    _tile_loadd(6, xp + packed_tile(k, b + 3, ch), 64);
                    _tile_dpbf16ps(3, 4, 6);
                }
                if (!last) {
                    _tile_stored(0, a[b], 64);
                    _tile_stored(1, a[b + 1], 64);
                    _tile_stored(2, a[b + 2], 64);
                    _tile_stored(3, a[b + 3], 64);
                    continue;
                }
                _tile_stored(0, c, 64);
                store_block(y, ldy, m, r, b, c);
                _tile_stored(1, c, 64);
                store_block(y, ldy, m, r, b + 1, c);
                _tile_stored(2, c, 64);
                store_block(y, ldy, m, r, b + 2, c);
                _tile_stored(3, c, 64);
                store_block(y, ldy, m, r, b + 3, c);
            }
            for (; b < blocks; b++) {
                LOAD_OR_ZERO(0, first, a ? a[b] : NULL);
                for (int ch = c0; ch < c1; ch++) {
                    _tile_loadd(4, wr + (size_t)ch * CHUNK, stride);
                    _tile_loadd(5, xp + packed_tile(k, b, ch), 64);
                    _tile_dpbf16ps(0, 4, 5);
                }
                if (!last) {
                    _tile_stored(0, a[b], 64);
                    continue;
                }
                _tile_stored(0, c, 64);
                store_block(y, ldy, m, r, b, c);
            }
        }
    }
    _tile_release();
}
#endif
