/* The OpenAI completions and chat request parsers (server/oai.c): tables of bodies
 * with the outcome each must have (accepted, or the status and the field
 * named in param), the values and defaults of accepted ones, and the error
 * body read back with Jansson. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/oai.h"
#include "test.h"

struct body_case {
    const char *body;
    int status;             /* 0: accepted */
    const char *param;      /* when refused */
    const char *in_message; /* when refused: a part of the message (NULL: any) */
};

static const struct body_case cases[] = {
    /* accepted */
    {"{\"model\":\"m\",\"prompt\":\"hi\"}", 0, NULL, NULL},
    {"{\"model\":\"m\",\"prompt\":\"\"}", 0, NULL, NULL},
    {"{\"model\":\"m\",\"prompt\":[1,2,3]}", 0, NULL, NULL},
    {"{\"model\":\"m\",\"prompt\":[\"one\"]}", 0, NULL, NULL},
    {"{\"model\":\"m\",\"prompt\":[[5,6]]}", 0, NULL, NULL},
    {"{\"model\":\"m\",\"prompt\":\"x\",\"max_tokens\":null,\"temperature\":null,\"top_p\":null,"
     "\"stop\":null,\"n\":null,\"best_of\":null,\"logprobs\":null,\"suffix\":null,"
     "\"logit_bias\":null,\"presence_penalty\":null,\"frequency_penalty\":null,\"user\":null,"
     "\"seed\":null,\"stream\":null,\"echo\":null,\"stream_options\":null}",
     0, NULL, NULL},
    {"{\"model\":\"m\",\"prompt\":\"x\",\"n\":1,\"best_of\":1,\"logprobs\":0,\"logit_bias\":{},"
     "\"presence_penalty\":0,\"frequency_penalty\":0.0,\"temperature\":0,\"top_p\":1}",
     0, NULL, NULL},
    {"{\"model\":\"m\",\"prompt\":\"x\",\"unknown\":[1,{\"a\":2}],\"x-extra\":true}", 0, NULL,
     NULL},
    {"  \n{\"prompt\":\"x\",\"model\":\"m\"}\n", 0, NULL, NULL},
    {"{\"model\":\"m\",\"prompt\":\"x\",\"seed\":-1}", 0, NULL, NULL},
    {"{\"model\":\"m\",\"prompt\":[2147483647, 0]}", 0, NULL, NULL},
    /* the body */
    {"", 400, "", "empty body"},
    {"[1,2]", 400, "", "request body: expected a JSON object"},
    {"\"text\"", 400, "", "request body: expected a JSON object"},
    {"{\"model\":\"m\",\"prompt\":\"x\"", 400, "", "invalid JSON"},
    {"{\"model\":\"m\",\"prompt\":\"x\"} trailing", 400, "", "invalid JSON"},
    {"{\"model\":\"m\",\"model\":\"n\",\"prompt\":\"x\"}", 400, "", "duplicate"},
    {"{\"model\":\"m\",\"prompt\":\"a\xff\"}", 400, "", "UTF-8"},
    {"{\"model\":\"m\",\"prompt\":\"a\xc0\xaf\"}", 400, "", "UTF-8"},
    {"{\"model\":\"m\",\"prompt\":\"a\\u0000b\"}", 400, "", "\\u0000"},
    {"{\"model\":\"m\",\"prompt\":\"x\",\"temperature\":1e400}", 400, "", "invalid JSON"},
    {"{\"model\":\"m\",\"prompt\":\"x\",\"seed\":123456789012345678901234567890}", 400, "",
     "invalid JSON"},
    /* model */
    {"{\"prompt\":\"x\"}", 400, "model", "model: required"},
    {"{\"model\":\"\",\"prompt\":\"x\"}", 400, "model", "non-empty string"},
    {"{\"model\":7,\"prompt\":\"x\"}", 400, "model", "got 7"},
    /* prompt */
    {"{\"model\":\"m\"}", 400, "prompt", "prompt: required"},
    {"{\"model\":\"m\",\"prompt\":null}", 400, "prompt", "prompt: required"},
    {"{\"model\":\"m\",\"prompt\":5}", 400, "prompt",
     "prompt: expected a string or an array of token ids, got 5"},
    {"{\"model\":\"m\",\"prompt\":[]}", 400, "prompt", "non-empty array"},
    {"{\"model\":\"m\",\"prompt\":[1,2.5]}", 400, "prompt", "prompt[1]: expected a token id"},
    {"{\"model\":\"m\",\"prompt\":[1,-1]}", 400, "prompt", "got -1"},
    {"{\"model\":\"m\",\"prompt\":[2147483648]}", 400, "prompt", "got 2147483648"},
    {"{\"model\":\"m\",\"prompt\":[1,\"a\"]}", 400, "prompt", "prompt[1]"},
    {"{\"model\":\"m\",\"prompt\":[\"a\",\"b\"]}", 400, "prompt",
     "prompt: batches of prompts are not supported; send one request per prompt"},
    {"{\"model\":\"m\",\"prompt\":[[1],[2]]}", 400, "prompt", "batches"},
    {"{\"model\":\"m\",\"prompt\":[[]]}", 400, "prompt", "prompt[0]"},
    /* max_tokens */
    {"{\"model\":\"m\",\"prompt\":\"x\",\"max_tokens\":-5}", 400, "max_tokens",
     "max_tokens: expected an integer >= 1, got -5"},
    {"{\"model\":\"m\",\"prompt\":\"x\",\"max_tokens\":0}", 400, "max_tokens", "got 0"},
    {"{\"model\":\"m\",\"prompt\":\"x\",\"max_tokens\":16.0}", 400, "max_tokens", "got 16.0"},
    {"{\"model\":\"m\",\"prompt\":\"x\",\"max_tokens\":\"16\"}", 400, "max_tokens",
     "a string (\"16\")"},
    {"{\"model\":\"m\",\"prompt\":\"x\",\"max_tokens\":99999999999}", 400, "max_tokens",
     "<= 16777216"},
    /* sampling */
    {"{\"model\":\"m\",\"prompt\":\"x\",\"temperature\":2.1}", 400, "temperature",
     "temperature: expected a number in [0, 2], got 2.1"},
    {"{\"model\":\"m\",\"prompt\":\"x\",\"temperature\":-0.1}", 400, "temperature", NULL},
    {"{\"model\":\"m\",\"prompt\":\"x\",\"temperature\":\"hot\"}", 400, "temperature", NULL},
    {"{\"model\":\"m\",\"prompt\":\"x\",\"top_p\":0}", 400, "top_p", "(0, 1]"},
    {"{\"model\":\"m\",\"prompt\":\"x\",\"top_p\":1.01}", 400, "top_p", NULL},
    /* positive, but 0 as the float kept (found by fuzz_oai) */
    {"{\"model\":\"m\",\"prompt\":\"x\",\"top_p\":1e-60}", 400, "top_p", "got 1e-60"},
    {"{\"model\":\"m\",\"prompt\":\"x\",\"top_k\":-1}", 400, "top_k", "got -1"},
    {"{\"model\":\"m\",\"prompt\":\"x\",\"top_k\":1.5}", 400, "top_k", NULL},
    {"{\"model\":\"m\",\"prompt\":\"x\",\"seed\":1.0}", 400, "seed", NULL},
    {"{\"model\":\"m\",\"prompt\":\"x\",\"seed\":\"1\"}", 400, "seed", NULL},
    /* stop */
    {"{\"model\":\"m\",\"prompt\":\"x\",\"stop\":\"\"}", 400, "stop", NULL},
    {"{\"model\":\"m\",\"prompt\":\"x\",\"stop\":[]}", 400, "stop", "an array of 0"},
    {"{\"model\":\"m\",\"prompt\":\"x\",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}", 400, "stop",
     "an array of 5"},
    {"{\"model\":\"m\",\"prompt\":\"x\",\"stop\":[\"a\",3]}", 400, "stop", "stop[1]"},
    {"{\"model\":\"m\",\"prompt\":\"x\",\"stop\":[\"a\",\"\"]}", 400, "stop", "stop[1]"},
    {"{\"model\":\"m\",\"prompt\":\"x\",\"stop\":7}", 400, "stop", NULL},
    /* booleans */
    {"{\"model\":\"m\",\"prompt\":\"x\",\"stream\":1}", 400, "stream", "true or false, got 1"},
    {"{\"model\":\"m\",\"prompt\":\"x\",\"echo\":\"true\"}", 400, "echo", NULL},
    {"{\"model\":\"m\",\"prompt\":\"x\",\"stream_options\":{\"include_usage\":true}}", 400,
     "stream_options", "only allowed when stream is true"},
    {"{\"model\":\"m\",\"prompt\":\"x\",\"stream\":false,\"stream_options\":{}}", 400,
     "stream_options", NULL},
    {"{\"model\":\"m\",\"prompt\":\"x\",\"stream\":true,\"stream_options\":[]}", 400,
     "stream_options", NULL},
    {"{\"model\":\"m\",\"prompt\":\"x\",\"stream\":true,\"stream_options\":"
     "{\"include_usage\":1}}",
     400, "stream_options", "include_usage"},
    /* not implemented */
    {"{\"model\":\"m\",\"prompt\":\"x\",\"n\":2}", 400, "n", "n: only n = 1 is supported"},
    {"{\"model\":\"m\",\"prompt\":\"x\",\"n\":\"1\"}", 400, "n", NULL},
    {"{\"model\":\"m\",\"prompt\":\"x\",\"best_of\":3}", 400, "best_of", NULL},
    {"{\"model\":\"m\",\"prompt\":\"x\",\"logprobs\":5}", 400, "logprobs", "not supported"},
    {"{\"model\":\"m\",\"prompt\":\"x\",\"suffix\":\"end\"}", 400, "suffix", NULL},
    {"{\"model\":\"m\",\"prompt\":\"x\",\"logit_bias\":{\"50256\":-100}}", 400, "logit_bias", NULL},
    {"{\"model\":\"m\",\"prompt\":\"x\",\"presence_penalty\":0.5}", 400, "presence_penalty", NULL},
    {"{\"model\":\"m\",\"prompt\":\"x\",\"frequency_penalty\":-1}", 400, "frequency_penalty", NULL},
    {"{\"model\":\"m\",\"prompt\":\"x\",\"user\":5}", 400, "user", NULL},
};

/* The error body must be JSON with the four fields, param null when "". */
static void check_error_json(const struct oai_error *err)
{
    char *text = oai_error_json(err);
    CHECK(text != NULL);
    if (!text)
        return;
    json_error_t je;
    json_t *root = json_loads(text, 0, &je);
    CHECK_MSG(root != NULL, "%s: %s", text, je.text);
    json_t *e = json_object_get(root, "error");
    CHECK(json_is_object(e));
    CHECK(json_is_string(json_object_get(e, "message")));
    CHECK(json_is_string(json_object_get(e, "type")));
    json_t *param = json_object_get(e, "param");
    if (err->param[0])
        CHECK(json_is_string(param) && strcmp(json_string_value(param), err->param) == 0);
    else
        CHECK(json_is_null(param));
    json_t *code = json_object_get(e, "code");
    if (err->code)
        CHECK(json_is_string(code) && strcmp(json_string_value(code), err->code) == 0);
    else
        CHECK(json_is_null(code));
    json_decref(root);
    free(text);
}

typedef int (*parse_fn)(const char *, size_t, struct completion_req *, struct oai_error *);

/* Each body through parse: accepted, or refused with the case's status,
 * param and message part, leaving nothing in the request. */
static void run_table(const char *what, parse_fn parse, const struct body_case *table, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const struct body_case *c = &table[i];
        struct completion_req r;
        struct oai_error err;
        int rc = parse(c->body, strlen(c->body), &r, &err);
        if (c->status == 0) {
            CHECK_MSG(rc == 0, "%s case %zu (%s): %s", what, i, c->body, err.message);
            /* an accepted chat request holds its messages */
            CHECK_MSG(rc != 0 || parse != oai_parse_chat || (r.chat && r.messages), "%s case %zu",
                      what, i);
        } else {
            CHECK_MSG(rc < 0, "%s case %zu (%s) was accepted", what, i, c->body);
            CHECK_MSG(err.status == c->status, "%s case %zu: status %d", what, i, err.status);
            CHECK_MSG(strcmp(err.type, "invalid_request_error") == 0, "%s case %zu", what, i);
            CHECK_MSG(strcmp(err.param, c->param) == 0, "%s case %zu (%s): param '%s', not '%s'",
                      what, i, c->body, err.param, c->param);
            CHECK_MSG(!c->in_message || strstr(err.message, c->in_message), "%s case %zu: '%s'",
                      what, i, err.message);
            CHECK_MSG(strchr(err.message, '\n') == NULL, "%s case %zu", what, i);
            check_error_json(&err);
            CHECK(r.model == NULL && r.prompt_text == NULL && r.prompt_ids == NULL &&
                  r.n_stop == 0 && r.user == NULL && r.messages == NULL &&
                  r.template_kwargs == NULL);
        }
        completion_req_free(&r);
    }
}

TEST(table)
{
    run_table("completion", oai_parse_completion, cases, sizeof(cases) / sizeof(cases[0]));
}

static int parse_ok(const char *body, struct completion_req *r)
{
    struct oai_error err;
    int rc = oai_parse_completion(body, strlen(body), r, &err);
    CHECK_MSG(rc == 0, "%s: %s", body, err.message);
    return rc;
}

TEST(defaults)
{
    struct completion_req r;
    if (parse_ok("{\"model\":\"opt-125m\",\"prompt\":\"Hello\"}", &r) == 0) {
        CHECK(strcmp(r.model, "opt-125m") == 0);
        CHECK(strcmp(r.prompt_text, "Hello") == 0 && r.prompt_len == 5);
        CHECK(r.prompt_ids == NULL && r.n_prompt_ids == 0);
        CHECK(r.max_tokens == 16);
        CHECK(r.temperature == 1.0f && r.top_p == 1.0f && r.top_k == 0);
        CHECK(!r.has_seed && r.n_stop == 0);
        CHECK(!r.echo && !r.stream && !r.include_usage);
        CHECK(r.user == NULL);
    }
    completion_req_free(&r);
    CHECK(r.model == NULL);
    completion_req_free(NULL);
}

TEST(values)
{
    struct completion_req r;
    const char *body = "{\"model\":\"m\",\"prompt\":[0,7,2147483647],\"max_tokens\":32,"
                       "\"temperature\":0.5,\"top_p\":0.9,\"top_k\":40,\"seed\":-1,"
                       "\"stop\":[\"\\n\",\"END\"],\"echo\":true,\"stream\":true,"
                       "\"stream_options\":{\"include_usage\":true},\"user\":\"u1\"}";
    if (parse_ok(body, &r) == 0) {
        CHECK(r.prompt_text == NULL && r.n_prompt_ids == 3);
        CHECK(r.prompt_ids[0] == 0 && r.prompt_ids[1] == 7 && r.prompt_ids[2] == 2147483647);
        CHECK(r.max_tokens == 32);
        CHECK(r.temperature == 0.5f && r.top_p == 0.9f && r.top_k == 40);
        CHECK(r.has_seed && r.seed == UINT64_MAX);
        CHECK(r.n_stop == 2 && strcmp(r.stop[0], "\n") == 0 && strcmp(r.stop[1], "END") == 0);
        CHECK(r.echo && r.stream && r.include_usage);
        CHECK(strcmp(r.user, "u1") == 0);
    }
    completion_req_free(&r);

    /* a number field takes an integer; the batch of one is its element */
    if (parse_ok("{\"model\":\"m\",\"prompt\":[\"a b\"],\"temperature\":2,\"stop\":\"x\"}", &r) ==
        0) {
        CHECK(r.temperature == 2.0f);
        CHECK(strcmp(r.prompt_text, "a b") == 0 && r.prompt_len == 3);
        CHECK(r.n_stop == 1 && strcmp(r.stop[0], "x") == 0);
    }
    completion_req_free(&r);
    if (parse_ok("{\"model\":\"m\",\"prompt\":[[9]]}", &r) == 0)
        CHECK(r.n_prompt_ids == 1 && r.prompt_ids[0] == 9);
    completion_req_free(&r);
    /* the empty prompt: the server starts from BOS */
    if (parse_ok("{\"model\":\"m\",\"prompt\":\"\"}", &r) == 0)
        CHECK(r.prompt_text && r.prompt_text[0] == '\0' && r.prompt_len == 0);
    completion_req_free(&r);
    /* the body need not be NUL-terminated */
    const char *padded = "{\"model\":\"m\",\"prompt\":\"x\"}GARBAGE";
    struct oai_error err;
    CHECK(oai_parse_completion(padded, strlen(padded) - 7, &r, &err) == 0);
    completion_req_free(&r);
}

/* Deep nesting, long strings and long arrays stay bounded. */
TEST(limits)
{
    struct completion_req r;
    struct oai_error err;
    size_t n = 2000;
    char *deep = malloc(2 * n + 64);
    size_t k = (size_t)sprintf(deep, "{\"model\":\"m\",\"prompt\":\"x\",\"deep\":");
    memset(deep + k, '[', n);
    memset(deep + k + n, ']', n);
    strcpy(deep + k + 2 * n, "}");
    CHECK(oai_parse_completion(deep, strlen(deep), &r, &err) == 0); /* ignored, under the cap */
    completion_req_free(&r);
    memset(deep, '[', n);
    CHECK(oai_parse_completion(deep, n, &r, &err) < 0 && err.status == 400 && err.param[0] == '\0');
    free(deep);

    /* a long model name is refused, quoted only in part */
    char *body = malloc(100000);
    k = (size_t)sprintf(body, "{\"prompt\":\"x\",\"model\":\"");
    memset(body + k, 'a', 50000);
    strcpy(body + k + 50000, "\"}");
    CHECK(oai_parse_completion(body, strlen(body), &r, &err) < 0);
    CHECK(strcmp(err.param, "model") == 0 && strlen(err.message) < 200);
    CHECK(strstr(err.message, "...") != NULL);
    check_error_json(&err);
    /* quoting cuts at a character boundary: a 2-byte character across byte 64 */
    k = (size_t)sprintf(body, "{\"prompt\":\"x\",\"model\":1,\"stop\":\"");
    body[k++] = 'a';
    for (int i = 0; i < 40; i++) {
        body[k++] = (char)0xC3;
        body[k++] = (char)0xA9; /* é */
    }
    strcpy(body + k, "\"}");
    CHECK(oai_parse_completion(body, strlen(body), &r, &err) < 0);
    check_error_json(&err);
    free(body);
}

/* oai_error_set and the body for other statuses; a message that is not
 * UTF-8 (quoted from a URL) still makes a JSON body. */
TEST(error_json)
{
    struct oai_error err;
    CHECK(oai_error_set(&err, 404, "invalid_request_error", "model_not_found", "model",
                        "model: no model named '%s'", "x\"y\\z") < 0);
    CHECK(err.status == 404);
    check_error_json(&err);
    char *text = oai_error_json(&err);
    json_t *root = json_loads(text, 0, NULL);
    CHECK(strcmp(json_string_value(json_object_get(json_object_get(root, "error"), "message")),
                 "model: no model named 'x\"y\\z'") == 0);
    json_decref(root);
    free(text);
    oai_error_set(&err, 401, "authentication_error", NULL, NULL, "bad key \xff\xfe");
    check_error_json(&err);
    text = oai_error_json(&err);
    CHECK(text && strstr(text, "bad key ??") != NULL);
    free(text);
}

/* POST /v1/chat/completions bodies: accepted, or the status and param. */
static const struct body_case chat_cases[] = {
    {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", 0, NULL, NULL},
    {"{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"s\"},"
     "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"}]},"
     "{\"role\":\"assistant\",\"content\":null},{\"role\":\"user\",\"content\":\"\",\"name\":\"b\"}"
     "],"
     "\"max_completion_tokens\":5,\"tools\":[],\"tool_choice\":\"none\",\"logprobs\":false,"
     "\"response_format\":{\"type\":\"text\"},\"n\":1,\"top_logprobs\":null,\"stream\":true,"
     "\"stream_options\":{\"include_usage\":true},\"modalities\":[\"text\"]}",
     0, NULL, NULL},
    {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":4,"
     "\"max_completion_tokens\":4}",
     0, NULL, NULL},
    {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
     "\"chat_template_kwargs\":{\"enable_thinking\":false,\"date_string\":\"1 Jan 2030\"}}",
     0, NULL, NULL},
    {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
     "\"chat_template_kwargs\":[1]}",
     400, "chat_template_kwargs", "an object"},
    {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
     "\"chat_template_kwargs\":{\"messages\":[]}}",
     400, "chat_template_kwargs", "may not set \"messages\""},
    {"{\"model\":\"m\"}", 400, "messages", "messages: required"},
    {"{\"model\":\"m\",\"messages\":[]}", 400, "messages", "non-empty array"},
    {"{\"model\":\"m\",\"messages\":{}}", 400, "messages", "got an object"},
    {"{\"model\":\"m\",\"messages\":[\"hi\"]}", 400, "messages", "messages[0]"},
    {"{\"model\":\"m\",\"messages\":[{\"content\":\"hi\"}]}", 400, "messages", "messages[0].role"},
    {"{\"model\":\"m\",\"messages\":[{\"role\":\"tool\",\"content\":\"hi\"}]}", 400, "messages",
     "tool and function messages"},
    {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\"}]}", 400, "messages",
     "messages[0].content"},
    {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":null}]}", 400, "messages",
     "messages[0].content"},
    {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}",
     400, "messages", "messages[0].content[0].type: only \"text\""},
    {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]}", 400,
     "messages", "messages[0].content[0].text"},
    {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"name\":1}]}", 400,
     "messages", "messages[0].name"},
    {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"tool_calls\":[{\"id\":"
     "\"c\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}]}",
     400, "messages", "messages[0].tool_calls: tool calls are not supported"},
    {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\","
     "\"content\":null,\"tool_calls\":[{\"id\":\"c\"}]}]}",
     400, "messages", "messages[1].tool_calls"},
    {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"tool_calls\":{}}]}",
     400, "messages", "messages[0].tool_calls"},
    {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"function_call\":"
     "{\"name\":\"f\"}}]}",
     400, "messages", "messages[0].function_call"},
    {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"tool_calls\":null},"
     "{\"role\":\"assistant\",\"content\":\"y\",\"tool_calls\":[]}]}",
     0, NULL, NULL},
    {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":3,"
     "\"max_completion_tokens\":4}",
     400, "max_tokens", "differ"},
    {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
     "\"max_completion_tokens\":0}",
     400, "max_completion_tokens", ">= 1"},
    {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{}]}", 400,
     "tools", "tool calling"},
    {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":"
     "\"auto\"}",
     400, "tool_choice", NULL},
    {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
     "\"response_format\":{\"type\":\"json_object\"}}",
     400, "response_format", "structured output"},
    {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true}",
     400, "logprobs", NULL},
    {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":3}",
     400, "top_logprobs", NULL},
    {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"functions\":[]}", 400,
     "functions", NULL},
    {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":3}", 400, "n",
     NULL},
    {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
     "\"frequency_penalty\":0.5}",
     400, "frequency_penalty", NULL},
};

TEST(chat_table)
{
    run_table("chat", oai_parse_chat, chat_cases, sizeof(chat_cases) / sizeof(chat_cases[0]));
}

/* What an accepted chat request holds: the messages as the template sees
 * them (content one string, text parts joined with "\n"), the defaults. */
TEST(chat_values)
{
    static const char body[] =
        "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"s\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
        "{\"type\":\"text\",\"text\":\"b \\u00e9\"}],\"name\":\"bob\"},"
        "{\"role\":\"assistant\",\"content\":null,\"junk\":[1]}]}";
    struct completion_req r;
    struct oai_error err;
    int rc = oai_parse_chat(body, strlen(body), &r, &err);
    CHECK_MSG(rc == 0, "%s", err.message);
    if (rc != 0)
        return;
    CHECK(r.chat && !r.max_tokens_given && r.max_tokens == OAI_CHAT_DEFAULT_MAX_TOKENS);
    CHECK(r.prompt_text == NULL && r.prompt_ids == NULL && !r.echo);
    CHECK(json_array_size(r.messages) == 3);
    json_t *m1 = json_array_get(r.messages, 1);
    CHECK(strcmp(json_string_value(json_object_get(m1, "content")), "a\nb \xc3\xa9") == 0);
    CHECK(strcmp(json_string_value(json_object_get(m1, "name")), "bob") == 0);
    json_t *m2 = json_array_get(r.messages, 2);
    CHECK(strcmp(json_string_value(json_object_get(m2, "content")), "") == 0);
    CHECK(json_object_get(m2, "junk") == NULL);
    completion_req_free(&r);
    rc = oai_parse_chat("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                        "\"max_tokens\":7}",
                        strlen("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                               "\"max_tokens\":7}"),
                        &r, &err);
    CHECK(rc == 0 && r.max_tokens == 7 && r.max_tokens_given);
    completion_req_free(&r);
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, NULL);
}
