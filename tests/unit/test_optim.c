/* LR schedule (torchtitan's worked example and formula cases), clipping, sum of squares. */
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "optim/optim.h"

#include "check.h"

static void check_schedule(const char *name, optim_lr_cfg c, const double *want, int n) {
    double worst = 0;
    for (int s = 0; s < n; s++) {
        double f = optim_lr_factor(&c, s);
        worst = fmax(worst, fabs(f - want[s]));
        CHECK(fabs(f - want[s]) < 1e-12, "%s: f(%d) = %.15g, want %.15g", name, s, f, want[s]);
    }
    printf("lr %-28s max |err| %.2e\n", name, worst);
}

/* bf16 of x, round to nearest even (finite x), as bits */
static uint16_t bf16_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* AdamW refreshing a bf16 copy (optim_bf16_copy): the parameters and moments are bitwise those
 * of the step without a copy; inside the ranges the copy holds each new parameter rounded to
 * bf16 in the engine's format (2-byte bits, or the rounded fp32 value), and not one byte
 * outside them is written. Ranges start and end inside and on the step's blocks. The step has
 * three parameter groups (optim_span: other lr, betas, eps, weight decay, one Adam's; one of one
 * element, boundaries inside a block), each stepped as its own optimizer over its own elements
 * would step them, at lr x the schedule's factor. */
static void check_adamw_copy(int bf16) {
    const size_t n = 100003;
    const optim_range r[] = {{3, 16390}, {16390, 16391}, {40000, 40001}, {49152, 98000}};
    const int nr = 4;
    const size_t es = ops_bf16_mirror_bytes(1);
    float *p[2], *g = malloc(n * sizeof(float));
    unsigned char *copy = malloc(n * es);
    optim_adamw o[2];
    base_err err;
    for (int k = 0; k < 2; k++) {
        p[k] = malloc(n * sizeof(float));
        CHECK(!optim_adamw_init(&o[k], n, bf16, &err), "adamw init: %s", err.msg);
        for (size_t i = 0; i < n; i++) p[k][i] = (float)sin(0.001 * (double)i) * 0.02f;
    }
    memset(copy, 0xA5, n * es);
    const optim_adamw_cfg cfg[3] = {
        {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1},
        {.lr = 3e-3, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-6},
        {.lr = 1e-4, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01, .adam = 1}};
    /* the last: Adam, coupled (L2) decay */
    const optim_span span[3] = {{.lo = 0, .hi = 70000, .c = &cfg[0]},
                                {.lo = 70000, .hi = 70001, .c = &cfg[1]},
                                {.lo = 70001, .hi = n, .c = &cfg[2]}};
    const double factor = 0.7;
    /* the reference: each group its own optimizer over its own elements, lr pre-multiplied */
    optim_adamw ref[3];
    float *pr = malloc(n * sizeof(float));
    memcpy(pr, p[0], n * sizeof(float));
    optim_adamw_cfg rc[3];
    for (int k = 0; k < 3; k++) {
        CHECK(!optim_adamw_init(&ref[k], span[k].hi - span[k].lo, bf16, &err), "adamw init: %s",
              err.msg);
        rc[k] = cfg[k];
        rc[k].lr = cfg[k].lr * factor;
    }
    size_t bad_groups = 0;
    const size_t ms = optim_moment_bytes(&o[0]); /* a moment element's bytes */
    const optim_bf16_copy c16 = {copy, r, nr};
    size_t bad_p = 0, bad_copy = 0, bad_outside = 0;
    for (int step = 1; step <= 3; step++) {
        for (size_t i = 0; i < n; i++) g[i] = (float)cos(0.37 * (double)(i + step)) * 1e-2f;
        optim_adamw_step(&o[0], p[0], g, 0.5f, span, 3, factor, NULL);
        optim_adamw_step(&o[1], p[1], g, 0.5f, span, 3, factor, &c16);
        for (int k = 0; k < 3; k++) {
            const size_t lo = span[k].lo, len = span[k].hi - lo;
            const optim_span one = {.lo = 0, .hi = len, .c = &rc[k]};
            optim_adamw_step(&ref[k], pr + lo, g + lo, 0.5f, &one, 1, 1.0, NULL);
            bad_groups += memcmp(pr + lo, p[0] + lo, len * sizeof(float)) != 0;
            bad_groups += memcmp(ref[k].m, (char *)o[0].m + lo * ms, len * ms) != 0;
            bad_groups += memcmp(ref[k].v, (char *)o[0].v + lo * ms, len * ms) != 0;
        }
        bad_p += memcmp(p[0], p[1], n * sizeof(float)) != 0;
        bad_p += memcmp(o[0].m, o[1].m, n * ms) != 0;
        bad_p += memcmp(o[0].v, o[1].v, n * ms) != 0;
        for (size_t i = 0, k = 0; i < n; i++) {
            while (k < (size_t)nr && r[k].hi <= i) k++;
            const int in = k < (size_t)nr && r[k].lo <= i;
            const unsigned char *e = copy + i * es;
            if (!in) {
                for (size_t b = 0; b < es; b++) bad_outside += e[b] != 0xA5;
                continue;
            }
            const uint16_t want = bf16_bits(p[0][i]);
            if (es == 2) {
                uint16_t got;
                memcpy(&got, e, 2);
                bad_copy += got != want;
            } else {
                uint32_t got;
                memcpy(&got, e, 4);
                bad_copy += got != (uint32_t)want << 16;
            }
        }
    }
    CHECK(bad_p == 0, "adamw with a bf16 copy: parameters or moments differ (%zu)", bad_p);
    CHECK(bad_groups == 0,
          "adamw parameter groups: %zu group-steps differ from the group's own "
          "optimizer",
          bad_groups);
    CHECK(bad_copy == 0, "adamw bf16 copy: %zu elements not the new parameter in bf16", bad_copy);
    CHECK(bad_outside == 0, "adamw bf16 copy: %zu bytes written outside the ranges", bad_outside);
    printf("adamw bf16 copy (%zu-byte elements, engine %s), 3 parameter groups, %s moments: 3 "
           "steps bitwise, copy exact\n",
           es, ops_bf16_engine(), bf16 ? "bf16" : "fp32");
    for (int k = 0; k < 3; k++) optim_adamw_free(&ref[k]);
    free(pr);
    for (int k = 0; k < 2; k++) {
        optim_adamw_free(&o[k]);
        free(p[k]);
    }
    free(g);
    free(copy);
}

int main(void) {
    /* Spec §4.3 worked example: N=10, W=2, decay_ratio 0.8 (or None), linear, min 0. */
    const double ex[10] = {0.5, 1, 1, .875, .75, .625, .5, .375, .25, .125};
    check_schedule("worked example (ratio 0.8)",
                   (optim_lr_cfg){2, 10, 0.8, OPTIM_DECAY_LINEAR, 0.0}, ex, 10);
    check_schedule("worked example (ratio None)",
                   (optim_lr_cfg){2, 10, -1, OPTIM_DECAY_LINEAR, 0.0}, ex, 10);

    /* N=10, W=2, ratio 0.5 -> Dk=5, S=4: warmup 0.5, 1; stable s=2..5; decay p=(s-5)/5. */
    double want[10];
    for (int s = 0; s < 10; s++) {
        double p = (s + 1 - 6) / 5.0;
        double f = s < 2 ? (s + 1) / 2.0 : s < 6 ? 1.0 : 0.1 + 0.9 * 0.5 * (1 + cos(M_PI * p));
        want[s] = f;
    }
    check_schedule("cosine, ratio 0.5, min 0.1",
                   (optim_lr_cfg){2, 10, 0.5, OPTIM_DECAY_COSINE, 0.1}, want, 10);
    for (int s = 0; s < 10; s++) {
        double p = (s + 1 - 6) / 5.0;
        want[s] = s < 2 ? (s + 1) / 2.0 : s < 6 ? 1.0 : 1 - sqrt(p);
    }
    check_schedule("sqrt, ratio 0.5", (optim_lr_cfg){2, 10, 0.5, OPTIM_DECAY_SQRT, 0.0}, want, 10);
    /* Python round() is half-to-even: N=10, ratio 0.25 -> round(2.5) = 2 decay steps, S = 7. */
    for (int s = 0; s < 10; s++) want[s] = s < 2 ? (s + 1) / 2.0 : s < 9 ? 1.0 : 0.5;
    check_schedule("round half to even", (optim_lr_cfg){2, 10, 0.25, OPTIM_DECAY_LINEAR, 0}, want,
                   10);
    /* Warmup + decay longer than the run: decay is cut to N - W. */
    for (int s = 0; s < 4; s++) want[s] = s < 3 ? (s + 1) / 3.0 : 1.0;
    check_schedule("warmup+decay > N", (optim_lr_cfg){3, 4, 0.9, OPTIM_DECAY_LINEAR, 0}, want, 4);

    /* Past total_steps (lr_scheduler.total_steps < training.steps): torchtitan's LambdaLR
     * evaluates the same formula beyond its end, unclamped. N=3, W=1 -> Dk=2, S=1: decay
     * p = (s+1-2)/2, so linear goes 0.5, 0, -0.5, -1 and cosine (min 0.1) 0.55, 0.1, 0.55, 1
     * (torchtitan v0.2.2 with torch gives these factors). */
    const double lin[6] = {1, 1, 0.5, 0, -0.5, -1};
    check_schedule("linear past total_steps", (optim_lr_cfg){1, 3, -1, OPTIM_DECAY_LINEAR, 0}, lin,
                   6);
    const double cosv[6] = {1, 1, 0.55, 0.1, 0.55, 1};
    check_schedule("cosine past total_steps", (optim_lr_cfg){1, 3, -1, OPTIM_DECAY_COSINE, 0.1},
                   cosv, 6);

    /* Clipping: coef = max_norm / (norm + 1e-6), capped at 1; pre-clip norm returned. */
    float g[4] = {3, 4, 0, 0};
    double ss = optim_sumsq(g, 4);
    CHECK(ss == 25.0, "sumsq %g", ss);
    double norm;
    const float coef = optim_clip_coef(ss, 1.0, &norm);
    CHECK(norm == 5.0, "norm %g", norm);
    CHECK(coef == (float)(1.0 / (5 + 1e-6)), "clip coefficient %.9g", coef);
    float h[2] = {0.3f, 0.4f};
    CHECK(optim_clip_coef(optim_sumsq(h, 2), 1.0, &norm) == 1.0f, "no clip below max_norm");

    /* sumsq over a long vector is exact enough and independent of the thread count. */
    size_t n = 1000003;
    float *v = malloc(n * sizeof(float));
    double ref = 0;
    for (size_t i = 0; i < n; i++) {
        v[i] = (float)((i % 97) - 48) / 64.0f;
        ref += (double)v[i] * v[i];
    }
    double s1 = optim_sumsq(v, n);
    CHECK(fabs(s1 - ref) / ref < 1e-12, "sumsq %.17g vs %.17g", s1, ref);
    free(v);

    check_adamw_copy(0);
    check_adamw_copy(1); /* fused_opt_states_bf16 */

    printf(failures ? "FAILED: %d checks\n" : "all checks passed\n", failures);
    return failures != 0;
}
