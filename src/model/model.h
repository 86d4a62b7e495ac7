/* model: Qwen3 arguments, the flavor registry, the parameter layout, init, and the
 * forward and hand-written backward of the dense model.
 *
 * Parameters live in one contiguous fp32 allocation split into units: unit 0 is the
 * token embedding, units 1..L the transformer blocks, unit L+1 the final norm and (when
 * untied) the lm_head. Each unit is a flat buffer (the FSDP shard unit later); named views
 * into it come from a size table, in this fixed order per block:
 *   attention_norm[D], wq[H*hd,D], wk[G*hd,D], wv[G*hd,D], q_norm[hd], k_norm[hd],
 *   wo[D,H*hd], ffn_norm[D], w1[F,D], w3[F,D], w2[D,F]
 * m->params lists the parameters in that order, their offsets increasing. Gradients mirror
 * the parameters exactly (same offsets).
 *
 * Tensor parallelism (model_build_opts.tp, Megatron style with sequence parallelism): each
 * rank of a TP group of size tp builds the model with LOCAL shapes, so every kernel runs
 * unchanged: n_heads/tp and n_kv_heads/tp whole heads (wq, wk, wv rows; wo columns), ffn_dim/tp
 * FFN columns (w1, w3 rows; w2 columns) and vocab/tp vocabulary rows of the embedding and the
 * lm_head (rank r: ids [r V/tp, (r+1) V/tp)). Norm weights (block, q/k, final) are replicated.
 * m->args holds the local shapes, m->full_args the model's; every parameter records where it
 * sits in the full (tp = 1) layout (model_param.full_offset, tp_split), for init (bitwise the
 * tp = 1 weights), checkpoints and exports (model_tp_runs).
 * The residual stream and the block/final RMSNorms are sharded on the sequence: a rank keeps
 * token rows [r N/tp, (r+1) N/tp) of the N = batch*seq_len rows. Each parallel region
 * (attention, FFN, lm_head+CE) all-gathers its normed input over the group and
 * reduce-scatters its output (partial sums of the row-parallel wo / w2, or of the
 * vocab-parallel embedding) back to the sequence shard; backward swaps the two. The CE is
 * loss-parallel (ops_vocab_shard), unless model_build_opts.loss_parallel_off: then every
 * rank all-gathers the lm_head weight, computes the logits and the CE over the whole
 * vocabulary (torchtitan's disable_loss_parallel: replicated logits) and keeps its vocabulary
 * rows of the weight gradient and its sequence rows of the (then complete) input gradient.
 * n_heads, n_kv_heads (no kv-head replication: refused), ffn_dim, vocab_size and
 * batch*seq_len must divide by tp. The gradients of the replicated norm weights are partial
 * on each rank: the caller sums them over the group once per step (model_tp_runs marks
 * them). Training only: cached inference and model_logits need tp = 1 (gather a full model
 * for those). */
#ifndef TITAN_MODEL_H
#define TITAN_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "ops/ops.h"

/* Every model argument, one row: the model_args field, its names and how each front end
 * takes it. The struct, the JSON codec (checkpoints, model folders), --set and its help, and
 * titan train's [model] schema, help and translation all come from these rows; a new
 * argument also needs its checks (model_args_validate), its value in the flavors and the
 * Hugging Face reader and writer (checkpoint/hf_config.c) and a test case
 * (docs/extending.md).
 *   X(field, type, kind, group, cfg_key, lo, hi, help)
 * type     the field's C type: int or double
 * kind     what --set and model_args.json take: INT (integer >= 0), BOOL (true / false or
 *          1 / 0), POS (real > 0), NONNEG (real >= 0)
 * group    SHAPE (identity: must match for weights to load), MOE (identity when n_experts > 0),
 *          INFO (not compared: in a model folder's model_args.json and, when set, a
 *          training checkpoint's train.model)
 * cfg_key  the [model] field of titan train's config that overrides it (torchtitan's name
 *          where torchtitan has one; --set takes it too)
 * lo, hi   that field's range (a POS field's lo is exclusive)
 * help     that field's help line (docs/config.md is generated from it)
 * Mixture of experts (Qwen3-MoE): every block's FFN is an MoE of n_experts routed experts (0 =
 * dense), top_k a token, each a SwiGLU of width moe_ffn_dim, no shared experts. */
#define MODEL_ARGS_TABLE(X)                                                                        \
    X(dim, int, INT, SHAPE, dim, 1, MODEL_ARG_MAX, "override: model width (titan)")                \
    X(n_layers, int, INT, SHAPE, n_layers, 1, MODEL_ARG_MAX,                                       \
      "override: transformer blocks (titan)")                                                      \
    X(n_heads, int, INT, SHAPE, n_heads, 1, MODEL_ARG_MAX, "override: query heads (titan)")        \
    X(n_kv_heads, int, INT, SHAPE, n_kv_heads, 1, MODEL_ARG_MAX,                                   \
      "override: key/value heads (titan)")                                                         \
    X(head_dim, int, INT, SHAPE, head_dim, 1, MODEL_ARG_MAX, "override: per-head width (titan)")   \
    X(ffn_dim, int, INT, SHAPE, ffn_dim, 1, MODEL_ARG_MAX,                                         \
      "override: SwiGLU hidden width (titan)")                                                     \
    X(vocab_size, int, INT, SHAPE, vocab_size, 1, MODEL_ARG_MAX,                                   \
      "override: vocabulary size (titan)")                                                         \
    X(rope_theta, double, POS, SHAPE, rope_theta, 0, INFINITY, "override: RoPE base (titan)")      \
    X(norm_eps, double, POS, SHAPE, norm_eps, 0, 1, "override: RMSNorm epsilon (titan)")           \
    X(tie_embeddings, int, BOOL, SHAPE, tie_embeddings, 0, 1,                                      \
      "override: lm_head shares the embedding (titan)")                                            \
    X(max_seq_len, int, INT, INFO, max_seq_len, 1, MODEL_ARG_MAX,                                  \
      "override: RoPE context of the flavor (titan)")                                              \
    X(n_experts, int, INT, MOE, num_experts, 1, 65536, "override: MoE routed experts (titan)")     \
    X(top_k, int, INT, MOE, top_k, 1, 64, "override: MoE experts per token (titan)")               \
    X(moe_ffn_dim, int, INT, MOE, moe_inter_dim, 1, MODEL_ARG_MAX,                                 \
      "override: MoE expert hidden width (titan)")                                                 \
    X(norm_topk_prob, int, BOOL, MOE, norm_topk_prob, 0, 1,                                        \
      "override: MoE top-k gates renormalised to sum 1 (HF norm_topk_prob; titan)")                \
    X(router_aux_loss_coef, double, NONNEG, MOE, router_aux_loss_coef, 0, INFINITY,                \
      "override: weight of the aux loss (moe_load_balance = aux_loss; HF, titan)")
/* The largest size or count an INT argument takes (2^30). */
#define MODEL_ARG_MAX 1073741824
/* A MODEL_ARGS_TABLE row's group. */
typedef enum { MODEL_ARG_SHAPE, MODEL_ARG_MOE, MODEL_ARG_INFO } model_arg_group;

typedef struct {
    char flavor[64];
#define MODEL_ARGS_FIELD(field, type, ...) type field;
    MODEL_ARGS_TABLE(MODEL_ARGS_FIELD)
#undef MODEL_ARGS_FIELD
    /* Expert parallelism: experts whose stacks this rank holds (n_experts / ep); 0 = all.
     * Set by model_build in m->args only (never in a config, a checkpoint or full_args). */
    int n_local_experts;
} model_args;

/* Fills *out with a registered flavor: debugmodel, 0.6B, 1.7B, 4B, 8B, 14B, 32B, and the MoE
 * flavors debugmodel_moe, 30B-A3B, 30B-A3B-reduced (4 blocks, 64 experts, top-4), 235B-A22B. */
int model_flavor(const char *name, model_args *out, base_err *err);
/* NULL-terminated list of flavor names. */
const char *const *model_flavor_names(void);
/* Sets one argument by its field or cfg_key name (MODEL_ARGS_TABLE). override: a command
 * line's --set, held to the range of the row's [model] config field (an MoE count may also
 * be 0), as train holds it; else (a checkpoint's model_args.json, which may hold what a HF
 * config.json gave) only to the field's kind (model_args_validate checks the rest). */
int model_args_set(model_args *a, const char *key, const char *value, int override, base_err *err);
/* The names model_args_set takes, "dim, n_layers, ..., n_experts (num_experts), ...": each
 * field, its cfg_key in parentheses where that differs. Returns the length snprintf would. */
int model_args_names(char *buf, size_t n);
int model_args_validate(const model_args *a, base_err *err);
/* The model options of the command line (model/cli.c), at it->argv[it->i]: --flavor NAME
 * (replaces *a) and --set KEY=VALUE (model_args_set). Returns 1 if the option was one of
 * them (*status: 0, or -1 with err filled), else 0. */
int model_args_cli_opt(base_args *it, model_args *a, int *status);
/* Fills ctx's model dims (dim .. moe_ffn_dim; not batch, seq_len) from a registered flavor:
 * the shapes `titan kernels bench --flavor` times (an ops_flavor_dims_fn). */
int model_flavor_dims(const char *flavor, ops_ctx *ctx, base_err *err);

/* model_args <-> JSON (src/model/args.c), the one codec of checkpoints and model folders.
 * IDENTITY: what must match for weights to load into a model (model_args_equal): the SHAPE
 *   rows of MODEL_ARGS_TABLE, and for an MoE (n_experts > 0) the MOE rows.
 * CHECKPOINT: the identity, then the INFO rows that are set (not 0): a training checkpoint's
 *   "train.model" (max_seq_len: the RoPE context an export writes as max_position_embeddings).
 * FULL: every row, with flavor (a titan model folder's model_args.json). */
typedef enum {
    MODEL_ARGS_JSON_IDENTITY,
    MODEL_ARGS_JSON_CHECKPOINT,
    MODEL_ARGS_JSON_FULL
} model_args_json_form;
struct json_t;
/* A new JSON object (the caller owns it), NULL when out of memory. */
struct json_t *model_args_json(const model_args *a, model_args_json_form form);
/* Reads either form into *a: fields absent from j keep *a's value (the caller's defaults); the
 * identity fields must be present (the MoE ones when j has n_experts), every key must be a
 * model argument, and the result must validate. Errors start with `where`. */
int model_args_from_json(const struct json_t *j, const char *where, model_args *a, base_err *err);
/* The group's arguments as "dim 256, n_layers 8, ..., rope_theta 1e+06" (table order; %g for
 * reals). Returns the length snprintf would. */
int model_args_format(const model_args *a, model_arg_group group, char *buf, size_t n);
/* Whether a and b have the same identity (above): 1 equal, 0 not. */
int model_args_equal(const model_args *a, const model_args *b);
/* The identity as compact JSON with sorted keys, for messages; -1 (and "?") when out of memory. */
int model_args_describe(const model_args *a, char *buf, size_t n);
/* The identity fields where have and want differ, "dim 128 (this run 64), vocab_size ..."
 * into buf (a message naming two models names what differs first: the whole identities are
 * ~400 bytes each). */
int model_args_diff(const model_args *have, const model_args *want, char *buf, size_t n);

typedef struct {
    char name[96];    /* torchtitan name, e.g. "layers.3.attention.wq.weight" */
    char hf_name[96]; /* Hugging Face name, e.g. "model.layers.3.self_attn.q_proj.weight"; an
                         expert stack [E, ..] has one HF tensor per expert: "*" stands for the
                         expert index ("model.layers.3.mlp.experts.*.gate_proj.weight") */
    int unit;         /* which unit's buffer holds it */
    size_t offset;    /* float offset within the whole parameter allocation */
    size_t numel;
    int ndim;
    int64_t shape[3];
    int is_norm; /* RMSNorm weight (init ones) */
    /* The ops that read it, forward and backward: bits 1u << OPS_<kind> (the matrices:
     * matmul or grouped_mm; the lm_head and a tied embedding: lmhead_ce and matmul (the
     * logits of model_lm_head); the embedding table: embedding; norm weights: rmsnorm and
     * add_rmsnorm). See model_param_prec. */
    unsigned readers;
    /* Tensor parallelism: where this (local) parameter sits in the full layout. tp_split:
     * MODEL_TP_REPLICATED (the whole tensor on every rank), MODEL_TP_ROWS (rank r holds rows
     * [r d0, (r+1) d0) of the full tensor's tp d0 rows) or MODEL_TP_COLS (columns
     * [r d1, (r+1) d1) of every row). tp = 1: full_offset = offset, replicated. */
    size_t full_offset;
    int tp_split;
} model_param;

/* MODEL_EP_EXPERTS: an expert stack [E/ep, ..] of EP rank r: experts [r E/ep, (r+1) E/ep). */
enum { MODEL_TP_REPLICATED, MODEL_TP_ROWS, MODEL_TP_COLS, MODEL_EP_EXPERTS };

/* A tensor-parallel group as the model sees it: its size, this rank's index, and the three
 * collectives it needs (every rank of the group calls them in the same order). NULL
 * (or size 1): no tensor parallelism. */
typedef struct {
    int size, rank;
    /* full[size * n] = every rank's local[n], in rank order; bf16 = 1: each value rounded to
     * bf16 on the way (2 bytes on the wire), full receiving the rounded values (the model asks
     * for it only where every consumer of full rounds it to bf16 anyway: bitwise the same) */
    void (*allgather)(void *ctx, float *full, const float *local, size_t n, int bf16);
    /* local[n] = the sum over ranks of their full[rank n, (rank + 1) n) */
    void (*reduce_scatter)(void *ctx, float *local, const float *full, size_t n);
    /* x[n] = max (max = 1) or sum of the ranks' x[n] */
    void (*allreduce)(void *ctx, double *x, int n, int max);
    void *ctx;
} model_tp;

/* Expert parallelism as the model sees it (NULL or size 1: none). The ep ranks of a group
 * each route their own tokens over all n_experts; rank r holds the expert stacks of experts
 * [r E/ep, (r+1) E/ep) of every MoE block and runs them on the rows every rank routed to
 * them. Two collectives (every rank of the group calls them in the same order):
 *   alltoall: recv[size * n] = the n ints each rank sent this one (send[r n ..] goes to r)
 *   alltoallv: rows of `row` bytes, scount[r] of them to rank r (send in rank order); recv
 *              gets rcount[r] rows from each rank r, in rank order */
typedef struct {
    int size, rank;
    void (*alltoall)(void *ctx, const int32_t *send, int32_t *recv, int n);
    void (*alltoallv)(void *ctx, const void *send, const int32_t *scount, void *recv,
                      const int32_t *rcount, size_t row);
    void *ctx;
} model_ep;

typedef struct {
    char name[32]; /* "tok_embeddings", "layers.3", "head" */
    size_t offset, numel;
} model_unit;

/* Per-component parameter counts (for titan inspect). */
typedef struct {
    int64_t embedding, attention, qk_norm, ffn, router, experts, norms, lm_head, total;
    int64_t active; /* per token: total minus the experts a token does not use (MoE) */
} model_counts;
void model_count_params(const model_args *a, model_counts *c);
/* The names (torchtitan FQNs, model_param.name) and element counts (the whole tensor, every
 * expert) of a's parameters in their fixed order, one call of fn each: what a model built
 * from a holds, without building it. */
void model_param_names(const model_args *a, void (*fn)(void *ctx, const char *name, int64_t numel),
                       void *ctx);
/* torchtitan 0.3's FQN of the parameter titan names name (titan's names are torchtitan
 * v0.2.2's, as its checkpoints': 0.3 renamed output.weight lm_head.weight, fused attention's
 * wq / wk / wv into one attention.qkv_linear.wqkv.weight and calls the stacked experts
 * moe.routed_experts.inner_experts.w1_EFD / w3_EFD / w2_EDF), into buf[n]; other names as
 * they are. Several titan parameters share one 0.3 name (wq, wk, wv). Returns buf. */
const char *model_param_name_03(const char *name, char *buf, size_t n);

/* Activation checkpointing: a checkpointed block keeps only its input and recomputes its
 * forward in backward (bitwise the same values). FULL: every block. SELECTIVE: torchtitan's
 * layer-selective AC, every ac_every-th block, counting from 1: block l (0-based) when
 * (l + 1) % ac_every == 0; ac_every = 0 checkpoints every block. */
typedef enum { MODEL_AC_NONE, MODEL_AC_FULL, MODEL_AC_SELECTIVE } model_ac_mode;
/* Whether block l is checkpointed under (ac, ac_every). */
int model_ac_block(model_ac_mode ac, int ac_every, int l);
/* How many of n_layers blocks are. */
int model_ac_blocks(model_ac_mode ac, int ac_every, int n_layers);

/* MoE load balancing:
 *   NONE      plain top-k routing.
 *   AUX_LOSS  Hugging Face Qwen3-MoE's auxiliary loss (Switch-style load_balancing_loss_func
 *             over all blocks of a microbatch: E * sum_e f_e * P_e, f_e = share of routed rows
 *             to expert e, P_e = mean router probability), weighted by router_aux_loss_coef.
 *   BIAS      torchtitan's auxiliary-loss-free expert bias (DeepSeek-V3): a per-block [E] bias
 *             added to the scores for top-k selection only (gates use the un-biased scores),
 *             updated once per optimizer step by model_moe_update_bias. */
typedef enum { MODEL_BALANCE_NONE, MODEL_BALANCE_AUX_LOSS, MODEL_BALANCE_BIAS } model_balance;

typedef struct model_acts model_acts; /* activation buffers (private) */

/* Unit hooks: the model calls hook(ctx, unit, phase) around every use of a unit's
 * parameters, so a caller can keep them elsewhere (FSDP: all-gather before, release after,
 * reduce-scatter the gradients after the unit's backward). Order per training microbatch:
 * FWD_BEGIN/END of units 0..L (embedding, blocks), FWD_BEGIN of the head unit L+1, then
 * BWD_BEGIN(L+1) (its forward and backward are fused in the loss), BWD_END(L+1), and
 * BWD_BEGIN/END of units L..0. Forward-only passes end with FWD_END(L+1). A tied head reads
 * unit 0's parameters and accumulates into its gradients between FWD_BEGIN(L+1) and
 * BWD_END(L+1). */
typedef enum { MODEL_FWD_BEGIN, MODEL_FWD_END, MODEL_BWD_BEGIN, MODEL_BWD_END } model_phase;
/* A hook returns, for a BEGIN phase, which of the unit's parameters it wrote into the bf16
 * weight copy (w16, where its format is 2-byte bf16) as the bf16 rounding of what it put in
 * w, so that the model does not convert them again: MODEL_W16_DENSE (all but the unit's EP
 * expert stacks), MODEL_W16_EXPERTS (those); 0 otherwise (FSDP: a bf16 all-gather received
 * straight into the copy). */
enum { MODEL_W16_DENSE = 1, MODEL_W16_EXPERTS = 2 };
typedef int (*model_hook_fn)(void *ctx, int unit, model_phase phase);

typedef struct {
    model_args args;      /* this rank's shapes (the model's when tp = 1) */
    model_args full_args; /* the model's */
    model_tp tp;          /* size 1 when not tensor-parallel */
    model_ep ep;          /* size 1 when not expert-parallel */
    size_t full_floats;   /* parameters of the full layout (n_floats when tp = 1) */
    int n_params, n_units;
    model_param *params;
    model_unit *units;
    size_t n_floats; /* total parameter count */
    float *w;        /* [n_floats] parameters */
    float *g;        /* [n_floats] gradients (allocated by model_build when training) */
    ops_table *ops;  /* [n_layers + 2]: tok_embeddings, layers.0.., head */
    /* bf16 mixed precision (prec OPS_PREC_BF16; NULL / 0 in fp32): w16 is the bf16 copy of w
     * the GEMMs read (the ops weight mirror of [w, w + n_floats), in the bf16 engine's format:
     * ops_bf16_mirror_bytes), converted per unit on the unit's first use after
     * model_weights_changed (so once per step, after FSDP's gather); w16_fresh[n_units] says
     * which units are up to date. */
    ops_prec prec;
    void *w16;
    unsigned char *w16_fresh;
    unsigned char *w16_param; /* [n_params] model_param_in_bf16_copy, once the ops resolve */
    const float *w16_base;    /* the w the mirror was registered for */
    /* FSDP with sharded units (set by the trainer): a unit's copy lives only while the unit is
     * in use (made after each gather, its pages returned at the unit's FWD_END / BWD_END, as
     * FSDP2 all-gathers bf16 per use), so the copy never holds the whole model on a rank */
    int w16_transient;
    /* how many expert stacks w16 keeps in their grouped_mm's own layout
     * (ops_bf16_mirror_layout_grouped; never in a transient copy, which FSDP's gathers write) */
    int w16_layouts;
    int exchange_f32; /* model_build_opts.exchange_f32 */
    int batch, seq_len;
    model_ac_mode ac;
    int ac_every;               /* SELECTIVE: checkpoint every ac_every-th block */
    int loss_parallel_off;      /* tp > 1 and model_build_opts.loss_parallel_off */
    int ce_chunk;               /* tokens per lm_head+CE chunk */
    float *rope_cos, *rope_sin; /* [seq_len, hd/2] */
    /* Document masking (model_set_positions): the microbatch's document segments as token
     * offsets into [batch*seq_len], seg[0 .. n_seg] (seg[n_seg] = batch*seq_len); NULL: each
     * window is one causal sequence */
    int32_t *seg;
    int n_seg;
    int docs; /* model_build_opts.docs */
    model_acts *acts;
    model_hook_fn hook; /* NULL: parameters are always in w */
    void *hook_ctx;
    int external; /* w and g belong to the caller (model_build_external) */
    /* MoE (n_experts > 0; all NULL / 0 for a dense model) */
    model_balance balance;
    double bias_rate;    /* BIAS: update step (torchtitan load_balance_coeff) */
    int force_balance;   /* route round-robin (model_build_opts.moe_force_balance) */
    float *moe_bias;     /* [L,E] expert bias for selection (BIAS; zeros otherwise). Not a
                            parameter: no gradient, no AdamW, not in HF exports; the trainer
                            keeps it in the training checkpoint's state */
    int64_t *moe_counts; /* [L,E] rows routed to each expert by the training forwards since
                            model_zero_grad (the AC recompute is not counted) */
    double moe_aux_loss; /* AUX_LOSS: the last microbatch's auxiliary loss, before the coef */
    int g_set_to_none;   /* model_grad_set_to_none: the next backward writes g, not adds (1;
                            2: g reads as zeros already) */
    float aux_scale;     /* AUX_LOSS: gradient weight of one microbatch's auxiliary loss;
                            model_build sets router_aux_loss_coef (one microbatch per step); a
                            trainer with n microbatches (x dp ranks) sets coef / n */
    int acts_in_grads;   /* model_build_opts.acts_in_grads, where it took effect */
} model;

typedef struct {
    int batch, seq_len;
    model_ac_mode ac;
    int with_grads; /* allocate gradients and backward scratch */
    const ops_override *overrides;
    int n_overrides;
    int ce_chunk; /* tokens per lm_head+CE chunk; 0 = about 64M logits (256 MiB) per chunk */
    model_balance balance; /* MoE load balancing (ignored by dense models) */
    double bias_rate;      /* BIAS update step; 0 = torchtitan's 1e-3 */
    const model_tp *tp;    /* NULL: no tensor parallelism */
    const model_ep *ep;    /* NULL: no expert parallelism (MoE models only; not with tp) */
    int ac_every;          /* SELECTIVE: checkpoint every ac_every-th block (0 = every block) */
    /* torchtitan's debug.moe_force_load_balance (benchmarking): assignment k of token n (in
     * this rank's microbatch) goes to expert (n*K + k) mod E whatever the scores; the gates
     * are still the router probabilities of those experts (renormalised when norm_topk_prob),
     * so gradients flow as usual. Every expert gets N*K/E rows when E divides N*K. */
    int moe_force_balance;
    int loss_parallel_off; /* tp > 1: the CE on the whole vocabulary (see the top) */
    /* training.mixed_precision_param: OPS_PREC_BF16 resolves the ops' bf16 implementations
     * (GEMM operands in bf16, fp32 accumulation) and keeps a bf16 copy of the weights */
    ops_prec prec;
    /* bf16: TP / EP exchanges whose values the receiver rounds to bf16 anyway (bf16 GEMM
     * operands, MoE expert outputs) move bf16 (see model_bf16_wire and model_bf16_wire_kept
     * in model/internal.h); exchange_f32 = 1 moves them in fp32 (the tests' reference: the
     * losses are bitwise the same) */
    int exchange_f32;
    /* Block l's saved activations in the pages of the gradient written after its backward
     * (block l-1's; block 0's in an untied embedding's), as far as they fit, instead of in the
     * activation buffer: what PyTorch's caching allocator does when it hands a freed
     * activation's memory to the gradients made after it, planned once. Needs a caller that
     * runs each forward with a backward that writes every gradient (model_grad_set_to_none
     * before it: one microbatch a step, on one rank): any forward leaves the block gradients
     * overwritten, and a backward that would add to them is a fatal error. Ignored without
     * gradients or with parameters built external (FSDP). */
    int acts_in_grads;
    /* document masking (model_set_positions): attention then runs once per document, batch 1
     * and 1 to seq_len tokens, the shapes its kernels' constraints are checked at */
    int docs;
} model_build_opts;

/* Lays out and allocates parameters (zeroed), gradients and activations for microbatches
 * of [batch, seq_len], and resolves the ops table. Call model_free afterwards whether or not
 * it succeeded (a failed build may hold partial allocations). */
int model_build(model *m, const model_args *a, const model_build_opts *o, base_err *err);
void model_free(model *m);
/* model_build with the parameters left unwritten, not zeroed, for a caller that loads every
 * one next (ckpt_load_model_set, ckpt_source_load): zeroing 4 bytes per parameter first
 * doubled the memory traffic of a load. Their values are undefined until then. */
int model_build_unset(model *m, const model_args *a, const model_build_opts *o, base_err *err);
/* model_build without allocating w or g: the caller sets m->w (and m->g when training) to
 * buffers it owns (FSDP's sparse resident buffers) and model_free leaves them alone. */
int model_build_external(model *m, const model_args *a, const model_build_opts *o, base_err *err);
/* The parameter table only (args, params, units, n_floats; nothing allocated for weights,
 * no ops): what a checkpoint holds, for checking and listing files. MoE arguments are
 * accepted. Release with model_free. */
int model_describe(model *m, const model_args *a, base_err *err);

/* Initial weights. Element e of parameter p is drawn from base_rng_normal(seed, hash(p.name),
 * e) at its index e in the full tensor: independent of any layout (TP, EP, FSDP).
 * MODEL_INIT_NORMAL (torchtitan HEAD for dense flavors): normal(0, 0.02) for every matrix
 *   (the tied embedding/lm_head once), ones for every RMSNorm weight.
 * MODEL_INIT_TORCHTITAN (torchtitan v0.2.2 Qwen3Model.init_weights): truncated normals,
 *   with s_l = 0.02/sqrt(2(l+1)) for block l (depth_init) or 0.02/sqrt(2 n_layers):
 *   wq, wk, wv, FFN/expert w1: std 0.02; wo, FFN/expert w2 and w3, router gate: std s_l
 *   (all cut at +-2 absolute, which never binds); the untied embedding normal(0, 1), uncut;
 *   lm_head (and so the tied embedding) std D^-0.5 cut at +-3 D^-0.5; norms 1. A draw
 *   outside its cut is redrawn at index e + k 2^40 (k = 1, 2, ...): the normal conditioned
 *   on the cut, torch's trunc_normal_ distribution.
 * MODEL_INIT_TORCHTITAN_03 (torchtitan 0.3's Qwen3 configs, models/qwen3/__init__.py): as
 *   NORMAL (uncut), but an MoE model's attention wo and expert w2 draw with std
 *   0.02/sqrt(2 n_layers) (Megatron's scaled residual outputs); a dense model's weights are
 *   NORMAL's bit for bit. */
typedef enum {
    MODEL_INIT_NORMAL = 0,
    MODEL_INIT_TORCHTITAN,
    MODEL_INIT_TORCHTITAN_03
} model_init_scheme;
typedef struct {
    model_init_scheme scheme;
    int std_by_n_layers; /* torchtitan with depth_init = false */
} model_init;
/* Parses "normal" | "torchtitan" | "torchtitan_0.3" (the config's model.init_weights). */
int model_init_parse(const char *name, model_init_scheme *out, base_err *err);
void model_init_weights(model *m, uint64_t seed); /* MODEL_INIT_NORMAL */
/* The parameters of one unit only (FSDP initialises unit by unit); init NULL = normal. */
void model_init_unit_weights(model *m, int unit, uint64_t seed);
void model_init_unit(model *m, int unit, uint64_t seed, const model_init *init);

/* Tensor parallelism: splits the local parameter range [off, off + len) into runs whose rows
 * are contiguous in the local layout and equally spaced in the full one: one run per
 * parameter for replicated and row-split tensors; for column-split ones ([rows, cols/tp] of
 * a full [rows, cols]) one strided run of the whole rows (full_stride = cols) plus a 1-row
 * run for a partial first or last row when the range cuts one. Writes at most max runs to out
 * (NULL: count only) and returns how many there are. */
typedef struct {
    size_t offset, full_offset; /* first element, local and full layouts */
    size_t row_len, rows;       /* rows x row_len elements, contiguous locally */
    size_t full_stride;         /* between row starts in the full layout (row_len if 1 row) */
    int replicated;             /* a norm weight: the same on every rank of the group */
} model_run;
size_t model_tp_runs(const model *m, size_t off, size_t len, model_run *out, size_t max);
/* Checks that a_full can be split over tp ranks (divisibility, dense) and fills *local with
 * the per-rank shapes. */
int model_tp_local_args(const model_args *a_full, int tp, model_args *local, base_err *err);

/* The precision parameter p is computed with: OPS_PREC_BF16 when every op that reads it (its
 * readers, in the tables of the units that use it: its own, and the head's for a tied
 * embedding) is a bf16 implementation, so that only its bf16 rounding ever enters a result:
 * a copy rounded to bf16 (round to nearest even, idempotent) then gives bitwise the same
 * training (FSDP's bf16 all-gathers, dist_fsdp_cfg.exact). OPS_PREC_F32 when one reader
 * computes with its fp32 value (norm weights, the embedding table, hence a tied lm_head) or
 * the model is fp32. A model without ops tables (model_describe: `titan plan`) answers for
 * the default implementations under m->prec (set by the caller). */
ops_prec model_param_prec(const model *m, const model_param *p);
/* Whether the bf16 weight copy (w16) holds p: some reader of it is a bf16 implementation (the
 * matrices, a tied embedding through the lm_head). The others (norm weights, an untied
 * embedding) are never converted, and their part of the copy is never touched. */
int model_param_in_bf16_copy(const model *m, const model_param *p);

/* Whether unit u's own backward reads its parameters: some op it calls has a backward that
 * receives a weight (OPS_BWD_READS_WEIGHTS). 0 for the embedding unit, whose backward only
 * scatters rows of dout into the table's gradient; 1 for blocks and the head. A tied
 * embedding is also read by the head's backward (lmhead_ce): that is the head's, and FSDP
 * keeps such a unit gathered from forward on (dist_fsdp_cfg.pinned_unit). Answers for a
 * described model too (`titan plan`). FSDP does not gather a unit again for a backward that
 * reads none of its parameters (dist_unit.bwd_without_params). */
int model_unit_bwd_reads_params(const model *m, int u);
/* The kernels a built model runs other than its precision's defaults, with the units that run
 * them (ops_choices: "rope=rope_bhsd at layers.1-3 (plugin ./librope_bhsd.so); ..."), into
 * buf; "" and 0 when every unit runs the defaults. Returns the number of choices. */
int model_kernel_choices(const model *m, char *buf, size_t size);
/* The constraints of the kernels a built model resolved (checked at build for the shapes its
 * calls get on this rank at its batch and seq_len: ops_ctx_sites) on the whole model
 * (full_args, no tensor, sequence or expert split: what inference runs, on the copy a parallel
 * run assembles to sample) at another batch and seq_len: 0, or -1 naming kernel, unit and
 * rule. */
int model_kernels_fit(const model *m, int batch, int seq_len, base_err *err);
/* Whether the model's kernels accept what inference (model_infer_new with max_len) calls
 * them with: batch 1 and 1 .. min(max_len, its chunk) tokens per call; -1 naming the kernel,
 * unit, token count and rule otherwise. model_infer_new checks it; a trainer that samples
 * after training checks it before. */
int model_infer_check(const model *m, int max_len, base_err *err);

const model_param *model_find_param(const model *m, const char *name);
const model_param *model_find_hf_param(const model *m, const char *hf_name);

/* Zeroes the gradients and the MoE routing counts (a new optimizer step begins); in bf16 also
 * model_weights_changed. */
void model_zero_grad(model *m);
/* The next backward (model_step_microbatch with gradients) WRITES every parameter's gradient
 * instead of adding to it, as after PyTorch's zero_grad(set_to_none=True): g's contents are
 * dropped with no pass over them, and no product reads them back (the ops' dw_acc 0,
 * ops/oplist.h); the backwards after it add as usual. The trainer's step: its first microbatch,
 * or every microbatch where FSDP reduces and drops each unit's gradients after its backward.
 * zeros: g reads as zeros already (FSDP's dropped pages), so the one gradient an op only adds
 * to (an untied embedding's) is not zeroed first, which would fault in all its pages.
 * model_zero_grad cancels it. */
void model_grad_set_to_none(model *m, int zeros);
/* bf16: the weights have changed (an optimizer step, a load): every unit's bf16 copy is
 * remade on its next use. A trainer calls it once per step before the first microbatch; the
 * model calls it itself in model_logits and model_infer_new. No-op in fp32. */
void model_weights_changed(model *m);
/* bf16: whoever just wrote w also wrote every element of the bf16 copy that
 * model_param_in_bf16_copy's parameters hold, from the new values (the optimizer,
 * optim_bf16_copy): every unit's copy is current, none is remade. Only for a copy that is not
 * transient (FSDP-sharded units remake theirs after each gather); no-op before the copy has
 * served a step (the GEMMs find it through a registration made on its first use). Returns 1
 * where it marked the copy current, 0 where it did nothing (the caller must then say the
 * weights changed before the next use, model_weights_changed). */
int model_bf16_copy_current(model *m);

/* ---- MoE load balancing and statistics (model/moe.c) --------------------------------- */
/* torchtitan's expert-bias update, once per optimizer step, before AdamW: per block l,
 * d = bias_rate * sign(mean(c_l) - c_l), d -= mean(d) (the bias stays zero-mean), bias_l += d.
 * counts: [L,E] rows per expert summed over the data-parallel ranks (an all-reduce of every
 * rank's m->moe_counts); NULL = this process's m->moe_counts. No-op unless balance is BIAS. */
void model_moe_update_bias(model *m, const int64_t *counts);
/* Rows routed to each expert of block l since model_zero_grad: min, mean and max over the
 * experts. */
void model_moe_stats(const model *m, int l, double *min, double *mean, double *max);

/* MoE memory, for planning (bytes; fp32 throughout). Parameters: the expert stacks and
 * routers of all blocks (each costs 4x: weights, gradients, two AdamW moments). Activations
 * per microbatch of N = batch*seq_len tokens and R = N*top_k routed rows, per block kept for
 * backward (ac none; with ac full one block's set): router probabilities [N,E], gates, expert
 * ids and sorted positions [N,K] each, group offsets [E+1], the expert gate/up projections
 * [R,Fe] x2 and the unweighted expert outputs [R,D]. Shared block scratch: the routed rows
 * [R,D] and the expert activation [R,Fe]; with gradients also d(routed rows) [R,D],
 * three [R,Fe] gradients and the router-logit gradient [N,E]. */
typedef struct {
    double expert_params, router_params; /* parameter bytes (weights only) */
    double per_block_saved;              /* bytes kept per block for backward */
    double saved;                        /* all blocks (ac none) or one (ac full) + inputs */
    double scratch;                      /* the shared routed-token scratch */
    double total_train;                  /* 4 x params + saved + scratch */
} model_moe_mem;
/* ac: NONE or FULL (SELECTIVE is counted as NONE, an upper bound). */
void model_moe_memory(const model_args *a, int batch, int seq_len, model_ac_mode ac, int with_grads,
                      model_moe_mem *out);

/* ---- training forward and backward (model/forward.c) --------------------------------- */

/* One microbatch: tokens/targets [batch*seq_len] (targets may hold OPS_IGNORE_INDEX).
 * Runs forward, the fused lm_head + CE, and (when grad_scale != 0 and the model has
 * gradients) the backward, ACCUMULATING into m->g the gradient of grad_scale * loss_sum
 * (+ m->aux_scale * m->moe_aux_loss for an MoE model trained with AUX_LOSS).
 * grad_scale is 1 / (global number of valid targets of the whole step).
 * Returns the cross-entropy loss SUM over valid targets (the auxiliary loss is in
 * m->moe_aux_loss); *n_valid receives their count. */
double model_step_microbatch(model *m, const int32_t *tokens, const int32_t *targets,
                             float grad_scale, int64_t *n_valid);

/* Document masking (torchtitan's block_causal): positions[batch*seq_len] are each token's
 * position in its document's part of its window (0 where a document, or the window, starts; +1
 * per token after), as torchtitan 0.3's data loader gives them. The next microbatches then run
 * attention causal within each document segment only, by calling the attention implementation
 * once per segment (batch 1, the segment's tokens: any implementation serves unchanged); lse
 * keeps [B, H, T]'s size, each segment's [H, len] block at H * its start within its window.
 * RoPE stays at window positions: its scores depend on the offset between query and key only,
 * so within a document, where attention now stays, they equal those at the document's own
 * positions (HF's packed sequences agree to fp32 rounding: test_hf_parity's docs reference).
 * A model built with docs runs whole windows until its first positions (the trainer sets them
 * before every microbatch, training and validation). NULL: whole windows again. -1 with err
 * when positions are not such runs (a window not starting at 0, a jump), leaving the segments
 * unchanged, or the model was not built with model_build_opts.docs. */
int model_set_positions(model *m, const int32_t *positions, base_err *err);

/* Bytes of the activation buffer model_build allocated (for memory estimates; with
 * acts_in_grads, without the activations it put in the gradients' pages). */
size_t model_activation_bytes(const model *m);
/* The same without building: what model_build(a, o) would allocate (titan plan). */
size_t model_activation_bytes_for(const model_args *a, const model_build_opts *o);

/* Logits for tokens [batch*seq_len] into logits[batch*seq_len, vocab] (inference/tests). */
void model_logits(model *m, const int32_t *tokens, float *logits);

/* ---- cached inference (src/model/generate.c) ------------------------------------------
 * An inference state runs ONE sequence through the same block forward as training
 * (model_block_forward with a KV-cache geometry), keeping k (after q/k norm + RoPE) and v of
 * every past position per layer: [L, max_len, G, hd] fp32 each. Tokens are appended in calls
 * of any length (split internally into chunks of at most 2048 rows); the logits of a position
 * equal model_logits' at that position up to fp32 summation order (GEMMs of other row counts,
 * attention_kv instead of the tiled kernel). The model must stay alive and unchanged; its
 * own activations are not used (a model built with batch 1, seq_len 1 is enough). */
typedef struct model_infer model_infer;

/* Allocates the cache for max_len positions (RoPE tables included). */
int model_infer_new(model_infer **out, const model *m, int max_len, base_err *err);
void model_infer_free(model_infer *s);
/* Positions filled / capacity. */
int model_infer_len(const model_infer *s);
int model_infer_max_len(const model_infer *s);
/* The model's vocabulary size (the length of a logits row). */
int model_infer_vocab(const model_infer *s);
/* Forgets the sequence (the next token is position 0 again). */
void model_infer_reset(model_infer *s);
/* Appends tokens[0..n) at positions len..len+n-1 and writes logits: [n, V] of every new
 * position when all_logits, else [V] of the last one (logits may be NULL for none). Fails,
 * changing nothing, when the cache would overflow or a token is outside [0, vocab). */
int model_infer_forward(model_infer *s, const int32_t *tokens, int n, float *logits, int all_logits,
                        base_err *err);

/* Next-token sampling, Hugging Face generate() semantics and order: logits / temperature,
 * then top-k (keep the k largest; ties broken by lower id), then top-p on the softmax of what
 * is left (keep the smallest prefix, by decreasing probability, whose cumulative probability
 * reaches top_p; always at least one token), then a draw from the renormalised survivors with
 * u = base_rng_uniform(seed, MODEL_SAMPLE_STREAM, index): the same (seed, index) and logits
 * give the same token. temperature 0 (or top_k 1) is greedy: the argmax, lowest id on ties. */
typedef struct {
    double temperature; /* >= 0; 0 = greedy */
    int top_k;          /* 0 = off */
    double top_p;       /* (0, 1]; 1 = off */
    uint64_t seed;
} model_sampler;
#define MODEL_SAMPLE_STREAM 0x5a3e
/* Returns the token id, or -1 when out of memory (it allocates V pairs for top-k / top-p). */
int32_t model_sample(const float *logits, int V, const model_sampler *s, uint64_t index);

/* ---- FLOPs (model/qwen3.c) ------------------------------------------------------------ */
/* FLOPs per token, torchtitan HEAD formula: 6 * P_matmul + 12 * L * H * hd * seq_len,
 * P_matmul = all parameters except the (untied) embedding; the tied matrix counts once; MoE:
 * the active parameters (router + top_k / n_experts of the experts, spec §4.6). */
double model_flops_per_token(const model_args *a, int seq_len);

#endif
