/* safetensors reader: one file, or the shards named by an index.
 *
 * File layout (all of it; nothing may follow the last tensor):
 *
 *   offset 0      u64, little-endian: N, the header length in bytes
 *   offset 8      N bytes of UTF-8 JSON, beginning with '{' and possibly padded at the
 *                 end with spaces (writers pad so the data starts 8-byte aligned)
 *   offset 8 + N  the data section: every tensor's bytes, back to back
 *
 * The header is one JSON object. Each key is a tensor name, except the optional
 * "__metadata__", whose value is an object of string -> string (we check and skip it):
 *
 *   {"__metadata__": {"format": "pt"},
 *    "wte": {"dtype": "F16", "shape": [50272, 768], "data_offsets": [0, 77217792]}, ...}
 *
 *   dtype         one of F32, F16, BF16; or I8, I32, I64, F8_E4M3, which only a
 *                 compressed-tensors checkpoint's quantized weights may use (format/ct.h:
 *                 config.json's quantization_config says how; any other tensor of these is
 *                 refused when the checkpoint opens); the file format has more (BOOL, U8,
 *                 I16, U16, U32, U64, F64, F8_E5M2...), which we reject as unsupported
 *   shape         array of ndim <= ST_MAX_DIMS non-negative integers; [] is a scalar
 *   data_offsets  [begin, end], byte offsets relative to the data section, row-major
 *                 little-endian elements, end - begin == product(shape) * dtype size
 *
 * Rules we enforce, so that a truncated, corrupt or hostile file is an error and never an
 * out-of-bounds read: 2 <= N <= 100 MB (the reference implementation's limit) and
 * N <= file size - 8; the JSON object has at most ST_MAX_TENSORS (65536) tensors, counted
 * before it is parsed, so that a 100 MB header of a million empty tensors costs a scan
 * and not gigabytes of parse trees; it has no duplicate keys; sorted by begin, the
 * tensors tile the data section exactly (the first begins at 0, each begins where the
 * previous ended, the last ends at the end of the file). Tensors with zero elements are
 * allowed (begin == end).
 *
 * Alignment: a tensor's data is aligned to its element size only if the writer padded
 * the header (ours and the official ones do; others may not). Readers must not cast
 * `data` to float* or uint16_t* and dereference it; copy or convert through memcpy.
 *
 * Sharded checkpoints: model.safetensors.index.json is
 *
 *   {"metadata": {...}, "weight_map": {"tensor name": "shard file name", ...}}
 *
 * with the shards beside the index. Every tensor listed must be in its shard, and every
 * tensor of a shard must be listed under that shard. Shard names are plain file names.
 * The index is a regular file of at most 100 MB whose "weight_map" and "metadata" have at
 * most ST_MAX_TENSORS members together (counted before parsing); a checkpoint holds at
 * most ST_MAX_TENSORS tensors in all. Every file (the index, each shard) must be a regular
 * file: a FIFO, directory or device in its place is refused by type before it is read.
 *
 * The files are mapped read-only and private; descriptors are closed after mapping (a
 * server holds thousands of models, and a descriptor per file would meet RLIMIT_NOFILE).
 * If another process truncates a file while it is mapped, touching the lost pages raises
 * SIGBUS. st_check sees a truncation that has happened (the same file, by device and
 * inode, now shorter than its mapping); a reader that copies out of the mapping while it
 * may be truncated guards the copy (core/fault.h), as the swap loaders do.
 */
#include "format/safetensors.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/fs.h"
#include "core/jsonout.h"
#include "format/ct.h"
#include "format/gguf.h"
#include "format/gguf_hf.h"
#include "format/hf_config.h"

_Static_assert(SIZE_MAX >= UINT64_MAX, "offsets and shapes are read as 64-bit sizes");

#define ST_HEADER_MAX (100u * 1000u * 1000u) /* bytes of header JSON we accept */
#define ST_INDEX_MAX (100u * 1000u * 1000u)  /* bytes of index JSON we accept */
#define ST_INDEX_NAME "model.safetensors.index.json"
#define ST_SINGLE_NAME "model.safetensors"

struct st_file {
    char *path;
    const uint8_t *map; /* whole file, PROT_READ, MAP_PRIVATE */
    size_t size;
    dev_t dev; /* the mapped file's identity, for st_check */
    ino_t ino;
    char *names;        /* one allocation for the names of this file's tensors */
};

struct st_checkpoint {
    struct st_file *files;
    size_t nfiles;
    struct st_tensor *tensors; /* file order, then offset order */
    size_t ntensors;
    size_t *slots;  /* open addressing: tensor index + 1, 0 = empty */
    size_t nslots;  /* a power of two, at least twice ntensors */
    struct gguf_file *gguf; /* a GGUF checkpoint: owns the mappings (files[i].map is NULL) */
    struct ct_config *ct;   /* a compressed-tensors checkpoint's quantization_config */
    void *ct_owned;         /* its weights' descriptions and names (format/ct.h) */
};

/* Sets the error as "<path>: <message>"; returns code. */
static int file_err(const char *path, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int file_err(const char *path, int code, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return err_set(code, "%s: %s", path, msg);
}

static int open_err(const char *path, const char *what)
{
    int code = errno == ENOENT ? ERR_NOT_FOUND : ERR_IO;
    return file_err(path, code, "cannot %s: %s", what, strerror(errno));
}

static uint64_t u64_le(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static const struct {
    const char *name;
    size_t size;
} raw_types[] = {
    [ST_RAW_NONE] = {"", 0},   [ST_RAW_I8] = {"I8", 1},           [ST_RAW_I32] = {"I32", 4},
    [ST_RAW_I64] = {"I64", 8}, [ST_RAW_F8_E4M3] = {"F8_E4M3", 1},
};

const char *st_raw_name(enum st_raw r)
{
    return raw_types[r].name;
}

static int dtype_from_st(const char *s, enum dtype *out, enum st_raw *raw)
{
    /* Exact safetensors spellings only: dtype_parse() also takes torch names. */
    *raw = ST_RAW_NONE;
    if (strcmp(s, "F32") == 0)
        *out = DTYPE_F32;
    else if (strcmp(s, "F16") == 0)
        *out = DTYPE_F16;
    else if (strcmp(s, "BF16") == 0)
        *out = DTYPE_BF16;
    else {
        *out = DTYPE_F32; /* unused for a raw type */
        for (int r = ST_RAW_I8; r <= ST_RAW_F8_E4M3; r++)
            if (strcmp(s, raw_types[r].name) == 0) {
                *raw = (enum st_raw)r;
                return 0;
            }
        return ERR_UNSUPPORTED;
    }
    return 0;
}

/* Counts the members of the JSON objects nesting `depth` deep in text (1: the top-level
 * object's members), stopping once the count passes max. A scan of the bytes, not a
 * parse: malformed JSON gives some count and is rejected by the parser afterwards. */
static size_t json_members_at(const char *text, size_t len, int depth, size_t max)
{
    size_t n = 0;
    int d = 0, in_str = 0;
    for (size_t i = 0; i < len && n <= max; i++) {
        char c = text[i];
        if (in_str) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_str = 0;
        } else if (c == '"') {
            in_str = 1;
        } else if (c == '{' || c == '[') {
            d++;
        } else if (c == '}' || c == ']') {
            d--;
        } else if (c == ':' && d == depth) {
            n++;
        }
    }
    return n;
}

static int tensors_max_err(const char *path)
{
    return file_err(path, ERR_UNSUPPORTED,
                    "header lists more than %d tensors (expected at most %d in one file)",
                    ST_MAX_TENSORS, ST_MAX_TENSORS);
}

/* ---- one file ---------------------------------------------------------------------- */

static int file_map(const char *path, struct st_file *f)
{
    struct fs_map m;
    int rc = fs_map_regular(path, 8, &m);
    if (rc)
        return rc;
    if (!m.data)
        return file_err(path, ERR_FORMAT,
                        "file is %zu bytes, too short for the 8-byte header length "
                        "(empty or truncated)",
                        m.size);
    f->map = m.data;
    f->size = m.size;
    f->dev = (dev_t)m.dev;
    f->ino = (ino_t)m.ino;
    return 0;
}

static void file_unmap(struct st_file *f)
{
    fs_unmap(f->map, f->size);
    free(f->names);
    free(f->path);
}

/* Checks __metadata__: an object of string values. */
static int metadata_check(const char *path, json_t *meta)
{
    if (!json_is_object(meta))
        return file_err(path, ERR_FORMAT, "__metadata__ is not a JSON object");
    const char *key;
    json_t *val;
    json_object_foreach(meta, key, val) {
        if (!json_is_string(val))
            return file_err(path, ERR_FORMAT, "__metadata__ value of '%s' is not a string",
                            key);
    }
    return 0;
}

/* Reads a non-negative JSON integer. */
static int json_count(json_t *v, uint64_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return -1;
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

/* Fills t (not name/file/data) from a header entry and checks it against the data
 * section size. *begin receives the entry's begin offset. */
static int tensor_parse(const char *path, const char *name, json_t *entry, size_t data_size,
                        struct st_tensor *t, uint64_t *begin)
{
    if (!json_is_object(entry))
        return file_err(path, ERR_FORMAT, "tensor '%s': entry is not a JSON object", name);

    json_t *jd = json_object_get(entry, "dtype");
    if (!jd)
        return file_err(path, ERR_FORMAT, "tensor '%s': missing \"dtype\"", name);
    if (!json_is_string(jd))
        return file_err(path, ERR_FORMAT, "tensor '%s': \"dtype\" is not a string", name);
    if (dtype_from_st(json_string_value(jd), &t->dtype, &t->raw) != 0)
        return file_err(path, ERR_UNSUPPORTED,
                        "unsupported dtype %s in tensor '%s' (supported: F32, F16, BF16)",
                        json_string_value(jd), name);

    json_t *js = json_object_get(entry, "shape");
    if (!js)
        return file_err(path, ERR_FORMAT, "tensor '%s': missing \"shape\"", name);
    if (!json_is_array(js))
        return file_err(path, ERR_FORMAT, "tensor '%s': \"shape\" is not an array", name);
    size_t ndim = json_array_size(js);
    if (ndim > ST_MAX_DIMS)
        return file_err(path, ERR_UNSUPPORTED, "tensor '%s': shape has %zu dimensions, at most %d",
                        name, ndim, ST_MAX_DIMS);
    size_t numel = 1, nbytes = 0;
    int overflow = 0, empty = 0;
    for (size_t i = 0; i < ndim; i++) {
        uint64_t d;
        if (json_count(json_array_get(js, i), &d) != 0)
            return file_err(path, ERR_FORMAT,
                            "tensor '%s': shape[%zu] is not a non-negative integer", name, i);
        t->shape[i] = (int64_t)d;
        empty |= d == 0;
        overflow |= __builtin_mul_overflow(numel, (size_t)d, &numel);
    }
    t->ndim = (int)ndim;
    const size_t esize = t->raw ? raw_types[t->raw].size : dtype_size(t->dtype);
    overflow |= __builtin_mul_overflow(numel, esize, &nbytes);
    /* A zero dimension makes the tensor empty whatever the other dimensions are. */
    if (empty)
        numel = nbytes = 0;
    else if (overflow)
        return file_err(path, ERR_FORMAT, "tensor '%s': shape's byte size overflows", name);

    json_t *jo = json_object_get(entry, "data_offsets");
    if (!jo)
        return file_err(path, ERR_FORMAT, "tensor '%s': missing \"data_offsets\"", name);
    uint64_t b, e;
    if (!json_is_array(jo) || json_array_size(jo) != 2 ||
        json_count(json_array_get(jo, 0), &b) != 0 || json_count(json_array_get(jo, 1), &e) != 0)
        return file_err(path, ERR_FORMAT,
                        "tensor '%s': \"data_offsets\" is not [begin, end] with non-negative "
                        "integers",
                        name);
    if (b > e)
        return file_err(path, ERR_FORMAT,
                        "tensor '%s': data_offsets [%llu, %llu] have begin > end", name,
                        (unsigned long long)b, (unsigned long long)e);
    if (e > data_size)
        return file_err(path, ERR_FORMAT,
                        "tensor '%s': data_offsets [%llu, %llu] out of range: the data section "
                        "has %zu bytes (file truncated?)",
                        name, (unsigned long long)b, (unsigned long long)e, data_size);
    if (e - b != nbytes)
        return file_err(path, ERR_FORMAT,
                        "tensor '%s': data_offsets [%llu, %llu] span %llu bytes, but %s shape "
                        "of %zu elements needs %zu bytes",
                        name, (unsigned long long)b, (unsigned long long)e,
                        (unsigned long long)(e - b),
                        t->raw ? st_raw_name(t->raw) : dtype_name(t->dtype), numel, nbytes);
    t->numel = numel;
    t->nbytes = nbytes;
    *begin = b;
    return 0;
}

static int tensor_cmp(const void *pa, const void *pb)
{
    const struct st_tensor *a = pa, *b = pb;
    if (a->file_offset != b->file_offset)
        return a->file_offset < b->file_offset ? -1 : 1;
    if (a->nbytes != b->nbytes) /* zero-size tensors first, so ties still tile */
        return a->nbytes < b->nbytes ? -1 : 1;
    return strcmp(a->name, b->name);
}

/* Checks that the sorted tensors tile [0, data_size) exactly. */
static int tiling_check(const char *path, const struct st_tensor *ts, size_t n, size_t data_start,
                        size_t data_size)
{
    size_t at = 0; /* relative to the data section */
    for (size_t i = 0; i < n; i++) {
        size_t b = ts[i].file_offset - data_start;
        if (b < at)
            return file_err(path, ERR_FORMAT,
                            "tensor '%s': data_offsets begin at %zu, overlapping tensor '%s' "
                            "which ends at %zu",
                            ts[i].name, b, ts[i - 1].name, at);
        if (b > at) {
            if (i == 0)
                return file_err(path, ERR_FORMAT,
                                "tensor '%s': data_offsets begin at %zu, but the first tensor "
                                "must begin at offset 0 (gap)",
                                ts[i].name, b);
            return file_err(path, ERR_FORMAT,
                            "tensor '%s': data_offsets begin at %zu, leaving a gap after "
                            "tensor '%s' which ends at %zu",
                            ts[i].name, b, ts[i - 1].name, at);
        }
        at = b + ts[i].nbytes;
    }
    if (at != data_size)
        return file_err(path, ERR_FORMAT,
                        "data section has %zu bytes but the tensors' data_offsets end at %zu "
                        "(%zu trailing bytes)",
                        data_size, at, data_size - at);
    return 0;
}

/* Maps and validates the file at `path`. On success *out_tensors (malloc'd, sorted by
 * offset, names pointing into f->names and file into f->path) holds *out_n tensors and
 * f owns the mapping. On failure f holds nothing. */
static int file_load(const char *path, struct st_file *f, struct st_tensor **out_tensors,
                     size_t *out_n)
{
    int rc;
    json_t *root = NULL;
    char *hdr = NULL;
    struct st_tensor *ts = NULL;
    size_t n = 0;

    memset(f, 0, sizeof(*f));
    f->path = strdup(path);
    if (!f->path)
        return err_set(ERR_NOMEM, "out of memory opening %s", path);
    rc = file_map(path, f);
    if (rc)
        goto fail;

    uint64_t hlen = u64_le(f->map);
    if (hlen < 2 || hlen > ST_HEADER_MAX) {
        rc = file_err(path, ERR_FORMAT,
                      "header length %llu is out of bounds (must be 2 to %u bytes)",
                      (unsigned long long)hlen, ST_HEADER_MAX);
        goto fail;
    }
    if (hlen > f->size - 8) {
        rc = file_err(path, ERR_FORMAT,
                      "header length %llu is larger than the file (%zu bytes; truncated?)",
                      (unsigned long long)hlen, f->size);
        goto fail;
    }
    size_t data_start = 8 + (size_t)hlen;
    size_t data_size = f->size - data_start;
    if (f->map[8] != '{') {
        rc = file_err(path, ERR_FORMAT, "header is not a JSON object (does not begin with '{')");
        goto fail;
    }

    /* + 1: __metadata__; the exact count is checked once parsed */
    if (json_members_at((const char *)f->map + 8, (size_t)hlen, 1, ST_MAX_TENSORS + 1) >
        ST_MAX_TENSORS + 1) {
        rc = tensors_max_err(path);
        goto fail;
    }

    /* Parse a NUL-terminated copy, so nothing in the parser can run past the header. */
    hdr = malloc((size_t)hlen + 1);
    if (!hdr) {
        rc = file_err(path, ERR_NOMEM, "out of memory for a %llu-byte header",
                      (unsigned long long)hlen);
        goto fail;
    }
    memcpy(hdr, f->map + 8, (size_t)hlen);
    hdr[hlen] = '\0';
    json_error_t jerr;
    root = json_loadb(hdr, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        char why[JSON_ERROR_TEXT_LENGTH];
        rc = file_err(path, ERR_FORMAT, "header is not valid JSON: %s (line %d, column %d)",
                      jsonout_parse_error(&jerr, why, sizeof(why)), jerr.line, jerr.column);
        goto fail;
    }
    if (!json_is_object(root)) {
        rc = file_err(path, ERR_FORMAT, "header JSON is not an object");
        goto fail;
    }

    /* Names go into one allocation owned by the file. */
    size_t nkeys = json_object_size(root), names_len = 0;
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (strcmp(key, "__metadata__") != 0)
            names_len += strlen(key) + 1;
    }
    if (nkeys - (json_object_get(root, "__metadata__") != NULL) > ST_MAX_TENSORS) {
        rc = tensors_max_err(path);
        goto fail;
    }
    ts = calloc(nkeys ? nkeys : 1, sizeof(*ts));
    f->names = malloc(names_len ? names_len : 1);
    if (!ts || !f->names) {
        rc = file_err(path, ERR_NOMEM, "out of memory for %zu tensors", nkeys);
        goto fail;
    }
    char *np = f->names;
    json_object_foreach(root, key, val) {
        if (strcmp(key, "__metadata__") == 0) {
            rc = metadata_check(path, val);
            if (rc)
                goto fail;
            continue;
        }
        struct st_tensor *t = &ts[n];
        uint64_t begin = 0;
        rc = tensor_parse(path, key, val, data_size, t, &begin);
        if (rc)
            goto fail;
        size_t len = strlen(key) + 1;
        memcpy(np, key, len);
        t->name = np;
        np += len;
        t->file = f->path;
        t->file_offset = data_start + (size_t)begin;
        t->data = f->map + t->file_offset;
        n++;
    }
    qsort(ts, n, sizeof(*ts), tensor_cmp);
    rc = tiling_check(path, ts, n, data_start, data_size);
    if (rc)
        goto fail;

    json_decref(root);
    free(hdr);
    *out_tensors = ts;
    *out_n = n;
    return 0;
fail:
    json_decref(root);
    free(hdr);
    free(ts);
    file_unmap(f);
    memset(f, 0, sizeof(*f));
    return rc;
}

/* ---- checkpoint ------------------------------------------------------------------- */

static uint64_t name_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

/* Indexes every tensor by name; a name in two files is an error. */
static int checkpoint_index(struct st_checkpoint *ck)
{
    size_t cap = 16;
    while (cap < 2 * ck->ntensors)
        cap *= 2;
    ck->slots = calloc(cap, sizeof(*ck->slots));
    if (!ck->slots)
        return err_set(ERR_NOMEM, "out of memory indexing %zu tensors", ck->ntensors);
    ck->nslots = cap;
    for (size_t i = 0; i < ck->ntensors; i++) {
        const struct st_tensor *t = &ck->tensors[i];
        size_t s = (size_t)name_hash(t->name) & (cap - 1);
        while (ck->slots[s]) {
            const struct st_tensor *o = &ck->tensors[ck->slots[s] - 1];
            if (strcmp(o->name, t->name) == 0)
                return err_set(ERR_FORMAT, "tensor '%s' appears in both %s and %s", t->name,
                               o->file, t->file);
            s = (s + 1) & (cap - 1);
        }
        ck->slots[s] = i + 1;
    }
    return 0;
}

/* Loads one file into ck; returns the index of its first tensor in *first. */
static int checkpoint_add_file(struct st_checkpoint *ck, const char *path, size_t *first)
{
    struct st_tensor *ts = NULL;
    size_t n = 0;
    struct st_file f;
    int rc = file_load(path, &f, &ts, &n);
    if (rc)
        return rc;
    if (n > ST_MAX_TENSORS - ck->ntensors) {
        free(ts);
        file_unmap(&f);
        return file_err(path, ERR_UNSUPPORTED,
                        "checkpoint holds more than %d tensors with this shard (expected at "
                        "most %d in all)",
                        ST_MAX_TENSORS, ST_MAX_TENSORS);
    }
    struct st_file *files = realloc(ck->files, (ck->nfiles + 1) * sizeof(*files));
    if (!files)
        goto nomem;
    ck->files = files;
    struct st_tensor *all = realloc(ck->tensors, (ck->ntensors + n + 1) * sizeof(*all));
    if (!all)
        goto nomem;
    ck->tensors = all;
    memcpy(ck->tensors + ck->ntensors, ts, n * sizeof(*ts));
    *first = ck->ntensors;
    ck->ntensors += n;
    ck->files[ck->nfiles++] = f;
    free(ts);
    return 0;
nomem:
    free(ts);
    file_unmap(&f);
    return err_set(ERR_NOMEM, "out of memory loading %s", path);
}

static int str_ptr_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int shard_name_check(const char *index_path, const char *tensor, const char *shard)
{
    if (shard[0] == '\0' || strchr(shard, '/') || strcmp(shard, ".") == 0 ||
        strcmp(shard, "..") == 0)
        return file_err(index_path, ERR_FORMAT,
                        "tensor '%s': shard file name '%s' is not a plain file name beside "
                        "the index",
                        tensor, shard);
    return 0;
}

static int index_load(const char *path, json_t **out)
{
    int fd;
    size_t size;
    char *text = NULL;
    int rc = fs_open_regular(path, &fd, &size);
    if (rc)
        return rc;
    if (size > ST_INDEX_MAX) {
        rc = file_err(path, ERR_UNSUPPORTED, "index is %zu bytes, expected at most %u", size,
                      ST_INDEX_MAX);
        goto out;
    }
    size_t got;
    if ((rc = fs_read_all(fd, path, size, &text, &got)) < 0) /* shrank: parse what is there */
        goto out;
    /* weight_map and metadata members, counted before the parse that costs ~1 kB each */
    if (json_members_at(text, got, 2, ST_MAX_TENSORS) > ST_MAX_TENSORS) {
        rc = file_err(path, ERR_UNSUPPORTED,
                      "index lists more than %d tensors and metadata entries (expected at "
                      "most %d)",
                      ST_MAX_TENSORS, ST_MAX_TENSORS);
        goto out;
    }
    json_error_t jerr;
    *out = json_loadb(text, got, JSON_REJECT_DUPLICATES, &jerr);
    char why[JSON_ERROR_TEXT_LENGTH];
    if (!*out)
        rc = file_err(path, ERR_FORMAT, "index is not valid JSON: %s (line %d, column %d)",
                      jsonout_parse_error(&jerr, why, sizeof(why)), jerr.line, jerr.column);
out:
    free(text);
    close(fd);
    return rc;
}

/* Loads the shards named by the index at `path`, in file-name order, and checks that
 * the weight map and the shards agree exactly. */
static int checkpoint_add_index(struct st_checkpoint *ck, const char *path)
{
    int rc;
    json_t *root = NULL;
    const char **shards = NULL;
    char *shard_path = NULL;

    rc = index_load(path, &root);
    if (rc)
        goto out;
    json_t *map = json_object_get(root, "weight_map");
    if (!json_is_object(root) || !json_is_object(map)) {
        rc = file_err(path, ERR_FORMAT, "index has no \"weight_map\" object");
        goto out;
    }
    json_t *meta = json_object_get(root, "metadata");
    if (meta && !json_is_object(meta)) {
        rc = file_err(path, ERR_FORMAT, "index \"metadata\" is not an object");
        goto out;
    }

    /* Distinct shard names, sorted. */
    size_t nmap = json_object_size(map), nshards = 0;
    if (nmap == 0) {
        rc = file_err(path, ERR_FORMAT, "index's weight_map lists no tensors");
        goto out;
    }
    shards = malloc((nmap ? nmap : 1) * sizeof(*shards));
    if (!shards) {
        rc = err_set(ERR_NOMEM, "out of memory reading %s", path);
        goto out;
    }
    const char *key;
    json_t *val;
    json_object_foreach(map, key, val) {
        if (!json_is_string(val)) {
            rc = file_err(path, ERR_FORMAT, "weight_map entry '%s' is not a string", key);
            goto out;
        }
        rc = shard_name_check(path, key, json_string_value(val));
        if (rc)
            goto out;
        shards[nshards++] = json_string_value(val);
    }
    qsort(shards, nshards, sizeof(*shards), str_ptr_cmp);

    const char *slash = strrchr(path, '/');
    int dir_len = slash ? (int)(slash - path) : 1;
    const char *dir = slash ? path : ".";
    for (size_t i = 0; i < nshards; i++) {
        if (i > 0 && strcmp(shards[i], shards[i - 1]) == 0)
            continue;
        free(shard_path);
        if (asprintf(&shard_path, "%.*s/%s", dir_len, dir, shards[i]) < 0) {
            shard_path = NULL;
            rc = err_set(ERR_NOMEM, "out of memory reading %s", path);
            goto out;
        }
        size_t first = 0;
        rc = checkpoint_add_file(ck, shard_path, &first);
        if (rc) {
            err_wrap(rc, "shard of %s", path);
            goto out;
        }
        for (size_t t = first; t < ck->ntensors; t++) {
            const char *name = ck->tensors[t].name;
            json_t *where = json_object_get(map, name);
            if (!where) {
                rc = file_err(path, ERR_FORMAT,
                              "tensor '%s' is in shard %s but not in the index's weight_map",
                              name, shards[i]);
                goto out;
            }
            if (strcmp(json_string_value(where), shards[i]) != 0) {
                rc = file_err(path, ERR_FORMAT,
                              "tensor '%s' is in shard %s but the weight_map lists it in %s",
                              name, shards[i], json_string_value(where));
                goto out;
            }
        }
    }
    rc = checkpoint_index(ck);
    if (rc)
        goto out;
    /* Every shard tensor is listed under its shard; now every listed tensor must exist. */
    json_object_foreach(map, key, val) {
        if (!st_find(ck, key)) {
            rc = file_err(path, ERR_NOT_FOUND,
                          "tensor '%s' is listed in shard %s, but that shard has no such "
                          "tensor",
                          key, json_string_value(val));
            goto out;
        }
    }
out:
    free(shard_path);
    free(shards);
    json_decref(root);
    return rc;
}

/* Whether path exists: 1 if so, 0 if not, an error when it exists but is not a
 * regular file (a FIFO or directory named like a checkpoint file is a mistake to
 * report, not a reason to look elsewhere). */
static int probe_regular(const char *path)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return 0;
    if (!S_ISREG(sb.st_mode))
        return file_err(path, ERR_IO, "is %s, expected a regular file", fs_kind_name(sb.st_mode));
    return 1;
}

/* The error for a directory without safetensors weights: one holding
 * PyTorch pickles (pytorch_model.bin, sharded or not) is pointed at the
 * converter, since those are what many checkpoints still ship. */
static int missing_err(const char *dir)
{
    static const char *const pickles[] = {"pytorch_model.bin", "pytorch_model.bin.index.json"};
    for (size_t i = 0; i < sizeof(pickles) / sizeof(pickles[0]); i++) {
        char *p = NULL;
        if (asprintf(&p, "%s/%s", dir, pickles[i]) < 0)
            return err_set(ERR_NOMEM, "out of memory opening %s", dir);
        bool found = access(p, F_OK) == 0;
        free(p);
        if (found)
            return file_err(dir, ERR_UNSUPPORTED,
                            "holds %s (PyTorch pickle weights), which shardswap does not read: "
                            "convert it with `python3 tools/to_safetensors.py --model %s --out "
                            "NEW_DIR`",
                            pickles[i], dir);
    }
    return file_err(dir, ERR_NOT_FOUND,
                    "no checkpoint in this directory (a .gguf file counts only where there is "
                    "no config.json; looked for " ST_INDEX_NAME " and " ST_SINGLE_NAME ")");
}

static int has_suffix(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* A GGUF file (or split set) as a checkpoint: its tensors under transformers'
 * names (format/gguf_hf.h), the files listed for st_check, the mappings
 * left to the GGUF reader. */
static int checkpoint_add_gguf(struct st_checkpoint *ck, const char *path)
{
    int rc = gguf_open(path, &ck->gguf);
    if (rc < 0)
        return rc;
    const struct gguf_file *g = ck->gguf;
    size_t nf = gguf_file_count(g), nt = gguf_tensor_count(g);
    ck->files = calloc(nf, sizeof(*ck->files));
    ck->tensors = calloc(nt + 1, sizeof(*ck->tensors));
    char *names = malloc(nt * sizeof(((struct gguf_hf_tensor *)0)->name) + 1);
    if (!ck->files || !ck->tensors || !names) {
        free(names);
        return err_set(ERR_NOMEM, "out of memory loading %s", path);
    }
    ck->files[0].names = names;
    ck->nfiles = nf;
    for (size_t i = 0; i < nf; i++) {
        struct st_file *f = &ck->files[i];
        const char *p;
        uint64_t dev, ino;
        gguf_file_info(g, i, &p, &f->size, &dev, &ino);
        f->dev = (dev_t)dev;
        f->ino = (ino_t)ino;
        if (!(f->path = strdup(p)))
            return err_set(ERR_NOMEM, "out of memory loading %s", path);
    }
    for (size_t i = 0; i < nt; i++) {
        const struct gguf_tensor *gt = gguf_tensor_get(g, i);
        struct st_tensor *t = &ck->tensors[i];
        struct gguf_hf_tensor hf;
        if ((rc = gguf_hf_tensor_map(g, gt, &hf)) < 0)
            return rc;
        size_t len = strlen(hf.name) + 1;
        memcpy(names, hf.name, len);
        t->name = names;
        names += len;
        t->file = gt->file;
        t->rope_perm_heads = hf.rope_perm_heads;
        if ((rc = gguf_hf_dtype(gt, &t->dtype)) < 0)
            return rc;
        t->ndim = gt->ndim;
        for (int d = 0; d < gt->ndim; d++) /* GGUF lists the innermost dimension first */
            t->shape[d] = (int64_t)gt->ne[gt->ndim - 1 - d];
        t->numel = (size_t)gt->nelem;
        t->nbytes = gt->nbytes;
        t->file_offset = gt->file_offset;
        t->data = gt->data;
    }
    ck->ntensors = nt;
    return checkpoint_index(ck); /* two GGUF names for one tensor: "appears in both" */
}

/* Loads a file path: an index (*.json) or one safetensors file. */
static int checkpoint_add_path(struct st_checkpoint *ck, const char *path)
{
    if (has_suffix(path, ".json"))
        return checkpoint_add_index(ck, path);
    size_t first = 0;
    int rc = checkpoint_add_file(ck, path, &first);
    return rc ? rc : checkpoint_index(ck);
}

/* A compressed-tensors checkpoint: config.json in dir says how its quantized
 * tensors read (format/ct.h); each weight's tensors become one tensor of a CT
 * block type. Without a quantization_config, a tensor of a raw type is
 * refused here, naming it. */
static int checkpoint_quant(struct st_checkpoint *ck, const char *dir)
{
    bool raw = false;
    for (size_t i = 0; i < ck->ntensors; i++)
        raw |= ck->tensors[i].raw != ST_RAW_NONE;
    json_t *root = NULL;
    char cpath[4096];
    struct ct_config *c = NULL;
    /* a config.json that cannot be read is the config loader's to report */
    if (hf_json_load(dir, "config.json", true, &root, cpath, sizeof(cpath)) == 0) {
        int rc = ct_config_parse(root, cpath, &c);
        json_decref(root);
        if (rc < 0)
            return rc;
    }
    if (!c && !raw)
        return 0;
    struct st_tensor *ts;
    size_t n;
    void *owned;
    int rc = ct_wrap(c, ck->tensors, ck->ntensors, &ts, &n, &owned);
    if (rc < 0) {
        ct_config_free(c);
        return rc;
    }
    free(ck->tensors);
    free(ck->slots);
    ck->tensors = ts;
    ck->ntensors = n;
    ck->slots = NULL;
    ck->ct = c;
    ck->ct_owned = owned;
    return checkpoint_index(ck);
}

/* The directory that holds path (a directory itself, or a file's). */
static char *dir_of(const char *path, bool is_dir)
{
    if (is_dir)
        return strdup(path);
    const char *slash = strrchr(path, '/');
    return slash ? strndup(path, (size_t)(slash - path) + (slash == path)) : strdup(".");
}

int st_open(const char *path, struct st_checkpoint **out)
{
    int rc;
    char *sub = NULL;
    assert(path && out);
    *out = NULL;
    struct st_checkpoint *ck = calloc(1, sizeof(*ck));
    if (!ck)
        return err_set(ERR_NOMEM, "out of memory opening %s", path);

    struct stat sb;
    if (stat(path, &sb) != 0) {
        rc = open_err(path, "open checkpoint");
        goto fail;
    }
    if (gguf_is_checkpoint(path)) {
        rc = checkpoint_add_gguf(ck, path);
    } else if (S_ISDIR(sb.st_mode)) {
        if (asprintf(&sub, "%s/%s", path, ST_INDEX_NAME) < 0) {
            sub = NULL;
            rc = err_set(ERR_NOMEM, "out of memory opening %s", path);
            goto fail;
        }
        rc = probe_regular(sub);
        if (rc < 0)
            goto fail;
        if (rc == 0) {
            free(sub);
            if (asprintf(&sub, "%s/%s", path, ST_SINGLE_NAME) < 0) {
                sub = NULL;
                rc = err_set(ERR_NOMEM, "out of memory opening %s", path);
                goto fail;
            }
            rc = probe_regular(sub);
            if (rc < 0)
                goto fail;
            if (rc == 0) {
                rc = missing_err(path);
                goto fail;
            }
        }
        rc = checkpoint_add_path(ck, sub);
    } else {
        rc = checkpoint_add_path(ck, path);
    }
    if (rc == 0 && !ck->gguf) {
        char *dir = dir_of(path, S_ISDIR(sb.st_mode));
        rc = dir ? checkpoint_quant(ck, dir) : err_set(ERR_NOMEM, "out of memory");
        free(dir);
    }
    if (rc)
        goto fail;
    free(sub);
    *out = ck;
    return 0;
fail:
    free(sub);
    st_close(ck);
    return rc;
}

void st_close(struct st_checkpoint *ck)
{
    if (!ck)
        return;
    for (size_t i = 0; i < ck->nfiles; i++)
        file_unmap(&ck->files[i]);
    free(ck->files);
    free(ck->tensors);
    free(ck->slots);
    gguf_close(ck->gguf);
    ct_config_free(ck->ct);
    free(ck->ct_owned);
    free(ck);
}

size_t st_count(const struct st_checkpoint *ck)
{
    return ck->ntensors;
}

const struct st_tensor *st_get(const struct st_checkpoint *ck, size_t i)
{
    return i < ck->ntensors ? &ck->tensors[i] : NULL;
}

const struct st_tensor *st_find(const struct st_checkpoint *ck, const char *name)
{
    if (!ck->slots)
        return NULL;
    size_t s = (size_t)name_hash(name) & (ck->nslots - 1);
    while (ck->slots[s]) {
        const struct st_tensor *t = &ck->tensors[ck->slots[s] - 1];
        if (strcmp(t->name, name) == 0)
            return t;
        s = (s + 1) & (ck->nslots - 1);
    }
    return NULL;
}

int st_check(const struct st_checkpoint *ck)
{
    for (size_t i = 0; i < ck->nfiles; i++) {
        const struct st_file *f = &ck->files[i];
        struct stat sb;
        /* gone or replaced (renamed over): the mapping still holds the old file */
        if (stat(f->path, &sb) != 0 || sb.st_dev != f->dev || sb.st_ino != f->ino)
            continue;
        if ((uint64_t)sb.st_size < f->size)
            return file_err(f->path, ERR_IO,
                            "truncated while in use: %llu bytes now, %zu when it was opened "
                            "(restore it, then remove and add the model again)",
                            (unsigned long long)sb.st_size, f->size);
    }
    return 0;
}

size_t st_file_count(const struct st_checkpoint *ck)
{
    return ck->nfiles;
}

const char *st_format(const struct st_checkpoint *ck)
{
    return ck->gguf ? "gguf" : ck->ct ? "compressed-tensors" : "safetensors";
}

const char *st_ct_format(const struct st_checkpoint *ck)
{
    return ck->ct ? ct_config_format(ck->ct) : NULL;
}

const struct gguf_file *st_gguf(const struct st_checkpoint *ck)
{
    return ck->gguf;
}
