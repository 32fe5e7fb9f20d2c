/* The server's configuration keys (config_keys.h): the table, then what
 * every reader of it shares (defaults, the words of a range, a value's
 * parse from text, a value's check). docs/serve.example.yaml shows every
 * key of the table with its default (tests/test_serve_config.c holds them
 * to it); --help shows every key with a flag. */
#include "server/config_keys.h"

#include <assert.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/bytes.h"
#include "core/error.h"
#include "server/log.h"

#define QUOTE_MAX 64 /* bytes of a value quoted in a message */

_Static_assert(sizeof(enum log_level) == sizeof(int), "SK_ENUM fields are int-sized");

static const char *const device_kinds[] = {"cpu", "cuda", NULL};

#define CFG(field) offsetof(struct serve_config, field)
#define MODEL(field) offsetof(struct serve_model, field)
#define ADAPTER(field) offsetof(struct serve_adapter, field)

/* one key a paragraph */
/* clang-format off */
const struct serve_key serve_keys[] = {
    /* ---- the HTTP listener ---- */
    {.path = "host", .flag = "host", .metavar = "ADDR", .type = SK_STRING, .def_str = "127.0.0.1",
     .offset = CFG(host), .help = "address to listen on"},
    {.path = "port", .flag = "port", .metavar = "PORT", .type = SK_INT, .lo = SERVE_PORT_MIN,
     .hi = SERVE_PORT_MAX, .def = 8000, .offset = CFG(port),
     .help = "port to listen on; 0 = any free one"},
    {.path = "api_key", .flag = "api-key", .metavar = "KEY", .type = SK_STRING,
     .null = SK_NULL_CLEARS, .offset = CFG(api_key),
     .help = "require 'Authorization: Bearer KEY' (not on /health, /metrics); unset: none"},
    {.path = "admin_key", .flag = "admin-key", .metavar = "KEY", .type = SK_STRING,
     .null = SK_NULL_CLEARS, .offset = CFG(admin_key),
     .help = "key of the /admin routes; unset: the api key"},
    {.path = "model_roots", .flag = "model-root", .metavar = "DIR", .type = SK_STRINGS,
     .offset = CFG(model_roots), .count_offset = CFG(n_model_roots), .max_items = SERVE_MAX_ROOTS,
     .expected = "a list of at most 16 directories",
     .help = "POST /admin/models may add checkpoints below DIR (repeatable; the flags replace "
             "the config file's list); none: disabled"},
    {.path = "http_threads", .flag = "http-threads", .metavar = "N", .type = SK_INT,
     .lo = SERVE_HTTP_THREADS_MIN, .hi = SERVE_HTTP_THREADS_MAX, .def = 4,
     .offset = CFG(http_threads), .help = "HTTP worker threads"},
    {.path = "max_connections", .flag = "max-connections", .metavar = "N", .type = SK_INT,
     .lo = SERVE_MAX_CONNECTIONS_MIN, .hi = SERVE_MAX_CONNECTIONS_MAX, .def = 256,
     .offset = CFG(max_connections), .help = "connections at once; more are refused"},
    {.path = "max_connections_per_client", .flag = "max-connections-per-client", .metavar = "N",
     .type = SK_INT, .lo = SERVE_PER_CLIENT_MIN, .hi = SERVE_PER_CLIENT_MAX,
     .offset = CFG(max_connections_per_client),
     .help = "connections one client address may hold; more are refused; 0: half of "
             "--max-connections"},
    {.path = "connection_timeout_s", .flag = "timeout", .metavar = "S", .type = SK_INT,
     .lo = SERVE_TIMEOUT_MIN, .hi = SERVE_TIMEOUT_MAX, .def = 30,
     .offset = CFG(connection_timeout_s), .help = "close a connection idle this long"},
    {.path = "header_timeout_s", .flag = "header-timeout", .metavar = "S", .type = SK_INT,
     .lo = SERVE_TIMEOUT_MIN, .hi = SERVE_TIMEOUT_MAX, .def = 20, .offset = CFG(header_timeout_s),
     .help = "close a connection whose request headers are not all in S seconds after it "
             "opened (or, kept alive, after the next request's first byte), however steadily "
             "they come"},
    {.path = "body_timeout_s", .flag = "body-timeout", .metavar = "S", .type = SK_INT,
     .lo = SERVE_TIMEOUT_MIN, .hi = SERVE_TIMEOUT_MAX, .def = 60, .offset = CFG(body_timeout_s),
     .help = "close a connection whose request body is not all in S seconds after its headers"},
    {.path = "max_body_bytes", .flag = "max-body", .metavar = "BYTES", .type = SK_BYTES, .lo = 1,
     .def = 1 << 20, .offset = CFG(max_body_bytes), .help = "largest request body"},
    {.path = "grace_s", .flag = "grace", .metavar = "S", .type = SK_DOUBLE, .lo = 0,
     .hi = SERVE_SECONDS_MAX, .def = 30, .offset = CFG(grace_s),
     .help = "on SIGTERM/SIGINT, requests in flight get S seconds (a second signal ends it), "
             "then are cancelled"},
    {.path = "request_timeout_s", .flag = "request-timeout", .metavar = "S", .type = SK_DOUBLE,
     .lo = 0, .hi = SERVE_SECONDS_MAX, .offset = CFG(request_timeout_s),
     .help = "a completion not done S seconds after it arrived ends with 504, queued or "
             "running; 0: none"},
    {.path = "log_level", .flag = "log-level", .metavar = "LEVEL", .type = SK_ENUM, .def = LOG_INFO,
     .choices = log_level_names, .offset = CFG(log_level),
     .help = "what to log; info: one line per request"},
    /* ---- devices and the engine ---- */
    {.path = "devices", .flag = "devices", .metavar = "N|LIST", .type = SK_SECTION,
     .expected = "a mapping such as {kind: cpu, count: 2, budget: 2GiB}",
     .help = "N CPU devices (default 1), a list cpu:0,cpu:1,..., or cuda:G,... with G a GPU (a "
             "GPU listed again is another partition of it; needs a CUDA build); under mpirun "
             "an item P/cpu:I or P/cuda:G is process P's (no P/: process 0's; CPU indices "
             "count from 0 on each process)"},
    {.path = "devices.kind", .type = SK_STRING, .def_str = "cpu", .choices = device_kinds,
     .offset = CFG(device_kind), .help = "the kind of every device"},
    {.path = "devices.count", .type = SK_INT, .lo = 1, .hi = STACK_MAX_DEVICES, .def = 1,
     .offset = CFG(n_devices), .help = "how many devices"},
    {.path = "devices.gpus", .type = SK_INTS, .lo = 0, .hi = SERVE_MAX_GPU, .offset = CFG(gpus),
     .count_offset = CFG(n_gpus), .max_items = STACK_MAX_DEVICES,
     .expected = "a list of 1 to 64 GPU ordinals such as [0, 0] (one per device)",
     .help = "cuda: the GPU of each device; unset: device d on GPU d"},
    {.path = "devices.ranks", .type = SK_INTS, .lo = 0, .hi = STACK_MAX_PROC,
     .offset = CFG(ranks), .count_offset = CFG(n_ranks), .max_items = STACK_MAX_DEVICES,
     .expected = "a list of 1 to 64 process numbers such as [0, 1] (one per device)",
     .help = "under mpirun: the process of each device; unset: every device is process 0's"},
    {.path = "devices.budget", .flag = "device-budget", .metavar = "BYTES", .type = SK_BYTES,
     .offset = CFG(device_budget),
     .help = "memory of each device, e.g. 2GiB; 0: room for every model placed on it at once, "
             "within its memory: CPU devices share the machine's available memory "
             "(MemAvailable) less the host budget and a reserve of a tenth of the physical "
             "memory (at least 1 GiB); a GPU's devices share its free memory less a twentieth "
             "of it (at least 512 MiB); never less than the largest model on the device"},
    {.path = "host_budget", .flag = "host-budget", .metavar = "BYTES", .type = SK_BYTES,
     .offset = CFG(host_budget),
     .help = "host memory for model copies; 0: a copy of every model, plus 64 MiB"},
    {.path = "policy", .flag = "policy", .metavar = "NAME", .type = SK_STRING,
     .null = SK_NULL_CLEARS, .offset = CFG(policy),
     .help = "scheduling policy"},
    {.path = "max_batch", .flag = "max-batch", .metavar = "N", .type = SK_INT,
     .lo = SERVE_MAX_BATCH_MIN, .hi = SERVE_MAX_BATCH_MAX, .def = 8, .offset = CFG(max_batch),
     .help = "sequences per batch; a model's max_batch may lower it"},
    {.path = "queue_cap", .flag = "queue-cap", .metavar = "N", .type = SK_INT,
     .lo = SERVE_QUEUE_CAP_MIN, .hi = SERVE_QUEUE_CAP_MAX, .def = 256, .offset = CFG(queue_cap),
     .help = "waiting requests per model; beyond it 429"},
    {.path = "link_gbps", .flag = "link-gbps", .metavar = "G", .type = SK_DOUBLE, .lo = 0,
     .hi = INFINITY, .offset = CFG(link_gbps),
     .help = "CPU devices only: emulate a host link of G GB/s; 0: none"},
    {.path = "compute", .flag = "compute", .metavar = "f32|bf16|auto", .type = SK_STRING,
     .null = SK_NULL_CLEARS, .def_str = "auto", .offset = CFG(compute),
     .help = "precision of the linear layers: f32 (exact), bf16 (bf16 activations and weights, "
             "f32 sums, as transformers runs a bf16 model; for GGUF quantized weights, x quantized "
             "per block as llama.cpp does) or auto (bf16 for bf16 and quantized checkpoints, "
             "else f32; null is auto too)"},
    {.path = "keep_alive", .flag = "keep-alive", .metavar = "DURATION", .type = SK_DURATION,
     .null = SK_NULL_CLEARS, .def = NAN, .offset = CFG(keep_alive),
     .help = "how long an idle model stays on its devices, from the end of its last request: "
             "seconds, or 30s, 5m, 1h (0: it leaves at once; -1: forever; reading its state or "
             "/metrics is not use); "
             "unset: the policy's own (lru: 300, the others: forever); a model's keep_alive "
             "overrides it"},
    /* ---- the models served ---- */
    {.path = "models", .flag = "model", .metavar = "NAME=DIR", .type = SK_MODELS,
     .expected = "a list of models ({name: ..., path: ...})",
     .help = "serve the checkpoint in DIR as NAME, TP = PP = 1 (repeatable; added to the config "
             "file's)"},
    {.path = "models[].name", .type = SK_STRING, .null = SK_NULL_REFUSED, .offset = MODEL(name),
     .help = "what requests name in \"model\""},
    {.path = "models[].path", .type = SK_STRING, .null = SK_NULL_REFUSED, .offset = MODEL(path),
     .help = "the checkpoint directory"},
    {.path = "models[].aliases", .flag = "alias", .metavar = "ALIAS=NAME", .type = SK_STRINGS,
     .offset = MODEL(aliases), .count_offset = MODEL(n_aliases), .max_items = SERVE_MAX_ALIASES,
     .expected = "a list of at most 16 names",
     .help = "more names the model answers to, listed in /v1/models: one checkpoint, one host "
             "copy and one residency under each (repeatable; --alias ALIAS=NAME names a model "
             "of the file or of --model)"},
    {.path = "models[].tp", .type = SK_INT, .lo = 1, .hi = STACK_MAX_DEVICES, .def = 1,
     .offset = MODEL(tp), .help = "tensor-parallel degree"},
    {.path = "models[].pp", .type = SK_INT, .lo = 1, .hi = STACK_MAX_DEVICES, .def = 1,
     .offset = MODEL(pp), .help = "pipeline-parallel degree"},
    {.path = "models[].expert_parallel", .type = SK_BOOL, .offset = MODEL(expert_parallel),
     .help = "a mixture of experts' routed experts placed whole on the tp ranks, not split "
             "(attention and a shared expert stay split)"},
    {.path = "models[].expert_residency", .type = SK_BOOL, .offset = MODEL(expert_residency),
     .help = "a mixture of experts resident expert by expert: cold experts leave first under "
             "memory pressure and come back on demand when a token routes to them"},
    {.path = "models[].devices", .type = SK_INTS, .lo = 0, .hi = STACK_MAX_DEVICES - 1,
     .offset = MODEL(devices), .count_offset = MODEL(n_devices), .max_items = STACK_MAX_DEVICES,
     .expected = "a list of 1 to 64 device indices such as [0, 1]",
     .help = "the device of each shard, stage-major; unset: 0 .. tp x pp - 1"},
    {.path = "models[].pinned", .type = SK_BOOL, .offset = MODEL(pinned),
     .help = "never swapped out"},
    {.path = "models[].max_batch", .type = SK_INT, .lo = 0, .hi = SERVE_MAX_BATCH_MAX,
     .offset = MODEL(max_batch), .help = "sequences per batch; 0: the server's"},
    {.path = "models[].compute", .type = SK_STRING, .offset = MODEL(compute),
     .help = "f32, bf16 or auto; unset: the server's compute"},
    {.path = "models[].keep_alive", .type = SK_DURATION, .null = SK_NULL_CLEARS, .def = NAN,
     .offset = MODEL(keep_alive),
     .help = "how long idle before it leaves its devices: seconds, or 30s, 5m, 1h (0: at once; "
             "-1: forever); unset: the server's keep_alive"},
    {.path = "models[].priority", .type = SK_INT, .lo = -ENGINE_PRIORITY_MAX,
     .hi = ENGINE_PRIORITY_MAX, .offset = MODEL(priority),
     .help = "when several models wait, the higher one's load and batches go first (after any "
             "past its max_queue_wait); swapwise and lru"},
    {.path = "models[].max_queue_wait", .type = SK_DOUBLE, .lo = 0, .hi = INFINITY,
     .offset = MODEL(max_queue_wait),
     .help = "seconds: once its oldest waiting request is older, the model goes before every "
             "model that is not (anti-starvation); 0: no bound; swapwise and lru"},
    {.path = "models[].min_resident", .type = SK_DOUBLE, .lo = 0, .hi = INFINITY,
     .offset = MODEL(min_resident),
     .help = "seconds after a load during which the model is evicted for another only when no "
             "other model can make the room; 0: none; swapwise and lru"},
    {.path = "models[].chat_template", .type = SK_STRING, .offset = MODEL(chat_template),
     .help = "a Jinja file for /v1/chat/completions; unset: the checkpoint's"},
    /* ---- LoRA adapters served over the models ---- */
    {.path = "adapters", .flag = "adapter", .metavar = "NAME=BASE:DIR", .type = SK_ADAPTERS,
     .expected = "a list of adapters ({name: ..., base: ..., path: ...})",
     .help = "serve the PEFT LoRA adapter in DIR as NAME over the model named BASE: requests "
             "naming NAME run BASE with it (repeatable; added to the config file's)"},
    {.path = "adapters[].name", .type = SK_STRING, .null = SK_NULL_REFUSED,
     .offset = ADAPTER(name), .help = "what requests name in \"model\""},
    {.path = "adapters[].base", .type = SK_STRING, .null = SK_NULL_REFUSED,
     .offset = ADAPTER(base), .help = "the name of the model it adapts"},
    {.path = "adapters[].path", .type = SK_STRING, .null = SK_NULL_REFUSED,
     .offset = ADAPTER(path), .help = "the adapter directory (adapter_config.json, "
                                      "adapter_model.safetensors)"},
    {.path = "adapters[].pinned", .type = SK_BOOL, .offset = ADAPTER(pinned),
     .help = "kept on the devices whenever its base is"},
    {.path = "adapters[].keep_alive", .type = SK_DURATION, .null = SK_NULL_CLEARS, .def = NAN,
     .offset = ADAPTER(keep_alive),
     .help = "how long idle before it leaves its devices (its base stays); unset: the "
             "server's keep_alive"},
    {.path = "adapters[].priority", .type = SK_INT, .lo = -ENGINE_PRIORITY_MAX,
     .hi = ENGINE_PRIORITY_MAX, .offset = ADAPTER(priority),
     .help = "the order of its requests among its base's"},
};
/* clang-format on */

const int serve_n_keys = (int)(sizeof(serve_keys) / sizeof(serve_keys[0]));

const char *serve_key_leaf(const struct serve_key *k, const char *scope)
{
    size_t n = strlen(scope);
    const char *leaf = k->path;
    if (n) {
        if (strncmp(k->path, scope, n) != 0 || k->path[n] != '.')
            return NULL;
        leaf += n + 1;
    }
    return strchr(leaf, '.') || strchr(leaf, '[') ? NULL : leaf;
}

const struct serve_key *serve_key_find(const char *path)
{
    for (int i = 0; i < serve_n_keys; i++)
        if (strcmp(serve_keys[i].path, path) == 0)
            return &serve_keys[i];
    return NULL;
}

void *serve_key_field(const struct serve_key *k, void *base)
{
    return (char *)base + k->offset;
}

const void *serve_key_cfield(const struct serve_key *k, const void *base)
{
    return (const char *)base + k->offset;
}

void serve_keys_defaults(const char *scope, void *base)
{
    for (int i = 0; i < serve_n_keys; i++) {
        const struct serve_key *k = &serve_keys[i];
        void *f = serve_key_field(k, base);
        if (!serve_key_leaf(k, scope))
            continue;
        switch (k->type) {
        case SK_INT:
        case SK_ENUM:
            *(int *)f = (int)k->def;
            break;
        case SK_DOUBLE:
            *(double *)f = k->def;
            break;
        case SK_BOOL:
            *(bool *)f = k->def != 0;
            break;
        case SK_BYTES:
            *(uint64_t *)f = (uint64_t)k->def;
            break;
        case SK_DURATION:
            *(double *)f = k->def;
            break;
        case SK_STRING:
            *(char **)f = k->def_str ? strdup(k->def_str) : NULL;
            break;
        default: /* lists start empty (zeroed), sections and models are below */
            break;
        }
    }
}

/* "cpu or cuda", "one of error, warn, info, debug" */
static void choices_text(const char *const *choices, char *buf, size_t cap)
{
    int n = 0;
    while (choices[n])
        n++;
    if (n == 2) {
        snprintf(buf, cap, "%s or %s", choices[0], choices[1]);
        return;
    }
    size_t len = (size_t)snprintf(buf, cap, "one of");
    for (int i = 0; i < n && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s %s", i ? "," : "", choices[i]);
}

void serve_key_expected(const struct serve_key *k, char *buf, size_t cap)
{
    switch (k->type) {
    case SK_INT:
        snprintf(buf, cap, "an integer from %.0f to %.0f", k->lo, k->hi);
        break;
    case SK_DOUBLE:
        if (isinf(k->hi))
            snprintf(buf, cap, "a number >= %g", k->lo);
        else
            snprintf(buf, cap, "a number from %g to %g", k->lo, k->hi);
        break;
    case SK_BOOL:
        snprintf(buf, cap, "true or false");
        break;
    case SK_BYTES:
        if (k->lo > 0)
            snprintf(buf, cap, "a byte count >= %.0f such as 1048576, 512KiB or 2GiB", k->lo);
        else
            snprintf(buf, cap,
                     "a byte count such as 1048576, 512KiB or 2GiB (K/M/G/T, "
                     "KiB/MiB/GiB/TiB: 1024s; KB/MB/GB/TB: 1000s)");
        break;
    case SK_DURATION:
        snprintf(buf, cap,
                 "a duration such as 30s, 5m, 1h or 1h30m, seconds >= 0 (0: at once), "
                 "or -1 (never)");
        break;
    case SK_STRING:
    case SK_ENUM:
        if (k->choices)
            choices_text(k->choices, buf, cap);
        else
            snprintf(buf, cap, "a non-empty string");
        break;
    default:
        snprintf(buf, cap, "%s", k->expected ? k->expected : "a value");
        break;
    }
}

void serve_key_range(const struct serve_key *k, char *buf, size_t cap)
{
    buf[0] = '\0';
    if ((k->type == SK_INT || k->type == SK_DOUBLE) && isinf(k->hi))
        snprintf(buf, cap, "%s >= %g", k->metavar, k->lo);
    else if (k->type == SK_INT || k->type == SK_DOUBLE)
        snprintf(buf, cap, "%.0f..%.0f", k->lo, k->hi);
    else if (k->type == SK_BYTES && k->lo > 0)
        snprintf(buf, cap, "%s >= %.0f", k->metavar, k->lo);
    else if (k->choices)
        for (size_t len = 0, i = 0; k->choices[i] && len < cap; i++)
            len += (size_t)snprintf(buf + len, cap - len, "%s%s", i ? "|" : "", k->choices[i]);
}

void serve_key_default(const struct serve_key *k, char *buf, size_t cap)
{
    static const struct {
        const char *unit;
        uint64_t size;
    } units[] = {
        {"TiB", 1ull << 40}, {"GiB", 1ull << 30}, {"MiB", 1ull << 20}, {"KiB", 1ull << 10}};
    uint64_t b = (uint64_t)k->def;
    buf[0] = '\0';
    switch (k->type) {
    case SK_INT:
    case SK_DOUBLE:
        snprintf(buf, cap, "%g", k->def);
        break;
    case SK_BOOL:
        snprintf(buf, cap, "%s", k->def ? "true" : "false");
        break;
    case SK_BYTES:
        snprintf(buf, cap, "%llu", (unsigned long long)b);
        for (size_t i = 0; b && i < sizeof(units) / sizeof(units[0]); i++)
            if (b % units[i].size == 0) {
                snprintf(buf, cap, "%llu%s", (unsigned long long)(b / units[i].size),
                         units[i].unit);
                break;
            }
        break;
    case SK_ENUM:
        snprintf(buf, cap, "%s", k->choices[(int)k->def]);
        break;
    case SK_DURATION:
        if (isinf(k->def))
            snprintf(buf, cap, "-1");
        else if (!isnan(k->def))
            snprintf(buf, cap, "%gs", k->def);
        break;
    case SK_STRING:
        snprintf(buf, cap, "%s", k->def_str ? k->def_str : "");
        break;
    default:
        break;
    }
}

/* "WHAT: expected EXPECTED, got 'TEXT'" (TEXT cut at QUOTE_MAX bytes) */
static int refuse(const struct serve_key *k, const char *what, const char *text)
{
    char expected[192];
    serve_key_expected(k, expected, sizeof(expected));
    return err_set(ERR_INVALID, "%s: expected %s, got '%.*s'%s", what, expected, QUOTE_MAX, text,
                   strlen(text) > QUOTE_MAX ? "..." : "");
}

static int choice_index(const char *const *choices, const char *s)
{
    for (int i = 0; choices[i]; i++)
        if (strcmp(choices[i], s) == 0)
            return i;
    return -1;
}

int serve_key_set_text(const struct serve_key *k, void *base, const char *text, const char *what)
{
    void *f = serve_key_field(k, base);
    switch (k->type) {
    case SK_BYTES: {
        uint64_t v;
        if (bytes_parse(text, &v) < 0 || (double)v < k->lo)
            return refuse(k, what, text);
        *(uint64_t *)f = v;
        return 0;
    }
    case SK_ENUM: {
        int i = choice_index(k->choices, text);
        if (i < 0)
            return refuse(k, what, text);
        *(int *)f = i;
        return 0;
    }
    case SK_DURATION: {
        double v;
        if (serve_keep_alive_parse(text, &v) < 0)
            return refuse(k, what, text);
        *(double *)f = v;
        return 0;
    }
    case SK_STRING: {
        if (!text[0] || (k->choices && choice_index(k->choices, text) < 0))
            return refuse(k, what, text);
        char *s = strdup(text);
        if (!s)
            return err_set(ERR_NOMEM, "%s: out of memory", what);
        free(*(char **)f);
        *(char **)f = s;
        return 0;
    }
    default:
        return err_set(ERR_INVALID, "%s: not a key set from text", what);
    }
}

/* "WHAT: expected EXPECTED, got JSON" (JSON cut at QUOTE_MAX bytes) */
static int refuse_json(const struct serve_key *k, const char *what, const json_t *v)
{
    char *text = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    char expected[192];
    serve_key_expected(k, expected, sizeof(expected));
    int rc = err_set(ERR_INVALID, "%s: expected %s, got %.*s%s", what, expected, QUOTE_MAX,
                     text ? text : "a JSON value", text && strlen(text) > QUOTE_MAX ? "..." : "");
    free(text);
    return rc;
}

int serve_key_set_json(const struct serve_key *k, void *base, const json_t *v, const char *what)
{
    void *f = serve_key_field(k, base);
    switch (k->type) {
    case SK_INT: {
        json_int_t i = json_is_integer(v) ? json_integer_value(v) : 0;
        if (!json_is_integer(v) || i < k->lo || i > k->hi)
            return refuse_json(k, what, v);
        *(int *)f = (int)i;
        return 0;
    }
    case SK_DOUBLE: {
        double x = json_is_number(v) ? json_number_value(v) : NAN;
        if (!isfinite(x) || !(x >= k->lo) || x > k->hi)
            return refuse_json(k, what, v);
        *(double *)f = x;
        return 0;
    }
    case SK_BOOL:
        if (!json_is_boolean(v))
            return refuse_json(k, what, v);
        *(bool *)f = json_is_true(v);
        return 0;
    case SK_BYTES:
        if (json_is_integer(v) && json_integer_value(v) >= 0 && json_integer_value(v) >= k->lo) {
            *(uint64_t *)f = (uint64_t)json_integer_value(v);
            return 0;
        }
        if (json_is_string(v))
            return serve_key_set_text(k, base, json_string_value(v), what);
        return refuse_json(k, what, v);
    case SK_DURATION: {
        double x = json_is_number(v) ? json_number_value(v) : NAN;
        if (json_is_string(v))
            return serve_key_set_text(k, base, json_string_value(v), what);
        if (!isfinite(x) || !(x >= 0 || x == -1))
            return refuse_json(k, what, v);
        *(double *)f = x < 0 ? INFINITY : x;
        return 0;
    }
    case SK_STRING:
    case SK_ENUM:
        if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v))
            return refuse_json(k, what, v);
        return serve_key_set_text(k, base, json_string_value(v), what);
    case SK_INTS: {
        int n = json_is_array(v) ? (int)json_array_size(v) : -1, got[STACK_MAX_DEVICES];
        if (n < 1 || n > k->max_items || n > STACK_MAX_DEVICES)
            return refuse_json(k, what, v);
        for (int i = 0; i < n; i++) {
            const json_t *x = json_array_get(v, (size_t)i);
            if (!json_is_integer(x) || json_integer_value(x) < k->lo ||
                json_integer_value(x) > k->hi) {
                char item[96];
                snprintf(item, sizeof(item), "%s[%d]", what, i);
                const struct serve_key one = {.type = SK_INT, .lo = k->lo, .hi = k->hi};
                return refuse_json(&one, item, x);
            }
            got[i] = (int)json_integer_value(x);
        }
        memcpy(f, got, (size_t)n * sizeof(int));
        *(int *)((char *)base + k->count_offset) = n;
        return 0;
    }
    case SK_STRINGS: {
        int n = json_is_array(v) ? (int)json_array_size(v) : -1;
        if (n < 0 || n > k->max_items)
            return refuse_json(k, what, v);
        char **items = f, *got[64] = {0};
        int *count = (int *)((char *)base + k->count_offset), rc = 0;
        assert(k->max_items <= 64);
        for (int i = 0; i < n && rc == 0; i++) {
            const json_t *x = json_array_get(v, (size_t)i);
            char item[96];
            snprintf(item, sizeof(item), "%s[%d]", what, i);
            const struct serve_key one = {.type = SK_STRING, .offset = 0}; /* at &got[i] */
            if (!json_is_string(x) || !json_string_value(x)[0] ||
                strlen(json_string_value(x)) != json_string_length(x))
                rc = refuse_json(&one, item, x);
            else
                rc = serve_key_set_text(&one, &got[i], json_string_value(x), item);
        }
        /* all read before the old list goes, so an error leaves it */
        for (int i = 0, m = rc < 0 ? n : *count; i < m; i++)
            free(rc < 0 ? got[i] : items[i]);
        if (rc < 0)
            return rc;
        memcpy(items, got, (size_t)n * sizeof(*got));
        *count = n;
        return 0;
    }
    default:
        return err_set(ERR_INVALID, "%s: not a key set from JSON", what);
    }
}

/* The items of an SK_INTS or SK_STRINGS key. */
static int check_items(const struct serve_key *k, const void *base, const char *name)
{
    int n = *(const int *)((const char *)base + k->count_offset);
    if (n < 0 || n > k->max_items)
        return err_set(ERR_INVALID, "%s: %d items, expected at most %d", name, n, k->max_items);
    for (int i = 0; i < n; i++) {
        if (k->type == SK_INTS) {
            int v = ((const int *)serve_key_cfield(k, base))[i];
            if (v < k->lo || v > k->hi)
                return err_set(ERR_INVALID, "%s[%d]: expected %.0f to %.0f, got %d", name, i, k->lo,
                               k->hi, v);
        } else {
            const char *s = ((char *const *)serve_key_cfield(k, base))[i];
            if (!s || !s[0])
                return err_set(ERR_INVALID, "%s[%d]: expected a non-empty string", name, i);
        }
    }
    return 0;
}

int serve_key_check(const struct serve_key *k, const void *base, const char *name)
{
    const void *f = serve_key_cfield(k, base);
    char expected[192];
    serve_key_expected(k, expected, sizeof(expected));
    switch (k->type) {
    case SK_INT: {
        int v = *(const int *)f;
        if (v < k->lo || v > k->hi)
            return err_set(ERR_INVALID, "%s: expected %s, got %d", name, expected, v);
        return 0;
    }
    case SK_DOUBLE: {
        double v = *(const double *)f;
        if (!isfinite(v) || !(v >= k->lo && v <= k->hi))
            return err_set(ERR_INVALID, "%s: expected %s, got %g", name, expected, v);
        return 0;
    }
    case SK_DURATION: {
        double v = *(const double *)f;
        bool unset_ok = k->null == SK_NULL_CLEARS;
        if ((isnan(v) && !unset_ok) || (!isnan(v) && !isinf(v) && !(v >= 0)) || (isinf(v) && v < 0))
            return err_set(ERR_INVALID, "%s: expected %s, got %g", name, expected, v);
        return 0;
    }
    case SK_BYTES:
        if ((double)*(const uint64_t *)f < k->lo)
            return err_set(ERR_INVALID, "%s: expected %s, got %llu", name, expected,
                           (unsigned long long)*(const uint64_t *)f);
        return 0;
    case SK_ENUM: {
        int v = *(const int *)f, n = 0;
        while (k->choices[n])
            n++;
        if (v < 0 || v >= n)
            return err_set(ERR_INVALID, "%s: expected %s, got %d", name, expected, v);
        return 0;
    }
    case SK_STRING: {
        const char *s = *(char *const *)f;
        bool unset_ok = k->null == SK_NULL_CLEARS || (k->null == SK_NULL_KEEPS && !k->def_str);
        if (!s && !unset_ok)
            return err_set(ERR_INVALID, "%s: expected %s, got none", name, expected);
        if (s && (!s[0] || (k->choices && choice_index(k->choices, s) < 0)))
            return err_set(ERR_INVALID, "%s: expected %s, got '%.*s'", name, expected, QUOTE_MAX,
                           s);
        return 0;
    }
    case SK_INTS:
    case SK_STRINGS:
        return check_items(k, base, name);
    default:
        return 0;
    }
}
