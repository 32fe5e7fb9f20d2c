/* The engine's live model registry (registry.c) end to end on the fixture
 * models (tests/engine_rig.h):
 * - removal: a removed model's waiting requests fail with "removed", a
 *   running one leaves its batch at the next step; its name is free again,
 *   and its last statistics say whether it took the model off its devices
 *   (an unload for reason "removed");
 * - admin load and unload, residency per shard in the statistics;
 * - the live registry: models removed, added again, pinned, unloaded and
 *   loaded while two threads submit; every request completes exactly once;
 *   statistics add up. */
#include "engine_rig.h"

/* Removing a model fails its waiting requests with a clear status and
 * unregisters it; its name is free again, and the checkpoint registered and
 * added again gets a new id. */
static void test_remove(void)
{
    struct rig g;
    rig_open(&g, "swapwise", 0, 64, 8, 1);
    atomic_store(&wrong, 0);
    gate_close(&g);
    int t = not_big(&g, 0);
    struct job q[3];
    struct engine_req *h[3];
    for (int i = 0; i < 3; i++) {
        job_init(&q[i], g.e, t, i, 12);
        struct engine_request_params p = job_params(&q[i], g.id[t], 1);
        CHECK(engine_submit(g.e, &p, &h[i]) == 0);
    }
    struct engine_model_stats last;
    CHECK(engine_remove_model(g.e, g.id[t], &last) == 0);
    CHECK(engine_remove_model(g.e, g.id[t], NULL) == ERR_NOT_FOUND);
    /* its last statistics: its three requests failed; it never reached its
     * devices, so the removal took it off none */
    CHECK_MSG(last.failed == 3 && last.submitted == 3 && last.loads == 0 &&
                  last.removal_unloads == 0 && strcmp(last.name, names[t]) == 0,
              "failed %llu, loads %llu, removal unloads %llu", (unsigned long long)last.failed,
              (unsigned long long)last.loads, (unsigned long long)last.removal_unloads);
    for (int i = 0; i < 3; i++) {
        CHECK(engine_req_wait(h[i]) == ERR_NOT_FOUND && strstr(q[i].error, "was removed") &&
              strstr(q[i].error, names[t]));
        engine_req_release(h[i]);
    }
    struct engine_model_stats ms;
    CHECK(engine_model_stats(g.e, g.id[t], &ms) == ERR_NOT_FOUND);
    CHECK(engine_find_model(g.e, names[t]) == ERR_NOT_FOUND);
    CHECK(engine_pin_model(g.e, g.id[t], true) == ERR_NOT_FOUND);
    CHECK(engine_load_model(g.e, g.id[t]) == ERR_NOT_FOUND);
    struct job late;
    job_init(&late, g.e, t, 0, 12);
    struct engine_request_params p = job_params(&late, -1, 1);
    p.model_name = names[t];
    CHECK(engine_submit(g.e, &p, NULL) == ERR_NOT_FOUND);
    CHECK(engine_add_model(g.e, g.sm[g.big]) == ERR_INVALID); /* its name is taken */
    rig_register(&g, t);
    int id = engine_add_model(g.e, g.sm[t]);
    CHECK(id == N_MODELS && engine_find_model(g.e, names[t]) == id);
    g.id[t] = id;
    gate_open(&g);
    CHECK(engine_submit(g.e, &p, NULL) == 0);
    engine_drain(g.e);
    CHECK(late.status == 0 && atomic_load(&late.done_count) == 1 && atomic_load(&wrong) == 0);
    CHECK(engine_model_stats(g.e, id, &ms) == 0 && ms.ok == 1 && ms.submitted == 1);
    struct engine_stats st;
    engine_get_stats(g.e, &st);
    CHECK(st.failed == 3 && st.ok == 1);
    check_stats_add_up(&g, "remove");
    rig_close(&g);
}

/* A model removed while its batch runs: the sequence leaves at the next step
 * with the tokens it has and the removal's status; remove returns after the
 * batch has ended, with the model off its devices and its host copy freed
 * (it was the only model loaded: device and host memory back to 0). */
static void test_remove_running(void)
{
    struct rig g;
    rig_open(&g, "swapwise", 0, 64, 8, 2);
    atomic_store(&wrong, 0);
    int t = 1;
    struct job a;
    struct engine_req *h;
    job_init(&a, g.e, t, 0, 12);
    a.hold_until_removed = true;
    struct engine_request_params p = job_params(&a, g.id[t], 1);
    CHECK(engine_submit(g.e, &p, &h) == 0);
    while (!atomic_load(&a.first_token))
        sched_yield();
    struct swap_stats ss;
    swap_get_stats(g.mgr, &ss);
    CHECK_MSG(ss.host_used == host_bytes(t), "host %llu in use, model %s has %llu",
              (unsigned long long)ss.host_used, names[t], (unsigned long long)host_bytes(t));
    struct engine_model_stats last;
    CHECK(engine_remove_model(g.e, g.id[t], &last) == 0);
    g.sm[t] = NULL; /* unregistered */
    /* it was on its devices: the removal is its one departure */
    CHECK_MSG(
        last.removal_unloads == 1 && last.loads == 1 && last.evictions == 0 && last.unloads == 0 &&
            last.idle_unloads == 0 && last.failed == 1 && last.running == 0,
        "removal unloads %llu, loads %llu, failed %llu", (unsigned long long)last.removal_unloads,
        (unsigned long long)last.loads, (unsigned long long)last.failed);
    swap_get_stats(g.mgr, &ss);
    CHECK_MSG(ss.host_used == 0, "host %llu in use after removal",
              (unsigned long long)ss.host_used);
    for (int d = 0; d < 2; d++)
        CHECK(device_used(g.devs[d]) == 0);
    CHECK(engine_req_done(h)); /* its batch ended before remove returned */
    CHECK_MSG(engine_req_wait(h) == ERR_NOT_FOUND && a.n_out == 1 && strstr(a.error, "was removed"),
              "status %d (%s), %d tokens", a.status, a.error, a.n_out);
    engine_req_release(h);
    int ids[N_MODELS];
    CHECK(engine_list_models(g.e, ids, N_MODELS) == N_MODELS - 1);
    for (int i = 0, k = 0; i < N_MODELS; i++)
        if (i != t)
            CHECK(ids[k++] == g.id[i]);
    CHECK(engine_list_models(g.e, ids, 2) == N_MODELS - 1 && ids[1] == g.id[2]);
    CHECK(atomic_load(&wrong) == 0);
    check_stats_add_up(&g, "remove running");
    rig_close(&g);
}

/* Load and unload on request, residency per shard in the statistics, and an
 * unloaded model loaded again on demand. */
static void test_load_unload(void)
{
    struct rig g;
    rig_open(&g, "swapwise", 0, 64, 8, 2);
    int t = 0, id = engine_find_model(g.e, names[t]);
    CHECK(id == g.id[t]);
    struct engine_model_stats ms;
    CHECK(engine_model_stats(g.e, id, &ms) == 0 && ms.residency == RES_ON_DISK && ms.loads == 0);
    CHECK_MSG(engine_load_model(g.e, id) == 0, "%s", err_msg());
    CHECK(swap_wait_loaded(g.mgr, g.sm[t]) == 0);
    CHECK(engine_load_model(g.e, id) == 0); /* resident already: no second load */
    CHECK(engine_model_stats(g.e, id, &ms) == 0 && ms.residency == RES_ON_DEVICE && ms.loads == 1 &&
          ms.bytes_loaded == swap_model_total_bytes(g.sm[t]) && ms.load_s > 0 && ms.n_shards == 2 &&
          !ms.pinned && strcmp(ms.name, names[t]) == 0);
    for (int s = 0; s < 2; s++)
        CHECK(ms.shards[s].device == s && ms.shards[s].bytes > 0 && ms.shards[s].n_blobs > 0 &&
              ms.shards[s].blobs_ready == ms.shards[s].n_blobs);
    CHECK(engine_unload_model(g.e, id) == 0);
    swap_wait_idle(g.mgr, g.sm[t]);
    CHECK(engine_model_stats(g.e, id, &ms) == 0 && ms.residency != RES_ON_DEVICE &&
          ms.unloads == 1 && ms.shards[0].blobs_ready == 0 && ms.shards[1].blobs_ready == 0);
    answer_one(&g, t, id, 1, 1, 12);
    CHECK(engine_model_stats(g.e, id, &ms) == 0 && ms.loads == 2 && ms.ok == 1 && ms.batches == 1 &&
          ms.compute_s > 0 && ms.latency.n == 1 && ms.ttft.n == 1 && ms.ttft.max <= ms.latency.max);
    rig_close(&g);
}

/* ---- the live registry under load ---- */

struct live {
    struct rig *g;
    struct job *jobs;
    int n_per_thread;
    atomic_bool stop_admin;
    atomic_int not_found_at_submit;
    pthread_mutex_t ids_lock; /* the admin thread re-adds models under new ids */
};

struct submitter {
    struct live *l;
    int index;
};

static void *submitter_main(void *arg)
{
    struct submitter *s = arg;
    struct live *l = s->l;
    caller_thread = true;
    uint64_t x = 1000 + (uint64_t)s->index;
    for (int i = 0; i < l->n_per_thread; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        int fix = (int)((x >> 33) % N_MODELS);
        struct job *j = &l->jobs[s->index * l->n_per_thread + i];
        job_init(j, l->g->e, fix, (int)((x >> 20) % 3), 1 + (int)((x >> 40) % 12));
        struct engine_request_params p = job_params(j, -1, x);
        p.model_name = names[fix]; /* by name: whatever id it has now */
        int rc = submit_retry(l->g->e, &p, NULL);
        if (rc == ERR_NOT_FOUND) {
            atomic_fetch_add(&l->not_found_at_submit, 1);
            j->status = 1; /* never submitted */
        } else {
            CHECK_MSG(rc == 0, "submit: %s", err_msg());
        }
    }
    return NULL;
}

#define ADMIN_EVERY 10

static void *admin_main(void *arg)
{
    struct live *l = arg;
    struct rig *g = l->g;
    caller_thread = true;
    int removes = 0, unloads = 0, loads = 0;
    for (int k = 0; !atomic_load(&l->stop_admin); k++) {
        /* one admin call per ADMIN_EVERY completions: paced by the work,
         * not by a clock */
        progress_wait_stop(atomic_load(&completed) + ADMIN_EVERY - 1, &l->stop_admin);
        int m = k % N_MODELS;
        switch (k % 5) {
        case 0: /* remove (unregisters), then register and add back under a new id */
            CHECK(engine_remove_model(g->e, g->id[m], NULL) == 0);
            rig_register(g, m);
            CHECK((g->id[m] = engine_add_model(g->e, g->sm[m])) >= N_MODELS);
            removes++;
            break;
        case 1:
            CHECK(engine_pin_model(g->e, g->id[m], true) == 0);
            break;
        case 2: {
            int rc = engine_unload_model(g->e, g->id[m]);
            CHECK_MSG(rc == 0 || rc == ERR_BUSY, "unload: %s", err_msg());
            unloads += rc == 0;
            CHECK(engine_pin_model(g->e, g->id[(k + 5) % N_MODELS], false) == 0);
            break;
        }
        case 3: {
            int rc = engine_load_model(g->e, g->id[m]);
            CHECK_MSG(rc == 0 || rc == ERR_BUSY, "load: %s", err_msg());
            loads += rc == 0;
            break;
        }
        case 4: {
            struct engine_model_stats ms;
            CHECK(engine_model_stats(g->e, g->id[m], &ms) == 0 && ms.id == g->id[m]);
            break;
        }
        }
    }
    for (int m = 0; m < N_MODELS; m++)
        CHECK(engine_pin_model(g->e, g->id[m], false) == 0);
    printf("live registry: %d removes, %d unloads, %d loads\n", removes, unloads, loads);
    return NULL;
}

static void test_live_registry(const char *policy)
{
    struct rig g;
    rig_open(&g, policy, 2, 64, 8, 2);
    atomic_store(&wrong, 0);
    atomic_store(&bad_thread, 0);
    enum { THREADS = 2, PER_THREAD = 1500 };
    struct live l = {.g = &g, .n_per_thread = PER_THREAD};
    l.jobs = calloc(THREADS * PER_THREAD, sizeof(*l.jobs));
    pthread_t sub[THREADS], admin;
    struct submitter s[THREADS];
    CHECK(pthread_create(&admin, NULL, admin_main, &l) == 0);
    for (int i = 0; i < THREADS; i++) {
        s[i] = (struct submitter){.l = &l, .index = i};
        CHECK(pthread_create(&sub[i], NULL, submitter_main, &s[i]) == 0);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(sub[i], NULL);
    pthread_mutex_lock(&progress_lock);
    atomic_store(&l.stop_admin, true);
    pthread_cond_broadcast(&progress);
    pthread_mutex_unlock(&progress_lock);
    pthread_join(admin, NULL);
    engine_drain(g.e);
    int once = 0, ok = 0, removed = 0, unsent = 0, other = 0;
    for (int i = 0; i < THREADS * PER_THREAD; i++) {
        struct job *j = &l.jobs[i];
        if (j->status == 1) {
            unsent++;
            once += atomic_load(&j->done_count) == 0;
            continue;
        }
        once += atomic_load(&j->done_count) == 1;
        ok += j->status == 0;
        if (j->status == ERR_NOT_FOUND && strstr(j->error, "was removed"))
            removed++;
        else if (j->status != 0 && other++ < 3)
            fprintf(stderr, "status %d: %s\n", j->status, j->error);
    }
    printf("live registry %-9s: %d ok, %d failed as removed, %d refused at submit\n", policy, ok,
           removed, unsent);
    CHECK_MSG(once == THREADS * PER_THREAD, "%d of %d requests completed exactly once", once,
              THREADS * PER_THREAD);
    CHECK(other == 0 && unsent == atomic_load(&l.not_found_at_submit));
    CHECK(atomic_load(&wrong) == 0 && atomic_load(&bad_thread) == 0);
    struct engine_stats st;
    engine_get_stats(g.e, &st);
    CHECK(st.ok == (uint64_t)ok && st.failed == (uint64_t)removed &&
          st.submitted == (uint64_t)(THREADS * PER_THREAD - unsent));
    check_stats_add_up(&g, "live registry");
    rig_close(&g);
    free(l.jobs);
}

/* The cases, in the order they run; `ctest -R engine_registry.load_unload` runs one. */
TEST(remove)
{
    test_remove();
}

TEST(remove_running)
{
    test_remove_running();
}

TEST(load_unload)
{
    test_load_unload();
}

TEST(live_registry_swapwise)
{
    test_live_registry("swapwise");
}

TEST(live_registry_computron)
{
    test_live_registry("computron");
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, rig_setup);
}
