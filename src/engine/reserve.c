/* A model's device memory for its batches: the shape of a batch, the reserve
 * the scheduler holds for a resident model's largest batch, the check that a
 * request can ever fit, and a batch's allocation (halved until it fits). */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "engine/engine_impl.h"

#define JOIN_ROOM 64 /* KV positions a batch keeps for requests joining later */

/* The shape of a batch of n sequences whose longest prompt is max_prompt
 * and that needs seq positions (the longest prompt + the longest answer:
 * prompts are left-padded to the longest): room for them, plus
 * late joiners when sequences decode for more than one step; one step takes
 * at most the longest prompt per sequence. */
struct model_exec_shape engine_batch_shape(int max_pos, int n, int max_prompt, int seq,
                                         bool decodes)
{
    int max_len = seq + (decodes ? JOIN_ROOM : 0);
    if (max_len > max_pos)
        max_len = max_pos;
    return (struct model_exec_shape){.batch = n, .max_len = max_len,
                                   .max_tokens = n * max_prompt};
}

static struct model_exec_shape batch_shape(const struct swap_model *sm, int n, int max_prompt,
                                         int seq, bool decodes)
{
    return engine_batch_shape(swap_model_info(sm)->max_pos, n, max_prompt, seq, decodes);
}

/* m's batch shape: with room for its adapters' largest rank. */
static struct model_exec_shape model_batch_shape(const struct engine_model *m, int n,
                                                 int max_prompt, int seq, bool decodes)
{
    struct model_exec_shape sh = batch_shape(m->sm, n, max_prompt, seq, decodes);
    sh.max_lora_rank = atomic_load(&m->lora_rank);
    return sh;
}

/* Per device, what the pinned models hold or will hold there: their
 * weights and batches' reserves (lock held). */
static void pinned_totals(struct engine *e, uint64_t *tot)
{
    memset(tot, 0, sizeof(uint64_t) * SCHED_MAX_DEVICES);
    for (int id = 0; id < e->n_ids; id++) {
        const struct engine_model *p = e->models[id];
        for (int d = 0; p && p->pinned && d < swap_device_count(e->mgr); d++)
            if (swap_model_device_bytes(p->sm, d) > 0)
                tot[d] += swap_model_device_bytes(p->sm, d) + p->reserve[d];
    }
}

/* Sets m's batch reserve for its longest prompt and answer so far: the
 * largest batch that fits beside its weights, and, unless m is pinned,
 * beside the pinned models (pinned: pinned_totals), on every device of the
 * model (lock held). */
static void reserve_fit(struct engine *e, struct engine_model *m, const uint64_t *pinned)
{
    /* a batch of one, at least: capped to the room there is, so the model
     * can always be loaded and a batch that cannot fit fails with the
     * allocation's error instead of never being tried; a request that
     * cannot fit beside the pinned models fails in the scheduler
     * (pinned_block) */
    const int n_dev = swap_device_count(e->mgr);
    if (m->longest_prompt == 0)
        return;
    uint64_t room[SCHED_MAX_DEVICES];
    for (int d = 0; d < n_dev; d++) {
        uint64_t budget = device_budget(swap_device(e->mgr, d)),
                 beside = m->pinned || !pinned ? 0 : pinned[d];
        room[d] = budget > beside ? budget - beside : 0;
    }
    for (int n = m->max_batch; n >= 1; n--) {
        struct model_exec_shape shape = model_batch_shape(
            m, n, m->longest_prompt, m->longest_prompt + m->longest_out, m->decodes);
        bool fits = true;
        for (int d = 0; d < n_dev; d++) {
            uint64_t w = swap_model_device_bytes(m->sm, d);
            uint64_t b = w ? group_exec_bytes(m->sm, e->mgr, &shape, d) : 0;
            fits &= b != UINT64_MAX && w + b <= room[d];
            m->reserve[d] =
                b == UINT64_MAX || w + b > room[d] ? (room[d] > w ? room[d] - w : 0) : b;
        }
        if (fits)
            break;
    }
}

/* Grows m's batch reserve for a request of n_prompt + max_tokens (lock
 * held). A pinned model's growth moves the others' room: every reserve is
 * fitted again. */
void reserve_grow(struct engine *e, struct engine_model *m, int n_prompt, int max_tokens)
{
    if (n_prompt <= m->longest_prompt && max_tokens <= m->longest_out &&
        (max_tokens == 1 || m->decodes))
        return;
    m->decodes |= max_tokens > 1;
    m->longest_prompt = n_prompt > m->longest_prompt ? n_prompt : m->longest_prompt;
    m->longest_out = max_tokens > m->longest_out ? max_tokens : m->longest_out;
    if (m->pinned) {
        reserves_refit(e);
        return;
    }
    uint64_t pinned[SCHED_MAX_DEVICES];
    pinned_totals(e, pinned);
    reserve_fit(e, m, pinned);
}

/* Every model's reserve again, after a pin changed or a pinned model's
 * reserve grew (lock held): the pinned ones first, the others beside them. */
void reserves_refit(struct engine *e)
{
    uint64_t pinned[SCHED_MAX_DEVICES];
    for (int id = 0; id < e->n_ids; id++)
        if (e->models[id] && e->models[id]->pinned)
            reserve_fit(e, e->models[id], NULL);
    pinned_totals(e, pinned);
    for (int id = 0; id < e->n_ids; id++)
        if (e->models[id] && !e->models[id]->pinned)
            reserve_fit(e, e->models[id], pinned);
}

/* Of bytes on device d, a batch of one sequence of one position of m, with
 * room for adapters of rank lora_rank (0: none): what it needs there at the
 * least beside its weights (UINT64_MAX: never). */
static uint64_t least_batch(struct engine *e, const struct engine_model *m, int lora_rank, int d)
{
    struct model_exec_shape one = batch_shape(m->sm, 1, 1, 1, false);
    one.max_lora_rank = lora_rank;
    return group_exec_bytes(m->sm, e->mgr, &one, d);
}

/* The pinned models other than m with bytes on device d, as "a and b" into
 * names; what they hold there at the least (weights, and their reserve or
 * a batch of one, the larger) is returned (lock held). */
static uint64_t pinned_beside(struct engine *e, const struct engine_model *m, int d, char *names,
                              size_t cap)
{
    int n = 0, k = 0;
    for (int id = 0; id < e->n_ids; id++) {
        const struct engine_model *p = e->models[id];
        n += p && p != m && p->pinned && swap_model_device_bytes(p->sm, d) > 0;
    }
    uint64_t total = 0;
    size_t len = 0;
    names[0] = '\0';
    for (int id = 0; id < e->n_ids; id++) {
        const struct engine_model *p = e->models[id];
        uint64_t w = p && p != m && p->pinned ? swap_model_device_bytes(p->sm, d) : 0;
        if (w == 0)
            continue;
        uint64_t b = least_batch(e, p, 0, d);
        b = b == UINT64_MAX || p->reserve[d] > b ? p->reserve[d] : b;
        total += w + b;
        k++;
        if (len < cap)
            len += (size_t)snprintf(names + len, cap - len, "%s%s",
                                    k == 1   ? ""
                                    : k == n ? " and "
                                             : ", ",
                                    swap_model_name(p->sm));
    }
    return total;
}

int engine_check_pinned_room(struct engine *e, int id)
{
    pthread_mutex_lock(&e->lock);
    const struct engine_model *m = id >= 0 && id < e->n_ids ? e->models[id] : NULL;
    int rc = m ? 0 : err_set(ERR_NOT_FOUND, "no model with id %d is served", id);
    /* an adapter runs in its base's batches: its room is the base's weights,
     * its own and a batch of one for its rank, beside the pinned models
     * other than its base */
    const struct engine_model *base = m && m->base ? m->base : m;
    int rank = m && m->base ? swap_model_lora_rank(m->sm) : 0;
    for (int d = 0; rc == 0 && m && d < swap_device_count(e->mgr); d++) {
        uint64_t w = swap_model_device_bytes(base->sm, d);
        if (w == 0)
            continue;
        if (m != base)
            w += swap_model_device_bytes(m->sm, d);
        char names[256];
        uint64_t pinned = pinned_beside(e, base, d, names, sizeof names),
                 b = least_batch(e, base, rank, d), budget = device_budget(swap_device(e->mgr, d));
        if (pinned == 0 || (b != UINT64_MAX && pinned + w + b <= budget))
            continue;
        bool several = strstr(names, " and ") != NULL;
        char what[160];
        if (m != base)
            snprintf(what, sizeof what, "adapter %s of model %s", swap_model_name(m->sm),
                     swap_model_name(base->sm));
        else
            snprintf(what, sizeof what, "model %s", swap_model_name(m->sm));
        rc = err_set(ERR_NOMEM,
                     "pinned model%s %s leave%s no room for %s on device %s: %llu bytes "
                     "pinned plus its %llu (weights and a batch of one each) pass the budget of "
                     "%llu; unpin one, or raise the device budget",
                     several ? "s" : "", names, several ? "" : "s", what,
                     device_name(swap_device(e->mgr, d)), (unsigned long long)pinned,
                     (unsigned long long)(b == UINT64_MAX ? UINT64_MAX : w + b),
                     (unsigned long long)budget);
    }
    pthread_mutex_unlock(&e->lock);
    return rc;
}

/* Of bytes on device d, a batch of this one request of model sm, with room
 * for adapters of rank lora_rank (0: none): its KV cache and activations
 * (UINT64_MAX: it cannot be had). */
uint64_t request_batch_bytes(struct engine *e, struct swap_model *sm, int n_prompt, int max_tokens,
                             int lora_rank, int d)
{
    struct model_exec_shape one =
        batch_shape(sm, 1, n_prompt, n_prompt + max_tokens, max_tokens > 1);
    one.max_lora_rank = lora_rank;
    return group_exec_bytes(sm, e->mgr, &one, d);
}

/* ERR_INVALID, naming the device and the bytes, when the model's weights and
 * a batch of this one request can never fit a device of the model. */
int request_fits_ever(struct engine *e, struct swap_model *sm, int n_prompt, int max_tokens)
{
    for (int d = 0; d < swap_device_count(e->mgr); d++) {
        uint64_t w = swap_model_device_bytes(sm, d);
        if (w == 0)
            continue;
        uint64_t b = request_batch_bytes(e, sm, n_prompt, max_tokens, 0, d),
                 budget = device_budget(swap_device(e->mgr, d));
        if (b == UINT64_MAX || w + b > budget)
            return err_set(ERR_INVALID, "model %s cannot run a request of %d + %d tokens on "
                                        "device %s: its weights take %llu bytes and the "
                                        "request's KV cache and activations %llu, over the "
                                        "budget of %llu",
                           swap_model_name(sm), n_prompt, max_tokens,
                           device_name(swap_device(e->mgr, d)), (unsigned long long)w,
                           (unsigned long long)b, (unsigned long long)budget);
    }
    return 0;
}

/* Device memory may have been freed: models waiting for it may try again
 * (lock held). */
void mem_wait_clear(struct engine *e)
{
    for (int id = 0; id < e->n_ids; id++)
        if (e->models[id])
            e->models[id]->mem_wait = false;
}

/* The device of m on which a batch of shape has the free bytes but no free
 * block holds it (the memory is in pieces), or -1 (lock held). */
static int batch_fragmented(struct engine *e, const struct engine_model *m,
                            const struct model_exec_shape *shape)
{
    for (int d = 0; d < swap_device_count(e->mgr); d++) {
        if (swap_model_device_bytes(m->sm, d) == 0)
            continue;
        const struct device *dev = swap_device(e->mgr, d);
        uint64_t need = group_exec_bytes(m->sm, e->mgr, shape, d);
        uint64_t free_bytes = device_budget(dev) - device_used(dev);
        if (need != UINT64_MAX && need <= free_bytes && device_largest_free(dev) < need)
            return d;
    }
    return -1;
}

/* The device memory of a batch of the first n requests, made smaller until
 * it fits: a batch that does not fit is halved, the later half going back
 * to the head of the queue. Allocated under the lock, so the scheduler's
 * view of free memory and the held reserves change together (an allocation
 * is no copy and no wait). A single request that does not fit waits for
 * memory to be freed (given back, the model not served until a batch ends,
 * a swap completes or a model is unpinned) when anything is running or
 * moving, or, with wait_for_unpin, a pinned model holds memory; when
 * nothing is, nothing would free it, and it fails with the allocation's
 * error.
 * Returns the size of the batch (0: nothing to run). */
int batch_alloc(struct engine_model *m, struct engine_req **first, int n, struct group_exec **gb,
                int *max_prompt)
{
    struct engine *e = m->e;
    struct engine_req *cancelled[n];
    struct engine_model *unuse[n];
    int n_cancelled = 0, n_unuse = 0, rc = 0;
    char why[160] = "";
    const int max_pos = swap_model_info(m->sm)->max_pos;
    for (;;) {
        int longest_out = 0;
        bool decodes = false;
        *max_prompt = 0;
        for (int i = 0; i < n; i++) {
            *max_prompt = first[i]->n_prompt > *max_prompt ? first[i]->n_prompt : *max_prompt;
            longest_out = first[i]->max_tokens > longest_out ? first[i]->max_tokens : longest_out;
            decodes |= first[i]->max_tokens > 1;
        }
        /* the first step is the longest prompt for every sequence (the
         * others left-padded to it), so each answer starts after it */
        int seq = *max_prompt + longest_out;
        struct model_exec_shape shape = model_batch_shape(m, n, *max_prompt, seq, decodes);
        pthread_mutex_lock(&e->lock);
        /* past the model's positions together (each fits alone: submit
         * checks it): halved as below, the later half back to the queue */
        rc = seq - 1 > max_pos && n > 1 ? err_set(ERR_NOMEM,
                                                  "%d + %d positions together "
                                                  "exceed the model's %d",
                                                  *max_prompt, longest_out, max_pos)
                                        : group_exec_create(e->mgr, m->sm, &shape, gb);
        if (rc == 0) {
            m->frag_none = false;
            for (int d = 0; d < swap_device_count(e->mgr); d++)
                m->batch_bytes[d] = group_exec_bytes(m->sm, e->mgr, &shape, d);
            e->batches_running++;
            pthread_mutex_unlock(&e->lock);
            break;
        }
        snprintf(why, sizeof(why), "%s", err_msg());
        bool others = e->batches_running > 0;
        for (int id = 0; !others && id < e->n_ids; id++) {
            const struct engine_model *o = e->models[id];
            enum residency r = o ? swap_residency(e->mgr, o->sm) : RES_ON_DISK;
            /* with wait_for_unpin, a pinned model's memory is freed by an
             * unpin (engine_pin_model clears mem_wait) */
            others = r == RES_LOADING || r == RES_OFFLOADING ||
                     (e->cfg.wait_for_unpin && o != m && o && o->pinned && r == RES_ON_DEVICE);
        }
        /* halve and try again; a single request waits when something
         * running or moving may free memory, or, when the free memory is
         * there but in pieces, for the scheduler's compaction; else fails */
        bool retry = false;
        int frag = rc == ERR_NOMEM && n == 1 && !m->frag_none ? batch_fragmented(e, m, &shape) : -1;
        if (frag >= 0) {
            queue_give_back(m, first, n, cancelled, &n_cancelled, unuse, &n_unuse);
            m->frag_device = frag;
            m->mem_wait = true;
            n = 0;
            pthread_cond_signal(&e->wake);
        } else if (rc == ERR_NOMEM && n > 1) {
            queue_give_back(m, first + n / 2, n - n / 2, cancelled, &n_cancelled, unuse, &n_unuse);
            n /= 2;
            retry = true;
        } else if (rc == ERR_NOMEM && others) {
            queue_give_back(m, first, n, cancelled, &n_cancelled, unuse, &n_unuse);
            m->mem_wait = true;
            n = 0;
        }
        pthread_mutex_unlock(&e->lock);
        if (!retry)
            break;
    }
    for (int i = 0; i < n_unuse; i++)
        adapter_unuse(unuse[i]);
    for (int i = 0; i < n_cancelled; i++)
        req_finish_running(m, cancelled[i], ERR_CANCELLED, "cancelled");
    if (rc < 0 && n > 0) {
        for (int i = 0; i < n; i++)
            req_finish_running(m, first[i], rc, why);
        n = 0;
    }
    return n;
}

/* Frees the batch's device memory (see batch_alloc for the lock). */
void batch_release(struct engine_model *m, struct group_exec *gb)
{
    struct engine *e = m->e;
    if (!gb)
        return;
    pthread_mutex_lock(&e->lock);
    group_exec_free(gb);
    memset(m->batch_bytes, 0, sizeof(m->batch_bytes));
    e->batches_running--;
    pthread_mutex_unlock(&e->lock);
}
