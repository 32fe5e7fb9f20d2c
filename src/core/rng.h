/* A small seeded generator (workloads, sampling, random weights): xoshiro256** seeded through
 * splitmix64, plus the distributions arrival processes draw from. The same
 * seed (and stream) gives the same numbers on every machine: only IEEE double
 * arithmetic and libm's log/exp/sqrt/cos/pow are involved. Not for
 * cryptography. */
#ifndef SHARDSWAP_CORE_RNG_H
#define SHARDSWAP_CORE_RNG_H

#include <stdint.h>

struct rng {
    uint64_t s[4]; /* xoshiro256** state, never all zero */
};

/* Seeds stream `stream` of `seed`. Different streams of one seed are
 * independent for all practical purposes, so each model's arrival process can
 * own one and adding a model leaves the others' draws unchanged. */
void rng_seed(struct rng *r, uint64_t seed, uint64_t stream);

uint64_t rng_u64(struct rng *r);

/* Uniform in the open interval (0, 1): never exactly 0 or 1, so log() of it
 * is always finite. */
double rng_uniform(struct rng *r);

/* Standard normal (Box-Muller; one draw per call, nothing cached). */
double rng_normal(struct rng *r);

/* Exponential with the given rate (> 0): mean 1/rate. */
double rng_exponential(struct rng *r, double rate);

/* Gamma(shape, scale 1), shape > 0: mean shape, variance shape.
 * Marsaglia-Tsang (2000) for shape >= 1; below 1 the boost
 * G(a) = G(a + 1) * U^(1/a). May return 0 for very small shapes (underflow),
 * never a negative number. */
double rng_gamma(struct rng *r, double shape);

#endif
