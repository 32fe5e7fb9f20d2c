/* engine/step.h: the shard step. */
#include "engine/step.h"

#include <stdio.h>

#include "backend/device.h"
#include "core/error.h"

/* A step in progress: the first refusal of an expert's room, kept with
 * its message (the loader's own go through the blob events). */
struct step_run {
    const struct shard_step *st;
    int room_rc;
    char room_msg[256];
};

/* model_forward_stage's wait: the compute stream waits for blob b. */
static int step_wait_blob(void *arg, int b)
{
    const struct step_run *run = arg;
    return stream_wait_event(model_exec_stream(run->st->ex), run->st->sh->ready[b]);
}

/* model_forward_stage's experts: those of the shard with rows are brought
 * in (swap_experts_request: all of the layer's at once), then waited for. */
static int step_experts(void *arg, int layer, const int *rows, const int *real, int n_experts,
                        uint8_t *ok)
{
    struct step_run *run = arg;
    const struct shard_step *st = run->st;
    int rc = swap_experts_request(st->mgr, st->shard, layer, rows, real, n_experts, ok);
    if (rc < 0 && run->room_rc == 0) {
        run->room_rc = rc;
        snprintf(run->room_msg, sizeof(run->room_msg), "%s", err_msg());
    }
    const struct model_layout *lay = &st->sh->layout;
    for (int e = 0; lay->expert_blob && e < n_experts && e < lay->n_experts; e++) {
        const int b = lay->expert_blob[(size_t)layer * lay->n_experts + e];
        if (rows[e] == 0 || !ok[e] || b < 0)
            continue;
        int w = step_wait_blob(run, b);
        if (w < 0) {
            ok[e] = 0;
            rc = rc < 0 ? rc : w;
        }
    }
    return rc;
}

int shard_step_run(const struct shard_step *st)
{
    int wait_rc = 0, rc;
    struct step_run run = {.st = st};
    /* the blobs every step reads (an expert's own: when routed to) */
    for (int b = 0; !st->overlap && b < st->sh->layout.n_dense; b++)
        if ((rc = step_wait_blob(&run, b)) < 0 && wait_rc == 0)
            wait_rc = rc;
    const struct model_stage_io io = {.in = st->in,
                                      .out = st->out,
                                      .wait = step_wait_blob,
                                      .experts = st->mgr ? step_experts : NULL,
                                      .arg = &run};
    int step_wait_rc = 0;
    rc = model_forward_stage(st->sh->m, st->ex, &io, st->ids, st->mask, st->t_new,
                             st->all_positions, st->logits, &step_wait_rc);
    if (wait_rc == 0)
        wait_rc = step_wait_rc;
    if (rc == 0 && run.room_rc < 0) /* an expert that found no room */
        return err_set(run.room_rc, "%s%s%s", st->who ? st->who : "", st->who ? ": " : "",
                       run.room_msg);
    if (rc == 0 && wait_rc < 0) /* the loader's message, written before the events */
        return err_set(wait_rc, "%s%sits weights did not load: %s", st->who ? st->who : "",
                       st->who ? ": " : "",
                       st->sh->load_error[0] ? st->sh->load_error : err_name(wait_rc));
    return rc < 0 ? rc : wait_rc;
}
