/* String operations with Python's semantics; see jinja_str.h. */
#include <locale.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <wctype.h>

#include "core/error.h"
#include "template/jinja_str.h"

static struct jv buf_str(struct jbuf *b)
{
    return jv_strn(b->p ? b->p : "", b->n);
}

/* Decodes the code point at s[i] into *cp; returns its byte length (1 for
 * an invalid byte). */
static size_t cp_at(struct jstr s, size_t i, unsigned long *cp)
{
    unsigned char c = (unsigned char)s.p[i];
    int k = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
    *cp = c;
    if (!k || i + (size_t)k >= s.n)
        return 1;
    unsigned long v = c & (0x3F >> k);
    for (int j = 1; j <= k; j++) {
        unsigned char d = (unsigned char)s.p[i + (size_t)j];
        if ((d & 0xC0) != 0x80)
            return 1;
        v = (v << 6) | (d & 0x3F);
    }
    *cp = v;
    return (size_t)k + 1;
}

/* Python's str.isspace() for one code point */
static bool py_space(unsigned long c)
{
    return (c >= 9 && c <= 13) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

static bool is_alpha(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* Unicode case mapping through the C.UTF-8 locale (towupper_l), which
 * covers the simple mappings; Python's special casings (sharp s to "SS")
 * are not made. Without that locale, ASCII only. */
static locale_t utf8_locale;
static pthread_once_t utf8_locale_once = PTHREAD_ONCE_INIT;
static void utf8_locale_init(void)
{
    utf8_locale = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
}

static unsigned long cp_case(unsigned long c, bool upper)
{
    if (c < 0x80) {
        if (upper && c >= 'a' && c <= 'z')
            return c - 32;
        if (!upper && c >= 'A' && c <= 'Z')
            return c + 32;
        return c;
    }
    pthread_once(&utf8_locale_once, utf8_locale_init);
    if (!utf8_locale || c > 0x10FFFF)
        return c;
    return (unsigned long)(upper ? towupper_l((wint_t)c, utf8_locale)
                                 : towlower_l((wint_t)c, utf8_locale));
}

static bool cp_cased(unsigned long c)
{
    if (c < 0x80)
        return is_alpha((char)c);
    pthread_once(&utf8_locale_once, utf8_locale_init);
    return utf8_locale && c <= 0x10FFFF &&
           (iswupper_l((wint_t)c, utf8_locale) || iswlower_l((wint_t)c, utf8_locale));
}

static void put_cp(struct render *r, struct jbuf *b, unsigned long c)
{
    char o[4];
    size_t k;
    if (c < 0x80) {
        o[0] = (char)c;
        k = 1;
    } else if (c < 0x800) {
        o[0] = (char)(0xC0 | (c >> 6));
        o[1] = (char)(0x80 | (c & 0x3F));
        k = 2;
    } else if (c < 0x10000) {
        o[0] = (char)(0xE0 | (c >> 12));
        o[1] = (char)(0x80 | ((c >> 6) & 0x3F));
        o[2] = (char)(0x80 | (c & 0x3F));
        k = 3;
    } else {
        o[0] = (char)(0xF0 | (c >> 18));
        o[1] = (char)(0x80 | ((c >> 12) & 0x3F));
        o[2] = (char)(0x80 | ((c >> 6) & 0x3F));
        o[3] = (char)(0x80 | (c & 0x3F));
        k = 4;
    }
    jb_put(r, b, o, k);
}

enum case_kind { CASE_LOWER, CASE_UPPER, CASE_CAPITALIZE, CASE_TITLE, CASE_TITLE_FILTER };

static struct jv map_case(struct render *r, struct jstr s, enum case_kind kind)
{
    struct jbuf b = {0};
    bool prev_cased = false, word_start = true, first = true;
    for (size_t i = 0; i < s.n;) {
        unsigned long c;
        size_t k = cp_at(s, i, &c);
        bool valid = k > 1 || c < 0x80;
        unsigned long o = c;
        if (!valid) {
            jb_put(r, &b, s.p + i, 1); /* an invalid byte passes through */
            i += 1;
            continue;
        }
        switch (kind) {
        case CASE_LOWER:
            o = cp_case(c, false);
            break;
        case CASE_UPPER:
            o = cp_case(c, true);
            break;
        case CASE_CAPITALIZE:
            o = cp_case(c, first);
            break;
        case CASE_TITLE: {
            bool cased = cp_cased(c);
            o = cased ? cp_case(c, !prev_cased) : c;
            prev_cased = cased;
            break;
        }
        case CASE_TITLE_FILTER: {
            bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || py_space(c);
            if (sep)
                word_start = true;
            else {
                o = cp_case(c, word_start);
                word_start = false;
            }
            break;
        }
        }
        first = false;
        put_cp(r, &b, o);
        i += k;
    }
    return buf_str(&b);
}

struct jv js_lower(struct render *r, struct jstr s)
{
    return map_case(r, s, CASE_LOWER);
}
struct jv js_upper(struct render *r, struct jstr s)
{
    return map_case(r, s, CASE_UPPER);
}
struct jv js_capitalize(struct render *r, struct jstr s)
{
    return map_case(r, s, CASE_CAPITALIZE);
}
struct jv js_title(struct render *r, struct jstr s)
{
    return map_case(r, s, CASE_TITLE);
}
struct jv js_title_filter(struct render *r, struct jstr s)
{
    return map_case(r, s, CASE_TITLE_FILTER);
}

bool js_is_case(struct jstr s, bool upper)
{
    bool cased = false;
    for (size_t i = 0; i < s.n; i++) {
        char c = s.p[i];
        if (c >= 'a' && c <= 'z') {
            if (upper)
                return false;
            cased = true;
        } else if (c >= 'A' && c <= 'Z') {
            if (!upper)
                return false;
            cased = true;
        }
    }
    return cased;
}

/* whether the code point at s[i] (of length *k) is in the strip set */
static bool strip_member(struct jstr s, size_t i, size_t *k, struct jv chars)
{
    unsigned long cp;
    *k = cp_at(s, i, &cp);
    if (chars.k != JK_STR)
        return py_space(cp);
    for (size_t j = 0; j < chars.s.n;) {
        unsigned long c2;
        size_t k2 = cp_at(chars.s, j, &c2);
        if (k2 == *k && memcmp(chars.s.p + j, s.p + i, *k) == 0)
            return true;
        j += k2;
    }
    return false;
}

struct jv js_strip(struct render *r, struct jstr s, struct jv chars, int which)
{
    if (chars.k != JK_STR && chars.k != JK_NONE && chars.k != JK_UNDEF)
        jr_fail(r, ERR_INVALID, "strip arg must be None or str");
    size_t b = 0, e = s.n, k;
    if (which & 1)
        while (b < e && strip_member(s, b, &k, chars))
            b += k;
    if (which & 2)
        while (e > b) {
            size_t p = e - 1;
            while (p > b && ((unsigned char)s.p[p] & 0xC0) == 0x80)
                p--;
            if (!strip_member(s, p, &k, chars) || p + k != e)
                break;
            e = p;
        }
    return jv_strn(s.p + b, e - b);
}

struct jv js_replace(struct render *r, struct jstr s, struct jstr old, struct jstr nw,
                     long long count)
{
    struct jbuf b = {0};
    if (!old.n) { /* Python inserts nw between every code point, and at both ends */
        long long done = 0;
        size_t i = 0;
        while (i <= s.n) {
            if (count < 0 || done < count) {
                jb_puts(r, &b, nw);
                done++;
            }
            if (i == s.n)
                break;
            unsigned long cp;
            size_t k = cp_at(s, i, &cp);
            jb_put(r, &b, s.p + i, k);
            i += k;
        }
        return buf_str(&b);
    }
    size_t run = 0;
    long long done = 0, at;
    jr_charge(r, s.n);
    while ((count < 0 || done < count) && (at = js_search(s, run, old)) >= 0) {
        jb_put(r, &b, s.p + run, (size_t)at - run);
        jb_puts(r, &b, nw);
        run = (size_t)at + old.n;
        done++;
    }
    jb_put(r, &b, s.p + run, s.n - run);
    return buf_str(&b);
}

static void push_piece(struct render *r, struct jv l, const char *p, size_t n)
{
    jv_list_push(r, l.l, jv_strn(p, n));
}

struct jv js_split(struct render *r, struct jstr s, struct jv sep, long long maxsplit, bool right)
{
    struct jv l = jv_list_new(r, 4);
    if (sep.k == JK_STR) {
        if (!sep.s.n)
            jr_fail(r, ERR_INVALID, "empty separator");
        jr_charge(r, s.n);
        if (!right) {
            size_t b = 0;
            long long done = 0, at;
            while ((maxsplit < 0 || done < maxsplit) && (at = js_search(s, b, sep.s)) >= 0) {
                push_piece(r, l, s.p + b, (size_t)at - b);
                b = (size_t)at + sep.s.n;
                done++;
            }
            push_piece(r, l, s.p + b, s.n - b);
            return l;
        }
        /* rsplit: collect from the right, then reverse */
        size_t e = s.n;
        long long done = 0;
        size_t i = s.n;
        while (i >= sep.s.n && (maxsplit < 0 || done < maxsplit)) {
            jr_charge(r, sep.s.n); /* a comparison from the right: up to sep bytes */
            if (memcmp(s.p + i - sep.s.n, sep.s.p, sep.s.n) == 0) {
                push_piece(r, l, s.p + i, e - i);
                i -= sep.s.n;
                e = i;
                done++;
            } else {
                i--;
            }
        }
        push_piece(r, l, s.p, e);
        for (size_t a = 0, z = l.l->n - 1; a < z; a++, z--) {
            struct jv t = l.l->v[a];
            l.l->v[a] = l.l->v[z];
            l.l->v[z] = t;
        }
        return l;
    }
    if (sep.k != JK_NONE && sep.k != JK_UNDEF)
        jr_fail(r, ERR_INVALID, "must be str or None, not %s", jv_type_name(sep));
    /* whitespace runs */
    struct jstr t = js_strip(r, s, jv_none(), right ? 2 : 1).s;
    if (!right) {
        size_t i = 0;
        long long done = 0;
        while (i < t.n) {
            if (maxsplit >= 0 && done >= maxsplit) {
                push_piece(r, l, t.p + i, t.n - i);
                return l;
            }
            size_t b = i, k;
            unsigned long cp;
            while (i < t.n && !((k = cp_at(t, i, &cp)), py_space(cp)))
                i += k;
            push_piece(r, l, t.p + b, i - b);
            done++;
            while (i < t.n && ((k = cp_at(t, i, &cp)), py_space(cp)))
                i += k;
        }
        return l;
    }
    /* rsplit on whitespace: ASCII whitespace only from the right */
    size_t e = t.n;
    long long done = 0;
    struct jv rev = jv_list_new(r, 4);
    while (e > 0) {
        if (maxsplit >= 0 && done >= maxsplit) {
            push_piece(r, rev, t.p, e);
            e = 0;
            break;
        }
        size_t b = e;
        while (b > 0 && !(t.p[b - 1] == ' ' || (t.p[b - 1] >= 9 && t.p[b - 1] <= 13)))
            b--;
        push_piece(r, rev, t.p + b, e - b);
        done++;
        e = b;
        while (e > 0 && (t.p[e - 1] == ' ' || (t.p[e - 1] >= 9 && t.p[e - 1] <= 13)))
            e--;
    }
    for (size_t i = rev.l->n; i-- > 0;)
        jv_list_push(r, l.l, rev.l->v[i]);
    return l;
}

struct jv js_splitlines(struct render *r, struct jstr s, bool keepends)
{
    struct jv l = jv_list_new(r, 4);
    size_t b = 0, i = 0;
    while (i < s.n) {
        unsigned long cp;
        size_t k = cp_at(s, i, &cp);
        bool brk = cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C ||
                   cp == 0x1D || cp == 0x1E || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
        if (!brk) {
            i += k;
            continue;
        }
        size_t e = i;
        i += k;
        if (cp == '\r' && i < s.n && s.p[i] == '\n')
            i++;
        push_piece(r, l, s.p + b, keepends ? i - b : e - b);
        b = i;
    }
    if (b < s.n)
        push_piece(r, l, s.p + b, s.n - b);
    return l;
}

struct jv js_indent(struct render *r, struct jstr s, struct jstr ind, bool first, bool blank)
{
    /* Jinja: s += "\n"; lines = s.splitlines(); ... */
    struct jbuf t = {0};
    jb_puts(r, &t, s);
    jb_put(r, &t, "\n", 1);
    struct jv lines = js_splitlines(r, (struct jstr){t.p, t.n}, false);
    struct jbuf b = {0};
    if (first)
        jb_puts(r, &b, ind);
    for (size_t i = 0; i < lines.l->n; i++) {
        struct jstr ln = lines.l->v[i].s;
        if (i) {
            jb_put(r, &b, "\n", 1);
            if (blank || ln.n)
                jb_puts(r, &b, ind);
        }
        jb_puts(r, &b, ln);
    }
    return buf_str(&b);
}

long long js_wordcount(struct jstr s)
{
    long long n = 0;
    bool in = false;
    for (size_t i = 0; i < s.n; i++) {
        unsigned char c = (unsigned char)s.p[i];
        bool w = (c >= '0' && c <= '9') || is_alpha((char)c) || c == '_' || c >= 0x80;
        if (w && !in)
            n++;
        in = w;
    }
    return n;
}

struct jv js_percent_format(struct render *r, struct jstr fmt, struct jv args)
{
    struct jbuf b = {0};
    size_t ai = 0;
    bool tuple = args.k == JK_LIST && args.l->tuple;
    size_t nargs = tuple ? args.l->n : 1;
    for (size_t i = 0; i < fmt.n; i++) {
        if (fmt.p[i] != '%') {
            jb_put(r, &b, fmt.p + i, 1);
            continue;
        }
        if (++i >= fmt.n)
            jr_fail(r, ERR_INVALID, "incomplete format");
        char spec[32];
        size_t k = 0;
        spec[k++] = '%';
        while (i < fmt.n && k < sizeof(spec) - 2 && strchr("-+ #0123456789.", fmt.p[i]))
            spec[k++] = fmt.p[i++];
        if (i >= fmt.n)
            jr_fail(r, ERR_INVALID, "incomplete format");
        char conv = fmt.p[i];
        if (conv == '%') {
            jb_put(r, &b, "%", 1);
            continue;
        }
        if (ai >= nargs)
            jr_fail(r, ERR_INVALID, "not enough arguments for format string");
        struct jv v = tuple ? args.l->v[ai++] : (ai++, args);
        switch (conv) {
        case 's':
        case 'r': {
            struct jbuf t = {0};
            if (conv == 's')
                jv_str_into(r, &t, v);
            else
                jv_repr_into(r, &t, v);
            if (k == 1)
                jb_put(r, &b, t.p ? t.p : "", t.n);
            else {
                spec[k++] = 's';
                spec[k] = 0;
                jb_printf(r, &b, spec, t.p ? t.p : "");
            }
            break;
        }
        case 'd':
        case 'i':
        case 'x':
        case 'X':
        case 'o':
            if (!jv_is_num(v))
                jr_fail(r, ERR_INVALID, "%%%c format: a number is required, not %s", conv,
                        jv_type_name(v));
            spec[k++] = 'l';
            spec[k++] = 'l';
            spec[k++] = conv == 'i' ? 'd' : conv;
            spec[k] = 0;
            jb_printf(r, &b, spec,
                      v.k == JK_FLOAT  ? (long long)v.f
                      : v.k == JK_BOOL ? (long long)v.b
                                       : v.i);
            break;
        case 'f':
        case 'F':
        case 'e':
        case 'g':
            if (!jv_is_num(v))
                jr_fail(r, ERR_INVALID, "%%%c format: a number is required, not %s", conv,
                        jv_type_name(v));
            spec[k++] = conv;
            spec[k] = 0;
            jb_printf(r, &b, spec, jv_num(v));
            break;
        default:
            jr_fail(r, ERR_UNSUPPORTED, "format character '%c' is not supported", conv);
        }
    }
    if (ai < nargs)
        jr_fail(r, ERR_INVALID, "not all arguments converted during string formatting");
    return buf_str(&b);
}

struct jv js_format(struct render *r, struct jstr fmt, struct jv *args, size_t nargs,
                    struct jstr *kwn, struct jv *kwv, size_t nkw)
{
    struct jbuf b = {0};
    size_t auto_i = 0;
    for (size_t i = 0; i < fmt.n; i++) {
        char c = fmt.p[i];
        if (c == '}') {
            if (i + 1 < fmt.n && fmt.p[i + 1] == '}') {
                jb_put(r, &b, "}", 1);
                i++;
                continue;
            }
            jr_fail(r, ERR_INVALID, "Single '}' encountered in format string");
        }
        if (c != '{') {
            jb_put(r, &b, &c, 1);
            continue;
        }
        if (i + 1 < fmt.n && fmt.p[i + 1] == '{') {
            jb_put(r, &b, "{", 1);
            i++;
            continue;
        }
        size_t e = i + 1;
        while (e < fmt.n && fmt.p[e] != '}')
            e++;
        if (e >= fmt.n)
            jr_fail(r, ERR_INVALID, "Single '{' encountered in format string");
        struct jstr field = {fmt.p + i + 1, e - i - 1};
        for (size_t j = 0; j < field.n; j++)
            if (field.p[j] == ':' || field.p[j] == '!' || field.p[j] == '.' || field.p[j] == '[')
                jr_fail(r, ERR_UNSUPPORTED,
                        "str.format field '{%.*s}' is not supported (only {}, {N}, {name})",
                        (int)field.n, field.p);
        struct jv v;
        if (!field.n) {
            if (auto_i >= nargs)
                jr_fail(r, ERR_INVALID,
                        "Replacement index %zu out of range for positional args tuple", auto_i);
            v = args[auto_i++];
        } else if (field.p[0] >= '0' && field.p[0] <= '9') {
            size_t idx = 0;
            for (size_t j = 0; j < field.n && idx < 100000; j++)
                idx = idx * 10 + (size_t)(field.p[j] - '0');
            if (idx >= nargs)
                jr_fail(r, ERR_INVALID,
                        "Replacement index %zu out of range for positional args tuple", idx);
            v = args[idx];
        } else {
            size_t k;
            for (k = 0; k < nkw; k++)
                if (kwn[k].n == field.n && memcmp(kwn[k].p, field.p, field.n) == 0)
                    break;
            if (k == nkw)
                jr_fail(r, ERR_INVALID, "KeyError: '%.*s'", (int)field.n, field.p);
            v = kwv[k];
        }
        jv_str_into(r, &b, v);
        i = e;
    }
    return buf_str(&b);
}

struct jv js_escape(struct render *r, struct jstr s)
{
    struct jbuf b = {0};
    size_t run = 0;
    for (size_t i = 0; i < s.n; i++) {
        const char *e = NULL;
        switch (s.p[i]) {
        case '&':
            e = "&amp;";
            break;
        case '<':
            e = "&lt;";
            break;
        case '>':
            e = "&gt;";
            break;
        case '"':
            e = "&#34;";
            break;
        case '\'':
            e = "&#39;";
            break;
        }
        if (e) {
            jb_put(r, &b, s.p + run, i - run);
            jb_put(r, &b, e, strlen(e));
            run = i + 1;
        }
    }
    jb_put(r, &b, s.p + run, s.n - run);
    struct jv v = buf_str(&b);
    v.safe = true;
    return v;
}

struct jv js_ascii_escape(struct render *r, struct jstr s)
{
    struct jbuf b = {0};
    for (size_t i = 0; i < s.n;) {
        unsigned long cp;
        size_t k = cp_at(s, i, &cp);
        if (cp < 0x80) {
            jb_put(r, &b, s.p + i, 1);
        } else if (cp < 0x10000) {
            jb_printf(r, &b, "\\u%04lx", cp);
        } else {
            unsigned long v = cp - 0x10000;
            jb_printf(r, &b, "\\u%04lx\\u%04lx", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
        }
        i += k;
    }
    return buf_str(&b);
}

long long js_find(struct render *r, struct jstr s, struct jstr sub, bool right)
{
    if (sub.n > s.n)
        return -1;
    if (!sub.n)
        return right ? (long long)ju_len(s) : 0;
    long long at = js_search(s, 0, sub);
    /* rfind: the last start; searching on from each hit is linear for
     * non-overlapping hits, and the caller charged the scan */
    for (long long nx = at; right && nx >= 0; nx = js_search(s, (size_t)nx + 1, sub)) {
        jr_charge(r, sub.n);
        at = nx;
    }
    if (at < 0)
        return -1;
    return (long long)ju_len((struct jstr){s.p, (size_t)at});
}
