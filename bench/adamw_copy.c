/* The bf16 weight copy made by AdamW as it writes the weights (optim_bf16_copy) against the
 * step followed by a conversion pass of its own (what a bf16 step did before), on N floats
 * (default 596M, Qwen3-0.6B's parameters: ~12 GB of memory), in the bf16 engine's copy format,
 * all threads; alternating, each the median of R runs. Then the fp32 step over S spans of two
 * parameter groups' hyperparameters ([[optimizer.param_groups]]: a span a parameter at most;
 * default 200, more than the bench model's or 0.6B's groups of norms / the rest make) against
 * the one-span step, alternating. Then the step with the moments in bf16
 * (optimizer.implementation = "fused_opt_states_bf16") against fp32 moments, alternating.
 * Prints the CPU's note-worthy figures.
 *   cmake --build build --target bench_adamw_copy && build/bench_adamw_copy [N] [R] [S] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optim/optim.h"

static int cmp(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    const size_t n = argc > 1 ? (size_t)atoll(argv[1]) : (size_t)596049920;
    const int R = argc > 2 ? atoi(argv[2]) : 7, S = argc > 3 ? atoi(argv[3]) : 200;
    if (!n || R < 1 || R > 100 || S < 1 || (size_t)S > n)
        return fprintf(stderr, "usage: bench_adamw_copy [N] [R] [S]\n"), 2;
    float *p = malloc(n * sizeof *p), *g = malloc(n * sizeof *g);
    void *copy = malloc(ops_bf16_mirror_bytes(n));
    optim_adamw o;
    base_err err;
    if (!p || !g || !copy || optim_adamw_init(&o, n, 0, &err))
        return fprintf(stderr, "out of memory\n"), 1;
    for (size_t i = 0; i < n; i++) p[i] = 0.01f * (float)(i % 100), g[i] = 1e-3f * (float)(i % 7);
    memset(copy, 0, ops_bf16_mirror_bytes(n));
    const optim_range all = {0, n};
    const optim_bf16_copy c16 = {copy, &all, 1};
    const optim_adamw_cfg cfg = {
        .lr = 1e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
    const optim_span span = {.lo = 0, .hi = n, .c = &cfg};
    double sep[100], fused[100];
    for (int r = 0; r < R; r++) {
        const double t0 = base_now();
        optim_adamw_step(&o, p, g, 1.0f, &span, 1, 1.0, NULL);
        ops_bf16_mirror_convert(copy, 0, p, n);
        const double t1 = base_now();
        optim_adamw_step(&o, p, g, 1.0f, &span, 1, 1.0, &c16);
        fused[r] = base_now() - t1;
        sep[r] = t1 - t0;
    }
    qsort(sep, (size_t)R, sizeof *sep, cmp);
    qsort(fused, (size_t)R, sizeof *fused, cmp);
    printf("AdamW + bf16 copy of %zu parameters (engine %s, %zu-byte copy), median of %d:\n"
           "  step, then a conversion pass: %7.1f ms (min %7.1f)\n"
           "  copy written by the step:     %7.1f ms (min %7.1f)  %.2fx\n",
           n, ops_bf16_engine(), ops_bf16_mirror_bytes(1), R, sep[R / 2] * 1e3, sep[0] * 1e3,
           fused[R / 2] * 1e3, fused[0] * 1e3, sep[R / 2] / fused[R / 2]);
    /* S spans, alternately two groups' hyperparameters (equal lengths: the worst case for the
     * calls' overhead is many short spans; the layout's norms are one-thread calls) */
    const optim_adamw_cfg other = {.lr = 1e-4, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8};
    optim_span *spans = malloc(sizeof *spans * (size_t)S);
    if (!spans) return fprintf(stderr, "out of memory\n"), 1;
    for (int k = 0; k < S; k++)
        spans[k] = (optim_span){.lo = n / (size_t)S * (size_t)k,
                                .hi = k == S - 1 ? n : n / (size_t)S * (size_t)(k + 1),
                                .c = k % 2 ? &other : &cfg};
    for (int r = 0; r < R; r++) {
        const double t0 = base_now();
        optim_adamw_step(&o, p, g, 1.0f, &span, 1, 1.0, NULL);
        const double t1 = base_now();
        optim_adamw_step(&o, p, g, 1.0f, spans, S, 1.0, NULL);
        fused[r] = base_now() - t1; /* reused: the spans' times */
        sep[r] = t1 - t0;           /* one span's */
    }
    qsort(sep, (size_t)R, sizeof *sep, cmp);
    qsort(fused, (size_t)R, sizeof *fused, cmp);
    printf("AdamW (fp32) of %zu parameters, median of %d:\n"
           "  one group (a span):           %7.1f ms (min %7.1f)\n"
           "  %4d spans of two groups:      %7.1f ms (min %7.1f)  %.3fx\n",
           n, R, sep[R / 2] * 1e3, sep[0] * 1e3, S, fused[R / 2] * 1e3, fused[0] * 1e3,
           fused[R / 2] / sep[R / 2]);
    free(spans);
    optim_adamw o16;
    if (optim_adamw_init(&o16, n, 1, &err)) return fprintf(stderr, "out of memory\n"), 1;
    for (int r = 0; r < R; r++) {
        const double t0 = base_now();
        optim_adamw_step(&o, p, g, 1.0f, &span, 1, 1.0, NULL);
        const double t1 = base_now();
        optim_adamw_step(&o16, p, g, 1.0f, &span, 1, 1.0, NULL);
        fused[r] = base_now() - t1; /* reused: bf16 moments' times */
        sep[r] = t1 - t0;           /* fp32 moments' */
    }
    qsort(sep, (size_t)R, sizeof *sep, cmp);
    qsort(fused, (size_t)R, sizeof *fused, cmp);
    printf("AdamW of %zu parameters, moments fp32 / bf16 (fused_opt_states_bf16), median of %d:\n"
           "  fp32 moments:                 %7.1f ms (min %7.1f)\n"
           "  bf16 moments:                 %7.1f ms (min %7.1f)  %.3fx\n",
           n, R, sep[R / 2] * 1e3, sep[0] * 1e3, fused[R / 2] * 1e3, fused[0] * 1e3,
           fused[R / 2] / sep[R / 2]);
    optim_adamw_free(&o16);
    optim_adamw_free(&o);
    free(p);
    free(g);
    free(copy);
    return 0;
}
