/* The server's insides, shared by its files (server.h is the contract):
 * the model table, the per-request state, replies and the route handlers.
 *
 * Locks, outermost first:
 * - server.admin_lock serializes adding and removing models (held across
 *   the engine's admin calls, which wait on its scheduler);
 * - server.lock guards the model table, the list of live requests, the
 *   in-flight count and the HTTP counters; never held across an MHD call or
 *   a wait (engine_cancel, which only takes the engine lock, is called under
 *   it at shutdown);
 * - srv_req.lock guards what the engine callbacks share with the HTTP
 *   thread (text, flags, the suspended flag); held to copy a few bytes and
 *   across MHD_suspend_connection (so a resumer that sees suspended knows
 *   the suspension happened), never across engine_cancel or
 *   MHD_resume_connection: whoever clears suspended calls
 *   MHD_resume_connection after releasing it, so exactly one party resumes;
 * - watch_lock guards the watcher's list; nothing else is taken under it;
 * - conn_lock guards the connection list (conns.c); held across the
 *   shutdown(2) of a socket past its deadline, never across an MHD call;
 *   nothing else is taken under it.
 */
#ifndef SHARDSWAP_SERVER_SERVER_IMPL_H
#define SHARDSWAP_SERVER_SERVER_IMPL_H

#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/queue.h"
#include "core/strbuf.h"
#include "core/workq.h"
#include "engine/stack.h"
#include "sched/sched.h"
#include "server/config.h"
#include "server/oai.h"
#include "server/server.h"
#include "template/chat.h"
#include "tokenizer/bpe.h"

struct pollfd;

enum server_state { SERVER_STARTING, SERVER_SERVING, SERVER_STOPPING };

/* A model's counters as /metrics shows them (its _total families and
 * histograms, which only grow). A removed model's are retained under its
 * name (server.retained), and a model added again under that name starts
 * from them, so no counter of a name goes backwards within the process. */
struct srv_counts {
    uint64_t ok, failed, cancelled, timed_out, rejected, invalid; /* requests, by outcome */
    uint64_t route[2];                                            /* completions, chat */
    uint64_t loads, bytes_loaded;
    uint64_t trims, bytes_trimmed; /* as a trimming load's victim (partial residency) */
    uint64_t evictions, unloads, idle_unloads, removal_unloads, preempt_unloads; /* departures,
                                                                 * by reason */
    struct engine_hist ttft, latency, load;
};

/* A removed model's counters, by name (server.retained). */
struct srv_retained {
    char name[64];
    char base[64]; /* an adapter's base; "" for a model */
    struct srv_counts c;
};

/* A model the server serves. Reference counted: the table holds one
 * reference while the model is served, and srv_model_find and
 * srv_models_list_all hand out one each (a request keeps its model's until
 * it is freed), so a removed model's tokenizer stays valid for the requests
 * still using it and everything it holds is freed when the last of them
 * ends (srv_model_put). */
struct srv_model {
    atomic_int refs;
    char name[64];
    /* more names it is found and listed by ([fixed] at add; owned) */
    char (*aliases)[64];
    int n_aliases;
    char *path;            /* owned */
    /* an adapter: its base's entry (a reference held, so what it borrows
     * from it stays valid) and name; NULL and "" for a model */
    struct srv_model *parent;
    char base_name[64];
    struct bpe *tok;        /* owned (an adapter's: when own_tok, else its base's); NULL when
                               none loads: token-id prompts only, and completions carry their
                               ids (token_ids) */
    bool own_tok, own_chat; /* an adapter's tok and chat are its own, not its base's */
    int id;                /* engine id */
    /* the swap model's, copied at add: no pointer into it, which
     * engine_remove_model frees */
    int tp, pp;
    enum kern_compute compute;
    int max_pos, vocab;
    const char *family;     /* model_info's ("opt", "llama"); static */
    const char *format;     /* st_format: "safetensors", "gguf" or "compressed-tensors"; static */
    /* the checkpoint's bytes by tensor type (a GGUF's Q4_K, Q6_K, F32, ...),
     * indexed by enum dtype */
    uint64_t type_bytes[DTYPE_COUNT];
    char architecture[64];  /* model_info's ("LlamaForCausalLM") */
    /* /v1/chat/completions: the chat template (owned; NULL: none, and
     * no_chat says why), and the tokens that end an assistant's turn beside
     * the model's EOS ids (the template's end-of-turn token, the tokenizer's
     * eos_token), which end a chat completion and are never in its text */
    struct chat_template *chat; /* owned (an adapter's: when own_chat) */
    char no_chat[256];
    int32_t turn_end[4];
    int n_turn_end;
    long long created; /* unix seconds it was added */
    struct server *s;  /* whose registered bytes charge holds */
    uint64_t charge;   /* host memory it is charged for (srv_model_add) */
    bool removed;      /* out of the table (under server.lock) */
    atomic_ullong n_invalid; /* completions refused by the server (4xx) */
    atomic_ullong n_route[2]; /* requests naming it: [0] /v1/completions, [1] chat */
    /* completions ended by a stop string: the engine counts them cancelled */
    /* what a removed model of its name had counted (taken from
     * server.retained when added; zero for a new name): /metrics shows
     * these plus the engine's and its own counters since */
    struct srv_counts base; /* [fixed] after srv_model_add */
    struct srv_model *next;
};

/* The most models a listing shows (the engine's limit). */
#define SRV_MAX_LIST SCHED_MAX_MODELS
/* The most removed models whose counters /metrics keeps showing: as many
 * as may be served. */
#define SRV_MAX_RETAINED SCHED_MAX_MODELS

/* The HTTP status counters /metrics shows (shardswap_http_responses_total). */
#define SRV_HTTP_CODES 16

struct server {
    const struct serve_config *cfg;
    struct stack *stack;
    struct cluster_job *job; /* under mpirun: process 0's part (the caller's); else NULL */
    struct MHD_Daemon *mhd;
    int port;
    atomic_int state;  /* enum server_state */
    long long started; /* unix seconds */

    pthread_mutex_t admin_lock;
    pthread_mutex_t lock;
    struct srv_model *models; /* newest first */
    /* removed models' counters (server.lock), oldest first, at most
     * SRV_MAX_RETAINED names (the oldest is dropped for a new one); a name
     * leaves it when a model of that name is added again */
    struct srv_retained *retained;
    int n_retained, cap_retained;
    /* host memory the entries hold (tokenizers, tables), an estimate kept
     * within the host budget: what bounds registration beside the count */
    atomic_ullong registered_bytes;
    struct srv_req *live;     /* every request state, until freed */
    int n_inflight;           /* requests submitted whose on_done has not run */
    pthread_cond_t idle_cv;   /* n_inflight or the live list shrank */
    int http_code[SRV_HTTP_CODES];
    uint64_t http_count[SRV_HTTP_CODES];

    /* the watcher (watcher.c): a work queue's thread (core/workq.h) that
     * runs no items, only its idle poll */
    struct workq watcher;
    pthread_mutex_t watch_lock;
    struct queue watched; /* requests in flight, newest first, by their watch_link */
    /* the watcher thread's alone: its poll set (watch_cap) and last sweep */
    struct pollfd *watch_fds;
    struct srv_req **watch_reqs;
    int watch_cap;
    double watch_swept;

    /* the open connections (conns.c) */
    pthread_mutex_t conn_lock;
    struct srv_conn *conns;
    int n_conns;
    uint64_t n_deadline_closes; /* connections shut down by a deadline */
};

enum srv_route {
    ROUTE_NONE,
    ROUTE_COMPLETIONS,
    ROUTE_CHAT, /* POST /v1/chat/completions */
    ROUTE_MODELS,
    ROUTE_MODEL,
    ROUTE_HEALTH,
    ROUTE_METRICS,
    ROUTE_ADMIN_ADD,
    ROUTE_ADMIN_MODEL,  /* DELETE /admin/models/{id} */
    ROUTE_ADMIN_ACTION, /* POST /admin/models/{id}/ACTION */
};

/* One HTTP request's state (MHD's req_cls). Freed when its last reference
 * goes: the HTTP side's (dropped at MHD's completion notice), the engine's
 * (taken before engine_submit, dropped at the end of on_done) and the
 * watcher's (while it polls). */
struct srv_req {
    atomic_int refs;
    struct server *s;
    struct MHD_Connection *conn;
    struct srv_conn *sc; /* its connection's entry (conns.c); NULL: untracked */
    int fd;
    bool http10; /* an HTTP/1.0 request */
    double t0;
    struct srv_req *live_prev, *live_next; /* server.live, under server.lock */
    struct queue watch_link;               /* server.watched, under watch_lock */
    bool watched;                          /* under watch_lock */
    bool half_closed; /* the watcher saw the client's end of stream (POLLRDHUP); watcher only */

    /* HTTP thread only */
    enum srv_route route;
    char client[64]; /* the peer's address */
    char method[8];
    char path[160];
    char arg[256];   /* the {id} of the path */
    char action[16]; /* load, unload, pin, unpin */
    char *body;
    size_t body_len, body_cap;
    bool body_too_big;
    int http_status; /* of the response queued; 0 until then */
    bool handled;    /* a response or the engine took over */
    bool answered_now; /* srv_reply_error_now answered and closed the connection */

    /* a completion */
    struct completion_req creq;
    bool parsed;
    struct srv_model *m;
    struct engine_req *er;
    char id[40]; /* cmpl-... or chatcmpl-... */
    long long created;
    int n_prompt;
    char *echo_text; /* the prompt as text, when echo */
    size_t echo_len;
    /* streaming, HTTP thread only */
    struct strbuf out; /* events ready to send */
    size_t out_pos;    /* out's bytes sent */
    size_t sent;   /* bytes of text sent */
    int ends_sent; /* token pieces sent */
    int ids_sent;  /* gen_ids sent (a model without a tokenizer) */
    bool echo_sent, final_sent;
    bool role_sent; /* a chat stream's first delta, {"role": "assistant"} */

    /* shared with the engine callbacks, under lock */
    pthread_mutex_t lock;
    bool suspended;       /* the connection is suspended; whoever clears it resumes */
    bool done;            /* on_done ran */
    bool stop_hit;        /* a stop string matched: text ends before it */
    bool cancel_shutdown; /* cancelled because the server is stopping */
    bool client_gone;     /* the watcher saw the client hang up */
    bool probe;           /* a stream's client half-closed: send it an SSE comment,
                             whose RST tells a full close apart (watcher.c) */
    struct bpe_stream dec;
    char *tokbuf; /* bpe_stream_chunk_max bytes */
    size_t tokbuf_cap;
    struct strbuf text; /* the completion's text so far */
    size_t safe; /* text[0..safe) cannot become part of a stop string */
    int *ends;   /* text offset after each token's piece */
    int n_ends, ends_cap;
    int32_t *gen_ids; /* the ids generated so far, for a model without a tokenizer */
    int n_gen_ids, gen_ids_cap;
    int n_gen;  /* tokens generated (up to a stop) */
    int n_out;  /* tokens in the engine's output, once done */
    int status; /* engine status, final once done */
    char error[512];
};

/* ---- server.c ---- */
void srv_req_ref(struct srv_req *r);
void srv_req_unref(struct srv_req *r);
/* Resumes r's connection when it is suspended (any thread but under no lock). */
void srv_req_wake(struct srv_req *r);
/* Suspends r's connection until srv_req_wake; HTTP thread, from the access
 * handler or the content reader. Returns false (not suspending) when
 * ready() holds under r's lock already. */
bool srv_req_suspend_unless(struct srv_req *r, bool (*ready)(struct srv_req *r));
bool srv_accepting(const struct server *s);
void srv_inflight_add(struct server *s, int d);
/* Whether the headers of conn frame a body MHD 0.9's parser refuses by
 * itself (a Content-Length that is not a decimal number, or one past 2^64):
 * then *e is the answer (400, 413 past max_body). Only the header values are
 * read (HTTP thread). */
bool srv_framing_refused(struct MHD_Connection *conn, uint64_t max_body, struct oai_error *e);
/* Counts a request in flight unless the server is stopping (false). */
bool srv_inflight_enter(struct server *s);
/* Once the server is stopping, resp closes its connection after it
 * (Connection: close), so no client sends another request on it. */
void srv_reply_closing(struct srv_req *r, struct MHD_Response *resp);

/* ---- reply.c: responses (HTTP thread, from the access handler) ---- */
/* Queues a JSON response; steals body (NULL: 500 "out of memory"). */
enum MHD_Result srv_reply_json(struct srv_req *r, unsigned status, json_t *body);
enum MHD_Result srv_reply_text(struct srv_req *r, unsigned status, const char *content_type,
                               const char *text);
/* An OpenAI-style error. */
enum MHD_Result srv_reply_error(struct srv_req *r, const struct oai_error *e);
enum MHD_Result srv_reply_errorf(struct srv_req *r, int status, const char *type, const char *code,
                                 const char *param, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* Adds a header to a response before it is queued. */
enum MHD_Result srv_reply_error_hdr(struct srv_req *r, const struct oai_error *e, const char *hdr,
                                    const char *value);
/* The answers MHD cannot queue: while the body is being read (MHD takes a
 * response only with the headers or the whole body in), and for headers
 * MHD refuses by itself (conns.c). srv_write_error writes e as a whole
 * HTTP/1.1 response with Connection: close straight to the socket, without
 * blocking (nothing else is in its send buffer then: an answer of a few
 * hundred bytes fits; a peer gone gets the close alone); false when it did
 * not go out whole. srv_reply_error_now does that for r and returns MHD_NO,
 * which the access handler returns, so MHD closes the connection without
 * reading the rest of the request or answering it itself. */
bool srv_write_error(int fd, const struct oai_error *e);
enum MHD_Result srv_reply_error_now(struct srv_req *r, const struct oai_error *e);
/* The type an HTTP status has in OpenAI's error bodies. */
const char *srv_error_type(int status);
void srv_count_status(struct server *s, int status);

/* ---- models.c: the model table ---- */
/* Adds (tokenizer, chat template, config) a model the engine serves as id.
 * chat_template is a Jinja file to use instead of the checkpoint's (NULL:
 * the checkpoint's); one that does not load is the error, whereas a
 * checkpoint's own that does not load leaves the model without chat (a
 * warning, and no_chat says why). */
int srv_model_add(struct server *s, const struct swap_model *sm, const char *path,
                  const char *chat_template, char *const *aliases, int n_aliases, int id);
/* Adds an adapter the engine serves as id over parent's model (parent: a
 * model's entry, whose reference the adapter's entry takes). Its tokenizer
 * and chat template are parent's unless dir has its own files (tokenizer
 * files: its own tokenizer; tokenizer_config.json or chat_template.jinja:
 * its own template), read with a model's checks. */
int srv_adapter_add(struct server *s, const struct swap_model *sm, const char *dir,
                    struct srv_model *parent, int id);
/* The served model of that name or alias with a reference the caller gives
 * back with srv_model_put, or NULL. */
struct srv_model *srv_model_find(struct server *s, const char *name);
/* Drops a reference; the last frees the entry (tokenizer, chat template,
 * path). NULL-safe; any thread, no lock held. */
void srv_model_put(struct srv_model *m);
/* Takes m out of the table (it is no longer found or listed) and drops the
 * table's reference. */
/* Takes m out of the table; last is the engine's final statistics of it
 * (engine_remove_model's), whose counters are retained under m's name, or
 * NULL to retain nothing. */
void srv_model_remove(struct server *s, struct srv_model *m, const struct engine_model_stats *last);
void srv_models_free(struct server *s);
/* m's counters: its base, the engine's st, its own. */
void srv_counts_of(const struct srv_model *m, const struct engine_model_stats *st,
                   struct srv_counts *out);
/* In one look under server.lock: the served models as srv_models_list_all
 * gives them (*n_out of them, at most max, with references), and the
 * retained counters (a copy the caller frees, *n_ret of them; NULL when
 * none or out of memory), so no name is in both. */
struct srv_retained *srv_models_snapshot(struct server *s, struct srv_model **out, int max,
                                         int *n_out, int *n_ret);
/* The served models, by engine id ascending: up to max into out, each with
 * a reference (srv_models_put_all gives them back); returns how many there
 * are. */
int srv_models_list_all(struct server *s, struct srv_model **out, int max);
void srv_models_put_all(struct srv_model **ms, int n);
/* "on_device", "in_host", ... */
const char *srv_residency_name(enum residency r);

/* ---- watcher.c ---- */
int srv_watcher_start(struct server *s);
void srv_watcher_stop(struct server *s);
void srv_watch(struct server *s, struct srv_req *r);
void srv_unwatch(struct server *s, struct srv_req *r);

/* ---- conns.c: open connections and their request deadlines ---- */
struct srv_conn;
/* MHD's connection notice (MHD_OPTION_NOTIFY_CONNECTION). */
void srv_conn_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                     enum MHD_ConnectionNotificationCode code);
/* conn's entry (NULL when untracked); HTTP thread. */
struct srv_conn *srv_conn_of(struct MHD_Connection *conn);
/* A request's steps (HTTP thread; c may be NULL): headers in (its body's
 * deadline starts), body in (no deadline), completed (idle until bytes
 * of the next request arrive). */
void srv_conn_headers_in(struct server *s, struct srv_conn *c);
void srv_conn_body_in(struct server *s, struct srv_conn *c);
void srv_conn_request_done(struct server *s, struct srv_conn *c);
/* MHD's request-line notice (MHD_OPTION_URI_LOG_CALLBACK): the headers of
 * a request on conn are being read, on this pool thread. Returns NULL (the
 * access handler makes the request's state). */
void *srv_conn_request_line(void *cls, const char *uri, struct MHD_Connection *conn);
/* Called from MHD's log (a pool thread): when the connection whose headers
 * this thread is parsing has a Content-Length MHD refuses
 * (srv_framing_refused), writes the server's JSON error on its socket and
 * shuts its sending side, so MHD's own answer (an HTML page, and in 0.9.75
 * its status line twice) never goes out. */
void srv_conns_headers_refused(struct server *s);
/* Called from MHD's log (a pool thread) when the line says MHD refuses a
 * chunk's size (more hex digits than 64 bits hold): when exactly one
 * chunked request of this thread is reading its body with no answer
 * queued, it is that one, and it gets the server's JSON 413 the same way;
 * with several such requests on the thread none can be told apart, and
 * MHD's own 413 (an HTML page) goes out. */
void srv_conns_chunk_refused(struct server *s);
/* Whether c was shut down by a deadline. */
bool srv_conn_cut(struct srv_conn *c);
/* Shuts down the sockets of requests past their deadline; the watcher. */
void srv_conns_sweep(struct server *s);
/* Shuts down the connections idle between requests for idle_s (no byte
 * of a next one received); at shutdown. Returns how many. */
int srv_conns_close_idle(struct server *s, double idle_s);
/* Open connections; *deadline_closes (may be NULL): how many a deadline
 * has shut down so far. */
int srv_conns_count(struct server *s, uint64_t *deadline_closes);

/* ---- route handlers (HTTP thread; called once the body is in) ---- */
/* POST /v1/completions and /v1/chat/completions (r->route says which) */
enum MHD_Result srv_completions(struct srv_req *r);         /* first call: submit */
enum MHD_Result srv_completions_resumed(struct srv_req *r); /* after the engine woke it */
void srv_completions_free(struct srv_req *r);
enum MHD_Result srv_models_list(struct srv_req *r);
enum MHD_Result srv_model_get(struct srv_req *r);
enum MHD_Result srv_admin_add(struct srv_req *r);
enum MHD_Result srv_admin_delete(struct srv_req *r);
enum MHD_Result srv_admin_action(struct srv_req *r);
enum MHD_Result srv_metrics(struct srv_req *r);

#endif
