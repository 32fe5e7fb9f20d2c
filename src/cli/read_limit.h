/* The memory's read limit as every benchmark reports it (bench read, bench
 * gemv, bench forward, and tools/bench_compare.py through bench read):
 * samples of membw_read_report taken around what they judge (before and
 * after it, or between its repetitions), the best of them the limit, and
 * how far they spread, so that the machine's drift shows beside the figure
 * set against it. */
#ifndef SHARDSWAP_CLI_READ_LIMIT_H
#define SHARDSWAP_CLI_READ_LIMIT_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "core/membw.h"

#define READ_LIMIT_MAX_SAMPLES 16
/* What the benchmarks read per thread: well above any last-level cache. */
#define READ_LIMIT_BYTES_PER_THREAD ((size_t)256 << 20)

struct read_limit {
    int threads, rounds; /* each sample: membw_read_report's threads and rounds */
    size_t bytes_per_thread;
    int n;
    double t0;                         /* time_now() at the first sample */
    double at[READ_LIMIT_MAX_SAMPLES]; /* each sample's start, seconds after t0 */
    struct membw_read_report s[READ_LIMIT_MAX_SAMPLES];
};

void read_limit_init(struct read_limit *l, int threads, size_t bytes_per_thread, int rounds);
/* Takes one more sample (past READ_LIMIT_MAX_SAMPLES the last is replaced):
 * its bytes per second. */
double read_limit_sample(struct read_limit *l);
/* The limit: the best sample's bytes per second (0 before any). */
double read_limit_bps(const struct read_limit *l);
/* The slowest sample's bytes per second (0 before any). */
double read_limit_min_bps(const struct read_limit *l);
/* {"gb_s", "min_gb_s", "spread", "samples": [...], "ways": [...] when ways}: the
 * limit, the slowest sample, (best - slowest) / best, each sample with what
 * the machine was doing, and each way's best over all samples. */
json_t *read_limit_json(const struct read_limit *l, bool ways);
/* The same as lines of text on stdout, each starting with `indent`. */
void read_limit_print(const struct read_limit *l, bool ways, const char *indent);

#endif
