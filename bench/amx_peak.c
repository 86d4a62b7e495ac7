/* TDPBF16PS's own rate on this CPU (issue 16 item 3): the ceiling of any AMX bf16 GEMM, to hold
 * titan's and oneDNN's products against. Four 16 x 16 fp32 accumulator tiles, each step two A
 * and two B tiles (16 x 32 bf16) and four TDPBF16PS (2 x 16 x 16 x 32 FLOP each): "registers"
 * loads the operand tiles once, "L1" reloads them every step from 4 KiB that stay in L1.
 *
 *   cmake --build build --target bench_amx_peak && build/bench_amx_peak [STEPS]
 *
 * The tile state and configuration are the kernel's (src/ops/cpu/amx_gemm.c:
 * ops_cpu_amx_usable, ops_cpu_amx_tiles_configure); without them the program says so and exits
 * 1. */
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

int main(int argc, char **argv) {
    const long steps = argc > 1 ? atol(argv[1]) : 4000000;
    if (steps < 1 || !ops_cpu_amx_usable()) {
        fprintf(stderr, "bench_amx_peak: no AMX tile state here (or STEPS < 1)\n");
        return 1;
    }
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
