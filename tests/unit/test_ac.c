/* Activation checkpointing: none, full and selective (torchtitan's layer SAC, every N-th
 * block) give bitwise the same loss and gradients, for a dense and an MoE model; selective
 * checkpoints the blocks torchtitan's _apply_layer_sac picks (a counter incremented before
 * `count % ac_freq == 0`, so blocks N-1, 2N-1, .. 0-based; 0 = every block), and its
 * activation buffers are what checkpointing those blocks saves, as titan plan reports. */
#include <string.h>

#include "check.h"
#include "model/model.h"
#include "train/train.h"

#define L 4
#define B 2
#define T 16

static void small_args(model_args *a, int moe) {
    base_err e = {{0}};
    model_flavor(moe ? "debugmodel_moe" : "debugmodel", a, &e);
    const char *kv[][2] = {{"dim", "64"},        {"n_layers", "4"},  {"n_heads", "4"},
                           {"n_kv_heads", "2"},  {"head_dim", "16"}, {"ffn_dim", "96"},
                           {"vocab_size", "256"}};
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
        model_args_set(a, kv[i][0], kv[i][1], 1, &e);
    if (moe) {
        model_args_set(a, "n_experts", "8", 1, &e);
        model_args_set(a, "top_k", "2", 1, &e);
        model_args_set(a, "moe_ffn_dim", "32", 1, &e);
    }
}

typedef struct {
    double loss;
    float *g;
    size_t n, act_bytes, plan_bytes;
} run_result;

/* One microbatch with gradients under (ac, every); the gradients are copied out. */
static int run(const model_args *a, model_ac_mode ac, int every, run_result *r) {
    base_err e = {{0}};
    model m;
    model_build_opts o = {.batch = B, .seq_len = T, .ac = ac, .ac_every = every, .with_grads = 1};
    if (a->n_experts > 0) o.balance = MODEL_BALANCE_AUX_LOSS; /* the aux gradient too */
    if (model_build(&m, a, &o, &e)) {
        printf("build: %s\n", e.msg);
        model_free(&m);
        return -1;
    }
    model_init_weights(&m, 11);
    int32_t tok[B * T], tgt[B * T];
    int64_t valid = 0;
    for (int i = 0; i < B * T; i++) {
        tok[i] = (int32_t)(base_rng_u64(7, 1, (uint64_t)i) % 256);
        tgt[i] = i % 5 == 2 ? OPS_IGNORE_INDEX : (int32_t)(base_rng_u64(7, 2, (uint64_t)i) % 256);
        valid += tgt[i] != OPS_IGNORE_INDEX;
    }
    model_zero_grad(&m);
    r->loss = model_step_microbatch(&m, tok, tgt, 1.0f / (float)valid, NULL);
    r->n = m.n_floats;
    r->g = malloc(m.n_floats * sizeof(float));
    if (r->g) memcpy(r->g, m.g, m.n_floats * sizeof(float));
    r->act_bytes = model_activation_bytes(&m);
    r->plan_bytes = model_activation_bytes_for(a, &o);
    model_free(&m);
    return r->g ? 0 : -1;
}

static void test_blocks(void) {
    /* torchtitan, 4 blocks, selective_ac_option "2": the counter reaches 2 and 4 at blocks 1
     * and 3; "3": block 2 only; "1" and "0": all; full: all; none: none */
    const int want2[L] = {0, 1, 0, 1}, want3[L] = {0, 0, 1, 0};
    for (int l = 0; l < L; l++) {
        CHECK(model_ac_block(MODEL_AC_SELECTIVE, 2, l) == want2[l], "every 2, block %d", l);
        CHECK(model_ac_block(MODEL_AC_SELECTIVE, 3, l) == want3[l], "every 3, block %d", l);
        CHECK(model_ac_block(MODEL_AC_SELECTIVE, 1, l), "every 1, block %d", l);
        CHECK(model_ac_block(MODEL_AC_SELECTIVE, 0, l), "every 0 (all), block %d", l);
        CHECK(model_ac_block(MODEL_AC_FULL, 0, l), "full, block %d", l);
        CHECK(!model_ac_block(MODEL_AC_NONE, 2, l), "none, block %d", l);
    }
    CHECK(model_ac_blocks(MODEL_AC_SELECTIVE, 2, 28) == 14, "0.6B (28 blocks), every 2");
    CHECK(model_ac_blocks(MODEL_AC_SELECTIVE, 5, 28) == 5, "28 blocks, every 5");
}

static void test_model(int moe) {
    model_args a;
    small_args(&a, moe);
    const char *what = moe ? "MoE" : "dense";
    run_result none, full, sel[3];
    const int every[3] = {2, 3, 0};
    if (run(&a, MODEL_AC_NONE, 0, &none) || run(&a, MODEL_AC_FULL, 0, &full)) {
        CHECK(0, "%s: none / full runs", what);
        return;
    }
    CHECK(none.loss > 0 && none.loss == full.loss, "%s: full loss %.17g vs none %.17g", what,
          full.loss, none.loss);
    CHECK(!memcmp(none.g, full.g, none.n * sizeof(float)), "%s: full gradients differ", what);
    /* a checkpointed block keeps its input only; the first one adds one shared set: per
     * block, set = (none - full) / (L - 1) */
    const double set = (double)(none.act_bytes - full.act_bytes) / (L - 1);
    CHECK(set > 0, "%s: full (%zu B) below none (%zu B)", what, full.act_bytes, none.act_bytes);
    for (int i = 0; i < 3; i++) {
        if (run(&a, MODEL_AC_SELECTIVE, every[i], &sel[i])) {
            CHECK(0, "%s: selective %d run", what, every[i]);
            continue;
        }
        const int k = model_ac_blocks(MODEL_AC_SELECTIVE, every[i], L);
        CHECK(sel[i].loss == none.loss, "%s: selective %d loss %.17g vs none %.17g", what, every[i],
              sel[i].loss, none.loss);
        CHECK(!memcmp(sel[i].g, none.g, none.n * sizeof(float)),
              "%s: selective %d gradients differ from none", what, every[i]);
        const double want = (double)none.act_bytes - (k - 1) * set;
        CHECK((double)sel[i].act_bytes == want,
              "%s: selective %d (%d blocks) activations %zu B, want %.0f (none %zu, full %zu)",
              what, every[i], k, sel[i].act_bytes, want, none.act_bytes, full.act_bytes);
        CHECK(sel[i].plan_bytes == sel[i].act_bytes, "%s: selective %d: plan %zu B, built %zu B",
              what, every[i], sel[i].plan_bytes, sel[i].act_bytes);
        if (every[i] == 2)
            CHECK(sel[i].act_bytes < none.act_bytes && sel[i].act_bytes > full.act_bytes,
                  "%s: selective 2 not between full and none", what);
        free(sel[i].g);
    }
    /* Without gradients (a validation model) nothing is kept for backward: every block
     * works in the shared set, as a checkpointed one does; the forward's loss is the same. */
    {
        base_err e = {{0}};
        model m;
        model_build_opts o = {.batch = B, .seq_len = T, .with_grads = 0};
        if (moe) o.balance = MODEL_BALANCE_AUX_LOSS;
        CHECK(model_build(&m, &a, &o, &e) == 0, "%s: build without gradients: %s", what, e.msg);
        model_init_weights(&m, 11);
        int32_t tok[B * T], tgt[B * T];
        for (int i = 0; i < B * T; i++) {
            tok[i] = (int32_t)(base_rng_u64(7, 1, (uint64_t)i) % 256);
            tgt[i] =
                i % 5 == 2 ? OPS_IGNORE_INDEX : (int32_t)(base_rng_u64(7, 2, (uint64_t)i) % 256);
        }
        const double loss = model_step_microbatch(&m, tok, tgt, 0.0f, NULL);
        const size_t nog = model_activation_bytes(&m);
        CHECK(loss == none.loss, "%s: loss without gradients %.17g vs %.17g", what, loss,
              none.loss);
        CHECK(nog <= full.act_bytes && nog < none.act_bytes,
              "%s: activations without gradients %zu B (full %zu, none %zu)", what, nog,
              full.act_bytes, none.act_bytes);
        CHECK(model_activation_bytes_for(&a, &o) == nog, "%s: plan without gradients", what);
        printf("%s: activations without gradients %zu B\n", what, nog);
        model_free(&m);
    }
    printf("%s: activations none %zu B, full %zu B; loss %.9f\n", what, none.act_bytes,
           full.act_bytes, none.loss);
    free(none.g);
    free(full.g);
}

/* titan plan with the configured selective mode reports model_build's figure. */
static void test_plan(void) {
    model_args a;
    small_args(&a, 0);
    base_err e = {{0}};
    train_plan_in in = {.model = a,
                        .world = 1,
                        .batch = B,
                        .seq_len = T,
                        .grad_accum = 1,
                        .par = {1, -1, 1, 1, 1, 1},
                        .ac = MODEL_AC_SELECTIVE,
                        .ac_every = 2};
    train_plan p;
    CHECK(train_plan_compute(&in, &p, &e) == 0, "plan: %s", e.msg);
    model_build_opts o = {
        .batch = B, .seq_len = T, .ac = MODEL_AC_SELECTIVE, .ac_every = 2, .with_grads = 1};
    model m;
    CHECK(model_build(&m, &a, &o, &e) == 0, "build: %s", e.msg);
    CHECK(p.act_conf == (double)model_activation_bytes(&m), "plan %.0f B, built %zu B", p.act_conf,
          model_activation_bytes(&m));
    CHECK(p.act_full < p.act_conf && p.act_conf < p.act_none, "plan: %.0f < %.0f < %.0f",
          p.act_full, p.act_conf, p.act_none);
    CHECK(p.total_conf - p.act_conf == p.total_none - p.act_none, "plan: total");
    model_free(&m);
}

int main(void) {
    test_blocks();
    test_model(0);
    test_model(1);
    test_plan();
    return check_report("test_ac");
}
