#include "core/fs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"

const char *fs_kind_name(mode_t mode)
{
    if (S_ISREG(mode))
        return "a regular file";
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISFIFO(mode))
        return "a FIFO";
    if (S_ISCHR(mode))
        return "a character device";
    if (S_ISBLK(mode))
        return "a block device";
    if (S_ISSOCK(mode))
        return "a socket";
    if (S_ISLNK(mode))
        return "a symbolic link";
    return "not a file of a known type";
}

/* The calling thread's confinement (fs_confine): the roots, owned by the
 * caller, NULL when none. */
static _Thread_local const char *const *confine_roots;
static _Thread_local int confine_n;

void fs_confine(const char *const *roots, int n)
{
    confine_roots = n > 0 ? roots : NULL;
    confine_n = n > 0 ? n : 0;
}

/* Whether real (a resolved path) is root or lies below it. */
static bool path_under(const char *real, const char *root)
{
    size_t n = strlen(root);
    while (n > 1 && root[n - 1] == '/')
        n--;
    return strncmp(real, root, n) == 0 && (real[n] == '\0' || real[n] == '/' || n == 1);
}

/* Under a confinement, the file open as fd (what the kernel resolved path
 * to, read back from /proc/self/fd: no second lookup that a rename could
 * redirect) must lie under a root. */
static int confine_check(const char *path, int fd)
{
    if (!confine_roots)
        return 0;
    char link[64], real[PATH_MAX];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, real, sizeof(real) - 1);
    char *rp = NULL;
    if (n < 0 || (size_t)n >= sizeof(real) - 1) { /* no /proc: resolve the name instead */
        if (!(rp = realpath(path, NULL)))
            return err_set(ERR_IO, "%s: cannot resolve: %s", path, strerror(errno));
        snprintf(real, sizeof(real), "%s", rp);
        free(rp);
    } else {
        real[n] = '\0';
    }
    for (int i = 0; i < confine_n; i++) {
        char *root = realpath(confine_roots[i], NULL);
        bool in = root && path_under(real, root);
        free(root);
        if (in)
            return 0;
    }
    /* the target is not named: the admin learns nothing beyond the roots */
    return err_set(ERR_IO, "%s: resolves to a file outside every model root (a link out of it?)",
                   path);
}

int fs_open_regular(const char *path, int *fd_out, size_t *size_out)
{
    int rc = 0;
    struct stat sb;
    /* O_NONBLOCK: opening a FIFO waits for a writer otherwise; the type is
     * checked on the descriptor, so it cannot change between check and read */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        int e = errno;
        if (e == ENXIO && stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) /* a socket */
            return err_set(ERR_IO, "%s: is %s, expected a regular file", path,
                           fs_kind_name(sb.st_mode));
        return err_set(e == ENOENT ? ERR_NOT_FOUND : ERR_IO, "%s: cannot open: %s", path,
                       strerror(e));
    }
    if (fstat(fd, &sb) != 0) {
        rc = err_set(ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(sb.st_mode)) {
        rc = err_set(ERR_IO, "%s: is %s, expected a regular file", path, fs_kind_name(sb.st_mode));
        goto fail;
    }
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
        rc = err_set(ERR_IO, "%s: cannot set blocking reads: %s", path, strerror(errno));
        goto fail;
    }
    if ((rc = confine_check(path, fd)) < 0)
        goto fail;
    if (size_out)
        *size_out = (size_t)sb.st_size;
    if (fd_out)
        *fd_out = fd;
    else
        close(fd);
    return 0;
fail:
    close(fd);
    return rc;
}

int fs_read_all(int fd, const char *path, size_t size, char **data, size_t *len)
{
    *data = NULL;
    *len = 0;
    char *buf = malloc(size + 1);
    if (!buf)
        return err_set(ERR_NOMEM, "%s: out of memory for its %zu bytes", path, size);
    size_t n = 0;
    while (n < size) { /* a file that shrinks meanwhile ends early; one that grows is cut */
        ssize_t k = read(fd, buf + n, size - n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            int rc = err_set(ERR_IO, "%s: read failed: %s", path, strerror(errno));
            free(buf);
            return rc;
        }
        if (k == 0)
            break;
        n += (size_t)k;
    }
    buf[n] = '\0';
    *data = buf;
    *len = n;
    return 0;
}

int fs_map_regular(const char *path, size_t min, struct fs_map *m)
{
    *m = (struct fs_map){0};
    int fd;
    size_t size;
    int rc = fs_open_regular(path, &fd, &size);
    if (rc)
        return rc;
    m->size = size;
    if (size < min)
        goto out;
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        rc = err_set(ERR_IO, "%s: cannot map %zu bytes: %s", path, size, strerror(errno));
        goto out;
    }
    m->data = map;
    struct stat sb;
    if (fstat(fd, &sb) == 0) {
        m->dev = (uint64_t)sb.st_dev;
        m->ino = (uint64_t)sb.st_ino;
    }
out:
    close(fd);
    return rc;
}

void fs_unmap(const void *data, size_t size)
{
    if (data)
        munmap((void *)data, size);
}

int fs_read_regular(const char *path, size_t max, char **data, size_t *len)
{
    int fd;
    size_t size;
    *data = NULL;
    int rc = fs_open_regular(path, &fd, &size);
    if (rc < 0)
        return rc;
    if (size > max)
        rc = err_set(ERR_INVALID, "%s: %zu bytes, more than the %zu expected at most", path, size,
                     max);
    else
        rc = fs_read_all(fd, path, size, data, len);
    close(fd);
    return rc;
}

/* nftw gives its callback no context: the first failure is kept here, per
 * thread, for fs_tree_remove to report. */
static _Thread_local struct {
    int err;
    char path[4096];
} remove_fail;

static int remove_entry(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)sb;
    (void)ftw;
    /* FTW_DEPTH: a directory comes after everything in it (FTW_DP); one that
     * could not be read (FTW_DNR) is tried anyway and fails if not empty */
    int rc = type == FTW_DP || type == FTW_DNR ? rmdir(path) : unlink(path);
    if (rc == 0 || errno == ENOENT)
        return 0;
    remove_fail.err = errno;
    snprintf(remove_fail.path, sizeof(remove_fail.path), "%s", path);
    return 1;
}

int fs_tree_remove(const char *path)
{
    if (!path || !*path)
        return err_set(ERR_INVALID, "no path to remove (expected a file or directory)");
    remove_fail.err = 0;
    int rc = nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    if (rc == 0)
        return 0;
    if (rc == -1) {
        if (errno == ENOENT)
            return 0; /* nothing there: already removed */
        return err_set(ERR_IO, "cannot remove %s: %s", path, strerror(errno));
    }
    return err_set(ERR_IO, "cannot remove %s: %s", remove_fail.path, strerror(remove_fail.err));
}

int fs_mkdir_parents(const char *path)
{
    char dir[4096];
    int n = snprintf(dir, sizeof dir, "%s", path);
    if (n < 0 || (size_t)n >= sizeof dir)
        return err_set(ERR_INVALID, "%.64s...: path too long (expected under %zu bytes)", path,
                       sizeof dir);
    while (n > 1 && dir[n - 1] == '/') /* "a/b/" names b */
        dir[--n] = '\0';
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir)
        return 0; /* the working directory or / holds it */
    *slash = '\0';
    /* each prefix in turn, from the top: one that exists is passed over */
    for (char *p = dir + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char c = *p;
        *p = '\0';
        struct stat st;
        if (mkdir(dir, 0777) != 0 && errno != EEXIST)
            return err_set(ERR_IO, "cannot create the directory %s: %s", dir, strerror(errno));
        if (stat(dir, &st) != 0)
            return err_set(ERR_IO, "cannot create the directory %s: %s", dir, strerror(errno));
        if (!S_ISDIR(st.st_mode))
            return err_set(ERR_IO, "cannot create the directory %s: it is %s", dir,
                           fs_kind_name(st.st_mode));
        *p = c;
        if (c == '\0')
            return 0;
    }
}

int fs_dir_stage(const char *target, char *tmp, size_t cap)
{
    size_t len = target ? strlen(target) : 0;
    while (len > 1 && target[len - 1] == '/')
        len--;
    if (len == 0)
        return err_set(ERR_INVALID, "no directory name given (expected a path)");
    int n = snprintf(tmp, cap, "%.*s.partial-XXXXXX", (int)len, target);
    if (n < 0 || (size_t)n >= cap)
        return err_set(ERR_INVALID, "%s: path too long (expected at most %zu bytes)", target,
                       cap > 24 ? cap - 24 : 0);
    if (!mkdtemp(tmp))
        return err_set(ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
    /* mkdtemp's 0700 would become the target's mode: give it mkdir's */
    mode_t mask = umask(0);
    umask(mask);
    if (chmod(tmp, 0777 & ~mask) != 0) {
        int e = errno;
        rmdir(tmp);
        return err_set(ERR_IO, "cannot set the mode of %s: %s", tmp, strerror(e));
    }
    return 0;
}

/* Renames every entry of tmp into target, then removes tmp. */
static int dir_merge(const char *tmp, const char *target)
{
    DIR *d = opendir(tmp);
    if (!d)
        return err_set(ERR_IO, "cannot read %s: %s", tmp, strerror(errno));
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char from[4096], to[4096];
        if ((size_t)snprintf(from, sizeof(from), "%s/%s", tmp, e->d_name) >= sizeof(from) ||
            (size_t)snprintf(to, sizeof(to), "%s/%s", target, e->d_name) >= sizeof(to))
            rc = err_set(ERR_INVALID, "%s/%s: path too long", target, e->d_name);
        else if (rename(from, to) != 0)
            rc = err_set(ERR_IO, "cannot move %s to %s: %s", from, to, strerror(errno));
    }
    closedir(d);
    if (rc == 0 && rmdir(tmp) != 0)
        rc = err_set(ERR_IO, "cannot remove %s: %s", tmp, strerror(errno));
    return rc;
}

int fs_dir_commit(const char *tmp, const char *target)
{
    if (rename(tmp, target) == 0)
        return 0;
    int e = errno;
    struct stat st;
    if ((e == ENOTEMPTY || e == EEXIST || e == EBUSY || e == EINVAL) && stat(target, &st) == 0 &&
        S_ISDIR(st.st_mode))
        return dir_merge(tmp, target);
    if (stat(target, &st) == 0 && !S_ISDIR(st.st_mode))
        return err_set(ERR_IO, "cannot move %s to %s: %s exists and is not a directory", tmp,
                       target, target);
    return err_set(ERR_IO, "cannot move %s to %s: %s", tmp, target, strerror(e));
}

int fs_file_begin(const char *target, char *tmp, size_t cap, FILE **f)
{
    *f = NULL;
    struct stat sb;
    if (cap)
        tmp[0] = '\0';
    if (stat(target, &sb) == 0 && !S_ISREG(sb.st_mode)) {
        /* a stream (/dev/null, /dev/stdout, a pipe) is written in place: it
         * holds no file to leave half-written, and a rename would replace
         * the node itself */
        if (!S_ISCHR(sb.st_mode) && !S_ISFIFO(sb.st_mode))
            return err_set(ERR_IO, "%s: is %s, expected a regular file to replace (or none)",
                           target, fs_kind_name(sb.st_mode));
        if (!(*f = fopen(target, "wb")))
            return err_set(ERR_IO, "%s: cannot open for writing: %s", target, strerror(errno));
        return 0;
    }
    if ((size_t)snprintf(tmp, cap, "%s.tmp-XXXXXX", target) >= cap)
        return err_set(ERR_INVALID, "%s: the name is too long", target);
    mode_t um = umask(0);
    umask(um);
    int fd = mkstemp(tmp);
    if (fd < 0)
        return err_set(ERR_IO, "%s: cannot create a file beside it: %s", target, strerror(errno));
    if (fchmod(fd, 0666 & ~um) != 0 || !(*f = fdopen(fd, "wb"))) {
        int e = errno;
        close(fd);
        unlink(tmp);
        return err_set(ERR_IO, "%s: cannot write a file beside it: %s", target, strerror(e));
    }
    return 0;
}

int fs_file_commit(FILE *f, const char *tmp, const char *target, const char *what)
{
    int bad = ferror(f), e = errno;
    if (fflush(f) != 0 && !bad) {
        bad = 1;
        e = errno;
    }
    if (fclose(f) != 0 && !bad) {
        bad = 1;
        e = errno;
    }
    if (!bad && tmp[0] && rename(tmp, target) != 0) {
        bad = 1;
        e = errno;
    }
    if (!bad)
        return 0;
    if (tmp[0])
        unlink(tmp);
    return err_set(ERR_IO, "%s: cannot write %s: %s (the file was left as it was)", target, what,
                   strerror(e ? e : EIO));
}

void fs_file_abort(FILE *f, const char *tmp)
{
    if (f)
        fclose(f);
    if (tmp[0])
        unlink(tmp);
}
