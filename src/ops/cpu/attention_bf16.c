/* "bf16" attention over a KV cache (inference: titan generate): q and the cache rows rounded
 * to bf16 here, the probabilities P by the kernel (attention_kv.c, OPS_PREC_BF16) after the
 * fp32 softmax, so Q.K^T and P.V multiply bf16 values with fp32 accumulation, as training's
 * bf16 attention (the bf16 engine's GEMMs: attention_gemm.c) does. The rounded copies are
 * transient buffers. */
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

/* Inference over a KV cache of pos0 + T rows. */
void ops_cpu_attention_kv_bf16(float *out, const float *q, const float *k, const float *v, int T,
                               int pos0, int H, int G, int hd) {
    const size_t nq = (size_t)T * H * hd, nk = (size_t)(pos0 + T) * G * hd;
    float *r[3];
    if (round_copies(r, (const float *const[]){q, k, v}, (const size_t[]){nq, nk, nk}, 3)) abort();
    ops_cpu_attention_kv_prec(out, r[0], r[1], r[2], T, pos0, H, G, hd, OPS_PREC_BF16);
    free_copies(r, 3);
}
