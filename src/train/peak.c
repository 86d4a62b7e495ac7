/* train: the fp32 GEMM peak that MFU divides by (see train.h).
 *
 * One measurement on a busy machine can be several times too low (85-405 GFLOP/s across runs
 * on 2 shared cores), and ranks measuring each for themselves disagree. So rank 0 measures
 * (best of several short bursts, each several GEMMs long, with pauses between them so a
 * moment of contention passes), the value is cached per machine (CPU model and thread count)
 * and only ever raised: a run takes the higher of its measurement and the cache, and writes
 * the cache when it measured higher. Every rank then gets rank 0's value. The cache is input
 * from disk: a file that does not parse, or a value that is not a positive number below what
 * the cores could possibly do, is ignored with a warning (and replaced on the next write). */
#include <cblas.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "train.h"

/* The GEMM of a burst: n^3 multiply-adds, 2.1 GFLOP; a burst is BURST_GEMMS of them. */
#define GEMM_N 1024
#define BURST_GEMMS 3
/* At least MIN_BURSTS, at most MAX_BURSTS, and no new burst after MAX_SECONDS. */
#define MIN_BURSTS 3
#define MAX_BURSTS 10
#define MAX_SECONDS 1.5
#define PAUSE_NS 20000000L
/* No core does more than this many fp32 FLOP per second (2 AVX-512 FMA units at 6 GHz:
 * 2 x 16 lanes x 2 FLOP x 6e9): a cached value above threads x this is not believed. */
#define CORE_FLOPS_MAX 384e9
/* bf16 units do more: AMX-BF16 tiles are 16x the fp32 FMA rate at most. */
#define BF16_FACTOR 16
#define CACHE_BYTES_MAX (1 << 20)

/* C[n,n] = A[n,n] @ B[n,n]^T: the fp32 BLAS, or the bf16 matmul op (ops_cpu_gemm's bf16 engine:
 * oneDNN on bf16 units, emulated elsewhere). */
static void gemm_f32(float *c, const float *a, const float *b, int n) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1, a, n, b, n, 0, c, n);
}
static ops_matmul_fwd_fn g_bf16_matmul;
static void gemm_bf16(float *c, const float *a, const float *b, int n) {
    g_bf16_matmul(c, a, b, n, n, n);
}

/* The best rate of gemm over the bursts. gemm_bf16: A and B are held as bf16 operands first, so
 * the bursts time the engine's GEMM alone, as a step's products read the weights' bf16 copy
 * (converting both 1024 x 1024 operands per call cost ~20% of the rate on a Zen 4). */
static double measure(void (*gemm)(float *, const float *, const float *, int)) {
    const int n = GEMM_N, bf16 = gemm == gemm_bf16;
    float *a = base_alloc(sizeof(float) * n * n), *b = base_alloc(sizeof(float) * n * n),
          *c = base_alloc(sizeof(float) * n * n);
    double best = 0;
    if (a && b && c) {
        for (int i = 0; i < n * n; i++) a[i] = b[i] = base_rng_uniform(1, 0, (uint64_t)i) - 0.5f;
        const int held_a = bf16 && !ops_bf16_hold_copy(a, (size_t)n * n),
                  held_b = bf16 && !ops_bf16_hold_copy(b, (size_t)n * n);
        gemm(c, a, b, n);
        const double start = base_now();
        for (int r = 0; r < MAX_BURSTS && (r < MIN_BURSTS || base_now() - start < MAX_SECONDS);
             r++) {
            if (r > 0) nanosleep(&(struct timespec){0, PAUSE_NS}, NULL);
            const double t0 = base_now();
            for (int g = 0; g < BURST_GEMMS; g++) gemm(c, a, b, n);
            const double rate = BURST_GEMMS * 2.0 * n * n * (double)n / (base_now() - t0);
            if (rate > best) best = rate;
        }
        if (held_a) ops_bf16_release(a);
        if (held_b) ops_bf16_release(b);
    }
    base_free(a);
    base_free(b);
    base_free(c);
    return best;
}

double train_measure_peak_flops(void) {
    return measure(gemm_f32);
}

double train_measure_peak_flops_bf16(void) {
    ops_register_builtin();
    const ops_impl *mm = ops_find(OPS_MATMUL, "bf16");
    if (!mm) return 0;
    g_bf16_matmul = (ops_matmul_fwd_fn)mm->fwd;
    return measure(gemm_bf16);
}

void train_peak_key(int threads, char *buf, size_t n) {
    char model[256] = "unknown CPU";
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        const char *colon = strchr(line, ':');
        if (!colon || strncmp(line, "model name", 10) != 0) continue;
        const char *v = colon + 1;
        while (*v == ' ' || *v == '\t') v++;
        snprintf(model, sizeof model, "%.*s", (int)strcspn(v, "\n"), v);
        break;
    }
    if (f) fclose(f);
    snprintf(buf, n, "%s | %d threads", model, threads);
}

int train_peak_cache_path(char *buf, size_t n) {
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int k;
    if (xdg && xdg[0] == '/')
        k = snprintf(buf, n, "%s/titan/peak_flops.json", xdg);
    else if (home && home[0] == '/' && base_is_dir(home)) /* a daemon's HOME=/nonexistent: none
                                                             (root had made it) */
        k = snprintf(buf, n, "%s/.cache/titan/peak_flops.json", home);
    else
        k = -1;
    if (k < 0 || (size_t)k >= n) {
        if (n) buf[0] = '\0';
        return -1;
    }
    return 0;
}

/* The cache file as a JSON object {"version": 1, "peaks": {key: {"flops": ...}}}, or NULL with
 * *bad set when it exists but is not that (the caller warns once). A missing file is not bad. */
static json_t *cache_load(const char *path, int *bad, char *why, size_t n) {
    *bad = 0;
    if (access(path, F_OK) != 0) return NULL;
    size_t len;
    base_err e;
    char *text = base_read_file(path, CACHE_BYTES_MAX, &len, &e);
    json_error_t je;
    json_t *j = text ? json_loadb(text, len, JSON_REJECT_DUPLICATES, &je) : NULL;
    free(text);
    json_t *peaks = json_object_get(j, "peaks");
    if (!json_is_object(j) || json_integer_value(json_object_get(j, "version")) != 1 ||
        !json_is_object(peaks)) {
        snprintf(why, n, "%.200s",
                 !text ? e.msg
                 : !j  ? je.text
                       : "not a titan peak cache (version 1)");
        json_decref(j);
        *bad = 1;
        return NULL;
    }
    return j;
}

static double cache_read(const char *path, const char *key, double max) {
    int bad;
    char why[256] = "";
    json_t *j = cache_load(path, &bad, why, sizeof why);
    if (bad) base_log(BASE_LOG_WARN, "%s: ignored (%s)", path, why);
    if (!j) return 0;
    json_t *e = json_object_get(json_object_get(j, "peaks"), key);
    double v = 0;
    if (e) {
        json_t *x = json_object_get(e, "flops");
        v = json_is_number(x) ? json_number_value(x) : -1;
        if (!(v > 0 && v <= max)) {
            base_log(BASE_LOG_WARN,
                     "%s: the cached peak for '%s' is not a plausible FLOP/s figure; ignored", path,
                     key);
            v = 0;
        }
    }
    json_decref(j);
    return v;
}

double train_peak_cache_read(const char *path, const char *key, int threads) {
    return cache_read(path, key, CORE_FLOPS_MAX * (threads > 0 ? threads : 1));
}

int train_peak_cache_write(const char *path, const char *key, double flops, base_err *err) {
    int bad;
    char why[256];
    json_t *j = cache_load(path, &bad, why, sizeof why); /* keep the other keys */
    if (!j) j = json_pack("{s:i, s:{}}", "version", 1, "peaks");
    json_t *entry = json_pack("{s:f, s:I}", "flops", flops, "time", (json_int_t)time(NULL));
    char *text = NULL;
    if (j && entry && json_object_set_new(json_object_get(j, "peaks"), key, entry) == 0) {
        entry = NULL;
        text = json_dumps(j, JSON_INDENT(1) | JSON_SORT_KEYS);
    }
    json_decref(entry);
    json_decref(j);
    if (!text) return base_fail(err, "%s: out of memory", path);
    /* a unique temporary name (O_EXCL, never through a link), fsync, rename over path */
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.XXXXXX", path);
    int rc = base_mkdir_parent(path, err);
    int fd = rc ? -1 : mkostemp(tmp, O_CLOEXEC);
    if (!rc && fd < 0)
        rc = base_fail(err, "%s: cannot create a temporary: %s", path, strerror(errno));
    if (!rc) {
        const size_t len = strlen(text);
        int ok = write(fd, text, len) == (ssize_t)len && write(fd, "\n", 1) == 1 && fsync(fd) == 0;
        ok = close(fd) == 0 && ok;
        if (!ok || rename(tmp, path) != 0) {
            rc = base_fail(err, "%s: write failed: %s", path, strerror(errno));
            unlink(tmp);
        }
    }
    free(text);
    return rc;
}

double train_peak_choose(double measured, double cached, int *write) {
    *write = measured > 0 && measured > cached;
    return measured > cached ? measured : cached;
}

int train_peak_resolve(double configured, int threads, ops_prec prec, dist_comm *comm,
                       double (*measure)(void), train_peak *out, base_err *err) {
    memset(out, 0, sizeof *out);
    if (configured > 0) {
        out->flops = configured;
        snprintf(out->how, sizeof out->how, "configured");
        return 0;
    }
    double v[2] = {0, 0}; /* flops, measured now; rank 0's, the other ranks add 0 */
    if (dist_comm_rank(comm) == 0) {
        char key[320], path[4096];
        train_peak_key(threads, key, sizeof key);
        if (prec == OPS_PREC_BF16) /* its own entry, per engine */
            snprintf(key + strlen(key), sizeof key - strlen(key), " | bf16 %s", ops_bf16_engine());
        const int have_path = train_peak_cache_path(path, sizeof path) == 0;
        const double max = CORE_FLOPS_MAX * (threads > 0 ? threads : 1) *
                           (prec == OPS_PREC_BF16 ? BF16_FACTOR : 1);
        const double cached = have_path ? cache_read(path, key, max) : 0;
        const double measured = (measure                 ? measure
                                 : prec == OPS_PREC_BF16 ? train_measure_peak_flops_bf16
                                                         : train_measure_peak_flops)();
        int write;
        v[0] = train_peak_choose(measured, cached, &write);
        v[1] = measured;
        base_err e;
        if (write && have_path && train_peak_cache_write(path, key, measured, &e))
            base_log(BASE_LOG_WARN, "peak cache not written: %s", e.msg);
    }
    dist_allreduce_max_f64(comm, v, 2); /* a broadcast of rank 0's: every other rank has 0 */
    out->flops = v[0];
    out->measured = v[1];
    if (!(out->flops > 0))
        return base_fail(err, "could not measure the GEMM peak for MFU (out of memory?); pass "
                              "--peak-tflops");
    if (v[0] > v[1])
        snprintf(out->how, sizeof out->how, "cached from a quieter run; %.1f measured now",
                 v[1] / 1e9);
    else
        snprintf(out->how, sizeof out->how, "measured on rank 0, best of short bursts");
    return 0;
}
