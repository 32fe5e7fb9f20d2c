#include "core/rng.h"

#include <assert.h>
#include <math.h>

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

void rng_seed(struct rng *r, uint64_t seed, uint64_t stream)
{
    /* Mix seed and stream separately before combining, so (seed, stream) pairs
     * that sum or xor to the same value still get unrelated states. */
    uint64_t a = seed, b = stream ^ 0x5851f42d4c957f2dull;
    uint64_t x = splitmix64(&a) ^ rotl(splitmix64(&b), 17);
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
    if (!(r->s[0] | r->s[1] | r->s[2] | r->s[3]))
        r->s[0] = 1; /* the one state xoshiro cannot leave */
}

uint64_t rng_u64(struct rng *r)
{
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

double rng_uniform(struct rng *r)
{
    /* 53 random bits centred in their cell: (k + 0.5) / 2^53, k in [0, 2^53) */
    return ((double)(rng_u64(r) >> 11) + 0.5) * 0x1.0p-53;
}

double rng_normal(struct rng *r)
{
    const double two_pi = 6.283185307179586476925286766559;
    double u1 = rng_uniform(r), u2 = rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(two_pi * u2);
}

double rng_exponential(struct rng *r, double rate)
{
    assert(rate > 0);
    return -log(rng_uniform(r)) / rate;
}

double rng_gamma(struct rng *r, double shape)
{
    assert(shape > 0 && isfinite(shape));
    if (shape < 1) {
        /* exp(log(U) / a) rather than pow(U, 1/a): same value, and 1/a stays
         * out of the exponent when a is tiny */
        double g = rng_gamma(r, shape + 1);
        return g * exp(log(rng_uniform(r)) / shape);
    }
    double d = shape - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x, v;
        do {
            x = rng_normal(r);
            v = 1.0 + c * x;
        } while (v <= 0);
        v = v * v * v;
        double u = rng_uniform(r), x2 = x * x;
        if (u < 1.0 - 0.0331 * x2 * x2)
            return d * v;
        if (log(u) < 0.5 * x2 + d * (1.0 - v + log(v)))
            return d * v;
    }
}
