/* Machine-readable results (--json): built as Jansson values and written by
 * one function, so every command's output is valid JSON whatever the strings
 * in it (paths with quotes, backslashes or bytes that are not UTF-8) and
 * whatever the numbers (NaN and infinities become null). */
#ifndef SHARDSWAP_CORE_JSONOUT_H
#define SHARDSWAP_CORE_JSONOUT_H

#include <jansson.h>

/* A JSON number for v rounded to `decimals` places (no rounding when
 * decimals < 0), or null when v is NaN or infinite, which JSON cannot hold.
 * New reference; NULL only when out of memory (json_pack's "o" then fails,
 * and jsonout_print reports it). */
json_t *jsonout_real(double v, int decimals);

/* A JSON string for s: s itself when it is valid UTF-8, else a copy with
 * each invalid byte replaced by U+FFFD (a file name need not be UTF-8, a
 * JSON string must). NULL s gives null. New reference; NULL when out of
 * memory. */
json_t *jsonout_string(const char *s);

/* Writes j on stdout as one line (", " and ": " separators, keys in the
 * order they were set) and a newline, flushes stdout, and drops the caller's
 * reference to j. One object per line is what tools/computron_table.py and
 * tools/bench_compare.py read. Errors: ERR_NOMEM when j is NULL (building it
 * failed), ERR_IO "writing to stdout: <why>" when the write fails. */
int jsonout_print(json_t *j);

/* What a parse error of a file says without quoting the file: Jansson's
 * text with its " near '...'" (the offending token, copied from the input)
 * cut off, in buf (cap bytes). A file named by a link may be any file
 * (/etc/shadow), so no error or log line repeats its bytes. Returns buf. */
const char *jsonout_parse_error(const json_error_t *je, char *buf, size_t cap);

#endif
