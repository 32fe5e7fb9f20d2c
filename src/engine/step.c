/* engine/step.h: the shard step. */
#include "engine/step.h"

#include "backend/device.h"
#include "core/error.h"

/* model_forward_stage's wait: the compute stream waits for blob b. */
static int step_wait_blob(void *arg, int b)
{
    const struct shard_step *st = arg;
    return stream_wait_event(model_exec_stream(st->ex), st->sh->ready[b]);
}

int shard_step_run(const struct shard_step *st)
{
    int wait_rc = 0, rc;
    for (int b = 0; !st->overlap && b < st->sh->layout.n_blobs; b++)
        if ((rc = step_wait_blob((void *)st, b)) < 0 && wait_rc == 0)
            wait_rc = rc;
    const struct model_stage_io io = {
        .in = st->in, .out = st->out, .wait = step_wait_blob, .arg = (void *)st};
    int step_wait_rc = 0;
    rc = model_forward_stage(st->sh->m, st->ex, &io, st->ids, st->mask, st->t_new,
                             st->all_positions, st->logits, &step_wait_rc);
    if (wait_rc == 0)
        wait_rc = step_wait_rc;
    if (rc == 0 && wait_rc < 0) /* the loader's message, written before the events */
        return err_set(wait_rc, "%s%sits weights did not load: %s", st->who ? st->who : "",
                       st->who ? ": " : "",
                       st->sh->load_error[0] ? st->sh->load_error : err_name(wait_rc));
    return rc < 0 ? rc : wait_rc;
}
