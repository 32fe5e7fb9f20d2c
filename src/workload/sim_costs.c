/* The costs file, one JSON object (every key optional; what is missing is
 * measured):
 *
 *   load_s_per_gb    number > 0: seconds a load takes per GB (1e9 bytes) of
 *                    the weights its largest shard holds (a model's shards
 *                    load in parallel, one per device)
 *   batch_s          [[size, seconds], ...]: a batch's compute time by its
 *                    number of requests, sizes rising from 1, linear in
 *                    between; it must reach the run's largest batch
 *   overlap_tail     number 0..1: the share of a batch's compute that still
 *                    follows its load's end when copies overlap compute
 *   warm_latency_s   number > 0: one request on a resident model, the unit
 *                    of --slo-scale (missing: batch_s at 1)
 *   base_prompt      integer >= 1, chat configs: the prompt tokens batch_s
 *                    was measured with
 *   prefill_token_s  number >= 0, chat configs: seconds per prompt token
 *                    beyond base_prompt
 *   step_s           [[size, seconds], ...], chat configs: one decode step
 *                    by the requests still generating, as batch_s
 *
 * e.g. {"load_s_per_gb": 0.5, "batch_s": [[1, 0.027], [8, 0.093], [32, 0.257]]}
 * Numbers are seconds; a key not listed here is an error, as is a value out
 * of its range, each naming the file and the key. */
#include "workload/sim_costs.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/jsonout.h"

void sim_costs_init(struct sim_costs *c)
{
    memset(c, 0, sizeof(*c));
    c->overlap_tail = -1;
    c->base_prompt = -1;
    c->prefill_token_s = -1;
}

/* Points (at[k], t[k]), k < n, sizes rising from 1, linear in between,
 * into s[1..at[n-1]]. */
static void curve_expand(const int *at, const double *t, int n, double *s)
{
    s[1] = t[0];
    for (int k = 0; k + 1 < n; k++)
        for (int b = at[k]; b <= at[k + 1]; b++)
            s[b] = t[k] + (t[k + 1] - t[k]) * (b - at[k]) / (at[k + 1] - at[k]);
}

/* Whether size b (after prev, 0 for the first) and seconds t may be the
 * next point of a curve. */
static bool point_ok(int prev, double b, double t)
{
    return b == floor(b) && (prev == 0 ? b == 1 : b > prev) && b <= SIM_MAX_BATCH && t >= 0 &&
           isfinite(t);
}

#define CURVE_EXPECTED                                                                             \
    "expected [[size, seconds], ...] with sizes rising from 1 to at most 256 and seconds >= 0"

/* A curve key's value v (an array of [size, seconds] pairs) into s[1..*max]. */
static int curve_read(const char *path, const char *key, json_t *v, double *s, int *max)
{
    size_t n = json_array_size(v);
    int at[SIM_MAX_BATCH];
    double t[SIM_MAX_BATCH];
    if (!json_is_array(v) || n == 0 || n > SIM_MAX_BATCH)
        return err_set(ERR_FORMAT, "costs file %s: \"%s\": " CURVE_EXPECTED, path, key);
    for (size_t k = 0; k < n; k++) {
        json_t *p = json_array_get(v, k);
        json_t *b = json_array_get(p, 0), *sec = json_array_get(p, 1);
        if (json_array_size(p) != 2 || !json_is_number(b) || !json_is_number(sec) ||
            !point_ok(k ? at[k - 1] : 0, json_number_value(b), json_number_value(sec)))
            return err_set(ERR_FORMAT, "costs file %s: \"%s\" point %zu: " CURVE_EXPECTED, path,
                           key, k + 1);
        at[k] = (int)json_number_value(b);
        t[k] = json_number_value(sec);
    }
    curve_expand(at, t, (int)n, s);
    *max = at[n - 1];
    return 0;
}

/* A number key's value v into *out when lo <= v (lo_open: lo < v) and v <= hi. */
static int number_read(const char *path, const char *key, json_t *v, double lo, bool lo_open,
                       double hi, const char *expected, double *out)
{
    double x = json_number_value(v);
    if (!json_is_number(v) || !(lo_open ? x > lo : x >= lo) || !(x <= hi))
        return err_set(ERR_FORMAT, "costs file %s: \"%s\": expected %s", path, key, expected);
    *out = x;
    return 0;
}

static int costs_from_json(const char *path, json_t *root, struct sim_costs *c)
{
    const char *key;
    json_t *v;
    if (!json_is_object(root))
        return err_set(ERR_FORMAT, "costs file %s: expected one JSON object", path);
    json_object_foreach(root, key, v)
    {
        int rc;
        double x;
        if (strcmp(key, "load_s_per_gb") == 0)
            rc = number_read(path, key, v, 0, true, 1e6, "seconds per GB > 0", &c->load_s_per_gb);
        else if (strcmp(key, "batch_s") == 0)
            rc = curve_read(path, key, v, c->batch_s, &c->batch_max);
        else if (strcmp(key, "overlap_tail") == 0)
            rc = number_read(path, key, v, 0, false, 1, "a share 0..1", &c->overlap_tail);
        else if (strcmp(key, "warm_latency_s") == 0)
            rc = number_read(path, key, v, 0, true, 1e6, "seconds > 0", &c->warm_latency_s);
        else if (strcmp(key, "base_prompt") == 0) {
            rc = number_read(path, key, v, 1, false, 1 << 20, "tokens >= 1", &x);
            if (rc == 0 && x != floor(x))
                rc = err_set(ERR_FORMAT, "costs file %s: \"%s\": expected tokens >= 1", path, key);
            c->base_prompt = (int)x;
        } else if (strcmp(key, "prefill_token_s") == 0)
            rc = number_read(path, key, v, 0, false, 1e6, "seconds >= 0", &c->prefill_token_s);
        else if (strcmp(key, "step_s") == 0)
            rc = curve_read(path, key, v, c->step_s, &c->step_max);
        else
            rc = err_set(ERR_FORMAT,
                         "costs file %s: unknown key \"%s\" (expected load_s_per_gb, batch_s, "
                         "overlap_tail, warm_latency_s, base_prompt, prefill_token_s, step_s)",
                         path, key);
        if (rc < 0)
            return rc;
    }
    return 0;
}

int sim_costs_read(const char *path, struct sim_costs *c)
{
    sim_costs_init(c);
    FILE *f = fopen(path, "rb");
    if (!f)
        return err_set(ERR_IO, "costs file %s: %s", path, strerror(errno));
    json_error_t je;
    json_t *root = json_loadf(f, JSON_REJECT_DUPLICATES, &je);
    fclose(f);
    char why[JSON_ERROR_TEXT_LENGTH];
    if (!root)
        return err_set(ERR_FORMAT, "costs file %s: invalid JSON at line %d: %s", path, je.line,
                       jsonout_parse_error(&je, why, sizeof(why)));
    int rc = costs_from_json(path, root, c);
    json_decref(root);
    if (rc < 0)
        sim_costs_init(c);
    return rc;
}

int sim_costs_parse_curve(const char *flag, const char *text, double *s, int *max)
{
    int at[SIM_MAX_BATCH], n = 0;
    double t[SIM_MAX_BATCH];
    const char *p = text;
    while (*p && n < SIM_MAX_BATCH) {
        char *end;
        double b = strtod(p, &end);
        if (end == p || *end != ':')
            break;
        p = end + 1;
        double sec = strtod(p, &end);
        if (end == p || (*end && *end != ',') || !point_ok(n ? at[n - 1] : 0, b, sec))
            break;
        at[n] = (int)b;
        t[n++] = sec;
        p = *end ? end + 1 : end;
    }
    if (n == 0 || *p)
        return err_set(ERR_INVALID,
                       "%s \"%s\": expected SIZE:SECONDS,... with sizes rising from 1 to at "
                       "most %d and seconds >= 0 (e.g. 1:0.027,8:0.093,32:0.257)",
                       flag, text, SIM_MAX_BATCH);
    curve_expand(at, t, n, s);
    *max = at[n - 1];
    return 0;
}

/* s[1..max] as [[1, s1], [2, s2], ...]. */
static json_t *curve_json(const double *s, int max)
{
    json_t *a = json_array();
    for (int b = 1; a && b <= max; b++)
        if (json_array_append_new(a, json_pack("[i, f]", b, s[b])) < 0) {
            json_decref(a);
            return NULL;
        }
    return a;
}

json_t *sim_costs_json(const struct sim_costs *c)
{
    json_t *o = json_object();
    int bad = !o;
    if (!bad && c->load_s_per_gb > 0)
        bad |= json_object_set_new(o, "load_s_per_gb", json_real(c->load_s_per_gb));
    if (!bad && c->batch_max > 0)
        bad |= json_object_set_new(o, "batch_s", curve_json(c->batch_s, c->batch_max));
    if (!bad && c->overlap_tail >= 0)
        bad |= json_object_set_new(o, "overlap_tail", json_real(c->overlap_tail));
    if (!bad && c->warm_latency_s > 0)
        bad |= json_object_set_new(o, "warm_latency_s", json_real(c->warm_latency_s));
    if (!bad && c->base_prompt >= 1)
        bad |= json_object_set_new(o, "base_prompt", json_integer(c->base_prompt));
    if (!bad && c->prefill_token_s >= 0)
        bad |= json_object_set_new(o, "prefill_token_s", json_real(c->prefill_token_s));
    if (!bad && c->step_max > 0)
        bad |= json_object_set_new(o, "step_s", curve_json(c->step_s, c->step_max));
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

int sim_costs_write(const char *path, const struct sim_costs *c)
{
    json_t *o = sim_costs_json(c);
    if (!o)
        return err_set(ERR_NOMEM, "out of memory for the costs");
    FILE *f = fopen(path, "w");
    if (!f) {
        json_decref(o);
        return err_set(ERR_IO, "--costs-out %s: %s", path, strerror(errno));
    }
    /* one key a line; 17 significant digits, so reading it back gives the
     * same doubles */
    const char *key;
    json_t *v;
    size_t i = 0, n = json_object_size(o);
    int bad = fputs("{\n", f) < 0;
    json_object_foreach(o, key, v)
    {
        char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(17));
        bad |= !t || fprintf(f, "  \"%s\": %s%s\n", key, t, ++i < n ? "," : "") < 0;
        free(t);
    }
    bad |= fputs("}\n", f) < 0;
    bad |= fclose(f) != 0;
    json_decref(o);
    if (bad)
        return err_set(ERR_IO, "--costs-out %s: cannot write it", path);
    return 0;
}
