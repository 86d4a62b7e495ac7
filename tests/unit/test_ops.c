/* Unit tests of the CPU ops (all but attention) and of the kernel registry:
 *   finite-difference gradient checks of every backward (double central differences of
 *   L = sum(out * R)), forward checks against naive double-precision formulas, AdamW against
 *   a scalar restatement of torch.optim.AdamW, the registry's resolution and errors,
 *   accumulation (+=) of every backward, bitwise determinism across thread counts, and the
 *   accuracy of vm_expf. One line per check; exit status 0 when all pass. */
#include "ops/ops.h"
#include "ops/cpu/cpu.h"
#include "ops/cpu/vmath.h"

#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- reporting ------------------------------------------------------------------- */

static int g_failures, g_checks;

enum { E_EMB, E_RMS, E_MM, E_ROPE, E_SWIGLU, E_CE, E_ADAMW, E_EXP, E_GMM, E_NCAT };
static const char *const g_cat_names[E_NCAT] = {"embedding", "rmsnorm", "matmul",
                                                "rope",      "swiglu",  "lmhead_ce",
                                                "adamw",     "vm_expf", "grouped_mm"};
static double g_cat_max[E_NCAT];

/* max that propagates NaN (fmax drops it, which would let a NaN result pass a check) */
static double max_nan(double a, double b) {
    return isnan(a) || isnan(b) ? NAN : a > b ? a : b;
}

static void check(int cat, const char *what, double err, double tol) {
    int ok = err <= tol; /* NaN fails */
    g_checks++;
    if (!ok) g_failures++;
    if (cat >= 0 && (err > g_cat_max[cat] || isnan(err))) g_cat_max[cat] = err;
    printf("%s  %-58s err %.3e  (tol %.1e)\n", ok ? "PASS" : "FAIL", what, err, tol);
}

static void check_true(const char *what, int cond, const char *detail) {
    g_checks++;
    if (!cond) g_failures++;
    printf("%s  %s%s%s\n", cond ? "PASS" : "FAIL", what, detail ? ": " : "", detail ? detail : "");
}

/* ---- helpers --------------------------------------------------------------------- */

static float *randn(size_t n, uint64_t stream, float scale, float shift) {
    float *p = base_alloc(n * sizeof(float));
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    for (size_t i = 0; i < n; i++) p[i] = shift + scale * base_rng_normal(1234, stream, i);
    return p;
}

static float *zeros(size_t n) {
    return randn(n, 0, 0.0f, 0.0f);
}

static double dot_d(const float *a, const float *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * (double)b[i];
    return s;
}

/* max |a - b| / (max |b| + 1e-30) */
static double rel_err_f(const float *a, const float *b, size_t n) {
    double md = 0, mb = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > md || isnan(d)) md = d;
        if (fabs((double)b[i]) > mb) mb = fabs((double)b[i]);
    }
    return md / (mb + 1e-30);
}

static double rel_err_d(const float *a, const double *b, size_t n) {
    double md = 0, mb = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > md || isnan(d)) md = d;
        if (fabs(b[i]) > mb) mb = fabs(b[i]);
    }
    return md / (mb + 1e-30);
}

/* Central differences of f w.r.t. every element of param, against analytic:
 * returns max |analytic - numeric| / (max |numeric| + 1e-6). The step actually taken is
 * what fp32 could represent of param +- eps. */
typedef double (*loss_fn)(void *ctx);
static double fd_check(float *param, size_t n, const float *analytic, loss_fn f, void *ctx,
                       double eps) {
    double md = 0, mn = 0;
    for (size_t i = 0; i < n; i++) {
        float save = param[i];
        param[i] = (float)(save + eps);
        double hp = param[i];
        double lp = f(ctx);
        param[i] = (float)(save - eps);
        double hm = param[i];
        double lm = f(ctx);
        param[i] = save;
        double num = (lp - lm) / (hp - hm);
        double d = fabs((double)analytic[i] - num);
        if (d > md || isnan(d)) md = d;
        if (fabs(num) > mn) mn = fabs(num);
    }
    return md / (mn + 1e-6);
}

#define FD_EPS 1e-2
#define FD_TOL 2e-3

/* ---- embedding ------------------------------------------------------------------- */

typedef struct {
    float *out, *wte, *R;
    const int32_t *tok;
    int N, D;
} emb_ctx;

static double emb_loss(void *p) {
    emb_ctx *c = p;
    ops_cpu_embedding_fwd(c->out, c->tok, c->wte, c->N, c->D);
    return dot_d(c->out, c->R, (size_t)c->N * c->D);
}

static void test_embedding(void) {
    enum { V = 7, D = 5, N = 11 };
    const int32_t tok[N] = {3, 1, 3, 6, 0, 3, 2, 1, 5, 6, 3};
    float *wte = randn(V * D, 1, 1, 0), *R = randn(N * D, 2, 1, 0), *out = zeros(N * D);
    float *dwte = zeros(V * D), *dwte2 = zeros(V * D);
    emb_ctx c = {out, wte, R, tok, N, D};
    emb_loss(&c);
    double md = 0;
    for (int n = 0; n < N; n++) {
        for (int d = 0; d < D; d++) {
            md = max_nan(md, fabs(out[n * D + d] - wte[tok[n] * D + d]));
        }
    }
    check(E_EMB, "embedding fwd == gathered rows", md, 0);
    ops_cpu_embedding_bwd(dwte, R, tok, N, D);
    check(E_EMB, "embedding bwd dwte finite differences",
          fd_check(wte, V * D, dwte, emb_loss, &c, FD_EPS), FD_TOL);
    memcpy(dwte2, dwte, sizeof(float) * V * D);
    ops_cpu_embedding_bwd(dwte2, R, tok, N, D);
    for (int i = 0; i < V * D; i++) dwte[i] *= 2;
    check(E_EMB, "embedding bwd accumulates (twice == 2x)", rel_err_f(dwte2, dwte, V * D), 1e-6);
    base_free(wte), base_free(R), base_free(out), base_free(dwte), base_free(dwte2);
}

/* ---- rmsnorm --------------------------------------------------------------------- */

typedef struct {
    float *out, *rstd, *inp, *w, *R;
    int N, C;
    float eps;
} rms_ctx;

static double rms_loss(void *p) {
    rms_ctx *c = p;
    ops_cpu_rmsnorm_fwd(c->out, c->rstd, c->inp, c->w, c->N, c->C, c->eps);
    return dot_d(c->out, c->R, (size_t)c->N * c->C);
}

static void test_rmsnorm(void) {
    enum { N = 6, C = 37 };
    float eps = 1e-6f;
    float *inp = randn(N * C, 3, 1, 0.2f), *w = randn(C, 4, 0.3f, 1), *R = randn(N * C, 5, 1, 0);
    float *out = zeros(N * C), *rstd = zeros(N), *dinp = zeros(N * C), *dw = zeros(C);
    rms_ctx c = {out, rstd, inp, w, R, N, C, eps};
    rms_loss(&c);
    double *ref = malloc(sizeof(double) * N * C);
    for (int n = 0; n < N; n++) {
        double ss = 0;
        for (int i = 0; i < C; i++) ss += (double)inp[n * C + i] * inp[n * C + i];
        double r = 1.0 / sqrt(ss / C + eps);
        for (int i = 0; i < C; i++) ref[n * C + i] = (double)w[i] * inp[n * C + i] * r;
    }
    check(E_RMS, "rmsnorm fwd vs double formula", rel_err_d(out, ref, N * C), 1e-6);
    ops_cpu_rmsnorm_bwd(dinp, dw, R, inp, w, rstd, N, C, 1, 1);
    check(E_RMS, "rmsnorm bwd dinp finite differences",
          fd_check(inp, N * C, dinp, rms_loss, &c, FD_EPS), FD_TOL);
    check(E_RMS, "rmsnorm bwd dw finite differences", fd_check(w, C, dw, rms_loss, &c, FD_EPS),
          FD_TOL);
    rms_loss(&c);
    float *dinp2 = zeros(N * C), *dw2 = zeros(C);
    memcpy(dinp2, dinp, sizeof(float) * N * C);
    memcpy(dw2, dw, sizeof(float) * C);
    ops_cpu_rmsnorm_bwd(dinp2, dw2, R, inp, w, rstd, N, C, 1, 1);
    for (int i = 0; i < N * C; i++) dinp[i] *= 2;
    for (int i = 0; i < C; i++) dw[i] *= 2;
    check(E_RMS, "rmsnorm bwd dinp accumulates", rel_err_f(dinp2, dinp, N * C), 1e-6);
    check(E_RMS, "rmsnorm bwd dw accumulates", rel_err_f(dw2, dw, C), 1e-6);
    free(ref);
    base_free(inp), base_free(w), base_free(R), base_free(out), base_free(rstd);
    base_free(dinp), base_free(dw), base_free(dinp2), base_free(dw2);
}

/* Fused residual add + RMSNorm: h is exactly x + y, out and rstd are rmsnorm_fwd(h)'s bit for
 * bit (the model's backward recomputes the norm with rmsnorm_fwd from h), with h written over
 * x or over y as the block calls it; the backward is rmsnorm's. */
static void test_add_rmsnorm(void) {
    enum { N = 7, C = 301 };
    const size_t n = (size_t)N * C;
    float *x = randn(n, 11, 1, 0.1f), *y = randn(n, 12, 1, 0), *w = randn(C, 13, 0.3f, 1);
    float *h = zeros(n), *out = zeros(n), *rstd = zeros(N), *out2 = zeros(n), *rstd2 = zeros(N);
    float *hx = zeros(n), *hy = zeros(n), *o3 = zeros(n), *r3 = zeros(N);
    double bad_sum = 0, bad_norm = 0, bad_alias = 0;
    ops_cpu_add_rmsnorm_fwd(h, out, rstd, x, y, w, N, C, 1e-6f);
    for (size_t i = 0; i < n; i++) bad_sum += h[i] != x[i] + y[i];
    ops_cpu_rmsnorm_fwd(out2, rstd2, h, w, N, C, 1e-6f);
    for (size_t i = 0; i < n; i++) bad_norm += memcmp(&out[i], &out2[i], sizeof(float)) != 0;
    for (int i = 0; i < N; i++) bad_norm += memcmp(&rstd[i], &rstd2[i], sizeof(float)) != 0;
    memcpy(hx, x, n * sizeof(float));
    memcpy(hy, y, n * sizeof(float));
    ops_cpu_add_rmsnorm_fwd(hx, o3, r3, hx, y, w, N, C, 1e-6f); /* h over x */
    bad_alias += memcmp(hx, h, n * sizeof(float)) != 0 || memcmp(o3, out, n * sizeof(float)) != 0;
    ops_cpu_add_rmsnorm_fwd(hy, o3, r3, x, hy, w, N, C, 1e-6f); /* h over y */
    bad_alias += memcmp(hy, h, n * sizeof(float)) != 0 || memcmp(o3, out, n * sizeof(float)) != 0;
    check(E_RMS, "add_rmsnorm: h == x + y (elements differing)", bad_sum, 0);
    check(E_RMS, "add_rmsnorm: out, rstd == rmsnorm_fwd(h) bitwise (elements differing)", bad_norm,
          0);
    check(E_RMS, "add_rmsnorm: in place over x and over y (calls differing)", bad_alias, 0);
    base_free(x), base_free(y), base_free(w), base_free(h), base_free(out), base_free(rstd);
    base_free(out2), base_free(rstd2), base_free(hx), base_free(hy), base_free(o3), base_free(r3);
}

/* ---- matmul ---------------------------------------------------------------------- */

typedef struct {
    float *out, *inp, *w, *R;
    int N, C, OC;
} mm_ctx;

static double mm_loss(void *p) {
    mm_ctx *c = p;
    ops_cpu_matmul_fwd(c->out, c->inp, c->w, c->N, c->C, c->OC);
    return dot_d(c->out, c->R, (size_t)c->N * c->OC);
}

static void test_matmul(void) {
    enum { N = 5, C = 9, OC = 7 };
    float *inp = randn(N * C, 6, 1, 0), *w = randn(OC * C, 7, 1, 0), *R = randn(N * OC, 8, 1, 0);
    float *out = zeros(N * OC), *dinp = zeros(N * C), *dw = zeros(OC * C);
    mm_ctx c = {out, inp, w, R, N, C, OC};
    mm_loss(&c);
    double ref[N * OC];
    for (int n = 0; n < N; n++) {
        for (int o = 0; o < OC; o++) {
            double s = 0;
            for (int i = 0; i < C; i++) s += (double)inp[n * C + i] * w[o * C + i];
            ref[n * OC + o] = s;
        }
    }
    check(E_MM, "matmul fwd vs double formula", rel_err_d(out, ref, N * OC), 1e-6);
    ops_cpu_matmul_bwd(dinp, dw, R, inp, w, N, C, OC, 1, 1);
    check(E_MM, "matmul bwd dinp finite differences",
          fd_check(inp, N * C, dinp, mm_loss, &c, FD_EPS), FD_TOL);
    check(E_MM, "matmul bwd dw finite differences", fd_check(w, OC * C, dw, mm_loss, &c, FD_EPS),
          FD_TOL);
    float *dinp2 = zeros(N * C), *dw2 = zeros(OC * C), *dw3 = zeros(OC * C);
    memcpy(dinp2, dinp, sizeof(float) * N * C);
    memcpy(dw2, dw, sizeof(float) * OC * C);
    ops_cpu_matmul_bwd(dinp2, dw2, R, inp, w, N, C, OC, 1, 1);
    ops_cpu_matmul_bwd(NULL, dw3, R, inp, w, N, C, OC, 1, 1); /* dinp NULL: dw only */
    check(E_MM, "matmul bwd dinp == NULL skips dinp, dw still right", rel_err_f(dw3, dw, OC * C),
          0);
    for (int i = 0; i < N * C; i++) dinp[i] *= 2;
    for (int i = 0; i < OC * C; i++) dw[i] *= 2;
    check(E_MM, "matmul bwd dinp accumulates", rel_err_f(dinp2, dinp, N * C), 1e-6);
    check(E_MM, "matmul bwd dw accumulates", rel_err_f(dw2, dw, OC * C), 1e-6);
    base_free(inp), base_free(w), base_free(R), base_free(out), base_free(dinp), base_free(dw);
    base_free(dinp2), base_free(dw2), base_free(dw3);
}

/* ---- rope ------------------------------------------------------------------------ */

typedef struct {
    float *out, *inp, *R, *cos, *sin;
    int B, T, nh, hd;
} rope_ctx;

static double rope_loss(void *p) {
    rope_ctx *c = p;
    ops_cpu_rope_fwd(c->out, c->inp, c->cos, c->sin, c->B, c->T, c->nh, c->hd);
    return dot_d(c->out, c->R, (size_t)c->B * c->T * c->nh * c->hd);
}

static void test_rope(void) {
    /* tables against the double-precision formula theta^(-2i/hd) * pos */
    {
        enum { T = 64, HD = 128 };
        double theta = 1e6;
        float *cs = zeros(T * HD / 2), *sn = zeros(T * HD / 2);
        ops_rope_table(cs, sn, T, HD, theta);
        double md = 0;
        for (int t = 0; t < T; t++) {
            for (int i = 0; i < HD / 2; i++) {
                double a = t * pow(theta, -2.0 * i / HD);
                md = max_nan(md, fabs(cs[t * HD / 2 + i] - cos(a)));
                md = max_nan(md, fabs(sn[t * HD / 2 + i] - sin(a)));
            }
        }
        check(E_ROPE, "rope table (T=64, hd=128, theta=1e6) vs double, abs", md, 1e-5);
        base_free(cs), base_free(sn);
    }
    enum { B = 2, T = 5, NH = 3, HD = 8, H = HD / 2, NE = B * T * NH * HD };
    float *cs = zeros(T * H), *sn = zeros(T * H);
    ops_rope_table(cs, sn, T, HD, 10000.0);
    float *inp = randn(NE, 9, 1, 0), *R = randn(NE, 10, 1, 0), *out = zeros(NE);
    float *dinp = zeros(NE);
    rope_ctx c = {out, inp, R, cs, sn, B, T, NH, HD};
    rope_loss(&c);
    double ref[NE];
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            for (int h = 0; h < NH; h++) {
                const float *x = inp + ((b * T + t) * NH + h) * HD;
                double *o = ref + ((b * T + t) * NH + h) * HD;
                for (int j = 0; j < H; j++) {
                    double co = cs[t * H + j], si = sn[t * H + j];
                    o[j] = (double)x[j] * co - (double)x[j + H] * si;
                    o[j + H] = (double)x[j + H] * co + (double)x[j] * si;
                }
            }
        }
    }
    check(E_ROPE, "rope fwd vs explicit rotate_half formula", rel_err_d(out, ref, NE), 1e-6);
    float *inplace = zeros(NE);
    memcpy(inplace, inp, sizeof(float) * NE);
    ops_cpu_rope_fwd(inplace, inplace, cs, sn, B, T, NH, HD);
    check(E_ROPE, "rope fwd in place == out of place (bitwise)", rel_err_f(inplace, out, NE), 0);
    ops_cpu_rope_bwd(dinp, R, cs, sn, B, T, NH, HD);
    check(E_ROPE, "rope bwd dinp finite differences",
          fd_check(inp, NE, dinp, rope_loss, &c, FD_EPS), FD_TOL);
    /* bwd is the inverse rotation: bwd(fwd(x)) == x */
    float *back = zeros(NE);
    rope_loss(&c); /* out again for the unperturbed inp */
    ops_cpu_rope_bwd(back, out, cs, sn, B, T, NH, HD);
    check(E_ROPE, "rope bwd(fwd(x)) == x", rel_err_f(back, inp, NE), 1e-6);
    float *rin = zeros(NE);
    memcpy(rin, R, sizeof(float) * NE);
    ops_cpu_rope_bwd(rin, rin, cs, sn, B, T, NH, HD); /* aliased: replaces */
    check(E_ROPE, "rope bwd in place (dinp == dout) == into zeros", rel_err_f(rin, dinp, NE), 0);
    float *d2 = zeros(NE);
    memcpy(d2, dinp, sizeof(float) * NE);
    ops_cpu_rope_bwd(d2, R, cs, sn, B, T, NH, HD);
    for (int i = 0; i < NE; i++) dinp[i] *= 2;
    check(E_ROPE, "rope bwd accumulates", rel_err_f(d2, dinp, NE), 1e-6);
    base_free(cs), base_free(sn), base_free(inp), base_free(R), base_free(out), base_free(dinp);
    base_free(inplace), base_free(back), base_free(rin), base_free(d2);
}

/* ---- swiglu ---------------------------------------------------------------------- */

typedef struct {
    float *out, *gate, *up, *R;
    int N, F;
} sw_ctx;

static double sw_loss(void *p) {
    sw_ctx *c = p;
    ops_cpu_swiglu_fwd(c->out, c->gate, c->up, c->N, c->F);
    return dot_d(c->out, c->R, (size_t)c->N * c->F);
}

static void test_swiglu(void) {
    enum { N = 4, F = 29, NE = N * F };
    float *gate = randn(NE, 11, 2.5f, 0), *up = randn(NE, 12, 1, 0), *R = randn(NE, 13, 1, 0);
    float *out = zeros(NE), *dg = zeros(NE), *du = zeros(NE);
    gate[0] = -120.0f, gate[1] = 95.0f, gate[2] = 0.0f; /* exp overflow / underflow paths */
    sw_ctx c = {out, gate, up, R, N, F};
    sw_loss(&c);
    double ref[NE];
    for (int i = 0; i < NE; i++) ref[i] = (double)gate[i] / (1 + exp(-(double)gate[i])) * up[i];
    check(E_SWIGLU, "swiglu fwd vs double formula", rel_err_d(out, ref, NE), 1e-6);
    ops_cpu_swiglu_bwd(dg, du, R, gate, up, N, F, 1);
    check(E_SWIGLU, "swiglu bwd dgate finite differences",
          fd_check(gate, NE, dg, sw_loss, &c, FD_EPS), FD_TOL);
    check(E_SWIGLU, "swiglu bwd dup finite differences", fd_check(up, NE, du, sw_loss, &c, FD_EPS),
          FD_TOL);
    float *dg2 = zeros(NE), *du2 = zeros(NE);
    memcpy(dg2, dg, sizeof(float) * NE);
    memcpy(du2, du, sizeof(float) * NE);
    ops_cpu_swiglu_bwd(dg2, du2, R, gate, up, N, F, 1);
    for (int i = 0; i < NE; i++) dg[i] *= 2, du[i] *= 2;
    check(E_SWIGLU, "swiglu bwd dgate accumulates", rel_err_f(dg2, dg, NE), 1e-6);
    check(E_SWIGLU, "swiglu bwd dup accumulates", rel_err_f(du2, du, NE), 1e-6);
    base_free(gate), base_free(up), base_free(R), base_free(out), base_free(dg), base_free(du);
    base_free(dg2), base_free(du2);
}

/* ---- lm_head + cross-entropy ----------------------------------------------------- */

typedef struct {
    float *x, *w, *scratch;
    const int32_t *tg;
    int N, D, V, chunk;
    float scale;
} ce_ctx;

static double ce_loss(void *p) {
    ce_ctx *c = p;
    return c->scale * ops_cpu_lmhead_ce(NULL, NULL, c->x, c->w, c->tg, c->N, c->D, c->V, c->scale,
                                        c->scratch, c->chunk, NULL, NULL, 1);
}

static void test_lmhead_ce(void) {
    enum { N = 7, D = 16, V = 53 };
    /* -100 ignored, 53 (== V) and -5 out of range: counted as ignored */
    const int32_t tg[N] = {4, OPS_IGNORE_INDEX, 52, 0, V, 17, -5};
    const int n_valid_expected = 4;
    float *x = randn(N * D, 14, 1, 0), *w = randn(V * D, 15, 0.5f, 0);
    float *scratch = zeros(N * V), *dx = zeros(N * D), *dw = zeros(V * D);
    float scale = 1.0f / n_valid_expected;
    ce_ctx c = {x, w, scratch, tg, N, D, V, 3, scale};
    int64_t nv = -1;
    double loss = ops_cpu_lmhead_ce(NULL, NULL, x, w, tg, N, D, V, scale, scratch, 3, &nv, NULL, 1);
    char buf[128];
    snprintf(buf, sizeof buf, "%lld (expected %d)", (long long)nv, n_valid_expected);
    check_true("lmhead_ce n_valid skips -100 and out-of-range targets", nv == n_valid_expected,
               buf);
    double ref = 0;
    for (int n = 0; n < N; n++) {
        if (tg[n] < 0 || tg[n] >= V) continue;
        double lg[V], mx = -INFINITY, s = 0;
        for (int v = 0; v < V; v++) {
            lg[v] = 0;
            for (int i = 0; i < D; i++) lg[v] += (double)x[n * D + i] * w[v * D + i];
            mx = max_nan(mx, lg[v]);
        }
        for (int v = 0; v < V; v++) s += exp(lg[v] - mx);
        ref += mx + log(s) - lg[tg[n]];
    }
    check(E_CE, "lmhead_ce loss vs double logsumexp - logit", fabs(loss - ref) / fabs(ref), 1e-6);

    double loss_g = ops_cpu_lmhead_ce(dx, dw, x, w, tg, N, D, V, scale, scratch, 3, NULL, NULL, 1);
    check(E_CE, "lmhead_ce loss with grad == loss without", fabs(loss_g - loss), 0);
    check(E_CE, "lmhead_ce dx finite differences", fd_check(x, N * D, dx, ce_loss, &c, FD_EPS),
          FD_TOL);
    check(E_CE, "lmhead_ce dw finite differences", fd_check(w, V * D, dw, ce_loss, &c, FD_EPS),
          FD_TOL);
    double md = 0;
    for (int i = 0; i < D; i++) {
        md = max_nan(md, fabs(dx[1 * D + i])), md = max_nan(md, fabs(dx[4 * D + i]));
        md = max_nan(md, fabs(dx[6 * D + i]));
    }
    check(E_CE, "lmhead_ce dx rows of ignored targets are zero", md, 0);

    /* chunk sizes 3 (does not divide 7), 1 and 16 (> N) against chunk = N */
    float *dxN = zeros(N * D), *dwN = zeros(V * D);
    double lossN = ops_cpu_lmhead_ce(dxN, dwN, x, w, tg, N, D, V, scale, scratch, N, NULL, NULL, 1);
    const int chunks[] = {3, 1, 16};
    for (int k = 0; k < 3; k++) {
        float *dxk = zeros(N * D), *dwk = zeros(V * D);
        float *scr = zeros((size_t)chunks[k] * V);
        double lk =
            ops_cpu_lmhead_ce(dxk, dwk, x, w, tg, N, D, V, scale, scr, chunks[k], NULL, NULL, 1);
        double e = max_nan(fabs(lk - lossN) / fabs(lossN),
                           max_nan(rel_err_f(dxk, dxN, N * D), rel_err_f(dwk, dwN, V * D)));
        snprintf(buf, sizeof buf, "lmhead_ce chunk=%d == chunk=N (loss, dx, dw)", chunks[k]);
        check(E_CE, buf, e, 1e-6);
        base_free(dxk), base_free(dwk), base_free(scr);
    }

    float *dx2 = zeros(N * D), *dw2 = zeros(V * D);
    memcpy(dx2, dx, sizeof(float) * N * D);
    memcpy(dw2, dw, sizeof(float) * V * D);
    ops_cpu_lmhead_ce(dx2, dw2, x, w, tg, N, D, V, scale, scratch, 3, NULL, NULL, 1);
    for (int i = 0; i < N * D; i++) dx[i] *= 2;
    for (int i = 0; i < V * D; i++) dw[i] *= 2;
    check(E_CE, "lmhead_ce dx accumulates", rel_err_f(dx2, dx, N * D), 1e-6);
    check(E_CE, "lmhead_ce dw accumulates", rel_err_f(dw2, dw, V * D), 1e-6);

    /* extreme logits: no overflow, finite loss, softmax rows still sum to 0 with the onehot */
    float *xb = zeros(N * D);
    for (int i = 0; i < N * D; i++) xb[i] = 60.0f * x[i];
    float *dxb = zeros(N * D), *dwb = zeros(V * D);
    double lb = ops_cpu_lmhead_ce(dxb, dwb, xb, w, tg, N, D, V, scale, scratch, 3, NULL, NULL, 1);
    int finite = isfinite(lb);
    for (int i = 0; i < N * D; i++) finite &= isfinite(dxb[i]);
    for (int i = 0; i < V * D; i++) finite &= isfinite(dwb[i]);
    check_true("lmhead_ce with logits ~1e3 stays finite", finite, NULL);
    base_free(x), base_free(w), base_free(scratch), base_free(dx), base_free(dw);
    base_free(dxN), base_free(dwN), base_free(dx2), base_free(dw2);
    base_free(xb), base_free(dxb), base_free(dwb);
}

/* ---- adamw ----------------------------------------------------------------------- */

/* torch.optim.AdamW (wd: decoupled decay) or, l2 != 0, torch.optim.Adam (its weight_decay:
 * coupled, grad.add(param, alpha=l2) before the moments); bf: the moments stored in bf16
 * (torchtitan 0.3's fused_opt_states_bf16: stepped in fp32, stored rounded to nearest even;
 * both references round theirs so after every step) */
static float bf16_round(float f) {
    return ops_cpu_bf16_value(ops_cpu_bf16_bits(f));
}

static void test_adamw(double wd, double l2, int bf) {
    enum { NP = 1003 };
    /* doubles, as Python holds them; torch rounds each derived scalar to fp32 once */
    const double lr = 1e-2, b1 = 0.9, b2 = 0.95, eps = 1e-8;
    char name[48];
    snprintf(name, sizeof name, "%s%s", l2 != 0 ? "adam (L2 decay)" : "adamw",
             bf ? ", bf16 moments" : "");
    char what[160];
    uint16_t mh[NP] = {0}, vh[NP] = {0};
    float *p = randn(NP, 16, 1, 0), *m = zeros(NP), *v = zeros(NP);
    float *pf = zeros(NP), *mf = zeros(NP), *vf = zeros(NP);
    double *pd = malloc(sizeof(double) * NP), *md = malloc(sizeof(double) * NP);
    double *vd = malloc(sizeof(double) * NP);
    memcpy(pf, p, sizeof(float) * NP);
    for (int i = 0; i < NP; i++) pd[i] = p[i], md[i] = 0, vd[i] = 0;
    for (int64_t t = 1; t <= 3; t++) {
        float *g = randn(NP, 100 + (uint64_t)t, 0.1f, 0);
        g[0] = 0; /* denom == eps path */
        g[1] = 1e-3f * (float)t;
        ops_cpu_adamw(p, bf ? (void *)mh : m, bf ? (void *)vh : v, g, 1.0f, NP, lr, b1, b2, eps, wd,
                      l2, bf, t);
        if (bf) ops_bf16_to_f32(m, mh, NP), ops_bf16_to_f32(v, vh, NP);
        /* (1) torch.optim.AdamW / Adam, literally, in double from the same hyperparameters */
        double bc1 = 1 - pow(b1, (double)t), bc2 = 1 - pow(b2, (double)t);
        for (int i = 0; i < NP; i++) {
            const double gd = g[i] + l2 * pd[i];
            pd[i] *= 1 - (double)lr * wd;
            md[i] = (double)b1 * md[i] + (1 - (double)b1) * gd;
            vd[i] = (double)b2 * vd[i] + (1 - (double)b2) * gd * gd;
            double denom = sqrt(vd[i]) / sqrt(bc2) + eps;
            pd[i] -= (double)lr / bc1 * md[i] / denom;
            if (bf) md[i] = bf16_round((float)md[i]), vd[i] = bf16_round((float)vd[i]);
        }
        /* (2) the kernel's statements in fp32: torch's operations and scalar casts (not its
         * fma placement in addcmul_ nor its sqrt: see cpu/adamw.c) */
        float decay = (float)(1 - (double)lr * wd), w1 = (float)(1 - (double)b1);
        float w2 = (float)(1 - (double)b2), nstep = (float)(-((double)lr / bc1));
        float bc2s = (float)sqrt(bc2);
        for (int i = 0; i < NP; i++) {
            float gi = g[i];
#ifdef __FMA__
            if (l2 != 0) gi = fmaf(pf[i], (float)l2, gi); /* add(alpha): vec::fmadd */
#else
            if (l2 != 0) gi = pf[i] * (float)l2 + gi;
#endif
            pf[i] = pf[i] * decay;
#ifdef __FMA__
            mf[i] = fmaf(w1, gi - mf[i], mf[i]); /* lerp_, weight < 0.5 */
#else
            mf[i] = w1 * (gi - mf[i]) + mf[i];
#endif
            vf[i] = vf[i] * (float)b2;
            vf[i] = vf[i] + w2 * gi * gi;
            float denom = sqrtf(vf[i]) / bc2s + (float)eps;
            pf[i] = pf[i] + nstep * mf[i] / denom;
            if (bf) mf[i] = bf16_round(mf[i]), vf[i] = bf16_round(vf[i]);
        }
        base_free(g);
    }
    static const char *const st[3] = {"p", "m", "v"};
    const float *got[3] = {p, m, v};
    const double *want[3] = {pd, md, vd};
    for (int k = 0; k < 3; k++) {
        snprintf(what, sizeof what, "%s 3 steps: %s vs double torch formula", name, st[k]);
        /* bf16 moments: the double and fp32 values may round to neighbouring bf16s */
        check(E_ADAMW, what, rel_err_d(got[k], want[k], NP), bf && k ? 8e-3 : 1e-6);
    }
    double e = max_nan(rel_err_f(p, pf, NP), max_nan(rel_err_f(m, mf, NP), rel_err_f(v, vf, NP)));
    /* the kernel's own statement order, restated: its vector and scalar paths and every ISA
     * copy compute these bits (torch itself: within the double formula's bound above) */
    snprintf(what, sizeof what, "%s 3 steps: p, m, v == fp32 restatement of the kernel", name);
    check(E_ADAMW, what, e, 0);
    base_free(p), base_free(m), base_free(v), base_free(pf), base_free(mf), base_free(vf);
    free(pd), free(md), free(vd);
}

/* The gradient scale (clipping's coefficient) is clip_grad_norm_'s g.mul_(coef) folded into the
 * update: bitwise the step on gradients scaled beforehand, and g itself is left as it was. */
static void test_adamw_gscale(void) {
    enum { NP = 1003 };
    const float c = 0.37f;
    float *p1 = randn(NP, 16, 1, 0), *p2 = randn(NP, 16, 1, 0);
    float *m1 = zeros(NP), *v1 = zeros(NP), *m2 = zeros(NP), *v2 = zeros(NP);
    int same = 1, kept = 1;
    for (int64_t t = 1; t <= 3; t++) {
        float *g = randn(NP, 200 + (uint64_t)t, 0.1f, 0), *gc = zeros(NP), *g0 = zeros(NP);
        for (int i = 0; i < NP; i++) gc[i] = g[i] * c, g0[i] = g[i];
        /* step 3 with Adam's coupled decay: the scale applies before it, as clipping does */
        const double wd = t < 3 ? 0.1 : 0.0, l2 = t < 3 ? 0.0 : 0.05;
        ops_cpu_adamw(p1, m1, v1, g, c, NP, 1e-2, 0.9, 0.95, 1e-8, wd, l2, 0, t);
        ops_cpu_adamw(p2, m2, v2, gc, 1.0f, NP, 1e-2, 0.9, 0.95, 1e-8, wd, l2, 0, t);
        same = same && !memcmp(p1, p2, sizeof(float) * NP) && !memcmp(m1, m2, sizeof(float) * NP) &&
               !memcmp(v1, v2, sizeof(float) * NP);
        kept = kept && !memcmp(g, g0, sizeof(float) * NP);
        base_free(g), base_free(gc), base_free(g0);
    }
    check_true("adamw: gscale c is bitwise the step on c * g, g unchanged", same && kept, "");
    base_free(p1), base_free(p2), base_free(m1), base_free(v1), base_free(m2), base_free(v2);
}

/* ---- vm_expf --------------------------------------------------------------------- */

static void test_vm_expf(void) {
    enum { NS = 1 << 20 };
    float *xs = zeros(NS), *ys = zeros(NS);
    double worst = 0;
    for (int range = 0; range < 3; range++) {
        float lo = range == 0 ? -87.33f : range == 1 ? -1.0f : 0.0f;
        float hi = range == 0 ? 0.0f : range == 1 ? 1.0f : 88.37f;
        for (int i = 0; i < NS; i++) xs[i] = lo + (hi - lo) * (float)i / NS;
#pragma omp simd
        for (int i = 0; i < NS; i++) ys[i] = vm_expf(xs[i]);
        for (int i = 0; i < NS; i++) {
            double r = exp((double)xs[i]);
            if (r < FLT_MIN) continue;
            int ex;
            frexp(r, &ex);
            worst = max_nan(worst, fabs(ys[i] - r) / ldexp(1.0, ex - 24));
        }
    }
    check(E_EXP, "vm_expf max ulp error on [-87.33, 88.37]", worst, 2.0);
    int ok = vm_expf(-INFINITY) == 0.0f && vm_expf(-1e30f) == 0.0f && vm_expf(-100.0f) == 0.0f &&
             vm_expf(0.0f) == 1.0f && isinf(vm_expf(INFINITY)) && isnan(vm_expf(NAN)) &&
             vm_expf(-87.0f) > 0.0f;
    check_true("vm_expf special values (-inf, -1e30, -100 -> 0; inf -> inf; NaN -> NaN)", ok, NULL);
    /* the same through the vector loop, where vm_expf runs in the kernels: inputs outside
     * [-87.34, 88.38] compute garbage that its last two selects must replace (it does not clamp
     * them first) */
    static const float sx[] = {-INFINITY, -FLT_MAX,  -1e30f,   -1000.0f, -126.0f * 0.6931472f,
                               -87.3366f, -87.3365f, -50.0f,   -FLT_MIN, -0.0f,
                               0.0f,      1e-30f,    88.3762f, 88.3763f, 88.7f,
                               89.0f,     200.0f,    1e30f,    FLT_MAX,  INFINITY,
                               NAN,       -NAN};
    enum { NSX = sizeof sx / sizeof sx[0] };
    float sy[NSX];
#pragma omp simd
    for (int i = 0; i < NSX; i++) sy[i] = vm_expf(sx[i]);
    int vok = 1;
    char bad[128] = "";
    for (int i = 0; i < NSX && vok; i++) {
        const double r = exp((double)sx[i]);
        const float x = sx[i];
        const int want0 = x < -87.3365478515625f;
        const int wantinf = x > 88.3762626647949f;
        vok = isnan(sx[i])  ? isnan(sy[i])
              : want0       ? sy[i] == 0.0f && !signbit(sy[i])
              : wantinf     ? isinf(sy[i]) && sy[i] > 0
              : r < FLT_MIN ? sy[i] >= 0.0f && sy[i] < 2.0f * FLT_MIN
                            : fabs(sy[i] - r) <= 2.0 * r * FLT_EPSILON;
        if (!vok) snprintf(bad, sizeof bad, "exp(%a) gave %a", sx[i], sy[i]);
    }
    check_true("vm_expf special and out-of-range values in a vector loop", vok, vok ? NULL : bad);
    base_free(xs), base_free(ys);
}

/* ---- registry -------------------------------------------------------------------- */

/* grouped_mm: both implementations against a double-precision per-row reference, on groups
 * that are empty, tiny and larger than a tile (rows and columns split into several tiles),
 * with gradients accumulating into non-zero buffers; and against each other. */
static void test_grouped_mm(void) {
    enum { E = 6, C = 1100, OC = 150 };
    const int32_t sizes[E] = {0, 300, 1, 0, 37, 513};
    int32_t offs[E + 1] = {0};
    for (int e = 0; e < E; e++) offs[e + 1] = offs[e] + sizes[e];
    const int R = offs[E];
    float *x = randn((size_t)R * C, 301, 1.0f, 0), *w = randn((size_t)E * OC * C, 302, 0.05f, 0);
    float *dy = randn((size_t)R * OC, 303, 1.0f, 0);
    double *ref = base_alloc(sizeof(double) * (size_t)R * OC);
    double *rdx = base_alloc(sizeof(double) * (size_t)R * C);
    double *rdw = base_alloc(sizeof(double) * (size_t)E * OC * C);
    const float *init_dx = randn((size_t)R * C, 304, 1.0f, 0);
    const float *init_dw = randn((size_t)E * OC * C, 305, 1.0f, 0);
    for (int e = 0; e < E; e++)
        for (int r = offs[e]; r < offs[e + 1]; r++)
            for (int o = 0; o < OC; o++) {
                double acc = 0;
                for (int c = 0; c < C; c++)
                    acc += (double)x[(size_t)r * C + c] * w[((size_t)e * OC + o) * C + c];
                ref[(size_t)r * OC + o] = acc;
            }
    for (size_t i = 0; i < (size_t)R * C; i++) rdx[i] = init_dx[i];
    for (size_t i = 0; i < (size_t)E * OC * C; i++) rdw[i] = init_dw[i];
    for (int e = 0; e < E; e++)
        for (int r = offs[e]; r < offs[e + 1]; r++)
            for (int o = 0; o < OC; o++) {
                const double g = dy[(size_t)r * OC + o];
                for (int c = 0; c < C; c++) {
                    rdx[(size_t)r * C + c] += g * w[((size_t)e * OC + o) * C + c];
                    rdw[((size_t)e * OC + o) * C + c] += g * x[(size_t)r * C + c];
                }
            }
    float *out[2], *dx[2], *dw[2];
    const char *names[2] = {"default", "grouped"};
    for (int k = 0; k < 2; k++) {
        const ops_impl *impl = ops_find(OPS_GROUPED_MM, names[k]);
        out[k] = zeros((size_t)R * OC);
        dx[k] = zeros((size_t)R * C);
        dw[k] = zeros((size_t)E * OC * C);
        memcpy(dx[k], init_dx, sizeof(float) * (size_t)R * C);
        memcpy(dw[k], init_dw, sizeof(float) * (size_t)E * OC * C);
        if (!impl) {
            check_true("grouped_mm implementation registered", 0, names[k]);
            continue;
        }
        ((ops_grouped_mm_fwd_fn)impl->fwd)(out[k], x, w, offs, E, C, OC);
        ((ops_grouped_mm_bwd_fn)impl->bwd)(dx[k], dw[k], dy, x, w, offs, E, C, OC, 1, 1);
        char what[96];
        snprintf(what, sizeof what, "grouped_mm/%s forward vs fp64 (groups 0,300,1,0,37,513)",
                 names[k]);
        check(E_GMM, what, rel_err_d(out[k], ref, (size_t)R * OC), 1e-5);
        snprintf(what, sizeof what, "grouped_mm/%s d(input) += vs fp64", names[k]);
        check(E_GMM, what, rel_err_d(dx[k], rdx, (size_t)R * C), 1e-5);
        snprintf(what, sizeof what, "grouped_mm/%s d(weight) += vs fp64", names[k]);
        check(E_GMM, what, rel_err_d(dw[k], rdw, (size_t)E * OC * C), 1e-5);
    }
    check(E_GMM, "grouped_mm grouped vs default: forward",
          rel_err_f(out[1], out[0], (size_t)R * OC), 1e-6);
    check(E_GMM, "grouped_mm grouped vs default: d(weight) of the empty expert untouched",
          rel_err_f(dw[1] + (size_t)3 * OC * C, init_dw + (size_t)3 * OC * C, (size_t)OC * C), 0);
    /* inputs without features (C 0): nothing to write, and no tile of width 0 (it divided by
     * zero); the outputs of a reduction over nothing written as zeros */
    for (int k = 0; k < 2; k++) {
        const ops_impl *impl = ops_find(OPS_GROUPED_MM, names[k]);
        if (!impl) continue;
        out[k][0] = 1.0f;
        ((ops_grouped_mm_fwd_fn)impl->fwd)(out[k], x, w, offs, E, 0, OC);
        ((ops_grouped_mm_bwd_fn)impl->bwd)(dx[k], dw[k], dy, x, w, offs, E, 0, OC, 0, 0);
        check_true("grouped_mm with C 0: the forward's sums over nothing are 0", out[k][0] == 0.0f,
                   names[k]);
    }
    for (int k = 0; k < 2; k++) {
        base_free(out[k]);
        base_free(dx[k]);
        base_free(dw[k]);
    }
    base_free(x);
    base_free(w);
    base_free(dy);
    base_free(ref);
    base_free(rdx);
    base_free(rdw);
    base_free((void *)init_dx);
    base_free((void *)init_dw);
}

static int dummy_check_fail(const ops_ctx *ctx, base_err *err) {
    if (ctx->seq_len % 64 != 0)
        return base_fail(err, "seq_len %% 64 == 0 (seq_len = %d)", ctx->seq_len);
    return 0;
}

static int dummy_check_ok(const ops_ctx *ctx, base_err *err) {
    return 0;
}

static void dummy_attn_fwd(float *out, float *lse, const float *q, const float *k, const float *v,
                           int B, int T, int H, int G, int hd) {}
static void dummy_attn_bwd(float *dq, float *dk, float *dv, const float *dout, const float *out,
                           const float *lse, const float *q, const float *k, const float *v, int B,
                           int T, int H, int G, int hd, int dx_acc) {}

static void test_registry(void) {
    ops_ctx ctx = {.batch = 2,
                   .seq_len = 100,
                   .dim = 64,
                   .n_heads = 4,
                   .n_kv_heads = 2,
                   .head_dim = 16,
                   .ffn_dim = 128,
                   .vocab = 256};
    base_err err;
    ops_table t;
    ops_register_builtin();
    const ops_impl *list[128];
    const int n_first = ops_list(list, 128);
    ops_register_builtin(); /* idempotent */
    int n = ops_list(list, 128);
    char buf[256];
    int n_default = 0, n_ref = 0, n_bf16 = 0, n_dup = 0;
    for (int i = 0; i < n; i++) {
        n_default += !strcmp(list[i]->name, "default");
        n_ref += !strcmp(list[i]->name, "reference");
        n_bf16 += list[i]->prec == OPS_PREC_BF16 && !strcmp(list[i]->name, "bf16");
        for (int j = 0; j < i; j++) /* one entry per (op, name): what an override names */
            n_dup += list[j]->op == list[i]->op && !strcmp(list[j]->name, list[i]->name);
    }
    snprintf(buf, sizeof buf,
             "%d implementations (%d after the first call), %d defaults, %d "
             "references, %d bf16, %d duplicates",
             n, n_first, n_default, n_ref, n_bf16, n_dup);
    /* counted from the registry, not a number to raise with each new variant: a second call
     * adds nothing, every op has one default and a reference, the five bf16 GEMM ops and swiglu
     * their bf16 implementation */
    check_true("registry: builtins registered once (one default per op, plus references)",
               n == n_first && n_dup == 0 && n_default == OPS_COUNT && n_ref == OPS_COUNT &&
                   n_bf16 == 6,
               buf);
    { /* a bf16 model's defaults: the bf16 implementations where there is one, fp32 elsewhere */
        ops_ctx bc = ctx;
        bc.prec = OPS_PREC_BF16;
        ops_table tb;
        const int ok = ops_resolve(&tb, "layers.0", &bc, NULL, 0, &err) == 0;
        snprintf(buf, sizeof buf, "matmul %s, attention %s, lmhead_ce %s, rmsnorm %s, swiglu %s",
                 ok ? tb.impl[OPS_MATMUL]->name : "?", ok ? tb.impl[OPS_ATTENTION]->name : "?",
                 ok ? tb.impl[OPS_LMHEAD_CE]->name : "?", ok ? tb.impl[OPS_RMSNORM]->name : "?",
                 ok ? tb.impl[OPS_SWIGLU]->name : "?");
        check_true("registry: bf16 precision resolves the bf16 GEMM ops and swiglu, fp32 norms",
                   ok &&
                       !strcmp(buf, "matmul bf16, attention bf16, lmhead_ce bf16, rmsnorm default, "
                                    "swiglu bf16"),
                   buf);
        if (ok) ops_release(&tb);
    }

    int rc = ops_resolve(&t, "layers.0", &ctx, NULL, 0, &err);
    int ok = rc == 0;
    for (int k = 0; ok && k < OPS_COUNT; k++) {
        ok = t.impl[k] == ops_find((ops_kind)k, "default") &&
             strcmp(t.impl[k]->name, "default") == 0;
    }
    ok = ok && t.embedding_fwd == ops_cpu_embedding_fwd && t.embedding_bwd == ops_cpu_embedding_bwd;
    ok = ok && t.rmsnorm_fwd == ops_cpu_rmsnorm_fwd && t.rmsnorm_bwd == ops_cpu_rmsnorm_bwd;
    ok = ok && t.add_rmsnorm_fwd == ops_cpu_add_rmsnorm_fwd &&
         t.add_rmsnorm_bwd == ops_cpu_rmsnorm_bwd;
    ok = ok && t.matmul_fwd == ops_cpu_matmul_fwd && t.matmul_bwd == ops_cpu_matmul_bwd;
    ok = ok && t.rope_fwd == ops_cpu_rope_fwd && t.rope_bwd == ops_cpu_rope_bwd;
    ok = ok && t.attention_fwd == ops_cpu_attention_fwd && t.attention_bwd == ops_cpu_attention_bwd;
    ok = ok && t.swiglu_fwd == ops_cpu_swiglu_fwd && t.swiglu_bwd == ops_cpu_swiglu_bwd;
    ok = ok && t.lmhead_ce == ops_cpu_lmhead_ce && t.adamw == ops_cpu_adamw;
    check_true("registry: resolve without overrides gives the CPU defaults", ok,
               rc ? err.msg : NULL);
    check_true("registry: op names",
               strcmp(ops_kind_name(OPS_LMHEAD_CE), "lmhead_ce") == 0 &&
                   strcmp(ops_kind_name(OPS_ATTENTION), "attention") == 0,
               NULL);

    ops_override o1 = {"attention", "nope"};
    err.msg[0] = 0;
    rc = ops_resolve(&t, "layers.0", &ctx, &o1, 1, &err);
    check_true("registry: override by op name to unknown impl fails",
               rc != 0 && strstr(err.msg, "nope") && strstr(err.msg, "attention") &&
                   strstr(err.msg, "default"),
               err.msg);
    ops_override o2 = {"layers.*.attention", "nope"};
    err.msg[0] = 0;
    rc = ops_resolve(&t, "layers.3", &ctx, &o2, 1, &err);
    check_true("registry: override by glob to unknown impl fails",
               rc != 0 && strstr(err.msg, "layers.*.attention") && strstr(err.msg, "nope"),
               err.msg);
    rc = ops_resolve(&t, "head", &ctx, &o2, 1, &err);
    check_true("registry: glob 'layers.*.attention' does not apply to 'head'", rc == 0,
               rc ? err.msg : NULL);
    ops_override o3 = {"atention", "default"};
    rc = ops_resolve(&t, "layers.0", &ctx, &o3, 1, &err);
    check_true("registry: plain pattern that is no op name fails", rc != 0, err.msg);

    ops_impl bad = {OPS_ATTENTION,
                    "dummy_bad",
                    "seq_len % 64 == 0",
                    dummy_check_fail,
                    (ops_fn)dummy_attn_fwd,
                    (ops_fn)dummy_attn_bwd,
                    OPS_PREC_F32};
    rc = ops_register(&bad, &err);
    check_true("registry: register dummy impl", rc == 0, rc ? err.msg : NULL);
    rc = ops_register(&bad, &err);
    check_true("registry: duplicate registration fails", rc != 0, err.msg);
    check_true("registry: first registered stays the default",
               ops_resolve(&t, "layers.0", &ctx, NULL, 0, &err) == 0 &&
                   strcmp(t.impl[OPS_ATTENTION]->name, "default") == 0,
               NULL);
    ops_override o4 = {"layers.*.attention", "dummy_bad"};
    err.msg[0] = 0;
    rc = ops_resolve(&t, "layers.2", &ctx, &o4, 1, &err);
    check_true("registry: failing check names op/impl, layer and rule",
               rc != 0 &&
                   strstr(err.msg, "kernel attention/dummy_bad at layers.2: seq_len % 64 == 0"),
               err.msg);

    ops_impl good = {
        OPS_ATTENTION,          "dummy_ok",  "", dummy_check_ok, (ops_fn)dummy_attn_fwd,
        (ops_fn)dummy_attn_bwd, OPS_PREC_F32};
    rc = ops_register(&good, &err);
    ops_override o5[2] = {{"attention", "dummy_ok"}, {"layers.1.attention", "default"}};
    rc = ops_resolve(&t, "layers.2", &ctx, o5, 2, &err);
    ok = rc == 0 && t.attention_fwd == dummy_attn_fwd && t.attention_bwd == dummy_attn_bwd &&
         t.rmsnorm_fwd == ops_cpu_rmsnorm_fwd;
    check_true("registry: override selects a registered impl", ok, rc ? err.msg : NULL);
    rc = ops_resolve(&t, "layers.1", &ctx, o5, 2, &err);
    check_true("registry: later override wins (layers.1 back to default)",
               rc == 0 && t.attention_fwd == ops_cpu_attention_fwd, rc ? err.msg : NULL);
    ops_ctx odd = ctx;
    odd.head_dim = 15;
    rc = ops_resolve(&t, "layers.0", &odd, NULL, 0, &err);
    check_true("registry: default rope rejects odd head_dim",
               rc != 0 && strstr(err.msg, "kernel rope/default at layers.0"), err.msg);
}

/* ---- determinism across thread counts -------------------------------------------- */

static uint64_t hash_f(const float *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    const unsigned char *b = (const unsigned char *)p;
    for (size_t i = 0; i < n * sizeof(float); i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* The ops whose reductions titan orders itself (no BLAS call inside). */
static uint64_t run_all_ops(void) {
    enum { N = 300, D = 200, V = 97, F = 130 };
    uint64_t h = 0;
    int32_t tok[N];
    for (int i = 0; i < N; i++) tok[i] = (int32_t)(base_rng_u64(7, 1, (uint64_t)i) % V);
    float *x = randn(N * D, 20, 1, 0), *dy = randn(N * D, 21, 1, 0), *w = randn(D, 22, 0.2f, 1);
    float *out = zeros(N * D), *rstd = zeros(N), *dx = zeros(N * D), *dw = zeros(V * D);
    ops_cpu_embedding_bwd(dw, dy, tok, N, D);
    h = h * 31 + hash_f(dw, V * D);
    ops_cpu_rmsnorm_fwd(out, rstd, x, w, N, D, 1e-6f);
    memset(dw, 0, sizeof(float) * D);
    ops_cpu_rmsnorm_bwd(dx, dw, dy, x, w, rstd, N, D, 1, 1);
    h = h * 31 + hash_f(out, N * D) + hash_f(dx, N * D) * 3 + hash_f(dw, D) * 5;
    float *g = randn(N * F, 23, 2, 0), *u = randn(N * F, 24, 1, 0), *dyf = randn(N * F, 25, 1, 0);
    float *o2 = zeros(N * F), *dg = zeros(N * F), *du = zeros(N * F);
    ops_cpu_swiglu_fwd(o2, g, u, N, F);
    ops_cpu_swiglu_bwd(dg, du, dyf, g, u, N, F, 1);
    h = h * 31 + hash_f(o2, N * F) + hash_f(dg, N * F) * 3 + hash_f(du, N * F) * 5;
    float *cs = zeros(10 * 20), *sn = zeros(10 * 20);
    ops_rope_table(cs, sn, 10, 40, 1e4);
    ops_cpu_rope_fwd(out, x, cs, sn, 3, 10, 5, 40); /* 3*10*5*40 == N*D */
    ops_cpu_rope_bwd(dx, dy, cs, sn, 3, 10, 5, 40);
    h = h * 31 + hash_f(out, N * D) + hash_f(dx, N * D) * 3;
    float *m = zeros(N * D), *v = zeros(N * D);
    for (int t = 1; t <= 2; t++)
        ops_cpu_adamw(x, m, v, dy, 1.0f, N * D, 1e-3, 0.9, 0.95, 1e-8, 0.1, 0.0, 0, t);
    h = h * 31 + hash_f(x, N * D) + hash_f(m, N * D) * 3 + hash_f(v, N * D) * 5;
    base_free(x), base_free(dy), base_free(w), base_free(out), base_free(rstd), base_free(dx);
    base_free(dw), base_free(g), base_free(u), base_free(dyf), base_free(o2), base_free(dg);
    base_free(du), base_free(cs), base_free(sn), base_free(m), base_free(v);
    return h;
}

/* The fused lm_head + CE: its row passes are thread-count independent by construction, but
 * its three GEMMs are the BLAS library's. out[NC*DC + VC*DC + 1]: dx, dw, loss. */
enum { CE_NC = 70, CE_DC = 32, CE_VC = 1500, CE_OUT = CE_NC * CE_DC + CE_VC * CE_DC + 1 };
static void run_lmhead_ce(float *out) {
    float *xc = randn(CE_NC * CE_DC, 26, 1, 0), *wc = randn(CE_VC * CE_DC, 27, 1, 0);
    float *scr = zeros(16 * CE_VC);
    memset(out, 0, sizeof(float) * CE_OUT);
    int32_t tc[CE_NC];
    for (int i = 0; i < CE_NC; i++) tc[i] = (int32_t)(base_rng_u64(7, 2, (uint64_t)i) % CE_VC);
    tc[5] = OPS_IGNORE_INDEX;
    out[CE_OUT - 1] = (float)ops_cpu_lmhead_ce(out, out + CE_NC * CE_DC, xc, wc, tc, CE_NC, CE_DC,
                                               CE_VC, 1.0f / 69, scr, 16, NULL, NULL, 1);
    base_free(xc), base_free(wc), base_free(scr);
}

/* Whether this machine's sgemm gives the same bits at 1, 2 and 3 threads for the shapes the
 * CE check uses. OpenBLAS's Haswell/Zen kernels and oneDNN's AVX2 sgemm do not (measured on
 * an AVX2-only AMD EPYC: edge kernels and K splits move with the partition); the AVX-512
 * ones do. */
static int sgemm_thread_invariant(void) {
    const int shapes[3][5] = {{0, 1, CE_NC, CE_VC, CE_DC}, /* ta, tb, M, N, K */
                              {0, 0, CE_NC, CE_DC, CE_VC},
                              {1, 0, CE_VC, CE_DC, CE_NC}};
    int same = 1;
    for (int s = 0; s < 3; s++) {
        const int ta = shapes[s][0], tb = shapes[s][1], M = shapes[s][2], N = shapes[s][3],
                  K = shapes[s][4];
        float *a = randn(M * K, 28, 1, 0), *b = randn(K * N, 29, 1, 0), *c = zeros(M * N);
        uint64_t h[3];
        for (int t = 1; t <= 3; t++) {
            omp_set_num_threads(t);
            ops_cpu_sgemm(ta, tb, M, N, K, 1.0f, a, ta ? M : K, b, tb ? K : N, 0.0f, c, N);
            h[t - 1] = hash_f(c, (size_t)M * N);
        }
        same &= h[0] == h[1] && h[0] == h[2];
        base_free(a), base_free(b), base_free(c);
    }
    return same;
}

/* rmsnorm_bwd's dw where the order of the row sum decides the result: rows of +-2^60 and of 1
 * (x = 1, rstd = 1, so each term is dout itself; the 2^60s cancel in pairs), so that how many
 * 1s survive depends on where the partial sums start (2^60 + 1 = 2^60 in double): 99 with 128
 * blocks, 297 with 3, 0 with 6. Fixed row blocks
 * give the same bits on any thread count; blocks that follow the thread count do not. */
static uint64_t rmsnorm_dw_order(void) {
    enum { N = 600, C = 16 };
    float *x = zeros((size_t)N * C), *dy = zeros((size_t)N * C), *w = zeros(C), *r = zeros(N),
          *dw = zeros(C);
    for (int n = 0; n < N; n++) {
        r[n] = 1.0f;
        for (int c = 0; c < C; c++) {
            x[(size_t)n * C + c] = 1.0f;
            const float big = ldexpf(1.0f, 60 - c); /* another scale per column */
            dy[(size_t)n * C + c] = n % 100 == 0 ? ((n / 100) % 2 ? -big : big) : 1.0f;
        }
    }
    for (int c = 0; c < C; c++) w[c] = 1.0f;
    ops_cpu_rmsnorm_bwd(NULL, dw, dy, x, w, r, N, C, 1, 1);
    const uint64_t h = hash_f(dw, C);
    base_free(x), base_free(dy), base_free(w), base_free(r), base_free(dw);
    return h;
}

static void test_determinism(void) {
    int saved = omp_get_max_threads();
    {
        uint64_t h[4];
        for (int t = 1; t <= 4; t++) {
            omp_set_num_threads(t);
            h[t - 1] = rmsnorm_dw_order();
        }
        omp_set_num_threads(saved);
        check_true("rmsnorm_bwd dw with order-sensitive sums: bitwise on 1, 2, 3, 4 threads",
                   h[0] == h[1] && h[0] == h[2] && h[0] == h[3], NULL);
    }
    omp_set_num_threads(1);
    uint64_t h1 = run_all_ops();
    omp_set_num_threads(2);
    uint64_t h2 = run_all_ops();
    omp_set_num_threads(3);
    uint64_t h3 = run_all_ops();
    omp_set_num_threads(saved);
    char buf[128];
    snprintf(buf, sizeof buf, "%016llx %016llx %016llx", (unsigned long long)h1,
             (unsigned long long)h2, (unsigned long long)h3);
    check_true("all ops without BLAS bitwise identical with 1, 2 and 3 threads",
               h1 == h2 && h1 == h3, buf);
    /* lmhead_ce: bitwise where the BLAS is, else within fp32 rounding of a K-split */
    const int blas_same = sgemm_thread_invariant();
    float *ce[3];
    for (int t = 1; t <= 3; t++) {
        omp_set_num_threads(t);
        run_lmhead_ce(ce[t - 1] = zeros(CE_OUT));
    }
    omp_set_num_threads(saved);
    float *again = zeros(CE_OUT);
    omp_set_num_threads(2);
    run_lmhead_ce(again);
    omp_set_num_threads(saved);
    check_true("lmhead_ce rerun at the same thread count: bitwise",
               !memcmp(ce[1], again, sizeof(float) * CE_OUT), NULL);
    double d = 0; /* dx, dw and the loss, each relative to its own scale */
    const size_t part[4] = {0, CE_NC * CE_DC, CE_NC * CE_DC + CE_VC * CE_DC, CE_OUT};
    for (int t = 1; t < 3; t++)
        for (int p = 0; p < 3; p++)
            d = max_nan(d, rel_err_f(ce[t] + part[p], ce[0] + part[p], part[p + 1] - part[p]));
    snprintf(buf, sizeof buf, "lmhead_ce with 1, 2 and 3 threads (%s)",
             blas_same ? "sgemm thread-invariant here: bitwise" : "sgemm varies with threads here");
    check(-1, buf, d, blas_same ? 0.0 : 1e-5);
    for (int t = 0; t < 3; t++) base_free(ce[t]);
    base_free(again);
}

/* OPS_BWD_READS_WEIGHTS against the signatures in oplist.h: an op is in the set iff what runs
 * in its backward (an FB op's bwd, an F op's one function) takes a weight parameter (`*w` or
 * `*wte`). Adding a weight to a backward (embedding's, which FSDP no longer gathers for)
 * without adding the op to the set fails here. */
static int takes_weight(const char *params) {
    return strstr(params, "*w,") || strstr(params, "*w)") || strstr(params, "*wte,") ||
           strstr(params, "*wte)");
}

static void test_bwd_weights(void) {
#define BWD_SIG_FB(K, name, sub, plg, fp, fa, bp, ba) {OPS_##K, #name, #bp},
#define BWD_SIG_F(K, name, sub, plg, ret, p, a) {OPS_##K, #name, #p},
    static const struct {
        ops_kind k;
        const char *name, *params;
    } sig[] = {OPS_LIST(BWD_SIG_FB, BWD_SIG_F)};
#undef BWD_SIG_FB
#undef BWD_SIG_F
    int n_in = 0;
    for (size_t i = 0; i < sizeof sig / sizeof sig[0]; i++) {
        const int in = (OPS_BWD_READS_WEIGHTS >> sig[i].k) & 1u;
        char what[96];
        snprintf(what, sizeof what, "%s: in OPS_BWD_READS_WEIGHTS (%d) iff backward takes w",
                 sig[i].name, in);
        const int ok = in == !!takes_weight(sig[i].params);
        check_true(what, ok, ok ? NULL : sig[i].params);
        n_in += in;
    }
    check_true("embedding's backward takes no weight (FSDP skips its gather)",
               !((OPS_BWD_READS_WEIGHTS >> OPS_EMBEDDING) & 1u) && n_in == 5, NULL);
}

/* An operand held for several bf16 GEMMs (ops_bf16_hold / ops_bf16_hold_copy: the output
 * gradient of matmul and grouped_mm backward, lmhead_ce's logit gradient) must give the bits
 * the per-product conversion gives: each backward called with both outputs (held) against the
 * same call once per output (nothing held), on fp32 inputs that are not bf16 values. Holds on
 * any engine (the same products in the same calls). */
static int same_bits(const float *a, const float *b, size_t n) {
    return !memcmp(a, b, n * sizeof(float));
}

/* The bf16 swiglu (swiglu_bf16.c) on gate and up held from their bits and with its outputs
 * asked for in bf16 (ops_bf16_emit_begin): each output's held copy must be bitwise the default's
 * fp32 result on the same (rounded) inputs, rounded to bf16 -- what the GEMMs' conversion of
 * that result gave before. Where the engine holds bits (onednn), the fp32 inputs are NaN while
 * held (the op must read the bits) and the fp32 outputs must stay NaN (written as bits only);
 * on the emulated engine the outputs are rounded in place. An output added to (dx_acc 1) stays
 * fp32 and is converted after. n = 3700: three spans of 1024 and a partial one. */
static void mirror_values(float *dst, const float *x, size_t n) {
    const void *m = ops_cpu_bf16_mirror_of(x, n);
    if (!m) {
        for (size_t i = 0; i < n; i++) dst[i] = -1.0f; /* not held: fails the comparison */
    } else if (ops_bf16_holds_bits()) {
        ops_bf16_to_f32(dst, m, n);
    } else {
        memcpy(dst, m, n * sizeof(float));
    }
}

/* whether x's held copy is want bitwise (got: scratch [n]) */
static int held_is(float *got, const float *x, const float *want, size_t n) {
    mirror_values(got, x, n);
    return same_bits(got, want, n);
}

/* The loop itself (ops_cpu_swiglu16_*, engine-independent: the mirror tests below reach its bf16
 * paths only where the engine holds bits) in its four instantiations, bf16 or fp32 inputs by
 * bf16 or fp32 outputs: each output bitwise the fp32 default's on the same values, rounded where
 * stored as bf16; a bf16-output run leaves every fp32 output element as it was (NaN). */
static void test_swiglu16_loops(void) {
    enum { N = 37, F = 100 };
    const size_t n = (size_t)N * F;
    float *gate = randn(n, 91, 2, 0), *up = randn(n, 92, 1, 0), *dy = randn(n, 93, 1, 0),
          *o_ref = zeros(n), *dg_ref = zeros(n), *du_ref = zeros(n), *o = zeros(n), *dg = zeros(n),
          *du = zeros(n), *v = zeros(n);
    ops_cpu_bf16_round(gate, gate, n), ops_cpu_bf16_round(up, up, n);
    uint16_t *g16 = malloc(n * 2), *u16 = malloc(n * 2), *o16 = malloc(n * 2),
             *dg16 = malloc(n * 2), *du16 = malloc(n * 2);
    ops_bf16_from_f32(g16, gate, n), ops_bf16_from_f32(u16, up, n);
    ops_cpu_swiglu_fwd(o_ref, gate, up, N, F);
    ops_cpu_swiglu_bwd(dg_ref, du_ref, dy, gate, up, N, F, 0);
    int bad = 0;
    for (int in16 = 0; in16 < 2; in16++)
        for (int out16 = 0; out16 < 2; out16++) {
            for (size_t i = 0; i < n; i++) o[i] = dg[i] = du[i] = NAN;
            ops_cpu_swiglu16_fwd(o, out16 ? o16 : NULL, gate, in16 ? g16 : NULL, up,
                                 in16 ? u16 : NULL, N, F);
            ops_cpu_swiglu16_bwd(dg, out16 ? dg16 : NULL, du, out16 ? du16 : NULL, dy, gate,
                                 in16 ? g16 : NULL, up, in16 ? u16 : NULL, N, F, 0);
            const float *ref[3] = {o_ref, dg_ref, du_ref}, *got32[3] = {o, dg, du};
            const uint16_t *got16[3] = {o16, dg16, du16};
            for (int k = 0; k < 3; k++) {
                if (out16) {
                    ops_bf16_to_f32(v, got16[k], n);
                    float *want = zeros(n);
                    ops_cpu_bf16_round(want, ref[k], n);
                    bad += !same_bits(v, want, n);
                    for (size_t i = 0; i < n; i++) bad += !isnan(got32[k][i]);
                    base_free(want);
                } else {
                    bad += !same_bits(got32[k], ref[k], n);
                }
            }
        }
    check_true("swiglu16 loops: bf16 / fp32 inputs x bf16 / fp32 outputs = the default (bitwise)",
               bad == 0, NULL);
    free(g16), free(u16), free(o16), free(dg16), free(du16);
    base_free(gate), base_free(up), base_free(dy), base_free(o_ref), base_free(dg_ref),
        base_free(du_ref), base_free(o), base_free(dg), base_free(du), base_free(v);
}

static void test_swiglu_bf16_mirrors(void) {
    enum { N = 37, F = 100 };
    const size_t n = (size_t)N * F;
    const int bits = ops_bf16_holds_bits();
    float *gate = randn(n, 71, 2, 0), *up = randn(n, 72, 1, 0), *dy = randn(n, 73, 1, 0);
    ops_cpu_bf16_round(gate, gate, n), ops_cpu_bf16_round(up, up, n);
    uint16_t *g16 = malloc(n * 2), *u16 = malloc(n * 2);
    ops_bf16_from_f32(g16, gate, n), ops_bf16_from_f32(u16, up, n);
    float *o_ref = zeros(n), *dg_ref = zeros(n), *du_ref = zeros(n), *o = zeros(n), *dg = zeros(n),
          *du = zeros(n), *got = zeros(n), *gate_f = zeros(n), *up_f = zeros(n);
    memcpy(gate_f, gate, n * 4), memcpy(up_f, up, n * 4);
    ops_cpu_swiglu_fwd(o_ref, gate, up, N, F);
    ops_cpu_swiglu_bwd(dg_ref, du_ref, dy, gate, up, N, F, 0);
    ops_cpu_bf16_round(o_ref, o_ref, n), ops_cpu_bf16_round(dg_ref, dg_ref, n),
        ops_cpu_bf16_round(du_ref, du_ref, n);

    const int hg = !ops_bf16_hold_rounded(gate, n, g16), hu = !ops_bf16_hold_rounded(up, n, u16);
    if (bits)
        for (size_t i = 0; i < n; i++) gate[i] = up[i] = NAN;
    for (size_t i = 0; i < n; i++) o[i] = dg[i] = du[i] = NAN;
    ops_bf16_emit_begin(o, n);
    ops_cpu_swiglu_bf16_fwd(o, gate, up, N, F);
    const int ho = ops_bf16_emit_end(o);
    int fwd_ok = ho && held_is(got, o, o_ref, n) && (bits ? isnan(o[0]) && isnan(o[n - 1]) : 1);
    const int again = ops_bf16_hold_copy(o, n); /* held already: -1, nothing to release */
    if (ho) ops_bf16_release(o);
    check_true("bf16 swiglu fwd: held bits in, output emitted as bf16 = default rounded (bitwise)",
               fwd_ok && again == -1 && !ops_cpu_bf16_mirror_of(o, n), NULL);

    ops_bf16_emit_begin(dg, n), ops_bf16_emit_begin(du, n);
    ops_cpu_swiglu_bf16_bwd(dg, du, dy, gate, up, N, F, 0);
    const int hdg = ops_bf16_emit_end(dg), hdu = ops_bf16_emit_end(du);
    int bwd_ok = hdg && hdu && (bits ? isnan(dg[0]) && isnan(du[n - 1]) : 1);
    bwd_ok = bwd_ok && held_is(got, dg, dg_ref, n);
    bwd_ok = bwd_ok && held_is(got, du, du_ref, n);
    if (hdg) ops_bf16_release(dg);
    if (hdu) ops_bf16_release(du);
    check_true("bf16 swiglu bwd: dgate, dup emitted as bf16 = default rounded (bitwise)", bwd_ok,
               NULL);

    /* dx_acc 1: the outputs are added to in fp32, then converted at the end */
    float *acc_ref_g = randn(n, 74, 1, 0), *acc_ref_u = randn(n, 75, 1, 0);
    memcpy(dg, acc_ref_g, n * 4), memcpy(du, acc_ref_u, n * 4);
    ops_cpu_swiglu_bwd(acc_ref_g, acc_ref_u, dy, gate_f, up_f, N, F, 1);
    ops_bf16_emit_begin(dg, n), ops_bf16_emit_begin(du, n);
    ops_cpu_swiglu_bf16_bwd(dg, du, dy, gate, up, N, F, 1);
    const int ag = ops_bf16_emit_end(dg), au = ops_bf16_emit_end(du);
    int acc_ok = ag && au;
    ops_cpu_bf16_round(acc_ref_g, acc_ref_g, n), ops_cpu_bf16_round(acc_ref_u, acc_ref_u, n);
    acc_ok = acc_ok && held_is(got, dg, acc_ref_g, n);
    acc_ok = acc_ok && held_is(got, du, acc_ref_u, n);
    if (ag) ops_bf16_release(dg);
    if (au) ops_bf16_release(du);
    if (hg) ops_bf16_release(gate);
    if (hu) ops_bf16_release(up);
    check_true("bf16 swiglu bwd, dx_acc 1: added in fp32, held after (bitwise)", acc_ok && hg && hu,
               NULL);

    /* half-held: gate's bits alone (up not held) and dgate alone asked for in bf16. The loop
     * reads and writes both alike, so it must read both fp32 inputs and write both fp32
     * outputs, dgate converted after: each output still the default's */
    memcpy(gate, gate_f, n * 4), memcpy(up, up_f, n * 4);
    ops_cpu_swiglu_bwd(dg_ref, du_ref, dy, gate, up, N, F, 0); /* fp32, unrounded */
    const int h1 = !ops_bf16_hold_rounded(gate, n, g16);
    for (size_t i = 0; i < n; i++) dg[i] = du[i] = NAN;
    ops_bf16_emit_begin(dg, n);
    ops_cpu_swiglu_bf16_bwd(dg, du, dy, gate, up, N, F, 0);
    const int h2 = ops_bf16_emit_end(dg);
    int half_ok = h1 && h2 && same_bits(du, du_ref, n);
    ops_cpu_bf16_round(dg_ref, dg_ref, n);
    half_ok = half_ok && held_is(got, dg, dg_ref, n);
    if (h2) ops_bf16_release(dg);
    if (h1) ops_bf16_release(gate);
    check_true("bf16 swiglu bwd, one input held and one output asked for: both alike (bitwise)",
               half_ok, NULL);
    free(g16), free(u16);
    base_free(gate), base_free(up), base_free(dy), base_free(o_ref), base_free(dg_ref),
        base_free(du_ref), base_free(o), base_free(dg), base_free(du), base_free(got),
        base_free(gate_f), base_free(up_f), base_free(acc_ref_g), base_free(acc_ref_u);
}

/* The norms with their output asked for in bf16 (a dense bf16 block's attention and FFN norms,
 * model_block_forward / _backward): the held copy bitwise the fp32 output rounded, rstd and
 * add_rmsnorm's sum h bitwise the plain call's; where the engine holds bits the fp32 output stays
 * NaN (only the bits written), on the emulated engine it is rounded in place. C 100 (a partial
 * vector) and 1024 (the 0.6B dim). */
static void test_rmsnorm_emit(int N, int C) {
    const size_t n = (size_t)N * C;
    const int bits = ops_bf16_holds_bits();
    float *x = randn(n, 81, 1, 0), *y = randn(n, 82, 1, 0), *w = randn((size_t)C, 83, 1, 0),
          *ref = zeros(n), *out = zeros(n), *got = zeros(n), *h_ref = zeros(n), *h = zeros(n),
          *r_ref = zeros((size_t)N), *r = zeros((size_t)N);
    int ok = 1;
    for (int add = 0; add < 2; add++) {
        if (add)
            ops_cpu_add_rmsnorm_fwd(h_ref, ref, r_ref, x, y, w, N, C, 1e-6f);
        else
            ops_cpu_rmsnorm_fwd(ref, r_ref, x, w, N, C, 1e-6f);
        ops_cpu_bf16_round(ref, ref, n);
        for (size_t i = 0; i < n; i++) out[i] = NAN;
        ops_bf16_emit_begin(out, n);
        if (add)
            ops_cpu_add_rmsnorm_fwd(h, out, r, x, y, w, N, C, 1e-6f);
        else
            ops_cpu_rmsnorm_fwd(out, r, x, w, N, C, 1e-6f);
        const int held = ops_bf16_emit_end(out);
        ok = ok && held && held_is(got, out, ref, n) && same_bits(r, r_ref, (size_t)N) &&
             (!add || same_bits(h, h_ref, n)) && (bits ? isnan(out[0]) && isnan(out[n - 1]) : 1);
        if (held) ops_bf16_release(out);
    }
    char d[32];
    snprintf(d, sizeof d, "N %d C %d", N, C);
    check_true("rmsnorm, add_rmsnorm with the output asked for in bf16 = the output rounded "
               "(bitwise; the fp32 output unwritten where bits are held)",
               ok, d);
    base_free(x), base_free(y), base_free(w), base_free(ref), base_free(out), base_free(got),
        base_free(h_ref), base_free(h), base_free(r_ref), base_free(r);
}

/* ops_cpu_gemm16 on more distinct shapes than the oneDNN engine caches (1024): every product
 * exact (small integers: bf16 operands, products and sums exact in fp32), the first shapes
 * again after they were evicted, with and without accumulation. On the emulated engine this
 * checks the entry point; on onednn (bf16 units, or TITAN_BF16_ENGINE=onednn with the
 * reference oneDNN build) the cache's eviction and index rebuild too. */
static void test_gemm16_shapes(void) {
    enum { M = 3, K = 4, NMAX = 1100 };
    const size_t es = ops_bf16_mirror_bytes(1);
    float af[M * K], *bf = zeros((size_t)K * NMAX), *c = zeros((size_t)M * NMAX),
                     *want = zeros((size_t)M * NMAX);
    char *a16 = malloc(es * M * K), *b16 = malloc(es * K * NMAX);
    int bad = 0, calls = 0;
    for (int i = 0; i < M * K; i++) af[i] = (float)((i * 7 + 3) % 5 - 2);
    for (int i = 0; i < K * NMAX; i++) bf[i] = (float)((i * 5 + 1) % 7 - 3);
    ops_bf16_mirror_convert(a16, 0, af, M * K);
    for (int pass = 0; pass < 2; pass++)
        for (int N = pass ? 300 : NMAX; N >= 1; N -= pass ? 3 : 1) { /* pass 1: evicted ones */
            const int acc = N & 1;
            ops_bf16_mirror_convert(b16, 0, bf, (size_t)K * N); /* [K, N], ld N */
            for (int i = 0; i < M * N; i++) c[i] = want[i] = (float)(i % 3);
            for (int i = 0; i < M; i++)
                for (int j = 0; j < N; j++) {
                    float sum = acc ? want[i * N + j] : 0.0f;
                    for (int k = 0; k < K; k++) sum += af[i * K + k] * bf[k * N + j];
                    want[i * N + j] = sum;
                }
            ops_cpu_gemm16(0, 0, M, N, K, a16, K, b16, N, acc, c, N);
            bad += memcmp(c, want, sizeof(float) * M * N) != 0;
            calls++;
        }
    char buf[96];
    snprintf(buf, sizeof buf, "%d of %d products differ (engine %s)", bad, calls,
             ops_bf16_engine());
    check_true("gemm16: more shapes than the engine caches, each exact, evicted ones again", !bad,
               buf);
    free(a16), free(b16), base_free(bf), base_free(c), base_free(want);
}

/* grouped_mm/bf16 against sums in double of the same bf16-rounded operands, whatever runs it
 * (grouped_dpbf16.c's vdpbf16ps, its AMX tiles with TITAN_GROUPED_AMX=1, oneDNN, the emulated
 * engine): each output an fp32 sum of K exact products, held to K 2^-24 of the sum of their
 * magnitudes (plus, for dx += , one rounding of what it adds to). Shapes for the AMX path:
 * C 256, OC 96 (every product's K in 16-pair steps: tiles in all three, experts of 40 and 37
 * rows: 32 on tiles, the rest on vdpbf16ps, and one empty), then OC 112 (the forward's last 48
 * columns: 32 on tiles, 16 past them; dx's K of 56 pairs is not tiles'). */
/* sum over i < n of bf16(a[i as]) bf16(b[i bs]) in double, and *mag the sum of the terms'
 * magnitudes: an entry of a product of bf16-rounded operands, strides in elements */
static double dot16(const float *a, size_t as, const float *b, size_t bs, int n, double *mag) {
    double sum = 0, m = 0;
    for (int i = 0; i < n; i++) {
        const double p = (double)ops_cpu_bf16_value(ops_cpu_bf16_bits(a[i * as])) *
                         ops_cpu_bf16_value(ops_cpu_bf16_bits(b[i * bs]));
        sum += p, m += fabs(p);
    }
    *mag = m;
    return sum;
}

static void test_grouped_bf16_reference(void) {
    static const struct { int C, OC; } shp[] = {{256, 96}, {320, 112}};
    enum { E = 3, N = 77 };
    const int32_t offs[E + 1] = {0, 40, 40, N};
    for (size_t t = 0; t < sizeof shp / sizeof shp[0]; t++) {
        const int C = shp[t].C, OC = shp[t].OC;
        float *x = randn((size_t)N * C, 90 + t, 1, 0),
              *w = randn((size_t)E * OC * C, 92 + t, 0.5f, 0),
              *dy = randn((size_t)N * OC, 94 + t, 1, 0), *dx0 = randn((size_t)N * C, 96 + t, 1, 0);
        float *o = zeros((size_t)N * OC), *dx = zeros((size_t)N * C),
              *dw = zeros((size_t)E * OC * C);
        memcpy(dx, dx0, sizeof(float) * N * C);
        for (size_t i = 0; i < (size_t)E * OC * C; i++) dw[i] = NAN; /* dw_acc 0: never read */
        const long tiles0 = ops_cpu_amx_gemm_panels_calls();
        ops_cpu_grouped_mm_bf16_fwd(o, x, w, offs, E, C, OC);
        ops_cpu_grouped_mm_bf16_bwd(dx, dw, dy, x, w, offs, E, C, OC, 1, 0);
        const long tiles = ops_cpu_amx_gemm_panels_calls() - tiles0;
        long bad[3] = {0, 0, 0};
        for (int e = 0; e < E; e++) {
            const float *we = w + (size_t)e * OC * C;
            const int n = offs[e + 1] - offs[e];
            double mag, sum;
            for (int r = offs[e]; r < offs[e + 1]; r++) {
                for (int j = 0; j < OC; j++) { /* out[r, j] = x[r] . W_e[j] */
                    sum = dot16(x + (size_t)r * C, 1, we + (size_t)j * C, 1, C, &mag);
                    bad[0] += !(fabs(o[(size_t)r * OC + j] - sum) <= C * 0x1p-24 * mag);
                }
                for (int c = 0; c < C; c++) { /* dx[r, c] += dy[r] . W_e[:, c] */
                    sum = dot16(dy + (size_t)r * OC, 1, we + c, (size_t)C, OC, &mag);
                    const double d0 = dx0[(size_t)r * C + c];
                    bad[1] += !(fabs(dx[(size_t)r * C + c] - d0 - sum) <=
                                (OC + 1) * 0x1p-24 * (mag + fabs(d0 + sum)));
                }
            }
            for (int j = 0; j < OC; j++) /* dW_e[j, c] = sum over the expert's rows dy x */
                for (int c = 0; c < C; c++) {
                    sum = dot16(dy + (size_t)offs[e] * OC + j, (size_t)OC,
                                x + (size_t)offs[e] * C + c, (size_t)C, n, &mag);
                    const float got = dw[((size_t)e * OC + j) * C + c];
                    bad[2] += !(fabs(got - sum) <= n * 0x1p-24 * mag) ||
                              (mag == 0 && got != 0); /* the empty expert: zeros */
                }
        }
        char what[200];
        snprintf(what, sizeof what,
                 "grouped_mm/bf16 on %s vs double, C %d OC %d: out %ld, dx %ld, dW %ld wrong; %ld "
                 "products on tiles",
                 ops_bf16_grouped_mm(), C, OC, bad[0], bad[1], bad[2], tiles);
        /* tiles exactly where the header says so */
        const int on_tiles = strstr(ops_bf16_grouped_mm(), "AMX tiles") != NULL;
        check_true(what, !bad[0] && !bad[1] && !bad[2] && (on_tiles ? tiles > 0 : tiles == 0),
                   NULL);
        free(x), free(w), free(dy), free(dx0), free(o), free(dx), free(dw);
    }
}

static void test_bf16_held(void) {
    enum { N = 37, C = 48, OC = 40, E = 3, V = 61, CH = 16 };
    const int32_t offs[E + 1] = {0, 11, 11, N}; /* an empty group too */
    float *x = randn((size_t)N * C, 61, 1, 0), *w = randn((size_t)E * OC * C, 62, 0.5f, 0),
          *dy = randn((size_t)N * OC, 63, 1, 0);
    float *dx2 = zeros((size_t)N * C), *dw2 = zeros((size_t)E * OC * C),
          *dx1 = zeros((size_t)N * C), *dw1 = zeros((size_t)E * OC * C);
    ops_cpu_matmul_bf16_bwd(dx2, dw2, dy, x, w, N, C, OC, 1, 1);
    ops_cpu_matmul_bf16_bwd(dx1, NULL, dy, x, w, N, C, OC, 1, 1);
    ops_cpu_matmul_bf16_bwd(NULL, dw1, dy, x, w, N, C, OC, 1, 1);
    check_true("bf16 matmul_bwd: dY held for both products = converted per product (bitwise)",
               same_bits(dx2, dx1, (size_t)N * C) && same_bits(dw2, dw1, (size_t)OC * C), NULL);
    memset(dx1, 0, sizeof(float) * N * C), memset(dw1, 0, sizeof(float) * E * OC * C);
    memset(dx2, 0, sizeof(float) * N * C), memset(dw2, 0, sizeof(float) * E * OC * C);
    ops_cpu_grouped_mm_bf16_bwd(dx2, dw2, dy, x, w, offs, E, C, OC, 1, 1);
    ops_cpu_grouped_mm_bf16_bwd(dx1, NULL, dy, x, w, offs, E, C, OC, 1, 1);
    ops_cpu_grouped_mm_bf16_bwd(NULL, dw1, dy, x, w, offs, E, C, OC, 1, 1);
    check_true("bf16 grouped_mm_bwd: dY held for both products = converted per product",
               same_bits(dx2, dx1, (size_t)N * C) && same_bits(dw2, dw1, (size_t)E * OC * C), NULL);
    /* x held by the caller (ops.h's mirrors: the products read its copy) = converted per call,
     * the forward's and dW's reads of x alike */
    float *o1 = zeros((size_t)N * OC), *o2 = zeros((size_t)N * OC);
    ops_cpu_grouped_mm_bf16_fwd(o1, x, w, offs, E, C, OC);
    memset(dw1, 0, sizeof(float) * E * OC * C);
    const int hx = !ops_bf16_hold_copy(x, (size_t)N * C);
    ops_cpu_grouped_mm_bf16_fwd(o2, x, w, offs, E, C, OC);
    ops_cpu_grouped_mm_bf16_bwd(NULL, dw1, dy, x, w, offs, E, C, OC, 1, 0);
    if (hx) ops_bf16_release(x);
    check_true("bf16 grouped_mm: x held = converted per call (forward, dW; bitwise)",
               hx && same_bits(o1, o2, (size_t)N * OC) && same_bits(dw2, dw1, (size_t)E * OC * C),
               NULL);
    free(o1), free(o2);
    /* lmhead_ce: dx with dw (the logit gradient held, rounded in place by the emulated engine)
     * against dx alone (converted for its one product); chunk CH < N: several chunks */
    int32_t tg[N];
    for (int n = 0; n < N; n++) tg[n] = (n * 7) % V;
    float *wv = randn((size_t)V * C, 64, 0.5f, 0), *scratch = zeros((size_t)CH * V),
          *dwv = zeros((size_t)V * C);
    memset(dx1, 0, sizeof(float) * N * C), memset(dx2, 0, sizeof(float) * N * C);
    const double l2 =
        ops_cpu_lmhead_ce_bf16(dx2, dwv, x, wv, tg, N, C, V, 1.0f / N, scratch, CH, NULL, NULL, 1);
    const double l1 =
        ops_cpu_lmhead_ce_bf16(dx1, NULL, x, wv, tg, N, C, V, 1.0f / N, scratch, CH, NULL, NULL, 1);
    check_true("bf16 lmhead_ce: logit gradient held for dx and dw = converted for dx alone",
               l1 == l2 && same_bits(dx2, dx1, (size_t)N * C), NULL);
    base_free(x), base_free(w), base_free(dy), base_free(dx2), base_free(dw2), base_free(dx1),
        base_free(dw1), base_free(wv), base_free(scratch), base_free(dwv);
}

/* ops_zero: every element of x[0, n) zero and nothing outside it written, at lengths around
 * its serial threshold (262144) and around the per-thread pieces' 16-float rounding, on 1, 2, 3
 * and 7 threads (a piece may be empty or the last one longer). */
static void test_zero(void) {
    static const size_t lens[] = {0, 1, 17, 262144, 262145, 262159, 1000003};
    static const int threads[] = {1, 2, 3, 7};
    const size_t pad = 64, cap = 1000003 + 2 * pad;
    float *buf = malloc(cap * sizeof(float));
    if (!buf) exit(2);
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
        for (size_t ti = 0; ti < sizeof threads / sizeof threads[0]; ti++) {
            const size_t n = lens[li];
            for (size_t i = 0; i < n + 2 * pad; i++) buf[i] = 1.0f + (float)(i % 7);
            omp_set_num_threads(threads[ti]);
            ops_zero(buf + pad, n);
            size_t bad = 0;
            for (size_t i = 0; i < n + 2 * pad; i++) {
                const int inside = i >= pad && i < pad + n;
                bad += inside ? buf[i] != 0.0f : buf[i] != 1.0f + (float)(i % 7);
            }
            char what[96], detail[64];
            snprintf(what, sizeof what, "ops_zero n=%zu on %d threads", n, threads[ti]);
            snprintf(detail, sizeof detail, "%zu elements wrong", bad);
            check_true(what, bad == 0, detail);
        }
    omp_set_num_threads(2);
    free(buf);
}

/* grouped_mm/bf16's expert stacks kept in the kernel's own layout in a bf16 copy
 * (ops_bf16_mirror_layout_grouped; where grouped_dpbf16.c runs the experts): a copy [50 floats |
 * stack | 30 floats] converted in pieces of 37 elements (every piece boundary off the rows and
 * panels) must hold the pads row-major and the stack as the layout's formula says, bit for bit the
 * conversion's values; other readers must not see the range as row-major (mirror_of NULL); and
 * the forward and both backward products must be bitwise those of the same weights converted
 * per call. Shapes: OC under one 64-row panel, and OC = 70 (a second forward panel of 6 rows);
 * C two, three and five 64-column panels (320: a second dx task of 64 columns at c0 = 256); an
 * expert without rows; OC 96 and an expert of 37 rows, whose products all take AMX tiles where
 * TITAN_GROUPED_AMX=1 on AMX (its first 32 rows and 32s of columns; on emulated tiles in
 * make test-amx-emulated). Elsewhere the layout is refused (0) and the products are checked the
 * same way through the row-major copy. */
static void test_grouped_layout(void) {
    static const struct {
        int E, C, OC;
    } shp[] = {{3, 128, 40}, {2, 192, 70}, {3, 320, 40}, {2, 256, 96}};
    const ops_impl *impl = ops_find(OPS_GROUPED_MM, "bf16");
    check_true("grouped_mm/bf16 registered", impl != NULL, NULL);
    if (!impl || strcmp(ops_bf16_engine(), "onednn")) return; /* the copy is bf16 bits there */
    for (size_t t = 0; t < sizeof shp / sizeof shp[0]; t++) {
        const int E = shp[t].E, C = shp[t].C, OC = shp[t].OC, N = 37;
        const int32_t offs3[4] = {0, 11, 11, N}, offs2[3] = {0, 0, N};
        const int32_t *offs = E == 3 ? offs3 : offs2;
        const size_t nw = (size_t)E * OC * C, pre = 50, n = pre + nw + 30;
        float *buf = randn(n, 70 + t, 0.5f, 0), *w = buf + pre;
        float *x = randn((size_t)N * C, 72 + t, 1, 0), *dy = randn((size_t)N * OC, 74 + t, 1, 0);
        float *o[2], *dx[2], *dw[2];
        uint16_t *m = malloc(sizeof(uint16_t) * n), *want = malloc(sizeof(uint16_t) * n);
        const int kept = ops_bf16_mirror_layout_grouped(m, pre, impl, E, OC, C);
        const char *sw = getenv("TITAN_GROUPED_LAYOUT");
        const int expect =
            strstr(ops_bf16_grouped_mm(), "AVX512_BF16") && !(sw && !strcmp(sw, "0"));
        char what[128];
        snprintf(what, sizeof what, "grouped layout [%d, %d, %d]: kept where the kernel is %s", E,
                 OC, C, ops_bf16_grouped_mm());
        check_true(what, kept == expect, kept ? "kept" : "refused");
        for (size_t i = 0; i < n; i += 37)
            ops_bf16_mirror_convert(m, i, buf + i, n - i < 37 ? n - i : 37);
        ops_bf16_from_f32(want, buf, n);
        if (kept) { /* the stack's elements where the layout puts them */
            for (int e = 0; e < E; e++)
                for (int r = 0; r < OC; r++)
                    for (int c = 0; c < C; c++) {
                        uint16_t h;
                        ops_bf16_from_f32(&h, &w[((size_t)e * OC + r) * C + c], 1);
                        want[pre + (size_t)e * OC * C + (size_t)(c / 64) * 64 * OC +
                             (size_t)(r / 2) * 128 + 2 * (c % 64) + r % 2] = h;
                    }
        }
        snprintf(what, sizeof what, "grouped layout [%d, %d, %d]: the copy's bits, in pieces", E,
                 OC, C);
        check_true(what, !memcmp(m, want, sizeof(uint16_t) * n), NULL);
        for (int k = 0; k < 2; k++) { /* 0: converted per call; 1: from the copy */
            base_err err;
            const int reg = k && !ops_bf16_mirror_add(buf, n, m, &err);
            if (k) {
                snprintf(what, sizeof what,
                         "grouped layout [%d, %d, %d]: registered; others see no row-major copy", E,
                         OC, C);
                check_true(what,
                           reg && (ops_cpu_bf16_mirror_of(w, nw) == NULL) == kept &&
                               (ops_cpu_bf16_grouped_of(w, E, OC, C) != NULL) == kept &&
                               ops_cpu_bf16_mirror_of(buf, pre) != NULL,
                           NULL);
            }
            o[k] = zeros((size_t)N * OC), dx[k] = zeros((size_t)N * C), dw[k] = zeros(nw);
            ops_cpu_grouped_mm_bf16_fwd(o[k], x, w, offs, E, C, OC);
            ops_cpu_grouped_mm_bf16_bwd(dx[k], dw[k], dy, x, w, offs, E, C, OC, 1, 0);
            if (!reg) continue;
            ops_bf16_mirror_layouts_clear(m, sizeof(uint16_t) * n); /* row-major again */
            snprintf(what, sizeof what, "grouped layout [%d, %d, %d]: cleared", E, OC, C);
            check_true(what,
                       ops_cpu_bf16_mirror_of(w, nw) != NULL &&
                           ops_cpu_bf16_grouped_of(w, E, OC, C) == NULL,
                       NULL);
            ops_bf16_mirror_remove(buf);
        }
        snprintf(what, sizeof what,
                 "grouped layout [%d, %d, %d]: forward, dx, dW from the copy = converted per call "
                 "(bitwise)",
                 E, OC, C);
        check_true(what,
                   same_bits(o[0], o[1], (size_t)N * OC) &&
                       same_bits(dx[0], dx[1], (size_t)N * C) && same_bits(dw[0], dw[1], nw),
                   NULL);
        for (int k = 0; k < 2; k++) base_free(o[k]), base_free(dx[k]), base_free(dw[k]);
        base_free(buf), base_free(x), base_free(dy);
        ops_bf16_mirror_layouts_clear(m, sizeof(uint16_t) * n); /* before its memory goes */
        free(m), free(want);
    }
}

/* lmhead_ce's default chunk (the model's and the bench's): about 64M logits with AVX-512, 144M
 * without, a multiple of 64 rows, at most N: 448 and 1024 rows at Qwen3's vocabulary (the
 * figures bench/RESULTS.md timed), the whole batch at a small vocabulary, 64 rows (not 0) past
 * the target; ops_lmhead_ce_chunk is the rule of this CPU. */
static void test_lmhead_ce_chunk(void) {
    static const struct {
        long N;
        int V, avx512, want;
    } c[] = {{2048, 151936, 1, 448},     {2048, 151936, 0, 1024},  {100, 151936, 1, 100},
             {100, 151936, 0, 100},      {2048, 2048, 1, 2048},    {1L << 20, 2048, 1, 32768},
             {1L << 20, 2048, 0, 73728}, {2048, 100000000, 1, 64}, {2048, 100000000, 0, 64},
             {2048, 0, 0, 64},           {0, 151936, 1, 0}};
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        const int got = ops_lmhead_ce_chunk_for(c[i].N, c[i].V, c[i].avx512);
        char what[96], detail[64];
        snprintf(what, sizeof what, "ops_lmhead_ce_chunk_for(N %ld, V %d, avx512 %d)", c[i].N,
                 c[i].V, c[i].avx512);
        snprintf(detail, sizeof detail, "%d rows, not %d", got, c[i].want);
        check_true(what, got == c[i].want, detail);
    }
    const int here = __builtin_cpu_supports("avx512f");
    check_true("ops_lmhead_ce_chunk is this CPU's rule",
               ops_lmhead_ce_chunk(2048, 151936) == ops_lmhead_ce_chunk_for(2048, 151936, here),
               here ? "AVX-512" : "no AVX-512");
}

int main(void) {
    test_lmhead_ce_chunk();
    test_bwd_weights();
    test_embedding();
    test_rmsnorm();
    test_add_rmsnorm();
    test_matmul();
    test_rope();
    test_swiglu();
    test_lmhead_ce();
    test_adamw(0.1, 0.0, 0);
    test_adamw(0.0, 0.05, 0);
    test_adamw(0.1, 0.0, 1);
    test_adamw(0.0, 0.05, 1);
    test_adamw_gscale();
    test_vm_expf();
    test_grouped_mm();
    test_bf16_held();
    test_swiglu16_loops();
    test_swiglu_bf16_mirrors();
    test_rmsnorm_emit(37, 100);
    test_rmsnorm_emit(20, 1024);
    test_grouped_bf16_reference();
    test_grouped_layout();
    test_gemm16_shapes();
    test_registry();
    test_determinism();
    test_zero();
    printf("max error per op:");
    for (int c = 0; c < E_NCAT; c++)
        printf(" %s %.2e%s", g_cat_names[c], g_cat_max[c], c + 1 < E_NCAT ? "," : "\n");
    printf("%d/%d checks passed\n", g_checks - g_failures, g_checks);
    return g_failures ? 1 : 0;
}
