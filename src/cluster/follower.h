/* A process other than rank 0 in a job serving across processes: it owns
 * its node's devices and carries out rank 0's commands (cluster/proto.h) on
 * them, in the order they come: registers a model's checkpoint (its own
 * copy, same path), loads its shards' blobs at the offsets rank 0's view of
 * each device chose (device_alloc_at; a LOAD names one shard or several, and
 * a shard is loaded once all its blobs are placed), opens a batch's execution contexts
 * (model_exec_init_at) with the TP groups and PP channels the command tags,
 * runs a step on every one of its shards at once (one compute thread per
 * device, model_forward_stage) and answers with the status and, from the
 * process holding TP rank 0 of the last stage, the logits.
 *
 * Threads: follower_serve runs on the caller's thread (receiving,
 * handling, answering) and never waits for a load or a step: a LOAD's
 * copies run on its shards' devices' loaders (a core/workq each), a STEP
 * on their compute threads (one per device), each answered from there by
 * its last job; a step waits blob by blob for a load still under way, so
 * it computes while the rest loads. A BATCH_ABORT reaches a step in
 * flight: its collectives and channels here are aborted, so a shard that
 * waits for a peer that failed returns. */
#ifndef SHARDSWAP_CLUSTER_FOLLOWER_H
#define SHARDSWAP_CLUSTER_FOLLOWER_H

struct device;
struct mpi_world;
struct follower;

/* devices[d] is job device d when this process owns it (open, the caller's,
 * outliving the follower), else NULL; proc_of[d] the process that owns it.
 * ctl_tag: the tag of rank 0's commands and of the answers. */
int follower_create(struct mpi_world *w, struct device *const *devices, const int *proc_of,
                    int n_devices, int ctl_tag, struct follower **out);
/* Receives and carries out commands from process 0 until SHUTDOWN (0) or
 * until the channel to process 0 fails or follower_stop (its error). A command that fails
 * is answered with its error and message; the follower goes on. */
int follower_serve(struct follower *f);
/* Makes follower_serve return ERR_UNREACHABLE between commands (a command being
 * carried out ends first): for the heartbeats' lost callback when process 0
 * is gone. Any thread; it only sets a flag. */
void follower_stop(struct follower *f);
/* Frees every model and batch still open. NULL-safe. */
void follower_destroy(struct follower *f);

#endif
