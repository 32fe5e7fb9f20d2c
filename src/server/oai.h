/* The OpenAI completions API's request and error bodies (Jansson): the
 * server's boundary with untrusted input, pure functions, fuzzed
 * (fuzz/fuzz_oai.c).
 *
 *   oai_parse_completion(body) -> struct completion_req, or an oai_error
 *   with the HTTP status and the offending field in param
 *   oai_error_json(err) -> {"error": {"message", "type", "param", "code"}}
 *
 * Field shapes and defaults are the OpenAI API's (POST /v1/completions):
 * max_tokens 16, temperature 1, top_p 1, n 1, stop a string or a list of up
 * to 4, stream_options.include_usage. Extensions: top_k (0: off). Fields that
 * change the output and are not implemented (n > 1, best_of > 1, logprobs,
 * suffix, logit_bias, presence/frequency penalties != 0) are a 400 naming
 * the field; other unknown fields are ignored, as OpenAI's clients add some.
 */
#ifndef SHARDSWAP_SERVER_OAI_H
#define SHARDSWAP_SERVER_OAI_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define OAI_MAX_STOP 4
#define OAI_MAX_MESSAGES 4096 /* messages in one chat request */
/* A chat request that names no max_tokens generates until an end of turn or
 * this many tokens (at most the context the prompt leaves). */
#define OAI_CHAT_DEFAULT_MAX_TOKENS 1024

struct oai_error {
    int status;          /* HTTP status: 400, 401, 403, 404, 405, 413, 429, 500, 503 */
    const char *type;    /* "invalid_request_error", "authentication_error", ... (static) */
    const char *code;    /* NULL, or "model_not_found", "context_length_exceeded", ... (static) */
    char param[64];      /* the offending field ("" when none) */
    char message[512];
};

struct completion_req {
    char *model;             /* owned */
    /* owned, NUL-terminated, valid UTF-8; NULL when ids given. May be ""
     * (prompt_len 0): the sequence is then the tokenizer's BOS alone. */
    char *prompt_text;
    size_t prompt_len;
    int32_t *prompt_ids;     /* owned; when the prompt is an array of token ids */
    int n_prompt_ids;
    int max_tokens;          /* >= 1 */
    float temperature;       /* 0..2 */
    float top_p;             /* (0, 1] */
    int top_k;               /* >= 0 */
    bool has_seed;
    uint64_t seed;
    char *stop[OAI_MAX_STOP]; /* owned, non-empty */
    int n_stop;
    bool echo, stream, include_usage;
    char *user;              /* owned or NULL (logged, not used) */
    /* a chat request (oai_parse_chat): the messages, each {"role",
     * "content": a string} with text parts joined, ready for the model's
     * chat template; the prompt text is rendered from them */
    bool chat;
    json_t *messages;        /* owned */
    json_t *template_kwargs; /* owned or NULL: chat_template_kwargs (vLLM's extension), more
                                variables for the template such as enable_thinking */
    bool max_tokens_given;   /* max_tokens or max_completion_tokens was sent */
};

/* Parses a request body of len bytes (need not be NUL-terminated). On error
 * *err says why (status 400, param the field; 500 when out of memory) and
 * *out holds nothing. */
int oai_parse_completion(const char *body, size_t len, struct completion_req *out,
                         struct oai_error *err);
void completion_req_free(struct completion_req *r); /* NULL-safe; zeroes it */

/* Parses a POST /v1/chat/completions body as oai_parse_completion does,
 * with the chat API's fields: messages (roles system, user, assistant;
 * content a string or a list of {"type": "text", "text"} parts, joined
 * with "\n" as vLLM joins them; an assistant's content may be null),
 * max_completion_tokens (or the older max_tokens; default
 * OAI_CHAT_DEFAULT_MAX_TOKENS), temperature, top_p, seed, stop, stream,
 * stream_options, n = 1; chat_template_kwargs (an object of more template
 * variables, as vLLM takes them). tools, tool_choice, functions, response_format
 * other than text, logprobs, top_logprobs, logit_bias, penalties, audio and
 * prediction are a 400 naming the field. */
int oai_parse_chat(const char *body, size_t len, struct completion_req *out,
                   struct oai_error *err);

/* Sets *err (printf-style message); returns ERR_INVALID. */
int oai_error_set(struct oai_error *err, int status, const char *type, const char *code,
                  const char *param, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* The error body, NUL-terminated and malloc'd (NULL when out of memory). */
char *oai_error_json(const struct oai_error *err);

#endif
