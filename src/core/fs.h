/* Files on the local file system: open a file only when it is a regular
 * file (never blocking on a FIFO), write a directory beside its final place,
 * move it there when complete, and remove trees, with errors naming the entry
 * that failed (core/error.h). */
#ifndef SHARDSWAP_CORE_FS_H
#define SHARDSWAP_CORE_FS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

/* Opens path read-only (close-on-exec) if it is a regular file and returns
 * the descriptor in *fd and its size in *size (either may be NULL: a NULL fd
 * closes it again, to check a path without reading it). Whatever else is at
 * path (a FIFO, a directory, a device, a socket) is refused before anything
 * is read from it, and opening a FIFO with no writer does not block:
 * ERR_IO with "PATH: is a FIFO, expected a regular file". A missing path is
 * ERR_NOT_FOUND, any other failure ERR_IO, both naming path and why. */
int fs_open_regular(const char *path, int *fd, size_t *size);

/* Reads the whole regular file at path (fs_open_regular's checks) of at most
 * max bytes into *data (malloc'd, NUL-terminated; the caller frees it) and
 * its length into *len. A larger file is refused by its size before a byte
 * is read: ERR_INVALID naming path, its size and max. */
int fs_read_regular(const char *path, size_t max, char **data, size_t *len);

/* A regular file mapped read-only (fs_map_regular), with its identity (device
 * and inode, 0 when they could not be read), so a reader can tell later
 * whether the file at its path is still the one mapped. */
struct fs_map {
    const void *data;
    size_t size;
    uint64_t dev, ino;
};

/* Maps the regular file at path (fs_open_regular's checks) read-only and
 * private into *m; the descriptor is closed again. A file shorter than min
 * bytes is not mapped: returns 0 with m->data NULL and m->size its size, for
 * the caller to refuse in its own words. A failed map is ERR_IO naming path,
 * the size and why. fs_unmap releases the mapping (a NULL one is a no-op). */
int fs_map_regular(const char *path, size_t min, struct fs_map *m);
void fs_unmap(const void *data, size_t size);

/* fs_read_regular's read, for a caller that opened the file itself
 * (fs_open_regular) and checked its size against a limit of its own: reads
 * up to size bytes from fd (which stays the caller's) into *data (malloc'd,
 * NUL-terminated; the caller frees it), their count into *len. A file that
 * shrank since its size was taken gives what is there (*len < size), one
 * that grew is cut at size. ERR_NOMEM or ERR_IO naming path. */
int fs_read_all(int fd, const char *path, size_t size, char **data, size_t *len);

/* A file written beside its target and renamed over it only when complete,
 * so a failed write (a full disk, a size limit, a crash) leaves the target
 * as it was and no partial file: fs_file_begin creates "TARGET.tmp-XXXXXX"
 * (mkstemp: O_EXCL, mode 0666 less the umask as fopen would give) in
 * target's directory and returns it open for writing in *f; the target must
 * be a regular file or absent, except a stream (a character device such as
 * /dev/null, or a FIFO), which is opened and written in place (a rename
 * would replace the node; tmp is then ""); a directory, socket or block
 * device at target is refused, ERR_IO naming it. A symbolic link at target
 * is replaced by the new file, never written through. fs_file_commit flushes and closes f (an error
 * of any earlier write shows there), then renames the temporary over
 * target; on any failure it removes the temporary and returns ERR_IO naming
 * target, what (e.g. "CSV report") and why. fs_file_abort closes and
 * removes it. tmp (cap bytes) holds the temporary's name between them. */
int fs_file_begin(const char *target, char *tmp, size_t cap, FILE **f);
int fs_file_commit(FILE *f, const char *tmp, const char *target, const char *what);
void fs_file_abort(FILE *f, const char *tmp);

/* Confines the calling thread's fs_open_regular (and fs_read_regular):
 * while set, a file whose resolved path (the file opened, symbolic links
 * followed) is not one of roots or below one is refused, ERR_IO with
 * "PATH: resolves to a file outside every model root", the target not
 * named. roots (n of them) stay the caller's and must outlive the
 * confinement; n 0 (or fs_confine(NULL, 0)) ends it. A server adding a
 * model below --model-root sets it around everything that reads the
 * model's directory. Thread-local. */
void fs_confine(const char *const *roots, int n);

/* "a directory", "a FIFO", "a character device", ... for a stat mode. */
const char *fs_kind_name(mode_t mode);

/* Removes path and everything under it (as rm -rf), never following
 * symbolic links: a link is removed, not what it points to. A missing path is
 * not an error. Stops at the first entry it cannot remove; ERR_IO names it
 * and says why. Not for concurrent use on the same tree. */
int fs_tree_remove(const char *path);

/* Creates the directories above path that do not exist yet (as mkdir -p
 * of its parent; path itself is left alone). ERR_IO naming the directory
 * that could not be made and why (a file in the way, no permission). */
int fs_mkdir_parents(const char *path);

/* Creates a new empty directory "TARGET.partial-XXXXXX" beside target (same
 * parent, so fs_dir_commit is a rename on one file system) and writes its
 * path to tmp (cap bytes). Trailing slashes of target are ignored. The
 * directory gets the mode mkdir would give it (0777 less the umask, which is
 * read by setting it back, so not while another thread creates files). ERR_IO
 * naming the directory when it cannot be created, ERR_INVALID when the name
 * does not fit cap. */
int fs_dir_stage(const char *target, char *tmp, size_t cap);

/* Moves what tmp holds to target: a rename of tmp when target is absent or an
 * empty directory (so target appears complete or not at all), else a rename
 * of each entry of tmp into target, replacing entries of the same name, and
 * then tmp is removed. On error tmp (or what is left of it) still belongs to
 * the caller, who removes it with fs_tree_remove. ERR_IO naming the entry. */
int fs_dir_commit(const char *tmp, const char *target);

#endif
