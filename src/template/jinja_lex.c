/* The Jinja lexer, with Jinja2 3.1's whitespace rules under transformers'
 * settings (trim_blocks, lstrip_blocks, keep_trailing_newline off):
 *  - newlines (\r\n, \r) become \n, and one trailing newline is dropped;
 *  - {%- {{- {#- strip all whitespace before the tag; -%} -}} -#} all after;
 *  - lstrip_blocks: before a {% or {# tag (not {{, not {%+), the spaces and
 *    tabs from the start of its line are removed when nothing else is there;
 *    "start of line" includes the start of the template and the position
 *    right after a tag whose match ended in a newline;
 *  - trim_blocks: one \n right after %} or #} is removed (not after }},
 *    not after +%}).
 * Tag ends are only recognised where brackets are balanced, as in Jinja2.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "template/jinja_impl.h"

struct lexer {
    const char *name;
    const char *s;
    size_t n, pos;
    int line;
    struct jarena *a;
    struct token *v;
    size_t nt, cap;
};

static int lex_err(struct lexer *L, int code, int line, const char *what)
{
    return err_set(code, "%s line %d: %s", L->name, line, what);
}

static int push(struct lexer *L, struct token t)
{
    if (L->nt == L->cap) {
        size_t cap = L->cap ? L->cap * 2 : 256;
        struct token *v = ja_alloc(L->a, cap * sizeof(*v));
        if (!v)
            return err_set(ERR_NOMEM, "%s: out of memory lexing", L->name);
        if (L->nt)
            memcpy(v, L->v, L->nt * sizeof(*v));
        L->v = v;
        L->cap = cap;
    }
    L->v[L->nt++] = t;
    return 0;
}

static int is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

static int count_nl(const char *p, size_t n)
{
    int k = 0;
    for (size_t i = 0; i < n; i++)
        k += p[i] == '\n';
    return k;
}

/* Emits text [b, e) as T_DATA when not empty. */
static int push_data(struct lexer *L, size_t b, size_t e, int line)
{
    if (e <= b)
        return 0;
    struct token t = {.t = T_DATA, .line = line, .s = {L->s + b, e - b}};
    return push(L, t);
}

/* Appends the UTF-8 of code point c. */
static size_t utf8_put(char *o, unsigned long c)
{
    if (c < 0x80) {
        o[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        o[0] = (char)(0xC0 | (c >> 6));
        o[1] = (char)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        o[0] = (char)(0xE0 | (c >> 12));
        o[1] = (char)(0x80 | ((c >> 6) & 0x3F));
        o[2] = (char)(0x80 | (c & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (c >> 18));
    o[1] = (char)(0x80 | ((c >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((c >> 6) & 0x3F));
    o[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* A string literal at L->pos (a quote): Python's unicode-escape decoding of
 * its body, as Jinja2 does. */
static int lex_string(struct lexer *L, struct token *t)
{
    char q = L->s[L->pos];
    size_t b = L->pos + 1, e = b;
    while (e < L->n && L->s[e] != q) {
        if (L->s[e] == '\\' && e + 1 < L->n)
            e++;
        e++;
    }
    if (e >= L->n)
        return lex_err(L, ERR_FORMAT, L->line, "unterminated string");
    char *o = ja_alloc(L->a, (e - b) + 1);
    if (!o)
        return err_set(ERR_NOMEM, "%s: out of memory lexing", L->name);
    size_t k = 0;
    for (size_t i = b; i < e; i++) {
        char c = L->s[i];
        if (c != '\\') {
            o[k++] = c;
            continue;
        }
        char d = L->s[++i];
        int nd = 0;
        switch (d) {
        case 'n':
            o[k++] = '\n';
            break;
        case 't':
            o[k++] = '\t';
            break;
        case 'r':
            o[k++] = '\r';
            break;
        case '\\':
            o[k++] = '\\';
            break;
        case '\'':
            o[k++] = '\'';
            break;
        case '"':
            o[k++] = '"';
            break;
        case 'a':
            o[k++] = '\a';
            break;
        case 'b':
            o[k++] = '\b';
            break;
        case 'f':
            o[k++] = '\f';
            break;
        case 'v':
            o[k++] = '\v';
            break;
        case '\n':
            break;
        case 'N':
            return lex_err(L, ERR_UNSUPPORTED, L->line,
                           "\\N{...} escapes in strings are not supported");
        case 'x':
            nd = 2;
            break;
        case 'u':
            nd = 4;
            break;
        case 'U':
            nd = 8;
            break;
        default:
            if (d >= '0' && d <= '7') {
                unsigned c8 = 0;
                int m = 0;
                while (m < 3 && i < e && L->s[i] >= '0' && L->s[i] <= '7')
                    c8 = c8 * 8 + (unsigned)(L->s[i++] - '0'), m++;
                i--;
                k += utf8_put(o + k, c8);
            } else {
                o[k++] = '\\';
                o[k++] = d;
            }
        }
        if (nd) {
            unsigned long cp = 0;
            for (int m = 0; m < nd; m++) {
                int h = i + 1 + m < e ? hexval(L->s[i + 1 + m]) : -1;
                if (h < 0)
                    return lex_err(L, ERR_FORMAT, L->line,
                                   "truncated \\x, \\u or \\U escape in a string");
                cp = cp * 16 + (unsigned long)h;
            }
            if (cp > 0x10FFFF)
                return lex_err(L, ERR_FORMAT, L->line, "\\U escape out of range");
            i += (size_t)nd;
            k += utf8_put(o + k, cp); /* at most 4 bytes from >= 4 source bytes */
        }
    }
    t->t = T_STRING;
    t->s.p = o;
    t->s.n = k;
    L->line += count_nl(L->s + b, e - b);
    L->pos = e + 1;
    return 0;
}

static const struct {
    const char *s;
    int op;
} ops[] = {
    {"//", OP_FLOORDIV}, {"**", OP_POW},   {"==", OP_EQ},      {"!=", OP_NE},      {">=", OP_GE},
    {"<=", OP_LE},       {"+", OP_ADD},    {"-", OP_SUB},      {"*", OP_MUL},      {"/", OP_DIV},
    {"%", OP_MOD},       {"~", OP_TILDE},  {"[", OP_LBRACKET}, {"]", OP_RBRACKET}, {"(", OP_LPAREN},
    {")", OP_RPAREN},    {"{", OP_LBRACE}, {"}", OP_RBRACE},   {">", OP_GT},       {"<", OP_LT},
    {"=", OP_ASSIGN},    {".", OP_DOT},    {":", OP_COLON},    {"|", OP_PIPE},     {",", OP_COMMA},
    {";", OP_SEMICOLON},
};

/* The tokens of one {{ }} or {% %} tag, from L->pos (after its opening and
 * sign) through its end; block says which. Returns 0 and leaves L->pos after
 * the end (and what the end strips), *ended_nl whether that ended in \n. */
static int lex_tag(struct lexer *L, bool block, bool *ended_nl)
{
    int depth = 0;
    char e1 = block ? '%' : '}';
    for (;;) {
        while (L->pos < L->n && is_ws(L->s[L->pos])) {
            L->line += L->s[L->pos] == '\n';
            L->pos++;
        }
        if (L->pos >= L->n)
            return lex_err(L, ERR_FORMAT, L->line,
                           block ? "unexpected end of template in {% %}"
                                 : "unexpected end of template in {{ }}");
        const char *p = L->s + L->pos;
        size_t left = L->n - L->pos;
        /* the end of the tag, only with brackets balanced */
        if (depth == 0) {
            int sign = 0;
            size_t k = 0;
            if ((p[0] == '-' || (block && p[0] == '+')) && left >= 3 && p[1] == e1 && p[2] == '}')
                sign = p[0], k = 3;
            else if (left >= 2 && p[0] == e1 && p[1] == '}')
                k = 2;
            if (k) {
                struct token t = {.t = block ? T_BLOCK_END : T_VAR_END, .line = L->line};
                int rc = push(L, t);
                if (rc)
                    return rc;
                L->pos += k;
                *ended_nl = false;
                if (sign == '-') {
                    while (L->pos < L->n && is_ws(L->s[L->pos])) {
                        *ended_nl = L->s[L->pos] == '\n';
                        L->line += *ended_nl;
                        L->pos++;
                    }
                } else if (block && sign == 0 && L->pos < L->n && L->s[L->pos] == '\n') {
                    L->pos++; /* trim_blocks */
                    L->line++;
                    *ended_nl = true;
                }
                return 0;
            }
        }
        struct token t = {.line = L->line};
        char c = p[0];
        int rc;
        if (c == '\'' || c == '"') {
            if ((rc = lex_string(L, &t)))
                return rc;
        } else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') {
            size_t k = 1;
            while (k < left && ((p[k] >= 'a' && p[k] <= 'z') || (p[k] >= 'A' && p[k] <= 'Z') ||
                                (p[k] >= '0' && p[k] <= '9') || p[k] == '_'))
                k++;
            t.t = T_NAME;
            t.s.p = p;
            t.s.n = k;
            L->pos += k;
        } else if (c >= '0' && c <= '9') {
            /* digits with _ separators; a float needs digits after the dot */
            char num[64];
            size_t k = 0, m = 0;
            bool isf = false;
            while (k < left &&
                   ((p[k] >= '0' && p[k] <= '9') ||
                    (p[k] == '_' && k + 1 < left && p[k + 1] >= '0' && p[k + 1] <= '9'))) {
                if (p[k] != '_' && m < sizeof(num) - 1)
                    num[m++] = p[k];
                k++;
            }
            if (k + 1 < left && p[k] == '.' && p[k + 1] >= '0' && p[k + 1] <= '9') {
                isf = true;
                if (m < sizeof(num) - 1)
                    num[m++] = '.';
                k++;
                while (k < left && ((p[k] >= '0' && p[k] <= '9') || p[k] == '_')) {
                    if (p[k] != '_' && m < sizeof(num) - 1)
                        num[m++] = p[k];
                    k++;
                }
            }
            if (k < left && (p[k] == 'e' || p[k] == 'E')) {
                size_t j = k + 1;
                if (j < left && (p[j] == '+' || p[j] == '-'))
                    j++;
                if (j < left && p[j] >= '0' && p[j] <= '9') {
                    isf = true;
                    for (size_t x = k; x < j && m < sizeof(num) - 1; x++)
                        num[m++] = p[x];
                    while (j < left && p[j] >= '0' && p[j] <= '9') {
                        if (m < sizeof(num) - 1)
                            num[m++] = p[j];
                        j++;
                    }
                    k = j;
                }
            }
            num[m] = 0;
            if (m >= sizeof(num) - 1)
                return lex_err(L, ERR_UNSUPPORTED, L->line, "number literal too long");
            if (isf) {
                t.t = T_FLOAT;
                t.f = strtod(num, NULL);
            } else {
                t.t = T_INT;
                errno = 0;
                t.i = strtoll(num, NULL, 10);
                if (errno == ERANGE)
                    return lex_err(L, ERR_UNSUPPORTED, L->line,
                                   "integer literal beyond 64 bits is not supported");
            }
            L->pos += k;
        } else {
            size_t i;
            for (i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
                size_t k = strlen(ops[i].s);
                if (k <= left && memcmp(p, ops[i].s, k) == 0)
                    break;
            }
            if (i == sizeof(ops) / sizeof(ops[0])) {
                char msg[64];
                snprintf(msg, sizeof(msg), "unexpected character '%c'",
                         c >= 32 && c < 127 ? c : '?');
                return lex_err(L, ERR_FORMAT, L->line, msg);
            }
            t.t = T_OP;
            t.op = ops[i].op;
            if (t.op == OP_LBRACKET || t.op == OP_LPAREN || t.op == OP_LBRACE)
                depth++;
            else if ((t.op == OP_RBRACKET || t.op == OP_RPAREN || t.op == OP_RBRACE) && depth > 0)
                depth--;
            L->pos += strlen(ops[i].s);
        }
        if ((rc = push(L, t)))
            return rc;
    }
}

/* At L->pos a "{% raw %}" tag was recognised ending at raw_end; finds
 * {% endraw %}, emits the body as data and moves past it. */
static int lex_raw(struct lexer *L, bool *ended_nl)
{
    int line = L->line;
    for (size_t i = L->pos; i + 1 < L->n; i++) {
        if (L->s[i] != '{' || L->s[i + 1] != '%')
            continue;
        size_t j = i + 2;
        int sign = 0;
        if (j < L->n && (L->s[j] == '-' || L->s[j] == '+'))
            sign = L->s[j++];
        while (j < L->n && is_ws(L->s[j]))
            j++;
        if (j + 6 > L->n || memcmp(L->s + j, "endraw", 6) != 0)
            continue;
        j += 6;
        while (j < L->n && is_ws(L->s[j]))
            j++;
        int esign = 0;
        if (j < L->n && (L->s[j] == '-' || L->s[j] == '+'))
            esign = L->s[j++];
        if (j + 2 > L->n || L->s[j] != '%' || L->s[j + 1] != '}')
            continue;
        j += 2;
        /* the body, with the end tag's left-side whitespace control */
        size_t e = i;
        if (sign == '-') {
            while (e > L->pos && is_ws(L->s[e - 1]))
                e--;
        } else if (sign != '+') {
            size_t l = e;
            while (l > L->pos && (L->s[l - 1] == ' ' || L->s[l - 1] == '\t'))
                l--;
            if ((l > L->pos && L->s[l - 1] == '\n') || (l == L->pos && *ended_nl))
                e = l;
        }
        int rc = push_data(L, L->pos, e, line);
        if (rc)
            return rc;
        L->line += count_nl(L->s + L->pos, j - L->pos);
        *ended_nl = false;
        if (esign == '-') {
            while (j < L->n && is_ws(L->s[j])) {
                *ended_nl = L->s[j] == '\n';
                L->line += *ended_nl;
                j++;
            }
        } else if (esign == 0 && j < L->n && L->s[j] == '\n') {
            j++;
            L->line++;
            *ended_nl = true;
        }
        L->pos = j;
        return 0;
    }
    return lex_err(L, ERR_FORMAT, line, "{% raw %} without {% endraw %}");
}

/* Whether the block tag at L->pos (just past "{%" and its sign) is
 * "raw %}"; then sets *end past it (and its trim). */
static bool is_raw_tag(struct lexer *L, size_t *end, int *esign)
{
    size_t j = L->pos;
    while (j < L->n && is_ws(L->s[j]))
        j++;
    if (j + 3 > L->n || memcmp(L->s + j, "raw", 3) != 0)
        return false;
    j += 3;
    while (j < L->n && is_ws(L->s[j]))
        j++;
    *esign = 0;
    if (j < L->n && (L->s[j] == '-' || L->s[j] == '+'))
        *esign = L->s[j++];
    if (j + 2 > L->n || L->s[j] != '%' || L->s[j + 1] != '}')
        return false;
    *end = j + 2;
    return true;
}

int jinja_lex(const char *name, const char *src, size_t len, struct jarena *a, struct token **toks,
              size_t *n)
{
    struct lexer L = {.name = name, .line = 1, .a = a};
    /* newline normalisation and the dropped trailing newline */
    char *s = ja_alloc(a, len + 1);
    if (!s)
        return err_set(ERR_NOMEM, "%s: out of memory", name);
    size_t k = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[k++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n')
                i++;
        } else {
            s[k++] = src[i];
        }
    }
    if (k && s[k - 1] == '\n')
        k--;
    L.s = s;
    L.n = k;
    bool line_start = true;
    int rc;
    while (L.pos < L.n) {
        /* the next tag opening */
        size_t i = L.pos;
        int kind = 0; /* '{' var, '%' block, '#' comment */
        for (; i + 1 < L.n; i++)
            if (L.s[i] == '{' && (L.s[i + 1] == '{' || L.s[i + 1] == '%' || L.s[i + 1] == '#')) {
                kind = L.s[i + 1];
                break;
            }
        if (!kind) {
            if ((rc = push_data(&L, L.pos, L.n, L.line)))
                return rc;
            L.line += count_nl(L.s + L.pos, L.n - L.pos);
            L.pos = L.n;
            break;
        }
        int sign = 0;
        if (i + 2 < L.n && (L.s[i + 2] == '-' || L.s[i + 2] == '+'))
            sign = L.s[i + 2];
        if (kind == '{' && sign == '+')
            sign = 0; /* {{+ is {{ then + */
        size_t e = i; /* end of the text before the tag */
        if (sign == '-') {
            while (e > L.pos && is_ws(L.s[e - 1]))
                e--;
        } else if (sign != '+' && kind != '{') {
            size_t l = e;
            while (l > L.pos && L.s[l - 1] != '\n')
                l--;
            if (l > L.pos || line_start) {
                size_t x = l;
                while (x < e && is_ws(L.s[x]))
                    x++;
                if (x == e)
                    e = l;
            }
        }
        int text_line = L.line;
        if ((rc = push_data(&L, L.pos, e, text_line)))
            return rc;
        L.line += count_nl(L.s + L.pos, i - L.pos);
        L.pos = i + 2 + (sign ? 1 : 0);
        line_start = false;
        if (kind == '#') {
            size_t j = L.pos;
            while (j + 1 < L.n && !(L.s[j] == '#' && L.s[j + 1] == '}'))
                j++;
            if (j + 1 >= L.n)
                return lex_err(&L, ERR_FORMAT, L.line, "unterminated comment");
            int esign = j > L.pos && (L.s[j - 1] == '-' || L.s[j - 1] == '+') ? L.s[j - 1] : 0;
            L.line += count_nl(L.s + L.pos, j - L.pos);
            L.pos = j + 2;
            if (esign == '-') {
                while (L.pos < L.n && is_ws(L.s[L.pos])) {
                    line_start = L.s[L.pos] == '\n';
                    L.line += line_start;
                    L.pos++;
                }
            } else if (esign == 0 && L.pos < L.n && L.s[L.pos] == '\n') {
                L.pos++;
                L.line++;
                line_start = true;
            }
            continue;
        }
        size_t raw_end;
        int raw_sign;
        if (kind == '%' && is_raw_tag(&L, &raw_end, &raw_sign)) {
            L.line += count_nl(L.s + L.pos, raw_end - L.pos);
            L.pos = raw_end;
            if (raw_sign == '-') {
                while (L.pos < L.n && is_ws(L.s[L.pos])) {
                    line_start = L.s[L.pos] == '\n';
                    L.line += line_start;
                    L.pos++;
                }
            } else if (raw_sign == 0 && L.pos < L.n && L.s[L.pos] == '\n') {
                L.pos++;
                L.line++;
                line_start = true;
            }
            if ((rc = lex_raw(&L, &line_start)))
                return rc;
            continue;
        }
        struct token t = {.t = kind == '{' ? T_VAR_BEGIN : T_BLOCK_BEGIN, .line = L.line};
        if ((rc = push(&L, t)) || (rc = lex_tag(&L, kind == '%', &line_start)))
            return rc;
    }
    struct token t = {.t = T_EOF, .line = L.line};
    if ((rc = push(&L, t)))
        return rc;
    *toks = L.v;
    *n = L.nt;
    return 0;
}
