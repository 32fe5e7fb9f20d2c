/* Scheduling policies on hand-made snapshots (a simulated clock: times are
 * whatever the scenario says). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "sched/sched.h"
#include "test.h"

#define MB (1u << 20)

static struct sched_model models[8];
static struct sched_view view;

/* n models of 100 MB on one device of `free` MB free. */
static void scenario(int n, uint64_t free_mb, int max_loaded)
{
    memset(models, 0, sizeof(models));
    memset(&view, 0, sizeof(view));
    for (int i = 0; i < n; i++)
        models[i].bytes[0] = 100 * MB;
    view.n_models = n;
    view.n_devices = 1;
    view.models = models;
    view.free_bytes[0] = free_mb * MB;
    for (int i = 0; i < n; i++) {
        models[i].next_arrival = INFINITY; /* as the engine says: the future is unknown */
        models[i].keep_alive = NAN;        /* the policy's own */
    }
    view.max_loaded = max_loaded;
    view.now = 100;
    view.overlap_loads = true; /* copies take no compute, as on GPUs */
}

static void resident(int i, double last_used)
{
    models[i].resident = true;
    models[i].last_used = last_used;
}

static void waiting(int i, int n, double head)
{
    models[i].queue_len = n;
    models[i].head_arrival = head;
}

static void finish_view(void)
{
    view.any_loading = view.any_running = false;
    for (int i = 0; i < view.n_models; i++) {
        view.any_loading |= models[i].loading;
        view.any_running |= models[i].running;
    }
}

/* An executor that records what sched_act asks of it: "s0 o1d o2 l3 w" for
 * serve 0, offload 1 deferred, offload 2 now, load 3, a wake-up. */
struct rec {
    bool running[8], pausing[8];
    int preempted_offloads; /* carried offloads with reason preempted */
    bool serve_ok, load_ok;
    double wake_at;
    /* trims (trim_ops): each model's layers of layer_mb MB, layers[m][d]
     * left on device d; carried SCHED_OP_TRIMs and their bytes */
    uint64_t layer_mb[8];
    int layers[8][2];
    int trims;
    uint64_t trimmed_bytes;
    char log[128];
};

static void rec_log(struct rec *r, const char *what, int model, const char *tail)
{
    size_t n = strlen(r->log);
    snprintf(r->log + n, sizeof(r->log) - n, "%s%s%d%s", n ? " " : "", what, model, tail);
}

static bool rec_running(void *ctx, int model)
{
    return ((struct rec *)ctx)->running[model];
}

static bool rec_serve(void *ctx, int model)
{
    struct rec *r = ctx;
    rec_log(r, "s", model, "");
    r->running[model] = r->serve_ok;
    return r->serve_ok;
}

static bool rec_offload(void *ctx, int model, bool defer)
{
    rec_log(ctx, "o", model, defer ? "d" : "");
    return true;
}

static bool rec_load(void *ctx, int model)
{
    struct rec *r = ctx;
    rec_log(r, "l", model, "");
    return r->load_ok;
}

static bool rec_preempt(void *ctx, int model)
{
    struct rec *r = ctx;
    rec_log(r, "p", model, "");
    r->pausing[model] = true;
    return true;
}

static bool rec_pausing(void *ctx, int model)
{
    return ((struct rec *)ctx)->pausing[model];
}

static void rec_carried(void *ctx, const struct sched_carried *c)
{
    struct rec *r = ctx;
    r->preempted_offloads += c->op == SCHED_OP_OFFLOAD && c->preempted;
    if (c->op == SCHED_OP_TRIM) {
        r->trims++;
        r->trimmed_bytes += c->bytes;
    }
}

/* "t1:30" for model 1 asked 30 MB (on device 0; "t1@1:30" on device 1):
 * gives whole layers, at least what is asked or all it has left there */
static uint64_t rec_trim(void *ctx, int model, int device, uint64_t bytes)
{
    struct rec *r = ctx;
    char tail[32];
    snprintf(tail, sizeof(tail), "%s:%llu", device ? "@1" : "", (unsigned long long)(bytes / MB));
    rec_log(r, "t", model, tail);
    uint64_t lb = r->layer_mb[model] * MB;
    int k = lb ? (int)((bytes + lb - 1) / lb) : 0;
    k = k < r->layers[model][device] ? k : r->layers[model][device];
    r->layers[model][device] -= k;
    return (uint64_t)k * lb;
}

static void rec_wake(void *ctx, double at)
{
    struct rec *r = ctx;
    r->wake_at = at;
    rec_log(r, "w", 0, "");
}

static const struct sched_exec_ops rec_ops = {
    .running = rec_running,
    .serve = rec_serve,
    .offload = rec_offload,
    .load = rec_load,
    .preempt = rec_preempt,
    .pausing = rec_pausing,
    .wake = rec_wake,
    .carried = rec_carried,
};

static const struct sched_exec_ops trim_ops = {
    .running = rec_running,
    .serve = rec_serve,
    .offload = rec_offload,
    .load = rec_load,
    .preempt = rec_preempt,
    .pausing = rec_pausing,
    .trim = rec_trim,
    .wake = rec_wake,
    .carried = rec_carried,
};

/* The only action of kind k in a[0..n), or NULL when none or several. */
static const struct sched_action *only(const struct sched_action *a, int n, enum sched_kind k)
{
    const struct sched_action *f = NULL;
    for (int i = 0; i < n; i++)
        if (a[i].kind == k) {
            if (f)
                return NULL;
            f = &a[i];
        }
    return f;
}

/* The action SCHED_PREEMPT's first target in a[0..n), or -1. */
static int preempted(const struct sched_action *a, int n)
{
    for (int i = 0; i < n; i++)
        if (a[i].kind == SCHED_PREEMPT)
            return a[i].model;
    return -1;
}

/* swapwise-preempt on a fake clock: model 0's batch runs (100 MB, 20 of them
 * its batch's), model 1 (80 MB) waits with no room; past the bound (0.5 s, or
 * its max_queue_wait) and once the batch has run as long, 0 pauses and 1 is
 * loaded over it in the same answer; never a pinned batch, one pausing
 * already, or for a model that does not fit in what the pause frees; after
 * the pause the waiting model goes before the paused one (which waits from
 * its pause), where swapwise alone would bring the paused one back first. */
static void test_preempt(void)
{
    const struct sched_policy *p = sched_policy_find("swapwise-preempt");
    struct sched_action a[16];
    CHECK(p && !p->needs_future);
    scenario(2, 0, 0);
    resident(0, 0);
    models[0].running = true;
    models[0].batch_start = 0;
    models[0].batch_bytes[0] = 20 * MB;
    models[1].bytes[0] = 80 * MB;
    waiting(1, 1, 0.1);
    view.now = 0.5;
    finish_view();
    int n = p->decide(&view, a, 16);
    const struct sched_action *w = only(a, n, SCHED_WAKE);
    CHECK_MSG(preempted(a, n) < 0 && w && fabs(w->at - 0.6) < 1e-9, "%d actions", n);
    view.now = 0.7;
    n = p->decide(&view, a, 16);
    CHECK_MSG(n == 2 && a[0].kind == SCHED_PREEMPT && a[0].model == 0 &&
                  a[1].kind == SCHED_LOAD && a[1].model == 1 && a[1].n_victims == 1 &&
                  a[1].victims[0] == 0,
              "%d actions", n);
    models[0].preempt_pending = true;
    n = p->decide(&view, a, 16);
    CHECK(preempted(a, n) < 0);
    models[0].preempt_pending = false;
    models[0].pinned = true;
    n = p->decide(&view, a, 16);
    CHECK(preempted(a, n) < 0);
    models[0].pinned = false;
    models[1].bytes[0] = 81 * MB; /* more than the pause frees */
    n = p->decide(&view, a, 16);
    CHECK(preempted(a, n) < 0);
    models[1].bytes[0] = 80 * MB;
    models[0].batch_start = 0.3; /* it has not run the bound yet */
    n = p->decide(&view, a, 16);
    CHECK(preempted(a, n) < 0);
    models[1].max_queue_wait = 0.2; /* its own bound: waited 0.6, the batch ran 0.4 */
    n = p->decide(&view, a, 16);
    CHECK(preempted(a, n) == 0);
    /* a resident model waiting for the device: the batch pauses, nothing loads */
    models[1].max_queue_wait = 0;
    models[0].batch_start = 0;
    resident(1, 0);
    view.free_bytes[0] = 0;
    n = p->decide(&view, a, 16);
    CHECK_MSG(n == 1 && a[0].kind == SCHED_PREEMPT && a[0].model == 0, "%d actions", n);
    /* paused at 0.7 and gone; 1 waits since 0.1, the paused since 0.0 */
    scenario(2, 80, 0);
    models[0].bytes[0] = 80 * MB; /* its weights and the rest of its reserve */
    models[0].batch_bytes[0] = 20 * MB;
    waiting(0, 2, 0.0);
    models[0].paused = 2;
    models[0].batch_start = 0.7;
    models[1].bytes[0] = 80 * MB;
    waiting(1, 1, 0.1);
    view.now = 0.8;
    finish_view();
    n = p->decide(&view, a, 16);
    const struct sched_action *l = only(a, n, SCHED_LOAD);
    CHECK_MSG(l && l->model == 1, "%d actions", n);
    n = sched_policy_find("swapwise")->decide(&view, a, 16);
    l = only(a, n, SCHED_LOAD);
    CHECK_MSG(l && l->model == 0, "%d actions", n);
}

static void test_lru(void)
{
    const struct sched_policy *l = sched_policy_find("lru");
    struct sched_action a[16];
    CHECK(l && !l->needs_future);
    /* keep-alive on a fake clock: model 0 idle since 0.5 leaves at exactly
     * 300.5, not before; until then a wake-up is asked for that moment */
    scenario(2, 100, 0);
    resident(0, 0.5);
    models[0].idle_since = 0.5;
    view.now = 300.25;
    finish_view();
    int n = l->decide(&view, a, 16);
    CHECK_MSG(n == 1 && a[0].kind == SCHED_WAKE && a[0].at == 300.5, "%d actions", n);
    view.now = nextafter(300.5, 0);
    CHECK(l->decide(&view, a, 16) == 1 && a[0].kind == SCHED_WAKE);
    /* reads of its state (an admin listing, a metrics scrape) move nothing
     * the keep-alive counts: not even last_used, were a reader to touch it */
    models[0].last_used = 300.4;
    view.now = 300.5;
    n = l->decide(&view, a, 16);
    CHECK_MSG(n == 1 && a[0].kind == SCHED_UNLOAD && a[0].model == 0, "%d actions", n);
    /* not while it has work, a batch in flight, a load arriving, or a pin */
    view.now = 1000;
    waiting(0, 1, 999);
    finish_view();
    CHECK(only(a, l->decide(&view, a, 16), SCHED_UNLOAD) == NULL);
    waiting(0, 0, 0);
    models[0].running = true;
    finish_view();
    CHECK(l->decide(&view, a, 16) == 0);
    models[0].running = false;
    models[0].pinned = true;
    finish_view();
    CHECK(l->decide(&view, a, 16) == 0);
    models[0].pinned = false;
    models[0].loading = true;
    finish_view();
    CHECK(l->decide(&view, a, 16) == 0);

    /* on demand: idle models go first (0, though 1 was used longer ago);
     * the busy resident one gets its batch in the same answer */
    scenario(3, 0, 0);
    resident(0, 10);
    resident(1, 5);
    waiting(1, 1, 60);
    waiting(2, 1, 50);
    finish_view();
    n = l->decide(&view, a, 16);
    const struct sched_action *ld = only(a, n, SCHED_LOAD), *sv = only(a, n, SCHED_SERVE);
    CHECK(ld && ld->model == 2 && ld->n_victims == 1 && ld->victims[0] == 0);
    CHECK(sv && sv->model == 1);
    /* none idle: the least recently used busy one goes (it would be
     * deferred while its batch runs) */
    models[0].running = true; /* 0 runs a batch: device busy, 1 waits */
    finish_view();
    n = l->decide(&view, a, 16);
    ld = only(a, n, SCHED_LOAD);
    CHECK_MSG(n == 1 && ld && ld->model == 2 && ld->n_victims == 1 && ld->victims[0] == 1,
              "%d actions", n);
    /* one load at a time */
    models[1].resident = false;
    models[1].loading = models[0].loading = false;
    models[2].resident = models[2].loading = true;
    waiting(1, 1, 40);
    finish_view();
    CHECK(only(a, l->decide(&view, a, 16), SCHED_LOAD) == NULL);
    /* a model's own keep_alive: 5 s here, forever there */
    scenario(2, 100, 0);
    resident(0, 1);
    resident(1, 1);
    models[0].idle_since = models[1].idle_since = 90;
    models[0].keep_alive = 5;
    models[1].keep_alive = INFINITY;
    finish_view();
    n = l->decide(&view, a, 16);
    CHECK_MSG(n == 1 && a[0].kind == SCHED_UNLOAD && a[0].model == 0, "%d actions", n);
    models[0].keep_alive = 15; /* expires at 105: asked for then, 1 never */
    n = l->decide(&view, a, 16);
    CHECK_MSG(n == 1 && a[0].kind == SCHED_WAKE && a[0].at == 105, "%d actions", n);
    /* pinned models hold the room: it waits */
    scenario(2, 0, 0);
    resident(0, 10);
    models[0].pinned = true;
    waiting(1, 1, 50);
    finish_view();
    CHECK(l->decide(&view, a, 16) == 0);
}

static void test_fifo(void)
{
    const struct sched_policy *f = sched_policy_find("fifo");
    struct sched_action a[16];
    CHECK(f);
    /* the oldest request's model is swapped in over the least recently used */
    scenario(3, 0, 2);
    resident(0, 10);
    resident(1, 20);
    waiting(1, 2, 40);
    waiting(2, 1, 30);
    finish_view();
    CHECK(f->decide(&view, a, 16) == 1 && a[0].kind == SCHED_LOAD && a[0].model == 2 &&
          a[0].n_victims == 1 && a[0].victims[0] == 0);
    /* ...even when that one has requests queued (no look-ahead) */
    waiting(0, 3, 45);
    finish_view();
    CHECK(f->decide(&view, a, 16) == 1 && a[0].kind == SCHED_LOAD && a[0].victims[0] == 0);
    /* resident: its batch alone, though model 1 could run beside it */
    waiting(0, 1, 20);
    finish_view();
    CHECK(f->decide(&view, a, 16) == 1 && a[0].kind == SCHED_SERVE && a[0].model == 0);
    /* nothing while a batch runs or a load arrives */
    models[1].running = true;
    finish_view();
    CHECK(f->decide(&view, a, 16) == 0);
    models[1].running = false;
    models[0].loading = true;
    finish_view();
    CHECK(f->decide(&view, a, 16) == 0);
}

static void test_clairvoyant(void)
{
    const struct sched_policy *cv = sched_policy_find_sim("clairvoyant");
    struct sched_action a[16];
    CHECK(cv && cv->needs_future);
    /* Belady: the victim is the model wanted farthest ahead, not the LRU one */
    scenario(3, 0, 0);
    resident(0, 10);
    resident(1, 5);
    models[0].next_arrival = 500;
    models[1].next_arrival = 150;
    waiting(2, 1, 50);
    finish_view();
    const struct sched_action *ld = only(a, cv->decide(&view, a, 16), SCHED_LOAD);
    CHECK(ld && ld->model == 2 && ld->n_victims == 1 && ld->victims[0] == 0);
    models[0].next_arrival = 150;
    models[1].next_arrival = 500;
    ld = only(a, cv->decide(&view, a, 16), SCHED_LOAD);
    CHECK(ld && ld->n_victims == 1 && ld->victims[0] == 1);
    models[1].next_arrival = INFINITY; /* never wanted again: first to go */
    models[0].next_arrival = 101;
    ld = only(a, cv->decide(&view, a, 16), SCHED_LOAD);
    CHECK(ld && ld->n_victims == 1 && ld->victims[0] == 1);
    /* prefetch, links idle: the soonest wanted comes in for one wanted later */
    scenario(3, 0, 0);
    resident(0, 10);
    models[0].next_arrival = 1000;
    models[1].next_arrival = 130;
    models[2].next_arrival = 120;
    finish_view();
    int n = cv->decide(&view, a, 16);
    CHECK_MSG(n == 1 && a[0].kind == SCHED_LOAD && a[0].model == 2 && a[0].n_victims == 1 &&
              a[0].victims[0] == 0, "%d actions", n);
    models[0].next_arrival = 110; /* wanted before either: it stays */
    CHECK(cv->decide(&view, a, 16) == 0);
}

/* min_resident under policy p: of two idle models, the one loaded less than
 * its min_resident ago stays although the other is likelier wanted (or was
 * used later); it goes only when nothing else can make room */
static void test_min_resident(const struct sched_policy *p)
{
    struct sched_action a[16];
    scenario(3, 0, 0);
    resident(0, 10);
    resident(1, 50);
    models[0].loaded_at = 95; /* 5 s ago, min_resident 10 */
    models[0].min_resident = 10;
    models[1].loaded_at = 20;
    waiting(2, 1, 99);
    finish_view();
    const struct sched_action *ld = only(a, p->decide(&view, a, 16), SCHED_LOAD);
    CHECK_MSG(ld && ld->n_victims == 1 && ld->victims[0] == 1, "%s: spared the young one",
              p->name);
    models[0].min_resident = 4; /* past it: the least recently used goes again */
    ld = only(a, p->decide(&view, a, 16), SCHED_LOAD);
    CHECK_MSG(ld && ld->n_victims == 1 && ld->victims[0] == 0, "%s: past min_resident",
              p->name);
    models[0].min_resident = 10;
    models[1].pinned = true; /* nothing else makes room: the young one goes */
    ld = only(a, p->decide(&view, a, 16), SCHED_LOAD);
    CHECK_MSG(ld && ld->n_victims == 1 && ld->victims[0] == 0, "%s: the last resort", p->name);
}

/* priority and max_queue_wait (goes_before) under policy p: which of two
 * waiting models loads, and which resident one gets the device's batch */
static void test_order(const struct sched_policy *p)
{
    struct sched_action a[16];
    scenario(2, 100, 0); /* room for one */
    waiting(0, 1, 50);
    waiting(1, 1, 60);
    finish_view();
    const struct sched_action *ld = only(a, p->decide(&view, a, 16), SCHED_LOAD);
    CHECK_MSG(ld && ld->model == 0, "%s: the older first", p->name);
    models[1].priority = 1;
    ld = only(a, p->decide(&view, a, 16), SCHED_LOAD);
    CHECK_MSG(ld && ld->model == 1, "%s: the higher priority first", p->name);
    models[0].max_queue_wait = 40; /* waited 50 s: past it, so first */
    ld = only(a, p->decide(&view, a, 16), SCHED_LOAD);
    CHECK_MSG(ld && ld->model == 0, "%s: past max_queue_wait first", p->name);
    models[0].max_queue_wait = 60; /* not yet: priority wins, a wake-up at 110 */
    int n = p->decide(&view, a, 16);
    ld = only(a, n, SCHED_LOAD);
    const struct sched_action *w = only(a, n, SCHED_WAKE);
    CHECK_MSG(ld && ld->model == 1 && w && w->at == 110, "%s: %d actions", p->name, n);
    /* batches on one device: one, by the same order */
    scenario(2, 100, 0);
    resident(0, 1);
    resident(1, 2);
    waiting(0, 1, 50);
    waiting(1, 1, 60);
    models[1].priority = 2;
    finish_view();
    n = p->decide(&view, a, 16);
    const struct sched_action *sv = only(a, n, SCHED_SERVE);
    CHECK_MSG(sv && sv->model == 1, "%s: %d actions", p->name, n);
}

/* swapwise where batches run longer than a load (chat requests: a prefill,
 * then a decode step per token): every resident model's last batch ran
 * from last_used to idle_since, here `batch` s against a load of 0.2 s. */
static void batches_ran(int n, double batch)
{
    view.load_s = 0.2;
    view.max_batch = 8;
    for (int i = 0; i < n; i++) {
        models[i].last_used = 50;
        models[i].idle_since = 50 + batch;
    }
}

static void test_long_batches(const struct sched_policy *s)
{
    struct sched_action a[16];
    /* one device, three resident models: the older head has one request,
     * the younger five. Short batches: the older first, as always */
    scenario(3, 1000, 0);
    for (int i = 0; i < 3; i++)
        resident(i, 50);
    batches_ran(3, 0.1);
    waiting(0, 1, 80);
    waiting(1, 5, 90);
    finish_view();
    const struct sched_action *sv = only(a, s->decide(&view, a, 16), SCHED_SERVE);
    CHECK_MSG(sv && sv->model == 0, "short batches: the older head first");
    /* long batches: the fuller batch first (it clears more per second of
     * the device); a batch takes at most max_batch, so 9 and 12 queued tie
     * at 8 and the older head goes first among them */
    batches_ran(3, 5);
    sv = only(a, s->decide(&view, a, 16), SCHED_SERVE);
    CHECK_MSG(sv && sv->model == 1, "long batches: the fuller batch first");
    waiting(0, 12, 90);
    waiting(1, 9, 80);
    sv = only(a, s->decide(&view, a, 16), SCHED_SERVE);
    CHECK_MSG(sv && sv->model == 1, "long batches: full batches tie, the older first");
    /* ...after priority */
    waiting(0, 1, 80);
    waiting(1, 5, 90);
    models[0].priority = 1;
    sv = only(a, s->decide(&view, a, 16), SCHED_SERVE);
    CHECK_MSG(sv && sv->model == 0, "long batches: priority before the fuller batch");

    /* the load, room for one of two waiting models: the fuller one with long
     * batches, the older one with short ones */
    scenario(3, 100, 0);
    resident(2, 50);
    models[2].resident = false; /* evicted since its last batch */
    batches_ran(3, 5);
    waiting(0, 1, 80);
    waiting(1, 5, 90);
    finish_view();
    const struct sched_action *ld = only(a, s->decide(&view, a, 16), SCHED_LOAD);
    CHECK_MSG(ld && ld->model == 1, "long batches: the fuller load first");
    batches_ran(3, 0.1);
    ld = only(a, s->decide(&view, a, 16), SCHED_LOAD);
    CHECK_MSG(ld && ld->model == 0, "short batches: the older load first");

    /* a victim with requests queued: with short batches it gets one last
     * batch and then goes (the test in main); with long ones it goes now */
    scenario(3, 0, 0);
    resident(0, 1);
    resident(1, 2);
    waiting(0, 5, 20);
    waiting(1, 5, 25);
    waiting(2, 1, 10);
    batches_ran(2, 5);
    finish_view();
    int n = s->decide(&view, a, 16);
    ld = only(a, n, SCHED_LOAD);
    CHECK_MSG(ld && ld->model == 2 && ld->n_victims == 1, "%d actions", n);
    for (int i = 0; ld && i < n; i++)
        CHECK_MSG(!(a[i].kind == SCHED_SERVE && a[i].model == ld->victims[0]),
                  "long batches: no last batch for victim %d", ld->victims[0]);
    batches_ran(2, 0.1);
    n = s->decide(&view, a, 16);
    CHECK_MSG(n == 2 && a[0].kind == SCHED_SERVE && a[1].kind == SCHED_LOAD &&
                  a[1].victims[0] == a[0].model,
              "short batches: the victim's last batch, %d actions", n);

    /* ...and so a model whose queue fits one batch is no first victim: the
     * idle one goes, hot as it is (with short batches the cold one would
     * get its last batch and go, as in main) */
    scenario(3, 0, 2);
    resident(0, 50);
    resident(1, 50);
    for (int k = 0; k < 1000; k++)
        forecast_add(&models[0].arrivals, 0.1 * k);
    for (int k = 0; k < 100; k++)
        forecast_add(&models[1].arrivals, k);
    waiting(1, 1, 99.8);
    waiting(2, 1, 99.5);
    batches_ran(2, 0.1);
    finish_view();
    ld = only(a, s->decide(&view, a, 16), SCHED_LOAD);
    CHECK_MSG(ld && ld->n_victims == 1 && ld->victims[0] == 1, "short batches: the cold one");
    batches_ran(2, 5);
    ld = only(a, s->decide(&view, a, 16), SCHED_LOAD);
    CHECK_MSG(ld && ld->model == 2 && ld->n_victims == 1 && ld->victims[0] == 0,
              "long batches: the one with nothing queued");

    /* the fuller batch first only until the older head has waited
     * SW_FULLER_WAIT (16) batches' time: 5 s batches, 80 s, then age */
    scenario(3, 1000, 0);
    for (int i = 0; i < 3; i++)
        resident(i, 50);
    batches_ran(3, 5);
    waiting(0, 1, 80);
    waiting(1, 5, 90);
    view.now = 159;
    finish_view();
    sv = only(a, s->decide(&view, a, 16), SCHED_SERVE);
    CHECK_MSG(sv && sv->model == 1, "waited 79 s: the fuller first");
    view.now = 161;
    sv = only(a, s->decide(&view, a, 16), SCHED_SERVE);
    CHECK_MSG(sv && sv->model == 0, "waited 81 s: the older first");

    /* no batch seen since a load (last_used is the load's start): not long */
    scenario(3, 1000, 0);
    for (int i = 0; i < 3; i++)
        resident(i, 50);
    batches_ran(3, 5);
    for (int i = 0; i < 3; i++)
        models[i].loaded_at = 60;
    waiting(0, 1, 80);
    waiting(1, 5, 90);
    finish_view();
    sv = only(a, s->decide(&view, a, 16), SCHED_SERVE);
    CHECK_MSG(sv && sv->model == 0, "batches before the loads do not count");
}

/* A trimming load of model 3 (100 MB) on one device with 10 MB free, its
 * victims models 0 and 1 (100 MB resident each, layers of 10 MB), carried
 * out on trim_ops (or ops); returns the log. */
static const char *trim_load(struct rec *r, const struct sched_exec_ops *ops, int left0, int left1)
{
    struct sched_action a = {
        .kind = SCHED_LOAD, .model = 3, .n_victims = 2, .victims = {0, 1}, .trim = true};
    r->load_ok = true;
    r->layer_mb[0] = r->layer_mb[1] = 10;
    r->layers[0][0] = left0;
    r->layers[1][0] = left1;
    CHECK(sched_act(ops, r, &view, &a));
    return r->log;
}

static void trim_scenario(void)
{
    scenario(4, 10, 0);
    resident(0, 1);
    resident(1, 2);
    waiting(3, 1, 50);
    finish_view();
}

/* sched_act's trims (sched_action.trim): the first victim is asked exactly
 * what the load lacks (its bytes - resident_bytes, less the free bytes), the
 * second only what the first did not give, none once it fits; a victim with
 * a batch in flight, or one that would keep nothing, leaves whole; trims
 * that all fall short end in whole offloads, in order, until it fits;
 * without ops->trim every victim leaves whole, as without trim. */
static void test_trim_act(void)
{
    struct rec r = {0};
    trim_scenario();
    CHECK_MSG(strcmp(trim_load(&r, &trim_ops, 10, 10), "t0:90 l3") == 0, "%s", r.log);
    CHECK_MSG(r.trims == 1 && r.trimmed_bytes == 90 * MB, "%d trims, %llu bytes", r.trims,
              (unsigned long long)r.trimmed_bytes);
    /* model 0 has 5 layers left: 50 MB, then model 1 the other 40 */
    r = (struct rec){0};
    CHECK_MSG(strcmp(trim_load(&r, &trim_ops, 5, 10), "t0:90 t1:40 l3") == 0, "%s", r.log);
    /* whole layers: model 0 asked 85 gives 90 (of 10 MB each) */
    r = (struct rec){0};
    view.free_bytes[0] = 15 * MB;
    CHECK_MSG(strcmp(trim_load(&r, &trim_ops, 10, 10), "t0:85 l3") == 0 &&
                  r.trimmed_bytes == 90 * MB,
              "%s", r.log);
    view.free_bytes[0] = 10 * MB;
    /* a batch in flight: it leaves whole at its end, and that is room enough */
    r = (struct rec){0};
    r.running[0] = true;
    CHECK_MSG(strcmp(trim_load(&r, &trim_ops, 10, 10), "o0d l3") == 0, "%s", r.log);
    /* partly resident with 50 MB, asked 90: it would keep nothing, leaves
     * whole; model 1 gives the 40 left */
    r = (struct rec){0};
    models[0].resident = false;
    models[0].resident_bytes[0] = 50 * MB;
    CHECK_MSG(strcmp(trim_load(&r, &trim_ops, 5, 10), "o0 t1:40 l3") == 0, "%s", r.log);
    /* the incoming model partly resident (60 MB there): it lacks 40, less 10 free */
    trim_scenario();
    models[3].resident_bytes[0] = 60 * MB;
    r = (struct rec){0};
    CHECK_MSG(strcmp(trim_load(&r, &trim_ops, 10, 10), "t0:30 l3") == 0, "%s", r.log);
    /* 2 layers left each: both fall short (20 + 20 of 90), then the first
     * leaves whole (its 80 more make the room) and the second keeps the rest */
    trim_scenario();
    r = (struct rec){0};
    CHECK_MSG(strcmp(trim_load(&r, &trim_ops, 2, 2), "t0:90 t1:70 o0 l3") == 0, "%s", r.log);
    /* no trim op: whole, every victim, as a load without trim */
    r = (struct rec){0};
    CHECK_MSG(strcmp(trim_load(&r, &rec_ops, 10, 10), "o0 o1 l3") == 0, "%s", r.log);
    /* two devices: asked only where the load lacks room */
    trim_scenario();
    view.n_devices = 2;
    for (int i = 0; i < 4; i++)
        models[i].bytes[1] = 100 * MB;
    view.free_bytes[1] = 200 * MB;
    r = (struct rec){0};
    r.layers[0][1] = 10;
    CHECK_MSG(strcmp(trim_load(&r, &trim_ops, 10, 10), "t0:90 l3") == 0, "%s", r.log);
    view.free_bytes[0] = 200 * MB;
    view.free_bytes[1] = 50 * MB;
    r = (struct rec){0};
    r.layers[0][1] = 10;
    CHECK_MSG(strcmp(trim_load(&r, &trim_ops, 10, 10), "t0@1:50 l3") == 0, "%s", r.log);
}

/* Policies on views with a partly resident model (not resident, 50 of its
 * 100 MB there): its load needs only the missing 50, it is a victim like a
 * resident one (the least recently used here), and it does not count
 * toward max_loaded. */
static void test_partial_views(void)
{
    struct sched_action a[16];
    const char *names[] = {"swapwise", "swapwise-partial", "computron", "lru", "fifo"};
    for (int p = 0; p < 5; p++) {
        const struct sched_policy *pol = sched_policy_find(names[p]);
        /* model 1 (50 MB there) waits with 60 MB free: no victim */
        scenario(3, 60, 0);
        resident(0, 10);
        models[1].resident_bytes[0] = 50 * MB;
        waiting(1, 1, 50);
        finish_view();
        int n = pol->decide(&view, a, 16);
        const struct sched_action *l = only(a, n, SCHED_LOAD);
        CHECK_MSG(l && l->model == 1 && l->n_victims == 0, "%s: %d actions", names[p], n);
        /* model 2 waits, 50 MB free: the partly resident model 1 (used at 5)
         * is the victim, and frees enough */
        scenario(3, 50, 0);
        resident(0, 10);
        models[1].resident_bytes[0] = 50 * MB;
        models[1].last_used = 5;
        waiting(2, 1, 50);
        finish_view();
        n = pol->decide(&view, a, 16);
        l = only(a, n, SCHED_LOAD);
        CHECK_MSG(l && l->model == 2 && l->n_victims == 1 && l->victims[0] == 1,
                  "%s: %d actions, victim %d", names[p], n, l && l->n_victims ? l->victims[0] : -1);
        /* max_loaded 2, model 0 resident, 1 partly: model 2 loads beside
         * them with room for its bytes, nobody leaves */
        scenario(3, 100, 2);
        resident(0, 10);
        models[1].resident_bytes[0] = 50 * MB;
        waiting(2, 1, 50);
        finish_view();
        n = pol->decide(&view, a, 16);
        l = only(a, n, SCHED_LOAD);
        CHECK_MSG(l && l->model == 2 && l->n_victims == 0, "%s: %d actions", names[p], n);
        /* ...but two resident ones are max_loaded: one must go */
        resident(1, 20);
        finish_view();
        n = pol->decide(&view, a, 16);
        l = only(a, n, SCHED_LOAD);
        CHECK_MSG(l && l->n_victims == 1, "%s: %d actions", names[p], n);
    }
    /* a keep-alive frees what an idle partly resident model holds */
    scenario(3, 0, 0);
    models[1].resident_bytes[0] = 50 * MB;
    models[1].keep_alive = 10;
    models[1].idle_since = 50;
    finish_view();
    int nk = sched_policy_find("swapwise-partial")->decide(&view, a, 16);
    CHECK_MSG(nk == 1 && a[0].kind == SCHED_UNLOAD && a[0].model == 1, "%d actions", nk);
    /* the defrag step takes a partly resident model too */
    scenario(3, 0, 0);
    resident(0, 10);
    models[1].resident_bytes[0] = 50 * MB;
    models[1].last_used = 5;
    finish_view();
    CHECK(sched_defrag_victim(&view, 2, 0) == 1);
    /* swapwise-partial trims; swapwise does not */
    scenario(3, 0, 0);
    resident(0, 10);
    waiting(1, 1, 50);
    finish_view();
    const struct sched_policy *sp = sched_policy_find("swapwise-partial");
    int n = sp->decide(&view, a, 16);
    const struct sched_action *l = only(a, n, SCHED_LOAD);
    CHECK(l && l->trim && l->n_victims == 1 && l->victims[0] == 0);
    n = sched_policy_find("swapwise")->decide(&view, a, 16);
    l = only(a, n, SCHED_LOAD);
    CHECK(l && !l->trim);
    CHECK(sched_policy_find_sim("clairvoyant-partial") &&
          sched_policy_find_sim("clairvoyant-partial")->needs_future);
}

/* Victims are chosen so that none leaves when the others already make
 * room: llama (40 MB), qwen (120) and mistral (80) fill the device; opt
 * (100) needs room. By least recent use llama goes first and falls short,
 * then qwen makes the room, and qwen alone would have: llama stays. Every
 * policy runs the one victim loop. */
static void test_victims_needed(void)
{
    const char *names[] = {"computron",
                           "fifo",
                           "lru",
                           "swapwise",
                           "swapwise-preempt",
                           "swapwise-partial",
                           "clairvoyant",
                           "clairvoyant-partial"};
    for (int p = 0; p < 8; p++) {
        const struct sched_policy *pol = sched_policy_find_sim(names[p]);
        struct sched_action a[16];
        scenario(4, 0, 0);
        const uint64_t mb[4] = {40, 120, 80, 100};
        for (int i = 0; i < 4; i++)
            models[i].bytes[0] = mb[i] * MB;
        resident(0, 10); /* llama, least recently used */
        resident(1, 20); /* qwen */
        resident(2, 30); /* mistral */
        waiting(3, 1, 90);
        finish_view();
        int n = pol->decide(&view, a, 16);
        const struct sched_action *ld = only(a, n, SCHED_LOAD);
        CHECK_MSG(ld && ld->model == 3 && ld->n_victims == 1 && ld->victims[0] == 1,
                  "%s: %d victims, the first %d", names[p], ld ? ld->n_victims : -1,
                  ld && ld->n_victims ? ld->victims[0] : -1);
        /* with 60 MB free llama's 40 make the room alone: it goes, and qwen,
         * never taken, stays */
        view.free_bytes[0] = 60 * MB;
        n = pol->decide(&view, a, 16);
        ld = only(a, n, SCHED_LOAD);
        CHECK_MSG(ld && ld->n_victims == 1 && ld->victims[0] == 0, "%s: %d victims", names[p],
                  ld ? ld->n_victims : -1);
    }
}

int main(void)
{
    const struct sched_policy *c = sched_policy_find("computron");
    const struct sched_policy *s = sched_policy_find(sched_policy_default());
    CHECK(c && s && sched_policy_find("nosuch") == NULL && strstr(err_msg(), "nosuch") &&
          strstr(err_msg(), "swapwise|swapwise-preempt|computron|lru|fifo"));
    /* clairvoyant reads the future: the simulator's only */
    CHECK(sched_policy_find("clairvoyant") == NULL && strstr(err_msg(), "future arrivals"));
    const struct sched_policy *cv = sched_policy_find_sim("clairvoyant");
    CHECK(cv && cv->needs_future && sched_policy_find_sim("computron") == c);
    CHECK(sched_policy_find_sim("nosuch") == NULL && strstr(err_msg(), "clairvoyant"));
    struct sched_action a[16];

    /* computron serves the oldest head; resident: a batch */
    scenario(3, 100, 2);
    resident(0, 10);
    resident(1, 20);
    waiting(0, 3, 50);
    waiting(1, 1, 40);
    finish_view();
    CHECK(c->decide(&view, a, 16) == 1 && a[0].kind == SCHED_SERVE && a[0].model == 1);

    /* oldest head not resident, max_loaded reached: evict the LRU one, load, same step */
    waiting(2, 1, 30);
    finish_view();
    CHECK(c->decide(&view, a, 16) == 1 && a[0].kind == SCHED_LOAD && a[0].model == 2);
    CHECK(a[0].n_victims == 1 && a[0].victims[0] == 0); /* LRU: last used at 10 */
    /* ...even when the LRU one has requests waiting (Computron counts, nothing else) */
    models[1].last_used = 5;
    finish_view();
    CHECK(c->decide(&view, a, 16) == 1 && a[0].n_victims == 1 && a[0].victims[0] == 1);

    /* one operation at a time: nothing while a batch runs or a load is in progress */
    models[0].running = true;
    finish_view();
    CHECK(c->decide(&view, a, 16) == 0);
    models[0].running = false;
    models[2].resident = models[2].loading = true;
    finish_view();
    CHECK(c->decide(&view, a, 16) == 0);

    /* below max_loaded and with room: just load */
    scenario(3, 300, 2);
    resident(0, 10);
    waiting(1, 1, 1);
    finish_view();
    CHECK(c->decide(&view, a, 16) == 1 && a[0].kind == SCHED_LOAD && a[0].model == 1 &&
          a[0].n_victims == 0);

    /* computron keeps requests with different sampling apart; swapwise mixes them */
    CHECK(c->batch_same_params_only && !s->batch_same_params_only);

    /* swapwise: every resident model with work gets a batch, and the oldest
     * non-resident loads at the same time, evicting an idle model with an
     * empty queue rather than the LRU one that has requests */
    scenario(4, 0, 0);
    resident(0, 5);  /* LRU, but has requests */
    resident(1, 20); /* idle, empty queue */
    waiting(0, 2, 60);
    waiting(2, 1, 30);
    finish_view();
    int n = s->decide(&view, a, 16);
    bool load2 = false, serve0 = false;
    for (int i = 0; i < n; i++) {
        if (a[i].kind == SCHED_LOAD && a[i].model == 2 && a[i].n_victims == 1 &&
            a[i].victims[0] == 1)
            load2 = true;
        if (a[i].kind == SCHED_SERVE && a[i].model == 0)
            serve0 = true;
    }
    CHECK(load2 && serve0);

    /* a model with a batch in flight and nothing queued may be named to
     * leave at its batch's end (the engine defers the offload and loads once
     * the room is there); a pinned one never */
    scenario(3, 0, 0);
    resident(0, 1);
    resident(1, 2);
    models[0].running = true;
    models[1].pinned = true;
    waiting(2, 1, 10);
    finish_view();
    n = s->decide(&view, a, 16);
    CHECK(n == 1 && a[0].kind == SCHED_LOAD && a[0].model == 2 && a[0].n_victims == 1 &&
          a[0].victims[0] == 0);
    /* ...and once it is leaving, the load waits for that room, naming nobody else */
    models[0].offload_pending = true;
    finish_view();
    n = s->decide(&view, a, 16);
    CHECK(n == 1 && a[0].kind == SCHED_LOAD && a[0].n_victims == 0);
    /* with requests of its own queued it stays, and so does the pinned one: wait */
    models[0].offload_pending = false;
    waiting(0, 1, 50);
    finish_view();
    n = s->decide(&view, a, 16);
    for (int i = 0; i < n; i++)
        CHECK(a[i].kind != SCHED_LOAD);

    /* no starvation: when the waiting model holds the oldest request and only
     * busy models could make room, they get no new batch (so they go idle) */
    scenario(3, 0, 0);
    resident(0, 1);
    resident(1, 2);
    waiting(0, 5, 20); /* younger than model 2's head */
    waiting(1, 5, 25);
    waiting(2, 1, 10);
    finish_view();
    n = s->decide(&view, a, 16);
    /* both idle with younger requests: one goes for model 2 right away, after
     * one last batch of what it holds (so the load waits for that batch) */
    CHECK(n == 2 && a[0].kind == SCHED_SERVE && a[1].kind == SCHED_LOAD && a[1].model == 2 &&
          a[1].n_victims == 1 && a[1].victims[0] == a[0].model);
    models[0].running = models[1].running = true; /* both busy: hold their next batches */
    finish_view();
    n = s->decide(&view, a, 16);
    CHECK(n == 0);
    /* ...whereas a model whose request is older than the waiting one keeps being served */
    models[0].running = models[1].running = false;
    waiting(0, 5, 5);
    finish_view();
    n = s->decide(&view, a, 16);
    CHECK(n == 1 && a[0].kind == SCHED_SERVE && a[0].model == 0);

    /* one batch at a time per device, oldest head first; disjoint devices run together */
    scenario(3, 1000, 0);
    resident(0, 1);
    resident(1, 2);
    resident(2, 3);
    waiting(0, 1, 30);
    waiting(1, 1, 20);
    waiting(2, 1, 25);
    models[2].bytes[0] = 0;
    models[2].bytes[1] = 100 * MB; /* model 2 lives on device 1 alone */
    view.n_devices = 2;
    view.free_bytes[1] = 1000 * MB;
    finish_view();
    n = s->decide(&view, a, 16);
    CHECK(n == 2 && a[0].kind == SCHED_SERVE && a[0].model == 1 && a[1].model == 2);
    models[1].running = true;
    finish_view();
    n = s->decide(&view, a, 16);
    CHECK(n == 1 && a[0].model == 2); /* device 0 is busy with model 1 */

    /* one load at a time */
    scenario(3, 1000, 0);
    models[0].resident = models[0].loading = true;
    waiting(1, 1, 1);
    finish_view();
    n = s->decide(&view, a, 16);
    for (int i = 0; i < n; i++)
        CHECK(a[i].kind != SCHED_LOAD);

    /* victims by forecast: of two idle models with empty queues, the one
     * least likely to be wanted within a load's time goes, even when it is
     * the most recently used */
    scenario(3, 0, 2);
    resident(0, 90); /* a request every 0.1 s until t = 99.9: wanted any moment */
    resident(1, 99); /* one a second until t = 99: less likely within the next 0.2 s */
    for (int k = 0; k < 1000; k++)
        forecast_add(&models[0].arrivals, 0.1 * k);
    for (int k = 0; k < 100; k++)
        forecast_add(&models[1].arrivals, k);
    waiting(2, 1, 99.5);
    view.load_s = 0.2;
    finish_view();
    n = s->decide(&view, a, 16);
    CHECK(n == 1 && a[0].kind == SCHED_LOAD && a[0].model == 2 && a[0].n_victims == 1 &&
          a[0].victims[0] == 1);

    /* ...and a model whose whole queue fits the batch it gets now counts as
     * one with nothing queued: it gets that batch, then goes, rather than
     * the hot idle model */
    scenario(3, 0, 2);
    resident(0, 90);
    resident(1, 99);
    for (int k = 0; k < 1000; k++)
        forecast_add(&models[0].arrivals, 0.1 * k);
    for (int k = 0; k < 100; k++)
        forecast_add(&models[1].arrivals, k);
    waiting(1, 1, 99.8);
    waiting(2, 1, 99.5);
    view.load_s = 0.2;
    view.max_batch = 8;
    finish_view();
    n = s->decide(&view, a, 16);
    CHECK(n == 2 && a[0].kind == SCHED_SERVE && a[0].model == 1 && a[1].kind == SCHED_LOAD &&
          a[1].model == 2 && a[1].n_victims == 1 && a[1].victims[0] == 1);
    /* ...not when its queue is longer than a batch */
    waiting(1, 9, 99.8);
    finish_view();
    n = s->decide(&view, a, 16);
    CHECK(n >= 1 && a[0].kind == SCHED_LOAD && a[0].n_victims == 1 && a[0].victims[0] == 0);

    /* prefetch: with idle links that cost no compute and nothing waiting, a
     * model likely wanted soon comes in for an idle one clearly less likely */
    scenario(3, 0, 2);
    resident(0, 90);
    resident(1, 99);
    for (int k = 0; k < 1000; k++) /* model 2: every 0.1 s, evicted at some point */
        forecast_add(&models[2].arrivals, 0.1 * k);
    for (int k = 0; k < 100; k++) {
        forecast_add(&models[0].arrivals, k); /* both: once a second, last at 99 */
        forecast_add(&models[1].arrivals, k);
    }
    view.load_s = 0.2;
    view.overlap_loads = true;
    finish_view();
    n = s->decide(&view, a, 16);
    CHECK(n == 1 && a[0].kind == SCHED_LOAD && a[0].model == 2 && a[0].n_victims == 1);
    /* ...never where a copy takes compute, never for a busy model */
    view.overlap_loads = false;
    CHECK(s->decide(&view, a, 16) == 0);
    view.overlap_loads = true;
    models[0].running = models[1].running = true;
    finish_view();
    CHECK(s->decide(&view, a, 16) == 0);
    /* ...nor for a model whose arrivals are bursty, however recent */
    memset(&models[2].arrivals, 0, sizeof(models[2].arrivals));
    for (int k = 0; k < 100; k++) /* pairs 10 ms apart, 1.99 s between pairs: CV ~1.4 */
        forecast_add(&models[2].arrivals, k % 2 ? 2 * (k / 2) + 0.01 : 2 * (k / 2));
    finish_view();
    CHECK(forecast_cv(&models[2].arrivals) > 0.8 && s->decide(&view, a, 16) == 0);
    /* ...and not for a model no more likely wanted than the resident ones */
    models[0].running = models[1].running = false;
    memset(&models[2].arrivals, 0, sizeof(models[2].arrivals));
    for (int k = 0; k < 100; k++)
        forecast_add(&models[2].arrivals, k);
    finish_view();
    CHECK(s->decide(&view, a, 16) == 0);

    /* a loading model gets its batch just in time: half its first step before
     * the load's expected end (the other half overlaps the last layers); until
     * then it asks to be woken, and loaded models keep being served */
    scenario(2, 1000, 0);
    resident(0, 1);
    resident(1, 2);
    models[1].loading = true;
    models[1].loaded_at = 100;
    models[1].batch_s = 0.1;
    view.load_s = 1;
    waiting(0, 1, 20);
    waiting(1, 1, 10);
    view.overlap_loads = true;
    finish_view();
    n = s->decide(&view, a, 16);
    CHECK(n == 2 && a[0].kind == SCHED_SERVE && a[0].model == 0 && a[1].kind == SCHED_WAKE &&
          fabs(a[1].at - 100.95) < 1e-9);
    models[0].queue_len = 0;
    view.now = 100.95;
    finish_view();
    n = s->decide(&view, a, 16);
    CHECK(n == 1 && a[0].kind == SCHED_SERVE && a[0].model == 1);
    /* ...never where copies take compute: it waits for the load's end */
    view.overlap_loads = false;
    CHECK(s->decide(&view, a, 16) == 0);

    /* where copies take compute, a load occupies its devices as a batch does:
     * it waits for the batch in flight there, younger work waits for it, and
     * older work goes first */
    scenario(3, 100, 0);
    view.overlap_loads = false;
    resident(0, 1);
    models[0].running = true;
    resident(1, 2);
    waiting(1, 1, 30); /* younger than the load's */
    waiting(2, 1, 20);
    finish_view();
    CHECK(s->decide(&view, a, 16) == 0);
    models[0].running = false;
    finish_view();
    n = s->decide(&view, a, 16);
    CHECK(n == 1 && a[0].kind == SCHED_LOAD && a[0].model == 2);
    models[2].resident = models[2].loading = true;
    finish_view();
    CHECK(s->decide(&view, a, 16) == 0); /* model 1 waits for the copy */
    models[2].resident = models[2].loading = false;
    /* ...and while the load is held, the models that must make room for it
     * get no batch either (no "last batch" that would start a new wait) */
    scenario(3, 0, 0);
    view.overlap_loads = false;
    resident(0, 1);
    resident(1, 2);
    models[0].running = true;
    waiting(0, 3, 40);
    waiting(1, 3, 30);
    waiting(2, 1, 20); /* the oldest request, for a model that is not loaded */
    finish_view();
    CHECK(s->decide(&view, a, 16) == 0);
    models[0].running = false;
    finish_view();
    n = s->decide(&view, a, 16);
    CHECK(n == 2 && a[0].kind == SCHED_SERVE && a[1].kind == SCHED_LOAD && a[1].model == 2 &&
          a[1].n_victims == 1 && a[1].victims[0] == a[0].model);
    scenario(3, 100, 0);
    view.overlap_loads = false;
    resident(0, 1);
    resident(1, 2);
    waiting(2, 1, 20);
    waiting(1, 1, 10); /* now older than the load's */
    models[0].running = true;
    finish_view();
    CHECK(s->decide(&view, a, 16) == 0);
    models[0].running = false;
    finish_view();
    n = s->decide(&view, a, 16);
    CHECK(n >= 1 && a[0].kind == SCHED_SERVE && a[0].model == 1);

    /* the fragmentation step's victim: the least recently used model with
     * bytes on the device that may leave now; never the incoming one, one
     * loading, running, already leaving or pinned, nor one elsewhere */
    scenario(7, 300, 0);
    view.n_devices = 2;
    for (int i = 0; i < 7; i++)
        resident(i, 10 + i);
    models[0].loading = true;
    models[1].running = true;
    models[2].offload_pending = true;
    models[3].pinned = true;
    models[4].bytes[0] = 0; /* on device 1 alone */
    models[4].bytes[1] = 100 * MB;
    models[6].resident = false; /* the incoming one */
    models[6].last_used = 1;
    finish_view();
    CHECK(sched_defrag_victim(&view, 6, 0) == 5);
    CHECK(sched_defrag_victim(&view, 6, 1) == 4);
    models[5].last_used = 1; /* ties go to the lower index */
    models[4].last_used = 1;
    models[4].bytes[0] = 100 * MB;
    CHECK(sched_defrag_victim(&view, 6, 0) == 4);
    models[4].running = models[5].running = true;
    finish_view();
    CHECK(sched_defrag_victim(&view, 6, 0) == -1);

    /* sched_act, the one way actions are carried out (engine and simulator):
     * a wake-up is no progress; a serve only where no batch is in flight (the
     * executor's state now, not the view's: swapwise serves a victim its
     * last batch and then names it in the load); a load's victims go first,
     * each deferred while its batch runs. */
    scenario(4, 100, 0);
    struct rec rec = {.serve_ok = true, .load_ok = true};
    const struct sched_action wake = {.kind = SCHED_WAKE, .at = 7},
                              serve1 = {.kind = SCHED_SERVE, .model = 1},
                              load3 = {.kind = SCHED_LOAD, .model = 3, .n_victims = 2,
                                       .victims = {1, 2}};
    CHECK(!sched_act(&rec_ops, &rec, &view, &wake) && rec.wake_at == 7);
    CHECK(sched_act(&rec_ops, &rec, &view, &serve1));
    CHECK(!sched_act(&rec_ops, &rec, &view, &serve1)); /* now running: not asked */
    CHECK(sched_act(&rec_ops, &rec, &view, &load3));
    CHECK_MSG(strcmp(rec.log, "w0 s1 o1d o2 l3") == 0, "%s", rec.log);
    rec = (struct rec){.serve_ok = false, .load_ok = false};
    CHECK(!sched_act(&rec_ops, &rec, &view, &serve1) && !sched_act(&rec_ops, &rec, &view, &load3));
    CHECK_MSG(strcmp(rec.log, "s1 o1 o2 l3") == 0, "%s", rec.log);

    /* an unload goes through the offload op, deferred while a batch runs */
    rec = (struct rec){.serve_ok = true, .load_ok = true};
    const struct sched_action unload1 = {.kind = SCHED_UNLOAD, .model = 1};
    CHECK(sched_act(&rec_ops, &rec, &view, &unload1));
    rec.running[1] = true;
    CHECK(sched_act(&rec_ops, &rec, &view, &unload1));
    CHECK_MSG(strcmp(rec.log, "o1 o1d") == 0, "%s", rec.log);

    /* a preemption asks a running batch to pause, once; a load naming the
     * pausing model as its victim defers its offload to the pause, and the
     * offload's reason is preempted (not evicted) */
    rec = (struct rec){.serve_ok = true, .load_ok = true};
    const struct sched_action pre1 = {.kind = SCHED_PREEMPT, .model = 1},
                              load3by1 = {.kind = SCHED_LOAD, .model = 3, .n_victims = 1,
                                          .victims = {1}};
    CHECK(!sched_act(&rec_ops, &rec, &view, &pre1)); /* no batch in flight: not asked */
    rec.running[1] = true;
    CHECK(sched_act(&rec_ops, &rec, &view, &pre1));
    CHECK(!sched_act(&rec_ops, &rec, &view, &pre1)); /* pausing already: not asked again */
    CHECK(sched_act(&rec_ops, &rec, &view, &load3by1));
    CHECK_MSG(strcmp(rec.log, "p1 o1d l3") == 0 && rec.preempted_offloads == 1, "%s, %d",
              rec.log, rec.preempted_offloads);
    rec.running[1] = false; /* paused: its weights leave now, the reason still preempted */
    CHECK(sched_act(&rec_ops, &rec, &view, &load3by1) && rec.preempted_offloads == 2);
    rec.pausing[1] = false; /* an ordinary victim */
    CHECK(sched_act(&rec_ops, &rec, &view, &load3by1) && rec.preempted_offloads == 2);
    CHECK_MSG(strcmp(rec.log, "p1 o1d l3 o1 l3 o1 l3") == 0, "%s", rec.log);
    test_preempt();

    /* swapwise keeps idle models forever unless they have a keep_alive;
     * one past it leaves alone in the answer (the next sees the room) */
    scenario(3, 0, 0);
    resident(0, 1);
    resident(1, 2);
    waiting(2, 1, 95);
    models[0].idle_since = models[1].idle_since = 50;
    finish_view();
    n = s->decide(&view, a, 16);
    CHECK(only(a, n, SCHED_UNLOAD) == NULL && only(a, n, SCHED_LOAD) != NULL);
    models[1].keep_alive = 0; /* at once when idle */
    n = s->decide(&view, a, 16);
    CHECK_MSG(n == 1 && a[0].kind == SCHED_UNLOAD && a[0].model == 1, "%d actions", n);
    models[1].keep_alive = 60; /* 110: not yet, a wake-up then */
    n = s->decide(&view, a, 16);
    const struct sched_action *w = only(a, n, SCHED_WAKE);
    CHECK(only(a, n, SCHED_UNLOAD) == NULL && w && w->at == 110);

    test_min_resident(s);
    test_min_resident(sched_policy_find("lru"));
    test_order(s);
    test_order(sched_policy_find("lru"));
    test_lru();
    test_fifo();
    test_clairvoyant();
    test_long_batches(s);
    test_trim_act();
    test_partial_views();
    test_victims_needed();

    /* the batch rule: at most max; with same_params_only, one sampling class */
    CHECK(sched_batch_joins(false, 0, 1, false) && !sched_batch_joins(false, 1, 1, true));
    CHECK(sched_batch_joins(false, 3, 8, false) && sched_batch_joins(true, 3, 8, true));
    CHECK(!sched_batch_joins(true, 3, 8, false) && sched_batch_joins(true, 0, 8, false));
    return test_finish();
}
