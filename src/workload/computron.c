#include "workload/computron.h"

#include <string.h>

#include "core/error.h"

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
