/* stack_open: the serving stack from one config (see stack.h). */
#include "engine/stack.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/device.h"
#include "core/error.h"
#include "model/adapter.h"
#include "sched/sched.h"

static int model_tp(const struct stack_model_config *m)
{
    return m->tp > 0 ? m->tp : 1;
}

static int model_pp(const struct stack_model_config *m)
{
    return m->pp > 0 ? m->pp : 1;
}

static int model_device(const struct stack_model_config *m, int shard)
{
    return m->devices ? m->devices[shard] : shard;
}

/* The process owning device d. */
static int device_proc_of(const struct stack_config *c, int d)
{
    return c->procs_set ? c->procs[d] : 0;
}

/* A decimal number of digits only (no sign, no blanks) at p, into *v; the
 * end in *end. false when there is none or it overflows. */
static bool parse_index(const char *p, const char **end, long *v)
{
    if (!isdigit((unsigned char)*p))
        return false;
    char *e;
    errno = 0;
    *v = strtol(p, &e, 10);
    *end = e;
    return errno == 0;
}

/* The "P/" before an item at *p, if it has one: the process into *proc and
 * *p past the slash, 1; without one, process 0 and 0. what and s name the
 * setting in messages. */
static int parse_proc(const char *what, const char *s, const char **p, int *proc)
{
    const char *slash = *p + strcspn(*p, "/,"), *end;
    long v;
    *proc = 0;
    if (*slash != '/')
        return 0;
    if (**p == '-')
        return err_set(ERR_INVALID, "%s %s: a negative process number", what, s);
    if (!parse_index(*p, &end, &v) || end != slash || v > STACK_MAX_PROC)
        return err_set(ERR_INVALID,
                       "%s %s: expected a process number 0..%d before '/' (like "
                       "1/cpu:0)",
                       what, s, STACK_MAX_PROC);
    if (slash[1] == ',' || slash[1] == '\0')
        return err_set(ERR_INVALID,
                       "%s %s: '%.*s/' without a device after it (expected "
                       "P/cpu:INDEX or P/cuda:INDEX)",
                       what, s, (int)(slash - *p), *p);
    *p = slash + 1;
    *proc = (int)v;
    return 1;
}

int stack_parse_devices(const char *what, const char *s, struct stack_config *c)
{
    const char *end;
    long n;
    if (parse_index(s, &end, &n) && *end == '\0') {
        if (n < 1 || n > STACK_MAX_DEVICES)
            return err_set(ERR_INVALID, "%s %s: expected 1..%d CPU devices", what, s,
                           STACK_MAX_DEVICES);
        c->device_kind = "cpu";
        c->n_devices = (int)n;
        c->gpus_set = false;
        c->procs_set = false;
        memset(c->procs, 0, sizeof c->procs);
        return 0;
    }
    int gpus[STACK_MAX_DEVICES], procs[STACK_MAX_DEVICES], count = 0, rc;
    bool cuda = false, prefixed = false;
    for (const char *p = s;; p = end + 1) {
        int proc;
        if ((rc = parse_proc(what, s, &p, &proc)) < 0)
            return rc;
        prefixed |= rc == 1;
        bool is_cpu = strncmp(p, "cpu:", 4) == 0, is_cuda = strncmp(p, "cuda:", 5) == 0;
        if (!is_cpu && !is_cuda)
            return err_set(ERR_INVALID,
                           "%s %s: expected N, or a list like cpu:0,cpu:1 or cuda:0,cuda:1 (an "
                           "item of process P as P/cpu:0)",
                           what, s);
        if (count > 0 && is_cuda != cuda)
            return err_set(ERR_INVALID, "%s %s: one kind of device only (cpu or cuda)", what, s);
        cuda = is_cuda;
        const char *num = p + (is_cuda ? 5 : 4);
        long idx;
        if (*num == '-')
            return err_set(ERR_INVALID, "%s %s: a negative index", what, s);
        if (!parse_index(num, &end, &idx) || (*end != ',' && *end != '\0'))
            return err_set(ERR_INVALID, "%s %s: expected %s:INDEX items separated by commas",
                           what, s, cuda ? "cuda" : "cpu");
        if (count == STACK_MAX_DEVICES)
            return err_set(ERR_INVALID, "%s %s: more than %d devices", what, s,
                           STACK_MAX_DEVICES);
        int next = 0; /* this process's CPU devices so far */
        for (int d = 0; d < count; d++)
            next += procs[d] == proc;
        if (!cuda && idx != next)
            return err_set(ERR_INVALID,
                           "%s %s: expected CPU indices 0, 1, ... in order within each process "
                           "(process %d's cpu:%ld where its cpu:%d comes next)",
                           what, s, proc, idx, next);
        if (cuda && idx > STACK_MAX_GPU)
            return err_set(ERR_INVALID, "%s %s: GPU ordinal %ld (expected 0..%d)", what, s, idx,
                           STACK_MAX_GPU);
        gpus[count] = (int)idx;
        procs[count++] = proc;
        if (*end == '\0')
            break;
    }
    c->device_kind = cuda ? "cuda" : "cpu";
    c->n_devices = count;
    c->gpus_set = cuda;
    c->procs_set = prefixed;
    memset(c->procs, 0, sizeof c->procs);
    for (int d = 0; d < count; d++) {
        c->gpus[d] = cuda ? gpus[d] : 0;
        c->procs[d] = procs[d];
    }
    return 0;
}

/* The stack's settings, before a model is read. */
static int settings_check(const struct stack_config *c)
{
    bool cuda = c->device_kind && strcmp(c->device_kind, "cuda") == 0;
    if (c->device_kind && !cuda && strcmp(c->device_kind, "cpu") != 0)
        return err_set(ERR_INVALID, "device kind '%s': expected cpu or cuda", c->device_kind);
    if (c->n_devices < 1 || c->n_devices > STACK_MAX_DEVICES)
        return err_set(ERR_INVALID, "a stack needs 1..%d devices (got %d)", STACK_MAX_DEVICES,
                       c->n_devices);
    for (int d = 0; cuda && c->gpus_set && d < c->n_devices; d++)
        if (c->gpus[d] < 0 || c->gpus[d] > STACK_MAX_GPU)
            return err_set(ERR_INVALID, "device %d: GPU ordinal %d (expected 0..%d)", d, c->gpus[d],
                           STACK_MAX_GPU);
    if (c->n_procs < 0)
        return err_set(ERR_INVALID, "a job of %d processes: expected 1 or more (0: 1)", c->n_procs);
    const int n_procs = c->n_procs > 0 ? c->n_procs : 1;
    for (int d = 0; c->procs_set && d < c->n_devices; d++) {
        int p = c->procs[d];
        if (p < 0)
            return err_set(ERR_INVALID,
                           "devices: device %d is on process %d (expected a process "
                           "number >= 0)",
                           d, p);
        if (p >= n_procs && n_procs == 1)
            return err_set(ERR_INVALID,
                           "devices: device %d is on process %d, but the job has 1 "
                           "process (start it with mpirun -n %d or more)",
                           d, p, p + 1);
        if (p >= n_procs)
            return err_set(ERR_INVALID,
                           "devices: device %d is on process %d, but the job has %d "
                           "processes (mpirun -n %d)",
                           d, p, n_procs, n_procs);
    }
    if (!(c->link_gbps >= 0))
        return err_set(ERR_INVALID, "an emulated host link of %g GB/s: expected a number >= 0",
                       c->link_gbps);
    if (c->engine.policy && !sched_policy_find(c->engine.policy))
        return err_set(ERR_INVALID, "policy: %s scheduling policy '%.*s' (expected %s)",
                       sched_policy_find_sim(c->engine.policy) ? "simulator-only (it needs the "
                                                                 "future arrivals)"
                                                               : "unknown",
                       64, c->engine.policy, sched_policy_names());
    enum kern_compute kc;
    bool kc_set;
    if (kern_compute_choice(c->compute, &kc_set, &kc) < 0)
        return err_set(ERR_INVALID, "compute: expected f32, bf16 or auto, got '%.*s'", 64,
                       c->compute);
    return 0;
}

/* What a model must be on a stack of n_devices devices (cuda: CUDA ones;
 * device d on process procs[d]): its tp x pp shards on devices of the
 * stack, at most one a device, CUDA shards on one process, its controls
 * in range. *setting names the key a refusal is about. */
static int model_check_on(const struct stack_model_config *m, int n_devices, bool cuda,
                          const int *procs, const char **setting)
{
    int tp = model_tp(m), pp = model_pp(m);
    *setting = "tp";
    if (m->tp < 0 || m->pp < 0 || tp > STACK_MAX_DEVICES || pp > STACK_MAX_DEVICES ||
        tp * pp > STACK_MAX_DEVICES)
        return err_set(ERR_INVALID, "model %s: tp x pp = %d x %d: expected 1 to %d shards", m->name,
                       m->tp, m->pp, STACK_MAX_DEVICES);
    if (tp * pp > n_devices) /* one shard of a model per device */
        return err_set(ERR_INVALID,
                       "model %s: tp x pp = %d x %d shards, more than the %d devices (shard %d on "
                       "device %d)",
                       m->name, tp, pp, n_devices, n_devices,
                       m->devices ? m->devices[n_devices] : n_devices);
    *setting = "devices";
    for (int s = 0; m->devices && s < tp * pp; s++)
        if (m->devices[s] < 0 || m->devices[s] >= n_devices)
            return err_set(ERR_INVALID,
                           "model %s: devices[%d]: expected 0 to %d, got %d (no device %d in the "
                           "stack)",
                           m->name, s, n_devices - 1, m->devices[s], m->devices[s]);
    for (int s = 0; m->devices && s < tp * pp; s++)
        for (int t = 0; t < s; t++)
            if (m->devices[t] == m->devices[s])
                return err_set(ERR_INVALID,
                               "model %s: device %d holds two of its shards (each shard of a "
                               "model needs its own device)",
                               m->name, m->devices[s]);
    /* CUDA shards in several processes would need NCCL's groups across
     * them; CPU ones meet over MPI (comm/mpi) */
    const int p0 = procs[model_device(m, 0)];
    for (int s = 1; cuda && s < tp * pp; s++) {
        int p = procs[model_device(m, s)];
        if (p != p0)
            return err_set(ERR_INVALID,
                           "model %s: its shards span processes %d and %d on CUDA "
                           "devices, which needs NCCL across processes, not in this "
                           "version",
                           m->name, p0 < p ? p0 : p, p0 < p ? p : p0);
    }
    *setting = "max_batch";
    if (m->max_batch < 0)
        return err_set(ERR_INVALID, "model %s: max_batch: expected >= 0 (0: the engine's), got %d",
                       m->name, m->max_batch);
    *setting = m->priority < -ENGINE_PRIORITY_MAX || m->priority > ENGINE_PRIORITY_MAX
                   ? "priority"
                   : "max_queue_wait";
    if (m->priority < -ENGINE_PRIORITY_MAX || m->priority > ENGINE_PRIORITY_MAX ||
        !(m->max_queue_wait >= 0) || !isfinite(m->max_queue_wait))
        return err_set(ERR_INVALID, "model %s: priority %d, max_queue_wait %g: expected a "
                                    "priority from %d to %d and seconds >= 0",
                       m->name, m->priority, m->max_queue_wait, -ENGINE_PRIORITY_MAX,
                       ENGINE_PRIORITY_MAX);
    *setting = "min_resident";
    if (!(m->min_resident >= 0) || !isfinite(m->min_resident))
        return err_set(ERR_INVALID, "model %s: min_resident: expected seconds >= 0, got %g",
                       m->name, m->min_resident);
    *setting = "keep_alive";
    if (m->keep_alive_set && !(m->keep_alive >= 0))
        return err_set(ERR_INVALID, "model %s: keep_alive: expected seconds >= 0 or forever, "
                                    "got %g", m->name, m->keep_alive);
    *setting = "compute";
    enum kern_compute kc;
    bool kc_set;
    if (kern_compute_choice(m->compute, &kc_set, &kc) < 0)
        return err_set(ERR_INVALID, "model %s: compute: expected f32, bf16 or auto, got '%.*s'",
                       m->name, 64, m->compute);
    return 0;
}

/* Model i of c: named, unique, its shards on devices of the stack. */
static int model_check(const struct stack_config *c, int i)
{
    const struct stack_model_config *m = &c->models[i];
    if (!m->name || !m->name[0] || !m->path || !m->path[0])
        return err_set(ERR_INVALID, "models[%d]: expected a name and a checkpoint directory (path)",
                       i);
    for (int j = 0; j < i; j++)
        if (strcmp(c->models[j].name, m->name) == 0)
            return err_set(ERR_INVALID, "models[%d].name '%s': also the name of models[%d]", i,
                           m->name, j);
    int procs[STACK_MAX_DEVICES];
    for (int d = 0; d < c->n_devices; d++)
        procs[d] = device_proc_of(c, d);
    const char *setting;
    return model_check_on(m, c->n_devices, c->device_kind && strcmp(c->device_kind, "cuda") == 0,
                          procs, &setting);
}

/* Adapter i of c: named uniquely among models and adapters, over a model
 * of c, with a path. */
static int adapter_check(const struct stack_config *c, int i)
{
    const struct stack_adapter_config *a = &c->adapters[i];
    if (!a->name || !a->name[0])
        return err_set(ERR_INVALID, "adapter %d: expected a name", i);
    if (!a->path || !a->path[0])
        return err_set(ERR_INVALID, "adapter %s: expected a PEFT adapter directory (path)",
                       a->name);
    for (int k = 0; k < c->n_models; k++)
        if (c->models[k].name && strcmp(c->models[k].name, a->name) == 0)
            return err_set(ERR_INVALID, "adapter %s: a model has that name too", a->name);
    for (int k = 0; k < i; k++)
        if (strcmp(c->adapters[k].name, a->name) == 0)
            return err_set(ERR_INVALID, "adapter %s is configured twice", a->name);
    bool found = false;
    for (int k = 0; k < c->n_models && !found; k++)
        found = a->base && c->models[k].name && strcmp(c->models[k].name, a->base) == 0;
    if (!found)
        return err_set(ERR_INVALID, "adapter %s: its base '%s' is not a configured model", a->name,
                       a->base ? a->base : "");
    if (a->priority < -ENGINE_PRIORITY_MAX || a->priority > ENGINE_PRIORITY_MAX)
        return err_set(ERR_INVALID, "adapter %s: priority %d is outside %d..%d", a->name,
                       a->priority, -ENGINE_PRIORITY_MAX, ENGINE_PRIORITY_MAX);
    if (a->keep_alive_set && !(a->keep_alive >= 0))
        return err_set(ERR_INVALID, "adapter %s: keep_alive %g: expected seconds >= 0", a->name,
                       a->keep_alive);
    return 0;
}

int stack_config_check(const struct stack_config *c)
{
    int rc = settings_check(c);
    if (rc < 0)
        return rc;
    if (c->n_models < 0 || (c->n_models > 0 && !c->models))
        return err_set(ERR_INVALID, "a stack's models: %d given without a list", c->n_models);
    for (int i = 0; i < c->n_models; i++)
        if ((rc = model_check(c, i)) < 0)
            return rc;
    if (c->n_adapters < 0 || (c->n_adapters > 0 && !c->adapters))
        return err_set(ERR_INVALID, "a stack's adapters: %d given without a list", c->n_adapters);
    for (int i = 0; i < c->n_adapters; i++)
        if ((rc = adapter_check(c, i)) < 0)
            return rc;
    return 0;
}

/* stack_size, and with largest the bytes of the largest model placed on
 * each device (plus the same 1 MiB; 0: none placed there). */
static int size_devices(const struct stack_config *c, uint64_t *device_bytes, uint64_t *largest,
                        uint64_t *host_bytes)
{
    int rc = stack_config_check(c);
    if (rc < 0)
        return rc;
    const int fit = c->fit_models; /* 0: every model placed on a device at once */
    const int prompt = c->fit_prompt > 0 ? c->fit_prompt : 8;
    const int gen = c->fit_max_tokens > 0 ? c->fit_max_tokens : 1;
    const int engine_batch = c->engine.max_batch > 0 ? c->engine.max_batch : 8;
    const bool cuda = c->device_kind && strcmp(c->device_kind, "cuda") == 0;
    uint64_t need[STACK_MAX_DEVICES] = {0}, all[STACK_MAX_DEVICES] = {0};
    *host_bytes = 64u << 20;
    for (int i = 0; i < c->n_models; i++) {
        const struct stack_model_config *m = &c->models[i];
        struct model_config *mc;
        if ((rc = model_config_load(m->path, &mc)) < 0)
            return err_wrap(rc, "model %s", m->name);
        const struct model_info info = mc->info;
        const int max_pos = info.max_pos;
        /* its adapters: their bytes beside it, every one at once, and its
         * batches sized for their largest rank */
        uint64_t lora = 0;
        int rank = 0, n_lora = 0;
        for (int k = 0; k < c->n_adapters && rc == 0; k++) {
            const struct stack_adapter_config *a = &c->adapters[k];
            uint64_t b;
            int r;
            if (strcmp(a->base, m->name) != 0)
                continue;
            if ((rc = model_adapter_bytes(a->path, mc, m->path, &b, &r)) < 0)
                err_wrap(rc, "adapter %s", a->name);
            lora += rc == 0 ? b : 0;
            n_lora += rc == 0;
            rank = rc == 0 && r > rank ? r : rank;
        }
        model_config_free(mc);
        if (rc < 0)
            return rc;
        int n = m->max_batch > 0 ? m->max_batch : engine_batch;
        int p = prompt < max_pos ? prompt : max_pos - 1;
        struct model_exec_shape shape = engine_batch_shape(max_pos, n, p, p + gen, gen > 1);
        shape.max_lora_rank = rank;
        uint64_t shard[STACK_MAX_DEVICES], host = 0;
        if (model_tp(m) * model_pp(m) > STACK_MAX_DEVICES)
            return err_set(ERR_INVALID, "model %s: %d x %d shards exceed %d devices", m->name,
                           model_tp(m), model_pp(m), STACK_MAX_DEVICES);
        if ((rc = swap_layout_bytes_ep(m->path, model_tp(m), model_pp(m), m->expert_parallel,
                                       m->expert_residency, &shape, shard, &host)) < 0)
            return err_wrap(rc, "model %s", m->name);
        /* a GPU's attention may take scratch for every head of the batch at
         * once where the CPU's takes one sequence's (swap_layout_bytes sizes
         * the CPU's): room for it, as model_exec_bytes_bound leaves */
        const uint64_t scratch = cuda ? model_exec_scratch_bound(&info, model_tp(m), &shape) : 0;
        const int n_shards = model_tp(m) * model_pp(m);
        for (int s = 0; s < n_shards; s++) {
            int d = model_device(m, s);
            /* a shard of each adapter: its share, each layer's blob rounded */
            uint64_t b =
                shard[s] + scratch + lora / n_shards + 64ull * n_lora * (info.n_layers + 1);
            need[d] = b > need[d] ? b : need[d];
            all[d] += b;
        }
        *host_bytes += host + lora;
    }
    for (int d = 0; d < c->n_devices; d++) {
        uint64_t b = fit > 0 ? need[d] * (uint64_t)fit : all[d];
        device_bytes[d] = need[d] ? b + (1u << 20) : 0;
        if (largest)
            largest[d] = need[d] ? need[d] + (1u << 20) : 0;
    }
    return 0;
}

int stack_size(const struct stack_config *c, uint64_t *device_bytes, uint64_t *host_bytes)
{
    return size_devices(c, device_bytes, NULL, host_bytes);
}

static double gib(uint64_t n)
{
    return (double)n / (double)(1ull << 30);
}

/* CPU devices' arenas are host memory, mapped and touched at open, and the
 * host tier's copies are host memory too: together they must fit the
 * machine (stack.h says why MemTotal). Each device alone is checked by
 * device_open_cpu. */
int stack_check_memory(const uint64_t *budgets, int n_cpu, uint64_t host_budget, bool host_sized,
                       uint64_t phys)
{
    uint64_t dev = 0;
    for (int d = 0; d < n_cpu; d++)
        dev += budgets[d];
    if (phys == 0 || dev + host_budget <= phys)
        return 0;
    return err_set(ERR_NOMEM,
                   "the CPU device budgets (%d device%s, %.2f GiB in all) plus the host budget "
                   "(%.2f GiB%s) are %.2f GiB, more than the machine's %.2f GiB of physical "
                   "memory (MemTotal); lower --device-budget or --host-budget",
                   n_cpu, n_cpu == 1 ? "" : "s", gib(dev), gib(host_budget),
                   host_sized ? ", sized for every model's weights" : "", gib(dev + host_budget),
                   gib(phys));
}

/* The machine's physical memory (MemTotal), 0 when unknown. */
static uint64_t phys_bytes(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
}

/* Device d's index among its process's CPU devices ("1/cpu:0" is device 1
 * of "cpu:0,1/cpu:0"): its name there. */
static int local_index(const struct stack_config *c, int d)
{
    int k = 0;
    for (int e = 0; e < d; e++)
        k += device_proc_of(c, e) == device_proc_of(c, d);
    return k;
}

int stack_device_open(const struct stack_config *c, int d, uint64_t budget, struct device **out)
{
    bool cuda = c->device_kind && strcmp(c->device_kind, "cuda") == 0;
    int rc;
    if (cuda) {
        int gpu = c->gpus_set ? c->gpus[d] : d, part = 0;
        for (int e = 0; e < d; e++) /* partitions count on this process's GPUs */
            part += (c->gpus_set ? c->gpus[e] : e) == gpu &&
                    device_proc_of(c, e) == device_proc_of(c, d);
        return device_open_cuda(gpu, part, budget, out);
    }
    if ((rc = device_open_cpu(local_index(c, d), budget, out)) < 0)
        return rc;
    if (c->link_gbps > 0 && (rc = device_cpu_set_link(*out, c->link_gbps * 1e9)) < 0) {
        device_close(*out);
        *out = NULL;
    }
    return rc;
}

/* Shares pool bytes among the n devices listed in ds whose wants are
 * want[ds[k]]: each gets its want where the pool allows, and what the
 * modest ones leave is shared evenly among the rest (water filling), into
 * room[ds[k]]. */
static void room_share(const int *ds, int n, const uint64_t *want, uint64_t pool, uint64_t *room)
{
    bool done[STACK_MAX_DEVICES] = {false};
    for (int left = n, changed = 1; left > 0 && changed;) {
        changed = 0;
        uint64_t share = pool / (uint64_t)left;
        for (int k = 0; k < n; k++)
            if (!done[k] && want[ds[k]] <= share) {
                room[ds[k]] = want[ds[k]];
                pool -= want[ds[k]];
                done[k] = true;
                left--;
                changed = 1;
            }
        for (int k = 0; !changed && k < n; k++)
            room[ds[k]] = done[k] ? room[ds[k]] : share;
    }
}

/* The room the memory of this process's devices leaves each one whose
 * budget is left 0 (stack.h: "Budgets left 0"), into room[] (UINT64_MAX:
 * not known, as for another process's device or a GPU that cannot be
 * asked), given what each wants. */
static void room_of_devices(const struct stack_config *c, const uint64_t *want, uint64_t host,
                            uint64_t *room)
{
    bool cuda = c->device_kind && strcmp(c->device_kind, "cuda") == 0;
    int ds[STACK_MAX_DEVICES], n = 0;
    for (int d = 0; d < c->n_devices; d++)
        room[d] = UINT64_MAX;
    if (!cuda) { /* the CPU devices share the machine's memory with the host tier */
        uint64_t avail, total;
        for (int d = 0; d < c->n_devices; d++)
            if (device_proc_of(c, d) == 0 && !c->device_budget[d])
                ds[n++] = d;
        if (n == 0 || device_cpu_memory(&avail, &total) < 0)
            return;
        uint64_t reserve = stack_cpu_reserve(total) + host;
        room_share(ds, n, want, avail > reserve ? avail - reserve : 0, room);
        return;
    }
    bool seen[STACK_MAX_DEVICES] = {false};
    for (int d = 0; d < c->n_devices; d++) { /* the partitions of each GPU share it */
        int gpu = c->gpus_set ? c->gpus[d] : d;
        if (seen[d] || device_proc_of(c, d) != 0)
            continue;
        n = 0;
        for (int e = d; e < c->n_devices; e++)
            if ((c->gpus_set ? c->gpus[e] : e) == gpu && device_proc_of(c, e) == 0) {
                seen[e] = true;
                if (!c->device_budget[e])
                    ds[n++] = e;
            }
        /* a given budget on the same GPU is taken first */
        uint64_t given = 0, free_b, total;
        for (int e = d; e < c->n_devices; e++)
            if ((c->gpus_set ? c->gpus[e] : e) == gpu && device_proc_of(c, e) == 0)
                given += c->device_budget[e];
        if (n == 0 || device_cuda_memory(gpu, &free_b, &total) < 0)
            continue; /* stack_open's device_open_cuda says why */
        uint64_t reserve = stack_gpu_reserve(total) + given;
        room_share(ds, n, want, free_b > reserve ? free_b - reserve : 0, room);
    }
}

uint64_t stack_cpu_reserve(uint64_t total)
{
    return total / 10 > STACK_CPU_RESERVE_MIN ? total / 10 : STACK_CPU_RESERVE_MIN;
}

uint64_t stack_gpu_reserve(uint64_t total)
{
    return total / 20 > STACK_GPU_RESERVE_MIN ? total / 20 : STACK_GPU_RESERVE_MIN;
}

/* stack_budgets, with why each budget is what it is. */
static int budgets_choose(const struct stack_config *c, uint64_t *budgets, uint64_t *host_budget,
                          const char **why)
{
    uint64_t sized[STACK_MAX_DEVICES] = {0}, one[STACK_MAX_DEVICES] = {0}, host = 0;
    uint64_t room[STACK_MAX_DEVICES];
    int rc = size_devices(c, sized, one, &host);
    if (rc < 0)
        return rc;
    *host_budget = c->host_budget ? c->host_budget : host;
    room_of_devices(c, sized, *host_budget, room);
    for (int d = 0; d < c->n_devices; d++) {
        const char *w;
        if (c->device_budget[d]) {
            budgets[d] = c->device_budget[d];
            w = "given";
        } else if (!sized[d]) {
            budgets[d] = 1u << 20;
            w = "no model placed on it";
        } else if (sized[d] <= room[d]) {
            budgets[d] = sized[d];
            w = c->fit_models > 0 ? "room for fit_models of its largest model"
                                  : "room for every model placed on it at once";
        } else if (room[d] >= one[d]) {
            budgets[d] = room[d];
            w = "its share of the memory, less the reserve: models placed on it take turns";
        } else {
            budgets[d] = one[d];
            w = "room for its largest model only: the memory less the reserve leaves less";
        }
        if (why)
            why[d] = w;
    }
    return 0;
}

int stack_budgets(const struct stack_config *c, uint64_t *budgets, uint64_t *host_budget)
{
    return budgets_choose(c, budgets, host_budget, NULL);
}

int stack_open(const struct stack_config *c, struct stack **out)
{
    *out = NULL;
    uint64_t budgets[STACK_MAX_DEVICES] = {0}, host = 0;
    const char *why[STACK_MAX_DEVICES] = {NULL};
    int rc = budgets_choose(c, budgets, &host, why);
    if (rc < 0)
        return rc;
    bool remote = false;
    for (int d = 0; d < c->n_devices; d++)
        remote |= device_proc_of(c, d) != 0;
    if (remote && !c->remote)
        return err_set(ERR_INVALID, "devices: some are other processes' (devices.ranks), and "
                                    "this stack reaches none (not started by mpirun?)");
    /* not stack_config_check's: a config naming CUDA devices and a link is
     * valid until it is opened (the server's config check accepts it) */
    bool cuda = c->device_kind && strcmp(c->device_kind, "cuda") == 0;
    if (cuda && c->link_gbps > 0)
        return err_set(ERR_INVALID,
                       "an emulated host link (%g GB/s) is for CPU devices only: "
                       "CUDA devices copy over their own",
                       c->link_gbps);
    /* this machine holds only this process's CPU devices (another process's
     * are on its node; a CUDA budget is GPU memory), plus the host budget */
    uint64_t local[STACK_MAX_DEVICES];
    int n_local = 0;
    for (int d = 0; !cuda && d < c->n_devices; d++)
        if (device_proc_of(c, d) == 0)
            local[n_local++] = budgets[d];
    if ((rc = stack_check_memory(local, n_local, host, !c->host_budget, phys_bytes())) < 0)
        return rc;
    struct stack *s = calloc(1, sizeof(*s));
    if (!s)
        return err_set(ERR_NOMEM, "out of memory for a stack");
    s->models = calloc((size_t)(c->n_models ? c->n_models : 1), sizeof(*s->models));
    s->ids = calloc((size_t)(c->n_models ? c->n_models : 1), sizeof(*s->ids));
    s->adapters = calloc((size_t)(c->n_adapters > 0 ? c->n_adapters : 1), sizeof(*s->adapters));
    s->adapter_ids =
        calloc((size_t)(c->n_adapters > 0 ? c->n_adapters : 1), sizeof(*s->adapter_ids));
    if (!s->models || !s->ids || !s->adapters || !s->adapter_ids) {
        rc = err_set(ERR_NOMEM, "out of memory for a stack");
        goto fail;
    }
    s->cuda = cuda;
    for (int d = 0; d < c->n_devices; d++)
        s->procs[d] = device_proc_of(c, d);
    s->prefetch_host = c->prefetch_host;
    if ((rc = kern_compute_choice(c->compute, &s->compute_set, &s->compute)) < 0)
        goto fail; /* stack_config_check refused it already */
    for (int d = 0; d < c->n_devices; d++) {
        /* another process's device: a view of it (backend/view) */
        int proc = device_proc_of(c, d);
        char name[32]; /* device_open_view prefixes the process: "1/cpu:0" */
        snprintf(name, sizeof name, "%s:%d", cuda ? "cuda" : "cpu",
                 cuda ? (c->gpus_set ? c->gpus[d] : d) : local_index(c, d));
        rc = proc ? device_open_view(proc, cuda ? DEVICE_CUDA : DEVICE_CPU, name, budgets[d],
                                     &s->devices[d])
                  : stack_device_open(c, d, budgets[d], &s->devices[d]);
        if (rc < 0)
            goto fail;
        s->n_devices = d + 1;
        s->budget_why[d] = why[d];
    }
    s->host_budget = host;
    s->host_why = c->host_budget ? "given" : "a copy of every model, plus 64 MiB";
    struct swap_config sc = {.host_budget = host};
    if ((rc = swap_manager_create(s->devices, c->n_devices, &sc, &s->mgr)) < 0)
        goto fail;
    if (remote)
        swap_set_peers(s->mgr, c->remote);
    if ((rc = workers_create(s->mgr, &s->workers)) < 0 ||
        (rc = engine_create(s->mgr, s->workers, &c->engine, &s->engine)) < 0)
        goto fail;
    for (int i = 0; i < c->n_models; i++) {
        if ((rc = stack_add_model(s, &c->models[i], &s->models[i], NULL)) < 0)
            goto fail;
        s->ids[i] = rc;
        s->n_models = i + 1;
    }
    for (int i = 0; i < c->n_adapters; i++) {
        if ((rc = stack_add_adapter(s, &c->adapters[i], &s->adapters[i], NULL)) < 0)
            goto fail;
        s->adapter_ids[i] = rc;
        s->n_adapters = i + 1;
    }
    *out = s;
    return 0;
fail:
    stack_close(s);
    return rc;
}

/* Takes the model the engine took for a refused add out again, keeping the
 * message of the refusal (the removal's own would replace it). */
static void remove_refused(struct stack *s, int id)
{
    char why[1024];
    snprintf(why, sizeof(why), "%s", err_msg());
    if (engine_remove_model(s->engine, id, NULL) < 0)
        fprintf(stderr, "model id %d: refused, and could not be removed again: %s\n", id,
                err_msg());
    err_set(ERR_INVALID, "%s", why);
}

/* m's controls on the engine's model id, and its host copy when the stack
 * prefetches; *setting names the one refused. */
static int model_controls(struct stack *s, const struct stack_model_config *m, int id,
                          struct swap_model *sm, const char **setting)
{
    int rc = 0;
    if (m->max_batch > 0 && (rc = engine_set_max_batch(s->engine, id, m->max_batch)) < 0)
        *setting = "max_batch";
    else if (m->keep_alive_set && (rc = engine_set_keep_alive(s->engine, id, m->keep_alive)) < 0)
        *setting = "keep_alive";
    else if ((m->priority != 0 || m->max_queue_wait != 0) &&
             (rc = engine_set_priority(s->engine, id, m->priority, m->max_queue_wait)) < 0)
        *setting = "priority";
    else if (m->min_resident != 0 &&
             (rc = engine_set_min_resident(s->engine, id, m->min_resident)) < 0)
        *setting = "min_resident";
    else if (s->prefetch_host && (rc = swap_prefetch_host(s->mgr, sm)) < 0)
        *setting = "path";
    return rc < 0 ? err_wrap(rc, "model %s", m->name) : 0;
}

int stack_add_model(struct stack *s, const struct stack_model_config *m, struct swap_model **model,
                    const char **setting)
{
    const char *unused;
    setting = setting ? setting : &unused;
    *model = NULL;
    *setting = "name";
    if (!m->name || !m->name[0])
        return err_set(ERR_INVALID, "a model: expected a name");
    *setting = "path";
    if (!m->path || !m->path[0])
        return err_set(ERR_INVALID, "model %s: expected a checkpoint directory (path)", m->name);
    int rc = model_check_on(m, s->n_devices, s->cuda, s->procs, setting);
    if (rc < 0)
        return rc;
    int placement[STACK_MAX_DEVICES];
    for (int k = 0; k < model_tp(m) * model_pp(m); k++)
        placement[k] = model_device(m, k);
    struct placement pl = {.tp = model_tp(m),
                           .pp = model_pp(m),
                           .devices = placement,
                           .expert_parallel = m->expert_parallel,
                           .expert_residency = m->expert_residency};
    struct swap_model *sm;
    *setting = "path";
    if ((rc = swap_register(s->mgr, m->name, m->path, &pl, m->pinned, &sm)) < 0)
        return rc;
    enum kern_compute kc = s->compute;
    bool kc_set = s->compute_set;
    if (m->compute && m->compute[0]) /* checked: model_check_on */
        kern_compute_choice(m->compute, &kc_set, &kc);
    if (kc_set)
        swap_model_set_compute(sm, kc);
    int id = engine_add_model(s->engine, sm);
    if (id < 0) {
        *setting = "";               /* the engine's model limit */
        swap_unregister(s->mgr, sm); /* never served: idle */
        return id;
    }
    if ((rc = model_controls(s, m, id, sm, setting)) < 0) {
        remove_refused(s, id);
        return rc;
    }
    *model = sm;
    return id;
}

int stack_add_adapter(struct stack *s, const struct stack_adapter_config *a,
                      struct swap_model **model, const char **setting)
{
    const char *unused;
    setting = setting ? setting : &unused;
    *model = NULL;
    *setting = "name";
    if (!a->name || !a->name[0])
        return err_set(ERR_INVALID, "an adapter: expected a name");
    *setting = "base";
    if (!a->base || !a->base[0])
        return err_set(ERR_INVALID, "adapter %s: expected the name of its base model (base)",
                       a->name);
    int base_id = engine_find_model(s->engine, a->base);
    if (base_id < 0)
        return err_set(ERR_INVALID, "adapter %s: no model named '%s' is served (base)", a->name,
                       a->base);
    if (engine_model_base(s->engine, base_id) >= 0)
        return err_set(ERR_INVALID, "adapter %s: its base %s is an adapter (expected a model)",
                       a->name, a->base);
    *setting = "path";
    if (!a->path || !a->path[0])
        return err_set(ERR_INVALID, "adapter %s: expected a PEFT adapter directory (path)",
                       a->name);
    *setting = "name";
    if (engine_find_model(s->engine, a->name) >= 0)
        return err_set(ERR_INVALID, "adapter %s: a model of that name is served already", a->name);
    /* the base's registration: the stack's configured models, or one added
     * since (the engine knows it by name; the swap manager by pointer) */
    struct swap_model *base = NULL;
    for (int i = 0; i < s->n_models && !base; i++)
        if (s->ids[i] == base_id)
            base = s->models[i];
    if (!base)
        base = engine_model_swap(s->engine, base_id);
    *setting = "base";
    if (!base)
        return err_set(ERR_INVALID, "adapter %s: base %s is not one of this stack's models",
                       a->name, a->base);
    struct swap_model *sm;
    int rc;
    *setting = "path";
    if ((rc = swap_register_adapter(s->mgr, a->name, a->path, base, &sm)) < 0)
        return rc;
    int id = engine_add_adapter(s->engine, sm);
    if (id < 0) {
        *setting = strstr(err_msg(), "served already") ? "name" : "";
        swap_unregister(s->mgr, sm); /* never served: idle */
        return id;
    }
    rc = 0;
    if (a->keep_alive_set && (rc = engine_set_keep_alive(s->engine, id, a->keep_alive)) < 0)
        *setting = "keep_alive";
    else if (a->priority != 0 && (rc = engine_set_priority(s->engine, id, a->priority, 0)) < 0)
        *setting = "priority";
    else if (a->pinned && (rc = engine_pin_model(s->engine, id, true)) < 0)
        *setting = "";
    if (rc < 0) {
        err_wrap(rc, "adapter %s", a->name);
        remove_refused(s, id);
        return rc;
    }
    *model = sm;
    return id;
}

/* Of device d, what model m needs at least to serve: its weights there and
 * a batch of one sequence of one position (its KV cache and activations),
 * with room for adapters of rank lora_rank (0: none); 0 when it has no
 * shard there. */
static int least_on(const struct swap_model *m, int lora_rank, int d, uint64_t *bytes)
{
    const struct model_info *info = swap_model_info(m);
    struct model_exec_shape one = engine_batch_shape(info->max_pos, 1, 1, 1, false);
    one.max_lora_rank = lora_rank;
    uint64_t need[STACK_MAX_DEVICES], host;
    int rc = swap_layout_bytes_ep(swap_model_path(m), swap_model_tp(m), swap_model_pp(m),
                                  swap_model_expert_parallel(m), swap_model_expert_residency(m),
                                  &one, need, &host);
    if (rc < 0)
        return err_wrap(rc, "model %s", swap_model_name(m));
    *bytes = 0;
    for (int k = 0; k < swap_model_shard_count(m); k++)
        if (swap_shard_device(swap_model_shard(m, k)) == d)
            *bytes += need[k];
    return 0;
}

/* The pinned models of s with bytes on device d, as "a and b" into buf;
 * what they need there at least (least_on: weights and a batch of one
 * each) into *bytes. */
static int pinned_on(const struct stack *s, int d, char *buf, size_t cap, uint64_t *bytes)
{
    int n = 0, k = 0;
    size_t len = 0;
    *bytes = 0;
    buf[0] = '\0';
    for (int i = 0; i < s->n_models; i++)
        n += swap_model_pinned(s->models[i]) && swap_model_device_bytes(s->models[i], d) > 0;
    for (int i = 0; i < s->n_models; i++) {
        if (!swap_model_pinned(s->models[i]) || swap_model_device_bytes(s->models[i], d) == 0)
            continue;
        uint64_t b;
        int rc = least_on(s->models[i], 0, d, &b);
        if (rc < 0)
            return rc;
        *bytes += b;
        k++;
        if (len < cap)
            len += (size_t)snprintf(buf + len, cap - len, "%s%s",
                                    k == 1   ? ""
                                    : k == n ? " and "
                                             : ", ",
                                    swap_model_name(s->models[i]));
    }
    return 0;
}

/* Whether the pinned models leave model m room on each of its devices for
 * what it needs at the least: a model (not pinned) its weights and a batch
 * of one; an adapter its base's weights and a batch of one at its rank
 * (unless the base is pinned itself) and its own weights. ERR_NOMEM naming
 * the model (the adapter and its base) and the pinned models. */
static int pinned_room_for(const struct stack *s, const struct swap_model *m)
{
    const struct swap_model *base = swap_model_base(m);
    const struct swap_model *model = base ? base : m;
    for (int d = 0; d < s->n_devices; d++) {
        uint64_t need = 0, pinned, budget = device_budget(s->devices[d]);
        char names[256], who[200];
        int rc;
        if (swap_model_device_bytes(model, d) == 0)
            continue;
        if ((!swap_model_pinned(model) &&
             (rc = least_on(model, swap_model_lora_rank(m), d, &need)) < 0) ||
            (rc = pinned_on(s, d, names, sizeof names, &pinned)) < 0)
            return rc;
        if (base)
            need += swap_model_device_bytes(m, d);
        if (!pinned || pinned + need <= budget)
            continue;
        if (base)
            snprintf(who, sizeof who, "adapter %s of model %s", swap_model_name(m),
                     swap_model_name(base));
        else
            snprintf(who, sizeof who, "model %s", swap_model_name(m));
        return err_set(ERR_NOMEM,
                       "pinned model%s %s leave%s no room for %s on device %s: %llu bytes "
                       "pinned plus its %llu (%s) pass the budget of %llu; unpin one, or "
                       "raise the device budget",
                       strstr(names, " and ") ? "s" : "", names,
                       strstr(names, " and ") ? "" : "s", who, device_name(s->devices[d]),
                       (unsigned long long)pinned, (unsigned long long)need,
                       !base                     ? "weights and a batch of one each"
                       : swap_model_pinned(base) ? "its own weights"
                                                 : "its base's weights, its own and a batch of one",
                       (unsigned long long)budget);
    }
    return 0;
}

int stack_load_pinned(struct stack *s)
{
    int rc;
    for (int d = 0; d < s->n_devices; d++) {
        uint64_t pinned, budget = device_budget(s->devices[d]);
        char names[256];
        if ((rc = pinned_on(s, d, names, sizeof names, &pinned)) < 0)
            return rc;
        if (pinned > budget)
            return err_set(ERR_NOMEM,
                           "pinned models %s need %llu bytes of device %s together (weights "
                           "and a batch of one each), more than its budget of %llu; unpin "
                           "one, or raise the device budget",
                           names, (unsigned long long)pinned, device_name(s->devices[d]),
                           (unsigned long long)budget);
    }
    for (int i = 0; i < s->n_models; i++)
        if (!swap_model_pinned(s->models[i]) && (rc = pinned_room_for(s, s->models[i])) < 0)
            return rc;
    for (int i = 0; i < s->n_adapters; i++)
        if ((rc = pinned_room_for(s, s->adapters[i])) < 0)
            return rc;
    /* every load started, then every one waited for: they overlap */
    for (int i = 0; i < s->n_models; i++)
        if (swap_model_pinned(s->models[i]) && (rc = engine_load_model(s->engine, s->ids[i])) < 0)
            return err_wrap(rc, "pinned model %s: its load at start",
                            swap_model_name(s->models[i]));
    for (int i = 0; i < s->n_models; i++)
        if (swap_model_pinned(s->models[i]) && (rc = swap_wait_loaded(s->mgr, s->models[i])) < 0)
            return err_wrap(rc, "pinned model %s: its load at start",
                            swap_model_name(s->models[i]));
    return 0;
}

void stack_close(struct stack *s)
{
    if (!s)
        return;
    engine_destroy(s->engine);
    workers_destroy(s->workers);
    swap_manager_destroy(s->mgr);
    for (int d = 0; d < s->n_devices; d++)
        device_close(s->devices[d]);
    free(s->models);
    free(s->ids);
    free(s->adapters);
    free(s->adapter_ids);
    free(s);
}
