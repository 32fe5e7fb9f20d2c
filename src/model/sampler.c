#include "model/sampler.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

int sampler_init(struct sampler *s, const struct sampler_params *p)
{
    /* one line each: the parameter as a request names it, its value, and
     * what it must be (the CLI checks its flags against the same ranges) */
    if (!(p->temperature >= 0) || !isfinite(p->temperature))
        return err_set(ERR_INVALID,
                       "temperature %g is out of range (expected a finite number >= 0, 0 = "
                       "greedy)",
                       (double)p->temperature);
    if (p->top_k < 0)
        return err_set(ERR_INVALID, "top_k %d is out of range (expected >= 0, 0 = off)",
                       p->top_k);
    if (!(p->top_p > 0 && p->top_p <= 1))
        return err_set(ERR_INVALID, "top_p %g is out of range (expected 0 < top_p <= 1)",
                       (double)p->top_p);
    s->p = *p;
    rng_seed(&s->rng, p->seed, 0);
    s->prob = NULL;
    s->idx = NULL;
    s->tmp = NULL;
    s->cap = 0;
    s->nonfinite = false;
    return 0;
}

void sampler_free(struct sampler *s)
{
    free(s->prob);
    free(s->idx);
    free(s->tmp);
    s->prob = NULL;
    s->idx = NULL;
    s->tmp = NULL;
    s->cap = 0;
}

int32_t logits_argmax(const float *x, int n, bool *all_finite)
{
    /* One pass over 16 independent lanes, each keeping its largest value
     * and where it first saw it (a strict v > m keeps the earlier index of
     * a tie, and keeps m for a NaN, as MAXPS does), which the compiler
     * turns into vector compares and blends; then the first index among
     * the lanes holding the maximum. A single scalar pass that compares
     * against x[best] waits on its last store every element (3.6 ns an
     * element against 0.2); the two passes before this one (the maximum,
     * then the first index holding it) read the logits twice: 8 rows of a
     * 152k vocabulary, a batch-8 decode step's picks, took 0.96 ms. */
    enum { LANES = 16 };
    float lane[LANES];
    int32_t at[LANES];
    for (int j = 0; j < LANES; j++) {
        lane[j] = -INFINITY;
        at[j] = INT32_MAX; /* nothing above -inf seen yet */
    }
    unsigned odd = 0; /* some v - v != 0: an infinity or a NaN */
    int i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; j++) {
            const float v = x[i + j];
            const bool above = v > lane[j];
            lane[j] = above ? v : lane[j];
            at[j] = above ? i + j : at[j];
            odd |= (v - v) != 0;
        }
    float best = -INFINITY;
    int32_t first = INT32_MAX;
    for (int j = 0; j < LANES; j++)
        if (lane[j] > best || (lane[j] == best && at[j] < first)) {
            best = lane[j];
            first = at[j];
        }
    for (; i < n; i++) { /* past every lane's index: only a larger value wins */
        if (x[i] > best) {
            best = x[i];
            first = i;
        }
        odd |= (x[i] - x[i]) != 0;
    }
    *all_finite = !odd;
    if (first != INT32_MAX)
        return first;
    /* nothing above -inf: the first -inf, else every logit is NaN */
    for (int k = 0; k < n; k++)
        if (x[k] == -INFINITY)
            return k;
    return 0;
}

/* The first largest logit; notes in s a NaN or infinity among them (every
 * pick passes here, so the check costs no pass of its own). */
static int32_t argmax(struct sampler *s, const float *x, int n)
{
    bool finite;
    int32_t best = logits_argmax(x, n, &finite);
    s->nonfinite |= !finite;
    return best;
}

/* Orders ids by descending probability, ties by ascending id (deterministic). */
static int cmp_desc(const void *a, const void *b, void *ctx)
{
    const float *sort_prob = ctx;
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    if (sort_prob[i] != sort_prob[j])
        return sort_prob[i] > sort_prob[j] ? -1 : 1;
    return (i > j) - (i < j);
}

/* True when id a ranks below id b (lower probability, or equal and larger id). */
static bool ranks_below(const float *prob, int32_t a, int32_t b)
{
    return prob[a] < prob[b] || (prob[a] == prob[b] && a > b);
}

static void heap_sift_down(int32_t *h, int n, int i, const float *prob)
{
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && ranks_below(prob, h[l], h[m]))
            m = l;
        if (r < n && ranks_below(prob, h[r], h[m]))
            m = r;
        if (m == i)
            return;
        int32_t t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

/* out[0..k) = the k highest-ranked ids (unordered): a min-heap of the best so far. */
static void select_top_k(int32_t *out, int k, const float *prob, int vocab)
{
    for (int i = 0; i < k; i++)
        out[i] = i;
    for (int i = k / 2 - 1; i >= 0; i--)
        heap_sift_down(out, k, i, prob);
    for (int32_t id = k; id < vocab; id++) {
        if (ranks_below(prob, out[0], id)) {
            out[0] = id;
            heap_sift_down(out, k, 0, prob);
        }
    }
}

/* __m512 _ZGVeN16v_expf(__m512): glibc's vector expf (libmvec), as the CPU
 * backend's element-wise loops use it (backend/cpu/vec_avx512.c) */
typedef float v16sf __attribute__((vector_size(64)));
typedef double v8df __attribute__((vector_size(64)));
__attribute__((target("avx512f"))) extern v16sf _ZGVeN16v_expf(v16sf);

/* prob[i] = exp((logits[i] - mx) / t) for i < n, 16 at a time by libmvec;
 * returns their sum. */
__attribute__((target("avx512f"))) static double probs_avx512(float *prob, const float *logits,
                                                               int n, float mx, float t)
{
    const v16sf vmx = {mx, mx, mx, mx, mx, mx, mx, mx, mx, mx, mx, mx, mx, mx, mx, mx};
    const v16sf vt = {t, t, t, t, t, t, t, t, t, t, t, t, t, t, t, t};
    v8df lo = {0}, hi = {0};
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        v16sf v;
        __builtin_memcpy(&v, logits + i, sizeof(v));
        v = _ZGVeN16v_expf((v - vmx) / vt);
        __builtin_memcpy(prob + i, &v, sizeof(v));
        lo += __builtin_convertvector(__builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7), v8df);
        hi += __builtin_convertvector(__builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15),
                                      v8df);
    }
    const v8df lanes = lo + hi;
    double sum = 0;
    for (int j = 0; j < 8; j++)
        sum += lanes[j];
    for (; i < n; i++) {
        prob[i] = expf((logits[i] - mx) / t);
        sum += prob[i];
    }
    return sum;
}

/* prob[i] = exp((logits[i] - mx) / t), unnormalised softmax(logits / t):
 * only ratios matter to the draw. Returns their sum. One expf at a time
 * was 4 ns a logit on the Xeon with AMX: 0.63 ms of a 152k vocabulary, a
 * sequence's every token (2026-12-06). */
static double probs(float *prob, const float *logits, int n, float mx, float t)
{
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx512f"))
        return probs_avx512(prob, logits, n, mx, t);
#endif
    double sum = 0;
    for (int i = 0; i < n; i++) {
        prob[i] = expf((logits[i] - mx) / t);
        sum += prob[i];
    }
    return sum;
}

/* The bits of a probability in [0, 1] order them as the values do, so their
 * top bits bucket them by size: exponent and 3 bits of mantissa. */
enum { BUCKET_SHIFT = 20, BUCKETS = (0x3f800000 >> BUCKET_SHIFT) + 1 };

static int bucket_of(float p)
{
    uint32_t b;
    memcpy(&b, &p, sizeof(b));
    b >>= BUCKET_SHIFT;
    return b < BUCKETS ? (int)b : 0; /* a NaN ranks with the smallest */
}

/* The ids that can be in the nucleus of mass `want`: every id of the
 * buckets from the largest down to the one where the buckets' mass reaches
 * it, and one bucket more against the rounding of sums in another order.
 * Every id ranked above a nucleus id is among them, so sorting them alone
 * gives the nucleus that sorting the whole vocabulary gives. Returns their
 * count, in idx. */
static int nucleus_candidates(int32_t *idx, const float *prob, int vocab, double want)
{
    double mass[BUCKETS] = {0};
    for (int i = 0; i < vocab; i++)
        mass[bucket_of(prob[i])] += prob[i];
    double acc = 0;
    int cut = BUCKETS - 1;
    for (; cut > 0; cut--) {
        acc += mass[cut];
        if (acc >= want)
            break;
    }
    if (cut > 0)
        cut--;
    int n = 0;
    for (int i = 0; i < vocab; i++)
        if (bucket_of(prob[i]) >= cut)
            idx[n++] = i;
    return n;
}

/* A probability's place in cmp_desc's order: its bits (NaN's as 0's),
 * turned so that ascending keys are descending probabilities. */
static uint32_t rank_key(float p)
{
    uint32_t b;
    memcpy(&b, &p, sizeof(b));
    return 0x3f800000u - (b <= 0x3f800000u ? b : 0);
}

/* idx[0..n), ascending ids, in cmp_desc's order (descending probability,
 * ties by ascending id): a stable radix sort on rank_key, 10 of its 30 bits
 * a pass, through tmp (n ids). A nearly flat distribution (a random
 * checkpoint's) keeps most of the vocabulary as top-p candidates, which
 * qsort_r took 15-20 ms to order. */
static void sort_candidates(int32_t *idx, int32_t *tmp, int n, const float *prob)
{
    enum { BITS = 10, RADIX = 1 << BITS };
    int32_t *from = idx, *to = tmp;
    for (int shift = 0; shift < 30; shift += BITS) {
        int at[RADIX + 1] = {0};
        for (int i = 0; i < n; i++)
            at[((rank_key(prob[from[i]]) >> shift) & (RADIX - 1)) + 1]++;
        for (int d = 0; d < RADIX; d++)
            at[d + 1] += at[d];
        for (int i = 0; i < n; i++)
            to[at[(rank_key(prob[from[i]]) >> shift) & (RADIX - 1)]++] = from[i];
        int32_t *t = from;
        from = to;
        to = t;
    }
    if (from != idx)
        memcpy(idx, from, (size_t)n * sizeof(int32_t));
}

int32_t sampler_pick(struct sampler *s, float *logits, int vocab)
{
    if (s->p.temperature == 0)
        return argmax(s, logits, vocab);
    if (s->cap < vocab) {
        float *p = realloc(s->prob, (size_t)vocab * sizeof(float));
        if (p)
            s->prob = p;
        int32_t *ix = realloc(s->idx, (size_t)vocab * sizeof(int32_t));
        if (ix)
            s->idx = ix;
        int32_t *t = realloc(s->tmp, (size_t)vocab * sizeof(int32_t));
        if (t)
            s->tmp = t;
        if (!p || !ix || !t) /* no memory for sampling: degrade to greedy, never crash */
            return argmax(s, logits, vocab);
        s->cap = vocab;
    }
    const float mx = logits[argmax(s, logits, vocab)];
    const double total = probs(s->prob, logits, vocab, mx, s->p.temperature);
    const float *prob = s->prob;
    int32_t *idx = s->idx;
    if (!(s->p.top_k > 0 && s->p.top_k < vocab) && s->p.top_p == 1) {
        /* the whole distribution, in id order */
        double r = rng_uniform(&s->rng) * total, acc = 0;
        int32_t last = 0;
        for (int32_t i = 0; i < vocab; i++) {
            if (!(prob[i] > 0))
                continue;
            acc += prob[i];
            last = i;
            if (r < acc)
                return i;
        }
        return last; /* r past the sum by its rounding in another order */
    }
    /* candidates by descending probability: the top k, selected with a
     * heap, or those that can reach top-p's mass (sorting all 152k of a
     * vocabulary took 20 ms a token) */
    int n;
    if (s->p.top_k > 0 && s->p.top_k < vocab) {
        n = s->p.top_k;
        select_top_k(idx, n, prob, vocab);
        qsort_r(idx, (size_t)n, sizeof(int32_t), cmp_desc, s->prob);
    } else {
        n = nucleus_candidates(idx, prob, vocab, s->p.top_p * total);
        sort_candidates(idx, s->tmp, n, prob);
    }
    double kept = total;
    if (s->p.top_k > 0 && s->p.top_k < vocab) {
        kept = 0;
        for (int i = 0; i < n; i++)
            kept += prob[idx[i]];
    }
    /* top-p: the smallest prefix whose mass reaches p of the kept mass (all
     * the candidates when their sum falls short of it by rounding) */
    if (s->p.top_p < 1) {
        double acc = 0;
        int i = 0;
        for (; i < n; i++) {
            acc += prob[idx[i]];
            if (acc >= s->p.top_p * kept)
                break;
        }
        n = i < n ? i + 1 : n;
        kept = acc;
    }
    double r = rng_uniform(&s->rng) * kept, acc = 0;
    for (int i = 0; i < n; i++) {
        acc += prob[idx[i]];
        if (r < acc)
            return idx[i];
    }
    return idx[n - 1];
}
