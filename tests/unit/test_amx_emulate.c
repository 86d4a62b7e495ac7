/* The emulated AMX tiles (src/ops/cpu/amx_emulate.c) against the Intel SDM's definitions of the
 * instructions, on values whose results the definitions fix bit for bit:
 * - TDPBF16PS gathers the even and the odd products of a row apart (fused multiply-adds from
 *   zero), adds the two, then adds that to C, once per instruction: over two pairs with
 *   products 1, 2^-24 (pair 0) and 2^-24, 2^-24 (pair 1), C = 0 becomes 1 + 2^-23 (evens 1 +
 *   2^-24 tie to 1, odds 2^-23, sum exact); one running sum in order gives 1, the exact sum
 *   rounded once 1 + 2^-22. And C = 1 plus 2^-24 + 2^-24 in one pair is 1 + 2^-23 (the pair
 *   summed first), where adding each product to C gives 1;
 * - denormal inputs read as zero (DAZ): a bf16 denormal times 2^100 adds nothing, where the
 *   exact product 2^-33 would; denormal results flush to zero (FTZ), keeping their sign:
 *   2^-125 - 1.25 x 2^-125 is -0, not the denormal -2^-127;
 * - round to nearest even whatever MXCSR says, and MXCSR as it was after the instruction;
 * - TILELOADD and TILESTORED move the configured rows and bytes only, rows stride bytes apart;
 * - a 16 x 16 x 32 product of random bf16 values equal to the same sums computed here, and 400
 *   products of random shapes and values (denormals, infinities, extremes; three MXCSR states);
 * - misuse faults as on the CPU: no configuration, mismatched shapes, a tile used twice, a tile
 *   given no shape, a bad configuration (each in a child process, which must die of SIGABRT
 *   saying why).
 * Only in builds configured with -DTITAN_AMX_EMULATE=ON (skipped, 77, elsewhere). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#ifndef TITAN_AMX_EMULATE
int main(void) {
    printf("test_amx_emulate: skipped (not a build with -DTITAN_AMX_EMULATE=ON)\n");
    return 77;
}
#else
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xmmintrin.h>

#include "ops/cpu/cpu.h"

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} cfg;

/* palette 1; tiles 0-2 as C [m, 4n bytes], A [m, 4k], B [k, 4n] of one TDPBF16PS */
static cfg shapes(int m, int n, int k) {
    cfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    c.rows[0] = (uint8_t)m, c.colsb[0] = (uint16_t)(4 * n);
    c.rows[1] = (uint8_t)m, c.colsb[1] = (uint16_t)(4 * k);
    c.rows[2] = (uint8_t)k, c.colsb[2] = (uint16_t)(4 * n);
    return c;
}

static uint16_t bf(float f) { /* f must be a bf16 value */
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16);
}

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* C[0][0] after one TDPBF16PS of 1 row x 1 column x k pairs (a, b: 2 k bf16 each, pair p at
 * 2 p): c0 + the pairs' products */
/* one TDPBF16PS of shapes(m, n, k) on emulated tiles: C (rows cs bytes apart, updated in
 * place) += A (as bytes) B (bs bytes) */
static void tdp(int m, int n, int k, float *cv, long cs, const void *a, long as, const void *b,
                long bs) {
    const cfg c = shapes(m, n, k);
    ops_cpu_amx_emu_loadconfig(&c);
    ops_cpu_amx_emu_loadd(0, cv, cs);
    ops_cpu_amx_emu_loadd(1, a, as);
    ops_cpu_amx_emu_loadd(2, b, bs);
    ops_cpu_amx_emu_dpbf16ps(0, 1, 2);
    ops_cpu_amx_emu_stored(0, cv, cs);
    ops_cpu_amx_emu_release();
}

static float dot(float c0, int k, const uint16_t *a, const uint16_t *b) {
    float cv = c0;
    tdp(1, 1, k, &cv, 4, a, 4 * k, b, 4); /* B's rows: one pair each */
    return cv;
}

static float one_pair(float c0, uint16_t a0, uint16_t a1, uint16_t b0, uint16_t b1) {
    const uint16_t a[2] = {a0, a1}, b[2] = {b0, b1};
    return dot(c0, 1, a, b);
}

/* a bf16 value of every kind TDPBF16PS meets: zeros and denormals (read as zero), infinities,
 * a NaN, values near the top and the bottom of the normal range, and ordinary ones */
static uint16_t odd_bf16(uint64_t *rng) {
    const float u = check_uniform(rng);
    const uint16_t r = (uint16_t)(((u + 1.0f) * 0.5f) * 65535.0f);
    switch (r % 16) {
    case 0:
        return r & 0x807f; /* +-0 or a denormal */
    case 1:
        return (uint16_t)(0x7f80 | (r & 0x8000)); /* +-inf */
    case 2:
        return 0x7fc1; /* a NaN */
    case 3:
        return (uint16_t)(0x7f00 | (r & 0x807f)); /* near the largest */
    case 4:
        return (uint16_t)(0x0080 | (r & 0x807f)); /* near the smallest normal */
    default:
        return ops_cpu_bf16_bits(u);
    }
}

/* want[m][n] += the SDM's sums for C[m, n] of A [m, 2k] and B [k, 2n] (bf16), each operation
 * rounded to float to nearest even with DAZ and FTZ (MXCSR set here, restored after) */
static __attribute__((noinline)) void sdm_sums(float want[16][16], uint16_t a[16][32],
                                               uint16_t b[16][32], int M, int N, int K) {
    const unsigned csr = _mm_getcsr();
    _mm_setcsr((csr & ~0x6000u) | 0x8040u);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            /* volatile: each value rounded to float where written */
            volatile float e = 0.0f, o = 0.0f;
            for (int k = 0; k < K; k++) {
                e = fmaf(ops_cpu_bf16_value(a[m][2 * k]), ops_cpu_bf16_value(b[k][2 * n]), e);
                o = fmaf(ops_cpu_bf16_value(a[m][2 * k + 1]), ops_cpu_bf16_value(b[k][2 * n + 1]),
                         o);
            }
            volatile float t = e + o;
            want[m][n] = want[m][n] + t;
        }
    _mm_setcsr(csr);
}

/* runs f in a child: it must die of SIGABRT with want in what it wrote to stderr */
static void faults(void (*f)(void), const char *want, const char *what) {
    int p[2];
    if (pipe(p)) exit(2);
    fflush(stdout);
    const pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        dup2(p[1], 2);
        f();
        _exit(0);
    }
    close(p[1]);
    char buf[512] = {0};
    size_t len = 0;
    ssize_t r;
    while (len < sizeof buf - 1 && (r = read(p[0], buf + len, sizeof buf - 1 - len)) > 0)
        len += (size_t)r;
    close(p[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT && strstr(buf, want),
          "%s: want SIGABRT and \"%s\", got status %d and \"%s\"", what, want, status, buf);
}

static void unconfigured(void) {
    ops_cpu_amx_emu_release();
    ops_cpu_amx_emu_zero(0);
}
static void mismatched(void) {
    cfg c = shapes(2, 2, 2);
    c.rows[2] = 3; /* B has 3 rows for A's 2 pairs */
    ops_cpu_amx_emu_loadconfig(&c);
    ops_cpu_amx_emu_dpbf16ps(0, 1, 2);
}
static void same_tile(void) {
    const cfg c = shapes(2, 2, 2);
    ops_cpu_amx_emu_loadconfig(&c);
    ops_cpu_amx_emu_dpbf16ps(0, 1, 1);
}
static void reserved_byte(void) {
    cfg c = shapes(2, 2, 2);
    c.reserved[3] = 1;
    ops_cpu_amx_emu_loadconfig(&c);
}
static void too_many_rows(void) {
    cfg c = shapes(2, 2, 2);
    c.rows[1] = 17;
    ops_cpu_amx_emu_loadconfig(&c);
}
static void half_shape(void) {
    cfg c = shapes(2, 2, 2);
    c.colsb[1] = 0; /* rows without bytes */
    ops_cpu_amx_emu_loadconfig(&c);
}
static void no_shape(void) {
    const cfg c = shapes(2, 2, 2);
    ops_cpu_amx_emu_loadconfig(&c);
    ops_cpu_amx_emu_zero(5); /* configured with 0 rows, 0 bytes */
}
static void tile_eight(void) {
    cfg c = shapes(2, 2, 2);
    c.rows[8] = 1, c.colsb[8] = 4;
    ops_cpu_amx_emu_loadconfig(&c);
}

int main(void) {
    const uint16_t one = bf(1.0f);
    /* evens and odds gathered apart from zero over the pairs, added, then added to C */
    {
        const uint16_t a[4] = {one, one, one, one},
                       b[4] = {one, bf(0x1p-24f), bf(0x1p-24f), bf(0x1p-24f)};
        const float r2 = dot(0.0f, 2, a, b);
        CHECK(r2 == 1.0f + 0x1p-23f, "two pairs (1, 2^-24), (2^-24, 2^-24): %a, want %a", r2,
              1.0f + 0x1p-23f);
    }
    float r = one_pair(1.0f, one, one, bf(0x1p-24f), bf(0x1p-24f));
    CHECK(r == 1.0f + 0x1p-23f, "1 + (2^-24 + 2^-24): %a, want %a", r, 1.0f + 0x1p-23f);
    /* DAZ: the bf16 denormal 2^-133 times 2^100 is 0, not 2^-33 */
    r = one_pair(0.0f, 0x0001, 0, bf(0x1p100f), 0);
    CHECK(bits(r) == 0, "a denormal input not read as zero: %a", r);
    /* FTZ: 2^-125 - 1.25 x 2^-125 = -2^-127 is denormal: flushed to -0 (by the last sum, so
     * that no later operation could read it as zero instead) */
    r = one_pair(0x1p-125f, 0, bf(-1.25f), 0, bf(0x1p-125f));
    CHECK(bits(r) == 0x80000000u, "a denormal result not flushed: %a (bits %08x)", r, bits(r));
    /* and a denormal product too: 2^-65 x 2^-65 adds nothing to 2^-126 */
    r = one_pair(0x1p-126f, bf(0x1p-65f), 0, bf(0x1p-65f), 0);
    CHECK(r == 0x1p-126f, "a denormal product not flushed: %a", r);
    /* nearest even under MXCSR's round-toward-zero, and MXCSR kept: 1 + 3 * 2^-24 rounds up
     * to 1 + 2^-22 in two steps (1 + 2^-23, then a tie to even), down to 1 + 2^-23 toward 0 */
    const unsigned csr = _mm_getcsr(), rz = (csr & ~0x6000u) | 0x6000u;
    _mm_setcsr(rz);
    r = one_pair(1.0f, one, one, bf(0x1p-23f), bf(0x1p-24f));
    const unsigned after = _mm_getcsr();
    _mm_setcsr(csr);
    CHECK(r == 1.0f + 0x1p-22f, "under MXCSR's round-toward-zero: %a, want %a", r, 1.0f + 0x1p-22f);
    CHECK((after & 0xffc0u) == (rz & 0xffc0u), "MXCSR %04x after, %04x before", after, rz);

    /* TILELOADD / TILESTORED move the configured rows x bytes only, rows stride bytes apart:
     * tile 0 as 3 rows x 8 bytes, loaded from and stored to rows 64 bytes apart */
    {
        const cfg c = shapes(3, 2, 1);
        ops_cpu_amx_emu_loadconfig(&c);
        float src[16 * 16], dst[16 * 16];
        for (int i = 0; i < 256; i++) src[i] = (float)(i + 1), dst[i] = -1.0f;
        ops_cpu_amx_emu_loadd(0, src, 64);
        ops_cpu_amx_emu_stored(0, dst, 64);
        ops_cpu_amx_emu_release();
        int wrong = 0;
        for (int i = 0; i < 256; i++)
            wrong += dst[i] != (i / 16 < 3 && i % 16 < 2 ? src[i] : -1.0f);
        CHECK(!wrong, "TILELOADD / TILESTORED of 3 rows x 8 bytes: %d values wrong", wrong);
    }

    /* every C element the SDM's fixed-order sum, computed here in float: 16 x 16 x 32, then
     * 400 random shapes with denormal, infinite and large operands under three MXCSR states
     * (what a NaN input gives, its payload and sign, is not compared: the SDM does not fix it) */
    {
        uint64_t rng = 0x243f6a8885a308d3u;
        const unsigned csrs[3] = {csr, (csr & ~0x6000u) | 0x2000u, csr | 0x8040u};
        long wrong = 0, total = 0;
        for (int it = 0; it < 401; it++) {
            const int m = it ? 1 + (int)(check_uniform(&rng) * 8 + 8) % 16 : 16,
                      n = it ? 1 + (int)(check_uniform(&rng) * 8 + 8) % 16 : 16,
                      k = it ? 1 + (int)(check_uniform(&rng) * 8 + 8) % 16 : 16;
            uint16_t a[16][32], b[16][32];
            float cv[16][16], want[16][16];
            for (int i = 0; i < 16; i++)
                for (int j = 0; j < 32; j++) {
                    a[i][j] = it ? odd_bf16(&rng) : ops_cpu_bf16_bits(check_uniform(&rng));
                    b[i][j] = it ? odd_bf16(&rng) : ops_cpu_bf16_bits(check_uniform(&rng));
                }
            for (int i = 0; i < 16; i++)
                for (int j = 0; j < 16; j++)
                    want[i][j] = cv[i][j] = check_uniform(&rng) * (it % 5 ? 1.0f : 0x1p-120f);
            sdm_sums(want, a, b, m, n, k);
            _mm_setcsr(csrs[it % 3]);
            tdp(m, n, k, &cv[0][0], 64, a, 64, b, 64);
            _mm_setcsr(csr);
            for (int i = 0; i < m; i++)
                for (int j = 0; j < n; j++, total++)
                    wrong += bits(cv[i][j]) != bits(want[i][j]) &&
                             !(isnan(cv[i][j]) && isnan(want[i][j]));
            if (!it) CHECK(!wrong, "16 x 16 x 32: not the SDM's sums");
        }
        CHECK(!wrong, "random shapes and values: %ld of %ld sums not the SDM's", wrong, total);
    }

    faults(unconfigured, "TILEZERO (tile 0): tiles not configured", "a tile without LDTILECFG");
    faults(mismatched, "TDPBF16PS (tile 0): shapes do not match", "B's rows not A's pairs");
    faults(same_tile, "TDPBF16PS (tile 0): the three tiles are not distinct", "A = B");
    faults(reserved_byte, "LDTILECFG (tile -1): a reserved byte is not zero", "reserved byte");
    faults(too_many_rows, "LDTILECFG (tile 1): more than 16 rows", "17 rows");
    faults(half_shape, "LDTILECFG (tile 1): rows or bytes zero, not both", "rows, 0 bytes");
    faults(no_shape, "TILEZERO (tile 5): the tile was given no shape", "a tile of no shape");
    faults(tile_eight, "LDTILECFG (tile 8): a shape for a tile palette 1 does not have", "tile 8");
    return check_report("test_amx_emulate");
}
#endif
