/* safetensors: writer/reader round trip, sharded indexes, every rejection rule of the
 * reader with its message, writer misuse, and random corruption of a valid file. */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "format/safetensors.h"
#include "test.h"

static char tmpdir[64];

/* A path under the test's temporary directory (rotating static buffers). */
static const char *tmp_path(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static const char *tmp_path(const char *fmt, ...)
{
    static char bufs[8][512];
    static int next;
    char *b = bufs[next++ % 8];
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof(name), fmt, ap);
    va_end(ap);
    snprintf(b, 512, "%s/%s", tmpdir, name);
    return b;
}

static void write_bytes(const char *path, const void *buf, size_t n)
{
    FILE *fp = fopen(path, "wb");
    if (!fp || fwrite(buf, 1, n, fp) != n || fclose(fp) != 0) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Writes a safetensors file by hand: the header length, `json`, then `ndata` data
 * bytes (a counting pattern). */
static void write_st(const char *path, const char *json, size_t ndata)
{
    size_t hlen = strlen(json);
    uint8_t *buf = malloc(8 + hlen + ndata);
    put_u64(buf, hlen);
    memcpy(buf + 8, json, hlen);
    for (size_t i = 0; i < ndata; i++)
        buf[8 + hlen + i] = (uint8_t)i;
    write_bytes(path, buf, 8 + hlen + ndata);
    free(buf);
}

/* Opens `path` expecting failure with code `code` (or any negative code when 0) and a
 * message containing every string in the NULL-terminated list. */
static void expect_fail_at(int line, const char *path, int code, ...)
{
    struct st_checkpoint *ck = (struct st_checkpoint *)1;
    int rc = st_open(path, &ck);
    CHECK_MSG(rc < 0 && ck == NULL, "line %d: st_open(%s) = %d, expected failure", line, path,
              rc);
    if (code)
        CHECK_MSG(rc == code, "line %d: code %d (%s), expected %d: %s", line, rc, err_name(rc),
                  code, err_msg());
    va_list ap;
    va_start(ap, code);
    for (const char *s; (s = va_arg(ap, const char *));)
        CHECK_MSG(strstr(err_msg(), s), "line %d: message lacks \"%s\": %s", line, s, err_msg());
    va_end(ap);
    if (rc == 0)
        st_close(ck);
}
#define EXPECT_FAIL(path, code, ...) expect_fail_at(__LINE__, path, code, __VA_ARGS__, NULL)

/* Hand-written single file with one header and data size, expecting failure. */
static void bad_file(const char *json, size_t ndata, int code, const char *s1, const char *s2)
{
    static int n;
    const char *p = tmp_path("bad%d.safetensors", n++);
    write_st(p, json, ndata);
    struct st_checkpoint *ck = NULL;
    int rc = st_open(p, &ck);
    CHECK_MSG(rc < 0 && !ck, "accepted: %s", json);
    if (code)
        CHECK_MSG(rc == code, "code %d, expected %d for %s: %s", rc, code, json, err_msg());
    CHECK_MSG(strstr(err_msg(), p), "message lacks the path: %s", err_msg());
    CHECK_MSG(!s1 || strstr(err_msg(), s1), "message lacks \"%s\" for %s: %s", s1, json,
              err_msg());
    CHECK_MSG(!s2 || strstr(err_msg(), s2), "message lacks \"%s\" for %s: %s", s2, json,
              err_msg());
    st_close(ck);
    unlink(p);
}

/* ---- round trip -------------------------------------------------------------------- */

struct spec {
    const char *name;
    enum dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    size_t nbytes;
};

static const struct spec specs[] = {
    {"model.decoder.embed_tokens.weight", DTYPE_F32, 2, {3, 5}, 60},
    {"scalar", DTYPE_F32, 0, {0}, 4},
    {"layers.0.fc1.weight", DTYPE_F16, 3, {2, 3, 4}, 48},
    {"empty", DTYPE_F16, 2, {0, 7}, 0},
    {"layers.0.fc1.bias", DTYPE_BF16, 1, {9}, 18},
    {"odd", DTYPE_F16, 1, {3}, 6},
    {"big", DTYPE_BF16, 8, {1, 2, 1, 2, 1, 2, 1, 33}, 528},
};
#define NSPECS (sizeof(specs) / sizeof(specs[0]))

static uint8_t spec_byte(size_t t, size_t i)
{
    return (uint8_t)(i * 31 + t * 7 + 1);
}

/* Writes specs to path, streaming the data in 7-byte pieces that straddle tensors. */
static int write_specs(const char *path)
{
    struct st_writer *w;
    int rc = st_writer_open(path, &w);
    if (rc)
        return rc;
    size_t total = 0;
    for (size_t t = 0; t < NSPECS; t++) {
        rc = st_writer_declare(w, specs[t].name, specs[t].dtype, specs[t].ndim, specs[t].shape);
        if (rc)
            goto fail;
        total += specs[t].nbytes;
    }
    uint8_t *all = malloc(total);
    size_t at = 0;
    for (size_t t = 0; t < NSPECS; t++)
        for (size_t i = 0; i < specs[t].nbytes; i++)
            all[at++] = spec_byte(t, i);
    for (size_t off = 0; off < total; off += 7) {
        size_t n = total - off < 7 ? total - off : 7;
        rc = st_writer_write(w, all + off, n);
        if (rc)
            break;
    }
    free(all);
    if (rc)
        goto fail;
    return st_writer_close(w);
fail:
    st_writer_abort(w);
    return rc;
}

static void check_specs(const struct st_checkpoint *ck, const char *file)
{
    CHECK(st_count(ck) == NSPECS);
    CHECK(st_file_count(ck) == 1);
    CHECK(st_get(ck, NSPECS) == NULL);
    CHECK(st_find(ck, "nope") == NULL);
    for (size_t t = 0; t < NSPECS && t < st_count(ck); t++) {
        const struct spec *s = &specs[t];
        const struct st_tensor *g = st_get(ck, t); /* offset order == declaration order */
        CHECK_MSG(strcmp(g->name, s->name) == 0, "tensor %zu is %s, expected %s", t, g->name,
                  s->name);
        CHECK(st_find(ck, s->name) == g);
        CHECK(strcmp(g->file, file) == 0);
        CHECK(g->dtype == s->dtype);
        CHECK(g->ndim == s->ndim);
        size_t numel = 1;
        for (int d = 0; d < s->ndim; d++) {
            CHECK(g->shape[d] == s->shape[d]);
            numel *= (size_t)s->shape[d];
        }
        CHECK(g->numel == numel);
        CHECK_MSG(g->nbytes == s->nbytes, "%s: %zu bytes", s->name, g->nbytes);
        int same = 1;
        for (size_t i = 0; i < g->nbytes; i++)
            same &= ((const uint8_t *)g->data)[i] == spec_byte(t, i);
        CHECK_MSG(same, "%s: data differs", s->name);
        CHECK((const uint8_t *)g->data - (const uint8_t *)st_get(ck, 0)->data ==
              (ptrdiff_t)(g->file_offset - st_get(ck, 0)->file_offset));
    }
    /* The header is padded so the data section starts 8-byte aligned. */
    CHECK(st_get(ck, 0)->file_offset % 8 == 0);
}

TEST(round_trip)
{
    const char *p = tmp_path("rt.safetensors");
    int rc = write_specs(p);
    CHECK_MSG(rc == 0, "write: %s", err_msg());
    struct st_checkpoint *ck = NULL;
    rc = st_open(p, &ck);
    CHECK_MSG(rc == 0, "open: %s", err_msg());
    if (ck)
        check_specs(ck, p);
    st_close(ck);

    /* Through a directory holding model.safetensors. */
    const char *dir = tmp_path("single");
    CHECK(mkdir(dir, 0700) == 0);
    const char *q = tmp_path("single/model.safetensors");
    CHECK(rename(p, q) == 0);
    rc = st_open(dir, &ck);
    CHECK_MSG(rc == 0, "open dir: %s", err_msg());
    if (ck)
        check_specs(ck, q);
    st_close(ck);

    /* A checkpoint with no tensors. */
    struct st_writer *w;
    p = tmp_path("none.safetensors");
    CHECK(st_writer_open(p, &w) == 0);
    CHECK(st_writer_close(w) == 0);
    rc = st_open(p, &ck);
    CHECK_MSG(rc == 0, "open empty: %s", err_msg());
    if (ck)
        CHECK(st_count(ck) == 0 && st_find(ck, "x") == NULL && st_get(ck, 0) == NULL);
    st_close(ck);
}

/* A checkpoint truncated after it was opened: st_check says so, naming the
 * file and both sizes; renamed over, it is not an error (the mapping keeps
 * the old file). */
TEST(truncated_after_open)
{
    const char *p = tmp_path("trunc.safetensors");
    CHECK_MSG(write_specs(p) == 0, "write: %s", err_msg());
    struct st_checkpoint *ck = NULL;
    CHECK_MSG(st_open(p, &ck) == 0, "open: %s", err_msg());
    if (!ck)
        return;
    CHECK(st_check(ck) == 0);
    struct stat sb;
    CHECK(stat(p, &sb) == 0);
    CHECK(truncate(p, sb.st_size / 2) == 0);
    int rc = st_check(ck);
    CHECK_MSG(rc == ERR_IO && strstr(err_msg(), p) && strstr(err_msg(), "truncated while in use"),
              "%d %s", rc, err_msg());
    st_close(ck);
    CHECK_MSG(write_specs(p) == 0, "write: %s", err_msg());
    CHECK_MSG(st_open(p, &ck) == 0, "open: %s", err_msg());
    const char *q = tmp_path("trunc2.safetensors");
    CHECK(write_specs(q) == 0 && truncate(q, 8) == 0 && rename(q, p) == 0);
    CHECK_MSG(st_check(ck) == 0, "%s", err_msg());
    st_close(ck);
}

/* ---- sharded ----------------------------------------------------------------------- */

static const char *shard1 =
    "{\"__metadata__\":{\"format\":\"pt\"},"
    "\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
    "\"y\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[8,16]}}";
static const char *shard2 = "{\"z\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[0,6]}}";
#define S1 "model-00001-of-00002.safetensors"
#define S2 "model-00002-of-00002.safetensors"

TEST(sharded)
{
    CHECK(mkdir(tmp_path("sh"), 0700) == 0);
    write_st(tmp_path("sh/" S1), shard1, 16);
    write_st(tmp_path("sh/" S2), shard2, 6);
    /* A stray single file too: the index must win. */
    write_st(tmp_path("sh/model.safetensors"), shard2, 6);
    const char *index =
        "{\"metadata\":{\"total_size\":22},\"weight_map\":{\"z\":\"" S2 "\",\"x\":\"" S1
        "\",\"y\":\"" S1 "\"}}";
    write_bytes(tmp_path("sh/model.safetensors.index.json"), index, strlen(index));

    const char *paths[2] = {tmp_path("sh"), tmp_path("sh/model.safetensors.index.json")};
    for (int k = 0; k < 2; k++) {
        struct st_checkpoint *ck = NULL;
        int rc = st_open(paths[k], &ck);
        CHECK_MSG(rc == 0, "open %s: %s", paths[k], err_msg());
        if (!ck)
            continue;
        CHECK(st_count(ck) == 3);
        CHECK(st_file_count(ck) == 2);
        const struct st_tensor *x = st_find(ck, "x"), *z = st_find(ck, "z");
        CHECK(x && z && st_find(ck, "y"));
        if (x && z) {
            CHECK(strcmp(x->file, tmp_path("sh/" S1)) == 0);
            CHECK(strcmp(z->file, tmp_path("sh/" S2)) == 0);
            CHECK(z->dtype == DTYPE_BF16 && z->nbytes == 6 && z->shape[0] == 3);
            CHECK(((const uint8_t *)z->data)[5] == 5);
            CHECK(((const uint8_t *)st_find(ck, "y")->data)[0] == 8);
        }
        /* File order, then offset order. */
        CHECK(strcmp(st_get(ck, 0)->name, "x") == 0);
        CHECK(strcmp(st_get(ck, 1)->name, "y") == 0);
        CHECK(strcmp(st_get(ck, 2)->name, "z") == 0);
        st_close(ck);
    }

    /* Broken indexes. */
    const char *ip = tmp_path("sh/bad.index.json");
    const char *bad_missing = "{\"weight_map\":{\"x\":\"" S1 "\",\"y\":\"" S1
                              "\",\"z\":\"nowhere.safetensors\"}}";
    write_bytes(ip, bad_missing, strlen(bad_missing));
    EXPECT_FAIL(ip, ERR_NOT_FOUND, "nowhere.safetensors");

    const char *bad_tensor = "{\"weight_map\":{\"x\":\"" S1 "\",\"y\":\"" S1 "\",\"z\":\"" S2
                             "\",\"w\":\"" S2 "\"}}";
    write_bytes(ip, bad_tensor, strlen(bad_tensor));
    EXPECT_FAIL(ip, 0, "'w'", S2, "no such tensor");

    const char *unlisted = "{\"weight_map\":{\"x\":\"" S1 "\",\"z\":\"" S2 "\"}}";
    write_bytes(ip, unlisted, strlen(unlisted));
    EXPECT_FAIL(ip, ERR_FORMAT, "'y'", "not in the index");

    const char *moved = "{\"weight_map\":{\"x\":\"" S1 "\",\"y\":\"" S2 "\",\"z\":\"" S2 "\"}}";
    write_bytes(ip, moved, strlen(moved));
    EXPECT_FAIL(ip, ERR_FORMAT, "'y'", "lists it in " S2);

    const char *escape = "{\"weight_map\":{\"x\":\"../x\"}}";
    write_bytes(ip, escape, strlen(escape));
    EXPECT_FAIL(ip, ERR_FORMAT, "../x");
    const char *dotdot = "{\"weight_map\":{\"x\":\"..\"}}";
    write_bytes(ip, dotdot, strlen(dotdot));
    EXPECT_FAIL(ip, ERR_FORMAT, "'..'");
    const char *abs = "{\"weight_map\":{\"x\":\"/etc/passwd\"}}";
    write_bytes(ip, abs, strlen(abs));
    EXPECT_FAIL(ip, ERR_FORMAT, "/etc/passwd");

    const char *no_map = "{\"metadata\":{}}";
    write_bytes(ip, no_map, strlen(no_map));
    EXPECT_FAIL(ip, ERR_FORMAT, "weight_map");
    const char *empty_map = "{\"weight_map\":{}}";
    write_bytes(ip, empty_map, strlen(empty_map));
    EXPECT_FAIL(ip, ERR_FORMAT, "weight_map");
    const char *not_str = "{\"weight_map\":{\"x\":1}}";
    write_bytes(ip, not_str, strlen(not_str));
    EXPECT_FAIL(ip, ERR_FORMAT, "'x'");
    const char *dup = "{\"weight_map\":{\"x\":\"" S1 "\",\"x\":\"" S1 "\"}}";
    write_bytes(ip, dup, strlen(dup));
    EXPECT_FAIL(ip, ERR_FORMAT, "duplicate");
    write_bytes(ip, "not json", 8);
    EXPECT_FAIL(ip, ERR_FORMAT, "bad.index.json", "JSON");

    /* A broken shard is reported with the shard's path and the tensor. */
    write_st(tmp_path("sh/" S2), "{\"z\":{\"dtype\":\"I64\",\"shape\":[3],\"data_offsets\":[0,24]}}",
             24);
    EXPECT_FAIL(paths[0], ERR_UNSUPPORTED, S2, "unsupported dtype I64", "'z'");

    /* Directory without a checkpoint; nonexistent path. */
    const char *empty_dir = tmp_path("nothing");
    CHECK(mkdir(empty_dir, 0700) == 0);
    EXPECT_FAIL(empty_dir, ERR_NOT_FOUND, empty_dir, "model.safetensors.index.json",
                "model.safetensors)");
    EXPECT_FAIL(tmp_path("nothing/missing.safetensors"), ERR_NOT_FOUND, "missing.safetensors");
}

/* ---- files that are not regular files ------------------------------------------------ */

/* A FIFO, directory or device where a checkpoint file belongs is refused by type before
 * anything is read: opening a FIFO without a writer would otherwise block forever, so an
 * alarm turns a hang into a failed test. */
TEST(not_regular)
{
    alarm(30);
    const char *d = tmp_path("nr");
    CHECK(mkdir(d, 0700) == 0);

    /* the single file, found through the directory or named */
    const char *single = tmp_path("nr/model.safetensors");
    CHECK(mkfifo(single, 0600) == 0);
    EXPECT_FAIL(d, ERR_IO, single, "is a FIFO, expected a regular file");
    EXPECT_FAIL(single, ERR_IO, single, "is a FIFO, expected a regular file");
    EXPECT_FAIL("/dev/zero", ERR_IO, "/dev/zero", "is a character device, expected a regular");
    CHECK(unlink(single) == 0 && mkdir(single, 0700) == 0);
    EXPECT_FAIL(d, ERR_IO, single, "is a directory, expected a regular file");

    /* the index, found through the directory or named */
    const char *index = tmp_path("nr/model.safetensors.index.json");
    CHECK(mkfifo(index, 0600) == 0);
    EXPECT_FAIL(d, ERR_IO, index, "is a FIFO, expected a regular file");
    EXPECT_FAIL(index, ERR_IO, index, "is a FIFO, expected a regular file");
    CHECK(unlink(index) == 0 && mkdir(index, 0700) == 0);
    EXPECT_FAIL(d, ERR_IO, index, "is a directory, expected a regular file");

    /* a shard the index names */
    const char *sd = tmp_path("nrs");
    CHECK(mkdir(sd, 0700) == 0);
    const char *sidx = tmp_path("nrs/model.safetensors.index.json");
    const char *map = "{\"weight_map\":{\"x\":\"" S1 "\"}}";
    write_bytes(sidx, map, strlen(map));
    CHECK(mkfifo(tmp_path("nrs/" S1), 0600) == 0);
    EXPECT_FAIL(sd, ERR_IO, tmp_path("nrs/" S1), "is a FIFO, expected a regular file", "shard of");

    /* no safetensors at all; PyTorch pickles are pointed at the converter */
    const char *pd = tmp_path("pt");
    CHECK(mkdir(pd, 0700) == 0);
    EXPECT_FAIL(pd, ERR_NOT_FOUND, pd, "no checkpoint in this directory");
    write_bytes(tmp_path("pt/pytorch_model.bin"), "PK", 2);
    EXPECT_FAIL(pd, ERR_UNSUPPORTED, pd, "holds pytorch_model.bin",
                "python3 tools/to_safetensors.py --model");
    alarm(0);
}

/* ---- bounded headers and indexes ---------------------------------------------------- */

/* A header or weight_map of n empty tensors (malloc'd); index: the weight_map of an
 * index naming shard S1 for each. */
static char *many_tensors(size_t n, int index, int metadata)
{
    size_t cap = 64 + n * 80, at = 0;
    char *j = malloc(cap);
    at += (size_t)snprintf(j + at, cap - at, "{%s%s", index ? "\"weight_map\":{" : "",
                           metadata ? "\"__metadata__\":{\"format\":\"pt\"}," : "");
    for (size_t i = 0; i < n; i++)
        at += (size_t)snprintf(j + at, cap - at,
                               index ? "%s\"t%zu\":\"" S1 "\""
                                     : "%s\"t%zu\":{\"dtype\":\"F32\",\"shape\":[0],"
                                       "\"data_offsets\":[0,0]}",
                               i ? "," : "", i);
    snprintf(j + at, cap - at, index ? "}}" : "}");
    return j;
}

/* At most ST_MAX_TENSORS tensors in a file or an index, counted before the JSON is parsed
 * (a 100 MB header of empty tensors would otherwise cost gigabytes). */
TEST(limits)
{
    const char *p = tmp_path("limit.safetensors");
    char *j = many_tensors(ST_MAX_TENSORS, 0, 1);
    write_st(p, j, 0);
    free(j);
    struct st_checkpoint *ck = NULL;
    CHECK_MSG(st_open(p, &ck) == 0, "%s", err_msg());
    CHECK(ck && st_count(ck) == ST_MAX_TENSORS);
    st_close(ck);

    j = many_tensors(ST_MAX_TENSORS + 1, 0, 0); /* caught once parsed */
    write_st(p, j, 0);
    free(j);
    EXPECT_FAIL(p, ERR_UNSUPPORTED, p, "header lists more than 65536 tensors",
                "expected at most 65536");
    j = many_tensors(4 * ST_MAX_TENSORS, 0, 1); /* caught before */
    write_st(p, j, 0);
    free(j);
    EXPECT_FAIL(p, ERR_UNSUPPORTED, p, "header lists more than 65536 tensors");

    const char *ip = tmp_path("limit.index.json");
    j = many_tensors(ST_MAX_TENSORS + 1, 1, 0);
    write_bytes(ip, j, strlen(j));
    free(j);
    EXPECT_FAIL(ip, ERR_UNSUPPORTED, ip, "index lists more than 65536 tensors");
}

/* ---- corrupt single files ---------------------------------------------------------- */

TEST(corrupt)
{
    const char *p = tmp_path("raw.safetensors");
    write_bytes(p, "", 0);
    EXPECT_FAIL(p, ERR_FORMAT, p, "0 bytes", "too short");
    write_bytes(p, "\x02\0\0\0\0", 5);
    EXPECT_FAIL(p, ERR_FORMAT, "5 bytes", "too short");

    uint8_t buf[64];
    put_u64(buf, 1ull << 60);
    memcpy(buf + 8, "{}", 2);
    write_bytes(p, buf, 10);
    EXPECT_FAIL(p, ERR_FORMAT, "header length 1152921504606846976");
    put_u64(buf, 100);
    write_bytes(p, buf, 10);
    EXPECT_FAIL(p, ERR_FORMAT, "header length 100", "larger than the file");
    put_u64(buf, 1);
    write_bytes(p, buf, 10);
    EXPECT_FAIL(p, ERR_FORMAT, "header length 1");
    put_u64(buf, 8);
    memcpy(buf + 8, "        ", 8);
    write_bytes(p, buf, 16);
    EXPECT_FAIL(p, ERR_FORMAT, "does not begin with '{'");

    /* Header length fine, contents not. */
    bad_file("{not json}", 0, ERR_FORMAT, "not valid JSON", NULL);
    bad_file("{} trailing", 0, ERR_FORMAT, "not valid JSON", NULL);
    bad_file("[1, 2]", 0, ERR_FORMAT, "not a JSON object", NULL);
    bad_file("\"str\"", 0, ERR_FORMAT, "not a JSON object", NULL);
    bad_file("{\"t\": 5}", 0, ERR_FORMAT, "'t'", "not a JSON object");
    bad_file("{\"t\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, ERR_FORMAT, "'t'",
             "missing \"dtype\"");
    bad_file("{\"t\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, ERR_FORMAT, "'t'",
             "missing \"shape\"");
    bad_file("{\"t\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, ERR_FORMAT, "'t'",
             "missing \"data_offsets\"");
    bad_file("{\"t\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, ERR_FORMAT, "'t'",
             "\"dtype\" is not a string");
    bad_file("{\"t\":{\"dtype\":\"F32\",\"shape\":5,\"data_offsets\":[0,4]}}", 4, ERR_FORMAT,
             "'t'", "\"shape\" is not an array");
    bad_file("{\"t\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, ERR_FORMAT,
             "'t'", "shape[0]");
    bad_file("{\"t\":{\"dtype\":\"F32\",\"shape\":[1.0],\"data_offsets\":[0,4]}}", 4, ERR_FORMAT,
             "'t'", "shape[0]");
    bad_file("{\"t\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}",
             4, ERR_UNSUPPORTED, "'t'", "9 dimensions");
    bad_file("{\"t\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4],"
             "\"data_offsets\":[0,4]}}",
             4, ERR_FORMAT, "'t'", "overflows");
    bad_file("{\"t\":{\"dtype\":\"F16\",\"shape\":[4294967296,4294967296],"
             "\"data_offsets\":[0,0]}}",
             0, ERR_FORMAT, "'t'", "overflows");
    bad_file("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 8, ERR_FORMAT,
             "'t'", "data_offsets");
    bad_file("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 4, ERR_FORMAT,
             "'t'", "data_offsets");
    bad_file("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, ERR_FORMAT,
             "'t'", "begin > end");
    bad_file("{\"t\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, ERR_FORMAT,
             "'t'", "needs 12 bytes");
    /* Truncated: the data section is cut short. */
    bad_file("{\"t\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 10, ERR_FORMAT,
             "'t'", "out of range");
    bad_file("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[18446744073709551608,"
             "18446744073709551615]}}",
             8, ERR_FORMAT, NULL, NULL); /* beyond json_int_t: rejected by the parser */
    bad_file("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[9223372036854775799,"
             "9223372036854775807]}}",
             8, ERR_FORMAT, "'t'", "out of range");
    bad_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
             "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
             12, ERR_FORMAT, "'b'", "overlapping");
    bad_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
             "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
             8, ERR_FORMAT, "'b'", "overlapping");
    bad_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
             "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}",
             20, ERR_FORMAT, "'b'", "gap");
    bad_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, ERR_FORMAT,
             "'a'", "begin at offset 0");
    bad_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 12, ERR_FORMAT,
             "4 trailing bytes", NULL);
    bad_file("{\"pos\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]}}", 16,
             ERR_UNSUPPORTED, "unsupported dtype I64", "'pos'");
    bad_file("{\"w\":{\"dtype\":\"float32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
             ERR_UNSUPPORTED, "unsupported dtype float32", "'w'");
    bad_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
             "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
             8, ERR_FORMAT, "duplicate", NULL);
    bad_file("{\"__metadata__\":{\"format\":1}}", 0, ERR_FORMAT, "__metadata__", "'format'");
    bad_file("{\"__metadata__\":[]}", 0, ERR_FORMAT, "__metadata__", NULL);

    /* Accepted edge cases: a header-only file; zero-size tensors sharing an offset;
     * unknown keys in an entry; trailing spaces in the header. */
    struct st_checkpoint *ck = NULL;
    write_st(p, "{}", 0);
    CHECK_MSG(st_open(p, &ck) == 0 && st_count(ck) == 0, "{}: %s", err_msg());
    st_close(ck);
    ck = NULL;
    write_st(p,
             "{\"e1\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]},"
             "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"extra\":1},"
             "\"e2\":{\"dtype\":\"BF16\",\"shape\":[3,0,4294967296],\"data_offsets\":[4,4]}}    ",
             4);
    CHECK_MSG(st_open(p, &ck) == 0, "zero-size: %s", err_msg());
    if (ck) {
        CHECK(st_count(ck) == 3);
        CHECK(strcmp(st_get(ck, 0)->name, "a") == 0);
        const struct st_tensor *e2 = st_find(ck, "e2");
        CHECK(e2 && e2->numel == 0 && e2->nbytes == 0 && e2->ndim == 3);
    }
    st_close(ck);
    unlink(p);
}

/* ---- random corruption ------------------------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng_next(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

TEST(fuzz)
{
    const char *good = tmp_path("good.safetensors");
    CHECK(write_specs(good) == 0);
    FILE *fp = fopen(good, "rb");
    uint8_t orig[4096];
    size_t len = fp ? fread(orig, 1, sizeof(orig), fp) : 0;
    if (fp)
        fclose(fp);
    CHECK(len > 8 && len < sizeof(orig));
    if (len <= 8 || len >= sizeof(orig))
        return;
    size_t hend = 8 + (size_t)orig[0] + 256 * (size_t)orig[1];
    static const char junk[] = "0123456789[]{},:\"- -9eE.";

    const char *p = tmp_path("fuzz.safetensors");
    uint8_t buf[4096];
    int opened = 0, failed = 0;
    for (int it = 0; it < 600; it++) {
        memcpy(buf, orig, len);
        size_t n = len;
        uint64_t r = rng_next();
        if (r % 5 == 0) {
            n = (size_t)(rng_next() % len); /* truncate */
        } else {
            int flips = 1 + (int)(rng_next() % 4);
            for (int f = 0; f < flips; f++) {
                uint64_t q = rng_next();
                size_t at = q % 3 ? 8 + (size_t)(rng_next() % (hend - 8)) /* the header */
                                  : (size_t)(rng_next() % len);
                if (q % 2)
                    buf[at] = (uint8_t)junk[rng_next() % (sizeof(junk) - 1)];
                else
                    buf[at] ^= (uint8_t)(1u << (rng_next() % 8));
            }
        }
        write_bytes(p, buf, n);
        struct st_checkpoint *ck = NULL;
        int rc = st_open(p, &ck);
        if (rc == 0) {
            opened++;
            /* Whatever was accepted must lie inside the file. */
            unsigned sum = 0;
            for (size_t i = 0; i < st_count(ck); i++) {
                const struct st_tensor *t = st_get(ck, i);
                CHECK(t->file_offset + t->nbytes <= n);
                CHECK(st_find(ck, t->name) == t);
                for (size_t b = 0; b < t->nbytes; b++)
                    sum += ((const uint8_t *)t->data)[b];
            }
            (void)sum;
            st_close(ck);
        } else {
            failed++;
            CHECK(ck == NULL && rc < 0 && err_msg()[0] != '\0');
        }
    }
    printf("fuzz: %d opened, %d rejected\n", opened, failed);
    CHECK(failed > 0);
    unlink(p);
    unlink(good);
}

/* ---- writer misuse ----------------------------------------------------------------- */

static int exists(const char *path)
{
    return access(path, F_OK) == 0;
}

TEST(writer_errors)
{
    const char *p = tmp_path("w.safetensors");
    struct st_writer *w = NULL;
    int64_t four[1] = {4}, one[1] = {1}, neg[2] = {2, -1};
    uint8_t data[64] = {0};

    /* Missing bytes at close: an error, and no file left behind. */
    CHECK(st_writer_open(p, &w) == 0);
    CHECK(st_writer_declare(w, "t", DTYPE_F32, 1, four) == 0);
    CHECK(st_writer_write(w, data, 8) == 0);
    CHECK(st_writer_close(w) == ERR_INVALID);
    CHECK_MSG(strstr(err_msg(), "8 of 16") && strstr(err_msg(), p), "%s", err_msg());
    CHECK(!exists(p));

    /* More bytes than declared. */
    CHECK(st_writer_open(p, &w) == 0);
    CHECK(st_writer_declare(w, "t", DTYPE_F32, 1, one) == 0);
    CHECK(st_writer_write(w, data, 8) == ERR_INVALID);
    CHECK_MSG(strstr(err_msg(), "exceed"), "%s", err_msg());
    CHECK(st_writer_write(w, data, 4) < 0); /* the error sticks */
    CHECK(st_writer_close(w) < 0);
    CHECK(!exists(p));

    /* Declaring after data started. */
    CHECK(st_writer_open(p, &w) == 0);
    CHECK(st_writer_declare(w, "a", DTYPE_F16, 1, one) == 0);
    CHECK(st_writer_write(w, data, 1) == 0);
    CHECK(st_writer_declare(w, "b", DTYPE_F16, 1, one) == ERR_INVALID);
    CHECK_MSG(strstr(err_msg(), "'b'") && strstr(err_msg(), "after data"), "%s", err_msg());
    st_writer_abort(w);
    CHECK(!exists(p));

    /* Bad declarations. */
    CHECK(st_writer_open(p, &w) == 0);
    CHECK(st_writer_declare(w, "a", DTYPE_F16, 1, one) == 0);
    CHECK(st_writer_declare(w, "a", DTYPE_F16, 1, one) == ERR_INVALID);
    CHECK_MSG(strstr(err_msg(), "twice"), "%s", err_msg());
    st_writer_abort(w);
    CHECK(st_writer_open(p, &w) == 0);
    CHECK(st_writer_declare(w, "n", DTYPE_F16, 2, neg) == ERR_INVALID);
    st_writer_abort(w);
    CHECK(st_writer_open(p, &w) == 0);
    CHECK(st_writer_declare(w, "__metadata__", DTYPE_F16, 1, one) == ERR_INVALID);
    st_writer_abort(w);
    CHECK(st_writer_open(p, &w) == 0);
    CHECK(st_writer_declare(w, "bad\xff", DTYPE_F16, 1, one) == ERR_INVALID);
    st_writer_abort(w);
    CHECK(st_writer_open(p, &w) == 0);
    CHECK(st_writer_declare(w, "deep", DTYPE_F16, ST_MAX_DIMS + 1, one) == ERR_INVALID);
    st_writer_abort(w);
    CHECK(!exists(p));
    st_writer_abort(NULL);

    /* Unwritable path. */
    const char *nowhere = tmp_path("no/such/dir/x.safetensors");
    w = (struct st_writer *)1;
    CHECK(st_writer_open(nowhere, &w) == ERR_IO && w == NULL);
    CHECK_MSG(strstr(err_msg(), nowhere), "%s", err_msg());

    /* A full disk: the error surfaces at a write or at close, naming the path, and the
     * device is not removed. */
    if (exists("/dev/full") && st_writer_open("/dev/full", &w) == 0) {
        static uint8_t big[1 << 16];
        int64_t shape[1] = {(int64_t)sizeof(big) / 4};
        CHECK(st_writer_declare(w, "t", DTYPE_F32, 1, shape) == 0);
        int rw = st_writer_write(w, big, sizeof(big));
        int msg_ok = rw == 0 || strstr(err_msg(), "/dev/full") != NULL;
        int rc = st_writer_close(w);
        CHECK(rw < 0 || rc < 0);
        CHECK_MSG(msg_ok && strstr(err_msg(), "/dev/full"), "%s", err_msg());
        CHECK(exists("/dev/full"));
    }
}

static void setup(void)
{
    test_scratch_dir(tmpdir, sizeof(tmpdir), "st");
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, setup);
}
