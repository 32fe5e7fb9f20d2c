#include "workload/arrival.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/rng.h"

/* A growable event array. The cap keeps a runaway spec or trace from eating
 * memory: generators check the expected count up front, but a bursty process
 * (large cv) can still overshoot it by chance, and a trace has no bound. */
struct event_buf {
    struct arrival *a;
    size_t n, cap;
};

static int buf_push(struct event_buf *b, double t, int model)
{
    if (b->n == b->cap) {
        if (b->n >= ARRIVAL_EVENTS_MAX)
            return err_set(ERR_INVALID,
                           "more than %d arrival events (the limit); lower the rates, the "
                           "duration or the cv, or shorten the trace",
                           ARRIVAL_EVENTS_MAX);
        size_t cap = b->cap ? 2 * b->cap : 1024;
        if (cap > ARRIVAL_EVENTS_MAX)
            cap = ARRIVAL_EVENTS_MAX;
        struct arrival *a = realloc(b->a, cap * sizeof(*a));
        if (!a)
            return err_set(ERR_NOMEM, "out of memory for %zu arrival events", cap);
        b->a = a;
        b->cap = cap;
    }
    b->a[b->n++] = (struct arrival){.t = t, .model = model};
    return 0;
}

static int arrival_cmp(const void *pa, const void *pb)
{
    const struct arrival *a = pa, *b = pb;
    if (a->t != b->t)
        return a->t < b->t ? -1 : 1;
    return (a->model > b->model) - (a->model < b->model);
}

/* Hands the buffer to the caller, sorted; an empty result is NULL. */
static void buf_finish(struct event_buf *b, struct arrival **events, size_t *n)
{
    if (b->n)
        qsort(b->a, b->n, sizeof(*b->a), arrival_cmp);
    else {
        free(b->a);
        b->a = NULL;
    }
    *events = b->a;
    *n = b->n;
}

static int spec_check(const struct arrival_spec *s)
{
    if (s->kind != ARRIVAL_GAMMA && s->kind != ARRIVAL_DETERMINISTIC && s->kind != ARRIVAL_TRACE)
        return err_set(ERR_INVALID,
                       "unknown arrival kind %d (expected gamma, deterministic or trace)",
                       (int)s->kind);
    if (s->n_models < 1 || s->n_models > ARRIVAL_MODELS_MAX)
        return err_set(ERR_INVALID, "number of models is %d, expected 1..%d", s->n_models,
                       ARRIVAL_MODELS_MAX);
    if (s->kind == ARRIVAL_TRACE) {
        if (!s->trace_path || !*s->trace_path)
            return err_set(ERR_INVALID, "trace arrivals need a trace file path");
        if (!(s->duration_s >= 0) || isinf(s->duration_s))
            return err_set(ERR_INVALID,
                           "duration is %g s, expected a finite number >= 0 (0 = whole trace)",
                           s->duration_s);
        return 0;
    }
    if (!(s->duration_s > 0) || isinf(s->duration_s))
        return err_set(ERR_INVALID, "duration is %g s, expected a finite number > 0",
                       s->duration_s);
    if (s->kind == ARRIVAL_GAMMA && (!(s->cv > 0) || isinf(s->cv)))
        return err_set(ERR_INVALID, "cv is %g, expected a finite number > 0 (1 = Poisson)", s->cv);
    double expected = 0;
    for (int m = 0; m < s->n_models; m++) {
        if (!(s->rates[m] >= 0) || isinf(s->rates[m]))
            return err_set(ERR_INVALID,
                           "rate of model %d is %g, expected a finite number of requests/s >= 0", m,
                           s->rates[m]);
        expected += s->rates[m] * s->duration_s;
    }
    if (expected > ARRIVAL_EVENTS_MAX)
        return err_set(ERR_INVALID,
                       "rates x duration make about %.0f arrivals, more than the limit of %d",
                       expected, ARRIVAL_EVENTS_MAX);
    return 0;
}

static int gen_gamma(const struct arrival_spec *s, int m, struct event_buf *b)
{
    double rate = s->rates[m];
    if (rate == 0)
        return 0;
    double shape = 1.0 / (s->cv * s->cv), scale = s->cv * s->cv / rate;
    struct rng r;
    rng_seed(&r, s->seed, (uint64_t)m);
    for (double t = 0;;) {
        t += scale * rng_gamma(&r, shape);
        if (t >= s->duration_s)
            return 0;
        int rc = buf_push(b, t, m);
        if (rc)
            return rc;
    }
}

static int gen_deterministic(const struct arrival_spec *s, int m, struct event_buf *b)
{
    double rate = s->rates[m];
    if (rate == 0)
        return 0;
    /* k / rate, not a running sum, so spacing carries no accumulated rounding */
    for (size_t k = 0;; k++) {
        double t = (double)k / rate;
        if (t >= s->duration_s)
            return 0;
        int rc = buf_push(b, t, m);
        if (rc)
            return rc;
    }
}

int arrival_generate(const struct arrival_spec *s, struct arrival **events, size_t *n)
{
    *events = NULL;
    *n = 0;
    int rc = spec_check(s);
    if (rc)
        return rc;
    if (s->kind == ARRIVAL_TRACE) {
        rc = arrival_trace_load(s->trace_path, s->n_models, events, n);
        if (rc || s->duration_s == 0)
            return rc;
        /* sorted: cut the tail at the duration */
        size_t keep = 0;
        while (keep < *n && (*events)[keep].t < s->duration_s)
            keep++;
        *n = keep;
        if (!keep) {
            free(*events);
            *events = NULL;
        }
        return 0;
    }
    struct event_buf b = {0};
    for (int m = 0; m < s->n_models && !rc; m++)
        rc = s->kind == ARRIVAL_GAMMA ? gen_gamma(s, m, &b) : gen_deterministic(s, m, &b);
    if (rc) {
        free(b.a);
        return rc;
    }
    buf_finish(&b, events, n);
    return 0;
}

/* Trims spaces (and a trailing CR) from both ends of s in place. */
static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t len = strlen(s);
    while (len && isspace((unsigned char)s[len - 1]))
        s[--len] = '\0';
    return s;
}

static int trace_line(const char *path, size_t lineno, char *line, int n_models,
                      struct event_buf *b)
{
    char *comma = strchr(line, ',');
    if (!comma)
        return err_set(ERR_FORMAT, "%s:%zu: found 1 column, expected 2 (time,model)", path, lineno);
    *comma = '\0';
    char *ts = trim(line), *ms = trim(comma + 1);
    if (strchr(ms, ','))
        return err_set(ERR_FORMAT, "%s:%zu: found more than 2 columns, expected 2 (time,model)",
                       path, lineno);
    if (!*ts)
        return err_set(ERR_FORMAT, "%s:%zu: time is empty, expected seconds >= 0", path, lineno);
    if (!*ms)
        return err_set(ERR_FORMAT, "%s:%zu: model is empty, expected an integer 0..%d", path,
                       lineno, n_models - 1);
    char *end;
    double t = strtod(ts, &end);
    if (*end || !isfinite(t))
        return err_set(ERR_FORMAT, "%s:%zu: time \"%.40s\" is not a number, expected seconds >= 0",
                       path, lineno, ts);
    if (t < 0)
        return err_set(ERR_FORMAT, "%s:%zu: time %g is negative, expected seconds >= 0", path,
                       lineno, t);
    errno = 0;
    long m = strtol(ms, &end, 10);
    if (*end || errno)
        return err_set(ERR_FORMAT,
                       "%s:%zu: model \"%.40s\" is not an integer, expected a model index 0..%d",
                       path, lineno, ms, n_models - 1);
    if (m < 0 || m >= n_models)
        return err_set(ERR_FORMAT, "%s:%zu: model %ld is out of range, expected 0..%d", path,
                       lineno, m, n_models - 1);
    return buf_push(b, t, (int)m);
}

int arrival_trace_load(const char *path, int n_models, struct arrival **events, size_t *n)
{
    *events = NULL;
    *n = 0;
    if (n_models < 1 || n_models > ARRIVAL_MODELS_MAX)
        return err_set(ERR_INVALID, "number of models is %d, expected 1..%d", n_models,
                       ARRIVAL_MODELS_MAX);
    FILE *f = fopen(path, "r");
    if (!f)
        return err_set(ERR_IO, "%s: cannot open trace: %s", path, strerror(errno));
    struct event_buf b = {0};
    char *line = NULL;
    size_t cap = 0, lineno = 0;
    int rc = 0, header = 0;
    while (getline(&line, &cap, f) >= 0) {
        lineno++;
        char *s = line;
        if (lineno == 1 && (unsigned char)s[0] == 0xef && (unsigned char)s[1] == 0xbb &&
            (unsigned char)s[2] == 0xbf)
            s += 3; /* UTF-8 byte order mark, as spreadsheets write it */
        s = trim(s);
        if (!*s)
            continue;
        if (!header) {
            char *comma = strchr(s, ',');
            if (comma)
                *comma = '\0';
            if (!comma || strcmp(trim(s), "time") || strcmp(trim(comma + 1), "model")) {
                rc = err_set(ERR_FORMAT, "%s:%zu: expected the header line \"time,model\"", path,
                             lineno);
                goto out;
            }
            header = 1;
            continue;
        }
        rc = trace_line(path, lineno, s, n_models, &b);
        if (rc)
            goto out;
    }
    if (ferror(f)) {
        rc = err_set(ERR_IO, "%s: read error: %s", path, strerror(errno));
        goto out;
    }
    if (!header) {
        rc = err_set(ERR_FORMAT, "%s: empty trace, expected the header line \"time,model\"", path);
        goto out;
    }
out:
    free(line);
    fclose(f);
    if (rc) {
        free(b.a);
        return rc;
    }
    buf_finish(&b, events, n);
    return 0;
}

int arrival_rates_parse(const char *list, double *rates, int max, int *n)
{
    *n = 0;
    const char *p = list;
    for (int item = 1;; item++) {
        size_t len = strcspn(p, ",");
        const char *q = p;
        while (q < p + len && isspace((unsigned char)*q))
            q++;
        size_t tlen = (size_t)(p + len - q);
        while (tlen && isspace((unsigned char)q[tlen - 1]))
            tlen--;
        if (!tlen)
            return err_set(ERR_INVALID,
                           "rate list \"%.80s\": item %d is empty, expected a rate in requests/s "
                           ">= 0",
                           list, item);
        if (item > max)
            return err_set(ERR_INVALID, "rate list \"%.80s\": more than %d rates", list, max);
        char *end;
        double r = strtod(q, &end);
        if (end != q + tlen || !isfinite(r))
            return err_set(ERR_INVALID,
                           "rate list \"%.80s\": item %d (\"%.*s\") is not a number, expected a "
                           "rate in requests/s >= 0",
                           list, item, (int)(tlen > 40 ? 40 : tlen), q);
        if (r < 0)
            return err_set(ERR_INVALID,
                           "rate list \"%.80s\": item %d (%g) is negative, expected a rate in "
                           "requests/s >= 0",
                           list, item, r);
        rates[item - 1] = r;
        if (!p[len]) {
            *n = item;
            return 0;
        }
        p += len + 1;
    }
}

void arrival_rates_powerlaw(int n, double alpha, double total_rate, double *rates)
{
    assert(n >= 1 && isfinite(alpha) && total_rate >= 0);
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += rates[i] = pow(i + 1, -alpha);
    for (int i = 0; i < n; i++)
        rates[i] = total_rate * rates[i] / sum;
}
