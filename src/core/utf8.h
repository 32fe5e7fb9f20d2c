/* UTF-8, one code point at a time: the strict rules (no overlong forms, no
 * surrogates, nothing above U+10FFFF) that Jansson and Hugging Face's
 * tokenizers apply, for the tokenizer and the server's request checks. */
#ifndef SHARDSWAP_CORE_UTF8_H
#define SHARDSWAP_CORE_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Decodes one UTF-8 code point from s (n > 0 bytes); returns its length, or 0
 * when the bytes are not valid UTF-8. */
size_t utf8_decode_one(const unsigned char *s, size_t n, uint32_t *cp);
/* Writes cp as UTF-8 to out (4 bytes room); returns the length. */
size_t utf8_encode_one(uint32_t cp, unsigned char *out);

/* Rust's char::is_whitespace (Unicode White_Space), which Hugging Face's
 * tokenizers use for stripping (Strip, lstrip/rstrip of added tokens). */
bool utf8_is_space(uint32_t cp);
/* The length of the white-space character at s[i..n), or 0. */
size_t utf8_space_at(const unsigned char *s, size_t i, size_t n);
/* The length of the white-space character that ends at s[lo..i), or 0 (also
 * when the bytes before i are not one valid character). */
size_t utf8_space_before(const unsigned char *s, size_t lo, size_t i);

#endif
