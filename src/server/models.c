/* The server's model table: what it keeps per served model beyond the
 * engine's registry (the tokenizer, the context length, the path). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "server/log.h"
#include "server/server_impl.h"

/* Any non-engine thread; opens the tokenizer outside s->lock. What the
 * entry needs of sm is copied now: the entry outlives the swap model (the
 * engine's removal unregisters it). */
int srv_model_add(struct server *s, const struct swap_model *sm, const char *path, int id)
{
    struct srv_model *m = calloc(1, sizeof(*m));
    if (!m || !(m->path = strdup(path))) {
        free(m);
        return err_set(ERR_NOMEM, "out of memory for model %s", swap_model_name(sm));
    }
    snprintf(m->name, sizeof(m->name), "%s", swap_model_name(sm));
    m->id = id;
    m->tp = swap_model_tp(sm);
    m->pp = swap_model_pp(sm);
    m->compute = swap_model_compute(sm);
    m->max_pos = swap_model_info(sm)->max_pos;
    m->vocab = swap_model_info(sm)->vocab;
    m->family = swap_model_info(sm)->family;
    snprintf(m->architecture, sizeof(m->architecture), "%s", swap_model_info(sm)->architecture);
    m->created = (long long)time(NULL);
    if (bpe_open(path, &m->tok) < 0) {
        log_warn("model %s: no tokenizer (%s): it serves token-id prompts only, its completions "
                 "carry token_ids", m->name, err_msg());
        m->tok = NULL;
    }
    pthread_mutex_lock(&s->lock);
    for (struct srv_model *o = s->models; o; o = o->next)
        if (!o->removed && strcmp(o->name, m->name) == 0)
            o->removed = true;
    m->next = s->models;
    s->models = m;
    pthread_mutex_unlock(&s->lock);
    return 0;
}

struct srv_model *srv_model_find(struct server *s, const char *name)
{
    pthread_mutex_lock(&s->lock);
    struct srv_model *m = s->models;
    while (m && (m->removed || strcmp(m->name, name) != 0))
        m = m->next;
    pthread_mutex_unlock(&s->lock);
    return m;
}

void srv_models_free(struct server *s)
{
    struct srv_model *m = s->models;
    while (m) {
        struct srv_model *next = m->next;
        bpe_close(m->tok);
        free(m->path);
        free(m);
        m = next;
    }
    s->models = NULL;
}

int srv_models_list_all(struct server *s, struct srv_model **out, int max)
{
    int n = 0;
    pthread_mutex_lock(&s->lock);
    for (struct srv_model *m = s->models; m; m = m->next) {
        if (m->removed)
            continue;
        if (n < max) {
            /* insertion by id: the list is short */
            int i = n;
            while (i > 0 && out[i - 1]->id > m->id) {
                out[i] = out[i - 1];
                i--;
            }
            out[i] = m;
        }
        n++;
    }
    pthread_mutex_unlock(&s->lock);
    return n;
}

const char *srv_residency_name(enum residency r)
{
    switch (r) {
    case RES_ON_DISK:
        return "on_disk";
    case RES_IN_HOST:
        return "in_host";
    case RES_LOADING:
        return "loading";
    case RES_ON_DEVICE:
        return "on_device";
    case RES_OFFLOADING:
        return "offloading";
    }
    return "unknown";
}
