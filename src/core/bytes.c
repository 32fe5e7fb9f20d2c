#include "core/bytes.h"

#include <stdio.h>

struct unit {
    uint64_t size;
    const char *name;
    int digits;
};

/* largest first */
static const struct unit binary_units[] = {
    {1ull << 30, "GiB", 2},
    {1ull << 20, "MiB", 1},
    {1ull << 10, "KiB", 1},
};

static const struct unit decimal_units[] = {
    {1000000000ull, "GB", 2},
    {1000000ull, "MB", 1},
    {1000ull, "kB", 0},
};

const char *bytes_format(char *buf, size_t cap, uint64_t n, enum bytes_units units)
{
    const struct unit *u = units == BYTES_DECIMAL ? decimal_units : binary_units;
    for (int i = 0; i < 3; i++)
        if (n >= u[i].size) {
            snprintf(buf, cap, "%.*f %s", u[i].digits, (double)n / (double)u[i].size, u[i].name);
            return buf;
        }
    snprintf(buf, cap, "%llu B", (unsigned long long)n);
    return buf;
}
