/* Binding an OPT shard to views of a memory-mapped checkpoint: the plan's
 * matrices are views (a column slice is a view with the full row stride),
 * its vectors are widened to f32 into one block. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/opt.h"
#include "model/opt_plan.h"

int opt_model_open_shard(const struct opt_config *cfg, struct st_checkpoint *ck,
                         const struct opt_shard *shard, struct opt_model **out)
{
    struct opt_model *m;
    struct opt_part *parts = NULL;
    int n = 0, rc = opt_shard_alloc(cfg, shard, &m);
    *out = NULL;
    if (rc < 0)
        return rc;
    if ((rc = opt_plan(m, ck, &parts, &n)) < 0)
        goto fail;
    size_t n_params = 0;
    for (int i = 0; i < n; i++)
        n_params += parts[i].matrix ? 0 : (size_t)parts[i].nr;
    if (!(m->params = malloc((n_params ? n_params : 1) * sizeof(float)))) {
        rc = err_set(ERR_NOMEM, "out of memory for %zu model parameters", n_params);
        goto fail;
    }
    float *next = m->params;
    for (int i = 0; i < n; i++) {
        const struct opt_part *q = &parts[i];
        const struct st_tensor *t = opt_part_tensor(ck, q, &rc);
        if (!t)
            goto fail;
        size_t es = dtype_size(t->dtype);
        if (q->matrix) {
            m->compute = opt_compute_default(t->dtype);
            *q->view = (struct weight_view){
                .dtype = t->dtype,
                .data = (const char *)t->data + ((size_t)q->r0 * q->cols + q->c0) * es,
                .rows = q->nr,
                .cols = q->nc,
                .ld = (size_t)q->cols,
            };
        } else {
            dtype_to_f32(t->dtype, (const char *)t->data + (size_t)q->r0 * es, next,
                         (size_t)q->nr);
            *q->vec = next;
            next += q->nr;
        }
    }
    if (m->head_is_embed)
        m->lm_head = m->embed;
    m->ck = ck;
    free(parts);
    *out = m;
    return 0;
fail:
    free(parts);
    opt_model_close(m);
    return rc;
}

int opt_model_open(const char *dir, struct opt_model **out)
{
    struct opt_config cfg;
    struct st_checkpoint *ck = NULL;
    int rc;
    *out = NULL;
    if ((rc = opt_config_load(dir, &cfg)) < 0)
        return rc;
    if ((rc = st_open(dir, &ck)) < 0)
        return rc;
    struct opt_shard whole = {.tp_rank = 0, .tp_size = 1, .layer_begin = 0,
                              .layer_end = cfg.n_layers};
    if ((rc = opt_model_open_shard(&cfg, ck, &whole, out)) < 0) {
        err_wrap(rc, "%s", dir);
        st_close(ck);
        return rc;
    }
    (*out)->owns_ck = true;
    return 0;
}

void opt_model_close(struct opt_model *m)
{
    if (!m)
        return;
    if (m->owns_ck)
        st_close(m->ck);
    for (int b = 0; b < m->n_blobs; b++)
        device_free(m->blobs[b]);
    free(m->blobs);
    free(m->layers);
    free(m->params);
    free(m);
}

static size_t view_bytes(const struct weight_view *w)
{
    return w->data ? (size_t)w->rows * w->cols * dtype_size(w->dtype) : 0;
}

size_t opt_model_weight_bytes(const struct opt_model *m)
{
    size_t n = 0;
    for (int i = 0; i < m->shard.layer_end - m->shard.layer_begin; i++) {
        const struct opt_layer *L = &m->layers[i];
        n += view_bytes(&L->q) + view_bytes(&L->k) + view_bytes(&L->v) + view_bytes(&L->o) +
             view_bytes(&L->fc1) + view_bytes(&L->fc2);
    }
    return n + view_bytes(&m->project_in) + view_bytes(&m->project_out) + view_bytes(&m->lm_head);
}
