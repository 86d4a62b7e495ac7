/* ops: the kernel registry and the ops of the Qwen3 model.
 *
 * Every op has a default implementation (forward + hand-written backward) and may have
 * more. Implementations register by name with a constraint check. At model build time
 * ops_resolve() picks one implementation per op for a layer path
 * ("layers.3.attention") and fills an ops_table of typed function pointers: the hot path
 * calls through that table, never through a lookup.
 *
 * Conventions (llm.c style): outputs first, then saved activations, inputs, weights,
 * sizes. Row-major. Backward functions ACCUMULATE (+=) into every gradient they write,
 * input gradients included, so callers zero what must start from zero.
 * All tensors fp32. Token-major activations: [N, C] with N = B*T tokens. */
#ifndef TITAN_OPS_H
#define TITAN_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "../base/base.h"

#define OPS_IGNORE_INDEX (-100)

/* ---- op signatures ---------------------------------------------------------------- */

/* out[N,D] = wte[tokens[n], :].  bwd: dwte[V,D] += scatter of dout (deterministic order). */
typedef void (*ops_embedding_fwd_fn)(float *out, const int32_t *tokens, const float *wte, int N,
                                     int D);
typedef void (*ops_embedding_bwd_fn)(float *dwte, const float *dout, const int32_t *tokens, int N,
                                     int D);

/* out[N,C] = inp * rsqrt(mean(inp^2) + eps) * w[C]; rstd[N] saved for backward.
 * Used for the block norms (C = dim) and per-head q/k norms (N = tokens*heads, C = head_dim). */
typedef void (*ops_rmsnorm_fwd_fn)(float *out, float *rstd, const float *inp, const float *w, int N,
                                   int C, float eps);
typedef void (*ops_rmsnorm_bwd_fn)(float *dinp, float *dw, const float *dout, const float *inp,
                                   const float *w, const float *rstd, int N, int C);

/* Fused residual add + RMSNorm: h[N,C] = x + y (the residual stream), out = rmsnorm(h) * w[C],
 * rstd[N] saved; one pass over memory instead of an add pass and a norm pass. h may alias x
 * or y (the stream is updated in place). The block calls it where attention's output joins
 * the residual, before the FFN norm. out must equal rmsnorm_fwd(h) of the same ISA copy
 * bitwise (backward recomputes the norm with rmsnorm_fwd from the saved h).
 * bwd: an add passes its output gradient unchanged to both inputs, so the only work is the
 * norm's: dh += d(rmsnorm)/dh . dout, dw += ..., exactly rmsnorm_bwd's contract; the caller
 * passes the residual stream's gradient as dh (it already holds dL/dh from downstream). */
typedef void (*ops_add_rmsnorm_fwd_fn)(float *h, float *out, float *rstd, const float *x,
                                       const float *y, const float *w, int N, int C, float eps);
typedef ops_rmsnorm_bwd_fn ops_add_rmsnorm_bwd_fn;

/* out[N,OC] = inp[N,C] @ w[OC,C]^T (nn.Linear, no bias).
 * bwd: dinp[N,C] += dout @ w (skipped when dinp is NULL); dw[OC,C] += dout^T @ inp. */
typedef void (*ops_matmul_fwd_fn)(float *out, const float *inp, const float *w, int N, int C,
                                  int OC);
typedef void (*ops_matmul_bwd_fn)(float *dinp, float *dw, const float *dout, const float *inp,
                                  const float *w, int N, int C, int OC);

/* RoPE, HF rotate_half convention, on x[B,T,nh,hd] at positions 0..T-1 of each window.
 * cos/sin: [T, hd/2] tables (ops_rope_table). out may alias inp.
 * bwd: dinp += R^T dout (the rotation by -angle). When dinp == dout the rotated gradient
 * replaces dout in place. */
typedef void (*ops_rope_fwd_fn)(float *out, const float *inp, const float *cos, const float *sin,
                                int B, int T, int nh, int hd);
typedef void (*ops_rope_bwd_fn)(float *dinp, const float *dout, const float *cos, const float *sin,
                                int B, int T, int nh, int hd);

/* Causal GQA attention, scale 1/sqrt(hd). q[B,T,H,hd], k,v[B,T,G,hd], out[B,T,H,hd];
 * query head h uses kv head h / (H/G). lse[B,H,T] = log-sum-exp of each scaled score row,
 * saved so backward can recompute probabilities tile by tile (no [T,T] matrix is kept).
 * bwd: dq, dk, dv += gradients. */
typedef void (*ops_attention_fwd_fn)(float *out, float *lse, const float *q, const float *k,
                                     const float *v, int B, int T, int H, int G, int hd);
typedef void (*ops_attention_bwd_fn)(float *dq, float *dk, float *dv, const float *dout,
                                     const float *out, const float *lse, const float *q,
                                     const float *k, const float *v, int B, int T, int H, int G,
                                     int hd);

/* Inference only (no backward): T new queries of ONE sequence attending to a KV cache.
 * q[T,H,hd] holds positions pos0..pos0+T-1; k, v [>= pos0+T, G, hd] are the cache rows of
 * positions 0..pos0+T-1 (the new tokens' rows already written); out[T,H,hd]. Query t sees
 * keys 0..pos0+t (causal), scale 1/sqrt(hd), query head h reads kv head h / (H/G), softmax
 * with the row max subtracted. Used for decode steps and prefill chunks after the first; a
 * prefill from position 0 runs the training attention_fwd on the cache rows instead. */
typedef void (*ops_attention_kv_fn)(float *out, const float *q, const float *k, const float *v,
                                    int T, int pos0, int H, int G, int hd);

/* out[N,F] = silu(gate) * up.  bwd: dgate, dup += . */
typedef void (*ops_swiglu_fwd_fn)(float *out, const float *gate, const float *up, int N, int F);
typedef void (*ops_swiglu_bwd_fn)(float *dgate, float *dup, const float *dout, const float *gate,
                                  const float *up, int N, int F);

/* Fused lm_head + fp32 cross-entropy over x[N,D], w[V,D], targets[N] (OPS_IGNORE_INDEX skipped).
 * Returns the SUM of the per-token losses (double). Logits are computed `chunk` tokens at a
 * time into scratch[chunk, V], so [N, V] logits never exist. When dx is non-NULL, also
 * dx[N,D] += grad_scale * (softmax - onehot) @ w and dw[V,D] += grad_scale * (...)^T @ x,
 * where grad_scale is 1 / (global count of valid tokens), supplied by the caller.
 * *n_valid (if non-NULL) receives the number of non-ignored targets.
 *
 * Loss-parallel (vs non-NULL): w[V,D] is this rank's shard, vocabulary ids
 * [vs->v0, vs->v0 + V) of vs->v_total; targets are global ids (valid: 0 <= t < v_total) and
 * x holds the same N rows on every rank of the group. Per chunk the row maxima are
 * all-reduced (max), then the exp sums and the target logits (from the rank owning the
 * target, 0 elsewhere) are all-reduced (sum): every rank returns the same total loss, dw is
 * the gradient of its shard, and dx receives this shard's PART of the input gradient (the
 * caller sums it over the group). vs NULL: the whole vocabulary, no reductions. */
typedef struct {
    int v0, v_total;
    /* in place over the ranks holding the other shards; every rank calls it in the same
     * order: x[n] = max (max = 1) or sum (max = 0) of the ranks' x[n] */
    void (*allreduce)(void *ctx, double *x, int n, int max);
    void *ctx;
} ops_vocab_shard;
typedef double (*ops_lmhead_ce_fn)(float *dx, float *dw, const float *x, const float *w,
                                   const int32_t *targets, int N, int D, int V, float grad_scale,
                                   float *scratch, int chunk, int64_t *n_valid,
                                   const ops_vocab_shard *vs);

/* Grouped expert GEMM (MoE): the rows of inp are sorted by expert, expert e owning rows
 * [offs[e], offs[e+1]) (offs[E+1], offs[0] = 0, non-decreasing; a group may be empty).
 *   out[r, OC] = inp[r, C] @ w[e]^T  for r in group e,  w [E, OC, C] (one nn.Linear per expert)
 * bwd: dinp[r] += dout[r] @ w[e] (skipped when dinp is NULL); dw[e] += dout_e^T @ inp_e.
 * Results must not depend on the thread count's scheduling: each output element is written by
 * one thread with a fixed reduction order (the reduction over a group's rows included). */
typedef void (*ops_grouped_mm_fwd_fn)(float *out, const float *inp, const float *w,
                                      const int32_t *offs, int E, int C, int OC);
typedef void (*ops_grouped_mm_bwd_fn)(float *dinp, float *dw, const float *dout, const float *inp,
                                      const float *w, const int32_t *offs, int E, int C, int OC);

/* AdamW (torch.optim.AdamW semantics, decoupled decay) on n elements, step t >= 1:
 * p -= lr*wd*p; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 * p -= (lr / (1-b1^t)) * m / (sqrt(v) / sqrt(1-b2^t) + eps). No backward. */
/* Hyperparameters are doubles, as Python holds them: the kernel derives its fp32 scalars
 * from them exactly as torch does (1 - 0.9 in double, then rounded once). */
typedef void (*ops_adamw_fn)(float *p, float *m, float *v, const float *g, size_t n, double lr,
                             double beta1, double beta2, double eps, double wd, int64_t t);

/* ---- registry --------------------------------------------------------------------- */

typedef enum {
    OPS_EMBEDDING,
    OPS_RMSNORM,
    OPS_MATMUL,
    OPS_ROPE,
    OPS_ATTENTION,
    OPS_SWIGLU,
    OPS_LMHEAD_CE,
    OPS_ADAMW,
    OPS_ATTENTION_KV,
    OPS_GROUPED_MM,
    OPS_ADD_RMSNORM,
    OPS_COUNT
} ops_kind;

/* What a constraint check may look at: the shapes of the model and job. */
typedef struct {
    int batch, seq_len, dim, n_heads, n_kv_heads, head_dim, ffn_dim, vocab;
    int n_experts, top_k, moe_ffn_dim; /* 0 for a dense model */
} ops_ctx;

typedef void (*ops_fn)(void); /* any op function, cast to its typed signature on use */

typedef struct {
    ops_kind op;
    const char *name;        /* "default", "flash", ... */
    const char *constraints; /* human-readable, e.g. "seq_len % 64 == 0"; "" when none */
    /* Returns 0 when the implementation can serve ctx, else fills err with the rule broken. */
    int (*check)(const ops_ctx *ctx, base_err *err);
    ops_fn fwd, bwd; /* bwd NULL for ops without one (adamw) */
} ops_impl;

/* The resolved implementations for one layer path. */
typedef struct {
    const ops_impl *impl[OPS_COUNT];
    ops_embedding_fwd_fn embedding_fwd;
    ops_embedding_bwd_fn embedding_bwd;
    ops_rmsnorm_fwd_fn rmsnorm_fwd;
    ops_rmsnorm_bwd_fn rmsnorm_bwd;
    ops_matmul_fwd_fn matmul_fwd;
    ops_matmul_bwd_fn matmul_bwd;
    ops_rope_fwd_fn rope_fwd;
    ops_rope_bwd_fn rope_bwd;
    ops_attention_fwd_fn attention_fwd;
    ops_attention_bwd_fn attention_bwd;
    ops_swiglu_fwd_fn swiglu_fwd;
    ops_swiglu_bwd_fn swiglu_bwd;
    ops_lmhead_ce_fn lmhead_ce;
    ops_adamw_fn adamw;
    ops_attention_kv_fn attention_kv;
    ops_grouped_mm_fwd_fn grouped_mm_fwd;
    ops_grouped_mm_bwd_fn grouped_mm_bwd;
    ops_add_rmsnorm_fwd_fn add_rmsnorm_fwd;
    ops_add_rmsnorm_bwd_fn add_rmsnorm_bwd;
    int plugin_slot[OPS_COUNT]; /* 1 + the plugin slot bound for an op; 0 = none */
} ops_table;

/* An override "op name or layer glob" -> implementation (filled from [kernels] later). */
typedef struct {
    const char *pattern; /* op name ("attention") or path glob ("layers.*.attention") */
    const char *impl;
} ops_override;

const char *ops_kind_name(ops_kind k);
/* Registers an implementation; the first one registered for an op is its default. */
int ops_register(const ops_impl *impl, base_err *err);
/* Registers the built-in CPU implementations (idempotent). */
void ops_register_builtin(void);
const ops_impl *ops_find(ops_kind op, const char *name);
/* All registered implementations, in registration order. */
int ops_list(const ops_impl **out, int max);

/* Resolves every op for `layer_path` (e.g. "layers.3") from defaults and overrides,
 * checks each implementation's constraints against ctx, and logs every non-default choice.
 * An override applies to an op when its pattern equals the op name or glob-matches
 * ('*', '?') "<layer_path>.<op name>"; when several apply, the last one wins. A pattern
 * without '.' or a wildcard must be an op name (typos are errors, not silent no-ops). */
int ops_resolve(ops_table *t, const char *layer_path, const ops_ctx *ctx,
                const ops_override *overrides, int n_overrides, base_err *err);

/* Resolves the tables of every unit of a model (paths[i] -> tables[i]) with ops_resolve's
 * rules, and also fails when an override matches no op of any unit (a mistyped glob such as
 * "layers.*.attention.rop" or a range past the last layer), naming the override. Every op
 * matches "<unit>.<op>", and some also a module sub-path (rope: "<unit>.attention.rope",
 * swiglu: "<unit>.feed_forward.swiglu"). Globs: '*' any run, '?' one character, and a
 * "N-M" run of digits matches an integer in [N, M] ("layers.0-3.attention"). On failure the
 * tables already resolved are released. */
int ops_resolve_units(ops_table *tables, const char *const *paths, int n, const ops_ctx *ctx,
                      const ops_override *overrides, int n_overrides, base_err *err);
/* Releases what resolving bound to a table (plugin slots and their saved state). */
void ops_release(ops_table *t);

/* Loads a kernel plugin (include/titan/kernel_abi.h): dlopen, ABI version check, then its
 * init registers its implementations. Fails with a message naming the path for a missing
 * file, a missing symbol, another ABI version, an invalid descriptor or a failed init;
 * nothing of a failed plugin stays registered. Loading the same path twice is a no-op. */
int ops_plugin_load(const char *path, base_err *err);
/* The plugin path an implementation came from, or NULL for a built-in. A plugin
 * implementation is called only through a resolved ops_table (its fwd/bwd in the registry
 * are placeholders): the table's entries are per-layer trampolines that carry the layer's
 * saved state and convert layouts. */
const char *ops_impl_origin(const ops_impl *impl);

/* The instruction set the built-in CPU kernels run with in this process, chosen at run time
 * (ops/cpu/dispatch.c): "avx512 (x86-64-v4)" or "default (<build baseline>)". The
 * environment variable TITAN_ISA=default forces the baseline. */
const char *ops_cpu_isa(void);

/* ---- conformance (ops/conform.c) ----------------------------------------------------
 * `titan kernels test|bench`: an implementation against its op's default (the default
 * against the "reference" implementation) on random shapes that satisfy its constraints:
 * forward outputs and every input gradient, each within the op's documented relative
 * tolerance (max |a - b| / max(max |b|, tiny) over the tensor). */
typedef struct {
    int shapes;     /* random shapes per implementation (test), default 6 */
    uint64_t seed;  /* default 1 */
    int verbose;    /* print one line per shape */
    double min_sec; /* bench: time per measurement, default 0.3 s */
} ops_conform_opts;
/* Tests impl (name "op/impl", "impl" when unique, or NULL for every registered non-reference
 * implementation). Prints a line per implementation to stdout; returns the number that
 * failed, or -1 with err set for a bad name. */
int ops_conform_test(const char *name, const ops_conform_opts *o, base_err *err);
/* Times impl against the default on a model-sized shape (dims from ctx), printing ms per call,
 * the ratio to the default, and GB/s or GFLOP/s against the op's traffic or FLOPs. */
int ops_conform_bench(const char *name, const ops_ctx *ctx, const ops_conform_opts *o,
                      base_err *err);

/* RoPE tables for positions 0..T-1: cos/sin[T, hd/2] in fp32, computed as HF does
 * (inv_freq = 1/theta^(2i/hd) in fp32, angle = pos*inv_freq in fp32). */
void ops_rope_table(float *cos, float *sin, int T, int hd, double theta);

/* ---- Subcommand (ops/cli.c) -------------------------------------------------------------
 * titan kernels [list|test|bench] [NAME] [options]: argv[1] is "kernels". Returns 0 or -1
 * with err filled; --help prints the usage to stdout and returns 0. The bench's --flavor
 * takes the model dims from the model's flavor registry, which ops does not see (it sits
 * below the model): flavor_dims fills ctx's model fields (not batch, seq_len) from a flavor
 * name; NULL refuses --flavor. */
typedef int (*ops_flavor_dims_fn)(const char *flavor, ops_ctx *ctx, base_err *err);
int ops_cmd_kernels(int argc, char **argv, ops_flavor_dims_fn flavor_dims, base_err *err);
void ops_cmd_kernels_usage(FILE *f);

#endif
