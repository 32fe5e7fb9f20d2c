/* GGUF files (llama.cpp's format): metadata key-values and tensors, one
 * file or a split set (NAME-00001-of-0000N.gguf ...).
 *
 * A file is opened read-only and memory-mapped; strings, array elements and
 * tensor data are views into the mapping, valid until gguf_close(). Every
 * offset, size, count and length is checked at open (see gguf.c for the
 * byte-by-byte format and the rules): a hostile file is a one-line error
 * naming the file and what is wrong. Tensors of any ggml type are accepted
 * and described (ggml_type_info); which types a caller computes with is
 * the caller's decision.
 */
#ifndef SHARDSWAP_FORMAT_GGUF_H
#define SHARDSWAP_FORMAT_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum gguf_vtype {
    GGUF_U8 = 0,
    GGUF_I8,
    GGUF_U16,
    GGUF_I16,
    GGUF_U32,
    GGUF_I32,
    GGUF_F32,
    GGUF_BOOL,
    GGUF_STR,
    GGUF_ARR,
    GGUF_U64,
    GGUF_I64,
    GGUF_F64,
};

/* ggml's tensor types, by their numbers in the file (gaps: removed types). */
enum ggml_type {
    GGML_TYPE_F32 = 0,
    GGML_TYPE_F16 = 1,
    GGML_TYPE_Q4_0 = 2,
    GGML_TYPE_Q4_1 = 3,
    GGML_TYPE_Q5_0 = 6,
    GGML_TYPE_Q5_1 = 7,
    GGML_TYPE_Q8_0 = 8,
    GGML_TYPE_Q8_1 = 9,
    GGML_TYPE_Q2_K = 10,
    GGML_TYPE_Q3_K = 11,
    GGML_TYPE_Q4_K = 12,
    GGML_TYPE_Q5_K = 13,
    GGML_TYPE_Q6_K = 14,
    GGML_TYPE_Q8_K = 15,
    GGML_TYPE_IQ2_XXS = 16,
    GGML_TYPE_IQ2_XS = 17,
    GGML_TYPE_IQ3_XXS = 18,
    GGML_TYPE_IQ1_S = 19,
    GGML_TYPE_IQ4_NL = 20,
    GGML_TYPE_IQ3_S = 21,
    GGML_TYPE_IQ2_S = 22,
    GGML_TYPE_IQ4_XS = 23,
    GGML_TYPE_I8 = 24,
    GGML_TYPE_I16 = 25,
    GGML_TYPE_I32 = 26,
    GGML_TYPE_I64 = 27,
    GGML_TYPE_F64 = 28,
    GGML_TYPE_IQ1_M = 29,
    GGML_TYPE_BF16 = 30,
    GGML_TYPE_TQ1_0 = 34,
    GGML_TYPE_TQ2_0 = 35,
    GGML_TYPE_MXFP4 = 39,
    GGML_TYPE_NVFP4 = 40,
    GGML_TYPE_Q1_0 = 41,
    GGML_TYPE_Q2_0 = 42,
};

/* A type's name ("Q4_K"), elements per block and bytes per block: a row of
 * ne0 elements (ne0 a multiple of block) takes ne0 / block * block_bytes. */
struct ggml_type_info {
    const char *name;
    uint32_t block;
    uint32_t block_bytes;
};
/* NULL for a number that is no ggml type (or a removed one). */
const struct ggml_type_info *ggml_type_info(uint32_t type);

#define GGUF_MAX_DIMS 4

struct gguf_str {
    const char *p; /* into the mapping; not NUL-terminated */
    size_t n;
};

struct gguf_tensor {
    const char *name; /* NUL-terminated copy, owned by the file */
    const char *file; /* path of the (split) file holding it; owned by the file */
    uint32_t type;    /* enum ggml_type; ggml_type_info(type) is never NULL */
    int ndim;         /* 1..GGUF_MAX_DIMS */
    uint64_t
        ne[GGUF_MAX_DIMS]; /* ggml order: ne[0] is the innermost (a row's length); 1 past ndim */
    uint64_t nelem;
    size_t nbytes;
    size_t
        file_offset;  /* absolute byte offset of the data in `file`, a multiple of the alignment */
    const void *data; /* into the mapping of `file` */
};

struct gguf_kv; /* one metadata entry */
struct gguf_file;

/* Opens path: a .gguf file, a directory holding one (or one split set),
 * or the first file of a split set (NAME-00001-of-0000N.gguf: every part is
 * opened). 0, or <0 with a one-line message naming the file. */
int gguf_open(const char *path, struct gguf_file **out);
void gguf_close(struct gguf_file *g); /* NULL-safe */

uint32_t gguf_version(const struct gguf_file *g);
size_t gguf_alignment(const struct gguf_file *g);
const char *gguf_path(const struct gguf_file *g); /* the first (or only) file */

/* Metadata: the first file's (a split set's later parts hold only split.*). */
size_t gguf_kv_count(const struct gguf_file *g);
const struct gguf_kv *gguf_kv_get(const struct gguf_file *g, size_t i);      /* file order */
const struct gguf_kv *gguf_find(const struct gguf_file *g, const char *key); /* NULL when absent */
struct gguf_str gguf_kv_key(const struct gguf_kv *kv);
enum gguf_vtype gguf_kv_type(const struct gguf_kv *kv);
enum gguf_vtype gguf_kv_arr_type(const struct gguf_kv *kv); /* element type of an array */
uint64_t gguf_kv_arr_len(const struct gguf_kv *kv);
const char *gguf_vtype_name(enum gguf_vtype t); /* "u32", "string", "array", ... */

/* Typed getters: absent and !required -> *out = dflt; wrong type or out of
 * range -> a one-line error naming the file and the key. */
int gguf_get_int(const struct gguf_file *g, const char *key, bool required, int64_t dflt,
                 int64_t lo, int64_t hi, int64_t *out); /* any integer type */
int gguf_get_num(const struct gguf_file *g, const char *key, bool required, double dflt, double lo,
                 double hi, double *out); /* F32/F64 or integer */
int gguf_get_bool(const struct gguf_file *g, const char *key, bool dflt, bool *out);
int gguf_get_str(const struct gguf_file *g, const char *key,
                 struct gguf_str *out); /* absent -> out->p NULL */

/* Scalar values of one entry (the getters' checks are the caller's). */
struct gguf_str gguf_kv_str(const struct gguf_kv *kv); /* a GGUF_STR */
double gguf_kv_num(const struct gguf_kv *kv);          /* any numeric or bool */

/* Array elements (i < arr_len, asserted; string arrays are indexed at open,
 * so every access is O(1)). */
struct gguf_str gguf_arr_str(const struct gguf_kv *kv, uint64_t i);
double gguf_arr_num(const struct gguf_kv *kv, uint64_t i);  /* any numeric element type */
int64_t gguf_arr_int(const struct gguf_kv *kv, uint64_t i); /* any integer element type */

/* Tensors: every file's, in file order, then the order of their infos. */
size_t gguf_tensor_count(const struct gguf_file *g);
const struct gguf_tensor *gguf_tensor_get(const struct gguf_file *g, size_t i);
const struct gguf_tensor *gguf_tensor_find(const struct gguf_file *g,
                                           const char *name); /* NULL when absent */

/* The files of g (1, or a split set's count) and each one's identity as
 * mapped, for truncation checks (safetensors.h's st_check). */
size_t gguf_file_count(const struct gguf_file *g);
void gguf_file_info(const struct gguf_file *g, size_t i, const char **path, size_t *size,
                    uint64_t *dev, uint64_t *ino);

/* Whether path names a GGUF checkpoint: a file ending ".gguf", or a
 * directory holding a .gguf file and no config.json. */
bool gguf_is_checkpoint(const char *path);

#endif
