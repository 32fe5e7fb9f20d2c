#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define ERR_MSG_MAX 1024

static _Thread_local char err_buf[ERR_MSG_MAX];

int err_set(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_buf, sizeof(err_buf), fmt, ap);
    va_end(ap);
    return code;
}

int err_wrap(int code, const char *fmt, ...)
{
    char prefix[ERR_MSG_MAX], old[ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof(prefix), fmt, ap);
    va_end(ap);
    memcpy(old, err_buf, sizeof(old));
    /* Truncation is acceptable: a long message keeps its head. */
    size_t n = strlen(prefix);
    if (n > ERR_MSG_MAX - 3)
        n = ERR_MSG_MAX - 3;
    memcpy(err_buf, prefix, n);
    memcpy(err_buf + n, ": ", 2);
    size_t room = ERR_MSG_MAX - n - 3;
    size_t m = strlen(old);
    if (m > room)
        m = room;
    memcpy(err_buf + n + 2, old, m);
    err_buf[n + 2 + m] = '\0';
    return code;
}

const char *err_msg(void)
{
    return err_buf;
}

const char *err_name(int code)
{
    switch (code) {
    case ERR_OK: return "ok";
    case ERR_INVALID: return "invalid argument";
    case ERR_IO: return "I/O error";
    case ERR_FORMAT: return "malformed input";
    case ERR_UNSUPPORTED: return "unsupported";
    case ERR_NOMEM: return "out of memory";
    case ERR_NOT_FOUND: return "not found";
    case ERR_BUSY: return "busy";
    case ERR_CANCELLED: return "cancelled";
    case ERR_TIMEOUT: return "timed out";
    case ERR_DEVICE: return "device error";
    case ERR_UNREACHABLE: return "process unreachable";
    default: return "unknown error";
    }
}
