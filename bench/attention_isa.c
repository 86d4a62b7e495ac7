/* attention_isa: the two compiled copies of the flash-attention kernel (src/ops/cpu/isa.h:
 * the x86-64-v3 baseline and the AVX-512 copy) on one shape, timed by the calling thread's
 * CPU time rather than wall time, so that a machine shared with other jobs still gives
 * comparable figures (run it with OMP_NUM_THREADS=1: with more threads only the calling
 * thread's share would be counted).
 *
 * usage: bench_attention_isa [B T H G HD [REPEATS]]   (default: 4 512 8 4 64 5, the
 *        `titan kernels bench` shape; cmake --build build --target bench_attention_isa)
 * Prints, per pass, the best-of-REPEATS ms and GFLOP/s of each copy (causal FLOPs as
 * `titan kernels bench` counts them: 2 B H T^2 hd forward, 5 B H T^2 hd backward), their
 * ratio, and whether the copies' outputs (out, lse, dq, dk, dv) agree bit for bit. Exits 1
 * when they do not (the guarantee tests/unit/test_isa.c checks on a small shape). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "ops/cpu/isa.h"

typedef void (*att_fwd_fn)(float *, float *, const float *, const float *, const float *, int, int,
                           int, int, int);
typedef void (*att_bwd_fn)(float *, float *, float *, const float *, const float *, const float *,
                           const float *, const float *, const float *, int, int, int, int, int,
                           int);

static double thread_cpu_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static float *rnd(size_t n, uint64_t stream) {
    float *p = base_alloc(n * sizeof(float));
    if (!p) exit(2);
    for (size_t i = 0; i < n; i++) p[i] = base_rng_normal(11, stream, i);
    return p;
}

int main(int argc, char **argv) {
    int d[5] = {4, 512, 8, 4, 64}, reps = 5;
    if (argc != 1 && argc != 6 && argc != 7) {
        fprintf(stderr, "usage: bench_attention_isa [B T H G HD [REPEATS]]\n");
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        int v = atoi(argv[i]);
        if (v < 1) {
            fprintf(stderr, "bench_attention_isa: argument %d ('%s') must be >= 1\n", i, argv[i]);
            return 2;
        }
        if (i <= 5)
            d[i - 1] = v;
        else
            reps = v;
    }
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
        !__builtin_cpu_supports("avx512cd") || !__builtin_cpu_supports("avx512dq") ||
        !__builtin_cpu_supports("avx512vl")) {
        fprintf(stderr, "bench_attention_isa: this CPU has no AVX-512 (x86-64-v4): only the "
                        "baseline copy could run; time it with titan kernels bench\n");
        return 2;
    }
    const int B = d[0], T = d[1], H = d[2], G = d[3], hd = d[4];
    if (H % G) {
        fprintf(stderr, "bench_attention_isa: H (%d) must be a multiple of G (%d)\n", H, G);
        return 2;
    }
    const size_t nq = (size_t)B * T * H * hd, nkv = (size_t)B * T * G * hd, nl = (size_t)B * H * T;
    float *q = rnd(nq, 1), *k = rnd(nkv, 2), *v = rnd(nkv, 3), *dout = rnd(nq, 4);
    const att_fwd_fn fwd[2] = {ops_cpu_attention_fwd_default, ops_cpu_attention_fwd_avx512};
    const att_bwd_fn bwd[2] = {ops_cpu_attention_bwd_default, ops_cpu_attention_bwd_avx512};
    float *out[2], *lse[2], *dq[2], *dk[2], *dv[2];
    double best[2][2] = {{1e30, 1e30}, {1e30, 1e30}};
    for (int c = 0; c < 2; c++) {
        out[c] = rnd(nq, 5), lse[c] = rnd(nl, 6);
        dq[c] = rnd(nq, 7), dk[c] = rnd(nkv, 8), dv[c] = rnd(nkv, 9);
    }
    /* the copies alternate, so a change in the machine's load affects both alike */
    for (int r = 0; r < reps; r++)
        for (int c = 0; c < 2; c++) {
            const double t0 = thread_cpu_s();
            fwd[c](out[c], lse[c], q, k, v, B, T, H, G, hd);
            const double t1 = thread_cpu_s();
            bwd[c](dq[c], dk[c], dv[c], dout, out[c], lse[c], q, k, v, B, T, H, G, hd,
                   0); /* written */
            const double t2 = thread_cpu_s();
            if (t1 - t0 < best[c][0]) best[c][0] = t1 - t0;
            if (t2 - t1 < best[c][1]) best[c][1] = t2 - t1;
        }
    const int same = !memcmp(out[0], out[1], nq * 4) && !memcmp(lse[0], lse[1], nl * 4) &&
                     !memcmp(dq[0], dq[1], nq * 4) && !memcmp(dk[0], dk[1], nkv * 4) &&
                     !memcmp(dv[0], dv[1], nkv * 4);
    const double f = (double)B * H * T * T * hd;
    printf("attention B=%d T=%d H=%d G=%d hd=%d, best of %d, thread CPU time\n", B, T, H, G, hd,
           reps);
    for (int p = 0; p < 2; p++) {
        const double fl = f * (p ? 5 : 2);
        printf("%s  default %9.2f ms %6.1f GFLOP/s   avx512 %9.2f ms %6.1f GFLOP/s   "
               "default/avx512 %.2f\n",
               p ? "bwd" : "fwd", best[0][p] * 1e3, fl / best[0][p] * 1e-9, best[1][p] * 1e3,
               fl / best[1][p] * 1e-9, best[0][p] / best[1][p]);
    }
    printf("outputs of the two copies: %s\n", same ? "bitwise equal" : "DIFFER");
    return same ? 0 : 1;
}
