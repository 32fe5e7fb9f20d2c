/* backend/view: another process's device as rank 0 sees it. Its memory
 * is bookkeeping whose placements a real device replays by offset
 * (device_alloc_at) to the same free bytes, largest block and fragments;
 * its events are host events; copies and streams are refused, naming the
 * owner; and device_alloc_at on a real device refuses a range in use. */
#include <stdlib.h>
#include <string.h>

#include "backend/device.h"
#include "core/error.h"
#include "model/model.h"
#include "test.h"

#define MIB (1u << 20)

TEST(view_and_owner_agree)
{
    struct device *view = NULL, *owner = NULL;
    CHECK(device_open_view(1, DEVICE_CPU, "cpu:0", 4 * MIB, &view) == 0);
    CHECK(device_open_cpu(0, 4 * MIB, &owner) == 0);
    if (!view || !owner)
        return;
    CHECK(strcmp(device_name(view), "1/cpu:0") == 0);
    CHECK(device_proc(view) == 1 && device_proc(owner) == -1);
    CHECK(device_kind(view) == DEVICE_CPU);
    /* a history with holes: sizes as blobs would have, some freed */
    static const size_t sizes[] = {100000, 64, 333333, 4096, 777, 1 << 20, 5000, 12345};
    enum { N = sizeof sizes / sizeof sizes[0] };
    struct dbuf *v[N] = {0}, *o[N] = {0};
    for (int i = 0; i < N; i++) {
        CHECK(device_alloc(view, sizes[i], &v[i]) == 0);
        CHECK(v[i] && device_alloc_at(owner, dbuf_offset(v[i]), sizes[i], &o[i]) == 0);
        CHECK(o[i] && dbuf_offset(o[i]) == dbuf_offset(v[i]));
        if (i % 3 == 1) {
            device_free(v[i - 1]);
            device_free(o[i - 1]);
            v[i - 1] = o[i - 1] = NULL;
        }
    }
    struct dbuf *again = NULL, *placed = NULL; /* first fit into a hole, replayed */
    CHECK(device_alloc(view, 50000, &again) == 0);
    CHECK(again && device_alloc_at(owner, dbuf_offset(again), 50000, &placed) == 0);
    CHECK(device_used(view) == device_used(owner));
    CHECK(device_largest_free(view) == device_largest_free(owner));
    CHECK(device_free_blocks(view) == device_free_blocks(owner) && device_free_blocks(view) > 1);
    /* the owner's memory is real: writable where the view placed it */
    if (placed)
        memset(dbuf_ptr(placed), 0x5a, 50000);

    /* a range in use is refused on the owner (the views disagree) */
    struct dbuf *clash = NULL;
    CHECK(o[2] && device_alloc_at(owner, dbuf_offset(o[2]), 64, &clash) == ERR_NOMEM);
    CHECK(clash == NULL && strstr(err_msg(), "not free there") != NULL);
    CHECK(device_alloc_at(owner, 32, 64, &clash) == ERR_INVALID);

    device_free(again);
    device_free(placed);
    for (int i = 0; i < N; i++) {
        device_free(v[i]);
        device_free(o[i]);
    }
    CHECK(device_used(view) == 0 && device_free_blocks(view) == 1);
    device_close(view);
    device_close(owner);
}

TEST(refusals_and_events)
{
    struct device *view = NULL;
    CHECK(device_open_view(2, DEVICE_CPU, "cpu:3", MIB, &view) == 0);
    if (!view)
        return;
    struct dbuf *b = NULL;
    CHECK(device_alloc(view, 4096, &b) == 0);
    char host[64] = {0};
    CHECK(device_copy_h2d(view, b, 0, host, sizeof host, NULL) == ERR_UNSUPPORTED);
    CHECK(strstr(err_msg(), "2/cpu:3") && strstr(err_msg(), "process 2"));
    struct stream *s = NULL;
    CHECK(device_stream_create(view, &s) == ERR_UNSUPPORTED && s == NULL);
    void *p = NULL;
    CHECK(device_host_alloc(view, 4096, &p) == ERR_UNSUPPORTED);
    struct device_event *ev = NULL;
    CHECK(device_event_create(view, &ev) == 0);
    CHECK(ev && !device_event_done(ev));
    device_event_signal(ev, ERR_IO); /* what a failed remote load reports */
    CHECK(device_event_done(ev) && device_event_wait(ev) == ERR_IO);
    device_event_reset(ev);
    CHECK(!device_event_done(ev));
    device_event_destroy(ev);
    device_free(b);
    device_close(view);
}

/* A batch's context placed by the view and carried out on the owner at the
 * same offset computes what a context of its own does (bit for bit). */
TEST(exec_context_at_the_views_offset)
{
    struct model *m = NULL;
    CHECK(model_open(SHARDSWAP_SOURCE_DIR "/tests/fixtures/models/llama_gqa_f32", &m) == 0);
    if (!m)
        return;
    struct model_exec_shape shape = {.batch = 2, .max_len = 8, .max_rows = 2};
    struct device *view = NULL, *owner = NULL;
    CHECK(device_open_view(1, DEVICE_CPU, "cpu:0", 8 * MIB, &view) == 0);
    CHECK(device_open_cpu(0, 8 * MIB, &owner) == 0);
    size_t bytes = model_exec_bytes(m, view, &shape);
    CHECK(bytes > 0 && bytes == model_exec_bytes(m, owner, &shape));
    struct dbuf *hole = NULL, *placed = NULL;
    CHECK(device_alloc(view, 4096, &hole) == 0); /* so the offset is not 0 */
    CHECK(device_alloc(view, bytes, &placed) == 0);
    struct dbuf *pad = NULL;
    CHECK(device_alloc_at(owner, 0, 4096, &pad) == 0);
    struct model_exec *ex = NULL, *ref = NULL;
    CHECK(placed && model_exec_init_at(m, owner, NULL, &shape, dbuf_offset(placed), &ex) == 0);
    CHECK(model_exec_open_cpu(m, &shape, &ref) == 0);
    const int V = model_info(m)->vocab;
    int32_t ids[2 * 4] = {1, 5, 9, 13, 2, 6, 10, 14};
    float *a = malloc(sizeof(float) * 2 * V), *b = malloc(sizeof(float) * 2 * V);
    CHECK(ex && ref && model_forward(m, ex, ids, NULL, 4, false, a) == 0);
    CHECK(ex && ref && model_forward(m, ref, ids, NULL, 4, false, b) == 0);
    CHECK(memcmp(a, b, sizeof(float) * 2 * V) == 0);
    struct model_exec *clash = NULL; /* the same offset again: taken */
    CHECK(placed &&
          model_exec_init_at(m, owner, NULL, &shape, dbuf_offset(placed), &clash) == ERR_NOMEM);
    free(a);
    free(b);
    model_exec_free(ex);
    model_exec_free(ref);
    device_free(pad);
    device_free(hole);
    device_free(placed);
    device_close(view);
    device_close(owner);
    model_close(m);
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, NULL);
}
