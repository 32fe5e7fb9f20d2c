/* The CPU backend's kernels (backend/cpu/kernels.h) other than the two
 * halves of the linear layer (gemv.c, matmul.c). */
#include "backend/cpu/kernels.h"

#include "backend/cpu/attn_vec.h"
#include "backend/cpu/ctlinear.h"
#include "backend/cpu/linear.h"
#include "backend/cpu/pool.h"
#include "backend/cpu/qlinear.h"
#include "backend/cpu/scratch.h"
#include "backend/cpu/vec.h"
#include "core/error.h"

#include <assert.h>
#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static _Thread_local bool kernels_alone;

void cpu_kernels_single_thread(bool alone)
{
    kernels_alone = alone;
}

bool cpu_kernels_alone(void)
{
    return kernels_alone;
}

/* OpenBLAS runs on the thread that calls it: the kernels split their work
 * over the pool themselves (its own threads would spin beside the pool's). */
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;

static void blas_one_thread(void)
{
    openblas_set_num_threads(1);
}

/* pool_run, or the tasks in order on this thread when it computes alone. */
void cpu_kernels_run(pool_task_fn fn, void *ctx, int n_tasks)
{
    pthread_once(&blas_once, blas_one_thread);
    if (!kernels_alone) {
        pool_run(fn, ctx, n_tasks);
        return;
    }
    for (int i = 0; i < n_tasks; i++)
        fn(ctx, i);
}

/* Row-wise and elementwise kernels split over the pool: worth the dispatch
 * (microseconds) for a prefill's activations, not for a decode step's
 * rows, which stay on the calling thread. Every unit (row or element) is
 * computed exactly as on one thread, so the split changes no bit. */
#define SPLIT_MIN_ELEMS (1u << 16)
#define SPLIT_TASK_ELEMS (1u << 14)

typedef void (*split_fn)(const void *ctx, size_t u0, size_t u1);

struct split_job {
    split_fn fn;
    const void *ctx;
    size_t units, per; /* units in all, per task */
};

static void split_task(void *ctx, int task)
{
    const struct split_job *j = ctx;
    size_t u0 = (size_t)task * j->per, u1 = u0 + j->per < j->units ? u0 + j->per : j->units;
    j->fn(j->ctx, u0, u1);
}

/* fn(ctx, u0, u1) over [0, units), `per` units a pool task */
static void split_over(size_t units, size_t per, split_fn fn, const void *ctx)
{
    struct split_job j = {.fn = fn, .ctx = ctx, .units = units, .per = per};
    cpu_kernels_run(split_task, &j, (int)((units + per - 1) / per));
}

/* fn(ctx, u0, u1) over [0, units), units of unit_elems elements each. */
static void split_run(size_t units, size_t unit_elems, split_fn fn, const void *ctx)
{
    if (units < 2 || units * unit_elems < SPLIT_MIN_ELEMS) {
        fn(ctx, 0, units);
        return;
    }
    split_over(units, unit_elems >= SPLIT_TASK_ELEMS ? 1 : SPLIT_TASK_ELEMS / unit_elems, fn, ctx);
}

/* The activations' exponentials cost 10-20x an add an element: a decode
 * batch's gate/up rows (8 x 4864 elements, 20 us on one thread) are worth
 * one task a thread, in whole 64-byte vectors, from this many elements;
 * from SPLIT_MIN_ELEMS on they split as the rest. */
#define SPLIT_ACT_MIN_ELEMS (1u << 13)

static void split_run_act(size_t n, split_fn fn, const void *ctx)
{
    const size_t threads = (size_t)cpu_threads();
    if (n < SPLIT_ACT_MIN_ELEMS || n >= SPLIT_MIN_ELEMS || threads < 2) {
        split_run(n, 1, fn, ctx);
        return;
    }
    split_over(n, ((n + threads - 1) / threads + 15) / 16 * 16, fn, ctx);
}

const float *cpu_round_bf16(const float *x, size_t n)
{
    float *round_buf = cpu_scratch(CPU_SCRATCH_ROUND, n * sizeof(float));
    if (!round_buf)
        return NULL;
    vec_round_bf16(round_buf, x, n);
    return round_buf;
}

struct add_args {
    float *y;
    const float *x;
};

static void add_range(const void *ctx, size_t i0, size_t i1)
{
    const struct add_args *a = ctx;
    for (size_t i = i0; i < i1; i++)
        a->y[i] += a->x[i];
}

struct scale_args {
    float *x;
    float a;
};

static void scale_range(const void *ctx, size_t i0, size_t i1)
{
    const struct scale_args *a = ctx;
    for (size_t i = i0; i < i1; i++)
        a->x[i] *= a->a;
}

void cpu_scale(float *x, size_t n, float a)
{
    split_run(n, 1, scale_range, &(struct scale_args){x, a});
}

struct bias_args {
    float *y;
    const float *bias;
    size_t n;
};

static void bias_rows(const void *ctx, size_t r0, size_t r1)
{
    const struct bias_args *a = ctx;
    for (size_t r = r0; r < r1; r++)
        add_range(&(struct add_args){a->y + r * a->n, a->bias}, 0, a->n);
}

int cpu_linear(float *y, const float *x, int m, const struct weight_view *w, const float *bias,
               enum kern_compute cm)
{
    const int n = w->rows;
    int rc = quant_ct_is(w->dtype)      ? cpu_ctlinear(y, x, m, w, cm)
             : dtype_is_block(w->dtype) ? cpu_qlinear(y, x, m, w, cm)
             : m <= CPU_GEMV_MAX_M      ? cpu_gemv(y, x, m, w, cm)
                                        : cpu_matmul(y, x, m, w, cm);
    if (rc < 0)
        return rc;
    if (bias)
        split_run((size_t)m, (size_t)n, bias_rows, &(struct bias_args){y, bias, (size_t)n});
    return 0;
}

int cpu_embed(float *y, const struct weight_view *w, const int32_t *ids, int n)
{
    for (int i = 0; i < n; i++) {
        assert(ids[i] >= 0 && ids[i] < w->rows);
        const void *row =
            w->pack == WEIGHT_PACK_X16 ? cpu_qlinear_row(w, ids[i]) : weight_row(w, ids[i]);
        if (!row)
            return err_set(ERR_NOMEM, "out of host memory for a packed embedding row");
        dtype_to_f32(w->dtype, row, y + (size_t)i * w->cols, (size_t)w->cols);
    }
    return 0;
}

struct norm_args {
    float *y;
    const float *x;
    int n;
    const float *gamma, *beta;
    float eps;
};

static void layernorm_rows(const void *ctx, size_t r0, size_t r1)
{
    const struct norm_args *a = ctx;
    const int n = a->n;
    for (size_t i = r0; i < r1; i++) {
        const float *xi = a->x + i * n;
        float *yi = a->y + i * n;
        /* two passes in double: torch reduces in f32 with a different order, so
         * the most accurate result is the closest to it on average */
        double mean = 0, var = 0;
        for (int j = 0; j < n; j++)
            mean += xi[j];
        mean /= n;
        for (int j = 0; j < n; j++) {
            double d = xi[j] - mean;
            var += d * d;
        }
        var /= n;
        float rstd = (float)(1.0 / sqrt(var + a->eps));
        float fmean = (float)mean;
        for (int j = 0; j < n; j++) {
            float v = (xi[j] - fmean) * rstd;
            if (a->gamma)
                v = v * a->gamma[j] + a->beta[j];
            yi[j] = v;
        }
    }
}

void cpu_layernorm(float *y, const float *x, int m, int n, const float *gamma, const float *beta,
                   float eps)
{
    const struct norm_args a = {.y = y, .x = x, .n = n, .gamma = gamma, .beta = beta, .eps = eps};
    split_run((size_t)m, (size_t)n, layernorm_rows, &a);
}

/* Running sums of the squares in cpu_rmsnorm: independent add chains, so
 * the loop is bound by throughput, not by the latency of one double add. */
#define RMS_LANES 8

static void rmsnorm_rows(const void *ctx, size_t r0, size_t r1)
{
    const struct norm_args *a = ctx;
    const int n = a->n;
    const float *gamma = a->gamma;
    for (size_t i = r0; i < r1; i++) {
        const float *xi = a->x + i * n;
        float *yi = a->y + i * n;
        /* in double, as cpu_layernorm (the square of an f32 is exact there) */
        double lane[RMS_LANES] = {0};
        int j = 0;
        for (; j + RMS_LANES <= n; j += RMS_LANES)
            for (int u = 0; u < RMS_LANES; u++)
                lane[u] += (double)xi[j + u] * xi[j + u];
        double ss = 0;
        for (; j < n; j++)
            ss += (double)xi[j] * xi[j];
        for (int u = 0; u < RMS_LANES; u++)
            ss += lane[u];
        const float r = (float)(1.0 / sqrt(ss / n + a->eps));
        /* (x * r) * gamma: LlamaRMSNorm's order */
        if (gamma)
            for (j = 0; j < n; j++)
                yi[j] = (xi[j] * r) * gamma[j];
        else
            for (j = 0; j < n; j++)
                yi[j] = xi[j] * r;
    }
}

void cpu_rmsnorm(float *y, const float *x, int m, int n, const float *gamma, float eps)
{
    split_run((size_t)m, (size_t)n, rmsnorm_rows,
              &(struct norm_args){.y = y, .x = x, .n = n, .gamma = gamma, .eps = eps});
}

/* Pairs of a head whose cos and sin cpu_rope computes at a time, on the
 * stack: every head of the row reuses them. */
#define ROPE_BLOCK 64

struct rope_args {
    float *x;
    int heads, head_dim, rot_dim;
    const int32_t *pos;
    const float *inv_freq;
    float scale;
};

static void rope_rows(const void *ctx, size_t r0, size_t r1)
{
    const struct rope_args *a = ctx;
    const int half = a->rot_dim / 2, heads = a->heads, head_dim = a->head_dim;
    float c[ROPE_BLOCK], s[ROPE_BLOCK];
    for (size_t r = r0; r < r1; r++) {
        float *row = a->x + r * heads * head_dim;
        const float p = (float)a->pos[r];
        /* a batch's sequences at one position (a decode step of equal
         * prompts) share the table: the sines and cosines were most of
         * the kernel's time, not the rotation */
        const bool same = r > r0 && half <= ROPE_BLOCK && a->pos[r] == a->pos[r - 1];
        for (int i0 = 0; i0 < half; i0 += ROPE_BLOCK) {
            const int nb = half - i0 < ROPE_BLOCK ? half - i0 : ROPE_BLOCK;
            for (int i = 0; i < nb && !same; i++) {
                const float ang = p * a->inv_freq[i0 + i];
                c[i] = cosf(ang) * a->scale;
                s[i] = sinf(ang) * a->scale;
            }
            for (int h = 0; h < heads; h++) {
                /* [i0, i0 + nb) and [i0 + half, ...) do not overlap: nb <= half - i0 */
                float *restrict lo = row + (size_t)h * head_dim + i0;
                float *restrict hi = lo + half;
                for (int i = 0; i < nb; i++) {
                    const float x0 = lo[i], x1 = hi[i];
                    lo[i] = x0 * c[i] - x1 * s[i];
                    hi[i] = x1 * c[i] + x0 * s[i];
                }
            }
        }
    }
}

void cpu_rope(float *x, int n, int heads, int head_dim, int rot_dim, const int32_t *pos,
              const float *inv_freq, float scale)
{
    split_run((size_t)n, (size_t)heads * head_dim, rope_rows,
              &(struct rope_args){.x = x,
                                  .heads = heads,
                                  .head_dim = head_dim,
                                  .rot_dim = rot_dim,
                                  .pos = pos,
                                  .inv_freq = inv_freq,
                                  .scale = scale});
}

/* The activations, one element each: cpu_activation and cpu_gated_act
 * compute the same formula. */
static inline float act_relu(float v)
{
    return v > 0 ? v : 0;
}

struct act_args {
    float *y;
    const float *x, *up; /* up: NULL for a plain activation */
    enum kern_act act;
};

/* One loop per activation (and per gated or not), so each vectorises. */
#define ACT_LOOP(f)                                                                                \
    do {                                                                                           \
        if (up)                                                                                    \
            for (size_t i = i0; i < i1; i++)                                                       \
                y[i] = f(x[i]) * up[i];                                                            \
        else                                                                                       \
            for (size_t i = i0; i < i1; i++)                                                       \
                y[i] = f(x[i]);                                                                    \
    } while (0)

static void act_range(const void *ctx, size_t i0, size_t i1)
{
    const struct act_args *a = ctx;
    float *y = a->y;
    const float *x = a->x, *up = a->up;
    switch (a->act) {
    case KERN_ACT_RELU:
        ACT_LOOP(act_relu);
        return;
    case KERN_ACT_GELU:
    case KERN_ACT_GELU_TANH:
        vec_gelu(y + i0, x + i0, up ? up + i0 : NULL, i1 - i0, a->act == KERN_ACT_GELU_TANH);
        return;
    case KERN_ACT_SILU:
        vec_silu(y + i0, x + i0, up ? up + i0 : NULL, i1 - i0);
        return;
    }
}

void cpu_activation(float *x, size_t n, enum kern_act act)
{
    split_run_act(n, act_range, &(struct act_args){.y = x, .x = x, .act = act});
}

void cpu_gated_act(float *y, const float *gate, const float *up, size_t n, enum kern_act act)
{
    split_run_act(n, act_range, &(struct act_args){.y = y, .x = gate, .up = up, .act = act});
}

void cpu_add(float *y, const float *x, size_t n)
{
    split_run(n, 1, add_range, &(struct add_args){y, x});
}

struct softcap_args {
    float *x;
    float cap;
};

static void softcap_range(const void *ctx, size_t i0, size_t i1)
{
    const struct softcap_args *a = ctx;
    vec_softcap(a->x + i0, i1 - i0, a->cap);
}

void cpu_softcap(float *x, size_t n, float cap)
{
    /* as torch: (x / cap).tanh() * cap, each step rounded to f32 */
    split_run(n, 1, softcap_range, &(struct softcap_args){x, cap});
}

/* Query rows of one head per task in a prefill: a task's scores are
 * ATTN_ROWS x (the keys its last row sees) floats of its thread's scratch. */
#define ATTN_ROWS 64

/* The keys and values one task reads: positions [k0, k0 + n) of one KV
 * head, the first n1 of them at rows k, v and the rest at k2, v2 (where a
 * ring wraps to its row 0; n1 == n: no wrap). */
struct kv_span {
    const float *k, *v, *k2, *v2;
    int n, n1;
};

/* Attention of `rows` query rows against one KV head's span of keys sp
 * (positions [k0, k0 + sp->n), numbered from 0 here): q rows of head_dim at
 * row stride ldq, out likewise at ldo. Row i sits at position pos0 + i *
 * step (step 1: a sequence's consecutive queries of one head; 0: the query
 * heads of a group at one position) and sees the keys s <= its position
 * with key_ok[s], and s > its position - g->window under a window; a row
 * that sees none gets 0. Scores are soft-capped first under g->softcap. The
 * span covers the last row's position: the keys past it are seen by no row.
 * scores: rows * sp->n floats. A wrapped span is scored and summed in two
 * products, its second part added to the first's output. Where vec (the
 * CPU has attn_vec.h's products and the head fits them) every block takes
 * them, a decode step's group of query heads and a prefill's rows alike,
 * else sgemm: each row's sums are then the same whatever block it is in,
 * so a sequence's logits do not depend on what else shares its batch (a
 * decode row beside another sequence's prompt sits in a block of many
 * rows, alone in a group of a few). */
static void attend(const struct kv_geom *g, float *out, size_t ldo, const float *q, size_t ldq,
                   int rows, int pos0, int step, const struct kv_span *sp, const uint8_t *key_ok,
                   float *scores, bool vec)
{
    const int head_dim = g->head_dim, t_all = sp->n, n1 = sp->n1;
    const bool few = vec && head_dim <= ATTN_VEC_MAX_HEAD_DIM;
    /* scores = q @ k^T over the keys */
    if (few) {
        attn_scores(scores, (size_t)t_all, q, ldq, rows, head_dim, sp->k, sp->v, n1);
        if (n1 < t_all)
            attn_scores(scores + n1, (size_t)t_all, q, ldq, rows, head_dim, sp->k2, sp->v2,
                        t_all - n1);
    } else {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, n1, head_dim, 1.0f, q, (int)ldq,
                    sp->k, head_dim, 0.0f, scores, t_all);
        if (n1 < t_all)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, t_all - n1, head_dim, 1.0f,
                        q, (int)ldq, sp->k2, head_dim, 0.0f, scores + n1, t_all);
    }
    /* soft-capping, causal + window + padding mask, softmax per query row */
    for (int t = 0; t < rows; t++) {
        float *s = scores + (size_t)t * t_all;
        const int visible = pos0 + t * step + 1;
        if (g->softcap > 0)
            vec_softcap(s, (size_t)visible, g->softcap);
        const int lo = g->window > 0 && visible > g->window ? visible - g->window : 0;
        memset(s, 0, (size_t)lo * sizeof(float));
        vec_softmax_masked(s + lo, key_ok + lo, visible - lo, t_all - lo);
    }
    /* out = P @ v */
    if (few) {
        attn_values(out, ldo, scores, (size_t)t_all, rows, head_dim, sp->v, n1, false);
        if (n1 < t_all)
            attn_values(out, ldo, scores + n1, (size_t)t_all, rows, head_dim, sp->v2, t_all - n1,
                        true);
        return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, head_dim, n1, 1.0f, scores, t_all,
                sp->v, head_dim, 0.0f, out, (int)ldo);
    if (n1 < t_all)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, head_dim, t_all - n1, 1.0f,
                    scores + n1, t_all, sp->v2, head_dim, 1.0f, out, (int)ldo);
}

/* Every sequence's attention, as pool tasks: in a decode step (one query
 * per sequence, grouped heads) one task per (sequence, KV head) takes the
 * group's queries as one matrix, so each key and value is read once for
 * all of them; otherwise one per (sequence, query head, block of ATTN_ROWS
 * query rows), a block scoring only the keys its last row sees. */
struct attn_job {
    const struct kv_geom *g;
    float *out;
    const float *q, *kc, *vc;
    const uint8_t *key_ok;
    int past, t_new;
    bool grouped;  /* decode: a task per KV head */
    bool vec;      /* a few rows take attn_vec.h's products */
    int blocks;    /* row blocks per head (not grouped) */
    atomic_int rc; /* the first failure (ERR_NOMEM); its message in msg */
    char msg[160];
};

static void attn_task(void *ctx, int task)
{
    struct attn_job *j = ctx;
    const struct kv_geom *g = j->g;
    const int hd = g->head_dim, group = g->heads / g->kv_heads;
    const size_t width = (size_t)g->heads * hd;
    int b, kv, rows, r0 = 0, h = 0;
    if (j->grouped) {
        b = task / g->kv_heads;
        kv = task % g->kv_heads;
        rows = group;
    } else {
        int per_seq = g->heads * j->blocks;
        b = task / per_seq;
        h = task % per_seq / j->blocks;
        kv = h / group;
        r0 = task % j->blocks * ATTN_ROWS;
        rows = j->t_new - r0 < ATTN_ROWS ? j->t_new - r0 : ATTN_ROWS;
    }
    const int t_all = j->past + r0 + (j->grouped ? 1 : rows);
    float *scores = cpu_scratch(CPU_SCRATCH_ATTN, (size_t)rows * t_all * sizeof(float));
    if (!scores) {
        int none = 0;
        if (atomic_compare_exchange_strong(&j->rc, &none, ERR_NOMEM))
            snprintf(j->msg, sizeof(j->msg), "out of host memory for %d x %d attention scores",
                     rows, t_all);
        return;
    }
    /* under a window, no row sees the keys before the first row's window:
     * they are neither scored nor read */
    const int pos0 = j->past + r0;
    const int k0 = g->window > 0 && pos0 + 1 > g->window ? pos0 + 1 - g->window : 0;
    /* the span's rows: from k0 on, or from k0 % ring, wrapping to row 0 */
    const int n_rows = g->ring ? g->ring : g->max_t, n = t_all - k0;
    const int r = g->ring ? k0 % g->ring : k0;
    const size_t head = ((size_t)b * g->kv_heads + kv) * n_rows * hd;
    const struct kv_span sp = {.k = j->kc + head + (size_t)r * hd,
                               .v = j->vc + head + (size_t)r * hd,
                               .k2 = j->kc + head,
                               .v2 = j->vc + head,
                               .n = n,
                               .n1 = r + n > n_rows ? n_rows - r : n};
    const uint8_t *key_ok = j->key_ok + (size_t)b * g->max_t + k0;
    const size_t row0 = (size_t)b * j->t_new * width;
    if (j->grouped) {
        const size_t h0 = row0 + (size_t)kv * group * hd; /* the group's first query column */
        attend(g, j->out + h0, (size_t)hd, j->q + h0, (size_t)hd, group, pos0 - k0, 0, &sp, key_ok,
               scores, j->vec);
        return;
    }
    const size_t at = row0 + (size_t)r0 * width + (size_t)h * hd;
    attend(g, j->out + at, width, j->q + at, width, rows, pos0 - k0, 1, &sp, key_ok, scores,
           j->vec);
}

/* -1: not yet looked at; 0: sgemm only; 1: attn_vec.h's products */
static atomic_int attn_vec_on = -1;

void cpu_attention_vec(bool on)
{
    atomic_store(&attn_vec_on, on && attn_vec_have());
}

int cpu_attention(const struct kv_geom *g, float *out, const float *q, const float *kc,
                  const float *vc, const uint8_t *key_ok, int past, int t_new)
{
    const int group = g->heads / g->kv_heads;
    if (atomic_load_explicit(&attn_vec_on, memory_order_relaxed) < 0)
        cpu_attention_vec(true);
    struct attn_job j = {.g = g,
                         .out = out,
                         .q = q,
                         .kc = kc,
                         .vc = vc,
                         .key_ok = key_ok,
                         .past = past,
                         .t_new = t_new,
                         .grouped = t_new == 1 && group > 1,
                         .vec = atomic_load_explicit(&attn_vec_on, memory_order_relaxed) > 0,
                         .blocks = (t_new + ATTN_ROWS - 1) / ATTN_ROWS};
    atomic_init(&j.rc, 0);
    int tasks = g->batch * (j.grouped ? g->kv_heads : g->heads * j.blocks);
    cpu_kernels_run(attn_task, &j, tasks);
    int rc = atomic_load(&j.rc);
    return rc < 0 ? err_set(rc, "%s", j.msg) : 0;
}

static atomic_int kernel_threads; /* 0: not set (all cores) */

void cpu_set_threads(int n)
{
    if (n < 1)
        n = (int)sysconf(_SC_NPROCESSORS_ONLN);
    atomic_store(&kernel_threads, n);
    pool_set_threads(n);
}

int cpu_threads(void)
{
    int n = atomic_load(&kernel_threads);
    return n > 0 ? n : (int)sysconf(_SC_NPROCESSORS_ONLN);
}
