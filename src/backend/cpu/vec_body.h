/* vec.h's loops of exponentials written once for both widths: included by
 * vec_avx512.c (16 lanes) and vec_avx2.c (8) after they define
 *
 *   vx_t                 a vector of VX_LANES floats
 *   vx_load(p), vx_store(p, v)             whole vectors (unaligned)
 *   vx_load_tail(p, n), vx_store_tail(p, v, n)
 *                        the first n < VX_LANES lanes (zeros past n)
 *   vx_set1(f), vx_add, vx_sub, vx_mul, vx_div, vx_fmadd(a, b, c), vx_max
 *   vx_select(m, a)      a where m, else 0
 *   vx_select_or(m, a, b) a where m, else b
 *   vx_ok(ok, n)         the lanes j < n whose byte ok[j] is set, as the
 *                        mask vx_select and vx_select_or take
 *   vx_hmax(v), vx_hsum(v) the lanes' maximum and sum
 *   vx_expf, vx_tanhf, vx_erff  glibc's vector functions of that width
 *   VX_FN(name)          the name of the function to define: name_<isa>
 *
 * Each loop takes whole vectors, then the rest through the masked loads
 * and stores. */
#include <math.h>
#include <string.h>

void VX_FN(vec_exp)(float *x, size_t n)
{
    size_t i = 0;
    for (; i + VX_LANES <= n; i += VX_LANES)
        vx_store(x + i, vx_expf(vx_load(x + i)));
    if (i < n)
        vx_store_tail(x + i, vx_expf(vx_load_tail(x + i, n - i)), n - i);
}

static inline vx_t vx_silu(vx_t g)
{
    const vx_t e = vx_expf(vx_sub(vx_set1(0.0f), g));
    return vx_div(g, vx_add(vx_set1(1.0f), e));
}

void VX_FN(vec_silu)(float *y, const float *g, const float *up, size_t n)
{
    size_t i = 0;
    for (; i + VX_LANES <= n; i += VX_LANES) {
        vx_t v = vx_silu(vx_load(g + i));
        if (up)
            v = vx_mul(v, vx_load(up + i));
        vx_store(y + i, v);
    }
    if (i < n) {
        vx_t v = vx_silu(vx_load_tail(g + i, n - i));
        if (up)
            v = vx_mul(v, vx_load_tail(up + i, n - i));
        vx_store_tail(y + i, v, n - i);
    }
}

static inline vx_t vx_gelu(vx_t v, bool tanh_approx)
{
    const vx_t half_v = vx_mul(vx_set1(0.5f), v);
    vx_t t;
    if (tanh_approx) {
        const vx_t v3 = vx_mul(vx_mul(v, v), v);
        const vx_t in = vx_fmadd(vx_set1(0.044715f), v3, v);
        t = vx_tanhf(vx_mul(vx_set1(0.79788456080286536f), in));
    } else {
        t = vx_erff(vx_mul(v, vx_set1(0.70710678118654752f)));
    }
    return vx_fmadd(half_v, t, half_v);
}

void VX_FN(vec_gelu)(float *y, const float *g, const float *up, size_t n, bool tanh_approx)
{
    size_t i = 0;
    for (; i + VX_LANES <= n; i += VX_LANES) {
        vx_t v = vx_gelu(vx_load(g + i), tanh_approx);
        if (up)
            v = vx_mul(v, vx_load(up + i));
        vx_store(y + i, v);
    }
    if (i < n) {
        vx_t v = vx_gelu(vx_load_tail(g + i, n - i), tanh_approx);
        if (up)
            v = vx_mul(v, vx_load_tail(up + i, n - i));
        vx_store_tail(y + i, v, n - i);
    }
}

void VX_FN(vec_softcap)(float *x, size_t n, float cap)
{
    const vx_t c = vx_set1(cap);
    size_t i = 0;
    for (; i + VX_LANES <= n; i += VX_LANES)
        vx_store(x + i, vx_mul(vx_tanhf(vx_div(vx_load(x + i), c)), c));
    if (i < n)
        vx_store_tail(x + i, vx_mul(vx_tanhf(vx_div(vx_load_tail(x + i, n - i), c)), c), n - i);
}

void VX_FN(vec_softmax_masked)(float *s, const uint8_t *ok, int visible, int n)
{
    const size_t v = (size_t)visible;
    const vx_t ninf = vx_set1(-INFINITY);
    vx_t mx = ninf;
    for (size_t j = 0; j < v; j += VX_LANES) {
        const size_t k = v - j < VX_LANES ? v - j : VX_LANES;
        mx = vx_max(mx, vx_select_or(vx_ok(ok + j, k), vx_load_tail(s + j, k), ninf));
    }
    const float top = vx_hmax(mx);
    if (top == -INFINITY) {
        memset(s, 0, (size_t)n * sizeof(float));
        return;
    }
    const vx_t t = vx_set1(top);
    vx_t sum = vx_set1(0.0f);
    for (size_t j = 0; j < v; j += VX_LANES) {
        const size_t k = v - j < VX_LANES ? v - j : VX_LANES;
        const vx_t e = vx_select(vx_ok(ok + j, k), vx_expf(vx_sub(vx_load_tail(s + j, k), t)));
        sum = vx_add(sum, e);
        vx_store_tail(s + j, e, k);
    }
    memset(s + v, 0, (size_t)(n - visible) * sizeof(float));
    const vx_t inv = vx_set1(1.0f / vx_hsum(sum));
    for (size_t j = 0; j < v; j += VX_LANES) {
        const size_t k = v - j < VX_LANES ? v - j : VX_LANES;
        vx_store_tail(s + j, vx_mul(vx_load_tail(s + j, k), inv), k);
    }
}
