/* core/wire.h: fields as little-endian bytes, read back with bounds checks. */
#include "core/wire.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

static void put(struct wire_out *w, const void *p, size_t n)
{
    if (n == 0)
        return;
    if (w->err == 0 && strbuf_append(&w->b, p, n) < 0)
        w->err = ERR_NOMEM;
}

static void put_le(struct wire_out *w, uint64_t v, int bytes)
{
    uint8_t b[8];
    for (int i = 0; i < bytes; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    put(w, b, (size_t)bytes);
}

void wire_put_u8(struct wire_out *w, uint8_t v)
{
    put_le(w, v, 1);
}

void wire_put_u32(struct wire_out *w, uint32_t v)
{
    put_le(w, v, 4);
}

void wire_put_u64(struct wire_out *w, uint64_t v)
{
    put_le(w, v, 8);
}

void wire_put_i32(struct wire_out *w, int32_t v)
{
    put_le(w, (uint32_t)v, 4);
}

void wire_put_f64(struct wire_out *w, double v)
{
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    put_le(w, u, 8);
}

void wire_put_str(struct wire_out *w, const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n > UINT32_MAX) {
        w->err = w->err ? w->err : ERR_NOMEM;
        return;
    }
    wire_put_u32(w, (uint32_t)n);
    put(w, s, n);
}

void wire_put_u8s(struct wire_out *w, const uint8_t *v, uint32_t n)
{
    wire_put_u32(w, n);
    put(w, v, n);
}

void wire_put_i32s(struct wire_out *w, const int32_t *v, uint32_t n)
{
    wire_put_u32(w, n);
    for (uint32_t i = 0; i < n; i++)
        wire_put_i32(w, v[i]);
}

void wire_put_f32s(struct wire_out *w, const float *v, uint32_t n)
{
    wire_put_u32(w, n);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], sizeof u);
        put_le(w, u, 4);
    }
}

int wire_out_error(const struct wire_out *w, const char *what)
{
    if (w->err)
        return err_set(w->err, "%s: out of memory for the message", what);
    return 0;
}

void wire_in_init(struct wire_in *r, const void *p, size_t len)
{
    *r = (struct wire_in){.p = p, .len = p ? len : 0};
}

/* The next n bytes, or NULL (and r bad) when fewer are left. */
static const uint8_t *take(struct wire_in *r, size_t n, const char *field)
{
    if (r->bad)
        return NULL;
    if (n > r->len - r->pos) {
        r->bad = field;
        return NULL;
    }
    const uint8_t *p = r->p + r->pos;
    r->pos += n;
    return p;
}

static uint64_t get_le(struct wire_in *r, int bytes, const char *field)
{
    const uint8_t *p = take(r, (size_t)bytes, field);
    uint64_t v = 0;
    for (int i = 0; p && i < bytes; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

uint8_t wire_get_u8(struct wire_in *r, const char *field)
{
    return (uint8_t)get_le(r, 1, field);
}

uint32_t wire_get_u32(struct wire_in *r, const char *field)
{
    return (uint32_t)get_le(r, 4, field);
}

uint64_t wire_get_u64(struct wire_in *r, const char *field)
{
    return get_le(r, 8, field);
}

int32_t wire_get_i32(struct wire_in *r, const char *field)
{
    return (int32_t)(uint32_t)get_le(r, 4, field);
}

double wire_get_f64(struct wire_in *r, const char *field)
{
    uint64_t u = get_le(r, 8, field);
    double v;
    memcpy(&v, &u, sizeof v);
    return v;
}

/* A count at most max; bad (field) above it or past the end. */
static uint32_t get_count(struct wire_in *r, uint32_t max, size_t elem, const char *field)
{
    uint32_t n = wire_get_u32(r, field);
    if (!r->bad && (n > max || (size_t)n > (r->len - r->pos) / elem))
        r->bad = field;
    return r->bad ? 0 : n;
}

char *wire_get_str(struct wire_in *r, size_t max, const char *field)
{
    uint32_t n = get_count(r, max > UINT32_MAX ? UINT32_MAX : (uint32_t)max, 1, field);
    const uint8_t *p = take(r, n, field);
    if (!p)
        return NULL;
    if (memchr(p, 0, n)) {
        r->bad = field;
        return NULL;
    }
    char *s = malloc((size_t)n + 1);
    if (!s) {
        r->bad = field;
        return NULL;
    }
    memcpy(s, p, n);
    s[n] = '\0';
    return s;
}

/* Room for n elements of elem bytes each, after their count; NULL when bad
 * or empty. */
static void *get_array(struct wire_in *r, uint32_t max, uint32_t *n, size_t elem, const char *field)
{
    *n = get_count(r, max, elem, field);
    if (r->bad || *n == 0)
        return NULL;
    void *out = malloc((size_t)*n * elem);
    if (!out) {
        r->bad = field;
        *n = 0;
        return NULL;
    }
    return out;
}

uint8_t *wire_get_u8s(struct wire_in *r, uint32_t max, uint32_t *n, const char *field)
{
    uint8_t *v = get_array(r, max, n, 1, field);
    const uint8_t *p = v ? take(r, *n, field) : NULL;
    if (v && p)
        memcpy(v, p, *n);
    return v;
}

int32_t *wire_get_i32s(struct wire_in *r, uint32_t max, uint32_t *n, const char *field)
{
    int32_t *v = get_array(r, max, n, 4, field);
    for (uint32_t i = 0; v && i < *n; i++)
        v[i] = wire_get_i32(r, field);
    return v;
}

float *wire_get_f32s(struct wire_in *r, uint32_t max, uint32_t *n, const char *field)
{
    float *v = get_array(r, max, n, 4, field);
    for (uint32_t i = 0; v && i < *n; i++) {
        uint32_t u = (uint32_t)get_le(r, 4, field);
        memcpy(&v[i], &u, sizeof u);
    }
    return v;
}

int wire_in_end(const struct wire_in *r, const char *what)
{
    if (r->bad)
        return err_set(ERR_INVALID, "%s: field %s is truncated or out of range", what, r->bad);
    if (r->pos != r->len)
        return err_set(ERR_INVALID, "%s: %zu bytes left over", what, r->len - r->pos);
    return 0;
}
