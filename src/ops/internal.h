/* Internals shared by the files of the ops module (registry, plugins, conformance). */
#ifndef TITAN_OPS_INTERNAL_H
#define TITAN_OPS_INTERNAL_H

#include "ops/ops.h"

/* The op kind named s ("rope"), or -1. */
int ops_kind_from_name(const char *s);
/* "embedding, rmsnorm, ...": the op names in list order (plugin_only: those a plugin may
 * provide), cut to size. */
void ops_kind_names(char *buf, size_t size, int plugin_only);
/* 0 when a kernel plugin may not provide op k, else the kernel ABI version that allowed it
 * (oplist.h's plugin flag). */
int ops_kind_plugin(ops_kind k);
/* Conformance (`titan kernels test`) on: every plugin output goes through the scratch arena,
 * guarded (an accumulating kernel too, which training hands titan's gradient itself), so a
 * write past any output is caught; off: training's direct gradients. */
void ops_plugin_checking(int on);
/* Under conformance a plugin kernel writing outside its buffers is recorded, not fatal: 1 and
 * its message (cleared) when one was since the last call, else 0. */
int ops_plugin_fault(char *msg, size_t n);
/* An implementation that is bound per unit rather than called through its fwd/bwd (a kernel
 * plugin's: a per-layer trampoline and saved state; ops/plugin.c provides them). The registry
 * keeps one with the implementation and calls it while resolving and releasing tables, so
 * the registry needs nothing from plugin.c and plugin.c calls only into the registry. */
typedef struct ops_binding {
    const char *origin; /* where the implementation came from (a plugin path), for messages */
    /* the constraint check, in place of ops_impl.check */
    int (*check)(const struct ops_binding *b, const ops_ctx *ctx, base_err *err);
    /* puts the unit's entry points of op k into t and records it in t->plugin_slot[k] */
    int (*bind)(const struct ops_binding *b, ops_table *t, ops_kind k, const char *path,
                base_err *err);
    /* releases what bind took for op k of t (nothing when t->plugin_slot[k] is 0) */
    void (*unbind)(ops_table *t, ops_kind k);
} ops_binding;
/* Registers an implementation with its binding (b may be NULL), without the
 * built-ins-first step (the plugin loader has done it). */
int ops_register_bound(const ops_impl *impl, const ops_binding *b, base_err *err);
/* Number of registered implementations, and dropping the ones registered after a mark (a
 * plugin whose init failed). */
int ops_registry_mark(void);
void ops_registry_rollback(int mark);
/* The op's first-registered (default) implementation. */
const ops_impl *ops_default_impl(ops_kind op);

/* The work (ops_work_of) of a call from its argument list, oplist.h's by position: one macro
 * per entry point, used by the profiler's wrappers (prof.c) and the counting table (work.c),
 * so both read a call's shape the same way. Parameters end in '_' so that none is replaced
 * inside a designator of ops_work_args. */
#define OPS_WORK_(K, bwd_, ...) ops_work_of(OPS_##K, bwd_, &(ops_work_args){__VA_ARGS__})
#define OPS_WORK_CALL_embedding_fwd(out_, tok_, wte_, n_, d_)                                      \
    OPS_WORK_(EMBEDDING, 0, .rows = (n_), .width = (d_))
#define OPS_WORK_CALL_embedding_bwd(dwte_, dout_, tok_, n_, d_)                                    \
    OPS_WORK_(EMBEDDING, 1, .rows = (n_), .width = (d_))
#define OPS_WORK_CALL_rmsnorm_fwd(out_, rstd_, inp_, w_, n_, c_, eps_)                             \
    OPS_WORK_(RMSNORM, 0, .rows = (n_), .width = (c_))
#define OPS_WORK_CALL_rmsnorm_bwd(dinp_, dw_, dout_, inp_, w_, rstd_, n_, c_, xacc_, acc_)         \
    OPS_WORK_(RMSNORM, 1, .rows = (n_), .width = (c_), .grad_written = !(xacc_))
#define OPS_WORK_CALL_matmul_fwd(out_, inp_, w_, n_, c_, oc_)                                      \
    OPS_WORK_(MATMUL, 0, .rows = (n_), .width = (c_), .out = (oc_))
#define OPS_WORK_CALL_matmul_bwd(dinp_, dw_, dout_, inp_, w_, n_, c_, oc_, xacc_, acc_)            \
    OPS_WORK_(MATMUL, 1, .rows = (n_), .width = (c_), .out = (oc_), .grad_in = (dinp_) != NULL)
#define OPS_WORK_CALL_rope_fwd(out_, inp_, cos_, sin_, b_, t_, nh_, hd_)                           \
    OPS_WORK_(ROPE, 0, .batch = (b_), .seq = (t_), .heads = (nh_), .head_dim = (hd_))
#define OPS_WORK_CALL_rope_bwd(dinp_, dout_, cos_, sin_, b_, t_, nh_, hd_)                         \
    OPS_WORK_(ROPE, 1, .batch = (b_), .seq = (t_), .heads = (nh_), .head_dim = (hd_),              \
              .in_place = (const float *)(dinp_) == (dout_))
#define OPS_WORK_CALL_attention_fwd(out_, lse_, q_, k_, v_, b_, t_, h_, g_, hd_)                   \
    OPS_WORK_(ATTENTION, 0, .batch = (b_), .seq = (t_), .heads = (h_), .kv_heads = (g_),           \
              .head_dim = (hd_))
#define OPS_WORK_CALL_attention_bwd(dq_, dk_, dv_, dout_, out_, lse_, q_, k_, v_, b_, t_, h_, g_,  \
                                    hd_, xacc_)                                                    \
    OPS_WORK_(ATTENTION, 1, .batch = (b_), .seq = (t_), .heads = (h_), .kv_heads = (g_),           \
              .head_dim = (hd_))
#define OPS_WORK_CALL_swiglu_fwd(out_, gate_, up_, n_, f_)                                         \
    OPS_WORK_(SWIGLU, 0, .rows = (n_), .width = (f_))
#define OPS_WORK_CALL_swiglu_bwd(dgate_, dup_, dout_, gate_, up_, n_, f_, xacc_)                   \
    OPS_WORK_(SWIGLU, 1, .rows = (n_), .width = (f_), .grad_written = !(xacc_))
#define OPS_WORK_CALL_lmhead_ce(dx_, dw_, x_, w_, tgt_, n_, d_, v_, scale_, scratch_, chunk_,      \
                                n_valid_, vs_, acc_)                                               \
    OPS_WORK_(LMHEAD_CE, 0, .rows = (n_), .width = (d_), .out = (v_), .grad_in = (dx_) != NULL)
#define OPS_WORK_CALL_adamw(p_, m_, v_, g_, gs_, n_, lr_, b1_, b2_, eps_, wd_, l2_, bf_, t_)       \
    OPS_WORK_(ADAMW, 0, .elems = (double)(n_))
#define OPS_WORK_CALL_attention_kv(out_, q_, k_, v_, t_, pos0_, h_, g_, hd_)                       \
    OPS_WORK_(ATTENTION_KV, 0, .seq = (t_), .pos0 = (pos0_), .heads = (h_), .kv_heads = (g_),      \
              .head_dim = (hd_))
#define OPS_WORK_CALL_grouped_mm_fwd(out_, inp_, w_, offs_, e_, c_, oc_)                           \
    OPS_WORK_(GROUPED_MM, 0, .rows = (offs_)[e_], .width = (c_), .out = (oc_))
#define OPS_WORK_CALL_grouped_mm_bwd(dinp_, dw_, dout_, inp_, w_, offs_, e_, c_, oc_, xacc_, acc_) \
    OPS_WORK_(GROUPED_MM, 1, .rows = (offs_)[e_], .width = (c_), .out = (oc_),                     \
              .grad_in = (dinp_) != NULL)
#define OPS_WORK_CALL_add_rmsnorm_fwd(h_, out_, rstd_, x_, y_, w_, n_, c_, eps_)                   \
    OPS_WORK_(ADD_RMSNORM, 0, .rows = (n_), .width = (c_))
#define OPS_WORK_CALL_add_rmsnorm_bwd(dinp_, dw_, dout_, inp_, w_, rstd_, n_, c_, xacc_, acc_)     \
    OPS_WORK_(ADD_RMSNORM, 1, .rows = (n_), .width = (c_), .grad_written = !(xacc_))

#endif
