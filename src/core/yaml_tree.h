/* A YAML document as a small tree, read with libyaml's event parser, for
 * config files (server/config.c walks one against its key table).
 *
 * The text is one document (an empty stream or document is no tree).
 * Refused, each as ERR_FORMAT "NAME:LINE: ..." with LINE 1-based from
 * libyaml's marks:
 *   - a second document, an alias or an anchor (an alias can make a tree
 *     exponentially larger than its text: "billion laughs"), a tag;
 *   - nesting deeper than YAML_TREE_DEPTH_MAX, more than YAML_TREE_NODES_MAX
 *     nodes, a scalar longer than YAML_TREE_SCALAR_MAX bytes or with a NUL;
 *   - whatever libyaml refuses (its problem and context in the message).
 * Keys are not checked here: a mapping holds key and value nodes in turn.
 */
#ifndef SHARDSWAP_CORE_YAML_TREE_H
#define SHARDSWAP_CORE_YAML_TREE_H

#include <stdbool.h>
#include <stddef.h>

#define YAML_TREE_DEPTH_MAX 16     /* nested collections */
#define YAML_TREE_NODES_MAX 100000 /* nodes in a document */
#define YAML_TREE_SCALAR_MAX 4096  /* bytes of one scalar */

enum ykind { Y_SCALAR, Y_SEQ, Y_MAP };

struct ynode {
    enum ykind kind;
    int line;             /* 1-based */
    bool plain;           /* scalar: unquoted (only plain scalars can be null) */
    char *value;          /* scalar: NUL-terminated (owned) */
    struct ynode **items; /* seq: elements; map: key, value, key, value ... (owned) */
    int n, cap;
};

/* Reads text (len bytes; name is what messages call it) into *root, the
 * caller's to ynode_free; NULL for an empty stream or document. Never
 * reads files. */
int yaml_tree_read(const char *text, size_t len, const char *name, struct ynode **root);
void ynode_free(struct ynode *y); /* NULL-safe */

/* A plain "", "~", "null", "Null" or "NULL" scalar. */
bool ynode_is_null(const struct ynode *y);
/* "a mapping", "a list" or "null": what a message says y was when it is
 * not a non-null scalar. */
const char *ynode_kind_name(const struct ynode *y);

#endif
