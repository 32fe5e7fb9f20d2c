/* Replies: JSON bodies (Jansson), OpenAI-style errors and plain text, queued
 * on the request's connection, and the HTTP status counters /metrics shows.
 * HTTP thread, from the access handler (or with the connection suspended). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "server/log.h"
#include "server/server_impl.h"

void srv_count_status(struct server *s, int status)
{
    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < SRV_HTTP_CODES; i++) {
        if (s->http_code[i] == status || s->http_code[i] == 0) {
            s->http_code[i] = status;
            s->http_count[i]++;
            break;
        }
    }
    pthread_mutex_unlock(&s->lock);
}

const char *srv_error_type(int status)
{
    switch (status) {
    case 401:
        return "authentication_error";
    case 403:
        return "permission_error";
    case 404:
        return "invalid_request_error";
    case 429:
        return "rate_limit_error";
    default:
        return status >= 500 ? "server_error" : "invalid_request_error";
    }
}

/* Queues buf (malloc'd, taken) with content type and an optional header. */
static enum MHD_Result reply_buf(struct srv_req *r, unsigned status, const char *type, char *buf,
                                 size_t len, const char *hdr, const char *value)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, buf, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(buf);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (hdr)
        MHD_add_response_header(resp, hdr, value);
    srv_reply_closing(r, resp);
    r->http_status = (int)status;
    r->handled = true;
    srv_count_status(r->s, (int)status);
    enum MHD_Result ret = MHD_queue_response(r->conn, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result reply_json_hdr(struct srv_req *r, unsigned status, json_t *body,
                                      const char *hdr, const char *value)
{
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!text) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":"
                                  "\"server_error\",\"param\":null,\"code\":null}}";
        char *b = strdup(oom);
        return b ? reply_buf(r, 500, "application/json", b, strlen(b), NULL, NULL) : MHD_NO;
    }
    return reply_buf(r, status, "application/json", text, strlen(text), hdr, value);
}

enum MHD_Result srv_reply_json(struct srv_req *r, unsigned status, json_t *body)
{
    return reply_json_hdr(r, status, body, NULL, NULL);
}

enum MHD_Result srv_reply_text(struct srv_req *r, unsigned status, const char *content_type,
                               const char *text)
{
    char *b = strdup(text);
    if (!b)
        return MHD_NO;
    return reply_buf(r, status, content_type, b, strlen(b), NULL, NULL);
}

enum MHD_Result srv_reply_error_hdr(struct srv_req *r, const struct oai_error *e, const char *hdr,
                                    const char *value)
{
    char *text = oai_error_json(e);
    if (e->status >= 500 && e->status != 501) /* 501: a request's coding we do not implement */
        log_warn("%s %s: %d %s", r->method, r->path, e->status, e->message);
    else
        log_debug("%s %s: %d %s", r->method, r->path, e->status, e->message);
    if (!text)
        return MHD_NO;
    return reply_buf(r, (unsigned)e->status, "application/json", text, strlen(text), hdr, value);
}

enum MHD_Result srv_reply_error(struct srv_req *r, const struct oai_error *e)
{
    return srv_reply_error_hdr(r, e, NULL, NULL);
}

bool srv_write_error(int fd, const struct oai_error *e)
{
    char *text = oai_error_json(e);
    if (!text || fd < 0) {
        free(text);
        return false;
    }
    char date[64];
    struct tm tm;
    time_t now = time(NULL);
    strftime(date, sizeof(date), "%a, %d %b %Y %H:%M:%S GMT", gmtime_r(&now, &tm));
    const char *reason = MHD_get_reason_phrase_for((unsigned)e->status);
    size_t len = strlen(text);
    char head[256];
    int hn = snprintf(head, sizeof(head),
                      "HTTP/1.1 %d %s\r\nConnection: close\r\nContent-Type: application/json\r\n"
                      "Content-Length: %zu\r\nDate: %s\r\n\r\n",
                      e->status, reason && reason[0] ? reason : "Error", len, date);
    struct strbuf b = {0};
    bool ok = hn > 0 && (size_t)hn < sizeof(head) && strbuf_append(&b, head, (size_t)hn) == 0 &&
              strbuf_append(&b, text, len) == 0;
    free(text);
    for (size_t at = 0; ok && at < b.len;) {
        ssize_t n = send(fd, b.p + at, b.len - at, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0)
            at += (size_t)n;
        else if (n < 0 && errno == EINTR)
            continue;
        else
            ok = false; /* a full send buffer or a peer gone: it gets the close alone */
    }
    strbuf_free(&b);
    return ok;
}

enum MHD_Result srv_reply_error_now(struct srv_req *r, const struct oai_error *e)
{
    log_debug("%s %s: %d %s (answered at once, connection closed)", r->method, r->path, e->status,
              e->message);
    srv_write_error(r->fd, e);
    r->http_status = e->status;
    r->handled = true;
    r->answered_now = true;
    srv_count_status(r->s, e->status);
    return MHD_NO;
}

enum MHD_Result srv_reply_errorf(struct srv_req *r, int status, const char *type, const char *code,
                                 const char *param, const char *fmt, ...)
{
    struct oai_error e;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    oai_error_set(&e, status, type ? type : srv_error_type(status), code, param, "%s", msg);
    return srv_reply_error(r, &e);
}
