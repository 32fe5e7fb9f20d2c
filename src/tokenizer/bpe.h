/* BPE tokenizers as Hugging Face tokenizers runs them.
 *
 * Loaded from a directory holding tokenizer.json, vocab.json + merges.txt, or
 * OpenAI's encoder.json + vocab.bpe. tokenizer.json is read in full: its
 * normalizer, pre-tokenizer, BPE model (byte-level like GPT-2, Llama 3 and
 * Qwen2, or SentencePiece-style with byte fallback like Llama 2 and Phi-3),
 * added tokens, post-processor and decoder; a part that is not implemented
 * is an error at open naming it. Special tokens and the BOS rule also come
 * from tokenizer_config.json / special_tokens_map.json when present (with
 * add_bos_token / add_eos_token rebuilding the post-processor, as
 * transformers 5 does); a GPT-2/OPT directory without them gets OPT's
 * defaults, as transformers loads facebook/opt-*: bos = eos = unk = "</s>"
 * (id 2), pad = "<pad>" (id 1), "</s>" prepended as BOS. Added and special
 * tokens that appear in input text encode as single ids.
 *
 * A GGUF checkpoint (a .gguf file, a directory holding one, or a split set's
 * first file) carries its tokenizer in its metadata (tokenizer.ggml.*): its
 * vocabulary, merges or scores, token types and roles fill the same tables
 * as tokenizer.json does (bpe_gguf.c), with the pre-tokenizer llama.cpp
 * runs for the file's tokenizer.ggml.pre.
 */
#ifndef SHARDSWAP_TOKENIZER_BPE_H
#define SHARDSWAP_TOKENIZER_BPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct bpe;
struct gguf_file;

/* dir: a tokenizer directory, or a GGUF checkpoint (file, directory holding
 * one, first file of a split set). */
int bpe_open(const char *dir, struct bpe **out);
/* The tokenizer of an open GGUF file (tokenizer.ggml.*); g may be closed
 * afterwards. Every count, id and string is checked: a bad one is a one-line
 * error naming the key and the index. */
int bpe_open_gguf(const struct gguf_file *g, struct bpe **out);
void bpe_close(struct bpe *t); /* NULL-safe */

/* Encodes len bytes of UTF-8 text. *ids is malloc'd, owned by the caller.
 * add_bos adds what the post-processor puts around the text (transformers'
 * add_special_tokens=True: BOS first for most, nothing for some); false gives
 * add_special_tokens=False. Thread-safe on a shared struct bpe. */
int bpe_encode(const struct bpe *t, const char *text, size_t len, bool add_bos, int32_t **ids,
               size_t *n_ids);

/* Decodes ids to UTF-8 bytes (special tokens skipped when skip_special).
 * *text is malloc'd and NUL-terminated, owned by the caller. Bytes that do not
 * form UTF-8 become U+FFFD, as in Hugging Face; ids past the vocabulary decode
 * to nothing; a negative id is ERR_INVALID. */
int bpe_decode(const struct bpe *t, const int32_t *ids, size_t n_ids, bool skip_special,
               char **text, size_t *len);

int32_t bpe_vocab_size(const struct bpe *t);
int32_t bpe_bos_id(const struct bpe *t); /* -1 when none */
int32_t bpe_eos_id(const struct bpe *t);
int32_t bpe_pad_id(const struct bpe *t);
int32_t bpe_unk_id(const struct bpe *t);
/* The end-of-turn token a GGUF file names (tokenizer.ggml.eot_token_id), else -1. */
int32_t bpe_eot_id(const struct bpe *t);
bool bpe_adds_bos(const struct bpe *t);               /* whether add_bos prepends bpe_bos_id() */
bool bpe_is_special(const struct bpe *t, int32_t id); /* skipped by skip_special */
/* The id of the added or special token whose content is exactly s[0..n),
 * else of the lowest vocabulary entry that decodes to exactly those bytes,
 * else -1 (how a caller finds "<|eot_id|>" or "<|im_end|>"). Linear in the
 * vocabulary: for setup, not per token. */
int32_t bpe_token_id(const struct bpe *t, const char *s, size_t n);

/* Streaming decoder: feed ids one at a time; each call yields the bytes that
 * now form complete UTF-8 characters, holding back a character whose bytes
 * are split across tokens until the rest arrives. Special tokens yield
 * nothing, so the concatenated output equals bpe_decode(..., skip_special =
 * true, ...). The struct is plain data: copy or reset it freely. */
struct bpe_stream {
    const struct bpe *t;
    unsigned char pending[8];
    size_t n_pending;
    size_t n_stripped; /* leading characters the decoder's Strip has cut so far */
    bool begun;        /* whether anything has been output (the Strip is over) */
    bool past_first;   /* whether a token has been decoded (Metaspace's first-token rule) */
};
void bpe_stream_init(struct bpe_stream *s, const struct bpe *t);
/* Writes at most cap bytes to out; returns the number written or a negative
 * error (ERR_INVALID when cap is too small, leaving the stream unchanged).
 * A buffer of bpe_stream_chunk_max(t) bytes always suffices. */
int bpe_stream_push(struct bpe_stream *s, int32_t id, char *out, size_t cap);
size_t bpe_stream_chunk_max(const struct bpe *t);
/* Flushes held-back bytes (invalid sequences become U+FFFD, as Hugging Face does). */
int bpe_stream_finish(struct bpe_stream *s, char *out, size_t cap);

#endif
