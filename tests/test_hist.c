/* core/hist.h against hand-computed references: bucket edges (1 us
 * 2^(k/8)), quantiles capped at the maximum, exact count, sum and max, and
 * the cumulative counts on the caller's bounds. */
#include <math.h>

#include "core/hist.h"
#include "test.h"

TEST(bounds)
{
    static const double le[] = {0.001, 0.01, 0.1, 1};
    struct hist h;
    hist_init(&h, le, 4);
    struct hist_summary s;
    hist_summarize(&h, &s);
    CHECK(s.n == 0 && s.mean == 0 && s.p99 == 0 && s.max == 0);

    /* 0.5 us lands in bucket 0 (<= 1 us): its quantile is min(1 us, max) */
    hist_add(&h, 0.5e-6);
    CHECK(h.count[0] == 1 && hist_quantile(&h, 0.5) == 0.5e-6);

    /* 1 ms: log2(1000) * 8 = 79.7 -> bucket 80, upper edge 1 us 2^10 = 1.024 ms */
    hist_add(&h, 1e-3);
    CHECK(h.count[80] == 1);
    CHECK_MSG(hist_quantile(&h, 1.0) == 1e-3, "capped at the max: %g", hist_quantile(&h, 1.0));
    hist_add(&h, 2e-3); /* bucket 88 (log2(2000) * 8 = 87.7), edge 2.048 ms */
    CHECK(h.count[88] == 1);
    CHECK_MSG(fabs(hist_quantile(&h, 0.6) - 1.024e-3) < 1e-12, "p60 %g", hist_quantile(&h, 0.6));
    /* a huge value goes to the last bucket */
    hist_add(&h, 1e9);
    CHECK(h.count[HIST_BUCKETS - 1] == 1);

    hist_summarize(&h, &s);
    CHECK(s.n == 4 && s.max == 1e9);
    CHECK(s.mean == (0.5e-6 + 1e-3 + 2e-3 + 1e9) / 4);
    CHECK(s.p99 == HIST_BASE * exp2(255.0 / 8)); /* the last bucket's edge, below the max */
    /* <= 1 ms: 0.5 us and 1 ms; <= 10 ms, <= 100 ms, <= 1 s: also 2 ms */
    CHECK(h.le_count[0] == 2 && h.le_count[1] == 3 && h.le_count[2] == 3 && h.le_count[3] == 3);
}

TEST(no_bounds)
{
    struct hist g;
    struct hist_summary s;
    hist_init(&g, NULL, 0);
    for (int i = 1; i <= 100; i++)
        hist_add(&g, i * 1e-3);
    hist_summarize(&g, &s);
    CHECK(s.n == 100 && s.max == 0.1);
    CHECK_MSG(s.p50 >= 0.050 && s.p50 <= 0.050 * 1.091, "p50 %g within 9%%", s.p50);
    CHECK_MSG(s.p99 >= 0.099 && s.p99 <= 0.1, "p99 %g", s.p99);
}

int main(int argc, char **argv)
{
    return test_main(argc, argv, NULL);
}
