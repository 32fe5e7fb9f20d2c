/* GPT-2's byte-level alphabet.
 *
 * The alphabet shows each byte as one printable code point: the bytes that
 * are already printable and not space (0x21-0x7E, 0xA1-0xAC, 0xAE-0xFF) stand
 * for themselves; the other 68 bytes (controls, space, 0x7F-0xA0, 0xAD), in
 * increasing order, take U+0100, U+0101, ... So space is U+0120 'Ġ' and
 * newline is U+010A 'Ċ'.
 */
#include "tokenizer/byte_level.h"

#include <stdbool.h>

static bool byte_level_is_self(unsigned b)
{
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
}

/* The 68 remapped bytes are 0x00-0x20 (ranks 0-32), 0x7F-0xA0 (ranks 33-66)
 * and 0xAD (rank 67); byte of rank r shows as U+0100 + r. */
uint32_t byte_level_cp(unsigned char b)
{
    if (byte_level_is_self(b))
        return b;
    if (b <= 0x20)
        return 0x100 + b;
    if (b <= 0xA0)
        return 0x100 + 33 + (b - 0x7F);
    return 0x100 + 67; /* 0xAD */
}

int byte_level_byte(uint32_t cp)
{
    if (cp < 0x100)
        return byte_level_is_self(cp) ? (int)cp : -1;
    uint32_t rank = cp - 0x100;
    if (rank < 33)
        return (int)rank;
    if (rank < 67)
        return (int)(0x7F + rank - 33);
    return rank == 67 ? 0xAD : -1;
}
