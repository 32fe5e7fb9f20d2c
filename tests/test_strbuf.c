/* core/strbuf.h: growth across the initial capacity and by doubling, the
 * NUL kept after the contents, bytes that are NULs, printf formatting that
 * fits, that does not fit the free room, and that is empty, truncation, and
 * the destructor's NULL and zeroed cases. */
#include <stdint.h>

#include "core/error.h"
#include "core/strbuf.h"
#include "test.h"

TEST(empty)
{
    struct strbuf b = {0};
    CHECK(b.p == NULL && b.len == 0);
    CHECK(strbuf_append(&b, "", 0) == 0); /* allocates: p is "" now */
    CHECK(b.p && b.p[0] == '\0' && b.len == 0 && b.cap == 256);
    strbuf_free(&b);
    CHECK(b.p == NULL && b.len == 0 && b.cap == 0);
    strbuf_free(&b); /* zeroed: nothing */
    strbuf_free(NULL);
}

TEST(growth)
{
    struct strbuf b = {0};
    char ref[5000];
    for (int i = 0; i < 5000; i++) {
        char c = (char)('a' + i % 26);
        ref[i] = c;
        CHECK(strbuf_append(&b, &c, 1) == 0);
        if (b.len != (size_t)i + 1 || b.p[b.len] != '\0' || b.cap < b.len + 1)
            CHECK_MSG(false, "after %d bytes: len %zu cap %zu", i + 1, b.len, b.cap);
    }
    CHECK(memcmp(b.p, ref, 5000) == 0);
    CHECK(b.cap == 8192); /* 256 doubled five times */
    /* one append larger than a doubling */
    struct strbuf c = {0};
    CHECK(strbuf_append(&c, ref, 255) == 0 && c.cap == 256); /* 255 and the NUL fit */
    CHECK(strbuf_append(&c, ref, 1) == 0 && c.cap == 512);
    CHECK(strbuf_append(&c, ref, 5000) == 0 && c.cap == 8192 && c.len == 5256);
    CHECK(memcmp(c.p + 256, ref, 5000) == 0 && c.p[5256] == '\0');
    strbuf_free(&b);
    strbuf_free(&c);
}

TEST(reserve)
{
    struct strbuf b = {0};
    CHECK(strbuf_reserve(&b, 1000) == 0 && b.cap == 1024 && b.len == 0 && b.p[0] == '\0');
    char *p = b.p;
    CHECK(strbuf_append(&b, "x", 1) == 0 && b.p == p);      /* no move within what was reserved */
    CHECK(strbuf_reserve(&b, SIZE_MAX) == ERR_NOMEM);       /* len + extra + 1 overflows */
    CHECK(b.p == p && b.len == 1 && strcmp(b.p, "x") == 0); /* as it was */
    strbuf_free(&b);
}

TEST(nul_bytes)
{
    struct strbuf b = {0};
    CHECK(strbuf_append(&b, "a\0b", 3) == 0);
    CHECK(b.len == 3 && memcmp(b.p, "a\0b", 4) == 0);
    strbuf_free(&b);
}

TEST(appendf)
{
    struct strbuf b = {0};
    CHECK(strbuf_appendf(&b, "%d-%s", 42, "x") == 0);
    CHECK(b.len == 4 && strcmp(b.p, "42-x") == 0);
    CHECK(strbuf_appendf(&b, "%s", "") == 0 && b.len == 4); /* empty */
    /* longer than the room left: formatted again into enough */
    char big[1000];
    memset(big, 'z', sizeof(big) - 1);
    big[999] = '\0';
    CHECK(strbuf_appendf(&b, "[%s]", big) == 0);
    CHECK(b.len == 4 + 1001 && b.p[4] == '[' && b.p[1004] == ']' && b.p[1005] == '\0');
    CHECK(b.cap == 1024); /* 4 + 1001 + 1 bytes: 256 doubled twice */
    /* exactly filling the room: 256 - 1 bytes into a fresh buffer */
    struct strbuf c = {0};
    CHECK(strbuf_appendf(&c, "%.*s", 255, big) == 0 && c.len == 255 && c.cap == 256);
    CHECK(strbuf_appendf(&c, "%c", 'q') == 0 && c.len == 256 && c.p[255] == 'q' && c.p[256] == 0);
    strbuf_free(&b);
    strbuf_free(&c);
}

TEST(truncate)
{
    struct strbuf b = {0};
    strbuf_truncate(&b, 0); /* empty, never allocated */
    CHECK(b.p == NULL);
    CHECK(strbuf_append(&b, "hello world", 11) == 0);
    strbuf_truncate(&b, 5);
    CHECK(b.len == 5 && strcmp(b.p, "hello") == 0);
    CHECK(strbuf_append(&b, "!", 1) == 0 && strcmp(b.p, "hello!") == 0);
    strbuf_truncate(&b, 0);
    CHECK(b.len == 0 && b.p[0] == '\0');
    strbuf_free(&b);
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, NULL);
}
