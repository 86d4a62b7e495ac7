/* The cost model (ops/work.c), one count for the profiler and `titan kernels bench`:
 *  - the figures `titan kernels bench --shape small` divides by (ops_conform_work), every op
 *    and phase, against numbers worked out here by hand from each op's tensors;
 *  - the same call through the profiler's wrappers (real kernels, events recorded) reports
 *    exactly the work the bench reports for it (each op had two formulas before, and they
 *    disagreed on embedding, rmsnorm, add_rmsnorm, rope and attention_kv);
 *  - the flags that change a count: matmul/grouped_mm backward without dinp, lmhead_ce
 *    without gradients, rope backward in place, attention_kv's cache length. */
#include <math.h>
#include <string.h>

#include "check.h"
#include "ops/ops.h"

/* The shape of `titan kernels bench --shape small` (ops/cli.c), stated here because the
 * figures below are worked out by hand for it. */
static const ops_ctx SMALL = {.batch = 1,
                              .seq_len = 64,
                              .dim = 64,
                              .n_heads = 4,
                              .n_kv_heads = 2,
                              .head_dim = 16,
                              .ffn_dim = 128,
                              .vocab = 512,
                              .n_experts = 8,
                              .top_k = 2,
                              .moe_ffn_dim = 32};

enum { NBUF = 10, BUF = 1 << 18 }; /* floats per buffer: >= the largest tensor below */

/* The work of the op events recorded since the last base_trace_start: what the profiler
 * reports (its trace args and summary table). */
static ops_work recorded(int *n_events) {
    size_t n, dropped;
    const base_trace_event *ev = base_trace_events(&n, &dropped);
    ops_work w = {0, 0};
    for (size_t i = 0; i < n; i++) {
        w.value += ev[i].flops + ev[i].bytes;
        if (ev[i].flops > 0) w.flops = 1;
        if (ev[i].flops > 0 && ev[i].bytes > 0) w.flops = -1; /* never both */
    }
    *n_events = (int)n;
    return w;
}

/* The calls `titan kernels bench` times for op k's phase (ops/conform.c, cf_run_*), made here
 * on table t with buffers f. */
static void bench_calls(const ops_table *t, ops_kind k, int bwd, float **f, const int32_t *tok,
                        float *w, float *dw, const int32_t *offs) {
    const ops_ctx *c = &SMALL;
    const int B = c->batch, T = c->seq_len, N = B * T, D = c->dim, H = c->n_heads,
              G = c->n_kv_heads, hd = c->head_dim, F = c->ffn_dim, V = c->vocab, E = c->n_experts,
              Fe = c->moe_ffn_dim;
    switch (k) {
    case OPS_EMBEDDING:
        if (!bwd)
            t->embedding_fwd(f[0], tok, f[1], N, D);
        else
            t->embedding_bwd(f[1], f[0], tok, N, D);
        break;
    case OPS_RMSNORM:
        if (!bwd)
            t->rmsnorm_fwd(f[0], f[1], f[2], f[3], N, D, 1e-6f);
        else
            t->rmsnorm_bwd(f[4], f[5], f[0], f[2], f[3], f[1], N, D, 1, 1);
        break;
    case OPS_ADD_RMSNORM:
        if (!bwd)
            t->add_rmsnorm_fwd(f[2], f[0], f[1], f[2], f[6], f[3], N, D, 1e-6f);
        else
            t->add_rmsnorm_bwd(f[4], f[5], f[0], f[2], f[3], f[1], N, D, 1, 1);
        break;
    case OPS_MATMUL:
        if (!bwd)
            t->matmul_fwd(f[0], f[1], f[2], N, D, F);
        else
            t->matmul_bwd(f[3], f[4], f[0], f[1], f[2], N, D, F, 0, 1);
        break;
    case OPS_ROPE:
        if (!bwd)
            t->rope_fwd(f[0], f[1], f[2], f[3], B, T, H, hd);
        else
            t->rope_bwd(f[4], f[0], f[2], f[3], B, T, H, hd);
        break;
    case OPS_ATTENTION:
        if (!bwd)
            t->attention_fwd(f[0], f[1], f[2], f[3], f[4], B, T, H, G, hd);
        else
            t->attention_bwd(f[5], f[6], f[7], f[8], f[0], f[1], f[2], f[3], f[4], B, T, H, G, hd,
                             0);
        break;
    case OPS_SWIGLU:
        if (!bwd)
            t->swiglu_fwd(f[0], f[1], f[2], N, F);
        else
            t->swiglu_bwd(f[3], f[4], f[0], f[1], f[2], N, F, 0);
        break;
    case OPS_LMHEAD_CE:
        t->lmhead_ce(f[2], f[3], f[0], f[1], tok, N, D, V, 1.0f / N, f[4], N, NULL, NULL, 1);
        break;
    case OPS_ADAMW:
        t->adamw(f[0], f[1], f[2], f[3], 1.0f, (size_t)V * D, 1e-4, 0.9, 0.95, 1e-8, 0.1, 0.0, 0,
                 3);
        break;
    case OPS_ATTENTION_KV: /* a decode step at the window's last position */
        t->attention_kv(f[0], f[1], f[2], f[3], 1, T - 1, H, G, hd);
        break;
    case OPS_GROUPED_MM: /* one MoE layer's gate, up, down */
        if (!bwd) {
            t->grouped_mm_fwd(f[1], f[0], w, offs, E, D, Fe);
            t->grouped_mm_fwd(f[2], f[0], w, offs, E, D, Fe);
            t->grouped_mm_fwd(f[4], f[3], w, offs, E, Fe, D);
        } else {
            t->grouped_mm_bwd(f[7], dw, f[4], f[3], w, offs, E, Fe, D, 0, 1);
            t->grouped_mm_bwd(f[5], dw, f[6], f[0], w, offs, E, D, Fe, 0, 1);
            t->grouped_mm_bwd(f[5], dw, f[7], f[0], w, offs, E, D, Fe, 1, 1);
        }
        break;
    default:
        break;
    }
}

int main(void) {
    const ops_ctx *c = &SMALL;
    base_err err;

    /* ---- 1. the bench's figures at --shape small, by hand -------------------------------
     * N = 64 tokens, D = 64, H/G = 4/2 heads of hd = 16, F = 128, V = 512, 8 experts, top 2,
     * expert width 32 (R = 128 routed rows). Bytes: 4 per fp32/int32 element, each tensor
     * read or written once; an accumulated gradient (+=) is read and written. */
    const struct {
        ops_kind k;
        int bwd;
        double want;
        int flops;
    } table[] = {
        /* ids 64 + wte rows 64x64 + out 64x64 */
        {OPS_EMBEDDING, 0, 4.0 * (64 + 4096 + 4096), 0},
        /* ids + dout + dwte rows read and written */
        {OPS_EMBEDDING, 1, 4.0 * (64 + 3 * 4096), 0},
        /* inp, out [64,64], rstd [64], w [64] */
        {OPS_RMSNORM, 0, 4.0 * (2 * 4096 + 64 + 64), 0},
        /* dout, inp, dinp twice [64,64]; rstd [64]; w, dw twice [64] */
        {OPS_RMSNORM, 1, 4.0 * (4 * 4096 + 64 + 3 * 64), 0},
        /* x, y, h, out [64,64], rstd, w */
        {OPS_ADD_RMSNORM, 0, 4.0 * (4 * 4096 + 64 + 64), 0},
        {OPS_ADD_RMSNORM, 1, 4.0 * (4 * 4096 + 64 + 3 * 64), 0},
        /* [64,64] @ [64,128]: 64*64*128 multiply-adds */
        {OPS_MATMUL, 0, 1048576, 1},
        {OPS_MATMUL, 1, 2 * 1048576.0, 1},
        /* x [1,64,4,16] = 4096 read and written, cos + sin [64, 8] each */
        {OPS_ROPE, 0, 4.0 * (2 * 4096 + 1024), 0},
        /* dout read, dinp read and written (a separate buffer: accumulated) */
        {OPS_ROPE, 1, 4.0 * (3 * 4096 + 1024), 0},
        /* 4 heads x (QK^T + PV: 2 x 64x64x16 MACs, halved by the mask) x 2 FLOPs */
        {OPS_ATTENTION, 0, 4 * (2 * 64 * 64 * 16 / 2) * 2.0, 1},
        /* five such products */
        {OPS_ATTENTION, 1, 4 * (5 * 64 * 64 * 16 / 2) * 2.0, 1},
        /* gate, up, out [64,128] */
        {OPS_SWIGLU, 0, 4.0 * 3 * 8192, 0},
        /* dout, gate, up, dgate, dup (written: dx_acc 0, as the block and the bench call it) */
        {OPS_SWIGLU, 1, 4.0 * 5 * 8192, 0},
        /* logits, dx, dw: 3 x 64*64*512 MACs */
        {OPS_LMHEAD_CE, 0, 3 * 2.0 * 64 * 64 * 512, 1},
        /* p, m, v twice, g once, over the embedding's 512 x 64 (the largest tensor) */
        {OPS_ADAMW, 0, 4.0 * 7 * 32768, 0},
        /* q, out [1,4,16]; k, v rows 0..63 of [*, 2, 16] */
        {OPS_ATTENTION_KV, 0, 4.0 * (2 * 64 + 2 * 64 * 32), 0},
        /* 128 rows: gate, up (64 -> 32) and down (32 -> 64), 128*64*32 MACs each */
        {OPS_GROUPED_MM, 0, 3 * 2.0 * 128 * 64 * 32, 1},
        {OPS_GROUPED_MM, 1, 2 * 3 * 2.0 * 128 * 64 * 32, 1},
    };
    const int n_rows = (int)(sizeof table / sizeof table[0]);
    CHECK(table[0].want == 33024 && table[3].want == 66560 && table[16].want == 16896,
          "the hand sums above: %g %g %g", table[0].want, table[3].want, table[16].want);
    for (int i = 0; i < n_rows; i++) {
        const ops_work w = ops_conform_work(table[i].k, c, table[i].bwd);
        CHECK(w.value == table[i].want && w.flops == table[i].flops,
              "bench %s %s: %.17g %s, by hand %.17g %s", ops_kind_name(table[i].k),
              table[i].bwd ? "bwd" : "fwd", w.value, w.flops ? "FLOPs" : "bytes", table[i].want,
              table[i].flops ? "FLOPs" : "bytes");
        CHECK(ops_work_flops(table[i].k) == table[i].flops, "%s's unit", ops_kind_name(table[i].k));
    }
    int covered[OPS_COUNT] = {0};
    for (int i = 0; i < n_rows; i++) covered[table[i].k] = 1;
    for (int k = 0; k < OPS_COUNT; k++)
        CHECK(covered[k], "op %s has no hand-computed figure", ops_kind_name((ops_kind)k));

    /* ---- 2. the profiler reports the bench's work for the bench's calls -------------------
     * Real kernels, resolved for one unit and wrapped by the profiler. */
    const char *paths[1] = {"layers.0"};
    ops_table t, orig;
    CHECK(ops_resolve_units(&t, paths, NULL, 1, c, NULL, 0, &err) == 0, "%s", err.msg);
    orig = t;
    float *f[NBUF];
    for (int j = 0; j < NBUF; j++) {
        f[j] = malloc(sizeof(float) * BUF);
        if (!f[j]) return 2;
        for (int i = 0; i < BUF; i++) /* >= 0: AdamW's v, a norm's saved rstd */
            f[j][i] = 0.5f * base_rng_uniform(10 + (uint64_t)j, 0, (uint64_t)i);
    }
    const int E = c->n_experts, R = c->batch * c->seq_len * c->top_k;
    int32_t tok[64], offs[9];
    for (int i = 0; i < 64; i++) tok[i] = (i * 37) % c->vocab;
    for (int e = 0; e <= E; e++) offs[e] = R * e / E;
    float *w = f[8], *dw = f[9]; /* expert stacks [8, 32, 64] */
    CHECK(ops_prof_attach(&t, paths, 1, &err) == 0, "%s", err.msg);
    ops_prof_unit(0);
    for (int i = 0; i < n_rows; i++) {
        base_trace_start();
        bench_calls(&t, table[i].k, table[i].bwd, f, tok, w, dw, offs);
        base_trace_stop();
        int n_ev;
        const ops_work got = recorded(&n_ev);
        const ops_work want = ops_conform_work(table[i].k, c, table[i].bwd);
        CHECK(n_ev == (table[i].k == OPS_GROUPED_MM ? 3 : 1), "%d events", n_ev);
        CHECK(got.value == want.value && got.flops == want.flops,
              "%s %s: profiler %.17g %s, bench %.17g %s", ops_kind_name(table[i].k),
              table[i].bwd ? "bwd" : "fwd", got.value, got.flops ? "FLOPs" : "bytes", want.value,
              want.flops ? "FLOPs" : "bytes");
    }

    /* ---- 3. what the arguments change ---------------------------------------------------- */
    int n_ev;
    base_trace_start(); /* matmul backward without dinp: dW only */
    t.matmul_bwd(NULL, f[4], f[0], f[1], f[2], 64, 64, 128, 1, 1);
    base_trace_stop();
    CHECK(recorded(&n_ev).value == 1048576, "matmul_bwd without dinp: the dW product only");
    base_trace_start(); /* grouped_mm likewise */
    t.grouped_mm_bwd(NULL, dw, f[4], f[3], w, offs, E, 32, 64, 1, 1);
    base_trace_stop();
    CHECK(recorded(&n_ev).value == 2.0 * 128 * 32 * 64, "grouped_mm_bwd without dinp");
    base_trace_start(); /* lmhead_ce without gradients: the logits only */
    t.lmhead_ce(NULL, NULL, f[0], f[1], tok, 64, 64, 512, 0, f[4], 64, NULL, NULL, 1);
    base_trace_stop();
    CHECK(recorded(&n_ev).value == 2.0 * 64 * 64 * 512, "lmhead_ce forward-only");
    base_trace_start(); /* rope backward in place: dout read, the result written over it */
    t.rope_bwd(f[0], f[0], f[2], f[3], 1, 64, 4, 16);
    base_trace_stop();
    CHECK(recorded(&n_ev).value == 4.0 * (2 * 4096 + 1024), "rope_bwd in place");
    base_trace_start(); /* input gradients written (dx_acc 0): written only, not read */
    t.rmsnorm_bwd(f[4], f[5], f[0], f[2], f[3], f[1], 64, 64, 0, 1);
    base_trace_stop();
    CHECK(recorded(&n_ev).value == 4.0 * (3 * 4096 + 64 + 3 * 64), "rmsnorm_bwd, dinp written");
    base_trace_start();
    t.swiglu_bwd(f[3], f[4], f[0], f[1], f[2], 64, 128, 1);
    base_trace_stop();
    CHECK(recorded(&n_ev).value == 4.0 * 7 * 8192, "swiglu_bwd, dgate and dup added");
    base_trace_start(); /* a prefill chunk: 16 queries at positions 100..115 */
    t.attention_kv(f[0], f[1], f[2], f[3], 16, 100, 4, 2, 16);
    base_trace_stop();
    CHECK(recorded(&n_ev).value == 4.0 * (2 * 16 * 64 + 2 * 116 * 32), "attention_kv prefill");
    ops_prof_detach();
    CHECK(!memcmp(&t, &orig, sizeof t), "detach restores the table");

    /* the counting table sums a sequence of calls, and counts nothing once released */
    ops_table cnt;
    ops_work acc = {0, 0};
    ops_work_counter(&cnt, &acc);
    cnt.matmul_fwd(NULL, NULL, NULL, 3, 5, 7);
    cnt.matmul_fwd(NULL, NULL, NULL, 2, 5, 7);
    CHECK(acc.value == 2.0 * 5 * 5 * 7 && acc.flops == 1, "counted %g", acc.value);
    ops_work_counter(&cnt, NULL);
    cnt.matmul_fwd(NULL, NULL, NULL, 3, 5, 7);
    CHECK(acc.value == 2.0 * 5 * 5 * 7, "counted after release");
    /* the unit of an empty call is still the op's */
    CHECK(ops_work_of(OPS_MATMUL, 0, &(ops_work_args){0}).flops == 1 &&
              ops_work_of(OPS_RMSNORM, 0, &(ops_work_args){0}).flops == 0,
          "units of empty calls");

    for (int j = 0; j < NBUF; j++) free(f[j]);
    ops_release(&t);
    return check_report("test_work");
}
