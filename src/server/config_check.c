/* serve_config_check (config.h): what must hold before serving. Three
 * layers, each written once: every key's type and range from the table
 * (config_keys.h: what a file, a flag or code may have set), what only the
 * server needs (roots, the GPU and process lists against the devices,
 * model names safe in URLs), then the stack's own check
 * (stack_config_check: devices on the job's processes, policy, precisions,
 * unique names, placements) on the stack config the server would open. */
#include "server/config.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "server/config_keys.h"

#define QUOTE_MAX 64    /* bytes of a value quoted in a message */
#define KEY_MAX 96      /* bytes of a key's name in messages ("models[255].chat_template") */

bool serve_model_name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > SERVE_MODEL_NAME_MAX || s[0] == '/' || strstr(s, ".."))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && !strchr("._:/-", s[i]))
            return false;
    return true;
}

/* Every value of the table's keys in c but the models' (serve_model_check
 * has those): the flags' and the code's values as well as a file's. */
static int check_keys_values(const struct serve_config *c)
{
    int rc = 0;
    for (int i = 0; i < serve_n_keys && rc == 0; i++)
        if (strncmp(serve_keys[i].path, "models[].", 9) != 0 &&
            strncmp(serve_keys[i].path, "adapters[].", 11) != 0)
            rc = serve_key_check(&serve_keys[i], c, serve_keys[i].path);
    return rc;
}

int serve_model_check(const struct serve_model *m, const char *name, const char **key)
{
    char what[KEY_MAX];
    int rc = 0;
    for (int i = 0; i < serve_n_keys && rc == 0; i++) {
        const struct serve_key *k = &serve_keys[i];
        const char *leaf = serve_key_leaf(k, "models[]");
        if (!leaf)
            continue;
        *key = leaf;
        snprintf(what, sizeof(what), "%s%s%s", name, name[0] ? "." : "", leaf);
        rc = serve_key_check(k, m, what);
    }
    if (rc < 0)
        return rc;
    *key = "name";
    if (!serve_model_name_ok(m->name))
        return err_set(ERR_INVALID,
                       "%s%sname '%.*s': expected 1 to %d bytes of A-Z a-z 0-9 . _ : / -, not "
                       "starting with '/' and without '..'",
                       name, name[0] ? "." : "", QUOTE_MAX, m->name, SERVE_MODEL_NAME_MAX);
    *key = "aliases";
    for (int i = 0; i < m->n_aliases; i++) {
        if (!serve_model_name_ok(m->aliases[i]))
            return err_set(ERR_INVALID,
                           "%s%saliases[%d] '%.*s': expected 1 to %d bytes of A-Z a-z 0-9 . _ : / "
                           "-, not starting with '/' and without '..'",
                           name, name[0] ? "." : "", i, QUOTE_MAX, m->aliases[i],
                           SERVE_MODEL_NAME_MAX);
        if (strcmp(m->aliases[i], m->name) == 0)
            return err_set(ERR_INVALID, "%s%saliases[%d] '%s': the model's own name", name,
                           name[0] ? "." : "", i, m->aliases[i]);
        for (int j = 0; j < i; j++)
            if (strcmp(m->aliases[i], m->aliases[j]) == 0)
                return err_set(ERR_INVALID, "%s%saliases[%d] '%s': also aliases[%d]", name,
                               name[0] ? "." : "", i, m->aliases[i], j);
    }
    *key = "devices";
    if (m->n_devices != 0 && m->n_devices != m->tp * m->pp)
        return err_set(ERR_INVALID, "model %s: devices: expected tp x pp = %d of them, got %d",
                       m->name, m->tp * m->pp, m->n_devices);
    return 0;
}

int serve_adapter_check(const struct serve_adapter *a, const char *name, const char **key)
{
    char what[KEY_MAX];
    int rc = 0;
    for (int i = 0; i < serve_n_keys && rc == 0; i++) {
        const struct serve_key *k = &serve_keys[i];
        const char *leaf = serve_key_leaf(k, "adapters[]");
        if (!leaf)
            continue;
        *key = leaf;
        snprintf(what, sizeof(what), "%s%s%s", name, name[0] ? "." : "", leaf);
        rc = serve_key_check(k, a, what);
    }
    if (rc < 0)
        return rc;
    *key = "name";
    if (!serve_model_name_ok(a->name))
        return err_set(ERR_INVALID,
                       "%s%sname '%.*s': expected 1 to %d bytes of A-Z a-z 0-9 . _ : / -, not "
                       "starting with '/' and without '..'",
                       name, name[0] ? "." : "", QUOTE_MAX, a->name, SERVE_MODEL_NAME_MAX);
    return 0;
}

/* The model of c that answers to name (its name or an alias), or NULL;
 * *alias says which. */
static const struct serve_model *model_named(const struct serve_config *c, const char *name,
                                             bool *alias)
{
    for (int i = 0; i < c->n_models; i++) {
        *alias = false;
        if (strcmp(c->models[i].name, name) == 0)
            return &c->models[i];
        *alias = true;
        for (int a = 0; a < c->models[i].n_aliases; a++)
            if (strcmp(c->models[i].aliases[a], name) == 0)
                return &c->models[i];
    }
    return NULL;
}

/* Each adapter on its own, then against the models: a base that is a
 * model's name (not an alias, not an adapter), a name no model, alias or
 * other adapter has. */
static int check_adapters(const struct serve_config *c)
{
    if (c->n_models + c->n_adapters > SERVE_MAX_MODELS)
        return err_set(ERR_INVALID, "%d models and %d adapters: at most %d together", c->n_models,
                       c->n_adapters, SERVE_MAX_MODELS);
    for (int i = 0; i < c->n_adapters; i++) {
        const struct serve_adapter *a = &c->adapters[i];
        char name[32];
        const char *key;
        bool alias;
        snprintf(name, sizeof(name), "adapters[%d]", i);
        int rc = serve_adapter_check(a, name, &key);
        if (rc < 0)
            return rc;
        const struct serve_model *m = model_named(c, a->name, &alias);
        if (m)
            return err_set(ERR_INVALID, "%s.name '%s': also %s of model %s", name, a->name,
                           alias ? "an alias" : "the name", m->name);
        for (int j = 0; j < i; j++)
            if (strcmp(c->adapters[j].name, a->name) == 0)
                return err_set(ERR_INVALID, "%s.name '%s': also the name of adapters[%d]", name,
                               a->name, j);
        m = model_named(c, a->base, &alias);
        if (m && alias)
            return err_set(ERR_INVALID,
                           "%s.base '%s': an alias of model %s (expected the model's "
                           "name)",
                           name, a->base, m->name);
        for (int j = 0; !m && j < c->n_adapters; j++)
            if (strcmp(c->adapters[j].name, a->base) == 0)
                return err_set(ERR_INVALID,
                               "%s.base '%s': an adapter (adapters[%d]); expected a model's name "
                               "(an adapter adapts a model, not another adapter)",
                               name, a->base, j);
        if (!m)
            return err_set(ERR_INVALID,
                           "%s.base '%.*s': no model of that name (expected a name of models: or "
                           "--model)",
                           name, QUOTE_MAX, a->base);
    }
    return 0;
}

/* What the server needs beyond the stack: roots, the GPU and process lists
 * against the devices, models' names safe in URLs, placements as long as
 * tp x pp. */
static int check_server(const struct serve_config *c)
{
    for (int i = 0; i < c->n_model_roots; i++)
        if (c->model_roots[i][0] != '/')
            return err_set(ERR_INVALID, "model_roots[%d]: expected an absolute path, got '%.*s'", i,
                           QUOTE_MAX, c->model_roots[i]);
    if (c->n_gpus > 0 && strcmp(c->device_kind, "cuda") != 0)
        return err_set(ERR_INVALID, "devices.gpus: only for devices.kind cuda (kind is %s)",
                       c->device_kind);
    if (c->n_gpus > 0 && c->n_gpus != c->n_devices)
        return err_set(ERR_INVALID,
                       "devices.gpus: %d GPUs for devices.count %d (expected one per device)",
                       c->n_gpus, c->n_devices);
    if (c->n_ranks > 0 && c->n_ranks != c->n_devices)
        return err_set(ERR_INVALID,
                       "devices.ranks: %d processes for devices.count %d (expected one per "
                       "device)",
                       c->n_ranks, c->n_devices);
    if (c->n_models < 1)
        return err_set(ERR_INVALID, "no models: give at least one (models: in the config file, "
                                    "or --model NAME=DIR)");
    if (c->n_models > SERVE_MAX_MODELS)
        return err_set(ERR_INVALID, "%d models: at most %d", c->n_models, SERVE_MAX_MODELS);
    for (int i = 0; i < c->n_models; i++) {
        char name[32];
        const char *key;
        snprintf(name, sizeof(name), "models[%d]", i);
        int rc = serve_model_check(&c->models[i], name, &key);
        if (rc < 0)
            return rc;
    }
    /* an alias is a name like any other: no two models answer to one
     * (stack_config_check has the names among themselves) */
    for (int i = 0; i < c->n_models; i++)
        for (int a = 0; a < c->models[i].n_aliases; a++)
            for (int j = 0; j < c->n_models; j++) {
                const struct serve_model *o = &c->models[j];
                bool taken = j != i && strcmp(o->name, c->models[i].aliases[a]) == 0;
                for (int b = 0; j < i && !taken && b < o->n_aliases; b++)
                    taken = strcmp(o->aliases[b], c->models[i].aliases[a]) == 0;
                if (taken)
                    return err_set(ERR_INVALID,
                                   "models[%d].aliases[%d] '%s': also a name of models[%d] (%s)", i,
                                   a, c->models[i].aliases[a], j, o->name);
            }
    return 0;
}

int serve_config_check(const struct serve_config *c)
{
    int rc;
    if ((rc = check_keys_values(c)) < 0 || (rc = check_server(c)) < 0 ||
        (rc = check_adapters(c)) < 0)
        return rc;
    /* the rest is the stack's: devices, policy, precisions, unique names,
     * placements on the devices there are */
    struct stack_model_config *mc = calloc((size_t)c->n_models, sizeof(*mc));
    struct stack_adapter_config *ac = calloc((size_t)c->n_adapters + 1, sizeof(*ac));
    if (!mc || !ac) {
        free(mc);
        free(ac);
        return err_set(ERR_NOMEM, "out of memory checking the config");
    }
    struct stack_config sc;
    serve_config_stack(c, &sc, mc);
    serve_config_stack_adapters(c, &sc, ac);
    rc = stack_config_check(&sc);
    free(mc);
    free(ac);
    return rc;
}
