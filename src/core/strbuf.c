#include "core/strbuf.h"

#include <assert.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

int strbuf_reserve(struct strbuf *b, size_t extra)
{
    if (extra > SIZE_MAX - 1 - b->len)
        return ERR_NOMEM;
    size_t need = b->len + extra + 1;
    if (need <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    char *p = realloc(b->p, cap);
    if (!p)
        return ERR_NOMEM;
    if (!b->p)
        p[0] = '\0';
    b->p = p;
    b->cap = cap;
    return 0;
}

int strbuf_append(struct strbuf *b, const void *p, size_t n)
{
    int rc = strbuf_reserve(b, n);
    if (rc < 0)
        return rc;
    if (n)
        memcpy(b->p + b->len, p, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}

int strbuf_appendf(struct strbuf *b, const char *fmt, ...)
{
    /* first into what is free (at least one byte, the NUL's), then, when it
     * did not fit, again into exactly enough */
    int rc = strbuf_reserve(b, 0);
    if (rc < 0)
        return rc;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->p[b->len] = '\0';
        return ERR_INVALID;
    }
    if ((size_t)n >= b->cap - b->len) {
        if ((rc = strbuf_reserve(b, (size_t)n)) < 0) {
            b->p[b->len] = '\0';
            return rc;
        }
        va_start(ap, fmt);
        vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
    }
    b->len += (size_t)n;
    return 0;
}

void strbuf_truncate(struct strbuf *b, size_t len)
{
    assert(len <= b->len);
    b->len = len;
    if (b->p)
        b->p[len] = '\0';
}

void strbuf_free(struct strbuf *b)
{
    if (!b)
        return;
    free(b->p);
    *b = (struct strbuf){0};
}
