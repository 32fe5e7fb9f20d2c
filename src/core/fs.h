/* Directory trees on the local file system: write a directory beside its
 * final place, move it there when complete, and remove trees, with errors
 * as ERR_IO naming the entry that failed (core/error.h). */
#ifndef SHARDSWAP_CORE_FS_H
#define SHARDSWAP_CORE_FS_H

#include <stddef.h>

/* Removes path and everything under it (as rm -rf), never following
 * symbolic links: a link is removed, not what it points to. A missing path is
 * not an error. Stops at the first entry it cannot remove; ERR_IO names it
 * and says why. Not for concurrent use on the same tree. */
int fs_tree_remove(const char *path);

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
