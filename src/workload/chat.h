/* Chat traffic: many models with power-law (Zipf) popularity, Gamma arrivals
 * (workload/arrival.h), and each request's prompt and output lengths drawn
 * from log-normal fits of ShareGPT-like conversations, clipped to [1, max]:
 *
 *   prompt tokens  round(exp(mu + sigma * N(0, 1))), mu = ln 200, sigma 1.0,
 *                  clipped to [1, 1536]   (median 200, p90 ~ 720)
 *   output tokens  round(exp(mu + sigma * N(0, 1))), mu = ln 100, sigma 0.8,
 *                  clipped to [1, 512]    (median 100, p90 ~ 279)
 *
 * The numbers are a published-looking fit, not a measurement of a data set:
 * ShareGPT's prompts and answers are long-tailed with medians in the low
 * hundreds of tokens. A request generates exactly its drawn output length
 * (max_tokens = n_output; the generated models never stop early).
 *
 * Lengths are seeded per request: the k-th arrival of model m draws from its
 * own generator stream (chat_lengths_draw), so the same seed gives the same
 * requests, and adding a model, or changing another model's rate, leaves a
 * model's arrival times and lengths unchanged. The streams never meet the
 * arrival processes' (rng_seed(seed, model)). */
#ifndef SHARDSWAP_WORKLOAD_CHAT_H
#define SHARDSWAP_WORKLOAD_CHAT_H

#include <stddef.h>
#include <stdint.h>

#include "core/rng.h"
#include "workload/arrival.h"

#define CHAT_PROMPT_MEDIAN 200
#define CHAT_PROMPT_SIGMA 1.0
#define CHAT_PROMPT_MAX 1536
#define CHAT_OUTPUT_MEDIAN 100
#define CHAT_OUTPUT_SIGMA 0.8
#define CHAT_OUTPUT_MAX 512
#define CHAT_DEFAULT_CV 1.0
#define CHAT_DEFAULT_ZIPF 1.0
/* Default token SLOs (seconds): time to first token and per output token */
#define CHAT_SLO_TTFT_S 5.0
#define CHAT_SLO_TPOT_S 0.2

/* One clipped log-normal length: round(exp(ln(median) + sigma * z)) in
 * [1, max]. */
struct chat_dist {
    double median, sigma;
    int max;
};

struct chat_lengths {
    struct chat_dist prompt, output;
};

/* The defaults above. */
void chat_lengths_default(struct chat_lengths *l);

/* One draw of d from r. */
int chat_dist_draw(const struct chat_dist *d, struct rng *r);

/* The lengths of the k-th arrival (k = 0, 1, ...) of model m under seed. */
void chat_lengths_draw(const struct chat_lengths *l, uint64_t seed, int model, uint64_t k,
                       int *n_prompt, int *n_output);

/* One request's lengths. */
struct chat_request {
    int n_prompt, n_output;
};

/* The lengths of ev[0..n) (time-sorted, as arrival_generate makes them):
 * out[i] for ev[i], each the k-th arrival of its model. out holds n. */
void chat_requests_make(const struct chat_lengths *l, uint64_t seed, const struct arrival *ev,
                        size_t n, struct chat_request *out);

#endif
