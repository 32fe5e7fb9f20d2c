/* shardswap serve: the flags and the config file -> the server (server.h). */
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/bytes.h"
#include "core/error.h"
#include "core/fs.h"
#include "server/config.h"
#include "server/log.h"
#include "server/server.h"

/* Replaces the owned string *dst with a copy of v. */
static int set_str(char **dst, const char *v)
{
    char *c = strdup(v);
    if (!c)
        return err_set(ERR_NOMEM, "out of memory");
    free(*dst);
    *dst = c;
    return 0;
}

/* --devices: the list (stack_parse_devices) into c, replacing the config
 * file's kind, count and GPUs. */
static int parse_devices(const char *s, struct serve_config *c)
{
    struct stack_config sc = {0};
    int rc = stack_parse_devices("--devices", s, &sc);
    if (rc < 0)
        return rc;
    c->n_devices = sc.n_devices;
    c->n_gpus = sc.gpus_set ? sc.n_devices : 0;
    for (int d = 0; d < c->n_gpus; d++)
        c->gpus[d] = sc.gpus[d];
    return set_str(&c->device_kind, sc.device_kind);
}

/* --port-file: PATH must be a regular file or absent (it is replaced),
 * never a link, device, FIFO or directory; checked before the models load,
 * so a bad one costs nothing. */
static int port_file_check(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT)
            return 0;
        return err_set(ERR_IO, "--port-file %s: %s", path, strerror(errno));
    }
    if (!S_ISREG(st.st_mode))
        return err_set(ERR_INVALID, "--port-file %s: %s, expected a regular file or no file", path,
                       S_ISLNK(st.st_mode) ? "a symbolic link" : fs_kind_name(st.st_mode));
    return 0;
}

/* Writes the port to path through a temporary file beside it (mkstemp:
 * created new, so a link planted under its name is never followed),
 * renamed into place so a reader never sees half of it. On failure the
 * temporary is removed. *written identifies the file for port_file_remove. */
static int port_file_write(const char *path, int port, struct stat *written)
{
    char tmp[PATH_MAX];
    const char *slash = strrchr(path, '/');
    int dir_len = slash ? (int)(slash - path) + 1 : 0;
    if (snprintf(tmp, sizeof(tmp), "%.*s.%s.XXXXXX", dir_len, path, slash ? slash + 1 : path) >=
        (int)sizeof(tmp))
        return err_set(ERR_INVALID, "--port-file %s: path too long", path);
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0)
        return err_set(ERR_IO, "--port-file %s: cannot create a temporary beside it: %s", path,
                       strerror(errno));
    char text[16];
    int n = snprintf(text, sizeof(text), "%d\n", port);
    int rc = 0;
    if (write(fd, text, (size_t)n) != n || fchmod(fd, 0644) != 0 || fstat(fd, written) != 0)
        rc = err_set(ERR_IO, "--port-file %s: writing %s: %s", path, tmp,
                     strerror(errno ? errno : EIO));
    if (close(fd) != 0 && rc == 0)
        rc = err_set(ERR_IO, "--port-file %s: writing %s: %s", path, tmp, strerror(errno));
    /* again: something may have been put there while the models loaded */
    if (rc == 0)
        rc = port_file_check(path);
    if (rc == 0 && rename(tmp, path) != 0)
        rc = err_set(ERR_IO, "--port-file %s: %s", path, strerror(errno));
    if (rc < 0)
        unlink(tmp);
    return rc;
}

/* Removes the port file at exit, when it is still the one written (a file
 * put there since is left alone). */
static void port_file_remove(const char *path, const struct stat *written)
{
    struct stat st;
    if (lstat(path, &st) == 0 && st.st_dev == written->st_dev && st.st_ino == written->st_ino)
        unlink(path);
}

/* --model and --model-root repeat: args_parse keeps only the last value of
 * a flag, so their values are collected here first. */
static int collect_repeated(int argc, char **argv, struct serve_config *c, int *n_roots_seen)
{
    int rc;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        bool root = false;
        if (strcmp(a, "--model") == 0 || strcmp(a, "--model-root") == 0) {
            root = a[7] == '-';
            v = i + 1 < argc ? argv[++i] : NULL;
        } else if (strncmp(a, "--model=", 8) == 0) {
            v = a + 8;
        } else if (strncmp(a, "--model-root=", 13) == 0) {
            v = a + 13;
            root = true;
        } else {
            continue;
        }
        if (!v)
            continue; /* args_parse says the value is missing */
        if (!root) {
            if ((rc = serve_config_add_model(c, v)) < 0)
                return rc;
            continue;
        }
        char *abs = realpath(v, NULL);
        if (!abs)
            return err_set(ERR_INVALID, "--model-root %s: %s", v, strerror(errno));
        if (*n_roots_seen == 0) { /* the flags replace the config file's roots */
            for (int k = 0; k < c->n_model_roots; k++)
                free(c->model_roots[k]);
            c->n_model_roots = 0;
        }
        (*n_roots_seen)++;
        if (c->n_model_roots >= SERVE_MAX_ROOTS) {
            free(abs);
            return err_set(ERR_INVALID, "--model-root: more than %d roots", SERVE_MAX_ROOTS);
        }
        c->model_roots[c->n_model_roots++] = abs;
    }
    return 0;
}

int cmd_serve(int argc, char **argv)
{
    const char *config = NULL, *model = NULL, *devices = NULL, *device_budget = NULL,
               *host_budget = NULL, *policy = NULL, *host = NULL, *port_file = NULL,
               *api_key = NULL, *admin_key = NULL, *model_root = NULL, *log_level = NULL,
               *max_body = NULL, *compute = NULL;
    int max_batch = 0, queue_cap = 0, port = 0, max_conn = 0, timeout = 0, threads = 0,
        per_client = 0, header_timeout = 0, body_timeout = 0;
    float grace = 0, link_gbps = 0, req_timeout = 0;
    struct flag flags[] = {
        FLAG("config", FLAG_STR, &config, "FILE",
             "YAML config (docs/serve.example.yaml); the flags below override it"),
        FLAG("model", FLAG_STR, &model, "NAME=DIR",
             "serve the checkpoint in DIR as NAME (repeatable)"),
        FLAG("devices", FLAG_STR, &devices, "N|LIST",
             "N CPU devices, a list cpu:0,cpu:1,..., or cuda:G,... with G a GPU (a GPU listed "
             "again is another partition of it; needs a CUDA build) (default 1)"),
        FLAG("device-budget", FLAG_STR, &device_budget, "BYTES",
             "memory of each device, e.g. 2GiB (default: sized for the models)"),
        FLAG("host-budget", FLAG_STR, &host_budget, "BYTES",
             "host memory for model copies (default: sized for the models)"),
        FLAG("policy", FLAG_STR, &policy, "NAME", "scheduling policy (default: the engine's)"),
        FLAG_RANGE("max-batch", FLAG_INT, &max_batch, "N", "sequences per batch (default 8)",
                   SERVE_MAX_BATCH_MIN, SERVE_MAX_BATCH_MAX,
                   SERVE_RANGE_TEXT(SERVE_MAX_BATCH_MIN, SERVE_MAX_BATCH_MAX)),
        FLAG_RANGE("queue-cap", FLAG_INT, &queue_cap, "N",
                   "waiting requests per model; beyond it 429 (default 256)", SERVE_QUEUE_CAP_MIN,
                   SERVE_QUEUE_CAP_MAX, SERVE_RANGE_TEXT(SERVE_QUEUE_CAP_MIN, SERVE_QUEUE_CAP_MAX)),
        FLAG("host", FLAG_STR, &host, "ADDR", "address to listen on (default 127.0.0.1)"),
        FLAG_RANGE("port", FLAG_INT, &port, "PORT",
                   "port to listen on; 0 = any free one "
                   "(default 8000)",
                   SERVE_PORT_MIN, SERVE_PORT_MAX,
                   SERVE_RANGE_TEXT(SERVE_PORT_MIN, SERVE_PORT_MAX)),
        FLAG("port-file", FLAG_STR, &port_file, "FILE",
             "write the bound port to FILE once listening (a regular file or none: it is "
             "replaced, and removed at exit)"),
        FLAG("api-key", FLAG_STR, &api_key, "KEY",
             "require 'Authorization: Bearer KEY' (not on /health, /metrics) (default: none)"),
        FLAG("admin-key", FLAG_STR, &admin_key, "KEY",
             "key of the /admin routes (default: the api key)"),
        FLAG("model-root", FLAG_STR, &model_root, "DIR",
             "POST /admin/models may add checkpoints below DIR (repeatable; default: disabled)"),
        FLAG("log-level", FLAG_STR, &log_level, "LEVEL",
             "error|warn|info|debug (default info: one line per request)"),
        FLAG_RANGE("max-connections", FLAG_INT, &max_conn, "N",
                   "connections at once; more are refused (default 256)", SERVE_MAX_CONNECTIONS_MIN,
                   SERVE_MAX_CONNECTIONS_MAX,
                   SERVE_RANGE_TEXT(SERVE_MAX_CONNECTIONS_MIN, SERVE_MAX_CONNECTIONS_MAX)),
        FLAG_RANGE("max-connections-per-client", FLAG_INT, &per_client, "N",
                   "connections one client address may hold; more are refused (default 0: half "
                   "of --max-connections)",
                   SERVE_PER_CLIENT_MIN, SERVE_PER_CLIENT_MAX,
                   SERVE_RANGE_TEXT(SERVE_PER_CLIENT_MIN, SERVE_PER_CLIENT_MAX)),
        FLAG_RANGE("timeout", FLAG_INT, &timeout, "S",
                   "close a connection idle this long (default 30)", SERVE_TIMEOUT_MIN,
                   SERVE_TIMEOUT_MAX, SERVE_RANGE_TEXT(SERVE_TIMEOUT_MIN, SERVE_TIMEOUT_MAX)),
        FLAG_RANGE("header-timeout", FLAG_INT, &header_timeout, "S",
                   "close a connection whose request headers are not all in S seconds after "
                   "it opened (or, kept alive, after the next request's first byte), however "
                   "steadily they come (default 20)",
                   SERVE_TIMEOUT_MIN, SERVE_TIMEOUT_MAX,
                   SERVE_RANGE_TEXT(SERVE_TIMEOUT_MIN, SERVE_TIMEOUT_MAX)),
        FLAG_RANGE("body-timeout", FLAG_INT, &body_timeout, "S",
                   "close a connection whose request body is not all in S seconds after its "
                   "headers (default 60)",
                   SERVE_TIMEOUT_MIN, SERVE_TIMEOUT_MAX,
                   SERVE_RANGE_TEXT(SERVE_TIMEOUT_MIN, SERVE_TIMEOUT_MAX)),
        FLAG("max-body", FLAG_STR, &max_body, "BYTES", "largest request body (default 1MiB)"),
        FLAG_RANGE("grace", FLAG_FLOAT, &grace, "S",
                   "on SIGTERM/SIGINT, requests in flight get S seconds (a second signal ends it), "
                   "then are cancelled "
                   "(default 30)",
                   0, SERVE_SECONDS_MAX, SERVE_RANGE_TEXT(0, SERVE_SECONDS_MAX)),
        FLAG_RANGE("request-timeout", FLAG_FLOAT, &req_timeout, "S",
                   "a completion not done S seconds after it arrived ends with 504, queued or "
                   "running (default 0: none)",
                   0, SERVE_SECONDS_MAX, SERVE_RANGE_TEXT(0, SERVE_SECONDS_MAX)),
        FLAG_RANGE("link-gbps", FLAG_FLOAT, &link_gbps, "G",
                   "CPU devices only: emulate a host link of G GB/s (default 0: none)", 0, FLT_MAX,
                   "G >= 0"),
        FLAG_RANGE("http-threads", FLAG_INT, &threads, "N", "HTTP worker threads (default 4)",
                   SERVE_HTTP_THREADS_MIN, SERVE_HTTP_THREADS_MAX,
                   SERVE_RANGE_TEXT(SERVE_HTTP_THREADS_MIN, SERVE_HTTP_THREADS_MAX)),
        COMPUTE_FLAG(&compute),
    };
    enum {
        F_CONFIG,
        F_MODEL,
        F_DEVICES,
        F_DEVICE_BUDGET,
        F_HOST_BUDGET,
        F_POLICY,
        F_MAX_BATCH,
        F_QUEUE_CAP,
        F_HOST,
        F_PORT,
        F_PORT_FILE,
        F_API_KEY,
        F_ADMIN_KEY,
        F_MODEL_ROOT,
        F_LOG_LEVEL,
        F_MAX_CONN,
        F_PER_CLIENT,
        F_TIMEOUT,
        F_HEADER_TIMEOUT,
        F_BODY_TIMEOUT,
        F_MAX_BODY,
        F_GRACE,
        F_REQ_TIMEOUT,
        F_LINK,
        F_THREADS,
        F_COMPUTE,
    };
    /* args_parse refuses a flag given twice: it sees the repeatable ones
     * (collected by collect_repeated) at most once */
    char **rest = malloc(((size_t)argc + 1) * sizeof(*rest));
    if (!rest)
        return cli_fail("serve");
    int n_rest = 0;
    bool kept_model = false, kept_root = false;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        bool is_model = strcmp(a, "--model") == 0 || strncmp(a, "--model=", 8) == 0;
        bool is_root = strcmp(a, "--model-root") == 0 || strncmp(a, "--model-root=", 13) == 0;
        bool *kept = is_model ? &kept_model : is_root ? &kept_root : NULL;
        bool pair = !strchr(a, '=') && i + 1 < argc;
        if (kept && *kept) {
            i += pair;
            continue;
        }
        if (kept)
            *kept = true;
        rest[n_rest++] = argv[i];
        if (kept && pair)
            rest[n_rest++] = argv[++i];
    }
    int rc = args_parse("serve",
                        "Serves the models over HTTP with OpenAI's completions API "
                        "(POST /v1/completions, GET /v1/models), plus /health, /metrics "
                        "(Prometheus) and /admin/models routes. Logs \"listening on "
                        "http://HOST:PORT\" to stderr once serving; SIGTERM or SIGINT stop it "
                        "gracefully.",
                        n_rest, rest, flags, sizeof(flags) / sizeof(flags[0]));
    free(rest);
    if (rc)
        return rc;
    struct serve_config c;
    struct server *s = NULL;
    struct stat port_written;
    bool port_file_written = false;
    serve_config_init(&c);
    int n_roots = 0;
    enum log_level level;
    if (config && (rc = serve_config_load(config, &c)) < 0)
        goto usage;
    if ((rc = collect_repeated(argc, argv, &c, &n_roots)) < 0)
        goto usage;
    if ((flags[F_DEVICES].seen && (rc = parse_devices(devices, &c)) < 0) ||
        (flags[F_DEVICE_BUDGET].seen &&
         (rc = bytes_parse(device_budget, &c.device_budget)) < 0) ||
        (flags[F_HOST_BUDGET].seen && (rc = bytes_parse(host_budget, &c.host_budget)) < 0) ||
        (flags[F_MAX_BODY].seen && (rc = bytes_parse(max_body, &c.max_body_bytes)) < 0) ||
        (flags[F_MAX_BODY].seen && c.max_body_bytes == 0 &&
         (rc = err_set(ERR_INVALID, "--max-body 0: expected at least 1 byte")) < 0) ||
        (flags[F_POLICY].seen && (rc = set_str(&c.policy, policy)) < 0) ||
        (flags[F_COMPUTE].seen && (rc = set_str(&c.compute, compute)) < 0) ||
        (flags[F_HOST].seen && (rc = set_str(&c.host, host)) < 0) ||
        (flags[F_API_KEY].seen && (rc = set_str(&c.api_key, api_key)) < 0) ||
        (flags[F_ADMIN_KEY].seen && (rc = set_str(&c.admin_key, admin_key)) < 0))
        goto usage;
    if (flags[F_LOG_LEVEL].seen) {
        if ((rc = log_level_parse(log_level, &level)) < 0)
            goto usage;
        c.log_level = level;
    }
    if (flags[F_MAX_BATCH].seen)
        c.max_batch = max_batch;
    if (flags[F_QUEUE_CAP].seen)
        c.queue_cap = queue_cap;
    if (flags[F_PORT].seen)
        c.port = port;
    if (flags[F_MAX_CONN].seen)
        c.max_connections = max_conn;
    if (flags[F_PER_CLIENT].seen)
        c.max_connections_per_client = per_client;
    if (flags[F_TIMEOUT].seen)
        c.connection_timeout_s = timeout;
    if (flags[F_HEADER_TIMEOUT].seen)
        c.header_timeout_s = header_timeout;
    if (flags[F_BODY_TIMEOUT].seen)
        c.body_timeout_s = body_timeout;
    if (flags[F_GRACE].seen)
        c.grace_s = grace;
    if (flags[F_REQ_TIMEOUT].seen)
        c.request_timeout_s = req_timeout;
    if (flags[F_LINK].seen)
        c.link_gbps = link_gbps;
    if (flags[F_THREADS].seen)
        c.http_threads = threads;
    if ((rc = serve_config_check(&c)) < 0 || (port_file && (rc = port_file_check(port_file)) < 0))
        goto usage;
    log_set_level(c.log_level);
    if ((rc = server_signals_init()) < 0 || (rc = server_open(&c, &s)) < 0)
        goto fail;
    if (port_file && (rc = port_file_write(port_file, server_port(s), &port_written)) < 0)
        goto fail;
    port_file_written = port_file != NULL;
    rc = server_run(s);
    if (port_file_written)
        port_file_remove(port_file, &port_written);
    if (rc < 0)
        goto fail;
    server_close(s);
    serve_config_free(&c);
    return 0;
usage:
    serve_config_free(&c);
    return args_usage_fail("serve");
fail:
    rc = cli_fail("serve");
    if (port_file_written)
        port_file_remove(port_file, &port_written);
    server_close(s);
    serve_config_free(&c);
    return rc;
}
