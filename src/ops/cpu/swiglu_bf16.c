/* swiglu "bf16": the default's loop (swiglu.c) on the bf16 mirrors of its operands where they
 * are there. A model keeps gate and up as bf16 bits (their products' outputs, rounded) and
 * hands them over held (ops_bf16_hold_rounded); the outputs, read by bf16 GEMMs only, it asks
 * for in bf16 (ops_bf16_emit_begin). Per element of N F: the backward reads 2 + 2 + 4 bytes and
 * writes 2 + 2, where with fp32 operands it read 12 and wrote 8 (and the GEMMs then converted
 * dgate and dup: 8 more read, 4 written). Without mirrors and asks it is the default, bit for
 * bit; with them each value is the default's on the same (rounded) inputs, rounded as the
 * GEMMs' operand conversion rounds it. */
#include "ops/cpu/cpu.h"

/* gate's and up's bits where both are held, else neither (the loop reads both alike) */
static void inputs16(const uint16_t **g16, const uint16_t **u16, const float *gate, const float *up,
                     size_t n) {
    *g16 = ops_cpu_bf16_bits_of(gate, n), *u16 = ops_cpu_bf16_bits_of(up, n);
    if (!*g16 || !*u16) *g16 = *u16 = NULL;
}

void ops_cpu_swiglu_bf16_fwd(float *out, const float *gate, const float *up, int N, int F) {
    const size_t n = (size_t)N * F;
    const uint16_t *g16, *u16;
    inputs16(&g16, &u16, gate, up, n);
    ops_cpu_swiglu16_fwd(out, ops_cpu_bf16_emit_take(out, n, 1), gate, g16, up, u16, N, F);
}

void ops_cpu_swiglu_bf16_bwd(float *dgate, float *dup, const float *dout, const float *gate,
                             const float *up, int N, int F, int dx_acc) {
    const size_t n = (size_t)N * F;
    /* both outputs as bf16 or neither (one loop writes both); an output added to stays fp32 (its
     * fp32 values are what is added to) */
    uint16_t *dg16 = NULL, *du16 = NULL;
    if (!dx_acc && ops_cpu_bf16_emit_take(dgate, n, 0) && ops_cpu_bf16_emit_take(dup, n, 0))
        dg16 = ops_cpu_bf16_emit_take(dgate, n, 1), du16 = ops_cpu_bf16_emit_take(dup, n, 1);
    const uint16_t *g16, *u16;
    inputs16(&g16, &u16, gate, up, n);
    ops_cpu_swiglu16_bwd(dgate, dg16, dup, du16, dout, gate, g16, up, u16, N, F, dx_acc);
}
