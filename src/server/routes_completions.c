/* POST /v1/completions and /v1/chat/completions: a request body -> (for
 * chat, the model's chat template) -> the model's tokenizer -> the engine,
 * then either one JSON response or server-sent events as tokens arrive.
 *
 * A chat request's messages are rendered with the model's template (as
 * transformers' apply_chat_template, add_generation_prompt true) and the
 * text encoded without an added BOS (the template writes its own, as
 * transformers tokenizes a rendered chat). Its completion ends at the
 * model's EOS ids (the engine's) and at the tokens that end a turn in the
 * template (srv_model.turn_end: on_token ends the request there, and the
 * token's text is never part of the message); the answer is a
 * chat.completion, or chat.completion.chunk events: the role first, then
 * content deltas, then the finish reason.
 *
 * The text of a completion is decoded as the tokens come (bpe_stream, so a
 * UTF-8 character split across tokens is sent whole) and checked against the
 * stop strings on the runner thread: at a match the text is cut before it
 * and the engine request ended at once (engine_stop: it completes ok). A stream sends only text that
 * cannot be the start of a stop string (req.safe); the rest waits for the
 * next token or the end.
 *
 * Non-streamed: the HTTP thread submits and suspends the connection; on_done
 * resumes it and the access handler answers. Streamed: the response is
 * queued at once (200, text/event-stream) and its content reader suspends
 * the connection whenever it has nothing to send; on_token / on_done resume
 * it.
 *
 * A model without a tokenizer (srv_model.tok NULL) takes token-id prompts
 * only: no text prompt, stop strings or echo. Its completions carry
 * "text": "" and the generated ids in "token_ids" (every id of the
 * response; in a stream, each chunk's new ones). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/types.h>
#include <time.h>

#include "core/error.h"
#include "server/log.h"
#include "server/server_impl.h"
#include "server/stops.h"

/* ---- text shared with the engine's callbacks (under r->lock) ---- */

/* After text grew from old bytes: cuts it at the first stop string (true)
 * or moves safe past what can no longer start one. Under r->lock. */
static bool text_check_stops(struct srv_req *r, size_t old)
{
    const struct completion_req *q = &r->creq;
    long at = stops_find(r->text.p, r->text.len, old, q->stop, q->n_stop);
    if (at >= 0) {
        strbuf_truncate(&r->text, (size_t)at);
        r->safe = r->text.len;
        return true;
    }
    size_t safe = stops_safe(r->text.p, r->text.len, q->stop, q->n_stop);
    r->safe = safe > r->safe ? safe : r->safe;
    return false;
}

static int ends_push(struct srv_req *r)
{
    if (r->n_ends == r->ends_cap) {
        int cap = r->ends_cap ? r->ends_cap * 2 : 64;
        int *e = realloc(r->ends, (size_t)cap * sizeof(*e));
        if (!e)
            return ERR_NOMEM;
        r->ends = e;
        r->ends_cap = cap;
    }
    r->ends[r->n_ends++] = (int)r->text.len;
    return 0;
}

static int ids_push(struct srv_req *r, int32_t id)
{
    if (r->n_gen_ids == r->gen_ids_cap) {
        int cap = r->gen_ids_cap ? r->gen_ids_cap * 2 : 64;
        int32_t *g = realloc(r->gen_ids, (size_t)cap * sizeof(*g));
        if (!g)
            return ERR_NOMEM;
        r->gen_ids = g;
        r->gen_ids_cap = cap;
    }
    r->gen_ids[r->n_gen_ids++] = id;
    return 0;
}

static bool is_turn_end(const struct srv_model *m, int32_t id)
{
    for (int i = 0; i < m->n_turn_end; i++)
        if (m->turn_end[i] == id)
            return true;
    return false;
}

/* The engine's on_token: on a runner thread, between two steps of
 * its batch. Decodes and checks stops under r->lock (a copy of a few bytes),
 * ends the request at a stop, resumes a stream's connection; never blocks. */
static void on_token(struct engine_req *er, int32_t id, void *ctx)
{
    struct srv_req *r = ctx;
    bool cancel = false, stop = false, wake = false;
    pthread_mutex_lock(&r->lock);
    if (!r->stop_hit && !r->done && !r->m->tok) {
        r->n_gen++;
        if (ids_push(r, id) < 0)
            cancel = true; /* out of memory: the request ends with what it has */
        wake = r->suspended && r->creq.stream;
        if (wake)
            r->suspended = false;
    } else if (!r->stop_hit && !r->done && r->creq.chat && is_turn_end(r->m, id)) {
        r->n_gen++; /* counted, as an EOS is, but never decoded into the message */
        stop = r->stop_hit = true;
        wake = r->suspended && r->creq.stream;
        if (wake)
            r->suspended = false;
    } else if (!r->stop_hit && !r->done) {
        r->n_gen++;
        int n = bpe_stream_push(&r->dec, id, r->tokbuf, r->tokbuf_cap);
        size_t old = r->text.len;
        if (n > 0 && strbuf_append(&r->text, r->tokbuf, (size_t)n) < 0)
            cancel = true; /* out of memory: the request ends with what it has */
        if (text_check_stops(r, old))
            stop = r->stop_hit = true;
        ends_push(r);
        wake = r->suspended && r->creq.stream;
        if (wake)
            r->suspended = false;
    }
    pthread_mutex_unlock(&r->lock);
    if (stop) /* it completes ok at the next step boundary */
        engine_stop(r->s->stack->engine, er);
    else if (cancel)
        engine_cancel(r->s->stack->engine, er);
    if (wake)
        MHD_resume_connection(r->conn);
}

/* The engine's on_done: on an engine thread, once. Records the outcome,
 * resumes the connection and drops the engine's reference (which may free
 * r: nothing of r is touched after). */
static void on_done(struct engine_req *er, void *ctx)
{
    struct srv_req *r = ctx;
    struct server *s = r->s;
    pthread_mutex_lock(&r->lock);
    if (!r->stop_hit && r->m->tok) {
        int n = bpe_stream_finish(&r->dec, r->tokbuf, r->tokbuf_cap);
        size_t old = r->text.len;
        if (n > 0 && strbuf_append(&r->text, r->tokbuf, (size_t)n) == 0)
            r->stop_hit = text_check_stops(r, old);
    }
    r->status = engine_req_status(er);
    snprintf(r->error, sizeof(r->error), "%s", engine_req_error(er));
    engine_req_output(er, &r->n_out);
    r->safe = r->text.len;
    r->done = true;
    bool wake = r->suspended;
    r->suspended = false;
    struct MHD_Connection *conn = r->conn;
    pthread_mutex_unlock(&r->lock);
    srv_inflight_add(s, -1);
    if (wake)
        MHD_resume_connection(conn);
    srv_req_unref(r);
}

/* ---- the outcome ---- */

/* "stop", "length", or NULL when the request failed. Under r->lock, done. */
static const char *finish_reason(const struct srv_req *r)
{
    if (r->stop_hit)
        return "stop";
    if (r->status != 0)
        return NULL;
    return r->n_out < r->creq.max_tokens ? "stop" : "length";
}

static int completion_tokens(const struct srv_req *r)
{
    return r->stop_hit || r->status != 0 ? r->n_gen : r->n_out;
}

/* The error a failed request answers with. Under r->lock, done. */
static void failure(const struct srv_req *r, struct oai_error *e)
{
    if (r->status == ERR_CANCELLED && r->cancel_shutdown)
        oai_error_set(e, 503, "server_error", "server_shutting_down", "",
                      "The request was cancelled: the server is shutting down.");
    else if (r->status == ERR_TIMEOUT)
        oai_error_set(e, 504, "server_error", "request_timeout", "",
                      "The request was not done within the server's request timeout (%g s): %s.",
                      r->s->cfg->request_timeout_s, r->error[0] ? r->error : "timed out");
    else if (r->status == ERR_CANCELLED)
        oai_error_set(e, 503, "server_error", "request_cancelled", "",
                      "The request was cancelled.");
    else if (r->status == ERR_NOT_FOUND)
        oai_error_set(e, 404, "invalid_request_error", "model_not_found", "model", "%s",
                      r->error[0] ? r->error : "The model was removed.");
    else if (r->status == ERR_UNREACHABLE) /* under mpirun: a process of its model is lost */
        oai_error_set(e, 503, "server_error", "process_unavailable", "model", "%s",
                      r->error[0] ? r->error : "A process holding the model is not answering.");
    else if (r->status == ERR_BUSY) /* its model cannot be loaded beside the pinned ones */
        oai_error_set(e, 503, "server_error", "model_unavailable", "model", "%s",
                      r->error[0] ? r->error : "The model cannot be loaded now.");
    else
        oai_error_set(e, 500, "server_error", "engine_error", "", "The engine failed: %s",
                      r->error[0] ? r->error : err_name(r->status));
}

static json_t *usage_json(const struct srv_req *r)
{
    int c = completion_tokens(r);
    return json_pack("{s:i, s:i, s:i}", "prompt_tokens", r->n_prompt, "completion_tokens", c,
                     "total_tokens", r->n_prompt + c);
}

/* One completion object: a response or a stream chunk. text may be NULL
 * (an empty choices list, for the usage chunk). For a model without a
 * tokenizer the choice also carries ids[0..n_ids) as token_ids. */
static json_t *completion_json(const struct srv_req *r, const char *text, size_t len,
                               const int32_t *ids, int n_ids, const char *finish, json_t *usage)
{
    json_t *choices = json_array();
    if (text) {
        json_t *t = json_stringn(text, len);
        if (!t) /* not UTF-8: cannot happen with bpe_stream's output; say so rather than fail */
            t = json_string("\xef\xbf\xbd");
        json_t *c = json_pack("{s:i, s:o, s:n, s:o}", "index", 0, "text", t, "logprobs",
                              "finish_reason", finish ? json_string(finish) : json_null());
        if (c && !r->m->tok) {
            json_t *a = json_array();
            for (int i = 0; a && i < n_ids; i++)
                json_array_append_new(a, json_integer(ids[i]));
            json_object_set_new(c, "token_ids", a);
        }
        json_array_append_new(choices, c);
    }
    return json_pack("{s:s, s:s, s:I, s:s, s:o, s:o}", "id", r->id, "object", "text_completion",
                     "created", (json_int_t)r->created, "model", r->m->name, "choices", choices,
                     "usage", usage ? usage : json_null());
}

enum chat_part { CHAT_MESSAGE, CHAT_ROLE, CHAT_DELTA, CHAT_FINISH, CHAT_USAGE };

/* A chat.completion (CHAT_MESSAGE: the whole message) or one
 * chat.completion.chunk: the role's first delta, a content delta, the
 * finish reason's empty delta, or the usage chunk (no choices). */
static json_t *chat_json(const struct srv_req *r, enum chat_part part, const char *text,
                         size_t len, const char *finish, json_t *usage)
{
    json_t *choices = json_array();
    if (part != CHAT_USAGE) {
        json_t *body = json_object();
        if (body && (part == CHAT_MESSAGE || part == CHAT_ROLE))
            json_object_set_new(body, "role", json_string("assistant"));
        if (body && part != CHAT_FINISH) {
            json_t *t = json_stringn(text ? text : "", text ? len : 0);
            /* not UTF-8: cannot happen with bpe_stream's output */
            json_object_set_new(body, "content", t ? t : json_string("\xef\xbf\xbd"));
        }
        json_array_append_new(choices,
                              json_pack("{s:i, s:o, s:n, s:o}", "index", 0,
                                        part == CHAT_MESSAGE ? "message" : "delta", body,
                                        "logprobs", "finish_reason",
                                        finish ? json_string(finish) : json_null()));
    }
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:o}", "id", r->id, "object",
                          part == CHAT_MESSAGE ? "chat.completion" : "chat.completion.chunk",
                          "created", (json_int_t)r->created, "model", r->m->name, "choices",
                          choices);
    if (o && (part == CHAT_MESSAGE || usage))
        json_object_set_new(o, "usage", usage ? usage : json_null());
    else
        json_decref(usage);
    return o;
}

/* Whether the access handler has something to do: answer, or close. */
static bool req_ready(struct srv_req *r)
{
    return r->done || r->client_gone;
}

/* The one response of a non-streamed request, once done. */
static enum MHD_Result reply_final(struct srv_req *r)
{
    pthread_mutex_lock(&r->lock);
    const char *finish = finish_reason(r);
    struct oai_error e;
    json_t *body = NULL;
    if (finish) {
        size_t n = r->echo_len + r->text.len;
        char *all = malloc(n + 1);
        if (all) {
            memcpy(all, r->echo_text ? r->echo_text : "", r->echo_len);
            memcpy(all + r->echo_len, r->text.p ? r->text.p : "", r->text.len);
            body = r->creq.chat
                       ? chat_json(r, CHAT_MESSAGE, all, n, finish, usage_json(r))
                       : completion_json(r, all, n, r->gen_ids, r->n_gen_ids, finish,
                                         usage_json(r));
            free(all);
        }
    } else {
        failure(r, &e);
    }
    pthread_mutex_unlock(&r->lock);
    return finish ? srv_reply_json(r, 200, body) : srv_reply_error(r, &e);
}

/* ---- streaming ---- */

/* Appends "data: JSON\n\n"; takes ev. */
static int out_event(struct srv_req *r, json_t *ev)
{
    char *s = ev ? json_dumps(ev, JSON_COMPACT) : NULL;
    json_decref(ev);
    if (!s)
        return ERR_NOMEM;
    int rc = strbuf_append(&r->out, "data: ", 6);
    if (rc == 0)
        rc = strbuf_append(&r->out, s, strlen(s));
    if (rc == 0)
        rc = strbuf_append(&r->out, "\n\n", 2);
    free(s);
    return rc;
}

/* A chunk of text, or (finish set) the stream's last one. */
static int out_chunk(struct srv_req *r, const char *text, size_t len, const char *finish)
{
    if (!r->creq.chat)
        return out_event(r, completion_json(r, text, len, NULL, 0, finish, NULL));
    return out_event(r, chat_json(r, finish ? CHAT_FINISH : CHAT_DELTA, text, len, finish, NULL));
}

/* The end of a stream once done: the finish chunk and usage, or the error
 * event; then [DONE]. Takes usage. */
static int stream_end(struct srv_req *r, bool ok, const char *finish, const struct oai_error *e,
                      json_t *usage)
{
    int rc;
    if (ok) {
        rc = out_chunk(r, "", 0, finish);
        if (rc == 0 && usage) {
            json_t *ev = r->creq.chat ? chat_json(r, CHAT_USAGE, NULL, 0, NULL, usage)
                                      : completion_json(r, NULL, 0, NULL, 0, NULL, usage);
            usage = NULL;
            rc = out_event(r, ev);
        }
    } else {
        char *err = oai_error_json(e);
        json_t *ev = err ? json_loads(err, 0, NULL) : NULL;
        free(err);
        rc = out_event(r, ev);
        log_warn("%s %s: stream ended with an error: %s", r->method, r->path, e->message);
    }
    if (rc == 0)
        rc = strbuf_append(&r->out, "data: [DONE]\n\n", 14);
    r->final_sent = true;
    json_decref(usage);
    return rc;
}

/* How a finished stream ends, under r->lock: *ok and its finish reason,
 * or the failure in *e; returns the usage chunk's object when asked for. */
static json_t *stream_outcome(struct srv_req *r, bool *ok, const char **finish,
                              struct oai_error *e)
{
    *finish = finish_reason(r);
    *ok = *finish != NULL;
    if (!*ok)
        failure(r, e);
    return *ok && r->creq.include_usage ? usage_json(r) : NULL;
}

/* stream_produce for a model without a tokenizer: one chunk per new id,
 * its text "" and token_ids [id]. */
static int stream_produce_ids(struct srv_req *r)
{
    pthread_mutex_lock(&r->lock);
    int from = r->ids_sent, to = r->n_gen_ids;
    int32_t *slice = NULL;
    if (to > from && (slice = malloc((size_t)(to - from) * sizeof(*slice)))) {
        memcpy(slice, r->gen_ids + from, (size_t)(to - from) * sizeof(*slice));
        r->ids_sent = to;
    }
    bool done = r->done, ok = false;
    const char *finish = NULL;
    struct oai_error e;
    json_t *usage = done ? stream_outcome(r, &ok, &finish, &e) : NULL;
    pthread_mutex_unlock(&r->lock);
    if (to > from && !slice) {
        json_decref(usage);
        return ERR_NOMEM;
    }
    int rc = 0;
    for (int i = 0; i < to - from && rc == 0; i++)
        rc = out_event(r, completion_json(r, "", 0, slice + i, 1, NULL, NULL));
    free(slice);
    if (rc == 0 && done && !r->final_sent)
        return stream_end(r, ok, finish, &e, usage);
    json_decref(usage);
    return rc;
}

/* Turns what the callbacks added since the last call into events in r->out.
 * HTTP thread (the content reader). */
static int stream_produce(struct srv_req *r)
{
    if (!r->m->tok)
        return stream_produce_ids(r);
    int rc = 0;
    if (r->creq.chat && !r->role_sent) {
        r->role_sent = true;
        if ((rc = out_event(r, chat_json(r, CHAT_ROLE, "", 0, NULL, NULL))) < 0)
            return rc;
    }
    if (!r->echo_sent) {
        r->echo_sent = true;
        if (r->echo_len && (rc = out_chunk(r, r->echo_text, r->echo_len, NULL)) < 0)
            return rc;
    }
    /* copy the new text and its token boundaries out of the lock */
    pthread_mutex_lock(&r->lock);
    size_t base = r->sent, safe = r->safe;
    char *slice = NULL;
    int *ends = NULL, n_ends = 0;
    if (safe > base && (slice = malloc(safe - base))) {
        memcpy(slice, r->text.p + base, safe - base);
        int k = r->ends_sent;
        while (k < r->n_ends && (size_t)r->ends[k] <= safe)
            k++;
        if (k > r->ends_sent && (ends = malloc((size_t)(k - r->ends_sent) * sizeof(*ends)))) {
            memcpy(ends, r->ends + r->ends_sent, (size_t)(k - r->ends_sent) * sizeof(*ends));
            n_ends = k - r->ends_sent;
        }
        r->ends_sent = k;
    }
    bool done = r->done, ok = false;
    const char *finish = NULL;
    struct oai_error e;
    json_t *usage = done ? stream_outcome(r, &ok, &finish, &e) : NULL;
    pthread_mutex_unlock(&r->lock);
    if (safe > base && !slice)
        return ERR_NOMEM;
    /* one event per token's piece, then what is left up to safe */
    size_t at = base;
    for (int i = 0; i < n_ends && rc == 0; i++) {
        size_t end = (size_t)ends[i];
        if (end > at)
            rc = out_chunk(r, slice + (at - base), end - at, NULL);
        at = end > at ? end : at;
    }
    if (rc == 0 && safe > at)
        rc = out_chunk(r, slice + (at - base), safe - at, NULL);
    r->sent = safe > base ? safe : base;
    free(slice);
    free(ends);
    if (rc == 0 && done && !r->final_sent)
        return stream_end(r, ok, finish, &e, usage);
    json_decref(usage);
    return rc;
}

static bool stream_ready(struct srv_req *r)
{
    return r->safe > r->sent || r->n_gen_ids > r->ids_sent || r->done || r->client_gone || r->probe;
}

/* MHD's content reader of a stream: on a pool thread. Sends what is ready;
 * with nothing ready it suspends the connection and returns 0 (on_token or
 * on_done resumes it, and MHD calls again). */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct srv_req *r = cls;
    for (;;) {
        if (r->out_pos < r->out.len) {
            size_t n = r->out.len - r->out_pos < max ? r->out.len - r->out_pos : max;
            memcpy(buf, r->out.p + r->out_pos, n);
            r->out_pos += n;
            if (r->out_pos == r->out.len) {
                r->out_pos = 0;
                strbuf_truncate(&r->out, 0);
            }
            return (ssize_t)n;
        }
        if (r->final_sent)
            return MHD_CONTENT_READER_END_OF_STREAM;
        pthread_mutex_lock(&r->lock);
        bool gone = r->client_gone, probe = r->probe;
        r->probe = false;
        pthread_mutex_unlock(&r->lock);
        if (gone)
            return MHD_CONTENT_READER_END_WITH_ERROR;
        /* the client half-closed: a comment line (ignored by SSE readers)
         * makes a client that is gone reset, which the watcher sees */
        if (probe && strbuf_append(&r->out, ":\n\n", 3) < 0)
            return MHD_CONTENT_READER_END_WITH_ERROR;
        if (stream_produce(r) < 0)
            return MHD_CONTENT_READER_END_WITH_ERROR;
        if (r->out.len || r->final_sent)
            continue;
        if (srv_req_suspend_unless(r, stream_ready))
            return 0;
    }
}

static void stream_free(void *cls)
{
    srv_req_unref(cls);
}

/* ---- the request ---- */

static void random_bytes(void *p, size_t n)
{
    if (getrandom(p, n, 0) != (ssize_t)n) {
        /* no entropy source: time and address, good enough for ids and seeds */
        uint64_t x = (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)p ^ (uint64_t)clock();
        for (size_t i = 0; i < n; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            ((unsigned char *)p)[i] = (unsigned char)(x >> 56);
        }
    }
}

/* The prompt's ids: the text through the model's tokenizer (BOS as
 * `shardswap generate` adds it), or the ids as given. */
static int prompt_ids(struct srv_req *r, int32_t **ids, int *n, struct oai_error *e)
{
    const struct completion_req *q = &r->creq;
    const struct srv_model *m = r->m;
    if (q->prompt_text) {
        size_t nn = 0;
        if (bpe_encode(m->tok, q->prompt_text, q->prompt_len, !q->chat, ids, &nn) < 0)
            return oai_error_set(e, 400, "invalid_request_error", NULL, "prompt",
                                 "The prompt could not be tokenized: %s", err_msg());
        *n = (int)nn;
        return 0;
    }
    for (int i = 0; i < q->n_prompt_ids; i++)
        if (q->prompt_ids[i] < 0 || q->prompt_ids[i] >= m->vocab)
            return oai_error_set(e, 400, "invalid_request_error", "invalid_token", "prompt",
                                 "Token id %d at prompt[%d] is outside model %s's vocabulary "
                                 "of %d tokens.",
                                 (int)q->prompt_ids[i], i, m->name, m->vocab);
    if (!(*ids = malloc(((size_t)q->n_prompt_ids + 1) * sizeof(**ids))))
        return oai_error_set(e, 500, "server_error", NULL, "", "Out of memory.");
    memcpy(*ids, q->prompt_ids, (size_t)q->n_prompt_ids * sizeof(**ids));
    *n = q->n_prompt_ids;
    return 0;
}

/* What echo prepends: the prompt as given, or its ids decoded. */
static int echo_prepare(struct srv_req *r, struct oai_error *e)
{
    const struct completion_req *q = &r->creq;
    if (!q->echo)
        return 0;
    if (q->prompt_text) {
        r->echo_text = strdup(q->prompt_text);
        r->echo_len = q->prompt_len;
    } else {
        if (bpe_decode(r->m->tok, q->prompt_ids, (size_t)q->n_prompt_ids, true, &r->echo_text,
                       &r->echo_len) < 0)
            return oai_error_set(e, 400, "invalid_request_error", NULL, "prompt",
                                 "The prompt's ids could not be decoded: %s", err_msg());
    }
    if (!r->echo_text)
        return oai_error_set(e, 500, "server_error", NULL, "", "Out of memory.");
    return 0;
}

/* A chat request's prompt: its messages through the model's template. */
static int chat_render(struct srv_req *r, struct oai_error *e)
{
    struct completion_req *q = &r->creq;
    const struct srv_model *m = r->m;
    if (!m->chat)
        return oai_error_set(e, 400, "invalid_request_error", "no_chat_template", "model",
                             "Model %s does not take chat requests: %s. Use /v1/completions, "
                             "or give it a chat template.",
                             m->name, m->no_chat);
    struct chat_render_opts o = {.add_generation_prompt = true, .kwargs = q->template_kwargs};
    int rc = chat_template_render(m->chat, q->messages, &o, &q->prompt_text, &q->prompt_len);
    if (rc == CHAT_RAISED)
        return oai_error_set(e, 400, "invalid_request_error", "chat_template_error", "messages",
                             "Model %s's chat template rejects the messages: %s", m->name,
                             err_msg());
    if (rc == ERR_NOMEM)
        return oai_error_set(e, 500, "server_error", NULL, "", "Out of memory.");
    if (rc < 0)
        return oai_error_set(e, 400, "invalid_request_error", "chat_template_error", "messages",
                             "Model %s's chat template cannot render the messages: %s", m->name,
                             err_msg());
    return 0;
}

/* What a model without a tokenizer cannot do: text in (a text prompt),
 * text matched (stop strings) or text out of the prompt (echo). */
static int no_tokenizer_check(const struct srv_req *r, struct oai_error *e)
{
    const struct completion_req *q = &r->creq;
    if (!r->m->tok && q->chat)
        return oai_error_set(e, 400, "invalid_request_error", "no_tokenizer", "model",
                             "Model %s has no tokenizer: it takes token-id prompts on "
                             "/v1/completions only, no chat requests.",
                             r->m->name);
    const char *what = q->prompt_text ? "prompt" : q->n_stop ? "stop" : q->echo ? "echo" : NULL;
    if (r->m->tok || !what)
        return 0;
    return oai_error_set(e, 400, "invalid_request_error", "no_tokenizer", what,
                         "Model %s has no tokenizer: it takes token-id prompts only "
                         "(\"prompt\": [ids]), without stop or echo (got %s).",
                         r->m->name, q->prompt_text ? "a text prompt" : what);
}

static enum MHD_Result submit_failed(struct srv_req *r, int rc)
{
    struct oai_error e;
    if (rc == ERR_BUSY) {
        oai_error_set(&e, 429, "rate_limit_error", "queue_full", "",
                      "Model %s's queue is full; retry later. (%s)", r->m->name, err_msg());
        return srv_reply_error_hdr(r, &e, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    }
    if (rc == ERR_NOT_FOUND)
        oai_error_set(&e, 404, "invalid_request_error", "model_not_found", "model",
                      "The model '%s' does not exist.", r->creq.model);
    else if (rc == ERR_INVALID)
        oai_error_set(&e, 400, "invalid_request_error", NULL, "", "%s", err_msg());
    else
        oai_error_set(&e, 500, "server_error", NULL, "", "%s", err_msg());
    return srv_reply_error(r, &e);
}

enum MHD_Result srv_completions(struct srv_req *r)
{
    struct server *s = r->s;
    struct completion_req *q = &r->creq;
    struct oai_error e;
    int32_t *ids = NULL;
    int n = 0;
    bool chat = r->route == ROUTE_CHAT;
    if ((chat ? oai_parse_chat : oai_parse_completion)(r->body ? r->body : "", r->body_len, q,
                                                       &e) < 0)
        return srv_reply_error(r, &e);
    r->parsed = true;
    if (!(r->m = srv_model_find(s, q->model))) {
        oai_error_set(&e, 404, "invalid_request_error", "model_not_found", "model",
                      "The model '%s' does not exist.", q->model);
        return srv_reply_error(r, &e);
    }
    atomic_fetch_add(&r->m->n_route[chat], 1);
    if (no_tokenizer_check(r, &e) < 0 || (chat && chat_render(r, &e) < 0) ||
        prompt_ids(r, &ids, &n, &e) < 0 || echo_prepare(r, &e) < 0)
        goto refuse;
    r->n_prompt = n;
    /* a chat without max_tokens answers until its turn ends, within the context */
    if (chat && !q->max_tokens_given && n < r->m->max_pos && q->max_tokens > r->m->max_pos - n)
        q->max_tokens = r->m->max_pos - n;
    if (n == 0) {
        oai_error_set(&e, 400, "invalid_request_error", NULL, "prompt",
                      "The prompt is empty (and model %s's tokenizer adds no BOS).", r->m->name);
        goto refuse;
    }
    if ((long long)n + q->max_tokens > r->m->max_pos) {
        oai_error_set(&e, 400, "invalid_request_error", "context_length_exceeded", "max_tokens",
                      "This model's maximum context length is %d tokens, however you requested "
                      "%lld tokens (%d in your prompt; %d for the completion). Please reduce "
                      "your prompt or completion length.",
                      r->m->max_pos, (long long)n + q->max_tokens, n, q->max_tokens);
        goto refuse;
    }
    if (r->m->tok) {
        bpe_stream_init(&r->dec, r->m->tok);
        r->tokbuf_cap = bpe_stream_chunk_max(r->m->tok);
    } else {
        r->tokbuf_cap = 1; /* unused */
    }
    if (!(r->tokbuf = malloc(r->tokbuf_cap))) {
        oai_error_set(&e, 500, "server_error", NULL, "", "Out of memory.");
        goto refuse;
    }
    unsigned char rnd[12];
    random_bytes(rnd, sizeof(rnd));
    int k = snprintf(r->id, sizeof(r->id), chat ? "chatcmpl-" : "cmpl-");
    for (size_t i = 0; i < sizeof(rnd); i++)
        k += snprintf(r->id + k, sizeof(r->id) - (size_t)k, "%02x", rnd[i]);
    r->created = (long long)time(NULL);
    struct engine_request_params p = {
        .model = r->m->id,
        .prompt = ids,
        .n_prompt = n,
        .max_tokens = q->max_tokens,
        .sampling = {.temperature = q->temperature,
                     .top_k = q->top_k,
                     .top_p = q->top_p,
                     .seed = q->seed},
        .on_token = on_token,
        .on_done = on_done,
        .ctx = r,
        .timeout_s = s->cfg->request_timeout_s,
    };
    if (!q->has_seed)
        random_bytes(&p.sampling.seed, sizeof(p.sampling.seed));
    /* counted in flight under the lock the shutdown changes the state
     * under: a request counted here gets the grace period and the
     * shutdown's cancel, one refused here a 503 */
    if (!srv_inflight_enter(s)) {
        oai_error_set(&e, 503, "server_error", "server_shutting_down", "",
                      "The server is shutting down.");
        goto refuse;
    }
    srv_req_ref(r); /* the engine's, dropped by on_done */
    struct engine_req *er = NULL;
    int rc = engine_submit(s->stack->engine, &p, &er);
    free(ids);
    ids = NULL;
    if (rc < 0) {
        srv_inflight_add(s, -1);
        srv_req_unref(r);
        return submit_failed(r, rc);
    }
    pthread_mutex_lock(&r->lock); /* cancel_all reads it under the lock */
    r->er = er;
    pthread_mutex_unlock(&r->lock);
    srv_watch(s, r);
    if (!q->stream)
        return srv_completions_resumed(r);
    srv_req_ref(r); /* the response's, dropped by stream_free */
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, r, stream_free);
    if (!resp) {
        srv_req_unref(r);
        engine_cancel(s->stack->engine, er);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    srv_reply_closing(r, resp);
    r->http_status = 200;
    r->handled = true;
    srv_count_status(s, 200);
    enum MHD_Result ret = MHD_queue_response(r->conn, 200, resp);
    MHD_destroy_response(resp);
    return ret;
refuse:
    free(ids);
    if (e.status >= 400 && e.status < 500)
        atomic_fetch_add(&r->m->n_invalid, 1);
    return srv_reply_error(r, &e);
}

/* Answers a non-streamed request once done, closes it once its client is
 * gone, else suspends it (again: a wake-up may come before the end). */
enum MHD_Result srv_completions_resumed(struct srv_req *r)
{
    for (;;) {
        pthread_mutex_lock(&r->lock);
        bool done = r->done, gone = r->client_gone;
        pthread_mutex_unlock(&r->lock);
        if (gone)
            return MHD_NO; /* the watcher saw the client hang up: nobody to answer */
        if (done)
            return reply_final(r);
        if (srv_req_suspend_unless(r, req_ready))
            return MHD_YES;
    }
}

void srv_completions_free(struct srv_req *r)
{
    engine_req_release(r->er);
    r->er = NULL;
    if (r->parsed)
        completion_req_free(&r->creq);
    free(r->echo_text);
    free(r->tokbuf);
    strbuf_free(&r->text);
    free(r->ends);
    free(r->gen_ids);
    strbuf_free(&r->out);
    srv_model_put(r->m); /* its tokenizer was ours until now */
    r->m = NULL;
}
