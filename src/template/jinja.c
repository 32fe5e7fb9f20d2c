/* The engine's public entry points (jinja.h): parsing a template into its
 * own arena, and a render: its state on the heap (it changes between setjmp
 * and a failure's longjmp), the globals, the arena freed on every path. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "template/jinja_impl.h"

int jinja_parse(const char *name, const char *src, size_t len, struct jinja_template **out)
{
    *out = NULL;
    if (len > JINJA_MAX_SOURCE)
        return err_set(ERR_INVALID, "%s: %zu bytes of source (limit %zu)", name, len,
                       JINJA_MAX_SOURCE);
    struct jinja_template *t = calloc(1, sizeof(*t));
    if (!t || !(t->name = strdup(name))) {
        free(t);
        return err_set(ERR_NOMEM, "out of memory");
    }
    struct token *toks;
    size_t n;
    int rc = jinja_lex(t->name, src, len, &t->arena, &toks, &n);
    if (!rc)
        rc = jinja_parse_tokens(t->name, toks, n, &t->arena, &t->root);
    if (rc) {
        jinja_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

void jinja_free(struct jinja_template *t)
{
    if (!t)
        return;
    ja_free_all(&t->arena);
    free(t->name);
    free(t);
}

int jinja_render(const struct jinja_template *t, json_t *vars, long long now,
                 const struct jinja_limits *lim, char **out, size_t *len)
{
    *out = NULL;
    if (len)
        *len = 0;
    /* on the heap: everything that changes between setjmp and longjmp */
    struct render *r = calloc(1, sizeof(*r));
    if (!r)
        return err_set(ERR_NOMEM, "out of memory");
    r->t = t;
    r->max_output = lim && lim->max_output ? lim->max_output : (size_t)4 << 20;
    r->arena.limit = lim && lim->max_memory ? lim->max_memory : (size_t)256 << 20;
    r->max_steps = lim && lim->max_steps ? lim->max_steps : 20000000;
    r->max_loops = lim && lim->max_loops ? lim->max_loops : 1000000;
    r->max_depth = lim && lim->max_depth ? lim->max_depth : 64;
    r->now = now;
    r->line = 1;
    int rc = 0;
    if (setjmp(r->fail)) {
        rc = r->err;
        goto done;
    }
    static const char *const funcs[] = {"range",        "dict",   "namespace", "raise_exception",
                                        "strftime_now", "joiner", "cycler"};
    for (size_t i = 0; i < sizeof(funcs) / sizeof(funcs[0]); i++)
        jv_dict_set(r, &r->globals, jv_strn(funcs[i], strlen(funcs[i])), jglobal_func(r, funcs[i]));
    if (vars && json_is_object(vars)) {
        const char *k;
        json_t *v;
        json_object_foreach(vars, k, v)
            jv_dict_set(r, &r->globals, jv_str_copy(r, k, strlen(k)), jv_from_json(r, v));
    }
    r->root = jr_alloc(r, sizeof(*r->root));
    struct jbuf *b = jr_alloc(r, sizeof(*b));
    jexec_body(r, r->root, &t->root->body, b);
    char *s = malloc(b->n + 1);
    if (!s) {
        rc = err_set(ERR_NOMEM, "out of memory");
        goto done;
    }
    if (b->n)
        memcpy(s, b->p, b->n);
    s[b->n] = 0;
    *out = s;
    if (len)
        *len = b->n;
done:
    ja_free_all(&r->arena);
    free(r);
    return rc;
}
