/* String operations the filters and the str methods share, with Python's
 * semantics (whitespace as str.isspace sees it; case mapping ASCII only).
 * Results live in the render's arena. */
#ifndef SHARDSWAP_TEMPLATE_JINJA_STR_H
#define SHARDSWAP_TEMPLATE_JINJA_STR_H

#include "template/jinja_impl.h"

struct jv js_lower(struct render *r, struct jstr s);
struct jv js_upper(struct render *r, struct jstr s);
struct jv js_capitalize(struct render *r, struct jstr s);
struct jv js_title(struct render *r, struct jstr s);        /* str.title() */
struct jv js_title_filter(struct render *r, struct jstr s); /* Jinja's |title */
bool js_is_case(struct jstr s, bool upper);                 /* str.isupper() / islower() */
/* str.strip(chars) (which: 1 left, 2 right, 3 both); chars None: whitespace */
struct jv js_strip(struct render *r, struct jstr s, struct jv chars, int which);
struct jv js_replace(struct render *r, struct jstr s, struct jstr old, struct jstr nw,
                     long long count);
/* str.split(sep, maxsplit) / rsplit; sep None: runs of whitespace */
struct jv js_split(struct render *r, struct jstr s, struct jv sep, long long maxsplit, bool right);
struct jv js_splitlines(struct render *r, struct jstr s, bool keepends);
struct jv js_indent(struct render *r, struct jstr s, struct jstr ind, bool first, bool blank);
long long js_wordcount(struct jstr s);
/* '...' % args (args a tuple, or one value) */
struct jv js_percent_format(struct render *r, struct jstr fmt, struct jv args);
/* str.format(*args, **kw) */
struct jv js_format(struct render *r, struct jstr fmt, struct jv *args, size_t nargs,
                    struct jstr *kwn, struct jv *kwv, size_t nkw);
struct jv js_escape(struct render *r, struct jstr s);       /* markupsafe.escape: a Markup */
struct jv js_ascii_escape(struct render *r, struct jstr s); /* non-ASCII as \uXXXX (JSON) */
/* str.find / rfind: the code point index of sub in s, or -1 */
long long js_find(struct render *r, struct jstr s, struct jstr sub, bool right);

#endif
