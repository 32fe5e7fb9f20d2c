/* core/wire: every field type round-trips (extremes, negative numbers, NaN
 * and infinity bits, empty and NUL-free strings, arrays), the bytes are
 * little-endian whatever the machine, and a reader refuses every truncation
 * of a message, counts above the caller's limit, strings with a NUL inside
 * and bytes left over, naming the field. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/error.h"
#include "core/wire.h"
#include "test.h"

static void write_sample(struct wire_out *w)
{
    static const int32_t ids[] = {0, -1, INT32_MAX, INT32_MIN, 42};
    static const uint8_t mask[] = {1, 0, 1};
    float f[] = {1.5f, -0.0f, INFINITY, NAN, 1e-40f};
    wire_put_u8(w, 0xab);
    wire_put_u32(w, 0xdeadbeefu);
    wire_put_u64(w, UINT64_MAX - 5);
    wire_put_i32(w, -123456);
    wire_put_f64(w, -2.25);
    wire_put_str(w, "model/a b");
    wire_put_str(w, NULL);
    wire_put_i32s(w, ids, 5);
    wire_put_u8s(w, mask, 3);
    wire_put_f32s(w, f, 5);
    wire_put_i32s(w, NULL, 0);
}

/* Reads the sample back; 0 or wire_in_end's error. */
static int read_sample(const void *p, size_t len, bool check)
{
    struct wire_in r;
    wire_in_init(&r, p, len);
    uint8_t a = wire_get_u8(&r, "a");
    uint32_t b = wire_get_u32(&r, "b");
    uint64_t c = wire_get_u64(&r, "c");
    int32_t d = wire_get_i32(&r, "d");
    double e = wire_get_f64(&r, "e");
    char *s = wire_get_str(&r, 64, "name");
    char *empty = wire_get_str(&r, 64, "empty");
    uint32_t n_ids = 0, n_mask = 0, n_f = 0, n_none = 7;
    int32_t *ids = wire_get_i32s(&r, 16, &n_ids, "ids");
    uint8_t *mask = wire_get_u8s(&r, 16, &n_mask, "mask");
    float *f = wire_get_f32s(&r, 16, &n_f, "f");
    int32_t *none = wire_get_i32s(&r, 16, &n_none, "none");
    int rc = wire_in_end(&r, "sample");
    if (check && rc == 0) {
        CHECK(a == 0xab && b == 0xdeadbeefu && c == UINT64_MAX - 5 && d == -123456 && e == -2.25);
        CHECK(s && strcmp(s, "model/a b") == 0 && empty && empty[0] == '\0');
        CHECK(n_ids == 5 && ids[1] == -1 && ids[2] == INT32_MAX && ids[3] == INT32_MIN);
        CHECK(n_mask == 3 && mask[0] == 1 && mask[1] == 0);
        CHECK(n_f == 5 && f[0] == 1.5f && signbit(f[1]) && isinf(f[2]) && isnan(f[3]) &&
              f[4] == 1e-40f);
        CHECK(n_none == 0 && none == NULL);
    }
    free(s);
    free(empty);
    free(ids);
    free(mask);
    free(f);
    free(none);
    return rc;
}

TEST(round_trip_and_truncations)
{
    struct wire_out w = {0};
    write_sample(&w);
    CHECK(wire_out_error(&w, "sample") == 0);
    CHECK(read_sample(w.b.p, w.b.len, true) == 0);
    int refused = 0;
    for (size_t cut = 0; cut < w.b.len; cut++)
        refused += read_sample(w.b.p, cut, false) == ERR_INVALID;
    CHECK_MSG(refused == (int)w.b.len, "%d of %zu truncations refused", refused, w.b.len);
    /* a byte left over */
    strbuf_append(&w.b, "x", 1);
    CHECK(read_sample(w.b.p, w.b.len, false) == ERR_INVALID);
    CHECK(strstr(err_msg(), "1 bytes left over") != NULL);
    strbuf_free(&w.b);
}

TEST(little_endian_bytes)
{
    struct wire_out w = {0};
    wire_put_u32(&w, 0x04030201u);
    wire_put_i32(&w, -2);
    CHECK(w.b.len == 8);
    const uint8_t want[8] = {1, 2, 3, 4, 0xfe, 0xff, 0xff, 0xff};
    CHECK(memcmp(w.b.p, want, 8) == 0);
    strbuf_free(&w.b);
}

TEST(limits_and_bad_strings)
{
    struct wire_out w = {0};
    int32_t ids[10] = {0};
    wire_put_i32s(&w, ids, 10);
    struct wire_in r;
    uint32_t n = 0;
    wire_in_init(&r, w.b.p, w.b.len);
    CHECK(wire_get_i32s(&r, 9, &n, "ids") == NULL && n == 0); /* above the limit */
    CHECK(wire_in_end(&r, "msg") == ERR_INVALID && strstr(err_msg(), "field ids"));
    strbuf_free(&w.b);

    /* a count that claims more than the bytes hold */
    wire_put_u32(&w, 1000000);
    wire_in_init(&r, w.b.p, w.b.len);
    CHECK(wire_get_f32s(&r, UINT32_MAX, &n, "x") == NULL);
    CHECK(wire_in_end(&r, "msg") == ERR_INVALID);
    strbuf_free(&w.b);

    /* a string with a NUL inside, and one over the limit */
    wire_put_u32(&w, 3);
    strbuf_append(&w.b, "a\0b", 3);
    wire_in_init(&r, w.b.p, w.b.len);
    CHECK(wire_get_str(&r, 64, "name") == NULL && wire_in_end(&r, "msg") == ERR_INVALID);
    wire_in_init(&r, w.b.p, w.b.len);
    CHECK(wire_get_str(&r, 2, "name") == NULL && wire_in_end(&r, "msg") == ERR_INVALID);
    strbuf_free(&w.b);

    /* after the first bad field, the rest read as zeros */
    wire_in_init(&r, NULL, 0);
    CHECK(wire_get_u64(&r, "first") == 0 && wire_get_u32(&r, "second") == 0);
    CHECK(wire_in_end(&r, "msg") == ERR_INVALID && strstr(err_msg(), "field first"));
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, NULL);
}
