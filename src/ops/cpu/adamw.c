/* AdamW, the arithmetic of torch.optim.AdamW (foreach=False, fused=False, capturable=False,
 * amsgrad=False, maximize=False) in fp32, element by element; with l2 != 0 torch.optim.Adam's
 * weight decay (its `weight_decay`, coupled: an L2 penalty's gradient) as well:
 *   param.mul_(1 - lr * wd)
 *   grad = grad.add(param, alpha=l2)           (l2 != 0) torch's vectorised add: fma(p, l2, g)
 *   exp_avg.lerp_(grad, 1 - beta1)            torch's vectorised lerp for weight < 0.5:
 *                                             fma(weight, grad - m, m)
 *   exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
 *   bias_correction1 = 1 - beta1 ** step,  bias_correction2 = 1 - beta2 ** step
 *   step_size = lr / bias_correction1
 *   denom = (exp_avg_sq.sqrt() / sqrt(bias_correction2)).add_(eps)
 *   param.addcdiv_(exp_avg, denom, value=-step_size)
 * Python computes the scalars in double; torch casts each to float where it meets an fp32
 * tensor, and so does this kernel. Operation for operation, not bit for bit: torch 2.15 on
 * an AVX2 CPU (measured, session 44) evaluates addcmul_ as fma(w2 * g, g, v * b2), where the
 * compiler contracts this statement its own way (~20% of v an ulp apart a step), and its
 * float sqrt is within an ulp rather than correctly rounded (~18% of values); p agrees in
 * all but ~0.1% (an ulp). Matching those bits would move every recorded fp32 figure for a
 * last-bit gain; the tests compare with torch within stated tolerances. mv_bf16: the moments are
 * stored as bf16 (adamw_math16). Elementwise, so bitwise independent of the thread count. */
#include "ops/cpu/isa.h"

#include <math.h>

/* torch's AVX2/AVX-512 kernels use a fused multiply-add here; its generic build does not. */
#ifdef __FMA__
#define ADAMW_FMA(a, b, c) fmaf((a), (b), (c))
#else
#define ADAMW_FMA(a, b, c) ((a) * (b) + (c))
#endif

/* One element; the constants are torch's, as computed below. */
typedef struct {
    float gscale, decay, l2, lerp_coeff, fb2, w2, bc2_sqrt, feps, neg_step;
    int small, coupled;
} adamw_k;

/* One element's step on fp32 moments *m, *v (the stored ones, or their bf16 values widened). */
static inline void adamw_math(const adamw_k *k, float *p, float *m, float *v, const float *g) {
    float gi = *g * k->gscale; /* clip_grad_norm_'s g.mul_(coef) */
    /* on the parameter before this step's update (torch adds it first); l2 == 0 skips it, as
     * torch does, so AdamW's bits do not see it (p * 0 + g could turn g = -0 into +0) */
    if (k->coupled) gi = ADAMW_FMA(*p, k->l2, gi);
    float pi = *p * k->decay;
    float mi = *m;
    float base = k->small ? mi : gi;
    mi = ADAMW_FMA(k->lerp_coeff, gi - mi, base);
    float vi = *v * k->fb2 + k->w2 * gi * gi;
    float denom = sqrtf(vi) / k->bc2_sqrt + k->feps;
    pi = pi + k->neg_step * mi / denom;
    *m = mi;
    *v = vi;
    *p = pi;
}

/* The same on bf16 moments: read widened, stepped in fp32 (the parameter's update with the
 * fp32 values), stored rounded to nearest even, as torch's fused mixed-precision Adam
 * (fp32 parameters, bf16 states: torchtitan 0.3's fused_opt_states_bf16) keeps them. */
static inline void adamw_math16(const adamw_k *k, float *p, uint16_t *m, uint16_t *v,
                                const float *g) {
    float mi = ops_cpu_bf16_value(*m), vi = ops_cpu_bf16_value(*v);
    adamw_math(k, p, &mi, &vi, g);
    *m = ops_cpu_bf16_bits(mi);
    *v = ops_cpu_bf16_bits(vi);
}

void KFN(ops_cpu_adamw)(float *p, void *m, void *v, const float *g, float gscale, size_t n,
                        double lr, double beta1, double beta2, double eps, double wd, double l2,
                        int mv_bf16, int64_t t) {
    const double dlr = lr, db1 = beta1, db2 = beta2;
    const float w1 = (float)(1.0 - db1); /* lerp weight */
    const double bc1 = 1.0 - pow(db1, (double)t);
    const double bc2 = 1.0 - pow(db2, (double)t);
    /* torch's lerp uses the fma form only for |weight| < 0.5 (else the mirrored formula) */
    const int small = fabsf(w1) < 0.5f;
    const adamw_k k = {.gscale = gscale,
                       .decay = (float)(1.0 - dlr * wd),
                       .l2 = (float)l2, /* alpha: a Python float cast to the tensor's fp32 */
                       .lerp_coeff = small ? w1 : w1 - 1.0f,
                       .fb2 = (float)db2,
                       .w2 = (float)(1.0 - db2),
                       .bc2_sqrt = (float)sqrt(bc2),
                       .feps = (float)eps,
                       .neg_step = (float)(-(dlr / bc1)),
                       .small = small,
                       .coupled = l2 != 0};
    const ptrdiff_t len = (ptrdiff_t)n;
    /* up to OPS_ADAMW_SERIAL_MAX elements on the calling thread with no parallel region at all:
     * optim_adamw_step calls it per block from its own parallel loop, where even an `if`-ed
     * nested region costs libgomp bookkeeping (futex calls) per block */
    float *m32 = m, *v32 = v;
    uint16_t *m16 = m, *v16 = v;
    if (len > OPS_ADAMW_SERIAL_MAX && !mv_bf16) {
#pragma omp parallel for simd schedule(static)
        for (ptrdiff_t i = 0; i < len; i++) adamw_math(&k, p + i, m32 + i, v32 + i, g + i);
    } else if (len > OPS_ADAMW_SERIAL_MAX) {
#pragma omp parallel for simd schedule(static)
        for (ptrdiff_t i = 0; i < len; i++) adamw_math16(&k, p + i, m16 + i, v16 + i, g + i);
    } else if (!mv_bf16) {
#pragma omp simd
        for (ptrdiff_t i = 0; i < len; i++) adamw_math(&k, p + i, m32 + i, v32 + i, g + i);
    } else {
#pragma omp simd
        for (ptrdiff_t i = 0; i < len; i++) adamw_math16(&k, p + i, m16 + i, v16 + i, g + i);
    }
}
