/* kern_lora on the CPU backend (backend/kernels.h: the segmented low-rank
 * update of LoRA adapters).
 *
 * - reference: every weight type (f32, f16, bf16) in both precisions,
 *   ranks 1-100, against a double-precision reference computing what
 *   kernels.h states (bf16 mode: x and the rank-r intermediate t rounded to
 *   bf16, the reference rounding its own t). Per output o of row i the
 *   error must stay within
 *     E * (|y0| + |s u| + |s| sum_j |b_oj| (T_j + |t_j|)) + R * |s| sum_j |b_oj| |t_j|
 *   with T_j = sum_k |x_k a_jk|, s the scale, u the exact update, E = 1e-6
 *   (f32 sums of a few hundred terms in 16 lanes: ~20 roundings of 2^-24
 *   each; measured 0.01-0.05 of the bound) and R = 2^-7 in bf16 mode (t may round to the
 * neighbouring bf16 where the f32 sum and the exact one straddle a rounding boundary), 0 in f32
 * mode. Rows outside the segments and rows of a pair without weights stay bit for bit.
 * - alone: every row of a batch (m = 1..17, its rank 1..64, the other rows
 *   over other adapters of other ranks and types, base rows, an empty
 *   segment) is bitwise what the row gets in a call of its own, with each
 *   row kernel the CPU runs (avx512, scalar); and batches large enough to
 *   run over the pool (ranks 1-130, several output ranges per row) against
 *   rows small enough to run alone.
 * - peft: one Linear with an adapter as the `peft` package runs it
 *   (tests/fixtures/lora_kernel, tools/make_lora_kernel_fixture.py): f32,
 *   rsLoRA and bf16 (tolerances at peft_case).
 * - refused: a device without the kernel answers ERR_UNSUPPORTED naming it;
 *   a call with no weights adds nothing; arguments that break the contract
 *   (shapes, segments, types) abort in the wrapper.
 */
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/cpu/cpu.h"
#include "backend/cpu/cpu_impl.h"
#include "backend/device.h"
#include "backend/device_impl.h"
#include "backend/kernels.h"
#include "backend/kernels_impl.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/rng.h"
#include "format/safetensors.h"
#include "test.h"

#define MiB ((uint64_t)1 << 20)
#define TOL_E 1e-6
#define TOL_R (1.0 / 128)

static struct device *dev;
static struct stream *st;
static struct rng rng;

static float urand(float lo, float hi)
{
    return lo + (hi - lo) * (float)rng_uniform(&rng);
}

/* One adapter's pair for one layer: the stored weights and their exact
 * values in f32 (for the reference). */
struct adapter {
    struct lora_pair pair;
    void *a, *b;
    float *af, *bf; /* (r, lda), (out, r) */
};

static void adapter_make(struct adapter *ad, enum dtype dt, int r, int in, int out, size_t lda)
{
    const size_t na = (size_t)r * lda, nb = (size_t)out * r, es = dtype_size(dt);
    ad->af = test_xmalloc(na * sizeof(float));
    ad->bf = test_xmalloc(nb * sizeof(float));
    ad->a = test_xmalloc(na * es);
    ad->b = test_xmalloc(nb * es);
    for (size_t i = 0; i < na; i++)
        ad->af[i] = urand(-1, 1);
    for (size_t i = 0; i < nb; i++)
        ad->bf[i] = urand(-1, 1);
    dtype_from_f32(dt, ad->af, ad->a, na);
    dtype_from_f32(dt, ad->bf, ad->b, nb);
    dtype_to_f32(dt, ad->a, ad->af, na);
    dtype_to_f32(dt, ad->b, ad->bf, nb);
    ad->pair = (struct lora_pair){
        .a = {.dtype = dt, .data = ad->a, .rows = r, .cols = in, .ld = lda},
        .b = {.dtype = dt, .data = ad->b, .rows = out, .cols = r, .ld = (size_t)r},
        .scale = urand(0.25f, 4.0f),
    };
}

static void adapter_free(struct adapter *ad)
{
    free(ad->a);
    free(ad->b);
    free(ad->af);
    free(ad->bf);
}

static const struct lora_pair no_pair; /* a base row: no weights */

/* kern_lora with a scratch of the size kern_lora_scratch asks. */
static int lora_call(float *y, const float *x, int m, int nseg, const int *seg,
                     const struct lora_pair *pairs, enum kern_compute c)
{
    int max_r = 0;
    for (int s = 0; s < nseg; s++)
        if (pairs[s].a.data && pairs[s].a.rows > max_r)
            max_r = pairs[s].a.rows;
    float *scratch = test_xmalloc(kern_lora_scratch(m, max_r) * sizeof(float));
    int rc = kern_lora(st, y, x, m, nseg, seg, pairs, c, scratch);
    free(scratch);
    return rc;
}

/* ---- against the double reference ---- */

static double worst[2]; /* error / bound, by precision */

/* Row x (in) through adapter ad into the reference update of each output,
 * and each output's bound. */
static void reference_row(const struct adapter *ad, const float *x, int in, int out,
                          enum kern_compute c, const float *y0row, double *ref, double *bound)
{
    const struct lora_pair *p = &ad->pair;
    const int r = p->a.rows;
    double t[256], tabs[256];
    for (int j = 0; j < r; j++) {
        double s = 0, sa = 0;
        for (int k = 0; k < in; k++) {
            double xv = c == KERN_COMPUTE_BF16 ? bf16_round(x[k]) : x[k];
            double v = xv * ad->af[(size_t)j * p->a.ld + k];
            s += v;
            sa += fabs(v);
        }
        t[j] = c == KERN_COMPUTE_BF16 ? bf16_round((float)s) : s;
        tabs[j] = sa;
    }
    for (int o = 0; o < out; o++) {
        double u = 0, ub = 0, rb = 0;
        for (int j = 0; j < r; j++) {
            double b = ad->bf[(size_t)o * r + j];
            u += t[j] * b;
            ub += fabs(b) * (tabs[j] + fabs(t[j]));
            rb += fabs(b) * fabs(t[j]);
        }
        const double s = p->scale;
        ref[o] = y0row[o] + s * u;
        bound[o] = TOL_E * (fabs(y0row[o]) + fabs(s * u) + fabs(s) * ub) +
                   (c == KERN_COMPUTE_BF16 ? TOL_R * fabs(s) * rb : 0);
    }
}

static void reference_case(enum dtype dt, enum kern_compute c, int r, int in, int out)
{
    /* rows: 0 outside, [1, 3) adapter 0, 3 base, [4, 4) empty, [4, 8)
     * adapter 1 (another rank, its A a column slice), [8, 10) adapter 0
     * again, 10 outside */
    enum { M = 11, NSEG = 5 };
    struct adapter ad[2];
    adapter_make(&ad[0], dt, r, in, out, (size_t)in);
    adapter_make(&ad[1], dt, r % 64 + 1, in, out, (size_t)in + 3);
    const int seg[NSEG + 1] = {1, 3, 4, 4, 8, 10};
    const struct lora_pair pairs[NSEG] = {ad[0].pair, no_pair, ad[1].pair, ad[1].pair, ad[0].pair};
    const int which[M] = {-1, 0, 0, -1, 1, 1, 1, 1, 0, 0, -1};
    float *x = test_xmalloc((size_t)M * in * sizeof(float));
    float *y0 = test_xmalloc((size_t)M * out * sizeof(float));
    float *y = test_xmalloc((size_t)M * out * sizeof(float));
    double *ref = test_xmalloc((size_t)out * sizeof(double));
    double *bound = test_xmalloc((size_t)out * sizeof(double));
    for (int i = 0; i < M * in; i++)
        x[i] = urand(-2, 2);
    for (int i = 0; i < M * out; i++)
        y0[i] = urand(-1, 1);
    memcpy(y, y0, (size_t)M * out * sizeof(float));
    int rc = lora_call(y, x, M, NSEG, seg, pairs, c);
    CHECK_MSG(rc == 0, "%s", err_msg());
    for (int i = 0; i < M; i++) {
        const float *yi = y + (size_t)i * out, *y0i = y0 + (size_t)i * out;
        if (which[i] < 0) {
            CHECK_MSG(memcmp(yi, y0i, (size_t)out * sizeof(float)) == 0,
                      "row %d without an adapter changed", i);
            continue;
        }
        reference_row(&ad[which[i]], x + (size_t)i * in, in, out, c, y0i, ref, bound);
        for (int o = 0; o < out; o++) {
            double e = fabs(yi[o] - ref[o]) / bound[o];
            if (e > worst[c])
                worst[c] = e;
            if (!(e <= 1)) {
                CHECK_MSG(false,
                          "%s %s r=%d %dx%d row %d out %d: %.9g, reference %.9g (bound %.3g)",
                          dtype_name(dt), kern_compute_name(c), r, in, out, i, o, yi[o], ref[o],
                          bound[o]);
                goto done;
            }
        }
    }
done:
    adapter_free(&ad[0]);
    adapter_free(&ad[1]);
    free(x);
    free(y0);
    free(y);
    free(ref);
    free(bound);
}

static const enum dtype types[3] = {DTYPE_F32, DTYPE_F16, DTYPE_BF16};

/* Each row kernel the CPU has: fn runs under each. */
static void each_kernel(void (*fn)(const char *name))
{
    static const char *const names[2] = {"avx512", "scalar"};
    for (int i = 0; i < 2; i++) {
        if (cpu_lora_force(names[i]) != 0) {
            printf("this CPU has no %s LoRA kernel: not run\n", names[i]);
            continue;
        }
        fn(names[i]);
    }
    CHECK(cpu_lora_force(NULL) == 0);
}

static void reference_all(const char *name)
{
    static const int ranks[] = {1, 5, 16, 33, 64, 100};
    static const int shapes[][2] = {{40, 24}, {300, 1100}, {64, 17}};
    worst[0] = worst[1] = 0;
    for (int t = 0; t < 3; t++)
        for (int c = 0; c < 2; c++)
            for (size_t r = 0; r < sizeof(ranks) / sizeof(ranks[0]); r++)
                for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
                    reference_case(types[t], (enum kern_compute)c, ranks[r], shapes[s][0],
                                   shapes[s][1]);
    printf("%s: worst error / bound: f32 %.3g, bf16 %.3g\n", name, worst[0], worst[1]);
}

TEST(reference)
{
    each_kernel(reference_all);
}

/* ---- a row alone and in a batch ---- */

#define POOL_ADAPTERS 6

/* Every row of a batch of m rows (the row under test over an adapter of
 * rank r and type dt, the others over the pool's adapters or none) against
 * the same row in a call of its own. */
static void alone_case(int m, struct adapter *mine, struct adapter *pool, enum kern_compute c,
                       int in, int out)
{
    int seg[40], nseg = 0;
    struct lora_pair pairs[40];
    int owner[17]; /* each row's segment */
    seg[0] = 0;
    int i = 0, me = (int)(rng_u64(&rng) % (uint64_t)m);
    while (i < m) {
        /* the row under test alone in its segment, or sharing it */
        int len = 1 + (int)(rng_u64(&rng) % 4);
        if (i + len > m)
            len = m - i;
        bool has_me = me >= i && me < i + len;
        int pick = (int)(rng_u64(&rng) % (POOL_ADAPTERS + 1));
        pairs[nseg] = has_me ? mine->pair : pick == POOL_ADAPTERS ? no_pair : pool[pick].pair;
        for (int k = i; k < i + len; k++)
            owner[k] = nseg;
        i += len;
        seg[++nseg] = i;
        if (rng_u64(&rng) % 5 == 0) { /* an empty segment */
            pairs[nseg] = pool[0].pair;
            seg[++nseg] = i;
        }
    }
    float *x = test_xmalloc((size_t)m * in * sizeof(float));
    float *y0 = test_xmalloc((size_t)m * out * sizeof(float));
    float *y = test_xmalloc((size_t)m * out * sizeof(float));
    float *y1 = test_xmalloc((size_t)out * sizeof(float));
    for (int k = 0; k < m * in; k++)
        x[k] = urand(-2, 2);
    for (int k = 0; k < m * out; k++)
        y0[k] = urand(-1, 1);
    memcpy(y, y0, (size_t)m * out * sizeof(float));
    int rc = lora_call(y, x, m, nseg, seg, pairs, c);
    CHECK_MSG(rc == 0, "%s", err_msg());
    for (int k = 0; k < m; k++) {
        const int one[2] = {0, 1};
        memcpy(y1, y0 + (size_t)k * out, (size_t)out * sizeof(float));
        rc = lora_call(y1, x + (size_t)k * in, 1, 1, one, &pairs[owner[k]], c);
        CHECK_MSG(rc == 0, "%s", err_msg());
        if (memcmp(y1, y + (size_t)k * out, (size_t)out * sizeof(float)) != 0) {
            CHECK_MSG(false, "m=%d r=%d %s %s: row %d differs alone (segment %d of %d)", m,
                      mine->pair.a.rows, dtype_name(mine->pair.a.dtype), kern_compute_name(c), k,
                      owner[k], nseg);
            break;
        }
    }
    free(x);
    free(y0);
    free(y);
    free(y1);
}

static void alone_small(const char *name)
{
    enum { IN = 72, OUT = 40 };
    int cases = 0;
    for (int t = 0; t < 3; t++) {
        struct adapter pool[POOL_ADAPTERS];
        for (int p = 0; p < POOL_ADAPTERS; p++)
            adapter_make(&pool[p], types[(t + p) % 3], 1 + (int)(rng_u64(&rng) % 64), IN, OUT,
                         (size_t)IN + (size_t)(p % 2));
        for (int r = 1; r <= 64; r++) {
            struct adapter mine;
            adapter_make(&mine, types[t], r, IN, OUT, (size_t)IN);
            for (int m = 1; m <= 17; m++)
                for (int c = 0; c < 2; c++, cases++)
                    alone_case(m, &mine, pool, (enum kern_compute)c, IN, OUT);
            adapter_free(&mine);
        }
        for (int p = 0; p < POOL_ADAPTERS; p++)
            adapter_free(&pool[p]);
    }
    printf("%s: %d batches, every row as alone\n", name, cases);
}

TEST(alone)
{
    each_kernel(alone_small);
}

/* Batches that run over the pool (several output ranges per row), rows
 * that run alone on the calling thread. */
static void alone_large(const char *name)
{
    enum { IN = 300, OUT = 2100 };
    static const int ranks[] = {1, 16, 64, 130};
    for (int t = 0; t < 3; t++) {
        struct adapter pool[POOL_ADAPTERS];
        for (int p = 0; p < POOL_ADAPTERS; p++)
            adapter_make(&pool[p], types[(t + p) % 3], 1 + (int)(rng_u64(&rng) % 64), IN, OUT,
                         (size_t)IN);
        for (size_t r = 0; r < sizeof(ranks) / sizeof(ranks[0]); r++) {
            struct adapter mine;
            adapter_make(&mine, types[t], ranks[r], IN, OUT, (size_t)IN);
            for (int c = 0; c < 2; c++) {
                alone_case(17, &mine, pool, (enum kern_compute)c, IN, OUT);
                alone_case(9, &mine, pool, (enum kern_compute)c, IN, OUT);
            }
            adapter_free(&mine);
        }
        for (int p = 0; p < POOL_ADAPTERS; p++)
            adapter_free(&pool[p]);
    }
    printf("%s: large batches as alone\n", name);
}

TEST(alone_pool)
{
    each_kernel(alone_large);
}

/* ---- against PEFT ---- */

/* A tensor of the fixture copied out (the mapping need not be aligned for
 * its type); NULL when missing. */
static void *tensor_copy(const struct st_checkpoint *ck, const char *name,
                         const struct st_tensor **t)
{
    *t = st_find(ck, name);
    CHECK_MSG(*t, "fixture lacks tensor %s", name);
    if (!*t)
        return NULL;
    void *p = test_xmalloc((*t)->nbytes);
    memcpy(p, (*t)->data, (*t)->nbytes);
    return p;
}

/* PEFT's LoRA layer on one Linear (tools/make_lora_kernel_fixture.py):
 * kern_lora added to PEFT's base output gives PEFT's output, within 1e-5
 * of its update's largest magnitude in f32 mode (torch's f32 sums in
 * another order), and within 2^-7 of the output's largest magnitude in
 * bf16 mode (PEFT also rounds lora_B's output, its product with scaling
 * and the sum to bf16, which kern_lora keeps in f32). The fixtures' A and
 * B are as PEFT stores them, the scale PEFT's scaling. */
static void peft_case(const char *name, enum kern_compute c, double tol)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/tests/fixtures/lora_kernel/%s.safetensors",
             SHARDSWAP_SOURCE_DIR, name);
    struct st_checkpoint *ck = NULL;
    int rc = st_open(path, &ck);
    CHECK_MSG(rc == 0, "%s", err_msg());
    if (rc != 0)
        return;
    const struct st_tensor *tx, *ta, *tb, *ts, *tbase, *texp;
    float *x = tensor_copy(ck, "x", &tx), *scale = tensor_copy(ck, "scale", &ts);
    void *a = tensor_copy(ck, "a", &ta), *b = tensor_copy(ck, "b", &tb);
    float *y = tensor_copy(ck, "base", &tbase), *want = tensor_copy(ck, "expect", &texp);
    if (x && scale && a && b && y && want) {
        const int m = (int)tx->shape[0], in = (int)tx->shape[1];
        const int r = (int)ta->shape[0], out = (int)tb->shape[0];
        CHECK(ta->shape[1] == in && tb->shape[1] == r && tbase->shape[1] == out);
        const struct lora_pair p = {
            .a = {.dtype = ta->dtype, .data = a, .rows = r, .cols = in, .ld = (size_t)in},
            .b = {.dtype = tb->dtype, .data = b, .rows = out, .cols = r, .ld = (size_t)r},
            .scale = scale[0],
        };
        const int seg[2] = {0, m};
        float *base = test_xmalloc((size_t)m * out * sizeof(float));
        memcpy(base, y, (size_t)m * out * sizeof(float));
        rc = lora_call(y, x, m, 1, seg, &p, c);
        CHECK_MSG(rc == 0, "%s", err_msg());
        double err;
        if (c == KERN_COMPUTE_F32) {
            for (int i = 0; i < m * out; i++) {
                y[i] -= base[i];
                want[i] -= base[i];
            }
        }
        err = test_rel_err(y, want, (size_t)m * out);
        printf("%s (%s, r %d, scale %g): rel err %.3g\n", name, dtype_name(ta->dtype), r,
               (double)scale[0], err);
        CHECK_MSG(err <= tol, "%s: rel err %.3g > %.0e", name, err, tol);
        free(base);
    }
    free(x);
    free(scale);
    free(a);
    free(b);
    free(y);
    free(want);
    st_close(ck);
}

TEST(peft)
{
    peft_case("f32", KERN_COMPUTE_F32, 1e-5);
    peft_case("rslora", KERN_COMPUTE_F32, 1e-5);
    peft_case("bf16", KERN_COMPUTE_BF16, 1.0 / 128);
}

/* ---- refusals ---- */

/* Whether fn(arg) aborts (an assert of the wrapper), in a child. */
static bool aborts(void (*fn)(int), int arg)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0)
            dup2(devnull, 2);
        fn(arg);
        _exit(0);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid)
        return false;
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
}

/* Calls breaking the contract, one per `what`; what < 0: a valid call. */
static void bad_call(int what)
{
    enum { M = 4, IN = 32, OUT = 16, R = 4 };
    static float x[M * IN], y[M * OUT], a[R * IN], a2[R * (IN + 16)], b[OUT * R], scratch[M * R];
    struct lora_pair p = {
        .a = {.dtype = DTYPE_F32, .data = a, .rows = R, .cols = IN, .ld = IN},
        .b = {.dtype = DTYPE_F32, .data = b, .rows = OUT, .cols = R, .ld = R},
        .scale = 1,
    };
    struct lora_pair q = p;
    int seg[3] = {0, 2, 4};
    const float *xp = x;
    int m = M;
    switch (what) {
    case 0: /* b's columns are not a's rank */
        p.b.cols = R - 1;
        break;
    case 1: /* segments out of order */
        seg[1] = 3, seg[2] = 2;
        break;
    case 2: /* past the rows */
        m = 3;
        break;
    case 3: /* a segment before row 0 */
        seg[0] = -1;
        break;
    case 4: /* pairs of different input widths */
        q.a.data = a2, q.a.cols = IN + 16, q.a.ld = IN + 16;
        break;
    case 5: /* pairs of different output widths */
        q.b.rows = OUT - 1;
        break;
    case 6: /* a block type */
        p.a.dtype = DTYPE_Q8_0;
        break;
    case 7: /* y is x */
        xp = y;
        break;
    case 8: /* a row stride short of the row */
        p.a.ld = IN - 1;
        break;
    case 9: /* no b */
        p.b.data = NULL;
        break;
    }
    const struct lora_pair pairs[2] = {p, q};
    (void)kern_lora(st, y, xp, m, 2, seg, pairs, KERN_COMPUTE_F32, scratch);
}

TEST(refused)
{
    /* the contract's breaches abort; the same call without one runs */
    CHECK(!aborts(bad_call, -1));
    for (int what = 0; what <= 9; what++)
        CHECK_MSG(aborts(bad_call, what), "bad call %d did not abort", what);

    /* a device without the kernel */
    enum { IN = 8, OUT = 8 };
    float x[IN] = {1}, y[OUT] = {0}, a[IN] = {1}, b[OUT], scratch[1];
    for (int o = 0; o < OUT; o++)
        b[o] = 1;
    struct lora_pair p = {
        .a = {.dtype = DTYPE_F32, .data = a, .rows = 1, .cols = IN, .ld = IN},
        .b = {.dtype = DTYPE_F32, .data = b, .rows = OUT, .cols = 1, .ld = 1},
        .scale = 2,
    };
    const int seg[2] = {0, 1};
    struct kernel_ops t = cpu_kernel_ops;
    t.lora = NULL;
    const struct kernel_ops *was = dev->kern;
    dev->kern = &t;
    CHECK(!kern_supports(dev, KERN_OP_LORA));
    CHECK(kern_lora(st, y, x, 1, 1, seg, &p, KERN_COMPUTE_F32, scratch) == ERR_UNSUPPORTED);
    CHECK_MSG(strcmp(err_msg(), "device cpu:0 has no lora kernel") == 0, "%s", err_msg());
    t.lora = cpu_kernel_ops.lora;
    t.lacks = KERN_OP_BIT(KERN_OP_LORA);
    CHECK(kern_lora(st, y, x, 1, 1, seg, &p, KERN_COMPUTE_F32, scratch) == ERR_UNSUPPORTED);
    CHECK(kern_check(dev, KERN_OP_BIT(KERN_OP_LORA), 0) == ERR_UNSUPPORTED);
    dev->kern = was;
    CHECK(y[0] == 0);
    /* base rows only: nothing added; then the pair adds 2 * 1 * 1 */
    const struct lora_pair none = {0};
    CHECK(kern_lora(st, y, x, 1, 1, seg, &none, KERN_COMPUTE_F32, NULL) == 0 && y[0] == 0);
    CHECK(kern_lora(st, y, x, 1, 0, seg, NULL, KERN_COMPUTE_F32, NULL) == 0 && y[0] == 0);
    CHECK(kern_lora(st, y, x, 1, 1, seg, &p, KERN_COMPUTE_F32, scratch) == 0);
    CHECK(y[0] == 2 && y[OUT - 1] == 2);
    CHECK(kern_lora_scratch(8, 16) == 128 && kern_lora_scratch(0, 16) == 0);
}

static void close_device(void)
{
    device_stream_destroy(st);
    device_close(dev);
}

static void setup(void)
{
    int rc = device_open_cpu(0, 16 * MiB, &dev);
    CHECK_MSG(rc == 0, "%s", err_msg());
    rc = rc == 0 ? device_stream_create(dev, &st) : rc;
    CHECK_MSG(rc == 0, "%s", err_msg());
    if (rc != 0)
        exit(test_finish());
    device_compute_thread_init(dev);
    rng_seed(&rng, 40, 0);
    printf("LoRA row kernel: %s\n", cpu_lora_kernel());
    atexit(close_device);
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, setup);
}
