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
 *
 * A packed view (pack WEIGHT_PACK_X16, core/qpack.h) holds its first
 * rows / 16 x 16 rows in groups of 16 interleaved for the CPU's kernels,
 * the rest as rows: only dense (ld == cols), only in a blob filled for a
 * CPU device whose kernels asked for it (kern_weight_pack), and only a
 * whole matrix (no slice of its rows or columns is a view).
 */
#ifndef SHARDSWAP_BACKEND_WEIGHT_H
#define SHARDSWAP_BACKEND_WEIGHT_H

#include <stddef.h>

#include "core/dtype.h"

enum weight_pack {
    WEIGHT_PACK_ROWS, /* row-major, as the checkpoint stores each row */
    WEIGHT_PACK_X16,  /* groups of 16 rows interleaved (core/qpack.h) */
};

struct weight_view {
    enum dtype dtype;
    const void *data; /* element (0, 0) */
    int rows, cols;
    size_t ld; /* elements between the starts of consecutive rows */
    enum weight_pack pack;
};

/* Element (r, 0) of w (of a packed view: the start of r's group, or a row
 * past the groups). */
static inline const void *weight_row(const struct weight_view *w, int r)
{
    return (const char *)w->data + (size_t)r * dtype_row_bytes(w->dtype, w->ld);
}

#endif
