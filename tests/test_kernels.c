/* Every kernel of backend/kernels.h on a CPU device, through the kernel
 * table (buffers in device memory, inputs uploaded with kern_to_device,
 * results read back with kern_to_host), against a plain reference written
 * here with double accumulation.
 *
 * Tolerances, per kernel:
 * - kern_linear: 1e-5 relative (test_rel_err: max |error| / max |reference|).
 *   f16 and bf16 weights are compared against the reference on the same
 *   widened values (decoded here, independently of core/dtype.c), so only
 *   f32 accumulation error is left and the tolerance stays f32-tight.
 * - kern_layernorm: 1e-5 relative.
 * - kern_rmsnorm: per element |got - ref| <= 1e-6 |ref| (the kernel rounds
 *   rstd to f32 and then makes two f32 products: 1.5 ulp at most), on rows
 *   of very different magnitudes.
 * - kern_rope: 1e-6 relative, against cos and sin in double of the f32
 *   angle the contract names (an f32 cosf/sinf, a product by scale and the
 *   rotation: a few f32 roundings); the elements past rot_dim exact.
 * - kern_activation: per element |got - ref| <= 1e-5 |ref| + 1e-6 (the
 *   absolute part covers 1 + erf(x) cancelling for very negative x).
 * - kern_gated_act: per element |got - ref| <= 1e-5 |ref| + 1e-6 |up|
 *   (kern_activation's tolerance through the product), and bit for bit
 *   kern_activation(gate) times up in f32.
 * - kern_attention: 1e-5 relative, with kv_heads 1, 2 and == heads.
 * - kern_embed, kern_add, kern_scale, kern_copy, kern_kv_append,
 *   kern_gather_rows, kern_combine_rows: exact (copies, or one correctly rounded f32 operation
 *   at a time).
 * - kern_route_topk, kern_route_group: every output bit for bit against a
 *   reference that ranks by a stable sort and groups by a pass per expert
 *   (the same f32 softmax operations in the same order), with ties, a
 *   padding mask, a shared expert, a range of experts and experts missing.
 * Each masked kernel also checks that its data make the mask matter: the
 * reference without the causal mask, or without the padding mask, differs
 * from the real one by far more than the tolerance; likewise with query
 * heads mapped to KV heads the other way round (h % kv_heads), with
 * RMSNorm's eps left out, and with rope's other pairing (GPT-J's
 * interleaved pairs) or its angle in double.
 */
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/attn_vec.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/isa.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/lanes.h"
#include "backend/cpu/linear.h"
#include "backend/cpu/qlinear.h"
#include "backend/cpu/vec.h"
#include "backend/device.h"
#include "backend/kernels.h"
#include "backend/weight.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/quant.h"
#include "test.h"

#define MiB ((size_t)1 << 20)

static struct device *dev;
static struct stream *st;

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint64_t rng_next(void)
{
    /* xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1DULL;
}

/* Uniform in [lo, hi). */
static float rng_uniform(float lo, float hi)
{
    return lo + (hi - lo) * (float)((double)(rng_next() >> 40) / (double)(1ULL << 24));
}

static void fill_uniform(float *x, size_t n, float lo, float hi)
{
    for (size_t i = 0; i < n; i++)
        x[i] = rng_uniform(lo, hi);
}

/* IEEE half to float, written out so the reference does not share the
 * library's converters. */
static double ref_f16(uint16_t h)
{
    int sign = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 0)
        v = ldexp(m, -24);
    else if (e == 31)
        v = m ? NAN : INFINITY;
    else
        v = ldexp(m + 1024, e - 25);
    return sign ? -v : v;
}

static double ref_bf16(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof(f));
    return f;
}

/* Element i of an array of type t, as the reference sees it. */
static double ref_elem(enum dtype t, const void *p, size_t i)
{
    switch (t) {
    case DTYPE_F16:
        return ref_f16(((const uint16_t *)p)[i]);
    case DTYPE_BF16:
        return ref_bf16(((const uint16_t *)p)[i]);
    default:
        return ((const float *)p)[i];
    }
}

/* A device buffer of bytes holding a copy of host (when not NULL). The
 * caller frees it with device_free. */
static struct dbuf *upload(const void *host, size_t bytes)
{
    struct dbuf *b = NULL;
    int rc = device_alloc(dev, bytes, &b);
    CHECK_MSG(rc == ERR_OK, "%s", err_msg());
    if (rc != ERR_OK) {
        fprintf(stderr, "cannot go on without device memory\n");
        exit(1);
    }
    if (host)
        CHECK(kern_to_device(st, dbuf_ptr(b), host, bytes) == 0);
    return b;
}

static void download(void *host, const void *dptr, size_t bytes)
{
    CHECK(kern_to_host(st, host, dptr, bytes) == 0);
}

/* ---- kern_linear ---- */

static double worst_linear, worst_linear_bf16;

/* One case: y[m, n] = x[m, k] @ w^T (+ bias), w of type t viewed as columns
 * [c0, c0 + k) of a row-major (n, ld) matrix. Outside the view the matrix
 * holds 1000s, so a kernel that ignores ld or the view's start fails. */
static void linear_case(int m, int n, int k, enum dtype t, bool with_bias, size_t ld, size_t c0,
                        enum kern_compute cm)
{
    const size_t es = dtype_size(t);
    float *wf = malloc((size_t)n * ld * sizeof(float));
    void *wt = malloc((size_t)n * ld * es);
    float *x = malloc((size_t)m * k * sizeof(float));
    float *bias = malloc((size_t)n * sizeof(float));
    float *y = malloc((size_t)m * n * sizeof(float));
    float *ref = malloc((size_t)m * n * sizeof(float));
    for (size_t i = 0; i < (size_t)n * ld; i++) {
        size_t c = i % ld;
        wf[i] = c >= c0 && c < c0 + (size_t)k ? rng_uniform(-1, 1) : 1000.0f;
    }
    dtype_from_f32(t, wf, wt, (size_t)n * ld);
    fill_uniform(x, (size_t)m * k, -1, 1);
    fill_uniform(bias, (size_t)n, -1, 1);

    /* reference on the stored (widened) weights; in bf16 mode on x and the
     * weights rounded to bf16. Each operand widened once (widening every
     * weight again for each input row was 90% of this test's time under
     * ASan). */
    float *rw = malloc((size_t)n * k * sizeof(float)), *rx = malloc((size_t)m * k * sizeof(float));
    for (int r = 0; r < n; r++)
        for (int c = 0; c < k; c++) {
            float wv = ref_elem(t, wt, (size_t)r * ld + c0 + (size_t)c);
            rw[(size_t)r * k + c] = cm == KERN_COMPUTE_BF16 ? bf16_to_f32(f32_to_bf16(wv)) : wv;
        }
    for (size_t i = 0; i < (size_t)m * k; i++)
        rx[i] = cm == KERN_COMPUTE_BF16 ? bf16_to_f32(f32_to_bf16(x[i])) : x[i];
    for (int i = 0; i < m; i++)
        for (int r = 0; r < n; r++) {
            double acc = with_bias ? bias[r] : 0.0;
            for (int c = 0; c < k; c++)
                acc += (double)rw[(size_t)r * k + c] * rx[(size_t)i * k + c];
            ref[(size_t)i * n + r] = (float)acc;
        }
    free(rw);
    free(rx);

    struct dbuf *dw = upload(wt, (size_t)n * ld * es);
    struct dbuf *dx = upload(x, (size_t)m * k * sizeof(float));
    struct dbuf *db = upload(bias, (size_t)n * sizeof(float));
    struct dbuf *dy = upload(NULL, (size_t)m * n * sizeof(float));
    struct weight_view w = {
        .dtype = t, .data = (const char *)dbuf_ptr(dw) + c0 * es, .rows = n, .cols = k, .ld = ld};
    int rc =
        kern_linear(st, dbuf_ptr(dy), dbuf_ptr(dx), m, &w, with_bias ? dbuf_ptr(db) : NULL, cm);
    CHECK_MSG(rc == 0, "%s", err_msg());
    download(y, dbuf_ptr(dy), (size_t)m * n * sizeof(float));
    double e = test_rel_err(y, ref, (size_t)m * n);
    /* bf16 mode may keep f16/f32 weights unrounded: the reference rounded
     * them, a difference of up to 2^-9 of each weight */
    double tol = cm == KERN_COMPUTE_BF16 && t != DTYPE_BF16 ? 1e-2 : 1e-5;
    CHECK_MSG(e <= tol, "linear m=%d n=%d k=%d %s bias=%d ld=%zu c0=%zu %s: rel err %.3g", m, n, k,
              dtype_name(t), with_bias, ld, c0, kern_compute_name(cm), e);
    double *worst = cm == KERN_COMPUTE_BF16 ? &worst_linear_bf16 : &worst_linear;
    if (t == DTYPE_BF16 || cm == KERN_COMPUTE_F32)
        if (e > *worst)
            *worst = e;

    device_free(dw);
    device_free(dx);
    device_free(db);
    device_free(dy);
    free(wf);
    free(wt);
    free(x);
    free(bias);
    free(y);
    free(ref);
}

/* Every case once per (k, n): k = 75 and 130 leave tails after the 16- and
 * 32-wide loops, k = 300 spans more than one column block of the GEMV's
 * many-row path; n = 37 an odd row count and a partial task, n = 530 more
 * than one widened block on the BLAS path; k = 96 and 256 (3 and 8 chunks
 * of 32) are where the AMX kernel multiplies (an odd and an even count of
 * chunks; n = 37 and 530 leave rows past the last whole 16). */
static const struct {
    int k, n;
} linear_shapes[] = {{75, 37}, {75, 530}, {130, 45}, {300, 21}, {96, 37}, {256, 530}};

/* m <= CPU_GEMV_MAX_M (16): the fused GEMV, whose input rows go in blocks
 * of 4 (2, 4, 5, 15, 16 hit every remainder); 17 and 64: BLAS. */
static int linear_cases(const int *ms, size_t n_ms)
{
    static const enum dtype ts[] = {DTYPE_F32, DTYPE_F16, DTYPE_BF16};
    int cases = 0;
    for (size_t im = 0; im < n_ms; im++)
        for (size_t is = 0; is < sizeof(linear_shapes) / sizeof(linear_shapes[0]); is++)
            for (size_t it = 0; it < sizeof(ts) / sizeof(ts[0]); it++)
                for (int bias = 0; bias < 2; bias++)
                    for (int cm = KERN_COMPUTE_F32; cm <= KERN_COMPUTE_BF16; cm++) {
                        int k = linear_shapes[is].k, n = linear_shapes[is].n;
                        /* dense, then a column slice [5, 5 + k) of a (n, k + 13) matrix */
                        linear_case(ms[im], n, k, ts[it], bias, (size_t)k, 0, cm);
                        linear_case(ms[im], n, k, ts[it], bias, (size_t)k + 13, 5, cm);
                        cases += 2;
                    }
    return cases;
}

/* Kernels that sum each row in the same order give the same bits: the
 * bf16 mode's VDPBF16PS kernel over 4, 1 and 8 weight rows at a time, over
 * 2, 4 and 8 far-apart streams of rows in lockstep (sub-lanes of unequal
 * length: 2100 rows of 96 columns make 2 lanes of 33 units, 1000 of 300
 * lanes of 16 and 17), and over blocks of 3 weight rows x 8 input rows,
 * whole rows or in column spans over 12 weight rows (m 5-7, 9-15 leave
 * every rest of its input rows, n = 37 and 200 of its weight rows, k = 2048
 * four spans), with rows that fill no whole block and columns past the last
 * whole 32 (summed after the vector part, in the same order by each). The
 * weights and inputs are random, so a row summed in another order, or its
 * sum stored at another row, changes the bits. */
/* AVX2's kernels sum each row in the same order whatever their blocks
 * and prefetch: the same bits in f32 mode for every plain dtype and in bf16
 * mode, at every input row count (rests of 1-3 rows past its blocks of 4,
 * rows past its blocks of 2, columns past its spans of 512 and past the
 * last whole 8). */
static void test_gemv_same_bits_avx2(void)
{
    static const int ms[] = {1, 2, 3, 4, 5, 7, 8, 11, 16};
    static const int shapes[][2] = {{37, 75}, {64, 2048}, {201, 1100}};
    static const enum dtype ts[] = {DTYPE_F32, DTYPE_F16, DTYPE_BF16};
    static const char *const others[] = {"avx2-next", "avx2-m8", "avx2-s2",
                                         "avx2-s3",   "avx2-s4", "avx2-s8"};
    if (cpu_gemv_force("avx2") < 0) {
        printf("gemv same bits (avx2): skipped (%s)\n", err_msg());
        CHECK(cpu_gemv_force(NULL) == 0);
        return;
    }
    for (int cm = 0; cm < 2; cm++)
        for (size_t it = 0; it < sizeof(ts) / sizeof(ts[0]); it++)
            for (size_t is = 0; is < sizeof(shapes) / sizeof(shapes[0]); is++)
                for (size_t im = 0; im < sizeof(ms) / sizeof(ms[0]); im++) {
                    const enum kern_compute c = cm ? KERN_COMPUTE_BF16 : KERN_COMPUTE_F32;
                    const int n = shapes[is][0], k = shapes[is][1], m = ms[im];
                    const size_t es = dtype_size(ts[it]);
                    float *wf = malloc((size_t)n * k * sizeof(float));
                    void *wt = malloc((size_t)n * k * es);
                    float *x = malloc((size_t)m * k * sizeof(float));
                    float *y0 = malloc((size_t)m * n * sizeof(float));
                    float *yo = malloc((size_t)m * n * sizeof(float));
                    fill_uniform(wf, (size_t)n * k, -1, 1);
                    dtype_from_f32(ts[it], wf, wt, (size_t)n * k);
                    fill_uniform(x, (size_t)m * k, -1, 1);
                    struct weight_view w = {
                        .dtype = ts[it], .data = wt, .rows = n, .cols = k, .ld = (size_t)k};
                    CHECK(cpu_gemv_force("avx2") == 0);
                    CHECK(cpu_linear(y0, x, m, &w, NULL, c) == 0);
                    for (size_t io = 0; io < sizeof(others) / sizeof(others[0]); io++) {
                        CHECK(cpu_gemv_force(others[io]) == 0);
                        CHECK(cpu_linear(yo, x, m, &w, NULL, c) == 0);
                        CHECK_MSG(memcmp(y0, yo, (size_t)m * n * sizeof(float)) == 0,
                                  "avx2 and %s differ at m %d, %d x %d %s %s", others[io], m, n, k,
                                  dtype_name(ts[it]), kern_compute_name(c));
                    }
                    free(wf);
                    free(wt);
                    free(x);
                    free(y0);
                    free(yo);
                }
    CHECK(cpu_gemv_force(NULL) == 0);
}

static void test_gemv_same_bits(void)
{
    static const int ms[] = {1, 2, 3, 4, 5, 6, 7, 8, 11, 16};
    static const int shapes[][2] = {{37, 75}, {64, 2048}, {200, 300}, {1000, 300}, {2100, 96}};
    static const char *const others[] = {"avx512bf16-r1",  "avx512bf16-r1f",  "avx512bf16-s2",
                                         "avx512bf16-s4",  "avx512bf16-s8",   "avx512bf16-s2n",
                                         "avx512bf16-s4n", "avx512bf16-r8",   "avx512bf16-m8",
                                         "avx512bf16-m8f", "avx512bf16-m8f3", "avx512bf16-m8s"};
    if (cpu_gemv_force("avx512bf16") < 0) {
        printf("gemv same bits: skipped (%s)\n", err_msg());
        CHECK(cpu_gemv_force(NULL) == 0);
        return;
    }
    for (size_t is = 0; is < sizeof(shapes) / sizeof(shapes[0]); is++)
        for (size_t im = 0; im < sizeof(ms) / sizeof(ms[0]); im++) {
            const int n = shapes[is][0], k = shapes[is][1], m = ms[im];
            uint16_t *wb = malloc((size_t)n * k * sizeof(uint16_t));
            float *x = malloc((size_t)m * k * sizeof(float));
            float *y4 = malloc((size_t)m * n * sizeof(float));
            float *yo = malloc((size_t)m * n * sizeof(float));
            for (size_t i = 0; i < (size_t)n * k; i++)
                wb[i] = f32_to_bf16(rng_uniform(-1, 1));
            fill_uniform(x, (size_t)m * k, -1, 1);
            struct weight_view w = {.dtype = DTYPE_BF16,
                                    .data = (const char *)wb,
                                    .rows = n,
                                    .cols = k,
                                    .ld = (size_t)k};
            CHECK(cpu_gemv_force("avx512bf16") == 0);
            CHECK(cpu_linear(y4, x, m, &w, NULL, KERN_COMPUTE_BF16) == 0);
            for (size_t io = 0; io < sizeof(others) / sizeof(others[0]); io++) {
                CHECK(cpu_gemv_force(others[io]) == 0);
                CHECK(cpu_linear(yo, x, m, &w, NULL, KERN_COMPUTE_BF16) == 0);
                CHECK_MSG(memcmp(y4, yo, (size_t)m * n * sizeof(float)) == 0,
                          "avx512bf16 and %s differ at m %d, %d x %d", others[io], m, n, k);
            }
            free(wb);
            free(x);
            free(y4);
            free(yo);
        }
    /* f32 mode, every plain dtype: the AVX-512 kernel over 4 and 1 rows and
     * over blocks of 3 x 8, with and without the far prefetch */
    static const char *const f32_others[] = {"avx512-r1", "avx512-m8", "avx512-m8f"};
    static const enum dtype ts[] = {DTYPE_F32, DTYPE_F16, DTYPE_BF16};
    for (size_t it = 0; it < sizeof(ts) / sizeof(ts[0]); it++)
        for (size_t is = 0; is < sizeof(shapes) / sizeof(shapes[0]); is++)
            for (size_t im = 0; im < sizeof(ms) / sizeof(ms[0]); im++) {
                const int n = shapes[is][0], k = shapes[is][1], m = ms[im];
                const size_t es = dtype_size(ts[it]);
                float *wf = malloc((size_t)n * k * sizeof(float));
                void *wt = malloc((size_t)n * k * es);
                float *x = malloc((size_t)m * k * sizeof(float));
                float *y4 = malloc((size_t)m * n * sizeof(float));
                float *y1 = malloc((size_t)m * n * sizeof(float));
                fill_uniform(wf, (size_t)n * k, -1, 1);
                dtype_from_f32(ts[it], wf, wt, (size_t)n * k);
                fill_uniform(x, (size_t)m * k, -1, 1);
                struct weight_view w = {
                    .dtype = ts[it], .data = wt, .rows = n, .cols = k, .ld = (size_t)k};
                CHECK(cpu_gemv_force("avx512") == 0);
                CHECK(cpu_linear(y4, x, m, &w, NULL, KERN_COMPUTE_F32) == 0);
                for (size_t io = 0; io < sizeof(f32_others) / sizeof(f32_others[0]); io++) {
                    const char *other = f32_others[io];
                    CHECK(cpu_gemv_force(other) == 0);
                    CHECK(cpu_linear(y1, x, m, &w, NULL, KERN_COMPUTE_F32) == 0);
                    CHECK_MSG(memcmp(y4, y1, (size_t)m * n * sizeof(float)) == 0,
                              "avx512 and %s differ: %s, m %d, %d x %d", other, dtype_name(ts[it]),
                              m, n, k);
                }
                free(wf);
                free(wt);
                free(x);
                free(y4);
                free(y1);
            }
    CHECK(cpu_gemv_force(NULL) == 0);
}

/* The AMX GEMV takes a tile's 16 weight rows several rows apart where rows
 * are narrow (gemv_amx.c: 16 x G rows as G tiles of rows G apart, fewer at
 * a piece's end), and puts each tile's sums into y with that step. Every
 * row of every input row, against bf16 products summed in double within
 * 1e-5 x sum |w x| (a row dropped stays NaN; one put at another row's place
 * is off by about that row's size): widths of 32 and 128 columns (rows of
 * 64 and 256 bytes: 8 tiles a run), 896 (qwen2.5's, 6), 4608 (one: rows
 * of 9 KiB) and a column slice (296 of ld 336); row counts that leave runs
 * of fewer tiles and rows past the last whole 16; m 1-16; in the pool and
 * on this thread alone. Then the same rows from a view that starts 16 and
 * 48 rows later, so the runs start elsewhere: each row's sums do not
 * depend on the tiles it shared, so the same bits. */
static void test_gemv_amx_rows(void)
{
    static const struct {
        int n, k, ld;
    } shapes[] = {
        {37, 32, 32}, {531, 128, 128}, {200, 896, 896}, {70, 4608, 4608}, {150, 288, 336}};
    if (cpu_gemv_force("amx") < 0) {
        printf("gemv amx rows: skipped (%s)\n", err_msg());
        CHECK(cpu_gemv_force(NULL) == 0);
        return;
    }
    for (size_t is = 0; is < sizeof(shapes) / sizeof(shapes[0]); is++) {
        const int n = shapes[is].n, k = shapes[is].k, ld = shapes[is].ld;
        uint16_t *wb = malloc((size_t)n * ld * sizeof(uint16_t));
        float *x = malloc((size_t)16 * k * sizeof(float));
        float *y = malloc((size_t)16 * n * sizeof(float));
        float *yv = malloc((size_t)16 * n * sizeof(float));
        double *ref = malloc((size_t)16 * n * sizeof(double));
        double *mag = malloc((size_t)16 * n * sizeof(double));
        for (size_t i = 0; i < (size_t)n * ld; i++)
            wb[i] = f32_to_bf16(rng_uniform(-1, 1));
        fill_uniform(x, (size_t)16 * k, -1, 1);
        for (int i = 0; i < 16; i++)
            for (int r = 0; r < n; r++) {
                double acc = 0, a = 0;
                for (int c = 0; c < k; c++) {
                    const double p = (double)bf16_to_f32(wb[(size_t)r * ld + c]) *
                                     bf16_to_f32(f32_to_bf16(x[(size_t)i * k + c]));
                    acc += p;
                    a += fabs(p);
                }
                ref[(size_t)i * n + r] = acc;
                mag[(size_t)i * n + r] = a;
            }
        for (int m = 1; m <= 16; m++)
            for (int alone = 0; alone < 2; alone++) {
                struct weight_view w = {.dtype = DTYPE_BF16,
                                        .data = (const char *)wb,
                                        .rows = n,
                                        .cols = k,
                                        .ld = (size_t)ld};
                for (size_t i = 0; i < (size_t)m * n; i++)
                    y[i] = NAN;
                cpu_kernels_single_thread(alone);
                CHECK(cpu_gemv(y, x, m, &w, KERN_COMPUTE_BF16) == 0);
                int bad = 0;
                for (int i = 0; i < m && bad < 3; i++)
                    for (int r = 0; r < n && bad < 3; r++) {
                        const double e = fabs(y[(size_t)i * n + r] - ref[(size_t)i * n + r]);
                        if (!(e <= 1e-5 * mag[(size_t)i * n + r] + 1e-30)) {
                            CHECK_MSG(0,
                                      "gemv amx rows: %d x %d (ld %d) m %d%s: row %d of input %d "
                                      "is %g, not %g",
                                      n, k, ld, m, alone ? " alone" : "", r, i,
                                      y[(size_t)i * n + r], ref[(size_t)i * n + r]);
                            bad++;
                        }
                    }
                for (int o = 16; o <= 48 && o + 16 <= n; o += 32) {
                    struct weight_view v = w;
                    v.data = (const char *)(wb + (size_t)o * ld);
                    v.rows = n - o;
                    for (size_t i = 0; i < (size_t)m * v.rows; i++)
                        yv[i] = NAN;
                    CHECK(cpu_gemv(yv, x, m, &v, KERN_COMPUTE_BF16) == 0);
                    for (int i = 0; i < m; i++)
                        CHECK_MSG(memcmp(yv + (size_t)i * v.rows, y + (size_t)i * n + o,
                                         (size_t)v.rows * sizeof(float)) == 0,
                                  "gemv amx rows: %d x %d m %d%s: rows from %d differ in a view "
                                  "that starts there",
                                  n, k, m, alone ? " alone" : "", o);
                }
                cpu_kernels_single_thread(false);
            }
        free(wb);
        free(x);
        free(y);
        free(yv);
        free(ref);
        free(mag);
    }
    CHECK(cpu_gemv_force(NULL) == 0);
}

/* The GEMV's tasks spread over the threads in lanes (each thread a run of
 * contiguous chunks, stealing the last chunk of the fullest lane when its
 * own is done) and in the pool's order, and on this thread alone: every
 * output row written once, by the same code, so the same bits. y starts as
 * NaN, so a chunk that no task took shows; the shapes give 1, 7 and 17
 * chunks (rows not a multiple of a chunk's), one call and four in a
 * group, two of them of the same columns and input rows (a step's pieces
 * of both products then go in lockstep, avx2-s*'s several input rows
 * included). */
static void test_gemv_lanes(void)
{
    static const int shapes[][2] = {{37, 75}, {530, 256}, {300, 256}, {2100, 512}};
    static const char *const kernels[] = {
        NULL,  "avx512bf16-r1f", "avx512bf16-s4", "avx512bf16-s8", "avx512bf16-s4n",
        "amx", "avx512",         "avx2-s3",       "avx2-s4",       "avx2-s8"};
    static const int ms[] = {1, 3};
    enum { N_SHAPES = sizeof(shapes) / sizeof(shapes[0]) };
    uint16_t *wb[N_SHAPES];
    size_t ny = 0;
    for (int is = 0; is < N_SHAPES; is++) {
        const size_t n = (size_t)shapes[is][0] * shapes[is][1];
        wb[is] = malloc(n * sizeof(uint16_t));
        for (size_t i = 0; i < n; i++)
            wb[is][i] = f32_to_bf16(rng_uniform(-1, 1));
        ny += (size_t)3 * shapes[is][0];
    }
    float *x = malloc((size_t)3 * 512 * sizeof(float));
    float *ya = malloc(ny * sizeof(float)), *yb = malloc(ny * sizeof(float));
    fill_uniform(x, (size_t)3 * 512, -1, 1);
    for (size_t ik = 0; ik < sizeof(kernels) / sizeof(kernels[0]); ik++) {
        if (cpu_gemv_force(kernels[ik]) < 0) {
            printf("gemv lanes: %s skipped (%s)\n", kernels[ik], err_msg());
            continue;
        }
        for (size_t im = 0; im < sizeof(ms) / sizeof(ms[0]); im++)
            for (int cm = KERN_COMPUTE_F32; cm <= KERN_COMPUTE_BF16; cm++) {
                struct kern_linear_job jobs[N_SHAPES];
                size_t off = 0;
                for (int is = 0; is < N_SHAPES; is++) {
                    jobs[is] = (struct kern_linear_job){.x = x,
                                                        .m = ms[im],
                                                        .w = {.dtype = DTYPE_BF16,
                                                              .data = (const char *)wb[is],
                                                              .rows = shapes[is][0],
                                                              .cols = shapes[is][1],
                                                              .ld = (size_t)shapes[is][1]}};
                    off += (size_t)ms[im] * shapes[is][0];
                }
                /* 0: tasks in the pool's order, 1: lanes in claims, 2: this
                 * thread alone, 3: lanes of a step per task */
                for (int way = 0; way < 4; way++) {
                    float *y = way == 0 ? ya : yb;
                    for (size_t i = 0; i < off; i++)
                        y[i] = NAN;
                    cpu_gemv_split_lanes(way != 0);
                    cpu_gemv_split_claims(way != 3);
                    cpu_kernels_single_thread(way == 2);
                    size_t o = 0;
                    for (int is = 0; is < N_SHAPES; is++) {
                        jobs[is].y = y + o;
                        CHECK(cpu_gemv(y + o, x, ms[im], &jobs[is].w, cm) == 0);
                        o += (size_t)ms[im] * shapes[is][0];
                    }
                    cpu_kernels_single_thread(false);
                    for (size_t i = 0; i < off; i++)
                        CHECK_MSG(!isnan(y[i]), "gemv lanes: %s way %d left row %zu unwritten",
                                  kernels[ik] ? kernels[ik] : "measured", way, i);
                    if (way)
                        CHECK_MSG(memcmp(ya, yb, off * sizeof(float)) == 0,
                                  "gemv lanes: %s m %d way %d differs from the pool's order",
                                  kernels[ik] ? kernels[ik] : "measured", ms[im], way);
                    /* the same three as one group */
                    for (size_t i = 0; i < off; i++)
                        yb[i] = NAN;
                    for (int is = 0; is < N_SHAPES; is++)
                        jobs[is].y = yb + (jobs[is].y - y);
                    cpu_kernels_single_thread(way == 2);
                    CHECK(cpu_gemv_group(jobs, N_SHAPES, cm) == 0);
                    cpu_kernels_single_thread(false);
                    CHECK_MSG(memcmp(ya, yb, off * sizeof(float)) == 0,
                              "gemv lanes: %s m %d, a group (way %d) differs from one by one",
                              kernels[ik] ? kernels[ik] : "measured", ms[im], way);
                }
            }
    }
    cpu_gemv_split_lanes(true);
    cpu_gemv_split_claims(true);
    CHECK(cpu_gemv_force(NULL) == 0);
    for (int is = 0; is < N_SHAPES; is++)
        free(wb[is]);
    free(x);
    free(ya);
    free(yb);
}

/* The quantized products in lanes of sub-lanes (vnni-far: a claim's runs
 * of several sub-lanes read in lockstep, qdot_far.h) and without (vnni-near,
 * one stream; vnni-m8 and amx-few, whole tiles): in lanes in claims, in
 * lanes of one step per pool task, in the pool's order and on this thread
 * alone, one call and a group, every row the scalar reference's bits. y
 * starts as NaN,
 * so a row no task wrote shows. The shapes give many units a sub-lane (2100
 * rows), sub-lanes of unequal length and a short last unit (1000, 530),
 * one unit (37); the group mixes the types of one step's pieces (Q5_0 into
 * Q8_0, as a Q4_K_M file's q, k and v) and K-quants of two widths. */
static void test_qlinear_lanes(void)
{
    static const struct {
        enum dtype t;
        int rows, cols;
    } shapes[] = {{DTYPE_Q4_K, 2100, 256}, {DTYPE_Q6_K, 1000, 512}, {DTYPE_Q8_0, 530, 96},
                  {DTYPE_Q5_0, 37, 64},    {DTYPE_Q5_0, 530, 96},   {DTYPE_Q8_0, 1000, 96},
                  {DTYPE_Q4_K, 37, 512}};
    enum { N_SHAPES = sizeof(shapes) / sizeof(shapes[0]), M_MAX = 3, COLS_MAX = 512 };
    /* a kernel of streams (sub-lanes), one of a row at a time and two of
     * many rows at a time (units of whole tiles) */
    static const char *const kernels[] = {"vnni-far", "vnni-near", "vnni-m8", "vnni-m8z",
                                          "amx-few",  "avx2-far",  "avx2"};
    static const int ms[] = {1, M_MAX};
    void *wd[N_SHAPES];
    size_t ny = 0;
    for (int is = 0; is < N_SHAPES; is++) {
        const size_t blocks = (size_t)shapes[is].rows * shapes[is].cols / dtype_block(shapes[is].t);
        wd[is] = malloc(blocks * quant_block_bytes(shapes[is].t));
        cpu_qlinear_random_blocks(shapes[is].t, wd[is], blocks, 40 + (uint64_t)is);
        ny += (size_t)M_MAX * shapes[is].rows;
    }
    float *x = malloc((size_t)M_MAX * COLS_MAX * sizeof(float));
    float *ref = malloc(ny * sizeof(float)), *y = malloc(ny * sizeof(float));
    struct kern_linear_job jobs[N_SHAPES];
    for (size_t im = 0; im < sizeof(ms) / sizeof(ms[0]); im++) {
        const int m = ms[im];
        /* the group's jobs share x where their widths agree */
        size_t o = 0;
        for (int is = 0; is < N_SHAPES; is++) {
            jobs[is] = (struct kern_linear_job){.x = x,
                                                .m = m,
                                                .y = ref + o,
                                                .w = {.dtype = shapes[is].t,
                                                      .data = wd[is],
                                                      .rows = shapes[is].rows,
                                                      .cols = shapes[is].cols,
                                                      .ld = (size_t)shapes[is].cols}};
            o += (size_t)m * shapes[is].rows;
        }
        fill_uniform(x, (size_t)M_MAX * COLS_MAX, -1, 1);
        /* the reference on this thread alone, a unit per task in order:
         * nothing of the lanes' claims or stealing */
        CHECK(cpu_qlinear_force("scalar") == 0);
        cpu_gemv_split_lanes(false);
        cpu_kernels_single_thread(true);
        for (int is = 0; is < N_SHAPES; is++)
            CHECK(cpu_qlinear(jobs[is].y, x, m, &jobs[is].w, KERN_COMPUTE_BF16) == 0);
        cpu_kernels_single_thread(false);
        cpu_gemv_split_lanes(true);
        for (size_t ik = 0; ik < sizeof(kernels) / sizeof(kernels[0]); ik++) {
            if (cpu_qlinear_force(kernels[ik]) < 0) {
                printf("qlinear lanes: %s skipped (%s)\n", kernels[ik], err_msg());
                continue;
            }
            /* 0: tasks in the pool's order, 1: lanes in claims, 2: this
             * thread alone, 3: lanes of one step per pool task; each call
             * alone, then all as one group */
            for (int way = 0; way < 4; way++)
                for (int group = 0; group < 2; group++) {
                    for (size_t i = 0; i < o; i++)
                        y[i] = NAN;
                    struct kern_linear_job g[N_SHAPES];
                    for (int is = 0; is < N_SHAPES; is++) {
                        g[is] = jobs[is];
                        g[is].y = y + (jobs[is].y - ref);
                    }
                    cpu_gemv_split_lanes(way != 0);
                    cpu_gemv_split_claims(way != 3);
                    cpu_kernels_single_thread(way == 2);
                    if (group)
                        CHECK(cpu_qlinear_group(g, N_SHAPES, KERN_COMPUTE_BF16) == 0);
                    else
                        for (int is = 0; is < N_SHAPES; is++)
                            CHECK(cpu_qlinear(g[is].y, x, m, &g[is].w, KERN_COMPUTE_BF16) == 0);
                    cpu_kernels_single_thread(false);
                    cpu_gemv_split_claims(true);
                    cpu_gemv_split_lanes(true);
                    size_t bad = o;
                    for (size_t i = 0; i < o && bad == o; i++)
                        if (memcmp(&y[i], &ref[i], sizeof(float)) != 0)
                            bad = i;
                    CHECK_MSG(bad == o,
                              "qlinear lanes: %s m %d way %d %s: output %zu is %g, the scalar "
                              "reference's %g",
                              kernels[ik], m, way, group ? "group" : "one by one", bad,
                              bad < o ? y[bad] : 0.0, bad < o ? ref[bad] : 0.0);
                }
        }
    }
    CHECK(cpu_qlinear_force(NULL) == 0);
    for (int is = 0; is < N_SHAPES; is++)
        free(wd[is]);
    free(x);
    free(ref);
    free(y);
}

/* Lanes cut in sub-lanes (lanes.h): the pool's tasks, each a step with its
 * units (at most one per stream, ascending), take every unit exactly once,
 * and the steps of a lane are as many as its longest sub-lane: for units from 1 to 70 (fewer than
 * the threads or the streams, and not a multiple of either), 1 to 8 streams, run here alone (every
 * lane's steps taken by this thread, the others' stolen from the back) and over the pool. */
struct lanes_seen {
    struct cpu_lanes l;
    _Atomic int seen[80];
    atomic_int bad;
};

static void lanes_seen_task(void *ctx, int task)
{
    struct lanes_seen *t = ctx;
    int u[CPU_LANES_STREAMS_MAX];
    const int step = cpu_lanes_chunk(&t->l, task);
    const int n = cpu_lanes_units(&t->l, step, u);
    if (n < 1 || n > t->l.streams)
        atomic_store(&t->bad, 1);
    for (int k = 0; k < n; k++) {
        if (u[k] < 0 || u[k] >= 80 || (k && u[k] <= u[k - 1]))
            atomic_store(&t->bad, 1);
        else
            atomic_fetch_add(&t->seen[u[k]], 1);
    }
}

static void test_lanes_streams(void)
{
    static struct lanes_seen t;
    for (int alone = 0; alone < 2; alone++)
        for (int streams = 1; streams <= CPU_LANES_STREAMS_MAX; streams++)
            for (int units = 1; units <= 70; units++) {
                cpu_kernels_single_thread(alone);
                for (int i = 0; i < 80; i++)
                    atomic_init(&t.seen[i], 0);
                atomic_init(&t.bad, 0);
                const int tasks = cpu_lanes_init_streams(&t.l, units, streams);
                CHECK(t.l.lanes != 0 || tasks == units); /* one task a unit */
                int steps = 0;
                for (int i = 0; i < t.l.lanes; i++) {
                    const int n = t.l.unit0[i + 1] - t.l.unit0[i];
                    steps += (n + t.l.streams - 1) / t.l.streams;
                }
                CHECK(t.l.lanes == 0 || tasks == steps);
                cpu_kernels_run(lanes_seen_task, &t, tasks);
                cpu_kernels_single_thread(false);
                CHECK_MSG(!atomic_load(&t.bad), "lanes: %d units, %d streams: a bad step", units,
                          streams);
                for (int i = 0; i < 80; i++)
                    CHECK_MSG(atomic_load(&t.seen[i]) == (i < units),
                              "lanes: %d units, %d streams: unit %d taken %d times", units, streams,
                              i, atomic_load(&t.seen[i]));
            }
}

/* Lanes in claims (lanes.h): every step and every unit taken exactly once,
 * a claim's steps in one lane, at most `per` of them, its runs the units of
 * its steps (as cpu_lanes_units gives them one step at a time); on this
 * thread alone (one lane, claims in order from the front) the claims go
 * per, per, ..., then one by one for the lane's last `tail` steps; over the
 * pool, a task per lane; for units from 1 to 70, 1 to 8 streams, per 1 to
 * 5, tail 1 to 4. */
struct lanes_claimed {
    struct cpu_lanes l;
    _Atomic int seen[80], step_seen[80];
    atomic_int bad;
    int log[80], logged; /* alone: each claim's count, in order */
};

static void lanes_claimed_steps(void *ctx, int step, int count)
{
    struct lanes_claimed *t = ctx;
    int first[CPU_LANES_STREAMS_MAX], n[CPU_LANES_STREAMS_MAX], u[CPU_LANES_STREAMS_MAX];
    if (count < 1 || count > t->l.per || step < 0 || step + count > 80) {
        atomic_store(&t->bad, 1);
        return;
    }
    if (t->logged < 80)
        t->log[t->logged++] = count;
    int lane = 0;
    while (t->l.lanes && step >= t->l.step0[lane + 1])
        lane++;
    if (t->l.lanes && step + count > t->l.step0[lane + 1])
        atomic_store(&t->bad, 1); /* a claim across lanes */
    const int runs = cpu_lanes_runs(&t->l, step, count, first, n);
    int total = 0;
    for (int k = 0; k < runs; k++)
        total += n[k];
    for (int s = step; s < step + count; s++) {
        atomic_fetch_add(&t->step_seen[s], 1);
        const int m = cpu_lanes_units(&t->l, s, u);
        total -= m;
        for (int k = 0; k < m; k++) {
            /* unit u[k] is step s's in its sub-lane's run */
            bool in_run = false;
            for (int r = 0; r < runs; r++)
                in_run = in_run || (u[k] == first[r] + (s - step) && s - step < n[r]);
            if (!in_run || u[k] < 0 || u[k] >= 80)
                atomic_store(&t->bad, 1);
            else
                atomic_fetch_add(&t->seen[u[k]], 1);
        }
    }
    if (total != 0)
        atomic_store(&t->bad, 1);
}

static void lanes_claimed_task(void *ctx, int task)
{
    struct lanes_claimed *t = ctx;
    cpu_lanes_task(&t->l, task, lanes_claimed_steps, t);
}

static void test_lanes_claims(void)
{
    static struct lanes_claimed t;
    for (int alone = 0; alone < 2; alone++)
        for (int streams = 1; streams <= CPU_LANES_STREAMS_MAX; streams++)
            for (int per = 1; per <= 5; per++)
                for (int tail = 1; tail <= 4; tail++)
                    for (int units = 1; units <= 70; units++) {
                        cpu_kernels_single_thread(alone);
                        for (int i = 0; i < 80; i++) {
                            atomic_init(&t.seen[i], 0);
                            atomic_init(&t.step_seen[i], 0);
                        }
                        atomic_init(&t.bad, 0);
                        t.logged = 0;
                        const int tasks = cpu_lanes_init_claims(&t.l, units, streams, per, tail);
                        CHECK(tasks == t.l.lanes);
                        const int steps = t.l.step0[t.l.lanes];
                        cpu_kernels_run(lanes_claimed_task, &t, tasks);
                        cpu_kernels_single_thread(false);
                        CHECK_MSG(!atomic_load(&t.bad),
                                  "claims: %d units, %d streams, per %d, tail %d: a bad claim",
                                  units, streams, per, tail);
                        for (int i = 0; i < 80; i++) {
                            CHECK_MSG(atomic_load(&t.seen[i]) == (i < units),
                                      "claims: %d units, %d streams, per %d, tail %d: unit %d "
                                      "taken %d times",
                                      units, streams, per, tail, i, atomic_load(&t.seen[i]));
                            CHECK(atomic_load(&t.step_seen[i]) == (i < steps));
                        }
                        if (!alone)
                            continue;
                        /* one lane from the front: per at a time, the last tail alone */
                        int left = steps;
                        for (int c = 0; c < t.logged; c++) {
                            const int want = left <= tail        ? 1
                                             : left - tail < per ? left - tail
                                                                 : per;
                            CHECK_MSG(t.log[c] == want,
                                      "claims: %d steps, per %d, tail %d: claim %d of %d, not %d",
                                      steps, per, tail, c, t.log[c], want);
                            left -= t.log[c];
                        }
                        CHECK(left == 0);
                    }
}

static void test_linear(void)
{
    static const int gemv_ms[] = {1, 2, 3, 4, 5, 8, 15, 16};
    static const int blas_ms[] = {17, 64};
    static const char *const isas[] = {
        "amx",           "avx512bf16",    "avx512bf16-r1",  "avx512bf16-r1f", "avx512bf16-s4",
        "avx512bf16-r8", "avx512bf16-m8", "avx512bf16-m8f", "avx512pairs",    "avx512bf16-m8s",
        "avx512",        "avx512-r1",     "avx512-m8",      "avx512-m8f",     "avx2",
        "avx2-next",     "avx2-m8",       "avx2-s4",        "matmul",         "scalar"};
    int cases = linear_cases(blas_ms, sizeof(blas_ms) / sizeof(blas_ms[0]));
    /* the GEMV: every kernel this CPU runs, then the measured choices */
    for (size_t i = 0; i < sizeof(isas) / sizeof(isas[0]); i++) {
        if (cpu_gemv_force(isas[i]) < 0) {
            printf("linear: %s skipped (%s)\n", isas[i], err_msg());
            continue;
        }
        CHECK(strncmp(cpu_gemv_kernels(), isas[i], strlen(isas[i])) == 0);
        cases += linear_cases(gemv_ms, sizeof(gemv_ms) / sizeof(gemv_ms[0]));
    }
    CHECK(cpu_gemv_force(NULL) == 0);
    cases += linear_cases(gemv_ms, sizeof(gemv_ms) / sizeof(gemv_ms[0]));
    /* the matmul at prefill-like sizes (m > 64, k with a tail past a
     * vector multiple) by every path: f32 products through oneDNN and
     * OpenBLAS (f32 mode, and bf16 mode's round-f32), and bf16 mode through
     * oneDNN's bf16 x bf16 primitive; then the measured choices */
    static const int big_ms[] = {100, 257};
    static const int big_ks[] = {75, 300};
    static const int big_ns[] = {37, 530};
    static const enum dtype ts[] = {DTYPE_F32, DTYPE_F16, DTYPE_BF16};
    static const char *const paths[][2] = {{"onednn", "round-f32"},
                                           {"openblas", "round-f32"},
                                           {"onednn", "onednn-bf16"},
                                           {"onednn", "amx"},
                                           {NULL, NULL}};
    for (size_t ip = 0; ip < sizeof(paths) / sizeof(paths[0]); ip++) {
        CHECK(cpu_matmul_force(NULL) == 0);
        if (ip == 3 && !cpu_amx_granted()) {
            /* refused by name where it cannot run */
            CHECK(cpu_matmul_force("amx") == ERR_UNSUPPORTED);
            printf("linear: amx skipped (%s)\n", err_msg());
            continue;
        }
        /* oneDNN makes bf16 products wherever the CPU has AVX-512, and
         * none on AVX2 alone: refused by name there */
        if (ip == 2 && !cpu_isa_avx512() && cpu_matmul_force("onednn-bf16") == ERR_UNSUPPORTED) {
            printf("linear: onednn-bf16 skipped (%s)\n", err_msg());
            continue;
        }
        for (int c = 0; c < 2 && paths[ip][c]; c++)
            CHECK(cpu_matmul_force(paths[ip][c]) == 0);
        /* the bf16 paths differ from the others in bf16 mode only */
        const int cm0 = ip == 2 || ip == 3 ? KERN_COMPUTE_BF16 : KERN_COMPUTE_F32;
        for (size_t im = 0; im < 2; im++)
            for (size_t ik = 0; ik < 2; ik++)
                for (size_t in = 0; in < 2; in++)
                    for (size_t it = 0; it < 3; it++)
                        for (int cm = cm0; cm <= KERN_COMPUTE_BF16; cm++) {
                            int kk = big_ks[ik];
                            linear_case(big_ms[im], big_ns[in], kk, ts[it], in, (size_t)kk, 0, cm);
                            linear_case(big_ms[im], big_ns[in], kk, ts[it], !in, (size_t)kk + 13, 5,
                                        cm);
                            cases += 2;
                        }
        /* rows longer than the converter's span (1024 columns) in bf16 */
        if (ip == 2)
            for (size_t it = 0; it < 3; it++) {
                linear_case(100, 37, 1100, ts[it], 0, 1100, 0, KERN_COMPUTE_BF16);
                cases++;
            }
        /* the AMX path takes rows in 16s and columns in 32s (the shapes
         * above fall back to oneDNN): 17, 100 and 257 input rows leave 1, 3
         * and 1 blocks of 16 past the groups of 4 (and a partial block);
         * 528 weight rows leave 16 past its tasks of 128; 1088 columns, 34
         * chunks, pass the packing's span; dense and column slices */
        if (ip == 3) {
            static const int amx_ms[] = {17, 100, 257}, amx_ns[] = {48, 528}, amx_ks[] = {96, 1088};
            for (size_t im = 0; im < 3; im++)
                for (size_t in = 0; in < 2; in++)
                    for (size_t ik = 0; ik < 2; ik++) {
                        const int kk = amx_ks[ik];
                        linear_case(amx_ms[im], amx_ns[in], kk, DTYPE_BF16, in, (size_t)kk, 0,
                                    KERN_COMPUTE_BF16);
                        linear_case(amx_ms[im], amx_ns[in], kk, DTYPE_BF16, !in, (size_t)kk + 13, 5,
                                    KERN_COMPUTE_BF16);
                        cases += 2;
                    }
        }
    }
    /* measured: on AMX, a shape it takes times both bf16 paths on its
     * first products (5 each), then keeps one; every result is checked */
    CHECK(cpu_matmul_force(NULL) == 0);
    if (cpu_amx_granted()) {
        for (int rep = 0; rep < 11; rep++)
            linear_case(100, 528, 1088, DTYPE_BF16, rep % 2, 1088, 0, KERN_COMPUTE_BF16);
        cases += 11;
        CHECK_MSG(strstr(cpu_matmul_paths(), "weight shapes timed in use: ") != NULL, "%s",
                  cpu_matmul_paths());
    }
    printf("linear: %d cases, worst rel err %.3g in f32 mode, %.3g in bf16 mode with bf16 weights "
           "(tolerance 1e-5)\n",
           cases, worst_linear, worst_linear_bf16);
}

/* ---- the matmul's primitive cache, from two threads ---- */

/* Each thread runs cpu_linear (the backend's own, on host memory) at more
 * distinct m than the cache holds, f32 and bf16 mode, and checks every
 * result against a double reference. Both threads use the same shapes, so
 * one primitive runs on two threads at once. */
struct cache_job {
    int seed;
    int failed;
};

static void *cache_thread(void *arg)
{
    struct cache_job *j = arg;
    /* as a tensor-parallel rank computes: alone, so the two threads run
     * primitives at once (the pool would serialise them) */
    cpu_kernels_single_thread(true);
    enum { N = 160, K = 200, M_LO = 9, M_HI = 60 };
    float *w = malloc((size_t)N * K * sizeof(float));
    float *x = malloc((size_t)M_HI * K * sizeof(float));
    float *y = malloc((size_t)M_HI * N * sizeof(float));
    float *ref = malloc((size_t)M_HI * N * sizeof(float));
    uint64_t r = 0x1234567u + (uint64_t)j->seed;
    for (int i = 0; i < N * K; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        w[i] = bf16_to_f32(f32_to_bf16((float)((r >> 40) & 0xffff) / 65536.0f - 0.5f));
    }
    for (int i = 0; i < M_HI * K; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = bf16_to_f32(f32_to_bf16((float)((r >> 40) & 0xffff) / 65536.0f - 0.5f));
    }
    struct weight_view wv = {.dtype = DTYPE_F32, .data = w, .rows = N, .cols = K, .ld = K};
    for (int pass = 0; pass < 2; pass++)
        for (int m = M_LO; m <= M_HI; m++) {
            enum kern_compute cm = (m + pass) % 2 ? KERN_COMPUTE_BF16 : KERN_COMPUTE_F32;
            if (cpu_linear(y, x, m, &wv, NULL, cm) < 0) {
                j->failed++;
                continue;
            }
            for (int i = 0; i < m; i++)
                for (int o = 0; o < N; o++) {
                    double acc = 0;
                    for (int c = 0; c < K; c++)
                        acc += (double)x[i * K + c] * w[o * K + c];
                    ref[i * N + o] = (float)acc;
                }
            if (test_rel_err(y, ref, (size_t)m * N) > 1e-5)
                j->failed++;
        }
    free(w);
    free(x);
    free(y);
    free(ref);
    return NULL;
}

static void test_matmul_cache(void)
{
    /* the primitives' cache: oneDNN's paths by request (measured on a
     * loaded machine, the f32 class could take OpenBLAS, which makes none) */
    CHECK(cpu_matmul_force("onednn") == 0);
    if (cpu_matmul_force("onednn-bf16") != 0) {
        /* AVX2 alone: bf16 mode's products round x and run oneDNN's f32 one */
        CHECK(!cpu_isa_avx512());
        CHECK(cpu_matmul_force("round-f32") == 0);
    }
    uint64_t misses0 = cpu_matmul_cache_misses();
    struct cache_job jobs[2] = {{.seed = 1}, {.seed = 2}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        CHECK(pthread_create(&t[i], NULL, cache_thread, &jobs[i]) == 0);
    for (int i = 0; i < 2; i++) {
        pthread_join(t[i], NULL);
        CHECK_MSG(jobs[i].failed == 0, "matmul cache thread %d: %d wrong results", i,
                  jobs[i].failed);
    }
    /* 52 shapes, two passes, two threads: at least every shape once, and
     * more than the cache holds, so the second pass evicted and re-made */
    uint64_t misses = cpu_matmul_cache_misses() - misses0;
    CHECK_MSG(misses >= 52, "matmul cache: %llu misses for 52 shapes", (unsigned long long)misses);

    /* a shape just used is a hit */
    struct cpu_matmul_ceiling c;
    CHECK_MSG(cpu_matmul_ceiling(64, 64, 64, KERN_COMPUTE_F32, 0, &c) == 0, "%s", err_msg());
    uint64_t before = cpu_matmul_cache_misses();
    CHECK(cpu_matmul_ceiling(64, 64, 64, KERN_COMPUTE_F32, 0, &c) == 0);
    CHECK_MSG(cpu_matmul_cache_misses() == before, "matmul cache: a repeated shape missed");
    /* and the oneDNN path ran a JIT implementation, not the reference one */
    CHECK_MSG(c.impl[0] && strncmp(c.impl, "ref", 3) != 0, "matmul impl \"%s\"", c.impl);
    printf("matmul cache: %llu misses over 2 threads x 2 passes x 52 shapes; impl %s, %.1f "
           "GFLOP/s at 64x64x64\n",
           (unsigned long long)misses, c.impl, c.gflops);
    CHECK(cpu_matmul_force(NULL) == 0);
}

/* The measured choices name a kernel for every class of weights; an
 * unknown or missing kernel is refused and changes nothing; SHARDSWAP_GEMV
 * naming an unknown one costs the process one line on stderr, not its
 * start, and naming a known one makes every call use it. */
static void run_version(const char *env, char *out, size_t size)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "%s '" SHARDSWAP_BINARY "' --version 2>&1", env);
    out[0] = 0;
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL);
    if (!p)
        return;
    size_t n = fread(out, 1, size - 1, p);
    out[n] = 0;
    int status = pclose(p);
    CHECK_MSG(status == 0, "%s shardswap --version exited %d", env, status);
}

static void test_gemv_choice(void)
{
    char measured[1536];
    snprintf(measured, sizeof(measured), "%s", cpu_gemv_kernels());
    static const char *const classes[] = {"f32:", "f16:", "bf16:", "bf16/bf16:", "measured in"};
    for (size_t i = 0; i < sizeof(classes) / sizeof(classes[0]); i++)
        CHECK_MSG(strstr(measured, classes[i]) != NULL, "choices: %s", measured);
    CHECK(cpu_gemv_force("sse9") == ERR_INVALID);
    CHECK(strcmp(cpu_gemv_kernels(), measured) == 0);
    CHECK(cpu_gemv_force("scalar") == 0); /* every CPU has it */
    CHECK(strcmp(cpu_gemv_kernels(), "scalar (every call, by request)") == 0);
    CHECK(cpu_gemv_force(NULL) == 0);
    CHECK(strcmp(cpu_gemv_kernels(), measured) == 0);

    char out[2048];
    run_version("SHARDSWAP_GEMV=sse9", out, sizeof(out));
    CHECK_MSG(strstr(out, "SHARDSWAP_GEMV: unknown GEMV kernel \"sse9\"") != NULL, "output: %s",
              out);
    CHECK_MSG(strstr(out, "\ngemv f32: ") != NULL, "output: %s", out);
    run_version("SHARDSWAP_GEMV=scalar", out, sizeof(out));
    CHECK_MSG(strstr(out, "\ngemv scalar (every call, by request)\n") != NULL, "output: %s", out);
}

/* ---- vec.h: the vector loops against the scalar definitions ---- */

static void test_vec(void)
{
    enum { N = 67 }; /* four vectors and a tail */
    float x[N], r[N];
    uint16_t b[N];
    uint32_t bits[] = {0x7fc00001u, 0x7f800001u, 0xff800000u, 0x7f800000u, 0x3f808000u,
                       0x3f818000u, 0x80000001u, 0x7f7fffffu, 0x00000000u, 0x3f7fffffu};
    fill_uniform(x, N, -100, 100);
    for (size_t i = 0; i < sizeof(bits) / sizeof(bits[0]); i++)
        memcpy(&x[3 + 5 * i], &bits[i], sizeof(float)); /* NaNs, infinities, ties, tails */
    vec_round_bf16(r, x, N);
    vec_to_bf16(b, x, N);
    int off = 0;
    for (int i = 0; i < N; i++) {
        float want = bf16_round(x[i]);
        off += memcmp(&r[i], &want, sizeof(float)) != 0 || b[i] != f32_to_bf16(x[i]);
    }
    CHECK_MSG(off == 0, "vec_round_bf16/vec_to_bf16: %d of %d values not bit-exact", off, N);

    float e[N], g[N], up[N], y[N];
    fill_uniform(e, N, -80, 80);
    e[5] = -INFINITY; /* masked softmax scores */
    memcpy(g, e, sizeof(g));
    vec_exp(e, N);
    fill_uniform(up, N, -2, 2);
    vec_silu(y, g, up, N);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        double want = exp((double)g[i]), silu = g[i] / (1 + exp(-(double)g[i])) * up[i];
        bad += !(fabs(e[i] - want) <= 1e-6 * want);
        bad += i != 5 && !(fabs(y[i] - silu) <= 1e-6 * fabs(silu) + 1e-30);
    }
    CHECK(e[5] == 0.0f);
    CHECK_MSG(bad == 0, "vec_exp/vec_silu: %d values off by more than 1e-6 relative", bad);

    /* the GELUs (erf, and tanh's approximation) and the soft cap: within a
     * few ulp of the double results, relative to the input where 1 + erf
     * or 1 + tanh cancels */
    fill_uniform(g, N, -8, 8);
    for (int ta = 0; ta < 2; ta++) {
        vec_gelu(y, g, up, N, ta);
        bad = 0;
        for (int i = 0; i < N; i++) {
            const double v = g[i],
                         t = ta ? tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))
                                : erf(v / sqrt(2.0)),
                         want = 0.5 * v * (1 + t) * up[i];
            bad += !(fabs(y[i] - want) <= 1e-6 * fabs(v * up[i]) + 1e-30);
        }
        CHECK_MSG(bad == 0, "vec_gelu (tanh %d): %d of %d values off", ta, bad, N);
    }
    memcpy(y, g, sizeof(y));
    vec_softcap(y, N, 5.0f);
    bad = 0;
    for (int i = 0; i < N; i++) {
        const double want = tanh(g[i] / 5.0) * 5.0;
        bad += !(fabs(y[i] - want) <= 1e-6 * fabs(want) + 1e-30);
    }
    CHECK_MSG(bad == 0, "vec_softcap: %d of %d values off", bad, N);

    /* the masked softmax: keys past `visible` and those not ok get 0, the
     * rest sum to 1; no key ok gives a row of zeros */
    uint8_t ok[N];
    for (int i = 0; i < N; i++)
        ok[i] = i % 3 != 1;
    float sm[N];
    fill_uniform(sm, N, -20, 20);
    double ref[N], mx = -INFINITY, sum = 0;
    const int visible = 50;
    for (int i = 0; i < visible; i++)
        mx = ok[i] && sm[i] > mx ? sm[i] : mx;
    for (int i = 0; i < N; i++)
        sum += ref[i] = i < visible && ok[i] ? exp(sm[i] - mx) : 0;
    vec_softmax_masked(sm, ok, visible, N);
    bad = 0;
    for (int i = 0; i < N; i++)
        bad += !(fabs(sm[i] - ref[i] / sum) <= 1e-6 * ref[i] / sum + 1e-12);
    CHECK_MSG(bad == 0, "vec_softmax_masked: %d of %d values off", bad, N);
    memset(ok, 0, sizeof(ok));
    vec_softmax_masked(sm, ok, visible, N);
    bad = 0;
    for (int i = 0; i < N; i++)
        bad += sm[i] != 0.0f;
    CHECK_MSG(bad == 0, "vec_softmax_masked with no key: %d values not 0", bad);
}

/* ---- the matmul's paths: measured, forced, named ---- */

static void test_matmul_choice(void)
{
    char measured[512];
    snprintf(measured, sizeof(measured), "%s", cpu_matmul_paths());
    static const char *const parts[] = {"f32: ", "; bf16: ", "measured in"};
    for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++)
        CHECK_MSG(strstr(measured, parts[i]) != NULL, "paths: %s", measured);
    CHECK(cpu_matmul_force("mkl") == ERR_INVALID);
    CHECK(strcmp(cpu_matmul_paths(), measured) == 0);
    CHECK(cpu_matmul_force("openblas") == 0);
    /* oneDNN's bf16 product is refused by name where it makes none (AVX2
     * alone), and the forced path stays as it was */
    const bool bf16 = cpu_matmul_force("onednn-bf16") == 0;
    if (!bf16) {
        CHECK(!cpu_isa_avx512());
        CHECK_MSG(strstr(err_msg(), "makes no bf16 matmul on this CPU") != NULL, "%s", err_msg());
        CHECK(cpu_matmul_force("round-f32") == 0);
    }
    CHECK_MSG(strcmp(cpu_matmul_paths(), bf16 ? "f32: openblas (by request); bf16: onednn-bf16 "
                                                "(by request)"
                                              : "f32: openblas (by request); bf16: round-f32 "
                                                "(by request)") == 0,
              "paths: %s", cpu_matmul_paths());
    CHECK(cpu_matmul_force(NULL) == 0);
    CHECK(strcmp(cpu_matmul_paths(), measured) == 0);

    char out[2048];
    run_version("SHARDSWAP_MATMUL=mkl", out, sizeof(out));
    CHECK_MSG(strstr(out, "SHARDSWAP_MATMUL: unknown matmul path \"mkl\"") != NULL, "output: %s",
              out);
    CHECK_MSG(strstr(out, "\nmatmul f32: ") != NULL, "output: %s", out);
    run_version("SHARDSWAP_MATMUL=round-f32,openblas", out, sizeof(out));
    CHECK_MSG(strstr(out, "\nmatmul f32: openblas (by request); bf16: round-f32 (by request)\n") !=
                  NULL,
              "output: %s", out);
}

/* ---- kern_embed ---- */

static void test_embed(void)
{
    enum { R = 10, C = 19, LD = 23, N = 9 };
    const int row0 = 100;
    /* inside [row0, row0 + R): 100, 109, 105, 104; outside: the rest */
    static const int32_t ids[N] = {100, 109, 99, 110, 105, -1, 0, 104, 1000};
    static const enum dtype ts[] = {DTYPE_F32, DTYPE_F16, DTYPE_BF16};
    for (size_t it = 0; it < sizeof(ts) / sizeof(ts[0]); it++) {
        for (int sliced = 0; sliced < 2; sliced++) {
            enum dtype t = ts[it];
            size_t es = dtype_size(t), ld = sliced ? LD : C, c0 = sliced ? 3 : 0;
            float wf[R * LD];
            unsigned char wt[R * LD * 4];
            fill_uniform(wf, R * ld, -2, 2);
            dtype_from_f32(t, wf, wt, R * ld);
            float y[N * C], ref[N * C];
            for (int i = 0; i < N; i++)
                for (int c = 0; c < C; c++) {
                    int r = ids[i] - row0;
                    ref[i * C + c] =
                        r >= 0 && r < R ? (float)ref_elem(t, wt, (size_t)r * ld + c0 + c) : 0.0f;
                }
            float junk[N * C];
            for (int i = 0; i < N * C; i++)
                junk[i] = 7.0f; /* so zero rows must be written, not left */
            struct dbuf *dw = upload(wt, R * ld * es);
            struct dbuf *di = upload(ids, sizeof(ids));
            struct dbuf *dy = upload(junk, sizeof(junk));
            struct weight_view w = {.dtype = t,
                                    .data = (const char *)dbuf_ptr(dw) + c0 * es,
                                    .rows = R,
                                    .cols = C,
                                    .ld = ld};
            CHECK(kern_embed(st, dbuf_ptr(dy), &w, dbuf_ptr(di), N, row0) == 0);
            download(y, dbuf_ptr(dy), sizeof(y));
            CHECK_MSG(memcmp(y, ref, sizeof(y)) == 0, "embed %s ld=%zu: not exact", dtype_name(t),
                      ld);
            device_free(dw);
            device_free(di);
            device_free(dy);
        }
    }
}

/* ---- kern_layernorm ---- */

static void test_layernorm(void)
{
    enum { M = 5, N = 67 };
    const float eps = 1e-5f;
    double worst = 0;
    for (int affine = 0; affine < 2; affine++) {
        for (int in_place = 0; in_place < 2; in_place++) {
            float x[M * N], g[N], b[N], y[M * N], ref[M * N];
            fill_uniform(x, M * N, 1, 5); /* a mean far from 0 */
            fill_uniform(g, N, 0.5f, 1.5f);
            fill_uniform(b, N, -1, 1);
            for (int i = 0; i < M; i++) {
                double mean = 0, var = 0;
                for (int j = 0; j < N; j++)
                    mean += x[i * N + j];
                mean /= N;
                for (int j = 0; j < N; j++)
                    var += (x[i * N + j] - mean) * (x[i * N + j] - mean);
                var /= N; /* biased, as torch */
                for (int j = 0; j < N; j++) {
                    double v = (x[i * N + j] - mean) / sqrt(var + eps);
                    ref[i * N + j] = (float)(affine ? v * g[j] + b[j] : v);
                }
            }
            struct dbuf *dx = upload(x, sizeof(x));
            struct dbuf *dg = upload(g, sizeof(g));
            struct dbuf *db = upload(b, sizeof(b));
            struct dbuf *dy = in_place ? NULL : upload(NULL, sizeof(y));
            float *py = in_place ? dbuf_ptr(dx) : dbuf_ptr(dy);
            CHECK(kern_layernorm(st, py, dbuf_ptr(dx), M, N, affine ? dbuf_ptr(dg) : NULL,
                                 affine ? dbuf_ptr(db) : NULL, eps) == 0);
            download(y, py, sizeof(y));
            double e = test_rel_err(y, ref, M * N);
            CHECK_MSG(e <= 1e-5, "layernorm affine=%d in_place=%d: rel err %.3g", affine, in_place,
                      e);
            worst = e > worst ? e : worst;
            if (!in_place) {
                float back[M * N];
                download(back, dbuf_ptr(dx), sizeof(back));
                CHECK(memcmp(back, x, sizeof(x)) == 0); /* x untouched */
            }
            device_free(dx);
            device_free(dg);
            device_free(db);
            device_free(dy);
        }
    }
    printf("layernorm: worst rel err %.3g (tolerance 1e-5)\n", worst);
}

/* ---- kern_rmsnorm ---- */

/* Row i of x scaled by 10^(i - 3): in row 0 mean(x^2) ~ 3e-7 is below eps,
 * so eps matters; row 4 is large. */
enum { RMS_M = 5 };

static void ref_rmsnorm(double *ref, const float *x, int n, const float *g, float eps,
                        bool with_eps)
{
    for (int i = 0; i < RMS_M; i++) {
        double ss = 0;
        for (int j = 0; j < n; j++)
            ss += (double)x[i * n + j] * x[i * n + j];
        double r = 1 / sqrt(ss / n + (with_eps ? eps : 0)); /* mean over n, as torch */
        for (int j = 0; j < n; j++)
            ref[i * n + j] = x[i * n + j] * r * (g ? g[j] : 1.0);
    }
}

static void test_rmsnorm(void)
{
    /* 5: only the tail after the kernel's 8 running sums; 67: both; 1024: none */
    static const int widths[] = {5, 67, 1024};
    const float eps = 1e-6f;
    double worst = 0;
    for (size_t wi = 0; wi < sizeof(widths) / sizeof(widths[0]); wi++)
        for (int weighted = 0; weighted < 2; weighted++)
            for (int in_place = 0; in_place < 2; in_place++) {
                const int n = widths[wi];
                const size_t cnt = (size_t)RMS_M * n;
                float *x = malloc(cnt * sizeof(float)), *y = malloc(cnt * sizeof(float));
                float *g = malloc((size_t)n * sizeof(float));
                double *ref = malloc(cnt * sizeof(double)), *alt = malloc(cnt * sizeof(double));
                for (int i = 0; i < RMS_M; i++)
                    fill_uniform(x + (size_t)i * n, (size_t)n, -1, 1);
                for (size_t k = 0; k < cnt; k++)
                    x[k] *= powf(10.0f, (float)((int)(k / (size_t)n) - 3));
                fill_uniform(g, (size_t)n, 0.5f, 1.5f);
                const float *gw = weighted ? g : NULL;
                ref_rmsnorm(ref, x, n, gw, eps, true);

                struct dbuf *dx = upload(x, cnt * sizeof(float));
                struct dbuf *dg = upload(g, (size_t)n * sizeof(float));
                struct dbuf *dy = in_place ? NULL : upload(NULL, cnt * sizeof(float));
                float *py = in_place ? dbuf_ptr(dx) : dbuf_ptr(dy);
                CHECK(kern_rmsnorm(st, py, dbuf_ptr(dx), RMS_M, n, weighted ? dbuf_ptr(dg) : NULL,
                                   eps) == 0);
                download(y, py, cnt * sizeof(float));
                int bad = 0;
                for (size_t k = 0; k < cnt; k++) {
                    double d = fabs(y[k] - ref[k]);
                    if (!(d <= 1e-6 * fabs(ref[k]) + FLT_MIN))
                        bad++;
                    if (ref[k] != 0 && d / fabs(ref[k]) > worst)
                        worst = d / fabs(ref[k]);
                }
                CHECK_MSG(bad == 0, "rmsnorm n=%d weighted=%d in_place=%d: %d of %zu values off", n,
                          weighted, in_place, bad, cnt);
                if (!in_place) {
                    float *back = malloc(cnt * sizeof(float));
                    download(back, dbuf_ptr(dx), cnt * sizeof(float));
                    CHECK(memcmp(back, x, cnt * sizeof(float)) == 0); /* x untouched */
                    free(back);
                }
                /* without eps row 0 would come out far from the reference */
                ref_rmsnorm(alt, x, n, gw, eps, false);
                CHECK(fabs(alt[0] - ref[0]) > 0.1 * fabs(ref[0]));
                device_free(dx);
                device_free(dg);
                device_free(dy);
                free(x);
                free(y);
                free(g);
                free(ref);
                free(alt);
            }
    printf("rmsnorm: 12 cases, worst per-element rel err %.3g (tolerance 1e-6)\n", worst);
}

/* ---- kern_rope ---- */

/* Which rotation the reference applies: the contract's (rotate_half pairs
 * i and i + half, the angle an f32 product), or a wrong one the data must
 * tell apart from it. */
enum rope_ref { ROPE_REF, ROPE_INTERLEAVED, ROPE_ANGLE_DOUBLE };

static void ref_rope(float *out, const float *x, int n, int heads, int hd, int rot,
                     const int32_t *pos, const float *inv_freq, float scale, enum rope_ref how)
{
    const int half = rot / 2;
    memcpy(out, x, (size_t)n * heads * hd * sizeof(float));
    for (int r = 0; r < n; r++)
        for (int h = 0; h < heads; h++)
            for (int i = 0; i < half; i++) {
                const float af = (float)pos[r] * inv_freq[i]; /* rounded to f32 */
                const double a = how == ROPE_ANGLE_DOUBLE ? (double)pos[r] * inv_freq[i] : af;
                const double c = cos(a) * scale, s = sin(a) * scale;
                const size_t base = ((size_t)r * heads + h) * hd;
                const size_t i0 = base + (how == ROPE_INTERLEAVED ? 2 * (size_t)i : (size_t)i);
                const size_t i1 = how == ROPE_INTERLEAVED ? i0 + 1 : i0 + half;
                out[i0] = (float)(x[i0] * c - x[i1] * s);
                out[i1] = (float)(x[i1] * c + x[i0] * s);
            }
}

static void test_rope(void)
{
    static const struct {
        int n, heads, head_dim, rot_dim;
        float scale;
        int repeat; /* consecutive rows at one position */
    } cases[] = {
        {5, 3, 8, 8, 1.0f, 1},      /* the whole head rotates */
        {4, 2, 10, 6, 1.0f, 1},     /* dims 6..9 of each head stay */
        {3, 2, 160, 160, 0.75f, 1}, /* 80 pairs: more than one block of the CPU's; a scale */
        {1, 4, 64, 32, 1.0f, 1},    /* a decode step, half the head */
        /* a batch's decode step, its sequences at one position in turn
         * (the CPU's table shared), with more than one block and without */
        {8, 2, 64, 64, 1.0f, 3},
        {10, 2, 160, 160, 0.75f, 2},
    };
    /* 0 and 1, and one whose f32 angles are far from the double ones in
     * every case (131071: an f32 angle there is 2^-7 rad coarse) */
    static const int32_t pos_choices[] = {0, 1, 7, 131071, 4093, 37};
    double worst = 0, angle_gap = 0;
    for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
        const int n = cases[ci].n, heads = cases[ci].heads, hd = cases[ci].head_dim;
        const int rot = cases[ci].rot_dim, half = rot / 2;
        const float scale = cases[ci].scale;
        const size_t cnt = (size_t)n * heads * hd;
        float *x = malloc(cnt * sizeof(float)), *y = malloc(cnt * sizeof(float));
        float *ref = malloc(cnt * sizeof(float)), *alt = malloc(cnt * sizeof(float));
        float *inv_freq = malloc((size_t)half * sizeof(float));
        int32_t *pos = malloc((size_t)n * sizeof(int32_t));
        fill_uniform(x, cnt, -1, 1);
        for (int i = 0; i < half; i++) /* Llama's, base 10000 */
            inv_freq[i] = (float)(1.0 / pow(10000.0, 2.0 * i / rot));
        for (int r = 0; r < n; r++)
            pos[r] = pos_choices[(ci + (size_t)(r / cases[ci].repeat)) %
                                 (sizeof(pos_choices) / sizeof(pos_choices[0]))];
        ref_rope(ref, x, n, heads, hd, rot, pos, inv_freq, scale, ROPE_REF);

        struct dbuf *dx = upload(x, cnt * sizeof(float));
        struct dbuf *dp = upload(pos, (size_t)n * sizeof(int32_t));
        struct dbuf *df = upload(inv_freq, (size_t)half * sizeof(float));
        CHECK(kern_rope(st, dbuf_ptr(dx), n, heads, hd, rot, dbuf_ptr(dp), dbuf_ptr(df), scale) ==
              0);
        download(y, dbuf_ptr(dx), cnt * sizeof(float));
        double e = test_rel_err(y, ref, cnt);
        CHECK_MSG(e <= 1e-6, "rope n=%d heads=%d head_dim=%d rot_dim=%d: rel err %.3g", n, heads,
                  hd, rot, e);
        worst = e > worst ? e : worst;
        int moved = 0; /* past rot_dim: the input, bit for bit */
        for (size_t k = 0; k < cnt; k++)
            if ((int)(k % (size_t)hd) >= rot && memcmp(&y[k], &x[k], sizeof(float)) != 0)
                moved++;
        CHECK_MSG(moved == 0, "rope rot_dim=%d: %d elements past rot_dim changed", rot, moved);
        /* the pairing matters, and the f32 angle (by how much depends on
         * how each product rounds: checked over all cases below) */
        ref_rope(alt, x, n, heads, hd, rot, pos, inv_freq, scale, ROPE_INTERLEAVED);
        CHECK(test_rel_err(alt, ref, cnt) > 1e-2);
        ref_rope(alt, x, n, heads, hd, rot, pos, inv_freq, scale, ROPE_ANGLE_DOUBLE);
        double angle = test_rel_err(alt, ref, cnt);
        CHECK(angle > 1e-5);
        angle_gap = angle > angle_gap ? angle : angle_gap;
        device_free(dx);
        device_free(dp);
        device_free(df);
        free(x);
        free(y);
        free(ref);
        free(alt);
        free(inv_freq);
        free(pos);
    }
    CHECK(angle_gap > 1e-3);
    printf("rope: %zu cases, worst rel err %.3g (tolerance 1e-6)\n",
           sizeof(cases) / sizeof(cases[0]), worst);
}

/* ---- kern_activation ---- */

static double ref_act(enum kern_act a, double x)
{
    switch (a) {
    case KERN_ACT_RELU:
        return x > 0 ? x : 0;
    case KERN_ACT_GELU:
        return 0.5 * x * (1 + erf(x / sqrt(2.0)));
    case KERN_ACT_GELU_TANH:
        return 0.5 * x *
               (1 + tanh(sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
    case KERN_ACT_SILU:
        return x / (1 + exp(-x));
    }
    return NAN;
}

static void test_activation(void)
{
    enum { N = 1001 };
    static const enum kern_act acts[] = {KERN_ACT_RELU, KERN_ACT_GELU, KERN_ACT_GELU_TANH,
                                         KERN_ACT_SILU};
    static const char *names[] = {"relu", "gelu", "gelu_tanh", "silu"};
    float x[N], y[N];
    for (int i = 0; i < N; i++)
        x[i] = -10.0f + 20.0f * (float)i / (N - 1); /* -10 .. 10, 0 included */
    for (size_t ia = 0; ia < sizeof(acts) / sizeof(acts[0]); ia++) {
        struct dbuf *dx = upload(x, sizeof(x));
        CHECK(kern_activation(st, dbuf_ptr(dx), N, acts[ia]) == 0);
        download(y, dbuf_ptr(dx), sizeof(y));
        int bad = 0;
        double worst = 0;
        for (int i = 0; i < N; i++) {
            double r = ref_act(acts[ia], x[i]), d = fabs(y[i] - r);
            if (!(d <= 1e-5 * fabs(r) + 1e-6))
                bad++;
            worst = d > worst ? d : worst;
        }
        CHECK_MSG(bad == 0, "%s: %d of %d values off, worst abs err %.3g", names[ia], bad, N,
                  worst);
        device_free(dx);
    }
    /* the two gelus differ by more than the tolerance: a swap would show */
    double gap = 0;
    for (int i = 0; i < N; i++) {
        double d = fabs(ref_act(KERN_ACT_GELU, x[i]) - ref_act(KERN_ACT_GELU_TANH, x[i]));
        gap = d > gap ? d : gap;
    }
    CHECK(gap > 1e-4);
}

/* ---- kern_softcap: tanh(x / cap) * cap over the vocabulary ---- */

static void test_softcap(void)
{
    enum { N = 1003 }; /* not a multiple of 16: the masked tail too */
    static float x[N], y[N];
    for (int i = 0; i < N; i++)
        x[i] = -100.0f + 200.0f * (float)i / (N - 1);
    const float cap = 30.0f;
    struct dbuf *dx = upload(x, sizeof(x));
    CHECK(kern_softcap(st, dbuf_ptr(dx), N, cap) == 0);
    download(y, dbuf_ptr(dx), sizeof(y));
    int bad = 0;
    double worst = 0;
    for (int i = 0; i < N; i++) {
        double r = tanh((double)x[i] / cap) * cap, d = fabs(y[i] - r);
        if (!(d <= 1e-6 * fabs(r) + 1e-6))
            bad++;
        worst = d > worst ? d : worst;
    }
    CHECK_MSG(bad == 0, "softcap: %d of %d values off, worst abs err %.3g", bad, N, worst);
    device_free(dx);
}

/* ---- kern_gated_act ---- */

static void test_gated_act(void)
{
    enum { N = 1001 };
    static const enum kern_act acts[] = {KERN_ACT_RELU, KERN_ACT_GELU, KERN_ACT_GELU_TANH,
                                         KERN_ACT_SILU};
    static const char *names[] = {"relu", "gelu", "gelu_tanh", "silu"};
    static const char *aliases[] = {"y apart", "y = gate", "y = up"};
    float gate[N], up[N], y[N], act[N];
    for (int i = 0; i < N; i++)
        gate[i] = -10.0f + 20.0f * (float)i / (N - 1);
    fill_uniform(up, N, -3, 3);
    for (size_t ia = 0; ia < sizeof(acts) / sizeof(acts[0]); ia++) {
        /* kern_activation's own result, times up in f32: what the gated
         * kernel must give bit for bit */
        struct dbuf *da = upload(gate, sizeof(gate));
        CHECK(kern_activation(st, dbuf_ptr(da), N, acts[ia]) == 0);
        download(act, dbuf_ptr(da), sizeof(act));
        device_free(da);
        for (int alias = 0; alias < 3; alias++) {
            struct dbuf *dg = upload(gate, sizeof(gate)), *du = upload(up, sizeof(up));
            struct dbuf *dy = alias ? NULL : upload(NULL, sizeof(y));
            float *py = alias == 0 ? dbuf_ptr(dy) : alias == 1 ? dbuf_ptr(dg) : dbuf_ptr(du);
            CHECK(kern_gated_act(st, py, dbuf_ptr(dg), dbuf_ptr(du), N, acts[ia]) == 0);
            download(y, py, sizeof(y));
            int bad = 0, inexact = 0;
            for (int i = 0; i < N; i++) {
                double r = ref_act(acts[ia], gate[i]) * up[i], d = fabs(y[i] - r);
                if (!(d <= 1e-5 * fabs(r) + 1e-6 * fabs(up[i])))
                    bad++;
                float want = act[i] * up[i];
                if (memcmp(&y[i], &want, sizeof(float)) != 0)
                    inexact++;
            }
            CHECK_MSG(bad == 0, "gated %s, %s: %d of %d values off", names[ia], aliases[alias], bad,
                      N);
            CHECK_MSG(inexact == 0, "gated %s, %s: %d of %d values not kern_activation * up",
                      names[ia], aliases[alias], inexact, N);
            device_free(dg);
            device_free(du);
            device_free(dy);
        }
    }
}

/* Activations long enough to split over the pool (from 8192 elements one
 * task a thread, from 65536 the tasks of every split kernel), lengths not a
 * multiple of 16 among them: bit for bit the same values computed in
 * pieces short enough to stay on the calling thread. */
static void test_act_split(void)
{
    static const size_t lens[] = {8191, 8192, 8 * 4864 + 5, 70001};
    enum { PIECE = 4000 };
    for (size_t il = 0; il < sizeof(lens) / sizeof(lens[0]); il++) {
        const size_t n = lens[il];
        float *gate = malloc(n * sizeof(float)), *up = malloc(n * sizeof(float));
        float *whole = malloc(n * sizeof(float)), *pieces = malloc(n * sizeof(float));
        CHECK(gate && up && whole && pieces);
        if (!gate || !up || !whole || !pieces)
            goto next;
        fill_uniform(gate, n, -10, 10);
        fill_uniform(up, n, -3, 3);
        for (int gated = 0; gated < 2; gated++) {
            struct dbuf *dg = upload(gate, n * sizeof(float)), *du = upload(up, n * sizeof(float));
            struct dbuf *dy = upload(NULL, n * sizeof(float));
            float *g = dbuf_ptr(dg), *u = dbuf_ptr(du), *y = dbuf_ptr(dy);
            CHECK((gated ? kern_gated_act(st, y, g, u, n, KERN_ACT_SILU)
                         : kern_activation(st, g, n, KERN_ACT_SILU)) == 0);
            download(whole, gated ? y : g, n * sizeof(float));
            device_free(dg);
            dg = upload(gate, n * sizeof(float));
            g = dbuf_ptr(dg);
            for (size_t i = 0; i < n; i += PIECE) {
                const size_t k = n - i < PIECE ? n - i : PIECE;
                CHECK((gated ? kern_gated_act(st, y + i, g + i, u + i, k, KERN_ACT_SILU)
                             : kern_activation(st, g + i, k, KERN_ACT_SILU)) == 0);
            }
            download(pieces, gated ? y : g, n * sizeof(float));
            CHECK_MSG(memcmp(whole, pieces, n * sizeof(float)) == 0,
                      "silu%s over %zu elements split differs from its pieces",
                      gated ? " * up" : "", n);
            device_free(dg);
            device_free(du);
            device_free(dy);
        }
    next:
        free(gate);
        free(up);
        free(whole);
        free(pieces);
    }
}

/* ---- kern_add, kern_scale, kern_copy, kern_gather_rows ---- */

static void test_elementwise(void)
{
    enum { N = 517 };
    float x[N], y[N], got[N], ref[N];
    fill_uniform(x, N, -3, 3);
    fill_uniform(y, N, -3, 3);

    /* add: one f32 addition per element, so exact */
    for (int i = 0; i < N; i++)
        ref[i] = y[i] + x[i];
    struct dbuf *dx = upload(x, sizeof(x)), *dy = upload(y, sizeof(y));
    CHECK(kern_add(st, dbuf_ptr(dy), dbuf_ptr(dx), N) == 0);
    download(got, dbuf_ptr(dy), sizeof(got));
    CHECK_MSG(memcmp(got, ref, sizeof(got)) == 0, "add not exact");
    download(got, dbuf_ptr(dx), sizeof(got));
    CHECK(memcmp(got, x, sizeof(x)) == 0);

    /* scale: one f32 multiplication per element, so exact */
    const float a = -0.37f;
    for (int i = 0; i < N; i++)
        ref[i] = x[i] * a;
    CHECK(kern_scale(st, dbuf_ptr(dx), N, a) == 0);
    download(got, dbuf_ptr(dx), sizeof(got));
    CHECK_MSG(memcmp(got, ref, sizeof(got)) == 0, "scale not exact");
    /* n = 0 touches nothing */
    CHECK(kern_scale(st, dbuf_ptr(dx), 0, 0.0f) == 0);
    download(got, dbuf_ptr(dx), sizeof(got));
    CHECK(memcmp(got, ref, sizeof(got)) == 0);
    device_free(dx);
    device_free(dy);

    /* copy: an odd byte count to an odd address; the bytes around stay */
    enum { B = 1001, PAD = 16 };
    unsigned char src[B], dst[B + 2 * PAD + 3], want[B + 2 * PAD + 3];
    for (int i = 0; i < B; i++)
        src[i] = (unsigned char)(rng_next() >> 56);
    memset(want, 0xa5, sizeof(want));
    memcpy(want + PAD + 3, src, B);
    struct dbuf *ds = upload(src, sizeof(src));
    struct dbuf *dd = upload(NULL, sizeof(dst));
    memset(dst, 0xa5, sizeof(dst));
    CHECK(kern_to_device(st, dbuf_ptr(dd), dst, sizeof(dst)) == 0);
    CHECK(kern_copy(st, (char *)dbuf_ptr(dd) + PAD + 3, dbuf_ptr(ds), B) == 0);
    download(dst, dbuf_ptr(dd), sizeof(dst));
    CHECK(memcmp(dst, want, sizeof(dst)) == 0);
    device_free(ds);
    device_free(dd);

    /* gather_rows: rows repeat and come in any order */
    enum { R = 9, W = 13, G = 6 };
    static const int32_t rows[G] = {4, 0, 8, 4, 2, 8};
    float t[R * W], gy[G * W], gref[G * W];
    fill_uniform(t, R * W, -1, 1);
    for (int i = 0; i < G; i++)
        memcpy(gref + i * W, t + rows[i] * W, W * sizeof(float));
    struct dbuf *dt = upload(t, sizeof(t)), *dr = upload(rows, sizeof(rows));
    struct dbuf *dg = upload(NULL, sizeof(gy));
    CHECK(kern_gather_rows(st, dbuf_ptr(dg), dbuf_ptr(dt), dbuf_ptr(dr), G, W) == 0);
    download(gy, dbuf_ptr(dg), sizeof(gy));
    CHECK(memcmp(gy, gref, sizeof(gy)) == 0);
    device_free(dt);
    device_free(dr);
    device_free(dg);

    /* combine_rows: each output row the k products summed in their order,
     * each rounded first (torch's index_add_ of weighted rows), so exact */
    enum { CK = 2, CN = 3 };
    static const int32_t crows[CN * CK] = {5, 1, 0, 8, 3, 3};
    float cw[CN * CK], cy[CN * W], cref[CN * W];
    fill_uniform(cw, CN * CK, 0, 1);
    for (int i = 0; i < CN; i++)
        for (int c = 0; c < W; c++) {
            float acc = 0;
            for (int j = 0; j < CK; j++) {
                volatile float p = cw[i * CK + j] * t[crows[i * CK + j] * W + c];
                acc = j ? acc + p : p;
            }
            cref[i * W + c] = acc;
        }
    dt = upload(t, sizeof(t));
    dr = upload(crows, sizeof(crows));
    struct dbuf *dw = upload(cw, sizeof(cw)), *dy2 = upload(NULL, sizeof(cy));
    CHECK(kern_combine_rows(st, dbuf_ptr(dy2), dbuf_ptr(dt), dbuf_ptr(dr), dbuf_ptr(dw), CN, CK,
                            W) == 0);
    download(cy, dbuf_ptr(dy2), sizeof(cy));
    CHECK_MSG(memcmp(cy, cref, sizeof(cy)) == 0, "combine_rows not exact");
    device_free(dt);
    device_free(dr);
    device_free(dw);
    device_free(dy2);
}

/* ---- kern_kv_append + kern_attention ---- */

/* Batch, query heads, max_t; the KV heads are each case's, head_dim (KD)
 * each round's of test_attention. */
/* KT: room for a prefill of more query rows than one CPU attention task
 * takes (64) */
enum { KB = 3, KH = 4, KT = 150 };
static int attn_head_dim = 5;
#define KD attn_head_dim
#define KW (KH * KD)

/* Cache index of (sequence b, KV head h, position p, element i):
 * (batch, kv_heads, max_t, head_dim). */
static size_t kv_at(const struct kv_geom *g, int b, int h, int p, int i)
{
    return (((size_t)b * g->kv_heads + h) * KT + p) * KD + i;
}

static size_t kv_floats(const struct kv_geom *g)
{
    return (size_t)KB * g->kv_heads * KT * KD;
}

/* What the reference applies of kern_attention's contract: the causal
 * mask, the padding mask, and query head h reading KV head
 * h / (heads / kv_heads) (false: h % kv_heads). The real reference has all
 * three. */
struct ref_attn {
    bool causal, padding, groups;
};

/* q, out: (KB * t_new, KW). */
static void ref_attention(float *out, const float *q, const float *kc, const float *vc,
                          const uint8_t *key_ok, const struct kv_geom *g, int past, int t_new,
                          struct ref_attn how)
{
    const int group = KH / g->kv_heads;
    for (int b = 0; b < KB; b++)
        for (int h = 0; h < KH; h++)
            for (int t = 0; t < t_new; t++) {
                const int kvh = how.groups ? h / group : h % g->kv_heads;
                const float *qr = q + ((size_t)b * t_new + t) * KW + h * KD;
                float *o = out + ((size_t)b * t_new + t) * KW + h * KD;
                int last = how.causal ? past + t : past + t_new - 1;
                /* the window: keys (position - window, position] */
                const int first = g->window > 0 ? past + t - g->window + 1 : 0;
                double s[KT], mx = -INFINITY;
                for (int j = 0; j <= last; j++) {
                    if ((how.padding && !key_ok[b * KT + j]) || j < first) {
                        s[j] = -INFINITY;
                        continue;
                    }
                    double acc = 0;
                    for (int i = 0; i < KD; i++)
                        acc += (double)qr[i] * kc[kv_at(g, b, kvh, j, i)];
                    if (g->softcap > 0)
                        acc = g->softcap * tanh(acc / g->softcap);
                    s[j] = acc;
                    mx = acc > mx ? acc : mx;
                }
                for (int i = 0; i < KD; i++)
                    o[i] = 0;
                if (mx == -INFINITY)
                    continue; /* sees no key */
                double sum = 0;
                for (int j = 0; j <= last; j++) {
                    s[j] = s[j] == -INFINITY ? 0 : exp(s[j] - mx);
                    sum += s[j];
                }
                for (int i = 0; i < KD; i++) {
                    double acc = 0;
                    for (int j = 0; j <= last; j++)
                        acc += s[j] / sum * vc[kv_at(g, b, kvh, j, i)];
                    o[i] = (float)acc;
                }
            }
}

/* Floats past the scratch kern_attention_scratch asks for, which must stay
 * as they were. */
enum { SCRATCH_GUARD = 64 };
#define SCRATCH_CANARY 12345.0f

/* Runs kern_attention and checks it against the reference, that the data
 * make both masks (and the grouping of query heads) matter, and that it
 * used no more scratch than kern_attention_scratch said. */
static void attention_step(struct dbuf *dkc, struct dbuf *dvc, const float *kc, const float *vc,
                           struct dbuf *dok, const uint8_t *key_ok, const struct kv_geom *g,
                           int past, int t_new)
{
    const size_t n = (size_t)KB * t_new * KW;
    float *q = malloc(n * sizeof(float)), *out = malloc(n * sizeof(float));
    float *ref = malloc(n * sizeof(float)), *alt = malloc(n * sizeof(float));
    fill_uniform(q, n, -1, 1);
    for (size_t i = 0; i < n; i++)
        out[i] = 9.0f; /* rows that see no key must be written as 0 */
    ref_attention(ref, q, kc, vc, key_ok, g, past, t_new, (struct ref_attn){true, true, true});

    const size_t scratch = kern_attention_scratch(dev, g, t_new, past + t_new);
    const size_t sn = scratch + SCRATCH_GUARD;
    float *guard = malloc(sn * sizeof(float));
    for (size_t i = 0; i < sn; i++)
        guard[i] = SCRATCH_CANARY;
    struct dbuf *dq = upload(q, n * sizeof(float)), *dout = upload(out, n * sizeof(float));
    struct dbuf *ds = upload(guard, sn * sizeof(float));
    int rc = kern_attention(st, dbuf_ptr(dout), dbuf_ptr(dq), dbuf_ptr(dkc), dbuf_ptr(dvc),
                            dbuf_ptr(dok), g, past, t_new, dbuf_ptr(ds));
    CHECK_MSG(rc == 0, "%s", err_msg());
    download(out, dbuf_ptr(dout), n * sizeof(float));
    double e = test_rel_err(out, ref, n);
    CHECK_MSG(e <= 1e-5, "attention kv_heads=%d past=%d t_new=%d: rel err %.3g", g->kv_heads, past,
              t_new, e);
    printf("attention kv_heads=%d past=%d t_new=%d: rel err %.3g (tolerance 1e-5)\n", g->kv_heads,
           past, t_new, e);
    download(guard, dbuf_ptr(ds), sn * sizeof(float));
    int spilled = 0;
    for (size_t i = scratch; i < sn; i++)
        spilled += guard[i] != SCRATCH_CANARY;
    CHECK_MSG(spilled == 0, "attention kv_heads=%d t_new=%d: wrote past its %zu floats of scratch",
              g->kv_heads, t_new, scratch);

    /* the padding mask matters in every call; the causal one when there is
     * more than one query; the grouping when it is neither 1 nor heads */
    if (g->window == 0 || past < g->window) { /* else the pads are out of every window */
        ref_attention(alt, q, kc, vc, key_ok, g, past, t_new, (struct ref_attn){true, false, true});
        CHECK(test_rel_err(alt, ref, n) > 1e-2);
    }
    /* the window and the soft-capping matter where the test has them */
    if (g->window > 0 && past + t_new > g->window) {
        struct kv_geom whole = *g;
        whole.window = 0;
        ref_attention(alt, q, kc, vc, key_ok, &whole, past, t_new,
                      (struct ref_attn){true, true, true});
        CHECK(test_rel_err(alt, ref, n) > 1e-2);
    }
    if (g->softcap > 0) {
        struct kv_geom uncapped = *g;
        uncapped.softcap = 0;
        ref_attention(alt, q, kc, vc, key_ok, &uncapped, past, t_new,
                      (struct ref_attn){true, true, true});
        CHECK(test_rel_err(alt, ref, n) > 1e-3);
    }
    if (t_new > 1) {
        ref_attention(alt, q, kc, vc, key_ok, g, past, t_new, (struct ref_attn){false, true, true});
        CHECK(test_rel_err(alt, ref, n) > 1e-2);
    }
    if (g->kv_heads > 1 && g->kv_heads < KH) {
        ref_attention(alt, q, kc, vc, key_ok, g, past, t_new, (struct ref_attn){true, true, false});
        CHECK(test_rel_err(alt, ref, n) > 1e-2);
    }
    device_free(dq);
    device_free(dout);
    device_free(ds);
    free(q);
    free(out);
    free(ref);
    free(alt);
    free(guard);
}

/* Appends t_new positions at pos to the device cache and to the host
 * mirror the reference reads; then checks the whole device cache against
 * the mirror exactly (layout, and positions not written keep their value). */
static void append_step(struct dbuf *dkc, struct dbuf *dvc, float *kc, float *vc,
                        const struct kv_geom *g, int t_new, int pos, const int *pad)
{
    const int kw = g->kv_heads * KD;
    const size_t n = (size_t)KB * t_new * kw;
    float *k = malloc(n * sizeof(float)), *v = malloc(n * sizeof(float));
    for (int b = 0; b < KB; b++)
        for (int t = 0; t < t_new; t++)
            for (int c = 0; c < kw; c++) {
                size_t i = ((size_t)b * t_new + t) * kw + c;
                /* padding keys are large: if they were not masked they
                 * would take most of the attention */
                float scale = pos + t < pad[b] ? 4.0f : 1.0f;
                k[i] = scale * rng_uniform(-1, 1);
                v[i] = pos + t < pad[b] ? 50.0f : rng_uniform(-1, 1);
                kc[kv_at(g, b, c / KD, pos + t, c % KD)] = k[i];
                vc[kv_at(g, b, c / KD, pos + t, c % KD)] = v[i];
            }
    struct dbuf *dk = upload(k, n * sizeof(float)), *dv = upload(v, n * sizeof(float));
    CHECK(kern_kv_append(st, dbuf_ptr(dkc), dbuf_ptr(dvc), dbuf_ptr(dk), dbuf_ptr(dv), g, t_new,
                         pos) == 0);
    const size_t cache = kv_floats(g);
    float *got = malloc(cache * sizeof(float));
    download(got, dbuf_ptr(dkc), cache * sizeof(float));
    CHECK_MSG(memcmp(got, kc, cache * sizeof(float)) == 0, "k cache after append at %d", pos);
    download(got, dbuf_ptr(dvc), cache * sizeof(float));
    CHECK_MSG(memcmp(got, vc, cache * sizeof(float)) == 0, "v cache after append at %d", pos);
    device_free(dk);
    device_free(dv);
    free(k);
    free(v);
    free(got);
}

/* A prefill of `prompt` positions and two decode steps with KH query heads
 * over kv_heads KV heads, within a window of that many keys (0: none), the
 * scores soft-capped at softcap (0: not). */
static void attention_case_with(int kv_heads, int prompt, int window, float softcap)
{
    const struct kv_geom g = {.batch = KB,
                              .heads = KH,
                              .kv_heads = kv_heads,
                              .head_dim = KD,
                              .max_t = KT,
                              .window = window,
                              .softcap = softcap};
    /* left padding per sequence: none, 2 (its first two queries see no
     * key), 3 */
    static const int pad[KB] = {0, 2, 3};
    const size_t cache = kv_floats(&g);
    float *kc = malloc(cache * sizeof(float)), *vc = malloc(cache * sizeof(float));
    for (size_t i = 0; i < cache; i++)
        kc[i] = vc[i] = -77.0f; /* never written: must stay */
    uint8_t key_ok[KB * KT] = {0};
    struct dbuf *dkc = upload(kc, cache * sizeof(float)), *dvc = upload(vc, cache * sizeof(float));
    struct dbuf *dok = upload(NULL, sizeof(key_ok));

    /* prefill, pads first */
    for (int b = 0; b < KB; b++)
        for (int p = 0; p < prompt; p++)
            key_ok[b * KT + p] = p >= pad[b];
    CHECK(kern_to_device(st, dbuf_ptr(dok), key_ok, sizeof(key_ok)) == 0);
    append_step(dkc, dvc, kc, vc, &g, prompt, 0, pad);
    attention_step(dkc, dvc, kc, vc, dok, key_ok, &g, 0, prompt);

    /* two decode steps */
    for (int p = prompt; p < prompt + 2; p++) {
        for (int b = 0; b < KB; b++)
            key_ok[b * KT + p] = 1;
        CHECK(kern_to_device(st, dbuf_ptr(dok), key_ok, sizeof(key_ok)) == 0);
        append_step(dkc, dvc, kc, vc, &g, 1, p, pad);
        attention_step(dkc, dvc, kc, vc, dok, key_ok, &g, p, 1);
    }

    device_free(dkc);
    device_free(dvc);
    device_free(dok);
    free(kc);
    free(vc);
}

static void attention_case(int kv_heads, int prompt)
{
    attention_case_with(kv_heads, prompt, 0, 0);
}

/* A windowed layer's ring (kv_geom.ring: window + step - 1 rows, position p
 * at row p % ring) against the whole cache, in steps of `step` (longer than
 * the window), one and three positions in turn up to KT, sequences 1 and 2
 * left-padded: after every append the ring holds each position's latest
 * writer exactly; kern_attention over it equals the reference within 1e-5
 * and the whole cache's output within 1e-6 per 16 of head_dim (sgemm
 * blocks a span's keys by its length: the scores' sums over head_dim in
 * another order), bitwise while no step reads
 * across the ring's end (before it first fills: the same products in the
 * same order; after, a read across it sums the two parts apart). */
static void ring_case(int kv_heads, int window, int step, float softcap)
{
    const struct kv_geom whole = {.batch = KB,
                                  .heads = KH,
                                  .kv_heads = kv_heads,
                                  .head_dim = KD,
                                  .max_t = KT,
                                  .window = window,
                                  .softcap = softcap};
    struct kv_geom g = whole;
    g.ring = window + step - 1;
    static const int pad[KB] = {0, 2, 3};
    const size_t cache = kv_floats(&whole), rcache = (size_t)KB * kv_heads * g.ring * KD;
    float *kc = malloc(cache * sizeof(float)), *vc = malloc(cache * sizeof(float));
    float *rk = malloc(rcache * sizeof(float)), *rv = malloc(rcache * sizeof(float));
    fill_uniform(kc, cache, -1, 1);
    fill_uniform(vc, cache, -1, 1);
    uint8_t key_ok[KB * KT] = {0};
    struct dbuf *dkc = upload(kc, cache * sizeof(float)), *dvc = upload(vc, cache * sizeof(float));
    struct dbuf *drk = upload(NULL, rcache * sizeof(float)),
                *drv = upload(NULL, rcache * sizeof(float));
    struct dbuf *dok = upload(NULL, sizeof(key_ok));
    const int sizes[3] = {1, 3, step};
    int past = 0, steps = 0;
    double worst_ref = 0, worst_whole = 0;
    for (int t_new = step; past + t_new <= KT; t_new = sizes[steps++ % 3]) {
        const int kw = kv_heads * KD;
        const size_t n = (size_t)KB * t_new * kw, nq = (size_t)KB * t_new * KW;
        float *k = malloc(n * sizeof(float)), *v = malloc(n * sizeof(float));
        float *q = malloc(nq * sizeof(float)), *out = malloc(nq * sizeof(float));
        float *out_whole = malloc(nq * sizeof(float)), *ref = malloc(nq * sizeof(float));
        fill_uniform(k, n, -1, 1);
        fill_uniform(v, n, -1, 1);
        fill_uniform(q, nq, -1, 1);
        for (int b = 0; b < KB; b++)
            for (int t = 0; t < t_new; t++) {
                key_ok[b * KT + past + t] = past + t >= pad[b];
                for (int c = 0; c < kw; c++) {
                    kc[kv_at(&whole, b, c / KD, past + t, c % KD)] =
                        k[((size_t)b * t_new + t) * kw + c];
                    vc[kv_at(&whole, b, c / KD, past + t, c % KD)] =
                        v[((size_t)b * t_new + t) * kw + c];
                }
            }
        struct dbuf *dk = upload(k, n * sizeof(float)), *dv = upload(v, n * sizeof(float));
        struct dbuf *dq = upload(q, nq * sizeof(float)), *dout = upload(NULL, nq * sizeof(float));
        struct dbuf *ds = upload(NULL, 64 * sizeof(float));
        CHECK(kern_to_device(st, dbuf_ptr(dok), key_ok, sizeof(key_ok)) == 0);
        CHECK(kern_kv_append(st, dbuf_ptr(dkc), dbuf_ptr(dvc), dbuf_ptr(dk), dbuf_ptr(dv), &whole,
                             t_new, past) == 0);
        CHECK(kern_kv_append(st, dbuf_ptr(drk), dbuf_ptr(drv), dbuf_ptr(dk), dbuf_ptr(dv), &g,
                             t_new, past) == 0);
        /* row r of the ring: the last position p < past + t_new with p % ring == r */
        download(rk, dbuf_ptr(drk), rcache * sizeof(float));
        download(rv, dbuf_ptr(drv), rcache * sizeof(float));
        bool same = true;
        for (int b = 0; b < KB; b++)
            for (int h = 0; h < kv_heads; h++)
                for (int p = past + t_new - 1; p >= 0 && p >= past + t_new - g.ring; p--)
                    for (int i = 0; i < KD; i++) {
                        size_t at = (((size_t)b * kv_heads + h) * g.ring + p % g.ring) * KD + i;
                        same &= rk[at] == kc[kv_at(&whole, b, h, p, i)] &&
                                rv[at] == vc[kv_at(&whole, b, h, p, i)];
                    }
        CHECK_MSG(same, "ring of %d after an append of %d at %d", g.ring, t_new, past);
        CHECK(kern_attention(st, dbuf_ptr(dout), dbuf_ptr(dq), dbuf_ptr(drk), dbuf_ptr(drv),
                             dbuf_ptr(dok), &g, past, t_new, dbuf_ptr(ds)) == 0);
        download(out, dbuf_ptr(dout), nq * sizeof(float));
        CHECK(kern_attention(st, dbuf_ptr(dout), dbuf_ptr(dq), dbuf_ptr(dkc), dbuf_ptr(dvc),
                             dbuf_ptr(dok), &whole, past, t_new, dbuf_ptr(ds)) == 0);
        download(out_whole, dbuf_ptr(dout), nq * sizeof(float));
        ref_attention(ref, q, kc, vc, key_ok, &whole, past, t_new,
                      (struct ref_attn){true, true, true});
        double e = test_rel_err(out, ref, nq), w = test_rel_err(out, out_whole, nq);
        worst_ref = e > worst_ref ? e : worst_ref;
        worst_whole = w > worst_whole ? w : worst_whole;
        CHECK_MSG(e <= 1e-5 && w <= 1e-6 * ((KD + 15) / 16),
                  "ring of %d, %d at %d: rel err %.3g vs the reference, "
                  "%.3g vs the whole cache",
                  g.ring, t_new, past, e, w);
        if (past + t_new <= g.ring)
            CHECK_MSG(memcmp(out, out_whole, nq * sizeof(float)) == 0,
                      "ring of %d, %d at %d: not bitwise the whole cache's", g.ring, t_new, past);
        device_free(dk);
        device_free(dv);
        device_free(dq);
        device_free(dout);
        device_free(ds);
        free(k);
        free(v);
        free(q);
        free(out);
        free(out_whole);
        free(ref);
        past += t_new;
    }
    printf("attention kv_heads=%d window %d softcap %g in a ring of %d, %d steps to %d "
           "positions: rel err %.3g vs the reference, %.3g vs the whole cache\n",
           kv_heads, window, softcap, g.ring, steps, past, worst_ref, worst_whole);
    device_free(dkc);
    device_free(dvc);
    device_free(drk);
    device_free(drv);
    device_free(dok);
    free(kc);
    free(vc);
    free(rk);
    free(rv);
}

/* attn_vec.h's products give each row the same bits whatever the number of
 * rows beside it: every row of a 64-row call (a prefill's block) against
 * the same row alone (a decode step's), scores and values, head widths of
 * a masked vector and of whole ones. The batch's other sequences must not
 * change a sequence's logits. */
static void test_attn_vec_rows(void)
{
    if (!attn_vec_have())
        return;
    enum { R = 64, HD = 80, N = 40 };
    static const int hd_of[] = {20, 64, 80};
    float *q = malloc(R * HD * sizeof(float)), *k = malloc(N * HD * sizeof(float));
    float *all = malloc(R * HD * sizeof(float)), *one = malloc(HD * sizeof(float));
    fill_uniform(q, R * HD, -1, 1);
    fill_uniform(k, N * HD, -1, 1);
    int differ = 0;
    for (size_t b = 0; b < sizeof(hd_of) / sizeof(hd_of[0]); b++) {
        const int hd = hd_of[b];
        attn_scores(all, N, q, hd, R, hd, k, NULL, N);
        for (int r = 0; r < R; r++) {
            attn_scores(one, N, q + (size_t)r * hd, hd, 1, hd, k, NULL, N);
            differ += memcmp(one, all + (size_t)r * N, N * sizeof(float)) != 0;
        }
        /* values weighted by q's first N columns (rows of hd >= N floats
         * would be needed for more: hd 20 takes its 20 keys) */
        const int n = hd < N ? hd : N;
        attn_values(all, hd, q, hd, R, hd, k, n, false);
        for (int r = 0; r < R; r++) {
            attn_values(one, hd, q + (size_t)r * hd, hd, 1, hd, k, n, false);
            differ += memcmp(one, all + (size_t)r * hd, hd * sizeof(float)) != 0;
        }
    }
    CHECK_MSG(differ == 0, "attn_vec: %d rows differ between a 64-row call and the row alone",
              differ);
    free(q);
    free(k);
    free(all);
    free(one);
}

/* attn_vec.h's two products against double sums: rows 1-16 (every
 * shape of its blocks of rows), head widths of whole vectors, of a masked
 * last one and of one, 0 to 40 keys (whole blocks of 16 and a tail), the
 * values written and added. Where the CPU has them. */
static void test_attn_vec(void)
{
    if (!attn_vec_have()) {
        printf("attn_vec: not on this CPU\n");
        return;
    }
    static const int rows_of[] = {1, 2, 3, 4, 5, 7, 8, 16};
    static const int hd_of[] = {5, 16, 20, 64, 80, 128, 136, 256};
    static const int n_of[] = {1, 15, 16, 17, 40};
    enum { R = 16, HD = 256, N = 40, LD = 300 };
    float *q = malloc(R * LD * sizeof(float)), *k = malloc(N * HD * sizeof(float));
    float *s = malloc(R * LD * sizeof(float)), *out = malloc(R * LD * sizeof(float));
    float *init = malloc(R * LD * sizeof(float));
    double worst_s = 0, worst_v = 0;
    fill_uniform(q, R * LD, -1, 1);
    fill_uniform(k, N * HD, -1, 1);
    fill_uniform(init, R * LD, -1, 1);
    for (size_t a = 0; a < sizeof(rows_of) / sizeof(rows_of[0]); a++)
        for (size_t b = 0; b < sizeof(hd_of) / sizeof(hd_of[0]); b++)
            for (size_t c = 0; c < sizeof(n_of) / sizeof(n_of[0]); c++) {
                const int rows = rows_of[a], hd = hd_of[b], n = n_of[c];
                /* scores, q at a row stride past head_dim */
                for (int i = 0; i < R * LD; i++)
                    s[i] = 9.0f;
                attn_scores(s, LD, q, LD, rows, hd, k, n % 2 ? k : NULL, n);
                double err = 0, top = 0;
                int spilled = 0;
                for (int r = 0; r < R; r++)
                    for (int j = 0; j < LD; j++) {
                        if (r >= rows || j >= n) {
                            spilled += s[r * LD + j] != 9.0f;
                            continue;
                        }
                        double want = 0;
                        for (int i = 0; i < hd; i++)
                            want += (double)q[r * LD + i] * k[j * hd + i];
                        err = fmax(err, fabs(s[r * LD + j] - want));
                        top = fmax(top, fabs(want));
                    }
                CHECK_MSG(spilled == 0 && err <= 1e-5 * top,
                          "attn_scores rows %d head_dim %d keys %d: err %.3g of %.3g, %d written "
                          "outside",
                          rows, hd, n, err, top, spilled);
                worst_s = fmax(worst_s, err / top);
                /* values: weights from q, written, then added to init */
                for (int add = 0; add < 2; add++) {
                    memcpy(out, init, R * LD * sizeof(float));
                    attn_values(out, LD, q, LD, rows, hd, k, n, add);
                    err = top = 0;
                    spilled = 0;
                    for (int r = 0; r < R; r++)
                        for (int i = 0; i < LD; i++) {
                            if (r >= rows || i >= hd) {
                                spilled += out[r * LD + i] != init[r * LD + i];
                                continue;
                            }
                            double want = add ? init[r * LD + i] : 0;
                            for (int j = 0; j < n; j++)
                                want += (double)q[r * LD + j] * k[j * hd + i];
                            err = fmax(err, fabs(out[r * LD + i] - want));
                            top = fmax(top, fabs(want));
                        }
                    CHECK_MSG(spilled == 0 && err <= 1e-5 * top,
                              "attn_values rows %d head_dim %d keys %d add %d: err %.3g of %.3g, "
                              "%d written outside",
                              rows, hd, n, add, err, top, spilled);
                    worst_v = fmax(worst_v, err / top);
                }
            }
    printf("attn_vec: scores rel err %.3g, values %.3g (tolerance 1e-5)\n", worst_s, worst_v);
    free(q);
    free(k);
    free(s);
    free(out);
    free(init);
}

/* Every attention case at the current head width. */
static void attention_cases(void)
{
    /* a sliding window shorter than the prompt (prefill rows in one task
     * block and across blocks, decode past it), soft-capped scores, both */
    attention_case_with(2, 9, 4, 0);
    attention_case_with(KH, KT - 10, 7, 0);
    attention_case_with(1, 9, 0, 0.5f);
    attention_case_with(2, KT - 10, 5, 0.5f);
    attention_case(KH, 4); /* multi-head */
    attention_case(2, 4);  /* grouped: two query heads per KV head */
    attention_case(1, 4);  /* multi-query */
    /* query rows past one task's block (a prefill of 64 + 64 + 12) */
    attention_case(KH, KT - 10);
    attention_case(2, KT - 10);
    /* a windowed layer's ring: grouped decode steps, prefill steps in one
     * task block and across blocks (70 rows), soft-capped */
    ring_case(2, 4, 6, 0);
    ring_case(KH, 7, 70, 0);
    ring_case(1, 5, 9, 0.5f);
}

static void test_attention(void)
{
    /* head widths of a masked vector alone, of whole vectors (64: the
     * products' chunks in registers) and of both; a few rows through
     * attn_vec.h's products and through sgemm */
    static const int widths[] = {5, 64, 20};
    for (size_t w = 0; w < sizeof(widths) / sizeof(widths[0]); w++)
        for (int vec = 1; vec >= 0; vec--) {
            attn_head_dim = widths[w];
            cpu_attention_vec(vec);
            printf("attention cases, head_dim %d, %s\n", KD, vec ? "vector products" : "sgemm");
            attention_cases();
        }
    cpu_attention_vec(true);
    attn_head_dim = 5;
    test_attn_vec();
    test_attn_vec_rows();

    /* the CPU's scores live in its task threads' scratch: an execution
     * context carries none for them (attention_step checks that nothing is
     * written past what this says) */
    for (int kvh = 1; kvh <= KH; kvh *= 2) {
        const struct kv_geom g = {
            .batch = KB, .heads = KH, .kv_heads = kvh, .head_dim = KD, .max_t = KT};
        CHECK(kern_attention_scratch(dev, &g, KT, KT) == 0);
    }
}

/* ---- the row-wise and elementwise kernels over the pool ----
 * A prefill's sizes split them into tasks (kernels.c's split_run); every row
 * or element must come out bit for bit as computed on one thread alone. */
static void test_split_exact(void)
{
    enum { ROWS = 300, W = 1024, HEADS = 8, HD = 128 };
    const size_t n = (size_t)ROWS * W;
    float *x = malloc(n * sizeof(float)), *up = malloc(n * sizeof(float));
    float *g = malloc(W * sizeof(float)), *b = malloc(W * sizeof(float));
    float *y[2] = {malloc(n * sizeof(float)), malloc(n * sizeof(float))};
    int32_t pos[ROWS];
    float inv_freq[HD / 2];
    fill_uniform(x, n, -3, 3);
    fill_uniform(up, n, -2, 2);
    fill_uniform(g, W, 0.5f, 1.5f);
    fill_uniform(b, W, -1, 1);
    for (int r = 0; r < ROWS; r++) /* runs of 3 rows at one position, across tasks too */
        pos[r] = 3 * (r / 3) + 1;
    for (int i = 0; i < HD / 2; i++)
        inv_freq[i] = powf(10000.0f, -2.0f * i / HD);
    const char *names[] = {"layernorm",  "rmsnorm",   "rope",        "relu",
                           "gelu",       "gelu_tanh", "silu",        "gated gelu",
                           "gated silu", "add",       "linear bias", "scale"};
    const int n_ops = (int)(sizeof(names) / sizeof(names[0]));
    float wdata[W * 4];
    fill_uniform(wdata, W * 4, -1, 1);
    const struct weight_view wv = {
        .dtype = DTYPE_F32, .data = wdata, .rows = W, .cols = 4, .ld = 4};
    for (int op = 0; op < n_ops; op++) {
        for (int alone = 0; alone < 2; alone++) {
            cpu_kernels_single_thread(alone);
            float *o = y[alone];
            memcpy(o, x, n * sizeof(float));
            switch (op) {
            case 0:
                cpu_layernorm(o, x, ROWS, W, g, b, 1e-5f);
                break;
            case 1:
                cpu_rmsnorm(o, x, ROWS, W, g, 1e-6f);
                break;
            case 2:
                cpu_rope(o, ROWS, HEADS, HD, HD, pos, inv_freq, 1.0f);
                break;
            case 3:
                cpu_activation(o, n, KERN_ACT_RELU);
                break;
            case 4:
                cpu_activation(o, n, KERN_ACT_GELU);
                break;
            case 5:
                cpu_activation(o, n, KERN_ACT_GELU_TANH);
                break;
            case 6:
                cpu_activation(o, n, KERN_ACT_SILU);
                break;
            case 7:
                cpu_gated_act(o, x, up, n, KERN_ACT_GELU);
                break;
            case 8:
                cpu_gated_act(o, x, up, n, KERN_ACT_SILU);
                break;
            case 9:
                cpu_add(o, up, n);
                break;
            case 10: /* 256 rows of 1024 outputs: a matmul, then the bias over the pool */
                CHECK(cpu_linear(o, up, 256, &wv, g, KERN_COMPUTE_F32) == 0);
                break;
            case 11:
                cpu_scale(o, n, -0.37f);
                break;
            }
        }
        cpu_kernels_single_thread(false);
        CHECK_MSG(memcmp(y[0], y[1], n * sizeof(float)) == 0,
                  "%s over the pool differs from one thread", names[op]);
    }
    free(x);
    free(up);
    free(g);
    free(b);
    free(y[0]);
    free(y[1]);
}

/* ---- kern_linear_group ---- */

/* kern_linear_group against kern_linear on each job, bit for bit: jobs of
 * every plain type, of 1 to 17 rows (past the GEMV's reach, a matrix
 * product), pairs reading the same x (a gate and an up projection), and
 * more jobs than one run of the pool takes. */
static void test_linear_group(void)
{
    enum { N_JOBS = 70, K_MAX = 160, ROWS_MAX = 96, M_MAX = 17 };
    static const enum dtype types[] = {DTYPE_F32, DTYPE_F16, DTYPE_BF16};
    static const int ms[] = {1, 1, 2, 3, 8, 16, 17};
    struct kern_linear_job jobs[N_JOBS];
    struct dbuf *wb[N_JOBS], *xb[N_JOBS], *yb[N_JOBS], *rb[N_JOBS];
    float x[M_MAX * K_MAX], wf[ROWS_MAX * K_MAX];
    uint16_t wh[ROWS_MAX * K_MAX];
    /* Where AMX runs, a bf16 weight shape's first products alternate
     * oneDNN and AMX to time them (matmul.c's shape trials), so the two calls
     * of a job could take two paths, each with its own sums: one path for
     * the whole test (the f32 product on x rounded where the CPU has AVX2
     * alone and oneDNN no bf16 one) */
    if (cpu_matmul_force("onednn-bf16") != 0) {
        CHECK(!cpu_isa_avx512());
        CHECK(cpu_matmul_force("round-f32") == 0);
    }
    for (int cm = 0; cm < 2; cm++) {
        const enum kern_compute c = cm ? KERN_COMPUTE_BF16 : KERN_COMPUTE_F32;
        for (int i = 0; i < N_JOBS; i++) {
            const enum dtype t = types[i % 3];
            const bool shares = i % 4 == 1; /* reads job i - 1's x */
            const int m = shares ? jobs[i - 1].m : ms[i % 7];
            const int k = shares ? jobs[i - 1].w.cols : 32 * (1 + i % 5);
            const int rows = 16 + 8 * (i % 11);
            fill_uniform(wf, (size_t)rows * k, -1, 1);
            for (int j = 0; j < rows * k; j++)
                wh[j] = t == DTYPE_F16 ? f32_to_f16(wf[j]) : f32_to_bf16(wf[j]);
            wb[i] = upload(t == DTYPE_F32 ? (const void *)wf : (const void *)wh,
                           (size_t)rows * k * dtype_size(t));
            xb[i] = NULL;
            if (!shares) {
                fill_uniform(x, (size_t)m * k, -1, 1);
                xb[i] = upload(x, (size_t)m * k * sizeof(float));
            }
            yb[i] = upload(NULL, (size_t)m * rows * sizeof(float));
            rb[i] = upload(NULL, (size_t)m * rows * sizeof(float));
            jobs[i] = (struct kern_linear_job){
                dbuf_ptr(yb[i]),
                shares ? jobs[i - 1].x : dbuf_ptr(xb[i]),
                m,
                {.dtype = t, .data = dbuf_ptr(wb[i]), .rows = rows, .cols = k, .ld = (size_t)k},
                NULL};
        }
        CHECK(kern_linear_group(st, jobs, N_JOBS, c) == 0);
        int same = 0;
        for (int i = 0; i < N_JOBS; i++) {
            const struct kern_linear_job *j = &jobs[i];
            CHECK(kern_linear(st, dbuf_ptr(rb[i]), j->x, j->m, &j->w, NULL, c) == 0);
            const size_t n = (size_t)j->m * j->w.rows;
            float *got = malloc(n * sizeof(float)), *ref = malloc(n * sizeof(float));
            download(got, j->y, n * sizeof(float));
            download(ref, dbuf_ptr(rb[i]), n * sizeof(float));
            same += memcmp(got, ref, n * sizeof(float)) == 0;
            free(got);
            free(ref);
        }
        CHECK_MSG(same == N_JOBS, "%d of %d jobs bit for bit as kern_linear (%s)", same, N_JOBS,
                  kern_compute_name(c));
        CHECK(kern_linear_group(st, jobs, 0, c) == 0);
        for (int i = 0; i < N_JOBS; i++) {
            device_free(wb[i]);
            device_free(xb[i]);
            device_free(yb[i]);
            device_free(rb[i]);
        }
    }
    CHECK(cpu_matmul_force(NULL) == 0);
}

/* kern_linear_group with block-type weights: groups as a decode step makes
 * them (q, k and v on one x, their types mixed as a GGUF Q4_K_M file mixes
 * them; gate and up; a mixture's experts on rows of their own), GGUF's and
 * compressed-tensors' types side by side in one call, odd row counts, m =
 * 1..16 (and one 17-row job, which runs on its own), half of the groups
 * with biases, every job bit for bit what kern_linear gives it. Run once per kernel forced (each
 * layout of x the group prepares and shares) and once with the calibration's choice. */
static void quant_group_case(enum kern_compute c, int round)
{
    enum { N_JOBS = 24, K = 512, ROWS_MAX = 161, M_MAX = 17 };
    /* the types of a group of three: GGUF files' q, k, v (Q4_K_M's Q5_0,
     * Q5_0, Q8_0 in qwen2.5's, Q4_K, Q4_K, Q6_K in llama's), the K-quants
     * side by side (one x, laid out per type), x's two quantizations in one
     * group, compressed-tensors' types, and both kinds on one x */
    static const enum dtype triples[][3] = {
        {DTYPE_Q5_0, DTYPE_Q5_0, DTYPE_Q8_0},   {DTYPE_Q4_K, DTYPE_Q4_K, DTYPE_Q6_K},
        {DTYPE_Q6_K, DTYPE_Q5_K, DTYPE_Q4_K},   {DTYPE_Q8_0, DTYPE_Q4_0, DTYPE_Q5_1},
        {DTYPE_Q4_K, DTYPE_Q4_0, DTYPE_Q6_K},   {DTYPE_CT_I4, DTYPE_CT_I4, DTYPE_CT_I8},
        {DTYPE_CT_F8, DTYPE_Q4_K, DTYPE_CT_I4}, {DTYPE_Q5_1, DTYPE_Q5_0, DTYPE_Q4_0},
    };
    enum { N_TRIPLES = sizeof(triples) / sizeof(triples[0]) };
    static const int row_counts[] = {1, 17, 31, 64, 100, 161, 7, 48};
    struct kern_linear_job jobs[N_JOBS];
    struct dbuf *wb[N_JOBS], *xb[N_JOBS], *yb[N_JOBS], *rb[N_JOBS], *bb[N_JOBS];
    static float x[M_MAX * K], bias[ROWS_MAX];
    static unsigned char wq[ROWS_MAX * K * 2];
    for (int i = 0; i < N_JOBS; i++) {
        /* jobs 3g, 3g + 1, 3g + 2 read one x (q, k, v) unless g is odd,
         * where only the first two do (gate, up) and the third has its own */
        const int g = i / 3, at = i % 3;
        const bool shares = at > 0 && (g % 2 == 0 || at == 1);
        const enum dtype t = triples[(g + round) % N_TRIPLES][at];
        const int m = shares ? jobs[i - 1].m : i == N_JOBS - 1 ? 17 : 1 + (i * 5 + round) % 16;
        const int rows = row_counts[(i + round) % 8];
        const size_t bytes = (size_t)rows * dtype_row_bytes(t, K);
        cpu_qlinear_random_blocks(t, wq, (size_t)rows * K / (size_t)dtype_block(t),
                                  (uint64_t)(100 * round + i));
        wb[i] = upload(wq, bytes);
        xb[i] = NULL;
        if (!shares) {
            fill_uniform(x, (size_t)m * K, -1, 1);
            xb[i] = upload(x, (size_t)m * K * sizeof(float));
        }
        yb[i] = upload(NULL, (size_t)m * rows * sizeof(float));
        rb[i] = upload(NULL, (size_t)m * rows * sizeof(float));
        /* qwen2's q, k and v have biases: every other group's jobs here */
        bb[i] = NULL;
        if (g % 2 == 1) {
            fill_uniform(bias, (size_t)rows, -1, 1);
            bb[i] = upload(bias, (size_t)rows * sizeof(float));
        }
        jobs[i] = (struct kern_linear_job){
            dbuf_ptr(yb[i]),
            shares ? jobs[i - 1].x : dbuf_ptr(xb[i]),
            m,
            {.dtype = t, .data = dbuf_ptr(wb[i]), .rows = rows, .cols = K, .ld = K},
            bb[i] ? dbuf_ptr(bb[i]) : NULL};
    }
    CHECK(kern_linear_group(st, jobs, N_JOBS, c) == 0);
    int same = 0;
    for (int i = 0; i < N_JOBS; i++) {
        const struct kern_linear_job *j = &jobs[i];
        CHECK(kern_linear(st, dbuf_ptr(rb[i]), j->x, j->m, &j->w, j->bias, c) == 0);
        const size_t n = (size_t)j->m * j->w.rows;
        float *got = malloc(n * sizeof(float)), *ref = malloc(n * sizeof(float));
        download(got, j->y, n * sizeof(float));
        download(ref, dbuf_ptr(rb[i]), n * sizeof(float));
        const bool eq = memcmp(got, ref, n * sizeof(float)) == 0;
        same += eq;
        if (!eq)
            fprintf(stderr, "  job %d: %s, m %d, %d rows: differs from kern_linear\n", i,
                    dtype_name(j->w.dtype), j->m, j->w.rows);
        free(got);
        free(ref);
    }
    CHECK_MSG(same == N_JOBS, "%d of %d quantized jobs bit for bit as kern_linear (%s, round %d)",
              same, N_JOBS, kern_compute_name(c), round);
    for (int i = 0; i < N_JOBS; i++) {
        device_free(wb[i]);
        device_free(xb[i]);
        device_free(yb[i]);
        device_free(rb[i]);
        device_free(bb[i]);
    }
}

static void test_linear_group_quant(void)
{
    static const char *const qk[] = {NULL,       "vnni",    "vnni-near", "vnni-far", "avx2",
                                     "avx2-far", "vnni-mr", "vnni-m8",   "vnni-m8z", "amx",
                                     "amx-few",  "avx2-m8", "scalar"};
    static const char *const ctk[] = {NULL,   "avx512bf16", "avx512bf16-lut", "avx512",
                                      "avx2", "deq",        "scalar"};
    int round = 0;
    for (int cm = 0; cm < 2; cm++) {
        const enum kern_compute c = cm ? KERN_COMPUTE_BF16 : KERN_COMPUTE_F32;
        /* f32 mode dequantizes GGUF blocks whatever the kernel: once */
        const size_t n_qk = c == KERN_COMPUTE_BF16 ? sizeof(qk) / sizeof(qk[0]) : 1;
        for (size_t i = 0; i < n_qk; i++) {
            if (cpu_qlinear_force(qk[i]) < 0)
                continue; /* this CPU lacks it */
            quant_group_case(c, round++);
        }
        CHECK(cpu_qlinear_force(NULL) == 0);
        for (size_t i = 1; i < sizeof(ctk) / sizeof(ctk[0]); i++) {
            if (cpu_ctlinear_force(ctk[i]) < 0)
                continue;
            quant_group_case(c, round++);
        }
        CHECK(cpu_ctlinear_force(NULL) == 0);
    }
}

/* ---- kern_route_topk, kern_route_group ---- */

/* One routing case as a plain reference computes it: each token's
 * probabilities in f32 as the contract orders them (max, expf, a sum in
 * expert order, a division), the experts ranked by a stable sort
 * (probability down, index up), the weights summed in that order; the
 * groups by a counting pass per expert. */
struct route_ref {
    int32_t choice[64 * 16], rows[64 * 16], slots[64 * 17], counts[2 * 256];
    float choice_w[64 * 16], slot_w[64 * 17];
};

static void route_reference(const float *logits, const struct kern_route *r, struct route_ref *o)
{
    const int n = r->n, E = r->n_experts, k = r->top_k, K = r->slot_stride;
    memset(o->counts, 0, sizeof(o->counts));
    for (int i = 0; i < n; i++) {
        const float *l = logits + (size_t)i * E;
        float p[256], mx = l[0], sum = 0, top = 0;
        int idx[256];
        for (int e = 0; e < E; e++)
            mx = l[e] > mx ? l[e] : mx;
        for (int e = 0; e < E; e++) {
            p[e] = expf(l[e] - mx);
            sum += p[e];
            idx[e] = e;
        }
        for (int e = 0; e < E; e++)
            p[e] /= sum;
        for (int a = 1; a < E; a++) /* stable: equal probabilities keep index order */
            for (int b = a; b > 0 && p[idx[b]] > p[idx[b - 1]]; b--) {
                int t = idx[b];
                idx[b] = idx[b - 1];
                idx[b - 1] = t;
            }
        for (int j = 0; j < k; j++)
            top += p[idx[j]];
        for (int e = 0, j = 0; e < E; e++) /* the chosen ones by ascending expert */
            for (int q = 0; q < k; q++)
                if (idx[q] == e) {
                    o->choice[i * k + j] = e;
                    o->choice_w[i * k + j] = r->norm ? p[e] / top : p[e];
                    j++;
                }
        const bool real =
            !r->real || r->real[(i / r->real_group) * r->real_stride + i % r->real_group];
        for (int j = 0; j < k; j++) {
            o->counts[o->choice[i * k + j]]++;
            o->counts[E + o->choice[i * k + j]] += real;
        }
    }
    int nl = 0;
    for (int e = r->expert_begin; e < r->expert_end; e++)
        for (int i = 0; i < n && (!r->have || r->have[e]); i++)
            for (int j = 0; j < k; j++)
                if (o->choice[i * k + j] == e) {
                    o->rows[nl] = i;
                    o->slots[i * K + j] = nl++;
                    o->slot_w[i * K + j] = o->choice_w[i * k + j];
                }
    for (int q = nl; q < n * k; q++)
        o->rows[q] = 0;
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < k; j++)
            if (o->choice[i * k + j] < r->expert_begin || o->choice[i * k + j] >= r->expert_end ||
                (r->have && !r->have[o->choice[i * k + j]])) {
                o->slots[i * K + j] = nl;
                o->slot_w[i * K + j] = 0;
            }
        if (r->shared_gate) {
            o->slots[i * K + k] = n * k + i;
            o->slot_w[i * K + k] = 1.0f / (1.0f + expf(-r->shared_gate[i]));
        }
    }
}

/* Runs r (its pointers host copies of logits, gate and real) on the
 * device and compares every output with the reference bit for bit; the
 * device's outputs are left in got. */
static void route_case(const char *what, const float *logits, struct kern_route r,
                       struct route_ref *got)
{
    const int n = r.n, E = r.n_experts, k = r.top_k, K = r.slot_stride;
    struct route_ref *want = calloc(1, sizeof(*want));
    CHECK(want != NULL);
    if (!want)
        return;
    route_reference(logits, &r, want);
    struct dbuf *dl = upload(logits, (size_t)n * E * sizeof(float));
    struct dbuf *dg = upload(r.shared_gate ? r.shared_gate : logits, (size_t)n * sizeof(float));
    const size_t real_bytes = r.real ? (size_t)((n - 1) / r.real_group + 1) * r.real_stride : 1;
    struct dbuf *dr = upload(r.real ? (const void *)r.real : (const void *)logits, real_bytes);
    struct dbuf *dc = upload(NULL, sizeof(*want)); /* the outputs, laid out as struct route_ref */
    char *base = dbuf_ptr(dc);
    const struct kern_route_out out = {
        .choice = (int32_t *)(base + offsetof(struct route_ref, choice)),
        .choice_w = (float *)(base + offsetof(struct route_ref, choice_w)),
        .rows = (int32_t *)(base + offsetof(struct route_ref, rows)),
        .slots = (int32_t *)(base + offsetof(struct route_ref, slots)),
        .slot_w = (float *)(base + offsetof(struct route_ref, slot_w)),
        .counts = (int32_t *)(base + offsetof(struct route_ref, counts))};
    if (r.shared_gate)
        r.shared_gate = dbuf_ptr(dg);
    if (r.real)
        r.real = dbuf_ptr(dr);
    CHECK_MSG(kern_route_topk(st, dbuf_ptr(dl), &r, &out) == 0, "%s: %s", what, err_msg());
    CHECK_MSG(kern_route_group(st, &r, &out) == 0, "%s: %s", what, err_msg());
    download(got, base, sizeof(*got));
#define SAME(field, count)                                                                         \
    CHECK_MSG(memcmp(got->field, want->field, (size_t)(count) * sizeof(got->field[0])) == 0,       \
              "route_topk %s: " #field " differs from the reference", what)
    SAME(choice, n * k);
    SAME(choice_w, n * k);
    SAME(rows, n * k);
    SAME(slots, n * K);
    SAME(slot_w, n * K);
    SAME(counts, 2 * E);
#undef SAME
    device_free(dl);
    device_free(dg);
    device_free(dr);
    device_free(dc);
    free(want);
}

static void test_route_topk(void)
{
    static float logits[64 * 256], gate[64];
    static uint8_t real[8 * 20];
    struct route_ref *got = calloc(1, sizeof(*got));
    CHECK(got != NULL);
    if (!got)
        return;
    fill_uniform(logits, sizeof(logits) / sizeof(logits[0]), -4, 4);
    fill_uniform(gate, 64, -3, 3);
    for (size_t i = 0; i < sizeof(real); i++) /* every fifth a pad */
        real[i] = i % 5 != 0;

    /* Mixtral's router: 8 experts, top 2, renormalised, every token real */
    route_case("mixtral", logits,
               (struct kern_route){.n = 5,
                                   .n_experts = 8,
                                   .top_k = 2,
                                   .norm = true,
                                   .expert_begin = 0,
                                   .expert_end = 8,
                                   .slot_stride = 2},
               got);
    /* Qwen3-MoE's: 128 experts, top 8, not renormalised; 7 tokens as a batch
     * of sequences of 3 new tokens each in a (batch, 20) padding mask */
    route_case("qwen3", logits,
               (struct kern_route){.n = 7,
                                   .n_experts = 128,
                                   .top_k = 8,
                                   .expert_begin = 0,
                                   .expert_end = 128,
                                   .slot_stride = 8,
                                   .real = real + 4,
                                   .real_group = 3,
                                   .real_stride = 20},
               got);
    int real_total = 0, real_want = 0;
    for (int e = 0; e < 128; e++)
        real_total += got->counts[128 + e];
    for (int i = 0; i < 7; i++)
        real_want += 8 * (real[4 + (i / 3) * 20 + i % 3] != 0);
    CHECK(real_total == real_want && real_want > 0 && real_want < 7 * 8);
    /* Qwen2-MoE's shared expert, under expert parallelism: rows for
     * experts [15, 30) of 60 only, the rest read row nl with weight 0 */
    route_case("shared, experts 15-29", logits,
               (struct kern_route){.n = 9,
                                   .n_experts = 60,
                                   .top_k = 4,
                                   .expert_begin = 15,
                                   .expert_end = 30,
                                   .slot_stride = 5,
                                   .shared_gate = gate},
               got);
    /* expert-level residency: experts 2, 5 and 11 of this device's are not
     * there, so they get no rows and their slots read the zeros */
    uint8_t have[16];
    for (int e = 0; e < 16; e++)
        have[e] = e != 2 && e != 5 && e != 11;
    route_case("without experts 2, 5, 11", logits,
               (struct kern_route){.n = 12,
                                   .n_experts = 16,
                                   .top_k = 4,
                                   .norm = true,
                                   .expert_begin = 0,
                                   .expert_end = 16,
                                   .have = have,
                                   .slot_stride = 4},
               got);
    for (int i = 0; i < 12 * 4; i++)
        CHECK(have[got->choice[i]] || (got->slot_w[i] == 0 && got->slots[i] < 12 * 4));
    /* the widest the op takes, and many tokens (a prefill) */
    route_case("256 experts, top 16", logits,
               (struct kern_route){.n = 3,
                                   .n_experts = 256,
                                   .top_k = 16,
                                   .norm = true,
                                   .expert_begin = 0,
                                   .expert_end = 256,
                                   .slot_stride = 16},
               got);
    route_case("64 tokens", logits,
               (struct kern_route){.n = 64,
                                   .n_experts = 16,
                                   .top_k = 4,
                                   .norm = true,
                                   .expert_begin = 3,
                                   .expert_end = 16,
                                   .slot_stride = 4},
               got);

    /* ties go to the lower index: a row of equal logits takes experts 0 and
     * 1 at 1/2 each; a row whose two largest are equal (at 5 and 2) takes
     * 2 then 5; the third row's top 2 are 7 and 6 */
    float tie[3 * 8] = {0};
    for (int e = 0; e < 8; e++)
        tie[8 + e] = tie[16 + e] = (float)e * 0.25f;
    tie[8 + 5] = tie[8 + 2] = 3.0f;
    route_case("ties", tie,
               (struct kern_route){.n = 3,
                                   .n_experts = 8,
                                   .top_k = 2,
                                   .norm = true,
                                   .expert_begin = 0,
                                   .expert_end = 8,
                                   .slot_stride = 2},
               got);
    CHECK(got->choice[0] == 0 && got->choice[1] == 1 && got->choice_w[0] == 0.5f &&
          got->choice_w[1] == 0.5f);
    CHECK(got->choice[2] == 2 && got->choice[3] == 5 && got->choice_w[2] == got->choice_w[3]);
    CHECK(got->choice[4] == 6 && got->choice[5] == 7 && got->choice_w[5] > got->choice_w[4]);
    /* grouped by expert, token order within: 0 (token 0), 1 (0), 2 (1),
     * 5 (1), 6 (2), 7 (2) */
    static const int32_t rows_want[6] = {0, 0, 1, 1, 2, 2};
    CHECK(memcmp(got->rows, rows_want, sizeof(rows_want)) == 0);
    CHECK(got->counts[0] == 1 && got->counts[3] == 0 && got->counts[8 + 7] == 1);
    free(got);
}

int main(void)
{
    int rc = device_open_cpu(0, 16 * MiB, &dev);
    CHECK_MSG(rc == ERR_OK, "%s", err_msg());
    if (rc != ERR_OK)
        return test_finish();
    rc = device_stream_create(dev, &st);
    CHECK_MSG(rc == ERR_OK, "%s", err_msg());
    if (rc != ERR_OK) {
        device_close(dev);
        return test_finish();
    }
    CHECK(stream_device(st) == dev);

    test_linear();
    test_linear_group();
    /* again with the matrix product taking every bf16-mode job: those run
     * on their own, the rest in the pool run */
    CHECK(cpu_gemv_force("matmul") == 0);
    test_linear_group();
    CHECK(cpu_gemv_force(NULL) == 0);
    test_linear_group_quant();
    test_gemv_same_bits_avx2();
    test_gemv_same_bits();
    test_lanes_streams();
    test_lanes_claims();
    test_gemv_lanes();
    test_gemv_amx_rows();
    test_qlinear_lanes();
    test_matmul_cache();
    test_gemv_choice();
    test_matmul_choice();
    test_vec();
    test_embed();
    test_layernorm();
    test_rmsnorm();
    test_rope();
    test_activation();
    test_softcap();
    test_gated_act();
    test_act_split();
    test_elementwise();
    test_split_exact();
    test_attention();
    test_route_topk();

    CHECK(device_used(dev) == 0); /* every buffer freed */
    device_stream_destroy(st);
    device_close(dev);
    return test_finish();
}
