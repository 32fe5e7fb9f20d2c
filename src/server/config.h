/* The server's configuration: a YAML file (libyaml) and the command line's
 * shortcuts, turned into the serving stack's config (engine/stack.h) and
 * the HTTP listener's settings. Every key, its flag, type, range, default
 * and help is one entry of the table in config_keys.h; docs/serve.example.yaml
 * is the commented example and shows every key of the table, and nothing
 * else is accepted (an unknown key, a wrong type or a value out of range is
 * an error naming the file, line and key).
 *
 *   serve_config_init(c)               the table's defaults
 *   serve_config_parse_yaml(text, ...) a YAML document into c (the file's
 *   serve_config_load(path, c)         keys override what c holds)
 *   serve_config_add_model(c, "NAME=DIR")  --model shortcut
 *   serve_config_check(c)              what must hold before serving: every
 *                                      key's type and range (the table), at
 *                                      least one model, model names and
 *                                      aliases safe in URLs and unique, the GPU and process lists
 * against the devices, then stack_config_check (devices on the job's processes, policy, precisions,
 * unique names, TP x PP within the devices) serve_config_stack(c, ...)         the stack_config to
 * stack_open serve_config_free(c)
 */
#ifndef SHARDSWAP_SERVER_CONFIG_H
#define SHARDSWAP_SERVER_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/stack.h"
#include "sched/sched.h"

/* Models a config may list: as many as the engine serves (admin adds
 * count against the same limit). */
#define SERVE_MAX_MODELS SCHED_MAX_MODELS

/* The range of each numeric setting: the lowest and highest value, as the
 * key table (config_keys.c) gives them to the YAML key, its flag and
 * serve_config_check. */
#define SERVE_PORT_MIN 0
#define SERVE_PORT_MAX 65535
#define SERVE_HTTP_THREADS_MIN 1
#define SERVE_HTTP_THREADS_MAX 256
#define SERVE_MAX_CONNECTIONS_MIN 1
#define SERVE_MAX_CONNECTIONS_MAX 1048576
#define SERVE_PER_CLIENT_MIN 0 /* 0: half of max_connections */
#define SERVE_PER_CLIENT_MAX 1048576
#define SERVE_TIMEOUT_MIN 1 /* connection, header and body timeouts, seconds */
#define SERVE_TIMEOUT_MAX 86400
#define SERVE_SECONDS_MAX 86400 /* grace_s, request_timeout_s (from 0; real numbers) */
#define SERVE_MAX_BATCH_MIN 1
#define SERVE_MAX_BATCH_MAX 4096
#define SERVE_QUEUE_CAP_MIN 1
#define SERVE_QUEUE_CAP_MAX 1048576
#define SERVE_MAX_ROOTS 16
#define SERVE_MAX_ALIASES 16 /* more names of one model */
/* Model names appear in URLs and logs: 1 to this many bytes of A-Z a-z 0-9
 * . _ : / -, not starting with '/' and without "..". */
#define SERVE_MODEL_NAME_MAX 63
bool serve_model_name_ok(const char *s);
#define SERVE_MAX_GPU STACK_MAX_GPU /* the largest GPU ordinal devices.gpus accepts */

enum log_level { LOG_ERROR, LOG_WARN, LOG_INFO, LOG_DEBUG };

struct serve_model {
    char *name;          /* what requests name (owned) */
    /* more names requests may give it, each served by the same registered
     * model: one host copy, one residency (owned) */
    char *aliases[SERVE_MAX_ALIASES];
    int n_aliases;
    char *path;          /* checkpoint directory (owned) */
    int tp, pp;          /* >= 1 */
    bool expert_parallel;           /* routed experts whole on the tp ranks (stack.h) */
    bool expert_residency;          /* each routed expert resident on its own (stack.h) */
    int devices[STACK_MAX_DEVICES]; /* when n_devices: shard placement (stack.h) */
    int n_devices;       /* 0: devices 0 .. tp * pp - 1 */
    bool pinned;
    int max_batch;       /* 0: the server's */
    char *compute;       /* "f32", "bf16", "auto"; NULL: the server's (owned) */
    char *chat_template; /* a Jinja file for /v1/chat/completions; NULL: the
                            checkpoint's (tokenizer_config.json, chat_template.jinja) */
    double keep_alive;   /* seconds (serve_keep_alive_parse); INFINITY: never; NAN: the
                            server's */
    int priority;        /* engine_set_priority's (default 0) */
    double max_queue_wait; /* seconds; 0: no bound (default) */
    double min_resident;   /* seconds; 0: none (default) */
};

/* A LoRA adapter served over a model (stack_adapter_config's settings):
 * requests naming it run its base with its weights added. */
struct serve_adapter {
    char *name;        /* what requests name (owned); unique among models, aliases and adapters */
    char *base;        /* the name of a model served (not an adapter) (owned) */
    char *path;        /* the PEFT adapter directory (owned) */
    bool pinned;       /* kept on the devices whenever its base is resident */
    double keep_alive; /* seconds; INFINITY: never; NAN: the server's */
    int priority;      /* engine_set_priority's (default 0) */
};

struct serve_config {
    /* listener */
    char *host;                 /* default "127.0.0.1" */
    int port;                   /* default 8000; 0: any free port */
    char *api_key;              /* NULL: no key needed */
    char *admin_key;            /* NULL: admin routes take api_key */
    char *model_roots[SERVE_MAX_ROOTS]; /* POST /admin/models may add only below these */
    int n_model_roots;
    int http_threads;           /* libmicrohttpd's pool (default 4) */
    int max_connections;        /* default 256 */
    int connection_timeout_s;   /* idle client (default 30) */
    int header_timeout_s;       /* a request's headers, from the connection's start or (kept
                                   alive) the request's first byte (default 20) */
    int body_timeout_s;         /* a request's body, from the headers' end (default 60) */
    int max_connections_per_client; /* from one address; 0: half of max_connections */
    uint64_t max_body_bytes;    /* default 1 MiB */
    double grace_s;             /* shutdown: in-flight requests get this long (default 30) */
    double request_timeout_s;   /* a completion not done by then ends with 504 (0: none) */
    enum log_level log_level;   /* default LOG_INFO */
    /* stack */
    char *device_kind;          /* "cpu" (default) or "cuda" */
    int n_devices;              /* default 1 */
    /* cuda: device d is on GPU gpus[d] (a GPU listed again: a further
     * partition of it); n_gpus 0: device d on GPU d, else n_gpus ==
     * n_devices (devices.gpus, --devices cuda:G,...) */
    int gpus[STACK_MAX_DEVICES];
    int n_gpus;
    /* under mpirun: device d is process ranks[d]'s; n_ranks 0: every device
     * is process 0's, else n_ranks == n_devices (devices.ranks, --devices
     * P/cpu:I,...) */
    int ranks[STACK_MAX_DEVICES];
    int n_ranks;
    /* the job's processes (0: 1), which devices.ranks must be among: not a
     * key; whoever opened the job (cmd_serve) sets it before the check */
    int n_procs;
    uint64_t device_budget;     /* bytes per device; 0: sized for every model */
    uint64_t host_budget;       /* 0: sized */
    char *policy;               /* NULL: the engine's default */
    int max_batch;              /* default 8 */
    int queue_cap;              /* waiting requests per model (default 256) */
    double link_gbps;           /* CPU devices: emulated host link (0: none) */
    char *compute;              /* "f32", "bf16"; "auto" (default) or NULL: each checkpoint's */
    double keep_alive;          /* the models' keep_alive in seconds (serve_keep_alive_parse);
                                   INFINITY: never; NAN: the policy's own */
    struct serve_model *models; /* n_models of them (owned; grown as models are added) */
    int n_models, models_cap;
    struct serve_adapter *adapters; /* n_adapters of them (owned; grown as they are added) */
    int n_adapters, adapters_cap;
};

/* A keep_alive: how long an idle model stays resident, counted from the end
 * of its last batch, as text, the durations Ollama takes: seconds >= 0 as a
 * plain number ("300", "2.5"; 0: it leaves at once), a duration of one or
 * more numbers each with a unit ms, s, m or h ("30s", "5m", "1h30m",
 * "1.5h"), or -1 (never: *out INFINITY); NULL: *out NAN (unset: the
 * policy's own, lru's 300 s, never for the others). ERR_INVALID, with what
 * was expected, otherwise. */
int serve_keep_alive_parse(const char *text, double *out);

void serve_config_init(struct serve_config *c);
/* A model with the table's defaults; serve_model_free frees what it owns
 * (and leaves it as serve_model_init would not: zeroed). */
void serve_model_init(struct serve_model *m);
void serve_model_free(struct serve_model *m);
void serve_config_free(struct serve_config *c); /* frees what c owns; NULL-safe */
/* An adapter with the table's defaults; serve_adapter_free frees what it
 * owns (and zeroes it). */
void serve_adapter_init(struct serve_adapter *a);
void serve_adapter_free(struct serve_adapter *a);

/* Parses a YAML document (len bytes; name is what messages call it) into c,
 * overriding the keys it sets and appending its models. Errors: ERR_FORMAT
 * ("NAME:LINE: key 'X': expected ..."), ERR_INVALID; c then holds what came
 * before the error (still for serve_config_free). Never reads files. */
int serve_config_parse_yaml(const char *text, size_t len, const char *name,
                            struct serve_config *c);
/* Reads path (a regular file of at most 1 MiB) and parses it. */
int serve_config_load(const char *path, struct serve_config *c);
/* "NAME=DIR": a model with TP = PP = 1 and the server's max batch. */
int serve_config_add_model(struct serve_config *c, const char *arg);
/* "ALIAS=NAME" (--alias): another name of the model named NAME, which c
 * must have by then (the file's and the --model flags' are). */
int serve_config_add_alias(struct serve_config *c, const char *arg);
/* "NAME=BASE:DIR" (--adapter): an adapter over the model named BASE. A
 * model's name may hold ':' itself, so BASE is the longest name of c's
 * models (the file's and the --model flags') that DIR's colon follows, else
 * what comes before the first ':' (then serve_config_check names it). */
int serve_config_add_adapter(struct serve_config *c, const char *arg);
int serve_config_check(const struct serve_config *c);
/* A model as the key table reads one from a JSON object (POST
 * /admin/models' body), with the same rows, ranges and messages as a
 * config file's models[] entry: each key through serve_key_set_json, null
 * as the file's null. Reads into m (serve_model_init'd; the caller frees
 * it). ERR_INVALID naming the key ("max_batch: expected an integer from 0
 * to 4096, got 5000"; "'pined': unknown key (expected one of name, path,
 * ...)"), with *key the key (the body's own spelling for an unknown one,
 * valid while obj is). */
struct json_t;
int serve_model_from_json(const struct json_t *obj, struct serve_model *m, const char **key);
/* What must hold of one model, file's or admin's: every models[] key's
 * value against its row (serve_key_check), a name safe in URLs, as many
 * devices as tp x pp when they are given. name names the model in messages
 * ("models[2]"; "" for the keys alone: "max_batch: ..."); *key is the key
 * a refusal is about. */
int serve_model_check(const struct serve_model *m, const char *name, const char **key);
/* An adapter as the key table reads one from a JSON object (POST
 * /admin/models' body with a "base"), as serve_model_from_json reads a
 * model: the adapters[] rows, the same ranges and messages, *key the key a
 * refusal is about. */
int serve_adapter_from_json(const struct json_t *obj, struct serve_adapter *a, const char **key);
/* What must hold of one adapter on its own, file's, flag's or admin's:
 * every adapters[] key against its row, a name safe in URLs. name names
 * it in messages ("adapters[2]"; "" for the keys alone); *key the key. Its
 * base and name against the models served are the caller's (the config's
 * check, the admin route). */
int serve_adapter_check(const struct serve_adapter *a, const char *name, const char **key);
/* The adapters of c into ac[0 .. c->n_adapters) and sc->adapters (after
 * serve_config_stack): stack_open serves them after the models. ac points
 * into c. */
void serve_config_stack_adapters(const struct serve_config *c, struct stack_config *sc,
                                 struct stack_adapter_config *ac);
/* One adapter as stack_add_adapter takes it (pointing into a): its
 * keep_alive, else the server's. */
void serve_adapter_stack(const struct serve_config *c, const struct serve_adapter *a,
                         struct stack_adapter_config *ac);
/* The connections one client address may hold: max_connections_per_client,
 * or when 0 half of max_connections (at least 1). */
int serve_config_per_client(const struct serve_config *c);
/* Fills *sc (and mc[0..c->n_models)) for stack_open; both point into c,
 * which must outlive them. Loads overlap compute when link_gbps is set (the
 * copies then take no CPU); with the host budget left sized, every model is
 * staged into host memory at open. */
void serve_config_stack(const struct serve_config *c, struct stack_config *sc,
                        struct stack_model_config *mc);
/* One model of c, or one an admin adds beside them, as stack_add_model
 * takes it (pointing into m): its keep_alive, else the server's. */
void serve_model_stack(const struct serve_config *c, const struct serve_model *m,
                       struct stack_model_config *mc);

#endif
