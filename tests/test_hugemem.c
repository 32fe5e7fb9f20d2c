/* Where the CPU computes from (core/hugemem.h): hugemem_map's memory starts
 * at a 2 MiB boundary, is anonymous and has MADV_HUGEPAGE (smaps' VmFlags
 * "hg") wherever the kernel has transparent huge pages; a CPU device's
 * arena and large host-tier blocks are such memory; a whole model opened on
 * a CPU device (model_open_on, what generate and forward run on) has every
 * weight blob there and computes logits bit-identical to the same
 * checkpoint's mapped views. Whether the kernel then backs it with huge
 * pages (AnonHugePages) depends on its settings and fragmentation, so only
 * eligibility is checked: a file's mapping must read as not eligible. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/device.h"
#include "core/error.h"
#include "core/hugemem.h"
#include "model/model.h"
#include "model/model_impl.h"
#include "test.h"
#include "tiny_opt.h"

static char tmp[96];

/* Whether this kernel has transparent huge pages at all: without them
 * MADV_HUGEPAGE is refused and no VmFlags say hg. */
static bool thp_present(void)
{
    return access("/sys/kernel/mm/transparent_hugepage/enabled", R_OK) == 0;
}

/* p's mapping is anonymous, starts at a 2 MiB boundary at or before p and,
 * with THP, is advised for huge pages. */
static void check_eligible(const void *p, const char *what)
{
    struct hugemem_info h;
    CHECK_MSG(hugemem_query(p, &h) == 0, "%s: no mapping in /proc/self/smaps", what);
    CHECK_MSG(h.anonymous, "%s: not anonymous memory", what);
    CHECK_MSG(h.lo % HUGEMEM_PAGE == 0, "%s: mapping at %#lx, not 2 MiB aligned", what, h.lo);
    CHECK_MSG(!thp_present() || h.advised, "%s: no MADV_HUGEPAGE (VmFlags hg)", what);
}

static void setup(void)
{
    test_scratch_dir(tmp, sizeof(tmp), "hugemem");
}

/* aligned, exactly the asked length (page-rounded), advised; munmap frees it */
TEST(map)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t sizes[] = {1, HUGEMEM_PAGE - 1, HUGEMEM_PAGE, 5 * HUGEMEM_PAGE + 12345};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        char *p = hugemem_map(sizes[i]);
        CHECK_MSG(p != NULL, "%zu bytes", sizes[i]);
        if (!p)
            continue;
        CHECK((uintptr_t)p % HUGEMEM_PAGE == 0);
        memset(p, 7, sizes[i]); /* all of it writable */
        check_eligible(p, "hugemem_map");
        struct hugemem_info h;
        /* the mapping is ours alone (a neighbour of the same flags may merge
         * into it, so only its start and that it covers the length) */
        CHECK(hugemem_query(p, &h) == 0 && h.lo == (uintptr_t)p &&
              h.hi >= (uintptr_t)p + (sizes[i] + page - 1) / page * page);
        CHECK(munmap(p, sizes[i]) == 0);
    }
    CHECK(hugemem_map(0) == NULL);
}

/* a file's mapping (the page cache: 4 KiB pages) reads as not eligible */
TEST(file_mapping)
{
    char path[128];
    snprintf(path, sizeof(path), "%s/f", tmp);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0 && ftruncate(fd, 1 << 20) == 0);
    void *p = mmap(NULL, 1 << 20, PROT_READ, MAP_PRIVATE, fd, 0);
    CHECK(p != MAP_FAILED);
    struct hugemem_info h;
    CHECK(hugemem_query(p, &h) == 0 && !h.anonymous && !h.advised);
    munmap(p, 1 << 20);
    close(fd);
}

/* a CPU device's arena and its large host blocks (the host tier's) */
TEST(cpu_device)
{
    struct device *d = NULL;
    CHECK_MSG(device_open_cpu(0, 3 * HUGEMEM_PAGE + 4096, &d) == 0, "%s", err_msg());
    if (!d)
        return;
    struct dbuf *b = NULL;
    CHECK(device_alloc(d, HUGEMEM_PAGE, &b) == 0);
    check_eligible(dbuf_ptr(b), "the arena");
    void *host = NULL;
    CHECK(device_host_alloc(d, HUGEMEM_PAGE + 100, &host) == 0);
    check_eligible(host, "a host-tier block");
    device_host_free(d, host, HUGEMEM_PAGE + 100);
    device_free(b);
    device_close(d);
}

/* logits of ids through m, n rows of vocab */
static void logits_of(struct model *m, const int32_t *ids, int n, float *out)
{
    struct model_exec *ex = NULL;
    const struct model_exec_shape shape = {.batch = 1, .max_len = n, .max_rows = n};
    CHECK_MSG(model_exec_open(m, &shape, &ex) == 0, "%s", err_msg());
    if (!ex)
        return;
    CHECK_MSG(model_forward(m, ex, ids, NULL, n, true, out) == 0, "%s", err_msg());
    model_exec_free(ex);
}

/* the weights of a whole model on a CPU device: every blob eligible, the
 * logits those of the mapped checkpoint, bit for bit (bf16 and f32) */
TEST(model_weights)
{
    const enum dtype dtypes[] = {DTYPE_BF16, DTYPE_F32};
    const int vocab = 1000, n = 5;
    const int32_t ids[] = {2, 17, 400, 999, 3};
    for (int k = 0; k < 2; k++) {
        char dir[128];
        snprintf(dir, sizeof(dir), "%s/m%d", tmp, k);
        CHECK(mkdir(dir, 0700) == 0);
        struct model_config *c = tiny_opt_config(2, vocab);
        struct model_random_opts o = {.dtype = dtypes[k], .seed = 11};
        CHECK(model_random_write(c, dir, &o) == 0);
        model_config_free(c);

        struct model *mapped = NULL, *copied = NULL;
        struct device *d = NULL;
        uint64_t weights = 0, exec = 0;
        const struct model_exec_shape shape = {.batch = 1, .max_len = n, .max_rows = n};
        CHECK_MSG(model_open(dir, &mapped) == 0, "%s", err_msg());
        CHECK_MSG(model_device_bytes(dir, &shape, &weights, &exec) == 0, "%s", err_msg());
        CHECK(device_open_cpu(0, weights + exec + (1u << 20), &d) == 0);
        CHECK_MSG(d && model_open_on(dir, d, NULL, &copied) == 0, "%s", err_msg());
        if (!mapped || !copied) {
            model_close(copied);
            model_close(mapped);
            device_close(d);
            continue;
        }
        CHECK(copied->n_blobs > 0);
        for (int b = 0; b < copied->n_blobs; b++)
            if (copied->blobs[b])
                check_eligible(dbuf_ptr(copied->blobs[b]), "a weight blob");
        float *a = malloc(sizeof(float) * n * vocab), *e = malloc(sizeof(float) * n * vocab);
        CHECK(a && e);
        logits_of(mapped, ids, n, a);
        logits_of(copied, ids, n, e);
        CHECK_MSG(memcmp(a, e, sizeof(float) * n * vocab) == 0,
                  "%s: logits of the copy differ from the mapped checkpoint's",
                  dtypes[k] == DTYPE_BF16 ? "bf16" : "f32");
        free(a);
        free(e);
        model_close(copied);
        model_close(mapped);
        device_close(d);
    }
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, setup);
}
