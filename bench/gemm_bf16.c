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
 * With TITAN_BENCH_MKL=/path/to/libmkl_rt.so.N (PyPI `mkl`, loaded at run time; set
 * MKL_THREADING_LAYER=GNU so it shares titan's libgomp), a fourth path: MKL's
 * cblas_gemm_bf16bf16f32 on the same products, the weight converted beforehand (as the mirror)
 * and x / dy converted per call (as titan's bf16 path), its result checked against the
 * emulated bf16 product (both multiply the same bf16 values exactly and sum in fp32).
 *
 * usage: bench_gemm_bf16 [REPEATS] [small|calls|step]   (cmake --build build --target
 * bench_gemm_bf16; step: Qwen3-0.6B's projections at 1 x 2048 tokens)
 * Prints GFLOP/s per (shape, product, path) and bf16 / fp32 ratios; "bf16 held" with x and dy
 * held too (ops_bf16_hold_copy, as the model holds them): the products without conversions.
 * `calls`: the time of one call at a 1x1x1 product (the engine's overhead per call alone) and at
 * attention/bf16's task shapes at 0.6B x 2048 (64 query rows, ~1024 keys, head_dim 128: S = Q K^T
 * and O = P V, as x W^T products), which it calls ~1.3e5 times a step: whether that overhead
 * matters beside the products on bf16 units. */
#include <dlfcn.h>
#include <math.h>
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
/* `step`: Qwen3-0.6B's projections at 1 x 2048 tokens, the products of its profiled step */
static const shape g_step[] = {{"0.6B x 2048 wq", 2048, 2048, 1024},
                               {"0.6B x 2048 wk, wv", 2048, 1024, 1024},
                               {"0.6B x 2048 wo", 2048, 1024, 2048},
                               {"0.6B x 2048 w1, w3", 2048, 3072, 1024},
                               {"0.6B x 2048 w2", 2048, 1024, 3072}};
static const shape g_calls[] = {
    {"1x1x1", 1, 1, 1}, {"attention S", 64, 1024, 128}, {"attention O", 64, 128, 1024}};

static float *rnd(size_t n, uint64_t stream) {
    float *p = base_alloc(n * sizeof(float));
    if (!p) exit(2);
    for (size_t i = 0; i < n; i++) p[i] = base_rng_normal(3, stream, i) * 0.05f;
    return p;
}

typedef struct {
    const ops_impl *impl;
    float *out, *x, *w, *dy, *dx, *dw;
    int N, OC, C;
} job;

static void call(const job *j, int phase) {
    if (phase == 0)
        ((ops_matmul_fwd_fn)j->impl->fwd)(j->out, j->x, j->w, j->N, j->C, j->OC);
    else if (phase == 1)
        ((ops_matmul_bwd_fn)j->impl->bwd)(j->dx, NULL, j->dy, j->x, j->w, j->N, j->C, j->OC, 1, 1);
    else
        ((ops_matmul_bwd_fn)j->impl->bwd)(NULL, j->dw, j->dy, j->x, j->w, j->N, j->C, j->OC, 1, 1);
}

static void titan_call(const void *j, int phase) {
    call(j, phase);
}

/* Best seconds of reps calls of fn(arg, phase), after one warm-up call (oneDNN creates its
 * primitive there). */
static double best(void (*fn)(const void *, int), const void *arg, int phase, int reps) {
    double b = 1e30;
    fn(arg, phase);
    for (int r = 0; r < reps; r++) {
        const double t = base_now();
        fn(arg, phase);
        const double d = base_now() - t;
        if (d < b) b = d;
    }
    return b;
}

/* MKL's bf16 GEMM (mkl_cblas.h: row major 101, no transpose 111, transpose 112; LP64 ints) */
typedef void (*mkl_gemm_bf16_fn)(int layout, int ta, int tb, int M, int N, int K, float alpha,
                                 const uint16_t *A, int lda, const uint16_t *B, int ldb, float beta,
                                 float *C, int ldc);
static mkl_gemm_bf16_fn g_mkl;
typedef struct {
    const job *j;
    const uint16_t *w16;
    uint16_t *a16, *b16; /* per-call conversions of x / dy */
    float *c;            /* the product's output */
} mkl_job;

static void mkl_call(const mkl_job *k, int phase) {
    const job *j = k->j;
    const int N = j->N, OC = j->OC, C = j->C;
    if (phase == 0) { /* out[N,OC] = x W^T */
        ops_bf16_from_f32(k->a16, j->x, (size_t)N * C);
        g_mkl(101, 111, 112, N, OC, C, 1, k->a16, C, k->w16, C, 0, k->c, OC);
    } else if (phase == 1) { /* dx[N,C] += dy W */
        ops_bf16_from_f32(k->a16, j->dy, (size_t)N * OC);
        g_mkl(101, 111, 111, N, C, OC, 1, k->a16, OC, k->w16, C, 1, k->c, C);
    } else { /* dW[OC,C] += dy^T x */
        ops_bf16_from_f32(k->a16, j->dy, (size_t)N * OC);
        ops_bf16_from_f32(k->b16, j->x, (size_t)N * C);
        g_mkl(101, 112, 111, OC, C, N, 1, k->a16, OC, k->b16, C, 1, k->c, C);
    }
}

static void mkl_call_any(const void *k, int phase) {
    mkl_call(k, phase);
}

/* Relative L2 distance of MKL's forward product from the emulated bf16 engine's (both exact
 * products of the same bf16 values, summed in fp32 in different orders: ~1e-7). */
static double mkl_check(const mkl_job *k, const ops_impl *b16) {
    const job *j = k->j;
    const size_t n = (size_t)j->N * j->OC;
    mkl_call(k, 0);
    ((ops_matmul_fwd_fn)b16->fwd)(j->out, j->x, j->w, j->N, j->C, j->OC);
    double d = 0, r = 0;
    for (size_t i = 0; i < n; i++) {
        d += ((double)k->c[i] - j->out[i]) * ((double)k->c[i] - j->out[i]);
        r += (double)j->out[i] * j->out[i];
    }
    return sqrt(d / (r > 0 ? r : 1));
}

int main(int argc, char **argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 3;
    const int small = argc > 2 && !strcmp(argv[2], "small"),
              calls = argc > 2 && !strcmp(argv[2], "calls"),
              step = argc > 2 && !strcmp(argv[2], "step");
    ops_register_builtin();
    const ops_impl *f32 = ops_find(OPS_MATMUL, "default"), *b16 = ops_find(OPS_MATMUL, "bf16");
    printf("bf16 engine: %s; CPU bf16 units: %s; CPU kernels ISA %s\n", ops_bf16_engine(),
           ops_bf16_native() ? "yes" : "no", ops_cpu_isa());
    const char *mkl_path = getenv("TITAN_BENCH_MKL");
    if (mkl_path && mkl_path[0]) {
        void *h = dlopen(mkl_path, RTLD_NOW | RTLD_LOCAL);
        g_mkl = h ? (mkl_gemm_bf16_fn)dlsym(h, "cblas_gemm_bf16bf16f32") : NULL;
        if (!g_mkl) {
            fprintf(stderr, "TITAN_BENCH_MKL=%s: %s\n", mkl_path,
                    h ? "no cblas_gemm_bf16bf16f32 in it" : dlerror());
            return 2;
        }
        printf("MKL: %s (MKL_THREADING_LAYER=%s)\n", mkl_path,
               getenv("MKL_THREADING_LAYER") ? getenv("MKL_THREADING_LAYER") : "unset");
    }
    static const char *const prod[] = {"fwd x W^T", "dx = dy W", "dW = dy^T x"};
    const shape *sh = small ? g_small : calls ? g_calls : step ? g_step : g_shapes;
    const int ns = small   ? 1
                   : calls ? 3
                   : step  ? (int)(sizeof g_step / sizeof g_step[0])
                           : (int)(sizeof g_shapes / sizeof g_shapes[0]);
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
        mkl_job mkl = {&j, NULL, NULL, NULL, NULL};
        if (g_mkl) {
            const size_t big = (size_t)N * (OC > C ? OC : C), wn = (size_t)OC * C;
            uint16_t *w16 = base_alloc(wn * sizeof(uint16_t));
            mkl = (mkl_job){&j, w16, base_alloc(big * sizeof(uint16_t)),
                            base_alloc((size_t)N * C * sizeof(uint16_t)),
                            base_alloc((big > wn ? big : wn) * sizeof(float))};
            if (!w16 || !mkl.a16 || !mkl.b16 || !mkl.c) return 2;
            ops_bf16_from_f32(w16, j.w, wn);
        }
        for (int p = 0; p < 3; p++) {
            j.impl = f32;
            const double tf = best(titan_call, &j, p, reps);
            j.impl = b16;
            const double tc = best(titan_call, &j, p, reps);
            base_err err;
            if (ops_bf16_mirror_add(j.w, (size_t)OC * C, mirror, &err)) return 2;
            const double tm = best(titan_call, &j, p, reps);
            /* x and dy held as well (converted once, outside the timing): the products alone,
             * as the model calls them (its norm outputs and output gradients held) */
            const int hx = !ops_bf16_hold_copy(j.x, (size_t)N * C),
                      hy = !ops_bf16_hold_copy(j.dy, (size_t)N * OC);
            const double th = best(titan_call, &j, p, reps);
            if (hx) ops_bf16_release(j.x);
            if (hy) ops_bf16_release(j.dy);
            ops_bf16_mirror_remove(j.w);
            printf("  %-12s fp32 %8.1f GFLOP/s | bf16 %8.1f (%.2fx) | bf16 held %8.1f | bf16 cold "
                   "%8.1f (%.2fx)",
                   prod[p], flops / tf / 1e9, flops / tm / 1e9, tf / tm, flops / th / 1e9,
                   flops / tc / 1e9, tf / tc);
            if (calls) printf(" | us per call: fp32 %.2f, bf16 %.2f", tf * 1e6, tm * 1e6);
            if (mkl.c) {
                const double tk = best(mkl_call_any, &mkl, p, reps);
                printf(" | MKL bf16 %8.1f (%.2fx)", flops / tk / 1e9, tf / tk);
            }
            printf("\n");
        }
        if (mkl.c) {
            printf("  MKL vs emulated bf16 forward: relative L2 %.2e\n", mkl_check(&mkl, b16));
            base_free(mkl.c), base_free((void *)mkl.w16), base_free(mkl.a16), base_free(mkl.b16);
        }
        base_free(mirror);
        base_free(j.out), base_free(j.x), base_free(j.w), base_free(j.dy), base_free(j.dx),
            base_free(j.dw);
    }
    return 0;
}
