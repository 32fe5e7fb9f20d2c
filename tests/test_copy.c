/* core/copy.h: both copy methods copy every byte at any size and alignment,
 * and copy_large's choice (SHARDSWAP_COPY, else by measurement) is what a
 * process gets. The choice is made once per process, so each case runs in a
 * child. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/copy.h"
#include "test.h"

typedef void (*copy_fn)(void *dst, const void *src, size_t n);

static void copy_memcpy(void *dst, const void *src, size_t n)
{
    memcpy(dst, src, n);
}

/* Copies n bytes from src+so to dst+do_ with fn into a buffer filled with a
 * sentinel, and checks the copy and that no byte around it changed. */
static void check_copy(copy_fn fn, const char *name, size_t n, size_t so, size_t do_)
{
    size_t pad = 64;
    unsigned char *src = malloc(n + so + 1), *dst = malloc(n + do_ + 2 * pad);
    CHECK(src && dst);
    if (!src || !dst)
        goto out;
    for (size_t i = 0; i < n + so + 1; i++)
        src[i] = (unsigned char)(i * 131u + (i >> 9) + 7u);
    memset(dst, 0xA5, n + do_ + 2 * pad);
    fn(dst + pad + do_, src + so, n);
    bool ok = memcmp(dst + pad + do_, src + so, n) == 0;
    for (size_t i = 0; i < pad + do_; i++)
        ok = ok && dst[i] == 0xA5;
    for (size_t i = pad + do_ + n; i < n + do_ + 2 * pad; i++)
        ok = ok && dst[i] == 0xA5;
    CHECK_MSG(ok, "%s: %zu bytes, source offset %zu, destination offset %zu", name, n, so, do_);
out:
    free(src);
    free(dst);
}

static void check_all_sizes(copy_fn fn, const char *name)
{
    /* around copy_stream's 1 MiB threshold, its 256-byte loop and its
     * 32-byte destination alignment */
    static const size_t sizes[] = {0,
                                   1,
                                   31,
                                   255,
                                   4097,
                                   (1u << 20) - 1,
                                   1u << 20,
                                   (1u << 20) + 1,
                                   (1u << 20) + 257,
                                   (3u << 20) + 4093};
    static const size_t offs[][2] = {{0, 0}, {1, 0}, {0, 1}, {3, 17}, {31, 33}};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        for (size_t k = 0; k < sizeof(offs) / sizeof(offs[0]); k++)
            check_copy(fn, name, sizes[i], offs[k][0], offs[k][1]);
}

/* Runs in a child with SHARDSWAP_COPY=env (NULL: unset): the choice is
 * `want` (NULL: either, by measurement), forced when env names a method, and
 * copy_large copies correctly. */
static void check_choice(const char *env, const char *want, bool forced)
{
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        if (env)
            setenv("SHARDSWAP_COPY", env, 1);
        else
            unsetenv("SHARDSWAP_COPY");
        const struct copy_choice *c = copy_choose();
        CHECK_MSG(!want || strcmp(c->name, want) == 0, "SHARDSWAP_COPY=%s: got %s", env ? env : "",
                  c->name);
        CHECK(strcmp(copy_method_name(), c->name) == 0);
        CHECK(c->forced == forced);
        CHECK(c->method == (strcmp(c->name, "stream") == 0 ? COPY_STREAM : COPY_MEMCPY));
        if (!forced) {
            CHECK(c->memcpy_gb_s > 0 && c->stream_gb_s > 0);
            printf("measured (%s): memcpy %.2f GB/s, stream %.2f GB/s, chose %s in %.1f ms\n",
                   env ? env : "unset", c->memcpy_gb_s, c->stream_gb_s, c->name, c->calib_s * 1e3);
        }
        CHECK(copy_choose() == c); /* once */
        check_all_sizes(copy_large, "copy_large");
        fflush(stdout);
        _exit(test_failures ? 1 : 0);
    }
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child for SHARDSWAP_COPY=%s failed",
              env ? env : "(unset)");
}

TEST(stream_sizes)
{
    check_all_sizes(copy_stream, "copy_stream");
}

TEST(memcpy_sizes)
{
    check_all_sizes(copy_memcpy, "memcpy");
}

TEST(choice_memcpy)
{
    check_choice("memcpy", "memcpy", true);
}

TEST(choice_stream)
{
    check_choice("stream", "stream", true);
}

TEST(choice_measured)
{
    check_choice(NULL, NULL, false);
}

TEST(choice_bogus)
{
    check_choice("bogus", NULL, false); /* said on stderr, then measured */
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, NULL);
}
