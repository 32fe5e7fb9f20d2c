/* The server's configuration keys, one table (config_keys.c): each key's
 * YAML path, its `shardswap serve` flag, type, range, default, field and
 * help. What reads the table:
 *   - config.c's YAML walk (the known keys of each mapping, each scalar's
 *     parse and range, the defaults of serve_config_init and of a model);
 *   - serve_config_check (every scalar's range again, for the flags too);
 *   - POST /admin/models (a model's or, with "base", an adapter's keys
 *     from its JSON body: serve_model_from_json, serve_adapter_from_json,
 *     serve_key_set_json, the same words);
 *   - cmd_serve.c (the flags, their ranges and the --help lines);
 *   - tests/test_serve_config.c (the table and docs/serve.example.yaml
 *     name the same keys).
 *
 * Paths: "port" (the root mapping), "devices.count" (a mapping below a
 * key), "models[].tp" (a key of each mapping in a list). A key whose field
 * is in struct serve_model has a path beginning "models[].", one in struct
 * serve_adapter "adapters[]."; every other key's field is in struct
 * serve_config.
 */
#ifndef SHARDSWAP_SERVER_CONFIG_KEYS_H
#define SHARDSWAP_SERVER_CONFIG_KEYS_H

#include <stdbool.h>
#include <stddef.h>

#include "server/config.h"

enum serve_key_type {
    SK_INT,      /* int; lo..hi */
    SK_DOUBLE,   /* double; lo..hi, hi INFINITY: any finite one >= lo */
    SK_BOOL,     /* bool; true or false */
    SK_BYTES,    /* uint64_t; a byte count (core/bytes.h) >= lo */
    SK_DURATION, /* double seconds (serve_keep_alive_parse); INFINITY: never; NAN: unset */
    SK_STRING,   /* char * (owned), non-empty; one of choices when they are given */
    SK_ENUM,     /* an int-sized enum: the index of the value in choices */
    SK_INTS,     /* int[max_items] and its count at count_offset; items lo..hi */
    SK_STRINGS,  /* char *[max_items] (owned) and its count; non-empty items */
    SK_SECTION,  /* a mapping of the keys below this path */
    SK_MODELS,   /* a list of mappings, each a struct serve_model (models[].*) */
    SK_ADAPTERS, /* a list of mappings, each a struct serve_adapter (adapters[].*) */
};

/* what null means for a key (any key that says nothing: its default stays) */
enum serve_key_null {
    SK_NULL_KEEPS,   /* the value stays (the default, or an earlier file's) */
    SK_NULL_CLEARS,  /* SK_STRING: the value becomes NULL, SK_DURATION NAN ("unset") */
    SK_NULL_REFUSED, /* an error: the key must have a value (models[].name) */
};

struct serve_key {
    const char *path;    /* "port", "devices.count", "models[].tp" */
    const char *flag;    /* `shardswap serve --FLAG`, without the dashes; NULL: none */
    const char *metavar; /* the flag's value in --help ("N", "BYTES") */
    enum serve_key_type type;
    enum serve_key_null null;
    double lo, hi;              /* SK_INT, SK_DOUBLE, SK_INTS items; SK_BYTES: lo only */
    double def; /* SK_INT, SK_DOUBLE, SK_BOOL (0/1), SK_BYTES, SK_ENUM index, SK_DURATION */
    const char *def_str;        /* SK_STRING: the default (NULL: unset) */
    const char *const *choices; /* SK_ENUM, and SK_STRING when limited: NULL-terminated */
    size_t offset;              /* the field, in struct serve_config or struct serve_model */
    size_t count_offset;        /* SK_INTS, SK_STRINGS: the int count beside the items */
    int max_items;        /* SK_INTS, SK_STRINGS: at most this many (at least 1 for SK_INTS) */
    const char *expected; /* lists and sections: what a message says was expected */
    const char *help;     /* one line for --help (the default and range are added) */
};

extern const struct serve_key serve_keys[];
extern const int serve_n_keys;

/* When k's path is SCOPE.LEAF (SCOPE "" for the root mapping, "devices",
 * "models[]"), LEAF; else NULL. */
const char *serve_key_leaf(const struct serve_key *k, const char *scope);
/* The key at path, NULL when the table has none. */
const struct serve_key *serve_key_find(const char *path);
/* The field of k in base (a struct serve_config, or a struct serve_model
 * for models[].* keys). */
void *serve_key_field(const struct serve_key *k, void *base);
const void *serve_key_cfield(const struct serve_key *k, const void *base);

/* Sets the defaults of every scalar key in scope into base; strings
 * strdup'd (NULL when out of memory: serve_config_check says so). */
void serve_keys_defaults(const char *scope, void *base);

/* What a value of k must be, as messages say it ("an integer from 1 to
 * 256", "a byte count >= 1", "one of error, warn, info, debug"). */
void serve_key_expected(const struct serve_key *k, char *buf, size_t cap);
/* The range --help and the flag parser's message show ("1..256", "G >= 0",
 * "error|warn|info|debug"); "" when k has none. */
void serve_key_range(const struct serve_key *k, char *buf, size_t cap);
/* The default as --help says it ("8", "1MiB", "127.0.0.1"); "" when unset. */
void serve_key_default(const struct serve_key *k, char *buf, size_t cap);

/* Parses text as a value of k (SK_BYTES, SK_STRING, SK_ENUM: what a flag
 * and a YAML scalar both give) into k's field in base, an owned string
 * replaced. what names the setting in messages ("--max-body",
 * "t.yaml:3: key 'max_body_bytes'"): ERR_INVALID "WHAT: expected ..., got
 * 'TEXT'". */
int serve_key_set_text(const struct serve_key *k, void *base, const char *text, const char *what);

/* Sets k's field in base from a JSON value (POST /admin/models' body), as
 * serve_key_set_text does from text, with the same range and message: an
 * integer for SK_INT, a number for SK_DOUBLE, true or false, a byte count
 * as an integer or as text, a duration as a number of seconds (-1: never)
 * or as text, a string for SK_STRING and SK_ENUM, an array of integers for
 * SK_INTS. what names the key; ERR_INVALID "WHAT: expected ..., got JSON"
 * otherwise. v is a value, not null (null is the caller's: the key's
 * null rule). */
struct json_t;
int serve_key_set_json(const struct serve_key *k, void *base, const struct json_t *v,
                       const char *what);

/* Checks k's value in base against its type and range (for the values
 * flags and code set as well as the parser): ERR_INVALID
 * "NAME: expected ..., got ..." with NAME the key as given ("models[2].tp"). */
int serve_key_check(const struct serve_key *k, const void *base, const char *name);

#endif
