/* SwiGLU: out = silu(gate) * up with silu(g) = g / (1 + exp(-g)) (torch's CPU formula).
 * exp is vm_expf (vmath.h), so the loops vectorise. Elementwise, hence deterministic. */
#include "ops/cpu/isa.h"
#include "ops/cpu/vmath.h"

void KFN(ops_cpu_swiglu_fwd)(float *out, const float *gate, const float *up, int N, int F) {
    long n = (long)N * F;
#pragma omp parallel for simd schedule(static)
    for (long i = 0; i < n; i++) {
        float g = gate[i];
        float silu = g / (1.0f + vm_expf(-g));
        out[i] = silu * up[i];
    }
}

/* sig = sigmoid(g), silu = g * sig, silu' = sig * (1 + g * (1 - sig)):
 * dgate (+)= dout * up * silu',  dup (+)= dout * silu (dx_acc 0: added to +0.0f, the bits of +=
 * on zeroed buffers, neither read). */
void KFN(ops_cpu_swiglu_bwd)(float *dgate, float *dup, const float *dout, const float *gate,
                             const float *up, int N, int F, int dx_acc) {
    long n = (long)N * F;
#pragma omp parallel for simd schedule(static)
    for (long i = 0; i < n; i++) {
        float g = gate[i];
        float den = 1.0f + vm_expf(-g);
        float sig = 1.0f / den;
        float silu = g / den; /* the forward's silu, bit for bit */
        float dsilu = sig * (1.0f + g * (1.0f - sig));
        float dy = dout[i];
        dgate[i] = (dx_acc ? dgate[i] : 0.0f) + dy * up[i] * dsilu;
        dup[i] = (dx_acc ? dup[i] : 0.0f) + dy * silu;
    }
}
