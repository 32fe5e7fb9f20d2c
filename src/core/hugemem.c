#include "core/hugemem.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

void *hugemem_map(size_t bytes)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t len = (bytes + page - 1) / page * page;
    if (bytes == 0 || len < bytes || len + HUGEMEM_PAGE < len)
        return NULL;
    /* HUGEMEM_PAGE more than asked, then the unaligned head and the rest
     * of the tail given back: the start lands on a boundary wherever the
     * kernel put the mapping */
    char *raw =
        mmap(NULL, len + HUGEMEM_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED)
        return NULL;
    char *p = (char *)(((uintptr_t)raw + HUGEMEM_PAGE - 1) & ~(uintptr_t)(HUGEMEM_PAGE - 1));
    if (p > raw)
        munmap(raw, (size_t)(p - raw));
    if (raw + len + HUGEMEM_PAGE > p + len)
        munmap(p + len, (size_t)(raw + len + HUGEMEM_PAGE - (p + len)));
#ifdef MADV_HUGEPAGE
    (void)madvise(p, len, MADV_HUGEPAGE); /* refused (THP off): 4 KiB pages, still correct */
#endif
    return p;
}

int hugemem_query(const void *p, struct hugemem_info *out)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return -1;
    memset(out, 0, sizeof(*out));
    const unsigned long at = (unsigned long)(uintptr_t)p;
    char line[512];
    bool in = false, found = false;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi, ino;
        char perms[8];
        /* a mapping's header: "lo-hi perms offset dev inode [path]" */
        int used = 0;
        if (sscanf(line, "%lx-%lx %7s %*x %*x:%*x %lu%n", &lo, &hi, perms, &ino, &used) == 4) {
            if (found)
                break; /* the next mapping: ours is read */
            in = at >= lo && at < hi;
            if (in) {
                found = true;
                const char *path = line + used;
                path += strspn(path, " \t");
                out->anonymous = ino == 0 && (*path == '\n' || *path == '\0');
                out->lo = lo;
                out->hi = hi;
            }
            continue;
        }
        double kb;
        if (!in)
            continue;
        if (sscanf(line, "Rss: %lf kB", &kb) == 1)
            out->rss_kb = kb;
        else if (sscanf(line, "AnonHugePages: %lf kB", &kb) == 1)
            out->huge_kb = kb;
        else if (strncmp(line, "VmFlags:", 8) == 0)
            out->advised = strstr(line, " hg") != NULL;
    }
    fclose(f);
    return found ? 0 : -1;
}
