/* Reference implementations ("reference"): the textbook formula of every op, written for
 * obviousness, not speed: no tiling, no online softmax, no fused passes, sums in double.
 * They are the independent baseline `titan kernels test` checks the defaults against (the
 * defaults are themselves the fast kernels), and never the default of any op.
 * Rows are split over OpenMP threads only where each thread owns what it writes. */
#include "ops/cpu/cpu.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void ref_embedding_fwd(float *out, const int32_t *tokens, const float *wte, int N, int D) {
    for (int n = 0; n < N; n++)
        for (int d = 0; d < D; d++) out[(size_t)n * D + d] = wte[(size_t)tokens[n] * D + d];
}

static void ref_embedding_bwd(float *dwte, const float *dout, const int32_t *tokens, int N, int D) {
    for (int n = 0; n < N; n++)
        for (int d = 0; d < D; d++) dwte[(size_t)tokens[n] * D + d] += dout[(size_t)n * D + d];
}

static void ref_rmsnorm_fwd(float *out, float *rstd, const float *inp, const float *w, int N, int C,
                            float eps) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        double ss = 0;
        for (int c = 0; c < C; c++) ss += (double)x[c] * x[c];
        double r = 1.0 / sqrt(ss / C + (double)eps);
        for (int c = 0; c < C; c++) out[(size_t)n * C + c] = (float)(w[c] * (x[c] * r));
        rstd[n] = (float)r;
    }
}

/* Unfused: the add, then the norm. */
static void ref_add_rmsnorm_fwd(float *h, float *out, float *rstd, const float *x, const float *y,
                                const float *w, int N, int C, float eps) {
    for (size_t i = 0; i < (size_t)N * C; i++) h[i] = x[i] + y[i];
    ref_rmsnorm_fwd(out, rstd, h, w, N, C, eps);
}

/* x[0, n) = 0; nothing when n (a product of the call's sizes) is not positive */
static void ref_zero(float *x, long n) {
    if (n > 0) memset(x, 0, sizeof(float) * (size_t)n);
}

/* dx = rstd * (g - xhat * mean(g * xhat)), g = dy * w; dw = sum_n dy * xhat. A gradient
 * written rather than accumulated (dx_acc or dw_acc 0) is the textbook zero-then-add here, as in
 * every reference backward. */
static void ref_rmsnorm_bwd(float *dinp, float *dw, const float *dout, const float *inp,
                            const float *w, const float *rstd, int N, int C, int dx_acc,
                            int dw_acc) {
    if (dinp && !dx_acc) ref_zero(dinp, (long)N * C);
    if (dw && !dw_acc) memset(dw, 0, sizeof(float) * (size_t)(C > 0 ? C : 0));
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
        double r = rstd[n], dot = 0;
        for (int c = 0; c < C; c++) dot += (double)dy[c] * w[c] * x[c] * r;
        for (int c = 0; c < C; c++) {
            double xhat = x[c] * r;
            if (dinp) dinp[(size_t)n * C + c] += (float)(r * (dy[c] * w[c] - xhat * dot / C));
            if (dw) dw[c] += (float)(dy[c] * xhat);
        }
    }
}

static void ref_matmul_fwd(float *out, const float *inp, const float *w, int N, int C, int OC) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double acc = 0;
            for (int c = 0; c < C; c++)
                acc += (double)inp[(size_t)n * C + c] * w[(size_t)o * C + c];
            out[(size_t)n * OC + o] = (float)acc;
        }
}

static void ref_matmul_bwd(float *dinp, float *dw, const float *dout, const float *inp,
                           const float *w, int N, int C, int OC, int dx_acc, int dw_acc) {
    if (dinp && !dx_acc) ref_zero(dinp, (long)N * C);
    if (dw && !dw_acc && OC > 0 && C > 0) memset(dw, 0, sizeof(float) * (size_t)OC * C);
    if (dinp) {
#pragma omp parallel for schedule(static)
        for (int n = 0; n < N; n++)
            for (int c = 0; c < C; c++) {
                double acc = 0;
                for (int o = 0; o < OC; o++)
                    acc += (double)dout[(size_t)n * OC + o] * w[(size_t)o * C + c];
                dinp[(size_t)n * C + c] += (float)acc;
            }
    }
    if (dw) {
#pragma omp parallel for schedule(static)
        for (int o = 0; o < OC; o++)
            for (int c = 0; c < C; c++) {
                double acc = 0;
                for (int n = 0; n < N; n++)
                    acc += (double)dout[(size_t)n * OC + o] * inp[(size_t)n * C + c];
                dw[(size_t)o * C + c] += (float)acc;
            }
    }
}

/* y = x * cat(cos, cos) + rotate_half(x) * cat(sin, sin), element by element; the rotation
 * is computed into a row buffer first, so out may alias inp. */
static void ref_rope_fwd(float *out, const float *inp, const float *cos, const float *sin, int B,
                         int T, int nh, int hd) {
    const int h = hd / 2;
    float *row = malloc(sizeof(float) * (size_t)(hd > 0 ? hd : 1));
    if (!row) abort();
    for (long r = 0; r < (long)B * T * nh; r++) {
        const int t = (int)((r / nh) % T);
        const float *x = inp + (size_t)r * hd;
        for (int j = 0; j < hd; j++) {
            const int i = j % h;
            const float rot = j < h ? -x[j + h] : x[j - h];
            row[j] = (float)((double)x[j] * cos[(size_t)t * h + i] +
                             (double)rot * sin[(size_t)t * h + i]);
        }
        memcpy(out + (size_t)r * hd, row, sizeof(float) * (size_t)hd);
    }
    free(row);
}

/* The transpose: dx[j] = dy[j] cos + dy[j+h] sin, dx[j+h] = dy[j+h] cos - dy[j] sin. */
static void ref_rope_bwd(float *dinp, const float *dout, const float *cos, const float *sin, int B,
                         int T, int nh, int hd) {
    const int h = hd / 2, inplace = dinp == dout;
    float *row = malloc(sizeof(float) * (size_t)(hd > 0 ? hd : 1));
    if (!row) abort();
    for (long r = 0; r < (long)B * T * nh; r++) {
        const int t = (int)((r / nh) % T);
        const float *dy = dout + (size_t)r * hd;
        for (int j = 0; j < hd; j++) {
            const int i = j % h;
            const double c = cos[(size_t)t * h + i], s = sin[(size_t)t * h + i];
            row[j] = (float)(j < h ? dy[j] * c + dy[j + h] * s : dy[j] * c - dy[j - h] * s);
        }
        float *dx = dinp + (size_t)r * hd;
        for (int j = 0; j < hd; j++) dx[j] = inplace ? row[j] : dx[j] + row[j];
    }
    free(row);
}

/* Softmax of one score row p[0..n) in double: returns the log-sum-exp of the scores. */
static double ref_softmax(double *p, int n) {
    double mx = -INFINITY, sum = 0;
    for (int j = 0; j < n; j++) mx = p[j] > mx ? p[j] : mx;
    for (int j = 0; j < n; j++) sum += (p[j] = exp(p[j] - mx));
    for (int j = 0; j < n; j++) p[j] /= sum;
    return mx + log(sum);
}

/* Causal GQA attention, one full score row at a time. */
static void ref_attention_fwd(float *out, float *lse, const float *q, const float *k,
                              const float *v, int B, int T, int H, int G, int hd) {
    const double scale = 1.0 / sqrt((double)hd);
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            double *p = malloc(sizeof(double) * (size_t)T);
            if (!p) abort();
            const int g = h / (H / G);
            for (int t = 0; t < T; t++) {
                const float *qt = q + (((size_t)b * T + t) * H + h) * hd;
                for (int s = 0; s <= t; s++) {
                    const float *ks = k + (((size_t)b * T + s) * G + g) * hd;
                    double dot = 0;
                    for (int d = 0; d < hd; d++) dot += (double)qt[d] * ks[d];
                    p[s] = dot * scale;
                }
                lse[((size_t)b * H + h) * T + t] = (float)ref_softmax(p, t + 1);
                for (int d = 0; d < hd; d++) {
                    double acc = 0;
                    for (int s = 0; s <= t; s++)
                        acc += p[s] * v[(((size_t)b * T + s) * G + g) * hd + d];
                    out[(((size_t)b * T + t) * H + h) * hd + d] = (float)acc;
                }
            }
            free(p);
        }
}

/* Backward from the probabilities recomputed in double (lse and out are not used: this is
 * the independent formula dS = P * (dP - rowsum(P * dP)) * scale). Serial: dk/dv are shared
 * by the query heads of a group. */
static void ref_attention_bwd(float *dq, float *dk, float *dv, const float *dout, const float *out,
                              const float *lse, const float *q, const float *k, const float *v,
                              int B, int T, int H, int G, int hd, int dx_acc) {
    if (!dx_acc) {
        ref_zero(dq, (long)B * T * H * hd);
        ref_zero(dk, (long)B * T * G * hd);
        ref_zero(dv, (long)B * T * G * hd);
    }
    const double scale = 1.0 / sqrt((double)hd);
    double *p = malloc(sizeof(double) * (size_t)T * 2);
    if (!p) abort();
    double *dp = p + T;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const int g = h / (H / G);
            for (int t = 0; t < T; t++) {
                const size_t qi = (((size_t)b * T + t) * H + h) * hd;
                for (int s = 0; s <= t; s++) {
                    const size_t ki = (((size_t)b * T + s) * G + g) * hd;
                    double dot = 0, dd = 0;
                    for (int d = 0; d < hd; d++) {
                        dot += (double)q[qi + d] * k[ki + d];
                        dd += (double)dout[qi + d] * v[ki + d];
                    }
                    p[s] = dot * scale;
                    dp[s] = dd;
                }
                ref_softmax(p, t + 1);
                double sum = 0;
                for (int s = 0; s <= t; s++) sum += p[s] * dp[s];
                for (int s = 0; s <= t; s++) {
                    const size_t ki = (((size_t)b * T + s) * G + g) * hd;
                    const double ds = p[s] * (dp[s] - sum) * scale;
                    for (int d = 0; d < hd; d++) {
                        dq[qi + d] += (float)(ds * k[ki + d]);
                        dk[ki + d] += (float)(ds * q[qi + d]);
                        dv[ki + d] += (float)(p[s] * dout[qi + d]);
                    }
                }
            }
        }
    free(p);
}

static void ref_attention_kv(float *out, const float *q, const float *k, const float *v, int T,
                             int pos0, int H, int G, int hd) {
    const double scale = 1.0 / sqrt((double)hd);
    double *p = malloc(sizeof(double) * (size_t)(pos0 + T));
    if (!p) abort();
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            const int g = h / (H / G), n = pos0 + t + 1;
            const float *qt = q + ((size_t)t * H + h) * hd;
            for (int s = 0; s < n; s++) {
                double dot = 0;
                for (int d = 0; d < hd; d++) dot += (double)qt[d] * k[((size_t)s * G + g) * hd + d];
                p[s] = dot * scale;
            }
            ref_softmax(p, n);
            for (int d = 0; d < hd; d++) {
                double acc = 0;
                for (int s = 0; s < n; s++) acc += p[s] * v[((size_t)s * G + g) * hd + d];
                out[((size_t)t * H + h) * hd + d] = (float)acc;
            }
        }
    free(p);
}

static void ref_swiglu_fwd(float *out, const float *gate, const float *up, int N, int F) {
    for (size_t i = 0; i < (size_t)N * F; i++)
        out[i] = (float)(gate[i] / (1.0 + exp(-(double)gate[i])) * up[i]);
}

static void ref_swiglu_bwd(float *dgate, float *dup, const float *dout, const float *gate,
                           const float *up, int N, int F, int dx_acc) {
    if (!dx_acc) {
        ref_zero(dgate, (long)N * F);
        ref_zero(dup, (long)N * F);
    }
    for (size_t i = 0; i < (size_t)N * F; i++) {
        const double g = gate[i], sig = 1.0 / (1.0 + exp(-g));
        dgate[i] += (float)(dout[i] * up[i] * sig * (1.0 + g * (1.0 - sig)));
        dup[i] += (float)(dout[i] * g * sig);
    }
}

/* One token at a time: the full logit row in double, its softmax, loss and gradients. The
 * whole vocabulary only: a vocabulary shard (tensor parallelism) is refused. */
static double ref_lmhead_ce(float *dx, float *dw, const float *x, const float *w,
                            const int32_t *targets, int N, int D, int V, float grad_scale,
                            float *scratch, int chunk, int64_t *n_valid, const ops_vocab_shard *vs,
                            int dw_acc) {
    if (dx && dw && !dw_acc && V > 0 && D > 0) memset(dw, 0, sizeof(float) * (size_t)V * D);
    if (vs) {
        fprintf(stderr, "titan: lmhead_ce/reference has no vocabulary-parallel (tp > 1) form\n");
        abort();
    }
    double *l = malloc(sizeof(double) * (size_t)(V > 0 ? V : 1)), total = 0;
    if (!l) abort();
    int64_t valid = 0;
    for (int n = 0; n < N; n++) {
        const int32_t y = targets[n];
        if (y < 0 || y >= V) continue;
        valid++;
        const float *xn = x + (size_t)n * D;
        for (int v = 0; v < V; v++) {
            double acc = 0;
            for (int d = 0; d < D; d++) acc += (double)xn[d] * w[(size_t)v * D + d];
            l[v] = acc;
        }
        const double target = l[y];
        total += ref_softmax(l, V) - target;
        if (!dx) continue;
        l[y] -= 1.0;
        for (int v = 0; v < V; v++) {
            const double g = l[v] * grad_scale;
            for (int d = 0; d < D; d++) {
                dx[(size_t)n * D + d] += (float)(g * w[(size_t)v * D + d]);
                if (dw) dw[(size_t)v * D + d] += (float)(g * xn[d]);
            }
        }
    }
    free(l);
    if (n_valid) *n_valid = valid;
    return total;
}

/* torch.optim.AdamW's update (and Adam's coupled decay l2) in double, rounded once per state
 * element (bf16 moments: to fp32, then to bf16). */
static void ref_adamw(float *p, void *m, void *v, const float *g, float gscale, size_t n, double lr,
                      double beta1, double beta2, double eps, double wd, double l2, int mv_bf16,
                      int64_t t) {
    const double bc1 = 1.0 - pow(beta1, (double)t), bc2 = 1.0 - pow(beta2, (double)t);
    float *m32 = m, *v32 = v;
    uint16_t *m16 = m, *v16 = v;
    for (size_t i = 0; i < n; i++) {
        /* g.mul_(coef): an fp32 product; then grad.add(param, alpha=l2) */
        const double gi = (double)(g[i] * gscale) + l2 * p[i];
        const double m0 = mv_bf16 ? ops_cpu_bf16_value(m16[i]) : m32[i],
                     v0 = mv_bf16 ? ops_cpu_bf16_value(v16[i]) : v32[i];
        const double mi = beta1 * m0 + (1.0 - beta1) * gi;
        const double vi = beta2 * v0 + (1.0 - beta2) * gi * gi;
        const double pi = p[i] * (1.0 - lr * wd);
        p[i] = (float)(pi - lr / bc1 * mi / (sqrt(vi) / sqrt(bc2) + eps));
        if (mv_bf16) {
            m16[i] = ops_cpu_bf16_bits((float)mi);
            v16[i] = ops_cpu_bf16_bits((float)vi);
        } else {
            m32[i] = (float)mi;
            v32[i] = (float)vi;
        }
    }
}

/* Grouped expert GEMM: one output element at a time, double accumulation. */
static void ref_grouped_mm_fwd(float *out, const float *inp, const float *w, const int32_t *offs,
                               int E, int C, int OC) {
    for (int e = 0; e < E; e++)
        for (int32_t r = offs[e]; r < offs[e + 1]; r++)
            for (int o = 0; o < OC; o++) {
                double acc = 0;
                for (int c = 0; c < C; c++)
                    acc += (double)inp[(size_t)r * C + c] * w[((size_t)e * OC + o) * C + c];
                out[(size_t)r * OC + o] = (float)acc;
            }
}

static void ref_grouped_mm_bwd(float *dinp, float *dw, const float *dout, const float *inp,
                               const float *w, const int32_t *offs, int E, int C, int OC,
                               int dx_acc, int dw_acc) {
    if (dinp && !dx_acc) ref_zero(dinp, (long)offs[E] * C);
    if (dw && !dw_acc && E > 0 && OC > 0 && C > 0)
        memset(dw, 0, sizeof(float) * (size_t)E * OC * C);
    for (int e = 0; e < E; e++) {
        for (int32_t r = offs[e]; dinp && r < offs[e + 1]; r++)
            for (int c = 0; c < C; c++) {
                double acc = 0;
                for (int o = 0; o < OC; o++)
                    acc += (double)dout[(size_t)r * OC + o] * w[((size_t)e * OC + o) * C + c];
                dinp[(size_t)r * C + c] += (float)acc;
            }
        for (int o = 0; dw && o < OC; o++)
            for (int c = 0; c < C; c++) {
                double acc = 0;
                for (int32_t r = offs[e]; r < offs[e + 1]; r++)
                    acc += (double)dout[(size_t)r * OC + o] * inp[(size_t)r * C + c];
                dw[((size_t)e * OC + o) * C + c] += (float)acc;
            }
    }
}

static int ref_check_heads(const ops_ctx *ctx, base_err *err) {
    if (ctx->n_kv_heads > 0 && ctx->n_heads % ctx->n_kv_heads != 0)
        return base_fail(err, "n_heads %% n_kv_heads == 0 (n_heads = %d, n_kv_heads = %d)",
                         ctx->n_heads, ctx->n_kv_heads);
    return 0;
}

static int ref_check_even(const ops_ctx *ctx, base_err *err) {
    if (ctx->head_dim % 2 != 0)
        return base_fail(err, "head_dim %% 2 == 0 (head_dim = %d)", ctx->head_dim);
    return 0;
}

void ops_cpu_register_reference(int (*reg)(const ops_impl *impl, base_err *err)) {
#define REF(kind, c, chk, f, b)                                                                    \
    { kind, "reference", c, chk, (ops_fn)(f), (ops_fn)(b), OPS_PREC_F32 }
    const ops_impl ref[] = {
        REF(OPS_EMBEDDING, "", NULL, ref_embedding_fwd, ref_embedding_bwd),
        REF(OPS_RMSNORM, "", NULL, ref_rmsnorm_fwd, ref_rmsnorm_bwd),
        REF(OPS_MATMUL, "", NULL, ref_matmul_fwd, ref_matmul_bwd),
        REF(OPS_ROPE, "head_dim % 2 == 0", ref_check_even, ref_rope_fwd, ref_rope_bwd),
        REF(OPS_ATTENTION, "n_heads % n_kv_heads == 0", ref_check_heads, ref_attention_fwd,
            ref_attention_bwd),
        REF(OPS_SWIGLU, "", NULL, ref_swiglu_fwd, ref_swiglu_bwd),
        REF(OPS_LMHEAD_CE, "", NULL, ref_lmhead_ce, NULL),
        REF(OPS_ADAMW, "", NULL, ref_adamw, NULL),
        REF(OPS_ATTENTION_KV, "n_heads % n_kv_heads == 0", ref_check_heads, ref_attention_kv, NULL),
        REF(OPS_GROUPED_MM, "", NULL, ref_grouped_mm_fwd, ref_grouped_mm_bwd),
        REF(OPS_ADD_RMSNORM, "", NULL, ref_add_rmsnorm_fwd, ref_rmsnorm_bwd),
    };
#undef REF
    for (size_t i = 0; i < sizeof ref / sizeof ref[0]; i++) (void)reg(&ref[i], NULL);
}
