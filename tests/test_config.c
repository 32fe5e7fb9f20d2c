/* config.json: defaults, every computation-changing field, and one specific
 * error for each kind of bad input. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "model/opt/opt.h"
#include "test.h"

#define BASE "\"model_type\": \"opt\", \"hidden_size\": 64, \"ffn_dim\": 256, " \
             "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 300, " \
             "\"max_position_embeddings\": 128"

/* Parses json and checks it fails with `code` and a message containing `needle`. */
static void expect_error(const char *json, int code, const char *needle)
{
    struct model_config *mc = NULL;
    int rc = model_config_parse(json, "config.json", &mc);
    model_config_free(mc);
    CHECK_MSG(rc == code, "%s: got %d, expected %d (%s)", json, rc, code, err_msg());
    CHECK_MSG(strstr(err_msg(), needle) != NULL, "message \"%s\" lacks \"%s\"", err_msg(),
              needle);
}

/* OPT's config of json (the test fails when it does not parse). */
static struct opt_config parse_opt(const char *json)
{
    struct model_config *mc = NULL;
    struct opt_config c = {0};
    CHECK_MSG(model_config_parse(json, "config.json", &mc) == 0, "%s: %s", json, err_msg());
    if (mc) {
        CHECK(strcmp(mc->info.family, "opt") == 0);
        c = *ARCH_CONFIG(struct opt_config, mc);
    }
    model_config_free(mc);
    return c;
}

int main(void)
{
    /* OPTConfig's defaults for every optional field */
    struct opt_config c = parse_opt("{" BASE "}");
    const struct model_info *in = &c.base.info;
    CHECK(in->hidden == 64 && in->ffn == 256 && in->n_layers == 2 && in->n_heads == 4 &&
          in->vocab == 300);
    CHECK(in->n_kv_heads == 4 && in->head_dim == 16);
    CHECK(in->max_pos == 128 && c.embed_dim == 64 && c.pre_ln && c.final_ln && c.bias);
    CHECK(c.ln_affine && c.tie_embeddings && c.act == OPT_ACT_RELU);
    CHECK(in->pad_id == 1 && in->bos_id == 2 && in->n_eos == 1 && in->eos_ids[0] == 2 &&
          in->dtype == DTYPE_F32);

    /* every field that changes the computation is read */
    c = parse_opt("{" BASE ", \"word_embed_proj_dim\": 32, \"do_layer_norm_before\": "
                  "false, \"enable_bias\": false, \"layer_norm_elementwise_affine\": "
                  "false, \"activation_function\": \"gelu_new\", \"torch_dtype\": "
                  "\"float16\", \"pad_token_id\": 0, \"eos_token_id\": 3, "
                  "\"tie_word_embeddings\": false}");
    CHECK(c.embed_dim == 32 && !c.pre_ln && !c.final_ln && !c.bias && !c.ln_affine);
    CHECK(c.act == OPT_ACT_GELU_TANH && in->dtype == DTYPE_F16 && in->pad_id == 0);
    CHECK(in->eos_ids[0] == 3 && !c.tie_embeddings);
    c = parse_opt("{" BASE ", \"_remove_final_layer_norm\": true, \"dtype\": \"bfloat16\"}");
    CHECK(c.pre_ln && !c.final_ln && in->dtype == DTYPE_BF16);

    /* bad input: each its own message */
    expect_error("{" BASE, ERR_FORMAT, "invalid JSON");
    expect_error("[1, 2]", ERR_FORMAT, "JSON object");
    expect_error("{\"hidden_size\": 64}", ERR_FORMAT, "model_type");
    /* an unsupported family is named, with the ones that are */
    expect_error("{\"model_type\": \"gpt_neox\", \"hidden_size\": 64}", ERR_UNSUPPORTED,
                 "model_type \"gpt_neox\" is not supported (supported: opt");
    expect_error("{\"model_type\": \"opt\", \"hidden_size\": 64, \"ffn_dim\": 256, "
                 "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 300}",
                 ERR_FORMAT, "max_position_embeddings");
    expect_error("{" BASE ", \"hidden_size\": 64}", ERR_FORMAT, "invalid JSON"); /* duplicate */
    expect_error("{\"model_type\": \"opt\", \"hidden_size\": \"64\", \"ffn_dim\": 256, "
                 "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 300, "
                 "\"max_position_embeddings\": 128}",
                 ERR_FORMAT, "\"hidden_size\" must be an integer");
    expect_error("{\"model_type\": \"opt\", \"hidden_size\": -64, \"ffn_dim\": 256, "
                 "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 300, "
                 "\"max_position_embeddings\": 128}",
                 ERR_FORMAT, "\"hidden_size\" is -64");
    expect_error("{\"model_type\": \"opt\", \"hidden_size\": 66, \"ffn_dim\": 256, "
                 "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 300, "
                 "\"max_position_embeddings\": 128}",
                 ERR_FORMAT, "not a multiple");
    expect_error("{" BASE ", \"activation_function\": \"mish\"}", ERR_UNSUPPORTED, "mish");
    expect_error("{" BASE ", \"torch_dtype\": \"int8\"}", ERR_UNSUPPORTED, "int8");
    expect_error("{" BASE ", \"enable_bias\": 1}", ERR_FORMAT, "true or false");
    expect_error("{" BASE ", \"eos_token_id\": 300}", ERR_FORMAT, "outside the vocabulary");

    /* a missing file names the path */
    struct model_config *mc = NULL;
    CHECK(model_config_load("/nonexistent/model", &mc) == ERR_NOT_FOUND);
    CHECK(strstr(err_msg(), "/nonexistent/model/config.json") != NULL);

    /* config.json that is not a regular file is refused by type before it is read: a
     * FIFO without a writer would block forever (the alarm turns a hang into a failure) */
    char dir[] = "/tmp/shardswap_cfg_XXXXXX", path[128];
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(path, sizeof(path), "%s/config.json", dir);
    alarm(30);
    CHECK(mkfifo(path, 0600) == 0);
    CHECK(model_config_load(dir, &mc) == ERR_IO);
    CHECK_MSG(strstr(err_msg(), path) && strstr(err_msg(), "is a FIFO, expected a regular file"),
              "%s", err_msg());
    CHECK(unlink(path) == 0 && mkdir(path, 0700) == 0);
    CHECK(model_config_load(dir, &mc) == ERR_IO);
    CHECK_MSG(strstr(err_msg(), path) &&
                  strstr(err_msg(), "is a directory, expected a regular file"),
              "%s", err_msg());
    alarm(0);
    CHECK(rmdir(path) == 0 && rmdir(dir) == 0);
    return test_finish();
}
