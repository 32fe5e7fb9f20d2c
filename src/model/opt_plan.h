/* Internal to model/: the parts of a shard's plan. */
#ifndef SHARDSWAP_MODEL_OPT_PLAN_H
#define SHARDSWAP_MODEL_OPT_PLAN_H

#include "model/opt.h"

/* One tensor slice a shard holds. */
struct opt_part {
    char name[128];            /* checkpoint tensor name */
    int blob;                  /* 0: embeddings and head, 1 + i: local layer i */
    bool matrix;               /* else a vector (rows = length, cols = 1) */
    int rows, cols;            /* full tensor shape */
    int r0, nr, c0, nc;        /* the slice: rows [r0, r0 + nr) x cols [c0, c0 + nc) */
    enum dtype dtype;          /* in the blob: the checkpoint's for matrices, F32 for vectors */
    size_t offset;             /* in the blob */
    struct weight_view *view;  /* where a matrix binds */
    const float **vec;         /* where a vector binds */
};

/* An unbound shard: config, shard spec, vocabulary range, layer array. */
int opt_shard_alloc(const struct opt_config *cfg, const struct opt_shard *s,
                    struct opt_model **out);
/* The parts of m against ck (prefix and head detection); *parts malloc'd. */
int opt_plan(struct opt_model *m, const struct st_checkpoint *ck, struct opt_part **parts,
             int *n_parts);
/* ck's tensor for q, checked (presence, shape, alignment); NULL and *rc on error. */
const struct st_tensor *opt_part_tensor(const struct st_checkpoint *ck, const struct opt_part *q,
                                        int *rc);

#endif
