/* Example titan kernel plugin: grouped expert GEMMs (MoE) in padded per-expert row tiles.
 *
 * titan's MoE block sorts the routed rows by expert and calls grouped_mm three times per layer
 * and direction (gate and up projections dim -> moe_ffn_dim, down projection back), all with
 * the same group offsets offs[E+1]. This kernel does the experts its own way:
 *
 *   - a TILE PLAN: every expert's rows are cut into tiles of TM = 8 rows (the last tile of an
 *     expert padded to 8 with a zero row), the tiles of all experts forming one list. The plan
 *     is built by the first forward call of a layer and kept, with a copy of offs, in the
 *     SAVED buffer titan holds per layer: the layer's two other forward calls find the same
 *     offs and reuse it, and backward reuses it without rebuilding (it refuses to run, status
 *     2, when offs differ from the plan's: titan then aborts naming the layer).
 *   - forward: one work item per (tile, block of 64 output columns); each output is the dot
 *     product of an input row with a weight row, summed in 8 lanes over C (C % 8 == 0: the
 *     kernel's constraint, checked at model build) and then across the lanes in a fixed order.
 *     The 8 rows of a tile share each weight row load; padded rows read zeros and are not
 *     stored.
 *   - backward ADDS into titan's gradients (TITAN_KERNEL_BWD_ACCUMULATES: titan then passes
 *     them directly, saving two passes over dw [E, OC, C] per call against write-then-add):
 *     dx per (tile, block of 256 input columns), 8 rows x 8 columns accumulated in
 *     registers over o (padded rows read a zero dy row); dw per (expert, block of 8 weight
 *     rows), 8 x 8 accumulated over the expert's rows in order. Every output element has one
 *     writer and a fixed order of additions, so results do not depend on the thread count
 *     (titan's determinism rule).
 *
 * Results differ from titan's BLAS-based built-ins only in the order of fp32 additions
 * (within grouped_mm's conformance tolerance, 1e-5 relative: `titan kernels test
 * grouped_mm/grouped_tiles --plugin ...`).
 *
 * Build (see examples/kernels/README.md; CMake builds it as build/examples/libgrouped_tiles.so):
 *   cc -O2 -march=x86-64-v3 -ffp-contract=fast -fPIC -shared -fopenmp -I include \
 *      examples/kernels/grouped_tiles.c -o libgrouped_tiles.so
 * (-ffp-contract=fast lets the compiler fuse the accumulations into FMAs; titan's own kernels
 * are built without it, hence the last-bit differences to the built-in.) */
#include <stdio.h>
#include <string.h>

#include "titan/kernel_abi.h"

TITAN_KERNEL_PLUGIN_ABI;

#define TM 8    /* rows per tile */
#define LANES 8 /* partial sums per dot product; C % LANES == 0 */
#define OCB 64  /* forward: output columns per work item */
#define CB 256  /* backward dx: input columns per work item */
#define OB 8    /* backward dw: weight rows per work item (x 8 lanes: 8 x 8 accumulators) */
#define GR 64   /* backward dw: an expert's rows per pass over its dw block */

typedef struct {
    int32_t e, r0, n; /* expert, first row, rows (1..TM) */
} gt_tile;

/* 8 fp32 lanes (GCC/Clang vector extension: one AVX register with -march=x86-64-v3). The
 * micro-kernels keep 8 of them as accumulators, fully unrolled so they stay in registers. */
typedef float gt_v8 __attribute__((vector_size(32)));

static inline gt_v8 gt_load(const float *p) {
    gt_v8 v;
    memcpy(&v, p, sizeof v); /* unaligned load */
    return v;
}

static inline void gt_store(float *p, gt_v8 v) {
    memcpy(p, &v, sizeof v);
}

/* Saved buffer: this header, then offs copy [E+1], then tiles [n_tiles]. */
typedef struct {
    int32_t E, R, n_tiles, builds; /* builds: plans built so far (once per layer forward) */
    char pad[48];
} gt_plan;

static size_t gt_align(size_t n) {
    return (n + 63) / 64 * 64;
}

/* At most R / TM + E tiles (each expert adds at most one partial tile). */
static size_t gt_saved_bytes(const int dims[8]) {
    const size_t R = (size_t)dims[0], E = (size_t)dims[3];
    return sizeof(gt_plan) + gt_align(sizeof(int32_t) * (E + 1)) +
           sizeof(gt_tile) * (R / TM + E + 1);
}

static int32_t *gt_offs(gt_plan *p) {
    return (int32_t *)(p + 1);
}

static gt_tile *gt_tiles(gt_plan *p) {
    return (gt_tile *)((char *)(p + 1) + gt_align(sizeof(int32_t) * ((size_t)p->E + 1)));
}

/* A zero row as long as the rows a padded tile reads: x (C) forward, dy (OC) backward. */
static size_t gt_workspace_bytes(int phase, const int dims[8]) {
    return sizeof(float) * (size_t)(phase == 0 ? dims[1] : dims[2]);
}

static int gt_check(const titan_model_shape *s, char *why, size_t n) {
    if (s->dim % LANES == 0 && s->moe_ffn_dim % LANES == 0) return 0;
    snprintf(why, n, "dim %% 8 == 0 and moe_ffn_dim %% 8 == 0 (dim = %d, moe_ffn_dim = %d)", s->dim,
             s->moe_ffn_dim);
    return 1;
}

static int gt_same_routing(gt_plan *p, const int32_t *offs, int E) {
    return p->E == E && !memcmp(gt_offs(p), offs, sizeof(int32_t) * ((size_t)E + 1));
}

/* The plan of offs, unless the saved one already is (the layer's 2nd and 3rd calls). */
static void gt_plan_build(gt_plan *p, const int32_t *offs, int E) {
    if (p->builds > 0 && gt_same_routing(p, offs, E)) return;
    p->E = E;
    p->R = offs[E];
    memcpy(gt_offs(p), offs, sizeof(int32_t) * ((size_t)E + 1));
    gt_tile *t = gt_tiles(p);
    int n = 0;
    for (int e = 0; e < E; e++)
        for (int r = offs[e]; r < offs[e + 1]; r += TM)
            t[n++] = (gt_tile){e, r, offs[e + 1] - r < TM ? offs[e + 1] - r : TM};
    p->n_tiles = n;
    p->builds++;
}

static int gt_forward(const titan_kernel_args *a) {
    const int R = a->dims[0], C = a->dims[1], OC = a->dims[2], E = a->dims[3];
    gt_plan *p = a->saved;
    if (!p || a->saved_size < gt_saved_bytes(a->dims) || !a->offs || C % LANES) return 1;
    if (a->offs[E] != R) return 3;
    gt_plan_build(p, a->offs, E);
    const gt_tile *tiles = gt_tiles(p);
    const float *x = a->in[0], *w = a->in[1], *zero = a->workspace;
    float *y = a->out[0];
    memset(a->workspace, 0, sizeof(float) * (size_t)C);
    const int nob = (OC + OCB - 1) / OCB;
    const long items = (long)p->n_tiles * nob;
#pragma omp parallel for schedule(dynamic, 1)
    for (long it = 0; it < items; it++) {
        const gt_tile *t = &tiles[it / nob];
        const int o0 = (int)(it % nob) * OCB, o1 = o0 + OCB < OC ? o0 + OCB : OC;
        const float *xr[TM];
        for (int i = 0; i < TM; i++) xr[i] = i < t->n ? x + (size_t)(t->r0 + i) * C : zero;
        for (int o = o0; o < o1; o++) {
            const float *wo = w + ((size_t)t->e * OC + o) * C;
            gt_v8 acc[TM] = {{0}};
            for (int c = 0; c < C; c += LANES) {
                const gt_v8 wv = gt_load(wo + c);
#pragma GCC unroll 8
                for (int i = 0; i < TM; i++) acc[i] += gt_load(xr[i] + c) * wv;
            }
            for (int i = 0; i < t->n; i++) {
                const gt_v8 s = acc[i];
                y[(size_t)(t->r0 + i) * OC + o] =
                    ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
            }
        }
    }
    return 0;
}

static int gt_backward(const titan_kernel_args *a) {
    const int C = a->dims[1], OC = a->dims[2], E = a->dims[3];
    gt_plan *p = a->saved;
    /* the plan must be the forward's: titan runs a layer's forward before its backward */
    if (!p || p->builds == 0 || !a->offs || !gt_same_routing(p, a->offs, E)) return 2;
    if (!a->workspace || C % LANES) return 1;
    const gt_tile *tiles = gt_tiles(p);
    const int32_t *offs = gt_offs(p);
    const float *dy = a->in[0], *x = a->in[1], *w = a->in[2], *zero = a->workspace;
    float *dx = a->out[0], *dw = a->out[1];
    memset(a->workspace, 0, sizeof(float) * (size_t)OC);
    if (dx) { /* dx[r, c..c+8] = sum_o dy[r, o] w_e[o, c..c+8]: 8 rows x 8 lanes in registers */
        const int ncb = (C + CB - 1) / CB;
        const long items = (long)p->n_tiles * ncb;
#pragma omp parallel for schedule(dynamic, 1)
        for (long it = 0; it < items; it++) {
            const gt_tile *t = &tiles[it / ncb];
            const int c0 = (int)(it % ncb) * CB, c1 = c0 + CB < C ? c0 + CB : C;
            const float *dyr[TM];
            for (int i = 0; i < TM; i++) dyr[i] = i < t->n ? dy + (size_t)(t->r0 + i) * OC : zero;
            for (int c = c0; c < c1; c += LANES) {
                gt_v8 acc[TM] = {{0}};
                const float *wc = w + (size_t)t->e * OC * C + c;
                for (int o = 0; o < OC; o++) {
                    const gt_v8 wv = gt_load(wc + (size_t)o * C);
#pragma GCC unroll 8
                    for (int i = 0; i < TM; i++) acc[i] += dyr[i][o] * wv;
                }
                for (int i = 0; i < t->n; i++) { /* += : TITAN_KERNEL_BWD_ACCUMULATES */
                    float *d = dx + (size_t)(t->r0 + i) * C + c;
                    gt_store(d, gt_load(d) + acc[i]);
                }
            }
        }
    }
    if (dw) { /* dw_e[o..o+8, c..c+8] = sum over e's rows r (the plan's offs, in order) of
               * dy[r, o] x[r, c]: 8 x 8 in registers */
        const int nob = (OC + OB - 1) / OB;
        const long items = (long)E * nob;
#pragma omp parallel for schedule(dynamic, 1)
        for (long it = 0; it < items; it++) {
            const int e = (int)(it / nob), o0 = (int)(it % nob) * OB,
                      no = o0 + OB < OC ? OB : OC - o0;
            /* rows in blocks of GR: their dy[r, o0..o0+OB) gathered once (zero-padded) */
            for (int r0 = offs[e]; r0 < offs[e + 1]; r0 += GR) {
                const int nr = offs[e + 1] - r0 < GR ? offs[e + 1] - r0 : GR;
                float g[GR][OB];
                for (int r = 0; r < nr; r++)
                    for (int i = 0; i < OB; i++)
                        g[r][i] = i < no ? dy[(size_t)(r0 + r) * OC + o0 + i] : 0.0f;
                for (int c = 0; c < C; c += LANES) {
                    gt_v8 acc[OB] = {{0}};
                    for (int r = 0; r < nr; r++) {
                        const gt_v8 xv = gt_load(x + (size_t)(r0 + r) * C + c);
#pragma GCC unroll 8
                        for (int i = 0; i < OB; i++) acc[i] += g[r][i] * xv;
                    }
                    for (int i = 0; i < no; i++) {
                        float *d = dw + ((size_t)e * OC + o0 + i) * C + c;
                        gt_store(d, gt_load(d) + acc[i]);
                    }
                }
            }
        }
    }
    return 0;
}

TITAN_KERNEL_EXPORT int titan_kernel_plugin_init(const titan_kernel_host *host) {
    static const titan_kernel_desc gmm = {
        .abi_version = TITAN_KERNEL_ABI_VERSION,
        .struct_size = sizeof(titan_kernel_desc),
        .op = "grouped_mm",
        .name = "grouped_tiles",
        .constraints = "dim % 8 == 0, moe_ffn_dim % 8 == 0",
        .check = gt_check,
        .layout = TITAN_LAYOUT_BSHD, /* no heads tensors: unused */
        .forward = gt_forward,
        .backward = gt_backward,
        .workspace_bytes = gt_workspace_bytes,
        .saved_bytes = gt_saved_bytes,
        /* backward adds into titan's gradients directly: no [E, OC, C] scratch + add pass */
        .flags = TITAN_KERNEL_BWD_ACCUMULATES,
    };
    return host->register_kernel(host, &gmm);
}
