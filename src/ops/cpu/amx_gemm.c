/* titan's own bf16 GEMM on AMX tiles (issue 16 item 3: "your own AMX tile kernels ... choose by
 * measurement"): C[M,N] (+)= op(A) op(B), bf16 A and B, fp32 sums, fp32 C or (c16) a bf16 C
 * rounded once to nearest even. The contract of bf16.c's oneDNN call, which it replaces for
 * the shapes where it measured faster (bench/RESULTS.md, session 21).
 *
 * Why: on the AMX Xeon of sessions 19-21 TDPBF16PS itself runs at 3.3-3.8 TFLOP/s a core from
 * tile registers and 2.8 with its operands loaded from L1 (bench/amx_peak.c), while oneDNN
 * 2.6.3's products reach 1.1-1.9 TFLOP/s on two cores at titan's shapes.
 *
 * TDPBF16PS: C[16, 16] fp32 += A[16, 32] bf16 x B[32, 16] bf16, with B held interleaved by
 * pairs of k ("VNNI": tile row p holds (B[2p][j], B[2p+1][j]) for its 16 columns j). Tiles
 * 0-3 hold a 32 x 32 block of C, 4-5 two 16-row A tiles, 6-7 two 16-column B tiles.
 *
 * Blocking (per thread; the larger of M and N is split between threads in 32s; blocking_for):
 *   for each K block (2048 where A is not transposed, 512 where A^T is packed per block, or
 *   all of K for a bf16 C, K being a model dimension there):
 *     for each group of columns (about 1 MiB of packed B): pack op(B)[K block, group] into
 *       k pairs, per 16 columns a [kbp/2][16] block (zero past K and N), while the next
 *       group's B is prefetched to L2 over this group's panels;
 *       for each group of rows (about 256 KiB of A): A's tiles straight from A where it is
 *         not transposed and its rows are whole 64-byte lines (a tile row across two lines
 *         loads at about half the rate), else from a packed copy of the group (transposed
 *         for a transposed A; zero past M and K);
 *         for each 32-column panel of B (in L1), each 32-row block of the group (in L2): the
 *           2 x 2 tiles over the K block, C loaded first (after the first K block, or acc) or
 *           zeroed; stored straight to C for whole aligned fp32 blocks, else through a 32 x 32
 *           fp32 stage (fresh whole lines by streaming stores; a bf16 C rounded there).
 * Each C element is one fixed-order sum (K blocks in order, within a block TDPBF16PS's own
 * order), whatever the thread count: bitwise deterministic run to run. TDPBF16PS flushes
 * denormal inputs and results to zero (as oneDNN's AMX kernels, which use it too).
 *
 * Built only for x86-64, in a translation unit of its own compiled with -mamx-tile -mamx-bf16
 * and x86-64-v4 + AVX512_BF16 (CMakeLists.txt titan_x86_kernel); bf16.c calls it only when
 * ops_cpu_amx_usable() (here: the CPU lists the instructions and Linux granted the tile
 * state) said yes. */
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ops/cpu/cpu.h"
#include "ops/cpu/vmath.h"

#ifdef TITAN_AMX_EMULATE
/* a build for testing on CPUs without AMX (-DTITAN_AMX_EMULATE=ON): the tile instructions in C,
 * with the SDM's semantics (amx_emulate.c); everything else in this file as in the real build */
#undef _tile_loadd
#undef _tile_stored
#undef _tile_zero
#undef _tile_dpbf16ps
#define _tile_loadconfig(config) ops_cpu_amx_emu_loadconfig(config)
#define _tile_release() ops_cpu_amx_emu_release()
#define _tile_loadd(t, base, stride) ops_cpu_amx_emu_loadd(t, base, (long)(stride))
#define _tile_stored(t, base, stride) ops_cpu_amx_emu_stored(t, base, (long)(stride))
#define _tile_zero(t) ops_cpu_amx_emu_zero(t)
#define _tile_dpbf16ps(c, a, b) ops_cpu_amx_emu_dpbf16ps(c, a, b)
#endif

/* K blocks (elements); C is stored and reloaded once per block, exactly (a K block does not
 * change C). KB: products whose A^T is packed per block (the weight gradients). KB_ROWS: products
 * of A not transposed (x W^T, dy W; its rows read where they lie when they are whole 64-byte
 * lines): fewer passes over C, which at 0.6B x 2048 is 8-24 MB, from memory each pass. Measured on
 * the AMX Xeon, 2 threads, GFLOP/s at KB 512 / 1024 / 2048 (bench/RESULTS.md "Session 47"): x W^T
 * 2048 x 3072 x 1024 1571 / 1817 / 1808, 2048 x 512 x 1536 1765 / 1801 / 1868; dy W level
 * (1530-1840 at each); dy^T x 3072 x 1024 x 2048 1491 / 1283 / 956: A^T's pack per block
 * wants short blocks. */
enum { KB = 512, KB_ROWS = 2048 };
/* amx_gemm_few_rows' K block: its A (a weight's rows, read once) walked along whole rows of up
 * to 8 KiB, not 1 KiB pieces of each: decode at Qwen3-0.6B in bf16 11.3-11.6 -> 13.3 tokens/s
 * (bench/RESULTS.md "Session 46"). A K block only stores and reloads C's fp32 sums exactly, so
 * it does not change C. */
enum { KB_FEW = 4096 };
/* ops_cpu_amx_gemm_packed's K block (attention's products, K a sequence length: the forward's
 * P V over all the keys a query sees; the backward's products since session 53 take K <= 256
 * queries a chunk, one block): 256, where a 32-row block of A and a 32-column panel of B (16 KiB
 * each) fit L1 together; at 512 (32 KiB each) they do not. Measured on the AMX Xeon, one thread,
 * attention's dK = dS^T Q at 0.6B x 2048 shapes (M 128, N 128, K T - c0): 39.0-39.6 TSC cycles a
 * TDPBF16PS at 512, 35.1-35.8 at 256, 39.9 at 128 (bench/RESULTS.md "Session 52"). */
enum { KB_PACKED = 256 };

/* Attention's fp32 operands are token-major tensors whose rows (a head's, or a kv head's) lie in
 * other 4 KiB pages (8 KB apart at 0.6B), where the hardware's prefetchers do not follow: their
 * packs ask for the row ROWS_AHEAD rows on as they read one (session 53, AMX Xeon, 2 threads,
 * 0.6B x 2048: pack_both's q and dout, attention backward -5%; pack_bs's k and v, forward -3-4%;
 * 32 rows ahead level with 64). n floats of row, a line per 16. */
enum { ROWS_AHEAD = 64 };
static inline void prefetch_row(const float *row, int n) {
    for (int c = 0; c < n; c += 16) _mm_prefetch((const char *)(row + c), _MM_HINT_T0);
}

/* Linux's tile-data permission (arch/x86/include/uapi/asm/prctl.h) */
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tilecfg;

/* Palette 1, tiles 0-7 of 16 rows x 64 bytes, every other byte zero (ldtilecfg faults on a
 * nonzero reserved byte). A constant, not a stack object filled before the call: GCC 12 does not
 * see _tile_loadconfig read its operand and drops the stores (measured: a stack version loaded
 * the reserved bytes and tiles 8-15 from whatever the stack held, and where it was not inlined
 * it lost the tile shapes too and faulted). */
static const tilecfg k_tiles = {.palette = 1,
                                .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
                                .rows = {16, 16, 16, 16, 16, 16, 16, 16}};

void ops_cpu_amx_tiles_configure(void) {
    _tile_loadconfig(&k_tiles);
}

const void *ops_cpu_amx_tiles_config(void) {
    return &k_tiles;
}

int ops_cpu_amx_usable(void) {
    static int state; /* 0 unknown, 1 usable, -1 not */
    int s = __atomic_load_n(&state, __ATOMIC_ACQUIRE);
    if (!s) {
        /* the emulated build (-DTITAN_AMX_EMULATE=ON) takes AMX's flags as scripts/cpu_sim.sh
         * amx adds them, so that titan's other choices are AMX's too, and needs no tile state */
        s = ops_cpu_has_flag("amx_bf16") && ops_cpu_has_flag("amx_tile") &&
                    ops_cpu_has_flag("avx512_bf16") && ops_cpu_has_flag("avx512bw") &&
                    ops_cpu_has_flag("avx512vl")
#ifndef TITAN_AMX_EMULATE
                    && syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0
#endif
                ? 1
                : -1;
        __atomic_store_n(&state, s, __ATOMIC_RELEASE);
    }
    return s > 0;
}

/* 16 x 16 32-bit transpose: r[i] lane j -> r[j] lane i (unpacks by 32 and 64 bits, then two
 * rounds of 128-bit lane shuffles) */
static void tr16(__m512i r[16]) {
    __m512i t[16], u[16];
    for (int j = 0; j < 8; j++) {
        t[2 * j] = _mm512_unpacklo_epi32(r[2 * j], r[2 * j + 1]);
        t[2 * j + 1] = _mm512_unpackhi_epi32(r[2 * j], r[2 * j + 1]);
    }
    for (int j = 0; j < 4; j++) { /* u[4j + c] lane L: column 4L + c of rows 4j .. 4j+3 */
        u[4 * j] = _mm512_unpacklo_epi64(t[4 * j], t[4 * j + 2]);
        u[4 * j + 1] = _mm512_unpackhi_epi64(t[4 * j], t[4 * j + 2]);
        u[4 * j + 2] = _mm512_unpacklo_epi64(t[4 * j + 1], t[4 * j + 3]);
        u[4 * j + 3] = _mm512_unpackhi_epi64(t[4 * j + 1], t[4 * j + 3]);
    }
    for (int c = 0; c < 4; c++) {
        const __m512i s0 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x44),
                      s1 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x44),
                      s2 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xee),
                      s3 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xee);
        r[c] = _mm512_shuffle_i32x4(s0, s1, 0x88);
        r[4 + c] = _mm512_shuffle_i32x4(s0, s1, 0xdd);
        r[8 + c] = _mm512_shuffle_i32x4(s2, s3, 0x88);
        r[12 + c] = _mm512_shuffle_i32x4(s2, s3, 0xdd);
    }
}

static __mmask16 mask16(int n) { /* the first n (0 .. 16) of 16 lanes */
    return n >= 16 ? (__mmask16)0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1);
}

/* 16 bf16 values from x (the first lanes of m; zero in the others) as 16-bit lanes: bf16 bits
 * loaded, or (f32) fp32 values rounded by ops_cpu_bf16_bits16 (ops_cpu_bf16_bits' rounding), so
 * that an operand packed straight from fp32 is bitwise the one packed from a converted copy */
static inline __m256i bits16(const void *x, int f32, __mmask16 m) {
    if (!f32) return _mm256_maskz_loadu_epi16(m, x);
    return _mm512_cvtepi32_epi16(ops_cpu_bf16_bits16(_mm512_maskz_loadu_ps(m, x)));
}

/* element i of x: bf16 bits, or (f32) fp32 */
static inline const void *elem(const void *x, int f32, size_t i) {
    return (const char *)x + i * (f32 ? sizeof(float) : sizeof(uint16_t));
}

/* 16 pairs (k, k+1) of 16 consecutive columns n of a row-major [K][N] matrix X (row stride ld
 * elements; bf16, or fp32 rounded: bits16), as 32-bit (X[k][n], X[k+1][n]): r[p] for the pair p
 * at rows k0 + 2p; zero past kb rows and past `cols` columns */
static void pairs_rows(__m512i r[16], const void *X, int f32, size_t ld, int k0, int kb, int cols) {
    const __mmask16 m = mask16(cols);
    for (int p = 0; p < 16; p++) {
        const int k = k0 + 2 * p;
        __m512i lo = _mm512_setzero_si512(), hi = lo;
        if (k < kb) lo = _mm512_cvtepu16_epi32(bits16(elem(X, f32, (size_t)k * ld), f32, m));
        if (k + 1 < kb)
            hi = _mm512_cvtepu16_epi32(bits16(elem(X, f32, (size_t)(k + 1) * ld), f32, m));
        r[p] = _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
    }
}

/* 16 rows of a row-major [R][K] matrix X (row stride ld elements; bf16, or fp32 rounded):
 * r[j] the 16 pairs (k, k+1) from k0 of row j (32 bf16, 64 bytes); zero past kb and past
 * `rows` rows */
static void pairs_cols(__m512i r[16], const void *X, int f32, size_t ld, int k0, int kb, int rows) {
    const __mmask32 m = kb - k0 >= 32 ? 0xffffffffu : kb <= k0 ? 0 : (1u << (kb - k0)) - 1;
    for (int j = 0; j < 16; j++) {
        if (j >= rows) {
            r[j] = _mm512_setzero_si512();
        } else if (!f32) {
            r[j] = _mm512_maskz_loadu_epi16(m, elem(X, 0, (size_t)j * ld + k0));
        } else {
            const void *x = elem(X, 1, (size_t)j * ld + k0);
            r[j] = _mm512_inserti64x4(_mm512_castsi256_si512(bits16(x, 1, (__mmask16)m)),
                                      bits16(elem(x, 1, 16), 1, (__mmask16)(m >> 16)), 1);
        }
    }
}

/* op(B)[k0 .. k0+kb, n0 .. n0+ng] interleaved by pairs of k into dst, per 16 columns a
 * [kbp/2][16] block of 32-bit pairs (kbp: kb rounded up to 32), dbs words apart (nt: by
 * streaming stores); zero past K and N. B stored
 * [K][N] (not tb): two rows' values widened and merged; B stored [N][K] (tb): 16 rows' pairs,
 * transposed. B's elements bf16 bits, or (f32) fp32 values rounded to bf16 on the way. */
static void pack_bs(uint32_t *dst, size_t dbs, int nt, int tb, const void *B, int f32, int ldb,
                    int N, int k0, int kb, int kbp, int n0, int ng) {
    /* tb: per 16 rows of B, each row's kbp values in order; else per 32 rows of B, each row's
     * ng values in order (not a 16-column strip of all kbp rows at a time: B's rows may be
     * a token-major tensor's, 8 KB apart, a TLB miss a row) */
    const int outer = tb ? ng : kbp, inner = tb ? kbp : ng;
    for (int o = 0; o < outer; o += tb ? 16 : 32) {
        if (f32) { /* (attention's: ops_cpu_amx_pack) the rows ROWS_AHEAD on */
            const int rows = tb ? 16 : 32, last = tb ? N - n0 : kb;
            for (int r = o + ROWS_AHEAD; r < o + ROWS_AHEAD + rows && r < last; r++)
                prefetch_row(
                    elem(B, 1, tb ? (size_t)(n0 + r) * ldb + k0 : (size_t)(k0 + r) * ldb + n0),
                    tb ? kb : ng);
        }
        for (int i = 0; i < inner; i += tb ? 32 : 16) {
            const int j0 = tb ? o : i, q = tb ? i : o, n = n0 + j0, cols = N - n;
            __m512i r[16];
            if (tb) {
                pairs_cols(r, elem(B, f32, (size_t)n * ldb + k0), f32, (size_t)ldb, q, kb, cols);
                tr16(r);
            } else {
                pairs_rows(r, elem(B, f32, (size_t)k0 * ldb + n), f32, (size_t)ldb, q, kb, cols);
            }
            uint32_t *d = dst + (size_t)(j0 / 16) * dbs + (size_t)q / 2 * 16;
            if (nt) /* a large packed operand, read later: no read for ownership */
                for (int p = 0; p < 16; p++)
                    _mm512_stream_si512((void *)(d + (size_t)p * 16), r[p]);
            else
                for (int p = 0; p < 16; p++) _mm512_store_si512(d + (size_t)p * 16, r[p]);
        }
    }
}

/* pack_bs with its 16-column blocks one after the other (dbs = kbp * 8 words), cached stores */
static void pack_b(uint32_t *dst, int tb, const void *B, int f32, int ldb, int N, int k0, int kb,
                   int kbp, int n0, int ng) {
    pack_bs(dst, (size_t)kbp * 8, 0, tb, B, f32, ldb, N, k0, kb, kbp, n0, ng);
}

/* op(A)[m0 .. m0+rows, k0 .. k0+kb] into dst [rows rounded up to 32][kbp], zero past M and K;
 * A stored [K][M] (ta): 16 columns' pairs, transposed. Both ways A is read along its rows: per
 * 16 rows the k pairs in order, or (ta) per 32 rows of A^T's k all the columns in order (a
 * 16-column strip down all kbp rows first read half of each 64-byte line at a time, a row every
 * lda elements, and took as long as the products: dy^T x at 3072 x 1024 x 2048, session 47) */
static void pack_a(uint16_t *dst, int ta, const uint16_t *A, int lda, int M, int k0, int kb,
                   int kbp, int m0, int rows) {
    const int rp = (rows + 31) / 32 * 32;
    if (m0 + rows > M) rows = M - m0;
    for (int o = 0; o < (ta ? kbp : rp); o += ta ? 32 : 16)
        for (int n = 0; n < (ta ? rp : kbp); n += ta ? 16 : 32) {
            const int i0 = ta ? n : o, q = ta ? o : n;
            __m512i r[16];
            if (ta) {
                pairs_rows(r, A + (size_t)k0 * lda + m0 + i0, 0, (size_t)lda, q, kb, rows - i0);
                tr16(r);
            } else {
                pairs_cols(r, A + (size_t)(m0 + i0) * lda + k0, 0, (size_t)lda, q, kb, rows - i0);
            }
            for (int i = 0; i < 16; i++) _mm512_store_si512(dst + (size_t)(i0 + i) * kbp + q, r[i]);
        }
}

/* Part `part` of `parts` of the cache lines pack_b will read for columns [n0, n0+ng) of
 * op(B), prefetched to L2 while the group before them is computed: the packs otherwise wait on
 * memory (the lm_head's weight, 155 MB at the bench model, is read once per chunk). */
static void prefetch_b(int tb, const uint16_t *B, int ldb, int N, int k0, int kb, int n0, int ng,
                       int part, int parts) {
    if (n0 >= N) return;
    if (n0 + ng > N) ng = N - n0;
    /* the rectangle: rows of B as stored, each `bytes` long from `first` */
    const int rows = tb ? ng : kb;
    const char *first = (const char *)(tb ? B + (size_t)n0 * ldb + k0 : B + (size_t)k0 * ldb + n0);
    const size_t bytes = sizeof(uint16_t) * (size_t)(tb ? kb : ng), per = (bytes + 63) / 64 + 1,
                 lines = (size_t)rows * per;
    for (size_t l = lines * part / parts; l < lines * (part + 1) / parts; l++) {
        const size_t r = l / per, o = l % per * 64;
        if (o < bytes + 63) _mm_prefetch(first + r * sizeof(uint16_t) * ldb + o, _MM_HINT_T1);
    }
}

/* Vector work done beside tile products: the tile unit and the vector units run side by side
 * when their instructions come close together in the program (out of order), not when a tile
 * loop and the vector loop over its results follow each other. fn(ctx, u) does unit u of n (a row
 * of a block of results); side_step, called once per k step of the tile loops it is spread over
 * (steps of them in all), does the units due by then, side_finish the rest. Measured on the
 * Xeon: a 64-product tile block and the exps of another block's 32 x 32 results took 1735 TSC
 * cycles alone, 2447 one after the other, 1985 interleaved a k step at a time. */
typedef struct {
    void (*fn)(void *ctx, int u);
    void *ctx;
    int n, done, steps, step;
} side_job;

static inline void side_step(side_job *sj) {
    const int due = (int)((long)++sj->step * sj->n / sj->steps);
    while (sj->done < due && sj->done < sj->n) sj->fn(sj->ctx, sj->done++);
}

static void side_finish(side_job *sj) {
    while (sj->done < sj->n) sj->fn(sj->ctx, sj->done++);
}

/* a side job of n units over steps k steps, starting */
static side_job side_start(void (*fn)(void *, int), void *ctx, int n, int steps) {
    return (side_job){fn, ctx, n, 0, steps > 0 ? steps : 1, 0};
}

/* C[32, 32] fp32 (+)= A[32, kbp] B[kbp, 32] on tiles 0-7 (the configuration loaded): A's rows
 * at a (byte stride as, each kbp bf16), B as two 16-column blocks of k pairs b0, b1 (kbp/2 rows
 * of 16 32-bit pairs, bs bytes apart: 64 in pack_b's layout, 256 in dpbf16.h's 64-column
 * panels), C at c (byte stride cs), added to when load, else overwritten. kbp: a multiple of
 * 32. sj (or NULL): a side job stepped once per k step. */
static inline void tile_block_with(const void *a, size_t as, const void *b0, const void *b1,
                                   size_t bs, int kbp, float *c, size_t cs, int load,
                                   side_job *sj) {
    const char *ai = a;
    if (load) {
        _tile_loadd(0, c, cs);
        _tile_loadd(1, c + 16, cs);
        _tile_loadd(2, (const char *)c + 16 * cs, cs);
        _tile_loadd(3, (const char *)c + 16 * cs + 64, cs);
    } else {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
    }
    for (int k = 0; k < kbp; k += 32) {
        _tile_loadd(4, ai + 2 * k, as);
        _tile_loadd(5, ai + 2 * k + 16 * as, as);
        _tile_loadd(6, (const char *)b0 + (size_t)k * (bs / 2), bs);
        _tile_loadd(7, (const char *)b1 + (size_t)k * (bs / 2), bs);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        if (sj) side_step(sj);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, c, cs);
    _tile_stored(1, c + 16, cs);
    _tile_stored(2, (char *)c + 16 * cs, cs);
    _tile_stored(3, (char *)c + 16 * cs + 64, cs);
}

static inline void tile_block(const void *a, size_t as, const void *b0, const void *b1, size_t bs,
                              int kbp, float *c, size_t cs, int load) {
    tile_block_with(a, as, b0, b1, bs, kbp, c, cs, load, NULL);
}

/* the blocking: K blocks of kbp (one block for c16), B packed per group of ng columns (about
 * 1 MiB), A's rows taken per group of mg (about 256 KiB), within which each 32-column panel
 * of B (in L1) meets the group's 32-row blocks (in L2) */
typedef struct {
    int kbp, ng, mg;
} blocking;

static blocking blocking_for(int K, int c16, int kb) {
    blocking b;
    const int kp = (K + 31) / 32 * 32;
    b.kbp = c16 || kp < kb ? kp : kb;
    b.ng = (1 << 20) / (2 * b.kbp) / 32 * 32;
    b.mg = (1 << 18) / (2 * b.kbp) / 32 * 32;
    if (b.ng < 32) b.ng = 32;
    if (b.mg < 32) b.mg = 32;
    return b;
}

/* Operands packed once for all the threads of a product (amx_gemm_run): where they split C's
 * rows each reads all of B, where they split its columns all of A. Packed by each thread for
 * itself, a Qwen3-0.6B x 2048 bf16 step packed 5.5 G elements (A^T of the weight gradients,
 * B of every product) where one copy of each is about half of that. Each thread packs its share
 * (whole 32s) between two barriers; every thread runs the loops that hold them, its share of C
 * empty or not. */
typedef struct {
    uint32_t *b; /* B's group [ngp / 16][kbp / 2][16] (threads splitting C's rows), or NULL */
    uint16_t *a; /* A^T's K block, every row, [Mp][kbp] (threads splitting columns), or NULL */
    int t, nth;
} amx_shared;

/* A keep fused into the product (ops_cpu_amx_gemm_keep): the fp32 C's final sums rounded to bf16
 * values, their bits into bits [M][ldc] unless NULL. */
typedef struct {
    uint16_t *bits;
} amx_keep;

/* thread t's share [*lo, *hi) of n (a multiple of 32) in whole 32s */
static void share32(int n, int t, int nth, int *lo, int *hi) {
    const int blocks = n / 32;
    *lo = (int)((long)blocks * t / nth) * 32;
    *hi = (int)((long)blocks * (t + 1) / nth) * 32;
}

/* A keep fused into the product (ops_cpu_amx_gemm_keep): rows x cols of final fp32 sums at c
 * (stride cs floats) rounded to bf16 values in place, and their bits to b (stride bs) unless b is
 * NULL, while the block is in L1: ops_bf16_round_store's values bit for bit, without its pass
 * over C in memory. A whole 64-byte line of bits goes out by a streaming store: stored normally,
 * each line's read for ownership made the forward's products 25% slower (0.6B x 2048). */
static void keep_block(float *c, size_t cs, int rows, int cols, uint16_t *b, size_t bs) {
    for (int i = 0; i < rows; i++) {
        float *x = c + (size_t)i * cs;
        uint16_t *bi = b ? b + (size_t)i * bs : NULL;
        if (cols == 32 && bi && !((uintptr_t)bi & 63)) {
            const __m512i h0 = ops_cpu_bf16_bits16(_mm512_loadu_ps(x)),
                          h1 = ops_cpu_bf16_bits16(_mm512_loadu_ps(x + 16));
            _mm512_storeu_ps(x, _mm512_castsi512_ps(_mm512_slli_epi32(h0, 16)));
            _mm512_storeu_ps(x + 16, _mm512_castsi512_ps(_mm512_slli_epi32(h1, 16)));
            _mm512_stream_si512(
                (void *)bi, _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(h0)),
                                               _mm512_cvtepi32_epi16(h1), 1));
            continue;
        }
        for (int j = 0; j < cols; j += 16) {
            const __mmask16 m = mask16(cols - j);
            const __m512i h = ops_cpu_bf16_bits16(_mm512_maskz_loadu_ps(m, x + j));
            _mm512_mask_storeu_ps(x + j, m, _mm512_castsi512_ps(_mm512_slli_epi32(h, 16)));
            if (bi) _mm256_mask_storeu_epi16(bi + j, m, _mm512_cvtepi32_epi16(h));
        }
    }
}

/* one thread's rows [m0, m1) x columns [n0, n1) of C; bp, ap: its pack buffers; sh: the shared
 * ones (NULL: none); keep: NULL, or C's final sums kept as they are stored (keep_block) */
static void amx_part(int ta, int tb, int M, int N, int K, const uint16_t *A, int lda,
                     const uint16_t *B, int ldb, int acc, int c16, void *C, int ldc, int m0, int m1,
                     int n0, int n1, blocking bl, uint32_t *bp, uint16_t *ap, const amx_shared *sh,
                     const amx_keep *keep) {
    float stage[32 * 32] __attribute__((aligned(64)));
    const int c_aligned = !(((uintptr_t)C | (uintptr_t)ldc * 4) % 64);
    ops_cpu_amx_tiles_configure();
    for (int k0 = 0; k0 < K; k0 += bl.kbp) {
        const int kb = K - k0 < bl.kbp ? K - k0 : bl.kbp, kbp = (kb + 31) / 32 * 32;
        const int load = acc || k0 > 0;        /* C holds a partial sum to add to */
        const int kept = keep && k0 + kb >= K; /* the final sums: kept as they are stored */
        if (sh && sh->a) {                     /* A's K block, every row, between the threads */
            int lo, hi;
            share32((M + 31) / 32 * 32, sh->t, sh->nth, &lo, &hi);
#pragma omp barrier
            if (hi > lo) pack_a(sh->a + (size_t)lo * kbp, ta, A, lda, M, k0, kb, kbp, lo, hi - lo);
#pragma omp barrier
        }
        for (int g0 = n0; g0 < n1; g0 += bl.ng) {
            const int ng = n1 - g0 < bl.ng ? n1 - g0 : bl.ng, ngp = (ng + 31) / 32 * 32;
            uint32_t *bg = bp;
            if (sh && sh->b) { /* B's group between the threads */
                int lo, hi;
                share32(ngp, sh->t, sh->nth, &lo, &hi);
#pragma omp barrier
                if (hi > lo)
                    pack_b(sh->b + (size_t)lo * kbp / 2, tb, B, 0, ldb, N, k0, kb, kbp, g0 + lo,
                           hi - lo);
#pragma omp barrier
                bg = sh->b;
            } else {
                pack_b(bp, tb, B, 0, ldb, N, k0, kb, kbp, g0, ngp);
            }
            for (int h0 = m0; h0 < m1; h0 += bl.mg) {
                const int mg = m1 - h0 < bl.mg ? m1 - h0 : bl.mg;
                const uint16_t *a = A + (size_t)h0 * lda + k0;
                size_t as = sizeof(uint16_t) * (size_t)lda; /* A tile row stride, bytes */
                /* straight from A only for whole 64-byte rows: a tile row across two cache
                 * lines halves the loads' rate (measured: 0.6x at 2048 x 1536 x 512) */
                if (sh && sh->a) {
                    a = sh->a + (size_t)h0 * kbp;
                    as = sizeof(uint16_t) * (size_t)kbp;
                } else if (ta || kb % 32 || mg % 32 || ((uintptr_t)a | as) % 64) {
                    pack_a(ap, ta, A, lda, M, k0, kb, kbp, h0, mg);
                    a = ap;
                    as = sizeof(uint16_t) * (size_t)kbp;
                }
                for (int j0 = 0; j0 < ngp; j0 += 32) {
                    const int jn = g0 + j0, cols = N - jn < 32 ? N - jn : 32;
                    if (h0 == m0 && g0 + ng < n1) /* the next group's B, over this one's panels */
                        prefetch_b(tb, B, ldb, N, k0, kb, g0 + ng,
                                   n1 - g0 - ng < bl.ng ? n1 - g0 - ng : bl.ng, j0 / 32, ngp / 32);
                    const uint32_t *b0 = bg + (size_t)j0 * kbp / 2, *b1 = b0 + (size_t)8 * kbp;
                    for (int i0 = 0; i0 < mg; i0 += 32) {
                        const int rows = mg - i0 < 32 ? mg - i0 : 32;
                        const char *ai = (const char *)a + i0 * as;
                        /* A read once, from memory (one panel of B: amx_gemm_few_rows' weight
                         * rows): the next block's lines asked for over this block's products */
                        if (a != ap && ngp == 32)
                            for (int r = 32; r < 64 && i0 + r < mg; r++)
                                for (int k = 0; k < 2 * kb; k += 64)
                                    _mm_prefetch(ai + (size_t)r * as + k, _MM_HINT_T1);
                        /* whole fp32 blocks to add to, or to be added to by the next K block:
                         * C's own rows as the tiles' (a partial sum streamed to memory past the
                         * caches came back from there: x W^T at 2048 x 512 x 1536 1244 -> 1765
                         * GFLOP/s in 512 blocks) */
                        const int direct =
                            !c16 && rows == 32 && cols == 32 && c_aligned && (load || k0 + kb < K);
                        float *cd = direct ? (float *)C + (size_t)(h0 + i0) * ldc + jn : stage;
                        const size_t cs = sizeof(float) * (direct ? (size_t)ldc : 32);
                        if (!direct && load) { /* stage the partial sums (zero outside C) */
                            memset(stage, 0, sizeof stage);
                            for (int i = 0; i < rows; i++)
                                memcpy(stage + i * 32,
                                       (float *)C + (size_t)(h0 + i0 + i) * ldc + jn,
                                       sizeof(float) * cols);
                        }
                        tile_block(ai, as, b0, b1, 64, kbp, cd, cs, load);
                        uint16_t *kb16 =
                            kept && keep->bits ? keep->bits + (size_t)(h0 + i0) * ldc + jn : NULL;
                        if (kept) keep_block(cd, cs / sizeof(float), rows, cols, kb16, (size_t)ldc);
                        if (direct) continue;
                        for (int i = 0; i < rows; i++) {
                            const size_t r = (size_t)(h0 + i0 + i) * ldc + jn;
                            if (!c16 && cols == 32 && !((uintptr_t)((float *)C + r) & 63)) {
                                /* a new C row, straight to memory: no read for ownership */
                                _mm512_stream_ps((float *)C + r, _mm512_load_ps(stage + i * 32));
                                _mm512_stream_ps((float *)C + r + 16,
                                                 _mm512_load_ps(stage + i * 32 + 16));
                            } else if (c16 && cols == 32 &&
                                       !((uintptr_t)((uint16_t *)C + r) & 63)) {
                                /* a whole 64-byte line of the (large) logits, no read for
                                 * ownership: two halves rounded to nearest even */
                                _mm512_stream_si512((void *)((uint16_t *)C + r),
                                                    (__m512i)_mm512_cvtne2ps_pbh(
                                                        _mm512_load_ps(stage + i * 32 + 16),
                                                        _mm512_load_ps(stage + i * 32)));
                            } else if (c16) { /* rounded to nearest even (vcvtneps2bf16) */
                                uint16_t *c = (uint16_t *)C + r;
                                for (int j = 0; j < cols; j += 16)
                                    _mm256_mask_storeu_epi16(
                                        c + j, mask16(cols - j),
                                        (__m256i)_mm512_cvtneps_pbh(
                                            _mm512_load_ps(stage + i * 32 + j)));
                            } else {
                                memcpy((float *)C + r, stage + i * 32, sizeof(float) * cols);
                            }
                        }
                    }
                }
            }
        }
    }
    _tile_release();
    _mm_sfence(); /* the streaming stores, ordered before the threads' barrier */
}

/* this thread's pack buffers (bytes), kept between calls: a fresh allocation of this size is
 * an mmap and its page faults every call */
static _Thread_local void *tl_ws;
static _Thread_local size_t tl_ws_size;

/* bytes rounded up to whole 64-byte lines (aligned_alloc's sizes; workspace carving) */
static size_t round64(size_t bytes) {
    return (bytes + 63) / 64 * 64;
}

/* a buffer of at least bytes kept in *p (*size bytes) between calls */
static void *kept(void **p, size_t *size, size_t bytes) {
    bytes = round64(bytes); /* aligned_alloc's size: a multiple of the alignment */
    if (*size < bytes) {
        free(*p);
        *p = aligned_alloc(64, bytes);
        if (!*p) abort(); /* out of memory in a void op (bf16.c's callers) */
        *size = bytes;
    }
    return *p;
}

static void *ws_get(size_t bytes) {
    return kept(&tl_ws, &tl_ws_size, bytes);
}

/* amx_gemm_run's shared packs (amx_shared), the calling thread's */
static _Thread_local void *tl_shared;
static _Thread_local size_t tl_shared_size;

/* amx_gemm_few_rows' C^T, apart from the pack buffers its product's threads take */
static _Thread_local void *tl_ct;
static _Thread_local size_t tl_ct_size;

/* C[M, N] (+)= A B^T for M < 32 rows (a decode step's, a short prompt's, an expert's few rows;
 * B stored [N][K]: a weight) as C^T = B A^T: B's rows are the A tiles, read where they lie, and
 * only A's M rows are packed, where C = A B^T packs all of B per call for one row block of C
 * (decode at Qwen3-0.6B in bf16 spent more time in that pack than in the products: bench/
 * RESULTS.md "Session 46"). The same C bit for bit: each element is the same TDPBF16PS sum of
 * the same k pairs' products in the same order (a bf16 product is commutative; K blocks of
 * KB_FEW, which store and reload C's sums exactly). M > 1: C^T in a [N][M] buffer, C transposed in
 * (acc) and out. */
static int amx_gemm_run(int ta, int tb, int M, int N, int K, const uint16_t *A, int lda,
                        const uint16_t *B, int ldb, int acc, int c16, void *C, int ldc, int kb,
                        const amx_keep *keep);

static int amx_gemm_few_rows(int M, int N, int K, const uint16_t *A, int lda, const uint16_t *B,
                             int ldb, int acc, int c16, void *C, int ldc) {
    if (M == 1) /* C^T [N][1] with row stride 1 is C's row itself */
        return amx_gemm_run(0, 1, N, 1, K, B, ldb, A, lda, acc, c16, C, 1, KB_FEW, NULL);
    const size_t es = c16 ? sizeof(uint16_t) : sizeof(float);
    char *t = kept(&tl_ct, &tl_ct_size, es * (size_t)N * M), *c = C;
    if (acc) /* (c16 refused with acc) */
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++)
                ((float *)t)[(size_t)j * M + i] = ((const float *)C)[(size_t)i * ldc + j];
    const int rc = amx_gemm_run(0, 1, N, M, K, B, ldb, A, lda, acc, c16, t, M, KB_FEW, NULL);
    for (int i = 0; !rc && i < M; i++)
        for (int j = 0; j < N; j++)
            memcpy(c + es * ((size_t)i * ldc + j), t + es * ((size_t)j * M + i), es);
    return rc;
}

int ops_cpu_amx_gemm(int ta, int tb, int M, int N, int K, const uint16_t *A, int lda,
                     const uint16_t *B, int ldb, int acc, int c16, void *C, int ldc) {
    if (M <= 0 || N <= 0 || K <= 0 || (c16 && acc) || !ops_cpu_amx_usable()) return -1;
    if (c16 && K > 8192) return -1; /* one K block for bf16 results: a model dimension */
    if (M < 32 && !ta && tb && N >= 32)
        return amx_gemm_few_rows(M, N, K, A, lda, B, ldb, acc, c16, C, ldc);
    return amx_gemm_run(ta, tb, M, N, K, A, lda, B, ldb, acc, c16, C, ldc, ta ? KB : KB_ROWS, NULL);
}

int ops_cpu_amx_gemm_keep(int ta, int tb, int M, int N, int K, const uint16_t *A, int lda,
                          const uint16_t *B, int ldb, float *C, int ldc, uint16_t *bits) {
    if (M < 32 || N <= 0 || K <= 0 || !ops_cpu_amx_usable()) return -1; /* (few rows: not) */
    const amx_keep keep = {bits};
    return amx_gemm_run(ta, tb, M, N, K, A, lda, B, ldb, 0, 0, C, ldc, ta ? KB : KB_ROWS, &keep);
}

/* ops_cpu_amx_gemm's product (arguments checked) in K blocks of at most kb */
static int amx_gemm_run(int ta, int tb, int M, int N, int K, const uint16_t *A, int lda,
                        const uint16_t *B, int ldb, int acc, int c16, void *C, int ldc, int kb,
                        const amx_keep *keep) {
    const int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
    const blocking bl = blocking_for(K, c16, kb);
    /* per thread, in u32s: B's group, A's group */
    const size_t bn = (size_t)bl.ng * bl.kbp / 2, per = bn + (size_t)bl.mg * bl.kbp / 2;
    const int split_n = N >= M; /* the larger dimension goes to the threads, in 32s */
    const int span = ((split_n ? N : M) + 31) / 32 * 32; /* the split dimension, in 32s */
    /* the shared packs (amx_shared): all of B's group where the threads split the rows; A's K
     * block where they split the columns and A is packed anyway (transposed; at most 8 MiB) */
    const size_t a_sh = (size_t)(M + 31) / 32 * 32 * bl.kbp;
    const int share_b = nt > 1 && !split_n, share_a = nt > 1 && split_n && ta && a_sh <= 1 << 22;
    void *sh_buf = NULL;
    if (share_b || share_a)
        sh_buf = kept(&tl_shared, &tl_shared_size,
                      share_b ? sizeof(uint32_t) * bn : sizeof(uint16_t) * a_sh);
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        const int t = omp_get_thread_num(), nth = omp_get_num_threads();
        int lo, hi; /* this thread's share of the split dimension (may pass its end) */
        share32(span, t, nth, &lo, &hi);
        const amx_shared sh = {share_b ? sh_buf : NULL, share_a ? sh_buf : NULL, t, nth};
        if (hi > lo || sh_buf) { /* with shared packs every thread packs its share */
            uint32_t *bp = ws_get(sizeof(uint32_t) * per);
            uint16_t *ap = (uint16_t *)(bp + bn);
            if (split_n) /* (an empty share: [lo, lo)) */
                amx_part(ta, tb, M, N, K, A, lda, B, ldb, acc, c16, C, ldc, 0, M, lo,
                         hi < N ? hi : N, bl, bp, ap, sh_buf ? &sh : NULL, keep);
            else
                amx_part(ta, tb, M, N, K, A, lda, B, ldb, acc, c16, C, ldc, lo, hi < M ? hi : M, 0,
                         N, bl, bp, ap, sh_buf ? &sh : NULL, keep);
        }
    }
    return 0;
}

/* ---- products on operands packed once (attention's, attention_gemm.c) ------------------- */

/* The packs for attention_gemm.c by streaming stores: 37.7 MB of packed operands per backward
 * at 0.6B x 2048, written through the caches with a read for ownership took 7 ms a layer, 5 ms
 * by streaming stores (Xeon AMX, 2 threads; the products that read them were not slower). */
void ops_cpu_amx_pack(uint32_t *dst, int tb, const void *B, int f32, int ldb, int K, int N) {
    const int kp = (K + 31) / 32 * 32, np = (N + 31) / 32 * 32;
    pack_bs(dst, (size_t)kp * 8, 1, tb, B, f32, ldb, N, 0, K, kp, 0, np);
    _mm_sfence();
}

void ops_cpu_amx_pack_both(uint32_t *xt, uint32_t *xn, const float *x, int ld, int T, int hd) {
    /* per 32 rows, converted once into L1 (not each layout from memory: x is a token-major
     * tensor whose head rows lie 8 KB apart at 0.6B, read twice through the TLB and DRAM) */
    uint16_t tmp[32 * OPS_CPU_AMX_PACK_BOTH_HD] __attribute__((aligned(64)));
    const int hdp = (hd + 31) / 32 * 32;
    for (int t0 = 0; t0 < T; t0 += 32) {
        const int rows = T - t0 < 32 ? T - t0 : 32;
        for (int r = 0; r < 32; r++) {
            if (t0 + r + ROWS_AHEAD < T) prefetch_row(x + (size_t)(t0 + r + ROWS_AHEAD) * ld, hd);
            for (int c = 0; c < hd; c += 16) {
                const __mmask16 m = r < rows ? mask16(hd - c) : 0; /* zero rows past T */
                _mm256_mask_storeu_epi16(tmp + r * hd + c, mask16(hd - c),
                                         bits16(x + (size_t)(t0 + r) * ld + c, 1, m));
            }
        }
        /* X^T: columns (rows of x) t0 .. t0 + 31 over all hd; X: k rows t0 .. t0 + 31 of
         * every 16-column block, T rounded up to 32 apart */
        pack_bs(xt + (size_t)t0 * hdp / 2, (size_t)hdp * 8, 1, 1, tmp, 0, hd, 32, 0, hd, hdp, 0,
                32);
        pack_bs(xn + (size_t)t0 * 8, (size_t)(T + 31) / 32 * 32 * 8, 1, 0, tmp, 0, hd, hd, 0, 32,
                32, 0, hdp);
    }
    _mm_sfence();
}

void ops_cpu_amx_transpose(uint16_t *dst, const uint16_t *A, int lda, int rows, int cols) {
    pack_a(dst, 1, A, lda, cols, 0, rows, (rows + 31) / 32 * 32, 0, cols);
}

void ops_cpu_amx_gemm_packed(int M, int N, int K, const uint16_t *A, int lda, const uint32_t *Bp,
                             size_t bs, int acc, float *C, int ldc) {
    ops_cpu_amx_tiles_configure();
    /* K blocks of KB_PACKED: A's 32 rows and B's 32 columns of one block stay within L1 (K is
     * a sequence length in P V, up to T); C is reloaded once per block */
    for (int k0 = 0; k0 < K; k0 += KB_PACKED) {
        const int kb = K - k0 < KB_PACKED ? K - k0 : KB_PACKED, load = acc || k0 > 0;
        for (int j0 = 0; j0 < N; j0 += 32) {
            const uint32_t *b0 = Bp + (size_t)(j0 / 16) * bs + (size_t)k0 * 8, *b1 = b0 + bs;
            for (int i0 = 0; i0 < M; i0 += 32)
                tile_block(A + (size_t)i0 * lda + k0, sizeof(uint16_t) * (size_t)lda, b0, b1, 64,
                           kb, C + (size_t)i0 * ldc + j0, sizeof(float) * (size_t)ldc, load);
        }
    }
    _tile_release();
}

static long panels_calls; /* ops_cpu_amx_gemm_panels_calls: tests see the tiles ran */

long ops_cpu_amx_gemm_panels_calls(void) {
    return __atomic_load_n(&panels_calls, __ATOMIC_RELAXED);
}

void ops_cpu_amx_gemm_panels(int M, int N, int k2, const uint16_t *A, size_t lda, const uint16_t *B,
                             size_t bp, float *C, size_t ldc, int acc) {
    __atomic_fetch_add(&panels_calls, 1, __ATOMIC_RELAXED);
    ops_cpu_amx_tiles_configure();
    /* per 32 columns (half a panel: its B tiles, 2 k2 x 64 bytes, stay in L2), every 32 rows */
    for (int j0 = 0; j0 < N; j0 += 32) {
        const uint16_t *b0 = B + (size_t)(j0 / 64) * bp + (size_t)(j0 % 64) * 2, *b1 = b0 + 32;
        for (int i0 = 0; i0 < M; i0 += 32)
            tile_block(A + (size_t)i0 * lda, sizeof(uint16_t) * lda, b0, b1, 256, 2 * k2,
                       C + (size_t)i0 * ldc + j0, sizeof(float) * ldc, acc);
    }
    _tile_release();
}

/* ---- the fused lm_head + cross-entropy ------------------------------------------------------
 *
 * loss = sum over tokens t with a valid target of lse_t - l[t, target_t], l = x w^T (x [N, D],
 * w [V, D], bf16; fp32 sums), and with dx: dx += G w, dw += G^T x, G = grad_scale * (softmax -
 * onehot) rounded to bf16 (autocast's bf16 backward products). The [N, V] logits never leave
 * the caches: each block of them is computed on tiles, used and dropped, so the weight's
 * product is computed twice (four products instead of three) and no logits or gradient go
 * through memory (bench model: 136 MB of bf16 logits a chunk, written, read and written back,
 * then read by each backward product; session 22 measured the chunks' products at 1.3 TFLOP/s
 * on two cores against the unit's 6-7). The blocked-softmax scheme of FlashAttention, and of
 * "Cut Your Losses in Large-Vocabulary Language Models" (Wijmans et al., 2024) for this op.
 *
 * Pass 1, per block of Tb tokens (a thread's; Tb and the block split may vary with the thread
 * count: every value below is per token, in the vocabulary's order): for each block of vb
 * vocabulary rows, w's block packed twice (k pairs of w^T for the logits, of w for dx), then per
 * 32 tokens: l [32, vb] on tiles; each token's running maximum m (the sum S and the dx
 * accumulator O rescaled by exp(m_old - m_new) when it grows), p = exp(l - m), S += sum of p
 * (fp32 within the block, double across), the target's logit kept; O [32, D] += bf16(p) w_block
 * on tiles. At the end loss = m + log(S) - l_target and dx += O * grad_scale / S - grad_scale *
 * w[target]: the normalisation is applied once, after the sum, as FlashAttention's output.
 * Pass 2, per block of CE_VD vocabulary rows (a thread's: dw's rows are its own): per chunk of
 * CE_TK tokens (fixed: dw's sums run over them in order), l^T [CE_VD, CE_TK] = w_block x^T on
 * tiles a 32 x 32 block at a time (w's rows read as tiles as they are), each block's G^T =
 * bf16(exp(l - M_t) grad_scale / S_t), minus grad_scale at the target, computed over the next
 * block's products (a side job), then dw_block += G^T x_chunk on tiles (x packed in k pairs once
 * per call, both ways).
 * Each result is one fixed-order sum per element: bitwise the same for any thread count.
 * Logits stay fp32 in the caches (the other paths round them to bf16, as autocast's bf16
 * lm_head output: this keeps them exact). */

/* pass 2's vocabulary block and token chunk (the K of dw's sums: fixed). 512-token chunks and
 * pass 1 blocks of 128 or 512 vocabulary rows measured no faster at the bench model (session 22).
 */
enum { CE_VD = 128, CE_TK = 256 };

/* exp(x) on 16 lanes, vm_expf's algorithm (vmath.h: Cephes, <= 2 ulp) with the hardware's
 * rounding and scaling by 2^n: n = round(x log2 e), r = x - n ln 2 (two constants), exp(r) by
 * its degree-7 polynomial, times 2^n (vscalefps); 0 below log(FLT_MIN) (-inf included), as
 * vm_expf. x <= 0 here (logits minus their maximum). The compiler's vectorisation of vm_expf ran
 * the epilogues at about 4 cycles an element. */
static inline __m512 ce_exp16(__m512 x) {
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
    const __mmask16 ok = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.3365478515625f), _CMP_GE_OQ);
    return _mm512_maskz_scalef_ps(ok, p, n);
}

/* Attention's row epilogues for its AMX products (attention_gemm.c), with ce_exp16 (the
 * compiler's vectorisation of vm_expf there ran them at about 4 cycles a score). n: a multiple
 * of 16. */

void ops_cpu_amx_softmax_rows(uint16_t *p16, const float *s, int M, int n, int r0, float scale,
                              float *lse, float *rl) {
    const __m512 sc = _mm512_set1_ps(scale);
    for (int i = 0; i < M; i++) {
        const float *restrict row = s + (size_t)i * n;
        uint16_t *restrict p = p16 + (size_t)i * n;
        const int nv = r0 + i + 1; /* keys 0 .. query r0 + i */
        __m512 vm = _mm512_set1_ps(-INFINITY);
        for (int j = 0; j < nv; j += 16)
            vm = _mm512_mask_max_ps(vm, mask16(nv - j), vm,
                                    _mm512_mul_ps(_mm512_loadu_ps(row + j), sc));
        const __m512 mx = _mm512_set1_ps(_mm512_reduce_max_ps(vm));
        __m512 sum = _mm512_setzero_ps();
        for (int j = 0; j < n; j += 16) { /* zero past the query */
            const __mmask16 k = mask16(nv - j);
            const __m512 e = _mm512_maskz_mov_ps(
                k, ce_exp16(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(k, row + j), sc, mx)));
            sum = _mm512_add_ps(sum, e);
            _mm256_storeu_si256((__m256i *)(p + j), (__m256i)_mm512_cvtneps_pbh(e));
        }
        const float l = _mm512_reduce_add_ps(sum);
        lse[i] = _mm512_cvtss_f32(mx) + logf(l);
        rl[i] = 1.0f / l;
    }
}

/* P and dS of keys [i0, i0 + 32) x queries [j0, j0 + 32) of a key block (key i seen by queries
 * j with qk + j >= i; zero elsewhere) into p16, ds16 ([., n] bf16) from the block's S^T and dP^T
 * (s, dp: [32][32] fp32): P = exp(S^T scale - lse[j]), dS = P (dP^T - D[j]) scale */
static void grad_block(uint16_t *p16, uint16_t *ds16, size_t n, int i0, int j0, int qk,
                       const float *s, const float *dp, float scale, const float *lse,
                       const float *D) {
    const __m512 sc = _mm512_set1_ps(scale);
    for (int r = 0; r < 32; r++) {
        const int i = i0 + r;
        uint16_t *p = p16 + (size_t)i * n + j0, *ds = ds16 + (size_t)i * n + j0;
        for (int c = 0; c < 32; c += 16) {
            const int j = j0 + c, jq = qk + j; /* jq: the query, counted from the first key */
            if (jq + 16 <= i) {                /* a whole vector of queries before the key */
                _mm256_storeu_si256((__m256i *)(p + c), _mm256_setzero_si256());
                _mm256_storeu_si256((__m256i *)(ds + c), _mm256_setzero_si256());
                continue;
            }
            const __mmask16 k = (__mmask16)~mask16(i - jq); /* lanes jq + l >= i */
            const __m512 pj =
                _mm512_maskz_mov_ps(k, ce_exp16(_mm512_fmsub_ps(_mm512_load_ps(s + r * 32 + c), sc,
                                                                _mm512_loadu_ps(lse + j))));
            const __m512 dj =
                _mm512_mul_ps(_mm512_mul_ps(pj, _mm512_sub_ps(_mm512_load_ps(dp + r * 32 + c),
                                                              _mm512_loadu_ps(D + j))),
                              sc);
            _mm256_storeu_si256((__m256i *)(p + c), (__m256i)_mm512_cvtneps_pbh(pj));
            _mm256_storeu_si256((__m256i *)(ds + c), (__m256i)_mm512_cvtneps_pbh(dj));
        }
    }
}

void ops_cpu_amx_attn_grad_scores(uint16_t *p16, uint16_t *ds16, const uint16_t *kc,
                                  const uint16_t *vc, int lda, const uint32_t *qt,
                                  const uint32_t *dot, size_t bs, int M, int n, int hd, float scale,
                                  const float *lse, const float *D, int qk) {
    /* one 32 x 32 block of S^T and of dP^T at a time, in L1 (not [M, n] fp32 blocks through L2,
     * read back by a pass of their own) */
    float s[32 * 32] __attribute__((aligned(64))), dp[32 * 32] __attribute__((aligned(64)));
    const size_t as = sizeof(uint16_t) * (size_t)lda;
    ops_cpu_amx_tiles_configure();
    for (int j0 = 0; j0 < n; j0 += 32) {
        const uint32_t *q0 = qt + (size_t)(j0 / 16) * bs, *d0 = dot + (size_t)(j0 / 16) * bs;
        for (int i0 = 0; i0 < M; i0 += 32) {
            if (qk + j0 + 32 <= i0) { /* every query of the block before every key */
                for (int r = 0; r < 32; r++) {
                    memset(p16 + (size_t)(i0 + r) * n + j0, 0, 64);
                    memset(ds16 + (size_t)(i0 + r) * n + j0, 0, 64);
                }
                continue;
            }
            tile_block(kc + (size_t)i0 * lda, as, q0, q0 + bs, 64, hd, s, 128, 0);
            tile_block(vc + (size_t)i0 * lda, as, d0, d0 + bs, 64, hd, dp, 128, 0);
            grad_block(p16, ds16, (size_t)n, i0, j0, qk, s, dp, scale, lse, D);
        }
    }
    _tile_release();
}

/* pass 1 for tokens [t0, t0 + tn) (tn a multiple of 32; xa, tg padded to Np rows). ws: this
 * thread's buffers. m, S, tl: per token of the block. Writes loss[t], M[t], scale[t]; dx. */
typedef struct {
    const uint16_t *xa, *w16;  /* xa [Np, D] (zero rows past N), 64-byte aligned */
    const int32_t *tg;         /* [Np], -1 where no valid target */
    int N, Np, D, V, grad, vb; /* vb: pass 1's vocabulary block */
    float gs;
    float *dx;
    float *M, *scale; /* [Np]: each token's final maximum and grad_scale / S (0: no target) */
    double *loss;     /* [Np] */
    const uint32_t *xb1, *xb2; /* x^T and x in k pairs (pass 2) */
    float *dw;
    int dw_acc; /* 0: the first token chunk's sums written over dw (never read), 1: added */
} ce_job;

static void ce_pass1(const ce_job *j, int t0, int tn, char *ws) {
    const int D = j->D, V = j->V, vb = j->vb;
    uint32_t *wb1 = (uint32_t *)ws;                                 /* [vb/16][D/2][16] */
    uint32_t *wb2 = (uint32_t *)(ws + round64((size_t)vb * D * 2)); /* [D/16][vb/2][16] */
    float *O = (float *)(ws + 2 * round64((size_t)vb * D * 2));     /* [tn][D] */
    float *lst = O + (size_t)tn * D;                                /* [32][vb] */
    uint16_t *pr = (uint16_t *)(lst + 32 * vb);                     /* [32][vb] */
    float *m = (float *)(pr + 32 * vb), *tl = m + tn;
    double *S = (double *)(tl + tn + (tn & 1));
    for (int i = 0; i < tn; i++) m[i] = -INFINITY, tl[i] = 0.0f, S[i] = 0.0;
    if (j->grad) memset(O, 0, sizeof(float) * (size_t)tn * D);
    for (int v0 = 0; v0 < V; v0 += vb) {
        const int vr = V - v0 < vb ? V - v0 : vb, vp = (vr + 31) / 32 * 32;
        pack_b(wb1, 1, j->w16, 0, D, V, 0, D, D, v0, vp);
        if (j->grad) pack_b(wb2, 0, j->w16 + (size_t)v0 * D, 0, D, D, 0, vr, vp, 0, D);
        /* the next block's rows of w, to L2 over this block's work (its packs waited on memory:
         * 49 -> 31 ms a step per thread at the bench model) */
        const int n0 = v0 + vb, nr = V - n0 < vb ? V - n0 : vb;
        const int lines = nr > 0 ? nr * (D / 32) : 0, steps = tn / 32;
        for (int i0 = 0; i0 < tn; i0 += 32) {
            for (int l = lines * (i0 / 32) / steps; l < lines * (i0 / 32 + 1) / steps; l++)
                _mm_prefetch((const char *)(j->w16 + (size_t)n0 * D) + 64 * (size_t)l, _MM_HINT_T1);
            const uint16_t *a = j->xa + (size_t)(t0 + i0) * D;
            for (int c0 = 0; c0 < vp; c0 += 32)
                tile_block(a, sizeof(uint16_t) * D, wb1 + (size_t)c0 * D / 2,
                           wb1 + (size_t)(c0 + 16) * D / 2, 64, D, lst + c0, sizeof(float) * vb, 0);
            for (int r = 0; r < 32; r++) {
                const int i = i0 + r, t = t0 + i, target = j->tg[t];
                const float *restrict row = lst + r * vb;
                uint16_t *restrict p = pr + r * vb;
                if (target < 0) {
                    if (j->grad) memset(p, 0, sizeof(uint16_t) * vp);
                    continue;
                }
                __m512 vm = _mm512_set1_ps(-INFINITY);
                for (int v = 0; v < vr; v += 16)
                    vm = _mm512_mask_max_ps(vm, mask16(vr - v), vm, _mm512_load_ps(row + v));
                const float bm = _mm512_reduce_max_ps(vm);
                if (bm > m[i]) { /* a new maximum: rescale what was summed against the old */
                    const float f = m[i] == -INFINITY ? 0.0f : vm_expf(m[i] - bm);
                    S[i] *= f;
                    if (j->grad) {
                        float *restrict o = O + (size_t)i * D;
#pragma omp simd
                        for (int d = 0; d < D; d++) o[d] *= f;
                    }
                    m[i] = bm;
                }
                const __m512 mx = _mm512_set1_ps(m[i]);
                __m512 sum = _mm512_setzero_ps();
                for (int v = 0; v < vp; v += 16) { /* zero past vr */
                    const __mmask16 k = mask16(vr - v);
                    const __m512 e = _mm512_maskz_mov_ps(
                        k, ce_exp16(_mm512_sub_ps(_mm512_maskz_load_ps(k, row + v), mx)));
                    sum = _mm512_add_ps(sum, e);
                    if (j->grad)
                        _mm256_store_si256((__m256i *)(p + v), (__m256i)_mm512_cvtneps_pbh(e));
                }
                S[i] += (double)_mm512_reduce_add_ps(sum);
                if (target >= v0 && target < v0 + vr) tl[i] = row[target - v0];
            }
            if (j->grad)
                for (int c0 = 0; c0 < D; c0 += 32)
                    tile_block(pr, sizeof(uint16_t) * vb, wb2 + (size_t)c0 * vp / 2,
                               wb2 + (size_t)(c0 + 16) * vp / 2, 64, vp, O + (size_t)i0 * D + c0,
                               sizeof(float) * D, 1);
        }
    }
    for (int i = 0; i < tn; i++) {
        const int t = t0 + i, target = j->tg[t];
        if (target < 0) {
            j->loss[t] = 0.0, j->M[t] = 0.0f, j->scale[t] = 0.0f;
            continue;
        }
        j->loss[t] = (double)m[i] + log(S[i]) - (double)tl[i];
        j->M[t] = m[i];
        j->scale[t] = (float)((double)j->gs / S[i]);
        if (!j->grad) continue;
        const float sc = j->scale[t], gs = j->gs;
        const float *restrict o = O + (size_t)i * D;
        const uint16_t *restrict wt = j->w16 + (size_t)target * D;
        float *restrict d = j->dx + (size_t)t * D;
#pragma omp simd
        for (int k = 0; k < D; k++) d[k] += o[k] * sc - gs * ops_cpu_bf16_value(wt[k]);
    }
}

/* pass 2's side job: G^T's rows for a 32 x 32 block of l^T (vocabulary rows v, v + 1, ...;
 * 32 tokens, each's M, scale and target at M, sc, tg) */
typedef struct {
    const float *l;      /* [32][32] fp32 */
    uint16_t *g;         /* the block's first row in G^T (row stride CE_TK) */
    const float *M, *sc; /* [32] */
    const int32_t *tg;   /* [32] */
    int v, rows;         /* row 0's vocabulary row, valid rows (zero past them) */
    float gs;
} ce_grad;

static void ce_grad_row(void *ctx, int r) {
    const ce_grad *c = ctx;
    uint16_t *restrict g = c->g + (size_t)r * CE_TK;
    if (r >= c->rows) { /* past V: zero, so dw's products add nothing */
        memset(g, 0, sizeof(uint16_t) * 32);
        return;
    }
    const float *restrict l = c->l + r * 32;
    for (int t = 0; t < 32; t += 16) {
        const __m512 s16 = _mm512_loadu_ps(c->sc + t);
        __m512 e = _mm512_mul_ps(
            ce_exp16(_mm512_sub_ps(_mm512_load_ps(l + t), _mm512_loadu_ps(c->M + t))), s16);
        e = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(s16, _mm512_setzero_ps(), _CMP_NEQ_OQ), e);
        e = _mm512_mask_sub_ps(
            e, _mm512_cmpeq_epi32_mask(_mm512_loadu_si512(c->tg + t), _mm512_set1_epi32(c->v + r)),
            e, _mm512_set1_ps(c->gs));
        _mm256_storeu_si256((__m256i *)(g + t), (__m256i)_mm512_cvtneps_pbh(e));
    }
}

/* pass 2 for vocabulary rows [v0, v0 + vr) */
static void ce_pass2(const ce_job *j, int v0, int vr, char *ws) {
    const int D = j->D, Np = j->Np, vp = (vr + 31) / 32 * 32;
    uint16_t *wa = (uint16_t *)ws;                              /* [CE_VD][D] */
    float *lb = (float *)(ws + round64((size_t)CE_VD * D * 2)); /* [2][32][32]: l^T blocks */
    uint16_t *gt = (uint16_t *)(lb + 2 * 32 * 32);              /* [CE_VD][CE_TK] */
    float *stage = (float *)(gt + (size_t)CE_VD * CE_TK);       /* [32][32] */
    /* w's rows as A tiles: a copy, 64-byte aligned and zero past V */
    memcpy(wa, j->w16 + (size_t)v0 * D, sizeof(uint16_t) * (size_t)vr * D);
    memset(wa + (size_t)vr * D, 0, sizeof(uint16_t) * (size_t)(vp - vr) * D);
    const int dw_aligned = !((uintptr_t)j->dw % 64);
    for (int c0 = 0; c0 < Np; c0 += CE_TK) {
        const int kc = Np - c0 < CE_TK ? Np - c0 : CE_TK;
        const int load = j->dw_acc || c0 > 0; /* dw holds a sum to add to */
        /* l^T a 32 x 32 block at a time, each block's G^T rows computed over the next block's
         * products (side job), the last after them */
        ce_grad g = {.gs = j->gs};
        side_job sj = side_start(ce_grad_row, &g, 0, 1);
        int nb = 0;
        for (int t0 = 0; t0 < kc; t0 += 32)
            for (int i0 = 0; i0 < vp; i0 += 32, nb++) {
                float *l = lb + (nb & 1) * 32 * 32;
                tile_block_with(
                    wa + (size_t)i0 * D, sizeof(uint16_t) * D, j->xb1 + (size_t)(c0 + t0) * D / 2,
                    j->xb1 + (size_t)(c0 + t0 + 16) * D / 2, 64, D, l, sizeof(float) * 32, 0, &sj);
                side_finish(&sj);
                g.l = l, g.g = gt + (size_t)i0 * CE_TK + t0;
                g.M = j->M + c0 + t0, g.sc = j->scale + c0 + t0, g.tg = j->tg + c0 + t0;
                g.v = v0 + i0, g.rows = vr - i0 < 32 ? vr - i0 : 32;
                sj = side_start(ce_grad_row, &g, 32, D / 32);
            }
        side_finish(&sj);
        const uint32_t *xb2 = j->xb2 + (size_t)c0 * D / 2; /* [D/16][kc/2][16] */
        for (int i0 = 0; i0 < vp; i0 += 32) {
            const int rows = vr - i0 < 32 ? vr - i0 : 32;
            for (int d0 = 0; d0 < D; d0 += 32) {
                float *c = j->dw + (size_t)(v0 + i0) * D + d0;
                const int direct = rows == 32 && dw_aligned;
                if (!direct && load)
                    for (int r = 0; r < rows; r++)
                        memcpy(stage + r * 32, c + (size_t)r * D, sizeof(float) * 32);
                tile_block(gt + (size_t)i0 * CE_TK, sizeof(uint16_t) * CE_TK,
                           xb2 + (size_t)d0 * kc / 2, xb2 + (size_t)(d0 + 16) * kc / 2, 64, kc,
                           direct ? c : stage, sizeof(float) * (direct ? (size_t)D : 32), load);
                if (!direct)
                    for (int r = 0; r < rows; r++)
                        memcpy(c + (size_t)r * D, stage + r * 32, sizeof(float) * 32);
            }
        }
    }
}

int ops_cpu_amx_lmhead_ce(float *dx, float *dw, int dw_acc, const uint16_t *x16,
                          const uint16_t *w16, const int32_t *targets, int N, int D, int V,
                          float grad_scale, double *loss) {
    if (N <= 0 || D <= 0 || V <= 0 || D % 32 || (dw && !dx) || !ops_cpu_amx_usable()) return -1;
    const int Np = (N + 31) / 32 * 32, grad = dx != NULL;
    const size_t xbytes = sizeof(uint16_t) * (size_t)Np * D;
    uint16_t *xa = aligned_alloc(64, xbytes);
    uint32_t *xb = dw ? aligned_alloc(64, 2 * xbytes) : NULL;
    int32_t *tg = malloc(sizeof(int32_t) * Np);
    float *Mf = malloc(sizeof(float) * 2 * (size_t)Np);
    double *ls = malloc(sizeof(double) * Np);
    if (!xa || (dw && !xb) || !tg || !Mf || !ls) {
        free(xa), free(xb), free(tg), free(Mf), free(ls);
        return -1;
    }
    const int nth = omp_in_parallel() ? 1 : omp_get_max_threads();
    /* pass 1's vocabulary block: w's two packed copies of it within 512 KiB (256 rows at D
     * 512); its token blocks: O [Tb, D] fp32 within 2 MiB, and a block for every thread. Each
     * token block packs all of w twice: 1 MiB blocks had each thread pack it twice at the bench
     * model and four times at 0.6B x 2048; 2 MiB (once, twice; O spills to L3) measured the fused
     * op 5% faster at 0.6B (1357-1398 against 1431-1471 ms, alternated) and 4% at the bench
     * model (medians of 7, 564 against 590 ms); 4 MiB level at 0.6B; 512 KiB slower. */
    int vb = (1 << 17) / D / 32 * 32;
    vb = vb < 32 ? 32 : vb > 256 ? 256 : vb;
    int tbm = (1 << 19) / D / 32 * 32, Tb = ((Np + nth - 1) / nth + 31) / 32 * 32;
    if (tbm < 32) tbm = 32;
    if (Tb > tbm) Tb = tbm;
    const int ntb = (Np + Tb - 1) / Tb, nvd = (V + CE_VD - 1) / CE_VD;
    const size_t ws1 = 2 * round64((size_t)vb * D * 2) + sizeof(float) * (size_t)Tb * D +
                       sizeof(float) * 32 * vb + sizeof(uint16_t) * 32 * vb +
                       (sizeof(float) * 2 + sizeof(double)) * (size_t)(Tb + 2),
                 ws2 = round64((size_t)CE_VD * D * 2) + sizeof(float) * 2 * 32 * 32 +
                       sizeof(uint16_t) * (size_t)CE_VD * CE_TK + sizeof(float) * 32 * 32;
    ce_job j = {xa,         w16, tg, N,       Np, D,    V,    grad, vb,
                grad_scale, dx,  Mf, Mf + Np, ls, NULL, NULL, dw,   dw_acc};
    if (xb) j.xb1 = xb, j.xb2 = xb + xbytes / sizeof(uint32_t);
#pragma omp parallel num_threads(nth) if (nth > 1)
    {
        char *ws = ws_get(ws1 > ws2 ? ws1 : ws2);
#pragma omp for schedule(static)
        for (int t = 0; t < Np; t++) {
            if (t < N)
                memcpy(xa + (size_t)t * D, x16 + (size_t)t * D, sizeof(uint16_t) * D);
            else
                memset(xa + (size_t)t * D, 0, sizeof(uint16_t) * D);
            tg[t] = t < N && targets[t] >= 0 && targets[t] < V ? targets[t] : -1;
        }
        ops_cpu_amx_tiles_configure();
#pragma omp for schedule(static)
        for (int b = 0; b < ntb; b++) ce_pass1(&j, b * Tb, Np - b * Tb < Tb ? Np - b * Tb : Tb, ws);
        if (dw) {
            /* x in k pairs both ways: per 32 tokens of x^T (K = D), per chunk of x (K = tokens) */
#pragma omp for schedule(static)
            for (int t0 = 0; t0 < Np; t0 += 32)
                pack_b((uint32_t *)j.xb1 + (size_t)t0 * D / 2, 1, xa, 0, D, Np, 0, D, D, t0, 32);
#pragma omp for schedule(static)
            for (int c0 = 0; c0 < Np; c0 += CE_TK) {
                const int kc = Np - c0 < CE_TK ? Np - c0 : CE_TK;
                pack_b((uint32_t *)j.xb2 + (size_t)c0 * D / 2, 0, xa + (size_t)c0 * D, 0, D, D, 0,
                       kc, kc, 0, D);
            }
#pragma omp for schedule(static)
            for (int b = 0; b < nvd; b++)
                ce_pass2(&j, b * CE_VD, V - b * CE_VD < CE_VD ? V - b * CE_VD : CE_VD, ws);
        }
        _tile_release();
    }
    double total = 0.0;
    for (int t = 0; t < N; t++) total += ls[t];
    *loss = total;
    free(xa), free(xb), free(tg), free(Mf), free(ls);
    return 0;
}
