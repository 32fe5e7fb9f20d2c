/* An in-process A/B of the compressed-tensors bf16 dot-product kernels
 * (backend/cpu/ctdot.h): avx512bf16 against avx512bf16-lut, one thread,
 * 2048 x 2048 weights of each CT type from memory (FOOTPRINT MiB of copies
 * cycled through), 1, 2, 4 and 8 input rows, split into ctlinear.c's
 * 128 KiB tasks, against a plain read of the same bytes, every time the
 * thread's CPU time (best of REPS, the three interleaved): on a machine
 * shared with other work, wall-clock GB/s moves with the load while these
 * ratios hold.
 *
 *     ctdot_ab [FOOTPRINT_MB [GROUP [REPS]]]   (defaults 64, 4, 5)
 *
 * GROUP: blocks of 32 sharing a scale (4: a group of 128 or a 128x128
 * FP8 block; 1: every block its own; 1000000: per tensor).
 * Not part of the build: it links the library's internals. From a build
 * directory (a CUDA build also needs -L for CUDA's lib and lib/stubs):
 *     g++ -O2 -I../src -x c ../tools/ctdot_ab.c -x none \
 *         $(tr -d '"' < CMakeFiles/shardswap.dir/linkLibs.rsp) -o ctdot_ab */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "backend/cpu/ctdot.h"
#include "backend/cpu/ctlinear.h"
#include "backend/cpu/vec.h"
#include "core/quant_ct.h"
#include "ab_read.h"

#define ROWS 2048
#define COLS 2048
#define MMAX 8

int main(int argc, char **argv)
{
    const size_t footprint = (size_t)(argc > 1 ? atoi(argv[1]) : 64) << 20;
    const size_t group = argc > 2 ? (size_t)atol(argv[2]) : 4;
    const int reps = argc > 3 ? atoi(argv[3]) : 5;
    static const enum dtype types[] = {DTYPE_CT_I8, DTYPE_CT_I4, DTYPE_CT_F8};
    static const char *const names[] = {"avx512bf16", "avx512bf16-lut"};
    static const ctdot_rows_fn fns[] = {ctdot_rows_avx512bf16, ctdot_rows_avx512bf16_lut};
    static const int ms[] = {1, 2, 4, 8};
    float *x = malloc((size_t)MMAX * COLS * sizeof(float)), *y = malloc((size_t)MMAX * ROWS * 4);
    uint16_t *xb = malloc((size_t)MMAX * COLS * sizeof(uint16_t));
    for (int i = 0; i < MMAX * COLS; i++)
        x[i] = (float)(i % 11 - 5) * 0.1f;
    vec_to_bf16(xb, x, (size_t)MMAX * COLS);
    volatile float sink = 0;
    printf("one thread, CPU time, best of %d; blocks sharing a scale: %zu\n", reps, group);
    printf("| type | m | read GB/s | %s ms, GB/s, / read | %s ms, GB/s, / read | speedup |\n",
           names[0], names[1]);
    for (int ti = 0; ti < 3; ti++) {
        const enum dtype t = types[ti];
        const size_t bb = quant_ct_block_bytes(t), mb = (size_t)ROWS * COLS / QUANT_CT_QK * bb;
        const int copies = footprint / mb ? (int)(footprint / mb) : 1;
        char *w = malloc(mb * copies);
        cpu_ctlinear_random_blocks(t, w, mb * copies / bb, 1);
        cpu_ctlinear_share_scales(t, w, mb * copies / bb, group);
        /* ctlinear.c's task: 128 KiB of rows, a multiple of 16 */
        int task = (int)((128 << 10) / (mb / ROWS));
        task = (task > ROWS / 8 ? ROWS / 8 : task + 15) / 16 * 16;
        double best[4][3];
        for (int i = 0; i < 4 * 3; i++)
            best[i / 3][i % 3] = 1e30;
        for (int rep = 0; rep < reps; rep++)
            for (int mi = 0; mi < 4; mi++)
                for (int k = 0; k < 3; k++) {
                    double s = cpu_now();
                    for (int c = 0; c < copies; c++) {
                        if (k == 2) {
                            sink += read_sum(w + (size_t)c * mb, mb);
                            continue;
                        }
                        const struct weight_view wv = {.dtype = t,
                                                       .data = w + (size_t)c * mb,
                                                       .rows = ROWS,
                                                       .cols = COLS,
                                                       .ld = COLS};
                        const struct ctdot_args a = {.y = y,
                                                     .ldy = ROWS,
                                                     .x = x,
                                                     .ldx = COLS,
                                                     .xb = xb,
                                                     .m = ms[mi],
                                                     .w = &wv,
                                                     .bf16 = true};
                        for (int r0 = 0; r0 < ROWS; r0 += task)
                            fns[k](&a, r0, r0 + task < ROWS ? r0 + task : ROWS);
                    }
                    s = (cpu_now() - s) / copies;
                    best[mi][k] = s < best[mi][k] ? s : best[mi][k];
                }
        for (int mi = 0; mi < 4; mi++) {
            const double rd = (double)mb / best[mi][2] / 1e9;
            printf("| %s | %d | %.1f |", dtype_name(t), ms[mi], rd);
            for (int k = 0; k < 2; k++)
                printf(" %.3f, %.1f, %.2f |", best[mi][k] * 1e3, (double)mb / best[mi][k] / 1e9,
                       (double)mb / best[mi][k] / 1e9 / rd);
            printf(" %.2fx |\n", best[mi][0] / best[mi][1]);
        }
        free(w);
    }
    free(x);
    free(y);
    free(xb);
    return 0;
}
