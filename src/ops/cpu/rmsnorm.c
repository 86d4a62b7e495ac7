/* RMSNorm: out = w * (x * rstd), rstd = 1/sqrt(mean(x^2) + eps), as torch's Qwen3RMSNorm
 * (x * rsqrt(var + eps), then the weight multiply). Row reductions are accumulated in double. */
#include "ops/cpu/isa.h"

#include <math.h>
#include <omp.h>

/* Column tiles of the dw reduction: a multiple of one AVX-512 vector of floats, at most
 * RMS_COL_MAX columns (a 4 KiB double accumulator on the stack). */
#define RMS_COL_TILE 16
#define RMS_COL_MAX 512

/* One row: o = w * (x * rstd). Both forwards go through it, so add_rmsnorm's out is
 * rmsnorm_fwd(h) bit for bit (backward recomputes the norm with rmsnorm_fwd). */
static inline float rms_row(float *restrict o, const float *restrict x, const float *restrict w,
                            int C, float eps) {
    double ss = 0.0;
#pragma omp simd reduction(+ : ss)
    for (int c = 0; c < C; c++) ss += (double)x[c] * (double)x[c];
    float var = (float)(ss / (double)C);
    float r = 1.0f / sqrtf(var + eps);
#pragma omp simd
    for (int c = 0; c < C; c++) o[c] = w[c] * (x[c] * r);
    return r;
}

void KFN(ops_cpu_rmsnorm_fwd)(float *out, float *rstd, const float *inp, const float *w, int N,
                              int C, float eps) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        rstd[n] = rms_row(out + (size_t)n * C, inp + (size_t)n * C, w, C, eps);
}

/* h = x + y, then the norm of h while its row is still in L1: the residual add and the
 * norm touch memory once (read x, y; write h, out) instead of twice. x or y may be h. */
void KFN(ops_cpu_add_rmsnorm_fwd)(float *h, float *out, float *rstd, const float *x, const float *y,
                                  const float *w, int N, int C, float eps) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const size_t o = (size_t)n * C;
        float *hr = h + o;
        const float *xr = x + o, *yr = y + o;
#pragma omp simd
        for (int c = 0; c < C; c++) hr[c] = xr[c] + yr[c];
        rstd[n] = rms_row(out + o, hr, w, C, eps);
    }
}

/* With xhat = x * rstd and g = dout * w:
 *   dinp += rstd * (g - xhat * mean(g * xhat)),   dw += sum over rows of dout * xhat.
 * dinp is parallel over rows; dw over column tiles, each walking the rows in order with
 * double accumulators, so both are bitwise independent of the thread count. */
void KFN(ops_cpu_rmsnorm_bwd)(float *dinp, float *dw, const float *dout, const float *inp,
                              const float *w, const float *rstd, int N, int C) {
    if (dinp) {
#pragma omp parallel for schedule(static)
        for (int n = 0; n < N; n++) {
            const float *restrict x = inp + (size_t)n * C;
            const float *restrict dy = dout + (size_t)n * C;
            float *restrict dx = dinp + (size_t)n * C;
            float r = rstd[n];
            double dot = 0.0; /* sum of g * xhat */
#pragma omp simd reduction(+ : dot)
            for (int c = 0; c < C; c++) dot += (double)(dy[c] * w[c]) * (double)(x[c] * r);
            float mean = (float)(dot / (double)C);
#pragma omp simd
            for (int c = 0; c < C; c++) {
                float xhat = x[c] * r;
                float g = dy[c] * w[c];
                dx[c] += r * (g - xhat * mean);
            }
        }
    }
    if (dw) {
        /* Column tiles as wide as the threads allow, up to RMS_COL_MAX: each row visit then
         * reads a contiguous run (a 16-column tile would touch a new page per row once rows
         * are a few KB apart: 2.2 GB/s at dim 2048). The width does not change the bits:
         * every column still sums its rows in order. */
        int width = (C + omp_get_max_threads() - 1) / omp_get_max_threads();
        width = (width + RMS_COL_TILE - 1) / RMS_COL_TILE * RMS_COL_TILE;
        if (width > RMS_COL_MAX) width = RMS_COL_MAX;
        const int ntiles = (C + width - 1) / width;
#pragma omp parallel for schedule(static)
        for (int tile = 0; tile < ntiles; tile++) {
            const int c0 = tile * width, wd = C - c0 < width ? C - c0 : width;
            double acc[RMS_COL_MAX] = {0};
            for (int n = 0; n < N; n++) {
                const float *restrict x = inp + (size_t)n * C + c0;
                const float *restrict dy = dout + (size_t)n * C + c0;
                float r = rstd[n];
#pragma omp simd
                for (int j = 0; j < wd; j++) acc[j] += (double)dy[j] * (double)(x[j] * r);
            }
            for (int j = 0; j < wd; j++) dw[c0 + j] += (float)acc[j];
        }
    }
}
