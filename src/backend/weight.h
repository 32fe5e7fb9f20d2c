/* A weight matrix as the kernels see it: a row-major view with a row stride.
 *
 * A tensor-parallel slice of a checkpoint tensor (a block of rows for
 * column-parallel layers, a block of columns for row-parallel ones) is then a
 * view, not a copy. data is a device address: on the CPU backend a host
 * pointer (into a device arena or a memory-mapped checkpoint), on CUDA a
 * device pointer. The view never owns its memory.
 *
 * A block type (core/quant.h: Q8_0, Q4_K, ...) is a view like any other:
 * rows are runs of blocks, ld counts elements (a whole number of blocks),
 * so a slice of rows is the same view from a later row, and a slice of
 * columns must start and end on block boundaries (dtype_check_cols).
 */
#ifndef SHARDSWAP_BACKEND_WEIGHT_H
#define SHARDSWAP_BACKEND_WEIGHT_H

#include <stddef.h>

#include "core/dtype.h"

struct weight_view {
    enum dtype dtype;
    const void *data; /* element (0, 0) */
    int rows, cols;
    size_t ld; /* elements between the starts of consecutive rows */
};

/* Element (r, 0) of w. */
static inline const void *weight_row(const struct weight_view *w, int r)
{
    return (const char *)w->data + (size_t)r * dtype_row_bytes(w->dtype, w->ld);
}

#endif
