/* The fused matrix-vector product of the CPU backend's linear layers for a
 * few input rows: bound by reading the weights, so each weight row is read
 * once per call and widened in registers for every input row. The kernels
 * (gemv_<isa>.c) are chosen once per process from what the CPU has, or by
 * SHARDSWAP_ISA. */
#include "backend/cpu/linear.h"

#include <pthread.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <stdbool.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "backend/cpu/gemv_isa.h"
#include "backend/cpu/pool.h"
#include "backend/cpu/scratch.h"
#include "core/dtype.h"
#include "core/error.h"

/* A pool task reads about this many weight bytes: long enough that claiming
 * it costs nothing, short enough that two threads end together. Rows come
 * in multiples of 16 so tasks write whole cache lines of y. */
#define GEMV_TASK_BYTES (128 << 10)
#define GEMV_MIN_TASKS 8

struct gemv_isa {
    const char *name;
    gemv_rows_fn rows;
    gemv_rows_fn rows_bf16; /* bf16 weights in bf16 mode (x rounded) */
    bool (*supported)(void);
    bool on_request; /* never the automatic choice, only SHARDSWAP_ISA's */
};

static bool has_scalar(void)
{
    return true;
}

#if defined(__x86_64__) || defined(__i386__)
/* F16C from CPUID leaf 1 (ECX bit 29): clang does not know "f16c" as a
 * __builtin_cpu_supports name */
static bool has_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}

static bool has_avx2(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
}

static bool has_avx512(void)
{
    __builtin_cpu_init();
    return has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
}

static bool has_avx512bf16(void)
{
    return has_avx512() && __builtin_cpu_supports("avx512bf16");
}
#else
static bool has_avx2(void)
{
    return false;
}

static bool has_avx512(void)
{
    return false;
}

static bool has_avx512bf16(void)
{
    return false;
}
#endif

/* Best first. VDPBF16PS halves the instructions of a bf16 product but ran
 * 1.2-1.3x slower than widening and FMAs at every m on the Xeon it was
 * measured on (bench gemv --compute bf16), so it is there to ask for. */
static const struct gemv_isa gemv_isas[] = {
    {"avx512bf16", gemv_rows_avx512, gemv_rows_avx512bf16, has_avx512bf16, true},
    {"avx512", gemv_rows_avx512, gemv_rows_avx512, has_avx512, false},
    {"avx2", gemv_rows_avx2, gemv_rows_avx2, has_avx2, false},
    {"scalar", gemv_rows_scalar, gemv_rows_scalar, has_scalar, false},
};
#define GEMV_N_ISAS (int)(sizeof(gemv_isas) / sizeof(gemv_isas[0]))

static const struct gemv_isa *gemv_best(void)
{
    for (int i = 0; i < GEMV_N_ISAS; i++)
        if (!gemv_isas[i].on_request && gemv_isas[i].supported())
            return &gemv_isas[i];
    return &gemv_isas[GEMV_N_ISAS - 1];
}

/* Set once (gemv_choose), or by cpu_gemv_set_isa between calls. */
static const struct gemv_isa *_Atomic gemv_chosen;
static pthread_once_t gemv_once = PTHREAD_ONCE_INIT;

static int gemv_find(const char *name, const struct gemv_isa **out)
{
    for (int i = 0; i < GEMV_N_ISAS; i++)
        if (strcmp(gemv_isas[i].name, name) == 0) {
            if (!gemv_isas[i].supported())
                return err_set(ERR_UNSUPPORTED, "this CPU lacks %s", name);
            *out = &gemv_isas[i];
            return 0;
        }
    return err_set(ERR_INVALID, "unknown ISA \"%s\" (expected avx512bf16, avx512, avx2 or scalar)",
                   name);
}

static void gemv_choose(void)
{
    const char *req = getenv("SHARDSWAP_ISA");
    const struct gemv_isa *isa = gemv_best();
    if (req && *req && gemv_find(req, &isa) < 0) {
        isa = gemv_best();
        fprintf(stderr, "shardswap: SHARDSWAP_ISA: %s; using %s\n", err_msg(), isa->name);
    }
    gemv_chosen = isa;
}

const char *cpu_gemv_isa(void)
{
    pthread_once(&gemv_once, gemv_choose);
    return gemv_chosen->name;
}

int cpu_gemv_set_isa(const char *name)
{
    pthread_once(&gemv_once, gemv_choose);
    const struct gemv_isa *isa = gemv_best();
    int rc = name ? gemv_find(name, &isa) : 0;
    if (rc == 0)
        gemv_chosen = isa;
    return rc;
}

struct gemv_job {
    struct gemv_args a;
    gemv_rows_fn rows;
    int task_rows;
};

static void gemv_task(void *ctx, int task)
{
    const struct gemv_job *j = ctx;
    int r0 = task * j->task_rows, r1 = r0 + j->task_rows;
    j->rows(&j->a, r0, r1 < j->a.w->rows ? r1 : j->a.w->rows);
}

/* Rows per task: about GEMV_TASK_BYTES of weights, at least
 * GEMV_MIN_TASKS tasks when the matrix allows, a multiple of 16. */
static int gemv_task_rows(const struct weight_view *w)
{
    size_t row_bytes = (size_t)w->cols * dtype_size(w->dtype);
    size_t rows = GEMV_TASK_BYTES / (row_bytes ? row_bytes : 1);
    size_t most = ((size_t)w->rows + GEMV_MIN_TASKS - 1) / GEMV_MIN_TASKS;
    if (rows > most)
        rows = most;
    rows = (rows + 15) / 16 * 16;
    return rows ? (int)rows : 16;
}

/* x (m rows of k) copied to rows of ldx floats (ldx >= k), rounded to
 * bf16 when `round`, and then also as bf16 (*xb, rows of ldx) when `want_xb`,
 * in the calling thread's scratch (valid until its next call); NULL when it
 * cannot grow. */
static const float *gemv_pad_x(const float *x, int m, int k, size_t ldx, bool round,
                               bool want_xb, const uint16_t **xb)
{
    size_t n = (size_t)m * ldx, bytes = n * (sizeof(float) + (want_xb ? sizeof(uint16_t) : 0));
    float *pad_buf = cpu_scratch(CPU_SCRATCH_GEMV_X, bytes);
    if (!pad_buf)
        return NULL;
    uint16_t *b = (uint16_t *)(pad_buf + n);
    for (int i = 0; i < m; i++) {
        const float *src = x + (size_t)i * k;
        float *dst = pad_buf + (size_t)i * ldx;
        if (round)
            for (int c = 0; c < k; c++)
                dst[c] = bf16_round(src[c]);
        else
            memcpy(dst, src, (size_t)k * sizeof(float));
        if (want_xb)
            for (int c = 0; c < k; c++)
                b[(size_t)i * ldx + c] = f32_to_bf16(src[c]);
    }
    *xb = want_xb ? b : NULL;
    return pad_buf;
}

/* The row stride of x for the kernels. Past GEMV_PAD_M rows they read the
 * rows' columns of one span side by side from L1; rows 2^n bytes apart map
 * to the same L1 sets and evict each other (16 rows of 4096 floats: 16 lines
 * per set, more than its ways), so they are copied to rows whose starts
 * fall 17 cache lines apart modulo 4 KiB, spreading them over every set. */
#define GEMV_PAD_M 4
#define GEMV_PAD_PHASE 272 /* floats: 1088 bytes, 17 lines */

static size_t gemv_ldx(int m, int k)
{
    if (m <= GEMV_PAD_M)
        return (size_t)k;
    return (size_t)k + (size_t)((GEMV_PAD_PHASE - k % 1024 + 1024) % 1024);
}

int cpu_gemv(float *y, const float *x, int m, const struct weight_view *w,
             enum kern_compute cm)
{
    pthread_once(&gemv_once, gemv_choose);
    const struct gemv_isa *isa = gemv_chosen;
    gemv_rows_fn rows = isa->rows;
    const int k = w->cols;
    size_t ldx = gemv_ldx(m, k);
    const uint16_t *xb = NULL;
    bool dp = cm == KERN_COMPUTE_BF16 && w->dtype == DTYPE_BF16 && isa->rows_bf16 != isa->rows;
    if (cm == KERN_COMPUTE_BF16 && w->dtype == DTYPE_BF16)
        rows = isa->rows_bf16;
    if (ldx != (size_t)k || cm == KERN_COMPUTE_BF16) {
        if (!(x = gemv_pad_x(x, m, k, ldx, cm == KERN_COMPUTE_BF16, dp, &xb)))
            return err_set(ERR_NOMEM, "out of host memory for %d x %d activations", m, k);
    }
    struct gemv_job j = {
        .a = {.y = y, .ldy = (size_t)w->rows, .x = x, .ldx = ldx, .xb = xb, .m = m, .w = w},
        .rows = rows,
        .task_rows = gemv_task_rows(w),
    };
    cpu_kernels_run(gemv_task, &j, (w->rows + j.task_rows - 1) / j.task_rows);
    return 0;
}
