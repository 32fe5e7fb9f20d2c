/* Reads of memory-mapped files that cannot kill the process.
 *
 * A mapped file that another process truncates raises SIGBUS on the first
 * touch of a page past its new end. fault_guard runs a copy on the calling
 * thread with SIGBUS turned into an error for that thread and that call
 * only: a bus error anywhere else (another thread, or this one outside a
 * guarded call) still kills the process as it would without this module. */
#ifndef SHARDSWAP_CORE_FAULT_H
#define SHARDSWAP_CORE_FAULT_H

/* Runs fn(arg) on the calling thread and returns what it returns; if fn
 * touches a page that raises SIGBUS, fn is abandoned where it was (so it
 * must take no lock, allocate nothing and leave nothing half-owned: a copy
 * into memory the caller owns) and fault_guard returns ERR_IO with "WHAT: a
 * bus error (SIGBUS) reading mapped memory: the file shrank while mapped".
 * Guarded calls do not nest. The process-wide handler is installed on the
 * first call; the action it found is restored for faults it does not own. */
int fault_guard(int (*fn)(void *arg), void *arg, const char *what);

#endif
