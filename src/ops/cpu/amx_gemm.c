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
 *   for each K block (512, or all of K for a bf16 C, K being a model dimension there):
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
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ops/cpu/cpu.h"

/* K block (elements); C is reloaded once per block. 1024 and 2048 measured no faster at
 * titan's shapes (bench/RESULTS.md "Session 21"). */
enum { KB = 512 };

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

int ops_cpu_amx_usable(void) {
    static int state; /* 0 unknown, 1 usable, -1 not */
    int s = __atomic_load_n(&state, __ATOMIC_ACQUIRE);
    if (!s) {
        s = ops_cpu_has_flag("amx_bf16") && ops_cpu_has_flag("amx_tile") &&
                    ops_cpu_has_flag("avx512_bf16") && ops_cpu_has_flag("avx512bw") &&
                    ops_cpu_has_flag("avx512vl") &&
                    syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0
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

/* 16 pairs (k, k+1) of 16 consecutive columns n of a row-major [K][N] matrix X (row stride ld),
 * as 32-bit (X[k][n], X[k+1][n]): r[p] for the pair p at rows k0 + 2p; zero past kb rows and
 * past `cols` columns */
static void pairs_rows(__m512i r[16], const uint16_t *X, size_t ld, int k0, int kb, int cols) {
    const __mmask16 m = mask16(cols);
    for (int p = 0; p < 16; p++) {
        const int k = k0 + 2 * p;
        __m512i lo = _mm512_setzero_si512(), hi = lo;
        if (k < kb) lo = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, X + (size_t)k * ld));
        if (k + 1 < kb)
            hi = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, X + (size_t)(k + 1) * ld));
        r[p] = _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
    }
}

/* 16 rows of a row-major [R][K] matrix X (row stride ld): r[j] the 16 pairs (k, k+1) from k0
 * of row j (32 bf16, 64 bytes); zero past kb and past `rows` rows */
static void pairs_cols(__m512i r[16], const uint16_t *X, size_t ld, int k0, int kb, int rows) {
    const __mmask32 m = kb - k0 >= 32 ? 0xffffffffu : kb <= k0 ? 0 : (1u << (kb - k0)) - 1;
    for (int j = 0; j < 16; j++)
        r[j] = j < rows ? _mm512_maskz_loadu_epi16(m, X + (size_t)j * ld + k0)
                        : _mm512_setzero_si512();
}

/* op(B)[k0 .. k0+kb, n0 .. n0+ng] interleaved by pairs of k into dst, per 16 columns a
 * [kbp/2][16] block of 32-bit pairs (kbp: kb rounded up to 32); zero past K and N. B stored
 * [K][N] (not tb): two rows' values widened and merged; B stored [N][K] (tb): 16 rows' pairs,
 * transposed. */
static void pack_b(uint32_t *dst, int tb, const uint16_t *B, int ldb, int N, int k0, int kb,
                   int kbp, int n0, int ng) {
    for (int j0 = 0; j0 < ng; j0 += 16) {
        uint32_t *d = dst + (size_t)j0 * kbp / 2;
        const int n = n0 + j0, cols = N - n;
        for (int q = 0; q < kbp; q += 32) { /* 16 pairs */
            __m512i r[16];
            if (tb) {
                pairs_cols(r, B + (size_t)n * ldb + k0, (size_t)ldb, q, kb, cols);
                tr16(r);
            } else {
                pairs_rows(r, B + (size_t)k0 * ldb + n, (size_t)ldb, q, kb, cols);
            }
            for (int p = 0; p < 16; p++) _mm512_store_si512(d + (size_t)(q / 2 + p) * 16, r[p]);
        }
    }
}

/* op(A)[m0 .. m0+rows, k0 .. k0+kb] into dst [rows rounded up to 32][kbp], zero past M and K;
 * A stored [K][M] (ta): 16 columns' pairs, transposed */
static void pack_a(uint16_t *dst, int ta, const uint16_t *A, int lda, int M, int k0, int kb,
                   int kbp, int m0, int rows) {
    const int rp = (rows + 31) / 32 * 32;
    if (m0 + rows > M) rows = M - m0;
    for (int i0 = 0; i0 < rp; i0 += 16)
        for (int q = 0; q < kbp; q += 32) {
            __m512i r[16];
            if (ta) {
                pairs_rows(r, A + (size_t)k0 * lda + m0 + i0, (size_t)lda, q, kb, rows - i0);
                tr16(r);
            } else {
                pairs_cols(r, A + (size_t)(m0 + i0) * lda + k0, (size_t)lda, q, kb, rows - i0);
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

/* the blocking: K blocks of kbp (one block for c16), B packed per group of ng columns (about
 * 1 MiB), A's rows taken per group of mg (about 256 KiB), within which each 32-column panel
 * of B (in L1) meets the group's 32-row blocks (in L2) */
typedef struct {
    int kbp, ng, mg;
} blocking;

static blocking blocking_for(int K, int c16) {
    blocking b;
    const int kp = (K + 31) / 32 * 32;
    b.kbp = c16 || kp < KB ? kp : KB;
    b.ng = (1 << 20) / (2 * b.kbp) / 32 * 32;
    b.mg = (1 << 18) / (2 * b.kbp) / 32 * 32;
    if (b.ng < 32) b.ng = 32;
    if (b.mg < 32) b.mg = 32;
    return b;
}

/* one thread's rows [m0, m1) x columns [n0, n1) of C; bp, ap: its pack buffers */
static void amx_part(int ta, int tb, int M, int N, int K, const uint16_t *A, int lda,
                     const uint16_t *B, int ldb, int acc, int c16, void *C, int ldc, int m0, int m1,
                     int n0, int n1, blocking bl, uint32_t *bp, uint16_t *ap) {
    float stage[32 * 32] __attribute__((aligned(64)));
    const int c_aligned = !(((uintptr_t)C | (uintptr_t)ldc * 4) % 64);
    ops_cpu_amx_tiles_configure();
    for (int k0 = 0; k0 < K; k0 += bl.kbp) {
        const int kb = K - k0 < bl.kbp ? K - k0 : bl.kbp, kbp = (kb + 31) / 32 * 32;
        const int load = acc || k0 > 0; /* C holds a partial sum to add to */
        for (int g0 = n0; g0 < n1; g0 += bl.ng) {
            const int ng = n1 - g0 < bl.ng ? n1 - g0 : bl.ng, ngp = (ng + 31) / 32 * 32;
            pack_b(bp, tb, B, ldb, N, k0, kb, kbp, g0, ngp);
            for (int h0 = m0; h0 < m1; h0 += bl.mg) {
                const int mg = m1 - h0 < bl.mg ? m1 - h0 : bl.mg;
                const uint16_t *a = A + (size_t)h0 * lda + k0;
                size_t as = sizeof(uint16_t) * (size_t)lda; /* A tile row stride, bytes */
                /* straight from A only for whole 64-byte rows: a tile row across two cache
                 * lines halves the loads' rate (measured: 0.6x at 2048 x 1536 x 512) */
                if (ta || kb % 32 || mg % 32 || ((uintptr_t)a | as) % 64) {
                    pack_a(ap, ta, A, lda, M, k0, kb, kbp, h0, mg);
                    a = ap;
                    as = sizeof(uint16_t) * (size_t)kbp;
                }
                for (int j0 = 0; j0 < ngp; j0 += 32) {
                    const int jn = g0 + j0, cols = N - jn < 32 ? N - jn : 32;
                    if (h0 == m0 && g0 + ng < n1) /* the next group's B, over this one's panels */
                        prefetch_b(tb, B, ldb, N, k0, kb, g0 + ng,
                                   n1 - g0 - ng < bl.ng ? n1 - g0 - ng : bl.ng, j0 / 32, ngp / 32);
                    const uint32_t *b0 = bp + (size_t)j0 * kbp / 2, *b1 = b0 + (size_t)8 * kbp;
                    for (int i0 = 0; i0 < mg; i0 += 32) {
                        const int rows = mg - i0 < 32 ? mg - i0 : 32;
                        const char *ai = (const char *)a + i0 * as;
                        /* whole fp32 blocks to add to: C's own rows as the tiles' */
                        const int direct = !c16 && rows == 32 && cols == 32 && load && c_aligned;
                        float *cd = direct ? (float *)C + (size_t)(h0 + i0) * ldc + jn : stage;
                        const size_t cs = sizeof(float) * (direct ? (size_t)ldc : 32);
                        if (!direct && load) { /* stage the partial sums (zero outside C) */
                            memset(stage, 0, sizeof stage);
                            for (int i = 0; i < rows; i++)
                                memcpy(stage + i * 32,
                                       (float *)C + (size_t)(h0 + i0 + i) * ldc + jn,
                                       sizeof(float) * cols);
                        }
                        if (load) {
                            _tile_loadd(0, cd, cs);
                            _tile_loadd(1, cd + 16, cs);
                            _tile_loadd(2, (const char *)cd + 16 * cs, cs);
                            _tile_loadd(3, (const char *)cd + 16 * cs + 64, cs);
                        } else {
                            _tile_zero(0);
                            _tile_zero(1);
                            _tile_zero(2);
                            _tile_zero(3);
                        }
                        for (int k = 0; k < kbp; k += 32) {
                            _tile_loadd(4, ai + 2 * k, as);
                            _tile_loadd(5, ai + 2 * k + 16 * as, as);
                            _tile_loadd(6, b0 + (size_t)k * 8, 64);
                            _tile_loadd(7, b1 + (size_t)k * 8, 64);
                            _tile_dpbf16ps(0, 4, 6);
                            _tile_dpbf16ps(1, 4, 7);
                            _tile_dpbf16ps(2, 5, 6);
                            _tile_dpbf16ps(3, 5, 7);
                        }
                        _tile_stored(0, cd, cs);
                        _tile_stored(1, cd + 16, cs);
                        _tile_stored(2, (char *)cd + 16 * cs, cs);
                        _tile_stored(3, (char *)cd + 16 * cs + 64, cs);
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

static void *ws_get(size_t bytes) {
    if (tl_ws_size < bytes) {
        free(tl_ws);
        tl_ws = aligned_alloc(64, bytes);
        if (!tl_ws) abort(); /* out of memory in a void op (bf16.c's callers) */
        tl_ws_size = bytes;
    }
    return tl_ws;
}

int ops_cpu_amx_gemm(int ta, int tb, int M, int N, int K, const uint16_t *A, int lda,
                     const uint16_t *B, int ldb, int acc, int c16, void *C, int ldc) {
    if (M <= 0 || N <= 0 || K <= 0 || (c16 && acc) || !ops_cpu_amx_usable()) return -1;
    if (c16 && K > 8192) return -1; /* one K block for bf16 results: a model dimension */
    const int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
    const blocking bl = blocking_for(K, c16);
    /* per thread, in u32s: B's group, A's group */
    const size_t bn = (size_t)bl.ng * bl.kbp / 2, per = bn + (size_t)bl.mg * bl.kbp / 2;
    const int split_n = N >= M; /* the larger dimension goes to the threads, in 32s */
    const int blocks = ((split_n ? N : M) + 31) / 32;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        const int t = omp_get_thread_num(), nth = omp_get_num_threads();
        const int b0 = (int)((long)blocks * t / nth), b1 = (int)((long)blocks * (t + 1) / nth);
        if (b1 > b0) {
            uint32_t *bp = ws_get(sizeof(uint32_t) * per);
            uint16_t *ap = (uint16_t *)(bp + bn);
            if (split_n)
                amx_part(ta, tb, M, N, K, A, lda, B, ldb, acc, c16, C, ldc, 0, M, b0 * 32,
                         b1 * 32 < N ? b1 * 32 : N, bl, bp, ap);
            else
                amx_part(ta, tb, M, N, K, A, lda, B, ldb, acc, c16, C, ldc, b0 * 32,
                         b1 * 32 < M ? b1 * 32 : M, 0, N, bl, bp, ap);
        }
    }
    return 0;
}
