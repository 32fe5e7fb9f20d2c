/* adapter_config.json as PEFT writes it for LoRA (peft_type "LORA"), read
 * against the base's config: which projection of which layer each pair
 * adapts, its rank and its scale.
 *
 * Which modules an adapter adapts follows PEFT's matching on module names
 * (check_target_module_exists, get_pattern_key), over the names the base's
 * family has (arch_ops.lora_layer, lora_modules): a module key such as
 * "model.layers.3.self_attn.q_proj" is targeted when target_modules, a list,
 * holds the key or a suffix of it after a dot, or, a string, matches it
 * whole as a regular expression ("all-linear": every projection of the
 * layers); exclude_modules (the same two forms) and modules_to_save remove
 * keys; layers_to_transform (with a list of targets only, as PEFT) keeps the
 * layers it names, the index read after layers_pattern ("layers" when
 * absent). rank_pattern and alpha_pattern give a module the value of the
 * first pattern p such that the key matches "(.*\.)?(p)$". A target that
 * names no module is ignored, as PEFT ignores it (the weights file decides:
 * a tensor of a pair the config does not give is refused). Patterns are
 * read in Python's syntax, as PEFT reads them (core/pyre.h: PCRE2, with
 * bounds on compiling and matching that a hostile file cannot pass). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/error.h"
#include "core/pyre.h"
#include "format/hf_config.h"
#include "model/adapter_impl.h"

#define KEY_MAX 256

/* Whether s matches pre "(" p ")" post whole, as PEFT writes its patterns
 * around a config's (re.fullmatch, re.match with "$"); p compiled alone
 * first so that a bad pattern's message shows what the file says. */
static int lora_re_match(const char *what, const char *key, const char *pre, const char *p,
                         const char *post, const char *s, bool *match)
{
    /* room for pre and post within pyre's bound */
    if (strlen(p) > PYRE_MAX_PATTERN - 32)
        return err_set(ERR_UNSUPPORTED, "%s: %s pattern is %zu bytes (expected at most %d)", what,
                       key, strlen(p), PYRE_MAX_PATTERN - 32);
    struct pyre *re;
    int rc = pyre_compile(p, &re);
    if (rc < 0)
        return err_wrap(rc, "%s: %s pattern", what, key);
    pyre_free(re);
    size_t n = strlen(pre) + strlen(p) + strlen(post) + 3;
    char *full = malloc(n);
    if (!full)
        return err_set(ERR_NOMEM, "out of memory");
    snprintf(full, n, "%s(%s)%s", pre, p, post);
    rc = pyre_match_once(full, s, PYRE_FULLMATCH, match);
    free(full);
    return rc < 0 ? err_wrap(rc, "%s: %s pattern", what, key) : 0;
}

/* A list entry t names key k: the whole key, or its end after a dot. */
static bool name_match(const char *k, const char *t)
{
    size_t lk = strlen(k), lt = strlen(t);
    return strcmp(k, t) == 0 || (lk > lt && k[lk - lt - 1] == '.' && strcmp(k + lk - lt, t) == 0);
}

/* PEFT's test of a key against target_modules / exclude_modules: a regex
 * string matched whole, or a list of names matched whole or as a suffix
 * after a dot. */
static int modules_match(const char *what, const char *field, json_t *v, const char *k, bool *match)
{
    *match = false;
    if (json_is_string(v))
        return lora_re_match(what, field, "", json_string_value(v), "", k, match);
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e) *match |= name_match(k, json_string_value(e));
    return 0;
}

/* A list of strings, a string, or null (*v NULL). */
static int get_names(json_t *root, const char *what, const char *key, json_t **v)
{
    *v = json_object_get(root, key);
    if (!*v || json_is_null(*v)) {
        *v = NULL;
        return 0;
    }
    if (json_is_string(*v))
        return 0;
    size_t i;
    json_t *e;
    if (json_is_array(*v)) {
        json_array_foreach(*v, i, e) if (!json_is_string(e)) goto bad;
        return 0;
    }
bad:
    return err_set(ERR_FORMAT, "%s: %s must be a list of module names or a regular expression",
                   what, key);
}

/* A key that PEFT would reject or that this reader does not implement,
 * when it is set to anything but its default (null, false, empty). */
static int refuse_set(json_t *root, const char *what, const char *key, const char *why)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v) || json_is_false(v) ||
        ((json_is_array(v) || json_is_object(v)) && json_object_size(v) == 0 &&
         json_array_size(v) == 0))
        return 0;
    return err_set(ERR_UNSUPPORTED, "%s: %s is set (%s is not supported)", what, key, why);
}

/* The first key of pattern (an object: regex -> number) that k matches as
 * "(.*\.)?(key)$", its value in *out; *found false when none. */
static int pattern_value(json_t *pattern, const char *what, const char *field, const char *k,
                         double *out, bool *found)
{
    *found = false;
    const char *p;
    json_t *v;
    json_object_foreach(pattern, p, v)
    {
        bool m;
        TRY(lora_re_match(what, field, "(.*\\.)?", p, "", k, &m));
        if (!m)
            continue;
        if (!json_is_number(v))
            return err_set(ERR_FORMAT, "%s: %s[\"%s\"] must be a number", what, field, p);
        *out = json_number_value(v);
        *found = true;
        return 0;
    }
    return 0;
}

/* Whether layer l is kept by layers_to_transform (an int or a list; NULL:
 * every layer), its index read after layers_pattern as PEFT reads it. */
static int layer_kept(json_t *ltt, json_t *lpat, const char *what, const char *k, int l, bool *kept)
{
    *kept = true;
    if (ltt && !json_is_null(ltt) && !json_is_integer(ltt) && !json_is_array(ltt))
        return err_set(ERR_FORMAT,
                       "%s: layers_to_transform must be a layer index or a list of "
                       "them",
                       what);
    if (lpat && !json_is_null(lpat) && !json_is_string(lpat) && !json_is_array(lpat))
        return err_set(ERR_FORMAT, "%s: layers_pattern must be a name or a list of them", what);
    if (!ltt || json_is_null(ltt) || (json_is_array(ltt) && json_array_size(ltt) == 0))
        return 0;
    /* the index PEFT finds: after the first "<pattern>." (any dotted
     * segment when no pattern); the family's keys have one number, l */
    bool has_index = true;
    if (lpat && !json_is_null(lpat) && !(json_is_string(lpat) && !*json_string_value(lpat)) &&
        !(json_is_array(lpat) && json_array_size(lpat) == 0)) {
        has_index = false;
        json_t *one = json_is_string(lpat) ? lpat : NULL;
        size_t i, n = one ? 1 : json_array_size(lpat);
        for (i = 0; i < n && !has_index; i++) {
            json_t *e = one ? one : json_array_get(lpat, i);
            bool m;
            if (!json_is_string(e))
                return err_set(ERR_FORMAT, "%s: layers_pattern must be a name or a list of them",
                               what);
            TRY(lora_re_match(what, "layers_pattern", "(|.*\\.)", json_string_value(e),
                              "\\.[0-9]+\\..*", k, &m));
            has_index = m;
        }
    }
    if (!has_index) {
        *kept = false;
        return 0;
    }
    if (json_is_integer(ltt)) {
        *kept = json_integer_value(ltt) == l;
        return 0;
    }
    *kept = false;
    size_t i;
    json_t *e;
    json_array_foreach(ltt, i, e)
    {
        if (!json_is_integer(e))
            return err_set(ERR_FORMAT,
                           "%s: layers_to_transform must be a layer index or a list "
                           "of them",
                           what);
        if (json_integer_value(e) == l)
            *kept = true;
    }
    return 0;
}

/* Whether module key k is adapted: targeted, not excluded nor a module to
 * save, in a kept layer (l, or -1 outside the layers). */
static int key_targeted(json_t *root, const char *what, json_t *targets, json_t *excl, json_t *mts,
                        const char *k, int l, bool *out)
{
    bool m;
    *out = false;
    if (excl) {
        TRY(modules_match(what, "exclude_modules", excl, k, &m));
        if (m)
            return 0;
    }
    size_t i;
    json_t *e;
    json_array_foreach(mts, i, e)
    {
        TRY(lora_re_match(what, "modules_to_save", "(|.*\\.)", json_string_value(e), "(|\\..*)", k,
                          &m));
        if (m)
            return 0;
    }
    if (json_is_string(targets) && strcasecmp(json_string_value(targets), "all-linear") == 0) {
        *out = l >= 0; /* every linear layer but the output layer */
        return 0;
    }
    TRY(modules_match(what, "target_modules", targets, k, &m));
    if (!m || json_is_string(targets) || l < 0) {
        *out = m;
        return 0;
    }
    return layer_kept(json_object_get(root, "layers_to_transform"),
                      json_object_get(root, "layers_pattern"), what, k, l, out);
}

/* The basename of a model name or path, without trailing slashes. */
static void base_name(const char *s, char *out, size_t cap)
{
    size_t n = strlen(s);
    while (n > 1 && s[n - 1] == '/')
        n--;
    size_t b = n;
    while (b > 0 && s[b - 1] != '/')
        b--;
    snprintf(out, cap, "%.*s", (int)(n - b), s + b);
}

/* base_model_name_or_path against the base's config.json _name_or_path,
 * when both say (compared by their last path component: a model trained
 * from one path is served from another). */
static int base_name_check(json_t *root, const char *what, const char *base_dir)
{
    const char *ours;
    TRY(hf_get_str(root, what, "base_model_name_or_path", &ours));
    if (!ours || !*ours || !base_dir)
        return 0;
    json_t *bj;
    char path[4096];
    int rc = hf_json_load(base_dir, "config.json", true, &bj, path, sizeof(path));
    if (rc == ERR_NOT_FOUND)
        return 0; /* a GGUF base */
    if (rc < 0)
        return rc;
    const char *theirs = json_string_value(json_object_get(bj, "_name_or_path"));
    char a[KEY_MAX], b[KEY_MAX];
    base_name(ours, a, sizeof(a));
    base_name(theirs ? theirs : "", b, sizeof(b));
    if (theirs && *b && strcmp(a, b) != 0)
        rc = err_set(ERR_INVALID,
                     "%s: base_model_name_or_path \"%s\" names another base than %s (its "
                     "_name_or_path is \"%s\")",
                     what, ours, path, theirs);
    json_decref(bj);
    return rc;
}

/* auto_mapping.base_model_class (the transformers class the adapter was
 * made on) against the base's architecture, when both say. */
static int base_class_check(json_t *root, const char *what, const struct model_config *base)
{
    json_t *am = json_object_get(root, "auto_mapping");
    const char *cls = json_string_value(json_object_get(am, "base_model_class"));
    if (!cls || !base->info.architecture[0] || strcmp(cls, base->info.architecture) == 0)
        return 0;
    return err_set(ERR_INVALID, "%s: auto_mapping.base_model_class is %s, but the base is %s", what,
                   cls, base->info.architecture);
}

/* Every key of adapter_config.json but the targets. */
static int read_scalars(json_t *root, const char *what, int *r, double *alpha, bool *rslora)
{
    const char *s;
    TRY(hf_get_str(root, what, "peft_type", &s));
    if (!s || strcmp(s, "LORA") != 0)
        return err_set(ERR_UNSUPPORTED, "%s: peft_type is %s%s%s (expected \"LORA\")", what,
                       s ? "\"" : "", s ? s : "missing", s ? "\"" : "");
    TRY(hf_get_int(root, what, "r", false, 8, 1, 1 << 16, r));
    TRY(hf_get_num(root, what, "lora_alpha", false, 8, -1e6, 1e6, alpha));
    TRY(hf_get_bool(root, what, "use_rslora", false, rslora));
    bool b;
    TRY(hf_get_bool(root, what, "fan_in_fan_out", false, &b)); /* transposes Conv1D bases only */
    TRY(hf_get_str(root, what, "bias", &s));
    if (s && strcmp(s, "none") != 0)
        return err_set(ERR_UNSUPPORTED, "%s: bias is \"%s\" (only \"none\" is supported)", what, s);
    TRY(refuse_set(root, what, "use_dora", "DoRA"));
    TRY(refuse_set(root, what, "lora_bias", "a bias on lora_B"));
    TRY(refuse_set(root, what, "target_parameters", "LoRA on parameters"));
    TRY(refuse_set(root, what, "layer_replication", "layer replication"));
    TRY(refuse_set(root, what, "trainable_token_indices", "training token embeddings"));
    TRY(refuse_set(root, what, "alora_invocation_tokens", "activated LoRA"));
    TRY(refuse_set(root, what, "use_qalora", "QALoRA"));
    TRY(refuse_set(root, what, "arrow_config", "Arrow routing"));
    TRY(refuse_set(root, what, "kasa_config", "KaSA"));
    TRY(refuse_set(root, what, "monteclora_config", "MonteCLoRA"));
    TRY(refuse_set(root, what, "use_bdlora", "block-diagonal LoRA"));
    json_t *rp = json_object_get(root, "rank_pattern"),
           *ap = json_object_get(root, "alpha_pattern");
    if ((rp && !json_is_null(rp) && !json_is_object(rp)) ||
        (ap && !json_is_null(ap) && !json_is_object(ap)))
        return err_set(ERR_FORMAT, "%s: rank_pattern and alpha_pattern must be objects", what);
    return 0;
}

/* The rank and scale of module key k. */
static int key_rank(json_t *root, const char *what, const char *k, int r, double alpha, bool rslora,
                    int *kr, float *scale)
{
    double v;
    bool found;
    json_t *rp = json_object_get(root, "rank_pattern"),
           *ap = json_object_get(root, "alpha_pattern");
    *kr = r;
    if (json_is_object(rp)) {
        TRY(pattern_value(rp, what, "rank_pattern", k, &v, &found));
        if (found && (v != floor(v) || v < 1 || v > (1 << 16)))
            return err_set(ERR_FORMAT,
                           "%s: rank_pattern gives %s rank %g (expected an integer "
                           "in [1, 65536])",
                           what, k, v);
        if (found)
            *kr = (int)v;
    }
    if (json_is_object(ap)) {
        TRY(pattern_value(ap, what, "alpha_pattern", k, &v, &found));
        if (found)
            alpha = v;
    }
    *scale = (float)(rslora ? alpha / sqrt((double)*kr) : alpha / *kr);
    return 0;
}

static int config_read(json_t *root, const char *what, const struct model_config *base,
                       struct adapter_config *c)
{
    const struct arch_ops *a = base->arch;
    const int L = base->info.n_layers;
    if (!a->lora_layer)
        return err_set(ERR_UNSUPPORTED, "%s: the base's family (%s) takes no LoRA adapters", what,
                       a->name);
    if (L > ADAPTER_MAX_LAYERS)
        return err_set(ERR_UNSUPPORTED, "%s: the base has %d layers (adapters of at most %d)", what,
                       L, ADAPTER_MAX_LAYERS);
    int r;
    double alpha;
    bool rslora;
    TRY(read_scalars(root, what, &r, &alpha, &rslora));
    json_t *targets, *excl, *mts;
    TRY(get_names(root, what, "target_modules", &targets));
    TRY(get_names(root, what, "exclude_modules", &excl));
    TRY(get_names(root, what, "modules_to_save", &mts));
    if (!targets)
        return err_set(ERR_FORMAT,
                       "%s: target_modules is missing (expected a list of module "
                       "names or a regular expression)",
                       what);
    if (mts && json_is_string(mts))
        return err_set(ERR_FORMAT, "%s: modules_to_save must be a list", what);
    char k[KEY_MAX];
    /* modules outside the layers (embeddings, head) */
    for (int i = 0; i < 6 && a->lora_outside[i]; i++) {
        bool t;
        TRY(key_targeted(root, what, targets, excl, mts, a->lora_outside[i], -1, &t));
        if (t)
            return err_set(ERR_UNSUPPORTED,
                           "%s: target_modules adapts %s (LoRA on embeddings "
                           "and the head is not supported)",
                           what, a->lora_outside[i]);
    }
    for (int l = 0; l < L; l++) {
        const int at = snprintf(k, sizeof(k), a->lora_layer, l);
        for (int s = 0; s < LORA_SLOTS; s++) {
            bool t;
            if (!a->lora_modules[s])
                continue;
            snprintf(k + at, sizeof(k) - (size_t)at, "%s", a->lora_modules[s]);
            TRY(key_targeted(root, what, targets, excl, mts, k, l, &t));
            if (!t)
                continue;
            TRY(key_rank(root, what, k, r, alpha, rslora, &c->r[l][s], &c->scale[l][s]));
            if (c->r[l][s] > c->max_r)
                c->max_r = c->r[l][s];
        }
    }
    if (c->max_r == 0)
        return err_set(ERR_UNSUPPORTED, "%s: target_modules adapts no projection of the base",
                       what);
    return 0;
}

int model_adapter_config_load(const char *dir, const struct model_config *base,
                              const char *base_dir, struct model_config **out)
{
    *out = NULL;
    if (model_config_is_adapter(base))
        return err_set(ERR_INVALID, "%s: the base of an adapter must be a model", dir);
    json_t *root;
    char what[4096];
    int rc = hf_json_load(dir, "adapter_config.json", false, &root, what, sizeof(what));
    if (rc < 0)
        return rc;
    struct adapter_config *c = calloc(1, sizeof(*c));
    if (!c) {
        json_decref(root);
        return err_set(ERR_NOMEM, "out of memory for an adapter config");
    }
    c->base = *base;
    c->base.arch = &adapter_arch;
    c->base.weight_ops = 0;
    c->base_arch = base->arch;
    if ((rc = base_class_check(root, what, base)) == 0 &&
        (rc = config_read(root, what, base, c)) == 0)
        rc = base_name_check(root, what, base_dir);
    json_decref(root);
    if (rc < 0) {
        free(c);
        return rc;
    }
    *out = &c->base;
    return 0;
}

bool model_config_is_adapter(const struct model_config *c)
{
    return c->arch == &adapter_arch;
}

int model_adapter_max_rank(const struct model_config *c)
{
    return model_config_is_adapter(c) ? adapter_cfg(c)->max_r : 0;
}
