/* GGUF reader: a hand-built file read back (metadata getters, arrays, tensors),
 * directories and split sets, and every rejection rule with its message:
 * truncation at every length, huge counts, bad alignment, overlapping tensors,
 * string lengths past the end, unknown types, and random corruption. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "format/gguf.h"
#include "test.h"

static char tmpdir[64];

struct buf {
    uint8_t *p;
    size_t n, cap;
};

static void put(struct buf *b, const void *src, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void put_int(struct buf *b, uint64_t v, int bytes)
{
    uint8_t x[8];
    for (int i = 0; i < bytes; i++)
        x[i] = (uint8_t)(v >> (8 * i));
    put(b, x, (size_t)bytes);
}

static void put_str(struct buf *b, const char *s)
{
    put_int(b, strlen(s), 8);
    put(b, s, strlen(s));
}

static void put_kv_u32(struct buf *b, const char *key, uint32_t v)
{
    put_str(b, key);
    put_int(b, GGUF_U32, 4);
    put_int(b, v, 4);
}

static void put_tensor(struct buf *b, const char *name, int nd, const uint64_t *ne, uint32_t type,
                       uint64_t off)
{
    put_str(b, name);
    put_int(b, (uint64_t)nd, 4);
    for (int i = 0; i < nd; i++)
        put_int(b, ne[i], 8);
    put_int(b, type, 4);
    put_int(b, off, 8);
}

static void pad_to(struct buf *b, size_t align)
{
    while (b->n % align)
        put_int(b, 0, 1);
}

static const char *tmp_path(const char *name)
{
    static char bufs[4][512];
    static int next;
    char *p = bufs[next++ % 4];
    snprintf(p, 512, "%s/%s", tmpdir, name);
    return p;
}

static void write_buf(const char *path, const struct buf *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(b->p, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
}

/* The valid file: 7 entries, tensors "a" F32 (2, 4) at 0 and "b" F16 (8) at 32. */
static void build_good(struct buf *b, uint32_t version)
{
    b->n = 0;
    put_int(b, 0x46554747u, 4);
    put_int(b, version, 4);
    put_int(b, 2, 8); /* tensors */
    put_int(b, 7, 8); /* entries */
    put_str(b, "general.architecture");
    put_int(b, GGUF_STR, 4);
    put_str(b, "llama");
    put_kv_u32(b, "llama.block_count", 2);
    put_kv_u32(b, "general.alignment", 32);
    put_str(b, "llama.rope.freq_base");
    put_int(b, GGUF_F32, 4);
    float theta = 10000.0f;
    uint32_t u;
    memcpy(&u, &theta, 4);
    put_int(b, u, 4);
    put_str(b, "tokenizer.ggml.tokens");
    put_int(b, GGUF_ARR, 4);
    put_int(b, GGUF_STR, 4);
    put_int(b, 3, 8);
    put_str(b, "a");
    put_str(b, "bc");
    put_str(b, "");
    put_str(b, "tokenizer.ggml.token_type");
    put_int(b, GGUF_ARR, 4);
    put_int(b, GGUF_I32, 4);
    put_int(b, 3, 8);
    put_int(b, 1, 4);
    put_int(b, (uint32_t)-3, 4);
    put_int(b, 6, 4);
    put_str(b, "tokenizer.ggml.add_bos_token");
    put_int(b, GGUF_BOOL, 4);
    put_int(b, 1, 1);
    uint64_t ne_a[2] = {4, 2}, ne_b[1] = {8};
    put_tensor(b, "a", 2, ne_a, GGML_TYPE_F32, 0);
    put_tensor(b, "b", 1, ne_b, GGML_TYPE_F16, 32);
    pad_to(b, 32);
    for (int i = 0; i < 48; i++)
        put_int(b, (uint64_t)i, 1);
}

/* Opens path expecting failure whose message has the path and each string. */
static void expect_fail_at(int line, const char *path, ...)
{
    struct gguf_file *g = (struct gguf_file *)1;
    int rc = gguf_open(path, &g);
    CHECK_MSG(rc < 0 && g == NULL, "line %d: gguf_open(%s) = %d, expected failure", line, path, rc);
    if (rc == 0) {
        gguf_close(g);
        return;
    }
    CHECK_MSG(strstr(err_msg(), path), "line %d: message lacks the path: %s", line, err_msg());
    CHECK_MSG(!strchr(err_msg(), '\n'), "line %d: message is not one line: %s", line, err_msg());
    va_list ap;
    va_start(ap, path);
    for (const char *s; (s = va_arg(ap, const char *));)
        CHECK_MSG(strstr(err_msg(), s), "line %d: message lacks \"%s\": %s", line, s, err_msg());
    va_end(ap);
}
#define EXPECT_FAIL(path, ...) expect_fail_at(__LINE__, path, __VA_ARGS__, NULL)

TEST(read_back)
{
    struct buf b = {0};
    for (uint32_t version = 2; version <= 3; version++) {
        build_good(&b, version);
        const char *p = tmp_path("good.gguf");
        write_buf(p, &b, b.n);
        struct gguf_file *g = NULL;
        int rc = gguf_open(p, &g);
        CHECK_MSG(rc == 0, "%s", err_msg());
        if (rc)
            continue;
        CHECK(gguf_version(g) == version && gguf_alignment(g) == 32 && gguf_kv_count(g) == 7);
        struct gguf_str s;
        CHECK(gguf_get_str(g, "general.architecture", &s) == 0 && s.n == 5 &&
              memcmp(s.p, "llama", 5) == 0);
        CHECK(gguf_get_str(g, "absent", &s) == 0 && s.p == NULL);
        int64_t v;
        CHECK(gguf_get_int(g, "llama.block_count", true, 0, 1, 10, &v) == 0 && v == 2);
        CHECK(gguf_get_int(g, "llama.block_count", true, 0, 3, 10, &v) < 0 &&
              strstr(err_msg(), "llama.block_count") && strstr(err_msg(), "3 to 10"));
        CHECK(gguf_get_int(g, "missing", true, 0, 0, 1, &v) == ERR_NOT_FOUND &&
              strstr(err_msg(), "'missing'"));
        CHECK(gguf_get_int(g, "missing", false, 7, 0, 10, &v) == 0 && v == 7);
        CHECK(gguf_get_int(g, "llama.rope.freq_base", true, 0, 0, 10, &v) < 0 &&
              strstr(err_msg(), "is a f32, expected an integer"));
        double d;
        CHECK(gguf_get_num(g, "llama.rope.freq_base", true, 0, 1, 1e9, &d) == 0 && d == 10000.0);
        CHECK(gguf_get_num(g, "llama.block_count", true, 0, 1, 1e9, &d) == 0 && d == 2.0);
        CHECK(gguf_get_num(g, "general.architecture", true, 0, 1, 1e9, &d) < 0 &&
              strstr(err_msg(), "is a string, expected a number"));
        bool flag = false;
        CHECK(gguf_get_bool(g, "tokenizer.ggml.add_bos_token", false, &flag) == 0 && flag);
        CHECK(gguf_get_bool(g, "llama.block_count", false, &flag) < 0);
        CHECK(gguf_get_str(g, "llama.block_count", &s) < 0);
        const struct gguf_kv *kv = gguf_find(g, "tokenizer.ggml.tokens");
        CHECK(kv && gguf_kv_type(kv) == GGUF_ARR && gguf_kv_arr_type(kv) == GGUF_STR &&
              gguf_kv_arr_len(kv) == 3);
        if (kv) {
            CHECK(gguf_arr_str(kv, 1).n == 2 && memcmp(gguf_arr_str(kv, 1).p, "bc", 2) == 0);
            CHECK(gguf_arr_str(kv, 2).n == 0);
        }
        kv = gguf_find(g, "tokenizer.ggml.token_type");
        CHECK(kv && gguf_kv_arr_len(kv) == 3 && gguf_arr_int(kv, 1) == -3 &&
              gguf_arr_num(kv, 2) == 6.0);
        CHECK(gguf_tensor_count(g) == 2);
        const struct gguf_tensor *a = gguf_tensor_find(g, "a"), *t = gguf_tensor_find(g, "b");
        CHECK(a && a->type == GGML_TYPE_F32 && a->ndim == 2 && a->ne[0] == 4 && a->ne[1] == 2 &&
              a->nbytes == 32 && a->nelem == 8);
        CHECK(t && t->type == GGML_TYPE_F16 && t->nbytes == 16);
        if (a && t) {
            CHECK(a->file_offset % 32 == 0 && ((const uint8_t *)a->data)[1] == 1);
            CHECK(((const uint8_t *)t->data)[0] == 32 && t->file_offset == a->file_offset + 32);
        }
        CHECK(!gguf_tensor_find(g, "c"));
        CHECK(gguf_file_count(g) == 1);
        gguf_close(g);
    }
    free(b.p);
}

TEST(type_table)
{
    const struct ggml_type_info *q = ggml_type_info(GGML_TYPE_Q4_K);
    CHECK(q && strcmp(q->name, "Q4_K") == 0 && q->block == 256 && q->block_bytes == 144);
    q = ggml_type_info(GGML_TYPE_Q8_0);
    CHECK(q && q->block == 32 && q->block_bytes == 34);
    q = ggml_type_info(GGML_TYPE_Q6_K);
    CHECK(q && q->block_bytes == 210);
    CHECK(ggml_type_info(4) == NULL && ggml_type_info(31) == NULL && ggml_type_info(1000) == NULL);
}

TEST(dir_and_split)
{
    char dir[600];
    snprintf(dir, sizeof(dir), "%s/one", tmpdir);
    mkdir(dir, 0755);
    struct buf b = {0};
    build_good(&b, 3);
    char p[700];
    snprintf(p, sizeof(p), "%s/model-f16.gguf", dir);
    write_buf(p, &b, b.n);
    struct gguf_file *g = NULL;
    CHECK_MSG(gguf_open(dir, &g) == 0 && strcmp(gguf_path(g), p) == 0, "%s", err_msg());
    gguf_close(g);
    CHECK(gguf_is_checkpoint(dir) && gguf_is_checkpoint(p));
    snprintf(p, sizeof(p), "%s/other.gguf", dir);
    write_buf(p, &b, b.n);
    EXPECT_FAIL(dir, "holds 2 GGUF models");

    /* a split set: the first part with the metadata and "a", the second with "c" */
    snprintf(dir, sizeof(dir), "%s/split", tmpdir);
    mkdir(dir, 0755);
    struct buf s = {0};
    put_int(&s, 0x46554747u, 4);
    put_int(&s, 3, 4);
    put_int(&s, 1, 8);
    put_int(&s, 2, 8);
    put_str(&s, "general.architecture");
    put_int(&s, GGUF_STR, 4);
    put_str(&s, "llama");
    put_str(&s, "split.count");
    put_int(&s, GGUF_U16, 4);
    put_int(&s, 2, 2);
    uint64_t ne[1] = {8};
    put_tensor(&s, "a", 1, ne, GGML_TYPE_F32, 0);
    pad_to(&s, 32);
    for (int i = 0; i < 32; i++)
        put_int(&s, 1, 1);
    char p1[700], p2[700];
    snprintf(p1, sizeof(p1), "%s/m-00001-of-00002.gguf", dir);
    snprintf(p2, sizeof(p2), "%s/m-00002-of-00002.gguf", dir);
    write_buf(p1, &s, s.n);
    EXPECT_FAIL(dir, "m-00002-of-00002.gguf", "cannot");
    s.n = 0;
    put_int(&s, 0x46554747u, 4);
    put_int(&s, 3, 4);
    put_int(&s, 1, 8);
    put_int(&s, 0, 8);
    put_tensor(&s, "c", 1, ne, GGML_TYPE_F32, 0);
    pad_to(&s, 32);
    for (int i = 0; i < 32; i++)
        put_int(&s, 2, 1);
    write_buf(p2, &s, s.n);
    g = NULL;
    CHECK_MSG(gguf_open(dir, &g) == 0, "%s", err_msg());
    if (g) {
        CHECK(gguf_file_count(g) == 2 && gguf_tensor_count(g) == 2);
        const struct gguf_tensor *c = gguf_tensor_find(g, "c");
        CHECK(c && strcmp(c->file, p2) == 0 && ((const uint8_t *)c->data)[0] == 2);
        gguf_close(g);
    }
    EXPECT_FAIL(p2, "part 2 of 2", "-00001-of-00002");
    /* the same tensor name in both parts */
    s.n = 0;
    put_int(&s, 0x46554747u, 4);
    put_int(&s, 3, 4);
    put_int(&s, 1, 8);
    put_int(&s, 0, 8);
    put_tensor(&s, "a", 1, ne, GGML_TYPE_F32, 0);
    pad_to(&s, 32);
    for (int i = 0; i < 32; i++)
        put_int(&s, 2, 1);
    write_buf(p2, &s, s.n);
    EXPECT_FAIL(dir, "tensor 'a' appears twice");
    free(s.p);
    free(b.p);
}

/* A copy of the good file with the bytes at `at` replaced by `len` bytes of v. */
static void patched(struct buf *out, const struct buf *good, size_t at, uint64_t v, int len)
{
    out->n = 0;
    put(out, good->p, good->n);
    for (int i = 0; i < len; i++)
        out->p[at + (size_t)i] = (uint8_t)(v >> (8 * i));
}

/* Offset of the first occurrence of the string s in b (its bytes, after its length). */
static size_t find_mem(const struct buf *b, const char *s, size_t n)
{
    for (size_t i = 0; i + n <= b->n; i++)
        if (memcmp(b->p + i, s, n) == 0)
            return i;
    fprintf(stderr, "find_mem: %s not found\n", s);
    exit(1);
}

static size_t find_bytes(const struct buf *b, const char *s)
{
    return find_mem(b, s, strlen(s));
}

TEST(hostile)
{
    struct buf good = {0}, b = {0};
    build_good(&good, 3);
    const char *p = tmp_path("bad.gguf");

    /* truncated at every length: an error naming the file, never a crash */
    for (size_t n = 0; n < good.n; n++) {
        write_buf(p, &good, n);
        struct gguf_file *g = NULL;
        int rc = gguf_open(p, &g);
        CHECK_MSG(rc < 0 && !g && strstr(err_msg(), p), "length %zu: rc %d: %s", n, rc, err_msg());
        gguf_close(g);
    }
    write_buf(p, &good, 20);
    EXPECT_FAIL(p, "too short");
    write_buf(p, &good, good.n - 1);
    EXPECT_FAIL(p, "tensor 'b'", "past the end");

    patched(&b, &good, 0, 0x46554746u, 4);
    write_buf(p, &b, b.n);
    EXPECT_FAIL(p, "not a GGUF file");
    patched(&b, &good, 4, 1, 4);
    write_buf(p, &b, b.n);
    EXPECT_FAIL(p, "version 1");
    patched(&b, &good, 4, 0x03000000u, 4);
    write_buf(p, &b, b.n);
    EXPECT_FAIL(p, "big-endian");
    patched(&b, &good, 8, 1ull << 62, 8); /* tensor count */
    write_buf(p, &b, b.n);
    EXPECT_FAIL(p, "tensors (at most");
    patched(&b, &good, 16, 60000, 8); /* entry count: more than the file holds */
    write_buf(p, &b, b.n);
    EXPECT_FAIL(p, "more than the file's");
    patched(&b, &good, 16, 1ull << 40, 8);
    write_buf(p, &b, b.n);
    EXPECT_FAIL(p, "metadata entries (at most");

    /* a key's length past the end */
    size_t key0 = 24;
    patched(&b, &good, key0, 1ull << 50, 8);
    write_buf(p, &b, b.n);
    EXPECT_FAIL(p, "metadata entry 0", "string length");
    patched(&b, &good, key0, 1000, 8);
    write_buf(p, &b, b.n);
    EXPECT_FAIL(p, "metadata entry 0", "past the end");
    /* the value string's length past the end */
    size_t arch = find_bytes(&good, "llama") - 8;
    patched(&b, &good, arch, good.n, 8);
    write_buf(p, &b, b.n);
    EXPECT_FAIL(p, "general.architecture", "past the end");
    /* an unknown value type */
    patched(&b, &good, arch - 4, 13, 4);
    write_buf(p, &b, b.n);
    EXPECT_FAIL(p, "general.architecture", "unknown value type 13");
    /* an array of strings whose count is past the end, and one element too long */
    size_t toks = find_bytes(&good, "tokenizer.ggml.tokens") + strlen("tokenizer.ggml.tokens");
    patched(&b, &good, toks + 8, 1ull << 61, 8);
    write_buf(p, &b, b.n);
    EXPECT_FAIL(p, "tokenizer.ggml.tokens", "strings runs past the end");
    patched(&b, &good, toks + 16, 1ull << 33, 8);
    write_buf(p, &b, b.n);
    EXPECT_FAIL(p, "tokenizer.ggml.tokens", "string length 8589934592 exceeds");
    patched(&b, &good, toks + 16, 400, 8);
    write_buf(p, &b, b.n);
    EXPECT_FAIL(p, "tokenizer.ggml.tokens", "past the end");
    /* a nested array */
    patched(&b, &good, toks + 4, GGUF_ARR, 4);
    write_buf(p, &b, b.n);
    EXPECT_FAIL(p, "nested arrays");
    /* a numeric array past the end */
    size_t tt =
        find_bytes(&good, "tokenizer.ggml.token_type") + strlen("tokenizer.ggml.token_type");
    patched(&b, &good, tt + 8, 1ull << 62, 8);
    write_buf(p, &b, b.n);
    EXPECT_FAIL(p, "tokenizer.ggml.token_type", "past the end");
    /* a bool that is neither 0 nor 1 */
    size_t bos = find_bytes(&good, "add_bos_token") + strlen("add_bos_token");
    patched(&b, &good, bos + 4, 2, 1);
    write_buf(p, &b, b.n);
    EXPECT_FAIL(p, "not 0 or 1");
    /* a duplicate key (of the same length) */
    patched(&b, &good, 0, 0, 0);
    memcpy(b.p + find_bytes(&good, "llama.rope.freq_base"), "general.architecture", 20);
    write_buf(p, &b, b.n);
    EXPECT_FAIL(p, "metadata key 'general.architecture' appears twice");
    /* a key holding a NUL */
    patched(&b, &good, find_bytes(&good, "llama.block_count") + 3, 0, 1);
    write_buf(p, &b, b.n);
    EXPECT_FAIL(p, "NUL byte");
    /* bad alignments */
    size_t al = find_bytes(&good, "general.alignment") + strlen("general.alignment");
    patched(&b, &good, al + 4, 3, 4);
    write_buf(p, &b, b.n);
    EXPECT_FAIL(p, "general.alignment must be a u32 power of two");
    patched(&b, &good, al + 4, 0, 4);
    write_buf(p, &b, b.n);
    EXPECT_FAIL(p, "general.alignment");
    patched(&b, &good, al, GGUF_I32, 4);
    write_buf(p, &b, b.n);
    EXPECT_FAIL(p, "general.alignment", "i32");
    /* tensor info of "b": name, n_dims, ne[0], type, offset */
    size_t tb = find_mem(&good, "\001\0\0\0\0\0\0\0b\001\0\0\0", 13) + 9;
    patched(&b, &good, tb + 16, 16, 8); /* offset 16: not aligned */
    write_buf(p, &b, b.n);
    EXPECT_FAIL(p, "tensor 'b'", "not a multiple of the alignment 32");
    patched(&b, &good, tb + 16, 0, 8); /* offset 0: overlaps "a" */
    write_buf(p, &b, b.n);
    EXPECT_FAIL(p, "overlaps tensor");
    patched(&b, &good, tb + 16, 1ull << 63, 8);
    write_buf(p, &b, b.n);
    EXPECT_FAIL(p, "tensor 'b'", "past the end");
    patched(&b, &good, tb + 12, 77, 4); /* unknown type */
    write_buf(p, &b, b.n);
    EXPECT_FAIL(p, "tensor 'b'", "unknown ggml type 77");
    patched(&b, &good, tb + 12, GGML_TYPE_Q8_0, 4); /* 8 is not a multiple of 32 */
    write_buf(p, &b, b.n);
    EXPECT_FAIL(p, "tensor 'b'", "not a multiple of Q8_0's block of 32");
    patched(&b, &good, tb + 4, 1ull << 40, 8); /* far more bytes than the file */
    write_buf(p, &b, b.n);
    EXPECT_FAIL(p, "tensor 'b'", "past the end");
    patched(&b, &good, tb + 4, 1ull << 63, 8);
    write_buf(p, &b, b.n);
    EXPECT_FAIL(p, "tensor 'b'", "dimension 0");
    patched(&b, &good, tb, 5, 4); /* n_dims */
    write_buf(p, &b, b.n);
    EXPECT_FAIL(p, "tensor 'b'", "5 dimensions");
    /* two tensors of one name */
    size_t ta = find_mem(&good, "\001\0\0\0\0\0\0\0a\002\0\0\0\004\0\0\0\0\0\0\0", 21) + 8;
    patched(&b, &good, ta, 'b', 1);
    write_buf(p, &b, b.n);
    EXPECT_FAIL(p, "tensor 'b' appears twice");
    /* a product of dimensions that overflows: a 2-d tensor of 2^32 x 2^32 */
    size_t tad = ta + 1 + 4;
    patched(&b, &good, tad, 1ull << 32, 8);
    for (int i = 0; i < 8; i++)
        b.p[tad + 8 + (size_t)i] = (uint8_t)((1ull << 32) >> (8 * i));
    write_buf(p, &b, b.n);
    EXPECT_FAIL(p, "tensor 'a'", "overflows");
    free(good.p);
    free(b.p);
}

TEST(random_corruption)
{
    struct buf good = {0}, b = {0};
    build_good(&good, 3);
    const char *p = tmp_path("fuzz.gguf");
    unsigned seed = 12345;
    for (int it = 0; it < 3000; it++) {
        b.n = 0;
        put(&b, good.p, good.n);
        int flips = 1 + it % 4;
        for (int k = 0; k < flips; k++) {
            seed = seed * 1103515245u + 12345u;
            size_t at = (seed >> 8) % b.n;
            seed = seed * 1103515245u + 12345u;
            b.p[at] = (uint8_t)(seed >> 16);
        }
        write_buf(p, &b, b.n);
        struct gguf_file *g = NULL;
        if (gguf_open(p, &g) == 0) {
            volatile uint8_t sink = 0;
            for (size_t i = 0; i < gguf_tensor_count(g); i++) {
                const struct gguf_tensor *t = gguf_tensor_get(g, i);
                if (t->nbytes)
                    sink ^= ((const uint8_t *)t->data)[t->nbytes - 1];
            }
            (void)sink;
        } else {
            CHECK_MSG(strstr(err_msg(), p), "%s", err_msg());
        }
        gguf_close(g);
    }
    free(good.p);
    free(b.p);
}

static void setup(void)
{
    test_scratch_dir(tmpdir, sizeof(tmpdir), "gguf");
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, setup);
}
