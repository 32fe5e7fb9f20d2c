/* The Jinja evaluator: statements write into a buffer, expressions give
 * values, with Jinja2's scoping (a for loop's body is a fresh scope each
 * iteration; a macro's body sees its arguments, then the scope it was
 * defined in as it is at call time, then the globals) and Python's operator
 * semantics. A failure longjmps to jinja_render, which frees the arena. */
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "template/jinja_impl.h"
#include "template/jinja_str.h"

_Noreturn void jr_fail(struct render *r, int code, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (code == JINJA_RAISED)
        r->err = err_set(code, "%s", msg);
    else
        r->err = err_set(code, "%s line %d: %s", r->t->name, r->line, msg);
    longjmp(r->fail, 1);
}

void jr_charge(struct render *r, size_t bytes)
{
    r->steps += (long long)(bytes / 64);
    if (r->steps > r->max_steps)
        jr_fail(r, ERR_INVALID, "more than %lld evaluation steps (limit)", r->max_steps);
}

long long js_search(struct jstr hay, size_t from, struct jstr needle)
{
    if (from > hay.n || needle.n > hay.n - from)
        return -1;
    if (!needle.n)
        return (long long)from;
    const char *p = memmem(hay.p + from, hay.n - from, needle.p, needle.n);
    return p ? (long long)(p - hay.p) : -1;
}

static void step(struct render *r, int line)
{
    r->line = line;
    if (++r->steps > r->max_steps)
        jr_fail(r, ERR_INVALID, "more than %lld evaluation steps (limit)", r->max_steps);
}

/* ---- names ---- */
static struct jv lookup(struct render *r, struct frame *f, struct jstr name)
{
    for (; f; f = f->parent) {
        struct jv *v = jv_dict_gets(&f->vars, name.p, name.n);
        if (v)
            return *v;
    }
    struct jv *g = jv_dict_gets(&r->globals, name.p, name.n);
    if (g)
        return *g;
    struct jv u = {.k = JK_UNDEF, .s = name};
    return u;
}

static void assign(struct render *r, struct frame *f, const struct node *target, struct jv v)
{
    if (target->t == E_NAME) {
        jv_dict_set(r, &f->vars, target->v, v);
        return;
    }
    if (target->t == E_ATTR) {
        struct jv ns = jeval(r, f, target->a);
        if (ns.k != JK_NS)
            jr_fail(r, ERR_INVALID, "cannot assign attribute on non-namespace object");
        if (target->v.s.n && target->v.s.p[0] == '_')
            jr_fail(r, ERR_INVALID, "cannot store underscore-prefixed attributes on a namespace");
        jv_dict_set(r, ns.d, target->v, v);
        return;
    }
    /* a, b = v */
    struct jv l = jv_iter_list(r, v);
    if (l.l->n != target->args.n)
        jr_fail(r, ERR_INVALID, "cannot unpack %zu values into %zu names", l.l->n, target->args.n);
    for (size_t i = 0; i < l.l->n; i++)
        assign(r, f, target->args.v[i], l.l->v[i]);
}

/* ---- attributes and items ---- */
_Noreturn void jr_undefined(struct render *r, struct jv u)
{
    if (u.s.p)
        jr_fail(r, ERR_INVALID, "'%.*s' is undefined", (int)(u.s.n > 60 ? 60 : u.s.n), u.s.p);
    jr_fail(r, ERR_INVALID, "use of an undefined value");
}

static struct jv undef_named(struct jstr name)
{
    struct jv u = {.k = JK_UNDEF, .s = name};
    return u;
}

static struct jv loop_attr(struct render *r, struct jloop *L, struct jstr name)
{
    if (js_eq(name, "index0"))
        return jv_int(L->index0);
    if (js_eq(name, "index"))
        return jv_int(L->index0 + 1);
    if (js_eq(name, "first"))
        return jv_bool(L->index0 == 0);
    if (js_eq(name, "last"))
        return jv_bool(L->index0 == L->length - 1);
    if (js_eq(name, "length"))
        return jv_int(L->length);
    if (js_eq(name, "revindex"))
        return jv_int(L->length - L->index0);
    if (js_eq(name, "revindex0"))
        return jv_int(L->length - L->index0 - 1);
    if (js_eq(name, "previtem"))
        return L->has_prev ? L->prev : undef_named(name);
    if (js_eq(name, "nextitem"))
        return L->has_next ? L->next : undef_named(name);
    if (js_eq(name, "depth"))
        return jv_int(1);
    if (js_eq(name, "depth0"))
        return jv_int(0);
    if (js_eq(name, "cycle")) {
        struct jv l = {.k = JK_LOOP, .loop = L};
        return jloop_cycle(r, l);
    }
    return undef_named(name);
}

struct jv jgetattr(struct render *r, struct jv obj, struct jstr name)
{
    switch (obj.k) {
    case JK_UNDEF:
        jr_undefined(r, obj);
    case JK_DICT: {
        struct jv m = jmethod(r, obj, name);
        if (m.k != JK_UNDEF)
            return m;
        jr_charge(r, obj.d->n * 8); /* the lookup is linear */
        struct jv *v = jv_dict_gets(obj.d, name.p, name.n);
        return v ? *v : undef_named(name);
    }
    case JK_NS: {
        struct jv *v = jv_dict_gets(obj.d, name.p, name.n);
        return v ? *v : undef_named(name);
    }
    case JK_LOOP:
        return loop_attr(r, obj.loop, name);
    case JK_STR:
    case JK_LIST: {
        struct jv m = jmethod(r, obj, name);
        return m.k != JK_UNDEF ? m : undef_named(name);
    }
    default:
        return undef_named(name);
    }
}

static bool index_of(struct render *r, struct jv key, size_t n, size_t *out)
{
    if (key.k != JK_INT && key.k != JK_BOOL)
        return false;
    long long i = key.k == JK_BOOL ? key.b : key.i;
    if (i < 0)
        i += (long long)n;
    if (i < 0 || (unsigned long long)i >= n)
        return false;
    *out = (size_t)i;
    return true;
}

struct jv jgetitem(struct render *r, struct jv obj, struct jv key)
{
    size_t i;
    switch (obj.k) {
    case JK_UNDEF:
        jr_undefined(r, obj);
    case JK_DICT: {
        jr_charge(r, obj.d->n * 8);
        struct jv *v = jv_dict_get(obj.d, key);
        if (v)
            return *v;
        if (key.k == JK_STR)
            return jgetattr(r, obj, key.s);
        return undef_named((struct jstr){NULL, 0});
    }
    case JK_LIST:
        if (obj.l->gen) /* Jinja's getitem: a TypeError gives Undefined */
            return undef_named((struct jstr){NULL, 0});
        if (index_of(r, key, obj.l->n, &i))
            return obj.l->v[i];
        if (key.k == JK_STR)
            return jgetattr(r, obj, key.s);
        return undef_named((struct jstr){NULL, 0});
    case JK_STR:
        if (key.k == JK_INT || key.k == JK_BOOL) {
            size_t n = ju_len(obj.s);
            if (index_of(r, key, n, &i)) {
                size_t b = ju_offset(obj.s, i), e = ju_offset(obj.s, i + 1);
                return jv_strn(obj.s.p + b, e - b);
            }
            return undef_named((struct jstr){NULL, 0});
        }
        if (key.k == JK_STR)
            return jgetattr(r, obj, key.s);
        return undef_named((struct jstr){NULL, 0});
    case JK_NS:
    case JK_LOOP:
        if (key.k == JK_STR)
            return jgetattr(r, obj, key.s);
        return undef_named((struct jstr){NULL, 0});
    default:
        return undef_named((struct jstr){NULL, 0});
    }
}

static long long slice_arg(struct render *r, struct jv v, bool *given)
{
    *given = false;
    if (v.k == JK_NONE || v.k == JK_UNDEF)
        return 0;
    if (v.k != JK_INT && v.k != JK_BOOL)
        jr_fail(r, ERR_INVALID, "slice indices must be integers or None");
    *given = true;
    return v.k == JK_BOOL ? v.b : v.i;
}

/* Python's slice: the indices of obj[b:e:s] over n elements, into idx. */
/* Python's slice over n elements: obj[b:e:s] is the *count elements at
 * *start, *start + *step, ... (no overflow: the count is computed, not
 * stepped to). */
static size_t slice_range(struct render *r, long long n, struct jv bv, struct jv ev, struct jv sv,
                          long long *start, long long *step)
{
    bool gb, ge, gs;
    long long b = slice_arg(r, bv, &gb), e = slice_arg(r, ev, &ge), s = slice_arg(r, sv, &gs);
    if (!gs)
        s = 1;
    if (s == 0)
        jr_fail(r, ERR_INVALID, "slice step cannot be zero");
    if (!gb)
        b = s > 0 ? 0 : n - 1;
    else {
        if (b < 0)
            b = b < -n ? -1 : b + n;
        if (b < 0)
            b = s > 0 ? 0 : -1;
        if (b >= n)
            b = s > 0 ? n : n - 1;
    }
    if (!ge)
        e = s > 0 ? n : -1;
    else {
        if (e < 0)
            e = e < -n ? -1 : e + n;
        if (e < 0)
            e = s > 0 ? 0 : -1;
        if (e >= n)
            e = s > 0 ? n : n - 1;
    }
    unsigned long long cnt = 0, us = s > 0 ? (unsigned long long)s : 0ULL - (unsigned long long)s;
    if (s > 0 && b < e)
        cnt = ((unsigned long long)(e - b) - 1) / us + 1;
    else if (s < 0 && b > e)
        cnt = ((unsigned long long)(b - e) - 1) / us + 1;
    *start = b;
    *step = s;
    return (size_t)cnt;
}

static struct jv do_slice(struct render *r, struct frame *f, const struct node *n)
{
    struct jv obj = jeval(r, f, n->a);
    struct jv b = n->b ? jeval(r, f, n->b) : jv_none(), e = n->c ? jeval(r, f, n->c) : jv_none(),
              s = n->d ? jeval(r, f, n->d) : jv_none();
    long long start, stp;
    if (obj.k == JK_LIST && obj.l->gen)
        jr_fail(r, ERR_INVALID, "'generator' object is not subscriptable");
    if (obj.k == JK_LIST) {
        size_t cnt = slice_range(r, (long long)obj.l->n, b, e, s, &start, &stp);
        if (stp == 1) { /* a view: lists are never changed once built (cap = n: a push copies) */
            struct jv l = jv_list_new(r, 0);
            l.l->tuple = obj.l->tuple;
            if (!cnt)
                return l;
            l.l->v = obj.l->v + start;
            l.l->n = l.l->cap = cnt;
            return l;
        }
        struct jv l = jv_list_new(r, cnt);
        l.l->tuple = obj.l->tuple;
        for (size_t i = 0; i < cnt; i++)
            jv_list_push(r, l.l, obj.l->v[start + (long long)i * stp]);
        return l;
    }
    if (obj.k == JK_STR) { /* by code points; the byte offsets of each only when not ASCII */
        size_t n_cp = ju_len(obj.s);
        size_t *off = NULL;
        if (n_cp != obj.s.n) {
            off = jr_alloc(r, (n_cp + 1) * sizeof(size_t));
            for (size_t i = 1; i <= n_cp; i++)
                off[i] = off[i - 1] +
                         ju_offset((struct jstr){obj.s.p + off[i - 1], obj.s.n - off[i - 1]}, 1);
        }
#define OFF(i) (off ? off[(i)] : (size_t)(i))
        size_t cnt = slice_range(r, (long long)n_cp, b, e, s, &start, &stp);
        if (stp == 1) /* a substring: strings are immutable */
            return jv_strn(obj.s.p + OFF(start), OFF(start + (long long)cnt) - OFF(start));
        struct jbuf out = {0};
        for (size_t i = 0; i < cnt; i++) {
            long long j = start + (long long)i * stp;
            jb_put(r, &out, obj.s.p + OFF(j), OFF(j + 1) - OFF(j));
        }
#undef OFF
        return jv_strn(out.p ? out.p : "", out.n);
    }
    if (obj.k == JK_UNDEF)
        jr_undefined(r, obj);
    /* slices bypass Jinja's getitem (which turns a TypeError into Undefined) */
    jr_fail(r, ERR_INVALID, "'%s' object is not subscriptable", jv_type_name(obj));
}

/* ---- operators ---- */
static long long as_int(struct jv v)
{
    return v.k == JK_BOOL ? v.b : v.i;
}
static bool is_intlike(struct jv v)
{
    return v.k == JK_INT || v.k == JK_BOOL;
}

static _Noreturn void bad_operands(struct render *r, const char *op, struct jv a, struct jv b)
{
    if (a.k == JK_UNDEF)
        jr_undefined(r, a);
    if (b.k == JK_UNDEF)
        jr_undefined(r, b);
    jr_fail(r, ERR_INVALID, "unsupported operand type(s) for %s: '%s' and '%s'", op,
            jv_type_name(a), jv_type_name(b));
}

static struct jv repeat(struct render *r, struct jv seq, long long k)
{
    if (k < 0)
        k = 0;
    if (seq.k == JK_STR) {
        if (seq.s.n && (unsigned long long)k > r->max_output / seq.s.n)
            jr_fail(r, ERR_INVALID, "string repetition longer than %zu bytes (limit)",
                    r->max_output);
        struct jbuf b = {0};
        for (long long i = 0; i < k; i++)
            jb_puts(r, &b, seq.s);
        return jv_strn(b.p ? b.p : "", b.n);
    }
    if (seq.l->n && (unsigned long long)k > (size_t)1 << 20 / seq.l->n)
        jr_fail(r, ERR_INVALID, "list repetition longer than %d items (limit)", 1 << 20);
    struct jv l = jv_list_new(r, seq.l->n * (size_t)k);
    l.l->tuple = seq.l->tuple;
    for (long long i = 0; i < k; i++)
        for (size_t j = 0; j < seq.l->n; j++)
            jv_list_push(r, l.l, seq.l->v[j]);
    return l;
}

static struct jv arith(struct render *r, int op, struct jv a, struct jv b)
{
    static const char *const names[] = {
        [OP_ADD] = "+",       [OP_SUB] = "-", [OP_MUL] = "*", [OP_DIV] = "/",
        [OP_FLOORDIV] = "//", [OP_MOD] = "%", [OP_POW] = "**"};
    const char *opn = names[op];
    if (is_intlike(a) && is_intlike(b)) {
        long long x = as_int(a), y = as_int(b), z;
        switch (op) {
        case OP_ADD:
            if (__builtin_add_overflow(x, y, &z))
                goto overflow;
            return jv_int(z);
        case OP_SUB:
            if (__builtin_sub_overflow(x, y, &z))
                goto overflow;
            return jv_int(z);
        case OP_MUL:
            if (__builtin_mul_overflow(x, y, &z))
                goto overflow;
            return jv_int(z);
        case OP_DIV:
            if (y == 0)
                jr_fail(r, ERR_INVALID, "division by zero");
            return jv_float((double)x / (double)y);
        case OP_FLOORDIV:
        case OP_MOD: {
            if (y == 0)
                jr_fail(r, ERR_INVALID, "integer division or modulo by zero");
            if (x == LLONG_MIN && y == -1)
                goto overflow;
            long long q = x / y, m = x % y;
            if (m != 0 && ((m < 0) != (y < 0))) {
                q--;
                m += y;
            }
            return jv_int(op == OP_MOD ? m : q);
        }
        case OP_POW:
            if (y < 0)
                return jv_float(pow((double)x, (double)y));
            z = 1;
            for (long long i = 0; i < y; i++) {
                if (__builtin_mul_overflow(z, x, &z))
                    goto overflow;
                if (z == 0 || z == 1)
                    break;
                if (z == -1 && ((y - i - 1) % 2 == 0))
                    break;
            }
            return jv_int(z);
        }
    }
    if (jv_is_num(a) && jv_is_num(b)) {
        double x = jv_num(a), y = jv_num(b);
        switch (op) {
        case OP_ADD:
            return jv_float(x + y);
        case OP_SUB:
            return jv_float(x - y);
        case OP_MUL:
            return jv_float(x * y);
        case OP_DIV:
            if (y == 0)
                jr_fail(r, ERR_INVALID, "float division by zero");
            return jv_float(x / y);
        case OP_FLOORDIV:
        case OP_MOD: {
            if (y == 0)
                jr_fail(r, ERR_INVALID, "float modulo");
            double m = fmod(x, y);
            if (m != 0 && ((m < 0) != (y < 0)))
                m += y;
            if (op == OP_MOD)
                return jv_float(m);
            /* Python's float floor division, through divmod */
            double d = (x - fmod(x, y)) / y;
            if (fmod(x, y) != 0 && ((y < 0) != (fmod(x, y) < 0)))
                d -= 1;
            double fd = floor(d);
            return jv_float(d - fd > 0.5 ? fd + 1 : fd);
        }
        case OP_POW:
            return jv_float(pow(x, y));
        }
    }
    if (op == OP_ADD && a.k == JK_STR && b.k == JK_STR && (a.safe || b.safe)) {
        /* Markup + str escapes the str (markupsafe) */
        struct jv x = a.safe ? a : js_escape(r, a.s), y = b.safe ? b : js_escape(r, b.s);
        x.safe = y.safe = false;
        struct jv z = arith(r, OP_ADD, x, y);
        z.safe = true;
        return z;
    }
    if (op == OP_ADD && a.k == JK_STR && b.k == JK_STR) {
        size_t n = a.s.n + b.s.n;
        if (n > r->max_output)
            jr_fail(r, ERR_INVALID, "string longer than %zu bytes (limit)", r->max_output);
        struct jsb *sb = a.sb;
        if (!sb || a.s.p != sb->p || a.s.n != sb->used) { /* a new buffer, a copied */
            sb = jr_alloc(r, sizeof(*sb));
            sb->cap = n + n / 2 + 16;
            sb->p = jr_alloc(r, sb->cap);
            if (a.s.n)
                memcpy(sb->p, a.s.p, a.s.n);
            sb->used = a.s.n;
        } else if (n > sb->cap) { /* grows by half: amortised linear */
            size_t cap = n + n / 2 + 16;
            char *p = jr_alloc(r, cap);
            memcpy(p, sb->p, sb->used);
            sb->p = p;
            sb->cap = cap;
        }
        if (b.s.n)
            memcpy(sb->p + sb->used, b.s.p, b.s.n);
        sb->used = n;
        struct jv v = jv_strn(sb->p, n);
        v.sb = sb;
        return v;
    }
    if (op == OP_ADD && a.k == JK_LIST && b.k == JK_LIST && a.l->tuple == b.l->tuple && !a.l->gen &&
        !b.l->gen) {
        struct jv l = jv_list_new(r, a.l->n + b.l->n);
        l.l->tuple = a.l->tuple;
        for (size_t i = 0; i < a.l->n; i++)
            jv_list_push(r, l.l, a.l->v[i]);
        for (size_t i = 0; i < b.l->n; i++)
            jv_list_push(r, l.l, b.l->v[i]);
        return l;
    }
    if ((a.k == JK_LIST && a.l->gen) || (b.k == JK_LIST && b.l->gen))
        bad_operands(r, opn, a, b);
    if (op == OP_MUL && (a.k == JK_STR || a.k == JK_LIST) && is_intlike(b))
        return repeat(r, a, as_int(b));
    if (op == OP_MUL && (b.k == JK_STR || b.k == JK_LIST) && is_intlike(a))
        return repeat(r, b, as_int(a));
    if (op == OP_MOD && a.k == JK_STR)
        return js_percent_format(r, a.s, b);
    bad_operands(r, opn, a, b);
overflow:
    jr_fail(r, ERR_UNSUPPORTED, "integer result of %s beyond 64 bits", opn);
}

static bool contains(struct render *r, struct jv needle, struct jv hay)
{
    switch (hay.k) {
    case JK_STR:
        if (needle.k != JK_STR)
            jr_fail(r, ERR_INVALID, "'in <string>' requires string as left operand, not %s",
                    jv_type_name(needle));
        jr_charge(r, hay.s.n);
        return js_search(hay.s, 0, needle.s) >= 0;
    case JK_LIST:
        jr_charge(r, hay.l->n * 8);
        for (size_t i = 0; i < hay.l->n; i++)
            if (jv_eq(hay.l->v[i], needle))
                return true;
        return false;
    case JK_DICT:
    case JK_NS:
        jr_charge(r, hay.d->n * 8);
        return jv_dict_get(hay.d, needle) != NULL;
    case JK_UNDEF:
        return false; /* Undefined iterates as empty */
    default:
        jr_fail(r, ERR_INVALID, "argument of type '%s' is not iterable", jv_type_name(hay));
    }
}

static bool compare(struct render *r, int op, struct jv a, struct jv b)
{
    switch (op) {
    case OP_EQ:
        return jv_eq(a, b);
    case OP_NE:
        return !jv_eq(a, b);
    case OP_IN:
        return contains(r, a, b);
    case OP_NOTIN:
        return !contains(r, a, b);
    }
    if (a.k == JK_UNDEF)
        jr_undefined(r, a);
    if (b.k == JK_UNDEF)
        jr_undefined(r, b);
    int c = jv_cmp(r, a, b);
    switch (op) {
    case OP_LT:
        return c < 0;
    case OP_LE:
        return c <= 0;
    case OP_GT:
        return c > 0;
    default:
        return c >= 0;
    }
}

/* ---- calls ---- */

static struct jv call_macro(struct render *r, const struct jmacro *mac, struct jv *args,
                            size_t nargs, struct jstr *kwn, struct jv *kwv, size_t nkw)
{
    const struct node *m = mac->def;
    if (r->depth >= r->max_depth)
        jr_fail(r, ERR_INVALID, "macro calls nested deeper than %d (limit)", r->max_depth);
    bool varargs = m->op & 1, kwargs = m->op & 2;
    if (nargs > m->args.n && !varargs)
        jr_fail(r, ERR_INVALID, "macro '%.*s' takes not more than %zu argument(s)", (int)m->v.s.n,
                m->v.s.p, m->args.n);
    struct frame *f = jr_alloc(r, sizeof(*f));
    f->parent = mac->closure;
    struct jv extra_kw = jv_dict_new(r);
    for (size_t k = 0; k < nkw; k++) {
        size_t i;
        for (i = 0; i < m->args.n; i++)
            if (m->args.v[i]->v.s.n == kwn[k].n &&
                memcmp(m->args.v[i]->v.s.p, kwn[k].p, kwn[k].n) == 0)
                break;
        if (i == m->args.n && kwargs) {
            jv_dict_set(r, extra_kw.d, jv_strn(kwn[k].p, kwn[k].n), kwv[k]);
            continue;
        }
        if (i == m->args.n)
            jr_fail(r, ERR_INVALID, "macro '%.*s' has no argument '%.*s'", (int)m->v.s.n, m->v.s.p,
                    (int)kwn[k].n, kwn[k].p);
        if (i < nargs)
            jr_fail(r, ERR_INVALID, "macro '%.*s' got multiple values for argument '%.*s'",
                    (int)m->v.s.n, m->v.s.p, (int)kwn[k].n, kwn[k].p);
    }
    int line = r->line;
    for (size_t i = 0; i < m->args.n; i++) {
        const struct node *p = m->args.v[i];
        struct jv v;
        bool set = false;
        if (i < nargs) {
            v = args[i];
            set = true;
        } else {
            for (size_t k = 0; k < nkw; k++)
                if (kwn[k].n == p->v.s.n && memcmp(kwn[k].p, p->v.s.p, kwn[k].n) == 0) {
                    v = kwv[k];
                    set = true;
                }
        }
        if (!set)
            v = p->a ? jeval(r, f, p->a) : undef_named(p->v.s);
        jv_dict_set(r, &f->vars, p->v, v);
    }
    if (varargs) {
        struct jv t = jv_list_new(r, nargs > m->args.n ? nargs - m->args.n : 0);
        t.l->tuple = true;
        for (size_t i = m->args.n; i < nargs; i++)
            jv_list_push(r, t.l, args[i]);
        jv_dict_set(r, &f->vars, jv_strn("varargs", 7), t);
    }
    if (kwargs)
        jv_dict_set(r, &f->vars, jv_strn("kwargs", 6), extra_kw);
    r->depth++;
    struct jbuf out = {0};
    int saved = r->loopctl;
    r->loopctl = 0;
    jexec_body(r, f, &m->body, &out);
    r->loopctl = saved;
    r->depth--;
    r->line = line;
    return jv_strn(out.p ? out.p : "", out.n);
}

struct jv jcall(struct render *r, struct frame *f, struct jv fn, struct jv *args, size_t nargs,
                struct jstr *kwn, struct jv *kwv, size_t nkw)
{
    if (fn.k == JK_MACRO)
        return call_macro(r, fn.m, args, nargs, kwn, kwv, nkw);
    if (fn.k == JK_FUNC)
        return jfunc_call(r, f, fn.fn, args, nargs, kwn, kwv, nkw);
    if (fn.k == JK_UNDEF)
        jr_undefined(r, fn);
    jr_fail(r, ERR_INVALID, "'%s' object is not callable", jv_type_name(fn));
}

/* evaluates a call's arguments into arrays in the arena */
static void eval_args(struct render *r, struct frame *f, const struct node *n, struct jv **args,
                      struct jstr **kwn, struct jv **kwv)
{
    *args = jr_alloc(r, (n->args.n + 1) * sizeof(struct jv));
    *kwn = jr_alloc(r, (n->kw.n + 1) * sizeof(struct jstr));
    *kwv = jr_alloc(r, (n->kw.n + 1) * sizeof(struct jv));
    for (size_t i = 0; i < n->args.n; i++)
        (*args)[i] = jeval(r, f, n->args.v[i]);
    for (size_t i = 0; i < n->kw.n; i++) {
        (*kwn)[i] = n->kw.v[i]->v.s;
        (*kwv)[i] = jeval(r, f, n->kw.v[i]->a);
    }
}

/* str(v) as a plain (not Markup) string value; a string keeps its buffer */
static struct jv plain_str(struct render *r, struct jv v)
{
    if (v.k == JK_STR) {
        v.safe = false;
        return v;
    }
    struct jstr s = jv_to_str(r, v);
    return jv_strn(s.p, s.n);
}

/* ---- expressions ---- */
/* The most nested expression evaluations at once (through macro calls too):
 * about 300 bytes of C stack each, so a render needs well under 1 MiB. */
#define MAX_EVAL_NEST 2000

static struct jv eval_node(struct render *r, struct frame *f, const struct node *n);

struct jv jeval(struct render *r, struct frame *f, const struct node *n)
{
    if (++r->nest > MAX_EVAL_NEST)
        jr_fail(r, ERR_INVALID, "expressions nested deeper than %d through macro calls (limit)",
                MAX_EVAL_NEST);
    struct jv v = eval_node(r, f, n);
    r->nest--;
    return v;
}

static struct jv eval_node(struct render *r, struct frame *f, const struct node *n)
{
    step(r, n->line);
    switch (n->t) {
    case E_CONST:
        return n->v;
    case E_NAME:
        return lookup(r, f, n->v.s);
    case E_ATTR: {
        struct jv o = jeval(r, f, n->a);
        r->line = n->line;
        return jgetattr(r, o, n->v.s);
    }
    case E_ITEM: {
        struct jv o = jeval(r, f, n->a), k = jeval(r, f, n->b);
        r->line = n->line;
        return jgetitem(r, o, k);
    }
    case E_SLICE:
        return do_slice(r, f, n);
    case E_CALL: {
        struct jv fn = jeval(r, f, n->a);
        struct jv *args, *kwv;
        struct jstr *kwn;
        eval_args(r, f, n, &args, &kwn, &kwv);
        r->line = n->line;
        return jcall(r, f, fn, args, n->args.n, kwn, kwv, n->kw.n);
    }
    case E_FILTER: {
        if (n->fid < 0)
            jr_fail(r, ERR_UNSUPPORTED, "filter \"%.*s\" is not supported", (int)n->v.s.n,
                    n->v.s.p);
        struct jv v = jeval(r, f, n->a);
        struct jv *args, *kwv;
        struct jstr *kwn;
        eval_args(r, f, n, &args, &kwn, &kwv);
        r->line = n->line;
        return jfilter(r, f, n->fid, v, args, n->args.n, kwn, kwv, n->kw.n);
    }
    case E_TEST: {
        if (n->fid < 0)
            jr_fail(r, ERR_UNSUPPORTED, "test \"%.*s\" is not supported", (int)n->v.s.n, n->v.s.p);
        struct jv v = jeval(r, f, n->a);
        struct jv *args = jr_alloc(r, (n->args.n + 1) * sizeof(struct jv));
        for (size_t i = 0; i < n->args.n; i++)
            args[i] = jeval(r, f, n->args.v[i]);
        r->line = n->line;
        bool t = jtest(r, f, n->fid, v, args, n->args.n);
        return jv_bool(n->op ? !t : t);
    }
    case E_BIN: {
        if (n->op == OP_AND) {
            struct jv a = jeval(r, f, n->a);
            return jv_truthy(a) ? jeval(r, f, n->b) : a;
        }
        if (n->op == OP_OR) {
            struct jv a = jeval(r, f, n->a);
            return jv_truthy(a) ? a : jeval(r, f, n->b);
        }
        struct jv a = jeval(r, f, n->a), b = jeval(r, f, n->b);
        r->line = n->line;
        if (n->op == OP_TILDE) /* str_join: plain strings; a's concatenation buffer kept */
            return arith(r, OP_ADD, plain_str(r, a), plain_str(r, b));
        return arith(r, n->op, a, b);
    }
    case E_UN: {
        struct jv a = jeval(r, f, n->a);
        r->line = n->line;
        if (n->op == OP_NOT)
            return jv_bool(!jv_truthy(a));
        if (a.k == JK_INT || a.k == JK_BOOL) {
            long long x = as_int(a);
            if (n->op == OP_NEG && x == LLONG_MIN)
                jr_fail(r, ERR_UNSUPPORTED, "integer result of - beyond 64 bits");
            return jv_int(n->op == OP_NEG ? -x : x);
        }
        if (a.k == JK_FLOAT)
            return jv_float(n->op == OP_NEG ? -a.f : a.f);
        if (a.k == JK_UNDEF)
            jr_undefined(r, a);
        jr_fail(r, ERR_INVALID, "bad operand type for unary %s: '%s'", n->op == OP_NEG ? "-" : "+",
                jv_type_name(a));
    }
    case E_COND:
        if (jv_truthy(jeval(r, f, n->b)))
            return jeval(r, f, n->a);
        return n->c ? jeval(r, f, n->c) : jv_undef();
    case E_LIST:
    case E_TUPLE: {
        struct jv l = jv_list_new(r, n->args.n);
        l.l->tuple = n->t == E_TUPLE;
        for (size_t i = 0; i < n->args.n; i++)
            jv_list_push(r, l.l, jeval(r, f, n->args.v[i]));
        return l;
    }
    case E_DICT: {
        struct jv d = jv_dict_new(r);
        for (size_t i = 0; i < n->args.n; i++) {
            struct jv k = jeval(r, f, n->args.v[i]);
            jv_dict_set(r, d.d, k, jeval(r, f, n->kw.v[i]));
        }
        return d;
    }
    case E_COMPARE: {
        struct jv a = jeval(r, f, n->a);
        for (size_t i = 0; i < n->args.n; i++) {
            const struct node *c = n->args.v[i];
            struct jv b = jeval(r, f, c->b);
            r->line = c->line;
            if (!compare(r, c->op, a, b))
                return jv_bool(false);
            a = b;
        }
        return jv_bool(true);
    }
    default:
        jr_fail(r, ERR_INVALID, "internal: node %d is not an expression", n->t);
    }
}

/* applies a filter chain whose innermost operand is a hole (E_CONST undef) to v */
static struct jv apply_chain(struct render *r, struct frame *f, const struct node *chain,
                             struct jv v)
{
    if (chain->t != E_FILTER)
        return v;
    struct jv in = apply_chain(r, f, chain->a, v);
    if (chain->fid < 0)
        jr_fail(r, ERR_UNSUPPORTED, "filter \"%.*s\" is not supported", (int)chain->v.s.n,
                chain->v.s.p);
    struct jv *args, *kwv;
    struct jstr *kwn;
    eval_args(r, f, chain, &args, &kwn, &kwv);
    r->line = chain->line;
    return jfilter(r, f, chain->fid, in, args, chain->args.n, kwn, kwv, chain->kw.n);
}

/* ---- statements ---- */
static void exec_for(struct render *r, struct frame *f, const struct node *n, struct jbuf *out)
{
    struct jv it = jeval(r, f, n->b);
    r->line = n->line;
    struct jv items = jv_iter_list(r, it);
    struct frame *inner = jr_alloc(r, sizeof(*inner));
    inner->parent = f;
    if (n->c) { /* the `if` filter, evaluated with the target bound */
        struct jv kept = jv_list_new(r, items.l->n);
        for (size_t i = 0; i < items.l->n; i++) {
            inner->vars.n = 0;
            assign(r, inner, n->a, items.l->v[i]);
            if (jv_truthy(jeval(r, inner, n->c)))
                jv_list_push(r, kept.l, items.l->v[i]);
        }
        items = kept;
    }
    struct jloop *L = jr_alloc(r, sizeof(*L));
    L->length = (long long)items.l->n;
    struct jv loopv = {.k = JK_LOOP, .loop = L};
    struct jstr loopname = {"loop", 4};
    for (size_t i = 0; i < items.l->n; i++) {
        if (++r->loops > r->max_loops)
            jr_fail(r, ERR_INVALID, "more than %lld loop iterations (limit)", r->max_loops);
        inner->vars.n = 0; /* each iteration is a fresh scope */
        L->index0 = (long long)i;
        L->has_prev = i > 0;
        L->has_next = i + 1 < items.l->n;
        L->prev = i > 0 ? items.l->v[i - 1] : jv_undef();
        L->next = i + 1 < items.l->n ? items.l->v[i + 1] : jv_undef();
        jv_dict_set(r, &inner->vars, jv_strn(loopname.p, loopname.n), loopv);
        assign(r, inner, n->a, items.l->v[i]);
        jexec_body(r, inner, &n->body, out);
        int ctl = r->loopctl;
        r->loopctl = 0;
        if (ctl == 1)
            break;
    }
    if (!items.l->n && n->orelse.n) {
        inner->vars.n = 0;
        jexec_body(r, inner, &n->orelse, out);
    }
}

void jexec_body(struct render *r, struct frame *f, const struct nlist *body, struct jbuf *out)
{
    for (size_t i = 0; i < body->n && !r->loopctl; i++) {
        const struct node *n = body->v[i];
        step(r, n->line);
        switch (n->t) {
        case N_TEXT:
            jb_puts(r, out, n->v.s);
            break;
        case N_OUTPUT: {
            struct jv v = jeval(r, f, n->a);
            jv_str_into(r, out, v);
            break;
        }
        case N_IF: {
            const struct node *c = n;
            jexec_body(r, f, jv_truthy(jeval(r, f, c->a)) ? &c->body : &c->orelse, out);
            break;
        }
        case N_FOR:
            exec_for(r, f, n, out);
            break;
        case N_SET: {
            struct jv v = jeval(r, f, n->b);
            r->line = n->line;
            assign(r, f, n->a, v);
            break;
        }
        case N_SETBLOCK: {
            struct jbuf b = {0};
            jexec_body(r, f, &n->body, &b);
            struct jv v = jv_strn(b.p ? b.p : "", b.n);
            if (n->c)
                v = apply_chain(r, f, n->c, v);
            assign(r, f, n->a, v);
            break;
        }
        case N_MACRO: {
            struct jv m = {.k = JK_MACRO};
            m.m = jr_alloc(r, sizeof(*m.m));
            m.m->def = n;
            m.m->closure = f;
            jv_dict_set(r, &f->vars, n->v, m);
            break;
        }
        case N_FILTERBLOCK: {
            struct jbuf b = {0};
            jexec_body(r, f, &n->body, &b);
            struct jv v = apply_chain(r, f, n->c, jv_strn(b.p ? b.p : "", b.n));
            jv_str_into(r, out, v);
            break;
        }
        case N_GENERATION:
            jexec_body(r, f, &n->body, out);
            break;
        case N_BREAK:
            r->loopctl = 1;
            break;
        case N_CONTINUE:
            r->loopctl = 2;
            break;
        default:
            jr_fail(r, ERR_UNSUPPORTED, "this statement is not supported");
        }
    }
}
