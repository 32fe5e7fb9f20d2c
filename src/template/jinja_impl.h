/* Inside the Jinja engine: the arena, values, tokens, the AST, and the render
 * state that the lexer, parser, evaluator and filters share. */
#ifndef SHARDSWAP_TEMPLATE_JINJA_IMPL_H
#define SHARDSWAP_TEMPLATE_JINJA_IMPL_H

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "template/jinja.h"

/* ---- arena: bump allocation in chunks, freed all at once ---- */
struct arena_chunk;
struct jarena {
    struct arena_chunk *head;
    size_t used, limit; /* bytes taken from malloc; limit 0: none */
};
void *ja_alloc(struct jarena *a, size_t n); /* zeroed; NULL when out of memory or over limit */
void ja_free_all(struct jarena *a);

/* ---- values ---- */
enum jk {
    JK_UNDEF, /* s holds the name that was undefined, for messages */
    JK_NONE,
    JK_BOOL,
    JK_INT,
    JK_FLOAT,
    JK_STR,
    JK_LIST,  /* l; l->tuple for tuples */
    JK_DICT,  /* d */
    JK_NS,    /* d: a namespace() */
    JK_MACRO, /* m */
    JK_FUNC,  /* fn: a global function or a bound method */
    JK_LOOP,  /* loop: the for loop's `loop` */
};

struct jlist;
struct jdict;
struct jfunc;
struct jloop;
struct node;

struct jstr {
    const char *p; /* not NUL-terminated */
    size_t n;
};

/* The buffer a concatenation result lives in, with room to grow: `s = s ~ x`
 * in a loop appends in place when s is the buffer's longest view (views are
 * immutable prefixes, so shorter ones stay valid), instead of copying s
 * each time into an arena that frees nothing until the render ends. */
struct jsb {
    char *p;
    size_t used, cap;
};

struct jv {
    enum jk k;
    bool safe;      /* JK_STR: a Markup (from |safe, |e): `+` escapes a plain str beside it */
    struct jsb *sb; /* JK_STR: the buffer it may grow in (a concatenation), or NULL */
    union {
        bool b;
        long long i;
        double f;
        struct jstr s;
        struct jlist *l;
        struct jdict *d;
        struct jmacro *m;
        struct jfunc *fn;
        struct jloop *loop;
    };
};

struct jlist {
    size_t n, cap;
    struct jv *v;
    bool tuple;
    bool gen; /* what select/map/unique give, a Python generator: iterable, always true,
                 but no len(), no index, not JSON */
};

struct jdict { /* insertion-ordered, linear lookup */
    size_t n, cap;
    struct jv *key, *val;
};

struct frame;
struct jmacro {
    const struct node *def; /* the N_MACRO */
    struct frame *closure;  /* the scope it was defined in: its body sees that scope's names */
};

struct jfunc {
    int id;          /* enum jfn in jinja_filters.c */
    struct jv self;  /* the bound object of a method; JK_UNDEF for a global */
    long long state; /* joiner/cycler position */
};

struct jloop {
    long long index0, length;
    struct jv prev, next;
    bool has_prev, has_next;
};

/* ---- tokens ---- */
enum tt {
    T_EOF,
    T_DATA,        /* text between tags: s */
    T_VAR_BEGIN,   /* {{ */
    T_VAR_END,     /* }} */
    T_BLOCK_BEGIN, /* {% */
    T_BLOCK_END,   /* %} */
    T_NAME,
    T_STRING, /* s, escapes processed */
    T_INT,
    T_FLOAT,
    T_OP, /* op: one of the OP_ codes below */
};

enum op {
    OP_ADD = 1,
    OP_SUB,
    OP_MUL,
    OP_DIV,
    OP_FLOORDIV,
    OP_MOD,
    OP_POW,
    OP_TILDE,
    OP_LBRACKET,
    OP_RBRACKET,
    OP_LPAREN,
    OP_RPAREN,
    OP_LBRACE,
    OP_RBRACE,
    OP_EQ,
    OP_NE,
    OP_GT,
    OP_GE,
    OP_LT,
    OP_LE,
    OP_ASSIGN,
    OP_DOT,
    OP_COLON,
    OP_PIPE,
    OP_COMMA,
    OP_SEMICOLON,
    /* not tokens: node ops */
    OP_IN,
    OP_NOTIN,
    OP_NEG,
    OP_POS,
    OP_NOT,
    OP_AND,
    OP_OR,
};

struct token {
    enum tt t;
    int line;
    int op;
    long long i;
    double f;
    struct jstr s;
};

/* ---- AST ---- */
enum nt {
    /* statements */
    N_TEXT,     /* v: the text */
    N_OUTPUT,   /* a */
    N_IF,       /* a cond, body, orelse */
    N_FOR,      /* a target, b iter, c filter, body, orelse, recursive unused */
    N_SET,      /* a target, b value */
    N_SETBLOCK, /* a target, c filter chain (operand NULL), body */
    N_MACRO,    /* v name, args params (E_NAME, a default), body; op 1: reads varargs, 2: kwargs */
    N_FILTERBLOCK, /* c filter chain applied to the body's output */
    N_GENERATION,  /* body */
    N_BREAK,
    N_CONTINUE,
    /* expressions */
    E_CONST,   /* v */
    E_NAME,    /* v.s name */
    E_ATTR,    /* a . v.s */
    E_ITEM,    /* a [ b ] */
    E_SLICE,   /* a [ b : c : d ], any of b c d NULL */
    E_CALL,    /* a ( args, kw ) */
    E_FILTER,  /* v.s name, a operand, args, kw */
    E_TEST,    /* v.s name, a operand, args; op 1 when negated */
    E_BIN,     /* op, a, b */
    E_UN,      /* op, a */
    E_COND,    /* a if b else c */
    E_LIST,    /* args */
    E_TUPLE,   /* args */
    E_DICT,    /* args keys, kw values (as nodes, same count) */
    E_KW,      /* v.s name = a */
    E_COMPARE, /* a, then args: E_BIN nodes holding op and right operand */
};

struct nlist {
    struct node **v;
    size_t n, cap;
};

struct node {
    enum nt t;
    int line;
    int op;
    struct jv v;
    struct node *a, *b, *c, *d;
    struct nlist args, kw, body, orelse;
    int fid; /* filter / test id, resolved at parse */
};

struct jinja_template {
    char *name;
    struct jarena arena; /* the AST and its strings */
    struct node *root;   /* N_TEXT-less list holder: body */
};

/* ---- lexer / parser ---- */
/* Tokenizes src into *toks (allocated in a); returns 0 or an err code. */
int jinja_lex(const char *name, const char *src, size_t len, struct jarena *a, struct token **toks,
              size_t *n);
int jinja_parse_tokens(const char *name, const struct token *toks, size_t n, struct jarena *a,
                       struct node **root);
int jinja_filter_id(const char *name, size_t n); /* -1: unknown */
int jinja_test_id(const char *name, size_t n);

/* ---- render state ---- */
struct jbuf {
    char *p;
    size_t n, cap;
};

struct frame {
    struct frame *parent;
    struct jdict vars;
};

struct render {
    const struct jinja_template *t;
    struct jarena arena;
    jmp_buf fail;
    int err;
    size_t max_output;
    long long steps, max_steps, loops, max_loops;
    int depth, max_depth;
    int nest; /* jeval recursion, all macro calls together: bounds the C stack */
    long long now;
    struct frame *root; /* the template's top-level frame */
    struct jdict globals;
    int line;    /* of the node being evaluated, for messages */
    int loopctl; /* 1 break, 2 continue */
};

/* Fails the render: records code and a message naming the line, then
 * longjmps out. */
_Noreturn void jr_fail(struct render *r, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void *jr_alloc(struct render *r, size_t n);
/* Fails the render for a use of the undefined value u Jinja2 refuses
 * (attribute, call, arithmetic, int()): "'name' is undefined". */
_Noreturn void jr_undefined(struct render *r, struct jv u);
/* Counts work that is not one evaluation (a byte comparison loop) against
 * the step limit: about one step per 64 bytes. */
void jr_charge(struct render *r, size_t bytes);
/* The byte offset of needle in hay at or after from, or -1 (memmem: linear). */
long long js_search(struct jstr hay, size_t from, struct jstr needle);

/* values */
static inline struct jv jv_undef(void)
{
    struct jv v = {.k = JK_UNDEF};
    return v;
}
static inline struct jv jv_none(void)
{
    struct jv v = {.k = JK_NONE};
    return v;
}
static inline struct jv jv_bool(bool b)
{
    struct jv v = {.k = JK_BOOL, .b = b};
    return v;
}
static inline struct jv jv_int(long long i)
{
    struct jv v = {.k = JK_INT, .i = i};
    return v;
}
static inline struct jv jv_float(double f)
{
    struct jv v = {.k = JK_FLOAT, .f = f};
    return v;
}
static inline struct jv jv_strn(const char *p, size_t n)
{
    struct jv v = {.k = JK_STR, .s = {p, n}};
    return v;
}
struct jv jv_str_copy(struct render *r, const char *p, size_t n);
struct jv jv_list_new(struct render *r, size_t cap);
struct jv jv_dict_new(struct render *r);
void jv_list_push(struct render *r, struct jlist *l, struct jv v);
void jv_dict_set(struct render *r, struct jdict *d, struct jv k, struct jv v);
struct jv *jv_dict_get(const struct jdict *d, struct jv k);
struct jv *jv_dict_gets(const struct jdict *d, const char *k, size_t n);
struct jv jv_from_json(struct render *r, const json_t *j);
bool jv_truthy(struct jv v);
bool jv_eq(struct jv a, struct jv b);
int jv_cmp(struct render *r, struct jv a, struct jv b); /* <0 0 >0; fails on unorderable */
const char *jv_type_name(struct jv v);
bool jv_is_num(struct jv v); /* int, float or bool */
double jv_num(struct jv v);

void jb_put(struct render *r, struct jbuf *b, const char *p, size_t n);
static inline void jb_puts(struct render *r, struct jbuf *b, struct jstr s)
{
    jb_put(r, b, s.p, s.n);
}
void jb_printf(struct render *r, struct jbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void jv_str_into(struct render *r, struct jbuf *b, struct jv v);  /* Python str() */
void jv_repr_into(struct render *r, struct jbuf *b, struct jv v); /* Python repr() */
struct jstr jv_to_str(struct render *r, struct jv v);             /* str(), arena-owned */
void jv_float_repr(double f, char *out, size_t cap);
/* json.dumps(v, ensure_ascii=False, indent=indent (<0: None), separators, sort_keys) */
void jv_tojson(struct render *r, struct jbuf *b, struct jv v, const char *indent, int level,
               const char *item_sep, const char *key_sep, bool sort_keys);

/* UTF-8 */
size_t ju_len(struct jstr s);                          /* code points */
size_t ju_offset(struct jstr s, size_t cp);            /* byte offset of code point cp */
struct jv jv_iter_list(struct render *r, struct jv v); /* list of what `for` iterates */

/* evaluator */
/* Runs statements, writing into out; stops early at break/continue (r->loopctl). */
void jexec_body(struct render *r, struct frame *f, const struct nlist *body, struct jbuf *out);
struct jv jeval(struct render *r, struct frame *f, const struct node *n);
struct jv jcall(struct render *r, struct frame *f, struct jv fn, struct jv *args, size_t nargs,
                struct jstr *kwn, struct jv *kwv, size_t nkw);
struct jv jgetattr(struct render *r, struct jv obj, struct jstr name);
struct jv jgetitem(struct render *r, struct jv obj, struct jv key);

/* filters, tests, methods (jinja_filters.c) */
struct jv jfilter(struct render *r, struct frame *f, int fid, struct jv v, struct jv *args,
                  size_t nargs, struct jstr *kwn, struct jv *kwv, size_t nkw);
bool jtest(struct render *r, struct frame *f, int tid, struct jv v, struct jv *args, size_t nargs);
/* a method of obj by name (JK_FUNC bound), or JK_UNDEF when it has none */
struct jv jmethod(struct render *r, struct jv obj, struct jstr name);
struct jv jglobal_func(struct render *r, const char *name);
struct jv jloop_cycle(struct render *r, struct jv loop); /* loop.cycle, bound */
struct jv jfunc_call(struct render *r, struct frame *f, struct jfunc *fn, struct jv *args,
                     size_t nargs, struct jstr *kwn, struct jv *kwv, size_t nkw);

static inline bool js_eq(struct jstr s, const char *lit)
{
    size_t i = 0;
    for (; i < s.n; i++)
        if (lit[i] != s.p[i] || !lit[i])
            return false;
    return lit[i] == 0;
}

#endif
