/* The CPU linear layer with weights in GGUF's block types (core/quant.h),
 * computed in place: no weight is ever dequantized to a whole copy.
 *
 * - f32 mode, the exact one: blocks of 16 weight rows dequantized into a
 *   thread's scratch and multiplied by the f32 GEMV kernel (gemv.c's
 *   choice) for a few input rows; for many, cpu_matmul's f32 product, which
 *   widens a block of rows per task the same way (dtype_to_f32).
 * - bf16 mode, llama.cpp's: each input row quantized once per call (to
 *   Q8_0 blocks for the 32-element types, Q8_K for the K-quants) and every
 *   weight row times it in integer dot products (qdot.h), split by weight
 *   rows over the pool. Three kinds of kernel: one weight row at a time
 *   against each input row (vnni, vnni-near, avx2; vnni-far and avx2-far
 *   the same over four far-apart streams of a thread's lane in lockstep,
 *   its sub-lanes: lanes.h, qdot_far.h);
 *   two weight rows' blocks unpacked once into the lanes of one vector a
 *   quad and multiplied with every input row, x laid out to match
 *   (vnni-mr; qdot_mr_body.h: decode batches); or each weight row
 *   unpacked once and multiplied with 8 input rows at a time, packed one
 *   row a lane (vnni-m8, avx2-m8; qdot_tile_body.h), or for the types of
 *   32 four weight rows at a time, an input row a pair of lanes on 512
 *   bits (vnni-m8z, qdot_tile512.h: x packed by qdot_pack_x_pairs); or
 *   AMX-INT8 tiles of 16 weight rows x 16 input rows (amx, qdot_amx.c:
 *   the K-quants' sub-block scales folded into the unpacked weights); or,
 *   for decode batches, x's few rows times 16 weight rows laid out in the
 *   tiles' VNNI layout (amx-few, qdot_amx_few.c); or, for weights packed
 *   once in groups of 16 rows when their blob was filled (weight.h's
 *   WEIGHT_PACK_X16, core/qpack.h: the K-quants where cpu_qlinear_packs says so),
 *   a group's block with a row a lane against each input row's broadcast
 *   quads (vnni-x16, qdot_x16.c), the only kernel those views take (and
 *   scalar-x16, the reference on them); all give the same bits.
 *   The kernel is chosen per process, type and bucket of rows (1, 2-4,
 *   5-8, 9-15, 16 and more) by measurement, as the GEMV's are: at the
 *   first call with a type, each candidate is timed on 4 MiB of that
 *   type's blocks flushed from the caches, at 1, 3, 6, 12 and 32 input
 *   rows, best of 5, 3, 3, 3 and 3, interleaved (vnni-mr not at 32: every
 *   row's x goes by each pair of weight rows, which a prefill's many rows
 *   stream from L3); a later
 *   candidate must win by 3%. SHARDSWAP_QDOT=NAME (one of q_kernels'
 *   names: cpu_qlinear_kernel_names) runs one kernel for every call
 *   instead (amx offered for its types only: not Q5_1; amx-few for Q8_0,
 *   Q4_0, Q5_0 and Q4_K; vnni-m8z for the types of 32, its K-quants are
 *   vnni-m8's). */
#include "backend/cpu/qlinear.h"

#include <assert.h>
#include <math.h>
#include <pthread.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "backend/cpu/cpu_impl.h"
#include "backend/cpu/ctlinear.h"
#include "backend/cpu/gemv_isa.h"
#include "backend/cpu/lanes.h"
#include "backend/cpu/linear.h"
#include "backend/cpu/qdot.h"
#include "backend/cpu/scratch.h"
#include "core/error.h"
#include "core/qpack.h"
#include "core/quant_ct.h"
#include "core/rng.h"
#include "core/timing.h"

/* As gemv.c's: a thread claims about Q_TASK_BYTES of weight rows at a
 * time, made of steps of about Q_STEP_BYTES, and the last steps of a lane
 * go one by one (lanes.h), so two threads end a call within one small
 * step of each other; a unit's rows come in multiples of 16 (whole cache
 * lines of y, whole tiles), for the kernels of several streams (a row at a
 * time) of 32 or 4 (q_units_of). Without claims
 * (cpu_gemv_split_claims(false)) a pool task is one step of Q_TASK_BYTES,
 * as before them. */
#define Q_TASK_BYTES (128 << 10)
#define Q_STEP_BYTES (32 << 10)
#define Q_MIN_TASKS 8
/* weight rows dequantized at a time in f32 mode */
#define Q_DEQ_ROWS 16

/* ---- x quantized as llama.cpp does ---- */

enum qdot_xtype qdot_xtype_of(enum dtype t)
{
    return dtype_block(t) == QUANT_QK0 ? QDOT_X_Q8_0 : QDOT_X_Q8_K;
}

size_t qdot_x_row_bytes(enum dtype t, int n)
{
    return qdot_xtype_of(t) == QDOT_X_Q8_0 ? (size_t)n / QUANT_QK0 * sizeof(struct quant_q8_0)
                                           : (size_t)n / QUANT_QKK * sizeof(struct quant_q8_k);
}

static bool has_avx2(void);
static bool has_vnni(void);

void qdot_quantize_x(enum dtype t, const float *x, void *xq, int n)
{
    if (qdot_xtype_of(t) == QDOT_X_Q8_K && has_vnni())
        qdot_x_q8_k_avx512(x, xq, n);
    else if (qdot_xtype_of(t) == QDOT_X_Q8_K)
        quant_q8_k_from_f32(x, xq, n);
    else if (has_avx2())
        qdot_x_q8_0_avx2(x, xq, n);
    else
        quant_q8_0_from_f32(x, xq, n);
}

/* qdot.h's packed group: per block the quads (qk / 4 of QDOT_GROUP int32),
 * the scales (QDOT_GROUP f32) and the sums (QDOT_GROUP int32, or 4 x
 * QDOT_GROUP for Q8_K's pairs) */
static size_t xp_block_bytes(enum dtype t)
{
    return qdot_xtype_of(t) == QDOT_X_Q8_0 ? (size_t)(QUANT_QK0 + 4 + 4) * QDOT_GROUP
                                           : (size_t)(QUANT_QKK + 4 + 16) * QDOT_GROUP;
}

size_t qdot_xp_group_bytes(enum dtype t, int n)
{
    const int qk = qdot_xtype_of(t) == QDOT_X_Q8_0 ? QUANT_QK0 : QUANT_QKK;
    return (size_t)(n / qk) * xp_block_bytes(t);
}

void qdot_pack_x(enum dtype t, const char *xq, size_t xq_ld, int m, int n, int g, char *xp)
{
    const bool kq = qdot_xtype_of(t) == QDOT_X_Q8_K;
    const int qk = kq ? QUANT_QKK : QUANT_QK0, nb = n / qk, i0 = g * QDOT_GROUP;
    const int rows = m - i0 < QDOT_GROUP ? m - i0 : QDOT_GROUP;
    const size_t xb = kq ? sizeof(struct quant_q8_k) : sizeof(struct quant_q8_0);
    for (int b = 0; b < nb; b++, xp += xp_block_bytes(t)) {
        unsigned char *u = (unsigned char *)xp;
        char *dx = xp + (size_t)qk * QDOT_GROUP, *sums = dx + 4 * QDOT_GROUP;
        for (int j = 0; j < QDOT_GROUP; j++) {
            const char *blk = j < rows ? xq + (size_t)(i0 + j) * xq_ld + (size_t)b * xb : NULL;
            const int8_t *qs = blk ? (const int8_t *)(blk + (kq ? 4 : 2)) : NULL;
            int32_t xs = 0;
            for (int e = 0; e < qk; e++) {
                const int8_t v = qs ? qs[e] : 0;
                u[(size_t)(e / 4) * 4 * QDOT_GROUP + 4 * j + e % 4] = (unsigned char)(v ^ 0x80);
                xs += v;
            }
            float d = 0.0f;
            if (!kq) {
                if (blk) {
                    uint16_t h;
                    memcpy(&h, blk, 2);
                    d = f16_to_f32(h);
                }
                memcpy(sums + 4 * j, &xs, 4);
            } else {
                int16_t bs[QUANT_QKK / 16] = {0};
                if (blk) {
                    memcpy(&d, blk, 4);
                    memcpy(bs, blk + 4 + QUANT_QKK, sizeof(bs));
                }
                for (int p = 0; p < 4; p++) {
                    const int lo = bs[4 * p] + bs[4 * p + 1], hi = bs[4 * p + 2] + bs[4 * p + 3];
                    const uint32_t v = (uint32_t)(uint16_t)lo | (uint32_t)(uint16_t)hi << 16;
                    memcpy(sums + 4 * (p * QDOT_GROUP + j), &v, 4);
                }
            }
            memcpy(dx + 4 * j, &d, 4);
        }
    }
}

size_t qdot_xz_group_bytes(int n)
{
    return (size_t)(n / QUANT_QK0) * QDOT_XZ_BLOCK;
}

void qdot_pack_x_pairs(const char *xq, size_t xq_ld, int m, int n, int g, char *xp)
{
    const int nb = n / QUANT_QK0, i0 = g * QDOT_GROUP;
    const int rows = m - i0 < QDOT_GROUP ? m - i0 : QDOT_GROUP;
    for (int b = 0; b < nb; b++, xp += QDOT_XZ_BLOCK) {
        char *dx = xp + 256, *sums = xp + 320;
        for (int j = 0; j < QDOT_GROUP; j++) {
            const char *blk =
                j < rows ? xq + (size_t)(i0 + j) * xq_ld + (size_t)b * sizeof(struct quant_q8_0)
                         : NULL;
            int32_t xs = 0;
            for (int k = 0; k < QUANT_QK0 / 8; k++) {
                if (blk)
                    memcpy(xp + 64 * k + 8 * j, blk + 2 + 8 * k, 8);
                else
                    memset(xp + 64 * k + 8 * j, 0, 8);
            }
            for (int e = 0; blk && e < QUANT_QK0; e++)
                xs += (int8_t)blk[2 + e];
            float d = 0.0f;
            if (blk) {
                uint16_t h;
                memcpy(&h, blk, 2);
                d = f16_to_f32(h);
            }
            for (int h = 0; h < 2; h++) {
                memcpy(dx + 4 * (2 * j + h), &d, 4);
                memcpy(sums + 4 * (2 * j + h), &xs, 4);
            }
        }
    }
}

/* vectors between x's quads and its scales: the K-quants' pairs of sums,
 * Q5_1's sums of 32 (its min's operand) */
static int xmr_pairs(enum dtype t)
{
    return t == DTYPE_Q5_1 ? 1 : qdot_xtype_of(t) == QDOT_X_Q8_0 ? 0 : t == DTYPE_Q6_K ? 8 : 4;
}

size_t qdot_xmr_run_bytes(enum dtype t)
{
    return (size_t)64 * ((qdot_xtype_of(t) == QDOT_X_Q8_0 ? 8 : 64) + xmr_pairs(t) + 1);
}

size_t qdot_xmr_row_bytes(enum dtype t, int n)
{
    const int nb = n / dtype_block(t);
    return (size_t)(nb + 7) / 8 * qdot_xmr_run_bytes(t);
}

void qdot_pack_x_mr(enum dtype t, const char *xq, int n, char *xr)
{
    const bool kq = qdot_xtype_of(t) == QDOT_X_Q8_K;
    const int nb = n / dtype_block(t), nq = kq ? 64 : 8, npr = xmr_pairs(t);
    const size_t xb = kq ? sizeof(struct quant_q8_k) : sizeof(struct quant_q8_0);
    for (int b0 = 0; b0 < nb; b0 += 8, xr += qdot_xmr_run_bytes(t)) {
        memset(xr, kq ? 0 : 0x80, (size_t)64 * nq);
        memset(xr + 64 * nq, 0, (size_t)64 * (npr + 1));
        for (int k = 0; k < 8 && b0 + k < nb; k++) {
            const char *blk = xq + (size_t)(b0 + k) * xb;
            const unsigned char *qs = (const unsigned char *)blk + (kq ? 4 : 2);
            for (int j = 0; j < nq; j++)
                for (int e = 0; e < 4; e++)
                    xr[64 * j + 4 * k + e] = (char)(kq ? qs[4 * j + e] : qs[4 * j + e] ^ 0x80);
            float d;
            if (kq) {
                int16_t bs[QUANT_QKK / 16], pr[2];
                memcpy(&d, blk, 4);
                memcpy(bs, blk + 4 + QUANT_QKK, sizeof(bs));
                for (int p = 0; p < npr; p++) {
                    if (t == DTYPE_Q6_K) {
                        const int s = 4 * (p / 2) + p % 2;
                        pr[0] = bs[s];
                        pr[1] = bs[s + 2];
                    } else {
                        pr[0] = (int16_t)(bs[4 * p] + bs[4 * p + 1]);
                        pr[1] = (int16_t)(bs[4 * p + 2] + bs[4 * p + 3]);
                    }
                    memcpy(xr + 64 * (nq + p) + 4 * k, pr, 4);
                }
            } else {
                uint16_t h;
                memcpy(&h, blk, 2);
                d = f16_to_f32(h);
                if (npr) {
                    int32_t sum = 0;
                    for (int e = 0; e < 32; e++)
                        sum += (int8_t)qs[e];
                    memcpy(xr + 64 * nq + 4 * k, &sum, 4);
                }
            }
            memcpy(xr + 64 * (nq + npr) + 4 * k, &d, 4);
        }
        /* the same 32 bytes for the second row's lanes */
        for (int v = 0; v < nq + npr + 1; v++)
            memcpy(xr + 64 * v + 32, xr + 64 * v, 32);
    }
}

/* ---- the kernels and their choice ---- */

static bool has_scalar(void)
{
    return true;
}

#if defined(__x86_64__) || defined(__i386__)
static bool has_avx2(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2");
}

/* AMX-INT8 (CPUID leaf 7 EDX bit 25) beside AMX-TILE, and Linux's grant
 * of the tile data (gemv.c asks once per process) */
static bool has_amx_int8(void)
{
    unsigned a, b, c, d;
    return has_vnni() && __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d & (1u << 25)) &&
           cpu_amx_granted();
}

static bool has_vnni(void)
{
    __builtin_cpu_init();
    return has_avx2() && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vnni");
}
#else
static bool has_avx2(void)
{
    return false;
}

static bool has_vnni(void)
{
    return false;
}

static bool has_amx_int8(void)
{
    return false;
}
#endif

/* vnni-near's, vnni-far's and vnni-x16's builds with GFNI (the same bits) where the
 * CPU has it (asked once: a task only reads the answer), unless turned off
 * (cpu_qlinear_gfni) */
static atomic_bool q_gfni_on = true;
static bool q_gfni_cpu;
static pthread_once_t q_gfni_once = PTHREAD_ONCE_INIT;

static void q_gfni_init(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    q_gfni_cpu = __builtin_cpu_supports("gfni");
#endif
    const char *v = getenv("SHARDSWAP_QDOT_GFNI");
    atomic_store(&q_gfni_on, !(v && strcmp(v, "off") == 0));
}

void cpu_qlinear_gfni(bool on)
{
    pthread_once(&q_gfni_once, q_gfni_init);
    atomic_store(&q_gfni_on, on);
}

static bool q_gfni(void)
{
    pthread_once(&q_gfni_once, q_gfni_init);
    return q_gfni_cpu && atomic_load_explicit(&q_gfni_on, memory_order_relaxed);
}

/* vnni-near's rows and vnni-far's pieces, by the build q_gfni says (a
 * task's choice: one test per 128 KiB of weights) */
static void q_rows_near(const struct qdot_args *a, int r0, int r1)
{
    (q_gfni() ? qdot_rows_vnni_near_gfni : qdot_rows_vnni_near)(a, r0, r1);
}

static void q_pieces_far(const struct qdot_piece *p, int n)
{
    (q_gfni() ? qdot_pieces_vnni_far_gfni : qdot_pieces_vnni_far)(p, n);
}

/* vnni-x16's, the same way */
static int q_x16(const struct qdot_args *a, int r0, int r1)
{
    return (q_gfni() ? qdot_x16_vnni_gfni : qdot_x16_vnni)(a, r0, r1);
}

/* the layout of x a kernel reads: its quantized rows, packed groups of 8
 * (qdot_pack_x; or in pairs, qdot_pack_x_pairs, for vnni-m8z's types of
 * 32: q_layout), runs of 8 blocks (qdot_pack_x_mr), AMX's groups of 16
 * (qdot_pack_x_tiles), or each Q8_0 row as vnni-near's types of 32 read it
 * (qdot_pack_x_xr: q_layout) */
enum q_xlayout { Q_X_ROWS, Q_X_GROUPS, Q_X_PAIRS, Q_X_RUNS, Q_X_TILES, Q_X_XR };

struct qdot_kernel {
    const char *name;
    qdot_rows_fn rows; /* one weight row at a time, or */
    qdot_tile_fn tile; /* many input rows at a time (x laid out) */
    enum q_xlayout x;
    bool (*supported)(void);
    bool (*takes)(enum dtype t); /* NULL: every type; else calibrated only for these */
    bool few;                    /* calibrated for decode batches only (below 16 rows) */
    /* > 1: a task runs `streams` pieces by `pieces` (a lane in sub-lanes,
     * lanes.h), as gemv.c's kernels of several streams (calls the lanes
     * cannot cut run the pieces one by one through `rows`) */
    int streams;
    qdot_pieces_fn pieces;
    /* reads weights packed in groups of 16 rows (weight.h's
     * WEIGHT_PACK_X16) only: never a candidate for rows */
    bool packed;
};

static bool q_takes_32(enum dtype t)
{
    return qdot_xtype_of(t) == QDOT_X_Q8_0;
}

/* best first by instruction set; scalar only by request where another runs */
static const struct qdot_kernel q_kernels[] = {
    /* a weight row against one input row */
    {"vnni", qdot_rows_vnni, NULL, Q_X_ROWS, has_vnni, NULL, false, 1, NULL, false},
    {"vnni-near", q_rows_near, NULL, Q_X_ROWS, has_vnni, NULL, false, 1, NULL,
     false}, /* vnni, prefetch 1 KiB into L1 and 4 KiB into L2 ahead */
    {"vnni-far", q_rows_near, NULL, Q_X_ROWS, has_vnni, NULL, false, 4, q_pieces_far,
     false}, /* vnni-near over 4 far-apart streams of a thread's lane */
    {"avx2", qdot_rows_avx2, NULL, Q_X_ROWS, has_avx2, NULL, false, 1, NULL, false},
    {"avx2-far", qdot_rows_avx2, NULL, Q_X_ROWS, has_avx2, NULL, false, 4, qdot_pieces_avx2_far,
     false}, /* avx2 over 4 far-apart streams of a thread's lane */
    /* two weight rows' blocks in the lanes against each input row */
    {"vnni-mr", NULL, qdot_mr_vnni, Q_X_RUNS, has_vnni, NULL, true, 1, NULL, false},
    /* a weight row against 8 input rows in the lanes */
    {"vnni-m8", NULL, qdot_tile_vnni, Q_X_GROUPS, has_vnni, NULL, false, 1, NULL, false},
    /* two pairs of weight rows against 8 input rows, two quads a lane
     * pair (the types of 32; calibrated for those only) */
    {"vnni-m8z", NULL, qdot_tile_vnni_z, Q_X_PAIRS, has_vnni, q_takes_32, false, 1, NULL, false},
    /* 16 weight rows x 16 input rows a tile product */
    {"amx", NULL, qdot_tile_amx, Q_X_TILES, has_amx_int8, qdot_amx_takes, false, 1, NULL, false},
    /* x's few rows (A) x 16 weight rows laid out as B a tile product */
    {"amx-few", NULL, qdot_tile_amx_few, Q_X_ROWS, has_amx_int8, qdot_amx_few_takes, true, 1, NULL,
     false},
    {"avx2-m8", NULL, qdot_tile_avx2, Q_X_GROUPS, has_avx2, NULL, false, 1, NULL, false},
    /* weights packed in groups of 16 rows: a group's block against each
     * input row's broadcast quads (the K-quants), or the groups written back as
     * rows for the reference (any CPU) */
    {"vnni-x16", NULL, q_x16, Q_X_ROWS, has_vnni, qpack_takes, false, 1, NULL, true},
    {"scalar-x16", NULL, qdot_x16_rows, Q_X_ROWS, has_scalar, qpack_takes, false, 1, NULL, true},
    {"scalar", qdot_rows_scalar, NULL, Q_X_ROWS, has_scalar, NULL, false, 1, NULL,
     false}, /* the reference */
};
#define Q_N_KERNELS (int)(sizeof(q_kernels) / sizeof(q_kernels[0]))

/* the types, in enum dtype's order from DTYPE_Q8_0 */
#define Q_TYPES (DTYPE_Q5_1 - DTYPE_Q8_0 + 1)
/* one input row; decode batches of 2-4, 5-8 and 9-15; 16 and more (prefill) */
#define Q_BUCKETS 5
/* each bucket timed at a count of rows inside it: a decode batch's
 * products read their weights from memory, a prefill's are bound by the
 * integer work, which 32 rows show (past 8 the multi-row kernels repeat a
 * pass per 8 rows and the others a pass per row, so the ranking holds
 * above) */
static const int q_bucket_m[Q_BUCKETS] = {1, 3, 6, 12, 32};
/* rounds a bucket: one row's calls are the shortest (a 4 MiB cold call is
 * about 0.13 ms on two threads) and their best of 5 was the noisiest (Zen
 * 4, Q6_K packed against its rows: 0.90-1.46x over six processes; best of
 * 11: 0.98-1.44x over eight, the calibration as long within its noise) */
static const int q_cal_reps[Q_BUCKETS] = {11, 3, 3, 3, 3};
static const char *const q_bucket_name[Q_BUCKETS] = {"m1", "m2-4", "m5-8", "m9-15", "m16+"};
#define Q_CAL_BYTES ((size_t)4 << 20)
#define Q_CAL_COLS 2048
#define Q_CAL_MARGIN 0.03

static const struct qdot_kernel *q_chosen[Q_TYPES][Q_BUCKETS];
/* the types whose packed rows (vnni-x16) measured faster than q_chosen */
static bool q_packs[Q_TYPES];
/* each bucket's time of q_chosen and of vnni-x16 on packed rows, ms */
static double q_chosen_ms[Q_TYPES][Q_BUCKETS], q_x16_ms[Q_TYPES][Q_BUCKETS];
static double q_cal_ms[Q_TYPES];
static atomic_bool q_ready[Q_TYPES];
static pthread_mutex_t q_lock = PTHREAD_MUTEX_INITIALIZER; /* guards the calibration */
static const struct qdot_kernel *_Atomic q_forced;
static pthread_once_t q_env_once = PTHREAD_ONCE_INIT;

static int q_index(enum dtype t)
{
    return (int)t - (int)DTYPE_Q8_0;
}

/* "vnni, vnni-near, ... avx2-m8 or scalar": the table's names, made once */
static char q_names[Q_N_KERNELS * 16];
static pthread_once_t q_names_once = PTHREAD_ONCE_INIT;

_Static_assert(offsetof(struct qdot_kernel, name) == 0, "cpu_names_join reads the name first");

static void q_names_make(void)
{
    cpu_names_join(q_names, sizeof q_names, q_kernels, sizeof q_kernels[0], Q_N_KERNELS);
}

const char *cpu_qlinear_kernel_names(void)
{
    pthread_once(&q_names_once, q_names_make);
    return q_names;
}

static int q_find(const char *name, const struct qdot_kernel **out)
{
    for (int i = 0; i < Q_N_KERNELS; i++)
        if (strcmp(q_kernels[i].name, name) == 0) {
            if (!q_kernels[i].supported())
                return err_set(ERR_UNSUPPORTED, "this CPU lacks %s", name);
            *out = &q_kernels[i];
            return 0;
        }
    return err_set(ERR_INVALID, "unknown quantized kernel \"%s\" (expected %s)", name,
                   cpu_qlinear_kernel_names());
}

/* the table's kernel of that name (one that is there) */
static const struct qdot_kernel *q_named(const char *name)
{
    for (int i = 0; i < Q_N_KERNELS; i++)
        if (strcmp(q_kernels[i].name, name) == 0)
            return &q_kernels[i];
    assert(0 && "a kernel the table has");
    return &q_kernels[Q_N_KERNELS - 1];
}

/* SHARDSWAP_QPACK: -1 unset (by measurement), 0 off, 1 on */
static int q_pack_env = -1;

static void q_read_env(void)
{
    const char *pk = getenv("SHARDSWAP_QPACK");
    if (pk && *pk) {
        if (!strcmp(pk, "on") || !strcmp(pk, "off"))
            q_pack_env = !strcmp(pk, "on");
        else
            fprintf(stderr,
                    "shardswap: SHARDSWAP_QPACK: \"%s\" is not on or off; choosing by "
                    "measurement\n",
                    pk);
    }
    const char *req = getenv("SHARDSWAP_QDOT");
    const struct qdot_kernel *k;
    if (!req || !*req)
        return;
    if (q_find(req, &k) < 0) {
        fprintf(stderr, "shardswap: SHARDSWAP_QDOT: %s; choosing by measurement\n", err_msg());
        return;
    }
    q_forced = k;
}

void cpu_qlinear_random_blocks(enum dtype t, void *dst, size_t n_blocks, uint64_t seed)
{
    if (quant_ct_is(t)) {
        cpu_ctlinear_random_blocks(t, dst, n_blocks, seed);
        return;
    }
    const size_t bb = quant_block_bytes(t);
    struct rng r;
    rng_seed(&r, seed, 0);
    unsigned char *p = dst;
    for (size_t i = 0; i < n_blocks * bb; i++)
        p[i] = (unsigned char)(rng_u64(&r) >> 56);
    /* finite scales of a few magnitudes: f16 in [2^-12, 2^-6) */
    for (size_t b = 0; b < n_blocks; b++, p += bb) {
        const size_t at[2] = {t == DTYPE_Q6_K ? 208 : 0, 2};
        const int n_scales = t == DTYPE_Q4_K || t == DTYPE_Q5_K || t == DTYPE_Q5_1 ? 2 : 1;
        for (int s = 0; s < n_scales; s++) {
            uint16_t h = (uint16_t)(((3 + rng_u64(&r) % 6) << 10) | (rng_u64(&r) & 0x3ff));
            memcpy(p + at[s], &h, 2);
        }
    }
}

/* A call's steps are units of about Q_STEP_BYTES of weight rows, or, with
 * a kernel of several streams, one unit of each of `streams` sub-lanes
 * (units of about Q_STEP_BYTES / streams); the pool's tasks take them in
 * claims of `per` steps from their lanes, the last `tail` of a lane one by
 * one (lanes.h). */
struct q_job {
    struct qdot_args a;
    const struct qdot_kernel *k;
    int streams;            /* 1, or k->streams with k->pieces */
    int task_rows;          /* rows per unit */
    int tasks;              /* units */
    int per, tail;          /* steps per claim; steps at a lane's end claimed
                             * alone (0: a step per pool task) */
    struct cpu_lanes lanes; /* the units in a lane per thread, as the GEMV's */
    atomic_int rc;
};

/* The layout of x kernel k reads for weights of type t: its own, except
 * vnni-near's, vnni-far's and avx2's types of 32, whose x is laid out once per
 * call here instead of once per task in the kernel (a task of 16 rows of
 * llama-3.2-1b's Q8_0 down projection laid out its 256 blocks of x again
 * for 16 rows' work) */
static enum q_xlayout q_layout(const struct qdot_kernel *k, enum dtype t)
{
    if (k->x == Q_X_PAIRS && qdot_xtype_of(t) != QDOT_X_Q8_0)
        return Q_X_GROUPS; /* vnni-m8z's K-quants are vnni-m8's */
    return (k->rows == q_rows_near || k->rows == qdot_rows_avx2) && qdot_xtype_of(t) == QDOT_X_Q8_0
               ? Q_X_XR
               : k->x;
}

/* Weight rows [r0, r1) of a's product by kernel k: 0, or ERR_NOMEM from a
 * tile kernel's scratch. */
static int q_rows(const struct qdot_kernel *k, const struct qdot_args *a, int r0, int r1)
{
    if (k->rows) {
        k->rows(a, r0, r1);
        return 0;
    }
    return k->tile(a, r0, r1);
}

/* a task's units (lanes.h) are the pieces a pieces kernel takes */
_Static_assert(QDOT_PIECES_MAX <= CPU_LANES_STREAMS_MAX,
               "a pieces kernel's streams must fit a step of sub-lanes");

/* units [c, c + n) of a's rows, task_rows a unit, as a piece (a single
 * call's or a group's job's) */
static struct qdot_piece q_piece(const struct qdot_args *a, int task_rows, int c, int n)
{
    const int r0 = c * task_rows, r1 = r0 + n * task_rows;
    return (struct qdot_piece){a, r0, r1 < a->w->rows ? r1 : a->w->rows};
}

/* steps [step, step + count) of j (cpu_lanes_steps_fn): each sub-lane's
 * run of units as one piece (its rows are contiguous) */
static void q_steps(void *ctx, int step, int count)
{
    struct q_job *j = ctx;
    int first[CPU_LANES_STREAMS_MAX], n[CPU_LANES_STREAMS_MAX];
    struct qdot_piece p[CPU_LANES_STREAMS_MAX];
    const int runs = cpu_lanes_runs(&j->lanes, step, count, first, n);
    for (int k = 0; k < runs; k++)
        p[k] = q_piece(&j->a, j->task_rows, first[k], n[k]);
    if (j->streams > 1) {
        j->k->pieces(p, runs);
        return;
    }
    for (int k = 0; k < runs; k++)
        if (q_rows(j->k, &j->a, p[k].r0, p[k].r1) < 0)
            atomic_store(&j->rc, ERR_NOMEM);
}

static void q_task(void *ctx, int task)
{
    struct q_job *j = ctx;
    cpu_lanes_task(&j->lanes, task, q_steps, j);
}

/* Rows per unit: about `bytes` / streams of weights, at least Q_MIN_TASKS
 * units per stream when the matrix allows, a multiple of `gran` */
static int q_task_rows(const struct weight_view *w, int streams, int gran, size_t bytes)
{
    size_t row_bytes = dtype_row_bytes(w->dtype, (size_t)w->cols);
    size_t rows = bytes / (size_t)streams / (row_bytes ? row_bytes : 1);
    size_t most =
        ((size_t)w->rows + Q_MIN_TASKS * (size_t)streams - 1) / (Q_MIN_TASKS * (size_t)streams);
    if (rows > most)
        rows = most;
    rows = (rows + (size_t)gran - 1) / (size_t)gran * (size_t)gran;
    return rows ? (int)rows : gran;
}

/* The units (*task_rows each) of a product of w's rows in `streams`
 * sub-lanes, and its claims (*per steps, the last *tail alone; *tail 0:
 * a step of Q_TASK_BYTES per pool task, claims turned off) */
static void q_units_of(const struct weight_view *w, int streams, int *task_rows, int *per,
                       int *tail)
{
    /* packed rows: whole passes of two groups (qdot_x16.c) */
    const int packed_gran = w->pack == WEIGHT_PACK_X16 ? 32 : 0;
    if (!cpu_gemv_claims()) {
        *task_rows = q_task_rows(w, streams, packed_gran ? packed_gran : 16, Q_TASK_BYTES);
        *per = 1;
        *tail = 0;
        return;
    }
    /* a kernel of streams: units of whole runs of 32 rows where 32 rows
     * fit a step's bytes (rows of 1 KiB and less), so that no sub-lane's
     * piece is a few rows of a small matrix (qwen2.5-0.5b's 128 x 896 Q5_0
     * k and v were units of 4 rows, its 896 x 896 of 16: claims were 4-8%
     * slower than one 128 KiB step per task there, 2-4% faster with runs
     * of 32; tools/qstep_ab.c), else of 4 (a 4864-column row is 2.7-4
     * KiB) */
    const size_t row_bytes = dtype_row_bytes(w->dtype, (size_t)w->cols);
    const int gran = packed_gran                      ? packed_gran
                     : streams == 1                   ? 16
                     : row_bytes * 32 <= Q_STEP_BYTES ? 32
                                                      : 4;
    *task_rows = q_task_rows(w, streams, gran, Q_STEP_BYTES);
    const size_t step_bytes = (size_t)streams * (size_t)*task_rows * row_bytes;
    *per = cpu_lanes_claim_steps(Q_TASK_BYTES, step_bytes);
    *tail = cpu_lanes_claim_tail(*per);
}

/* j's units over w's rows by kernel k */
static void q_job_init(struct q_job *j, const struct qdot_kernel *k, const struct weight_view *w)
{
    j->k = k;
    j->streams = k->streams > 1 && k->pieces ? k->streams : 1;
    assert(j->streams <= QDOT_PIECES_MAX);
    q_units_of(w, j->streams, &j->task_rows, &j->per, &j->tail);
    j->tasks = (w->rows + j->task_rows - 1) / j->task_rows;
    atomic_init(&j->rc, 0);
}

struct qx_job {
    enum dtype t;
    const float *x;
    int m, cols;
    enum q_xlayout lay;
    char *xq, *xp; /* xp: NULL, or the packed groups or runs */
    size_t xq_ld, xp_ld;
};

static int q_group_rows(enum q_xlayout lay)
{
    return lay == Q_X_TILES ? QDOT_TGROUP : QDOT_GROUP;
}

/* the rows of group g (q_group_rows of them) quantized, and packed */
static void qx_task(void *ctx, int g)
{
    const struct qx_job *j = ctx;
    const int gr = q_group_rows(j->lay);
    const int i1 = (g + 1) * gr < j->m ? (g + 1) * gr : j->m;
    for (int i = g * gr; i < i1; i++) {
        if (j->x) /* NULL: quantized already (a group's shared x) */
            qdot_quantize_x(j->t, j->x + (size_t)i * j->cols, j->xq + (size_t)i * j->xq_ld,
                            j->cols);
        if (j->lay == Q_X_RUNS)
            qdot_pack_x_mr(j->t, j->xq + (size_t)i * j->xq_ld, j->cols,
                           j->xp + (size_t)i * j->xp_ld);
        else if (j->lay == Q_X_XR)
            qdot_pack_x_xr(j->xq + (size_t)i * j->xq_ld, j->cols, j->xp + (size_t)i * j->xp_ld);
    }
    if (j->lay == Q_X_GROUPS)
        qdot_pack_x(j->t, j->xq, j->xq_ld, j->m, j->cols, g, j->xp + (size_t)g * j->xp_ld);
    else if (j->lay == Q_X_PAIRS)
        qdot_pack_x_pairs(j->xq, j->xq_ld, j->m, j->cols, g, j->xp + (size_t)g * j->xp_ld);
    else if (j->lay == Q_X_TILES)
        qdot_pack_x_tiles(j->t, j->xq, j->xq_ld, j->m, j->cols, g, j->xp + (size_t)g * j->xp_ld);
}

/* Where x's rows go for m rows of w's product laid out as lay: the
 * quantized rows (xq_ld bytes apart, xq_bytes in all, whole cache lines),
 * then the layout (xp_ld bytes a row or group, xp_bytes in all). */
struct q_xsize {
    size_t xq_ld, xp_ld, xq_bytes, xp_bytes;
};

static struct q_xsize q_xsize_of(int m, const struct weight_view *w, enum q_xlayout lay)
{
    struct q_xsize z;
    z.xq_ld = qdot_x_row_bytes(w->dtype, w->cols);
    z.xp_ld = lay == Q_X_GROUPS  ? qdot_xp_group_bytes(w->dtype, w->cols)
              : lay == Q_X_PAIRS ? qdot_xz_group_bytes(w->cols)
              : lay == Q_X_RUNS  ? qdot_xmr_row_bytes(w->dtype, w->cols)
              : lay == Q_X_TILES ? qdot_xt_group_bytes(w->dtype, w->cols)
              : lay == Q_X_XR    ? qdot_xr_row_bytes(w->cols)
                                 : 0;
    const int ng = (m + q_group_rows(lay) - 1) / q_group_rows(lay);
    z.xq_bytes = ((size_t)m * z.xq_ld + 63) / 64 * 64;
    z.xp_bytes = ((size_t)(lay == Q_X_RUNS || lay == Q_X_XR ? m : ng) * z.xp_ld + 63) / 64 * 64;
    return z;
}

/* x's m rows quantized into xq (unless quantize is false: xq holds them
 * already) and laid out as lay into xp, over the pool for a prefill's many
 * rows; a set for w's rows into y. */
static void q_xfill(float *y, const float *x, int m, const struct weight_view *w,
                    enum q_xlayout lay, const struct q_xsize *z, char *xq, char *xp, bool quantize,
                    struct qdot_args *a)
{
    const int ng = (m + q_group_rows(lay) - 1) / q_group_rows(lay);
    struct qx_job j = {.t = w->dtype,
                       .x = quantize ? x : NULL,
                       .m = m,
                       .cols = w->cols,
                       .lay = lay,
                       .xq = xq,
                       .xp = lay != Q_X_ROWS ? xp : NULL,
                       .xq_ld = z->xq_ld,
                       .xp_ld = z->xp_ld};
    if (m > CPU_GEMV_MAX_M)
        cpu_kernels_run(qx_task, &j, ng);
    else
        for (int g = 0; g < ng; g++)
            qx_task(&j, g);
    *a = (struct qdot_args){.y = y,
                            .ldy = (size_t)w->rows,
                            .xq = xq,
                            .xq_ld = z->xq_ld,
                            .xp = j.xp,
                            .xp_ld = z->xp_ld,
                            .m = m,
                            .w = w};
}

/* x's rows quantized (and laid out for a multi-row kernel) into the
 * calling thread's scratch, over the pool for a prefill's many */
static int q_prepare(float *y, const float *x, int m, const struct weight_view *w,
                     enum q_xlayout lay, struct qdot_args *a)
{
    const struct q_xsize z = q_xsize_of(m, w, lay);
    char *xq = cpu_scratch(CPU_SCRATCH_Q_X, z.xq_bytes + z.xp_bytes);
    if (!xq)
        return err_set(ERR_NOMEM, "out of host memory for %d x %d quantized activations", m,
                       w->cols);
    q_xfill(y, x, m, w, lay, &z, xq, xq + z.xq_bytes, true, a);
    return 0;
}

static int q_run(const struct qdot_kernel *k, float *y, const float *x, int m,
                 const struct weight_view *w)
{
    struct q_job j;
    q_job_init(&j, k, w);
    int rc = q_prepare(y, x, m, w, q_layout(k, w->dtype), &j.a);
    if (rc < 0)
        return rc;
    cpu_kernels_run(q_task, &j,
                    j.tail ? cpu_lanes_init_claims(&j.lanes, j.tasks, j.streams, j.per, j.tail)
                           : cpu_lanes_init_streams(&j.lanes, j.tasks, j.streams));
    if (atomic_load(&j.rc) < 0)
        return err_set(ERR_NOMEM, "out of host memory for unpacked %s weight rows of %d columns",
                       dtype_name(w->dtype), w->cols);
    return 0;
}

/* As gemv.c's calibration: every candidate for type t timed as a call from
 * this thread runs, on weights flushed from the caches. Under q_lock. */
static void q_calibrate(enum dtype t)
{
    const int ti = q_index(t);
    const struct qdot_kernel *cand[Q_N_KERNELS];
    int n = 0;
    for (int i = 0; i < Q_N_KERNELS - 1; i++)
        if (q_kernels[i].supported() && !q_kernels[i].packed)
            cand[n++] = &q_kernels[i];
    if (n == 0)
        cand[n++] = &q_kernels[Q_N_KERNELS - 1];
    for (int b = 0; b < Q_BUCKETS; b++) {
        q_chosen[ti][b] = cand[0];
        q_x16_ms[ti][b] = NAN; /* not timed */
    }
    if (n == 1)
        return;
    double t0 = time_now();
    const size_t row_bytes = dtype_row_bytes(t, Q_CAL_COLS);
    const int rows = (int)(Q_CAL_BYTES / row_bytes);
    const int mmax = q_bucket_m[Q_BUCKETS - 1];
    const struct qdot_kernel *x16 = q_named("vnni-x16");
    const bool try_x16 = qpack_takes(t) && x16->supported() && rows >= 2 * QPACK_ROWS;
    char *wd = malloc((size_t)rows * row_bytes);
    char *wp = try_x16 ? aligned_alloc(64, ((size_t)rows * row_bytes + 63) / 64 * 64) : NULL;
    char *tmp = try_x16 ? malloc(QPACK_ROWS * row_bytes) : NULL;
    float *x = malloc((size_t)mmax * Q_CAL_COLS * sizeof(float));
    float *y = malloc((size_t)mmax * rows * sizeof(float));
    if (wd && x && y && (!try_x16 || (wp && tmp))) {
        cpu_qlinear_random_blocks(t, wd, (size_t)rows * Q_CAL_COLS / (size_t)dtype_block(t), 7);
        for (size_t i = 0; i < (size_t)mmax * Q_CAL_COLS; i++)
            x[i] = (float)((int)(i % 11) - 5) * 0.1f;
        struct weight_view w = {
            .dtype = t, .data = wd, .rows = rows, .cols = Q_CAL_COLS, .ld = Q_CAL_COLS};
        /* the same rows packed, for vnni-x16 */
        struct weight_view wx = w;
        if (try_x16) {
            memcpy(wp, wd, (size_t)rows * row_bytes);
            qpack_matrix(t, wp, rows, Q_CAL_COLS, tmp);
            wx.data = wp;
            wx.pack = WEIGHT_PACK_X16;
        }
        for (int b = 0; b < Q_BUCKETS; b++) {
            double best[Q_N_KERNELS], bx = 1e30;
            for (int i = 0; i < n; i++)
                best[i] = 1e30;
            for (int rep = 0; rep < q_cal_reps[b]; rep++) {
                /* vnni-x16 on the packed rows in each round, beside the
                 * others (timed after them, the read rate's phases decided
                 * whether Q6_K was packed: m1 0.82-1.03x in turn) */
                if (try_x16) {
                    cpu_cache_flush(wp, (size_t)rows * row_bytes);
                    double s = time_now();
                    if (q_run(x16, y, x, q_bucket_m[b], &wx) == 0) {
                        s = time_now() - s;
                        bx = s < bx ? s : bx;
                    }
                }
                for (int i = 0; i < n; i++) {
                    if (cand[i]->tile && q_bucket_m[b] == 1)
                        continue; /* 7 of its 8 lanes idle */
                    if (cand[i]->few && q_bucket_m[b] >= 16)
                        continue; /* vnni-mr: x's runs for every row go by each
                                     pair; amx-few: a pass over the weights
                                     per 16 rows */
                    if (cand[i]->takes && !cand[i]->takes(t))
                        continue;
                    cpu_cache_flush(wd, (size_t)rows * row_bytes);
                    double s = time_now();
                    if (q_run(cand[i], y, x, q_bucket_m[b], &w) < 0)
                        continue;
                    s = time_now() - s;
                    if (s < best[i])
                        best[i] = s;
                }
            }
            int win = 0;
            for (int i = 1; i < n; i++)
                if (best[i] * (1.0 + Q_CAL_MARGIN) < best[win])
                    win = i;
            q_chosen[ti][b] = cand[win];
            q_chosen_ms[ti][b] = best[win] * 1e3;
            q_x16_ms[ti][b] = try_x16 ? bx * 1e3 : NAN;
        }
        /* packed when vnni-x16 wins a bucket by the margin and loses none
         * by more (one row is often the memory's speed either way; a
         * prefill on AMX tiles keeps the rows) */
        bool wins = false, loses = false;
        for (int b = 0; b < Q_BUCKETS && try_x16; b++) {
            wins |= q_x16_ms[ti][b] * (1.0 + Q_CAL_MARGIN) < q_chosen_ms[ti][b];
            loses |= q_x16_ms[ti][b] > q_chosen_ms[ti][b] * (1.0 + Q_CAL_MARGIN);
        }
        q_packs[ti] = wins && !loses;
    }
    free(wp);
    free(tmp);
    free(wd);
    free(x);
    free(y);
    q_cal_ms[ti] = (time_now() - t0) * 1e3;
}

static void q_ensure(enum dtype t)
{
    const int ti = q_index(t);
    if (atomic_load(&q_ready[ti]))
        return;
    pthread_mutex_lock(&q_lock);
    if (!atomic_load(&q_ready[ti])) {
        q_calibrate(t);
        atomic_store(&q_ready[ti], true);
    }
    pthread_mutex_unlock(&q_lock);
}

/* The kernel of m rows of w's product: packed rows' own (a forced kernel
 * for rows only where it reads them: scalar as scalar-x16), else the
 * forced one or the measured one */
static const struct qdot_kernel *q_pick(const struct weight_view *w, int m)
{
    pthread_once(&q_env_once, q_read_env);
    const struct qdot_kernel *k = q_forced;
    if (w->pack == WEIGHT_PACK_X16) {
        if (k && k->packed)
            return k;
        if ((k && !strcmp(k->name, "scalar")) || !has_vnni())
            return q_named("scalar-x16");
        return q_named("vnni-x16");
    }
    if (k && !k->packed)
        return k;
    q_ensure(w->dtype);
    return q_chosen[q_index(w->dtype)][m == 1 ? 0 : m <= 4 ? 1 : m <= 8 ? 2 : m < 16 ? 3 : 4];
}

void cpu_qlinear_pack_force(int on)
{
    pthread_once(&q_env_once, q_read_env);
    q_pack_env = on < 0 ? -1 : on > 0;
}

bool cpu_qlinear_packs(enum dtype t)
{
    if (!qpack_takes(t) || t < DTYPE_Q8_0 || t > DTYPE_Q5_1)
        return false;
    pthread_once(&q_env_once, q_read_env);
    if (q_pack_env >= 0)
        return q_pack_env && has_vnni();
    q_ensure(t);
    return q_packs[q_index(t)];
}

const char *cpu_qlinear_kernels(void)
{
    static _Thread_local char buf[1024];
    pthread_once(&q_env_once, q_read_env);
    const struct qdot_kernel *f = q_forced;
    if (f) {
        snprintf(buf, sizeof(buf), "%s (every call, by request)", f->name);
        return buf;
    }
    size_t used = 0;
    double ms = 0;
    for (int ti = 0; ti < Q_TYPES && used < sizeof(buf); ti++) {
        const enum dtype t = (enum dtype)(DTYPE_Q8_0 + ti);
        q_ensure(t);
        ms += q_cal_ms[ti];
        const struct qdot_kernel *const *c = q_chosen[ti];
        used += (size_t)snprintf(buf + used, sizeof(buf) - used, "%s%s:", ti ? "; " : "",
                                 dtype_name(t));
        for (int b = 0; b < Q_BUCKETS && used < sizeof(buf); b++)
            used += (size_t)snprintf(buf + used, sizeof(buf) - used, "%s %s %s", b ? "," : "",
                                     q_bucket_name[b], c[b]->name);
        /* the chosen's time over vnni-x16's, and what blobs hold */
        const bool packs = q_pack_env >= 0 ? q_pack_env && has_vnni() : q_packs[ti];
        if (!isnan(q_x16_ms[ti][0]) && used < sizeof(buf))
            used += (size_t)snprintf(
                buf + used, sizeof(buf) - used,
                ", %s vnni-x16 (m1 %.2fx, m5-8 %.2fx, m16+ %.2fx)%s",
                packs ? "packed rows" : "rows kept, not", q_chosen_ms[ti][0] / q_x16_ms[ti][0],
                q_chosen_ms[ti][2] / q_x16_ms[ti][2], q_chosen_ms[ti][4] / q_x16_ms[ti][4],
                q_pack_env >= 0 ? " by SHARDSWAP_QPACK" : "");
    }
    if (used < sizeof(buf))
        snprintf(buf + used, sizeof(buf) - used, " (measured in %.0f ms)", ms);
    return buf;
}

int cpu_qlinear_force(const char *name)
{
    pthread_once(&q_env_once, q_read_env);
    const struct qdot_kernel *k = NULL;
    int rc = name ? q_find(name, &k) : 0;
    if (rc == 0)
        q_forced = k;
    return rc;
}

/* ---- f32 mode: dequantized blocks of rows ---- */

const void *cpu_qlinear_row(const struct weight_view *w, int r)
{
    if (w->pack != WEIGHT_PACK_X16 || r >= w->rows / QPACK_ROWS * QPACK_ROWS)
        return weight_row(w, r);
    void *row = cpu_scratch(CPU_SCRATCH_Q_ROW, dtype_row_bytes(w->dtype, (size_t)w->cols));
    if (row)
        qpack_row_unpack(w->dtype, weight_row(w, r / QPACK_ROWS * QPACK_ROWS), w->cols,
                         r % QPACK_ROWS, row);
    return row;
}

struct deq_job {
    float *y;
    const float *x;
    int m;
    const struct weight_view *w;
    gemv_rows_fn rows;
    int task_rows;
    atomic_int rc;
};

/* Weight rows [r0, r1) of j's product: 0, or ERR_NOMEM. */
static int deq_rows(const struct deq_job *j, int r0, int r1)
{
    const struct weight_view *w = j->w;
    const int k = w->cols;
    float *blk = cpu_scratch(CPU_SCRATCH_Q_DEQ, (size_t)Q_DEQ_ROWS * k * sizeof(float));
    if (!blk)
        return ERR_NOMEM;
    for (int r = r0; r < r1; r += Q_DEQ_ROWS) {
        const int nr = r1 - r < Q_DEQ_ROWS ? r1 - r : Q_DEQ_ROWS;
        for (int i = 0; i < nr; i++) {
            const void *row = cpu_qlinear_row(w, r + i);
            if (!row)
                return ERR_NOMEM;
            quant_dequantize(w->dtype, row, blk + (size_t)i * k, (size_t)k);
        }
        const struct weight_view f = {
            .dtype = DTYPE_F32, .data = blk, .rows = nr, .cols = k, .ld = (size_t)k};
        const struct gemv_args a = {
            .y = j->y + r, .ldy = (size_t)w->rows, .x = j->x, .ldx = (size_t)k, .m = j->m, .w = &f};
        j->rows(&a, 0, nr);
    }
    return 0;
}

static void deq_task(void *ctx, int task)
{
    struct deq_job *j = ctx;
    const int r0 = task * j->task_rows;
    const int r1 = r0 + j->task_rows < j->w->rows ? r0 + j->task_rows : j->w->rows;
    if (deq_rows(j, r0, r1) < 0)
        atomic_store(&j->rc, ERR_NOMEM);
}

static int q_gemv_f32(float *y, const float *x, int m, const struct weight_view *w)
{
    struct deq_job j = {.y = y,
                        .x = x,
                        .m = m,
                        .w = w,
                        .rows = cpu_gemv_rows_f32(m),
                        .task_rows = q_task_rows(w, 1, Q_DEQ_ROWS, Q_TASK_BYTES)};
    atomic_init(&j.rc, 0);
    cpu_kernels_run(deq_task, &j, (w->rows + j.task_rows - 1) / j.task_rows);
    if (atomic_load(&j.rc) < 0)
        return err_set(ERR_NOMEM, "out of host memory for %d x %d dequantized weights", Q_DEQ_ROWS,
                       w->cols);
    return 0;
}

int cpu_qlinear(float *y, const float *x, int m, const struct weight_view *w, enum kern_compute cm)
{
    if (cm == KERN_COMPUTE_F32)
        return m <= CPU_GEMV_MAX_M ? q_gemv_f32(y, x, m, w) : cpu_matmul(y, x, m, w, cm);
    return q_run(q_pick(w, m), y, x, m, w);
}

/* ---- a group of products in one run of the pool ---- */

/* One job of a group: its kernel's operands (bf16 mode) or its dequantized
 * blocks' (f32 mode), its rows per unit and its claims (q_units_of). */
struct qg_job {
    const struct qdot_kernel *k; /* NULL: f32 mode, deq */
    struct qdot_args a;
    struct deq_job d;
    int task_rows, per, tail;
    bool pieces; /* the group runs in sub-lanes: a step's units are k's pieces */
};

/* units c[k] of the group's jobs job[k], one step (cpu_lanes_units_fn):
 * one piece per unit for a group in sub-lanes (every job has the same
 * pieces kernel), else the one unit's rows */
static int qg_units(void *ctx, const int *job, const int *c, int count)
{
    const struct qg_job *gj = ctx;
    if (gj[job[0]].pieces) {
        struct qdot_piece p[CPU_LANES_STREAMS_MAX];
        for (int k = 0; k < count; k++)
            p[k] = q_piece(&gj[job[k]].a, gj[job[k]].task_rows, c[k], 1);
        gj[job[0]].k->pieces(p, count);
        return 0;
    }
    assert(count == 1);
    const struct qg_job *j = &gj[job[0]];
    const int rows = j->k ? j->a.w->rows : j->d.w->rows;
    const int r0 = c[0] * j->task_rows;
    const int r1 = r0 + j->task_rows < rows ? r0 + j->task_rows : rows;
    return j->k ? q_rows(j->k, &j->a, r0, r1) : deq_rows(&j->d, r0, r1);
}

/* Whether job i's x, quantized for kernel k, is job e's (ke): the same rows
 * quantized the same way (Q8_0 or Q8_K); and laid out the same way too
 * (*layout). */
static bool qg_shares(const struct kern_linear_job *ji, const struct qdot_kernel *k,
                      const struct kern_linear_job *je, const struct qdot_kernel *ke, bool *layout)
{
    *layout = false;
    if (ji->x != je->x || ji->m != je->m || ji->w.cols != je->w.cols ||
        qdot_xtype_of(ji->w.dtype) != qdot_xtype_of(je->w.dtype))
        return false;
    /* the packed groups and vnni-near's rows depend on the type of x
     * alone, the runs and tiles on the weights' type too */
    const enum q_xlayout li = q_layout(k, ji->w.dtype), le = q_layout(ke, je->w.dtype);
    *layout = li == le &&
              (li == Q_X_GROUPS || li == Q_X_PAIRS || li == Q_X_XR || ji->w.dtype == je->w.dtype);
    return true;
}

int cpu_qlinear_group(const struct kern_linear_job *jobs, int n, enum kern_compute cm)
{
    assert(n > 0 && n <= CPU_GEMV_GROUP_MAX);
    struct qg_job gj[CPU_GEMV_GROUP_MAX];
    int first[CPU_GEMV_GROUP_MAX + 1];
    /* per job: the earlier job whose quantized x it reads (-1: its own),
     * and whether it reads that job's layout too */
    int from[CPU_GEMV_GROUP_MAX];
    bool laid[CPU_GEMV_GROUP_MAX];
    struct q_xsize z[CPU_GEMV_GROUP_MAX];
    const bool bf16 = cm == KERN_COMPUTE_BF16;
    size_t bytes = 0;
    for (int i = 0; i < n; i++) {
        const struct kern_linear_job *j = &jobs[i];
        assert(j->m <= CPU_GEMV_MAX_M && dtype_is_block(j->w.dtype) && !quant_ct_is(j->w.dtype));
        gj[i].k = bf16 ? q_pick(&j->w, j->m) : NULL;
        from[i] = -1;
        laid[i] = false;
        if (!bf16)
            continue;
        for (int e = 0; e < i && from[i] < 0; e++)
            if (from[e] < 0 && qg_shares(j, gj[i].k, &jobs[e], gj[e].k, &laid[i]))
                from[i] = e;
        z[i] = q_xsize_of(j->m, &j->w, q_layout(gj[i].k, j->w.dtype));
        bytes += (from[i] < 0 ? z[i].xq_bytes : 0) + (laid[i] ? 0 : z[i].xp_bytes);
    }
    /* in sub-lanes when every job has the same kernel of streams (a stream
     * may then run from one job's rows into the next's), as gemv.c's */
    bool streams = bf16 && gj[0].k->pieces && gj[0].k->streams > 1;
    for (int i = 1; i < n; i++)
        streams = streams && gj[i].k == gj[0].k;
    for (int i = 0; i < n; i++) {
        q_units_of(&jobs[i].w, streams ? gj[0].k->streams : 1, &gj[i].task_rows, &gj[i].per,
                   &gj[i].tail);
        gj[i].pieces = streams;
    }
    char *buf = bytes ? cpu_scratch(CPU_SCRATCH_Q_X, bytes) : NULL;
    if (bytes && !buf)
        return err_set(ERR_NOMEM, "out of host memory for the quantized activations of %d products",
                       n);
    first[0] = 0;
    for (int i = 0; i < n; i++) {
        const struct kern_linear_job *j = &jobs[i];
        struct qg_job *g = &gj[i];
        if (!bf16) {
            g->d = (struct deq_job){.y = j->y,
                                    .x = j->x,
                                    .m = j->m,
                                    .w = &j->w,
                                    .rows = cpu_gemv_rows_f32(j->m),
                                    .task_rows = g->task_rows};
        } else if (laid[i]) {
            g->a = gj[from[i]].a;
            g->a.y = j->y;
            g->a.ldy = (size_t)j->w.rows;
            g->a.w = &j->w;
        } else {
            char *xq = from[i] < 0 ? buf : (char *)gj[from[i]].a.xq;
            if (from[i] < 0)
                buf += z[i].xq_bytes;
            q_xfill(j->y, j->x, j->m, &j->w, q_layout(g->k, j->w.dtype), &z[i], xq, buf,
                    from[i] < 0, &g->a);
            buf += z[i].xp_bytes;
        }
        first[i + 1] = first[i] + (j->w.rows + g->task_rows - 1) / g->task_rows;
    }
    /* claims as long as the jobs' (the first's: they differ only where the
     * shapes do), the last few steps alone */
    const int nstreams = streams ? gj[0].k->streams : 1;
    const int rc = gj[0].tail ? cpu_lanes_run_group_claims(first, n, nstreams, gj[0].per,
                                                           gj[0].tail, qg_units, gj)
                              : cpu_lanes_run_group_streams(first, n, nstreams, qg_units, gj);
    if (rc < 0)
        return err_set(ERR_NOMEM, "out of host memory for the weight rows of %d products", n);
    return 0;
}
