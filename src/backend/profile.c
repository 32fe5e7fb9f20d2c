#include "backend/profile.h"

#include <stdbool.h>
#include <stddef.h>

#include "backend/device_impl.h"
#include "backend/kernels_impl.h"
#include "core/error.h"
#include "core/timing.h"

/* The profiled device's own table, and what its kernels cost so far. */
static const struct kernel_ops *inner;
static struct device *profiled;
static struct kern_profile counts;

static void count(int slot, double t0)
{
    counts.seconds[slot] += time_now() - t0;
    counts.calls[slot]++;
}

/* Adds one shape's calls into p's table (the last entry takes what finds no
 * room). */
static void shape_add(struct kern_profile *p, int rows, int cols, enum dtype dt, uint64_t calls,
                      double seconds, double bytes)
{
    int i = 0;
    while (i < p->n_shapes &&
           !(p->shape[i].rows == rows && p->shape[i].cols == cols && p->shape[i].dtype == dt))
        i++;
    if (i == p->n_shapes) {
        if (i == KERN_PROFILE_SHAPES) {
            i = KERN_PROFILE_SHAPES - 1;
            p->shape[i].rows = p->shape[i].cols = 0;
        } else
            p->shape[p->n_shapes++] = (struct kern_profile_shape){rows, cols, dt, 0, 0, 0};
    }
    p->shape[i].calls += calls;
    p->shape[i].seconds += seconds;
    p->shape[i].bytes += bytes;
}

static int p_linear(struct stream *s, float *y, const float *x, int m, const struct weight_view *w,
                    const float *bias, enum kern_compute c)
{
    double t0 = time_now();
    int rc = inner->linear(s, y, x, m, w, bias, c);
    const double dt = time_now() - t0;
    count(bias ? KERN_OP_LINEAR_BIAS : KERN_OP_LINEAR, t0);
    const double bytes = (double)w->rows * (double)dtype_row_bytes(w->dtype, (size_t)w->cols);
    counts.linear_bytes += bytes;
    shape_add(&counts, w->rows, w->cols, w->dtype, 1, dt, bytes);
    return rc;
}

static int p_linear_group(struct stream *s, const struct kern_linear_job *jobs, int n,
                          enum kern_compute c)
{
    double t0 = time_now();
    int rc = inner->linear_group(s, jobs, n, c);
    const double dt = time_now() - t0;
    count(KERN_PROFILE_LINEAR_GROUP, t0);
    double all = 0;
    for (int i = 0; i < n; i++)
        all += (double)jobs[i].w.rows *
               (double)dtype_row_bytes(jobs[i].w.dtype, (size_t)jobs[i].w.cols);
    /* each job's shape gets the call's time by its share of the bytes */
    for (int i = 0; i < n; i++) {
        const double b = (double)jobs[i].w.rows *
                         (double)dtype_row_bytes(jobs[i].w.dtype, (size_t)jobs[i].w.cols);
        counts.linear_bytes += b;
        counts.group_bytes += b;
        shape_add(&counts, jobs[i].w.rows, jobs[i].w.cols, jobs[i].w.dtype, 1,
                  all > 0 ? dt * b / all : 0, b);
    }
    return rc;
}

static int p_embed(struct stream *s, float *y, const struct weight_view *w, const int32_t *ids,
                   int n, int row0)
{
    double t0 = time_now();
    int rc = inner->embed(s, y, w, ids, n, row0);
    count(KERN_OP_EMBED, t0);
    return rc;
}

static int p_layernorm(struct stream *s, float *y, const float *x, int m, int n, const float *gamma,
                       const float *beta, float eps)
{
    double t0 = time_now();
    int rc = inner->layernorm(s, y, x, m, n, gamma, beta, eps);
    count(KERN_OP_LAYERNORM, t0);
    return rc;
}

static int p_rmsnorm(struct stream *s, float *y, const float *x, int m, int n, const float *gamma,
                     float eps)
{
    double t0 = time_now();
    int rc = inner->rmsnorm(s, y, x, m, n, gamma, eps);
    count(KERN_OP_RMSNORM, t0);
    return rc;
}

static int p_rope(struct stream *s, float *x, int n, int heads, int head_dim, int rot_dim,
                  const int32_t *pos, const float *inv_freq, float scale)
{
    double t0 = time_now();
    int rc = inner->rope(s, x, n, heads, head_dim, rot_dim, pos, inv_freq, scale);
    count(KERN_OP_ROPE, t0);
    return rc;
}

static int p_activation(struct stream *s, float *x, size_t n, enum kern_act act)
{
    double t0 = time_now();
    int rc = inner->activation(s, x, n, act);
    count(kern_act_op(act), t0);
    return rc;
}

static int p_gated_act(struct stream *s, float *y, const float *gate, const float *up, size_t n,
                       enum kern_act act)
{
    double t0 = time_now();
    int rc = inner->gated_act(s, y, gate, up, n, act);
    count(kern_gated_op(act), t0);
    return rc;
}

static int p_add(struct stream *s, float *y, const float *x, size_t n)
{
    double t0 = time_now();
    int rc = inner->add(s, y, x, n);
    count(KERN_OP_ADD, t0);
    return rc;
}

static int p_scale(struct stream *s, float *x, size_t n, float a)
{
    double t0 = time_now();
    int rc = inner->scale(s, x, n, a);
    count(KERN_OP_SCALE, t0);
    return rc;
}

static int p_softcap(struct stream *s, float *x, size_t n, float cap)
{
    double t0 = time_now();
    int rc = inner->softcap(s, x, n, cap);
    count(KERN_OP_SOFTCAP, t0);
    return rc;
}

static int p_kv_append(struct stream *s, float *kc, float *vc, const float *k, const float *v,
                       const struct kv_geom *g, int t_new, int pos)
{
    double t0 = time_now();
    int rc = inner->kv_append(s, kc, vc, k, v, g, t_new, pos);
    count(KERN_OP_KV_APPEND, t0);
    return rc;
}

static int p_attention(struct stream *s, float *out, const float *q, const float *kc,
                       const float *vc, const uint8_t *key_ok, const struct kv_geom *g, int past,
                       int t_new, float *scratch)
{
    double t0 = time_now();
    int rc = inner->attention(s, out, q, kc, vc, key_ok, g, past, t_new, scratch);
    count(KERN_OP_ATTENTION, t0);
    return rc;
}

static int p_gather_rows(struct stream *s, float *y, const float *x, const int32_t *rows, int n,
                         int width)
{
    double t0 = time_now();
    int rc = inner->gather_rows(s, y, x, rows, n, width);
    count(KERN_OP_GATHER_ROWS, t0);
    return rc;
}

static int p_copy(struct stream *s, void *dst, const void *src, size_t n)
{
    double t0 = time_now();
    int rc = inner->copy(s, dst, src, n);
    count(KERN_OP_COPY, t0);
    return rc;
}

static int p_combine_rows(struct stream *s, float *y, const float *x, const int32_t *rows,
                          const float *w, int n, int k, int width)
{
    double t0 = time_now();
    int rc = inner->combine_rows(s, y, x, rows, w, n, k, width);
    count(KERN_OP_COMBINE_ROWS, t0);
    return rc;
}

static int p_route_topk(struct stream *s, const float *logits, const struct kern_route *r,
                        const struct kern_route_out *out)
{
    double t0 = time_now();
    int rc = inner->route_topk(s, logits, r, out);
    count(KERN_OP_ROUTE_TOPK, t0);
    return rc;
}

static int p_route_group(struct stream *s, const struct kern_route *r,
                         const struct kern_route_out *out)
{
    double t0 = time_now();
    int rc = inner->route_group(s, r, out);
    count(KERN_OP_ROUTE_TOPK, t0);
    return rc;
}

static int p_lora(struct stream *s, float *y, const float *x, int m, int nseg, const int *seg,
                  const struct lora_pair *pairs, enum kern_compute c, float *scratch)
{
    double t0 = time_now();
    int rc = inner->lora(s, y, x, m, nseg, seg, pairs, c, scratch);
    count(KERN_OP_LORA, t0);
    return rc;
}

static int p_to_host(struct stream *s, void *host, const void *src, size_t n)
{
    double t0 = time_now();
    int rc = inner->to_host(s, host, src, n);
    count(KERN_PROFILE_TO_HOST, t0);
    return rc;
}

static int p_to_device(struct stream *s, void *dst, const void *host, size_t n)
{
    double t0 = time_now();
    int rc = inner->to_device(s, dst, host, n);
    count(KERN_PROFILE_TO_DEVICE, t0);
    return rc;
}

/* The device's table with every slot it fills that a trampoline knows
 * replaced by that trampoline. */
static struct kernel_ops timed;

#define TIME_SLOT(slot)                                                                            \
    if (inner->slot)                                                                               \
        timed.slot = p_##slot;

const char *kern_profile_name(int i)
{
    if (i == KERN_PROFILE_TO_HOST)
        return "to host";
    if (i == KERN_PROFILE_TO_DEVICE)
        return "to device";
    if (i == KERN_PROFILE_LINEAR_GROUP)
        return "linear group";
    return kern_op_name((enum kern_op)i);
}

int kern_profile_start(struct device *d)
{
    if (device_kind(d) != DEVICE_CPU)
        return err_set(ERR_UNSUPPORTED,
                       "kernel profiles time synchronous (CPU) devices only, not %s",
                       device_name(d));
    if (profiled)
        return err_set(ERR_BUSY, "device %s is profiled already", device_name(profiled));
    inner = d->kern;
    timed = *inner;
    TIME_SLOT(linear)
    TIME_SLOT(linear_group)
    TIME_SLOT(embed)
    TIME_SLOT(layernorm)
    TIME_SLOT(rmsnorm)
    TIME_SLOT(rope)
    TIME_SLOT(activation)
    TIME_SLOT(gated_act)
    TIME_SLOT(add)
    TIME_SLOT(scale)
    TIME_SLOT(softcap)
    TIME_SLOT(kv_append)
    TIME_SLOT(attention)
    TIME_SLOT(gather_rows)
    TIME_SLOT(copy)
    TIME_SLOT(combine_rows)
    TIME_SLOT(route_topk)
    TIME_SLOT(route_group)
    TIME_SLOT(lora)
    TIME_SLOT(to_host)
    TIME_SLOT(to_device)
    counts = (struct kern_profile){0};
    profiled = d;
    d->kern = &timed;
    return 0;
}

void kern_profile_stop(struct device *d, struct kern_profile *out)
{
    if (!profiled || profiled != d)
        return;
    d->kern = inner;
    profiled = NULL;
    if (!out)
        return;
    for (int i = 0; i < KERN_PROFILE_SLOTS; i++) {
        out->seconds[i] += counts.seconds[i];
        out->calls[i] += counts.calls[i];
    }
    out->linear_bytes += counts.linear_bytes;
    out->group_bytes += counts.group_bytes;
    for (int i = 0; i < counts.n_shapes; i++)
        shape_add(out, counts.shape[i].rows, counts.shape[i].cols, counts.shape[i].dtype,
                  counts.shape[i].calls, counts.shape[i].seconds, counts.shape[i].bytes);
}
