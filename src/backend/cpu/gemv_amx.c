/* The GEMV for bf16 weights in bf16 mode on AMX (AMX-TILE + AMX-BF16): this
 * file alone is compiled with those instruction sets (CMakeLists.txt), and
 * runs only where gemv.c found them and Linux granted the tile data
 * (gemv_amx_enable).
 *
 * The weights are the A operand as they lie: a tile is 16 weight rows x 32
 * bf16 columns, loaded with the row stride, no repacking. x is the B
 * operand, packed once per call in the pair layout TDPBF16PS reads (xv: for
 * each pair of columns, every input row's two values side by side), so the
 * product is C (16 weight rows x m) += W_block . x^T, summed in f32 from
 * exact bf16 products: bf16 mode's result, in another order than the vector
 * kernels. Two accumulators alternate over the column chunks. Rows past the
 * last whole 16, and matrices whose columns are not a multiple of 32, go
 * to the AVX512-BF16 kernel (every AMX CPU has it).
 *
 * A block's sums leave as two stored tiles (16 weight rows x m floats),
 * which y wants transposed (m rows x 16). They are put into y only once
 * the next block's first weight loads are in flight (PUT_AFTER_CHUNKS), and
 * from 3 input rows on with vector shuffles (block_put). Why: put at once,
 * in scalar code, the epilogue waited on the block's last multiply and so
 * on its last loads from memory, and its 4 instructions an output kept the
 * next block's loads out of the window; at 8 input rows (128 outputs a
 * block) that cost a 4864 x 896 product 15-20% of its read rate against
 * one row (2026-12-06, the 2-core Xeon with AMX; cpu-kernels.md). */
#include "backend/cpu/gemv_isa.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <stdbool.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "backend/cpu/amx_tiles.h"

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

bool gemv_amx_enable(void)
{
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}

/* tiles: 0, 1 accumulators (16 x m f32); 2, 3 weights (16 x 32 bf16);
 * 4, 5 x (16 pairs x m) */
static void tiles_configure(int m)
{
    const uint16_t w = (uint16_t)(m * 4);
    amx_tiles_configure((const uint16_t[]){w, w, 64, 64, w, w}, NULL, 6);
}

/* the previous block's sums are put into y once this many column chunks
 * of the next block are issued and 2 more (2-14 measured alike; 0 was
 * 2-8% slower at 4-16 input rows, and putting them at once, before the
 * next block, up to 12% slower) */
#define PUT_AFTER_CHUNKS 4

/* y[i * ldy + j] = c[0][j][i] + c[1][j][i] for i < m, j < 16: a block's two
 * stored accumulators (16 weight rows x 16 floats, the first m used) added,
 * the same sums the scalar loop makes, and transposed to y's rows. */
static void block_put(float c[2][16][16], int m, float *y, size_t ldy)
{
    if (m < 3) {
        for (int i = 0; i < m; i++)
            for (int j = 0; j < 16; j++)
                y[(size_t)i * ldy + j] = c[0][j][i] + c[1][j][i];
        return;
    }
    __m512 r[16];
    for (int j = 0; j < 16; j++)
        r[j] = _mm512_add_ps(_mm512_load_ps(c[0][j]), _mm512_load_ps(c[1][j]));
    amx_transpose16(r);
    for (int i = 0; i < m; i++)
        _mm512_storeu_ps(y + (size_t)i * ldy, r[i]);
}

void gemv_rows_amx(const struct gemv_args *a, int r0, int r1)
{
    const struct weight_view *w = a->w;
    const int m = a->m, cols = w->cols;
    if (w->dtype != DTYPE_BF16 || !a->xv || cols % 32 != 0) {
        gemv_rows_avx512bf16(a, r0, r1);
        return;
    }
    const int chunks = cols / 32;
    const size_t stride = w->ld * sizeof(uint16_t);
    const size_t chunk_x = (size_t)16 * 2 * m; /* bf16 of x per chunk */
    const int whole = r0 + (r1 - r0) / 16 * 16;
    /* two blocks' stored accumulators: this one's and the previous one's,
     * whose sums wait (from row `waiting`, -1: none) to be put into y */
    _Alignas(64) float acc[2][2][16][16];
    int waiting = -1;
    tiles_configure(m);
    for (int r = r0; r < whole; r += 16) {
        const uint16_t *wr = (const uint16_t *)w->data + (size_t)r * w->ld;
        float(*mine)[16][16] = acc[((r - r0) / 16) & 1];
        _tile_zero(0);
        _tile_zero(1);
        int c = 0;
        for (; c + 2 <= chunks; c += 2) {
            _tile_loadd(2, wr + (size_t)c * 32, stride);
            _tile_loadd(4, a->xv + (size_t)c * chunk_x, m * 4);
            _tile_dpbf16ps(0, 2, 4);
            _tile_loadd(3, wr + (size_t)(c + 1) * 32, stride);
            _tile_loadd(5, a->xv + (size_t)(c + 1) * chunk_x, m * 4);
            _tile_dpbf16ps(1, 3, 5);
            if (c == PUT_AFTER_CHUNKS && waiting >= 0) {
                block_put(acc[((waiting - r0) / 16) & 1], m, a->y + waiting, a->ldy);
                waiting = -1;
            }
        }
        if (c < chunks) {
            _tile_loadd(2, wr + (size_t)c * 32, stride);
            _tile_loadd(4, a->xv + (size_t)c * chunk_x, m * 4);
            _tile_dpbf16ps(0, 2, 4);
        }
        _tile_stored(0, mine[0], 64);
        _tile_stored(1, mine[1], 64);
        if (waiting >= 0) /* a block too narrow to reach PUT_AFTER_CHUNKS */
            block_put(acc[((waiting - r0) / 16) & 1], m, a->y + waiting, a->ldy);
        waiting = r;
    }
    if (waiting >= 0)
        block_put(acc[((waiting - r0) / 16) & 1], m, a->y + waiting, a->ldy);
    _tile_release();
    if (whole < r1)
        gemv_rows_avx512bf16(a, whole, r1);
}
#endif
