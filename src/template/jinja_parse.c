/* The Jinja parser: tokens to an AST (jinja_impl.h), with Jinja2's grammar
 * and precedence:
 *   expr     := or ('if' or ['else' expr])*
 *   or       := and ('or' and)*          and := not ('and' not)*
 *   not      := 'not' not | compare      compare := add (cmpop add)*
 *   add      := concat (('+'|'-') concat)*   concat := mul ('~' mul)*
 *   mul      := pow (('*'|'/'|'//'|'%') pow)*  pow := unary ('**' unary)*
 *   unary    := ('-'|'+') unary | primary postfix* filter*
 * Filters and tests are resolved to ids here, so an unknown one fails at
 * parse time naming itself and its line, as Jinja2 fails at compile time.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "template/jinja_impl.h"

#define MAX_NEST                                                                                   \
    500 /* parser recursion (about 3 per bracket or operator level): bounds the C stack */

struct parser {
    const char *name;
    const struct token *t;
    size_t n, i;
    struct jarena *a;
    int depth;
    int loops; /* for bodies around the statement being parsed (a macro starts at 0) */
    jmp_buf fail;
    int err;
};

_Noreturn static void perr(struct parser *P, int code, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
_Noreturn static void perr(struct parser *P, int code, int line, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    P->err = err_set(code, "%s line %d: %s", P->name, line, msg);
    longjmp(P->fail, 1);
}

static const struct token *cur(struct parser *P)
{
    return &P->t[P->i];
}
static const struct token *next(struct parser *P)
{
    const struct token *t = &P->t[P->i];
    if (P->i + 1 < P->n)
        P->i++;
    return t;
}

static bool is_op(struct parser *P, int op)
{
    return cur(P)->t == T_OP && cur(P)->op == op;
}
static bool is_name(struct parser *P, const char *s)
{
    return cur(P)->t == T_NAME && js_eq(cur(P)->s, s);
}
static bool skip_op(struct parser *P, int op)
{
    if (!is_op(P, op))
        return false;
    next(P);
    return true;
}
static bool skip_name(struct parser *P, const char *s)
{
    if (!is_name(P, s))
        return false;
    next(P);
    return true;
}

static const char *tok_desc(const struct token *t, char *buf, size_t cap)
{
    switch (t->t) {
    case T_EOF:
        return "end of template";
    case T_DATA:
        return "text";
    case T_VAR_BEGIN:
        return "'{{'";
    case T_VAR_END:
        return "'}}'";
    case T_BLOCK_BEGIN:
        return "'{%'";
    case T_BLOCK_END:
        return "'%}'";
    case T_NAME:
        snprintf(buf, cap, "'%.*s'", (int)(t->s.n > 40 ? 40 : t->s.n), t->s.p);
        return buf;
    case T_STRING:
        return "a string";
    case T_INT:
        return "an integer";
    case T_FLOAT:
        return "a number";
    case T_OP:
        return "an operator";
    }
    return "?";
}

_Noreturn static void unexpected(struct parser *P, const char *expected)
{
    char b[64];
    perr(P, ERR_FORMAT, cur(P)->line, "unexpected %s (expected %s)", tok_desc(cur(P), b, sizeof(b)),
         expected);
}

static void expect_op(struct parser *P, int op, const char *what)
{
    if (!skip_op(P, op))
        unexpected(P, what);
}

static struct node *mk(struct parser *P, enum nt t, int line)
{
    struct node *n = ja_alloc(P->a, sizeof(*n));
    if (!n) {
        P->err = err_set(ERR_NOMEM, "%s: out of memory parsing", P->name);
        longjmp(P->fail, 1);
    }
    n->t = t;
    n->line = line;
    n->fid = -1;
    return n;
}

static void nl_push(struct parser *P, struct nlist *l, struct node *n)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        struct node **v = ja_alloc(P->a, cap * sizeof(*v));
        if (!v) {
            P->err = err_set(ERR_NOMEM, "%s: out of memory parsing", P->name);
            longjmp(P->fail, 1);
        }
        if (l->n)
            memcpy(v, l->v, l->n * sizeof(*v));
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = n;
}

static void enter(struct parser *P)
{
    if (++P->depth > MAX_NEST)
        perr(P, ERR_INVALID, cur(P)->line, "nesting deeper than %d (limit)", MAX_NEST);
}

static struct node *expr(struct parser *P);
static struct node *expr_nocond(struct parser *P);
static struct node *unary(struct parser *P);
static struct node *primary(struct parser *P);
static struct node *postfix(struct parser *P, struct node *n);

/* (args, kw) of a call, after '(' through ')' */
static void call_args(struct parser *P, struct nlist *args, struct nlist *kw)
{
    while (!skip_op(P, OP_RPAREN)) {
        if (args->n || kw->n)
            expect_op(P, OP_COMMA, "',' or ')'");
        if (skip_op(P, OP_RPAREN))
            break;
        if (is_op(P, OP_MUL) || is_op(P, OP_POW))
            perr(P, ERR_UNSUPPORTED, cur(P)->line, "*args / **kwargs in a call is not supported");
        if (cur(P)->t == T_NAME && P->i + 1 < P->n && P->t[P->i + 1].t == T_OP &&
            P->t[P->i + 1].op == OP_ASSIGN) {
            struct node *k = mk(P, E_KW, cur(P)->line);
            k->v = jv_strn(cur(P)->s.p, cur(P)->s.n);
            next(P);
            next(P);
            k->a = expr(P);
            nl_push(P, kw, k);
        } else {
            if (kw->n)
                perr(P, ERR_FORMAT, cur(P)->line, "positional argument after keyword argument");
            nl_push(P, args, expr(P));
        }
    }
}

/* one filter application, at its name (after the '|') */
static struct node *one_filter(struct parser *P, struct node *n)
{
    const struct token *t = cur(P);
    if (t->t != T_NAME)
        unexpected(P, "a filter name");
    struct node *f = mk(P, E_FILTER, t->line);
    f->v = jv_strn(t->s.p, t->s.n);
    f->a = n;
    next(P);
    while (skip_op(P, OP_DOT)) { /* dotted filter names: joined for the message */
        if (cur(P)->t != T_NAME)
            unexpected(P, "a name");
        f->v.s.n = (size_t)(cur(P)->s.p + cur(P)->s.n - f->v.s.p);
        next(P);
    }
    f->fid = jinja_filter_id(f->v.s.p, f->v.s.n); /* -1: see check_unknown */
    if (skip_op(P, OP_LPAREN))
        call_args(P, &f->args, &f->kw);
    return f;
}

static struct node *filters(struct parser *P, struct node *n)
{
    for (;;) {
        if (skip_op(P, OP_PIPE)) {
            n = one_filter(P, n);
        } else if (is_name(P, "is")) {
            int line = next(P)->line;
            struct node *tn = mk(P, E_TEST, line);
            if (skip_name(P, "not"))
                tn->op = 1;
            const struct token *t = cur(P);
            if (t->t != T_NAME)
                unexpected(P, "a test name");
            tn->v = jv_strn(t->s.p, t->s.n);
            next(P);
            while (skip_op(P, OP_DOT)) { /* dotted test names, as Jinja's parse_test */
                if (cur(P)->t != T_NAME)
                    unexpected(P, "a name");
                tn->v.s.n = (size_t)(cur(P)->s.p + cur(P)->s.n - tn->v.s.p);
                next(P);
            }
            tn->a = n;
            tn->fid = jinja_test_id(tn->v.s.p, tn->v.s.n); /* -1: see check_unknown */
            if (skip_op(P, OP_LPAREN)) {
                struct nlist kw = {0};
                call_args(P, &tn->args, &kw);
                if (kw.n)
                    perr(P, ERR_UNSUPPORTED, line, "keyword arguments to a test are not supported");
            } else {
                const struct token *c = cur(P);
                bool arg = c->t == T_STRING || c->t == T_INT || c->t == T_FLOAT ||
                           (c->t == T_NAME && !is_name(P, "else") && !is_name(P, "or") &&
                            !is_name(P, "and")) ||
                           (c->t == T_OP &&
                            (c->op == OP_LPAREN || c->op == OP_LBRACKET || c->op == OP_LBRACE));
                if (arg) {
                    if (is_name(P, "is"))
                        perr(P, ERR_FORMAT, c->line, "'is' after a test name");
                    nl_push(P, &tn->args, postfix(P, primary(P)));
                }
            }
            n = tn;
        } else if (is_op(P, OP_LPAREN)) {
            n = postfix(P, n);
        } else {
            return n;
        }
    }
}

static struct node *subscript(struct parser *P, struct node *obj, int line)
{
    struct node *parts[3] = {NULL, NULL, NULL};
    int k = 0;
    bool slice = false;
    if (!is_op(P, OP_COLON))
        parts[0] = expr(P);
    while (k < 2 && skip_op(P, OP_COLON)) {
        slice = true;
        k++;
        if (!is_op(P, OP_COLON) && !is_op(P, OP_RBRACKET))
            parts[k] = expr(P);
    }
    expect_op(P, OP_RBRACKET, "']'");
    struct node *n = mk(P, slice ? E_SLICE : E_ITEM, line);
    n->a = obj;
    n->b = parts[0];
    n->c = parts[1];
    n->d = parts[2];
    return n;
}

static struct node *postfix(struct parser *P, struct node *n)
{
    for (;;) {
        int line = cur(P)->line;
        if (skip_op(P, OP_DOT)) {
            const struct token *t = cur(P);
            if (t->t == T_NAME) {
                struct node *x = mk(P, E_ATTR, line);
                x->a = n;
                x->v = jv_strn(t->s.p, t->s.n);
                next(P);
                n = x;
            } else if (t->t == T_INT) {
                struct node *x = mk(P, E_ITEM, line);
                x->a = n;
                x->b = mk(P, E_CONST, line);
                x->b->v = jv_int(t->i);
                next(P);
                n = x;
            } else {
                unexpected(P, "an attribute name");
            }
        } else if (skip_op(P, OP_LBRACKET)) {
            n = subscript(P, n, line);
        } else if (skip_op(P, OP_LPAREN)) {
            struct node *c = mk(P, E_CALL, line);
            c->a = n;
            call_args(P, &c->args, &c->kw);
            n = c;
        } else {
            return n;
        }
    }
}

static struct node *primary(struct parser *P)
{
    enter(P);
    const struct token *t = cur(P);
    struct node *n;
    switch (t->t) {
    case T_NAME:
        n = mk(P, E_CONST, t->line);
        if (js_eq(t->s, "true") || js_eq(t->s, "True"))
            n->v = jv_bool(true);
        else if (js_eq(t->s, "false") || js_eq(t->s, "False"))
            n->v = jv_bool(false);
        else if (js_eq(t->s, "none") || js_eq(t->s, "None"))
            n->v = jv_none();
        else {
            n->t = E_NAME;
            n->v = jv_strn(t->s.p, t->s.n);
        }
        next(P);
        break;
    case T_STRING: {
        n = mk(P, E_CONST, t->line);
        n->v = jv_strn(t->s.p, t->s.n);
        next(P);
        if (cur(P)->t == T_STRING) { /* adjacent literals join */
            size_t total = n->v.s.n;
            for (size_t j = P->i; j < P->n && P->t[j].t == T_STRING; j++)
                total += P->t[j].s.n;
            char *s = ja_alloc(P->a, total + 1);
            if (!s) {
                P->err = err_set(ERR_NOMEM, "%s: out of memory parsing", P->name);
                longjmp(P->fail, 1);
            }
            memcpy(s, n->v.s.p, n->v.s.n);
            size_t k = n->v.s.n;
            while (cur(P)->t == T_STRING) {
                memcpy(s + k, cur(P)->s.p, cur(P)->s.n);
                k += cur(P)->s.n;
                next(P);
            }
            n->v = jv_strn(s, k);
        }
        break;
    }
    case T_INT:
        n = mk(P, E_CONST, t->line);
        n->v = jv_int(t->i);
        next(P);
        break;
    case T_FLOAT:
        n = mk(P, E_CONST, t->line);
        n->v = jv_float(t->f);
        next(P);
        break;
    case T_OP:
        if (skip_op(P, OP_LPAREN)) {
            /* (), (x), (x,), (x, y) */
            if (skip_op(P, OP_RPAREN)) {
                n = mk(P, E_TUPLE, t->line);
                break;
            }
            struct node *first = expr(P);
            if (!is_op(P, OP_COMMA)) {
                expect_op(P, OP_RPAREN, "')'");
                n = first;
                break;
            }
            n = mk(P, E_TUPLE, t->line);
            nl_push(P, &n->args, first);
            while (skip_op(P, OP_COMMA)) {
                if (is_op(P, OP_RPAREN))
                    break;
                nl_push(P, &n->args, expr(P));
            }
            expect_op(P, OP_RPAREN, "')'");
            break;
        }
        if (skip_op(P, OP_LBRACKET)) {
            n = mk(P, E_LIST, t->line);
            while (!skip_op(P, OP_RBRACKET)) {
                if (n->args.n)
                    expect_op(P, OP_COMMA, "',' or ']'");
                if (skip_op(P, OP_RBRACKET))
                    break;
                nl_push(P, &n->args, expr(P));
            }
            break;
        }
        if (skip_op(P, OP_LBRACE)) {
            n = mk(P, E_DICT, t->line);
            while (!skip_op(P, OP_RBRACE)) {
                if (n->args.n)
                    expect_op(P, OP_COMMA, "',' or '}'");
                if (skip_op(P, OP_RBRACE))
                    break;
                nl_push(P, &n->args, expr(P));
                expect_op(P, OP_COLON, "':'");
                nl_push(P, &n->kw, expr(P));
            }
            break;
        }
        /* fall through */
    default:
        unexpected(P, "an expression");
    }
    P->depth--;
    return n;
}

/* Jinja's parse_unary: -x|f is (-x)|f, the sign's operand takes no filters */
static struct node *unary_f(struct parser *P, bool with_filters)
{
    enter(P);
    const struct token *t = cur(P);
    struct node *n;
    if (is_op(P, OP_SUB) || is_op(P, OP_ADD)) {
        next(P);
        n = mk(P, E_UN, t->line);
        n->op = t->op == OP_SUB ? OP_NEG : OP_POS;
        n->a = unary_f(P, false);
    } else {
        n = postfix(P, primary(P));
    }
    if (with_filters)
        n = filters(P, n);
    P->depth--;
    return n;
}

static struct node *unary(struct parser *P)
{
    return unary_f(P, true);
}

static struct node *bin(struct parser *P, int op, struct node *a, struct node *b, int line)
{
    struct node *n = mk(P, E_BIN, line);
    n->op = op;
    n->a = a;
    n->b = b;
    return n;
}

static struct node *p_pow(struct parser *P)
{
    struct node *n = unary(P);
    while (is_op(P, OP_POW)) {
        int line = next(P)->line;
        n = bin(P, OP_POW, n, unary(P), line);
    }
    return n;
}

static struct node *p_mul(struct parser *P)
{
    struct node *n = p_pow(P);
    while (is_op(P, OP_MUL) || is_op(P, OP_DIV) || is_op(P, OP_FLOORDIV) || is_op(P, OP_MOD)) {
        const struct token *t = next(P);
        n = bin(P, t->op, n, p_pow(P), t->line);
    }
    return n;
}

static struct node *p_concat(struct parser *P)
{
    struct node *n = p_mul(P);
    while (is_op(P, OP_TILDE)) {
        int line = next(P)->line;
        n = bin(P, OP_TILDE, n, p_mul(P), line);
    }
    return n;
}

static struct node *p_add(struct parser *P)
{
    struct node *n = p_concat(P);
    while (is_op(P, OP_ADD) || is_op(P, OP_SUB)) {
        const struct token *t = next(P);
        n = bin(P, t->op, n, p_concat(P), t->line);
    }
    return n;
}

static struct node *p_compare(struct parser *P)
{
    int line = cur(P)->line;
    struct node *first = p_add(P), *cmp = NULL;
    for (;;) {
        int op = 0;
        const struct token *t = cur(P);
        if (t->t == T_OP && (t->op == OP_EQ || t->op == OP_NE || t->op == OP_LT || t->op == OP_LE ||
                             t->op == OP_GT || t->op == OP_GE)) {
            op = t->op;
            next(P);
        } else if (skip_name(P, "in")) {
            op = OP_IN;
        } else if (is_name(P, "not") && P->i + 1 < P->n && P->t[P->i + 1].t == T_NAME &&
                   js_eq(P->t[P->i + 1].s, "in")) {
            next(P);
            next(P);
            op = OP_NOTIN;
        } else {
            break;
        }
        if (!cmp) {
            cmp = mk(P, E_COMPARE, line);
            cmp->a = first;
        }
        nl_push(P, &cmp->args, bin(P, op, NULL, p_add(P), t->line));
    }
    return cmp ? cmp : first;
}

static struct node *p_not(struct parser *P)
{
    if (is_name(P, "not")) {
        enter(P);
        int line = next(P)->line;
        struct node *n = mk(P, E_UN, line);
        n->op = OP_NOT;
        n->a = p_not(P);
        P->depth--;
        return n;
    }
    return p_compare(P);
}

static struct node *p_and(struct parser *P)
{
    struct node *n = p_not(P);
    while (is_name(P, "and")) {
        int line = next(P)->line;
        n = bin(P, OP_AND, n, p_not(P), line);
    }
    return n;
}

static struct node *p_or(struct parser *P)
{
    struct node *n = p_and(P);
    while (is_name(P, "or")) {
        int line = next(P)->line;
        n = bin(P, OP_OR, n, p_and(P), line);
    }
    return n;
}

static struct node *expr(struct parser *P)
{
    enter(P);
    struct node *n = p_or(P);
    while (is_name(P, "if")) {
        int line = next(P)->line;
        struct node *c = mk(P, E_COND, line);
        c->a = n;
        c->b = p_or(P);
        if (skip_name(P, "else"))
            c->c = expr(P);
        n = c;
    }
    P->depth--;
    return n;
}

static struct node *expr_nocond(struct parser *P)
{
    return p_or(P);
}

/* expr [, expr ...] as a tuple when there is a comma (Jinja's parse_tuple) */
static struct node *tuple_expr(struct parser *P, bool cond)
{
    int line = cur(P)->line;
    struct node *n = cond ? expr(P) : expr_nocond(P);
    if (!is_op(P, OP_COMMA))
        return n;
    struct node *t = mk(P, E_TUPLE, line);
    nl_push(P, &t->args, n);
    while (skip_op(P, OP_COMMA)) {
        if (cur(P)->t == T_BLOCK_END || cur(P)->t == T_VAR_END || is_name(P, "in") ||
            is_op(P, OP_ASSIGN))
            break;
        nl_push(P, &t->args, cond ? expr(P) : expr_nocond(P));
    }
    return t;
}

/* a name, name.attr, or names separated by commas */
static struct node *assign_target(struct parser *P, bool allow_attr)
{
    int line = cur(P)->line;
    struct node *t = NULL;
    for (;;) {
        if (cur(P)->t != T_NAME)
            unexpected(P, "a variable name");
        struct node *n = mk(P, E_NAME, cur(P)->line);
        n->v = jv_strn(cur(P)->s.p, cur(P)->s.n);
        next(P);
        if (allow_attr && !t && skip_op(P, OP_DOT)) {
            if (cur(P)->t != T_NAME)
                unexpected(P, "an attribute name");
            struct node *x = mk(P, E_ATTR, n->line);
            x->a = n;
            x->v = jv_strn(cur(P)->s.p, cur(P)->s.n);
            next(P);
            return x;
        }
        if (!t && !is_op(P, OP_COMMA))
            return n;
        if (!t)
            t = mk(P, E_TUPLE, line);
        nl_push(P, &t->args, n);
        if (!skip_op(P, OP_COMMA))
            return t;
    }
}

static void block_end(struct parser *P)
{
    if (cur(P)->t != T_BLOCK_END)
        unexpected(P, "'%}'");
    next(P);
}

/* Parses statements into body until a block tag whose name is one of ends
 * (NULL-terminated); leaves the parser at that name (after '{%'). */
static const char *statements(struct parser *P, struct nlist *body, const char *const *ends,
                              const char *ctx, int ctx_line);

/* Whether the subtree reads the variable name (Jinja gives a macro
 * varargs / kwargs when its body reads them). */
static bool reads_name(const struct node *n, const char *name)
{
    if (!n)
        return false;
    if (n->t == E_NAME && js_eq(n->v.s, name))
        return true;
    const struct nlist *lists[] = {&n->args, &n->kw, &n->body, &n->orelse};
    for (size_t k = 0; k < 4; k++)
        for (size_t i = 0; i < lists[k]->n; i++)
            if (reads_name(lists[k]->v[i], name))
                return true;
    return reads_name(n->a, name) || reads_name(n->b, name) || reads_name(n->c, name) ||
           reads_name(n->d, name);
}

static struct node *statement(struct parser *P)
{
    const struct token *t = cur(P);
    int line = t->line;
    if (t->t != T_NAME)
        unexpected(P, "a statement name");
    static const char *const if_ends[] = {"elif", "else", "endif", NULL};
    static const char *const for_ends[] = {"else", "endfor", NULL};
    if (skip_name(P, "if")) {
        struct node *n = mk(P, N_IF, line), *top = n;
        n->a = tuple_expr(P, true);
        block_end(P);
        for (;;) {
            const char *e = statements(P, &n->body, if_ends, "if", line);
            int l2 = cur(P)->line;
            next(P);
            if (e[0] == 'e' && e[1] == 'l' && e[2] == 'i') {
                struct node *m = mk(P, N_IF, l2);
                m->a = tuple_expr(P, true);
                block_end(P);
                nl_push(P, &n->orelse, m);
                n = m;
                continue;
            }
            if (e[1] == 'l') { /* else */
                block_end(P);
                static const char *const endif[] = {"endif", NULL};
                statements(P, &n->orelse, endif, "if", line);
                next(P);
            }
            block_end(P);
            return top;
        }
    }
    if (skip_name(P, "for")) {
        struct node *n = mk(P, N_FOR, line);
        n->a = assign_target(P, false);
        if (!skip_name(P, "in"))
            unexpected(P, "'in'");
        n->b = tuple_expr(P, false);
        if (skip_name(P, "if"))
            n->c = expr(P);
        if (is_name(P, "recursive"))
            perr(P, ERR_UNSUPPORTED, line, "recursive for loops are not supported");
        block_end(P);
        P->loops++;
        const char *e = statements(P, &n->body, for_ends, "for", line);
        P->loops--;
        next(P);
        if (e[1] == 'l') {
            block_end(P);
            static const char *const endfor[] = {"endfor", NULL};
            statements(P, &n->orelse, endfor, "for", line);
            next(P);
        }
        block_end(P);
        return n;
    }
    if (skip_name(P, "set")) {
        struct node *target = assign_target(P, true);
        if (skip_op(P, OP_ASSIGN)) {
            struct node *n = mk(P, N_SET, line);
            n->a = target;
            n->b = tuple_expr(P, true);
            block_end(P);
            return n;
        }
        struct node *n = mk(P, N_SETBLOCK, line);
        if (target->t != E_NAME)
            perr(P, ERR_UNSUPPORTED, line, "block set of anything but one name is not supported");
        n->a = target;
        if (is_op(P, OP_PIPE)) {
            struct node *hole = mk(P, E_CONST, line);
            hole->v = jv_undef();
            n->c = filters(P, hole);
        }
        block_end(P);
        static const char *const endset[] = {"endset", NULL};
        statements(P, &n->body, endset, "set", line);
        next(P);
        block_end(P);
        return n;
    }
    if (skip_name(P, "macro")) {
        struct node *n = mk(P, N_MACRO, line);
        if (cur(P)->t != T_NAME)
            unexpected(P, "a macro name");
        n->v = jv_strn(cur(P)->s.p, cur(P)->s.n);
        next(P);
        expect_op(P, OP_LPAREN, "'('");
        while (!skip_op(P, OP_RPAREN)) {
            if (n->args.n)
                expect_op(P, OP_COMMA, "',' or ')'");
            if (skip_op(P, OP_RPAREN))
                break;
            if (cur(P)->t != T_NAME)
                unexpected(P, "a parameter name");
            struct node *p = mk(P, E_NAME, cur(P)->line);
            p->v = jv_strn(cur(P)->s.p, cur(P)->s.n);
            next(P);
            if (skip_op(P, OP_ASSIGN))
                p->a = expr(P);
            nl_push(P, &n->args, p);
        }
        block_end(P);
        static const char *const endmacro[] = {"endmacro", NULL};
        int loops = P->loops;
        P->loops = 0;
        statements(P, &n->body, endmacro, "macro", line);
        P->loops = loops;
        for (size_t i = 0; i < n->body.n; i++) {
            if (reads_name(n->body.v[i], "varargs"))
                n->op |= 1;
            if (reads_name(n->body.v[i], "kwargs"))
                n->op |= 2;
        }
        next(P);
        if (cur(P)->t == T_NAME) /* {% endmacro name %} */
            next(P);
        block_end(P);
        return n;
    }
    if (skip_name(P, "filter")) {
        struct node *n = mk(P, N_FILTERBLOCK, line);
        struct node *hole = mk(P, E_CONST, line);
        hole->v = jv_undef();
        n->c = filters(P, one_filter(P, hole));
        block_end(P);
        static const char *const endfilter[] = {"endfilter", NULL};
        statements(P, &n->body, endfilter, "filter", line);
        next(P);
        block_end(P);
        return n;
    }
    if (skip_name(P, "generation")) {
        struct node *n = mk(P, N_GENERATION, line);
        block_end(P);
        static const char *const endgen[] = {"endgeneration", NULL};
        statements(P, &n->body, endgen, "generation", line);
        next(P);
        block_end(P);
        return n;
    }
    if (skip_name(P, "break") || skip_name(P, "continue")) {
        struct node *n = mk(P, js_eq(t->s, "break") ? N_BREAK : N_CONTINUE, line);
        if (!P->loops)
            perr(P, ERR_FORMAT, line, "'%s' outside a for loop",
                 n->t == N_BREAK ? "break" : "continue");
        block_end(P);
        return n;
    }
    perr(P, ERR_UNSUPPORTED, line, "statement \"%.*s\" is not supported",
         (int)(t->s.n > 40 ? 40 : t->s.n), t->s.p);
}

static const char *statements(struct parser *P, struct nlist *body, const char *const *ends,
                              const char *ctx, int ctx_line)
{
    enter(P);
    for (;;) {
        const struct token *t = cur(P);
        if (t->t == T_EOF) {
            if (!ends)
                break;
            perr(P, ERR_FORMAT, ctx_line, "{%% %s %%} is never closed (expected {%% %s %%})", ctx,
                 ends[0][0] == 'e' && ends[0][1] == 'l' ? ends[2] ? ends[2] : ends[1] : ends[0]);
        }
        if (t->t == T_DATA) {
            struct node *n = mk(P, N_TEXT, t->line);
            n->v = jv_strn(t->s.p, t->s.n);
            nl_push(P, body, n);
            next(P);
        } else if (t->t == T_VAR_BEGIN) {
            next(P);
            struct node *n = mk(P, N_OUTPUT, t->line);
            n->a = tuple_expr(P, true);
            if (cur(P)->t != T_VAR_END)
                unexpected(P, "'}}'");
            next(P);
            nl_push(P, body, n);
        } else if (t->t == T_BLOCK_BEGIN) {
            next(P);
            const struct token *k = cur(P);
            if (k->t == T_NAME && ends)
                for (const char *const *e = ends; *e; e++)
                    if (js_eq(k->s, *e)) {
                        P->depth--;
                        return *e;
                    }
            if (k->t == T_NAME && k->s.n > 3 && memcmp(k->s.p, "end", 3) == 0)
                perr(P, ERR_FORMAT, k->line, "unexpected {%% %.*s %%}%s%s",
                     (int)(k->s.n > 40 ? 40 : k->s.n), k->s.p, ctx ? " inside " : "",
                     ctx ? ctx : "");
            if (k->t == T_NAME && (js_eq(k->s, "elif") || js_eq(k->s, "else")))
                perr(P, ERR_FORMAT, k->line, "unexpected {%% %.*s %%}", (int)k->s.n, k->s.p);
            nl_push(P, body, statement(P));
        } else {
            unexpected(P, "text or a tag");
        }
    }
    P->depth--;
    return NULL;
}

static void check_list(struct parser *P, const struct nlist *l, bool soft);

/* A filter or test this engine does not know fails the parse, as Jinja2
 * fails the compile, unless it is inside an if (condition or branches) or
 * an inline if, where Jinja2 compiles it and fails only when it is reached;
 * so does the evaluator then. A for loop's body, a macro, a block set and
 * a filter block start a hard scope again, as Jinja2's inner frames. */
static void check_unknown(struct parser *P, const struct node *n, bool soft)
{
    if (!n)
        return;
    if ((n->t == E_FILTER || n->t == E_TEST) && n->fid < 0 && !soft)
        perr(P, ERR_UNSUPPORTED, n->line, "%s \"%.*s\" is not supported",
             n->t == E_FILTER ? "filter" : "test", (int)(n->v.s.n > 60 ? 60 : n->v.s.n), n->v.s.p);
    switch (n->t) {
    case N_IF:
    case E_COND:
        soft = true;
        break;
    case N_FOR:
        check_unknown(P, n->a, soft);
        check_unknown(P, n->b, soft);
        check_unknown(P, n->c, false);
        check_list(P, &n->body, false);
        check_list(P, &n->orelse, false);
        return;
    case N_MACRO:
    case N_SETBLOCK:
    case N_FILTERBLOCK:
        soft = false;
        break;
    default:
        break;
    }
    check_unknown(P, n->a, soft);
    check_unknown(P, n->b, soft);
    check_unknown(P, n->c, soft);
    check_unknown(P, n->d, soft);
    check_list(P, &n->args, soft);
    check_list(P, &n->kw, soft);
    check_list(P, &n->body, soft);
    check_list(P, &n->orelse, soft);
}

static void check_list(struct parser *P, const struct nlist *l, bool soft)
{
    for (size_t i = 0; i < l->n; i++)
        check_unknown(P, l->v[i], soft);
}

int jinja_parse_tokens(const char *name, const struct token *toks, size_t n, struct jarena *a,
                       struct node **root)
{
    /* in the arena, not on the stack: it changes between setjmp and longjmp */
    struct parser *P = ja_alloc(a, sizeof(*P));
    if (!P)
        return err_set(ERR_NOMEM, "%s: out of memory parsing", name);
    P->name = name;
    P->t = toks;
    P->n = n;
    P->a = a;
    if (setjmp(P->fail))
        return P->err;
    struct node *r = mk(P, N_GENERATION, 1); /* a body holder */
    statements(P, &r->body, NULL, NULL, 1);
    check_unknown(P, r, false);
    *root = r;
    return 0;
}
