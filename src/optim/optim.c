#include "optim/optim.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

int optim_adamw_init(optim_adamw *o, size_t n, int bf16, base_err *err) {
    memset(o, 0, sizeof *o);
    o->n = n;
    o->bf16 = bf16;
    o->m = base_alloc(n * optim_moment_bytes(o));
    o->v = base_alloc(n * optim_moment_bytes(o));
    if (!o->m || !o->v) {
        optim_adamw_free(o);
        return base_fail(err, "out of memory: AdamW state for %zu parameters", n);
    }
    ops_register_builtin();
    o->kernel = (ops_adamw_fn)ops_find(OPS_ADAMW, "default")->fwd;
    return 0;
}

void optim_adamw_free(optim_adamw *o) {
    base_free(o->m);
    base_free(o->v);
    base_free(o->muon_work);
    o->m = o->v = NULL;
    o->muon_work = NULL;
    o->muon_work_n = 0;
}

/* With a bf16 copy or several spans: blocks of ADAMW_BLOCK elements, each updated by the kernel
 * on the calling thread (under the kernel's parallel threshold; elementwise, so the same bits as
 * one call over all n), span by span, and then converted while its parameters are in cache: the
 * copy costs its writes only, not another read of every parameter. */
#define ADAMW_BLOCK OPS_ADAMW_SERIAL_MAX /* a block's calls run on its thread */

/* The kernel over elements [lo, hi) of the vectors, span by span from span[k] on (the first
 * that ends after lo). */
static void step_range(optim_adamw *o, float *params, const float *grads, float gscale,
                       const optim_span *span, int n_spans, int k, double lr_factor, size_t lo,
                       size_t hi) {
    for (; k < n_spans && span[k].lo < hi; k++) {
        const optim_adamw_cfg *c = span[k].c;
        if (c->muon) continue; /* whole matrices: optim_muon_step_spans */
        const size_t s = span[k].lo > lo ? span[k].lo : lo, e = span[k].hi < hi ? span[k].hi : hi;
        const size_t es = optim_moment_bytes(o);
        o->kernel(params + s, (char *)o->m + s * es, (char *)o->v + s * es, grads + s, gscale,
                  e - s, c->lr * lr_factor, c->beta1, c->beta2, c->eps,
                  c->adam ? 0.0 : c->weight_decay, c->adam ? c->weight_decay : 0.0, o->bf16,
                  o->step);
    }
}

/* The index of the first of n sorted, disjoint ranges that ends after lo (n if none): arr is
 * optim_range[n] or optim_span[n] (stride apart), both beginning {size_t lo, hi}. */
_Static_assert(offsetof(optim_range, hi) == offsetof(optim_span, hi), "range and span layouts");
static int first_ending_after(const void *arr, size_t stride, int n, size_t lo) {
    int a = 0, z = n;
    while (a < z) {
        const int mid = a + (z - a) / 2;
        size_t hi;
        memcpy(&hi, (const char *)arr + (size_t)mid * stride + offsetof(optim_range, hi),
               sizeof hi);
        if (hi <= lo)
            a = mid + 1;
        else
            z = mid;
    }
    return a;
}

void optim_adamw_step(optim_adamw *o, float *params, const float *grads, float gscale,
                      const optim_span *span, int n_spans, double lr_factor,
                      const optim_bf16_copy *c16) {
    o->step++;
    /* Muon's matrices first: the bf16 copy below is then made from their new values */
    optim_muon_step_spans(o, params, grads, gscale, span, n_spans, lr_factor);
    const int copy = c16 && c16->n;
    if (!copy && n_spans == 1) { /* the kernel's own threads over the whole vector */
        step_range(o, params, grads, gscale, span, n_spans, 0, lr_factor, 0, o->n);
        return;
    }
    /* several spans: one parallel loop over blocks (a call a span would make each span a
     * parallel region of its own: 2000 spans of 103M elements were 1.2-1.6x one span's step) */
    const size_t n = o->n, nb = (n + ADAMW_BLOCK - 1) / ADAMW_BLOCK;
#pragma omp parallel for schedule(static)
    for (size_t b = 0; b < nb; b++) {
        const size_t lo = b * ADAMW_BLOCK, hi = n - lo < ADAMW_BLOCK ? n : lo + ADAMW_BLOCK;
        step_range(o, params, grads, gscale, span, n_spans,
                   first_ending_after(span, sizeof *span, n_spans, lo), lr_factor, lo, hi);
        if (!copy) continue;
        /* then the copy's ranges starting before hi, from the first ending after lo */
        for (int k = first_ending_after(c16->r, sizeof *c16->r, c16->n, lo);
             k < c16->n && c16->r[k].lo < hi; k++) {
            const size_t s = c16->r[k].lo > lo ? c16->r[k].lo : lo,
                         e = c16->r[k].hi < hi ? c16->r[k].hi : hi;
            ops_bf16_mirror_convert(c16->copy, s, params + s, e - s);
        }
    }
}

/* Fixed 16K-element blocks summed in block order: the same bits for any thread count. Inside
 * a block, 8 running sums (element i into sum i % 8, combined pairwise at the end): a single
 * double accumulator is a chain of dependent adds, ~4 cycles an element, which made the
 * gradient norm a scalar latency-bound pass (7.7 GB/s on the bench model: 54 ms of a step,
 * more than AdamW's whole read-modify-write); 8 independent sums vectorise. The order is
 * fixed by the index alone, so the result does not depend on the ISA either. */
#define SUMSQ_BLOCK 16384
#define SUMSQ_LANES 8

static double block_sumsq(const float *restrict g, size_t lo, size_t hi) {
    double a[SUMSQ_LANES] = {0};
    size_t i = lo;
    for (; i + SUMSQ_LANES <= hi; i += SUMSQ_LANES)
        for (int k = 0; k < SUMSQ_LANES; k++) a[k] += (double)g[i + k] * g[i + k];
    for (int k = 0; i < hi; i++, k++) a[k] += (double)g[i] * g[i];
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

/* Block b's sum of squares (the last block may be short). */
static double block_of(const float *g, size_t n, size_t b) {
    const size_t lo = b * SUMSQ_BLOCK;
    return block_sumsq(g, lo, n - lo < SUMSQ_BLOCK ? n : lo + SUMSQ_BLOCK);
}

double optim_sumsq(const float *g, size_t n) {
    const size_t nb = (n + SUMSQ_BLOCK - 1) / SUMSQ_BLOCK;
    double *part = base_alloc(nb * sizeof(double));
    double s = 0;
    if (!part) { /* serial fallback, same block order */
        for (size_t b = 0; b < nb; b++) s += block_of(g, n, b);
        return s;
    }
#pragma omp parallel for schedule(static)
    for (size_t b = 0; b < nb; b++) part[b] = block_of(g, n, b);
    for (size_t b = 0; b < nb; b++) s += part[b];
    base_free(part);
    return s;
}

float optim_clip_coef(double sumsq_total, double max_norm, double *norm) {
    *norm = sqrt(sumsq_total);
    /* torch.nn.utils.clip_grad_norm_: coef = max_norm / (norm + 1e-6), clamped to 1. Scaling
     * by 1.0f is exact, so an unclipped step is the step on g itself. */
    const double coef = max_norm / (*norm + 1e-6);
    return coef < 1.0 ? (float)coef : 1.0f;
}

double optim_lr_factor(const optim_lr_cfg *c, int64_t s) {
    const int64_t N = c->total_steps;
    const int64_t W = c->warmup_steps < N ? c->warmup_steps : N;
    int64_t Dk =
        c->decay_ratio >= 0
            ? (int64_t)nearbyint((double)N * c->decay_ratio) /* Python round(): half to even */
            : N - W;
    if (W + Dk > N) Dk = N - W;
    const int64_t S = N + 1 - W - Dk; /* the "virtual last step": LR never reaches 0 at N */
    if (s < W) return (double)(s + 1) / (double)W;
    if (s < W + S || Dk <= 0) return 1.0;
    const double p = (double)(s + 1 - (W + S)) / (double)Dk;
    double g;
    switch (c->decay_type) {
    case OPTIM_DECAY_SQRT:
        g = 1.0 - sqrt(p);
        break;
    case OPTIM_DECAY_COSINE:
        g = 0.5 * (1.0 + cos(M_PI * p));
        break;
    default:
        g = 1.0 - p;
        break;
    }
    return c->min_lr_factor + (1.0 - c->min_lr_factor) * g;
}

int optim_decay_type_parse(const char *s, optim_decay_type *out) {
    if (!strcmp(s, "linear"))
        *out = OPTIM_DECAY_LINEAR;
    else if (!strcmp(s, "sqrt"))
        *out = OPTIM_DECAY_SQRT;
    else if (!strcmp(s, "cosine"))
        *out = OPTIM_DECAY_COSINE;
    else
        return -1;
    return 0;
}
