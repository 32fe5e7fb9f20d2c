/* kern_route_topk and kern_route_group on the CPU (backend/kernels.h): a
 * mixture of experts' choices and the grouping of its rows, one token
 * after another on the calling thread. This is the reference the CUDA
 * kernels are held to: its arithmetic is torch's f32 softmax in expert
 * order, and the grouping is the model step's (rows by expert, token order
 * within an expert). */
#include <math.h>

#include "backend/cpu/kernels.h"

/* Token i's choice from its logits l: the top_k experts by softmax
 * probability (f32, as torch computes softmax(logits.float())), the higher
 * first and ties to the lower index, renormalised when asked; then listed
 * by ascending expert (the order torch sums them in). */
static void route_choose(const float *l, const struct kern_route *r, int32_t *sel, float *wt)
{
    const int E = r->n_experts, k = r->top_k;
    float p[KERN_ROUTE_MAX_EXPERTS], mx = l[0], sum = 0;
    for (int e = 1; e < E; e++)
        mx = l[e] > mx ? l[e] : mx;
    for (int e = 0; e < E; e++)
        sum += p[e] = expf(l[e] - mx);
    for (int e = 0; e < E; e++)
        p[e] /= sum;
    float top = 0;
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            bool taken = false;
            for (int q = 0; q < j; q++)
                taken |= sel[q] == e;
            if (!taken && (best < 0 || p[e] > p[best]))
                best = e;
        }
        sel[j] = best;
        wt[j] = p[best];
        top += p[best];
    }
    for (int j = 0; r->norm && j < k; j++)
        wt[j] /= top;
    for (int j = 1; j < k; j++) /* insertion sort of k by expert */
        for (int q = j; q > 0 && sel[q - 1] > sel[q]; q--) {
            const int32_t te = sel[q];
            const float tw = wt[q];
            sel[q] = sel[q - 1];
            wt[q] = wt[q - 1];
            sel[q - 1] = te;
            wt[q - 1] = tw;
        }
}

static bool route_real(const struct kern_route *r, int i)
{
    return !r->real || r->real[(size_t)(i / r->real_group) * r->real_stride + i % r->real_group];
}

int cpu_route_topk(const float *logits, const struct kern_route *r, const struct kern_route_out *o)
{
    const int n = r->n, E = r->n_experts, k = r->top_k;
    for (int e = 0; e < 2 * E; e++)
        o->counts[e] = 0;
    for (int i = 0; i < n; i++) {
        int32_t *sel = o->choice + (size_t)i * k;
        route_choose(logits + (size_t)i * E, r, sel, o->choice_w + (size_t)i * k);
        const bool real = route_real(r, i);
        for (int j = 0; j < k; j++) {
            o->counts[sel[j]]++;
            o->counts[E + sel[j]] += real;
        }
    }
    return 0;
}

/* Whether expert e gets rows on this device. */
static bool route_has(const struct kern_route *r, int e)
{
    return e >= r->expert_begin && e < r->expert_end && (!r->have || r->have[e]);
}

int cpu_route_group(const struct kern_route *r, const struct kern_route_out *o)
{
    const int n = r->n, k = r->top_k, K = r->slot_stride, nk = n * k;
    int at[KERN_ROUTE_MAX_EXPERTS];
    /* the rows grouped by expert, each group in token order; a slot of an
     * expert without rows reads row nl, weighted by 0 */
    int nl = 0;
    for (int e = r->expert_begin; e < r->expert_end; e++) {
        at[e] = nl;
        nl += route_has(r, e) ? o->counts[e] : 0;
    }
    for (int i = 0; i < n; i++) {
        const int32_t *sel = o->choice + (size_t)i * k;
        for (int j = 0; j < k; j++) {
            const bool mine = route_has(r, sel[j]);
            const int slot = mine ? at[sel[j]]++ : nl;
            if (mine)
                o->rows[slot] = i;
            o->slots[(size_t)i * K + j] = slot;
            o->slot_w[(size_t)i * K + j] = mine ? o->choice_w[(size_t)i * k + j] : 0.0f;
        }
        if (r->shared_gate) { /* last, as torch adds it: sigmoid(gate) in f32 */
            const float z = r->shared_gate[i];
            o->slots[(size_t)i * K + k] = nk + i;
            o->slot_w[(size_t)i * K + k] = 1.0f / (1.0f + expf(-z));
        }
    }
    for (int i = nl; i < nk; i++) /* unused past the rows */
        o->rows[i] = 0;
    return 0;
}
