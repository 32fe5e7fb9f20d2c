/* Internal to backend/cpu/: what its files share. */
#ifndef SHARDSWAP_BACKEND_CPU_CPU_IMPL_H
#define SHARDSWAP_BACKEND_CPU_CPU_IMPL_H

#include "backend/kernels_impl.h"

/* cpu_kernels.c: the kernel table of every CPU device. */
extern const struct kernel_ops cpu_kernel_ops;

#endif
