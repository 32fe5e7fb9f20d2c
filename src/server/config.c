/* The server's configuration file (config.h): YAML read with libyaml's
 * event parser into a small tree, then the tree walked against the schema
 * docs/serve.example.yaml shows.
 *
 * The file is one document whose root is a mapping (an empty file or an
 * empty document sets nothing). Refused, each as ERR_FORMAT
 * "NAME:LINE: key 'PATH': ..." with LINE 1-based from libyaml's marks:
 *   - a second document, an alias or an anchor (an alias can make a tree
 *     exponentially larger than its text: "billion laughs"), a tag;
 *   - nesting deeper than DEPTH_MAX, more than NODES_MAX nodes, a scalar
 *     longer than SCALAR_MAX bytes;
 *   - a key twice in one mapping, a key that is not a plain string, an
 *     unknown key;
 *   - a value of the wrong kind or out of the key's range.
 * Scalars: null is "", "~" or "null" unquoted; booleans true/false;
 * integers decimal; byte counts as serve_parse_bytes. A null leaves a key's
 * default, except for keys that must have a value (named in the message).
 *
 * Which check is where: this file's parser checks each value's type and
 * range (where one value alone decides it); serve_config_check checks what
 * depends on several keys or on other modules (the policy name through
 * sched_policy_find, TP x PP against the devices, unique model names, the
 * device kind), so that the command line's settings are checked as well.
 */
#include "server/config.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <yaml.h>

#include "core/error.h"
#include "core/fs.h"
#include "engine/sched.h"

#define FILE_MAX (1u << 20) /* bytes of a config file */
#define DEPTH_MAX 16        /* nested collections */
#define NODES_MAX 100000    /* nodes in a document */
#define SCALAR_MAX 4096     /* bytes of one scalar */
#define QUOTE_MAX 64        /* bytes of a value quoted in a message */
#define NAME_MAX_LEN 63     /* bytes of a model name */

/* ---- defaults, add, free ---- */

void serve_config_init(struct serve_config *c)
{
    memset(c, 0, sizeof(*c));
    c->host = strdup("127.0.0.1"); /* NULL when out of memory: serve_config_check says so */
    c->port = 8000;
    c->http_threads = 4;
    c->max_connections = 256;
    c->connection_timeout_s = 30;
    c->header_timeout_s = 20;
    c->body_timeout_s = 60;
    c->max_body_bytes = 1u << 20;
    c->grace_s = 30;
    c->log_level = LOG_INFO;
    c->device_kind = strdup("cpu");
    c->n_devices = 1;
    c->max_batch = 8;
    c->queue_cap = 256;
}

static void model_free(struct serve_model *m)
{
    free(m->name);
    free(m->path);
    free(m->compute);
    free(m->chat_template);
    memset(m, 0, sizeof(*m));
}

/* Appends m (its strings taken) to c's models; on failure m is left to the
 * caller. */
static int models_push(struct serve_config *c, const struct serve_model *m)
{
    if (c->n_models == c->models_cap) {
        int cap = c->models_cap ? c->models_cap * 2 : 8;
        struct serve_model *g = realloc(c->models, (size_t)cap * sizeof(*g));
        if (!g)
            return err_set(ERR_NOMEM, "out of memory for the models' list");
        c->models = g;
        c->models_cap = cap;
    }
    c->models[c->n_models++] = *m;
    return 0;
}

void serve_config_free(struct serve_config *c)
{
    if (!c)
        return;
    free(c->host);
    free(c->api_key);
    free(c->admin_key);
    for (int i = 0; i < c->n_model_roots; i++)
        free(c->model_roots[i]);
    free(c->device_kind);
    free(c->policy);
    free(c->compute);
    for (int i = 0; i < c->n_models; i++)
        model_free(&c->models[i]);
    free(c->models);
    memset(c, 0, sizeof(*c));
}

int serve_config_add_model(struct serve_config *c, const char *arg)
{
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg || !eq[1])
        return err_set(ERR_INVALID, "--model '%.*s': expected NAME=DIR", QUOTE_MAX, arg);
    if (c->n_models >= SERVE_MAX_MODELS)
        return err_set(ERR_INVALID, "--model '%.*s': more than %d models", QUOTE_MAX, arg,
                       SERVE_MAX_MODELS);
    struct serve_model m = {.tp = 1, .pp = 1};
    m.name = strndup(arg, (size_t)(eq - arg));
    m.path = strdup(eq + 1);
    if (!m.name || !m.path) {
        model_free(&m);
        return err_set(ERR_NOMEM, "--model: out of memory");
    }
    int rc = models_push(c, &m);
    if (rc < 0)
        model_free(&m);
    return rc;
}

/* ---- byte counts ---- */

int serve_parse_bytes(const char *s, uint64_t *out)
{
    static const struct {
        const char *suffix;
        uint64_t mult;
    } units[] = {
        {"", 1},
        {"B", 1},
        {"K", 1ull << 10},
        {"M", 1ull << 20},
        {"G", 1ull << 30},
        {"T", 1ull << 40},
        {"KiB", 1ull << 10},
        {"MiB", 1ull << 20},
        {"GiB", 1ull << 30},
        {"TiB", 1ull << 40},
        {"KB", 1000ull},
        {"MB", 1000000ull},
        {"GB", 1000000000ull},
        {"TB", 1000000000000ull},
    };
    const char *p = s;
    uint64_t whole = 0, frac = 0, frac_scale = 1;
    if (!isdigit((unsigned char)*p))
        goto bad;
    for (; isdigit((unsigned char)*p); p++)
        if (__builtin_mul_overflow(whole, 10, &whole) ||
            __builtin_add_overflow(whole, (uint64_t)(*p - '0'), &whole))
            goto overflow;
    bool has_frac = *p == '.';
    if (has_frac) {
        p++;
        if (!isdigit((unsigned char)*p))
            goto bad;
        for (; isdigit((unsigned char)*p); p++) {
            if (frac_scale >= 1000000000ull) /* nine digits are a byte below a TB */
                goto bad;
            frac = frac * 10 + (uint64_t)(*p - '0');
            frac_scale *= 10;
        }
    }
    if (*p == ' ' && p[1]) /* "2 GiB"; not "5 " */
        p++;
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (strcmp(p, units[i].suffix) != 0)
            continue;
        if (has_frac && units[i].mult == 1)
            goto bad; /* a count of bytes is whole */
        uint64_t v;
        if (__builtin_mul_overflow(whole, units[i].mult, &v))
            goto overflow;
        /* the fraction, rounded down to whole bytes: frac < 1e9, mult < 2^41 */
        unsigned __int128 f = (unsigned __int128)frac * units[i].mult / frac_scale;
        if (__builtin_add_overflow(v, (uint64_t)f, &v))
            goto overflow;
        *out = v;
        return 0;
    }
bad:
    return err_set(ERR_INVALID,
                   "'%.*s': expected a byte count such as 1048576, 512KiB, 1MiB or 1.5GB "
                   "(K/M/G/T, KiB/MiB/GiB/TiB: 1024s; KB/MB/GB/TB: 1000s)",
                   QUOTE_MAX, s);
overflow:
    return err_set(ERR_INVALID, "'%.*s': byte count too large (at most %llu)", QUOTE_MAX, s,
                   (unsigned long long)UINT64_MAX);
}

/* ---- the tree ---- */

enum ykind { Y_SCALAR, Y_SEQ, Y_MAP };

struct ynode {
    enum ykind kind;
    int line;             /* 1-based */
    bool plain;           /* scalar: unquoted (only plain scalars can be null) */
    char *value;          /* scalar: NUL-terminated (owned) */
    struct ynode **items; /* seq: elements; map: key, value, key, value ... (owned) */
    int n, cap;
};

static void ynode_free(struct ynode *y)
{
    if (!y)
        return;
    for (int i = 0; i < y->n; i++)
        ynode_free(y->items[i]);
    free(y->items);
    free(y->value);
    free(y);
}

static int ynode_push(struct ynode *parent, struct ynode *child)
{
    if (parent->n == parent->cap) {
        int cap = parent->cap ? parent->cap * 2 : 8;
        struct ynode **items = realloc(parent->items, (size_t)cap * sizeof(*items));
        if (!items)
            return ERR_NOMEM;
        parent->items = items;
        parent->cap = cap;
    }
    parent->items[parent->n++] = child;
    return 0;
}

/* Reads the whole stream into *root (NULL for an empty stream or document). */
static int yaml_tree_read(const char *text, size_t len, const char *name, struct ynode **root)
{
    yaml_parser_t parser;
    yaml_event_t ev;
    struct ynode *stack[DEPTH_MAX + 1];
    int depth = 0, nodes = 0, documents = 0, rc = 0;
    struct ynode *top = NULL;
    *root = NULL;
    if (!yaml_parser_initialize(&parser))
        return err_set(ERR_NOMEM, "%s: out of memory", name);
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    for (;;) {
        if (!yaml_parser_parse(&parser, &ev)) {
            size_t eline = parser.problem_mark.line + 1;
            if (parser.error == YAML_READER_ERROR) { /* marks a byte offset only */
                eline = 1;
                for (size_t i = 0; i < parser.problem_offset && i < len; i++)
                    eline += text[i] == '\n';
            }
            rc = err_set(ERR_FORMAT, "%s:%zu: %s%s%s", name, eline,
                         parser.problem ? parser.problem : "malformed YAML",
                         parser.context ? " " : "", parser.context ? parser.context : "");
            goto done;
        }
        int line = (int)ev.start_mark.line + 1;
        yaml_event_type_t type = ev.type;
        struct ynode *y = NULL;
        switch (type) {
        case YAML_STREAM_END_EVENT:
            yaml_event_delete(&ev);
            goto done;
        case YAML_DOCUMENT_START_EVENT:
            if (++documents > 1) {
                rc = err_set(ERR_FORMAT, "%s:%d: a second document: a config is one document", name,
                             line);
                goto fail_event;
            }
            break;
        case YAML_ALIAS_EVENT:
            rc = err_set(ERR_FORMAT, "%s:%d: aliases (*%.*s) are not accepted", name, line,
                         QUOTE_MAX, (const char *)ev.data.alias.anchor);
            goto fail_event;
        case YAML_SCALAR_EVENT:
        case YAML_SEQUENCE_START_EVENT:
        case YAML_MAPPING_START_EVENT: {
            const yaml_char_t *anchor = type == YAML_SCALAR_EVENT ? ev.data.scalar.anchor
                                        : type == YAML_SEQUENCE_START_EVENT
                                            ? ev.data.sequence_start.anchor
                                            : ev.data.mapping_start.anchor;
            const yaml_char_t *tag = type == YAML_SCALAR_EVENT ? ev.data.scalar.tag
                                     : type == YAML_SEQUENCE_START_EVENT
                                         ? ev.data.sequence_start.tag
                                         : ev.data.mapping_start.tag;
            if (anchor) {
                rc = err_set(ERR_FORMAT, "%s:%d: anchors (&%.*s) are not accepted", name, line,
                             QUOTE_MAX, (const char *)anchor);
                goto fail_event;
            }
            if (tag) {
                rc = err_set(ERR_FORMAT, "%s:%d: tags (%.*s) are not accepted", name, line,
                             QUOTE_MAX, (const char *)tag);
                goto fail_event;
            }
            if (++nodes > NODES_MAX) {
                rc = err_set(ERR_FORMAT, "%s:%d: more than %d values", name, line, NODES_MAX);
                goto fail_event;
            }
            y = calloc(1, sizeof(*y));
            if (!y) {
                rc = err_set(ERR_NOMEM, "%s: out of memory", name);
                goto fail_event;
            }
            y->line = line;
            if (type == YAML_SCALAR_EVENT) {
                y->kind = Y_SCALAR;
                y->plain = ev.data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
                if (ev.data.scalar.length > SCALAR_MAX ||
                    memchr(ev.data.scalar.value, '\0', ev.data.scalar.length)) {
                    free(y);
                    rc = err_set(ERR_FORMAT,
                                 "%s:%d: a value longer than %d bytes or with a NUL byte", name,
                                 line, SCALAR_MAX);
                    goto fail_event;
                }
                y->value = strndup((const char *)ev.data.scalar.value, ev.data.scalar.length);
                if (!y->value) {
                    free(y);
                    rc = err_set(ERR_NOMEM, "%s: out of memory", name);
                    goto fail_event;
                }
            } else {
                y->kind = type == YAML_MAPPING_START_EVENT ? Y_MAP : Y_SEQ;
            }
            /* attach to the open collection, or make it the root */
            if (depth > 0) {
                if (ynode_push(stack[depth - 1], y) != 0) {
                    ynode_free(y);
                    rc = err_set(ERR_NOMEM, "%s: out of memory", name);
                    goto fail_event;
                }
            } else {
                top = y;
            }
            if (y->kind != Y_SCALAR) {
                if (depth == DEPTH_MAX) {
                    rc = err_set(ERR_FORMAT, "%s:%d: nested deeper than %d levels", name, line,
                                 DEPTH_MAX);
                    goto fail_event;
                }
                stack[depth++] = y;
            }
            break;
        }
        case YAML_SEQUENCE_END_EVENT:
        case YAML_MAPPING_END_EVENT:
            depth--;
            break;
        default:
            break;
        }
        yaml_event_delete(&ev);
        continue;
    fail_event:
        yaml_event_delete(&ev);
        goto done;
    }
done:
    yaml_parser_delete(&parser);
    if (rc < 0) {
        ynode_free(top);
        return rc;
    }
    *root = top;
    return 0;
}

/* ---- the walk ---- */

struct walk {
    const char *name; /* the file, for messages */
    struct serve_config *c;
};

static bool is_null(const struct ynode *y)
{
    return y->kind == Y_SCALAR && y->plain &&
           (!y->value[0] || strcmp(y->value, "~") == 0 || strcmp(y->value, "null") == 0 ||
            strcmp(y->value, "Null") == 0 || strcmp(y->value, "NULL") == 0);
}

static const char *kind_name(const struct ynode *y)
{
    return y->kind == Y_MAP ? "a mapping" : y->kind == Y_SEQ ? "a list" : "null";
}

/* "NAME:LINE: key 'KEY': expected EXPECTED, got 'VALUE'" */
static int bad(const struct walk *w, const struct ynode *y, const char *key, const char *expected)
{
    if (y->kind == Y_SCALAR && !is_null(y)) {
        size_t n = strlen(y->value);
        return err_set(ERR_FORMAT, "%s:%d: key '%s': expected %s, got '%.*s'%s", w->name, y->line,
                       key, expected, QUOTE_MAX, y->value, n > QUOTE_MAX ? "..." : "");
    }
    return err_set(ERR_FORMAT, "%s:%d: key '%s': expected %s, got %s", w->name, y->line, key,
                   expected, kind_name(y));
}

static int get_int(const struct walk *w, const struct ynode *y, const char *key, long long lo,
                   long long hi, int *out)
{
    char expected[80];
    if (hi == INT32_MAX)
        snprintf(expected, sizeof(expected), "an integer >= %lld", lo);
    else
        snprintf(expected, sizeof(expected), "an integer from %lld to %lld", lo, hi);
    if (y->kind != Y_SCALAR || !y->value[0])
        return bad(w, y, key, expected);
    const char *p = y->value;
    if (*p == '-' || *p == '+')
        p++;
    if (!isdigit((unsigned char)*p))
        return bad(w, y, key, expected);
    errno = 0;
    char *end;
    long long v = strtoll(y->value, &end, 10);
    if (*end || errno || v < lo || v > hi)
        return bad(w, y, key, expected);
    *out = (int)v;
    return 0;
}

/* A number from 0 to hi (hi INFINITY: any finite one >= 0). */
static int get_double(const struct walk *w, const struct ynode *y, const char *key, double hi,
                      double *out)
{
    char expected[64];
    if (isinf(hi))
        snprintf(expected, sizeof(expected), "a number >= 0");
    else
        snprintf(expected, sizeof(expected), "a number from 0 to %g", hi);
    if (y->kind != Y_SCALAR || !y->value[0] || isspace((unsigned char)y->value[0]))
        return bad(w, y, key, expected);
    char *end;
    double v = strtod(y->value, &end);
    if (*end || !isfinite(v) || !(v >= 0) || v > hi)
        return bad(w, y, key, expected);
    *out = v;
    return 0;
}

static int get_bool(const struct walk *w, const struct ynode *y, const char *key, bool *out)
{
    if (y->kind == Y_SCALAR && (strcmp(y->value, "true") == 0 || strcmp(y->value, "false") == 0)) {
        *out = y->value[0] == 't';
        return 0;
    }
    return bad(w, y, key, "true or false");
}

static int get_bytes(const struct walk *w, const struct ynode *y, const char *key, uint64_t *out)
{
    if (y->kind == Y_SCALAR && serve_parse_bytes(y->value, out) == 0)
        return 0;
    return bad(w, y, key, "a byte count such as 1048576, 512KiB or 2GiB");
}

/* A non-empty string into *out (the old one freed); null sets NULL when
 * nullable. */
static int get_string(const struct walk *w, const struct ynode *y, const char *key, bool nullable,
                      char **out)
{
    if (nullable && is_null(y)) {
        free(*out);
        *out = NULL;
        return 0;
    }
    if (y->kind != Y_SCALAR || is_null(y) || !y->value[0])
        return bad(w, y, key, "a non-empty string");
    char *s = strdup(y->value);
    if (!s)
        return err_set(ERR_NOMEM, "%s: out of memory", w->name);
    free(*out);
    *out = s;
    return 0;
}

/* Checks that the mapping y has only the keys in known (NULL-terminated)
 * and none twice. */
static int check_keys(const struct walk *w, const struct ynode *y, const char *prefix,
                      const char *const *known)
{
    for (int i = 0; i < y->n; i += 2) {
        const struct ynode *k = y->items[i];
        if (k->kind != Y_SCALAR || is_null(k))
            return err_set(ERR_FORMAT, "%s:%d: %s%skeys must be strings", w->name, k->line, prefix,
                           prefix[0] ? ": " : "");
        for (int j = 0; j < i; j += 2)
            if (strcmp(y->items[j]->value, k->value) == 0)
                return err_set(ERR_FORMAT, "%s:%d: key '%s%s%.*s': given twice (first on line %d)",
                               w->name, k->line, prefix, prefix[0] ? "." : "", QUOTE_MAX, k->value,
                               y->items[j]->line);
        bool found = false;
        for (const char *const *n = known; *n && !found; n++)
            found = strcmp(*n, k->value) == 0;
        if (!found)
            return err_set(
                ERR_FORMAT,
                "%s:%d: key '%s%s%.*s': unknown key (docs/serve.example.yaml shows every key)",
                w->name, k->line, prefix, prefix[0] ? "." : "", QUOTE_MAX, k->value);
    }
    return 0;
}

static int walk_devices(const struct walk *w, const struct ynode *y)
{
    static const char *const known[] = {"kind", "count", "gpus", "budget", NULL};
    struct serve_config *c = w->c;
    if (y->kind != Y_MAP)
        return bad(w, y, "devices", "a mapping such as {kind: cpu, count: 2, budget: 2GiB}");
    int rc = check_keys(w, y, "devices", known);
    bool count_set = false;
    for (int i = 0; i < y->n && rc == 0; i += 2) {
        const char *k = y->items[i]->value;
        const struct ynode *v = y->items[i + 1];
        if (is_null(v))
            continue;
        if (strcmp(k, "kind") == 0) {
            rc = get_string(w, v, "devices.kind", false, &c->device_kind);
        } else if (strcmp(k, "count") == 0) {
            rc = get_int(w, v, "devices.count", 1, STACK_MAX_DEVICES, &c->n_devices);
            count_set = true;
        } else if (strcmp(k, "gpus") == 0) {
            if (v->kind != Y_SEQ || v->n < 1 || v->n > STACK_MAX_DEVICES) {
                rc = bad(w, v, "devices.gpus",
                         "a list of 1 to 64 GPU ordinals such as [0, 0] (one per device)");
                break;
            }
            for (int j = 0; j < v->n && rc == 0; j++) {
                char item[32];
                snprintf(item, sizeof(item), "devices.gpus[%d]", j);
                rc = get_int(w, v->items[j], item, 0, SERVE_MAX_GPU, &c->gpus[j]);
            }
            c->n_gpus = v->n;
        } else {
            rc = get_bytes(w, v, "devices.budget", &c->device_budget);
        }
    }
    /* a list of GPUs is a count of devices unless the count is also given
     * (serve_config_check then wants them to agree) */
    if (rc == 0 && c->n_gpus > 0 && !count_set)
        c->n_devices = c->n_gpus;
    return rc;
}

static int walk_model(const struct walk *w, const struct ynode *y, int index)
{
    static const char *const known[] = {"name",    "path",    "tp",           "pp",
                                        "max_batch", "pinned", "devices", "compute",
                                        "chat_template", NULL};
    struct serve_config *c = w->c;
    char prefix[32], key[64];
    snprintf(prefix, sizeof(prefix), "models[%d]", index);
    if (y->kind != Y_MAP)
        return bad(w, y, prefix, "a mapping such as {name: opt-a, path: /models/a}");
    if (c->n_models >= SERVE_MAX_MODELS)
        return err_set(ERR_FORMAT, "%s:%d: key '%s': more than %d models", w->name, y->line, prefix,
                       SERVE_MAX_MODELS);
    int rc = check_keys(w, y, prefix, known);
    if (rc < 0)
        return rc;
    struct serve_model m = {.tp = 1, .pp = 1};
    for (int i = 0; i < y->n && rc == 0; i += 2) {
        const char *k = y->items[i]->value;
        const struct ynode *v = y->items[i + 1];
        snprintf(key, sizeof(key), "%s.%s", prefix, k);
        if (strcmp(k, "name") == 0) {
            rc = get_string(w, v, key, false, &m.name);
        } else if (strcmp(k, "path") == 0) {
            rc = get_string(w, v, key, false, &m.path);
        } else if (is_null(v)) {
            continue;
        } else if (strcmp(k, "tp") == 0) {
            rc = get_int(w, v, key, 1, STACK_MAX_DEVICES, &m.tp);
        } else if (strcmp(k, "pp") == 0) {
            rc = get_int(w, v, key, 1, STACK_MAX_DEVICES, &m.pp);
        } else if (strcmp(k, "max_batch") == 0) {
            rc = get_int(w, v, key, 0, SERVE_MAX_BATCH_MAX, &m.max_batch);
        } else if (strcmp(k, "pinned") == 0) {
            rc = get_bool(w, v, key, &m.pinned);
        } else if (strcmp(k, "compute") == 0) {
            rc = get_string(w, v, key, false, &m.compute);
        } else if (strcmp(k, "chat_template") == 0) {
            rc = get_string(w, v, key, false, &m.chat_template);
        } else { /* devices */
            if (v->kind != Y_SEQ || v->n < 1 || v->n > STACK_MAX_DEVICES) {
                rc = bad(w, v, key, "a list of 1 to 64 device indices such as [0, 1]");
                break;
            }
            for (int j = 0; j < v->n && rc == 0; j++) {
                char item[80];
                snprintf(item, sizeof(item), "%s[%d]", key, j);
                rc = get_int(w, v->items[j], item, 0, STACK_MAX_DEVICES - 1, &m.devices[j]);
            }
            m.n_devices = v->n;
        }
    }
    if (rc == 0 && (!m.name || !m.path))
        rc = err_set(ERR_FORMAT, "%s:%d: key '%s': expected a mapping with 'name' and 'path'",
                     w->name, y->line, prefix);
    if (rc == 0)
        rc = models_push(c, &m);
    if (rc < 0)
        model_free(&m);
    return rc;
}

static int walk_roots(const struct walk *w, const struct ynode *y)
{
    struct serve_config *c = w->c;
    if (y->kind != Y_SEQ || y->n > SERVE_MAX_ROOTS)
        return bad(w, y, "model_roots", "a list of at most 16 directories");
    char *roots[SERVE_MAX_ROOTS] = {0};
    int rc = 0;
    for (int i = 0; i < y->n && rc == 0; i++) {
        char key[32];
        snprintf(key, sizeof(key), "model_roots[%d]", i);
        rc = get_string(w, y->items[i], key, false, &roots[i]);
    }
    if (rc < 0) {
        for (int i = 0; i < y->n; i++)
            free(roots[i]);
        return rc;
    }
    for (int i = 0; i < c->n_model_roots; i++)
        free(c->model_roots[i]);
    memcpy(c->model_roots, roots, sizeof(roots));
    c->n_model_roots = y->n;
    return 0;
}

static int walk_root(const struct walk *w, const struct ynode *root)
{
    static const char *const known[] = {"host",
                                        "port",
                                        "api_key",
                                        "admin_key",
                                        "model_roots",
                                        "http_threads",
                                        "max_connections",
                                        "connection_timeout_s",
                                        "header_timeout_s",
                                        "body_timeout_s",
                                        "max_connections_per_client",
                                        "max_body_bytes",
                                        "grace_s",
                                        "request_timeout_s",
                                        "log_level",
                                        "devices",
                                        "host_budget",
                                        "policy",
                                        "max_batch",
                                        "queue_cap",
                                        "link_gbps",
                                        "compute",
                                        "models",
                                        NULL};
    static const char *const levels[] = {"error", "warn", "info", "debug"};
    struct serve_config *c = w->c;
    if (root->kind != Y_MAP) {
        if (is_null(root))
            return 0; /* an empty document */
        return err_set(ERR_FORMAT, "%s:%d: expected a mapping of keys (host, port, models, ...)",
                       w->name, root->line);
    }
    int rc = check_keys(w, root, "", known);
    for (int i = 0; i < root->n && rc == 0; i += 2) {
        const char *k = root->items[i]->value;
        const struct ynode *v = root->items[i + 1];
        if (strcmp(k, "api_key") == 0) {
            rc = get_string(w, v, k, true, &c->api_key);
        } else if (strcmp(k, "admin_key") == 0) {
            rc = get_string(w, v, k, true, &c->admin_key);
        } else if (strcmp(k, "policy") == 0) {
            rc = get_string(w, v, k, true, &c->policy);
        } else if (strcmp(k, "compute") == 0) {
            rc = get_string(w, v, k, true, &c->compute);
        } else if (is_null(v)) {
            continue; /* the default */
        } else if (strcmp(k, "host") == 0) {
            rc = get_string(w, v, k, false, &c->host);
        } else if (strcmp(k, "port") == 0) {
            rc = get_int(w, v, k, SERVE_PORT_MIN, SERVE_PORT_MAX, &c->port);
        } else if (strcmp(k, "model_roots") == 0) {
            rc = walk_roots(w, v);
        } else if (strcmp(k, "http_threads") == 0) {
            rc = get_int(w, v, k, SERVE_HTTP_THREADS_MIN, SERVE_HTTP_THREADS_MAX, &c->http_threads);
        } else if (strcmp(k, "max_connections") == 0) {
            rc = get_int(w, v, k, SERVE_MAX_CONNECTIONS_MIN, SERVE_MAX_CONNECTIONS_MAX,
                         &c->max_connections);
        } else if (strcmp(k, "max_connections_per_client") == 0) {
            rc = get_int(w, v, k, SERVE_PER_CLIENT_MIN, SERVE_PER_CLIENT_MAX,
                         &c->max_connections_per_client);
        } else if (strcmp(k, "connection_timeout_s") == 0) {
            rc = get_int(w, v, k, SERVE_TIMEOUT_MIN, SERVE_TIMEOUT_MAX, &c->connection_timeout_s);
        } else if (strcmp(k, "header_timeout_s") == 0) {
            rc = get_int(w, v, k, SERVE_TIMEOUT_MIN, SERVE_TIMEOUT_MAX, &c->header_timeout_s);
        } else if (strcmp(k, "body_timeout_s") == 0) {
            rc = get_int(w, v, k, SERVE_TIMEOUT_MIN, SERVE_TIMEOUT_MAX, &c->body_timeout_s);
        } else if (strcmp(k, "max_body_bytes") == 0) {
            rc = get_bytes(w, v, k, &c->max_body_bytes);
            if (rc == 0 && c->max_body_bytes == 0)
                rc = bad(w, v, k, "a byte count >= 1");
        } else if (strcmp(k, "grace_s") == 0) {
            rc = get_double(w, v, k, SERVE_SECONDS_MAX, &c->grace_s);
        } else if (strcmp(k, "request_timeout_s") == 0) {
            rc = get_double(w, v, k, SERVE_SECONDS_MAX, &c->request_timeout_s);
        } else if (strcmp(k, "log_level") == 0) {
            int l = 0;
            while (l < 4 && !(v->kind == Y_SCALAR && strcmp(v->value, levels[l]) == 0))
                l++;
            if (l < 4)
                c->log_level = (enum log_level)l;
            else
                rc = bad(w, v, k, "one of error, warn, info, debug");
        } else if (strcmp(k, "devices") == 0) {
            rc = walk_devices(w, v);
        } else if (strcmp(k, "host_budget") == 0) {
            rc = get_bytes(w, v, k, &c->host_budget);
        } else if (strcmp(k, "max_batch") == 0) {
            rc = get_int(w, v, k, SERVE_MAX_BATCH_MIN, SERVE_MAX_BATCH_MAX, &c->max_batch);
        } else if (strcmp(k, "queue_cap") == 0) {
            rc = get_int(w, v, k, SERVE_QUEUE_CAP_MIN, SERVE_QUEUE_CAP_MAX, &c->queue_cap);
        } else if (strcmp(k, "link_gbps") == 0) {
            rc = get_double(w, v, k, INFINITY, &c->link_gbps);
        } else { /* models */
            if (v->kind != Y_SEQ) {
                rc = bad(w, v, k, "a list of models ({name: ..., path: ...})");
                break;
            }
            for (int j = 0; j < v->n && rc == 0; j++)
                rc = walk_model(w, v->items[j], j);
        }
    }
    return rc;
}

int serve_config_parse_yaml(const char *text, size_t len, const char *name, struct serve_config *c)
{
    struct ynode *root;
    int rc = yaml_tree_read(text, len, name, &root);
    if (rc < 0)
        return rc;
    if (!root)
        return 0; /* an empty stream */
    struct walk w = {.name = name, .c = c};
    rc = walk_root(&w, root);
    ynode_free(root);
    return rc;
}

int serve_config_load(const char *path, struct serve_config *c)
{
    int fd;
    size_t size;
    int rc = fs_open_regular(path, &fd, &size);
    if (rc < 0)
        return rc;
    char *text = NULL;
    if (size > FILE_MAX) {
        rc = err_set(ERR_INVALID, "%s: %zu bytes, more than the %u a config file may have", path,
                     size, FILE_MAX);
        goto done;
    }
    size_t got;
    if ((rc = fs_read_all(fd, path, size, &text, &got)) < 0)
        goto done;
    if (got < size) {
        rc = err_set(ERR_IO, "%s: shorter than its size", path);
        goto done;
    }
    rc = serve_config_parse_yaml(text, size, path, c);
done:
    free(text);
    close(fd);
    return rc;
}

/* ---- what must hold before serving ---- */

/* Model names appear in URLs and logs. */
static bool model_name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > NAME_MAX_LEN || s[0] == '/' || strstr(s, ".."))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && !strchr("._:/-", s[i]))
            return false;
    return true;
}

/* NULL (the default), auto, f32 or bf16 */
static bool compute_ok(const char *s)
{
    enum kern_compute c;
    bool set;
    return kern_compute_choice(s, &set, &c) == 0;
}

int serve_config_check(const struct serve_config *c)
{
    if (!c->host || !c->host[0])
        return err_set(ERR_INVALID, "host: expected a host name or address");
    if (c->port < 0 || c->port > 65535)
        return err_set(ERR_INVALID, "port: expected 0 to 65535, got %d", c->port);
    if (c->api_key && !c->api_key[0])
        return err_set(ERR_INVALID, "api_key: expected a non-empty key when set");
    if (c->admin_key && !c->admin_key[0])
        return err_set(ERR_INVALID, "admin_key: expected a non-empty key when set");
    for (int i = 0; i < c->n_model_roots; i++)
        if (!c->model_roots[i] || c->model_roots[i][0] != '/')
            return err_set(ERR_INVALID, "model_roots[%d]: expected an absolute path, got '%.*s'", i,
                           QUOTE_MAX, c->model_roots[i] ? c->model_roots[i] : "");
    if (c->http_threads < SERVE_HTTP_THREADS_MIN || c->http_threads > SERVE_HTTP_THREADS_MAX)
        return err_set(ERR_INVALID, "http_threads: expected %d to %d, got %d",
                       SERVE_HTTP_THREADS_MIN, SERVE_HTTP_THREADS_MAX, c->http_threads);
    if (c->max_connections < 1 || c->connection_timeout_s < 1 || c->header_timeout_s < 1 ||
        c->body_timeout_s < 1 || c->max_connections_per_client < 0)
        return err_set(ERR_INVALID, "max_connections, connection_timeout_s, header_timeout_s and "
                                    "body_timeout_s: expected >= 1; "
                                    "max_connections_per_client: expected >= 0");
    if (c->max_body_bytes < 1)
        return err_set(ERR_INVALID, "max_body_bytes: expected >= 1");
    if (!(c->grace_s >= 0 && c->grace_s <= SERVE_SECONDS_MAX) || !(c->link_gbps >= 0) ||
        !(c->request_timeout_s >= 0 && c->request_timeout_s <= SERVE_SECONDS_MAX))
        return err_set(ERR_INVALID,
                       "grace_s and request_timeout_s: expected a number from 0 to %d; "
                       "link_gbps: expected a number >= 0",
                       SERVE_SECONDS_MAX);
    if (!c->device_kind ||
        (strcmp(c->device_kind, "cpu") != 0 && strcmp(c->device_kind, "cuda") != 0))
        return err_set(ERR_INVALID, "devices.kind: expected cpu or cuda, got '%.*s'", QUOTE_MAX,
                       c->device_kind ? c->device_kind : "");
    if (c->n_devices < 1 || c->n_devices > STACK_MAX_DEVICES)
        return err_set(ERR_INVALID, "devices.count: expected 1 to %d, got %d", STACK_MAX_DEVICES,
                       c->n_devices);
    if (c->n_gpus > 0 && strcmp(c->device_kind, "cuda") != 0)
        return err_set(ERR_INVALID, "devices.gpus: only for devices.kind cuda (kind is %s)",
                       c->device_kind);
    if (c->n_gpus > 0 && c->n_gpus != c->n_devices)
        return err_set(ERR_INVALID,
                       "devices.gpus: %d GPUs for devices.count %d (expected one per device)",
                       c->n_gpus, c->n_devices);
    for (int d = 0; d < c->n_gpus && d < STACK_MAX_DEVICES; d++)
        if (c->gpus[d] < 0 || c->gpus[d] > SERVE_MAX_GPU)
            return err_set(ERR_INVALID, "devices.gpus[%d]: expected 0 to %d, got %d", d,
                           SERVE_MAX_GPU, c->gpus[d]);
    if (c->policy && !sched_policy_find(c->policy))
        return err_set(ERR_INVALID, "policy: unknown scheduling policy '%.*s' (expected %s)",
                       QUOTE_MAX, c->policy, sched_policy_names());
    if (c->max_batch < 1 || c->queue_cap < 1)
        return err_set(ERR_INVALID, "max_batch and queue_cap: expected >= 1");
    if (!compute_ok(c->compute))
        return err_set(ERR_INVALID, "compute: expected f32, bf16 or auto, got '%.*s'", QUOTE_MAX,
                       c->compute);
    if (c->n_models < 1)
        return err_set(ERR_INVALID, "no models: give at least one (models: in the config file, "
                                    "or --model NAME=DIR)");
    if (c->n_models > SERVE_MAX_MODELS)
        return err_set(ERR_INVALID, "%d models: at most %d", c->n_models, SERVE_MAX_MODELS);
    for (int i = 0; i < c->n_models; i++) {
        const struct serve_model *m = &c->models[i];
        const char *name = m->name ? m->name : "";
        if (!model_name_ok(name))
            return err_set(ERR_INVALID,
                           "models[%d].name '%.*s': expected 1 to %d bytes of A-Z a-z 0-9 . _ "
                           ": / -, not starting with '/' and without '..'",
                           i, QUOTE_MAX, name, NAME_MAX_LEN);
        for (int j = 0; j < i; j++)
            if (strcmp(c->models[j].name, name) == 0)
                return err_set(ERR_INVALID, "models[%d].name '%s': also the name of models[%d]", i,
                               name, j);
        if (!m->path || !m->path[0])
            return err_set(ERR_INVALID, "model %s: expected a checkpoint directory (path)", name);
        if (m->tp < 1 || m->pp < 1 || m->tp > STACK_MAX_DEVICES || m->pp > STACK_MAX_DEVICES)
            return err_set(ERR_INVALID, "model %s: tp and pp: expected >= 1, got %d and %d", name,
                           m->tp, m->pp);
        if (m->tp * m->pp > c->n_devices)
            return err_set(ERR_INVALID,
                           "model %s: tp x pp = %d x %d shards, more than the %d "
                           "devices",
                           name, m->tp, m->pp, c->n_devices);
        if (!compute_ok(m->compute))
            return err_set(ERR_INVALID, "model %s: compute: expected f32, bf16 or auto, got '%.*s'",
                           name, QUOTE_MAX, m->compute);
        if (m->max_batch < 0)
            return err_set(ERR_INVALID,
                           "model %s: max_batch: expected >= 0 (0: the server's), "
                           "got %d",
                           name, m->max_batch);
        if (m->n_devices == 0)
            continue;
        if (m->n_devices != m->tp * m->pp)
            return err_set(ERR_INVALID, "model %s: devices: expected tp x pp = %d of them, got %d",
                           name, m->tp * m->pp, m->n_devices);
        for (int d = 0; d < m->n_devices; d++)
            if (m->devices[d] < 0 || m->devices[d] >= c->n_devices)
                return err_set(ERR_INVALID, "model %s: devices[%d]: expected 0 to %d, got %d", name,
                               d, c->n_devices - 1, m->devices[d]);
    }
    return 0;
}

int serve_config_per_client(const struct serve_config *c)
{
    if (c->max_connections_per_client > 0)
        return c->max_connections_per_client;
    return c->max_connections / 2 > 0 ? c->max_connections / 2 : 1;
}

void serve_config_stack(const struct serve_config *c, struct stack_config *sc,
                        struct stack_model_config *mc)
{
    memset(sc, 0, sizeof(*sc));
    sc->device_kind = c->device_kind;
    sc->n_devices = c->n_devices;
    for (int i = 0; i < c->n_devices && i < STACK_MAX_DEVICES; i++)
        sc->device_budget[i] = c->device_budget;
    sc->gpus_set = c->n_gpus > 0;
    for (int i = 0; i < c->n_gpus && i < STACK_MAX_DEVICES; i++)
        sc->gpus[i] = c->gpus[i];
    sc->link_gbps = c->link_gbps;
    /* copies that take no compute (a GPU's copy engines, an emulated
     * link): a batch may start while its model's layers arrive, as the
     * benchmarks run it */
    sc->engine.overlap_loads =
        c->link_gbps > 0 || (c->device_kind && strcmp(c->device_kind, "cuda") == 0);
    sc->host_budget = c->host_budget;
    /* a host tier sized for every model starts with all of them in it, so
     * no request waits for the disk; a budget set smaller fills on demand */
    sc->prefetch_host = c->host_budget == 0;
    sc->engine.policy = c->policy;
    sc->engine.max_batch = c->max_batch;
    sc->engine.queue_cap = c->queue_cap;
    sc->compute = c->compute;
    for (int i = 0; i < c->n_models; i++) {
        const struct serve_model *m = &c->models[i];
        mc[i] = (struct stack_model_config){
            .name = m->name,
            .path = m->path,
            .tp = m->tp,
            .pp = m->pp,
            .devices = m->n_devices ? m->devices : NULL,
            .pinned = m->pinned,
            .max_batch = m->max_batch,
            .compute = m->compute,
        };
    }
    sc->models = mc;
    sc->n_models = c->n_models;
}
