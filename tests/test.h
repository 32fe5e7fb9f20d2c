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

static inline int test_finish(void)
{
    printf("%d checks, %d failed\n", test_checks, test_failures);
    return test_failures ? 1 : 0;
}

#endif
