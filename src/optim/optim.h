/* optim: AdamW (and Adam) over flat buffers, global-norm gradient clipping, and torchtitan's
 * warmup-stable-decay LR schedule. */
#ifndef TITAN_OPTIM_H
#define TITAN_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "ops/ops.h"

/* adam 0: torch.optim.AdamW (weight_decay decoupled: p *= 1 - lr wd); 1: torch.optim.Adam
 * (weight_decay coupled, an L2 penalty: g += wd p before the moments; wd 0 is AdamW's step).
 * muon 1: torchtitan 0.3's DistMuon, torch.optim.Muon's arithmetic (optim/muon.c) on whole
 * matrices (optim_span's rows, cols, mats): the momentum buffer (in the state's m) lerps toward
 * the gradient by 1 - momentum; the update is the buffer, or with nesterov the gradient lerped
 * toward it by momentum; its Newton-Schulz orthogonalisation in bf16 (ns_steps iterations of
 * the quintic with coefficients ns[3], after dividing by its Frobenius norm floored at eps);
 * p *= 1 - lr wd, p -= lr ratio * it, ratio by adjust (OPTIM_MUON_*). beta1 / beta2 unused. */
enum { OPTIM_MUON_ORIGINAL, OPTIM_MUON_MATCH_RMS_ADAMW, OPTIM_MUON_SPECTRAL_UNCLAMPED };
typedef struct {
    double lr, beta1, beta2, eps, weight_decay;
    int adam;
    int muon, nesterov, ns_steps, adjust;
    double momentum, ns[3];
} optim_adamw_cfg;

typedef struct {
    size_t n;
    /* [n] first and second moments, mirroring the (sharded) parameters: float, or with bf16
     * (torchtitan 0.3's optimizer.implementation = "fused_opt_states_bf16") uint16_t bf16 bits,
     * stepped in fp32 and stored rounded to nearest even */
    void *m, *v;
    int bf16;
    int64_t step; /* optimizer steps taken */
    ops_adamw_fn kernel;
    float *muon_work; /* optim_muon_reserve's */
    size_t muon_work_n;
} optim_adamw;

/* bf16: the moments in bf16 (2 bytes an element instead of 4). */
int optim_adamw_init(optim_adamw *o, size_t n, int bf16, base_err *err);
/* Bytes of one moment element (4, or 2 in bf16). */
static inline size_t optim_moment_bytes(const optim_adamw *o) {
    return o->bf16 ? 2 : 4;
}
void optim_adamw_free(optim_adamw *o);

/* bf16 mixed precision: the bf16 copy of the parameters that the step refreshes as it writes
 * them (the GEMMs' copy, made from the new weights while they are in cache instead of in a
 * pass of its own over all of them the next step): params[i] rounded to bf16 lands at element
 * i of copy (ops_bf16_mirror_convert's format) for every i in the ranges r[0, n) (sorted,
 * disjoint, [lo, hi)). */
typedef struct {
    size_t lo, hi;
} optim_range;
typedef struct {
    void *copy;
    const optim_range *r;
    int n;
} optim_bf16_copy;

/* Where the hyperparameters apply: elements [lo, hi) of the flat vector step with *c (a
 * parameter group's, torchtitan's ParamGroupConfig; its lr the group's peak). */
typedef struct {
    size_t lo, hi;
    const optim_adamw_cfg *c;
    /* c->muon: the span's parameter, whole, is mats matrices [rows, cols] one after another
     * from element at (lo <= at; [lo, hi) may hold padding around it, which Muon leaves) */
    size_t at;
    int rows, cols, mats;
} optim_span;

/* One AdamW step (Adam's, Muon's where a span's c says) on params[n] with the gradients
 * grads[n] * gscale (optim_clip_coef's
 * coefficient, 1 for none: the scaling is folded into the step's one pass; grads are not
 * modified); span[0, n_spans) covers [0, n) in order, each at learning rate c->lr x
 * lr_factor (the schedule's factor, as torch's LambdaLR scales every group's initial lr).
 * Elementwise: the same bits as one call per span. c16: NULL, or the bf16 copy to refresh
 * (the parameters' bits do not depend on it). */
void optim_adamw_step(optim_adamw *o, float *params, const float *grads, float gscale,
                      const optim_span *span, int n_spans, double lr_factor,
                      const optim_bf16_copy *c16);

/* Muon's scratch (optim_adamw.muon_work) for the largest matrix of span[0, n_spans)'s Muon
 * spans; call before a step with Muon spans (the step cannot report an allocation failure).
 * Refuses Muon spans over bf16 moments (o->bf16: the momentum buffer is an fp32 m). */
int optim_muon_reserve(optim_adamw *o, const optim_span *span, int n_spans, base_err *err);
/* The Muon spans' step (optim_adamw_step calls it first; each matrix's elementwise parts and
 * products on the pool's threads). */
void optim_muon_step_spans(optim_adamw *o, float *params, const float *grads, float gscale,
                           const optim_span *span, int n_spans, double lr_factor);
/* The learning rate's ratio Muon applies for a [rows, cols] matrix (torch's _adjust_lr). */
double optim_muon_lr_ratio(int adjust, int rows, int cols);

/* Sum of squares of g[n] in double, in a fixed order independent of the thread count. */
double optim_sumsq(const float *g, size_t n);
/* Global-norm clipping (torch.nn.utils.clip_grad_norm_): the coefficient the gradients are to
 * be scaled by, (float)min(1, max_norm / (norm + 1e-6)) with norm = sqrt(sumsq_total), the
 * global L2 norm (summed over all shards by the caller); *norm receives it (pre-clip). The
 * scaling itself happens in optim_adamw_step. */
float optim_clip_coef(double sumsq_total, double max_norm, double *norm);

typedef enum { OPTIM_DECAY_LINEAR, OPTIM_DECAY_SQRT, OPTIM_DECAY_COSINE } optim_decay_type;

typedef struct {
    int64_t warmup_steps;
    int64_t total_steps; /* N: lr_scheduler.total_steps or training.steps */
    double decay_ratio;  /* < 0 means None (decay over all steps after warmup) */
    optim_decay_type decay_type;
    double min_lr_factor;
} optim_lr_cfg;

/* torchtitan linear_warmup_stable_decay factor f(s) for scheduler step s = 0, 1, ...
 * Optimizer step k (1-based) uses f(k-1). */
double optim_lr_factor(const optim_lr_cfg *c, int64_t s);
int optim_decay_type_parse(const char *s, optim_decay_type *out);

#endif
