/* "bf16" attention: the operands of attention's products rounded to bf16 before the fp32 tiled
 * kernel (attention.c). Q.K^T and P.V then multiply bf16 values with fp32 accumulation, as a
 * bf16 unit does; the online softmax, the saved log-sum-exp and the probabilities stay fp32
 * (autocast's eager attention also rounds P to bf16 before P.V: keeping it fp32 is the more
 * accurate side of the recipe). Backward rounds dout too, so dV = P^T dO, dP = dO V^T and
 * dQ, dK see bf16 inputs. The rounded copies are transient [B,T,*,hd] buffers. */
#include "ops/cpu/cpu.h"

#include <stdlib.h>

/* Rounded copies of up to four tensors of sizes n[i] (NULL sources give NULL copies). */
static int round_copies(float **dst, const float *const *src, const size_t *n, int k) {
    for (int i = 0; i < k; i++) dst[i] = NULL;
    for (int i = 0; i < k; i++) {
        if (!src[i]) continue;
        dst[i] = malloc(sizeof(float) * (n[i] ? n[i] : 1));
        if (!dst[i]) return -1;
        ops_cpu_bf16_round(dst[i], src[i], n[i]);
    }
    return 0;
}

static void free_copies(float **p, int k) {
    for (int i = 0; i < k; i++) free(p[i]);
}

void ops_cpu_attention_bf16_fwd(float *out, float *lse, const float *q, const float *k,
                                const float *v, int B, int T, int H, int G, int hd) {
    const size_t nq = (size_t)B * T * H * hd, nk = (size_t)B * T * G * hd;
    float *r[3];
    if (round_copies(r, (const float *const[]){q, k, v}, (const size_t[]){nq, nk, nk}, 3))
        abort(); /* out of memory in a void op */
    ops_cpu_attention_fwd(out, lse, r[0], r[1], r[2], B, T, H, G, hd);
    free_copies(r, 3);
}

void ops_cpu_attention_bf16_bwd(float *dq, float *dk, float *dv, const float *dout,
                                const float *out, const float *lse, const float *q, const float *k,
                                const float *v, int B, int T, int H, int G, int hd) {
    const size_t nq = (size_t)B * T * H * hd, nk = (size_t)B * T * G * hd;
    float *r[4];
    if (round_copies(r, (const float *const[]){q, k, v, dout}, (const size_t[]){nq, nk, nk, nq}, 4))
        abort();
    ops_cpu_attention_bwd(dq, dk, dv, r[3], out, lse, r[0], r[1], r[2], B, T, H, G, hd);
    free_copies(r, 4);
}

/* Inference over a KV cache of pos0 + T rows: the same rounding of q and the cache rows. */
void ops_cpu_attention_kv_bf16(float *out, const float *q, const float *k, const float *v, int T,
                               int pos0, int H, int G, int hd) {
    const size_t nq = (size_t)T * H * hd, nk = (size_t)(pos0 + T) * G * hd;
    float *r[3];
    if (round_copies(r, (const float *const[]){q, k, v}, (const size_t[]){nq, nk, nk}, 3)) abort();
    ops_cpu_attention_kv(out, r[0], r[1], r[2], T, pos0, H, G, hd);
    free_copies(r, 3);
}
