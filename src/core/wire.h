/* Binary messages between the processes of one job: a writer that appends
 * fixed-width little-endian fields to a strbuf, and a reader that takes them
 * back out of a byte range and never reads past it.
 *
 * Fields: u8, u32, u64, i32, f64; a string (u32 length, the bytes, no NUL);
 * arrays of u8, i32 and f32 (u32 count, the elements). Integers are written
 * byte by byte, so the format is the same on every machine.
 *
 * Errors are sticky, so a message is written or read as a flat list of
 * calls and checked once at the end: the writer keeps the first ERR_NOMEM
 * (wire_out_error); the reader, on a field that runs past the end or a
 * count above what the caller allows, returns zeros and NULLs from then on
 * and wire_in_end says which field was bad, and refuses bytes left over. */
#ifndef SHARDSWAP_CORE_WIRE_H
#define SHARDSWAP_CORE_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/strbuf.h"

struct wire_out {
    struct strbuf b; /* the message so far; the caller frees it (strbuf_free) */
    int err;         /* 0, or ERR_NOMEM from the first append that failed */
};

void wire_put_u8(struct wire_out *w, uint8_t v);
void wire_put_u32(struct wire_out *w, uint32_t v);
void wire_put_u64(struct wire_out *w, uint64_t v);
void wire_put_i32(struct wire_out *w, int32_t v);
void wire_put_f64(struct wire_out *w, double v);
void wire_put_str(struct wire_out *w, const char *s); /* NULL: the empty string */
void wire_put_u8s(struct wire_out *w, const uint8_t *v, uint32_t n);
void wire_put_i32s(struct wire_out *w, const int32_t *v, uint32_t n);
void wire_put_f32s(struct wire_out *w, const float *v, uint32_t n);
/* 0, or ERR_NOMEM (with a message naming what) when an append failed. */
int wire_out_error(const struct wire_out *w, const char *what);

struct wire_in {
    const uint8_t *p;
    size_t len, pos;
    const char *bad; /* NULL, or the field that could not be read */
};

void wire_in_init(struct wire_in *r, const void *p, size_t len);
uint8_t wire_get_u8(struct wire_in *r, const char *field);
uint32_t wire_get_u32(struct wire_in *r, const char *field);
uint64_t wire_get_u64(struct wire_in *r, const char *field);
int32_t wire_get_i32(struct wire_in *r, const char *field);
double wire_get_f64(struct wire_in *r, const char *field);
/* A malloc'd NUL-terminated copy (the caller frees it), at most max bytes;
 * NULL when bad (a string with a NUL inside is bad too). */
char *wire_get_str(struct wire_in *r, size_t max, const char *field);
/* Malloc'd copies of at most max elements (the caller frees them); *n is
 * the count. NULL when bad, or when n is 0. */
uint8_t *wire_get_u8s(struct wire_in *r, uint32_t max, uint32_t *n, const char *field);
int32_t *wire_get_i32s(struct wire_in *r, uint32_t max, uint32_t *n, const char *field);
float *wire_get_f32s(struct wire_in *r, uint32_t max, uint32_t *n, const char *field);
/* 0 when every field was read and nothing is left; else ERR_INVALID with a
 * message "what: field F is truncated or out of range" or "what: N bytes
 * left over". */
int wire_in_end(const struct wire_in *r, const char *what);

#endif
