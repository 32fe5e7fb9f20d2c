#include "backend/cpu/scratch.h"

#include <pthread.h>
#include <stdlib.h>

struct scratch {
    void *p;
    size_t cap;
};

static _Thread_local struct scratch scratch_tl[CPU_SCRATCH_SLOTS];
/* a key per slot frees the thread's buffer at its exit */
static pthread_key_t scratch_key[CPU_SCRATCH_SLOTS];
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

static void scratch_keys_make(void)
{
    for (int i = 0; i < CPU_SCRATCH_SLOTS; i++)
        (void)pthread_key_create(&scratch_key[i], free);
}

void *cpu_scratch(enum cpu_scratch_slot slot, size_t bytes)
{
    struct scratch *s = &scratch_tl[slot];
    if (bytes <= s->cap)
        return s->p;
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p)
        return NULL;
    pthread_once(&scratch_once, scratch_keys_make);
    free(s->p);
    (void)pthread_setspecific(scratch_key[slot], p);
    s->p = p;
    s->cap = bytes;
    return p;
}
