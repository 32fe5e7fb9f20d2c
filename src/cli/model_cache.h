/* Generated benchmark models, kept in a cache directory between runs. */
#ifndef SHARDSWAP_CLI_MODEL_CACHE_H
#define SHARDSWAP_CLI_MODEL_CACHE_H

#include <stddef.h>
#include <stdint.h>

/* The directory of preset (cut to `layers` when > 0) in dtype_s with seed,
 * under cache; generated on first use into DIR.partial and renamed once
 * complete, so an interrupted run leaves no half checkpoint behind. */
int model_cache_preset(const char *cache, const char *preset, int layers, const char *dtype_s,
                       uint64_t seed, char *dir, size_t cap);

#endif
