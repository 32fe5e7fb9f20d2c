/* A minimal test harness: CHECK records a failure and goes on; a test
 * program returns test_finish(), which is 1 when any check failed, and
 * test_skip() exits 77, which ctest reports as skipped. */
#ifndef SHARDSWAP_TEST_H
#define SHARDSWAP_TEST_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/fs.h"

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

/* malloc that ends the test program when the host is out of memory (a
 * buffer of 0 bytes is 1 byte, never NULL). */
static inline void *test_xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "out of host memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
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

/* Writes text to path (replacing it); a failure is a failed check. */
static inline void test_write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    CHECK_MSG(f && fputs(text, f) >= 0, "cannot write %s", path);
    if (f)
        fclose(f);
}

static inline int test_finish(void)
{
    printf("%d checks, %d failed\n", test_checks, test_failures);
    return test_failures ? 1 : 0;
}

/* The program's scratch directory, one per program: made under $TMPDIR
 * (else /tmp) as shardswap_NAME_XXXXXX into buf (cap bytes), and removed
 * with everything in it at exit, where a removal that fails is a failed
 * check (exit 1). Exits 2 when it cannot be made. */
static const char *test_scratch_path;

static inline void test_scratch_remove(void)
{
    int before = test_failures;
    CHECK_MSG(fs_tree_remove(test_scratch_path) == 0, "%s", err_msg());
    if (test_failures > before)
        _exit(1);
}

static inline void test_scratch_dir(char *buf, size_t cap, const char *name)
{
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(buf, cap, "%s/shardswap_%s_XXXXXX", base, name);
    if (!mkdtemp(buf)) {
        perror("mkdtemp");
        exit(2);
    }
    test_scratch_path = buf;
    atexit(test_scratch_remove);
}

/* Named cases (as libuv's test-list.h): TEST(name) { ... } registers a case
 * at load time, and main is test_main(argc, argv, setup). Without
 * arguments every case runs, in the order of the file; with names, only
 * those (ctest runs each as PROGRAM.name: tests/CMakeLists.txt reads the
 * TEST(...) lines); --list prints them. A case that fails says its name. */
struct test_case {
    const char *name;
    void (*fn)(void);
};
#define TEST_MAX_CASES 256
static struct test_case test_cases[TEST_MAX_CASES];
static int test_n_cases;

static inline void test_register(const char *name, void (*fn)(void))
{
    if (test_n_cases == TEST_MAX_CASES) {
        fprintf(stderr, "test.h: more than %d cases\n", TEST_MAX_CASES);
        exit(2);
    }
    test_cases[test_n_cases++] = (struct test_case){name, fn};
}

#define TEST(name)                                                                       \
    static void test_case_##name(void);                                                  \
    __attribute__((constructor)) static void test_register_##name(void)                  \
    {                                                                                    \
        test_register(#name, test_case_##name);                                          \
    }                                                                                    \
    static void test_case_##name(void)

static inline void test_run_case(const struct test_case *c)
{
    int before = test_failures;
    c->fn();
    if (test_failures > before)
        fprintf(stderr, "FAIL %s: %d checks failed\n", c->name, test_failures - before);
    else
        printf("ok   %s\n", c->name);
}

/* setup (may be NULL) runs once before the cases. */
static inline int test_main(int argc, char **argv, void (*setup)(void))
{
    if (argc == 2 && strcmp(argv[1], "--list") == 0) {
        for (int i = 0; i < test_n_cases; i++)
            printf("%s\n", test_cases[i].name);
        return 0;
    }
    for (int a = 1; a < argc; a++) {
        int i = 0;
        while (i < test_n_cases && strcmp(test_cases[i].name, argv[a]) != 0)
            i++;
        if (i == test_n_cases) {
            fprintf(stderr, "%s: no case named \"%s\" (--list shows them)\n", argv[0], argv[a]);
            return 2;
        }
    }
    if (setup)
        setup();
    for (int i = 0; i < test_n_cases; i++) {
        bool run = argc == 1;
        for (int a = 1; a < argc && !run; a++)
            run = strcmp(test_cases[i].name, argv[a]) == 0;
        if (run)
            test_run_case(&test_cases[i]);
    }
    return test_finish();
}

#endif
