/* Sampling: greedy is argmax; the same seed gives the same tokens; top-k and
 * top-p never pick outside their sets; frequencies follow softmax(l / T). */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/error.h"
#include "model/sampler.h"
#include "test.h"

#define V 8

static int32_t pick(struct sampler *s, const float *logits)
{
    float tmp[V];
    memcpy(tmp, logits, sizeof(tmp));
    return sampler_pick(s, tmp, V);
}

static const float logits[V] = {1.0f, 3.0f, 2.5f, -1.0f, 0.0f, 2.0f, -2.0f, 0.5f};

TEST(greedy)
{
    struct sampler s;
    struct sampler_params p = {.temperature = 0, .top_p = 1};
    CHECK(sampler_init(&s, &p) == 0);
    CHECK(pick(&s, logits) == 1);
    sampler_free(&s);
}

/* same seed, same sequence; another seed, another sequence */
TEST(seeds)
{
    struct sampler s;
    struct sampler_params p = {.temperature = 1.0f, .top_p = 1, .seed = 42};
    int32_t a[64], b[64], c[64];
    struct sampler s2, s3;
    p.seed = 42;
    CHECK(sampler_init(&s, &p) == 0 && sampler_init(&s2, &p) == 0);
    p.seed = 43;
    CHECK(sampler_init(&s3, &p) == 0);
    for (int i = 0; i < 64; i++) {
        a[i] = pick(&s, logits);
        b[i] = pick(&s2, logits);
        c[i] = pick(&s3, logits);
    }
    CHECK(memcmp(a, b, sizeof(a)) == 0);
    CHECK(memcmp(a, c, sizeof(a)) != 0);
    sampler_free(&s2);
    sampler_free(&s3);
    sampler_free(&s);
}

/* frequencies at T = 0.7 match softmax(l / 0.7) within 1% absolute over 200k draws */
TEST(temperature)
{
    struct sampler s;
    struct sampler_params p = {.temperature = 0.7f, .top_p = 1, .seed = 7};
    CHECK(sampler_init(&s, &p) == 0);
    int count[V] = {0};
    const int N = 200000;
    for (int i = 0; i < N; i++)
        count[pick(&s, logits)]++;
    double z = 0, prob[V];
    for (int i = 0; i < V; i++)
        z += prob[i] = exp(logits[i] / 0.7);
    for (int i = 0; i < V; i++)
        CHECK_MSG(fabs(count[i] / (double)N - prob[i] / z) < 0.01, "token %d: %.4f vs %.4f", i,
                  count[i] / (double)N, prob[i] / z);
    sampler_free(&s);
}

/* top-k 2 keeps ids 1 and 2 only */
TEST(top_k)
{
    struct sampler s;
    struct sampler_params p = {.temperature = 1.0f, .top_k = 2, .top_p = 1, .seed = 1};
    CHECK(sampler_init(&s, &p) == 0);
    int outside = 0;
    for (int i = 0; i < 10000; i++) {
        int32_t id = pick(&s, logits);
        outside += id != 1 && id != 2;
    }
    CHECK(outside == 0);
    sampler_free(&s);
}

/* top-p: probabilities at T=1 sorted are ~ .36 (1), .22 (2), .13 (5), ...; p = 0.5
 * needs ids 1 and 2 (0.58 >= 0.5), never anything else */
TEST(top_p)
{
    struct sampler s;
    struct sampler_params p = {.temperature = 1.0f, .top_p = 0.5f, .seed = 2};
    CHECK(sampler_init(&s, &p) == 0);
    int outside = 0;
    int seen2 = 0;
    for (int i = 0; i < 10000; i++) {
        int32_t id = pick(&s, logits);
        outside += id != 1 && id != 2;
        seen2 += id == 2;
    }
    CHECK(outside == 0 && seen2 > 0);
    sampler_free(&s);
}

/* top-k 50 of 1000 random logits, with ties: every pick is in the brute-force top 50,
 * and top-k 3 frequencies follow the renormalised softmax of those 3 */
TEST(top_k_ties)
{
    struct sampler s;
    struct sampler_params p;
    int count[V] = {0};
    const int N = 200000;
    double z;
    static float big[1000], tmp[1000];
    uint64_t x = 99;
    for (int i = 0; i < 1000; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        big[i] = (float)((x >> 40) % 200) / 20.0f; /* many exact ties */
    }
    p = (struct sampler_params){.temperature = 1.0f, .top_k = 50, .top_p = 1, .seed = 3};
    CHECK(sampler_init(&s, &p) == 0);
    int bad = 0;
    for (int i = 0; i < 5000; i++) {
        memcpy(tmp, big, sizeof(big));
        int32_t id = sampler_pick(&s, tmp, 1000);
        int above = 0; /* ids ranked strictly above id (higher logit, or equal and lower id) */
        for (int j = 0; j < 1000; j++)
            above += big[j] > big[id] || (big[j] == big[id] && j < id);
        bad += above >= 50;
    }
    CHECK_MSG(bad == 0, "%d top-k picks outside the top 50", bad);
    sampler_free(&s);
    p = (struct sampler_params){.temperature = 1.0f, .top_k = 3, .top_p = 1, .seed = 4};
    CHECK(sampler_init(&s, &p) == 0);
    memset(count, 0, sizeof(count));
    for (int i = 0; i < N; i++)
        count[pick(&s, logits)]++;
    z = exp(3.0) + exp(2.5) + exp(2.0);
    CHECK(fabs(count[1] / (double)N - exp(3.0) / z) < 0.01);
    CHECK(fabs(count[2] / (double)N - exp(2.5) / z) < 0.01);
    CHECK(fabs(count[5] / (double)N - exp(2.0) / z) < 0.01);
    CHECK(count[1] + count[2] + count[5] == N);
    sampler_free(&s);
}

/* invalid parameters are refused, naming the value and the range */
TEST(invalid)
{
    struct sampler s;
    struct sampler_params p = {.temperature = -1, .top_p = 1};
    CHECK(sampler_init(&s, &p) < 0 &&
          strstr(err_msg(), "temperature -1 is out of range (expected a finite number >= 0"));
    p = (struct sampler_params){.temperature = 1, .top_p = 0};
    CHECK(sampler_init(&s, &p) < 0 &&
          strstr(err_msg(), "top_p 0 is out of range (expected 0 < top_p <= 1)"));
    p = (struct sampler_params){.temperature = 1, .top_k = -3, .top_p = 1};
    CHECK(sampler_init(&s, &p) < 0 && strstr(err_msg(), "top_k -3 is out of range (expected >= 0"));
}

/* the smallest denormal temperature is valid and picks the argmax */
TEST(denormal_temperature)
{
    struct sampler s;
    struct sampler_params p = {.temperature = FLT_TRUE_MIN, .top_p = 1, .seed = 9};
    CHECK(sampler_init(&s, &p) == 0);
    for (int i = 0; i < 100; i++) {
        float l[4] = {0.5f, 3.0f, 2.999f, -1.0f};
        CHECK(sampler_pick(&s, l, 4) == 1);
    }
    sampler_free(&s);
}

/* a NaN among the logits is noted (sticky), greedy or sampled */
TEST(nonfinite)
{
    for (int k = 0; k < 2; k++) {
        struct sampler sn;
        struct sampler_params sp = {.temperature = k ? 0.7f : 0, .top_p = 1, .seed = 3};
        CHECK(sampler_init(&sn, &sp) == 0);
        float l[4] = {0.1f, 2.0f, -1.0f, 0.5f};
        (void)sampler_pick(&sn, l, 4);
        CHECK(!sampler_nonfinite(&sn));
        l[2] = NAN;
        (void)sampler_pick(&sn, l, 4);
        CHECK(sampler_nonfinite(&sn));
        l[2] = 0;
        (void)sampler_pick(&sn, l, 4);
        CHECK(sampler_nonfinite(&sn));
        sampler_free(&sn);
    }
}

/* logits_argmax against the one-pass first-largest scan: every length
 * around the 16 lanes, the maximum in the tail, ties to the first index, an
 * infinity, NaNs never winning (all NaN: 0) */
static int32_t scan_first_largest(const float *x, int n)
{
    int32_t best = -1;
    for (int i = 0; i < n; i++)
        if (!isnan(x[i]) && (best < 0 || x[i] > x[best]))
            best = i;
    return best < 0 ? 0 : best;
}

TEST(argmax_lanes)
{
    float x[70];
    for (int n = 1; n <= 70; n++)
        for (int at = 0; at < n; at += 3) {
            for (int i = 0; i < n; i++)
                x[i] = (float)((i * 37) % 11) - 5.0f;
            x[at] = 9.0f;
            if (at + 17 < n)
                x[at + 17] = 9.0f; /* a tie later on: the first wins */
            bool finite;
            int32_t got = logits_argmax(x, n, &finite);
            CHECK(got == at && got == scan_first_largest(x, n) && finite);
            x[(at + 5) % n] = NAN;
            got = logits_argmax(x, n, &finite);
            CHECK(got == scan_first_largest(x, n) && !finite);
        }
    /* ties in one lane (16 apart), in a lane before the first's, and past
     * the lanes; random values with many ties, NaNs and infinities */
    uint64_t r = 7;
    float y[100];
    for (int round = 0; round < 3000; round++) {
        const int n = 1 + round % 100;
        for (int i = 0; i < n; i++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            const unsigned u = (unsigned)(r >> 40);
            y[i] = (float)(u % 4); /* a few values: ties everywhere */
            if (u % 97 == 0)
                y[i] = NAN;
            if (round % 5 == 1 && u % 89 == 0)
                y[i] = INFINITY;
            if (round % 7 == 2)
                y[i] = u % 3 ? -INFINITY : NAN; /* nothing above -inf */
        }
        bool finite;
        CHECK(logits_argmax(y, n, &finite) == scan_first_largest(y, n));
    }
    float inf[20];
    for (int i = 0; i < 20; i++)
        inf[i] = (float)i;
    inf[18] = INFINITY;
    bool finite;
    CHECK(logits_argmax(inf, 20, &finite) == 18 && !finite);
    for (int i = 0; i < 20; i++)
        inf[i] = NAN;
    CHECK(logits_argmax(inf, 20, &finite) == 0 && !finite);
}

/* top-p sorts only the ids that can reach its mass (nucleus_candidates);
 * the full sort is what top-k = vocab - 1 does (the one id it leaves out
 * is a -inf logit, probability 0): the same seed must draw the same tokens
 * both ways, over flat and peaked distributions, many exact ties, a few
 * -inf, a vocabulary that is not a multiple of 16, and tiny top-p */
TEST(top_p_candidates)
{
    enum { NV = 5003, DRAWS = 400 };
    static float base[NV], a[NV], b[NV];
    uint64_t x = 11;
    const float scales[] = {0.5f, 2.0f, 8.0f, 30.0f};
    const float ps[] = {0.05f, 0.5f, 0.9f, 0.99f};
    int differ = 0, draws = 0;
    for (int sc = 0; sc < 4; sc++)
        for (int pi = 0; pi < 4; pi++) {
            for (int i = 0; i < NV; i++) {
                x = x * 6364136223846793005ull + 1442695040888963407ull;
                const unsigned u = (unsigned)(x >> 40);
                base[i] = scales[sc] * (float)(u % 1000) / 1000.0f;
                if (pi % 2) /* a few distinct values: ties everywhere */
                    base[i] = floorf(base[i]);
                if (u % 251 == 0)
                    base[i] = -INFINITY;
            }
            base[NV - 1] = -INFINITY; /* the id top-k = NV - 1 leaves out */
            struct sampler sa, sb;
            struct sampler_params pa = {.temperature = 0.8f, .top_p = ps[pi], .seed = 5};
            struct sampler_params pb = pa;
            pb.top_k = NV - 1;
            CHECK(sampler_init(&sa, &pa) == 0 && sampler_init(&sb, &pb) == 0);
            for (int d = 0; d < DRAWS; d++) {
                memcpy(a, base, sizeof(a));
                memcpy(b, base, sizeof(b));
                differ += sampler_pick(&sa, a, NV) != sampler_pick(&sb, b, NV);
                draws++;
            }
            sampler_free(&sa);
            sampler_free(&sb);
        }
    CHECK_MSG(differ == 0, "%d of %d top-p draws differ from the full sort's", differ, draws);
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, NULL);
}
