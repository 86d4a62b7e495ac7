/* TDPBF16PS's own rate on this CPU (issue 16 item 3): the ceiling of any AMX bf16 GEMM, to hold
 * titan's and oneDNN's products against. Four 16 x 16 fp32 accumulator tiles, each step two A
 * and two B tiles (16 x 32 bf16) and four TDPBF16PS (2 x 16 x 16 x 32 FLOP each): "registers"
 * loads the operand tiles once, "L1" reloads them every step from 4 KiB that stay in L1.
 *
 *   cmake --build build --target bench_amx_peak && build/bench_amx_peak [STEPS]
 *
 * The tile state and configuration are the kernel's (src/ops/cpu/amx_gemm.c:
 * ops_cpu_amx_usable, ops_cpu_amx_tiles_configure); without them the program says so and exits
 * 1.
 *
 * First it says whether this CPU's TDPBF16PS rounds as the Intel SDM's pseudo-code, which the
 * emulated tiles of -DTITAN_AMX_EMULATE=ON builds follow (src/ops/cpu/amx_emulate.c, linked in
 * here): the same 16 x 16 x 32 products on the real tiles and on the emulated ones, compared bit
 * for bit: cases whose rounding the pseudo-code fixes (the even product of a pair added first,
 * each product and sum rounded, denormal inputs read as zero, denormal results flushed), then
 * random operands over a wide range of exponents. Information for whoever keeps the emulation
 * (docs/testing.md), not a test: titan's AMX tests allow either rounding. */
#include <immintrin.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ops/cpu/cpu.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint16_t bf(float f) { /* f must be a bf16 value */
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16);
}

/* c += a b on tiles 0, 4, 6 of the kernel's configuration (C 16 x 16 fp32, A 16 x 32 and B
 * 16 pairs x 16 bf16), on the CPU's tiles (emu 0) or the emulated ones (1) */
static void product(int emu, float *c, const uint16_t *a, const uint16_t *b) {
    if (emu) {
        ops_cpu_amx_emu_loadconfig(ops_cpu_amx_tiles_config());
        ops_cpu_amx_emu_loadd(0, c, 64);
        ops_cpu_amx_emu_loadd(4, a, 64);
        ops_cpu_amx_emu_loadd(6, b, 64);
        ops_cpu_amx_emu_dpbf16ps(0, 4, 6);
        ops_cpu_amx_emu_stored(0, c, 64);
        ops_cpu_amx_emu_release();
    } else {
        ops_cpu_amx_tiles_configure();
        _tile_loadd(0, c, 64);
        _tile_loadd(4, a, 64);
        _tile_loadd(6, b, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_stored(0, c, 64);
        _tile_release();
    }
}

/* how many of C's 256 values differ between the CPU's tiles and the emulated ones */
static int differ(const float *c0, const uint16_t *a, const uint16_t *b) {
    float hw[256] __attribute__((aligned(64))), em[256] __attribute__((aligned(64)));
    memcpy(hw, c0, sizeof hw);
    memcpy(em, c0, sizeof em);
    product(0, hw, a, b);
    product(1, em, a, b);
    int n = 0;
    for (int i = 0; i < 256; i++) n += memcmp(hw + i, em + i, 4) != 0;
    return n;
}

static void sdm_check(void) {
    /* C[0][0] = c plus the products of A's pairs 0, 1 (a[0..3]) with B's rows 0, 1 at column 0
     * (b[0..3]); 0x1p-133f stands for the bf16 denormal 0x0001 */
    static const struct {
        const char *what;
        float c, a[4], b[4];
    } cases[] = {
        {"evens, odds apart over pairs: 1 + 2^-24 | 2^-24 + 2^-24",
         0.0f,
         {1, 1, 1, 1},
         {1, 0x1p-24f, 0x1p-24f, 0x1p-24f}},
        {"a pair's sum added to C once: 1 + (2^-24 + 2^-24)", 1.0f, {1, 1}, {0x1p-24f, 0x1p-24f}},
        {"nearest even: 1 + (2^-23 + 2^-24)", 1.0f, {1, 1}, {0x1p-23f, 0x1p-24f}},
        {"a denormal input read as zero", 0.0f, {0x1p-133f}, {0x1p100f}},
        {"a denormal sum flushed: 2^-125 - 1.25 x 2^-125", 0x1p-125f, {0, -1.25f}, {0, 0x1p-125f}},
        {"a denormal product flushed: 2^-65 x 2^-65", 0x1p-126f, {0x1p-65f}, {0x1p-65f}},
    };
    float c[256] __attribute__((aligned(64)));
    uint16_t a[512] __attribute__((aligned(64))), b[512] __attribute__((aligned(64)));
    printf("TDPBF16PS on this CPU against the SDM's pseudo-code (the emulated tiles):\n");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        memset(c, 0, sizeof c), memset(a, 0, sizeof a), memset(b, 0, sizeof b);
        c[0] = cases[i].c;
        for (int j = 0; j < 4; j++) {
            a[j] = cases[i].a[j] == 0x1p-133f ? 0x0001 : bf(cases[i].a[j]);
            b[j / 2 * 32 + j % 2] = bf(cases[i].b[j]); /* B's row j / 2, column 0 */
        }
        printf("  %-58s %s\n", cases[i].what, differ(c, a, b) ? "DIFFERS" : "same");
    }
    uint64_t r = 0x9e3779b97f4a7c15u;
    int products = 0, values = 0;
    for (int t = 0; t < 1000; t++) {
        for (int i = 0; i < 512; i++) { /* signs, 8 mantissa bits, exponents 2^-20 .. 2^20 */
            r = r * 6364136223846793005u + 1442695040888963407u;
            const uint32_t e = 107 + (uint32_t)(r >> 33) % 41, m = (uint32_t)(r >> 20) & 0x7f;
            a[i] = (uint16_t)(((r >> 60) & 1) << 15 | e << 7 | m);
            r = r * 6364136223846793005u + 1442695040888963407u;
            const uint32_t e2 = 107 + (uint32_t)(r >> 33) % 41, m2 = (uint32_t)(r >> 20) & 0x7f;
            b[i] = (uint16_t)(((r >> 60) & 1) << 15 | e2 << 7 | m2);
        }
        for (int i = 0; i < 256; i++) c[i] = ops_cpu_bf16_value(a[i]) * 0.5f;
        const int d = differ(c, a, b);
        products += d > 0, values += d;
    }
    printf("  random operands: %d of 1000 products differ (%d of 256000 values)\n", products,
           values);
}

int main(int argc, char **argv) {
    const long steps = argc > 1 ? atol(argv[1]) : 4000000;
    if (steps < 1 || !ops_cpu_amx_usable()) {
        fprintf(stderr, "bench_amx_peak: no AMX tile state here (or STEPS < 1)\n");
        return 1;
    }
    sdm_check();
    const double flop = 4.0 * 2 * 16 * 16 * 32; /* a step's */
    for (int nt = 1; nt <= omp_get_max_threads(); nt++)
        for (int l1 = 0; l1 <= 1; l1++) {
            const double t0 = now();
#pragma omp parallel num_threads(nt)
            {
                static _Thread_local uint16_t op[4][16 * 32] __attribute__((aligned(64)));
                static _Thread_local float out[16 * 16] __attribute__((aligned(64)));
                for (int i = 0; i < 4 * 16 * 32; i++) op[i / 512][i % 512] = 0x3f80; /* 1.0 */
                ops_cpu_amx_tiles_configure();
                _tile_zero(0);
                _tile_zero(1);
                _tile_zero(2);
                _tile_zero(3);
                _tile_loadd(4, op[0], 64);
                _tile_loadd(5, op[1], 64);
                _tile_loadd(6, op[2], 64);
                _tile_loadd(7, op[3], 64);
                for (long s = 0; s < steps; s++) {
                    if (l1) {
                        _tile_loadd(4, op[0], 64);
                        _tile_loadd(5, op[1], 64);
                        _tile_loadd(6, op[2], 64);
                        _tile_loadd(7, op[3], 64);
                    }
                    _tile_dpbf16ps(0, 4, 6);
                    _tile_dpbf16ps(1, 4, 7);
                    _tile_dpbf16ps(2, 5, 6);
                    _tile_dpbf16ps(3, 5, 7);
                }
                _tile_stored(0, out, 64);
                _tile_release();
            }
            const double t = now() - t0;
            printf("%d thread(s), operands from %-9s %8.0f GFLOP/s\n", nt,
                   l1 ? "L1:" : "registers:", nt * (double)steps * flop / t * 1e-9);
        }
    return 0;
}
