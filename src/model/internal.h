/* Private to the model module: the pieces training forward (forward.c) and cached inference
 * (generate.c) share. */
#ifndef TITAN_MODEL_INTERNAL_H
#define TITAN_MODEL_INTERNAL_H

#include "model.h"

int model_layout(model *m, base_err *err);

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
    float *gate, *up;       /* [N,F] */
    float *rstd1, *rstd2;   /* [n] */
    float *q_rstd, *k_rstd; /* [N*H], [N*G] */
} layer_acts;

/* Pointers to one block's parameters (or gradients) inside a flat buffer. */
typedef struct {
    float *attn_norm, *wq, *wk, *wv, *q_norm, *k_norm, *wo, *ffn_norm, *w1, *w3, *w2;
} block_view;

static inline block_view block_at(const model *m, float *base, int l) {
    /* 11 parameters per block, in size-table order after tok_embeddings. */
    const model_param *p = &m->params[1 + 11 * l];
    block_view v = {base + p[0].offset, base + p[1].offset, base + p[2].offset, base + p[3].offset,
                    base + p[4].offset, base + p[5].offset, base + p[6].offset, base + p[7].offset,
                    base + p[8].offset, base + p[9].offset, base + p[10].offset};
    return v;
}

static inline float *embed_at(const model *m, float *base) {
    return base + m->params[0].offset;
}
static inline float *final_norm_at(const model *m, float *base) {
    return base + m->params[1 + 11 * m->args.n_layers].offset;
}
static inline float *head_at(const model *m, float *base) {
    return m->args.tie_embeddings ? embed_at(m, base)
                                  : base + m->params[2 + 11 * m->args.n_layers].offset;
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
    float *norm_out, *hact;         /* scratch [B*T/tp, D] and [B*T, F] */
    /* Tensor parallelism (NULL when tp = 1: norm_out serves, the outputs are written in
     * place): [B*T, D] scratch for the all-gathered norm output and the partial sums of the
     * row-parallel wo / w2 before their reduce-scatter. */
    float *norm_full, *part;
} block_geom;

/* Block l forward from la->x; writes the block output into out [N,D]. Under tensor
 * parallelism la->x and out hold this rank's N/tp sequence rows, the projections all N rows
 * of the local heads / FFN columns. */
void model_block_forward(const model *m, int l, layer_acts *la, const block_geom *g, float *out);
/* xn[N,D] = final RMSNorm of x[N,D] (rstd[N] saved). */
void model_final_norm(const model *m, float *xn, float *rstd, const float *x, int N);
/* logits[N,V] = xn[N,D] @ lm_head^T (the tied embedding or output.weight). */
void model_lm_head(const model *m, float *logits, const float *xn, int N);

#endif
