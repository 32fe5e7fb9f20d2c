/* The OpenAI-compatible HTTP server over the serving engine (libmicrohttpd).
 *
 *   server_open(config) -> the stack (devices, swap manager, engine, the
 *   configured models), a tokenizer per model, the listener bound and
 *   serving (/health turns 200 once it is)
 *   server_run() -> blocks until SIGTERM/SIGINT (or server_stop), then shuts
 *   down: /health and new requests 503, no new connections, requests in
 *   flight get grace_s to finish, the rest are cancelled (they get an error)
 *   server_close() frees everything
 *
 * Routes: POST /v1/completions (also streamed as server-sent events),
 * GET /v1/models, GET /v1/models/{id}, GET /health, GET /metrics,
 * POST /admin/models/{id}/load|unload|pin|unpin, POST /admin/models,
 * DELETE /admin/models/{id}.
 *
 * Threads:
 * - the caller's (main): server_open, server_run (waits on the self-pipe
 *   SIGINT/SIGTERM write to), server_close;
 * - libmicrohttpd's pool (http_threads): parse requests, tokenize, submit to
 *   the engine, then suspend the connection until the engine resumes it;
 *   write responses and stream events; never wait on the engine;
 * - engine threads: on_token / on_done callbacks copy text into the
 *   request's buffer under its lock and resume its connection;
 * - the watcher: polls the sockets of requests in flight for a client that
 *   hung up (MHD does not see it while a connection is suspended) and
 *   cancels their engine request at once.
 * server_signals_init must be called before server_run.
 */
#ifndef SHARDSWAP_SERVER_SERVER_H
#define SHARDSWAP_SERVER_SERVER_H

#include "server/config.h"

struct server;
struct cluster_job;

/* Installs the SIGINT and SIGTERM handlers that wake server_run (they only
 * write a byte to a pipe) and ignores SIGPIPE. Main thread, once. */
int server_signals_init(void);
/* c must outlive the server. job: NULL, or under mpirun process 0's part
 * of the job (cluster/job.h; the caller closes it after server_close):
 * the devices of other processes are reached through it. On failure
 * nothing is left and the message says what failed. */
int server_open(const struct serve_config *c, struct cluster_job *job, struct server **out);
/* The port the listener is bound to (the one chosen when c->port was 0). */
int server_port(const struct server *s);
/* Serves until SIGINT or SIGTERM arrives, then shuts down gracefully;
 * returns 0 once every request has completed and the listener is closed. */
int server_run(struct server *s);
/* Frees everything; NULL-safe. */
void server_close(struct server *s);

#endif
