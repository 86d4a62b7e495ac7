/* "bf16" attention over a KV cache (inference: titan generate): q rounded to bf16 here, the
 * cache rows as the kernel reads them and the probabilities P after its fp32 softmax
 * (attention_kv.c, OPS_PREC_BF16), so Q.K^T and P.V multiply bf16 values with fp32
 * accumulation, as training's bf16 attention (the bf16 engine's GEMMs: attention_gemm.c) does.
 * q's rounded copy is a transient buffer. */
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
    const size_t nq = (size_t)T * H * hd;
    float *r[1];
    if (round_copies(r, (const float *const[]){q}, (const size_t[]){nq}, 1)) abort();
    ops_cpu_attention_kv_prec(out, r[0], k, v, T, pos0, H, G, hd, OPS_PREC_BF16);
    free_copies(r, 1);
}
