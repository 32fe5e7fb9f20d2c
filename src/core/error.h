/* Error codes and the message that goes with the last one.
 *
 * Failures the world can cause (bad files, bad flags, bad requests, out of
 * memory) return one of the negative codes below; the function that detects
 * the failure writes a one-line message naming what is wrong and what was
 * expected with err_set(), and callers up the stack may prefix context with
 * err_wrap(). The message lives in thread-local storage, so worker threads do
 * not clobber each other. Broken invariants are assert()s, not error codes.
 */
#ifndef SHARDSWAP_CORE_ERROR_H
#define SHARDSWAP_CORE_ERROR_H

enum err {
    ERR_OK = 0,
    ERR_INVALID = -1,     /* bad argument, flag or request */
    ERR_IO = -2,          /* a file could not be opened, read or written */
    ERR_FORMAT = -3,      /* a file's contents are malformed */
    ERR_UNSUPPORTED = -4, /* well-formed, but not something we implement */
    ERR_NOMEM = -5,       /* an allocation or a budget failed */
    ERR_NOT_FOUND = -6,   /* a named thing (tensor, file, model) is missing */
    ERR_BUSY = -7,        /* cannot be done now (work in flight); may succeed later */
    ERR_CANCELLED = -8,   /* the caller cancelled it (a request) */
    ERR_TIMEOUT = -9,     /* its deadline passed before it completed (a request) */
    ERR_DEVICE = -10,     /* a device (GPU driver, cuBLAS, NCCL) call failed */
    ERR_UNREACHABLE = -11, /* another process of the job is lost (under mpirun) */
};

/* Records a printf-style message for the calling thread; returns code. */
int err_set(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prefixes the current message with "<context>: "; returns code. */
int err_wrap(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The calling thread's last message ("" when none). Valid until the next err_set. */
const char *err_msg(void);

/* "invalid argument", "I/O error", ... for a code. */
const char *err_name(int code);

#endif
