/* The bf16 mode's one-input-row GEMV over several far-apart streams of
 * weights at once: a task brings up to GEMV_STREAMS_MAX pieces (runs of
 * rows, each the next part of one sub-lane of the thread's lane: lanes.h),
 * and each step reads one 64-byte vector of the current row of every piece,
 * each prefetched as gemv_avx512bf16_r1f.c prefetches its one stream (1 KiB
 * ahead to L1, 4 KiB to L2; past a row's end the prefetch runs into the
 * piece's next row, which is next in memory). A standalone loop on the
 * 2-core Xeon with AMX (2 threads x 128 MB, qwen's 1792-byte rows, VDPBF16PS
 * against x in L1, 2026-12-06) read 36.4-37.2 GB/s so over 4 streams per
 * thread against 34.4-35.5 over one: the core keeps more lines in flight
 * for several streams than for one.
 *
 * Each row is summed exactly as avx512bf16-r1 sums it (its vectors in
 * order into one accumulator from zero, _mm512_reduce_add_ps, then the
 * columns past the last whole 32 one by one against the rounded x), so the
 * results are bitwise those of every other bf16-mode kernel; only the order
 * in which rows are visited differs. Pieces of another shape (more input
 * rows, weights not bf16, a piece whose columns differ from the first's)
 * run one after the other through gemv_rows_avx512bf16_r1f. Compiled with
 * the same flags as gemv_avx512bf16.c (CMakeLists.txt).
 *
 * gemv_pieces_avx512bf16_sn (`avx512bf16-s2n`, `-s4n`) reads the same
 * streams with no software prefetch (its other pieces through
 * gemv_rows_avx512bf16_r1, which has none either): on AMD EPYC Zen 4 the
 * two prefetches a line cost more than they bring. Zen 4 (family 25 model
 * 17, 2 vCPUs), 2 threads, one input row, kernels alternated in one process
 * over 1 GB of bf16 weights, 13-15 rounds, median ratio of each round's
 * GB/s to avx2-s3's (2026-12-07, the machine's read rate moving between 16
 * and 70 GB/s meanwhile): 4864 x 896 s2 0.91, s2n 1.09, s4n 1.14; 896 x
 * 4864 s2 1.14, s4 1.18, s2n 1.36, s4n 1.14; 896 x 896 s2 1.01, s2n 1.09;
 * against a plain read of memory taking its turn in the same rotation
 * (membw_read, 2 threads), median of 9 rounds of kernel / read: 8192 x 2048
 * s2 0.86, s2n 0.98, r1f 0.87; 2048 x 8192 s2 0.70, s4n 0.88, r1f 0.88.
 * A whole decode did not show it: llama-3.2-1b with -s2n against -s2
 * forced (SHARDSWAP_GEMV), alternated, 1.44x, 1.05x, 0.89x, as the
 * machine's read rate moved 36-65 GB/s. The calibration takes them only
 * where it measures them faster. */
#include "backend/cpu/gemv_isa.h"

#include "core/dtype.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define S_PF_NEAR 1024
#define S_PF_FAR 4096

/* where one stream stands: its operands, its next row, its end */
struct s_stream {
    const struct gemv_args *a;
    const char *w; /* its next row's weights */
    const uint16_t *xb;
    size_t ld_bytes;
    int r, r1;
};

/* One row of each of the n streams (n constant after inlining), cols
 * columns (kv of them whole vectors of 32), and each stream moved to its
 * next row; each line prefetched twice ahead where pf (constant after
 * inlining). */
static inline __attribute__((always_inline)) void s_step(struct s_stream *st, const int n, int kv,
                                                         int cols, const bool pf)
{
    __m512 acc[GEMV_STREAMS_MAX];
    const char *wr[GEMV_STREAMS_MAX];
#pragma GCC unroll 8
    for (int s = 0; s < n; s++) {
        acc[s] = _mm512_setzero_ps();
        wr[s] = st[s].w;
    }
    for (int c = 0; c < kv; c += 32) {
        const size_t off = (size_t)c * 2;
#pragma GCC unroll 8
        for (int s = 0; s < n; s++) {
            const __m512bh wv = (__m512bh)_mm512_loadu_si512(wr[s] + off);
            if (pf) {
                _mm_prefetch(wr[s] + off + S_PF_NEAR, _MM_HINT_T0);
                _mm_prefetch(wr[s] + off + S_PF_FAR, _MM_HINT_T1);
            }
            const __m512bh xv = (__m512bh)_mm512_loadu_si512(st[s].xb + c);
            acc[s] = _mm512_dpbf16_ps(acc[s], wv, xv);
        }
    }
#pragma GCC unroll 8
    for (int s = 0; s < n; s++) {
        const struct gemv_args *a = st[s].a;
        float sum = _mm512_reduce_add_ps(acc[s]);
        for (int c = kv; c < cols; c++) {
            uint32_t u = (uint32_t)((const uint16_t *)(const void *)wr[s])[c] << 16;
            float f;
            __builtin_memcpy(&f, &u, 4);
            sum += f * a->x[c];
        }
        a->y[st[s].r] = sum;
        st[s].r++;
        st[s].w += st[s].ld_bytes;
    }
}

/* n streams in lockstep until one ends */
static inline __attribute__((always_inline)) void s_run(struct s_stream *st, int n, int kv,
                                                        int cols, const bool pf)
{
    int left = 1 << 30;
    for (int s = 0; s < n; s++)
        if (st[s].r1 - st[s].r < left)
            left = st[s].r1 - st[s].r;
    for (int i = 0; i < left; i++)
        switch (n) {
#define S_CASE(k)                                                                                  \
    case k:                                                                                        \
        s_step(st, k, kv, cols, pf);                                                               \
        break;
            S_CASE(1)
            S_CASE(2)
            S_CASE(3)
            S_CASE(4)
            S_CASE(5)
            S_CASE(6)
            S_CASE(7)
            S_CASE(8)
#undef S_CASE
        }
}

static inline __attribute__((always_inline)) void s_pieces(const struct gemv_piece *p, int n,
                                                           const bool pf)
{
    bool lockstep = n <= GEMV_STREAMS_MAX;
    for (int i = 0; i < n && lockstep; i++)
        lockstep = p[i].a->m == 1 && p[i].a->xb && p[i].a->w->dtype == DTYPE_BF16 &&
                   p[i].a->w->cols == p[0].a->w->cols;
    if (!lockstep) {
        for (int i = 0; i < n; i++)
            (pf ? gemv_rows_avx512bf16_r1f : gemv_rows_avx512bf16_r1)(p[i].a, p[i].r0, p[i].r1);
        return;
    }
    const int cols = p[0].a->w->cols, kv = cols / 32 * 32;
    struct s_stream st[GEMV_STREAMS_MAX];
    int live = 0;
    for (int i = 0; i < n; i++)
        if (p[i].r1 > p[i].r0)
            st[live++] = (struct s_stream){
                .a = p[i].a,
                .w = weight_row(p[i].a->w, p[i].r0),
                .xb = p[i].a->xb,
                .ld_bytes = dtype_row_bytes(DTYPE_BF16, p[i].a->w->ld),
                .r = p[i].r0,
                .r1 = p[i].r1,
            };
    /* in lockstep while every stream has rows; the ones left go on */
    while (live > 0) {
        s_run(st, live, kv, cols, pf);
        int k = 0;
        for (int s = 0; s < live; s++)
            if (st[s].r < st[s].r1)
                st[k++] = st[s];
        live = k;
    }
}

void gemv_pieces_avx512bf16_s(const struct gemv_piece *p, int n)
{
    s_pieces(p, n, true);
}

void gemv_pieces_avx512bf16_sn(const struct gemv_piece *p, int n)
{
    s_pieces(p, n, false);
}

#else
/* not x86: gemv.c never picks it */
void gemv_pieces_avx512bf16_s(const struct gemv_piece *p, int n)
{
    for (int i = 0; i < n; i++)
        gemv_rows_scalar(p[i].a, p[i].r0, p[i].r1);
}

void gemv_pieces_avx512bf16_sn(const struct gemv_piece *p, int n)
{
    gemv_pieces_avx512bf16_s(p, n);
}
#endif
