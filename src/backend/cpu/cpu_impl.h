/* Internal to backend/cpu/: what its files share. */
#ifndef SHARDSWAP_BACKEND_CPU_CPU_IMPL_H
#define SHARDSWAP_BACKEND_CPU_CPU_IMPL_H

#include <stdio.h>
#include <string.h>

#include "backend/kernels_impl.h"

/* cpu_kernels.c: the kernel table of every CPU device. */
extern const struct kernel_ops cpu_kernel_ops;

/* "a, b, ... y or z" into buf (size bytes, cut short at its end): the
 * names of a table's n kernels, each a struct `stride` bytes long whose
 * first member is its name (const char *) */
static inline void cpu_names_join(char *buf, size_t size, const void *table, size_t stride, int n)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && used < size; i++) {
        const char *name;
        memcpy(&name, (const char *)table + (size_t)i * stride, sizeof name);
        used += (size_t)snprintf(buf + used, size - used, "%s%s",
                                 i == 0       ? ""
                                 : i == n - 1 ? " or "
                                              : ", ",
                                 name);
    }
}

#endif
