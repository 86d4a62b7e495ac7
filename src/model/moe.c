/* The Qwen3-MoE feed-forward block: forward and hand-written backward, load balancing, routing
 * statistics and the memory model.
 *
 * Forward, for h = ffn_norm(x) [N,D] (spec §2.1-2.4; HF Qwen3MoeSparseMoeBlock):
 *   logits = h @ router^T [N,E]; p = softmax(logits) in fp32
 *   ids    = top-k of p (+ expert bias when balancing by bias), by decreasing score, ties to the
 *            lower expert id
 *   gates  = p[ids], divided by their sum when norm_topk_prob (the bias never enters the gates)
 *   the N*K assignments (n, k) are sorted stably by expert (a counting sort: within an expert in
 *   token order), giving R = N*K rows xs[i] = h[tok[i]] in groups offs[e]..offs[e+1]
 *   per group e: y = down_e(silu(gate_e xs) * up_e xs) through the grouped_mm op
 *   out[n] = sum_k gates[n,k] * y[slot[n,k]], k = 0..K-1 in order, one thread per token (a
 *   deterministic scatter-add: no atomics, a fixed order).
 * Backward runs the same steps in reverse: the gate gradients <dout[n], y[slot]>, the experts
 * (grouped_mm backward), the gather's transpose (again per token in k order), the top-k
 * renormalisation, the softmax and the router. Expert ids and the sort are constants of the
 * forward (no gradient), as in PyTorch. */
#include <math.h>
#include <string.h>

#include "internal.h"

static size_t al16(size_t n) {
    return (n + 15) / 16 * 16;
}

size_t model_moe_saved_floats(const model_args *a, size_t N) {
    const size_t E = a->n_experts, K = a->top_k, R = N * K;
    return al16(N * E) + 3 * al16(N * K) + al16(R) + al16(E + 1) + al16(R * a->dim);
}

void model_moe_carve(const model_args *a, size_t N, float *p, moe_acts *ma) {
    const size_t E = a->n_experts, K = a->top_k, R = N * K;
    ma->probs = p, p += al16(N * E);
    ma->gates = p, p += al16(N * K);
    ma->topi = (int32_t *)p, p += al16(N * K);
    ma->slot = (int32_t *)p, p += al16(N * K);
    ma->tok = (int32_t *)p, p += al16(R);
    ma->offs = (int32_t *)p, p += al16(E + 1);
    ma->y = p;
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
    t->grouped_mm_fwd(la->gate, g->xs, w.ew1, offs, E, D, Fe);
    t->grouped_mm_fwd(la->up, g->xs, w.ew3, offs, E, D, Fe);
    t->swiglu_fwd(g->hact, la->gate, la->up, R, Fe);
    t->grouped_mm_fwd(ma->y, g->hact, w.ew2, offs, E, Fe, D);
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
    const size_t RF = (size_t)R * Fe;
    moe_acts *ma = &la->moe;
    block_view w = block_at(m, m->w, l), gw = block_at(m, m->g, l);
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

    /* experts: y = w2(silu(w1 xs) * w3 xs) per group */
    t->swiglu_fwd(s->hact, la->gate, la->up, R, Fe);
    memset(s->dhact, 0, RF * sizeof(float));
    t->grouped_mm_bwd(s->dhact, gw.ew2, s->dy, s->hact, w.ew2, ma->offs, E, Fe, D);
    memset(s->dgate, 0, RF * sizeof(float));
    memset(s->dup, 0, RF * sizeof(float));
    t->swiglu_bwd(s->dgate, s->dup, s->dhact, la->gate, la->up, R, Fe);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < R; i++)
        memcpy(s->xs + (size_t)i * D, h + (size_t)ma->tok[i] * D, sizeof(float) * (size_t)D);
    float *dxs = s->dy; /* dy is consumed: reuse it for d(xs) */
    memset(dxs, 0, (size_t)R * D * sizeof(float));
    t->grouped_mm_bwd(dxs, gw.ew1, s->dgate, s->xs, w.ew1, ma->offs, E, D, Fe);
    t->grouped_mm_bwd(dxs, gw.ew3, s->dup, s->xs, w.ew3, ma->offs, E, D, Fe);
    /* dispatch's transpose: dh[n] += sum_k dxs[slot[n,k]], in k order, one thread per token */
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *o = dh + (size_t)n * D;
        for (int k = 0; k < K; k++) {
            const float *x = dxs + (size_t)ma->slot[(size_t)n * K + k] * D;
            for (int d = 0; d < D; d++) o[d] += x[d];
        }
    }
    /* router */
    t->matmul_bwd(dh, gw.router, dlog, h, w.router, N, D, E);
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
