/* Generated benchmark models, kept in a cache directory between runs. */
#ifndef SHARDSWAP_CLI_MODEL_CACHE_H
#define SHARDSWAP_CLI_MODEL_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The directory of preset (cut to `layers` when > 0) in dtype_s with seed,
 * under cache; generated on first use into DIR.partial and renamed once
 * complete, so an interrupted run leaves no half checkpoint behind. Fails
 * before writing anything when the cache's file system has not the room. */
int model_cache_preset(const char *cache, const char *preset, int layers, const char *dtype_s,
                       uint64_t seed, char *dir, size_t cap);

/* The directory of n random LoRA adapters of rank rank over the checkpoint
 * in base_dir (model_random_adapter_write's, in dtype_s, adapter k with
 * seed k): BASE_DIR-lora-rRANK/adapter_0 .. adapter_{n-1}, each generated on
 * first use into adapter_k.partial and renamed once complete. */
int model_cache_adapters(const char *base_dir, int n, int rank, const char *dtype_s, char *dir,
                         size_t cap);

/* Fails, writing nothing, when the models of seeds 0..n_seeds-1 that are not
 * in the cache yet need more bytes than its file system has free. */
int model_cache_check(const char *cache, const char *preset, int layers, const char *dtype_s,
                      int n_seeds);

/* Fails with "WHAT PATH: writing X GB needs more than the Y GB free on P"
 * when bytes do not fit the free space of the file system that holds path
 * (or would: its nearest existing ancestor). */
int cli_check_space(const char *path, uint64_t bytes, const char *what);

#endif
