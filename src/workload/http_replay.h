/* Real-time replay of a workload against an OpenAI-compatible HTTP server
 * (`shardswap serve`, or any server of POST /v1/completions or
 * /v1/chat/completions): the arrivals
 * replay_arrivals makes, each released at its time as Computron's request
 * (workload/replay.h: the same prompt as token ids, max_tokens, sampling and
 * seed as `bench workload` submits to the engine), and each request's times
 * recorded as the client sees them.
 *
 *   http_replay_run(opts, arrivals) -> one libcurl multi handle driven by
 *   the calling thread (curl_multi_poll between arrivals; connections kept
 *   alive and reused; no thread per request); per-request records in the
 *   format `bench workload` writes (workload/report.h), each request's HTTP
 *   status, and counts by outcome
 *   http_get(target, path) -> one blocking GET (/v1/models, /metrics, /health)
 *   http_list_models(target) -> the ids GET /v1/models lists, in its order
 *
 * A record's times are seconds from the start of the run: t_arrival when the
 * request was handed to libcurl (its arrival time, or just after), t_start
 * NaN (a client cannot see when the server started it), t_first_token the
 * first byte of the response body (with stream: the first event carrying a
 * choice), t_done when the transfer ended. A request that fails is recorded
 * with a negative status and counted by cause, never dropped (its
 * http_status is the response's, 0 when none came):
 *
 *   HTTP 200 with a completion body       status 0
 *   HTTP 200 whose body is no completion  ERR_FORMAT   (malformed)
 *   HTTP 429                              ERR_BUSY     (busy)
 *   HTTP 404                              ERR_NOT_FOUND (client)
 *   other HTTP 4xx                        ERR_INVALID  (client)
 *   HTTP 5xx                              ERR_IO       (server)
 *   other HTTP statuses                   ERR_UNSUPPORTED (other)
 *   no response (refused, reset, closed)  ERR_IO       (transport, HTTP status 0)
 *   no response within timeout_s          ERR_TIMEOUT  (transport, HTTP status 0)
 *
 * Every function runs on the caller's thread and returns when its requests
 * have all completed or failed. Only 127.0.0.1-style plain HTTP is tested;
 * https works as far as libcurl does.
 */
#ifndef SHARDSWAP_WORKLOAD_HTTP_REPLAY_H
#define SHARDSWAP_WORKLOAD_HTTP_REPLAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "workload/arrival.h"
#include "workload/chat.h"
#include "workload/report.h"

/* Where requests go. */
struct http_target {
    const char *url;     /* base, "http://HOST:PORT" (a path prefix and a trailing '/' allowed) */
    const char *api_key; /* sent as "Authorization: Bearer KEY"; NULL: none */
    double timeout_s;    /* per request, connect to last byte; 0: none */
};

struct http_replay_opts {
    struct http_target target;
    const char *const *models; /* (n_models) the server's names: workload model i -> models[i] */
    int n_models;
    bool stream;         /* "stream": true with include_usage; first token from the events */
    bool closed_loop;    /* one request at a time, each released when the last one ends
                            (the arrivals' times are ignored, their models kept) */
    int max_connections; /* connections open at once (0: no limit); a request waiting for
                            one is still timed from its arrival */
    const int32_t *prompt; /* (n_prompt) the prompt's token ids; NULL: replay_prompt */
    int n_prompt;
    /* non-NULL: chat requests (POST /v1/chat/completions) whose one user
     * message is this text, instead of prompt */
    const char *chat_text;
    int max_tokens; /* per request; 0: REPLAY_MAX_TOKENS */
    /* non-NULL: chat traffic (workload/chat.h), one entry per event: request i
     * has max_tokens lens[i].n_output and a prompt of lens[i].n_prompt ids,
     * prompt's (or replay_prompt's) repeated after the first (a chat_text
     * request keeps its text) */
    const struct chat_request *lens;
};

/* Requests by outcome (see the table above); they sum to the requests. */
struct http_counts {
    size_t ok, malformed, busy, client, server, other, transport;
};

struct http_replay_result {
    struct request_record *recs; /* (n) owned, in arrival order; http_status 0 when no
                                    response came */
    size_t n;
    struct http_counts counts;
    size_t connections;    /* connections opened (the rest reused one) */
    double wall_s;         /* first release -> last completion */
    double lag_mean_s;     /* release after the arrival time, mean and max (open loop; */
    double lag_max_s;      /* a client that keeps up releases within a millisecond) */
    char first_error[512]; /* what the first failed request said ("" when none) */
};

/* Checks that url is an http:// or https:// URL with a host (libcurl's
 * parser); ERR_INVALID naming it otherwise. */
int http_url_check(const char *url);

/* Replays ev[0..n_ev) (models 0..opts->n_models-1). *out is the caller's
 * (http_replay_result_free), also after an error; only a failure to set up
 * (bad URL, out of memory, libcurl's own failure) is an error. */
int http_replay_run(const struct http_replay_opts *opts, const struct arrival *ev, size_t n_ev,
                    struct http_replay_result *out);
/* Frees r's arrays and zeroes it. NULL-safe. */
void http_replay_result_free(struct http_replay_result *r);

/* GET target->url + path, blocking; *body (NUL-terminated, malloc'd, the
 * caller's) and *status get the response, whatever its status. Errors:
 * ERR_IO when no response came (the message says libcurl's reason),
 * ERR_NOMEM. */
int http_get(const struct http_target *t, const char *path, char **body, long *status);

/* The model ids GET /v1/models lists ({"data": [{"id": ...}, ...]}), in its
 * order: *names is an array of *n malloc'd strings, freed with
 * http_names_free. Errors: ERR_IO (no response or not 200, with the
 * server's message), ERR_FORMAT (another body). */
int http_list_models(const struct http_target *t, char ***names, int *n);
void http_names_free(char **names, int n);

#endif
