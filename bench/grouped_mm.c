/* grouped_mm: the MoE experts' GEMMs through both registered implementations of the
 * grouped_mm op ("default": one multi-threaded GEMM per expert; "grouped": one parallel pass
 * over cache-sized tiles of all experts), against the dense GEMM peak of the same total size.
 *
 * Shapes: the reduced 30B-A3B block (dim 2048, 64 experts, top-4, expert width 768) for
 * 4096 tokens, i.e. R = 16384 routed rows. One expert FFN pass = gate and up (R x 768 x 2048
 * each) and down (R x 2048 x 768): forward 6 R D Fe FLOPs, backward (input and weight
 * gradients) twice that. Routings: "balanced" (each token's 4 experts drawn from a softmax of
 * random logits: about 256 rows per expert) and "skewed" (logits biased by -0.15 * expert id:
 * a few big groups, many small or empty ones). The dense reference is the same three
 * products with one group of all R rows ("default" with E = 1).
 *
 * usage: bench_grouped_mm [TOKENS] [REPEATS]   (cmake --build build --target bench_grouped_mm)
 * Prints one line per (routing, implementation): best-of-REPEATS seconds and GFLOP/s for the
 * forward and the backward, and the ratio to the dense GEMM rate. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"

enum { D = 2048, E = 64, K = 4, FE = 768 };

static float *rnd(size_t n, uint64_t stream, float scale) {
    float *p = base_alloc(n * sizeof(float));
    if (!p) exit(2);
    for (size_t i = 0; i < n; i++) p[i] = scale * base_rng_normal(7, stream, i);
    return p;
}

/* offs[E+1] of a top-K routing of T tokens; skew biases the logits towards low expert ids */
static void route(int32_t *offs, int T, double skew) {
    memset(offs, 0, sizeof(int32_t) * (E + 1));
    for (int t = 0; t < T; t++) {
        double s[E];
        int taken[E] = {0};
        for (int e = 0; e < E; e++) s[e] = base_rng_normal(11, (uint64_t)t, (uint64_t)e) - skew * e;
        for (int k = 0; k < K; k++) {
            int b = -1;
            for (int e = 0; e < E; e++)
                if (!taken[e] && (b < 0 || s[e] > s[b])) b = e;
            taken[b] = 1;
            offs[b + 1]++;
        }
    }
    for (int e = 0; e < E; e++) offs[e + 1] += offs[e];
}

typedef struct {
    double fwd, bwd; /* best seconds */
} timing;

static timing run(const ops_impl *impl, const int32_t *offs, int n_groups, int R, int reps,
                  float *x, float *w1, float *w3, float *w2, float *g, float *u, float *h, float *y,
                  float *dy, float *dh, float *dx, float *dw1, float *dw3, float *dw2) {
    ops_grouped_mm_fwd_fn fwd = (ops_grouped_mm_fwd_fn)impl->fwd;
    ops_grouped_mm_bwd_fn bwd = (ops_grouped_mm_bwd_fn)impl->bwd;
    timing t = {1e30, 1e30};
    for (int r = 0; r < reps; r++) {
        double t0 = base_now();
        fwd(g, x, w1, offs, n_groups, D, FE);
        fwd(u, x, w3, offs, n_groups, D, FE);
        fwd(y, h, w2, offs, n_groups, FE, D);
        double t1 = base_now();
        bwd(dh, dw2, dy, h, w2, offs, n_groups, FE, D, 0, 1); /* dh, dx written, as moe.c's */
        bwd(dx, dw1, g, x, w1, offs, n_groups, D, FE, 0, 1);
        bwd(dx, dw3, u, x, w3, offs, n_groups, D, FE, 1, 1);
        double t2 = base_now();
        if (t1 - t0 < t.fwd) t.fwd = t1 - t0;
        if (t2 - t1 < t.bwd) t.bwd = t2 - t1;
    }
    return t;
}

int main(int argc, char **argv) {
    const int T = argc > 1 ? atoi(argv[1]) : 4096, reps = argc > 2 ? atoi(argv[2]) : 3;
    if (T <= 0 || reps <= 0) return fprintf(stderr, "usage: %s [TOKENS] [REPEATS]\n", argv[0]), 2;
    const int R = T * K;
    ops_register_builtin();
    const ops_impl *impls[2] = {ops_find(OPS_GROUPED_MM, "default"),
                                ops_find(OPS_GROUPED_MM, "grouped")};
    if (!impls[0] || !impls[1]) return fprintf(stderr, "grouped_mm not registered\n"), 1;
    const size_t WE = (size_t)E * FE * D;
    float *x = rnd((size_t)R * D, 1, 1), *h = rnd((size_t)R * FE, 2, 1),
          *dy = rnd((size_t)R * D, 3, 1);
    float *w1 = rnd(WE, 4, 0.02f), *w3 = rnd(WE, 5, 0.02f), *w2 = rnd(WE, 6, 0.02f);
    float *g = rnd((size_t)R * FE, 7, 1), *u = rnd((size_t)R * FE, 8, 1);
    float *y = base_alloc(sizeof(float) * (size_t)R * D), *dh = base_alloc(sizeof(float) * R * FE);
    float *dx = base_alloc(sizeof(float) * (size_t)R * D);
    float *dw1 = rnd(WE, 9, 0), *dw3 = rnd(WE, 10, 0), *dw2 = rnd(WE, 11, 0);
    if (!y || !dh || !dx) return 2;
    const double ff = 6.0 * R * D * FE, fb = 2 * ff; /* FLOPs of the forward, the backward */
    printf("grouped_mm bench: %d tokens x top-%d = %d rows, dim %d, %d experts of width %d; "
           "forward %.1f GFLOP, backward %.1f GFLOP; best of %d\n",
           T, K, R, D, E, FE, ff / 1e9, fb / 1e9, reps);
    /* the dense reference: one group of all rows */
    int32_t dense[2] = {0, R};
    timing td =
        run(impls[0], dense, 1, R, reps, x, w1, w3, w2, g, u, h, y, dy, dh, dx, dw1, dw3, dw2);
    const double dense_rate = (ff + fb) / (td.fwd + td.bwd);
    printf("%-9s %-8s fwd %6.3f s %7.1f GFLOP/s  bwd %6.3f s %7.1f GFLOP/s  total %7.1f GFLOP/s\n",
           "dense", "(1 GEMM)", td.fwd, ff / td.fwd / 1e9, td.bwd, fb / td.bwd / 1e9,
           dense_rate / 1e9);
    const struct {
        const char *name;
        double skew;
    } routings[2] = {{"balanced", 0.0}, {"skewed", 0.15}};
    for (int r = 0; r < 2; r++) {
        int32_t offs[E + 1];
        route(offs, T, routings[r].skew);
        int lo = R, hi = 0, empty = 0;
        for (int e = 0; e < E; e++) {
            const int n = offs[e + 1] - offs[e];
            lo = n < lo ? n : lo, hi = n > hi ? n : hi, empty += n == 0;
        }
        printf("routing %s: rows per expert min %d max %d, %d empty\n", routings[r].name, lo, hi,
               empty);
        for (int i = 0; i < 2; i++) {
            timing t = run(impls[i], offs, E, R, reps, x, w1, w3, w2, g, u, h, y, dy, dh, dx, dw1,
                           dw3, dw2);
            const double rate = (ff + fb) / (t.fwd + t.bwd);
            printf("%-9s %-8s fwd %6.3f s %7.1f GFLOP/s  bwd %6.3f s %7.1f GFLOP/s  total %7.1f "
                   "GFLOP/s = %3.0f%% of dense\n",
                   routings[r].name, impls[i]->name, t.fwd, ff / t.fwd / 1e9, t.bwd,
                   fb / t.bwd / 1e9, rate / 1e9, 100 * rate / dense_rate);
        }
    }
    return 0;
}
