/* core/utf8's white space: Rust's char::is_whitespace exactly (every code
 * point below 0x3001 against the list; U+180E and U+200B are not), and the
 * character at or before a position, with invalid bytes around it never
 * taken for white space. */
#include <string.h>

#include "core/utf8.h"
#include "test.h"

TEST(is_space)
{
    static const uint32_t ws[] = {0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680,
                                  0x2000, 0x2001, 0x2002, 0x2003, 0x2004, 0x2005, 0x2006,
                                  0x2007, 0x2008, 0x2009, 0x200A, 0x2028, 0x2029, 0x202F,
                                  0x205F, 0x3000};
    int wrong = 0;
    for (uint32_t cp = 0; cp <= 0x3001; cp++) {
        bool want = false;
        for (size_t k = 0; k < sizeof ws / sizeof ws[0]; k++)
            want |= ws[k] == cp;
        wrong += utf8_is_space(cp) != want;
    }
    CHECK_MSG(wrong == 0, "%d code points classified wrongly", wrong);
    CHECK(!utf8_is_space(0x180E) && !utf8_is_space(0x200B) && !utf8_is_space(0xFEFF));
}

TEST(space_at_and_before)
{
    /* "a", U+3000 (3 bytes), " ", U+00E9 (not space), U+2028 */
    const unsigned char s[] = "a\xE3\x80\x80 \xC3\xA9\xE2\x80\xA8";
    size_t n = sizeof s - 1;
    CHECK(utf8_space_at(s, 0, n) == 0);
    CHECK(utf8_space_at(s, 1, n) == 3);
    CHECK(utf8_space_at(s, 4, n) == 1);
    CHECK(utf8_space_at(s, 5, n) == 0);
    CHECK(utf8_space_at(s, 7, n) == 3);
    CHECK(utf8_space_before(s, 0, n) == 3);  /* U+2028 ends the text */
    CHECK(utf8_space_before(s, 0, 7) == 0);  /* U+00E9 */
    CHECK(utf8_space_before(s, 0, 5) == 1);  /* the space */
    CHECK(utf8_space_before(s, 0, 4) == 3);  /* U+3000 */
    CHECK(utf8_space_before(s, 2, 4) == 0);  /* only part of U+3000 is in range */
    CHECK(utf8_space_before(s, 0, 0) == 0);
    /* invalid bytes: a lone continuation, a truncated lead, a space after them */
    const unsigned char bad[] = "\x80\xE3\x80 ";
    CHECK(utf8_space_before(bad, 0, 1) == 0);
    CHECK(utf8_space_before(bad, 0, 3) == 0);
    CHECK(utf8_space_before(bad, 0, 4) == 1);
    CHECK(utf8_space_at(bad, 1, 3) == 0);
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, NULL);
}
