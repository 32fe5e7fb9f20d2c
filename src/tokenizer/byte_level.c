/* GPT-2's byte-level alphabet and the small UTF-8 helpers the tokenizer needs.
 *
 * The alphabet shows each byte as one printable code point: the bytes that
 * are already printable and not space (0x21-0x7E, 0xA1-0xAC, 0xAE-0xFF) stand
 * for themselves; the other 68 bytes (controls, space, 0x7F-0xA0, 0xAD), in
 * increasing order, take U+0100, U+0101, ... So space is U+0120 'Ġ' and
 * newline is U+010A 'Ċ'.
 */
#include "tokenizer/bpe_impl.h"

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

size_t utf8_decode_one(const unsigned char *s, size_t n, uint32_t *cp)
{
    unsigned char b = s[0];
    if (b < 0x80) {
        *cp = b;
        return 1;
    }
    size_t len;
    uint32_t c, min;
    if (b >= 0xC2 && b <= 0xDF) {
        len = 2, c = b & 0x1F, min = 0x80;
    } else if (b >= 0xE0 && b <= 0xEF) {
        len = 3, c = b & 0x0F, min = 0x800;
    } else if (b >= 0xF0 && b <= 0xF4) {
        len = 4, c = b & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        c = (c << 6) | (s[i] & 0x3F);
    }
    if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
        return 0;
    *cp = c;
    return len;
}

size_t utf8_encode_one(uint32_t cp, unsigned char *out)
{
    if (cp < 0x80) {
        out[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (unsigned char)(0xC0 | (cp >> 6));
        out[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (unsigned char)(0xE0 | (cp >> 12));
        out[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (unsigned char)(0xF0 | (cp >> 18));
    out[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}
