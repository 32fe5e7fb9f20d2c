/* Process 0's side of serving across processes: swap/peers.h's table
 * carried out over the leader's command channel (cluster/leader.h), so the
 * swap manager and the device workers reach the devices of the other
 * processes (docs/ARCHITECTURE.md: "Processes").
 *
 *   load      REGISTER to every follower at a model's first load (its name,
 *             path, placement and precision then), then LOAD of the shard's
 *             blobs at the view's offsets to the device's owner; waits
 *   offload   OFFLOAD of the model to the shard's owner; waits
 *   forget    UNREGISTER to every follower; waits
 *   batch     BATCH_OPEN sent (answer read with the first step's), this
 *             process's ends of the TP groups and PP channels made with the
 *             same tags (comm/mpi.h); BATCH_CLEAR and BATCH_CLOSE posted
 *             (their place in the order is what matters; an error there is
 *             the follower's to log and the next step's to report)
 *   step      STEP sent under the caller's lock, answers awaited outside it
 *
 * Tags: every group and channel of an open batch has its own, from a pool
 * above the command tag; a closed batch's come back. Threads: any; one
 * lock over the tables, never held across a call. */
#ifndef SHARDSWAP_CLUSTER_PEERS_H
#define SHARDSWAP_CLUSTER_PEERS_H

struct leader;
struct mpi_world;
struct swap_peers;
struct cluster_peers;

/* proc_of[d]: the process owning job device d (n_devices of them); tags
 * for groups and channels are taken from tag_base up. */
int cluster_peers_create(struct mpi_world *w, struct leader *l, const int *proc_of, int n_devices,
                         int tag_base, struct cluster_peers **out);
/* The table to give swap_set_peers (as long as r lives). */
const struct swap_peers *cluster_peers_ops(const struct cluster_peers *r);
/* After the swap manager and workers using it are gone. NULL-safe. */
void cluster_peers_destroy(struct cluster_peers *r);

#endif
