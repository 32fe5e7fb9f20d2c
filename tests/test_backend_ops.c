/* Every kernel of backend/kernels.h on the CUDA backend against the CPU
 * backend (ggml's test-backend-ops idea): the same seeded random inputs are
 * uploaded to cpu:0 and cuda:0 (device_alloc + kern_to_device on each
 * device's stream), each kernel runs on both, and the results come back with
 * kern_to_host and are compared. Without a CUDA build or without a GPU,
 * device_open_cuda fails and each case prints "SKIP: <why>" and exits 77.
 *
 * Tolerances (test_rel_err: max |gpu - cpu| / max |cpu|, unless stated):
 * - kern_linear, f32 mode: 3e-5. Both sides accumulate in f32 in different
 *   orders (the GEMV's warp sums, cuBLAS's tiles); TF32 slipping into the
 *   cuBLAS path would be ~1e-3 and fail.
 * - kern_linear, bf16 mode: 1e-2. The GPU rounds x to the weights' own
 *   16-bit type for cuBLAS (f16 for f16 weights), the CPU to bf16; a CPU
 *   with AMX also rounds f16/f32 weights to bf16.
 * - kern_lora: the update (y - y0) within kern_linear's tolerances, 3e-5
 *   in f32 mode (sums in other orders: the CPU's 16 lanes, the GPU's warp)
 *   and 1e-2 in bf16 mode (the rank-r intermediate may round to the
 *   neighbouring bf16 on one side only); rows outside the segments
 *   untouched on both. Weights f32/f16/bf16, ranks 1-64, m 1-80 (more
 *   segments than one launch's table), base rows and an empty segment, A a
 *   column slice (ld > cols).
 * - kern_layernorm: 1e-5 (both sum in double; the rest is f32).
 * - kern_rmsnorm: per element |gpu - cpu| <= 1e-6 |cpu|, on rows of very
 *   different magnitudes: both round the same double rstd to f32 (sums in
 *   another order may move it by an ulp) and make the same two f32
 *   products.
 * - kern_rope: 1e-5 (cosf and sinf of two libms, CUDA's within 2 ulp; the
 *   products and sums are the same f32 operations), at positions up to
 *   500000 where the arguments need the slow range reduction; elements past
 *   rot_dim exact.
 * - kern_activation: per element |gpu - cpu| <= 1e-5 |cpu| + 1e-6 (erff,
 *   tanhf and expf of two libms, a few ulps apart; the absolute part covers
 *   GELU's 1 + erf(x) cancelling for very negative x).
 * - kern_gated_act: per element |gpu - cpu| <= 1e-5 |cpu| + 1e-6 |up|
 *   (kern_activation's tolerance through the product).
 * - kern_attention: 1e-5 (online softmax against the CPU's scores matrix);
 *   a query that sees no key must be exactly 0 on the GPU. With kv_heads ==
 *   heads, and grouped (kv_heads 1 and between) in prefill and decode; a
 *   windowed layer's ring (kv_geom.ring) in steps that wrap it.
 * - kern_embed, kern_add, kern_scale, kern_kv_append (the whole cache,
 *   untouched positions included), kern_gather_rows, kern_combine_rows, kern_copy,
 *   kern_to_host/kern_to_device: exact (copies, or one correctly rounded
 *   f32 operation).
 * - kern_route_topk: choices, rows, slots and counts exact, weights within
 *   2e-6 relative (expf a few ulps apart), on logits whose probabilities
 *   are equal (ties) or far apart (route_case says why).
 *
 * - kern_linear with GGUF block types (linear_quant): per element against
 *   sum |w x| and x's quantization bound, as qlinear_case states: f32 mode
 *   2e-5; bf16 mode up to 8 rows (the integer GEMV) 1e-6, expected
 *   bit-equal and counted; bf16 mode above (bf16 cuBLAS on dequantized
 *   rows, against the CPU's quantized x) the quantization bound + 5e-3.
 *   With compressed-tensors' types (linear_ct): f32 mode the same; bf16
 *   mode, every m, against the exact product of the bf16-rounded weights
 *   and x within 1e-5 of sum |w x|.
 *   kern_embed with block types, both kinds (embed_quant): exact. Without
 *   a GPU these three check the CPU against the exact product and
 *   dtype_to_f32, then skip; every other case skips at once.
 *
 * Linear covers m in {1, 2, 5, 8, 9, 33, 130} (the GEMV up to 8, cuBLAS
 * above) x weights {f32, f16, bf16} x both precisions x with/without bias,
 * on dense weights, column slices (an odd element offset, ld > cols, K not a
 * multiple of 8) and 16-byte aligned slices, plus two shapes large enough
 * that the cuBLAS paths convert in several scratch blocks.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/cpu/qlinear.h"
#include "backend/device.h"
#include "backend/kernels.h"
#include "backend/weight.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/quant.h"
#include "core/quant_ct.h"
#include "core/rng.h"
#include "test.h"

#define MiB ((uint64_t)1 << 20)
#define TOL_F32 1e-5
#define TOL_LINEAR_F32 3e-5
#define TOL_LINEAR_BF16 1e-2

static struct device *cpu_dev, *gpu_dev;
static struct stream *cpu_st, *gpu_st;
static struct rng rng;
/* Without a GPU (gpu_dev NULL): why, and every case that needs one skips;
 * the quantized cases check their CPU half against a host reference. */
static char no_gpu[256];

static void need_gpu(void)
{
    if (!gpu_dev)
        test_skip(no_gpu);
}

static float urand(float lo, float hi)
{
    return lo + (hi - lo) * (float)rng_uniform(&rng);
}

static void fill(float *x, size_t n, float lo, float hi)
{
    for (size_t i = 0; i < n; i++)
        x[i] = urand(lo, hi);
}

/* The same buffer on both devices. */
struct twin {
    struct dbuf *c, *g;
};

static struct dbuf *alloc_on(struct device *d, size_t bytes)
{
    struct dbuf *b = NULL;
    int rc = device_alloc(d, bytes, &b);
    if (rc != ERR_OK) {
        fprintf(stderr, "%s: %s: cannot go on\n", device_name(d), err_msg());
        exit(1);
    }
    return b;
}

/* (Without a GPU, only the CPU half: t.g stays NULL.) */
static struct twin twin_alloc(size_t bytes)
{
    struct twin t = {alloc_on(cpu_dev, bytes), gpu_dev ? alloc_on(gpu_dev, bytes) : NULL};
    return t;
}

/* Both copies hold host's bytes. */
static struct twin twin_upload(const void *host, size_t bytes)
{
    struct twin t = twin_alloc(bytes);
    int rc = kern_to_device(cpu_st, dbuf_ptr(t.c), host, bytes);
    CHECK_MSG(rc == 0, "%s", err_msg());
    if (t.g) {
        rc = kern_to_device(gpu_st, dbuf_ptr(t.g), host, bytes);
        CHECK_MSG(rc == 0, "%s", err_msg());
    }
    return t;
}

static void twin_download(struct twin t, void *cpu_host, void *gpu_host, size_t bytes)
{
    int rc = kern_to_host(cpu_st, cpu_host, dbuf_ptr(t.c), bytes);
    CHECK_MSG(rc == 0, "%s", err_msg());
    if (t.g) {
        rc = kern_to_host(gpu_st, gpu_host, dbuf_ptr(t.g), bytes);
        CHECK_MSG(rc == 0, "%s", err_msg());
    }
}

static void twin_free(struct twin *t)
{
    device_free(t->c);
    if (t->g)
        device_free(t->g);
    t->c = t->g = NULL;
}

/* Expects rc == 0 from a kernel call, naming it and the error otherwise. */
#define RUN(what, call)                                                                            \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        CHECK_MSG(rc_ == 0, "%s: %s", (what), err_msg());                                          \
    } while (0)

/* ---- linear ---- */

struct lin_shape {
    const char *name;
    int n, k;       /* rows (outputs), cols (inputs) */
    size_t ld, off; /* row stride and offset of element (0, 0), elements */
};

static double worst_linear[2]; /* by enum kern_compute */

static void linear_case(const struct lin_shape *sh, enum dtype dt, int m, enum kern_compute c,
                        bool with_bias)
{
    const int n = sh->n, k = sh->k;
    const size_t elems = sh->off + (size_t)n * sh->ld, es = dtype_size(dt);
    float *wf = test_xmalloc(elems * sizeof(float));
    void *wd = test_xmalloc(elems * es);
    float *x = test_xmalloc((size_t)m * k * sizeof(float));
    float *bias = test_xmalloc((size_t)n * sizeof(float));
    float *yc = test_xmalloc((size_t)m * n * sizeof(float));
    float *yg = test_xmalloc((size_t)m * n * sizeof(float));
    fill(wf, elems, -1, 1);
    dtype_from_f32(dt, wf, wd, elems);
    fill(x, (size_t)m * k, -1, 1);
    fill(bias, (size_t)n, -1, 1);

    struct twin tw = twin_upload(wd, elems * es);
    struct twin tx = twin_upload(x, (size_t)m * k * sizeof(float));
    struct twin tb = twin_upload(bias, (size_t)n * sizeof(float));
    struct twin ty = twin_alloc((size_t)m * n * sizeof(float));
    struct weight_view wc = {.dtype = dt, .rows = n, .cols = k, .ld = sh->ld};
    struct weight_view wg = wc;
    wc.data = (const char *)dbuf_ptr(tw.c) + sh->off * es;
    wg.data = (const char *)dbuf_ptr(tw.g) + sh->off * es;

    RUN("linear cpu", kern_linear(cpu_st, dbuf_ptr(ty.c), dbuf_ptr(tx.c), m, &wc,
                                  with_bias ? dbuf_ptr(tb.c) : NULL, c));
    RUN("linear cuda", kern_linear(gpu_st, dbuf_ptr(ty.g), dbuf_ptr(tx.g), m, &wg,
                                   with_bias ? dbuf_ptr(tb.g) : NULL, c));
    twin_download(ty, yc, yg, (size_t)m * n * sizeof(float));
    double err = test_rel_err(yg, yc, (size_t)m * n);
    double tol = c == KERN_COMPUTE_F32 ? TOL_LINEAR_F32 : TOL_LINEAR_BF16;
    CHECK_MSG(err <= tol, "linear %s %s m=%d %s%s: rel err %.3g > %.0e", sh->name, dtype_name(dt),
              m, kern_compute_name(c), with_bias ? " +bias" : "", err, tol);
    if (err > worst_linear[c])
        worst_linear[c] = err;

    twin_free(&tw);
    twin_free(&tx);
    twin_free(&tb);
    twin_free(&ty);
    free(wf);
    free(wd);
    free(x);
    free(bias);
    free(yc);
    free(yg);
}

TEST(linear)
{
    need_gpu();
    static const struct lin_shape shapes[] = {
        {"dense k%8!=0", 67, 203, 203, 0},        {"dense aligned", 96, 256, 256, 0},
        {"odd column slice", 45, 203, 301, 5},    {"aligned slice, tail", 50, 212, 264, 8},
        {"long aligned rows", 40, 2056, 2056, 0},
    };
    static const int ms[] = {1, 2, 5, 8, 9, 33, 130};
    static const enum dtype dts[] = {DTYPE_F32, DTYPE_F16, DTYPE_BF16};
    int cases = 0;
    for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++)
        for (size_t di = 0; di < 3; di++)
            for (size_t mi = 0; mi < sizeof(ms) / sizeof(ms[0]); mi++)
                for (int c = 0; c < 2; c++)
                    for (int b = 0; b < 2; b++) {
                        linear_case(&shapes[si], dts[di], ms[mi], (enum kern_compute)c, b);
                        cases++;
                    }
    /* f32 mode on f16 weights wider than one scratch block of widened rows
     * (2100 x 4096 x 4 bytes > 32 MiB), and bf16 mode with more rows of x
     * than one block of narrowed activations (4100 x 4096 x 2 > 32 MiB) */
    static const struct lin_shape big_w = {"W in blocks", 2100, 4096, 4096, 0};
    static const struct lin_shape big_x = {"x in blocks", 16, 4096, 4096, 0};
    linear_case(&big_w, DTYPE_F16, 9, KERN_COMPUTE_F32, true);
    linear_case(&big_x, DTYPE_BF16, 4100, KERN_COMPUTE_BF16, true);
    linear_case(&big_x, DTYPE_F32, 4100, KERN_COMPUTE_BF16, false);
    cases += 3;
    printf("linear: %d cases, worst rel err f32 mode %.3g, bf16 mode %.3g\n", cases,
           worst_linear[KERN_COMPUTE_F32], worst_linear[KERN_COMPUTE_BF16]);
}

/* ---- lora ---- */

/* One adapter's pair on both devices. */
struct lora_twin {
    struct twin a, b;
    struct lora_pair pc, pg;
};

static struct lora_twin lora_twin_make(enum dtype dt, int r, int in, int out, size_t lda)
{
    const size_t na = (size_t)r * lda, nb = (size_t)out * r, es = dtype_size(dt);
    float *f = test_xmalloc((na > nb ? na : nb) * sizeof(float));
    void *d = test_xmalloc((na > nb ? na : nb) * es);
    struct lora_twin t;
    fill(f, na, -1, 1);
    dtype_from_f32(dt, f, d, na);
    t.a = twin_upload(d, na * es);
    fill(f, nb, -1, 1);
    dtype_from_f32(dt, f, d, nb);
    t.b = twin_upload(d, nb * es);
    const float scale = urand(0.25f, 4.0f);
    t.pc = (struct lora_pair){
        .a = {.dtype = dt, .data = dbuf_ptr(t.a.c), .rows = r, .cols = in, .ld = lda},
        .b = {.dtype = dt, .data = dbuf_ptr(t.b.c), .rows = out, .cols = r, .ld = (size_t)r},
        .scale = scale,
    };
    t.pg = t.pc;
    t.pg.a.data = dbuf_ptr(t.a.g);
    t.pg.b.data = dbuf_ptr(t.b.g);
    free(f);
    free(d);
    return t;
}

static double worst_lora[2]; /* by enum kern_compute */

/* m rows in segments of 1-3 rows over nad adapters of rank up to r (every
 * third segment a base row's, without weights), an empty segment, the last
 * row outside; compared on the update y - y0. */
static void lora_case(enum dtype dt, enum kern_compute c, int m, int r, int in, int out, int nad,
                      size_t lda)
{
    struct lora_twin ad[8];
    for (int i = 0; i < nad; i++)
        ad[i] = lora_twin_make(dt, i == 0 ? r : 1 + (i * 37 + r) % r, in, out, lda);
    int *seg = test_xmalloc((size_t)(m + 2) * sizeof(int));
    struct lora_pair *pc = test_xmalloc((size_t)(m + 1) * sizeof(*pc));
    struct lora_pair *pg = test_xmalloc((size_t)(m + 1) * sizeof(*pg));
    int nseg = 0;
    seg[0] = 0;
    for (int i = 0; i < m - 1 || (m == 1 && i == 0);) {
        int len = 1 + nseg % 3, end = i + len < m - 1 ? i + len : (m == 1 ? 1 : m - 1);
        if (nseg % 3 == 2) {
            pc[nseg] = pg[nseg] = (struct lora_pair){0};
        } else {
            pc[nseg] = ad[nseg % nad].pc;
            pg[nseg] = ad[nseg % nad].pg;
        }
        seg[++nseg] = end;
        i = end;
        if (nseg == 4) { /* an empty segment */
            pc[nseg] = ad[0].pc;
            pg[nseg] = ad[0].pg;
            seg[nseg + 1] = seg[nseg];
            nseg++;
        }
    }
    const size_t nx = (size_t)m * in, ny = (size_t)m * out;
    float *x = test_xmalloc(nx * sizeof(float)), *y0 = test_xmalloc(ny * sizeof(float));
    float *yc = test_xmalloc(ny * sizeof(float)), *yg = test_xmalloc(ny * sizeof(float));
    fill(x, nx, -2, 2);
    fill(y0, ny, -1, 1);
    struct twin tx = twin_upload(x, nx * sizeof(float));
    struct twin ty = twin_upload(y0, ny * sizeof(float));
    struct twin ts = twin_alloc(kern_lora_scratch(m, r) * sizeof(float) + 64);
    RUN("lora cpu",
        kern_lora(cpu_st, dbuf_ptr(ty.c), dbuf_ptr(tx.c), m, nseg, seg, pc, c, dbuf_ptr(ts.c)));
    RUN("lora cuda",
        kern_lora(gpu_st, dbuf_ptr(ty.g), dbuf_ptr(tx.g), m, nseg, seg, pg, c, dbuf_ptr(ts.g)));
    twin_download(ty, yc, yg, ny * sizeof(float));
    for (size_t i = 0; i < ny; i++) {
        yc[i] -= y0[i];
        yg[i] -= y0[i];
    }
    double err = test_rel_err(yg, yc, ny);
    double tol = c == KERN_COMPUTE_F32 ? TOL_LINEAR_F32 : TOL_LINEAR_BF16;
    CHECK_MSG(err <= tol, "lora %s %s m=%d r=%d %dx%d, %d segments: rel err %.3g > %.0e",
              dtype_name(dt), kern_compute_name(c), m, r, in, out, nseg, err, tol);
    if (err > worst_lora[c])
        worst_lora[c] = err;
    /* the last row is outside every segment: untouched on both */
    bool kept = true;
    for (int o = 0; o < out && m > 1; o++)
        kept = kept && yc[ny - out + o] == 0 && yg[ny - out + o] == 0;
    CHECK_MSG(kept, "lora m=%d: a row outside the segments changed", m);
    twin_free(&tx);
    twin_free(&ty);
    twin_free(&ts);
    for (int i = 0; i < nad; i++) {
        twin_free(&ad[i].a);
        twin_free(&ad[i].b);
    }
    free(seg);
    free(pc);
    free(pg);
    free(x);
    free(y0);
    free(yc);
    free(yg);
}

TEST(lora)
{
    if (!gpu_dev) /* a setup that goes on without a GPU (for CPU-only halves) */
        test_skip("no CUDA device");
    static const enum dtype dts[] = {DTYPE_F32, DTYPE_F16, DTYPE_BF16};
    static const int ms[] = {1, 5, 17, 80}; /* 80: more segments than one launch's table */
    static const int ranks[] = {1, 16, 64};
    int cases = 0;
    for (size_t di = 0; di < 3; di++)
        for (int c = 0; c < 2; c++)
            for (size_t mi = 0; mi < sizeof(ms) / sizeof(ms[0]); mi++)
                for (size_t ri = 0; ri < sizeof(ranks) / sizeof(ranks[0]); ri++) {
                    lora_case(dts[di], (enum kern_compute)c, ms[mi], ranks[ri], 72, 40, 3, 72);
                    lora_case(dts[di], (enum kern_compute)c, ms[mi], ranks[ri], 300, 1100, 8, 303);
                    cases += 2;
                }
    printf("lora: %d cases, worst rel err f32 mode %.3g, bf16 mode %.3g\n", cases,
           worst_lora[KERN_COMPUTE_F32], worst_lora[KERN_COMPUTE_BF16]);
}

/* ---- embed ---- */

TEST(embed)
{
    need_gpu();
    static const enum dtype dts[] = {DTYPE_F32, DTYPE_F16, DTYPE_BF16};
    /* a vocabulary shard of rows [row0, row0 + rows), a column slice */
    const int rows = 50, cols = 67, row0 = 10;
    const size_t ld = 70, off = 3, elems = off + (size_t)rows * ld;
    static const int32_t ids[] = {10, 59, 60, 9, 0, 35, -3, 2147483647, 11, 10};
    const int n = (int)(sizeof(ids) / sizeof(ids[0]));
    for (size_t di = 0; di < 3; di++) {
        const enum dtype dt = dts[di];
        const size_t es = dtype_size(dt);
        float *wf = test_xmalloc(elems * sizeof(float));
        void *wd = test_xmalloc(elems * es);
        float *yc = test_xmalloc((size_t)n * cols * sizeof(float));
        float *yg = test_xmalloc((size_t)n * cols * sizeof(float));
        fill(wf, elems, -2, 2);
        dtype_from_f32(dt, wf, wd, elems);
        struct twin tw = twin_upload(wd, elems * es);
        struct twin ti = twin_upload(ids, sizeof(ids));
        struct twin ty = twin_alloc((size_t)n * cols * sizeof(float));
        struct weight_view wc = {.dtype = dt, .rows = rows, .cols = cols, .ld = ld};
        struct weight_view wg = wc;
        wc.data = (const char *)dbuf_ptr(tw.c) + off * es;
        wg.data = (const char *)dbuf_ptr(tw.g) + off * es;
        /* NaN in every output first: a row the GPU forgets to write shows */
        float *nan = test_xmalloc((size_t)n * cols * sizeof(float));
        for (size_t i = 0; i < (size_t)n * cols; i++)
            nan[i] = NAN;
        RUN("embed fill", kern_to_device(gpu_st, dbuf_ptr(ty.g), nan, (size_t)n * cols * 4));
        RUN("embed cpu", kern_embed(cpu_st, dbuf_ptr(ty.c), &wc, dbuf_ptr(ti.c), n, row0));
        RUN("embed cuda", kern_embed(gpu_st, dbuf_ptr(ty.g), &wg, dbuf_ptr(ti.g), n, row0));
        twin_download(ty, yc, yg, (size_t)n * cols * sizeof(float));
        CHECK_MSG(memcmp(yc, yg, (size_t)n * cols * sizeof(float)) == 0, "embed %s differs",
                  dtype_name(dt));
        twin_free(&tw);
        twin_free(&ti);
        twin_free(&ty);
        free(wf);
        free(wd);
        free(yc);
        free(yg);
        free(nan);
    }
    printf("embed: 3 dtypes, exact\n");
}

/* ---- GGUF block-type weights ---- */

static const enum dtype qtypes[] = {DTYPE_Q8_0, DTYPE_Q4_0, DTYPE_Q5_0, DTYPE_Q5_1,
                                    DTYPE_Q4_K, DTYPE_Q5_K, DTYPE_Q6_K};
#define N_QTYPES (int)(sizeof(qtypes) / sizeof(qtypes[0]))
/* compressed-tensors' (core/quant_ct.h) */
static const enum dtype ctypes[] = {DTYPE_CT_I8, DTYPE_CT_I4, DTYPE_CT_F8};
#define N_CTYPES (int)(sizeof(ctypes) / sizeof(ctypes[0]))

/* A quantized linear shape in blocks: n rows of cb blocks, viewed from row
 * r0 and block c0 of a stored matrix whose rows hold ldb blocks (a TP
 * slice of rows when r0 > 0, of columns when ldb > cb). */
struct qlin_shape {
    const char *name;
    int n, cb, ldb, r0, c0;
};

/* f32 mode, bf16 GEMV, bf16 GEMM, CPU alone vs host, CT bf16 mode (each / its bound) */
static double worst_q[5];
static size_t q_same, q_total; /* bf16 GEMV elements bit-equal to the CPU's */

/* One product of block type t, m rows of x: the CPU's and (with a GPU) the
 * GPU's result. Per element, with mag = sum |w x| and qbound = the
 * quantization bound of x (test_quant: amax(x block) (1/254 + 1/2000) sum
 * |w| over each block) computed in double from the dequantized weights:
 * - f32 mode: |gpu - cpu| <= 2e-5 mag (each side within 1e-5 mag of the
 *   exact product: f32 sums in different orders);
 * - bf16 mode, m <= 8: |gpu - cpu| <= 1e-6 mag: the GPU's integer GEMV
 *   takes the CPU's steps in the CPU's order, so it is expected bit-equal
 *   (the count is printed); the slack is for a libm or compiler ulp;
 * - bf16 mode, m > 8: |gpu - cpu| <= qbound + 5e-3 mag: the CPU quantizes
 *   x (within qbound + 1e-5 mag of exact), the GPU's cuBLAS path rounds x
 *   and the weights to bf16 (within 2^-8 mag + f32 sums of exact).
 * Without a GPU the CPU half is checked against the exact product instead:
 * 1e-5 mag in f32 mode, qbound + 1e-5 mag in bf16 mode.
 * Compressed-tensors' types compute the same values on both backends (the
 * weights dequantized exactly; in bf16 mode weights and x rounded to bf16,
 * f32 products), in different orders: f32 mode as above; bf16 mode, every
 * m, the GPU against the exact product of the bf16-rounded weights and x
 * within 1e-5 of its sum |w x|. Without a GPU, the CPU's bf16 mode against
 * the exact product within qbound + 8e-3 mag (bf16 rounding of w and x,
 * or a quantized x, either within it). */
static void qlinear_case(const struct qlin_shape *sh, enum dtype t, int m, enum kern_compute c,
                         bool with_bias)
{
    const int qk = dtype_block(t), n = sh->n, k = sh->cb * qk;
    const size_t ld = (size_t)sh->ldb * qk, row_bytes = dtype_row_bytes(t, ld);
    const int all_rows = sh->r0 + n + 1;
    const size_t bytes = (size_t)all_rows * row_bytes;
    unsigned char *stored = test_xmalloc(bytes);
    cpu_qlinear_random_blocks(t, stored, bytes / quant_block_bytes(t), 1000 + (uint64_t)t * 7 + m);
    const size_t off = (size_t)sh->r0 * row_bytes + dtype_row_bytes(t, (size_t)sh->c0 * qk);
    /* the view's rows dequantized on the host, for the bounds */
    float *wf = test_xmalloc((size_t)n * k * sizeof(float));
    for (int r = 0; r < n; r++)
        dtype_to_f32(t, stored + off + (size_t)r * row_bytes, wf + (size_t)r * k, (size_t)k);
    float *x = test_xmalloc((size_t)m * k * sizeof(float));
    for (size_t i = 0; i < (size_t)m * k; i++)
        x[i] = urand(-1, 1) * (i % 7 == 0 ? 4.0f : 1.0f);
    float *bias = test_xmalloc((size_t)n * sizeof(float));
    fill(bias, (size_t)n, -1, 1);
    float *yc = test_xmalloc((size_t)m * n * sizeof(float)),
          *yg = test_xmalloc((size_t)m * n * sizeof(float));

    struct twin tw = twin_upload(stored, bytes);
    struct twin tx = twin_upload(x, (size_t)m * k * sizeof(float));
    struct twin tb = twin_upload(bias, (size_t)n * sizeof(float));
    struct twin ty = twin_alloc((size_t)m * n * sizeof(float));
    struct weight_view wc = {.dtype = t, .rows = n, .cols = k, .ld = ld};
    struct weight_view wg = wc;
    wc.data = (const char *)dbuf_ptr(tw.c) + off;
    RUN("qlinear cpu", kern_linear(cpu_st, dbuf_ptr(ty.c), dbuf_ptr(tx.c), m, &wc,
                                   with_bias ? dbuf_ptr(tb.c) : NULL, c));
    if (gpu_dev) {
        wg.data = (const char *)dbuf_ptr(tw.g) + off;
        RUN("qlinear cuda", kern_linear(gpu_st, dbuf_ptr(ty.g), dbuf_ptr(tx.g), m, &wg,
                                        with_bias ? dbuf_ptr(tb.g) : NULL, c));
    }
    twin_download(ty, yc, yg, (size_t)m * n * sizeof(float));

    const bool bf16 = c == KERN_COMPUTE_BF16, gemv = m <= 8, ct = quant_ct_is(t);
    /* what qbound needs per block, computed once per row of x and of w
     * rather than once per output element (the same doubles, summed in the
     * same order); the bf16-rounded product only where it is compared */
    const int nb = k / qk;
    const bool want_b = gpu_dev && ct && bf16;
    double *xamax = test_xmalloc((size_t)m * nb * sizeof(double)); /* (m, nb): max |x| */
    double *wabs = test_xmalloc((size_t)n * nb * sizeof(double));  /* (n, nb): sum |w| */
    for (int i = 0; i < m; i++)
        for (int b = 0; b < nb; b++) {
            double amax = 0;
            for (int j = b * qk; j < (b + 1) * qk; j++)
                amax = fmax(amax, fabs(x[(size_t)i * k + j]));
            xamax[(size_t)i * nb + b] = amax;
        }
    for (int r = 0; r < n; r++)
        for (int b = 0; b < nb; b++) {
            double wsum = 0;
            for (int j = b * qk; j < (b + 1) * qk; j++)
                wsum += fabs(wf[(size_t)r * k + j]);
            wabs[(size_t)r * nb + b] = wsum;
        }
    int bad = 0;
    for (int i = 0; i < m; i++)
        for (int r = 0; r < n; r++) {
            const float *xi = x + (size_t)i * k, *wr = wf + (size_t)r * k;
            double ref = with_bias ? bias[r] : 0, mag = 0, qbound = 0;
            double refb = ref, magb = 0; /* bf16-rounded w and x */
            for (int b0 = 0; b0 < k; b0 += qk) {
                for (int j = b0; j < b0 + qk; j++) {
                    ref += (double)wr[j] * xi[j];
                    mag += fabs((double)wr[j] * xi[j]);
                }
                if (want_b)
                    for (int j = b0; j < b0 + qk; j++) {
                        refb += (double)bf16_round(wr[j]) * bf16_round(xi[j]);
                        magb += fabs((double)bf16_round(wr[j]) * bf16_round(xi[j]));
                    }
                const int b = b0 / qk;
                qbound +=
                    xamax[(size_t)i * nb + b] * (1.0 / 254 + 1.0 / 2000) * wabs[(size_t)r * nb + b];
            }
            const size_t e = (size_t)i * n + r;
            double err, tol;
            int which;
            if (!gpu_dev) {
                err = fabs(yc[e] - ref);
                tol = !bf16 ? 1e-5 * mag : ct ? qbound + 8e-3 * mag : qbound + 1e-5 * mag;
                which = 3;
            } else if (ct && bf16) {
                err = fabs(yg[e] - refb);
                tol = 1e-5 * magb;
                which = 4;
            } else {
                err = fabs((double)yg[e] - yc[e]);
                tol = !bf16 ? 2e-5 * mag : gemv ? 1e-6 * mag : qbound + 5e-3 * mag;
                which = !bf16 ? 0 : gemv ? 1 : 2;
                if (bf16 && gemv && !ct) {
                    q_same += memcmp(&yg[e], &yc[e], sizeof(float)) == 0;
                    q_total++;
                }
            }
            tol += 1e-30;
            worst_q[which] = fmax(worst_q[which], err / tol);
            if (err > tol && bad++ < 3)
                CHECK_MSG(false,
                          "qlinear %s %s m=%d %s%s: y[%d,%d] cpu %.9g cuda %.9g ref %.9g "
                          "(|err| %.3g > %.3g)",
                          sh->name, dtype_name(t), m, kern_compute_name(c),
                          with_bias ? " +bias" : "", i, r, yc[e], gpu_dev ? yg[e] : NAN, ref, err,
                          tol);
        }
    CHECK_MSG(bad == 0, "qlinear %s %s m=%d %s: %d elements out of tolerance", sh->name,
              dtype_name(t), m, kern_compute_name(c), bad);

    twin_free(&tw);
    twin_free(&tx);
    twin_free(&tb);
    twin_free(&ty);
    free(stored);
    free(wf);
    free(x);
    free(bias);
    free(yc);
    free(yg);
    free(xamax);
    free(wabs);
}

/* kern_linear with every block type, both precisions, m in {1, 3, 8, 64,
 * 300} (the GEMV to 8, dequantized blocks + cuBLAS above), on odd row
 * counts, a TP slice of rows and of columns on block boundaries (ld >
 * cols), and longer rows; then shapes whose weights or activations take
 * several scratch blocks on the GPU. */
TEST(linear_quant)
{
    static const struct qlin_shape shapes[] = {
        {"dense, odd rows", 67, 3, 3, 0, 0},
        {"row and column slice", 45, 3, 5, 2, 1},
        {"long rows", 40, 16, 16, 0, 0},
    };
    static const int ms[] = {1, 3, 8, 64, 300};
    int cases = 0;
    for (int ti = 0; ti < N_QTYPES; ti++)
        for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++)
            for (size_t mi = 0; mi < sizeof(ms) / sizeof(ms[0]); mi++)
                for (int c = 0; c < 2; c++) {
                    qlinear_case(&shapes[si], qtypes[ti], ms[mi], (enum kern_compute)c,
                                 si == 1 || ms[mi] == 3);
                    cases++;
                }
    if (gpu_dev) {
        /* W in two scratch blocks: 2100 rows of 4096 widened to f32 (34
         * MB) or bf16 (17 MB > half the scratch); x in two: 2100 rows of
         * 4096 in bf16 (17 MB > half) */
        static const struct qlin_shape big_w = {"W in blocks", 2100, 16, 16, 0, 0};
        static const struct qlin_shape big_x = {"x in blocks", 40, 128, 128, 0, 0};
        qlinear_case(&big_w, DTYPE_Q4_K, 9, KERN_COMPUTE_F32, true);
        qlinear_case(&big_w, DTYPE_Q4_K, 9, KERN_COMPUTE_BF16, true);
        qlinear_case(&big_x, DTYPE_Q8_0, 2100, KERN_COMPUTE_BF16, false);
        cases += 3;
        printf("linear_quant: %d cases; worst |err| / tolerance: f32 mode %.3g, bf16 GEMV %.3g, "
               "bf16 GEMM %.3g; bf16 GEMV bit-equal to the CPU at %zu of %zu elements\n",
               cases, worst_q[0], worst_q[1], worst_q[2], q_same, q_total);
        return;
    }
    printf("linear_quant: %d cases, the CPU alone against the exact product: worst |err| / "
           "tolerance %.3g\n",
           cases, worst_q[3]);
    if (test_failures == 0)
        test_skip(no_gpu);
}

/* kern_linear with compressed-tensors' types: linear_quant's shapes and
 * row counts (the GEMV of ctgemv.cu to 8 rows, dequantized blocks + cuBLAS
 * above), then the shapes that take several scratch blocks on the GPU. */
TEST(linear_ct)
{
    static const struct qlin_shape shapes[] = {
        {"dense, odd rows", 67, 3, 3, 0, 0},
        {"row and column slice", 45, 3, 5, 2, 1},
        {"long rows", 40, 16, 16, 0, 0},
    };
    static const int ms[] = {1, 3, 8, 64, 300};
    int cases = 0;
    for (int i = 0; i < 5; i++)
        worst_q[i] = 0;
    for (int ti = 0; ti < N_CTYPES; ti++)
        for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++)
            for (size_t mi = 0; mi < sizeof(ms) / sizeof(ms[0]); mi++)
                for (int c = 0; c < 2; c++) {
                    qlinear_case(&shapes[si], ctypes[ti], ms[mi], (enum kern_compute)c,
                                 si == 1 || ms[mi] == 3);
                    cases++;
                }
    if (gpu_dev) {
        /* as linear_quant's: W in two scratch blocks (2100 rows of 4096),
         * x in two (2100 rows of 4096 in bf16) */
        static const struct qlin_shape big_w = {"W in blocks", 2100, 128, 128, 0, 0};
        static const struct qlin_shape big_x = {"x in blocks", 40, 128, 128, 0, 0};
        qlinear_case(&big_w, DTYPE_CT_I4, 9, KERN_COMPUTE_F32, true);
        qlinear_case(&big_w, DTYPE_CT_I8, 9, KERN_COMPUTE_BF16, true);
        qlinear_case(&big_x, DTYPE_CT_F8, 2100, KERN_COMPUTE_BF16, false);
        cases += 3;
        printf("linear_ct: %d cases; worst |err| / tolerance: f32 mode %.3g, bf16 mode %.3g\n",
               cases, worst_q[0], worst_q[4]);
        return;
    }
    printf("linear_ct: %d cases, the CPU alone against the exact product: worst |err| / "
           "tolerance %.3g\n",
           cases, worst_q[3]);
    if (test_failures == 0)
        test_skip(no_gpu);
}

/* kern_embed with every block type: a vocabulary shard (row0) and a column
 * slice on block boundaries; the GPU's rows equal the CPU's bit for bit
 * (both dequantize with the same f32 operations), and without a GPU the
 * CPU's equal dtype_to_f32's. */
TEST(embed_quant)
{
    const int rows = 50, row0 = 10;
    static const int32_t ids[] = {10, 59, 60, 9, 0, 35, -3, 2147483647, 11, 10};
    const int n = (int)(sizeof(ids) / sizeof(ids[0]));
    for (int ti = 0; ti < N_QTYPES + N_CTYPES; ti++) {
        const enum dtype t = ti < N_QTYPES ? qtypes[ti] : ctypes[ti - N_QTYPES];
        const int qk = dtype_block(t), cols = 3 * qk;
        const size_t ld = (size_t)5 * qk, row_bytes = dtype_row_bytes(t, ld);
        const size_t bytes = (size_t)rows * row_bytes, off = dtype_row_bytes(t, (size_t)qk);
        unsigned char *stored = test_xmalloc(bytes);
        cpu_qlinear_random_blocks(t, stored, bytes / quant_block_bytes(t), 77 + (uint64_t)ti);
        float *yc = test_xmalloc((size_t)n * cols * sizeof(float));
        float *yg = test_xmalloc((size_t)n * cols * sizeof(float));
        float *want = test_xmalloc((size_t)n * cols * sizeof(float));
        for (int i = 0; i < n; i++) {
            const int64_t r = (int64_t)ids[i] - row0;
            float *wi = want + (size_t)i * cols;
            if (r >= 0 && r < rows)
                dtype_to_f32(t, stored + (size_t)r * row_bytes + off, wi, (size_t)cols);
            else
                memset(wi, 0, (size_t)cols * sizeof(float));
        }
        struct twin tw = twin_upload(stored, bytes);
        struct twin ti_ = twin_upload(ids, sizeof(ids));
        struct twin ty = twin_alloc((size_t)n * cols * sizeof(float));
        struct weight_view wc = {.dtype = t, .rows = rows, .cols = cols, .ld = ld};
        struct weight_view wg = wc;
        wc.data = (const char *)dbuf_ptr(tw.c) + off;
        RUN("qembed cpu", kern_embed(cpu_st, dbuf_ptr(ty.c), &wc, dbuf_ptr(ti_.c), n, row0));
        if (gpu_dev) {
            float *nan = test_xmalloc((size_t)n * cols * sizeof(float));
            for (size_t i = 0; i < (size_t)n * cols; i++)
                nan[i] = NAN;
            RUN("qembed fill", kern_to_device(gpu_st, dbuf_ptr(ty.g), nan, (size_t)n * cols * 4));
            free(nan);
            wg.data = (const char *)dbuf_ptr(tw.g) + off;
            RUN("qembed cuda", kern_embed(gpu_st, dbuf_ptr(ty.g), &wg, dbuf_ptr(ti_.g), n, row0));
        }
        twin_download(ty, yc, yg, (size_t)n * cols * sizeof(float));
        CHECK_MSG(memcmp(yc, want, (size_t)n * cols * sizeof(float)) == 0,
                  "embed %s: the CPU's rows differ from dtype_to_f32", dtype_name(t));
        if (gpu_dev)
            CHECK_MSG(memcmp(yc, yg, (size_t)n * cols * sizeof(float)) == 0,
                      "embed %s: the GPU's rows differ from the CPU's", dtype_name(t));
        twin_free(&tw);
        twin_free(&ti_);
        twin_free(&ty);
        free(stored);
        free(yc);
        free(yg);
        free(want);
    }
    printf("embed_quant: %d block types, %s\n", N_QTYPES + N_CTYPES,
           gpu_dev ? "the GPU's rows equal the CPU's" : "the CPU alone (no GPU)");
    if (!gpu_dev && test_failures == 0)
        test_skip(no_gpu);
}

/* ---- layernorm ---- */

TEST(layernorm)
{
    need_gpu();
    static const int widths[] = {1, 67, 768, 2051};
    double worst = 0;
    for (size_t wi = 0; wi < sizeof(widths) / sizeof(widths[0]); wi++)
        for (int affine = 0; affine < 2; affine++)
            for (int inplace = 0; inplace < 2; inplace++) {
                const int m = 5, n = widths[wi];
                const size_t cnt = (size_t)m * n;
                float *x = test_xmalloc(cnt * sizeof(float));
                float *g = test_xmalloc((size_t)n * sizeof(float));
                float *b = test_xmalloc((size_t)n * sizeof(float));
                float *yc = test_xmalloc(cnt * sizeof(float));
                float *yg = test_xmalloc(cnt * sizeof(float));
                fill(x, cnt, 2, 5); /* a mean far from 0: the two passes matter */
                fill(g, (size_t)n, 0.5f, 1.5f);
                fill(b, (size_t)n, -1, 1);
                struct twin tx = twin_upload(x, cnt * sizeof(float));
                struct twin tg = twin_upload(g, (size_t)n * sizeof(float));
                struct twin tb = twin_upload(b, (size_t)n * sizeof(float));
                struct twin ty = inplace ? tx : twin_alloc(cnt * sizeof(float));
                RUN("layernorm cpu", kern_layernorm(cpu_st, dbuf_ptr(ty.c), dbuf_ptr(tx.c), m, n,
                                                    affine ? dbuf_ptr(tg.c) : NULL,
                                                    affine ? dbuf_ptr(tb.c) : NULL, 1e-5f));
                RUN("layernorm cuda", kern_layernorm(gpu_st, dbuf_ptr(ty.g), dbuf_ptr(tx.g), m, n,
                                                     affine ? dbuf_ptr(tg.g) : NULL,
                                                     affine ? dbuf_ptr(tb.g) : NULL, 1e-5f));
                twin_download(ty, yc, yg, cnt * sizeof(float));
                double err = test_rel_err(yg, yc, cnt);
                CHECK_MSG(err <= TOL_F32, "layernorm n=%d affine=%d inplace=%d: rel err %.3g", n,
                          affine, inplace, err);
                worst = err > worst ? err : worst;
                if (!inplace)
                    twin_free(&ty);
                twin_free(&tx);
                twin_free(&tg);
                twin_free(&tb);
                free(x);
                free(g);
                free(b);
                free(yc);
                free(yg);
            }
    printf("layernorm: 16 cases, worst rel err %.3g\n", worst);
}

/* ---- rmsnorm ---- */

TEST(rmsnorm)
{
    need_gpu();
    static const int widths[] = {1, 67, 768, 2051, 4096};
    const int m = 5; /* row i scaled by 10^(i - 3): eps dominates row 0 */
    const float eps = 1e-6f;
    double worst = 0;
    for (size_t wi = 0; wi < sizeof(widths) / sizeof(widths[0]); wi++)
        for (int weighted = 0; weighted < 2; weighted++)
            for (int inplace = 0; inplace < 2; inplace++) {
                const int n = widths[wi];
                const size_t cnt = (size_t)m * n;
                float *x = test_xmalloc(cnt * sizeof(float));
                float *g = test_xmalloc((size_t)n * sizeof(float));
                float *yc = test_xmalloc(cnt * sizeof(float));
                float *yg = test_xmalloc(cnt * sizeof(float));
                fill(x, cnt, -1, 1);
                for (size_t k = 0; k < cnt; k++)
                    x[k] *= powf(10.0f, (float)((int)(k / (size_t)n) - 3));
                fill(g, (size_t)n, 0.5f, 1.5f);
                struct twin tx = twin_upload(x, cnt * sizeof(float));
                struct twin tg = twin_upload(g, (size_t)n * sizeof(float));
                struct twin ty = inplace ? tx : twin_alloc(cnt * sizeof(float));
                RUN("rmsnorm cpu", kern_rmsnorm(cpu_st, dbuf_ptr(ty.c), dbuf_ptr(tx.c), m, n,
                                                weighted ? dbuf_ptr(tg.c) : NULL, eps));
                RUN("rmsnorm cuda", kern_rmsnorm(gpu_st, dbuf_ptr(ty.g), dbuf_ptr(tx.g), m, n,
                                                 weighted ? dbuf_ptr(tg.g) : NULL, eps));
                twin_download(ty, yc, yg, cnt * sizeof(float));
                size_t bad = 0, first = 0;
                for (size_t k = 0; k < cnt; k++) {
                    const double d = fabs((double)yg[k] - yc[k]);
                    if (!(d <= 1e-6 * fabs((double)yc[k])) && !bad++)
                        first = k;
                    if (yc[k] != 0 && d / fabs((double)yc[k]) > worst)
                        worst = d / fabs((double)yc[k]);
                }
                CHECK_MSG(
                    bad == 0,
                    "rmsnorm n=%d weighted=%d inplace=%d: %zu of %zu off, first cpu %g cuda %g", n,
                    weighted, inplace, bad, cnt, yc[first], yg[first]);
                if (!inplace)
                    twin_free(&ty);
                twin_free(&tx);
                twin_free(&tg);
                free(x);
                free(g);
                free(yc);
                free(yg);
            }
    printf("rmsnorm: 20 cases, worst per-element rel err %.3g\n", worst);
}

/* ---- rope ---- */

TEST(rope)
{
    need_gpu();
    static const struct {
        int n, heads, head_dim, rot_dim;
        float scale;
    } cases[] = {
        {7, 8, 64, 64, 1.0f},    /* prefill */
        {1, 32, 128, 128, 1.0f}, /* a decode step of a Llama */
        {3, 28, 128, 128, 1.0f}, /* Qwen2's 28 heads */
        {5, 4, 80, 32, 1.0f},    /* partial rotation: 48 elements per head stay */
        {3, 2, 256, 256, 0.8f},  /* a scale */
    };
    static const int32_t pos_choices[] = {0, 1, 4095, 131071, 500000, 17, 2};
    double worst = 0;
    for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
        const int n = cases[ci].n, heads = cases[ci].heads, hd = cases[ci].head_dim;
        const int rot = cases[ci].rot_dim, half = rot / 2;
        const size_t cnt = (size_t)n * heads * hd;
        float *x = test_xmalloc(cnt * sizeof(float));
        float *inv_freq = test_xmalloc((size_t)half * sizeof(float));
        int32_t *pos = test_xmalloc((size_t)n * sizeof(int32_t));
        float *yc = test_xmalloc(cnt * sizeof(float)), *yg = test_xmalloc(cnt * sizeof(float));
        fill(x, cnt, -2, 2);
        for (int i = 0; i < half; i++) /* Llama's, base 500000 (Llama 3) */
            inv_freq[i] = (float)(1.0 / pow(500000.0, 2.0 * i / rot));
        for (int r = 0; r < n; r++)
            pos[r] = pos_choices[(ci + (size_t)r) % (sizeof(pos_choices) / sizeof(pos_choices[0]))];
        struct twin tx = twin_upload(x, cnt * sizeof(float));
        struct twin tp = twin_upload(pos, (size_t)n * sizeof(int32_t));
        struct twin tf = twin_upload(inv_freq, (size_t)half * sizeof(float));
        RUN("rope cpu", kern_rope(cpu_st, dbuf_ptr(tx.c), n, heads, hd, rot, dbuf_ptr(tp.c),
                                  dbuf_ptr(tf.c), cases[ci].scale));
        RUN("rope cuda", kern_rope(gpu_st, dbuf_ptr(tx.g), n, heads, hd, rot, dbuf_ptr(tp.g),
                                   dbuf_ptr(tf.g), cases[ci].scale));
        twin_download(tx, yc, yg, cnt * sizeof(float));
        double err = test_rel_err(yg, yc, cnt);
        CHECK_MSG(err <= TOL_F32, "rope n=%d heads=%d head_dim=%d rot_dim=%d: rel err %.3g", n,
                  heads, hd, rot, err);
        worst = err > worst ? err : worst;
        size_t moved = 0;
        for (size_t k = 0; k < cnt; k++)
            if ((int)(k % (size_t)hd) >= rot && memcmp(&yg[k], &x[k], sizeof(float)) != 0)
                moved++;
        CHECK_MSG(moved == 0, "rope rot_dim=%d: %zu elements past rot_dim changed on cuda", rot,
                  moved);
        twin_free(&tx);
        twin_free(&tp);
        twin_free(&tf);
        free(x);
        free(inv_freq);
        free(pos);
        free(yc);
        free(yg);
    }
    printf("rope: 5 cases, worst rel err %.3g\n", worst);
}

/* ---- gated activation ---- */

TEST(gated_act)
{
    need_gpu();
    static const enum kern_act acts[] = {KERN_ACT_RELU, KERN_ACT_GELU, KERN_ACT_GELU_TANH,
                                         KERN_ACT_SILU};
    static const char *names[] = {"relu", "gelu", "gelu_tanh", "silu"};
    static const char *aliases[] = {"y apart", "y = gate", "y = up"};
    const size_t n = 100003;
    float *gate = test_xmalloc(n * sizeof(float)), *up = test_xmalloc(n * sizeof(float));
    float *yc = test_xmalloc(n * sizeof(float)), *yg = test_xmalloc(n * sizeof(float));
    for (int a = 0; a < 4; a++)
        for (int alias = 0; alias < 3; alias++) {
            fill(gate, n, -8, 8);
            fill(up, n, -3, 3);
            struct twin tg = twin_upload(gate, n * sizeof(float));
            struct twin tu = twin_upload(up, n * sizeof(float));
            struct twin ty = alias == 0 ? twin_alloc(n * sizeof(float)) : alias == 1 ? tg : tu;
            RUN("gated_act cpu",
                kern_gated_act(cpu_st, dbuf_ptr(ty.c), dbuf_ptr(tg.c), dbuf_ptr(tu.c), n, acts[a]));
            RUN("gated_act cuda",
                kern_gated_act(gpu_st, dbuf_ptr(ty.g), dbuf_ptr(tg.g), dbuf_ptr(tu.g), n, acts[a]));
            twin_download(ty, yc, yg, n * sizeof(float));
            size_t bad = 0, first = 0;
            for (size_t i = 0; i < n; i++)
                if (!(fabs((double)yg[i] - yc[i]) <=
                      1e-5 * fabs((double)yc[i]) + 1e-6 * fabs((double)up[i])) &&
                    !bad++)
                    first = i;
            CHECK_MSG(bad == 0,
                      "gated %s, %s: %zu of %zu elements off, first gate=%g cpu %g cuda %g",
                      names[a], aliases[alias], bad, n, gate[first], yc[first], yg[first]);
            if (alias == 0)
                twin_free(&ty);
            twin_free(&tg);
            twin_free(&tu);
        }
    free(gate);
    free(up);
    free(yc);
    free(yg);
    printf("gated activation (4 x 3 aliasings): within tolerance\n");
}

/* ---- activation, add, scale ---- */

TEST(elementwise)
{
    need_gpu();
    static const enum kern_act acts[] = {KERN_ACT_RELU, KERN_ACT_GELU, KERN_ACT_GELU_TANH,
                                         KERN_ACT_SILU};
    static const char *names[] = {"relu", "gelu", "gelu_tanh", "silu"};
    const size_t n = 100003;
    float *x = test_xmalloc(n * sizeof(float));
    float *x2 = test_xmalloc(n * sizeof(float));
    float *yc = test_xmalloc(n * sizeof(float));
    float *yg = test_xmalloc(n * sizeof(float));
    for (int a = 0; a < 4; a++) {
        fill(x, n, -8, 8);
        struct twin tx = twin_upload(x, n * sizeof(float));
        RUN("activation cpu", kern_activation(cpu_st, dbuf_ptr(tx.c), n, acts[a]));
        RUN("activation cuda", kern_activation(gpu_st, dbuf_ptr(tx.g), n, acts[a]));
        twin_download(tx, yc, yg, n * sizeof(float));
        size_t bad = 0, first = 0;
        for (size_t i = 0; i < n; i++)
            if (!(fabs((double)yg[i] - yc[i]) <= 1e-5 * fabs((double)yc[i]) + 1e-6) && !bad++)
                first = i;
        CHECK_MSG(bad == 0, "%s: %zu of %zu elements off, first x=%g cpu %g cuda %g", names[a], bad,
                  n, x[first], yc[first], yg[first]);
        twin_free(&tx);
    }

    fill(x, n, -4, 4);
    fill(x2, n, -4, 4);
    struct twin ty = twin_upload(x, n * sizeof(float));
    struct twin tx = twin_upload(x2, n * sizeof(float));
    RUN("add cpu", kern_add(cpu_st, dbuf_ptr(ty.c), dbuf_ptr(tx.c), n));
    RUN("add cuda", kern_add(gpu_st, dbuf_ptr(ty.g), dbuf_ptr(tx.g), n));
    twin_download(ty, yc, yg, n * sizeof(float));
    CHECK_MSG(memcmp(yc, yg, n * sizeof(float)) == 0, "add differs");
    RUN("scale cpu", kern_scale(cpu_st, dbuf_ptr(ty.c), n, -0.37f));
    RUN("scale cuda", kern_scale(gpu_st, dbuf_ptr(ty.g), n, -0.37f));
    twin_download(ty, yc, yg, n * sizeof(float));
    CHECK_MSG(memcmp(yc, yg, n * sizeof(float)) == 0, "scale differs");
    /* tanhf may differ by an ulp between the two libraries */
    RUN("softcap cpu", kern_softcap(cpu_st, dbuf_ptr(ty.c), n, 0.9f));
    RUN("softcap cuda", kern_softcap(gpu_st, dbuf_ptr(ty.g), n, 0.9f));
    twin_download(ty, yc, yg, n * sizeof(float));
    CHECK_MSG(test_rel_err(yg, yc, n) <= 1e-6, "softcap differs");
    twin_free(&ty);
    twin_free(&tx);
    free(x);
    free(x2);
    free(yc);
    free(yg);
    printf("activation (4), add, scale: within tolerance / exact\n");
}

/* ---- kv_append + attention ---- */

struct att_state {
    struct kv_geom g;
    size_t cache_n; /* floats of kc (and of vc) */
    struct twin kc, vc, ok;
    uint8_t *key_ok; /* host copy, uploaded whole after each change */
    double worst;
};

static void att_append(struct att_state *a, int pos, int t_new)
{
    const struct kv_geom *g = &a->g;
    const size_t cnt = (size_t)g->batch * t_new * g->kv_heads * g->head_dim;
    float *k = test_xmalloc(cnt * sizeof(float)), *v = test_xmalloc(cnt * sizeof(float));
    fill(k, cnt, -1, 1);
    fill(v, cnt, -1, 1);
    struct twin tk = twin_upload(k, cnt * sizeof(float));
    struct twin tv = twin_upload(v, cnt * sizeof(float));
    RUN("kv_append cpu", kern_kv_append(cpu_st, dbuf_ptr(a->kc.c), dbuf_ptr(a->vc.c),
                                        dbuf_ptr(tk.c), dbuf_ptr(tv.c), g, t_new, pos));
    RUN("kv_append cuda", kern_kv_append(gpu_st, dbuf_ptr(a->kc.g), dbuf_ptr(a->vc.g),
                                         dbuf_ptr(tk.g), dbuf_ptr(tv.g), g, t_new, pos));
    float *cc = test_xmalloc(a->cache_n * sizeof(float)),
          *cg = test_xmalloc(a->cache_n * sizeof(float));
    twin_download(a->kc, cc, cg, a->cache_n * sizeof(float));
    CHECK_MSG(memcmp(cc, cg, a->cache_n * sizeof(float)) == 0, "kv_append k cache differs");
    twin_download(a->vc, cc, cg, a->cache_n * sizeof(float));
    CHECK_MSG(memcmp(cc, cg, a->cache_n * sizeof(float)) == 0, "kv_append v cache differs");
    twin_free(&tk);
    twin_free(&tv);
    free(k);
    free(v);
    free(cc);
    free(cg);
}

/* Attention of t_new queries at positions [past, past + t_new); checks the
 * rows listed blind (queries that see no key) are exactly zero. */
static void att_run(struct att_state *a, int past, int t_new)
{
    const struct kv_geom *g = &a->g;
    const size_t width = (size_t)g->heads * g->head_dim, cnt = (size_t)g->batch * t_new * width;
    RUN("key_ok cpu",
        kern_to_device(cpu_st, dbuf_ptr(a->ok.c), a->key_ok, (size_t)g->batch * g->max_t));
    RUN("key_ok cuda",
        kern_to_device(gpu_st, dbuf_ptr(a->ok.g), a->key_ok, (size_t)g->batch * g->max_t));
    float *q = test_xmalloc(cnt * sizeof(float));
    const float scale = 1.0f / sqrtf((float)g->head_dim);
    fill(q, cnt, -1, 1);
    for (size_t i = 0; i < cnt; i++)
        q[i] *= scale * 4; /* scores of a few units: a peaked softmax */
    struct twin tq = twin_upload(q, cnt * sizeof(float));
    struct twin to = twin_alloc(cnt * sizeof(float));
    const int t_all = past + t_new;
    size_t sc_c = kern_attention_scratch(cpu_dev, g, t_new, t_all);
    size_t sc_g = kern_attention_scratch(gpu_dev, g, t_new, t_all);
    CHECK(sc_g > 0);
    struct dbuf *scr_c = alloc_on(cpu_dev, sc_c * sizeof(float));
    struct dbuf *scr_g = alloc_on(gpu_dev, sc_g * sizeof(float));
    RUN("attention cpu",
        kern_attention(cpu_st, dbuf_ptr(to.c), dbuf_ptr(tq.c), dbuf_ptr(a->kc.c), dbuf_ptr(a->vc.c),
                       dbuf_ptr(a->ok.c), g, past, t_new, dbuf_ptr(scr_c)));
    RUN("attention cuda",
        kern_attention(gpu_st, dbuf_ptr(to.g), dbuf_ptr(tq.g), dbuf_ptr(a->kc.g), dbuf_ptr(a->vc.g),
                       dbuf_ptr(a->ok.g), g, past, t_new, dbuf_ptr(scr_g)));
    float *oc = test_xmalloc(cnt * sizeof(float)), *og = test_xmalloc(cnt * sizeof(float));
    twin_download(to, oc, og, cnt * sizeof(float));
    double err = test_rel_err(og, oc, cnt);
    CHECK_MSG(err <= TOL_F32, "attention heads=%d kv_heads=%d hd=%d past=%d t_new=%d: rel err %.3g",
              g->heads, g->kv_heads, g->head_dim, past, t_new, err);
    a->worst = err > a->worst ? err : a->worst;
    /* a query that sees no key: none of s <= past + t has key_ok */
    int blind = 0;
    for (int b = 0; b < g->batch; b++)
        for (int t = 0; t < t_new; t++) {
            bool any = false;
            for (int s = 0; s <= past + t; s++)
                any |= a->key_ok[(size_t)b * g->max_t + s] != 0;
            if (any)
                continue;
            blind++;
            const float *row = og + ((size_t)b * t_new + t) * width;
            bool zero = true;
            for (size_t i = 0; i < width; i++)
                zero &= row[i] == 0.0f;
            CHECK_MSG(zero, "attention: blind query b=%d t=%d not zero on cuda", b, t);
        }
    if (past == 0)
        CHECK(blind > 0); /* the data do test it */
    device_free(scr_c);
    device_free(scr_g);
    twin_free(&tq);
    twin_free(&to);
    free(q);
    free(oc);
    free(og);
}

/* A prefill of t_pre tokens (past 0) then `steps` decode steps, batch 3:
 * sequence 0 all real tokens, sequence 1 left-padded by `pad` positions
 * (its first queries see nothing; pad > 64 leaves a whole key tile masked),
 * sequence 2 with only position 0 padding (its query 0 sees nothing). */
static void attention_case_with(int heads, int kv_heads, int head_dim, int max_t, int t_pre,
                                int steps, int pad, int window, float softcap)
{
    struct att_state a = {.g = {.batch = 3,
                                .heads = heads,
                                .kv_heads = kv_heads,
                                .head_dim = head_dim,
                                .max_t = max_t,
                                .window = window,
                                .softcap = softcap}};
    const struct kv_geom *g = &a.g;
    a.cache_n = (size_t)g->batch * g->kv_heads * g->max_t * g->head_dim;
    float *init = test_xmalloc(a.cache_n * sizeof(float));
    fill(init, a.cache_n, -1, 1); /* junk where nothing is written yet */
    a.kc = twin_upload(init, a.cache_n * sizeof(float));
    fill(init, a.cache_n, -1, 1);
    a.vc = twin_upload(init, a.cache_n * sizeof(float));
    free(init);
    a.key_ok = calloc((size_t)g->batch * g->max_t, 1);
    if (!a.key_ok)
        exit(1);
    a.ok = twin_alloc((size_t)g->batch * g->max_t);

    for (int s = 0; s < t_pre; s++) {
        a.key_ok[0 * (size_t)max_t + s] = 1;
        a.key_ok[1 * (size_t)max_t + s] = s >= pad;
        a.key_ok[2 * (size_t)max_t + s] = s >= 1;
    }
    att_append(&a, 0, t_pre);
    att_run(&a, 0, t_pre);
    for (int i = 0; i < steps; i++) {
        const int past = t_pre + i;
        for (int b = 0; b < g->batch; b++)
            a.key_ok[(size_t)b * max_t + past] = 1;
        att_append(&a, past, 1);
        att_run(&a, past, 1);
    }
    printf("attention heads=%d kv_heads=%d head_dim=%d window %d softcap %g prefill %d + %d "
           "steps: worst rel err %.3g\n",
           heads, kv_heads, head_dim, window, softcap, t_pre, steps, a.worst);
    twin_free(&a.kc);
    twin_free(&a.vc);
    twin_free(&a.ok);
    free(a.key_ok);
}

static void attention_case(int heads, int kv_heads, int head_dim, int max_t, int t_pre, int steps,
                           int pad)
{
    attention_case_with(heads, kv_heads, head_dim, max_t, t_pre, steps, pad, 0, 0);
}

/* Rings (kv_geom.ring) of window + step - 1 rows over max_t positions:
 * a prefill of `step` positions (longer than the window), then steps of
 * one, three and `step` positions in turn until max_t, so reads and writes
 * wrap the ring's end many times; sequence 1 left-padded by 2. The caches
 * must come out identical, the outputs within the attention tolerance. */
static void attention_ring_case(int heads, int kv_heads, int head_dim, int max_t, int window,
                                int step, float softcap)
{
    struct att_state a = {.g = {.batch = 3,
                                .heads = heads,
                                .kv_heads = kv_heads,
                                .head_dim = head_dim,
                                .max_t = max_t,
                                .window = window,
                                .softcap = softcap,
                                .ring = window + step - 1}};
    const struct kv_geom *g = &a.g;
    a.cache_n = (size_t)g->batch * g->kv_heads * g->ring * g->head_dim;
    float *init = test_xmalloc(a.cache_n * sizeof(float));
    fill(init, a.cache_n, -1, 1);
    a.kc = twin_upload(init, a.cache_n * sizeof(float));
    fill(init, a.cache_n, -1, 1);
    a.vc = twin_upload(init, a.cache_n * sizeof(float));
    free(init);
    a.key_ok = calloc((size_t)g->batch * g->max_t, 1);
    if (!a.key_ok)
        exit(1);
    a.ok = twin_alloc((size_t)g->batch * g->max_t);
    const int sizes[3] = {1, 3, step};
    int past = 0, steps = 0;
    for (int t_new = step; past + t_new <= max_t; t_new = sizes[steps++ % 3]) {
        for (int b = 0; b < g->batch; b++)
            for (int s = past; s < past + t_new; s++)
                a.key_ok[(size_t)b * max_t + s] = b != 1 || s >= 2;
        att_append(&a, past, t_new);
        att_run(&a, past, t_new);
        past += t_new;
    }
    printf("attention heads=%d kv_heads=%d head_dim=%d window %d softcap %g in a ring of %d: "
           "%d steps to %d positions, worst rel err %.3g\n",
           heads, kv_heads, head_dim, window, softcap, g->ring, steps, past, a.worst);
    twin_free(&a.kc);
    twin_free(&a.vc);
    twin_free(&a.ok);
    free(a.key_ok);
}

TEST(attention)
{
    need_gpu();
    /* within a window: shorter than a tile, starting inside one and across
     * one; soft-capped scores; both (Gemma 2's local layers at head_dim 256) */
    attention_case_with(4, 2, 64, 100, 70, 3, 5, 7, 0);
    attention_case_with(4, 4, 64, 160, 130, 3, 66, 80, 0);
    attention_case_with(4, 1, 80, 40, 13, 4, 5, 0, 2.0f);
    attention_case_with(8, 4, 256, 100, 70, 3, 5, 9, 5.0f);
    attention_case(4, 4, 64, 100, 70, 3, 66); /* crosses a 64-key tile */
    attention_case(3, 3, 80, 40, 13, 4, 5);
    attention_case(2, 2, 128, 160, 130, 2, 3);
    attention_case(2, 2, 256, 24, 9, 2, 4);
    attention_case(5, 5, 1, 20, 6, 2, 2); /* head_dim below a warp */
    /* grouped-query: 4 query heads per KV head across a tile, multi-query,
     * and 2 per KV head (the CPU's decode path reads each group at once) */
    attention_case(8, 2, 128, 100, 70, 3, 66);
    attention_case(4, 1, 64, 40, 13, 4, 5);
    attention_case(6, 3, 80, 24, 9, 2, 4);
    /* a windowed layer's ring: grouped decode, a window across a tile,
     * Gemma 2's head_dim 256 soft-capped */
    attention_ring_case(8, 2, 128, 120, 7, 10, 0);
    attention_ring_case(4, 4, 64, 200, 70, 9, 0);
    attention_ring_case(8, 4, 256, 60, 9, 12, 5.0f);
}

/* ---- gather_rows, copy, to_host / to_device ---- */

TEST(moves)
{
    need_gpu();
    const int rows = 20, width = 37;
    static const int32_t idx[] = {3, 0, 19, 3, 7};
    const int n = (int)(sizeof(idx) / sizeof(idx[0]));
    float *x = test_xmalloc((size_t)rows * width * sizeof(float));
    float *yc = test_xmalloc((size_t)n * width * sizeof(float));
    float *yg = test_xmalloc((size_t)n * width * sizeof(float));
    fill(x, (size_t)rows * width, -1, 1);
    struct twin tx = twin_upload(x, (size_t)rows * width * sizeof(float));
    struct twin ti = twin_upload(idx, sizeof(idx));
    struct twin ty = twin_alloc((size_t)n * width * sizeof(float));
    RUN("gather cpu",
        kern_gather_rows(cpu_st, dbuf_ptr(ty.c), dbuf_ptr(tx.c), dbuf_ptr(ti.c), n, width));
    RUN("gather cuda",
        kern_gather_rows(gpu_st, dbuf_ptr(ty.g), dbuf_ptr(tx.g), dbuf_ptr(ti.g), n, width));
    twin_download(ty, yc, yg, (size_t)n * width * sizeof(float));
    CHECK_MSG(memcmp(yc, yg, (size_t)n * width * sizeof(float)) == 0, "gather_rows differs");

    /* combine_rows: each product rounded before the add on both, so bitwise */
    static const int32_t cidx[] = {3, 0, 19, 3, 7, 12}; /* 3 rows of k = 2 */
    const float cw[] = {0.75f, 0.25f, 0.6f, 0.4f, 0.125f, 0.875f};
    struct twin tci = twin_upload(cidx, sizeof(cidx)), tcw = twin_upload(cw, sizeof(cw));
    RUN("combine cpu", kern_combine_rows(cpu_st, dbuf_ptr(ty.c), dbuf_ptr(tx.c), dbuf_ptr(tci.c),
                                         dbuf_ptr(tcw.c), 3, 2, width));
    RUN("combine cuda", kern_combine_rows(gpu_st, dbuf_ptr(ty.g), dbuf_ptr(tx.g), dbuf_ptr(tci.g),
                                          dbuf_ptr(tcw.g), 3, 2, width));
    twin_download(ty, yc, yg, (size_t)3 * width * sizeof(float));
    CHECK_MSG(memcmp(yc, yg, (size_t)3 * width * sizeof(float)) == 0, "combine_rows differs");
    twin_free(&tci);
    twin_free(&tcw);

    /* copy of an odd byte count between odd offsets (x is 2960 bytes) */
    unsigned char *bg = test_xmalloc(1001);
    struct dbuf *dc = alloc_on(gpu_dev, 1024);
    RUN("copy cuda", kern_copy(gpu_st, (char *)dbuf_ptr(dc) + 3, (char *)dbuf_ptr(tx.g) + 5, 1001));
    RUN("copy back", kern_to_host(gpu_st, bg, (char *)dbuf_ptr(dc) + 3, 1001));
    CHECK_MSG(memcmp(bg, (const char *)x + 5, 1001) == 0, "copy differs");
    device_free(dc);
    free(bg);
    twin_free(&tx);
    twin_free(&ti);
    twin_free(&ty);
    free(x);
    free(yc);
    free(yg);

    /* to_device from pinned host memory: the host buffer is overwritten as
     * soon as the call returns, so the copy must be done by then */
    const size_t big = 64 * MiB;
    void *pinned = NULL;
    int rc = device_host_alloc(gpu_dev, big, &pinned);
    CHECK_MSG(rc == 0, "%s", err_msg());
    if (rc == 0) {
        unsigned char *back = test_xmalloc(big);
        memset(pinned, 0x5a, big);
        struct dbuf *d = alloc_on(gpu_dev, big);
        RUN("to_device pinned", kern_to_device(gpu_st, dbuf_ptr(d), pinned, big));
        memset(pinned, 0xa5, big);
        RUN("to_host", kern_to_host(gpu_st, back, dbuf_ptr(d), big));
        size_t bad = 0;
        for (size_t i = 0; i < big; i++)
            bad += back[i] != 0x5a;
        CHECK_MSG(bad == 0, "to_device from pinned memory: %zu bytes changed after return", bad);
        /* and back into pinned memory */
        RUN("to_host pinned", kern_to_host(gpu_st, pinned, dbuf_ptr(d), big));
        CHECK(((unsigned char *)pinned)[0] == 0x5a && ((unsigned char *)pinned)[big - 1] == 0x5a);
        device_free(d);
        free(back);
        device_host_free(gpu_dev, pinned, big);
    }
    printf("gather_rows, combine_rows, copy, to_host/to_device (pinned): exact\n");
}

/* ---- route_topk ---- */

/* kern_route_topk and kern_route_group on both devices from the same logits: the choices, rows,
 * slots and counts exact, the weights within 2e-6 relative (expf of two
 * libms, a few ulps apart, through a sum and two divisions). The logits
 * lie on a grid of 0.05 with many repeats, so two probabilities are either
 * equal on both devices (the same expf of the same input: ties to the
 * lower index on both) or at least 5% apart (the same order on both). */
static void route_case(const char *what, int n, int E, int k, bool norm, int eb, int ee,
                       bool shared, bool masked, bool holes)
{
    const int K = k + shared, group = 3, stride = 11;
    uint8_t have[256]; /* with holes, every seventh expert is not there */
    for (int e = 0; e < 256; e++)
        have[e] = e % 7 != 3;
    float *logits = test_xmalloc((size_t)n * E * sizeof(float));
    float gate[64];
    uint8_t real[(64 / 3 + 1) * 11];
    for (size_t i = 0; i < (size_t)n * E; i++)
        logits[i] = 0.05f * (float)(int)urand(0, (float)(E / 2 + 1)) - 2.0f;
    fill(gate, 64, -3, 3);
    for (size_t i = 0; i < sizeof(real); i++)
        real[i] = urand(0, 1) < 0.7f;
    /* the outputs in one buffer: choice, rows, slots, counts (int32), then
     * choice_w and slot_w (f32) */
    const size_t ni = (size_t)n * k * 2 + (size_t)n * K + 2 * (size_t)E,
                 nf = (size_t)n * k + (size_t)n * K;
    int32_t *ic = test_xmalloc(ni * 4), *ig = test_xmalloc(ni * 4);
    float *fc = test_xmalloc(nf * 4), *fg = test_xmalloc(nf * 4);
    struct twin tl = twin_upload(logits, (size_t)n * E * sizeof(float));
    struct twin tg = twin_upload(gate, sizeof(gate)), tr = twin_upload(real, sizeof(real));
    struct twin ti = twin_alloc(ni * 4), tf = twin_alloc(nf * 4);
    for (int dev = 0; dev < 2; dev++) {
        struct stream *s = dev ? gpu_st : cpu_st;
        int32_t *i0 = dbuf_ptr(dev ? ti.g : ti.c);
        float *f0 = dbuf_ptr(dev ? tf.g : tf.c);
        const struct kern_route r = {.n = n,
                                     .n_experts = E,
                                     .top_k = k,
                                     .norm = norm,
                                     .expert_begin = eb,
                                     .expert_end = ee,
                                     .slot_stride = K,
                                     .have = holes ? have : NULL,
                                     .shared_gate = shared ? dbuf_ptr(dev ? tg.g : tg.c) : NULL,
                                     .real = masked ? dbuf_ptr(dev ? tr.g : tr.c) : NULL,
                                     .real_group = group,
                                     .real_stride = stride};
        const struct kern_route_out o = {.choice = i0,
                                         .rows = i0 + (size_t)n * k,
                                         .slots = i0 + 2 * (size_t)n * k,
                                         .counts = i0 + 2 * (size_t)n * k + (size_t)n * K,
                                         .choice_w = f0,
                                         .slot_w = f0 + (size_t)n * k};
        RUN(dev ? "route_topk cuda" : "route_topk cpu",
            kern_route_topk(s, dbuf_ptr(dev ? tl.g : tl.c), &r, &o));
        RUN(dev ? "route_group cuda" : "route_group cpu", kern_route_group(s, &r, &o));
    }
    twin_download(ti, ic, ig, ni * 4);
    twin_download(tf, fc, fg, nf * 4);
    CHECK_MSG(memcmp(ic, ig, ni * 4) == 0, "route_topk %s: choices, rows, slots or counts differ",
              what);
    double worst = 0;
    for (size_t i = 0; i < nf; i++) {
        const double d = fabs((double)fg[i] - fc[i]) / (fabs(fc[i]) > 0 ? fabs(fc[i]) : 1);
        worst = d > worst ? d : worst;
    }
    CHECK_MSG(worst <= 2e-6, "route_topk %s: weights differ by %.3g relative", what, worst);
    twin_free(&tl);
    twin_free(&tg);
    twin_free(&tr);
    twin_free(&ti);
    twin_free(&tf);
    free(logits);
    free(ic);
    free(ig);
    free(fc);
    free(fg);
}

TEST(route_topk)
{
    need_gpu();
    route_case("mixtral", 5, 8, 2, true, 0, 8, false, false, false);
    route_case("qwen3-moe", 7, 128, 8, false, 0, 128, false, true, false);
    route_case("shared, experts 15-29", 9, 60, 4, false, 15, 30, true, true, false);
    route_case("256 experts, top 16", 3, 256, 16, true, 0, 256, false, false, false);
    route_case("one token", 1, 64, 6, true, 0, 64, false, false, false);
    route_case("64 tokens over several blocks", 64, 16, 4, true, 3, 16, true, true, false);
    route_case("experts missing", 40, 128, 8, true, 0, 128, false, true, true);
    printf("route_topk: choices, rows, slots and counts exact, weights within 2e-6\n");
}

/* Every buffer a case made is freed by the end of the run; then the
 * devices close. A leak fails the run. */
static void close_devices(void)
{
    int before = test_failures;
    CHECK(device_used(cpu_dev) == 0 && (!gpu_dev || device_used(gpu_dev) == 0)); /* all freed */
    device_stream_destroy(gpu_st);
    device_stream_destroy(cpu_st);
    device_close(gpu_dev);
    device_close(cpu_dev);
    if (test_failures > before)
        _exit(1);
}

/* A GPU and a CPU device, each with a stream. No GPU: a case that needs
 * one skips (need_gpu), the quantized ones after checking their CPU half. */
static void setup(void)
{
    int rc = device_open_cuda(0, 0, 512 * MiB, &gpu_dev);
    if (rc != ERR_OK) {
        snprintf(no_gpu, sizeof(no_gpu), "%s", err_msg());
        printf("no GPU: %s\n", no_gpu);
        gpu_dev = NULL;
    }
    rc = device_open_cpu(0, 256 * MiB, &cpu_dev);
    CHECK_MSG(rc == ERR_OK, "%s", err_msg());
    if (rc != ERR_OK) {
        device_close(gpu_dev);
        exit(test_finish());
    }
    rc = device_stream_create(cpu_dev, &cpu_st);
    CHECK_MSG(rc == ERR_OK, "%s", err_msg());
    if (rc == ERR_OK && gpu_dev) {
        rc = device_stream_create(gpu_dev, &gpu_st);
        CHECK_MSG(rc == ERR_OK, "%s", err_msg());
    }
    if (rc != ERR_OK) {
        device_stream_destroy(cpu_st);
        device_close(cpu_dev);
        device_close(gpu_dev);
        exit(test_finish());
    }
    device_compute_thread_init(cpu_dev);
    if (gpu_dev)
        device_compute_thread_init(gpu_dev);
    rng_seed(&rng, 12, 0);
    atexit(close_devices);
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, setup);
}
