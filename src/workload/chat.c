#include "workload/chat.h"

#include <math.h>
#include <stdlib.h>

/* Length streams are rng_seed(seed, LENGTH_STREAM(m, k)): the arrival
 * processes use streams 0..ARRIVAL_MODELS_MAX-1, these start at 2^32. */
#define LENGTH_STREAM(m, k) ((((uint64_t)(m) + 1) << 32) | ((k)&0xffffffffu))

void chat_lengths_default(struct chat_lengths *l)
{
    l->prompt = (struct chat_dist){CHAT_PROMPT_MEDIAN, CHAT_PROMPT_SIGMA, CHAT_PROMPT_MAX};
    l->output = (struct chat_dist){CHAT_OUTPUT_MEDIAN, CHAT_OUTPUT_SIGMA, CHAT_OUTPUT_MAX};
}

int chat_dist_draw(const struct chat_dist *d, struct rng *r)
{
    double x = round(exp(log(d->median) + d->sigma * rng_normal(r)));
    if (!(x >= 1))
        return 1;
    return x > d->max ? d->max : (int)x;
}

void chat_lengths_draw(const struct chat_lengths *l, uint64_t seed, int model, uint64_t k,
                       int *n_prompt, int *n_output)
{
    struct rng r;
    rng_seed(&r, seed, LENGTH_STREAM(model, k));
    *n_prompt = chat_dist_draw(&l->prompt, &r);
    *n_output = chat_dist_draw(&l->output, &r);
}

void chat_requests_make(const struct chat_lengths *l, uint64_t seed, const struct arrival *ev,
                        size_t n, struct chat_request *out)
{
    uint64_t k[ARRIVAL_MODELS_MAX] = {0};
    for (size_t i = 0; i < n; i++) {
        int m = ev[i].model;
        chat_lengths_draw(l, seed, m, k[m]++, &out[i].n_prompt, &out[i].n_output);
    }
}
