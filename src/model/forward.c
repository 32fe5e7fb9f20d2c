/* The forward driver and what every family's embed and head share. */
#include <assert.h>

#include "backend/kernels.h"
#include "comm/comm.h"
#include "model/arch.h"

int model_forward_embed(const struct model *m, struct model_exec *ex, const int32_t *ids,
                        const uint8_t *mask, int t_new)
{
    return m->arch->embed(m, ex, ids, mask, t_new);
}

int model_forward_layer(const struct model *m, int layer, struct model_exec *ex, int t_new)
{
    return m->arch->layer(m, layer, ex, t_new);
}

int model_forward_head(const struct model *m, struct model_exec *ex, int t_new,
                       bool all_positions, float *logits)
{
    return m->arch->head(m, ex, t_new, all_positions, logits);
}

int model_forward(struct model *m, struct model_exec *ex, const int32_t *ids, const uint8_t *mask,
                  int t_new, bool all_positions, float *logits)
{
    assert(m->shard.tp_size == 1 && m->shard.layer_begin == 0 &&
           m->shard.layer_end == m->info->n_layers);
    TRY(model_exec_begin(m, ex, mask, t_new));
    TRY(model_forward_embed(m, ex, ids, mask, t_new));
    for (int l = 0; l < m->info->n_layers; l++)
        TRY(model_forward_layer(m, l, ex, t_new));
    model_exec_commit(ex, mask, t_new);
    return model_forward_head(m, ex, t_new, all_positions, logits);
}

/* Remembers the first failed wait (the step goes on: model.h). */
static void stage_wait(const struct model_stage_io *io, int blob, int *wait_rc)
{
    if (!io->wait)
        return;
    int rc = io->wait(io->arg, blob);
    if (rc < 0 && *wait_rc == 0)
        *wait_rc = rc;
}

static int stage_run(const struct model *m, struct model_exec *ex, const struct model_stage_io *io,
                     const int32_t *ids, const uint8_t *mask, int t_new, bool all_positions,
                     float *logits, int *wait_rc);

int model_forward_stage(const struct model *m, struct model_exec *ex,
                        const struct model_stage_io *io, const int32_t *ids, const uint8_t *mask,
                        int t_new, bool all_positions, float *logits, int *wait_rc)
{
    *wait_rc = 0;
    /* the inputs: embeddings on the first stage, the previous stage's output elsewhere */
    TRY(model_exec_begin(m, ex, mask, t_new));
    ex->io = io; /* for the sparse layers' experts hook */
    ex->io_rc = wait_rc;
    int rc = stage_run(m, ex, io, ids, mask, t_new, all_positions, logits, wait_rc);
    ex->io = NULL;
    ex->io_rc = NULL;
    return rc;
}

static int stage_run(const struct model *m, struct model_exec *ex, const struct model_stage_io *io,
                     const int32_t *ids, const uint8_t *mask, int t_new, bool all_positions,
                     float *logits, int *wait_rc)
{
    const size_t n = (size_t)ex->shape.batch * (size_t)t_new * (size_t)m->info->hidden;
    const int n_local = m->shard.layer_end - m->shard.layer_begin;
    if (!io->in) {
        stage_wait(io, 0, wait_rc);
        TRY(model_forward_embed(m, ex, ids, mask, t_new));
    } else {
        TRY(comm_recv(io->in, ex->stream, ex->x, n));
    }
    /* each layer as soon as its weights are in (layer overlap) */
    for (int l = 0; l < n_local; l++) {
        stage_wait(io, 1 + l, wait_rc);
        TRY(model_forward_layer(m, l, ex, t_new));
    }
    model_exec_commit(ex, mask, t_new);
    /* the outputs: logits on the last stage, activations to the next one */
    if (io->out)
        return comm_send(io->out, ex->stream, ex->x, n);
    stage_wait(io, 0, wait_rc);
    return model_forward_head(m, ex, t_new, all_positions, m->shard.tp_rank == 0 ? logits : NULL);
}

int model_embed_ids(const struct model *m, struct model_exec *ex, const int32_t *ids, int n)
{
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= m->info->vocab)
            return err_set(ERR_INVALID, "token id %d is outside the vocabulary (size %d)", ids[i],
                           m->info->vocab);
    return kern_to_device(ex->stream, ex->ids, ids, (size_t)n * sizeof(int32_t));
}

int model_head_rows(const struct model *m, struct model_exec *ex, int t_new, bool all_positions,
                    int *n_rows)
{
    int n = 0;
    for (int b = 0; b < ex->shape.batch; b++)
        for (int t = all_positions ? 0 : t_new - 1; t < t_new; t++)
            ex->rows_host[n++] = b * t_new + t;
    *n_rows = n;
    if (n > ex->shape.max_rows)
        return err_set(ERR_INVALID, "%d rows of logits exceed the %d the batch was sized for", n,
                       ex->shape.max_rows);
    TRY(kern_to_device(ex->stream, ex->rows, ex->rows_host, (size_t)n * sizeof(int32_t)));
    return kern_gather_rows(ex->stream, ex->h, ex->x, ex->rows, n, m->info->hidden);
}

int model_head_logits(const struct model *m, struct model_exec *ex, const struct weight_view *head,
                      const float *x, int n_rows, float *logits)
{
    return model_head_logits_capped(m, ex, head, x, n_rows, 0, logits);
}

int model_head_logits_capped(const struct model *m, struct model_exec *ex,
                             const struct weight_view *head, const float *x, int n_rows, float cap,
                             float *logits)
{
    struct stream *s = ex->stream;
    const int V = m->info->vocab;
    /* A whole vocabulary on this process's CPU device, whose memory is the
     * host's and whose kernels have run when they return: the head writes
     * the caller's logits itself. The copy it saves was 0.6 ms of a batch-8
     * decode step of qwen2.5-0.5b (8 x 151936 floats; 2-core Xeon). */
    const struct device *dev = stream_device(s);
    float *out = logits && ex->logits == ex->logits_local && device_kind(dev) == DEVICE_CPU &&
                         device_proc(dev) < 0
                     ? logits
                     : ex->logits_local;
    /* this rank's vocabulary block (soft-capped), then every block into rank 0's logits */
    TRY(kern_linear(s, out, x, n_rows, head, NULL, m->compute));
    if (cap > 0)
        TRY(kern_softcap(s, out, (size_t)n_rows * m->vocab_local, cap));
    if (out == logits)
        return 0;
    if (ex->logits != ex->logits_local)
        TRY(comm_gather_cols(ex->tp, s, 0, ex->logits_local, n_rows, m->vocab_local,
                             m->vocab_begin, ex->logits, V));
    if (!logits)
        return 0;
    return kern_to_host(s, logits, ex->logits, (size_t)n_rows * V * sizeof(float));
}
