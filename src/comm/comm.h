/* Collectives inside one model's worker group.
 *
 * A group has n ranks; rank r calls every collective with its own rank, and
 * all ranks call the same collectives in the same order (as with MPI/NCCL).
 * A collective returns on a rank once every rank has called it and the
 * rank's own part is done; other ranks' buffers may be read and written
 * until then, so buffers of different ranks must not overlap.
 * The in-process implementation (threads) is the one built now; MPI and NCCL
 * implement the same table later (comm_impl.h).
 *
 * Point-to-point channels carry pipeline-parallel activations from one
 * stage's rank to the next stage's rank.
 */
#ifndef SHARDSWAP_COMM_COMM_H
#define SHARDSWAP_COMM_COMM_H

#include <stddef.h>

struct comm_group;

/* n_ranks threads of this process. ERR_INVALID when n_ranks < 1, ERR_NOMEM;
 * *out is NULL on failure. */
int comm_group_create_threads(int n_ranks, struct comm_group **out);
void comm_group_destroy(struct comm_group *g); /* NULL-safe; no collective may be running */
int comm_group_size(const struct comm_group *g);

/* buf[0..n) = sum over ranks of buf[0..n), in place, on every rank. Every
 * rank passes the same n. The sum is taken in rank order, so every rank gets
 * bit-identical results. */
void comm_allreduce_sum(struct comm_group *g, int rank, float *buf, size_t n);

/* Gathers column blocks into root's row-major out (rows, total_cols): rank r
 * contributes local (rows, local_cols) as columns [col0, col0 + local_cols).
 * out is only read on root (others pass NULL). Blocks must tile the columns. */
void comm_gather_cols(struct comm_group *g, int rank, int root, const float *local, int rows,
                      int local_cols, int col0, float *out, int total_cols);

void comm_barrier(struct comm_group *g, int rank);

/* A one-way channel between two threads, one message in flight at a time. */
struct comm_channel;
int comm_channel_create(struct comm_channel **out);
void comm_channel_destroy(struct comm_channel *c); /* NULL-safe */
/* Blocks until the previous message has been received, then hands buf over
 * (copied; buf is free again when this returns). */
int comm_send(struct comm_channel *c, const float *buf, size_t n);
/* Blocks until a message arrives; copies it to buf. n must equal the sent n
 * (ERR_INVALID otherwise, naming both). */
int comm_recv(struct comm_channel *c, float *buf, size_t n);

#endif
