/* titan kernel plugin ABI, version 2 (version 1 plugins keep loading; see Versions).
 *
 * A plugin is a shared object that titan loads with dlopen (`[kernels] plugins = ["x.so"]`
 * in a job config, or `titan kernels --plugin x.so ...`). It registers implementations of
 * titan's ops by op name; a job then selects them like any built-in implementation
 * (`[kernels] "layers.*.attention.rope" = "rope_bhsd"`). This header is all a plugin needs:
 * it depends on nothing else from titan and only on the C standard library.
 *
 * A plugin defines, with the macros below:
 *
 *     #include <titan/kernel_abi.h>
 *     TITAN_KERNEL_PLUGIN_ABI;     // exports titan_kernel_abi_version = this header's version
 *     TITAN_KERNEL_EXPORT int titan_kernel_plugin_init(const titan_kernel_host *host) {
 *         static const titan_kernel_desc k = {TITAN_KERNEL_ABI_VERSION, sizeof k, "rope",
 *                                             "rope_bhsd", ...};
 *         return host->register_kernel(host, &k);
 *     }
 *
 * Loading: titan reads `titan_kernel_abi_version` BEFORE it calls anything; a plugin built
 * against a version this titan does not speak is refused with a message naming both versions
 * (rebuild it against this titan's header). Then `titan_kernel_plugin_init` runs once; it
 * returns 0, or non-zero after host->error() said why, and then nothing it registered stays
 * registered.
 *
 * Versions: 1 had the ops rope .. matmul below. 2 added grouped_mm, args->offs, the MoE
 * fields of titan_model_shape and the descriptor's flags, all appended to the structs, so a
 * plugin built against version 1 keeps loading and runs unchanged (it never reads the new
 * fields; its shorter descriptor, struct_size = offsetof(titan_kernel_desc, flags), is
 * accepted for version 1 and read as flags 0); a version-1
 * descriptor for an op that version 1 lacked (grouped_mm) is refused, naming the kernel, the
 * op and the version that added it. titan accepts versions 1 .. TITAN_KERNEL_ABI_VERSION.
 *
 * Calls: titan calls a kernel from one thread at a time (the kernel may use its own threads,
 * e.g. OpenMP). Every tensor is fp32, row-major, contiguous, 64-byte aligned, and no two
 * pointers of one call alias (titan copies where its own call was in place). That holds in
 * bf16 mixed-precision runs too (training.mixed_precision_param = "bfloat16"): titan's own
 * bf16 implementations round GEMM operands inside the op, and a plugin kernel receives the
 * same fp32 tensors (weights are the fp32 master weights) and computes in whatever precision
 * it chooses; an fp32 plugin therefore works unchanged in a bf16 run.
 *
 * Forward writes (=) its outputs. Backward WRITES (=) the gradients of its inputs; titan adds
 * them into its accumulated gradients (or copies them over a gradient that titan's op writes
 * rather than adds to: dw_acc / dx_acc 0, docs/kernels.md). An output pointer may be NULL: that
 * result is not wanted (e.g. matmul's input gradient for the first layer); skip it. A kernel whose
 * descriptor sets TITAN_KERNEL_BWD_ACCUMULATES (v2) instead ADDS (+=) into its backward
 * outputs, and titan passes its accumulated gradients themselves where it can (no scratch
 * copy, no add pass: for grouped_mm's dw [E,OC,C], the largest tensor of an MoE layer, that
 * saves two passes over it per call); where it cannot (a heads tensor in BHSD, a gradient
 * replacing its own input) it passes zeroed scratch and adds or copies as before.
 *
 * Layout: tensors with a heads axis ("[B,T,nh,hd]" below, BSHD: titan's token-major layout)
 * are given in the layout the kernel declares: TITAN_LAYOUT_BHSD means [B,nh,T,hd] and titan
 * transposes on the way in and out. lse [B,H,T] is the same in both layouts.
 *
 * Saved state: a kernel that wants memory kept from its forward to its backward declares
 * saved_bytes(); titan keeps one such buffer per layer and op (the same buffer for every call
 * of that op in that layer, e.g. RoPE's q and k calls), preserves its content between calls,
 * and passes it as args->saved to forward and backward; its bytes start zeroed. Backward always
 * follows a forward of the same layer with the same shapes (titan recomputes forwards before
 * backwards where it does not keep activations). A call may read only its own arguments and
 * saved state: a pointer kept from forward may not hold the data in backward (FSDP releases
 * a layer's parameters after its forward and gathers them again only for a backward that
 * receives them; the embedding's backward, which has no plugin binding, receives none).
 * Scratch for one call: workspace_bytes(),
 * args->workspace. grouped_mm's saved buffer is shared by the three expert projections of a layer
 * (forward: gate, up, then down; backward: down, then gate, up), all with the same routing (offs):
 * the place for routing metadata built once per forward and reused by every later call of
 * that layer, the backward ones included (examples/kernels/grouped_tiles.c keeps its tile
 * plan there).
 *
 * Ops (args->dims, args->in[], args->out[]; forward / backward; v1 unless marked):
 *   rope       dims B,T,nh,hd        rotate_half RoPE at positions pos0..pos0+T-1 of each window
 *              fwd  in: x[B,T,nh,hd], cos[T,hd/2], sin[T,hd/2]   out: y[B,T,nh,hd]
 *              bwd  in: dy, cos, sin                             out: dx
 *   attention  dims B,T,H,G,hd       causal GQA, scale 1/sqrt(hd), query head h uses kv h/(H/G)
 *              fwd  in: q[B,T,H,hd], k[B,T,G,hd], v[B,T,G,hd]    out: o[B,T,H,hd], lse[B,H,T]
 *              bwd  in: do, o, lse, q, k, v                      out: dq, dk, dv
 *   rmsnorm    dims N,C; args->eps   y = x * rsqrt(mean(x^2) + eps) * w
 *              fwd  in: x[N,C], w[C]                             out: y[N,C], rstd[N]
 *              bwd  in: dy, x, w, rstd                           out: dx, dw
 *   add_rmsnorm dims N,C; args->eps  residual add fused with the norm: h = x + y, then rmsnorm(h)
 *              fwd  in: x[N,C], y[N,C], w[C]                     out: h[N,C], y[N,C], rstd[N]
 *              bwd  in: dy, h, w, rstd                           out: dh, dw
 *              (the add's gradient is dh for both x and y; titan routes it)
 *   swiglu     dims N,F              y = silu(gate) * up
 *              fwd  in: gate[N,F], up[N,F]                       out: y[N,F]
 *              bwd  in: dy, gate, up                             out: dgate, dup
 *   matmul     dims N,C,OC           y = x @ w^T (nn.Linear without bias)
 *              fwd  in: x[N,C], w[OC,C]                          out: y[N,OC]
 *              bwd  in: dy[N,OC], x, w                           out: dx (may be NULL), dw
 *   grouped_mm dims R,C,OC,E         MoE experts (ABI v2): rows sorted by expert, expert e owning
 *              rows [offs[e], offs[e+1]) (args->offs[E+1], offs[0] = 0, non-decreasing,
 *              offs[E] = R; groups may be empty); y[r] = x[r] @ w[e]^T for r in group e
 *              fwd  in: x[R,C], w[E,OC,C]; args->offs          out: y[R,OC]
 *              bwd  in: dy[R,OC], x, w; args->offs             out: dx (may be NULL), dw[E,OC,C]
 *              titan calls it three times per MoE layer and direction: C,OC = dim,moe_ffn_dim
 *              (gate and up projections: w1, w3) and moe_ffn_dim,dim (down: w2). Routing, the
 *              top-k gates and the SwiGLU between the projections stay titan's (docs/kernels.md
 *              says why); with expert parallelism E is this rank's expert count.
 * Each op's exact semantics and tolerances are titan's built-in op's (docs/kernels.md);
 * `titan kernels test NAME --plugin x.so` checks a plugin kernel against them. */
#ifndef TITAN_KERNEL_ABI_H
#define TITAN_KERNEL_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped on any change of this header's structs or of an existing op's tensors, and for a new
 * op that needs new fields (grouped_mm: 2); an op added without any (add_rmsnorm) kept version 1.
 * See Versions for what titan still accepts from plugins built against older ones. */
#define TITAN_KERNEL_ABI_VERSION 2u

#if defined(__GNUC__)
#define TITAN_KERNEL_EXPORT __attribute__((visibility("default")))
#else
#define TITAN_KERNEL_EXPORT
#endif

/* The version symbol titan checks before it calls into a plugin. */
#define TITAN_KERNEL_PLUGIN_ABI                                                                    \
    TITAN_KERNEL_EXPORT extern const uint32_t titan_kernel_abi_version;                            \
    TITAN_KERNEL_EXPORT const uint32_t titan_kernel_abi_version = TITAN_KERNEL_ABI_VERSION

typedef enum {
    TITAN_LAYOUT_BSHD = 0, /* [B,T,nh,hd]: titan's own, no copies */
    TITAN_LAYOUT_BHSD = 1  /* [B,nh,T,hd]: titan transposes heads tensors in and out */
} titan_layout;

/* The shapes a kernel is checked against, for each layer it may serve: the model and job as
 * this rank's calls of the kernel's op get them (docs/kernels.md, Resolution). Without tensor
 * or expert parallelism, the model and the training microbatch. Under tensor parallelism the
 * heads, ffn_dim and vocab are this rank's; add_rmsnorm, on the sequence-parallel residual
 * stream, is checked for batch 1 and seq_len = batch * seq_len / tp (this rank's run of the
 * flattened tokens); rmsnorm for that shape and for the whole microbatch (its per-head q/k
 * calls, inside the tensor-parallel region): a kernel must accept every shape it is checked
 * for. In an MoE model swiglu (only called between the expert GEMMs) is checked for its routed
 * rows: batch 1, seq_len = batch * seq_len * top_k, ffn_dim = moe_ffn_dim (under expert
 * parallelism a call gets the rows routed to this rank's experts, which vary per call). Under
 * expert parallelism grouped_mm's n_experts is this rank's n_experts / ep. A run that
 * samples after training also checks the whole model at batch 1 and 1 .. min(seq_len, 256)
 * tokens. */
typedef struct {
    int batch, seq_len; /* microbatch sequences, tokens per sequence (as above) */
    int dim, n_heads, n_kv_heads, head_dim, ffn_dim, vocab;
    int n_experts, top_k, moe_ffn_dim; /* v2: routed experts (grouped_mm: this rank's), experts
                                          per token, expert hidden width; 0 for a dense model */
} titan_model_shape;

/* One call. dims[] per op as listed above; unused entries 0. */
typedef struct {
    int dims[8];
    float eps; /* rmsnorm */
    const float *in[8];
    float *out[4];   /* forward: outputs; backward: input gradients (written, not added) */
    void *saved;     /* saved_bytes() bytes kept from forward to backward (NULL if 0) */
    void *workspace; /* workspace_bytes() bytes of scratch for this call (NULL if 0) */
    size_t saved_size, workspace_size;
    const int32_t *offs; /* v2, grouped_mm: the [E+1] group offsets; NULL for other ops */
} titan_kernel_args;

typedef int (*titan_kernel_fn)(const titan_kernel_args *args); /* 0 = ok */

typedef struct {
    uint32_t abi_version;    /* TITAN_KERNEL_ABI_VERSION */
    uint32_t struct_size;    /* sizeof(titan_kernel_desc) */
    const char *op;          /* "rope", "attention", "rmsnorm", "add_rmsnorm", "swiglu", "matmul",
                                "grouped_mm" (v2) */
    const char *name;        /* implementation name, unique per op ("rope_bhsd") */
    const char *constraints; /* human readable, shown by `titan kernels`; may be NULL */
    /* 0 when the kernel can serve shape (called once per shape its op's calls get on this
     * rank: see titan_model_shape); else non-zero with the broken rule written to why (e.g.
     * "head_dim % 16 == 0 (head_dim = 40)"). NULL = no constraints. */
    int (*check)(const titan_model_shape *shape, char *why, size_t why_size);
    titan_layout layout; /* of the heads tensors */
    titan_kernel_fn forward, backward;
    /* Bytes wanted for a call with these dims (phase 0 forward, 1 backward); NULL = none. */
    size_t (*workspace_bytes)(int phase, const int dims[8]);
    /* Bytes kept per layer from forward to backward, given a forward call's dims; NULL = none. */
    size_t (*saved_bytes)(const int dims[8]);
    uint32_t flags; /* v2: TITAN_KERNEL_* flags below, 0 = none (a v1 descriptor ends before it) */
} titan_kernel_desc;

/* Backward adds (+=) into args->out[] rather than writing them (see Forward/Backward above). */
#define TITAN_KERNEL_BWD_ACCUMULATES 1u

/* What titan gives a plugin's init function. Strings are copied by titan as needed; the
 * descriptor itself (and the strings it points to) must stay valid while the plugin is
 * loaded, i.e. be static. */
typedef struct titan_kernel_host {
    uint32_t abi_version; /* the host's TITAN_KERNEL_ABI_VERSION */
    /* Registers one implementation; 0 = ok, else the reason is reported by titan. */
    int (*register_kernel)(const struct titan_kernel_host *host, const titan_kernel_desc *desc);
    /* Reports why init fails (a message, shown after the plugin's path). */
    void (*error)(const struct titan_kernel_host *host, const char *msg);
    void *host_private;
} titan_kernel_host;

/* The plugin's entry point: `TITAN_KERNEL_EXPORT int titan_kernel_plugin_init(...)`. */
typedef int (*titan_kernel_plugin_init_fn)(const titan_kernel_host *host);

#ifdef __cplusplus
}
#endif

#endif
