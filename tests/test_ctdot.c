/* The CPU's compressed-tensors linear layer (backend/cpu/ctlinear.c,
 * ctdot.h) against references, over odd shapes (37 rows, 13 blocks a row
 * in a wider matrix, every count of input rows 1 .. 17):
 * - avx512 and avx2 give the scalar reference's bits, in f32 and bf16 mode;
 * - avx512bf16, avx512bf16-lut (bf16 mode) and deq, whose sums run in
 *   another order, are within 1e-5 * sum |w x| of it;
 * - so are they with scales shared by 4 blocks (a group of 128) and by the
 *   whole matrix (per tensor), where avx512bf16-lut reuses its tables;
 * - every kernel, and the prefill's matrix product (40 and 70 rows), within
 *   1e-5 * sum |w x| of the weights (exact, or rounded to bf16 with x in
 *   bf16 mode) times x in double;
 * - the vector dequantizations equal quant_ct_dequantize's values (and
 *   their bf16 roundings) bit for bit;
 * - a call's rows split over the threads in claims, in one unit per task,
 *   in the pool's order or on one thread give the same bits (1000, 530
 *   and 37 rows, alone and as a group). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "backend/cpu/ctdot.h"
#include "backend/cpu/ctlinear.h"
#include "backend/device.h"
#include "backend/kernels.h"
#include "backend/weight.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/quant_ct.h"
#include "test.h"

#define MiB ((size_t)1 << 20)
#define QK QUANT_CT_QK

static const enum dtype types[] = {DTYPE_CT_I8, DTYPE_CT_I4, DTYPE_CT_F8};
#define N_TYPES (sizeof(types) / sizeof(types[0]))

static struct device *dev;
static struct stream *st;

static void setup(void)
{
    if (device_open_cpu(0, 16 * MiB, &dev) != 0 || device_stream_create(dev, &st) != 0) {
        fprintf(stderr, "cannot open the CPU device: %s\n", err_msg());
        exit(1);
    }
}

static uint64_t seed = 0xc7d07;

static float urand(void)
{
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((seed >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

/* A weight slice: rows [1, 1 + rows) and blocks [2, 2 + nb) of a matrix of
 * nb + 3 blocks a row, random blocks (seeded), each run of `group` blocks
 * of the matrix sharing a scale (and zero point). Owner: *buf, to free. */
static struct weight_view slice_grouped(enum dtype t, int rows, int nb, uint64_t s, size_t group,
                                        void **buf)
{
    const int ld = (nb + 3) * QK;
    const size_t rb = dtype_row_bytes(t, (size_t)ld);
    *buf = malloc((rows + 1) * rb);
    cpu_ctlinear_random_blocks(t, *buf, (size_t)(rows + 1) * (nb + 3), s);
    cpu_ctlinear_share_scales(t, *buf, (size_t)(rows + 1) * (nb + 3), group);
    return (struct weight_view){.dtype = t,
                                .data = (char *)*buf + rb + 2 * quant_ct_block_bytes(t),
                                .rows = rows,
                                .cols = nb * QK,
                                .ld = (size_t)ld};
}

static struct weight_view slice(enum dtype t, int rows, int nb, uint64_t s, void **buf)
{
    return slice_grouped(t, rows, nb, s, 1, buf);
}

/* x's m rows of mixed magnitudes (a zero block in some rows) */
static float *make_x(int m, int cols)
{
    float *x = malloc((size_t)m * cols * sizeof(float));
    for (int i = 0; i < m; i++)
        for (int c = 0; c < cols; c++)
            x[(size_t)i * cols + c] =
                (i % 3 == 1 && c / QK == 2) ? 0.0f : urand() * (c % 7 == 0 ? 8.0f : 1.0f);
    return x;
}

/* Every y within 1e-5 * sum |w x| (+1e-30) of the weights (rounded to bf16
 * with x in bf16 mode) times x in double. */
static void check_ref(const struct weight_view *w, const float *x, int m, const float *y, bool bf16,
                      const char *what)
{
    const int k = w->cols;
    float *wf = malloc((size_t)k * sizeof(float));
    double worst = 0;
    for (int r = 0; r < w->rows; r++) {
        quant_ct_dequantize(w->dtype, weight_row(w, r), wf, (size_t)k);
        for (int i = 0; i < m; i++) {
            double ref = 0, mag = 0;
            for (int c = 0; c < k; c++) {
                const double a = bf16 ? bf16_round(wf[c]) : wf[c];
                const double b = bf16 ? bf16_round(x[(size_t)i * k + c]) : x[(size_t)i * k + c];
                ref += a * b;
                mag += fabs(a * b);
            }
            const double err = fabs(y[(size_t)i * w->rows + r] - ref) / (1e-5 * mag + 1e-30);
            worst = err > worst ? err : worst;
        }
    }
    CHECK_MSG(worst <= 1.0, "%s %s %s m=%d: error %.3g of the bound", dtype_name(w->dtype), what,
              bf16 ? "bf16" : "f32", m, worst);
    free(wf);
}

/* y of kernel `name` (forced) for m rows; false when the CPU lacks it */
static bool run(const char *name, const struct weight_view *w, const float *x, int m, float *y,
                bool bf16)
{
    int rc = cpu_ctlinear_force(name);
    if (rc == ERR_UNSUPPORTED)
        return false;
    CHECK(rc == 0);
    memset(y, 0xff, (size_t)m * w->rows * sizeof(float));
    CHECK(kern_linear(st, y, x, m, w, NULL, bf16 ? KERN_COMPUTE_BF16 : KERN_COMPUTE_F32) == 0);
    return true;
}

/* avx512 and avx2 give the scalar reference's bits; every kernel is within
 * the bound of the reference in double. */
TEST(kernels_match_scalar)
{
    static const char *const bitwise[] = {"avx512", "avx2"};
    static const char *const close[] = {"avx512bf16", "avx512bf16-lut", "deq"};
    const int rows = 37, nb = 13, mmax = 17;
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        void *buf;
        const struct weight_view w = slice(types[ti], rows, nb, 40 + ti, &buf);
        float *x = make_x(mmax, w.cols);
        float *ref = malloc((size_t)mmax * rows * sizeof(float));
        float *y = malloc((size_t)mmax * rows * sizeof(float));
        for (int mode = 0; mode < 2; mode++)
            for (int m = 1; m <= mmax; m++) {
                CHECK(run("scalar", &w, x, m, ref, mode == 1));
                check_ref(&w, x, m, ref, mode == 1, "scalar");
                for (size_t k = 0; k < sizeof(bitwise) / sizeof(bitwise[0]); k++) {
                    if (!run(bitwise[k], &w, x, m, y, mode == 1))
                        continue;
                    CHECK_MSG(memcmp(y, ref, (size_t)m * rows * sizeof(float)) == 0,
                              "%s %s %s m=%d differs from the scalar reference",
                              dtype_name(w.dtype), bitwise[k], mode ? "bf16" : "f32", m);
                }
                for (size_t k = 0; k < sizeof(close) / sizeof(close[0]); k++)
                    if (run(close[k], &w, x, m, y, mode == 1))
                        check_ref(&w, x, m, y, mode == 1, close[k]);
            }
        free(x);
        free(ref);
        free(y);
        free(buf);
    }
    CHECK(cpu_ctlinear_force(NULL) == 0);
    CHECK(cpu_ctlinear_force("sse9") == ERR_INVALID);
    /* the measured choice names every type */
    const char *k = cpu_ctlinear_kernels();
    printf("compressed-tensors kernels: %s\n", k);
    CHECK(strstr(k, "CT_I8:") && strstr(k, "CT_I4:") && strstr(k, "CT_F8:"));
}

/* Scales shared by runs of blocks (a group of 128 elements; the whole
 * tensor): every kernel within the bound of the reference in double. */
TEST(shared_scales)
{
    static const char *const names[] = {"avx512bf16", "avx512bf16-lut", "avx512", "deq"};
    const int rows = 37, nb = 13, ms[] = {1, 2, 3, 5, 8, 9};
    for (size_t ti = 0; ti < N_TYPES; ti++)
        for (int g = 0; g < 2; g++) {
            void *buf;
            const size_t group = g ? (size_t)(rows + 1) * (nb + 3) : 4;
            const struct weight_view w = slice_grouped(types[ti], rows, nb, 50 + ti, group, &buf);
            float *x = make_x(9, w.cols), *y = malloc((size_t)9 * rows * sizeof(float));
            for (size_t mi = 0; mi < sizeof(ms) / sizeof(ms[0]); mi++)
                for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++)
                    if (run(names[k], &w, x, ms[mi], y, true))
                        check_ref(&w, x, ms[mi], y, true, names[k]);
            free(x);
            free(y);
            free(buf);
        }
    CHECK(cpu_ctlinear_force(NULL) == 0);
}

/* x's rows unit vectors: y is each weight as the kernel widened it, which
 * for the bf16 kernels is the reference's weight rounded to bf16, exactly
 * (one product of 1, the other products 0), with scales of every block
 * their own, shared by 4 blocks and by the whole matrix. */
TEST(bf16_weights_exact)
{
    static const char *const names[] = {"avx512bf16", "avx512bf16-lut"};
    const int rows = 21, nb = 13, m = 16;
    for (size_t ti = 0; ti < N_TYPES; ti++)
        for (int g = 0; g < 3; g++) {
            void *buf;
            const size_t group = g == 2 ? (size_t)(rows + 1) * (nb + 3) : g == 1 ? 4 : 1;
            const struct weight_view w = slice_grouped(types[ti], rows, nb, 60 + ti, group, &buf);
            const int k = w.cols;
            float *wf = malloc((size_t)rows * k * sizeof(float));
            for (int r = 0; r < rows; r++)
                quant_ct_dequantize(w.dtype, weight_row(&w, r), wf + (size_t)r * k, (size_t)k);
            float *x = malloc((size_t)m * k * sizeof(float)), *y = malloc((size_t)m * rows * 4);
            for (size_t n = 0; n < sizeof(names) / sizeof(names[0]); n++)
                for (int c0 = 0; c0 < k; c0 += m) {
                    memset(x, 0, (size_t)m * k * sizeof(float));
                    for (int i = 0; i < m; i++)
                        x[(size_t)i * k + c0 + i] = 1.0f;
                    if (!run(names[n], &w, x, m, y, true))
                        continue;
                    int bad = 0;
                    for (int i = 0; i < m; i++)
                        for (int r = 0; r < rows; r++)
                            bad +=
                                y[(size_t)i * rows + r] != bf16_round(wf[(size_t)r * k + c0 + i]);
                    CHECK_MSG(bad == 0, "%s %s group %zu: %d weights of columns %d.. differ",
                              dtype_name(w.dtype), names[n], group, bad, c0);
                }
            free(wf);
            free(x);
            free(y);
            free(buf);
        }
    CHECK(cpu_ctlinear_force(NULL) == 0);
}

/* A prefill's rows (the matrix product over converted blocks) and the
 * measured choice for a decode batch, within the bound. */
TEST(prefill_and_choice)
{
    const int rows = 70, nb = 9;
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        void *buf;
        const struct weight_view w = slice(types[ti], rows, nb, 70 + ti, &buf);
        const int ms[] = {1, 5, 40, 70};
        for (size_t mi = 0; mi < sizeof(ms) / sizeof(ms[0]); mi++) {
            const int m = ms[mi];
            float *x = make_x(m, w.cols), *y = malloc((size_t)m * rows * sizeof(float));
            for (int mode = 0; mode < 2; mode++) {
                CHECK(kern_linear(st, y, x, m, &w, NULL,
                                  mode ? KERN_COMPUTE_BF16 : KERN_COMPUTE_F32) == 0);
                check_ref(&w, x, m, y, mode == 1, m > 16 ? "prefill" : "measured");
            }
            free(x);
            free(y);
        }
        free(buf);
    }
}

/* A call's units in lanes in claims, in lanes of one unit per pool task,
 * in the pool's order and on this thread alone, one call at a time and as
 * a group: every row the bits of the same kernel alone in order (each row
 * is computed by the same code whichever thread takes it). y starts as
 * NaN, so a row no task wrote shows. 1000 rows make many units a lane
 * (claims of several, the last ones alone), 530 a short last unit, 37 one
 * unit. */
TEST(lanes_bitwise)
{
    static const char *const names[] = {"avx512", "avx512bf16", "deq"};
    static const int rows[] = {1000, 530, 37};
    enum { N_JOBS = sizeof(rows) / sizeof(rows[0]), NB = 13, M_MAX = 3 };
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        void *buf[N_JOBS];
        struct kern_linear_job jobs[N_JOBS];
        size_t o = 0;
        float *x = make_x(M_MAX, NB * QK);
        for (int i = 0; i < N_JOBS; i++) {
            jobs[i] = (struct kern_linear_job){
                .x = x, .w = slice(types[ti], rows[i], NB, 110 + ti * 4 + (size_t)i, &buf[i])};
            o += (size_t)M_MAX * rows[i];
        }
        float *ref = malloc(o * sizeof(float)), *y = malloc(o * sizeof(float));
        for (int m = 1; m <= M_MAX; m += M_MAX - 1)
            for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
                int rc = cpu_ctlinear_force(names[k]);
                if (rc == ERR_UNSUPPORTED)
                    continue;
                CHECK(rc == 0);
                /* 0: the reference, alone in order; 1: lanes in claims, 2:
                 * the pool's order, 3: this thread alone, 4: lanes of one
                 * unit per pool task */
                for (int way = 0; way < 5; way++)
                    for (int group = 0; group < (way ? 2 : 1); group++) {
                        float *out = way ? y : ref;
                        size_t at = 0;
                        for (int i = 0; i < N_JOBS; i++) {
                            jobs[i].m = m;
                            jobs[i].y = out + at;
                            at += (size_t)m * rows[i];
                        }
                        for (size_t i = 0; i < at; i++)
                            out[i] = NAN;
                        cpu_gemv_split_lanes(way != 0 && way != 2);
                        cpu_gemv_split_claims(way != 4);
                        cpu_kernels_single_thread(way == 0 || way == 3);
                        if (group)
                            CHECK(cpu_ctlinear_group(jobs, N_JOBS, KERN_COMPUTE_BF16) == 0);
                        else
                            for (int i = 0; i < N_JOBS; i++)
                                CHECK(cpu_ctlinear(jobs[i].y, x, m, &jobs[i].w,
                                                   KERN_COMPUTE_BF16) == 0);
                        cpu_kernels_single_thread(false);
                        cpu_gemv_split_claims(true);
                        cpu_gemv_split_lanes(true);
                        size_t bad = at;
                        for (size_t i = 0; i < at && bad == at; i++)
                            if (isnan(out[i]) || (way && memcmp(&y[i], &ref[i], 4) != 0))
                                bad = i;
                        CHECK_MSG(bad == at, "%s %s m=%d way %d %s: output %zu is %g, alone %g",
                                  dtype_name(types[ti]), names[k], m, way,
                                  group ? "group" : "one by one", bad, bad < at ? out[bad] : 0.0,
                                  bad < at ? ref[bad] : 0.0);
                    }
            }
        CHECK(cpu_ctlinear_force(NULL) == 0);
        for (int i = 0; i < N_JOBS; i++)
            free(buf[i]);
        free(x);
        free(ref);
        free(y);
    }
}

/* The vector dequantizations are quant_ct_dequantize's values, and their
 * bf16 roundings, bit for bit. */
TEST(dequant_bitwise)
{
    typedef void (*deq_fn)(enum dtype, const void *, void *, size_t, bool);
    static const struct {
        const char *name;
        deq_fn fn;
        int level; /* 0 any CPU, 1 AVX2 + FMA, 2 AVX-512 F/BW/VL */
    } isas[] = {{"scalar", ctdot_dequant_scalar, 0},
                {"avx2", ctdot_dequant_avx2, 1},
                {"avx512", ctdot_dequant_avx512, 2}};
    int level = 0;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        level = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512vl")
                    ? 2
                    : 1;
#endif
    const size_t n = 64 * QK;
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const enum dtype t = types[ti];
        void *src = malloc(64 * quant_ct_block_bytes(t));
        cpu_ctlinear_random_blocks(t, src, 64, 90 + ti);
        float *want = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
        uint16_t *wantb = malloc(n * 2), *gotb = malloc(n * 2);
        quant_ct_dequantize(t, src, want, n);
        for (size_t i = 0; i < n; i++)
            wantb[i] = f32_to_bf16(want[i]);
        for (size_t k = 0; k < sizeof(isas) / sizeof(isas[0]); k++) {
            if (isas[k].level > level)
                continue;
            isas[k].fn(t, src, got, n, false);
            isas[k].fn(t, src, gotb, n, true);
            CHECK_MSG(memcmp(got, want, n * sizeof(float)) == 0, "%s %s f32 differs", dtype_name(t),
                      isas[k].name);
            CHECK_MSG(memcmp(gotb, wantb, n * 2) == 0, "%s %s bf16 differs", dtype_name(t),
                      isas[k].name);
        }
        cpu_ct_dequantize(t, src, got, n, false);
        CHECK(memcmp(got, want, n * sizeof(float)) == 0);
        free(src);
        free(want);
        free(got);
        free(wantb);
        free(gotb);
    }
}

int main(int argc, char **argv)
{
    int rc = test_main(argc, argv, setup);
    device_stream_destroy(st);
    device_close(dev);
    return rc;
}
