/* The CPU backend's linear layers for many input rows: oneDNN's matmul
 * primitive or OpenBLAS's sgemm, with the weights as the B operand in place
 * (B = W^T is W read with strides {1, ld}) or, for narrow weights, widened
 * a block of rows at a time.
 *
 * Which path runs is measured on the machine, once per process, at the
 * first product of each class (matmul_ensure; SHARDSWAP_MATMUL or
 * cpu_matmul_force names one instead):
 * - f32 products (f32 weights in f32 mode, widened f16/bf16 blocks, and x
 *   rounded to bf16 in bf16 mode when the round path below runs): oneDNN's
 *   f32 primitive ("onednn") or OpenBLAS sgemm ("openblas"). A column slice
 *   of f32 weights (ld > cols) always takes OpenBLAS, which reads the row
 *   stride natively; oneDNN falls back to gemm:jit there.
 * - bf16 mode: x rounded to bf16 and oneDNN's bf16 x bf16 -> f32 primitive
 *   (bf16 weights in place, f16/f32 blocks rounded to bf16: "onednn-bf16"),
 *   or x rounded and widened back and the f32 product above ("round-f32"):
 *   the same products (bf16 x bf16 is exact in f32) and f32 sums either
 *   way. Where oneDNN runs AMX the first is ~6x the second; on AVX512-BF16
 *   without AMX (oneDNN 2.6) it measured ~0.6x. Where the CPU has AMX, a
 *   third: x packed and our own tiles over the weights in place ("amx",
 *   matmul_amx.h); which of it and oneDNN's runs is timed again per weight
 *   shape on the model's own first products (mm_bf16).
 *
 * Threads: the product is split by rows of the weights over the kernel
 * pool (cpu_kernels_run: cpu_threads tasks' worth, or all on the calling
 * thread when it computes alone); every primitive runs on one OpenMP
 * thread, the one that calls it (omp_set_num_threads(1) there; the setting
 * is per thread), and OpenBLAS on one thread per caller (cpu_set_threads).
 * oneDNN's own OpenMP team is never started: see mm_job.
 */
#include "backend/cpu/cpu.h"
#include "backend/cpu/linear.h"

#include <cblas.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_version.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/ctlinear.h"
#include "backend/cpu/matmul_amx.h"
#include "backend/cpu/pool.h"
#include "backend/cpu/qlinear.h"
#include "backend/cpu/scratch.h"
#include "backend/cpu/vec.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/timing.h"

/* Rows of a narrow weight widened per primitive call. */
#define WIDEN_BLOCK_ROWS 512
/* Primitives kept: the shapes of one model's prefill at a few prompt
 * lengths (4 to 6 shapes per length); more evicts the least recently used. */
#define PRIM_CACHE_SIZE 32

/* ---- engine, streams ---- */

static dnnl_engine_t engine;
static dnnl_status_t engine_status;
static pthread_once_t engine_once = PTHREAD_ONCE_INIT;

/* A stream per thread: oneDNN streams are not meant to be shared between
 * threads that execute at once. Destroyed at thread exit. */
static _Thread_local dnnl_stream_t stream_tl;
static pthread_key_t stream_key;

static void stream_destroy(void *s)
{
    dnnl_stream_destroy(s);
}

static void engine_make(void)
{
    engine_status = dnnl_engine_create(&engine, dnnl_cpu, 0);
    (void)pthread_key_create(&stream_key, stream_destroy);
}

static const char *dnnl_status_name(dnnl_status_t s)
{
    switch (s) {
    case dnnl_success:
        return "success";
    case dnnl_out_of_memory:
        return "out of memory";
    case dnnl_invalid_arguments:
        return "invalid arguments";
    case dnnl_unimplemented:
        return "unimplemented";
    case dnnl_runtime_error:
        return "runtime error";
    case dnnl_not_required:
        return "not required";
    default: /* 2.x's iterator end, 3.x's graph statuses: none from the calls here */
        return "unknown status";
    }
}

/* A failed oneDNN call as the project's error, naming the function (call
 * is its text, up to the parenthesis) and the shape (none when m is 0). */
static int dnnl_fail(dnnl_status_t s, const char *call, int m, int n, int k)
{
    const int code = s == dnnl_out_of_memory ? ERR_NOMEM : ERR_UNSUPPORTED;
    const int len = (int)strcspn(call, "(");
    if (m == 0)
        return err_set(code, "oneDNN %.*s failed (%s)", len, call, dnnl_status_name(s));
    return err_set(code, "oneDNN %.*s failed (%s) for a %d x %d by %d x %d matmul", len, call,
                   dnnl_status_name(s), m, k, k, n);
}

#define DNNL_TRY(call, m, n, k)                                                                    \
    do {                                                                                           \
        dnnl_status_t st_ = (call);                                                                \
        if (st_ != dnnl_success) {                                                                 \
            rc = dnnl_fail(st_, #call, m, n, k);                                                   \
            goto out;                                                                              \
        }                                                                                          \
    } while (0)

/* The calling thread's stream, made on first use; NULL with an error set. */
static dnnl_stream_t stream_get(void)
{
    pthread_once(&engine_once, engine_make);
    if (engine_status != dnnl_success) {
        dnnl_fail(engine_status, "dnnl_engine_create", 0, 0, 0);
        return NULL;
    }
    if (!stream_tl) {
        dnnl_status_t s = dnnl_stream_create(&stream_tl, engine, dnnl_stream_default_flags);
        if (s != dnnl_success) {
            stream_tl = NULL;
            dnnl_fail(s, "dnnl_stream_create", 0, 0, 0);
            return NULL;
        }
        (void)pthread_setspecific(stream_key, stream_tl);
    }
    return stream_tl;
}

/* ---- oneDNN 2.x and 3.x ----
 * The two C APIs differ here in one step: 2.x fills memory descriptors
 * (structs) and a matmul operation descriptor, then creates the primitive
 * descriptor; 3.x creates it in one call from memory descriptors that are
 * handles, created and destroyed. A query's memory descriptor (md_ref) is
 * read-only in both and owned by the primitive descriptor. */

#if DNNL_VERSION_MAJOR >= 3
typedef const_dnnl_memory_desc_t md_ref;
#else
typedef const dnnl_memory_desc_t *md_ref;
#endif

/* A 2-D operand: dims and strides in elements, of type dt. */
struct md_spec {
    dnnl_dims_t dims, strides;
    dnnl_data_type_t dt;
};

/* The primitive descriptor of dst = src @ wei (no bias) with attr on the
 * engine, at *pd, which the caller destroys. */
static dnnl_status_t matmul_pd_create(dnnl_primitive_desc_t *pd, const struct md_spec *src,
                                      const struct md_spec *wei, const struct md_spec *dst,
                                      const_dnnl_primitive_attr_t attr)
{
    const struct md_spec *spec[3] = {src, wei, dst};
    dnnl_status_t s = dnnl_success;
#if DNNL_VERSION_MAJOR >= 3
    dnnl_memory_desc_t md[3] = {NULL, NULL, NULL};
    for (int i = 0; i < 3 && s == dnnl_success; i++)
        s = dnnl_memory_desc_create_with_strides(&md[i], 2, spec[i]->dims, spec[i]->dt,
                                                 spec[i]->strides);
    if (s == dnnl_success)
        s = dnnl_matmul_primitive_desc_create(pd, engine, md[0], md[1], NULL, md[2], attr);
    for (int i = 0; i < 3; i++)
        if (md[i])
            dnnl_memory_desc_destroy(md[i]);
#else
    dnnl_memory_desc_t md[3];
    for (int i = 0; i < 3 && s == dnnl_success; i++)
        s = dnnl_memory_desc_init_by_strides(&md[i], 2, spec[i]->dims, spec[i]->dt,
                                             spec[i]->strides);
    dnnl_matmul_desc_t d;
    if (s == dnnl_success)
        s = dnnl_matmul_desc_init(&d, &md[0], &md[1], NULL, &md[2]);
    if (s == dnnl_success)
        s = dnnl_primitive_desc_create(pd, &d, attr, engine, NULL);
#endif
    return s;
}

/* Whether oneDNN makes a bf16 x bf16 -> f32 matmul on this CPU: it needs
 * AVX-512 (or AVX2-VNNI-2 in oneDNN 3.3 and later) for one, and says
 * "unimplemented" where the CPU has AVX2 alone (AMD EPYC Zen 2). Asked once,
 * of a small product's descriptor. */
static pthread_once_t bf16_once = PTHREAD_ONCE_INIT;
static bool bf16_onednn;

static void bf16_probe(void)
{
    pthread_once(&engine_once, engine_make);
    if (engine_status != dnnl_success)
        return;
    const struct md_spec src = {{16, 32}, {32, 1}, dnnl_bf16};
    const struct md_spec wei = {{32, 16}, {1, 32}, dnnl_bf16};
    const struct md_spec dst = {{16, 16}, {16, 1}, dnnl_f32};
    dnnl_primitive_desc_t pd = NULL;
    bf16_onednn = matmul_pd_create(&pd, &src, &wei, &dst, NULL) == dnnl_success;
    if (pd)
        dnnl_primitive_desc_destroy(pd);
}

static bool onednn_has_bf16(void)
{
    pthread_once(&bf16_once, bf16_probe);
    return bf16_onednn;
}

/* ---- the primitive cache ---- */

/* y[m, n] (row stride ldy) = a[m, k] @ b where b is W^T of a row-major W
 * (n x k, row stride ld): a and b of type dt, y in f32. Made and run on one
 * OpenMP thread (the plan depends on the count). */
struct prim_key {
    int m, n, k;
    size_t ld, ldy;
    dnnl_data_type_t dt;
};

struct prim {
    struct prim_key key;
    dnnl_primitive_t p;
    char impl[64]; /* what oneDNN chose: "brg:avx512_core", ... */
    int users;     /* calls running it: not evicted while > 0 */
    uint64_t used; /* tick of the last take, for LRU */
    bool cached;
};

/* The lock guards the table (keys, users, ticks); primitives are created,
 * executed and destroyed outside it. */
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static struct prim *cache[PRIM_CACHE_SIZE];
static uint64_t cache_tick;
static uint64_t cache_misses;
static char last_impl[64]; /* the implementation last taken, by any thread */

static void prim_free(struct prim *p)
{
    if (p) {
        dnnl_primitive_destroy(p->p);
        free(p);
    }
}

static int prim_create(const struct prim_key *key, struct prim **out)
{
    const int m = key->m, n = key->n, k = key->k;
    int rc = 0;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_attr_t attr = NULL;
    struct prim *p = calloc(1, sizeof(*p));
    if (!p)
        return err_set(ERR_NOMEM, "out of host memory for a matmul primitive");
    const struct md_spec a = {.dims = {m, k}, .strides = {k, 1}, .dt = key->dt};
    const struct md_spec b = {.dims = {k, n}, .strides = {1, (dnnl_dim_t)key->ld}, .dt = key->dt};
    const struct md_spec c = {.dims = {m, n}, .strides = {(dnnl_dim_t)key->ldy, 1}, .dt = dnnl_f32};
    /* the scratchpad (brgemm's copy of B, ...) comes from the calling
     * thread: with the library's, one primitive run from two threads at
     * once raced (tensor-parallel ranks, measured wrong results) */
    DNNL_TRY(dnnl_primitive_attr_create(&attr), m, n, k);
    DNNL_TRY(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user), m, n, k);
    DNNL_TRY(matmul_pd_create(&pd, &a, &b, &c, attr), m, n, k);
    const char *impl = NULL;
    DNNL_TRY(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl), m, n, k);
    snprintf(p->impl, sizeof(p->impl), "%s", impl ? impl : "?");
    DNNL_TRY(dnnl_primitive_create(&p->p, pd), m, n, k);
    p->key = *key;
out:
    dnnl_primitive_desc_destroy(pd);
    dnnl_primitive_attr_destroy(attr);
    if (rc < 0) {
        free(p);
        return rc;
    }
    *out = p;
    return 0;
}

static bool key_eq(const struct prim_key *a, const struct prim_key *b)
{
    return a->m == b->m && a->n == b->n && a->k == b->k && a->ld == b->ld && a->ldy == b->ldy &&
           a->dt == b->dt;
}

/* The primitive for key, taken (users + 1) until prim_release. A miss
 * creates it outside the lock and caches it in a free slot or in place of
 * the least recently used idle one; when every slot is busy it is used once
 * and freed. */
static int prim_take(const struct prim_key *key, struct prim **out)
{
    pthread_mutex_lock(&cache_lock);
    for (int i = 0; i < PRIM_CACHE_SIZE; i++)
        if (cache[i] && key_eq(&cache[i]->key, key)) {
            cache[i]->users++;
            cache[i]->used = ++cache_tick;
            memcpy(last_impl, cache[i]->impl, sizeof(last_impl));
            *out = cache[i];
            pthread_mutex_unlock(&cache_lock);
            return 0;
        }
    cache_misses++;
    pthread_mutex_unlock(&cache_lock);

    struct prim *p = NULL;
    int rc = prim_create(key, &p);
    if (rc < 0)
        return rc;
    p->users = 1;
    struct prim *evicted = NULL;
    pthread_mutex_lock(&cache_lock);
    memcpy(last_impl, p->impl, sizeof(last_impl));
    int slot = -1;
    for (int i = 0; i < PRIM_CACHE_SIZE; i++) {
        if (!cache[i]) {
            slot = i;
            break;
        }
        if (cache[i]->users == 0 && (slot < 0 || cache[i]->used < cache[slot]->used))
            slot = i;
    }
    /* a twin made by a racing miss may sit there already; two copies of one
     * key are harmless (the older ages out) */
    if (slot >= 0) {
        evicted = cache[slot];
        cache[slot] = p;
        p->cached = true;
        p->used = ++cache_tick;
    }
    pthread_mutex_unlock(&cache_lock);
    prim_free(evicted);
    *out = p;
    return 0;
}

static void prim_release(struct prim *p)
{
    if (!p->cached) {
        prim_free(p);
        return;
    }
    pthread_mutex_lock(&cache_lock);
    p->users--;
    pthread_mutex_unlock(&cache_lock);
}

/* y[m, n] (row stride ldy) = a[m, k] @ W^T, W (n x k, row stride ld) at b;
 * a and W of type dt; on one OpenMP thread, the calling one. */
static int dnnl_matmul_run(float *y, size_t ldy, const void *a, int m, const void *b, int n, int k,
                           size_t ld, dnnl_data_type_t dt)
{
    dnnl_stream_t s = stream_get();
    if (!s)
        return ERR_UNSUPPORTED;
    if (omp_get_max_threads() != 1)
        omp_set_num_threads(1);
    struct prim_key key = {.m = m, .n = n, .k = k, .ldy = ldy, .ld = ld, .dt = dt};
    struct prim *p;
    int rc = prim_take(&key, &p);
    if (rc < 0)
        return rc;
    dnnl_memory_t am = NULL, bm = NULL, cm = NULL, sm = NULL;
    const_dnnl_primitive_desc_t pd;
    DNNL_TRY(dnnl_primitive_get_primitive_desc(p->p, &pd), m, n, k);
    DNNL_TRY(dnnl_memory_create(&am, dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0), engine,
                                (void *)a),
             m, n, k);
    DNNL_TRY(dnnl_memory_create(&bm, dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0),
                                engine, (void *)b),
             m, n, k);
    DNNL_TRY(
        dnnl_memory_create(&cm, dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0), engine, y),
        m, n, k);
    md_ref smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    size_t sbytes = smd ? dnnl_memory_desc_get_size(smd) : 0;
    void *spad = cpu_scratch(CPU_SCRATCH_MM_PAD, sbytes ? sbytes : 64);
    if (!spad) {
        rc = err_set(ERR_NOMEM, "out of host memory for a %zu-byte matmul scratchpad", sbytes);
        goto out;
    }
    DNNL_TRY(dnnl_memory_create(&sm, smd, engine, spad), m, n, k);
    dnnl_exec_arg_t args[] = {
        {DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}, {DNNL_ARG_SCRATCHPAD, sm}};
    DNNL_TRY(dnnl_primitive_execute(p->p, s, 4, args), m, n, k);
    DNNL_TRY(dnnl_stream_wait(s), m, n, k);
out:
    dnnl_memory_destroy(am);
    dnnl_memory_destroy(bm);
    dnnl_memory_destroy(cm);
    dnnl_memory_destroy(sm);
    prim_release(p);
    return rc;
}

/* ---- the product, a block of weight rows per pool task ---- */

/* How one product runs: operands of type dt (f32 or bf16), the weights
 * converted to dt a block at a time or read in place, and for f32 OpenBLAS
 * or oneDNN. */
struct mm_plan {
    dnnl_data_type_t dt;
    bool convert;
    bool blas; /* f32 only: OpenBLAS sgemm instead of oneDNN */
    bool round; /* f32 only: converted CT weights rounded to bf16 (bf16 mode) */
};

/* y = x @ w^T split by rows of w (columns of y) over the kernel pool: each
 * task runs a one-thread primitive (or sgemm) on its block, the weights in
 * place or first converted to dt (f32 or bf16) into the task thread's
 * scratch. oneDNN's own OpenMP team is never used: libgomp's threads spin
 * after each parallel region (its default, read before main) and took the
 * cores from the pool and OpenBLAS that ran next: prefill measured 2.5x
 * slower. */
struct mm_job {
    float *y;      /* (m, w.rows) */
    const void *x; /* (m, k) of type plan.dt */
    int m, rows;   /* rows of w per task */
    const struct weight_view *w;
    struct mm_plan plan;
    atomic_int rc; /* the first failure; its message in msg */
    char msg[256];
};

/* Rows r0 .. r0 + nb - 1 of w as dense f32 or bf16 rows at dst. To bf16
 * through f32 in spans of CONVERT_SPAN (both steps vector loops; f16 to f32
 * is exact, so this is bf16(w) as a scalar conversion gives it): element by
 * element it had made opt-1.3b's f16 prefill in bf16 mode 0.7x its f32
 * mode's. */
#define CONVERT_SPAN 1024

static int convert_rows(void *dst, bool to_bf16, bool round, const struct weight_view *w, int r0,
                        int nb)
{
    const int k = w->cols;
    float span[CONVERT_SPAN];
    for (int r = 0; r < nb; r++) {
        /* a packed view's row written back first (qlinear.h) */
        const char *src =
            w->pack == WEIGHT_PACK_X16 ? cpu_qlinear_row(w, r0 + r) : weight_row(w, r0 + r);
        if (!src)
            return err_set(ERR_NOMEM, "out of host memory for a packed weight row");
        if (quant_ct_is(w->dtype)) {
            /* compressed-tensors blocks widen on vectors, straight to bf16
             * for the bf16 primitives; bf16 mode's f32 product gets the
             * same bf16 weights widened back */
            float *f = (float *)dst + (size_t)r * k;
            cpu_ct_dequantize(w->dtype, src,
                              to_bf16 ? (void *)((uint16_t *)dst + (size_t)r * k) : f, (size_t)k,
                              to_bf16);
            for (int c = 0; !to_bf16 && round && c < k; c++)
                f[c] = bf16_round(f[c]);
            continue;
        }
        if (!to_bf16) {
            dtype_to_f32(w->dtype, src, (float *)dst + (size_t)r * k, (size_t)k);
            continue;
        }
        uint16_t *d = (uint16_t *)dst + (size_t)r * k;
        for (int c = 0; c < k; c += CONVERT_SPAN) {
            const size_t len = (size_t)(k - c < CONVERT_SPAN ? k - c : CONVERT_SPAN);
            /* spans start on block boundaries: CONVERT_SPAN is whole blocks */
            const char *at = src + dtype_row_bytes(w->dtype, (size_t)c);
            const float *f = (const float *)at;
            if (w->dtype != DTYPE_F32) {
                dtype_to_f32(w->dtype, at, span, len);
                f = span;
            }
            vec_to_bf16(d + c, f, len);
        }
    }
    return 0;
}

/* Runs on a pool thread (or the caller): errors go to the job, since the
 * message is thread-local. */
static void mm_task(void *ctx, int task)
{
    struct mm_job *j = ctx;
    const struct weight_view *w = j->w;
    const bool to_bf16 = j->plan.dt == dnnl_bf16;
    const int k = w->cols, r0 = task * j->rows;
    const int nb = w->rows - r0 < j->rows ? w->rows - r0 : j->rows;
    const void *b = weight_row(w, r0);
    size_t ld = w->ld;
    int rc = 0;
    if (j->plan.convert) {
        void *blk = cpu_scratch(CPU_SCRATCH_MM_BLOCK, (size_t)nb * k * (to_bf16 ? 2 : 4));
        if (!blk) {
            rc = err_set(ERR_NOMEM, "out of host memory for a %d x %d weight block", nb, k);
            goto out;
        }
        if ((rc = convert_rows(blk, to_bf16, j->plan.round, w, r0, nb)) < 0)
            goto out;
        b = blk;
        ld = (size_t)k;
    }
    if (j->plan.blas) {
        /* sgemm takes the strides of both operands and of y natively */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, j->m, nb, k, 1.0f, j->x, k, b,
                    (int)ld, 0.0f, j->y + r0, w->rows);
        goto out;
    }
    if (nb == w->rows) {
        rc = dnnl_matmul_run(j->y, (size_t)nb, j->x, j->m, b, nb, k, ld, j->plan.dt);
        goto out;
    }
    /* oneDNN's brgemm wants a dense output (a strided one runs gemm:jit,
     * ~12% slower): the block goes through scratch into y's columns */
    float *yb = cpu_scratch(CPU_SCRATCH_MM_Y, (size_t)j->m * nb * sizeof(float));
    if (!yb) {
        rc = err_set(ERR_NOMEM, "out of host memory for a %d x %d output block", j->m, nb);
        goto out;
    }
    rc = dnnl_matmul_run(yb, (size_t)nb, j->x, j->m, b, nb, k, ld, j->plan.dt);
    for (int i = 0; i < j->m && rc == 0; i++)
        memcpy(j->y + (size_t)i * w->rows + r0, yb + (size_t)i * nb, (size_t)nb * sizeof(float));
out:;
    int none = 0;
    if (rc < 0 && atomic_compare_exchange_strong(&j->rc, &none, rc))
        snprintf(j->msg, sizeof(j->msg), "%s", err_msg());
}

static int matmul_pool(float *y, const void *x, int m, const struct weight_view *w,
                       struct mm_plan plan)
{
    const int n = w->rows, threads = cpu_kernels_alone() ? 1 : cpu_threads();
    /* a block per thread, a multiple of 64 rows; converted blocks at most
     * WIDEN_BLOCK_ROWS, so the scratch stays small (more tasks balance) */
    int rows = ((n + threads - 1) / threads + 63) / 64 * 64;
    if (plan.convert && rows > WIDEN_BLOCK_ROWS)
        rows = WIDEN_BLOCK_ROWS;
    if (plan.blas) {
        pthread_mutex_lock(&cache_lock);
        last_impl[0] = '\0'; /* OpenBLAS, not a primitive */
        pthread_mutex_unlock(&cache_lock);
    }
    struct mm_job j = {.y = y, .x = x, .m = m, .rows = rows, .w = w, .plan = plan};
    atomic_init(&j.rc, 0);
    cpu_kernels_run(mm_task, &j, (n + rows - 1) / rows);
    int rc = atomic_load(&j.rc);
    return rc < 0 ? err_set(rc, "%s", j.msg) : 0;
}

/* ---- the paths, chosen by measurement ---- */

enum mm_class { MM_F32, MM_BF16, MM_CLASSES };
#define MM_PATHS 3
/* per class, the paths in order of preference on a near-tie (NULL: none) */
static const char *const mm_path_names[MM_CLASSES][MM_PATHS] = {
    {"onednn", "openblas", NULL},
    {"round-f32", "onednn-bf16", "amx"},
};
static const char *const mm_class_names[MM_CLASSES] = {"f32", "bf16"};

#define MM_CAL_M 128    /* rows of x: a prefill's block */
#define MM_CAL_N 1024   /* weight rows */
#define MM_CAL_K 1024   /* weight columns */
#define MM_CAL_REPS 3
#define MM_CAL_MARGIN 0.03
/* a path slower than this on its first call (which also creates the
 * primitive, a few ms) is not timed again: a reference implementation
 * where the CPU lacks the instructions */
#define MM_CAL_SLOW_S 0.05

static struct {
    pthread_mutex_t lock; /* guards the calibration */
    pthread_once_t env_once;
    atomic_bool ready[MM_CLASSES];
    atomic_int forced[MM_CLASSES]; /* path index, or -1: measured */
    int chosen[MM_CLASSES];
    double gflops[MM_CLASSES][MM_PATHS]; /* 0: not measured */
    double ms[MM_CLASSES];
} mm_choice = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .env_once = PTHREAD_ONCE_INIT,
    .forced = {-1, -1},
};

static int mm_path_find(const char *name, int *cls, int *path)
{
    for (int c = 0; c < MM_CLASSES; c++)
        for (int p = 0; p < MM_PATHS; p++)
            if (mm_path_names[c][p] && strcmp(mm_path_names[c][p], name) == 0) {
                *cls = c;
                *path = p;
                if (p == 2 && !cpu_amx_granted())
                    return err_set(ERR_UNSUPPORTED,
                                   "matmul path amx needs AMX-TILE and AMX-BF16 and the tile "
                                   "data granted by Linux, which this process does not have");
                if (c == MM_BF16 && p == 1 && !onednn_has_bf16())
                    return err_set(ERR_UNSUPPORTED,
                                   "matmul path onednn-bf16: oneDNN %d.%d makes no bf16 matmul "
                                   "on this CPU (it needs AVX-512)",
                                   dnnl_version()->major, dnnl_version()->minor);
                return 0;
            }
    return err_set(ERR_INVALID,
                   "unknown matmul path \"%s\" (expected onednn or openblas for f32 products, "
                   "round-f32, onednn-bf16 or amx for bf16 mode)",
                   name);
}

/* SHARDSWAP_MATMUL: a comma-separated list of paths, at most one per class. */
static void mm_read_env(void)
{
    const char *req = getenv("SHARDSWAP_MATMUL");
    if (!req || !*req)
        return;
    char buf[128];
    snprintf(buf, sizeof(buf), "%s", req);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int c, p;
        if (mm_path_find(tok, &c, &p) < 0) {
            fprintf(stderr, "shardswap: SHARDSWAP_MATMUL: %s; choosing by measurement\n",
                    err_msg());
            continue;
        }
        atomic_store(&mm_choice.forced[c], p);
    }
}

/* The AMX path (matmul_amx.h): x packed over the pool a block of 16 rows a
 * task, then the weights' rows split over it. */
#define AMX_TASK_ROWS 128

struct amx_job {
    float *y;
    const float *x;
    uint16_t *xv;
    int m;
    const struct weight_view *w;
};

static void amx_pack_task(void *ctx, int b)
{
    const struct amx_job *j = ctx;
    matmul_amx_pack(j->xv, j->x, j->m, j->w->cols, b, b + 1);
}

static void amx_rows_task(void *ctx, int t)
{
    const struct amx_job *j = ctx;
    const int r0 = t * AMX_TASK_ROWS, n = j->w->rows;
    matmul_amx_rows(j->y, (size_t)n, j->xv, j->m, j->w, r0,
                    r0 + AMX_TASK_ROWS < n ? r0 + AMX_TASK_ROWS : n);
}

static int matmul_amx(float *y, const float *x, int m, const struct weight_view *w)
{
    const size_t bytes = matmul_amx_packed_bytes(m, w->cols);
    uint16_t *xv = cpu_scratch(CPU_SCRATCH_MM_XB, bytes);
    if (!xv)
        return err_set(ERR_NOMEM, "out of host memory for %d x %d packed bf16 activations", m,
                       w->cols);
    struct amx_job j = {.y = y, .x = x, .xv = xv, .m = m, .w = w};
    cpu_kernels_run(amx_pack_task, &j, (m + 15) / 16);
    cpu_kernels_run(amx_rows_task, &j, (w->rows + AMX_TASK_ROWS - 1) / AMX_TASK_ROWS);
    pthread_mutex_lock(&cache_lock);
    snprintf(last_impl, sizeof(last_impl), "amx (shardswap)");
    pthread_mutex_unlock(&cache_lock);
    return 0;
}

/* The product of class c by path p: f32 operands (x, dense f32 weights w)
 * for MM_F32; for MM_BF16, x rounded as bf16 mode rounds it and the bf16
 * product by oneDNN (p 1) or on AMX tiles (p 2, where the weights fit it,
 * else p 1), or the f32 one by the f32 class's path (p 0). */
static int mm_run(int c, int p, float *y, const float *x, int m, const struct weight_view *w,
                  bool f32_blas)
{
    const int k = w->cols;
    if (p == 2 && cpu_amx_granted() && matmul_amx_fits(w))
        return matmul_amx(y, x, m, w);
    if (c == MM_F32)
        return matmul_pool(y, x, m, w,
                           (struct mm_plan){.dt = dnnl_f32, .convert = w->dtype != DTYPE_F32,
                                            .blas = p == 1});
    if (p >= 1) {
        /* x to bf16, then bf16 weights in place, others converted */
        uint16_t *xb = cpu_scratch(CPU_SCRATCH_MM_XB, (size_t)m * k * sizeof(uint16_t));
        if (!xb)
            return err_set(ERR_NOMEM, "out of host memory for %d x %d bf16 activations", m, k);
        vec_to_bf16(xb, x, (size_t)m * k);
        return matmul_pool(y, xb, m, w,
                           (struct mm_plan){.dt = dnnl_bf16, .convert = w->dtype != DTYPE_BF16});
    }
    if (!(x = cpu_round_bf16(x, (size_t)m * k)))
        return err_set(ERR_NOMEM, "out of host memory for %d x %d bf16 activations", m, k);
    const bool slice = w->dtype == DTYPE_F32 && w->ld != (size_t)k;
    return matmul_pool(y, x, m, w,
                       (struct mm_plan){.dt = dnnl_f32,
                                        .convert = w->dtype != DTYPE_F32,
                                        .blas = f32_blas || slice,
                                        .round = true});
}

static bool mm_f32_blas(void);

/* Times both paths of class c on this thread alone (best of MM_CAL_REPS,
 * interleaved, after a call that creates the primitive) and keeps the
 * faster; the first listed unless the second wins by MM_CAL_MARGIN. A path
 * that fails, or is slower than MM_CAL_SLOW_S, is not taken. Under
 * mm_choice.lock. */
static void mm_calibrate(int c)
{
    double t0 = time_now();
    mm_choice.chosen[c] = 0;
    const enum dtype t = c == MM_F32 ? DTYPE_F32 : DTYPE_BF16;
    const bool blas = c == MM_BF16 && mm_f32_blas();
    char *wd = malloc((size_t)MM_CAL_N * MM_CAL_K * dtype_size(t));
    float *x = malloc((size_t)MM_CAL_M * MM_CAL_K * sizeof(float));
    float *y = malloc((size_t)MM_CAL_M * MM_CAL_N * sizeof(float));
    const bool alone = cpu_kernels_alone();
    cpu_kernels_single_thread(true);
    if (wd && x && y) {
        for (size_t i = 0; i < (size_t)MM_CAL_N * MM_CAL_K; i++) {
            float v = (float)((int)(i * 7919 % 13) - 6) * 0.01f;
            if (t == DTYPE_F32)
                ((float *)wd)[i] = v;
            else
                ((uint16_t *)wd)[i] = f32_to_bf16(v);
        }
        for (size_t i = 0; i < (size_t)MM_CAL_M * MM_CAL_K; i++)
            x[i] = (float)((int)(i % 11) - 5) * 0.1f;
        struct weight_view w = {.dtype = t, .data = wd, .rows = MM_CAL_N, .cols = MM_CAL_K,
                                .ld = MM_CAL_K};
        double best[MM_PATHS] = {1e30, 1e30, 1e30};
        bool ok[MM_PATHS];
        for (int p = 0; p < MM_PATHS; p++) {
            /* AMX only where the tile data was granted, oneDNN's bf16
             * product only where it makes one */
            ok[p] = mm_path_names[c][p] && (p != 2 || cpu_amx_granted()) &&
                    (c != MM_BF16 || p != 1 || onednn_has_bf16());
            double s = time_now();
            ok[p] = ok[p] && mm_run(c, p, y, x, MM_CAL_M, &w, blas) == 0 &&
                    time_now() - s < MM_CAL_SLOW_S;
        }
        for (int rep = 0; rep < MM_CAL_REPS; rep++)
            for (int p = 0; p < MM_PATHS; p++) {
                if (!ok[p])
                    continue;
                /* a model's weights come from memory, not the cache: a
                 * path that reads them once (amx) against one that copies
                 * them into its own layout first (oneDNN's brgemm) ranked
                 * the other way round on cached weights */
                cpu_cache_flush(wd, (size_t)MM_CAL_N * MM_CAL_K * dtype_size(t));
                double s = time_now();
                ok[p] = mm_run(c, p, y, x, MM_CAL_M, &w, blas) == 0;
                s = time_now() - s;
                if (s < best[p])
                    best[p] = s;
            }
        for (int p = 0; p < MM_PATHS; p++)
            mm_choice.gflops[c][p] =
                ok[p] ? 2.0 * MM_CAL_M * MM_CAL_N * MM_CAL_K / best[p] / 1e9 : 0.0;
        /* a later path must beat the best earlier one by the margin */
        int chosen = -1;
        for (int p = 0; p < MM_PATHS; p++)
            if (ok[p] && (chosen < 0 || best[p] * (1.0 + MM_CAL_MARGIN) < best[chosen]))
                chosen = p;
        mm_choice.chosen[c] = chosen < 0 ? 0 : chosen;
    }
    cpu_kernels_single_thread(alone);
    free(wd);
    free(x);
    free(y);
    mm_choice.ms[c] = (time_now() - t0) * 1e3;
}

/* The path class c runs: the forced one, else the measured one (measured
 * now if not yet). */
static int mm_path(int c)
{
    pthread_once(&mm_choice.env_once, mm_read_env);
    int f = atomic_load(&mm_choice.forced[c]);
    if (f >= 0)
        return f;
    /* bf16's round path multiplies by the f32 class's path: that one is
     * chosen first, before this class takes the lock it would take too */
    if (c == MM_BF16)
        (void)mm_path(MM_F32);
    if (!atomic_load(&mm_choice.ready[c])) {
        pthread_mutex_lock(&mm_choice.lock);
        if (!atomic_load(&mm_choice.ready[c])) {
            mm_calibrate(c);
            atomic_store(&mm_choice.ready[c], true);
        }
        pthread_mutex_unlock(&mm_choice.lock);
    }
    return mm_choice.chosen[c];
}

static bool mm_f32_blas(void)
{
    return mm_path(MM_F32) == 1;
}

int cpu_matmul_force(const char *name)
{
    pthread_once(&mm_choice.env_once, mm_read_env);
    if (!name) {
        for (int c = 0; c < MM_CLASSES; c++)
            atomic_store(&mm_choice.forced[c], -1);
        return 0;
    }
    int c, p;
    int rc = mm_path_find(name, &c, &p);
    if (rc < 0)
        return rc;
    atomic_store(&mm_choice.forced[c], p);
    return 0;
}

/* ---- oneDNN or AMX, per weight shape, on the model's own products ----
 * Where the bf16 class measured a bf16 x bf16 path (onednn-bf16 or amx)
 * and AMX runs, the two are timed again on the first MM_SHAPE_TRIALS real
 * products of each path per weight shape (rows x columns), alternating, and
 * the faster per multiply-add (best of each) is kept for that shape; oneDNN
 * must be faster by MM_CAL_MARGIN. The calibration's one
 * shape cannot tell: oneDNN's copy of every weight block into its layout
 * costs most against a long row (a down projection, 8192 columns), and the
 * AMX kernel's per-block stores most against a short one; the products of
 * one prefill span both. */
#define MM_SHAPE_TRIALS 5
#define MM_SHAPE_SLOTS 64

static struct {
    pthread_mutex_t lock;
    struct mm_shape {
        int n, k;
        int trials[2];    /* timed calls of onednn-bf16, amx */
        double best[2];   /* seconds per multiply-add */
        int chosen;       /* 1 or 2 once decided, else 0 */
    } s[MM_SHAPE_SLOTS];
    int n;
    int decided[MM_PATHS]; /* shapes that chose each path */
} mm_shapes = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* The path for a product of w: the shape's choice, or the next trial (*sh
 * its entry, to shape_record the time in); 0 when the shapes' table is
 * full (then the class's choice runs). */
static int shape_path(const struct weight_view *w, struct mm_shape **sh)
{
    pthread_mutex_lock(&mm_shapes.lock);
    struct mm_shape *e = NULL;
    for (int i = 0; i < mm_shapes.n && !e; i++)
        if (mm_shapes.s[i].n == w->rows && mm_shapes.s[i].k == w->cols)
            e = &mm_shapes.s[i];
    if (!e && mm_shapes.n < MM_SHAPE_SLOTS) {
        e = &mm_shapes.s[mm_shapes.n++];
        *e = (struct mm_shape){.n = w->rows, .k = w->cols, .best = {1e30, 1e30}};
    }
    int p = 0;
    *sh = NULL;
    if (e && e->chosen) {
        p = e->chosen;
    } else if (e) {
        p = e->trials[0] <= e->trials[1] ? 1 : 2;
        *sh = e;
    }
    pthread_mutex_unlock(&mm_shapes.lock);
    return p;
}

static void shape_record(struct mm_shape *e, int p, double per_mac)
{
    pthread_mutex_lock(&mm_shapes.lock);
    if (!e->chosen) {
        double *b = &e->best[p - 1];
        *b = per_mac < *b ? per_mac : *b;
        if (++e->trials[p - 1] >= MM_SHAPE_TRIALS && e->trials[2 - p] >= MM_SHAPE_TRIALS) {
            /* oneDNN must win by the calibration's margin: on a near-tie
             * in these trials (llama-3.2-1b's gate and up, 8192 x 2048,
             * within 3%) the whole prefill still ran 12% faster on AMX */
            e->chosen = e->best[0] * (1.0 + MM_CAL_MARGIN) < e->best[1] ? 1 : 2;
            mm_shapes.decided[e->chosen]++;
        }
    }
    pthread_mutex_unlock(&mm_shapes.lock);
}

static int mm_bf16(float *y, const float *x, int m, const struct weight_view *w)
{
    int p = mm_path(MM_BF16);
    const bool forced = atomic_load(&mm_choice.forced[MM_BF16]) >= 0;
    if (forced || p == 0 || !cpu_amx_granted() || !matmul_amx_fits(w))
        return mm_run(MM_BF16, p, y, x, m, w, mm_f32_blas());
    struct mm_shape *trial;
    int sp = shape_path(w, &trial);
    p = sp ? sp : p;
    double t0 = time_now();
    int rc = mm_run(MM_BF16, p, y, x, m, w, false);
    if (rc == 0 && trial)
        shape_record(trial, p, (time_now() - t0) / ((double)m * w->rows * w->cols));
    return rc;
}

/* printf into buf (cap bytes, *off of them used), cut at its end. */
static void __attribute__((format(printf, 4, 5)))
put(char *buf, size_t cap, size_t *off, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *off, cap - *off, fmt, ap);
    va_end(ap);
    if (n > 0)
        *off += (size_t)n < cap - *off ? (size_t)n : cap - *off - 1;
}

const char *cpu_matmul_paths(void)
{
    static _Thread_local char buf[400];
    size_t off = 0;
    double ms = 0;
    bool measured = false;
    buf[0] = '\0';
    for (int c = 0; c < MM_CLASSES; c++) {
        put(buf, sizeof(buf), &off, "%s%s: %s", c ? "; " : "", mm_class_names[c],
            mm_path_names[c][mm_path(c)]);
        if (atomic_load(&mm_choice.forced[c]) >= 0) {
            put(buf, sizeof(buf), &off, " (by request)");
            continue;
        }
        measured = true;
        ms += mm_choice.ms[c];
        for (int q = 0; q < MM_PATHS; q++)
            if (mm_path_names[c][q])
                put(buf, sizeof(buf), &off, "%s%s %.0f", q ? ", " : " (", mm_path_names[c][q],
                    mm_choice.gflops[c][q]);
        put(buf, sizeof(buf), &off, " GFLOP/s)");
    }
    if (measured)
        put(buf, sizeof(buf), &off, ", 1 thread, %dx%dx%d, measured in %.0f ms", MM_CAL_M,
            MM_CAL_N, MM_CAL_K, ms);
    pthread_mutex_lock(&mm_shapes.lock);
    const bool live = atomic_load(&mm_choice.forced[MM_BF16]) < 0;
    if (live && mm_shapes.decided[1] + mm_shapes.decided[2] > 0)
        put(buf, sizeof(buf), &off, "; bf16 weight shapes timed in use: %d onednn-bf16, %d amx",
            mm_shapes.decided[1], mm_shapes.decided[2]);
    pthread_mutex_unlock(&mm_shapes.lock);
    return buf;
}

const char *cpu_matmul_onednn(void)
{
    static _Thread_local char buf[96];
    const dnnl_version_t *v = dnnl_version();
    snprintf(buf, sizeof(buf), "%d.%d.%d (commit %s)", v->major, v->minor, v->patch,
             v->hash ? v->hash : "?");
    return buf;
}

int cpu_matmul(float *y, const float *x, int m, const struct weight_view *w, enum kern_compute cm)
{
    const int k = w->cols;
    if (!stream_get())
        return ERR_UNSUPPORTED;
    if (cm == KERN_COMPUTE_BF16)
        return mm_bf16(y, x, m, w);
    /* a column slice of f32 weights: OpenBLAS takes the stride at full
     * speed, oneDNN not */
    const bool slice = w->dtype == DTYPE_F32 && w->ld != (size_t)k;
    return mm_run(MM_F32, slice ? 1 : mm_path(MM_F32), y, x, m, w, false);
}

int cpu_matmul_ceiling(int m, int n, int k, enum kern_compute cm, int threads,
                       struct cpu_matmul_ceiling *out)
{
    memset(out, 0, sizeof(*out));
    const enum dtype wt = cm == KERN_COMPUTE_BF16 ? DTYPE_BF16 : DTYPE_F32;
    float *x = malloc((size_t)m * k * sizeof(float));
    float *y = malloc((size_t)m * n * sizeof(float));
    void *wd = calloc((size_t)n * k, dtype_size(wt));
    int rc = 0;
    if (!x || !y || !wd) {
        rc = err_set(ERR_NOMEM, "out of host memory for a %d x %d by %d x %d matmul", m, k, k, n);
        goto out;
    }
    for (size_t i = 0; i < (size_t)m * k; i++)
        x[i] = (float)(i % 7) * 0.25f;
    int saved = cpu_threads();
    if (threads > 0)
        cpu_set_threads(threads);
    struct weight_view w = {.dtype = wt, .data = wd, .rows = n, .cols = k, .ld = (size_t)k};
    double best = 1e30;
    /* the first call creates the primitive; best of the rest */
    for (int it = 0; it < 6 && rc == 0; it++) {
        double t0 = time_now();
        rc = cpu_matmul(y, x, m, &w, cm);
        double t = time_now() - t0;
        if (it > 0 && t < best)
            best = t;
    }
    if (threads > 0)
        cpu_set_threads(saved);
    if (rc < 0)
        goto out;
    out->gflops = 2.0 * m * n * k / best / 1e9;
    pthread_mutex_lock(&cache_lock);
    snprintf(out->impl, sizeof(out->impl), "%s", last_impl);
    pthread_mutex_unlock(&cache_lock);
out:
    free(x);
    free(y);
    free(wd);
    return rc;
}

uint64_t cpu_matmul_cache_misses(void)
{
    pthread_mutex_lock(&cache_lock);
    uint64_t n = cache_misses;
    pthread_mutex_unlock(&cache_lock);
    return n;
}
