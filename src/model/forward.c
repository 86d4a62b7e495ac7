/* Qwen3 dense forward and hand-written backward over flat parameter buffers.
 *
 * Saved per layer (ac = none): the layer input x, the residual after attention, the q/k/v
 * projections before the q/k norms, the attention output and its log-sum-exp, the FFN gate
 * and up projections, and the RMSNorm reciprocal std devs. Cheap elementwise results (the
 * block norms' outputs, q and k after norm + RoPE, silu(gate)*up) are recomputed in
 * backward instead of kept. A checkpointed block (every block under ac = full, every N-th
 * under selective: model_ac_block) keeps only its input x and recomputes its whole forward in
 * its backward, into one set of buffers shared by all checkpointed blocks; a model built
 * without gradients (validation at its own shape) never runs backward, so all its blocks work
 * in that set. Under bf16 a block that is not checkpointed keeps its GEMM outputs
 * (model_act16: q/k/v projections, attention output, gate/up; MoE expert rows) as bf16 only,
 * and works in that same shared fp32 set: forward rounds them there and stores the bits,
 * backward expands them back (exact).
 *
 * Buffers that are never live at the same time share memory: the lm_head+CE logits chunk
 * (live only inside the loss) overlays the per-block working set (norm outputs, q/k,
 * silu(gate)*up and the backward scratch). */
#include <math.h>
#include <string.h>

#include "model/internal.h"

/* Row counts: N = B*T token rows, n = N/tp the sequence shard (n = N without TP). */
struct model_acts {
    layer_acts *layers; /* [L]; a checkpointed block's all but .x point at `scratch` */
    layer_acts scratch;
    float *xf;         /* [n,D] output of the last block */
    float *xn;         /* [n,D] final norm output */
    float *rstd_f;     /* [n] */
    float *norm_out;   /* [n,D] block norm output (recomputed; shared) */
    float *q, *k;      /* [N,H*hd], [N,G*hd] q and k after norm + RoPE (recomputed; shared) */
    float *hact;       /* [N,F] silu(gate)*up (recomputed; shared) */
    float *ce_scratch; /* [ce_chunk, V] (ops_lmhead_ce_scratch_floats) */
    int ce_chunk;      /* its rows: the model's ce_chunk, or 0 (none: lmhead_ce runs fused) */
    /* backward scratch; dres, dnorm, dxn: [n,D] */
    float *dres, *dnorm, *dhact, *dgate, *dup, *dqk_o, *dq, *dk, *dv, *dqn, *dkn, *dxn;
    /* MoE: routed rows [R,D] (forward and backward), their gradient [R,D], the router-logit
     * gradient [N,E]; aux [3E] doubles: accumulated counts and probabilities, d aux / d p */
    float *xs, *dy, *dlog;
    double *aux;
    float *ep_buf; /* expert parallelism: [R*ep, D] x2 (moe.c) */
    /* tensor parallelism only (NULL when tp = 1, where the [n,D] buffers serve): [N,D] the
     * all-gathered norm output, the partial sums before a reduce-scatter (also the embedding
     * lookup), the all-gathered residual gradient, the partial norm-input gradient, and the
     * all-gathered final norm output and its partial gradient (live across the loss); the
     * local vocabulary ids of the tokens [N] */
    float *norm_full, *part, *dfull, *dnorm_full, *xn_full, *dxn_full;
    int32_t *tok_local;
    /* loss parallel off (tp > 1): the gathered lm_head weight [V,D] and its gradient (whole
     * vocabulary), live across the loss */
    float *head_full, *dhead_full;
    float *mem;
    size_t mem_floats;
};

/* Carves named buffers out of one allocation: first a sizing pass, then the real one. */
typedef struct {
    float *base;
    size_t used;
    size_t cap; /* floats, for a room of fixed size (carve_in); the activation buffer's grows */
} carver;

static float *carve(carver *c, size_t n) {
    float *p = c->base ? c->base + c->used : NULL;
    c->used += (n + 15) / 16 * 16; /* keep every buffer 64-byte aligned */
    return p;
}

/* n floats from room g (a gradient's pages, acts_in_grads) while it has them, else from c */
static float *carve_in(carver *c, carver *g, size_t n) {
    if (g && g->used + (n + 15) / 16 * 16 <= g->cap) return carve(g, n);
    return carve(c, n);
}

/* The room for block l's saved activations in the gradient written after its backward: unit
 * l's (block l-1's, or for block 0 an untied embedding's, whose gradient embedding_bwd writes
 * last; a tied one's lmhead_ce writes first), from its first 64-byte line. Empty without
 * acts_in_grads; base NULL for a sizing pass (real 0), which places every buffer as the real
 * one does. */
static carver grads_room(const model *m, int l, int real) {
    carver r = {NULL, 0, 0};
    if (!m->acts_in_grads || !m->units || (l == 0 && m->args.tie_embeddings)) return r;
    const model_unit *u = &m->units[l];
    const size_t first = (u->offset + 15) / 16 * 16, end = u->offset + u->numel;
    if (end <= first) return r;
    r.cap = end - first;
    if (real) r.base = m->g + first;
    return r;
}

/* Floats of one FFN activation: [N,F] dense, [R,Fe] for an MoE (R = N*top_k routed rows);
 * under expert parallelism [R*ep,Fe]: the most rows this rank's experts can receive. */
static size_t ffn_floats(const model_args *a, size_t N) {
    return a->n_experts > 0 ? N * a->top_k * model_moe_ep(a) * a->moe_ffn_dim : N * a->ffn_dim;
}

/* Elements of the model_act16 tensor s of a block (its fp32 buffer's capacity; 0 where the
 * block has no such tensor). */
static size_t act16_elems(const model_args *a, size_t N, model_act16 s) {
    const size_t D = a->dim, Q = (size_t)a->n_heads * a->head_dim,
                 KV = (size_t)a->n_kv_heads * a->head_dim, R = N * (size_t)a->top_k;
    switch (s) {
    case MODEL_ACT16_QP:
    case MODEL_ACT16_O:
        return N * Q;
    case MODEL_ACT16_KP:
    case MODEL_ACT16_V:
        return N * KV;
    case MODEL_ACT16_GATE:
    case MODEL_ACT16_UP:
        return ffn_floats(a, N);
    case MODEL_ACT16_Y:
        return a->n_experts > 0 ? R * D : 0;
    case MODEL_ACT16_XL:
        return a->n_experts > 0 && model_moe_ep(a) > 1 ? R * model_moe_ep(a) * D : 0;
    default:
        return 0;
    }
}

static float *act16_f32(layer_acts *la, model_act16 s) {
    float *const p[MODEL_ACT16_N] = {la->qp,   la->kp, la->v,     la->o,
                                     la->gate, la->up, la->moe.y, la->moe.xl};
    return p[s];
}

/* A block's saved activations: its input x when with_x, the rest when with_rest (a
 * checkpointed block keeps x only; the scratch they share holds the rest). store16 (bf16
 * training, a block that is not checkpointed): the model_act16 tensors get bf16 stores
 * instead, and work in the shared scratch's fp32 buffers (pointed at by carve_all). */
static void carve_layer(carver *c, carver *g, layer_acts *la, const model_args *a, size_t N,
                        size_t n, int B, int T, int with_x, int with_rest, int store16) {
    const size_t D = a->dim;
    la->x = with_x ? carve_in(c, g, n * D) : NULL;
    for (int s = 0; s < MODEL_ACT16_N; s++) la->b16[s] = NULL, la->n16[s] = 0;
    if (!with_rest) return;
    la->xm = carve_in(c, g, n * D);
    if (store16) {
        for (int s = 0; s < MODEL_ACT16_N; s++) {
            const size_t e = act16_elems(a, N, (model_act16)s);
            la->b16[s] = e ? (uint16_t *)carve_in(c, g, (e + 1) / 2) : NULL;
        }
    } else {
        la->qp = carve_in(c, g, act16_elems(a, N, MODEL_ACT16_QP));
        la->kp = carve_in(c, g, act16_elems(a, N, MODEL_ACT16_KP));
        la->v = carve_in(c, g, act16_elems(a, N, MODEL_ACT16_V));
        la->o = carve_in(c, g, act16_elems(a, N, MODEL_ACT16_O));
        la->gate = carve_in(c, g, act16_elems(a, N, MODEL_ACT16_GATE));
        la->up = carve_in(c, g, act16_elems(a, N, MODEL_ACT16_UP));
    }
    la->lse = carve_in(c, g, (size_t)B * a->n_heads * T);
    la->rstd1 = carve_in(c, g, n);
    la->rstd2 = carve_in(c, g, n);
    la->q_rstd = carve_in(c, g, N * a->n_heads);
    la->k_rstd = carve_in(c, g, N * a->n_kv_heads);
    if (a->n_experts > 0) {
        float *p = carve_in(c, g, model_moe_saved_floats(a, N, !store16));
        if (p) model_moe_carve(a, N, p, &la->moe, !store16);
    }
}

int model_runs16(const model *m, const ops_table *t, ops_kind k) {
    return m->prec == OPS_PREC_BF16 && t->impl[k] && t->impl[k]->prec == OPS_PREC_BF16;
}

int model_block16(const model *m, const ops_table *t) {
    if (m->prec != OPS_PREC_BF16) return 0;
    if (!t) return 1;
    const ops_kind k[3] = {OPS_MATMUL, OPS_ATTENTION, OPS_GROUPED_MM};
    for (int i = 0; i < (m->args.n_experts > 0 ? 3 : 2); i++)
        if (!model_runs16(m, t, k[i])) return 0;
    return 1;
}

/* Whether block l stores its model_act16 tensors as bf16 (half their bytes): a bf16 block
 * (model_block16) that is not checkpointed (which stores nothing). */
static int stores16(const model *m, int l) {
    return model_block16(m, m->ops ? &m->ops[1 + l] : NULL) &&
           !model_ac_block(m->ac, m->ac_every, l);
}

/* Whether block l keeps only its input x and works in the shared scratch: a checkpointed
 * block (recomputed in backward), and every block of a model without gradients (it never
 * runs backward, so nothing needs keeping: a validation model at its own shape). */
static int shares_scratch(const model *m, int l, int with_grads) {
    return !with_grads || model_ac_block(m->ac, m->ac_every, l);
}

void model_keep16(const model *m, const ops_table *t, layer_acts *la, model_act16 s, size_t n) {
    if (!model_block16(m, t)) return; /* the one condition model_bf16_wire_kept relies on */
    ops_bf16_round_store(act16_f32(la, s), la->b16[s], n);
    la->n16[s] = n;
}

/* out = inp w^T into the model_act16 tensor s, kept as model_keep16 keeps it: the keep fused into
 * the product where its GEMM allows (ops_bf16_keep_begin: the same bits, without a pass over out)
 */
static void matmul_keep16(const model *m, const ops_table *t, layer_acts *la, model_act16 s,
                          const float *inp, const float *w, int N, int C, int OC) {
    float *out = act16_f32(la, s);
    if (!model_block16(m, t)) {
        t->matmul_fwd(out, inp, w, N, C, OC);
        return;
    }
    const size_t n = (size_t)N * OC;
    ops_bf16_keep_begin(out, la->b16[s], n);
    t->matmul_fwd(out, inp, w, N, C, OC);
    ops_bf16_keep_end(out);
    la->n16[s] = n;
}

/* Whether a block's SwiGLU runs on bf16 operands (model_swiglu_fwd) */
static int swiglu16(const model *m, const ops_table *t) {
    const int moe = m->args.n_experts > 0;
    return model_runs16(m, t, OPS_SWIGLU) &&
           model_runs16(m, t, moe ? OPS_GROUPED_MM : OPS_MATMUL) && ops_bf16_holds_bits() &&
           (!moe || ops_bf16_grouped_mirrors());
}

/* Backward of a bf16-stored block: its tensors back into the fp32 working set (exact); gate and
 * up stay bits where swiglu16 reads them so (hold_gate_up). */
static void unkeep16(const model *m, const ops_table *t, layer_acts *la) {
    for (int s = 0; s < MODEL_ACT16_N; s++)
        if (la->b16[s] && !(swiglu16(m, t) && (s == MODEL_ACT16_GATE || s == MODEL_ACT16_UP)))
            ops_bf16_to_f32(act16_f32(la, (model_act16)s), la->b16[s], la->n16[s]);
}

/* gate and up [n] of la held from their kept bits for a swiglu16 SwiGLU, both or neither
 * (it reads both alike): 1 when held. Not held, they are read from their fp32 buffers: expanded
 * there first when expand (backward, where unkeep16 left them). */
static int hold_gate_up(const model *m, const ops_table *t, layer_acts *la, size_t n, int expand) {
    const uint16_t *g16 = la->b16[MODEL_ACT16_GATE], *u16 = la->b16[MODEL_ACT16_UP];
    if (!swiglu16(m, t) || !g16 || !u16) return 0; /* a recomputed block's: in fp32 */
    if (la->n16[MODEL_ACT16_GATE] == n && la->n16[MODEL_ACT16_UP] == n &&
        !ops_bf16_hold_rounded(la->gate, n, g16)) {
        if (!ops_bf16_hold_rounded(la->up, n, u16)) return 1;
        ops_bf16_release(la->gate);
    }
    if (expand) /* what unkeep16 left */
        ops_bf16_to_f32(la->gate, g16, la->n16[MODEL_ACT16_GATE]),
            ops_bf16_to_f32(la->up, u16, la->n16[MODEL_ACT16_UP]);
    return 0;
}

static void release_gate_up(layer_acts *la, int held) {
    if (held) ops_bf16_release(la->gate), ops_bf16_release(la->up);
}

/* x [n], the output of the op between them, asked for in bf16 when on (ops_bf16_emit_begin):
 * emit_end answers 1 when x is held (released after its readers) */
static void emit_begin(int on, float *x, size_t n) {
    if (on) ops_bf16_emit_begin(x, n);
}

static int emit_end(int on, float *x) {
    return on && ops_bf16_emit_end(x);
}

int model_swiglu_fwd(const model *m, const ops_table *t, layer_acts *la, float *hact, int R, int F,
                     int expand) {
    const size_t n = (size_t)R * F;
    const int s16 = swiglu16(m, t), gu = hold_gate_up(m, t, la, n, expand);
    emit_begin(s16, hact, n);
    t->swiglu_fwd(hact, la->gate, la->up, R, F);
    const int held = emit_end(s16, hact);
    release_gate_up(la, gu);
    return held;
}

int model_swiglu_bwd(const model *m, const ops_table *t, layer_acts *la, float *dgate, float *dup,
                     const float *dhact, int R, int F) {
    const size_t n = (size_t)R * F;
    const int s16 = swiglu16(m, t), gu = hold_gate_up(m, t, la, n, 1);
    emit_begin(s16, dgate, n);
    emit_begin(s16, dup, n);
    t->swiglu_bwd(dgate, dup, dhact, la->gate, la->up, R, F, 0);
    const int held = emit_end(s16, dgate) | emit_end(s16, dup) << 1;
    release_gate_up(la, gu);
    return held;
}

void model_swiglu_release(float *dgate, float *dup, int held) {
    if (held & 1) ops_bf16_release(dgate);
    if (held & 2) ops_bf16_release(dup);
}

static void carve_all(carver *c, model_acts *A, const model *m, int with_grads) {
    const model_args *a = &m->args;
    const int B = m->batch, T = m->seq_len, L = a->n_layers;
    const size_t N = (size_t)B * T, D = a->dim, Q = (size_t)a->n_heads * a->head_dim,
                 KV = (size_t)a->n_kv_heads * a->head_dim, NF = ffn_floats(a, N),
                 R = N * (size_t)a->top_k, E = (size_t)a->n_experts;
    const int tp = m->tp.size > 1;
    const size_t n = N / (size_t)m->tp.size;
    for (int l = 0; l < L; l++) {
        layer_acts tmp, *la = A->layers ? &A->layers[l] : &tmp;
        carver g = grads_room(m, l, c->base != NULL);
        carve_layer(c, &g, la, a, N, n, B, T, 1, !shares_scratch(m, l, with_grads), stores16(m, l));
    }
    if (model_ac_blocks(m->ac, m->ac_every, L) > 0 || model_block16(m, NULL) || !with_grads)
        carve_layer(c, NULL, &A->scratch, a, N, n, B, T, 0, 1, 0);
    A->xf = carve(c, n * D);
    A->xn = carve(c, n * D);
    A->rstd_f = carve(c, n);
    if (with_grads) {
        A->dres = carve(c, n * D);
        A->dxn = carve(c, n * D);
    }
    if (tp) { /* live across the loss: outside the union below */
        A->xn_full = carve(c, N * D);
        A->dxn_full = with_grads ? carve(c, N * D) : NULL;
        A->tok_local = (int32_t *)carve(c, N); /* int32 and float have the same size */
    }
    const size_t Vce = (size_t)(m->loss_parallel_off ? m->full_args.vocab_size : a->vocab_size);
    if (m->loss_parallel_off) {
        A->head_full = carve(c, Vce * D);
        A->dhead_full = with_grads ? carve(c, Vce * D) : NULL;
    }
    /* The union: the CE logits chunk, then (from the same start) the block working set. */
    const size_t start = c->used;
    const ops_prec ce_prec =
        m->prec == OPS_PREC_BF16 && (!m->ops || model_runs16(m, &m->ops[L + 1], OPS_LMHEAD_CE))
            ? OPS_PREC_BF16
            : OPS_PREC_F32; /* before the ops resolve: bf16 as asked */
    /* none where the bf16 lmhead_ce runs fused on AMX tiles (its logits never in memory: 256
     * MiB less at the bench model) */
    const int sharded = m->tp.size > 1 && !m->loss_parallel_off;
    A->ce_chunk = ce_prec == OPS_PREC_BF16 && !sharded && ops_lmhead_ce_fused(D) ? 0 : m->ce_chunk;
    A->ce_scratch = A->ce_chunk
                        ? carve(c, ops_lmhead_ce_scratch_floats((size_t)A->ce_chunk, Vce, ce_prec))
                        : NULL;
    const size_t ce_end = c->used;
    c->used = start;
    A->norm_out = carve(c, n * D);
    A->hact = carve(c, NF);
    if (tp) {
        A->norm_full = carve(c, N * D);
        A->part = carve(c, N * D);
    }
    A->q = carve(c, N * Q);
    A->k = carve(c, N * KV);
    if (E > 0) A->xs = carve(c, R * D);
    if (E > 0 && model_moe_ep(a) > 1) A->ep_buf = carve(c, 2 * R * model_moe_ep(a) * D);
    if (with_grads) {
        A->dnorm = carve(c, n * D);
        if (tp) {
            A->dfull = carve(c, N * D);
            A->dnorm_full = carve(c, N * D);
        }
        A->dhact = carve(c, NF);
        A->dgate = carve(c, NF);
        A->dup = carve(c, NF);
        if (E > 0) {
            A->dy = carve(c, R * D);
            A->dlog = carve(c, N * E);
        }
        A->dqk_o = carve(c, N * Q);
        A->dq = carve(c, N * Q);
        A->dk = carve(c, N * KV);
        A->dv = carve(c, N * KV);
        A->dqn = carve(c, N * Q);
        A->dkn = carve(c, N * KV);
    }
    if (c->used < ce_end) c->used = ce_end;
}

/* lm_head + CE in chunks: the configured rows, or ops_lmhead_ce_chunk's (about 64M logits). */
static int ce_chunk_for(const model_args *a, const model_build_opts *o) {
    const long N = (long)o->batch * o->seq_len;
    if (o->ce_chunk <= 0) return ops_lmhead_ce_chunk(N, a->vocab_size);
    return (int)(o->ce_chunk > N ? N : o->ce_chunk);
}

/* This rank's shapes: TP's (model_tp_local_args), and under expert parallelism its E/ep
 * experts' stacks. */
static int local_args(const model_args *a, int tp, int ep, model_args *l, base_err *err) {
    if (model_tp_local_args(a, tp, l, err)) return -1;
    if (ep <= 1) return 0;
    if (a->n_experts <= 0)
        return base_fail(err, "expert parallelism (ep %d) needs an MoE model (n_experts is 0)", ep);
    if (tp > 1)
        return base_fail(err,
                         "expert parallelism (ep %d) with tensor parallelism (tp %d) is "
                         "not supported",
                         ep, tp);
    if (a->n_experts % ep)
        return base_fail(err,
                         "expert parallelism: n_experts (%d) must be a multiple of "
                         "expert_parallel_degree (%d)",
                         a->n_experts, ep);
    l->n_local_experts = a->n_experts / ep;
    return 0;
}

int model_ac_block(model_ac_mode ac, int ac_every, int l) {
    /* torchtitan's _apply_layer_sac: a counter incremented before the test, so 1-based */
    return ac == MODEL_AC_FULL ||
           (ac == MODEL_AC_SELECTIVE && (ac_every <= 0 || (l + 1) % ac_every == 0));
}

int model_ac_blocks(model_ac_mode ac, int ac_every, int n_layers) {
    int n = 0;
    for (int l = 0; l < n_layers; l++) n += model_ac_block(ac, ac_every, l);
    return n;
}

size_t model_activation_bytes_for(const model_args *a, const model_build_opts *o) {
    model m;
    memset(&m, 0, sizeof m);
    m.tp.size = o->tp ? o->tp->size : 1;
    base_err e;
    if (local_args(a, m.tp.size, o->ep ? o->ep->size : 1, &m.args, &e)) return 0;
    m.batch = o->batch;
    m.seq_len = o->seq_len;
    m.ac = o->ac;
    m.ac_every = o->ac_every;
    m.prec = o->prec;
    m.full_args = *a;
    m.loss_parallel_off = o->loss_parallel_off && m.tp.size > 1;
    m.ce_chunk = ce_chunk_for(a, o);
    /* the gradients' units, for the rooms grads_room finds there */
    m.acts_in_grads = o->acts_in_grads && o->with_grads;
    if (m.acts_in_grads && model_layout(&m, &e)) {
        base_free(m.params);
        base_free(m.units);
        return 0;
    }
    model_acts A;
    memset(&A, 0, sizeof A);
    carver sz = {NULL, 0, 0};
    carve_all(&sz, &A, &m, o->with_grads);
    base_free(m.params);
    base_free(m.units);
    return sz.used * sizeof(float);
}

/* How build provides the parameters: zeroed, by the caller (external), or allocated and left
 * unwritten for a loader. */
typedef enum { BUILD_ZEROED, BUILD_EXTERNAL, BUILD_UNSET } build_weights;

/* The ops unit u calls (bits 1u << ops_kind), so that a kernel override is checked and logged
 * only where it acts: the embedding unit its embedding; a block its norms, projections, RoPE,
 * attention (attention_kv when generating), SwiGLU and the fused residual norm, plus
 * grouped_mm in MoE blocks; the head its final norm, the lm_head matmul (generation) and the
 * fused lm_head + CE. adamw runs in the optimizer on the default kernel, in no unit. */
static uint32_t unit_calls(const model *m, int u) {
#define BIT(k) (1u << (k))
    if (u == 0) return BIT(OPS_EMBEDDING);
    if (u == m->n_units - 1) return BIT(OPS_RMSNORM) | BIT(OPS_MATMUL) | BIT(OPS_LMHEAD_CE);
    return BIT(OPS_RMSNORM) | BIT(OPS_MATMUL) | BIT(OPS_ROPE) | BIT(OPS_ATTENTION) |
           BIT(OPS_SWIGLU) | BIT(OPS_ADD_RMSNORM) | BIT(OPS_ATTENTION_KV) |
           (m->args.n_experts > 0 ? BIT(OPS_GROUPED_MM) : 0);
#undef BIT
}

int model_unit_bwd_reads_params(const model *m, int u) {
    return (unit_calls(m, u) & OPS_BWD_READS_WEIGHTS) != 0;
}

/* The activations of a built model whose ops are resolved (a block stores bf16 only where
 * its GEMMs run bf16: stores16). */
static int alloc_acts(model *m, const model_build_opts *o, base_err *err) {
    const model_args *a = &m->args;
    model_acts *A = base_alloc(sizeof *A);
    if (!A) return base_fail(err, "out of memory");
    m->acts = A;
    carver sz = {NULL, 0, 0};
    carve_all(&sz, A, m, o->with_grads);
    A->layers = base_alloc(sizeof(layer_acts) * (size_t)a->n_layers);
    A->mem = base_alloc(sz.used * sizeof(float));
    if (!A->layers || !A->mem)
        return base_fail(err, "out of memory: activations need %.2f GiB",
                         (double)sz.used * 4 / (1 << 30));
    A->mem_floats = sz.used;
    carver real = {A->mem, 0, 0};
    carve_all(&real, A, m, o->with_grads);
    for (int l = 0; l < a->n_layers; l++) {
        layer_acts *la = &A->layers[l];
        if (shares_scratch(m, l, o->with_grads)) {
            float *x = la->x;
            *la = A->scratch;
            la->x = x;
        } else if (stores16(m, l)) { /* the working set of its bf16-stored tensors */
            la->qp = A->scratch.qp, la->kp = A->scratch.kp, la->v = A->scratch.v;
            la->o = A->scratch.o, la->gate = A->scratch.gate, la->up = A->scratch.up;
            la->moe.y = A->scratch.moe.y, la->moe.xl = A->scratch.moe.xl;
        }
    }
    for (int l = 0; l < a->n_layers; l++) {
        A->layers[l].q = A->q;
        A->layers[l].k = A->k;
    }

    if (a->n_experts > 0 && !(A->aux = base_alloc(3 * (size_t)a->n_experts * sizeof(double))))
        return base_fail(err, "out of memory");
    return 0;
}

/* What a kernel's constraints see of a model run at batch x seq_len tokens a call: the shapes
 * a holds (this rank's under tensor parallelism), split further on the calls as m runs them
 * (ops_ctx_sites: sequence parallelism over m->tp, experts over m->ep, lmhead_ce on the whole
 * vocabulary with loss parallel off); m NULL: no split (the whole model, as inference runs it). */
static ops_ctx model_ops_ctx(const model *m, const model_args *a, int batch, int seq_len,
                             ops_prec prec) {
    return (ops_ctx){.batch = batch,
                     .seq_len = seq_len,
                     .dim = a->dim,
                     .n_heads = a->n_heads,
                     .n_kv_heads = a->n_kv_heads,
                     .head_dim = a->head_dim,
                     .ffn_dim = a->ffn_dim,
                     .vocab = a->vocab_size,
                     .n_experts = a->n_experts,
                     .top_k = a->top_k,
                     .moe_ffn_dim = a->moe_ffn_dim,
                     .prec = prec,
                     .sp = m ? m->tp.size : 1,
                     .ep = m ? m->ep.size : 1,
                     .ce_vocab = m && m->loss_parallel_off ? m->full_args.vocab_size : 0,
                     .docs = m && m->docs};
}

static int build(model *m, const model_args *a, const model_build_opts *o, build_weights bw,
                 base_err *err) {
    memset(m, 0, sizeof *m);
    if (model_args_validate(a, err)) return -1;
    if (o->batch <= 0 || o->seq_len <= 0)
        return base_fail(err, "batch (%d) and seq_len (%d) must be positive", o->batch, o->seq_len);
    m->tp = o->tp && o->tp->size > 1 ? *o->tp : (model_tp){.size = 1};
    m->ep = o->ep && o->ep->size > 1 ? *o->ep : (model_ep){.size = 1};
    model_args local;
    if (local_args(a, m->tp.size, m->ep.size, &local, err)) return -1;
    if ((long)o->batch * o->seq_len % m->tp.size)
        return base_fail(err,
                         "sequence parallelism: batch x seq_len (%d x %d) must be a multiple of "
                         "tensor_parallel_degree (%d)",
                         o->batch, o->seq_len, m->tp.size);
    /* Row counts up to tokens * n_heads (the per-head q norm) are passed to ops as int. */
    if ((double)o->batch * o->seq_len * a->n_heads > 2147483647.0)
        return base_fail(err, "batch*seq_len*n_heads (%d*%d*%d) exceeds 2^31", o->batch, o->seq_len,
                         a->n_heads);
    if (a->n_experts > 0) {
        /* routed rows (and their offsets) are int32; the MoE backward keeps K gate gradients
         * of a token on the stack */
        if ((double)o->batch * o->seq_len * a->top_k * a->dim > 9.2e18 ||
            (double)o->batch * o->seq_len * a->top_k * m->ep.size > 2147483647.0)
            return base_fail(err, "batch*seq_len*top_k (%d*%d*%d) exceeds 2^31", o->batch,
                             o->seq_len, a->top_k);
        if (a->top_k > 64) return base_fail(err, "top_k (%d) must be at most 64", a->top_k);
        if (o->balance != MODEL_BALANCE_NONE && o->balance != MODEL_BALANCE_AUX_LOSS &&
            o->balance != MODEL_BALANCE_BIAS)
            return base_fail(err, "unknown MoE load-balancing mode %d", (int)o->balance);
    }
    m->full_args = *a;
    m->args = local;
    a = &m->args; /* from here on: this rank's shapes */
    m->batch = o->batch;
    m->seq_len = o->seq_len;
    m->ac = o->ac;
    m->ac_every = o->ac_every;
    m->loss_parallel_off = o->loss_parallel_off && m->tp.size > 1;
    if (o->ac != MODEL_AC_NONE && o->ac != MODEL_AC_FULL && o->ac != MODEL_AC_SELECTIVE)
        return base_fail(err, "unknown activation checkpointing mode %d", (int)o->ac);
    if (o->ac == MODEL_AC_SELECTIVE && o->ac_every < 0)
        return base_fail(err,
                         "selective activation checkpointing: every %d-th block (must be >= 0)",
                         o->ac_every);
    if (model_layout(m, err)) return -1;
    m->ce_chunk = ce_chunk_for(a, o);

    m->external = bw == BUILD_EXTERNAL;
    const size_t wbytes = m->n_floats * sizeof(float);
    if (!m->external &&
        !(m->w = bw == BUILD_UNSET ? base_alloc_uninit(wbytes) : base_alloc(wbytes)))
        return base_fail(err, "out of memory: %zu parameters", m->n_floats);
    if (o->with_grads && !m->external) {
        m->g = base_alloc(m->n_floats * sizeof(float));
        if (!m->g) return base_fail(err, "out of memory: %zu gradients", m->n_floats);
        m->acts_in_grads = o->acts_in_grads;
    }
    if (a->n_experts > 0) {
        const size_t LE = (size_t)a->n_layers * a->n_experts;
        m->balance = o->balance;
        m->bias_rate = o->bias_rate > 0 ? o->bias_rate : 1e-3;
        m->force_balance = o->moe_force_balance;
        m->aux_scale = o->balance == MODEL_BALANCE_AUX_LOSS ? (float)a->router_aux_loss_coef : 0;
        m->moe_bias = base_alloc(LE * sizeof(float));
        m->moe_counts = base_alloc(LE * sizeof(int64_t));
        if (!m->moe_bias || !m->moe_counts) return base_fail(err, "out of memory");
        memset(m->moe_bias, 0, LE * sizeof(float));
        memset(m->moe_counts, 0, LE * sizeof(int64_t));
    }

    m->rope_cos = base_alloc(sizeof(float) * (size_t)o->seq_len * a->head_dim / 2);
    m->rope_sin = base_alloc(sizeof(float) * (size_t)o->seq_len * a->head_dim / 2);
    if (!m->rope_cos || !m->rope_sin) return base_fail(err, "out of memory");
    ops_rope_table(m->rope_cos, m->rope_sin, o->seq_len, a->head_dim, a->rope_theta);

    ops_register_builtin();
    m->ops = base_alloc(sizeof(ops_table) * (size_t)m->n_units);
    if (!m->ops) return base_fail(err, "out of memory");
    m->docs = o->docs;
    ops_ctx ctx = model_ops_ctx(m, a, o->batch, o->seq_len, o->prec);
    m->prec = o->prec;
    m->exchange_f32 = o->exchange_f32;
    if (o->prec == OPS_PREC_BF16) {
        /* uninitialised: the parts never converted (model_param_in_bf16_copy) cost no pages */
        m->w16 = base_alloc_uninit(ops_bf16_mirror_bytes(m->n_floats ? m->n_floats : 1));
        m->w16_fresh = base_alloc((size_t)m->n_units);
        if (!m->w16 || !m->w16_fresh) return base_fail(err, "out of memory (bf16 weight copy)");
        memset(m->w16_fresh, 0, (size_t)m->n_units);
    }
    const char **paths = base_alloc(sizeof(char *) * (size_t)m->n_units);
    uint32_t *calls = base_alloc(sizeof(uint32_t) * (size_t)m->n_units);
    if (!paths || !calls) {
        base_free(paths);
        base_free(calls);
        return base_fail(err, "out of memory");
    }
    for (int u = 0; u < m->n_units; u++) {
        paths[u] = m->units[u].name;
        calls[u] = unit_calls(m, u);
    }
    int rc = ops_resolve_units(m->ops, paths, calls, m->n_units, &ctx, o->overrides, o->n_overrides,
                               err);
    base_free(paths);
    base_free(calls);
    if (rc) { /* nothing stays bound; model_free must not release twice */
        base_free(m->ops);
        m->ops = NULL;
        return rc;
    }
    if (m->w16) { /* what the copy holds follows from the resolved ops: decided once */
        if (!(m->w16_param = base_alloc((size_t)(m->n_params ? m->n_params : 1))))
            return base_fail(err, "out of memory");
        for (int i = 0; i < m->n_params; i++)
            m->w16_param[i] = (unsigned char)model_param_in_bf16_copy(m, &m->params[i]);
    }
    return alloc_acts(m, o, err);
}

int model_build(model *m, const model_args *a, const model_build_opts *o, base_err *err) {
    return build(m, a, o, BUILD_ZEROED, err);
}

int model_build_unset(model *m, const model_args *a, const model_build_opts *o, base_err *err) {
    return build(m, a, o, BUILD_UNSET, err);
}

int model_build_external(model *m, const model_args *a, const model_build_opts *o, base_err *err) {
    return build(m, a, o, BUILD_EXTERNAL, err);
}

void model_free(model *m) {
    if (m->acts) {
        base_free(m->acts->layers);
        base_free(m->acts->mem);
        base_free(m->acts->aux);
        base_free(m->acts);
    }
    base_free(m->params);
    base_free(m->units);
    if (!m->external) {
        base_free(m->w);
        base_free(m->g);
    }
    if (m->ops)
        for (int u = 0; u < m->n_units; u++) ops_release(&m->ops[u]);
    base_free(m->ops);
    base_free(m->rope_cos);
    base_free(m->rope_sin);
    base_free(m->seg);
    base_free(m->moe_bias);
    base_free(m->moe_counts);
    if (m->w16_base) ops_bf16_mirror_remove(m->w16_base);
    if (m->w16) ops_bf16_mirror_layouts_clear(m->w16, ops_bf16_mirror_bytes(m->n_floats));
    base_free(m->w16);
    base_free(m->w16_fresh);
    base_free(m->w16_param);
    memset(m, 0, sizeof *m);
}

void model_weights_changed(model *m) {
    if (m->w16_fresh) memset(m->w16_fresh, 0, (size_t)m->n_units);
}

int model_bf16_copy_current(model *m) {
    if (!m->w16 || m->w16_transient || m->w16_base != m->w) return 0;
    memset(m->w16_fresh, 1, (size_t)m->n_units);
    return 1;
}

/* bf16: makes unit u's copy in w16 current (its parameters are in w now: after the hook),
 * converting those the hook did not write there (given: its MODEL_W16_* mask). */
static void bf16_sync(const model *m, int u, int given) {
    if (!m->w16 || m->w16_fresh[u]) return;
    model *mm = (model *)m;        /* the copy is a cache of w: logically const */
    if (m->w16_layouts && given) { /* a hook wrote the copy row-major: no layouts any more */
        ops_bf16_mirror_layouts_clear(m->w16, ops_bf16_mirror_bytes(m->n_floats));
        mm->w16_layouts = 0;
        memset(m->w16_fresh, 0, (size_t)m->n_units);
    }
    /* the first sync (once the ops resolved and FSDP said whether the copy is transient); not
     * again should the mirror's registration below fail, nor over parts a hook wrote */
    if (!m->w16_base && !m->w16_layouts && !given && !m->w16_transient) {
        for (int i = 0; i < m->n_params; i++) {
            const model_param *p = &m->params[i];
            if (m->w16_param[i] && p->ndim == 3 && p->readers == 1u << OPS_GROUPED_MM)
                mm->w16_layouts += ops_bf16_mirror_layout_grouped(
                    m->w16, p->offset, m->ops[p->unit].impl[OPS_GROUPED_MM], (int)p->shape[0],
                    (int)p->shape[1], (int)p->shape[2]);
        }
        if (m->w16_layouts)
            base_log(BASE_LOG_INFO,
                     "bf16 weight copy: %d expert stacks in grouped_mm's own layout (not repacked "
                     "per call)",
                     m->w16_layouts);
    }
    if (m->w16_base != m->w) {
        if (m->w16_base) ops_bf16_mirror_remove(m->w16_base);
        base_err err;
        if (ops_bf16_mirror_add(m->w, m->n_floats, m->w16, &err)) {
            /* without the mirror the GEMMs convert the weights themselves: same numbers */
            base_log(BASE_LOG_WARN, "%s", err.msg);
        } else {
            mm->w16_base = m->w;
        }
    }
    for (int i = 0; i < m->n_params; i++) {
        const model_param *p = &m->params[i];
        const int part = p->tp_split == MODEL_EP_EXPERTS ? MODEL_W16_EXPERTS : MODEL_W16_DENSE;
        if (p->unit == u && m->w16_param[i] && !(given & part))
            ops_bf16_mirror_convert(m->w16, p->offset, m->w + p->offset, p->numel);
    }
    m->w16_fresh[u] = 1;
}

/* bf16, transient copies: unit u's copy is returned to the system (its whole pages) and made
 * again on the next use. */
static void bf16_release(const model *m, int u) {
    if (!m->w16 || !m->w16_transient || !m->w16_fresh[u]) return;
    m->w16_fresh[u] = 0;
    const size_t es = ops_bf16_mirror_bytes(1);
    base_release_pages((char *)m->w16 + m->units[u].offset * es, m->units[u].numel * es);
}

void model_bf16_sync_all(const model *m) {
    if (!m->w16) return;
    memset(m->w16_fresh, 0, (size_t)m->n_units);
    for (int u = 0; u < m->n_units; u++) bf16_sync(m, u, 0);
}

void model_grad_set_to_none(model *m, int zeros) {
    m->g_set_to_none = zeros ? 2 : 1;
}

void model_zero_grad(model *m) {
    model_weights_changed(m);
    m->g_set_to_none = 0;
    if (m->g) ops_zero(m->g, m->n_floats);
    if (m->moe_counts)
        memset(m->moe_counts, 0,
               (size_t)m->args.n_layers * m->args.n_experts * sizeof(*m->moe_counts));
}

static void add_inplace(float *y, const float *x, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}

static void hook(const model *m, int unit, model_phase p) {
    ops_prof_unit(unit); /* the unit whose ops run next: the profiler's layer path */
    const int given = m->hook ? m->hook(m->hook_ctx, unit, p) : 0;
    const int tied_head = unit == m->args.n_layers + 1 && m->args.tie_embeddings;
    /* a backward that reads no parameters (the embedding's) needs no bf16 copy: under FSDP its
     * unit is not even gathered for it */
    if (m->w16 &&
        (p == MODEL_FWD_BEGIN || (p == MODEL_BWD_BEGIN && model_unit_bwd_reads_params(m, unit)))) {
        bf16_sync(m, unit, given);
        if (tied_head) bf16_sync(m, 0, 0);
    } else if (m->w16_transient) { /* the END phases; the BEGIN of a backward reading none */
        bf16_release(m, unit);
        if (tied_head) bf16_release(m, 0);
    }
}

/* The geometry of a training microbatch: B windows of T tokens at positions 0..T-1. */
static block_geom train_geom(const model *m) {
    block_geom g = {.B = m->batch,
                    .T = m->seq_len,
                    .cos = m->rope_cos,
                    .sin = m->rope_sin,
                    .norm_out = m->acts->norm_out,
                    .hact = m->acts->hact,
                    .norm_full = m->acts->norm_full,
                    .part = m->acts->part,
                    .xs = m->acts->xs,
                    .ep_buf = m->acts->ep_buf,
                    .seg = m->seg,
                    .n_seg = m->n_seg};
    return g;
}

int model_set_positions(model *m, const int32_t *pos, base_err *err) {
    if (!pos) {
        base_free(m->seg);
        m->seg = NULL, m->n_seg = 0;
        return 0;
    }
    if (!m->docs)
        return base_fail(err, "document positions: the model was built without document masking "
                              "(model_build_opts.docs)");
    const int B = m->batch, T = m->seq_len;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const int32_t p = pos[(size_t)b * T + t];
            if (p != 0 && (t == 0 || p != pos[(size_t)b * T + t - 1] + 1))
                return base_fail(err,
                                 "document positions: window %d, token %d has position %d "
                                 "(a window starts at 0; each token is 0 or one past the last)",
                                 b, t, (int)p);
        }
    if (!m->seg) {
        m->seg = base_alloc(((size_t)B * T + 1) * sizeof *m->seg);
        if (!m->seg) return base_fail(err, "out of memory");
    }
    m->n_seg = 0;
    for (int i = 0; i < B * T; i++)
        if (pos[i] == 0) m->seg[m->n_seg++] = i;
    m->seg[m->n_seg] = B * T;
    return 0;
}

/* Causal attention over la's q, k, v (its backward written into dq, dk, dv from dout when dq):
 * each window whole, or each document segment alone (batch 1; its lse rows the [H, len] block at
 * H * its start within its window's [H, T]; the segments tile the rows, so each is written). */
static void attention_run(const ops_table *t, const layer_acts *la, const block_geom *g, int H,
                          int G, int hd, float *dq, float *dk, float *dv, const float *dout) {
    const int whole = !g->seg, n = whole ? 1 : g->n_seg;
    for (int i = 0; i < n; i++) {
        const size_t a = whole ? 0 : (size_t)g->seg[i], w = a / (size_t)g->T;
        const size_t qo = a * H * hd, ko = a * G * hd, lo = w * H * g->T + (a - w * g->T) * H;
        const int B = whole ? g->B : 1, T = whole ? g->T : g->seg[i + 1] - g->seg[i];
        if (dq)
            t->attention_bwd(dq + qo, dk + ko, dv + ko, dout + qo, la->o + qo, la->lse + lo,
                             la->q + qo, la->k + ko, la->v + ko, B, T, H, G, hd, 0);
        else
            t->attention_fwd(la->o + qo, la->lse + lo, la->q + qo, la->k + ko, la->v + ko, B, T, H,
                             G, hd);
    }
}

int model_bf16_wire(const model *m, const ops_table *t, ops_kind k) {
    return !m->exchange_f32 && model_runs16(m, t, k);
}

int model_bf16_wire_kept(const model *m, const ops_table *t) {
    return !m->exchange_f32 && model_block16(m, t);
}

/* Sequence parallelism over the TP group (nothing when tp = 1, where full and local alias):
 * full[N,D] = the ranks' local[n,D] stacked (bf16: moved in bf16, model_bf16_wire);
 * local[n,D] = this rank's rows of the sum. */
static void tp_gather(const model *m, float *full, const float *local, size_t n, int bf16) {
    if (m->tp.size > 1) m->tp.allgather(m->tp.ctx, full, local, n, bf16);
}
static void tp_scatter(const model *m, float *local, const float *full, size_t n) {
    if (m->tp.size > 1) m->tp.reduce_scatter(m->tp.ctx, local, full, n);
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

/* The gathered norm output nf[0, n) of a dense block is read by its q, k, v (or w1, w3)
 * projections only (forward; their weight gradients in backward), several GEMMs on one
 * operand: where the block's matmul is a bf16 implementation it is held (ops_bf16_hold), so it
 * is converted once, not once per GEMM; rounding it in place is exact, since every reader
 * rounds it anyway. 1 when held (the caller releases it after the GEMMs). */
static int hold_norm(const model *m, const ops_table *t, float *nf, size_t n) {
    return model_runs16(m, t, OPS_MATMUL) && !ops_bf16_hold(nf, n);
}

/* A block's norm into out (rmsnorm, or add_rmsnorm with h; n rows), all-gathered into nf (N
 * rows), whose only readers are the q, k, v (or a dense FFN's w1, w3) GEMMs, held for them as
 * hold_norm holds it. Where nf is out itself (no all-gather between) it is asked for in bf16
 * instead (emit_begin), so that a norm that writes bf16 (the CPU kernels on the onednn engine)
 * stores only the bits, into the held mirror, and no conversion follows: the same bits and the
 * same hold. 1 when held (the caller releases nf after its GEMMs). */
static int norm_held(const model *m, const ops_table *t, float *nf, float *h, float *out,
                     float *rstd, const float *x, const float *y, const float *w, int n, int N,
                     int D, float eps, int wire16) {
    const int e16 = nf == out && model_runs16(m, t, OPS_MATMUL);
    emit_begin(e16, out, (size_t)n * D);
    if (h)
        t->add_rmsnorm_fwd(h, out, rstd, x, y, w, n, D, eps);
    else
        t->rmsnorm_fwd(out, rstd, x, w, n, D, eps);
    if (e16) return emit_end(1, out);
    tp_gather(m, nf, out, (size_t)n * D, wire16);
    return hold_norm(m, t, nf, (size_t)N * D);
}

/* A model_act16 tensor of a bf16 block after model_keep16 (rounded in place, its bits stored
 * unless the block is checkpointed) or unkeep16 (expanded from them), held as the bf16 operand
 * of what reads it next, the attention output o of wo's GEMMs and v of attention's: nothing is
 * converted (the emulated engine reads the rounded values, onednn the stored bits). 1 when
 * held (the caller releases it before the tensor is written again). */
static int hold_kept(const model *m, const ops_table *t, layer_acts *la, model_act16 s, size_t n) {
    return model_block16(m, t) && !ops_bf16_hold_rounded(act16_f32(la, s), n, la->b16[s]);
}

void model_block_forward(const model *m, int l, layer_acts *la, const block_geom *g, float *out) {
    const model_args *a = &m->args;
    const ops_table *t = &m->ops[1 + l];
    const int B = g->B, T = g->T, N = B * T, D = a->dim, H = a->n_heads, G = a->n_kv_heads,
              hd = a->head_dim, F = a->ffn_dim, n = N / m->tp.size;
    const size_t nD = (size_t)n * D;
    const float eps = (float)a->norm_eps;
    block_view w = block_at(m, m->w, l);
    float *nf = g->norm_full ? g->norm_full : g->norm_out; /* [N,D] the gathered norm */
    /* nf feeds only the q, k, v and w1, w3 GEMMs (and their weight gradients in backward) */
    const int wire16 = model_bf16_wire(m, t, OPS_MATMUL);

    /* x[n] -> norm -> all-gather -> column-parallel q, k, v over all N rows (local heads) */
    int held = norm_held(m, t, nf, NULL, g->norm_out, la->rstd1, la->x, NULL, w.attn_norm, n, N, D,
                         eps, wire16);
    matmul_keep16(m, t, la, MODEL_ACT16_QP, nf, w.wq, N, D, H * hd);
    matmul_keep16(m, t, la, MODEL_ACT16_KP, nf, w.wk, N, D, G * hd);
    matmul_keep16(m, t, la, MODEL_ACT16_V, nf, w.wv, N, D, G * hd);
    if (held) ops_bf16_release(nf);
    qk_norm_rope(m, t, la, &w, g);
    if (!g->k_cache || g->pos0 == 0) { /* windows from position 0: the cache rows are [1,T,G,hd] */
        held = hold_kept(m, t, la, MODEL_ACT16_V, (size_t)N * G * hd);
        attention_run(t, la, g, H, G, hd, NULL, NULL, NULL, NULL);
        if (held) ops_bf16_release(la->v);
    } else {
        t->attention_kv(la->o, la->q, g->k_cache, g->v_cache, T, g->pos0, H, G, hd);
    }
    model_keep16(m, t, la, MODEL_ACT16_O, (size_t)N * H * hd);
    /* row-parallel wo: partial sums over the local heads, reduce-scattered to x's rows */
    float *po = g->part ? g->part : la->xm;
    held = hold_kept(m, t, la, MODEL_ACT16_O, (size_t)N * H * hd);
    t->matmul_fwd(po, la->o, w.wo, N, H * hd, D);
    if (held) ops_bf16_release(la->o);
    tp_scatter(m, la->xm, po, nD);
    /* xm = x + attention output, and the FFN norm of xm, in one pass */
    if (a->n_experts > 0) { /* MoE: tensor parallelism is refused for it, so n = N */
        t->add_rmsnorm_fwd(la->xm, g->norm_out, la->rstd2, la->xm, la->x, w.ffn_norm, n, D, eps);
        model_moe_forward(m, l, la, g, g->norm_out, out);
    } else {
        held = norm_held(m, t, nf, la->xm, g->norm_out, la->rstd2, la->xm, la->x, w.ffn_norm, n, N,
                         D, eps, wire16);
        matmul_keep16(m, t, la, MODEL_ACT16_GATE, nf, w.w1, N, D, F);
        matmul_keep16(m, t, la, MODEL_ACT16_UP, nf, w.w3, N, D, F);
        if (held) ops_bf16_release(nf);
        held = model_swiglu_fwd(m, t, la, g->hact, N, F, 0);
        float *pf = g->part ? g->part : out;
        t->matmul_fwd(pf, g->hact, w.w2, N, F, D);
        if (held) ops_bf16_release(g->hact);
        tp_scatter(m, out, pf, nD);
    }
    add_inplace(out, la->xm, nD);
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
              G = a->n_kv_heads, hd = a->head_dim, F = a->ffn_dim, n = N / m->tp.size;
    const size_t nD = (size_t)n * D, NQ = (size_t)N * H * hd, NKV = (size_t)N * G * hd;
    /* [N,D] views: the gathered norm output, the gathered dres, the partial d(norm output);
     * the [n,D] buffers themselves when tp = 1 */
    float *nf = A->norm_full ? A->norm_full : A->norm_out, *df = A->dfull ? A->dfull : A->dres,
          *dnf = A->dnorm_full ? A->dnorm_full : A->dnorm;
    const float eps = (float)a->norm_eps;
    block_view w = block_at(m, m->w, l), g = block_at(m, m->g, l);
    const block_geom geom = train_geom(m);
    const int acc = !m->g_set_to_none; /* the ops' dw_acc: each weight's gradient once a block */
    float *dres = A->dres;
    /* nf feeds the weight gradients' GEMMs only, df matmul_bwd's dY only (both its products) */
    const int wire16 = model_bf16_wire(m, t, OPS_MATMUL);

    /* A checkpointed block: recompute its saved activations into the shared scratch. The
     * block output is not needed; A->xn (the final norm output) is free scratch by now. */
    if (model_ac_block(m->ac, m->ac_every, l))
        model_block_forward(m, l, la, &geom, A->xn);
    else
        unkeep16(m, t, la);

    /* FFN: out = xm + w2(silu(w1 f) * w3 f), f = rmsnorm(xm); or out = xm + MoE(f). */
    /* (TP: the mirror of forward: all-gather dres where forward reduce-scattered, and
     * reduce-scatter the norm-input gradient where forward all-gathered the norm output) */
    if (a->n_experts > 0) { /* MoE (tp = 1, n = N; it writes dnorm) */
        t->rmsnorm_fwd(A->norm_out, la->rstd2, la->xm, w.ffn_norm, n, D, eps);
        const model_moe_scratch s = {
            A->xs,
            A->dy,
            A->hact,
            A->dhact,
            A->dgate,
            A->dup,
            A->ep_buf,
            A->dlog,
            m->balance == MODEL_BALANCE_AUX_LOSS ? A->aux + 2 * (size_t)a->n_experts : NULL};
        model_moe_backward(m, l, la, A->norm_out, dres, A->dnorm, &s);
    } else {
        const int held = norm_held(m, t, nf, NULL, A->norm_out, la->rstd2, la->xm, NULL, w.ffn_norm,
                                   n, N, D, eps, wire16);
        const int held_h = model_swiglu_fwd(m, t, la, A->hact, N, F, 1);
        tp_gather(m, df, dres, nD, wire16);
        t->matmul_bwd(A->dhact, g.w2, df, A->hact, w.w2, N, F, D, 0, acc);
        if (held_h) ops_bf16_release(A->hact);
        const int held_d = model_swiglu_bwd(m, t, la, A->dgate, A->dup, A->dhact, N, F);
        t->matmul_bwd(dnf, g.w1, A->dgate, nf, w.w1, N, D, F, 0, acc);
        t->matmul_bwd(dnf, g.w3, A->dup, nf, w.w3, N, D, F, 1, acc);
        if (held) ops_bf16_release(nf);
        model_swiglu_release(A->dgate, A->dup, held_d);
        tp_scatter(m, A->dnorm, dnf, nD);
    }
    /* dres: dL/d(out) on entry, dL/dxm after; the add passes it on to x unchanged */
    t->add_rmsnorm_bwd(dres, g.ffn_norm, A->dnorm, la->xm, w.ffn_norm, la->rstd2, n, D, 1, acc);

    /* Attention: xm = x + wo(attn(rope(qnorm(wq a)), rope(knorm(wk a)), wv a)), a = rmsnorm(x). */
    tp_gather(m, df, dres, nD, wire16);
    const int held_o = hold_kept(m, t, la, MODEL_ACT16_O, NQ),
              held_v = hold_kept(m, t, la, MODEL_ACT16_V, NKV);
    t->matmul_bwd(A->dqk_o, g.wo, df, la->o, w.wo, N, H * hd, D, 0, acc);
    /* q and k after norm + RoPE, recomputed from the saved projections (same bits). */
    qk_norm_rope(m, t, la, &w, &geom);
    attention_run(t, la, &geom, H, G, hd, A->dq, A->dk, A->dv, A->dqk_o);
    if (held_o) ops_bf16_release(la->o);
    if (held_v) ops_bf16_release(la->v);
    /* RoPE's backward in place (dq, dk become the gradients of the normed q, k), then the
     * q/k norms' into dqn, dkn: d(qp), d(kp) */
    t->rope_bwd(A->dq, A->dq, m->rope_cos, m->rope_sin, B, T, H, hd);
    t->rope_bwd(A->dk, A->dk, m->rope_cos, m->rope_sin, B, T, G, hd);
    t->rmsnorm_bwd(A->dqn, g.q_norm, A->dq, la->qp, w.q_norm, la->q_rstd, N * H, hd, 0, acc);
    t->rmsnorm_bwd(A->dkn, g.k_norm, A->dk, la->kp, w.k_norm, la->k_rstd, N * G, hd, 0, acc);
    const int held = norm_held(m, t, nf, NULL, A->norm_out, la->rstd1, la->x, NULL, w.attn_norm, n,
                               N, D, eps, wire16);
    t->matmul_bwd(dnf, g.wq, A->dqn, nf, w.wq, N, D, H * hd, 0, acc);
    t->matmul_bwd(dnf, g.wk, A->dkn, nf, w.wk, N, D, G * hd, 1, acc);
    t->matmul_bwd(dnf, g.wv, A->dv, nf, w.wv, N, D, G * hd, 1, acc);
    if (held) ops_bf16_release(nf);
    tp_scatter(m, A->dnorm, dnf, nD);
    t->rmsnorm_bwd(dres, g.attn_norm, A->dnorm, la->x, w.attn_norm, la->rstd1, n, D, 1, acc);
}

/* Vocab-parallel embedding: A->tok_local[N] = the tokens' ids in this rank's shard, 0 for
 * tokens of other shards (whose rows zero_foreign_rows then clears). */
static void embed_tokens_local(model *m, const int32_t *tokens) {
    const int N = m->batch * m->seq_len, V = m->args.vocab_size, v0 = m->tp.rank * V;
    for (int i = 0; i < N; i++)
        m->acts->tok_local[i] = tokens[i] >= v0 && tokens[i] < v0 + V ? tokens[i] - v0 : 0;
}

static void zero_foreign_rows(model *m, float *x, const int32_t *tokens) {
    const int N = m->batch * m->seq_len, V = m->args.vocab_size, v0 = m->tp.rank * V;
    const size_t D = (size_t)m->args.dim;
    for (int i = 0; i < N; i++)
        if (tokens[i] < v0 || tokens[i] >= v0 + V) ops_zero(x + (size_t)i * D, D);
}

static void allreduce_vocab(void *ctx, double *x, int n, int max) {
    const model *m = ctx;
    m->tp.allreduce(m->tp.ctx, x, n, max);
}

/* Embedding and all blocks: leaves the final hidden state in A->xf and its norm in A->xn.
 * training: a forward that backward follows (MoE routing is counted in m->moe_counts). */
static void forward_trunk(model *m, const int32_t *tokens, int training) {
    const model_args *a = &m->args;
    model_acts *A = m->acts;
    const int N = m->batch * m->seq_len, L = a->n_layers, n = N / m->tp.size;
    block_geom geom = train_geom(m);
    const int aux = a->n_experts > 0 && m->balance == MODEL_BALANCE_AUX_LOSS;
    if (a->n_experts > 0 && training) geom.counts = m->moe_counts;
    if (aux) {
        memset(A->aux, 0, 2 * (size_t)a->n_experts * sizeof(double));
        geom.aux_acc = A->aux;
    }
    hook(m, 0, MODEL_FWD_BEGIN);
    if (m->tp.size == 1) {
        m->ops[0].embedding_fwd(A->layers[0].x, tokens, embed_at(m, m->w), N, a->dim);
    } else { /* vocab-parallel: this shard's rows, zeros elsewhere, summed into x's rows */
        embed_tokens_local(m, tokens);
        m->ops[0].embedding_fwd(A->part, A->tok_local, embed_at(m, m->w), N, a->dim);
        zero_foreign_rows(m, A->part, tokens);
        tp_scatter(m, A->layers[0].x, A->part, (size_t)n * a->dim);
    }
    hook(m, 0, MODEL_FWD_END);
    for (int l = 0; l < L; l++) {
        hook(m, 1 + l, MODEL_FWD_BEGIN);
        model_block_forward(m, l, &A->layers[l], &geom, l + 1 < L ? A->layers[l + 1].x : A->xf);
        hook(m, 1 + l, MODEL_FWD_END);
    }
    if (aux) model_moe_aux_finish(m, A->aux, A->aux + 2 * (size_t)a->n_experts);
    hook(m, L + 1, MODEL_FWD_BEGIN);
    model_final_norm(m, A->xn, A->rstd_f, A->xf, n);
    if (A->xn_full) /* read by the lm_head + CE's GEMMs only */
        tp_gather(m, A->xn_full, A->xn, (size_t)n * a->dim,
                  model_bf16_wire(m, &m->ops[L + 1], OPS_LMHEAD_CE));
}

double model_step_microbatch(model *m, const int32_t *tokens, const int32_t *targets,
                             float grad_scale, int64_t *n_valid) {
    const model_args *a = &m->args;
    model_acts *A = m->acts;
    const int N = m->batch * m->seq_len, L = a->n_layers, D = a->dim, n = N / m->tp.size;
    const ops_table *th = &m->ops[L + 1];
    const int backward = m->g != NULL && grad_scale != 0.0f;
    if (backward && m->acts_in_grads && !m->g_set_to_none)
        base_fatal("model_step_microbatch: a backward that adds to the gradients, whose pages "
                   "hold the saved activations (model_build_opts.acts_in_grads: one backward "
                   "per step, after model_grad_set_to_none)");
    /* TP: the loss-parallel CE runs on all N gathered rows against this vocabulary shard (or,
     * loss parallel off, against the whole vocabulary) */
    float *xn = A->xn_full ? A->xn_full : A->xn, *dxn = A->dxn_full ? A->dxn_full : A->dxn;
    const ops_vocab_shard vs = {.v0 = m->tp.rank * a->vocab_size,
                                .v_total = m->full_args.vocab_size,
                                .allreduce = allreduce_vocab,
                                .ctx = m};

    forward_trunk(m, tokens, backward);
    if (backward) {
        ops_zero(dxn, (size_t)N * D);
        hook(m, L + 1, MODEL_BWD_BEGIN);
    }
    /* loss parallel off: the whole vocabulary's weight [V,D] and gradient on every rank */
    const size_t VlD = (size_t)a->vocab_size * D;
    const float *hw = head_at(m, m->w);
    float *hg = backward ? head_at(m, m->g) : NULL;
    /* the ops' dw_acc: 0 on a backward that writes each parameter's gradient (set_to_none) */
    const int acc = !m->g_set_to_none;
    if (m->loss_parallel_off) {
        tp_gather(m, A->head_full, hw, VlD, model_bf16_wire(m, th, OPS_LMHEAD_CE)); /* GEMMs */
        hw = A->head_full;
        if (hg) hg = A->dhead_full; /* written whole (dw_acc 0): a scratch */
    }
    double loss = th->lmhead_ce(backward ? dxn : NULL, hg, xn, hw, targets, N, D,
                                m->loss_parallel_off ? m->full_args.vocab_size : a->vocab_size,
                                grad_scale, A->ce_scratch, A->ce_chunk, n_valid,
                                m->tp.size > 1 && !m->loss_parallel_off ? &vs : NULL,
                                m->loss_parallel_off ? 0 : acc);
    if (!backward) {
        hook(m, L + 1, MODEL_FWD_END);
        return loss;
    }

    if (m->loss_parallel_off) { /* complete gradients: keep this rank's rows */
        const float *mine = A->dhead_full + (size_t)m->tp.rank * VlD;
        if (acc)
            add_inplace(head_at(m, m->g), mine, VlD);
        else
            memcpy(head_at(m, m->g), mine, sizeof(float) * VlD);
        memcpy(A->dxn, dxn + (size_t)m->tp.rank * n * D, sizeof(float) * (size_t)n * D);
    } else {
        tp_scatter(m, A->dxn, dxn, (size_t)n * D);
    }
    th->rmsnorm_bwd(A->dres, final_norm_at(m, m->g), A->dxn, A->xf, final_norm_at(m, m->w),
                    A->rstd_f, n, D, 0, acc);
    hook(m, L + 1, MODEL_BWD_END);
    for (int l = L - 1; l >= 0; l--) {
        hook(m, 1 + l, MODEL_BWD_BEGIN);
        block_backward(m, l, &A->layers[l]);
        hook(m, 1 + l, MODEL_BWD_END);
    }
    hook(m, 0, MODEL_BWD_BEGIN);
    /* the embedding's scatter only adds (oplist.h): an untied table's gradient is zeroed for
     * its first write, unless g reads as zeros already (FSDP dropped it: zeroing would fault in
     * the whole table's pages where the scatter touches the batch's rows); a tied one holds the
     * lm_head's by now */
    if (m->g_set_to_none == 1 && !a->tie_embeddings)
        ops_zero(embed_at(m, m->g), (size_t)a->vocab_size * (size_t)D);
    if (m->tp.size == 1) {
        m->ops[0].embedding_bwd(embed_at(m, m->g), A->dres, tokens, N, D);
    } else { /* all N rows' gradients, those of this shard's tokens only */
        tp_gather(m, A->dfull, A->dres, (size_t)n * D, 0); /* the fp32 embedding_bwd's */
        zero_foreign_rows(m, A->dfull, tokens);
        m->ops[0].embedding_bwd(embed_at(m, m->g), A->dfull, A->tok_local, N, D);
    }
    hook(m, 0, MODEL_BWD_END);
    m->g_set_to_none = 0; /* every gradient written: the next backward adds */
    return loss;
}

size_t model_activation_bytes(const model *m) {
    return m->acts ? m->acts->mem_floats * sizeof(float) : 0;
}

void model_logits(model *m, const int32_t *tokens, float *logits) {
    model_weights_changed(m);
    forward_trunk(m, tokens, 0);
    model_lm_head(m, logits, m->acts->xn, m->batch * m->seq_len);
    hook(m, m->args.n_layers + 1, MODEL_FWD_END);
}

int model_kernels_fit(const model *m, int batch, int seq_len, base_err *err) {
    /* the whole model: a tensor- or expert-parallel run samples on its assembled copy */
    const ops_ctx ctx = model_ops_ctx(NULL, &m->full_args, batch, seq_len, m->prec);
    for (int u = 0; m->ops && u < m->n_units; u++)
        if (ops_check_table(&m->ops[u], m->units[u].name, unit_calls(m, u), &ctx, err)) return -1;
    return 0;
}

int model_kernel_choices(const model *m, char *buf, size_t size) {
    if (size) buf[0] = '\0';
    if (!m->ops) return 0;
    const char **paths = base_alloc(sizeof(char *) * (size_t)(m->n_units ? m->n_units : 1));
    if (!paths) return 0;
    for (int u = 0; u < m->n_units; u++) paths[u] = m->units[u].name;
    const int n = ops_choices(m->ops, paths, m->n_units, m->prec, buf, size);
    base_free(paths);
    return n;
}
