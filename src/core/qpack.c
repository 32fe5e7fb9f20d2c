#include "core/qpack.h"

#include <string.h>

#include "core/quant.h"

bool qpack_takes(enum dtype t)
{
    return t == DTYPE_Q4_K || t == DTYPE_Q5_K || t == DTYPE_Q6_K;
}

/* A type's pieces: bytes [at, at + width) of a row's block go to offset
 * base + width r of the packed block for row r (qpack.h; Q6_K's d: piece) */
static int n_pieces(enum dtype t)
{
    return t == DTYPE_Q4_K ? 2 + 3 + 32 : t == DTYPE_Q5_K ? 2 + 3 + 8 + 32 : 32 + 16 + 4 + 1;
}

static void piece_in(enum dtype t, int i, size_t *at, size_t *base, size_t *width)
{
    *width = 4;
    if (t == DTYPE_Q6_K) {
        if (i < 32) { /* ql's words */
            *at = 4 * (size_t)i;
            *base = qpack_q6k_ql(i);
        } else if (i < 48) { /* qh's */
            *at = 128 + 4 * (size_t)(i - 32);
            *base = qpack_q6k_qh(i - 32);
        } else if (i < 52) { /* the scales' */
            *at = 192 + 4 * (size_t)(i - 48);
            *base = 64 * (size_t)(i - 48);
        } else { /* d (piece: where) */
            *at = 208;
            *base = 0;
            *width = 2;
        }
    } else if (t == DTYPE_Q5_K && i >= 5) { /* Q4_K's d, dmin and scales, then */
        if (i < 13) {                       /* qh's words */
            *at = 16 + 4 * (size_t)(i - 5);
            *base = qpack_q5k_qh(i - 5);
        } else { /* the quants' */
            *at = 48 + 4 * (size_t)(i - 13);
            *base = qpack_q5k_qs(i - 13);
        }
    } else if (i < 2) { /* Q4_K's (and Q5_K's) d, dmin */
        *at = 2 * (size_t)i;
        *base = 32 * (size_t)i;
        *width = 2;
    } else if (i < 5) { /* the scales' words */
        *at = 4 + 4 * (size_t)(i - 2);
        *base = 64 + 64 * (size_t)(i - 2);
    } else { /* the quants' words */
        *at = 16 + 4 * (size_t)(i - 5);
        *base = 256 + 64 * (size_t)(i - 5);
    }
}

/* where packed block b of a group's nb starts */
static size_t block_base(enum dtype t, int b, int nb)
{
    return t == DTYPE_Q6_K ? qpack_q6k_blk(b, nb) : (size_t)b * QPACK_ROWS * quant_block_bytes(t);
}

/* Piece i of block b (of nb): bytes [at, at + width) of a row's block go
 * to the group's offset base + width r for row r */
static void piece(enum dtype t, int i, int b, int nb, size_t *at, size_t *base, size_t *width)
{
    piece_in(t, i, at, base, width);
    if (t == DTYPE_Q6_K && i == 52)
        *base = qpack_q6k_d(b, nb);
    else
        *base += block_base(t, b, nb);
}

/* Group at packed to or from its rows [r0, r1) of 16 at rows, row_bytes
 * apart (block b of row r at rows + (r - r0) row_bytes + b x the block's
 * bytes) */
static void group_of(enum dtype t, char *packed, char *rows, size_t row_bytes, int cols, int r0,
                     int r1, bool unpack)
{
    const size_t bb = quant_block_bytes(t);
    const int nb = cols / QUANT_QKK;
    for (int b = 0; b < nb; b++)
        for (int i = 0; i < n_pieces(t); i++) {
            size_t at, base, width;
            piece(t, i, b, nb, &at, &base, &width);
            for (int r = r0; r < r1; r++) {
                char *p = packed + base + width * (size_t)r,
                     *q = rows + (size_t)(r - r0) * row_bytes + (size_t)b * bb + at;
                if (unpack)
                    memcpy(q, p, width);
                else
                    memcpy(p, q, width);
            }
        }
}

void qpack_matrix(enum dtype t, void *data, int rows, int cols, void *tmp)
{
    if (!qpack_takes(t))
        return;
    const size_t row_bytes = dtype_row_bytes(t, (size_t)cols);
    for (int g = 0; g < rows / QPACK_ROWS; g++) {
        char *at = (char *)data + (size_t)g * QPACK_ROWS * row_bytes;
        memcpy(tmp, at, QPACK_ROWS * row_bytes);
        group_of(t, at, tmp, row_bytes, cols, 0, QPACK_ROWS, false);
    }
}

void qpack_group_unpack(enum dtype t, const void *src, int cols, void *dst, size_t row_bytes)
{
    if (qpack_takes(t))
        group_of(t, (char *)src, dst, row_bytes, cols, 0, QPACK_ROWS, true);
}

void qpack_row_unpack(enum dtype t, const void *src, int cols, int r, void *dst)
{
    if (qpack_takes(t))
        group_of(t, (char *)src, dst, dtype_row_bytes(t, (size_t)cols), cols, r, r + 1, true);
}
