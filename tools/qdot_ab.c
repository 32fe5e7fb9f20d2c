/* An in-process A/B of the single-row quantized kernels (backend/cpu/
 * qdot.h) of the types of 32: `vnni` against `vnni-near`, one thread, one
 * input row, ROWS x COLS weights of each type from memory (FOOTPRINT MiB
 * of copies cycled through), split into qlinear.c's 128 KiB tasks, against
 * a plain read of the same bytes, every time the thread's CPU time (best
 * of REPS, all interleaved): on a machine shared with other work,
 * wall-clock GB/s moves with the load while these ratios hold.
 *
 *     qdot_ab [ROWS [COLS [FOOTPRINT_MB [REPS]]]]   (defaults 4864, 896, 256, 7)
 *
 * Built with -DQDOT_AB_BEFORE and another tree's src/ first on the include
 * path, another kernel joins: that tree's `vnni-near` (its qdot_body.h
 * compiled here), for a before/after in one process. `vnni-near x per
 * call` is this tree's kernel against x laid out once per call
 * (qdot_pack_x_xr, as qlinear.c does), `vnni-near` the same kernel laying
 * x out per task (a.xp NULL).
 * Not part of the build: it links the library's internals. From a build
 * directory (a CUDA build also needs -L for CUDA's lib and lib/stubs):
 *     gcc -O2 -march=native [-DQDOT_AB_BEFORE -I OLD/src] -I../src ../tools/qdot_ab.c \
 *         $(tr -d '"' < CMakeFiles/shardswap.dir/linkLibs.rsp) -lstdc++ -o qdot_ab */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "backend/cpu/qdot.h"
#include "backend/cpu/qlinear.h"
#include "ab_read.h"

#ifdef QDOT_AB_BEFORE
/* the other tree's vnni-near, as its qdot_vnni_near.c builds it */
#define QD_DOT(u, s) _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s)
#define QDOT_ROWS_FN qdot_rows_near_before
#define QD_K512
#define QD_XR
#define QD_PREFETCH 2048
#include "backend/cpu/qdot_body.h"
#define N_KERNELS 4
#else
#define N_KERNELS 3
#endif

int main(int argc, char **argv)
{
    const int rows = argc > 1 ? atoi(argv[1]) : 4864, cols = argc > 2 ? atoi(argv[2]) : 896;
    const size_t footprint = (size_t)(argc > 3 ? atoi(argv[3]) : 256) << 20;
    const int reps = argc > 4 ? atoi(argv[4]) : 7;
    static const enum dtype types[] = {DTYPE_Q8_0, DTYPE_Q4_0, DTYPE_Q5_0, DTYPE_Q5_1};
    /* vnni-near twice: x laid out per task in the kernel (a.xp NULL), and
     * once per call as qlinear.c lays it out (qdot_pack_x_xr, its time
     * counted in the call's) */
#ifdef QDOT_AB_BEFORE
    static const char *const names[] = {"vnni", "vnni-near", "vnni-near x per call",
                                        "vnni-near before"};
    static const qdot_rows_fn fns[] = {qdot_rows_vnni, qdot_rows_vnni_near, qdot_rows_vnni_near,
                                       qdot_rows_near_before};
#else
    static const char *const names[] = {"vnni", "vnni-near", "vnni-near x per call"};
    static const qdot_rows_fn fns[] = {qdot_rows_vnni, qdot_rows_vnni_near, qdot_rows_vnni_near};
#endif
    const int per_call = 2; /* fns[per_call] reads x laid out per call */
    float *x = malloc((size_t)cols * sizeof(float)), *y = malloc((size_t)rows * sizeof(float));
    char *xq = malloc(qdot_x_row_bytes(DTYPE_Q8_0, cols) + 64);
    char *xr = aligned_alloc(64, qdot_xr_row_bytes(cols));
    for (int i = 0; i < cols; i++)
        x[i] = (float)(i % 11 - 5) * 0.1f;
    qdot_quantize_x(DTYPE_Q8_0, x, xq, cols);
    volatile float sink = 0;
    printf("%d x %d, one thread, one input row, CPU time, best of %d\n", rows, cols, reps);
    printf("| type | read GB/s |");
    for (int k = 0; k < N_KERNELS; k++)
        printf(" %s GB/s, / read |", names[k]);
    printf("\n");
    for (int ti = 0; ti < 4; ti++) {
        const enum dtype t = types[ti];
        const size_t row_bytes = dtype_row_bytes(t, cols), mb = (size_t)rows * row_bytes;
        const int copies = footprint / mb ? (int)(footprint / mb) : 1;
        char *w = malloc(mb * copies);
        cpu_qlinear_random_blocks(t, w, mb * copies / quant_block_bytes(t), 1);
        /* qlinear.c's task: 128 KiB of rows, at most an eighth, a multiple of 16 */
        int task = (int)((128 << 10) / row_bytes);
        task = ((task > (rows + 7) / 8 ? (rows + 7) / 8 : task) + 15) / 16 * 16;
        double best[N_KERNELS + 1];
        for (int k = 0; k <= N_KERNELS; k++)
            best[k] = 1e30;
        for (int rep = 0; rep < reps; rep++)
            for (int k = 0; k <= N_KERNELS; k++) {
                double s = cpu_now();
                for (int c = 0; c < copies; c++) {
                    if (k == N_KERNELS) {
                        sink += read_sum(w + (size_t)c * mb, mb);
                        continue;
                    }
                    const struct weight_view wv = {.dtype = t,
                                                   .data = w + (size_t)c * mb,
                                                   .rows = rows,
                                                   .cols = cols,
                                                   .ld = (size_t)cols};
                    if (k == per_call)
                        qdot_pack_x_xr(xq, cols, xr);
                    const struct qdot_args a = {.y = y,
                                                .ldy = (size_t)rows,
                                                .xq = xq,
                                                .xp = k == per_call ? xr : NULL,
                                                .xp_ld = qdot_xr_row_bytes(cols),
                                                .m = 1,
                                                .w = &wv};
                    for (int r0 = 0; r0 < rows; r0 += task)
                        fns[k](&a, r0, r0 + task < rows ? r0 + task : rows);
                }
                s = (cpu_now() - s) / copies;
                best[k] = s < best[k] ? s : best[k];
            }
        const double rd = (double)mb / best[N_KERNELS] / 1e9;
        printf("| %s | %.1f |", dtype_name(t), rd);
        for (int k = 0; k < N_KERNELS; k++)
            printf(" %.1f, %.2f |", (double)mb / best[k] / 1e9, (double)mb / best[k] / 1e9 / rd);
        printf("\n");
        free(w);
    }
    free(x);
    free(y);
    free(xq);
    free(xr);
    return 0;
}
