/* Unit tests of the Hugging Face adapter (src/checkpoint/hf_*.c, convert.c): config.json
 * parsing (every official config; malformed and unsupported ones refused with the file and
 * field named), MoE arguments refused by model_build, HF folders with hostile indexes, the
 * strict key check across shards, export layout (shards, tied lm_head, stale files), and
 * the training-checkpoint model folder. Agreement with transformers itself is checked in
 * tests/reference/hf_interop.py. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "checkpoint/checkpoint.h"

static char g_dir[512];

static void put(const char *path, const char *text) {
    FILE *fp = fopen(path, "w");
    if (!fp || fputs(text, fp) < 0) {
        perror(path);
        exit(2);
    }
    fclose(fp);
}

/* ---- config.json -------------------------------------------------------------------- */

#define BASE_CFG                                                                                   \
    "\"architectures\":[\"Qwen3ForCausalLM\"],\"hidden_size\":64,\"num_hidden_layers\":2,"         \
    "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":16,"                         \
    "\"intermediate_size\":96,\"vocab_size\":128"

/* BASE_CFG with one field replaced (key "k", value v as JSON text). */
static const char *with(const char *key, const char *value) {
    static char buf[1024];
    static const char *const base[][2] = {{"architectures", "[\"Qwen3ForCausalLM\"]"},
                                          {"hidden_size", "64"},
                                          {"num_hidden_layers", "2"},
                                          {"num_attention_heads", "4"},
                                          {"num_key_value_heads", "2"},
                                          {"head_dim", "16"},
                                          {"intermediate_size", "96"},
                                          {"vocab_size", "128"}};
    size_t n = (size_t)snprintf(buf, sizeof buf, "{");
    for (size_t i = 0; i < sizeof base / sizeof *base; i++)
        n += (size_t)snprintf(buf + n, sizeof buf - n, "%s\"%s\":%s", i ? "," : "", base[i][0],
                              strcmp(base[i][0], key) ? base[i][1] : value);
    snprintf(buf + n, sizeof buf - n, "}");
    return buf;
}

static void bad_config(const char *what, const char *json, const char *want) {
    char path[600];
    snprintf(path, sizeof path, "%s/config.json", g_dir);
    put(path, json);
    model_args a;
    base_err e;
    e.msg[0] = 0;
    int rc = ckpt_hf_config_read(path, &a, &e);
    CHECK(rc != 0, "[%s] accepted", what);
    CHECK(rc == 0 || (strstr(e.msg, path) && strstr(e.msg, want)), "[%s] message lacks '%s': %s",
          what, want, e.msg);
    if (rc) printf("ok   config %-26s -> %s\n", what, e.msg + strlen(g_dir) + 1);
}

static void test_configs(void) {
    char path[1024];
    base_err e;
    model_args a;
    /* every official config loads; HF's counts are compared in hf_interop.py */
    const char *names[] = {"Qwen3-0.6B",     "Qwen3-1.7B", "Qwen3-4B",  "Qwen3-4B-Instruct-2507",
                           "Qwen3-8B",       "Qwen3-14B",  "Qwen3-32B", "Qwen3-30B-A3B",
                           "Qwen3-235B-A22B"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        snprintf(path, sizeof path, "%s/data/qwen3_configs/%s.json", TITAN_SHARED_DIR, names[i]);
        CHECK(ckpt_hf_config_read(path, &a, &e) == 0, "%s: %s", names[i], e.msg);
    }
    /* field values of two of them, from the files (README table of qwen3_configs) */
    snprintf(path, sizeof path, "%s/data/qwen3_configs/Qwen3-4B-Instruct-2507.json",
             TITAN_SHARED_DIR);
    CHECK(ckpt_hf_config_read(path, &a, &e) == 0 && a.dim == 2560 && a.n_layers == 36 &&
              a.n_heads == 32 && a.n_kv_heads == 8 && a.ffn_dim == 9728 && a.rope_theta == 5e6 &&
              a.tie_embeddings == 1 && a.max_seq_len == 262144 && a.n_experts == 0,
          "4B-2507 fields");
    snprintf(path, sizeof path, "%s/data/qwen3_configs/Qwen3-30B-A3B.json", TITAN_SHARED_DIR);
    CHECK(ckpt_hf_config_read(path, &a, &e) == 0 && a.n_experts == 128 && a.top_k == 8 &&
              a.moe_ffn_dim == 768 && a.norm_topk_prob == 1 && a.router_aux_loss_coef == 0.001 &&
              a.n_kv_heads == 4 && a.tie_embeddings == 0,
          "30B-A3B fields");
    /* MoE: the official config.json and the 30B-A3B flavor are the same model */
    model m;
    model_args fl;
    CHECK(model_flavor("30B-A3B", &fl, &e) == 0 && fl.dim == a.dim && fl.n_layers == a.n_layers &&
              fl.n_heads == a.n_heads && fl.n_kv_heads == a.n_kv_heads &&
              fl.head_dim == a.head_dim && fl.ffn_dim == a.ffn_dim &&
              fl.vocab_size == a.vocab_size && fl.rope_theta == a.rope_theta &&
              fl.norm_eps == a.norm_eps && fl.tie_embeddings == a.tie_embeddings &&
              fl.n_experts == a.n_experts && fl.top_k == a.top_k &&
              fl.moe_ffn_dim == a.moe_ffn_dim && fl.norm_topk_prob == a.norm_topk_prob &&
              fl.router_aux_loss_coef == a.router_aux_loss_coef,
          "30B-A3B flavor == Qwen3-30B-A3B config.json");
    {
        model_args b2;
        char p2[1024];
        snprintf(p2, sizeof p2, "%s/data/qwen3_configs/Qwen3-235B-A22B.json", TITAN_SHARED_DIR);
        CHECK(ckpt_hf_config_read(p2, &b2, &e) == 0 && model_flavor("235B-A22B", &fl, &e) == 0 &&
                  fl.dim == b2.dim && fl.n_layers == b2.n_layers && fl.n_heads == b2.n_heads &&
                  fl.n_kv_heads == b2.n_kv_heads && fl.ffn_dim == b2.ffn_dim &&
                  fl.rope_theta == b2.rope_theta && fl.n_experts == b2.n_experts &&
                  fl.top_k == b2.top_k && fl.moe_ffn_dim == b2.moe_ffn_dim &&
                  fl.norm_topk_prob == b2.norm_topk_prob && fl.tie_embeddings == b2.tie_embeddings,
              "235B-A22B flavor == Qwen3-235B-A22B config.json (theta %g)", b2.rope_theta);
    }
    CHECK(model_describe(&m, &a, &e) == 0 && m.n_floats == 30532122624ULL, "MoE describe");
    model_free(&m);

    /* a transformers 5 style config (rope_parameters, layer_types) and defaults */
    snprintf(path, sizeof path, "%s/config.json", g_dir);
    put(path, "{" BASE_CFG ",\"rope_parameters\":{\"rope_theta\":5000.0,\"rope_type\":\"default\"},"
              "\"layer_types\":[\"full_attention\",\"full_attention\"],\"rope_scaling\":null}");
    CHECK(ckpt_hf_config_read(path, &a, &e) == 0 && a.rope_theta == 5000.0 && a.norm_eps == 1e-6 &&
              a.tie_embeddings == 0,
          "rope_parameters: %s", e.msg);
    put(path, "{\"model_type\":\"qwen3\",\"hidden_size\":64,\"num_hidden_layers\":1,"
              "\"num_attention_heads\":4,\"num_key_value_heads\":null,\"intermediate_size\":8,"
              "\"vocab_size\":8}");
    CHECK(ckpt_hf_config_read(path, &a, &e) == 0 && a.n_kv_heads == 4 && a.head_dim == 128 &&
              a.rope_theta == 10000.0,
          "HF defaults: %s", e.msg);

    bad_config("not JSON", "{\"hidden_size\":", "invalid JSON");
    bad_config("not an object", "[1]", "not a JSON object");
    bad_config("other architecture", "{\"architectures\":[\"LlamaForCausalLM\"]}",
               "LlamaForCausalLM");
    bad_config("other model_type", "{\"model_type\":\"qwen2\"}", "qwen2");
    bad_config("no architecture", "{\"hidden_size\":64}", "model_type");
    bad_config("contradiction", "{" BASE_CFG ",\"model_type\":\"qwen3_moe\"}", "contradicts");
    bad_config("missing field", "{\"architectures\":[\"Qwen3ForCausalLM\"],\"hidden_size\":64}",
               "'num_hidden_layers'");
    bad_config("missing kv heads",
               "{\"architectures\":[\"Qwen3ForCausalLM\"],\"hidden_size\":64,"
               "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"intermediate_size\":96,"
               "\"vocab_size\":128}",
               "'num_key_value_heads'");
    bad_config("string size", with("head_dim", "\"16\""), "'head_dim'");
    bad_config("float size", with("vocab_size", "128.5"), "'vocab_size'");
    bad_config("negative size", with("num_hidden_layers", "-2"), "'num_hidden_layers'");
    bad_config("huge size", with("hidden_size", "99999999999"), "'hidden_size'");
    bad_config("rope_scaling yarn",
               "{" BASE_CFG ",\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4.0}}",
               "rope_scaling");
    bad_config("rope_scaling without a type", "{" BASE_CFG ",\"rope_scaling\":{\"factor\":4.0}}",
               "no 'rope_type'");
    bad_config("rope_parameters without a type",
               "{" BASE_CFG ",\"rope_parameters\":{\"rope_theta\":5000.0,\"factor\":2}}",
               "'factor' but no 'rope_type'");
    bad_config("initializer_range not a number", "{" BASE_CFG ",\"initializer_range\":\"0.02\"}",
               "'initializer_range'");
    bad_config(
        "output_router_logits not a bool",
        "{\"architectures\":[\"Qwen3MoeForCausalLM\"],\"hidden_size\":64,"
        "\"num_hidden_layers\":1,\"num_attention_heads\":4,\"num_key_value_heads\":2,"
        "\"intermediate_size\":96,\"vocab_size\":128,\"num_experts\":4,\"num_experts_per_tok\":2,"
        "\"moe_intermediate_size\":32,\"output_router_logits\":1}",
        "output_router_logits");
    bad_config("rope_type linear",
               "{" BASE_CFG ",\"rope_parameters\":{\"rope_type\":\"linear\",\"factor\":2}}",
               "rope_type");
    bad_config("sliding window", "{" BASE_CFG ",\"use_sliding_window\":true}",
               "use_sliding_window");
    bad_config("sliding layer",
               "{" BASE_CFG ",\"layer_types\":[\"full_attention\",\"sliding_attention\"]}",
               "layer_types[1]");
    bad_config("gelu", "{" BASE_CFG ",\"hidden_act\":\"gelu\"}", "hidden_act");
    bad_config("attention bias", "{" BASE_CFG ",\"attention_bias\":true}", "attention_bias");
    bad_config("tie not bool", "{" BASE_CFG ",\"tie_word_embeddings\":1}", "tie_word_embeddings");
    bad_config("heads not multiple", with("num_key_value_heads", "3"), "n_kv_heads");
    bad_config("zero eps", "{" BASE_CFG ",\"rms_norm_eps\":0}", "rms_norm_eps");
#define MOE_CFG                                                                                    \
    "\"architectures\":[\"Qwen3MoeForCausalLM\"],\"hidden_size\":64,\"num_hidden_layers\":2,"      \
    "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"intermediate_size\":96,"                \
    "\"vocab_size\":128,\"num_experts\":8,\"num_experts_per_tok\":2,\"moe_intermediate_size\":32"
    put(path, "{" MOE_CFG "}");
    CHECK(ckpt_hf_config_read(path, &a, &e) == 0 && a.n_experts == 8 && a.norm_topk_prob == 0 &&
              a.router_aux_loss_coef == 0.001,
          "MoE defaults: %s", e.msg);
    bad_config("MoE missing experts",
               "{\"architectures\":[\"Qwen3MoeForCausalLM\"],\"hidden_size\":64,"
               "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_key_value_heads\":2,"
               "\"intermediate_size\":96,\"vocab_size\":128}",
               "num_local_experts");
    bad_config("MoE top_k > experts",
               "{\"architectures\":[\"Qwen3MoeForCausalLM\"],\"hidden_size\":64,"
               "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_key_value_heads\":2,"
               "\"intermediate_size\":96,\"vocab_size\":128,\"num_experts\":8,"
               "\"num_experts_per_tok\":9,\"moe_intermediate_size\":32}",
               "top_k");
    bad_config("MoE sparse step", "{" MOE_CFG ",\"decoder_sparse_step\":2}", "decoder_sparse_step");
    bad_config("MoE dense layers", "{" MOE_CFG ",\"mlp_only_layers\":[0]}", "mlp_only_layers");
}

/* ---- HF folders -------------------------------------------------------------------- */

static int small_model(model *m, int tie) {
    model_args a;
    base_err e;
    const char *kv[][2] = {{"dim", "16"},        {"n_layers", "2"},
                           {"n_heads", "2"},     {"n_kv_heads", "1"},
                           {"head_dim", "8"},    {"ffn_dim", "24"},
                           {"vocab_size", "32"}, {"tie_embeddings", tie ? "1" : "0"}};
    int rc = model_flavor("debugmodel", &a, &e);
    for (size_t i = 0; rc == 0 && i < sizeof kv / sizeof *kv; i++)
        rc = model_args_set(&a, kv[i][0], kv[i][1], 1, &e);
    model_build_opts o = {.batch = 1, .seq_len = 4};
    if (rc == 0) rc = model_build(m, &a, &o, &e);
    CHECK(rc == 0, "small model: %s", e.msg);
    if (rc == 0) model_init_weights(m, 3);
    return rc;
}

static void bad_dir(const char *what, const char *dir, const char *want) {
    model m;
    base_err e;
    model_build_opts o = {.batch = 1, .seq_len = 4};
    e.msg[0] = 0;
    int rc = ckpt_load_hf(&m, dir, &o, &e);
    model_free(&m);
    CHECK(rc != 0, "[%s] accepted", what);
    CHECK(rc == 0 || strstr(e.msg, want), "[%s] message lacks '%s': %s", what, want, e.msg);
    if (rc) printf("ok   folder %-26s -> %.220s\n", what, e.msg);
}

static int count_files(const char *dir, const char *prefix) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "ls %s | grep -c '^%s' 2>/dev/null", dir, prefix);
    FILE *p = popen(cmd, "r");
    int n = 0;
    if (p) {
        if (fscanf(p, "%d", &n) != 1) n = 0;
        pclose(p);
    }
    return n;
}

static void test_folders(void) {
    model m, t, back;
    base_err e;
    if (small_model(&m, 0) || small_model(&t, 1)) return;
    char dir[700], path[800], cmd[2048];
    snprintf(dir, sizeof dir, "%s/hf", g_dir);

    /* sharded export: 1 KiB shards; every tensor of the tied model is listed once */
    ckpt_export_opts x = {.dtype = CKPT_F32, .max_shard_bytes = 1024};
    CHECK(ckpt_export_hf(&t, dir, &x, &e) == 0, "export: %s", e.msg);
    const int n_shards = count_files(dir, "model-");
    CHECK(n_shards > 4, "%d shards", n_shards);
    ckpt_set s;
    CHECK(ckpt_set_open_dir(&s, dir, &e) == 0 && s.n_files == n_shards, "open: %s", e.msg);
    CHECK(!ckpt_set_find(&s, "lm_head.weight", NULL), "tied export wrote lm_head");
    for (int i = 0; i < s.n_files; i++) CHECK(s.files[i].n_tensors > 0, "empty shard %d", i);
    ckpt_set_close(&s);
    model_build_opts o = {.batch = 1, .seq_len = 4};
    CHECK(ckpt_load_hf(&back, dir, &o, &e) == 0 &&
              memcmp(back.w, t.w, t.n_floats * sizeof(float)) == 0,
          "sharded round trip: %s", e.msg);
    model_free(&back);

    /* a single-file export into the same folder removes the stale shards and index */
    x.max_shard_bytes = 0;
    CHECK(ckpt_export_hf(&t, dir, &x, &e) == 0, "export: %s", e.msg);
    CHECK(count_files(dir, "model-") == 0 && count_files(dir, "model.safetensors.index") == 0,
          "stale shards left");

    /* hostile indexes: reshard, then break the index one way at a time */
    x.max_shard_bytes = 1024;
    CHECK(ckpt_export_hf(&m, dir, &x, &e) == 0, "export: %s", e.msg);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    char good[800];
    snprintf(good, sizeof good, "%s/index.good", g_dir);
    snprintf(cmd, sizeof cmd, "cp %s %s", path, good);
    CHECK(system(cmd) == 0, "cp");
    struct {
        const char *what, *sed, *want;
    } cases[] = {
        {"index: missing shard", "s/model-00002-of/model-00099-of/", "does not exist"},
        {"index: path escape", "0,/model-00002-of-[0-9]*.safetensors/s//..\\/x.safetensors/",
         "not a file name"},
        {"index: wrong shard",
         "/model.norm.weight/s/model-[0-9]*-of-\\([0-9]*\\)/model-00001-of-\\1/", "indexed to"},
        {"index: tensor not indexed", "/model.layers.0.self_attn.q_norm.weight/d",
         "not in the index"},
        {"index: not JSON", "s/weight_map/weight_map\\\"/", "invalid JSON"},
        {"index: no weight_map", "s/weight_map/weights/", "weight_map"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        snprintf(cmd, sizeof cmd, "sed -e '%s' %s > %s", cases[i].sed, good, path);
        CHECK(system(cmd) == 0, "sed");
        bad_dir(cases[i].what, dir, cases[i].want);
    }
    snprintf(cmd, sizeof cmd, "cp %s %s", good, path);
    CHECK(system(cmd) == 0, "cp");
    /* the strict check lists every problem of a set in one message */
    model deep;
    if (small_model(&deep, 0) == 0) {
        model_args a3 = deep.args;
        a3.n_layers = 3;
        model d3;
        CHECK(model_describe(&d3, &a3, &e) == 0, "describe");
        CHECK(ckpt_set_open_dir(&s, dir, &e) == 0, "open: %s", e.msg);
        CHECK(ckpt_check_model(&d3, &s, CKPT_NAMES_HF, &e) != 0 && strstr(e.msg, "11 problem(s)") &&
                  strstr(e.msg, "missing 'model.layers.2.input_layernorm.weight'"),
              "3-layer model from 2-layer shards: %s", e.msg);
        a3.n_layers = 2;
        a3.ffn_dim = 20;
        model_free(&d3);
        CHECK(model_describe(&d3, &a3, &e) == 0, "describe");
        CHECK(ckpt_check_model(&d3, &s, CKPT_NAMES_HF, &e) != 0 && strstr(e.msg, "6 problem(s)") &&
                  strstr(e.msg, "has shape [24,16], model expects [20,16]"),
              "shape mismatches across shards: %s", e.msg);
        printf("ok   strict check across %d shards -> %.200s...\n", s.n_files, e.msg);
        ckpt_set_close(&s);
        model_free(&d3);
        model_free(&deep);
    }
    char empty[700];
    snprintf(empty, sizeof empty, "%s/empty", g_dir);
    snprintf(cmd, sizeof cmd, "mkdir -p %s && cp %s/hf/config.json %s", empty, g_dir, empty);
    CHECK(system(cmd) == 0, "mkdir");
    bad_dir("no weights", empty, "no model.safetensors");

    /* training checkpoint model folder: titan names, args file, hostile args */
    snprintf(dir, sizeof dir, "%s/ckpt", g_dir);
    CHECK(ckpt_train_save_model(&m, dir, &e) == 0, "train save: %s", e.msg);
    CHECK(ckpt_train_load_model(&back, dir, &o, &e) == 0 &&
              memcmp(back.w, m.w, m.n_floats * sizeof(float)) == 0 &&
              back.args.rope_theta == m.args.rope_theta && back.args.norm_eps == m.args.norm_eps,
          "train round trip: %s", e.msg);
    model_free(&back);
    ckpt_set ts;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CHECK(ckpt_set_open_file(&ts, path, &e) == 0 &&
              ckpt_set_find(&ts, "layers.0.attention.wq.weight", NULL) &&
              ckpt_set_find(&ts, "output.weight", NULL) &&
              !ckpt_set_find(&ts, "lm_head.weight", NULL),
          "titan names");
    ckpt_set_close(&ts);
    snprintf(path, sizeof path, "%s/model_args.json", dir);
    put(path, "{\"dim\": 16, \"n_layers\": \"two\"}");
    CHECK(ckpt_train_load_model(&back, dir, &o, &e) != 0 && strstr(e.msg, path) &&
              strstr(e.msg, "n_layers"),
          "bad args: %s", e.msg);
    model_free(&back);
    put(path, "{\"dim\": 16, \"n_layers\": 2, \"bogus\": 1}");
    CHECK(ckpt_train_load_model(&back, dir, &o, &e) != 0 && strstr(e.msg, "bogus"),
          "unknown arg: %s", e.msg);
    model_free(&back);

    /* convert refuses what it cannot read; inspect names the problem */
    snprintf(cmd, sizeof cmd, "rm %s/config.json", empty);
    CHECK(system(cmd) == 0, "rm");
    CHECK(ckpt_convert(empty, dir, NULL, &e) != 0 && strstr(e.msg, "not a model"), "convert: %s",
          e.msg);
    CHECK(ckpt_inspect("/nonexistent/x", &e) != 0 && strstr(e.msg, "/nonexistent/x"), "inspect");

    /* sizes and dtypes of the command line */
    uint64_t b;
    ckpt_dtype d;
    CHECK(ckpt_size_parse("5GB", &b) == 0 && b == 5000000000ULL, "5GB");
    CHECK(ckpt_size_parse("20KB", &b) == 0 && b == 20000, "20KB");
    CHECK(ckpt_size_parse("1.5MiB", &b) == 0 && b == 1572864, "1.5MiB");
    CHECK(ckpt_size_parse("4096", &b) == 0 && b == 4096, "bytes");
    CHECK(ckpt_size_parse("5XB", &b) != 0 && ckpt_size_parse("-1GB", &b) != 0 &&
              ckpt_size_parse("", &b) != 0,
          "bad sizes");
    CHECK(ckpt_export_dtype_parse("bf16", &d) == 0 && d == CKPT_BF16 &&
              ckpt_export_dtype_parse("float16", &d) == 0 && d == CKPT_F16 &&
              ckpt_export_dtype_parse("int8", &d) != 0,
          "dtypes");
    x.dtype = CKPT_I32;
    CHECK(ckpt_export_hf(&m, dir, &x, &e) != 0 && strstr(e.msg, "export dtype"), "I32 export");
    model_free(&m);
    model_free(&t);
}

int main(void) {
    check_tmpdir(g_dir, sizeof g_dir, "test_hf");
    test_configs();
    test_folders();
    check_tmpdir_remove(g_dir);
    return check_report("test_hf");
}
