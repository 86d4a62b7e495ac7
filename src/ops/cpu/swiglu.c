/* SwiGLU: out = silu(gate) * up with silu(g) = g / (1 + exp(-g)) (torch's CPU formula).
 * exp is vm_expf (vmath.h), so the loops vectorise. Elementwise, hence deterministic.
 *
 * One loop per direction, its operands fp32 or bf16 bits: gate and up both bf16 (in16) or both
 * fp32, the outputs both bf16 (out16) or both fp32. A bf16 input is expanded exactly as it is
 * loaded, a bf16 output rounded as it is stored (ops_cpu_bf16_bits: ops_bf16_from_f32's
 * rounding), so each value is the fp32 loop's, rounded where it is stored as bf16. The loop is
 * instantiated per (in16, out16) by inlining with constant flags inside the parallel region
 * (OpenMP outlines a `parallel for` before inlining, which left the flags runtime values and the
 * loop unvectorised); a pass through an L1 buffer per conversion instead made the bf16 outputs
 * slower to write than fp32 ones (compute-bound at 2 threads). fp32 throughout is the default
 * implementation; the bf16 one (swiglu_bf16.c) passes the mirrors it finds. */
#include "ops/cpu/isa.h"
#include "ops/cpu/vmath.h"

#include <omp.h>

#define INLINE static inline __attribute__((always_inline))

INLINE float load(const float *p, const uint16_t *p16, long i, int in16) {
    return in16 ? ops_cpu_bf16_value(p16[i]) : p[i];
}

INLINE void store(float *p, uint16_t *p16, long i, float v, int out16) {
    if (out16)
        p16[i] = ops_cpu_bf16_bits(v);
    else
        p[i] = v;
}

/* This thread's part [*a, *b) of [0, n): contiguous, as schedule(static) gives them, in whole
 * 64-byte lines of fp32 */
static void thread_part(long n, long *a, long *b) {
    const long t = omp_get_thread_num(), T = omp_get_num_threads(), lines = (n + 15) / 16;
    const long l0 = lines * t / T, l1 = lines * (t + 1) / T;
    *a = l0 * 16 < n ? l0 * 16 : n;
    *b = l1 * 16 < n ? l1 * 16 : n;
}

/* Each input stream asks for its lines AHEAD elements ahead, BLOCK elements at a time (as
 * bf16.c's conversions do: on the AMX Xeon VM the hardware's prefetchers left these streams
 * waiting on memory; 0.6B's [2048, 3072], 2 threads, fwd from bf16 to bf16 4.6 -> 1.7 ms) */
enum { BLOCK = 64, AHEAD = 1024 };
INLINE void ahead(const void *p, long i, int es) {
    for (long l = 0; l < BLOCK * es; l += 64)
        __builtin_prefetch((const void *)((uintptr_t)p + (uintptr_t)(i + AHEAD) * es + l), 0, 3);
}
INLINE void ahead_in(const float *p, const uint16_t *p16, long i, int in16) {
    if (in16)
        ahead(p16, i, 2);
    else
        ahead(p, i, 4);
}

INLINE void fwd_loop(float *out, uint16_t *out16, const float *gate, const uint16_t *gate16,
                     const float *up, const uint16_t *up16, long a, long b, int in16, int o16) {
    for (long c = a; c < b; c += BLOCK) {
        const long e = c + BLOCK < b ? c + BLOCK : b;
        ahead_in(gate, gate16, c, in16), ahead_in(up, up16, c, in16);
#pragma omp simd
        for (long i = c; i < e; i++) {
            const float g = load(gate, gate16, i, in16);
            const float silu = g / (1.0f + vm_expf(-g));
            store(out, out16, i, silu * load(up, up16, i, in16), o16);
        }
    }
}

void KFN(ops_cpu_swiglu16_fwd)(float *out, uint16_t *out16, const float *gate,
                               const uint16_t *gate16, const float *up, const uint16_t *up16, int N,
                               int F) {
    const long n = (long)N * F;
    const int in16 = gate16 && up16;
#pragma omp parallel
    {
        long a, b;
        thread_part(n, &a, &b);
        if (in16 && out16)
            fwd_loop(out, out16, gate, gate16, up, up16, a, b, 1, 1);
        else if (in16)
            fwd_loop(out, out16, gate, gate16, up, up16, a, b, 1, 0);
        else if (out16)
            fwd_loop(out, out16, gate, gate16, up, up16, a, b, 0, 1);
        else
            fwd_loop(out, out16, gate, gate16, up, up16, a, b, 0, 0);
    }
}

/* sig = sigmoid(g), silu = g * sig, silu' = sig * (1 + g * (1 - sig)):
 * dgate (+)= dout * up * silu',  dup (+)= dout * silu (dx_acc 0: added to +0.0f, the bits of +=
 * on zeroed buffers, neither read). bf16 outputs are written (dx_acc ignored). */
INLINE void bwd_loop(float *dgate, uint16_t *dgate16, float *dup, uint16_t *dup16,
                     const float *dout, const float *gate, const uint16_t *gate16, const float *up,
                     const uint16_t *up16, long a, long b, int dx_acc, int in16, int o16) {
    const int acc = dx_acc && !o16;
    for (long c = a; c < b; c += BLOCK) {
        const long e = c + BLOCK < b ? c + BLOCK : b;
        ahead_in(gate, gate16, c, in16), ahead_in(up, up16, c, in16), ahead(dout, c, 4);
#pragma omp simd
        for (long i = c; i < e; i++) {
            const float g = load(gate, gate16, i, in16);
            const float den = 1.0f + vm_expf(-g);
            const float sig = 1.0f / den;
            const float silu = g / den; /* the forward's silu, bit for bit */
            const float dsilu = sig * (1.0f + g * (1.0f - sig));
            const float dy = dout[i];
            store(dgate, dgate16, i, (acc ? dgate[i] : 0.0f) + dy * load(up, up16, i, in16) * dsilu,
                  o16);
            store(dup, dup16, i, (acc ? dup[i] : 0.0f) + dy * silu, o16);
        }
    }
}

void KFN(ops_cpu_swiglu16_bwd)(float *dgate, uint16_t *dgate16, float *dup, uint16_t *dup16,
                               const float *dout, const float *gate, const uint16_t *gate16,
                               const float *up, const uint16_t *up16, int N, int F, int dx_acc) {
    const long n = (long)N * F;
    const int in16 = gate16 && up16, o16 = dgate16 && dup16;
#pragma omp parallel
    {
        long a, b;
        thread_part(n, &a, &b);
        if (in16 && o16)
            bwd_loop(dgate, dgate16, dup, dup16, dout, gate, gate16, up, up16, a, b, dx_acc, 1, 1);
        else if (in16)
            bwd_loop(dgate, dgate16, dup, dup16, dout, gate, gate16, up, up16, a, b, dx_acc, 1, 0);
        else if (o16)
            bwd_loop(dgate, dgate16, dup, dup16, dout, gate, gate16, up, up16, a, b, dx_acc, 0, 1);
        else
            bwd_loop(dgate, dgate16, dup, dup16, dout, gate, gate16, up, up16, a, b, dx_acc, 0, 0);
    }
}

void KFN(ops_cpu_swiglu_fwd)(float *out, const float *gate, const float *up, int N, int F) {
    KFN(ops_cpu_swiglu16_fwd)(out, NULL, gate, NULL, up, NULL, N, F);
}

void KFN(ops_cpu_swiglu_bwd)(float *dgate, float *dup, const float *dout, const float *gate,
                             const float *up, int N, int F, int dx_acc) {
    KFN(ops_cpu_swiglu16_bwd)(dgate, NULL, dup, NULL, dout, gate, NULL, up, NULL, N, F, dx_acc);
}
