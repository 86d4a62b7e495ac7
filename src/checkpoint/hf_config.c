/* Hugging Face config.json <-> model_args (Qwen3ForCausalLM and Qwen3MoeForCausalLM). */
#include "checkpoint/checkpoint.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/internal.h"

/* HF's defaults (transformers Qwen3Config / Qwen3MoeConfig) for fields a config may omit. */
#define HF_DEFAULT_HEAD_DIM 128
#define HF_DEFAULT_ROPE_THETA 10000.0
#define HF_DEFAULT_MAX_POSITIONS 32768 /* Qwen3Config's and Qwen3MoeConfig's */
#define HF_DEFAULT_RMS_EPS 1e-6
#define HF_DEFAULT_AUX_COEF 0.001

typedef struct {
    const char *path;
    json_t *root;
    base_err *err;
} cfg;

/* Reads an integer field into *out: required fields must be present; optional ones keep *out
 * when absent or null. Values must be integers in [lo, 2^30]. */
static int get_int(cfg *c, const char *key, int required, int lo, int *out) {
    json_t *v = json_object_get(c->root, key);
    if (!v || json_is_null(v)) {
        if (required) return base_fail(c->err, "%s: missing field '%s'", c->path, key);
        return 0;
    }
    if (!json_is_integer(v))
        return base_fail(c->err, "%s: field '%s' is not an integer", c->path, key);
    json_int_t x = json_integer_value(v);
    if (x < lo || x > (1 << 30))
        return base_fail(c->err, "%s: field '%s' = %lld is out of range [%d, 2^30]", c->path, key,
                         (long long)x, lo);
    *out = (int)x;
    return 0;
}

static int get_num(cfg *c, json_t *obj, const char *key, double *out) {
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v))
        return base_fail(c->err, "%s: field '%s' is not a number", c->path, key);
    *out = json_number_value(v);
    return 0;
}

static int get_bool(cfg *c, const char *key, int *out) {
    json_t *v = json_object_get(c->root, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v))
        return base_fail(c->err, "%s: field '%s' is not true or false", c->path, key);
    *out = json_is_true(v);
    return 0;
}

/* A field that changes the math in a way titan does not implement must hold `ok` (a JSON
 * value compared for equality) when present and not null. */
static int refuse_unless(cfg *c, const char *key, json_t *ok, const char *why) {
    json_t *v = json_object_get(c->root, key);
    int bad = v && !json_is_null(v) && !json_equal(v, ok);
    json_decref(ok);
    if (!bad) return 0;
    char *txt = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    base_fail(c->err, "%s: field '%s' = %.200s is not supported (%s)", c->path, key,
              txt ? txt : "?", why);
    free(txt);
    return -1;
}

/* RoPE as transformers 5 reads it (PreTrainedConfig.convert_rope_params_to_dict and
 * standardize_rope_params): the parameters are `rope_scaling` when it is a non-empty object
 * (transformers 4's name; it replaces rope_parameters whole), else `rope_parameters`; its
 * rope_type (or legacy `type`) must be "default", the only RoPE titan has; its rope_theta wins
 * over the top-level rope_theta, which wins over the default. Per-layer-type parameters and a
 * partial rotary factor change the math and are refused. */
static int get_rope(cfg *c, double *theta) {
    json_t *rs = json_object_get(c->root, "rope_scaling"),
           *rp = json_object_get(c->root, "rope_parameters");
    const char *name = "rope_scaling";
    json_t *d = rs;
    if (!rs || json_is_null(rs) || (json_is_object(rs) && !json_object_size(rs))) {
        d = rp && !json_is_null(rp) ? rp : NULL;
        name = "rope_parameters";
    }
    if (d && !json_is_object(d))
        return base_fail(c->err, "%s: field '%s' is not an object", c->path, name);
    if (get_num(c, c->root, "rope_theta", theta)) return -1;
    if (d) {
        const char *k;
        json_t *v;
        json_object_foreach(d, k, v) {
            if (json_is_object(v))
                return base_fail(c->err,
                                 "%s: field '%s.%s' is not supported (RoPE parameters per layer "
                                 "type; titan has one RoPE for every layer)",
                                 c->path, name, k);
        }
        json_t *type = json_object_get(d, "rope_type");
        if (!type) type = json_object_get(d, "type");
        if (type && !(json_is_string(type) && !strcmp(json_string_value(type), "default"))) {
            char *txt = json_dumps(type, JSON_COMPACT | JSON_ENCODE_ANY);
            base_fail(c->err,
                      "%s: field '%s.%s' = %.80s is not supported (titan implements the "
                      "default RoPE only; YaRN, linear, dynamic and other scalings are not)",
                      c->path, name, json_object_get(d, "rope_type") ? "rope_type" : "type",
                      txt ? txt : "?");
            free(txt);
            return -1;
        }
        if (!type) { /* transformers cannot build such a model: no scaling function named */
            const char *k;
            json_t *v;
            json_object_foreach(d, k, v) {
                if (strcmp(k, "rope_theta"))
                    return base_fail(c->err,
                                     "%s: field '%s' has '%s' but no 'rope_type' (or 'type'): "
                                     "which RoPE scaling is meant is not said (titan implements "
                                     "the default RoPE only)",
                                     c->path, name, k);
            }
        }
        json_t *th = json_object_get(d, "rope_theta");
        if (th && json_is_null(th))
            return base_fail(c->err, "%s: field '%s.rope_theta' is null", c->path, name);
        if (get_num(c, d, "rope_theta", theta)) return -1;
    }
    double prf = 1.0;
    if (get_num(c, c->root, "partial_rotary_factor", &prf) ||
        (d && get_num(c, d, "partial_rotary_factor", &prf)))
        return -1;
    if (prf != 1.0)
        return base_fail(c->err,
                         "%s: partial_rotary_factor %g is not supported (titan rotates every "
                         "dimension of a head)",
                         c->path, prf);
    if (!(*theta > 0)) return base_fail(c->err, "%s: rope_theta must be positive", c->path);
    return 0;
}

/* A number field that must be 0 when present (0 and 0.0 alike). */
static int refuse_nonzero(cfg *c, const char *key, const char *why) {
    double x = 0;
    if (get_num(c, c->root, key, &x)) return -1;
    if (x != 0)
        return base_fail(c->err, "%s: field '%s' = %g is not supported (%s)", c->path, key, x, why);
    return 0;
}

static int parse(cfg *c, model_args *a) {
    const char *path = c->path;
    if (!json_is_object(c->root)) return base_fail(c->err, "%s: not a JSON object", path);
    memset(a, 0, sizeof *a);

    /* architecture: architectures[0] or, without it, model_type */
    int moe = -1;
    json_t *arch = json_object_get(c->root, "architectures");
    json_t *mt = json_object_get(c->root, "model_type");
    if (arch && !json_is_null(arch)) {
        if (!json_is_array(arch) || json_array_size(arch) != 1 ||
            !json_is_string(json_array_get(arch, 0)))
            return base_fail(c->err, "%s: field 'architectures' is not a list of one name", path);
        const char *name = json_string_value(json_array_get(arch, 0));
        if (!strcmp(name, "Qwen3ForCausalLM"))
            moe = 0;
        else if (!strcmp(name, "Qwen3MoeForCausalLM"))
            moe = 1;
        else
            return base_fail(c->err,
                             "%s: architecture '%s' is not supported (titan builds "
                             "Qwen3ForCausalLM and Qwen3MoeForCausalLM)",
                             path, name);
    }
    if (mt && !json_is_null(mt)) {
        const char *t = json_is_string(mt) ? json_string_value(mt) : "";
        int m = !strcmp(t, "qwen3") ? 0 : !strcmp(t, "qwen3_moe") ? 1 : -1;
        if (m < 0)
            return base_fail(c->err,
                             "%s: model_type '%s' is not supported (titan builds qwen3 and "
                             "qwen3_moe)",
                             path, t);
        if (moe >= 0 && m != moe)
            return base_fail(c->err, "%s: model_type '%s' contradicts 'architectures'", path, t);
        moe = m;
    }
    if (moe < 0)
        return base_fail(c->err, "%s: neither 'architectures' nor 'model_type' says the model",
                         path);
    snprintf(a->flavor, sizeof a->flavor, "%s",
             moe ? "hf:Qwen3MoeForCausalLM" : "hf:Qwen3ForCausalLM");

    a->head_dim = 0; /* absent: Qwen3Config's 128, or hidden_size / heads for MoE (below) */
    a->max_seq_len = HF_DEFAULT_MAX_POSITIONS; /* absent: Qwen3(Moe)Config's (not 0: 4096) */
    a->rope_theta = HF_DEFAULT_ROPE_THETA;
    a->norm_eps = HF_DEFAULT_RMS_EPS;
    a->n_kv_heads = 0; /* null: equal to num_attention_heads, as in HF */
    if (get_int(c, "hidden_size", 1, 1, &a->dim) ||
        get_int(c, "num_hidden_layers", 1, 1, &a->n_layers) ||
        get_int(c, "num_attention_heads", 1, 1, &a->n_heads) ||
        get_int(c, "intermediate_size", 1, 1, &a->ffn_dim) ||
        get_int(c, "vocab_size", 1, 1, &a->vocab_size) ||
        get_int(c, "head_dim", 0, 1, &a->head_dim) ||
        get_int(c, "max_position_embeddings", 0, 0, &a->max_seq_len) ||
        get_bool(c, "tie_word_embeddings", &a->tie_embeddings) || get_rope(c, &a->rope_theta) ||
        get_num(c, c->root, "rms_norm_eps", &a->norm_eps))
        return -1;
    /* Qwen3Config has head_dim = 128; Qwen3MoeConfig has no such field, and its attention
     * takes getattr(config, "head_dim", hidden_size // num_attention_heads) */
    if (a->head_dim == 0) a->head_dim = moe ? a->dim / a->n_heads : HF_DEFAULT_HEAD_DIM;
    if (a->head_dim < 1)
        return base_fail(c->err, "%s: no head_dim, and hidden_size / num_attention_heads is 0",
                         path);
    if (!json_object_get(c->root, "num_key_value_heads"))
        return base_fail(c->err, "%s: missing field 'num_key_value_heads'", path);
    if (get_int(c, "num_key_value_heads", 0, 1, &a->n_kv_heads)) return -1;
    if (a->n_kv_heads == 0) a->n_kv_heads = a->n_heads;
    if (!(a->norm_eps > 0)) return base_fail(c->err, "%s: rms_norm_eps must be positive", path);
    /* HF's _init_weights draws N(0, initializer_range); titan's init is model.init_weights */
    double init_range = 0.02;
    if (get_num(c, c->root, "initializer_range", &init_range)) return -1;
    if (init_range != 0.02)
        base_log(BASE_LOG_WARN,
                 "%s: initializer_range = %g is not read: a model built from this file without "
                 "loading weights starts from model.init_weights (\"normal\": N(0, 0.02)), and "
                 "an export writes 0.02",
                 path, init_range);

    /* settings that would change the math */
    if (refuse_unless(c, "hidden_act", json_string("silu"), "titan's FFN is SwiGLU (silu)") ||
        refuse_unless(c, "attention_bias", json_false(), "Qwen3 projections have no bias") ||
        refuse_unless(c, "use_sliding_window", json_false(),
                      "titan's attention is full causal attention") ||
        refuse_nonzero(c, "attention_dropout", "titan trains without dropout"))
        return -1;
    /* a quantized checkpoint (Qwen3-*-FP8: F8_E4M3 weights with block scales, GPTQ, AWQ,
     * bitsandbytes) holds tensors whose values alone are not the weights */
    json_t *qc = json_object_get(c->root, "quantization_config");
    if (qc && !json_is_null(qc)) {
        json_t *qm = json_is_object(qc) ? json_object_get(qc, "quant_method") : NULL;
        return base_fail(c->err,
                         "%s: field 'quantization_config' (quant_method %s) is not supported "
                         "(a quantized checkpoint: titan loads BF16/F16/F32 weights and applies "
                         "no quantization scales; use the unquantized model)",
                         path, json_is_string(qm) ? json_string_value(qm) : "not given");
    }
    json_t *lt = json_object_get(c->root, "layer_types");
    if (lt && !json_is_null(lt)) {
        if (!json_is_array(lt))
            return base_fail(c->err, "%s: field 'layer_types' is not a list", path);
        for (size_t i = 0; i < json_array_size(lt); i++) {
            json_t *t = json_array_get(lt, i);
            if (!json_is_string(t) || strcmp(json_string_value(t), "full_attention"))
                return base_fail(c->err,
                                 "%s: layer_types[%zu] is not 'full_attention' (sliding-window "
                                 "layers are not supported)",
                                 path, i);
        }
    }

    if (moe) {
        a->router_aux_loss_coef = HF_DEFAULT_AUX_COEF;
        /* transformers 5 stores Qwen3MoeConfig's expert count as num_local_experts
         * (num_experts is its alias) and takes that one when a file has both; transformers
         * 4 took num_experts: two different counts are refused rather than one picked */
        json_t *jn = json_object_get(c->root, "num_experts"),
               *jl = json_object_get(c->root, "num_local_experts");
        if (jn && jl && !json_is_null(jn) && !json_is_null(jl) && !json_equal(jn, jl))
            return base_fail(c->err,
                             "%s: fields 'num_experts' and 'num_local_experts' differ "
                             "(transformers 5 reads num_local_experts, transformers 4 "
                             "num_experts)",
                             path);
        const char *ne = jn && !json_is_null(jn) ? "num_experts" : "num_local_experts";
        if (get_int(c, ne, 1, 1, &a->n_experts) ||
            get_int(c, "num_experts_per_tok", 1, 1, &a->top_k) ||
            get_int(c, "moe_intermediate_size", 1, 1, &a->moe_ffn_dim) ||
            get_bool(c, "norm_topk_prob", &a->norm_topk_prob) ||
            get_num(c, c->root, "router_aux_loss_coef", &a->router_aux_loss_coef))
            return -1;
        /* HF's training adds coef x the load-balancing loss where this is true; titan's
         * training has its own switch */
        int orl = 0;
        if (get_bool(c, "output_router_logits", &orl)) return -1;
        if (orl)
            base_log(BASE_LOG_WARN,
                     "%s: output_router_logits = true: Hugging Face's training adds "
                     "router_aux_loss_coef (%g) x the load-balancing loss to the loss; titan's "
                     "does only with [model] moe_load_balance = \"aux_loss\"",
                     path, a->router_aux_loss_coef);
        if (refuse_unless(c, "decoder_sparse_step", json_integer(1),
                          "titan's MoE models have an MoE in every block") ||
            refuse_unless(c, "mlp_only_layers", json_array(),
                          "titan's MoE models have an MoE in every block"))
            return -1;
    }
    base_err verr;
    if (model_args_validate(a, &verr) != 0) return base_fail(c->err, "%s: %s", path, verr.msg);
    return 0;
}

int ckpt_hf_config_read(const char *path, model_args *a, base_err *err) {
    json_error_t jerr;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return base_fail(err, "%s: invalid JSON: %s (line %d column %d)", path, jerr.text,
                         jerr.line, jerr.column);
    cfg c = {path, root, err};
    int rc = parse(&c, a);
    json_decref(root);
    return rc;
}

/* The fewest significant digits (<= 17) that print every real among v's values exactly, so
 * 1e-06 is written as 1e-06 and not 9.9999999999999995e-07. */
static int real_precision(json_t *v) {
    int best = 1;
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x) {
        if (!json_is_real(x)) continue;
        const double d = json_real_value(x);
        int p = 1;
        char buf[64];
        for (; p < 17; p++) {
            snprintf(buf, sizeof buf, "%.*g", p, d);
            if (strtod(buf, NULL) == d) break;
        }
        if (p > best) best = p;
    }
    return best;
}

int ckpt_write_json(const char *path, json_t *v, base_err *err) {
    char *txt = json_dumps(v, JSON_INDENT(2) | JSON_SORT_KEYS |
                                  JSON_REAL_PRECISION(json_is_object(v) ? real_precision(v) : 17));
    if (!txt) return base_fail(err, "%s: cannot serialise JSON", path);
    size_t n = strlen(txt);
    char *buf = malloc(n + 2);
    if (!buf) {
        free(txt);
        return base_fail(err, "%s: out of memory", path);
    }
    memcpy(buf, txt, n);
    buf[n] = '\n';
    free(txt);
    int rc = ckpt_write_bytes(path, buf, n + 1, err);
    free(buf);
    return rc;
}

static const char *torch_dtype_name(ckpt_dtype d) {
    return d == CKPT_BF16 ? "bfloat16" : d == CKPT_F16 ? "float16" : "float32";
}

const char *const ckpt_token_id_keys[3] = {"bos_token_id", "eos_token_id", "pad_token_id"};

int ckpt_hf_config_write(const model_args *a, ckpt_dtype dtype, const int32_t *token_ids,
                         const char *path, base_err *err) {
    const int moe = a->n_experts > 0;
    json_t *c = json_object();
    json_object_set_new(c, "architectures",
                        json_pack("[s]", moe ? "Qwen3MoeForCausalLM" : "Qwen3ForCausalLM"));
    json_object_set_new(c, "model_type", json_string(moe ? "qwen3_moe" : "qwen3"));
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
    json_object_set_new(c, "torch_dtype", json_string(torch_dtype_name(dtype)));
    for (int i = 0; token_ids && i < 3; i++)
        if (token_ids[i] >= 0)
            json_object_set_new(c, ckpt_token_id_keys[i], json_integer(token_ids[i]));
    if (moe) {
        json_object_set_new(c, "num_experts", json_integer(a->n_experts));
        json_object_set_new(c, "num_experts_per_tok", json_integer(a->top_k));
        json_object_set_new(c, "moe_intermediate_size", json_integer(a->moe_ffn_dim));
        json_object_set_new(c, "norm_topk_prob", json_boolean(a->norm_topk_prob));
        json_object_set_new(c, "router_aux_loss_coef", json_real(a->router_aux_loss_coef));
        json_object_set_new(c, "decoder_sparse_step", json_integer(1));
        json_object_set_new(c, "mlp_only_layers", json_array());
    }
    int rc = ckpt_write_json(path, c, err);
    json_decref(c);
    return rc;
}
