/* Grouped expert GEMMs (MoE): one nn.Linear per expert applied to that expert's rows.
 *
 * "default" runs one GEMM per non-empty group through ops_cpu_sgemm, each multi-threaded by
 * the BLAS: simple, but a group of a few hundred rows leaves threads waiting at every
 * expert's fork/join and small groups keep the second core idle.
 *
 * "grouped" makes one parallel pass over all groups: the output of every group is cut into
 * tiles (rows x columns), the tiles of all experts form one list, and threads take tiles
 * dynamically. Each tile is a single-threaded GEMM (the BLAS runs sequentially inside an
 * OpenMP parallel region) over a weight panel of about TILE_BYTES. A tile is
 * computed by exactly one thread with the BLAS's fixed blocking, so the result does not depend
 * on which thread takes it nor on the thread count. The weight gradient of expert e reduces
 * over that expert's rows inside one tile (no cross-thread sums). */
#include "ops/cpu/cpu.h"

#include <stdlib.h>
#include <string.h>

/* Weight-panel bytes per tile and rows per tile. Measured (bench/RESULTS.md): L2-sized panels
 * (512 KiB, 256 rows) made the single-threaded BLAS re-pack the same rows for many narrow
 * column tiles (64% of the dense GEMM rate); panels of a few MiB leave the cache blocking to
 * the BLAS and still give dozens of tiles per pass for two threads. */
#define TILE_BYTES (3 * 1024 * 1024)
#define TILE_ROWS 512 /* rows of a group per tile */

/* ---- default: one GEMM per group ---------------------------------------------------- */

static void gmm_fwd(ops_prec prec, float *out, const float *inp, const float *w,
                    const int32_t *offs, int E, int C, int OC) {
    for (int e = 0; e < E; e++) {
        const int r0 = offs[e], n = offs[e + 1] - r0;
        if (n <= 0) continue;
        ops_cpu_gemm(prec, 0, 1, n, OC, C, 1.0f, inp + (size_t)r0 * C, C, w + (size_t)e * OC * C, C,
                     0.0f, out + (size_t)r0 * OC, OC);
    }
}

/* dw_acc 0: dw[e] = 0 for the experts without rows (the others' products write theirs) */
static void zero_idle_experts(float *dw, const int32_t *offs, int E, int C, int OC, int dw_acc) {
    for (int e = 0; dw && !dw_acc && e < E; e++)
        if (offs[e + 1] <= offs[e]) memset(dw + (size_t)e * OC * C, 0, sizeof(float) * OC * C);
}

static void gmm_bwd(ops_prec prec, float *dinp, float *dw, const float *dout, const float *inp,
                    const float *w, const int32_t *offs, int E, int C, int OC, int dx_acc,
                    int dw_acc) {
    zero_idle_experts(dw, offs, E, C, OC, dw_acc);
    /* every group's dy rows are both its products' operand: in bf16 converted once */
    const int held =
        prec == OPS_PREC_BF16 && dinp && dw && offs[E] > offs[0] &&
        !ops_bf16_hold_copy(dout + (size_t)offs[0] * OC, (size_t)(offs[E] - offs[0]) * OC);
    for (int e = 0; e < E; e++) {
        const int r0 = offs[e], n = offs[e + 1] - r0;
        if (n <= 0) continue;
        const float *we = w + (size_t)e * OC * C, *dy = dout + (size_t)r0 * OC;
        if (dinp)
            ops_cpu_gemm(prec, 0, 0, n, C, OC, 1.0f, dy, OC, we, C, dx_acc ? 1.0f : 0.0f,
                         dinp + (size_t)r0 * C, C);
        if (dw)
            ops_cpu_gemm(prec, 1, 0, OC, C, n, 1.0f, dy, OC, inp + (size_t)r0 * C, C,
                         dw_acc ? 1.0f : 0.0f, dw + (size_t)e * OC * C, C);
    }
    if (held) ops_bf16_release(dout + (size_t)offs[0] * OC);
}

void ops_cpu_grouped_mm_fwd(float *out, const float *inp, const float *w, const int32_t *offs,
                            int E, int C, int OC) {
    gmm_fwd(OPS_PREC_F32, out, inp, w, offs, E, C, OC);
}
void ops_cpu_grouped_mm_bwd(float *dinp, float *dw, const float *dout, const float *inp,
                            const float *w, const int32_t *offs, int E, int C, int OC, int dx_acc,
                            int dw_acc) {
    gmm_bwd(OPS_PREC_F32, dinp, dw, dout, inp, w, offs, E, C, OC, dx_acc, dw_acc);
}
/* "bf16": one GEMM per group on bf16 operands (the expert stacks from the weight mirror); on
 * AVX512_BF16 without AMX all groups in one pass of grouped_dpbf16.c instead. */
void ops_cpu_grouped_mm_bf16_fwd(float *out, const float *inp, const float *w, const int32_t *offs,
                                 int E, int C, int OC) {
#ifdef TITAN_HAVE_DPBF16
    if (ops_cpu_grouped_dpbf16_usable()) {
        ops_cpu_grouped_dpbf16_fwd(out, inp, w, offs, E, C, OC);
        return;
    }
#endif
    gmm_fwd(OPS_PREC_BF16, out, inp, w, offs, E, C, OC);
}
void ops_cpu_grouped_mm_bf16_bwd(float *dinp, float *dw, const float *dout, const float *inp,
                                 const float *w, const int32_t *offs, int E, int C, int OC,
                                 int dx_acc, int dw_acc) {
#ifdef TITAN_HAVE_DPBF16
    if (ops_cpu_grouped_dpbf16_usable()) {
        zero_idle_experts(dw, offs, E, C, OC, dw_acc); /* its tasks are the experts with rows */
        ops_cpu_grouped_dpbf16_bwd(dinp, dw, dout, inp, w, offs, E, C, OC, dx_acc, dw_acc);
        return;
    }
#endif
    gmm_bwd(OPS_PREC_BF16, dinp, dw, dout, inp, w, offs, E, C, OC, dx_acc, dw_acc);
}

/* ---- grouped: one pass over tiles of all groups --------------------------------------- */

typedef struct {
    int e, m0, m1, n0, n1; /* expert; output rows [m0, m1) and columns [n0, n1) */
} gmm_tile;

/* Columns per tile so that a [cols, k] weight panel is about TILE_BYTES (multiple of 16). */
static int tile_cols(int k, int n) {
    long c = TILE_BYTES / ((long)sizeof(float) * (k > 0 ? k : 1));
    c = c / 16 * 16;
    if (c < 16) c = 16;
    return c > n ? n : (int)c;
}

/* Tiles of every expert's [M_e, N] output in blocks of mb x nb, where M_e is the group's row
 * count (by_rows) or the fixed M. Returns the count, -1 when out of memory. Groups whose
 * reduction or rows are empty have no tiles, nor has an output without columns (N 0, where
 * tile_cols gives nb 0). */
static int make_tiles(gmm_tile **out, const int32_t *offs, int E, int by_rows, int M, int N, int mb,
                      int nb) {
    long n = 0;
    for (int e = 0; e < E; e++) {
        const int g = offs[e + 1] - offs[e], m = by_rows ? g : M;
        if (g > 0 && m > 0 && N > 0) n += (long)((m + mb - 1) / mb) * ((N + nb - 1) / nb);
    }
    gmm_tile *t = malloc(sizeof *t * (size_t)(n > 0 ? n : 1));
    if (!t) return -1;
    long k = 0;
    for (int e = 0; e < E; e++) {
        const int g = offs[e + 1] - offs[e], m = by_rows ? g : M;
        if (g <= 0 || m <= 0 || N <= 0) continue;
        for (int m0 = 0; m0 < m; m0 += mb)
            for (int n0 = 0; n0 < N; n0 += nb)
                t[k++] =
                    (gmm_tile){e, m0, m0 + mb < m ? m0 + mb : m, n0, n0 + nb < N ? n0 + nb : N};
    }
    *out = t;
    return (int)n;
}

void ops_cpu_grouped_mm_tiled_fwd(float *out, const float *inp, const float *w, const int32_t *offs,
                                  int E, int C, int OC) {
    gmm_tile *t;
    const int n = make_tiles(&t, offs, E, 1, 0, OC, TILE_ROWS, tile_cols(C, OC));
    if (n < 0) { /* out of memory for the tile list: the per-group path needs none */
        ops_cpu_grouped_mm_fwd(out, inp, w, offs, E, C, OC);
        return;
    }
#pragma omp parallel for schedule(dynamic, 1)
    for (int i = 0; i < n; i++) {
        const gmm_tile *x = &t[i];
        const size_t r0 = (size_t)offs[x->e] + (size_t)x->m0;
        ops_cpu_sgemm(0, 1, x->m1 - x->m0, x->n1 - x->n0, C, 1.0f, inp + r0 * C, C,
                      w + ((size_t)x->e * OC + (size_t)x->n0) * C, C, 0.0f, out + r0 * OC + x->n0,
                      OC);
    }
    free(t);
}

void ops_cpu_grouped_mm_tiled_bwd(float *dinp, float *dw, const float *dout, const float *inp,
                                  const float *w, const int32_t *offs, int E, int C, int OC,
                                  int dx_acc, int dw_acc) {
    gmm_tile *t;
    int n;
    if (dinp) { /* dinp_e[rows, C-block] (+)= dout_e[rows, OC] @ w_e[OC, C-block] */
        if ((n = make_tiles(&t, offs, E, 1, 0, C, TILE_ROWS, tile_cols(OC, C))) < 0) {
            ops_cpu_grouped_mm_bwd(dinp, dw, dout, inp, w, offs, E, C, OC, dx_acc, dw_acc);
            return;
        }
#pragma omp parallel for schedule(dynamic, 1)
        for (int i = 0; i < n; i++) {
            const gmm_tile *x = &t[i];
            const size_t r0 = (size_t)offs[x->e] + (size_t)x->m0;
            ops_cpu_sgemm(0, 0, x->m1 - x->m0, x->n1 - x->n0, OC, 1.0f, dout + r0 * OC, OC,
                          w + (size_t)x->e * OC * C + x->n0, C, dx_acc ? 1.0f : 0.0f,
                          dinp + r0 * C + x->n0, C);
        }
        free(t);
    }
    if (dw) { /* dw_e[OC-block, C-block] (+)= dout_e[:, OC-block]^T @ inp_e[:, C-block] */
        const int nb = C < 512 ? C : 512;
        if ((n = make_tiles(&t, offs, E, 0, OC, C, tile_cols(nb, OC), nb)) < 0) {
            ops_cpu_grouped_mm_bwd(NULL, dw, dout, inp, w, offs, E, C, OC, 1, dw_acc);
            return;
        }
        zero_idle_experts(dw, offs, E, C, OC, dw_acc);
#pragma omp parallel for schedule(dynamic, 1)
        for (int i = 0; i < n; i++) {
            const gmm_tile *x = &t[i];
            const size_t r0 = (size_t)offs[x->e];
            const int rows = offs[x->e + 1] - offs[x->e];
            ops_cpu_sgemm(1, 0, x->m1 - x->m0, x->n1 - x->n0, rows, 1.0f, dout + r0 * OC + x->m0,
                          OC, inp + r0 * C + x->n0, C, dw_acc ? 1.0f : 0.0f,
                          dw + ((size_t)x->e * OC + (size_t)x->m0) * C + x->n0, C);
        }
        free(t);
    }
}
