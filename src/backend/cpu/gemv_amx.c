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
 * one row (2026-12-06, the 2-core Xeon with AMX; cpu-kernels.md).
 *
 * A tile's 16 weight rows are taken GROUP_STRIDE_BYTES or more apart:
 * where rows are narrower (qwen2.5-0.5b's 896 columns: 1792 bytes), a run
 * of 16 x G rows goes as G tiles of rows g, g + G, ..., g + 15G, one after
 * the other over all the columns. Why: with adjacent rows, each 4 KiB page
 * held 2-3 of a tile's rows, and the tile loads stepped through them
 * forward and back (row r's line c, row r + 1's line c, row r's line c + 1
 * ...), which the L2 streamer (one stream a page) did not follow; a tile
 * of rows in pages of their own is 16 forward streams. A standalone loop
 * (2026-12-06, the 2-core Xeon with AMX, 2 threads, 1 GiB of huge pages
 * cycled) read 4864 x 896 5-8% faster at 1 and 8 input rows so (G 4-8;
 * 896 x 4864, whose rows are 9.5 KiB, unchanged), where software prefetch
 * of the next blocks in address order (to L1, L2 or L3, every line or one
 * in 2 or 4), TILELOADDT1, and 2-4 far-apart blocks in turn were 0-12%
 * slower. Each row's sums are the same as with adjacent rows (the same
 * chunks into the same accumulators), so the results do not change. */
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

/* weight rows a tile's rows are at least apart (a tile then has a page
 * of its own per row: 4 KiB, and more measured alike), and how many
 * tiles at most share a run of rows so (8: past that, at 128 columns and
 * less, a run is more rows than a call's pieces have) */
#define GROUP_STRIDE_BYTES 9216
#define GROUPS_MAX 8

int gemv_amx_groups(size_t row_bytes)
{
    const size_t g = (GROUP_STRIDE_BYTES + row_bytes - 1) / (row_bytes ? row_bytes : 1);
    return g > GROUPS_MAX ? GROUPS_MAX : (int)g;
}

/* input rows from which xv is made by transposes: they cost the same
 * whatever m, a pair at a time costs m stores (a 16 x 4864 call,
 * 2026-12-06, the 2-core Xeon with AMX, best of 2000: 12 rows 26.0 ->
 * 22.7-23.8 us, 16 rows 33.2 -> 27.0-29.1; 8 rows alike, 4 rows 12 -> 13.7
 * from 4 on) */
#define PACK_TRANSPOSE_M 12

void gemv_amx_pack_x(uint16_t *xv, const uint16_t *xb, size_t ldx, int m, int cols)
{
    const int pairs = cols / 2;
    const __mmask16 rows = (__mmask16)((1u << m) - 1);
    int p = 0;
    if (m == 1) { /* the pair layout of one row is the row */
        memcpy(xv, xb, (size_t)cols * sizeof(uint16_t));
        return;
    }
    /* 16 pairs at a time: m rows' 16 pairs (one vector each, the rest
     * zero) transposed, so vector q is pair p + q's m values in row order */
    for (; m >= PACK_TRANSPOSE_M && p + 16 <= pairs; p += 16) {
        __m512 r[16];
        for (int i = 0; i < 16; i++)
            r[i] = i < m ? _mm512_castsi512_ps(_mm512_loadu_si512(xb + (size_t)i * ldx + 2 * p))
                         : _mm512_setzero_ps();
        amx_transpose16(r);
        for (int q = 0; q < 16; q++)
            _mm512_mask_storeu_ps(xv + (size_t)(p + q) * m * 2, rows, r[q]);
    }
    for (; p < pairs; p++)
        for (int i = 0; i < m; i++)
            memcpy(xv + ((size_t)p * m + i) * 2, xb + (size_t)i * ldx + 2 * p,
                   2 * sizeof(uint16_t));
    if (cols % 2)
        for (int i = 0; i < m; i++)
            xv[((size_t)pairs * m + i) * 2] = xb[(size_t)i * ldx + cols - 1];
}

/* y[i * ldy + j * gs] = c[0][j][i] + c[1][j][i] for i < m, j < 16: a
 * block's two stored accumulators (16 weight rows x 16 floats, the first m
 * used) added, the same sums the scalar loop makes, and transposed to y's
 * rows; its weight rows gs apart (a group's tile). */
static void block_put(float c[2][16][16], int m, float *y, size_t ldy, int gs)
{
    if (m < 3) {
        for (int i = 0; i < m; i++)
            for (int j = 0; j < 16; j++)
                y[(size_t)i * ldy + (size_t)j * gs] = c[0][j][i] + c[1][j][i];
        return;
    }
    __m512 r[16];
    for (int j = 0; j < 16; j++)
        r[j] = _mm512_add_ps(_mm512_load_ps(c[0][j]), _mm512_load_ps(c[1][j]));
    amx_transpose16(r);
    if (gs == 1) {
        for (int i = 0; i < m; i++)
            _mm512_storeu_ps(y + (size_t)i * ldy, r[i]);
        return;
    }
    const __m512i at =
        _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                           _mm512_set1_epi32(gs));
    for (int i = 0; i < m; i++)
        _mm512_i32scatter_ps(y + (size_t)i * ldy, at, r[i], 4);
}

/* a block whose sums wait to be put into y (acc NULL: none) */
struct waiting {
    float (*acc)[16][16];
    float *y;
    int gs;
};

static void waiting_put(struct waiting *wt, int m, size_t ldy)
{
    if (wt->acc)
        block_put(wt->acc, m, wt->y, ldy, wt->gs);
    wt->acc = NULL;
}

/* One tile of 16 weight rows, `stride` bytes apart from wr, over all the
 * columns into out; the waiting block's sums put into y once its
 * successor's first chunks are issued. */
static void block_run(const struct gemv_args *a, const uint16_t *wr, size_t stride, int chunks,
                      float out[2][16][16], struct waiting *wt)
{
    const int m = a->m;
    const size_t chunk_x = (size_t)16 * 2 * m; /* bf16 of x per chunk */
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
        if (c == PUT_AFTER_CHUNKS)
            waiting_put(wt, m, a->ldy);
    }
    if (c < chunks) {
        _tile_loadd(2, wr + (size_t)c * 32, stride);
        _tile_loadd(4, a->xv + (size_t)c * chunk_x, m * 4);
        _tile_dpbf16ps(0, 2, 4);
    }
    _tile_stored(0, out[0], 64);
    _tile_stored(1, out[1], 64);
    waiting_put(wt, m, a->ldy); /* a block too narrow to reach PUT_AFTER_CHUNKS */
}

void gemv_rows_amx(const struct gemv_args *a, int r0, int r1)
{
    const struct weight_view *w = a->w;
    const int cols = w->cols;
    if (w->dtype != DTYPE_BF16 || !a->xv || cols % 32 != 0) {
        gemv_rows_avx512bf16(a, r0, r1);
        return;
    }
    const int chunks = cols / 32;
    const size_t stride = w->ld * sizeof(uint16_t);
    const size_t groups = (size_t)gemv_amx_groups(stride);
    /* two blocks' stored accumulators: this one's and the waiting one's */
    _Alignas(64) float acc[2][2][16][16];
    struct waiting wt = {NULL, NULL, 1};
    int k = 0, r = r0;
    tiles_configure(a->m);
    while (r1 - r >= 16) {
        /* 16 x g rows as g tiles of rows g apart (fewer at the piece's end) */
        const int g = (int)((size_t)(r1 - r) / 16 < groups ? (size_t)(r1 - r) / 16 : groups);
        for (int t = 0; t < g; t++, k++) {
            const uint16_t *wr = (const uint16_t *)w->data + (size_t)(r + t) * w->ld;
            block_run(a, wr, stride * (size_t)g, chunks, acc[k & 1], &wt);
            wt = (struct waiting){acc[k & 1], a->y + r + t, g};
        }
        r += 16 * g;
    }
    waiting_put(&wt, a->m, a->ldy);
    _tile_release();
    if (r < r1)
        gemv_rows_avx512bf16(a, r, r1);
}
#endif
