/* Fused lm_head + cross-entropy: logits are computed `chunk` tokens at a time into scratch
 * and turned in place into the logit gradient, so [N, V] logits never exist.
 *
 * Per chunk of rows:
 *   scratch[rows, V] = x_chunk @ w^T                 (ops_cpu_gemm: fp32, or bf16 operands)
 *   per row (parallel over rows): max, sum of exp(l - max) (vm_expf, double sum),
 *     loss = max + log(sum) - l[target]; with dx: row = grad_scale * (softmax - onehot)
 *   dx_chunk += scratch @ w,  dw += scratch^T @ x_chunk                   (sgemm, beta = 1)
 * In bf16 the logits are bf16 values (autocast's lm_head output) and so is the logit gradient
 * the backward products read; on the onednn engine both are stored as bf16 (half the bytes),
 * the fp32 passes reading each row expanded into a per-thread fp32 row.
 * Each row is handled whole by one thread and the per-row losses are summed in row order,
 * so the result is bitwise independent of the OpenMP thread count (given a deterministic
 * sgemm).
 *
 * Targets: OPS_IGNORE_INDEX (-100) is skipped. A target outside [0, V) (data corruption,
 * which this void-error signature cannot report) is treated like -100: it adds no loss and
 * no gradient and is not counted in *n_valid, so callers computing grad_scale must count
 * valid targets the same way (0 <= target < V). */
#include "ops/cpu/isa.h"
#include "ops/cpu/vmath.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* Rows per parallel block: the per-row losses of a block are summed in order. */
#define CE_ROW_BLOCK 64
/* Elements per float partial sum of exp (then summed in double). */
#define CE_SUM_BLOCK 1024

static inline int ce_valid(int32_t t, int V) {
    return t >= 0 && t < V;
}

/* The three passes over one row of logits, shared by the whole-vocabulary and the
 * loss-parallel paths (the latter all-reduces between them). */
static float row_max(const float *restrict row, int V) {
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int i = 0; i < V; i++) mx = row[i] > mx ? row[i] : mx;
    return mx;
}

/* Sum of exp(row - mx); with grad the row is overwritten with those exponentials. */
static double row_sumexp(float *restrict row, int V, float mx, int grad) {
    /* exp sums in float over blocks of CE_SUM_BLOCK (vector lanes), blocks summed in double */
    double sum = 0.0;
    for (int b0 = 0; b0 < V; b0 += CE_SUM_BLOCK) {
        int b1 = V - b0 < CE_SUM_BLOCK ? V : b0 + CE_SUM_BLOCK;
        float bsum = 0.0f;
        if (grad) {
#pragma omp simd reduction(+ : bsum)
            for (int i = b0; i < b1; i++) {
                float e = vm_expf(row[i] - mx);
                row[i] = e;
                bsum += e;
            }
        } else {
#pragma omp simd reduction(+ : bsum)
            for (int i = b0; i < b1; i++) bsum += vm_expf(row[i] - mx);
        }
        sum += (double)bsum;
    }
    return sum;
}

/* exp row -> grad_scale * (softmax - onehot); target -1: the one-hot is on another shard.
 * In place, or with dst16 written there as bf16 bits (the backward products' operand). */
static void row_grad(float *restrict row, int V, int target, double sum, float grad_scale,
                     uint16_t *restrict dst16) {
    const float scale = (float)((double)grad_scale / sum);
    if (dst16) {
#pragma omp simd
        for (int i = 0; i < V; i++) dst16[i] = ops_cpu_bf16_bits(row[i] * scale);
        if (target >= 0) dst16[target] = ops_cpu_bf16_bits(row[target] * scale - grad_scale);
        return;
    }
#pragma omp simd
    for (int i = 0; i < V; i++) row[i] *= scale;
    if (target >= 0) row[target] -= grad_scale;
}

/* A chunk's logits [rows, V]: fp32 in scratch, or (l16) bf16 in scratch's first half, each
 * row expanded (exactly) into this thread's fp32 row of tmp before the fp32 passes read it. */
typedef struct {
    float *f32;
    uint16_t *l16;
    float *tmp; /* [threads, V] */
    int V;
} ce_rows;

static float *ce_row_at(const ce_rows *c, int r) {
    if (!c->l16) return c->f32 + (size_t)r * c->V;
    float *t = c->tmp + (size_t)omp_get_thread_num() * c->V;
    const uint16_t *h = c->l16 + (size_t)r * c->V;
#pragma omp simd
    for (int i = 0; i < c->V; i++) t[i] = ops_cpu_bf16_value(h[i]);
    return t;
}

static uint16_t *ce_row16(const ce_rows *c, int r) {
    return c->l16 ? c->l16 + (size_t)r * c->V : NULL;
}

/* An ignored target's gradient row: zeros, in the storage the backward products read. */
static void ce_row_zero(const ce_rows *c, int r) {
    if (c->l16)
        memset(c->l16 + (size_t)r * c->V, 0, (size_t)c->V * sizeof(uint16_t));
    else
        memset(c->f32 + (size_t)r * c->V, 0, (size_t)c->V * sizeof(float));
}

/* Row r of logits: returns its loss (0 for an ignored target). When grad != 0 the row is
 * overwritten with grad_scale * (softmax - onehot) (row_grad, in its storage), or zeros for an
 * ignored target. */
static double ce_row(const ce_rows *c, int r, int32_t target, float grad_scale, int grad) {
    const int V = c->V;
    if (!ce_valid(target, V)) {
        if (grad) ce_row_zero(c, r);
        return 0.0;
    }
    float *row = ce_row_at(c, r);
    float mx = row_max(row, V);
    float target_logit = row[target];
    double sum = row_sumexp(row, V, mx, grad);
    double lse = (double)mx + log(sum);
    if (grad) row_grad(row, V, target, sum, grad_scale, ce_row16(c, r));
    return lse - (double)target_logit;
}

/* Loss-parallel rows of a chunk (see ops.h): red[3 * rows] is scratch (the row maxima, then exp
 * sums and target logits); loss[rows] receives each row's loss. With bf16 logits the exps are
 * computed again for the gradient (there is no fp32 row to keep them in): the same values, by
 * the same loop. */
static void ce_rows_sharded(const ce_rows *c, const int32_t *tc, int rows, float grad_scale,
                            int grad, const ops_vocab_shard *vs, double *red, double *loss) {
    const int V = c->V;
    double *mx = red, *st = red + rows; /* st[2r]: exp sum, st[2r + 1]: target logit */
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++)
        mx[r] = ce_valid(tc[r], vs->v_total) ? row_max(ce_row_at(c, r), V) : 0.0;
    vs->allreduce(vs->ctx, mx, rows, 1);
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        const int t = tc[r] - vs->v0, mine = t >= 0 && t < V;
        st[2 * r] = st[2 * r + 1] = 0.0;
        if (!ce_valid(tc[r], vs->v_total)) continue;
        float *row = ce_row_at(c, r);
        st[2 * r + 1] = mine ? (double)row[t] : 0.0;
        st[2 * r] = row_sumexp(row, V, (float)mx[r], grad); /* (bf16: the exps land in tmp) */
    }
    vs->allreduce(vs->ctx, st, 2 * rows, 0);
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        const int t = tc[r] - vs->v0;
        uint16_t *d16 = ce_row16(c, r);
        loss[r] = 0.0;
        if (!ce_valid(tc[r], vs->v_total)) {
            if (grad) ce_row_zero(c, r);
            continue;
        }
        loss[r] = (double)(float)mx[r] + log(st[2 * r]) - st[2 * r + 1];
        if (!grad) continue;
        float *row = ce_row_at(c, r);
        if (d16) row_sumexp(row, V, (float)mx[r], 1);
        row_grad(row, V, t >= 0 && t < V ? t : -1, st[2 * r], grad_scale, d16);
    }
}

double KFN(ops_cpu_lmhead_ce)(float *dx, float *dw, const float *x, const float *w,
                              const int32_t *targets, int N, int D, int V, float grad_scale,
                              float *scratch, int chunk, int64_t *n_valid,
                              const ops_vocab_shard *vs, ops_prec prec) {
    const int Vv = vs ? vs->v_total : V; /* valid targets are ids of the whole vocabulary */
    int64_t valid = 0;
    for (int n = 0; n < N; n++) valid += ce_valid(targets[n], Vv);
    if (n_valid) *n_valid = valid;
    if (N <= 0 || V <= 0 || D <= 0 || chunk <= 0) return N > 0 && chunk <= 0 ? NAN : 0.0;
    int grad = dx != NULL;
    double total = 0.0;
    const int cr = N < chunk ? N : chunk;
    double *red = vs ? malloc(sizeof(double) * 4 * (size_t)cr) : NULL; /* red[3 cr], loss[cr] */
    if (vs && !red) return NAN; /* out of memory: reported as a non-finite loss */
    /* bf16 on the onednn engine (l16): the logits GEMM writes bf16 logits (autocast's bf16
     * matmul output) into scratch's first half (ops_lmhead_ce_scratch_floats sized it so), the
     * fp32 passes read each row expanded, the logit gradient is written back as bf16 over it,
     * and both backward products read it there: half the logits' bytes, and no conversion of
     * the gradient. w and x are read from their mirrors, or converted here into buffers of
     * this call's own (no registration that could fail; an allocation failure is fatal, as
     * for every kernel's scratch: a NaN on one rank would leave the others of a loss-parallel
     * group waiting in its all-reduces). Otherwise (fp32, or bf16 on the emulated engine) fp32
     * logits, rounded to bf16 values under bf16 so both engines compute the same function. */
    const int l16 = prec == OPS_PREC_BF16 && ops_bf16_mirror_bytes(1) == sizeof(uint16_t);
    const uint16_t *w16 = NULL, *x16 = NULL;
    uint16_t *w_own = NULL, *x_own = NULL;
    ce_rows c = {scratch, NULL, NULL, V};
    if (l16) {
        if (!(w16 = ops_cpu_bf16_mirror_of(w, (size_t)V * D))) {
            w_own = ops_cpu_alloc("lmhead_ce", sizeof(uint16_t) * (size_t)V * D);
            ops_bf16_from_f32(w_own, w, (size_t)V * D);
            w16 = w_own;
        }
        if (!(x16 = ops_cpu_bf16_mirror_of(x, (size_t)N * D)))
            x_own = ops_cpu_alloc("lmhead_ce", sizeof(uint16_t) * (size_t)cr * D);
        c.tmp = ops_cpu_alloc("lmhead_ce", sizeof(float) * (size_t)V * omp_get_max_threads());
        c.l16 = (uint16_t *)scratch;
    }
    for (int n0 = 0; n0 < N; n0 += chunk) {
        int rows = N - n0 < chunk ? N - n0 : chunk;
        const float *xc = x + (size_t)n0 * D;
        const int32_t *tc = targets + n0;
        int any = 0;
        for (int r = 0; r < rows; r++) any |= ce_valid(tc[r], Vv);
        if (!any) continue; /* nothing to add: no loss, zero gradient (the same on every rank) */
        const uint16_t *xc16 = x16 ? x16 + (size_t)n0 * D : x_own;
        if (x_own) ops_bf16_from_f32(x_own, xc, (size_t)rows * D);
        if (l16) {
            ops_cpu_gemm16_bf16out(0, 1, rows, V, D, xc16, D, w16, D, c.l16, V);
        } else {
            ops_cpu_gemm(prec, 0, 1, rows, V, D, 1.0f, xc, D, w, D, 0.0f, scratch, V);
            if (prec == OPS_PREC_BF16) ops_cpu_bf16_round(scratch, scratch, (size_t)rows * V);
        }
        if (vs) {
            double *loss = red + 3 * (size_t)cr;
            ce_rows_sharded(&c, tc, rows, grad_scale, grad, vs, red, loss);
            for (int r = 0; r < rows; r++) total += loss[r];
        }
        for (int r0 = 0; !vs && r0 < rows; r0 += CE_ROW_BLOCK) {
            int nb = rows - r0 < CE_ROW_BLOCK ? rows - r0 : CE_ROW_BLOCK;
            double loss[CE_ROW_BLOCK];
#pragma omp parallel for schedule(static)
            for (int r = 0; r < nb; r++) {
                loss[r] = ce_row(&c, r0 + r, tc[r0 + r], grad_scale, grad);
            }
            for (int r = 0; r < nb; r++) total += loss[r];
        }
        if (grad && l16) {
            ops_cpu_gemm16(0, 0, rows, D, V, c.l16, V, w16, D, 1, dx + (size_t)n0 * D, D);
            if (dw) ops_cpu_gemm16(1, 0, V, D, rows, c.l16, V, xc16, D, 1, dw, D);
        } else if (grad) {
            /* the logit gradient [rows, V] is both products' operand: in bf16 converted once
             * (the largest conversion of a bf16 step), not once per product */
            const int held =
                prec == OPS_PREC_BF16 && dw && !ops_bf16_hold(scratch, (size_t)rows * V);
            ops_cpu_gemm(prec, 0, 0, rows, D, V, 1.0f, scratch, V, w, D, 1.0f, dx + (size_t)n0 * D,
                         D);
            if (dw) {
                ops_cpu_gemm(prec, 1, 0, V, D, rows, 1.0f, scratch, V, xc, D, 1.0f, dw, D);
            }
            if (held) ops_bf16_release(scratch);
        }
    }
    free(c.tmp);
    free(w_own);
    free(x_own);
    free(red);
    return total;
}
