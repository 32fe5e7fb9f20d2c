/* GET /v1/models, GET /v1/models/{id} and the admin routes: load, unload,
 * pin, unpin, add (POST /admin/models, only below --model-root) and remove.
 * HTTP thread; the admin calls wait on the engine's scheduler (an admin
 * request is rare and short), never on a batch. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/fs.h"
#include "server/log.h"
#include "server/server_impl.h"

/* The model object: OpenAI's fields and the server's (family, architecture,
 * checkpoint format and bytes by weight type, whether it has a tokenizer,
 * residency, shards, queue, its aliases). as is
 * the name it is shown under: NULL or m->name, else one of its aliases (then
 * "alias_of" names the model). NULL when m is no longer served. */
static json_t *aliases_json(const struct srv_model *m)
{
    json_t *a = json_array();
    for (int i = 0; a && i < m->n_aliases; i++)
        json_array_append_new(a, json_string(m->aliases[i]));
    return a;
}

/* {"Q4_K": bytes, "F32": bytes, ...}: the checkpoint's bytes by tensor type */
static json_t *types_json(const struct srv_model *m)
{
    json_t *o = json_object();
    for (int d = 0; o && d < DTYPE_COUNT; d++)
        if (m->type_bytes[d])
            json_object_set_new(o, dtype_name((enum dtype)d), json_integer((json_int_t)m->type_bytes[d]));
    return o;
}

static json_t *model_json(struct server *s, const struct srv_model *m, const char *as)
{
    struct engine_model_stats *st = malloc(sizeof(*st));
    if (!st || engine_model_stats(s->stack->engine, m->id, st) < 0) {
        free(st);
        return NULL;
    }
    json_t *shards = json_array();
    uint64_t total = 0;
    int n = st->n_shards < ENGINE_MAX_SHARDS ? st->n_shards : ENGINE_MAX_SHARDS;
    for (int i = 0; i < n; i++) {
        struct device *d = swap_device(s->stack->mgr, st->shards[i].device);
        total += st->shards[i].bytes;
        json_array_append_new(shards, json_pack("{s:s, s:I}", "device", d ? device_name(d) : "?",
                                                "bytes", (json_int_t)st->shards[i].bytes));
    }
    json_t *o = json_pack(
        "{s:s, s:s, s:I, s:s, s:s, s:s, s:b, s:b, s:s, s:b, s:i, s:i, s:s, s:I, s:o, "
        "s:i, s:i, s:i}",
        "id", as ? as : m->name, "object", "model", "created", (json_int_t)m->created, "owned_by",
        "shardswap", "family", m->family, "architecture", m->architecture, "tokenizer",
        m->tok != NULL, "chat_template", m->chat != NULL, "residency",
        srv_residency_name(st->residency), "pinned", st->pinned, "tp", m->tp, "pp", m->pp,
        "compute", kern_compute_name(m->compute), "bytes", (json_int_t)total, "shards", shards,
        "max_model_len", m->max_pos, "queue_len", st->queue_len, "running", st->running);
    /* seconds; -1 forever; null: the policy's own */
    double ka = st->keep_alive;
    if (o &&
        (json_object_set_new(o, "keep_alive",
                             isnan(ka)   ? json_null()
                             : isinf(ka) ? json_integer(-1)
                                         : json_real(ka)) |
         json_object_set_new(o, "priority", json_integer(st->priority)) |
         json_object_set_new(o, "max_queue_wait", json_real(st->max_queue_wait)) |
         json_object_set_new(o, "min_resident", json_real(st->min_resident)) |
         json_object_set_new(o, "aliases", aliases_json(m)) |
         json_object_set_new(o, "format", json_string(m->format)) |
         json_object_set_new(o, "weight_types", types_json(m)) |
         (as && strcmp(as, m->name) != 0 ? json_object_set_new(o, "alias_of", json_string(m->name))
                                         : 0) |
         /* an adapter: vLLM's "parent" (its base's name), and the admin's "base" */
         (m->parent ? json_object_set_new(o, "parent", json_string(m->base_name)) |
                          json_object_set_new(o, "base", json_string(m->base_name))
                    : 0)) < 0) {
        json_decref(o);
        o = NULL;
    }
    free(st);
    return o;
}

static enum MHD_Result model_not_found(struct srv_req *r, const char *name)
{
    return srv_reply_errorf(r, 404, NULL, "model_not_found", "model",
                            "The model '%s' does not exist.", name);
}

enum MHD_Result srv_models_list(struct srv_req *r)
{
    struct srv_model **ms = malloc(SRV_MAX_LIST * sizeof(*ms));
    if (!ms)
        return srv_reply_errorf(r, 500, NULL, NULL, "", "Out of memory.");
    int n = srv_models_list_all(r->s, ms, SRV_MAX_LIST);
    n = n < SRV_MAX_LIST ? n : SRV_MAX_LIST;
    json_t *data = json_array();
    for (int i = 0; i < n; i++) {
        /* the model, then each of its aliases as a model of its own name */
        for (int a = -1; a < ms[i]->n_aliases; a++) {
            json_t *o = model_json(r->s, ms[i], a < 0 ? NULL : ms[i]->aliases[a]);
            if (o) /* else removed meanwhile */
                json_array_append_new(data, o);
        }
    }
    srv_models_put_all(ms, n);
    free(ms);
    return srv_reply_json(r, 200, json_pack("{s:s, s:o}", "object", "list", "data", data));
}

enum MHD_Result srv_model_get(struct srv_req *r)
{
    struct srv_model *m = srv_model_find(r->s, r->arg);
    json_t *o = m ? model_json(r->s, m, r->arg) : NULL;
    srv_model_put(m);
    if (!o)
        return model_not_found(r, r->arg);
    return srv_reply_json(r, 200, o);
}

static enum MHD_Result admin_action(struct srv_req *r, struct srv_model *m)
{
    struct server *s = r->s;
    struct engine *e = s->stack->engine;
    int rc;
    if (strcmp(r->action, "load") == 0)
        rc = engine_load_model(e, m->id);
    else if (strcmp(r->action, "unload") == 0)
        rc = engine_unload_model(e, m->id);
    else
        rc = engine_pin_model(e, m->id, strcmp(r->action, "pin") == 0);
    if (rc == ERR_BUSY)
        return srv_reply_errorf(r, 409, "invalid_request_error", "conflict", "", "%s", err_msg());
    if (rc == ERR_NOT_FOUND)
        return model_not_found(r, r->arg);
    if (rc < 0)
        return srv_reply_errorf(r, 500, NULL, NULL, "", "%s", err_msg());
    log_info("admin: %s %s", r->action, m->name);
    json_t *o = model_json(s, m, NULL);
    return o ? srv_reply_json(r, 200, o) : model_not_found(r, r->arg);
}

enum MHD_Result srv_admin_action(struct srv_req *r)
{
    struct srv_model *m = srv_model_find(r->s, r->arg);
    if (!m)
        return model_not_found(r, r->arg);
    enum MHD_Result ret = admin_action(r, m);
    srv_model_put(m);
    return ret;
}

enum MHD_Result srv_admin_delete(struct srv_req *r)
{
    struct server *s = r->s;
    pthread_mutex_lock(&s->admin_lock);
    struct srv_model *m = srv_model_find(s, r->arg);
    json_t *o = m ? model_json(s, m, NULL) : NULL;
    struct engine_model_stats *last = o ? malloc(sizeof(*last)) : NULL;
    int rc = o ? engine_remove_model(s->stack->engine, m->id, last) : ERR_NOT_FOUND;
    if (rc == 0) {
        log_info("admin: removed model %s", m->name);
        /* its counters stay in /metrics (without last, out of memory, they go) */
        srv_model_remove(s, m, last); /* freed when its last request ends */
    }
    free(last);
    srv_model_put(m);
    pthread_mutex_unlock(&s->admin_lock);
    if (rc == ERR_BUSY) {
        /* a base whose adapters are still served: they go first */
        json_decref(o);
        return srv_reply_errorf(r, 409, "invalid_request_error", "conflict", "", "%s", err_msg());
    }
    if (rc < 0) {
        json_decref(o);
        return model_not_found(r, r->arg);
    }
    json_object_set_new(o, "residency", json_string("removed"));
    return srv_reply_json(r, 200, o);
}

_Static_assert(sizeof(((struct srv_model *)0)->name) > SERVE_MODEL_NAME_MAX,
               "a served model's name holds any name the config allows");

/* Whether dir (a real path) lies in one of the roots (or is one). */
static bool under_root(const struct serve_config *c, const char *dir)
{
    for (int i = 0; i < c->n_model_roots; i++) {
        char *root = realpath(c->model_roots[i], NULL);
        if (!root)
            continue;
        size_t n = strlen(root);
        bool in = strncmp(dir, root, n) == 0 &&
                  (dir[n] == '\0' || dir[n] == '/' || (n == 1 && root[0] == '/'));
        free(root);
        if (in)
            return true;
    }
    return false;
}

/* Takes a model the engine took for a refused add out again, keeping the
 * message of the refusal (the removal's own would replace it). */
static void remove_unserved(struct server *s, int id)
{
    char why[1024];
    snprintf(why, sizeof(why), "%s", err_msg());
    if (engine_remove_model(s->stack->engine, id, NULL) < 0)
        log_warn("admin: a refused model (id %d) could not be removed: %s", id, err_msg());
    err_set(ERR_INVALID, "%s", why);
}

/* POST /admin/models with a "base": the body is an adapter as the config
 * file's adapters[] list gives one (serve_adapter_from_json), its base a
 * model served (by name or alias; not an adapter), its path a directory
 * below a root, served as the file's are (stack_add_adapter). Called with
 * the body parsed; the caller frees it. */
static enum MHD_Result admin_add_adapter(struct srv_req *r, const json_t *body)
{
    struct server *s = r->s;
    const struct serve_config *c = s->cfg;
    struct oai_error e;
    char *dir = NULL;
    struct srv_model *base = NULL;
    struct serve_adapter a;
    serve_adapter_init(&a);
    const char *key;
    if (serve_adapter_from_json(body, &a, &key) < 0 || serve_adapter_check(&a, "", &key) < 0) {
        oai_error_set(&e, 400, "invalid_request_error", NULL, key, "%s", err_msg());
        goto refuse;
    }
    if (!(dir = realpath(a.path, NULL)) || !under_root(c, dir)) {
        oai_error_set(&e, 403, "permission_error", "path_not_allowed", "path",
                      "'path' must name an existing directory under a --model-root.");
        goto refuse;
    }
    pthread_mutex_lock(&s->admin_lock);
    struct srv_model *same = srv_model_find(s, a.name);
    srv_model_put(same);
    base = srv_model_find(s, a.base);
    if (same || !base || base->parent) {
        pthread_mutex_unlock(&s->admin_lock);
        if (same)
            oai_error_set(&e, 409, "invalid_request_error", "model_exists", "name",
                          "A model named '%s' is served already.", a.name);
        else if (!base)
            oai_error_set(&e, 400, "invalid_request_error", "model_not_found", "base",
                          "base: no model named '%s' is served (expected a model's name).", a.base);
        else
            oai_error_set(&e, 400, "invalid_request_error", NULL, "base",
                          "base: '%s' is an adapter (of %s); expected a model's name.", a.base,
                          base->base_name);
        goto refuse;
    }
    struct stack_adapter_config ac;
    serve_adapter_stack(c, &a, &ac);
    ac.base = base->name; /* an alias named the model */
    ac.path = dir;
    /* every file read from the adapter's directory (its config, weights,
     * tokenizer, chat template) must resolve below a root, links included;
     * the base's directory, whose config.json the adapter's is read
     * against, was vetted when the base was added */
    const char *roots[SERVE_MAX_ROOTS + 1];
    int n_roots = 0;
    for (int i = 0; i < c->n_model_roots; i++)
        roots[n_roots++] = c->model_roots[i];
    roots[n_roots++] = base->path;
    fs_confine(roots, n_roots);
    struct swap_model *sm;
    const char *param = "path";
    int id = stack_add_adapter(s->stack, &ac, &sm, &param), rc = id;
    if (id >= 0 && (rc = engine_check_pinned_room(s->stack->engine, id)) < 0) {
        /* its base, it and a batch of one could never run beside the
         * pinned models: refused as a model is, naming them */
        remove_unserved(s, id);
        fs_confine(NULL, 0);
        pthread_mutex_unlock(&s->admin_lock);
        oai_error_set(&e, 409, "invalid_request_error", "no_room_beside_pinned", "",
                      "Adapter '%s' could not be added: %s", a.name, err_msg());
        goto refuse;
    }
    if (id >= 0 && (rc = srv_adapter_add(s, sm, dir, base, id)) < 0) {
        param = "path";
        remove_unserved(s, id);
    }
    fs_confine(NULL, 0);
    pthread_mutex_unlock(&s->admin_lock);
    if (rc < 0) {
        /* what registering refuses (an adapter config against its base's,
         * its tensors, a file outside the roots), the model limit, a
         * tokenizer or template that does not load: nothing of it is left */
        oai_error_set(&e, 400, "invalid_request_error", NULL, param && param[0] ? param : "",
                      "Adapter '%s' could not be added: %s", a.name, err_msg());
        goto refuse;
    }
    log_info("admin: added adapter %s of %s from %s", a.name, base->name, dir);
    srv_model_put(base);
    struct srv_model *added = srv_model_find(s, a.name);
    json_t *o = added ? model_json(s, added, NULL) : NULL;
    srv_model_put(added);
    enum MHD_Result ret = o ? srv_reply_json(r, 200, o) : model_not_found(r, a.name);
    free(dir);
    serve_adapter_free(&a);
    return ret;
refuse:
    srv_model_put(base);
    free(dir);
    serve_adapter_free(&a);
    return srv_reply_error(r, &e);
}

/* POST /admin/models: the body is a model as the config file's models[]
 * list gives one, read through the same key table (serve_model_from_json),
 * then served as the file's models are (stack_add_model), below a root; a
 * body with "base" is an adapter (admin_add_adapter). */
enum MHD_Result srv_admin_add(struct srv_req *r)
{
    struct server *s = r->s;
    const struct serve_config *c = s->cfg;
    struct oai_error e;
    json_error_t je;
    json_t *body = NULL;
    char *dir = NULL;
    struct serve_model m;
    serve_model_init(&m);
    if (c->n_model_roots == 0) {
        oai_error_set(&e, 403, "permission_error", "admin_add_disabled", "",
                      "Adding models is disabled: start the server with --model-root DIR.");
        goto refuse;
    }
    body = json_loadb(r->body ? r->body : "", r->body_len, JSON_REJECT_DUPLICATES, &je);
    if (!body || !json_is_object(body)) {
        oai_error_set(&e, 400, "invalid_request_error", NULL, "",
                      "The body must be a JSON object: %s", body ? "got another type" : je.text);
        goto refuse;
    }
    if (json_object_get(body, "base")) {
        enum MHD_Result ret = admin_add_adapter(r, body);
        json_decref(body);
        serve_model_free(&m);
        return ret;
    }
    const char *key;
    if (serve_model_from_json(body, &m, &key) < 0 || serve_model_check(&m, "", &key) < 0) {
        oai_error_set(&e, 400, "invalid_request_error", NULL, key, "%s", err_msg());
        goto refuse;
    }
    if (!(dir = realpath(m.path, NULL)) || !under_root(c, dir)) {
        /* the same answer for a path that is missing and one outside: the
         * admin learns nothing about the file system beyond the roots */
        oai_error_set(&e, 403, "permission_error", "path_not_allowed", "path",
                      "'path' must name an existing directory under a --model-root.");
        goto refuse;
    }
    pthread_mutex_lock(&s->admin_lock);
    struct srv_model *same = srv_model_find(s, m.name);
    srv_model_put(same);
    for (int i = 0; !same && i < m.n_aliases; i++) {
        same = srv_model_find(s, m.aliases[i]);
        srv_model_put(same);
        if (same) {
            pthread_mutex_unlock(&s->admin_lock);
            oai_error_set(&e, 409, "invalid_request_error", "model_exists", "aliases",
                          "A model named '%s' is served already.", m.aliases[i]);
            goto refuse;
        }
    }
    if (same) {
        pthread_mutex_unlock(&s->admin_lock);
        oai_error_set(&e, 409, "invalid_request_error", "model_exists", "name",
                      "A model named '%s' is served already.", m.name);
        goto refuse;
    }
    struct stack_model_config mc;
    serve_model_stack(c, &m, &mc);
    mc.path = dir;
    /* every file read from the model's directory (config, weights,
     * tokenizer, chat template) must resolve below a root, links included */
    fs_confine((const char *const *)c->model_roots, c->n_model_roots);
    struct swap_model *sm;
    const char *param = "path"; /* what a refusal is about */
    int id = stack_add_model(s->stack, &mc, &sm, &param), rc = id;
    if (id >= 0 && (rc = engine_check_pinned_room(s->stack->engine, id)) < 0) {
        /* it could never run beside the pinned models: as the config check
         * refuses at start, naming both */
        remove_unserved(s, id);
        fs_confine(NULL, 0);
        pthread_mutex_unlock(&s->admin_lock);
        oai_error_set(&e, 409, "invalid_request_error", "no_room_beside_pinned", "",
                      "Model '%s' could not be added: %s", m.name, err_msg());
        goto refuse;
    }
    if (id >= 0 &&
        (rc = srv_model_add(s, sm, dir, m.chat_template, m.aliases, m.n_aliases, id)) < 0) {
        param = m.chat_template && strstr(err_msg(), ": chat_template ") ? "chat_template" : "path";
        remove_unserved(s, id);
    }
    fs_confine(NULL, 0);
    pthread_mutex_unlock(&s->admin_lock);
    if (rc < 0) {
        /* what swap_register refuses (no checkpoint, does not fit, a file
         * outside the roots), a tokenizer or chat template that does not
         * load, a max_batch no batch fits, the model limit: the request's
         * fault; nothing of the model is left */
        oai_error_set(&e, 400, "invalid_request_error", NULL, param,
                      "Model '%s' could not be added: %s", m.name, err_msg());
        goto refuse;
    }
    log_info("admin: added model %s from %s (tp %d, pp %d)", m.name, dir, m.tp, m.pp);
    struct srv_model *added = srv_model_find(s, m.name);
    json_t *o = added ? model_json(s, added, NULL) : NULL;
    srv_model_put(added);
    enum MHD_Result ret = o ? srv_reply_json(r, 200, o) : model_not_found(r, m.name);
    json_decref(body);
    free(dir);
    serve_model_free(&m);
    return ret;
refuse:
    json_decref(body);
    free(dir);
    serve_model_free(&m);
    return srv_reply_error(r, &e);
}
