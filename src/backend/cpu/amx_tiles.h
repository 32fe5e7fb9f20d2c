/* AMX's tile configuration (LDTILECFG's 64-byte operand, palette 1) for
 * the files compiled for AMX-TILE (gemv_amx.c, matmul_amx.c, qdot_amx.c):
 * tile t colsb[t] bytes wide and rows[t] rows (NULL: every tile 16).
 * Internal to backend/cpu/. */
#ifndef SHARDSWAP_BACKEND_CPU_AMX_TILES_H
#define SHARDSWAP_BACKEND_CPU_AMX_TILES_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

static inline void amx_tiles_configure(const uint16_t *colsb, const uint8_t *rows, int n_tiles)
{
    struct {
        uint8_t palette;
        uint8_t start_row;
        uint8_t reserved[14];
        uint16_t colsb[16];
        uint8_t rows[16];
    } c;
    memset(&c, 0, sizeof(c));
    c.palette = 1;
    for (int t = 0; t < n_tiles; t++) {
        c.rows[t] = rows ? rows[t] : 16;
        c.colsb[t] = colsb[t];
    }
    _tile_loadconfig(&c);
}

#endif
