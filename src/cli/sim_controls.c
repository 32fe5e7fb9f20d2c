#include "cli/sim_controls.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "engine/engine.h"

enum kind { KEEP_ALIVE, PRIORITY, SECONDS, PINNED };

/* One item of flag's list into slot k of its array dst; the error says
 * what it expects. */
static int item_parse(const char *flag, enum kind kind, const char *item, int k, void *dst)
{
    char *end = NULL;
    const char *what;
    errno = 0;
    bool blank = !item[0] || isspace((unsigned char)item[0]);
    if (kind == PINNED) {
        what = "true or false";
        if (strcmp(item, "true") == 0 || strcmp(item, "false") == 0) {
            ((bool *)dst)[k] = item[0] == 't';
            return 0;
        }
    } else if (kind == PRIORITY) {
        long v = blank ? 0 : strtol(item, &end, 10);
        if (!blank && !*end && errno == 0 && v >= -ENGINE_PRIORITY_MAX &&
            v <= ENGINE_PRIORITY_MAX) {
            ((int *)dst)[k] = (int)v;
            return 0;
        }
        return err_set(ERR_INVALID, "--%s: \"%.64s\" is not an integer from %d to %d", flag, item,
                       -ENGINE_PRIORITY_MAX, ENGINE_PRIORITY_MAX);
    } else {
        what = kind == KEEP_ALIVE ? "seconds >= 0, or -1 (forever)" : "seconds >= 0 (0: none)";
        double v = blank ? NAN : strtod(item, &end);
        bool ok = !blank && !*end && isfinite(v) && (v >= 0 || (kind == KEEP_ALIVE && v == -1));
        if (ok) {
            ((double *)dst)[k] = v < 0 ? INFINITY : v;
            return 0;
        }
    }
    return err_set(ERR_INVALID, "--%s: \"%.64s\" is not %s", flag, item, what);
}

/* flag's text (one value, or n comma-separated) into dst[0..WORKLOAD_MAX_MODELS). */
static int list_parse(const char *flag, enum kind kind, const char *text, int n, bool lists_ok,
                      void *dst)
{
    char buf[4096];
    if (strlen(text) >= sizeof(buf))
        return err_set(ERR_INVALID, "--%s: longer than %zu bytes", flag, sizeof(buf) - 1);
    snprintf(buf, sizeof(buf), "%s", text);
    int count = 1;
    for (const char *p = buf; *p; p++)
        count += *p == ',';
    if (count > 1 && !lists_ok)
        return err_set(ERR_INVALID,
                       "--%s %.64s: one value only here (the configs' model counts "
                       "differ)",
                       flag, text);
    if (count > 1 && count != n)
        return err_set(ERR_INVALID,
                       "--%s %.64s: %d values for %d models (expected one value, "
                       "or one per model)",
                       flag, text, count, n);
    char *item = buf;
    for (int k = 0; k < count; k++) {
        char *comma = strchr(item, ',');
        if (comma)
            *comma = '\0';
        int rc = item_parse(flag, kind, item, k, dst);
        if (rc < 0)
            return rc;
        item = comma ? comma + 1 : item;
    }
    for (int k = 1; count == 1 && k < WORKLOAD_MAX_MODELS; k++) /* one value: every model's */
        if (kind == PINNED)
            ((bool *)dst)[k] = ((bool *)dst)[0];
        else if (kind == PRIORITY)
            ((int *)dst)[k] = ((int *)dst)[0];
        else
            ((double *)dst)[k] = ((double *)dst)[0];
    return 0;
}

bool sim_controls_any(const struct sim_controls_flags *f)
{
    return f->keep_alive || f->priority || f->max_queue_wait || f->min_resident || f->pinned;
}

int sim_controls_parse(const struct sim_controls_flags *f, int n_models, bool lists_ok,
                       struct sim_controls *out)
{
    memset(out, 0, sizeof(*out));
    const struct {
        const char *flag, *text;
        enum kind kind;
        void *dst;
    } t[5] = {
        {"keep-alive", f->keep_alive, KEEP_ALIVE, out->keep_alive},
        {"priority", f->priority, PRIORITY, out->priority},
        {"max-queue-wait", f->max_queue_wait, SECONDS, out->max_queue_wait},
        {"min-resident", f->min_resident, SECONDS, out->min_resident},
        {"pinned", f->pinned, PINNED, out->pinned},
    };
    for (int i = 0; i < 5; i++) {
        if (!t[i].text)
            continue;
        int rc = list_parse(t[i].flag, t[i].kind, t[i].text, n_models, lists_ok, t[i].dst);
        if (rc < 0)
            return rc;
        out->set[i] = true;
    }
    return 0;
}

void sim_controls_apply(const struct sim_controls *c, struct sim_config *sc)
{
    sc->keep_alive = c->set[0] ? c->keep_alive : NULL;
    sc->priority = c->set[1] ? c->priority : NULL;
    sc->max_queue_wait = c->set[2] ? c->max_queue_wait : NULL;
    sc->min_resident = c->set[3] ? c->min_resident : NULL;
    sc->pinned = c->set[4] ? c->pinned : NULL;
}
