/* Fused lm_head + cross-entropy: logits are computed `chunk` tokens at a time into scratch
 * and turned in place into the logit gradient, so [N, V] logits never exist.
 *
 * Per chunk of rows:
 *   scratch[rows, V] = x_chunk @ w^T                 (ops_cpu_gemm: fp32, or bf16 operands)
 *   per row (parallel over rows): max, sum of exp(l - max) (vm_expf, double sum),
 *     loss = max + log(sum) - l[target]; with dx: row = grad_scale * (softmax - onehot)
 *   dx_chunk += scratch @ w,  dw += scratch^T @ x_chunk                   (sgemm, beta = 1;
 *     dw_acc 0: the first chunk's product with beta = 0, so dw is never zeroed nor read back)
 * In bf16 the logits are bf16 values (autocast's lm_head output) and so is the logit gradient
 * the backward products read; on the onednn engine both are stored as bf16 (half the bytes),
 * the fp32 passes reading each row expanded into a per-thread fp32 row.
 * Each row is handled whole by one thread and the per-row losses are summed in row order,
 * so the result is bitwise independent of the OpenMP thread count (given a deterministic
 * sgemm).
 * With ops_cpu_bf16_amx_layouts()'s OPS_CPU_AMX_LMHEAD_CE (TITAN_AMX_LAYOUTS=1 or lmhead_ce; bf16,
 * onednn engine, whole vocabulary) the chunk's logits are computed transposed, [V, rows] = w x^T,
 * and the softmax runs down the columns (ce_cols): oneDNN's brgemm reads w as it is stored instead
 * of repacking the transposed weight per call, and the weight gradient's product needs no
 * transposed operand. Per 448-row chunk (Intel Xeon, AMX-BF16, 2 threads, build/bench_dnnl_impls,
 * ms): logits 81.0 -> 55.7 (V x 512) and 126.4 -> 96.9 (V x 1024), dw 73.2 -> 65.3 and 123.4 ->
 * 111.9, dx level (bench/RESULTS.md, session 19).
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
/* ce_cols: rows of the transposed logits prefetched ahead of the one being read. Its passes
 * down a chunk stalled on their loads from memory (perf: half of the gradient pass's samples on
 * the instruction after the load); prefetching 8 rows ahead took that pass from 165 to 77 ms a
 * step at the bench model (1, 8 and 32 rows measured alike). */
#define CE_PF_ROWS 8

/* Prefetch transposed row r (n bf16) into the cache, for writing or for reading. */
static inline void ce_prefetch(const uint16_t *r, int n, int write) {
    for (int t = 0; t < n; t += 32) {
        if (write)
            __builtin_prefetch(r + t, 1);
        else
            __builtin_prefetch(r + t, 0);
    }
}

/* ce_cols: vocabulary rows per float partial sum of a column's exps; the group sums are then
 * added per block. One float sum down a whole 1024-row block lost small terms (a term under half
 * an ulp of the running sum is dropped), so the sums came out low and softmax terms of the logit
 * gradient rounded one bf16 ulp high: against exactly rounded values, 2986 of 19.4M wrong in a
 * 128-row chunk at the demo's shape, all high; with groups 393 (360 high), the row path 320 (287
 * high) (session 20, bench/RESULTS.md). 64, as each of the row path's 16 vector lanes sums 64 of
 * a block's terms. */
#define CE_COL_GROUP 64
/* ce_cols' vocabulary blocks: its scratch holds two floats per block per column. */
static inline int ce_col_blocks(int V) {
    return (V + CE_SUM_BLOCK - 1) / CE_SUM_BLOCK;
}

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

/* p[0, n)'s bf16 bits: its registered copy (a weight mirror or a hold), else a conversion into
 * a buffer of this call's own, *own, for the caller to free */
static const uint16_t *ce_bf16_of(const float *p, size_t n, uint16_t **own) {
    const uint16_t *h = ops_cpu_bf16_mirror_of(p, n);
    if (h) return h;
    *own = ops_cpu_alloc("lmhead_ce", sizeof(uint16_t) * n);
    ops_bf16_from_f32(*own, p, n);
    return *own;
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

/* The same for a chunk stored transposed, l16 [V, rows] (bf16 bits; the logit gradient is
 * written back over it): per fixed block of CE_SUM_BLOCK vocabulary rows, each column's block
 * maximum and float sum of exp(l - block max) (one block's logits stay in L2 for both); the
 * blocks combined in order per column (max, then the sums rescaled in double); then the
 * gradient pass, the exps computed again. Fixed blocks, each one thread's: bitwise independent
 * of the thread count. part: scratch [2 * ce_col_blocks(V) * rows] floats, col [3 *
 * rows] doubles; loss[rows] receives each column's loss. */
static void ce_cols(uint16_t *l16, const int32_t *tc, int rows, int V, float grad_scale, int grad,
                    float *part, double *col, double *loss) {
    const int nvb = ce_col_blocks(V);
    float *bm = part, *bs = part + (size_t)nvb * rows; /* [nvb, rows]: block max, block sum */
#pragma omp parallel
    {
        float *restrict gs = ops_cpu_alloc("lmhead_ce", sizeof(float) * (size_t)rows);
#pragma omp for schedule(static)
        for (int vb = 0; vb < nvb; vb++) {
            const int v0 = vb * CE_SUM_BLOCK, v1 = v0 + CE_SUM_BLOCK < V ? v0 + CE_SUM_BLOCK : V;
            float *restrict m = bm + (size_t)vb * rows, *restrict sm = bs + (size_t)vb * rows;
            for (int t = 0; t < rows; t++) m[t] = -INFINITY, sm[t] = 0.0f;
            for (int v = v0; v < v1; v++) {
                const uint16_t *restrict r = l16 + (size_t)v * rows;
                if (v + CE_PF_ROWS < V) ce_prefetch(r + (size_t)CE_PF_ROWS * rows, rows, 0);
#pragma omp simd
                for (int t = 0; t < rows; t++) {
                    const float x = ops_cpu_bf16_value(r[t]);
                    m[t] = x > m[t] ? x : m[t];
                }
            }
            /* each column's sum of its block's exps over groups of CE_COL_GROUP rows, as the
             * row path's vector lanes sum theirs */
            for (int g0 = v0; g0 < v1; g0 += CE_COL_GROUP) {
                const int g1 = g0 + CE_COL_GROUP < v1 ? g0 + CE_COL_GROUP : v1;
                for (int t = 0; t < rows; t++) gs[t] = 0.0f;
                for (int v = g0; v < g1; v++) {
                    const uint16_t *restrict r = l16 + (size_t)v * rows;
#pragma omp simd
                    for (int t = 0; t < rows; t++)
                        gs[t] += vm_expf(ops_cpu_bf16_value(r[t]) - m[t]);
                }
#pragma omp simd
                for (int t = 0; t < rows; t++) sm[t] += gs[t];
            }
        }
        free(gs);
    }
    double *mx = col, *sum = col + rows, *tl = col + 2 * (size_t)rows; /* tl: target logit */
    float *scale = part; /* bm's first row, free once the columns are combined */
    for (int t = 0; t < rows; t++) {
        float M = -INFINITY;
        for (int vb = 0; vb < nvb; vb++)
            M = bm[(size_t)vb * rows + t] > M ? bm[(size_t)vb * rows + t] : M;
        double S = 0.0;
        for (int vb = 0; vb < nvb; vb++)
            S += (double)bs[(size_t)vb * rows + t] * exp((double)bm[(size_t)vb * rows + t] - M);
        mx[t] = M;
        sum[t] = S;
    }
    for (int t = 0; t < rows; t++) {
        const int ok = ce_valid(tc[t], V);
        tl[t] = ok ? (double)ops_cpu_bf16_value(l16[(size_t)tc[t] * rows + t]) : 0.0;
        loss[t] = ok ? mx[t] + log(sum[t]) - tl[t] : 0.0;
        scale[t] = ok ? (float)((double)grad_scale / sum[t]) : 0.0f;
    }
    if (!grad) return;
    float *M32 = part + rows; /* the column maxima as the row path's float */
    for (int t = 0; t < rows; t++) M32[t] = (float)mx[t];
#pragma omp parallel for schedule(static)
    for (int vb = 0; vb < nvb; vb++) {
        const int v0 = vb * CE_SUM_BLOCK, v1 = v0 + CE_SUM_BLOCK < V ? v0 + CE_SUM_BLOCK : V;
        for (int v = v0; v < v1; v++) {
            uint16_t *restrict r = l16 + (size_t)v * rows;
            if (v + CE_PF_ROWS < V) ce_prefetch(r + (size_t)CE_PF_ROWS * rows, rows, 1);
#pragma omp simd
            for (int t = 0; t < rows; t++) {
                const float e =
                    scale[t] != 0.0f ? vm_expf(ops_cpu_bf16_value(r[t]) - M32[t]) : 0.0f;
                r[t] = ops_cpu_bf16_bits(e * scale[t]);
            }
        }
    }
    for (int t = 0; t < rows; t++) /* the one-hot, from the target logit kept in tl */
        if (ce_valid(tc[t], V))
            l16[(size_t)tc[t] * rows + t] =
                ops_cpu_bf16_bits(vm_expf((float)tl[t] - M32[t]) * scale[t] - grad_scale);
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
                              const ops_vocab_shard *vs, int dw_acc, ops_prec prec) {
    const int Vv = vs ? vs->v_total : V; /* valid targets are ids of the whole vocabulary */
    int64_t valid = 0;
    for (int n = 0; n < N; n++) valid += ce_valid(targets[n], Vv);
    if (n_valid) *n_valid = valid;
    int grad = dx != NULL;
    /* dw not written yet in this call although dw_acc 0: its first product sets it (beta 0) */
    int dw_fresh = grad && dw && !dw_acc;
    double total = 0.0;
    const int cr = N < chunk ? N : chunk;
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
    if (N > 0 && V > 0 && D > 0 && l16 && !vs && ops_cpu_bf16_fused_lmhead_ce()) {
        /* the whole call fused on AMX tiles, the logits never in memory (amx_gemm.c) */
        uint16_t *wo = NULL, *xo = NULL;
        const uint16_t *wf = ce_bf16_of(w, (size_t)V * D, &wo),
                       *xf = ce_bf16_of(x, (size_t)N * D, &xo);
        double loss = 0.0;
        const int done = !ops_cpu_amx_lmhead_ce(dx, dx ? dw : NULL, !dw_fresh, xf, wf, targets, N,
                                                D, V, grad_scale, &loss);
        free(wo);
        free(xo);
        if (done) return loss;
    }
    /* chunk 0: no scratch (the caller counted on the fused path, which refused: out of memory) */
    if (N <= 0 || V <= 0 || D <= 0 || chunk <= 0) {
        if (dw_fresh && V > 0 && D > 0) ops_zero(dw, (size_t)V * D);
        return N > 0 && chunk <= 0 ? NAN : 0.0;
    }
    /* the chunk's logits transposed (ce_cols) */
    const int cols = l16 && !vs && (ops_cpu_bf16_amx_layouts() & OPS_CPU_AMX_LMHEAD_CE);
    /* red[3 cr], loss[cr] (vs, or cols: ce_cols' col and loss) */
    double *red = vs || cols ? malloc(sizeof(double) * 4 * (size_t)cr) : NULL;
    if ((vs || cols) && !red) { /* out of memory: reported as a non-finite loss */
        if (dw_fresh) ops_zero(dw, (size_t)V * D); /* dw written all the same (dw_acc 0) */
        return NAN;
    }
    const uint16_t *w16 = NULL, *x16 = NULL;
    uint16_t *w_own = NULL, *x_own = NULL;
    ce_rows c = {scratch, NULL, NULL, V};
    if (l16) {
        w16 = ce_bf16_of(w, (size_t)V * D, &w_own);
        if (!(x16 = ops_cpu_bf16_mirror_of(x, (size_t)N * D)))
            x_own = ops_cpu_alloc("lmhead_ce", sizeof(uint16_t) * (size_t)cr * D);
        c.tmp = cols
                    ? ops_cpu_alloc("lmhead_ce", sizeof(float) * 2 * (size_t)cr * ce_col_blocks(V))
                    : ops_cpu_alloc("lmhead_ce", sizeof(float) * (size_t)V * omp_get_max_threads());
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
        if (cols) {
            ops_cpu_gemm16_bf16out(0, 1, V, rows, D, w16, D, xc16, D, c.l16, rows);
        } else if (l16) {
            ops_cpu_gemm16_bf16out(0, 1, rows, V, D, xc16, D, w16, D, c.l16, V);
        } else {
            ops_cpu_gemm(prec, 0, 1, rows, V, D, 1.0f, xc, D, w, D, 0.0f, scratch, V);
            if (prec == OPS_PREC_BF16) ops_cpu_bf16_round(scratch, scratch, (size_t)rows * V);
        }
        if (vs || cols) {
            double *loss = red + 3 * (size_t)cr;
            if (cols)
                ce_cols(c.l16, tc, rows, V, grad_scale, grad, c.tmp, red, loss);
            else
                ce_rows_sharded(&c, tc, rows, grad_scale, grad, vs, red, loss);
            for (int r = 0; r < rows; r++) total += loss[r];
        }
        for (int r0 = 0; !vs && !cols && r0 < rows; r0 += CE_ROW_BLOCK) {
            int nb = rows - r0 < CE_ROW_BLOCK ? rows - r0 : CE_ROW_BLOCK;
            double loss[CE_ROW_BLOCK];
#pragma omp parallel for schedule(static)
            for (int r = 0; r < nb; r++) {
                loss[r] = ce_row(&c, r0 + r, tc[r0 + r], grad_scale, grad);
            }
            for (int r = 0; r < nb; r++) total += loss[r];
        }
        if (grad && l16) { /* the gradient [rows, V], or [V, rows] (cols) */
            ops_cpu_gemm16(cols, 0, rows, D, V, c.l16, cols ? rows : V, w16, D, 1,
                           dx + (size_t)n0 * D, D);
            if (dw)
                ops_cpu_gemm16(!cols, 0, V, D, rows, c.l16, cols ? rows : V, xc16, D, !dw_fresh, dw,
                               D);
        } else if (grad) {
            /* the logit gradient [rows, V] is both products' operand: in bf16 converted once
             * (the largest conversion of a bf16 step), not once per product */
            const int held =
                prec == OPS_PREC_BF16 && dw && !ops_bf16_hold(scratch, (size_t)rows * V);
            ops_cpu_gemm(prec, 0, 0, rows, D, V, 1.0f, scratch, V, w, D, 1.0f, dx + (size_t)n0 * D,
                         D);
            if (dw) {
                ops_cpu_gemm(prec, 1, 0, V, D, rows, 1.0f, scratch, V, xc, D,
                             dw_fresh ? 0.0f : 1.0f, dw, D);
            }
            if (held) ops_bf16_release(scratch);
        }
        if (grad) dw_fresh = 0;
    }
    if (dw_fresh) ops_zero(dw, (size_t)V * D); /* no chunk had a target */
    free(c.tmp);
    free(w_own);
    free(x_own);
    free(red);
    return total;
}
