/* libFuzzer target: a request body through the OpenAI chat and completions
 * parsers, then the error body of a refusal. An accepted request must hold what
 * oai.h promises (a model, exactly one prompt form, fields in range); a
 * refused one must leave nothing behind and make a JSON error body. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/oai.h"

/* The chat parser on the same body: an accepted request holds messages,
 * each a role and a string content, and no prompt yet. */
static void chat(const uint8_t *data, size_t size)
{
    struct completion_req r;
    struct oai_error err;
    if (oai_parse_chat((const char *)data, size, &r, &err) == 0) {
        if (!r.model || !r.chat || !json_is_array(r.messages) || !json_array_size(r.messages) ||
            r.prompt_text || r.prompt_ids || r.max_tokens < 1 || (r.include_usage && !r.stream))
            abort();
        size_t i;
        json_t *m;
        json_array_foreach(r.messages, i, m)
            if (!json_is_string(json_object_get(m, "role")) ||
                !json_is_string(json_object_get(m, "content")))
                abort();
        completion_req_free(&r);
    } else {
        if ((err.status != 400 && err.status != 500) || r.model || r.messages)
            abort();
        char *text = oai_error_json(&err);
        if (!text)
            abort();
        free(text);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    chat(data, size);
    struct completion_req r;
    struct oai_error err;
    if (oai_parse_completion((const char *)data, size, &r, &err) == 0) {
        if (!r.model || !r.model[0] || (!r.prompt_text == !r.prompt_ids) ||
            (r.prompt_text && strlen(r.prompt_text) != r.prompt_len) ||
            (r.prompt_ids && r.n_prompt_ids < 1) || r.max_tokens < 1 ||
            !(r.temperature >= 0 && r.temperature <= 2) || !(r.top_p > 0 && r.top_p <= 1) ||
            r.top_k < 0 || r.n_stop < 0 || r.n_stop > OAI_MAX_STOP ||
            (r.include_usage && !r.stream))
            abort(); /* accepted a request oai.h rules out */
        for (int i = 0; i < r.n_prompt_ids; i++)
            if (r.prompt_ids[i] < 0)
                abort();
        for (int i = 0; i < r.n_stop; i++)
            if (!r.stop[i] || !r.stop[i][0])
                abort();
        completion_req_free(&r);
    } else {
        if (err.status != 400 && err.status != 500)
            abort();
        if (r.model || r.prompt_text || r.prompt_ids || r.user || r.n_stop)
            abort(); /* a refusal left something behind */
        char *text = oai_error_json(&err);
        if (!text)
            abort();
        free(text);
    }
    return 0;
}
