#include "core/jsonout.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

json_t *jsonout_real(double v, int decimals)
{
    if (!isfinite(v))
        return json_null();
    if (decimals >= 0) {
        double scale = pow(10, decimals), r = round(v * scale) / scale;
        if (isfinite(r)) /* beyond double's range when scaled: keep v */
            v = r;
    }
    return json_real(v);
}

/* Length of the valid UTF-8 sequence at s (no overlongs, surrogates or
 * code points past U+10FFFF), or 0. */
static size_t utf8_seq_len(const unsigned char *s)
{
    unsigned char c = s[0];
    if (c < 0x80)
        return 1;
    size_t len = c >= 0xc2 && c <= 0xdf   ? 2
                 : c >= 0xe0 && c <= 0xef ? 3
                 : c >= 0xf0 && c <= 0xf4 ? 4
                                          : 0;
    if (!len)
        return 0;
    unsigned char lo = 0x80, hi = 0xbf; /* allowed range of the second byte */
    if (c == 0xe0)
        lo = 0xa0;
    else if (c == 0xed)
        hi = 0x9f;
    else if (c == 0xf0)
        lo = 0x90;
    else if (c == 0xf4)
        hi = 0x8f;
    if (s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xbf)
            return 0;
    return len;
}

json_t *jsonout_string(const char *s)
{
    if (!s)
        return json_null();
    json_t *j = json_string(s);
    if (j)
        return j;
    /* not UTF-8: at most three bytes (U+FFFD) per input byte */
    size_t n = strlen(s);
    char *fixed = malloc(3 * n + 1), *o = fixed;
    if (!fixed)
        return NULL;
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        size_t len = utf8_seq_len(p);
        if (len) {
            memcpy(o, p, len);
            o += len;
            p += len;
        } else {
            memcpy(o, "\xef\xbf\xbd", 3);
            o += 3;
            p++;
        }
    }
    *o = '\0';
    j = json_string(fixed);
    free(fixed);
    return j;
}

int jsonout_print(json_t *j)
{
    if (!j)
        return err_set(ERR_NOMEM, "out of memory building the JSON output");
    errno = 0; /* what a failed write leaves here is the reason */
    /* 15 significant digits: jsonout_real's rounded values print as written */
    int bad = json_dumpf(j, stdout, JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15)) != 0 ||
              fputc('\n', stdout) == EOF;
    json_decref(j);
    if (fflush(stdout) != 0 || bad || ferror(stdout))
        return err_set(ERR_IO, "writing to stdout: %s", strerror(errno ? errno : EIO));
    return 0;
}

const char *jsonout_parse_error(const json_error_t *je, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", je->text);
    char *near = strstr(buf, " near ");
    if (near)
        *near = '\0';
    return buf;
}
