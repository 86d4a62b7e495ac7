/* Rotary position embedding, Hugging Face rotate_half convention:
 *   out[j]      = x[j] * cos[j] - x[j + h] * sin[j]
 *   out[j + h]  = x[j + h] * cos[j] + x[j] * sin[j]        (h = hd / 2, j < h)
 * which is x * cat(cos, cos) + rotate_half(x) * cat(sin, sin) evaluated in the same fp32
 * operations as torch (two products, then one add or subtract; no FMA contraction). */
#include "ops/cpu/isa.h"

/* out may equal inp (in place): iteration j reads and writes only elements j and j + h,
 * so the loops carry no dependency and `omp simd` is valid under that exact aliasing.
 * Partially overlapping buffers are not supported. */
void KFN(ops_cpu_rope_fwd)(float *out, const float *inp, const float *cos, const float *sin, int B,
                           int T, int nh, int hd) {
    int h = hd / 2;
    long rows = (long)B * T * nh;
#pragma omp parallel for schedule(static)
    for (long row = 0; row < rows; row++) {
        int t = (int)((row / nh) % T);
        const float *x = inp + (size_t)row * hd;
        float *o = out + (size_t)row * hd;
        const float *c = cos + (size_t)t * h;
        const float *s = sin + (size_t)t * h;
#pragma omp simd
        for (int j = 0; j < h; j++) {
            float x1 = x[j], x2 = x[j + h];
            o[j] = x1 * c[j] - x2 * s[j];
            o[j + h] = x2 * c[j] + x1 * s[j];
        }
    }
}

/* The transpose of the rotation (rotation by -angle):
 *   dinp[j] += dout[j] * cos[j] + dout[j + h] * sin[j]
 *   dinp[j + h] += dout[j + h] * cos[j] - dout[j] * sin[j]
 * When dinp == dout (in place) the rotated gradient REPLACES dout: that is the accumulate
 * semantics for a dinp that was zero, the only case in which ops.h allows the aliasing. */
void KFN(ops_cpu_rope_bwd)(float *dinp, const float *dout, const float *cos, const float *sin,
                           int B, int T, int nh, int hd) {
    int h = hd / 2;
    long rows = (long)B * T * nh;
    int inplace = dinp == dout;
#pragma omp parallel for schedule(static)
    for (long row = 0; row < rows; row++) {
        int t = (int)((row / nh) % T);
        const float *dy = dout + (size_t)row * hd;
        float *dx = dinp + (size_t)row * hd;
        const float *c = cos + (size_t)t * h;
        const float *s = sin + (size_t)t * h;
        if (inplace) {
#pragma omp simd
            for (int j = 0; j < h; j++) {
                float g1 = dy[j], g2 = dy[j + h];
                dx[j] = g1 * c[j] + g2 * s[j];
                dx[j + h] = g2 * c[j] - g1 * s[j];
            }
        } else {
#pragma omp simd
            for (int j = 0; j < h; j++) {
                float g1 = dy[j], g2 = dy[j + h];
                dx[j] += g1 * c[j] + g2 * s[j];
                dx[j + h] += g2 * c[j] - g1 * s[j];
            }
        }
    }
}
