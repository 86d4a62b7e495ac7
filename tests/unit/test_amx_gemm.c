/* titan's own AMX GEMM (src/ops/cpu/amx_gemm.c) against sums in double of the same bf16
 * products: every transpose combination, with and without accumulation, the bf16 result,
 * shapes with edges in M, N and K, several K blocks, both ways of splitting the work between
 * threads, padded and misaligned leading dimensions and pointers (the packed paths) and whole
 * 64-byte rows (the direct ones); C's padding must stay untouched, and the result must be
 * bitwise the same on one thread (inside a parallel region) as on two. Skipped (77) where the
 * CPU has no AMX-BF16 or the build no AMX kernel. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ops/cpu/cpu.h"

static uint64_t rng = 0x9e3779b97f4a7c15u;
static float uniform(void) { /* in [-1, 1) */
    return check_uniform(&rng);
}

typedef struct {
    int M, N, K;
} shape;

enum { GUARD = 32 * 1024 }; /* elements after C: more than 31 rows of any test's C */

/* one product; misalign: leading dimensions padded by 3 elements and pointers one element off
 * 64 bytes; else leading dimensions a multiple of 32 elements and pointers aligned */
static void one(shape s, int ta, int tb, int acc, int c16, int misalign) {
    const int M = s.M, N = s.N, K = s.K, off = misalign ? 1 : 0;
    const int ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    const int lda = misalign ? ac + 3 : (ac + 31) / 32 * 32,
              ldb = misalign ? bc + 3 : (bc + 31) / 32 * 32,
              ldc = misalign ? N + 3 : (N + 31) / 32 * 32;
    const size_t asz = (size_t)ar * lda + off, bsz = (size_t)br * ldb + off,
                 csz = (size_t)M * ldc + off + GUARD; /* rows past M: a guard, never written */
    uint16_t *a = aligned_alloc(64, (asz * 2 + 63) / 64 * 64),
             *b = aligned_alloc(64, (bsz * 2 + 63) / 64 * 64);
    float *c = aligned_alloc(64, (csz * 4 + 63) / 64 * 64),
          *c1 = aligned_alloc(64, (csz * 4 + 63) / 64 * 64);
    double *want = malloc(sizeof(double) * (size_t)M * N), *mag = malloc(sizeof(double) * M * N);
    if (!a || !b || !c || !c1 || !want || !mag) {
        printf("out of memory\n");
        exit(2);
    }
    for (size_t i = 0; i < asz; i++) a[i] = ops_cpu_bf16_bits(uniform());
    for (size_t i = 0; i < bsz; i++) b[i] = ops_cpu_bf16_bits(uniform());
    const uint16_t *A = a + off, *B = b + off;
    const float sentinel = 1234.5f;
    for (size_t i = 0; i < csz; i++) c[i] = sentinel;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            const float c0 = acc ? uniform() : 0.0f;
            double sum = c0, m = fabs(c0);
            for (int k = 0; k < K; k++) {
                const double p =
                    (double)ops_cpu_bf16_value(A[ta ? (size_t)k * lda + i : (size_t)i * lda + k]) *
                    ops_cpu_bf16_value(B[tb ? (size_t)j * ldb + k : (size_t)k * ldb + j]);
                sum += p;
                m += fabs(p);
            }
            want[(size_t)i * N + j] = sum;
            mag[(size_t)i * N + j] = m;
            if (acc) c[off + (size_t)i * ldc + j] = c0;
        }
    void *C = c16 ? (void *)((uint16_t *)c + off) : (void *)(c + off);
    memcpy(c1, c, csz * 4);
    float *pristine = malloc(csz * 4);
    if (!pristine) exit(2);
    memcpy(pristine, c, csz * 4);
    int rc = ops_cpu_amx_gemm(ta, tb, M, N, K, A, lda, B, ldb, acc, c16, C, ldc);
    CHECK(rc == 0, "%dx%dx%d ta %d tb %d acc %d c16 %d: refused", M, N, K, ta, tb, acc, c16);
    /* the same product on one thread, inside a parallel region: bitwise the same */
    void *C1 = c16 ? (void *)((uint16_t *)c1 + off) : (void *)(c1 + off);
    int rc1 = 0;
#pragma omp parallel num_threads(2)
    {
#pragma omp single
        rc1 = ops_cpu_amx_gemm(ta, tb, M, N, K, A, lda, B, ldb, acc, c16, C1, ldc);
    }
    CHECK(rc1 == 0 && !memcmp(c, c1, csz * 4),
          "%dx%dx%d ta %d tb %d acc %d c16 %d: one thread differs from two", M, N, K, ta, tb, acc,
          c16);
    int bad = 0, untouched = 1;
    double worst = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            const size_t x = (size_t)i * N + j, y = (size_t)i * ldc + j;
            /* fp32 sums of K terms: within K units of 2^-24 of the terms' magnitudes (a wrong
             * stride, edge or block gives errors of the terms' own size) */
            double got, tol = (K + 64) * 0x1p-24 * mag[x];
            if (c16) {
                got = ops_cpu_bf16_value(((uint16_t *)C)[y]);
                tol += 0x1p-8 * fabs(want[x]); /* one rounding to bf16 */
            } else {
                got = ((float *)C)[y];
            }
            const double err = fabs(got - want[x]);
            if (err / (mag[x] + 1e-30) > worst) worst = err / (mag[x] + 1e-30);
            bad += !(err <= tol);
        }
    /* C's padding (columns N .. ldc of each row, the element before C): never written */
    for (int i = 0; i < M; i++)
        for (int j = N; j < ldc; j++) {
            const size_t y = (size_t)i * ldc + j;
            untouched &= c16 ? ((uint16_t *)C)[y] == ((const uint16_t *)pristine)[off + y]
                             : ((float *)C)[y] == sentinel;
        }
    for (size_t i = csz - GUARD; i < csz; i++) untouched &= c[i] == pristine[i];
    if (off)
        untouched &= c16 ? ((uint16_t *)c)[0] == ((const uint16_t *)pristine)[0] : c[0] == sentinel;
    CHECK(!bad && untouched,
          "%dx%dx%d ta %d tb %d acc %d c16 %d misalign %d: %d of %d wrong (worst %.2e of the "
          "terms' magnitude), padding %s",
          M, N, K, ta, tb, acc, c16, misalign, bad, M * N, worst,
          untouched ? "untouched" : "WRITTEN");
    free(a);
    free(b);
    free(c);
    free(c1);
    free(want);
    free(mag);
    free(pristine);
}

int main(void) {
    if (!ops_cpu_amx_usable()) {
        printf("skipped: no AMX-BF16 here (or no AMX kernel in this build)\n");
        return 77;
    }
    /* tiny; edges in all three; K over 512 (several K blocks, the last partial); N split
     * between threads; M split; the lm_head's chunk with an odd K; several column groups
     * (1024 columns at K blocks of 512: B's next group prefetched) */
    static const shape shapes[] = {{1, 1, 1},     {37, 45, 70},    {64, 96, 1100}, {33, 700, 64},
                                   {700, 33, 64}, {96, 200, 2065}, {40, 2100, 600}};
    int n = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++)
            for (int acc = 0; acc <= 1; acc++)
                for (int c16 = 0; c16 <= !acc; c16++)
                    for (int mis = 0; mis <= 1; mis++, n++)
                        one(shapes[s], t >> 1, t & 1, acc, c16, mis);
    /* refused, C untouched: bf16 result with accumulation */
    uint16_t x[32] = {0}, cc[4] = {7, 7, 7, 7};
    CHECK(ops_cpu_amx_gemm(0, 0, 2, 2, 2, x, 2, x, 2, 1, 1, cc, 2) == -1 && cc[0] == 7,
          "c16 with acc not refused");
    printf("%d products checked\n", n);
    return check_report("test_amx_gemm");
}
