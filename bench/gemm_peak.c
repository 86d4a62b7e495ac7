// gemm_peak: fp32 SGEMM throughput (GFLOP/s) for the GEMM shapes a titan training step runs.
//
// One source, several builds (see bench/gemm_peak.sh):
//   default          calls cblas_sgemm; link against any CBLAS (OpenBLAS, BLIS).
//   -DGEMM_DNNL      calls oneDNN's dnnl_sgemm (row-major, same shapes); link -ldnnl.
//   -DGEMM_DLOPEN    links no BLAS; dlopen()s the library named by --lib at run time, after
//                    applying --setenv-coretype, to test whether OpenBLAS reads
//                    OPENBLAS_CORETYPE only when the library is loaded.
//
// Row-major throughout, like titan: a Linear layer with weight W[OC,IC] runs
//   forward  y[T,OC]  = x[T,IC]  @ W^T      -> sgemm(N,T, M=T,  N=OC, K=IC)
//   backward dx[T,IC] = dy[T,OC] @ W        -> sgemm(N,N, M=T,  N=IC, K=OC)
//   backward dW[OC,IC] += dy^T @ x          -> sgemm(T,N, M=OC, N=IC, K=T), beta = 1
// with T = batch*seq = 2048 tokens (lm_head: a 256-token chunk against W[151936,512]).
//
// Output: one line per shape, then "peak_gflops=<best over all shapes>".
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef GEMM_DNNL
#include <dnnl.h>
#endif

// CBLAS ABI (enums are ints): declared here so no particular cblas.h is needed.
enum { RowMajor = 101, NoTrans = 111, Trans = 112 };
typedef void (*sgemm_fn)(int order, int ta, int tb, int M, int N, int K, float alpha,
                         const float *A, int lda, const float *B, int ldb, float beta, float *C,
                         int ldc);
#if !defined(GEMM_DNNL) && !defined(GEMM_DLOPEN)
void cblas_sgemm(int order, int ta, int tb, int M, int N, int K, float alpha, const float *A,
                 int lda, const float *B, int ldb, float beta, float *C, int ldc);
#endif

static void *g_lib = NULL; // dlopen handle (GEMM_DLOPEN) or RTLD_DEFAULT
static __attribute__((unused)) sgemm_fn g_sgemm = NULL;

static void *sym(const char *name) {
    return dlsym(g_lib ? g_lib : RTLD_DEFAULT, name);
}

typedef struct {
    const char *name;
    char ta, tb; // 'N' or 'T'
    int M, N, K;
    float beta;
} Shape;

static const Shape SHAPES[] = {
    // reference point: a big square GEMM
    {"square2048", 'N', 'N', 2048, 2048, 2048, 0.f},
    // forward, y = x @ W^T
    {"fwd_q_o", 'N', 'T', 2048, 512, 512, 0.f},       // wq / wo (dim -> n_heads*hd)
    {"fwd_k_v", 'N', 'T', 2048, 256, 512, 0.f},       // wk / wv (dim -> n_kv*hd)
    {"fwd_w1_w3", 'N', 'T', 2048, 1536, 512, 0.f},    // gate / up
    {"fwd_w2", 'N', 'T', 2048, 512, 1536, 0.f},       // down
    {"fwd_lm_head", 'N', 'T', 256, 151936, 512, 0.f}, // logits chunk = x @ E^T
    // backward, dx = dy @ W
    {"dx_q_o", 'N', 'N', 2048, 512, 512, 0.f},
    {"dx_w1_w3", 'N', 'N', 2048, 512, 1536, 0.f},
    {"dx_w2", 'N', 'N', 2048, 1536, 512, 0.f},
    {"dx_lm_head", 'N', 'N', 256, 512, 151936, 0.f},
    // backward, dW += dy^T @ x
    {"dw_q_o", 'T', 'N', 512, 512, 2048, 1.f},
    {"dw_w1_w3", 'T', 'N', 1536, 512, 2048, 1.f},
    {"dw_w2", 'T', 'N', 512, 1536, 2048, 1.f},
    {"dw_lm_head", 'T', 'N', 151936, 512, 256, 1.f},
};
#define NSHAPES ((int)(sizeof(SHAPES) / sizeof(SHAPES[0])))

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static float *alloc_rand(size_t n, uint32_t seed) {
    float *p = aligned_alloc(64, ((n * sizeof(float) + 63) / 64) * 64);
    if (!p) {
        fprintf(stderr, "gemm_peak: out of memory (%zu floats)\n", n);
        exit(1);
    }
    uint32_t s = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        p[i] = (float)((s >> 8) * (1.0 / 16777216.0)) * 2.f - 1.f;
    }
    return p;
}

static void run_gemm(const Shape *s, const float *A, const float *B, float *C) {
    int lda = s->ta == 'N' ? s->K : s->M; // A is MxK (N) or KxM (T)
    int ldb = s->tb == 'N' ? s->N : s->K; // B is KxN (N) or NxK (T)
#ifdef GEMM_DNNL
    dnnl_status_t st =
        dnnl_sgemm(s->ta, s->tb, s->M, s->N, s->K, 1.f, A, lda, B, ldb, s->beta, C, s->N);
    if (st != dnnl_success) {
        fprintf(stderr, "dnnl_sgemm failed: %d\n", (int)st);
        exit(1);
    }
#else
    g_sgemm(RowMajor, s->ta == 'N' ? NoTrans : Trans, s->tb == 'N' ? NoTrans : Trans, s->M, s->N,
            s->K, 1.f, A, lda, B, ldb, s->beta, C, s->N);
#endif
}

static void print_backend_info(void) {
    const char *(*corename)(void) = (const char *(*)(void))sym("openblas_get_corename");
    const char *(*config)(void) = (const char *(*)(void))sym("openblas_get_config");
    if (corename) printf("# openblas core: %s\n", corename());
    if (config) printf("# openblas config: %s\n", config());
    const char *(*bver)(void) = (const char *(*)(void))sym("bli_info_get_version_str");
    int (*barch)(void) = (int (*)(void))sym("bli_arch_query_id");
    const char *(*bstr)(int) = (const char *(*)(int))sym("bli_arch_string");
    if (bver) printf("# blis version: %s\n", bver());
    if (barch && bstr) printf("# blis arch: %s\n", bstr(barch()));
#ifdef GEMM_DNNL
    const dnnl_version_t *v = dnnl_version();
    printf("# onednn version: %d.%d.%d (%s), cpu runtime %u\n", v->major, v->minor, v->patch,
           v->hash, v->cpu_runtime);
#endif
    const char *ct = getenv("OPENBLAS_CORETYPE");
    printf("# OPENBLAS_CORETYPE=%s\n", ct ? ct : "(unset)");
}

static void usage(void) {
    fprintf(
        stderr,
        "usage: gemm_peak [--threads N] [--min-time S] [--shapes a,b,...] [--list]\n"
        "                 [--setenv-coretype NAME [--reinit]] [--lib PATH (GEMM_DLOPEN build)]\n"
        "  --setenv-coretype NAME  setenv(OPENBLAS_CORETYPE) inside the process (after the\n"
        "                          linked library has loaded, or before dlopen with --lib)\n"
        "  --reinit                then call OpenBLAS's gotoblas_dynamic_quit()+init() so it\n"
        "                          re-reads the variable\n");
}

int main(int argc, char **argv) {
    int threads = 2, reinit = 0, list = 0;
    double min_time = 0.5;
    const char *shapes = NULL, *setenv_core = NULL, *libpath = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--threads") && v)
            threads = atoi(argv[++i]);
        else if (!strcmp(a, "--min-time") && v)
            min_time = atof(argv[++i]);
        else if (!strcmp(a, "--shapes") && v)
            shapes = argv[++i];
        else if (!strcmp(a, "--setenv-coretype") && v)
            setenv_core = argv[++i];
        else if (!strcmp(a, "--lib") && v)
            libpath = argv[++i];
        else if (!strcmp(a, "--reinit"))
            reinit = 1;
        else if (!strcmp(a, "--list"))
            list = 1;
        else {
            usage();
            return 2;
        }
    }
    if (list) {
        for (int i = 0; i < NSHAPES; i++)
            printf("%-12s %c%c M=%d N=%d K=%d\n", SHAPES[i].name, SHAPES[i].ta, SHAPES[i].tb,
                   SHAPES[i].M, SHAPES[i].N, SHAPES[i].K);
        return 0;
    }

    if (setenv_core) setenv("OPENBLAS_CORETYPE", setenv_core, 1);
#ifdef GEMM_DLOPEN
    if (!libpath) {
        fprintf(stderr, "gemm_peak (dlopen build): --lib PATH is required\n");
        return 2;
    }
    g_lib = dlopen(libpath, RTLD_NOW | RTLD_LOCAL);
    if (!g_lib) {
        fprintf(stderr, "dlopen %s: %s\n", libpath, dlerror());
        return 1;
    }
    g_sgemm = (sgemm_fn)sym("cblas_sgemm");
    if (!g_sgemm) {
        fprintf(stderr, "%s has no cblas_sgemm\n", libpath);
        return 1;
    }
#elif !defined(GEMM_DNNL)
    (void)libpath;
    g_sgemm = cblas_sgemm;
#else
    (void)libpath;
#endif
    if (reinit) {
        void (*quit)(void) = (void (*)(void))sym("gotoblas_dynamic_quit");
        void (*init)(void) = (void (*)(void))sym("gotoblas_dynamic_init");
        if (!quit || !init) {
            fprintf(
                stderr,
                "--reinit: gotoblas_dynamic_quit/init not found (not a DYNAMIC_ARCH OpenBLAS)\n");
            return 1;
        }
        quit();
        init();
    }

    // Thread count: every runtime that is present gets told.
    void (*ob_threads)(int) = (void (*)(int))sym("openblas_set_num_threads");
    void (*bli_threads)(long) = (void (*)(long))sym("bli_thread_set_num_threads");
    void (*omp_threads)(int) = (void (*)(int))sym("omp_set_num_threads");
    if (ob_threads) ob_threads(threads);
    if (bli_threads) bli_threads(threads);
    if (omp_threads) omp_threads(threads);

    print_backend_info();
    printf("# threads=%d min_time=%.2fs\n", threads, min_time);
    printf("%-12s %-2s %7s %7s %7s %10s %10s %9s %5s\n", "shape", "op", "M", "N", "K", "best_GF/s",
           "mean_GF/s", "best_ms", "reps");

    double peak = 0;
    for (int si = 0; si < NSHAPES; si++) {
        const Shape *s = &SHAPES[si];
        if (shapes) { // comma-separated filter
            const char *p = strstr(shapes, s->name);
            size_t n = strlen(s->name);
            int hit = 0;
            while (p) {
                if ((p == shapes || p[-1] == ',') && (p[n] == ',' || p[n] == 0)) {
                    hit = 1;
                    break;
                }
                p = strstr(p + 1, s->name);
            }
            if (!hit) continue;
        }
        size_t na = (size_t)s->M * s->K, nb = (size_t)s->K * s->N, nc = (size_t)s->M * s->N;
        float *A = alloc_rand(na, 1), *B = alloc_rand(nb, 2), *C = alloc_rand(nc, 3);
        double flops = 2.0 * s->M * s->N * s->K;
        run_gemm(s, A, B, C); // warm-up (thread pool start, page faults, packing buffers)
        double best = 1e30, total = 0;
        int reps = 0;
        while (reps < 3 || total < min_time) {
            double t0 = now_s();
            run_gemm(s, A, B, C);
            double dt = now_s() - t0;
            if (dt < best) best = dt;
            total += dt;
            reps++;
            if (reps >= 1000) break;
        }
        double gbest = flops / best * 1e-9, gmean = flops * reps / total * 1e-9;
        if (gbest > peak) peak = gbest;
        printf("%-12s %c%c %7d %7d %7d %10.1f %10.1f %9.3f %5d\n", s->name, s->ta, s->tb, s->M,
               s->N, s->K, gbest, gmean, best * 1e3, reps);
        fflush(stdout);
        free(A);
        free(B);
        free(C);
    }
    printf("peak_gflops=%.1f\n", peak);
    return 0;
}
