/* core/fs.h: removing trees without following links, and staging a directory
 * beside its target then moving it into place, with errors naming the entry. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/error.h"
#include "core/fault.h"
#include "core/fs.h"
#include "test.h"

static char tmp[64];

static void put(const char *rel, const char *content)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", tmp, rel);
    FILE *f = fopen(path, "w");
    CHECK_MSG(f != NULL, "%s: %s", path, strerror(errno));
    if (f) {
        fputs(content, f);
        fclose(f);
    }
}

/* The contents of tmp/rel ("" when absent), in buf. */
static const char *get(const char *rel, char *buf, size_t cap)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", tmp, rel);
    buf[0] = 0;
    FILE *f = fopen(path, "r");
    if (f) {
        size_t n = fread(buf, 1, cap - 1, f);
        buf[n] = 0;
        fclose(f);
    }
    return buf;
}

static int exists(const char *rel)
{
    char path[512];
    struct stat st;
    snprintf(path, sizeof(path), "%s/%s", tmp, rel);
    return lstat(path, &st) == 0;
}

static void mk(const char *rel)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", tmp, rel);
    CHECK_MSG(mkdir(path, 0755) == 0, "mkdir %s: %s", path, strerror(errno));
}

TEST(tree_remove)
{
    char path[512], target[512], buf[64];
    /* a tree with nested directories, files, a link to a directory outside
     * it and a dangling link: the links go, what they point to stays */
    mk("keep");
    put("keep/precious", "still here");
    mk("t");
    mk("t/a");
    mk("t/a/b");
    mk("t/empty");
    put("t/f", "x");
    put("t/a/g", "y");
    put("t/a/b/h", "z");
    snprintf(target, sizeof(target), "%s/keep", tmp);
    snprintf(path, sizeof(path), "%s/t/a/link", tmp);
    CHECK(symlink(target, path) == 0);
    snprintf(path, sizeof(path), "%s/t/dangling", tmp);
    CHECK(symlink("/nonexistent/nowhere", path) == 0);
    snprintf(path, sizeof(path), "%s/t", tmp);
    CHECK_MSG(fs_tree_remove(path) == 0, "%s", err_msg());
    CHECK(!exists("t"));
    CHECK(strcmp(get("keep/precious", buf, sizeof(buf)), "still here") == 0);

    /* a link as the root: the link goes, not the directory behind it */
    snprintf(path, sizeof(path), "%s/rootlink", tmp);
    CHECK(symlink(target, path) == 0);
    CHECK(fs_tree_remove(path) == 0 && !exists("rootlink") && exists("keep/precious"));

    /* a single file; a missing path is already removed */
    put("lone", "1");
    snprintf(path, sizeof(path), "%s/lone", tmp);
    CHECK(fs_tree_remove(path) == 0 && !exists("lone"));
    CHECK(fs_tree_remove(path) == 0);

    /* a path through a file cannot be walked: ERR_IO naming it */
    put("file", "1");
    snprintf(path, sizeof(path), "%s/file/sub", tmp);
    CHECK(fs_tree_remove(path) == ERR_IO);
    CHECK_MSG(strstr(err_msg(), "file/sub") && strstr(err_msg(), "Not a directory"), "%s",
              err_msg());
    CHECK(fs_tree_remove("") == ERR_INVALID && fs_tree_remove(NULL) == ERR_INVALID);
}

TEST(stage_commit)
{
    char target[512], staged[512], path[600], buf[64];
    snprintf(target, sizeof(target), "%s/model/", tmp);

    /* stage beside the target (trailing slash ignored), commit by rename */
    CHECK_MSG(fs_dir_stage(target, staged, sizeof(staged)) == 0, "%s", err_msg());
    char prefix[512];
    snprintf(prefix, sizeof(prefix), "%s/model.partial-", tmp);
    CHECK_MSG(strncmp(staged, prefix, strlen(prefix)) == 0 && strlen(staged) == strlen(prefix) + 6,
              "staged at %s", staged);
    CHECK(!exists("model"));
    snprintf(path, sizeof(path), "%s/a", staged);
    FILE *f = fopen(path, "w");
    CHECK(f && fputs("new a", f) >= 0 && fclose(f) == 0);
    CHECK_MSG(fs_dir_commit(staged, target) == 0, "%s", err_msg());
    CHECK(strcmp(get("model/a", buf, sizeof(buf)), "new a") == 0);
    struct stat st;
    CHECK(stat(staged, &st) != 0);

    /* into an existing non-empty directory: entries replaced or added, the
     * others kept, the staged directory gone */
    put("model/a", "old a");
    put("model/other", "kept");
    CHECK(fs_dir_stage(target, staged, sizeof(staged)) == 0);
    snprintf(path, sizeof(path), "%s/a", staged);
    f = fopen(path, "w");
    CHECK(f && fputs("newer a", f) >= 0 && fclose(f) == 0);
    snprintf(path, sizeof(path), "%s/b", staged);
    f = fopen(path, "w");
    CHECK(f && fputs("b", f) >= 0 && fclose(f) == 0);
    CHECK_MSG(fs_dir_commit(staged, target) == 0, "%s", err_msg());
    CHECK(strcmp(get("model/a", buf, sizeof(buf)), "newer a") == 0);
    CHECK(strcmp(get("model/b", buf, sizeof(buf)), "b") == 0);
    CHECK(strcmp(get("model/other", buf, sizeof(buf)), "kept") == 0);
    CHECK(stat(staged, &st) != 0);

    /* a target that is a file: an error naming it; the staged dir stays the caller's */
    put("plain", "not a dir");
    snprintf(target, sizeof(target), "%s/plain", tmp);
    CHECK(fs_dir_stage(target, staged, sizeof(staged)) == 0);
    CHECK(fs_dir_commit(staged, target) == ERR_IO);
    CHECK_MSG(strstr(err_msg(), "not a directory") && strstr(err_msg(), "plain"), "%s", err_msg());
    CHECK(stat(staged, &st) == 0 && S_ISDIR(st.st_mode));
    CHECK(fs_tree_remove(staged) == 0 && stat(staged, &st) != 0);

    /* staging where nothing can be created, or with no name */
    CHECK(fs_dir_stage("/nonexistent/dir/model", staged, sizeof(staged)) == ERR_IO);
    CHECK_MSG(strstr(err_msg(), "/nonexistent/dir/model.partial-"), "%s", err_msg());
    CHECK(fs_dir_stage("", staged, sizeof(staged)) == ERR_INVALID);
    char small[16];
    CHECK(fs_dir_stage(target, small, sizeof(small)) == ERR_INVALID);
}

/* fs_open_regular opens regular files only, and names whatever else it finds without
 * reading it or blocking on it (the alarm turns a hang on the FIFO into a failure). */
TEST(open_regular)
{
    char path[512];
    int fd = -1;
    size_t size = 0;
    put("r.txt", "hello");
    snprintf(path, sizeof(path), "%s/r.txt", tmp);
    CHECK_MSG(fs_open_regular(path, &fd, &size) == 0, "%s", err_msg());
    char buf[8] = "";
    CHECK(size == 5 && fd >= 0 && read(fd, buf, sizeof(buf)) == 5 && memcmp(buf, "hello", 5) == 0);
    if (fd >= 0)
        close(fd);
    CHECK(fs_open_regular(path, NULL, NULL) == 0);

    static const struct {
        const char *rel, *kind;
    } cases[] = {{"fifo", "is a FIFO"}, {"dir", "is a directory"}, {"sock", "is a socket"}};
    alarm(30);
    snprintf(path, sizeof(path), "%s/fifo", tmp);
    CHECK(mkfifo(path, 0600) == 0);
    mk("dir");
    snprintf(path, sizeof(path), "%s/sock", tmp);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    CHECK(strlen(path) < sizeof(sa.sun_path));
    memcpy(sa.sun_path, path, strlen(path) < sizeof(sa.sun_path) ? strlen(path) : 0);
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    CHECK(s >= 0 && bind(s, (struct sockaddr *)&sa, sizeof(sa)) == 0);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", tmp, cases[i].rel);
        fd = -1;
        CHECK(fs_open_regular(path, &fd, &size) == ERR_IO && fd == -1);
        CHECK_MSG(strstr(err_msg(), path) && strstr(err_msg(), cases[i].kind) &&
                      strstr(err_msg(), "expected a regular file"),
                  "%s: %s", cases[i].rel, err_msg());
    }
    alarm(0);
    if (s >= 0)
        close(s);
    CHECK(fs_open_regular("/dev/null", NULL, NULL) == ERR_IO);
    CHECK_MSG(strstr(err_msg(), "/dev/null: is a character device, expected a regular file"), "%s",
              err_msg());
    snprintf(path, sizeof(path), "%s/missing", tmp);
    CHECK(fs_open_regular(path, NULL, NULL) == ERR_NOT_FOUND);
    CHECK_MSG(strstr(err_msg(), path) && strstr(err_msg(), "No such file"), "%s", err_msg());
}

/* fs_read_all: what the size says, cut when the file is longer, what is
 * there when it is shorter (it shrank), NUL-terminated; empty files too. */
TEST(read_all)
{
    char path[512];
    put("all.txt", "0123456789");
    snprintf(path, sizeof(path), "%s/all.txt", tmp);
    static const struct {
        size_t size, want;
    } cases[] = {{10, 10}, {4, 4}, {20, 10}, {0, 0}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int fd = -1;
        CHECK(fs_open_regular(path, &fd, NULL) == 0);
        char *data = NULL;
        size_t len = 99;
        CHECK(fs_read_all(fd, path, cases[i].size, &data, &len) == 0);
        CHECK_MSG(data && len == cases[i].want && memcmp(data, "0123456789", len) == 0 &&
                      data[len] == '\0',
                  "size %zu: len %zu", cases[i].size, len);
        free(data);
        close(fd);
    }
    /* a descriptor that cannot be read: ERR_IO naming the path */
    char *data = (char *)"x";
    size_t len = 1;
    CHECK(fs_read_all(-1, "nowhere", 4, &data, &len) == ERR_IO && data == NULL && len == 0);
    CHECK_MSG(strstr(err_msg(), "nowhere: read failed"), "%s", err_msg());
}

/* fs_read_regular: type and size checked before a byte is read;
 * fs_confine: a link out of the roots is refused, one inside is not. */
TEST(read_confine)
{
    char a[512], b[512], fifo[512], link_out[512], link_in[512], big[512], root[512];
    snprintf(root, sizeof(root), "%s/root", tmp);
    CHECK(mkdir(root, 0700) == 0);
    snprintf(a, sizeof(a), "%s/root/a", tmp);
    snprintf(b, sizeof(b), "%s/outside", tmp);
    put("root/a", "inside");
    put("outside", "SECRET");
    snprintf(fifo, sizeof(fifo), "%s/root/fifo", tmp);
    CHECK(mkfifo(fifo, 0600) == 0);
    snprintf(link_out, sizeof(link_out), "%s/root/out", tmp);
    snprintf(link_in, sizeof(link_in), "%s/root/in", tmp);
    CHECK(symlink(b, link_out) == 0 && symlink(a, link_in) == 0);
    snprintf(big, sizeof(big), "%s/root/big", tmp);
    int fd = open(big, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0 && ftruncate(fd, 1 << 20) == 0);
    close(fd);
    char *data = NULL;
    size_t len = 0;
    CHECK(fs_read_regular(a, 16, &data, &len) == 0 && len == 6 && strcmp(data, "inside") == 0);
    free(data);
    int rc = fs_read_regular(big, 1000, &data, &len);
    CHECK_MSG(rc == ERR_INVALID && !data && strstr(err_msg(), "1048576 bytes, more than the 1000"),
              "%d %s", rc, err_msg());
    rc = fs_read_regular(fifo, 1000, &data, &len); /* does not block */
    CHECK_MSG(rc == ERR_IO && strstr(err_msg(), "is a FIFO"), "%d %s", rc, err_msg());
    rc = fs_read_regular("/dev/zero", 1000, &data, &len);
    CHECK_MSG(rc == ERR_IO && strstr(err_msg(), "a character device"), "%d %s", rc, err_msg());
    const char *roots[] = {root};
    fs_confine(roots, 1);
    CHECK(fs_open_regular(a, NULL, NULL) == 0 && fs_open_regular(link_in, NULL, NULL) == 0);
    rc = fs_read_regular(link_out, 1000, &data, &len);
    CHECK_MSG(rc == ERR_IO && strstr(err_msg(), "resolves to a file outside every model root") &&
                  !strstr(err_msg(), "SECRET") && !strstr(err_msg(), b),
              "%d %s", rc, err_msg());
    fs_confine(NULL, 0);
    CHECK(fs_read_regular(link_out, 1000, &data, &len) == 0 && strcmp(data, "SECRET") == 0);
    free(data);
}

/* ---- core/fault.h: a read past a truncated mapping fails the call, not the process ---- */

struct touch {
    const volatile char *p;
    size_t n;
    unsigned sum;
};

static int touch_run(void *arg)
{
    struct touch *t = arg;
    for (size_t i = 0; i < t->n; i += 4096)
        t->sum += (unsigned char)t->p[i];
    return 7;
}

static void *guarded_thread(void *arg)
{
    struct touch *t = arg;
    return (void *)(long)fault_guard(touch_run, t, "thread");
}

TEST(fault_guard)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/mapped", tmp);
    const size_t size = 16 * 4096;
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0 && ftruncate(fd, (off_t)size) == 0);
    char *map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    CHECK(map != MAP_FAILED);
    if (fd < 0 || map == MAP_FAILED)
        return;
    struct touch whole = {.p = map, .n = size};
    CHECK(fault_guard(touch_run, &whole, "whole") == 7); /* fn's own result */
    CHECK(ftruncate(fd, 4096) == 0);
    struct touch head = {.p = map, .n = 4096}, past = {.p = map, .n = size};
    CHECK(fault_guard(touch_run, &head, "head") == 7);
    int rc = fault_guard(touch_run, &past, "ckpt");
    CHECK_MSG(rc == ERR_IO && strstr(err_msg(), "ckpt: a bus error (SIGBUS)"), "%d %s", rc,
              err_msg());
    /* again, and on another thread: the handler stays and is per call */
    CHECK(fault_guard(touch_run, &past, "again") == ERR_IO);
    pthread_t th;
    void *ret = NULL;
    CHECK(pthread_create(&th, NULL, guarded_thread, &past) == 0 && pthread_join(th, &ret) == 0);
    CHECK_MSG((long)ret == ERR_IO, "%ld", (long)ret);
    /* outside a guarded call the fault still ends the process */
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        volatile char c = map[size - 1];
        (void)c;
        _exit(0);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    CHECK_MSG(!(WIFEXITED(status) && WEXITSTATUS(status) == 0),
              "an unguarded read past the end did not fault (status %d)", status);
    munmap(map, size);
    close(fd);
}

static void setup(void)
{
    test_scratch_dir(tmp, sizeof(tmp), "fs");
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, setup);
}
