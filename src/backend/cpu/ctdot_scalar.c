/* The reference of the compressed-tensors dot products (ctdot.h), element
 * by element in the order every vector kernel reproduces. */
#include <math.h>
#include <string.h>

#include "backend/cpu/ctdot.h"
#include "core/dtype.h"
#include "core/quant_ct.h"

#define QK QUANT_CT_QK

/* the 16 partial sums of ctdot.h, reduced in its fixed tree */
static float tree16(float s[16])
{
    for (int l = 0; l < 8; l++)
        s[l] += s[l + 8];
    for (int l = 0; l < 4; l++)
        s[l] += s[l + 4];
    for (int l = 0; l < 2; l++)
        s[l] += s[l + 2];
    return s[0] + s[1];
}

/* one block's 32 weights, exact, then rounded to bf16 if asked */
static void block_weights(enum dtype t, const unsigned char *p, bool bf16, float wv[QK])
{
    quant_ct_dequantize(t, p, wv, QK);
    for (int j = 0; bf16 && j < QK; j++)
        wv[j] = bf16_round(wv[j]);
}

void ctdot_rows_scalar(const struct ctdot_args *a, int r0, int r1)
{
    const struct weight_view *w = a->w;
    const int nb = w->cols / QK;
    const size_t bb = quant_ct_block_bytes(w->dtype);
    for (int r = r0; r < r1; r++) {
        const unsigned char *row = weight_row(w, r);
        for (int i = 0; i < a->m; i++) {
            const float *x = a->x + (size_t)i * a->ldx;
            float s[16] = {0};
            for (int b = 0; b < nb; b++) {
                float wv[QK];
                block_weights(w->dtype, row + (size_t)b * bb, a->bf16, wv);
                for (int j = 0; j < QK; j++)
                    s[j % 16] = fmaf(wv[j], x[b * QK + j], s[j % 16]);
            }
            a->y[(size_t)i * a->ldy + r] = tree16(s);
        }
    }
}

void ctdot_dequant_scalar(enum dtype t, const void *src, void *dst, size_t n, bool to_bf16)
{
    const size_t bb = quant_ct_block_bytes(t);
    const unsigned char *p = src;
    for (size_t b = 0; b < n / QK; b++, p += bb) {
        float wv[QK];
        quant_ct_dequantize(t, p, wv, QK);
        if (!to_bf16) {
            memcpy((float *)dst + b * QK, wv, sizeof(wv));
            continue;
        }
        for (int j = 0; j < QK; j++)
            ((uint16_t *)dst)[b * QK + j] = f32_to_bf16(wv[j]);
    }
}
