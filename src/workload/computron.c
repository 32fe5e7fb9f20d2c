#include "workload/computron.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "workload/arrival.h"

int workload_computron(int k, struct workload_config *c)
{
    static const double r3[3][3] = {{1, 1, 1}, {10, 1, 1}, {10, 10, 1}};
    static const double r6[3][6] = {{1, 1, 1, 1, 1, 1}, {10, 10, 1, 1, 1, 1},
                                    {10, 10, 10, 10, 1, 1}};
    static const double cvs[3] = {0.25, 1, 4};
    memset(c, 0, sizeof(*c));
    if (k >= 0 && k < 9) {
        c->n_models = 3;
        memcpy(c->rates, r3[k / 3], sizeof(r3[0]));
        c->cv = cvs[k % 3];
        c->max_loaded = 2;
        c->max_batch = 8;
    } else if (k >= 9 && k < 18) {
        c->n_models = 6;
        memcpy(c->rates, r6[(k - 9) / 3], sizeof(r6[0]));
        c->cv = cvs[(k - 9) % 3];
        c->max_loaded = 4;
        c->max_batch = 32;
    } else if (k == 18) {
        c->n_models = 2;
        c->rates[0] = c->rates[1] = 1;
        c->cv = 1;
        c->max_loaded = 1;
        c->max_batch = 8;
    } else {
        return err_set(ERR_INVALID, "--config computron:%d does not exist (0..18)", k);
    }
    return 0;
}

/* chat:M:R[:CV[:ZIPF]] */
static int chat_parse(const char *s, struct workload_config *c)
{
    double v[4] = {0, 0, CHAT_DEFAULT_CV, CHAT_DEFAULT_ZIPF};
    const char *p = s + 5;
    int k = 0;
    for (; k < 4; k++) {
        char *end;
        v[k] = strtod(p, &end);
        if (end == p || (*end && *end != ':') || !isfinite(v[k]))
            break;
        p = end;
        if (!*p) {
            k++;
            break;
        }
        p++;
    }
    if (*p || k < 2 || v[0] != (int)v[0] || v[0] < 1 || v[0] > WORKLOAD_MAX_MODELS ||
        !(v[1] > 0) || !(v[2] > 0) || !(v[3] >= 0))
        return err_set(ERR_INVALID,
                       "--config %s: expected chat:MODELS:RATE[:CV[:ZIPF]] with MODELS in 1..%d, "
                       "RATE (requests/s, all models) > 0, CV > 0 (default 1), ZIPF >= 0 "
                       "(default 1)",
                       s, WORKLOAD_MAX_MODELS);
    c->chat = true;
    c->n_models = (int)v[0];
    c->cv = v[2];
    c->zipf = v[3];
    arrival_rates_powerlaw(c->n_models, c->zipf, v[1], c->rates);
    c->max_loaded = c->n_models >= 4 ? c->n_models / 4 : 1;
    c->max_batch = 8;
    chat_lengths_default(&c->lengths);
    c->slo_ttft_s = CHAT_SLO_TTFT_S;
    c->slo_tpot_s = CHAT_SLO_TPOT_S;
    return 0;
}

int workload_config_from_flags(const struct workload_flags *f, struct workload_config *c)
{
    memset(c, 0, sizeof(*c));
    if (strncmp(f->config, "computron:", 10) == 0) {
        char *end;
        long k = strtol(f->config + 10, &end, 10);
        if (*end || end == f->config + 10)
            return err_set(ERR_INVALID, "--config %s: expected computron:K with K in 0..18",
                           f->config);
        return workload_computron((int)k, c);
    }
    if (strncmp(f->config, "chat:", 5) == 0)
        return chat_parse(f->config, c);
    if (strcmp(f->config, "round-robin") == 0) {
        c->n_models = f->n_models ? f->n_models : 2;
        c->max_loaded = 1;
        c->max_batch = 8;
        c->round_robin = true;
        return 0;
    }
    if (strcmp(f->config, "custom") != 0)
        return err_set(ERR_INVALID, "--config %s: expected computron:K, chat:MODELS:RATE[:CV[:ZIPF]], "
                                    "round-robin or custom",
                       f->config);
    c->n_models = f->n_models;
    c->cv = f->cv > 0 ? f->cv : 1;
    c->max_batch = 8;
    int rc;
    if (f->rates) {
        if ((rc = arrival_rates_parse(f->rates, c->rates, WORKLOAD_MAX_MODELS, &c->n_models)) < 0)
            return rc;
    } else if (f->alpha >= 0 && f->n_models > 0 && f->total_rate > 0) {
        arrival_rates_powerlaw(f->n_models, f->alpha, f->total_rate, c->rates);
    } else {
        return err_set(ERR_INVALID, "--config custom needs --rates, or --models with --alpha and "
                                    "--total-rate");
    }
    c->max_loaded = c->n_models > 1 ? c->n_models / 2 : 1;
    return 0;
}
