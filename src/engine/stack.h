/* The serving stack in one call: devices, swap manager, device workers and
 * engine, and the models registered and served, from one config struct.
 * What `bench swap`, `bench workload` and the server build on.
 *
 *   stack_open(config) -> devices (each with its byte budget), the swap
 *   manager (host budget), one compute thread per device, the engine
 *   (policy, batch size, queue), every model registered under its name with
 *   its TP x PP placement and served (pinned, max batch as configured)
 *   stack_close() drains the engine and frees everything, in reverse order
 *
 * Budgets left 0 are sized for the config: a device holds every model
 * placed on it at once (or `fit_models` of the largest one), each with the
 * device memory of its largest batch (engine_batch_shape of max batch
 * sequences of fit_prompt + fit_max_tokens tokens), plus 1 MiB; the host
 * holds a copy of every model plus 64 MiB. A device of this process gets no
 * more than its memory leaves it, and never less than its largest model:
 *   CPU devices share the machine's available memory (MemAvailable) less
 *   the host budget (the host tier's copies live in the same memory) and a
 *   reserve for the system, stack_cpu_reserve (a tenth of the physical
 *   memory, at least 1 GiB);
 *   the devices on one GPU share its free memory (cudaMemGetInfo) less the
 *   budgets given to others there and stack_gpu_reserve (a twentieth of
 *   its memory, at least 512 MiB);
 *   a device the memory leaves short of every model gets what it leaves
 *   (its models take turns), shared so that a device wanting less than an
 *   even share keeps its want and the rest share the remainder.
 * No more than every model at once, since a CPU device's arena is mapped
 * and touched at open and a GPU's taken in one allocation: bytes no model
 * can use would be taken from the machine for nothing. Another process's
 * device is sized alone (its memory is not known here). All errors name
 * the model, device or field.
 */
#ifndef SHARDSWAP_ENGINE_STACK_H
#define SHARDSWAP_ENGINE_STACK_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/engine.h"

#define STACK_MAX_DEVICES 64
/* GPU ordinals a device list may name: far beyond any machine, small enough
 * to print and to count partitions with */
#define STACK_MAX_GPU 1023
/* process numbers a device list may name ("P/cpu:0"), for the same reasons;
 * the job's own count (stack_config.n_procs) is stack_config_check's */
#define STACK_MAX_PROC 1023
/* the least a default budget leaves the system (stack_cpu_reserve, stack_gpu_reserve) */
#define STACK_CPU_RESERVE_MIN (1ull << 30)
#define STACK_GPU_RESERVE_MIN (512ull << 20)

struct stack_model_config {
    const char *name; /* unique; what requests name */
    const char *path; /* Hugging Face checkpoint directory */
    int tp, pp;       /* 0: 1 */
    /* a mixture of experts' routed experts whole on the TP ranks
     * (placement.expert_parallel); refused for a model without them */
    bool expert_parallel;
    /* each routed expert a unit of residency of its own
     * (placement.expert_residency); refused for a model without them */
    bool expert_residency;
    /* shard (stage s, rank r) on device devices[s * tp + r]; NULL: devices
     * 0 .. tp * pp - 1 */
    const int *devices;
    bool pinned;
    int max_batch; /* 0: the engine's */
    /* "f32", "bf16", or NULL / "auto": stack_config.compute */
    const char *compute;
    /* with keep_alive_set, engine_set_keep_alive's seconds (0: at once;
     * INFINITY: never); unset: the policy's own */
    bool keep_alive_set;
    double keep_alive;
    int priority;          /* engine_set_priority's (0: the default) */
    double max_queue_wait; /* engine_set_priority's (0: no bound) */
    double min_resident;   /* engine_set_min_resident's (0: none) */
};

struct stack_adapter_config {
    const char *name; /* unique among models and adapters */
    const char *base; /* a model's name (stack_config.models or added since) */
    const char *path; /* the PEFT adapter directory */
    bool pinned;      /* kept on the devices whenever its base is resident */
    bool keep_alive_set;
    double keep_alive; /* idle seconds before it leaves its devices (base stays) */
    int priority;      /* engine_set_priority's, for its requests' order in the base's queue */
};

struct stack_config {
    const char *device_kind; /* "cpu" (default) or "cuda" */
    int n_devices;
    /* cuda: the GPU of device d is gpus[d] (gpus_set false: GPU d). Devices on one GPU
     * are its partitions, each with its own budget: "cuda:0", "cuda:0.1", ... */
    int gpus[STACK_MAX_DEVICES];
    bool gpus_set;
    /* under mpirun (docs/ARCHITECTURE.md: "Processes"): device d belongs to
     * process procs[d] of the job's n_procs (0: 1); procs_set false: every
     * device is process 0's. Process 0 runs the engine; it opens another
     * process's device as a view (device_open_view) and reaches it
     * through remote (required then). */
    int procs[STACK_MAX_DEVICES];
    bool procs_set;
    int n_procs;
    const struct swap_peers *remote;
    uint64_t device_budget[STACK_MAX_DEVICES]; /* 0: sized (see above) */
    double link_gbps; /* CPU devices: emulated host link (0: none; with cuda an error) */
    uint64_t host_budget;                      /* 0: sized */
    /* sizing of budgets left 0 */
    int fit_models;     /* models resident at once per device (0: every one placed on it) */
    int fit_prompt;     /* prompt tokens of a typical request (0: 8) */
    int fit_max_tokens; /* generated tokens of one (0: 1) */
    struct engine_config engine;
    const struct stack_model_config *models;
    int n_models;
    /* adapters served over the models (stack_add_adapter), in order, after them */
    const struct stack_adapter_config *adapters;
    int n_adapters;
    /* every model staged into host memory at open (else on first load) */
    bool prefetch_host;
    /* the models' precision unless they say: "f32", "bf16", or NULL /
     * "auto": each checkpoint's (model_compute_default) */
    const char *compute;
};

struct stack {
    int n_devices;
    struct device *devices[STACK_MAX_DEVICES];
    struct swap_manager *mgr;
    struct workers *workers;
    struct engine *engine;
    int n_models;
    struct swap_model **models; /* (n_models) as configured; models[i] is invalid once
                                 * engine_remove_model(ids[i]) unregistered it */
    int *ids;                   /* (n_models) their engine ids */
    int n_adapters;
    struct swap_model **adapters; /* (n_adapters) stack_config.adapters', as models */
    int *adapter_ids;             /* (n_adapters) their engine ids */
    /* why device d's budget is what it is ("given", "room for every model
     * placed on it at once", ...): static strings, for the server's log */
    const char *budget_why[STACK_MAX_DEVICES];
    uint64_t host_budget;
    const char *host_why; /* "given" or how it was sized */
    /* what stack_add_model checks a model against and defaults it to, from
     * the config stack_open was given */
    bool cuda;                    /* the devices are CUDA's */
    int procs[STACK_MAX_DEVICES]; /* device d's process */
    bool compute_set;             /* compute is the stack's precision; else each checkpoint's */
    enum kern_compute compute;
    bool prefetch_host; /* each model staged into host memory as it is added */
};

/* A device list as the CLI and the server's config give it, into c's
 * device_kind (a static string), n_devices, gpus[], gpus_set, procs[] and
 * procs_set:
 *   "N"                  N CPU devices of process 0 (1..STACK_MAX_DEVICES);
 *   "cpu:0,cpu:1,..."    CPU devices, indices 0, 1, ... in order;
 *   "cuda:G,cuda:H,..."  device d on GPU ordinal gpus[d]; a GPU listed again
 *                        is a further partition of it ("cuda:0,cuda:0": two
 *                        devices on GPU 0, each with its own budget).
 * Any item may name its process (under mpirun) as "P/": "cpu:0,1/cpu:0,1/cpu:1"
 * is process 0's cpu:0, then process 1's cpu:0 and cpu:1; "0/cuda:0,1/cuda:0"
 * GPU 0 of each process's node. No prefix: process 0. CPU indices count
 * 0, 1, ... within each process; procs_set is true when any item has a
 * prefix (procs[] is filled either way). Whether the job has those
 * processes is stack_config_check's question (n_procs).
 * what names the setting in messages ("--devices"). ERR_INVALID with one
 * line naming what and s (junk, mixed kinds, a negative or out-of-order
 * index, a negative or junk process number, "P/" without an item, too many
 * devices); c is unchanged then. Whether a CUDA device exists is
 * stack_open's question. */
int stack_parse_devices(const char *what, const char *s, struct stack_config *c);

/* What must hold of a config before anything is opened or read, the one
 * place the stack's settings are checked (stack_size and stack_open call
 * it; so does the server's serve_config_check): the device kind (cpu,
 * cuda), 1..STACK_MAX_DEVICES devices, GPU ordinals 0..STACK_MAX_GPU,
 * every device on a process of the job (procs[d] in 0 .. n_procs - 1), a
 * link rate >= 0, a known policy (sched_policy_find), the precisions
 * (kern_compute_choice); each model named, unique, with a path, its
 * tp x pp shards (at most one per device) on devices of the stack, on
 * one process when the devices are CUDA's (CPU models may span processes),
 * max_batch >= 0. An emulated link with CUDA devices is a valid config
 * that stack_open refuses. ERR_INVALID, one line naming the model or setting. */
int stack_config_check(const struct stack_config *c);

/* Builds the stack and serves each model of the config (stack_add_model);
 * on failure nothing is left and the message names what
 * failed (a model's path, a device, a budget). Before any device is opened
 * it refuses (stack_check_memory) CPU device budgets plus the host budget
 * above the machine's physical memory. */
int stack_open(const struct stack_config *cfg, struct stack **out);
/* Device d of c opened with budget bytes on the process that owns it, as
 * stack_open does: a CUDA device is its GPU's next partition on that
 * process's node, a CPU device is named by its index on that process
 * ("1/cpu:0" is cpu:0 there) and gets the emulated link. For stack_open
 * and for the other processes of a job (cluster/follower). */
int stack_device_open(const struct stack_config *c, int d, uint64_t budget, struct device **out);
/* The budget stack_open gives each device (given, else sized for the
 * config within the device's memory: "Budgets left 0" above; 1 MiB for a
 * device holding no model), into budgets[0 .. n_devices), and the host
 * budget (given, else sized): what process 0 tells the other processes of
 * a job to open theirs with. Checks c first (stack_config_check). */
int stack_budgets(const struct stack_config *c, uint64_t *budgets, uint64_t *host_budget);
/* Serves model m on s: the one way a model is added, for stack_open's
 * models and for a server's admin route alike. Checks m against the stack
 * (a name and a path, tp x pp shards on its devices, at most one a device,
 * CUDA shards on one process, max_batch, priority, max_queue_wait,
 * min_resident, keep_alive and compute in range: stack_config_check's
 * rules), registers it (swap_register), sets its precision (m's, else the
 * stack's), adds it to the engine, then its controls (max batch,
 * keep_alive, priority and max_queue_wait, min_resident) and, when the
 * stack prefetches, stages it into host memory. Returns its engine id
 * (>= 0) with the model in *model (the engine's from then on:
 * engine_add_model). On failure nothing of m is left (a model the engine
 * took is removed again, the refusal's message kept), and when setting is
 * not NULL *setting names the key the refusal is about: "name", "path"
 * (also what registering refuses: the checkpoint, its fit in the budgets),
 * "tp", "devices", "max_batch", "priority", "max_queue_wait",
 * "min_resident", "keep_alive", "compute", or "" (the engine's model
 * limit, out of memory). Any thread but the engine's; adds of one name
 * are the caller's to serialize (the engine refuses a second). */
int stack_add_model(struct stack *s, const struct stack_model_config *m, struct swap_model **model,
                    const char **setting);

/* Serves adapter a on s: checks it (name, base served and not an adapter,
 * path), registers it (swap_register_adapter), adds it to the engine, then
 * its controls. Returns its engine id with *model set; on failure nothing of
 * it is left, *setting names the key ("name", "base", "path", "keep_alive",
 * "priority", or ""). */
int stack_add_adapter(struct stack *s, const struct stack_adapter_config *a,
                      struct swap_model **model, const char **setting);

/* Loads the configured models that are pinned (stack.models[i] with
 * swap_model_pinned) onto their devices through the engine
 * (engine_load_model, as an admin's load) and waits for the loads. First
 * refuses, with ERR_NOMEM naming both models and the device, a pinned set
 * that leaves no room on a device for a configured model that is not
 * pinned (its weights plus the working memory of a batch of one sequence
 * of one token, what it needs at the least to run) or for a configured
 * adapter (its base's weights, its own and such a batch at its rank, the
 * adapter and its base named), or pinned models that do not fit a device
 * together. What a server does at start; stack_open
 * leaves pinned models on disk until they are asked for. */
int stack_load_pinned(struct stack *s);

/* Drains the engine, then frees everything. NULL-safe. */
void stack_close(struct stack *s);

/* Whether n_cpu CPU devices' budgets plus the host budget fit phys bytes of
 * physical memory: ERR_NOMEM naming every number when not (host_sized: the
 * host budget was sized for the models, not given). MemTotal rather than
 * MemAvailable: what is available moves with every other process and the
 * page cache, so a start checked against it would pass or fail by chance,
 * while a budget above the physical memory can never be met. phys 0
 * (unknown) passes. */
int stack_check_memory(const uint64_t *budgets, int n_cpu, uint64_t host_budget, bool host_sized,
                       uint64_t phys);

/* The device bytes the config would size for device d (0: d holds nothing)
 * and the host bytes, before any memory is asked about; for benchmarks and
 * simulations that mirror a stack. */
int stack_size(const struct stack_config *cfg, uint64_t *device_bytes, uint64_t *host_bytes);

/* What a default budget leaves the system of a machine with total bytes of
 * physical memory (a tenth, at least STACK_CPU_RESERVE_MIN), and of a GPU
 * with total bytes (a twentieth, at least STACK_GPU_RESERVE_MIN). */
uint64_t stack_cpu_reserve(uint64_t total);
uint64_t stack_gpu_reserve(uint64_t total);

#endif
