/* ops: the subcommand that lists, tests and times the registered kernels (titan kernels). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ops/ops.h"

void ops_cmd_kernels_usage(FILE *f) {
    fprintf(f, "usage: titan kernels [list]                     registered implementations\n"
               "       titan kernels test [NAME] [--shapes N] [--seed S] [-v]\n"
               "       titan kernels bench [NAME] [--shape bench|small] [--min-time SEC]\n"
               "                           [--flavor FLAVOR] [--batch N] [--seq N]\n"
               "                           [--routing skewed|even]\n"
               "NAME: IMPL or OP/IMPL (default: every implementation). test compares\n"
               "forward outputs and input gradients with the op's default (the default\n"
               "with 'reference') on random shapes; bench times it against the default.\n"
               "bench shapes: --shape bench (bench_train.sh's model, batch 4, seq 512) or\n"
               "small; --flavor takes the model dims from a registry flavor (0.6B, ...),\n"
               "--batch and --seq replace the batch size and sequence length.\n"
               "grouped_mm's rows go to the experts by a skewed routing drawn afresh\n"
               "for every call (the median call is reported), or --routing even.\n"
               "--plugin PATH (repeatable) loads a kernel plugin first.\n");
}

/* titan kernels [list|test|bench] [NAME] [--plugin PATH]...: the registry, conformance
 * against the default implementations, and timings (ops/conform.c). */
int ops_cmd_kernels(int argc, char **argv, ops_flavor_dims_fn flavor_dims, base_err *err) {
    ops_register_builtin();
    const char *mode = "list", *name = NULL;
    ops_conform_opts o = {.shapes = 0, .seed = 1, .verbose = 0, .min_sec = 0.3};
    /* bench shape: bench/bench_train.sh's model and batch, or a small one for smoke tests */
    ops_ctx ctx = {.batch = 4,
                   .seq_len = 512,
                   .dim = 512,
                   .n_heads = 8,
                   .n_kv_heads = 4,
                   .head_dim = 64,
                   .ffn_dim = 1536,
                   .vocab = 151936,
                   .n_experts = 64,
                   .top_k = 4,
                   .moe_ffn_dim = 768};
    /* --flavor replaces the model dims of --shape, --batch and --seq its batch and sequence */
    const char *flavor = NULL;
    int batch = 0, seq = 0;
    base_args it = {argc, argv, 0, err};
    int i = 2;
    if (i < argc &&
        (!strcmp(argv[i], "list") || !strcmp(argv[i], "test") || !strcmp(argv[i], "bench")))
        mode = argv[i++];
    for (it.i = i; it.i < argc; it.i++) {
        const char *a = argv[it.i];
        if (!strcmp(a, "--plugin")) {
            const char *v = base_args_value(&it);
            if (!v || ops_plugin_load(v, err)) return -1;
        } else if (!strcmp(a, "--shapes")) {
            if (base_args_int(&it, &o.shapes, 1)) return -1;
        } else if (!strcmp(a, "--seed")) {
            int seed;
            if (base_args_int(&it, &seed, 0)) return -1;
            o.seed = (uint64_t)seed + 1;
        } else if (!strcmp(a, "--min-time")) {
            if (base_args_f64(&it, &o.min_sec, 0, 60)) return -1;
        } else if (!strcmp(a, "--shape")) {
            const char *v = base_args_value(&it);
            if (!v) return -1;
            if (!strcmp(v, "small"))
                ctx = (ops_ctx){.batch = 1,
                                .seq_len = 64,
                                .dim = 64,
                                .n_heads = 4,
                                .n_kv_heads = 2,
                                .head_dim = 16,
                                .ffn_dim = 128,
                                .vocab = 512,
                                .n_experts = 8,
                                .top_k = 2,
                                .moe_ffn_dim = 32};
            else if (strcmp(v, "bench"))
                return base_fail(err, "kernels: --shape is 'bench' or 'small', not '%s'", v);
        } else if (!strcmp(a, "--routing")) {
            const char *v = base_args_value(&it);
            if (!v) return -1;
            if (strcmp(v, "even") && strcmp(v, "skewed"))
                return base_fail(err, "kernels: --routing is 'skewed' or 'even', not '%s'", v);
            o.even_routing = !strcmp(v, "even");
        } else if (!strcmp(a, "--flavor")) {
            if (!(flavor = base_args_value(&it))) return -1;
        } else if (!strcmp(a, "--batch")) {
            if (base_args_int(&it, &batch, 1)) return -1;
        } else if (!strcmp(a, "--seq")) {
            if (base_args_int(&it, &seq, 1)) return -1;
        } else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
            o.verbose = 1;
        } else if (base_args_is_help(&it)) {
            ops_cmd_kernels_usage(stdout);
            return 0;
        } else if (a[0] != '-' && !name && strcmp(mode, "list")) {
            name = a;
        } else {
            return base_fail(err, "kernels: unexpected argument '%s' (titan kernels --help)", a);
        }
    }
    if (flavor) {
        if (!flavor_dims) return base_fail(err, "kernels: --flavor needs the model registry");
        if (flavor_dims(flavor, &ctx, err)) return -1;
    }
    if (batch) ctx.batch = batch;
    if (seq) ctx.seq_len = seq;
    /* the per-call "kernel X at conformance" replacement lines would drown the results */
    if (strcmp(mode, "list")) base_log_set_level(BASE_LOG_WARN);
    if (!strcmp(mode, "test")) {
        printf("CPU kernels ISA: %s\n", ops_cpu_isa());
        /* which engine the bf16 implementations' GEMMs are checked on (TITAN_BF16_ENGINE) */
        printf("bf16 engine: %s (CPU bf16 units: %s; AMX layouts: %s; titan's AMX GEMM: %s; "
               "lm_head + CE: %s; attention: %s; experts: %s)\n",
               ops_bf16_engine(), ops_bf16_native() ? "yes" : "no", ops_bf16_layouts(),
               ops_bf16_amx_gemm(), ops_bf16_lmhead_ce(), ops_bf16_attention(),
               ops_bf16_grouped_mm());
        const int failed = ops_conform_test(name, &o, err);
        if (failed < 0) return -1;
        if (failed) return base_fail(err, "kernels test: %d implementation(s) failed", failed);
        return 0;
    }
    if (!strcmp(mode, "bench")) return ops_conform_bench(name, &ctx, &o, err) ? -1 : 0;
    const ops_impl *impls[128];
    int n = ops_list(impls, 128);
    /* which compiled copy the built-in CPU kernels run (TITAN_ISA=default forces the baseline) */
    printf("CPU kernels ISA: %s\n", ops_cpu_isa());
    printf("%-12s %-12s %-8s %s\n", "op", "impl", "default", "constraints");
    for (int k = 0; k < n; k++) {
        const char *origin = ops_impl_origin(impls[k]);
        int is_default = 1; /* the first registered for its op */
        for (int j = 0; j < k; j++) is_default &= impls[j]->op != impls[k]->op;
        char where[300] = "";
        if (origin) snprintf(where, sizeof where, "  (plugin %s)", origin);
        printf("%-12s %-12s %-8s %s%s\n", ops_kind_name(impls[k]->op), impls[k]->name,
               is_default ? "yes" : "", impls[k]->constraints[0] ? impls[k]->constraints : "-",
               where);
    }
    return 0;
}
