/* bytes_parse and bytes_format (bytes.h). */
#include "core/bytes.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "core/error.h"

#define QUOTE_MAX 64 /* bytes of the text quoted in a message */

int bytes_parse(const char *s, uint64_t *out)
{
    static const struct {
        const char *suffix;
        uint64_t mult;
    } units[] = {
        {"", 1},
        {"B", 1},
        {"K", 1ull << 10},
        {"M", 1ull << 20},
        {"G", 1ull << 30},
        {"T", 1ull << 40},
        {"KiB", 1ull << 10},
        {"MiB", 1ull << 20},
        {"GiB", 1ull << 30},
        {"TiB", 1ull << 40},
        {"KB", 1000ull},
        {"MB", 1000000ull},
        {"GB", 1000000000ull},
        {"TB", 1000000000000ull},
    };
    const char *p = s;
    uint64_t whole = 0, frac = 0, frac_scale = 1;
    if (!isdigit((unsigned char)*p))
        goto bad;
    for (; isdigit((unsigned char)*p); p++)
        if (__builtin_mul_overflow(whole, 10, &whole) ||
            __builtin_add_overflow(whole, (uint64_t)(*p - '0'), &whole))
            goto overflow;
    bool has_frac = *p == '.';
    if (has_frac) {
        p++;
        if (!isdigit((unsigned char)*p))
            goto bad;
        for (; isdigit((unsigned char)*p); p++) {
            if (frac_scale >= 1000000000ull) /* nine digits are a byte below a TB */
                goto bad;
            frac = frac * 10 + (uint64_t)(*p - '0');
            frac_scale *= 10;
        }
    }
    if (*p == ' ' && p[1]) /* "2 GiB"; not "5 " */
        p++;
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (strcasecmp(p, units[i].suffix) != 0)
            continue;
        if (has_frac && units[i].mult == 1)
            goto bad; /* a count of bytes is whole */
        uint64_t v;
        if (__builtin_mul_overflow(whole, units[i].mult, &v))
            goto overflow;
        /* the fraction, rounded down to whole bytes: frac < 1e9, mult < 2^41 */
        unsigned __int128 f = (unsigned __int128)frac * units[i].mult / frac_scale;
        if (__builtin_add_overflow(v, (uint64_t)f, &v))
            goto overflow;
        *out = v;
        return 0;
    }
bad:
    return err_set(ERR_INVALID,
                   "'%.*s': expected a byte count such as 1048576, 512KiB, 1MiB or 1.5GB "
                   "(K/M/G/T, KiB/MiB/GiB/TiB: 1024s; KB/MB/GB/TB: 1000s)",
                   QUOTE_MAX, s);
overflow:
    return err_set(ERR_INVALID, "'%.*s': byte count too large (at most %llu)", QUOTE_MAX, s,
                   (unsigned long long)UINT64_MAX);
}

/* ---- formatting ---- */

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
