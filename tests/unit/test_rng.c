/* The counter-based generator's vectorised normals (base_rng_normal_fill, base_normals_of_bits:
 * the random init's) against base_rng_normal, whose log and cos are glibc's: bit for bit, over
 * millions of draws, at index offsets the tensor-parallel and expert-parallel inits use, with
 * truncation, and at the edges of Box-Muller's inputs (u1 = 1 and 2^-32, u2 at and around the
 * quadrants of cos and the switches of its range reduction). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "check.h"

static int same_bits(float a, float b) {
    return !memcmp(&a, &b, sizeof a);
}

/* fill against the scalar draws: the first mismatch reported, their count returned */
static size_t fill_mismatches(size_t n, uint64_t seed, uint64_t stream, uint64_t index0,
                              float scale, double cut, double *mean, double *var) {
    float *out = malloc(n * sizeof *out);
    if (!out) exit(2);
    base_rng_normal_fill(out, n, seed, stream, index0, scale, cut);
    size_t bad = 0;
    double s = 0, s2 = 0;
    for (size_t i = 0; i < n; i++) {
        const uint64_t at = index0 + i;
        float x = scale * base_rng_normal(seed, stream, at);
        for (uint64_t k = 1; cut > 0 && fabs(x) > cut; k++)
            x = scale * base_rng_normal(seed, stream, at + (k << 40));
        if (!same_bits(x, out[i]) && !bad++)
            printf("  index %llu: fill %a, base_rng_normal %a\n", (unsigned long long)at,
                   (double)out[i], (double)x);
        s += out[i];
        s2 += (double)out[i] * out[i];
    }
    *mean = s / (double)n;
    *var = s2 / (double)n - *mean * *mean;
    free(out);
    return bad;
}

static void test_fill(void) {
    const struct {
        uint64_t seed, stream, index0;
        size_t n;
    } cases[] = {
        {0, 0, 0, 3000000},                            /* from the start of a tensor */
        {42, 0x8c4e1f0d3a2b1c0dULL, 1234567, 1500001}, /* odd length, offset */
        {7, 99, 3 * ((uint64_t)1 << 40) - 700, 1000},  /* across a redraw range's start */
        {1234, 5, ((uint64_t)1 << 33) + 17, 500000},   /* a TP rank's slice of a large tensor */
        {3, 4, 0, 1},
        {3, 4, 0, 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        double mean, var;
        const size_t bad = fill_mismatches(cases[c].n, cases[c].seed, cases[c].stream,
                                           cases[c].index0, 1.0f, 0, &mean, &var);
        CHECK(!bad, "case %zu: %zu of %zu draws differ from base_rng_normal", c, bad, cases[c].n);
        if (cases[c].n >= 100000) { /* a standard normal: mean 0, variance 1 (5 sigma) */
            const double n = (double)cases[c].n;
            CHECK(fabs(mean) < 5 / sqrt(n), "case %zu: mean %g", c, mean);
            CHECK(fabs(var - 1) < 5 * sqrt(2 / n), "case %zu: variance %g", c, var);
        }
    }
    /* truncated at 1.5 std: about one draw in 7.5 drawn again, some more than once */
    double mean, var;
    size_t bad = fill_mismatches(400000, 11, 12, 13, 0.02f, 0.03, &mean, &var);
    CHECK(!bad, "truncated: %zu draws differ", bad);
    CHECK(var < 0.02 * 0.02 * 0.8, "truncated: variance %g, not below the untruncated", var);
    /* the init's lm_head rule: std 1/sqrt(dim), cut 3 std */
    bad = fill_mismatches(200000, 5, 6, 0, 0.03125f, 3 * 0.03125, &mean, &var);
    CHECK(!bad, "truncated at 3 std: %zu draws differ", bad);
}

/* the guard's rate: draws within 2^-40 (|R| + 1) of a float rounding boundary go to the scalar
 * path, about 1 in 4400 (3837 of 2^24 with these draws): some over 2^22 draws, but few */
static void test_guard_rate(void) {
    const size_t n = (size_t)1 << 22;
    uint64_t *r = malloc(n * sizeof *r);
    float *out = malloc(n * sizeof *out);
    if (!r || !out) exit(2);
    for (size_t i = 0; i < n; i++) r[i] = base_rng_u64(17, 18, i);
    const size_t exact = base_normals_of_bits(out, r, n);
    CHECK(exact > 8 && exact < n / 1000, "%zu of %zu draws left to the scalar path", exact, n);
    free(r);
    free(out);
}

static void test_edges(void) {
    /* high halves (u1): 1, 2^-32, near 1 and small; low halves (u2): 0, the quadrants 1/4,
     * 1/2, 3/4 and the reduction's switches 1/8, 3/8, 5/8, 7/8, each with neighbours */
    const uint32_t hi[] = {0xffffffffu, 0xfffffffeu, 0xfffff000u, 0,           1,
                           2,           0x80000000u, 0x7fffffffu, 0xb504f333u, 0x12345678u};
    uint32_t lo[64];
    int nl = 0;
    for (int q = 0; q < 8; q++)
        for (int d = -3; d <= 3; d++) lo[nl++] = (uint32_t)((uint64_t)q * (1u << 29) + (uint32_t)d);
    lo[nl++] = 0xffffffffu;
    lo[nl++] = 0xfffffffeu;
    const size_t n = sizeof hi / sizeof hi[0] * (size_t)nl;
    uint64_t *r = malloc(n * sizeof *r);
    float *out = malloc(n * sizeof *out);
    if (!r || !out) exit(2);
    size_t k = 0;
    for (size_t i = 0; i < sizeof hi / sizeof hi[0]; i++)
        for (int j = 0; j < nl; j++) r[k++] = (uint64_t)hi[i] << 32 | lo[j];
    const size_t exact = base_normals_of_bits(out, r, n);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        const float want = base_normal_of_bits(r[i]);
        if (!same_bits(out[i], want) && !bad++)
            printf("  r %016llx: %a, base_normal_of_bits %a\n", (unsigned long long)r[i],
                   (double)out[i], (double)want);
    }
    CHECK(!bad, "edges: %zu of %zu draws differ from base_normal_of_bits", bad, n);
    /* u1 = 1 (a zero) and u2 = 1/4, 3/4 (cos(fl(pi/2)) = 6e-17): within 2^-40 of zero, decided
     * by the scalar path */
    CHECK(exact >= (size_t)nl + 2, "edges: %zu draws left to the scalar path, not >= %d", exact,
          nl + 2);
    /* u1 = 1: the draw is a zero (of cos's sign); u1 = 2^-32, u2 = 0: the largest, sqrt(64 ln 2) */
    const uint64_t one = (uint64_t)0xffffffffu << 32, top = 0;
    float z, t;
    base_normals_of_bits(&z, &one, 1);
    base_normals_of_bits(&t, &top, 1);
    CHECK(z == 0, "u1 = 1: %g, not 0", z);
    CHECK(t == (float)sqrt(64 * log(2.0)), "u1 = 2^-32, u2 = 0: %.9g, not %.9g", t,
          (float)sqrt(64 * log(2.0)));
    free(r);
    free(out);
}

int main(void) {
    test_fill();
    test_edges();
    test_guard_rate();
    if (failures)
        printf("%d failure(s)\n", failures);
    else
        printf("test_rng: ok\n");
    return failures != 0;
}
