#include "cli/device_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "core/error.h"
#include "model/adapter.h"

/* --devices of a one-device command: NULL, "1", "cpu:0" or "cuda:G" (*gpu
 * = G, else -1); "0/" allowed, another process's device refused (these
 * commands never run under mpirun). */
static int device_parse(const char *devices, int *gpu)
{
    *gpu = -1;
    if (!devices)
        return 0;
    struct stack_config sc = {0};
    int rc = stack_parse_devices("--devices", devices, &sc);
    if (rc < 0)
        return rc;
    if (sc.n_devices != 1)
        return err_set(ERR_INVALID, "--devices %s: this command runs on one device (got %d)",
                       devices, sc.n_devices);
    if (sc.procs_set && sc.procs[0] != 0)
        return err_set(ERR_INVALID,
                       "--devices %s: this command runs on a device of its own process, not "
                       "process %d's",
                       devices, sc.procs[0]);
    if (strcmp(sc.device_kind, "cuda") == 0)
        *gpu = sc.gpus[0];
    return 0;
}

int cli_device_flags_parse(const char *compute, const char *devices, struct cli_device_flags *out)
{
    int rc = cli_compute(compute, &out->compute_set, &out->compute);
    return rc < 0 ? rc : device_parse(devices, &out->gpu);
}

/* f's adapter directories: the list, or --adapter's one; *n of them. */
static const char *const *adapter_names(const struct cli_device_flags *f, int *n)
{
    *n = f->n_adapters > 0 ? f->n_adapters : f->adapter != NULL;
    return f->n_adapters > 0 ? f->adapters : &f->adapter;
}

/* The whole model on GPU gpu (or the CPU, gpu < 0), on a device sized for
 * it and shape: in the device's memory, as serve runs it. On the CPU that is
 * the arena's huge pages (core/hugemem.h), not the checkpoint's mapping:
 * a file's page cache is in 4 KiB pages, and the decode's weight streams
 * ran 1.5x slower from it (llama-3.2-1b Q8_0's head: 12.5 GB/s from the
 * GGUF mapping, 19.0 from the arena, Xeon of docs/performance.md). The copy
 * costs time at open (docs/performance.md gives it); the mapping is
 * closed once the weights are in (model_open_on), so one copy stays
 * resident. Where MemAvailable has no room for the copy, the mapped
 * checkpoint as before, with a note (cli_model_open maps it for forward,
 * f->cpu_mapped, whose single pass a copy would not pay for). The calling thread computes over the
 * whole kernel pool there (--threads), where an engine's CPU device runs
 * alone on its compute thread. */
static int open_on_device(const struct cli_device_flags *f, const char *dir,
                          const struct model_exec_shape *shape, struct cli_model *out)
{
    struct model_config *cfg;
    int rc = model_config_load(dir, &cfg);
    if (rc < 0)
        return rc;
    struct model_exec_shape sh = *shape;
    if (sh.max_len > cfg->info.max_pos)
        sh.max_len = cfg->info.max_pos; /* model_exec_init refuses more, naming the limit */
    uint64_t weights, exec, lora = 0;
    int n;
    const char *const *names = adapter_names(f, &n);
    for (int a = 0; a < n && rc == 0; a++) {
        uint64_t bytes;
        int rank;
        rc = model_adapter_bytes(names[a], cfg, dir, &bytes, &rank);
        lora += rc == 0 ? bytes : 0;
        if (rc == 0 && rank > sh.max_lora_rank)
            sh.max_lora_rank = rank;
    }
    model_config_free(cfg);
    if (rc < 0 || (rc = model_device_bytes(dir, &sh, &weights, &exec)) < 0)
        return rc;
    weights += lora;
    /* 1 MiB beside them: what the backend rounds or aligns */
    const uint64_t budget = weights + exec + (1u << 20);
    uint64_t avail, total;
    if (f->gpu < 0 && device_cpu_memory(&avail, &total) == 0 && budget > avail) {
        /* a copy would push out other processes' memory, or be killed:
         * the mapping's page cache the kernel can drop and read again */
        fprintf(stderr,
                "shardswap: note: %s needs %.2f GB for a copy of its weights and context, more "
                "than the %.2f GB available: computing from the checkpoint's mapping (4 KiB "
                "pages, slower)\n",
                dir, (double)budget / 1e9, (double)avail / 1e9);
        return model_open(dir, &out->m);
    }
    if (f->gpu < 0) {
        if ((rc = device_open_cpu(0, budget, &out->dev)) < 0)
            return rc;
    } else {
        if ((rc = device_open_cuda(f->gpu, 0, budget, &out->dev)) < 0)
            return rc;
        /* the calling thread runs the forward: it is the device's compute thread */
        device_compute_thread_init(out->dev);
    }
    return model_open_on(dir, out->dev, f->compute_set ? &f->compute : NULL, &out->m);
}

int cli_model_open(const struct cli_device_flags *f, const char *dir,
                   const struct model_exec_shape *shape, struct cli_model *out)
{
    memset(out, 0, sizeof(*out));
    int rc = f->gpu < 0 && f->cpu_mapped ? model_open(dir, &out->m)
                                          : open_on_device(f, dir, shape, out);
    if (rc < 0) {
        cli_model_close(out);
        return rc;
    }
    if (f->compute_set)
        model_set_compute(out->m, f->compute);
    int n;
    const char *const *names = adapter_names(f, &n);
    if (n > CLI_MAX_ADAPTERS) {
        cli_model_close(out);
        return err_set(ERR_INVALID, "%d adapters: expected at most %d", n, CLI_MAX_ADAPTERS);
    }
    for (; out->n_adapters < n; out->n_adapters++)
        if ((rc = model_adapter_open(names[out->n_adapters], out->m, dir,
                                     &out->adapters[out->n_adapters])) < 0) {
            cli_model_close(out);
            return rc;
        }
    out->adapter = n ? out->adapters[0] : NULL;
    return 0;
}

int cli_model_exec_open(const struct cli_model *cm, const struct model_exec_shape *shape,
                        struct model_exec **out)
{
    struct model_exec_shape sh = *shape;
    for (int a = 0; a < cm->n_adapters; a++)
        if (model_adapter_rank(cm->adapters[a]) > sh.max_lora_rank)
            sh.max_lora_rank = model_adapter_rank(cm->adapters[a]);
    int rc = model_exec_open(cm->m, &sh, out);
    if (rc < 0 || cm->n_adapters == 0)
        return rc;
    int batch = model_exec_batch(*out);
    const struct model **per = malloc((size_t)batch * sizeof(*per));
    if (!per)
        rc = err_set(ERR_NOMEM, "out of memory");
    for (int b = 0; per && b < batch; b++)
        per[b] = cm->adapters[b % cm->n_adapters];
    if (per)
        rc = model_exec_set_adapters(*out, per);
    free(per);
    if (rc < 0) {
        model_exec_free(*out);
        *out = NULL;
    }
    return rc;
}

void cli_model_close(struct cli_model *cm)
{
    if (!cm)
        return;
    for (int a = 0; a < cm->n_adapters; a++)
        model_close(cm->adapters[a]);
    cm->n_adapters = 0;
    model_close(cm->m);
    device_close(cm->dev);
    cm->m = NULL;
    cm->adapter = NULL;
    cm->dev = NULL;
}
