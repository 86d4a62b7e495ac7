/* ops: the kernel registry and the ops of the Qwen3 model.
 *
 * Every op has a default implementation (forward + hand-written backward) and may have
 * more. Implementations register by name with a constraint check. At model build time
 * ops_resolve() picks one implementation per op for a layer path
 * ("layers.3.attention") and fills an ops_table of typed function pointers: the hot path
 * calls through that table, never through a lookup.
 *
 * Conventions (llm.c style): outputs first, then saved activations, inputs, weights,
 * sizes. Row-major. Backward functions ACCUMULATE (+=) into every gradient they write,
 * input gradients included, so callers zero what must start from zero.
 * Every buffer at the ops interface is fp32 (a plugin sees fp32 too). An implementation has a
 * compute precision (ops_prec): an OPS_PREC_BF16 one rounds its GEMM operands to bf16 and
 * accumulates in fp32 (the bf16 mixed-precision recipe; see "bf16" below). Token-major
 * activations: [N, C] with N = B*T tokens. */
#ifndef TITAN_OPS_H
#define TITAN_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

#define OPS_IGNORE_INDEX (-100)

/* ---- op signatures ----------------------------------------------------------------
 * The ops, their contracts and their signatures are listed once, in oplist.h. */

/* lmhead_ce's vocabulary shard (loss-parallel; see lmhead_ce in oplist.h). */
typedef struct {
    int v0, v_total;
    /* in place over the ranks holding the other shards; every rank calls it in the same
     * order: x[n] = max (max = 1) or sum (max = 0) of the ranks' x[n] */
    void (*allreduce)(void *ctx, double *x, int n, int max);
    void *ctx;
} ops_vocab_shard;

#include "oplist.h"

/* The adamw op's calls on at most this many elements run on the calling thread (oplist.h): the
 * optimizer's blocks are this size, inside its own parallel loop. */
#define OPS_ADAMW_SERIAL_MAX 65536

/* ops_name_fwd_fn / ops_name_bwd_fn for every FB op, ops_name_fn for every F op. */
#define OPS_TYPEDEF_FB(K, name, sub, plg, fp, fa, bp, ba)                                          \
    typedef void(*ops_##name##_fwd_fn) fp;                                                         \
    typedef void(*ops_##name##_bwd_fn) bp;
#define OPS_TYPEDEF_F(K, name, sub, plg, ret, p, a) typedef ret(*ops_##name##_fn) p;
OPS_LIST(OPS_TYPEDEF_FB, OPS_TYPEDEF_F)
#undef OPS_TYPEDEF_FB
#undef OPS_TYPEDEF_F

/* ---- registry --------------------------------------------------------------------- */

#define OPS_ENUM_(K, ...) OPS_##K,
typedef enum { OPS_LIST(OPS_ENUM_, OPS_ENUM_) OPS_COUNT } ops_kind;
#undef OPS_ENUM_

/* Compute precision of an implementation and of a model (training.mixed_precision_param).
 * OPS_PREC_BF16: GEMM operands (weights and activations, including attention's Q.K^T and P.V
 * inputs and the lm_head's) are rounded to bf16 (round to nearest even), products accumulate
 * in fp32; everything else (norms' statistics, softmax, the loss, gradients' accumulation,
 * AdamW) stays fp32. */
typedef enum { OPS_PREC_F32 = 0, OPS_PREC_BF16 = 1 } ops_prec;

/* What a constraint check may look at: the shapes of the model and job, as one rank holds them
 * (tensor parallelism: its heads, FFN columns and vocabulary rows), and how that rank splits
 * the calls further (sp, ep, ce_vocab). A check itself never sees the split: it sees the shapes
 * of the calls, ops_ctx_sites(ctx, its op). */
typedef struct {
    int batch, seq_len, dim, n_heads, n_kv_heads, head_dim, ffn_dim, vocab;
    int n_experts, top_k, moe_ffn_dim; /* 0 for a dense model */
    /* the model's precision: an op's default under OPS_PREC_BF16 is its first registered
     * implementation of that precision, else its fp32 default (norms, RoPE, SwiGLU, ...) */
    ops_prec prec;
    /* This rank's split of the calls; 0 or 1: none. sp: the sequence-parallel degree (tensor
     * parallelism): the norms on the residual stream, between the tensor-parallel regions, run
     * on batch*seq_len/sp of the microbatch's tokens. ep: the expert-parallel degree: grouped_mm
     * runs on n_experts/ep experts (the router's matmul on all n_experts). ce_vocab: the
     * vocabulary lmhead_ce runs on when it is not vocab (0: vocab; tensor parallelism with loss
     * parallel off gathers the whole one). */
    int sp, ep, ce_vocab;
    /* document masking (block_causal): attention runs once per document of a window, batch 1
     * and 1 to seq_len tokens */
    int docs;
} ops_ctx;

/* The most shapes one op's calls take on a rank (ops_ctx_sites), and the size of its notes. */
#define OPS_MAX_SITES 2
#define OPS_SITE_WHY 128

/* The shapes this rank's calls of op k get, from the model's ctx: out[0 .. n-1], n returned
 * (1 .. OPS_MAX_SITES), each with sp, ep, ce_vocab 0 (no further split); an implementation
 * serves the model when its check accepts every one. With sp > 1, add_rmsnorm (the FFN norm,
 * fused with the residual add) runs on the residual stream's shard, batch*seq_len/sp tokens:
 * batch 1, seq_len = that many (the shard is a run of the flattened [batch*seq_len] tokens, which
 * may cross sequence boundaries); rmsnorm runs both there (the attention and final norms, dim
 * wide) and inside the attention region on every token (the per-head q and k norms, this rank's
 * heads): both shapes. In an MoE model (n_experts > 0) swiglu runs only between the expert
 * GEMMs: on the routed rows, batch 1 x batch*seq_len*top_k, moe_ffn_dim wide (under expert
 * parallelism a call's row count is what routing sends this rank's experts, which no shape
 * states). With ep > 1 grouped_mm sees n_experts/ep experts; lmhead_ce sees ce_vocab when set.
 * Every other op, in the tensor-parallel regions (the all-gathered tokens, this rank's heads and
 * columns) or outside any split (the embedding: every token against this rank's vocabulary rows),
 * sees ctx itself, except attention with docs: batch 1, seq_len 1 and batch 1, seq_len (its
 * shortest and longest document). why (may be NULL) gets for each out[i], for an error, the split
 * that made it differ from ctx with its numbers, "" where it does not. */
int ops_ctx_sites(const ops_ctx *ctx, ops_kind k, ops_ctx out[OPS_MAX_SITES],
                  char why[OPS_MAX_SITES][OPS_SITE_WHY]);

typedef void (*ops_fn)(void); /* any op function, cast to its typed signature on use */

typedef struct {
    ops_kind op;
    const char *name;        /* "default", "flash", ... */
    const char *constraints; /* human-readable, e.g. "seq_len % 64 == 0"; "" when none */
    /* Returns 0 when the implementation can serve ctx, else fills err with the rule broken. */
    int (*check)(const ops_ctx *ctx, base_err *err);
    ops_fn fwd, bwd; /* bwd NULL for ops without one (adamw) */
    ops_prec prec;   /* compute precision (0: fp32) */
} ops_impl;

/* The resolved implementations for one layer path. */
typedef struct {
    const ops_impl *impl[OPS_COUNT];
    /* the typed entry points, named as in oplist.h: name_fwd, name_bwd or name */
#define OPS_FIELD_FB(K, name, ...)                                                                 \
    ops_##name##_fwd_fn name##_fwd;                                                                \
    ops_##name##_bwd_fn name##_bwd;
#define OPS_FIELD_F(K, name, ...) ops_##name##_fn name;
    OPS_LIST(OPS_FIELD_FB, OPS_FIELD_F)
#undef OPS_FIELD_FB
#undef OPS_FIELD_F
    int plugin_slot[OPS_COUNT]; /* 1 + the plugin slot bound for an op; 0 = none */
} ops_table;

/* An override "op name or layer glob" -> implementation (filled from [kernels] later). */
typedef struct {
    const char *pattern; /* op name ("attention") or path glob ("layers.*.attention") */
    const char *impl;
} ops_override;

const char *ops_kind_name(ops_kind k);
/* Registers an implementation; the first one registered for an op is its default. */
int ops_register(const ops_impl *impl, base_err *err);
/* Registers the built-in CPU implementations (idempotent). */
void ops_register_builtin(void);
const ops_impl *ops_find(ops_kind op, const char *name);
/* All registered implementations, in registration order. */
int ops_list(const ops_impl **out, int max);

/* The compute precision of op's default implementation in a model of precision prec (what
 * ops_resolve picks without an override). */
ops_prec ops_default_prec_of(ops_kind op, ops_prec prec);

/* Resolves every op for `layer_path` (e.g. "layers.3") from defaults and overrides,
 * checks each implementation's constraints against ctx, and logs every non-default choice.
 * An override applies to an op when its pattern equals the op name or glob-matches
 * ('*', '?') "<layer_path>.<op name>"; when several apply, the last one wins. A pattern
 * without '.' or a wildcard must be an op name (typos are errors, not silent no-ops). */
int ops_resolve(ops_table *t, const char *layer_path, const ops_ctx *ctx,
                const ops_override *overrides, int n_overrides, base_err *err);

/* Every op kind as a set of bits 1u << ops_kind (ops_resolve_units' calls). */
#define OPS_CALLS_ALL ((1u << OPS_COUNT) - 1)

/* The ops whose backward receives a parameter tensor, as bits 1u << ops_kind: their backward
 * signature (oplist.h) passes the weight w (rmsnorm, add_rmsnorm, matmul, grouped_mm; lmhead_ce,
 * one function, reads w for dx). embedding's backward receives none (dwte += the rows of dout
 * scattered by token id: the table is never read); rope, attention and swiglu have no
 * parameters; adamw and attention_kv no backward. Every implementation of an op (built-in,
 * override, plugin) gets only what the signature passes, so a unit whose backward calls none
 * of these never needs its parameters there: FSDP does not gather them again for it
 * (model_unit_bwd_reads_params). test_ops checks this set against the signatures. */
#define OPS_BWD_READS_WEIGHTS                                                                      \
    ((1u << OPS_RMSNORM) | (1u << OPS_ADD_RMSNORM) | (1u << OPS_MATMUL) | (1u << OPS_GROUPED_MM) | \
     (1u << OPS_LMHEAD_CE))

/* Resolves the tables of every unit of a model (paths[i] -> tables[i]) with ops_resolve's
 * rules, for the ops each unit calls: calls[i] has bit 1u << kind for each op unit i calls
 * (NULL: every op). An op a unit does not call keeps its default there, and an override
 * applies (is checked against its constraints, logged, bound) only where the op is called.
 * Fails when an override matches no called op of any unit (a mistyped glob such as
 * "layers.*.attention.rop" or a range past the last layer), naming the override; a plain op
 * name no unit calls (grouped_mm on a dense model) is a warning and ignored. Every op
 * matches "<unit>.<op>", and some also a module sub-path (rope: "<unit>.attention.rope",
 * swiglu: "<unit>.feed_forward.swiglu", grouped_mm: "<unit>.moe.grouped_mm"). Globs: '*' any run,
 * '?' one character, and a "N-M" run of digits matches an integer in [N, M]
 * ("layers.0-3.attention"). On failure the tables already resolved are released. */
int ops_resolve_units(ops_table *tables, const char *const *paths, const uint32_t *calls, int n,
                      const ops_ctx *ctx, const ops_override *overrides, int n_overrides,
                      base_err *err);
/* The constraints of the implementations t holds for the ops in calls (bits 1u << ops_kind) on
 * another shape than the one t was resolved for (generation's batch 1 and few tokens):
 * 0, or -1 with "kernel OP/NAME at PATH: rule" in err. */
int ops_check_table(const ops_table *t, const char *path, uint32_t calls, const ops_ctx *ctx,
                    base_err *err);
/* Releases what resolving bound to a table (plugin slots and their saved state). */
void ops_release(ops_table *t);
/* What resolution chose other than the defaults of precision prec, over n resolved tables
 * with their unit paths, into buf: "op=impl at UNITS[ (plugin PATH)]" joined by "; ", one
 * item per (op, implementation) in op order, UNITS its units in order with runs of
 * consecutive layers written "layers.N-M" ("rope=rope_bhsd at layers.1-3 (plugin
 * ./librope_bhsd.so); attention=reference at layers.0, head"); "" when every unit runs the
 * defaults. Cut with "..." at size. Returns the number of items. For run headers, reports
 * and errors: which kernel ran where. */
int ops_choices(const ops_table *t, const char *const *paths, int n, ops_prec prec, char *buf,
                size_t size);

/* Loads a kernel plugin (include/titan/kernel_abi.h): dlopen, ABI version check, then its
 * init registers its implementations. Fails with a message naming the path for a missing
 * file, a missing symbol, another ABI version, an invalid descriptor or a failed init;
 * nothing of a failed plugin stays registered. Loading the same path twice is a no-op. */
int ops_plugin_load(const char *path, base_err *err);
/* The plugin path an implementation came from, or NULL for a built-in. A plugin
 * implementation is called only through a resolved ops_table (its fwd/bwd in the registry
 * are placeholders): the table's entries are per-layer trampolines that carry the layer's
 * saved state and convert layouts. */
const char *ops_impl_origin(const ops_impl *impl);

/* The instruction set the built-in CPU kernels run with in this process, chosen at run time
 * (ops/cpu/dispatch.c): "avx512 (x86-64-v4)" or "default (<build baseline>)". The
 * environment variable TITAN_ISA=default forces the baseline. */
const char *ops_cpu_isa(void);

/* ---- zeroing (ops/cpu/zero.c) ---------------------------------------------------------- */
/* x[0, n) = 0 on the pool's threads (a single thread's stores do not reach the memory
 * bandwidth of a many-core socket): the backward zeroes ~170 MB of scratch per 0.6B block at
 * 2048 tokens, since ops accumulate into their gradients. */
void ops_zero(float *x, size_t n);

/* ---- the one SGEMM (ops/cpu/gemm.c) ---------------------------------------------------- */
/* Row-major C[M,N] = alpha * op(A) @ op(B) + beta * C (op(X) = X or X^T as ta / tb say), on
 * the library the ops' fp32 products use: for code outside the ops (the Muon step's
 * Newton-Schulz products). */
void ops_sgemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
               const float *B, int ldb, float beta, float *C, int ldc);

/* ---- bf16 (ops/cpu/bf16.c) -----------------------------------------------------------
 * bf16 values are uint16_t bit patterns (the top half of an fp32). */
/* dst[i] = bf16(src[i]), round to nearest even, NaN kept quiet (torch's rounding). */
void ops_bf16_from_f32(uint16_t *dst, const float *src, size_t n);
void ops_bf16_to_f32(float *dst, const uint16_t *src, size_t n);
/* x[i] = bf16(x[i]) in place (as an fp32 value), and dst[i] = its bits when dst is not NULL:
 * one pass for an activation that is used rounded now and stored for backward. */
void ops_bf16_round_store(float *x, uint16_t *dst, size_t n);
/* ops_bf16_round_store(x, dst, n) fused into the op that writes x: begin before that op, end
 * after it. Where the op writes x[0, n) whole as one fp32 product of titan's AMX GEMM (the bf16
 * matmul's forward), the product rounds its sums and stores their bits as it stores them (the
 * same bits, without a pass over x in memory); end does the pass itself otherwise. One keep
 * pending per thread, begun and ended on the thread that runs the op. */
void ops_bf16_keep_begin(float *x, uint16_t *dst, size_t n);
void ops_bf16_keep_end(float *x);
/* Whether the CPU has native bf16 dot products (AMX-BF16 or AVX512_BF16). */
int ops_bf16_native(void);
/* The engine the bf16 GEMMs run on in this process: "onednn" (oneDNN's matmul primitive,
 * which dispatches to AMX / AVX512_BF16 itself) where the CPU has bf16 units, else
 * "emulated" (fp32 GEMM on operands rounded to bf16: the same products, exact in fp32, and
 * fp32 accumulation, at fp32 speed plus the conversions). TITAN_BF16_ENGINE=onednn|emulated
 * forces one (oneDNN runs its reference kernel on CPUs without bf16 units: slow, for tests). */
const char *ops_bf16_engine(void);
/* The AMX layouts the bf16 ops use on this engine (TITAN_AMX_LAYOUTS; docs/kernels.md):
 * "attention", "lmhead_ce", "attention, lmhead_ce", or "none" (always "none" when emulated). */
const char *ops_bf16_layouts(void);
/* The bf16 products titan's own AMX GEMM runs on this engine instead of oneDNN's
 * (TITAN_AMX_GEMM; docs/kernels.md): "fp32-result products" (the default where the CPU has
 * AMX-BF16: those outside parallel regions whose result is fp32), "all products", or "none". */
const char *ops_bf16_amx_gemm(void);
/* How lmhead_ce/bf16 runs without loss parallelism: "fused on AMX tiles" (the logits never in
 * memory; ops/cpu/amx_gemm.c) or "chunked logits" (the chunk's logits through memory). */
const char *ops_bf16_lmhead_ce(void);
/* where attention/bf16's products run: "AMX tiles" (titan's, ops_cpu_bf16_amx_attention),
 * "AVX512_BF16 forward, oneDNN backward" (AVX512_BF16 without AMX: titan's vdpbf16ps forward,
 * attention_dpbf16.c), "oneDNN", or "emulated" (the emulated engine's GEMMs) */
const char *ops_bf16_attention(void);
/* where grouped_mm/bf16's expert products run: "AVX512_BF16" (AVX512_BF16 without AMX: titan's
 * vdpbf16ps kernel, all experts in one pass, grouped_dpbf16.c), "oneDNN" (a call per expert and
 * product) or "emulated" */
const char *ops_bf16_grouped_mm(void);
/* Weight mirrors: fp32 [base, base + n) has an up-to-date bf16 copy at mirror (same element
 * offsets), kept by the caller (the model converts each unit once per step). A bf16 GEMM whose
 * operand lies in a mirrored range reads the copy instead of converting the operand. The
 * copy's format is the engine's: bf16 (2 bytes) for onednn, bf16-rounded fp32 (4 bytes: the
 * emulated engine then converts nothing per call) -- ops_bf16_mirror_bytes sizes it and
 * ops_bf16_mirror_convert fills it. Registering the same base again replaces its entry; at
 * most 64 ranges. */
size_t ops_bf16_mirror_bytes(size_t n);
/* The floats lmhead_ce's scratch needs for chunk rows of V logits: chunk * V, or half that
 * for a bf16 implementation on the onednn engine, which keeps its logits as bf16. */
size_t ops_lmhead_ce_scratch_floats(size_t chunk, size_t V, ops_prec prec);
/* The rows of an lmhead_ce chunk when none is configured, for N rows of V logits: about 64M
 * logits (256 MiB fp32) a chunk on a CPU with AVX-512, 144M (576 MiB) on one without, rounded
 * up to a multiple of 64 rows, at most N (bench/RESULTS.md: larger chunks make the lm_head
 * GEMMs faster and cost memory; at vocab 151936 on a Zen 4 with AVX-512, 448 rows ran 3-4%
 * faster than 256, 1024 no faster; with AVX-512 hidden, the BLAS products' AVX2 kernels ran
 * lmhead_ce 13-15% faster at 1024 rows than at 448, the bench-model step 13%, for 0.33 GiB).
 * The model's, `titan plan`'s and `titan kernels bench`'s, so all count and time the same
 * calls. ops_lmhead_ce_chunk_for: the rule for a CPU with (avx512 1) or without AVX-512F. */
int ops_lmhead_ce_chunk(long N, int V);
int ops_lmhead_ce_chunk_for(long N, int V, int avx512);
/* 1 when lmhead_ce/bf16 over the whole vocabulary (no vocabulary shard) at width D runs fused on
 * AMX tiles (ops_bf16_lmhead_ce): it needs no scratch, and may be called with chunk 0 and no
 * scratch (it then returns NaN should the fused kernel refuse the call: out of memory). */
int ops_lmhead_ce_fused(int D);
/* mirror elements [off, off + n) = src[0, n) rounded to bf16, in the engine's format. */
void ops_bf16_mirror_convert(void *mirror, size_t off, const float *src, size_t n);
int ops_bf16_mirror_add(const float *base, size_t n, const void *mirror, base_err *err);
void ops_bf16_mirror_remove(const float *base);
/* A copy's layout for grouped_mm's expert stacks: impl, the grouped_mm implementation that
 * reads the stack [E, OC, C] at copy elements [off, off + E OC C), may read it in a layout of
 * its own, made as the copy is written, instead of repacking the weights on every call (the
 * built-in bf16 grouped_mm on AVX512_BF16 without AMX: the backward's pairs of rows,
 * grouped_dpbf16.c; OC even, C a multiple of 64; TITAN_GROUPED_LAYOUT=0 turns it off). 1 when
 * the range is kept so: ops_bf16_mirror_convert then writes that layout there, impl reads it,
 * and any other bf16 GEMM reading the range converts its operand per call. 0: row-major, as
 * the rest of the copy. Only for a copy nothing but ops_bf16_mirror_convert writes (not one
 * that receives FSDP's bf16 gathers); before the range is first converted. Lasts until
 * ops_bf16_mirror_layouts_clear over the copy's bytes [mirror, mirror + bytes). */
int ops_bf16_mirror_layout_grouped(void *mirror, size_t off, const ops_impl *impl, int E, int OC,
                                   int C);
void ops_bf16_mirror_layouts_clear(const void *mirror, size_t bytes);
/* Operands held for several bf16 GEMMs: x[0, n) that the next few bf16 GEMMs read (the
 * block's norm output read by q, k, v; lmhead_ce's logit gradient read by both backward
 * products) is converted once instead of once per GEMM, as a transient mirror. ops_bf16_hold
 * rounds x in place for the emulated engine (its own mirror: the caller gives up x's fp32
 * values, so every reader of x until the release must be a bf16 GEMM or not care) and makes a
 * bf16 copy for onednn; ops_bf16_hold_copy leaves x as it is (one converted copy). Every bf16
 * GEMM rounds its operands anyway: the products are bitwise the same. 0, or -1 (out of memory,
 * or 64 ranges registered: the GEMMs then convert per call; or a mirror holds x already, an
 * emitted output: its holder releases it). ops_bf16_release(x) ends a hold,
 * before x is written again. Not for concurrent GEMMs of other threads on a range being held
 * or released. */
int ops_bf16_hold(float *x, size_t n);
int ops_bf16_hold_copy(const float *x, size_t n);
/* x[0, n) already holds bf16 values (a tensor rounded where it was stored as bf16), and bits,
 * if not NULL, the same values as bf16 bits: held with nothing converted where the engine's
 * format is at hand (the emulated engine reads x itself, onednn reads bits), else as
 * ops_bf16_hold_copy. Neither x nor bits may change until the release. */
int ops_bf16_hold_rounded(const float *x, size_t n, const uint16_t *bits);
void ops_bf16_release(const float *x);
/* 1 where ops_bf16_hold_rounded holds the bits it is given (the engine's format is bf16: onednn),
 * so x's fp32 values are not read through the hold and need not be there; 0 (emulated) where it
 * holds x itself. */
int ops_bf16_holds_bits(void);
/* 1 where grouped_mm/bf16 reads its activations (inp, dout) through mirrors, held or emitted: its
 * per-expert products (oneDNN, titan's AMX GEMM) on the onednn engine; 0 where its one-pass
 * AVX512_BF16 kernel (grouped_dpbf16.c, a CPU without AMX) reads them in fp32. */
int ops_bf16_grouped_mirrors(void);
/* Outputs asked for in bf16: x[0, n), which the next op writes whole and nothing but bf16 GEMMs
 * and bf16 ops (reading mirrors) reads until its release, held as their operand. Begin before
 * the op, end after it. Where that op writes x as bf16 (the bf16 swiglu, the norms, on the onednn
 * engine: ops_cpu_bf16_emit_take) it stores only the bits, into the held mirror, and leaves x's
 * fp32 values unwritten; otherwise end converts x as a hold does (ops_bf16_hold_copy's copy, the
 * emulated engine's rounding in place). The same bits either way. End answers 1 when x is held
 * (the caller releases it, ops_bf16_release, before x is written again), 0 when not (out of
 * memory: x's fp32 values were written). x must not be held already (fatal: a hold not released
 * would be read for the op's fresh values). Up to four pending per thread, begun and ended on the
 * thread that runs the op. */
void ops_bf16_emit_begin(float *x, size_t n);
int ops_bf16_emit_end(float *x);

/* ---- cost model (ops/work.c) ------------------------------------------------------------
 * The work of one op call, the one count the profiler's events (ops/prof.c) and `titan
 * kernels bench` (ops/conform.c) divide by: FLOPs for the GEMM-like ops (matmul, grouped_mm,
 * attention, lmhead_ce; 2 per multiply-add) and bytes for the memory-bound ones (embedding,
 * rmsnorm, add_rmsnorm, rope, swiglu, adamw, attention_kv: the minimum each must read and
 * write, every tensor once, 4 bytes per element). Each op's formula is derived in work.c. */
typedef struct {
    double value; /* FLOPs or bytes of the call */
    int flops;    /* 1: value counts FLOPs, 0: bytes (fixed per op kind: ops_work_flops) */
} ops_work;
/* A call's shape numbers by role (the names of oplist.h's parameters after each colon);
 * the fields an op does not use are 0. */
typedef struct {
    double rows;  /* N: token rows (embedding, rmsnorm, add_rmsnorm, matmul, swiglu,
                   * lmhead_ce); grouped_mm: offs[E], the rows of all experts */
    double width; /* a row's features: embedding D, rmsnorm/add_rmsnorm C, swiglu F, the GEMM
                   * input C of matmul/grouped_mm, lmhead_ce D */
    double out;   /* a GEMM's output features: matmul/grouped_mm OC, lmhead_ce V */
    double batch, seq, heads, kv_heads, head_dim; /* rope (B, T, nh, hd), attention (B, T, H, G,
                                                   * hd), attention_kv (T, H, G, hd) */
    double pos0;                                  /* attention_kv: the first query's position */
    double elems;                                 /* adamw: n */
    /* the backward also forms the input gradient (matmul/grouped_mm: dinp non-NULL);
     * lmhead_ce: the gradients are formed (dx non-NULL: dx and dw) */
    int grad_in;
    int in_place;     /* rope_bwd: dinp == dout (the rotated gradient replaces dout) */
    int grad_written; /* a backward's dx_acc 0: its input gradients written, never read */
} ops_work_args;
/* Whether op k's work is counted in FLOPs (1) or bytes (0). */
int ops_work_flops(ops_kind k);
/* The work of one call of op k's forward (bwd 0; ops without a backward: their one call) or
 * backward (bwd 1) with the shape numbers a. */
ops_work ops_work_of(ops_kind k, int bwd, const ops_work_args *a);
/* A table whose entries compute nothing: each call adds its work, from its own arguments
 * exactly as the profiler's wrappers take it, to *acc (value summed; lmhead_ce returns 0).
 * For counting what a sequence of calls does (the bench's); not thread-safe (one
 * accumulator per process, the last one given). */
void ops_work_counter(ops_table *t, ops_work *acc);

/* ---- conformance (ops/conform.c) ----------------------------------------------------
 * `titan kernels test|bench`: an implementation against its op's default (the default
 * against the "reference" implementation) on random shapes that satisfy its constraints:
 * forward outputs and every input gradient, each within the op's documented relative
 * tolerance (max |a - b| / max(max |b|, tiny) over the tensor). */
typedef struct {
    int shapes;       /* random shapes per implementation (test), default 6 */
    uint64_t seed;    /* default 1 */
    int verbose;      /* print one line per shape */
    double min_sec;   /* bench: time per measurement, default 0.3 s */
    int even_routing; /* bench, grouped_mm: R/E rows per expert every call, not a skewed
                       * routing drawn per call (conform.c, cf_route) */
} ops_conform_opts;
/* Tests impl (name "op/impl", "impl" when unique, or NULL for every registered non-reference
 * implementation). Prints a line per implementation to stdout; returns the number that
 * failed, or -1 with err set for a bad name. */
int ops_conform_test(const char *name, const ops_conform_opts *o, base_err *err);
/* Times impl against the default on a model-sized shape (dims from ctx), printing ms per call,
 * the ratio to the default, and GB/s or GFLOP/s against the op's traffic or FLOPs. */
int ops_conform_bench(const char *name, const ops_ctx *ctx, const ops_conform_opts *o,
                      base_err *err);
/* The work (ops_work_of) the bench divides op k's forward (bwd 0, or its one step) or backward
 * (bwd 1) time by at ctx's shape: the sum over the calls it times (grouped_mm: one MoE
 * layer's three projections; 0 on a dense shape). */
ops_work ops_conform_work(ops_kind k, const ops_ctx *ctx, int bwd);

/* RoPE tables for positions 0..T-1: cos/sin[T, hd/2] in fp32, computed as HF does
 * (inv_freq = 1/theta^(2i/hd) in fp32, angle = pos*inv_freq in fp32). */
void ops_rope_table(float *cos, float *sin, int T, int hd, double theta);

/* ---- Subcommand (ops/cli.c) -------------------------------------------------------------
 * titan kernels [list|test|bench] [NAME] [options]: argv[1] is "kernels". Returns 0 or -1
 * with err filled; --help prints the usage to stdout and returns 0. The bench's --flavor
 * takes the model dims from the model's flavor registry, which ops does not see (it sits
 * below the model): flavor_dims fills ctx's model fields (not batch, seq_len) from a flavor
 * name; NULL refuses --flavor. */
typedef int (*ops_flavor_dims_fn)(const char *flavor, ops_ctx *ctx, base_err *err);
int ops_cmd_kernels(int argc, char **argv, ops_flavor_dims_fn flavor_dims, base_err *err);
void ops_cmd_kernels_usage(FILE *f);

/* ---- profiling (ops/prof.c) ---------------------------------------------------------------
 * Per-op timing without touching the model's call sites. ops_prof_attach replaces every entry
 * point of n resolved tables with a wrapper generated from the op list, keeping the real
 * pointers (built-in kernels or plugin trampolines) in a side table by unit. A wrapper calls
 * the real entry of the current unit, timed, and records a trace event (base_trace_add)
 * "<unit path>/<op>_fwd|_bwd" with the implementation's name and the call's FLOPs or bytes
 * (ops_work_of, below).
 * The model names the current unit (ops_prof_unit) as each unit's forward or backward
 * begins. Tables never attached are untouched: with the profiler off nothing changes. One
 * set of tables is attached at a time; paths[u] must outlive the attachment. */
void ops_prof_unit(int unit);
int ops_prof_attach(ops_table *tables, const char *const *paths, int n, base_err *err);
/* Puts the real entry points back into the tables attached (no-op when none are). */
void ops_prof_detach(void);

#endif
