/* cluster/proto: every kind round-trips with its fields, re-encodes to the
 * same bytes, and decoding refuses (ERR_INVALID, naming the kind) every
 * truncation, a wrong magic, an unknown kind, a byte left over and counts
 * that break what a receiver relies on (tp x pp devices, the mask's count,
 * ids a multiple of t_new); encoding refuses the same. */
#include <math.h>
#include <string.h>

#include "cluster/proto.h"
#include "core/error.h"
#include "test.h"

static int32_t devices[4] = {0, 3, 1, 2};
static struct proto_place places[3] = {{0, 0, 0}, {0, 1, 4096}, {2, 5, 1ull << 40}};
static int32_t gtags[2] = {7, -1}, ctags[2] = {9, 10};
static int32_t ids[6] = {1, 2, 3, 4, 5, 128255};
static uint8_t mask[6] = {0, 1, 1, 1, 1, 1};
static float logits[3] = {1.0f, -INFINITY, 0.5f};

static double stats[3] = {1.5e10, 0, 123456789.0};
static struct proto_device devs[3] = {{0, 0, 1ull << 34}, {1, 0, 7}, {1, 3, 1ull << 20}};

/* One message of kind k with every field its body has. */
static struct proto_msg sample(enum proto_kind k)
{
    struct proto_msg m = {.kind = k, .seq = 1000 + (uint64_t)k};
    switch (k) {
    case PROTO_REGISTER:
        m.model = 3, m.name = "llama-a", m.path = "/models/a b", m.tp = 2, m.pp = 2;
        m.devices = devices, m.n_devices = 4, m.compute = "bf16";
        m.expert_parallel = 1;
        break;
    case PROTO_UNREGISTER:
    case PROTO_OFFLOAD:
        m.model = 4;
        break;
    case PROTO_LOAD:
        m.model = 5, m.places = places, m.n_places = 3;
        break;
    case PROTO_BATCH_OPEN:
        m.batch = 1ull << 33, m.model = 6, m.batch_size = 3, m.max_len = 512, m.max_tokens = 96;
        m.max_rows = 24, m.places = places, m.n_places = 2;
        m.group_tags = gtags, m.n_group_tags = 2, m.channel_tags = ctags, m.n_channel_tags = 2;
        break;
    case PROTO_BATCH_CLEAR:
        m.batch = 8, m.slot = 2;
        break;
    case PROTO_BATCH_CLOSE:
        m.batch = 9;
        break;
    case PROTO_STEP:
        m.batch = 10, m.t_new = 2, m.flags = PROTO_STEP_ALL_POSITIONS | PROTO_STEP_OVERLAP;
        m.ids = ids, m.n_ids = 6, m.mask = mask, m.n_mask = 6;
        break;
    case PROTO_REPLY:
        m.status = ERR_NOMEM, m.message = "device 1/cpu:0: no room";
        break;
    case PROTO_BATCH_ABORT:
        m.batch = 11, m.status = ERR_UNREACHABLE;
        break;
    case PROTO_STEP_DONE:
        m.batch = 12, m.status = 0, m.message = "", m.logits = logits, m.n_logits = 3;
        break;
    case PROTO_STATS:
        m.flags = PROTO_STATS_MEASURE, m.threads = 2, m.bytes = 64u << 20;
        break;
    case PROTO_STATS_DONE:
        m.status = 0, m.message = "", m.stats = stats, m.n_stats = 3;
        break;
    case PROTO_DEVICES:
        m.dev_kind = PROTO_DEVICE_CUDA, m.link_gbps = 12.5, m.devs = devs, m.n_devs = 3;
        m.host_budget = 3ull << 32;
        break;
    default:
        break;
    }
    return m;
}

static bool str_eq(const char *a, const char *b)
{
    return strcmp(a ? a : "", b ? b : "") == 0;
}

static bool same(const struct proto_msg *a, const struct proto_msg *b)
{
    bool ok = a->kind == b->kind && a->seq == b->seq && a->model == b->model &&
              a->batch == b->batch && str_eq(a->name, b->name) && str_eq(a->path, b->path) &&
              str_eq(a->compute, b->compute) && str_eq(a->message, b->message) && a->tp == b->tp &&
              a->expert_parallel == b->expert_parallel && a->pp == b->pp &&
              a->n_devices == b->n_devices && a->n_places == b->n_places &&
              a->batch_size == b->batch_size && a->max_len == b->max_len &&
              a->max_tokens == b->max_tokens && a->max_rows == b->max_rows &&
              a->n_group_tags == b->n_group_tags && a->n_channel_tags == b->n_channel_tags &&
              a->slot == b->slot && a->t_new == b->t_new && a->flags == b->flags &&
              a->n_ids == b->n_ids && a->n_mask == b->n_mask && a->status == b->status &&
              a->n_logits == b->n_logits && a->n_devs == b->n_devs && a->dev_kind == b->dev_kind &&
              a->link_gbps == b->link_gbps && a->host_budget == b->host_budget &&
              a->threads == b->threads && a->bytes == b->bytes && a->n_stats == b->n_stats;
    ok = ok && (!a->n_stats || !memcmp(a->stats, b->stats, a->n_stats * sizeof(double)));
    for (uint32_t i = 0; ok && i < a->n_devs; i++)
        ok = a->devs[i].proc == b->devs[i].proc && a->devs[i].gpu == b->devs[i].gpu &&
             a->devs[i].budget == b->devs[i].budget;
    ok = ok && (!a->n_devices || !memcmp(a->devices, b->devices, a->n_devices * 4));
    for (uint32_t i = 0; ok && i < a->n_places; i++)
        ok = a->places[i].shard == b->places[i].shard &&
             a->places[i].offset == b->places[i].offset &&
             (a->kind != PROTO_LOAD || a->places[i].blob == b->places[i].blob);
    ok = ok && (!a->n_group_tags || !memcmp(a->group_tags, b->group_tags, a->n_group_tags * 4));
    ok = ok &&
         (!a->n_channel_tags || !memcmp(a->channel_tags, b->channel_tags, a->n_channel_tags * 4));
    ok = ok && (!a->n_ids || !memcmp(a->ids, b->ids, a->n_ids * 4));
    ok = ok && (!a->n_mask || !memcmp(a->mask, b->mask, a->n_mask));
    ok = ok && (!a->n_logits || !memcmp(a->logits, b->logits, a->n_logits * 4));
    return ok;
}

TEST(every_kind_round_trips)
{
    for (int k = PROTO_REGISTER; k < PROTO_KIND_END; k++) {
        struct proto_msg m = sample((enum proto_kind)k), got;
        struct strbuf b = {0}, again = {0};
        CHECK_MSG(proto_encode(&m, &b) == 0, "%s: %s", proto_kind_name(k), err_msg());
        CHECK_MSG(proto_decode(b.p, b.len, &got) == 0, "%s: %s", proto_kind_name(k), err_msg());
        CHECK_MSG(same(&m, &got), "%s: fields differ after a round trip", proto_kind_name(k));
        CHECK(proto_encode(&got, &again) == 0 && again.len == b.len &&
              memcmp(again.p, b.p, b.len) == 0);
        int refused = 0;
        for (size_t cut = 0; cut < b.len; cut++) {
            struct proto_msg t;
            refused += proto_decode(b.p, cut, &t) == ERR_INVALID;
        }
        CHECK_MSG(refused == (int)b.len, "%s: %d of %zu truncations refused", proto_kind_name(k),
                  refused, b.len);
        strbuf_append(&b, "", 1); /* a byte left over */
        struct proto_msg t;
        CHECK(proto_decode(b.p, b.len, &t) == ERR_INVALID && strstr(err_msg(), "left over"));
        CHECK(strstr(err_msg(), proto_kind_name(k)) != NULL);
        proto_msg_free(&got);
        strbuf_free(&b);
        strbuf_free(&again);
    }
}

TEST(refusals)
{
    struct proto_msg m = sample(PROTO_STEP), t;
    struct strbuf b = {0};
    CHECK(proto_encode(&m, &b) == 0);
    b.p[0] ^= 1; /* the magic */
    CHECK(proto_decode(b.p, b.len, &t) == ERR_INVALID && strstr(err_msg(), "magic"));
    b.p[0] ^= 1;
    b.p[4] = 99; /* the kind */
    CHECK(proto_decode(b.p, b.len, &t) == ERR_INVALID && strstr(err_msg(), "unknown kind 99"));
    strbuf_free(&b);

    m.n_mask = 5; /* not the ids' count */
    CHECK(proto_encode(&m, &b) == ERR_INVALID && strstr(err_msg(), "mask"));
    m.n_mask = 6;
    m.t_new = 4; /* 6 ids are not whole steps of 4 */
    CHECK(proto_encode(&m, &b) == ERR_INVALID && strstr(err_msg(), "ids"));
    struct proto_msg r = sample(PROTO_REGISTER);
    r.n_devices = 3; /* tp x pp is 4 */
    CHECK(proto_encode(&r, &b) == ERR_INVALID && strstr(err_msg(), "devices"));
    m.kind = PROTO_KIND_END;
    CHECK(proto_encode(&m, &b) == ERR_INVALID);
    strbuf_free(&b);
    CHECK(strcmp(proto_kind_name(PROTO_STEP_DONE), "STEP_DONE") == 0);
    CHECK(strcmp(proto_kind_name((enum proto_kind)77), "?") == 0);
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, NULL);
}
