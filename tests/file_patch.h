/* A copy of a file with a few bytes replaced, for tests that feed a reader a
 * file that differs from a good one in one field (a GGUF tensor's type, a
 * metadata string). Include after the system headers (memmem needs
 * _GNU_SOURCE); this includes test.h. */
#ifndef SHARDSWAP_TESTS_FILE_PATCH_H
#define SHARDSWAP_TESTS_FILE_PATCH_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fs.h"
#include "test.h"

/* Writes src to dst with the n bytes at `skip` past the first `find` in it
 * replaced by `with`; the bytes replaced go to old when it is not NULL.
 * False (a check failed) when src cannot be read or holds no `find`. */
static inline bool file_patch(const char *src, const char *dst, const char *find, size_t skip,
                              const void *with, size_t n, void *old)
{
    char *data = NULL;
    size_t len = 0;
    CHECK(fs_read_regular(src, 1 << 24, &data, &len) == 0);
    char *at = data ? memmem(data, len, find, strlen(find)) : NULL;
    CHECK(at != NULL);
    if (at) {
        if (old)
            memcpy(old, at + skip, n);
        memcpy(at + skip, with, n);
        FILE *f = fopen(dst, "wb");
        CHECK(f && fwrite(data, 1, len, f) == len && fclose(f) == 0);
    }
    free(data);
    return at != NULL;
}

#endif
