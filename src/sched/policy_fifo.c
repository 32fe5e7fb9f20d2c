/* The fifo policy: llama-swap's swapping.
 * Requests in their global order of arrival: the model of the oldest waiting
 * request gets the next batch, and nothing else runs meanwhile; when it is not
 * resident it is swapped in, evicting least recently used models (any not
 * pinned) until it fits. No look-ahead, no keep-alive: a model stays until
 * another needs its room. These are Computron's decisions (sched_computron_decide:
 * with nothing loading or running no offload is pending either); the policy
 * differs in its batches, which mix sampling parameters. */
#include "sched/sched_impl.h"

const struct sched_policy sched_policy_fifo = {
    .name = "fifo",
    .help = "llama-swap's swapping: requests in arrival order, one at a time, the oldest "
            "one's model swapped in evicting least recently used ones",
    .decide = sched_computron_decide,
    .batch_same_params_only = false,
};
