/* lmhead_ce fused on AMX tiles (ops_cpu_amx_lmhead_ce, src/ops/cpu/amx_gemm.c) against the
 * same function computed in double from the same bf16 operands: the loss (log-sum-exp minus the
 * target's logit, summed), dx += G w and dw += G^T x with G = grad_scale * (softmax - onehot).
 * The kernel rounds G to bf16 (half an ulp: 2^-9 relative) before its products, so dx and dw are
 * held to 2^-7 of the magnitudes of their terms; a wrong block, stride, rescale or edge gives
 * errors of the terms' own size. Shapes cover a vocabulary and token count that are not
 * multiples of the kernel's blocks (32 tokens; 256 vocabulary rows in pass 1, 128 in pass 2;
 * 256-token chunks of dw's sums), ignored and out-of-range targets (no loss, no gradient: their
 * dx rows stay bitwise as they were), and accumulation into dx and dw. Also: one thread gives
 * bitwise the result of two, the loss without gradients is bitwise the loss with them, dw NULL
 * leaves dx bitwise the same, dw_acc 0 writes dw without reading it (bitwise adding to zeros),
 * nothing past dx or dw is written, and a width that is not a multiple of 32 or dw without dx
 * is refused untouched. Skipped (77) where the CPU has no AMX-BF16 or the build no AMX kernel
 * (a build with -DTITAN_AMX_EMULATE=ON runs it on emulated tiles: make test-amx-emulated). */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ops/cpu/cpu.h"

static uint64_t rng = 0x2545f4914f6cdd1du;
static float uniform(void) { /* in [-1, 1) */
    return check_uniform(&rng);
}

enum { GUARD = 4096 }; /* floats after dx and dw, never to be written */

typedef struct {
    int N, D, V;
    float wscale; /* the weight's range: a larger one, a more peaked softmax */
} shape;

static float *falloc(size_t n) {
    float *p = malloc(sizeof(float) * n);
    if (!p) {
        printf("out of memory\n");
        exit(2);
    }
    return p;
}

static void one(shape s) {
    const int N = s.N, D = s.D, V = s.V;
    uint16_t *x = malloc(sizeof(uint16_t) * (size_t)N * D),
             *w = malloc(sizeof(uint16_t) * (size_t)V * D);
    int32_t *tg = malloc(sizeof(int32_t) * (size_t)N);
    double *l = malloc(sizeof(double) * (size_t)V), *g = malloc(sizeof(double) * (size_t)N * V);
    if (!x || !w || !tg || !l || !g) exit(2);
    for (size_t i = 0; i < (size_t)N * D; i++) x[i] = ops_cpu_bf16_bits(uniform());
    for (size_t i = 0; i < (size_t)V * D; i++) w[i] = ops_cpu_bf16_bits(s.wscale * uniform());
    int valid = 0;
    for (int t = 0; t < N; t++) {
        tg[t] = t % 7 == 3 ? -100 : t % 11 == 5 ? V : (int32_t)(((int64_t)t * 7919 + 13) % V);
        valid += tg[t] >= 0 && tg[t] < V;
    }
    const float gs = valid ? 1.0f / (float)valid : 1.0f;
    /* the reference in double: G [N, V], the loss, and each token's logit magnitude bound */
    double loss_ref = 0.0, loss_tol = 0.0;
    for (int t = 0; t < N; t++) {
        double *gt = g + (size_t)t * V;
        if (!(tg[t] >= 0 && tg[t] < V)) {
            for (int v = 0; v < V; v++) gt[v] = 0.0;
            continue;
        }
        double M = -INFINITY, S = 0.0, mag = 0.0;
        for (int v = 0; v < V; v++) {
            double sum = 0.0, m = 0.0;
            for (int d = 0; d < D; d++) {
                const double p = (double)ops_cpu_bf16_value(x[(size_t)t * D + d]) *
                                 ops_cpu_bf16_value(w[(size_t)v * D + d]);
                sum += p;
                m += fabs(p);
            }
            l[v] = sum;
            M = sum > M ? sum : M;
            mag = m > mag ? m : mag;
        }
        for (int v = 0; v < V; v++) S += exp(l[v] - M);
        loss_ref += M + log(S) - l[tg[t]];
        /* fp32 logits (D terms) and fp32 exps summed in blocks */
        loss_tol += 4.0 * (D + 64) * 0x1p-24 * mag + 1e-5 * (fabs(M) + log(S) + 1.0);
        for (int v = 0; v < V; v++) gt[v] = gs * (exp(l[v] - M) / S - (v == tg[t]));
    }
    /* dx, dw start from random values of the gradients' size (the kernel adds to them; its
     * fp32 sums round at the size of what they hold), a guard after each */
    const size_t nx = (size_t)N * D, nw = (size_t)V * D;
    float *dx = falloc(nx + GUARD), *dw = falloc(nw + GUARD), *dx0 = falloc(nx + GUARD),
          *dw0 = falloc(nw + GUARD);
    for (size_t i = 0; i < nx + GUARD; i++) dx0[i] = gs * uniform();
    for (size_t i = 0; i < nw + GUARD; i++) dw0[i] = gs * 0.01f * uniform();
    memcpy(dx, dx0, sizeof(float) * (nx + GUARD));
    memcpy(dw, dw0, sizeof(float) * (nw + GUARD));
    double loss = 0.0;
    const int rc = ops_cpu_amx_lmhead_ce(dx, dw, 1, x, w, tg, N, D, V, gs, &loss);
    CHECK(rc == 0, "N %d D %d V %d: refused", N, D, V);
    CHECK(fabs(loss - loss_ref) <= loss_tol, "N %d D %d V %d: loss %.9g, want %.9g (tol %.2e)", N,
          D, V, loss, loss_ref, loss_tol);
    long bad_dx = 0, bad_dw = 0, moved = 0;
    double worst = 0.0;
    for (int t = 0; t < N; t++) {
        const int ok = tg[t] >= 0 && tg[t] < V;
        for (int d = 0; d < D; d++) {
            const size_t i = (size_t)t * D + d;
            if (!ok) { /* no gradient: the row as it was, bitwise */
                moved += dx[i] != dx0[i];
                continue;
            }
            double want = 0.0, mag = 0.0;
            for (int v = 0; v < V; v++) {
                const double wv = ops_cpu_bf16_value(w[(size_t)v * D + d]),
                             gv = g[(size_t)t * V + v];
                want += gv * wv;
                mag += (v == tg[t] ? gs + fabs(gv + gs) : fabs(gv)) * fabs(wv);
            }
            const double err = fabs((double)dx[i] - dx0[i] - want);
            if (err / (mag + 1e-30) > worst) worst = err / (mag + 1e-30);
            bad_dx += !(err <= 0x1p-7 * mag + 0x1p-23 * fabs(dx0[i]));
        }
    }
    for (int v = 0; v < V; v++)
        for (int d = 0; d < D; d++) {
            double want = 0.0, mag = 0.0;
            for (int t = 0; t < N; t++) {
                const double p = g[(size_t)t * V + v] * ops_cpu_bf16_value(x[(size_t)t * D + d]);
                want += p;
                mag += fabs(p);
            }
            const size_t i = (size_t)v * D + d;
            const double err = fabs((double)dw[i] - dw0[i] - want);
            if (err / (mag + 1e-30) > worst) worst = err / (mag + 1e-30);
            /* and one fp32 rounding of the sum held per 32 tokens (TDPBF16PS, as the SDM
             * defines it, adds its pairs' sums to C once per instruction: 32 tokens here) */
            bad_dw += !(err <= 0x1p-7 * mag + (N / 32 + 2) * 0x1p-24 * (fabs(dw0[i]) + mag));
        }
    int guard = !memcmp(dx + nx, dx0 + nx, sizeof(float) * GUARD) &&
                !memcmp(dw + nw, dw0 + nw, sizeof(float) * GUARD);
    CHECK(!bad_dx && !bad_dw && !moved && guard,
          "N %d D %d V %d: dx %ld of %zu wrong, dw %ld of %zu wrong (worst %.2e of the terms' "
          "magnitude), %ld values of ignored rows moved, guards %s",
          N, D, V, bad_dx, nx, bad_dw, nw, worst, moved, guard ? "untouched" : "WRITTEN");

    /* one thread (inside a parallel region) against two: bitwise */
    float *dx1 = falloc(nx + GUARD), *dw1 = falloc(nw + GUARD);
    memcpy(dx1, dx0, sizeof(float) * (nx + GUARD));
    memcpy(dw1, dw0, sizeof(float) * (nw + GUARD));
    double loss1 = 0.0;
    int rc1 = -1;
#pragma omp parallel num_threads(2)
    {
#pragma omp single
        rc1 = ops_cpu_amx_lmhead_ce(dx1, dw1, 1, x, w, tg, N, D, V, gs, &loss1);
    }
    CHECK(rc1 == 0 && loss1 == loss && !memcmp(dx1, dx, sizeof(float) * (nx + GUARD)) &&
              !memcmp(dw1, dw, sizeof(float) * (nw + GUARD)),
          "N %d D %d V %d: one thread differs from two", N, D, V);
    /* the loss alone, and dx alone: bitwise the same as with everything */
    double loss2 = 0.0;
    CHECK(ops_cpu_amx_lmhead_ce(NULL, NULL, 1, x, w, tg, N, D, V, gs, &loss2) == 0 && loss2 == loss,
          "N %d D %d V %d: loss without gradients %.17g, with %.17g", N, D, V, loss2, loss);
    memcpy(dx1, dx0, sizeof(float) * (nx + GUARD));
    CHECK(ops_cpu_amx_lmhead_ce(dx1, NULL, 1, x, w, tg, N, D, V, gs, &loss2) == 0 &&
              loss2 == loss && !memcmp(dx1, dx, sizeof(float) * (nx + GUARD)),
          "N %d D %d V %d: dx without dw differs", N, D, V);
    /* dw_acc 0: dw written, its old values never read (NaN here), bitwise what adding to
     * zeros gives; the memory after it untouched */
    float *dwz = falloc(nw + GUARD);
    memset(dw1, 0, sizeof(float) * nw);
    memcpy(dw1 + nw, dw0 + nw, sizeof(float) * GUARD);
    for (size_t i = 0; i < nw; i++) dwz[i] = NAN;
    memcpy(dwz + nw, dw0 + nw, sizeof(float) * GUARD);
    memcpy(dx1, dx0, sizeof(float) * (nx + GUARD));
    CHECK(ops_cpu_amx_lmhead_ce(dx1, dw1, 1, x, w, tg, N, D, V, gs, &loss2) == 0, "refused");
    memcpy(dx1, dx0, sizeof(float) * (nx + GUARD));
    CHECK(ops_cpu_amx_lmhead_ce(dx1, dwz, 0, x, w, tg, N, D, V, gs, &loss2) == 0 && loss2 == loss &&
              !memcmp(dwz, dw1, sizeof(float) * (nw + GUARD)) &&
              !memcmp(dx1, dx, sizeof(float) * (nx + GUARD)),
          "N %d D %d V %d: dw_acc 0 is not bitwise dw_acc 1 on zeros", N, D, V);
    free(x), free(w), free(tg), free(l), free(g);
    free(dx), free(dw), free(dx0), free(dw0), free(dx1), free(dw1), free(dwz);
}

int main(void) {
    if (!ops_cpu_amx_usable()) {
        printf("skipped: no AMX-BF16 here (or no AMX kernel in this build)\n");
        return 77;
    }
    /* one of everything; edges in tokens and vocabulary; a width of 96 (three K steps) and a
     * peaked softmax; the bench model's width, a vocabulary block edge (2049 = 8 x 256 + 1) and
     * three of dw's token chunks; two token blocks per thread */
    static const shape shapes[] = {{1, 32, 1, 1.0f},      {37, 64, 300, 1.0f},
                                   {300, 96, 1000, 4.0f}, {65, 512, 2049, 1.0f},
                                   {600, 64, 513, 2.0f},  {1100, 32, 97, 1.0f}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) one(shapes[i]);
    /* refused, nothing written: a width not a multiple of 32; dw without dx */
    uint16_t z[64 * 48] = {0};
    int32_t t1[2] = {0, 1};
    float d[64 * 48], dw[64 * 48];
    for (int i = 0; i < 64 * 48; i++) d[i] = dw[i] = 7.0f;
    double loss = 5.0;
    CHECK(ops_cpu_amx_lmhead_ce(d, dw, 1, z, z, t1, 2, 48, 2, 0.5f, &loss) == -1 && d[0] == 7.0f &&
              dw[0] == 7.0f && loss == 5.0,
          "D 48 not refused");
    CHECK(ops_cpu_amx_lmhead_ce(NULL, dw, 1, z, z, t1, 2, 32, 2, 0.5f, &loss) == -1 &&
              dw[0] == 7.0f && loss == 5.0,
          "dw without dx not refused");
    printf("%zu shapes checked\n", sizeof shapes / sizeof shapes[0]);
    return check_report("test_amx_lmhead_ce");
}
