/* Causal grouped-query attention on the CPU, flash-attention style.
 *
 * Layouts (token-major, fp32): q, out, dq [B,T,H,hd]; k, v, dk, dv [B,T,G,hd]; lse [B,H,T].
 * Query head h reads kv head g = h / (H/G) in place (no repeat_kv copy).
 * Scores are s = (q . k) * scale with scale = 1/sqrt(hd); lse is the natural log-sum-exp of a
 * row of scaled scores over the keys s <= t.
 *
 * Tiles: ATT_BQ queries x ATT_BK keys. Score tiles are kept TRANSPOSED, st[key j][query i],
 * so that (a) they come out of K rows times a transposed query tile, which is transposed once
 * per query tile rather than once per (query tile, key tile) pair, and (b) every per-query
 * softmax quantity (max, sum, lse, D) is a vector over i that the row loops update with plain
 * elementwise SIMD code, with no horizontal reductions.
 *
 * Forward: one task per (b, h, query tile). It walks the key tiles up to the diagonal with an
 * online softmax (running max m, running sum l, output accumulator rescaled by
 * exp(m_old - m_new)), so no [T,T] matrix exists; it stores out and lse.
 *
 * Backward: one task per (b, h). It walks query tiles, and inside each the key tiles up to the
 * diagonal, recomputing P = exp(s - lse) tile by tile:
 *   dP = dO V^T, D_i = rowsum(dO_i * O_i), dS = P * (dP - D) * scale,
 *   dQ += dS K, dK += dS^T Q, dV += P^T dO.
 * The task owns dq of its head, so dq needs no synchronisation. dk/dv of kv head g are shared
 * by the rep = H/G query heads g*rep .. g*rep+rep-1: the first of them accumulates straight
 * into dk/dv, each other one into its own [T,hd] slice of a [B,G,rep-1,T,hd] scratch, and after
 * a barrier a second parallel loop adds the slices into dk/dv in ascending head order (no
 * scratch when H == G). Every output element is thus written by one thread, in an order fixed
 * by the shapes alone, so results are bitwise identical for any OpenMP thread count.
 *
 * Causal skipping: key tiles above the diagonal are never visited; inside a diagonal tile the
 * products skip the zero side of the mask in whole register blocks (att_gemm bounds), and exp
 * is evaluated only for visible (query, key) pairs.
 *
 * Vectorisation: all tile products go through att_gemm, whose inner loops run over a
 * contiguous output row with explicit fmaf (ISO C mode does not contract a*b+c on its own);
 * GCC -O2 turns them into vector FMAs and keeps the 4-row accumulator block in registers.
 * fmaf and vm_expf are exactly specified per element, so vector and scalar remainder
 * iterations agree bit for bit, and no reduction depends on data alignment.
 *
 * Memory: per thread, one workspace of a few tiles (~115 KiB forward, ~230 KiB backward at
 * hd = 128), allocated once per call; backward with H > G also allocates 2 * B*(H-G)*T*hd
 * floats of dk/dv scratch.
 * Requires H % G == 0 (G <= H). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cpu/isa.h"
#include "ops/cpu/vmath.h"

#define ATT_BQ 64 /* queries per tile */
#define ATT_BK 64 /* keys per tile; the score tile is [ATT_BK, ATT_BQ] floats (16 KiB) */
/* Equal, aligned tiles guarantee that every query of a processed tile sees key 0 of the tile
 * (k0 <= q0), so each online-softmax step has a finite row max. */
_Static_assert(ATT_BQ == ATT_BK, "attention tiles must be square");

/* att_gemm register block: ATT_MR rows x ATT_NR columns, each row ATT_NV vectors of ATT_VW
 * floats (the copy's vector width, isa.h): 8 accumulator registers in every copy (8 ymm for
 * x86-64-v3, 8 zmm for AVX-512), enough independent FMA chains to cover the FMA latency, with
 * room left in AVX2's 16 registers for the row's B vectors and the 4 broadcasts.
 * The accumulators are arrays indexed [vector][lane] with an `omp simd` loop over exactly one
 * vector's lanes, which GCC -O2 keeps in registers across the k loop. Written as one loop over
 * ATT_NR lanes, the AVX2 copy's vector loop had two iterations, which -O2 does not unroll, so
 * its accumulators stayed on the stack (a load-FMA-store per FMA): the baseline ran 2-2.5x
 * slower than the AVX-512 copy. The blocking changes no result: each C element is the same fmaf
 * chain over k whatever the block shape, and the k range of a row block depends on ATT_MR only,
 * which is the same in every copy. */
#define ATT_MR 4
#define ATT_VW OPS_CPU_VEC_FLOATS
#define ATT_NV 2
#define ATT_NR (ATT_NV * ATT_VW)
#define ATT_UNROLL_NV _Pragma("GCC unroll 2")
_Static_assert(ATT_BQ % ATT_NR == 0, "score tiles must hold whole register blocks");

static inline int att_min(int a, int b) {
    return a < b ? a : b;
}

static const float att_zeros[ATT_NR] = {0}; /* initial accumulators when acc == 0 */

/* Bounds that leave att_gemm's k and n ranges unrestricted. */
#define ATT_ALL (1 << 29)

/* C[i*cs + n] (+)= sum_k A[i*ar + k*ac] * Bm[k*bs + n] for i < M, n < N, k < K: the sum runs
 * over k in ascending order and starts from C when acc != 0, else from 0. A is read one scalar
 * at a time (broadcast), so it may be any strided view, e.g. a transposed tile; Bm and C rows
 * are contiguous.
 *
 * Causal tiles are mostly zero on one side of the diagonal, and these bounds skip that work:
 *  - row i needs only k in [i + klo, i + khi): the caller guarantees A is 0 outside, so
 *    skipping those terms leaves the sums unchanged (a row block uses the union of its rows'
 *    ranges);
 *  - row i needs only columns n >= i + nlo: whole column blocks below that are not written,
 *    and the caller must not read them.
 * Pass -ATT_ALL, ATT_ALL, -ATT_ALL for a plain product. Which terms are skipped depends on the
 * shapes only, so results stay deterministic. */
static void att_gemm(float *restrict C, size_t cs, const float *restrict A, size_t ar, size_t ac,
                     const float *restrict Bm, size_t bs, int M, int N, int K, int acc, int klo,
                     int khi, int nlo) {
    const int N0 = N - N % ATT_NR; /* columns done in register blocks */
    int i = 0;
    for (; i + ATT_MR <= M; i += ATT_MR) {
        const float *restrict a0 = A + (size_t)i * ar;
        const float *restrict a1 = a0 + ar;
        const float *restrict a2 = a1 + ar;
        const float *restrict a3 = a2 + ar;
        float *restrict c0 = C + (size_t)i * cs;
        float *restrict c1 = c0 + cs;
        float *restrict c2 = c1 + cs;
        float *restrict c3 = c2 + cs;
        const int kb = i + klo > 0 ? i + klo : 0;
        const int ke = att_min(K, i + ATT_MR - 1 + khi);
        const int nb = i + nlo > 0 ? (i + nlo) / ATT_NR * ATT_NR : 0;
        for (int n = nb; n < N0; n += ATT_NR) {
            float r0[ATT_NV][ATT_VW], r1[ATT_NV][ATT_VW], r2[ATT_NV][ATT_VW], r3[ATT_NV][ATT_VW];
            /* initial values: the C block (aliases c0..c3, hence no restrict) or zeros */
            const float *s0 = acc ? c0 + n : att_zeros;
            const float *s1 = acc ? c1 + n : att_zeros;
            const float *s2 = acc ? c2 + n : att_zeros;
            const float *s3 = acc ? c3 + n : att_zeros;
            ATT_UNROLL_NV
            for (int v = 0; v < ATT_NV; v++) {
#pragma omp simd
                for (int j = 0; j < ATT_VW; j++) {
                    r0[v][j] = s0[v * ATT_VW + j];
                    r1[v][j] = s1[v * ATT_VW + j];
                    r2[v][j] = s2[v * ATT_VW + j];
                    r3[v][j] = s3[v * ATT_VW + j];
                }
            }
            for (int k = kb; k < ke; k++) {
                const float *restrict b = Bm + (size_t)k * bs + n;
                const float x0 = a0[(size_t)k * ac], x1 = a1[(size_t)k * ac];
                const float x2 = a2[(size_t)k * ac], x3 = a3[(size_t)k * ac];
                ATT_UNROLL_NV
                for (int v = 0; v < ATT_NV; v++) {
                    const float *restrict bv = b + v * ATT_VW;
#pragma omp simd
                    for (int j = 0; j < ATT_VW; j++) {
                        r0[v][j] = fmaf(x0, bv[j], r0[v][j]);
                        r1[v][j] = fmaf(x1, bv[j], r1[v][j]);
                        r2[v][j] = fmaf(x2, bv[j], r2[v][j]);
                        r3[v][j] = fmaf(x3, bv[j], r3[v][j]);
                    }
                }
            }
            ATT_UNROLL_NV
            for (int v = 0; v < ATT_NV; v++) {
                const int c = n + v * ATT_VW;
#pragma omp simd
                for (int j = 0; j < ATT_VW; j++) {
                    c0[c + j] = r0[v][j];
                    c1[c + j] = r1[v][j];
                    c2[c + j] = r2[v][j];
                    c3[c + j] = r3[v][j];
                }
            }
        }
    }
    for (; i < M; i++) {
        const float *restrict a0 = A + (size_t)i * ar;
        float *restrict c0 = C + (size_t)i * cs;
        const int kb = i + klo > 0 ? i + klo : 0;
        const int ke = att_min(K, i + khi);
        const int nb = i + nlo > 0 ? (i + nlo) / ATT_NR * ATT_NR : 0;
        for (int n = nb; n < N0; n += ATT_NR) {
            float r0[ATT_NV][ATT_VW];
            const float *s0 = acc ? c0 + n : att_zeros;
            ATT_UNROLL_NV
            for (int v = 0; v < ATT_NV; v++) {
#pragma omp simd
                for (int j = 0; j < ATT_VW; j++) r0[v][j] = s0[v * ATT_VW + j];
            }
            for (int k = kb; k < ke; k++) {
                const float *restrict b = Bm + (size_t)k * bs + n;
                const float x0 = a0[(size_t)k * ac];
                ATT_UNROLL_NV
                for (int v = 0; v < ATT_NV; v++) {
#pragma omp simd
                    for (int j = 0; j < ATT_VW; j++)
                        r0[v][j] = fmaf(x0, b[v * ATT_VW + j], r0[v][j]);
                }
            }
            ATT_UNROLL_NV
            for (int v = 0; v < ATT_NV; v++) {
#pragma omp simd
                for (int j = 0; j < ATT_VW; j++) c0[n + v * ATT_VW + j] = r0[v][j];
            }
        }
    }
    if (N0 == N) return;
    /* Remaining N % ATT_NR columns (head dims that are not a multiple of ATT_NR): same sums in the
     * same order, accumulated in place, every column written. */
    for (i = 0; i < M; i++) {
        const float *restrict a0 = A + (size_t)i * ar;
        float *restrict c0 = C + (size_t)i * cs;
        const int kb = i + klo > 0 ? i + klo : 0;
        const int ke = att_min(K, i + khi);
        if (!acc)
            for (int n = N0; n < N; n++) c0[n] = 0.0f;
        for (int k = kb; k < ke; k++) {
            const float x0 = a0[(size_t)k * ac];
            const float *restrict b = Bm + (size_t)k * bs;
            for (int n = N0; n < N; n++) c0[n] = fmaf(x0, b[n], c0[n]);
        }
    }
}

/* xt[d*ATT_BQ + i] = x[i*xs + d] for i < n, d < hd: a tile of n rows (row stride xs floats)
 * transposed; columns n .. ATT_BQ-1 are zeroed so full-width products stay finite. Blocks of
 * 16 rows make each store a contiguous 16-float run (the loads become a gather). */
static void att_transpose(float *restrict xt, const float *restrict x, size_t xs, int n, int hd) {
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        const float *restrict xi = x + (size_t)i * xs;
        for (int d = 0; d < hd; d++) {
            float *restrict o = xt + (size_t)d * ATT_BQ + i;
#pragma omp simd
            for (int r = 0; r < 16; r++) o[r] = xi[(size_t)r * xs + d];
        }
    }
    for (; i < n; i++) {
        const float *restrict xi = x + (size_t)i * xs;
        for (int d = 0; d < hd; d++) xt[(size_t)d * ATT_BQ + i] = xi[d];
    }
    if (n < ATT_BQ)
        for (int d = 0; d < hd; d++)
            for (int c = n; c < ATT_BQ; c++) xt[(size_t)d * ATT_BQ + c] = 0.0f;
}

/* xp[i*hd + d] = x[i*xs + d] for i < n, d < hd: n rows of a strided tensor copied contiguous.
 * Used for the tiles that att_gemm reads as its B operand (every row re-read by each row block):
 * in the tensors their rows are H*hd or G*hd floats apart, a multiple of 4 KiB for the Qwen3
 * shapes (16/8 heads x 128), so a tile's rows all fall into the same few L1 sets and evict
 * each other; contiguous, they spread over the whole cache. */
static void att_pack(float *restrict xp, const float *restrict x, size_t xs, int n, int hd) {
    for (int i = 0; i < n; i++) memcpy(xp + (size_t)i * hd, x + (size_t)i * xs, sizeof(float) * hd);
}

/* x . y over n floats with 16 interleaved partial sums (lane r takes the elements d = r mod
 * 16), combined in a fixed order: vectorisable, and the same rounding whatever the alignment
 * of x and y. */
static float att_dot(const float *restrict x, const float *restrict y, int n) {
    float part[16] = {0};
    int d = 0;
    for (; d + 16 <= n; d += 16) {
#pragma omp simd
        for (int r = 0; r < 16; r++) part[r] = fmaf(x[d + r], y[d + r], part[r]);
    }
    for (int r = 0; d < n; d++, r++) part[r] = fmaf(x[d], y[d], part[r]);
    float acc = 0.0f;
    for (int r = 0; r < 16; r++) acc += part[r];
    return acc;
}

/* Width of a query tile's score columns: nq rounded up to whole register blocks. */
static inline int att_ncols(int nq) {
    return (nq + ATT_NR - 1) / ATT_NR * ATT_NR;
}

/* ---- forward ------------------------------------------------------------------------ */

/* Per-thread forward workspace, in floats: qt[hd*BQ], st[BK*BQ], o[BQ*hd], vp[BK*hd], m, l,
 * mx, alpha [BQ] each. */
static size_t att_fwd_ws_floats(int hd) {
    return (size_t)hd * ATT_BQ + (size_t)ATT_BK * ATT_BQ + 2 * (size_t)ATT_BQ * hd + 4 * ATT_BQ;
}

/* out/lse rows q0 .. q0+nq-1 of query head h of batch b. */
static void att_fwd_tile(float *out, float *lse, const float *q, const float *k, const float *v,
                         int b, int h, int q0, int T, int H, int G, int hd, float scale,
                         float *ws) {
    float *restrict qt = ws;                          /* [hd, BQ] query tile transposed */
    float *restrict st = qt + (size_t)hd * ATT_BQ;    /* [BK, BQ] scores, then probs P^T */
    float *restrict o = st + (size_t)ATT_BK * ATT_BQ; /* [BQ, hd] unnormalised output */
    float *restrict vp = o + (size_t)ATT_BQ * hd;     /* [BK, hd] value tile, contiguous */
    float *restrict m = vp + (size_t)ATT_BK * hd;     /* [BQ] running max of scaled scores */
    float *restrict l = m + ATT_BQ;                   /* [BQ] running sum of exp(s - m) */
    float *restrict mx = l + ATT_BQ;                  /* [BQ] max of the current tile */
    float *restrict alpha = mx + ATT_BQ;              /* [BQ] exp(m_old - m_new) */
    const int g = h / (H / G);
    const int nq = att_min(ATT_BQ, T - q0), nc = att_ncols(nq);
    const size_t qs = (size_t)H * hd, kvs = (size_t)G * hd; /* row strides in floats */
    const float *kb = k + ((size_t)b * T * G + g) * hd;     /* key t at kb + t*kvs */
    const float *vb = v + ((size_t)b * T * G + g) * hd;

    att_transpose(qt, q + ((size_t)(b * T + q0) * H + h) * hd, qs, nq, hd);
    memset(o, 0, sizeof(float) * (size_t)nq * hd);
    for (int i = 0; i < ATT_BQ; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
    }
    /* Keys 0 .. q0+nq-1 are visible to some query of the tile. */
    for (int k0 = 0; k0 < q0 + nq; k0 += ATT_BK) {
        const int nk = att_min(ATT_BK, T - k0);
        const int off = q0 - k0; /* query i sees key j (tile-local) iff i >= j - off */
        /* st[j][i] = k_{k0+j} . q_{q0+i}, left unwritten below the diagonal */
        att_gemm(st, ATT_BQ, kb + (size_t)k0 * kvs, kvs, 1, qt, ATT_BQ, nk, nc, hd, 0, -ATT_ALL,
                 ATT_ALL, -off);
        for (int i = 0; i < nc; i++) mx[i] = -INFINITY;
        for (int j = 0; j < nk; j++) {
            float *restrict sj = st + (size_t)j * ATT_BQ;
            const int i0 = att_min(nc, j - off > 0 ? j - off : 0); /* first query seeing j */
#pragma omp simd
            for (int i = i0; i < nc; i++) {
                const float x = sj[i] * scale;
                sj[i] = x;
                mx[i] = x > mx[i] ? x : mx[i];
            }
        }
#pragma omp simd
        for (int i = 0; i < nc; i++) {
            const float mnew = mx[i] > m[i] ? mx[i] : m[i];
            alpha[i] = vm_expf(m[i] - mnew); /* 0 on the first tile, where m = -inf */
            m[i] = mnew;
            l[i] *= alpha[i];
        }
        for (int j = 0; j < nk; j++) {
            float *restrict sj = st + (size_t)j * ATT_BQ;
            const int i0 = att_min(nc, j - off > 0 ? j - off : 0);
            for (int i = 0; i < i0; i++) sj[i] = 0.0f; /* masked: P = 0 */
#pragma omp simd
            for (int i = i0; i < nc; i++) {
                const float p = vm_expf(sj[i] - m[i]);
                sj[i] = p;
                l[i] += p;
            }
        }
        for (int i = 0; i < nq; i++) {
            if (alpha[i] == 1.0f) continue;
            float *restrict oi = o + (size_t)i * hd;
            const float a = alpha[i];
#pragma omp simd
            for (int d = 0; d < hd; d++) oi[d] *= a;
        }
        /* o[i][:] += sum_j P^T[j][i] * v_{k0+j} */
        att_pack(vp, vb + (size_t)k0 * kvs, kvs, nk, hd);
        att_gemm(o, (size_t)hd, st, 1, ATT_BQ, vp, (size_t)hd, nq, hd, nk, 1, -ATT_ALL, off + 1,
                 -ATT_ALL);
    }
    for (int i = 0; i < nq; i++) {
        const float inv = 1.0f / l[i]; /* l >= 1: the row max contributes exp(0) */
        float *restrict dst = out + ((size_t)(b * T + q0 + i) * H + h) * hd;
        const float *restrict oi = o + (size_t)i * hd;
#pragma omp simd
        for (int d = 0; d < hd; d++) dst[d] = oi[d] * inv;
        lse[((size_t)b * H + h) * T + q0 + i] = m[i] + logf(l[i]);
    }
}

void KFN(ops_cpu_attention_fwd)(float *out, float *lse, const float *q, const float *k,
                                const float *v, int B, int T, int H, int G, int hd) {
    if (B <= 0 || T <= 0 || H <= 0 || hd <= 0) return;
    const float scale = 1.0f / sqrtf((float)hd);
    const int nqt = (T + ATT_BQ - 1) / ATT_BQ;
#pragma omp parallel
    {
        float *ws = ops_cpu_alloc("attention", sizeof(float) * att_fwd_ws_floats(hd));
        /* Query tiles latest-first: the longest tasks (most key tiles) are handed out first. */
#pragma omp for collapse(3) schedule(dynamic, 1)
        for (int r = 0; r < nqt; r++)
            for (int b = 0; b < B; b++)
                for (int h = 0; h < H; h++)
                    att_fwd_tile(out, lse, q, k, v, b, h, (nqt - 1 - r) * ATT_BQ, T, H, G, hd,
                                 scale, ws);
        free(ws);
    }
}

/* ---- backward ----------------------------------------------------------------------- */

/* Per-thread backward workspace, in floats: qt, dot [hd*BQ] each, st, dst [BK*BQ] each,
 * dqa, qp, dop [BQ*hd] each, kp [BK*hd], dvec, lrow [BQ] each. */
static size_t att_bwd_ws_floats(int hd) {
    return 2 * (size_t)hd * ATT_BQ + 2 * (size_t)ATT_BK * ATT_BQ + 4 * (size_t)ATT_BQ * hd +
           2 * ATT_BQ;
}

/* Gradients of query head h of batch b over all T queries. dq is accumulated in place (acc 0:
 * written); dk/dv are accumulated into the rows dkh + t*dks, dvh + t*dks (dk/dv themselves when
 * kv_acc, or written: a scratch slice, or dk/dv asked written). */
static void att_bwd_head(float *dq, float *dkh, float *dvh, size_t dks, int kv_acc, int acc,
                         const float *dout, const float *out, const float *lse, const float *q,
                         const float *k, const float *v, int b, int h, int T, int H, int G, int hd,
                         float scale, float *ws) {
    float *restrict qt = ws;                             /* [hd, BQ] query tile transposed */
    float *restrict dot = qt + (size_t)hd * ATT_BQ;      /* [hd, BQ] dout tile transposed */
    float *restrict st = dot + (size_t)hd * ATT_BQ;      /* [BK, BQ] scores, then P^T */
    float *restrict dst = st + (size_t)ATT_BK * ATT_BQ;  /* [BK, BQ] dP^T, then dS^T * scale */
    float *restrict dqa = dst + (size_t)ATT_BK * ATT_BQ; /* [BQ, hd] dq of the query tile */
    float *restrict qp = dqa + (size_t)ATT_BQ * hd;      /* [BQ, hd] query tile, contiguous */
    float *restrict dop = qp + (size_t)ATT_BQ * hd;      /* [BQ, hd] dout tile, contiguous */
    float *restrict kp = dop + (size_t)ATT_BQ * hd;      /* [BK, hd] key tile, contiguous */
    float *restrict dvec = kp + (size_t)ATT_BK * hd;     /* [BQ] D_i = rowsum(dO_i * O_i) */
    float *restrict lrow = dvec + ATT_BQ;                /* [BQ] lse of the tile's queries */
    const int g = h / (H / G);
    const size_t qs = (size_t)H * hd, kvs = (size_t)G * hd;
    const float *kb = k + ((size_t)b * T * G + g) * hd;
    const float *vb = v + ((size_t)b * T * G + g) * hd;

    for (int q0 = 0; q0 < T; q0 += ATT_BQ) {
        const int nq = att_min(ATT_BQ, T - q0), nc = att_ncols(nq);
        const size_t row0 = ((size_t)(b * T + q0) * H + h) * hd;
        const float *qb = q + row0, *dob = dout + row0, *ob = out + row0;
        att_transpose(qt, qb, qs, nq, hd);
        att_transpose(dot, dob, qs, nq, hd);
        att_pack(qp, qb, qs, nq, hd);
        att_pack(dop, dob, qs, nq, hd);
        for (int i = 0; i < ATT_BQ; i++) {
            float acc = 0.0f, li = 0.0f;
            if (i < nq) {
                const float *restrict doi = dob + (size_t)i * qs;
                const float *restrict oi = ob + (size_t)i * qs;
                acc = att_dot(doi, oi, hd);
                li = lse[((size_t)b * H + h) * T + q0 + i];
            }
            dvec[i] = acc;
            lrow[i] = li;
        }
        memset(dqa, 0, sizeof(float) * (size_t)nq * hd);
        for (int k0 = 0; k0 < q0 + nq; k0 += ATT_BK) {
            const int nk = att_min(ATT_BK, T - k0);
            const float *kt0 = kb + (size_t)k0 * kvs, *vt0 = vb + (size_t)k0 * kvs;
            const int off = q0 - k0; /* query i sees key j (tile-local) iff i >= j - off */
            /* A scratch slice is uninitialised: a key tile's first contributions, from the
             * diagonal query tile (q0 == k0, the first to reach it), overwrite it. */
            const int acc_kv = kv_acc || k0 != q0;
            /* S^T and dP^T, left unwritten below the diagonal */
            att_gemm(st, ATT_BQ, kt0, kvs, 1, qt, ATT_BQ, nk, nc, hd, 0, -ATT_ALL, ATT_ALL, -off);
            att_gemm(dst, ATT_BQ, vt0, kvs, 1, dot, ATT_BQ, nk, nc, hd, 0, -ATT_ALL, ATT_ALL, -off);
            /* P^T and dS^T * scale for queries i < nq; masked entries are 0 because the
             * products below read them (their row blocks span the diagonal). */
            for (int j = 0; j < nk; j++) {
                float *restrict sj = st + (size_t)j * ATT_BQ;
                float *restrict dsj = dst + (size_t)j * ATT_BQ;
                const int i0 = att_min(nq, j - off > 0 ? j - off : 0);
                for (int i = 0; i < i0; i++) sj[i] = dsj[i] = 0.0f;
#pragma omp simd
                for (int i = i0; i < nq; i++) {
                    const float p = vm_expf(sj[i] * scale - lrow[i]);
                    sj[i] = p;
                    dsj[i] = p * (dsj[i] - dvec[i]) * scale;
                }
            }
            /* dq[i] += sum_j dS^T[j][i] k_{k0+j} */
            att_pack(kp, kt0, kvs, nk, hd);
            att_gemm(dqa, (size_t)hd, dst, 1, ATT_BQ, kp, (size_t)hd, nq, hd, nk, 1, -ATT_ALL,
                     off + 1, -ATT_ALL);
            /* dk[k0+j] += sum_i dS^T[j][i] q_i;  dv[k0+j] += sum_i P^T[j][i] dout_i */
            att_gemm(dkh + (size_t)k0 * dks, dks, dst, ATT_BQ, 1, qp, (size_t)hd, nk, hd, nq,
                     acc_kv, -off, ATT_ALL, -ATT_ALL);
            att_gemm(dvh + (size_t)k0 * dks, dks, st, ATT_BQ, 1, dop, (size_t)hd, nk, hd, nq,
                     acc_kv, -off, ATT_ALL, -ATT_ALL);
        }
        for (int i = 0; i < nq; i++) {
            float *restrict dqi = dq + row0 + (size_t)i * qs;
            const float *restrict src = dqa + (size_t)i * hd;
#pragma omp simd
            for (int d = 0; d < hd; d++) dqi[d] = (acc ? dqi[d] : 0.0f) + src[d];
        }
    }
}

void KFN(ops_cpu_attention_bwd)(float *dq, float *dk, float *dv, const float *dout,
                                const float *out, const float *lse, const float *q, const float *k,
                                const float *v, int B, int T, int H, int G, int hd, int dx_acc) {
    if (B <= 0 || T <= 0 || H <= 0 || hd <= 0) return;
    const float scale = 1.0f / sqrtf((float)hd);
    const int rep = H / G;
    /* Query head h = g*rep + r accumulates dk/dv of kv head g straight into dk/dv when r == 0
     * and into its own slice of sdk, sdv [B, G, rep-1, T, hd] when r >= 1. */
    float *sdk = NULL, *sdv = NULL;
    if (rep > 1) {
        /* not zeroed (ops_cpu_alloc): fully written before it is read */
        sdk = ops_cpu_alloc("attention", sizeof(float) * (size_t)B * G * (rep - 1) * T * hd);
        sdv = ops_cpu_alloc("attention", sizeof(float) * (size_t)B * G * (rep - 1) * T * hd);
    }
#pragma omp parallel
    {
        float *ws = ops_cpu_alloc("attention", sizeof(float) * att_bwd_ws_floats(hd));
#pragma omp for collapse(2) schedule(dynamic, 1)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < H; h++) {
                const int g = h / rep, r = h % rep;
                float *dkh, *dvh;
                size_t dks;
                if (r > 0) {
                    const size_t slice = (((size_t)b * G + g) * (rep - 1) + r - 1) * T * hd;
                    dkh = sdk + slice;
                    dvh = sdv + slice;
                    dks = (size_t)hd;
                } else {
                    dkh = dk + ((size_t)b * T * G + g) * hd;
                    dvh = dv + ((size_t)b * T * G + g) * hd;
                    dks = (size_t)G * hd;
                }
                att_bwd_head(dq, dkh, dvh, dks, r == 0 && dx_acc, dx_acc, dout, out, lse, q, k, v,
                             b, h, T, H, G, hd, scale, ws);
            }
        free(ws);
        if (rep > 1) {
            /* After the barrier of the loop above: dk[b,t,g] += sdk[b,g,r-1,t] for r = 1 ..
             * rep-1 in ascending order (dv alike). */
#pragma omp for collapse(2) schedule(static)
            for (int b = 0; b < B; b++)
                for (int t = 0; t < T; t++)
                    for (int g = 0; g < G; g++) {
                        float *restrict dkr = dk + ((size_t)(b * T + t) * G + g) * hd;
                        float *restrict dvr = dv + ((size_t)(b * T + t) * G + g) * hd;
                        for (int r = 1; r < rep; r++) {
                            const size_t src =
                                ((((size_t)b * G + g) * (rep - 1) + r - 1) * T + t) * hd;
#pragma omp simd
                            for (int d = 0; d < hd; d++) dkr[d] += sdk[src + d];
#pragma omp simd
                            for (int d = 0; d < hd; d++) dvr[d] += sdv[src + d];
                        }
                    }
        }
    }
    free(sdk);
    free(sdv);
}
