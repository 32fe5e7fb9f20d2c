#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "template/chat.h"

/* The most request body chat-template reads (--help says "16 MiB"). */
#define CHAT_TEMPLATE_MAX_INPUT ((size_t)16 << 20)

/* The request body: {"messages": [...], "add_generation_prompt": bool,
 * "tools": [...], "chat_template_kwargs": {...}}; the rest is ignored. */
static int parse_request(const char *text, size_t len, json_t **req, json_t **messages, bool *agp,
                         json_t **tools, json_t **kwargs)
{
    json_error_t je;
    json_t *j = json_loadb(text, len, 0, &je);
    if (!j)
        return err_set(ERR_INVALID, "stdin: malformed JSON at line %d column %d: %s", je.line,
                       je.column, je.text);
    json_t *m = json_object_get(j, "messages");
    json_t *g = json_object_get(j, "add_generation_prompt");
    json_t *t = json_object_get(j, "tools");
    json_t *kw = json_object_get(j, "chat_template_kwargs");
    if (!json_is_object(j) || !json_is_array(m)) {
        json_decref(j);
        return err_set(ERR_INVALID, "stdin: expected an object with a \"messages\" array");
    }
    if (g && !json_is_boolean(g)) {
        json_decref(j);
        return err_set(ERR_INVALID, "stdin: \"add_generation_prompt\" must be true or false");
    }
    if (t && !json_is_array(t) && !json_is_null(t)) {
        json_decref(j);
        return err_set(ERR_INVALID, "stdin: \"tools\" must be an array");
    }
    if (kw && !json_is_object(kw) && !json_is_null(kw)) {
        json_decref(j);
        return err_set(ERR_INVALID, "stdin: \"chat_template_kwargs\" must be an object");
    }
    *kwargs = json_is_object(kw) ? kw : NULL;
    *req = j;
    *messages = m;
    *agp = json_is_true(g);
    *tools = json_is_array(t) ? t : NULL;
    return 0;
}

int cmd_chat_template(int argc, char **argv)
{
    const char *dir = NULL, *file = NULL;
    uint64_t now = 0;
    struct flag flags[] = {
        FLAG_REQUIRED("model", FLAG_STR, &dir, "DIR",
                      "model directory: tokenizer_config.json (chat_template, bos_token, "
                      "eos_token) or chat_template.jinja; or a GGUF checkpoint "
                      "(tokenizer.chat_template); no weights are read"),
        FLAG("template", FLAG_STR, &file, "FILE",
             "render this Jinja file instead of the model's template"),
        FLAG("now", FLAG_U64, &now, "SECONDS",
             "unix time that strftime_now formats (default: the clock)"),
    };
    int rc =
        args_parse("chat-template",
                   "Reads a chat request body on stdin ({\"messages\": [...], "
                   "\"add_generation_prompt\": true, \"tools\": [...], "
                   "\"chat_template_kwargs\": {\"enable_thinking\": false}}, at most 16 MiB) and "
                   "prints the prompt the model's chat template renders from it, exactly "
                   "(no newline added), as transformers' apply_chat_template would.",
                   argc, argv, flags, sizeof(flags) / sizeof(flags[0]));
    if (rc)
        return rc;
    struct chat_template *ct = NULL;
    char *text = NULL, *out = NULL;
    json_t *req = NULL, *messages = NULL, *tools = NULL, *kwargs = NULL;
    size_t len = 0, out_len = 0;
    bool agp = false;
    if ((rc = chat_template_load(dir, file, &ct)) < 0)
        goto out;
    if (!ct) {
        rc = err_set(ERR_NOT_FOUND,
                     "%s: no chat template (no \"chat_template\" in "
                     "tokenizer_config.json, no chat_template.jinja, no "
                     "tokenizer.chat_template in a GGUF file); pass --template FILE",
                     dir);
        goto out;
    }
    if ((rc = cli_read_stdin(CHAT_TEMPLATE_MAX_INPUT, &text, &len)) < 0 ||
        (rc = parse_request(text, len, &req, &messages, &agp, &tools, &kwargs)) < 0)
        goto out;
    struct chat_render_opts o = {
        .add_generation_prompt = agp, .tools = tools, .now = (long long)now, .kwargs = kwargs};
    if ((rc = chat_template_render(ct, messages, &o, &out, &out_len)) < 0)
        goto out;
    fwrite(out, 1, out_len, stdout);
out:
    if (rc < 0)
        rc = cli_fail("chat-template");
    free(out);
    free(text);
    json_decref(req);
    chat_template_free(ct);
    return rc;
}
