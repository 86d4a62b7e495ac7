/* grouped_mm/bf16 on AVX512_BF16 (vdpbf16ps) without oneDNN: every expert's products on
 * ops/cpu/dpbf16.h's micro-kernel, all experts in one parallel pass.
 *
 * Why: oneDNN runs one primitive per expert and product, multi-threaded inside, and an expert's
 * row count is a new shape almost every step: ~300 primitives created a step at 30B-A3B-reduced
 * x 2048 tokens (80 ms), a fork / join per expert, and experts of a few rows at 30-170 GFLOP/s
 * (bench/RESULTS.md, session 27). Here a task is one expert's 64 output columns (forward) or 256
 * columns of C (dx, dW) with all its rows; tasks of all experts are taken dynamically, the
 * costliest first; no shape is compiled.
 *
 * Built only for x86-64, in a translation unit of its own compiled with -march=x86-64-v4
 * -mavx512bf16 (CMakeLists.txt); grouped_mm.c calls it only when
 * ops_cpu_grouped_dpbf16_usable() (dispatch.c) says the CPU has AVX512_BF16 and no AMX, or AMX
 * and TITAN_GROUPED_AMX=1: then every product's rows and columns in 32s run on AMX tiles
 * (gd_gemm; the panels below are the tiles' B as stored, 256 bytes a row of pairs), the edges
 * on vdpbf16ps. Opt-in: written on emulated tiles (-DTITAN_AMX_EMULATE=ON), measured slower
 * than titan's AMX GEMM per expert on an AMX Xeon (backward 1.5x; docs/kernels.md).
 *
 * Products of expert e (rows [o_e, o_e + n) of the routed rows, W_e [OC, C]), K in pairs:
 *   forward  out[n, OC]  = x[n, C] W_e^T:  A = x's rows, B = W_e^T by pairs of C: a panel of 64
 *            rows of W_e transposed as 32-bit words (16 x 16 blocks);
 *   dx       dx[n, C]   += dy[n, OC] W_e:  A = dy's rows, B = pairs of W_e's rows interleaved;
 *   dW       dW_e[OC, C] += dy^T x:        A = dy^T by pairs of rows (made once per expert and
 *            call), B = pairs of x's rows interleaved.
 * Where the model's bf16 weight copy keeps W_e in the panel layout (ops_cpu_grouped_dpbf16_store,
 * written as the copy is: by AdamW once a step), dx reads its B from there, unpacked, and the
 * forward's panel is transposed from it; elsewhere both pack from W_e's rows (session 30: the
 * dx packs were ~4% of a 30B-A3B-reduced step).
 * Operands are rounded to bf16 as ops_cpu_bf16_bits (nearest even), read from the weight's bf16
 * mirror (and a held dy's) where there is one: the values the oneDNN path multiplies. Every
 * output element is one task's fixed-order sum over K: bitwise the same for any thread count. */
#include <omp.h>
#include <stdlib.h>

#include "ops/cpu/dpbf16.h"

#define GD_W 16 /* words (pairs of bf16) per transposed block */
#define GD_NP 4 /* 64-column panels per backward task */

/* np panels of 64 columns, panel i at dst + i k2 64: word [q][c] of panel i = (s[2q][c0 + 64 i
 * + c], s[2q + 1][...]) for q in [0, k2): B with K along s's rows (rows of n elements, ld apart;
 * rows past rows and columns past n are 0). Row pairs outermost: each pair of source rows is
 * read once, np x 64 columns contiguous (one 64-column strip per pass would touch a page per
 * row for 128 bytes). */
static void gd_pack_pairs(uint32_t *dst, dp_src s, size_t ld, int c0, int np, int rows, int n,
                          int k2) {
    for (int q = 0; q < k2; q++)
        for (int i = 0; i < np; i++)
            for (int cb = 0; cb < DP_NC; cb += 16)
                _mm512_store_si512(dst + ((size_t)i * k2 + q) * DP_NC + cb,
                                   dp_pair16(s, ld, q, rows, c0 + i * DP_NC + cb, n));
}

/* dst (ldq words a row, OC rows) = s^T by pairs: word q of row j = (s[2q][j], s[2q + 1][j]), q in
 * [0, ldq) (s: rows x OC, ld apart; rows past rows are 0). A of dy^T x. */
static void gd_pack_t_pairs(uint32_t *dst, size_t ldq, dp_src s, size_t ld, int rows, int OC) {
    __m512i r[16];
    for (int j0 = 0; j0 < OC; j0 += 16)
        for (int q0 = 0; q0 < (int)ldq; q0 += 16) {
            for (int i = 0; i < 16; i++) r[i] = dp_pair16(s, ld, q0 + i, rows, j0, OC);
            dp_transpose16(r); /* r[j] = words q0.. of column j0 + j */
            for (int j = 0; j < 16 && j0 + j < OC; j++)
                _mm512_storeu_si512(dst + (size_t)(j0 + j) * ldq + q0, r[j]);
        }
}

/* ---- the weights' panel layout ---------------------------------------------------------- */

void ops_cpu_grouped_dpbf16_store(uint16_t *P, int OC, int C, size_t i0, const float *src,
                                  size_t n) {
    if (!n) return;
    const size_t r0 = i0 / (size_t)C, r1 = (i0 + n - 1) / (size_t)C + 1; /* global rows e OC + r */
#pragma omp parallel for schedule(static) if (n >= ((size_t)1 << 22) && !omp_in_parallel())
    for (size_t g = r0; g < r1; g++) {
        const size_t lo = g * C > i0 ? g * C : i0, hi = (g + 1) * C < i0 + n ? (g + 1) * C : i0 + n;
        const int r = (int)(g % (size_t)OC), odd = r & 1;
        /* the row's words: P + e OC C + (r / 2) 128, + (c / 64) 64 OC + 2 (c % 64) per column */
        uint16_t *row = P + (g - (size_t)r) * C + (size_t)(r / 2) * 2 * DP_NC;
        const float *s = src + (lo - i0);
        for (int c = (int)(lo - g * C), ce = (int)(hi - g * C); c < ce;) {
            const int k = 16 - c % 16 < ce - c ? 16 - c % 16 : ce - c; /* in one 16-column block */
            __m512i h = ops_cpu_bf16_bits16(_mm512_maskz_loadu_ps(dp_mask(k), s));
            if (odd) h = _mm512_slli_epi32(h, 16);
            const __mmask32 lanes = k == 16 ? 0xffffffffu : (1u << 2 * k) - 1;
            _mm512_mask_storeu_epi16(row + (size_t)(c / DP_NC) * DP_NC * OC + 2 * (c % DP_NC),
                                     lanes & (odd ? 0xaaaaaaaau : 0x55555555u), h);
            c += k, s += k;
        }
    }
}

/* dst[q][c] (q in [0, C / 2), c in [0, 64), 64 words a row; 64-byte aligned) = (W[c0 + c][2q],
 * W[c0 + c][2q + 1]), rows past OC 0: the forward's panel (dp_pack_transposed's) from W_e in
 * the panel layout at Pe. Per 64 columns of C: the task's 32 pairs of rows there (8 KiB, read
 * in order while the next 64 columns' are prefetched) split into the 64 rows' words in L1, one
 * permute per 16 words, then transposed 16 x 16 words at a time. (Transposing straight from
 * the copy read each 8 KiB in two passes of strided lines: twice dp_pack_transposed's time.) */
static void gd_pack_fwd_from_panels(uint32_t *dst, const uint16_t *Pe, int OC, int C, int c0) {
    uint16_t ie[32], io[32];
    for (int l = 0; l < 32; l++) ie[l] = (uint16_t)(2 * l), io[l] = (uint16_t)(2 * l + 1);
    const __m512i even = _mm512_loadu_si512(ie), odd = _mm512_loadu_si512(io);
    _Alignas(64) uint32_t rows[DP_NC * DP_NC / 2]; /* 64 rows x 32 words: 64 columns of C */
    const int npr = (OC - c0 < DP_NC ? OC - c0 : DP_NC) / 2; /* pairs of rows present */
    memset(rows + (size_t)2 * npr * (DP_NC / 2), 0,
           sizeof(uint32_t) * (size_t)(DP_NC - 2 * npr) * (DP_NC / 2)); /* rows past OC */
    __m512i r[16];
    for (int cp = 0; cp < C / DP_NC; cp++) {
        const uint16_t *src = Pe + (size_t)cp * DP_NC * OC + (size_t)c0 * DP_NC;
        const int more = cp + 1 < C / DP_NC;
        for (int p = 0; p < npr; p++) {
            const uint16_t *s = src + (size_t)p * 2 * DP_NC;
            if (more)
                for (int l = 0; l < 4; l++)
                    _mm_prefetch((const char *)(s + (size_t)DP_NC * OC + 32 * l), _MM_HINT_T0);
            const __m512i v0 = _mm512_loadu_si512(s), v1 = _mm512_loadu_si512(s + 32),
                          v2 = _mm512_loadu_si512(s + 64), v3 = _mm512_loadu_si512(s + 96);
            uint32_t *lo = rows + (size_t)2 * p * (DP_NC / 2), *hi = lo + DP_NC / 2;
            _mm512_store_si512(lo, _mm512_permutex2var_epi16(v0, even, v1));
            _mm512_store_si512(lo + 16, _mm512_permutex2var_epi16(v2, even, v3));
            _mm512_store_si512(hi, _mm512_permutex2var_epi16(v0, odd, v1));
            _mm512_store_si512(hi + 16, _mm512_permutex2var_epi16(v2, odd, v3));
        }
        for (int qb = 0; qb < DP_NC / 2; qb += 16)
            for (int cb = 0; cb < DP_NC; cb += 16) {
                for (int i = 0; i < 16; i++)
                    r[i] = _mm512_load_si512(rows + (size_t)(cb + i) * (DP_NC / 2) + qb);
                dp_transpose16(r);
                for (int i = 0; i < 16; i++)
                    _mm512_store_si512(dst + (size_t)(cp * (DP_NC / 2) + qb + i) * DP_NC + cb,
                                       r[i]);
            }
    }
}

/* ---- the pass ------------------------------------------------------------------------- */

/* dp_gemm's product; with amx (AMX, TITAN_GROUPED_AMX=1) the part of it tiles take, rows and
 * columns in 32s with k2 a multiple of 16, on AMX tiles (amx_gemm.c, B read as the panels are
 * stored), the rows and columns past them on dp_gemm. Each element one fixed-order sum. */
static void gd_gemm(int amx, int M, int N, int k2, const uint16_t *A, size_t lda, const uint16_t *B,
                    size_t ldb, size_t bp, float *C, size_t ldc, int acc) {
#ifdef TITAN_HAVE_AMX_GEMM
    const int M32 = M / 32 * 32, N32 = N / 32 * 32;
    if (amx && k2 % 16 == 0 && ldb == 2 * DP_NC && M32 > 0 && N32 > 0) {
        ops_cpu_amx_gemm_panels(M32, N32, k2, A, lda, B, bp, C, ldc, acc);
        if (N32 < N) /* column N32 of B: in panel N32 / 64, word N32 % 64 */
            dp_gemm(M32, N - N32, k2, A, lda, B + (size_t)(N32 / DP_NC) * bp + 2 * (N32 % DP_NC),
                    ldb, bp, C + N32, ldc, acc);
        if (M32 < M)
            dp_gemm(M - M32, N, k2, A + (size_t)M32 * lda, lda, B, ldb, bp, C + (size_t)M32 * ldc,
                    ldc, acc);
        return;
    }
#else
    (void)amx;
#endif
    dp_gemm(M, N, k2, A, lda, B, ldb, bp, C, ldc, acc);
}

typedef struct {
    int e, c0, kind; /* kind: 0 forward, 1 dx, 2 dW */
    double cost;
} gd_task;

static int gd_by_cost(const void *a, const void *b) {
    const gd_task *x = a, *y = b;
    if (x->cost != y->cost) return x->cost > y->cost ? -1 : 1;
    if (x->kind != y->kind) return x->kind - y->kind;
    return x->e != y->e ? x->e - y->e : x->c0 - y->c0;
}

/* x [rows, n] fp32 as bf16 rows: its mirror when there is one and n is even, otherwise
 * converted into buf (ld n2 = n rounded up to even, pad 0). *ld: the rows' stride. */
static const uint16_t *gd_rows16(const float *x, int rows, int n, uint16_t *buf, size_t *ld) {
    const void *m = n % 2 ? NULL : ops_cpu_bf16_mirror_of(x, (size_t)rows * n);
    *ld = (size_t)dp_up(n, 2);
    if (m) return m;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) dp_row(buf + (size_t)r * *ld, x + (size_t)r * n, n, (int)*ld, 1);
    return buf;
}

static dp_src gd_weights(const float *w, size_t n, int cols) {
    const void *m = cols % 2 ? NULL : ops_cpu_bf16_mirror_of(w, n);
    return (dp_src){m ? NULL : w, m};
}

/* One pass: forward (out non-NULL) or backward (dinp and / or dw non-NULL). */
static void gd_pass(float *out, float *dinp, float *dw, const float *dout, const float *inp,
                    const float *w, const int32_t *offs, int E, int C, int OC, int dx_acc,
                    int dw_acc) {
    const int R = offs[E] - offs[0], fwd = out != NULL, amx = ops_cpu_bf16_grouped_amx();
    if (R <= 0) return;
    const int C2 = dp_up(C, 2), OC2 = dp_up(OC, 2);
    int nmax = 0;
    for (int e = 0; e < E; e++)
        if (offs[e + 1] - offs[e] > nmax) nmax = offs[e + 1] - offs[e];
    const dp_src W = gd_weights(w, (size_t)E * OC * C, C);
    const uint16_t *Wp = ops_cpu_bf16_grouped_of(w, E, OC, C); /* W in the panel layout */
    /* tasks: forward (e, 64 columns of OC); backward dx and dW (e, 256 columns of C) */
    const int pc = (C + GD_NP * DP_NC - 1) / (GD_NP * DP_NC), po = (OC + DP_NC - 1) / DP_NC;
    gd_task *task = malloc(sizeof *task * (size_t)E * (fwd ? po : 2 * pc));
    /* the workspace: A rows (forward: x; backward: dy), dy^T pairs per expert (dW), and per
     * thread one B panel of at most max(C2, OC2, nmax + 1) / 2 pairs x 64 words */
    const int nt = omp_get_max_threads();
    size_t ldq_total = 0, *at_off = malloc(sizeof(size_t) * (size_t)(E > 0 ? E : 1));
    if (!at_off) abort();
    for (int e = 0; dw && e < E; e++) {
        at_off[e] = ldq_total;
        const int n = offs[e + 1] - offs[e];
        ldq_total += n > 0 ? (size_t)OC * dp_up((n + 1) / 2, GD_W) : 0;
    }
    const int kmax = (fwd ? C2 : OC2 > nmax + 1 ? OC2 : nmax + 1) / 2 + GD_W;
    const size_t a_bytes = dp_al(sizeof(uint16_t) * (size_t)R * (fwd ? C2 : OC2)),
                 t_bytes = dw ? dp_al(sizeof(uint32_t) * ldq_total) : 0,
                 p_bytes = dp_al(sizeof(uint32_t) * (size_t)kmax * DP_NC * (fwd ? 1 : GD_NP));
    /* kept between calls (scratch.c): a few hundred MB at 30B-A3B-reduced's dims */
    char *ws = ops_cpu_scratch_take("grouped_mm", a_bytes + t_bytes + (size_t)nt * p_bytes);
    if (!task || !ws) abort(); /* out of memory in a void op */
    size_t lda;
    const uint16_t *A = fwd ? gd_rows16(inp + (size_t)offs[0] * C, R, C, (uint16_t *)ws, &lda)
                            : gd_rows16(dout + (size_t)offs[0] * OC, R, OC, (uint16_t *)ws, &lda);
    uint32_t *at = (uint32_t *)(ws + a_bytes);
    /* dW's x rows from their bf16 copy where the caller holds one (ops.h's mirrors), as the
     * forward's rows and every other bf16 GEMM read theirs */
    const uint16_t *X16 =
        dw && C % 2 == 0 ? ops_cpu_bf16_mirror_of(inp + (size_t)offs[0] * C, (size_t)R * C) : NULL;
    int nts = 0;
    for (int e = 0; e < E; e++) {
        const int n = offs[e + 1] - offs[e];
        if (n <= 0) continue;
        if (fwd)
            for (int j = 0; j < po; j++) task[nts++] = (gd_task){e, j * DP_NC, 0, (double)n * C};
        for (int j = 0; !fwd && j < pc; j++) {
            if (dinp) task[nts++] = (gd_task){e, j * GD_NP * DP_NC, 1, (double)n * OC};
            if (dw) task[nts++] = (gd_task){e, j * GD_NP * DP_NC, 2, (double)n * OC};
        }
    }
    qsort(task, (size_t)nts, sizeof *task, gd_by_cost);
    if (dw) { /* dy^T by pairs of rows, per expert */
#pragma omp parallel for schedule(dynamic, 1)
        for (int e = 0; e < E; e++) {
            const int n = offs[e + 1] - offs[e];
            if (n > 0)
                gd_pack_t_pairs(at + at_off[e], (size_t)dp_up((n + 1) / 2, GD_W),
                                (dp_src){NULL, A + (size_t)(offs[e] - offs[0]) * lda}, lda, n, OC);
        }
    }
#pragma omp parallel num_threads(nt)
    {
        uint32_t *panel = (uint32_t *)(ws + a_bytes + t_bytes + omp_get_thread_num() * p_bytes);
#pragma omp for schedule(dynamic, 1)
        for (int t = 0; t < nts; t++) {
            const gd_task k = task[t];
            const int n = offs[k.e + 1] - offs[k.e], r0 = offs[k.e] - offs[0];
            const size_t we = (size_t)k.e * OC * C;
            const dp_src We = {W.f ? W.f + we : NULL, W.h ? W.h + we : NULL};
            if (k.kind == 0) { /* out[n, 64] = x W_e[c0 .. c0 + 64]^T */
                const int nc = OC - k.c0 < DP_NC ? OC - k.c0 : DP_NC;
                if (Wp)
                    gd_pack_fwd_from_panels(panel, Wp + we, OC, C, k.c0);
                else
                    dp_pack_transposed(panel, We, C, k.c0, OC, C, C2 / 2);
                gd_gemm(amx, n, nc, C2 / 2, A + (size_t)r0 * lda, lda, (const uint16_t *)panel,
                        2 * DP_NC, 0, out + (size_t)offs[k.e] * OC + k.c0, OC, 0);
            } else if (k.kind == 1) { /* dx[n, 256] (+)= dy W_e[:, c0 .. c0 + 256] */
                const int nc = C - k.c0 < GD_NP * DP_NC ? C - k.c0 : GD_NP * DP_NC,
                          np = (nc + DP_NC - 1) / DP_NC, k2 = OC2 / 2;
                const uint16_t *B = (const uint16_t *)panel;
                if (Wp) /* the copy's panels: B as stored, 64 OC elements a 64-column panel */
                    B = Wp + we + (size_t)k.c0 * OC;
                else
                    gd_pack_pairs(panel, We, C, k.c0, np, OC, C, k2);
                gd_gemm(amx, n, nc, k2, A + (size_t)r0 * lda, lda, B, 2 * DP_NC,
                        2 * (size_t)k2 * DP_NC, dinp + (size_t)offs[k.e] * C + k.c0, C, dx_acc);
            } else { /* dW_e[OC, 256] (+)= dy^T x[:, c0 .. c0 + 256] */
                /* K: the expert's rows; on tiles rounded up to 16 pairs, past n zeros in both
                 * operands (A's rows are padded so already) */
                const int nc = C - k.c0 < GD_NP * DP_NC ? C - k.c0 : GD_NP * DP_NC,
                          np = (nc + DP_NC - 1) / DP_NC,
                          k2 = amx ? dp_up((n + 1) / 2, GD_W) : (n + 1) / 2;
                const dp_src Xe = X16 ? (dp_src){NULL, X16 + (size_t)r0 * C}
                                      : (dp_src){inp + (size_t)offs[k.e] * C, NULL};
                gd_pack_pairs(panel, Xe, C, k.c0, np, n, C, k2);
                gd_gemm(amx, OC, nc, k2, (const uint16_t *)(at + at_off[k.e]),
                        2 * (size_t)dp_up(k2, GD_W), (const uint16_t *)panel, 2 * DP_NC,
                        2 * (size_t)k2 * DP_NC, dw + we + k.c0, C, dw_acc);
            }
        }
    }
    ops_cpu_scratch_give(ws);
    free(at_off);
    free(task);
}

void ops_cpu_grouped_dpbf16_fwd(float *out, const float *inp, const float *w, const int32_t *offs,
                                int E, int C, int OC) {
    gd_pass(out, NULL, NULL, NULL, inp, w, offs, E, C, OC, 0, 0);
}

void ops_cpu_grouped_dpbf16_bwd(float *dinp, float *dw, const float *dout, const float *inp,
                                const float *w, const int32_t *offs, int E, int C, int OC,
                                int dx_acc, int dw_acc) {
    if (dinp || dw) gd_pass(NULL, dinp, dw, dout, inp, w, offs, E, C, OC, dx_acc, dw_acc);
}
