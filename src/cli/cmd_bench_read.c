/* shardswap bench read: the memory's read limit alone (cli/read_limit.h),
 * every way of reading and the state of the machine beside each sample: what
 * tools/bench_compare.py takes around its peers' runs. */
#include <stdio.h>
#include <time.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/read_limit.h"
#include "core/cpus.h"
#include "core/jsonout.h"

int bench_read(int argc, char **argv)
{
    int threads = 0, mb = (int)(READ_LIMIT_BYTES_PER_THREAD >> 20), rounds = 3, samples = 3;
    float gap = 0;
    bool json = false;
    struct flag flags[] = {
        FLAG("threads", FLAG_INT, &threads, "T",
             "reading threads, at most the CPUs this process may use (default 0: all of them)"),
        FLAG_RANGE("mb-per-thread", FLAG_INT, &mb, "MB",
                   "bytes each thread reads, in MiB (default 256; a quarter of it is a second "
                   "footprint)",
                   8, 1 << 16, "8..65536"),
        FLAG_RANGE("rounds", FLAG_INT, &rounds, "N",
                   "rounds per sample, every way of reading once each (default 3)", 1, 100,
                   "1..100"),
        FLAG_RANGE("samples", FLAG_INT, &samples, "N", "samples taken in turn (default 3)", 1,
                   READ_LIMIT_MAX_SAMPLES, "1..16"),
        FLAG_RANGE("gap", FLAG_FLOAT, &gap, "S", "seconds to wait between samples (default 0)", 0,
                   3600, "0..3600"),
        FLAG("json", FLAG_BOOL, &json, NULL, "print one JSON object instead of text"),
    };
    int rc = args_parse("bench read",
                        "Measures the memory's read limit, the figure bench gemv, bench forward "
                        "and tools/bench_compare.py set decode against: the best of every way of "
                        "reading (vector widths, streams, software prefetch, streaming loads, "
                        "threads free or pinned, two footprints), each sample with its spread "
                        "and what the machine was doing (huge pages, other processes' and the "
                        "hypervisor's share of the CPUs, the clock a dependent-add chain sees).",
                        argc, argv, flags, sizeof(flags) / sizeof(flags[0]));
    if (rc)
        return rc;
    const int cpus = cpus_usable();
    if (threads < 0 || threads > cpus) {
        char v[16], range[96];
        snprintf(v, sizeof(v), "%d", threads);
        snprintf(range, sizeof(range), "0..%d, the CPUs this process may use; 0 = all", cpus);
        return args_range_fail("bench read", "threads", v, range);
    }
    struct read_limit l;
    read_limit_init(&l, threads ? threads : cpus, (size_t)mb << 20, rounds);
    for (int i = 0; i < samples; i++) {
        if (i && gap > 0) {
            struct timespec ts = {(time_t)gap, (long)((gap - (float)(time_t)gap) * 1e9f)};
            nanosleep(&ts, NULL);
        }
        read_limit_sample(&l);
    }
    if (json)
        return jsonout_print(read_limit_json(&l, true)) < 0 ? cli_fail("bench read") : 0;
    read_limit_print(&l, true, "");
    return 0;
}
