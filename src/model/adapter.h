/* LoRA adapters of a base model, as PEFT publishes them: a directory with
 * adapter_config.json and adapter_model.safetensors.
 *
 * An adapter is a model-like handle: its config is a struct model_config
 * (the base's info, and the adapter's ranks and scales behind it, read
 * against the base's config), and one shard of it is a struct model whose
 * layout is made by the same generic code as a model's (model_shard_open,
 * model_shard_fill, model_shard_bind: blob 1 + i holds local layer i's
 * pairs, blob 0 is empty), so the swap manager and the shard store can hold
 * and move an adapter as they move a model. A shard of an adapter is planned
 * with its base's shard spec (the same TP rank and layer range): A and B
 * split as S-LoRA splits them (column-parallel q/k/v/gate/up: A whole, B
 * by output rows; row-parallel o/down: A by input columns, B whole, the
 * partial products summed by the layer's existing all-reduce).
 *
 * A batch attaches adapters per sequence (model_exec_set_adapters); the
 * shared blocks add each sequence's x·A^T·B^T·scale after every projection
 * its adapter targets (kern_lora over runs of sequences with the same
 * adapter), before the TP reduce of the row-parallel ones. */
#ifndef SHARDSWAP_MODEL_ADAPTER_H
#define SHARDSWAP_MODEL_ADAPTER_H

#include "model/model.h"

/* Reads DIR/adapter_config.json against the base's config (base_dir: the
 * base's directory, for its config.json "_name_or_path"; may be NULL) into
 * an adapter config (*out: model_config_free). One-line errors name the
 * file and the key: a peft_type other than LORA, DoRA, a bias other than
 * "none", targets the base has no LoRA for (embeddings, the head, fused
 * projections), a pattern that does not compile or backtracks past the
 * bounds (core/pyre.h),
 * base_model_name_or_path naming another base. */
int model_adapter_config_load(const char *dir, const struct model_config *base,
                              const char *base_dir, struct model_config **out);
/* Whether c is an adapter's config (model_adapter_config_load's). */
bool model_config_is_adapter(const struct model_config *c);
/* The largest rank of any of its pairs. */
int model_adapter_max_rank(const struct model_config *c);
/* Opens DIR/adapter_model.safetensors (a .bin alone: refused in one line)
 * as ck for an adapter config. */
int model_adapter_checkpoint_open(const char *dir, struct st_checkpoint **out);
/* Every tensor of ck must be one of the adapter config's pairs (one line
 * naming the first that is not: a modules_to_save copy, an embedding's or
 * DoRA's tensors, a layer or module the config does not adapt). */
int model_adapter_check_tensors(const struct model_config *cfg, const struct st_checkpoint *ck);

/* The adapter at dir for base, one whole shard on base's device (base
 * opened with model_open_on, or host views of a mapped checkpoint: then the
 * adapter's blobs are in host memory), its matrices in base's precision
 * (model_layout_set_compute); *out: model_close. */
int model_adapter_open(const char *dir, const struct model *base, const char *base_dir,
                       struct model **out);

/* For sizing a device before it is opened: the bytes of the whole adapter
 * at dir for a base of config base as model_adapter_open allocates them on
 * a device (every blob rounded up to 64 bytes) and its largest rank (the
 * execution context's max_lora_rank). */
int model_adapter_bytes(const char *dir, const struct model_config *base, const char *base_dir,
                        uint64_t *bytes, int *max_rank);
/* An adapter shard's largest rank. */
int model_adapter_rank(const struct model *adapter);

/* Attaches adapters to the batch's sequences: per[b] is sequence b's
 * adapter shard (of this context's base shard: the same TP rank and layers)
 * or NULL for the base; per NULL detaches all. The array is copied. The
 * context must have been sized for their ranks (model_exec_shape's
 * max_lora_rank): ERR_INVALID naming the rank otherwise. Applies from the
 * next step; host memory only. */
int model_exec_set_adapters(struct model_exec *ex, const struct model *const *per);

#endif
