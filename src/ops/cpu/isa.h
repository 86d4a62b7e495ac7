/* Run-time ISA dispatch of the hand-written CPU kernels (internal to ops/cpu).
 *
 * Each source listed in CMakeLists.txt's TITAN_ISA_KERNELS is compiled twice from the same
 * text: once for the build baseline (TITAN_ARCH, x86-64-v3 by default) with its entry points
 * named NAME_default, once with -march=x86-64-v4 (AVX-512) with them named NAME_avx512.
 * dispatch.c defines the public NAME (cpu.h) as a call through a table chosen once, from the
 * CPU's features or the TITAN_ISA environment variable. Whole translation units are compiled
 * per ISA rather than functions marked with GCC's target_clones because (checked with GCC 12)
 * a clone's non-inlined static callees (att_gemm, att_transpose, row_max, ...) are compiled
 * once, for the baseline, so every helper would need the attribute and become an ifunc of
 * its own; because GCC's resolvers look at the CPU only, so the baseline could not be forced
 * (TITAN_ISA=default) to test it on an AVX-512 machine; and because preprocessor tests such
 * as __FMA__ (vmath.h, adamw.c) then see the ISA of the copy they are compiled into. */
#ifndef TITAN_OPS_CPU_ISA_H
#define TITAN_OPS_CPU_ISA_H

#include "ops/cpu/cpu.h"

/* X(NAME, (params), (args)) for every dispatched kernel returning void; lmhead_ce (double)
 * is spelled out where needed. */
#define OPS_CPU_ISA_VOID_KERNELS(X)                                                                \
    X(ops_cpu_embedding_fwd, (float *out, const int32_t *tokens, const float *wte, int N, int D),  \
      (out, tokens, wte, N, D))                                                                    \
    X(ops_cpu_embedding_bwd,                                                                       \
      (float *dwte, const float *dout, const int32_t *tokens, int N, int D),                       \
      (dwte, dout, tokens, N, D))                                                                  \
    X(ops_cpu_rmsnorm_fwd,                                                                         \
      (float *out, float *rstd, const float *inp, const float *w, int N, int C, float eps),        \
      (out, rstd, inp, w, N, C, eps))                                                              \
    X(ops_cpu_rmsnorm_bwd,                                                                         \
      (float *dinp, float *dw, const float *dout, const float *inp, const float *w,                \
       const float *rstd, int N, int C, int dx_acc, int dw_acc),                                   \
      (dinp, dw, dout, inp, w, rstd, N, C, dx_acc, dw_acc))                                        \
    X(ops_cpu_add_rmsnorm_fwd,                                                                     \
      (float *h, float *out, float *rstd, const float *x, const float *y, const float *w, int N,   \
       int C, float eps),                                                                          \
      (h, out, rstd, x, y, w, N, C, eps))                                                          \
    X(ops_cpu_rope_fwd,                                                                            \
      (float *out, const float *inp, const float *cos, const float *sin, int B, int T, int nh,     \
       int hd),                                                                                    \
      (out, inp, cos, sin, B, T, nh, hd))                                                          \
    X(ops_cpu_rope_bwd,                                                                            \
      (float *dinp, const float *dout, const float *cos, const float *sin, int B, int T, int nh,   \
       int hd),                                                                                    \
      (dinp, dout, cos, sin, B, T, nh, hd))                                                        \
    X(ops_cpu_attention_fwd,                                                                       \
      (float *out, float *lse, const float *q, const float *k, const float *v, int B, int T,       \
       int H, int G, int hd),                                                                      \
      (out, lse, q, k, v, B, T, H, G, hd))                                                         \
    X(ops_cpu_attention_bwd,                                                                       \
      (float *dq, float *dk, float *dv, const float *dout, const float *out, const float *lse,     \
       const float *q, const float *k, const float *v, int B, int T, int H, int G, int hd,         \
       int dx_acc),                                                                                \
      (dq, dk, dv, dout, out, lse, q, k, v, B, T, H, G, hd, dx_acc))                               \
    X(ops_cpu_attention_gemm_fwd,                                                                  \
      (float *out, float *lse, const float *q, const float *k, const float *v, int B, int T,       \
       int H, int G, int hd),                                                                      \
      (out, lse, q, k, v, B, T, H, G, hd))                                                         \
    X(ops_cpu_attention_gemm_bwd,                                                                  \
      (float *dq, float *dk, float *dv, const float *dout, const float *out, const float *lse,     \
       const float *q, const float *k, const float *v, int B, int T, int H, int G, int hd,         \
       int dx_acc),                                                                                \
      (dq, dk, dv, dout, out, lse, q, k, v, B, T, H, G, hd, dx_acc))                               \
    X(ops_cpu_attention_bf16_fwd,                                                                  \
      (float *out, float *lse, const float *q, const float *k, const float *v, int B, int T,       \
       int H, int G, int hd),                                                                      \
      (out, lse, q, k, v, B, T, H, G, hd))                                                         \
    X(ops_cpu_attention_bf16_bwd,                                                                  \
      (float *dq, float *dk, float *dv, const float *dout, const float *out, const float *lse,     \
       const float *q, const float *k, const float *v, int B, int T, int H, int G, int hd,         \
       int dx_acc),                                                                                \
      (dq, dk, dv, dout, out, lse, q, k, v, B, T, H, G, hd, dx_acc))                               \
    X(ops_cpu_attention_kv_prec,                                                                   \
      (float *out, const float *q, const float *k, const float *v, int T, int pos0, int H, int G,  \
       int hd, ops_prec prec),                                                                     \
      (out, q, k, v, T, pos0, H, G, hd, prec))                                                     \
    X(ops_cpu_swiglu_fwd, (float *out, const float *gate, const float *up, int N, int F),          \
      (out, gate, up, N, F))                                                                       \
    X(ops_cpu_swiglu16_fwd,                                                                        \
      (float *out, uint16_t *out16, const float *gate, const uint16_t *gate16, const float *up,    \
       const uint16_t *up16, int N, int F),                                                        \
      (out, out16, gate, gate16, up, up16, N, F))                                                  \
    X(ops_cpu_swiglu16_bwd,                                                                        \
      (float *dgate, uint16_t *dgate16, float *dup, uint16_t *dup16, const float *dout,            \
       const float *gate, const uint16_t *gate16, const float *up, const uint16_t *up16, int N,    \
       int F, int dx_acc),                                                                         \
      (dgate, dgate16, dup, dup16, dout, gate, gate16, up, up16, N, F, dx_acc))                    \
    X(ops_cpu_swiglu_bwd,                                                                          \
      (float *dgate, float *dup, const float *dout, const float *gate, const float *up, int N,     \
       int F, int dx_acc),                                                                         \
      (dgate, dup, dout, gate, up, N, F, dx_acc))                                                  \
    X(ops_cpu_adamw,                                                                               \
      (float *p, void *m, void *v, const float *g, float gscale, size_t n, double lr,              \
       double beta1, double beta2, double eps, double wd, double l2, int mv_bf16, int64_t t),      \
      (p, m, v, g, gscale, n, lr, beta1, beta2, eps, wd, l2, mv_bf16, t))

#define OPS_CPU_LMHEAD_CE_PARAMS                                                                   \
    (float *dx, float *dw, const float *x, const float *w, const int32_t *targets, int N, int D,   \
     int V, float grad_scale, float *scratch, int chunk, int64_t *n_valid,                         \
     const ops_vocab_shard *vs, int dw_acc, ops_prec prec)

/* Declarations of both compiled copies. */
#define OPS_CPU_ISA_DECLARE(name, params, args)                                                    \
    void name##_default params;                                                                    \
    void name##_avx512 params;
OPS_CPU_ISA_VOID_KERNELS(OPS_CPU_ISA_DECLARE)
double ops_cpu_lmhead_ce_default OPS_CPU_LMHEAD_CE_PARAMS;
double ops_cpu_lmhead_ce_avx512 OPS_CPU_LMHEAD_CE_PARAMS;

/* Floats per vector register in the copy being compiled (the AVX-512 copy is built with
 * -mprefer-vector-width=512). */
#if defined(__AVX512F__)
#define OPS_CPU_VEC_FLOATS 16
#elif defined(__AVX__)
#define OPS_CPU_VEC_FLOATS 8
#else
#define OPS_CPU_VEC_FLOATS 4
#endif

/* KFN(NAME): the name a kernel source gives its entry point NAME in the copy being built
 * (TITAN_KERNEL_ISA is default or avx512, set by CMake). */
#define KFN_CAT_(name, isa) name##_##isa
#define KFN_CAT(name, isa) KFN_CAT_(name, isa)
#ifdef TITAN_KERNEL_ISA
#define KFN(name) KFN_CAT(name, TITAN_KERNEL_ISA)
#endif

#endif
