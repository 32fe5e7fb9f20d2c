/* model/generate.h's loop on a tiny random OPT model on the host:
 * model_generate_steps calls its step once per forward, in order, and stops
 * where the step says; a greedy step through it gives model_generate's
 * greedy ids (the same forwards); errors of a step and of a forward come
 * back; a batch gives the step every sequence's logits. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "model/generate.h"
#include "model/model.h"
#include "test.h"
#include "tiny_opt.h"

#define VOCAB 1000
#define MAX_STEPS 16

static char tmp[] = "/tmp/shardswap_generate_XXXXXX";
static struct model *m;

static void setup(void)
{
    CHECK(mkdtemp(tmp) != NULL);
    struct model_config *c = tiny_opt_config(2, VOCAB);
    struct model_random_opts o = {.dtype = DTYPE_F32, .seed = 5};
    CHECK(model_random_write(c, tmp, &o) == 0);
    model_config_free(c);
    int rc = model_open(tmp, &m);
    CHECK_MSG(rc == 0, "%s", err_msg());
    if (rc < 0)
        exit(test_finish());
}

/* Greedy ids for every sequence; stops before step `stop`, or fails with
 * `fail` at it when that is negative. */
struct greedy {
    int batch, stop, fail, calls;
    int steps[MAX_STEPS + 1];         /* the step index of each call */
    int32_t picked[MAX_STEPS + 1][2]; /* each call's ids (batch <= 2) */
    bool finite;
};

static int greedy_step(void *ctx, int step, float *logits, int32_t *next)
{
    struct greedy *g = ctx;
    g->steps[g->calls++] = step;
    if (step == g->stop)
        return g->fail < 0 ? g->fail : 1;
    for (int b = 0; b < g->batch; b++) {
        const float *l = logits + (size_t)b * VOCAB;
        int best = 0;
        for (int v = 0; v < VOCAB; v++) {
            g->finite &= isfinite(l[v]) != 0;
            if (l[v] > l[best])
                best = v;
        }
        next[b] = g->picked[step][b] = best;
    }
    return 0;
}

static int run(struct greedy *g, const int32_t *prompt, int n_prompt, int max_len)
{
    struct model_exec *ex = NULL;
    float logits[2 * VOCAB];
    int32_t next[2];
    struct model_exec_shape shape = {.batch = g->batch, .max_len = max_len};
    int rc = model_exec_open(m, &shape, &ex);
    CHECK_MSG(rc == 0, "%s", err_msg());
    if (rc == 0)
        rc = model_generate_steps(m, ex, prompt, n_prompt, logits, next, greedy_step, g);
    model_exec_free(ex);
    return rc;
}

TEST(steps)
{
    const int32_t prompt[] = {2, 31, 415, 9};
    struct greedy g = {.batch = 1, .stop = 5, .finite = true};
    CHECK(run(&g, prompt, 4, 4 + 5) == 0);
    CHECK(g.calls == 6); /* steps 0..4 forwarded, step 5 stopped */
    for (int i = 0; i < g.calls; i++)
        CHECK(g.steps[i] == i);
    CHECK(g.finite);
    /* stopped at once: only the prefill ran */
    g = (struct greedy){.batch = 1, .stop = 0, .finite = true};
    CHECK(run(&g, prompt, 4, 4) == 0 && g.calls == 1);
}

/* model_generate (greedy) is the same loop: its ids are the greedy step's
 * up to the EOS it stops at */
TEST(matches_generate)
{
    const int32_t prompt[] = {2, 77, 123, 456, 8};
    const int n = 10;
    struct greedy g = {.batch = 1, .stop = n, .finite = true};
    CHECK(run(&g, prompt, 5, 5 + n) == 0);
    struct sampler s = {0};
    struct sampler_params sp = {.temperature = 0, .top_p = 1};
    CHECK(sampler_init(&s, &sp) == 0);
    int32_t out[MAX_STEPS];
    int n_out = -1;
    int rc = model_generate(m, prompt, 5, n, &s, NULL, NULL, out, &n_out);
    CHECK_MSG(rc == 0, "%s", err_msg());
    CHECK_MSG(n_out > 0 && n_out <= n, "%d tokens", n_out); /* seeded: no EOS first */
    for (int i = 0; i < n_out; i++)
        CHECK_MSG(out[i] == g.picked[i][0], "token %d: generate %d, steps %d", i, out[i],
                  g.picked[i][0]);
    if (n_out < n) /* it stopped at an EOS the greedy step picked */
        CHECK(model_info_is_eos(model_info(m), g.picked[n_out][0]));
    sampler_free(&s);
}

TEST(errors)
{
    const int32_t prompt[] = {2, 5, 6};
    /* a step's error comes back as it is */
    struct greedy g = {.batch = 1, .stop = 2, .fail = ERR_IO, .finite = true};
    CHECK(run(&g, prompt, 3, 8) == ERR_IO && g.calls == 3);
    /* a step that never stops fills the context: the forward's error */
    g = (struct greedy){.batch = 1, .stop = -1, .finite = true};
    int rc = run(&g, prompt, 3, 3 + 4);
    CHECK_MSG(rc < 0 && g.calls == 5, "rc %d after %d calls", rc, g.calls);
}

/* a batch of two: the step sees both sequences' logits */
TEST(batch)
{
    const int32_t prompt[] = {2, 40, 41, 2, 900, 901}; /* (2, 3) */
    struct greedy g = {.batch = 2, .stop = 4, .finite = true};
    CHECK(run(&g, prompt, 3, 3 + 4) == 0);
    CHECK(g.calls == 5 && g.finite);
    for (int i = 0; i < 4; i++)
        CHECK(g.picked[i][0] >= 0 && g.picked[i][0] < VOCAB && g.picked[i][1] >= 0 &&
              g.picked[i][1] < VOCAB);
}

int main(int argc, char **argv)
{
    int rc = test_main(argc, argv, setup);
    model_close(m);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmp);
    return rc;
}
