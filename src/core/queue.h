/* An intrusive doubly linked queue, in the shape of libuv's src/queue.h: a
 * struct queue embedded in the caller's struct links it; a list is a
 * circular ring through a head struct queue (empty: the head points at
 * itself), so insertion at either end and removal from anywhere are O(1)
 * and allocate nothing. No lock: whoever owns the list guards it.
 *
 *     struct job { struct queue link; int n; };
 *     struct queue jobs;
 *     queue_init(&jobs);
 *     queue_insert_tail(&jobs, &j->link);
 *     struct job *first = queue_data(queue_head(&jobs), struct job, link);
 */
#ifndef SHARDSWAP_CORE_QUEUE_H
#define SHARDSWAP_CORE_QUEUE_H

#include <stdbool.h>
#include <stddef.h>

struct queue {
    struct queue *next, *prev;
};

/* The struct of `type` whose member `field` is the node at ptr. */
#define queue_data(ptr, type, field) ((type *)(void *)((char *)(ptr) - offsetof(type, field)))

/* Every node of the list at head, first to last; the body must not remove
 * the current node (take the head and remove it in a while loop instead). */
#define queue_foreach(q, head) for ((q) = (head)->next; (q) != (head); (q) = (q)->next)

static inline void queue_init(struct queue *head)
{
    head->next = head;
    head->prev = head;
}

static inline bool queue_empty(const struct queue *head)
{
    return head->next == head;
}

/* The first node; only on a list that is not empty. */
static inline struct queue *queue_head(const struct queue *head)
{
    return head->next;
}

static inline void queue_insert_tail(struct queue *head, struct queue *q)
{
    q->next = head;
    q->prev = head->prev;
    q->prev->next = q;
    head->prev = q;
}

static inline void queue_insert_head(struct queue *head, struct queue *q)
{
    q->next = head->next;
    q->prev = head;
    q->next->prev = q;
    head->next = q;
}

/* Unlinks q from whichever list holds it; q's own links are left pointing
 * at itself, so a second remove is harmless. */
static inline void queue_remove(struct queue *q)
{
    q->prev->next = q->next;
    q->next->prev = q->prev;
    queue_init(q);
}

#endif
