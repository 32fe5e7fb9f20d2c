/* GGUF reader.
 *
 * File layout (little-endian throughout; version 2 and 3, which differ from
 * version 1 in 64-bit counts and lengths):
 *
 *   u32  magic "GGUF" (bytes 47 47 55 46)
 *   u32  version (2 or 3)
 *   u64  tensor count T
 *   u64  metadata count K
 *   K x  metadata entry:  string key, u32 value type, value
 *   T x  tensor info:     string name, u32 n_dims (1..4), n_dims x u64 ne (ne[0] innermost),
 *                         u32 ggml type, u64 offset (relative to the data section)
 *        padding to the alignment
 *        the data section: tensors at their offsets
 *
 *   string   u64 length n, n bytes (UTF-8, no NUL)
 *   value    by type: u8 i8 u16 i16 u32 i32 f32 (4 bytes) bool (1 byte, 0 or 1) string
 *            u64 i64 f64; array: u32 element type, u64 count, count elements (not arrays)
 *
 * The alignment is general.alignment (a u32 power of two) or 32. A tensor of
 * type t with ne[0..3] takes ne[0] / block(t) * block_bytes(t) * ne[1] * ne[2] * ne[3]
 * bytes (ne[0] a multiple of the block), at an offset that is a multiple of the
 * alignment.
 *
 * Rules we enforce, so that a truncated, corrupt or hostile file is an error and never
 * an out-of-bounds read or a huge allocation: every read is checked against the bytes
 * left; counts are capped (GGUF_MAX_KV entries, GGUF_MAX_TENSORS tensors,
 * GGUF_MAX_STRS strings in arrays over the file) before anything is allocated from
 * them; keys and names are at most GGUF_MAX_NAME bytes, without NUL; keys and tensor
 * names are unique; a bool is 0 or 1; the type of every tensor is a known ggml type;
 * dimension products do not overflow; every tensor lies inside the file and no two
 * overlap. Split sets: the parts NAME-0000i-of-0000N.gguf (N <= GGUF_MAX_SPLITS) sit
 * side by side, the first carries the metadata (split.count, when present, must be
 * N), and a tensor name is unique across the set.
 *
 * The files are mapped read-only and private; descriptors are closed after mapping.
 * Truncation while mapped is the caller's to check (gguf_file_info) and guard, as for
 * safetensors (safetensors.h).
 */
#include "format/gguf.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/fs.h"

#define GGUF_MAGIC 0x46554747u
#define GGUF_MAX_KV 65536
#define GGUF_MAX_TENSORS 65536
#define GGUF_MAX_STRS (1u << 22) /* strings in arrays, over a file: vocabularies, merges */
#define GGUF_MAX_NAME 65535
#define GGUF_MAX_SPLITS 1000
#define GGUF_DEFAULT_ALIGN 32
#define GGUF_MAX_ALIGN (1u << 20)

_Static_assert(SIZE_MAX >= UINT64_MAX, "offsets and sizes are read as 64-bit sizes");

static const struct ggml_type_info type_infos[] = {
    [GGML_TYPE_F32] = {"F32", 1, 4},
    [GGML_TYPE_F16] = {"F16", 1, 2},
    [GGML_TYPE_Q4_0] = {"Q4_0", 32, 18},
    [GGML_TYPE_Q4_1] = {"Q4_1", 32, 20},
    [GGML_TYPE_Q5_0] = {"Q5_0", 32, 22},
    [GGML_TYPE_Q5_1] = {"Q5_1", 32, 24},
    [GGML_TYPE_Q8_0] = {"Q8_0", 32, 34},
    [GGML_TYPE_Q8_1] = {"Q8_1", 32, 36},
    [GGML_TYPE_Q2_K] = {"Q2_K", 256, 84},
    [GGML_TYPE_Q3_K] = {"Q3_K", 256, 110},
    [GGML_TYPE_Q4_K] = {"Q4_K", 256, 144},
    [GGML_TYPE_Q5_K] = {"Q5_K", 256, 176},
    [GGML_TYPE_Q6_K] = {"Q6_K", 256, 210},
    [GGML_TYPE_Q8_K] = {"Q8_K", 256, 292},
    [GGML_TYPE_IQ2_XXS] = {"IQ2_XXS", 256, 66},
    [GGML_TYPE_IQ2_XS] = {"IQ2_XS", 256, 74},
    [GGML_TYPE_IQ3_XXS] = {"IQ3_XXS", 256, 98},
    [GGML_TYPE_IQ1_S] = {"IQ1_S", 256, 50},
    [GGML_TYPE_IQ4_NL] = {"IQ4_NL", 32, 18},
    [GGML_TYPE_IQ3_S] = {"IQ3_S", 256, 110},
    [GGML_TYPE_IQ2_S] = {"IQ2_S", 256, 82},
    [GGML_TYPE_IQ4_XS] = {"IQ4_XS", 256, 136},
    [GGML_TYPE_I8] = {"I8", 1, 1},
    [GGML_TYPE_I16] = {"I16", 1, 2},
    [GGML_TYPE_I32] = {"I32", 1, 4},
    [GGML_TYPE_I64] = {"I64", 1, 8},
    [GGML_TYPE_F64] = {"F64", 1, 8},
    [GGML_TYPE_IQ1_M] = {"IQ1_M", 256, 56},
    [GGML_TYPE_BF16] = {"BF16", 1, 2},
    [GGML_TYPE_TQ1_0] = {"TQ1_0", 256, 54},
    [GGML_TYPE_TQ2_0] = {"TQ2_0", 256, 66},
    [GGML_TYPE_MXFP4] = {"MXFP4", 32, 17},
    [GGML_TYPE_NVFP4] = {"NVFP4", 64, 36},
    [GGML_TYPE_Q1_0] = {"Q1_0", 128, 18},
    [GGML_TYPE_Q2_0] = {"Q2_0", 64, 18},
};

const struct ggml_type_info *ggml_type_info(uint32_t type)
{
    if (type >= sizeof(type_infos) / sizeof(type_infos[0]) || !type_infos[type].name)
        return NULL;
    return &type_infos[type];
}

/* bytes of a scalar of each value type (0: string, array) */
static const uint8_t vsize[] = {
    [GGUF_U8] = 1,  [GGUF_I8] = 1,  [GGUF_U16] = 2,  [GGUF_I16] = 2, [GGUF_U32] = 4,
    [GGUF_I32] = 4, [GGUF_F32] = 4, [GGUF_BOOL] = 1, [GGUF_STR] = 0, [GGUF_ARR] = 0,
    [GGUF_U64] = 8, [GGUF_I64] = 8, [GGUF_F64] = 8,
};

static const char *const vnames[] = {
    [GGUF_U8] = "u8",      [GGUF_I8] = "i8",     [GGUF_U16] = "u16", [GGUF_I16] = "i16",
    [GGUF_U32] = "u32",    [GGUF_I32] = "i32",   [GGUF_F32] = "f32", [GGUF_BOOL] = "bool",
    [GGUF_STR] = "string", [GGUF_ARR] = "array", [GGUF_U64] = "u64", [GGUF_I64] = "i64",
    [GGUF_F64] = "f64",
};

const char *gguf_vtype_name(enum gguf_vtype t)
{
    return (unsigned)t <= GGUF_F64 ? vnames[t] : "unknown";
}

struct gguf_kv {
    struct gguf_str key;
    enum gguf_vtype type;
    enum gguf_vtype arr_type;    /* arrays */
    uint64_t arr_len;            /* arrays */
    const uint8_t *val;          /* a scalar's bytes, or an array's first element */
    struct gguf_str str;         /* a string's value */
    const struct gguf_str *strs; /* a string array's elements (into the part's pool) */
    const char *path;            /* for messages */
};

/* One mapped file of the set. */
struct gguf_part {
    char *path;
    const uint8_t *map;
    size_t size;
    uint64_t dev, ino;
    struct gguf_kv *kvs;
    size_t nkv;
    struct gguf_str *strs; /* every string-array element of this file */
    size_t nstrs;
    size_t first_tensor, ntensors; /* in gguf_file.tensors */
};

struct gguf_file {
    struct gguf_part *parts;
    size_t nparts;
    uint32_t version;
    size_t alignment;
    const struct gguf_kv **kv_sorted; /* parts[0]'s entries by key */
    struct gguf_tensor *tensors;
    size_t ntensors;
    char *names;                        /* every tensor name, NUL-terminated */
    const struct gguf_tensor **by_name; /* tensors sorted by name */
};

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

/* ---- reading with bounds ---- */

struct cur {
    const uint8_t *p;
    size_t size, off;
    const char *path;
    const char *what; /* the item being read, for messages */
};

static uint64_t le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static int need(struct cur *c, uint64_t n)
{
    if (n > c->size - c->off)
        return file_err(c->path, ERR_FORMAT,
                        "%s: needs %llu bytes at offset %zu, past the end of the file (%zu bytes; "
                        "truncated?)",
                        c->what, (unsigned long long)n, c->off, c->size);
    return 0;
}

static int rd(struct cur *c, int n, uint64_t *v)
{
    int rc = need(c, (uint64_t)n);
    if (rc)
        return rc;
    *v = le(c->p + c->off, n);
    c->off += (size_t)n;
    return 0;
}

static int rd_str(struct cur *c, struct gguf_str *s, uint64_t max)
{
    uint64_t n;
    int rc = rd(c, 8, &n);
    if (rc)
        return rc;
    if (n > max)
        return file_err(c->path, ERR_FORMAT, "%s: string length %llu exceeds %llu bytes", c->what,
                        (unsigned long long)n, (unsigned long long)max);
    if ((rc = need(c, n)))
        return rc;
    s->p = (const char *)c->p + c->off;
    s->n = (size_t)n;
    c->off += (size_t)n;
    return 0;
}

/* A key or tensor name: 1..GGUF_MAX_NAME bytes, no NUL. */
static int rd_name(struct cur *c, struct gguf_str *s)
{
    int rc = rd_str(c, s, GGUF_MAX_NAME);
    if (rc)
        return rc;
    if (s->n == 0 || memchr(s->p, 0, s->n))
        return file_err(c->path, ERR_FORMAT, "%s: name at offset %zu is empty or holds a NUL byte",
                        c->what, c->off - s->n);
    return 0;
}

/* ---- one part ---- */

static int part_map(const char *path, struct gguf_part *f)
{
    struct fs_map m;
    int rc = fs_map_regular(path, 24, &m);
    if (rc)
        return rc;
    if (!m.data)
        return file_err(path, ERR_FORMAT,
                        "file is %zu bytes, too short for a GGUF header (24 bytes; empty or "
                        "truncated)",
                        m.size);
    f->map = m.data;
    f->size = m.size;
    f->dev = m.dev;
    f->ino = m.ino;
    return 0;
}

static void part_free(struct gguf_part *f)
{
    fs_unmap(f->map, f->size);
    free(f->kvs);
    free(f->strs);
    free(f->path);
}

/* One entry's value at c; string-array elements go to f->strs from *strs_used when
 * fill (a first pass only counts them, to size the pool). */
static int kv_value(struct cur *c, struct gguf_kv *kv, struct gguf_part *f, size_t *strs_used,
                    bool fill)
{
    uint64_t t;
    int rc = rd(c, 4, &t);
    if (rc)
        return rc;
    if (t > GGUF_F64)
        return file_err(c->path, ERR_FORMAT, "%s: unknown value type %llu", c->what,
                        (unsigned long long)t);
    kv->type = (enum gguf_vtype)t;
    if (t == GGUF_STR)
        return rd_str(c, &kv->str, c->size);
    if (t != GGUF_ARR) {
        if ((rc = need(c, vsize[t])))
            return rc;
        kv->val = c->p + c->off;
        if (t == GGUF_BOOL && kv->val[0] > 1)
            return file_err(c->path, ERR_FORMAT, "%s: bool value %u is not 0 or 1", c->what,
                            kv->val[0]);
        c->off += vsize[t];
        return 0;
    }
    uint64_t et, n;
    if ((rc = rd(c, 4, &et)) || (rc = rd(c, 8, &n)))
        return rc;
    if (et > GGUF_F64 || et == GGUF_ARR)
        return file_err(c->path, ERR_FORMAT, "%s: array element type %llu is %s", c->what,
                        (unsigned long long)et,
                        et == GGUF_ARR ? "an array (nested arrays are not supported)" : "unknown");
    kv->arr_type = (enum gguf_vtype)et;
    kv->arr_len = n;
    kv->val = c->p + c->off;
    if (et != GGUF_STR) {
        /* n * size without overflow: n is checked against the bytes left first */
        if (n > (c->size - c->off) / vsize[et])
            return file_err(c->path, ERR_FORMAT,
                            "%s: array of %llu %s elements runs past the end of the file (%zu "
                            "bytes; truncated?)",
                            c->what, (unsigned long long)n, vnames[et], c->size);
        if (et == GGUF_BOOL)
            for (uint64_t i = 0; i < n; i++)
                if (kv->val[i] > 1)
                    return file_err(c->path, ERR_FORMAT, "%s: bool element %llu is %u, not 0 or 1",
                                    c->what, (unsigned long long)i, kv->val[i]);
        c->off += (size_t)n * vsize[et];
        return 0;
    }
    /* strings: each at least 8 bytes, so n is bounded by the file before the cap */
    if (n > (c->size - c->off) / 8)
        return file_err(c->path, ERR_FORMAT,
                        "%s: array of %llu strings runs past the end of the file (%zu bytes; "
                        "truncated?)",
                        c->what, (unsigned long long)n, c->size);
    if (n > GGUF_MAX_STRS - *strs_used)
        return file_err(c->path, ERR_UNSUPPORTED,
                        "%s: string arrays hold more than %u strings in all", c->what,
                        GGUF_MAX_STRS);
    if (fill)
        kv->strs = f->strs + *strs_used;
    for (uint64_t i = 0; i < n; i++) {
        struct gguf_str s;
        if ((rc = rd_str(c, &s, c->size)))
            return rc;
        if (fill)
            f->strs[*strs_used + i] = s;
    }
    *strs_used += (size_t)n;
    return 0;
}

/* Reads the metadata entries from c->off (twice: counting strings, then filling). */
static int kvs_read(struct cur *c, struct gguf_part *f, uint64_t nkv, bool fill)
{
    size_t used = 0;
    char what[160];
    for (uint64_t i = 0; i < nkv; i++) {
        struct gguf_kv tmp = {0}, *kv = fill ? &f->kvs[i] : &tmp;
        snprintf(what, sizeof(what), "metadata entry %llu", (unsigned long long)i);
        c->what = what;
        int rc = rd_name(c, &kv->key);
        if (rc)
            return rc;
        snprintf(what, sizeof(what), "metadata key '%.*s'", kv->key.n > 100 ? 100 : (int)kv->key.n,
                 kv->key.p);
        if ((rc = kv_value(c, kv, f, &used, fill)))
            return rc;
        kv->path = f->path;
    }
    f->nstrs = used;
    return 0;
}

static int str_cmp(struct gguf_str a, struct gguf_str b)
{
    int r = memcmp(a.p, b.p, a.n < b.n ? a.n : b.n);
    return r ? r : (a.n > b.n) - (a.n < b.n);
}

static int kvp_cmp(const void *pa, const void *pb)
{
    const struct gguf_kv *a = *(const struct gguf_kv *const *)pa,
                         *b = *(const struct gguf_kv *const *)pb;
    return str_cmp(a->key, b->key);
}

static const struct gguf_kv *part_find(const struct gguf_part *f, const char *key)
{
    for (size_t i = 0; i < f->nkv; i++)
        if (f->kvs[i].key.n == strlen(key) && memcmp(f->kvs[i].key.p, key, f->kvs[i].key.n) == 0)
            return &f->kvs[i];
    return NULL;
}

/* The tensor infos from c->off into g->tensors[first...]; names copied to *names_at. */
static int infos_read(struct cur *c, struct gguf_part *f, struct gguf_file *g, uint64_t nt,
                      char **names_at)
{
    char what[160];
    for (uint64_t i = 0; i < nt; i++) {
        struct gguf_tensor *t = &g->tensors[f->first_tensor + i];
        struct gguf_str name;
        uint64_t nd, type, off;
        snprintf(what, sizeof(what), "tensor info %llu", (unsigned long long)i);
        c->what = what;
        int rc = rd_name(c, &name);
        if (rc)
            return rc;
        memcpy(*names_at, name.p, name.n);
        (*names_at)[name.n] = '\0';
        t->name = *names_at;
        *names_at += name.n + 1;
        t->file = f->path;
        snprintf(what, sizeof(what), "tensor '%.100s'", t->name);
        if ((rc = rd(c, 4, &nd)))
            return rc;
        if (nd < 1 || nd > GGUF_MAX_DIMS)
            return file_err(c->path, ERR_FORMAT, "%s: %llu dimensions (expected 1 to %d)", what,
                            (unsigned long long)nd, GGUF_MAX_DIMS);
        t->ndim = (int)nd;
        uint64_t nelem = 1;
        bool overflow = false;
        for (int d = 0; d < GGUF_MAX_DIMS; d++) {
            t->ne[d] = 1;
            if (d < t->ndim && (rc = rd(c, 8, &t->ne[d])))
                return rc;
            if (t->ne[d] > INT64_MAX)
                return file_err(c->path, ERR_FORMAT, "%s: dimension %d is %llu", what, d,
                                (unsigned long long)t->ne[d]);
            overflow |= __builtin_mul_overflow(nelem, t->ne[d], &nelem);
        }
        if ((rc = rd(c, 4, &type)) || (rc = rd(c, 8, &off)))
            return rc;
        const struct ggml_type_info *ti = ggml_type_info((uint32_t)type);
        if (type > UINT32_MAX || !ti)
            return file_err(c->path, ERR_FORMAT, "%s: unknown ggml type %llu", what,
                            (unsigned long long)type);
        t->type = (uint32_t)type;
        if (t->ne[0] % ti->block)
            return file_err(c->path, ERR_FORMAT,
                            "%s: row length %llu is not a multiple of %s's block of %u", what,
                            (unsigned long long)t->ne[0], ti->name, ti->block);
        uint64_t bytes = t->ne[0] / ti->block * ti->block_bytes;
        for (int d = 1; d < GGUF_MAX_DIMS; d++)
            overflow |= __builtin_mul_overflow(bytes, t->ne[d], &bytes);
        if (overflow)
            return file_err(c->path, ERR_FORMAT, "%s: the shape's size overflows 64 bits", what);
        t->nelem = nelem;
        t->nbytes = (size_t)bytes;
        t->file_offset = (size_t)off; /* relative until the data section is known */
    }
    return 0;
}

static int off_cmp(const void *pa, const void *pb)
{
    const struct gguf_tensor *a = *(const struct gguf_tensor *const *)pa,
                             *b = *(const struct gguf_tensor *const *)pb;
    if (a->file_offset != b->file_offset)
        return a->file_offset < b->file_offset ? -1 : 1;
    return (a->nbytes > b->nbytes) - (a->nbytes < b->nbytes);
}

/* Places part f's tensors at data_start, checking alignment, bounds and overlap. */
static int tensors_place(struct gguf_file *g, struct gguf_part *f, size_t data_start)
{
    size_t n = f->ntensors;
    struct gguf_tensor *ts = g->tensors + f->first_tensor;
    const struct gguf_tensor **order = malloc((n ? n : 1) * sizeof(*order));
    if (!order)
        return err_set(ERR_NOMEM, "out of memory reading %s", f->path);
    int rc = 0;
    size_t data_size = f->size - data_start;
    for (size_t i = 0; i < n; i++) {
        struct gguf_tensor *t = &ts[i];
        if (t->file_offset % g->alignment) {
            rc = file_err(f->path, ERR_FORMAT,
                          "tensor '%s': offset %zu is not a multiple of the alignment %zu", t->name,
                          t->file_offset, g->alignment);
            goto out;
        }
        if (t->file_offset > data_size || t->nbytes > data_size - t->file_offset) {
            rc = file_err(f->path, ERR_FORMAT,
                          "tensor '%s': %zu bytes at data offset %zu run past the end of the "
                          "file (the data section has %zu bytes; truncated?)",
                          t->name, t->nbytes, t->file_offset, data_size);
            goto out;
        }
        order[i] = t;
    }
    qsort(order, n, sizeof(*order), off_cmp);
    for (size_t i = 1; i < n; i++)
        if (order[i - 1]->file_offset + order[i - 1]->nbytes > order[i]->file_offset &&
            order[i]->nbytes) {
            rc = file_err(f->path, ERR_FORMAT,
                          "tensor '%s' (data offset %zu) overlaps tensor '%s' (data offsets "
                          "%zu to %zu)",
                          order[i]->name, order[i]->file_offset, order[i - 1]->name,
                          order[i - 1]->file_offset,
                          order[i - 1]->file_offset + order[i - 1]->nbytes);
            goto out;
        }
    for (size_t i = 0; i < n; i++) {
        ts[i].file_offset += data_start;
        ts[i].data = f->map + ts[i].file_offset;
    }
out:
    free(order);
    return rc;
}

/* Header and counts of one mapped part; *nt, *nkv its counts, c past them. */
static int header_read(struct cur *c, uint32_t *version, uint64_t *nt, uint64_t *nkv)
{
    uint64_t magic, v;
    c->what = "header";
    int rc = rd(c, 4, &magic);
    if (rc)
        return rc;
    if (magic != GGUF_MAGIC)
        return file_err(c->path, ERR_FORMAT,
                        "not a GGUF file (the first bytes are %02x %02x %02x %02x, expected "
                        "\"GGUF\")",
                        c->p[0], c->p[1], c->p[2], c->p[3]);
    if ((rc = rd(c, 4, &v)))
        return rc;
    if (v == 1)
        return file_err(c->path, ERR_UNSUPPORTED,
                        "GGUF version 1 is not supported (expected 2 or 3; convert it again)");
    if (v != 2 && v != 3)
        return file_err(c->path, ERR_UNSUPPORTED, "GGUF version %llu%s (expected 2 or 3)",
                        (unsigned long long)v,
                        (v & 0xffff) == 0 ? ", a big-endian file? (only little-endian is read)"
                                          : "");
    *version = (uint32_t)v;
    if ((rc = rd(c, 8, nt)) || (rc = rd(c, 8, nkv)))
        return rc;
    if (*nt > GGUF_MAX_TENSORS)
        return file_err(c->path, ERR_UNSUPPORTED, "header lists %llu tensors (at most %d)",
                        (unsigned long long)*nt, GGUF_MAX_TENSORS);
    if (*nkv > GGUF_MAX_KV)
        return file_err(c->path, ERR_UNSUPPORTED, "header lists %llu metadata entries (at most %d)",
                        (unsigned long long)*nkv, GGUF_MAX_KV);
    /* each entry takes at least 13 bytes, each tensor info 28 */
    if (*nkv * 13 + *nt * 28 > c->size - c->off)
        return file_err(c->path, ERR_FORMAT,
                        "header lists %llu metadata entries and %llu tensors, more than the "
                        "file's %zu bytes can hold (truncated?)",
                        (unsigned long long)*nkv, (unsigned long long)*nt, c->size);
    return 0;
}

/* Maps and reads part f (its path set), appending its tensors to g. */
static int part_load(struct gguf_file *g, struct gguf_part *f, bool first)
{
    int rc = part_map(f->path, f);
    if (rc)
        return rc;
    struct cur c = {.p = f->map, .size = f->size, .path = f->path};
    uint32_t version = 0;
    uint64_t nt = 0, nkv = 0;
    if ((rc = header_read(&c, &version, &nt, &nkv)))
        return rc;
    if (first)
        g->version = version;
    size_t kv_at = c.off;
    if ((rc = kvs_read(&c, f, nkv, false)))
        return rc;
    f->kvs = calloc(nkv ? (size_t)nkv : 1, sizeof(*f->kvs));
    f->strs = malloc((f->nstrs ? f->nstrs : 1) * sizeof(*f->strs));
    if (!f->kvs || !f->strs)
        return err_set(ERR_NOMEM, "out of memory reading %s", f->path);
    f->nkv = (size_t)nkv;
    c.off = kv_at;
    if ((rc = kvs_read(&c, f, nkv, true)))
        return rc;

    if (first) {
        g->alignment = GGUF_DEFAULT_ALIGN;
        const struct gguf_kv *a = part_find(f, "general.alignment");
        if (a) {
            uint64_t v = a->type == GGUF_U32 ? le(a->val, 4) : 0;
            if (a->type != GGUF_U32 || v == 0 || (v & (v - 1)) || v > GGUF_MAX_ALIGN)
                return file_err(f->path, ERR_FORMAT,
                                "general.alignment must be a u32 power of two up to %u (it is "
                                "a %s%s%llu)",
                                GGUF_MAX_ALIGN, vnames[a->type], a->type == GGUF_U32 ? " " : "",
                                a->type == GGUF_U32 ? (unsigned long long)v : 0ull);
            g->alignment = (size_t)v;
        }
    }

    /* tensor infos: names need one allocation sized by a first pass */
    size_t info_at = c.off, name_bytes = 0;
    for (uint64_t i = 0; i < nt; i++) {
        struct gguf_str s;
        uint64_t nd;
        c.what = "tensor info";
        if ((rc = rd_name(&c, &s)) || (rc = rd(&c, 4, &nd)))
            return rc;
        if (nd < 1 || nd > GGUF_MAX_DIMS)
            return file_err(f->path, ERR_FORMAT,
                            "tensor '%.*s': %llu dimensions (expected 1 to %d)",
                            s.n > 100 ? 100 : (int)s.n, s.p, (unsigned long long)nd, GGUF_MAX_DIMS);
        if ((rc = need(&c, nd * 8 + 12)))
            return rc;
        c.off += (size_t)nd * 8 + 12;
        name_bytes += s.n + 1;
    }
    size_t old = g->ntensors;
    struct gguf_tensor *nts = realloc(g->tensors, (old + nt ? old + nt : 1) * sizeof(*nts));
    if (!nts)
        return err_set(ERR_NOMEM, "out of memory reading %s", f->path);
    g->tensors = nts;
    memset(nts + old, 0, (size_t)nt * sizeof(*nts));
    f->first_tensor = old;
    f->ntensors = (size_t)nt;
    g->ntensors = old + (size_t)nt;
    /* names of earlier parts are re-pointed after the realloc */
    size_t used = 0;
    for (size_t i = 0; i < old; i++)
        used += strlen(g->tensors[i].name) + 1;
    char *names = malloc(used + name_bytes + 1);
    if (!names)
        return err_set(ERR_NOMEM, "out of memory reading %s", f->path);
    char *at = names;
    for (size_t i = 0; i < old; i++) {
        size_t len = strlen(g->tensors[i].name) + 1;
        memcpy(at, g->tensors[i].name, len);
        g->tensors[i].name = at;
        at += len;
    }
    free(g->names);
    g->names = names;
    c.off = info_at;
    if ((rc = infos_read(&c, f, g, nt, &at)))
        return rc;
    size_t data_start = (c.off + g->alignment - 1) / g->alignment * g->alignment;
    /* a file without tensors may end right after its metadata, unpadded
     * (llama.cpp's vocabulary-only files do, and llama.cpp reads them) */
    if (nt == 0 && data_start > f->size)
        data_start = f->size;
    if (data_start > f->size)
        return file_err(f->path, ERR_FORMAT,
                        "the data section would start at %zu, past the end of the file (%zu "
                        "bytes; truncated?)",
                        data_start, f->size);
    return tensors_place(g, f, data_start);
}

static int tp_cmp(const void *pa, const void *pb)
{
    return strcmp((*(const struct gguf_tensor *const *)pa)->name,
                  (*(const struct gguf_tensor *const *)pb)->name);
}

/* Sorts the first part's keys and every tensor name, rejecting duplicates. */
static int file_index(struct gguf_file *g)
{
    const struct gguf_part *f0 = &g->parts[0];
    g->kv_sorted = malloc((f0->nkv ? f0->nkv : 1) * sizeof(*g->kv_sorted));
    g->by_name = malloc((g->ntensors ? g->ntensors : 1) * sizeof(*g->by_name));
    if (!g->kv_sorted || !g->by_name)
        return err_set(ERR_NOMEM, "out of memory reading %s", f0->path);
    for (size_t i = 0; i < f0->nkv; i++)
        g->kv_sorted[i] = &f0->kvs[i];
    qsort(g->kv_sorted, f0->nkv, sizeof(*g->kv_sorted), kvp_cmp);
    for (size_t i = 1; i < f0->nkv; i++)
        if (kvp_cmp(&g->kv_sorted[i - 1], &g->kv_sorted[i]) == 0)
            return file_err(f0->path, ERR_FORMAT, "metadata key '%.*s' appears twice",
                            g->kv_sorted[i]->key.n > 100 ? 100 : (int)g->kv_sorted[i]->key.n,
                            g->kv_sorted[i]->key.p);
    for (size_t i = 0; i < g->ntensors; i++)
        g->by_name[i] = &g->tensors[i];
    qsort(g->by_name, g->ntensors, sizeof(*g->by_name), tp_cmp);
    for (size_t i = 1; i < g->ntensors; i++)
        if (strcmp(g->by_name[i - 1]->name, g->by_name[i]->name) == 0)
            return file_err(g->by_name[i]->file, ERR_FORMAT, "tensor '%s' appears twice%s%s",
                            g->by_name[i]->name,
                            g->by_name[i - 1]->file != g->by_name[i]->file ? " (also in " : "",
                            g->by_name[i - 1]->file != g->by_name[i]->file ? "another part)" : "");
    return 0;
}

/* ---- paths: a file, a directory, a split set ---- */

static bool has_suffix(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* For "PREFIX-0000i-of-0000N.gguf": *prefix_len, *no and *count; false otherwise. */
static bool split_name(const char *path, size_t *prefix_len, int *no, int *count)
{
    size_t n = strlen(path);
    /* "-00001-of-00003.gguf" is 20 characters */
    if (n < 20 || !has_suffix(path, ".gguf"))
        return false;
    const char *s = path + n - 20;
    int a, b;
    char tail[8];
    if (s[0] != '-' || sscanf(s, "-%5d-of-%5d%7s", &a, &b, tail) != 3 || strcmp(tail, ".gguf"))
        return false;
    for (int i = 1; i < 6; i++)
        if (s[i] < '0' || s[i] > '9' || s[i + 9] < '0' || s[i + 9] > '9')
            return false;
    *prefix_len = n - 20;
    *no = a;
    *count = b;
    return true;
}

static int add_part(struct gguf_file *g, const char *path)
{
    struct gguf_part *np = realloc(g->parts, (g->nparts + 1) * sizeof(*np));
    if (!np)
        return err_set(ERR_NOMEM, "out of memory opening %s", path);
    g->parts = np;
    struct gguf_part *f = &g->parts[g->nparts];
    memset(f, 0, sizeof(*f));
    if (!(f->path = strdup(path)))
        return err_set(ERR_NOMEM, "out of memory opening %s", path);
    g->nparts++;
    return 0;
}

/* The .gguf file in dir (one, or the first of one split set): *out malloc'd. */
static int dir_pick(const char *dir, char **out)
{
    *out = NULL;
    DIR *d = opendir(dir);
    if (!d)
        return file_err(dir, errno == ENOENT ? ERR_NOT_FOUND : ERR_IO, "cannot open: %s",
                        strerror(errno));
    char *pick = NULL;
    int rc = 0, singles = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t pl;
        int no, count;
        if (e->d_name[0] == '.' || !has_suffix(e->d_name, ".gguf"))
            continue;
        bool split = split_name(e->d_name, &pl, &no, &count);
        if (split && no != 1)
            continue;
        singles++;
        if (pick && strcmp(e->d_name, pick) < 0) {
            free(pick);
            pick = NULL;
        }
        if (!pick && !(pick = strdup(e->d_name))) {
            rc = err_set(ERR_NOMEM, "out of memory opening %s", dir);
            break;
        }
    }
    closedir(d);
    if (rc == 0 && singles == 0)
        rc = file_err(dir, ERR_NOT_FOUND, "no .gguf file in this directory");
    else if (rc == 0 && singles > 1)
        rc = file_err(dir, ERR_INVALID,
                      "holds %d GGUF models (.gguf files or split sets): name the file", singles);
    if (rc == 0 && asprintf(out, "%s/%s", dir, pick) < 0) {
        *out = NULL;
        rc = err_set(ERR_NOMEM, "out of memory opening %s", dir);
    }
    free(pick);
    return rc;
}

int gguf_open(const char *path, struct gguf_file **out)
{
    assert(path && out);
    *out = NULL;
    char *file = NULL;
    struct gguf_file *g = calloc(1, sizeof(*g));
    if (!g)
        return err_set(ERR_NOMEM, "out of memory opening %s", path);
    int rc;
    struct stat sb;
    if (stat(path, &sb) != 0) {
        rc = file_err(path, errno == ENOENT ? ERR_NOT_FOUND : ERR_IO, "cannot open: %s",
                      strerror(errno));
        goto fail;
    }
    if (S_ISDIR(sb.st_mode)) {
        if ((rc = dir_pick(path, &file)) < 0)
            goto fail;
    } else if (!(file = strdup(path))) {
        rc = err_set(ERR_NOMEM, "out of memory opening %s", path);
        goto fail;
    }
    size_t pl;
    int no = 1, count = 1;
    bool split = split_name(file, &pl, &no, &count);
    if (split && (no != 1 || count < 1 || count > GGUF_MAX_SPLITS)) {
        rc = file_err(file, ERR_INVALID,
                      "is part %d of %d of a split GGUF: open the first part (-00001-of-%05d), "
                      "of at most %d",
                      no, count, count, GGUF_MAX_SPLITS);
        goto fail;
    }
    if ((rc = add_part(g, file)) < 0 || (rc = part_load(g, &g->parts[0], true)) < 0)
        goto fail;
    int64_t declared = 1;
    if ((rc = gguf_get_int(g, "split.count", false, 1, 1, GGUF_MAX_SPLITS, &declared)) < 0)
        goto fail;
    if (split && declared != count && gguf_find(g, "split.count")) {
        rc = file_err(file, ERR_FORMAT, "split.count is %lld but the file name says %d parts",
                      (long long)declared, count);
        goto fail;
    }
    if (!split && declared > 1) {
        rc = file_err(file, ERR_FORMAT,
                      "split.count says %lld parts, but the name is not NAME-00001-of-%05lld.gguf",
                      (long long)declared, (long long)declared);
        goto fail;
    }
    for (int i = 2; split && i <= count; i++) {
        char *p = NULL;
        if (asprintf(&p, "%.*s-%05d-of-%05d.gguf", (int)pl, file, i, count) < 0) {
            rc = err_set(ERR_NOMEM, "out of memory opening %s", file);
            goto fail;
        }
        rc = add_part(g, p);
        free(p);
        if (rc < 0 || (rc = part_load(g, &g->parts[g->nparts - 1], false)) < 0)
            goto fail;
    }
    if ((rc = file_index(g)) < 0)
        goto fail;
    free(file);
    *out = g;
    return 0;
fail:
    free(file);
    gguf_close(g);
    return rc;
}

void gguf_close(struct gguf_file *g)
{
    if (!g)
        return;
    for (size_t i = 0; i < g->nparts; i++)
        part_free(&g->parts[i]);
    free(g->parts);
    free(g->kv_sorted);
    free(g->tensors);
    free(g->names);
    free(g->by_name);
    free(g);
}

bool gguf_is_checkpoint(const char *path)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return has_suffix(path, ".gguf");
    if (!S_ISDIR(sb.st_mode))
        return has_suffix(path, ".gguf");
    char *p = NULL;
    if (asprintf(&p, "%s/config.json", path) < 0)
        return false;
    bool hf = access(p, F_OK) == 0;
    free(p);
    if (hf)
        return false;
    DIR *d = opendir(path);
    if (!d)
        return false;
    bool found = false;
    struct dirent *e;
    while (!found && (e = readdir(d)))
        found = e->d_name[0] != '.' && has_suffix(e->d_name, ".gguf");
    closedir(d);
    return found;
}

/* ---- accessors ---- */

uint32_t gguf_version(const struct gguf_file *g)
{
    return g->version;
}

size_t gguf_alignment(const struct gguf_file *g)
{
    return g->alignment;
}

const char *gguf_path(const struct gguf_file *g)
{
    return g->parts[0].path;
}

size_t gguf_kv_count(const struct gguf_file *g)
{
    return g->parts[0].nkv;
}

const struct gguf_kv *gguf_kv_get(const struct gguf_file *g, size_t i)
{
    return i < g->parts[0].nkv ? &g->parts[0].kvs[i] : NULL;
}

const struct gguf_kv *gguf_find(const struct gguf_file *g, const char *key)
{
    struct gguf_str k = {key, strlen(key)};
    size_t lo = 0, hi = g->parts[0].nkv;
    if (!g->kv_sorted) /* while opening: the first part's entries, unsorted */
        return part_find(&g->parts[0], key);
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = str_cmp(g->kv_sorted[mid]->key, k);
        if (c == 0)
            return g->kv_sorted[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

struct gguf_str gguf_kv_key(const struct gguf_kv *kv)
{
    return kv->key;
}

enum gguf_vtype gguf_kv_type(const struct gguf_kv *kv)
{
    return kv->type;
}

enum gguf_vtype gguf_kv_arr_type(const struct gguf_kv *kv)
{
    return kv->arr_type;
}

uint64_t gguf_kv_arr_len(const struct gguf_kv *kv)
{
    return kv->type == GGUF_ARR ? kv->arr_len : 0;
}

static bool is_int(enum gguf_vtype t)
{
    return t <= GGUF_I32 || t == GGUF_U64 || t == GGUF_I64;
}

static bool is_num(enum gguf_vtype t)
{
    return is_int(t) || t == GGUF_F32 || t == GGUF_F64;
}

/* The scalar at p of type t (an integer type) as int64 (u64 above INT64_MAX: *big). */
static int64_t int_at(const uint8_t *p, enum gguf_vtype t, bool *big)
{
    uint64_t v = le(p, vsize[t]);
    *big = false;
    switch (t) {
    case GGUF_I8:
        return (int8_t)v;
    case GGUF_I16:
        return (int16_t)v;
    case GGUF_I32:
        return (int32_t)v;
    case GGUF_I64:
        return (int64_t)v;
    case GGUF_U64:
        *big = v > INT64_MAX;
        return *big ? INT64_MAX : (int64_t)v;
    default:
        return (int64_t)v;
    }
}

static double num_at(const uint8_t *p, enum gguf_vtype t)
{
    if (t == GGUF_F32) {
        uint32_t u = (uint32_t)le(p, 4);
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    if (t == GGUF_F64) {
        uint64_t u = le(p, 8);
        double d;
        memcpy(&d, &u, 8);
        return d;
    }
    if (t == GGUF_U64)
        return (double)le(p, 8);
    bool big;
    return (double)int_at(p, t, &big);
}

struct gguf_str gguf_kv_str(const struct gguf_kv *kv)
{
    assert(kv->type == GGUF_STR);
    return kv->str;
}

double gguf_kv_num(const struct gguf_kv *kv)
{
    assert(is_num(kv->type) || kv->type == GGUF_BOOL);
    return kv->type == GGUF_BOOL ? kv->val[0] : num_at(kv->val, kv->type);
}

struct gguf_str gguf_arr_str(const struct gguf_kv *kv, uint64_t i)
{
    assert(kv->type == GGUF_ARR && kv->arr_type == GGUF_STR && i < kv->arr_len);
    return kv->strs[i];
}

double gguf_arr_num(const struct gguf_kv *kv, uint64_t i)
{
    assert(kv->type == GGUF_ARR && (is_num(kv->arr_type) || kv->arr_type == GGUF_BOOL) &&
           i < kv->arr_len);
    const uint8_t *p = kv->val + i * vsize[kv->arr_type];
    return kv->arr_type == GGUF_BOOL ? p[0] : num_at(p, kv->arr_type);
}

int64_t gguf_arr_int(const struct gguf_kv *kv, uint64_t i)
{
    assert(kv->type == GGUF_ARR && (is_int(kv->arr_type) || kv->arr_type == GGUF_BOOL) &&
           i < kv->arr_len);
    bool big;
    const uint8_t *p = kv->val + i * vsize[kv->arr_type];
    return kv->arr_type == GGUF_BOOL ? p[0] : int_at(p, kv->arr_type, &big);
}

static int type_err(const struct gguf_file *g, const char *key, const struct gguf_kv *kv,
                    const char *expected)
{
    return file_err(gguf_path(g), ERR_FORMAT, "metadata key '%s' is a %s, expected %s", key,
                    gguf_vtype_name(kv->type), expected);
}

static int absent_err(const struct gguf_file *g, const char *key)
{
    return file_err(gguf_path(g), ERR_NOT_FOUND, "metadata key '%s' is missing", key);
}

int gguf_get_int(const struct gguf_file *g, const char *key, bool required, int64_t dflt,
                 int64_t lo, int64_t hi, int64_t *out)
{
    const struct gguf_kv *kv = gguf_find(g, key);
    if (!kv) {
        if (required)
            return absent_err(g, key);
        *out = dflt;
        return 0;
    }
    if (!is_int(kv->type))
        return type_err(g, key, kv, "an integer");
    bool big;
    int64_t v = int_at(kv->val, kv->type, &big);
    if (big || v < lo || v > hi)
        return file_err(gguf_path(g), ERR_FORMAT,
                        "metadata key '%s' is %s%lld, expected %lld to %lld", key,
                        big ? "above " : "", (long long)v, (long long)lo, (long long)hi);
    *out = v;
    return 0;
}

int gguf_get_num(const struct gguf_file *g, const char *key, bool required, double dflt, double lo,
                 double hi, double *out)
{
    const struct gguf_kv *kv = gguf_find(g, key);
    if (!kv) {
        if (required)
            return absent_err(g, key);
        *out = dflt;
        return 0;
    }
    if (!is_num(kv->type))
        return type_err(g, key, kv, "a number");
    double v = num_at(kv->val, kv->type);
    if (!(v >= lo && v <= hi))
        return file_err(gguf_path(g), ERR_FORMAT, "metadata key '%s' is %g, expected %g to %g", key,
                        v, lo, hi);
    *out = v;
    return 0;
}

int gguf_get_bool(const struct gguf_file *g, const char *key, bool dflt, bool *out)
{
    const struct gguf_kv *kv = gguf_find(g, key);
    if (!kv) {
        *out = dflt;
        return 0;
    }
    if (kv->type != GGUF_BOOL)
        return type_err(g, key, kv, "a bool");
    *out = kv->val[0] != 0;
    return 0;
}

int gguf_get_str(const struct gguf_file *g, const char *key, struct gguf_str *out)
{
    const struct gguf_kv *kv = gguf_find(g, key);
    *out = (struct gguf_str){0};
    if (!kv)
        return 0;
    if (kv->type != GGUF_STR)
        return type_err(g, key, kv, "a string");
    *out = kv->str;
    return 0;
}

size_t gguf_tensor_count(const struct gguf_file *g)
{
    return g->ntensors;
}

const struct gguf_tensor *gguf_tensor_get(const struct gguf_file *g, size_t i)
{
    return i < g->ntensors ? &g->tensors[i] : NULL;
}

const struct gguf_tensor *gguf_tensor_find(const struct gguf_file *g, const char *name)
{
    size_t lo = 0, hi = g->ntensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(g->by_name[mid]->name, name);
        if (c == 0)
            return g->by_name[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

size_t gguf_file_count(const struct gguf_file *g)
{
    return g->nparts;
}

void gguf_file_info(const struct gguf_file *g, size_t i, const char **path, size_t *size,
                    uint64_t *dev, uint64_t *ino)
{
    assert(i < g->nparts);
    *path = g->parts[i].path;
    *size = g->parts[i].size;
    *dev = g->parts[i].dev;
    *ino = g->parts[i].ino;
}
