/* Private to the model module: the pieces training forward (forward.c) and cached inference
 * (generate.c) share. */
#ifndef TITAN_MODEL_INTERNAL_H
#define TITAN_MODEL_INTERNAL_H

#include "model/model.h"

int model_layout(model *m, base_err *err);
/* bf16: remakes every unit's bf16 weight copy now (inference, whose weights are all present
 * and never change under a model_infer); no-op in fp32. */
void model_bf16_sync_all(const model *m);
/* Whether a TP / EP exchange whose received values feed nothing but GEMM operands of op k
 * (in the unit's resolved table t) moves them in bf16: in a bf16 model whose op k rounds its
 * operands itself (an OPS_PREC_BF16 implementation; a plugin computes on fp32, so it receives
 * fp32), unless exchange_f32. Rounding before the exchange then gives the consumer the values
 * it computes on anyway (bf16(bf16(x)) = bf16(x)): bitwise the same results, half the bytes.
 * Sums (reduce-scatters, the EP combine, gradients sent back) never qualify. */
int model_bf16_wire(const model *m, const ops_table *t, ops_kind k);
/* Whether op k of table t runs a bf16 implementation in a bf16 model. */
int model_runs16(const model *m, const ops_table *t, ops_kind k);
/* Whether an EP exchange that delivers a model_act16 tensor of a block (table t), which its
 * receiver passes through model_keep16 before anything reads it, moves bf16: exactly where
 * model_keep16 rounds (model_block16), unless exchange_f32. Sender and receiver then hold the
 * same values (bf16(bf16(y)) = bf16(y)). Where the block keeps fp32 (an fp32 model, an fp32
 * override or plugin of matmul, attention or grouped_mm, even when its grouped_mm alone is
 * bf16 and model_bf16_wire would move its dispatch bf16), the tensor moves fp32. */
int model_bf16_wire_kept(const model *m, const ops_table *t);

/* MoE state of one block, saved by forward for backward (N token rows, K = top_k, E experts,
 * R = N*K routed rows; "sorted" = grouped by expert, stable in token order). */
typedef struct {
    float *probs;  /* [N,E] softmax of the router logits (fp32) */
    float *gates;  /* [N,K] gate weight of each chosen expert (renormalised if norm_topk_prob) */
    int32_t *topi; /* [N,K] chosen experts by decreasing (biased) score, ties to the lower id */
    int32_t *slot; /* [N,K] sorted row of assignment (n, k) */
    int32_t *tok;  /* [R] token of each sorted row */
    int32_t *offs; /* [E+1] first sorted row of each expert; offs[E] = R */
    float *y;      /* [R,D] expert outputs (unweighted), sorted */
    /* Expert parallelism only (ep > 1; NULL otherwise). El = E/ep local experts, C = R*ep the
     * most rows this rank's experts can receive (every rank routing all rows here), Rl the
     * rows received this step (loffs[El]). Received rows arrive by source rank, and within a
     * source by expert; the local order groups them by local expert, then source rank, then
     * the source's order (deterministic). */
    float *xl;      /* [C,D] the received rows in local order (the experts' input) */
    int32_t *perm;  /* [C] received row i (arrival order) -> its local row */
    int32_t *loffs; /* [El+1] first local row of each local expert; loffs[El] = Rl */
    int32_t *cnt;   /* [2 ep El + 2 ep]: rows sent to rank p for its local expert e [ep,El],
                       rows received from rank q for local expert e [ep,El], then the rows sent
                       to / received from each rank [ep] x2 (the alltoallv counts) */
} moe_acts;

/* bf16 (m->prec = OPS_PREC_BF16): the saved activations that a GEMM produces and that are
 * kept as bf16, as autocast's GEMM outputs are (the residual stream x, xm, the log-sum-exps,
 * the norms' statistics and the MoE routing stay fp32). Forward rounds each in place where it
 * is made, so forward and backward use the same values; training stores the bf16 bits in the
 * layer's store and backward expands them (exactly) into the fp32 working set. */
typedef enum {
    MODEL_ACT16_QP,   /* q projection before the q norm [N,H*hd] */
    MODEL_ACT16_KP,   /* k projection before the k norm [N,G*hd] */
    MODEL_ACT16_V,    /* v projection [N,G*hd] */
    MODEL_ACT16_O,    /* attention output [N,H*hd] */
    MODEL_ACT16_GATE, /* FFN gate projection [N,F]; MoE [rows,Fe] sorted */
    MODEL_ACT16_UP,   /* FFN up projection, as gate */
    MODEL_ACT16_Y,    /* MoE expert outputs [R,D] */
    MODEL_ACT16_XL,   /* MoE under EP: the received rows [Rl,D] */
    MODEL_ACT16_N
} model_act16;

/* Expert parallelism degree of a (local) model_args: n_experts / n_local_experts. */
static inline int model_moe_ep(const model_args *a) {
    return a->n_local_experts > 0 ? a->n_experts / a->n_local_experts : 1;
}

/* One block's activations for N = B*T token rows (training keeps one per layer; inference
 * one scratch set, with k and v pointing into the KV cache). */
/* N = B*T rows; n = N/tp: the sequence shard of a tensor-parallel rank (n = N when tp = 1).
 * H, G, F: this rank's heads, kv heads and FFN columns. */
typedef struct {
    float *x;               /* [n,D] layer input (residual stream) */
    float *xm;              /* [n,D] residual after attention */
    float *qp, *kp, *v;     /* [N,H*hd], [N,G*hd] x2: projections before q/k norm */
    float *q, *k;           /* after q/k norm and RoPE (shared, recomputed in backward) */
    float *o;               /* [N,H*hd] attention output */
    float *lse;             /* [B,H,T] */
    float *gate, *up;       /* [N,F]; MoE: [R,moe_ffn_dim] expert gate/up projections, sorted */
    float *rstd1, *rstd2;   /* [n] */
    float *q_rstd, *k_rstd; /* [N*H], [N*G] */
    moe_acts moe;           /* MoE blocks only */
    /* bf16 training: each model_act16 tensor's store (capacity: its fp32 buffer's) and the
     * elements the last forward kept in it; NULL where nothing is stored (fp32, inference, a
     * checkpointed block, which recomputes instead) */
    uint16_t *b16[MODEL_ACT16_N];
    size_t n16[MODEL_ACT16_N];
} layer_acts;

/* Whether a block whose resolved table is t (NULL: the default implementations, as `titan
 * plan` assumes) is a bf16 block: a bf16 model whose block runs its GEMMs (matmul, attention,
 * and grouped_mm in MoE blocks) on bf16 implementations. A block with an fp32 override or
 * plugin of any of them keeps its model_act16 tensors fp32, as an fp32 run would. Depends on
 * nothing else: the same answer in training, AC recompute, a model without gradients and
 * cached inference, and on every rank (the ranks agree on the config and the precision). */
int model_block16(const model *m, const ops_table *t);
/* bf16 block (model_block16(m, t), and nothing else decides): rounds the first n elements of
 * la's tensor s in place and stores them in la->b16[s] (when there is a store: training, a
 * block not checkpointed); nothing otherwise. */
void model_keep16(const model *m, const ops_table *t, layer_acts *la, model_act16 s, size_t n);
/* A block's SwiGLU on la's gate and up [R, F]. Where it runs on bf16 operands (swiglu/bf16,
 * ops/cpu/swiglu_bf16.c; a bf16 block whose GEMMs beside it read their activations through
 * mirrors: matmul/bf16, grouped_mm/bf16 where ops_bf16_grouped_mirrors, on an engine whose holds
 * read bits, ops_bf16_holds_bits) it reads gate and up as their kept bits (held: backward does not
 * expand them; expand: expanded where they cannot be held, as backward needs) and writes its
 * outputs as bf16 for the GEMMs that alone read them (w2 / the expert down stack; w1, w3 / the
 * expert gate and up stacks), leaving their fp32 buffers unwritten. model_swiglu_fwd: hact; 1
 * when held (the caller releases it, ops_bf16_release, after its reader). model_swiglu_bwd:
 * dgate, dup from dhact (written, dx_acc 0); which are held (model_swiglu_release releases them
 * after their readers). */
int model_swiglu_fwd(const model *m, const ops_table *t, layer_acts *la, float *hact, int R, int F,
                     int expand);
int model_swiglu_bwd(const model *m, const ops_table *t, layer_acts *la, float *dgate, float *dup,
                     const float *dhact, int R, int F);
void model_swiglu_release(float *dgate, float *dup, int held);

/* Pointers to one block's parameters (or gradients) inside a flat buffer. Dense blocks use
 * w1, w3, w2 [F,D], [F,D], [D,F]; MoE blocks router [E,D] and the expert stacks ew1, ew3
 * [E,Fe,D] and ew2 [E,D,Fe] (the others NULL). */
typedef struct {
    float *attn_norm, *wq, *wk, *wv, *q_norm, *k_norm, *wo, *ffn_norm, *w1, *w3, *w2;
    float *router, *ew1, *ew3, *ew2;
} block_view;

/* Parameters per block in the size table: 8 (norms, attention) + 3 (dense FFN) or + 4 (router
 * and three expert stacks). */
static inline int block_nparams(const model_args *a) {
    return a->n_experts > 0 ? 12 : 11;
}

static inline block_view block_at(const model *m, float *base, int l) {
    const model_param *p = &m->params[1 + block_nparams(&m->args) * l];
    block_view v = {base + p[0].offset,
                    base + p[1].offset,
                    base + p[2].offset,
                    base + p[3].offset,
                    base + p[4].offset,
                    base + p[5].offset,
                    base + p[6].offset,
                    base + p[7].offset,
                    NULL,
                    NULL,
                    NULL,
                    NULL,
                    NULL,
                    NULL,
                    NULL};
    if (m->args.n_experts > 0) {
        v.router = base + p[8].offset;
        v.ew1 = base + p[9].offset;
        v.ew3 = base + p[10].offset;
        v.ew2 = base + p[11].offset;
    } else {
        v.w1 = base + p[8].offset;
        v.w3 = base + p[9].offset;
        v.w2 = base + p[10].offset;
    }
    return v;
}

static inline float *embed_at(const model *m, float *base) {
    return base + m->params[0].offset;
}
static inline float *final_norm_at(const model *m, float *base) {
    return base + m->params[1 + block_nparams(&m->args) * m->args.n_layers].offset;
}
static inline float *head_at(const model *m, float *base) {
    return m->args.tie_embeddings
               ? embed_at(m, base)
               : base + m->params[2 + block_nparams(&m->args) * m->args.n_layers].offset;
}

/* Where one block forward runs. Training: B windows of T tokens at positions 0..T-1,
 * causal self-attention inside each window (k_cache NULL). Cached inference: B = 1, T new
 * tokens of one sequence at positions pos0..pos0+T-1; la->k and la->v point at rows pos0.. of
 * this layer's KV cache [max_len, G, hd], so the projections land in the cache, and attention
 * runs over cache rows 0..pos0+T-1 (attention_fwd when pos0 == 0, attention_kv otherwise). */
typedef struct {
    int B, T;
    const float *cos, *sin; /* RoPE tables [T, hd/2] from the first token's position */
    int pos0;
    const float *k_cache, *v_cache; /* [max_len, G, hd] this layer's cache; NULL in training */
    float *norm_out, *hact;         /* scratch [B*T/tp, D] and [B*T, F] (MoE: [R, Fe]) */
    /* Tensor parallelism (NULL when tp = 1: norm_out serves, the outputs are written in
     * place): [B*T, D] scratch for the all-gathered norm output and the partial sums of the
     * row-parallel wo / w2 before their reduce-scatter. */
    float *norm_full, *part;
    float *xs;       /* MoE scratch [R, D]: the routed rows, sorted by expert */
    float *ep_buf;   /* EP only: [R*ep, D] x2 scratch: rows in arrival order, expert output */
    int64_t *counts; /* MoE, training forward: += rows per expert [L,E]; or NULL */
    double *aux_acc; /* MoE aux loss: += counts and probability sums [2E]; NULL */
    /* document segments (model.h's model.seg): offsets into [B*T], seg[n_seg] = B*T; NULL:
     * each window one causal sequence (and always with a KV cache) */
    const int32_t *seg;
    int n_seg;
} block_geom;

/* ---- MoE (moe.c) ---- */
/* Floats of one block's saved MoE state (moe_acts, y; EP: xl, perm, loffs, cnt) for N token
 * rows (a: the local args, whose n_local_experts gives the EP degree). */
/* with_rows = 0 leaves out the fp32 rows y and xl (a bf16 block keeps them in its bf16 store,
 * working in a shared fp32 set). */
size_t model_moe_saved_floats(const model_args *a, size_t N, int with_rows);
/* Carves la->moe out of p (model_moe_saved_floats(a, N, with_rows) floats, 64-byte aligned
 * pieces); y and xl NULL without rows. */
void model_moe_carve(const model_args *a, size_t N, float *p, moe_acts *ma, int with_rows);
/* out[N,D] = MoE(h[N,D]) of block l: route, dispatch, experts, combine (no residual). Uses
 * g->xs and g->hact as scratch; adds to g->counts and g->aux_acc when they are set. */
void model_moe_forward(const model *m, int l, layer_acts *la, const block_geom *g, const float *h,
                       float *out);
/* Backward scratch of an MoE block (R = N*K routed rows). */
typedef struct {
    float *xs, *dy;                    /* [R,D] */
    float *hact, *dhact, *dgate, *dup; /* [R,Fe]; EP: [R*ep,Fe] (the experts' rows) */
    float *ep_buf;                     /* EP only: [R*ep,D] x2 */
    float *dlog;                       /* [N,E] */
    const double *aux_grad;            /* [E] d aux / d p (model_moe_aux_finish); NULL: no aux */
} model_moe_scratch;
/* Given dout[N,D] = dL/d(MoE output) and h the block's normed input: dh[N,D] = dL/dh, and the
 * router and expert gradients accumulate into m->g (plus m->aux_scale * d aux when
 * s->aux_grad is set). */
void model_moe_backward(model *m, int l, layer_acts *la, const float *h, const float *dout,
                        float *dh, const model_moe_scratch *s);
/* After the forward of all blocks, from acc [2E] (summed counts, summed probabilities over all
 * blocks): m->moe_aux_loss (HF's aux loss of this microbatch) and aux_grad [E]. */
void model_moe_aux_finish(model *m, const double *acc, double *aux_grad);

/* ---- block forward, final norm, lm_head (forward.c) ---- */
/* Block l forward from la->x; writes the block output into out [N,D]. Under tensor
 * parallelism la->x and out hold this rank's N/tp sequence rows, the projections all N rows
 * of the local heads / FFN columns. */
void model_block_forward(const model *m, int l, layer_acts *la, const block_geom *g, float *out);
/* xn[N,D] = final RMSNorm of x[N,D] (rstd[N] saved). */
void model_final_norm(const model *m, float *xn, float *rstd, const float *x, int N);
/* logits[N,V] = xn[N,D] @ lm_head^T (the tied embedding or output.weight). */
void model_lm_head(const model *m, float *logits, const float *xn, int N);

#endif
