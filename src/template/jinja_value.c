/* Values of the Jinja engine: the arena they live in, Python truthiness,
 * equality and ordering, str() / repr() as Python prints them, and
 * json.dumps as transformers' tojson calls it. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "template/jinja_impl.h"

/* ---- arena ---- */
struct arena_chunk {
    struct arena_chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

#define CHUNK_MIN ((size_t)64 << 10)

void *ja_alloc(struct jarena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (n == 0)
        n = 16;
    struct arena_chunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > CHUNK_MIN ? n : CHUNK_MIN;
        if (a->limit && a->used + cap + sizeof(*c) > a->limit)
            return NULL;
        c = malloc(sizeof(*c) + cap);
        if (!c)
            return NULL;
        c->used = 0;
        c->cap = cap;
        a->used += cap + sizeof(*c);
        /* a big block gets a chunk of its own behind the current one */
        if (a->head && cap > CHUNK_MIN) {
            c->next = a->head->next;
            a->head->next = c;
        } else {
            c->next = a->head;
            a->head = c;
        }
    }
    void *p = c->data + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

void ja_free_all(struct jarena *a)
{
    struct arena_chunk *c = a->head;
    while (c) {
        struct arena_chunk *n = c->next;
        free(c);
        c = n;
    }
    a->head = NULL;
    a->used = 0;
}

void *jr_alloc(struct render *r, size_t n)
{
    void *p = ja_alloc(&r->arena, n);
    if (!p)
        jr_fail(r, ERR_INVALID, "the render needs more than %zu bytes of memory (limit)",
                r->arena.limit);
    return p;
}

/* ---- construction ---- */
struct jv jv_str_copy(struct render *r, const char *p, size_t n)
{
    char *s = jr_alloc(r, n + 1);
    if (n)
        memcpy(s, p, n);
    return jv_strn(s, n);
}

struct jv jv_list_new(struct render *r, size_t cap)
{
    struct jv v = {.k = JK_LIST};
    v.l = jr_alloc(r, sizeof(*v.l));
    if (cap) {
        v.l->v = jr_alloc(r, cap * sizeof(struct jv));
        v.l->cap = cap;
    }
    return v;
}

struct jv jv_dict_new(struct render *r)
{
    struct jv v = {.k = JK_DICT};
    v.d = jr_alloc(r, sizeof(*v.d));
    return v;
}

void jv_list_push(struct render *r, struct jlist *l, struct jv v)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        struct jv *nv = jr_alloc(r, cap * sizeof(*nv));
        if (l->n)
            memcpy(nv, l->v, l->n * sizeof(*nv));
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = v;
}

struct jv *jv_dict_get(const struct jdict *d, struct jv k)
{
    for (size_t i = 0; i < d->n; i++)
        if (jv_eq(d->key[i], k))
            return &d->val[i];
    return NULL;
}

struct jv *jv_dict_gets(const struct jdict *d, const char *k, size_t n)
{
    for (size_t i = 0; i < d->n; i++)
        if (d->key[i].k == JK_STR && d->key[i].s.n == n && memcmp(d->key[i].s.p, k, n) == 0)
            return &d->val[i];
    return NULL;
}

/* Appends k: v, k not yet in d. */
static void dict_push(struct render *r, struct jdict *d, struct jv k, struct jv v)
{
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        struct jv *nk = jr_alloc(r, cap * sizeof(*nk)), *nv = jr_alloc(r, cap * sizeof(*nv));
        if (d->n) {
            memcpy(nk, d->key, d->n * sizeof(*nk));
            memcpy(nv, d->val, d->n * sizeof(*nv));
        }
        d->key = nk;
        d->val = nv;
        d->cap = cap;
    }
    d->key[d->n] = k;
    d->val[d->n++] = v;
}

void jv_dict_set(struct render *r, struct jdict *d, struct jv k, struct jv v)
{
    jr_charge(r, d->n * 8); /* the lookup is linear */
    struct jv *e = jv_dict_get(d, k);
    if (e) {
        *e = v;
        return;
    }
    dict_push(r, d, k, v);
}

struct jv jv_from_json(struct render *r, const json_t *j)
{
    if (++r->steps > r->max_steps)
        jr_fail(r, ERR_INVALID, "more than %lld evaluation steps (limit)", r->max_steps);
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        struct jv d = jv_dict_new(r);
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)j, k, v) /* keys are unique already */
            dict_push(r, d.d, jv_str_copy(r, k, strlen(k)), jv_from_json(r, v));
        return d;
    }
    case JSON_ARRAY: {
        struct jv l = jv_list_new(r, json_array_size(j));
        size_t i;
        json_t *v;
        json_array_foreach(j, i, v) jv_list_push(r, l.l, jv_from_json(r, v));
        return l;
    }
    case JSON_STRING:
        return jv_str_copy(r, json_string_value(j), json_string_length(j));
    case JSON_INTEGER:
        return jv_int(json_integer_value(j));
    case JSON_REAL:
        return jv_float(json_real_value(j));
    case JSON_TRUE:
        return jv_bool(true);
    case JSON_FALSE:
        return jv_bool(false);
    case JSON_NULL:
        return jv_none();
    }
    return jv_none();
}

/* ---- truth, equality, order ---- */
bool jv_truthy(struct jv v)
{
    switch (v.k) {
    case JK_UNDEF:
    case JK_NONE:
        return false;
    case JK_BOOL:
        return v.b;
    case JK_INT:
        return v.i != 0;
    case JK_FLOAT:
        return v.f != 0;
    case JK_STR:
        return v.s.n != 0;
    case JK_LIST:
        return v.l->gen || v.l->n != 0;
    case JK_DICT:
        return v.d->n != 0;
    default:
        return true;
    }
}

bool jv_is_num(struct jv v)
{
    return v.k == JK_INT || v.k == JK_FLOAT || v.k == JK_BOOL;
}

double jv_num(struct jv v)
{
    return v.k == JK_FLOAT ? v.f : v.k == JK_INT ? (double)v.i : v.k == JK_BOOL ? v.b : 0;
}

/* Values nested deeper than this are compared unequal and refused by repr
 * and ordering: their recursion must not exhaust the C stack. */
#define MAX_VALUE_DEPTH 200

static bool eq_depth(struct jv a, struct jv b, int depth);

bool jv_eq(struct jv a, struct jv b)
{
    return eq_depth(a, b, 0);
}

static bool eq_depth(struct jv a, struct jv b, int depth)
{
    if (depth > MAX_VALUE_DEPTH)
        return false;
    if (jv_is_num(a) && jv_is_num(b)) {
        if (a.k != JK_FLOAT && b.k != JK_FLOAT)
            return (a.k == JK_BOOL ? a.b : a.i) == (b.k == JK_BOOL ? b.b : b.i);
        return jv_num(a) == jv_num(b);
    }
    if (a.k != b.k)
        return false;
    switch (a.k) {
    case JK_UNDEF:
    case JK_NONE:
        return true;
    case JK_STR:
        return a.s.n == b.s.n && (a.s.n == 0 || memcmp(a.s.p, b.s.p, a.s.n) == 0);
    case JK_LIST:
        if (a.l->gen || b.l->gen)
            return a.l == b.l;
        if (a.l->tuple != b.l->tuple || a.l->n != b.l->n)
            return false;
        for (size_t i = 0; i < a.l->n; i++)
            if (!eq_depth(a.l->v[i], b.l->v[i], depth + 1))
                return false;
        return true;
    case JK_DICT:
        if (a.d->n != b.d->n)
            return false;
        for (size_t i = 0; i < a.d->n; i++) {
            struct jv *o = jv_dict_get(b.d, a.d->key[i]);
            if (!o || !eq_depth(a.d->val[i], *o, depth + 1))
                return false;
        }
        return true;
    case JK_NS:
        return a.d == b.d;
    case JK_MACRO:
        return a.m == b.m;
    case JK_FUNC:
        return a.fn == b.fn;
    case JK_LOOP:
        return a.loop == b.loop;
    default:
        return false;
    }
}

const char *jv_type_name(struct jv v)
{
    static const char *const names[] = {
        [JK_UNDEF] = "Undefined", [JK_NONE] = "NoneType", [JK_BOOL] = "bool",
        [JK_INT] = "int",         [JK_FLOAT] = "float",   [JK_STR] = "str",
        [JK_LIST] = "list",       [JK_DICT] = "dict",     [JK_NS] = "Namespace",
        [JK_MACRO] = "Macro",     [JK_FUNC] = "function", [JK_LOOP] = "LoopContext",
    };
    if (v.k == JK_LIST && v.l->tuple)
        return "tuple";
    if (v.k == JK_LIST && v.l->gen)
        return "generator";
    return names[v.k];
}

static int cmp_depth(struct render *r, struct jv a, struct jv b, int depth);

int jv_cmp(struct render *r, struct jv a, struct jv b)
{
    return cmp_depth(r, a, b, 0);
}

static int cmp_depth(struct render *r, struct jv a, struct jv b, int depth)
{
    if (depth > MAX_VALUE_DEPTH)
        jr_fail(r, ERR_INVALID, "comparison of values nested deeper than %d (limit)",
                MAX_VALUE_DEPTH);
    if (jv_is_num(a) && jv_is_num(b)) {
        if (a.k != JK_FLOAT && b.k != JK_FLOAT) {
            long long x = a.k == JK_BOOL ? a.b : a.i, y = b.k == JK_BOOL ? b.b : b.i;
            return (x > y) - (x < y);
        }
        double x = jv_num(a), y = jv_num(b);
        return (x > y) - (x < y);
    }
    if (a.k == JK_STR && b.k == JK_STR) {
        size_t n = a.s.n < b.s.n ? a.s.n : b.s.n;
        int c = n ? memcmp(a.s.p, b.s.p, n) : 0;
        if (c)
            return c;
        return (a.s.n > b.s.n) - (a.s.n < b.s.n);
    }
    if (a.k == JK_LIST && b.k == JK_LIST) {
        size_t n = a.l->n < b.l->n ? a.l->n : b.l->n;
        for (size_t i = 0; i < n; i++) {
            if (jv_eq(a.l->v[i], b.l->v[i]))
                continue;
            return cmp_depth(r, a.l->v[i], b.l->v[i], depth + 1);
        }
        return (a.l->n > b.l->n) - (a.l->n < b.l->n);
    }
    jr_fail(r, ERR_INVALID, "'<' not supported between instances of '%s' and '%s'", jv_type_name(a),
            jv_type_name(b));
}

/* ---- buffers ---- */
void jb_put(struct render *r, struct jbuf *b, const char *p, size_t n)
{
    if (!n)
        return;
    if (b->n + n > r->max_output)
        jr_fail(r, ERR_INVALID, "output longer than %zu bytes (limit)", r->max_output);
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *np = jr_alloc(r, cap);
        if (b->n)
            memcpy(np, b->p, b->n);
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
    b->p[b->n] = 0;
}

void jb_printf(struct render *r, struct jbuf *b, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (k > 0)
        jb_put(r, b, tmp, (size_t)k < sizeof(tmp) ? (size_t)k : sizeof(tmp) - 1);
}

/* ---- str / repr ---- */
/* Python's repr(float): the shortest digits that read back the same, in
 * fixed notation for exponents -4..15, else d.ddde+XX. */
void jv_float_repr(double f, char *out, size_t cap)
{
    if (isnan(f)) {
        snprintf(out, cap, "nan");
        return;
    }
    if (isinf(f)) {
        snprintf(out, cap, f < 0 ? "-inf" : "inf");
        return;
    }
    char e[40];
    int prec;
    for (prec = 0; prec < 17; prec++) {
        snprintf(e, sizeof(e), "%.*e", prec, f);
        if (strtod(e, NULL) == f)
            break;
    }
    /* e: [-]d[.ddd]e[+-]XX */
    char digits[24];
    int nd = 0, neg = e[0] == '-';
    const char *p = e + neg;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9')
            digits[nd++] = *p;
    int exp = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    digits[nd] = 0;
    char *o = out;
    size_t left = cap;
#define PUT(...)                                                                                   \
    do {                                                                                           \
        int w_ = snprintf(o, left, __VA_ARGS__);                                                   \
        if (w_ > 0 && (size_t)w_ < left) {                                                         \
            o += w_;                                                                               \
            left -= (size_t)w_;                                                                    \
        }                                                                                          \
    } while (0)
    if (neg)
        PUT("-");
    if (exp >= -4 && exp < 16) {
        if (exp < 0) {
            PUT("0.");
            for (int i = 0; i < -exp - 1; i++)
                PUT("0");
            PUT("%s", digits);
        } else {
            for (int i = 0; i <= exp; i++)
                PUT("%c", i < nd ? digits[i] : '0');
            PUT(".");
            if (nd > exp + 1)
                PUT("%s", digits + exp + 1);
            else
                PUT("0");
        }
    } else {
        PUT("%c", digits[0]);
        if (nd > 1)
            PUT(".%s", digits + 1);
        PUT("e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
#undef PUT
}

/* Decodes one UTF-8 code point at s[*i] (advancing *i); invalid bytes are
 * taken as themselves. */
static unsigned long utf8_next(const char *s, size_t n, size_t *i)
{
    unsigned char c = (unsigned char)s[*i];
    int k = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
    if (k == 0 || *i + (size_t)k >= n) {
        (*i)++;
        return c;
    }
    unsigned long cp = c & (0x3F >> k);
    for (int j = 1; j <= k; j++) {
        unsigned char d = (unsigned char)s[*i + (size_t)j];
        if ((d & 0xC0) != 0x80) {
            (*i)++;
            return c;
        }
        cp = (cp << 6) | (d & 0x3F);
    }
    *i += (size_t)k + 1;
    return cp;
}

static void repr_str(struct render *r, struct jbuf *b, struct jstr s)
{
    bool has_sq = memchr(s.p, '\'', s.n) != NULL, has_dq = memchr(s.p, '"', s.n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    jb_put(r, b, &q, 1);
    size_t run = 0;
    for (size_t i = 0; i < s.n; i++) {
        unsigned char c = (unsigned char)s.p[i];
        const char *esc = NULL;
        char tmp[8];
        if (c == '\\')
            esc = "\\\\";
        else if (c == (unsigned char)q)
            esc = q == '\'' ? "\\'" : "\\\"";
        else if (c == '\n')
            esc = "\\n";
        else if (c == '\r')
            esc = "\\r";
        else if (c == '\t')
            esc = "\\t";
        else if (c < 0x20 || c == 0x7F) {
            snprintf(tmp, sizeof(tmp), "\\x%02x", c);
            esc = tmp;
        }
        if (esc) {
            jb_put(r, b, s.p + run, i - run);
            jb_put(r, b, esc, strlen(esc));
            run = i + 1;
        }
    }
    jb_put(r, b, s.p + run, s.n - run);
    jb_put(r, b, &q, 1);
}

static void repr_depth(struct render *r, struct jbuf *b, struct jv v, int depth);

void jv_repr_into(struct render *r, struct jbuf *b, struct jv v)
{
    repr_depth(r, b, v, 0);
}

/* "k: v, k: v" of a dict or a namespace, as Python's repr writes them. */
static void repr_items(struct render *r, struct jbuf *b, struct jv v, int depth)
{
    for (size_t i = 0; i < v.d->n; i++) {
        if (i)
            jb_put(r, b, ", ", 2);
        repr_depth(r, b, v.d->key[i], depth + 1);
        jb_put(r, b, ": ", 2);
        repr_depth(r, b, v.d->val[i], depth + 1);
    }
}

static void repr_depth(struct render *r, struct jbuf *b, struct jv v, int depth)
{
    if (depth > MAX_VALUE_DEPTH)
        jr_fail(r, ERR_INVALID, "printing a value nested deeper than %d (limit)", MAX_VALUE_DEPTH);
    if (++r->steps > r->max_steps)
        jr_fail(r, ERR_INVALID, "more than %lld evaluation steps (limit)", r->max_steps);
    switch (v.k) {
    case JK_STR:
        repr_str(r, b, v.s);
        return;
    case JK_UNDEF:
        jb_put(r, b, "Undefined", 9);
        return;
    case JK_LIST:
        if (v.l->gen) {
            jb_put(r, b, "<generator object>", 18);
            return;
        }
        jb_put(r, b, v.l->tuple ? "(" : "[", 1);
        for (size_t i = 0; i < v.l->n; i++) {
            if (i)
                jb_put(r, b, ", ", 2);
            repr_depth(r, b, v.l->v[i], depth + 1);
        }
        if (v.l->tuple && v.l->n == 1)
            jb_put(r, b, ",", 1);
        jb_put(r, b, v.l->tuple ? ")" : "]", 1);
        return;
    case JK_DICT:
        jb_put(r, b, "{", 1);
        repr_items(r, b, v, depth);
        jb_put(r, b, "}", 1);
        return;
    case JK_NS:
        jb_put(r, b, "<Namespace {", 12);
        repr_items(r, b, v, depth);
        jb_put(r, b, "}>", 2);
        return;
    default:
        jv_str_into(r, b, v);
    }
}

void jv_str_into(struct render *r, struct jbuf *b, struct jv v)
{
    char tmp[64];
    switch (v.k) {
    case JK_UNDEF:
        return;
    case JK_NONE:
        jb_put(r, b, "None", 4);
        return;
    case JK_BOOL:
        jb_put(r, b, v.b ? "True" : "False", v.b ? 4 : 5);
        return;
    case JK_INT:
        jb_printf(r, b, "%lld", v.i);
        return;
    case JK_FLOAT:
        jv_float_repr(v.f, tmp, sizeof(tmp));
        jb_put(r, b, tmp, strlen(tmp));
        return;
    case JK_STR:
        jb_puts(r, b, v.s);
        return;
    case JK_MACRO:
        jb_printf(r, b, "<Macro '%.*s'>", (int)v.m->def->v.s.n, v.m->def->v.s.p);
        return;
    case JK_FUNC:
        jb_put(r, b, "<built-in function>", 19);
        return;
    case JK_LOOP:
        jb_put(r, b, "<LoopContext>", 13);
        return;
    default:
        jv_repr_into(r, b, v);
    }
}

struct jstr jv_to_str(struct render *r, struct jv v)
{
    if (v.k == JK_STR)
        return v.s;
    struct jbuf b = {0};
    jv_str_into(r, &b, v);
    struct jstr s = {b.p ? b.p : "", b.n};
    return s;
}

/* ---- json.dumps ---- */
static void json_str(struct render *r, struct jbuf *b, struct jstr s)
{
    jb_put(r, b, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < s.n; i++) {
        unsigned char c = (unsigned char)s.p[i];
        char tmp[8];
        const char *esc = NULL;
        switch (c) {
        case '"':
            esc = "\\\"";
            break;
        case '\\':
            esc = "\\\\";
            break;
        case '\n':
            esc = "\\n";
            break;
        case '\r':
            esc = "\\r";
            break;
        case '\t':
            esc = "\\t";
            break;
        case '\b':
            esc = "\\b";
            break;
        case '\f':
            esc = "\\f";
            break;
        default:
            if (c < 0x20) {
                snprintf(tmp, sizeof(tmp), "\\u%04x", c);
                esc = tmp;
            }
        }
        if (esc) {
            jb_put(r, b, s.p + run, i - run);
            jb_put(r, b, esc, strlen(esc));
            run = i + 1;
        }
    }
    jb_put(r, b, s.p + run, s.n - run);
    jb_put(r, b, "\"", 1);
}

static void json_newline(struct render *r, struct jbuf *b, const char *indent, int level)
{
    jb_put(r, b, "\n", 1);
    size_t k = strlen(indent);
    for (int i = 0; i < level; i++)
        jb_put(r, b, indent, k);
}

static void json_scalar(struct render *r, struct jbuf *b, struct jv v, bool as_key)
{
    char tmp[64];
    switch (v.k) {
    case JK_NONE:
        jb_put(r, b, "null", 4);
        return;
    case JK_BOOL:
        jb_put(r, b, v.b ? "true" : "false", v.b ? 4 : 5);
        return;
    case JK_INT:
        jb_printf(r, b, "%lld", v.i);
        return;
    case JK_FLOAT:
        if (isnan(v.f))
            snprintf(tmp, sizeof(tmp), "NaN");
        else if (isinf(v.f))
            snprintf(tmp, sizeof(tmp), v.f < 0 ? "-Infinity" : "Infinity");
        else
            jv_float_repr(v.f, tmp, sizeof(tmp));
        jb_put(r, b, tmp, strlen(tmp));
        return;
    case JK_STR:
        json_str(r, b, v.s);
        return;
    default:
        jr_fail(r, ERR_INVALID, "%s of type %s is not JSON serializable",
                as_key ? "keys" : "Object", jv_type_name(v));
    }
}

void jv_tojson(struct render *r, struct jbuf *b, struct jv v, const char *indent, int level,
               const char *item_sep, const char *key_sep, bool sort_keys)
{
    if (++r->steps > r->max_steps)
        jr_fail(r, ERR_INVALID, "more than %lld evaluation steps (limit)", r->max_steps);
    if (level > 200)
        jr_fail(r, ERR_INVALID, "tojson of a value nested deeper than 200 (limit)");
    size_t isl = strlen(item_sep), ksl = strlen(key_sep);
    if (v.k == JK_LIST && v.l->gen)
        jr_fail(r, ERR_INVALID, "Object of type generator is not JSON serializable");
    if (v.k == JK_LIST) {
        if (!v.l->n) {
            jb_put(r, b, "[]", 2);
            return;
        }
        jb_put(r, b, "[", 1);
        for (size_t i = 0; i < v.l->n; i++) {
            if (i)
                jb_put(r, b, item_sep, isl);
            if (indent)
                json_newline(r, b, indent, level + 1);
            jv_tojson(r, b, v.l->v[i], indent, level + 1, item_sep, key_sep, sort_keys);
        }
        if (indent)
            json_newline(r, b, indent, level);
        jb_put(r, b, "]", 1);
        return;
    }
    if (v.k == JK_DICT) {
        if (!v.d->n) {
            jb_put(r, b, "{}", 2);
            return;
        }
        size_t n = v.d->n;
        size_t *order = jr_alloc(r, n * sizeof(size_t));
        for (size_t i = 0; i < n; i++)
            order[i] = i;
        if (sort_keys) /* insertion sort: stable, and dicts are small */
            for (size_t i = 1; i < n; i++)
                for (size_t j = i;
                     j > 0 && jv_cmp(r, v.d->key[order[j - 1]], v.d->key[order[j]]) > 0; j--) {
                    size_t t = order[j];
                    order[j] = order[j - 1];
                    order[j - 1] = t;
                }
        jb_put(r, b, "{", 1);
        for (size_t i = 0; i < n; i++) {
            struct jv k = v.d->key[order[i]];
            if (i)
                jb_put(r, b, item_sep, isl);
            if (indent)
                json_newline(r, b, indent, level + 1);
            if (k.k == JK_STR) {
                json_str(r, b, k.s);
            } else {
                jb_put(r, b, "\"", 1);
                json_scalar(r, b, k, true);
                jb_put(r, b, "\"", 1);
            }
            jb_put(r, b, key_sep, ksl);
            jv_tojson(r, b, v.d->val[order[i]], indent, level + 1, item_sep, key_sep, sort_keys);
        }
        if (indent)
            json_newline(r, b, indent, level);
        jb_put(r, b, "}", 1);
        return;
    }
    json_scalar(r, b, v, false);
}

/* ---- UTF-8 ---- */
size_t ju_len(struct jstr s)
{
    size_t n = 0;
    for (size_t i = 0; i < s.n;) {
        utf8_next(s.p, s.n, &i);
        n++;
    }
    return n;
}

size_t ju_offset(struct jstr s, size_t cp)
{
    size_t i = 0;
    while (cp-- && i < s.n)
        utf8_next(s.p, s.n, &i);
    return i;
}

struct jv jv_iter_list(struct render *r, struct jv v)
{
    switch (v.k) {
    case JK_LIST:
        return v;
    case JK_UNDEF:
        return jv_list_new(r, 0);
    case JK_DICT:
    case JK_NS: {
        struct jv l = jv_list_new(r, v.d->n);
        for (size_t i = 0; i < v.d->n; i++)
            jv_list_push(r, l.l, v.d->key[i]);
        return l;
    }
    case JK_STR: {
        struct jv l = jv_list_new(r, v.s.n);
        for (size_t i = 0; i < v.s.n;) {
            size_t b = i;
            utf8_next(v.s.p, v.s.n, &i);
            jv_list_push(r, l.l, jv_strn(v.s.p + b, i - b));
        }
        return l;
    }
    default:
        jr_fail(r, ERR_INVALID, "'%s' object is not iterable", jv_type_name(v));
    }
}
