/* Stop strings over a growing text (stops.h). */
#include "server/stops.h"

#include <string.h>

long stops_find(const char *text, size_t len, size_t old, char *const *stops, int n)
{
    size_t longest = 0;
    for (int i = 0; i < n; i++)
        longest = strlen(stops[i]) > longest ? strlen(stops[i]) : longest;
    if (longest == 0 || len == 0) /* no text yet (it may be NULL): nothing to match */
        return -1;
    /* a new match ends after old, so it starts at most longest - 1 before */
    size_t from = old >= longest ? old - longest + 1 : 0;
    const char *best = NULL;
    for (int i = 0; i < n; i++) {
        const char *hit = memmem(text + from, len - from, stops[i], strlen(stops[i]));
        if (hit && (!best || hit < best))
            best = hit;
    }
    return best ? (long)(best - text) : -1;
}

size_t stops_safe(const char *text, size_t len, char *const *stops, int n)
{
    size_t longest = 0;
    for (int i = 0; i < n; i++)
        longest = strlen(stops[i]) > longest ? strlen(stops[i]) : longest;
    size_t k = longest > 0 ? longest - 1 : 0;
    for (k = k < len ? k : len; k > 0; k--)
        for (int i = 0; i < n; i++)
            if (strlen(stops[i]) > k && memcmp(text + len - k, stops[i], k) == 0)
                return len - k;
    return len;
}
