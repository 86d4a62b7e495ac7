/* ops: the cost model, the work of one op call (see ops.h), shared by the profiler (prof.c)
 * and `titan kernels bench` (conform.c).
 *
 * Units. GEMM-like ops count FLOPs, 2 per multiply-add of their products (an [M,K] x [K,N]
 * product is 2 M N K); the elementwise work around them (softmax's exp, the loss) is left
 * out, as every FLOP count of a model does. Memory-bound ops count bytes: the minimum each
 * must read and write, every tensor touched once, 4 bytes per element (every buffer at the ops
 * interface is fp32, and token ids are int32; bf16 implementations take fp32 too). A gradient
 * the backward ACCUMULATES into (+=, oplist.h) is read and written: 2 passes; one written
 * (dx_acc 0: grad_written) 1.
 *
 * Attention counts the causal half of its T x T products, as the flash-attention papers do
 * and as the kernels compute (masked tiles are skipped). This is the work executed per call,
 * backward's recomputation of the probabilities included; it is not the model-FLOPs figure
 * that MFU divides by (model_flops_per_token, src/model/qwen3.c: torchtitan's 6 x params +
 * 12 L H hd T per token, which counts the whole T x T square, forward 4 and backward 8 per
 * score, and no recomputation). The two answer different questions and neither changes the
 * other.
 *
 * Where the profiler and the bench used to disagree (each had its own formulas), the counts
 * here are the ones derived below; what changed and why is in docs/profiling.md. */
#include <string.h>

#include "ops/internal.h"

int ops_work_flops(ops_kind k) {
    return k == OPS_MATMUL || k == OPS_GROUPED_MM || k == OPS_ATTENTION || k == OPS_LMHEAD_CE;
}

/* elements -> bytes */
#define F32 4.0

ops_work ops_work_of(ops_kind k, int bwd, const ops_work_args *a) {
    const double N = a->rows, C = a->width, OC = a->out, B = a->batch, T = a->seq, H = a->heads,
                 G = a->kv_heads, hd = a->head_dim;
    double w = 0;
    switch (k) {
    case OPS_EMBEDDING:
        /* fwd: reads the token ids [N] (int32) and one wte row [C] per token (a row is counted
         * per token: which ids repeat is data), writes out [N,C]: N + 2 N C.
         * bwd: reads the ids and dout [N,C], reads and writes (+=) the dwte row of each
         * token: N + 3 N C. */
        w = F32 * (N + (bwd ? 3 : 2) * N * C);
        break;
    case OPS_RMSNORM:
        /* fwd: reads inp [N,C] and w [C], writes out [N,C] and rstd [N]: 2 N C + N + C.
         * bwd: reads dout, inp [N,C], w [C], rstd [N]; dinp [N,C] and dw [C] accumulate
         * (read + write): 4 N C + N + 3 C; dinp written: 3 N C + N + 3 C. */
        w = F32 * (bwd ? (a->grad_written ? 3 : 4) * N * C + N + 3 * C : 2 * N * C + N + C);
        break;
    case OPS_ADD_RMSNORM:
        /* fwd: reads x, y [N,C] and w [C], writes h, out [N,C] and rstd [N] (h may alias x:
         * the stream is still read once and written once): 4 N C + N + C.
         * bwd: rmsnorm's (the add passes its gradient through): 4 N C + N + 3 C (dh written:
         * 3 N C + N + 3 C). */
        w = F32 * ((bwd && a->grad_written ? 3 : 4) * N * C + N + (bwd ? 3 : 1) * C);
        break;
    case OPS_ROPE: {
        /* x [B,T,nh,hd] (heads = nh), tables cos, sin [T, hd/2] each: T hd together.
         * fwd: reads inp, writes out (out may alias inp: one read, one write either way):
         * 2 B T nh hd + T hd.
         * bwd: reads dout, writes dinp, and reads dinp too when it accumulates (+=) into a
         * separate buffer; in place (dinp == dout) the result replaces dout:
         * (2 or 3) B T nh hd + T hd. */
        const double x = B * T * H * hd;
        w = F32 * ((bwd && !a->in_place ? 3 : 2) * x + T * hd);
        break;
    }
    case OPS_SWIGLU:
        /* fwd: reads gate, up [N,F], writes out [N,F]: 3 N F (F = width).
         * bwd: reads dout, gate, up; dgate and dup accumulate (read + write): 7 N F; written:
         * 5 N F. */
        w = F32 * (bwd ? (a->grad_written ? 5 : 7) : 3) * N * C;
        break;
    case OPS_ADAMW:
        /* p, m, v read and written, g read: 7 n. */
        w = F32 * 7 * a->elems;
        break;
    case OPS_ATTENTION_KV:
        /* Bytes: its main call, a decode step (T = 1), does 4 H hd FLOPs per key for 2 G hd
         * floats of K and V read, H / (2 G) FLOP per byte: memory-bound on any CPU, and the
         * STREAM triad is its bound. Reads q [T,H,hd] and the cache rows of positions
         * 0..pos0+T-1 of k and v [pos0+T, G, hd] each, writes out [T,H,hd]:
         * 2 T H hd + 2 (pos0 + T) G hd. */
        w = F32 * (2 * T * H * hd + 2 * (a->pos0 + T) * G * hd);
        break;
    case OPS_MATMUL:
    case OPS_GROUPED_MM:
        /* out [N,OC] = inp [N,C] @ w^T: 2 N C OC (grouped_mm: N rows over all experts, each
         * row multiplied by its expert's [OC,C]: the same count). bwd: dW = dout^T @ inp,
         * 2 N C OC, and dinp = dout @ w, 2 N C OC more when it is formed. */
        w = 2 * N * C * OC * (bwd && a->grad_in ? 2 : 1);
        break;
    case OPS_ATTENTION:
        /* Per (batch, head): S = Q K^T and O = P V, each 2 T T hd over the full square, half
         * of it under the causal mask: 2 T T hd for the two. bwd recomputes S (then P from
         * the saved lse) and forms dV = P^T dO, dP = dO V^T, dQ = dS K, dK = dS^T Q: five
         * causal products, 5 T T hd. GQA shares K, V between heads but not the products. */
        w = B * H * T * T * hd * (bwd ? 5 : 2);
        break;
    case OPS_LMHEAD_CE:
        /* logits [N,V] = x [N,D] @ w [V,D]^T: 2 N D V (V = out: this rank's vocabulary
         * shard under loss parallelism); with gradients, dx = G @ w and dw = G^T @ x:
         * 2 N D V each, 6 N D V. */
        w = 2 * N * C * OC * (a->grad_in ? 3 : 1);
        break;
    case OPS_COUNT: /* no default: a new op without a formula is a -Wswitch error */
        break;
    }
    return (ops_work){.value = w, .flops = ops_work_flops(k)};
}

/* ---- the counting table ------------------------------------------------------------------ */

static ops_work *g_acc;

static void work_add(ops_work w) {
    if (!g_acc) return;
    g_acc->value += w.value;
    g_acc->flops = w.flops;
}

#define WORK_RET_void
#define WORK_RET_double 0
#define WORK_FN_FB(K, name, sub, plg, fp, fa, bp, ba)                                              \
    static void work_##name##_fwd fp {                                                             \
        work_add(OPS_WORK_CALL_##name##_fwd fa);                                                   \
    }                                                                                              \
    static void work_##name##_bwd bp {                                                             \
        work_add(OPS_WORK_CALL_##name##_bwd ba);                                                   \
    }
#define WORK_FN_F(K, name, sub, plg, ret, p, a)                                                    \
    static ret work_##name p {                                                                     \
        work_add(OPS_WORK_CALL_##name a);                                                          \
        return WORK_RET_##ret;                                                                     \
    }
OPS_LIST(WORK_FN_FB, WORK_FN_F)
#undef WORK_FN_FB
#undef WORK_FN_F

void ops_work_counter(ops_table *t, ops_work *acc) {
    memset(t, 0, sizeof *t);
    g_acc = acc;
#define WORK_SET_FB(K, name, ...)                                                                  \
    t->name##_fwd = work_##name##_fwd;                                                             \
    t->name##_bwd = work_##name##_bwd;
#define WORK_SET_F(K, name, ...) t->name = work_##name;
    OPS_LIST(WORK_SET_FB, WORK_SET_F)
#undef WORK_SET_FB
#undef WORK_SET_F
}
