/* Stop strings over a text that grows as a completion is decoded: where the
 * first match starts, and how much of the text can be sent before the next
 * piece arrives (a tail that could be the start of a stop string is held
 * back). Pure functions; the server calls them on the runner thread inside
 * on_token. */
#ifndef SHARDSWAP_SERVER_STOPS_H
#define SHARDSWAP_SERVER_STOPS_H

#include <stddef.h>

/* text[0..len) grew from old bytes, and text[0..old) held no stop string
 * (it was scanned when it grew). Returns the offset of the earliest match of
 * any of stops[0..n) (non-empty strings), or -1. */
long stops_find(const char *text, size_t len, size_t old, char *const *stops, int n);

/* The bytes of text[0..len) that no later bytes can make part of a match:
 * len minus the longest tail that is a proper prefix of a stop string. When
 * text is valid UTF-8 the result is on a character boundary (a stop string
 * starts with a lead byte). */
size_t stops_safe(const char *text, size_t len, char *const *stops, int n);

#endif
