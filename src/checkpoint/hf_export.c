/* A minimal Hugging Face export: config.json + one F32 model.safetensors. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "checkpoint.h"

static json_t *hf_config(const model_args *a) {
    json_t *c = json_object();
    json_object_set_new(c, "architectures", json_pack("[s]", "Qwen3ForCausalLM"));
    json_object_set_new(c, "model_type", json_string("qwen3"));
    json_object_set_new(c, "hidden_size", json_integer(a->dim));
    json_object_set_new(c, "num_hidden_layers", json_integer(a->n_layers));
    json_object_set_new(c, "num_attention_heads", json_integer(a->n_heads));
    json_object_set_new(c, "num_key_value_heads", json_integer(a->n_kv_heads));
    json_object_set_new(c, "head_dim", json_integer(a->head_dim));
    json_object_set_new(c, "intermediate_size", json_integer(a->ffn_dim));
    json_object_set_new(c, "vocab_size", json_integer(a->vocab_size));
    json_object_set_new(c, "rope_theta", json_real(a->rope_theta));
    json_object_set_new(c, "rms_norm_eps", json_real(a->norm_eps));
    json_object_set_new(c, "tie_word_embeddings", json_boolean(a->tie_embeddings));
    json_object_set_new(c, "max_position_embeddings",
                        json_integer(a->max_seq_len > 0 ? a->max_seq_len : 4096));
    json_object_set_new(c, "hidden_act", json_string("silu"));
    json_object_set_new(c, "attention_bias", json_false());
    json_object_set_new(c, "attention_dropout", json_real(0.0));
    json_object_set_new(c, "use_sliding_window", json_false());
    json_object_set_new(c, "sliding_window", json_null());
    json_object_set_new(c, "rope_scaling", json_null());
    json_object_set_new(c, "initializer_range", json_real(0.02));
    json_object_set_new(c, "torch_dtype", json_string("float32"));
    return c;
}

int ckpt_export_hf(const model *m, const char *dir, base_err *err) {
    if (base_mkdir_p(dir, err)) return -1;
    char path[4096], tmp[4200];
    if (snprintf(path, sizeof path, "%s/model.safetensors", dir) >= (int)sizeof path)
        return base_fail(err, "%s: path too long", dir);
    const ckpt_kv meta[] = {{"format", "pt"}};
    if (ckpt_save_model(m, m->w, path, meta, 1, err)) return -1;
    snprintf(path, sizeof path, "%s/config.json", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    json_t *c = hf_config(&m->args);
    int rc = json_dump_file(c, tmp, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(c);
    if (rc != 0) return base_fail(err, "%s: cannot write %s", path, tmp);
    if (rename(tmp, path) != 0)
        return base_fail(err, "%s: rename from %s failed: %s", path, tmp, strerror(errno));
    return 0;
}
