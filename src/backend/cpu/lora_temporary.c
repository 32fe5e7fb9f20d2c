/* TEMPORARY (loramodel branch): a plain f32 CPU kern_lora and its wrapper,
 * only so the model layer's adapters run and are tested before the real
 * kernels land. The branch that implements kern_lora on the CPU and CUDA
 * replaces this whole file (and the .lora line of cpu_kernel_ops) when
 * merged: delete this file then. */
#include <assert.h>
#include <math.h>
#include <stdint.h>

#include "backend/device_impl.h"
#include "backend/kernels.h"
#include "backend/kernels_impl.h"
#include "core/error.h"

int cpu_lora_temporary(struct stream *s, float *y, const float *x, int m, int nseg, const int *seg,
                       const struct lora_pair *pairs, enum kern_compute c, float *scratch);

/* w's element (r, k) widened to f32 */
static float elem(const struct weight_view *w, int r, int k)
{
    float v;
    dtype_to_f32(w->dtype, (const char *)weight_row(w, r) + (size_t)k * dtype_size(w->dtype), &v,
                 1);
    return v;
}

int cpu_lora_temporary(struct stream *s, float *y, const float *x, int m, int nseg, const int *seg,
                       const struct lora_pair *pairs, enum kern_compute c, float *scratch)
{
    (void)s;
    (void)m;
    const bool bf = c == KERN_COMPUTE_BF16;
    for (int g = 0; g < nseg; g++) {
        const struct lora_pair *p = &pairs[g];
        if (!p->a.data)
            continue;
        const int r = p->a.rows, in = p->a.cols, out = p->b.rows;
        for (int i = seg[g]; i < seg[g + 1]; i++) {
            const float *xi = x + (size_t)i * in;
            float *t = scratch;
            for (int k = 0; k < r; k++) {
                float acc = 0;
                for (int j = 0; j < in; j++)
                    acc += (bf ? bf16_round(xi[j]) : xi[j]) * elem(&p->a, k, j);
                t[k] = bf ? bf16_round(acc) : acc;
            }
            for (int o = 0; o < out; o++) {
                float acc = 0;
                for (int k = 0; k < r; k++)
                    acc += t[k] * elem(&p->b, o, k);
                y[(size_t)i * out + o] += p->scale * acc;
            }
        }
    }
    return 0;
}

int kern_lora(struct stream *s, float *y, const float *x, int m, int nseg, const int *seg,
              const struct lora_pair *pairs, enum kern_compute c, float *scratch)
{
    assert(s && y && x && seg && pairs && scratch && nseg >= 0 && m >= 0);
    const struct kernel_ops *k = s->dev->kern;
    if (!k->lora)
        return err_set(ERR_UNSUPPORTED, "device %s has no lora kernel", s->dev->name);
    return nseg ? k->lora(s, y, x, m, nseg, seg, pairs, c, scratch) : 0;
}

size_t kern_lora_scratch(int m, int max_r)
{
    return (size_t)(m > 0 ? m : 1) * (size_t)(max_r > 0 ? max_r : 1);
}
