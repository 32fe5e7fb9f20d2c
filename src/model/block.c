/* The attention and MLP blocks of every family (block.h): one kernel-table
 * call per step on the execution context's buffers; nothing is allocated. */
#include "model/block.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#include "backend/kernels.h"
#include "model/adapter_impl.h"

/* Whether sequence b's length this step (its largest position + 1) is
 * past o->rope_long_after. */
static bool block_rope_long(const struct model_exec *ex, int b, int t_new,
                            const struct attn_opts *o)
{
    int32_t last = 0;
    for (int t = 0; t < t_new; t++)
        if (ex->pos_host[b * t_new + t] > last)
            last = ex->pos_host[b * t_new + t];
    return o->rope_long_after > 0 && last + 1 > o->rope_long_after;
}

/* Rotary on the rows of x (heads heads each, ex's step) with the table
 * inv_freq: one table, or per sequence the short one there or the long one
 * after it (o->rope_long_after). */
static int block_rope(struct model_exec *ex, float *x, int t_new, int heads, const float *inv_freq,
                      const struct attn_opts *o)
{
    const int B = ex->shape.batch, hd = ex->head_dim, half = o->rot_dim / 2;
    const float scale = o->rope_scale > 0 ? o->rope_scale : 1.0f;
    int n_long = 0;
    for (int b = 0; o->rope_long_after > 0 && b < B; b++)
        n_long += block_rope_long(ex, b, t_new, o);
    if (n_long == 0 || n_long == B)
        return kern_rope(ex->stream, x, B * t_new, heads, hd, o->rot_dim, ex->pos,
                         inv_freq + (n_long ? half : 0), scale);
    for (int b = 0; b < B; b++) {
        const size_t r0 = (size_t)b * t_new;
        TRY(kern_rope(ex->stream, x + r0 * heads * hd, t_new, heads, hd, o->rot_dim, ex->pos + r0,
                      inv_freq + (block_rope_long(ex, b, t_new, o) ? half : 0), scale));
    }
    return 0;
}

/* Past this many rows a linear layer is a matrix product, whose threads a
 * product pays for alone: block_linears groups below it (decode). */
#define BLOCK_GROUP_MAX_ROWS 16

/* y[i] = x @ w[i]^T (+ b[i] when not NULL) for the k products of one input
 * that a phase runs side by side (q, k and v; gate and up). For a few rows
 * as one kern_linear_group call, biases included, so the kernel threads
 * start once for all of them (a 128-row k or v alone is too short to pay
 * for a start). For more rows one kern_linear each. */
static int block_linears(const struct model *m, struct stream *s, const float *x, int n, int k,
                         float *const *y, const struct weight_view *const *w,
                         const float *const *b)
{
    if (n > BLOCK_GROUP_MAX_ROWS) {
        for (int i = 0; i < k; i++)
            TRY(kern_linear(s, y[i], x, n, w[i], b[i], m->compute));
        return 0;
    }
    struct kern_linear_job jobs[3] = {{0}};
    assert(k <= 3);
    for (int i = 0; i < k; i++)
        jobs[i] = (struct kern_linear_job){y[i], x, n, *w[i], b[i]};
    return kern_linear_group(s, jobs, k, m->compute);
}

int model_block_attn(const struct model *m, struct model_exec *ex, int layer, int t_new,
                     const struct attn_weights *w, const struct attn_opts *o)
{
    struct stream *s = ex->stream;
    const int H = m->info->hidden, n = ex->shape.batch * t_new;
    const int hd = ex->head_dim, qr = ex->heads * hd;
    float *h = ex->h, *kc, *vc;
    struct kv_geom g = model_layer_kv(ex, layer, &kc, &vc);
    const float *inv_freq = o->inv_freq ? o->inv_freq : ex->aux;
    assert(o->rot_dim == 0 || (ex->pos && inv_freq));
    assert(g.ring == 0 || g.window == o->window); /* a ring holds the family's window */
    g.window = o->window;
    g.softcap = o->softcap;

    /* q, k, v of this rank's heads (and each sequence's adapter's) */
    TRY(block_linears(m, s, h, n, 3, (float *const[]){ex->q, ex->kn, ex->vn},
                      (const struct weight_view *const[]){&w->q, &w->k, &w->v},
                      (const float *const[]){w->q_b, w->k_b, w->v_b}));
    TRY(model_block_lora(m, ex, layer, LORA_Q, ex->q, h, t_new));
    TRY(model_block_lora(m, ex, layer, LORA_K, ex->kn, h, t_new));
    TRY(model_block_lora(m, ex, layer, LORA_V, ex->vn, h, t_new));
    /* per-head norms of q and k: rows of head_dim */
    if (w->q_norm)
        TRY(kern_rmsnorm(s, ex->q, ex->q, n * ex->heads, hd, w->q_norm, o->eps));
    if (w->k_norm)
        TRY(kern_rmsnorm(s, ex->kn, ex->kn, n * ex->kv_heads, hd, w->k_norm, o->eps));
    /* rotary positions on q and k */
    if (o->rot_dim > 0) {
        TRY(block_rope(ex, ex->q, t_new, ex->heads, inv_freq, o));
        TRY(block_rope(ex, ex->kn, t_new, ex->kv_heads, inv_freq, o));
    }
    TRY(kern_scale(s, ex->q, (size_t)n * qr, o->scale > 0 ? o->scale : 1.0f / sqrtf((float)hd)));
    /* the new keys and values into the cache, attention over it */
    TRY(kern_kv_append(s, kc, vc, ex->kn, ex->vn, &g, t_new, ex->len));
    TRY(kern_attention(s, ex->attn, ex->q, kc, vc, ex->key_ok, &g, ex->len, t_new, ex->scores));
    /* output projection, summed over the TP ranks, into the residual */
    TRY(kern_linear(s, h, ex->attn, n, &w->o, w->o_b, m->compute));
    TRY(model_block_lora(m, ex, layer, LORA_O, h, ex->attn, t_new));
    TRY(model_reduce(ex, h, (size_t)n * H));
    if (o->post_norm)
        TRY(kern_rmsnorm(s, h, h, n, H, o->post_norm, o->eps));
    return kern_add(s, ex->x, h, (size_t)n * H);
}

int model_block_mlp_width(const struct model *m, const struct mlp_opts *o)
{
    return o->gated ? 2 * m->ffn_local : m->ffn_local;
}

int model_block_mlp(const struct model *m, struct model_exec *ex, int layer, int t_new,
                    const struct mlp_weights *w, const struct mlp_opts *o)
{
    struct stream *s = ex->stream;
    const int H = m->info->hidden, n = ex->shape.batch * t_new, fr = m->ffn_local;
    float *h = ex->h, *f = ex->f;

    /* this rank's hidden units: act(gate(h)) * up(h), or act(up(h)) */
    if (o->gated) {
        float *up = ex->f + (size_t)n * fr;
        TRY(block_linears(m, s, h, n, 2, (float *const[]){f, up},
                          (const struct weight_view *const[]){&w->gate, &w->up},
                          (const float *const[]){w->gate_b, w->up_b}));
        TRY(model_block_lora(m, ex, layer, LORA_GATE, f, h, t_new));
        TRY(model_block_lora(m, ex, layer, LORA_UP, up, h, t_new));
        TRY(kern_gated_act(s, f, f, up, (size_t)n * fr, o->act));
    } else {
        TRY(kern_linear(s, f, h, n, &w->up, w->up_b, m->compute));
        TRY(model_block_lora(m, ex, layer, LORA_UP, f, h, t_new));
        TRY(kern_activation(s, f, (size_t)n * fr, o->act));
    }
    /* down projection, summed over the TP ranks, into the residual */
    TRY(kern_linear(s, h, f, n, &w->down, w->down_b, m->compute));
    TRY(model_block_lora(m, ex, layer, LORA_DOWN, h, f, t_new));
    TRY(model_reduce(ex, h, (size_t)n * H));
    if (o->post_norm)
        TRY(kern_rmsnorm(s, h, h, n, H, o->post_norm, o->eps));
    return kern_add(s, ex->x, h, (size_t)n * H);
}

int model_block_moe_extra(const struct model *m, const struct moe_opts *o)
{
    /* the gathered rows (then each expert's output in their place), the
     * router's logits, the rows, slots and weights of the step's choices,
     * the choices and their weights, and the counts per expert (2 *
     * n_experts in all: per token is more than enough) */
    const int k = o->top_k + (o->shared_local > 0);
    return k * m->info->hidden + o->n_experts + 1 + 3 * k + 2 * o->top_k + 2 * o->n_experts;
}

int model_block_moe_ffn(const struct moe_opts *o)
{
    return 2 * (o->ffn_local > o->shared_local ? o->ffn_local : o->shared_local);
}

int model_block_moe_host(const struct moe_opts *o)
{
    return 2 * o->n_experts; /* the counts per expert, read back */
}

/* y = down(act(gate(x)) * up(x)) over c rows, f the scratch (c, 2 * fr). */
static int moe_expert(const struct model *m, struct model_exec *ex, float *y, const float *x, int c,
                      int fr, const struct expert_weights *w, enum kern_act act)
{
    struct stream *s = ex->stream;
    float *f = ex->f, *up = ex->f + (size_t)c * fr;
    TRY(kern_linear(s, f, x, c, &w->gate, NULL, m->compute));
    TRY(kern_linear(s, up, x, c, &w->up, NULL, m->compute));
    TRY(kern_gated_act(s, f, f, up, (size_t)c * fr, act));
    return kern_linear(s, y, f, c, &w->down, NULL, m->compute);
}

/* moe_expert for every expert in [eb, ee) with rows (count[e] of them, in
 * expert order from row 0 of g, nl in all), each over its rows of g and
 * into their place, the products of a phase as one kern_linear_group call:
 * for a few tokens each expert's product is small, so one call per product
 * costs more in starting the threads than in reading the weights. The same
 * products as moe_expert's, so the same results; f holds every expert's
 * gate then up outputs, (nl, fr) each (nl <= max_tokens: f has
 * max_tokens * 2 * fr floats). */
static int moe_experts(const struct model *m, struct model_exec *ex, float *g, int nl,
                       const int *count, int eb, int ee, int fr, const struct moe_weights *w,
                       enum kern_act act)
{
    struct stream *s = ex->stream;
    const int H = m->info->hidden;
    float *f = ex->f, *up = ex->f + (size_t)nl * fr;
    struct kern_linear_job jobs[2 * MODEL_MAX_EXPERTS];
    int n = 0;
    /* gate and up of every expert, each pair on the same rows */
    for (int e = eb, off = 0; e < ee; off += count[e], e++) {
        if (count[e] == 0)
            continue;
        const float *x = g + (size_t)off * H;
        jobs[n++] =
            (struct kern_linear_job){f + (size_t)off * fr, x, count[e], w->experts[e].gate, NULL};
        jobs[n++] =
            (struct kern_linear_job){up + (size_t)off * fr, x, count[e], w->experts[e].up, NULL};
    }
    TRY(kern_linear_group(s, jobs, n, m->compute));
    TRY(kern_gated_act(s, f, f, up, (size_t)nl * fr, act));
    /* down of every expert into its rows' place */
    n = 0;
    for (int e = eb, off = 0; e < ee; off += count[e], e++)
        if (count[e] > 0)
            jobs[n++] = (struct kern_linear_job){g + (size_t)off * H, f + (size_t)off * fr,
                                                 count[e], w->experts[e].down, NULL};
    return kern_linear_group(s, jobs, n, m->compute);
}

/* y = zeros (width floats on the device), copied from the host: no kernel
 * of the table writes a constant. */
static int moe_zero_row(struct stream *s, float *y, int width)
{
    static const float zeros[1024];
    for (int c = 0; c < width; c += 1024) {
        const int w = width - c < 1024 ? width - c : 1024;
        TRY(kern_to_device(s, y + c, zeros, (size_t)w * sizeof(float)));
    }
    return 0;
}

int model_block_moe(const struct model *m, struct model_exec *ex, int layer, int t_new,
                    const struct moe_weights *w, const struct moe_opts *o)
{
    struct stream *s = ex->stream;
    const int H = m->info->hidden, n = ex->shape.batch * t_new, E = o->n_experts, k = o->top_k;
    const bool shared = o->shared_local > 0;
    const int fr = o->ffn_local, nk = n * k, K = k + shared, nK = n * K;
    const size_t T = (size_t)ex->shape.max_tokens;
    assert(E <= MODEL_MAX_EXPERTS && k <= E && ex->e && ex->host);
    /* device: gathered rows (T * K, H: the routed n * k, then the shared
     * expert's n), logits (T, E + 1: the router's n * E, then the shared
     * gate's n), rows (n * k) | slots | weights (n * K each) | choices |
     * their weights (n * k each) | counts (2, E) */
    float *g = ex->e, *logits = g + T * K * H;
    int32_t *rows = (int32_t *)(logits + T * (E + 1)), *slots = rows + nk;
    float *cw = (float *)(slots + nK);
    int32_t *choice = (int32_t *)(cw + nK), *counts = choice + 2 * nk;
    /* host: the counts read back, every token's then the real ones' */
    int32_t *count = ex->host, *real_n = count + E;
    uint8_t ok[MODEL_MAX_EXPERTS];
    const int eb = o->expert_begin, ee = o->expert_end;
    assert(0 <= eb && eb < ee && ee <= E);
    /* token i is sequence b = i / t_new's position ex->len + i % t_new;
     * the experts with rows here are this rank's that it has (ok) */
    const struct kern_route r = {.n = n,
                                 .n_experts = E,
                                 .top_k = k,
                                 .norm = o->norm_topk,
                                 .real = ex->key_ok + ex->len,
                                 .real_group = t_new,
                                 .real_stride = ex->shape.max_len,
                                 .expert_begin = eb,
                                 .expert_end = ee,
                                 .have = ok,
                                 .slot_stride = K,
                                 .shared_gate = shared ? logits + (size_t)n * E : NULL};
    const struct kern_route_out ro = {.choice = choice,
                                      .choice_w = (float *)(choice + nk),
                                      .counts = counts,
                                      .rows = rows,
                                      .slots = slots,
                                      .slot_w = cw};

    /* the router's logits (and the shared expert's gate), each token's
     * experts chosen on the device; only the counts per expert come back */
    TRY(kern_linear(s, logits, ex->h, n, &w->router, NULL, m->compute));
    if (shared)
        TRY(kern_linear(s, logits + (size_t)n * E, ex->h, n, &w->shared_gate, NULL, m->compute));
    TRY(kern_route_topk(s, logits, &r, &ro));
    TRY(kern_to_host(s, count, counts, (size_t)2 * E * sizeof(int32_t)));
    uint64_t *routed =
        ex->routed && ex->experts >= E ? ex->routed + (size_t)layer * ex->experts : NULL;
    for (int e = 0; routed && e < E; e++)
        routed[e] += (uint64_t)real_n[e];
    /* expert-level residency: this rank's experts with rows are brought in
     * and waited for (model_stage_io.experts); one it cannot have is
     * computed as another rank's would be, weight 0 */
    memset(ok, 1, sizeof(ok));
    if (ex->io && ex->io->experts) {
        int rc = ex->io->experts(ex->io->arg, layer, count, real_n, E, ok);
        if (rc < 0 && *ex->io_rc == 0)
            *ex->io_rc = rc;
        for (int e = eb; e < ee; e++)
            count[e] = ok[e] ? count[e] : 0;
    }
    /* rows grouped by expert, each group in token order; each token's slots
     * and weights in its experts' order (the order torch sums them in), on
     * the device. Only the experts with rows here have rows (nl of them); a
     * slot of another expert reads row nl, zeros, weighted by 0 */
    TRY(kern_route_group(s, &r, &ro));
    int nl = 0;
    for (int e = eb; e < ee; e++)
        nl += count[e];
    if (nl > 0)
        TRY(kern_gather_rows(s, g, ex->h, rows, nl, H));
    if (nl < nk) /* the zeros that other ranks' experts' slots read */
        TRY(moe_zero_row(s, g + (size_t)nl * H, H));
    /* each expert once over its rows: act(gate(x)) * up(x), down into the
     * rows' place; the shared expert over every row, after them */
    if (nl <= (int)T)
        TRY(moe_experts(m, ex, g, nl, count, eb, ee, fr, w, o->act));
    else
        for (int e = eb, off = 0; e < ee; off += count[e], e++)
            if (count[e] > 0)
                TRY(moe_expert(m, ex, g + (size_t)off * H, g + (size_t)off * H, count[e], fr,
                               &w->experts[e], o->act));
    if (shared)
        TRY(moe_expert(m, ex, g + (size_t)nk * H, ex->h, n, o->shared_local, &w->shared, o->act));
    /* each token's outputs weighted and summed, over the TP ranks, into the
     * residual */
    TRY(kern_combine_rows(s, ex->h, g, slots, cw, n, K, H));
    TRY(model_reduce(ex, ex->h, (size_t)n * H));
    return kern_add(s, ex->x, ex->h, (size_t)n * H);
}
