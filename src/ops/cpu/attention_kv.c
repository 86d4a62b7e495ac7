/* Attention of T new queries over a KV cache (inference only; see ops.h).
 *
 * Layouts (fp32): q, out [T,H,hd]; k, v [S,G,hd] with S >= pos0 + T (the cache of one
 * sequence, positions 0..pos0+T-1 valid). One task per (query t, kv head g), for the H / G
 * query heads that share g: each head's scaled scores of its pos0 + t + 1 visible keys go into a
 * per-thread row, then exp(s - max) in place, their sum, and the weighted sum of V rows, divided
 * by the sum at the end. There is no tiling: a decode step (T = 1) reads each cached K and V row
 * once per kv head (once per query head until session 47: 7.7 -> 8.8 tokens/s with the rows
 * prefetched, 10.0 with them shared, a 2059-token prompt at Qwen3-0.6B in bf16 on the AMX
 * Xeon), which is the whole cost; a prompt's chunks after its first 2048 rows (model/generate.c)
 * are the only longer calls.
 * Results do not depend on the thread count (each output row is computed by one thread in a fixed
 * order). Requires H % G == 0.
 *
 * prec OPS_PREC_BF16 (attention_kv/bf16, whose caller has rounded q): k's and v's values are
 * rounded to bf16 as they are read (the cache holds them in fp32; rounding a copy of the whole
 * cache per call was most of a long-context decode step: session 47), and the normalised
 * probabilities are rounded to bf16 before P.V, as training's bf16 attention (attention_gemm.c)
 * and autocast's eager attention round them, so a decode step computes what the training
 * forward and a prefill compute on the same rows, up to fp32 summation order. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cpu/isa.h"
#include "ops/cpu/vmath.h"

/* Rows ahead of the one being read whose lines are prefetched: the cache's rows of one kv head
 * lie G * hd floats apart (4 KiB at 0.6B), a page each, where the hardware prefetcher stops. */
enum { KV_PF = 8 };

static inline void kv_prefetch(const float *row, int hd) {
    for (int d = 0; d < hd; d += 16) __builtin_prefetch(row + d, 0, 1);
}

/* a k or v value as the product reads it: rounded to bf16 when r16, as ops_cpu_bf16_bits rounds
 * (a NaN stays a quiet NaN), written as a select so that the loops stay vectorised (with
 * ops_cpu_bf16_bits' early return they ran scalar: 5.55 against 7.82 tokens/s) */
static inline float kv_value(float x, int r16) {
    if (!r16) return x;
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u,
                   quiet = (u | 0x00400000u) & 0xffff0000u;
    u = (u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded;
    memcpy(&x, &u, sizeof u);
    return x;
}

/* One task: rep query heads of kv head g (their rows qr, o [rep][hd]) over keys and values
 * 0 .. n-1, each cache row read once for all of them (a grouped-query model's heads share it).
 * sc: rep x ld floats of scratch (ld > n). r16 (a constant where it is inlined): bf16 values
 * and probabilities. Each head's values are computed by the same operations in the same order as
 * for a head alone. */
static inline __attribute__((always_inline)) void attend(float *o, const float *qr, const float *k,
                                                         const float *v, int n, int g, int G,
                                                         int hd, int rep, float scale, float *sc,
                                                         size_t ld, int r16) {
    for (int j = 0; j < n; j++) {
        const float *kr = k + ((size_t)j * G + g) * hd;
        if (j + KV_PF < n) kv_prefetch(kr + (size_t)KV_PF * G * hd, hd);
        for (int r = 0; r < rep; r++) {
            const float *qh = qr + (size_t)r * hd;
            float s = 0;
#pragma omp simd reduction(+ : s)
            for (int d = 0; d < hd; d++) s += qh[d] * kv_value(kr[d], r16);
            sc[r * ld + j] = s * scale;
        }
    }
    for (int r = 0; r < rep; r++) {
        float *sr = sc + r * ld, mx = -INFINITY, sum = 0;
        for (int j = 0; j < n; j++) mx = sr[j] > mx ? sr[j] : mx;
#pragma omp simd reduction(+ : sum)
        for (int j = 0; j < n; j++) {
            const float p = vm_expf(sr[j] - mx);
            sr[j] = p;
            sum += p;
        }
        const float inv = 1.0f / sum;
        if (r16) /* P normalised, then rounded; no division after P.V */
            for (int j = 0; j < n; j++) sr[j] = ops_cpu_bf16_value(ops_cpu_bf16_bits(sr[j] * inv));
        else
            sr[n] = inv; /* (ld > n) for after P.V */
    }
    memset(o, 0, sizeof(float) * (size_t)rep * hd);
    for (int j = 0; j < n; j++) {
        const float *vr = v + ((size_t)j * G + g) * hd;
        if (j + KV_PF < n) kv_prefetch(vr + (size_t)KV_PF * G * hd, hd);
        for (int r = 0; r < rep; r++) {
            const float p = sc[r * ld + j];
            float *oh = o + (size_t)r * hd;
#pragma omp simd
            for (int d = 0; d < hd; d++) oh[d] += p * kv_value(vr[d], r16);
        }
    }
    if (!r16)
        for (int r = 0; r < rep; r++)
            for (int d = 0; d < hd; d++) o[(size_t)r * hd + d] *= sc[r * ld + n];
}

void KFN(ops_cpu_attention_kv_prec)(float *out, const float *q, const float *k, const float *v,
                                    int T, int pos0, int H, int G, int hd, ops_prec prec) {
    if (T <= 0 || H <= 0) return;
    const int n_max = pos0 + T;
    /* query heads a task: all of a kv head's, halved while that leaves fewer tasks than threads
     * (a decode step of a model with few kv heads on many cores); each head's values are the
     * same either way */
    int hp = H / G;
    while (hp % 2 == 0 && (long)T * H / hp < omp_get_max_threads()) hp /= 2;
    const float scale = 1.0f / sqrtf((float)hd);
    const long tasks = (long)T * (H / hp);
    const size_t ld = (size_t)n_max + 1;
#pragma omp parallel
    {
        /* scores of one task's query rows; the op signature returns void, so running out of
         * memory here cannot be reported and is fatal (as in attention.c) */
        float *sc = malloc(sizeof(float) * ld * (size_t)hp);
        if (!sc) {
            base_log(BASE_LOG_ERROR, "attention_kv: out of memory (%d keys)", n_max);
            abort();
        }
#pragma omp for schedule(static)
        for (long task = 0; task < tasks; task++) {
            const int t = (int)(task / (H / hp)), h0 = (int)(task % (H / hp)) * hp,
                      g = h0 / (H / G), n = pos0 + t + 1;
            const size_t row = ((size_t)t * H + (size_t)h0) * hd;
            if (prec == OPS_PREC_BF16)
                attend(out + row, q + row, k, v, n, g, G, hd, hp, scale, sc, ld, 1);
            else
                attend(out + row, q + row, k, v, n, g, G, hd, hp, scale, sc, ld, 0);
        }
        free(sc);
    }
}
