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
 * whether it has a tokenizer, residency, shards, queue). NULL when m is no
 * longer served. */
static json_t *model_json(struct server *s, const struct srv_model *m)
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
    json_t *o =
        json_pack("{s:s, s:s, s:I, s:s, s:s, s:s, s:b, s:b, s:s, s:b, s:i, s:i, s:s, s:I, s:o, "
                  "s:i, s:i, s:i}",
                  "id", m->name, "object", "model", "created", (json_int_t)m->created, "owned_by",
                  "shardswap", "family", m->family, "architecture", m->architecture, "tokenizer",
                  m->tok != NULL, "chat_template", m->chat != NULL, "residency", srv_residency_name(st->residency), "pinned", st->pinned,
                  "tp", m->tp, "pp", m->pp, "compute", kern_compute_name(m->compute), "bytes",
                  (json_int_t)total, "shards", shards, "max_model_len", m->max_pos, "queue_len",
                  st->queue_len, "running", st->running);
    /* seconds; -1 forever; null: the policy's own */
    double ka = st->keep_alive;
    if (o && (json_object_set_new(o, "keep_alive", isnan(ka)   ? json_null()
                                                   : isinf(ka) ? json_integer(-1)
                                                               : json_real(ka)) |
              json_object_set_new(o, "priority", json_integer(st->priority)) |
              json_object_set_new(o, "max_queue_wait", json_real(st->max_queue_wait)) |
              json_object_set_new(o, "min_resident", json_real(st->min_resident))) < 0) {
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
        json_t *o = model_json(r->s, ms[i]);
        if (o) /* else removed meanwhile */
            json_array_append_new(data, o);
    }
    srv_models_put_all(ms, n);
    free(ms);
    return srv_reply_json(r, 200, json_pack("{s:s, s:o}", "object", "list", "data", data));
}

enum MHD_Result srv_model_get(struct srv_req *r)
{
    struct srv_model *m = srv_model_find(r->s, r->arg);
    json_t *o = m ? model_json(r->s, m) : NULL;
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
    json_t *o = model_json(s, m);
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
    json_t *o = m ? model_json(s, m) : NULL;
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
    if (rc < 0) {
        json_decref(o);
        return model_not_found(r, r->arg);
    }
    json_object_set_new(o, "residency", json_string("removed"));
    return srv_reply_json(r, 200, o);
}

/* An optional integer field of the admin body in lo..hi; *out keeps its
 * default when absent or null. */
static bool body_int(json_t *body, const char *key, int lo, int hi, int *out, struct oai_error *e)
{
    json_t *v = json_object_get(body, key);
    if (!v || json_is_null(v))
        return true;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        oai_error_set(e, 400, "invalid_request_error", NULL, key,
                      "'%s' must be an integer in %d..%d.", key, lo, hi);
        return false;
    }
    *out = (int)json_integer_value(v);
    return true;
}

/* An optional field of the admin body in seconds >= 0; *out keeps its
 * default (0: none) when absent or null. */
static bool body_seconds(json_t *body, const char *key, double *out, struct oai_error *e)
{
    json_t *v = json_object_get(body, key);
    if (!v || json_is_null(v))
        return true;
    double x = json_is_number(v) ? json_number_value(v) : NAN;
    if (!(x >= 0) || !isfinite(x)) {
        oai_error_set(e, 400, "invalid_request_error", NULL, key,
                      "'%s' must be a number of seconds >= 0 (0: none).", key);
        return false;
    }
    *out = x;
    return true;
}

/* The admin body's keep_alive: seconds >= 0 or -1 (forever: INFINITY);
 * absent or null: the server's keep_alive (*out NAN when that is unset too). */
static bool body_keep_alive(json_t *body, const struct serve_config *c, double *out,
                            struct oai_error *e)
{
    json_t *v = json_object_get(body, "keep_alive");
    if (!v || json_is_null(v)) {
        if (serve_keep_alive_parse(c->keep_alive, out) < 0) /* checked at start */
            *out = NAN;
        return true;
    }
    double x = json_is_number(v) ? json_number_value(v) : NAN;
    if (!(x >= 0 || x == -1) || !isfinite(x)) {
        oai_error_set(e, 400, "invalid_request_error", NULL, "keep_alive",
                      "'keep_alive' must be a number of seconds >= 0, or -1 (forever).");
        return false;
    }
    *out = x < 0 ? INFINITY : x;
    return true;
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

enum MHD_Result srv_admin_add(struct srv_req *r)
{
    struct server *s = r->s;
    const struct serve_config *c = s->cfg;
    struct oai_error e;
    json_error_t je;
    json_t *body = NULL;
    char *dir = NULL;
    struct swap_model *sm = NULL;
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
    json_t *jn = json_object_get(body, "name"), *jp = json_object_get(body, "path"),
           *jpin = json_object_get(body, "pinned"), *jc = json_object_get(body, "compute");
    const char *name = json_string_value(jn), *path = json_string_value(jp);
    /* the model's precision: the body's, else the server's, else the checkpoint's */
    const char *compute = jc && !json_is_null(jc) ? json_string_value(jc) : c->compute;
    enum kern_compute kc = KERN_COMPUTE_F32;
    bool compute_set = false;
    if ((jc && !json_is_null(jc) && !compute) ||
        kern_compute_choice(compute, &compute_set, &kc) < 0) {
        oai_error_set(&e, 400, "invalid_request_error", NULL, "compute",
                      "'compute' must be \"f32\", \"bf16\" or \"auto\".");
        goto refuse;
    }
    if (!name || !serve_model_name_ok(name)) {
        oai_error_set(&e, 400, "invalid_request_error", NULL, "name",
                      "'name' must be 1 to 63 bytes of A-Z a-z 0-9 . _ : / -, not starting "
                      "with '/' and without '..' (as in the config file).");
        goto refuse;
    }
    if (!path || !path[0]) {
        oai_error_set(&e, 400, "invalid_request_error", NULL, "path",
                      "'path' must be a non-empty string (a checkpoint directory).");
        goto refuse;
    }
    if (jpin && !json_is_null(jpin) && !json_is_boolean(jpin)) {
        oai_error_set(&e, 400, "invalid_request_error", NULL, "pinned",
                      "'pinned' must be a boolean.");
        goto refuse;
    }
    int n_dev = s->stack->n_devices, tp = 1, pp = 1, max_batch = 0;
    int priority = 0;
    double keep_alive, max_queue_wait = 0;
    if (!body_int(body, "tp", 1, n_dev, &tp, &e) || !body_int(body, "pp", 1, n_dev, &pp, &e) ||
        !body_int(body, "max_batch", 0, 4096, &max_batch, &e) ||
        !body_int(body, "priority", -ENGINE_PRIORITY_MAX, ENGINE_PRIORITY_MAX, &priority, &e) ||
        !body_keep_alive(body, c, &keep_alive, &e))
        goto refuse;
    double min_resident = 0;
    if (!body_seconds(body, "max_queue_wait", &max_queue_wait, &e) ||
        !body_seconds(body, "min_resident", &min_resident, &e))
        goto refuse;
    if (tp * pp > n_dev) {
        oai_error_set(&e, 400, "invalid_request_error", NULL, "tp",
                      "tp x pp = %d shards exceed the server's %d devices.", tp * pp, n_dev);
        goto refuse;
    }
    if (!(dir = realpath(path, NULL)) || !under_root(c, dir)) {
        /* the same answer for a path that is missing and one outside: the
         * admin learns nothing about the file system beyond the roots */
        oai_error_set(&e, 403, "permission_error", "path_not_allowed", "path",
                      "'path' must name an existing directory under a --model-root.");
        goto refuse;
    }
    pthread_mutex_lock(&s->admin_lock);
    struct srv_model *same = srv_model_find(s, name);
    srv_model_put(same);
    if (same) {
        pthread_mutex_unlock(&s->admin_lock);
        oai_error_set(&e, 409, "invalid_request_error", "model_exists", "name",
                      "A model named '%s' is served already.", name);
        goto refuse;
    }
    int devices[STACK_MAX_DEVICES];
    for (int i = 0; i < tp * pp; i++)
        devices[i] = i;
    struct placement pl = {.tp = tp, .pp = pp, .devices = devices};
    /* every file read from the model's directory (config, weights,
     * tokenizer, chat template) must resolve below a root, links included */
    fs_confine((const char *const *)c->model_roots, c->n_model_roots);
    int rc = swap_register(s->stack->mgr, name, dir, &pl, json_is_true(jpin), &sm);
    if (rc == 0 && compute_set)
        swap_model_set_compute(sm, kc);
    const char *param = "path"; /* what the refusal is about */
    int id = rc < 0 ? rc : engine_add_model(s->stack->engine, sm);
    if (rc == 0 && id < 0) {
        swap_unregister(s->stack->mgr, sm); /* never served: idle */
        param = "";                         /* the engine's model limit */
    }
    if (id >= 0 && max_batch > 0 &&
        (rc = engine_set_max_batch(s->stack->engine, id, max_batch)) < 0) {
        param = "max_batch";
        remove_unserved(s, id);
    } else if (id >= 0 && !isnan(keep_alive) &&
               (rc = engine_set_keep_alive(s->stack->engine, id, keep_alive)) < 0) {
        param = "keep_alive";
        remove_unserved(s, id);
    } else if (id >= 0 &&
               (rc = engine_set_priority(s->stack->engine, id, priority, max_queue_wait)) < 0) {
        param = "priority";
        remove_unserved(s, id);
    } else if (id >= 0 &&
               (rc = engine_set_min_resident(s->stack->engine, id, min_resident)) < 0) {
        param = "min_resident";
        remove_unserved(s, id);
    } else if (id >= 0 && (rc = srv_model_add(s, sm, dir, NULL, id)) < 0) {
        remove_unserved(s, id);
    } else if (id < 0) {
        rc = id;
    }
    fs_confine(NULL, 0);
    pthread_mutex_unlock(&s->admin_lock);
    if (rc < 0) {
        /* what swap_register refuses (no checkpoint, does not fit, a file
         * outside the roots), a tokenizer that does not load, a max_batch
         * no batch fits, the model limit: the request's fault; a model
         * registered for it is unregistered again (engine_remove_model does
         * that for one the engine took) */
        oai_error_set(&e, 400, "invalid_request_error", NULL, param,
                      "Model '%s' could not be added: %s", name, err_msg());
        goto refuse;
    }
    log_info("admin: added model %s from %s (tp %d, pp %d)", name, dir, tp, pp);
    struct srv_model *m = srv_model_find(s, name);
    json_t *o = m ? model_json(s, m) : NULL;
    srv_model_put(m);
    json_decref(body);
    free(dir);
    return o ? srv_reply_json(r, 200, o) : model_not_found(r, name);
refuse:
    json_decref(body);
    free(dir);
    return srv_reply_error(r, &e);
}
