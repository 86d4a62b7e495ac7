/* Default CPU implementations of the ops (internal to the ops module; others use ops.h).
 * Signatures are those of the ops_*_fn types in ops.h. */
#ifndef TITAN_OPS_CPU_H
#define TITAN_OPS_CPU_H

#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"

#ifdef __AVX512F__ /* the x86-64-v4 kernel copies: ops_cpu_bf16_bits16 */
#include <immintrin.h>
#endif

/* A kernel's scratch: 64-byte aligned, NOT zeroed (base_alloc's serial memset would cost as
 * much as the kernel's first pass over it), freed with free(). The op signatures return void,
 * so an allocation failure cannot be reported: it is logged (naming what) and fatal. */
static inline void *ops_cpu_alloc(const char *what, size_t bytes) {
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64 + 64 * (bytes == 0));
    if (!p) {
        base_log(BASE_LOG_ERROR, "%s: out of memory allocating %zu bytes", what, bytes);
        abort();
    }
    return p;
}

/* A kernel's large scratch kept between calls (scratch.c): ops_cpu_alloc's contract (64-byte
 * aligned, not zeroed, fatal when out of memory), from a few process-wide buffers that stay
 * allocated, so a call does not fault in and zero fresh pages; returned with
 * ops_cpu_scratch_give (never free). For buffers of MBs a call; thread-safe. */
void *ops_cpu_scratch_take(const char *what, size_t bytes);
/* The same, NULL when out of memory (for a caller with a fallback: a bf16 hold). */
void *ops_cpu_scratch_try(size_t bytes);
void ops_cpu_scratch_give(void *p);

/* Row-major SGEMM, C[M,N] = alpha * op(A) @ op(B) + beta * C (see gemm.c for the library
 * choice). ta / tb: 1 = transposed. */
void ops_cpu_sgemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                   const float *B, int ldb, float beta, float *C, int ldc);

/* C[M,N] (+ C when acc) = op(A) @ op(B) for one task of a parallel region (attention's
 * tiles): runs on the calling thread. oneDNN's sgemm where built in: OpenBLAS's OpenMP build,
 * called from the threads of a parallel region, spent ~40% of attention_gemm's time in
 * sched_yield (perf; 2 threads, bench shape) and ran it 1.3-1.9x slower. */
void ops_cpu_sgemm_task(int ta, int tb, int M, int N, int K, const float *A, int lda,
                        const float *B, int ldb, int acc, float *C, int ldc);

/* The GEMM of the ops that have a bf16 path: prec OPS_PREC_F32 is ops_cpu_sgemm; BF16 rounds
 * both operands to bf16 (or reads their weight mirror) and accumulates in fp32 (bf16.c). */
void ops_cpu_gemm(ops_prec prec, int ta, int tb, int M, int N, int K, float alpha, const float *A,
                  int lda, const float *B, int ldb, float beta, float *C, int ldc);
/* C[M,N] (+ C when acc) = op(A) @ op(B) on operands already in the bf16 engine's storage
 * (ops_bf16_mirror_bytes per element, written by ops_bf16_mirror_convert: bf16 for onednn,
 * bf16-rounded fp32 for emulated), with fp32 accumulation: no conversion per call. Callable
 * from inside an OpenMP parallel region, where it runs on the calling thread (attention's
 * tiles, attention_gemm.c). */
void ops_cpu_gemm16(int ta, int tb, int M, int N, int K, const void *A, int lda, const void *B,
                    int ldb, int acc, float *C, int ldc);
/* C[M,N] = bf16(op(A) @ op(B)) for bf16 bits A, B (on either engine): fp32 accumulation, each
 * result rounded once to the nearest bf16 (oneDNN's bf16 destination; autocast's bf16 matmul
 * output). lmhead_ce's logits. Callable like ops_cpu_gemm16. */
void ops_cpu_gemm16_bf16out(int ta, int tb, int M, int N, int K, const uint16_t *A, int lda,
                            const uint16_t *B, int ldb, uint16_t *C, int ldc);
/* f rounded to the nearest bf16 (ties to even; NaN stays a quiet NaN): its bits. */
static inline uint16_t ops_cpu_bf16_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest, ties to even */
    return (uint16_t)(u >> 16);
}

/* The fp32 value of bf16 bits h (exact). */
static inline float ops_cpu_bf16_value(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

#ifdef __AVX512F__
/* ops_cpu_bf16_bits on 16 lanes, for the AVX-512 kernels (attention_dpbf16.c, amx_gemm.c): each
 * 32-bit lane's bf16 bits in its low half, the high half zero; bitwise the scalar's (ties to
 * even, NaN quiet, denormals kept: not vcvtneps2bf16, which flushes them). */
static inline __m512i ops_cpu_bf16_bits16(__m512 x) {
    const __m512i u = _mm512_castps_si512(x);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), odd));
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(
        _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    return _mm512_srli_epi32(_mm512_mask_or_epi32(r, nan, u, _mm512_set1_epi32(0x00400000)), 16);
}
#endif

/* dst[i] = src[i] rounded to the nearest bf16, as an fp32 value (dst may equal src). */
void ops_cpu_bf16_round(float *dst, const float *src, size_t n);
/* The registered bf16 copy of p[0, n) (a weight mirror or a hold; the engine's format, at p's
 * offset), or NULL. */
const void *ops_cpu_bf16_mirror_of(const float *p, size_t n);
/* The bf16 bits of p[0, n) where a mirror holds them (the onednn engine's format), or NULL. */
const uint16_t *ops_cpu_bf16_bits_of(const float *p, size_t n);
/* The bits to write x[0, n) into, where ops_bf16_emit_begin(x, n) asked this thread's next op
 * for them (the onednn engine), NULL otherwise. take 1: the op will write them instead of x's
 * fp32 values, which it leaves as they are (ops_bf16_emit_end then converts nothing); take 0
 * only asks (an op with several outputs takes them all or none). */
uint16_t *ops_cpu_bf16_emit_take(const float *x, size_t n, int take);
/* The registered bf16 copy of the expert stack w [E, OC, C] when the copy keeps it in
 * grouped_dpbf16.c's panel layout (ops_bf16_mirror_layout_grouped), or NULL. (mirror_of
 * answers NULL for such a range: it is no row-major operand.) */
const uint16_t *ops_cpu_bf16_grouped_of(const float *w, int E, int OC, int C);

void ops_cpu_embedding_fwd(float *out, const int32_t *tokens, const float *wte, int N, int D);
void ops_cpu_embedding_bwd(float *dwte, const float *dout, const int32_t *tokens, int N, int D);

void ops_cpu_rmsnorm_fwd(float *out, float *rstd, const float *inp, const float *w, int N, int C,
                         float eps);
void ops_cpu_rmsnorm_bwd(float *dinp, float *dw, const float *dout, const float *inp,
                         const float *w, const float *rstd, int N, int C, int dx_acc, int dw_acc);
void ops_cpu_add_rmsnorm_fwd(float *h, float *out, float *rstd, const float *x, const float *y,
                             const float *w, int N, int C, float eps);

void ops_cpu_matmul_fwd(float *out, const float *inp, const float *w, int N, int C, int OC);
void ops_cpu_matmul_bwd(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                        int N, int C, int OC, int dx_acc, int dw_acc);
/* "bf16": the same products with bf16 operands (ops_cpu_gemm's bf16 path). */
void ops_cpu_matmul_bf16_fwd(float *out, const float *inp, const float *w, int N, int C, int OC);
void ops_cpu_matmul_bf16_bwd(float *dinp, float *dw, const float *dout, const float *inp,
                             const float *w, int N, int C, int OC, int dx_acc, int dw_acc);

void ops_cpu_rope_fwd(float *out, const float *inp, const float *cos, const float *sin, int B,
                      int T, int nh, int hd);
void ops_cpu_rope_bwd(float *dinp, const float *dout, const float *cos, const float *sin, int B,
                      int T, int nh, int hd);

/* Tiled causal attention with online softmax (flash-attention style). */
void ops_cpu_attention_fwd(float *out, float *lse, const float *q, const float *k, const float *v,
                           int B, int T, int H, int G, int hd);
void ops_cpu_attention_bwd(float *dq, float *dk, float *dv, const float *dout, const float *out,
                           const float *lse, const float *q, const float *k, const float *v, int B,
                           int T, int H, int G, int hd, int dx_acc);

/* Attention of new queries over a KV cache (inference; attention_kv.c). */
void ops_cpu_attention_kv(float *out, const float *q, const float *k, const float *v, int T,
                          int pos0, int H, int G, int hd);
/* The one kernel of both precisions (ISA-dispatched): OPS_PREC_BF16 rounds k and v to bf16 as it
 * reads them and the probabilities before P.V (q is the caller's to round). */
void ops_cpu_attention_kv_prec(float *out, const float *q, const float *k, const float *v, int T,
                               int pos0, int H, int G, int hd, ops_prec prec);

void ops_cpu_swiglu_fwd(float *out, const float *gate, const float *up, int N, int F);
void ops_cpu_swiglu_bwd(float *dgate, float *dup, const float *dout, const float *gate,
                        const float *up, int N, int F, int dx_acc);
/* The one SwiGLU loop of both (swiglu.c), in pairs: gate and up read as bf16 bits where gate16 and
 * up16 are both not NULL, else both fp32; the outputs (bwd: dgate and dup, both 16-bit pointers
 * not NULL) written as bf16 bits, never added to, else both fp32 (a lone 16-bit pointer is
 * ignored). Each value the fp32 result's, rounded as ops_bf16_from_f32 rounds where stored as
 * bf16. */
void ops_cpu_swiglu16_fwd(float *out, uint16_t *out16, const float *gate, const uint16_t *gate16,
                          const float *up, const uint16_t *up16, int N, int F);
void ops_cpu_swiglu16_bwd(float *dgate, uint16_t *dgate16, float *dup, uint16_t *dup16,
                          const float *dout, const float *gate, const uint16_t *gate16,
                          const float *up, const uint16_t *up16, int N, int F, int dx_acc);
/* "bf16" (swiglu_bf16.c): gate and up read from their bf16 mirrors where both are held (a caller
 * holding one alone keeps both fp32 values in place), out / dgate and dup written as bf16
 * mirrors where asked for (ops_bf16_emit_begin; dgate and dup both or neither), otherwise the
 * default. */
void ops_cpu_swiglu_bf16_fwd(float *out, const float *gate, const float *up, int N, int F);
void ops_cpu_swiglu_bf16_bwd(float *dgate, float *dup, const float *dout, const float *gate,
                             const float *up, int N, int F, int dx_acc);

double ops_cpu_lmhead_ce(float *dx, float *dw, const float *x, const float *w,
                         const int32_t *targets, int N, int D, int V, float grad_scale,
                         float *scratch, int chunk, int64_t *n_valid, const ops_vocab_shard *vs,
                         int dw_acc);
/* "bf16": the logits GEMM and both gradient GEMMs on bf16 operands (the logit gradient rounded
 * to bf16 as autocast's backward does), fp32 log-sum-exp and loss. */
double ops_cpu_lmhead_ce_bf16(float *dx, float *dw, const float *x, const float *w,
                              const int32_t *targets, int N, int D, int V, float grad_scale,
                              float *scratch, int chunk, int64_t *n_valid,
                              const ops_vocab_shard *vs, int dw_acc);
/* The one lm_head + CE of both precisions (the ISA-dispatched kernel, lmhead_ce.c). */
double ops_cpu_lmhead_ce_prec(float *dx, float *dw, const float *x, const float *w,
                              const int32_t *targets, int N, int D, int V, float grad_scale,
                              float *scratch, int chunk, int64_t *n_valid,
                              const ops_vocab_shard *vs, int dw_acc, ops_prec prec);

/* Attention as GEMM calls (attention_gemm.c): "gemm" on the fp32 SGEMM, "bf16" on the bf16
 * engine (q, k, v, dout, P and dS as bf16 operands; softmax, lse and sums fp32). */
void ops_cpu_attention_gemm_fwd(float *out, float *lse, const float *q, const float *k,
                                const float *v, int B, int T, int H, int G, int hd);
void ops_cpu_attention_gemm_bwd(float *dq, float *dk, float *dv, const float *dout,
                                const float *out, const float *lse, const float *q, const float *k,
                                const float *v, int B, int T, int H, int G, int hd, int dx_acc);
void ops_cpu_attention_bf16_fwd(float *out, float *lse, const float *q, const float *k,
                                const float *v, int B, int T, int H, int G, int hd);
void ops_cpu_attention_bf16_bwd(float *dq, float *dk, float *dv, const float *dout,
                                const float *out, const float *lse, const float *q, const float *k,
                                const float *v, int B, int T, int H, int G, int hd, int dx_acc);
/* attention/bf16's forward on AVX512_BF16 instructions (attention_dpbf16.c, built for x86-64
 * only): call only when ops_cpu_attention_dpbf16_usable(). ws: ops_cpu_attention_dpbf16_ws
 * bytes (64-byte aligned; sized for omp_get_max_threads() at the call) for the operands packed
 * per call and each thread's scratch. */
size_t ops_cpu_attention_dpbf16_ws(int B, int T, int H, int G, int hd);
void ops_cpu_attention_dpbf16_fwd(float *out, float *lse, const float *q, const float *k,
                                  const float *v, int B, int T, int H, int G, int hd, void *ws);
/* grouped_mm/bf16 on AVX512_BF16 instructions (grouped_dpbf16.c, built for x86-64 only): call
 * only when ops_cpu_grouped_dpbf16_usable(). Same arguments and semantics as
 * ops_cpu_grouped_mm_bf16_fwd / _bwd, except that with dw_acc 0 the backward writes the dW of
 * the experts with rows only (the caller, ops_cpu_grouped_mm_bf16_bwd, zeroes the others'). */
void ops_cpu_grouped_dpbf16_fwd(float *out, const float *inp, const float *w, const int32_t *offs,
                                int E, int C, int OC);
void ops_cpu_grouped_dpbf16_bwd(float *dinp, float *dw, const float *dout, const float *inp,
                                const float *w, const int32_t *offs, int E, int C, int OC,
                                int dx_acc, int dw_acc);
/* Elements [i0, i0 + n) (row-major order) of an expert stack [E, OC, C] (OC even, C a multiple
 * of 64) rounded to bf16 into P in the panel layout: expert e's element (r, c) at
 * e OC C + (c / 64) 64 OC + (r / 2) 128 + 2 (c % 64) + r % 2, i.e. for each 64 columns of C the
 * stack's rows by pairs, a pair's two elements of a column side by side: the B operand of the
 * backward's dx = dy W_e as the micro-kernel reads it. Elements outside the range untouched;
 * parallel over rows for a large range outside a parallel region. */
void ops_cpu_grouped_dpbf16_store(uint16_t *P, int OC, int C, size_t i0, const float *src,
                                  size_t n);
/* A 0/1 switch in the environment (dispatch.c): 1 or 0 as set, -1 unset or empty, -2 any
 * other value, warned about here ("VAR=x: not 0 or 1; " then keeps: what stays as it is).
 * TITAN_AMX_GEMM, TITAN_AMX_ATTENTION, TITAN_AMX_LMHEAD_CE, TITAN_GROUPED_DPBF16,
 * TITAN_GROUPED_AMX, TITAN_GROUPED_LAYOUT. */
int ops_cpu_env_switch(const char *var, const char *keeps);
/* 1 when grouped_mm/bf16 runs on grouped_dpbf16.c: where attention's forward runs on
 * attention_dpbf16.c (below), or with AMX where ops_cpu_bf16_grouped_amx() (then its products
 * on tiles where their shapes allow); unless TITAN_GROUPED_DPBF16=0 (then oneDNN's per-expert
 * products). ops_cpu_bf16_grouped_amx (bf16.c): 1 where TITAN_GROUPED_AMX=1 (opt-in: measured
 * slower there than the per-expert products), the onednn engine and titan's AMX GEMM on. Decided
 * once. */
int ops_cpu_grouped_dpbf16_usable(void);
int ops_cpu_bf16_grouped_amx(void);
/* 1 when attention/bf16's forward runs on attention_dpbf16.c (dispatch.c): built in, the CPU
 * has AVX512_BF16 and no AMX (with AMX oneDNN's tiles keep it: unmeasured there), the AVX-512
 * kernel copy is the one chosen (TITAN_ISA=default turns it off) and the bf16 engine is onednn
 * (TITAN_BF16_ENGINE=emulated turns it off). Decided once per process. */
int ops_cpu_attention_dpbf16_usable(void);
/* titan's own bf16 GEMM on AMX tiles (amx_gemm.c, built for x86-64 with a compiler that has
 * AMX): C[M,N] (+= with acc) = op(A) op(B), bf16 A and B (ta / tb: stored transposed; leading
 * dimensions in elements), fp32 sums, fp32 C or (c16, no acc) bf16 C rounded to nearest even.
 * Runs on omp_get_max_threads() threads, or on the calling thread inside a parallel region;
 * each C element one fixed-order sum (bitwise the same for any thread count). Returns 0, or -1
 * without touching C (not usable here, a bf16 C with acc, or a bf16 C with K over 8192); out
 * of memory aborts, as in the other void ops. ops_cpu_amx_usable: 1 when the CPU lists
 * amx_bf16, amx_tile, avx512_bf16, avx512bw and avx512vl and Linux granted the tile state
 * (arch_prctl ARCH_REQ_XCOMP_PERM); decided once per process. ops_cpu_amx_tiles_configure:
 * this thread's 8 tiles as the kernel uses them, 16 rows x 64 bytes each (only in builds with
 * the AMX kernel; call only after ops_cpu_amx_usable() said yes). */
int ops_cpu_amx_usable(void);
/* AMX's tile instructions in C (amx_emulate.c), which amx_gemm.c calls in place of the
 * instructions in a build configured with -DTITAN_AMX_EMULATE=ON (for tests on CPUs without
 * AMX; there ops_cpu_amx_usable needs AVX512_BF16, BW and VL, and AMX's flags in /proc/cpuinfo
 * as scripts/cpu_sim.sh amx adds them, but no tile state from Linux): the Intel SDM's semantics,
 * per thread; a misuse the CPU would fault on (unconfigured or mismatched tiles) is a message
 * on stderr and abort(). */
void ops_cpu_amx_emu_loadconfig(const void *config);
void ops_cpu_amx_emu_release(void);
void ops_cpu_amx_emu_loadd(int t, const void *base, long stride);
void ops_cpu_amx_emu_stored(int t, void *base, long stride);
void ops_cpu_amx_emu_zero(int t);
void ops_cpu_amx_emu_dpbf16ps(int c, int a, int b);
void ops_cpu_amx_tiles_configure(void);
/* the 64-byte LDTILECFG operand ops_cpu_amx_tiles_configure loads (bench/amx_peak.c hands it
 * to the emulated tiles) */
const void *ops_cpu_amx_tiles_config(void);
int ops_cpu_amx_gemm(int ta, int tb, int M, int N, int K, const uint16_t *A, int lda,
                     const uint16_t *B, int ldb, int acc, int c16, void *C, int ldc);
/* ops_cpu_amx_gemm's product into an fp32 C (no acc) whose final sums are kept as they are stored:
 * rounded to bf16 values in place and their bits written to bits [M][ldc] (unless NULL), bit for
 * bit ops_bf16_round_store's after the product, without that pass over C (ops_bf16_keep_begin).
 * -1 where it does not run (no AMX, M < 32): the caller keeps C itself. */
int ops_cpu_amx_gemm_keep(int ta, int tb, int M, int N, int K, const uint16_t *A, int lda,
                          const uint16_t *B, int ldb, float *C, int ldc, uint16_t *bits);
/* Products on operands packed once, for a caller that reuses them (attention_gemm.c; only in
 * builds with the AMX kernel, after ops_cpu_amx_usable() said yes; single-threaded, on the
 * calling thread). ops_cpu_amx_pack: op(B) [K, N] (B stored [K][N], or tb: [N][K]; ldb in
 * elements; bf16 bits, or with f32 fp32 values rounded to bf16 as ops_cpu_bf16_bits rounds:
 * bitwise the pack of a converted copy, without the copy) into dst as the tiles read it: per 16
 * columns a block of k pairs, [Kp/2][16] 32-bit (Kp: K rounded up to 32), zero past K and N; block
 * c at dst + c * Kp * 8 (Np * Kp / 2 words in all, Np: N rounded up to 32). So the columns [n0, ..)
 * from row k0 (both multiples of 32) of a packed B are dst + n0 * Kp / 2 + k0 * 8 with the same
 * block stride Kp * 8. ops_cpu_amx_transpose: dst [cols rounded up to 32][rows rounded up to 32] =
 * A^T, A [rows][cols] (lda), zero past both. ops_cpu_amx_gemm_packed: C[M, N] (+= with acc) = A[M,
 * K] B, bf16 A (rows lda apart, 64-byte aligned rows load fastest), B packed (16-column blocks bs
 * words apart, k pairs from B's first row), fp32 C (ldc); M, N, K multiples of 32; one fixed-order
 * sum per element. */
void ops_cpu_amx_pack(uint32_t *dst, int tb, const void *B, int f32, int ldb, int K, int N);
void ops_cpu_amx_transpose(uint16_t *dst, const uint16_t *A, int lda, int rows, int cols);
/* x [T, hd] fp32 (rows ld apart) packed both ways as ops_cpu_amx_pack packs it with f32: xt =
 * X^T (K = hd, N = T), xn = X (K = T, N = hd), each x element read once; hd <= this. */
#define OPS_CPU_AMX_PACK_BOTH_HD 512
void ops_cpu_amx_pack_both(uint32_t *xt, uint32_t *xn, const float *x, int ld, int T, int hd);
void ops_cpu_amx_gemm_packed(int M, int N, int K, const uint16_t *A, int lda, const uint32_t *Bp,
                             size_t bs, int acc, float *C, int ldc);
/* C[M, N] (acc: +=) = A[M, 2 k2] B with B in dpbf16.h's panel layout (grouped_dpbf16.c's operands:
 * pairs of k, per 64 columns a panel of k2 rows of 64 words, 128 bf16 a row; panel j / 64 at B +
 * (j / 64) bp elements), bf16 A (rows lda elements apart), fp32 C (ldc); M, N multiples of 32,
 * k2 of 16; single-threaded, on the calling thread; one fixed-order sum per element. */
void ops_cpu_amx_gemm_panels(int M, int N, int k2, const uint16_t *A, size_t lda, const uint16_t *B,
                             size_t bp, float *C, size_t ldc, int acc);
/* how many ops_cpu_amx_gemm_panels calls this process made (0 in builds without the AMX
 * kernel): tests check that grouped_mm's tiles really ran */
long ops_cpu_amx_gemm_panels_calls(void);
/* attention_gemm.c's row epilogues around those products (AVX-512; n a multiple of 16):
 * softmax_rows: for each row i of s [M, n] (query r0 + i, seeing keys 0 .. r0 + i), p16 = bf16
 * of exp(s * scale - the row's maximum), the unnormalised softmax (zero past the query), lse[i]
 * the row's natural log-sum-exp and rl[i] 1 / the sum of its exponentials (fp32 sums), by which
 * the caller scales the row's P V (FlashAttention's order, as PyTorch's CPU flash attention).
 * attn_grad_scores: the backward's scores for a block of M keys and n queries whose first query is
 * qk (>= 0) positions after the first key (M, n, hd multiples of 32): S^T = kc Q^T, dP^T = vc dO^T
 * (kc, vc [M, hd] bf16 rows lda apart; qt, dot: Q^T and dO^T packed as ops_cpu_amx_pack packs
 * them, from the block's first query, 16-query blocks bs words apart), then for key i and query j
 * (both counted from the block's first), P = exp(S^T scale - lse[j]) and dS = P (dP^T - D[j])
 * scale, both bf16 into p16, ds16 [M, n] (zero where qk + j < i: the query before the key);
 * single-threaded, AMX tiles. */
void ops_cpu_amx_softmax_rows(uint16_t *p16, const float *s, int M, int n, int r0, float scale,
                              float *lse, float *rl);
void ops_cpu_amx_attn_grad_scores(uint16_t *p16, uint16_t *ds16, const uint16_t *kc,
                                  const uint16_t *vc, int lda, const uint32_t *qt,
                                  const uint32_t *dot, size_t bs, int M, int n, int hd, float scale,
                                  const float *lse, const float *D, int qk);
/* lmhead_ce/bf16 fused on AMX tiles (amx_gemm.c): *loss = the sum over tokens with a target in
 * [0, V) of lse - logit[target], logits = x16 w16^T (x16 [N, D], w16 [V, D] bf16 bits, fp32
 * sums, kept fp32); with dx: dx += G w, and with dw: dw += G^T x (dw_acc 1) or dw = G^T x (dw_acc
 * 0: dw's old values never read, the first sums written over them, bitwise what adding to zeros
 * gives), G = bf16(grad_scale * (softmax - onehot)) (zero rows for other targets). The logits
 * never go to memory: they are computed twice
 * (for the statistics and dx, then for dw), block by block in the caches. Runs on
 * omp_get_max_threads() threads (one inside a parallel region); bitwise the same for any thread
 * count. Returns 0, or -1 without touching anything (not usable here, D not a multiple of 32, dw
 * without dx, or out of memory); out of memory in a thread's workspace aborts. Only in builds
 * with the AMX kernel; ops_cpu_bf16_fused_lmhead_ce says whether to call it. */
int ops_cpu_amx_lmhead_ce(float *dx, float *dw, int dw_acc, const uint16_t *x16,
                          const uint16_t *w16, const int32_t *targets, int N, int D, int V,
                          float grad_scale, double *loss);
/* 1 when attention/bf16 runs its products on AMX tiles (ops_cpu_amx_gemm_packed) where its
 * shapes allow (T and head_dim multiples of 32): the onednn engine, the dense layouts
 * (ops_cpu_bf16_amx_layouts' OPS_CPU_AMX_ATTENTION), titan's AMX kernels on (TITAN_AMX_GEMM not
 * 0, ops_cpu_amx_usable(), their self-check passed) and TITAN_AMX_ATTENTION not 0. Decided once
 * per process. */
int ops_cpu_bf16_amx_attention(void);
/* 1 when lmhead_ce/bf16 runs fused on AMX tiles (ops_cpu_amx_lmhead_ce): the onednn engine, titan's
 * AMX kernels on (TITAN_AMX_GEMM not 0, ops_cpu_amx_usable(), their self-check passed) and
 * TITAN_AMX_LMHEAD_CE not 0. Decided once per process. */
int ops_cpu_bf16_fused_lmhead_ce(void);
/* 1 when the first processor's "flags" line in /proc/cpuinfo lists flag (a whole word), e.g.
 * "avx512_bf16" (bf16.c). */
int ops_cpu_has_flag(const char *flag);
/* The bf16 ops on the onednn engine that use the layouts measured faster with AMX, a mask of
 * OPS_CPU_AMX_* (attention's dense head-major operands: 0.6B x 2048 a layer forward 40.5 ->
 * 33.6 ms, backward 115 -> 62.5; lmhead_ce's transposed chunk; bench/RESULTS.md "Session 19").
 * TITAN_AMX_LAYOUTS unset: attention's on a CPU with bf16 units (AMX-BF16, or AVX512_BF16:
 * measured faster there too, session 25), none elsewhere; 0: none; 1: both;
 * or a comma list of their names (attention, lmhead_ce), on any CPU (kernels_conformance_amx_
 * layouts_* test each everywhere). lmhead_ce's stays off by default: docs/kernels.md says why.
 * Another value is warned about and leaves both off. Decided once. */
enum { OPS_CPU_AMX_ATTENTION = 1, OPS_CPU_AMX_LMHEAD_CE = 2 };
int ops_cpu_bf16_amx_layouts(void);

/* "bf16" attention over a KV cache: q, the cache rows and the probabilities P rounded to bf16
 * (as training's bf16 attention), fp32 softmax and accumulation. */
void ops_cpu_attention_kv_bf16(float *out, const float *q, const float *k, const float *v, int T,
                               int pos0, int H, int G, int hd);

/* Grouped expert GEMM (grouped_mm.c). "default": one multi-threaded GEMM per expert group.
 * "grouped": one parallel pass over tiles of all groups (expert x row block x column block,
 * each tile a single-threaded GEMM sized for the L2 cache), so both cores stay busy when
 * groups are small or empty; bitwise independent of the thread count. */
void ops_cpu_grouped_mm_fwd(float *out, const float *inp, const float *w, const int32_t *offs,
                            int E, int C, int OC);
void ops_cpu_grouped_mm_bwd(float *dinp, float *dw, const float *dout, const float *inp,
                            const float *w, const int32_t *offs, int E, int C, int OC, int dx_acc,
                            int dw_acc);
void ops_cpu_grouped_mm_bf16_fwd(float *out, const float *inp, const float *w, const int32_t *offs,
                                 int E, int C, int OC);
void ops_cpu_grouped_mm_bf16_bwd(float *dinp, float *dw, const float *dout, const float *inp,
                                 const float *w, const int32_t *offs, int E, int C, int OC,
                                 int dx_acc, int dw_acc);
void ops_cpu_grouped_mm_tiled_fwd(float *out, const float *inp, const float *w, const int32_t *offs,
                                  int E, int C, int OC);
void ops_cpu_grouped_mm_tiled_bwd(float *dinp, float *dw, const float *dout, const float *inp,
                                  const float *w, const int32_t *offs, int E, int C, int OC,
                                  int dx_acc, int dw_acc);

void ops_cpu_adamw(float *p, void *m, void *v, const float *g, float gscale, size_t n, double lr,
                   double beta1, double beta2, double eps, double wd, double l2, int mv_bf16,
                   int64_t t);

/* Registers the CPU implementations through reg (table.c): the defaults of every op and the
 * alternatives ("grouped", "unfused"), then ops_cpu_register_reference's. */
void ops_cpu_register(int (*reg)(const ops_impl *impl, base_err *err));
/* Registers "reference" (reference.c), the textbook formula of every op, the baseline the
 * conformance tests check defaults against. */
void ops_cpu_register_reference(int (*reg)(const ops_impl *impl, base_err *err));

#endif
