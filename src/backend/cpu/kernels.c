#include "backend/cpu/kernels.h"

#include <assert.h>
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Rows of a narrow weight widened at once: big enough for BLAS to run at
 * speed, small enough (with K up to ~8k) to stay in L2. */
#define LINEAR_BLOCK_ROWS 64

void cpu_linear(float *y, const float *x, int m, const struct weight_view *w, const float *bias)
{
    const int n = w->rows, k = w->cols;
    if (w->dtype == DTYPE_F32) {
        if (m == 1)
            cblas_sgemv(CblasRowMajor, CblasNoTrans, n, k, 1.0f, w->data, (int)w->ld, x, 1, 0.0f,
                        y, 1);
        else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, x, k, w->data,
                        (int)w->ld, 0.0f, y, n);
    } else {
        float *blk = malloc((size_t)LINEAR_BLOCK_ROWS * k * sizeof(float));
        assert(blk);
        for (int r0 = 0; r0 < n; r0 += LINEAR_BLOCK_ROWS) {
            int nb = n - r0 < LINEAR_BLOCK_ROWS ? n - r0 : LINEAR_BLOCK_ROWS;
            /* widen rows [r0, r0 + nb) */
            for (int r = 0; r < nb; r++)
                dtype_to_f32(w->dtype, weight_row(w, r0 + r), blk + (size_t)r * k, (size_t)k);
            if (m == 1)
                cblas_sgemv(CblasRowMajor, CblasNoTrans, nb, k, 1.0f, blk, k, x, 1, 0.0f, y + r0, 1);
            else
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, nb, k, 1.0f, x, k, blk, k,
                            0.0f, y + r0, n);
        }
        free(blk);
    }
    if (bias)
        for (int i = 0; i < m; i++)
            cpu_add(y + (size_t)i * n, bias, (size_t)n);
}

void cpu_embed(float *y, const struct weight_view *w, const int32_t *ids, int n)
{
    for (int i = 0; i < n; i++) {
        assert(ids[i] >= 0 && ids[i] < w->rows);
        dtype_to_f32(w->dtype, weight_row(w, ids[i]), y + (size_t)i * w->cols, (size_t)w->cols);
    }
}

void cpu_layernorm(float *y, const float *x, int m, int n, const float *gamma, const float *beta,
                   float eps)
{
    for (int i = 0; i < m; i++) {
        const float *xi = x + (size_t)i * n;
        float *yi = y + (size_t)i * n;
        /* two passes in double: torch reduces in f32 with a different order, so
         * the most accurate result is the closest to it on average */
        double mean = 0, var = 0;
        for (int j = 0; j < n; j++)
            mean += xi[j];
        mean /= n;
        for (int j = 0; j < n; j++) {
            double d = xi[j] - mean;
            var += d * d;
        }
        var /= n;
        float rstd = (float)(1.0 / sqrt(var + eps));
        float fmean = (float)mean;
        for (int j = 0; j < n; j++) {
            float v = (xi[j] - fmean) * rstd;
            if (gamma)
                v = v * gamma[j] + beta[j];
            yi[j] = v;
        }
    }
}

void cpu_activation(float *x, size_t n, enum opt_act act)
{
    switch (act) {
    case OPT_ACT_RELU:
        for (size_t i = 0; i < n; i++)
            x[i] = x[i] > 0 ? x[i] : 0;
        return;
    case OPT_ACT_GELU:
        for (size_t i = 0; i < n; i++)
            x[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678118654752f));
        return;
    case OPT_ACT_GELU_TANH:
        for (size_t i = 0; i < n; i++) {
            float v = x[i];
            x[i] = 0.5f * v * (1.0f + tanhf(0.79788456080286536f * (v + 0.044715f * v * v * v)));
        }
        return;
    case OPT_ACT_SILU:
        for (size_t i = 0; i < n; i++)
            x[i] = x[i] / (1.0f + expf(-x[i]));
        return;
    }
}

void cpu_add(float *y, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] += x[i];
}

void cpu_attention(float *out, size_t ldo, const float *q, size_t ldq, const float *kc,
                   const float *vc, int n_heads, int head_dim, size_t max_t, int past, int t_new,
                   const uint8_t *key_ok, float *scores)
{
    const int t_all = past + t_new;
    for (int h = 0; h < n_heads; h++) {
        const float *qh = q + (size_t)h * head_dim;
        const float *kh = kc + (size_t)h * max_t * head_dim;
        const float *vh = vc + (size_t)h * max_t * head_dim;
        float *oh = out + (size_t)h * head_dim;
        /* scores = q_h @ k_h^T over every cached key */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, t_new, t_all, head_dim, 1.0f, qh,
                    (int)ldq, kh, head_dim, 0.0f, scores, t_all);
        /* causal + padding mask, softmax per query row */
        for (int t = 0; t < t_new; t++) {
            float *s = scores + (size_t)t * t_all;
            int visible = past + t + 1;
            float mx = -INFINITY;
            for (int j = 0; j < visible; j++)
                if (key_ok[j] && s[j] > mx)
                    mx = s[j];
            if (mx == -INFINITY) {
                memset(s, 0, (size_t)t_all * sizeof(float));
                continue;
            }
            float sum = 0;
            for (int j = 0; j < t_all; j++) {
                float e = (j < visible && key_ok[j]) ? expf(s[j] - mx) : 0.0f;
                s[j] = e;
                sum += e;
            }
            float inv = 1.0f / sum;
            for (int j = 0; j < visible; j++)
                s[j] *= inv;
        }
        /* out_h = P @ v_h */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, t_new, head_dim, t_all, 1.0f,
                    scores, t_all, vh, head_dim, 0.0f, oh, (int)ldo);
    }
}

void cpu_set_threads(int n)
{
    if (n < 1)
        n = (int)sysconf(_SC_NPROCESSORS_ONLN);
    openblas_set_num_threads(n);
}

int cpu_threads(void)
{
    return openblas_get_num_threads();
}
