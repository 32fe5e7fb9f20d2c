#include "core/quant.h"

#include "core/quant_ct.h"

#include <assert.h>
#include <math.h>
#include <string.h>

size_t quant_block_bytes(enum dtype t)
{
    switch (t) {
    case DTYPE_Q8_0:
        return sizeof(struct quant_q8_0);
    case DTYPE_Q4_0:
        return sizeof(struct quant_q4_0);
    case DTYPE_Q4_K:
        return sizeof(struct quant_q4_k);
    case DTYPE_Q5_K:
        return sizeof(struct quant_q5_k);
    case DTYPE_Q6_K:
        return sizeof(struct quant_q6_k);
    case DTYPE_Q5_0:
        return sizeof(struct quant_q5_0);
    case DTYPE_Q5_1:
        return sizeof(struct quant_q5_1);
    case DTYPE_CT_I8:
    case DTYPE_CT_I4:
    case DTYPE_CT_F8:
        return quant_ct_block_bytes(t);
    case DTYPE_F32:
    case DTYPE_F16:
    case DTYPE_BF16:
        break;
    }
    assert(!"not a block type");
    return 0;
}

static void deq_q8_0(const struct quant_q8_0 *b, float *y)
{
    const float d = f16_to_f32(b->d);
    for (int j = 0; j < QUANT_QK0; j++)
        y[j] = d * (float)b->qs[j];
}

static void deq_q4_0(const struct quant_q4_0 *b, float *y)
{
    const float d = f16_to_f32(b->d);
    for (int j = 0; j < QUANT_QK0 / 2; j++) {
        y[j] = d * (float)((b->qs[j] & 15) - 8);
        y[j + 16] = d * (float)((b->qs[j] >> 4) - 8);
    }
}

/* Q5_0 / Q5_1: element j's fifth bit is bit j of qh */
static int q5_elem(const uint8_t *qs, const uint8_t *qh, int j)
{
    uint32_t h;
    memcpy(&h, qh, 4);
    const int nib = j < 16 ? qs[j] & 15 : qs[j - 16] >> 4;
    return nib | (int)((h >> j) & 1) << 4;
}

static void deq_q5_0(const struct quant_q5_0 *b, float *y)
{
    const float d = f16_to_f32(b->d);
    for (int j = 0; j < QUANT_QK0; j++)
        y[j] = d * (float)(q5_elem(b->qs, b->qh, j) - 16);
}

static void deq_q5_1(const struct quant_q5_1 *b, float *y)
{
    const float d = f16_to_f32(b->d), m = f16_to_f32(b->m);
    for (int j = 0; j < QUANT_QK0; j++)
        y[j] = d * (float)q5_elem(b->qs, b->qh, j) + m;
}

static void deq_q4_k(const struct quant_q4_k *b, float *y)
{
    const float d = f16_to_f32(b->d), dmin = f16_to_f32(b->dmin);
    const uint8_t *q = b->qs;
    for (int s = 0; s < 8; s += 2, q += 32, y += 64) {
        uint8_t sc0, mn0, sc1, mn1;
        quant_scale_min(s, b->scales, &sc0, &mn0);
        quant_scale_min(s + 1, b->scales, &sc1, &mn1);
        const float d0 = d * sc0, m0 = dmin * mn0, d1 = d * sc1, m1 = dmin * mn1;
        for (int l = 0; l < 32; l++) {
            y[l] = d0 * (float)(q[l] & 15) - m0;
            y[l + 32] = d1 * (float)(q[l] >> 4) - m1;
        }
    }
}

static void deq_q5_k(const struct quant_q5_k *b, float *y)
{
    const float d = f16_to_f32(b->d), dmin = f16_to_f32(b->dmin);
    const uint8_t *q = b->qs;
    for (int s = 0; s < 8; s += 2, q += 32, y += 64) {
        uint8_t sc0, mn0, sc1, mn1;
        quant_scale_min(s, b->scales, &sc0, &mn0);
        quant_scale_min(s + 1, b->scales, &sc1, &mn1);
        const float d0 = d * sc0, m0 = dmin * mn0, d1 = d * sc1, m1 = dmin * mn1;
        for (int l = 0; l < 32; l++) {
            int h0 = (b->qh[l] >> s) & 1, h1 = (b->qh[l] >> (s + 1)) & 1;
            y[l] = d0 * (float)((q[l] & 15) | h0 << 4) - m0;
            y[l + 32] = d1 * (float)((q[l] >> 4) | h1 << 4) - m1;
        }
    }
}

static void deq_q6_k(const struct quant_q6_k *b, float *y)
{
    const float d = f16_to_f32(b->d);
    const uint8_t *ql = b->ql, *qh = b->qh;
    const int8_t *sc = b->scales;
    for (int h = 0; h < 2; h++, y += 128, ql += 64, qh += 32, sc += 8)
        for (int l = 0; l < 32; l++) {
            const int is = l / 16;
            const int q1 = ((ql[l] & 15) | ((qh[l] >> 0) & 3) << 4) - 32;
            const int q2 = ((ql[l + 32] & 15) | ((qh[l] >> 2) & 3) << 4) - 32;
            const int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
            const int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
            y[l] = d * (float)sc[is] * (float)q1;
            y[l + 32] = d * (float)sc[is + 2] * (float)q2;
            y[l + 64] = d * (float)sc[is + 4] * (float)q3;
            y[l + 96] = d * (float)sc[is + 6] * (float)q4;
        }
}

void quant_dequantize(enum dtype t, const void *src, float *dst, size_t n)
{
    if (quant_ct_is(t)) {
        quant_ct_dequantize(t, src, dst, n);
        return;
    }
    const int qk = dtype_block(t);
    const size_t bb = quant_block_bytes(t);
    assert(n % (size_t)qk == 0);
    const char *p = src;
    /* blocks are copied out: a row of a file need not be aligned */
    for (size_t i = 0; i < n / (size_t)qk; i++, p += bb, dst += qk) {
        union {
            struct quant_q8_0 q8_0;
            struct quant_q4_0 q4_0;
            struct quant_q4_k q4_k;
            struct quant_q5_k q5_k;
            struct quant_q6_k q6_k;
            struct quant_q5_0 q5_0;
            struct quant_q5_1 q5_1;
        } b;
        memcpy(&b, p, bb);
        switch (t) {
        case DTYPE_Q8_0:
            deq_q8_0(&b.q8_0, dst);
            break;
        case DTYPE_Q4_0:
            deq_q4_0(&b.q4_0, dst);
            break;
        case DTYPE_Q4_K:
            deq_q4_k(&b.q4_k, dst);
            break;
        case DTYPE_Q5_K:
            deq_q5_k(&b.q5_k, dst);
            break;
        case DTYPE_Q6_K:
            deq_q6_k(&b.q6_k, dst);
            break;
        case DTYPE_Q5_0:
            deq_q5_0(&b.q5_0, dst);
            break;
        case DTYPE_Q5_1:
            deq_q5_1(&b.q5_1, dst);
            break;
        case DTYPE_CT_I8:
        case DTYPE_CT_I4:
        case DTYPE_CT_F8:
        case DTYPE_F32:
        case DTYPE_F16:
        case DTYPE_BF16:
            assert(!"not a block type here");
            return;
        }
    }
}

static int f16_nonfinite(const char *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return (h & 0x7c00) == 0x7c00;
}

size_t quant_find_nonfinite(enum dtype t, const void *src, size_t n)
{
    if (quant_ct_is(t))
        return quant_ct_find_nonfinite(t, src, n);
    const int qk = dtype_block(t);
    const size_t bb = quant_block_bytes(t);
    /* offsets of the block's f16 scales (Q6_K's d is at its end) */
    const size_t s0 = t == DTYPE_Q6_K ? 208 : 0;
    const bool two = t == DTYPE_Q4_K || t == DTYPE_Q5_K || t == DTYPE_Q5_1;
    const char *p = src;
    for (size_t i = 0; i < n / (size_t)qk; i++, p += bb)
        if (f16_nonfinite(p + s0) || (two && f16_nonfinite(p + 2)))
            return i * (size_t)qk;
    return n;
}

void quant_q8_0_from_f32(const float *x, char *out, int n)
{
    for (int b = 0; b < n / QUANT_QK0; b++, x += QUANT_QK0, out += sizeof(struct quant_q8_0)) {
        struct quant_q8_0 q;
        float amax = 0;
        for (int j = 0; j < QUANT_QK0; j++)
            amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        q.d = f32_to_f16(d);
        for (int j = 0; j < QUANT_QK0; j++)
            q.qs[j] = (int8_t)roundf(x[j] * id);
        memcpy(out, &q, sizeof(q));
    }
}

void quant_q8_k_from_f32(const float *x, char *out, int n)
{
    for (int b = 0; b < n / QUANT_QKK; b++, x += QUANT_QKK, out += sizeof(struct quant_q8_k)) {
        struct quant_q8_k q;
        float amax = 0, max = 0;
        for (int j = 0; j < QUANT_QKK; j++)
            if (fabsf(x[j]) > amax) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        memset(&q, 0, sizeof(q));
        if (amax != 0.0f) {
            const float iscale = -127.0f / max;
            for (int j = 0; j < QUANT_QKK; j++) {
                int v = (int)nearbyintf(iscale * x[j]); /* nearest even, as ggml's nearest_int */
                q.qs[j] = (int8_t)(v < 127 ? v : 127);
            }
            for (int j = 0; j < QUANT_QKK / 16; j++) {
                int s = 0;
                for (int i = 0; i < 16; i++)
                    s += q.qs[16 * j + i];
                q.bsums[j] = (int16_t)s;
            }
            q.d = 1.0f / iscale;
        }
        memcpy(out, &q, sizeof(q));
    }
}
