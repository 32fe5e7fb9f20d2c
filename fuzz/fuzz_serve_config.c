/* libFuzzer target: YAML text through the server's config parser, then
 * serve_config_check and serve_config_stack (and its adapters). Whatever the parser accepts
 * must lie in the ranges config.h gives; the check must accept or refuse
 * without crashing; everything is freed. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct serve_config c; /* large (256 models): not on the stack */
    static struct stack_model_config mc[SERVE_MAX_MODELS];
    static struct stack_adapter_config ac[SERVE_MAX_MODELS];
    serve_config_init(&c);
    if (serve_config_parse_yaml((const char *)data, size, "fuzz.yaml", &c) == 0) {
        if (!c.host || c.port < 0 || c.port > 65535 || c.n_devices < 1 ||
            c.n_devices > STACK_MAX_DEVICES || c.n_models > SERVE_MAX_MODELS ||
            c.n_model_roots > SERVE_MAX_ROOTS || c.max_batch < 1 || c.queue_cap < 1)
            abort(); /* accepted a value out of range */
        for (int i = 0; i < c.n_models; i++) {
            const struct serve_model *m = &c.models[i];
            if (!m->name || !m->path || m->tp < 1 || m->pp < 1 || m->n_devices < 0 ||
                m->n_devices > STACK_MAX_DEVICES)
                abort();
        }
        for (int i = 0; i < c.n_adapters; i++) {
            const struct serve_adapter *a = &c.adapters[i];
            if (!a->name || !a->base || !a->path || a->priority < -ENGINE_PRIORITY_MAX ||
                a->priority > ENGINE_PRIORITY_MAX)
                abort();
        }
        if (serve_config_check(&c) == 0) {
            struct stack_config sc;
            serve_config_stack(&c, &sc, mc);
            serve_config_stack_adapters(&c, &sc, ac);
            if (sc.n_models != c.n_models || sc.n_adapters != c.n_adapters)
                abort();
        }
    }
    serve_config_free(&c);
    return 0;
}
