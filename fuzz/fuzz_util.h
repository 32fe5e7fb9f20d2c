/* Shared by the fuzz targets: a private scratch directory per process, and
 * writing the input into a file there (the parsers under test read files,
 * as they do in production). */
#ifndef SHARDSWAP_FUZZ_UTIL_H
#define SHARDSWAP_FUZZ_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A directory of this process's own, made once, under $TMPDIR or /tmp. */
static inline const char *fuzz_dir(void)
{
    static char dir[256];
    if (!dir[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(dir, sizeof(dir), "%s/shardswap_fuzz_XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
        if (!mkdtemp(dir))
            abort();
    }
    return dir;
}

/* Writes data[0..size) to fuzz_dir()/name; path receives the full path. */
static inline void fuzz_write(const char *name, const uint8_t *data, size_t size, char *path,
                              size_t cap)
{
    snprintf(path, cap, "%s/%s", fuzz_dir(), name);
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0)
        abort();
}

/* Splits data at the first occurrence of the separator line "\n@@@@\n":
 * returns the length of the first part and sets *rest / *rest_n to the
 * second (empty when absent). Lets one input carry two files. */
static inline size_t fuzz_split(const uint8_t *data, size_t size, const uint8_t **rest,
                                size_t *rest_n)
{
    static const char sep[] = "\n@@@@\n";
    const size_t k = sizeof(sep) - 1;
    for (size_t i = 0; i + k <= size; i++)
        if (memcmp(data + i, sep, k) == 0) {
            *rest = data + i + k;
            *rest_n = size - i - k;
            return i;
        }
    *rest = data + size;
    *rest_n = 0;
    return size;
}

#endif
