/* The families and what is the same for all of them about a config:
 * dispatch on model_type, generation_config.json, copies, shard checks. */
#include "model/arch.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/jsonout.h"
#include "format/ct.h"
#include "format/gguf.h"
#include "format/gguf_hf.h"
#include "format/hf_config.h"

extern const struct arch_ops opt_arch, llama_arch, gemma_arch;

const struct arch_ops *const model_archs[] = {&opt_arch, &llama_arch, &gemma_arch, NULL};

static char family_names[256];
static pthread_once_t family_names_once = PTHREAD_ONCE_INIT;

static void family_names_make(void)
{
    size_t at = 0;
    for (int a = 0; model_archs[a]; a++)
        for (int t = 0; model_archs[a]->model_types[t]; t++)
            at += (size_t)snprintf(family_names + at, sizeof(family_names) - at, "%s%s",
                                   at ? ", " : "", model_archs[a]->model_types[t]);
}

/* Any thread (error messages are made on many). */
const char *model_families(void)
{
    pthread_once(&family_names_once, family_names_make);
    return family_names;
}

bool model_info_is_eos(const struct model_info *info, int32_t id)
{
    for (int i = 0; i < info->n_eos; i++)
        if (info->eos_ids[i] == id)
            return true;
    return false;
}

int arch_config_alloc(const struct arch_ops *arch, struct model_config **out)
{
    struct model_config *c = calloc(1, arch->config_size);
    *out = c;
    if (!c)
        return err_set(ERR_NOMEM, "out of memory for a model config");
    c->arch = arch;
    c->info.family = arch->name;
    c->info.bos_id = c->info.pad_id = -1;
    c->info.max_pos_from = "max_position_embeddings";
    return 0;
}

static const struct arch_ops *arch_find(const char *model_type)
{
    for (int a = 0; model_archs[a]; a++)
        for (int t = 0; model_archs[a]->model_types[t]; t++)
            if (strcmp(model_archs[a]->model_types[t], model_type) == 0)
                return model_archs[a];
    return NULL;
}

static int config_from_json(json_t *root, const char *what, struct model_config **out)
{
    *out = NULL;
    if (!json_is_object(root))
        return err_set(ERR_FORMAT, "%s: expected a JSON object", what);
    /* a quantized checkpoint's scheme first: one that is not run is refused
     * before anything else is read or allocated; its block types' kernels
     * join the required ops */
    struct ct_config *ct = NULL;
    int rc = ct_config_parse(root, what, &ct);
    if (rc < 0)
        return rc;
    const unsigned ct_types = ct ? ct_config_dtypes(ct) : 0;
    ct_config_free(ct);
    const char *mt;
    if ((rc = hf_get_str(root, what, "model_type", &mt)) < 0)
        return rc;
    if (!mt)
        return err_set(ERR_FORMAT, "%s: missing \"model_type\" (expected one of %s)", what,
                       model_families());
    const struct arch_ops *arch = arch_find(mt);
    if (!arch)
        return err_set(ERR_UNSUPPORTED,
                       "%s: model_type \"%s\" is not supported (supported: %s)", what, mt,
                       model_families());
    struct model_config *c = NULL;
    if ((rc = arch->config_parse(root, what, &c)) < 0) {
        model_config_free(c);
        return rc;
    }
    json_t *archs = json_object_get(root, "architectures");
    if (json_is_array(archs) && json_is_string(json_array_get(archs, 0)))
        snprintf(c->info.architecture, sizeof(c->info.architecture), "%s",
                 json_string_value(json_array_get(archs, 0)));
    for (int t = 0; t < DTYPE_COUNT; t++)
        if (ct_types & (1u << t))
            c->weight_ops |= kern_weight_ops((enum dtype)t);
    *out = c;
    return 0;
}

int model_config_parse(const char *json, const char *what, struct model_config **out)
{
    json_error_t jerr;
    *out = NULL;
    json_t *root = json_loads(json, JSON_REJECT_DUPLICATES, &jerr);
    char why[JSON_ERROR_TEXT_LENGTH];
    if (!root)
        return err_set(ERR_FORMAT, "%s: invalid JSON at line %d: %s", what, jerr.line,
                       jsonout_parse_error(&jerr, why, sizeof(why)));
    int rc = config_from_json(root, what, out);
    json_decref(root);
    return rc;
}

/* generation_config.json's eos_token_id, when the file says one: what
 * transformers' generate stops at. */
static int generation_config_apply(const char *dir, struct model_config *c)
{
    char path[4096];
    json_t *root;
    int rc = hf_json_load(dir, "generation_config.json", true, &root, path, sizeof(path));
    if (rc == ERR_NOT_FOUND)
        return 0;
    if (rc < 0)
        return rc;
    int ids[MODEL_MAX_EOS], n = 0;
    if ((rc = hf_get_ids(root, path, "eos_token_id", c->info.vocab, ids, MODEL_MAX_EOS, &n)) == 0 &&
        n > 0) {
        memcpy(c->info.eos_ids, ids, (size_t)n * sizeof(int));
        c->info.n_eos = n;
    }
    json_decref(root);
    return rc;
}

/* A GGUF checkpoint's config: its metadata read as config.json (format/gguf_hf.h). */
static int config_from_gguf(const char *path, struct model_config **out)
{
    struct gguf_file *g;
    json_t *root = NULL;
    int rc = gguf_open(path, &g);
    if (rc < 0)
        return rc;
    if ((rc = gguf_hf_config(g, &root)) == 0)
        rc = config_from_json(root, gguf_path(g), out);
    json_decref(root);
    /* the block types' kernels join the required ops; a type without one
     * is refused when the checkpoint opens (gguf_hf_dtype) */
    for (size_t i = 0; rc == 0 && i < gguf_tensor_count(g); i++) {
        enum dtype dt;
        if (gguf_hf_dtype(gguf_tensor_get(g, i), &dt) == 0)
            (*out)->weight_ops |= kern_weight_ops(dt);
    }
    gguf_close(g);
    return rc;
}

int model_config_load(const char *dir, struct model_config **out)
{
    char path[4096];
    json_t *root;
    *out = NULL;
    if (gguf_is_checkpoint(dir))
        return config_from_gguf(dir, out);
    int rc = hf_json_load(dir, "config.json", false, &root, path, sizeof(path));
    if (rc < 0)
        return rc;
    rc = config_from_json(root, path, out);
    json_decref(root);
    if (rc == 0 && (rc = generation_config_apply(dir, *out)) < 0) {
        model_config_free(*out);
        *out = NULL;
    }
    return rc;
}

int model_config_dup(const struct model_config *c, struct model_config **out)
{
    *out = malloc(c->arch->config_size);
    if (!*out)
        return err_set(ERR_NOMEM, "out of memory for a model config");
    memcpy(*out, c, c->arch->config_size);
    return 0;
}

void model_config_free(struct model_config *c)
{
    free(c);
}

int model_config_save(const struct model_config *c, const char *dir)
{
    const struct model_info *in = &c->info;
    int rc = c->arch->config_save(c, dir);
    if (rc < 0)
        return rc;
    char path[4096];
    snprintf(path, sizeof(path), "%s/generation_config.json", dir);
    json_t *g = json_object();
    if (in->bos_id >= 0)
        json_object_set_new(g, "bos_token_id", json_integer(in->bos_id));
    if (in->n_eos == 1) {
        json_object_set_new(g, "eos_token_id", json_integer(in->eos_ids[0]));
    } else if (in->n_eos > 1) {
        json_t *l = json_array();
        for (int i = 0; i < in->n_eos; i++)
            json_array_append_new(l, json_integer(in->eos_ids[i]));
        json_object_set_new(g, "eos_token_id", l);
    }
    if (in->pad_id >= 0)
        json_object_set_new(g, "pad_token_id", json_integer(in->pad_id));
    json_object_set_new(g, "transformers_version", json_string("shardswap"));
    if (json_dump_file(g, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER) != 0)
        rc = err_set(ERR_IO, "%s: cannot write", path);
    json_decref(g);
    return rc;
}

void model_config_describe(const struct model_config *c, char *buf, size_t cap)
{
    c->arch->describe(c, buf, cap);
}

int model_shard_check(const struct model_config *c, const struct model_shard *s)
{
    const struct model_info *in = &c->info;
    if (s->tp_size < 1 || s->tp_rank < 0 || s->tp_rank >= s->tp_size)
        return err_set(ERR_INVALID, "tensor-parallel rank %d of %d is out of range", s->tp_rank,
                       s->tp_size);
    if (s->tp_size > in->vocab)
        return err_set(ERR_INVALID, "tensor-parallel size %d exceeds the vocabulary size %d",
                       s->tp_size, in->vocab);
    if (s->layer_begin < 0 || s->layer_end > in->n_layers || s->layer_begin >= s->layer_end)
        return err_set(ERR_INVALID, "layer range [%d, %d) is not inside [0, %d)", s->layer_begin,
                       s->layer_end, in->n_layers);
    return c->arch->shard_check(c, s);
}

void model_expert_range(const struct model_shard *s, int n_experts, int *begin, int *end)
{
    const bool ep = s->expert_parallel && s->tp_size > 1;
    *begin = ep ? (int)((long)n_experts * s->tp_rank / s->tp_size) : 0;
    *end = ep ? (int)((long)n_experts * (s->tp_rank + 1) / s->tp_size) : n_experts;
}

uint64_t model_required_ops(const struct model_config *c)
{
    /* model_head_rows and model_head_logits */
    const uint64_t head = KERN_OP_BIT(KERN_OP_GATHER_ROWS) | KERN_OP_BIT(KERN_OP_LINEAR);
    return head | c->weight_ops | c->arch->required_ops(c);
}

int model_check_device(const struct model_config *c, const struct device *d)
{
    return kern_check(d, model_required_ops(c), c->info.head_dim);
}

enum kern_compute model_compute_default(enum dtype weights)
{
    return weights == DTYPE_BF16 || dtype_is_block(weights) ? KERN_COMPUTE_BF16 : KERN_COMPUTE_F32;
}
