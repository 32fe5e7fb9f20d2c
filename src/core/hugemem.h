/* Anonymous memory for weights and the buffers copied to and from them, in
 * transparent huge pages where the kernel allows: one 2 MiB page-table
 * entry instead of 512 of 4 KiB, so a stream over hundreds of MB misses the
 * TLB 512 times less. Measured on the Xeon (family 6 model 167, KVM) of
 * docs/performance.md: the llama Q8_0 head streamed at 19.0 GB/s from such a
 * copy, 12.1 from one in 4 KiB pages, 12.5 from the GGUF file's mapping
 * (a file's page cache is in 4 KiB pages; MADV_COLLAPSE on it fails there).
 *
 * The kernel backs only whole, 2 MiB-aligned stretches of a mapping with
 * huge pages, and aligns an anonymous mapping on its own only when its
 * length is a multiple of 2 MiB (Linux 6.12 on); so hugemem_map aligns the
 * start itself and leaves the length as asked: a tail under 2 MiB stays in
 * 4 KiB pages rather than costing up to 2 MiB more of resident memory. */
#ifndef SHARDSWAP_CORE_HUGEMEM_H
#define SHARDSWAP_CORE_HUGEMEM_H

#include <stdbool.h>
#include <stddef.h>

#define HUGEMEM_PAGE ((size_t)2 << 20)

/* bytes (> 0) of zeroed anonymous memory starting at a HUGEMEM_PAGE
 * boundary, MADV_HUGEPAGE asked for, no page faulted in yet; NULL (errno
 * set) when it cannot be mapped. The mapping is exactly bytes rounded up
 * to the base page: munmap(p, bytes) frees it. */
void *hugemem_map(size_t bytes);

/* What /proc/self/smaps says of the mapping holding p. */
struct hugemem_info {
    bool anonymous;   /* no file behind it (and not the stack or a vdso) */
    bool advised;     /* VmFlags has hg: MADV_HUGEPAGE asked for */
    double rss_kb;    /* resident */
    double huge_kb;   /* of it in transparent huge pages (AnonHugePages) */
    unsigned long lo; /* the mapping: [lo, hi) */
    unsigned long hi;
};

/* 0 with *out filled, or -1 when smaps cannot be read or no mapping holds
 * p. Reads the whole file: for checks and reports, not hot paths. */
int hugemem_query(const void *p, struct hugemem_info *out);

#endif
