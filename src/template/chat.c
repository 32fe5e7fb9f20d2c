/* Chat templates: found in a model directory as transformers finds them, and
 * rendered with the variables apply_chat_template passes (see chat.h).
 *
 * What the template sees of the messages is what transformers 5 gives it:
 * keys whose value is null are dropped from each message
 * (_normalize_chat_messages), and a message with reasoning under
 * "reasoning_content", "thinking" or "reasoning" gets it under the first two
 * as well, "thinking" first and "reasoning_content" last unless already
 * present (_alias_reasoning_fields). tools and documents are None unless
 * given.
 *
 * A GGUF checkpoint keeps its template in its metadata: tokenizer.chat_template
 * (a string), with bos_token and eos_token the texts of the tokens that
 * tokenizer.ggml.bos_token_id and eos_token_id name in tokenizer.ggml.tokens
 * (a "llama" tokenizer without them: ids 1 and 2, as llama.cpp reads it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/fs.h"
#include "core/jsonout.h"
#include "core/utf8.h"
#include "format/gguf.h"
#include "template/chat.h"
#include "template/jinja.h"

struct chat_template {
    struct jinja_template *t;
    char *bos, *eos;
};

/* Reads a whole regular file of at most max bytes. */
static int read_file(const char *path, size_t max, char **out, size_t *len)
{
    int fd;
    size_t size;
    int rc = fs_open_regular(path, &fd, &size);
    if (rc < 0)
        return rc;
    if (size > max) {
        close(fd);
        return err_set(ERR_INVALID,
                       "%s: %zu bytes, more than the %zu a chat template file may have", path, size,
                       max);
    }
    char *buf = malloc(size + 1);
    if (!buf) {
        close(fd);
        return err_set(ERR_NOMEM, "%s: out of memory", path);
    }
    size_t n = 0;
    while (n < size) {
        ssize_t k = read(fd, buf + n, size - n);
        if (k <= 0) {
            close(fd);
            free(buf);
            return err_set(ERR_IO, "%s: read failed", path);
        }
        n += (size_t)k;
    }
    close(fd);
    buf[n] = 0;
    *out = buf;
    *len = n;
    return 0;
}

/* A special token in tokenizer_config.json: a string, or {"content": ...}. */
static const char *token_string(json_t *cfg, const char *key)
{
    json_t *v = json_object_get(cfg, key);
    if (json_is_object(v))
        v = json_object_get(v, "content");
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* 0 when text[0..n) is UTF-8, else a one-line error naming `what` and the byte. */
static int utf8_text_check(const char *what, const char *text, size_t n)
{
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t k = utf8_decode_one((const unsigned char *)text + i, n - i, &cp);
        if (k == 0)
            return err_set(ERR_FORMAT, "%s: invalid UTF-8 at byte %zu, expected UTF-8 text", what,
                           i);
        i += k;
    }
    return 0;
}

int chat_template_read(const char *path, char **text, size_t *len)
{
    *text = NULL;
    *len = 0;
    char *buf;
    size_t n;
    int rc = read_file(path, JINJA_MAX_SOURCE, &buf, &n);
    if (rc < 0)
        return rc;
    if ((rc = utf8_text_check(path, buf, n)) < 0) {
        free(buf);
        return rc;
    }
    *text = buf;
    *len = n;
    return 0;
}

int chat_template_parse(const char *text, size_t len, const char *bos_token, const char *eos_token,
                        struct chat_template **out)
{
    *out = NULL;
    struct chat_template *ct = calloc(1, sizeof(*ct));
    if (!ct)
        return err_set(ERR_NOMEM, "out of memory");
    ct->bos = strdup(bos_token ? bos_token : "");
    ct->eos = strdup(eos_token ? eos_token : "");
    if (!ct->bos || !ct->eos) {
        chat_template_free(ct);
        return err_set(ERR_NOMEM, "out of memory");
    }
    int rc = jinja_parse("chat template", text, len, &ct->t);
    if (rc < 0) {
        chat_template_free(ct);
        return rc;
    }
    *out = ct;
    return 0;
}

void chat_template_free(struct chat_template *ct)
{
    if (!ct)
        return;
    jinja_free(ct->t);
    free(ct->bos);
    free(ct->eos);
    free(ct);
}

const char *chat_template_bos(const struct chat_template *ct)
{
    return ct->bos;
}
const char *chat_template_eos(const struct chat_template *ct)
{
    return ct->eos;
}

/* The text of the token that key names (dflt when the file has no key and
 * dflt is a token), as a NUL-terminated copy in *out; NULL when none. */
static int gguf_role_text(const struct gguf_file *g, const char *key, int64_t dflt, char **out)
{
    *out = NULL;
    const struct gguf_kv *toks = gguf_find(g, "tokenizer.ggml.tokens");
    if (!toks || gguf_kv_type(toks) != GGUF_ARR || gguf_kv_arr_type(toks) != GGUF_STR ||
        gguf_kv_arr_len(toks) == 0)
        return 0;
    int64_t n = (int64_t)gguf_kv_arr_len(toks), id;
    int rc = gguf_get_int(g, key, false, -1, 0, n - 1, &id);
    if (rc < 0)
        return rc;
    if (id < 0)
        id = dflt;
    if (id < 0 || id >= n)
        return 0;
    struct gguf_str s = gguf_arr_str(toks, (uint64_t)id);
    if (!(*out = strndup(s.p, s.n)))
        return err_set(ERR_NOMEM, "out of memory");
    return 0;
}

static int chat_template_load_gguf(const char *path, const char *override_path,
                                   struct chat_template **out)
{
    struct gguf_file *g = NULL;
    char *text = NULL, *bos = NULL, *eos = NULL;
    size_t len = 0;
    struct gguf_str tpl = {0}, model = {0};
    int rc = gguf_open(path, &g);
    if (rc < 0)
        return rc;
    if ((rc = gguf_get_str(g, "tokenizer.chat_template", &tpl)) < 0 ||
        (rc = gguf_get_str(g, "tokenizer.ggml.model", &model)) < 0)
        goto out;
    bool spm = model.p && model.n == 5 && memcmp(model.p, "llama", 5) == 0;
    if ((rc = gguf_role_text(g, "tokenizer.ggml.bos_token_id", spm ? 1 : -1, &bos)) < 0 ||
        (rc = gguf_role_text(g, "tokenizer.ggml.eos_token_id", spm ? 2 : -1, &eos)) < 0)
        goto out;
    const char *src_name = override_path;
    if (override_path) {
        if ((rc = chat_template_read(override_path, &text, &len)) < 0)
            goto out;
    } else if (tpl.p) {
        if (tpl.n > JINJA_MAX_SOURCE) {
            rc = err_set(ERR_INVALID,
                         "%s: tokenizer.chat_template has %zu bytes, more than the %zu a chat "
                         "template may have",
                         gguf_path(g), tpl.n, (size_t)JINJA_MAX_SOURCE);
            goto out;
        }
        char what[4200];
        snprintf(what, sizeof(what), "%s: tokenizer.chat_template", gguf_path(g));
        if ((rc = utf8_text_check(what, tpl.p, tpl.n)) < 0)
            goto out;
        /* a NUL in it ends the copy early: found below as a length that differs */
        if (!(text = strndup(tpl.p, tpl.n))) {
            rc = err_set(ERR_NOMEM, "out of memory");
            goto out;
        }
        len = tpl.n;
        src_name = "tokenizer.chat_template";
    } else {
        goto out; /* no template: *out stays NULL */
    }
    if (strlen(text) != len) {
        rc = err_set(ERR_FORMAT, "%s: %s holds a NUL byte", gguf_path(g), src_name);
        goto out;
    }
    rc = chat_template_parse(text, len, bos, eos, out);
    if (rc < 0)
        err_wrap(rc, "%s: %s", gguf_path(g), src_name);
out:
    free(text);
    free(bos);
    free(eos);
    gguf_close(g);
    return rc;
}

/* Whether dir holds a file of that name (whatever it is). */
static bool chat_file_exists(const char *dir, const char *name)
{
    char p[4096];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    return access(p, F_OK) == 0;
}

int chat_template_load(const char *dir, const char *override_path, struct chat_template **out)
{
    *out = NULL;
    if (gguf_is_checkpoint(dir) && !chat_file_exists(dir, "tokenizer_config.json") &&
        !chat_file_exists(dir, "chat_template.jinja"))
        return chat_template_load_gguf(dir, override_path, out);
    char path[4096];
    json_t *cfg = NULL;
    char *text = NULL, *cfg_text = NULL;
    size_t len = 0, cfg_len = 0;
    const char *src_name = NULL;
    snprintf(path, sizeof(path), "%s/tokenizer_config.json", dir);
    int rc = read_file(path, (size_t)64 << 20, &cfg_text, &cfg_len);
    if (rc == ERR_NOT_FOUND)
        rc = 0;
    else if (rc < 0)
        return rc;
    char cfg_path[4096];
    snprintf(cfg_path, sizeof(cfg_path), "%s", path);
    if (cfg_text) {
        json_error_t je;
        cfg = json_loadb(cfg_text, cfg_len, JSON_DECODE_INT_AS_REAL, &je);
        free(cfg_text);
        if (!cfg || !json_is_object(cfg)) {
            char why[JSON_ERROR_TEXT_LENGTH];
            rc =
                err_set(ERR_FORMAT, "%s: %s at line %d column %d", cfg_path,
                        cfg ? "expected a JSON object" : jsonout_parse_error(&je, why, sizeof(why)),
                        je.line, je.column);
            goto out;
        }
    }
    if (override_path) {
        if ((rc = chat_template_read(override_path, &text, &len)) < 0)
            goto out;
        src_name = override_path;
    } else {
        json_t *t = cfg ? json_object_get(cfg, "chat_template") : NULL;
        if (json_is_array(t)) { /* [{"name", "template"}]: the "default" one */
            json_t *pick = NULL, *e;
            size_t i;
            json_array_foreach(t, i, e)
            {
                json_t *n = json_object_get(e, "name");
                if (json_is_string(n) && strcmp(json_string_value(n), "default") == 0)
                    pick = json_object_get(e, "template");
            }
            if (!json_is_string(pick)) {
                rc = err_set(ERR_FORMAT,
                             "%s: \"chat_template\" is a list without a \"default\" "
                             "entry holding a string \"template\"",
                             cfg_path);
                goto out;
            }
            t = pick;
        } else if (t && !json_is_string(t) && !json_is_null(t)) {
            rc = err_set(ERR_FORMAT,
                         "%s: \"chat_template\" is neither a string nor a list of "
                         "{name, template}",
                         cfg_path);
            goto out;
        }
        if (json_is_string(t)) {
            len = json_string_length(t);
            if (!(text = malloc(len + 1))) {
                rc = err_set(ERR_NOMEM, "out of memory");
                goto out;
            }
            memcpy(text, json_string_value(t), len + 1);
            src_name = cfg_path;
        } else {
            snprintf(path, sizeof(path), "%s/chat_template.jinja", dir);
            rc = chat_template_read(path, &text, &len);
            if (rc == ERR_NOT_FOUND) {
                rc = 0; /* no template: *out stays NULL */
                goto out;
            }
            if (rc < 0)
                goto out;
            src_name = path;
        }
    }
    rc = chat_template_parse(text, len, cfg ? token_string(cfg, "bos_token") : NULL,
                             cfg ? token_string(cfg, "eos_token") : NULL, out);
    if (rc < 0)
        err_wrap(rc, "%s", src_name);
out:
    free(text);
    json_decref(cfg);
    return rc;
}

/* The messages as transformers hands them to the template (see the top). */
static int prepare_messages(json_t *messages, json_t **out)
{
    *out = NULL;
    if (!json_is_array(messages))
        return err_set(ERR_INVALID, "messages must be an array of message objects");
    json_t *arr = json_array();
    if (!arr)
        return err_set(ERR_NOMEM, "out of memory");
    size_t i;
    json_t *m;
    static const char *const reasoning_keys[] = {"reasoning_content", "thinking", "reasoning"};
    json_array_foreach(messages, i, m)
    {
        if (!json_is_object(m)) {
            json_decref(arr);
            return err_set(ERR_INVALID, "messages[%zu] is not an object", i);
        }
        json_t *reasoning = NULL;
        for (size_t k = 0; k < 3 && !reasoning; k++) {
            json_t *v = json_object_get(m, reasoning_keys[k]);
            if (v && !json_is_null(v))
                reasoning = v;
        }
        json_t *c = json_object();
        if (!c || (reasoning && json_object_set(c, "thinking", reasoning) < 0))
            goto nomem;
        const char *key;
        json_t *v;
        json_object_foreach(m, key, v)
        {
            if (!json_is_null(v) && json_object_set(c, key, v) < 0)
                goto nomem_c;
        }
        if (reasoning && json_object_set(c, "reasoning_content", reasoning) < 0)
            goto nomem_c;
        if (json_array_append_new(arr, c) < 0)
            goto nomem;
        continue;
    nomem_c:
        json_decref(c);
    nomem:
        json_decref(arr);
        return err_set(ERR_NOMEM, "out of memory");
    }
    *out = arr;
    return 0;
}

int chat_template_render(const struct chat_template *ct, json_t *messages,
                         const struct chat_render_opts *o, char **out, size_t *len)
{
    *out = NULL;
    if (len)
        *len = 0;
    json_t *msgs = NULL;
    int rc = prepare_messages(messages, &msgs);
    if (rc < 0)
        return rc;
    json_t *vars = json_object();
    if (!vars || json_object_set_new(vars, "messages", msgs) < 0 ||
        json_object_set_new(vars, "add_generation_prompt",
                            json_boolean(o && o->add_generation_prompt)) < 0 ||
        json_object_set_new(vars, "bos_token", json_stringn_nocheck(ct->bos, strlen(ct->bos))) <
            0 ||
        json_object_set_new(vars, "eos_token", json_stringn_nocheck(ct->eos, strlen(ct->eos))) <
            0 ||
        json_object_set(vars, "tools", o && o->tools ? o->tools : json_null()) < 0 ||
        json_object_set_new(vars, "documents", json_null()) < 0) {
        json_decref(vars);
        return err_set(ERR_NOMEM, "out of memory");
    }
    if (o && o->kwargs) {
        if (!json_is_object(o->kwargs)) {
            json_decref(vars);
            return err_set(ERR_INVALID, "chat template kwargs must be a JSON object");
        }
        const char *k;
        json_t *v;
        json_object_foreach(o->kwargs, k, v)
        {
            if (!strcmp(k, "messages") || !strcmp(k, "add_generation_prompt") ||
                !strcmp(k, "tools") || !strcmp(k, "documents")) {
                json_decref(vars);
                return err_set(ERR_INVALID, "chat template kwargs may not set \"%s\"", k);
            }
            if (json_object_set(vars, k, v) < 0) {
                json_decref(vars);
                return err_set(ERR_NOMEM, "out of memory");
            }
        }
    }
    struct jinja_limits lim = {.max_output = o && o->max_output ? o->max_output : CHAT_MAX_OUTPUT};
    rc = jinja_render(ct->t, vars, o ? o->now : 0, &lim, out, len);
    json_decref(vars);
    return rc;
}
