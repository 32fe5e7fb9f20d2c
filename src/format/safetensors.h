/* safetensors checkpoints: one file, or shards listed by an index.
 *
 * A checkpoint is opened read-only and memory-mapped; tensors are views into
 * the mappings and stay valid until st_close(). See safetensors.c for the
 * byte-by-byte format and the validation rules.
 */
#ifndef SHARDSWAP_FORMAT_SAFETENSORS_H
#define SHARDSWAP_FORMAT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"

#define ST_MAX_DIMS 8
/* Most tensors in one file, and in a whole checkpoint (an index's entries
 * too): OPT-175B has about 1,550; parsing a header costs about 1 kB of
 * memory per tensor, so this bounds a hostile header's cost to ~70 MB. */
#define ST_MAX_TENSORS 65536

/* Element types of a safetensors file that are not weights by themselves:
 * compressed-tensors' quantized values, packed words, shapes and zero points
 * (format/ct.h reads them; st_open returns none of them). */
enum st_raw {
    ST_RAW_NONE,
    ST_RAW_I8,
    ST_RAW_I32,
    ST_RAW_I64,
    ST_RAW_F8_E4M3,
};
/* "I8", "I32", "I64", "F8_E4M3" (safetensors' spellings) */
const char *st_raw_name(enum st_raw r);

struct ct_tensor;

struct st_tensor {
    const char *name;   /* owned by the checkpoint */
    const char *file;   /* path of the file that holds it; owned by the checkpoint */
    enum dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    size_t numel;
    size_t nbytes;
    size_t file_offset; /* absolute byte offset of the data in `file` */
    const void *data;   /* into the mapping of `file`; may be unaligned for its dtype when
                           the writer did not pad (read it with memcpy, not a cast) */
    int rope_perm_heads; /* > 0 (GGUF llama q/k): rows stored in llama.cpp's rotary order
                            over this many heads; gguf_hf_perm_row maps transformers' row
                            to the stored one (model/layout.c copies them back) */
    enum st_raw raw;     /* inside the reader only: a raw element type (dtype unused) */
    const struct ct_tensor *ct; /* a compressed-tensors weight (format/ct.h): dtype is its
                                   CT block type, data its quantized values; read it with
                                   ct_copy (model/layout.c repacks it as blobs fill) */
};

struct st_checkpoint;

/* Opens `path`: a .safetensors file, a model.safetensors.index.json, or a
 * directory holding either (the index wins when both are there); or a GGUF
 * checkpoint (a .gguf file, the first of a split set, or a directory
 * holding one and no config.json), its tensors under transformers' names
 * (format/gguf_hf.h). Every file
 * is validated completely before this returns. On failure *out is NULL and the
 * message names the file and, where there is one, the tensor. */
int st_open(const char *path, struct st_checkpoint **out);
void st_close(struct st_checkpoint *ck); /* NULL-safe */

size_t st_count(const struct st_checkpoint *ck);
const struct st_tensor *st_get(const struct st_checkpoint *ck, size_t i); /* in file, then offset order */
/* NULL when absent (no error set): callers decide whether that is an error. */
const struct st_tensor *st_find(const struct st_checkpoint *ck, const char *name);
size_t st_file_count(const struct st_checkpoint *ck);
/* Checks that no file of ck shrank since it was mapped (stat of each path:
 * the same device and inode, a size below the mapped one). ERR_IO naming the
 * file and both sizes. A file since removed or renamed over is not an
 * error: its mapping still holds the old contents. Reading the mapping
 * after a 0 still faults if the file is truncated in between: guard the copy
 * (core/fault.h). Any thread; no lock. */
int st_check(const struct st_checkpoint *ck);
/* "safetensors", "gguf" or "compressed-tensors" (safetensors whose
 * config.json's quantization_config says so). */
const char *st_format(const struct st_checkpoint *ck);
/* A compressed-tensors checkpoint's format as config.json names it
 * ("pack-quantized", "float-quantized", ...; format/ct.h), else NULL. */
const char *st_ct_format(const struct st_checkpoint *ck);
/* The GGUF file behind ck, or NULL (safetensors). Owned by ck. */
struct gguf_file;
const struct gguf_file *st_gguf(const struct st_checkpoint *ck);

/* Writer. Declare every tensor first (name, dtype, shape), then stream the
 * data of each tensor in declaration order; the writer checks the totals. This
 * keeps memory flat when generating checkpoints far larger than RAM. */
struct st_writer;
int st_writer_open(const char *path, struct st_writer **out);
int st_writer_declare(struct st_writer *w, const char *name, enum dtype dtype, int ndim,
                      const int64_t *shape);
/* Appends raw bytes of the current tensor(s); the first call writes the header. */
int st_writer_write(struct st_writer *w, const void *data, size_t nbytes);
/* Checks every declared byte was written, flushes and closes; frees w either way. */
int st_writer_close(struct st_writer *w);
/* Frees w and removes the partial file (for error paths). NULL-safe. */
void st_writer_abort(struct st_writer *w);

#endif
