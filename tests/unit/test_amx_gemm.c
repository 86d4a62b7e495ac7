/* titan's own AMX GEMM (src/ops/cpu/amx_gemm.c) against sums in double of the same bf16
 * products: every transpose combination, with and without accumulation, the bf16 result,
 * shapes with edges in M, N and K, several K blocks, both ways of splitting the work between
 * threads (the operands packed once for both, several groups of B), padded and misaligned
 * leading dimensions and pointers (the packed paths) and whole
 * 64-byte rows (the direct ones); C's padding must stay untouched, and the result must be
 * bitwise the same on one thread (inside a parallel region) as on two; products of fewer than
 * 32 rows (computed transposed) bitwise the rows of a 64-row product. Skipped (77) where the
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
    if (!acc && !c16 && M >= 32) {
        /* the keep fused into the product (ops_cpu_amx_gemm_keep): C and the bits bit for bit
         * ops_bf16_round_store's over the plain product's rows, padding untouched (misaligned:
         * without bits, C rounded only) */
        float *ck = aligned_alloc(64, (csz * 4 + 63) / 64 * 64);
        const size_t nb = (size_t)M * ldc;
        uint16_t *bits = malloc(sizeof(uint16_t) * nb), *wantb = malloc(sizeof(uint16_t) * nb);
        if (!ck || !bits || !wantb) exit(2);
        memcpy(ck, pristine, csz * 4);
        for (size_t i = 0; i < nb; i++) bits[i] = wantb[i] = 0xabcd;
        const int rk = ops_cpu_amx_gemm_keep(ta, tb, M, N, K, A, lda, B, ldb, ck + off, ldc,
                                             misalign ? NULL : bits);
        for (int i = 0; i < M; i++)
            ops_bf16_round_store(c + off + (size_t)i * ldc,
                                 misalign ? NULL : wantb + (size_t)i * ldc, (size_t)N);
        CHECK(rk == 0 && !memcmp(ck, c, csz * 4) && !memcmp(bits, wantb, sizeof(uint16_t) * nb),
              "%dx%dx%d ta %d tb %d misalign %d: the kept product differs from the product kept "
              "after it",
              M, N, K, ta, tb, misalign);
        free(ck);
        free(bits);
        free(wantb);
    }
    free(a);
    free(b);
    free(c);
    free(c1);
    free(want);
    free(mag);
    free(pristine);
}

/* A product of M < 32 rows with B stored [N][K] (x W^T: decode, a short prompt, an expert's few
 * rows) runs as C^T = B A^T (amx_gemm_few_rows): its rows must be bitwise those of the same rows
 * in a 64-row product, which takes the usual path (an element's sum does not depend on the
 * other rows), and C's rows past M untouched. ldc odd: C is staged on both paths. */
static void few_rows(int M, int N, int K, int acc, int c16, int aligned) {
    /* aligned: 64-byte rows and pointers, K a multiple of 32, so that B's rows are read as tiles
     * where they lie (a weight's case; the next rows prefetched); else packed first */
    const int R = 64, ld = aligned ? (K + 31) / 32 * 32 : K + 5, ldc = N + 3;
    const size_t es = c16 ? sizeof(uint16_t) : sizeof(float), cb = es * (size_t)R * ldc;
    uint16_t *a = aligned_alloc(64, (sizeof(uint16_t) * (size_t)R * ld + 63) / 64 * 64),
             *b = aligned_alloc(64, (sizeof(uint16_t) * (size_t)N * ld + 63) / 64 * 64);
    float *c = malloc(sizeof(float) * (size_t)R * ldc), *cf = malloc(cb), *c0 = malloc(cb);
    if (!a || !b || !c || !cf || !c0) exit(2);
    for (size_t i = 0; i < (size_t)R * ld; i++) a[i] = ops_cpu_bf16_bits(uniform());
    for (size_t i = 0; i < (size_t)N * ld; i++) b[i] = ops_cpu_bf16_bits(uniform());
    for (size_t i = 0; i < (size_t)R * ldc; i++) c[i] = uniform(); /* acc: partial sums */
    memcpy(cf, c, cb);
    memcpy(c0, c, cb);
    const int rc = ops_cpu_amx_gemm(0, 1, R, N, K, a, ld, b, ld, acc, c16, c, ldc),
              rf = ops_cpu_amx_gemm(0, 1, M, N, K, a, ld, b, ld, acc, c16, cf, ldc);
    const size_t rows = es * (size_t)M * ldc; /* rows [0, M) with their padding */
    CHECK(rc == 0 && rf == 0 && !memcmp(c, cf, rows) &&
              !memcmp((char *)cf + rows, (char *)c0 + rows, cb - rows),
          "%d rows x %d x %d acc %d c16 %d aligned %d: not bitwise the rows of a %d-row product, "
          "or rows past %d written",
          M, N, K, acc, c16, aligned, R, M);
    free(a), free(b), free(c), free(cf), free(c0);
}

int main(void) {
    if (!ops_cpu_amx_usable()) {
        printf("skipped: no AMX-BF16 here (or no AMX kernel in this build)\n");
        return 77;
    }
    /* tiny; edges in all three; K over 512 (several K blocks of a packed A^T, the last
     * partial); N split between threads; M split; the lm_head's chunk with an odd K, and K over
     * 2048 and 4096 (two and three K blocks of A's rows read in place: the partial sums of the
     * blocks before the last stored in C itself, whole 32 x 32 blocks of it, and reloaded);
     * several column groups (B's next group prefetched) */
    static const shape shapes[] = {{1, 1, 1},     {37, 45, 70},    {64, 96, 1100},  {33, 700, 64},
                                   {700, 33, 64}, {96, 200, 2065}, {40, 2100, 600}, {1, 100, 1100},
                                   {7, 70, 600},  {64, 70, 4200}};
    int n = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++)
            for (int acc = 0; acc <= 1; acc++)
                for (int c16 = 0; c16 <= !acc; c16++)
                    for (int mis = 0; mis <= 1; mis++, n++)
                        one(shapes[s], t >> 1, t & 1, acc, c16, mis);
    /* M split between threads over several groups of B's columns (each packed by both threads
     * into one buffer between barriers: amx_gemm.c's amx_shared), with K blocks of 512 (A^T) or
     * one (A's rows) */
    for (int t = 0; t < 4; t++, n++)
        one((shape){1100, 1060, 520}, t >> 1, t & 1, t == 3, 0, t == 2);
    /* refused, C untouched: bf16 result with accumulation */
    uint16_t x[32] = {0}, cc[4] = {7, 7, 7, 7};
    CHECK(ops_cpu_amx_gemm(0, 0, 2, 2, 2, x, 2, x, 2, 1, 1, cc, 2) == -1 && cc[0] == 7,
          "c16 with acc not refused");
    for (int acc = 0; acc <= 1; acc++)
        for (int c16 = 0; c16 <= !acc; c16++) {
            few_rows(1, 100, 1100, acc, c16, 0); /* an edge in N */
            few_rows(7, 2100, 64, acc, c16, 0);
            few_rows(31, 96, 600, acc, c16, 0);
            few_rows(1, 2100, 1024, acc, c16, 1); /* rows from B as they lie */
            few_rows(5, 96, 64, acc, c16, 1);
            few_rows(31, 4096, 512, acc, c16, 1);
        }
    printf("%d products checked\n", n);
    return check_report("test_amx_gemm");
}
