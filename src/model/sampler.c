#include "model/sampler.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

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
    s->cap = 0;
    s->nonfinite = false;
    return 0;
}

void sampler_free(struct sampler *s)
{
    free(s->prob);
    free(s->idx);
    s->prob = NULL;
    s->idx = NULL;
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
        if (!p || !ix) /* no memory for sampling: degrade to greedy, never crash */
            return argmax(s, logits, vocab);
        s->cap = vocab;
    }
    /* softmax(logits / T), unnormalised: only ratios matter below */
    float mx = logits[argmax(s, logits, vocab)];
    for (int i = 0; i < vocab; i++)
        s->prob[i] = expf((logits[i] - mx) / s->p.temperature);
    /* candidates by descending probability: all of them (sorted only when
     * top-p needs the order), or the top k, selected with a heap */
    int n = vocab;
    if (s->p.top_k > 0 && s->p.top_k < vocab) {
        n = s->p.top_k;
        select_top_k(s->idx, n, s->prob, vocab);
        qsort_r(s->idx, (size_t)n, sizeof(int32_t), cmp_desc, s->prob);
    } else {
        for (int i = 0; i < vocab; i++)
            s->idx[i] = i;
        if (s->p.top_p < 1)
            qsort_r(s->idx, (size_t)vocab, sizeof(int32_t), cmp_desc, s->prob);
    }
    double kept = 0;
    for (int i = 0; i < n; i++)
        kept += s->prob[s->idx[i]];
    /* top-p: the smallest prefix whose mass reaches p of the kept mass */
    if (s->p.top_p < 1) {
        double acc = 0;
        for (int i = 0; i < n; i++) {
            acc += s->prob[s->idx[i]];
            if (acc >= s->p.top_p * kept) {
                n = i + 1;
                kept = acc;
                break;
            }
        }
    }
    double r = rng_uniform(&s->rng) * kept, acc = 0;
    for (int i = 0; i < n; i++) {
        acc += s->prob[s->idx[i]];
        if (r < acc)
            return s->idx[i];
    }
    return s->idx[n - 1];
}
