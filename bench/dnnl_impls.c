/* Which oneDNN implementation is faster for one bf16 product, measured the way a noisy shared
 * machine allows: the candidates built once, then executed in turn (A, B, C, A, B, C, ...) so
 * a slow moment hits all of them, and the median of each reported. Decides ops/cpu/bf16.c's
 * pd_pick (bench/RESULTS.md "Session 12").
 *
 *   cmake --build build --target bench_dnnl_impls
 *   [BENCH_C16=1] [BENCH_LDC=n] OMP_NUM_THREADS=2 build/bench_dnnl_impls M N K TA TB ACC [REPEATS]
 *
 * C[M,N] (+= with ACC) = op(A)[M,K] op(B)[K,N], A and B bf16 (TA / TB: stored transposed),
 * C fp32 - titan's products: forward x W^T (0 1 0), dx = dy W (0 0 1), dW = dy^T x (1 0 1).
 * Candidates: oneDNN's brgemm matmul ("brg"), its gemm driver ("gemm:jit"), and brgemm with B
 * reordered beforehand into the layout it prefers ("brg+blocked": what a weight kept in that
 * layout would give; the reorder's time is printed once), and where the build has it titan's
 * own AMX GEMM (src/ops/cpu/amx_gemm.c; its result checked against brgemm's). BENCH_ONLY=i
 * runs candidate i alone (0 brg, 1 gemm:jit, 2 brg+blocked, 3 titan). Buffers are 64-byte
 * aligned, as titan's. */
#include <oneapi/dnnl/dnnl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(x)                                                                                   \
    do {                                                                                           \
        if ((x) != dnnl_success) {                                                                 \
            fprintf(stderr, "bench_dnnl_impls: %s failed (line %d)\n", #x, __LINE__);              \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)
#define MAX_REPEATS 64

static dnnl_engine_t g_eng;
static dnnl_stream_t g_st;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct {
    const char *want; /* implementation name prefix */
    int blocked;      /* B reordered into the primitive's preferred layout */
    dnnl_primitive_t prim;
    dnnl_memory_t a, b, c;
    char impl[64];
    double reorder_ms, t[MAX_REPEATS];
    int titan; /* titan's own AMX kernel (src/ops/cpu/amx_gemm.c), not a oneDNN primitive */
    int M, N, K, ta, tb, acc, c16, ldc;
    void *A, *B, *C;
} candidate;

#ifdef BENCH_TITAN_AMX
#include "ops/cpu/cpu.h"
#endif

static int build(candidate *v, int M, int N, int K, int ta, int tb, int acc, int c16, int ldc,
                 void *A, void *B, void *C) {
    if (v->titan) {
#ifdef BENCH_TITAN_AMX
        *v = (candidate){.titan = 1,
                         .M = M,
                         .N = N,
                         .K = K,
                         .ta = ta,
                         .tb = tb,
                         .acc = acc,
                         .c16 = c16,
                         .ldc = ldc,
                         .A = A,
                         .B = B,
                         .C = C};
        snprintf(v->impl, sizeof v->impl, "titan amx_gemm");
        return ops_cpu_amx_usable() ? 0 : -1;
#else
        return -1;
#endif
    }
    dnnl_memory_desc_t a, b, c, bplain;
    const dnnl_dims_t ad = {M, K}, bd = {K, N}, cd = {M, N};
    const dnnl_dims_t as = {ta ? 1 : K, ta ? M : 1}, bs = {tb ? 1 : N, tb ? K : 1}, cs = {ldc, 1};
    CHECK(dnnl_memory_desc_init_by_strides(&a, 2, ad, dnnl_bf16, as));
    CHECK(dnnl_memory_desc_init_by_strides(&bplain, 2, bd, dnnl_bf16, bs));
    b = bplain;
    if (v->blocked) CHECK(dnnl_memory_desc_init_by_tag(&b, 2, bd, dnnl_bf16, dnnl_format_tag_any));
    CHECK(dnnl_memory_desc_init_by_strides(&c, 2, cd, c16 ? dnnl_bf16 : dnnl_f32, cs));
    dnnl_matmul_desc_t md;
    CHECK(dnnl_matmul_desc_init(&md, &a, &b, NULL, &c));
    dnnl_primitive_attr_t attr;
    CHECK(dnnl_primitive_attr_create(&attr));
    if (acc) {
        dnnl_post_ops_t po;
        CHECK(dnnl_post_ops_create(&po));
        CHECK(dnnl_post_ops_append_sum(po, 1.0f));
        CHECK(dnnl_primitive_attr_set_post_ops(attr, po));
        dnnl_post_ops_destroy(po);
    }
    dnnl_primitive_desc_iterator_t it;
    CHECK(dnnl_primitive_desc_iterator_create(&it, &md, attr, g_eng, NULL));
    dnnl_primitive_desc_t pd = NULL;
    do {
        dnnl_primitive_desc_t p = dnnl_primitive_desc_iterator_fetch(it);
        const char *impl = "";
        if (p && !dnnl_primitive_desc_query(p, dnnl_query_impl_info_str, 0, &impl) &&
            !strncmp(impl, v->want, strlen(v->want))) {
            pd = p;
            snprintf(v->impl, sizeof v->impl, "%s%s", impl, v->blocked ? "+blocked" : "");
            break;
        }
        if (p) dnnl_primitive_desc_destroy(p);
    } while (dnnl_primitive_desc_iterator_next(it) == dnnl_success);
    dnnl_primitive_desc_iterator_destroy(it);
    dnnl_primitive_attr_destroy(attr);
    if (!pd) {
        printf("  (no implementation '%s%s' for this product)\n", v->want,
               v->blocked ? "+blocked" : "");
        return -1;
    }
    CHECK(dnnl_primitive_create(&v->prim, pd));
    CHECK(dnnl_memory_create(&v->a, &a, g_eng, A));
    CHECK(dnnl_memory_create(&v->c, &c, g_eng, C));
    dnnl_memory_t bm;
    CHECK(dnnl_memory_create(&bm, &bplain, g_eng, B));
    v->b = bm;
    if (v->blocked) {
        const dnnl_memory_desc_t *w = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
        CHECK(dnnl_memory_create(&v->b, w, g_eng, DNNL_MEMORY_ALLOCATE));
        dnnl_primitive_desc_t rpd;
        CHECK(dnnl_reorder_primitive_desc_create(&rpd, &bplain, g_eng, w, g_eng, NULL));
        dnnl_primitive_t r;
        CHECK(dnnl_primitive_create(&r, rpd));
        const dnnl_exec_arg_t ra[] = {{DNNL_ARG_FROM, bm}, {DNNL_ARG_TO, v->b}};
        for (int i = 0; i < 2; i++) { /* the second, warm, is timed */
            const double t0 = now();
            CHECK(dnnl_primitive_execute(r, g_st, 2, ra));
            CHECK(dnnl_stream_wait(g_st));
            v->reorder_ms = 1e3 * (now() - t0);
        }
        dnnl_primitive_destroy(r);
        dnnl_primitive_desc_destroy(rpd);
    }
    dnnl_primitive_desc_destroy(pd);
    return 0;
}

static double run(candidate *v) {
#ifdef BENCH_TITAN_AMX
    if (v->titan) {
        const double t0 = now();
        if (ops_cpu_amx_gemm(v->ta, v->tb, v->M, v->N, v->K, v->A, v->ta ? v->M : v->K, v->B,
                             v->tb ? v->K : v->N, v->acc, v->c16, v->C, v->ldc)) {
            fprintf(stderr, "bench_dnnl_impls: titan's amx_gemm refused the product\n");
            exit(1);
        }
        return now() - t0;
    }
#endif
    const dnnl_exec_arg_t args[] = {
        {DNNL_ARG_SRC, v->a}, {DNNL_ARG_WEIGHTS, v->b}, {DNNL_ARG_DST, v->c}};
    const double t0 = now();
    CHECK(dnnl_primitive_execute(v->prim, g_st, 3, args));
    CHECK(dnnl_stream_wait(g_st));
    return now() - t0;
}

static int cmp(const void *x, const void *y) {
    const double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

int main(int argc, char **argv) {
    if (argc < 7) {
        fprintf(stderr, "usage: bench_dnnl_impls M N K TA TB ACC [REPEATS (7)]\n");
        return 2;
    }
    const int M = atoi(argv[1]), N = atoi(argv[2]), K = atoi(argv[3]), ta = atoi(argv[4]),
              tb = atoi(argv[5]), acc = atoi(argv[6]), reps = argc > 7 ? atoi(argv[7]) : 7;
    if (M <= 0 || N <= 0 || K <= 0 || reps < 1 || reps > MAX_REPEATS) {
        fprintf(stderr, "bench_dnnl_impls: M, N, K > 0 and 1 <= REPEATS <= %d\n", MAX_REPEATS);
        return 2;
    }
    CHECK(dnnl_engine_create(&g_eng, dnnl_cpu, 0));
    CHECK(dnnl_stream_create(&g_st, g_eng, dnnl_stream_default_flags));
    /* 64-byte aligned, as titan's buffers (base_alloc): AMX tile rows across two cache lines
     * load at about half the rate */
    uint16_t *A = aligned_alloc(64, sizeof(uint16_t) * ((size_t)M * K + 32)),
             *B = aligned_alloc(64, sizeof(uint16_t) * ((size_t)K * N + 32));
    /* BENCH_C16=1: C is bf16 (the lm_head's logits); BENCH_LDC=n: C's row stride (a block of
     * columns of a wider C, as a product split along N writes it) */
    const int c16 = getenv("BENCH_C16") && atoi(getenv("BENCH_C16"));
    const int ldc =
        getenv("BENCH_LDC") && atoi(getenv("BENCH_LDC")) > N ? atoi(getenv("BENCH_LDC")) : N;
    float *C = aligned_alloc(64, sizeof(float) * ((size_t)M * ldc + 16));
    if (C) memset(C, 0, sizeof(float) * (size_t)M * ldc);
    if (!A || !B || !C) return 1;
    /* small bf16 values (1.0 .. 1.9 and 1/256 ..): the data do not change the timing */
    for (size_t i = 0; i < (size_t)M * K; i++) A[i] = (uint16_t)(0x3f80 | (i & 0x70));
    for (size_t i = 0; i < (size_t)K * N; i++) B[i] = (uint16_t)(0x3b80 | (i & 0x70));
    enum { NV = 4 };
    candidate v[NV] = {
        {.want = "brg"}, {.want = "gemm:jit"}, {.want = "brg", .blocked = 1}, {.titan = 1}};
    int ok[NV];
    /* BENCH_ONLY=i: only candidate i (0 brg, 1 gemm:jit, 2 brg+blocked, 3 titan) */
    const int only = getenv("BENCH_ONLY") ? atoi(getenv("BENCH_ONLY")) : -1;
    for (int i = 0; i < NV; i++)
        if (!(ok[i] = 0) && (only < 0 || only == i) &&
            (ok[i] = !build(&v[i], M, N, K, ta, tb, acc, c16, ldc, A, B, C)))
            run(&v[i]); /* warm-up: first-touch and JIT */
    for (int r = 0; r < reps; r++)
        for (int i = 0; i < NV; i++)
            if (ok[i]) v[i].t[r] = run(&v[i]);
    printf("%d x %d x %d ta %d tb %d acc %d%s ldc %d, median of %d interleaved runs:\n", M, N, K,
           ta, tb, acc, c16 ? " C bf16" : "", ldc, reps);
    if (ok[0] && ok[NV - 1]) { /* titan's result against brgemm's, from C = 0 */
        const size_t n = (size_t)M * ldc, es = c16 ? 2 : 4;
        void *ref = malloc(es * n);
        if (!ref) return 1;
        memset(C, 0, es * n);
        run(&v[0]);
        memcpy(ref, C, es * n);
        memset(C, 0, es * n);
        run(&v[NV - 1]);
        double worst = 0;
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                const size_t x = (size_t)i * ldc + j;
                float a, b;
                if (c16) {
                    uint32_t ua = (uint32_t)((uint16_t *)ref)[x] << 16,
                             ub = (uint32_t)((uint16_t *)C)[x] << 16;
                    memcpy(&a, &ua, 4);
                    memcpy(&b, &ub, 4);
                } else {
                    a = ((float *)ref)[x];
                    b = ((float *)C)[x];
                }
                const double d = (a - b) / (a != 0 ? (a > 0 ? a : -a) : 1);
                if ((d > 0 ? d : -d) > worst) worst = d > 0 ? d : -d;
            }
        printf("  titan amx_gemm against brgemm: worst relative difference %.2e\n", worst);
        free(ref);
    }
    for (int i = 0; i < NV; i++) {
        if (!ok[i]) continue;
        qsort(v[i].t, (size_t)reps, sizeof(double), cmp);
        const double t = v[i].t[reps / 2];
        printf("  %-32s %9.2f ms %7.1f GFLOP/s", v[i].impl, 1e3 * t,
               2.0 * M * N * (double)K / t * 1e-9);
        if (v[i].blocked) printf("  (B reorder %.1f ms)", v[i].reorder_ms);
        printf("\n");
    }
    return 0;
}
