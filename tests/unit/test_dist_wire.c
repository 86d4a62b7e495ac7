/* dist_allgather_f32's DIST_BF16 transport on one process (the TP all-gathers of a bf16 run;
 * tests/scripts/dist_tp.sh runs it over 2 ranks): every received value is its send value
 * rounded to bf16 (round to nearest, ties to even), checked bit for bit against a rounding
 * computed here another way (the two bf16 neighbours compared in double), for lengths that
 * exercise the in-place expansion's halving passes (0, 1, odd, even, and past the 65536 at
 * which the conversion runs in parallel), with ties, subnormals, zeros of both signs and
 * infinities; every element of recv is written (a stale value would show). DIST_F32 moves the
 * values unchanged. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base/base.h"
#include "distributed/dist.h"
#include "check.h"

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
    return check_report("test_dist_wire");
}
