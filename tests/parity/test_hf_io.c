/* Helper for tests/reference/hf_interop.py: titan's side of the Hugging Face round trips.
 *
 *   test_hf_io export DIR DTYPE MAX_SHARD TIE   a small Qwen3 (dim 64, 2 layers, GQA 4/2,
 *       head_dim 16, ffn 96, vocab 128; tied or not), seeded init, exported with
 *       ckpt_export_hf (DTYPE float32|bfloat16|float16, MAX_SHARD as --max-shard-size)
 *   test_hf_io logits DIR TOKENS OUT            loads the HF folder DIR with ckpt_load_hf,
 *       runs tokens (TOKENS: safetensors with "tokens" I64 [B, T]) and writes the fp32
 *       logits [B, T, V] to OUT as "logits" */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/checkpoint.h"

static int die(const char *what, const base_err *e) {
    fprintf(stderr, "test_hf_io: %s: %s\n", what, e->msg);
    return 1;
}

static int do_export(const char *dir, const char *dtype, const char *shard, const char *tie) {
    base_err e;
    model_args a;
    const char *kv[][2] = {{"dim", "64"},         {"n_layers", "2"},      {"n_heads", "4"},
                           {"n_kv_heads", "2"},   {"head_dim", "16"},     {"ffn_dim", "96"},
                           {"vocab_size", "128"}, {"tie_embeddings", tie}};
    if (model_flavor("debugmodel", &a, &e)) return die("flavor", &e);
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
        if (model_args_set(&a, kv[i][0], kv[i][1], 1, &e)) return die("args", &e);
    model m;
    model_build_opts o = {.batch = 1, .seq_len = 1, .ac = MODEL_AC_NONE};
    ckpt_export_opts x = {.dtype = CKPT_F32};
    if (model_build(&m, &a, &o, &e)) return die("build", &e);
    model_init_weights(&m, 1234);
    /* non-trivial norm weights, so a swapped norm would show in the logits */
    for (int i = 0; i < m.n_params; i++)
        if (m.params[i].is_norm)
            for (size_t k = 0; k < m.params[i].numel; k++)
                m.w[m.params[i].offset + k] = 1.0f + 0.1f * base_rng_normal(7, (uint64_t)i, k);
    if (ckpt_export_dtype_parse(dtype, &x.dtype) || ckpt_size_parse(shard, &x.max_shard_bytes)) {
        fprintf(stderr, "test_hf_io: bad dtype or shard size\n");
        return 1;
    }
    int rc = ckpt_export_hf(&m, dir, &x, &e);
    model_free(&m);
    return rc ? die("export", &e) : 0;
}

static int do_logits(const char *dir, const char *tokens, const char *out) {
    base_err e;
    ckpt_file tf;
    if (ckpt_open(&tf, tokens, &e)) return die("tokens", &e);
    const ckpt_tensor *t = ckpt_find(&tf, "tokens");
    if (!t || t->ndim != 2) {
        fprintf(stderr, "test_hf_io: %s: no 2-D 'tokens'\n", tokens);
        return 1;
    }
    const int B = (int)t->shape[0], T = (int)t->shape[1];
    int32_t *ids = ckpt_get_i32(&tf, "tokens", NULL, &e);
    ckpt_close(&tf);
    if (!ids) return die("tokens", &e);
    model m;
    model_build_opts o = {.batch = B, .seq_len = T, .ac = MODEL_AC_NONE};
    if (ckpt_load_hf(&m, dir, &o, &e)) {
        model_free(&m);
        return die("load", &e);
    }
    const int V = m.args.vocab_size;
    float *logits = base_alloc((size_t)B * T * V * sizeof(float));
    model_logits(&m, ids, logits);
    ckpt_wtensor w = {
        .name = "logits", .dtype = CKPT_F32, .ndim = 3, .shape = {B, T, V}, .data = logits};
    int rc = ckpt_write(out, &w, 1, NULL, 0, &e);
    base_free(logits);
    base_free(ids);
    model_free(&m);
    return rc ? die("write", &e) : 0;
}

int main(int argc, char **argv) {
    if (argc == 6 && !strcmp(argv[1], "export"))
        return do_export(argv[2], argv[3], argv[4], argv[5]);
    if (argc == 5 && !strcmp(argv[1], "logits")) return do_logits(argv[2], argv[3], argv[4]);
    fprintf(stderr, "usage: test_hf_io export DIR DTYPE MAX_SHARD TIE | logits DIR TOKENS OUT\n");
    return 2;
}
