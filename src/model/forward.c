/* Qwen3 dense forward and hand-written backward over flat parameter buffers.
 *
 * Saved per layer (ac = none): the layer input x, the residual after attention, the q/k/v
 * projections before the q/k norms, the attention output and its log-sum-exp, the FFN gate
 * and up projections, and the RMSNorm reciprocal std devs. Cheap elementwise results (the
 * block norms' outputs, q and k after norm + RoPE, silu(gate)*up) are recomputed in
 * backward instead of kept. With ac = full only each layer's input x is kept and the
 * whole block forward is recomputed in its backward.
 *
 * Buffers that are never live at the same time share memory: the lm_head+CE logits chunk
 * (live only inside the loss) overlays the per-block working set (norm outputs, q/k,
 * silu(gate)*up and the backward scratch). */
#include <math.h>
#include <string.h>

#include "internal.h"

struct model_acts {
    layer_acts *layers; /* [L]; under ac=full all but .x point at `scratch` */
    layer_acts scratch;
    float *xf;         /* [N,D] output of the last block */
    float *xn;         /* [N,D] final norm output */
    float *rstd_f;     /* [N] */
    float *norm_out;   /* [N,D] block norm output (recomputed; shared) */
    float *q, *k;      /* [N,H*hd], [N,G*hd] q and k after norm + RoPE (recomputed; shared) */
    float *hact;       /* [N,F] silu(gate)*up (recomputed; shared) */
    float *ce_scratch; /* [ce_chunk, V] */
    /* backward scratch */
    float *dres, *dnorm, *dhact, *dgate, *dup, *dqk_o, *dq, *dk, *dv, *dqn, *dkn, *dxn;
    float *mem;
    size_t mem_floats;
};

/* Carves named buffers out of one allocation: first a sizing pass, then the real one. */
typedef struct {
    float *base;
    size_t used;
} carver;

static float *carve(carver *c, size_t n) {
    float *p = c->base ? c->base + c->used : NULL;
    c->used += (n + 15) / 16 * 16; /* keep every buffer 64-byte aligned */
    return p;
}

static void carve_layer(carver *c, layer_acts *la, const model_args *a, size_t N, int B, int T,
                        int with_x_only) {
    const size_t D = a->dim, Q = (size_t)a->n_heads * a->head_dim,
                 KV = (size_t)a->n_kv_heads * a->head_dim, F = a->ffn_dim;
    la->x = carve(c, N * D);
    if (with_x_only) return;
    la->xm = carve(c, N * D);
    la->qp = carve(c, N * Q);
    la->kp = carve(c, N * KV);
    la->v = carve(c, N * KV);
    la->o = carve(c, N * Q);
    la->lse = carve(c, (size_t)B * a->n_heads * T);
    la->gate = carve(c, N * F);
    la->up = carve(c, N * F);
    la->rstd1 = carve(c, N);
    la->rstd2 = carve(c, N);
    la->q_rstd = carve(c, N * a->n_heads);
    la->k_rstd = carve(c, N * a->n_kv_heads);
}

static void carve_all(carver *c, model_acts *A, const model *m, int with_grads) {
    const model_args *a = &m->args;
    const int B = m->batch, T = m->seq_len, L = a->n_layers;
    const size_t N = (size_t)B * T, D = a->dim, Q = (size_t)a->n_heads * a->head_dim,
                 KV = (size_t)a->n_kv_heads * a->head_dim, F = a->ffn_dim;
    for (int l = 0; l < L; l++) {
        layer_acts tmp, *la = A->layers ? &A->layers[l] : &tmp;
        carve_layer(c, la, a, N, B, T, m->ac == MODEL_AC_FULL);
    }
    if (m->ac == MODEL_AC_FULL) carve_layer(c, &A->scratch, a, N, B, T, 0);
    A->xf = carve(c, N * D);
    A->xn = carve(c, N * D);
    A->rstd_f = carve(c, N);
    if (with_grads) {
        A->dres = carve(c, N * D);
        A->dxn = carve(c, N * D);
    }
    /* The union: the CE logits chunk, then (from the same start) the block working set. */
    const size_t start = c->used;
    A->ce_scratch = carve(c, (size_t)m->ce_chunk * a->vocab_size);
    const size_t ce_end = c->used;
    c->used = start;
    A->norm_out = carve(c, N * D);
    A->hact = carve(c, N * F);
    A->q = carve(c, N * Q);
    A->k = carve(c, N * KV);
    if (with_grads) {
        A->dnorm = carve(c, N * D);
        A->dhact = carve(c, N * F);
        A->dgate = carve(c, N * F);
        A->dup = carve(c, N * F);
        A->dqk_o = carve(c, N * Q);
        A->dq = carve(c, N * Q);
        A->dk = carve(c, N * KV);
        A->dv = carve(c, N * KV);
        A->dqn = carve(c, N * Q);
        A->dkn = carve(c, N * KV);
    }
    if (c->used < ce_end) c->used = ce_end;
}

int model_build(model *m, const model_args *a, const model_build_opts *o, base_err *err) {
    memset(m, 0, sizeof *m);
    if (model_args_validate(a, err)) return -1;
    if (a->n_experts > 0)
        return base_fail(err,
                         "MoE training is not yet supported (n_experts = %d); dense Qwen3 "
                         "models only for now",
                         a->n_experts);
    if (o->batch <= 0 || o->seq_len <= 0)
        return base_fail(err, "batch (%d) and seq_len (%d) must be positive", o->batch, o->seq_len);
    /* Row counts up to tokens * n_heads (the per-head q norm) are passed to ops as int. */
    if ((double)o->batch * o->seq_len * a->n_heads > 2147483647.0)
        return base_fail(err, "batch*seq_len*n_heads (%d*%d*%d) exceeds 2^31", o->batch, o->seq_len,
                         a->n_heads);
    m->args = *a;
    m->batch = o->batch;
    m->seq_len = o->seq_len;
    m->ac = o->ac;
    if (model_layout(m, err)) return -1;
    const int N = o->batch * o->seq_len;
    /* lm_head + CE in chunks: about 32M logits (128 MiB) per chunk, rounded up to a multiple
     * of 64 tokens (bench/RESULTS.md: larger chunks make the lm_head GEMMs faster and cost
     * memory; this is the knee for vocab 151936). */
    long chunk = ((32L << 20) / a->vocab_size + 63) / 64 * 64;
    if (o->ce_chunk > 0) chunk = o->ce_chunk;
    if (chunk > N) chunk = N;
    m->ce_chunk = (int)chunk;

    m->w = base_alloc(m->n_floats * sizeof(float));
    if (!m->w) return base_fail(err, "out of memory: %zu parameters", m->n_floats);
    if (o->with_grads) {
        m->g = base_alloc(m->n_floats * sizeof(float));
        if (!m->g) return base_fail(err, "out of memory: %zu gradients", m->n_floats);
    }
    model_acts *A = base_alloc(sizeof *A);
    if (!A) return base_fail(err, "out of memory");
    m->acts = A;
    carver sz = {NULL, 0};
    carve_all(&sz, A, m, o->with_grads);
    A->layers = base_alloc(sizeof(layer_acts) * (size_t)a->n_layers);
    A->mem = base_alloc(sz.used * sizeof(float));
    if (!A->layers || !A->mem)
        return base_fail(err, "out of memory: activations need %.2f GiB",
                         (double)sz.used * 4 / (1 << 30));
    A->mem_floats = sz.used;
    carver real = {A->mem, 0};
    carve_all(&real, A, m, o->with_grads);
    if (m->ac == MODEL_AC_FULL)
        for (int l = 0; l < a->n_layers; l++) {
            float *x = A->layers[l].x;
            A->layers[l] = A->scratch;
            A->layers[l].x = x;
        }
    for (int l = 0; l < a->n_layers; l++) {
        A->layers[l].q = A->q;
        A->layers[l].k = A->k;
    }

    m->rope_cos = base_alloc(sizeof(float) * (size_t)o->seq_len * a->head_dim / 2);
    m->rope_sin = base_alloc(sizeof(float) * (size_t)o->seq_len * a->head_dim / 2);
    if (!m->rope_cos || !m->rope_sin) return base_fail(err, "out of memory");
    ops_rope_table(m->rope_cos, m->rope_sin, o->seq_len, a->head_dim, a->rope_theta);

    ops_register_builtin();
    m->ops = base_alloc(sizeof(ops_table) * (size_t)m->n_units);
    if (!m->ops) return base_fail(err, "out of memory");
    ops_ctx ctx = {o->batch,      o->seq_len,  a->dim,     a->n_heads,
                   a->n_kv_heads, a->head_dim, a->ffn_dim, a->vocab_size};
    const char **paths = base_alloc(sizeof(char *) * (size_t)m->n_units);
    if (!paths) return base_fail(err, "out of memory");
    for (int u = 0; u < m->n_units; u++) paths[u] = m->units[u].name;
    int rc = ops_resolve_units(m->ops, paths, m->n_units, &ctx, o->overrides, o->n_overrides, err);
    base_free(paths);
    if (rc) { /* nothing stays bound; model_free must not release twice */
        base_free(m->ops);
        m->ops = NULL;
    }
    return rc;
}

void model_free(model *m) {
    if (m->acts) {
        base_free(m->acts->layers);
        base_free(m->acts->mem);
        base_free(m->acts);
    }
    base_free(m->params);
    base_free(m->units);
    base_free(m->w);
    base_free(m->g);
    if (m->ops)
        for (int u = 0; u < m->n_units; u++) ops_release(&m->ops[u]);
    base_free(m->ops);
    base_free(m->rope_cos);
    base_free(m->rope_sin);
    memset(m, 0, sizeof *m);
}

void model_zero_grad(model *m) {
    if (m->g) memset(m->g, 0, m->n_floats * sizeof(float));
}

static void add_inplace(float *y, const float *x, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}

static void zero(float *p, size_t n) {
    memset(p, 0, n * sizeof(float));
}

/* The geometry of a training microbatch: B windows of T tokens at positions 0..T-1. */
static block_geom train_geom(const model *m) {
    block_geom g = {m->batch, m->seq_len, m->rope_cos,       m->rope_sin,  0,
                    NULL,     NULL,       m->acts->norm_out, m->acts->hact};
    return g;
}

/* q, k = RoPE(per-head RMSNorm(qp, kp)): in forward, and again in backward where q and k are
 * recomputed from the saved projections instead of kept. */
static void qk_norm_rope(const model *m, const ops_table *t, layer_acts *la, const block_view *w,
                         const block_geom *g) {
    const model_args *a = &m->args;
    const int B = g->B, T = g->T, N = B * T, H = a->n_heads, G = a->n_kv_heads, hd = a->head_dim;
    const float eps = (float)a->norm_eps;
    t->rmsnorm_fwd(la->q, la->q_rstd, la->qp, w->q_norm, N * H, hd, eps);
    t->rmsnorm_fwd(la->k, la->k_rstd, la->kp, w->k_norm, N * G, hd, eps);
    t->rope_fwd(la->q, la->q, g->cos, g->sin, B, T, H, hd);
    t->rope_fwd(la->k, la->k, g->cos, g->sin, B, T, G, hd);
}

void model_block_forward(const model *m, int l, layer_acts *la, const block_geom *g, float *out) {
    const model_args *a = &m->args;
    const ops_table *t = &m->ops[1 + l];
    const int B = g->B, T = g->T, N = B * T, D = a->dim, H = a->n_heads, G = a->n_kv_heads,
              hd = a->head_dim, F = a->ffn_dim;
    const float eps = (float)a->norm_eps;
    block_view w = block_at(m, m->w, l);

    t->rmsnorm_fwd(g->norm_out, la->rstd1, la->x, w.attn_norm, N, D, eps);
    t->matmul_fwd(la->qp, g->norm_out, w.wq, N, D, H * hd);
    t->matmul_fwd(la->kp, g->norm_out, w.wk, N, D, G * hd);
    t->matmul_fwd(la->v, g->norm_out, w.wv, N, D, G * hd);
    qk_norm_rope(m, t, la, &w, g);
    if (!g->k_cache || g->pos0 == 0) /* windows from position 0: the cache rows are [1,T,G,hd] */
        t->attention_fwd(la->o, la->lse, la->q, la->k, la->v, B, T, H, G, hd);
    else
        t->attention_kv(la->o, la->q, g->k_cache, g->v_cache, T, g->pos0, H, G, hd);
    t->matmul_fwd(la->xm, la->o, w.wo, N, H * hd, D);
    add_inplace(la->xm, la->x, (size_t)N * D);

    t->rmsnorm_fwd(g->norm_out, la->rstd2, la->xm, w.ffn_norm, N, D, eps);
    t->matmul_fwd(la->gate, g->norm_out, w.w1, N, D, F);
    t->matmul_fwd(la->up, g->norm_out, w.w3, N, D, F);
    t->swiglu_fwd(g->hact, la->gate, la->up, N, F);
    t->matmul_fwd(out, g->hact, w.w2, N, F, D);
    add_inplace(out, la->xm, (size_t)N * D);
}

void model_final_norm(const model *m, float *xn, float *rstd, const float *x, int N) {
    m->ops[m->args.n_layers + 1].rmsnorm_fwd(xn, rstd, x, final_norm_at(m, m->w), N, m->args.dim,
                                             (float)m->args.norm_eps);
}

void model_lm_head(const model *m, float *logits, const float *xn, int N) {
    m->ops[m->args.n_layers + 1].matmul_fwd(logits, xn, head_at(m, m->w), N, m->args.dim,
                                            m->args.vocab_size);
}

/* Block l backward: A->dres holds dL/d(block output) on entry, dL/d(block input) on exit. */
static void block_backward(model *m, int l, layer_acts *la) {
    const model_args *a = &m->args;
    const ops_table *t = &m->ops[1 + l];
    model_acts *A = m->acts;
    const int B = m->batch, T = m->seq_len, N = B * T, D = a->dim, H = a->n_heads,
              G = a->n_kv_heads, hd = a->head_dim, F = a->ffn_dim;
    const size_t ND = (size_t)N * D, NF = (size_t)N * F, NQ = (size_t)N * H * hd,
                 NKV = (size_t)N * G * hd;
    const float eps = (float)a->norm_eps;
    block_view w = block_at(m, m->w, l), g = block_at(m, m->g, l);
    const block_geom geom = train_geom(m);
    float *dres = A->dres;

    /* Full AC: recompute the block's saved activations into the shared scratch. The block
     * output is not needed; A->xn (the final norm output) is free scratch by now. */
    if (m->ac == MODEL_AC_FULL) model_block_forward(m, l, la, &geom, A->xn);

    /* FFN: out = xm + w2(silu(w1 f) * w3 f), f = rmsnorm(xm). */
    t->rmsnorm_fwd(A->norm_out, la->rstd2, la->xm, w.ffn_norm, N, D, eps);
    t->swiglu_fwd(A->hact, la->gate, la->up, N, F);
    zero(A->dhact, NF);
    t->matmul_bwd(A->dhact, g.w2, dres, A->hact, w.w2, N, F, D);
    zero(A->dgate, NF);
    zero(A->dup, NF);
    t->swiglu_bwd(A->dgate, A->dup, A->dhact, la->gate, la->up, N, F);
    zero(A->dnorm, ND);
    t->matmul_bwd(A->dnorm, g.w1, A->dgate, A->norm_out, w.w1, N, D, F);
    t->matmul_bwd(A->dnorm, g.w3, A->dup, A->norm_out, w.w3, N, D, F);
    t->rmsnorm_bwd(dres, g.ffn_norm, A->dnorm, la->xm, w.ffn_norm, la->rstd2, N, D);

    /* Attention: xm = x + wo(attn(rope(qnorm(wq a)), rope(knorm(wk a)), wv a)), a = rmsnorm(x). */
    zero(A->dqk_o, NQ);
    t->matmul_bwd(A->dqk_o, g.wo, dres, la->o, w.wo, N, H * hd, D);
    /* q and k after norm + RoPE, recomputed from the saved projections (same bits). */
    qk_norm_rope(m, t, la, &w, &geom);
    zero(A->dq, NQ);
    zero(A->dk, NKV);
    zero(A->dv, NKV);
    t->attention_bwd(A->dq, A->dk, A->dv, A->dqk_o, la->o, la->lse, la->q, la->k, la->v, B, T, H, G,
                     hd);
    zero(A->dqn, NQ);
    zero(A->dkn, NKV);
    t->rope_bwd(A->dqn, A->dq, m->rope_cos, m->rope_sin, B, T, H, hd);
    t->rope_bwd(A->dkn, A->dk, m->rope_cos, m->rope_sin, B, T, G, hd);
    zero(A->dq, NQ); /* reused as d(qp) */
    zero(A->dk, NKV);
    t->rmsnorm_bwd(A->dq, g.q_norm, A->dqn, la->qp, w.q_norm, la->q_rstd, N * H, hd);
    t->rmsnorm_bwd(A->dk, g.k_norm, A->dkn, la->kp, w.k_norm, la->k_rstd, N * G, hd);
    t->rmsnorm_fwd(A->norm_out, la->rstd1, la->x, w.attn_norm, N, D, eps);
    zero(A->dnorm, ND);
    t->matmul_bwd(A->dnorm, g.wq, A->dq, A->norm_out, w.wq, N, D, H * hd);
    t->matmul_bwd(A->dnorm, g.wk, A->dk, A->norm_out, w.wk, N, D, G * hd);
    t->matmul_bwd(A->dnorm, g.wv, A->dv, A->norm_out, w.wv, N, D, G * hd);
    t->rmsnorm_bwd(dres, g.attn_norm, A->dnorm, la->x, w.attn_norm, la->rstd1, N, D);
}

/* Embedding and all blocks: leaves the final hidden state in A->xf and its norm in A->xn. */
static void forward_trunk(model *m, const int32_t *tokens) {
    const model_args *a = &m->args;
    model_acts *A = m->acts;
    const int N = m->batch * m->seq_len, L = a->n_layers;
    const block_geom geom = train_geom(m);
    m->ops[0].embedding_fwd(A->layers[0].x, tokens, embed_at(m, m->w), N, a->dim);
    for (int l = 0; l < L; l++)
        model_block_forward(m, l, &A->layers[l], &geom, l + 1 < L ? A->layers[l + 1].x : A->xf);
    model_final_norm(m, A->xn, A->rstd_f, A->xf, N);
}

double model_step_microbatch(model *m, const int32_t *tokens, const int32_t *targets,
                             float grad_scale, int64_t *n_valid) {
    const model_args *a = &m->args;
    model_acts *A = m->acts;
    const int N = m->batch * m->seq_len, L = a->n_layers, D = a->dim;
    const ops_table *th = &m->ops[L + 1];
    const int backward = m->g != NULL && grad_scale != 0.0f;

    forward_trunk(m, tokens);
    if (backward) zero(A->dxn, (size_t)N * D);
    double loss = th->lmhead_ce(backward ? A->dxn : NULL, backward ? head_at(m, m->g) : NULL, A->xn,
                                head_at(m, m->w), targets, N, D, a->vocab_size, grad_scale,
                                A->ce_scratch, m->ce_chunk, n_valid);
    if (!backward) return loss;

    zero(A->dres, (size_t)N * D);
    th->rmsnorm_bwd(A->dres, final_norm_at(m, m->g), A->dxn, A->xf, final_norm_at(m, m->w),
                    A->rstd_f, N, D);
    for (int l = L - 1; l >= 0; l--) block_backward(m, l, &A->layers[l]);
    m->ops[0].embedding_bwd(embed_at(m, m->g), A->dres, tokens, N, D);
    return loss;
}

size_t model_activation_bytes(const model *m) {
    return m->acts ? m->acts->mem_floats * sizeof(float) : 0;
}

void model_logits(model *m, const int32_t *tokens, float *logits) {
    forward_trunk(m, tokens);
    model_lm_head(m, logits, m->acts->xn, m->batch * m->seq_len);
}
