/* Attention of T new queries over a KV cache (inference only; see ops.h).
 *
 * Layouts (fp32): q, out [T,H,hd]; k, v [S,G,hd] with S >= pos0 + T (the cache of one
 * sequence, positions 0..pos0+T-1 valid). One task per (query t, head h): the scaled scores
 * of its pos0 + t + 1 visible keys go into a per-thread row, then exp(s - max) in place, their
 * sum, and the weighted sum of V rows, divided by the sum at the end. There is no tiling: a
 * decode step (T = 1) reads each cached K and V row once per query head, which is the whole
 * cost; a prompt's chunks after its first 2048 rows (model/generate.c) are the only longer calls.
 * Results do not depend on the thread count (each output row is computed by one thread in a fixed
 * order). Requires H % G == 0.
 *
 * prec OPS_PREC_BF16 (attention_kv/bf16, whose caller has rounded q, k and v): the normalised
 * probabilities are rounded to bf16 before P.V, as training's bf16 attention (attention_gemm.c)
 * and autocast's eager attention round them, so a decode step computes what the training
 * forward and a prefill compute on the same rows, up to fp32 summation order. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cpu/isa.h"
#include "ops/cpu/vmath.h"

void KFN(ops_cpu_attention_kv_prec)(float *out, const float *q, const float *k, const float *v,
                                    int T, int pos0, int H, int G, int hd, ops_prec prec) {
    if (T <= 0 || H <= 0) return;
    const int rep = H / G, n_max = pos0 + T;
    const float scale = 1.0f / sqrtf((float)hd);
    const long tasks = (long)T * H;
#pragma omp parallel
    {
        /* scores of one query row; the op signature returns void, so running out of memory
         * here cannot be reported and is fatal (as in attention.c) */
        float *sc = malloc(sizeof(float) * (size_t)n_max);
        if (!sc) {
            base_log(BASE_LOG_ERROR, "attention_kv: out of memory (%d keys)", n_max);
            abort();
        }
#pragma omp for schedule(static)
        for (long task = 0; task < tasks; task++) {
            const int t = (int)(task / H), h = (int)(task % H), g = h / rep, n = pos0 + t + 1;
            const float *qr = q + (size_t)task * hd;
            float mx = -INFINITY;
            for (int j = 0; j < n; j++) {
                const float *kr = k + ((size_t)j * G + g) * hd;
                float s = 0;
#pragma omp simd reduction(+ : s)
                for (int d = 0; d < hd; d++) s += qr[d] * kr[d];
                s *= scale;
                sc[j] = s;
                mx = s > mx ? s : mx;
            }
            float sum = 0;
#pragma omp simd reduction(+ : sum)
            for (int j = 0; j < n; j++) {
                const float p = vm_expf(sc[j] - mx);
                sc[j] = p;
                sum += p;
            }
            const float inv = 1.0f / sum;
            if (prec == OPS_PREC_BF16) /* P normalised, then rounded; no division after P.V */
                for (int j = 0; j < n; j++)
                    sc[j] = ops_cpu_bf16_value(ops_cpu_bf16_bits(sc[j] * inv));
            float *o = out + (size_t)task * hd;
            memset(o, 0, sizeof(float) * (size_t)hd);
            for (int j = 0; j < n; j++) {
                const float p = sc[j], *vr = v + ((size_t)j * G + g) * hd;
#pragma omp simd
                for (int d = 0; d < hd; d++) o[d] += p * vr[d];
            }
            if (prec != OPS_PREC_BF16)
                for (int d = 0; d < hd; d++) o[d] *= inv;
        }
        free(sc);
    }
}
