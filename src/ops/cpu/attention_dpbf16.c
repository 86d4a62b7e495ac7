/* attention/bf16's forward on AVX512_BF16 (vdpbf16ps) without oneDNN: attention_gemm.c's
 * algorithm (a task per BQ query rows with all the keys they see, exact per-row softmax in
 * fp32, P rounded to bf16 before P V) with both products done by one register-blocked
 * micro-kernel on operands packed once per call. (The backward stays on attention_gemm.c's
 * oneDNN calls: a one-pass backward on this micro-kernel, tried in session 17, was level to
 * 12% slower in CPU time and 13-20% at two threads; bench/RESULTS.md.)
 *
 * Built only for x86-64, in a translation unit of its own compiled with -march=x86-64-v4
 * -mavx512bf16 (CMakeLists.txt); attention_gemm.c calls it only when
 * ops_cpu_attention_dpbf16_usable() (dispatch.c, compiled for the baseline) says the CPU has
 * AVX512_BF16 and the AVX-512 kernel copy was chosen, so nothing here runs on a CPU without it.
 *
 * Why: the oneDNN calls (gemm:jit on strided views) pack both operands afresh on every call;
 * here K and V are packed once per call and Q rows are read as they are packed. On a Zen 4 the
 * forward took 5-15% less CPU time at 0.6B heads x 2048 and the same at the bench model's
 * (bench/RESULTS.md, session 17).
 *
 * The micro-kernel and its operand layouts: ops/cpu/dpbf16.h. Each output element is one
 * task's fixed-order sum: bitwise the same for any thread count.
 *
 * Layouts per call (bf16 rounded to nearest even as ops_cpu_bf16_bits; Tp = T rounded up to
 * 64, hd2 = hd rounded up to even, hdv = hd rounded up to 16; pads are zero):
 *   qr [B,H,T,hd2]          q's rows (A of Q K^T)
 *   kh [B,G,Tp/64,hd2/2,64,2] k interleaved by pairs of hd, in panels of 64 keys (B of Q K^T;
 *                           one [hd2/2, 2 Tp] matrix put a panel's rows 8 KiB apart at
 *                           T = 2048, all in one L1 set)
 *   vt [B,G,Tp/2,hdv,2]     v interleaved by pairs of keys (B of P V)
 * Task (b, h, BQ query rows r0.., the costliest first): S = Q K^T [BQ, n] fp32 (n: keys up to
 * the last row), per row max, exp and sum (vm_softmax_exp_row), lse, P = bf16(exp / sum)
 * (0 for masked keys) row-major, O = P V.
 * Memory: the workspace (ops_cpu_attention_dpbf16_ws, kept by the caller between calls):
 * the packs, 2 (B T H hd + 2 B T G hd) bytes, and per thread BQ x Tp x 6 bytes. */
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "ops/cpu/cpu.h"
#include "ops/cpu/dpbf16.h"
#include "ops/cpu/vmath.h"

#if !defined(__AVX512BF16__) || !defined(__AVX512BW__)
#error "attention_dpbf16.c must be compiled with -march=x86-64-v4 -mavx512bf16"
#endif

#define DP_BQ 32 /* query rows per task (64 and 128 measured a few % slower) */

typedef struct {
    int B, T, Tp, hd, hd2, hdv;
} dp_dims;

static dp_dims dp_dims_of(int B, int T, int hd) {
    return (dp_dims){B, T, dp_up(T, DP_NC), hd, dp_up(hd, 2), dp_up(hd, 16)};
}

/* Packs of x [B,T,NH,hd] (fp32, head n at column n hd). Rows: o [B,NH,T,hd2]. */
static void dp_pack_rows(uint16_t *o, const dp_dims *d, const float *x, int NH) {
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < d->B; b++)
        for (int n = 0; n < NH; n++)
            for (int t = 0; t < d->T; t++)
                dp_row(o + (((size_t)b * NH + n) * d->T + t) * d->hd2,
                       x + (((size_t)b * d->T + t) * NH + n) * d->hd, d->hd, d->hd2, 1.0f);
}

/* By pairs of hd in panels of 64 rows, o [B,NH,Tp/64,hd2/2,64,2] (dp_pack_transposed). */
static void dp_pack_hd_pairs(uint16_t *o, const dp_dims *d, const float *x, int NH) {
    const size_t per = (size_t)d->hd2 * d->Tp, panel = (size_t)d->hd2 * DP_NC,
                 ld = (size_t)NH * d->hd;
#pragma omp parallel for collapse(3) schedule(static)
    for (int b = 0; b < d->B; b++)
        for (int n = 0; n < NH; n++)
            for (int p = 0; p < d->Tp / DP_NC; p++)
                dp_pack_transposed((uint32_t *)(o + ((size_t)b * NH + n) * per + (size_t)p * panel),
                                   (dp_src){x + (size_t)b * d->T * ld + (size_t)n * d->hd, NULL},
                                   ld, p * DP_NC, d->T, d->hd, d->hd2 / 2);
}

/* By pairs of rows, o [B,NH,Tp/2,hdv,2]. */
static void dp_pack_row_pairs(uint16_t *o, const dp_dims *d, const float *x, int NH) {
    const size_t per = (size_t)d->Tp * d->hdv, ld = (size_t)NH * d->hd;
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < d->B; b++)
        for (int n = 0; n < NH; n++)
            for (int t = 0; t < d->Tp; t += 2) {
                uint16_t *dst = o + ((size_t)b * NH + n) * per + (size_t)t * d->hdv;
                if (t < d->T) {
                    const float *lo = x + ((size_t)b * d->T + t) * ld + (size_t)n * d->hd;
                    dp_pair_rows(dst, lo, t + 1 < d->T ? lo + ld : NULL, d->hd, d->hdv);
                } else {
                    memset(dst, 0, sizeof(uint16_t) * 2 * d->hdv);
                }
            }
}

/* ---- the workspace ---------------------------------------------------------------------- */

/* The packs and each thread's S [BQ, Tp] fp32 and P [BQ, Tp] bf16, at 64-byte boundaries. */
typedef struct {
    uint16_t *qr, *kh, *vt;
    char *scratch; /* nt x per_thread bytes */
    size_t per_thread;
} dp_ws;

static size_t dp_ws_layout(const dp_dims *d, int H, int G, int nt, void *ws, dp_ws *w) {
    const size_t n[3] = {(size_t)d->B * H * d->T * d->hd2, (size_t)d->B * G * d->hd2 * d->Tp,
                         (size_t)d->B * G * d->Tp * d->hdv};
    uint16_t **slot[3] = {&w->qr, &w->kh, &w->vt};
    size_t off = 0;
    for (int i = 0; i < 3; i++) {
        if (ws) *slot[i] = (uint16_t *)((char *)ws + off);
        off += dp_al(n[i] * sizeof(uint16_t));
    }
    w->scratch = ws ? (char *)ws + off : NULL;
    w->per_thread = dp_al(sizeof(float) * DP_BQ * (size_t)d->Tp) +
                    dp_al(sizeof(uint16_t) * DP_BQ * (size_t)d->Tp);
    return off + (size_t)nt * w->per_thread;
}

size_t ops_cpu_attention_dpbf16_ws(int B, int T, int H, int G, int hd) {
    const dp_dims d = dp_dims_of(B, T, hd);
    dp_ws w;
    return dp_ws_layout(&d, H, G, omp_get_max_threads(), NULL, &w);
}

/* ---- forward ---------------------------------------------------------------------------- */

void ops_cpu_attention_dpbf16_fwd(float *out, float *lse, const float *q, const float *k,
                                  const float *v, int B, int T, int H, int G, int hd, void *ws) {
    const dp_dims d = dp_dims_of(B, T, hd);
    const int rep = H / G, nb = (T + DP_BQ - 1) / DP_BQ;
    const int nt = omp_get_max_threads(); /* as ops_cpu_attention_dpbf16_ws sized ws */
    const float scale = 1.0f / sqrtf((float)hd);
    dp_ws w;
    dp_ws_layout(&d, H, G, nt, ws, &w);
    dp_pack_rows(w.qr, &d, q, H);
    dp_pack_hd_pairs(w.kh, &d, k, G);
    dp_pack_row_pairs(w.vt, &d, v, G);
    const size_t ldo = (size_t)H * hd, panel = (size_t)d.hd2 * DP_NC;
#pragma omp parallel num_threads(nt)
    {
        char *mine = w.scratch + (size_t)omp_get_thread_num() * w.per_thread;
        float *S = (float *)mine;
        uint16_t *P = (uint16_t *)(mine + dp_al(sizeof(float) * DP_BQ * (size_t)d.Tp));
#pragma omp for schedule(dynamic, 1)
        for (long task = 0; task < (long)B * H * nb; task++) {
            /* the last query blocks (the most keys) first */
            const int qb = nb - 1 - (int)(task % nb), h = (int)(task / nb % H),
                      b = (int)(task / nb / H), g = h / rep;
            const int r0 = qb * DP_BQ, M = T - r0 < DP_BQ ? T - r0 : DP_BQ, n = r0 + M;
            /* S[M, n] = Q[r0 : r0 + M] K[0 : n]^T */
            dp_gemm(M, n, d.hd2 / 2, w.qr + (((size_t)b * H + h) * T + r0) * d.hd2, d.hd2,
                    w.kh + ((size_t)b * G + g) * d.hd2 * d.Tp, 2 * DP_NC, panel, S, d.Tp, 0);
            for (int i = 0; i < M; i++) {
                float *s = S + (size_t)i * d.Tp, l;
                const int nv = r0 + i + 1; /* keys 0 .. query */
                const float mx = vm_softmax_exp_row(s, nv, scale, &l);
                lse[((size_t)b * H + h) * T + r0 + i] = mx + logf(l);
                /* P = bf16(exp / sum), the normalisation fused into the conversion; masked
                 * keys and the pad to an even n are 0 */
                dp_row(P + (size_t)i * d.Tp, s, nv, dp_up(n, 2), 1.0f / l);
            }
            /* O[r0 : r0 + M] = P V[0 : n] */
            dp_gemm(M, hd, (n + 1) / 2, P, d.Tp, w.vt + ((size_t)b * G + g) * d.Tp * d.hdv,
                    2 * (size_t)d.hdv, 2 * DP_NC, out + ((size_t)b * T + r0) * ldo + (size_t)h * hd,
                    ldo, 0);
        }
    }
}
