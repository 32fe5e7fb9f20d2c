/* The kernel wrappers: check the arguments once, then the stream's backend
 * table. A failed check is the caller's bug (shapes come from the model and
 * its plan, never from a request), so it asserts. An op the table does not
 * run is refused with a message (registration keeps such a model off the
 * device, so this is the last line, not the check users meet). */
#include "backend/kernels.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "core/qpack.h"

#include "backend/cpu/cpu_impl.h"
#include "backend/device_impl.h"

static const struct kernel_ops *kern_of(const struct stream *s)
{
    assert(s && s->dev && s->dev->kern);
    return s->dev->kern;
}

static const char *const op_names[KERN_OP_COUNT] = {
    [KERN_OP_LINEAR] = "linear",
    [KERN_OP_LINEAR_BIAS] = "linear_bias",
    [KERN_OP_EMBED] = "embed",
    [KERN_OP_LAYERNORM] = "layernorm",
    [KERN_OP_RMSNORM] = "rmsnorm",
    [KERN_OP_ROPE] = "rope",
    [KERN_OP_RELU] = "relu",
    [KERN_OP_GELU] = "gelu",
    [KERN_OP_GELU_TANH] = "gelu_tanh",
    [KERN_OP_SILU] = "silu",
    [KERN_OP_REGLU] = "reglu",
    [KERN_OP_GEGLU] = "geglu",
    [KERN_OP_GEGLU_TANH] = "geglu_tanh",
    [KERN_OP_SWIGLU] = "swiglu",
    [KERN_OP_ADD] = "add",
    [KERN_OP_SCALE] = "scale",
    [KERN_OP_KV_APPEND] = "kv_append",
    [KERN_OP_ATTENTION] = "attention",
    [KERN_OP_GATHER_ROWS] = "gather_rows",
    [KERN_OP_COPY] = "copy",
    [KERN_OP_SOFTCAP] = "softcap",
    [KERN_OP_ATTENTION_WINDOW] = "attention_window",
    [KERN_OP_ATTENTION_SOFTCAP] = "attention_softcap",
    [KERN_OP_W_Q8_0] = "Q8_0 weights",
    [KERN_OP_W_Q4_0] = "Q4_0 weights",
    [KERN_OP_W_Q4_K] = "Q4_K weights",
    [KERN_OP_W_Q5_K] = "Q5_K weights",
    [KERN_OP_W_Q6_K] = "Q6_K weights",
    [KERN_OP_W_Q5_0] = "Q5_0 weights",
    [KERN_OP_W_Q5_1] = "Q5_1 weights",
    [KERN_OP_W_CT_I8] = "CT_I8 weights",
    [KERN_OP_W_CT_I4] = "CT_I4 weights",
    [KERN_OP_W_CT_F8] = "CT_F8 weights",
    [KERN_OP_LORA] = "lora",
    [KERN_OP_COMBINE_ROWS] = "combine_rows",
    [KERN_OP_ROUTE_TOPK] = "route_topk",
};

const char *kern_op_name(enum kern_op op)
{
    assert(op >= 0 && op < KERN_OP_COUNT && op_names[op]);
    return op_names[op];
}

/* kern_act_op and kern_gated_op count on the orders kernels.h states */
_Static_assert(KERN_OP_SILU - KERN_OP_RELU == KERN_ACT_SILU - KERN_ACT_RELU &&
                   KERN_OP_SWIGLU - KERN_OP_REGLU == KERN_ACT_SILU - KERN_ACT_RELU,
               "one activation op per enum kern_act, in its order");
_Static_assert(KERN_OP_COUNT <= 64, "a set of ops is a uint64_t");

enum kern_op kern_act_op(enum kern_act act)
{
    assert(act >= KERN_ACT_RELU && act <= KERN_ACT_SILU);
    return (enum kern_op)(KERN_OP_RELU + (int)act);
}

enum kern_op kern_gated_op(enum kern_act act)
{
    assert(act >= KERN_ACT_RELU && act <= KERN_ACT_SILU);
    return (enum kern_op)(KERN_OP_REGLU + (int)act);
}

/* Whether table k runs op: the op's slot is filled and not declared lacking. */
static bool table_runs(const struct kernel_ops *k, enum kern_op op)
{
    if (k->lacks & KERN_OP_BIT(op))
        return false;
    switch (op) {
    case KERN_OP_LINEAR:
    case KERN_OP_LINEAR_BIAS:
        return k->linear != NULL;
    case KERN_OP_EMBED:
        return k->embed != NULL;
    case KERN_OP_LAYERNORM:
        return k->layernorm != NULL;
    case KERN_OP_RMSNORM:
        return k->rmsnorm != NULL;
    case KERN_OP_ROPE:
        return k->rope != NULL;
    case KERN_OP_RELU:
    case KERN_OP_GELU:
    case KERN_OP_GELU_TANH:
    case KERN_OP_SILU:
        return k->activation != NULL;
    case KERN_OP_REGLU:
    case KERN_OP_GEGLU:
    case KERN_OP_GEGLU_TANH:
    case KERN_OP_SWIGLU:
        return k->gated_act != NULL;
    case KERN_OP_ADD:
        return k->add != NULL;
    case KERN_OP_SCALE:
        return k->scale != NULL;
    case KERN_OP_KV_APPEND:
        return k->kv_append != NULL;
    case KERN_OP_ATTENTION:
    case KERN_OP_ATTENTION_WINDOW:
    case KERN_OP_ATTENTION_SOFTCAP:
        return k->attention != NULL;
    case KERN_OP_SOFTCAP:
        return k->softcap != NULL;
    case KERN_OP_GATHER_ROWS:
        return k->gather_rows != NULL;
    case KERN_OP_COPY:
        return k->copy != NULL;
    case KERN_OP_W_Q8_0:
    case KERN_OP_W_Q4_0:
    case KERN_OP_W_Q4_K:
    case KERN_OP_W_Q5_K:
    case KERN_OP_W_Q6_K:
    case KERN_OP_W_Q5_0:
    case KERN_OP_W_Q5_1:
    case KERN_OP_W_CT_I8:
    case KERN_OP_W_CT_I4:
    case KERN_OP_W_CT_F8:
        return k->linear != NULL; /* and embed, where a model embeds */
    case KERN_OP_LORA:
        return k->lora != NULL;
    case KERN_OP_COMBINE_ROWS:
        return k->combine_rows != NULL;
    case KERN_OP_ROUTE_TOPK:
        return k->route_topk != NULL && k->route_group != NULL;
    case KERN_OP_COUNT:
        break;
    }
    assert(!"unknown kernel op");
    return false;
}

uint64_t kern_table_ops(const struct kernel_ops *k)
{
    uint64_t ops = 0;
    for (int op = 0; op < KERN_OP_COUNT; op++)
        if (table_runs(k, (enum kern_op)op))
            ops |= KERN_OP_BIT(op);
    return ops;
}

/* The op of weights of block type t, or KERN_OP_COUNT for a plain type. */
static enum kern_op weight_op(enum dtype t)
{
    switch (t) {
    case DTYPE_Q8_0:
        return KERN_OP_W_Q8_0;
    case DTYPE_Q4_0:
        return KERN_OP_W_Q4_0;
    case DTYPE_Q4_K:
        return KERN_OP_W_Q4_K;
    case DTYPE_Q5_K:
        return KERN_OP_W_Q5_K;
    case DTYPE_Q6_K:
        return KERN_OP_W_Q6_K;
    case DTYPE_Q5_0:
        return KERN_OP_W_Q5_0;
    case DTYPE_Q5_1:
        return KERN_OP_W_Q5_1;
    case DTYPE_CT_I8:
        return KERN_OP_W_CT_I8;
    case DTYPE_CT_I4:
        return KERN_OP_W_CT_I4;
    case DTYPE_CT_F8:
        return KERN_OP_W_CT_F8;
    case DTYPE_F32:
    case DTYPE_F16:
    case DTYPE_BF16:
        break;
    }
    return KERN_OP_COUNT;
}

uint64_t kern_weight_ops(enum dtype t)
{
    enum kern_op op = weight_op(t);
    return op == KERN_OP_COUNT ? 0 : KERN_OP_BIT(op);
}

bool kern_supports(const struct device *d, enum kern_op op)
{
    assert(d && d->kern && op >= 0 && op < KERN_OP_COUNT);
    return table_runs(d->kern, op);
}

uint64_t kern_supported(const struct device *d)
{
    assert(d && d->kern);
    return kern_table_ops(d->kern);
}

/* A packed view only where the table packs (the blob was filled for it),
 * whole and dense */
static inline bool packed_ok(const struct kernel_ops *k, const struct weight_view *w)
{
    return w->pack == WEIGHT_PACK_ROWS ||
           (k->weight_pack && qpack_takes(w->dtype) && w->ld == (size_t)w->cols);
}

enum weight_pack kern_weight_pack(const struct device *d, enum dtype t, int rows)
{
    assert(d && d->kern);
    if (device_proc(d) >= 0 || !d->kern->weight_pack || rows < QPACK_ROWS || !qpack_takes(t))
        return WEIGHT_PACK_ROWS;
    return d->kern->weight_pack(t);
}

int kern_attention_max_head_dim(const struct device *d)
{
    assert(d && d->kern);
    return d->kern->attention_max_head_dim;
}

static int head_dim_refuse(const struct device *d, int head_dim)
{
    return err_set(ERR_UNSUPPORTED, "device %s runs attention up to head_dim %d, not %d", d->name,
                   d->kern->attention_max_head_dim, head_dim);
}

int kern_check(const struct device *d, uint64_t ops, int head_dim)
{
    uint64_t missing = ops & ~kern_supported(d);
    if (missing) {
        char names[256];
        size_t at = 0;
        int n = 0;
        for (int op = 0; op < KERN_OP_COUNT; op++)
            if (missing & KERN_OP_BIT(op))
                at += (size_t)snprintf(names + at, sizeof(names) - at, "%s%s", n++ ? ", " : "",
                                       kern_op_name((enum kern_op)op));
        return n == 1 ? err_set(ERR_UNSUPPORTED, "device %s has no %s kernel", d->name, names)
                      : err_set(ERR_UNSUPPORTED, "device %s has no kernels for %s", d->name, names);
    }
    int max = kern_attention_max_head_dim(d);
    if ((ops & KERN_OP_BIT(KERN_OP_ATTENTION)) && max > 0 && head_dim > max)
        return head_dim_refuse(d, head_dim);
    return 0;
}

/* The call of an op s's device does not run. */
static int absent(const struct stream *s, enum kern_op op)
{
    return err_set(ERR_UNSUPPORTED, "device %s has no %s kernel", s->dev->name, kern_op_name(op));
}

const char *kern_compute_name(enum kern_compute c)
{
    return c == KERN_COMPUTE_BF16 ? "bf16" : "f32";
}

int kern_compute_parse(const char *s, enum kern_compute *out)
{
    if (s && strcmp(s, "f32") == 0)
        *out = KERN_COMPUTE_F32;
    else if (s && strcmp(s, "bf16") == 0)
        *out = KERN_COMPUTE_BF16;
    else
        return err_set(ERR_INVALID, "compute precision '%s': expected f32 or bf16", s ? s : "");
    return 0;
}

int kern_compute_choice(const char *s, bool *set, enum kern_compute *out)
{
    *set = false;
    if (!s || strcmp(s, "auto") == 0)
        return 0;
    if (kern_compute_parse(s, out) < 0)
        return err_set(ERR_INVALID, "compute precision '%s': expected f32, bf16 or auto", s);
    *set = true;
    return 0;
}

int kern_linear(struct stream *s, float *y, const float *x, int m, const struct weight_view *w,
                const float *bias, enum kern_compute c)
{
    assert(y && x && w && w->data && m > 0 && w->rows > 0 && w->cols > 0 &&
           w->ld >= (size_t)w->cols && y != x &&
           (c == KERN_COMPUTE_F32 || c == KERN_COMPUTE_BF16));
    const int qk = dtype_block(w->dtype);
    assert(w->cols % qk == 0 && w->ld % (size_t)qk == 0);
    const enum kern_op op = bias ? KERN_OP_LINEAR_BIAS : KERN_OP_LINEAR;
    const enum kern_op wop = weight_op(w->dtype);
    const struct kernel_ops *k = kern_of(s);
    assert(packed_ok(k, w));
    if (!table_runs(k, op))
        return absent(s, op);
    if (wop != KERN_OP_COUNT && !table_runs(k, wop))
        return absent(s, wop);
    return k->linear(s, y, x, m, w, bias, c);
}

int kern_linear_group(struct stream *s, const struct kern_linear_job *jobs, int n,
                      enum kern_compute c)
{
    assert(n >= 0 && (jobs || n == 0));
    assert(c == KERN_COMPUTE_F32 || c == KERN_COMPUTE_BF16);
    const struct kernel_ops *k = kern_of(s);
    if (!table_runs(k, KERN_OP_LINEAR))
        return absent(s, KERN_OP_LINEAR);
    for (int i = 0; i < n; i++) {
        const struct kern_linear_job *j = &jobs[i];
        const struct weight_view *w = &j->w;
        assert(j->y && j->x && j->m > 0 && j->y != j->x);
        if (j->bias && !table_runs(k, KERN_OP_LINEAR_BIAS))
            return absent(s, KERN_OP_LINEAR_BIAS);
        assert(w->data && w->rows > 0 && w->cols > 0 && w->ld >= (size_t)w->cols);
        const int qk = dtype_block(w->dtype);
        assert(w->cols % qk == 0 && w->ld % (size_t)qk == 0 && packed_ok(k, w));
        /* block and repacked types need their own ops, as kern_linear's */
        const enum kern_op wop = weight_op(w->dtype);
        if (wop != KERN_OP_COUNT && !table_runs(k, wop))
            return absent(s, wop);
    }
    if (!k->linear_group) {
        for (int i = 0; i < n; i++) {
            int rc = kern_linear(s, jobs[i].y, jobs[i].x, jobs[i].m, &jobs[i].w, jobs[i].bias, c);
            if (rc < 0)
                return rc;
        }
        return 0;
    }
    return n ? k->linear_group(s, jobs, n, c) : 0;
}

/* A plain (f32, f16 or bf16) view with its shape and stride. */
static bool plain_view(const struct weight_view *w)
{
    return w->data && !dtype_is_block(w->dtype) && w->rows > 0 && w->cols > 0 &&
           w->ld >= (size_t)w->cols;
}

int kern_lora(struct stream *s, float *y, const float *x, int m, int nseg, const int *seg,
              const struct lora_pair *pairs, enum kern_compute c, float *scratch)
{
    assert(y && x && y != x && m > 0 && nseg >= 0 && seg && (pairs || nseg == 0) &&
           (c == KERN_COMPUTE_F32 || c == KERN_COMPUTE_BF16));
    assert(seg[0] >= 0 && seg[nseg] <= m);
    int in = 0, out = 0;
    bool any = false;
    for (int i = 0; i < nseg; i++) {
        assert(seg[i] <= seg[i + 1]);
        const struct lora_pair *p = &pairs[i];
        if (!p->a.data)
            continue;
        /* a (r, in) and b (out, r), every pair the same in and out */
        assert(plain_view(&p->a) && plain_view(&p->b) && p->b.cols == p->a.rows);
        assert(!any || (p->a.cols == in && p->b.rows == out));
        in = p->a.cols;
        out = p->b.rows;
        any = true;
    }
    assert(!any || scratch);
    const struct kernel_ops *k = kern_of(s);
    if (!table_runs(k, KERN_OP_LORA))
        return absent(s, KERN_OP_LORA);
    return any ? k->lora(s, y, x, m, nseg, seg, pairs, c, scratch) : 0;
}

size_t kern_lora_scratch(int m, int max_r)
{
    assert(m >= 0 && max_r >= 0);
    return (size_t)m * (size_t)max_r;
}

int kern_embed(struct stream *s, float *y, const struct weight_view *w, const int32_t *ids, int n,
               int row0)
{
    assert(y && w && w->data && ids && n > 0 && row0 >= 0);
    assert(w->cols % dtype_block(w->dtype) == 0);
    const enum kern_op wop = weight_op(w->dtype);
    const struct kernel_ops *k = kern_of(s);
    assert(packed_ok(k, w));
    if (!table_runs(k, KERN_OP_EMBED))
        return absent(s, KERN_OP_EMBED);
    if (wop != KERN_OP_COUNT && !table_runs(k, wop))
        return absent(s, wop);
    return k->embed(s, y, w, ids, n, row0);
}

int kern_layernorm(struct stream *s, float *y, const float *x, int m, int n, const float *gamma,
                   const float *beta, float eps)
{
    assert(y && x && m > 0 && n > 0 && !gamma == !beta && eps > 0);
    const struct kernel_ops *k = kern_of(s);
    if (!table_runs(k, KERN_OP_LAYERNORM))
        return absent(s, KERN_OP_LAYERNORM);
    return k->layernorm(s, y, x, m, n, gamma, beta, eps);
}

int kern_rmsnorm(struct stream *s, float *y, const float *x, int m, int n, const float *gamma,
                 float eps)
{
    assert(y && x && m > 0 && n > 0 && eps > 0);
    const struct kernel_ops *k = kern_of(s);
    if (!table_runs(k, KERN_OP_RMSNORM))
        return absent(s, KERN_OP_RMSNORM);
    return k->rmsnorm(s, y, x, m, n, gamma, eps);
}

int kern_rope(struct stream *s, float *x, int n, int heads, int head_dim, int rot_dim,
              const int32_t *pos, const float *inv_freq, float scale)
{
    assert(x && pos && inv_freq && n > 0 && heads > 0 && head_dim > 0 && rot_dim > 0 &&
           rot_dim % 2 == 0 && rot_dim <= head_dim);
    const struct kernel_ops *k = kern_of(s);
    if (!table_runs(k, KERN_OP_ROPE))
        return absent(s, KERN_OP_ROPE);
    return k->rope(s, x, n, heads, head_dim, rot_dim, pos, inv_freq, scale);
}

int kern_activation(struct stream *s, float *x, size_t n, enum kern_act act)
{
    assert(x && act >= KERN_ACT_RELU && act <= KERN_ACT_SILU);
    const struct kernel_ops *k = kern_of(s);
    if (!table_runs(k, kern_act_op(act)))
        return absent(s, kern_act_op(act));
    return n ? k->activation(s, x, n, act) : 0;
}

int kern_gated_act(struct stream *s, float *y, const float *gate, const float *up, size_t n,
                   enum kern_act act)
{
    assert(y && gate && up && act >= KERN_ACT_RELU && act <= KERN_ACT_SILU);
    const struct kernel_ops *k = kern_of(s);
    if (!table_runs(k, kern_gated_op(act)))
        return absent(s, kern_gated_op(act));
    return n ? k->gated_act(s, y, gate, up, n, act) : 0;
}

int kern_add(struct stream *s, float *y, const float *x, size_t n)
{
    assert(y && x);
    const struct kernel_ops *k = kern_of(s);
    if (!table_runs(k, KERN_OP_ADD))
        return absent(s, KERN_OP_ADD);
    return n ? k->add(s, y, x, n) : 0;
}

int kern_scale(struct stream *s, float *x, size_t n, float a)
{
    assert(x);
    const struct kernel_ops *k = kern_of(s);
    if (!table_runs(k, KERN_OP_SCALE))
        return absent(s, KERN_OP_SCALE);
    return n ? k->scale(s, x, n, a) : 0;
}

int kern_softcap(struct stream *s, float *x, size_t n, float cap)
{
    assert(x && cap > 0);
    const struct kernel_ops *k = kern_of(s);
    if (!table_runs(k, KERN_OP_SOFTCAP))
        return absent(s, KERN_OP_SOFTCAP);
    return n ? k->softcap(s, x, n, cap) : 0;
}

static void geom_check(const struct kv_geom *g)
{
    assert(g && g->batch > 0 && g->heads > 0 && g->kv_heads > 0 && g->heads % g->kv_heads == 0 &&
           g->head_dim > 0 && g->max_t > 0 && g->window >= 0 && g->softcap >= 0 && g->ring >= 0 &&
           (g->ring == 0 || g->window > 0));
}

int kern_kv_append(struct stream *s, float *kc, float *vc, const float *k, const float *v,
                   const struct kv_geom *g, int t_new, int pos)
{
    geom_check(g);
    assert(kc && vc && k && v && t_new > 0 && pos >= 0 && pos + t_new <= g->max_t &&
           (g->ring == 0 || t_new <= g->ring));
    const struct kernel_ops *kt = kern_of(s);
    if (!table_runs(kt, KERN_OP_KV_APPEND))
        return absent(s, KERN_OP_KV_APPEND);
    return kt->kv_append(s, kc, vc, k, v, g, t_new, pos);
}

int kern_attention(struct stream *s, float *out, const float *q, const float *kc, const float *vc,
                   const uint8_t *key_ok, const struct kv_geom *g, int past, int t_new,
                   float *scratch)
{
    geom_check(g);
    assert(out && q && kc && vc && key_ok && scratch && t_new > 0 && past >= 0 &&
           past + t_new <= g->max_t && out != q &&
           (g->ring == 0 || g->ring >= g->window + t_new - 1));
    const struct kernel_ops *k = kern_of(s);
    if (!table_runs(k, KERN_OP_ATTENTION))
        return absent(s, KERN_OP_ATTENTION);
    if (g->window > 0 && !table_runs(k, KERN_OP_ATTENTION_WINDOW))
        return absent(s, KERN_OP_ATTENTION_WINDOW);
    if (g->softcap > 0 && !table_runs(k, KERN_OP_ATTENTION_SOFTCAP))
        return absent(s, KERN_OP_ATTENTION_SOFTCAP);
    if (k->attention_max_head_dim > 0 && g->head_dim > k->attention_max_head_dim)
        return head_dim_refuse(s->dev, g->head_dim);
    return k->attention(s, out, q, kc, vc, key_ok, g, past, t_new, scratch);
}

size_t kern_attention_scratch(const struct device *d, const struct kv_geom *g, int t_new, int t_all)
{
    geom_check(g);
    assert(t_new > 0 && t_all >= t_new);
    const struct kernel_ops *k = d ? d->kern : &cpu_kernel_ops;
    return k->attention ? k->attention_scratch(g, t_new, t_all) : 0; /* none: nothing to size */
}

int kern_gather_rows(struct stream *s, float *y, const float *x, const int32_t *rows, int n,
                     int width)
{
    assert(y && x && rows && n > 0 && width > 0 && y != x);
    const struct kernel_ops *k = kern_of(s);
    if (!table_runs(k, KERN_OP_GATHER_ROWS))
        return absent(s, KERN_OP_GATHER_ROWS);
    return k->gather_rows(s, y, x, rows, n, width);
}

int kern_combine_rows(struct stream *s, float *y, const float *x, const int32_t *rows,
                      const float *w, int n, int k, int width)
{
    assert(y && x && rows && w && n > 0 && k > 0 && width > 0 && y != x);
    const struct kernel_ops *kt = kern_of(s);
    if (!table_runs(kt, KERN_OP_COMBINE_ROWS))
        return absent(s, KERN_OP_COMBINE_ROWS);
    return kt->combine_rows(s, y, x, rows, w, n, k, width);
}

static void route_check(const struct kern_route *r, const struct kern_route_out *out)
{
    assert(r && out && r->n > 0 && r->n_experts > 0 && r->n_experts <= KERN_ROUTE_MAX_EXPERTS &&
           r->top_k > 0 && r->top_k <= r->n_experts && r->top_k <= KERN_ROUTE_MAX_K);
    assert(!r->real || (r->real_group > 0 && r->real_stride >= r->real_group));
    assert(out->choice && out->choice_w && out->counts);
}

int kern_route_topk(struct stream *s, const float *logits, const struct kern_route *r,
                    const struct kern_route_out *out)
{
    route_check(r, out);
    assert(logits);
    const struct kernel_ops *k = kern_of(s);
    if (!table_runs(k, KERN_OP_ROUTE_TOPK))
        return absent(s, KERN_OP_ROUTE_TOPK);
    return k->route_topk(s, logits, r, out);
}

int kern_route_group(struct stream *s, const struct kern_route *r, const struct kern_route_out *out)
{
    route_check(r, out);
    assert(0 <= r->expert_begin && r->expert_begin < r->expert_end &&
           r->expert_end <= r->n_experts);
    assert(r->slot_stride == r->top_k + (r->shared_gate != NULL));
    assert(out->rows && out->slots && out->slot_w);
    const struct kernel_ops *k = kern_of(s);
    if (!table_runs(k, KERN_OP_ROUTE_TOPK))
        return absent(s, KERN_OP_ROUTE_TOPK);
    return k->route_group(s, r, out);
}

int kern_copy(struct stream *s, void *dst, const void *src, size_t n)
{
    assert(dst && src);
    const struct kernel_ops *k = kern_of(s);
    if (!table_runs(k, KERN_OP_COPY))
        return absent(s, KERN_OP_COPY);
    return n ? k->copy(s, dst, src, n) : 0;
}

int kern_to_host(struct stream *s, void *host, const void *src, size_t n)
{
    assert(host && src);
    return n ? kern_of(s)->to_host(s, host, src, n) : 0;
}

int kern_to_device(struct stream *s, void *dst, const void *host, size_t n)
{
    assert(dst && host);
    return n ? kern_of(s)->to_device(s, dst, host, n) : 0;
}
