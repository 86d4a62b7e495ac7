/* Causal grouped-query attention as GEMM calls: `attention/bf16` (the bf16 engine's GEMMs:
 * AMX / AVX512_BF16 through oneDNN where the CPU has them) and `attention/gemm` (the same
 * algorithm on the fp32 SGEMM, which checks it at fp32 tolerances).
 *
 * Layouts as attention.c: q, out, dq [B,T,H,hd]; k, v, dk, dv [B,T,G,hd]; lse [B,H,T]; query
 * head h reads kv head g = h / (H/G); s = (q . k) / sqrt(hd); lse is the natural log-sum-exp
 * of a row of scaled scores over the keys <= the query.
 *
 * Why GEMM calls: on bf16 units the library's GEMM is the one fast bf16 dot product titan has
 * (it picks AMX tiles or vdpbf16ps itself), and attention's products are GEMMs whose operands
 * are strided views of q, k, v (ld = H*hd or G*hd): no copies. Each task takes a block of
 * BQ query rows and ALL the keys it sees at once, [BQ, r1] scores (r1 = the block's last
 * query + 1), so the products are long (N or K up to T) rather than 64 x 64 tiles whose call
 * overhead would dominate a GEMM that fast, and the softmax is exact per row (no online
 * rescaling). Only the upper triangle of the diagonal BQ x BQ square is computed and masked in
 * vain (~BQ / 2T of the work).
 *
 * Forward, one task per (b, h, query block [r0, r1)):
 *   S = Q[r0:r1] K[0:r1]^T,  P = softmax(S * scale) (fp32; masked keys 0),  lse,
 *   O[r0:r1] = bf16(P) V[0:r1]  (amx mode: bf16(exp(S scale - max)) V / sum, below).
 * Backward in one pass of 5 products, one task per (b, h), its key blocks [c0, c1) in order,
 * each over the queries [c0, T) that see it (amx mode: per chunk of AG_BK_AMX queries, in
 * order, the key blocks they see, in order; the same sums, split at other K blocks):
 *   D = rowsum(bf16(dO) * O) (fp32, before the pass; the dO dP is made of, so that
 *       sum_j P_ij dP_ij = D_i holds but for P's rounding: from the fp32 dO, D carried its
 *       2^-9 relative difference into every dS of the row, where the true dS can be far
 *       smaller: a query that sees one key had a nonzero dQ, an audit helper's finding),
 *   S^T = K[c0:c1] Q^T, dP^T = V[c0:c1] dO^T, P^T from S^T and lse, dS^T = P^T (dP^T - D) scale,
 *   dV_h[c0:c1] = bf16(P^T) dO, dK_h[c0:c1] = bf16(dS^T) Q, dQ[c0:T] += bf16(dS^T)^T K[c0:c1].
 * dQ of head h is accumulated by its task alone, key block by key block in order; with several
 * query heads per kv head, each head's dK and dV go to a slice of its own, summed into dk and
 * dv per group in head order after the pass (one head per kv head: straight into them). So
 * every sum has a fixed order: bitwise the same for any thread count. (Until session 12 a
 * two-pass form, dQ per query block then dK and dV per key block, recomputed S and dP: 7
 * products; on a Zen 4 with AVX512_BF16 the one pass with 128-row blocks took the 0.6B x 2048
 * backward from 258 to 180-200 ms, bench/RESULTS.md.) The price: B x H tasks, fewer than the
 * two-pass form's B x H x T / BQ, and B x H x T x hd x 2 floats of slices where H > G.
 * In bf16, q, k, v and dout are converted once per call, P and dS per task, all to the
 * engine's storage (ops_bf16_mirror_convert); the scores, softmax, lse, D and every
 * accumulation stay fp32. Rounding P (and dS) to bf16 before their products is what autocast's
 * eager attention does (softmax in fp32, cast to bf16, matmul); it makes this implementation
 * differ from the fp32 kernel on bf16 inputs by the rounding of P (docs/kernels.md's bf16
 * tolerance for attention).
 *
 * On a CPU with AVX512_BF16 and no AMX (ops_cpu_attention_dpbf16_usable) the bf16 forward runs
 * attention_dpbf16.c instead: the same tasks and softmax with both products on a vdpbf16ps
 * micro-kernel over K and V packed once per call: 5-15% less CPU time at 0.6B x 2048 on a Zen 4,
 * level at the bench model's heads (bench/RESULTS.md, session 17); same rounding points, and
 * on that CPU bitwise the oneDNN calls' results at hd <= 64 (not at hd 128: oneDNN sums in
 * another order there). The backward stays here: the same one-pass backward on that
 * micro-kernel (chunks of 64 queries per 128-key block, dQ / dK / dV accumulated per chunk,
 * three bf16 conversions per score) was level to 12% slower in CPU time and 13-20% at two
 * threads than these calls, whose long products write each dK, dV block once.
 *
 * With ops_cpu_bf16_amx_layouts()'s OPS_CPU_AMX_ATTENTION (the default with AMX-BF16) every
 * product is made dense instead (ag_mode's `dense`: head-major copies of q, k, v and dout, O and dQ
 * through a per-thread block), so that oneDNN's brgemm takes it.
 *
 * Memory: per thread BQ x T floats in forward, 2 x BQ x T in backward (and as many bf16 for the
 * onednn engine; T = 2048, BQ = 128: 1 or 2 MiB, and 0.5 or 1 MiB; dense: T x hd floats more in
 * backward, BQ x hd in forward; amx mode: a forward's 32 x T floats and bf16, a backward's three
 * 128 x 256 bf16 blocks and 256 x hd floats); per call the converted q, k, v (and dout), D [B,H,T]
 * and, in the backward with H > G (or dense), the per-head dK and dV slices. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cpu/isa.h"
#include "ops/cpu/vmath.h"

/* query rows of a forward task, keys of a backward key block. 128, not 64: each product call
 * packs its operands afresh, and twice the rows amortise that (0.6B x 2048 on a Zen 4:
 * forward 71 -> 65 ms, the two-pass backward 258 -> 226; 256 was slower again). */
#define AG_BQ 128
/* query rows of an amx forward task: its operands are packed once per call, so a block's size
 * no longer amortises packing, and 32 rows keep its [rows, n] fp32 scores and bf16 P within L2
 * beside the packed K and V (0.6B x 2048 on the AMX Xeon, forward ms a layer, 128 / 32 rows
 * alternated: 18.9 / 16.2, 18.1 / 15.7, 17.3 / 16.2; 64 rows 17.3-17.7). The same values: a
 * row's softmax and P V only add exact zeros for the masked keys past it. */
#define AG_FQ_AMX 32
/* queries of an amx backward task's chunk: a key block's P^T and dS^T are made and used a chunk
 * at a time ([128, 256] bf16, 64 KiB each, within L2 beside their products' operands) rather
 * than over all T - c0 queries at once (1 MiB at T = 2048, written out of L2 and read back by
 * three products): 0.6B x 2048 backward 48-50 -> 43-45 ms a layer (AMX Xeon, 2 threads; 128 and
 * 512 level with 256). The chunks in the outer loop, each with all the key blocks it sees (not
 * each key block over all its chunks): the chunk's packed Q, dO and its dQ rows stay in L2
 * across the key blocks, dK and dV rows stream instead: -5-8% again (-7-10% at T = 4096, level
 * at 1024). Any chunk size or order gives the same bits: a chunk only splits fp32 sums at a store
 * and a reload, at multiples of 32 queries, and every sum keeps its order. */
#define AG_BK_AMX 256

typedef struct {
    ops_prec prec;
    size_t es; /* bytes per operand element: 4 (fp32, or the emulated engine's) or 2 */
    /* Every product on dense operands and results (leading dimension = width): q, k, v, dout
     * copied head-major, O and dQ through per-thread [rows, hd] blocks, dK and dV through the
     * per-head slices. oneDNN's brgemm takes only dense operands (session 10: a strided one
     * falls to its gemm driver, which packs both per call); with AMX, brgemm runs attention's
     * products 2-2.6x faster a core (128x1024x128, 128x128x1024 ta, 1024x128x128: 550-760
     * against 265-300 GFLOP/s, one thread, build/bench_dnnl_impls; bench/RESULTS.md "Session
     * 19"). With ops_cpu_bf16_amx_layouts()'s OPS_CPU_AMX_ATTENTION (the default with AMX-BF16, on
     * elsewhere by TITAN_AMX_LAYOUTS: see cpu.h). */
    int dense;
    /* Dense, and every product on titan's AMX tiles (ops_cpu_amx_gemm_packed) where T and hd
     * are multiples of 32: the B operands (K^T, V; in backward Q^T, Q, dO^T, dO, K) packed in
     * k pairs once per call, so that no product packs anything (dS^T for dQ is transposed per
     * key block and query chunk); q, dout (backward), k, v (forward) packed straight from the fp32
     * tensors, without head-major copies. The forward rounds P unnormalised and divides O by the
     * row's sum after P V (FlashAttention's order, and PyTorch's CPU flash attention's; one pass
     * over the scores fewer). The backward's S^T and dP^T are made and turned into P and dS one 32
     * x 32 block at a time in L1 (ops_cpu_amx_attn_grad_scores), never stored as fp32: 0.6B x 2048
     * forward 17.3 -> 16.0, backward 55-58 -> 44.5 ms a layer (Xeon AMX, 2 threads, session 24).
     * ops_cpu_bf16_amx_attention(), the default with AMX-BF16. */
    int amx;
} ag_mode;

static ag_mode ag_mode_of(ops_prec prec) {
    const size_t es = prec == OPS_PREC_BF16 ? ops_bf16_mirror_bytes(1) : sizeof(float);
    const int dense =
        es == sizeof(uint16_t) && (ops_cpu_bf16_amx_layouts() & OPS_CPU_AMX_ATTENTION);
    return (ag_mode){prec, es, dense, dense && ops_cpu_bf16_amx_attention()};
}

/* One (sequence, head) of an operand packed for the AMX products: K = hd, N = T (tb: op(B) =
 * X^T, the scores' and dP's right operand) or K = T, N = hd (X as it is, P V's and the
 * gradients' right operand); T hd / 2 words each (T, hd multiples of 32). x: the head's first
 * row, rows ld elements apart: a head-major bf16 copy (ld hd), or the op's fp32 tensor itself
 * (f32; ld nh hd), rounded as the copy would be, which then need not be made. */
static void ag_pack(uint32_t *dst, int tb, const void *x, int f32, size_t ld, int T, int hd) {
    ops_cpu_amx_pack(dst, tb, x, f32, (int)ld, tb ? hd : T, tb ? T : hd);
}

/* 1 when a call at these shapes runs on AMX tiles (the amx mode takes T, hd multiples of 32,
 * hd up to OPS_CPU_AMX_PACK_BOTH_HD) */
static int ag_amx(ag_mode m, int T, int hd) {
    return m.amx && T % 32 == 0 && hd % 32 == 0 && hd <= OPS_CPU_AMX_PACK_BOTH_HD;
}

/* An operand tensor of nh heads: element (b, t, head, c) at p + (b bs + head hs + t ld + c)
 * elements; token-major as the op's tensors ([B,T,nh,hd]) or head-major ([B,nh,T,hd]). */
typedef struct {
    const void *p;
    size_t ld, hs, bs;
} ag_op;

/* x [B,T,nh,hd] as GEMM operands: x itself in fp32, else its registered bf16 copy (a tensor
 * the model stored as bf16: ops_bf16_hold_rounded) or a converted copy in *own; in dense mode
 * a head-major bf16 copy in *own (converted from x, whose values a held copy equals). */
static ag_op ag_operand(ag_mode m, const float *x, int B, int T, int nh, int hd, void **own) {
    const size_t n = (size_t)B * T * nh * hd, ld = (size_t)nh * hd;
    *own = NULL;
    if (m.prec != OPS_PREC_BF16) return (ag_op){x, ld, hd, (size_t)T * ld};
    if (m.dense) {
        uint16_t *d = ops_cpu_scratch_take("attention", m.es * n);
#pragma omp parallel for collapse(2) schedule(static)
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++)
                for (int h = 0; h < nh; h++) {
                    const float *restrict src = x + ((size_t)b * T + t) * ld + (size_t)h * hd;
                    uint16_t *restrict dst = d + (((size_t)b * nh + h) * T + t) * hd;
#pragma omp simd
                    for (int c = 0; c < hd; c++) dst[c] = ops_cpu_bf16_bits(src[c]);
                }
        *own = d;
        return (ag_op){d, (size_t)hd, (size_t)T * hd, (size_t)nh * T * hd};
    }
    const void *held = ops_cpu_bf16_mirror_of(x, n);
    if (!held) {
        *own = ops_cpu_scratch_take("attention", m.es * n);
        ops_bf16_mirror_convert(*own, 0, x, n);
    }
    return (ag_op){held ? held : *own, ld, hd, (size_t)T * ld};
}

/* Row t of head `head` of sequence b of an operand tensor (NULL for one not made: the amx
 * mode's packed-only operands). */
static const void *ag_row(ag_mode m, ag_op o, int b, int head, size_t t) {
    return o.p ? (const char *)o.p + ((size_t)b * o.bs + (size_t)head * o.hs + t * o.ld) * m.es
               : NULL;
}

/* rows [r0, r0 + M) of head h of sequence b of a token-major [B,T,H,hd] fp32 tensor x and a
 * dense [M, hd] block: copied one way (to_x: x = blk) or the other */
static void ag_rows_copy(float *x, float *blk, int to_x, int b, int T, int H, int h, int r0, int M,
                         int hd) {
    for (int i = 0; i < M; i++) {
        float *xr = x + (((size_t)b * T + r0 + i) * H + h) * hd, *br = blk + (size_t)i * hd;
        memcpy(to_x ? xr : br, to_x ? br : xr, sizeof(float) * (size_t)hd);
    }
}

/* Large per-call buffers (the head-major operand copies, the H > G backward's dK / dV slices:
 * 33.5 MB a layer at 0.6B x 2048, the packed operands, the AVX512_BF16 forward's workspace)
 * come from ops_cpu_scratch_take (scratch.c), kept between calls: a fresh buffer per call was a
 * page fault and its zeroing every 4 KiB (session 13: ~230k faults a 0.6B step from the
 * slices; session 29: 20k a 30B-A3B-reduced step from the operand copies). */

/* Row i of a [rows, n] operand block: src (fp32, n values) stored as the engine's operands
 * at dst (bf16 bits, or bf16-rounded fp32 in place when dst == src); fp32 runs use src as it
 * is. Done row by row while the row is in L1, not as a pass over the block. */
static void ag_store_row(ag_mode m, void *dst, float *src, int n) {
    if (m.prec != OPS_PREC_BF16) return;
    if (m.es == sizeof(uint16_t)) {
        uint16_t *restrict h = dst;
#pragma omp simd
        for (int j = 0; j < n; j++) h[j] = ops_cpu_bf16_bits(src[j]);
    } else {
        float *f = dst; /* may be src itself (rounded in place): no restrict */
#pragma omp simd
        for (int j = 0; j < n; j++) f[j] = ops_cpu_bf16_value(ops_cpu_bf16_bits(src[j]));
    }
}

/* The operand block that ag_store_row fills from the fp32 block f: f itself unless the
 * storage is bf16 bits, then h. */
static void *ag_block(ag_mode m, float *f, void *h) {
    return m.prec == OPS_PREC_BF16 && m.es == sizeof(uint16_t) ? h : (void *)f;
}

static void ag_gemm(ag_mode m, int ta, int tb, int M, int N, int K, const void *A, int lda,
                    const void *B, int ldb, int acc, float *C, int ldc) {
    if (m.prec == OPS_PREC_BF16)
        ops_cpu_gemm16(ta, tb, M, N, K, A, lda, B, ldb, acc, C, ldc);
    else
        ops_cpu_sgemm_task(ta, tb, M, N, K, A, lda, B, ldb, acc, C, ldc);
}

/* A thread's workspace: [rows, n] score blocks (s, and d in backward: fp32, and for bf16 bits
 * their operand copies; an amx backward (t16) only the copies and dS^T [n, rows], its scores
 * never leaving L1: ops_cpu_amx_attn_grad_scores), and in dense mode an [orows, hd] fp32 block
 * for a task's O rows or dQ. */
typedef struct {
    float *s, *d, *o;
    void *s16, *d16;
    uint16_t *t16;
} ag_ws;

static ag_ws ag_ws_new(ag_mode m, int rows, int n, int bwd, int t16, int orows, int hd) {
    const size_t e = (size_t)rows * n, h = m.es == sizeof(uint16_t) ? e * m.es : 0;
    return (ag_ws){t16 ? NULL : ops_cpu_alloc("attention", e * sizeof(float)),
                   bwd && !t16 ? ops_cpu_alloc("attention", e * sizeof(float)) : NULL,
                   m.dense ? ops_cpu_alloc("attention", sizeof(float) * (size_t)orows * hd) : NULL,
                   h ? ops_cpu_alloc("attention", h) : NULL,
                   h && bwd ? ops_cpu_alloc("attention", h) : NULL,
                   t16 ? ops_cpu_alloc("attention", h) : NULL};
}

static void ag_ws_free(ag_ws *w) {
    free(w->s);
    free(w->d);
    free(w->o);
    free(w->s16);
    free(w->d16);
    free(w->t16);
}

/* Blocks of bq rows in T. The forward hands out the costliest blocks first (the last query
 * blocks, which see the most keys) so that dynamic scheduling ends evenly. */
static int ag_blocks(int T, int bq) {
    return (T + bq - 1) / bq;
}

/* Task t of the forward: query rows [r0, r0 + M) of head h of
 * sequence b (kv head g), which see keys [0, n). */
typedef struct {
    int b, h, g, r0, M, n;
} ag_qblock;

static ag_qblock ag_qblock_of(long t, int nb, int bq, int T, int H, int rep) {
    const int qb = nb - 1 - (int)(t % nb), h = (int)(t / nb % H), b = (int)(t / nb / H);
    const int r0 = qb * bq, r1 = r0 + bq < T ? r0 + bq : T;
    return (ag_qblock){b, h, h / rep, r0, r1 - r0, r1};
}

/* out[M, n] (ld n) = q[x's rows, head h] k[keys 0..n, head g]^T: the scores of block x. */
static void ag_rows_by_keys(ag_mode md, const ag_qblock *x, int hd, ag_op q, ag_op k, float *out) {
    ag_gemm(md, 0, 1, x->M, x->n, hd, ag_row(md, q, x->b, x->h, x->r0), (int)q.ld,
            ag_row(md, k, x->b, x->g, 0), (int)k.ld, 0, out, x->n);
}

static void ag_fwd(ag_mode md, float *out, float *lse, const float *q, const float *k,
                   const float *v, int B, int T, int H, int G, int hd) {
    const int amx = ag_amx(md, T, hd), bq = amx ? AG_FQ_AMX : AG_BQ;
    const int rep = H / G, nb = ag_blocks(T, bq);
    const float scale = 1.0f / sqrtf((float)hd);
    void *own[3] = {NULL, NULL, NULL};
    /* amx: K and V are only packed, straight from k and v */
    const ag_op q16 = ag_operand(md, q, B, T, H, hd, &own[0]),
                k16 = amx ? (ag_op){0} : ag_operand(md, k, B, T, G, hd, &own[1]),
                v16 = amx ? (ag_op){0} : ag_operand(md, v, B, T, G, hd, &own[2]);
    const size_t ldq = (size_t)H * hd, ldk = (size_t)G * hd,
                 hw = (size_t)T * hd / 2; /* hw: a packed head, words */
    uint32_t *kt =
                 amx ? ops_cpu_scratch_take("attention", sizeof(uint32_t) * 2 * B * G * hw) : NULL,
             *vp = amx ? kt + (size_t)B * G * hw : NULL;
    if (amx) {
#pragma omp parallel for collapse(2) schedule(static)
        for (int b = 0; b < B; b++)
            for (int g = 0; g < G; g++) {
                const size_t x0 = (size_t)b * T * ldk + (size_t)g * hd; /* row 0 of head g */
                ag_pack(kt + ((size_t)b * G + g) * hw, 1, k + x0, 1, ldk, T, hd);
                ag_pack(vp + ((size_t)b * G + g) * hw, 0, v + x0, 1, ldk, T, hd);
            }
    }
#pragma omp parallel
    {
        ag_ws w = ag_ws_new(md, bq, T, 0, 0, bq, hd);
#pragma omp for schedule(dynamic, 1)
        for (long task = 0; task < (long)B * H * nb; task++) {
            const ag_qblock x = ag_qblock_of(task, nb, bq, T, H, rep);
            const int b = x.b, h = x.h, g = x.g, r0 = x.r0, M = x.M, n = x.n;
            const size_t bg = (size_t)b * G + g;
            if (amx) /* the 16-key blocks of K^T are hd * 8 words apart */
                ops_cpu_amx_gemm_packed(M, n, hd, ag_row(md, q16, b, h, r0), hd, kt + bg * hw,
                                        (size_t)hd * 8, 0, w.s, n);
            else
                ag_rows_by_keys(md, &x, hd, q16, k16, w.s);
            void *p16 = ag_block(md, w.s, w.s16);
            if (amx) { /* P unnormalised; O's rows scaled by 1 / the row's sum on their way
                        * from the dense block (V's 16-column blocks T * 8 words apart) to out,
                        * whose rows, 8 KB apart at 0.6B, the tiles would store to one L1 set */
                float rl[AG_BQ];
                ops_cpu_amx_softmax_rows(p16, w.s, M, n, r0, scale,
                                         lse + ((size_t)b * H + h) * T + r0, rl);
                ops_cpu_amx_gemm_packed(M, hd, n, p16, n, vp + bg * hw, (size_t)T * 8, 0, w.o, hd);
                for (int i = 0; i < M; i++) {
                    float *restrict o = out + ((size_t)b * T + r0 + i) * ldq + (size_t)h * hd;
                    const float *restrict x = w.o + (size_t)i * hd;
#pragma omp simd
                    for (int c = 0; c < hd; c++) o[c] = x[c] * rl[i];
                }
                continue;
            }
            for (int i = 0; i < M; i++) {
                float *s = w.s + (size_t)i * n, l; /* rounded in place below: no restrict */
                const int nv = r0 + i + 1;         /* keys 0 .. query */
                const float mx = vm_softmax_exp_row(s, nv, scale, &l), inv = 1.0f / l;
#pragma omp simd
                for (int j = 0; j < nv; j++) s[j] *= inv;
                for (int j = nv; j < n; j++) s[j] = 0.0f;
                lse[((size_t)b * H + h) * T + r0 + i] = mx + logf(l);
                ag_store_row(md, (char *)p16 + (size_t)i * n * md.es, s, n);
            }
            float *o = md.dense ? w.o : out + ((size_t)b * T + r0) * ldq + (size_t)h * hd;
            ag_gemm(md, 0, 0, M, hd, n, p16, n, ag_row(md, v16, b, g, 0), (int)v16.ld, 0, o,
                    md.dense ? hd : (int)ldq);
            if (md.dense) ag_rows_copy(out, w.o, 1, b, T, H, h, r0, M, hd);
        }
        ag_ws_free(&w);
    }
    ops_cpu_scratch_give(kt);
    for (int i = 0; i < 3; i++) ops_cpu_scratch_give(own[i]);
}

/* dq, dk, dv (+)= the gradients (acc: += or =). Written, dQ's first key block (it spans all T
 * queries) and each key block's dK / dV rows (their first product: the amx mode's first chunk)
 * start from zeros, the bits of += on zeroed buffers. */
static void ag_bwd(ag_mode md, float *dq, float *dk, float *dv, const float *dout, const float *out,
                   const float *lse, const float *q, const float *k, const float *v, int B, int T,
                   int H, int G, int hd, int acc) {
    const int rep = H / G, nb = ag_blocks(T, AG_BQ);
    const float scale = 1.0f / sqrtf((float)hd);
    const size_t nq = (size_t)B * T * H * hd;
    const int amx = ag_amx(md, T, hd);
    void *own[4] = {NULL, NULL, NULL, NULL};
    /* amx: Q and dO are only packed, straight from q and dout; K and V are the products' left
     * operands, head-major */
    const ag_op q16 = amx ? (ag_op){0} : ag_operand(md, q, B, T, H, hd, &own[0]),
                k16 = ag_operand(md, k, B, T, G, hd, &own[1]),
                v16 = ag_operand(md, v, B, T, G, hd, &own[2]),
                do16 = amx ? (ag_op){0} : ag_operand(md, dout, B, T, H, hd, &own[3]);
    float *D =
        ops_cpu_alloc("attention", sizeof(float) * (size_t)B * H * T); /* [B,H,T] rowsum(dO * O) */
    const int bf = md.prec == OPS_PREC_BF16; /* D from the rounded dO the products read */
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < H; h++) {
                const size_t o = (((size_t)b * T + t) * H + h) * hd;
                float d = 0.0f; /* vector partial sums, a fixed order per build: 1.8 -> 1.15 ms a
                                 * 0.6B x 2048 layer (a scalar chain of hd dependent adds) */
#pragma omp simd reduction(+ : d)
                for (int c = 0; c < hd; c++) {
                    const float g = dout[o + c];
                    d += (bf ? ops_cpu_bf16_value(ops_cpu_bf16_bits(g)) : g) * out[o + c];
                }
                D[((size_t)b * H + h) * T + t] = d;
            }
    const size_t ldq = (size_t)H * hd, ldk = (size_t)G * hd, hw = (size_t)T * hd / 2;
    /* amx: per (b, h) Q^T, Q, dO^T, dO and per (b, g) K, packed once (hw words each) */
    const size_t nh = (size_t)B * H * hw; /* words of one per-head layout */
    uint32_t *pk =
        amx ? ops_cpu_scratch_take("attention", sizeof(uint32_t) * (4 * nh + (size_t)B * G * hw))
            : NULL;
    struct {
        uint32_t *qt, *q, *dot, *dout, *k;
    } P = {0};
    if (amx) {
        P.qt = pk, P.q = pk + nh, P.dot = pk + 2 * nh, P.dout = pk + 3 * nh, P.k = pk + 4 * nh;
#pragma omp parallel for collapse(2) schedule(static)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < H; h++) {
                const size_t o = ((size_t)b * H + h) * hw,
                             x0 = (size_t)b * T * ldq + (size_t)h * hd;
                ops_cpu_amx_pack_both(P.qt + o, P.q + o, q + x0, (int)ldq, T, hd);
                ops_cpu_amx_pack_both(P.dot + o, P.dout + o, dout + x0, (int)ldq, T, hd);
                if (h % rep == 0)
                    ag_pack(P.k + ((size_t)b * G + h / rep) * hw, 0, ag_row(md, k16, b, h / rep, 0),
                            0, hd, T, hd);
            }
    }
    /* With several query heads per kv head (or dense results), each head's dK and dV go to its
     * own [T, hd] slice first (written by the key block's first product, added to by the amx
     * mode's later chunks: never read before), summed per group in head order below; with one,
     * straight into dk and dv. */
    float *part =
        rep > 1 || md.dense ? ops_cpu_scratch_take("attention", sizeof(float) * 2 * nq) : NULL;
#pragma omp parallel
    {
        /* amx: P^T, dS^T per chunk of queries, dQ per chunk */
        const int bk = amx && T > AG_BK_AMX ? AG_BK_AMX : T;
        ag_ws w = ag_ws_new(md, AG_BQ, bk, 1, amx, bk, hd);
        /* one task per (b, h): its key blocks in order, each over the queries [c0, T) that see
         * it (amx mode: its query chunks in order, each over the key blocks it sees); dQ of head
         * h accumulates over the key blocks in this task alone */
#pragma omp for schedule(dynamic, 1)
        for (long task = 0; task < (long)B * H; task++) {
            const int h = (int)(task % H), b = (int)(task / H), g = h / rep;
            const size_t row = (size_t)b * T;
            float *dkh =
                      part ? part + ((size_t)b * H + h) * T * hd : dk + row * ldk + (size_t)g * hd,
                  *dvh = part ? part + nq + ((size_t)b * H + h) * T * hd
                              : dv + row * ldk + (size_t)g * hd;
            const size_t ldp = part ? (size_t)hd : ldk;
            if (amx) {
                /* this head's packed operands: the 16-query blocks of Q^T, dO^T hd * 8 words
                 * apart, the k pairs of Q, dO, K 16 words; 16-column blocks T * 8 words apart */
                const size_t bh = ((size_t)b * H + h) * hw, ls = (size_t)T * 8;
                const uint32_t *pkh = P.k + ((size_t)b * G + g) * hw;
                const float *lh = lse + ((size_t)b * H + h) * T, *dh = D + ((size_t)b * H + h) * T;
                uint16_t *p16 = w.s16, *ds16 = w.d16;
                /* per chunk of queries [j0, j1), the key blocks [c0, c1) they see, in order:
                 * P^T, dS^T [M, nn] for the block's queries in the chunk [q0, j1), dV and dK's
                 * next K block, dQ[q0 : j1] += dS K[c0:c1] (the chunk's dQ rows in a [256, hd]
                 * block, copied in with acc and out after the chunk) */
                for (int j0 = 0; j0 < T; j0 += AG_BK_AMX) {
                    const int j1 = j0 + AG_BK_AMX < T ? j0 + AG_BK_AMX : T;
                    if (acc) ag_rows_copy(dq, w.o, 0, b, T, H, h, j0, j1 - j0, hd);
                    for (int c0 = 0; c0 < j1; c0 += AG_BQ) {
                        const int c1 = c0 + AG_BQ < T ? c0 + AG_BQ : T, M = c1 - c0,
                                  q0 = j0 > c0 ? j0 : c0, nn = j1 - q0;
                        /* dV, dK rows: written by the key block's first chunk (amx is dense:
                         * into the slices, whatever acc); dQ rows: by the first key block (but
                         * with acc, onto the rows copied in) */
                        const int acc_kv = q0 > c0, acc_q = c0 > 0 || acc;
                        ops_cpu_amx_attn_grad_scores(
                            p16, ds16, ag_row(md, k16, b, g, c0), ag_row(md, v16, b, g, c0), hd,
                            P.qt + bh + (size_t)q0 * hd / 2, P.dot + bh + (size_t)q0 * hd / 2,
                            (size_t)hd * 8, M, nn, hd, scale, lh + q0, dh + q0, q0 - c0);
                        ops_cpu_amx_gemm_packed(M, hd, nn, p16, nn, P.dout + bh + (size_t)q0 * 8,
                                                ls, acc_kv, dvh + (size_t)c0 * ldp, (int)ldp);
                        ops_cpu_amx_gemm_packed(M, hd, nn, ds16, nn, P.q + bh + (size_t)q0 * 8, ls,
                                                acc_kv, dkh + (size_t)c0 * ldp, (int)ldp);
                        ops_cpu_amx_transpose(w.t16, ds16, nn, M, nn); /* dS [nn, M] */
                        ops_cpu_amx_gemm_packed(nn, hd, M, w.t16, M, pkh + (size_t)c0 * 8, ls,
                                                acc_q, w.o + (size_t)(q0 - j0) * hd, hd);
                    }
                    ag_rows_copy(dq, w.o, 1, b, T, H, h, j0, j1 - j0, hd);
                }
                continue;
            }
            /* dQ of head h: dq's rows themselves, or (dense) a [T, hd] block they are copied
             * into and back from (the same sums in the same order) */
            float *dqh = md.dense ? w.o : dq + row * ldq + (size_t)h * hd;
            const size_t ldqh = md.dense ? (size_t)hd : ldq;
            if (md.dense && acc) ag_rows_copy(dq, w.o, 0, b, T, H, h, 0, T, hd);
            for (int kb = 0; kb < nb; kb++) {
                /* dV, dK rows of this key block: summed in or written; dQ: its first block */
                const int acc_kv = !part && acc, acc_q = kb > 0 || acc;
                const int c0 = kb * AG_BQ, c1 = c0 + AG_BQ < T ? c0 + AG_BQ : T, M = c1 - c0,
                          n = T - c0; /* queries c0 .. T-1 */
                const void *kc = ag_row(md, k16, b, g, c0), *vc = ag_row(md, v16, b, g, c0),
                           *qc = ag_row(md, q16, b, h, c0), *doc = ag_row(md, do16, b, h, c0);
                const float *restrict lrow = lse + ((size_t)b * H + h) * T + c0,
                                      *restrict drow = D + ((size_t)b * H + h) * T + c0;
                void *p16 = ag_block(md, w.s, w.s16), *ds16 = ag_block(md, w.d, w.d16);
                ag_gemm(md, 0, 1, M, n, hd, kc, (int)k16.ld, qc, (int)q16.ld, 0, w.s, n);
                ag_gemm(md, 0, 1, M, n, hd, vc, (int)v16.ld, doc, (int)do16.ld, 0, w.d, n);
                for (int i = 0; i < M; i++) { /* key c0 + i, seen by queries j >= i */
                    /* rounded in place below: no restrict */
                    float *p = w.s + (size_t)i * n, *ds = w.d + (size_t)i * n;
                    for (int j = 0; j < i; j++) p[j] = ds[j] = 0.0f;
#pragma omp simd
                    for (int j = i; j < n; j++) {
                        const float pj = vm_expf(p[j] * scale - lrow[j]);
                        ds[j] = pj * (ds[j] - drow[j]) * scale;
                        p[j] = pj;
                    }
                    ag_store_row(md, (char *)p16 + (size_t)i * n * md.es, p, n);
                    ag_store_row(md, (char *)ds16 + (size_t)i * n * md.es, ds, n);
                }
                /* dV[c0:c1] (+)= P^T dO, dK[c0:c1] (+)= dS^T Q, dQ[c0:T] += dS K[c0:c1] */
                ag_gemm(md, 0, 0, M, hd, n, p16, n, doc, (int)do16.ld, acc_kv,
                        dvh + (size_t)c0 * ldp, (int)ldp);
                ag_gemm(md, 0, 0, M, hd, n, ds16, n, qc, (int)q16.ld, acc_kv,
                        dkh + (size_t)c0 * ldp, (int)ldp);
                ag_gemm(md, 1, 0, n, hd, M, ds16, n, kc, (int)k16.ld, acc_q,
                        dqh + (size_t)c0 * ldqh, (int)ldqh);
            }
            if (md.dense) ag_rows_copy(dq, w.o, 1, b, T, H, h, 0, T, hd);
        }
        ag_ws_free(&w);
        if (part) { /* dk, dv[b, t, g] (+)= the group's heads' slices, in head order */
#pragma omp for collapse(2) schedule(static)
            for (int b = 0; b < B; b++)
                for (int t = 0; t < T; t++)
                    for (int h = 0; h < H; h++) {
                        const size_t src = (((size_t)b * H + h) * T + t) * hd,
                                     dst = ((size_t)b * T + t) * ldk + (size_t)(h / rep) * hd;
                        const int add = acc || h % rep; /* the group's first head: written */
#pragma omp simd
                        for (int c = 0; c < hd; c++) {
                            dk[dst + c] = (add ? dk[dst + c] : 0.0f) + part[src + c];
                            dv[dst + c] = (add ? dv[dst + c] : 0.0f) + part[nq + src + c];
                        }
                    }
        }
    }
    ops_cpu_scratch_give(part);
    ops_cpu_scratch_give(pk);
    free(D);
    for (int i = 0; i < 4; i++) ops_cpu_scratch_give(own[i]);
}

void KFN(ops_cpu_attention_gemm_fwd)(float *out, float *lse, const float *q, const float *k,
                                     const float *v, int B, int T, int H, int G, int hd) {
    ag_fwd(ag_mode_of(OPS_PREC_F32), out, lse, q, k, v, B, T, H, G, hd);
}

void KFN(ops_cpu_attention_gemm_bwd)(float *dq, float *dk, float *dv, const float *dout,
                                     const float *out, const float *lse, const float *q,
                                     const float *k, const float *v, int B, int T, int H, int G,
                                     int hd, int dx_acc) {
    ag_bwd(ag_mode_of(OPS_PREC_F32), dq, dk, dv, dout, out, lse, q, k, v, B, T, H, G, hd, dx_acc);
}

void KFN(ops_cpu_attention_bf16_fwd)(float *out, float *lse, const float *q, const float *k,
                                     const float *v, int B, int T, int H, int G, int hd) {
#ifdef TITAN_HAVE_DPBF16
    if (ops_cpu_attention_dpbf16_usable()) {
        void *ws = ops_cpu_scratch_take("attention", ops_cpu_attention_dpbf16_ws(B, T, H, G, hd));
        ops_cpu_attention_dpbf16_fwd(out, lse, q, k, v, B, T, H, G, hd, ws);
        ops_cpu_scratch_give(ws);
        return;
    }
#endif
    ag_fwd(ag_mode_of(OPS_PREC_BF16), out, lse, q, k, v, B, T, H, G, hd);
}

void KFN(ops_cpu_attention_bf16_bwd)(float *dq, float *dk, float *dv, const float *dout,
                                     const float *out, const float *lse, const float *q,
                                     const float *k, const float *v, int B, int T, int H, int G,
                                     int hd, int dx_acc) {
    ag_bwd(ag_mode_of(OPS_PREC_BF16), dq, dk, dv, dout, out, lse, q, k, v, B, T, H, G, hd, dx_acc);
}
