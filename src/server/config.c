/* The server's configuration file (config.h): YAML read into a small tree
 * (core/yaml_tree.h), then the tree walked against the key table
 * (config_keys.h), the schema docs/serve.example.yaml shows.
 *
 * The file is one document whose root is a mapping (an empty file or an
 * empty document sets nothing), read by core/yaml_tree.h (which refuses
 * anchors, aliases, tags, a second document and oversized trees). Refused
 * here, each as ERR_FORMAT "NAME:LINE: key 'PATH': ..." with LINE 1-based:
 *   - a key twice in one mapping, a key that is not a plain string, a key
 *     the table does not have;
 *   - a value of the wrong kind or out of the key's range.
 * Scalars: null is "", "~" or "null" unquoted; booleans true/false;
 * integers decimal; byte counts as bytes_parse (core/bytes.h). A null
 * leaves a key's default, except where the table says it unsets the key or
 * the key must have a value (named in the message).
 *
 * The walk is one loop over a mapping's keys (walk_map) for the root,
 * devices and each model; what is special is only what is structural: a
 * section recurses, the models list makes a struct serve_model per item,
 * lists of numbers and strings. Which check is where: the walk checks each
 * value's type and range as it reads it; serve_config_check checks them
 * again from the table (flags and code set values too), then what depends
 * on several keys, and calls stack_config_check for the stack's settings.
 */
#include "server/config.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/fs.h"
#include "core/yaml_tree.h"
#include "server/config_keys.h"

#define FILE_MAX (1u << 20) /* bytes of a config file */
#define QUOTE_MAX 64        /* bytes of a value quoted in a message */
#define KEY_MAX 96          /* bytes of a key's name in messages ("models[255].chat_template") */

/* ---- defaults, add, free ---- */

/* The seconds of one unit of a duration at *p ("ms", "s", "m", "h"), *p
 * moved past it; 0 when there is none. */
static double duration_unit(const char **p)
{
    static const struct {
        const char *name;
        double seconds;
    } units[] = {{"ms", 1e-3}, {"s", 1}, {"m", 60}, {"h", 3600}};
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        size_t n = strlen(units[i].name);
        if (strncmp(*p, units[i].name, n) == 0) {
            *p += n;
            return units[i].seconds;
        }
    }
    return 0;
}

int serve_keep_alive_parse(const char *text, double *out)
{
    *out = NAN;
    if (!text)
        return 0;
    if (strcmp(text, "-1") == 0) {
        *out = INFINITY;
        return 0;
    }
    /* a plain number of seconds, or numbers each with a unit ("1h30m") */
    double total = 0;
    const char *p = text;
    bool units = false;
    while (*p) {
        if (!isdigit((unsigned char)*p))
            goto bad;
        char *end;
        double v = strtod(p, &end);
        if (end == p || !isfinite(v) || (end[-1] == '.'))
            goto bad;
        for (const char *q = p; q < end; q++) /* digits and one point only: no exponent */
            if (!isdigit((unsigned char)*q) && *q != '.')
                goto bad;
        p = end;
        double unit = duration_unit(&p);
        if (unit == 0 && (*p || units))
            goto bad;
        units |= unit != 0;
        total += v * (unit ? unit : 1);
    }
    if (p == text || !isfinite(total))
        goto bad;
    *out = total;
    return 0;
bad:
    return err_set(ERR_INVALID,
                   "expected a duration such as 30s, 5m, 1h or 1h30m, seconds >= 0, or -1 "
                   "(never), got '%.*s'",
                   64, text);
}

void serve_config_init(struct serve_config *c)
{
    memset(c, 0, sizeof(*c));
    serve_keys_defaults("", c);
    serve_keys_defaults("devices", c);
}

void serve_model_init(struct serve_model *m)
{
    memset(m, 0, sizeof(*m));
    serve_keys_defaults("models[]", m);
}

void serve_model_free(struct serve_model *m)
{
    for (int i = 0; i < m->n_aliases; i++)
        free(m->aliases[i]);
    free(m->name);
    free(m->path);
    free(m->compute);
    free(m->chat_template);
    memset(m, 0, sizeof(*m));
}

void serve_adapter_init(struct serve_adapter *a)
{
    memset(a, 0, sizeof(*a));
    serve_keys_defaults("adapters[]", a);
}

void serve_adapter_free(struct serve_adapter *a)
{
    free(a->name);
    free(a->base);
    free(a->path);
    memset(a, 0, sizeof(*a));
}

/* Appends a (its strings taken) to c's adapters; on failure a is left to
 * the caller. */
static int adapters_push(struct serve_config *c, const struct serve_adapter *a)
{
    if (c->n_adapters == c->adapters_cap) {
        int cap = c->adapters_cap ? c->adapters_cap * 2 : 8;
        struct serve_adapter *g = realloc(c->adapters, (size_t)cap * sizeof(*g));
        if (!g)
            return err_set(ERR_NOMEM, "out of memory for the adapters' list");
        c->adapters = g;
        c->adapters_cap = cap;
    }
    c->adapters[c->n_adapters++] = *a;
    return 0;
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
        serve_model_free(&c->models[i]);
    free(c->models);
    for (int i = 0; i < c->n_adapters; i++)
        serve_adapter_free(&c->adapters[i]);
    free(c->adapters);
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
    struct serve_model m;
    serve_model_init(&m);
    m.name = strndup(arg, (size_t)(eq - arg));
    m.path = strdup(eq + 1);
    if (!m.name || !m.path) {
        serve_model_free(&m);
        return err_set(ERR_NOMEM, "--model: out of memory");
    }
    int rc = models_push(c, &m);
    if (rc < 0)
        serve_model_free(&m);
    return rc;
}

int serve_config_add_alias(struct serve_config *c, const char *arg)
{
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg || !eq[1])
        return err_set(ERR_INVALID, "--alias '%.*s': expected ALIAS=NAME (NAME a model's name)",
                       QUOTE_MAX, arg);
    struct serve_model *m = NULL;
    for (int i = 0; i < c->n_models && !m; i++)
        if (strcmp(c->models[i].name, eq + 1) == 0)
            m = &c->models[i];
    if (!m)
        return err_set(ERR_INVALID, "--alias '%.*s': no model is named '%.*s'", QUOTE_MAX, arg,
                       QUOTE_MAX, eq + 1);
    if (m->n_aliases == SERVE_MAX_ALIASES)
        return err_set(ERR_INVALID, "--alias '%.*s': model %s has %d aliases already (at most)",
                       QUOTE_MAX, arg, m->name, SERVE_MAX_ALIASES);
    if (!(m->aliases[m->n_aliases] = strndup(arg, (size_t)(eq - arg))))
        return err_set(ERR_NOMEM, "--alias: out of memory");
    m->n_aliases++;
    return 0;
}

int serve_config_add_adapter(struct serve_config *c, const char *arg)
{
    const char *eq = strchr(arg, '='), *rest = eq ? eq + 1 : NULL, *colon = NULL;
    if (!eq || eq == arg || !(colon = strchr(rest, ':')) || colon == rest || !colon[1])
        return err_set(ERR_INVALID,
                       "--adapter '%.*s': expected NAME=BASE:DIR (BASE a model's name, DIR the "
                       "adapter's directory)",
                       QUOTE_MAX, arg);
    if (c->n_models + c->n_adapters >= SERVE_MAX_MODELS)
        return err_set(ERR_INVALID, "--adapter '%.*s': more than %d models and adapters", QUOTE_MAX,
                       arg, SERVE_MAX_MODELS);
    /* the longest model name that a colon follows: names may hold ':' */
    size_t base_len = (size_t)(colon - rest);
    for (int i = 0; i < c->n_models; i++) {
        size_t n = strlen(c->models[i].name);
        if (n > base_len && strncmp(rest, c->models[i].name, n) == 0 && rest[n] == ':' &&
            rest[n + 1])
            base_len = n;
    }
    struct serve_adapter a;
    serve_adapter_init(&a);
    a.name = strndup(arg, (size_t)(eq - arg));
    a.base = strndup(rest, base_len);
    a.path = strdup(rest + base_len + 1);
    int rc = a.name && a.base && a.path ? adapters_push(c, &a)
                                        : err_set(ERR_NOMEM, "--adapter: out of memory");
    if (rc < 0)
        serve_adapter_free(&a);
    return rc;
}

/* ---- the walk ---- */

struct walk {
    const char *name; /* the file, for messages */
    struct serve_config *c;
};

/* "NAME:LINE: key 'KEY': expected EXPECTED, got 'VALUE'" */
static int bad(const struct walk *w, const struct ynode *y, const char *key, const char *expected)
{
    if (y->kind == Y_SCALAR && !ynode_is_null(y)) {
        size_t n = strlen(y->value);
        return err_set(ERR_FORMAT, "%s:%d: key '%s': expected %s, got '%.*s'%s", w->name, y->line,
                       key, expected, QUOTE_MAX, y->value, n > QUOTE_MAX ? "..." : "");
    }
    return err_set(ERR_FORMAT, "%s:%d: key '%s': expected %s, got %s", w->name, y->line, key,
                   expected, ynode_kind_name(y));
}

static int get_int(const struct walk *w, const struct ynode *y, const char *key, double lo,
                   double hi, int *out)
{
    char expected[80];
    snprintf(expected, sizeof(expected), "an integer from %.0f to %.0f", lo, hi);
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

/* One scalar of k from y into base. */
static int walk_scalar(const struct walk *w, const struct serve_key *k, const struct ynode *y,
                       const char *key, void *base)
{
    char expected[192];
    serve_key_expected(k, expected, sizeof(expected));
    void *f = serve_key_field(k, base);
    if (y->kind != Y_SCALAR)
        return bad(w, y, key, expected);
    switch (k->type) {
    case SK_INT:
        return get_int(w, y, key, k->lo, k->hi, f);
    case SK_DOUBLE: {
        char *end;
        double v =
            y->value[0] && !isspace((unsigned char)y->value[0]) ? strtod(y->value, &end) : NAN;
        if (isnan(v) || *end || !isfinite(v) || !(v >= k->lo) || v > k->hi)
            return bad(w, y, key, expected);
        *(double *)f = v;
        return 0;
    }
    case SK_BOOL:
        if (strcmp(y->value, "true") != 0 && strcmp(y->value, "false") != 0)
            return bad(w, y, key, expected);
        *(bool *)f = y->value[0] == 't';
        return 0;
    default: { /* bytes, strings, choices: as a flag's text */
        char what[KEY_MAX + 64];
        snprintf(what, sizeof(what), "%s:%d: key '%s'", w->name, y->line, key);
        int rc = serve_key_set_text(k, base, y->value, what);
        return rc == ERR_INVALID ? ERR_FORMAT : rc;
    }
    }
}

/* A list of numbers or strings (SK_INTS, SK_STRINGS) into base, replacing
 * what it held. */
static int walk_list(const struct walk *w, const struct serve_key *k, const struct ynode *y,
                     const char *key, void *base)
{
    int min = k->type == SK_INTS ? 1 : 0;
    if (y->kind != Y_SEQ || y->n < min || y->n > k->max_items)
        return bad(w, y, key, k->expected);
    int *count = (int *)((char *)base + k->count_offset), rc = 0;
    char item[KEY_MAX + 16];
    if (k->type == SK_INTS) {
        int *items = serve_key_field(k, base);
        for (int j = 0; j < y->n && rc == 0; j++) {
            snprintf(item, sizeof(item), "%s[%d]", key, j);
            rc = get_int(w, y->items[j], item, k->lo, k->hi, &items[j]);
        }
        *count = y->n;
        return rc;
    }
    /* strings: all read before the old list goes, so an error leaves it */
    char **items = serve_key_field(k, base), *got[SERVE_MAX_ROOTS] = {0};
    const struct serve_key text = {.type = SK_STRING, .offset = 0}; /* one string at &got[j] */
    _Static_assert(SERVE_MAX_ALIASES <= SERVE_MAX_ROOTS, "a list of strings fits got[]");
    assert(k->max_items <= SERVE_MAX_ROOTS);
    for (int j = 0; j < y->n && rc == 0; j++) {
        snprintf(item, sizeof(item), "%s[%d]", key, j);
        if (y->items[j]->kind != Y_SCALAR || ynode_is_null(y->items[j]))
            rc = bad(w, y->items[j], item, "a non-empty string");
        else
            rc = walk_scalar(w, &text, y->items[j], item, &got[j]);
    }
    char **drop = rc < 0 ? got : items;
    for (int j = 0, n = rc < 0 ? y->n : *count; j < n; j++)
        free(drop[j]);
    if (rc < 0)
        return rc;
    memcpy(items, got, (size_t)y->n * sizeof(*got));
    *count = y->n;
    return 0;
}

static int walk_model(const struct walk *w, const struct ynode *y, int index);
static int walk_adapter(const struct walk *w, const struct ynode *y, int index);
static int walk_map(const struct walk *w, const struct ynode *y, const char *scope,
                    const char *prefix, void *base);

/* Whether mapping y gives leaf a value. */
static bool map_sets(const struct ynode *y, const char *leaf)
{
    for (int i = 0; i < y->n; i += 2)
        if (strcmp(y->items[i]->value, leaf) == 0)
            return !ynode_is_null(y->items[i + 1]);
    return false;
}

/* The value v of key k (a non-null one): a section, the models, a list or
 * a scalar. */
static int walk_value(const struct walk *w, const struct serve_key *k, const struct ynode *v,
                      const char *key, void *base)
{
    struct serve_config *c = w->c;
    int rc = 0;
    switch (k->type) {
    case SK_SECTION:
        if (v->kind != Y_MAP)
            return bad(w, v, key, k->expected);
        rc = walk_map(w, v, k->path, key, base);
        /* a list of GPUs is a count of devices unless the count is also
         * given (serve_config_check then wants them to agree) */
        if (rc == 0 && strcmp(k->path, "devices") == 0 && c->n_gpus > 0 && !map_sets(v, "count"))
            c->n_devices = c->n_gpus;
        return rc;
    case SK_MODELS:
    case SK_ADAPTERS:
        if (v->kind != Y_SEQ)
            return bad(w, v, key, k->expected);
        for (int j = 0; j < v->n && rc == 0; j++)
            rc = k->type == SK_MODELS ? walk_model(w, v->items[j], j)
                                      : walk_adapter(w, v->items[j], j);
        return rc;
    case SK_INTS:
    case SK_STRINGS:
        return walk_list(w, k, v, key, base);
    default:
        return walk_scalar(w, k, v, key, base);
    }
}

/* The table's key LEAF in scope, NULL when it has none. */
static const struct serve_key *key_in(const char *scope, const char *leaf)
{
    for (int i = 0; i < serve_n_keys; i++) {
        const char *l = serve_key_leaf(&serve_keys[i], scope);
        if (l && strcmp(l, leaf) == 0)
            return &serve_keys[i];
    }
    return NULL;
}

/* Checks that the mapping y has only keys the table has in scope, and
 * none twice; prefix is how messages name the mapping ("" for the root). */
static int check_keys(const struct walk *w, const struct ynode *y, const char *scope,
                      const char *prefix)
{
    for (int i = 0; i < y->n; i += 2) {
        const struct ynode *k = y->items[i];
        if (k->kind != Y_SCALAR || ynode_is_null(k))
            return err_set(ERR_FORMAT, "%s:%d: %s%skeys must be strings", w->name, k->line, prefix,
                           prefix[0] ? ": " : "");
        for (int j = 0; j < i; j += 2)
            if (strcmp(y->items[j]->value, k->value) == 0)
                return err_set(ERR_FORMAT, "%s:%d: key '%s%s%.*s': given twice (first on line %d)",
                               w->name, k->line, prefix, prefix[0] ? "." : "", QUOTE_MAX, k->value,
                               y->items[j]->line);
        if (!key_in(scope, k->value))
            return err_set(
                ERR_FORMAT,
                "%s:%d: key '%s%s%.*s': unknown key (docs/serve.example.yaml shows every key)",
                w->name, k->line, prefix, prefix[0] ? "." : "", QUOTE_MAX, k->value);
    }
    return 0;
}

/* What null does to a key whose null clears it: unset. */
static void key_clear(const struct serve_key *k, void *base)
{
    if (k->type == SK_DURATION) {
        *(double *)serve_key_field(k, base) = NAN;
        return;
    }
    char **s = serve_key_field(k, base);
    free(*s);
    *s = NULL;
}

/* The mapping y, whose keys are the table's in scope ("", "devices",
 * "models[]"), into base (the config, or a model for "models[]"). */
static int walk_map(const struct walk *w, const struct ynode *y, const char *scope,
                    const char *prefix, void *base)
{
    int rc = check_keys(w, y, scope, prefix);
    for (int i = 0; i < y->n && rc == 0; i += 2) {
        const struct serve_key *k = key_in(scope, y->items[i]->value);
        const struct ynode *v = y->items[i + 1];
        char key[KEY_MAX], expected[192];
        snprintf(key, sizeof(key), "%s%s%s", prefix, prefix[0] ? "." : "", y->items[i]->value);
        if (!ynode_is_null(v)) {
            rc = walk_value(w, k, v, key, base);
        } else if (k->null == SK_NULL_REFUSED) {
            serve_key_expected(k, expected, sizeof(expected));
            rc = bad(w, v, key, expected);
        } else if (k->null == SK_NULL_CLEARS) {
            key_clear(k, base);
        } /* else the value stays */
    }
    return rc;
}

/* "'name' and 'path'": the keys every item of the list scope ("models[]",
 * "adapters[]") must give. */
static void required_text(const char *scope, char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < serve_n_keys && len < cap; i++) {
        const char *leaf = serve_key_leaf(&serve_keys[i], scope);
        if (leaf && serve_keys[i].null == SK_NULL_REFUSED)
            len += (size_t)snprintf(buf + len, cap - len, "%s'%s'", len ? " and " : "", leaf);
    }
}

static int walk_model(const struct walk *w, const struct ynode *y, int index)
{
    struct serve_config *c = w->c;
    char prefix[32], required[64];
    snprintf(prefix, sizeof(prefix), "models[%d]", index);
    if (y->kind != Y_MAP)
        return bad(w, y, prefix, "a mapping such as {name: opt-a, path: /models/a}");
    if (c->n_models >= SERVE_MAX_MODELS)
        return err_set(ERR_FORMAT, "%s:%d: key '%s': more than %d models", w->name, y->line, prefix,
                       SERVE_MAX_MODELS);
    struct serve_model m;
    serve_model_init(&m);
    int rc = walk_map(w, y, "models[]", prefix, &m);
    if (rc == 0 && (!m.name || !m.path)) {
        required_text("models[]", required, sizeof(required));
        rc = err_set(ERR_FORMAT, "%s:%d: key '%s': expected a mapping with %s", w->name, y->line,
                     prefix, required);
    }
    if (rc == 0)
        rc = models_push(c, &m);
    if (rc < 0)
        serve_model_free(&m);
    return rc;
}

static int walk_adapter(const struct walk *w, const struct ynode *y, int index)
{
    struct serve_config *c = w->c;
    char prefix[32], required[64];
    snprintf(prefix, sizeof(prefix), "adapters[%d]", index);
    if (y->kind != Y_MAP)
        return bad(w, y, prefix, "a mapping such as {name: sql, base: llama, path: /adapters/sql}");
    if (c->n_models + c->n_adapters >= SERVE_MAX_MODELS)
        return err_set(ERR_FORMAT, "%s:%d: key '%s': more than %d models and adapters", w->name,
                       y->line, prefix, SERVE_MAX_MODELS);
    struct serve_adapter a;
    serve_adapter_init(&a);
    int rc = walk_map(w, y, "adapters[]", prefix, &a);
    if (rc == 0 && (!a.name || !a.base || !a.path)) {
        required_text("adapters[]", required, sizeof(required));
        rc = err_set(ERR_FORMAT, "%s:%d: key '%s': expected a mapping with %s", w->name, y->line,
                     prefix, required);
    }
    if (rc == 0)
        rc = adapters_push(c, &a);
    if (rc < 0)
        serve_adapter_free(&a);
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
    if (root->kind == Y_MAP)
        rc = walk_map(&w, root, "", "", c);
    else if (!ynode_is_null(root)) /* null: an empty document */
        rc = err_set(ERR_FORMAT, "%s:%d: expected a mapping of keys (host, port, models, ...)",
                     name, root->line);
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
    sc->procs_set = c->n_ranks > 0;
    for (int i = 0; i < c->n_ranks && i < STACK_MAX_DEVICES; i++)
        sc->procs[i] = c->ranks[i];
    sc->n_procs = c->n_procs;
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
    for (int i = 0; i < c->n_models; i++)
        serve_model_stack(c, &c->models[i], &mc[i]);
    sc->models = mc;
    sc->n_models = c->n_models;
}

void serve_model_stack(const struct serve_config *c, const struct serve_model *m,
                       struct stack_model_config *mc)
{
    *mc = (struct stack_model_config){
        .name = m->name,
        .path = m->path,
        .tp = m->tp,
        .pp = m->pp,
        .expert_parallel = m->expert_parallel,
        .expert_residency = m->expert_residency,
        .devices = m->n_devices ? m->devices : NULL,
        .pinned = m->pinned,
        .max_batch = m->max_batch,
        .compute = m->compute,
        .priority = m->priority,
        .max_queue_wait = m->max_queue_wait,
        .min_resident = m->min_resident,
    };
    /* the model's, else the server's; unset both: the policy's own */
    double ka = !isnan(m->keep_alive) ? m->keep_alive : c->keep_alive;
    if (!isnan(ka))
        mc->keep_alive_set = true, mc->keep_alive = ka;
}

void serve_config_stack_adapters(const struct serve_config *c, struct stack_config *sc,
                                 struct stack_adapter_config *ac)
{
    for (int i = 0; i < c->n_adapters; i++)
        serve_adapter_stack(c, &c->adapters[i], &ac[i]);
    sc->adapters = ac;
    sc->n_adapters = c->n_adapters;
}

void serve_adapter_stack(const struct serve_config *c, const struct serve_adapter *a,
                         struct stack_adapter_config *ac)
{
    *ac = (struct stack_adapter_config){
        .name = a->name,
        .base = a->base,
        .path = a->path,
        .pinned = a->pinned,
        .priority = a->priority,
    };
    double ka = !isnan(a->keep_alive) ? a->keep_alive : c->keep_alive;
    if (!isnan(ka))
        ac->keep_alive_set = true, ac->keep_alive = ka;
}

/* ---- a model from JSON ---- */

/* "name, path, tp, ...": the keys of an item of scope ("models[]",
 * "adapters[]"), for a message. */
static void item_keys_text(const char *scope, char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < serve_n_keys && len < cap; i++) {
        const char *leaf = serve_key_leaf(&serve_keys[i], scope);
        if (leaf)
            len += (size_t)snprintf(buf + len, cap - len, "%s%s", len ? ", " : "", leaf);
    }
}

/* The keys of scope from the JSON object obj into base (a struct
 * serve_model or serve_adapter); what serve_model_from_json says. */
static int item_from_json(const json_t *obj, const char *scope, const char *what, void *base,
                          void *zero, const char **key)
{
    const char *leaf;
    json_t *v;
    *key = "";
    if (!json_is_object(obj))
        return err_set(ERR_INVALID, "expected a JSON object of %s keys", what);
    json_object_foreach((json_t *)obj, leaf, v)
    {
        const struct serve_key *k = key_in(scope, leaf);
        *key = leaf;
        if (!k) {
            char keys[512];
            item_keys_text(scope, keys, sizeof(keys));
            return err_set(ERR_INVALID, "'%.*s': unknown key (expected one of %s)", QUOTE_MAX, leaf,
                           keys);
        }
        *key = serve_key_leaf(k, scope); /* the table's, valid always */
        int rc = 0;
        if (!json_is_null(v))
            rc = serve_key_set_json(k, base, v, *key);
        else if (k->null == SK_NULL_REFUSED)
            rc = serve_key_check(k, zero, *key); /* "got none" */
        else if (k->null == SK_NULL_CLEARS)
            key_clear(k, base);
        if (rc < 0)
            return rc;
    }
    return 0;
}

int serve_model_from_json(const json_t *obj, struct serve_model *m, const char **key)
{
    return item_from_json(obj, "models[]", "a model's", m, &(struct serve_model){0}, key);
}

int serve_adapter_from_json(const json_t *obj, struct serve_adapter *a, const char **key)
{
    return item_from_json(obj, "adapters[]", "an adapter's", a, &(struct serve_adapter){0}, key);
}
