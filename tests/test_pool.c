/* The CPU kernels' worker pool: every task of every job runs exactly once
 * and has finished when pool_run returns, over many back-to-back jobs whose
 * task counts grow and shrink (a decode step issues ~100 such jobs; a job
 * with more tasks than the one before is where a worker still leaving the
 * previous job once claimed a task of the new one under the old job's
 * name, so pool_run returned with a task unfinished). */
#include <stdatomic.h>
#include <string.h>

#include "backend/cpu/pool.h"
#include "test.h"

#define MAX_TASKS 40
#define JOBS 200000

struct job {
    atomic_int runs[MAX_TASKS]; /* times each task ran */
    int n;
};

static void task(void *ctx, int i)
{
    struct job *j = ctx;
    /* a little work, so tasks overlap the way the GEMV's do */
    volatile unsigned x = (unsigned)i;
    for (int k = 0; k < 50; k++)
        x = x * 1664525u + 1013904223u;
    if (i >= 0 && i < j->n)
        atomic_fetch_add(&j->runs[i], 1);
    else
        atomic_fetch_add(&j->runs[MAX_TASKS - 1], 1000); /* a task outside the job */
}

int main(void)
{
    pool_set_threads(2);
    static struct job jobs[2];
    int wrong = 0, first_bad = -1;
    for (int it = 0; it < JOBS; it++) {
        struct job *j = &jobs[it & 1];
        /* counts that grow for a while, then drop: 2, 3, ..., 33, 2, ... */
        j->n = 2 + it % 32;
        for (int i = 0; i < MAX_TASKS; i++)
            atomic_store(&j->runs[i], 0);
        pool_run(task, j, j->n);
        for (int i = 0; i < MAX_TASKS; i++)
            if (atomic_load(&j->runs[i]) != (i < j->n)) {
                if (first_bad < 0)
                    first_bad = it;
                wrong++;
                break;
            }
    }
    CHECK_MSG(wrong == 0, "%d of %d jobs returned with a task not run exactly once (first: job %d)",
              wrong, JOBS, first_bad);
    return test_finish();
}
