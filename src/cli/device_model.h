/* The model of the commands that compute on one device (forward,
 * generate, bench forward), opened in one place: --devices parsed as
 * everywhere else (stack_parse_devices), --compute, and the whole model
 * opened where they name. */
#ifndef SHARDSWAP_CLI_DEVICE_MODEL_H
#define SHARDSWAP_CLI_DEVICE_MODEL_H

#include <stdbool.h>

#include "engine/stack.h"
#include "model/model.h"

/* --devices LIST for a command that runs on one device. */
#define DEVICE_FLAG(dst)                                                                           \
    FLAG("devices", FLAG_STR, dst, "cpu:0|cuda:G",                                                 \
         "the device to compute on: cpu:0 (default; the weights copied into huge pages, but "      \
         "forward's one pass reads the checkpoint's mapping) or "                                 \
         "cuda:G, GPU G (the weights copied there; needs a CUDA build)")

/* --adapter DIR for a one-device command. */
#define ADAPTER_FLAG(dst)                                                                          \
    FLAG("adapter", FLAG_STR, dst, "DIR",                                                          \
         "a PEFT LoRA adapter of the model (adapter_config.json and adapter_model.safetensors), "  \
         "applied to every sequence of the run")

#define CLI_MAX_ADAPTERS 64

struct cli_model {
    struct device *dev;    /* the device, owned; NULL for the mapped checkpoint */
    struct model *m;       /* owned */
    struct model *adapter; /* --adapter's shard beside m (adapters[0]), or NULL */
    /* every adapter's shard beside m, owned; sequence b of a batch gets
     * adapters[b mod n_adapters] (cli_model_exec_open) */
    struct model *adapters[CLI_MAX_ADAPTERS];
    int n_adapters;
};

/* --compute and --devices of a one-device command (forward, generate,
 * bench forward), checked before anything is opened. */
struct cli_device_flags {
    int gpu;                   /* --devices cuda:G: G; else -1 (cpu:0) */
    bool compute_set;          /* --compute given: */
    enum kern_compute compute; /* the model computes in it */
    /* on the CPU: compute from the checkpoint's mapping, no copy (forward:
     * one pass reads each weight once, where a copy costs a pass and the
     * first touch of its memory) */
    bool cpu_mapped;
    const char *adapter;       /* --adapter DIR, or NULL */
    /* several adapters (bench forward), used instead of adapter when
     * n_adapters > 0: at most CLI_MAX_ADAPTERS */
    const char *const *adapters;
    int n_adapters;
};

/* Checks the values of --compute (NULL: the checkpoint's) and --devices
 * (NULL, "1", "cpu:0" or "cuda:G"). 0, or ERR_INVALID with a one-line
 * message naming the flag (a usage error). */
int cli_device_flags_parse(const char *compute, const char *devices, struct cli_device_flags *out);

/* Opens the checkpoint in dir (and f->adapter, or f->adapters, beside it)
 * on the device f->gpu names, sized for the weights (adapters' too) plus a
 * model_exec of shape (max_len capped at the model's positions), the
 * weights copied there (model_open_on) and the checkpoint closed: -1, a
 * CPU device, whose arena is in huge pages, the calling thread computing
 * over the kernel pool (or, with f->cpu_mapped or when the machine's
 * available memory is short of that, the mapped checkpoint: out->dev NULL,
 * a note on stderr for the second); else
 * GPU f->gpu, the calling thread made its compute thread
 * (device_compute_thread_init). With f->compute_set the model computes in
 * f->compute. The caller runs model_exec_open (at most shape's size) on
 * out->m and closes with cli_model_close. */
int cli_model_open(const struct cli_device_flags *f, const char *dir,
                   const struct model_exec_shape *shape, struct cli_model *out);
void cli_model_close(struct cli_model *cm); /* NULL-safe; the model, then its device */
/* model_exec_open of cm->m with room for the largest rank of cm's adapters,
 * sequence b given adapters[b mod n_adapters] (none without one). */
int cli_model_exec_open(const struct cli_model *cm, const struct model_exec_shape *shape,
                        struct model_exec **out);

#endif
