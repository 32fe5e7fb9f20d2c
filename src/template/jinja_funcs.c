/* The callables of the Jinja engine: the globals (range, dict, namespace,
 * joiner, and transformers' raise_exception and strftime_now) and the
 * methods of str, dict and list that templates call. As in transformers'
 * ImmutableSandboxedEnvironment, methods that modify a list or dict exist
 * but refuse to run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "template/jinja_impl.h"
#include "template/jinja_str.h"

enum fn_id {
    G_RANGE,
    G_DICT,
    G_NAMESPACE,
    G_RAISE,
    G_STRFTIME,
    G_JOINER,
    G_JOINER_CALL,
    G_CYCLER,
    G_LOOP_CYCLE,
    S_STRIP,
    S_LSTRIP,
    S_RSTRIP,
    S_SPLIT,
    S_RSPLIT,
    S_STARTSWITH,
    S_ENDSWITH,
    S_UPPER,
    S_LOWER,
    S_TITLE,
    S_CAPITALIZE,
    S_REPLACE,
    S_FORMAT,
    S_FIND,
    S_RFIND,
    S_COUNT,
    S_SPLITLINES,
    S_JOIN,
    S_ISDIGIT,
    S_ISALPHA,
    S_ISALNUM,
    S_ISSPACE,
    S_ISUPPER,
    S_ISLOWER,
    S_REMOVEPREFIX,
    S_REMOVESUFFIX,
    S_INDEX,
    S_CENTER,
    D_GET,
    D_ITEMS,
    D_KEYS,
    D_VALUES,
    D_COPY,
    L_INDEX,
    L_COUNT,
    L_COPY,
    U_UNSAFE, /* self: the method's name */
};

static const struct {
    const char *name;
    int id;
} str_methods[] =
    {
        {"strip", S_STRIP},
        {"lstrip", S_LSTRIP},
        {"rstrip", S_RSTRIP},
        {"split", S_SPLIT},
        {"rsplit", S_RSPLIT},
        {"startswith", S_STARTSWITH},
        {"endswith", S_ENDSWITH},
        {"upper", S_UPPER},
        {"lower", S_LOWER},
        {"title", S_TITLE},
        {"capitalize", S_CAPITALIZE},
        {"replace", S_REPLACE},
        {"format", S_FORMAT},
        {"find", S_FIND},
        {"rfind", S_RFIND},
        {"count", S_COUNT},
        {"splitlines", S_SPLITLINES},
        {"join", S_JOIN},
        {"isdigit", S_ISDIGIT},
        {"isalpha", S_ISALPHA},
        {"isalnum", S_ISALNUM},
        {"isspace", S_ISSPACE},
        {"isupper", S_ISUPPER},
        {"islower", S_ISLOWER},
        {"removeprefix", S_REMOVEPREFIX},
        {"removesuffix", S_REMOVESUFFIX},
        {"index", S_INDEX},
        {"center", S_CENTER},
},
  dict_methods[] =
      {
          {"get", D_GET},        {"items", D_ITEMS},     {"keys", D_KEYS},
          {"values", D_VALUES},  {"copy", D_COPY},       {"pop", U_UNSAFE},
          {"popitem", U_UNSAFE}, {"update", U_UNSAFE},   {"setdefault", U_UNSAFE},
          {"clear", U_UNSAFE},   {"fromkeys", U_UNSAFE},
},
  list_methods[] = {
      {"index", L_INDEX},    {"count", L_COUNT},   {"copy", L_COPY},    {"append", U_UNSAFE},
      {"extend", U_UNSAFE},  {"insert", U_UNSAFE}, {"pop", U_UNSAFE},   {"remove", U_UNSAFE},
      {"reverse", U_UNSAFE}, {"sort", U_UNSAFE},   {"clear", U_UNSAFE},
};

static struct jv mkfn(struct render *r, int id, struct jv self)
{
    struct jv v = {.k = JK_FUNC};
    v.fn = jr_alloc(r, sizeof(*v.fn));
    v.fn->id = id;
    v.fn->self = self;
    return v;
}

#define FIND_METHOD(table)                                                                         \
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)                                  \
        if (js_eq(name, table[i].name)) {                                                          \
            if (table[i].id == U_UNSAFE) {                                                         \
                struct jv f = mkfn(r, U_UNSAFE, jv_strn(name.p, name.n));                          \
                f.fn->state = obj.k;                                                               \
                return f;                                                                          \
            }                                                                                      \
            return mkfn(r, table[i].id, obj);                                                      \
        }

struct jv jmethod(struct render *r, struct jv obj, struct jstr name)
{
    if (obj.k == JK_STR) {
        FIND_METHOD(str_methods)
    } else if (obj.k == JK_DICT) {
        FIND_METHOD(dict_methods)
    } else if (obj.k == JK_LIST) {
        FIND_METHOD(list_methods)
    }
    return jv_undef();
}

struct jv jloop_cycle(struct render *r, struct jv loop)
{
    return mkfn(r, G_LOOP_CYCLE, loop);
}

struct jv jglobal_func(struct render *r, const char *name)
{
    static const char *const names[] = {
        [G_RANGE] = "range",           [G_DICT] = "dict",
        [G_NAMESPACE] = "namespace",   [G_RAISE] = "raise_exception",
        [G_STRFTIME] = "strftime_now", [G_JOINER] = "joiner",
        [G_CYCLER] = "cycler",
    };
    for (int i = 0; i <= G_CYCLER; i++)
        if (names[i] && strcmp(names[i], name) == 0)
            return mkfn(r, i, jv_undef());
    return jv_undef();
}

static struct jv argn(struct jv *args, size_t nargs, size_t i, struct jstr *kwn, struct jv *kwv,
                      size_t nkw, const char *name, struct jv def)
{
    if (i < nargs)
        return args[i];
    for (size_t k = 0; k < nkw; k++)
        if (js_eq(kwn[k], name))
            return kwv[k];
    return def;
}

static long long want_int(struct render *r, struct jv v, const char *what)
{
    if (v.k == JK_INT)
        return v.i;
    if (v.k == JK_BOOL)
        return v.b;
    jr_fail(r, ERR_INVALID, "%s: an integer is required, not %s", what, jv_type_name(v));
}

static struct jstr want_str(struct render *r, struct jv v, const char *what)
{
    if (v.k != JK_STR)
        jr_fail(r, ERR_INVALID, "%s: a string is required, not %s", what, jv_type_name(v));
    return v.s;
}

/* dict(...) and namespace(...): a mapping or pairs, then keywords */
static void fill_dict(struct render *r, struct jdict *d, struct jv *args, size_t nargs,
                      struct jstr *kwn, struct jv *kwv, size_t nkw, bool ns)
{
    if (nargs > 1)
        jr_fail(r, ERR_INVALID, "dict expected at most 1 argument, got %zu", nargs);
    if (nargs == 1) {
        struct jv a = args[0];
        if (a.k == JK_DICT || a.k == JK_NS) {
            for (size_t i = 0; i < a.d->n; i++)
                jv_dict_set(r, d, a.d->key[i], a.d->val[i]);
        } else if (a.k == JK_LIST) {
            for (size_t i = 0; i < a.l->n; i++) {
                struct jv p = a.l->v[i];
                if (p.k != JK_LIST || p.l->n != 2)
                    jr_fail(r, ERR_INVALID,
                            "dictionary update sequence element #%zu has the wrong length", i);
                jv_dict_set(r, d, p.l->v[0], p.l->v[1]);
            }
        } else {
            jr_fail(r, ERR_INVALID, "'%s' object is not iterable", jv_type_name(a));
        }
    }
    for (size_t k = 0; k < nkw; k++) {
        if (ns && kwn[k].n && kwn[k].p[0] == '_')
            jr_fail(r, ERR_INVALID,
                    "Chat templates cannot store underscore-prefixed attributes on a namespace");
        jv_dict_set(r, d, jv_strn(kwn[k].p, kwn[k].n), kwv[k]);
    }
}

static bool str_all(struct jstr s, int kind)
{
    if (!s.n)
        return false;
    for (size_t i = 0; i < s.n; i++) {
        unsigned char c = (unsigned char)s.p[i];
        bool d = c >= '0' && c <= '9', a = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
        bool sp = c == ' ' || (c >= 9 && c <= 13);
        bool ok = kind == 0 ? d : kind == 1 ? a : kind == 2 ? (a || d) : sp;
        if (!ok)
            return false;
    }
    return true;
}

static bool affix(struct render *r, struct jstr s, struct jv p, bool end)
{
    if (p.k == JK_LIST && p.l->tuple) {
        for (size_t i = 0; i < p.l->n; i++)
            if (affix(r, s, p.l->v[i], end))
                return true;
        return false;
    }
    if (p.k != JK_STR)
        jr_fail(r, ERR_INVALID, "%s first arg must be str or a tuple of str, not %s",
                end ? "endswith" : "startswith", jv_type_name(p));
    if (p.s.n > s.n)
        return false;
    return p.s.n == 0 || memcmp(end ? s.p + s.n - p.s.n : s.p, p.s.p, p.s.n) == 0;
}

static struct jv call(struct render *r, struct frame *f, struct jfunc *fn, struct jv *args,
                      size_t nargs, struct jstr *kwn, struct jv *kwv, size_t nkw);

struct jv jfunc_call(struct render *r, struct frame *f, struct jfunc *fn, struct jv *args,
                     size_t nargs, struct jstr *kwn, struct jv *kwv, size_t nkw)
{
    struct jv v = call(r, f, fn, args, nargs, kwn, kwv, nkw);
    if (fn->self.k == JK_STR && fn->self.safe && v.k == JK_STR &&
        (fn->id == S_STRIP || fn->id == S_LSTRIP || fn->id == S_RSTRIP || fn->id == S_UPPER ||
         fn->id == S_LOWER || fn->id == S_TITLE || fn->id == S_CAPITALIZE || fn->id == S_CENTER))
        v.safe = true; /* Markup's methods give a Markup */
    return v;
}

static struct jv call(struct render *r, struct frame *f, struct jfunc *fn, struct jv *args,
                      size_t nargs, struct jstr *kwn, struct jv *kwv, size_t nkw)
{
    struct jv self = fn->self;
#define A(i, name, def) argn(args, nargs, i, kwn, kwv, nkw, name, def)
    switch ((enum fn_id)fn->id) {
    case G_RANGE: {
        long long start = 0, stop, stepv = 1;
        if (nargs == 1) {
            stop = want_int(r, args[0], "range()");
        } else if (nargs == 2 || nargs == 3) {
            start = want_int(r, args[0], "range()");
            stop = want_int(r, args[1], "range()");
            if (nargs == 3)
                stepv = want_int(r, args[2], "range()");
        } else {
            jr_fail(r, ERR_INVALID, "range expected 1 to 3 arguments, got %zu", nargs);
        }
        if (stepv == 0)
            jr_fail(r, ERR_INVALID, "range() arg 3 must not be zero");
        long long cnt = 0;
        if (stepv > 0 && stop > start)
            cnt = (long long)(((unsigned long long)stop - (unsigned long long)start - 1) /
                              (unsigned long long)stepv) +
                  1;
        else if (stepv < 0 && stop < start)
            cnt = (long long)(((unsigned long long)start - (unsigned long long)stop - 1) /
                              (unsigned long long)(-(stepv + 1) + 1)) +
                  1;
        if (cnt > 100000)
            jr_fail(r, ERR_INVALID,
                    "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
        struct jv l = jv_list_new(r, (size_t)cnt);
        for (long long i = 0; i < cnt; i++)
            jv_list_push(r, l.l, jv_int(start + i * stepv));
        return l;
    }
    case G_DICT: {
        struct jv d = jv_dict_new(r);
        fill_dict(r, d.d, args, nargs, kwn, kwv, nkw, false);
        return d;
    }
    case G_NAMESPACE: {
        struct jv d = jv_dict_new(r);
        fill_dict(r, d.d, args, nargs, kwn, kwv, nkw, true);
        d.k = JK_NS;
        return d;
    }
    case G_RAISE: {
        struct jstr m = jv_to_str(r, A(0, "message", jv_strn("", 0)));
        jr_fail(r, JINJA_RAISED, "%.*s", (int)(m.n > 1800 ? 1800 : m.n), m.p);
    }
    case G_STRFTIME: {
        struct jstr fs = want_str(r, A(0, "format", jv_undef()), "strftime_now()");
        const char *fmt = jv_str_copy(r, fs.p, fs.n).s.p; /* NUL-terminated */
        time_t t = r->now ? (time_t)r->now : time(NULL);
        struct tm tm;
        if (!localtime_r(&t, &tm))
            jr_fail(r, ERR_INVALID, "strftime_now(): the time is out of range");
        char out[512];
        size_t n = fs.n ? strftime(out, sizeof(out), fmt, &tm) : 0;
        return jv_str_copy(r, out, n);
    }
    case G_JOINER: {
        struct jv j = mkfn(r, G_JOINER_CALL, A(0, "sep", jv_strn(", ", 2)));
        return j;
    }
    case G_JOINER_CALL:
        if (!fn->state) {
            fn->state = 1;
            return jv_strn("", 0);
        }
        return self;
    case G_LOOP_CYCLE:
        if (!nargs)
            jr_fail(r, ERR_INVALID, "no items for cycling given");
        return args[(size_t)self.loop->index0 % nargs];
    case G_CYCLER:
        jr_fail(r, ERR_UNSUPPORTED, "cycler() is not supported");
    case S_STRIP:
    case S_LSTRIP:
    case S_RSTRIP:
        return js_strip(r, self.s, A(0, "chars", jv_none()),
                        fn->id == S_STRIP    ? 3
                        : fn->id == S_LSTRIP ? 1
                                             : 2);
    case S_SPLIT:
    case S_RSPLIT: {
        struct jv ms = A(1, "maxsplit", jv_int(-1));
        return js_split(r, self.s, A(0, "sep", jv_none()), want_int(r, ms, "maxsplit"),
                        fn->id == S_RSPLIT);
    }
    case S_STARTSWITH:
    case S_ENDSWITH: {
        if (nargs > 1)
            jr_fail(r, ERR_UNSUPPORTED, "startswith/endswith with start/end is not supported");
        return jv_bool(affix(r, self.s, A(0, "prefix", jv_undef()), fn->id == S_ENDSWITH));
    }
    case S_UPPER:
        return js_upper(r, self.s);
    case S_LOWER:
        return js_lower(r, self.s);
    case S_TITLE:
        return js_title(r, self.s);
    case S_CAPITALIZE:
        return js_capitalize(r, self.s);
    case S_REPLACE: {
        struct jv cnt = A(2, "count", jv_int(-1));
        return js_replace(r, self.s, want_str(r, A(0, "old", jv_undef()), "replace()"),
                          want_str(r, A(1, "new", jv_undef()), "replace()"),
                          want_int(r, cnt, "replace() count"));
    }
    case S_FORMAT:
        return js_format(r, self.s, args, nargs, kwn, kwv, nkw);
    case S_FIND:
    case S_RFIND:
    case S_INDEX: {
        jr_charge(r, self.s.n);
        long long at =
            js_find(r, self.s, want_str(r, A(0, "sub", jv_undef()), "find()"), fn->id == S_RFIND);
        if (at < 0 && fn->id == S_INDEX)
            jr_fail(r, ERR_INVALID, "substring not found");
        return jv_int(at);
    }
    case S_COUNT: {
        struct jstr sub = want_str(r, A(0, "sub", jv_undef()), "count()");
        long long n = 0;
        if (!sub.n)
            return jv_int((long long)ju_len(self.s) + 1);
        jr_charge(r, self.s.n);
        for (long long at = js_search(self.s, 0, sub); at >= 0;
             at = js_search(self.s, (size_t)at + sub.n, sub))
            n++;
        return jv_int(n);
    }
    case S_SPLITLINES:
        return js_splitlines(r, self.s, jv_truthy(A(0, "keepends", jv_bool(false))));
    case S_JOIN: {
        struct jv l = jv_iter_list(r, A(0, "iterable", jv_undef()));
        struct jbuf b = {0};
        for (size_t i = 0; i < l.l->n; i++) {
            if (l.l->v[i].k != JK_STR)
                jr_fail(r, ERR_INVALID, "sequence item %zu: expected str instance, %s found", i,
                        jv_type_name(l.l->v[i]));
            if (i)
                jb_puts(r, &b, self.s);
            jb_puts(r, &b, l.l->v[i].s);
        }
        return jv_strn(b.p ? b.p : "", b.n);
    }
    case S_ISDIGIT:
        return jv_bool(str_all(self.s, 0));
    case S_ISALPHA:
        return jv_bool(str_all(self.s, 1));
    case S_ISALNUM:
        return jv_bool(str_all(self.s, 2));
    case S_ISSPACE:
        return jv_bool(str_all(self.s, 3));
    case S_ISUPPER:
        return jv_bool(js_is_case(self.s, true));
    case S_ISLOWER:
        return jv_bool(js_is_case(self.s, false));
    case S_REMOVEPREFIX:
    case S_REMOVESUFFIX: {
        struct jstr a = want_str(r, A(0, "prefix", jv_undef()), "removeprefix()");
        bool end = fn->id == S_REMOVESUFFIX;
        if (a.n && affix(r, self.s, jv_strn(a.p, a.n), end))
            return jv_strn(end ? self.s.p : self.s.p + a.n, self.s.n - a.n);
        return self;
    }
    case S_CENTER: {
        long long w = want_int(r, A(0, "width", jv_undef()), "center()");
        struct jstr fill = want_str(r, A(1, "fillchar", jv_strn(" ", 1)), "center()");
        long long n = (long long)ju_len(self.s);
        if (w <= n)
            return self;
        if (w > (long long)r->max_output)
            jr_fail(r, ERR_INVALID, "center() width over the output limit");
        long long pad = w - n, left = pad / 2 + (pad & w & 1); /* CPython's pad() */
        struct jbuf b = {0};
        for (long long i = 0; i < left; i++)
            jb_puts(r, &b, fill);
        jb_puts(r, &b, self.s);
        for (long long i = 0; i < pad - left; i++)
            jb_puts(r, &b, fill);
        return jv_strn(b.p ? b.p : "", b.n);
    }
    case D_GET: {
        jr_charge(r, self.d->n * 8); /* the lookup is linear */
        struct jv *v = jv_dict_get(self.d, A(0, "key", jv_undef()));
        return v ? *v : A(1, "default", jv_none());
    }
    case D_ITEMS: {
        struct jv l = jv_list_new(r, self.d->n);
        for (size_t i = 0; i < self.d->n; i++) {
            struct jv t = jv_list_new(r, 2);
            t.l->tuple = true;
            jv_list_push(r, t.l, self.d->key[i]);
            jv_list_push(r, t.l, self.d->val[i]);
            jv_list_push(r, l.l, t);
        }
        return l;
    }
    case D_KEYS:
    case D_VALUES: {
        struct jv l = jv_list_new(r, self.d->n);
        for (size_t i = 0; i < self.d->n; i++)
            jv_list_push(r, l.l, fn->id == D_KEYS ? self.d->key[i] : self.d->val[i]);
        return l;
    }
    case D_COPY: {
        struct jv d = jv_dict_new(r);
        for (size_t i = 0; i < self.d->n; i++)
            jv_dict_set(r, d.d, self.d->key[i], self.d->val[i]);
        return d;
    }
    case L_INDEX:
    case L_COUNT: {
        struct jv x = A(0, "value", jv_undef());
        long long n = 0;
        for (size_t i = 0; i < self.l->n; i++)
            if (jv_eq(self.l->v[i], x)) {
                if (fn->id == L_INDEX)
                    return jv_int((long long)i);
                n++;
            }
        if (fn->id == L_INDEX)
            jr_fail(r, ERR_INVALID, "list.index(x): x not in list");
        return jv_int(n);
    }
    case L_COPY: {
        struct jv l = jv_list_new(r, self.l->n);
        for (size_t i = 0; i < self.l->n; i++)
            jv_list_push(r, l.l, self.l->v[i]);
        return l;
    }
    case U_UNSAFE:
        jr_fail(r, ERR_INVALID, "access to attribute '%.*s' of '%s' object is unsafe.",
                (int)self.s.n, self.s.p, fn->state == JK_DICT ? "dict" : "list");
    }
#undef A
    jr_fail(r, ERR_INVALID, "internal: unknown function %d", fn->id);
}
