/* Collectives inside one model's worker group, through per-rank handles.
 *
 * A group has n ranks; each rank holds its own handle (struct comm, owned by
 * the group) and calls every collective through it, and all ranks call the
 * same collectives in the same order (as with MPI/NCCL). A collective is
 * queued on the stream the rank computes on, after the work already queued
 * there, and later work on that stream sees its result: with the in-process
 * backends the call returns once the rank's part is done; with NCCL it
 * returns once queued. Other ranks' buffers may be read and written until the
 * collective is done, so buffers of different ranks must not overlap.
 * Errors (a backend failure, or a group aborted because a peer failed) come
 * back as a negative code with a message.
 *
 * A rank that fails outside a collective would leave its peers waiting in
 * the next one forever: whoever sees the failure aborts the group
 * (comm_group_abort) and the channels its ranks use (comm_channel_abort), and
 * every rank's pending and later calls on them return the error. An abort is
 * for good: the group carries no more collectives; make a new one.
 *
 * The group's implementation is chosen by the kind of its devices: threads of
 * this process for CPU devices; for CUDA devices NCCL, or an in-process
 * implementation when ranks share a GPU (comm_cuda.h); MPI across processes
 * would implement the same table (comm_impl.h).
 *
 * Point-to-point channels carry pipeline-parallel activations from one
 * stage's rank to the next stage's rank.
 */
#ifndef SHARDSWAP_COMM_COMM_H
#define SHARDSWAP_COMM_COMM_H

#include <stddef.h>

struct device;
struct stream;
struct comm_group;
struct comm; /* one rank's handle on a group */

/* A group whose rank r computes on devices[r]: the implementation follows
 * the devices' kind (CPU: threads). ERR_UNSUPPORTED, naming the kind, for
 * devices no built backend serves; ERR_INVALID for mixed kinds or n < 1. */
int comm_group_create(struct device *const *devices, int n_ranks, struct comm_group **out);
/* n_ranks threads of this process. ERR_INVALID when n_ranks < 1, ERR_NOMEM;
 * *out is NULL on failure. */
int comm_group_create_threads(int n_ranks, struct comm_group **out);
void comm_group_destroy(struct comm_group *g); /* NULL-safe; no collective may be running */
int comm_group_size(const struct comm_group *g);
/* Rank r's handle; owned by g, valid until g is destroyed. */
struct comm *comm_group_rank(struct comm_group *g, int rank);

int comm_rank(const struct comm *c);
int comm_size(const struct comm *c);

/* buf[0..n) = sum over ranks of buf[0..n), in place, on every rank. Every
 * rank passes the same n. The sum is taken in rank order, so every rank gets
 * bit-identical results; NCCL groups (CUDA ranks on distinct GPUs) also give
 * every rank identical results, but in NCCL's order of summation, which may
 * differ from the rank-order sum in the last bits. s: the stream buf is
 * computed on (NULL: the host's buffers, nothing queued; CUDA groups need
 * it). */
int comm_allreduce_sum(struct comm *c, struct stream *s, float *buf, size_t n);

/* Gathers column blocks into root's row-major out (rows, total_cols): rank r
 * contributes local (rows, local_cols) as columns [col0, col0 + local_cols).
 * out is only read on root (others pass NULL). Blocks must tile the columns. */
int comm_gather_cols(struct comm *c, struct stream *s, int root, const float *local, int rows,
                     int local_cols, int col0, float *out, int total_cols);

int comm_barrier(struct comm *c);

/* Any thread, at any time (also while ranks wait in a collective): every
 * collective of g that is waiting, and every later one, returns rc (< 0) on
 * every rank, with a message saying the group was aborted. Idempotent: the
 * first rc stays. After an abort a rank may return from a collective while a
 * peer still finishes its part of it in that rank's buffer: keep a
 * collective's buffers alive until every rank has returned. */
void comm_group_abort(struct comm_group *g, int rc);
/* 0, or the rc of the first comm_group_abort. */
int comm_group_aborted(const struct comm_group *g);

/* A one-way channel between two threads, one message in flight at a time. */
struct comm_channel;
int comm_channel_create(struct comm_channel **out);
void comm_channel_destroy(struct comm_channel *c); /* NULL-safe */
/* Waits for s's work (buf is final), then blocks until the previous message
 * has been received, then hands buf over (copied; buf is free again when
 * this returns). s may be NULL for host memory. */
int comm_send(struct comm_channel *c, struct stream *s, const float *buf, size_t n);
/* Blocks until a message arrives; copies it to buf, in s's order. n must
 * equal the sent n (ERR_INVALID otherwise, naming both). */
int comm_recv(struct comm_channel *c, struct stream *s, float *buf, size_t n);
/* Any thread, at any time: a comm_send or comm_recv blocked on c, and every
 * later one, returns rc (< 0) with a message saying the channel was aborted;
 * a message in flight is dropped. Idempotent: the first rc stays. */
void comm_channel_abort(struct comm_channel *c, int rc);
/* 0, or the rc of the first comm_channel_abort. */
int comm_channel_aborted(struct comm_channel *c);

#endif
