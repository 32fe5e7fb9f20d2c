/* A one-shot completion flag that threads can wait on: the readiness of a
 * loaded layer, the end of a copy, the end of a job. Cheap to test without a
 * lock (event_is_set), blocking to wait (event_wait). */
#ifndef SHARDSWAP_CORE_EVENT_H
#define SHARDSWAP_CORE_EVENT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

struct event {
    atomic_int state; /* 0 = pending, 1 = set */
    int status;       /* the result the setter reported (0 or a negative error code) */
    pthread_mutex_t lock;
    pthread_cond_t cond;
};

void event_init(struct event *e);
void event_destroy(struct event *e);
/* Back to pending. Only when nobody waits on it. */
void event_reset(struct event *e);
/* Sets the event with a status and wakes every waiter. */
void event_set(struct event *e, int status);
bool event_is_set(const struct event *e);
/* Waits until set; returns the status given to event_set. */
int event_wait(struct event *e);

#endif
