/* Unit test of the run-time ISA dispatch (src/ops/cpu/dispatch.c, isa.h).
 *
 * 1. TITAN_ISA=default, set before the first kernel call, selects the baseline copy.
 * 2. On a CPU with AVX-512, every dispatched kernel's AVX-512 copy is run against its
 *    baseline copy on the same random inputs. Elementwise kernels (embedding, rope, swiglu,
 *    adamw) and attention (explicit fmaf and fixed-order partial sums, both copies having FMA)
 *    must agree bit for bit; kernels with `omp simd` reductions (rmsnorm, attention_kv,
 *    lmhead_ce) may round differently with the vector width and must agree to 1e-5 relative.
 *    Without AVX-512 these comparisons are skipped (the fallback is then what runs anyway).
 * Exit status 0 when every check passes. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "ops/cpu/isa.h"

static int g_failures = 0;

/* max |a - b| / max(max |b|, 1e-30) over n floats; *bitwise: whether all bits agree */
static double rel_diff(const float *a, const float *b, size_t n, int *bitwise) {
    double mx = 0, ref = 1e-30;
    *bitwise = memcmp(a, b, n * sizeof(float)) == 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= mx)) mx = d; /* NaN propagates */
        if (fabs((double)b[i]) > ref) ref = fabs((double)b[i]);
    }
    return mx / ref;
}

static void check(const char *what, const float *a, const float *b, size_t n, int need_bitwise) {
    int bw;
    double e = rel_diff(a, b, n, &bw);
    int ok = need_bitwise ? bw : e <= 1e-5;
    printf("%-4s %-34s rel diff %.3e %s\n", ok ? "ok" : "FAIL", what, e,
           bw             ? "(bitwise)"
           : need_bitwise ? "(bitwise required)"
                          : "(tol 1e-5)");
    if (!ok) g_failures++;
}

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static float frand(void) { /* uniform in [-1, 1) */
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((g_rng >> 40) * (1.0 / 8388608.0)) - 1.0f;
}
static float *rnd(size_t n, float scale) {
    float *p = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) p[i] = frand() * scale;
    return p;
}
static float *dup(const float *x, size_t n) {
    float *p = malloc(n * sizeof(float));
    memcpy(p, x, n * sizeof(float));
    return p;
}

#if defined(__x86_64__)
static void compare_copies(void) {
    /* odd sizes so vector remainders are exercised */
    const int N = 37, C = 203, F = 301, V = 999, B = 2, T = 77, H = 4, G = 2, hd = 24;
    {
        float *w = rnd((size_t)V * C, 1), *d1 = rnd((size_t)N * C, 1);
        float *a = rnd((size_t)N * C, 1), *b = dup(a, (size_t)N * C);
        int32_t tok[37];
        for (int i = 0; i < N; i++) tok[i] = (i * 7919) % V;
        ops_cpu_embedding_fwd_avx512(a, tok, w, N, C);
        ops_cpu_embedding_fwd_default(b, tok, w, N, C);
        check("embedding fwd", a, b, (size_t)N * C, 1);
        float *ga = rnd((size_t)V * C, 1), *gb = dup(ga, (size_t)V * C);
        ops_cpu_embedding_bwd_avx512(ga, d1, tok, N, C);
        ops_cpu_embedding_bwd_default(gb, d1, tok, N, C);
        check("embedding bwd", ga, gb, (size_t)V * C, 1);
        free(w), free(d1), free(a), free(b), free(ga), free(gb);
    }
    {
        size_t n = (size_t)N * C;
        float *x = rnd(n, 2), *w = rnd((size_t)C, 1), *dy = rnd(n, 1);
        float *oa = rnd(n, 1), *ob = dup(oa, n), ra[37], rb[37];
        ops_cpu_rmsnorm_fwd_avx512(oa, ra, x, w, N, C, 1e-6f);
        ops_cpu_rmsnorm_fwd_default(ob, rb, x, w, N, C, 1e-6f);
        check("rmsnorm fwd", oa, ob, n, 0);
        float *da = rnd(n, 1), *db = dup(da, n), *wa = rnd((size_t)C, 1), *wb = dup(wa, (size_t)C);
        ops_cpu_rmsnorm_bwd_avx512(da, wa, dy, x, w, rb, N, C, 1, 1);
        ops_cpu_rmsnorm_bwd_default(db, wb, dy, x, w, rb, N, C, 1, 1);
        check("rmsnorm bwd dinp", da, db, n, 0);
        check("rmsnorm bwd dw", wa, wb, (size_t)C, 0);
        /* each copy's fused add + norm equals its own rmsnorm of the sum, bit for bit */
        float *ha = rnd(n, 1), *hb = dup(ha, n);
        ops_cpu_add_rmsnorm_fwd_avx512(ha, oa, ra, ha, x, w, N, C, 1e-6f);
        ops_cpu_rmsnorm_fwd_avx512(ob, rb, ha, w, N, C, 1e-6f);
        check("add_rmsnorm fwd == rmsnorm fwd of the sum (avx512)", oa, ob, n, 1);
        ops_cpu_add_rmsnorm_fwd_default(hb, oa, ra, hb, x, w, N, C, 1e-6f);
        ops_cpu_rmsnorm_fwd_default(ob, rb, hb, w, N, C, 1e-6f);
        check("add_rmsnorm fwd == rmsnorm fwd of the sum (default)", oa, ob, n, 1);
        check("add_rmsnorm h", ha, hb, n, 1);
        free(ha), free(hb);
        free(x), free(w), free(dy), free(oa), free(ob), free(da), free(db), free(wa), free(wb);
    }
    {
        size_t n = (size_t)B * T * H * hd, nc = (size_t)T * hd / 2;
        float *x = rnd(n, 1), *c = rnd(nc, 1), *s = rnd(nc, 1);
        float *a = rnd(n, 1), *b = dup(a, n);
        ops_cpu_rope_fwd_avx512(a, x, c, s, B, T, H, hd);
        ops_cpu_rope_fwd_default(b, x, c, s, B, T, H, hd);
        check("rope fwd", a, b, n, 1);
        ops_cpu_rope_bwd_avx512(a, x, c, s, B, T, H, hd);
        ops_cpu_rope_bwd_default(b, x, c, s, B, T, H, hd);
        check("rope bwd", a, b, n, 1);
        free(x), free(c), free(s), free(a), free(b);
    }
    {
        size_t n = (size_t)N * F;
        float *g = rnd(n, 12), *u = rnd(n, 1), *dy = rnd(n, 1);
        float *a = rnd(n, 1), *b = dup(a, n), *a2 = rnd(n, 1), *b2 = dup(a2, n);
        ops_cpu_swiglu_fwd_avx512(a, g, u, N, F);
        ops_cpu_swiglu_fwd_default(b, g, u, N, F);
        check("swiglu fwd", a, b, n, 1);
        ops_cpu_swiglu_bwd_avx512(a, a2, dy, g, u, N, F, 1);
        ops_cpu_swiglu_bwd_default(b, b2, dy, g, u, N, F, 1);
        check("swiglu bwd dgate", a, b, n, 1);
        check("swiglu bwd dup", a2, b2, n, 1);
        free(g), free(u), free(dy), free(a), free(b), free(a2), free(b2);
    }
    {
        size_t n = 10007;
        float *g = rnd(n, 1), *pa = rnd(n, 1), *ma = rnd(n, 0.1f), *va = rnd(n, 0.01f);
        for (size_t i = 0; i < n; i++) va[i] = fabsf(va[i]);
        float *pb = dup(pa, n), *mb = dup(ma, n), *vb = dup(va, n);
        for (int64_t t = 1; t <= 3; t++) { /* AdamW's decay, then Adam's coupled one (t 3) */
            const double wd = t < 3 ? 0.1 : 0.0, l2 = t < 3 ? 0.0 : 0.05;
            ops_cpu_adamw_avx512(pa, ma, va, g, 0.75f, n, 1e-3, 0.9, 0.95, 1e-8, wd, l2, 0, t);
            ops_cpu_adamw_default(pb, mb, vb, g, 0.75f, n, 1e-3, 0.9, 0.95, 1e-8, wd, l2, 0, t);
        }
        check("adamw p", pa, pb, n, 1);
        check("adamw m", ma, mb, n, 1), check("adamw v", va, vb, n, 1);
        /* then a step on bf16 moments (fused_opt_states_bf16), compared widened */
        uint16_t *h = malloc(4 * n * sizeof *h); /* ma, va, mb, vb */
        ops_bf16_from_f32(h, ma, n), ops_bf16_from_f32(h + n, va, n);
        memcpy(h + 2 * n, h, 2 * n * sizeof *h);
        ops_cpu_adamw_avx512(pa, h, h + n, g, 0.75f, n, 1e-3, 0.9, 0.95, 1e-8, 0.1, 0.0, 1, 4);
        ops_cpu_adamw_default(pb, h + 2 * n, h + 3 * n, g, 0.75f, n, 1e-3, 0.9, 0.95, 1e-8, 0.1,
                              0.0, 1, 4);
        ops_bf16_to_f32(ma, h, n), ops_bf16_to_f32(va, h + n, n);
        ops_bf16_to_f32(mb, h + 2 * n, n), ops_bf16_to_f32(vb, h + 3 * n, n);
        check("adamw bf16 moments p", pa, pb, n, 1);
        check("adamw bf16 moments m", ma, mb, n, 1), check("adamw bf16 moments v", va, vb, n, 1);
        free(h);
        free(g), free(pa), free(ma), free(va), free(pb), free(mb), free(vb);
    }
    {
        size_t nq = (size_t)B * T * H * hd, nk = (size_t)B * T * G * hd, nl = (size_t)B * H * T;
        float *q = rnd(nq, 1), *k = rnd(nk, 1), *v = rnd(nk, 1), *dy = rnd(nq, 1);
        float *oa = rnd(nq, 1), *ob = dup(oa, nq), *la = rnd(nl, 1), *lb = dup(la, nl);
        ops_cpu_attention_fwd_avx512(oa, la, q, k, v, B, T, H, G, hd);
        ops_cpu_attention_fwd_default(ob, lb, q, k, v, B, T, H, G, hd);
        check("attention fwd out", oa, ob, nq, 1);
        check("attention fwd lse", la, lb, nl, 1);
        float *qa = rnd(nq, 1), *qb = dup(qa, nq), *ka = rnd(nk, 1), *kb = dup(ka, nk);
        float *wa = rnd(nk, 1), *wb = dup(wa, nk);
        ops_cpu_attention_bwd_avx512(qa, ka, wa, dy, ob, lb, q, k, v, B, T, H, G, hd, 1);
        ops_cpu_attention_bwd_default(qb, kb, wb, dy, ob, lb, q, k, v, B, T, H, G, hd, 1);
        check("attention bwd dq", qa, qb, nq, 1);
        check("attention bwd dk", ka, kb, nk, 1);
        check("attention bwd dv", wa, wb, nk, 1);
        /* KV-cache attention: T/2 new queries after T/2 cached positions, batch 0 */
        const int t1 = T / 2, p0 = T - t1;
        ops_cpu_attention_kv_prec_avx512(oa, q, k, v, t1, p0, H, G, hd, OPS_PREC_F32);
        ops_cpu_attention_kv_prec_default(ob, q, k, v, t1, p0, H, G, hd, OPS_PREC_F32);
        check("attention_kv", oa, ob, (size_t)t1 * H * hd, 0);
        ops_cpu_attention_kv_prec_avx512(oa, q, k, v, t1, p0, H, G, hd, OPS_PREC_BF16);
        ops_cpu_attention_kv_prec_default(ob, q, k, v, t1, p0, H, G, hd, OPS_PREC_BF16);
        check("attention_kv bf16", oa, ob, (size_t)t1 * H * hd, 0);
        /* bf16 rounds k and v as it reads them: the same as on copies rounded beforehand, and a
         * NaN in a k row stays a NaN (its kv head's query rows NaN, the other heads' not) */
        float *kr = malloc(sizeof(float) * nk), *vr = malloc(sizeof(float) * nk);
        ops_cpu_bf16_round(kr, k, nk);
        ops_cpu_bf16_round(vr, v, nk);
        ops_cpu_attention_kv_prec_avx512(ob, q, kr, vr, t1, p0, H, G, hd, OPS_PREC_BF16);
        check("attention_kv bf16 = on rounded k, v", oa, ob, (size_t)t1 * H * hd, 1);
        uint32_t nan_bits = 0x7fffffffu;             /* rounding it as a finite value gives -0 */
        memcpy(&kr[hd], &nan_bits, sizeof nan_bits); /* position 0, kv head 1 */
        ops_cpu_attention_kv_prec_default(ob, q, kr, vr, t1, p0, H, G, hd, OPS_PREC_BF16);
        int nan_ok = 1;
        for (int t = 0; t < t1; t++)
            for (int h = 0; h < H; h++)
                for (int d = 0; d < hd; d++)
                    nan_ok &= isnan(ob[((size_t)t * H + h) * hd + d]) == (h / (H / G) == 1);
        printf("%-4s attention_kv bf16: a NaN in k kept\n", nan_ok ? "ok" : "FAIL");
        if (!nan_ok) g_failures++;
        free(kr), free(vr);
        /* a decode step of 4 query heads on 1 kv head: one task for all 4 on one thread, a task
         * per 2 heads on 2 threads (attention_kv.c); the same values either way */
        float *o1 = rnd((size_t)H * hd, 1), *o4 = dup(o1, (size_t)H * hd);
        const int nthr = omp_get_max_threads();
        omp_set_num_threads(1);
        ops_cpu_attention_kv_prec_avx512(o1, q, k, v, 1, p0, H, 1, hd, OPS_PREC_BF16);
        omp_set_num_threads(2);
        ops_cpu_attention_kv_prec_avx512(o4, q, k, v, 1, p0, H, 1, hd, OPS_PREC_BF16);
        omp_set_num_threads(nthr);
        check("attention_kv 1 kv head, 1 / 2 threads", o1, o4, (size_t)H * hd, 1);
        free(o1), free(o4);
        free(q), free(k), free(v), free(dy), free(oa), free(ob), free(la), free(lb);
        free(qa), free(qb), free(ka), free(kb), free(wa), free(wb);
    }
    {
        float *x = rnd((size_t)N * C, 1), *w = rnd((size_t)V * C, 0.2f);
        float *xa = rnd((size_t)N * C, 1), *xb = dup(xa, (size_t)N * C);
        float *wa = rnd((size_t)V * C, 1), *wb = dup(wa, (size_t)V * C);
        float *sa = malloc(sizeof(float) * 16 * V), *sb = malloc(sizeof(float) * 16 * V);
        int32_t tg[37];
        for (int i = 0; i < N; i++) tg[i] = i % 5 == 4 ? -100 : (i * 131) % V;
        int64_t nva, nvb;
        float la = (float)ops_cpu_lmhead_ce_avx512(xa, wa, x, w, tg, N, C, V, 1.0f / 30, sa, 16,
                                                   &nva, NULL, 1, OPS_PREC_F32);
        float lb = (float)ops_cpu_lmhead_ce_default(xb, wb, x, w, tg, N, C, V, 1.0f / 30, sb, 16,
                                                    &nvb, NULL, 1, OPS_PREC_F32);
        check("lmhead_ce loss", &la, &lb, 1, 0);
        check("lmhead_ce dx", xa, xb, (size_t)N * C, 0);
        check("lmhead_ce dw", wa, wb, (size_t)V * C, 0);
        if (nva != nvb)
            printf("FAIL lmhead_ce n_valid %lld != %lld\n", (long long)nva, (long long)nvb),
                g_failures++;
        free(x), free(w), free(xa), free(xb), free(wa), free(wb), free(sa), free(sb);
    }
}
#endif

int main(void) {
    setenv("TITAN_ISA", "default", 1); /* before the first dispatched call */
    const char *isa = ops_cpu_isa();
    int ok = strncmp(isa, "default", 7) == 0;
    printf("%-4s TITAN_ISA=default selects the baseline copy: %s\n", ok ? "ok" : "FAIL", isa);
    if (!ok) g_failures++;
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        compare_copies();
    else
        printf("skip AVX-512 vs baseline copies: this CPU has no AVX-512\n");
#else
    printf("skip AVX-512 vs baseline copies: not x86-64\n");
#endif
    if (g_failures) printf("%d check(s) failed\n", g_failures);
    return g_failures ? 1 : 0;
}
