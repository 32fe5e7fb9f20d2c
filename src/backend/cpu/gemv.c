/* The fused matrix-vector product of the CPU backend's linear layers for a
 * few input rows: bound by reading the weights, so each weight row is read
 * once per call and widened in registers for every input row. The kernels
 * (gemv_<isa>.c) are chosen per process by measurement: at the first call
 * with a class of weights (f32, f16, bf16, bf16 in bf16 mode) every kernel
 * this CPU runs for it is timed at 1, 4, 8 and 16 input rows on weights
 * read from memory (10-40 ms a class), and each bucket of rows takes the
 * fastest; for bf16 weights in bf16 mode the matrix product (matmul.c) is
 * a candidate too, which wins once enough rows make the product bound by
 * multiplying. SHARDSWAP_GEMV names one kernel for every call instead. */
#include "backend/cpu/linear.h"

#include <assert.h>
#include <pthread.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#endif
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "backend/cpu/cpu.h"
#include "backend/cpu/cpu_impl.h"
#include "backend/cpu/gemv_isa.h"
#include "backend/cpu/isa.h"
#include "backend/cpu/lanes.h"
#include "backend/cpu/pool.h"
#include "backend/cpu/scratch.h"
#include "backend/cpu/vec.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/timing.h"

/* A claim of a thread reads about GEMV_TASK_BYTES of weights: long enough
 * that claiming it costs nothing. It is made of steps of about
 * GEMV_STEP_BYTES, and the last steps of a lane are claimed one by one
 * (lanes.h), so two threads end a call within one step of each other. A
 * unit's rows come in multiples of 16, so claims write whole cache lines
 * of y, but for the kernels of several streams (one input row, a row at a
 * time): multiples of 4 there, so that a 4864-column row (9.5 KiB) still
 * makes small steps. */
#define GEMV_TASK_BYTES (128 << 10)
#define GEMV_STEP_BYTES (32 << 10)
#define GEMV_MIN_TASKS 8

static bool has_scalar(void)
{
    return true;
}

#if defined(__x86_64__) || defined(__i386__)
/* AMX-TILE and AMX-BF16 (CPUID leaf 7 EDX bits 24, 22), and Linux's grant
 * of the tile data to this process (asked once), unless SHARDSWAP_AMX=off
 * (or 0) turns our AMX kernels off: then the GEMV's and the matrix
 * product's AMX paths are no candidates, and an AMX machine runs what a
 * CPU with AVX512-BF16 alone runs (oneDNN's own AMX is ONEDNN_MAX_CPU_ISA's
 * to limit). */
static bool amx_granted;
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;

static void amx_ask(void)
{
    const char *env = getenv("SHARDSWAP_AMX");
    if (env && (strcmp(env, "off") == 0 || strcmp(env, "0") == 0))
        return;
    unsigned a, b, c, d;
    amx_granted = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d & (1u << 24)) && (d & (1u << 22)) &&
                  gemv_amx_enable();
}

static bool has_amx(void)
{
    if (!cpu_isa_avx512bf16())
        return false;
    pthread_once(&amx_once, amx_ask);
    return amx_granted;
}
#else
static bool has_amx(void)
{
    return false;
}
#endif

/* The kernels. Each is compiled for its instruction set (gemv_<isa>.c)
 * and reads x as `input` says for bf16 weights; `classes` are the weight
 * classes where it is a kernel of its own, the candidates a calibration
 * measures (elsewhere it runs gemv_rows_avx512's code). */
enum gemv_input {
    GEMV_IN_F32,   /* x (rounded to bf16 and widened back in bf16 mode) */
    GEMV_IN_BF16,  /* also xb: x rounded to bf16, in bf16 mode (VDPBF16PS) */
    GEMV_IN_PAIRS, /* also xp: x's columns reordered in pairs of vectors */
    GEMV_IN_AMX,   /* also xb and xv: x in bf16, and in AMX's pair layout */
};

/* What a call multiplies, and so which kernel is fastest for it. */
enum gemv_class {
    GEMV_F32,       /* f32 weights */
    GEMV_F16,       /* f16 weights */
    GEMV_BF16,      /* bf16 weights in f32 mode */
    GEMV_BF16_MODE, /* bf16 weights in bf16 mode (x rounded to bf16) */
    GEMV_CLASSES
};
static const char *const gemv_class_names[GEMV_CLASSES] = {"f32", "f16", "bf16", "bf16/bf16"};

#define C(x) (1u << (x))
#define ALL_CLASSES (C(GEMV_F32) | C(GEMV_F16) | C(GEMV_BF16) | C(GEMV_BF16_MODE))

struct gemv_kernel {
    const char *name;
    gemv_rows_fn rows; /* NULL: the call runs cpu_matmul instead */
    bool (*supported)(void);
    enum gemv_input input;
    unsigned classes;
    /* > 1: a task runs `streams` pieces by `pieces` (a lane in sub-lanes,
     * lanes.h), a candidate for one input row alone unless streams_m (other
     * calls run its pieces one by one: its rows fn) */
    int streams;
    gemv_pieces_fn pieces;
    /* its pieces fn takes several input rows in lockstep too: a candidate
     * for every bucket */
    bool streams_m;
};

bool cpu_amx_granted(void)
{
    return has_amx();
}

static const struct gemv_kernel gemv_kernels[] = {
    {"amx", gemv_rows_amx, has_amx, GEMV_IN_AMX, C(GEMV_BF16_MODE), 1, NULL, false},
    {"avx512bf16", gemv_rows_avx512bf16, cpu_isa_avx512bf16, GEMV_IN_BF16, C(GEMV_BF16_MODE), 1,
     NULL, false},
    /* the same sums read another way: one weight row at a time (a single
     * stream), or eight at once without software prefetch */
    {"avx512bf16-r1", gemv_rows_avx512bf16_r1, cpu_isa_avx512bf16, GEMV_IN_BF16, C(GEMV_BF16_MODE),
     1, NULL, false},
    {"avx512bf16-r8", gemv_rows_avx512bf16_r8, cpu_isa_avx512bf16, GEMV_IN_BF16, C(GEMV_BF16_MODE),
     1, NULL, false},
    /* the single stream with its prefetch to L1 and, further ahead, to L2 */
    {"avx512bf16-r1f", gemv_rows_avx512bf16_r1f, cpu_isa_avx512bf16, GEMV_IN_BF16,
     C(GEMV_BF16_MODE), 1, NULL, false},
    /* that stream's rows and prefetch over 2, 4 or 8 far-apart streams of
     * the thread's lane at once (its sub-lanes): one core keeps more lines
     * in flight for a few streams than for one */
    {"avx512bf16-s2", gemv_rows_avx512bf16_r1f, cpu_isa_avx512bf16, GEMV_IN_BF16, C(GEMV_BF16_MODE),
     2, gemv_pieces_avx512bf16_s, false},
    {"avx512bf16-s4", gemv_rows_avx512bf16_r1f, cpu_isa_avx512bf16, GEMV_IN_BF16, C(GEMV_BF16_MODE),
     4, gemv_pieces_avx512bf16_s, false},
    {"avx512bf16-s8", gemv_rows_avx512bf16_r1f, cpu_isa_avx512bf16, GEMV_IN_BF16, C(GEMV_BF16_MODE),
     8, gemv_pieces_avx512bf16_s, false},
    /* and with no software prefetch: on AMD EPYC Zen 4 the prefetches cost
     * more than they bring over large products in steady state, though a
     * whole decode there did not show it (gemv_avx512bf16_s.c) */
    {"avx512bf16-s2n", gemv_rows_avx512bf16_r1, cpu_isa_avx512bf16, GEMV_IN_BF16, C(GEMV_BF16_MODE),
     2, gemv_pieces_avx512bf16_sn, false},
    {"avx512bf16-s4n", gemv_rows_avx512bf16_r1, cpu_isa_avx512bf16, GEMV_IN_BF16, C(GEMV_BF16_MODE),
     4, gemv_pieces_avx512bf16_sn, false},
    /* the same sums over blocks of 3 weight rows x 8 input rows: fewer
     * loads per multiply-add where several input rows bind the product */
    {"avx512bf16-m8", gemv_rows_avx512bf16_m8, cpu_isa_avx512bf16, GEMV_IN_BF16, C(GEMV_BF16_MODE),
     1, NULL, false},
    /* and with a second prefetch, to L2 further ahead */
    {"avx512bf16-m8f", gemv_rows_avx512bf16_m8f, cpu_isa_avx512bf16, GEMV_IN_BF16,
     C(GEMV_BF16_MODE), 1, NULL, false},
    /* and with that prefetch 3 KiB ahead in each row's stream */
    {"avx512bf16-m8f3", gemv_rows_avx512bf16_m8f3, cpu_isa_avx512bf16, GEMV_IN_BF16,
     C(GEMV_BF16_MODE), 1, NULL, false},
    /* and in column spans over 12 weight rows, x's span kept in L1 */
    {"avx512bf16-m8s", gemv_rows_avx512bf16_m8s, cpu_isa_avx512bf16, GEMV_IN_BF16,
     C(GEMV_BF16_MODE), 1, NULL, false},
    {"avx512pairs", gemv_rows_avx512pairs, cpu_isa_avx512, GEMV_IN_PAIRS,
     C(GEMV_BF16) | C(GEMV_BF16_MODE), 1, NULL, false},
    {"avx512", gemv_rows_avx512, cpu_isa_avx512, GEMV_IN_F32, ALL_CLASSES, 1, NULL, false},
    {"avx512-r1", gemv_rows_avx512_r1, cpu_isa_avx512, GEMV_IN_F32, ALL_CLASSES, 1, NULL, false},
    {"avx512-m8", gemv_rows_avx512_m8, cpu_isa_avx512, GEMV_IN_F32, ALL_CLASSES, 1, NULL, false},
    /* its blocks with the far prefetch too (gemv_avx512_m8f.c) */
    {"avx512-m8f", gemv_rows_avx512_m8f, cpu_isa_avx512, GEMV_IN_F32, ALL_CLASSES, 1, NULL, false},
    /* blocks of 3 weight rows x 4 input rows without prefetch (AVX2's 16
     * registers hold their sums; gemv_avx2_m8.c), and avx2-next's rows over
     * 4, 8, 2 or 3 far-apart streams of the thread's lane at once (its
     * sub-lanes), a row of each in turn, for any number of input rows
     * (gemv_streams.h): listed before avx2 and avx2-next so that near-ties
     * keep them (AMD EPYC Zen 2, from memory: -s4 as fast as the others or
     * faster at one input row; -s2/-s3/-s4 faster at 2-16 rows on short
     * weight rows) */
    {"avx2-m8", gemv_rows_avx2_m8, cpu_isa_avx2, GEMV_IN_F32, ALL_CLASSES, 1, NULL, false},
    {"avx2-s4", gemv_rows_avx2_next, cpu_isa_avx2, GEMV_IN_F32, ALL_CLASSES, 4, gemv_pieces_avx2_s,
     true},
    {"avx2-s8", gemv_rows_avx2_next, cpu_isa_avx2, GEMV_IN_F32, ALL_CLASSES, 8, gemv_pieces_avx2_s,
     true},
    {"avx2-s2", gemv_rows_avx2_next, cpu_isa_avx2, GEMV_IN_F32, ALL_CLASSES, 2, gemv_pieces_avx2_s,
     true},
    {"avx2-s3", gemv_rows_avx2_next, cpu_isa_avx2, GEMV_IN_F32, ALL_CLASSES, 3, gemv_pieces_avx2_s,
     true},
    {"avx2", gemv_rows_avx2, cpu_isa_avx2, GEMV_IN_F32, ALL_CLASSES, 1, NULL, false},
    /* the same sums with the prefetch run on into the next block's rows
     * (GEMV_PF_NEXT) */
    {"avx2-next", gemv_rows_avx2_next, cpu_isa_avx2, GEMV_IN_F32, ALL_CLASSES, 1, NULL, false},
    /* the matrix product's primitive (matmul.c): its micro-kernels keep more
     * sums in registers than a GEMV's blocks, which wins once enough input
     * rows make the product bound by multiplying rather than by reading */
    {"matmul", NULL, has_scalar, GEMV_IN_F32, C(GEMV_BF16_MODE), 1, NULL, false},
    /* never a candidate where a vector kernel runs: only by request */
    {"scalar", gemv_rows_scalar, has_scalar, GEMV_IN_F32, 0, 1, NULL, false},
};
#define GEMV_N_KERNELS (int)(sizeof(gemv_kernels) / sizeof(gemv_kernels[0]))
static const struct gemv_kernel *const gemv_scalar_kernel = &gemv_kernels[GEMV_N_KERNELS - 1];

/* Input rows per call, in buckets chosen for separately: one row is bound
 * by reading the weights; from a few rows on, by widening and multiplying,
 * where the kernels differ. Calibrated at the bucket's largest m. Weight
 * rows longer than GEMV_LONG_ROW_BYTES have buckets of their own,
 * calibrated on rows of CAL_LONG_COLS: how a kernel reads memory depends on
 * where its rows end (AMD EPYC Zen 2, 2 threads, bf16: one input row over
 * 4864 x 896 weights took 0.45 ms with gemv_avx2.c's prefetch and 0.48 with
 * none, over 8192 x 2048 1.31-1.37 and 1.11-1.17; 4 input rows over 4864 x
 * 896 0.46 ms by blocks of 4 x 4 and 0.68 by 3 x 4, over 8192 x 2048 1.63
 * and 1.39). */
#define GEMV_M_BUCKETS 4
#define GEMV_TIERS 3 /* short, long and extra long rows */
#define GEMV_BUCKETS (GEMV_TIERS * GEMV_M_BUCKETS)
#define GEMV_LONG_ROW_BYTES 2048
/* Rows longer than this (a down projection's: llama-3.2-1b's 8192 bf16
 * columns, 16 KiB) have a third set, calibrated on rows of CAL_XLONG_COLS:
 * where a block's far prefetch lands depends on the rows' length
 * (gemv_body.h, gemv_avx512bf16_m8f3.c), and on AMD EPYC Zen 4 at 8 input
 * rows -m8f read rows of 4 KiB 8-15% faster than -m8f3 and rows of 16 KiB
 * 20-30% slower, while rows of 8 KiB, which the long set is calibrated on,
 * ran about as fast with either. */
#define GEMV_XLONG_ROW_BYTES 12288
/* the input rows a bucket is calibrated at, the same in every tier */
static const int gemv_tier_m[GEMV_M_BUCKETS] = {1, 4, 8, 16};
static const char *const gemv_bucket_names[GEMV_BUCKETS] = {
    "m1",        "m2-4",       "m5-8",     "m9-16",      "m1-long",    "m2-4-long",
    "m5-8-long", "m9-16-long", "m1-xlong", "m2-4-xlong", "m5-8-xlong", "m9-16-xlong"};

static int gemv_bucket(int m, size_t row_bytes)
{
    int b = 0;
    while (b < GEMV_M_BUCKETS - 1 && m > gemv_tier_m[b])
        b++;
    const int tier = row_bytes > GEMV_XLONG_ROW_BYTES ? 2 : row_bytes > GEMV_LONG_ROW_BYTES ? 1 : 0;
    return b + tier * GEMV_M_BUCKETS;
}

/* The calibration's operands: 4 MiB of weights (twice L2's size here),
 * flushed from every cache before each timing, so the kernels read them
 * from memory as a decode step does (a model's weights are read once per
 * step and exceed the last-level cache), over the threads a call uses.
 * Timed from the caches instead (1024 x 1024, until this was found), the
 * kernels ranked by their work per byte, which is not what decides from
 * memory: there AMX's loads of 16 rows at once keep more lines in flight
 * than VDPBF16PS's four rows (4 MiB, 2 threads: 130 against 155 us), and
 * qwen2.5-0.5b's decode went from 22.7 to 28.1 tok/s (2 threads, Xeon with
 * AMX) once m1 took AMX. Cold timings of 1 MiB still favoured VDPBF16PS:
 * too short for the difference in a stream to show. Repetitions are
 * interleaved so a pause of the machine hits every candidate alike; the
 * fastest of them counts. Each timing includes the call's preparation of x
 * (the reordering avx512pairs needs), as a real call does. */
#define CAL_BYTES ((size_t)4 << 20)
#define CAL_COLS 1024
#define CAL_LONG_COLS 4096 /* the long rows' buckets' */
#define CAL_XLONG_COLS 8192 /* the extra long rows' */
/* One input row over long rows from 4 MiB ranked the kernels otherwise
 * than a model's calls do (AMD EPYC Zen 2, bf16: avx2-next won 6 of 8
 * processes over avx2-s4, whose decode of llama-3.2-1b was 1.13-1.18x
 * avx2-next's; from 16 MiB, avx2-s4 or -s8 in 5 of 5): its bucket is
 * timed over more */
#define CAL_LONG1_BYTES ((size_t)16 << 20)
/* repetitions per bucket: more for one row, decode's case, where the
 * kernels differ by 10-20% and a pause of the machine can flip them (on
 * the 2-core Xeon with AMX, with 5 under other builds' load, m1 went to
 * amx in some processes and to avx512bf16-r1 in others, though amx read
 * 10-20% slower in steady state; each repetition of m1 costs about 6 ms
 * there, 13 candidates on 4 MiB; on AMD EPYC Zen 2 with 5 for long rows,
 * m1-long went to avx2-next in 2 of 8 processes, which read 896 x 4864
 * bf16 20% slower than avx2-s4 in steady state) */
static const int cal_reps[GEMV_M_BUCKETS] = {9, 3, 3, 3};
#define CAL_MARGIN 0.03

/* The choice per class and bucket (calibrated on first use of the class),
 * and a kernel that replaces every choice (SHARDSWAP_GEMV, cpu_gemv_force). */
static const struct gemv_kernel *gemv_chosen[GEMV_CLASSES][GEMV_BUCKETS];
static double gemv_cal_ms[GEMV_CLASSES];
static atomic_bool gemv_ready[GEMV_CLASSES];
static pthread_mutex_t gemv_lock = PTHREAD_MUTEX_INITIALIZER; /* guards the calibration */
static const struct gemv_kernel *_Atomic gemv_forced;
static pthread_once_t gemv_env_once = PTHREAD_ONCE_INIT;

/* "amx, avx512bf16, ... matmul or scalar": the table's names, made once */
static char gemv_names[GEMV_N_KERNELS * 24];
static pthread_once_t gemv_names_once = PTHREAD_ONCE_INIT;

_Static_assert(offsetof(struct gemv_kernel, name) == 0, "cpu_names_join reads the name first");

static void gemv_names_make(void)
{
    cpu_names_join(gemv_names, sizeof gemv_names, gemv_kernels, sizeof gemv_kernels[0],
                   GEMV_N_KERNELS);
}

const char *cpu_gemv_kernel_names(void)
{
    pthread_once(&gemv_names_once, gemv_names_make);
    return gemv_names;
}

static int gemv_find(const char *name, const struct gemv_kernel **out)
{
    for (int i = 0; i < GEMV_N_KERNELS; i++)
        if (strcmp(gemv_kernels[i].name, name) == 0) {
            if (!gemv_kernels[i].supported())
                return err_set(ERR_UNSUPPORTED, "this CPU lacks %s", name);
            *out = &gemv_kernels[i];
            return 0;
        }
    return err_set(ERR_INVALID, "unknown GEMV kernel \"%s\" (expected %s)", name,
                   cpu_gemv_kernel_names());
}

static void gemv_read_env(void)
{
    const char *req = getenv("SHARDSWAP_GEMV");
    const struct gemv_kernel *k;
    if (!req || !*req)
        return;
    if (gemv_find(req, &k) < 0) {
        fprintf(stderr, "shardswap: SHARDSWAP_GEMV: %s; choosing by measurement\n", err_msg());
        return;
    }
    gemv_forced = k;
}

static enum dtype gemv_class_dtype(enum gemv_class c)
{
    return c == GEMV_F32 ? DTYPE_F32 : c == GEMV_F16 ? DTYPE_F16 : DTYPE_BF16;
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

/* x (m rows of k) as kernel k reads it: rows of ldx floats (gemv_ldx),
 * rounded to bf16 in bf16 mode, and also as bf16 (xb) or with each whole
 * 32 columns in even-then-odd order (xp) where k reads those for bf16
 * weights; all in the calling thread's scratch (valid until its next call).
 * Fills a for rows of w into y. */
/* Bytes of the buffer gemv_fill needs (0: it reads x as it is). */
static size_t gemv_prep_bytes(const struct gemv_kernel *k, int m, const struct weight_view *w,
                              enum kern_compute cm)
{
    const bool bf16w = w->dtype == DTYPE_BF16, round = cm == KERN_COMPUTE_BF16;
    const bool want_xv = k->input == GEMV_IN_AMX && bf16w && round;
    const bool want_xb = (k->input == GEMV_IN_BF16 || want_xv) && bf16w && round;
    const bool want_xp = k->input == GEMV_IN_PAIRS && bf16w;
    const size_t ldx = gemv_ldx(m, w->cols);
    if (ldx == (size_t)w->cols && !round && !want_xp)
        return 0;
    const size_t n = (size_t)m * ldx;
    /* rounded up to whole cache lines, so buffers laid end to end align */
    return (n * (sizeof(float) + (want_xb ? sizeof(uint16_t) : 0) +
                 (want_xv ? sizeof(uint16_t) : 0) + (want_xp ? sizeof(float) : 0)) +
            63) /
           64 * 64;
}

/* gemv_prepare into pad (gemv_prep_bytes of them; NULL when that is 0). */
static void gemv_fill(const struct gemv_kernel *k, float *y, const float *x, int m,
                      const struct weight_view *w, enum kern_compute cm, struct gemv_args *a,
                      float *pad)
{
    const int cols = w->cols;
    const bool bf16w = w->dtype == DTYPE_BF16, round = cm == KERN_COMPUTE_BF16;
    const bool want_xv = k->input == GEMV_IN_AMX && bf16w && round;
    const bool want_xb = (k->input == GEMV_IN_BF16 || want_xv) && bf16w && round;
    const bool want_xp = k->input == GEMV_IN_PAIRS && bf16w;
    const size_t ldx = gemv_ldx(m, cols);
    *a = (struct gemv_args){.y = y, .ldy = (size_t)w->rows, .x = x, .ldx = ldx, .m = m, .w = w};
    if (!pad)
        return;
    const size_t n = (size_t)m * ldx;
    float *xp = want_xp ? pad + n : NULL;
    uint16_t *xb = want_xb ? (uint16_t *)(pad + n) : NULL;
    uint16_t *xv = want_xv ? xb + n : NULL;
    const int whole = cols / 32 * 32;
    for (int i = 0; i < m; i++) {
        const float *src = x + (size_t)i * cols;
        float *dst = pad + (size_t)i * ldx;
        if (round)
            vec_round_bf16(dst, src, (size_t)cols);
        else
            memcpy(dst, src, (size_t)cols * sizeof(float));
        if (xb)
            vec_to_bf16(xb + (size_t)i * ldx, src, (size_t)cols);
        if (xp) {
            float *p = xp + (size_t)i * ldx;
            for (int c = 0; c < whole; c += 32)
                for (int j = 0; j < 16; j++) {
                    p[c + j] = dst[c + 2 * j];
                    p[c + 16 + j] = dst[c + 2 * j + 1];
                }
        }
    }
    if (xv) {
        /* every row's xb in AMX's pair layout, on the calling thread while
         * the pool waits: pair by pair in xv's order (gemv_amx.c), where
         * a column at a time, row by row, was a quarter of a 16-row call's
         * time at 8 input rows of 4864 columns (perf; 23.1 -> 17.9 us a
         * call, best of 2000) */
#if defined(__x86_64__)
        gemv_amx_pack_x(xv, xb, ldx, m, cols);
#else
        for (int i = 0; i < m; i++)
            for (int c = 0; c < cols; c++)
                xv[((size_t)(c / 2) * m + i) * 2 + c % 2] = xb[(size_t)i * ldx + c];
#endif
    }
    a->x = pad;
    a->xb = xb;
    a->xp = xp;
    a->xv = xv;
}

static int gemv_prepare(const struct gemv_kernel *k, float *y, const float *x, int m,
                        const struct weight_view *w, enum kern_compute cm, struct gemv_args *a)
{
    const size_t bytes = gemv_prep_bytes(k, m, w, cm);
    float *pad = bytes ? cpu_scratch(CPU_SCRATCH_GEMV_X, bytes) : NULL;
    if (bytes && !pad)
        return err_set(ERR_NOMEM, "out of host memory for %d x %d activations", m, w->cols);
    gemv_fill(k, y, x, m, w, cm, a, pad);
    return 0;
}

/* n bytes at p out of every cache level (and written back): the next read
 * comes from memory. CLFLUSHOPT where the CPU has it (CPUID leaf 7 EBX bit
 * 23: the flushes overlap, a few times faster than CLFLUSH's), else
 * CLFLUSH; where there is neither the timings are of cached weights. */
#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("clflushopt"))) static void flush_opt(const char *p, size_t n)
{
    for (size_t off = 0; off < n; off += 64)
        _mm_clflushopt((void *)(p + off)); /* takes a non-const pointer; writes nothing */
    _mm_sfence();
}

static bool has_clflushopt(void)
{
    unsigned a, b, c, d;
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & (1u << 23));
}

static void flush_lines(const char *p, size_t n, bool opt)
{
    if (opt) {
        flush_opt(p, n);
        return;
    }
    for (size_t off = 0; off < n; off += 64)
        _mm_clflush(p + off);
    _mm_mfence();
}
#else
static bool has_clflushopt(void)
{
    return false;
}

static void flush_lines(const char *p, size_t n, bool opt)
{
    (void)p;
    (void)n;
    (void)opt;
}
#endif

#define FLUSH_TASK_BYTES ((size_t)1 << 20)

struct flush_job {
    const char *p;
    size_t n;
    bool opt;
};

static void flush_task(void *ctx, int task)
{
    const struct flush_job *j = ctx;
    size_t off = (size_t)task * FLUSH_TASK_BYTES;
    flush_lines(j->p + off, j->n - off < FLUSH_TASK_BYTES ? j->n - off : FLUSH_TASK_BYTES, j->opt);
}

/* The flushes split over the threads a call would use: one core's flushes
 * alone took about as long as the timing that follows. */
void cpu_cache_flush(const void *p, size_t n)
{
    struct flush_job j = {p, n, has_clflushopt()};
    cpu_kernels_run(flush_task, &j, (int)((n + FLUSH_TASK_BYTES - 1) / FLUSH_TASK_BYTES));
}

/* A call's steps are units of about GEMV_STEP_BYTES of weight rows, or,
 * with a kernel of several streams, one unit of each of `streams`
 * sub-lanes (units of about GEMV_STEP_BYTES / streams); the pool's tasks
 * take them in claims of `per` steps from their lanes, the last `tail` of
 * a lane one by one (lanes.h). */
struct gemv_job {
    struct gemv_args a;
    gemv_rows_fn rows;
    gemv_pieces_fn pieces; /* with streams > 1 */
    int streams;
    int task_rows; /* rows per unit */
    int tasks;     /* units */
    int per, tail; /* steps per claim; steps at a lane's end claimed alone (0: a
                    * step per pool task, cpu_gemv_split_claims) */
    struct cpu_lanes lanes;
};

/* Rows per unit: about `bytes` / streams of weights, at least
 * GEMV_MIN_TASKS units per stream when the matrix allows, a multiple of
 * `gran` (16, or 4 for the kernels of streams). */
static int gemv_task_rows(const struct weight_view *w, int streams, int gran, size_t bytes)
{
    size_t row_bytes = (size_t)w->cols * dtype_size(w->dtype);
    size_t rows = bytes / (size_t)streams / (row_bytes ? row_bytes : 1);
    size_t most = ((size_t)w->rows + GEMV_MIN_TASKS * (size_t)streams - 1) /
                  (GEMV_MIN_TASKS * (size_t)streams);
    if (rows > most)
        rows = most;
    rows = (rows + (size_t)gran / 2) / (size_t)gran * (size_t)gran;
    return rows ? (int)rows : gran;
}

/* j's units over w's rows and its claims (a single call then puts them in
 * lanes of their own; a group's are in the group's lanes) */
static void gemv_job_init(struct gemv_job *j, const struct gemv_kernel *k,
                          const struct weight_view *w)
{
    j->rows = k->rows;
    j->pieces = k->streams > 1 ? k->pieces : NULL;
    j->streams = k->streams > 1 ? k->streams : 1;
    if (!cpu_gemv_claims()) {
        /* a step of GEMV_TASK_BYTES per pool task, as before the claims */
        j->task_rows = gemv_task_rows(w, j->streams, 16, GEMV_TASK_BYTES);
        j->tasks = (w->rows + j->task_rows - 1) / j->task_rows;
        j->per = 1;
        j->tail = 0;
        return;
    }
    j->task_rows = gemv_task_rows(w, j->streams, j->pieces ? 4 : 16, GEMV_STEP_BYTES);
    j->tasks = (w->rows + j->task_rows - 1) / j->task_rows;
    const size_t step_bytes =
        (size_t)j->streams * (size_t)j->task_rows * (size_t)w->cols * dtype_size(w->dtype);
    j->per = cpu_lanes_claim_steps(GEMV_TASK_BYTES, step_bytes);
#if defined(__x86_64__)
    if (k->rows == gemv_rows_amx && j->task_rows == 16) {
        /* claims of whole runs of the tiles it takes together, and of 2
         * blocks at least, so a block's sums are put while the next one's
         * loads are in flight (gemv_amx.c; a claim is one call) */
        const int g = gemv_amx_groups(w->ld * dtype_size(w->dtype));
        const int want = j->per > 2 ? j->per : 2;
        j->per = (want + g - 1) / g * g;
    }
#endif
    j->tail = cpu_lanes_claim_tail(j->per);
}

/* a task's units (lanes.h) are the pieces a pieces kernel takes */
_Static_assert(CPU_LANES_STREAMS_MAX <= GEMV_STREAMS_MAX,
               "a step of sub-lanes must fit a gemv_pieces_fn call");

/* j's rows of units [c, c + n) as a piece */
static struct gemv_piece gemv_units_piece(const struct gemv_job *j, int c, int n)
{
    const int r0 = c * j->task_rows, r1 = r0 + n * j->task_rows;
    return (struct gemv_piece){&j->a, r0, r1 < j->a.w->rows ? r1 : j->a.w->rows};
}

/* j's rows of unit c */
static void gemv_chunk(const struct gemv_job *j, int c)
{
    const struct gemv_piece p = gemv_units_piece(j, c, 1);
    j->rows(&j->a, p.r0, p.r1);
}

/* steps [step, step + count) of j (cpu_lanes_steps_fn): each sub-lane's
 * run of units as one piece (its rows are contiguous) */
static void gemv_steps(void *ctx, int step, int count)
{
    struct gemv_job *j = ctx;
    int first[CPU_LANES_STREAMS_MAX], n[CPU_LANES_STREAMS_MAX];
    struct gemv_piece p[CPU_LANES_STREAMS_MAX];
    const int runs = cpu_lanes_runs(&j->lanes, step, count, first, n);
    for (int k = 0; k < runs; k++)
        p[k] = gemv_units_piece(j, first[k], n[k]);
    if (j->pieces) {
        j->pieces(p, runs);
        return;
    }
    for (int k = 0; k < runs; k++)
        j->rows(&j->a, p[k].r0, p[k].r1);
}

static void gemv_task(void *ctx, int task)
{
    struct gemv_job *j = ctx;
    cpu_lanes_task(&j->lanes, task, gemv_steps, j);
}

/* j's call on the pool: its units in lanes (of sub-lanes), in claims */
static void gemv_job_run(struct gemv_job *j)
{
    cpu_kernels_run(gemv_task, j,
                    j->tail
                        ? cpu_lanes_init_claims(&j->lanes, j->tasks, j->streams, j->per, j->tail)
                        : cpu_lanes_init_streams(&j->lanes, j->tasks, j->streams));
}

/* The calibration's weights in memory like a device arena's: whole huge
 * pages where the kernel gives them (the TLB misses of 4 KiB pages, and
 * where a buffer starts in its page, changed which kernel won). */
#define CAL_HUGE ((size_t)2 << 20)

static char *cal_weights_alloc(size_t bytes)
{
    void *p = NULL;
    size_t n = (bytes + CAL_HUGE - 1) / CAL_HUGE * CAL_HUGE;
    if (posix_memalign(&p, CAL_HUGE, n) != 0)
        return NULL;
#ifdef MADV_HUGEPAGE
    (void)madvise(p, n, MADV_HUGEPAGE);
#endif
    return p;
}

/* Times every candidate of class c as a call from this thread runs (over
 * the pool, or alone) and keeps the fastest per bucket. A class with one
 * candidate takes it unmeasured; failing to allocate the operands takes the
 * first candidate. Under gemv_lock (no pool task calls a GEMV, so the pool
 * is free to run these). */
static void gemv_calibrate(enum gemv_class c)
{
    const struct gemv_kernel *cand[GEMV_N_KERNELS];
    int n = 0;
    for (int i = 0; i < GEMV_N_KERNELS; i++)
        if ((gemv_kernels[i].classes & C(c)) && gemv_kernels[i].supported())
            cand[n++] = &gemv_kernels[i];
    if (n == 0)
        cand[n++] = gemv_scalar_kernel;
    for (int b = 0; b < GEMV_BUCKETS; b++)
        gemv_chosen[c][b] = cand[0];
    if (n == 1)
        return;
    double t0 = time_now();
    const enum dtype t = gemv_class_dtype(c);
    const int mmax = gemv_tier_m[GEMV_M_BUCKETS - 1];
    const int rows = (int)(CAL_LONG1_BYTES / (CAL_COLS * dtype_size(t)));
    char *wd = cal_weights_alloc(CAL_LONG1_BYTES);
    /* x long enough for the long rows' buckets too */
    float *x = malloc((size_t)mmax * CAL_XLONG_COLS * sizeof(float));
    float *y = malloc((size_t)mmax * rows * sizeof(float));
    if (wd && x && y) {
        /* small values of every sign: no subnormals, no overflow */
        for (size_t i = 0; i < (size_t)rows * CAL_COLS; i++) {
            float v = (float)((int)(i * 7919 % 13) - 6) * 0.01f;
            if (t == DTYPE_F32)
                ((float *)wd)[i] = v;
            else
                ((uint16_t *)wd)[i] = t == DTYPE_F16 ? f32_to_f16(v) : f32_to_bf16(v);
        }
        for (size_t i = 0; i < (size_t)mmax * CAL_XLONG_COLS; i++)
            x[i] = (float)((int)(i % 11) - 5) * 0.1f;
        const enum kern_compute cm = c == GEMV_BF16_MODE ? KERN_COMPUTE_BF16 : KERN_COMPUTE_F32;
        for (int b = 0; b < GEMV_BUCKETS; b++) {
            /* the same bytes as rows of CAL_LONG_COLS for long rows, of
             * CAL_XLONG_COLS for extra long ones */
            static const int tier_cols[GEMV_TIERS] = {CAL_COLS, CAL_LONG_COLS, CAL_XLONG_COLS};
            const int tier = b / GEMV_M_BUCKETS, bm = b % GEMV_M_BUCKETS, m = gemv_tier_m[bm];
            const int cols = tier_cols[tier];
            const size_t bytes = tier > 0 && bm == 0 ? CAL_LONG1_BYTES : CAL_BYTES;
            struct weight_view w = {.dtype = t,
                                    .data = wd,
                                    .rows = (int)(bytes / ((size_t)cols * dtype_size(t))),
                                    .cols = cols,
                                    .ld = (size_t)cols};
            double best[GEMV_N_KERNELS];
            for (int i = 0; i < n; i++)
                best[i] = 1e30;
            for (int rep = 0; rep < cal_reps[bm]; rep++)
                for (int i = 0; i < n; i++) {
                    if (cand[i]->streams > 1 && !cand[i]->streams_m && m > 1)
                        continue; /* one row's kernel: best stays 1e30 */
                    struct gemv_job j;
                    gemv_job_init(&j, cand[i], &w);
                    cpu_cache_flush(wd, bytes);
                    double s = time_now();
                    if (!j.rows) {
                        if (cpu_matmul(y, x, m, &w, cm) < 0)
                            continue;
                    } else {
                        if (gemv_prepare(cand[i], y, x, m, &w, cm, &j.a) < 0)
                            continue;
                        gemv_job_run(&j);
                    }
                    s = time_now() - s;
                    if (s < best[i])
                        best[i] = s;
                }
            /* candidates are listed best first by instruction set: a later
             * one must beat the winner by CAL_MARGIN, so near-ties (which
             * flip with the machine's noise) keep the earlier one */
            int win = 0;
            for (int i = 1; i < n; i++)
                if (best[i] * (1.0 + CAL_MARGIN) < best[win])
                    win = i;
            gemv_chosen[c][b] = cand[win];
        }
    }
    free(wd);
    free(x);
    free(y);
    gemv_cal_ms[c] = (time_now() - t0) * 1e3;
}

static void gemv_ensure(enum gemv_class c)
{
    if (atomic_load(&gemv_ready[c]))
        return;
    pthread_mutex_lock(&gemv_lock);
    if (!atomic_load(&gemv_ready[c])) {
        gemv_calibrate(c);
        atomic_store(&gemv_ready[c], true);
    }
    pthread_mutex_unlock(&gemv_lock);
}

/* a weight row's bytes, which pick one row's bucket */
static size_t gemv_row_bytes(const struct weight_view *w)
{
    return (size_t)w->cols * dtype_size(w->dtype);
}

static const struct gemv_kernel *gemv_pick(enum gemv_class c, int m, size_t row_bytes)
{
    pthread_once(&gemv_env_once, gemv_read_env);
    const struct gemv_kernel *k = gemv_forced;
    /* a forced kernel runs every class, but the matrix product only its own
     * (cpu_gemv_rows_f32's callers need a kernel of rows) */
    if (k && (k->rows || (k->classes & C(c))))
        return k;
    gemv_ensure(c);
    return gemv_chosen[c][gemv_bucket(m, row_bytes)];
}

const char *cpu_gemv_kernels(void)
{
    static _Thread_local char buf[1536];
    pthread_once(&gemv_env_once, gemv_read_env);
    const struct gemv_kernel *f = gemv_forced;
    if (f) {
        snprintf(buf, sizeof(buf), "%s (every call, by request)", f->name);
        return buf;
    }
    size_t used = 0;
    double ms = 0;
    buf[0] = '\0';
    for (int c = 0; c < GEMV_CLASSES; c++) {
        gemv_ensure(c);
        ms += gemv_cal_ms[c];
        used += (size_t)snprintf(buf + used, sizeof(buf) - used, "%s%s:", c ? "; " : "",
                                 gemv_class_names[c]);
        bool same = true;
        for (int b = 1; b < GEMV_BUCKETS; b++)
            same = same && gemv_chosen[c][b] == gemv_chosen[c][0];
        for (int b = 0; b < (same ? 1 : GEMV_BUCKETS) && used < sizeof(buf); b++)
            used += (size_t)snprintf(buf + used, sizeof(buf) - used, "%s %s%s%s", b ? "," : "",
                                     same ? "" : gemv_bucket_names[b], same ? "" : " ",
                                     gemv_chosen[c][b]->name);
        if (used >= sizeof(buf))
            break;
    }
    if (used < sizeof(buf))
        snprintf(buf + used, sizeof(buf) - used, " (measured in %.0f ms)", ms);
    return buf;
}

int cpu_gemv_force(const char *name)
{
    pthread_once(&gemv_env_once, gemv_read_env);
    const struct gemv_kernel *k = NULL;
    int rc = name ? gemv_find(name, &k) : 0;
    if (rc == 0)
        gemv_forced = k;
    return rc;
}

static enum gemv_class gemv_class_of(const struct weight_view *w, enum kern_compute cm)
{
    switch (w->dtype) {
    case DTYPE_F16:
        return GEMV_F16;
    case DTYPE_BF16:
        return cm == KERN_COMPUTE_BF16 ? GEMV_BF16_MODE : GEMV_BF16;
    default:
        return GEMV_F32;
    }
}

gemv_rows_fn cpu_gemv_rows_f32(int m)
{
    return gemv_pick(GEMV_F32, m, 0)->rows;
}

int cpu_gemv(float *y, const float *x, int m, const struct weight_view *w, enum kern_compute cm)
{
    const struct gemv_kernel *k = gemv_pick(gemv_class_of(w, cm), m, gemv_row_bytes(w));
    if (!k->rows)
        return cpu_matmul(y, x, m, w, cm);
    struct gemv_job j;
    gemv_job_init(&j, k, w);
    int rc = gemv_prepare(k, y, x, m, w, cm, &j.a);
    if (rc < 0)
        return rc;
    gemv_job_run(&j);
    return 0;
}

/* units c[k] of the group's jobs job[k] as one step's pieces
 * (cpu_lanes_units_fn): a pieces kernel (every job has the same one) takes
 * them together, another kernel one by one (one stream: one unit) */
static int gemv_group_units(void *ctx, const int *job, const int *c, int count)
{
    const struct gemv_job *gj = ctx;
    if (!gj[job[0]].pieces) {
        for (int k = 0; k < count; k++)
            gemv_chunk(&gj[job[k]], c[k]);
        return 0;
    }
    struct gemv_piece p[CPU_LANES_STREAMS_MAX];
    for (int k = 0; k < count; k++)
        p[k] = gemv_units_piece(&gj[job[k]], c[k], 1);
    gj[job[0]].pieces(p, count);
    return 0;
}

/* A group's call in one stream a lane: its units are the jobs' units one
 * job after the other (job i's [first[i], first[i + 1])). */
struct gemv_group {
    const struct gemv_job *jobs;
    const int *first;
    struct cpu_lanes lanes;
};

/* steps [step, step + count) of a group in one stream (cpu_lanes_steps_fn):
 * the claim's run of units, each job's part of it one call of the job's
 * rows kernel. Why not unit by unit: the AMX kernel configures its tiles
 * per call, puts a block's sums into y during the next block, and takes
 * its rows in groups (gemv_amx.c), so a call of one unit (16 rows) did
 * all of that per block; each row is computed by the same code either
 * way, so the results do not change. */
static void gemv_group_steps(void *ctx, int step, int count)
{
    const struct gemv_group *g = ctx;
    int first[CPU_LANES_STREAMS_MAX], n[CPU_LANES_STREAMS_MAX];
    const int runs = cpu_lanes_runs(&g->lanes, step, count, first, n);
    for (int k = 0; k < runs; k++) {
        int i = 0;
        for (int u = first[k], end = first[k] + n[k]; u < end;) {
            while (g->first[i + 1] <= u)
                i++;
            const int stop = end < g->first[i + 1] ? end : g->first[i + 1];
            const struct gemv_piece p = gemv_units_piece(&g->jobs[i], u - g->first[i], stop - u);
            g->jobs[i].rows(&g->jobs[i].a, p.r0, p.r1);
            u = stop;
        }
    }
}

static void gemv_group_task(void *ctx, int task)
{
    struct gemv_group *g = ctx;
    cpu_lanes_task(&g->lanes, task, gemv_group_steps, g);
}

int cpu_gemv_group(const struct kern_linear_job *jobs, int n, enum kern_compute cm)
{
    /* each job's kernel, task split and prepared x exactly as cpu_gemv's;
     * a job that reads the same x as the one before it (a gate and an up
     * projection) with the same kernel and width shares its preparation */
    size_t bytes = 0;
    const struct gemv_kernel *kern[CPU_GEMV_GROUP_MAX];
    bool shares[CPU_GEMV_GROUP_MAX];
    assert(n <= CPU_GEMV_GROUP_MAX);
    /* jobs the matrix product takes run first, each on its own */
    int rest = 0;
    struct kern_linear_job left[CPU_GEMV_GROUP_MAX];
    for (int i = 0; i < n; i++) {
        if (gemv_pick(gemv_class_of(&jobs[i].w, cm), jobs[i].m, gemv_row_bytes(&jobs[i].w))->rows) {
            left[rest++] = jobs[i];
            continue;
        }
        int rc = cpu_matmul(jobs[i].y, jobs[i].x, jobs[i].m, &jobs[i].w, cm);
        if (rc < 0)
            return rc;
    }
    if (rest == 0)
        return 0;
    jobs = left;
    n = rest;
    for (int i = 0; i < n; i++) {
        const struct kern_linear_job *j = &jobs[i];
        assert(j->m <= CPU_GEMV_MAX_M);
        kern[i] = gemv_pick(gemv_class_of(&j->w, cm), j->m, gemv_row_bytes(&j->w));
        shares[i] = i > 0 && j->x == jobs[i - 1].x && j->m == jobs[i - 1].m &&
                    j->w.cols == jobs[i - 1].w.cols && j->w.dtype == jobs[i - 1].w.dtype &&
                    kern[i] == kern[i - 1];
        if (!shares[i])
            bytes += gemv_prep_bytes(kern[i], j->m, &j->w, cm);
    }
    struct gemv_job gj[CPU_GEMV_GROUP_MAX];
    int first[CPU_GEMV_GROUP_MAX + 1];
    char *pad = bytes ? cpu_scratch(CPU_SCRATCH_GEMV_X, bytes) : NULL;
    if (bytes && !pad)
        return err_set(ERR_NOMEM, "out of host memory for the activations of %d products", n);
    first[0] = 0;
    for (int i = 0; i < n; i++) {
        const struct kern_linear_job *j = &jobs[i];
        gemv_job_init(&gj[i], kern[i], &j->w);
        if (shares[i]) {
            gj[i].a = gj[i - 1].a;
            gj[i].a.y = j->y;
            gj[i].a.ldy = (size_t)j->w.rows;
            gj[i].a.w = &j->w;
        } else {
            const size_t b = gemv_prep_bytes(kern[i], j->m, &j->w, cm);
            gemv_fill(kern[i], j->y, j->x, j->m, &j->w, cm, &gj[i].a, b ? (float *)pad : NULL);
            pad += b;
        }
        first[i + 1] = first[i] + gj[i].tasks;
    }
    /* in one set of lanes: lanes per job gave the two threads half of each
     * small product (a 128-row k or v to one thread while the other
     * waited); in sub-lanes when every job has the same kernel of streams
     * (a stream may then run from one job's rows into the next's) */
    bool streams = gj[0].pieces != NULL;
    for (int i = 1; i < n; i++)
        streams = streams && kern[i] == kern[0];
    /* claims as long as the jobs' (the first's: they differ only where the
     * shapes do), the last few steps alone */
    const bool claims = gj[0].tail > 0;
    if (streams)
        return claims ? cpu_lanes_run_group_claims(first, n, gj[0].streams, gj[0].per, gj[0].tail,
                                                   gemv_group_units, gj)
                      : cpu_lanes_run_group_streams(first, n, gj[0].streams, gemv_group_units, gj);
    for (int i = 0; i < n; i++)
        gj[i].pieces = NULL; /* a step of one stream: one unit, run by rows */
    if (!claims)
        return cpu_lanes_run_group_streams(first, n, 1, gemv_group_units, gj);
    struct gemv_group g = {.jobs = gj, .first = first};
    cpu_kernels_run(gemv_group_task, &g,
                    cpu_lanes_init_claims(&g.lanes, first[n], 1, gj[0].per, gj[0].tail));
    return 0;
}
