/* The server's configuration (server/config.c): the committed example file,
 * every class of error with the line and key its message must name, byte
 * counts, serve_config_check's refusals, --model, and the stack config
 * (test_serve_keys.c holds the key table to the example and --help). */
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/bytes.h"
#include "core/error.h"
#include "server/config.h"
#include "server/config_keys.h"
#include "test.h"

/* Parses text into a fresh config; returns the code (the config freed). */
static int parse(const char *text)
{
    struct serve_config c;
    serve_config_init(&c);
    int rc = serve_config_parse_yaml(text, strlen(text), "t.yaml", &c);
    serve_config_free(&c);
    return rc;
}

TEST(example)
{
    struct serve_config c;
    serve_config_init(&c);
    int rc = serve_config_load(SHARDSWAP_SOURCE_DIR "/docs/serve.example.yaml", &c);
    CHECK_MSG(rc == 0, "%s", err_msg());
    CHECK(rc == 0 && serve_config_check(&c) == 0);
    /* the example shows the defaults */
    struct serve_config d;
    serve_config_init(&d);
    CHECK(strcmp(c.host, d.host) == 0 && c.port == d.port);
    CHECK(c.api_key == NULL && c.admin_key == NULL && c.policy == NULL);
    CHECK(c.n_model_roots == 0);
    CHECK(c.http_threads == d.http_threads && c.max_connections == d.max_connections);
    CHECK(c.connection_timeout_s == d.connection_timeout_s);
    CHECK(c.header_timeout_s == d.header_timeout_s && c.header_timeout_s == 20);
    CHECK(c.body_timeout_s == d.body_timeout_s && c.body_timeout_s == 60);
    CHECK(c.max_connections_per_client == 0 && serve_config_per_client(&c) == 128);
    CHECK(c.max_body_bytes == d.max_body_bytes && c.max_body_bytes == 1u << 20);
    CHECK(c.grace_s == d.grace_s && c.log_level == LOG_INFO);
    CHECK(strcmp(c.device_kind, "cpu") == 0 && c.n_devices == d.n_devices);
    CHECK(c.device_budget == 0 && c.host_budget == 0);
    CHECK(c.max_batch == d.max_batch && c.queue_cap == d.queue_cap && c.link_gbps == 0);
    CHECK(c.n_models == 2);
    if (c.n_models == 2) {
        CHECK(strcmp(c.models[0].name, "opt-125m") == 0);
        CHECK(strcmp(c.models[0].path, "/srv/models/opt-125m") == 0);
        CHECK(c.models[0].tp == 1 && c.models[0].pp == 1 && c.models[0].n_devices == 0);
        CHECK(c.models[1].n_devices == 1 && c.models[1].devices[0] == 0);
        CHECK(!c.models[1].pinned && c.models[1].max_batch == 0);
    }
    serve_config_free(&d);
    serve_config_free(&c);
    serve_config_free(NULL);

    /* files: missing, too large, not regular */
    serve_config_init(&c);
    CHECK(serve_config_load(SHARDSWAP_SOURCE_DIR "/docs/no-such.yaml", &c) == ERR_NOT_FOUND);
    CHECK(strstr(err_msg(), "no-such.yaml") != NULL);
    CHECK(serve_config_load(SHARDSWAP_SOURCE_DIR "/docs", &c) < 0);
    char path[] = "/tmp/test_serve_config_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd >= 0) {
        FILE *f = fdopen(fd, "w");
        for (int i = 0; i < (1 << 20) / 16 + 1; i++)
            fputs("# padding line.\n", f); /* 16 bytes */
        fputs("port: 1\n", f);
        fclose(f);
        CHECK(serve_config_load(path, &c) == ERR_INVALID);
        CHECK(strstr(err_msg(), path) != NULL);
        CHECK(c.port == 8000);
        unlink(path);
    }
    serve_config_free(&c);
}

TEST(values)
{
    const char *text = "host: 0.0.0.0\n"
                       "port: 0\n"
                       "api_key: \"sk-1\"\n"
                       "admin_key: adm\n"
                       "model_roots: [/srv/models, /data]\n"
                       "http_threads: 2\n"
                       "max_connections: 10\n"
                       "connection_timeout_s: 5\n"
                       "header_timeout_s: 7\n"
                       "body_timeout_s: 9\n"
                       "max_connections_per_client: 3\n"
                       "max_body_bytes: 512KiB\n"
                       "grace_s: 2.5\n"
                       "log_level: debug\n"
                       "devices: {kind: cuda, count: 4, budget: 2GiB}\n"
                       "host_budget: 8GiB\n"
                       "policy: computron\n"
                       "max_batch: 16\n"
                       "queue_cap: 64\n"
                       "link_gbps: 12.5\n"
                       "keep_alive: 300\n"
                       "models:\n"
                       "  - {name: opt-a, path: /models/a, tp: 2, pp: 2, max_batch: 4,\n"
                       "     pinned: true, devices: [3, 2, 1, 0], keep_alive: -1,\n"
                       "     priority: -7, max_queue_wait: 1.5, min_resident: 30}\n"
                       "  - name: org/opt-b:v1\n"
                       "    path: /models/b\n";
    struct serve_config c;
    serve_config_init(&c);
    int rc = serve_config_parse_yaml(text, strlen(text), "v.yaml", &c);
    CHECK_MSG(rc == 0, "%s", err_msg());
    CHECK_MSG(serve_config_check(&c) == 0, "%s", err_msg());
    CHECK(strcmp(c.host, "0.0.0.0") == 0 && c.port == 0);
    CHECK(strcmp(c.api_key, "sk-1") == 0 && strcmp(c.admin_key, "adm") == 0);
    CHECK(c.n_model_roots == 2 && strcmp(c.model_roots[1], "/data") == 0);
    CHECK(c.http_threads == 2 && c.max_connections == 10 && c.connection_timeout_s == 5);
    CHECK(c.header_timeout_s == 7 && c.body_timeout_s == 9 && serve_config_per_client(&c) == 3);
    CHECK(c.max_body_bytes == 512 * 1024 && c.grace_s == 2.5 && c.log_level == LOG_DEBUG);
    CHECK(strcmp(c.device_kind, "cuda") == 0 && c.n_devices == 4);
    CHECK(c.device_budget == 2ull << 30 && c.host_budget == 8ull << 30);
    CHECK(strcmp(c.policy, "computron") == 0);
    CHECK(c.max_batch == 16 && c.queue_cap == 64 && c.link_gbps == 12.5);
    CHECK(c.n_models == 2);
    const struct serve_model *m = &c.models[0];
    CHECK(m->tp == 2 && m->pp == 2 && m->max_batch == 4 && m->pinned);
    CHECK(m->n_devices == 4 && m->devices[0] == 3 && m->devices[3] == 0);
    CHECK(strcmp(c.models[1].name, "org/opt-b:v1") == 0 && c.models[1].tp == 1);

    struct stack_config sc;
    struct stack_model_config mc[2];
    serve_config_stack(&c, &sc, mc);
    CHECK(strcmp(sc.device_kind, "cuda") == 0 && sc.n_devices == 4);
    CHECK(sc.device_budget[0] == 2ull << 30 && sc.device_budget[3] == 2ull << 30);
    CHECK(sc.device_budget[4] == 0);
    CHECK(sc.host_budget == 8ull << 30 && sc.link_gbps == 12.5);
    CHECK(strcmp(sc.engine.policy, "computron") == 0);
    CHECK(sc.engine.max_batch == 16 && sc.engine.queue_cap == 64);
    CHECK(sc.fit_models == 0 && sc.fit_prompt == 0 && !sc.prefetch_host);
    CHECK(sc.models == mc && sc.n_models == 2);
    CHECK(strcmp(mc[0].name, "opt-a") == 0 && strcmp(mc[0].path, "/models/a") == 0);
    CHECK(mc[0].tp == 2 && mc[0].pp == 2 && mc[0].pinned && mc[0].max_batch == 4);
    CHECK(mc[0].devices == c.models[0].devices && mc[1].devices == NULL);
    /* keep_alive: the model's (-1: forever), else the server's */
    CHECK(mc[0].keep_alive_set && isinf(mc[0].keep_alive));
    CHECK(mc[0].priority == -7 && mc[0].max_queue_wait == 1.5 && mc[0].min_resident == 30);
    CHECK(mc[1].priority == 0 && mc[1].max_queue_wait == 0 && mc[1].min_resident == 0);
    CHECK(mc[1].keep_alive_set && mc[1].keep_alive == 300);
    double ka;
    CHECK(serve_keep_alive_parse(NULL, &ka) == 0 && isnan(ka));
    CHECK(serve_keep_alive_parse("0", &ka) == 0 && ka == 0);
    CHECK(serve_keep_alive_parse("2.5", &ka) == 0 && ka == 2.5);
    CHECK(serve_keep_alive_parse("-1", &ka) == 0 && isinf(ka));
    /* Ollama's durations: a number with a unit, several in a row */
    static const struct {
        const char *text;
        double seconds;
    } durations[] = {{"30s", 30},    {"5m", 300},     {"1h", 3600}, {"1h30m", 5400},
                     {"1.5h", 5400}, {"250ms", 0.25}, {"0s", 0},    {"2m30s", 150},
                     {"300", 300},   {"1h0m0s", 3600}};
    for (size_t i = 0; i < sizeof(durations) / sizeof(durations[0]); i++)
        CHECK_MSG(serve_keep_alive_parse(durations[i].text, &ka) == 0 &&
                      fabs(ka - durations[i].seconds) < 1e-9,
                  "'%s': %g (%s)", durations[i].text, ka, err_msg());
    const char *bad_ka[] = {"-2",  "",  " 1",   "5x", "inf", "nan",  "1e999", "1e3",
                            "5 m", "m", "30s5", "1.", "-1m", "0x10", "5M"};
    for (size_t i = 0; i < sizeof(bad_ka) / sizeof(bad_ka[0]); i++)
        CHECK_MSG(serve_keep_alive_parse(bad_ka[i], &ka) == ERR_INVALID &&
                      strstr(err_msg(), "expected a duration such as 30s, 5m, 1h or 1h30m, "
                                        "seconds >= 0, or -1 (never)"),
                  "'%s': %s", bad_ka[i], err_msg());

    /* a second file overrides keys and appends models; model_roots is replaced */
    const char *more = "port: 9000\nmodel_roots: [/x]\napi_key: ~\n"
                       "models: [{name: c, path: /c}]\n";
    CHECK(serve_config_parse_yaml(more, strlen(more), "more.yaml", &c) == 0);
    CHECK(c.port == 9000 && c.n_model_roots == 1 && strcmp(c.model_roots[0], "/x") == 0);
    CHECK(c.api_key == NULL && c.n_models == 3);
    serve_config_free(&c);

    /* empty stream, empty document, comments only, nulls */
    CHECK(parse("") == 0);
    CHECK(parse("---\n") == 0);
    CHECK(parse("# nothing\n") == 0);
    CHECK(parse("port:\nhost: ~\ndevices: null\n") == 0);
}

struct err_case {
    const char *text;
    const char *in_message; /* "t.yaml:LINE: ..." and the key */
};

static const struct err_case errors[] = {
    /* wrong types and ranges */
    {"port: 8000\nport2: 1\n", "t.yaml:2: key 'port2': unknown key"},
    {"port: -1\n", "t.yaml:1: key 'port': expected an integer from 0 to 65535, got '-1'"},
    {"port: 65536\n", "t.yaml:1: key 'port'"},
    {"port: abc\n", "got 'abc'"},
    {"port: 80.5\n", "key 'port'"},
    {"port: [1]\n", "key 'port': expected an integer from 0 to 65535, got a list"},
    {"port: \"\"\n", "key 'port'"},
    {"host: {a: 1}\n", "t.yaml:1: key 'host': expected a non-empty string, got a mapping"},
    {"http_threads: 0\n", "key 'http_threads'"},
    /* the flag's range (cmd_serve.c takes the same SERVE_HTTP_THREADS_MAX) */
    {"http_threads: 257\n", "key 'http_threads': expected an integer from 1 to 256"},
    {"header_timeout_s: 0\n", "key 'header_timeout_s': expected an integer from 1 to 86400"},
    {"body_timeout_s: 86401\n", "key 'body_timeout_s'"},
    {"max_connections_per_client: -1\n",
     "key 'max_connections_per_client': expected an integer from 0 to 1048576"},
    {"max_body_bytes: 1.5\n", "key 'max_body_bytes'"},
    {"max_body_bytes: 0\n", "key 'max_body_bytes'"},
    {"grace_s: -1\n", "key 'grace_s': expected a number from 0 to 86400"},
    {"grace_s: nan\n", "key 'grace_s'"},
    {"request_timeout_s: -1\n", "key 'request_timeout_s': expected a number from 0 to 86400"},
    {"grace_s: 86401\n", "key 'grace_s': expected a number from 0 to 86400"},
    {"log_level: verbose\n", "key 'log_level': expected one of error, warn, info, debug"},
    {"devices: 2\n", "key 'devices': expected a mapping"},
    {"devices:\n  kind: cpu\n  count: 0\n", "t.yaml:3: key 'devices.count'"},
    {"devices:\n  kind: cpu\n  size: 1\n", "t.yaml:3: key 'devices.size': unknown key"},
    {"devices: {budget: 2XB}\n", "key 'devices.budget'"},
    {"devices: {kind: cuda, gpus: 0}\n", "key 'devices.gpus': expected a list of 1 to 64 GPU"},
    {"devices: {kind: cuda, gpus: []}\n", "key 'devices.gpus'"},
    {"devices: {kind: cuda, gpus: [0, -1]}\n", "key 'devices.gpus[1]'"},
    {"devices: {kind: cuda, gpus: [0, x]}\n", "key 'devices.gpus[1]'"},
    {"devices: {kind: cuda, gpus: [1024]}\n", "key 'devices.gpus[0]'"},
    {"devices: {count: 2, ranks: 1}\n",
     "key 'devices.ranks': expected a list of 1 to 64 process numbers such as [0, 1]"},
    {"devices: {count: 2, ranks: []}\n", "key 'devices.ranks'"},
    {"devices: {count: 2, ranks: [0, -1]}\n",
     "key 'devices.ranks[1]': expected an integer from 0 to 1023"},
    {"devices: {count: 2, ranks: [0, x]}\n", "key 'devices.ranks[1]'"},
    {"host_budget: -1GiB\n", "key 'host_budget'"},
    {"max_batch: 0\n", "key 'max_batch'"},
    {"queue_cap: x\n", "key 'queue_cap'"},
    {"link_gbps: fast\n", "key 'link_gbps'"},
    {"model_roots: /srv\n", "key 'model_roots': expected a list"},
    {"model_roots: [[/a]]\n", "key 'model_roots[0]'"},
    {"models: {name: a}\n", "key 'models': expected a list"},
    {"models:\n  - name: a\n    path: /a\n  - name: b\n    path: /b\n  - name: c\n"
     "    path: /c\n    tp: x\n",
     "t.yaml:8: key 'models[2].tp': expected an integer from 1 to 64, got 'x'"},
    {"models:\n  - {name: a, path: /a, pp: 0}\n", "t.yaml:2: key 'models[0].pp'"},
    {"models:\n  - {name: a, path: /a, pinned: yes}\n",
     "key 'models[0].pinned': expected true or false, got 'yes'"},
    {"models:\n  - {name: a, path: /a, devices: [0, 64]}\n", "key 'models[0].devices[1]'"},
    {"models:\n  - {name: a, path: /a, devices: []}\n", "key 'models[0].devices'"},
    {"models:\n  - {name: a, path: /a, max_batch: -1}\n", "key 'models[0].max_batch'"},
    {"models:\n  - {name: a}\n", "t.yaml:2: key 'models[0]': expected a mapping with 'name' and "
                                 "'path'"},
    {"models:\n  - {name: a, path: /a, gpu: 1}\n", "key 'models[0].gpu': unknown key"},
    {"models:\n  - a\n", "key 'models[0]': expected a mapping"},
    {"models:\n  - {name: ~, path: /a}\n", "key 'models[0].name': expected a non-empty string"},
    {"api_key: [a]\n", "key 'api_key'"},
    {"port: 1\napi_key: \"\"\n", "t.yaml:2: key 'api_key': expected a non-empty string, got ''"},
    /* structure */
    {"- 1\n- 2\n", "t.yaml:1: expected a mapping"},
    {"just text\n", "t.yaml:1: expected a mapping"},
    {"port: 1\nhost: a\nport: 2\n", "t.yaml:3: key 'port': given twice (first on line 1)"},
    {"devices: {count: 1, count: 2}\n", "key 'devices.count': given twice"},
    {"port: 1\n---\nport: 2\n", "t.yaml:2: a second document"},
    {"a: &x 1\nport: *x\n", "t.yaml:1: anchors (&x) are not accepted"},
    {"port: *x\n", "t.yaml:1: aliases"},
    {"port: !!int 1\n", "t.yaml:1: tags"},
    {"? [a]\n: 1\n", "keys must be strings"},
    {"port: [1\n", "t.yaml:2:"},
    {"port: 1\n  bad indent: 2\n", "t.yaml:2:"},
    {"port: 1\nhost: \"a\xff\"\n", "t.yaml:2: invalid"},
};

TEST(errors)
{
    for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++) {
        int rc = parse(errors[i].text);
        CHECK_MSG(rc == ERR_FORMAT, "case %zu (%s): rc %d", i, errors[i].text, rc);
        CHECK_MSG(strstr(err_msg(), errors[i].in_message) != NULL,
                  "case %zu: '%s' does not contain '%s'", i, err_msg(), errors[i].in_message);
    }

    /* nesting, sizes: refused, bounded */
    size_t n = 5000;
    char *deep = malloc(n * 2 + 16);
    strcpy(deep, "a: ");
    memset(deep + 3, '[', n);
    memset(deep + 3 + n, ']', n);
    deep[3 + 2 * n] = '\0';
    CHECK(parse(deep) == ERR_FORMAT && strstr(err_msg(), "nested deeper") != NULL);
    free(deep);
    char *big = malloc(20000);
    strcpy(big, "host: ");
    memset(big + 6, 'h', 10000);
    big[10006] = '\0';
    CHECK(parse(big) == ERR_FORMAT && strstr(err_msg(), "longer than") != NULL);
    /* a long unknown key is quoted only in part */
    memset(big, 'k', 10000);
    strcpy(big + 1000, ": 1\n");
    CHECK(parse(big) == ERR_FORMAT && strlen(err_msg()) < 200);
    free(big);
    /* billion laughs is refused at its first anchor */
    const char *lol = "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1]\nb: &b [*a, *a, *a, *a, *a, *a]\n";
    CHECK(parse(lol) == ERR_FORMAT && strstr(err_msg(), "anchors") != NULL);
}

struct bytes_case {
    const char *s;
    int ok;
    uint64_t v;
};

TEST(bytes)
{
    static const struct bytes_case cases[] = {
        {"0", 1, 0},
        {"12345", 1, 12345},
        {"18446744073709551615", 1, UINT64_MAX},
        {"18446744073709551616", 0, 0},
        {"512KiB", 1, 512ull << 10},
        {"1MiB", 1, 1ull << 20},
        {"2GiB", 1, 2ull << 30},
        {"1TiB", 1, 1ull << 40},
        {"4K", 1, 4096},
        {"3M", 1, 3ull << 20},
        {"2G", 1, 2ull << 30},
        {"1KB", 1, 1000},
        {"1.5GB", 1, 1500000000ull},
        {"2 MB", 1, 2000000},
        {"1.5KiB", 1, 1536},
        {"0.001KB", 1, 1},
        {"100B", 1, 100},
        {"16777215TiB", 1, 16777215ull << 40},
        {"16777216TiB", 0, 0},
        {"", 0, 0},
        {"-1", 0, 0},
        {"-1GiB", 0, 0},
        {"+5", 0, 0},
        {"1.5", 0, 0},
        {"1.", 0, 0},
        {".5GB", 0, 0},
        {"1e9", 0, 0},
        {"5XB", 0, 0},
        {"5 ", 0, 0},
        {" 5", 0, 0},
        {"5gib", 1, 5ull << 30}, /* units in any case */
        {"2gb", 1, 2000000000ull},
        {"2GB", 1, 2000000000ull},
        {"3mIb", 1, 3ull << 20},
        {"7k", 1, 7ull << 10},
        {"9b", 1, 9},
        {"1GiBx", 0, 0},
        {"0x10", 0, 0},
        {"1.0000000001GB", 0, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        uint64_t v = 7;
        int rc = bytes_parse(cases[i].s, &v);
        if (cases[i].ok)
            CHECK_MSG(rc == 0 && v == cases[i].v, "'%s': rc %d, %llu", cases[i].s, rc,
                      (unsigned long long)v);
        else
            CHECK_MSG(rc == ERR_INVALID && v == 7, "'%s' accepted (%llu)", cases[i].s,
                      (unsigned long long)v);
    }
}

/* serve_config_check: a valid base config, then one change at a time. */
TEST(check)
{
    struct serve_config c;
    serve_config_init(&c);
    CHECK(serve_config_check(&c) == ERR_INVALID && strstr(err_msg(), "no models") != NULL);
    CHECK(serve_config_add_model(&c, "opt-a=/models/a") == 0);
    CHECK(c.n_models == 1 && strcmp(c.models[0].name, "opt-a") == 0);
    CHECK(strcmp(c.models[0].path, "/models/a") == 0);
    CHECK(c.models[0].tp == 1 && c.models[0].pp == 1 && c.models[0].max_batch == 0);
    CHECK(serve_config_add_model(&c, "b=/x=y") == 0 && strcmp(c.models[1].path, "/x=y") == 0);
    CHECK(serve_config_check(&c) == 0);
    CHECK(serve_config_add_model(&c, "=x") == ERR_INVALID);
    CHECK(serve_config_add_model(&c, "a=") == ERR_INVALID);
    CHECK(serve_config_add_model(&c, "a") == ERR_INVALID);
    CHECK(serve_config_add_model(&c, "") == ERR_INVALID);
    CHECK(c.n_models == 2);

#define EXPECT_BAD(change, restore, text)                                                          \
    do {                                                                                           \
        change;                                                                                    \
        CHECK_MSG(serve_config_check(&c) == ERR_INVALID && strstr(err_msg(), text), "%s: '%s'",    \
                  #change, err_msg());                                                             \
        restore;                                                                                   \
        CHECK_MSG(serve_config_check(&c) == 0, "after %s: %s", #restore, err_msg());               \
    } while (0)

    char *name = c.models[1].name;
    EXPECT_BAD(c.models[1].name = "opt-a", c.models[1].name = name, "also the name");
    EXPECT_BAD(c.models[1].name = "", c.models[1].name = name, "models[1].name");
    EXPECT_BAD(c.models[1].name = "/abs", c.models[1].name = name, "models[1].name");
    EXPECT_BAD(c.models[1].name = "a/../b", c.models[1].name = name, "models[1].name");
    EXPECT_BAD(c.models[1].name = "a b", c.models[1].name = name, "models[1].name");
    EXPECT_BAD(c.models[1].name = "a?b", c.models[1].name = name, "models[1].name");
    EXPECT_BAD(c.models[1].name =
                   "0123456789012345678901234567890123456789012345678901234567890123",
               c.models[1].name = name, "models[1].name");
    EXPECT_BAD(c.models[0].tp = 2, c.models[0].tp = 1, "more than the 1 devices");
    EXPECT_BAD(c.models[0].pp = 0, c.models[0].pp = 1,
               "models[0].pp: expected an integer from 1 to 64, got 0");
    EXPECT_BAD((c.n_devices = 4, c.models[0].tp = 2, c.models[0].n_devices = 3),
               (c.n_devices = 1, c.models[0].tp = 1, c.models[0].n_devices = 0),
               "expected tp x pp = 2 of them, got 3");
    EXPECT_BAD((c.n_devices = 4, c.models[0].n_devices = 1, c.models[0].devices[0] = 4),
               (c.n_devices = 1, c.models[0].n_devices = 0, c.models[0].devices[0] = 0),
               "devices[0]: expected 0 to 3, got 4");
    EXPECT_BAD(c.n_devices = 0, c.n_devices = 1, "devices.count");
    EXPECT_BAD(c.n_devices = STACK_MAX_DEVICES + 1, c.n_devices = 1, "devices.count");
    EXPECT_BAD(c.port = 65536, c.port = 8000, "port");
    EXPECT_BAD(c.port = -1, c.port = 8000, "port");
    char *kind = c.device_kind;
    EXPECT_BAD(c.device_kind = "tpu", c.device_kind = kind, "devices.kind: expected cpu or cuda");
    EXPECT_BAD(c.api_key = "", c.api_key = NULL, "api_key");
    EXPECT_BAD(c.admin_key = "", c.admin_key = NULL, "admin_key");
    EXPECT_BAD(c.keep_alive = -2, c.keep_alive = NAN,
               "keep_alive: expected a duration such as 30s, 5m, 1h or 1h30m, seconds >= 0 (0: "
               "at once), or -1 (never), got -2");
    EXPECT_BAD(c.models[1].keep_alive = -3, c.models[1].keep_alive = NAN,
               "models[1].keep_alive: expected a duration such as 30s, 5m, 1h or 1h30m, seconds "
               ">= 0 (0: at once), or -1 (never), got -3");
    EXPECT_BAD(c.models[1].priority = 1001, c.models[1].priority = 0, "models[1].priority");
    EXPECT_BAD(c.models[1].max_queue_wait = -1, c.models[1].max_queue_wait = 0,
               "models[1].max_queue_wait");
    EXPECT_BAD(c.models[1].min_resident = -2, c.models[1].min_resident = 0,
               "models[1].min_resident");
    EXPECT_BAD(c.policy = "nosuch", c.policy = NULL, "unknown scheduling policy 'nosuch'");
    EXPECT_BAD(c.policy = "clairvoyant", c.policy = NULL,
               "simulator-only (it needs the future arrivals) scheduling policy 'clairvoyant'");
    EXPECT_BAD((c.model_roots[0] = "rel/dir", c.n_model_roots = 1),
               (c.model_roots[0] = NULL, c.n_model_roots = 0), "model_roots[0]");
    char *host = c.host;
    EXPECT_BAD(c.host = NULL, c.host = host, "host");
    EXPECT_BAD(c.max_batch = 0, c.max_batch = 8, "max_batch");
    EXPECT_BAD(c.models[0].max_batch = -1, c.models[0].max_batch = 0, "max_batch");
#undef EXPECT_BAD
    /* valid policies and a valid placement */
    c.policy = "swapwise";
    CHECK(serve_config_check(&c) == 0);
    c.policy = NULL;
    c.n_devices = 4;
    c.models[0].tp = 2;
    c.models[0].pp = 2;
    c.models[0].n_devices = 4;
    for (int i = 0; i < 4; i++)
        c.models[0].devices[i] = 3 - i;
    CHECK_MSG(serve_config_check(&c) == 0, "%s", err_msg());
    serve_config_free(&c);

    /* the model cap: the engine's (SCHED_MAX_MODELS), which admin adds count against too */
    CHECK(SERVE_MAX_MODELS == SCHED_MAX_MODELS);
    serve_config_init(&c);
    for (int i = 0; i < SERVE_MAX_MODELS; i++) {
        char arg[32];
        snprintf(arg, sizeof(arg), "m%d=/m", i);
        CHECK(serve_config_add_model(&c, arg) == 0);
    }
    CHECK(serve_config_add_model(&c, "one-more=/m") == ERR_INVALID);
    CHECK(serve_config_parse_yaml("models: [{name: x, path: /x}]\n", 30, "cap.yaml", &c) ==
          ERR_FORMAT);
    CHECK(c.n_models == SERVE_MAX_MODELS && serve_config_check(&c) == 0);
    serve_config_free(&c);
}

/* devices.gpus: a GPU per device, a repeated one a partition; the count
 * follows the list unless given (then both must agree), and only with
 * kind cuda; the stack config carries it. */
TEST(gpus)
{
    const char *text = "devices: {kind: cuda, gpus: [0, 0, 1]}\nmodels: [{name: a, path: /a, "
                       "tp: 3}]\n";
    struct serve_config c;
    serve_config_init(&c);
    CHECK_MSG(serve_config_parse_yaml(text, strlen(text), "g.yaml", &c) == 0, "%s", err_msg());
    CHECK_MSG(serve_config_check(&c) == 0, "%s", err_msg());
    CHECK(c.n_devices == 3 && c.n_gpus == 3 && c.gpus[0] == 0 && c.gpus[1] == 0 && c.gpus[2] == 1);
    struct stack_config sc;
    struct stack_model_config mc[1];
    serve_config_stack(&c, &sc, mc);
    CHECK(strcmp(sc.device_kind, "cuda") == 0 && sc.n_devices == 3 && sc.gpus_set);
    CHECK(sc.gpus[0] == 0 && sc.gpus[1] == 0 && sc.gpus[2] == 1);
    CHECK(sc.engine.overlap_loads); /* a GPU's copies take no compute */
    serve_config_free(&c);

    /* count given beside the list: they must agree */
    serve_config_init(&c);
    text = "devices: {kind: cuda, count: 2, gpus: [0, 0, 0]}\nmodels: [{name: a, path: /a}]\n";
    CHECK(serve_config_parse_yaml(text, strlen(text), "g.yaml", &c) == 0);
    CHECK(serve_config_check(&c) == ERR_INVALID &&
          strstr(err_msg(), "devices.gpus: 3 GPUs for devices.count 2"));
    serve_config_free(&c);
    /* kind cpu with GPUs */
    serve_config_init(&c);
    text = "devices: {gpus: [0]}\nmodels: [{name: a, path: /a}]\n";
    CHECK(serve_config_parse_yaml(text, strlen(text), "g.yaml", &c) == 0);
    CHECK(serve_config_check(&c) == ERR_INVALID &&
          strstr(err_msg(), "devices.gpus: only for devices.kind cuda"));
    serve_config_free(&c);
    /* null: device d on GPU d */
    serve_config_init(&c);
    text = "devices: {kind: cuda, count: 2, gpus: null}\nmodels: [{name: a, path: /a}]\n";
    CHECK(serve_config_parse_yaml(text, strlen(text), "g.yaml", &c) == 0);
    CHECK(serve_config_check(&c) == 0 && c.n_gpus == 0);
    serve_config_stack(&c, &sc, mc);
    CHECK(!sc.gpus_set && sc.n_devices == 2);
    serve_config_free(&c);
}

/* devices.ranks: the process of each device, one per device, into the
 * stack config's procs; the job's processes (n_procs, not a key) bound
 * them. */
TEST(ranks)
{
    const char *text = "devices: {count: 2, ranks: [0, 1]}\nmodels: [{name: a, path: /a, tp: 2}]\n";
    struct serve_config c;
    serve_config_init(&c);
    CHECK_MSG(serve_config_parse_yaml(text, strlen(text), "r.yaml", &c) == 0, "%s", err_msg());
    CHECK(c.n_devices == 2 && c.n_ranks == 2 && c.ranks[0] == 0 && c.ranks[1] == 1);
    c.n_procs = 2;
    CHECK_MSG(serve_config_check(&c) == 0, "%s", err_msg());
    struct stack_config sc;
    struct stack_model_config mc[1];
    serve_config_stack(&c, &sc, mc);
    CHECK(sc.n_devices == 2 && sc.procs_set && sc.procs[0] == 0 && sc.procs[1] == 1 &&
          sc.n_procs == 2);
    /* a job of one process (no mpirun) has no process 1 */
    c.n_procs = 0;
    CHECK(serve_config_check(&c) == ERR_INVALID &&
          strstr(err_msg(), "devices: device 1 is on process 1, but the job has 1 process"));
    /* CUDA shards on two processes */
    c.n_procs = 2;
    free(c.device_kind);
    c.device_kind = strdup("cuda");
    CHECK(serve_config_check(&c) == ERR_INVALID &&
          strstr(err_msg(), "model a: its shards span processes 0 and 1 on CUDA devices"));
    serve_config_free(&c);

    /* one per device */
    serve_config_init(&c);
    text = "devices: {count: 3, ranks: [0, 1]}\nmodels: [{name: a, path: /a}]\n";
    CHECK(serve_config_parse_yaml(text, strlen(text), "r.yaml", &c) == 0);
    c.n_procs = 2;
    CHECK(serve_config_check(&c) == ERR_INVALID &&
          strstr(err_msg(), "devices.ranks: 2 processes for devices.count 3 (expected one per "
                            "device)"));
    /* a value set by code, out of the table's range */
    c.n_devices = 2;
    c.ranks[1] = -1;
    CHECK(serve_config_check(&c) == ERR_INVALID &&
          strstr(err_msg(), "devices.ranks[1]: expected 0 to 1023, got -1"));
    serve_config_free(&c);

    /* unset (or null): every device process 0's */
    serve_config_init(&c);
    text = "devices: {count: 2, ranks: null}\nmodels: [{name: a, path: /a}]\n";
    CHECK(serve_config_parse_yaml(text, strlen(text), "r.yaml", &c) == 0);
    CHECK(serve_config_check(&c) == 0 && c.n_ranks == 0);
    serve_config_stack(&c, &sc, mc);
    CHECK(!sc.procs_set && sc.n_devices == 2);
    serve_config_free(&c);
}

/* The part of a refusal from "expected " to its last ", got": what a key's
 * row says, whoever read the value. */
static void expected_part(const char *msg, char *out, size_t cap)
{
    const char *a = strstr(msg, "expected ");
    const char *b = a ? a : NULL, *g;
    for (g = a; g && (g = strstr(g, ", got")); g++)
        b = g;
    snprintf(out, cap, "%.*s", a ? (int)(b - a) : 0, a ? a : "");
}

/* A model's keys in a POST /admin/models body go through the rows that read
 * the file: for every models[] key of the table a value out of its range
 * is refused from YAML and from JSON with the same words (the row's), and
 * the JSON refusal names the key; an unknown key is refused naming it;
 * chat_template, devices and keep_alive (a number or a duration) read as
 * in the file. */
TEST(admin_json)
{
    int tested = 0;
    for (int i = 0; i < serve_n_keys; i++) {
        const struct serve_key *k = &serve_keys[i];
        const char *leaf = serve_key_leaf(k, "models[]");
        if (!leaf)
            continue;
        char yaml_v[64], json_v[64];
        switch (k->type) {
        case SK_INT:
            snprintf(yaml_v, sizeof(yaml_v), "%.0f", k->hi + 1);
            snprintf(json_v, sizeof(json_v), "%.0f", k->hi + 1);
            break;
        case SK_DOUBLE:
            snprintf(yaml_v, sizeof(yaml_v), "%g", k->lo - 1);
            snprintf(json_v, sizeof(json_v), "%g", k->lo - 1);
            break;
        case SK_BOOL:
            snprintf(yaml_v, sizeof(yaml_v), "yes");
            snprintf(json_v, sizeof(json_v), "\"yes\"");
            break;
        case SK_DURATION:
            snprintf(yaml_v, sizeof(yaml_v), "soon");
            snprintf(json_v, sizeof(json_v), "\"soon\"");
            break;
        case SK_STRING:
            snprintf(yaml_v, sizeof(yaml_v), "''");
            snprintf(json_v, sizeof(json_v), "\"\"");
            break;
        case SK_INTS:
            snprintf(yaml_v, sizeof(yaml_v), "[%.0f]", k->hi + 1);
            snprintf(json_v, sizeof(json_v), "[%.0f]", k->hi + 1);
            break;
        case SK_STRINGS:
            snprintf(yaml_v, sizeof(yaml_v), "[b, '']");
            snprintf(json_v, sizeof(json_v), "[\"b\", \"\"]");
            break;
        default:
            CHECK_MSG(0, "models[].%s: a type this test does not know", leaf);
            continue;
        }
        char yaml[256], json[256], from_yaml[256], from_json[256];
        /* name and path in every model, the key under test once */
        bool named = !strcmp(leaf, "name") || !strcmp(leaf, "path");
        const char *other = !strcmp(leaf, "name") ? "path" : "name";
        if (named) {
            snprintf(yaml, sizeof(yaml), "models:\n  - {%s: %s, %s: /a}\n", leaf, yaml_v, other);
            snprintf(json, sizeof(json), "{\"%s\": %s, \"%s\": \"/a\"}", leaf, json_v, other);
        } else {
            snprintf(yaml, sizeof(yaml), "models:\n  - {name: a, path: /a, %s: %s}\n", leaf,
                     yaml_v);
            snprintf(json, sizeof(json), "{\"name\": \"a\", \"path\": \"/a\", \"%s\": %s}", leaf,
                     json_v);
        }
        struct serve_config c;
        serve_config_init(&c);
        int rc = serve_config_parse_yaml(yaml, strlen(yaml), "t.yaml", &c);
        CHECK_MSG(rc == ERR_FORMAT, "models[].%s from YAML %s: %d", leaf, yaml_v, rc);
        char want[96];
        snprintf(want, sizeof(want), "key 'models[0].%s", leaf);
        CHECK_MSG(strstr(err_msg(), want), "models[].%s from YAML: %s", leaf, err_msg());
        expected_part(err_msg(), from_yaml, sizeof(from_yaml));
        serve_config_free(&c);

        json_error_t je;
        json_t *obj = json_loads(json, 0, &je);
        CHECK_MSG(obj != NULL, "%s: %s", json, je.text);
        struct serve_model m;
        serve_model_init(&m);
        const char *key = NULL;
        rc = serve_model_from_json(obj, &m, &key);
        CHECK_MSG(rc == ERR_INVALID && key && strcmp(key, leaf) == 0,
                  "models[].%s from JSON %s: %d, key %s", leaf, json_v, rc, key ? key : "none");
        CHECK_MSG(strncmp(err_msg(), leaf, strlen(leaf)) == 0 &&
                      strchr(":[", err_msg()[strlen(leaf)]),
                  "models[].%s from JSON: %s", leaf, err_msg());
        expected_part(err_msg(), from_json, sizeof(from_json));
        CHECK_MSG(from_yaml[0] && strcmp(from_yaml, from_json) == 0,
                  "models[].%s: YAML says '%s', JSON '%s'", leaf, from_yaml, from_json);
        serve_model_free(&m);
        json_decref(obj);
        tested++;
    }
    CHECK(tested >= 13);

    /* an unknown key: refused, named (before: accepted, pinning nothing) */
    json_t *obj = json_loads("{\"name\": \"a\", \"path\": \"/a\", \"pined\": true}", 0, NULL);
    struct serve_model m;
    serve_model_init(&m);
    const char *key = NULL;
    CHECK(serve_model_from_json(obj, &m, &key) == ERR_INVALID && key && !strcmp(key, "pined"));
    CHECK_MSG(strstr(err_msg(), "'pined': unknown key (expected one of name, path, aliases, tp"),
              "%s", err_msg());
    serve_model_free(&m);
    json_decref(obj);

    /* what the file reads, JSON reads */
    obj = json_loads("{\"name\": \"a\", \"path\": \"/a\", \"chat_template\": \"/t/chat.jinja\", "
                     "\"tp\": 2, \"devices\": [1, 0], \"pinned\": true, \"keep_alive\": \"5m\", "
                     "\"compute\": null, \"min_resident\": 1.5}",
                     0, NULL);
    serve_model_init(&m);
    CHECK_MSG(serve_model_from_json(obj, &m, &key) == 0, "%s", err_msg());
    CHECK(m.chat_template && strcmp(m.chat_template, "/t/chat.jinja") == 0);
    CHECK(m.tp == 2 && m.pp == 1 && m.n_devices == 2 && m.devices[0] == 1 && m.devices[1] == 0);
    CHECK(m.pinned && m.keep_alive == 300 && m.compute == NULL && m.min_resident == 1.5);
    CHECK_MSG(serve_model_check(&m, "", &key) == 0, "%s", err_msg());
    serve_model_free(&m);
    json_decref(obj);
    static const struct {
        const char *json;
        double seconds;
    } kas[] = {{"0", 0},         {"-1", INFINITY},     {"2.5", 2.5},
               {"\"1h\"", 3600}, {"\"-1\"", INFINITY}, {"null", NAN}};
    for (size_t i = 0; i < sizeof(kas) / sizeof(kas[0]); i++) {
        char text[128];
        snprintf(text, sizeof(text), "{\"name\": \"a\", \"path\": \"/a\", \"keep_alive\": %s}",
                 kas[i].json);
        obj = json_loads(text, 0, NULL);
        serve_model_init(&m);
        CHECK_MSG(
            serve_model_from_json(obj, &m, &key) == 0 &&
                (isnan(kas[i].seconds) ? isnan(m.keep_alive) : m.keep_alive == kas[i].seconds),
            "keep_alive %s: %g (%s)", kas[i].json, m.keep_alive, err_msg());
        serve_model_free(&m);
        json_decref(obj);
    }
    /* durations in the file and from a flag's text, as in JSON */
    struct serve_config c;
    serve_config_init(&c);
    const char *text = "keep_alive: 5m\nmodels: [{name: a, path: /a, keep_alive: 1h30m}]\n";
    CHECK_MSG(serve_config_parse_yaml(text, strlen(text), "d.yaml", &c) == 0, "%s", err_msg());
    CHECK(c.keep_alive == 300 && c.n_models == 1 && c.models[0].keep_alive == 5400);
    const struct serve_key *ka = serve_key_find("keep_alive");
    CHECK(ka && serve_key_set_text(ka, &c, "-1", "--keep-alive") == 0 && isinf(c.keep_alive));
    CHECK(ka && serve_key_set_text(ka, &c, "soon", "--keep-alive") == ERR_INVALID &&
          strstr(err_msg(), "--keep-alive: expected a duration such as 30s"));
    text = "models: [{name: a, path: /a, keep_alive: ~}]\n";
    CHECK(serve_config_parse_yaml(text, strlen(text), "d.yaml", &c) == 0 &&
          isnan(c.models[1].keep_alive));
    serve_config_free(&c);

    /* the missing name: the file's words */
    obj = json_loads("{\"path\": \"/a\"}", 0, NULL);
    serve_model_init(&m);
    CHECK(serve_model_from_json(obj, &m, &key) == 0);
    CHECK_MSG(serve_model_check(&m, "", &key) == ERR_INVALID && !strcmp(key, "name") &&
                  strstr(err_msg(), "name: expected a non-empty string, got none"),
              "%s", err_msg());
    serve_model_free(&m);
    json_decref(obj);
}

/* Aliases: more names of one model, from the file (models[].aliases), the
 * flag's ALIAS=NAME and the admin body; each a name as safe as a model's,
 * none the name or alias of another model. */
TEST(aliases)
{
    struct serve_config c;
    serve_config_init(&c);
    const char *text = "models:\n  - {name: a, path: /a, aliases: [chat, chat-2]}\n"
                       "  - {name: b, path: /b}\n";
    CHECK_MSG(serve_config_parse_yaml(text, strlen(text), "a.yaml", &c) == 0, "%s", err_msg());
    CHECK(c.models[0].n_aliases == 2 && strcmp(c.models[0].aliases[1], "chat-2") == 0);
    CHECK(serve_config_add_alias(&c, "bee=b") == 0 && c.models[1].n_aliases == 1 &&
          strcmp(c.models[1].aliases[0], "bee") == 0);
    CHECK_MSG(serve_config_check(&c) == 0, "%s", err_msg());
    CHECK(serve_config_add_alias(&c, "x=nobody") == ERR_INVALID &&
          strstr(err_msg(), "no model is named 'nobody'"));
    CHECK(serve_config_add_alias(&c, "=b") == ERR_INVALID &&
          strstr(err_msg(), "expected ALIAS=NAME"));
    static const struct {
        const char *alias, *needle;
    } bad[] = {
        {"a", "models[1].aliases[1] 'a': also a name of models[0] (a)"},
        {"chat", "models[1].aliases[1] 'chat': also a name of models[0] (a)"},
        {"b", "models[1].aliases[1] 'b': the model's own name"},
        {"bee", "models[1].aliases[1] 'bee': also aliases[0]"},
        {"x/../y", "models[1].aliases[1] 'x/../y': expected 1 to 63 bytes"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char arg[64];
        snprintf(arg, sizeof(arg), "%s=b", bad[i].alias);
        CHECK(serve_config_add_alias(&c, arg) == 0);
        CHECK_MSG(serve_config_check(&c) == ERR_INVALID && strstr(err_msg(), bad[i].needle),
                  "alias %s: %s", bad[i].alias, err_msg());
        free(c.models[1].aliases[--c.models[1].n_aliases]);
    }
    CHECK_MSG(serve_config_check(&c) == 0, "%s", err_msg());
    serve_config_free(&c);

    /* the admin body's */
    json_t *obj =
        json_loads("{\"name\": \"a\", \"path\": \"/a\", \"aliases\": [\"x\", \"y\"]}", 0, NULL);
    struct serve_model m;
    serve_model_init(&m);
    const char *key;
    CHECK(serve_model_from_json(obj, &m, &key) == 0 && m.n_aliases == 2 &&
          strcmp(m.aliases[1], "y") == 0);
    CHECK(serve_model_check(&m, "", &key) == 0);
    serve_model_free(&m);
    json_decref(obj);
    obj = json_loads("{\"name\": \"a\", \"path\": \"/a\", \"aliases\": \"x\"}", 0, NULL);
    serve_model_init(&m);
    CHECK(serve_model_from_json(obj, &m, &key) == ERR_INVALID && !strcmp(key, "aliases") &&
          strstr(err_msg(), "aliases: expected a list of at most 16 names, got \"x\""));
    serve_model_free(&m);
    json_decref(obj);
}

/* adapters: the YAML list, --adapter, the admin body, and the check's
 * refusals, each one line naming the key */
TEST(adapters)
{
    struct serve_config c;
    serve_config_init(&c);
    const char *text = "keep_alive: 60\n"
                       "models:\n  - {name: llama, path: /m/llama, aliases: [chat]}\n"
                       "  - {name: org/b:v1, path: /m/b}\n"
                       "adapters:\n"
                       "  - {name: sql, base: llama, path: /a/sql, pinned: true, keep_alive: 5m,\n"
                       "     priority: 3}\n"
                       "  - name: poet\n    base: llama\n    path: /a/poet\n";
    CHECK_MSG(serve_config_parse_yaml(text, strlen(text), "a.yaml", &c) == 0, "%s", err_msg());
    CHECK(c.n_adapters == 2);
    if (c.n_adapters == 2) {
        const struct serve_adapter *a = &c.adapters[0];
        CHECK(!strcmp(a->name, "sql") && !strcmp(a->base, "llama") && !strcmp(a->path, "/a/sql"));
        CHECK(a->pinned && a->keep_alive == 300 && a->priority == 3);
        CHECK(!c.adapters[1].pinned && isnan(c.adapters[1].keep_alive) &&
              c.adapters[1].priority == 0);
        struct stack_adapter_config ac;
        serve_adapter_stack(&c, &c.adapters[1], &ac);
        CHECK(ac.keep_alive_set && ac.keep_alive == 60); /* the server's */
        serve_adapter_stack(&c, &c.adapters[0], &ac);
        CHECK(ac.pinned && ac.keep_alive_set && ac.keep_alive == 300 && ac.priority == 3);
        CHECK(!strcmp(ac.name, "sql") && !strcmp(ac.base, "llama") && !strcmp(ac.path, "/a/sql"));
    }
    CHECK_MSG(serve_config_check(&c) == 0, "%s", err_msg());
    /* --adapter: a base whose name holds ':', a directory with one */
    CHECK(serve_config_add_adapter(&c, "b1=org/b:v1:/a/b1") == 0);
    CHECK(c.n_adapters == 3 && !strcmp(c.adapters[2].base, "org/b:v1") &&
          !strcmp(c.adapters[2].path, "/a/b1"));
    CHECK(serve_config_add_adapter(&c, "b2=llama:/a/x:y") == 0 &&
          !strcmp(c.adapters[3].base, "llama") && !strcmp(c.adapters[3].path, "/a/x:y"));
    CHECK_MSG(serve_config_check(&c) == 0, "%s", err_msg());
    static const char *const bad_flags[] = {"x", "=llama:/a", "x=llama", "x=:/a", "x=llama:"};
    for (size_t i = 0; i < sizeof(bad_flags) / sizeof(bad_flags[0]); i++)
        CHECK_MSG(serve_config_add_adapter(&c, bad_flags[i]) == ERR_INVALID &&
                      strstr(err_msg(), "expected NAME=BASE:DIR"),
                  "%s: %s", bad_flags[i], err_msg());
    static const struct {
        const char *arg, *needle;
    } bad[] = {
        {"x=nosuch:/a", "adapters[4].base 'nosuch': no model of that name"},
        {"x=chat:/a", "adapters[4].base 'chat': an alias of model llama"},
        {"x=sql:/a", "adapters[4].base 'sql': an adapter (adapters[0])"},
        {"sql=llama:/a", "adapters[4].name 'sql': also the name of adapters[0]"},
        {"llama=llama:/a", "adapters[4].name 'llama': also the name of model llama"},
        {"chat=llama:/a", "adapters[4].name 'chat': also an alias of model llama"},
        {"a/../b=llama:/a", "adapters[4].name 'a/../b': expected 1 to 63 bytes"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CHECK(serve_config_add_adapter(&c, bad[i].arg) == 0);
        CHECK_MSG(serve_config_check(&c) == ERR_INVALID && strstr(err_msg(), bad[i].needle) &&
                      !strchr(err_msg(), '\n'),
                  "%s: %s", bad[i].arg, err_msg());
        serve_adapter_free(&c.adapters[--c.n_adapters]);
    }
    CHECK_MSG(serve_config_check(&c) == 0, "%s", err_msg());
    serve_config_free(&c);

    /* the file's refusals name the line and key */
    static const struct {
        const char *text, *needle;
    } errs[] = {
        {"adapters: {name: a}\n", "key 'adapters': expected a list of adapters"},
        {"adapters:\n  - {name: a, base: b}\n",
         "key 'adapters[0]': expected a mapping with 'name' and 'base' and 'path'"},
        {"adapters:\n  - {name: a, base: b, path: /p, tp: 2}\n",
         "t.yaml:2: key 'adapters[0].tp': unknown key"},
        {"adapters:\n  - {name: a, base: b, path: /p, priority: 5000}\n",
         "key 'adapters[0].priority': expected an integer from -1000 to 1000"},
        {"adapters:\n  - {name: a, base: null, path: /p}\n", "key 'adapters[0].base'"},
        {"adapters:\n  - {name: a, base: b, path: /p, keep_alive: soon}\n",
         "key 'adapters[0].keep_alive': expected a duration"},
        {"adapters:\n  - [a, b]\n", "key 'adapters[0]': expected a mapping"},
    };
    for (size_t i = 0; i < sizeof(errs) / sizeof(errs[0]); i++) {
        int rc = parse(errs[i].text);
        CHECK_MSG(rc == ERR_FORMAT && strstr(err_msg(), errs[i].needle) && !strchr(err_msg(), '\n'),
                  "case %zu: rc %d, '%s'", i, rc, err_msg());
    }

    /* the admin body's */
    static const struct {
        const char *json, *key, *needle;
    } bodies[] = {
        {"{\"name\": \"a\", \"base\": \"b\", \"path\": \"/p\", \"keep_alive\": \"1h\"}", "", NULL},
        {"{\"name\": \"a\", \"base\": \"b\", \"path\": \"/p\", \"tp\": 2}", "tp",
         "'tp': unknown key (expected one of name, base, path, pinned, keep_alive, priority)"},
        {"{\"name\": \"a\", \"base\": 7, \"path\": \"/p\"}", "base",
         "base: expected a non-empty string, got 7"},
        {"{\"name\": \"a\", \"base\": null, \"path\": \"/p\"}", "base",
         "base: expected a non-empty string, got none"},
        {"{\"name\": \"a\", \"base\": \"b\", \"path\": \"/p\", \"pinned\": 1}", "pinned",
         "pinned: expected true or false, got 1"},
        {"{\"name\": \"a\", \"base\": \"b\"}", "path",
         "path: expected a non-empty string, got none"},
        {"{\"name\": \"x/../y\", \"base\": \"b\", \"path\": \"/p\"}", "name",
         "name 'x/../y': expected 1 to 63 bytes"},
    };
    for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
        json_t *obj = json_loads(bodies[i].json, 0, NULL);
        struct serve_adapter a;
        serve_adapter_init(&a);
        const char *key = "";
        int rc = serve_adapter_from_json(obj, &a, &key);
        if (rc == 0)
            rc = serve_adapter_check(&a, "", &key);
        if (!bodies[i].needle) {
            CHECK_MSG(rc == 0 && a.keep_alive == 3600, "case %zu: %s", i, err_msg());
        } else {
            CHECK_MSG(rc == ERR_INVALID && !strcmp(key, bodies[i].key) &&
                          strstr(err_msg(), bodies[i].needle),
                      "case %zu: rc %d key %s '%s'", i, rc, key, err_msg());
        }
        serve_adapter_free(&a);
        json_decref(obj);
    }
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, NULL);
}
