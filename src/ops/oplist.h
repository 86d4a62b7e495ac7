/* The op list: the one place an op kind is declared (included by ops.h only).
 *
 * OPS_LIST(FB, F) expands one entry per op, in ops_kind order (the order is part of the
 * behaviour: it numbers the kinds, orders the registry's built-ins and seeds `titan kernels
 * test`; append new ops at the end):
 *   FB(KIND, name, subpath, plugin, (fwd params), (fwd args), (bwd params), (bwd args))
 *       an op with a forward and a hand-written backward, both returning void; its table
 *       fields are name_fwd / name_bwd of types ops_name_fwd_fn / ops_name_bwd_fn;
 *   F(KIND, name, subpath, plugin, ret, (params), (args))
 *       an op that is one function (no separate backward); field name, type ops_name_fn.
 * KIND: the enum constant is OPS_KIND. name: the op's name in configs, plugin descriptors and
 * messages. subpath: a module sub-path the op also answers to in overrides besides
 * "<unit>.<name>" (torchtitan's module names), or NULL; only ops whose call sites in a block
 * lie in one module get one (grouped_mm: the MoE's three expert projections). plugin: 0, or the
 * kernel ABI version that let a plugin provide it (1, 2; a descriptor of an older version is
 * refused for it); include/titan/kernel_abi.h then documents its tensors, and ops/plugin.c has its
 * adapter plg_name_fwd / plg_name_bwd.
 *
 * Generated from it: the ops_kind enum, the signature typedefs and ops_table's fields
 * (ops.h), the names, sub-paths, backward rule and table assignment of resolution
 * (registry.c), the plugin trampolines, op check and slot binding (plugin.c), the
 * conformance dispatch (conform.c: every op has cf_name), and the profiler's wrappers
 * (prof.c) and the cost model's counting table (work.c), which read a call's work through
 * OPS_WORK_CALL_name (internal.h: every op has one). An op's contract (shapes, what backward
 * accumulates) is documented at its entry below.
 *
 * Conventions (llm.c style): outputs first, then saved activations, inputs, weights, sizes.
 * Row-major, fp32. A backward with the argument dx_acc writes its input gradients (dinp, dq, dk,
 * dv, dgate, dup) by it: 1, += (several ops summed into one buffer); 0, = (the contents never read,
 * garbage or NaN included; every element written, zeros where nothing reaches it), so the first
 * op to write a buffer needs no zeroing pass before it (4.7 GB of memset a Qwen3-0.6B x 2048
 * step, bench/RESULTS.md session 50). The others accumulate (+=) always: rope's dinp (unless in
 * place), lmhead_ce's dx. The result of 0 is bitwise that of 1 on a zeroed buffer (kernels start
 * from +0.0f where they would have read the buffer). A parameter gradient dw
 * (embedding's dwte excepted) follows the call's last argument dw_acc: 1, dw += the gradient; 0, dw
 * = the gradient, dw's contents never read (garbage or NaN included), every element written (zeros
 * where the call adds nothing: an expert without rows, a vocabulary row without a token). The model
 * passes 0 for a parameter's first gradient since its buffer last counted (PyTorch's
 * zero_grad(set_to_none=True)), so no pass zeroes the gradients and no product reads them
 * back (bench/RESULTS.md, session 29). */
#ifndef TITAN_OPS_OPLIST_H
#define TITAN_OPS_OPLIST_H

/* embedding: out[N,D] = wte[tokens[n], :].  bwd: dwte[V,D] += scatter of dout (deterministic
 *   order; always accumulated: the signature has no V to zero the rows no token touched); it
 * receives no wte: FSDP does not gather the table for it (OPS_BWD_READS_WEIGHTS in ops.h, checked
 * against these signatures by test_ops). rmsnorm: out[N,C] = inp * rsqrt(mean(inp^2) + eps) * w[C];
 * rstd[N] saved for backward. Used for the block norms (C = dim) and per-head q/k norms (N =
 * tokens*heads, C = head_dim). matmul: out[N,OC] = inp[N,C] @ w[OC,C]^T (nn.Linear, no bias). bwd:
 * dinp[N,C] (+)= dout @ w (skipped when dinp is NULL); dw[OC,C] (+)= dout^T @ inp. rope: RoPE, HF
 * rotate_half convention, on x[B,T,nh,hd] at positions 0..T-1 of each window. cos/sin: [T, hd/2]
 * tables (ops_rope_table). out may alias inp. bwd: dinp += R^T dout (the rotation by -angle). When
 * dinp == dout the rotated gradient replaces dout in place. attention: causal GQA attention, scale
 * 1/sqrt(hd). q[B,T,H,hd], k,v[B,T,G,hd], out[B,T,H,hd]; query head h uses kv head h / (H/G).
 * lse[B,H,T] = log-sum-exp of each scaled score row, saved so backward can recompute probabilities
 * tile by tile (no [T,T] matrix is kept). bwd: dq, dk, dv (+)= gradients. swiglu: out[N,F] =
 * silu(gate) * up.  bwd: dgate, dup (+)= . lmhead_ce: fused lm_head + fp32 cross-entropy over
 * x[N,D], w[V,D], targets[N] (OPS_IGNORE_INDEX skipped). Returns the SUM of the per-token losses
 * (double). Logits are computed `chunk` tokens at a time into scratch
 * (ops_lmhead_ce_scratch_floats(chunk, V, prec) floats), so [N, V] logits never exist; or, where
 * ops_lmhead_ce_fused(D) says the bf16 implementation runs fused (no vocabulary shard), with chunk
 * 0 and no scratch at all. When dx is non-NULL, also dx[N,D] += grad_scale * (softmax - onehot) @ w
 * and dw[V,D] (+)= grad_scale * (...)^T @ x (dw_acc), where grad_scale is 1 / (global count of
 * valid tokens), supplied by the caller. *n_valid (if non-NULL) receives the number of non-ignored
 * targets. Loss-parallel (vs non-NULL): w[V,D] is this rank's shard, vocabulary ids [vs->v0, vs->v0
 * + V) of vs->v_total; targets are global ids (valid: 0 <= t < v_total) and x holds the same N rows
 * on every rank of the group. Per chunk the row maxima are all-reduced (max), then the exp sums and
 * the target logits (from the rank owning the target, 0 elsewhere) are all-reduced (sum): every
 * rank returns the same total loss, dw is the gradient of its shard, and dx receives this shard's
 * PART of the input gradient (the caller sums it over the group). vs NULL: the whole vocabulary, no
 * reductions. adamw: AdamW (torch.optim.AdamW semantics, decoupled decay wd) on n elements, step t
 * >= 1, with the gradient g * gscale (fp32 product; gradient clipping's coefficient, 1 = none:
 *   clipping then costs no pass of its own over the gradients, which stay unscaled in memory);
 *   l2 != 0: torch.optim.Adam's coupled weight decay, g += l2 * p (the parameter before the
 *   step) ahead of the moments (torch never sets both: Adam passes wd 0, AdamW l2 0):
 *   p -= lr*wd*p; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 *   p -= (lr / (1-b1^t)) * m / (sqrt(v) / sqrt(1-b2^t) + eps). No backward. mv_bf16: m and v
 *   are bf16 (uint16_t bits): widened, stepped in fp32, stored rounded to nearest even
 *   (torchtitan 0.3's fused_opt_states_bf16); else fp32.
 *   Hyperparameters are doubles, as Python holds them: the kernel derives its fp32 scalars
 *   from them exactly as torch does (1 - 0.9 in double, then rounded once). A call on at most
 *   65536 elements runs on the calling thread (the optimizer calls it per block from its own
 *   parallel loop when it refreshes the bf16 weight copy in the same pass).
 * attention_kv: inference only (no backward): T new queries of ONE sequence attending to a KV
 *   cache. q[T,H,hd] holds positions pos0..pos0+T-1; k, v [>= pos0+T, G, hd] are the cache
 *   rows of positions 0..pos0+T-1 (the new tokens' rows already written); out[T,H,hd]. Query
 *   t sees keys 0..pos0+t (causal), scale 1/sqrt(hd), query head h reads kv head h / (H/G),
 *   softmax with the row max subtracted. Used for decode steps and prefill chunks after the
 *   first; a prefill from position 0 runs the training attention_fwd on the cache rows.
 * grouped_mm: grouped expert GEMM (MoE): the rows of inp are sorted by expert, expert e
 *   owning rows [offs[e], offs[e+1]) (offs[E+1], offs[0] = 0, non-decreasing; a group may be
 *   empty). out[r, OC] = inp[r, C] @ w[e]^T for r in group e, w [E, OC, C] (one nn.Linear
 *   per expert). bwd: dinp[r] (+)= dout[r] @ w[e] (skipped when dinp is NULL);
 *   dw[e] (+)= dout_e^T @ inp_e (dw_acc 0: dw[e] = 0 for an empty group). Results must not depend
 * on the thread count's scheduling: each output element is written by one thread with a fixed
 * reduction order (the reduction over a group's rows included). add_rmsnorm: fused residual add +
 * RMSNorm: h[N,C] = x + y (the residual stream), out = rmsnorm(h) * w[C], rstd[N] saved; one pass
 * over memory instead of an add pass and a norm pass. h may alias x or y (the stream is updated in
 * place). The block calls it where attention's output joins the residual, before the FFN norm. out
 * must equal rmsnorm_fwd(h) of the same ISA copy bitwise (backward recomputes the norm with
 *   rmsnorm_fwd from the saved h). bwd: an add passes its output gradient unchanged to both
 *   inputs, so the only work is the norm's: dh (+)= d(rmsnorm)/dh . dout, dw (+)= ..., exactly
 *   rmsnorm_bwd's contract; the caller passes the residual stream's gradient as dh (it
 *   already holds dL/dh from downstream). */
#define OPS_LIST(FB, F)                                                                            \
    FB(EMBEDDING, embedding, NULL, 0,                                                              \
       (float *out, const int32_t *tokens, const float *wte, int N, int D),                        \
       (out, tokens, wte, N, D),                                                                   \
       (float *dwte, const float *dout, const int32_t *tokens, int N, int D),                      \
       (dwte, dout, tokens, N, D))                                                                 \
    FB(RMSNORM, rmsnorm, NULL, 1,                                                                  \
       (float *out, float *rstd, const float *inp, const float *w, int N, int C, float eps),       \
       (out, rstd, inp, w, N, C, eps),                                                             \
       (float *dinp, float *dw, const float *dout, const float *inp, const float *w,               \
        const float *rstd, int N, int C, int dx_acc, int dw_acc),                                  \
       (dinp, dw, dout, inp, w, rstd, N, C, dx_acc, dw_acc))                                       \
    FB(MATMUL, matmul, NULL, 1,                                                                    \
       (float *out, const float *inp, const float *w, int N, int C, int OC),                       \
       (out, inp, w, N, C, OC),                                                                    \
       (float *dinp, float *dw, const float *dout, const float *inp, const float *w, int N, int C, \
        int OC, int dx_acc, int dw_acc),                                                           \
       (dinp, dw, dout, inp, w, N, C, OC, dx_acc, dw_acc))                                         \
    FB(ROPE, rope, "attention.rope", 1,                                                            \
       (float *out, const float *inp, const float *cos, const float *sin, int B, int T, int nh,    \
        int hd),                                                                                   \
       (out, inp, cos, sin, B, T, nh, hd),                                                         \
       (float *dinp, const float *dout, const float *cos, const float *sin, int B, int T, int nh,  \
        int hd),                                                                                   \
       (dinp, dout, cos, sin, B, T, nh, hd))                                                       \
    FB(ATTENTION, attention, NULL, 1,                                                              \
       (float *out, float *lse, const float *q, const float *k, const float *v, int B, int T,      \
        int H, int G, int hd),                                                                     \
       (out, lse, q, k, v, B, T, H, G, hd),                                                        \
       (float *dq, float *dk, float *dv, const float *dout, const float *out, const float *lse,    \
        const float *q, const float *k, const float *v, int B, int T, int H, int G, int hd,        \
        int dx_acc),                                                                               \
       (dq, dk, dv, dout, out, lse, q, k, v, B, T, H, G, hd, dx_acc))                              \
    FB(SWIGLU, swiglu, "feed_forward.swiglu", 1,                                                   \
       (float *out, const float *gate, const float *up, int N, int F), (out, gate, up, N, F),      \
       (float *dgate, float *dup, const float *dout, const float *gate, const float *up, int N,    \
        int F, int dx_acc),                                                                        \
       (dgate, dup, dout, gate, up, N, F, dx_acc))                                                 \
    F(LMHEAD_CE, lmhead_ce, NULL, 0, double,                                                       \
      (float *dx, float *dw, const float *x, const float *w, const int32_t *targets, int N, int D, \
       int V, float grad_scale, float *scratch, int chunk, int64_t *n_valid,                       \
       const ops_vocab_shard *vs, int dw_acc),                                                     \
      (dx, dw, x, w, targets, N, D, V, grad_scale, scratch, chunk, n_valid, vs, dw_acc))           \
    F(ADAMW, adamw, NULL, 0, void,                                                                 \
      (float *p, void *m, void *v, const float *g, float gscale, size_t n, double lr,              \
       double beta1, double beta2, double eps, double wd, double l2, int mv_bf16, int64_t t),      \
      (p, m, v, g, gscale, n, lr, beta1, beta2, eps, wd, l2, mv_bf16, t))                          \
    F(ATTENTION_KV, attention_kv, "attention.kv", 0, void,                                         \
      (float *out, const float *q, const float *k, const float *v, int T, int pos0, int H, int G,  \
       int hd),                                                                                    \
      (out, q, k, v, T, pos0, H, G, hd))                                                           \
    FB(GROUPED_MM, grouped_mm, "moe.grouped_mm", 2,                                                \
       (float *out, const float *inp, const float *w, const int32_t *offs, int E, int C, int OC),  \
       (out, inp, w, offs, E, C, OC),                                                              \
       (float *dinp, float *dw, const float *dout, const float *inp, const float *w,               \
        const int32_t *offs, int E, int C, int OC, int dx_acc, int dw_acc),                        \
       (dinp, dw, dout, inp, w, offs, E, C, OC, dx_acc, dw_acc))                                   \
    FB(ADD_RMSNORM, add_rmsnorm, "ffn_norm", 1,                                                    \
       (float *h, float *out, float *rstd, const float *x, const float *y, const float *w, int N,  \
        int C, float eps),                                                                         \
       (h, out, rstd, x, y, w, N, C, eps),                                                         \
       (float *dinp, float *dw, const float *dout, const float *inp, const float *w,               \
        const float *rstd, int N, int C, int dx_acc, int dw_acc),                                  \
       (dinp, dw, dout, inp, w, rstd, N, C, dx_acc, dw_acc))

/* Removes the parentheses of a list: OPS_UNPAREN (a, b) -> a, b. */
#define OPS_UNPAREN(...) __VA_ARGS__
/* OPS_IF_1(x), OPS_IF_2(x) -> x, OPS_IF_0(x) -> nothing: for the plugin flag. */
#define OPS_IF_1(...) __VA_ARGS__
#define OPS_IF_2(...) __VA_ARGS__
#define OPS_IF_0(...)

#endif
