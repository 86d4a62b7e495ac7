/* Token embedding: a row gather forward, a deterministic scatter-add backward. */
#include "ops/cpu/isa.h"

#include <string.h>

/* Width of the column tiles the backward is parallelised over (64 floats = 4 cache lines). */
#define EMB_COL_TILE 64

/* Tokens are not bounds-checked here (the signature carries no vocabulary size): the data
 * loader guarantees 0 <= token < V. */
void KFN(ops_cpu_embedding_fwd)(float *out, const int32_t *tokens, const float *wte, int N, int D) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        memcpy(out + (size_t)n * D, wte + (size_t)tokens[n] * D, (size_t)D * sizeof(float));
    }
}

/* dwte[tokens[n], :] += dout[n, :]. Parallel over column tiles of D: each thread owns whole
 * columns and walks the tokens in order, so every element of dwte receives its additions
 * in token order whatever the thread count (bitwise deterministic, no atomics). */
void KFN(ops_cpu_embedding_bwd)(float *dwte, const float *dout, const int32_t *tokens, int N,
                                int D) {
    int ntiles = (D + EMB_COL_TILE - 1) / EMB_COL_TILE;
#pragma omp parallel for schedule(static)
    for (int tile = 0; tile < ntiles; tile++) {
        int c0 = tile * EMB_COL_TILE;
        int c1 = c0 + EMB_COL_TILE < D ? c0 + EMB_COL_TILE : D;
        for (int n = 0; n < N; n++) {
            float *restrict dst = dwte + (size_t)tokens[n] * D;
            const float *restrict src = dout + (size_t)n * D;
#pragma omp simd
            for (int c = c0; c < c1; c++) dst[c] += src[c];
        }
    }
}
