/* GGUF's block types as the kernels see them (core/quant.h, backend/cpu/
 * qlinear.c): sizes and views, the dequantization against the `gguf`
 * Python package's (tests/fixtures/quant, made by tools/quant_fixture.py),
 * and kern_linear / kern_embed with quantized weights against the
 * dequantized weights times x in double:
 * - f32 mode within f32 rounding: |y - ref| <= 1e-5 * sum |w x| (+1e-30);
 * - bf16 mode (x quantized per block as llama.cpp does) within the bound of
 *   that quantization: |y - ref| <= sum over x's blocks of
 *   amax(x block) * (1/254 + 1/2000) * sum |w| over the block, + 1e-5 *
 *   sum |w x| (half a step of 127 levels, and Q8_0's scale stored in f16);
 * - every instruction set's kernel gives the scalar reference's bits. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "backend/cpu/qdot.h"
#include "backend/cpu/qlinear.h"
#include "backend/device.h"
#include "backend/kernels.h"
#include "backend/weight.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/qpack.h"
#include "core/quant.h"
#include "test.h"

#define FIXTURES SHARDSWAP_SOURCE_DIR "/tests/fixtures/quant"
#define MiB ((size_t)1 << 20)

static const enum dtype types[] = {DTYPE_Q8_0, DTYPE_Q4_0, DTYPE_Q5_0, DTYPE_Q5_1,
                                   DTYPE_Q4_K, DTYPE_Q5_K, DTYPE_Q6_K};
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

static uint64_t seed = 0x51ed;

static float urand(void)
{
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((seed >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

static void *read_all(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *p = malloc(len > 0 ? (size_t)len : 1);
    if (p && fread(p, 1, (size_t)len, f) != (size_t)len) {
        free(p);
        p = NULL;
    }
    fclose(f);
    *n = (size_t)len;
    return p;
}

TEST(sizes)
{
    CHECK(!dtype_is_block(DTYPE_F32) && !dtype_is_block(DTYPE_BF16) && dtype_is_block(DTYPE_Q6_K));
    CHECK(dtype_block(DTYPE_F16) == 1 && dtype_block(DTYPE_Q8_0) == 32 &&
          dtype_block(DTYPE_Q4_0) == 32 && dtype_block(DTYPE_Q4_K) == 256);
    CHECK(dtype_row_bytes(DTYPE_BF16, 10) == 20 && dtype_row_bytes(DTYPE_F32, 3) == 12);
    CHECK(dtype_row_bytes(DTYPE_Q8_0, 2048) == 64 * 34);
    CHECK(dtype_row_bytes(DTYPE_Q4_0, 2048) == 64 * 18);
    CHECK(dtype_row_bytes(DTYPE_Q5_0, 2048) == 64 * 22);
    CHECK(dtype_row_bytes(DTYPE_Q5_1, 2048) == 64 * 24);
    CHECK(dtype_row_bytes(DTYPE_Q4_K, 2048) == 8 * 144);
    CHECK(dtype_row_bytes(DTYPE_Q5_K, 2048) == 8 * 176);
    CHECK(dtype_row_bytes(DTYPE_Q6_K, 2048) == 8 * 210);
    CHECK(strcmp(dtype_name(DTYPE_Q4_K), "Q4_K") == 0 &&
          strcmp(dtype_name(DTYPE_Q8_0), "Q8_0") == 0);
    enum dtype t;
    CHECK(dtype_parse("Q4_K", &t) == ERR_INVALID); /* plain types only */
    /* a column slice on block boundaries, and one off them */
    CHECK(dtype_check_cols(DTYPE_F32, 3, 5, "w") == 0);
    CHECK(dtype_check_cols(DTYPE_Q4_K, 512, 1024, "w") == 0);
    CHECK(dtype_check_cols(DTYPE_Q4_K, 448, 448, "blk.0.ffn_down") == ERR_INVALID);
    CHECK_MSG(strcmp(err_msg(), "blk.0.ffn_down: columns [448, 896) of Q4_K do not fall on its "
                                "256-element block boundaries") == 0,
              "%s", err_msg());
    /* a slice of rows is the view from a later row */
    unsigned char buf[4 * 210];
    struct weight_view w = {.dtype = DTYPE_Q6_K, .data = buf, .rows = 4, .cols = 256, .ld = 256};
    CHECK(weight_row(&w, 3) == buf + 3 * 210);
    w.ld = 512;
    CHECK(weight_row(&w, 1) == buf + 420);
    /* non-finite scales are found by block */
    memset(buf, 0, sizeof(buf));
    CHECK(dtype_find_nonfinite(DTYPE_Q6_K, buf, 1024) == 1024);
    buf[2 * 210 + 209] = 0x7c; /* block 2's d: +inf */
    CHECK(dtype_find_nonfinite(DTYPE_Q6_K, buf, 1024) == 512);
    memset(buf, 0, sizeof(buf));
    buf[144 + 3] = 0xfe; /* block 1's dmin: NaN */
    CHECK(dtype_find_nonfinite(DTYPE_Q4_K, buf, 1024) == 256);
}

/* The reference dequantization equals the gguf package's: exactly, or
 * within one f32 rounding of its numpy operation order. */
TEST(dequant_fixture)
{
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const enum dtype t = types[ti];
        char path[512];
        size_t nb = 0, nf = 0;
        snprintf(path, sizeof(path), "%s/%s.bin", FIXTURES, dtype_name(t));
        unsigned char *blocks = read_all(path, &nb);
        snprintf(path, sizeof(path), "%s/%s.f32", FIXTURES, dtype_name(t));
        float *want = read_all(path, &nf);
        CHECK_MSG(blocks && want, "%s: fixture missing", dtype_name(t));
        if (!blocks || !want) {
            free(blocks);
            free(want);
            continue;
        }
        const size_t n = nf / sizeof(float);
        CHECK(dtype_row_bytes(t, n) == nb);
        float *got = malloc(n * sizeof(float));
        dtype_to_f32(t, blocks, got, n);
        size_t bad = 0, exact = 0;
        for (size_t i = 0; i < n; i++) {
            double d = fabs((double)got[i] - want[i]);
            exact += d == 0;
            if (d > 2.0 * ldexp(fabs(want[i]), -24) + 1e-30)
                bad++;
        }
        CHECK_MSG(bad == 0, "%s: %zu of %zu elements differ", dtype_name(t), bad, n);
        printf("%s: %zu of %zu elements bit-equal to gguf.quants.dequantize\n", dtype_name(t),
               exact, n);
        CHECK(dtype_find_nonfinite(t, blocks, n) == n);
        free(got);
        free(blocks);
        free(want);
    }
}

/* One product: w of type t, `rows` x `cols` viewed from row r0 and column
 * c0 of a stored (r0 + rows + 1) x ld matrix (a TP slice when either is
 * not 0), m input rows. Checks f32 and bf16 mode against the reference. */
static void product_case(enum dtype t, int m, int rows, int cols, int r0, int c0, int ld)
{
    const int qk = dtype_block(t);
    const int all_rows = r0 + rows + 1;
    const size_t row_bytes = dtype_row_bytes(t, (size_t)ld);
    unsigned char *stored = malloc((size_t)all_rows * row_bytes);
    cpu_qlinear_random_blocks(t, stored, (size_t)all_rows * ld / qk, seed++);
    struct weight_view w = {.dtype = t,
                            .data = stored + (size_t)r0 * row_bytes + dtype_row_bytes(t, c0),
                            .rows = rows,
                            .cols = cols,
                            .ld = (size_t)ld};
    float *wf = malloc((size_t)rows * cols * sizeof(float));
    for (int r = 0; r < rows; r++)
        dtype_to_f32(t, weight_row(&w, r), wf + (size_t)r * cols, (size_t)cols);
    float *x = malloc((size_t)m * cols * sizeof(float));
    for (size_t i = 0; i < (size_t)m * cols; i++)
        x[i] = urand() * (i % 7 == 0 ? 4.0f : 1.0f);
    float *y = malloc((size_t)m * rows * sizeof(float));
    /* x's quantization: the block size of Q8_0 or Q8_K */
    const int xb = dtype_block(t);
    double worst_f32 = 0, worst_q = 0;
    for (int mode = 0; mode < 2; mode++) {
        const enum kern_compute cm = mode ? KERN_COMPUTE_BF16 : KERN_COMPUTE_F32;
        CHECK_MSG(kern_linear(st, y, x, m, &w, NULL, cm) == 0, "%s", err_msg());
        for (int i = 0; i < m; i++)
            for (int r = 0; r < rows; r++) {
                const float *xi = x + (size_t)i * cols, *wr = wf + (size_t)r * cols;
                double ref = 0, mag = 0, qbound = 0;
                for (int c0b = 0; c0b < cols; c0b += xb) {
                    double amax = 0, wsum = 0;
                    for (int c = c0b; c < c0b + xb; c++) {
                        ref += (double)wr[c] * xi[c];
                        mag += fabs((double)wr[c] * xi[c]);
                        amax = fmax(amax, fabs(xi[c]));
                        wsum += fabs(wr[c]);
                    }
                    qbound += amax * (1.0 / 254 + 1.0 / 2000) * wsum;
                }
                const double err = fabs(y[(size_t)i * rows + r] - ref);
                const double tol = mode ? qbound + 1e-5 * mag + 1e-30 : 1e-5 * mag + 1e-30;
                CHECK_MSG(err <= tol, "%s %s m=%d %dx%d r0=%d c0=%d: y[%d,%d] = %.9g, ref %.9g",
                          dtype_name(t), kern_compute_name(cm), m, rows, cols, r0, c0, i, r,
                          y[(size_t)i * rows + r], ref);
                if (mode)
                    worst_q = fmax(worst_q, err / (qbound + 1e-30));
                else
                    worst_f32 = fmax(worst_f32, err / (mag + 1e-30));
            }
    }
    if (m == 1 && r0 == 0 && c0 == 0)
        printf("%s %dx%d: f32 mode worst |err| / sum|wx| %.2g; quantized x worst |err| / bound "
               "%.2f\n",
               dtype_name(t), rows, cols, worst_f32, worst_q);
    free(stored);
    free(wf);
    free(x);
    free(y);
}

/* GEMV (m <= 16) and matmul (m > 16) shapes, odd m, TP slices of rows and
 * of columns on block boundaries */
TEST(linear)
{
    static const int ms[] = {1, 3, 16, 17, 33};
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const enum dtype t = types[ti];
        const int qk = dtype_block(t);
        for (size_t mi = 0; mi < sizeof(ms) / sizeof(ms[0]); mi++) {
            product_case(t, ms[mi], 37, 2 * qk * (qk == 32 ? 8 : 1), 0, 0,
                         2 * qk * (qk == 32 ? 8 : 1));
            /* rows [5, 5 + 21) and columns [qk, 3 qk) of a wider matrix */
            product_case(t, ms[mi], 21, 2 * qk, 5, qk, 4 * qk);
        }
        product_case(t, 2, 100, 1024, 0, 0, 1024);
    }
}

/* Whether kernel k runs a build with GFNI where the CPU has it (qlinear.c's
 * q_gfni): those are checked with and without it */
static bool has_gfni_build(const char *k)
{
    return k && (strcmp(k, "vnni-near") == 0 || strcmp(k, "vnni-far") == 0 ||
                 strcmp(k, "vnni-x16") == 0);
}

/* The scalar kernel's bf16-mode product of m rows of x with w into ref,
 * then each kernel of isas (n of them) into y (vnni-near and vnni-far with
 * and without GFNI): its bits must equal ref's.
 * A kernel this CPU lacks is skipped (and said so when say_lacking). */
static void isas_match_scalar(const char *const *isas, size_t n, const struct weight_view *w,
                              const float *x, int m, float *ref, float *y, bool say_lacking)
{
    const size_t ybytes = (size_t)m * w->rows * sizeof(float);
    CHECK(cpu_qlinear_force("scalar") == 0);
    CHECK(kern_linear(st, ref, x, m, w, NULL, KERN_COMPUTE_BF16) == 0);
    for (size_t k = 0; k < n; k++) {
        int rc = cpu_qlinear_force(isas[k]);
        if (rc == ERR_UNSUPPORTED) {
            if (say_lacking)
                printf("%s: this CPU lacks it\n", isas[k]);
            continue;
        }
        CHECK(rc == 0);
        for (int g = 1; g >= (has_gfni_build(isas[k]) ? 0 : 1); g--) {
            cpu_qlinear_gfni(g);
            memset(y, 0xff, ybytes);
            CHECK(kern_linear(st, y, x, m, w, NULL, KERN_COMPUTE_BF16) == 0);
            CHECK_MSG(memcmp(y, ref, ybytes) == 0, "%s %s%s m=%d differs from the scalar reference",
                      dtype_name(w->dtype), isas[k], g ? "" : " (no GFNI)", m);
        }
        cpu_qlinear_gfni(true);
    }
}

/* Every instruction set's kernel gives the scalar reference's bits. */
TEST(isa_bitwise)
{
    static const char *const isas[] = {"vnni",     "vnni-near", "vnni-far", "avx2",
                                       "avx2-far", "vnni-mr",   "vnni-m8",  "vnni-m8z",
                                       "amx",      "amx-few",   "avx2-m8"};
    const int rows = 45;
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const enum dtype t = types[ti];
        /* 11 or 9 blocks a row: whole groups of 8 partial sums and a rest */
        const int cols = dtype_block(t) == 32 ? 11 * 32 : 9 * 256;
        const size_t bytes = (size_t)rows * dtype_row_bytes(t, cols);
        unsigned char *wd = malloc(bytes);
        cpu_qlinear_random_blocks(t, wd, bytes / quant_block_bytes(t), 100 + ti);
        const struct weight_view w = {
            .dtype = t, .data = wd, .rows = rows, .cols = cols, .ld = cols};
        for (int m = 1; m <= 19; m += 9) {
            float *x = malloc((size_t)m * cols * sizeof(float));
            float *ref = malloc((size_t)m * rows * sizeof(float));
            float *y = malloc((size_t)m * rows * sizeof(float));
            for (size_t i = 0; i < (size_t)m * cols; i++)
                x[i] = urand();
            isas_match_scalar(isas, sizeof(isas) / sizeof(isas[0]), &w, x, m, ref, y, true);
            free(x);
            free(ref);
            free(y);
        }
        free(wd);
    }
    /* the types of 32 against vnni-near's and avx2's x laid out (qd_xr)
     * and the multi-row kernels' runs of 8 blocks
     * (qdot_mr_body.h) for 1 .. 16 input rows: long rows (a run of 8
     * blocks whole and one cut short) and rows of 1 .. 17 blocks (every
     * length of the last run, whose loads are masked or zero lanes), an
     * odd count of weight rows (vnni-mr's last pair alone), the scales and
     * Q5_1's mins of both signs */
    static const enum dtype t32[] = {DTYPE_Q8_0, DTYPE_Q4_0, DTYPE_Q5_0, DTYPE_Q5_1};
    static const char *const near[] = {"vnni-near", "vnni-far", "avx2",    "avx2-far",
                                       "vnni-mr",   "vnni-m8",  "vnni-m8z"};
    static const int lens[] = {1,  2,  3,  4,  5,  6,  7,  8,  9,    10,
                               11, 12, 13, 14, 15, 16, 17, 28, 1023, 1027};
    for (size_t li = 0; li < sizeof(t32) / sizeof(t32[0]); li++)
        for (size_t ni = 0; ni < sizeof(lens) / sizeof(lens[0]); ni++) {
            const enum dtype t = t32[li];
            const int nb = lens[ni], cols = nb * 32, lrows = 5;
            const size_t bb = quant_block_bytes(t),
                         bytes = (size_t)lrows * dtype_row_bytes(t, cols);
            unsigned char *wd = malloc(bytes);
            cpu_qlinear_random_blocks(t, wd, bytes / bb, 200 + li + 10 * ni);
            for (size_t b = 0; b < bytes / bb; b++) {
                wd[b * bb + 1] |= (unsigned char)(b % 3 == 1 ? 0x80 : 0); /* d < 0 */
                if (t == DTYPE_Q5_1)
                    wd[b * bb + 3] |= (unsigned char)(b % 2 ? 0x80 : 0); /* m < 0 */
            }
            const struct weight_view w = {
                .dtype = t, .data = wd, .rows = lrows, .cols = cols, .ld = cols};
            const int mmax = 16;
            float *x = malloc((size_t)mmax * cols * sizeof(float));
            float ref[16 * 5], y[16 * 5];
            for (int i = 0; i < mmax * cols; i++)
                x[i] = urand();
            for (int m = 1; m <= mmax; m++)
                isas_match_scalar(near, sizeof(near) / sizeof(near[0]), &w, x, m, ref, y, false);
            free(x);
            free(wd);
        }
    CHECK(cpu_qlinear_force(NULL) == 0);
    CHECK(cpu_qlinear_force("sse9") == ERR_INVALID);
    /* the measured choice names every type */
    const char *k = cpu_qlinear_kernels();
    printf("quantized kernels: %s\n", k);
    CHECK(strstr(k, "Q8_0:") && strstr(k, "Q6_K:"));
}

/* The multi-row kernels give the single-row reference's bits for every
 * row, whatever m: every count of input rows 1 .. 33 (partial groups of 8
 * and of AMX's 16), 64 and 100,
 * odd numbers of blocks a row (a rest of the 8 partial sums), a weight
 * slice with a row stride, and x's of mixed magnitudes (some zero blocks,
 * so zero scales). */
TEST(multirow_bitwise)
{
    static const char *const isas[] = {"vnni-near", "vnni-far", "avx2-far", "vnni-mr", "vnni-m8",
                                       "vnni-m8z",  "amx",      "amx-few",  "avx2-m8"};
    if (cpu_qlinear_force("amx") == ERR_UNSUPPORTED)
        printf("amx: this CPU (or its kernel) lacks AMX-INT8; not tested\n");
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const enum dtype t = types[ti];
        const int qk = dtype_block(t);
        const int cols = qk == 32 ? 13 * 32 : 3 * 256, ld = cols + 2 * qk, rows = 37;
        const size_t bytes = (size_t)(rows + 1) * dtype_row_bytes(t, ld);
        unsigned char *wd = malloc(bytes);
        cpu_qlinear_random_blocks(t, wd, bytes / quant_block_bytes(t), 300 + ti);
        /* rows [1, 38) and columns [qk, qk + cols) of a wider matrix */
        const struct weight_view w = {.dtype = t,
                                      .data = wd + dtype_row_bytes(t, ld) + quant_block_bytes(t),
                                      .rows = rows,
                                      .cols = cols,
                                      .ld = (size_t)ld};
        /* every m to 33 (AMX's groups of 16 and a rest), then a prefill's */
        static const int more[] = {64, 100};
        const int mmax = 100;
        float *x = malloc((size_t)mmax * cols * sizeof(float));
        float *ref = malloc((size_t)mmax * rows * sizeof(float));
        float *y = malloc((size_t)mmax * rows * sizeof(float));
        for (size_t i = 0; i < (size_t)mmax * cols; i++)
            x[i] = urand() * (i % 7 == 0 ? 40.0f : 1.0f) * ((i / qk) % 5 == 3 ? 0.0f : 1.0f);
        for (int k = 0; k < 33 + 2; k++) {
            const int m = k < 33 ? k + 1 : more[k - 33];
            isas_match_scalar(isas, sizeof(isas) / sizeof(isas[0]), &w, x, m, ref, y, false);
        }
        free(x);
        free(ref);
        free(y);
        free(wd);
    }
    CHECK(cpu_qlinear_force(NULL) == 0);
}

/* x quantized for Q8_0 weights as the kernels do it (the AVX2 one where
 * the CPU has it) gives quant_q8_0_from_f32's bytes: ties of roundf (half
 * away from zero, both signs), zero and NaN-free blocks of every magnitude */
TEST(x_q8_0_bitwise)
{
    const int n = 64 * 32;
    float *x = malloc((size_t)n * sizeof(float));
    char *a = malloc((size_t)n / 32 * sizeof(struct quant_q8_0));
    char *b = malloc((size_t)n / 32 * sizeof(struct quant_q8_0));
    for (int i = 0; i < n; i++) {
        const int blk = i / 32;
        if (blk == 0) /* amax 127: scale 1, so x * id = x, halves are ties */
            x[i] = i == 0 ? 127.0f : (float)((i % 2 ? 1 : -1) * (i % 40)) + 0.5f;
        else if (blk == 1)
            x[i] = 0.0f;
        else
            x[i] = urand() * ldexpf(1.0f, blk % 30 - 15);
    }
    quant_q8_0_from_f32(x, a, n);
    qdot_quantize_x(DTYPE_Q8_0, x, b, n);
    CHECK(memcmp(a, b, (size_t)n / 32 * sizeof(struct quant_q8_0)) == 0);
    free(x);
    free(a);
    free(b);
}

/* x quantized for K-quant weights as the kernels do it (the AVX-512 one
 * where the CPU has it) gives quant_q8_k_from_f32's bytes: ties of
 * nearbyintf (to even, both signs), a zero block, the first of two equal
 * magnitudes of either sign giving the scale, blocks of every magnitude */
TEST(x_q8_k_bitwise)
{
    const int nb = 40, n = nb * QUANT_QKK;
    float *x = malloc((size_t)n * sizeof(float));
    char *a = malloc((size_t)nb * sizeof(struct quant_q8_k));
    char *b = malloc((size_t)nb * sizeof(struct quant_q8_k));
    for (int i = 0; i < n; i++) {
        const int blk = i / QUANT_QKK, e = i % QUANT_QKK;
        if (blk == 0) /* max -127 first: iscale 1, so halves are ties */
            x[i] = e == 0 ? -127.0f : (float)((e % 2 ? 1 : -1) * (e % 120)) + 0.5f;
        else if (blk == 1)
            x[i] = 0.0f;
        else if (blk == 2) /* +3 at 17 before -3 at 40 */
            x[i] = e == 17 ? 3.0f : e == 40 ? -3.0f : urand();
        else if (blk == 3) /* -3 at 5 before +3 at 200 */
            x[i] = e == 5 ? -3.0f : e == 200 ? 3.0f : urand();
        else
            x[i] = urand() * ldexpf(1.0f, blk % 30 - 15);
    }
    quant_q8_k_from_f32(x, a, n);
    qdot_quantize_x(DTYPE_Q4_K, x, b, n);
    CHECK(memcmp(a, b, (size_t)nb * sizeof(struct quant_q8_k)) == 0);
    free(x);
    free(a);
    free(b);
}

/* xr_per_call_bitwise's checks of one kernel's rows */
static void xr_per_call_check(const char *name, qdot_rows_fn rows_fn)
{
    static const enum dtype t32[] = {DTYPE_Q8_0, DTYPE_Q4_0, DTYPE_Q5_0, DTYPE_Q5_1};
    static const int lens[] = {1, 2, 3, 7, 8, 9, 15, 16, 17, 28};
    for (size_t li = 0; li < sizeof(t32) / sizeof(t32[0]); li++)
        for (size_t ni = 0; ni < sizeof(lens) / sizeof(lens[0]); ni++) {
            const enum dtype t = t32[li];
            const int nb = lens[ni], cols = nb * 32, rows = 19, mmax = 3;
            const size_t bb = quant_block_bytes(t), rb = dtype_row_bytes(t, cols);
            unsigned char *wd = malloc((size_t)rows * rb);
            cpu_qlinear_random_blocks(t, wd, (size_t)rows * rb / bb, 300 + li + 10 * ni);
            /* rows [2, 2 + 13) */
            const struct weight_view w = {
                .dtype = t, .data = wd + 2 * rb, .rows = 13, .cols = cols, .ld = cols};
            const size_t xq_ld = qdot_x_row_bytes(t, cols), xp_ld = qdot_xr_row_bytes(cols);
            CHECK(xp_ld % 64 == 0 && xp_ld >= (size_t)(nb + 7) / 8 * 8 * 40);
            char *xq = malloc((size_t)mmax * xq_ld);
            char *xp = aligned_alloc(64, (size_t)mmax * xp_ld);
            float *x = malloc((size_t)cols * sizeof(float));
            memset(xp, 0x5a, (size_t)mmax * xp_ld);
            for (int i = 0; i < mmax; i++) {
                for (int c = 0; c < cols; c++)
                    x[c] = urand();
                qdot_quantize_x(t, x, xq + (size_t)i * xq_ld, cols);
                qdot_pack_x_xr(xq + (size_t)i * xq_ld, cols, xp + (size_t)i * xp_ld);
            }
            for (int m = 1; m <= mmax; m++) {
                float a[3 * 13], b[3 * 13];
                memset(a, 0xff, sizeof(a));
                memset(b, 0xff, sizeof(b));
                struct qdot_args q = {.y = a, .ldy = 13, .xq = xq, .xq_ld = xq_ld, .m = m, .w = &w};
                rows_fn(&q, 0, 13);
                q.y = b;
                q.xp = xp;
                q.xp_ld = xp_ld;
                rows_fn(&q, 0, 13);
                CHECK_MSG(memcmp(a, b, sizeof(float) * 13 * (size_t)m) == 0,
                          "%s %s, %d blocks, m=%d: x laid out per call differs from per task", name,
                          dtype_name(t), nb, m);
                /* and the scalar reference's bits */
                q.y = a;
                q.xp = NULL;
                qdot_rows_scalar(&q, 0, 13);
                CHECK_MSG(memcmp(a, b, sizeof(float) * 13 * (size_t)m) == 0,
                          "%s %s, %d blocks, m=%d: differs from the scalar reference", name,
                          dtype_name(t), nb, m);
            }
            free(x);
            free(xp);
            free(xq);
            free(wd);
        }
}

/* vnni-near's and avx2's types of 32 against x laid out once per call by
 * qlinear.c (a->xp, qdot_pack_x_xr) and laid out per task in the kernel
 * (a->xp NULL, as amx-few calls vnni-near for the types it does not
 * take): the same bits, for 1-3 input rows, rows of 1-17 and 28 blocks (a
 * whole run of 8, every length of the last one), a slice of a wider
 * matrix's rows, each row's layout only in its own xp_ld bytes (the rest
 * of the buffer poisoned) */
TEST(xr_per_call_bitwise)
{
    static const struct {
        const char *name;
        qdot_rows_fn rows;
    } ks[] = {{"vnni-near", qdot_rows_vnni_near}, {"avx2", qdot_rows_avx2}};
    for (size_t ki = 0; ki < sizeof(ks) / sizeof(ks[0]); ki++) {
        if (cpu_qlinear_force(ks[ki].name) == ERR_UNSUPPORTED)
            printf("%s: this CPU lacks it\n", ks[ki].name);
        else
            xr_per_call_check(ks[ki].name, ks[ki].rows);
    }
    CHECK(cpu_qlinear_force(NULL) == 0);
}

/* Rows packed in groups of 16 (core/qpack.h, weight.h's WEIGHT_PACK_X16;
 * Q4_K, Q5_K and Q6_K):
 * the layout's inverse gives the rows back, and the products of a packed
 * view give the rows' bits: bf16 mode by every kernel that reads packed
 * rows (vnni-x16 where the CPU has it, scalar-x16, the default) against
 * the scalar reference on the rows, f32 mode (dequantized blocks, and the
 * matrix product past 16 input rows) against the rows' f32 mode, and a
 * group of products mixing packed and unpacked jobs; rows past the
 * groups (37 = 2 x 16 + 5), one group alone, rows of 1 and 9 blocks,
 * embedding rows looked up in a packed table,
 * scales of both signs, every m to 20, then 33 and 64. */
TEST(packed_bitwise)
{
    static const int shapes[][2] = {{37, 9 * 256}, {16, 256}, {64, 2 * 256}, {5, 256}};
    static const enum dtype packed[] = {DTYPE_Q4_K, DTYPE_Q5_K, DTYPE_Q6_K};
    for (size_t ci = 0; ci < 3 * sizeof(shapes) / sizeof(shapes[0]); ci++) {
        const size_t si = ci / 3;
        const enum dtype t = packed[ci % 3];
        CHECK(qpack_takes(t));
        const int rows = shapes[si][0], cols = shapes[si][1];
        const size_t rb = dtype_row_bytes(t, cols), bytes = (size_t)rows * rb;
        unsigned char *wd = malloc(bytes), *wp = aligned_alloc(64, (bytes + 63) / 64 * 64);
        unsigned char *tmp = malloc(16 * rb), *back = malloc(bytes);
        cpu_qlinear_random_blocks(t, wd, bytes / quant_block_bytes(t), 500 + ci);
        for (size_t b = 0; b < bytes / quant_block_bytes(t); b++) /* d (dmin) < 0 */
            wd[b * quant_block_bytes(t) + (t == DTYPE_Q6_K ? 209
                                           : b % 3 == 1    ? 1
                                                           : 3)] |=
                (unsigned char)(t == DTYPE_Q6_K && b % 2 ? 0 : 0x80);
        memcpy(wp, wd, bytes);
        qpack_matrix(t, wp, rows, cols, tmp);
        /* the inverse, by group and by row */
        memcpy(back, wp, bytes);
        for (int g = 0; g < rows / 16; g++)
            qpack_group_unpack(t, wp + (size_t)g * 16 * rb, cols, back + (size_t)g * 16 * rb, rb);
        CHECK(memcmp(back, wd, bytes) == 0);
        for (int r = 0; r < rows / 16 * 16; r++) {
            qpack_row_unpack(t, wp + (size_t)(r / 16) * 16 * rb, cols, r % 16, tmp);
            CHECK_MSG(memcmp(tmp, wd + (size_t)r * rb, rb) == 0, "row %d written back", r);
        }
        CHECK(rows < 16 || memcmp(wp, wd, bytes) != 0);
        const struct weight_view w = {
            .dtype = t, .data = wd, .rows = rows, .cols = cols, .ld = cols};
        struct weight_view wx = w;
        wx.data = wp;
        wx.pack = WEIGHT_PACK_X16;
        const int mmax = 64;
        float *x = malloc((size_t)mmax * cols * sizeof(float));
        float *ref = malloc((size_t)mmax * rows * sizeof(float));
        float *y = malloc((size_t)mmax * rows * sizeof(float));
        for (size_t i = 0; i < (size_t)mmax * cols; i++)
            x[i] = urand() * (i % 7 == 0 ? 40.0f : 1.0f) * ((i / 256) % 5 == 3 ? 0.0f : 1.0f);
        static const char *const ks[] = {"vnni-x16", "scalar-x16", "scalar", NULL};
        for (int k = 0; k < 22; k++) {
            const int m = k < 20 ? k + 1 : k == 20 ? 33 : 64;
            const size_t yb = (size_t)m * rows * sizeof(float);
            CHECK(cpu_qlinear_force("scalar") == 0);
            CHECK(kern_linear(st, ref, x, m, &w, NULL, KERN_COMPUTE_BF16) == 0);
            for (size_t ki = 0; ki < sizeof(ks) / sizeof(ks[0]); ki++) {
                const int rc = cpu_qlinear_force(ks[ki]);
                if (rc == ERR_UNSUPPORTED)
                    continue;
                CHECK(rc == 0);
                for (int gf = 1; gf >= (has_gfni_build(ks[ki]) ? 0 : 1); gf--) {
                    cpu_qlinear_gfni(gf);
                    memset(y, 0xff, yb);
                    CHECK(kern_linear(st, y, x, m, &wx, NULL, KERN_COMPUTE_BF16) == 0);
                    CHECK_MSG(memcmp(y, ref, yb) == 0, "%s %d x %d packed, %s%s, m=%d",
                              dtype_name(t), rows, cols, ks[ki] ? ks[ki] : "measured",
                              gf ? "" : " (no GFNI)", m);
                }
                cpu_qlinear_gfni(true);
            }
            CHECK(cpu_qlinear_force(NULL) == 0);
            CHECK(kern_linear(st, ref, x, m, &w, NULL, KERN_COMPUTE_F32) == 0);
            memset(y, 0xff, yb);
            CHECK(kern_linear(st, y, x, m, &wx, NULL, KERN_COMPUTE_F32) == 0);
            CHECK_MSG(memcmp(y, ref, yb) == 0, "%d x %d packed, f32 mode, m=%d", rows, cols, m);
        }
        /* embedding rows from the packed view: those of the rows */
        {
            const int32_t ids[4] = {0, rows - 1, rows / 2, rows > 17 ? 17 : 1};
            float *e0 = malloc(4 * (size_t)cols * sizeof(float));
            float *e1 = malloc(4 * (size_t)cols * sizeof(float));
            CHECK(kern_embed(st, e0, &w, ids, 4, 4) == 0);
            CHECK(kern_embed(st, e1, &wx, ids, 4, 4) == 0);
            CHECK_MSG(memcmp(e0, e1, 4 * (size_t)cols * sizeof(float)) == 0,
                      "%s %d x %d packed embedding rows", dtype_name(t), rows, cols);
            free(e0);
            free(e1);
        }
        /* a group: packed, rows, packed again, sharing x */
        for (int c = 0; c < 2; c++) {
            const enum kern_compute cm = c ? KERN_COMPUTE_F32 : KERN_COMPUTE_BF16;
            const int m = 3;
            float *yg = malloc(3 * (size_t)m * rows * sizeof(float));
            struct kern_linear_job jobs[3];
            for (int j = 0; j < 3; j++)
                jobs[j] = (struct kern_linear_job){
                    .y = yg + (size_t)j * m * rows, .x = x, .m = m, .w = j == 1 ? w : wx};
            CHECK(kern_linear(st, ref, x, m, &w, NULL, cm) == 0);
            CHECK(kern_linear_group(st, jobs, 3, cm) == 0);
            for (int j = 0; j < 3; j++)
                CHECK_MSG(
                    memcmp(yg + (size_t)j * m * rows, ref, (size_t)m * rows * sizeof(float)) == 0,
                    "%d x %d, group job %d, %s", rows, cols, j, c ? "f32" : "bf16");
            free(yg);
        }
        free(x);
        free(ref);
        free(y);
        free(wd);
        free(wp);
        free(tmp);
        free(back);
    }
}

/* Quantized token embeddings: the rows dequantized, zeros outside a
 * vocabulary shard */
TEST(embed)
{
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const enum dtype t = types[ti];
        const int rows = 9, cols = 512;
        const size_t rb = dtype_row_bytes(t, cols);
        unsigned char *wd = malloc(rows * rb);
        cpu_qlinear_random_blocks(t, wd, rows * rb / quant_block_bytes(t), 7 + ti);
        const struct weight_view w = {
            .dtype = t, .data = wd, .rows = rows, .cols = cols, .ld = cols};
        const int32_t ids[3] = {4, 0, 12};
        float y[3 * 512], want[512];
        CHECK(kern_embed(st, y, &w, ids, 3, 3) == 0);
        quant_dequantize(t, wd + 1 * rb, want, cols);
        CHECK(memcmp(y, want, sizeof(want)) == 0);
        for (int c = 0; c < cols; c++)
            CHECK(y[512 + c] == 0.0f && y[1024 + c] == 0.0f);
        free(wd);
    }
}

int main(int argc, char **argv)
{
    int rc = test_main(argc, argv, setup);
    device_stream_destroy(st);
    device_close(dev);
    return rc;
}
