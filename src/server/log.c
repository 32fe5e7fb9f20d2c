/* The server's levelled log (log.h). */
#include "server/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "core/error.h"

static atomic_int log_level = LOG_INFO;
static const char *const level_names[] = {"error", "warn", "info", "debug"};

void log_set_level(enum log_level level)
{
    atomic_store(&log_level, (int)level);
}

enum log_level log_get_level(void)
{
    return (enum log_level)atomic_load(&log_level);
}

int log_level_parse(const char *s, enum log_level *out)
{
    for (int i = 0; i < 4; i++)
        if (strcmp(s, level_names[i]) == 0) {
            *out = (enum log_level)i;
            return 0;
        }
    return err_set(ERR_INVALID, "log level '%s': expected error, warn, info or debug", s);
}

void log_msg(enum log_level level, const char *fmt, ...)
{
    if ((int)level > atomic_load(&log_level))
        return;
    char line[2048];
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    int n = (int)strftime(line, sizeof(line), "%Y-%m-%dT%H:%M:%S", &tm);
    n += snprintf(line + n, sizeof(line) - (size_t)n, ".%03dZ %-5s ", (int)(tv.tv_usec / 1000),
                  level_names[level]);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s\n", line);
}
