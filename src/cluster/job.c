/* cluster/job.h: the world, the leader and the remote table on process 0,
 * a follower on the others. */
#include "cluster/job.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/device.h"
#include "cluster/follower.h"
#include "cluster/leader.h"
#include "cluster/remote.h"
#include "comm/mpi.h"
#include "core/error.h"
#include "engine/stack.h"

enum { CTL_TAG = 100, BATCH_TAGS = 1000 };

struct cluster_job {
    struct mpi_world *w;
    double beat_interval_s, beat_timeout_s;
    int me, procs;
    struct leader *l;
    struct cluster_remote *r;
    /* the follower while cluster_job_follow serves, and whether process 0
     * was lost: under lock (the heartbeats' callback takes it) */
    pthread_mutex_t lock;
    struct follower *f;
    bool lost0;
};

int cluster_job_open(const struct cluster_job_config *cfg, struct cluster_job **out)
{
    *out = NULL;
    double interval = cfg && cfg->beat_interval_s > 0 ? cfg->beat_interval_s
                                                      : CLUSTER_BEAT_INTERVAL_S;
    double timeout = cfg && cfg->beat_timeout_s > 0 ? cfg->beat_timeout_s
                                                    : CLUSTER_BEAT_TIMEOUT_S;
    if (!(interval < timeout))
        return err_set(ERR_INVALID,
                       "cluster: a heartbeat every %g s with a timeout of %g s: expected the "
                       "interval below the timeout",
                       interval, timeout);
    if (mpi_launched() <= 1)
        return 0;
    if (!mpi_built())
        return err_set(ERR_UNSUPPORTED, "started by mpirun as %d processes, but this shardswap "
                                        "was built without MPI (cmake -DSHARDSWAP_MPI=ON)",
                       mpi_launched());
    struct cluster_job *j = calloc(1, sizeof *j);
    if (!j)
        return err_set(ERR_NOMEM, "out of memory");
    pthread_mutex_init(&j->lock, NULL);
    j->beat_interval_s = interval;
    j->beat_timeout_s = timeout;
    int rc = mpi_world_open(&j->w);
    if (rc < 0) {
        pthread_mutex_destroy(&j->lock);
        free(j);
        return rc;
    }
    j->me = mpi_world_proc(j->w);
    j->procs = mpi_world_procs(j->w);
    *out = j;
    return 0;
}

int cluster_job_proc(const struct cluster_job *j)
{
    return j ? j->me : 0;
}

int cluster_job_procs(const struct cluster_job *j)
{
    return j ? j->procs : 1;
}

struct mpi_world *cluster_job_world(const struct cluster_job *j)
{
    return j ? j->w : NULL;
}

bool cluster_job_lost(const struct cluster_job *j, int proc, char *reason, size_t cap)
{
    return j && j->l && leader_lost(j->l, proc, reason, cap);
}

int cluster_job_lead(struct cluster_job *j, struct stack_config *sc)
{
    if (j->me != 0)
        return err_set(ERR_INVALID, "cluster: process %d is not process 0", j->me);
    int proc_of[STACK_MAX_DEVICES];
    for (int d = 0; d < sc->n_devices; d++)
        proc_of[d] = sc->procs_set ? sc->procs[d] : 0;
    struct leader_config lc = {.ctl_tag = CTL_TAG,
                               .beat_interval_s = j->beat_interval_s,
                               .beat_timeout_s = j->beat_timeout_s};
    int rc = leader_create(j->w, &lc, &j->l);
    if (rc == 0)
        rc = cluster_remote_create(j->w, j->l, proc_of, sc->n_devices, BATCH_TAGS, &j->r);
    if (rc < 0)
        return err_wrap(rc, "cluster");
    sc->remote = cluster_remote_ops(j->r);
    sc->n_procs = j->procs;
    return 0;
}

/* The heartbeats' callback on a follower: process 0 is gone. */
static void on_lost(void *arg, int proc, double silent_s)
{
    struct cluster_job *j = arg;
    (void)silent_s;
    if (proc != 0)
        return;
    pthread_mutex_lock(&j->lock);
    j->lost0 = true;
    if (j->f)
        follower_stop(j->f);
    pthread_mutex_unlock(&j->lock);
}

int cluster_job_follow(struct cluster_job *j, const struct stack_config *sc)
{
    struct mpi_watch_config wc = {.interval_s = j->beat_interval_s,
                                  .timeout_s = j->beat_timeout_s,
                                  .lost = on_lost,
                                  .arg = j};
    struct device *devices[STACK_MAX_DEVICES] = {0};
    int proc_of[STACK_MAX_DEVICES];
    for (int d = 0; d < sc->n_devices; d++)
        proc_of[d] = sc->procs_set ? sc->procs[d] : 0;
    int rc = mpi_world_watch(j->w, &wc);
    /* a device that fails to open is reported here, and process 0 learns
     * of it as this process's errors: the commands still get answers */
    int dev_rc = rc == 0 ? stack_open_devices_of(sc, j->me, devices) : 0;
    if (dev_rc < 0)
        fprintf(stderr, "shardswap: process %d: %s\n", j->me, err_msg());
    struct follower *f = NULL;
    if (rc == 0 && (rc = follower_create(j->w, devices, proc_of, sc->n_devices, CTL_TAG, &f)) == 0) {
        pthread_mutex_lock(&j->lock);
        j->f = f;
        if (j->lost0)
            follower_stop(f);
        pthread_mutex_unlock(&j->lock);
        rc = follower_serve(f);
    }
    if (rc < 0)
        fprintf(stderr, "shardswap: process %d: %s\n", j->me, err_msg());
    pthread_mutex_lock(&j->lock);
    j->f = NULL;
    pthread_mutex_unlock(&j->lock);
    follower_destroy(f);
    for (int d = 0; d < sc->n_devices; d++)
        device_close(devices[d]);
    return rc < 0 ? rc : dev_rc;
}

void cluster_job_close(struct cluster_job *j)
{
    if (!j)
        return;
    if (j->l && leader_shutdown(j->l) < 0)
        fprintf(stderr, "shardswap: %s\n", err_msg());
    cluster_remote_destroy(j->r);
    leader_destroy(j->l);
    mpi_world_close(j->w);
    pthread_mutex_destroy(&j->lock);
    free(j);
}
