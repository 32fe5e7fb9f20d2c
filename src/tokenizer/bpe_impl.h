/* The inside of struct bpe, shared by the tokenizer's files and nobody else.
 *
 * The token table holds each id as the bytes it decodes to (what the
 * decoder makes of its symbol: GPT-2's byte-level alphabet undone, "▁" made
 * a space, <0xNN> made a byte), so decoding concatenates bytes. Encoding
 * works on ids: a word's first symbols are looked up in the symbol table
 * (as the vocabulary spells them) and merged through the pair table.
 */
#ifndef SHARDSWAP_TOKENIZER_BPE_IMPL_H
#define SHARDSWAP_TOKENIZER_BPE_IMPL_H

#include "core/utf8.h"
#include "tokenizer/bpe.h"
#include "tokenizer/byte_level.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define BPE_MAX_ID (1 << 24) /* ids at or above this are rejected as malformed */

enum { BPE_TOK_PRESENT = 1, BPE_TOK_SPECIAL = 2 };

/* One entry of the pair table: merging (a, b) gives id `merged`; lower rank merges first. */
struct bpe_pair {
    uint64_t key; /* (uint64_t)a << 32 | b; BPE_PAIR_EMPTY when the slot is free */
    int32_t rank;
    int32_t merged;
};
#define BPE_PAIR_EMPTY UINT64_MAX

/* Open-addressing hash table, pair of ids -> (rank, merged id). */
struct bpe_pairs {
    struct bpe_pair *slots; /* (mask + 1) */
    size_t mask;
    size_t n;
};

/* A token matched as a whole in input text, before pre-tokenization. */
struct bpe_added {
    char *content; /* NUL-terminated UTF-8, owned */
    size_t len;
    int32_t id;
    bool special;        /* skipped by decode's skip_special */
    bool lstrip, rstrip; /* swallow whitespace on that side, as Hugging Face does */
    bool single_word;    /* matches only where no word character touches it */
    bool normalized;     /* matched in normalized text (when there is a normalizer) */
    bool strip_ascii;    /* lstrip / rstrip take ASCII white space only (llama.cpp's isspace) */
};

/* A set of added tokens as the matcher in bpe_encode.c searches it: sorted by
 * content, tok[from[b] .. from[b + 1]) being those that start with byte b. */
struct bpe_addset {
    struct bpe_added *tok; /* (n), owned; contents owned only when owns_content */
    size_t n;
    bool owns_content;
    uint32_t from[257];
};

struct pretok;
struct norm;

/* One step of a decoder, applied to each token's text at load (bpe_decoder.c). */
enum bpe_dec_kind { DEC_BYTE_LEVEL, DEC_REPLACE, DEC_BYTE_FALLBACK, DEC_STRIP, DEC_METASPACE };
struct bpe_dec_step {
    enum bpe_dec_kind kind;
    char *pattern, *content; /* Replace: every pattern -> content; Strip: content is one char;
                              * Metaspace: pattern is the replacement, content " " */
    size_t pattern_len, content_len;
    size_t start, stop; /* Strip: how many content chars to cut at each end */
    bool drop_first;    /* Metaspace: the first token loses every replacement instead */
};
#define BPE_DEC_MAX_STEPS 16
struct bpe_decoder {
    struct bpe_dec_step steps[BPE_DEC_MAX_STEPS]; /* per token, before any Fuse */
    size_t n;
    /* A Strip after Fuse: the whole output loses up to strip_start leading
     * copies of strip_char. */
    char strip_char[5];
    size_t strip_char_len, strip_start;
    bool first_differs; /* a Metaspace step decodes the first token its own way */
};

struct bpe {
    int32_t n_vocab;          /* ids are 0 .. n_vocab - 1; holes are not PRESENT */
    uint32_t *tok_off;        /* (n_vocab + 1) offsets into tok_bytes */
    unsigned char *tok_bytes; /* the bytes each id decodes to, back to back */
    uint8_t *tok_flags;       /* (n_vocab) BPE_TOK_* */
    size_t max_tok_len;
    int32_t byte_id[256]; /* byte-level: id of the single-byte token for each byte */
    struct bpe_pairs pairs;
    struct bpe_added *added; /* (n_added), sorted by content once loaded (bpe_added_sort) */
    size_t n_added;
    struct bpe_addset raw_set;  /* added tokens matched in the text as given */
    struct bpe_addset norm_set; /* those matched in normalized text (normalized: true) */
    int32_t bos, eos, pad, unk; /* -1 when none */
    int32_t eot;                /* a GGUF file's end-of-turn token, -1 when none */
    bool add_bos;
    /* What encode puts around the text when asked to add special tokens. */
    int32_t tpl_pre[8], tpl_suf[8];
    size_t n_pre, n_suf;

    /* The model. byte_level: symbols spell bytes in GPT-2's alphabet and a
     * word starts as one symbol per byte; else symbols are text and a word
     * starts as one symbol per character (SentencePiece-style). */
    bool byte_level;
    bool ignore_merges;       /* a word that is itself a symbol is that one id */
    bool byte_fallback;       /* a character without a symbol becomes its <0xNN> bytes */
    bool fuse_unk;            /* consecutive unknown characters become one unk */
    int32_t model_unk;        /* the model's unk_token id, -1 when none */
    int32_t fallback_id[256]; /* id of <0xNN>, -1 when missing */
    struct bpe_symtab *syms;  /* symbol -> id, as the vocabulary spells it */
    /* SentencePiece-style: the character that stands for a space, when no
     * symbol has it after another character (words split there, bpe_merge.c). */
    char split_char[5];
    size_t split_len;
    struct norm *normalizer; /* NULL: none */
    struct pretok *pretok;
    /* Whole-output Strip of the decoder (bpe_decoder.c). */
    char strip_char[5];
    size_t strip_char_len, strip_start;
    /* Tokens whose bytes differ when they come first (Metaspace's decoder):
     * first_id[i] (ascending) decodes to first_bytes[first_off[i] ..
     * first_off[i + 1]) there. */
    int32_t *first_id;
    uint32_t *first_off;
    unsigned char *first_bytes;
    size_t n_first;
};

/* Pair table (bpe_merge.c). */
int bpe_pairs_init(struct bpe_pairs *p, size_t expected);
void bpe_pairs_free(struct bpe_pairs *p);
/* Inserts or overwrites (a, b); the caller has sized the table for every insert. */
void bpe_pairs_put(struct bpe_pairs *p, int32_t a, int32_t b, int32_t rank, int32_t merged);
const struct bpe_pair *bpe_pairs_get(const struct bpe_pairs *p, int32_t a, int32_t b);

/* Scratch space for merging one word at a time; one per bpe_encode call. */
struct bpe_merge_work {
    struct bpe_merge_sym *sym;
    size_t sym_cap;
    struct bpe_merge_cand *heap;
    size_t heap_cap;
    char *key; /* the word in the byte-level alphabet (ignore_merges) */
    size_t key_cap;
};
void bpe_merge_work_free(struct bpe_merge_work *w);
/* Applies the merges to word (n > 0 bytes) and appends the resulting ids to
 * out; returns the number appended (at most n) or ERR_NOMEM. The word starts
 * as bytes (byte_level) or characters looked up in t->syms. */
int bpe_merge_word(const struct bpe *t, struct bpe_merge_work *w, const unsigned char *word,
                   size_t n, int32_t *out);

/* GPT-2's byte-level alphabet: byte_level_cp, byte_level_byte
 * (tokenizer/byte_level.h, included above). */

/* Pre-tokenizer (pretokenize.c): steps of regex splits through PCRE2. */
int pretok_open_gpt2(struct pretok **out);
/* From tokenizer.json's "pre_tokenizer" (NULL or null: the text is one word);
 * *byte_level says whether a ByteLevel step is in it. path labels errors. */
int pretok_open_json(json_t *pt, const char *path, struct pretok **out, bool *byte_level);
void pretok_close(struct pretok *p);
/* Metaspace's replacement character when a step has one, else NULL. */
const char *pretok_space_replacement(const struct pretok *p, size_t *n);
typedef int (*pretok_word_fn)(void *ctx, const unsigned char *word, size_t n);
/* Splits text into words and calls fn on each in order; stops at the first
 * negative return and passes it on. first: the text starts the input
 * (Metaspace's prepend_scheme "first"). Thread-safe: match data is per call. */
int pretok_split(const struct pretok *p, const unsigned char *text, size_t n, bool first,
                 pretok_word_fn fn, void *ctx);

/* Rewrites a Hugging Face (Oniguruma) regex for PCRE2 into out, which has
 * room for 64 bytes per byte of in (pretokenize.c). */
void bpe_regex_translate(const char *in, char *out);

/* Unicode normalization forms (unicode_norm.c): in[0..n) into *out
 * (malloc'd, owned by the caller); bytes that are not UTF-8 pass through. */
enum unicode_form { UN_NFC, UN_NFD, UN_NFKC, UN_NFKD };
int unicode_normalize(enum unicode_form form, const unsigned char *in, size_t n,
                      unsigned char **out, size_t *out_n);

/* Words of a SentencePiece-style model may be split before every space
 * character c[0..n) (the normalizer's or Metaspace's replacement for " ")
 * that follows another character when no symbol has c after another
 * character and c is a symbol: sets t->split_char then (bpe_merge.c). */
void bpe_split_check(struct bpe *t, const char *c, size_t n);

/* Normalizer (normalize.c). */
int norm_open_json(json_t *j, const char *path, struct norm **out); /* *out NULL for null */
void norm_close(struct norm *nm);
/* Normalizes in[0..n) into *out (malloc'd, owned by the caller). */
int norm_run(const struct norm *nm, const unsigned char *in, size_t n, unsigned char **out,
             size_t *out_n);
/* The one-character replacement the normalizer writes for " " (Replace
 * {"String": " "}), or NULL. */
const char *norm_space_replacement(const struct norm *nm, size_t *n);

/* Decoder (bpe_decoder.c): parses tokenizer.json's "decoder" (byte_level:
 * what a null decoder means), and turns one symbol into the bytes it decodes
 * to, appended to a malloc'd buffer *buf of *cap bytes at *len, with scratch
 * space sc (zeroed at first, freed by bpe_dec_scratch_free). */
int bpe_decoder_parse(struct bpe_decoder *d, json_t *j, bool byte_level, const char *path);
void bpe_decoder_free(struct bpe_decoder *d);
struct bpe_dec_scratch {
    unsigned char *a, *b;
    size_t a_cap, b_cap;
};
/* first: the token comes first in the output (Metaspace's rule). */
int bpe_decoder_token(const struct bpe_decoder *d, struct bpe_dec_scratch *sc, bool first,
                      const char *sym, size_t n, unsigned char **buf, size_t *len, size_t *cap);
void bpe_dec_scratch_free(struct bpe_dec_scratch *sc);

/* Loading (bpe.c, bpe_vocab.c, bpe_special.c). */
/* Reads a whole file; *data is malloc'd and NUL-terminated, owned by the caller. */
/* The largest tokenizer file read (tokenizer.json of the largest vocabularies
 * is ~35 MB). */
#define BPE_FILE_MAX ((size_t)256 << 20)
int bpe_file_read(const char *path, char **data, size_t *len);
/* Parses the JSON object in the file at path into *out (owned by the caller).
 * When optional, a missing file gives 0 and *out NULL. */
int bpe_json_load(const char *path, bool optional, json_t **out);
/* The same with Jansson's decoding flags (JSON_DECODE_INT_AS_REAL for config
 * files, whose model_max_length is often 1e30 written as an integer). */
int bpe_json_load_flags(const char *path, bool optional, size_t flags, json_t **out);
enum bpe_layout { BPE_LAYOUT_HF, BPE_LAYOUT_TOKENIZER_JSON, BPE_LAYOUT_OPENAI };
/* Symbol table, the vocabulary as the files spell it: byte-level symbol ->
 * id. Needed only while loading (bpe_vocab.c). */
struct bpe_symtab_slot {
    uint32_t off, len; /* the symbol is text[off, off + len) */
    int32_t id;        /* -1: free slot */
    uint32_t hash;
};
struct bpe_symtab {
    struct bpe_symtab_slot *slots; /* (mask + 1) */
    uint32_t *by_id;               /* (mask + 1) id -> index into slots + 1; 0: free */
    size_t mask, n;
    char *text; /* every symbol, back to back */
    size_t text_len, text_cap;
    int32_t n_ids; /* highest id + 1 */
};
void bpe_symtab_free(struct bpe_symtab *st);
/* FNV-1a of s[0..n), folded to 32 bits: the hash of every string-keyed table here. */
uint32_t bpe_hash_bytes(const char *s, size_t n);
/* The id of symbol s[0..n), or -1. */
int32_t bpe_symtab_get(const struct bpe_symtab *st, const char *s, size_t n);
/* Fills st from vocab.json / encoder.json at path. */
int bpe_symtab_load_file(struct bpe_symtab *st, const char *path);
/* Fills st from tokenizer.json's "model"."vocab" object; path labels errors. */
int bpe_symtab_from_json(struct bpe_symtab *st, json_t *vocab, const char *path);

/* Reads the added and special tokens of dir and the BOS rule into t->added,
 * t->bos/eos/unk/pad and t->add_bos, giving each token an id: its own, its
 * vocab entry's, or a new one from *n_ids up (which grows). tokjson is the
 * parsed tokenizer.json for that layout, else NULL. */
int bpe_special_load(struct bpe *t, const char *dir, enum bpe_layout layout, json_t *tokjson,
                     const struct bpe_symtab *vocab, int32_t *n_ids);
/* The same from parsed files: cfg and map (tokenizer_config.json and
 * special_tokens_map.json, each NULL when absent) name the roles; the names
 * label errors, dir a default role's source. A caller that builds them (a
 * GGUF file's metadata) names every role, null when it has none, so that no
 * layout default applies. */
struct bpe_special_src {
    const char *dir;
    const char *tokjson_name;
    json_t *cfg, *map;
    const char *cfg_name, *map_name;
};
int bpe_special_apply(struct bpe *t, const struct bpe_special_src *src, enum bpe_layout layout,
                      json_t *tokjson, const struct bpe_symtab *vocab, int32_t *n_ids);
/* Sorts t->added by content and builds t->raw_set and t->norm_set, the sets the
 * matcher of added tokens in text searches (bpe_encode.c). */
int bpe_added_sort(struct bpe *t);
void bpe_addset_free(struct bpe_addset *s);
/* Builds the token table (n_ids ids) from vocab and t->added, each token's
 * bytes being what dec makes of its symbol. */
int bpe_vocab_build(struct bpe *t, const struct bpe_symtab *vocab, int32_t n_ids,
                    const struct bpe_decoder *dec, const char *vocab_name);
/* Fills the pair table from merges.txt at path, or from the JSON merge list
 * (strings "A B" or pairs ["A", "B"]) of tokenizer.json at path (bpe_merges_load.c). */
int bpe_merges_load_txt(struct bpe *t, const struct bpe_symtab *vocab, const char *path);
int bpe_merges_load_json(struct bpe *t, const struct bpe_symtab *vocab, json_t *merges,
                         const char *path);
/* The same for a list that errors call field (a GGUF file's tokenizer.ggml.merges). */
int bpe_merges_load_list(struct bpe *t, const struct bpe_symtab *vocab, json_t *merges,
                         const char *path, const char *field);
/* A tokenizer from an already parsed tokenizer.json (tokjson, borrowed) and
 * roles from special; merges_fn, when non-NULL, fills t->pairs instead of
 * tokjson's model.merges. name labels errors. (bpe.c) */
int bpe_open_parsed(json_t *tokjson, const char *name, const struct bpe_special_src *special,
                    int (*merges_fn)(struct bpe *t, const struct bpe_symtab *vocab, void *ctx),
                    void *merges_ctx, struct bpe **out);
/* bpe_open for a GGUF checkpoint path (bpe_gguf.c). */
int bpe_open_gguf_path(const char *path, struct bpe **out);

/* Writes s[0..n) into buf as a printable, quoted, possibly shortened string
 * for error messages; returns buf. */
const char *bpe_quote(const char *s, size_t n, char *buf, size_t cap);

#endif
