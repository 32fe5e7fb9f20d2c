/* The reference of the quantized dot products (qdot.h): each block's
 * integer sums as core/quant.h defines its elements, element by element.
 * The vector kernels give these bits; tests compare against it. */
#include "backend/cpu/qdot.h"

#include <string.h>

/* The partial sums of qdot.h */
static void acc_0(float *p, int b, float dw, float dx, int32_t isum)
{
    p[b % QDOT_LANES] = fmaf(dw * dx, (float)isum, p[b % QDOT_LANES]);
}

static void acc_k(float *p, int b, float d, float dmin, float dx, int32_t isum, int32_t msum)
{
    float *q = &p[b % QDOT_LANES];
    *q = fmaf(d * dx, (float)isum, *q);
    *q = fmaf(-(dmin * dx), (float)msum, *q);
}

static float dot_q8_0(const char *w, const char *x, int nb)
{
    float sum[QDOT_LANES] = {0};
    for (int b = 0; b < nb; b++) {
        struct quant_q8_0 bw, bx;
        memcpy(&bw, w + (size_t)b * sizeof(bw), sizeof(bw));
        memcpy(&bx, x + (size_t)b * sizeof(bx), sizeof(bx));
        int32_t isum = 0;
        for (int j = 0; j < QUANT_QK0; j++)
            isum += bw.qs[j] * bx.qs[j];
        acc_0(sum, b, f16_to_f32(bw.d), f16_to_f32(bx.d), isum);
    }
    return qdot_sum8(sum);
}

static float dot_q4_0(const char *w, const char *x, int nb)
{
    float sum[QDOT_LANES] = {0};
    for (int b = 0; b < nb; b++) {
        struct quant_q4_0 bw;
        struct quant_q8_0 bx;
        memcpy(&bw, w + (size_t)b * sizeof(bw), sizeof(bw));
        memcpy(&bx, x + (size_t)b * sizeof(bx), sizeof(bx));
        int32_t isum = 0;
        for (int j = 0; j < QUANT_QK0 / 2; j++)
            isum += ((bw.qs[j] & 15) - 8) * bx.qs[j] + ((bw.qs[j] >> 4) - 8) * bx.qs[j + 16];
        acc_0(sum, b, f16_to_f32(bw.d), f16_to_f32(bx.d), isum);
    }
    return qdot_sum8(sum);
}

/* Q5_0 / Q5_1: element j's fifth bit is bit j of qh */
static int q5_quant(const uint8_t *qs, uint32_t qh, int j)
{
    return (j < 16 ? qs[j] & 15 : qs[j - 16] >> 4) | (int)((qh >> j) & 1) << 4;
}

static float dot_q5_0(const char *w, const char *x, int nb)
{
    float sum[QDOT_LANES] = {0};
    for (int b = 0; b < nb; b++) {
        struct quant_q5_0 bw;
        struct quant_q8_0 bx;
        memcpy(&bw, w + (size_t)b * sizeof(bw), sizeof(bw));
        memcpy(&bx, x + (size_t)b * sizeof(bx), sizeof(bx));
        uint32_t qh;
        memcpy(&qh, bw.qh, 4);
        int32_t isum = 0;
        for (int j = 0; j < QUANT_QK0; j++)
            isum += (q5_quant(bw.qs, qh, j) - 16) * bx.qs[j];
        acc_0(sum, b, f16_to_f32(bw.d), f16_to_f32(bx.d), isum);
    }
    return qdot_sum8(sum);
}

static float dot_q5_1(const char *w, const char *x, int nb)
{
    float sum[QDOT_LANES] = {0};
    for (int b = 0; b < nb; b++) {
        struct quant_q5_1 bw;
        struct quant_q8_0 bx;
        memcpy(&bw, w + (size_t)b * sizeof(bw), sizeof(bw));
        memcpy(&bx, x + (size_t)b * sizeof(bx), sizeof(bx));
        uint32_t qh;
        memcpy(&qh, bw.qh, 4);
        int32_t isum = 0, xsum = 0;
        for (int j = 0; j < QUANT_QK0; j++) {
            isum += q5_quant(bw.qs, qh, j) * bx.qs[j];
            xsum += bx.qs[j];
        }
        acc_k(sum, b, f16_to_f32(bw.d), -f16_to_f32(bw.m), f16_to_f32(bx.d), isum, xsum);
    }
    return qdot_sum8(sum);
}

/* Q4_K and Q5_K: sub-block s of 32 holds nibble s & 1 of qs[32 (s / 2) + l]
 * (and bit s of qh[l] for Q5_K as the fifth bit). */
static float dot_q45_k(const char *w, const char *x, int nb, bool five)
{
    float sum[QDOT_LANES] = {0};
    for (int b = 0; b < nb; b++) {
        struct quant_q5_k bw; /* Q4_K's fields are Q5_K's less qh */
        struct quant_q8_k bx;
        if (five) {
            memcpy(&bw, w + (size_t)b * sizeof(struct quant_q5_k), sizeof(bw));
        } else {
            struct quant_q4_k b4;
            memcpy(&b4, w + (size_t)b * sizeof(b4), sizeof(b4));
            bw.d = b4.d;
            bw.dmin = b4.dmin;
            memcpy(bw.scales, b4.scales, sizeof(bw.scales));
            memset(bw.qh, 0, sizeof(bw.qh));
            memcpy(bw.qs, b4.qs, sizeof(bw.qs));
        }
        memcpy(&bx, x + (size_t)b * sizeof(bx), sizeof(bx));
        int32_t isum = 0, msum = 0;
        for (int s = 0; s < 8; s++) {
            uint8_t sc, mn;
            quant_scale_min(s, bw.scales, &sc, &mn);
            int32_t part = 0;
            for (int l = 0; l < 32; l++) {
                int q = (s & 1 ? bw.qs[32 * (s / 2) + l] >> 4 : bw.qs[32 * (s / 2) + l] & 15) |
                        ((bw.qh[l] >> s) & 1) << 4;
                part += q * bx.qs[32 * s + l];
            }
            isum += sc * part;
            msum += mn * (bx.bsums[2 * s] + bx.bsums[2 * s + 1]);
        }
        acc_k(sum, b, f16_to_f32(bw.d), f16_to_f32(bw.dmin), bx.d, isum, msum);
    }
    return qdot_sum8(sum);
}

static float dot_q6_k(const char *w, const char *x, int nb)
{
    float sum[QDOT_LANES] = {0};
    for (int b = 0; b < nb; b++) {
        struct quant_q6_k bw;
        struct quant_q8_k bx;
        memcpy(&bw, w + (size_t)b * sizeof(bw), sizeof(bw));
        memcpy(&bx, x + (size_t)b * sizeof(bx), sizeof(bx));
        int32_t isum = 0;
        for (int s = 0; s < 16; s++) {
            /* sub-block s: half h, quarter k of it, its lines l0 .. l0 + 15 */
            const int h = s / 8, k = (s % 8) / 2, l0 = 16 * (s % 2);
            int32_t part = 0;
            for (int l = l0; l < l0 + 16; l++) {
                const uint8_t lo = bw.ql[64 * h + l + 32 * (k & 1)];
                const int q =
                    ((k >> 1 ? lo >> 4 : lo & 15) | ((bw.qh[32 * h + l] >> (2 * k)) & 3) << 4);
                part += q * bx.qs[128 * h + 32 * k + l];
            }
            isum += bw.scales[s] * (part - 32 * bx.bsums[s]);
        }
        acc_k(sum, b, f16_to_f32(bw.d), 0.0f, bx.d, isum, 0);
    }
    return qdot_sum8(sum);
}

void qdot_rows_scalar(const struct qdot_args *a, int r0, int r1)
{
    const struct weight_view *w = a->w;
    const int nb = w->cols / dtype_block(w->dtype);
    for (int r = r0; r < r1; r++) {
        const char *row = weight_row(w, r);
        for (int i = 0; i < a->m; i++) {
            const char *x = a->xq + (size_t)i * a->xq_ld;
            float v = 0;
            switch (w->dtype) {
            case DTYPE_Q8_0:
                v = dot_q8_0(row, x, nb);
                break;
            case DTYPE_Q4_0:
                v = dot_q4_0(row, x, nb);
                break;
            case DTYPE_Q4_K:
                v = dot_q45_k(row, x, nb, false);
                break;
            case DTYPE_Q5_K:
                v = dot_q45_k(row, x, nb, true);
                break;
            case DTYPE_Q6_K:
                v = dot_q6_k(row, x, nb);
                break;
            case DTYPE_Q5_0:
                v = dot_q5_0(row, x, nb);
                break;
            case DTYPE_Q5_1:
                v = dot_q5_1(row, x, nb);
                break;
            case DTYPE_F32:
            case DTYPE_F16:
            case DTYPE_BF16:
            case DTYPE_CT_I8: /* ctlinear.c's */
            case DTYPE_CT_I4:
            case DTYPE_CT_F8:
                break;
            }
            a->y[(size_t)i * a->ldy + r] = v;
        }
    }
}
