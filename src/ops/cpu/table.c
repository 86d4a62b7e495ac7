/* The CPU backend's table: the built-in implementations of every op, registered in this
 * order (the first one of an op is its default, the first bf16 one its default in a bf16
 * model), then the "reference" ones (reference.c).
 * An accelerator backend would have the same kind of table beside this folder (ops/cuda/). */
#include "cpu.h"

static int check_rope_default(const ops_ctx *ctx, base_err *err) {
    if (ctx->head_dim % 2 != 0)
        return base_fail(err, "head_dim %% 2 == 0 (head_dim = %d)", ctx->head_dim);
    return 0;
}

static int check_attention_default(const ops_ctx *ctx, base_err *err) {
    if (ctx->n_kv_heads > 0 && ctx->n_heads % ctx->n_kv_heads != 0) {
        return base_fail(err, "n_heads %% n_kv_heads == 0 (n_heads = %d, n_kv_heads = %d)",
                         ctx->n_heads, ctx->n_kv_heads);
    }
    return 0;
}

/* add_rmsnorm "unfused": the residual add as its own pass, then the default rmsnorm; the
 * baseline that `titan kernels bench add_rmsnorm` measures the fusion against. */
static void add_rmsnorm_unfused(float *h, float *out, float *rstd, const float *x, const float *y,
                                const float *w, int N, int C, float eps) {
    const size_t n = (size_t)N * C;
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) h[i] = x[i] + y[i];
    ops_cpu_rmsnorm_fwd(out, rstd, h, w, N, C, eps);
}

void ops_cpu_register(int (*reg)(const ops_impl *impl, base_err *err)) {
    const ops_impl builtin[] = {
        {OPS_EMBEDDING, "default", "", NULL, (ops_fn)ops_cpu_embedding_fwd,
         (ops_fn)ops_cpu_embedding_bwd, OPS_PREC_F32},
        {OPS_RMSNORM, "default", "", NULL, (ops_fn)ops_cpu_rmsnorm_fwd, (ops_fn)ops_cpu_rmsnorm_bwd,
         OPS_PREC_F32},
        {OPS_MATMUL, "default", "", NULL, (ops_fn)ops_cpu_matmul_fwd, (ops_fn)ops_cpu_matmul_bwd,
         OPS_PREC_F32},
        {OPS_ROPE, "default", "head_dim % 2 == 0", check_rope_default, (ops_fn)ops_cpu_rope_fwd,
         (ops_fn)ops_cpu_rope_bwd, OPS_PREC_F32},
        {OPS_ATTENTION, "default", "n_heads % n_kv_heads == 0", check_attention_default,
         (ops_fn)ops_cpu_attention_fwd, (ops_fn)ops_cpu_attention_bwd, OPS_PREC_F32},
        /* the bf16 attention's algorithm on the fp32 SGEMM: conformance checks it at fp32
         * tolerances; the fast fp32 attention is the tiled default */
        {OPS_ATTENTION, "gemm", "n_heads % n_kv_heads == 0", check_attention_default,
         (ops_fn)ops_cpu_attention_gemm_fwd, (ops_fn)ops_cpu_attention_gemm_bwd, OPS_PREC_F32},
        {OPS_SWIGLU, "default", "", NULL, (ops_fn)ops_cpu_swiglu_fwd, (ops_fn)ops_cpu_swiglu_bwd,
         OPS_PREC_F32},
        {OPS_LMHEAD_CE, "default", "", NULL, (ops_fn)ops_cpu_lmhead_ce, NULL, OPS_PREC_F32},
        {OPS_ADAMW, "default", "", NULL, (ops_fn)ops_cpu_adamw, NULL, OPS_PREC_F32},
        {OPS_ATTENTION_KV, "default", "n_heads % n_kv_heads == 0", check_attention_default,
         (ops_fn)ops_cpu_attention_kv, NULL, OPS_PREC_F32},
        {OPS_GROUPED_MM, "default", "", NULL, (ops_fn)ops_cpu_grouped_mm_fwd,
         (ops_fn)ops_cpu_grouped_mm_bwd, OPS_PREC_F32},
        {OPS_GROUPED_MM, "grouped", "", NULL, (ops_fn)ops_cpu_grouped_mm_tiled_fwd,
         (ops_fn)ops_cpu_grouped_mm_tiled_bwd, OPS_PREC_F32},
        /* the add's backward is the identity: the backward is rmsnorm's (ops.h) */
        {OPS_ADD_RMSNORM, "default", "", NULL, (ops_fn)ops_cpu_add_rmsnorm_fwd,
         (ops_fn)ops_cpu_rmsnorm_bwd, OPS_PREC_F32},
        {OPS_ADD_RMSNORM, "unfused", "", NULL, (ops_fn)add_rmsnorm_unfused,
         (ops_fn)ops_cpu_rmsnorm_bwd, OPS_PREC_F32},
        /* bf16 mixed precision: the defaults of these ops in a bf16 model (ops_ctx.prec); the
         * other ops keep their fp32 defaults there (norms, RoPE, embedding, AdamW) */
        {OPS_MATMUL, "bf16", "", NULL, (ops_fn)ops_cpu_matmul_bf16_fwd,
         (ops_fn)ops_cpu_matmul_bf16_bwd, OPS_PREC_BF16},
        {OPS_ATTENTION, "bf16", "n_heads % n_kv_heads == 0", check_attention_default,
         (ops_fn)ops_cpu_attention_bf16_fwd, (ops_fn)ops_cpu_attention_bf16_bwd, OPS_PREC_BF16},
        {OPS_LMHEAD_CE, "bf16", "", NULL, (ops_fn)ops_cpu_lmhead_ce_bf16, NULL, OPS_PREC_BF16},
        {OPS_ATTENTION_KV, "bf16", "n_heads % n_kv_heads == 0", check_attention_default,
         (ops_fn)ops_cpu_attention_kv_bf16, NULL, OPS_PREC_BF16},
        {OPS_GROUPED_MM, "bf16", "", NULL, (ops_fn)ops_cpu_grouped_mm_bf16_fwd,
         (ops_fn)ops_cpu_grouped_mm_bf16_bwd, OPS_PREC_BF16},
        {OPS_SWIGLU, "bf16", "", NULL, (ops_fn)ops_cpu_swiglu_bf16_fwd,
         (ops_fn)ops_cpu_swiglu_bf16_bwd, OPS_PREC_BF16},
    };
    for (size_t i = 0; i < sizeof builtin / sizeof builtin[0]; i++) {
        /* cannot fail: distinct ops, valid fields, an empty table */
        (void)reg(&builtin[i], NULL);
    }
    ops_cpu_register_reference(reg);
}
