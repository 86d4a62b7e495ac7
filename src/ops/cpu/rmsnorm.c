/* RMSNorm: out = w * (x * rstd), rstd = 1/sqrt(mean(x^2) + eps), as torch's Qwen3RMSNorm
 * (x * rsqrt(var + eps), then the weight multiply). Row reductions are accumulated in double. */
#include "ops/cpu/isa.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>
#include <stdlib.h>

#include "base/base.h"

/* One row: o = w * (x * rstd), or its bf16 bits into o16 (not NULL: an output asked for in bf16,
 * ops_cpu_bf16_emit_take; the bits the conversion of o would give). Both forwards go through it,
 * so add_rmsnorm's out is rmsnorm_fwd(h) bit for bit (backward recomputes the norm with
 * rmsnorm_fwd). */
static inline float rms_row(float *restrict o, uint16_t *restrict o16, const float *restrict x,
                            const float *restrict w, int C, float eps) {
    double ss = 0.0;
#pragma omp simd reduction(+ : ss)
    for (int c = 0; c < C; c++) ss += (double)x[c] * (double)x[c];
    float var = (float)(ss / (double)C);
    float r = 1.0f / sqrtf(var + eps);
    if (o16) {
#pragma omp simd
        for (int c = 0; c < C; c++) o16[c] = ops_cpu_bf16_bits(w[c] * (x[c] * r));
    } else {
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] = w[c] * (x[c] * r);
    }
    return r;
}

/* The norm's output where the model asked for it in bf16 (a norm read only by bf16 GEMMs: a
 * block's attention norm, a dense block's FFN norm; model's norm_held): its bits straight into the
 * held mirror, 2 bytes an element written instead of 4 written, 4 read and 2 written again by the
 * conversion (0.6B x 2048: 16 MB a norm, four norms a layer). NULL otherwise. */
static uint16_t *rms_out16(const float *out, int N, int C) {
    return ops_cpu_bf16_emit_take(out, (size_t)N * C, 1);
}

void KFN(ops_cpu_rmsnorm_fwd)(float *out, float *rstd, const float *inp, const float *w, int N,
                              int C, float eps) {
    uint16_t *o16 = rms_out16(out, N, C);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        rstd[n] = rms_row(out + (size_t)n * C, o16 ? o16 + (size_t)n * C : NULL,
                          inp + (size_t)n * C, w, C, eps);
}

/* h = x + y, then the norm of h while its row is still in L1: the residual add and the
 * norm touch memory once (read x, y; write h, out) instead of twice. x or y may be h. */
void KFN(ops_cpu_add_rmsnorm_fwd)(float *h, float *out, float *rstd, const float *x, const float *y,
                                  const float *w, int N, int C, float eps) {
    uint16_t *o16 = rms_out16(out, N, C);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const size_t o = (size_t)n * C;
        float *hr = h + o;
        const float *xr = x + o, *yr = y + o;
#pragma omp simd
        for (int c = 0; c < C; c++) hr[c] = xr[c] + yr[c];
        rstd[n] = rms_row(out + o, o16 ? o16 + o : NULL, hr, w, C, eps);
    }
}

/* Row blocks of the fused backward: a fixed count (a function of N only, never of the thread
 * count), so dw's summation order, and with it its bits, is the same on any number of threads. */
#define RMS_BWD_BLOCKS 128

/* dinp of one row: dinp (+)= rstd * (g - xhat * mean(g * xhat)) (acc: += or =; = adds to +0.0f,
 * the bits of += on a zeroed row). */
static inline void rms_bwd_row(float *restrict dx, const float *restrict dy,
                               const float *restrict x, const float *restrict w, float r, int C,
                               int acc) {
    double dot = 0.0; /* sum of g * xhat */
#pragma omp simd reduction(+ : dot)
    for (int c = 0; c < C; c++) dot += (double)(dy[c] * w[c]) * (double)(x[c] * r);
    float mean = (float)(dot / (double)C);
#pragma omp simd
    for (int c = 0; c < C; c++) {
        float xhat = x[c] * r;
        float g = dy[c] * w[c];
        dx[c] = (acc ? dx[c] : 0.0f) + r * (g - xhat * mean);
    }
}

/* With xhat = x * rstd and g = dout * w:
 *   dinp (+)= rstd * (g - xhat * mean(g * xhat)),   dw += sum over rows of dout * xhat.
 * One pass over memory: the rows are cut into RMS_BWD_BLOCKS fixed blocks; a thread takes a
 * block's rows one at a time, writes their dinp and adds their dw terms into the block's partial
 * sums (double, C per block) while the row is still in L1. dw is then each column's block partials
 * summed in block order. Each term dout * float(x * rstd) is exact in double (two 24-bit
 * mantissas), so the blocked order changes dw's double sum only by its own rounding (a float dw
 * differs from the row-ordered sum only at a rounding tie), and the result is bitwise independent
 * of the thread count. (Two passes, dinp by rows then dw by column tiles over all rows, read dout
 * and inp twice: 24 instead of 16 bytes an element, and the second read from DRAM.) */
void KFN(ops_cpu_rmsnorm_bwd)(float *dinp, float *dw, const float *dout, const float *inp,
                              const float *w, const float *rstd, int N, int C, int dx_acc,
                              int dw_acc) {
    if (C <= 0 || (!dinp && !dw)) return;
    if (N <= 0) { /* an empty sum */
        if (dw && !dw_acc) memset(dw, 0, sizeof(float) * (size_t)C);
        return;
    }
    const int nb = N < RMS_BWD_BLOCKS ? N : RMS_BWD_BLOCKS;
    double *part = NULL; /* [nb, C] the blocks' dw partial sums */
    if (dw) {
        part = malloc(sizeof(double) * (size_t)nb * (size_t)C);
        if (!part) { /* the op returns void: running out of memory here is fatal */
            base_log(BASE_LOG_ERROR, "rmsnorm_bwd: out of memory (%d x %d partial sums)", nb, C);
            abort();
        }
    }
#pragma omp parallel for schedule(static)
    for (int b = 0; b < nb; b++) {
        const int n0 = (int)((int64_t)N * b / nb), n1 = (int)((int64_t)N * (b + 1) / nb);
        double *restrict acc = part ? part + (size_t)b * C : NULL;
        if (acc)
            for (int c = 0; c < C; c++) acc[c] = 0.0;
        for (int n = n0; n < n1; n++) {
            const float *restrict x = inp + (size_t)n * C;
            const float *restrict dy = dout + (size_t)n * C;
            const float r = rstd[n];
            if (dinp) rms_bwd_row(dinp + (size_t)n * C, dy, x, w, r, C, dx_acc);
            if (acc) {
#pragma omp simd
                for (int c = 0; c < C; c++) acc[c] += (double)dy[c] * (double)(x[c] * r);
            }
        }
    }
    if (!dw) return;
#pragma omp parallel for schedule(static) if (parallel : (size_t)nb * C > 65536)
    for (int c = 0; c < C; c++) {
        double s = 0.0;
        for (int b = 0; b < nb; b++) s += part[(size_t)b * C + c];
        dw[c] = dw_acc ? dw[c] + (float)s : (float)s;
    }
    free(part);
}
