/* The policies by name: the engine's, and the simulator's (the engine's
 * and those that read the future arrivals). Each policy is its own file,
 * policy_<name>.c. */
#include <stddef.h>
#include <string.h>

#include "core/error.h"
#include "sched/sched.h"
#include "sched/sched_impl.h"

/* Every policy, in the order sched_policy_names_sim lists them. */
static const struct sched_policy *const policies[] = {
    &sched_policy_swapwise,
    &sched_policy_swapwise_preempt,
    &sched_policy_swapwise_partial,
    &sched_policy_computron,
    &sched_policy_lru,
    &sched_policy_fifo,
    &sched_policy_clairvoyant,
    &sched_policy_clairvoyant_partial,
};

static const struct sched_policy *policy_lookup(const char *name)
{
    for (size_t i = 0; i < sizeof(policies) / sizeof(policies[0]); i++)
        if (strcmp(policies[i]->name, name) == 0)
            return policies[i];
    return NULL;
}

const struct sched_policy *sched_policy_find(const char *name)
{
    const struct sched_policy *p = policy_lookup(name);
    if (p && p->needs_future) {
        err_set(ERR_INVALID,
                "scheduling policy \"%s\" needs the future arrivals, which only "
                "the simulator has (bench workload --simulate); expected %s",
                name, sched_policy_names());
        return NULL;
    }
    if (!p)
        err_set(ERR_INVALID, "unknown scheduling policy \"%s\" (expected %s)", name,
                sched_policy_names());
    return p;
}

const struct sched_policy *sched_policy_find_sim(const char *name)
{
    const struct sched_policy *p = policy_lookup(name);
    if (!p)
        err_set(ERR_INVALID, "unknown scheduling policy \"%s\" (expected %s)", name,
                sched_policy_names_sim());
    return p;
}

const char *sched_policy_names(void)
{
    return "swapwise|swapwise-preempt|computron|lru|fifo|swapwise-partial";
}

const char *sched_policy_names_sim(void)
{
    return "swapwise|swapwise-preempt|computron|lru|fifo|clairvoyant|swapwise-partial|"
           "clairvoyant-partial";
}

const char *sched_policy_default(void)
{
    return "swapwise";
}
