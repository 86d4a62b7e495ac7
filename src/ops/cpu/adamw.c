/* AdamW, the arithmetic of torch.optim.AdamW (foreach=False, fused=False, capturable=False,
 * amsgrad=False, maximize=False) in fp32, element by element:
 *   param.mul_(1 - lr * wd)
 *   exp_avg.lerp_(grad, 1 - beta1)            torch's vectorised lerp for weight < 0.5:
 *                                             fma(weight, grad - m, m)
 *   exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
 *   bias_correction1 = 1 - beta1 ** step,  bias_correction2 = 1 - beta2 ** step
 *   step_size = lr / bias_correction1
 *   denom = (exp_avg_sq.sqrt() / sqrt(bias_correction2)).add_(eps)
 *   param.addcdiv_(exp_avg, denom, value=-step_size)
 * Python computes the scalars in double; torch casts each to float where it meets an fp32
 * tensor, and so does this kernel. Elementwise, so bitwise independent of the thread count. */
#include "ops/cpu/isa.h"

#include <math.h>

/* torch's AVX2/AVX-512 kernels use a fused multiply-add here; its generic build does not. */
#ifdef __FMA__
#define ADAMW_FMA(a, b, c) fmaf((a), (b), (c))
#else
#define ADAMW_FMA(a, b, c) ((a) * (b) + (c))
#endif

void KFN(ops_cpu_adamw)(float *p, float *m, float *v, const float *g, float gscale, size_t n,
                        double lr, double beta1, double beta2, double eps, double wd, int64_t t) {
    const double dlr = lr, db1 = beta1, db2 = beta2;
    float decay = (float)(1.0 - dlr * wd);
    float w1 = (float)(1.0 - db1); /* lerp weight */
    float fb2 = (float)db2;
    float w2 = (float)(1.0 - db2);
    double bc1 = 1.0 - pow(db1, (double)t);
    double bc2 = 1.0 - pow(db2, (double)t);
    float neg_step = (float)(-(dlr / bc1));
    float bc2_sqrt = (float)sqrt(bc2);
    float feps = (float)eps;
    /* torch's lerp uses the fma form only for |weight| < 0.5 (else the mirrored formula) */
    int small = fabsf(w1) < 0.5f;
    float lerp_coeff = small ? w1 : w1 - 1.0f;
    ptrdiff_t len = (ptrdiff_t)n;
    /* up to 65536 elements on the calling thread (optim_adamw_step calls it per block from its
     * own parallel loop); "parallel :" so the if does not also turn off the simd */
#pragma omp parallel for simd schedule(static) if (parallel : len > 65536)
    for (ptrdiff_t i = 0; i < len; i++) {
        float gi = g[i] * gscale; /* clip_grad_norm_'s g.mul_(coef) */
        float pi = p[i] * decay;
        float mi = m[i];
        float base = small ? mi : gi;
        mi = ADAMW_FMA(lerp_coeff, gi - mi, base);
        float vi = v[i] * fb2 + w2 * gi * gi;
        float denom = sqrtf(vi) / bc2_sqrt + feps;
        pi = pi + neg_step * mi / denom;
        m[i] = mi;
        v[i] = vi;
        p[i] = pi;
    }
}
