/* The reference batch of the sharded and expert tests: 3 left-padded
 * sequences of 6, 3 and 1 tokens over 6 positions, ids drawn from a fixed
 * linear congruential sequence (BOS 2 first, pad 1). Its own header, free of
 * sharded_ref.h's one-letter macros, so any test can build the same batch. */
#ifndef SHARDSWAP_TESTS_REF_BATCH_H
#define SHARDSWAP_TESTS_REF_BATCH_H

#include <stdbool.h>
#include <stdint.h>

#define REF_BATCH_B 3
#define REF_BATCH_T 6

static inline void ref_batch(int vocab, int32_t *ids, uint8_t *mask)
{
    const int len[REF_BATCH_B] = {6, 3, 1};
    uint32_t x = 7;
    for (int b = 0; b < REF_BATCH_B; b++)
        for (int t = 0; t < REF_BATCH_T; t++) {
            x = x * 1103515245u + 12345u;
            const bool real = t >= REF_BATCH_T - len[b];
            mask[b * REF_BATCH_T + t] = real;
            ids[b * REF_BATCH_T + t] =
                real ? (t == REF_BATCH_T - len[b] ? 2 : 4 + (int32_t)((x >> 8) % (vocab - 4)))
                     : 1;
        }
}

#endif
