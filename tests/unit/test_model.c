/* Model arguments, the flavor registry, the parameter layout and init. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "model/model.h"

#include "check.h"

static void expect_invalid(const char *key, const char *value, const char *needle) {
    model_args a;
    base_err e = {{0}};
    model_flavor("debugmodel", &a, &e);
    int rc = model_args_set(&a, key, value, 0, &e);
    if (rc == 0) rc = model_args_validate(&a, &e);
    CHECK(rc != 0, "%s=%s accepted", key, value);
    CHECK(strstr(e.msg, needle) != NULL, "%s=%s: message '%s' lacks '%s'", key, value, e.msg,
          needle);
    printf("invalid %s=%s -> %s\n", key, value, e.msg);
}

int main(void) {
    base_err e = {{0}};
    model_args a;

    /* Registry shapes (spec §1.6). */
    struct {
        const char *name;
        int dim, L, H, G, F, V, tied;
    } want[] = {
        {"debugmodel", 256, 8, 16, 8, 3072, 2048, 1}, {"0.6B", 1024, 28, 16, 8, 3072, 151936, 1},
        {"1.7B", 2048, 28, 16, 8, 6144, 151936, 1},   {"4B", 2560, 36, 32, 8, 9728, 151936, 1},
        {"8B", 4096, 36, 32, 8, 12288, 151936, 0},    {"14B", 5120, 40, 40, 8, 17408, 151936, 0},
        {"32B", 5120, 64, 64, 8, 25600, 151936, 0}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        CHECK(model_flavor(want[i].name, &a, &e) == 0, "flavor %s: %s", want[i].name, e.msg);
        CHECK(a.dim == want[i].dim && a.n_layers == want[i].L && a.n_heads == want[i].H &&
                  a.n_kv_heads == want[i].G && a.ffn_dim == want[i].F &&
                  a.vocab_size == want[i].V && a.tie_embeddings == want[i].tied &&
                  a.head_dim == 128 && a.rope_theta == 1e6 && a.norm_eps == 1e-6,
              "flavor %s shapes", want[i].name);
        CHECK(model_args_validate(&a, &e) == 0, "flavor %s invalid: %s", want[i].name, e.msg);
    }
    CHECK(model_flavor("7B", &a, &e) != 0 && strstr(e.msg, "debugmodel"), "unknown flavor: %s",
          e.msg);

    expect_invalid("n_kv_heads", "5", "multiple of n_kv_heads");
    expect_invalid("head_dim", "127", "even");
    expect_invalid("dim", "0", "dim must be positive");
    expect_invalid("ffn_dim", "0", "ffn_dim must be positive");
    expect_invalid("vocab_size", "-3", "vocab_size");
    expect_invalid("n_layers", "abc", "n_layers");
    expect_invalid("rope_theta", "0", "rope_theta");
    expect_invalid("tie_embeddings", "2", "tie_embeddings");
    expect_invalid("hidden", "3", "unknown model argument 'hidden'");

    /* A small untied model: layout, views, init. */
    model_flavor("debugmodel", &a, &e);
    model_args_set(&a, "dim", "64", 1, &e);
    model_args_set(&a, "n_layers", "2", 1, &e);
    model_args_set(&a, "n_heads", "4", 1, &e);
    model_args_set(&a, "n_kv_heads", "2", 1, &e);
    model_args_set(&a, "head_dim", "32", 1, &e);
    model_args_set(&a, "ffn_dim", "96", 1, &e);
    model_args_set(&a, "vocab_size", "300", 1, &e);
    model_args_set(&a, "tie_embeddings", "0", 1, &e);
    model m;
    model_build_opts bo = {.batch = 2, .seq_len = 8, .with_grads = 1};
    CHECK(model_build(&m, &a, &bo, &e) == 0, "build: %s", e.msg);
    model_counts c;
    model_count_params(&a, &c);
    CHECK((int64_t)m.n_floats == c.total, "layout %zu vs count %lld", m.n_floats,
          (long long)c.total);
    CHECK(m.n_params == 1 + 11 * 2 + 2, "n_params %d", m.n_params);
    size_t off = 0;
    for (int i = 0; i < m.n_params; i++) {
        CHECK(m.params[i].offset == off, "param %s not contiguous", m.params[i].name);
        off += m.params[i].numel;
    }
    for (int u = 0, next = 0; u < m.n_units; u++) {
        CHECK((int)m.units[u].offset == next, "unit %s offset", m.units[u].name);
        next += (int)m.units[u].numel;
    }
    const model_param *wq = model_find_param(&m, "layers.1.attention.wq.weight");
    CHECK(wq && wq->shape[0] == 128 && wq->shape[1] == 64 && wq->unit == 2, "wq view");
    CHECK(model_find_hf_param(&m, "lm_head.weight") != NULL, "untied has lm_head");
    CHECK(model_find_hf_param(&m, "model.layers.0.self_attn.k_norm.weight")->numel == 32, "k_norm");

    /* Init: norms are ones, matrices N(0, 0.02), same seed same bits, any thread count. */
    omp_set_num_threads(1);
    model_init_weights(&m, 7);
    static float copy[1 << 20];
    CHECK(m.n_floats < sizeof copy / sizeof copy[0], "copy buffer");
    memcpy(copy, m.w, m.n_floats * sizeof(float));
    omp_set_num_threads(2);
    model_init_weights(&m, 7);
    CHECK(memcmp(copy, m.w, m.n_floats * sizeof(float)) == 0, "init depends on threads");
    model_init_weights(&m, 8);
    CHECK(memcmp(copy, m.w, m.n_floats * sizeof(float)) != 0, "seed has no effect");
    model_init_weights(&m, 7);
    for (int i = 0; i < m.n_params; i++) {
        const model_param *p = &m.params[i];
        const float *w = m.w + p->offset;
        double s = 0, s2 = 0;
        for (size_t j = 0; j < p->numel; j++) s += w[j], s2 += (double)w[j] * w[j];
        double mean = s / p->numel, sd = sqrt(s2 / p->numel - mean * mean);
        if (p->is_norm) {
            CHECK(mean == 1.0 && sd == 0, "%s not ones", p->name);
        } else {
            /* 4 sigma bounds for the sample mean and std of a normal(0, 0.02). */
            double n = (double)p->numel;
            CHECK(fabs(mean) < 4 * 0.02 / sqrt(n), "%s mean %g", p->name, mean);
            CHECK(fabs(sd - 0.02) < 4 * 0.02 / sqrt(2 * n), "%s std %g", p->name, sd);
        }
    }
    /* torchtitan v0.2.2 init: the same draws as normal's, scaled per parameter by its std
     * (0.02; 0.02/sqrt(2(l+1)) for wo, w2, w3; embedding 1; lm_head 64^-0.5), lm_head cut at
     * 3 std (redrawn past it), thread-independent; depth_init = false: 0.02/sqrt(2 L). */
    for (int by_l = 0; by_l < 2; by_l++) {
        const model_init tt = {MODEL_INIT_TORCHTITAN, by_l};
        for (int u = 0; u < m.n_units; u++) model_init_unit(&m, u, 7, &tt);
        static float tcopy[1 << 20];
        memcpy(tcopy, m.w, m.n_floats * sizeof(float));
        omp_set_num_threads(1);
        for (int u = 0; u < m.n_units; u++) model_init_unit(&m, u, 7, &tt);
        CHECK(memcmp(tcopy, m.w, m.n_floats * sizeof(float)) == 0, "torchtitan init: threads");
        omp_set_num_threads(2);
        for (int i = 0; i < m.n_params; i++) {
            const model_param *p = &m.params[i];
            int l = -1, redrawn = 0;
            sscanf(p->name, "layers.%d.", &l);
            const double depth = 0.02 / sqrt(2.0 * (by_l ? 2 : l + 1));
            const double std =
                p->is_norm                                                                   ? 0
                : !strcmp(p->name, "tok_embeddings.weight")                                  ? 1.0
                : !strcmp(p->name, "output.weight")                                          ? 0.125
                : strstr(p->name, "wo.") || strstr(p->name, "w2.") || strstr(p->name, "w3.") ? depth
                                                                                             : 0.02;
            for (size_t j = 0; j < p->numel; j++) {
                const float t = m.w[p->offset + j], n = copy[p->offset + j];
                if (p->is_norm) {
                    CHECK(t == 1.0f, "torchtitan init: %s not ones", p->name);
                } else if (std == 0.125 && fabsf(n / 0.02f * 0.125f) > 3 * 0.125f) {
                    CHECK(fabsf(t) <= 3 * 0.125f && t != n / 0.02f * 0.125f,
                          "%s[%zu] = %g: not redrawn inside the cut", p->name, j, t);
                    redrawn++;
                } else {
                    CHECK(fabs(t - n / 0.02 * std) <= 1e-6 * fabs(t) + 1e-12,
                          "torchtitan init: %s[%zu] = %g, want %g", p->name, j, t, n / 0.02 * std);
                }
            }
            if (std == 0.125) {
                CHECK(redrawn > 0, "no lm_head draw past the cut (%zu)", p->numel);
                printf("torchtitan init (depth_init %s): every parameter's std by its rule; "
                       "lm_head: %d of %zu draws redrawn inside +-3 std\n",
                       by_l ? "false" : "true", redrawn, p->numel);
            }
        }
    }
    /* Tensor parallelism: each rank's init of its slice is the full model's init sliced (every
     * element drawn at its full-tensor index): rows [r d0, (r+1) d0) of a row-split tensor,
     * columns [r d1, (r+1) d1) of every row of a column-split one; torchtitan's rule, so that the
     * lm_head's redraws past the cut are in it. No collective runs: model_tp's size and rank. */
    {
        const model_init tt = {MODEL_INIT_TORCHTITAN, 0};
        for (int u = 0; u < m.n_units; u++) model_init_unit(&m, u, 7, &tt);
        int splits[3] = {0, 0, 0};
        for (int r = 0; r < 2; r++) {
            model_tp tp = {.size = 2, .rank = r};
            model_build_opts tbo = {.batch = 2, .seq_len = 8, .tp = &tp};
            model tm;
            CHECK(model_build(&tm, &a, &tbo, &e) == 0, "tp build: %s", e.msg);
            for (int u = 0; u < tm.n_units; u++) model_init_unit(&tm, u, 7, &tt);
            for (int i = 0; i < tm.n_params; i++) {
                const model_param *p = &tm.params[i], *f = model_find_param(&m, p->name);
                CHECK(f != NULL, "tp rank %d: %s not in the full model", r, p->name);
                if (!f) continue;
                const int64_t d0 = p->shape[0], d1 = p->ndim > 1 ? p->shape[1] : 1;
                const int k = p->tp_split == MODEL_TP_ROWS   ? 1
                              : p->tp_split == MODEL_TP_COLS ? 2
                                                             : 0;
                splits[k] += r == 0;
                size_t bad = 0;
                for (int64_t row = 0; row < d0; row++)
                    for (int64_t c = 0; c < d1; c++) {
                        const size_t at = k == 1   ? (size_t)((r * d0 + row) * d1 + c)
                                          : k == 2 ? (size_t)(row * 2 * d1 + r * d1 + c)
                                                   : (size_t)(row * d1 + c);
                        bad += memcmp(&tm.w[p->offset + (size_t)(row * d1 + c)],
                                      &m.w[f->offset + at], sizeof(float)) != 0;
                    }
                CHECK(!bad && p->numel == (size_t)(d0 * d1) && f->numel == (k ? 2 : 1) * p->numel,
                      "tp rank %d: %s (split %d): %zu of %zu elements differ from the full init", r,
                      p->name, p->tp_split, bad, p->numel);
            }
            model_free(&tm);
        }
        CHECK(splits[1] > 0 && splits[2] > 0, "tp: row-split %d and column-split %d tensors",
              splits[1], splits[2]);
        printf("tp init: %d replicated, %d row-split, %d column-split tensors equal the full "
               "init's slices on both ranks\n",
               splits[0], splits[1], splits[2]);
    }
    /* torchtitan 0.3 init on a dense model: normal's weights bit for bit. */
    const model_init t03 = {MODEL_INIT_TORCHTITAN_03, 0};
    for (int u = 0; u < m.n_units; u++) model_init_unit(&m, u, 7, &t03);
    CHECK(memcmp(copy, m.w, m.n_floats * sizeof(float)) == 0, "torchtitan_0.3 init: dense");
    model_init_weights(&m, 7);
    /* Two parameters never share a stream: wk of layer 0 and 1 differ. */
    const model_param *k0 = model_find_param(&m, "layers.0.attention.wk.weight"),
                      *k1 = model_find_param(&m, "layers.1.attention.wk.weight");
    CHECK(memcmp(m.w + k0->offset, m.w + k1->offset, 64 * sizeof(float)) != 0, "streams");
    model_free(&m);

    /* torchtitan 0.3 init on an MoE (3 blocks of 4 experts): attention wo and expert w2
     * normal(0, 0.02/sqrt(2 * 3)) (sample mean and std within 4 sigma; the draws normal's,
     * scaled), every other weight normal's bit for bit. */
    {
        model_args ma = a;
        model_args_set(&ma, "n_layers", "3", 1, &e);
        model_args_set(&ma, "n_experts", "4", 1, &e);
        model_args_set(&ma, "top_k", "2", 1, &e);
        model_args_set(&ma, "moe_ffn_dim", "48", 1, &e);
        model mm;
        CHECK(model_build(&mm, &ma, &bo, &e) == 0, "build MoE: %s", e.msg);
        model_init_weights(&mm, 5);
        static float ncopy[1 << 20];
        CHECK(mm.n_floats < sizeof ncopy / sizeof ncopy[0], "MoE copy buffer");
        memcpy(ncopy, mm.w, mm.n_floats * sizeof(float));
        for (int u = 0; u < mm.n_units; u++) model_init_unit(&mm, u, 5, &t03);
        const double scaled = 0.02 / sqrt(6.0);
        int n_scaled = 0;
        for (int i = 0; i < mm.n_params; i++) {
            const model_param *p = &mm.params[i];
            const float *w = mm.w + p->offset, *n = ncopy + p->offset;
            const int is_scaled =
                strstr(p->name, "attention.wo.weight") || strstr(p->name, "moe.experts.w2");
            if (!is_scaled) {
                CHECK(memcmp(w, n, p->numel * sizeof(float)) == 0,
                      "torchtitan_0.3 init: %s is not normal's", p->name);
                continue;
            }
            n_scaled++;
            double s = 0, s2 = 0, worst = 0;
            for (size_t j = 0; j < p->numel; j++) {
                s += w[j], s2 += (double)w[j] * w[j];
                const double d = fabs(w[j] - n[j] / 0.02 * scaled);
                if (d > worst) worst = d;
            }
            const double cnt = (double)p->numel, mean = s / cnt, sd = sqrt(s2 / cnt - mean * mean);
            CHECK(fabs(mean) < 4 * scaled / sqrt(cnt) &&
                      fabs(sd - scaled) < 4 * scaled / sqrt(2 * cnt),
                  "torchtitan_0.3 init: %s mean %g std %g, want 0 and %g", p->name, mean, sd,
                  scaled);
            CHECK(worst < 1e-8, "torchtitan_0.3 init: %s not normal's draws scaled (%g)", p->name,
                  worst);
        }
        CHECK(n_scaled == 6, "torchtitan_0.3 init: %d scaled parameters, want 3 wo + 3 w2",
              n_scaled);
        printf("torchtitan_0.3 init: dense = normal bit for bit; MoE wo and expert w2 std "
               "0.02/sqrt(2 L), the rest normal's\n");
        model_free(&mm);
    }

    /* Tied: no separate lm_head; counted once. */
    model_args_set(&a, "tie_embeddings", "1", 1, &e);
    CHECK(model_build(&m, &a, &bo, &e) == 0, "build tied: %s", e.msg);
    CHECK(model_find_hf_param(&m, "lm_head.weight") == NULL, "tied has no lm_head");
    model_count_params(&a, &c);
    CHECK(c.lm_head == 0 && c.embedding == 300 * 64, "tied counts");
    model_free(&m);

    /* The precision each parameter is computed with (model_param_prec: FSDP's bf16 gathers):
     * bf16 only when every op reading it is a bf16 implementation. */
    {
        model_args_set(&a, "tie_embeddings", "0", 1, &e);
        CHECK(model_build(&m, &a, &bo, &e) == 0, "build fp32: %s", e.msg);
        for (int i = 0; i < m.n_params; i++)
            CHECK(model_param_prec(&m, &m.params[i]) == OPS_PREC_F32, "fp32 model: %s bf16",
                  m.params[i].name);
        model_free(&m);
        /* bf16, untied; then layer 0's matmul and the lm_head's CE overridden to fp32 */
        const ops_override ov[2] = {{"layers.0.matmul", "default"}, {"lmhead_ce", "default"}};
        for (int o = 0; o < 2; o++) {
            model_build_opts b16 = bo;
            b16.prec = OPS_PREC_BF16;
            b16.overrides = o ? ov : NULL;
            b16.n_overrides = o ? 2 : 0;
            CHECK(model_build(&m, &a, &b16, &e) == 0, "build bf16: %s", e.msg);
            for (int i = 0; i < m.n_params; i++) {
                const model_param *p = &m.params[i];
                const int matrix = !p->is_norm && strcmp(p->name, "tok_embeddings.weight");
                const int off = o && (strstr(p->name, "layers.0.") == p->name ||
                                      !strcmp(p->name, "output.weight"));
                const ops_prec want = matrix && !off ? OPS_PREC_BF16 : OPS_PREC_F32;
                CHECK(model_param_prec(&m, p) == want, "bf16 model (overrides %d): %s is %s", o,
                      p->name, want == OPS_PREC_BF16 ? "fp32" : "bf16");
                /* the weight copy holds what some bf16 op reads: the untied lm_head still
                 * (the head's matmul, generation's logits, stays bf16), not layer 0's
                 * matrices once their matmul is fp32, never the norms or untied embedding */
                const int in_copy = matrix && !(o && strstr(p->name, "layers.0.") == p->name);
                CHECK(model_param_in_bf16_copy(&m, p) == in_copy,
                      "bf16 weight copy (overrides %d): %s %s", o, p->name,
                      in_copy ? "missing" : "held");
            }
            model_free(&m);
        }
        /* tied: the embedding table is read by the (fp32) lookup: fp32; the plan's answer
         * (no tables: the defaults) agrees */
        model_args_set(&a, "tie_embeddings", "1", 1, &e);
        model_build_opts b16 = bo;
        b16.prec = OPS_PREC_BF16;
        CHECK(model_build(&m, &a, &b16, &e) == 0, "build bf16 tied: %s", e.msg);
        model d;
        CHECK(model_describe(&d, &a, &e) == 0, "describe: %s", e.msg);
        d.prec = OPS_PREC_BF16;
        for (int i = 0; i < m.n_params; i++) {
            const model_param *p = &m.params[i];
            const ops_prec want = p->is_norm || !strcmp(p->name, "tok_embeddings.weight")
                                      ? OPS_PREC_F32
                                      : OPS_PREC_BF16;
            CHECK(model_param_prec(&m, p) == want, "bf16 tied: %s", p->name);
            CHECK(model_param_prec(&d, &d.params[i]) == want, "described bf16 tied: %s", p->name);
            /* a tied embedding is in the copy (the lm_head reads it in bf16) */
            CHECK(model_param_in_bf16_copy(&m, p) == !p->is_norm, "bf16 copy, tied: %s", p->name);
        }
        model_free(&d);
        model_free(&m);
        /* MoE: the router and the expert stacks are read by bf16 GEMMs only */
        model_args moe = a;
        model_args_set(&moe, "n_experts", "4", 1, &e);
        model_args_set(&moe, "top_k", "2", 1, &e);
        model_args_set(&moe, "moe_ffn_dim", "32", 1, &e);
        CHECK(model_build(&m, &moe, &b16, &e) == 0, "build bf16 MoE: %s", e.msg);
        int n_moe = 0;
        for (int i = 0; i < m.n_params; i++)
            if (strstr(m.params[i].name, ".moe.")) {
                n_moe++;
                CHECK(model_param_prec(&m, &m.params[i]) == OPS_PREC_BF16, "MoE: %s",
                      m.params[i].name);
            }
        CHECK(n_moe == 2 * 4, "MoE parameters: %d", n_moe);
        model_free(&m);
    }

    /* FLOPs per token: 6 * P_matmul + 12 * L * H * hd * T (torchtitan HEAD). */
    model_flavor("0.6B", &a, &e);
    model_count_params(&a, &c);
    double f = model_flops_per_token(&a, 4096);
    CHECK(fabs(f - (6.0 * c.total + 12.0 * 28 * 16 * 128 * 4096)) < 1, "flops %g", f);
    printf("0.6B flops/token at 4096: %.3f GFLOP (spec: ~6.39)\n", f / 1e9);
    CHECK(fabs(f / 1e9 - 6.39) < 0.01, "0.6B flops/token");
    /* untied and MoE: torchtitan's get_moe_model_nparams_and_flops over the named parameters of
     * Qwen3ForCausalLM built from the official config.json on the meta device (embed_tokens
     * out, mlp.experts x top_k / num_experts, mlp.gate in), 12 L H hd T at T = 4096 */
    const struct {
        const char *flavor;
        double flops;
    } ref[] = {{"8B", 52658190336.0}, {"30B-A3B", 27914883072.0}};
    for (size_t i = 0; i < sizeof ref / sizeof ref[0]; i++) {
        CHECK(model_flavor(ref[i].flavor, &a, &e) == 0, "flavor %s", ref[i].flavor);
        f = model_flops_per_token(&a, 4096);
        CHECK(f == ref[i].flops, "%s flops/token %.0f, torchtitan's %.0f", ref[i].flavor, f,
              ref[i].flops);
    }

    printf(failures ? "FAILED: %d checks\n" : "all checks passed\n", failures);
    return failures != 0;
}
