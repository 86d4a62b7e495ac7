/* titan's code leaves the upper halves of the vector registers clean (the XINUSE bits of the
 * AVX and ZMM_Hi256 state, XGETBV ECX = 1, both 0) when it returns. glibc's log() enters
 * through an SSE-encoded wrapper, which runs 40x slower (3 -> 120 ns a call, Intel Xeon with
 * AMX, a KVM guest) while they are dirty: GCC 12 left dist_tp_pieces_init without a vzeroupper
 * after a struct argument built in a ymm register, and Qwen3-0.6B's random init
 * (base_rng_normal: log and cos a weight), run right after it, took 40 s instead of 8.7.
 * Checked after the setup calls `titan train` makes before the init, the init itself and a
 * training microbatch. Skipped (exit 0, said) where XGETBV cannot report the state, and in builds
 * below -O2 or for size (make asan's Debug build): GCC 12 emits no vzeroupper at all there
 * (flag_expensive_optimizations), so such a build is slow this way throughout, by design. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "distributed/dist.h"
#include "model/model.h"

#if defined(__x86_64__) && defined(__OPTIMIZE__) && !defined(__OPTIMIZE_SIZE__)
#define TEST_XINUSE 1
#else
#define TEST_XINUSE 0
#endif
#if TEST_XINUSE
#include <cpuid.h>

/* 1 when XGETBV with ECX = 1 reports XINUSE (CPUID.(EAX=0DH, ECX=1):EAX bit 2) */
static int xinuse_known(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE) || !(c & bit_AVX)) return 0;
    if (__get_cpuid_max(0, NULL) < 0xd) return 0;
    __cpuid_count(0xd, 1, a, b, c, d);
    return (a >> 2) & 1;
}

/* XINUSE bits 2 (upper halves of ymm0-15) and 6 (upper halves of zmm0-15): the state SSE
 * instructions pay for; bit 7 (zmm16-31) is left set by glibc's EVEX string functions on
 * purpose and costs nothing. */
static unsigned dirty_upper(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(1));
    (void)hi;
    return lo & ((1u << 2) | (1u << 6));
}
/* this thread's state, then cleaned, so that each check names the call that dirtied it. The
 * calling thread's only: a pool thread dirtied in one parallel region read clean in the next
 * (measured, GCC 12's libgomp), while the calling thread carries its state into its own share of
 * the next region's work (the init ran 40 s on two threads, 80 on one: the calling thread's half
 * at 120 ns a draw). */
static unsigned dirty_upper_once(void) {
    const unsigned bits = dirty_upper();
#ifdef __AVX__
    __builtin_ia32_vzeroupper();
#endif
    return bits;
}
#define EXPECT_CLEAN(what)                                                                         \
    do {                                                                                           \
        const unsigned x_ = dirty_upper_once();                                                    \
        CHECK(!x_, "%s left the upper halves dirty (XINUSE %#x)", what, x_);                       \
    } while (0)
#endif

int main(void) {
#if !defined(__x86_64__)
    printf("skipped: not x86-64\n");
    return 0;
#elif !TEST_XINUSE
    printf("skipped: a build below -O2 (see the top of this file)\n");
    return 0;
#else
    if (!xinuse_known()) {
        printf("skipped: XGETBV does not report XINUSE on this CPU\n");
        return 0;
    }
    base_err e = {{0}};
    /* what `titan train` calls before the init: the TP pieces of the FSDP ranges (runs that
     * merge into one piece with tp 1; replicated rows with tp 2) */
    dist_tp_run runs[6];
    for (int i = 0; i < 6; i++)
        runs[i] = (dist_tp_run){.shard_off = (size_t)i * 64,
                                .offset = (size_t)i * 64,
                                .full_offset = (size_t)i * 64,
                                .row_len = 64,
                                .rows = 1,
                                .full_stride = 64,
                                .replicated = i % 3 == 0};
    for (int tp = 1; tp <= 2; tp++) {
        dist_tp_pieces t;
        CHECK(dist_tp_pieces_init(&t, runs, 6, tp, 0, &e) == 0, "pieces: %s", e.msg);
        EXPECT_CLEAN(tp == 1 ? "dist_tp_pieces_init (tp 1)" : "dist_tp_pieces_init (tp 2)");
        CHECK(tp > 1 || t.n_all == 1, "tp 1: 6 adjacent runs are one piece, got %d", t.n_all);
        dist_tp_pieces_free(&t);
    }

    model_args a;
    CHECK(model_flavor("debugmodel", &a, &e) == 0, "flavor: %s", e.msg);
    const int B = 2, T = 32;
    int32_t tok[2 * 32], tgt[2 * 32];
    for (int i = 0; i < B * T; i++)
        tok[i] = (i * 37) % a.vocab_size, tgt[i] = (i * 11 + 5) % a.vocab_size;
    for (int bf = 0; bf < 2; bf++) { /* fp32, then bf16 (AMX tiles where the CPU has them) */
        model m;
        model_build_opts o = {
            .batch = B, .seq_len = T, .with_grads = 1, .prec = bf ? OPS_PREC_BF16 : OPS_PREC_F32};
        if (model_build(&m, &a, &o, &e)) {
            printf("FAIL model_build: %s\n", e.msg);
            return 1;
        }
        EXPECT_CLEAN("model_build");
        model_init_weights(&m, 11);
        EXPECT_CLEAN("model_init_weights");
        model_zero_grad(&m);
        const double loss = model_step_microbatch(&m, tok, tgt, 1.0f / (B * T), NULL) / (B * T);
        EXPECT_CLEAN(bf ? "model_step_microbatch (bf16)" : "model_step_microbatch (fp32)");
        CHECK(loss > 5 && loss < 10, "mean loss %g (log V = 7.6 at init)", loss);
        model_free(&m);
        EXPECT_CLEAN("model_free");
    }
    if (failures) return 1;
    printf("ok: the upper halves clean after every call\n");
    return 0;
#endif
}
