/* lmhead_ce/bf16's logit gradient against exact rounding. With x the identity (N = D rows), the
 * logits are the weight's columns (bf16 values, exact through the GEMM) and dw = G^T x holds the
 * logit gradient G itself, exactly: dw[v, t] = G[t, v]. G's values are bf16 roundings of
 * grad_scale * (softmax - onehot); the reference rounds the same quantity computed in double
 * (sum of exps in double) to bf16, to nearest even, from the double directly. A float sum of the
 * exps drops terms under half an ulp of the running sum, so an implementation whose sums drift
 * low rounds too many values high: ce_cols' one float sum down each 1024-row vocabulary block
 * (session 20) rounded too many high; measured on an AMX Xeon, the row path and the grouped column
 * sums 13 of the 9.7M values here (1.3e-6), the one float sum per block 980 (1.0e-4, all high).
 * The path is chosen by TITAN_AMX_LMHEAD_CE (fused on AMX tiles, the default with AMX-BF16, whose
 * logits stay fp32: here exact too) and TITAN_AMX_LAYOUTS (tests/kernels.cmake runs each). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "ops/cpu/cpu.h"
#include "ops/ops.h"

/* d rounded to the nearest bf16 value (ties to even) in one step, as a float (exact) */
static float bf16_rne(double d) {
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    enum { DROP = 52 - 7 }; /* double mantissa bits below bf16's 7 */
    const uint64_t rest = u & ((UINT64_C(1) << DROP) - 1), half = UINT64_C(1) << (DROP - 1);
    u >>= DROP;
    if (rest > half || (rest == half && (u & 1))) u++;
    u <<= DROP;
    memcpy(&d, &u, sizeof d);
    return (float)d;
}

int main(void) {
    enum { N = 64, V = 151936 };    /* the Qwen3 vocabulary: 149 blocks of 1024 rows */
    const double scale_logit = 3.4; /* a peaked softmax, as the demo's trained logits */
    float *w = malloc(sizeof(float) * (size_t)V * N), *x = calloc((size_t)N * N, sizeof(float)),
          *dw = calloc((size_t)V * N, sizeof(float)), *dx = calloc((size_t)N * N, sizeof(float)),
          *scratch = malloc(sizeof(float) * ops_lmhead_ce_scratch_floats(N, V, OPS_PREC_BF16));
    double *l = malloc(sizeof(double) * V);
    int32_t tg[N];
    if (!w || !x || !dw || !dx || !scratch || !l) return 2;
    for (size_t i = 0; i < (size_t)V * N; i++)
        w[i] = bf16_rne(scale_logit * base_rng_normal(77, 1, i));
    for (int t = 0; t < N; t++) {
        x[t * N + t] = 1.0f;
        tg[t] = (int32_t)(((int64_t)t * 2347 + 11) % V);
    }
    const float gs = 1.0f / N;
    ops_cpu_lmhead_ce_bf16(dx, dw, x, w, tg, N, N, V, gs, scratch, N, NULL, NULL, 1);
    long wrong = 0, high = 0;
    for (int t = 0; t < N; t++) {
        double M = -INFINITY, S = 0.0;
        for (int v = 0; v < V; v++) l[v] = w[(size_t)v * N + t], M = l[v] > M ? l[v] : M;
        for (int v = 0; v < V; v++) S += exp(l[v] - M);
        for (int v = 0; v < V; v++) {
            const float want = bf16_rne(exp(l[v] - M) / S * gs - (v == tg[t] ? gs : 0.0)),
                        got = dw[(size_t)v * N + t];
            wrong += got != want;
            high += got > want;
        }
    }
    const double frac = (double)wrong / ((double)N * V);
    printf("lmhead_ce/bf16 (%s; AMX layouts %s): logit gradient %ld of %ld values not the exact "
           "rounding (%.2e; %ld high, %ld low)\n",
           ops_bf16_lmhead_ce(), ops_bf16_layouts(), wrong, (long)N * V, frac, high, wrong - high);
    /* 2e-5: 15x what both layouts give, a fifth of what a drifting sum gave */
    if (frac > 2e-5) {
        printf("FAIL: more than 2e-5 of the logit gradient off its exact rounding\n");
        return 1;
    }
    printf("ok\n");
    free(w), free(x), free(dw), free(dx), free(scratch), free(l);
    return 0;
}
