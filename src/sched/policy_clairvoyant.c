/* The clairvoyant policy: an offline reference, simulator only.
 * swapwise's rules knowing each model's next arrival (next_arrival): the
 * victim is the model whose next request is farthest away (Belady), and when
 * the links are idle the model whose next request comes soonest is loaded for
 * models wanted later. Not a proven optimum: a bound no policy can beat is
 * the simulator's floor (workload/simulate.h). */
#include "sched/sched_impl.h"

static int clairvoyant_decide(const struct sched_view *v, struct sched_action *out, int max)
{
    return sched_swapwise_run(v, out, max, true, false);
}

static int clairvoyant_partial_decide(const struct sched_view *v, struct sched_action *out, int max)
{
    return sched_swapwise_run(v, out, max, true, true);
}

const struct sched_policy sched_policy_clairvoyant = {
    .name = "clairvoyant",
    .help = "simulator only: swapwise knowing the future arrivals, evicting the model wanted "
            "farthest ahead (Belady) and prefetching the one wanted soonest",
    .decide = clairvoyant_decide,
    .batch_same_params_only = false,
    .needs_future = true,
};

const struct sched_policy sched_policy_clairvoyant_partial = {
    .name = "clairvoyant-partial",
    .help = "simulator only: clairvoyant with swapwise-partial's trims (its bound)",
    .decide = clairvoyant_partial_decide,
    .batch_same_params_only = false,
    .needs_future = true,
};
