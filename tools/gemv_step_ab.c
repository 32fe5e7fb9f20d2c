/* An in-process A/B of how the GEMV splits a call (backend/cpu/lanes.h):
 * in claims (a task per lane, small steps, the last ones one by one)
 * against one 128 KiB step per pool task, over qwen2.5-0.5b's decode step
 * of bf16 GEMVs in order (24 layers of q, k, v grouped, o, gate and up
 * grouped, down; then the 151936 x 896 head: 988 MB from huge pages, one
 * input row, bf16 mode, the calibration's kernels), the two alternated
 * step by step, the order swapped every round. Per round, each way's step
 * time by the wall and by the process's CPU time (both threads): on a
 * machine shared with other work the wall clock moves with the load, the
 * CPU time less. Prints the medians and quartiles of steps / claims.
 *
 *     gemv_step_ab [ROUNDS [THREADS]]   (defaults 40, 2)
 *
 * Not part of the build: it links the library's internals. From a build
 * directory (a CUDA build also needs -L for CUDA's lib and lib/stubs):
 *     gcc -O2 -march=native -I../src ../tools/gemv_step_ab.c \
 *         $(tr -d '"' < CMakeFiles/shardswap.dir/linkLibs.rsp) -lstdc++ -o gemv_step_ab */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "backend/cpu/cpu.h"
#include "backend/cpu/linear.h"
#include "core/dtype.h"

#define LAYERS 24
#define HID 896
#define KV 128
#define FF 4864
#define VOCAB 151936

static double now(clockid_t c)
{
    struct timespec t;
    clock_gettime(c, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static struct weight_view view(const uint16_t *p, int rows, int cols)
{
    return (struct weight_view){
        .dtype = DTYPE_BF16, .data = (const char *)p, .rows = rows, .cols = cols, .ld = (size_t)cols};
}

/* one decode step's GEMVs: 0, or the first error */
static int step(uint16_t *w, float *x, float *xf, float *y)
{
    uint16_t *p = w;
    for (int l = 0; l < LAYERS; l++) {
        struct kern_linear_job qkv[3];
        const int rows[3] = {HID, KV, KV};
        float *yo = y;
        for (int i = 0; i < 3; i++) {
            qkv[i] = (struct kern_linear_job){.y = yo, .x = x, .m = 1, .w = view(p, rows[i], HID)};
            p += (size_t)rows[i] * HID;
            yo += rows[i];
        }
        if (cpu_gemv_group(qkv, 3, KERN_COMPUTE_BF16) < 0)
            return -1;
        const struct weight_view o = view(p, HID, HID);
        p += (size_t)HID * HID;
        if (cpu_gemv(y, x, 1, &o, KERN_COMPUTE_BF16) < 0)
            return -1;
        struct kern_linear_job gu[2];
        for (int i = 0; i < 2; i++) {
            gu[i] = (struct kern_linear_job){.y = xf + (size_t)i * FF, .x = x, .m = 1,
                                             .w = view(p, FF, HID)};
            p += (size_t)FF * HID;
        }
        if (cpu_gemv_group(gu, 2, KERN_COMPUTE_BF16) < 0)
            return -1;
        const struct weight_view d = view(p, HID, FF);
        p += (size_t)HID * FF;
        if (cpu_gemv(y, xf, 1, &d, KERN_COMPUTE_BF16) < 0)
            return -1;
    }
    const struct weight_view head = view(p, VOCAB, HID);
    return cpu_gemv(y, x, 1, &head, KERN_COMPUTE_BF16);
}

int main(int argc, char **argv)
{
    const int rounds = argc > 1 ? atoi(argv[1]) : 40, threads = argc > 2 ? atoi(argv[2]) : 2;
    const size_t layer = (size_t)HID * (HID + 2 * KV) + (size_t)HID * HID + 3 * (size_t)FF * HID;
    const size_t n = LAYERS * layer + (size_t)VOCAB * HID, huge = (size_t)2 << 20;
    const size_t bytes = (n * 2 + huge - 1) / huge * huge;
    uint16_t *w = NULL;
    if (posix_memalign((void **)&w, huge, bytes) != 0)
        return 1;
    (void)madvise(w, bytes, MADV_HUGEPAGE);
    for (size_t i = 0; i < n; i++)
        w[i] = f32_to_bf16((float)((int)(i * 7919 % 13) - 6) * 0.01f);
    float *x = malloc(FF * sizeof(float)), *xf = malloc(2 * FF * sizeof(float));
    float *y = malloc(VOCAB * sizeof(float));
    for (int i = 0; i < FF; i++)
        x[i] = xf[i] = (float)(i % 11 - 5) * 0.1f;
    memcpy(xf + FF, xf, FF * sizeof(float));
    cpu_set_threads(threads);
    printf("%s; %.0f MB a step, %d threads, %d rounds\n", cpu_gemv_kernels(), (double)n * 2 / 1e6,
           threads, rounds);
    for (int k = 0; k < 2; k++) /* warm: pages touched, pool started */
        if (step(w, x, xf, y) < 0)
            return 1;
    double *rw = malloc((size_t)rounds * sizeof(double)), *rc = malloc((size_t)rounds * sizeof(double));
    double best[2][2] = {{1e9, 1e9}, {1e9, 1e9}}; /* [claims][wall, cpu] */
    for (int r = 0; r < rounds; r++) {
        double t[2][2];
        for (int k = 0; k < 2; k++) {
            const int claims = (r + k) % 2;
            cpu_gemv_split_claims(claims);
            const double c0 = now(CLOCK_PROCESS_CPUTIME_ID), w0 = now(CLOCK_MONOTONIC);
            if (step(w, x, xf, y) < 0)
                return 1;
            t[claims][0] = now(CLOCK_MONOTONIC) - w0;
            t[claims][1] = now(CLOCK_PROCESS_CPUTIME_ID) - c0;
            for (int q = 0; q < 2; q++)
                if (t[claims][q] < best[claims][q])
                    best[claims][q] = t[claims][q];
        }
        rw[r] = t[0][0] / t[1][0];
        rc[r] = t[0][1] / t[1][1];
    }
    cpu_gemv_split_claims(true);
    qsort(rw, (size_t)rounds, sizeof(double), cmp);
    qsort(rc, (size_t)rounds, sizeof(double), cmp);
    const int q1 = rounds / 4, md = rounds / 2, q3 = 3 * rounds / 4;
    printf("steps / claims, wall: median %.3f (q1-q3 %.3f-%.3f); CPU time: median %.3f (%.3f-%.3f)\n",
           rw[md], rw[q1], rw[q3], rc[md], rc[q1], rc[q3]);
    printf("best step, wall ms: steps %.2f, claims %.2f (%.1f and %.1f GB/s)\n", 1e3 * best[0][0],
           1e3 * best[1][0], (double)n * 2 / best[0][0] / 1e9, (double)n * 2 / best[1][0] / 1e9);
    free(rw);
    free(rc);
    free(w);
    free(x);
    free(xf);
    free(y);
    return 0;
}
