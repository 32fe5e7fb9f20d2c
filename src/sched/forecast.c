#include "sched/forecast.h"

#include <math.h>

void forecast_add(struct forecast *f, double t)
{
    if (f->n == 0) {
        f->first = f->last = t;
        f->n = 1;
        return;
    }
    double gap = t - f->last;
    int k = f->n; /* gaps including this one */
    double w = k < FORECAST_WINDOW ? 1.0 / k : 1.0 / FORECAST_WINDOW;
    double d = gap - f->gap_mean;
    f->gap_mean += w * d;
    f->gap_var = (1 - w) * (f->gap_var + w * d * d); /* Welford, or its weighted form */
    f->last = t;
    f->n++;
}

/* Numerical Recipes' pair: the series for x < a + 1, Lentz's continued
 * fraction otherwise; both to double precision within 300 terms for the
 * shapes a forecast makes (1/CV^2 with CV in [0.05, 20]). */
double forecast_gamma_q(double a, double x)
{
    if (x <= 0)
        return 1;
    double lead = exp(-x + a * log(x) - lgamma(a));
    if (x < a + 1) {
        double sum = 1 / a, term = sum;
        for (int n = 1; n < 300; n++) {
            term *= x / (a + n);
            sum += term;
            if (fabs(term) < fabs(sum) * 1e-15)
                break;
        }
        double q = 1 - sum * lead;
        return q > 0 ? q : 0;
    }
    double tiny = 1e-300, b = x + 1 - a, c = 1 / tiny, d = 1 / b, h = d;
    for (int i = 1; i < 300; i++) {
        double an = -i * (i - a);
        b += 2;
        d = an * d + b;
        d = fabs(d) < tiny ? tiny : d;
        c = b + an / c;
        c = fabs(c) < tiny ? tiny : c;
        d = 1 / d;
        double del = d * c;
        h *= del;
        if (fabs(del - 1) < 1e-15)
            break;
    }
    return lead * h;
}

/* The fitted Gamma's shape and scale. */
static void fit(const struct forecast *f, double now, double *shape, double *scale)
{
    double mean, cv2;
    if (f->n >= 3) {
        /* the sample CV of a few gaps says little: shrink it towards
         * Poisson's, as if FORECAST_PRIOR gaps of CV 1 came first */
        int gaps = f->n - 1 < FORECAST_WINDOW ? f->n - 1 : FORECAST_WINDOW;
        mean = f->gap_mean;
        cv2 = (gaps * f->gap_var / (mean * mean) + FORECAST_PRIOR) / (gaps + FORECAST_PRIOR);
    } else { /* Poisson at the rate seen so far */
        double span = now - f->first;
        mean = f->n == 2 ? f->gap_mean : span;
        cv2 = 1;
    }
    if (!(mean > 1e-6))
        mean = 1e-6;
    cv2 = cv2 < 0.05 * 0.05 ? 0.05 * 0.05 : cv2 > 400 ? 400 : cv2;
    *shape = 1 / cv2;
    *scale = mean * cv2;
}

double forecast_within(const struct forecast *f, double now, double horizon)
{
    if (f->n == 0)
        return 0;
    double k, theta, s = now - f->last;
    fit(f, now, &k, &theta);
    double q0 = forecast_gamma_q(k, s / theta);
    if (q0 < 1e-200) /* far in the tail: the hazard tends to 1/theta */
        return 1 - exp(-horizon / theta);
    double p = 1 - forecast_gamma_q(k, (s + horizon) / theta) / q0;
    return p < 0 ? 0 : p > 1 ? 1 : p;
}

double forecast_wait(const struct forecast *f, double now)
{
    if (f->n == 0)
        return INFINITY;
    double k, theta, s = now - f->last;
    fit(f, now, &k, &theta);
    double x = s / theta, q0 = forecast_gamma_q(k, x);
    if (q0 < 1e-200)
        return theta;
    /* E[X - s | X > s] = (k theta Q(k+1, x) - s Q(k, x)) / Q(k, x) */
    double w = (k * theta * forecast_gamma_q(k + 1, x) - s * q0) / q0;
    return w > 0 ? w : 0;
}

double forecast_cv(const struct forecast *f)
{
    double k, theta;
    fit(f, f->last, &k, &theta);
    return sqrt(1 / k);
}
