/* A standalone loop behind gemv_amx.c's read pattern: the AMX GEMV's
 * block loop (16 weight rows x 32 bf16 columns a tile, in place with the
 * row stride, x as the B operand, two accumulators over the column chunks,
 * a block's sums put into y during the next block, as gemv_amx.c does) read
 * several ways, on 2 threads (each a contiguous half of the rows), weights
 * cycled through 1 GiB of huge pages (about 512 MB a timing): qwen2.5-0.5b's
 * 4864 x 896, 896 x 4864 and 151936 x 896 at m = 1 and 8. Variants: software
 * prefetch of the next (pf1) or after-next (pf2) block in address order
 * (16 lines a chunk, T0/T1/T2, every line or one in 2 or 4), TILELOADDT1
 * (nt), 2-4 far-apart sub-lanes' blocks in turn (s2, s4), two far-apart
 * blocks chunk by chunk over one x tile (i2), and a tile's rows G apart
 * (gG: G tiles of rows t, t + G, ...; what gemv_amx.c does). Per shape and m:
 * the median GB/s of the rounds, its fraction of a 4-stream AVX-512 read
 * (s4's prefetch) of the same weights in the same rounds, and the median of
 * each round's ratio to the base (adjacent rows, no prefetch).
 *
 *     amx_stream_ab [ROUNDS [FILTER]]   (default 7; FILTER: names containing it)
 *
 * Not part of the build; from the repository root:
 *     gcc -O2 -march=native -mamx-tile -mamx-bf16 -pthread -Isrc \
 *         tools/amx_stream_ab.c -o amx_stream_ab */
#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

#include "backend/cpu/amx_tiles.h"
static void cfg(int m)
{
    const uint16_t w = (uint16_t)(m * 4);
    /* 0,1 acc; 2,3 weights; 4,5 x; 6,7 acc of a second block */
    amx_tiles_configure((const uint16_t[]){w, w, 64, 64, w, w, w, w}, NULL, 8);
}

struct job {
    const uint16_t *w; /* matrix */
    int rows, cols;
    const uint16_t *xv;
    float *y;
    int m;
};

/* params of a variant */
struct var {
    const char *name;
    int pf;       /* 0 none; 1: linear prefetch of block +dist */
    int dist;     /* blocks ahead */
    int hint;     /* _MM_HINT_T0/T1/T2 */
    int every;    /* prefetch every n-th line */
    int streams;  /* sub-lanes per thread, blocks taken in turn */
    int inter2;   /* 2 blocks interleaved chunk by chunk (streams must be 2) */
    int nt;       /* weights by TILELOADDT1 */
    int grp;      /* rows in G interleaved groups: tile stride G rows */
};

static inline void pf_line(const char *p, int hint)
{
    switch (hint) {
    case 0: _mm_prefetch(p, _MM_HINT_T0); break;
    case 1: _mm_prefetch(p, _MM_HINT_T1); break;
    case 2: _mm_prefetch(p, _MM_HINT_T2); break;
    case 3: _mm_prefetch(p, _MM_HINT_NTA); break;
    }
}

static void put(float c[2][16][16], int m, float *y, size_t ldy, int gs)
{
    if (gs > 1) {
        const __m512i idx = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), _mm512_set1_epi32(gs));
        if (m < 3) {
            for (int i = 0; i < m; i++)
                for (int j = 0; j < 16; j++)
                    y[(size_t)i * ldy + (size_t)j * gs] = c[0][j][i] + c[1][j][i];
            return;
        }
        __m512 r[16];
        for (int j = 0; j < 16; j++)
            r[j] = _mm512_add_ps(_mm512_load_ps(c[0][j]), _mm512_load_ps(c[1][j]));
        amx_transpose16(r);
        for (int i = 0; i < m; i++)
            _mm512_i32scatter_ps(y + (size_t)i * ldy, idx, r[i], 4);
        return;
    }
    if (m < 3) {
        for (int i = 0; i < m; i++)
            for (int j = 0; j < 16; j++)
                y[(size_t)i * ldy + j] = c[0][j][i] + c[1][j][i];
        return;
    }
    __m512 r[16];
    for (int j = 0; j < 16; j++)
        r[j] = _mm512_add_ps(_mm512_load_ps(c[0][j]), _mm512_load_ps(c[1][j]));
    amx_transpose16(r);
    for (int i = 0; i < m; i++)
        _mm512_storeu_ps(y + (size_t)i * ldy, r[i]);
}
/* a block's sums waiting to be put */
struct pend {
    float (*acc)[16][16];
    float *y;
    int gs;
};

/* one block of 16 rows at wr, prefetching [pf, pf_end) linearly 16 lines
 * per chunk (every `every` lines) */
static inline __attribute__((always_inline)) void block(const uint16_t *wr, size_t stride, int chunks, const uint16_t *xv,
                         size_t chunk_x, int m, const char *pf, const char *pf_end, int hint,
                         int every, float out[2][16][16], struct pend *pd, size_t ldy,
                         const int nt)
{
    _tile_zero(0);
    _tile_zero(1);
    int c = 0;
    for (; c + 2 <= chunks; c += 2) {
        if (nt)
            _tile_stream_loadd(2, wr + (size_t)c * 32, stride);
        else
            _tile_loadd(2, wr + (size_t)c * 32, stride);
        _tile_loadd(4, xv + (size_t)c * chunk_x, m * 4);
        _tile_dpbf16ps(0, 2, 4);
        if (pf) {
            for (int l = 0; l < 16; l += every)
                if (pf + l * 64 < pf_end)
                    pf_line(pf + l * 64, hint);
            pf += 16 * 64;
        }
        if (nt)
            _tile_stream_loadd(3, wr + (size_t)(c + 1) * 32, stride);
        else
            _tile_loadd(3, wr + (size_t)(c + 1) * 32, stride);
        _tile_loadd(5, xv + (size_t)(c + 1) * chunk_x, m * 4);
        _tile_dpbf16ps(1, 3, 5);
        if (pf) {
            for (int l = 0; l < 16; l += every)
                if (pf + l * 64 < pf_end)
                    pf_line(pf + l * 64, hint);
            pf += 16 * 64;
        }
        if (c == 4 && pd->acc) {
            put(pd->acc, m, pd->y, ldy, pd->gs);
            pd->acc = NULL;
        }
    }
    if (c < chunks) {
        _tile_loadd(2, wr + (size_t)c * 32, stride);
        _tile_loadd(4, xv + (size_t)c * chunk_x, m * 4);
        _tile_dpbf16ps(0, 2, 4);
    }
    _tile_stored(0, out[0], 64);
    _tile_stored(1, out[1], 64);
    if (pd->acc)
        put(pd->acc, m, pd->y, ldy, pd->gs);
    pd->acc = out;
}

/* two blocks A, B chunk by chunk, x tile shared: acc A 0,1; B 6,7; w 2,3; x 4,5 */
static inline void block2(const uint16_t *wa, const uint16_t *wb, size_t stride, int chunks,
                          const uint16_t *xv, size_t chunk_x, int m, float oa[2][16][16],
                          float ob[2][16][16])
{
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(6);
    _tile_zero(7);
    int c = 0;
    for (; c + 2 <= chunks; c += 2) {
        _tile_loadd(4, xv + (size_t)c * chunk_x, m * 4);
        _tile_loadd(2, wa + (size_t)c * 32, stride);
        _tile_dpbf16ps(0, 2, 4);
        _tile_loadd(3, wb + (size_t)c * 32, stride);
        _tile_dpbf16ps(6, 3, 4);
        _tile_loadd(5, xv + (size_t)(c + 1) * chunk_x, m * 4);
        _tile_loadd(2, wa + (size_t)(c + 1) * 32, stride);
        _tile_dpbf16ps(1, 2, 5);
        _tile_loadd(3, wb + (size_t)(c + 1) * 32, stride);
        _tile_dpbf16ps(7, 3, 5);
    }
    if (c < chunks) {
        _tile_loadd(4, xv + (size_t)c * chunk_x, m * 4);
        _tile_loadd(2, wa + (size_t)c * 32, stride);
        _tile_dpbf16ps(0, 2, 4);
        _tile_loadd(3, wb + (size_t)c * 32, stride);
        _tile_dpbf16ps(6, 3, 4);
    }
    _tile_stored(0, oa[0], 64);
    _tile_stored(1, oa[1], 64);
    _tile_stored(6, ob[0], 64);
    _tile_stored(7, ob[1], 64);
}

/* rows [r0, r1) (multiple of 16) of j by variant v */
static void run_rows(const struct job *j, const struct var *v, int r0, int r1)
{
    const int m = j->m, chunks = j->cols / 32;
    const size_t stride = (size_t)j->cols * 2, chunk_x = (size_t)32 * m;
    const size_t bbytes = 16 * stride;
    _Alignas(64) float acc[2][2][16][16];
    int S = v->streams;
    int nb = (r1 - r0) / 16;
    /* sub-lane s: blocks [b0[s], b0[s+1]) */
    int b0[9];
    for (int s = 0; s <= S; s++)
        b0[s] = (int)((long)nb * s / S);
    int cur[8];
    for (int s = 0; s < S; s++)
        cur[s] = b0[s];
    int k = 0;
    struct pend pd = {NULL, NULL, 1};
    const char *base = (const char *)j->w;
    if (v->grp > 1) {
        const int G = v->grp;
        int r = r0;
        for (; r + 16 * G <= r1; r += 16 * G)
            for (int g = 0; g < G; g++) {
                float(*mine)[16][16] = acc[k & 1];
                const char *pf = NULL, *pfe = NULL;
                if (v->pf && r + 16 * G * (v->dist + 1) <= r1) {
                    pf = base + ((size_t)r + 16 * G * v->dist) * stride + (size_t)g * 16 * stride;
                    pfe = pf + 16 * stride;
                }
                block(j->w + (size_t)(r + g) * j->cols, stride * G, chunks, j->xv, chunk_x, m,
                      pf, pfe, v->hint, v->every, mine, &pd, j->rows, v->nt);
                pd.y = j->y + r + g;
                pd.gs = G;
                k++;
            }
        for (; r < r1; r += 16) {
            float(*mine)[16][16] = acc[k & 1];
            block(j->w + (size_t)r * j->cols, stride, chunks, j->xv, chunk_x, m, NULL, NULL, 0, 1,
                  mine, &pd, j->rows, 0);
            pd.y = j->y + r;
            pd.gs = 1;
            k++;
        }
        if (pd.acc)
            put(pd.acc, m, pd.y, j->rows, pd.gs);
        return;
    }
    for (;;) {
        int any = 0;
        if (v->inter2) {
            if (cur[0] < b0[1] && cur[1] < b0[2]) {
                int ra = r0 + cur[0] * 16, rb = r0 + cur[1] * 16;
                block2(j->w + (size_t)ra * j->cols, j->w + (size_t)rb * j->cols, stride, chunks,
                       j->xv, chunk_x, m, acc[0], acc[1]);
                put(acc[0], m, j->y + ra, j->rows, 1);
                put(acc[1], m, j->y + rb, j->rows, 1);
                cur[0]++;
                cur[1]++;
                continue;
            }
            /* leftovers by the single path below */
        }
        for (int s = 0; s < S; s++) {
            if (cur[s] >= b0[s + 1])
                continue;
            any = 1;
            int r = r0 + cur[s] * 16;
            const uint16_t *wr = j->w + (size_t)r * j->cols;
            const char *pf = NULL, *pfe = NULL;
            if (v->pf) {
                int tb = cur[s] + v->dist;
                if (tb < b0[s + 1]) {
                    pf = base + (size_t)(r0 + tb * 16) * stride;
                    pfe = pf + bbytes;
                }
            }
            float(*mine)[16][16] = acc[k & 1];
            if (v->nt)
                block(wr, stride, chunks, j->xv, chunk_x, m, pf, pfe, v->hint, v->every, mine,
                      &pd, j->rows, 1);
            else
                block(wr, stride, chunks, j->xv, chunk_x, m, pf, pfe, v->hint, v->every, mine,
                      &pd, j->rows, 0);
            pd.y = j->y + r;
            pd.gs = 1;
            cur[s]++;
            k++;
        }
        if (!any)
            break;
    }
    if (pd.acc)
        put(pd.acc, m, pd.y, j->rows, pd.gs);
}

/* ---- threads ---- */
#define NT 2
static atomic_int go_gen, done_cnt;
static struct {
    const struct job *j;
    const struct var *v;
    int mode; /* 0 amx, 1 read */
} task;
static volatile uint64_t read_sink;

static uint64_t read4(const char *p, size_t n)
{
    /* 4 streams, s4's prefetch */
    size_t q = n / 4 / 64 * 64;
    __m512i a = _mm512_setzero_si512();
    for (size_t o = 0; o < q; o += 64)
        for (int s = 0; s < 4; s++) {
            const char *b = p + s * q + o;
            _mm_prefetch(b + 1024, _MM_HINT_T0);
            _mm_prefetch(b + 4096, _MM_HINT_T1);
            a = _mm512_add_epi64(a, _mm512_loadu_si512(b));
        }
    return _mm512_reduce_add_epi64(a);
}

static void do_part(int t)
{
    const struct job *j = task.j;
    int blocks = j->rows / 16;
    int b0 = blocks * t / NT, b1 = blocks * (t + 1) / NT;
    if (task.mode == 0)
        run_rows(j, task.v, b0 * 16, b1 * 16);
    else
        read_sink += read4((const char *)(j->w + (size_t)b0 * 16 * j->cols),
                           (size_t)(b1 - b0) * 16 * j->cols * 2);
}

static void *worker(void *arg)
{
    int t = (int)(long)arg;
    syscall(SYS_arch_prctl, 0x1023, 18);
    int seen = 0;
    int m = -1;
    for (;;) {
        int g;
        while ((g = atomic_load_explicit(&go_gen, memory_order_acquire)) == seen)
            _mm_pause();
        seen = g;
        if (g < 0)
            return NULL;
        if (task.mode == 0 && task.j->m != m) {
            m = task.j->m;
            cfg(m);
        }
        do_part(t);
        atomic_fetch_add_explicit(&done_cnt, 1, memory_order_release);
    }
}

static int main_m = -1;
static void call(const struct job *j, const struct var *v, int mode)
{
    task.j = j;
    task.v = v;
    task.mode = mode;
    atomic_store(&done_cnt, 0);
    atomic_fetch_add_explicit(&go_gen, 1, memory_order_release);
    if (mode == 0 && j->m != main_m) {
        main_m = j->m;
        cfg(main_m);
    }
    do_part(0);
    while (atomic_load_explicit(&done_cnt, memory_order_acquire) < NT - 1)
        _mm_pause();
}

static int cmpd(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    size_t total = (size_t)1 << 30;
    int rounds = argc > 1 ? atoi(argv[1]) : 7;
    if (rounds < 1 || rounds > 64)
        rounds = 7;
    const char *only = argc > 2 ? argv[2] : NULL;
    if (syscall(SYS_arch_prctl, 0x1023, 18) != 0) {
        perror("arch_prctl");
        return 1;
    }
    char *buf = mmap(NULL, total + (2 << 20), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                     -1, 0);
    buf = (char *)(((uintptr_t)buf + (2 << 20) - 1) & ~(uintptr_t)((2 << 20) - 1));
    madvise(buf, total, MADV_HUGEPAGE);
    for (size_t i = 0; i < total / 2; i++)
        ((uint16_t *)buf)[i] = 0x3c00 + (uint16_t)(i * 7919 % 13); /* small bf16 */
    static uint16_t xv[16 * 4864 * 2] __attribute__((aligned(64)));
    for (size_t i = 0; i < sizeof xv / 2; i++)
        xv[i] = 0x3f80;
    float *y = aligned_alloc(64, (size_t)16 * 151936 * 4);
    pthread_t th[NT];
    for (int t = 1; t < NT; t++)
        pthread_create(&th[t], NULL, worker, (void *)(long)t);

    /* name, pf, dist, hint, every, streams, inter2, nt, grp */
    static const struct var vars[] = {
        {"base", 0, 0, 0, 1, 1, 0, 0, 1},
        {"pf1-T1", 1, 1, 1, 1, 1, 0, 0, 1},
        {"pf2-T1", 1, 2, 1, 1, 1, 0, 0, 1},
        {"pf2-T2", 1, 2, 2, 1, 1, 0, 0, 1},
        {"pf1-T2/2", 1, 1, 2, 2, 1, 0, 0, 1},
        {"pf2-T1/4", 1, 2, 1, 4, 1, 0, 0, 1},
        {"nt", 0, 0, 0, 1, 1, 0, 1, 1},
        {"s2", 0, 0, 0, 1, 2, 0, 0, 1},
        {"s4", 0, 0, 0, 1, 4, 0, 0, 1},
        {"i2", 0, 0, 0, 1, 2, 1, 0, 1},
        {"g4", 0, 0, 0, 1, 1, 0, 0, 4},
        {"g6", 0, 0, 0, 1, 1, 0, 0, 6},
        {"g8", 0, 0, 0, 1, 1, 0, 0, 8},
        {"g6pfT2/4", 1, 1, 2, 4, 1, 0, 0, 6},
    };




    const int nv = sizeof vars / sizeof vars[0];
    static const int shapes[][2] = {{4864, 896}, {896, 4864}, {151936, 896}};
    static const int ms[] = {1, 8};
    for (int si = 0; si < 3; si++)
        for (int mi = 0; mi < 2; mi++) {
            const int rows = shapes[si][0], cols = shapes[si][1], m = ms[mi];
            size_t mb = (size_t)rows * cols * 2;
            size_t slot = (mb + (2 << 20) - 1) / (2 << 20) * (2 << 20);
            int nmat = (int)(total / slot);
            struct job *jobs = malloc(sizeof(struct job) * nmat);
            for (int i = 0; i < nmat; i++)
                jobs[i] = (struct job){(const uint16_t *)(buf + i * slot), rows, cols, xv, y, m};
            /* calls per timing: ~512 MB */
            int calls = (int)(((size_t)512 << 20) / mb);
            if (calls < 2)
                calls = 2;
            double gbs[16][64];
            double rd[64];
            int cursor = 0;
            for (int r = 0; r < rounds; r++) {
                for (int vi = -1; vi < nv; vi++) {
                    if (vi > 0 && only && !strstr(only, vars[vi].name))
                        continue;
                    double t0 = now();
                    for (int c = 0; c < calls; c++)
                        call(&jobs[(cursor + c) % nmat], vi < 0 ? NULL : &vars[vi], vi < 0);
                    double dt = now() - t0;
                    cursor += calls;
                    double g = (double)mb * calls / dt / 1e9;
                    if (vi < 0)
                        rd[r] = g;
                    else
                        gbs[vi][r] = g;
                }
            }
            double ratio[16][64];
            for (int vi = 0; vi < nv; vi++)
                for (int r = 0; r < rounds; r++)
                    ratio[vi][r] = vi > 0 && only && !strstr(only, vars[vi].name)
                                       ? 0
                                       : gbs[vi][r] / gbs[0][r];
            for (int vi = 0; vi < nv; vi++)
                qsort(ratio[vi], rounds, sizeof(double), cmpd);
            qsort(rd, rounds, sizeof(double), cmpd);
            printf("%6d x %4d m%d  read %.1f GB/s:", rows, cols, m, rd[rounds / 2]);
            for (int vi = 0; vi < nv; vi++) {
                if (vi > 0 && only && !strstr(only, vars[vi].name))
                    continue;
                qsort(gbs[vi], rounds, sizeof(double), cmpd);
                printf("  %s %.1f (%.2f, x%.3f)", vars[vi].name, gbs[vi][rounds / 2],
                       gbs[vi][rounds / 2] / rd[rounds / 2], ratio[vi][rounds / 2]);
            }
            printf("\n");
            fflush(stdout);
            free(jobs);
        }
    atomic_store(&go_gen, -1);
    return 0;
}
