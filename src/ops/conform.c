/* Kernel conformance and timing: `titan kernels test|bench [NAME]`.
 *
 * test: each implementation against a baseline of the same op (its default; for the default
 * itself the textbook "reference"), both called through tables resolved with an override on
 * the path "conformance" (so plugin kernels run through their trampolines, layouts and saved
 * state exactly as in training). Per implementation, `shapes` random shapes are drawn until
 * each satisfies the constraints of both implementations (their check functions, via
 * ops_resolve); inputs are uniform in [-1, 1) from a seeded generator, gradient buffers start
 * from the same random values in both runs (so += accumulation is checked too), then, asked
 * written (dx_acc / dw_acc 0), from NaN (so a kernel that reads them or leaves an element
 * unwritten fails), and every forward output and every input gradient is compared:
 *     err = max |cand - base| / max(max |base|, 1e-30)   must be <= the op's tolerance
 * Tolerances (relative to the tensor's largest magnitude; fp32 kernels against fp32 or
 * double-accumulated baselines, shapes up to T = 130, K up to ~300):
 *     embedding 1e-6, rope 1e-6, swiglu 1e-5, adamw 1e-5, rmsnorm 1e-5 (fwd) 1e-4 (grads),
 *     add_rmsnorm 1e-6 (h) 1e-5 (out, rstd) 1e-4 (grads),
 *     matmul 1e-5, attention / attention_kv 2e-5 (fwd) 1e-4 (grads),
 *     lmhead_ce 1e-5 (loss) 1e-4 (grads)
 * bench: the implementation and the default on one model-sized shape, best of repeated
 * calls (each measurement runs for at least min_sec), with the traffic or FLOPs of the op
 * (the cost model, ops_work_of in work.c, of the calls timed): GB/s for memory-bound ops
 * (minimum bytes each must read and write), GFLOP/s for matmul, grouped_mm, attention and
 * lmhead_ce; and a STREAM-triad bandwidth measured first, the bound of the memory-bound
 * ones. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ops/internal.h"

/* ---- small helpers ------------------------------------------------------------------ */

static uint64_t cf_next(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int cf_int(uint64_t *s, int lo, int hi) { /* [lo, hi] */
    return lo + (int)(cf_next(s) % (uint64_t)(hi - lo + 1));
}

static int cf_pick(uint64_t *s, const int *v, int n) {
    return v[cf_next(s) % (uint64_t)n];
}

/* Set while a bf16 implementation is checked: every random input is a bf16 value, so both
 * sides multiply the same numbers (see cf_bf16_tol). */
static int g_bf16_inputs;

static float *cf_rand(uint64_t *s, size_t n, float scale) {
    float *p = base_alloc_uninit(sizeof(float) * (n ? n : 1));
    if (!p) return NULL;
    for (size_t i = 0; i < n; i++)
        p[i] = scale * ((float)(cf_next(s) >> 40) / (float)(1 << 24) * 2.0f - 1.0f);
    for (size_t i = 0; g_bf16_inputs && i < n; i++) { /* round to the nearest bf16 */
        uint16_t h;
        ops_bf16_from_f32(&h, &p[i], 1);
        ops_bf16_to_f32(&p[i], &h, 1);
    }
    return p;
}

static float *cf_dup(const float *x, size_t n) {
    float *p = malloc(sizeof(float) * (n ? n : 1));
    if (p && n) memcpy(p, x, sizeof(float) * n);
    return p;
}

/* x[0, n) = NaN: a gradient asked written (dx_acc or dw_acc 0) starts as this on both sides, so
 * an implementation that reads it, or leaves an element unwritten, is caught as non-finite. */
static void cf_nan(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = NAN;
}

static double cf_err(const float *a, const float *b, size_t n) {
    double d = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        const double e = fabs((double)a[i] - b[i]);
        if (e > d || e != e) d = e != e ? INFINITY : e;
        if (fabs((double)b[i]) > m) m = fabs((double)b[i]);
    }
    if (!(d == d)) return INFINITY;
    return d / (m > 1e-30 ? m : 1e-30);
}

static double cf_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One comparison result: the worst error relative to its tolerance. */
typedef struct {
    double ratio;   /* max over tensors of err / tol */
    char what[160]; /* the tensor that set it, with its error */
    double floor;   /* the least tolerance: the op's bf16 tolerance when one side is bf16 */
} cf_result;

/* A bf16 implementation is checked on inputs that are bf16 values (g_bf16_inputs), against
 * the fp32 default on the same inputs: rounding them again changes nothing, so what is left is
 * the claim "bf16 operands, fp32 accumulation" -- the products are exact in fp32 and only
 * the summation order (the engine's) may differ: 1e-4. lmhead_ce also rounds its logits and
 * its logit gradient (softmax - onehot) to bf16, as autocast's lm_head output and backward
 * do: 2e-2 there (a relative 2^-9 per element, measured up to 1.3e-3 on random inputs; its
 * loss within 1e-4). attention and attention_kv round their probabilities P before P.V, as
 * autocast's eager attention does: 1e-2. That a bf16 run does round (and differs from fp32) is
 * tested by train_bf16 and the HF autocast parity tests. */
static double cf_bf16_tol(ops_kind k) {
    return k == OPS_LMHEAD_CE ? 2e-2 : k == OPS_ATTENTION || k == OPS_ATTENTION_KV ? 1e-2 : 1e-4;
}

static void cf_cmp(cf_result *r, const char *name, const float *a, const float *b, size_t n,
                   double tol) {
    const double e = cf_err(a, b, n);
    if (tol < r->floor) tol = r->floor;
    if (e / tol > r->ratio || !(e == e)) {
        r->ratio = e == e ? e / tol : INFINITY;
        snprintf(r->what, sizeof r->what, "%s err %.3g (tol %.0e)", name, e, tol);
    }
}

/* ---- per-op checks: cand vs base on the shape in c ------------------------------------ */

#define CF_FREE(...)                                                                               \
    do {                                                                                           \
        void *cf_ptrs_[] = {__VA_ARGS__};                                                          \
        for (size_t i_ = 0; i_ < sizeof cf_ptrs_ / sizeof cf_ptrs_[0]; i_++) free(cf_ptrs_[i_]);   \
    } while (0)

static int cf_embedding(const ops_table *x, const ops_table *y, const ops_ctx *c, uint64_t *s,
                        cf_result *r) {
    const int N = c->batch * c->seq_len, D = c->dim, V = c->vocab;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)N);
    float *w = cf_rand(s, (size_t)V * D, 1), *o1 = malloc(sizeof(float) * (size_t)N * D),
          *o2 = malloc(sizeof(float) * (size_t)N * D), *dy = cf_rand(s, (size_t)N * D, 1),
          *g1 = cf_rand(s, (size_t)V * D, 1), *g2 = cf_dup(g1, (size_t)V * D);
    if (!tok || !w || !o1 || !o2 || !dy || !g1 || !g2) return -1;
    for (int n = 0; n < N; n++) tok[n] = cf_int(s, 0, V - 1);
    x->embedding_fwd(o1, tok, w, N, D);
    y->embedding_fwd(o2, tok, w, N, D);
    cf_cmp(r, "out", o1, o2, (size_t)N * D, 1e-6);
    x->embedding_bwd(g1, dy, tok, N, D);
    y->embedding_bwd(g2, dy, tok, N, D);
    cf_cmp(r, "dwte", g1, g2, (size_t)V * D, 1e-6);
    CF_FREE(tok, w, o1, o2, dy, g1, g2);
    return 0;
}

/* rmsnorm, or (fused) add_rmsnorm with h = in + b written over in, as the model calls it; the
 * backward of both is the norm's, into the input's (the residual stream's) gradient. */
static int cf_norm(const ops_table *x, const ops_table *y, const ops_ctx *c, uint64_t *s,
                   cf_result *r, int fused) {
    const int N = c->batch * c->seq_len, C = c->dim;
    const size_t n = (size_t)N * C;
    float *h1 = cf_rand(s, n, 2), *h2 = cf_dup(h1, n), *w = cf_rand(s, (size_t)C, 1),
          *o1 = malloc(sizeof(float) * n), *o2 = malloc(sizeof(float) * n),
          *r1 = malloc(sizeof(float) * (size_t)N), *r2 = malloc(sizeof(float) * (size_t)N),
          *dy = cf_rand(s, n, 1), *dx1 = cf_rand(s, n, 1), *dx2 = cf_dup(dx1, n),
          *dw1 = cf_rand(s, (size_t)C, 1), *dw2 = cf_dup(dw1, (size_t)C),
          *b = fused ? cf_rand(s, n, 2) : NULL;
    if (!h1 || !h2 || !w || !o1 || !o2 || !r1 || !r2 || !dy || !dx1 || !dx2 || !dw1 || !dw2 ||
        (fused && !b))
        return -1;
    if (fused) {
        x->add_rmsnorm_fwd(h1, o1, r1, h1, b, w, N, C, 1e-6f);
        y->add_rmsnorm_fwd(h2, o2, r2, h2, b, w, N, C, 1e-6f);
        cf_cmp(r, "h", h1, h2, n, 1e-6);
    } else {
        x->rmsnorm_fwd(o1, r1, h1, w, N, C, 1e-6f);
        y->rmsnorm_fwd(o2, r2, h2, w, N, C, 1e-6f);
    }
    cf_cmp(r, "out", o1, o2, n, 1e-5);
    cf_cmp(r, "rstd", r1, r2, (size_t)N, 1e-5);
    const ops_rmsnorm_bwd_fn bx = fused ? x->add_rmsnorm_bwd : x->rmsnorm_bwd,
                             by = fused ? y->add_rmsnorm_bwd : y->rmsnorm_bwd;
    bx(dx1, dw1, dy, h1, w, r1, N, C, 1, 1);
    by(dx2, dw2, dy, h2, w, r2, N, C, 1, 1);
    cf_cmp(r, fused ? "dh" : "dinp", dx1, dx2, n, 1e-4);
    cf_cmp(r, "dw", dw1, dw2, (size_t)C, 1e-4);
    cf_nan(dw1, (size_t)C), cf_nan(dw2, (size_t)C);
    bx(dx1, dw1, dy, h1, w, r1, N, C, 1, 0);
    by(dx2, dw2, dy, h2, w, r2, N, C, 1, 0);
    cf_cmp(r, fused ? "dh, dw written" : "dinp, dw written", dx1, dx2, n, 1e-4);
    cf_cmp(r, "dw written", dw1, dw2, (size_t)C, 1e-4);
    cf_nan(dx1, n), cf_nan(dx2, n), cf_nan(dw1, (size_t)C), cf_nan(dw2, (size_t)C);
    bx(dx1, dw1, dy, h1, w, r1, N, C, 0, 0);
    by(dx2, dw2, dy, h2, w, r2, N, C, 0, 0);
    cf_cmp(r, fused ? "dh written" : "dinp written", dx1, dx2, n, 1e-4);
    cf_cmp(r, "dw, dinp written", dw1, dw2, (size_t)C, 1e-4);
    CF_FREE(h1, h2, w, o1, o2, r1, r2, dy, dx1, dx2, dw1, dw2, b);
    return 0;
}

static int cf_rmsnorm(const ops_table *x, const ops_table *y, const ops_ctx *c, uint64_t *s,
                      cf_result *r) {
    return cf_norm(x, y, c, s, r, 0);
}

static int cf_add_rmsnorm(const ops_table *x, const ops_table *y, const ops_ctx *c, uint64_t *s,
                          cf_result *r) {
    return cf_norm(x, y, c, s, r, 1);
}

static int cf_matmul(const ops_table *x, const ops_table *y, const ops_ctx *c, uint64_t *s,
                     cf_result *r) {
    const int N = c->batch * c->seq_len, C = c->dim, OC = c->ffn_dim;
    float *in = cf_rand(s, (size_t)N * C, 1), *w = cf_rand(s, (size_t)OC * C, 1),
          *o1 = malloc(sizeof(float) * (size_t)N * OC),
          *o2 = malloc(sizeof(float) * (size_t)N * OC), *dy = cf_rand(s, (size_t)N * OC, 1),
          *dx1 = cf_rand(s, (size_t)N * C, 1), *dx2 = cf_dup(dx1, (size_t)N * C),
          *dw1 = cf_rand(s, (size_t)OC * C, 1), *dw2 = cf_dup(dw1, (size_t)OC * C);
    if (!in || !w || !o1 || !o2 || !dy || !dx1 || !dx2 || !dw1 || !dw2) return -1;
    x->matmul_fwd(o1, in, w, N, C, OC);
    y->matmul_fwd(o2, in, w, N, C, OC);
    cf_cmp(r, "out", o1, o2, (size_t)N * OC, 1e-5);
    x->matmul_bwd(dx1, dw1, dy, in, w, N, C, OC, 1, 1);
    y->matmul_bwd(dx2, dw2, dy, in, w, N, C, OC, 1, 1);
    cf_cmp(r, "dinp", dx1, dx2, (size_t)N * C, 1e-5);
    cf_cmp(r, "dw", dw1, dw2, (size_t)OC * C, 1e-5);
    cf_nan(dw1, (size_t)OC * C), cf_nan(dw2, (size_t)OC * C);
    x->matmul_bwd(dx1, dw1, dy, in, w, N, C, OC, 1, 0);
    y->matmul_bwd(dx2, dw2, dy, in, w, N, C, OC, 1, 0);
    cf_cmp(r, "dinp, dw written", dx1, dx2, (size_t)N * C, 1e-5);
    cf_cmp(r, "dw written", dw1, dw2, (size_t)OC * C, 1e-5);
    cf_nan(dx1, (size_t)N * C), cf_nan(dx2, (size_t)N * C);
    cf_nan(dw1, (size_t)OC * C), cf_nan(dw2, (size_t)OC * C);
    x->matmul_bwd(dx1, dw1, dy, in, w, N, C, OC, 0, 0);
    y->matmul_bwd(dx2, dw2, dy, in, w, N, C, OC, 0, 0);
    cf_cmp(r, "dinp written", dx1, dx2, (size_t)N * C, 1e-5);
    cf_cmp(r, "dw, dinp written", dw1, dw2, (size_t)OC * C, 1e-5);
    CF_FREE(in, w, o1, o2, dy, dx1, dx2, dw1, dw2);
    return 0;
}

static int cf_rope(const ops_table *x, const ops_table *y, const ops_ctx *c, uint64_t *s,
                   cf_result *r) {
    const int B = c->batch, T = c->seq_len, nh = c->n_heads, hd = c->head_dim;
    const size_t n = (size_t)B * T * nh * hd;
    float *cs = malloc(sizeof(float) * (size_t)T * (hd / 2 + 1)),
          *sn = malloc(sizeof(float) * (size_t)T * (hd / 2 + 1)), *in = cf_rand(s, n, 1),
          *o1 = malloc(sizeof(float) * n), *o2 = malloc(sizeof(float) * n), *dy = cf_rand(s, n, 1),
          *dx1 = cf_rand(s, n, 1), *dx2 = cf_dup(dx1, n);
    if (!cs || !sn || !in || !o1 || !o2 || !dy || !dx1 || !dx2) return -1;
    ops_rope_table(cs, sn, T, hd, 10000.0);
    x->rope_fwd(o1, in, cs, sn, B, T, nh, hd);
    y->rope_fwd(o2, in, cs, sn, B, T, nh, hd);
    cf_cmp(r, "out", o1, o2, n, 1e-6);
    x->rope_bwd(dx1, dy, cs, sn, B, T, nh, hd);
    y->rope_bwd(dx2, dy, cs, sn, B, T, nh, hd);
    cf_cmp(r, "dinp", dx1, dx2, n, 1e-6);
    /* in place, as the model calls it: out == inp, and dinp == dout (replaced) */
    memcpy(o1, in, sizeof(float) * n);
    x->rope_fwd(o1, o1, cs, sn, B, T, nh, hd);
    cf_cmp(r, "out (in place)", o1, o2, n, 1e-6);
    memcpy(dx1, dy, sizeof(float) * n);
    memcpy(dx2, dy, sizeof(float) * n);
    x->rope_bwd(dx1, dx1, cs, sn, B, T, nh, hd);
    y->rope_bwd(dx2, dx2, cs, sn, B, T, nh, hd);
    cf_cmp(r, "dinp (in place)", dx1, dx2, n, 1e-6);
    CF_FREE(cs, sn, in, o1, o2, dy, dx1, dx2);
    return 0;
}

static int cf_attention(const ops_table *x, const ops_table *y, const ops_ctx *c, uint64_t *s,
                        cf_result *r) {
    const int B = c->batch, T = c->seq_len, H = c->n_heads, G = c->n_kv_heads, hd = c->head_dim;
    const size_t nq = (size_t)B * T * H * hd, nkv = (size_t)B * T * G * hd, nl = (size_t)B * H * T;
    float *q = cf_rand(s, nq, 2), *k = cf_rand(s, nkv, 2), *v = cf_rand(s, nkv, 1),
          *o1 = malloc(sizeof(float) * nq), *o2 = malloc(sizeof(float) * nq),
          *l1 = malloc(sizeof(float) * nl), *l2 = malloc(sizeof(float) * nl),
          *dy = cf_rand(s, nq, 1), *dq1 = cf_rand(s, nq, 1), *dq2 = cf_dup(dq1, nq),
          *dk1 = cf_rand(s, nkv, 1), *dk2 = cf_dup(dk1, nkv), *dv1 = cf_rand(s, nkv, 1),
          *dv2 = cf_dup(dv1, nkv);
    if (!q || !k || !v || !o1 || !o2 || !l1 || !l2 || !dy || !dq1 || !dq2 || !dk1 || !dk2 || !dv1 ||
        !dv2)
        return -1;
    x->attention_fwd(o1, l1, q, k, v, B, T, H, G, hd);
    y->attention_fwd(o2, l2, q, k, v, B, T, H, G, hd);
    cf_cmp(r, "out", o1, o2, nq, 2e-5);
    cf_cmp(r, "lse", l1, l2, nl, 2e-5);
    x->attention_bwd(dq1, dk1, dv1, dy, o1, l1, q, k, v, B, T, H, G, hd, 1);
    y->attention_bwd(dq2, dk2, dv2, dy, o2, l2, q, k, v, B, T, H, G, hd, 1);
    cf_cmp(r, "dq", dq1, dq2, nq, 1e-4);
    cf_cmp(r, "dk", dk1, dk2, nkv, 1e-4);
    cf_cmp(r, "dv", dv1, dv2, nkv, 1e-4);
    cf_nan(dq1, nq), cf_nan(dq2, nq), cf_nan(dk1, nkv), cf_nan(dk2, nkv);
    cf_nan(dv1, nkv), cf_nan(dv2, nkv);
    x->attention_bwd(dq1, dk1, dv1, dy, o1, l1, q, k, v, B, T, H, G, hd, 0);
    y->attention_bwd(dq2, dk2, dv2, dy, o2, l2, q, k, v, B, T, H, G, hd, 0);
    cf_cmp(r, "dq written", dq1, dq2, nq, 1e-4);
    cf_cmp(r, "dk written", dk1, dk2, nkv, 1e-4);
    cf_cmp(r, "dv written", dv1, dv2, nkv, 1e-4);
    CF_FREE(q, k, v, o1, o2, l1, l2, dy, dq1, dq2, dk1, dk2, dv1, dv2);
    return 0;
}

static int cf_attention_kv(const ops_table *x, const ops_table *y, const ops_ctx *c, uint64_t *s,
                           cf_result *r) {
    const int T = c->seq_len, H = c->n_heads, G = c->n_kv_heads, hd = c->head_dim;
    const int pos0 = cf_int(s, 0, 70);
    const size_t nq = (size_t)T * H * hd, nkv = (size_t)(pos0 + T) * G * hd;
    float *q = cf_rand(s, nq, 2), *k = cf_rand(s, nkv, 2), *v = cf_rand(s, nkv, 1),
          *o1 = malloc(sizeof(float) * nq), *o2 = malloc(sizeof(float) * nq);
    if (!q || !k || !v || !o1 || !o2) return -1;
    x->attention_kv(o1, q, k, v, T, pos0, H, G, hd);
    y->attention_kv(o2, q, k, v, T, pos0, H, G, hd);
    cf_cmp(r, "out", o1, o2, nq, 2e-5);
    CF_FREE(q, k, v, o1, o2);
    return 0;
}

static int cf_swiglu(const ops_table *x, const ops_table *y, const ops_ctx *c, uint64_t *s,
                     cf_result *r) {
    const int N = c->batch * c->seq_len, F = c->ffn_dim;
    const size_t n = (size_t)N * F;
    float *g = cf_rand(s, n, 6), *u = cf_rand(s, n, 1), *o1 = malloc(sizeof(float) * n),
          *o2 = malloc(sizeof(float) * n), *dy = cf_rand(s, n, 1), *dg1 = cf_rand(s, n, 1),
          *dg2 = cf_dup(dg1, n), *du1 = cf_rand(s, n, 1), *du2 = cf_dup(du1, n);
    if (!g || !u || !o1 || !o2 || !dy || !dg1 || !dg2 || !du1 || !du2) return -1;
    x->swiglu_fwd(o1, g, u, N, F);
    y->swiglu_fwd(o2, g, u, N, F);
    cf_cmp(r, "out", o1, o2, n, 1e-5);
    x->swiglu_bwd(dg1, du1, dy, g, u, N, F, 1);
    y->swiglu_bwd(dg2, du2, dy, g, u, N, F, 1);
    cf_cmp(r, "dgate", dg1, dg2, n, 1e-5);
    cf_cmp(r, "dup", du1, du2, n, 1e-5);
    cf_nan(dg1, n), cf_nan(dg2, n), cf_nan(du1, n), cf_nan(du2, n);
    x->swiglu_bwd(dg1, du1, dy, g, u, N, F, 0);
    y->swiglu_bwd(dg2, du2, dy, g, u, N, F, 0);
    cf_cmp(r, "dgate written", dg1, dg2, n, 1e-5);
    cf_cmp(r, "dup written", du1, du2, n, 1e-5);
    CF_FREE(g, u, o1, o2, dy, dg1, dg2, du1, du2);
    return 0;
}

static ops_prec cf_prec(const ops_table *t, ops_kind k) {
    return t->impl[k] ? t->impl[k]->prec : OPS_PREC_F32;
}

static int cf_lmhead_ce(const ops_table *x, const ops_table *y, const ops_ctx *c, uint64_t *s,
                        cf_result *r) {
    const int N = c->batch * c->seq_len, D = c->dim, V = c->vocab, chunk = cf_int(s, 1, N);
    int32_t *tg = malloc(sizeof(int32_t) * (size_t)N);
    float *in = cf_rand(s, (size_t)N * D, 1),
          *w = cf_rand(s, (size_t)V * D, 0.5f),
          /* each side's scratch as small as it may be, so an overrun is ASan's to see */
              *sc = malloc(sizeof(float) * ops_lmhead_ce_scratch_floats((size_t)chunk, (size_t)V,
                                                                        cf_prec(x, OPS_LMHEAD_CE))),
          *sc2 = malloc(sizeof(float) * ops_lmhead_ce_scratch_floats((size_t)chunk, (size_t)V,
                                                                     cf_prec(y, OPS_LMHEAD_CE))),
          *dx1 = cf_rand(s, (size_t)N * D, 1), *dx2 = cf_dup(dx1, (size_t)N * D),
          *dw1 = cf_rand(s, (size_t)V * D, 1), *dw2 = cf_dup(dw1, (size_t)V * D);
    if (!tg || !in || !w || !sc || !sc2 || !dx1 || !dx2 || !dw1 || !dw2) return -1;
    for (int n = 0; n < N; n++)
        tg[n] = cf_int(s, 0, 9) == 0 ? OPS_IGNORE_INDEX : cf_int(s, 0, V - 1);
    int64_t v1 = 0, v2 = 0;
    const float gs = 1.0f / (float)N;
    float l1 = (float)x->lmhead_ce(dx1, dw1, in, w, tg, N, D, V, gs, sc, chunk, &v1, NULL, 1);
    float l2 = (float)y->lmhead_ce(dx2, dw2, in, w, tg, N, D, V, gs, sc2, chunk, &v2, NULL, 1);
    cf_cmp(r, "loss", &l1, &l2, 1, 1e-5);
    if (v1 != v2) {
        r->ratio = INFINITY;
        snprintf(r->what, sizeof r->what, "n_valid %lld vs %lld", (long long)v1, (long long)v2);
    }
    cf_cmp(r, "dx", dx1, dx2, (size_t)N * D, 1e-4);
    cf_cmp(r, "dw", dw1, dw2, (size_t)V * D, 1e-4);
    cf_nan(dw1, (size_t)V * D), cf_nan(dw2, (size_t)V * D);
    x->lmhead_ce(dx1, dw1, in, w, tg, N, D, V, gs, sc, chunk, NULL, NULL, 0);
    y->lmhead_ce(dx2, dw2, in, w, tg, N, D, V, gs, sc2, chunk, NULL, NULL, 0);
    cf_cmp(r, "dx, dw written", dx1, dx2, (size_t)N * D, 1e-4);
    cf_cmp(r, "dw written", dw1, dw2, (size_t)V * D, 1e-4);
    l1 = (float)x->lmhead_ce(NULL, NULL, in, w, tg, N, D, V, gs, sc, chunk, NULL, NULL, 1);
    cf_cmp(r, "loss (no grad)", &l1, &l2, 1, 1e-5);
    /* no valid target at all: no chunk has a product, and a written dw is zeros all the same */
    for (int n = 0; n < N; n++) tg[n] = OPS_IGNORE_INDEX;
    cf_nan(dw1, (size_t)V * D), cf_nan(dw2, (size_t)V * D);
    x->lmhead_ce(dx1, dw1, in, w, tg, N, D, V, gs, sc, chunk, NULL, NULL, 0);
    y->lmhead_ce(dx2, dw2, in, w, tg, N, D, V, gs, sc2, chunk, NULL, NULL, 0);
    cf_cmp(r, "dx, dw written, no target", dx1, dx2, (size_t)N * D, 1e-4);
    cf_cmp(r, "dw written, no target", dw1, dw2, (size_t)V * D, 1e-4);
    CF_FREE(tg, in, w, sc, sc2, dx1, dx2, dw1, dw2);
    return 0;
}

static int cf_adamw(const ops_table *x, const ops_table *y, const ops_ctx *c, uint64_t *s,
                    cf_result *r) {
    const size_t n = (size_t)c->dim * c->ffn_dim + 3;
    const int64_t t = cf_int(s, 1, 20);
    float *p1 = cf_rand(s, n, 1), *p2 = cf_dup(p1, n), *m1 = cf_rand(s, n, 0.1f),
          *m2 = cf_dup(m1, n), *v1 = cf_rand(s, n, 0.01f), *v2, *g = cf_rand(s, n, 1);
    if (!p1 || !p2 || !m1 || !m2 || !v1 || !g) return -1;
    for (size_t i = 0; i < n; i++) v1[i] = fabsf(v1[i]);
    if (!(v2 = cf_dup(v1, n))) return -1;
    const float gscale = (float)cf_int(s, 1, 4) / 4.0f; /* a clipping coefficient, or 1 */
    /* AdamW's decoupled decay, or Adam's coupled one (each implementation must take both) */
    const double wd = cf_int(s, 0, 1) ? 0.1 : 0.0, l2 = wd != 0 ? 0.0 : 0.05;
    /* and moments in bf16 (fused_opt_states_bf16), compared widened: their rounding may land
     * on either side of a tie-near value, one bf16 step (2^-8 relative) */
    const int bf = cf_int(s, 0, 1);
    uint16_t *h[4] = {NULL, NULL, NULL, NULL}; /* m1, v1, m2, v2 in bf16 */
    float *const f[4] = {m1, v1, m2, v2};
    for (int k = 0; bf && k < 4; k++) {
        if (!(h[k] = malloc(n * sizeof(uint16_t)))) return -1;
        ops_bf16_from_f32(h[k], f[k], n);
    }
    x->adamw(p1, bf ? (void *)h[0] : m1, bf ? (void *)h[1] : v1, g, gscale, n, 1e-3, 0.9, 0.95,
             1e-8, wd, l2, bf, t);
    y->adamw(p2, bf ? (void *)h[2] : m2, bf ? (void *)h[3] : v2, g, gscale, n, 1e-3, 0.9, 0.95,
             1e-8, wd, l2, bf, t);
    for (int k = 0; bf && k < 4; k++) ops_bf16_to_f32(f[k], h[k], n);
    CF_FREE(h[0], h[1], h[2], h[3]);
    cf_cmp(r, "p", p1, p2, n, 1e-5);
    cf_cmp(r, "m", m1, m2, n, bf ? 1e-2 : 1e-5);
    cf_cmp(r, "v", v1, v2, n, bf ? 1e-2 : 1e-5);
    CF_FREE(p1, p2, m1, m2, v1, v2, g);
    return 0;
}

typedef int (*cf_fn)(const ops_table *, const ops_table *, const ops_ctx *, uint64_t *,
                     cf_result *);
/* MoE experts: N*top_k routed rows split over n_experts groups at random (empty groups
 * included), C = dim, OC = moe_ffn_dim (ffn_dim when the shape has none). */
static int cf_grouped_mm(const ops_table *x, const ops_table *y, const ops_ctx *c, uint64_t *s,
                         cf_result *r) {
    const int E = c->n_experts > 0 ? c->n_experts : cf_int(s, 1, 9);
    const int R = c->batch * c->seq_len * (c->top_k > 0 ? c->top_k : 2), C = c->dim;
    const int OC = c->moe_ffn_dim > 0 ? c->moe_ffn_dim : c->ffn_dim;
    int32_t *offs = malloc(sizeof(int32_t) * (size_t)(E + 1));
    float *in = cf_rand(s, (size_t)R * C, 1), *w = cf_rand(s, (size_t)E * OC * C, 1),
          *o1 = malloc(sizeof(float) * (size_t)R * OC),
          *o2 = malloc(sizeof(float) * (size_t)R * OC), *dy = cf_rand(s, (size_t)R * OC, 1),
          *dx1 = cf_rand(s, (size_t)R * C, 1), *dx2 = cf_dup(dx1, (size_t)R * C),
          *dw1 = cf_rand(s, (size_t)E * OC * C, 1), *dw2 = cf_dup(dw1, (size_t)E * OC * C);
    if (!offs || !in || !w || !o1 || !o2 || !dy || !dx1 || !dx2 || !dw1 || !dw2) return -1;
    offs[0] = 0; /* random non-decreasing cut points: some groups empty, some large */
    for (int e = 1; e < E; e++) offs[e] = cf_int(s, 0, R);
    offs[E] = R;
    for (int e = 1; e < E; e++) /* insertion sort of the cut points */
        for (int k = e; k > 1 && offs[k - 1] > offs[k]; k--) {
            int32_t t = offs[k];
            offs[k] = offs[k - 1];
            offs[k - 1] = t;
        }
    if (E > 2) offs[1] = 0; /* expert 0 without rows: its dw written as zeros (dw_acc 0) */
    x->grouped_mm_fwd(o1, in, w, offs, E, C, OC);
    y->grouped_mm_fwd(o2, in, w, offs, E, C, OC);
    cf_cmp(r, "out", o1, o2, (size_t)R * OC, 1e-5);
    x->grouped_mm_bwd(dx1, dw1, dy, in, w, offs, E, C, OC, 1, 1);
    y->grouped_mm_bwd(dx2, dw2, dy, in, w, offs, E, C, OC, 1, 1);
    cf_cmp(r, "dinp", dx1, dx2, (size_t)R * C, 1e-5);
    cf_cmp(r, "dw", dw1, dw2, (size_t)E * OC * C, 1e-5);
    cf_nan(dw1, (size_t)E * OC * C), cf_nan(dw2, (size_t)E * OC * C);
    x->grouped_mm_bwd(dx1, dw1, dy, in, w, offs, E, C, OC, 1, 0);
    y->grouped_mm_bwd(dx2, dw2, dy, in, w, offs, E, C, OC, 1, 0);
    cf_cmp(r, "dinp, dw written", dx1, dx2, (size_t)R * C, 1e-5);
    cf_cmp(r, "dw written", dw1, dw2, (size_t)E * OC * C, 1e-5);
    cf_nan(dx1, (size_t)R * C), cf_nan(dx2, (size_t)R * C);
    cf_nan(dw1, (size_t)E * OC * C), cf_nan(dw2, (size_t)E * OC * C);
    x->grouped_mm_bwd(dx1, dw1, dy, in, w, offs, E, C, OC, 0, 0);
    y->grouped_mm_bwd(dx2, dw2, dy, in, w, offs, E, C, OC, 0, 0);
    cf_cmp(r, "dinp written", dx1, dx2, (size_t)R * C, 1e-5);
    cf_cmp(r, "dw, dinp written", dw1, dw2, (size_t)E * OC * C, 1e-5);
    CF_FREE(offs, in, w, o1, o2, dy, dx1, dx2, dw1, dw2);
    return 0;
}

/* The check of op k: cf_NAME for every op of the list (oplist.h). */
static cf_fn cf_of(ops_kind k) {
#define CF_OF_(K, name, ...) [OPS_##K] = cf_##name,
    static const cf_fn of[OPS_COUNT] = {OPS_LIST(CF_OF_, CF_OF_)};
#undef CF_OF_
    return (int)k >= 0 && k < OPS_COUNT ? of[k] : NULL;
}

/* ---- selection ---------------------------------------------------------------------- */

/* "op/impl", "impl" or "op" (all of its implementations) -> the implementations to run (NULL
 * name: every non-reference one). */
static int cf_select(const char *name, const ops_impl **out, int max, base_err *err) {
    const ops_impl *all[128];
    const int n = ops_list(all, 128);
    char op[64] = "";
    const char *impl = name;
    if (name && strchr(name, '/')) {
        snprintf(op, sizeof op, "%.*s", (int)(strchr(name, '/') - name), name);
        impl = strchr(name, '/') + 1;
        if (ops_kind_from_name(op) < 0) return base_fail(err, "kernels: '%s' is not an op", op);
    }
    int m = 0;
    for (int i = 0; i < n && m < max; i++) {
        if (!name
                ? strcmp(all[i]->name, "reference") != 0
                : !strcmp(all[i]->name, impl) && (!op[0] || !strcmp(ops_kind_name(all[i]->op), op)))
            out[m++] = all[i];
    }
    const int kind = name && !op[0] ? ops_kind_from_name(name) : -1;
    if (m == 0 && kind >= 0) /* an op name: all of its implementations */
        for (int i = 0; i < n && m < max; i++)
            if ((int)all[i]->op == kind) out[m++] = all[i];
    if (name && m == 0)
        return base_fail(err, "kernels: no implementation '%s' (titan kernels lists them)", name);
    return m;
}

/* The baseline of impl: its op's default, or "reference" when impl is the default. */
static const ops_impl *cf_baseline(const ops_impl *impl) {
    const ops_impl *d = ops_default_impl(impl->op);
    return d != impl ? d : ops_find(impl->op, "reference");
}

static int cf_resolve(ops_table *t, const ops_impl *impl, const ops_ctx *c, base_err *err) {
    const ops_override ov = {ops_kind_name(impl->op), impl->name};
    return ops_resolve(t, "conformance", c, &ov, 1, err);
}

/* The size of an array */
#define CF_N(v) ((int)(sizeof(v) / sizeof((v)[0])))

/* A random shape both implementations accept: up to 200 small draws (odd sizes, the corners
 * of tiling), then, for a kernel whose constraints none of them meets (one specialised for
 * real models: head_dim 128, a GQA ratio of 8, dim % 512 == 0), up to 200 draws of
 * model-like sizes: Qwen3's head dims and GQA ratios (16/8 .. 64/4), power-of-two widths up
 * to 2048, up to 16 experts of width up to 256 (every flavor's constraints are met by sizes
 * of these forms), at batch 1 and up to 128 tokens so each check stays well under a second. */
static int cf_shape(uint64_t *s, const ops_impl *a, const ops_impl *b, ops_ctx *c, base_err *err) {
    static const int Ts[] = {1, 3, 7, 16, 17, 33, 64, 65, 96, 128, 130};
    static const int hds[] = {2, 4, 8, 16, 24, 32, 64};
    static const int bigTs[] = {16, 64, 128}, bighds[] = {64, 128, 256}, kvs[] = {1, 2, 4, 8},
                     ratios[] = {1, 2, 4, 5, 8, 16}, widths[] = {256, 512, 1024, 2048},
                     ffns[] = {256, 512, 768, 1024, 1536, 3072}, experts[] = {4, 8, 16},
                     topks[] = {1, 2, 4, 8}, moe_ffns[] = {64, 128, 256};
    for (int tries = 0; tries < 400; tries++) {
        if (tries < 200) {
            c->batch = cf_int(s, 1, 2);
            c->seq_len = cf_pick(s, Ts, CF_N(Ts));
            c->n_kv_heads = cf_int(s, 1, 3);
            c->n_heads = c->n_kv_heads * cf_int(s, 1, 3);
            c->head_dim = cf_pick(s, hds, CF_N(hds));
            c->dim = cf_int(s, 1, 40) * (cf_int(s, 0, 1) ? 8 : 1);
            c->ffn_dim = cf_int(s, 1, 48) * (cf_int(s, 0, 1) ? 8 : 1);
            c->vocab = cf_int(s, 2, 300);
        } else {
            c->batch = 1;
            c->seq_len = cf_pick(s, bigTs, CF_N(bigTs));
            c->n_kv_heads = cf_pick(s, kvs, CF_N(kvs));
            c->n_heads = c->n_kv_heads * cf_pick(s, ratios, CF_N(ratios));
            c->head_dim = cf_pick(s, bighds, CF_N(bighds));
            c->dim = cf_pick(s, widths, CF_N(widths));
            c->ffn_dim = cf_pick(s, ffns, CF_N(ffns));
            c->vocab = cf_int(s, 2, 300);
        }
        if (a->op == OPS_GROUPED_MM && tries < 200) { /* the MoE fields, drawn only here
                                                         (other ops' draws stay as they were) */
            c->n_experts = cf_int(s, 1, 12);
            c->top_k = cf_int(s, 1, c->n_experts < 4 ? c->n_experts : 4);
            c->moe_ffn_dim = cf_int(s, 1, 24) * (cf_int(s, 0, 1) ? 8 : 1);
        } else if (a->op == OPS_GROUPED_MM) {
            c->n_experts = cf_pick(s, experts, CF_N(experts));
            c->top_k = cf_pick(s, topks, CF_N(topks));
            if (c->top_k > c->n_experts) c->top_k = c->n_experts;
            c->moe_ffn_dim = cf_pick(s, moe_ffns, CF_N(moe_ffns));
        }
        ops_table ta, tb;
        if (cf_resolve(&ta, a, c, err)) continue;
        ops_release(&ta);
        if (cf_resolve(&tb, b, c, err)) continue;
        ops_release(&tb);
        return 0;
    }
    return -1; /* err: the last rule broken */
}
#undef CF_N

static int conform_test(const char *name, const ops_conform_opts *o, base_err *err);

/* Plugin kernels run guarded here (ops_plugin_checking): every output in the arena with a
 * guard after it, a writing kernel's outputs starting as NaN. */
int ops_conform_test(const char *name, const ops_conform_opts *o, base_err *err) {
    ops_plugin_checking(1);
    const int rc = conform_test(name, o, err);
    ops_plugin_checking(0);
    return rc;
}

static int conform_test(const char *name, const ops_conform_opts *o, base_err *err) {
    const ops_impl *sel[128];
    const int n = cf_select(name, sel, 128, err);
    if (n < 0) return -1;
    const int shapes = o && o->shapes > 0 ? o->shapes : 6;
    int failed = 0;
    for (int i = 0; i < n; i++) {
        const ops_impl *impl = sel[i], *base = cf_baseline(impl);
        const char *op = ops_kind_name(impl->op);
        const cf_fn fn = cf_of(impl->op);
        if (!base || !fn) {
            printf("SKIP %s/%s: no %s to compare against\n", op, impl->name,
                   base ? "conformance check" : "baseline");
            continue;
        }
        uint64_t seed = (o && o->seed ? o->seed : 1) * 1000003u + (uint64_t)impl->op * 7919u;
        cf_result worst = {0, "", 0};
        int ok = 1;
        for (int k = 0; k < shapes && ok; k++) {
            ops_ctx c = {0};
            ops_table tx, ty;
            base_err why;
            if (cf_shape(&seed, impl, base, &c, &why)) {
                printf("FAIL %s/%s: no random shape satisfies its constraints (%s)\n", op,
                       impl->name, why.msg);
                ok = 0;
                break;
            }
            if (cf_resolve(&tx, impl, &c, err)) return -1;
            if (cf_resolve(&ty, base, &c, err)) {
                ops_release(&tx);
                return -1;
            }
            cf_result r = {0, "", 0};
            g_bf16_inputs = impl->prec != OPS_PREC_F32 || base->prec != OPS_PREC_F32;
            if (g_bf16_inputs) r.floor = cf_bf16_tol(impl->op);
            uint64_t data_seed = seed;
            const int rc = fn(&tx, &ty, &c, &data_seed, &r);
            g_bf16_inputs = 0;
            ops_release(&tx);
            ops_release(&ty);
            if (rc) return base_fail(err, "kernels test: out of memory");
            char fault[512];
            if (ops_plugin_fault(fault, sizeof fault)) { /* caught by the arena's guards */
                printf("FAIL %s/%s at B=%d T=%d H=%d G=%d hd=%d dim=%d ffn=%d V=%d: %s\n", op,
                       impl->name, c.batch, c.seq_len, c.n_heads, c.n_kv_heads, c.head_dim, c.dim,
                       c.ffn_dim, c.vocab, fault);
                ok = 0;
                continue;
            }
            if (o && o->verbose)
                printf("  %s/%s B=%d T=%d H=%d G=%d hd=%d dim=%d ffn=%d V=%d E=%d K=%d Fe=%d: %s\n",
                       op, impl->name, c.batch, c.seq_len, c.n_heads, c.n_kv_heads, c.head_dim,
                       c.dim, c.ffn_dim, c.vocab, c.n_experts, c.top_k, c.moe_ffn_dim, r.what);
            if (r.ratio > worst.ratio || !(r.ratio == r.ratio)) worst = r;
            if (!(r.ratio <= 1.0)) {
                printf("FAIL %s/%s vs %s at B=%d T=%d H=%d G=%d hd=%d dim=%d ffn=%d V=%d: %s\n", op,
                       impl->name, base->name, c.batch, c.seq_len, c.n_heads, c.n_kv_heads,
                       c.head_dim, c.dim, c.ffn_dim, c.vocab, r.what);
                ok = 0;
            }
        }
        if (ok)
            printf("ok   %-12s %-12s vs %-10s %d shapes, worst %s\n", op, impl->name, base->name,
                   shapes, worst.what[0] ? worst.what : "exact");
        failed += !ok;
    }
    return failed;
}

/* ---- bench --------------------------------------------------------------------------- */

/* Seconds per call of run(arg), best of repeats until min_sec has passed (at least 3). */
typedef struct {
    ops_kind k;
    const ops_table *t;
    ops_ctx c;
    float *buf[16];
    int32_t *tok;
    int phase;      /* 0 forward, 1 backward */
    float *w, *dw;  /* grouped_mm: one expert stack [E, moe_ffn_dim, dim] and its gradient */
    int32_t *offs;  /* grouped_mm: [E+1], N*top_k rows (cf_offs, or cf_route per call) */
    double *share;  /* grouped_mm, skewed routing: [E] cumulative expert shares; NULL: even */
    uint64_t route; /* its generator's state */
    double load;    /* the timed calls' sum of max rows / mean rows (cf_route) */
    double *times;  /* with share: [CF_MAX_REPS] seconds per timed call, for their median */
} cf_bench;

#define CF_MAX_REPS 10000 /* timed calls per measurement at most */

/* cf_run_NAME: one call of op NAME's forward (phase 0) or backward (1) on b's buffers, as the
 * model makes it (every op of the list, oplist.h, has one); its work is counted from these
 * calls (cf_bench_work). Input gradients as the block's: the norms' added into the residual
 * stream's (dx_acc 1), the others written (0), grouped_mm's up projection added to the gate's. */
#define CF_DIMS(c)                                                                                 \
    const int B = (c)->batch, T = (c)->seq_len, N = B * T, D = (c)->dim, H = (c)->n_heads,         \
              G = (c)->n_kv_heads, hd = (c)->head_dim, F = (c)->ffn_dim, V = (c)->vocab;           \
    (void)B, (void)T, (void)N, (void)D, (void)H, (void)G, (void)hd, (void)F, (void)V
static void cf_run_embedding(const cf_bench *b) {
    CF_DIMS(&b->c);
    float *const *f = b->buf;
    if (!b->phase)
        b->t->embedding_fwd(f[0], b->tok, f[1], N, D);
    else
        b->t->embedding_bwd(f[1], f[0], b->tok, N, D);
}

static void cf_run_rmsnorm(const cf_bench *b) {
    CF_DIMS(&b->c);
    float *const *f = b->buf;
    if (!b->phase)
        b->t->rmsnorm_fwd(f[0], f[1], f[2], f[3], N, D, 1e-6f);
    else
        b->t->rmsnorm_bwd(f[4], f[5], f[0], f[2], f[3], f[1], N, D, 1, 0);
}

/* in place over the residual stream f[2], as the model calls it */
static void cf_run_add_rmsnorm(const cf_bench *b) {
    CF_DIMS(&b->c);
    float *const *f = b->buf;
    if (!b->phase)
        b->t->add_rmsnorm_fwd(f[2], f[0], f[1], f[2], f[6], f[3], N, D, 1e-6f);
    else
        b->t->add_rmsnorm_bwd(f[4], f[5], f[0], f[2], f[3], f[1], N, D, 1, 0);
}

static void cf_run_matmul(const cf_bench *b) {
    CF_DIMS(&b->c);
    float *const *f = b->buf;
    if (!b->phase)
        b->t->matmul_fwd(f[0], f[1], f[2], N, D, F);
    else
        b->t->matmul_bwd(f[3], f[4], f[0], f[1], f[2], N, D, F, 0, 0);
}

static void cf_run_rope(const cf_bench *b) {
    CF_DIMS(&b->c);
    float *const *f = b->buf;
    if (!b->phase)
        b->t->rope_fwd(f[0], f[1], f[2], f[3], B, T, H, hd);
    else
        b->t->rope_bwd(f[4], f[0], f[2], f[3], B, T, H, hd);
}

static void cf_run_attention(const cf_bench *b) {
    CF_DIMS(&b->c);
    float *const *f = b->buf;
    if (!b->phase)
        b->t->attention_fwd(f[0], f[1], f[2], f[3], f[4], B, T, H, G, hd);
    else
        b->t->attention_bwd(f[5], f[6], f[7], f[8], f[0], f[1], f[2], f[3], f[4], B, T, H, G, hd,
                            0);
}

static void cf_run_swiglu(const cf_bench *b) {
    CF_DIMS(&b->c);
    float *const *f = b->buf;
    if (!b->phase)
        b->t->swiglu_fwd(f[0], f[1], f[2], N, F);
    else
        b->t->swiglu_bwd(f[3], f[4], f[0], f[1], f[2], N, F, 0);
}

static void cf_run_lmhead_ce(const cf_bench *b) {
    CF_DIMS(&b->c);
    float *const *f = b->buf;
    const int chunk = ops_lmhead_ce_chunk(N, V); /* the model's */
    b->t->lmhead_ce(f[2], f[3], f[0], f[1], b->tok, N, D, V, 1.0f / N, f[4], chunk, NULL, NULL, 0);
}

/* AdamW's elements in the bench: the embedding's, vocab x dim (or an FFN weight's where that is
 * larger), the model's largest tensor: in training AdamW runs over every parameter, a pass bound
 * by memory, and on an FFN weight alone the four arrays stayed in cache (the bench model's,
 * 3 MiB: 143 GB/s, where a 30B-A3B-reduced step's optimizer moves ~80). */
static size_t cf_adamw_n(const ops_ctx *c) {
    const size_t f = (size_t)c->dim * c->ffn_dim, e = (size_t)c->vocab * c->dim;
    return f > e ? f : e;
}

static void cf_run_adamw(const cf_bench *b) {
    float *const *f = b->buf;
    b->t->adamw(f[0], f[1], f[2], f[3], 1.0f, cf_adamw_n(&b->c), 1e-4, 0.9, 0.95, 1e-8, 0.1, 0.0, 0,
                3);
}

/* one decode step at the last position of the window */
static void cf_run_attention_kv(const cf_bench *b) {
    CF_DIMS(&b->c);
    float *const *f = b->buf;
    b->t->attention_kv(f[0], f[1], f[2], f[3], 1, T - 1, H, G, hd);
}

/* One MoE layer's expert projections, as moe.c makes them: forward gate and up (dim ->
 * moe_ffn_dim) then down (moe_ffn_dim -> dim); backward down, then gate and up. The three share
 * one weight stack (same size; the timing does not depend on its values). */
static void cf_run_grouped_mm(const cf_bench *b) {
    const int E = b->c.n_experts, D = b->c.dim, Fe = b->c.moe_ffn_dim;
    float *const *f = b->buf; /* x [R,D], g, u, h [R,Fe], y [R,D]; backward: dx, dg, dh */
    /* the stacks [E, Fe, D] (gate and up share it) and [E, D, Fe] (down), as training's */
    const size_t w2 = (size_t)E * Fe * D;
    if (!b->phase) {
        b->t->grouped_mm_fwd(f[1], f[0], b->w, b->offs, E, D, Fe);
        b->t->grouped_mm_fwd(f[2], f[0], b->w, b->offs, E, D, Fe);
        b->t->grouped_mm_fwd(f[4], f[3], b->w + w2, b->offs, E, Fe, D);
    } else {
        b->t->grouped_mm_bwd(f[7], b->dw + w2, f[4], f[3], b->w + w2, b->offs, E, Fe, D, 0, 0);
        b->t->grouped_mm_bwd(f[5], b->dw, f[6], f[0], b->w, b->offs, E, D, Fe, 0, 0);
        b->t->grouped_mm_bwd(f[5], b->dw, f[7], f[0], b->w, b->offs, E, D, Fe, 1, 0);
    }
}

/* The weight that op k's bench call passes to a GEMM (*w, n floats); 0 for an op without one.
 * A bf16 implementation reads it from a weight mirror in the bench, as in training, where the
 * bf16 copy is made once a step (by the optimizer, and timed there), not once per call. */
static int cf_weight(const cf_bench *b, float **w, size_t *n) {
    CF_DIMS(&b->c);
    switch (b->k) {
    case OPS_MATMUL:
        *w = b->buf[2], *n = (size_t)D * F;
        return 1;
    case OPS_LMHEAD_CE:
        *w = b->buf[1], *n = (size_t)V * D;
        return 1;
    case OPS_GROUPED_MM: /* both stacks */
        *w = b->w, *n = 2 * (size_t)b->c.n_experts * b->c.moe_ffn_dim * D;
        return 1;
    default:
        return 0;
    }
}

static void cf_bench_run(const cf_bench *b) {
#define CF_RUN_(K, name, ...) [OPS_##K] = cf_run_##name,
    static void (*const run[OPS_COUNT])(const cf_bench *) = {OPS_LIST(CF_RUN_, CF_RUN_)};
#undef CF_RUN_
    run[b->k](b);
}

/* grouped_mm's skewed routing (ops_conform_opts.even_routing 0): before each timed call the
 * R rows are drawn afresh as a router at initialisation spreads them: expert e's share
 * exp(g_e), g_e ~ N(0, 1) drawn per call, each row to an expert by those shares (rows, not
 * tokens: a token's top-k experts are not kept distinct; the products see only the counts).
 * At 30B-A3B-reduced's 64 experts the most loaded one gets 6-10x the mean, as training logs
 * at initialisation (max 607-1272 rows for a mean of 128 over 64 experts). Row counts then
 * change from call to call as in training, so a kernel that compiles or caches per shape
 * (oneDNN's primitives) pays here what a step pays; with the same counts every call it did
 * not, and the bench had oneDNN's per-expert calls ahead of the one-pass kernel that is
 * faster in the step (bench/RESULTS.md, session 28). */
static void cf_route(cf_bench *b) {
    const int E = b->c.n_experts, R = b->offs[E];
    double c = 0.0;
    for (int e = 0; e < E; e++) { /* Box-Muller */
        const double u1 = ((double)(cf_next(&b->route) >> 11) + 1.0) * 0x1p-53,
                     u2 = (double)(cf_next(&b->route) >> 11) * 0x1p-53;
        c += exp(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
        b->share[e] = c;
    }
    for (int e = 0; e <= E; e++) b->offs[e] = 0;
    for (int r = 0; r < R; r++) { /* offs[e + 1] counts expert e's rows */
        const double u = (double)(cf_next(&b->route) >> 11) * 0x1p-53 * c;
        int lo = 0, hi = E - 1;
        while (lo < hi) {
            const int mid = (lo + hi) / 2;
            if (b->share[mid] <= u)
                lo = mid + 1;
            else
                hi = mid;
        }
        b->offs[lo + 1]++;
    }
    int most = 0;
    for (int e = 0; e < E; e++) {
        most = b->offs[e + 1] > most ? b->offs[e + 1] : most;
        b->offs[e + 1] += b->offs[e];
    }
    b->load += R > 0 ? (double)most * E / R : 0.0;
}

static int cf_by_value(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Seconds per call: the best of repeats until min_sec has passed (at least 3), or with a
 * routing drawn per call the median (its spread is the routings', not noise); *calls: how
 * many. The routing's generator restarts at seed, so every implementation sees the same
 * routings; each timed backward call has its routing's forward run (untimed) first. */
static double cf_time(cf_bench *b, double min_sec, uint64_t seed, int *calls) {
    double best = INFINITY, start = cf_now(), *ts = b->share ? b->times : NULL;
    int n = 0;
    b->route = seed;
    b->load = 0.0;
    for (int rep = 0; rep < 3 || cf_now() - start < min_sec; rep++) {
        if (b->share) { /* a backward follows the forward of its routing, as in training (an
                         * implementation may keep a plan from it: grouped_tiles) */
            cf_route(b);
            if (b->phase) {
                b->phase = 0;
                cf_bench_run(b);
                b->phase = 1;
            }
        }
        const double t0 = cf_now();
        cf_bench_run(b);
        const double dt = cf_now() - t0;
        if (dt < best) best = dt;
        if (ts) ts[n] = dt;
        n++;
        if (n == CF_MAX_REPS) break;
    }
    *calls = n;
    if (!ts) return best;
    qsort(ts, (size_t)n, sizeof *ts, cf_by_value);
    return n % 2 ? ts[n / 2] : 0.5 * (ts[n / 2 - 1] + ts[n / 2]);
}

/* The work of b's phase as the bench makes it (the FLOPs or bytes its rate divides by): its
 * calls run through the cost model's counting table, which reads each call's shape from the
 * call's arguments exactly as the profiler's wrappers do. */
static ops_work cf_bench_work(cf_bench *b) {
    ops_work w = {0, ops_work_flops(b->k)};
    ops_table tw;
    const ops_table *t = b->t;
    ops_work_counter(&tw, &w);
    b->t = &tw;
    cf_bench_run(b);
    b->t = t;
    ops_work_counter(&tw, NULL);
    return w;
}

/* grouped_mm: R rows spread evenly over E experts, offs [E+1] */
static void cf_offs(int32_t *offs, size_t R, size_t E) {
    for (size_t e = 0; e <= E; e++) offs[e] = (int32_t)(R * e / E);
}

ops_work ops_conform_work(ops_kind k, const ops_ctx *ctx, int bwd) {
    /* distinct addresses, never dereferenced: the counting table reads only the sizes, the
     * expert offsets and which pointers are NULL or alias */
    static float dummy[16];
    static int32_t tok[1];
    const size_t E = ctx->n_experts > 0 ? (size_t)ctx->n_experts : 0;
    cf_bench b;
    memset(&b, 0, sizeof b);
    b.k = k;
    b.c = *ctx;
    b.phase = bwd;
    for (int j = 0; j < 16; j++) b.buf[j] = &dummy[j];
    b.w = b.dw = &dummy[0];
    b.tok = tok;
    if (k == OPS_GROUPED_MM) { /* the bench skips it on a dense shape */
        if (!E || !(b.offs = malloc(sizeof(int32_t) * (E + 1))))
            return (ops_work){0, ops_work_flops(k)};
        cf_offs(b.offs, (size_t)ctx->batch * ctx->seq_len * ctx->top_k, E);
    }
    const ops_work w = cf_bench_work(&b);
    free(b.offs);
    return w;
}

/* STREAM triad a = b + s*c over 3 x 32 MiB, GB/s (best of 5). */
static double cf_triad(void) {
    const size_t n = (size_t)8 << 20;
    float *a = base_alloc_uninit(n * 4), *b = base_alloc_uninit(n * 4),
          *c = base_alloc_uninit(n * 4);
    if (!a || !b || !c) {
        CF_FREE(a, b, c);
        return 0;
    }
    for (size_t i = 0; i < n; i++) b[i] = c[i] = 1.0f, a[i] = 0;
    double best = INFINITY;
    for (int r = 0; r < 5; r++) {
        const double t0 = cf_now();
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++) a[i] = b[i] + 0.5f * c[i];
        const double dt = cf_now() - t0;
        best = dt < best ? dt : best;
    }
    const double gbs = 3.0 * n * 4 / best / 1e9;
    CF_FREE(a, b, c);
    return gbs;
}

int ops_conform_bench(const char *name, const ops_ctx *ctx, const ops_conform_opts *o,
                      base_err *err) {
    const ops_impl *sel[128];
    const int n = cf_select(name, sel, 128, err);
    if (n < 0) return -1;
    const double min_sec = o && o->min_sec > 0 ? o->min_sec : 0.3;
    printf("shape: batch %d seq %d dim %d heads %d/%d head_dim %d ffn %d vocab %d", ctx->batch,
           ctx->seq_len, ctx->dim, ctx->n_heads, ctx->n_kv_heads, ctx->head_dim, ctx->ffn_dim,
           ctx->vocab);
    if (ctx->n_experts > 0)
        printf(" experts %d top_k %d moe_ffn %d", ctx->n_experts, ctx->top_k, ctx->moe_ffn_dim);
    printf("\n");
    printf("memory bandwidth (STREAM triad, this process's threads): %.1f GB/s\n", cf_triad());
    printf("%-12s %-12s %-5s %10s %10s %8s %12s\n", "op", "impl", "pass", "ms", "default ms",
           "speedup", "rate");
    int failed = 0;
    for (int i = 0; i < n; i++) {
        const ops_impl *impl = sel[i], *def = ops_default_impl(impl->op);
        if (impl->op == OPS_LMHEAD_CE && ctx->vocab > 50000 && !strcmp(impl->name, "reference"))
            continue; /* the textbook lm_head takes minutes at a real vocabulary */
        cf_bench b;
        memset(&b, 0, sizeof b);
        b.k = impl->op;
        b.c = *ctx;
        uint64_t seed = 7;
        /* every buffer as large as the op's largest tensor */
        const size_t N = (size_t)ctx->batch * ctx->seq_len,
                     HD = (size_t)ctx->n_heads * ctx->head_dim;
        size_t big = N * (HD > (size_t)ctx->ffn_dim ? HD : (size_t)ctx->ffn_dim);
        if (big < N * ctx->dim) big = N * ctx->dim;
        if (impl->op == OPS_MATMUL) big += (size_t)ctx->dim * ctx->ffn_dim;
        if (impl->op == OPS_ADAMW) big = cf_adamw_n(ctx); /* the only buffers it reads */
        if (impl->op == OPS_EMBEDDING || impl->op == OPS_LMHEAD_CE)
            big += (size_t)ctx->vocab * ctx->dim +
                   (size_t)ops_lmhead_ce_chunk((long)N, ctx->vocab) * ctx->vocab;
        int ok = 1;
        if (impl->op == OPS_GROUPED_MM) {
            if (ctx->n_experts <= 0 || ctx->top_k <= 0 || ctx->moe_ffn_dim <= 0) {
                printf("%-12s %-12s skipped: a dense shape (use --flavor with experts)\n",
                       ops_kind_name(impl->op), impl->name);
                continue;
            }
            const size_t R = N * ctx->top_k, E = ctx->n_experts,
                         W = 2 * E * ctx->moe_ffn_dim * ctx->dim; /* two stacks */
            big = R * (ctx->dim > ctx->moe_ffn_dim ? ctx->dim : ctx->moe_ffn_dim);
            b.w = cf_rand(&seed, W, 0.05f);
            b.dw = base_alloc(W * sizeof(float));
            b.offs = malloc(sizeof(int32_t) * (E + 1));
            if (!(o && o->even_routing)) {
                b.share = malloc(sizeof(double) * E);
                b.times = malloc(sizeof(double) * CF_MAX_REPS);
            }
            ok = b.w && b.dw && b.offs && ((b.share && b.times) || (o && o->even_routing));
            if (ok) cf_offs(b.offs, R, E);
        }
        for (int j = 0; j < 9 && ok; j++) ok = (b.buf[j] = cf_rand(&seed, big, 0.5f)) != NULL;
        b.tok = malloc(sizeof(int32_t) * (size_t)ctx->batch * ctx->seq_len);
        if (!ok || !b.tok) {
            for (int j = 0; j < 9; j++) free(b.buf[j]);
            CF_FREE(b.tok, b.w, b.dw, b.offs, b.share, b.times);
            return base_fail(err, "kernels bench: out of memory");
        }
        for (int j = 0; j < ctx->batch * ctx->seq_len; j++)
            b.tok[j] = cf_int(&seed, 0, ctx->vocab - 1);
        if (impl->op == OPS_ADAMW) /* v >= 0 */
            for (size_t j = 0; j < big; j++) b.buf[2][j] = fabsf(b.buf[2][j]);
        ops_table ti, td;
        if (cf_resolve(&ti, impl, ctx, err) || cf_resolve(&td, def, ctx, err)) {
            printf("%-12s %-12s skipped: %s\n", ops_kind_name(impl->op), impl->name, err->msg);
            ops_release(&ti);
            for (int j = 0; j < 9; j++) free(b.buf[j]);
            CF_FREE(b.tok, b.w, b.dw, b.offs, b.share, b.times);
            continue;
        }
        float *wt = NULL;
        size_t wn = 0;
        void *mirror = NULL;
        if ((impl->prec == OPS_PREC_BF16 || def->prec == OPS_PREC_BF16) &&
            cf_weight(&b, &wt, &wn) && (mirror = base_alloc_uninit(ops_bf16_mirror_bytes(wn)))) {
            if (impl->op == OPS_GROUPED_MM) { /* the stacks in the kernel's layout, as training's */
                const ops_impl *i16 = impl->prec == OPS_PREC_BF16 ? impl : def;
                const int E = ctx->n_experts, D = ctx->dim, Fe = ctx->moe_ffn_dim;
                if (ops_bf16_mirror_layout_grouped(mirror, 0, i16, E, Fe, D) & /* both asked */
                    ops_bf16_mirror_layout_grouped(mirror, wn / 2, i16, E, D, Fe))
                    printf("%-12s %-12s bf16 weights in grouped_mm's own layout (training's)\n",
                           ops_kind_name(impl->op), impl->name);
            }
            ops_bf16_mirror_convert(mirror, 0, wt, wn);
            base_err merr;
            if (ops_bf16_mirror_add(wt, wn, mirror, &merr)) { /* then converted per call */
                printf("%-12s %-12s bf16 weight converted per call: %s\n", ops_kind_name(impl->op),
                       impl->name, merr.msg);
                ops_bf16_mirror_layouts_clear(mirror, ops_bf16_mirror_bytes(wn));
                free(mirror);
                mirror = NULL;
            } else {
                printf("%-12s %-12s bf16 weight read from a copy made once (a training step's)\n",
                       ops_kind_name(impl->op), impl->name);
            }
        }
        const int phases = impl->bwd && impl->op != OPS_LMHEAD_CE ? 2 : 1;
        for (int ph = 0; ph < phases; ph++) {
            b.phase = ph;
            b.t = &ti;
            int calls;
            const double ti_s = cf_time(&b, min_sec, seed + (uint64_t)ph, &calls);
            if (impl->op == OPS_GROUPED_MM && !ph)
                printf("%-12s %-12s routing: %s\n", ops_kind_name(impl->op), impl->name,
                       b.share ? "skewed, drawn afresh before each call (--routing even: R/E "
                                 "rows each)"
                               : "even, R/E rows each, the same every call");
            if (b.share)
                printf("%-12s %-12s %s: median of %d calls, each a fresh routing (most loaded "
                       "expert %.1fx the mean on average)\n",
                       ops_kind_name(impl->op), impl->name, ph ? "bwd" : "fwd", calls,
                       b.load / calls);
            b.t = &td;
            const double td_s =
                impl == def ? ti_s : cf_time(&b, min_sec, seed + (uint64_t)ph, &calls);
            const ops_work w = cf_bench_work(&b);
            printf("%-12s %-12s %-5s %10.3f %10.3f %7.2fx %8.1f %s\n", ops_kind_name(impl->op),
                   impl->name,
                   phases == 1 ? "step"
                   : ph        ? "bwd"
                               : "fwd",
                   ti_s * 1e3, td_s * 1e3, td_s / ti_s, w.value / ti_s / 1e9,
                   w.flops ? "GFLOP/s" : "GB/s");
        }
        if (mirror) {
            ops_bf16_mirror_remove(wt);
            ops_bf16_mirror_layouts_clear(mirror, ops_bf16_mirror_bytes(wn));
            free(mirror);
        }
        ops_release(&ti);
        ops_release(&td);
        for (int j = 0; j < 9; j++) free(b.buf[j]);
        CF_FREE(b.tok, b.w, b.dw, b.offs, b.share, b.times);
    }
    fflush(stdout);
    return failed;
}
