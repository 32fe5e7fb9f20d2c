/* shardswap serve: the flags and the config file -> the server (server.h).
 * Every flag but --config and --port-file is a key of the config table
 * (server/config_keys.h): its name, type, range, default and help come
 * from there, and a flag given overrides the file's value. */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cluster/job.h"
#include "core/bytes.h"
#include "core/error.h"
#include "core/fs.h"
#include "sched/sched.h"
#include "server/config.h"
#include "server/config_keys.h"
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
 * file's kind, count, GPUs and processes. */
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
    c->n_ranks = sc.procs_set ? sc.n_devices : 0;
    for (int d = 0; d < c->n_ranks; d++)
        c->ranks[d] = sc.procs[d];
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

/* --model-root DIR...: each made absolute, together replacing the config
 * file's roots. */
static int roots_from_flags(const struct flag_strs *dirs, struct serve_config *c)
{
    if (dirs->n > SERVE_MAX_ROOTS)
        return err_set(ERR_INVALID, "--model-root: more than %d roots", SERVE_MAX_ROOTS);
    for (int k = 0; k < c->n_model_roots; k++)
        free(c->model_roots[k]);
    c->n_model_roots = 0;
    for (int i = 0; i < dirs->n; i++) {
        char *abs = realpath(dirs->v[i], NULL);
        if (!abs)
            return err_set(ERR_INVALID, "--model-root %s: %s", dirs->v[i], strerror(errno));
        c->model_roots[c->n_model_roots++] = abs;
    }
    return 0;
}

#define KEY_FLAGS_MAX 40

/* A flag of the key table, and where args_parse puts its value. */
struct key_flag {
    const struct serve_key *key;
    union {
        const char *s;
        int i;
        float f;
    } v;
    struct flag_strs list; /* the repeatable ones: --model, --model-root, --alias, --adapter */
    char range[64], help[512];
};

/* flags[i] for each key of the table with a flag (kf[i] holding its
 * value); returns how many, or ERR_NOMEM. */
static int key_flags_build(struct key_flag *kf, struct flag *flags, int argc)
{
    int n = 0;
    for (int i = 0; i < serve_n_keys; i++) {
        const struct serve_key *k = &serve_keys[i];
        if (!k->flag)
            continue;
        assert(n < KEY_FLAGS_MAX);
        struct key_flag *e = &kf[n];
        struct flag *f = &flags[n++];
        char def[64];
        e->key = k;
        serve_key_default(k, def, sizeof(def));
        if (strcmp(k->path, "policy") == 0) /* the engine's list, not a copy of it */
            snprintf(e->help, sizeof(e->help), "%s: %s (default %s)", k->help, sched_policy_names(),
                     sched_policy_default());
        else
            snprintf(e->help, sizeof(e->help), def[0] ? "%s (default %s)" : "%s", k->help, def);
        serve_key_range(k, e->range, sizeof(e->range));
        *f = (struct flag){.name = k->flag,
                           .kind = FLAG_STR,
                           .dst = &e->v.s,
                           .metavar = k->metavar,
                           .help = e->help,
                           .range = e->range[0] ? e->range : NULL,
                           .lo = k->lo,
                           .hi = k->hi};
        if (k->type == SK_INT || k->type == SK_DOUBLE) {
            f->kind = k->type == SK_INT ? FLAG_INT : FLAG_FLOAT;
            f->dst = k->type == SK_INT ? (void *)&e->v.i : (void *)&e->v.f;
        } else if (k->type == SK_MODELS || k->type == SK_ADAPTERS || k->type == SK_STRINGS) {
            e->list =
                (struct flag_strs){.v = calloc((size_t)argc + 1, sizeof(char *)), .cap = argc};
            if (!e->list.v)
                return err_set(ERR_NOMEM, "out of memory");
            f->kind = FLAG_STRS;
            f->dst = &e->list;
        }
    }
    return n;
}

/* The flags given (flags[i].seen), over what c holds from the file. */
static int key_flags_apply(const struct key_flag *kf, const struct flag *flags, int n,
                           struct serve_config *c)
{
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        const struct serve_key *k = kf[i].key;
        char what[64];
        if (!flags[i].seen)
            continue;
        snprintf(what, sizeof(what), "--%s", k->flag);
        switch (k->type) {
        case SK_INT:
            *(int *)serve_key_field(k, c) = kf[i].v.i;
            break;
        case SK_DOUBLE:
            *(double *)serve_key_field(k, c) = kf[i].v.f;
            break;
        case SK_SECTION: /* --devices: the section's kind, count and GPUs at once */
            assert(strcmp(k->path, "devices") == 0);
            rc = parse_devices(kf[i].v.s, c);
            break;
        case SK_MODELS:
            for (int j = 0; j < kf[i].list.n && rc == 0; j++)
                rc = serve_config_add_model(c, kf[i].list.v[j]);
            break;
        case SK_ADAPTERS: /* after --model and --alias: the table's order */
            for (int j = 0; j < kf[i].list.n && rc == 0; j++)
                rc = serve_config_add_adapter(c, kf[i].list.v[j]);
            break;
        case SK_STRINGS: /* --model-root, --alias */
            if (strcmp(k->path, "model_roots") == 0)
                rc = roots_from_flags(&kf[i].list, c);
            for (int j = 0; strcmp(k->path, "model_roots") != 0 && j < kf[i].list.n && rc == 0; j++)
                rc = serve_config_add_alias(c, kf[i].list.v[j]);
            break;
        default:
            rc = serve_key_set_text(k, c, kf[i].v.s, what);
            break;
        }
    }
    return rc;
}

static void key_flags_free(struct key_flag *kf, int n)
{
    for (int i = 0; i < n; i++)
        free(kf[i].list.v);
}

/* The config: defaults, the file, the flags over it; checked. */
static int serve_settings(const char *config, const struct key_flag *kf, const struct flag *flags,
                          int n, struct serve_config *c)
{
    int rc = 0;
    if (config)
        rc = serve_config_load(config, c);
    if (rc == 0)
        rc = key_flags_apply(kf, flags, n, c);
    if (rc == 0)
        rc = serve_config_check(c);
    return rc;
}

int cmd_serve(int argc, char **argv)
{
    const char *config = NULL, *port_file = NULL;
    struct key_flag kf[KEY_FLAGS_MAX];
    struct flag flags[KEY_FLAGS_MAX + 2] = {
        FLAG("config", FLAG_STR, &config, "FILE",
             "YAML config (docs/serve.example.yaml); the flags below override it"),
        FLAG("port-file", FLAG_STR, &port_file, "FILE",
             "write the bound port to FILE once listening (a regular file or none: it is "
             "replaced, and removed at exit)"),
    };
    memset(kf, 0, sizeof(kf));
    int n = key_flags_build(kf, flags + 2, argc);
    if (n < 0) {
        key_flags_free(kf, KEY_FLAGS_MAX);
        return cli_fail("serve");
    }
    int rc = args_parse("serve",
                        "Serves the models over HTTP with OpenAI's completions and chat "
                        "completions APIs (POST /v1/completions, POST /v1/chat/completions, "
                        "GET /v1/models), plus /health, /metrics "
                        "(Prometheus) and /admin/models routes. Logs \"listening on "
                        "http://HOST:PORT\" to stderr once serving; SIGTERM or SIGINT stop it "
                        "gracefully. Under mpirun (mpirun -n P shardswap serve ...) process 0 "
                        "serves and reads the config, the others open the devices it gives them "
                        "(--devices P/cpu:I, devices.ranks) and load their shards from their own "
                        "copy of each checkpoint at the same path; a process silent for "
                        "$SHARDSWAP_HEARTBEAT_TIMEOUT seconds (default 10) is lost, and its "
                        "models answer 503; stop the job by signalling process 0.",
                        argc, argv, flags, n + 2);
    if (rc) {
        key_flags_free(kf, n);
        return rc;
    }
    struct serve_config c;
    struct server *s = NULL;
    struct cluster_job *job = cli_job(); /* under mpirun; main closes it */
    struct stat port_written;
    bool port_file_written = false;
    serve_config_init(&c);
    c.n_procs = cluster_job_procs(job); /* devices.ranks must be among them */
    rc = serve_settings(config, kf, flags + 2, n, &c);
    key_flags_free(kf, n);
    if (rc < 0 || (port_file && (rc = port_file_check(port_file)) < 0))
        goto usage;
    log_set_level(c.log_level);
    if ((rc = server_signals_init()) < 0 || (rc = server_open(&c, job, &s)) < 0)
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
