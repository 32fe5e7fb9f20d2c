/* The server's config key table (server/config_keys.h) against what
 * users read: docs/serve.example.yaml names the same keys and shows each
 * default, and `shardswap serve --help` has a line per flagged key with the
 * table's help, range and default. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/fs.h"
#include "core/yaml_tree.h"
#include "server/config.h"
#include "server/config_keys.h"
#include "test.h"

/* The key paths docs/serve.example.yaml shows: a mapping's keys, those of
 * a mapping below a key ("devices.count"), of each mapping in a list
 * ("models[].tp"); each once. */
static void example_paths(const struct ynode *y, const char *prefix, char (*paths)[64], int *n,
                          int cap)
{
    for (int i = 0; i + 1 < y->n; i += 2) {
        char path[64];
        snprintf(path, sizeof(path), "%.30s%s%.30s", prefix, prefix[0] ? "." : "",
                 y->items[i]->value);
        bool seen = false;
        for (int j = 0; j < *n && !seen; j++)
            seen = strcmp(paths[j], path) == 0;
        if (!seen && *n < cap)
            snprintf(paths[(*n)++], 64, "%s", path);
        const struct ynode *v = y->items[i + 1];
        if (v->kind == Y_MAP)
            example_paths(v, path, paths, n, cap);
        for (int j = 0; v->kind == Y_SEQ && j < v->n; j++) {
            char item[80];
            snprintf(item, sizeof(item), "%s[]", path);
            if (v->items[j]->kind == Y_MAP)
                example_paths(v->items[j], item, paths, n, cap);
        }
    }
}

/* The example file and the key table name the same keys, and the example
 * shows each default of the table (as serve_config_init sets them). */
TEST(example_file)
{
    char *text = NULL;
    size_t len = 0;
    struct ynode *root = NULL;
    int rc = fs_read_regular(SHARDSWAP_SOURCE_DIR "/docs/serve.example.yaml", 1 << 20, &text, &len);
    CHECK_MSG(rc == 0, "%s", err_msg());
    if (rc == 0)
        rc = yaml_tree_read(text, len, "serve.example.yaml", &root);
    CHECK_MSG(rc == 0 && root && root->kind == Y_MAP, "%s", err_msg());
    static char paths[256][64];
    int n = 0;
    if (root)
        example_paths(root, "", paths, &n, 256);
    for (int i = 0; i < n; i++)
        CHECK_MSG(serve_key_find(paths[i]) != NULL,
                  "docs/serve.example.yaml shows '%s', which the key table lacks", paths[i]);
    for (int k = 0; k < serve_n_keys; k++) {
        bool shown = false;
        for (int i = 0; i < n && !shown; i++)
            shown = strcmp(paths[i], serve_keys[k].path) == 0;
        CHECK_MSG(shown, "key '%s' of the table is not in docs/serve.example.yaml",
                  serve_keys[k].path);
    }
    CHECK(n == serve_n_keys);
    ynode_free(root);
    free(text);

    /* every scalar of the file's settings is the table's default */
    struct serve_config c, d;
    serve_config_init(&c);
    serve_config_init(&d);
    CHECK(serve_config_load(SHARDSWAP_SOURCE_DIR "/docs/serve.example.yaml", &c) == 0);
    for (int k = 0; k < serve_n_keys; k++) {
        const struct serve_key *key = &serve_keys[k];
        if (strncmp(key->path, "models[]", 8) == 0 || strncmp(key->path, "adapters[]", 10) == 0)
            continue;
        const void *a = serve_key_cfield(key, &c), *b = serve_key_cfield(key, &d);
        char def[64];
        serve_key_default(key, def, sizeof(def));
        switch (key->type) {
        case SK_INT:
        case SK_ENUM:
            CHECK_MSG(*(const int *)a == *(const int *)b && *(const int *)a == (int)key->def,
                      "%s: the example's %d, the default %s", key->path, *(const int *)a, def);
            break;
        case SK_DOUBLE:
            CHECK_MSG(*(const double *)a == key->def, "%s", key->path);
            break;
        case SK_BYTES:
            CHECK_MSG(*(const uint64_t *)a == (uint64_t)key->def, "%s", key->path);
            break;
        case SK_DURATION: /* NAN: unset */
            CHECK_MSG(isnan(key->def) ? isnan(*(const double *)a)
                                      : *(const double *)a == key->def,
                      "%s: the example's %g, the default %s", key->path, *(const double *)a, def);
            break;
        case SK_STRING: {
            const char *x = *(char *const *)a;
            CHECK_MSG(key->def_str ? x && strcmp(x, key->def_str) == 0 : x == NULL, "%s: '%s'",
                      key->path, x ? x : "(unset)");
            break;
        }
        case SK_INTS:
        case SK_STRINGS:
            CHECK_MSG(*(const int *)((const char *)a - key->offset + key->count_offset) == 0,
                      "%s: the example's list is not empty", key->path);
            break;
        default:
            break;
        }
    }
    serve_config_free(&c);
    serve_config_free(&d);
}

/* shardswap serve --help: a line per key with a flag, with the table's
 * range and default; every other flag is --config, --port-file or --help. */
TEST(help)
{
    static char out[1 << 16];
    FILE *p = popen(SHARDSWAP_BINARY " serve --help", "r");
    CHECK(p != NULL);
    if (!p)
        return;
    size_t len = fread(out, 1, sizeof(out) - 1, p);
    out[len] = '\0';
    CHECK(pclose(p) == 0);
    int flags = 0;
    for (int k = 0; k < serve_n_keys; k++) {
        const struct serve_key *key = &serve_keys[k];
        if (!key->flag)
            continue;
        flags++;
        char head[80], range[96], def[80], line[2048];
        snprintf(head, sizeof(head), "\n  --%s %s", key->flag, key->metavar);
        const char *at = strstr(out, head);
        CHECK_MSG(at != NULL, "--help lacks --%s", key->flag);
        if (!at)
            continue;
        const char *end = strchr(at + 1, '\n');
        snprintf(line, sizeof(line), "%.*s", (int)(end ? end - at : (long)strlen(at)), at);
        CHECK_MSG(strstr(line, key->help) != NULL, "--%s: the help is not the table's", key->flag);
        serve_key_range(key, range + 1, sizeof(range) - 2);
        if (range[1]) {
            range[0] = '[';
            strcat(range, "]");
            CHECK_MSG(strstr(line, range) != NULL, "--%s: '%s' lacks %s", key->flag, line, range);
        }
        serve_key_default(key, def + 9, sizeof(def) - 10);
        if (def[9]) {
            memcpy(def, "(default ", 9);
            strcat(def, ")");
            CHECK_MSG(strstr(line, def) != NULL, "--%s: '%s' lacks %s", key->flag, line, def);
        }
    }
    int lines = 0;
    for (const char *q = strstr(out, "\n  --"); q; q = strstr(q + 1, "\n  --"))
        lines++;
    CHECK_MSG(lines == flags + 3, "%d flag lines, %d keys with flags", lines, flags);
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, NULL);
}
