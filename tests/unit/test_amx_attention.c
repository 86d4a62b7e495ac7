/* attention/bf16 on AMX tiles (attention_gemm.c's amx mode: ops_cpu_amx_pack, _gemm_packed,
 * _transpose, _softmax_rows, _attn_grad_rows in src/ops/cpu/amx_gemm.c).
 *
 * The primitives against exact values: a packed product (both packings, a column and k offset
 * into the packed operand as attention reads it, K over the 512-element block, accumulation)
 * against double sums of the same bf16 values (fp32 sums: within 2^-20 of the sum of |terms|);
 * a pack straight from fp32 (and both packs in one pass) bit for bit the pack of its bf16 copy
 * (specials included); the transpose bit for bit, zero padded; the softmax rows and the
 * backward's fused scores (S^T, dP^T on tiles, then P and dS) against double (their bf16
 * results within one bf16 rounding, 2^-8 relative; zero outside the causal part).
 *
 * The op end to end at shapes the amx mode takes (T and head_dim multiples of 32: one and
 * several 128-row blocks, a last block of 32, T over 512, GQA ratios 1-8): out, lse, dq, dk, dv
 * against the fp32 default on the same bf16-valued q, k, v, dout. The only difference left is
 * the rounding of P and dS to bf16 (autocast's), so each result is held to 2^-6 of its tensor's
 * largest magnitude; a wrong block, offset or stride gives errors of the values' own size. And
 * one thread gives bitwise the result of two. Skipped (77) where the CPU has no AMX-BF16, the
 * build no AMX kernel, or attention's amx mode is off (TITAN_AMX_ATTENTION=0 and the like). */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ops/cpu/cpu.h"
#include "ops/ops.h"

static uint64_t rng = 0x9e3779b97f4a7c15u;

static void *xalloc(size_t bytes) {
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) {
        printf("out of memory\n");
        exit(2);
    }
    return p;
}

static float bf(uint16_t b) {
    return ops_cpu_bf16_value(b);
}

/* C[M, N] (+)= A[M, K] op(B) from B packed at column n0 and k row k0 */
static void check_packed(int M, int N, int K, int tb, int n0, int k0, int acc) {
    const int Nb = N + n0, Kb = K + k0; /* the whole packed B */
    uint16_t *A = xalloc(2ul * M * K), *B = xalloc(2ul * Nb * Kb);
    uint32_t *Bp = xalloc(4ul * Nb * Kb / 2);
    float *C = xalloc(4ul * M * N);
    for (size_t i = 0; i < (size_t)M * K; i++) A[i] = ops_cpu_bf16_bits(check_uniform(&rng));
    for (size_t i = 0; i < (size_t)Nb * Kb; i++) B[i] = ops_cpu_bf16_bits(check_uniform(&rng));
    for (size_t i = 0; i < (size_t)M * N; i++) C[i] = acc ? check_uniform(&rng) : NAN;
    float *C0 = xalloc(4ul * M * N);
    memcpy(C0, C, 4ul * M * N);
    /* op(B)[k][n] = B[k][n] (ld Nb) or, tb, B[n][k] (ld Kb) */
    ops_cpu_amx_pack(Bp, tb, B, 0, tb ? Kb : Nb, Kb, Nb);
    const size_t bs = (size_t)Kb * 8; /* words between 16-column blocks */
    ops_cpu_amx_gemm_packed(M, N, K, A, K, Bp + (size_t)n0 * Kb / 2 + (size_t)k0 * 8, bs, acc, C,
                            N);
    double worst = 0.0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double sum = acc ? C0[(size_t)i * N + j] : 0.0, mag = fabs(sum);
            for (int k = 0; k < K; k++) {
                const int kk = k0 + k, nn = n0 + j;
                const double t = (double)bf(A[(size_t)i * K + k]) *
                                 bf(tb ? B[(size_t)nn * Kb + kk] : B[(size_t)kk * Nb + nn]);
                sum += t, mag += fabs(t);
            }
            const double e = fabs(C[(size_t)i * N + j] - sum) / (mag + 1e-30);
            if (!(e <= worst)) worst = e; /* NaN included */
        }
    CHECK(worst <= 0x1p-20,
          "packed product M %d N %d K %d tb %d n0 %d k0 %d acc %d: error %.3g "
          "of the terms' magnitude",
          M, N, K, tb, n0, k0, acc, worst);
    free(A), free(B), free(Bp), free(C), free(C0);
}

/* A pack straight from fp32 (ld padded, edges in K and N) against the pack of its bf16 copy
 * made by ops_cpu_bf16_bits (ties to even, NaN, infinities, denormals, values past bf16's
 * largest): bit for bit. */
static void check_pack_f32(int K, int N, int tb) {
    const int rows = tb ? N : K, cols = tb ? K : N, ld = cols + 5;
    const size_t n = (size_t)rows * ld,
                 words = (size_t)(K + 31) / 32 * 32 * ((N + 31) / 32 * 32) / 2;
    float *x = xalloc(4 * n);
    uint16_t *h = xalloc(2 * n);
    uint32_t *p16 = xalloc(4 * words), *p32 = xalloc(4 * words);
    static const uint32_t special[] = {0x3f808000u, 0x3f818000u, 0x7fc00001u, 0xff800001u,
                                       0x7f800000u, 0x00000001u, 0x807fffffu, 0x7f7fffffu,
                                       0x3f80ffffu, 0x80000000u};
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        if (i % 7 == 3) {
            u = special[i / 7 % (sizeof special / sizeof special[0])];
            memcpy(&x[i], &u, 4);
        } else {
            x[i] = check_uniform(&rng) * 100.0f;
        }
        h[i] = ops_cpu_bf16_bits(x[i]);
    }
    memset(p16, 0xa5, 4 * words);
    memset(p32, 0x5a, 4 * words);
    ops_cpu_amx_pack(p16, tb, h, 0, ld, K, N);
    ops_cpu_amx_pack(p32, tb, x, 1, ld, K, N);
    CHECK(!memcmp(p16, p32, 4 * words), "pack of fp32 (K %d, N %d, tb %d) = pack of its bf16 bits",
          K, N, tb);
    free(x);
    free(h);
    free(p16);
    free(p32);
}

/* ops_cpu_amx_pack_both (x [T, hd] fp32, rows ld apart, both layouts in one pass) bit for bit
 * the two packs of its bf16 copy */
static void check_pack_both(int T, int hd) {
    const int ld = hd + 7;
    const size_t n = (size_t)T * ld, words = (size_t)(T + 31) / 32 * 32 * ((hd + 31) / 32 * 32) / 2;
    float *x = xalloc(4 * n);
    uint16_t *h = xalloc(2 * n);
    uint32_t *pt = xalloc(4 * words), *pn = xalloc(4 * words), *bt = xalloc(4 * words),
             *bn = xalloc(4 * words);
    for (size_t i = 0; i < n; i++) {
        const uint32_t u = i % 11 == 5 ? 0x3f808000u + (uint32_t)(i % 3) * 0x10000u : 0;
        if (u)
            memcpy(&x[i], &u, 4); /* ties to even, both ways */
        else
            x[i] = check_uniform(&rng) * 3.0f;
        h[i] = ops_cpu_bf16_bits(x[i]);
    }
    memset(bt, 0x77, 4 * words);
    memset(bn, 0x77, 4 * words);
    ops_cpu_amx_pack(pt, 1, h, 0, ld, hd, T);
    ops_cpu_amx_pack(pn, 0, h, 0, ld, T, hd);
    ops_cpu_amx_pack_both(bt, bn, x, ld, T, hd);
    CHECK(!memcmp(pt, bt, 4 * words) && !memcmp(pn, bn, 4 * words),
          "pack_both (T %d, hd %d) = the two packs of its bf16 copy", T, hd);
    free(x), free(h), free(pt), free(pn), free(bt), free(bn);
}

static void check_transpose(int rows, int cols) {
    const int rp = (rows + 31) / 32 * 32, cp = (cols + 31) / 32 * 32, lda = cols + 3;
    uint16_t *A = xalloc(2ul * rows * lda), *D = xalloc(2ul * rp * cp);
    for (size_t i = 0; i < (size_t)rows * lda; i++) A[i] = (uint16_t)(i * 2654435761u >> 7);
    memset(D, 0xff, 2ul * rp * cp);
    ops_cpu_amx_transpose(D, A, lda, rows, cols);
    int bad = 0;
    for (int c = 0; c < cp; c++)
        for (int r = 0; r < rp; r++) {
            const uint16_t want = c < cols && r < rows ? A[(size_t)r * lda + c] : 0;
            bad += D[(size_t)c * rp + r] != want;
        }
    CHECK(!bad, "transpose %d x %d: %d elements wrong", rows, cols, bad);
    free(A), free(D);
}

/* |got - want| within one bf16 rounding of want (half an ulp: 2^-9; 2^-8 allows the fp32
 * steps before it) or a tiny absolute amount */
static int near16(float got, double want) {
    return fabs(got - want) <= 0x1p-8 * fabs(want) + 1e-30;
}

static void check_rows(int M, int n, int r0) {
    const float scale = 0.125f;
    float *s = xalloc(4ul * M * n), *s0 = xalloc(4ul * M * n), *lse = xalloc(4ul * M);
    uint16_t *p16 = xalloc(2ul * M * n);
    for (size_t i = 0; i < (size_t)M * n; i++) s[i] = 24.0f * check_uniform(&rng);
    memcpy(s0, s, 4ul * M * n);
    float *rl = xalloc(4ul * M);
    ops_cpu_amx_softmax_rows(p16, s, M, n, r0, scale, lse, rl);
    int bad = 0, badl = 0;
    for (int i = 0; i < M; i++) {
        const int nv = r0 + i + 1;
        double mx = -INFINITY, l = 0.0;
        for (int j = 0; j < nv; j++) mx = fmax(mx, (double)s0[(size_t)i * n + j] * scale);
        for (int j = 0; j < nv; j++) l += exp((double)s0[(size_t)i * n + j] * scale - mx);
        for (int j = 0; j < n; j++) {
            const double want = j < nv ? exp((double)s0[(size_t)i * n + j] * scale - mx) : 0.0;
            bad += !near16(bf(p16[(size_t)i * n + j]), want) ||
                   (j >= nv && p16[(size_t)i * n + j] != 0);
        }
        badl += !(fabs(lse[i] - (mx + log(l))) <= 1e-5 * (1.0 + fabs(mx + log(l)))) ||
                !(fabs(rl[i] - 1.0 / l) <= 1e-5 / l);
    }
    CHECK(!bad && !badl, "softmax rows M %d n %d r0 %d: %d exponentials, %d lse or 1/sum wrong", M,
          n, r0, bad, badl);
    free(s), free(s0), free(lse), free(p16), free(rl);
}

/* The backward's scores of a key block (ops_cpu_amx_attn_grad_scores): kc, vc [M, hd] and Q, dO
 * [n, hd] bf16 (Q and dO packed as attention packs them, from query q0 of a longer packed
 * head), against double: S^T = K Q^T, dP^T = V dO^T summed exactly, P = exp(S^T scale - lse[j])
 * and dS = P (dP^T - D[j]) scale within one bf16 rounding (and dP's fp32 sum error), zero where
 * the query is before the key. */
static void check_grad_scores(int M, int n, int hd, int q0, int qk) {
    const float scale = 1.0f / sqrtf((float)hd);
    const int T = q0 + n; /* the packed head's queries */
    uint16_t *kc = xalloc(2ul * M * hd), *vc = xalloc(2ul * M * hd), *q = xalloc(2ul * T * hd),
             *dO = xalloc(2ul * T * hd), *p16 = xalloc(2ul * M * n), *ds16 = xalloc(2ul * M * n);
    uint32_t *qt = xalloc(4ul * T * hd / 2), *dot = xalloc(4ul * T * hd / 2);
    float *lq = xalloc(4ul * n), *D = xalloc(4ul * n);
    for (size_t i = 0; i < (size_t)M * hd; i++)
        kc[i] = ops_cpu_bf16_bits(2.0f * check_uniform(&rng)),
        vc[i] = ops_cpu_bf16_bits(check_uniform(&rng));
    for (size_t i = 0; i < (size_t)T * hd; i++)
        q[i] = ops_cpu_bf16_bits(2.0f * check_uniform(&rng)),
        dO[i] = ops_cpu_bf16_bits(check_uniform(&rng));
    for (int j = 0; j < n; j++)
        lq[j] = 3.0f + 2.0f * check_uniform(&rng), D[j] = 0.5f * check_uniform(&rng);
    memset(p16, 0xff, 2ul * M * n);
    memset(ds16, 0xff, 2ul * M * n);
    ops_cpu_amx_pack(qt, 1, q, 0, hd, hd, T);
    ops_cpu_amx_pack(dot, 1, dO, 0, hd, hd, T);
    const size_t t0 = (size_t)q0 * hd / 2; /* query q0 of the packed heads */
    ops_cpu_amx_attn_grad_scores(p16, ds16, kc, vc, hd, qt + t0, dot + t0, (size_t)hd * 8, M, n, hd,
                                 scale, lq, D, qk);
    int bad = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < n; j++) {
            double sv = 0.0, dv = 0.0, dm = 0.0;
            for (int c = 0; c < hd; c++) {
                sv += (double)bf(kc[(size_t)i * hd + c]) * bf(q[(size_t)(q0 + j) * hd + c]);
                const double t =
                    (double)bf(vc[(size_t)i * hd + c]) * bf(dO[(size_t)(q0 + j) * hd + c]);
                dv += t;
                dm += fabs(t);
            }
            const size_t o = (size_t)i * n + j;
            const int seen = qk + j >= i; /* the query at or after the key */
            const double p = seen ? exp(sv * scale - lq[j]) : 0.0, d = p * (dv - D[j]) * scale;
            /* dS: dP's fp32 sum (hd terms) and the fp32 steps before the rounding */
            bad += !near16(bf(p16[o]), p) ||
                   !(fabs(bf(ds16[o]) - d) <=
                     0x1p-8 * fabs(d) + (hd * 0x1p-24 * dm + 1e-6) * p * scale) ||
                   (!seen && (bf(p16[o]) != 0.0f || bf(ds16[o]) != 0.0f));
        }
    CHECK(
        !bad,
        "gradient scores M %d n %d hd %d (from query %d, %d after the first key): %d values wrong",
        M, n, hd, q0, qk, bad);
    free(kc), free(vc), free(q), free(dO), free(p16), free(ds16), free(qt), free(dot), free(lq),
        free(D);
}

/* max |a - b| over max |b| */
static double rel(const float *a, const float *b, size_t n) {
    double e = 0.0, m = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - b[i]);
        if (!(d <= e)) e = d;
        m = fmax(m, fabs((double)b[i]));
    }
    return e / (m + 1e-30);
}

static float *rand16(size_t n, float range) { /* bf16-valued fp32 */
    float *x = xalloc(4 * n);
    for (size_t i = 0; i < n; i++)
        x[i] = ops_cpu_bf16_value(ops_cpu_bf16_bits(range * check_uniform(&rng)));
    return x;
}

static void check_op(const ops_impl *bf, const ops_impl *ref, int B, int T, int H, int G, int hd) {
    const size_t nq = (size_t)B * T * H * hd, nkv = (size_t)B * T * G * hd, nl = (size_t)B * H * T;
    float *q = rand16(nq, 2.0f), *k = rand16(nkv, 2.0f), *v = rand16(nkv, 1.0f),
          *dy = rand16(nq, 1.0f);
    /* [0] the reference, [1] bf16, [2] bf16 on one thread writing its gradients (dx_acc 0) over
     * NaN: bitwise [1], which adds them to zeros */
    float *o[3], *l[3], *dq[3], *dk[3], *dv[3];
    for (int r = 0; r < 3; r++) {
        o[r] = xalloc(4 * nq), l[r] = xalloc(4 * nl);
        dq[r] = xalloc(4 * nq), dk[r] = xalloc(4 * nkv), dv[r] = xalloc(4 * nkv);
        const ops_impl *im = r ? bf : ref;
        const int threads = omp_get_max_threads();
        if (r == 2) omp_set_num_threads(1);
        const int written = r == 2;
        memset(dq[r], written ? 0xff : 0, 4 * nq), memset(dk[r], written ? 0xff : 0, 4 * nkv),
            memset(dv[r], written ? 0xff : 0, 4 * nkv); /* 0xffffffff: a NaN */
        ((ops_attention_fwd_fn)im->fwd)(o[r], l[r], q, k, v, B, T, H, G, hd);
        ((ops_attention_bwd_fn)im->bwd)(dq[r], dk[r], dv[r], dy, o[r], l[r], q, k, v, B, T, H, G,
                                        hd, !written);
        omp_set_num_threads(threads);
    }
    const double eo = rel(o[1], o[0], nq), el = rel(l[1], l[0], nl), eq = rel(dq[1], dq[0], nq),
                 ek = rel(dk[1], dk[0], nkv), ev = rel(dv[1], dv[0], nkv);
    printf("B %d T %d H %d G %d hd %d: out %.2g lse %.2g dq %.2g dk %.2g dv %.2g\n", B, T, H, G, hd,
           eo, el, eq, ek, ev);
    CHECK(eo <= 0x1p-6 && el <= 0x1p-12 && eq <= 0x1p-6 && ek <= 0x1p-6 && ev <= 0x1p-6,
          "attention/bf16 on AMX tiles at B %d T %d H %d G %d hd %d: errors out %.3g lse %.3g "
          "dq %.3g dk %.3g dv %.3g",
          B, T, H, G, hd, eo, el, eq, ek, ev);
    CHECK(!memcmp(o[1], o[2], 4 * nq) && !memcmp(l[1], l[2], 4 * nl) &&
              !memcmp(dq[1], dq[2], 4 * nq) && !memcmp(dk[1], dk[2], 4 * nkv) &&
              !memcmp(dv[1], dv[2], 4 * nkv),
          "attention/bf16 at T %d hd %d: one thread writing its gradients differs from two adding "
          "them to zeros",
          T, hd);
    /* dx_acc 1 onto gradients already there (a chunk's dQ rows read in, dK / dV added to):
     * [1]'s gradients plus those, up to the fp32 sums' order */
    float *g0[3] = {rand16(nq, 1.0f), rand16(nkv, 1.0f), rand16(nkv, 1.0f)},
          *ga[3] = {xalloc(4 * nq), xalloc(4 * nkv), xalloc(4 * nkv)},
          *g1[3] = {dq[1], dk[1], dv[1]};
    const size_t gn[3] = {nq, nkv, nkv};
    for (int i = 0; i < 3; i++) memcpy(ga[i], g0[i], 4 * gn[i]);
    ((ops_attention_bwd_fn)bf->bwd)(ga[0], ga[1], ga[2], dy, o[1], l[1], q, k, v, B, T, H, G, hd,
                                    1);
    double ea = 0.0;
    for (int i = 0; i < 3; i++) {
        for (size_t e = 0; e < gn[i]; e++) g0[i][e] += g1[i][e];
        const double r = rel(ga[i], g0[i], gn[i]);
        ea = r > ea ? r : ea;
    }
    CHECK(ea <= 1e-5,
          "attention/bf16 at B %d T %d H %d G %d: added onto gradients there, off by %.3g", B, T, H,
          G, ea);
    for (int i = 0; i < 3; i++) free(g0[i]), free(ga[i]);
    for (int r = 0; r < 3; r++) free(o[r]), free(l[r]), free(dq[r]), free(dk[r]), free(dv[r]);
    free(q), free(k), free(v), free(dy);
}

int main(void) {
    if (!ops_cpu_amx_usable()) {
        printf("skipped: no AMX-BF16 here (or no AMX kernel in this build)\n");
        return 77;
    }
    ops_register_builtin();
    if (!ops_cpu_bf16_amx_attention()) {
        printf("skipped: attention's amx mode is off (engine %s, AMX layouts %s)\n",
               ops_bf16_engine(), ops_bf16_layouts());
        return 77;
    }
    check_packed(64, 96, 128, 1, 32, 0, 0);  /* K^T, Q^T: from a 16-column block on */
    check_packed(96, 64, 1088, 0, 0, 64, 0); /* P V's: K over five 256 blocks, from row 64 */
    check_packed(32, 128, 160, 0, 0, 96, 1); /* dQ's: accumulated */
    check_pack_f32(128, 96, 1);
    check_pack_f32(70, 45, 0);
    check_pack_f32(45, 70, 1);
    check_pack_both(96, 128);
    check_pack_both(64, 96); /* head_dim not a multiple of 32: zero k pairs */
    check_transpose(128, 96);
    check_transpose(64, 1000);
    check_rows(64, 128, 0);
    check_rows(32, 256, 200);
    check_grad_scores(128, 256, 64, 0, 0); /* a whole block, its diagonal square */
    check_grad_scores(64, 96, 128, 32, 0); /* hd 128, queries from a later packed block */
    check_grad_scores(32, 32, 32, 64, 0);  /* one 32 x 32 block */
    /* a later chunk of queries (attention's backward in chunks): the diagonal crossing the
     * chunk's first blocks (qk 32, 16 after a 16-lane vector), then past every key */
    check_grad_scores(128, 128, 64, 32, 32);
    check_grad_scores(96, 64, 32, 32, 16);
    check_grad_scores(64, 64, 128, 256, 256);
    const ops_impl *bf = ops_find(OPS_ATTENTION, "bf16"), *ref = ops_find(OPS_ATTENTION, "default");
    CHECK(bf && ref, "attention's bf16 and default implementations are registered");
    if (bf && ref) {
        check_op(bf, ref, 1, 64, 2, 1, 32);
        check_op(bf, ref, 2, 96, 4, 2, 64);
        check_op(bf, ref, 1, 160, 3, 3, 128); /* a last block of 32 rows */
        check_op(bf, ref, 1, 256, 8, 1, 64);
        check_op(bf, ref, 1, 544, 2, 2, 64); /* P V over two K blocks */
        check_op(bf, ref, 2, 608, 4, 2, 64); /* backward: three query chunks, the last of 96 */
    }
    return check_report("test_amx_attention");
}
