/* The Qwen3-MoE feed-forward block: forward and hand-written backward, load balancing, routing
 * statistics and the memory model.
 *
 * Forward, for h = ffn_norm(x) [N,D] (spec §2.1-2.4; HF Qwen3MoeSparseMoeBlock):
 *   logits = h @ router^T [N,E]; p = softmax(logits) in fp32
 *   ids    = top-k of p (+ expert bias when balancing by bias), by decreasing score, ties to the
 *            lower expert id; or round-robin, (n*K + k) mod E, when forced to balance
 *   gates  = p[ids], divided by their sum when norm_topk_prob (the bias never enters the gates)
 *   the N*K assignments (n, k) are sorted stably by expert (a counting sort: within an expert in
 *   token order), giving R = N*K rows xs[i] = h[tok[i]] in groups offs[e]..offs[e+1]
 *   per group e: y = down_e(silu(gate_e xs) * up_e xs) through the grouped_mm op
 *   out[n] = sum_k gates[n,k] * y[slot[n,k]], k = 0..K-1 in order, one thread per token (a
 *   deterministic scatter-add: no atomics, a fixed order).
 * Backward runs the same steps in reverse: the gate gradients <dout[n], y[slot]>, the experts
 * (grouped_mm backward), the gather's transpose (again per token in k order), the top-k
 * renormalisation, the softmax and the router. Expert ids and the sort are constants of the
 * forward (no gradient), as in PyTorch.
 *
 * Expert parallelism (m->ep.size = P > 1; torchtitan's all-to-all token dispatch): every
 * rank routes its own tokens over all E experts as above; rank p owns experts
 * [p El, (p+1) El), El = E/P, so the sorted rows xs are already grouped by destination.
 * The ranks exchange their [P,El] row counts (alltoall), then the rows (alltoallv); each runs
 * its El experts on what it received (regrouped by local expert, then source rank, then the
 * source's order) and sends the outputs back the same way (the reverse alltoallv), so y holds
 * exactly the rows a local run would have produced and the combine is unchanged. Backward
 * sends d y to the owners and the d xs rows back. Expert gradients are complete on their
 * owner (it saw every row routed to its experts); nothing else changes. In a bf16 run the two
 * dispatches (xs forward, d y backward: read by grouped_mm only, which rounds them) move bf16
 * rows (model_bf16_wire), and so do the expert outputs y sent back in forward (also in the AC
 * recompute) where the receiving block rounds them on arrival (model_keep16; the test is
 * model_bf16_wire_kept, so the two cannot disagree): bitwise the same results, half the bytes.
 * The d xs rows sent back in backward are summed per token after they arrive, and move fp32. */
#include <math.h>
#include <string.h>

#include "model/internal.h"

static size_t al16(size_t n) {
    return (n + 15) / 16 * 16;
}

/* EP saved state: xl [C,D] (with_rows), perm [C], loffs [El+1], cnt [2 P El + 2 P]
 * (C = R P). */
static size_t ep_floats(const model_args *a, size_t R, int with_rows) {
    const size_t P = (size_t)model_moe_ep(a), El = (size_t)a->n_experts / P, C = R * P;
    return P > 1 ? (with_rows ? al16(C * a->dim) : 0) + al16(C) + al16(El + 1) +
                       al16(2 * P * El + 2 * P)
                 : 0;
}

size_t model_moe_saved_floats(const model_args *a, size_t N, int with_rows) {
    const size_t E = a->n_experts, K = a->top_k, R = N * K;
    return al16(N * E) + 3 * al16(N * K) + al16(R) + al16(E + 1) +
           (with_rows ? al16(R * a->dim) : 0) + ep_floats(a, R, with_rows);
}

void model_moe_carve(const model_args *a, size_t N, float *p, moe_acts *ma, int with_rows) {
    const size_t E = a->n_experts, K = a->top_k, R = N * K, P = (size_t)model_moe_ep(a);
    ma->probs = p, p += al16(N * E);
    ma->gates = p, p += al16(N * K);
    ma->topi = (int32_t *)p, p += al16(N * K);
    ma->slot = (int32_t *)p, p += al16(N * K);
    ma->tok = (int32_t *)p, p += al16(R);
    ma->offs = (int32_t *)p, p += al16(E + 1);
    ma->y = with_rows ? p : NULL, p += with_rows ? al16(R * a->dim) : 0;
    ma->xl = NULL, ma->perm = ma->loffs = ma->cnt = NULL;
    if (P == 1) return;
    const size_t C = R * P, El = E / P;
    if (with_rows) ma->xl = p, p += al16(C * a->dim);
    ma->perm = (int32_t *)p, p += al16(C);
    ma->loffs = (int32_t *)p, p += al16(El + 1);
    ma->cnt = (int32_t *)p;
}

/* The expert SwiGLUs on R sorted rows x[R,D] in nE groups offs[nE+1]: gate, up [R,Fe] (saved),
 * hact [R,Fe] (scratch), y[R,D] = down(silu(gate) * up). */
static void experts_fwd(const model *m, layer_acts *la, const ops_table *t, const block_view *w,
                        const float *x, const int32_t *offs, int nE, int R, int D, int Fe,
                        float *hact, float *y) {
    const size_t RF = (size_t)R * Fe;
    /* x is both projections' operand: in bf16 converted once, not once per call */
    const int held = model_runs16(m, t, OPS_GROUPED_MM) && !ops_bf16_hold_copy(x, (size_t)R * D);
    t->grouped_mm_fwd(la->gate, x, w->ew1, offs, nE, D, Fe);
    t->grouped_mm_fwd(la->up, x, w->ew3, offs, nE, D, Fe);
    if (held) ops_bf16_release(x);
    model_keep16(m, t, la, MODEL_ACT16_GATE, RF);
    model_keep16(m, t, la, MODEL_ACT16_UP, RF);
    const int hh = model_swiglu_fwd(m, t, la, hact, R, Fe, 0);
    t->grouped_mm_fwd(y, hact, w->ew2, offs, nE, Fe, D);
    if (hh) ops_bf16_release(hact);
}

/* Their backward: dy[R,D] = dL/dy on entry, dL/dx on exit (dy is consumed first); the expert
 * gradients go into gw (added, or written: acc is the ops' dw_acc). x: the rows the forward ran
 * on. */
static void experts_bwd(const model *m, layer_acts *la, const ops_table *t, const block_view *w,
                        const block_view *gw, const float *x, const int32_t *offs, int nE, int R,
                        int D, int Fe, float *dy, const model_moe_scratch *s, int acc) {
    const int hh = model_swiglu_fwd(m, t, la, s->hact, R, Fe, 1);
    /* the input gradients written by their first op (dx_acc 0), the up projection's added */
    t->grouped_mm_bwd(s->dhact, gw->ew2, dy, s->hact, w->ew2, offs, nE, Fe, D, 0, acc);
    if (hh) ops_bf16_release(s->hact);
    const int hd = model_swiglu_bwd(m, t, la, s->dgate, s->dup, s->dhact, R, Fe);
    float *dx = dy; /* dy is consumed: reuse it for d(x) */
    t->grouped_mm_bwd(dx, gw->ew1, s->dgate, x, w->ew1, offs, nE, D, Fe, 0, acc);
    t->grouped_mm_bwd(dx, gw->ew3, s->dup, x, w->ew3, offs, nE, D, Fe, 1, acc);
    model_swiglu_release(s->dgate, s->dup, hd);
}

/* EP dispatch plan of block state ma, from the global group offsets offs[E+1] of this rank's
 * sorted rows: exchanges the [P,El] counts and fills ma->cnt, ma->loffs and ma->perm. */
static void ep_plan(const model *m, moe_acts *ma, const int32_t *offs) {
    const int P = m->ep.size, El = m->args.n_experts / P;
    int32_t *sc = ma->cnt, *rc = sc + (size_t)P * El, *srows = rc + (size_t)P * El,
            *rrows = srows + P;
    for (int i = 0; i < P * El; i++) sc[i] = offs[i + 1] - offs[i]; /* expert p El + e */
    m->ep.alltoall(m->ep.ctx, sc, rc, El);
    for (int p = 0; p < P; p++) {
        srows[p] = rrows[p] = 0;
        for (int e = 0; e < El; e++) srows[p] += sc[p * El + e], rrows[p] += rc[p * El + e];
    }
    ma->loffs[0] = 0;
    for (int e = 0; e < El; e++) {
        ma->loffs[e + 1] = ma->loffs[e];
        for (int q = 0; q < P; q++) ma->loffs[e + 1] += rc[q * El + e];
    }
    /* arrival order: source q, then expert e; local order: expert e, then source q */
    int32_t i = 0;
    for (int q = 0; q < P; q++)
        for (int e = 0; e < El; e++) {
            int32_t at = ma->loffs[e];
            for (int q2 = 0; q2 < q; q2++) at += rc[q2 * El + e];
            for (int32_t j = 0; j < rc[q * El + e]; j++) ma->perm[i++] = at + j;
        }
}

/* Rows [n, D]: to_local = 1: dst[perm[i]] = src[i] (arrival -> local), else dst[i] =
 * src[perm[i]]. src16: src holds bf16 rows (expanded to fp32 exactly). */
static void ep_permute(float *dst, const void *src, const int32_t *perm, int n, int D, int to_local,
                       int src16) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < n; i++) {
        const size_t a = (size_t)i * D, b = (size_t)perm[i] * D, s = to_local ? a : b;
        float *d = dst + (to_local ? b : a);
        if (src16)
            ops_bf16_to_f32(d, (const uint16_t *)src + s, (size_t)D);
        else
            memcpy(d, (const float *)src + s, sizeof(float) * (size_t)D);
    }
}

/* to_owners: 1 = send this rank's sorted rows to the expert owners (send[R,D] -> recv[Rl,D]),
 * 0 = send the owners' rows back (send[Rl,D] -> recv[R,D]); es: bytes per element. */
static void ep_exchange(const model *m, const moe_acts *ma, const void *send, void *recv,
                        int to_owners, size_t es) {
    const int P = m->ep.size, El = m->args.n_experts / P;
    const int32_t *srows = ma->cnt + 2 * (size_t)P * El, *rrows = srows + P;
    m->ep.alltoallv(m->ep.ctx, send, to_owners ? srows : rrows, recv, to_owners ? rrows : srows,
                    es * (size_t)m->args.dim);
}

/* The dispatch: this rank's sorted rows src[R,D] to the expert owners, arriving (in arrival
 * order) in arrived and put in local order into dst[Rl,D]. bf16 (model_bf16_wire: dst feeds
 * grouped_mm's operands only): the rows are rounded into stage (R D bf16) and move at 2 bytes
 * per element; dst holds the same values grouped_mm would round them to. */
static void ep_dispatch(const model *m, const moe_acts *ma, const float *src, int R, void *stage,
                        void *arrived, float *dst, int bf16) {
    const int D = m->args.dim, Rl = ma->loffs[m->args.n_experts / m->ep.size];
    if (bf16) ops_bf16_from_f32(stage, src, (size_t)R * D);
    ep_exchange(m, ma, bf16 ? stage : src, arrived, 1, bf16 ? sizeof(uint16_t) : sizeof(float));
    ep_permute(dst, arrived, ma->perm, Rl, D, 1, bf16);
}

/* The return, ep_dispatch's mirror: the owners' rows src[Rl,D] (local order) back to the ranks
 * that routed them, put in arrival order into arrived and received into dst[R,D] (the sorted
 * order of ep_plan's rows). bf16: rounded into stage (Rl D bf16; may be src) and moved at 2
 * bytes per element, received as bf16 into arrived and expanded into dst exactly: dst holds
 * bf16(row), for a receiver that rounds every row anyway (model_bf16_wire_kept). */
static void ep_return(const model *m, const moe_acts *ma, const float *src, float *arrived,
                      void *stage, float *dst, int R, int bf16) {
    const int D = m->args.dim, Rl = ma->loffs[m->args.n_experts / m->ep.size];
    ep_permute(arrived, src, ma->perm, Rl, D, 0, 0);
    if (!bf16) {
        ep_exchange(m, ma, arrived, dst, 0, sizeof(float));
        return;
    }
    ops_bf16_from_f32(stage, arrived, (size_t)Rl * D);
    ep_exchange(m, ma, stage, arrived, 0, sizeof(uint16_t));
    ops_bf16_to_f32(dst, (const uint16_t *)arrived, (size_t)R * D);
}

/* Top-k of one score row s[E] (+ bias), by decreasing value, ties to the lower id. */
static void top_k(int32_t *ids, const float *s, const float *bias, int E, int K) {
    for (int k = 0; k < K; k++) {
        int best = -1;
        float bv = 0;
        for (int e = 0; e < E; e++) {
            int taken = 0;
            for (int j = 0; j < k && !taken; j++) taken = ids[j] == e;
            if (taken) continue;
            const float v = bias ? s[e] + bias[e] : s[e];
            if (best < 0 || v > bv) best = e, bv = v; /* strict: the lower id wins a tie */
        }
        ids[k] = best;
    }
}

void model_moe_forward(const model *m, int l, layer_acts *la, const block_geom *g, const float *h,
                       float *out) {
    const model_args *a = &m->args;
    const ops_table *t = &m->ops[1 + l];
    const int N = g->B * g->T, D = a->dim, E = a->n_experts, K = a->top_k, Fe = a->moe_ffn_dim;
    const int R = N * K;
    moe_acts *ma = &la->moe;
    block_view w = block_at(m, m->w, l);
    const float *bias = m->balance == MODEL_BALANCE_BIAS ? m->moe_bias + (size_t)l * E : NULL;

    /* router and fp32 softmax, then the top-k and the gates, one token per iteration */
    t->matmul_fwd(ma->probs, h, w.router, N, D, E);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *p = ma->probs + (size_t)n * E;
        float mx = p[0];
        for (int e = 1; e < E; e++) mx = p[e] > mx ? p[e] : mx;
        float sum = 0;
        for (int e = 0; e < E; e++) sum += p[e] = expf(p[e] - mx);
        const float inv = 1.0f / sum;
        for (int e = 0; e < E; e++) p[e] *= inv;
        int32_t *ids = ma->topi + (size_t)n * K;
        float *gt = ma->gates + (size_t)n * K;
        if (m->force_balance) /* torchtitan's _debug_force_load_balance_routing */
            for (int k = 0; k < K; k++) ids[k] = (int32_t)(((int64_t)n * K + k) % E);
        else
            top_k(ids, p, bias, E, K);
        float gs = 0;
        for (int k = 0; k < K; k++) gs += gt[k] = p[ids[k]];
        if (a->norm_topk_prob)
            for (int k = 0; k < K; k++) gt[k] /= gs;
    }

    /* stable counting sort of the assignments n*K + k by expert */
    int32_t *offs = ma->offs;
    memset(offs, 0, sizeof(int32_t) * (size_t)(E + 1));
    for (int i = 0; i < R; i++) offs[ma->topi[i] + 1]++;
    if (g->counts)
        for (int e = 0; e < E; e++) g->counts[(size_t)l * E + e] += offs[e + 1];
    for (int e = 0; e < E; e++) offs[e + 1] += offs[e]; /* offs[e] = start of group e */
    for (int i = 0; i < R; i++) {                       /* offs[e] runs to the end of e */
        const int32_t r = offs[ma->topi[i]]++;
        ma->slot[i] = r;
        ma->tok[r] = i / K;
    }
    for (int e = E; e > 0; e--) offs[e] = offs[e - 1]; /* back to starts; offs[E] = R */
    offs[0] = 0;

    /* the aux-loss statistics (all blocks of the microbatch are summed) */
    if (g->aux_acc) {
        double *cnt = g->aux_acc, *ps = g->aux_acc + E;
        for (int e = 0; e < E; e++) cnt[e] += offs[e + 1] - offs[e];
        for (int n = 0; n < N; n++)
            for (int e = 0; e < E; e++) ps[e] += ma->probs[(size_t)n * E + e];
    }

    /* dispatch, experts, combine */
#pragma omp parallel for schedule(static)
    for (int i = 0; i < R; i++)
        memcpy(g->xs + (size_t)i * D, h + (size_t)ma->tok[i] * D, sizeof(float) * (size_t)D);
    if (m->ep.size > 1) { /* to the owners, their experts, and back into y */
        const int El = E / m->ep.size;
        float *arrived = g->ep_buf, *yl = g->ep_buf + (size_t)R * m->ep.size * D;
        ep_plan(m, ma, offs);
        const int Rl = ma->loffs[El];
        /* xl feeds the expert GEMMs only (forward, and the weight gradients in backward); yl is
         * free until they run: the bf16 staging */
        ep_dispatch(m, ma, g->xs, R, yl, arrived, ma->xl, model_bf16_wire(m, t, OPS_GROUPED_MM));
        model_keep16(m, t, la, MODEL_ACT16_XL, (size_t)Rl * D); /* its GEMMs round it anyway */
        experts_fwd(m, la, t, &w, ma->xl, ma->loffs, El, Rl, D, Fe, g->hact, yl);
        /* y: one expert output per (token, k) row, not a sum; model_keep16 below rounds every
         * row before anything reads it exactly where model_bf16_wire_kept holds, so rounding
         * at the owner instead is exact there (yl, read by then, is the staging) */
        ep_return(m, ma, yl, arrived, yl, ma->y, R, model_bf16_wire_kept(m, t));
    } else {
        experts_fwd(m, la, t, &w, g->xs, offs, E, R, D, Fe, g->hact, ma->y);
    }
    model_keep16(m, t, la, MODEL_ACT16_Y, (size_t)R * D);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *o = out + (size_t)n * D;
        memset(o, 0, sizeof(float) * (size_t)D);
        for (int k = 0; k < K; k++) {
            const float gk = ma->gates[(size_t)n * K + k];
            const float *y = ma->y + (size_t)ma->slot[(size_t)n * K + k] * D;
            for (int d = 0; d < D; d++) o[d] += gk * y[d];
        }
    }
}

void model_moe_backward(model *m, int l, layer_acts *la, const float *h, const float *dout,
                        float *dh, const model_moe_scratch *s) {
    const model_args *a = &m->args;
    const ops_table *t = &m->ops[1 + l];
    const int N = m->batch * m->seq_len, D = a->dim, E = a->n_experts, K = a->top_k,
              Fe = a->moe_ffn_dim, R = N * K;
    moe_acts *ma = &la->moe;
    block_view w = block_at(m, m->w, l), gw = block_at(m, m->g, l);
    const int acc = !m->g_set_to_none;
    float *dlog = s->dlog;

    /* combine: dgate[n,k] = <dout[n], y[slot]>, dy[slot] = gate[n,k] * dout[n]. dlog holds
     * dL/dp [N,E] for now (zero except the chosen experts, plus the aux term below). */
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *dn = dout + (size_t)n * D;
        const float *gt = ma->gates + (size_t)n * K;
        const int32_t *ids = ma->topi + (size_t)n * K;
        float dg[64], *dp = dlog + (size_t)n * E; /* K <= 64: checked by model_build */
        for (int k = 0; k < K; k++) {
            const size_t r = (size_t)ma->slot[(size_t)n * K + k];
            const float *y = ma->y + r * D;
            float *dy = s->dy + r * D, acc = 0;
            for (int d = 0; d < D; d++) {
                acc += dn[d] * y[d];
                dy[d] = gt[k] * dn[d];
            }
            dg[k] = acc;
        }
        for (int e = 0; e < E; e++)
            dp[e] = s->aux_grad ? (float)(m->aux_scale * s->aux_grad[e]) : 0;
        if (a->norm_topk_prob) { /* g_k = p_k / S: dp_k = (dg_k - sum_j dg_j g_j) / S */
            const float *p = ma->probs + (size_t)n * E;
            float S = 0, dot = 0;
            for (int k = 0; k < K; k++) S += p[ids[k]], dot += dg[k] * gt[k];
            for (int k = 0; k < K; k++) dp[ids[k]] += (dg[k] - dot) / S;
        } else {
            for (int k = 0; k < K; k++) dp[ids[k]] += dg[k];
        }
        /* softmax: dlogit_e = p_e (dp_e - sum_j p_j dp_j) */
        const float *p = ma->probs + (size_t)n * E;
        float dot = 0;
        for (int e = 0; e < E; e++) dot += p[e] * dp[e];
        for (int e = 0; e < E; e++) dp[e] = p[e] * (dp[e] - dot);
    }

    /* experts: y = w2(silu(w1 xs) * w3 xs) per group; dxs = d(xs) [R,D] afterwards */
    float *dxs = s->dy;
    if (m->ep.size > 1) { /* d y to the owners, their backward, d xs rows back */
        const int El = E / m->ep.size, Rl = ma->loffs[El];
        float *arrived = s->ep_buf, *dyl = s->ep_buf + (size_t)R * m->ep.size * D;
        /* d y is grouped_mm_bwd's dY only (both its products): bf16 where that rounds it;
         * dyl is the staging until the rows arrive */
        ep_dispatch(m, ma, s->dy, R, dyl, arrived, dyl, model_bf16_wire(m, t, OPS_GROUPED_MM));
        experts_bwd(m, la, t, &w, &gw, ma->xl, ma->loffs, El, Rl, D, Fe, dyl, s, acc);
        /* d xs: fp32. Its rows are summed per token after they arrive (the dispatch's
         * transpose below, into dh, which the fp32 norm backward reads): no GEMM rounds them,
         * and bf16(a) + bf16(b) is not a + b */
        ep_return(m, ma, dyl, arrived, dyl, dxs, R, 0);
    } else {
#pragma omp parallel for schedule(static)
        for (int i = 0; i < R; i++)
            memcpy(s->xs + (size_t)i * D, h + (size_t)ma->tok[i] * D, sizeof(float) * (size_t)D);
        experts_bwd(m, la, t, &w, &gw, s->xs, ma->offs, E, R, D, Fe, s->dy, s, acc);
    }
    /* dispatch's transpose: dh[n] = sum_k dxs[slot[n,k]], in k order from zero, one thread per
     * token (dh is written here: the caller does not zero it) */
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *o = dh + (size_t)n * D;
        memset(o, 0, sizeof(float) * (size_t)D);
        for (int k = 0; k < K; k++) {
            const float *x = dxs + (size_t)ma->slot[(size_t)n * K + k] * D;
            for (int d = 0; d < D; d++) o[d] += x[d];
        }
    }
    /* router */
    t->matmul_bwd(dh, gw.router, dlog, h, w.router, N, D, E, 1, acc);
}

void model_moe_aux_finish(model *m, const double *acc, double *aux_grad) {
    const model_args *a = &m->args;
    const int E = a->n_experts;
    /* HF load_balancing_loss_func: f_e = sum_l count_l[e] / (L N) (counts over all K
     * choices), P_e = sum_l sum_n p_l[n,e] / (L N); aux = E * sum_e f_e P_e. d aux / d p_l[n,e]
     * = E f_e / (L N), the same for every block and token. */
    const double rows = (double)a->n_layers * m->batch * m->seq_len;
    double aux = 0;
    for (int e = 0; e < E; e++) {
        const double f = acc[e] / rows, P = acc[E + e] / rows;
        aux += f * P;
        aux_grad[e] = E * f / rows;
    }
    m->moe_aux_loss = E * aux;
}

void model_moe_update_bias(model *m, const int64_t *counts) {
    const model_args *a = &m->args;
    if (a->n_experts <= 0 || m->balance != MODEL_BALANCE_BIAS || !m->moe_bias) return;
    if (!counts) counts = m->moe_counts;
    const int E = a->n_experts;
    const float rate = (float)m->bias_rate;
    for (int l = 0; l < a->n_layers; l++) {
        const int64_t *c = counts + (size_t)l * E;
        float *b = m->moe_bias + (size_t)l * E;
        double sum = 0;
        for (int e = 0; e < E; e++) sum += (double)c[e];
        const float mean = (float)(sum / E);
        /* torchtitan, in fp32: d = coeff * sign(mean - c); d -= mean(d); bias += d */
        double dsum = 0;
        for (int e = 0; e < E; e++) {
            const float x = mean - (float)c[e];
            dsum += rate * (float)((x > 0) - (x < 0));
        }
        const float dmean = (float)(dsum / E);
        for (int e = 0; e < E; e++) {
            const float x = mean - (float)c[e];
            b[e] += rate * (float)((x > 0) - (x < 0)) - dmean;
        }
    }
}

void model_moe_stats(const model *m, int l, double *min, double *mean, double *max) {
    const int E = m->args.n_experts;
    *min = *mean = *max = 0;
    if (E <= 0 || !m->moe_counts || l < 0 || l >= m->args.n_layers) return;
    const int64_t *c = m->moe_counts + (size_t)l * E;
    double lo = (double)c[0], hi = lo, sum = 0;
    for (int e = 0; e < E; e++) {
        const double x = (double)c[e];
        lo = x < lo ? x : lo;
        hi = x > hi ? x : hi;
        sum += x;
    }
    *min = lo, *max = hi, *mean = sum / E;
}

void model_moe_memory(const model_args *a, int batch, int seq_len, model_ac_mode ac, int with_grads,
                      model_moe_mem *o) {
    memset(o, 0, sizeof *o);
    if (a->n_experts <= 0) return;
    const double L = a->n_layers, E = a->n_experts, D = a->dim, Fe = a->moe_ffn_dim,
                 N = (double)batch * seq_len, K = a->top_k, R = N * K, f = sizeof(float);
    o->expert_params = L * 3 * E * Fe * D * f;
    o->router_params = L * E * D * f;
    /* moe_acts (probs, gates, ids, slots, tok, offs, y) + the expert gate/up projections */
    o->per_block_saved = (N * E + 3 * N * K + R + E + 1 + R * D + 2 * R * Fe) * f;
    o->saved = o->per_block_saved * (ac == MODEL_AC_FULL ? 1 : L);
    o->scratch = (R * D + R * Fe) * f;
    if (with_grads) o->scratch += (R * D + 3 * R * Fe + N * E) * f;
    o->total_train = 4 * (o->expert_params + o->router_params) + o->saved + o->scratch;
}
