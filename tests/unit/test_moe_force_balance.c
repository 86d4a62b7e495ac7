/* debug.moe_force_load_balance (model_build_opts.moe_force_balance): torchtitan's
 * _debug_force_load_balance_routing sends assignment k of token n to expert (n*K + k) mod E,
 * arange(T*K).reshape(T, K) % E, so the rows per expert are exactly the counts of that
 * sequence; the gates stay the router probabilities of the chosen experts, so the router
 * still learns: its gradient matches a central difference of the loss (with the routing
 * fixed, the loss is smooth in the router weights). */
#include <math.h>
#include <string.h>

#include "check.h"
#include "model/model.h"

#define E 8
#define K 2

static int build(model *m, int B, int T, int force) {
    base_err e = {{0}};
    model_args a;
    model_flavor("debugmodel_moe", &a, &e);
    const char *kv[][2] = {{"dim", "32"},          {"n_layers", "2"},  {"n_heads", "2"},
                           {"n_kv_heads", "1"},    {"head_dim", "16"}, {"vocab_size", "64"},
                           {"n_experts", "8"},     {"top_k", "2"},     {"moe_ffn_dim", "16"},
                           {"norm_topk_prob", "1"}};
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
        model_args_set(&a, kv[i][0], kv[i][1], 1, &e);
    model_build_opts o = {.batch = B, .seq_len = T, .with_grads = 1, .moe_force_balance = force};
    if (model_build(m, &a, &o, &e)) {
        printf("build: %s\n", e.msg);
        return -1;
    }
    model_init_weights(m, 5);
    return 0;
}

static double step(model *m, float scale) {
    const int N = m->batch * m->seq_len;
    int32_t tok[64], tgt[64];
    for (int i = 0; i < N; i++) {
        tok[i] = (int32_t)(base_rng_u64(9, 1, (uint64_t)i) % 64);
        tgt[i] = (int32_t)(base_rng_u64(9, 2, (uint64_t)i) % 64);
    }
    model_zero_grad(m);
    return model_step_microbatch(m, tok, tgt, scale, NULL);
}

/* Rows per expert of every block after one training microbatch of B x T tokens. */
static void check_counts(int B, int T, int force) {
    model m;
    if (build(&m, B, T, force)) {
        CHECK(0, "build");
        model_free(&m);
        return;
    }
    step(&m, 1.0f);
    const int R = B * T * K;
    int unequal = 0;
    for (int l = 0; l < 2; l++)
        for (int e = 0; e < E; e++) {
            /* how many of 0..R-1 are e mod E */
            const int64_t want = R / E + (e < R % E), got = m.moe_counts[l * E + e];
            if (force)
                CHECK(got == want, "B %d T %d block %d expert %d: %lld rows, want %lld", B, T, l, e,
                      (long long)got, (long long)want);
            unequal |= got != want;
        }
    if (!force) CHECK(unequal, "top-k routing happened to be round-robin: the test shows nothing");
    model_free(&m);
}

/* d loss / d router weight vs a central difference, under forced routing. */
static void check_router_gradient(void) {
    model m;
    if (build(&m, 2, 8, 1)) {
        CHECK(0, "build");
        model_free(&m);
        return;
    }
    const model_param *p = model_find_param(&m, "layers.1.moe.router.gate.weight");
    CHECK(p != NULL, "router parameter");
    if (!p) {
        model_free(&m);
        return;
    }
    step(&m, 1.0f);
    size_t at = p->offset;
    for (size_t i = p->offset; i < p->offset + p->numel; i++)
        if (fabsf(m.g[i]) > fabsf(m.g[at])) at = i;
    const double g = m.g[at], h = 1e-2, w0 = m.w[at];
    m.w[at] = (float)(w0 + h);
    const double lp = step(&m, 0.0f);
    m.w[at] = (float)(w0 - h);
    const double lm = step(&m, 0.0f);
    m.w[at] = (float)w0;
    const double fd = (lp - lm) / (2 * h);
    printf("router gradient %.6g, central difference %.6g\n", g, fd);
    CHECK(fabs(g) > 1e-4 && fabs(fd - g) <= 2e-2 * fabs(g), "router gradient %.6g vs %.6g", g, fd);
    model_free(&m);
}

int main(void) {
    check_counts(2, 16, 1); /* 64 rows: 8 per expert */
    check_counts(2, 5, 1);  /* 20 rows: experts 0-3 get 3, 4-7 get 2 */
    check_counts(2, 16, 0); /* plain top-k: not balanced */
    check_router_gradient();
    return check_report("test_moe_force_balance");
}
