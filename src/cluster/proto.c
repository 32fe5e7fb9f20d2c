/* cluster/proto.h: each kind's body as a flat list of wire fields, written
 * by put_body and read by get_body in the same order (test_proto
 * round-trips every kind and cuts every message short). */
#include "cluster/proto.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/wire.h"

static const char *const kind_names[PROTO_KIND_END] = {
    [PROTO_REGISTER] = "REGISTER",
    [PROTO_UNREGISTER] = "UNREGISTER",
    [PROTO_LOAD] = "LOAD",
    [PROTO_OFFLOAD] = "OFFLOAD",
    [PROTO_BATCH_OPEN] = "BATCH_OPEN",
    [PROTO_BATCH_CLEAR] = "BATCH_CLEAR",
    [PROTO_BATCH_CLOSE] = "BATCH_CLOSE",
    [PROTO_STEP] = "STEP",
    [PROTO_SHUTDOWN] = "SHUTDOWN",
    [PROTO_REPLY] = "REPLY",
    [PROTO_BATCH_ABORT] = "BATCH_ABORT",
    [PROTO_DEVICES] = "DEVICES",
    [PROTO_END] = "END",
    [PROTO_STATS] = "STATS",
    [PROTO_STATS_DONE] = "STATS_DONE",
    [PROTO_STEP_DONE] = "STEP_DONE",
};

const char *proto_kind_name(enum proto_kind k)
{
    return k > 0 && k < PROTO_KIND_END ? kind_names[k] : "?";
}

/* ---- writing ---- */

static void put_places(struct wire_out *w, const struct proto_msg *m, bool blobs)
{
    wire_put_u32(w, m->n_places);
    for (uint32_t i = 0; i < m->n_places; i++) {
        wire_put_u32(w, m->places[i].shard);
        if (blobs)
            wire_put_u32(w, m->places[i].blob);
        wire_put_u64(w, m->places[i].offset);
    }
}

static void put_body(struct wire_out *w, const struct proto_msg *m)
{
    switch (m->kind) {
    case PROTO_REGISTER:
        wire_put_u32(w, m->model);
        wire_put_str(w, m->name);
        wire_put_str(w, m->path);
        wire_put_u32(w, m->tp);
        wire_put_u32(w, m->pp);
        wire_put_i32s(w, m->devices, m->n_devices);
        wire_put_str(w, m->compute);
        wire_put_u8(w, m->expert_parallel);
        break;
    case PROTO_UNREGISTER:
    case PROTO_OFFLOAD:
        wire_put_u32(w, m->model);
        break;
    case PROTO_LOAD:
        wire_put_u32(w, m->model);
        put_places(w, m, true);
        break;
    case PROTO_BATCH_OPEN:
        wire_put_u64(w, m->batch);
        wire_put_u32(w, m->model);
        wire_put_u32(w, m->batch_size);
        wire_put_u32(w, m->max_len);
        wire_put_u32(w, m->max_tokens);
        wire_put_u32(w, m->max_rows);
        put_places(w, m, false);
        wire_put_i32s(w, m->group_tags, m->n_group_tags);
        wire_put_i32s(w, m->channel_tags, m->n_channel_tags);
        break;
    case PROTO_BATCH_CLEAR:
        wire_put_u64(w, m->batch);
        wire_put_u32(w, m->slot);
        break;
    case PROTO_BATCH_CLOSE:
        wire_put_u64(w, m->batch);
        break;
    case PROTO_STEP:
        wire_put_u64(w, m->batch);
        wire_put_u32(w, m->t_new);
        wire_put_u8(w, m->flags);
        wire_put_i32s(w, m->ids, m->n_ids);
        wire_put_u8s(w, m->mask, m->n_mask);
        break;
    case PROTO_DEVICES:
        wire_put_u8(w, m->dev_kind);
        wire_put_f64(w, m->link_gbps);
        wire_put_u64(w, m->host_budget);
        wire_put_u32(w, m->n_devs);
        for (uint32_t i = 0; i < m->n_devs; i++) {
            wire_put_i32(w, m->devs[i].proc);
            wire_put_i32(w, m->devs[i].gpu);
            wire_put_u64(w, m->devs[i].budget);
        }
        break;
    case PROTO_STATS:
        wire_put_u8(w, m->flags);
        wire_put_u32(w, m->threads);
        wire_put_u64(w, m->bytes);
        break;
    case PROTO_STATS_DONE:
        wire_put_i32(w, m->status);
        wire_put_str(w, m->message);
        wire_put_u32(w, m->n_stats);
        for (uint32_t i = 0; i < m->n_stats; i++)
            wire_put_f64(w, m->stats[i]);
        break;
    case PROTO_SHUTDOWN:
    case PROTO_END:
    case PROTO_KIND_END:
        break;
    case PROTO_REPLY:
        wire_put_i32(w, m->status);
        wire_put_str(w, m->message);
        break;
    case PROTO_BATCH_ABORT:
        wire_put_u64(w, m->batch);
        wire_put_i32(w, m->status);
        break;
    case PROTO_STEP_DONE:
        wire_put_u64(w, m->batch);
        wire_put_i32(w, m->status);
        wire_put_str(w, m->message);
        wire_put_f32s(w, m->logits, m->n_logits);
        break;
    }
}

/* What a receiver may rely on, checked on both sides. */
static int check_limits(const struct proto_msg *m, const char *what)
{
    const char *field = NULL;
    if (m->n_devices > PROTO_MAX_SHARDS || (uint64_t)m->tp * m->pp > PROTO_MAX_SHARDS)
        field = "devices";
    else if (m->kind == PROTO_REGISTER && (m->tp < 1 || m->pp < 1 || m->n_devices != m->tp * m->pp))
        field = "devices";
    else if (m->expert_parallel > 1)
        field = "expert_parallel";
    else if (m->n_places > PROTO_MAX_ENTRIES)
        field = "places";
    else if (m->n_group_tags > PROTO_MAX_SHARDS || m->n_channel_tags > PROTO_MAX_SHARDS)
        field = "tags";
    else if (m->n_ids > PROTO_MAX_TOKENS || (m->n_mask != 0 && m->n_mask != m->n_ids))
        field = "mask";
    else if (m->kind == PROTO_STEP && (m->t_new == 0 || m->n_ids % m->t_new != 0))
        field = "ids";
    else if (m->n_logits > PROTO_MAX_LOGITS)
        field = "logits";
    else if (m->n_devs > PROTO_MAX_DEVICES || (m->kind == PROTO_DEVICES && m->n_devs == 0))
        field = "devices";
    else if (m->dev_kind > PROTO_DEVICE_CUDA || !(m->link_gbps >= 0))
        field = "kind";
    else if (m->n_stats > PROTO_MAX_STATS)
        field = "stats";
    else if (m->kind == PROTO_STATS && (m->threads > 256 || m->bytes > (1ull << 34)))
        field = "threads";
    if (field)
        return err_set(ERR_INVALID, "%s: %s message: field %s out of range", what,
                       proto_kind_name(m->kind), field);
    return 0;
}

int proto_encode(const struct proto_msg *m, struct strbuf *out)
{
    if (m->kind <= 0 || m->kind >= PROTO_KIND_END)
        return err_set(ERR_INVALID, "proto: cannot encode a message of kind %d", (int)m->kind);
    int rc = check_limits(m, "proto encode");
    if (rc < 0)
        return rc;
    struct wire_out w = {.b = *out};
    wire_put_u32(&w, PROTO_MAGIC);
    wire_put_u32(&w, (uint32_t)m->kind);
    wire_put_u64(&w, m->seq);
    put_body(&w, m);
    *out = w.b;
    return wire_out_error(&w, proto_kind_name(m->kind));
}

/* ---- reading ---- */

static struct proto_place *get_places(struct wire_in *r, bool blobs, uint32_t *n)
{
    *n = wire_get_u32(r, "places");
    if (!r->bad && (*n > PROTO_MAX_ENTRIES || *n > (r->len - r->pos) / (blobs ? 16 : 12)))
        r->bad = "places";
    if (r->bad || *n == 0) {
        *n = 0;
        return NULL;
    }
    struct proto_place *p = calloc(*n, sizeof *p);
    if (!p) {
        r->bad = "places";
        *n = 0;
        return NULL;
    }
    for (uint32_t i = 0; i < *n; i++) {
        p[i].shard = wire_get_u32(r, "places");
        p[i].blob = blobs ? wire_get_u32(r, "places") : 0;
        p[i].offset = wire_get_u64(r, "places");
    }
    return p;
}

static double *get_f64s(struct wire_in *r, uint32_t *n)
{
    *n = wire_get_u32(r, "stats");
    if (!r->bad && (*n > PROTO_MAX_STATS || *n > (r->len - r->pos) / 8))
        r->bad = "stats";
    if (r->bad || *n == 0) {
        *n = 0;
        return NULL;
    }
    double *v = calloc(*n, sizeof *v);
    if (!v) {
        r->bad = "stats";
        *n = 0;
        return NULL;
    }
    for (uint32_t i = 0; i < *n; i++)
        v[i] = wire_get_f64(r, "stats");
    return v;
}

static struct proto_device *get_devices(struct wire_in *r, uint32_t *n)
{
    *n = wire_get_u32(r, "devices");
    if (!r->bad && (*n > PROTO_MAX_DEVICES || *n > (r->len - r->pos) / 16))
        r->bad = "devices";
    if (r->bad || *n == 0) {
        *n = 0;
        return NULL;
    }
    struct proto_device *d = calloc(*n, sizeof *d);
    if (!d) {
        r->bad = "devices";
        *n = 0;
        return NULL;
    }
    for (uint32_t i = 0; i < *n; i++) {
        d[i].proc = wire_get_i32(r, "devices");
        d[i].gpu = wire_get_i32(r, "devices");
        d[i].budget = wire_get_u64(r, "devices");
    }
    return d;
}

static void get_body(struct wire_in *r, struct proto_msg *m)
{
    switch (m->kind) {
    case PROTO_REGISTER:
        m->model = wire_get_u32(r, "model");
        m->name = wire_get_str(r, PROTO_MAX_TEXT, "name");
        m->path = wire_get_str(r, PROTO_MAX_TEXT, "path");
        m->tp = wire_get_u32(r, "tp");
        m->pp = wire_get_u32(r, "pp");
        m->devices = wire_get_i32s(r, PROTO_MAX_SHARDS, &m->n_devices, "devices");
        m->compute = wire_get_str(r, PROTO_MAX_TEXT, "compute");
        m->expert_parallel = wire_get_u8(r, "expert_parallel");
        break;
    case PROTO_UNREGISTER:
    case PROTO_OFFLOAD:
        m->model = wire_get_u32(r, "model");
        break;
    case PROTO_LOAD:
        m->model = wire_get_u32(r, "model");
        m->places = get_places(r, true, &m->n_places);
        break;
    case PROTO_BATCH_OPEN:
        m->batch = wire_get_u64(r, "batch");
        m->model = wire_get_u32(r, "model");
        m->batch_size = wire_get_u32(r, "batch_size");
        m->max_len = wire_get_u32(r, "max_len");
        m->max_tokens = wire_get_u32(r, "max_tokens");
        m->max_rows = wire_get_u32(r, "max_rows");
        m->places = get_places(r, false, &m->n_places);
        m->group_tags = wire_get_i32s(r, PROTO_MAX_SHARDS, &m->n_group_tags, "group_tags");
        m->channel_tags = wire_get_i32s(r, PROTO_MAX_SHARDS, &m->n_channel_tags, "channel_tags");
        break;
    case PROTO_BATCH_CLEAR:
        m->batch = wire_get_u64(r, "batch");
        m->slot = wire_get_u32(r, "slot");
        break;
    case PROTO_BATCH_CLOSE:
        m->batch = wire_get_u64(r, "batch");
        break;
    case PROTO_STEP:
        m->batch = wire_get_u64(r, "batch");
        m->t_new = wire_get_u32(r, "t_new");
        m->flags = wire_get_u8(r, "flags");
        m->ids = wire_get_i32s(r, PROTO_MAX_TOKENS, &m->n_ids, "ids");
        m->mask = wire_get_u8s(r, PROTO_MAX_TOKENS, &m->n_mask, "mask");
        break;
    case PROTO_DEVICES:
        m->dev_kind = wire_get_u8(r, "kind");
        m->link_gbps = wire_get_f64(r, "link_gbps");
        m->host_budget = wire_get_u64(r, "host_budget");
        m->devs = get_devices(r, &m->n_devs);
        break;
    case PROTO_STATS:
        m->flags = wire_get_u8(r, "flags");
        m->threads = wire_get_u32(r, "threads");
        m->bytes = wire_get_u64(r, "bytes");
        break;
    case PROTO_STATS_DONE:
        m->status = wire_get_i32(r, "status");
        m->message = wire_get_str(r, PROTO_MAX_TEXT, "message");
        m->stats = get_f64s(r, &m->n_stats);
        break;
    case PROTO_SHUTDOWN:
    case PROTO_END:
    case PROTO_KIND_END:
        break;
    case PROTO_REPLY:
        m->status = wire_get_i32(r, "status");
        m->message = wire_get_str(r, PROTO_MAX_TEXT, "message");
        break;
    case PROTO_BATCH_ABORT:
        m->batch = wire_get_u64(r, "batch");
        m->status = wire_get_i32(r, "status");
        break;
    case PROTO_STEP_DONE:
        m->batch = wire_get_u64(r, "batch");
        m->status = wire_get_i32(r, "status");
        m->message = wire_get_str(r, PROTO_MAX_TEXT, "message");
        m->logits = wire_get_f32s(r, PROTO_MAX_LOGITS, &m->n_logits, "logits");
        break;
    }
}

int proto_decode(const void *p, size_t len, struct proto_msg *m)
{
    memset(m, 0, sizeof *m);
    struct wire_in r;
    wire_in_init(&r, p, len);
    uint32_t magic = wire_get_u32(&r, "magic");
    uint32_t kind = wire_get_u32(&r, "kind");
    m->seq = wire_get_u64(&r, "seq");
    if (!r.bad && magic != PROTO_MAGIC)
        return err_set(ERR_INVALID, "proto: a message of %zu bytes does not start with the magic",
                       len);
    if (!r.bad && (kind == 0 || kind >= PROTO_KIND_END))
        return err_set(ERR_INVALID, "proto: a message of unknown kind %u", kind);
    m->kind = (enum proto_kind)kind;
    if (!r.bad)
        get_body(&r, m);
    char what[48];
    snprintf(what, sizeof what, "proto: %s message", m->kind ? proto_kind_name(m->kind) : "a");
    int rc = wire_in_end(&r, what);
    if (rc == 0)
        rc = check_limits(m, "proto");
    if (rc < 0)
        proto_msg_free(m);
    return rc;
}

void proto_msg_free(struct proto_msg *m)
{
    if (!m)
        return;
    free(m->name);
    free(m->path);
    free(m->compute);
    free(m->message);
    free(m->devices);
    free(m->places);
    free(m->group_tags);
    free(m->channel_tags);
    free(m->ids);
    free(m->mask);
    free(m->logits);
    free(m->devs);
    free(m->stats);
    memset(m, 0, sizeof *m);
}
