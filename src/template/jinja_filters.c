/* Jinja's filters and tests, as Jinja2 3.1 defines them, with tojson as
 * transformers overrides it (json.dumps(x, ensure_ascii=False, indent=None,
 * separators=None, sort_keys=False)). Case mapping is ASCII only. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "template/jinja_impl.h"
#include "template/jinja_str.h"

enum filter_id {
    F_ABS,
    F_CAPITALIZE,
    F_COUNT,
    F_D,
    F_DEFAULT,
    F_DICTSORT,
    F_E,
    F_ESCAPE,
    F_FIRST,
    F_FLOAT,
    F_FORMAT,
    F_INDENT,
    F_INT,
    F_ITEMS,
    F_JOIN,
    F_LAST,
    F_LENGTH,
    F_LIST,
    F_LOWER,
    F_MAP,
    F_MAX,
    F_MIN,
    F_REJECT,
    F_REJECTATTR,
    F_REPLACE,
    F_REVERSE,
    F_ROUND,
    F_SAFE,
    F_SELECT,
    F_SELECTATTR,
    F_SORT,
    F_STRING,
    F_SUM,
    F_TITLE,
    F_TOJSON,
    F_TRIM,
    F_UNIQUE,
    F_UPPER,
    F_WORDCOUNT,
    F_ATTR,
    F_CENTER,
    F_BATCH,
    N_FILTERS
};

static const char *const filter_names[N_FILTERS] = {
    [F_ABS] = "abs",
    [F_CAPITALIZE] = "capitalize",
    [F_COUNT] = "count",
    [F_D] = "d",
    [F_DEFAULT] = "default",
    [F_DICTSORT] = "dictsort",
    [F_E] = "e",
    [F_ESCAPE] = "escape",
    [F_FIRST] = "first",
    [F_FLOAT] = "float",
    [F_FORMAT] = "format",
    [F_INDENT] = "indent",
    [F_INT] = "int",
    [F_ITEMS] = "items",
    [F_JOIN] = "join",
    [F_LAST] = "last",
    [F_LENGTH] = "length",
    [F_LIST] = "list",
    [F_LOWER] = "lower",
    [F_MAP] = "map",
    [F_MAX] = "max",
    [F_MIN] = "min",
    [F_REJECT] = "reject",
    [F_REJECTATTR] = "rejectattr",
    [F_REPLACE] = "replace",
    [F_REVERSE] = "reverse",
    [F_ROUND] = "round",
    [F_SAFE] = "safe",
    [F_SELECT] = "select",
    [F_SELECTATTR] = "selectattr",
    [F_SORT] = "sort",
    [F_STRING] = "string",
    [F_SUM] = "sum",
    [F_TITLE] = "title",
    [F_TOJSON] = "tojson",
    [F_TRIM] = "trim",
    [F_UNIQUE] = "unique",
    [F_UPPER] = "upper",
    [F_WORDCOUNT] = "wordcount",
    [F_ATTR] = "attr",
    [F_CENTER] = "center",
    [F_BATCH] = "batch",
};

enum test_id {
    X_DEFINED,
    X_UNDEFINED,
    X_NONE,
    X_STRING,
    X_MAPPING,
    X_ITERABLE,
    X_SEQUENCE,
    X_NUMBER,
    X_INTEGER,
    X_FLOATT,
    X_BOOLEAN,
    X_TRUE,
    X_FALSE,
    X_EQ,
    X_NE,
    X_LT,
    X_LE,
    X_GT,
    X_GE,
    X_ODD,
    X_EVEN,
    X_DIVISIBLEBY,
    X_IN,
    X_CALLABLE,
    X_LOWER,
    X_UPPER,
    X_SAMEAS,
    X_ESCAPED,
    N_TESTS
};

static const struct {
    const char *name;
    int id;
} test_names[] = {
    {"defined", X_DEFINED},
    {"undefined", X_UNDEFINED},
    {"none", X_NONE},
    {"string", X_STRING},
    {"mapping", X_MAPPING},
    {"iterable", X_ITERABLE},
    {"sequence", X_SEQUENCE},
    {"number", X_NUMBER},
    {"integer", X_INTEGER},
    {"float", X_FLOATT},
    {"boolean", X_BOOLEAN},
    {"true", X_TRUE},
    {"false", X_FALSE},
    {"eq", X_EQ},
    {"equalto", X_EQ},
    {"==", X_EQ},
    {"ne", X_NE},
    {"!=", X_NE},
    {"lt", X_LT},
    {"lessthan", X_LT},
    {"<", X_LT},
    {"le", X_LE},
    {"<=", X_LE},
    {"gt", X_GT},
    {"greaterthan", X_GT},
    {">", X_GT},
    {"ge", X_GE},
    {">=", X_GE},
    {"odd", X_ODD},
    {"even", X_EVEN},
    {"divisibleby", X_DIVISIBLEBY},
    {"in", X_IN},
    {"callable", X_CALLABLE},
    {"lower", X_LOWER},
    {"upper", X_UPPER},
    {"sameas", X_SAMEAS},
    {"escaped", X_ESCAPED},
};

int jinja_filter_id(const char *name, size_t n)
{
    for (int i = 0; i < N_FILTERS; i++)
        if (strlen(filter_names[i]) == n && memcmp(filter_names[i], name, n) == 0)
            return i;
    return -1;
}

int jinja_test_id(const char *name, size_t n)
{
    for (size_t i = 0; i < sizeof(test_names) / sizeof(test_names[0]); i++)
        if (strlen(test_names[i].name) == n && memcmp(test_names[i].name, name, n) == 0)
            return test_names[i].id;
    return -1;
}

/* ---- argument helpers ---- */
struct fargs {
    struct jv *args;
    size_t nargs;
    struct jstr *kwn;
    struct jv *kwv;
    size_t nkw;
    const char *fname;
};

/* The argument at position pos or named name; def when absent. */
static struct jv arg(struct render *r, struct fargs *a, size_t pos, const char *name, struct jv def)
{
    if (pos < a->nargs)
        return a->args[pos];
    for (size_t i = 0; i < a->nkw; i++)
        if (js_eq(a->kwn[i], name))
            return a->kwv[i];
    return def;
}

static void check_kw(struct render *r, struct fargs *a, const char *const *known)
{
    for (size_t i = 0; i < a->nkw; i++) {
        const char *const *k = known;
        for (; *k; k++)
            if (js_eq(a->kwn[i], *k))
                break;
        if (!*k)
            jr_fail(r, ERR_INVALID, "%s() got an unexpected keyword argument '%.*s'", a->fname,
                    (int)a->kwn[i].n, a->kwn[i].p);
    }
}

static long long int_arg(struct render *r, struct jv v, const char *what)
{
    if (v.k == JK_INT)
        return v.i;
    if (v.k == JK_BOOL)
        return v.b;
    jr_fail(r, ERR_INVALID, "%s must be an integer, not %s", what, jv_type_name(v));
}

/* obj's attribute by a dotted path ("a.b", integers index), as Jinja's
 * make_attrgetter */
static struct jv attr_path(struct render *r, struct jv obj, struct jstr path)
{
    size_t b = 0;
    while (b <= path.n) {
        size_t e = b;
        while (e < path.n && path.p[e] != '.')
            e++;
        struct jstr part = {path.p + b, e - b};
        bool digits = part.n > 0;
        long long idx = 0;
        for (size_t i = 0; i < part.n; i++) {
            if (part.p[i] < '0' || part.p[i] > '9')
                digits = false;
            else if (idx < 1000000000)
                idx = idx * 10 + (part.p[i] - '0');
        }
        obj = digits ? jgetitem(r, obj, jv_int(idx)) : jgetitem(r, obj, jv_strn(part.p, part.n));
        b = e + 1;
    }
    return obj;
}

static struct jv lower_for_cmp(struct render *r, struct jv v, bool case_sensitive)
{
    if (case_sensitive || v.k != JK_STR)
        return v;
    return js_lower(r, v.s);
}

/* ---- sorting: a stable merge sort whose comparison may fail the render ---- */
struct sort_ctx {
    struct render *r;
    struct jv *keys;
    bool reverse;
};

static void merge_sort(struct sort_ctx *c, size_t *idx, size_t *tmp, size_t n)
{
    if (n < 2)
        return;
    size_t h = n / 2;
    merge_sort(c, idx, tmp, h);
    merge_sort(c, idx + h, tmp, n - h);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        int cmp = jv_cmp(c->r, c->keys[idx[j]], c->keys[idx[i]]);
        if (c->reverse ? cmp > 0 : cmp < 0)
            tmp[k++] = idx[j++];
        else
            tmp[k++] = idx[i++];
    }
    while (i < h)
        tmp[k++] = idx[i++];
    while (j < n)
        tmp[k++] = idx[j++];
    memcpy(idx, tmp, n * sizeof(size_t));
}

static size_t *sorted_order(struct render *r, struct jv *keys, size_t n, bool reverse)
{
    size_t *idx = jr_alloc(r, (n + 1) * sizeof(size_t)),
           *tmp = jr_alloc(r, (n + 1) * sizeof(size_t));
    for (size_t i = 0; i < n; i++)
        idx[i] = i;
    struct sort_ctx c = {r, keys, reverse};
    merge_sort(&c, idx, tmp, n);
    return idx;
}

/* ---- select / reject ---- */
static struct jv select_items(struct render *r, struct frame *f, struct jv seq, struct fargs *a,
                              bool attr, bool keep)
{
    if (!jv_truthy(seq)) { /* Jinja's select_or_reject: `if value:`, in a generator */
        struct jv g = jv_list_new(r, 0);
        g.l->gen = true;
        return g;
    }
    struct jv items = jv_iter_list(r, seq);
    size_t p = 0;
    struct jstr path = {0};
    if (attr) {
        struct jv pa = arg(r, a, 0, "attribute", jv_undef());
        if (pa.k != JK_STR)
            jr_fail(r, ERR_INVALID, "%s() needs an attribute name", a->fname);
        path = pa.s;
        p = 1;
    }
    int tid = -1;
    if (p < a->nargs) {
        struct jv tn = a->args[p];
        if (tn.k != JK_STR)
            jr_fail(r, ERR_INVALID, "%s(): the test name must be a string", a->fname);
        tid = jinja_test_id(tn.s.p, tn.s.n);
        if (tid < 0)
            jr_fail(r, ERR_UNSUPPORTED, "test \"%.*s\" is not supported", (int)tn.s.n, tn.s.p);
        p++;
    }
    struct jv out = jv_list_new(r, items.l->n);
    out.l->gen = true;
    for (size_t i = 0; i < items.l->n; i++) {
        struct jv v = attr ? attr_path(r, items.l->v[i], path) : items.l->v[i];
        bool t = tid < 0 ? jv_truthy(v) : jtest(r, f, tid, v, a->args + p, a->nargs - p);
        if (t == keep)
            jv_list_push(r, out.l, items.l->v[i]);
    }
    return out;
}

static struct jv sized_len(struct render *r, struct jv v)
{
    switch (v.k) {
    case JK_STR:
        return jv_int((long long)ju_len(v.s));
    case JK_LIST:
        if (v.l->gen)
            jr_fail(r, ERR_INVALID, "object of type 'generator' has no len()");
        return jv_int((long long)v.l->n);
    case JK_DICT:
    case JK_NS:
        return jv_int((long long)v.d->n);
    case JK_UNDEF:
        return jv_int(0);
    default:
        jr_fail(r, ERR_INVALID, "object of type '%s' has no len()", jv_type_name(v));
    }
}

static struct jv to_number(struct render *r, struct jv v, bool want_int, struct jv def, int base)
{
    if (v.k == JK_UNDEF) /* Undefined.__int__ / __float__ raise */
        jr_undefined(r, v);
    if (v.k == JK_INT)
        return want_int ? v : jv_float((double)v.i);
    if (v.k == JK_BOOL)
        return want_int ? jv_int(v.b) : jv_float(v.b);
    if (v.k == JK_FLOAT) {
        if (!want_int)
            return v;
        if (!isfinite(v.f) || fabs(v.f) >= 9.2e18)
            return def;
        return jv_int((long long)v.f);
    }
    if (v.k == JK_STR) {
        char buf[128];
        if (v.s.n >= sizeof(buf))
            return def;
        memcpy(buf, v.s.p, v.s.n);
        buf[v.s.n] = 0;
        char *s = buf;
        while (isspace((unsigned char)*s))
            s++;
        size_t l = strlen(s);
        while (l && isspace((unsigned char)s[l - 1]))
            s[--l] = 0;
        if (!l)
            return def;
        /* underscores between digits are allowed by Python; drop them */
        char *o = s;
        for (char *c = s; *c; c++)
            if (*c != '_')
                *o++ = *c;
        *o = 0;
        char *end;
        if (want_int) {
            errno = 0;
            long long i = strtoll(s, &end, base);
            if (*end == 0 && errno == 0)
                return jv_int(i);
            if (strpbrk(s, "xXpP")) /* Python's float() reads no hex */
                return def;
            double d = strtod(s, &end);
            if (*end == 0 && isfinite(d) && fabs(d) < 9.2e18)
                return jv_int((long long)d);
            return def;
        }
        if (strpbrk(s, "xXpP"))
            return def;
        double d = strtod(s, &end);
        return *end == 0 ? jv_float(d) : def;
    }
    return def;
}

static struct jv filter(struct render *r, struct frame *f, int fid, struct jv v, struct jv *args,
                        size_t nargs, struct jstr *kwn, struct jv *kwv, size_t nkw);

struct jv jfilter(struct render *r, struct frame *f, int fid, struct jv v, struct jv *args,
                  size_t nargs, struct jstr *kwn, struct jv *kwv, size_t nkw)
{
    struct jv out = filter(r, f, fid, v, args, nargs, kwn, kwv, nkw);
    /* string filters keep a Markup a Markup (soft_str and Markup's methods) */
    if (v.k == JK_STR && v.safe && out.k == JK_STR &&
        (fid == F_STRING || fid == F_TRIM || fid == F_UPPER || fid == F_LOWER ||
         fid == F_CAPITALIZE || fid == F_TITLE || fid == F_INDENT))
        out.safe = true;
    return out;
}

static struct jv filter(struct render *r, struct frame *f, int fid, struct jv v, struct jv *args,
                        size_t nargs, struct jstr *kwn, struct jv *kwv, size_t nkw)
{
    struct fargs a = {args, nargs, kwn, kwv, nkw, filter_names[fid]};
    switch ((enum filter_id)fid) {
    case F_SAFE: {
        if (v.k == JK_STR && v.safe)
            return v;
        struct jstr s = jv_to_str(r, v);
        struct jv m = jv_strn(s.p, s.n);
        m.safe = true;
        return m;
    }
    case F_ABS:
        if (v.k == JK_INT)
            return jv_int(v.i < 0 ? -v.i : v.i);
        if (v.k == JK_FLOAT)
            return jv_float(fabs(v.f));
        if (v.k == JK_BOOL)
            return jv_int(v.b);
        jr_fail(r, ERR_INVALID, "bad operand type for abs(): '%s'", jv_type_name(v));
    case F_D:
    case F_DEFAULT: {
        struct jv def = arg(r, &a, 0, "default_value", jv_strn("", 0));
        bool boolean = jv_truthy(arg(r, &a, 1, "boolean", jv_bool(false)));
        if (v.k == JK_UNDEF || (boolean && !jv_truthy(v)))
            return def;
        return v;
    }
    case F_COUNT:
    case F_LENGTH:
        return sized_len(r, v);
    case F_STRING: {
        struct jstr s = jv_to_str(r, v);
        return jv_strn(s.p, s.n);
    }
    case F_LOWER:
        return js_lower(r, jv_to_str(r, v));
    case F_UPPER:
        return js_upper(r, jv_to_str(r, v));
    case F_CAPITALIZE:
        return js_capitalize(r, jv_to_str(r, v));
    case F_TITLE:
        return js_title_filter(r, jv_to_str(r, v));
    case F_TRIM: {
        struct jv chars = arg(r, &a, 0, "chars", jv_none());
        return js_strip(r, jv_to_str(r, v), chars, 3);
    }
    case F_E:
    case F_ESCAPE:
        return v.k == JK_STR && v.safe ? v : js_escape(r, jv_to_str(r, v));
    case F_REPLACE: {
        struct jv old = arg(r, &a, 0, "old", jv_undef()), nw = arg(r, &a, 1, "new", jv_undef());
        struct jv cnt = arg(r, &a, 2, "count", jv_none());
        if (old.k != JK_STR || nw.k != JK_STR)
            jr_fail(r, ERR_INVALID, "replace() needs two strings");
        return js_replace(r, jv_to_str(r, v), old.s, nw.s,
                          cnt.k == JK_NONE ? -1 : int_arg(r, cnt, "count"));
    }
    case F_FIRST: {
        struct jv l = jv_iter_list(r, v);
        return l.l->n ? l.l->v[0] : jv_undef();
    }
    case F_LAST: {
        if (v.k == JK_LIST && v.l->gen)
            jr_fail(r, ERR_INVALID, "'generator' object is not reversible");
        struct jv l = jv_iter_list(r, v);
        return l.l->n ? l.l->v[l.l->n - 1] : jv_undef();
    }
    case F_LIST: {
        struct jv l = jv_iter_list(r, v);
        struct jv c = jv_list_new(r, l.l->n);
        for (size_t i = 0; i < l.l->n; i++)
            jv_list_push(r, c.l, l.l->v[i]);
        return c;
    }
    case F_REVERSE: {
        if (v.k == JK_STR) {
            struct jv l = jv_iter_list(r, v);
            struct jbuf b = {0};
            for (size_t i = l.l->n; i-- > 0;)
                jb_puts(r, &b, l.l->v[i].s);
            return jv_strn(b.p ? b.p : "", b.n);
        }
        struct jv l = jv_iter_list(r, v);
        struct jv c = jv_list_new(r, l.l->n);
        for (size_t i = l.l->n; i-- > 0;)
            jv_list_push(r, c.l, l.l->v[i]);
        return c;
    }
    case F_ITEMS: {
        if (v.k == JK_UNDEF)
            return jv_list_new(r, 0);
        if (v.k != JK_DICT)
            jr_fail(r, ERR_INVALID, "can only get item pairs from a mapping");
        struct jv l = jv_list_new(r, v.d->n);
        for (size_t i = 0; i < v.d->n; i++) {
            struct jv t = jv_list_new(r, 2);
            t.l->tuple = true;
            jv_list_push(r, t.l, v.d->key[i]);
            jv_list_push(r, t.l, v.d->val[i]);
            jv_list_push(r, l.l, t);
        }
        return l;
    }
    case F_DICTSORT: {
        static const char *const kw[] = {"case_sensitive", "by", "reverse", NULL};
        check_kw(r, &a, kw);
        if (v.k != JK_DICT)
            jr_fail(r, ERR_INVALID, "dictsort of a %s, not a dict", jv_type_name(v));
        bool cs = jv_truthy(arg(r, &a, 0, "case_sensitive", jv_bool(false)));
        struct jv by = arg(r, &a, 1, "by", jv_strn("key", 3));
        bool rev = jv_truthy(arg(r, &a, 2, "reverse", jv_bool(false)));
        bool by_value = by.k == JK_STR && js_eq(by.s, "value");
        size_t n = v.d->n;
        struct jv *keys = jr_alloc(r, (n + 1) * sizeof(struct jv));
        for (size_t i = 0; i < n; i++)
            keys[i] = lower_for_cmp(r, by_value ? v.d->val[i] : v.d->key[i], cs);
        size_t *ord = sorted_order(r, keys, n, rev);
        struct jv l = jv_list_new(r, n);
        for (size_t i = 0; i < n; i++) {
            struct jv t = jv_list_new(r, 2);
            t.l->tuple = true;
            jv_list_push(r, t.l, v.d->key[ord[i]]);
            jv_list_push(r, t.l, v.d->val[ord[i]]);
            jv_list_push(r, l.l, t);
        }
        return l;
    }
    case F_SORT: {
        static const char *const kw[] = {"reverse", "case_sensitive", "attribute", NULL};
        check_kw(r, &a, kw);
        bool rev = jv_truthy(arg(r, &a, 0, "reverse", jv_bool(false)));
        bool cs = jv_truthy(arg(r, &a, 1, "case_sensitive", jv_bool(false)));
        struct jv at = arg(r, &a, 2, "attribute", jv_none());
        struct jv l = jv_iter_list(r, v);
        size_t n = l.l->n;
        struct jv *keys = jr_alloc(r, (n + 1) * sizeof(struct jv));
        for (size_t i = 0; i < n; i++)
            keys[i] =
                lower_for_cmp(r, at.k == JK_STR ? attr_path(r, l.l->v[i], at.s) : l.l->v[i], cs);
        size_t *ord = sorted_order(r, keys, n, rev);
        struct jv c = jv_list_new(r, n);
        for (size_t i = 0; i < n; i++)
            jv_list_push(r, c.l, l.l->v[ord[i]]);
        return c;
    }
    case F_UNIQUE: {
        bool cs = jv_truthy(arg(r, &a, 0, "case_sensitive", jv_bool(false)));
        struct jv at = arg(r, &a, 1, "attribute", jv_none());
        struct jv l = jv_iter_list(r, v);
        struct jv c = jv_list_new(r, l.l->n), seen = jv_list_new(r, l.l->n);
        c.l->gen = true;
        for (size_t i = 0; i < l.l->n; i++) {
            struct jv k =
                lower_for_cmp(r, at.k == JK_STR ? attr_path(r, l.l->v[i], at.s) : l.l->v[i], cs);
            bool dup = false;
            jr_charge(r, seen.l->n * 8);
            for (size_t j = 0; j < seen.l->n && !dup; j++)
                dup = jv_eq(seen.l->v[j], k);
            if (!dup) {
                jv_list_push(r, seen.l, k);
                jv_list_push(r, c.l, l.l->v[i]);
            }
        }
        return c;
    }
    case F_MIN:
    case F_MAX: {
        bool cs = jv_truthy(arg(r, &a, 0, "case_sensitive", jv_bool(false)));
        struct jv at = arg(r, &a, 1, "attribute", jv_none());
        struct jv l = jv_iter_list(r, v);
        if (!l.l->n)
            return jv_undef();
        size_t best = 0;
        struct jv bk =
            lower_for_cmp(r, at.k == JK_STR ? attr_path(r, l.l->v[0], at.s) : l.l->v[0], cs);
        for (size_t i = 1; i < l.l->n; i++) {
            struct jv k =
                lower_for_cmp(r, at.k == JK_STR ? attr_path(r, l.l->v[i], at.s) : l.l->v[i], cs);
            int c = jv_cmp(r, k, bk);
            if (fid == F_MIN ? c < 0 : c > 0) {
                best = i;
                bk = k;
            }
        }
        return l.l->v[best];
    }
    case F_SUM: {
        struct jv at = arg(r, &a, 0, "attribute", jv_none());
        struct jv total = arg(r, &a, 1, "start", jv_int(0));
        struct jv l = jv_iter_list(r, v);
        for (size_t i = 0; i < l.l->n; i++) {
            struct jv x = at.k == JK_STR ? attr_path(r, l.l->v[i], at.s) : l.l->v[i];
            if (!jv_is_num(x) || !jv_is_num(total))
                jr_fail(r, ERR_INVALID, "sum of a %s", jv_type_name(x));
            if (total.k == JK_FLOAT || x.k == JK_FLOAT)
                total = jv_float(jv_num(total) + jv_num(x));
            else
                total =
                    jv_int((total.k == JK_BOOL ? total.b : total.i) + (x.k == JK_BOOL ? x.b : x.i));
        }
        return total;
    }
    case F_JOIN: {
        struct jv sep = arg(r, &a, 0, "d", jv_strn("", 0));
        struct jv at = arg(r, &a, 1, "attribute", jv_none());
        struct jv l = jv_iter_list(r, v);
        struct jstr ss = jv_to_str(r, sep);
        struct jbuf b = {0};
        for (size_t i = 0; i < l.l->n; i++) {
            if (i)
                jb_puts(r, &b, ss);
            jv_str_into(r, &b, at.k == JK_STR ? attr_path(r, l.l->v[i], at.s) : l.l->v[i]);
        }
        return jv_strn(b.p ? b.p : "", b.n);
    }
    case F_MAP: {
        if (!jv_truthy(v)) { /* Jinja's do_map: `if value:`, in a generator */
            struct jv g = jv_list_new(r, 0);
            g.l->gen = true;
            return g;
        }
        struct jv l = jv_iter_list(r, v);
        struct jv c = jv_list_new(r, l.l->n);
        c.l->gen = true;
        struct jv at = arg(r, &a, 99, "attribute", jv_none());
        if (at.k == JK_STR) {
            struct jv def = arg(r, &a, 99, "default", jv_undef());
            for (size_t i = 0; i < l.l->n; i++) {
                struct jv x = attr_path(r, l.l->v[i], at.s);
                jv_list_push(r, c.l, x.k == JK_UNDEF ? def : x);
            }
            return c;
        }
        if (!nargs || args[0].k != JK_STR)
            jr_fail(r, ERR_INVALID, "map() needs a filter name or attribute=");
        int id = jinja_filter_id(args[0].s.p, args[0].s.n);
        if (id < 0)
            jr_fail(r, ERR_UNSUPPORTED, "filter \"%.*s\" is not supported", (int)args[0].s.n,
                    args[0].s.p);
        for (size_t i = 0; i < l.l->n; i++)
            jv_list_push(r, c.l, jfilter(r, f, id, l.l->v[i], args + 1, nargs - 1, kwn, kwv, nkw));
        return c;
    }
    case F_SELECT:
        return select_items(r, f, v, &a, false, true);
    case F_REJECT:
        return select_items(r, f, v, &a, false, false);
    case F_SELECTATTR:
        return select_items(r, f, v, &a, true, true);
    case F_REJECTATTR:
        return select_items(r, f, v, &a, true, false);
    case F_ATTR: {
        struct jv n = arg(r, &a, 0, "name", jv_undef());
        if (n.k != JK_STR)
            jr_fail(r, ERR_INVALID, "attr() needs a name");
        if (v.k == JK_DICT) /* an attribute only: a dict's methods, not its items */
            return jmethod(r, v, n.s);
        return jgetattr(r, v, n.s);
    }
    case F_INT: {
        struct jv def = arg(r, &a, 0, "default", jv_int(0));
        struct jv base = arg(r, &a, 1, "base", jv_int(10));
        return to_number(r, v, true, def, (int)int_arg(r, base, "base"));
    }
    case F_FLOAT:
        return to_number(r, v, false, arg(r, &a, 0, "default", jv_float(0)), 10);
    case F_ROUND: {
        long long prec = int_arg(r, arg(r, &a, 0, "precision", jv_int(0)), "precision");
        struct jv m = arg(r, &a, 1, "method", jv_strn("common", 6));
        if (!jv_is_num(v))
            jr_fail(r, ERR_INVALID, "round() of a %s", jv_type_name(v));
        double x = jv_num(v), p = pow(10, (double)prec);
        if (m.k == JK_STR && js_eq(m.s, "ceil"))
            return jv_float(ceil(x * p) / p);
        if (m.k == JK_STR && js_eq(m.s, "floor"))
            return jv_float(floor(x * p) / p);
        if (v.k == JK_INT || v.k == JK_BOOL) /* Python's round(int, n) is an int */
            return prec >= 0 ? jv_int(v.k == JK_BOOL ? v.b : v.i) : jv_float(nearbyint(x * p) / p);
        return jv_float(nearbyint(x * p) / p); /* Python's round: half to even */
    }
    case F_INDENT: {
        struct jv w = arg(r, &a, 0, "width", jv_int(4));
        bool first = jv_truthy(arg(r, &a, 1, "first", jv_bool(false)));
        bool blank = jv_truthy(arg(r, &a, 2, "blank", jv_bool(false)));
        struct jstr ind;
        if (w.k == JK_STR)
            ind = w.s;
        else {
            long long k = int_arg(r, w, "width");
            if (k < 0)
                k = 0;
            if (k > 1024)
                jr_fail(r, ERR_INVALID, "indent width over 1024 (limit)");
            char *s = jr_alloc(r, (size_t)k + 1);
            memset(s, ' ', (size_t)k);
            ind = (struct jstr){s, (size_t)k};
        }
        if (v.k != JK_STR) /* Jinja's indent does s += "\n" */
            jr_fail(r, ERR_INVALID, "unsupported operand type(s) for +=: '%s' and 'str'",
                    jv_type_name(v));
        return js_indent(r, v.s, ind, first, blank);
    }
    case F_WORDCOUNT:
        return jv_int(js_wordcount(jv_to_str(r, v)));
    case F_FORMAT: {
        struct jstr s = jv_to_str(r, v);
        struct jv l = jv_list_new(r, nargs);
        for (size_t i = 0; i < nargs; i++)
            jv_list_push(r, l.l, args[i]);
        l.l->tuple = true;
        return js_percent_format(r, s, l);
    }
    case F_TOJSON: {
        static const char *const kw[] = {"ensure_ascii", "indent", "separators", "sort_keys", NULL};
        check_kw(r, &a, kw);
        bool ascii = jv_truthy(arg(r, &a, 0, "ensure_ascii", jv_bool(false)));
        struct jv ind = arg(r, &a, 1, "indent", jv_none());
        struct jv seps = arg(r, &a, 2, "separators", jv_none());
        bool sort = jv_truthy(arg(r, &a, 3, "sort_keys", jv_bool(false)));
        const char *indent = NULL;
        if (ind.k == JK_STR) {
            indent = jv_str_copy(r, ind.s.p, ind.s.n).s.p;
        } else if (ind.k == JK_INT) {
            long long k = ind.i < 0 ? 0 : ind.i;
            if (k > 1024)
                jr_fail(r, ERR_INVALID, "tojson indent over 1024 (limit)");
            char *s = jr_alloc(r, (size_t)k + 1);
            memset(s, ' ', (size_t)k);
            indent = s;
        } else if (ind.k != JK_NONE) {
            jr_fail(r, ERR_INVALID, "tojson indent must be an integer or a string");
        }
        const char *item_sep = indent ? "," : ", ", *key_sep = ": ";
        if (seps.k == JK_LIST && seps.l->n == 2 && seps.l->v[0].k == JK_STR &&
            seps.l->v[1].k == JK_STR) {
            item_sep = jv_str_copy(r, seps.l->v[0].s.p, seps.l->v[0].s.n).s.p;
            key_sep = jv_str_copy(r, seps.l->v[1].s.p, seps.l->v[1].s.n).s.p;
        } else if (seps.k != JK_NONE) {
            jr_fail(r, ERR_INVALID, "tojson separators must be a pair of strings");
        }
        struct jbuf b = {0};
        jv_tojson(r, &b, v, indent, 0, item_sep, key_sep, sort);
        struct jv out = jv_strn(b.p ? b.p : "", b.n);
        return ascii ? js_ascii_escape(r, out.s) : out;
    }
    case F_CENTER: {
        struct jstr s = jv_to_str(r, v);
        struct jv m = jmethod(r, jv_strn(s.p, s.n), (struct jstr){"center", 6});
        struct jv w = arg(r, &a, 0, "width", jv_int(80));
        return jfunc_call(r, f, m.fn, &w, 1, NULL, NULL, 0);
    }
    case F_BATCH:
    case N_FILTERS:
        break;
    }
    jr_fail(r, ERR_UNSUPPORTED, "filter \"%s\" is not supported", filter_names[fid]);
}

bool jtest(struct render *r, struct frame *f, int tid, struct jv v, struct jv *args, size_t nargs)
{
    struct jv a0 = nargs ? args[0] : jv_undef();
    bool unary = tid != X_EQ && tid != X_NE && tid != X_LT && tid != X_LE && tid != X_GT &&
                 tid != X_GE && tid != X_DIVISIBLEBY && tid != X_IN && tid != X_SAMEAS;
    if (nargs > (unary ? 0u : 1u))
        jr_fail(r, ERR_INVALID, "a test given %zu argument(s), more than it takes", nargs);
    if (!unary && !nargs)
        jr_fail(r, ERR_INVALID, "a test needs an argument");
    switch ((enum test_id)tid) {
    case X_DEFINED:
        return v.k != JK_UNDEF;
    case X_UNDEFINED:
        return v.k == JK_UNDEF;
    case X_NONE:
        return v.k == JK_NONE;
    case X_STRING:
        return v.k == JK_STR;
    case X_MAPPING:
        return v.k == JK_DICT;
    case X_ITERABLE:
        return v.k == JK_STR || v.k == JK_LIST || v.k == JK_DICT || v.k == JK_UNDEF;
    case X_SEQUENCE:
        return v.k == JK_STR || (v.k == JK_LIST && !v.l->gen) || v.k == JK_DICT || v.k == JK_UNDEF;
    case X_NUMBER:
        return v.k == JK_INT || v.k == JK_FLOAT || v.k == JK_BOOL;
    case X_INTEGER:
        return v.k == JK_INT;
    case X_FLOATT:
        return v.k == JK_FLOAT;
    case X_BOOLEAN:
        return v.k == JK_BOOL;
    case X_TRUE:
        return v.k == JK_BOOL && v.b;
    case X_FALSE:
        return v.k == JK_BOOL && !v.b;
    case X_EQ:
        return jv_eq(v, a0);
    case X_NE:
        return !jv_eq(v, a0);
    case X_LT:
        return jv_cmp(r, v, a0) < 0;
    case X_LE:
        return jv_cmp(r, v, a0) <= 0;
    case X_GT:
        return jv_cmp(r, v, a0) > 0;
    case X_GE:
        return jv_cmp(r, v, a0) >= 0;
    case X_ODD:
    case X_EVEN:
    case X_DIVISIBLEBY: {
        if (v.k != JK_INT && v.k != JK_BOOL)
            jr_fail(r, ERR_INVALID, "test of a %s for odd/even/divisibleby", jv_type_name(v));
        long long x = v.k == JK_BOOL ? v.b : v.i;
        if (tid == X_ODD)
            return x % 2 != 0;
        if (tid == X_EVEN)
            return x % 2 == 0;
        long long d = int_arg(r, a0, "divisibleby's argument");
        if (d == 0)
            jr_fail(r, ERR_INVALID, "integer division or modulo by zero");
        return d == -1 || x % d == 0;
    }
    case X_IN: {
        struct jv l = jv_iter_list(r, a0);
        if (a0.k == JK_STR) {
            if (v.k != JK_STR)
                jr_fail(r, ERR_INVALID, "'in <string>' requires string as left operand");
            jr_charge(r, a0.s.n);
            return js_search(a0.s, 0, v.s) >= 0;
        }
        for (size_t i = 0; i < l.l->n; i++)
            if (jv_eq(l.l->v[i], v))
                return true;
        return false;
    }
    case X_CALLABLE:
        return v.k == JK_MACRO || v.k == JK_FUNC;
    case X_LOWER:
        return v.k == JK_STR && js_is_case(v.s, false);
    case X_UPPER:
        return v.k == JK_STR && js_is_case(v.s, true);
    case X_SAMEAS:
        if (v.k != a0.k)
            return false;
        return jv_eq(v, a0) &&
               (v.k == JK_NONE || v.k == JK_BOOL || v.k == JK_INT || v.k == JK_UNDEF ||
                (v.k == JK_LIST && v.l == a0.l) || (v.k == JK_DICT && v.d == a0.d) ||
                (v.k == JK_STR && v.s.p == a0.s.p));
    case X_ESCAPED:
        return v.k == JK_STR && v.safe;
    case N_TESTS:
        break;
    }
    jr_fail(r, ERR_UNSUPPORTED, "this test is not supported");
}
