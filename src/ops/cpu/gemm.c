/* The one SGEMM every CPU op calls. Row-major: C[M,N] = alpha * op(A) @ op(B) + beta * C,
 * op(X) = X or X^T as ta / tb say.
 *
 * Two libraries, chosen by the shape class from measurements on this machine class
 * (bench/RESULTS.md, bench/gemm_peak.sh): OpenBLAS for products with B transposed (the
 * forward x @ W^T), oneDNN for the backward products (NN: dy @ W, TN: dy^T @ x), where it is
 * 5-15% faster. Without oneDNN at build time everything goes to OpenBLAS. Both run on
 * libgomp, so they share titan's OpenMP thread pool. */
#include "ops/cpu/cpu.h"

#include <cblas.h>
#include <string.h>

#ifdef TITAN_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

void ops_cpu_sgemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                   const float *B, int ldb, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) { /* empty reduction: BLAS rejects it; C = beta * C */
        for (int i = 0; i < M; i++) {
            float *c = C + (size_t)i * ldc;
            if (beta == 0.0f)
                memset(c, 0, (size_t)N * sizeof(float));
            else
                for (int j = 0; j < N; j++) c[j] *= beta;
        }
        return;
    }
    /* One row times a transposed matrix (a decode step's x @ W^T): a matrix-vector product.
     * sgemm would pack all of W first, tripling the memory traffic of a memory-bound product. */
    if (M == 1 && !ta && tb) {
        cblas_sgemv(CblasRowMajor, CblasNoTrans, N, K, alpha, B, ldb, A, 1, beta, C, 1);
        return;
    }
#ifdef TITAN_HAVE_DNNL
    if (!tb && dnnl_sgemm(ta ? 'T' : 'N', 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) ==
                   dnnl_success)
        return;
#endif
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
                K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void ops_cpu_sgemm_task(int ta, int tb, int M, int N, int K, const float *A, int lda,
                        const float *B, int ldb, int acc, float *C, int ldc) {
#ifdef TITAN_HAVE_DNNL
    if (M > 0 && N > 0 && K > 0 &&
        dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.0f, A, lda, B, ldb, acc ? 1.0f : 0.0f,
                   C, ldc) == dnnl_success)
        return;
#endif
    ops_cpu_sgemm(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, acc ? 1.0f : 0.0f, C, ldc);
}

void ops_sgemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
               const float *B, int ldb, float beta, float *C, int ldc) {
    ops_cpu_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
