#include "core/event.h"

void event_init(struct event *e)
{
    atomic_init(&e->state, 0);
    e->status = 0;
    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->cond, NULL);
}

void event_destroy(struct event *e)
{
    pthread_mutex_destroy(&e->lock);
    pthread_cond_destroy(&e->cond);
}

void event_reset(struct event *e)
{
    pthread_mutex_lock(&e->lock);
    atomic_store(&e->state, 0);
    e->status = 0;
    pthread_mutex_unlock(&e->lock);
}

void event_set(struct event *e, int status)
{
    pthread_mutex_lock(&e->lock);
    e->status = status;
    atomic_store(&e->state, 1);
    pthread_cond_broadcast(&e->cond);
    pthread_mutex_unlock(&e->lock);
}

bool event_is_set(const struct event *e)
{
    return atomic_load(&e->state) == 1;
}

int event_wait(struct event *e)
{
    pthread_mutex_lock(&e->lock);
    while (atomic_load(&e->state) == 0)
        pthread_cond_wait(&e->cond, &e->lock);
    int st = e->status;
    pthread_mutex_unlock(&e->lock);
    return st;
}
