/* core/workq.h and core/queue.h: items run in post order on the queue's own
 * thread, a stop drains what is queued, many posters lose nothing and keep
 * each poster's order, workq_sync waits for exactly what was posted before
 * it, the idle callback and its wake, and the destructor's no-op cases; a
 * pool's threads run items at once, each started once, named by index,
 * and its stop drains what its runs post. */
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "core/queue.h"
#include "core/workq.h"
#include "test.h"

struct job {
    struct workq_item item;
    int poster, seq;
};

/* What the queue's thread saw, written only by it (read after a sync or a
 * stop, which order it before the reader). */
struct log {
    pthread_t self;
    bool init_on_thread, init_first, run_on_thread;
    int n;
    int order[4096][2]; /* (n) poster, seq */
    /* a gate the first item waits at, so that posts pile up behind it */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool gate_closed, at_gate;
    atomic_int idles;
};

static void log_init(struct log *l)
{
    memset(l, 0, sizeof(*l));
    pthread_mutex_init(&l->lock, NULL);
    pthread_cond_init(&l->cond, NULL);
    atomic_init(&l->idles, 0);
}

static void log_free(struct log *l)
{
    pthread_mutex_destroy(&l->lock);
    pthread_cond_destroy(&l->cond);
}

static void job_thread_init(void *arg)
{
    struct log *l = arg;
    l->self = pthread_self();
    l->init_on_thread = true;
    l->init_first = l->n == 0;
}

static void job_run(struct workq_item *item, void *arg)
{
    struct log *l = arg;
    struct job *j = queue_data(item, struct job, item);
    l->run_on_thread = pthread_equal(pthread_self(), l->self);
    pthread_mutex_lock(&l->lock);
    l->at_gate = true;
    pthread_cond_broadcast(&l->cond);
    while (l->gate_closed)
        pthread_cond_wait(&l->cond, &l->lock);
    pthread_mutex_unlock(&l->lock);
    if (l->n < 4096) {
        l->order[l->n][0] = j->poster;
        l->order[l->n][1] = j->seq;
    }
    l->n++;
}

static const struct workq_ops job_ops = {.thread_init = job_thread_init, .run = job_run};

TEST(queue_links)
{
    struct queue head, a, b, c;
    queue_init(&head);
    CHECK(queue_empty(&head));
    queue_insert_tail(&head, &b);
    queue_insert_tail(&head, &c);
    queue_insert_head(&head, &a);
    struct queue *q;
    struct queue *want[] = {&a, &b, &c};
    int i = 0;
    queue_foreach(q, &head) {
        CHECK(i < 3 && q == want[i++]);
    }
    CHECK(i == 3);
    queue_remove(&b); /* from the middle */
    queue_remove(&b); /* harmless twice */
    CHECK(queue_head(&head) == &a && a.next == &c && c.prev == &a && head.prev == &c);
    queue_remove(&a);
    queue_remove(&c);
    CHECK(queue_empty(&head));
}

TEST(order)
{
    static struct log l;
    log_init(&l);
    struct workq q;
    CHECK(workq_init(&q, "test-order", &job_ops, &l) == 0);
    static struct job jobs[1000];
    for (int i = 0; i < 1000; i++) {
        jobs[i] = (struct job){.poster = 0, .seq = i};
        workq_post(&q, &jobs[i].item);
    }
    workq_sync(&q);
    CHECK(l.n == 1000);
    bool ordered = true;
    for (int i = 0; i < 1000; i++)
        ordered = ordered && l.order[i][1] == i;
    CHECK(ordered);
    CHECK(l.init_on_thread && l.init_first && l.run_on_thread);
    CHECK(!pthread_equal(l.self, pthread_self()));
    char name[16] = "";
    pthread_getname_np(q.threads[0], name, sizeof(name));
    CHECK_MSG(strcmp(name, "test-order") == 0, "thread name \"%s\"", name);
    workq_free(&q);
    log_free(&l);
}

/* Items queued behind a blocked one all run before workq_stop returns. */
TEST(stop_drains)
{
    static struct log l;
    log_init(&l);
    l.gate_closed = true;
    struct workq q;
    CHECK(workq_init(&q, "test-a-name-longer-than-fifteen", &job_ops, &l) == 0);
    static struct job jobs[64];
    for (int i = 0; i < 64; i++) {
        jobs[i] = (struct job){.seq = i};
        workq_post(&q, &jobs[i].item);
    }
    pthread_mutex_lock(&l.lock);
    while (!l.at_gate)
        pthread_cond_wait(&l.cond, &l.lock);
    CHECK(l.n == 0);
    l.gate_closed = false;
    pthread_cond_broadcast(&l.cond);
    pthread_mutex_unlock(&l.lock);
    workq_stop(&q);
    CHECK(l.n == 64 && l.order[63][1] == 63);
    workq_stop(&q); /* twice: nothing */
    workq_free(&q);
    workq_free(&q); /* zeroed: nothing */
    struct workq never = {0};
    workq_stop(&never);
    workq_free(&never);
    log_free(&l);
}

struct poster {
    struct workq *q;
    int id, n;
    struct job *jobs;
};

static void *poster_main(void *arg)
{
    struct poster *p = arg;
    for (int i = 0; i < p->n; i++) {
        p->jobs[i] = (struct job){.poster = p->id, .seq = i};
        workq_post(p->q, &p->jobs[i].item);
    }
    return NULL;
}

/* Four threads post 1000 items each: every item runs once, and each
 * poster's items run in the order it posted them. */
TEST(many_posters)
{
    enum { P = 4, N = 1000 };
    static struct log l;
    static struct job jobs[P][N];
    log_init(&l);
    struct workq q;
    CHECK(workq_init(&q, "test-posters", &job_ops, &l) == 0);
    pthread_t tid[P];
    struct poster ps[P];
    for (int p = 0; p < P; p++) {
        ps[p] = (struct poster){.q = &q, .id = p, .n = N, .jobs = jobs[p]};
        CHECK(pthread_create(&tid[p], NULL, poster_main, &ps[p]) == 0);
    }
    for (int p = 0; p < P; p++)
        pthread_join(tid[p], NULL);
    workq_stop(&q);
    CHECK(l.n == P * N);
    int next[P] = {0};
    bool ordered = true;
    for (int i = 0; i < l.n && i < 4096; i++) {
        int p = l.order[i][0];
        ordered = ordered && p >= 0 && p < P && l.order[i][1] == next[p]++;
    }
    CHECK(ordered);
    for (int p = 0; p < P; p++)
        CHECK(next[p] == N);
    workq_free(&q);
    log_free(&l);
}

/* A run that posts to its own queue: the new item runs after it. */
struct chain {
    struct workq *q;
    struct job jobs[10];
    int ran;
};

static void chain_run(struct workq_item *item, void *arg)
{
    struct chain *c = arg;
    struct job *j = queue_data(item, struct job, item);
    CHECK(j->seq == c->ran);
    c->ran++;
    if (j->seq + 1 < 10) {
        c->jobs[j->seq + 1] = (struct job){.seq = j->seq + 1};
        workq_post(c->q, &c->jobs[j->seq + 1].item);
    }
}

static const struct workq_ops chain_ops = {.run = chain_run};

TEST(post_from_run)
{
    static struct chain c;
    struct workq q;
    c.q = &q;
    CHECK(workq_init(&q, "test-chain", &chain_ops, &c) == 0);
    c.jobs[0] = (struct job){.seq = 0};
    workq_post(&q, &c.jobs[0].item);
    /* a stop drains what run posts while it drains */
    workq_free(&q);
    CHECK(c.ran == 10);
}

static double count_idle(void *arg)
{
    struct log *l = arg;
    atomic_fetch_add(&l->idles, 1);
    return 60; /* a long sleep: only a wake, a post or the stop ends it */
}

static const struct workq_ops idle_ops = {.run = job_run, .idle = count_idle};

static void sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static bool wait_idles(struct log *l, int at_least)
{
    for (int i = 0; i < 5000 && atomic_load(&l->idles) < at_least; i++)
        sleep_ms(1);
    return atomic_load(&l->idles) >= at_least;
}

TEST(idle_and_wake)
{
    static struct log l;
    log_init(&l);
    struct workq q;
    CHECK(workq_init(&q, "test-idle", &idle_ops, &l) == 0);
    CHECK(wait_idles(&l, 1)); /* at once when the queue starts empty */
    sleep_ms(20);
    CHECK(atomic_load(&l.idles) == 1); /* then asleep */
    workq_wake(&q);
    CHECK(wait_idles(&l, 2));
    static struct job j = {.seq = 7};
    workq_post(&q, &j.item); /* a post ends the sleep too, and idle follows */
    workq_sync(&q);
    CHECK(l.n == 1 && l.order[0][1] == 7);
    CHECK(wait_idles(&l, 3));
    /* the stop ends the 60 s sleep */
    workq_free(&q);
    CHECK(atomic_load(&l.idles) == 3);
    log_free(&l);
}

/* workq_sync returns once what was posted before it is done, while the
 * thread is still busy with later posts. */
TEST(sync_waits_for_earlier)
{
    static struct log l;
    log_init(&l);
    struct workq q;
    CHECK(workq_init(&q, "test-sync", &job_ops, &l) == 0);
    static struct job jobs[3];
    for (int i = 0; i < 3; i++)
        jobs[i] = (struct job){.seq = i};
    workq_post(&q, &jobs[0].item);
    workq_sync(&q);
    CHECK(l.n == 1);
    workq_sync(&q); /* nothing posted since: returns at once */
    pthread_mutex_lock(&l.lock);
    l.gate_closed = true;
    l.at_gate = false;
    pthread_mutex_unlock(&l.lock);
    workq_post(&q, &jobs[1].item);
    workq_post(&q, &jobs[2].item);
    pthread_mutex_lock(&l.lock);
    while (!l.at_gate)
        pthread_cond_wait(&l.cond, &l.lock);
    CHECK(l.n == 1);
    l.gate_closed = false;
    pthread_cond_broadcast(&l.cond);
    pthread_mutex_unlock(&l.lock);
    workq_sync(&q);
    CHECK(l.n == 3);
    workq_free(&q);
    log_free(&l);
}

/* A pool of P threads: P items meet at a barrier (so P run at once, each on
 * its own thread), every thread's init ran once, and a chain of reposts
 * posted during the stop still runs to its end. */
enum { POOL = 3 };

struct meet {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int inits, arrived, chain_ran;
    pthread_t seen[POOL];
    struct workq *q;
    struct job jobs[POOL], chain[20];
};

static void meet_init(void *arg)
{
    struct meet *m = arg;
    pthread_mutex_lock(&m->lock);
    m->inits++;
    pthread_mutex_unlock(&m->lock);
}

static void meet_run(struct workq_item *item, void *arg)
{
    struct meet *m = arg;
    struct job *j = queue_data(item, struct job, item);
    if (j->poster == 1) { /* the chain: each posts the next */
        m->chain_ran++;   /* one at a time: each posted by the one before */
        if (j->seq + 1 < 20) {
            m->chain[j->seq + 1] = (struct job){.poster = 1, .seq = j->seq + 1};
            workq_post(m->q, &m->chain[j->seq + 1].item);
        }
        return;
    }
    pthread_mutex_lock(&m->lock);
    m->seen[m->arrived++] = pthread_self();
    pthread_cond_broadcast(&m->cond);
    while (m->arrived < POOL)
        pthread_cond_wait(&m->cond, &m->lock);
    pthread_mutex_unlock(&m->lock);
}

static const struct workq_ops meet_ops = {.thread_init = meet_init, .run = meet_run};

TEST(pool)
{
    static struct meet m;
    memset(&m, 0, sizeof(m));
    pthread_mutex_init(&m.lock, NULL);
    pthread_cond_init(&m.cond, NULL);
    struct workq q;
    m.q = &q;
    CHECK(workq_init_pool(&q, "test-pool-long-name", POOL, &meet_ops, &m) == 0);
    CHECK(q.n_threads == POOL);
    for (int i = 0; i < POOL; i++) {
        m.jobs[i] = (struct job){.seq = i};
        workq_post(&q, &m.jobs[i].item);
    }
    pthread_mutex_lock(&m.lock);
    while (m.arrived < POOL)
        pthread_cond_wait(&m.cond, &m.lock);
    pthread_mutex_unlock(&m.lock);
    for (int i = 0; i < POOL; i++)
        for (int k = i + 1; k < POOL; k++)
            CHECK(!pthread_equal(m.seen[i], m.seen[k]));
    char name[16] = "";
    pthread_getname_np(q.threads[2], name, sizeof(name));
    CHECK_MSG(strcmp(name, "test-pool-lo2") == 0, "thread name \"%s\"", name);
    m.chain[0] = (struct job){.poster = 1, .seq = 0};
    workq_post(&q, &m.chain[0].item);
    workq_free(&q); /* the chain goes on while the pool drains */
    CHECK(m.chain_ran == 20);
    CHECK(m.inits == POOL);
    pthread_mutex_destroy(&m.lock);
    pthread_cond_destroy(&m.cond);
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, NULL);
}
