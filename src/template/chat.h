/* A model's chat template: the Jinja2 text Hugging Face checkpoints ship
 * (tokenizer_config.json's "chat_template", or chat_template.jinja), rendered
 * in C as transformers' apply_chat_template renders it (Jinja2 with
 * trim_blocks and lstrip_blocks, its tojson, raise_exception and
 * strftime_now). The Jinja engine itself is template/jinja.h.
 */
#ifndef SHARDSWAP_TEMPLATE_CHAT_H
#define SHARDSWAP_TEMPLATE_CHAT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

struct chat_template;

/* Loads the chat template of the model directory dir: the Jinja file at
 * override_path when it is non-NULL (as vLLM's --chat-template), else
 * tokenizer_config.json's "chat_template" (a string, or a list of
 * {"name", "template"} from which "default" is taken), else
 * dir/chat_template.jinja. bos_token and eos_token (a string or an
 * {"content": ...} object) come from dir/tokenizer_config.json when present.
 * dir may be a GGUF checkpoint (a .gguf file, a directory holding one, a
 * split set's first file): its tokenizer.chat_template, bos and eos tokens.
 * A directory without a template (and no override) gives 0 and *out NULL.
 * A template that does not parse, or uses a construct the engine does not
 * implement, is ERR_FORMAT / ERR_UNSUPPORTED with a one-line message naming
 * the construct and its line. */
int chat_template_load(const char *dir, const char *override_path, struct chat_template **out);
/* Reads a chat template file as chat_template_load does: a regular file
 * (core/fs.h's fs_open_regular: never a FIFO or a device, within the
 * thread's fs_confine roots) of at most JINJA_MAX_SOURCE bytes, all of them
 * UTF-8, into *text (malloc'd, NUL-terminated; the caller frees it) and its
 * length into *len. Errors name path: ERR_NOT_FOUND, ERR_IO (not a regular
 * file, outside the roots, unreadable), ERR_INVALID (too large), ERR_FORMAT
 * ("PATH: invalid UTF-8 at byte N", N counted from 0). */
int chat_template_read(const char *path, char **text, size_t *len);
/* A filter or test that is unknown (or not implemented) inside an if or an
 * inline if does not fail the load: as in Jinja2, only a render that reaches
 * it fails (ERR_UNSUPPORTED, naming it and its line). */
/* The same from template text (len bytes) and the two token strings (NULL: ""). */
int chat_template_parse(const char *text, size_t len, const char *bos_token, const char *eos_token,
                        struct chat_template **out);
void chat_template_free(struct chat_template *ct); /* NULL-safe */

const char *chat_template_bos(const struct chat_template *ct); /* "" when none */
const char *chat_template_eos(const struct chat_template *ct);

struct chat_render_opts {
    bool add_generation_prompt;
    json_t *tools;     /* the "tools" variable (borrowed); NULL: None, as transformers'
                          render_jinja_template passes it (so `tools is defined` is true) */
    long long now;     /* unix seconds strftime_now formats; 0: the clock */
    size_t max_output; /* bytes; 0: CHAT_MAX_OUTPUT */
    json_t *kwargs;    /* more variables (borrowed; NULL: none): a JSON object, as
                          apply_chat_template's **kwargs and vLLM's chat_template_kwargs
                          (enable_thinking, reasoning_effort, ...); it may not set messages,
                          add_generation_prompt, tools or documents (ERR_INVALID) */
};
#define CHAT_MAX_OUTPUT ((size_t)4 << 20)

/* Renders messages (a JSON array of message objects) with the globals
 * transformers passes: messages, add_generation_prompt, bos_token,
 * eos_token, tools, documents (None), raise_exception, strftime_now. The
 * messages are passed as transformers 5 passes them: keys whose value is null
 * dropped, and reasoning under "reasoning_content", "thinking" or
 * "reasoning" copied to "thinking" and "reasoning_content" (chat.c). *out is malloc'd,
 * NUL-terminated, owned by the caller. Thread-safe on a shared struct chat_template. Errors:
 * CHAT_RAISED when the template called raise_exception (err_msg() is the template's own message);
 * ERR_INVALID when the render exceeds a limit (output bytes, loop iterations, call depth,
 * evaluation steps, memory) or a value has the wrong type for what the template does with it
 * (naming it and the template line); ERR_UNSUPPORTED for a construct reached that is not
 * implemented; ERR_NOMEM. */
#define CHAT_RAISED (-100)
int chat_template_render(const struct chat_template *ct, json_t *messages,
                         const struct chat_render_opts *o, char **out, size_t *len);

#endif
