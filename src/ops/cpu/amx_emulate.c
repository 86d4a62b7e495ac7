/* AMX's tile instructions in C, for builds configured with -DTITAN_AMX_EMULATE=ON
 * (CMakeLists.txt): amx_gemm.c is then compiled without -mamx-* and its _tile_* intrinsics
 * call these, so titan's AMX kernels run, slowly, on any CPU with the AVX-512 the rest of that
 * file needs (AVX512_BF16, BW, VL), and are tested there (`make test-amx-emulated`). What the
 * instructions do is the Intel SDM's pseudo-code (vol. 2, LDTILECFG, TILELOADD, TILESTORED,
 * TILEZERO, TDPBF16PS, TILERELEASE; palette 1: 8 tiles of at most 16 rows x 64 bytes):
 *
 * - LDTILECFG with palette 0 is TILERELEASE (no tile usable); with palette 1 it faults on a
 *   nonzero reserved byte, rows over 16 or colsb over 64, exactly one of a tile's rows and colsb
 *   zero, or any shape given to tiles 8-15. A tile given no shape (0 rows, 0 bytes) is not
 *   usable. start_row is not modelled (titan's kernels never restart an instruction).
 * - TILELOADD copies the configured rows x colsb bytes from base + row * stride and zeroes the
 *   rest of the tile; TILESTORED stores rows x colsb bytes; TILEZERO zeroes the tile.
 * - TDPBF16PS C += A B faults unless the tiles are usable, distinct, A's colsb a multiple of 4
 *   equal to 4 B.rows, A.rows == C.rows and B.colsb == C.colsb. Then, per row m of C, two fp32
 *   sums per 32-bit column n start at zero and gather, over the k pairs in order, the even and
 *   the odd products by fused multiply-adds:
 *       E[n] = fma(fp32(A[m].bf16[2k]), fp32(B[k].bf16[2n]), E[n])
 *       O[n] = fma(fp32(A[m].bf16[2k + 1]), fp32(B[k].bf16[2n + 1]), O[n])
 *   and C[m][n] = C[m][n] + (E[n] + O[n]): one rounding into C per instruction (per 32 bf16
 *   of K), every operation rounded to nearest even with denormal inputs read as zero and
 *   denormal results flushed to zero (DAZ, FTZ), whatever MXCSR says. (The Intrinsics Guide's
 *   shorter loop, both products added into C one by one, is not what the SDM specifies.)
 *
 * A fault here is a message naming the instruction and what was wrong, then abort(): on a real
 * CPU it is #UD or #GP (SIGILL / SIGSEGV), so a kernel that misuses the tiles fails the same
 * tests here as it would there. Whether a given CPU's TDPBF16PS rounds exactly as the SDM's
 * pseudo-code is not something this file can know: the tests that run on both compare against
 * sums in double with tolerances, not bit for bit.
 *
 * The tile state is per thread, as the registers are (each OpenMP thread configures its own).
 * This file is compiled with -ffp-contract=off, so that only the fmaf calls fuse. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xmmintrin.h>

#include "ops/cpu/cpu.h"

enum { TILES = 8, ROWS = 16, COLSB = 64 };

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_cfg;

static _Thread_local struct {
    int palette;
    int rows[TILES], colsb[TILES];
    _Alignas(64) uint8_t t[TILES][ROWS][COLSB];
} st;

static _Noreturn void fault(const char *insn, const char *why, int t) {
    fprintf(stderr, "titan: emulated AMX: %s (tile %d): %s\n", insn, t, why);
    abort();
}

static void usable(const char *insn, int t) {
    if (!st.palette) fault(insn, "tiles not configured (no LDTILECFG since TILERELEASE)", t);
    if (t < 0 || t >= TILES) fault(insn, "no such tile in palette 1", t);
    if (!st.rows[t]) fault(insn, "the tile was given no shape", t);
}

void ops_cpu_amx_emu_loadconfig(const void *config) {
    amx_cfg c;
    memcpy(&c, config, sizeof c);
    if (c.palette > 1) fault("LDTILECFG", "palette other than 0 or 1", -1);
    if (c.palette == 0) { /* the init state: nothing else is read */
        ops_cpu_amx_emu_release();
        return;
    }
    for (int i = 0; i < 14; i++)
        if (c.reserved[i]) fault("LDTILECFG", "a reserved byte is not zero", -1);
    for (int i = 0; i < 16; i++) {
        if (i >= TILES && (c.rows[i] || c.colsb[i]))
            fault("LDTILECFG", "a shape for a tile palette 1 does not have", i);
        if (c.rows[i] > ROWS || c.colsb[i] > COLSB)
            fault("LDTILECFG", "more than 16 rows or 64 bytes a row", i);
        if (!c.rows[i] != !c.colsb[i]) fault("LDTILECFG", "rows or bytes zero, not both", i);
    }
    st.palette = 1;
    for (int i = 0; i < TILES; i++) {
        st.rows[i] = c.rows[i];
        st.colsb[i] = c.colsb[i];
    }
    memset(st.t, 0, sizeof st.t);
}

void ops_cpu_amx_emu_release(void) {
    st.palette = 0;
    memset(st.rows, 0, sizeof st.rows);
    memset(st.colsb, 0, sizeof st.colsb);
    memset(st.t, 0, sizeof st.t);
}

void ops_cpu_amx_emu_loadd(int t, const void *base, long stride) {
    usable("TILELOADD", t);
    memset(st.t[t], 0, sizeof st.t[t]);
    for (int r = 0; r < st.rows[t]; r++)
        memcpy(st.t[t][r], (const char *)base + r * stride, (size_t)st.colsb[t]);
}

void ops_cpu_amx_emu_stored(int t, void *base, long stride) {
    usable("TILESTORED", t);
    for (int r = 0; r < st.rows[t]; r++)
        memcpy((char *)base + r * stride, st.t[t][r], (size_t)st.colsb[t]);
}

void ops_cpu_amx_emu_zero(int t) {
    usable("TILEZERO", t);
    memset(st.t[t], 0, sizeof st.t[t]);
}

static float bf16_f32(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* TDPBF16PS's sums, rows [0, M) of tile c (the SDM's: even and odd products gathered apart by
 * fused multiply-adds, their sum added to C once; MXCSR set by the caller) */
static __attribute__((noinline)) void dp_rows(int c, int a, int b, int M, int N, int K) {
    float bv[ROWS][2][COLSB / 4], ev[COLSB / 4], od[COLSB / 4], cv[COLSB / 4];
    for (int k = 0; k < K; k++)
        for (int n = 0; n < N; n++) {
            uint16_t h[2];
            memcpy(h, &st.t[b][k][4 * n], 4);
            bv[k][0][n] = bf16_f32(h[0]);
            bv[k][1][n] = bf16_f32(h[1]);
        }
    for (int m = 0; m < M; m++) {
        for (int n = 0; n < N; n++) ev[n] = od[n] = 0.0f;
        for (int k = 0; k < K; k++) {
            uint16_t h[2];
            memcpy(h, &st.t[a][m][4 * k], 4);
            const float a0 = bf16_f32(h[0]), a1 = bf16_f32(h[1]);
            for (int n = 0; n < N; n++) {
                ev[n] = fmaf(a0, bv[k][0][n], ev[n]);
                od[n] = fmaf(a1, bv[k][1][n], od[n]);
            }
        }
        memcpy(cv, st.t[c][m], (size_t)N * 4);
        for (int n = 0; n < N; n++) {
            const float t = ev[n] + od[n];
            cv[n] = cv[n] + t;
        }
        memset(st.t[c][m], 0, COLSB);
        memcpy(st.t[c][m], cv, (size_t)N * 4);
    }
}

void ops_cpu_amx_emu_dpbf16ps(int c, int a, int b) {
    usable("TDPBF16PS", c);
    usable("TDPBF16PS", a);
    usable("TDPBF16PS", b);
    if (c == a || c == b || a == b) fault("TDPBF16PS", "the three tiles are not distinct", c);
    const int M = st.rows[c], N = st.colsb[c] / 4, K = st.colsb[a] / 4;
    if (st.colsb[a] % 4 || st.colsb[c] % 4 || st.rows[b] != K || st.rows[a] != M ||
        st.colsb[b] != st.colsb[c])
        fault("TDPBF16PS", "shapes do not match (A rows x 4K bytes, B K x 4N, C rows x 4N)", c);
    /* nearest even, DAZ and FTZ, every exception masked, for these operations only (in a
     * function of their own, so that the compiler cannot move them across the MXCSR writes) */
    const unsigned csr = _mm_getcsr();
    _mm_setcsr((csr & ~0x6000u) | 0x8040u | 0x1f80u);
    dp_rows(c, a, b, M, N, K);
    _mm_setcsr(csr);
    for (int m = M; m < ROWS; m++) memset(st.t[c][m], 0, COLSB);
}
