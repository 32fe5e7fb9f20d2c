/* The CPU linear layer with compressed-tensors' weights (ctlinear.h).
 *
 * Up to CPU_GEMV_MAX_M input rows (decode), a dot-product kernel (ctdot.h)
 * widens each weight block once, its scale and zero point applied, and
 * multiplies it with every input row while it is in registers, split by
 * weight rows over the pool; or ("deq") blocks of 16 weight rows are
 * dequantized into a thread's scratch and multiplied by the f32 GEMV
 * kernel gemv.c chose. Which runs is chosen per process, type, compute
 * mode and bucket of rows (1; 2-16) by measurement, as qlinear.c chooses:
 * at the first call with a type, each candidate the CPU has is timed on
 * 4 MiB of that type's random blocks flushed from the caches, at 1 and 8
 * input rows (best of 5 and 3, interleaved; a later one must win by 3%).
 * SHARDSWAP_CTDOT=NAME (avx512bf16, avx512, avx2, deq, scalar) runs one
 * kernel for every call instead (avx512bf16, bf16 mode's alone, runs
 * avx512 in f32 mode).
 *
 * Above, cpu_matmul: a block of rows per task dequantized (by
 * cpu_ct_dequantize, in bf16 for the bf16 primitives) and the f32 or bf16
 * product the matmul's calibration chose. */
#include "backend/cpu/ctlinear.h"

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "backend/cpu/ctdot.h"
#include "backend/cpu/gemv_isa.h"
#include "backend/cpu/isa.h"
#include "backend/cpu/lanes.h"
#include "backend/cpu/linear.h"
#include "backend/cpu/scratch.h"
#include "backend/cpu/vec.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/timing.h"

/* weight rows dequantized at a time by "deq" */
#define CT_DEQ_ROWS 16
/* As qlinear.c's: a thread claims about CT_TASK_BYTES of weight rows at a
 * time, made of steps (units) of about CT_STEP_BYTES, whole blocks of
 * CT_DEQ_ROWS rows, the last steps of a lane one by one (lanes.h), and a
 * call makes at least CT_MIN_TASKS units where its rows allow; without
 * claims (cpu_gemv_split_claims(false)) a pool task is one unit of
 * CT_TASK_BYTES, as before them. */
#define CT_TASK_BYTES (128 << 10)
#define CT_STEP_BYTES (32 << 10)
#define CT_MIN_TASKS 8

/* ---- the kernels ---- */

static bool has_any(void)
{
    return true;
}

struct ct_kernel {
    const char *name;
    ctdot_rows_fn rows; /* NULL: dequantized blocks and the f32 GEMV */
    bool (*supported)(void);
    bool bf16_only;
};

/* in order of preference on a near-tie; scalar only by request */
static const struct ct_kernel ct_kernels[] = {
    {"avx512bf16", ctdot_rows_avx512bf16, cpu_isa_avx512bf16, true},
    {"avx512bf16-lut", ctdot_rows_avx512bf16_lut, cpu_isa_avx512bf16, true},
    {"avx512", ctdot_rows_avx512, cpu_isa_avx512, false},
    {"avx2", ctdot_rows_avx2, cpu_isa_avx2, false},
    {"deq", NULL, has_any, false},
    {"scalar", ctdot_rows_scalar, has_any, false},
};
#define CT_N_KERNELS (int)(sizeof(ct_kernels) / sizeof(ct_kernels[0]))
#define CT_K_AVX512 2
#define CT_K_SCALAR (CT_N_KERNELS - 1)

typedef void (*ct_dequant_fn)(enum dtype t, const void *src, void *dst, size_t n, bool to_bf16);
static ct_dequant_fn ct_dequant;
static pthread_once_t ct_dequant_once = PTHREAD_ONCE_INIT;

/* Once: the ISA checks run CPUID, which a virtual machine traps (tens of
 * microseconds); asked per weight row, they made a prefill's conversion
 * 20x slower than its product. */
static void ct_dequant_pick(void)
{
    ct_dequant = cpu_isa_avx512() ? ctdot_dequant_avx512
                 : cpu_isa_avx2() ? ctdot_dequant_avx2
                                  : ctdot_dequant_scalar;
}

void cpu_ct_dequantize(enum dtype t, const void *src, void *dst, size_t n, bool to_bf16)
{
    pthread_once(&ct_dequant_once, ct_dequant_pick);
    ct_dequant(t, src, dst, n, to_bf16);
}

void cpu_ctlinear_random_blocks(enum dtype t, void *dst, size_t n_blocks, uint64_t seed)
{
    const size_t bb = quant_ct_block_bytes(t);
    struct rng r;
    rng_seed(&r, seed, 0);
    unsigned char *p = dst;
    for (size_t i = 0; i < n_blocks * bb; i++)
        p[i] = (unsigned char)(rng_u64(&r) >> 56);
    for (size_t b = 0; b < n_blocks; b++, p += bb) {
        /* a finite scale of either sign, magnitude in [2^-12, 2^-6):
         * exponent 115..120 */
        const uint32_t u =
            (uint32_t)(115 + rng_u64(&r) % 6) << 23 | (uint32_t)(rng_u64(&r) & 0x807fffffu);
        memcpy(p, &u, 4);
        if (t == DTYPE_CT_I4)
            p[4] = (unsigned char)(int8_t)((int)(p[4] % 16) - 8);
        for (int j = 0; t == DTYPE_CT_F8 && j < QUANT_CT_QK; j++)
            if ((p[4 + j] & 0x7f) == 0x7f)
                p[4 + j] ^= 1; /* not NaN */
    }
}

void cpu_ctlinear_share_scales(enum dtype t, void *blocks, size_t n_blocks, size_t group)
{
    const size_t bb = quant_ct_block_bytes(t), head = t == DTYPE_CT_F8 ? 4 : 5;
    unsigned char *p = blocks;
    for (size_t b = 0; group > 1 && b < n_blocks; b++)
        if (b % group)
            memcpy(p + b * bb, p + (b - b % group) * bb, head);
}

/* ---- a call ---- */

struct ct_job {
    struct ctdot_args a;
    gemv_rows_fn deq_rows; /* the f32 GEMV kernel for "deq", else NULL */
    ctdot_rows_fn rows;
    int task_rows;          /* rows per unit */
    int per, tail;          /* steps per claim, the last `tail` alone (0: a unit per pool task) */
    struct cpu_lanes lanes; /* the units in a lane per thread, as the GEMV's */
    atomic_int rc;
};

/* "deq": blocks of rows dequantized into the thread's scratch */
static int ct_deq_rows(const struct ct_job *j, int r0, int r1)
{
    const struct weight_view *w = j->a.w;
    const int k = w->cols;
    float *blk = cpu_scratch(CPU_SCRATCH_CT_DEQ, (size_t)CT_DEQ_ROWS * k * sizeof(float));
    if (!blk)
        return ERR_NOMEM;
    for (int r = r0; r < r1; r += CT_DEQ_ROWS) {
        const int nr = r1 - r < CT_DEQ_ROWS ? r1 - r : CT_DEQ_ROWS;
        for (int i = 0; i < nr; i++)
            quant_ct_dequantize(w->dtype, weight_row(w, r + i), blk + (size_t)i * k, (size_t)k);
        for (size_t i = 0; j->a.bf16 && i < (size_t)nr * k; i++)
            blk[i] = bf16_round(blk[i]);
        const struct weight_view f = {
            .dtype = DTYPE_F32, .data = blk, .rows = nr, .cols = k, .ld = (size_t)k};
        const struct gemv_args g = {
            .y = j->a.y + r, .ldy = j->a.ldy, .x = j->a.x, .ldx = j->a.ldx, .m = j->a.m, .w = &f};
        j->deq_rows(&g, 0, nr);
    }
    return 0;
}

/* Weight rows [r0, r1) of j's product: 0, or ERR_NOMEM. */
static int ct_rows(const struct ct_job *j, int r0, int r1)
{
    if (!j->rows)
        return ct_deq_rows(j, r0, r1);
    j->rows(&j->a, r0, r1);
    return 0;
}

/* steps [step, step + count) of j, one unit each (cpu_lanes_steps_fn):
 * their rows at once */
static void ct_steps(void *ctx, int step, int count)
{
    struct ct_job *j = ctx;
    const int r0 = step * j->task_rows, r1 = r0 + count * j->task_rows;
    if (ct_rows(j, r0, r1 < j->a.w->rows ? r1 : j->a.w->rows) < 0)
        atomic_store(&j->rc, ERR_NOMEM);
}

static void ct_task(void *ctx, int task)
{
    struct ct_job *j = ctx;
    cpu_lanes_task(&j->lanes, task, ct_steps, j);
}

/* j's units over w's rows (about `bytes` each, at least CT_MIN_TASKS where
 * the rows allow, whole blocks of CT_DEQ_ROWS) and its claims */
static void ct_units_of(struct ct_job *j, const struct weight_view *w)
{
    const bool claims = cpu_gemv_claims();
    const size_t row_bytes = dtype_row_bytes(w->dtype, (size_t)w->cols);
    size_t rows = (claims ? CT_STEP_BYTES : CT_TASK_BYTES) / (row_bytes ? row_bytes : 1);
    size_t most = ((size_t)w->rows + CT_MIN_TASKS - 1) / CT_MIN_TASKS;
    if (rows > most)
        rows = most;
    rows = (rows + CT_DEQ_ROWS - 1) / CT_DEQ_ROWS * CT_DEQ_ROWS;
    j->task_rows = rows ? (int)rows : CT_DEQ_ROWS;
    j->per = 1;
    j->tail = 0;
    if (claims) {
        const size_t step_bytes = (size_t)j->task_rows * row_bytes;
        j->per = cpu_lanes_claim_steps(CT_TASK_BYTES, step_bytes);
        j->tail = cpu_lanes_claim_tail(j->per);
    }
}

/* Kernel k (bf16_only ones in bf16 mode only) on m <= CPU_GEMV_MAX_M rows. */
static int ct_run(const struct ct_kernel *k, float *y, const float *x, int m,
                  const struct weight_view *w, bool bf16)
{
    const size_t n = (size_t)m * w->cols;
    const uint16_t *xb = NULL;
    if (k->bf16_only) {
        uint16_t *b = cpu_scratch(CPU_SCRATCH_CT_XB, n * sizeof(uint16_t));
        if (!b)
            return err_set(ERR_NOMEM, "out of host memory for %d x %d bf16 activations", m,
                           w->cols);
        vec_to_bf16(b, x, n);
        xb = b;
    }
    if (bf16 && !k->bf16_only && !(x = cpu_round_bf16(x, n)))
        return err_set(ERR_NOMEM, "out of host memory for %d x %d activations in bf16", m, w->cols);
    struct ct_job j = {.a = {.y = y,
                             .ldy = (size_t)w->rows,
                             .x = x,
                             .ldx = (size_t)w->cols,
                             .xb = xb,
                             .m = m,
                             .w = w,
                             .bf16 = bf16},
                       .deq_rows = k->rows ? NULL : cpu_gemv_rows_f32(m),
                       .rows = k->rows};
    atomic_init(&j.rc, 0);
    ct_units_of(&j, w);
    const int units = (w->rows + j.task_rows - 1) / j.task_rows;
    cpu_kernels_run(ct_task, &j,
                    j.tail ? cpu_lanes_init_claims(&j.lanes, units, 1, j.per, j.tail)
                           : cpu_lanes_init_streams(&j.lanes, units, 1));
    if (atomic_load(&j.rc) < 0)
        return err_set(ERR_NOMEM, "out of host memory for %d x %d dequantized weights", CT_DEQ_ROWS,
                       w->cols);
    return 0;
}

/* ---- the choice ---- */

#define CT_TYPES 3   /* CT_I8, CT_I4, CT_F8 */
#define CT_MODES 2   /* f32, bf16 */
#define CT_BUCKETS 2 /* one input row; 2-16 (decode batches) */
static const int ct_bucket_m[CT_BUCKETS] = {1, 8};
static const int ct_cal_reps[CT_BUCKETS] = {5, 3};
static const char *const ct_bucket_name[CT_BUCKETS] = {"m1", "m2-16"};
#define CT_CAL_BYTES ((size_t)4 << 20)
#define CT_CAL_COLS 2048
#define CT_CAL_MARGIN 0.03
/* elements sharing a scale in the calibration's weights: compressed-tensors'
 * default group, and a 128x128 FP8 block's width; per-channel and
 * per-tensor scales share more */
#define CT_CAL_GROUP 128

static struct {
    pthread_mutex_t lock; /* guards the calibration */
    pthread_once_t env_once;
    atomic_bool ready[CT_TYPES];
    const struct ct_kernel *_Atomic forced;
    const struct ct_kernel *chosen[CT_TYPES][CT_MODES][CT_BUCKETS];
    double ms[CT_TYPES];
} ct_choice = {.lock = PTHREAD_MUTEX_INITIALIZER, .env_once = PTHREAD_ONCE_INIT};

static int ct_index(enum dtype t)
{
    return (int)t - (int)DTYPE_CT_I8;
}

static int ct_find(const char *name, const struct ct_kernel **out)
{
    for (int i = 0; i < CT_N_KERNELS; i++)
        if (strcmp(ct_kernels[i].name, name) == 0) {
            if (!ct_kernels[i].supported())
                return err_set(ERR_UNSUPPORTED, "this CPU lacks %s", name);
            *out = &ct_kernels[i];
            return 0;
        }
    return err_set(ERR_INVALID,
                   "unknown compressed-tensors kernel \"%s\" (expected avx512bf16, "
                   "avx512bf16-lut, avx512, avx2, deq or scalar)",
                   name);
}

static void ct_read_env(void)
{
    const char *req = getenv("SHARDSWAP_CTDOT");
    const struct ct_kernel *k;
    if (!req || !*req)
        return;
    if (ct_find(req, &k) < 0) {
        fprintf(stderr, "shardswap: SHARDSWAP_CTDOT: %s; choosing by measurement\n", err_msg());
        return;
    }
    ct_choice.forced = k;
}

/* Every candidate for type t, both modes, timed as a call from this thread
 * runs, on weights flushed from the caches. Under ct_choice.lock. */
static void ct_calibrate(enum dtype t)
{
    const int ti = ct_index(t);
    const double t0 = time_now();
    const size_t row_bytes = dtype_row_bytes(t, CT_CAL_COLS);
    const int rows = (int)(CT_CAL_BYTES / row_bytes);
    const int mmax = ct_bucket_m[CT_BUCKETS - 1];
    char *wd = malloc((size_t)rows * row_bytes);
    float *x = malloc((size_t)mmax * CT_CAL_COLS * sizeof(float));
    float *y = malloc((size_t)mmax * rows * sizeof(float));
    if (wd && x && y) {
        cpu_ctlinear_random_blocks(t, wd, (size_t)rows * CT_CAL_COLS / QUANT_CT_QK, 7);
        cpu_ctlinear_share_scales(t, wd, (size_t)rows * CT_CAL_COLS / QUANT_CT_QK,
                                  CT_CAL_GROUP / QUANT_CT_QK);
        for (size_t i = 0; i < (size_t)mmax * CT_CAL_COLS; i++)
            x[i] = (float)((int)(i % 11) - 5) * 0.1f;
    }
    const struct weight_view w = {
        .dtype = t, .data = wd, .rows = rows, .cols = CT_CAL_COLS, .ld = CT_CAL_COLS};
    for (int mode = 0; mode < CT_MODES; mode++) {
        const struct ct_kernel *cand[CT_N_KERNELS];
        int n = 0;
        for (int i = 0; i < CT_K_SCALAR; i++)
            if (ct_kernels[i].supported() && (mode == 1 || !ct_kernels[i].bf16_only))
                cand[n++] = &ct_kernels[i];
        for (int b = 0; b < CT_BUCKETS; b++) {
            ct_choice.chosen[ti][mode][b] = cand[0];
            if (n == 1 || !wd || !x || !y)
                continue;
            double best[CT_N_KERNELS];
            for (int i = 0; i < n; i++)
                best[i] = 1e30;
            for (int rep = 0; rep < ct_cal_reps[b]; rep++)
                for (int i = 0; i < n; i++) {
                    cpu_cache_flush(wd, (size_t)rows * row_bytes);
                    double s = time_now();
                    if (ct_run(cand[i], y, x, ct_bucket_m[b], &w, mode == 1) < 0)
                        continue;
                    s = time_now() - s;
                    if (s < best[i])
                        best[i] = s;
                }
            int win = 0;
            for (int i = 1; i < n; i++)
                if (best[i] * (1.0 + CT_CAL_MARGIN) < best[win])
                    win = i;
            ct_choice.chosen[ti][mode][b] = cand[win];
        }
    }
    free(wd);
    free(x);
    free(y);
    ct_choice.ms[ti] = (time_now() - t0) * 1e3;
}

static void ct_ensure(enum dtype t)
{
    const int ti = ct_index(t);
    if (atomic_load(&ct_choice.ready[ti]))
        return;
    pthread_mutex_lock(&ct_choice.lock);
    if (!atomic_load(&ct_choice.ready[ti])) {
        ct_calibrate(t);
        atomic_store(&ct_choice.ready[ti], true);
    }
    pthread_mutex_unlock(&ct_choice.lock);
}

static const struct ct_kernel *ct_pick(enum dtype t, int m, bool bf16)
{
    pthread_once(&ct_choice.env_once, ct_read_env);
    const struct ct_kernel *k = ct_choice.forced;
    if (k)
        return k->bf16_only && !bf16 ? &ct_kernels[CT_K_AVX512] : k;
    ct_ensure(t);
    return ct_choice.chosen[ct_index(t)][bf16][m == 1 ? 0 : 1];
}

const char *cpu_ctlinear_kernels(void)
{
    static _Thread_local char buf[512];
    pthread_once(&ct_choice.env_once, ct_read_env);
    const struct ct_kernel *f = ct_choice.forced;
    if (f) {
        snprintf(buf, sizeof(buf), "%s (every call, by request)", f->name);
        return buf;
    }
    size_t used = 0;
    double ms = 0;
    for (int ti = 0; ti < CT_TYPES && used < sizeof(buf); ti++) {
        const enum dtype t = (enum dtype)(DTYPE_CT_I8 + ti);
        ct_ensure(t);
        ms += ct_choice.ms[ti];
        used += (size_t)snprintf(buf + used, sizeof(buf) - used, "%s%s:", ti ? "; " : "",
                                 dtype_name(t));
        for (int mode = 0; mode < CT_MODES && used < sizeof(buf); mode++)
            for (int b = 0; b < CT_BUCKETS && used < sizeof(buf); b++)
                used += (size_t)snprintf(buf + used, sizeof(buf) - used, "%s %s %s %s",
                                         mode || b ? "," : "", mode ? "bf16" : "f32",
                                         ct_bucket_name[b], ct_choice.chosen[ti][mode][b]->name);
    }
    if (used < sizeof(buf))
        snprintf(buf + used, sizeof(buf) - used, " (measured in %.0f ms)", ms);
    return buf;
}

int cpu_ctlinear_force(const char *name)
{
    pthread_once(&ct_choice.env_once, ct_read_env);
    const struct ct_kernel *k = NULL;
    int rc = name ? ct_find(name, &k) : 0;
    if (rc == 0)
        ct_choice.forced = k;
    return rc;
}

int cpu_ctlinear(float *y, const float *x, int m, const struct weight_view *w, enum kern_compute cm)
{
    if (m > CPU_GEMV_MAX_M)
        return cpu_matmul(y, x, m, w, cm);
    const bool bf16 = cm == KERN_COMPUTE_BF16;
    return ct_run(ct_pick(w->dtype, m, bf16), y, x, m, w, bf16);
}

/* ---- a group of products in one run of the pool ---- */

/* unit c[0] of the group's job job[0] (cpu_lanes_units_fn, one stream) */
static int ct_group_unit(void *ctx, const int *job, const int *c, int count)
{
    assert(count == 1);
    (void)count;
    const struct ct_job *j = (const struct ct_job *)ctx + job[0];
    const int r0 = c[0] * j->task_rows;
    const int r1 = r0 + j->task_rows < j->a.w->rows ? r0 + j->task_rows : j->a.w->rows;
    return ct_rows(j, r0, r1);
}

int cpu_ctlinear_group(const struct kern_linear_job *jobs, int n, enum kern_compute cm)
{
    assert(n > 0 && n <= CPU_GEMV_GROUP_MAX);
    const bool bf16 = cm == KERN_COMPUTE_BF16;
    struct ct_job cj[CPU_GEMV_GROUP_MAX];
    int first[CPU_GEMV_GROUP_MAX + 1];
    /* per job: the first job with its x (itself, or an earlier one), whose
     * x is converted for every kernel that reads it: to bf16 (xb) for the
     * bf16-only kernels, rounded to bf16 in f32 for the others in bf16
     * mode (what cpu_round_bf16 gives ct_run) */
    int own[CPU_GEMV_GROUP_MAX];
    bool want_xb[CPU_GEMV_GROUP_MAX] = {false}, want_rd[CPU_GEMV_GROUP_MAX] = {false};
    const struct ct_kernel *kern[CPU_GEMV_GROUP_MAX];
    for (int i = 0; i < n; i++) {
        const struct kern_linear_job *j = &jobs[i];
        assert(j->m <= CPU_GEMV_MAX_M && quant_ct_is(j->w.dtype));
        kern[i] = ct_pick(j->w.dtype, j->m, bf16);
        own[i] = i;
        for (int e = 0; e < i && own[i] == i; e++)
            if (own[e] == e && jobs[e].x == j->x && jobs[e].m == j->m &&
                jobs[e].w.cols == j->w.cols)
                own[i] = e;
        want_xb[own[i]] |= kern[i]->bf16_only;
        want_rd[own[i]] |= bf16 && !kern[i]->bf16_only;
    }
    size_t bytes = 0;
    for (int i = 0; i < n; i++) {
        const size_t e = (size_t)jobs[i].m * jobs[i].w.cols;
        bytes += (want_xb[i] ? (e * sizeof(uint16_t) + 63) / 64 * 64 : 0) +
                 (want_rd[i] ? (e * sizeof(float) + 63) / 64 * 64 : 0);
    }
    char *buf = bytes ? cpu_scratch(CPU_SCRATCH_CT_XB, bytes) : NULL;
    if (bytes && !buf)
        return err_set(ERR_NOMEM, "out of host memory for the bf16 activations of %d products", n);
    const uint16_t *xb[CPU_GEMV_GROUP_MAX];
    const float *rd[CPU_GEMV_GROUP_MAX];
    first[0] = 0;
    for (int i = 0; i < n; i++) {
        const struct kern_linear_job *j = &jobs[i];
        const size_t e = (size_t)j->m * j->w.cols;
        xb[i] = NULL;
        rd[i] = NULL;
        if (want_xb[i]) {
            vec_to_bf16((uint16_t *)buf, j->x, e);
            xb[i] = (const uint16_t *)buf;
            buf += (e * sizeof(uint16_t) + 63) / 64 * 64;
        }
        if (want_rd[i]) {
            vec_round_bf16((float *)buf, j->x, e);
            rd[i] = (const float *)buf;
            buf += (e * sizeof(float) + 63) / 64 * 64;
        }
        const struct ct_kernel *k = kern[i];
        const int o = own[i];
        cj[i] = (struct ct_job){.a = {.y = j->y,
                                      .ldy = (size_t)j->w.rows,
                                      .x = bf16 && !k->bf16_only ? rd[o] : j->x,
                                      .ldx = (size_t)j->w.cols,
                                      .xb = k->bf16_only ? xb[o] : NULL,
                                      .m = j->m,
                                      .w = &j->w,
                                      .bf16 = bf16},
                                .deq_rows = k->rows ? NULL : cpu_gemv_rows_f32(j->m),
                                .rows = k->rows};
        ct_units_of(&cj[i], &j->w);
        first[i + 1] = first[i] + (j->w.rows + cj[i].task_rows - 1) / cj[i].task_rows;
    }
    /* claims as long as the first job's, the last few steps alone */
    const int rc = cj[0].tail ? cpu_lanes_run_group_claims(first, n, 1, cj[0].per, cj[0].tail,
                                                           ct_group_unit, cj)
                              : cpu_lanes_run_group_streams(first, n, 1, ct_group_unit, cj);
    if (rc < 0)
        return err_set(ERR_NOMEM, "out of host memory for %d x %d dequantized weights", CT_DEQ_ROWS,
                       jobs[0].w.cols);
    return 0;
}
