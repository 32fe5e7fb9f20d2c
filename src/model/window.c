/* Per-layer sliding windows from config.json (window.h). */
#include "model/window.h"

#include <string.h>

#include "core/error.h"

int layer_windows_parse(json_t *root, const char *what, int n_layers, enum layer_rule rule, int arg,
                        struct layer_windows *out)
{
    memset(out, 0, sizeof(*out));
    if (n_layers < 1 || n_layers > MODEL_MAX_LAYERS)
        return err_set(ERR_FORMAT, "%s: %d layers (expected 1..%d)", what, n_layers,
                       MODEL_MAX_LAYERS);
    json_t *types = json_object_get(root, "layer_types");
    if (types && !json_is_null(types)) {
        if (!json_is_array(types) || (int)json_array_size(types) != n_layers)
            return err_set(ERR_FORMAT,
                           "%s: field \"layer_types\" must be an array of %d strings (one per "
                           "layer)",
                           what, n_layers);
        for (int i = 0; i < n_layers; i++) {
            const char *t = json_string_value(json_array_get(types, (size_t)i));
            if (t && strcmp(t, "sliding_attention") == 0)
                layer_window_set(out, i);
            else if (!t || strcmp(t, "full_attention") != 0)
                return err_set(ERR_FORMAT,
                               "%s: layer_types[%d] is not \"sliding_attention\" or "
                               "\"full_attention\"",
                               what, i);
        }
        return 0;
    }
    for (int i = 0; i < n_layers; i++)
        if (rule == LAYERS_ALL || (rule == LAYERS_FROM && i >= arg) ||
            (rule == LAYERS_PATTERN && (arg <= 0 || (i + 1) % arg != 0)))
            layer_window_set(out, i);
    return 0;
}

json_t *layer_windows_json(const struct layer_windows *w, int n_layers)
{
    json_t *a = json_array();
    for (int i = 0; a && i < n_layers; i++)
        json_array_append_new(
            a, json_string(layer_windowed(w, i) ? "sliding_attention" : "full_attention"));
    return a;
}
