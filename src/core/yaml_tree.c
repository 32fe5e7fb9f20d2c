/* yaml_tree_read (yaml_tree.h): libyaml's events into nodes, one stack of
 * open collections. */
#include "core/yaml_tree.h"

#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "core/error.h"

#define QUOTE_MAX 64 /* bytes of an anchor, alias or tag quoted in a message */

void ynode_free(struct ynode *y)
{
    if (!y)
        return;
    for (int i = 0; i < y->n; i++)
        ynode_free(y->items[i]);
    free(y->items);
    free(y->value);
    free(y);
}

static int ynode_push(struct ynode *parent, struct ynode *child)
{
    if (parent->n == parent->cap) {
        int cap = parent->cap ? parent->cap * 2 : 8;
        struct ynode **items = realloc(parent->items, (size_t)cap * sizeof(*items));
        if (!items)
            return ERR_NOMEM;
        parent->items = items;
        parent->cap = cap;
    }
    parent->items[parent->n++] = child;
    return 0;
}

/* The node a scalar, sequence-start or mapping-start event opens, into *out
 * (the caller's); anchors, tags, too many nodes and long scalars refused. */
static int node_from_event(const yaml_event_t *ev, const char *name, int *nodes, struct ynode **out)
{
    yaml_event_type_t type = ev->type;
    int line = (int)ev->start_mark.line + 1;
    const yaml_char_t *anchor = type == YAML_SCALAR_EVENT           ? ev->data.scalar.anchor
                                : type == YAML_SEQUENCE_START_EVENT ? ev->data.sequence_start.anchor
                                                                    : ev->data.mapping_start.anchor;
    const yaml_char_t *tag = type == YAML_SCALAR_EVENT           ? ev->data.scalar.tag
                             : type == YAML_SEQUENCE_START_EVENT ? ev->data.sequence_start.tag
                                                                 : ev->data.mapping_start.tag;
    if (anchor)
        return err_set(ERR_FORMAT, "%s:%d: anchors (&%.*s) are not accepted", name, line, QUOTE_MAX,
                       (const char *)anchor);
    if (tag)
        return err_set(ERR_FORMAT, "%s:%d: tags (%.*s) are not accepted", name, line, QUOTE_MAX,
                       (const char *)tag);
    if (++*nodes > YAML_TREE_NODES_MAX)
        return err_set(ERR_FORMAT, "%s:%d: more than %d values", name, line, YAML_TREE_NODES_MAX);
    if (type == YAML_SCALAR_EVENT && (ev->data.scalar.length > YAML_TREE_SCALAR_MAX ||
                                      memchr(ev->data.scalar.value, '\0', ev->data.scalar.length)))
        return err_set(ERR_FORMAT, "%s:%d: a value longer than %d bytes or with a NUL byte", name,
                       line, YAML_TREE_SCALAR_MAX);
    struct ynode *y = calloc(1, sizeof(*y));
    if (!y)
        return err_set(ERR_NOMEM, "%s: out of memory", name);
    y->line = line;
    y->kind = type == YAML_SCALAR_EVENT          ? Y_SCALAR
              : type == YAML_MAPPING_START_EVENT ? Y_MAP
                                                 : Y_SEQ;
    if (type == YAML_SCALAR_EVENT) {
        y->plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
        y->value = strndup((const char *)ev->data.scalar.value, ev->data.scalar.length);
        if (!y->value) {
            free(y);
            return err_set(ERR_NOMEM, "%s: out of memory", name);
        }
    }
    *out = y;
    return 0;
}

/* libyaml's message for a text it cannot parse, with the line. */
static int parse_error(const yaml_parser_t *parser, const char *text, size_t len, const char *name)
{
    size_t eline = parser->problem_mark.line + 1;
    if (parser->error == YAML_READER_ERROR) { /* marks a byte offset only */
        eline = 1;
        for (size_t i = 0; i < parser->problem_offset && i < len; i++)
            eline += text[i] == '\n';
    }
    return err_set(ERR_FORMAT, "%s:%zu: %s%s%s", name, eline,
                   parser->problem ? parser->problem : "malformed YAML", parser->context ? " " : "",
                   parser->context ? parser->context : "");
}

int yaml_tree_read(const char *text, size_t len, const char *name, struct ynode **root)
{
    yaml_parser_t parser;
    yaml_event_t ev;
    struct ynode *stack[YAML_TREE_DEPTH_MAX + 1];
    int depth = 0, nodes = 0, documents = 0, rc = 0;
    struct ynode *top = NULL;
    *root = NULL;
    if (!yaml_parser_initialize(&parser))
        return err_set(ERR_NOMEM, "%s: out of memory", name);
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    for (bool end = false; !end && rc == 0;) {
        if (!yaml_parser_parse(&parser, &ev)) {
            rc = parse_error(&parser, text, len, name);
            break;
        }
        int line = (int)ev.start_mark.line + 1;
        struct ynode *y = NULL;
        switch (ev.type) {
        case YAML_STREAM_END_EVENT:
            end = true;
            break;
        case YAML_DOCUMENT_START_EVENT:
            if (++documents > 1)
                rc = err_set(ERR_FORMAT, "%s:%d: a second document: a config is one document", name,
                             line);
            break;
        case YAML_ALIAS_EVENT:
            rc = err_set(ERR_FORMAT, "%s:%d: aliases (*%.*s) are not accepted", name, line,
                         QUOTE_MAX, (const char *)ev.data.alias.anchor);
            break;
        case YAML_SCALAR_EVENT:
        case YAML_SEQUENCE_START_EVENT:
        case YAML_MAPPING_START_EVENT:
            if ((rc = node_from_event(&ev, name, &nodes, &y)) < 0)
                break;
            /* attach to the open collection, or make it the root */
            if (depth == 0) {
                top = y;
            } else if (ynode_push(stack[depth - 1], y) != 0) {
                ynode_free(y);
                rc = err_set(ERR_NOMEM, "%s: out of memory", name);
                break;
            }
            if (y->kind != Y_SCALAR && depth == YAML_TREE_DEPTH_MAX)
                rc = err_set(ERR_FORMAT, "%s:%d: nested deeper than %d levels", name, line,
                             YAML_TREE_DEPTH_MAX);
            else if (y->kind != Y_SCALAR)
                stack[depth++] = y;
            break;
        case YAML_SEQUENCE_END_EVENT:
        case YAML_MAPPING_END_EVENT:
            depth--;
            break;
        default:
            break;
        }
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&parser);
    if (rc < 0) {
        ynode_free(top);
        return rc;
    }
    *root = top;
    return 0;
}

bool ynode_is_null(const struct ynode *y)
{
    return y->kind == Y_SCALAR && y->plain &&
           (!y->value[0] || strcmp(y->value, "~") == 0 || strcmp(y->value, "null") == 0 ||
            strcmp(y->value, "Null") == 0 || strcmp(y->value, "NULL") == 0);
}

const char *ynode_kind_name(const struct ynode *y)
{
    return y->kind == Y_MAP ? "a mapping" : y->kind == Y_SEQ ? "a list" : "null";
}
