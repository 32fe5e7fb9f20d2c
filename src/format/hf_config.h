/* Typed getters over a Hugging Face JSON config (config.json,
 * generation_config.json), shared by every model family: each reads one
 * field, applies the default when it is absent or null, checks type and
 * range, and on failure sets a one-line message naming the file (`what`)
 * and the field. A family's config parser is a list of these calls. */
#ifndef SHARDSWAP_FORMAT_HF_CONFIG_H
#define SHARDSWAP_FORMAT_HF_CONFIG_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "core/dtype.h"

/* Upper bound on any dimension a config may declare: keeps every size
 * product far from overflow. */
#define HF_DIM_MAX (1 << 20)

/* Reads DIR/NAME (a regular file) as a JSON object into *root (the caller's
 * json_decref); path (cap bytes) receives "DIR/NAME" for messages.
 * ERR_NOT_FOUND when the file does not exist (no message when optional),
 * ERR_FORMAT for invalid JSON or a value that is not an object. */
int hf_json_load(const char *dir, const char *name, bool optional, json_t **root, char *path,
                 size_t cap);

/* Integer key in [lo, hi]; required: absent is an error, else *out = dflt. */
int hf_get_int(json_t *root, const char *what, const char *key, bool required, int dflt, int lo,
               int hi, int *out);
/* A number (integer or real) in [lo, hi]. */
int hf_get_num(json_t *root, const char *what, const char *key, bool required, double dflt,
               double lo, double hi, double *out);
int hf_get_bool(json_t *root, const char *what, const char *key, bool dflt, bool *out);
/* A string, or NULL when absent or null (valid while root is). */
int hf_get_str(json_t *root, const char *what, const char *key, const char **out);
/* Writes root to path as a config.json (2-space indent, keys in the order
 * set) and releases root. ERR_IO naming path when it cannot be written. */
int hf_write_config(json_t *root, const char *path);
/* A rope settings object's type: "rope_type", else the older spelling "type";
 * NULL when neither is present or it is "default". */
int hf_get_rope_type(json_t *o, const char *what, const char **type);
/* torch_dtype (or newer transformers' "dtype"): float32 when absent. */
int hf_get_dtype(json_t *root, const char *what, enum dtype *out);
/* A token id or a list of them (eos_token_id), each in [0, vocab): *n ids
 * into ids (at most cap; more is an error); absent or null: *n = 0. */
int hf_get_ids(json_t *root, const char *what, const char *key, int vocab, int *ids, int cap,
               int *n);

#endif
