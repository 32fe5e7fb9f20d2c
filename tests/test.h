/* A minimal test harness: CHECK records a failure and goes on; a test
 * program returns test_finish(), which is 1 when any check failed, and
 * test_skip() exits 77, which ctest reports as skipped. */
#ifndef SHARDSWAP_TEST_H
#define SHARDSWAP_TEST_H

#include <stdio.h>
#include <stdlib.h>

static int test_failures;
static int test_checks;

#define CHECK(cond)                                                                      \
    do {                                                                                 \
        test_checks++;                                                                   \
        if (!(cond)) {                                                                   \
            test_failures++;                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);     \
        }                                                                                \
    } while (0)

#define CHECK_MSG(cond, ...)                                                             \
    do {                                                                                 \
        test_checks++;                                                                   \
        if (!(cond)) {                                                                   \
            test_failures++;                                                             \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);     \
            fprintf(stderr, __VA_ARGS__);                                                \
            fputc('\n', stderr);                                                         \
        }                                                                                \
    } while (0)

static inline void test_skip(const char *why)
{
    printf("SKIP: %s\n", why);
    exit(77);
}

/* max |a - b| / max |b| over n values; infinite when a has a NaN. The
 * relative error every model comparison states its tolerance in. */
static inline double test_rel_err(const float *a, const float *b, size_t n)
{
    double md = 0, mb = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        d = d < 0 ? -d : d;
        if (d != d)
            return 1.0 / 0.0;
        md = d > md ? d : md;
        double r = b[i] < 0 ? -(double)b[i] : b[i];
        mb = r > mb ? r : mb;
    }
    return mb > 0 ? md / mb : md;
}

static inline int test_finish(void)
{
    printf("%d checks, %d failed\n", test_checks, test_failures);
    return test_failures ? 1 : 0;
}

#endif
