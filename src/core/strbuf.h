/* A growable byte string: appended to at its end, always NUL-terminated
 * once it holds anything, so p can be read as a C string too (bytes that
 * are NULs included, as len says). A zeroed struct strbuf is empty and
 * valid (p NULL, len 0); the buffer owns p until strbuf_free, or until the
 * caller takes it (then it zeroes the struct: b->p = NULL, len = cap = 0).
 * No lock: whoever owns the buffer guards it.
 *
 * Out of memory is ERR_NOMEM with no message set (the caller knows what it
 * was building and says so), the buffer as it was. */
#ifndef SHARDSWAP_CORE_STRBUF_H
#define SHARDSWAP_CORE_STRBUF_H

#include <stddef.h>

struct strbuf {
    char *p;    /* (cap) malloc'd; NULL until the first growth */
    size_t len; /* bytes in p, not counting the NUL after them */
    size_t cap;
};

/* Room for extra more bytes and the NUL after them, without changing the
 * contents; capacity grows by doubling from 256 bytes. */
int strbuf_reserve(struct strbuf *b, size_t extra);

/* Appends n bytes of p (which may hold NULs; n 0 still allocates, so p is
 * then "" rather than NULL). */
int strbuf_append(struct strbuf *b, const void *p, size_t n);

/* Appends printf-formatted text (ERR_INVALID for a format vsnprintf
 * refuses). */
int strbuf_appendf(struct strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Cuts the contents to their first len bytes (len <= b->len). */
void strbuf_truncate(struct strbuf *b, size_t len);

/* Frees p and zeroes b; b may be NULL, or zeroed. */
void strbuf_free(struct strbuf *b);

#endif
