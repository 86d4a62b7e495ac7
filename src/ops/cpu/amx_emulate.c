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
 * This file is compiled with -ffp-contract=off, so that only the explicit FMAs fuse. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <immintrin.h>

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

/* TDPBF16PS's sums, rows [0, M) of tile c (the SDM's: even and odd products gathered apart by
 * fused multiply-adds, their sum added to C once; MXCSR set by the caller). C's 16 columns are
 * the 16 lanes of a vector: each lane does the scalar sequence above in the same order, so the
 * results are those of scalar fmaf (16x fewer instructions: test-amx-emulated runs the AMX
 * training tests in CI). bf16 -> fp32 is exact (the bits moved up by 16); the vector FMAs and
 * adds read MXCSR (DAZ, FTZ, nearest even) as the scalar ones do. Its own target: the file is
 * also built plain (bench_amx_peak), where a CPU with AMX has AVX-512. */
static __attribute__((noinline, target("avx512f"))) void dp_rows(int c, int a, int b, int M, int N,
                                                                 int K) {
    const __mmask16 cols = (__mmask16)((1u << N) - 1);
    const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
    __m512 be[ROWS], bo[ROWS]; /* B's row k: the even and the odd bf16 of each column */
    for (int k = 0; k < K; k++) {
        const __m512i w = _mm512_load_si512(st.t[b][k]);
        be[k] = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
        bo[k] = _mm512_castsi512_ps(_mm512_and_si512(w, hi));
    }
    for (int m = 0; m < M; m++) {
        __m512 ev = _mm512_setzero_ps(), od = _mm512_setzero_ps();
        for (int k = 0; k < K; k++) {
            uint32_t w;
            memcpy(&w, &st.t[a][m][4 * k], 4);
            ev = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_set1_epi32((int)(w << 16))), be[k], ev);
            od = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_set1_epi32((int)(w & 0xffff0000u))),
                                 bo[k], od);
        }
        const __m512 cv = _mm512_load_ps(st.t[c][m]);
        /* columns past N: zero, as the tile's bytes past colsb */
        _mm512_store_ps(st.t[c][m], _mm512_maskz_add_ps(cols, cv, _mm512_add_ps(ev, od)));
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
