/* An in-process A/B of how the quantized products split a call
 * (backend/cpu/lanes.h): in claims (a task per lane, small steps, the last
 * ones one by one) against one 128 KiB step per pool task, over the decode
 * step of qwen2.5-0.5b Q4_K_M's products in order, with its types (24
 * layers of q, k, v grouped: Q5_0, Q5_0 and Q8_0 or Q5_0; o Q5_0; gate
 * and up grouped, Q5_0; down Q6_K or Q4_K; then the 151936 x 896 Q8_0
 * head: 392 MB of random blocks from huge pages, one input row, bf16 mode,
 * the calibration's kernels), the two alternated step by step, the order
 * swapped every round. Per round, each way's step time by the wall and by
 * the process's CPU time (both threads), and each kind of call's wall
 * time. Prints the medians and quartiles of steps / claims, and per kind
 * of call the median wall time and its GB/s in each way.
 *
 *     qstep_ab [ROUNDS [THREADS]]   (defaults 40, 2)
 *
 * QS_SPLIT=1 runs q, k and v as three calls instead of a group; QS_V5=1
 * makes every layer's v Q5_0.
 *
 * Not part of the build: it links the library's internals. From a build
 * directory (a CUDA build also needs -L for CUDA's lib and lib/stubs):
 *     gcc -O2 -march=native -I../src ../tools/qstep_ab.c \
 *         $(tr -d '"' < CMakeFiles/shardswap.dir/linkLibs.rsp) -lstdc++ -o qstep_ab */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "backend/cpu/cpu.h"
#include "backend/cpu/linear.h"
#include "backend/cpu/qlinear.h"
#include "core/dtype.h"
#include "core/quant.h"

#define LAYERS 24
#define HID 896
#define KV 128
#define FF 4864
#define VOCAB 151936

/* the kinds of call timed apart */
enum { K_QKV, K_O, K_GU, K_DOWN, K_HEAD, K_N };
static const char *const kind_name[K_N] = {"q,k,v 896+2x128 x 896", "o 896 x 896",
                                           "gate,up 2x4864 x 896", "down 896 x 4864",
                                           "head 151936 x 896"};
static size_t kind_bytes[K_N];

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

/* the next rows x cols of type t from *p (random blocks, seeded) */
static struct weight_view take(char **p, enum dtype t, int rows, int cols, int kind, bool fill)
{
    const size_t bytes = dtype_row_bytes(t, (size_t)cols) * (size_t)rows;
    if (fill)
        cpu_qlinear_random_blocks(t, *p, (size_t)rows * cols / (size_t)dtype_block(t),
                                  (uint64_t)(uintptr_t)*p);
    const struct weight_view w = {
        .dtype = t, .data = *p, .rows = rows, .cols = cols, .ld = (size_t)cols};
    *p += (bytes + 63) / 64 * 64;
    if (kind >= 0 && fill)
        kind_bytes[kind] += bytes;
    return w;
}

/* One decode step's products from w (filling them first when fill, w NULL:
 * the bytes a step takes into *size), each kind's wall time added to t:
 * 0, or the first error */
static int step(char *w, float *x, float *xf, float *y, bool fill, double *t, size_t *size)
{
    char *p = w ? w : (char *)64;
    const bool run = w && !fill;
    for (int l = 0; l < LAYERS; l++) {
        struct kern_linear_job qkv[3];
        const int rows[3] = {HID, KV, KV};
        const enum dtype types[3] = {DTYPE_Q5_0, DTYPE_Q5_0,
                                     l % 2 && !getenv("QS_V5") ? DTYPE_Q8_0 : DTYPE_Q5_0};
        float *yo = y;
        for (int i = 0; i < 3; i++) {
            qkv[i] = (struct kern_linear_job){
                .y = yo, .x = x, .m = 1, .w = take(&p, types[i], rows[i], HID, K_QKV, fill)};
            yo += rows[i];
        }
        double s = now(CLOCK_MONOTONIC);
        if (run && getenv("QS_SPLIT")) {
            for (int i = 0; i < 3; i++)
                if (cpu_qlinear(qkv[i].y, x, 1, &qkv[i].w, KERN_COMPUTE_BF16) < 0)
                    return -1;
        } else if (run && cpu_qlinear_group(qkv, 3, KERN_COMPUTE_BF16) < 0)
            return -1;
        const struct weight_view o = take(&p, DTYPE_Q5_0, HID, HID, K_O, fill);
        double e = now(CLOCK_MONOTONIC);
        t[K_QKV] += e - s;
        if (run && cpu_qlinear(y, x, 1, &o, KERN_COMPUTE_BF16) < 0)
            return -1;
        s = now(CLOCK_MONOTONIC);
        t[K_O] += s - e;
        struct kern_linear_job gu[2];
        for (int i = 0; i < 2; i++)
            gu[i] = (struct kern_linear_job){.y = xf + (size_t)i * FF,
                                             .x = x,
                                             .m = 1,
                                             .w = take(&p, DTYPE_Q5_0, FF, HID, K_GU, fill)};
        if (run && cpu_qlinear_group(gu, 2, KERN_COMPUTE_BF16) < 0)
            return -1;
        e = now(CLOCK_MONOTONIC);
        t[K_GU] += e - s;
        const struct weight_view d =
            take(&p, l % 2 ? DTYPE_Q6_K : DTYPE_Q4_K, HID, FF, K_DOWN, fill);
        if (run && cpu_qlinear(y, xf, 1, &d, KERN_COMPUTE_BF16) < 0)
            return -1;
        s = now(CLOCK_MONOTONIC);
        t[K_DOWN] += s - e;
    }
    const struct weight_view head = take(&p, DTYPE_Q8_0, VOCAB, HID, K_HEAD, fill);
    const double s = now(CLOCK_MONOTONIC);
    if (run && cpu_qlinear(y, x, 1, &head, KERN_COMPUTE_BF16) < 0)
        return -1;
    t[K_HEAD] += now(CLOCK_MONOTONIC) - s;
    if (size)
        *size = (size_t)(p - (w ? w : (char *)64));
    return 0;
}

int main(int argc, char **argv)
{
    const int rounds = argc > 1 ? atoi(argv[1]) : 40, threads = argc > 2 ? atoi(argv[2]) : 2;
    double t[2][K_N] = {{0}};
    size_t n = 0;
    (void)step(NULL, NULL, NULL, NULL, false, t[0], &n);
    const size_t huge = (size_t)2 << 20, bytes = (n + huge - 1) / huge * huge;
    char *w = NULL;
    if (posix_memalign((void **)&w, huge, bytes) != 0)
        return 1;
    (void)madvise(w, bytes, MADV_HUGEPAGE);
    float *x = malloc(FF * sizeof(float)), *xf = malloc(2 * FF * sizeof(float));
    float *y = malloc(VOCAB * sizeof(float));
    for (int i = 0; i < FF; i++)
        x[i] = xf[i] = (float)(i % 11 - 5) * 0.1f;
    memcpy(xf + FF, xf, FF * sizeof(float));
    if (step(w, x, xf, y, true, t[0], NULL) < 0)
        return 1;
    cpu_set_threads(threads);
    for (int k = 0; k < 2; k++) /* warm: calibration, pool started */
        if (step(w, x, xf, y, false, t[0], NULL) < 0)
            return 1;
    printf("%s\n%.0f MB a step, %d threads, %d rounds\n", cpu_qlinear_kernels(), (double)n / 1e6,
           threads, rounds);
    double *rw = malloc((size_t)rounds * sizeof(double)),
           *rc = malloc((size_t)rounds * sizeof(double));
    double *kt = malloc((size_t)rounds * 2 * K_N * sizeof(double)); /* [kind][way][round] */
    double best[2][2] = {{1e9, 1e9}, {1e9, 1e9}};                   /* [claims][wall, cpu] */
    for (int r = 0; r < rounds; r++) {
        double tt[2][2];
        for (int k = 0; k < 2; k++) {
            const int claims = (r + k) % 2;
            double kk[K_N] = {0};
            cpu_gemv_split_claims(claims);
            const double c0 = now(CLOCK_PROCESS_CPUTIME_ID), w0 = now(CLOCK_MONOTONIC);
            if (step(w, x, xf, y, false, kk, NULL) < 0)
                return 1;
            tt[claims][0] = now(CLOCK_MONOTONIC) - w0;
            tt[claims][1] = now(CLOCK_PROCESS_CPUTIME_ID) - c0;
            for (int q = 0; q < 2; q++)
                if (tt[claims][q] < best[claims][q])
                    best[claims][q] = tt[claims][q];
            for (int i = 0; i < K_N; i++)
                kt[((size_t)i * 2 + (size_t)claims) * (size_t)rounds + (size_t)r] = kk[i];
        }
        rw[r] = tt[0][0] / tt[1][0];
        rc[r] = tt[0][1] / tt[1][1];
    }
    cpu_gemv_split_claims(true);
    qsort(rw, (size_t)rounds, sizeof(double), cmp);
    qsort(rc, (size_t)rounds, sizeof(double), cmp);
    const int q1 = rounds / 4, md = rounds / 2, q3 = 3 * rounds / 4;
    printf(
        "steps / claims, wall: median %.3f (q1-q3 %.3f-%.3f); CPU time: median %.3f (%.3f-%.3f)\n",
        rw[md], rw[q1], rw[q3], rc[md], rc[q1], rc[q3]);
    printf("best step, wall ms: steps %.2f, claims %.2f (%.1f and %.1f GB/s)\n", 1e3 * best[0][0],
           1e3 * best[1][0], (double)n / best[0][0] / 1e9, (double)n / best[1][0] / 1e9);
    printf("%-24s %10s %10s %8s %8s\n", "median ms/step, GB/s", "steps", "claims", "steps",
           "claims");
    for (int i = 0; i < K_N; i++) {
        double m[2];
        for (int c = 0; c < 2; c++) {
            double *v = kt + ((size_t)i * 2 + (size_t)c) * (size_t)rounds;
            qsort(v, (size_t)rounds, sizeof(double), cmp);
            m[c] = v[md];
        }
        printf("%-24s %10.3f %10.3f %8.2f %8.2f\n", kind_name[i], 1e3 * m[0], 1e3 * m[1],
               (double)kind_bytes[i] / m[0] / 1e9, (double)kind_bytes[i] / m[1] / 1e9);
    }
    free(rw);
    free(rc);
    free(kt);
    free(w);
    free(x);
    free(xf);
    free(y);
    return 0;
}
