/* A Jinja2 engine for the subset of the language that Hugging Face chat
 * templates use, with the environment transformers renders them in:
 * trim_blocks and lstrip_blocks on, loop controls (break/continue), the
 * {% generation %} block, the default Undefined, and an immutable sandbox
 * (list/dict mutating methods are refused). What is not implemented fails at
 * parse time (or at the first render that reaches it) with a one-line message
 * naming the construct and its template line.
 *
 * A parsed template is immutable: any number of threads may render it at
 * once. A render allocates from an arena of its own, freed before it
 * returns, and is bounded by struct jinja_limits.
 */
#ifndef SHARDSWAP_TEMPLATE_JINJA_H
#define SHARDSWAP_TEMPLATE_JINJA_H

#include <jansson.h>
#include <stddef.h>

struct jinja_template;

/* The most template source jinja_parse accepts. */
#define JINJA_MAX_SOURCE ((size_t)1 << 20)

/* Parses len bytes of template text. name prefixes every message the
 * template's errors give ("chat template line 12: ..."); it is copied.
 * Errors: ERR_FORMAT (syntax), ERR_UNSUPPORTED (a construct, filter, test
 * or statement this engine does not implement), ERR_INVALID (source over
 * JINJA_MAX_SOURCE), ERR_NOMEM. */
int jinja_parse(const char *name, const char *src, size_t len, struct jinja_template **out);
void jinja_free(struct jinja_template *t); /* NULL-safe */

struct jinja_limits {
    size_t max_output;   /* bytes of output (and of any captured block); 0: 4 MiB */
    size_t max_memory;   /* bytes the render may allocate; 0: 256 MiB */
    long long max_steps; /* expressions + statements evaluated; 0: 20 million */
    long long max_loops; /* loop iterations, all loops together; 0: 1 million */
    int max_depth;       /* macro call nesting; 0: 64 */
};

/* The template raised: raise_exception(msg) was called; err_msg() is msg. */
#define JINJA_RAISED (-100)

/* Renders t with the variables of vars (a JSON object: each member becomes a
 * global; JSON null is None). Besides Jinja's range, dict, namespace, joiner
 * and cycler, the globals raise_exception(msg) and strftime_now(fmt) exist;
 * strftime_now formats now (unix seconds, local time; 0: the clock). *out is
 * malloc'd and NUL-terminated; the caller frees it.
 * Errors: JINJA_RAISED; ERR_INVALID for a limit exceeded (the message names
 * it) or an operation Jinja2 refuses (wrong types, undefined attribute of an
 * undefined value, ...), naming the template line; ERR_UNSUPPORTED for a
 * construct reached at render time that is not implemented; ERR_NOMEM. */
int jinja_render(const struct jinja_template *t, json_t *vars, long long now,
                 const struct jinja_limits *lim, char **out, size_t *len);

#endif
