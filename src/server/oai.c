/* The OpenAI completions request parser and error body (oai.h).
 *
 * The body is untrusted: Jansson parses it (duplicate keys, invalid UTF-8,
 * "\u0000", numbers that do not fit and nesting deeper than
 * JSON_PARSER_MAX_DEPTH are refused there), then each field is checked in
 * turn and the first one that is wrong is the 400. Every message names the
 * field, what was expected and what came, and quotes at most the first
 * QUOTE_MAX bytes of a string from the request.
 *
 * Choices beyond OpenAI's documentation:
 *   - null is the default for every optional field (clients send it);
 *   - prompt "" is accepted: the request then starts from the tokenizer's
 *     BOS alone (prompt_text "", prompt_len 0), so the server must not send
 *     an empty token list to the engine;
 *   - prompt ["text"] and [[ids]] (a batch of one) are the text and the ids;
 *   - integer fields take JSON integers only (16.0 is a type error), number
 *     fields take integers too.
 */
#include "server/oai.h"

#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/utf8.h"

#define QUOTE_MAX 64             /* bytes of a request's string quoted in a message */
#define MODEL_MAX 256            /* bytes of a model name */
#define STOP_MAX 256             /* bytes of one stop string */
#define PROMPT_IDS_MAX (1 << 20) /* token ids in a prompt */
#define MAX_TOKENS_MAX (1 << 24)
#define DEFAULT_MAX_TOKENS 16
#define JSON_INTEGER_MIN LLONG_MIN /* json_int_t is long long (Jansson >= 2.0 with C99) */
#define JSON_INTEGER_MAX LLONG_MAX
_Static_assert(sizeof(json_int_t) == sizeof(long long), "json_int_t is long long");

/* ---- UTF-8 ---- */

/* The length of the valid UTF-8 sequence at s[0..n) (1..4), or 0 when s
 * does not start one (stray continuation, overlong form, surrogate, above
 * U+10FFFF, truncated): the same rules Jansson applies. */
static size_t utf8_seq_len(const unsigned char *s, size_t n)
{
    uint32_t cp;
    return utf8_decode_one(s, n, &cp);
}

/* The longest prefix of s[0..n) of at most max bytes that ends on a
 * character boundary (s is valid UTF-8). */
static size_t utf8_prefix(const char *s, size_t n, size_t max)
{
    if (n <= max)
        return n;
    size_t k = max;
    while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80)
        k--;
    return k;
}

/* ---- errors ---- */

int oai_error_set(struct oai_error *err, int status, const char *type, const char *code,
                  const char *param, const char *fmt, ...)
{
    err->status = status;
    err->type = type;
    err->code = code;
    snprintf(err->param, sizeof(err->param), "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof(err->message), fmt, ap);
    va_end(ap);
    return ERR_INVALID;
}

/* A malloc'd copy of s in which every byte that does not belong to a valid
 * UTF-8 sequence is '?': messages quote requests and URLs, and Jansson
 * refuses to build a string that is not UTF-8 (a message cut by
 * vsnprintf may also end inside a character). */
static char *utf8_sanitized(const char *s)
{
    size_t n = strlen(s);
    char *out = malloc(n + 1);
    if (!out)
        return NULL;
    size_t i = 0;
    while (i < n) {
        size_t k = utf8_seq_len((const unsigned char *)s + i, n - i);
        if (k == 0) {
            out[i++] = '?';
            continue;
        }
        memcpy(out + i, s + i, k);
        i += k;
    }
    out[n] = '\0';
    return out;
}

static json_t *json_text_or_null(const char *s)
{
    if (!s || !s[0])
        return json_null();
    char *clean = utf8_sanitized(s);
    if (!clean)
        return NULL;
    json_t *v = json_string(clean);
    free(clean);
    return v;
}

char *oai_error_json(const struct oai_error *err)
{
    char *out = NULL;
    json_t *root = json_object();
    json_t *e = json_object();
    if (!root || !e || json_object_set_new(root, "error", e) != 0) {
        json_decref(e);
        goto done;
    }
    char param[sizeof(err->param)];
    memcpy(param, err->param, sizeof(param));
    param[sizeof(param) - 1] = '\0';
    char message[sizeof(err->message)];
    memcpy(message, err->message, sizeof(message));
    message[sizeof(message) - 1] = '\0';
    json_t *msg = json_text_or_null(message);
    if (msg && json_is_null(msg)) /* message is always a string */
        msg = json_string("");
    if (json_object_set_new(e, "message", msg) != 0 ||
        json_object_set_new(e, "type", json_text_or_null(err->type ? err->type : "")) != 0 ||
        json_object_set_new(e, "param", json_text_or_null(param)) != 0 ||
        json_object_set_new(e, "code", json_text_or_null(err->code)) != 0)
        goto done;
    out = json_dumps(root, JSON_COMPACT);
done:
    json_decref(root);
    return out;
}

/* ---- describing what came ---- */

/* "-5", "16.0", "a string (\"abc\")", "true", "null", "an array", ... */
static void describe(const json_t *v, char *buf, size_t cap)
{
    switch (json_typeof(v)) {
    case JSON_INTEGER:
        snprintf(buf, cap, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        break;
    case JSON_REAL: {
        /* the shortest of 15 or 17 digits that reads back as the same number */
        snprintf(buf, cap, "%.15g", json_real_value(v));
        if (strtod(buf, NULL) != json_real_value(v))
            snprintf(buf, cap, "%.17g", json_real_value(v));
        if (!strpbrk(buf, ".eEn") && strlen(buf) + 3 <= cap)
            strcat(buf, ".0"); /* 16.0 is not the integer 16: say so */
        break;
    }
    case JSON_STRING: {
        const char *s = json_string_value(v);
        size_t n = json_string_length(v);
        size_t k = utf8_prefix(s, n, QUOTE_MAX);
        snprintf(buf, cap, "a string (\"%.*s\"%s)", (int)k, s, k < n ? "..." : "");
        break;
    }
    case JSON_TRUE:
        snprintf(buf, cap, "true");
        break;
    case JSON_FALSE:
        snprintf(buf, cap, "false");
        break;
    case JSON_NULL:
        snprintf(buf, cap, "null");
        break;
    case JSON_ARRAY:
        snprintf(buf, cap, "an array");
        break;
    case JSON_OBJECT:
        snprintf(buf, cap, "an object");
        break;
    default:
        snprintf(buf, cap, "a value");
        break;
    }
}

static int bad_value(struct oai_error *err, const char *param, const char *what,
                     const char *expected, const json_t *got)
{
    char d[QUOTE_MAX + 32];
    describe(got, d, sizeof(d));
    return oai_error_set(err, 400, "invalid_request_error", NULL, param, "%s: expected %s, got %s",
                         what, expected, d);
}

static int unsupported(struct oai_error *err, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int unsupported(struct oai_error *err, const char *param, const char *fmt, ...)
{
    char msg[sizeof(err->message)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return oai_error_set(err, 400, "invalid_request_error", NULL, param, "%s", msg);
}

/* ---- field readers: absent or null leaves the default ---- */

static const json_t *field(const json_t *root, const char *key)
{
    const json_t *v = json_object_get(root, key);
    return v && !json_is_null(v) ? v : NULL;
}

/* An integer field in [lo, hi]. */
static int read_int(const json_t *root, const char *key, json_int_t lo, json_int_t hi,
                    json_int_t *out, struct oai_error *err)
{
    const json_t *v = field(root, key);
    if (!v)
        return 0;
    char expected[96];
    if (json_is_integer(v)) {
        json_int_t x = json_integer_value(v);
        if (x >= lo && x <= hi) {
            *out = x;
            return 0;
        }
        if (x < lo)
            snprintf(expected, sizeof(expected), "an integer >= %" JSON_INTEGER_FORMAT, lo);
        else
            snprintf(expected, sizeof(expected), "an integer <= %" JSON_INTEGER_FORMAT, hi);
    } else if (hi == JSON_INTEGER_MAX) {
        snprintf(expected, sizeof(expected), "an integer >= %" JSON_INTEGER_FORMAT, lo);
    } else {
        snprintf(expected, sizeof(expected),
                 "an integer from %" JSON_INTEGER_FORMAT " to %" JSON_INTEGER_FORMAT, lo, hi);
    }
    return bad_value(err, key, key, expected, v);
}

/* A number field (integer or real) in [lo, hi], or (lo, hi] when lo_open. */
static int read_number(const json_t *root, const char *key, double lo, bool lo_open, double hi,
                       float *out, struct oai_error *err)
{
    const json_t *v = field(root, key);
    if (!v)
        return 0;
    if (json_is_number(v)) {
        /* the range holds for the float kept, too: top_p 1e-60 is 0 there */
        double x = json_number_value(v);
        float f = (float)x;
        if ((lo_open ? x > lo && f > lo : x >= lo) && x <= hi && f <= hi) {
            *out = f;
            return 0;
        }
    }
    char expected[64];
    snprintf(expected, sizeof(expected), "a number %s%g, %g]", lo_open ? "in (" : "in [", lo, hi);
    return bad_value(err, key, key, expected, v);
}

static int read_bool(const json_t *root, const char *key, bool *out, struct oai_error *err)
{
    const json_t *v = field(root, key);
    if (!v)
        return 0;
    if (!json_is_boolean(v))
        return bad_value(err, key, key, "true or false", v);
    *out = json_is_true(v);
    return 0;
}

/* A malloc'd copy of a string field (NULL when absent or null). */
static int read_string(const json_t *root, const char *key, size_t max, bool required, char **out,
                       struct oai_error *err)
{
    const json_t *v = field(root, key);
    if (!v) {
        if (required)
            return oai_error_set(err, 400, "invalid_request_error", NULL, key,
                                 "%s: required, expected a non-empty string", key);
        return 0;
    }
    char expected[64];
    snprintf(expected, sizeof(expected), "a non-empty string of at most %zu bytes", max);
    if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) > max)
        return bad_value(err, key, key, expected, v);
    *out = strdup(json_string_value(v));
    if (!*out)
        return oai_error_set(err, 500, "server_error", NULL, "", "out of memory");
    return 0;
}

/* ---- the fields ---- */

/* One token id in [0, 2^31 - 1]; i is its index for the message. */
static int read_token_id(const json_t *v, size_t i, int32_t *out, struct oai_error *err)
{
    if (json_is_integer(v) && json_integer_value(v) >= 0 && json_integer_value(v) <= INT32_MAX) {
        *out = (int32_t)json_integer_value(v);
        return 0;
    }
    char what[48];
    snprintf(what, sizeof(what), "prompt[%zu]", i);
    return bad_value(err, "prompt", what, "a token id (an integer from 0 to 2147483647)", v);
}

static int read_prompt_ids(const json_t *arr, struct completion_req *r, struct oai_error *err)
{
    size_t n = json_array_size(arr);
    if (n > PROMPT_IDS_MAX)
        return unsupported(err, "prompt", "prompt: expected at most %d token ids, got %zu",
                           PROMPT_IDS_MAX, n);
    r->prompt_ids = malloc(n * sizeof(*r->prompt_ids));
    if (!r->prompt_ids)
        return oai_error_set(err, 500, "server_error", NULL, "", "out of memory");
    for (size_t i = 0; i < n; i++) {
        int rc = read_token_id(json_array_get(arr, i), i, &r->prompt_ids[i], err);
        if (rc < 0)
            return rc;
    }
    r->n_prompt_ids = (int)n;
    return 0;
}

static int read_prompt_text(const json_t *s, struct completion_req *r, struct oai_error *err)
{
    r->prompt_len = json_string_length(s);
    r->prompt_text = malloc(r->prompt_len + 1);
    if (!r->prompt_text)
        return oai_error_set(err, 500, "server_error", NULL, "", "out of memory");
    memcpy(r->prompt_text, json_string_value(s), r->prompt_len + 1);
    return 0;
}

/* prompt: "text", [ids], ["text"] or [[ids]]. */
static int read_prompt(const json_t *root, struct completion_req *r, struct oai_error *err)
{
    static const char expected[] = "a string or an array of token ids";
    const json_t *v = field(root, "prompt");
    if (!v)
        return oai_error_set(err, 400, "invalid_request_error", NULL, "prompt",
                             "prompt: required, expected %s", expected);
    if (json_is_string(v))
        return read_prompt_text(v, r, err);
    if (!json_is_array(v))
        return bad_value(err, "prompt", "prompt", expected, v);
    size_t n = json_array_size(v);
    if (n == 0)
        return bad_value(err, "prompt", "prompt", "a string or a non-empty array of token ids", v);
    const json_t *first = json_array_get(v, 0);
    if (json_is_string(first) || json_is_array(first)) {
        if (n > 1)
            return unsupported(err, "prompt",
                               "prompt: batches of prompts are not supported; "
                               "send one request per prompt");
        if (json_is_string(first))
            return read_prompt_text(first, r, err);
        if (json_array_size(first) == 0)
            return bad_value(err, "prompt", "prompt[0]", "a non-empty array of token ids", first);
        return read_prompt_ids(first, r, err);
    }
    return read_prompt_ids(v, r, err);
}

/* stop: null, "s" or ["s", ...] (1 to OAI_MAX_STOP non-empty strings). */
static int read_stop(const json_t *root, struct completion_req *r, struct oai_error *err)
{
    char expected[96];
    snprintf(expected, sizeof(expected),
             "a non-empty string or an array of 1 to %d of them (at most %d bytes each)",
             OAI_MAX_STOP, STOP_MAX);
    const json_t *v = field(root, "stop");
    if (!v)
        return 0;
    const json_t *one[1] = {v};
    const json_t *const *items = one;
    size_t n = 1;
    if (json_is_array(v)) {
        n = json_array_size(v);
        if (n < 1 || n > OAI_MAX_STOP) {
            char d[32];
            snprintf(d, sizeof(d), "an array of %zu", n);
            return unsupported(err, "stop", "stop: expected %s, got %s", expected, d);
        }
        items = NULL;
    }
    for (size_t i = 0; i < n; i++) {
        const json_t *s = items ? items[i] : json_array_get(v, i);
        if (!json_is_string(s) || json_string_length(s) == 0 || json_string_length(s) > STOP_MAX) {
            char what[32];
            if (items)
                snprintf(what, sizeof(what), "stop");
            else
                snprintf(what, sizeof(what), "stop[%zu]", i);
            return bad_value(err, "stop", what, expected, s);
        }
        r->stop[i] = strdup(json_string_value(s));
        if (!r->stop[i])
            return oai_error_set(err, 500, "server_error", NULL, "", "out of memory");
        r->n_stop = (int)i + 1;
    }
    return 0;
}

/* stream_options: null or {"include_usage": bool}; only with stream true. */
static int read_stream_options(const json_t *root, struct completion_req *r, struct oai_error *err)
{
    const json_t *v = field(root, "stream_options");
    if (!v)
        return 0;
    if (!json_is_object(v))
        return bad_value(err, "stream_options", "stream_options",
                         "null or an object such as {\"include_usage\": true}", v);
    if (!r->stream)
        return unsupported(err, "stream_options",
                           "stream_options: only allowed when stream is true");
    const json_t *u = field(v, "include_usage");
    if (u && !json_is_boolean(u))
        return bad_value(err, "stream_options", "stream_options.include_usage", "true or false", u);
    r->include_usage = u && json_is_true(u);
    return 0;
}

/* Fields of both APIs that would change the output and are not
 * implemented: accepted only at their neutral value. */
static int read_unsupported_common(const json_t *root, struct oai_error *err)
{
    json_int_t x = 1;
    int rc;
    if ((rc = read_int(root, "n", JSON_INTEGER_MIN, JSON_INTEGER_MAX, &x, err)) < 0)
        return rc;
    if (x != 1)
        return unsupported(err, "n", "n: only n = 1 is supported, got %" JSON_INTEGER_FORMAT, x);
    const json_t *v = field(root, "logit_bias");
    if (v && (!json_is_object(v) || json_object_size(v) != 0))
        return bad_value(err, "logit_bias", "logit_bias",
                         "null or {} (logit biases are not supported)", v);
    static const char *const penalties[] = {"presence_penalty", "frequency_penalty"};
    for (size_t i = 0; i < 2; i++) {
        v = field(root, penalties[i]);
        if (v && (!json_is_number(v) || json_number_value(v) != 0))
            return bad_value(err, penalties[i], penalties[i],
                             "null or 0 (penalties are not supported)", v);
    }
    return 0;
}

/* The completions API's own: best_of, logprobs (an integer), suffix. */
static int read_unsupported_completion(const json_t *root, struct oai_error *err)
{
    json_int_t x = 1;
    int rc;
    if ((rc = read_int(root, "best_of", JSON_INTEGER_MIN, JSON_INTEGER_MAX, &x, err)) < 0)
        return rc;
    if (x != 1)
        return unsupported(err, "best_of",
                           "best_of: only best_of = 1 is supported, got %" JSON_INTEGER_FORMAT, x);
    x = 0;
    if ((rc = read_int(root, "logprobs", JSON_INTEGER_MIN, JSON_INTEGER_MAX, &x, err)) < 0)
        return rc;
    if (x != 0)
        return unsupported(err, "logprobs",
                           "logprobs: log probabilities are not supported (expected null or 0), "
                           "got %" JSON_INTEGER_FORMAT,
                           x);
    const json_t *v = field(root, "suffix");
    if (v)
        return bad_value(err, "suffix", "suffix", "null (suffixes are not supported)", v);
    return 0;
}

/* The chat API's own: tools and functions, structured output, log
 * probabilities, audio, predicted outputs. */
static int read_unsupported_chat(const json_t *root, struct oai_error *err)
{
    const json_t *v = field(root, "tools");
    if (v && (!json_is_array(v) || json_array_size(v) != 0))
        return bad_value(err, "tools", "tools", "null or [] (tool calling is not supported)", v);
    v = field(root, "tool_choice");
    if (v && !(json_is_string(v) && strcmp(json_string_value(v), "none") == 0))
        return bad_value(err, "tool_choice", "tool_choice",
                         "null or \"none\" (tool calling is not supported)", v);
    static const char *const gone[] = {"functions", "function_call", "audio", "prediction"};
    for (size_t i = 0; i < sizeof(gone) / sizeof(gone[0]); i++)
        if ((v = field(root, gone[i])))
            return bad_value(err, gone[i], gone[i], "null (not supported)", v);
    v = field(root, "response_format");
    if (v) {
        const json_t *t = json_is_object(v) ? json_object_get(v, "type") : NULL;
        if (!t || !json_is_string(t) || strcmp(json_string_value(t), "text") != 0)
            return bad_value(err, "response_format", "response_format",
                             "null or {\"type\": \"text\"} (structured output is not "
                             "supported)",
                             v);
    }
    v = field(root, "logprobs");
    if (v && !json_is_false(v))
        return bad_value(err, "logprobs", "logprobs",
                         "null or false (log probabilities are not supported)", v);
    v = field(root, "top_logprobs");
    if (v && !(json_is_integer(v) && json_integer_value(v) == 0))
        return bad_value(err, "top_logprobs", "top_logprobs",
                         "null or 0 (log probabilities are not supported)", v);
    v = field(root, "modalities");
    if (v && !(json_is_array(v) && json_array_size(v) == 1 &&
               json_is_string(json_array_get(v, 0)) &&
               strcmp(json_string_value(json_array_get(v, 0)), "text") == 0))
        return bad_value(err, "modalities", "modalities", "null or [\"text\"]", v);
    return 0;
}

/* ---- chat messages ---- */

/* The text of content parts [{"type": "text", "text": "..."}, ...], joined
 * with "\n" (vLLM's "string" content format). */
static int join_parts(const json_t *parts, size_t mi, json_t **out, struct oai_error *err)
{
    size_t n = json_array_size(parts), total = 0;
    for (size_t j = 0; j < n; j++) {
        const json_t *p = json_array_get(parts, j);
        char what[64];
        snprintf(what, sizeof(what), "messages[%zu].content[%zu]", mi, j);
        if (!json_is_object(p))
            return bad_value(err, "messages", what, "an object {\"type\": \"text\", \"text\": ...}",
                             p);
        const json_t *t = json_object_get(p, "type");
        if (!t || !json_is_string(t)) {
            snprintf(what, sizeof(what), "messages[%zu].content[%zu].type", mi, j);
            return bad_value(err, "messages", what, "\"text\"", t ? t : json_null());
        }
        if (strcmp(json_string_value(t), "text") != 0) {
            char d[QUOTE_MAX + 32];
            describe(t, d, sizeof(d));
            return oai_error_set(err, 400, "invalid_request_error", NULL, "messages",
                                 "messages[%zu].content[%zu].type: only \"text\" parts are "
                                 "supported, got %s",
                                 mi, j, d);
        }
        const json_t *x = json_object_get(p, "text");
        if (!x || !json_is_string(x)) {
            snprintf(what, sizeof(what), "messages[%zu].content[%zu].text", mi, j);
            return bad_value(err, "messages", what, "a string", x ? x : json_null());
        }
        total += json_string_length(x) + (j > 0);
    }
    char *buf = malloc(total + 1);
    if (!buf)
        return oai_error_set(err, 500, "server_error", NULL, "", "out of memory");
    size_t at = 0;
    for (size_t j = 0; j < n; j++) {
        const json_t *x = json_object_get(json_array_get(parts, j), "text");
        if (j > 0)
            buf[at++] = '\n';
        memcpy(buf + at, json_string_value(x), json_string_length(x));
        at += json_string_length(x);
    }
    *out = json_stringn_nocheck(buf, at);
    free(buf);
    if (!*out)
        return oai_error_set(err, 500, "server_error", NULL, "", "out of memory");
    return 0;
}

/* messages: a non-empty array of {"role", "content", "name"?}; the copy
 * kept has content as one string. */
static int read_messages(const json_t *root, struct completion_req *r, struct oai_error *err)
{
    static const char expected[] =
        "a non-empty array of messages {\"role\": \"system\" | \"user\" | \"assistant\", "
        "\"content\": ...}";
    const json_t *v = field(root, "messages");
    if (!v)
        return oai_error_set(err, 400, "invalid_request_error", NULL, "messages",
                             "messages: required, expected %s", expected);
    if (!json_is_array(v) || json_array_size(v) == 0)
        return bad_value(err, "messages", "messages", expected, v);
    size_t n = json_array_size(v);
    if (n > OAI_MAX_MESSAGES)
        return unsupported(err, "messages", "messages: expected at most %d messages, got %zu",
                           OAI_MAX_MESSAGES, n);
    if (!(r->messages = json_array()))
        return oai_error_set(err, 500, "server_error", NULL, "", "out of memory");
    for (size_t i = 0; i < n; i++) {
        const json_t *m = json_array_get(v, i);
        char what[48];
        snprintf(what, sizeof(what), "messages[%zu]", i);
        if (!json_is_object(m))
            return bad_value(err, "messages", what, "an object {\"role\", \"content\"}", m);
        const json_t *role = json_object_get(m, "role");
        snprintf(what, sizeof(what), "messages[%zu].role", i);
        if (!role || !json_is_string(role))
            return bad_value(err, "messages", what, "\"system\", \"user\" or \"assistant\"",
                             role ? role : json_null());
        const char *rs = json_string_value(role);
        bool assistant = strcmp(rs, "assistant") == 0;
        if (!assistant && strcmp(rs, "system") != 0 && strcmp(rs, "user") != 0) {
            char d[QUOTE_MAX + 32];
            describe(role, d, sizeof(d));
            return oai_error_set(err, 400, "invalid_request_error", NULL, "messages",
                                 "%s: expected \"system\", \"user\" or \"assistant\" (tool and "
                                 "function messages are not supported), got %s",
                                 what, d);
        }
        const json_t *c = json_object_get(m, "content");
        snprintf(what, sizeof(what), "messages[%zu].content", i);
        json_t *content = NULL;
        int rc;
        if (c && json_is_string(c))
            content = json_incref((json_t *)c);
        else if (c && json_is_array(c)) {
            if ((rc = join_parts(c, i, &content, err)) < 0)
                return rc;
        } else if (assistant && (!c || json_is_null(c)))
            content = json_string("");
        else
            return bad_value(err, "messages", what,
                             assistant ? "a string, an array of text parts or null"
                                       : "a string or an array of text parts",
                             c ? c : json_null());
        const json_t *name = json_object_get(m, "name");
        if (name && !json_is_null(name) && !json_is_string(name)) {
            json_decref(content);
            snprintf(what, sizeof(what), "messages[%zu].name", i);
            return bad_value(err, "messages", what, "a string", name);
        }
        /* tool calls have no meaning here yet (tools and tool messages are
         * refused): one in the history is refused, not dropped unseen */
        static const char *const calls[] = {"tool_calls", "function_call"};
        for (size_t k = 0; k < sizeof(calls) / sizeof(calls[0]); k++) {
            const json_t *tc = json_object_get(m, calls[k]);
            if (!tc || json_is_null(tc) || (json_is_array(tc) && json_array_size(tc) == 0))
                continue;
            json_decref(content);
            return unsupported(err, "messages",
                               "messages[%zu].%s: tool calls are not supported, expected a %s "
                               "message without %s",
                               i, calls[k], rs, calls[k]);
        }
        json_t *copy = json_pack("{s:s, s:o}", "role", rs, "content", content);
        if (copy && name && json_is_string(name))
            json_object_set(copy, "name", (json_t *)name);
        if (!copy || json_array_append_new(r->messages, copy) != 0)
            return oai_error_set(err, 500, "server_error", NULL, "", "out of memory");
    }
    return 0;
}

/* The message for a body Jansson refused. */
static int bad_json(const json_error_t *je, size_t len, struct oai_error *err)
{
    if (len == 0)
        return oai_error_set(err, 400, "invalid_request_error", NULL, "",
                             "request body: expected a JSON object, got an empty body");
    switch (json_error_code(je)) {
    case json_error_invalid_utf8:
        return oai_error_set(err, 400, "invalid_request_error", NULL, "",
                             "request body: not valid UTF-8 (at byte %d); JSON text must be "
                             "UTF-8",
                             je->position);
    case json_error_null_character:
        return oai_error_set(err, 400, "invalid_request_error", NULL, "",
                             "request body: strings may not contain \\u0000 (line %d, column %d)",
                             je->line, je->column);
    case json_error_duplicate_key:
        return oai_error_set(err, 400, "invalid_request_error", NULL, "",
                             "request body: %s (line %d); every key may appear once", je->text,
                             je->line);
    default:
        return oai_error_set(err, 400, "invalid_request_error", NULL, "",
                             "request body: invalid JSON at line %d, column %d: %s", je->line,
                             je->column, je->text);
    }
}

/* The fields both APIs share, after the model and the prompt. */
static int read_common(const json_t *root, struct completion_req *r, struct oai_error *err)
{
    json_int_t x;
    int rc;
    if ((rc = read_number(root, "temperature", 0, false, 2, &r->temperature, err)) < 0 ||
        (rc = read_number(root, "top_p", 0, true, 1, &r->top_p, err)) < 0)
        return rc;
    x = 0;
    if ((rc = read_int(root, "top_k", 0, INT32_MAX, &x, err)) < 0)
        return rc;
    r->top_k = (int)x;
    if (field(root, "seed")) {
        if ((rc = read_int(root, "seed", JSON_INTEGER_MIN, JSON_INTEGER_MAX, &x, err)) < 0)
            return rc;
        r->has_seed = true;
        r->seed = (uint64_t)x;
    }
    if ((rc = read_stop(root, r, err)) < 0 || (rc = read_bool(root, "stream", &r->stream, err)) < 0 ||
        (rc = read_stream_options(root, r, err)) < 0 ||
        (rc = read_unsupported_common(root, err)) < 0)
        return rc;
    const json_t *u = field(root, "user");
    if (u && !json_is_string(u))
        return bad_value(err, "user", "user", "a string", u);
    if (u && !(r->user = strdup(json_string_value(u))))
        return oai_error_set(err, 500, "server_error", NULL, "", "out of memory");
    return 0;
}

/* Parses the body's JSON object; *root is the caller's. */
static int parse_root(const char *body, size_t len, json_t **root, struct oai_error *err)
{
    json_error_t je;
    *root = json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
    if (!*root)
        return bad_json(&je, len, err);
    if (!json_is_object(*root))
        return bad_value(err, "", "request body", "a JSON object", *root);
    return 0;
}

/* The fields one API reads before the shared ones (read_common), and after. */
struct api_fields {
    int (*before)(const json_t *root, struct completion_req *r, struct oai_error *err);
    int (*after)(const json_t *root, struct completion_req *r, struct oai_error *err);
};

/* Both parsers: the body, the model, then the API's fields around the
 * shared ones, each refusal the first wrong field's; r0 holds the defaults. */
static int parse_request(const char *body, size_t len, struct completion_req r0,
                         const struct api_fields *api, struct completion_req *out,
                         struct oai_error *err)
{
    memset(out, 0, sizeof(*out));
    memset(err, 0, sizeof(*err));
    struct completion_req r = r0;
    json_t *root = NULL;
    int rc;
    if ((rc = parse_root(body, len, &root, err)) < 0 ||
        (rc = read_string(root, "model", MODEL_MAX, true, &r.model, err)) < 0 ||
        (rc = api->before(root, &r, err)) < 0 || (rc = read_common(root, &r, err)) < 0 ||
        (rc = api->after(root, &r, err)) < 0) {
        json_decref(root);
        completion_req_free(&r);
        return rc;
    }
    json_decref(root);
    *out = r;
    return 0;
}

static int completion_before(const json_t *root, struct completion_req *r, struct oai_error *err)
{
    json_int_t x = r->max_tokens;
    int rc;
    if ((rc = read_prompt(root, r, err)) < 0 ||
        (rc = read_int(root, "max_tokens", 1, MAX_TOKENS_MAX, &x, err)) < 0)
        return rc;
    r->max_tokens = (int)x;
    r->max_tokens_given = field(root, "max_tokens") != NULL;
    return 0;
}

static int completion_after(const json_t *root, struct completion_req *r, struct oai_error *err)
{
    int rc = read_bool(root, "echo", &r->echo, err);
    return rc < 0 ? rc : read_unsupported_completion(root, err);
}

int oai_parse_completion(const char *body, size_t len, struct completion_req *out,
                         struct oai_error *err)
{
    static const struct api_fields api = {completion_before, completion_after};
    struct completion_req r0 = {
        .max_tokens = DEFAULT_MAX_TOKENS,
        .temperature = 1.0f,
        .top_p = 1.0f,
    };
    return parse_request(body, len, r0, &api, out, err);
}

/* messages, and max_completion_tokens, which replaced max_tokens: either
 * sets the limit, and both must agree. */
static int chat_before(const json_t *root, struct completion_req *r, struct oai_error *err)
{
    json_int_t x = r->max_tokens;
    int rc;
    if ((rc = read_messages(root, r, err)) < 0)
        return rc;
    const char *limit = field(root, "max_completion_tokens") ? "max_completion_tokens"
                                                             : "max_tokens";
    if ((rc = read_int(root, limit, 1, MAX_TOKENS_MAX, &x, err)) < 0)
        return rc;
    r->max_tokens = (int)x;
    r->max_tokens_given = field(root, limit) != NULL;
    if (r->max_tokens_given && strcmp(limit, "max_completion_tokens") == 0 &&
        field(root, "max_tokens")) {
        json_int_t y = 0;
        if ((rc = read_int(root, "max_tokens", 1, MAX_TOKENS_MAX, &y, err)) < 0)
            return rc;
        if (y != x)
            return unsupported(err, "max_tokens",
                               "max_tokens (%" JSON_INTEGER_FORMAT
                               ") and max_completion_tokens (%" JSON_INTEGER_FORMAT
                               ") differ: send one of them",
                               y, x);
    }
    return 0;
}

/* chat_template_kwargs: an object of more template variables, none of
 * them one the request's own fields set. */
static int chat_after(const json_t *root, struct completion_req *r, struct oai_error *err)
{
    int rc = read_unsupported_chat(root, err);
    if (rc < 0)
        return rc;
    const json_t *kw = field(root, "chat_template_kwargs");
    if (!kw)
        return 0;
    if (!json_is_object(kw))
        return bad_value(err, "chat_template_kwargs", "chat_template_kwargs",
                         "an object of template variables such as {\"enable_thinking\": false}",
                         kw);
    static const char *const reserved[] = {"messages", "add_generation_prompt", "tools",
                                           "documents"};
    for (size_t i = 0; i < sizeof(reserved) / sizeof(reserved[0]); i++)
        if (json_object_get(kw, reserved[i]))
            return unsupported(err, "chat_template_kwargs",
                               "chat_template_kwargs: may not set \"%s\" (the request's own "
                               "fields do)",
                               reserved[i]);
    if (!(r->template_kwargs = json_deep_copy(kw)))
        return oai_error_set(err, 500, "server_error", NULL, "", "out of memory");
    return 0;
}

int oai_parse_chat(const char *body, size_t len, struct completion_req *out,
                   struct oai_error *err)
{
    static const struct api_fields api = {chat_before, chat_after};
    struct completion_req r0 = {
        .max_tokens = OAI_CHAT_DEFAULT_MAX_TOKENS,
        .temperature = 1.0f,
        .top_p = 1.0f,
        .chat = true,
    };
    return parse_request(body, len, r0, &api, out, err);
}

void completion_req_free(struct completion_req *r)
{
    if (!r)
        return;
    free(r->model);
    free(r->prompt_text);
    free(r->prompt_ids);
    for (int i = 0; i < OAI_MAX_STOP; i++)
        free(r->stop[i]);
    free(r->user);
    json_decref(r->messages);
    json_decref(r->template_kwargs);
    memset(r, 0, sizeof(*r));
}
