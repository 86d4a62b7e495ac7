/* nn.Linear without bias, through ops_cpu_gemm: "default" in fp32, "bf16" on bf16 operands. */
#include "ops/cpu/cpu.h"

#include <string.h>

/* out[N,OC] = inp[N,C] @ w[OC,C]^T */
static void matmul_fwd(ops_prec prec, float *out, const float *inp, const float *w, int N, int C,
                       int OC) {
    if (N <= 0 || OC <= 0) return;
    if (C <= 0) { /* empty reduction (BLAS rejects lda = 0) */
        memset(out, 0, (size_t)N * (size_t)OC * sizeof(float));
        return;
    }
    ops_cpu_gemm(prec, 0, 1, N, OC, C, 1.0f, inp, C, w, C, 0.0f, out, OC);
}

/* dinp[N,C] (+)= dout[N,OC] @ w[OC,C] (dx_acc: beta 1 or 0; skipped when dinp is NULL);
 * dw[OC,C] (+)= dout[N,OC]^T @ inp[N,C] (dw_acc). Beta 0 never reads C (ops_cpu_gemm). */
static void matmul_bwd(ops_prec prec, float *dinp, float *dw, const float *dout, const float *inp,
                       const float *w, int N, int C, int OC, int dx_acc, int dw_acc) {
    if (C <= 0) return;
    if (N <= 0 || OC <= 0) { /* an empty product (BLAS rejects lda = 0): written sums are 0 */
        if (dinp && !dx_acc && N > 0) memset(dinp, 0, (size_t)N * (size_t)C * sizeof(float));
        if (dw && !dw_acc && OC > 0) memset(dw, 0, (size_t)OC * (size_t)C * sizeof(float));
        return;
    }
    /* dout is both products' operand: in bf16 converted once, not once per product */
    const int held =
        prec == OPS_PREC_BF16 && dinp && dw && !ops_bf16_hold_copy(dout, (size_t)N * OC);
    if (dinp) {
        ops_cpu_gemm(prec, 0, 0, N, C, OC, 1.0f, dout, OC, w, C, dx_acc ? 1.0f : 0.0f, dinp, C);
    }
    if (dw) {
        ops_cpu_gemm(prec, 1, 0, OC, C, N, 1.0f, dout, OC, inp, C, dw_acc ? 1.0f : 0.0f, dw, C);
    }
    if (held) ops_bf16_release(dout);
}

void ops_cpu_matmul_fwd(float *out, const float *inp, const float *w, int N, int C, int OC) {
    matmul_fwd(OPS_PREC_F32, out, inp, w, N, C, OC);
}
void ops_cpu_matmul_bwd(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                        int N, int C, int OC, int dx_acc, int dw_acc) {
    matmul_bwd(OPS_PREC_F32, dinp, dw, dout, inp, w, N, C, OC, dx_acc, dw_acc);
}
void ops_cpu_matmul_bf16_fwd(float *out, const float *inp, const float *w, int N, int C, int OC) {
    matmul_fwd(OPS_PREC_BF16, out, inp, w, N, C, OC);
}
void ops_cpu_matmul_bf16_bwd(float *dinp, float *dw, const float *dout, const float *inp,
                             const float *w, int N, int C, int OC, int dx_acc, int dw_acc) {
    matmul_bwd(OPS_PREC_BF16, dinp, dw, dout, inp, w, N, C, OC, dx_acc, dw_acc);
}
