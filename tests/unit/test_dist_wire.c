/* dist_allgather_f32's DIST_BF16 transport on one process (the TP all-gathers of a bf16 run;
 * tests/scripts/dist_tp.sh runs it over 2 ranks): every received value is its send value
 * rounded to bf16 (round to nearest, ties to even), checked bit for bit against a rounding
 * computed here another way (the two bf16 neighbours compared in double), for lengths that
 * exercise the in-place expansion's halving passes (0, 1, odd, even, and past the 65536 at
 * which the conversion runs in parallel), with ties, subnormals, zeros of both signs and
 * infinities; every element of recv is written (a stale value would show). DIST_F32 moves the
 * values unchanged.
 * titan plan's bf16 share of the TP / EP traffic, against what the profiled runs of
 * tests/scripts/dist_tp.sh and dist_ep.sh count on the same shapes: 13 (tied, no AC) and 17 + the
 * lm_head weight (untied, full AC, loss parallel off) all-gathers of [64,64] halved, and (MoE,
 * full AC) 6 dispatches of 128 routed rows of 64 plus 4 returns of the expert outputs (forward
 * and recompute; 128 rows each under the plan's balanced routing, the rows the experts
 * received in a real run); a ring over 2 ranks receives half of a gathered buffer; the fp32
 * plan's bytes are the bf16 plan's plus that share saved again. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base/base.h"
#include "check.h"
#include "distributed/dist.h"
#include "train/train.h"

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* bf16(x) for finite x whose rounding stays finite, and infinities: the neighbours with the
 * low 16 bits cleared (toward zero) and one bf16 step away from zero, the nearer one in exact
 * double arithmetic, on a tie the one whose last bf16 bit is 0. */
static float ref_round(float x) {
    if (isinf(x)) return x;
    const uint32_t lo = bits(x) & 0xffff0000u, hi = lo + 0x10000u;
    const double dl = fabs((double)x - from_bits(lo)), dh = fabs((double)from_bits(hi) - x);
    if (dl < dh) return from_bits(lo);
    if (dh < dl) return from_bits(hi);
    return from_bits(lo & 0x10000u ? hi : lo);
}

/* Element i of a test vector: mostly normals of varied scale, with the special cases mixed in. */
static float value(size_t i) {
    switch (i % 11) {
    case 3: /* an exact tie: the discarded half is 0x8000 */
        return from_bits((bits(base_rng_normal(7, 1, i)) & 0xffff0000u) | 0x8000u);
    case 5: /* subnormal */
        return from_bits((uint32_t)(i * 2654435761u) & 0x007fffffu);
    case 7:
        return i % 2 ? -0.0f : 0.0f;
    case 9:
        return i % 4 == 1 ? INFINITY : -INFINITY;
    default:
        return base_rng_normal(7, 2, i) * ldexpf(1.0f, (int)(i % 40) - 20);
    }
}

/* Plans the test scripts' shapes (dist_common.sh's small model, batch 2 x 32 tokens) on 2
 * ranks in prec: tp = 2, or (moe) ep = 2 with 4 experts, top-2. */
static train_plan plan_of(ops_prec prec, int tied, int full_ac, int lp_off, int moe) {
    model_args a;
    base_err e = {{0}};
    CHECK(model_flavor("debugmodel", &a, &e) == 0, "flavor: %s", e.msg);
    a.n_layers = 2, a.dim = 64, a.n_heads = 4, a.n_kv_heads = 2, a.head_dim = 16;
    a.ffn_dim = 128, a.vocab_size = 300, a.tie_embeddings = tied;
    if (moe) a.n_experts = 4, a.top_k = 2, a.moe_ffn_dim = 32;
    const train_plan_in in = {.model = a,
                              .world = 2,
                              .batch = 2,
                              .seq_len = 32,
                              .grad_accum = 1,
                              .par = {1, -1, moe ? 1 : 2, 1, 1, moe ? 2 : 1},
                              .ac = full_ac ? MODEL_AC_FULL : MODEL_AC_NONE,
                              .loss_parallel_off = lp_off,
                              .prec = prec};
    train_plan p;
    CHECK(train_plan_compute(&in, &p, &e) == 0, "plan: %s", e.msg);
    return p;
}

static void test_plan(void) {
    const double nd = 64.0 * 64 * 4, head = 300.0 * 64 * 4, rows = 128.0 * 64 * 4;
    const struct {
        int tied, full_ac, lp_off, moe;
        double halved; /* fp32 bytes of the buffers moved in bf16 (whole) */
    } c[] = {{1, 0, 0, 0, 13 * nd}, {0, 1, 1, 0, 17 * nd + head}, {0, 1, 0, 1, (6 + 4) * rows}};
    for (int i = 0; i < 3; i++) {
        const train_plan p32 =
                             plan_of(OPS_PREC_F32, c[i].tied, c[i].full_ac, c[i].lp_off, c[i].moe),
                         p16 =
                             plan_of(OPS_PREC_BF16, c[i].tied, c[i].full_ac, c[i].lp_off, c[i].moe);
        const double want = c[i].halved / 2 / 2; /* ring over 2: half; bf16: half of that */
        const double got = c[i].moe ? p16.ep_bf16_bytes : p16.tp_bf16_bytes,
                     t16 = c[i].moe ? p16.ep_bytes : p16.tp_bytes,
                     t32 = c[i].moe ? p32.ep_bytes : p32.tp_bytes;
        CHECK(got == want, "case %d: plan's bf16 share %.0f B, measured %.0f B", i, got, want);
        CHECK(t32 == t16 + want, "case %d: fp32 %.0f B, bf16 %.0f B", i, t32, t16);
        CHECK(p32.tp_bf16_bytes == 0 && p32.ep_bf16_bytes == 0, "case %d: bf16 in fp32", i);
    }
}

int main(void) {
    base_err err;
    dist_mesh mesh;
    const dist_mesh_cfg one = {.dp_replicate = 1, .dp_shard = 1, .tp = 1, .pp = 1, .cp = 1};
    CHECK(dist_mesh_init(&mesh, &one, &err) == 0, "mesh: %s", err.msg);
    const size_t lens[] = {0, 1, 2, 3, 5, 8, 17, 1000, 65537, 131073, 200000};
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        const size_t n = lens[li];
        float *send = base_alloc((n + 1) * sizeof(float)), *recv = base_alloc((n + 1) * 4);
        for (size_t i = 0; i < n; i++) send[i] = value(i);
        for (size_t t = 0; t < 2; t++) {
            memset(recv, 0x7f, (n + 1) * sizeof(float)); /* stale values: 3.4e38 */
            recv[n] = 42.0f;
            dist_allgather_f32(mesh.tp_comm, send, recv, n, t ? DIST_BF16 : DIST_F32);
            size_t bad = 0, first = 0;
            for (size_t i = 0; i < n; i++) {
                const float want = t ? ref_round(send[i]) : send[i];
                if (bits(recv[i]) != bits(want) && !bad++) first = i;
            }
            CHECK(bad == 0, "%s, n %zu: %zu values differ, first [%zu] %a -> %a (want %a)",
                  t ? "bf16" : "fp32", n, bad, first, send[first], recv[first],
                  t ? ref_round(send[first]) : send[first]);
            CHECK(recv[n] == 42.0f, "n %zu: wrote past the end", n);
        }
        base_free(send);
        base_free(recv);
    }
    /* NaN stays NaN (quiet) */
    float nan_in = NAN, nan_out = 0;
    dist_allgather_f32(mesh.tp_comm, &nan_in, &nan_out, 1, DIST_BF16);
    CHECK(isnan(nan_out), "NaN became %g", nan_out);
    dist_mesh_free(&mesh);
    test_plan();
    return check_report("test_dist_wire");
}
