/* Gradient accumulation: one microbatch of 4 sequences and two microbatches of 2, each
 * scaled by 1 / (global valid tokens), give the same loss and gradients. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/model.h"

int main(void) {
    base_err e = {{0}};
    model_args a;
    model_flavor("debugmodel", &a, &e);
    const char *kv[][2] = {{"dim", "64"},        {"n_layers", "2"},  {"n_heads", "4"},
                           {"n_kv_heads", "1"},  {"head_dim", "16"}, {"ffn_dim", "80"},
                           {"vocab_size", "200"}};
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
        model_args_set(&a, kv[i][0], kv[i][1], 1, &e);
    const int T = 24;
    model big, small;
    model_build_opts ob = {.batch = 4, .seq_len = T, .with_grads = 1},
                     os = {.batch = 2, .seq_len = T, .ac = MODEL_AC_FULL, .with_grads = 1};
    if (model_build(&big, &a, &ob, &e) || model_build(&small, &a, &os, &e)) {
        printf("build: %s\n", e.msg);
        return 1;
    }
    model_init_weights(&big, 3);
    model_init_weights(&small, 3);
    int32_t tok[4 * 24], tgt[4 * 24];
    int64_t valid = 0;
    for (int i = 0; i < 4 * T; i++) {
        tok[i] = (int32_t)(base_rng_u64(5, 1, (uint64_t)i) % 200);
        tgt[i] = i % 7 == 3 ? OPS_IGNORE_INDEX : (int32_t)(base_rng_u64(5, 2, (uint64_t)i) % 200);
        valid += tgt[i] != OPS_IGNORE_INDEX;
    }
    const float scale = 1.0f / (float)valid;
    model_zero_grad(&big);
    model_zero_grad(&small);
    double l1 = model_step_microbatch(&big, tok, tgt, scale, NULL);
    double l2 = model_step_microbatch(&small, tok, tgt, scale, NULL) +
                model_step_microbatch(&small, tok + 2 * T, tgt + 2 * T, scale, NULL);
    double num = 0, den = 0;
    for (size_t i = 0; i < big.n_floats; i++) {
        double d = (double)big.g[i] - small.g[i];
        num += d * d;
        den += (double)big.g[i] * big.g[i];
    }
    double rel = sqrt(num / den), lrel = fabs(l1 - l2) / fabs(l1);
    printf("loss %.9f vs %.9f (rel %.2e); grads rel L2 %.2e\n", l1 / valid, l2 / valid, lrel, rel);
    int ok = lrel < 1e-6 && rel < 1e-5 && den > 0;
    printf(ok ? "all checks passed\n" : "FAILED\n");
    model_free(&big);
    model_free(&small);
    return !ok;
}
