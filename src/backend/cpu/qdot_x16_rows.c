/* scalar-x16: the reference on weights packed in groups of 16 rows
 * (qdot.h's qdot_x16_rows): each group written back as rows into the
 * thread's scratch, then qdot_rows_scalar. Built for any CPU (qdot_x16.c,
 * built for AVX-512, falls back to it), apart from qdot_scalar.c, which
 * the CUDA kernels' emulation compiles alone. */
#include "backend/cpu/qdot.h"

#include "backend/cpu/scratch.h"
#include "core/error.h"
#include "core/qpack.h"

int qdot_x16_rows(const struct qdot_args *a, int r0, int r1)
{
    const struct weight_view *w = a->w;
    const int gend = w->rows / QPACK_ROWS * QPACK_ROWS;
    const size_t row_bytes = dtype_row_bytes(w->dtype, (size_t)w->cols);
    struct weight_view rows = *w;
    rows.pack = WEIGHT_PACK_ROWS;
    struct qdot_args ra = *a;
    ra.w = &rows;
    if (r0 < gend) {
        char *buf = cpu_scratch(CPU_SCRATCH_Q_DEQ, QPACK_ROWS * row_bytes);
        if (!buf)
            return ERR_NOMEM;
        for (int g = r0 / QPACK_ROWS; g * QPACK_ROWS < r1 && g * QPACK_ROWS < gend; g++) {
            qpack_group_unpack(w->dtype, weight_row(w, g * QPACK_ROWS), w->cols, buf, row_bytes);
            /* the group's 16 rows as a view of their own, y from row 16 g */
            struct weight_view gw = rows;
            gw.data = buf;
            gw.rows = QPACK_ROWS;
            struct qdot_args ga = ra;
            ga.w = &gw;
            ga.y = a->y + (size_t)g * QPACK_ROWS;
            const int lo = r0 > g * QPACK_ROWS ? r0 - g * QPACK_ROWS : 0;
            const int hi = r1 - g * QPACK_ROWS < QPACK_ROWS ? r1 - g * QPACK_ROWS : QPACK_ROWS;
            qdot_rows_scalar(&ga, lo, hi);
        }
    }
    if (r1 > gend)
        qdot_rows_scalar(&ra, r0 > gend ? r0 : gend, r1);
    return 0;
}
