#include "base/base.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int base_fail(base_err *err, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        if (n >= (int)sizeof err->msg) memcpy(err->msg + sizeof err->msg - 4, "...", 4);
    }
    return -1;
}

static base_log_level g_level = BASE_LOG_INFO;
static int g_rank = -1;

void base_log_set_level(base_log_level level) {
    g_level = level;
}

void base_log_set_rank(int rank) {
    g_rank = rank;
}

static int g_all_stderr;

void base_log_all_to_stderr(int on) {
    g_all_stderr = on;
}

/* The texts base_log_once logged, as FNV-1a 64 hashes (a ring: the last LOG_ONCE_N). */
#define LOG_ONCE_N 64
static uint64_t g_once[LOG_ONCE_N];
static unsigned g_n_once;
static pthread_mutex_t g_once_lock = PTHREAD_MUTEX_INITIALIZER;

/* Whether text was logged through base_log_once before; remembers it if not. */
static int seen_before(const char *text) {
    const uint64_t h = base_hash_bytes(BASE_HASH_INIT, text, strlen(text));
    int seen = 0;
    pthread_mutex_lock(&g_once_lock);
    for (unsigned i = 0; i < g_n_once && i < LOG_ONCE_N && !seen; i++) seen = g_once[i] == h;
    if (!seen) g_once[g_n_once++ % LOG_ONCE_N] = h;
    pthread_mutex_unlock(&g_once_lock);
    return seen;
}

static void vlog(base_log_level level, int once, const char *fmt, va_list ap) {
    if (level < g_level) return;
    static const char *names[] = {"debug", "info", "warn", "error"};
    char line[4096];
    int n = 0;
    if (g_rank >= 0) n = snprintf(line, sizeof line, "[rank%d] ", g_rank);
    n += snprintf(line + n, sizeof line - (size_t)n, "[titan %s] ", names[level]);
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    if (once && seen_before(line)) return;
    FILE *f = level >= BASE_LOG_WARN || g_all_stderr ? stderr : stdout;
    fprintf(f, "%s\n", line);
    fflush(f);
}

void base_log(base_log_level level, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vlog(level, 0, fmt, ap);
    va_end(ap);
}

void base_log_once(base_log_level level, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vlog(level, 1, fmt, ap);
    va_end(ap);
}

/* The signals base_signals_to_own_thread moves: SIGTERM, SIGINT and every signal train's
 * job.preemption_signal can name (train/stop.c's list; keep the two equal). */
static void stop_signals(sigset_t *set) {
    static const int sigs[] = {SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2, SIGXCPU};
    sigemptyset(set);
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) sigaddset(set, sigs[i]);
}

static void *signal_thread(void *arg) {
    (void)arg;
    sigset_t set;
    stop_signals(&set);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL); /* open here whatever the process started with */
    for (;;) pause();                         /* handlers run here, between pauses */
    return NULL;
}

/* A child forked after the block (a plugin's) starts with the signals open again, as exec'd
 * programs expect. */
static void child_unblock(void) {
    sigset_t set;
    stop_signals(&set);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
    signal(SIGPIPE, SIG_DFL); /* train ignores it for itself, not for what a plugin runs */
}

void base_std_fds_open(void) {
    for (int fd = 0; fd <= 2; fd++)
        if (fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
            /* the lowest free number: fd itself, as 0..fd-1 are open by now */
            const int got = open("/dev/null", O_RDWR);
            if (got >= 0 && got != fd) close(got);
        }
}

static void say(const char *m) {
    if (write(STDERR_FILENO, m, strlen(m)) < 0) {
        /* nothing more to say */
    }
}

static void on_sigbus(int sig, siginfo_t *si, void *ctx) {
    (void)sig;
    (void)ctx;
    if (si && si->si_code == BUS_ADRERR)
        say("titan: SIGBUS: a memory-mapped file (a dataset file or token shard, a checkpoint or "
            "safetensors file) became shorter while titan read it (truncated in place during "
            "the run?), or its pages could not be read (an I/O error), or shared memory ran out "
            "(/dev/shm full under mpirun)\n");
#ifdef BUS_MCEERR_AR
    else if (si && (si->si_code == BUS_MCEERR_AR || si->si_code == BUS_MCEERR_AO))
        say("titan: SIGBUS: a hardware memory error (machine check)\n");
#endif
    else
        say("titan: SIGBUS\n");
    /* SA_RESETHAND: the access faults again and ends the process by the default action */
}

void base_explain_sigbus(void) {
    struct sigaction old, sa;
    if (sigaction(SIGBUS, NULL, &old) != 0 || old.sa_handler != SIG_DFL ||
        (old.sa_flags & SA_SIGINFO))
        return; /* someone's own (MPI's backtrace printer): theirs */
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_RESETHAND | SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, NULL);
}

void base_warn_vm_limit(void) {
    struct rlimit as;
    if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY &&
        as.rlim_cur < ((rlim_t)1 << 30))
        base_log(BASE_LOG_WARN,
                 "the virtual memory limit (ulimit -v) is %llu MiB: OpenBLAS's buffers may not "
                 "fit (below ~600 MiB it retries its allocation forever, spinning without a "
                 "message); 1 GiB or more is safe",
                 (unsigned long long)(as.rlim_cur >> 20));
}

int base_signals_to_own_thread(base_err *err) {
    (void)err; /* nothing fails a command: without the thread, the signals stay where they were */
    sigset_t set;
    stop_signals(&set);
    pthread_attr_t attr;
    pthread_t t;
    /* a small stack: the handlers write a line and set atomics (and a tight ulimit -v must
     * not refuse 8 MiB for it) */
    int rc = pthread_attr_init(&attr);
    if (!rc) {
        rc = pthread_attr_setstacksize(&attr, (size_t)256 << 10);
        if (!rc) rc = pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (!rc) rc = pthread_create(&t, &attr, signal_thread, NULL);
        pthread_attr_destroy(&attr);
    }
    if (rc) {
        base_log(BASE_LOG_WARN,
                 "cannot start the signal thread (%s): a stop signal may be handled on a "
                 "compute thread",
                 strerror(rc));
        return 0;
    }
    /* one signal between the create and the block takes the caller, as before the call */
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    pthread_atfork(NULL, NULL, child_unblock);
    return 0;
}

static void (*g_fatal_hook)(const char *msg);

void base_set_fatal_hook(void (*hook)(const char *msg)) {
    g_fatal_hook = hook;
}

_Noreturn void base_fatal(const char *fmt, ...) {
    char msg[sizeof((base_err *)0)->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    base_log(BASE_LOG_ERROR, "%s", msg);
    /* the first caller runs the hook and aborts; another thread failing meanwhile (kernels run
     * in parallel regions) waits for that abort, and a hook failing the same way (it is the
     * first caller's thread again) aborts at once */
    static pthread_t first;
    static int taken;
    if (__atomic_exchange_n(&taken, 1, __ATOMIC_SEQ_CST)) {
        if (!pthread_equal(first, pthread_self()))
            for (;;) pause();
        abort();
    }
    first = pthread_self();
    if (g_fatal_hook) g_fatal_hook(msg);
    abort();
}

/* Buffers of 4 MiB and more are 2 MiB aligned and asked to be backed by transparent huge
 * pages: the GEMMs stream hundreds of MiB of weights and logits, and 4 KiB pages cost TLB
 * misses there. */
#define BASE_HUGE (2u << 20)

/* The aligned allocation; *rounded receives its size (bytes rounded up to the alignment). */
static void *alloc_aligned(size_t bytes, size_t *rounded) {
    const int huge = bytes >= 2 * (size_t)BASE_HUGE;
    const size_t align = huge ? BASE_HUGE : 64;
    *rounded = (bytes + align - 1) / align * align;
    if (*rounded == 0) *rounded = 64;
    if (*rounded < bytes) return NULL; /* overflow */
    void *p = aligned_alloc(align, *rounded);
    if (p && huge) madvise(p, *rounded, MADV_HUGEPAGE);
    return p;
}

void *base_alloc_uninit(size_t bytes) {
    size_t rounded;
    return alloc_aligned(bytes, &rounded);
}

void base_zero(void *p, size_t bytes) {
    if (bytes <= ((size_t)1 << 20) || omp_in_parallel()) {
        memset(p, 0, bytes);
        return;
    }
#pragma omp parallel
    {
        const size_t T = (size_t)omp_get_num_threads(), t = (size_t)omp_get_thread_num();
        const size_t piece = (bytes / T + 63) & ~(size_t)63; /* whole 64-byte lines */
        const size_t lo = t * piece < bytes ? t * piece : bytes,
                     hi = t + 1 == T || lo + piece > bytes ? bytes : lo + piece;
        memset((char *)p + lo, 0, hi - lo);
    }
}

void *base_alloc(size_t bytes) {
    size_t rounded;
    void *p = alloc_aligned(bytes, &rounded);
    if (p) base_zero(p, rounded);
    return p;
}

void base_free(void *p) {
    free(p);
}

int base_strbuf_put(base_strbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 32;
        while (cap < b->n + n + 1) cap *= 2;
        char *ns = realloc(b->s, cap);
        if (!ns) return -1;
        b->s = ns;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
    return 0;
}

void base_release_pages(void *p, size_t bytes) {
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t a = ((uintptr_t)p + page - 1) & ~(page - 1),
                    b = ((uintptr_t)p + bytes) & ~(page - 1);
    if (a < b) madvise((void *)a, b - a, MADV_DONTNEED);
}

double base_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* VmRSS and VmHWM of /proc/self/status in bytes (0 where absent). */
static void proc_rss(size_t *now, size_t *hwm) {
    *now = *hwm = 0;
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return;
    char line[256];
    unsigned long long kib;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "VmRSS: %llu kB", &kib) == 1) *now = (size_t)kib * 1024;
        if (sscanf(line, "VmHWM: %llu kB", &kib) == 1) *hwm = (size_t)kib * 1024;
    }
    fclose(f);
}

size_t base_rss(void) {
    size_t now, hwm;
    proc_rss(&now, &hwm);
    return now;
}

size_t base_peak_rss(void) {
    /* getrusage's ru_maxrss sums the kernel's per-CPU RSS counters approximately (Linux
     * 6.2+: it lagged VmRSS by ~100 KiB in a small run, more with many CPUs), so it read below
     * the current RSS; /proc's VmHWM and VmRSS are exact. The largest of the three. */
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    size_t now, hwm;
    proc_rss(&now, &hwm);
    const size_t ru_b = (size_t)ru.ru_maxrss * 1024;
    const size_t m = hwm > now ? hwm : now;
    return m > ru_b ? m : ru_b;
}

size_t base_total_ram(void) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && page > 0 ? (size_t)pages * (size_t)page : 0;
}

/* splitmix64 finaliser: a bijective mixer with full avalanche. Three rounds over the
 * (seed, stream, index) triple give a stateless generator in the spirit of Philox. */
static inline uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* base_rng_u64 in two parts: the (seed, stream) rounds, which a run of draws shares, and the
 * index round */
static inline uint64_t rng_key(uint64_t seed, uint64_t stream) {
    return mix64(mix64(seed + 0x9e3779b97f4a7c15ULL) ^ (stream + 0x632be59bd9b4e019ULL));
}

static inline uint64_t rng_draw(uint64_t key, uint64_t index) {
    return mix64(key ^ (index * 0x9e3779b97f4a7c15ULL + 0x8cb92ba72f3d8dd7ULL));
}

uint64_t base_rng_u64(uint64_t seed, uint64_t stream, uint64_t index) {
    return rng_draw(rng_key(seed, stream), index);
}

float base_rng_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
    return (float)(base_rng_u64(seed, stream, index) >> 40) * (1.0f / 16777216.0f);
}

float base_rng_normal(uint64_t seed, uint64_t stream, uint64_t index) {
    return base_normal_of_bits(base_rng_u64(seed, stream, index));
}

float base_normal_of_bits(uint64_t r) {
    /* u1 in (0, 1] so log() is finite; u2 in [0, 1). */
    double u1 = ((double)(r >> 32) + 1.0) * (1.0 / 4294967296.0);
    double u2 = (double)(r & 0xffffffffu) * (1.0 / 4294967296.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* ---- base_normals_of_bits: base_normal_of_bits's values, many at a time -----------------
 *
 * The same Box-Muller arithmetic, with log and cos written out in double so that GCC vectorises
 * the loop (the baseline's AVX2: 4 lanes) instead of calling glibc's scalar log and cos a value:
 * the random init of Qwen3-0.6B spent 8.7 s on the 2-vCPU AMX Xeon in them, 2.5 s so. The
 * floats must be glibc's bit for bit (a seed's weights are the same in every build, for any
 * thread count and layout). glibc's doubles are not known here, only that they lie within an ulp
 * or so of the exact values, as these lie within a few: the two doubles R differ by less than
 * |R| 2^-48 + 2^-48. Where R lies within 2^-40 (|R| + 1) of a float rounding boundary (about 1
 * value in 4400, most of them small: the floats' spacing falls with |R|, the guard does not, so
 * every |R| < 2^-16) the floats could differ, and that value is base_normal_of_bits's own.
 * tests/unit/test_rng.c compares the two over millions of draws, at the edges (u1 = 1, u2 at the
 * quadrants) and counts the guard's recomputations. */

/* cond ? a : b by bits: both computed, no branch for GCC to sink either into (which, with
 * trapping math, it then cannot vectorise); m all ones or zero */
static inline double bm_select(uint64_t m, double a, double b) {
    uint64_t ua, ub;
    memcpy(&ua, &a, sizeof ua);
    memcpy(&ub, &b, sizeof ub);
    const uint64_t r = (ua & m) | (ub & ~m);
    double v;
    memcpy(&v, &r, sizeof v);
    return v;
}

/* c[0] + c[1] z + ... + c[n-1] z^(n-1) (Horner; inlined with n constant, fully unrolled) */
static inline __attribute__((always_inline)) double bm_poly(double z, const double *c, int n) {
    double p = c[n - 1];
#pragma GCC unroll 16
    for (int i = n - 2; i >= 0; i--) p = c[i] + z * p;
    return p;
}

/* u1 in [2^-32, 1]: log(u1) = e ln2 + log(m), u1 = 2^e m, m in [sqrt(1/2), sqrt(2)), log(m) =
 * 2 atanh(s), s = (m - 1) / (m + 1), |s| <= 0.1716: the series to s^23 (the truncation's
 * relative error < 2^-56). m - 1 is exact, e ln2_hi too (ln2_hi has 32 trailing zero bits,
 * |e| <= 32). Relative error a few ulps. */
static inline double bm_log(double u1) {
    static const double atanh_c[12] = {1.0,      1.0 / 3,  1.0 / 5,  1.0 / 7,  1.0 / 9,  1.0 / 11,
                                       1.0 / 13, 1.0 / 15, 1.0 / 17, 1.0 / 19, 1.0 / 21, 1.0 / 23};
    uint64_t b;
    memcpy(&b, &u1, sizeof b);
    int e = (int)((b >> 52) & 0x7ff) - 1023;
    b = (b & 0x000fffffffffffffULL) | 0x3ff0000000000000ULL;
    double m;
    memcpy(&m, &b, sizeof m);
    const uint64_t big = m > 1.4142135623730951 ? ~0ULL : 0;
    m = bm_select(big, 0.5 * m, m);
    e += (int)(big & 1);
    const double f = m - 1.0, s = f / (2.0 + f);
    const double ln2_hi = 6.93147180369123816490e-01, ln2_lo = 1.90821492927058770002e-10;
    return e * ln2_hi + (2.0 * s * bm_poly(s * s, atanh_c, 12) + e * ln2_lo);
}

/* t in [0, 2 pi): cos(t) = +-cos(r) or +-sin(r), t = k pi/2 + r, |r| <= pi/4 (Cody-Waite:
 * pio2_1 has 33 bits, so k pio2_1 and t - k pio2_1 are exact for k <= 4); the Taylor series to
 * r^18 and r^19 (truncation < 2^-60). Absolute error about 2^-53. */
static inline double bm_cos(double t) {
    static const double cos_c[10] = {1.0,
                                     -1.0 / 2,
                                     1.0 / 24,
                                     -1.0 / 720,
                                     1.0 / 40320,
                                     -1.0 / 3628800,
                                     1.0 / 479001600,
                                     -1.0 / 87178291200.0,
                                     1.0 / 20922789888000.0,
                                     -1.0 / 6402373705728000.0},
                        sin_c[10] = {1.0,
                                     -1.0 / 6,
                                     1.0 / 120,
                                     -1.0 / 5040,
                                     1.0 / 362880,
                                     -1.0 / 39916800,
                                     1.0 / 6227020800.0,
                                     -1.0 / 1307674368000.0,
                                     1.0 / 355687428096000.0,
                                     -1.0 / 121645100408832000.0};
    const double pio2_1 = 1.57079632673412561417e+00, pio2_1t = 6.07710050650619224932e-11;
    const double k = __builtin_rint(t * 0.63661977236758134308);
    const double r = (t - k * pio2_1) - k * pio2_1t, z = r * r;
    const double c = bm_poly(z, cos_c, 10), sn = r * bm_poly(z, sin_c, 10);
    const int q = (int)k & 3; /* cos(r), -sin(r), -cos(r), sin(r) */
    const double v = bm_select(q & 1 ? ~0ULL : 0, sn, c);
    return bm_select((q + 1) & 2 ? ~0ULL : 0, -v, v); /* q 1 or 2 */
}

/* a 32-bit unsigned value (< 2^33 allowed) as double, exactly, in int32 conversions AVX2 has */
static inline double bm_u32(uint64_t x) {
    return (double)(int32_t)(x >> 16) * 65536.0 + (double)(int32_t)(x & 0xffff);
}

size_t base_normals_of_bits(float *out, const uint64_t *r, size_t n) {
    size_t exact = 0; /* draws base_normal_of_bits decided */
    enum { BLOCK = 512 };
    double rv[BLOCK]; /* the double results: a loop of 64-bit lanes alone vectorises */
    for (size_t b0 = 0; b0 < n; b0 += BLOCK) {
        const int m = n - b0 < BLOCK ? (int)(n - b0) : BLOCK;
        const uint64_t *rb = r + b0;
#pragma omp simd
        for (int i = 0; i < m; i++) {
            const double u1 = (bm_u32(rb[i] >> 32) + 1.0) * (1.0 / 4294967296.0),
                         u2 = bm_u32(rb[i] & 0xffffffffu) * (1.0 / 4294967296.0);
            rv[i] = sqrt(-2.0 * bm_log(u1)) * bm_cos(6.283185307179586 * u2);
        }
        for (int i = 0; i < m; i++) {
            /* |R - glibc's R| < |R| 2^-48 + 2^-48 by the bounds above: within the guard 2^-40
             * (|R| + 1) of a float rounding boundary, base_normal_of_bits decides */
            const double R = rv[i], g = 0x1p-40 * (fabs(R) + 1.0);
            const int near = (float)(R - g) != (float)(R + g);
            out[b0 + i] = near ? base_normal_of_bits(rb[i]) : (float)R;
            exact += (size_t)near;
        }
    }
    return exact;
}

void base_rng_normal_fill(float *out, size_t n, uint64_t seed, uint64_t stream, uint64_t index0,
                          float scale, double cut) {
    const uint64_t key = rng_key(seed, stream); /* once for the run */
    enum { BLOCK = 512 };
    uint64_t r[BLOCK];
    for (size_t b0 = 0; b0 < n; b0 += BLOCK) {
        const int m = n - b0 < BLOCK ? (int)(n - b0) : BLOCK;
#pragma omp simd
        for (int i = 0; i < m; i++) r[i] = rng_draw(key, index0 + b0 + (uint64_t)i);
        base_normals_of_bits(out + b0, r, (size_t)m);
        for (int i = 0; i < m; i++) {
            float x = scale * out[b0 + i];
            for (uint64_t k = 1; cut > 0 && fabs(x) > cut; k++) /* truncated: drawn again */
                x = scale * base_rng_normal(seed, stream, index0 + b0 + (uint64_t)i + (k << 40));
            out[b0 + i] = x;
        }
    }
}

uint64_t base_hash_bytes(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ULL;
    return h;
}

static uint32_t g_crc_table[256];
static pthread_once_t g_crc_once = PTHREAD_ONCE_INIT;

static void crc32c_table_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t v = i;
        for (int k = 0; k < 8; k++) v = v & 1 ? (v >> 1) ^ 0x82f63b78u : v >> 1;
        g_crc_table[i] = v;
    }
}

static uint32_t crc32c_table(uint32_t c, const unsigned char *p, size_t n) {
    pthread_once(&g_crc_once, crc32c_table_init);
    for (size_t i = 0; i < n; i++) c = g_crc_table[(c ^ p[i]) & 0xff] ^ (c >> 8);
    return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc32c_sse42(uint32_t c, const unsigned char *p,
                                                               size_t n) {
    uint64_t c64 = c;
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t v;
        memcpy(&v, p, 8); /* any alignment */
        c64 = __builtin_ia32_crc32di(c64, v);
    }
    c = (uint32_t)c64;
    for (; n; n--, p++) c = __builtin_ia32_crc32qi(c, *p);
    return c;
}
#endif

uint32_t base_crc32c(uint32_t crc, const void *p, size_t n) {
    const uint32_t c = ~crc;
#if defined(__x86_64__)
    if (__builtin_cpu_supports("sse4.2")) return ~crc32c_sse42(c, p, n);
#endif
    return ~crc32c_table(c, p, n);
}

uint64_t base_hash_str(const char *s) {
    return base_hash_bytes(BASE_HASH_INIT, s, strlen(s));
}

int base_parse_i64(const char *s, int64_t *out) {
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end) return -1;
    *out = v;
    return 0;
}

int base_parse_f64(const char *s, double *out) {
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    /* ERANGE with a finite result is an underflow (1e-320: a subnormal or 0), a number still;
     * an overflow is HUGE_VAL, refused as not finite */
    if ((errno && errno != ERANGE) || *end || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

int base_path_join(char *out, size_t cap, const char *dir, const char *name, base_err *err) {
    if (snprintf(out, cap, "%s/%s", dir, name) >= (int)cap)
        return base_fail(err, "%s: path too long", dir);
    return 0;
}

int base_is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int base_is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int base_has_file(const char *dir, const char *name) {
    char p[4096];
    return base_path_join(p, sizeof p, dir, name, NULL) == 0 && base_is_file(p);
}

int base_mkdir_p(const char *dir, base_err *err) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
        return base_fail(err, "%s: path too long", dir);
    for (char *p = path + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(path, 0777) != 0 && errno != EEXIST)
            return base_fail(err, "%s: cannot create directory: %s", path, strerror(errno));
        *p = '/';
    }
    if (mkdir(path, 0777) != 0 && errno != EEXIST)
        return base_fail(err, "%s: cannot create directory: %s", path, strerror(errno));
    return 0;
}

int base_mkdir_parent(const char *file, base_err *err) {
    const char *slash = strrchr(file, '/');
    if (!slash || slash == file) return 0;
    char dir[4096];
    if (snprintf(dir, sizeof dir, "%.*s", (int)(slash - file), file) >= (int)sizeof dir)
        return base_fail(err, "%s: path too long", file);
    return base_mkdir_p(dir, err);
}

char *base_read_file(const char *path, size_t max_bytes, size_t *len, base_err *err) {
    const char *name = path ? path : "stdin";
    if (path && base_is_dir(path)) { /* fopen succeeds on a folder; the read would not */
        base_fail(err, "%s: is a folder, a file is expected here", path);
        return NULL;
    }
    FILE *f = path ? fopen(path, "rb") : stdin;
    if (!f) {
        base_fail(err, "%s: cannot open: %s", name, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    int too_big = 0;
    for (size_t r; buf && (r = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += r;
        if (n > max_bytes) {
            too_big = 1;
            break;
        }
        if (n == cap) {
            char *nb = realloc(buf, (cap *= 2) + 1);
            if (!nb) free(buf);
            buf = nb;
        }
    }
    const int bad = ferror(f);
    if (path) fclose(f);
    if (!buf || bad || too_big) {
        free(buf);
        if (too_big)
            base_fail(err, "%s: larger than %zu bytes", name, max_bytes);
        else
            base_fail(err, "%s: read failed%s", name, buf ? "" : " (out of memory)");
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

int base_cpu_count(void) {
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

int base_threads_bound(int requested, const char *what) {
    const int cap = BASE_THREADS_PER_CPU * base_cpu_count();
    if (requested <= cap) return requested;
    base_log(BASE_LOG_WARN, "%s: %d threads asked for, %d CPUs here: using %d", what, requested,
             base_cpu_count(), cap);
    return cap;
}

/* The first number in FILE after `key` (a /proc or cgroup file); -1 when absent or "max". */
static int64_t read_number(const char *file, const char *key) {
    FILE *f = fopen(file, "r");
    if (!f) return -1;
    char line[256];
    int64_t v = -1;
    while (v < 0 && fgets(line, sizeof line, f)) {
        if (strncmp(line, key, strlen(key))) continue;
        long long x;
        if (sscanf(line + strlen(key), " %lld", &x) == 1 && x >= 0) v = x;
        if (!key[0]) break;
    }
    fclose(f);
    return v;
}

/* This process's group of a cgroup controller from /proc/self/cgroup ("" for the root, as
 * inside a cgroup namespace): v2's "0::/path" when controller is NULL, else the v1 line whose
 * controller list names it ("4:cpu,cpuacct:/path"). 0 when found. */
static int cgroup_group(const char *controller, char *out, size_t n) {
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f) return -1;
    char line[1024];
    int found = -1;
    while (found && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *c = strchr(line, ':'), *p = c ? strchr(c + 1, ':') : NULL;
        if (!p) continue;
        *p++ = 0;
        c++;
        if (!controller) {
            if (strcmp(line, "0") || *c) continue;
        } else {
            int has = 0;
            for (char *t = strtok(c, ","); t && !has; t = strtok(NULL, ","))
                has = !strcmp(t, controller);
            if (!has) continue;
        }
        snprintf(out, n, "%s", strcmp(p, "/") ? p : "");
        found = 0;
    }
    fclose(f);
    return found;
}

double base_cpu_quota(void) {
    double best = 0;
    char grp[512], path[800];
    /* v2: cpu.max "QUOTA PERIOD" or "max PERIOD", in the group and each parent */
    if (!cgroup_group(NULL, grp, sizeof grp))
        for (;;) {
            snprintf(path, sizeof path, "/sys/fs/cgroup%s/cpu.max", grp);
            FILE *f = fopen(path, "r");
            long long q, p;
            if (f && fscanf(f, "%lld %lld", &q, &p) == 2 && q > 0 && p > 0 &&
                (!best || (double)q / (double)p < best))
                best = (double)q / (double)p;
            if (f) fclose(f);
            char *slash = strrchr(grp, '/');
            if (!slash) break;
            *slash = 0;
        }
    /* v1: cpu.cfs_quota_us (-1: none) / cpu.cfs_period_us, where the cpu controller is */
    static const char *const roots[] = {"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"};
    if (!cgroup_group("cpu", grp, sizeof grp))
        for (;;) {
            for (int r = 0; r < 2; r++) {
                snprintf(path, sizeof path, "%s%s/cpu.cfs_quota_us", roots[r], grp);
                const int64_t q = read_number(path, "");
                snprintf(path, sizeof path, "%s%s/cpu.cfs_period_us", roots[r], grp);
                const int64_t p = read_number(path, "");
                if (q > 0 && p > 0 && (!best || (double)q / (double)p < best))
                    best = (double)q / (double)p;
            }
            char *slash = strrchr(grp, '/');
            if (!slash) break;
            *slash = 0;
        }
    return best;
}

size_t base_available_ram(void) {
    const char *env = getenv("TITAN_MEM_AVAILABLE");
    int64_t x;
    if (env && !base_parse_i64(env, &x) && x >= 0) return (size_t)x;
    static int warned; /* once: not ignored without a word */
    if (env && !warned++)
        base_log(BASE_LOG_WARN,
                 "TITAN_MEM_AVAILABLE='%.64s' is not a byte count (an integer >= 0): ignored, the "
                 "memory available is measured",
                 env);
    int64_t avail = read_number("/proc/meminfo", "MemAvailable:");
    avail = avail >= 0 ? avail * 1024 : (int64_t)base_total_ram();
    /* cgroup v2 (this process's group, from /proc/self/cgroup's "0::/path"; inside a cgroup
     * namespace that is "/"), then v1: what the limit leaves (v1's "no limit" is huge) */
    char grp[512] = "", path[700];
    if (cgroup_group(NULL, grp, sizeof grp)) grp[0] = 0;
    snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.max", grp);
    int64_t lim = read_number(path, "");
    snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.current", grp);
    int64_t used = read_number(path, "");
    if (lim < 0) {
        lim = read_number("/sys/fs/cgroup/memory/memory.limit_in_bytes", "");
        used = read_number("/sys/fs/cgroup/memory/memory.usage_in_bytes", "");
    }
    if (lim >= 0 && used >= 0) {
        const int64_t left = lim > used ? lim - used : 0;
        if (left < avail) avail = left;
    }
    return (size_t)avail;
}

int base_check_output_dir(const char *dir, base_err *err) {
    char p[4096];
    if (snprintf(p, sizeof p, "%s", dir[0] ? dir : ".") >= (int)sizeof p)
        return base_fail(err, "%s: path too long", dir);
    for (;;) { /* the nearest part of the path that exists must be a writable folder */
        struct stat st;
        if (stat(p, &st) == 0) {
            if (!S_ISDIR(st.st_mode))
                return base_fail(err, "%s: cannot be created: %s is not a folder", dir, p);
            if (!access(p, W_OK | X_OK)) return 0;
            const int e = errno;
            char where[2100] = "", cwd[2048]; /* "." alone names no place */
            if (p[0] != '/' && getcwd(cwd, sizeof cwd))
                snprintf(where, sizeof where,
                         strcmp(p, ".") ? " (in the working directory %s)"
                                        : " (the working directory, %s)",
                         cwd);
            if (!strcmp(p, dir[0] ? dir : "."))
                return base_fail(err, "folder %s%s cannot be written: %s", p, where, strerror(e));
            return base_fail(err, "folder %s cannot be created: %s%s cannot be written: %s", dir, p,
                             where, strerror(e));
        }
        if (errno != ENOENT && errno != ENOTDIR)
            return base_fail(err, "%s: %s", p, strerror(errno));
        char *slash = strrchr(p, '/');
        while (slash && slash > p && slash[1] == 0) { /* trailing slashes */
            *slash = 0;
            slash = strrchr(p, '/');
        }
        if (!slash) {
            snprintf(p, sizeof p, ".");
        } else if (slash == p) {
            p[1] = 0;
        } else {
            *slash = 0;
        }
    }
}

void base_escape(const char *s, size_t len, char *out, size_t cap) {
    size_t n = 0;
    for (size_t i = 0; i < len && cap > 0 && n + 5 <= cap; i++) {
        const unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7f && c != '\\')
            out[n++] = (char)c;
        else
            n += (size_t)snprintf(out + n, cap - n, "\\x%02x", c);
    }
    if (cap) out[n < cap ? n : cap - 1] = 0;
}

int base_flush(FILE *f, const char *name, base_err *err) {
    errno = 0;
    if (fflush(f) == 0 && !ferror(f)) return 0;
    return base_fail(err, "writing %s: %s", name, errno ? strerror(errno) : "write error");
}
