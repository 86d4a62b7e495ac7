/* titan plan's FSDP traffic by dtype (train_plan_compute): the all-gather bytes per step and
 * rank of the small models tests/scripts/dist.sh and dist_ep.sh train, whose runs measure
 * the whole units' bytes (metrics fsdp_gather_bytes: 746240 fp32 / 414336 bf16 untied,
 * 669440 / 375808 tied, 450048 / 373248 fp32 untied / tied under reshard never, 553728 /
 * 318080 for the MoE with ep 2 x efsdp 2); the plan counts the ring's share, (k - 1) / k of
 * them over k ranks. The embedding (V x D = 19200) is gathered once a microbatch: for its
 * forward; its backward reads no parameters (model_unit_bwd_reads_params), a tied one stays
 * gathered from its forward for the head. */
#include <string.h>

#include "check.h"
#include "train/train.h"

/* dist_common.sh's `small`: D 64, 2 blocks, 4 heads of 16, 2 kv heads, FFN 128, V 300. */
static model_args small(int tie, int moe) {
    model_args a;
    base_err e;
    model_flavor("debugmodel", &a, &e);
    const char *kv[][2] = {{"n_layers", "2"},     {"dim", "64"},
                           {"n_heads", "4"},      {"n_kv_heads", "2"},
                           {"head_dim", "16"},    {"ffn_dim", "128"},
                           {"vocab_size", "300"}, {"tie_embeddings", tie ? "1" : "0"}};
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
        model_args_set(&a, kv[i][0], kv[i][1], 1, &e);
    if (moe) {
        model_args_set(&a, "n_experts", "4", 1, &e);
        model_args_set(&a, "top_k", "2", 1, &e);
        model_args_set(&a, "moe_ffn_dim", "32", 1, &e);
    }
    return a;
}

static void expect(const char *what, int tie, int moe, dist_reshard rs, ops_prec prec, double all,
                   double bf16) {
    train_plan_in in = {.model = small(tie, moe),
                        .world = moe ? 4 : 2,
                        .batch = 2,
                        .seq_len = 32,
                        .grad_accum = 1,
                        .par = {1, -1, 1, 1, 1, moe ? 2 : 1},
                        .reshard = rs,
                        .prec = prec};
    train_plan p;
    base_err e = {{0}};
    CHECK(train_plan_compute(&in, &p, &e) == 0, "%s: %s", what, e.msg);
    CHECK(p.allgather_bytes == all && p.allgather_bf16_bytes == bf16,
          "%s: all-gathers %.1f B (bf16 %.1f B), want %.1f B (bf16 %.1f B)", what,
          p.allgather_bytes, p.allgather_bf16_bytes, all, bf16);
    printf("%s: all-gathers %.0f B per step and rank, %.0f B of them bf16\n", what,
           p.allgather_bytes, p.allgather_bf16_bytes);
}

int main(void) {
    /* 2 ranks: half of each whole-unit figure; fp32 untied: 4 x (19200 + 4 x 37024 blocks
     * (forward, backward) + 19264 head); bf16: the matrices (blocks 4 x 37024 x 2 B with
     * their norms, the untied lm_head 19264 x 2 B with the final norm) */
    expect("fp32 untied", 0, 0, DIST_RESHARD_DEFAULT, OPS_PREC_F32, 746240 / 2, 0);
    expect("bf16 untied", 0, 0, DIST_RESHARD_DEFAULT, OPS_PREC_BF16, 414336 / 2,
           (4 * 37024 * 2 + 19264 * 2) / 2);
    /* reshard never: every unit once: 4 x (19200 + 2 x 37024 + 19264 or, tied, 64) */
    expect("fp32 untied, reshard never", 0, 0, DIST_RESHARD_NEVER, OPS_PREC_F32, 450048 / 2, 0);
    expect("fp32 tied, reshard never", 1, 0, DIST_RESHARD_NEVER, OPS_PREC_F32, 373248 / 2, 0);
    expect("fp32 tied", 1, 0, DIST_RESHARD_DEFAULT, OPS_PREC_F32, 669440 / 2, 0);
    expect("bf16 tied", 1, 0, DIST_RESHARD_DEFAULT, OPS_PREC_BF16, 375808 / 2, 4 * 37024 * 2 / 2);
    /* MoE, 4 ranks, ep 2: the dense parts (blocks' 12704, embedding, head) 3/4 over dp_shard 4,
     * the own experts (2 x 6144 per block) 1/2 over efsdp 2 */
    expect("fp32 MoE ep 2", 0, 1, DIST_RESHARD_DEFAULT, OPS_PREC_F32,
           (4 * 12704 + 19200 + 19264) * 4 * 0.75 + 4 * 12288 * 4 * 0.5, 0);
    expect("bf16 MoE ep 2", 0, 1, DIST_RESHARD_DEFAULT, OPS_PREC_BF16,
           (4 * (12704 * 2 + 160 * 4) + 19200 * 4 + 19264 * 2 + 64 * 4) * 0.75 +
               4 * 12288 * 2 * 0.5,
           (4 * 12704 * 2 + 19264 * 2) * 0.75 + 4 * 12288 * 2 * 0.5);
    /* reshard never: every unit gathered once per microbatch (the own experts too) */
    expect("fp32 MoE ep 2, reshard never", 0, 1, DIST_RESHARD_NEVER, OPS_PREC_F32,
           (2 * 12704 + 19200 + 19264) * 4 * 0.75 + 2 * 12288 * 4 * 0.5, 0);
    return check_report("test_plan");
}
