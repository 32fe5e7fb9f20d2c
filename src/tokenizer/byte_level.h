/* GPT-2's byte-level alphabet (byte_level.c), for the tokenizer and for
 * whoever writes a byte-level vocabulary (gen-model's minimal tokenizer):
 * every byte is shown as one printable code point, so that vocab files are
 * valid text. The bytes already printable and not space (0x21-0x7E,
 * 0xA1-0xAC, 0xAE-0xFF) stand for themselves; the other 68, in increasing
 * order, take U+0100, U+0101, ... (space is U+0120, newline U+010A). */
#ifndef SHARDSWAP_TOKENIZER_BYTE_LEVEL_H
#define SHARDSWAP_TOKENIZER_BYTE_LEVEL_H

#include <stdint.h>

/* The code point byte b is shown as (below U+0144: two UTF-8 bytes at most). */
uint32_t byte_level_cp(unsigned char b);
/* The byte code point cp stands for, or -1 when cp is outside the alphabet. */
int byte_level_byte(uint32_t cp);

#endif
