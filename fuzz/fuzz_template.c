/* libFuzzer target: a Jinja template (and, after a "\n@@@@\n" line, a JSON
 * messages array) through the chat-template engine: parse, then render under
 * tight limits. Whatever the input, the engine must return (no crash, no
 * hang, no sanitizer report) with either output within the limit or an error
 * code and a message. */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "fuzz_util.h"
#include "template/jinja.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *rest;
    size_t rest_n;
    size_t n = fuzz_split(data, size, &rest, &rest_n);
    struct jinja_template *t = NULL;
    int rc = jinja_parse("chat template", (const char *)data, n, &t);
    if (rc < 0) {
        if (t || !err_msg()[0])
            abort();
        return 0;
    }
    json_t *msgs = rest_n ? json_loadb((const char *)rest, rest_n, 0, NULL) : NULL;
    if (!json_is_array(msgs)) {
        json_decref(msgs);
        msgs = json_loads(
            "[{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", "
            "\"content\": \"Hi {{ x }}\"}, {\"role\": \"assistant\", \"content\": \"Hello\", "
            "\"tool_calls\": [{\"function\": {\"name\": \"f\", \"arguments\": {\"a\": 1}}}]}]",
            0, NULL);
    }
    json_t *vars =
        json_pack("{s:o, s:b, s:s, s:s, s:n, s:n}", "messages", msgs, "add_generation_prompt", 1,
                  "bos_token", "<s>", "eos_token", "</s>", "tools", "documents");
    const struct jinja_limits lim = {.max_output = 1 << 16,
                                     .max_memory = (size_t)64 << 20,
                                     .max_steps = 200000,
                                     .max_loops = 20000,
                                     .max_depth = 16};
    char *out = NULL;
    size_t len = 0;
    rc = jinja_render(t, vars, 1772698147, &lim, &out, &len);
    if (rc == 0 && (!out || len > lim.max_output || out[len] != 0))
        abort();
    if (rc < 0 && (out || (rc != JINJA_RAISED && !err_msg()[0])))
        abort();
    free(out);
    json_decref(vars);
    jinja_free(t);
    return 0;
}
