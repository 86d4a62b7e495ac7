/* The vdpbf16ps micro-kernel and the bf16 packing helpers of titan's AVX512_BF16 kernels
 * (attention_dpbf16.c, grouped_dpbf16.c): static inline, included only by translation units
 * compiled with -march=x86-64-v4 -mavx512bf16 (CMakeLists.txt, titan_x86_kernel).
 *
 * vdpbf16ps: c[i] += a[2i] b[2i] + a[2i+1] b[2i+1] for 16 fp32 lanes i (a, b: 32 bf16). The
 * micro-kernel (dp_gemm) computes C[M,N] (+)= A[M,K] B[K,N] with
 *   A row-major bf16: row i at A + i lda, K contiguous (a pair of k is one 32-bit broadcast),
 *   B interleaved by pairs of k: B + p ldb holds (B[2p][j], B[2p+1][j]) for its columns j,
 * in tiles of 6 rows x 64 columns (24 zmm accumulators; ~210 GFLOP/s a core in L1 on a Zen 4,
 * its peak of one vdpbf16ps a cycle), K odd padded with a zero half pair. Each output element
 * is one fixed-order sum over k: the result does not depend on how callers split M or N. */
#ifndef TITAN_OPS_CPU_DPBF16_H
#define TITAN_OPS_CPU_DPBF16_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "ops/cpu/cpu.h"

#if !defined(__AVX512BF16__) || !defined(__AVX512BW__)
#error "ops/cpu/dpbf16.h needs -march=x86-64-v4 -mavx512bf16"
#endif

#define DP_R 6            /* micro-kernel tile rows */
#define DP_V 4            /* micro-kernel tile vectors of 16 columns */
#define DP_NC (16 * DP_V) /* micro-kernel tile columns: one panel of B */

static inline int dp_up(int x, int m) {
    return (x + m - 1) / m * m;
}

static inline size_t dp_al(size_t bytes) {
    return (bytes + 63) / 64 * 64;
}

/* ---- the micro-kernel ----------------------------------------------------------------- */

/* One R x (16 NV) tile of C over k2 pairs of K (acc: added to C); tail masks the last
 * vector's columns. */
static inline __attribute__((always_inline)) void
dp_tile(const int R, const int NV, const uint16_t *A, size_t lda, const uint16_t *B, size_t ldb,
        int k2, float *C, size_t ldc, __mmask16 tail, int acc) {
    __m512 c[DP_R][DP_V];
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            c[r][v] = _mm512_setzero_ps();
            /* C is read after the k loop: its lines requested now arrive meanwhile (an
             * accumulated weight gradient's tile comes from memory) */
            if (acc) _mm_prefetch((const char *)(C + (size_t)r * ldc + 16 * v), _MM_HINT_T0);
        }
    for (int p = 0; p < k2; p++) {
        const uint16_t *bp = B + (size_t)p * ldb;
        __m512bh b[DP_V];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) b[v] = (__m512bh)_mm512_loadu_si512(bp + 32 * v);
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) {
            uint32_t w;
            memcpy(&w, A + (size_t)r * lda + 2 * (size_t)p, sizeof w);
            const __m512bh a = (__m512bh)_mm512_set1_epi32((int)w);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) c[r][v] = _mm512_dpbf16_ps(c[r][v], a, b[v]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            float *o = C + (size_t)r * ldc + 16 * v;
            const __mmask16 m = v == NV - 1 ? tail : 0xffff;
            _mm512_mask_storeu_ps(
                o, m, acc ? _mm512_add_ps(_mm512_maskz_loadu_ps(m, o), c[r][v]) : c[r][v]);
        }
}

/* C[M,N] = A B (acc: C += A B) over k2 pairs of K, layouts as the header; columns [j, j + 64)
 * of B start at B + (j / 64) bp (bp = 128 where B's rows hold all N columns). B is read in
 * whole vectors of 16 columns (columns past N are read, never stored: they must be
 * readable). */
static inline void dp_gemm(int M, int N, int k2, const uint16_t *A, size_t lda, const uint16_t *B,
                           size_t ldb, size_t bp, float *C, size_t ldc, int acc) {
    for (int j0 = 0; j0 < N; j0 += DP_NC) {
        const int nc = N - j0 < DP_NC ? N - j0 : DP_NC, nv = (nc + 15) / 16;
        const __mmask16 tail = (__mmask16)(nc % 16 ? (1u << (nc % 16)) - 1 : 0xffffu);
        const uint16_t *b = B + (size_t)(j0 / DP_NC) * bp;
        for (int i0 = 0; i0 < M; i0 += DP_R) {
            const int r = M - i0 < DP_R ? M - i0 : DP_R;
            const uint16_t *a = A + (size_t)i0 * lda;
            float *c = C + (size_t)i0 * ldc + j0;
            switch (r * 8 + nv) { /* R, NV as constants: the accumulators stay in registers */
#define DP_CASE(R, V)                                                                              \
    case R * 8 + V:                                                                                \
        dp_tile(R, V, a, lda, b, ldb, k2, c, ldc, tail, acc);                                      \
        break;
#define DP_CASES(R) DP_CASE(R, 1) DP_CASE(R, 2) DP_CASE(R, 3) DP_CASE(R, 4)
                DP_CASES(1)
                DP_CASES(2)
                DP_CASES(3)
                DP_CASES(4)
                DP_CASES(5)
                DP_CASES(6)
#undef DP_CASES
#undef DP_CASE
            default:
                abort();
            }
        }
    }
}

/* ---- conversions and packing ------------------------------------------------------------ */

static inline __mmask16 dp_mask(int n) {
    return (__mmask16)(n >= 16 ? 0xffffu : (1u << n) - 1);
}

/* dst[0, m) = bf16(src[0, n) * f), zeros in [n, m) (m >= n). */
static inline void dp_row(uint16_t *dst, const float *src, int n, int m, float f) {
    const __m512 fv = _mm512_set1_ps(f);
    for (int j = 0; j < m; j += 16) {
        const __mmask16 ld = j < n ? dp_mask(n - j) : 0;
        const __m512i h =
            ops_cpu_bf16_bits16(_mm512_mul_ps(_mm512_maskz_loadu_ps(ld, src + j), fv));
        _mm256_mask_storeu_epi16(dst + j, dp_mask(m - j), _mm512_cvtepi32_epi16(h));
    }
}

/* A row of bf16 values: an fp32 row (rounded here) or bf16 bits (a mirror's). */
typedef struct {
    const float *f;
    const uint16_t *h;
} dp_src;

/* 16 elements [j, j + 16) of row r (ld elements apart) as 32-bit lanes with the bf16 bits in
 * the low half; elements at or past n are 0. */
static inline __m512i dp_ld16(dp_src s, size_t r, size_t ld, int j, int n) {
    const __mmask16 m = j < n ? dp_mask(n - j) : 0;
    if (s.h) return _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, s.h + r * ld + j));
    return ops_cpu_bf16_bits16(_mm512_maskz_loadu_ps(m, s.f + r * ld + j));
}

/* dst[2j + t] = bf16 of (t ? hi : lo)[j] for j in [0, m): two rows interleaved by pairs; a NULL
 * row and columns [n, m) are zeros. */
static inline void dp_pair_rows(uint16_t *dst, const float *lo, const float *hi, int n, int m) {
    for (int j = 0; j < m; j += 16) {
        const __m512i a = dp_ld16((dp_src){lo, NULL}, 0, 0, j, n),
                      b = hi ? dp_ld16((dp_src){hi, NULL}, 0, 0, j, n) : _mm512_setzero_si512();
        _mm512_mask_storeu_epi32(dst + 2 * (size_t)j, dp_mask(m - j),
                                 _mm512_or_si512(a, _mm512_slli_epi32(b, 16)));
    }
}

/* 16 words of rows (2q, 2q + 1) at columns [j, j + 16): (row 2q, row 2q + 1) per column; rows
 * at or past rows are 0. */
static inline __m512i dp_pair16(dp_src s, size_t ld, int q, int rows, int j, int n) {
    const __m512i lo = 2 * q < rows ? dp_ld16(s, 2 * (size_t)q, ld, j, n) : _mm512_setzero_si512();
    const __m512i hi =
        2 * q + 1 < rows ? dp_ld16(s, 2 * (size_t)q + 1, ld, j, n) : _mm512_setzero_si512();
    return _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
}

/* 16 words [q, q + 16) of row r: pairs (2q', 2q' + 1) of its n elements (past n: 0). */
static inline __m512i dp_words16(dp_src s, size_t r, size_t ld, int q, int n) {
    if (s.h) /* bf16 rows of even n: the words as stored */
        return _mm512_maskz_loadu_epi32(q < n / 2 ? dp_mask(n / 2 - q) : 0, s.h + r * ld + 2 * q);
    const __m512i lo = dp_ld16(s, r, ld, 2 * q, n), hi = dp_ld16(s, r, ld, 2 * q + 16, n);
    /* lanes 0..15 of lo and hi hold elements 2q..2q+15 and 2q+16..2q+31: narrow each to 16
     * bits and concatenate, so word i = (element 2q + 2i, element 2q + 2i + 1) */
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(lo)),
                              _mm512_cvtepi32_epi16(hi), 1);
}

/* In-register transpose of 16 x 16 32-bit words: r[i] lane j -> r[j] lane i. */
static inline void dp_transpose16(__m512i r[16]) {
    __m512i t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    /* r[4b + m], 128-bit lane L: column 4L + m of rows 4b .. 4b + 3; gather the four lanes of
     * each column */
    for (int i = 0; i < 4; i++) {
        t[i] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0x88);
        t[i + 4] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0xdd);
        t[i + 8] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0x88);
        t[i + 12] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0xdd);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xdd);
        r[i + 4] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0x88);
        r[i + 12] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0xdd);
    }
}

/* dst[q][c] (q in [0, k2), c in [0, 64), 64 words a row; 64-byte aligned) = word q of row c0 + c
 * of s (rows of n elements, ld apart; rows past nr are 0): one panel of B for A B^T-shaped
 * products (x W^T, Q K^T), 64 rows transposed as pairs of their elements. */
static inline void dp_pack_transposed(uint32_t *dst, dp_src s, size_t ld, int c0, int nr, int n,
                                      int k2) {
    __m512i r[16];
    for (int cb = 0; cb < DP_NC; cb += 16)
        for (int q = 0; q < k2; q += 16) {
            for (int i = 0; i < 16; i++)
                r[i] = c0 + cb + i < nr ? dp_words16(s, (size_t)(c0 + cb + i), ld, q, n)
                                        : _mm512_setzero_si512();
            dp_transpose16(r);
            for (int i = 0; i < 16 && q + i < k2; i++)
                _mm512_store_si512(dst + (size_t)(q + i) * DP_NC + cb, r[i]);
        }
}

#endif /* TITAN_OPS_CPU_DPBF16_H */
