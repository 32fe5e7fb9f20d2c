/* The server's levelled log (log.h). */
#include "server/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "core/error.h"

static atomic_int log_level = LOG_INFO;
const char *const log_level_names[] = {"error", "warn", "info", "debug", NULL};

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
    for (int i = 0; log_level_names[i]; i++)
        if (strcmp(s, log_level_names[i]) == 0) {
            *out = (enum log_level)i;
            return 0;
        }
    return err_set(ERR_INVALID, "log level '%s': expected error, warn, info or debug", s);
}

/* What a client sends (a path MHD has %-decoded, a model name, a header)
 * ends up in lines: a control byte (a newline would start a forged line),
 * DEL or a C1 control (U+0080..U+009F, which some viewers take as a line
 * break) becomes \xNN, so one call is always one line. Other bytes,
 * UTF-8 included, are kept. */
void log_escape(const char *in, char *out, size_t cap)
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)in; *p && o + 1 < cap; p++) {
        bool c1 = p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f;
        if (*p >= 0x20 && *p != 0x7f && !c1) {
            out[o++] = (char)*p;
            continue;
        }
        int k = c1 ? 2 : 1;
        if (o + 4 * (size_t)k + 1 > cap)
            break;
        for (int i = 0; i < k; i++) {
            out[o++] = '\\';
            out[o++] = 'x';
            out[o++] = hex[p[i] >> 4];
            out[o++] = hex[p[i] & 15];
        }
        p += k - 1;
    }
    out[o] = '\0';
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
                  log_level_names[level]);
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    log_escape(msg, line + n, sizeof(line) - (size_t)n);
    fprintf(stderr, "%s\n", line);
}
