/* The server's log: levelled lines on stderr, each with a UTC timestamp and
 * the level, written whole by one fprintf under stdio's own lock, so lines of
 * different threads never interleave. Any thread, including engine callbacks
 * (it does not block on anything but stderr). */
#ifndef SHARDSWAP_SERVER_LOG_H
#define SHARDSWAP_SERVER_LOG_H

#include <stddef.h>

#include "server/config.h" /* enum log_level */

void log_set_level(enum log_level level);
enum log_level log_get_level(void);
/* A line at level (dropped when above the level set); no newline needed.
 * The message is escaped (log_escape): one call, one line. */
void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* in -> out (cap bytes, NUL-terminated, cut short when full) with control
 * bytes, DEL and C1 controls written as \xNN: what log_msg does to every
 * message, so a field a client sent cannot start a line of its own. */
void log_escape(const char *in, char *out, size_t cap);
/* The levels' names, indexed by enum log_level, NULL-terminated. */
extern const char *const log_level_names[];
/* "error", "warn", "info", "debug" -> *out; ERR_INVALID otherwise. */
int log_level_parse(const char *s, enum log_level *out);

#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)

#endif
