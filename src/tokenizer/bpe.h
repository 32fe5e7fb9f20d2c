/* GPT-2 byte-level BPE, as OPT and GPT-2 use it.
 *
 * Loaded from a directory holding vocab.json + merges.txt, or tokenizer.json.
 * Special tokens and the BOS rule come from tokenizer_config.json /
 * special_tokens_map.json when present; otherwise OPT's defaults (<s>=0,
 * <pad>=1, </s>=2, <unk>=3, and "</s>" prepended as BOS).
 */
#ifndef SHARDSWAP_TOKENIZER_BPE_H
#define SHARDSWAP_TOKENIZER_BPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct bpe;

int bpe_open(const char *dir, struct bpe **out);
void bpe_close(struct bpe *t); /* NULL-safe */

/* Encodes len bytes of UTF-8 text. *ids is malloc'd, owned by the caller.
 * add_bos prepends the BOS id when the tokenizer's rule says to. Thread-safe
 * on a shared struct bpe. */
int bpe_encode(const struct bpe *t, const char *text, size_t len, bool add_bos, int32_t **ids,
               size_t *n_ids);

/* Decodes ids to UTF-8 bytes (special tokens skipped when skip_special).
 * *text is malloc'd and NUL-terminated, owned by the caller. */
int bpe_decode(const struct bpe *t, const int32_t *ids, size_t n_ids, bool skip_special,
               char **text, size_t *len);

int32_t bpe_vocab_size(const struct bpe *t);
int32_t bpe_bos_id(const struct bpe *t); /* -1 when none */
int32_t bpe_eos_id(const struct bpe *t);
int32_t bpe_pad_id(const struct bpe *t);

/* Streaming decoder: feed ids one at a time; each call yields the bytes that
 * now form complete UTF-8 characters, holding back a character whose bytes
 * are split across tokens until the rest arrives. */
struct bpe_stream {
    const struct bpe *t;
    unsigned char pending[8];
    size_t n_pending;
};
void bpe_stream_init(struct bpe_stream *s, const struct bpe *t);
/* Writes at most cap bytes to out; returns the number written or a negative error. */
int bpe_stream_push(struct bpe_stream *s, int32_t id, char *out, size_t cap);
/* Flushes held-back bytes (invalid sequences become U+FFFD, as Hugging Face does). */
int bpe_stream_finish(struct bpe_stream *s, char *out, size_t cap);

#endif
