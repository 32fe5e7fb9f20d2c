/* How many CPUs this process may use. */
#ifndef SHARDSWAP_CORE_CPUS_H
#define SHARDSWAP_CORE_CPUS_H

/* Its affinity mask's count (which containers and taskset narrow), else the
 * online count, else 1. */
int cpus_usable(void);

#endif
