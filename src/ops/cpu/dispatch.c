/* Run-time choice between the kernel copies of isa.h: the AVX-512 one when the CPU has
 * AVX-512 F/BW/CD/DQ/VL (x86-64-v4) and the build made one, otherwise the baseline. TITAN_ISA
 * overrides it: "default" forces the baseline (how the tests check the fallback on an AVX-512
 * machine); any other value leaves the choice to the CPU check (AVX-512 code cannot be forced
 * onto a CPU without it: it would die of SIGILL). The choice is made once per process, so results
 * stay deterministic within a run; the copies agree elementwise (both use FMA) but reductions may
 * round differently. */
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "ops/cpu/isa.h"

typedef struct {
    const char *label;
#define OPS_CPU_ISA_FIELD(name, params, args) void(*name) params;
    OPS_CPU_ISA_VOID_KERNELS(OPS_CPU_ISA_FIELD)
    double(*ops_cpu_lmhead_ce) OPS_CPU_LMHEAD_CE_PARAMS;
} isa_table;

#define OPS_CPU_ISA_INIT(name, params, args) .name = name##_default,
static const isa_table g_default = {.label = "default (" TITAN_ARCH_NAME ")",
                                    .ops_cpu_lmhead_ce = ops_cpu_lmhead_ce_default,
                                    OPS_CPU_ISA_VOID_KERNELS(OPS_CPU_ISA_INIT)};
#undef OPS_CPU_ISA_INIT
#ifdef TITAN_HAVE_AVX512_KERNELS
#define OPS_CPU_ISA_INIT(name, params, args) .name = name##_avx512,
static const isa_table g_avx512 = {.label = "avx512 (" TITAN_AVX512_ARCH_NAME ")",
                                   .ops_cpu_lmhead_ce = ops_cpu_lmhead_ce_avx512,
                                   OPS_CPU_ISA_VOID_KERNELS(OPS_CPU_ISA_INIT)};
#undef OPS_CPU_ISA_INIT
#endif

static int cpu_has_avx512(void) {
#if defined(TITAN_HAVE_AVX512_KERNELS) && defined(__x86_64__)
    __builtin_cpu_init();
    /* exactly x86-64-v4's AVX-512 subsets, the -march of that copy */
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vl");
#else
    return 0;
#endif
}

static const isa_table *isa_choose(void) {
    const char *env = getenv("TITAN_ISA");
    if (env && !strcmp(env, "default")) return &g_default;
#ifdef TITAN_HAVE_AVX512_KERNELS
    if (cpu_has_avx512()) return &g_avx512;
#endif
    return &g_default;
}

/* Chosen on first use; concurrent first calls compute the same pointer, so the race is
 * benign, and the atomics make it well defined. */
static const isa_table *isa(void) {
    static const isa_table *chosen;
    const isa_table *t = __atomic_load_n(&chosen, __ATOMIC_ACQUIRE);
    if (!t) {
        t = isa_choose();
        __atomic_store_n(&chosen, t, __ATOMIC_RELEASE);
    }
    return t;
}

const char *ops_cpu_isa(void) {
    return isa()->label;
}

#define OPS_CPU_ISA_DEFINE(name, params, args)                                                     \
    void name params {                                                                             \
        isa()->name args;                                                                          \
    }
OPS_CPU_ISA_VOID_KERNELS(OPS_CPU_ISA_DEFINE)

void ops_cpu_attention_kv(float *out, const float *q, const float *k, const float *v, int T,
                          int pos0, int H, int G, int hd) {
    ops_cpu_attention_kv_prec(out, q, k, v, T, pos0, H, G, hd, OPS_PREC_F32);
}

double ops_cpu_lmhead_ce_prec(float *dx, float *dw, const float *x, const float *w,
                              const int32_t *targets, int N, int D, int V, float grad_scale,
                              float *scratch, int chunk, int64_t *n_valid,
                              const ops_vocab_shard *vs, int dw_acc, ops_prec prec) {
    return isa()->ops_cpu_lmhead_ce(dx, dw, x, w, targets, N, D, V, grad_scale, scratch, chunk,
                                    n_valid, vs, dw_acc, prec);
}

double ops_cpu_lmhead_ce(float *dx, float *dw, const float *x, const float *w,
                         const int32_t *targets, int N, int D, int V, float grad_scale,
                         float *scratch, int chunk, int64_t *n_valid, const ops_vocab_shard *vs,
                         int dw_acc) {
    return ops_cpu_lmhead_ce_prec(dx, dw, x, w, targets, N, D, V, grad_scale, scratch, chunk,
                                  n_valid, vs, dw_acc, OPS_PREC_F32);
}

double ops_cpu_lmhead_ce_bf16(float *dx, float *dw, const float *x, const float *w,
                              const int32_t *targets, int N, int D, int V, float grad_scale,
                              float *scratch, int chunk, int64_t *n_valid,
                              const ops_vocab_shard *vs, int dw_acc) {
    return ops_cpu_lmhead_ce_prec(dx, dw, x, w, targets, N, D, V, grad_scale, scratch, chunk,
                                  n_valid, vs, dw_acc, OPS_PREC_BF16);
}

int ops_cpu_attention_dpbf16_usable(void) {
#ifdef TITAN_HAVE_DPBF16
    static int cached = -1;
    int v = __atomic_load_n(&cached, __ATOMIC_ACQUIRE);
    if (v < 0) {
        v = isa() != &g_default && ops_cpu_has_flag("avx512_bf16") &&
            !ops_cpu_has_flag("amx_bf16") && !strcmp(ops_bf16_engine(), "onednn");
        __atomic_store_n(&cached, v, __ATOMIC_RELEASE);
    }
    return v;
#else
    return 0;
#endif
}

int ops_cpu_env_switch(const char *var, const char *keeps) {
    const char *env = getenv(var);
    if (!env || !*env) return -1;
    if (!strcmp(env, "0") || !strcmp(env, "1")) return env[0] == '1';
    base_log(BASE_LOG_WARN, "%s=%s: not 0 or 1; %s", var, env, keeps);
    return -2;
}

int ops_cpu_grouped_dpbf16_usable(void) {
    static int cached = -1;
    int v = __atomic_load_n(&cached, __ATOMIC_ACQUIRE);
    if (v < 0) {
        const int sw = ops_cpu_env_switch("TITAN_GROUPED_DPBF16",
                                          "grouped_mm/bf16 stays on AVX512_BF16 where it can");
        /* with AMX: only on request (TITAN_GROUPED_AMX=1), its products on tiles; asked first,
         * so that a bad value is said on every CPU */
        const int amx = ops_cpu_bf16_grouped_amx();
#ifdef TITAN_HAVE_DPBF16
        v = sw != 0 && (ops_cpu_attention_dpbf16_usable() || (amx && isa() != &g_default));
#else
        (void)amx;
        v = 0;
#endif
        __atomic_store_n(&cached, v, __ATOMIC_RELEASE);
    }
    return v;
}
