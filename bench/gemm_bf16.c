/* bf16 GEMMs against fp32 through the matmul op, at the shapes issue 16 measured (the bench
 * model's and Qwen3-0.6B's projections and lm_head) and their backward products.
 *
 * Per shape (N tokens x OC outputs x C inputs): the forward out = x W^T, the input gradient
 * dx = dy W and the weight gradient dW = dy^T x, each as
 *   fp32        matmul/default (OpenBLAS / oneDNN sgemm, ops_cpu_sgemm)
 *   bf16        matmul/bf16 with W registered as a weight mirror (the model's once-per-step
 *               copy: W is not converted per call; x and dy are)
 *   bf16 cold   matmul/bf16 without a mirror (every operand converted per call: what a GEMM
 *               on a weight outside the model costs)
 * and the mirror's conversion itself (once per step per weight). Engine: ops_bf16_engine()
 * (onednn where the CPU has AMX-BF16 / AVX512_BF16, else emulated), printed with the CPU flags.
 *
 * usage: bench_gemm_bf16 [REPEATS] [small]   (cmake --build build --target bench_gemm_bf16)
 * Prints GFLOP/s per (shape, product, path) and bf16 / fp32 ratios. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"

typedef struct {
    const char *name;
    int N, OC, C;
} shape;

static const shape g_shapes[] = {
    {"bench lm_head", 2048, 151936, 512}, {"0.6B lm_head", 512, 151936, 1024},
    {"0.6B FFN up", 512, 3072, 1024},     {"0.6B FFN down", 512, 1024, 3072},
    {"bench FFN", 2048, 1536, 512},
};
static const shape g_small[] = {{"small", 256, 1024, 512}};

static float *rnd(size_t n, uint64_t stream) {
    float *p = base_alloc(n * sizeof(float));
    if (!p) exit(2);
    for (size_t i = 0; i < n; i++) p[i] = base_rng_normal(3, stream, i) * 0.05f;
    return p;
}

/* Best seconds of reps calls of fn(phase). */
typedef struct {
    const ops_impl *impl;
    float *out, *x, *w, *dy, *dx, *dw;
    int N, OC, C;
} job;

static void call(const job *j, int phase) {
    if (phase == 0)
        ((ops_matmul_fwd_fn)j->impl->fwd)(j->out, j->x, j->w, j->N, j->C, j->OC);
    else if (phase == 1)
        ((ops_matmul_bwd_fn)j->impl->bwd)(j->dx, NULL, j->dy, j->x, j->w, j->N, j->C, j->OC);
    else
        ((ops_matmul_bwd_fn)j->impl->bwd)(NULL, j->dw, j->dy, j->x, j->w, j->N, j->C, j->OC);
}

static double best(const job *j, int phase, int reps) {
    double b = 1e30;
    call(j, phase); /* warm-up (oneDNN creates its primitive here) */
    for (int r = 0; r < reps; r++) {
        const double t = base_now();
        call(j, phase);
        const double d = base_now() - t;
        if (d < b) b = d;
    }
    return b;
}

int main(int argc, char **argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 3;
    const int small = argc > 2 && !strcmp(argv[2], "small");
    ops_register_builtin();
    const ops_impl *f32 = ops_find(OPS_MATMUL, "default"), *b16 = ops_find(OPS_MATMUL, "bf16");
    printf("bf16 engine: %s; CPU bf16 units: %s; CPU kernels ISA %s\n", ops_bf16_engine(),
           ops_bf16_native() ? "yes" : "no", ops_cpu_isa());
    static const char *const prod[] = {"fwd x W^T", "dx = dy W", "dW = dy^T x"};
    const shape *sh = small ? g_small : g_shapes;
    const int ns = small ? 1 : (int)(sizeof g_shapes / sizeof g_shapes[0]);
    for (int s = 0; s < ns; s++) {
        const int N = sh[s].N, OC = sh[s].OC, C = sh[s].C;
        job j = {f32,
                 rnd((size_t)N * OC, 1),
                 rnd((size_t)N * C, 2),
                 rnd((size_t)OC * C, 3),
                 rnd((size_t)N * OC, 4),
                 rnd((size_t)N * C, 5),
                 rnd((size_t)OC * C, 6),
                 N,
                 OC,
                 C};
        const double flops = 2.0 * N * OC * C;
        void *mirror = base_alloc(ops_bf16_mirror_bytes((size_t)OC * C));
        if (!mirror) return 2;
        double t0 = base_now();
        ops_bf16_mirror_convert(mirror, 0, j.w, (size_t)OC * C);
        const double conv = base_now() - t0;
        printf("%s (N %d x OC %d x C %d): weight conversion %.2f ms (once per step)\n", sh[s].name,
               N, OC, C, conv * 1e3);
        for (int p = 0; p < 3; p++) {
            j.impl = f32;
            const double tf = best(&j, p, reps);
            j.impl = b16;
            const double tc = best(&j, p, reps);
            base_err err;
            if (ops_bf16_mirror_add(j.w, (size_t)OC * C, mirror, &err)) return 2;
            const double tm = best(&j, p, reps);
            ops_bf16_mirror_remove(j.w);
            printf("  %-12s fp32 %8.1f GFLOP/s | bf16 %8.1f (%.2fx) | bf16 cold %8.1f (%.2fx)\n",
                   prod[p], flops / tf / 1e9, flops / tm / 1e9, tf / tm, flops / tc / 1e9, tf / tc);
        }
        base_free(mirror);
        base_free(j.out), base_free(j.x), base_free(j.w), base_free(j.dy), base_free(j.dx),
            base_free(j.dw);
    }
    return 0;
}
