/* The kernel wrappers: check the arguments once, then the stream's backend
 * table. A failed check is the caller's bug (shapes come from the model and
 * its plan, never from a request), so it asserts. */
#include "backend/kernels.h"

#include <assert.h>
#include <string.h>

#include "core/error.h"

#include "backend/cpu/cpu_impl.h"
#include "backend/device_impl.h"

static const struct kernel_ops *kern_of(const struct stream *s)
{
    assert(s && s->dev && s->dev->kern);
    return s->dev->kern;
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
    return kern_of(s)->linear(s, y, x, m, w, bias, c);
}

int kern_embed(struct stream *s, float *y, const struct weight_view *w, const int32_t *ids, int n,
               int row0)
{
    assert(y && w && w->data && ids && n > 0 && row0 >= 0);
    return kern_of(s)->embed(s, y, w, ids, n, row0);
}

int kern_layernorm(struct stream *s, float *y, const float *x, int m, int n, const float *gamma,
                   const float *beta, float eps)
{
    assert(y && x && m > 0 && n > 0 && !gamma == !beta && eps > 0);
    return kern_of(s)->layernorm(s, y, x, m, n, gamma, beta, eps);
}

int kern_rmsnorm(struct stream *s, float *y, const float *x, int m, int n, const float *gamma,
                 float eps)
{
    assert(y && x && m > 0 && n > 0 && eps > 0);
    return kern_of(s)->rmsnorm(s, y, x, m, n, gamma, eps);
}

int kern_rope(struct stream *s, float *x, int n, int heads, int head_dim, int rot_dim,
              const int32_t *pos, const float *inv_freq, float scale)
{
    assert(x && pos && inv_freq && n > 0 && heads > 0 && head_dim > 0 && rot_dim > 0 &&
           rot_dim % 2 == 0 && rot_dim <= head_dim);
    return kern_of(s)->rope(s, x, n, heads, head_dim, rot_dim, pos, inv_freq, scale);
}

int kern_activation(struct stream *s, float *x, size_t n, enum kern_act act)
{
    assert(x && act >= KERN_ACT_RELU && act <= KERN_ACT_SILU);
    return n ? kern_of(s)->activation(s, x, n, act) : 0;
}

int kern_gated_act(struct stream *s, float *y, const float *gate, const float *up, size_t n,
                   enum kern_act act)
{
    assert(y && gate && up && act >= KERN_ACT_RELU && act <= KERN_ACT_SILU);
    return n ? kern_of(s)->gated_act(s, y, gate, up, n, act) : 0;
}

int kern_add(struct stream *s, float *y, const float *x, size_t n)
{
    assert(y && x);
    return n ? kern_of(s)->add(s, y, x, n) : 0;
}

int kern_scale(struct stream *s, float *x, size_t n, float a)
{
    assert(x);
    return n ? kern_of(s)->scale(s, x, n, a) : 0;
}

static void geom_check(const struct kv_geom *g)
{
    assert(g && g->batch > 0 && g->heads > 0 && g->kv_heads > 0 && g->heads % g->kv_heads == 0 &&
           g->head_dim > 0 && g->max_t > 0);
}

int kern_kv_append(struct stream *s, float *kc, float *vc, const float *k, const float *v,
                   const struct kv_geom *g, int t_new, int pos)
{
    geom_check(g);
    assert(kc && vc && k && v && t_new > 0 && pos >= 0 && pos + t_new <= g->max_t);
    return kern_of(s)->kv_append(s, kc, vc, k, v, g, t_new, pos);
}

int kern_attention(struct stream *s, float *out, const float *q, const float *kc, const float *vc,
                   const uint8_t *key_ok, const struct kv_geom *g, int past, int t_new,
                   float *scratch)
{
    geom_check(g);
    assert(out && q && kc && vc && key_ok && scratch && t_new > 0 && past >= 0 &&
           past + t_new <= g->max_t && out != q);
    return kern_of(s)->attention(s, out, q, kc, vc, key_ok, g, past, t_new, scratch);
}

size_t kern_attention_scratch(const struct device *d, const struct kv_geom *g, int t_new, int t_all)
{
    geom_check(g);
    assert(t_new > 0 && t_all >= t_new);
    return (d ? d->kern : &cpu_kernel_ops)->attention_scratch(g, t_new, t_all);
}

int kern_gather_rows(struct stream *s, float *y, const float *x, const int32_t *rows, int n,
                     int width)
{
    assert(y && x && rows && n > 0 && width > 0 && y != x);
    return kern_of(s)->gather_rows(s, y, x, rows, n, width);
}

int kern_copy(struct stream *s, void *dst, const void *src, size_t n)
{
    assert(dst && src);
    return n ? kern_of(s)->copy(s, dst, src, n) : 0;
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
