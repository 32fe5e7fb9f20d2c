/* cluster/job.h: the world; the leader and each stack's remote table on
 * process 0, a follower on the others. */
#include "cluster/job.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cluster/follower.h"
#include "cluster/leader.h"
#include "cluster/peers.h"
#include "cluster/proto.h"
#include "comm/mpi.h"
#include "core/error.h"
#include "core/timing.h"
#include "engine/stack.h"

enum { CTL_TAG = 100, BATCH_TAGS = 1000 };

struct cluster_job {
    struct mpi_world *w;
    int me, procs;
    double beat_interval_s, beat_timeout_s;
    struct leader *l;          /* process 0's */
    struct cluster_peers *r;   /* process 0, the stack being led */
    bool leading;              /* DEVICES sent, END not yet */
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
    /* process 0's heartbeats start now, as the followers' watch does: a
     * command that takes long before its first stack (or never opens one:
     * --help, a usage error) is not taken for a lost process 0 */
    if (j->me == 0) {
        struct leader_config lc = {.ctl_tag = CTL_TAG,
                                   .beat_interval_s = j->beat_interval_s,
                                   .beat_timeout_s = j->beat_timeout_s};
        if ((rc = leader_create(j->w, &lc, &j->l)) < 0) {
            err_wrap(rc, "cluster");
            mpi_world_close(j->w);
            pthread_mutex_destroy(&j->lock);
            free(j);
            return rc;
        }
    }
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

/* ---- process 0 ---- */

int cluster_job_lead(struct cluster_job *j, struct stack_config *sc)
{
    if (!j)
        return 0;
    if (j->me != 0)
        return err_set(ERR_INVALID, "cluster: process %d is not process 0", j->me);
    if (j->r)
        return err_set(ERR_BUSY, "cluster: a stack is led already (cluster_job_release first)");
    if (sc->n_devices < 1 || sc->n_devices > PROTO_MAX_DEVICES)
        return err_set(ERR_INVALID, "cluster: %d devices (1..%d)", sc->n_devices,
                       PROTO_MAX_DEVICES);
    sc->n_procs = j->procs;
    /* the host budget is process 0's, the same on every process */
    uint64_t budgets[STACK_MAX_DEVICES], host = 0;
    int rc = stack_budgets(sc, budgets, &host);
    if (rc < 0)
        return rc;
    int proc_of[STACK_MAX_DEVICES];
    struct proto_device devs[PROTO_MAX_DEVICES];
    bool cuda = sc->device_kind && strcmp(sc->device_kind, "cuda") == 0;
    for (int d = 0; d < sc->n_devices; d++) {
        proc_of[d] = sc->procs_set ? sc->procs[d] : 0;
        devs[d] = (struct proto_device){
            .proc = proc_of[d], .gpu = sc->gpus_set ? sc->gpus[d] : d, .budget = budgets[d]};
    }
    j->leading = true;
    struct proto_msg open = {.kind = PROTO_DEVICES,
                             .dev_kind = cuda ? PROTO_DEVICE_CUDA : PROTO_DEVICE_CPU,
                             .link_gbps = cuda ? 0 : sc->link_gbps,
                             .host_budget = host,
                             .devs = devs,
                             .n_devs = (uint32_t)sc->n_devices};
    if ((rc = leader_call_all(j->l, &open)) == 0 &&
        (rc = cluster_peers_create(j->w, j->l, proc_of, sc->n_devices, BATCH_TAGS, &j->r)) < 0)
        cluster_job_release(j);
    if (rc < 0)
        return err_wrap(rc, "cluster: opening the devices of the other processes");
    sc->remote = cluster_peers_ops(j->r);
    return 0;
}

void cluster_job_release(struct cluster_job *j)
{
    if (!j || !j->leading)
        return;
    j->leading = false;
    struct proto_msg end = {.kind = PROTO_END};
    if (leader_call_all(j->l, &end) < 0) /* a lost one's state is unknown: it is told nothing */
        fprintf(stderr, "shardswap: %s\n", err_msg());
    cluster_peers_destroy(j->r);
    j->r = NULL;
}

int cluster_job_stats(struct cluster_job *j, int proc, bool measure, int threads, size_t bytes,
                      struct cluster_proc_stats *out)
{
    *out = (struct cluster_proc_stats){0};
    if (!j || !j->l)
        return err_set(ERR_INVALID, "cluster: process 0 of a job asks for statistics");
    struct proto_msg cmd = {.kind = PROTO_STATS,
                            .flags = measure ? PROTO_STATS_MEASURE : 0,
                            .threads = (uint32_t)(threads > 0 ? threads : 1),
                            .bytes = bytes};
    double v[PROTO_MAX_STATS] = {0};
    uint32_t n = 0;
    int rc = leader_stats(j->l, proc, &cmd, v, PROTO_MAX_STATS, &n);
    if (rc < 0)
        return rc;
    if (n < PROTO_STAT_END)
        return err_set(ERR_INVALID, "cluster: process %d answered %u statistics (expected %d)",
                       proc, n, PROTO_STAT_END);
    *out = (struct cluster_proc_stats){.memcpy_bps = v[PROTO_STAT_MEMCPY_BPS],
                                       .stream_bps = v[PROTO_STAT_STREAM_BPS],
                                       .host_used = v[PROTO_STAT_HOST_USED],
                                       .host_budget = v[PROTO_STAT_HOST_BUDGET],
                                       .loads = v[PROTO_STAT_LOADS],
                                       .load_bytes = v[PROTO_STAT_LOAD_BYTES],
                                       .disk_bytes = v[PROTO_STAT_DISK_BYTES],
                                       .overlapped = v[PROTO_STAT_OVERLAPPED]};
    return 0;
}

/* ---- the other processes ---- */

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

int cluster_job_follow(struct cluster_job *j)
{
    if (!j || j->me == 0)
        return err_set(ERR_INVALID, "cluster: process 0 leads; it does not follow");
    struct mpi_watch_config wc = {.interval_s = j->beat_interval_s,
                                  .timeout_s = j->beat_timeout_s,
                                  .lost = on_lost,
                                  .arg = j};
    struct follower *f = NULL;
    int rc = mpi_world_watch(j->w, &wc);
    if (rc == 0 && (rc = follower_create(j->w, NULL, NULL, 0, CTL_TAG, &f)) == 0) {
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
    return rc;
}

/* A process lost now may have been continued a moment ago: its next beat
 * is due within an interval. Gives each one two intervals to be heard
 * again, so a close after it came back ends the job cleanly rather than
 * abort it (mpi_world_close aborts with a peer still lost). */
static void wait_found(struct cluster_job *j)
{
    const double until = time_now() + 2 * j->beat_interval_s + 0.1;
    for (int p = 0; p < j->procs; p++)
        while (p != j->me && mpi_world_proc_lost(j->w, p) && time_now() < until) {
            struct timespec ts = {0, 10 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
}

void cluster_job_close(struct cluster_job *j)
{
    if (!j)
        return;
    cluster_job_release(j);
    wait_found(j);
    if (j->l && leader_shutdown(j->l) < 0)
        fprintf(stderr, "shardswap: %s\n", err_msg());
    leader_destroy(j->l);
    mpi_world_close(j->w);
    pthread_mutex_destroy(&j->lock);
    free(j);
}
