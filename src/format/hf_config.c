#include "format/hf_config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/fs.h"
#include "core/jsonout.h"

int hf_json_load(const char *dir, const char *name, bool optional, json_t **root, char *path,
                 size_t cap)
{
    *root = NULL;
    if ((size_t)snprintf(path, cap, "%s/%s", dir, name) >= cap)
        return err_set(ERR_INVALID, "%s: path too long (expected at most %zu bytes)", dir,
                       cap - strlen(name) - 2);
    /* a FIFO, directory or device of that name is refused before reading */
    int fd;
    if (optional && access(path, F_OK) != 0 && errno == ENOENT)
        return ERR_NOT_FOUND;
    int rc = fs_open_regular(path, &fd, NULL);
    if (rc == ERR_NOT_FOUND)
        return err_set(ERR_NOT_FOUND, "%s: cannot open (expected a Hugging Face model "
                                      "directory with %s)", path, name);
    if (rc)
        return rc;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        rc = err_set(ERR_IO, "%s: cannot read: %s", path, strerror(errno));
        close(fd);
        return rc;
    }
    json_error_t jerr;
    json_t *j = json_loadf(f, JSON_REJECT_DUPLICATES, &jerr);
    fclose(f);
    char why[JSON_ERROR_TEXT_LENGTH];
    if (!j)
        return err_set(ERR_FORMAT, "%s: invalid JSON at line %d: %s", path, jerr.line,
                       jsonout_parse_error(&jerr, why, sizeof(why)));
    if (!json_is_object(j)) {
        json_decref(j);
        return err_set(ERR_FORMAT, "%s: expected a JSON object", path);
    }
    *root = j;
    return 0;
}

/* The key's value, or NULL when absent or null. */
static json_t *field(json_t *root, const char *key)
{
    json_t *v = json_object_get(root, key);
    return v && !json_is_null(v) ? v : NULL;
}

int hf_get_int(json_t *root, const char *what, const char *key, bool required, int dflt, int lo,
               int hi, int *out)
{
    json_t *v = field(root, key);
    if (!v) {
        if (required)
            return err_set(ERR_FORMAT, "%s: missing required field \"%s\" (expected an integer)",
                           what, key);
        *out = dflt;
        return 0;
    }
    if (!json_is_integer(v))
        return err_set(ERR_FORMAT, "%s: field \"%s\" must be an integer", what, key);
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return err_set(ERR_FORMAT, "%s: field \"%s\" is %lld, expected %d..%d", what, key,
                       (long long)x, lo, hi);
    *out = (int)x;
    return 0;
}

int hf_get_num(json_t *root, const char *what, const char *key, bool required, double dflt,
               double lo, double hi, double *out)
{
    json_t *v = field(root, key);
    if (!v) {
        if (required)
            return err_set(ERR_FORMAT, "%s: missing required field \"%s\" (expected a number)",
                           what, key);
        *out = dflt;
        return 0;
    }
    if (!json_is_number(v))
        return err_set(ERR_FORMAT, "%s: field \"%s\" must be a number", what, key);
    double x = json_number_value(v);
    if (!isfinite(x) || x < lo || x > hi)
        return err_set(ERR_FORMAT, "%s: field \"%s\" is %g, expected %g..%g", what, key, x, lo,
                       hi);
    *out = x;
    return 0;
}

int hf_get_bool(json_t *root, const char *what, const char *key, bool dflt, bool *out)
{
    json_t *v = field(root, key);
    if (!v) {
        *out = dflt;
        return 0;
    }
    if (!json_is_boolean(v))
        return err_set(ERR_FORMAT, "%s: field \"%s\" must be true or false", what, key);
    *out = json_is_true(v);
    return 0;
}

int hf_get_str(json_t *root, const char *what, const char *key, const char **out)
{
    json_t *v = field(root, key);
    *out = NULL;
    if (!v)
        return 0;
    if (!json_is_string(v))
        return err_set(ERR_FORMAT, "%s: field \"%s\" must be a string", what, key);
    *out = json_string_value(v);
    return 0;
}

int hf_write_config(json_t *root, const char *path)
{
    int rc = 0;
    if (json_dump_file(root, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER) != 0)
        rc = err_set(ERR_IO, "%s: cannot write", path);
    json_decref(root);
    return rc;
}

int hf_get_rope_type(json_t *o, const char *what, const char **type)
{
    int rc;
    if ((rc = hf_get_str(o, what, "rope_type", type)) < 0)
        return rc;
    if (!*type && (rc = hf_get_str(o, what, "type", type)) < 0)
        return rc;
    if (*type && strcmp(*type, "default") == 0)
        *type = NULL;
    return 0;
}

int hf_get_dtype(json_t *root, const char *what, enum dtype *out)
{
    json_t *v = field(root, "torch_dtype");
    if (!v)
        v = field(root, "dtype"); /* newer transformers spell it so */
    if (!v) {
        *out = DTYPE_F32;
        return 0;
    }
    if (!json_is_string(v) || dtype_parse(json_string_value(v), out) < 0)
        return err_set(ERR_UNSUPPORTED,
                       "%s: torch_dtype %s is not supported (expected float32, float16 or "
                       "bfloat16)",
                       what, json_is_string(v) ? json_string_value(v) : "(not a string)");
    return 0;
}

int hf_get_ids(json_t *root, const char *what, const char *key, int vocab, int *ids, int cap,
               int *n)
{
    json_t *v = field(root, key);
    *n = 0;
    if (!v)
        return 0;
    size_t count = json_is_array(v) ? json_array_size(v) : 1;
    if (!json_is_array(v) && !json_is_integer(v))
        return err_set(ERR_FORMAT, "%s: field \"%s\" must be a token id or a list of them", what,
                       key);
    if (count > (size_t)cap)
        return err_set(ERR_FORMAT, "%s: field \"%s\" lists %zu token ids, at most %d are "
                                   "supported", what, key, count, cap);
    for (size_t i = 0; i < count; i++) {
        json_t *e = json_is_array(v) ? json_array_get(v, i) : v;
        if (!json_is_integer(e))
            return err_set(ERR_FORMAT, "%s: field \"%s\" must hold integer token ids", what, key);
        json_int_t id = json_integer_value(e);
        if (id < 0 || id >= vocab)
            return err_set(ERR_FORMAT, "%s: %s %lld is outside the vocabulary (size %d)", what,
                           key, (long long)id, vocab);
        ids[(*n)++] = (int)id;
    }
    return 0;
}
