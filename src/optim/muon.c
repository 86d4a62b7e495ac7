/* Muon on whole matrices: torchtitan 0.3's DistMuon (torchtitan/distributed/flex_shard/
 * dist_muon.py), whose arithmetic is torch.optim.Muon's (torch/optim/_muon.py), per matrix:
 *   buf.lerp_(grad, 1 - momentum)
 *   update = grad.lerp(buf, momentum) if nesterov else buf
 *   X = update.to(bfloat16); transposed when rows > cols
 *   X.div_(X.norm().clamp_min(eps))
 *   ns_steps times: A = X @ X.T; B = addmm(A, A, A, beta=b, alpha=c); X = addmm(X, B, X, beta=a)
 *   param.mul_(1 - lr * weight_decay); param.add_(X (transposed back), alpha=-lr * ratio)
 * with X, A and B bf16 tensors: each product's fp32 result rounded to bf16 once (torch's CPU
 * bf16 GEMMs accumulate in fp32), here fp32 SGEMMs on bf16 values (their products exact in
 * fp32) rounded after each. Not bit for bit torch's: the summation order inside a product
 * differs, so an element whose fp32 sum lies by a rounding boundary of bf16 may take the other
 * neighbour (the e2e test states the tolerance). The lerps are torch's vectorised formula
 * (fma(weight, end - start, start) for weight < 0.5, else fma(weight - 1, end - start, end)). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "optim/optim.h"

/* torch's lerp(start, end, weight) for a float weight, vectorised form */
static inline float lerp(float start, float end, float w) {
    return fabsf(w) < 0.5f ? fmaf(w, end - start, start) : fmaf(w - 1.0f, end - start, end);
}

double optim_muon_lr_ratio(int adjust, int rows, int cols) {
    const double A = rows, B = cols;
    switch (adjust) {
    case OPTIM_MUON_MATCH_RMS_ADAMW:
        return 0.2 * sqrt(A > B ? A : B);
    case OPTIM_MUON_SPECTRAL_UNCLAMPED:
        return sqrt(A / B);
    default:
        return sqrt(A / B > 1 ? A / B : 1);
    }
}

/* Scratch floats for one [rows, cols] matrix: X and the update (rows cols each), A and B
 * (m^2 each, m = min(rows, cols)), the next X (rows cols). */
static size_t work_floats(int rows, int cols) {
    const size_t r = (size_t)rows, c = (size_t)cols, m = r < c ? r : c;
    return 3 * r * c + 2 * m * m;
}

int optim_muon_reserve(optim_adamw *o, const optim_span *span, int n_spans, base_err *err) {
    size_t need = 0;
    for (int k = 0; k < n_spans; k++) {
        if (!span[k].c->muon) continue;
        /* the momentum buffer is the fp32 m (train refuses bf16 states beside DistMuon) */
        if (o->bf16) return base_fail(err, "Muon with the moments in bf16: not implemented");
        if (work_floats(span[k].rows, span[k].cols) > need)
            need = work_floats(span[k].rows, span[k].cols);
    }
    if (need <= o->muon_work_n) return 0;
    base_free(o->muon_work);
    o->muon_work_n = 0;
    o->muon_work = base_alloc(need * sizeof(float));
    if (!o->muon_work) return base_fail(err, "out of memory: Muon's scratch, %zu floats", need);
    o->muon_work_n = need;
    return 0;
}

/* One matrix p[rows, cols] with its gradient g (scaled by gscale) and momentum buffer buf. */
static void muon_matrix(const optim_adamw_cfg *c, float *p, const float *g, float gscale,
                        float *buf, int rows, int cols, double lr, float *work) {
    const size_t n = (size_t)rows * cols;
    const int tr = rows > cols, m = tr ? cols : rows, k = tr ? rows : cols; /* X is [m, k] */
    float *u = work, *x = u + n, *a = x + n, *b = a + (size_t)m * m, *y = b + (size_t)m * m;
    const float w1 = (float)(1.0 - c->momentum), wm = (float)c->momentum;
    const int nest = c->nesterov;
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        const float gi = g[i] * gscale; /* clip_grad_norm_'s g.mul_(coef) */
        const float bi = lerp(buf[i], gi, w1);
        buf[i] = bi;
        u[i] = nest ? lerp(gi, bi, wm) : bi;
    }
    /* X = bf16(update), [m, k] (every bf16 value here: ops_bf16_round_store, torch's rounding) */
    if (tr) {
#pragma omp parallel for schedule(static)
        for (int i = 0; i < m; i++)
            for (int j = 0; j < k; j++) x[(size_t)i * k + j] = u[(size_t)j * m + i];
    } else {
        memcpy(x, u, n * sizeof(float));
    }
    ops_bf16_round_store(x, NULL, n);
    /* the norm: a bf16 tensor's, accumulated wider (optim_sumsq: double, fixed blocks, the
     * same bits for any thread count), the result a bf16 scalar clamped to bf16(eps) */
    float ne[2] = {(float)sqrt(optim_sumsq(x, n)), (float)c->eps};
    ops_bf16_round_store(ne, NULL, 2);
    const float nrm = ne[0] >= ne[1] || ne[0] != ne[0] ? ne[0] : ne[1];
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) x[i] /= nrm;
    ops_bf16_round_store(x, NULL, n);
    const float ca = (float)c->ns[0], cb = (float)c->ns[1], cc = (float)c->ns[2];
    for (int it = 0; it < c->ns_steps; it++) {
        /* A = X X^T; B = b A + c A A; X = a X + B X: each rounded to bf16 */
        ops_sgemm(0, 1, m, m, k, 1.0f, x, k, x, k, 0.0f, a, m);
        ops_bf16_round_store(a, NULL, (size_t)m * m);
        memcpy(b, a, (size_t)m * m * sizeof(float));
        ops_sgemm(0, 0, m, m, m, cc, a, m, a, m, cb, b, m);
        ops_bf16_round_store(b, NULL, (size_t)m * m);
        memcpy(y, x, n * sizeof(float));
        ops_sgemm(0, 0, m, k, m, 1.0f, b, m, x, k, ca, y, k);
        ops_bf16_round_store(y, NULL, n);
        float *t = x;
        x = y;
        y = t;
    }
    const float decay = (float)(1.0 - lr * c->weight_decay),
                alpha = (float)(-lr * optim_muon_lr_ratio(c->adjust, rows, cols));
    /* param.mul_(decay); param.add_(X, alpha=-adjusted_lr): ATen's vectorised add is
     * fmadd(other, alpha, self) */
    if (tr) {
#pragma omp parallel for schedule(static)
        for (int i = 0; i < rows; i++)
            for (int j = 0; j < cols; j++) {
                float *q = &p[(size_t)i * cols + j];
                *q = fmaf(x[(size_t)j * k + i], alpha, *q * decay);
            }
    } else {
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++) p[i] = fmaf(x[i], alpha, p[i] * decay);
    }
}

void optim_muon_step_spans(optim_adamw *o, float *params, const float *grads, float gscale,
                           const optim_span *span, int n_spans, double lr_factor) {
    for (int s = 0; s < n_spans; s++) {
        const optim_adamw_cfg *c = span[s].c;
        if (!c->muon) continue;
        if (!o->muon_work) { /* optim_muon_reserve not called: a caller's bug */
            base_log(BASE_LOG_ERROR, "optim: a Muon step without optim_muon_reserve");
            abort();
        }
        const size_t per = (size_t)span[s].rows * span[s].cols;
        for (int e = 0; e < span[s].mats; e++) {
            const size_t at = span[s].at + (size_t)e * per;
            muon_matrix(c, params + at, grads + at, gscale, (float *)o->m + at, span[s].rows,
                        span[s].cols, c->lr * lr_factor, o->muon_work);
        }
    }
}
