/* bf16 GEMMs: conversions, weight mirrors and the two engines behind ops_cpu_gemm's bf16 path.
 *
 * A bf16 GEMM takes fp32 operands (the ops interface is fp32) and computes
 * C = op(bf16(A)) @ op(bf16(B)) (+ C) with fp32 accumulation. An operand that lies in a
 * registered weight mirror (ops_bf16_mirror_add: the model's once-per-step bf16 copy of its
 * parameters) is read from the copy; any other operand (activations, gradients) is converted
 * for the call.
 *
 * Engines (ops_bf16_engine):
 *   onednn    oneDNN's matmul primitive with bf16 source and weights and an fp32 destination
 *             (beta = 1 as a sum post-op). oneDNN picks its kernel from the CPU: AMX tiles
 *             (brg:avx512_core_amx_bf16), AVX512_BF16 (brg:avx512_core_bf16), ... One
 *             primitive per shape is created once and cached (creating one costs far more
 *             than a small GEMM). Chosen where the CPU has bf16 units.
 *   emulated  operands rounded to bf16 but kept as fp32 values, then the fp32 SGEMM. A product
 *             of two bf16 values is exact in fp32 (8 + 8 significant bits), so this computes
 *             what a bf16 unit computes, in another summation order. The CPU path without
 *             bf16 units: slower than fp32 (the conversions), same numerics class.
 * Both give bf16-operand results; they differ from each other in the last bits only. */
#include "ops/cpu/cpu.h"

#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef TITAN_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

/* ---- conversions -------------------------------------------------------------------- */
/* Small conversions (up to 65536 elements) run on the calling thread without opening a
 * parallel region at all: called per block or per row from inside another parallel loop (the
 * optimizer's blocks, operand rows), an `if (parallel : ...)` clause still entered libgomp
 * for a nested team of one each time, and its bookkeeping made ~10^5 futex calls a step.
 * In blocks of CONVERT_BLOCK elements, each asking for the source's lines CONVERT_AHEAD
 * elements ahead: the hardware's prefetchers left these streams waiting on memory (AMX Xeon, 2
 * threads: 6.3 M elements fp32 -> bf16, not in cache, 2.2-2.6 -> 0.8 ms; bench/RESULTS.md
 * "Session 49"). A prefetch past the end does not fault (the address is computed as an integer). */
enum { CONVERT_BLOCK = 64, CONVERT_AHEAD = 512 };
#define CONVERT_RUN(b, n, src, i, stmt)                                                            \
    do {                                                                                           \
        const size_t e_ = (b) + CONVERT_BLOCK < (n) ? (b) + CONVERT_BLOCK : (n);                   \
        for (size_t l_ = 0; l_ < CONVERT_BLOCK * sizeof *(src); l_ += 64)                          \
            __builtin_prefetch(                                                                    \
                (const void *)((uintptr_t)(src) + ((b) + CONVERT_AHEAD) * sizeof *(src) + l_), 0,  \
                3);                                                                                \
        _Pragma("omp simd") for (size_t i = (b); i < e_; i++) stmt;                                \
    } while (0)
#define CONVERT(n, src, i, stmt)                                                                   \
    do {                                                                                           \
        if ((n) > 65536) {                                                                         \
            _Pragma("omp parallel for schedule(static)") for (size_t b_ = 0; b_ < (n);             \
                                                              b_ += CONVERT_BLOCK)                 \
                CONVERT_RUN(b_, n, src, i, stmt);                                                  \
        } else {                                                                                   \
            for (size_t b_ = 0; b_ < (n); b_ += CONVERT_BLOCK) CONVERT_RUN(b_, n, src, i, stmt);   \
        }                                                                                          \
    } while (0)

void ops_bf16_from_f32(uint16_t *dst, const float *src, size_t n) {
    CONVERT(n, src, i, dst[i] = ops_cpu_bf16_bits(src[i]));
}

void ops_bf16_to_f32(float *dst, const uint16_t *src, size_t n) {
    CONVERT(n, src, i, dst[i] = ops_cpu_bf16_value(src[i]));
}

void ops_bf16_round_store(float *x, uint16_t *dst, size_t n) {
    if (!dst) {
        ops_cpu_bf16_round(x, x, n);
        return;
    }
    CONVERT(n, x, i, x[i] = ops_cpu_bf16_value(dst[i] = ops_cpu_bf16_bits(x[i])));
}

/* The pending keep of this thread (ops_bf16_keep_begin): x [n] to be rounded, its bits into
 * bits (or NULL); done once a product stored it kept. */
static _Thread_local struct {
    float *x;
    uint16_t *bits;
    size_t n;
    int done;
} tl_keep;

void ops_bf16_keep_begin(float *x, uint16_t *bits, size_t n) {
    tl_keep.x = x, tl_keep.bits = bits, tl_keep.n = n, tl_keep.done = 0;
}

void ops_bf16_keep_end(float *x) {
    if (tl_keep.x != x) base_fatal("ops_bf16_keep_end: no keep of this buffer begun");
    if (!tl_keep.done) ops_bf16_round_store(x, tl_keep.bits, tl_keep.n);
    tl_keep.x = NULL;
}

void ops_cpu_bf16_round(float *dst, const float *src, size_t n) {
    CONVERT(n, src, i, dst[i] = ops_cpu_bf16_value(ops_cpu_bf16_bits(src[i])));
}

/* ---- CPU and engine ------------------------------------------------------------------ */

/* "flags : ... amx_bf16 ... avx512_bf16" in /proc/cpuinfo (GCC 12's __builtin_cpu_supports
 * knows neither name). */
int ops_cpu_has_flag(const char *flag) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return 0;
    char line[8192];
    int found = 0;
    const size_t n = strlen(flag);
    while (!found && fgets(line, sizeof line, f)) {
        if (strncmp(line, "flags", 5) != 0) continue;
        for (char *p = strstr(line, flag); p && !found; p = strstr(p + 1, flag))
            found = (p == line || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\n' || !p[n]);
        break; /* the first processor's flags */
    }
    fclose(f);
    return found;
}

int ops_bf16_native(void) {
    static int cached = -1;
    int v = __atomic_load_n(&cached, __ATOMIC_ACQUIRE);
    if (v < 0) {
        v = ops_cpu_has_flag("amx_bf16") || ops_cpu_has_flag("avx512_bf16");
        __atomic_store_n(&cached, v, __ATOMIC_RELEASE);
    }
    return v;
}

int ops_cpu_bf16_amx_layouts(void) {
    static int cached = -1;
    int v = __atomic_load_n(&cached, __ATOMIC_ACQUIRE);
    if (v < 0) {
        /* unset: attention's on a CPU with bf16 units, AMX-BF16 or AVX512_BF16 (its results
         * equal the strided products' to the last digits that matter: docs/kernels.md; its
         * backward 10-14% faster at 0.6B x 2048 on a Zen 4 too, session 25), lmhead_ce's only
         * when asked; "0", "1" (both), or a comma list of layout names */
        static const struct {
            const char *name;
            int bit;
        } names[] = {{"attention", OPS_CPU_AMX_ATTENTION}, {"lmhead_ce", OPS_CPU_AMX_LMHEAD_CE}};
        const char *env = getenv("TITAN_AMX_LAYOUTS");
        int bad = 0;
        v = 0;
        if (!env || !*env)
            v = ops_bf16_native() ? OPS_CPU_AMX_ATTENTION : 0;
        else if (!strcmp(env, "1"))
            v = OPS_CPU_AMX_ATTENTION | OPS_CPU_AMX_LMHEAD_CE;
        else if (strcmp(env, "0"))
            for (const char *p = env; *p && !bad;) {
                const size_t n = strcspn(p, ",");
                int bit = 0;
                for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
                    if (strlen(names[i].name) == n && !strncmp(p, names[i].name, n))
                        bit = names[i].bit;
                bad = !bit;
                v |= bit;
                p += n + (p[n] == ',');
            }
        if (bad) {
            base_log(BASE_LOG_WARN,
                     "TITAN_AMX_LAYOUTS=%s: not 0, 1 or a list of attention, lmhead_ce; the AMX "
                     "layouts stay off",
                     env);
            v = 0;
        }
        __atomic_store_n(&cached, v, __ATOMIC_RELEASE);
    }
    return v;
}

enum { ENGINE_EMULATED = 1, ENGINE_ONEDNN = 2 };
static int engine(void);

/* ---- weight mirrors ------------------------------------------------------------------ */

#define MIRRORS 64
typedef struct {
    const float *base;
    size_t n;
    const void *mirror; /* bf16 (onednn) or bf16-rounded fp32 (emulated) */
    int owned;          /* a hold's converted copy (kernel scratch): given back by its release */
} mirror_range;
static mirror_range g_mirrors[MIRRORS];
static int g_n_mirrors;
static pthread_mutex_t g_mirror_lock = PTHREAD_MUTEX_INITIALIZER;

size_t ops_bf16_mirror_bytes(size_t n) {
    return n * (engine() == ENGINE_ONEDNN ? sizeof(uint16_t) : sizeof(float));
}

size_t ops_lmhead_ce_scratch_floats(size_t chunk, size_t V, ops_prec prec) {
    const size_t n = chunk * V;
    return prec == OPS_PREC_BF16 && engine() == ENGINE_ONEDNN ? (n + 1) / 2 : n;
}

int ops_lmhead_ce_chunk_for(long N, int V, int avx512) {
    const long logits = (avx512 ? 64L : 144L) << 20;
    long chunk = V > 0 ? (logits / V + 63) / 64 * 64 : 64;
    if (chunk < 64) chunk = 64; /* a vocabulary over the target: 64 rows, not 0 */
    return (int)(chunk > N ? N : chunk);
}

int ops_lmhead_ce_chunk(long N, int V) {
#if defined(__x86_64__)
    const int avx512 = __builtin_cpu_supports("avx512f");
#else
    const int avx512 = 1; /* the 64M rule measured elsewhere */
#endif
    return ops_lmhead_ce_chunk_for(N, V, avx512);
}

/* ---- the copy's layouts ----------------------------------------------------------------- */

/* Ranges of a bf16 copy (the onednn engine's) holding grouped_mm's expert stacks [E, OC, C] in
 * grouped_dpbf16.c's panel layout instead of row-major (ops_bf16_mirror_layout_grouped). At
 * 30B-A3B's 48 layers, 144 stacks a model. Written and read under g_layout_lock; the count
 * also atomically, so that a copy without layouts converts without taking the lock. */
#define LAYOUTS 1024
typedef struct {
    uintptr_t at; /* the stack's first element in the copy (uint16_t *) */
    size_t n;     /* E OC C */
    int OC, C;
} layout_range;
static layout_range g_layouts[LAYOUTS];
static int g_n_layouts;
static pthread_mutex_t g_layout_lock = PTHREAD_MUTEX_INITIALIZER;

int ops_bf16_mirror_layout_grouped(void *mirror, size_t off, const ops_impl *impl, int E, int OC,
                                   int C) {
#ifdef TITAN_HAVE_DPBF16
    static int cached = -3; /* TITAN_GROUPED_LAYOUT, read (and a bad value warned about) once */
    int sw = __atomic_load_n(&cached, __ATOMIC_ACQUIRE);
    if (sw == -3) {
        sw = ops_cpu_env_switch("TITAN_GROUPED_LAYOUT",
                                "grouped_mm/bf16 keeps its weights in its own layout where it can");
        __atomic_store_n(&cached, sw, __ATOMIC_RELEASE);
    }
    if (sw == 0 || engine() != ENGINE_ONEDNN || !ops_cpu_grouped_dpbf16_usable() || !impl ||
        impl->fwd != (ops_fn)ops_cpu_grouped_mm_bf16_fwd || E < 1 || OC < 2 || OC % 2 || C < 64 ||
        C % 64)
        return 0;
    const layout_range r = {(uintptr_t)((uint16_t *)mirror + off), (size_t)E * OC * C, OC, C};
    int ok = 0;
    pthread_mutex_lock(&g_layout_lock);
    int i = 0;
    while (i < g_n_layouts && g_layouts[i].at != r.at) i++;
    if (i < LAYOUTS) {
        g_layouts[i] = r;
        if (i == g_n_layouts) __atomic_store_n(&g_n_layouts, i + 1, __ATOMIC_RELEASE);
        ok = 1;
    }
    pthread_mutex_unlock(&g_layout_lock);
    return ok;
#else
    (void)mirror, (void)off, (void)impl, (void)E, (void)OC, (void)C;
    return 0;
#endif
}

void ops_bf16_mirror_layouts_clear(const void *mirror, size_t bytes) {
    const uintptr_t lo = (uintptr_t)mirror, hi = lo + bytes;
    pthread_mutex_lock(&g_layout_lock);
    for (int i = 0; i < g_n_layouts;)
        if (g_layouts[i].at >= lo && g_layouts[i].at < hi) {
            g_layouts[i] = g_layouts[g_n_layouts - 1];
            __atomic_store_n(&g_n_layouts, g_n_layouts - 1, __ATOMIC_RELEASE);
        } else
            i++;
    pthread_mutex_unlock(&g_layout_lock);
}

/* The layout range overlapping bf16 elements [lo, hi) (addresses) that starts first, or
 * found 0. */
static int layout_first(uintptr_t lo, uintptr_t hi, layout_range *out) {
    if (!__atomic_load_n(&g_n_layouts, __ATOMIC_ACQUIRE)) return 0;
    int found = 0;
    pthread_mutex_lock(&g_layout_lock);
    for (int i = 0; i < g_n_layouts; i++) {
        const layout_range *r = &g_layouts[i];
        if (r->at < hi && r->at + r->n * sizeof(uint16_t) > lo && (!found || r->at < out->at)) {
            *out = *r;
            found = 1;
        }
    }
    pthread_mutex_unlock(&g_layout_lock);
    return found;
}

void ops_bf16_mirror_convert(void *mirror, size_t off, const float *src, size_t n) {
    if (engine() != ENGINE_ONEDNN) {
        ops_cpu_bf16_round((float *)mirror + off, src, n);
        return;
    }
    const uint16_t *const m = (uint16_t *)mirror + off; /* element i of src goes to m[i] */
    const uintptr_t end = (uintptr_t)(m + n), es = sizeof(uint16_t);
    uintptr_t a = (uintptr_t)m;
    layout_range r;
    while (a < end) { /* row-major up to the next stack in a layout of its own, then that */
        const int in = layout_first(a, end, &r);
        const uintptr_t b = in && r.at > a ? r.at : in ? a : end; /* the stack's part: [b, z) */
        if (b > a) ops_bf16_from_f32((uint16_t *)a, src + (a - (uintptr_t)m) / es, (b - a) / es);
        if (!in) break;
        const uintptr_t z = r.at + r.n * es < end ? r.at + r.n * es : end;
#ifdef TITAN_HAVE_DPBF16
        ops_cpu_grouped_dpbf16_store((uint16_t *)r.at, r.OC, r.C, (b - r.at) / es,
                                     src + (b - (uintptr_t)m) / es, (z - b) / es);
#endif
        a = z;
    }
}

static int mirror_add(const float *base, size_t n, const void *mirror, int owned, base_err *err) {
    pthread_mutex_lock(&g_mirror_lock);
    int i = 0;
    while (i < g_n_mirrors && g_mirrors[i].base != base) i++;
    if (i == MIRRORS) {
        pthread_mutex_unlock(&g_mirror_lock);
        return base_fail(err, "bf16: more than %d weight mirrors (models) in one process", MIRRORS);
    }
    g_mirrors[i] = (mirror_range){base, n, mirror, owned};
    if (i == g_n_mirrors) g_n_mirrors++;
    pthread_mutex_unlock(&g_mirror_lock);
    return 0;
}

int ops_bf16_mirror_add(const float *base, size_t n, const void *mirror, base_err *err) {
    return mirror_add(base, n, mirror, 0, err);
}

/* Unregisters base's range; returns it (mirror NULL if none was registered). */
static mirror_range mirror_take(const float *base) {
    mirror_range r = {NULL, 0, NULL, 0};
    pthread_mutex_lock(&g_mirror_lock);
    for (int i = 0; i < g_n_mirrors; i++)
        if (g_mirrors[i].base == base) {
            r = g_mirrors[i];
            g_mirrors[i] = g_mirrors[--g_n_mirrors];
            break;
        }
    pthread_mutex_unlock(&g_mirror_lock);
    return r;
}

void ops_bf16_mirror_remove(const float *base) {
    const mirror_range r = mirror_take(base);
    if (r.owned) ops_cpu_scratch_give((void *)r.mirror);
}

static const void *mirror_find(const float *p, size_t n);

/* x[0, n) held as a bf16 operand: rounded in place when writable is x (emulated engine),
 * otherwise converted into an owned copy in the engine's format. -1 where a mirror holds it
 * already (an emitted output, ops_bf16_emit_begin): its holder releases it. */
static int hold(const float *x, float *writable, size_t n) {
    if (mirror_find(x, n)) return -1;
    const int dnnl = engine() == ENGINE_ONEDNN;
    void *m = writable;
    if (dnnl || !writable) {
        const size_t es = dnnl ? sizeof(uint16_t) : sizeof(float);
        /* kept scratch (scratch.c): a copy of tens of MB per call was fresh pages each time */
        if (!(m = ops_cpu_scratch_try(es * (n ? n : 1)))) return -1;
    }
    if (dnnl)
        ops_bf16_from_f32(m, x, n);
    else
        ops_cpu_bf16_round(m, x, n);
    base_err e;
    if (mirror_add(x, n, m, m != writable, &e)) {
        if (m != writable) ops_cpu_scratch_give(m);
        return -1;
    }
    return 0;
}

int ops_bf16_hold(float *x, size_t n) {
    return hold(x, x, n);
}

int ops_bf16_hold_copy(const float *x, size_t n) {
    return hold(x, NULL, n);
}

int ops_bf16_hold_rounded(const float *x, size_t n, const uint16_t *bits) {
    base_err e;
    if (engine() != ENGINE_ONEDNN) return mirror_add(x, n, x, 0, &e);
    return bits ? mirror_add(x, n, bits, 0, &e) : hold(x, NULL, n);
}

void ops_bf16_release(const float *x) {
    ops_bf16_mirror_remove(x);
}

int ops_bf16_holds_bits(void) {
    return engine() == ENGINE_ONEDNN;
}

int ops_bf16_grouped_mirrors(void) {
    return engine() == ENGINE_ONEDNN && !ops_cpu_grouped_dpbf16_usable();
}

/* The outputs this thread's next op is asked for in bf16 (ops_bf16_emit_begin): x [n], its bits
 * into the held mirror m (NULL: none made, x is held after the op), taken by the op that
 * writes them. Two for swiglu's backward (dgate, dup). */
enum { EMITS = 4 };
static _Thread_local struct {
    float *x;
    uint16_t *m;
    size_t n;
    int taken;
} tl_emit[EMITS];

void ops_bf16_emit_begin(float *x, size_t n) {
    int i = 0;
    while (i < EMITS && tl_emit[i].x) i++;
    if (i == EMITS) base_fatal("ops_bf16_emit_begin: more than %d outputs pending", EMITS);
    /* a mirror over x now would be read for the op's fresh values: a hold not released */
    if (mirror_find(x, n)) base_fatal("ops_bf16_emit_begin: the output is held already");
    uint16_t *m = NULL;
    base_err e;
    if (engine() == ENGINE_ONEDNN && (m = ops_cpu_scratch_try(sizeof(uint16_t) * (n ? n : 1))) &&
        mirror_add(x, n, m, 1, &e)) {
        ops_cpu_scratch_give(m);
        m = NULL;
    }
    tl_emit[i].x = x, tl_emit[i].m = m, tl_emit[i].n = n, tl_emit[i].taken = 0;
}

uint16_t *ops_cpu_bf16_emit_take(const float *x, size_t n, int take) {
    for (int i = 0; i < EMITS; i++)
        if (tl_emit[i].x == x && tl_emit[i].m && tl_emit[i].n == n && !tl_emit[i].taken) {
            tl_emit[i].taken = take;
            return tl_emit[i].m;
        }
    return NULL;
}

int ops_bf16_emit_end(float *x) {
    int i = 0;
    while (i < EMITS && tl_emit[i].x != x) i++;
    if (i == EMITS) base_fatal("ops_bf16_emit_end: no output of this buffer asked for");
    int held = 1;
    if (tl_emit[i].m && !tl_emit[i].taken) /* the op wrote x: the copy a hold makes */
        ops_bf16_from_f32(tl_emit[i].m, x, tl_emit[i].n);
    else if (!tl_emit[i].m)
        held = !hold(x, x, tl_emit[i].n);
    tl_emit[i].x = NULL;
    return held;
}

/* p's place in a registered mirror, whatever its layout there; NULL when none holds it. */
static const void *mirror_find(const float *p, size_t n) {
    const void *m = NULL;
    const size_t es = engine() == ENGINE_ONEDNN ? sizeof(uint16_t) : sizeof(float);
    pthread_mutex_lock(&g_mirror_lock);
    for (int i = 0; i < g_n_mirrors && !m; i++) {
        const mirror_range *r = &g_mirrors[i];
        if (p >= r->base && p + n <= r->base + r->n)
            m = (const char *)r->mirror + (size_t)(p - r->base) * es;
    }
    pthread_mutex_unlock(&g_mirror_lock);
    return m;
}

const void *ops_cpu_bf16_mirror_of(const float *p, size_t n) {
    const void *m = mirror_find(p, n);
    layout_range r; /* a range in another layout is no row-major operand */
    if (m && engine() == ENGINE_ONEDNN &&
        layout_first((uintptr_t)m, (uintptr_t)((const uint16_t *)m + n), &r))
        return NULL;
    return m;
}

const uint16_t *ops_cpu_bf16_bits_of(const float *p, size_t n) {
    return engine() == ENGINE_ONEDNN ? ops_cpu_bf16_mirror_of(p, n) : NULL;
}

const uint16_t *ops_cpu_bf16_grouped_of(const float *w, int E, int OC, int C) {
    const size_t n = (size_t)E * OC * C;
    const uint16_t *m = engine() == ENGINE_ONEDNN ? mirror_find(w, n) : NULL;
    layout_range r;
    if (!m || !layout_first((uintptr_t)m, (uintptr_t)(m + n), &r)) return NULL;
    return r.at == (uintptr_t)m && r.n == n && r.OC == OC && r.C == C ? m : NULL;
}

/* ---- operands ------------------------------------------------------------------------ */

/* An operand of rows x cols with leading dimension ld, as bf16 (h, for oneDNN) or as fp32
 * values rounded to bf16 (f, for the emulated engine): a mirrored weight as it is (ld kept),
 * anything else converted into a packed copy (ld = cols) owned by the operand. */
typedef struct {
    const uint16_t *h;
    const float *f;
    int ld;
    void *own;
} operand;

static int operand_get(operand *o, const float *x, int rows, int cols, int ld, int want_f32) {
    *o = (operand){NULL, NULL, ld, NULL};
    const void *m = ops_cpu_bf16_mirror_of(x, (size_t)(rows - 1) * ld + cols);
    const int mirror_f32 = engine() != ENGINE_ONEDNN;
    if (m && want_f32 == mirror_f32) { /* the mirror as it is */
        if (want_f32)
            o->f = m;
        else
            o->h = m;
        return 0;
    }
    /* a bf16 mirror wanted as fp32 (a shape oneDNN refused) is expanded; anything else converted */
    const size_t n = (size_t)rows * cols,
                 bytes = (want_f32 ? sizeof(float) : sizeof(uint16_t)) * (n ? n : 1);
    /* 64-byte aligned: the AMX kernels load a tile row a cache line at a time (amx_gemm.c
     * reads A's rows straight only when they start on a line; malloc's 16-byte alignment
     * made every converted operand a packed copy) */
    o->own = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!o->own) return -1;
    o->ld = cols;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int r = 0; r < rows; r++) { /* a row of up to 65536 converts on this thread */
        float *f = (float *)o->own + (size_t)r * cols;
        if (want_f32 && m)
            ops_bf16_to_f32(f, (const uint16_t *)m + (size_t)r * ld, (size_t)cols);
        else if (want_f32)
            ops_cpu_bf16_round(f, x + (size_t)r * ld, (size_t)cols);
        else
            ops_bf16_from_f32((uint16_t *)o->own + (size_t)r * cols, x + (size_t)r * ld,
                              (size_t)cols);
    }
    if (want_f32)
        o->f = o->own;
    else
        o->h = o->own;
    return 0;
}

/* ---- oneDNN engine -------------------------------------------------------------------- */

#ifdef TITAN_HAVE_DNNL
typedef struct {
    int ta, tb, M, N, K, lda, ldb, ldc, acc, c16; /* the key (c16: a bf16 destination) */
    dnnl_primitive_t prim;
    size_t scratch; /* bytes of user scratchpad its execution needs */
    int busy;       /* executions in progress: a busy entry is never replaced */
    unsigned gen;   /* which primitive the entry holds (a refill bumps it): tl_mem's key */
} dnnl_entry;

/* Attention's tile products alone are ~5 shapes per 64 rows of sequence (attention_gemm.c),
 * on top of the blocks' and the lm_head's: room for a few sequence lengths. */
#define DNNL_CACHE 1024
static dnnl_entry g_cache[DNNL_CACHE];
static int g_cache_n, g_cache_next;
/* Open-addressing index over g_cache (slot + 1; 0 empty), so a lookup under the lock costs a
 * probe or two, not a scan of up to 1024 keys: attention makes ~10^5 GEMM calls a step at
 * 0.6B x 2048. Rebuilt whole on an eviction (rare: only past DNNL_CACHE shapes). */
#define DNNL_INDEX (4 * DNNL_CACHE)
static int g_index[DNNL_INDEX];

static int key_eq(const dnnl_entry *a, const dnnl_entry *b) {
    return a->ta == b->ta && a->tb == b->tb && a->M == b->M && a->N == b->N && a->K == b->K &&
           a->lda == b->lda && a->ldb == b->ldb && a->ldc == b->ldc && a->acc == b->acc &&
           a->c16 == b->c16;
}

static unsigned key_hash(const dnnl_entry *k) {
    const int v[10] = {k->ta, k->tb, k->M, k->N, k->K, k->lda, k->ldb, k->ldc, k->acc, k->c16};
    uint32_t h = 2166136261u; /* FNV-1a over the fields */
    for (int i = 0; i < 10; i++) h = (h ^ (uint32_t)v[i]) * 16777619u;
    return h ^ (h >> 15);
}

static void index_put(int slot) {
    unsigned h = key_hash(&g_cache[slot]) & (DNNL_INDEX - 1);
    while (g_index[h]) h = (h + 1) & (DNNL_INDEX - 1);
    g_index[h] = slot + 1;
}

static dnnl_entry *index_find(const dnnl_entry *k) {
    for (unsigned h = key_hash(k) & (DNNL_INDEX - 1); g_index[h]; h = (h + 1) & (DNNL_INDEX - 1))
        if (key_eq(&g_cache[g_index[h] - 1], k)) return &g_cache[g_index[h] - 1];
    return NULL;
}
static dnnl_engine_t g_engine;
static unsigned g_gen; /* the last dnnl_entry.gen handed out (under the lock) */
static pthread_mutex_t g_dnnl_lock = PTHREAD_MUTEX_INITIALIZER;
/* One stream per thread: GEMMs run concurrently from the threads of a parallel region
 * (attention's tiles); every primitive uses a user scratchpad (below), the mode oneDNN
 * documents as thread-safe for concurrent executions. Freed when the thread exits (tl_exit). */
static _Thread_local dnnl_stream_t tl_stream;
/* Each thread's scratchpad, grown to the largest a primitive it ran asked for and kept: a
 * large GEMM's (oneDNN may stage the weights there) would otherwise be allocated and faulted
 * in on every call, as the library-managed scratchpad this replaces was not. */
static _Thread_local void *tl_scratch;
static _Thread_local size_t tl_scratch_n;

static void *scratch_get(size_t n) {
    if (n > tl_scratch_n) {
        free(tl_scratch);
        tl_scratch_n = 0;
        if (!(tl_scratch = malloc(n))) return NULL;
        tl_scratch_n = n;
    }
    return tl_scratch;
}

/* Each thread's memory objects (src, weights, dst, scratchpad) of the primitives it ran, one
 * slot per cache entry (allocated at the thread's first call: 48 KiB), tagged with the entry's
 * gen: a call points them at its buffers (dnnl_memory_set_data_handle) instead of creating and
 * destroying four objects, which with their mallocs were half of a call's ~2 us outside the
 * kernel (reference oneDNN build, 1x1x1 matmul, perf). One slot per entry, not a smaller
 * direct-mapped table: attention's tasks cycle through ~5 shapes per 64 positions (~160 at
 * 2048), which would evict each other. Freed when the thread exits, with the stream and the
 * scratchpad (tl_exit). */
typedef struct {
    unsigned gen; /* the gen of the entry its objects were made for (0: none; gens start at 1) */
    dnnl_memory_t m[4];
} tl_mem_slot;
static _Thread_local tl_mem_slot *tl_mem; /* [DNNL_CACHE] */

static void tl_mem_clear(tl_mem_slot *s) {
    for (int i = 0; i < 4; i++)
        if (s->m[i]) dnnl_memory_destroy(s->m[i]);
    *s = (tl_mem_slot){0};
}

/* A thread's stream, scratchpad and memory objects, freed as it exits: libgomp ends pool
 * threads when a team shrinks (and a program's own threads end), which left them behind (an
 * ASan leak report on a CPU with bf16 units). The main thread's stay until the process ends. */
static pthread_key_t g_tl_key;
static int g_tl_key_ok; /* pthread_key_create succeeded (set once, under g_tl_once) */
static pthread_once_t g_tl_once = PTHREAD_ONCE_INIT;

static void tl_exit(void *unused) {
    (void)unused;
    if (tl_mem) {
        for (int i = 0; i < DNNL_CACHE; i++) tl_mem_clear(&tl_mem[i]);
        free(tl_mem);
        tl_mem = NULL;
    }
    free(tl_scratch);
    tl_scratch = NULL;
    tl_scratch_n = 0;
    if (tl_stream) dnnl_stream_destroy(tl_stream);
    tl_stream = NULL;
}

static void tl_key_make(void) {
    g_tl_key_ok = !pthread_key_create(&g_tl_key, tl_exit);
}

/* Registers this thread for tl_exit (at its first call, before it allocates any of them). */
static void tl_register(void) {
    pthread_once(&g_tl_once, tl_key_make);
    if (g_tl_key_ok) pthread_setspecific(g_tl_key, (void *)1); /* non-NULL: the destructor runs */
}

/* *out = the memory objects of entry e's primitive pointed at A, B, C and scratch (the fourth
 * only with a scratchpad): this thread's cached ones, or, for an entry outside the cache
 * (cached 0) or without memory for the table, made in own, which the caller clears. 0 on
 * success. */
static int tl_mem_get(const dnnl_entry *e, int cached, const void *A, const void *B, void *C,
                      void *scratch, tl_mem_slot *own, tl_mem_slot **out) {
    tl_mem_slot *s = own;
    if (cached && (tl_mem || (tl_mem = calloc(DNNL_CACHE, sizeof *tl_mem))))
        s = &tl_mem[e - g_cache];
    if (s == own || s->gen != e->gen) {
        tl_mem_clear(s);
        const_dnnl_primitive_desc_t pd;
        if (dnnl_primitive_get_primitive_desc(e->prim, &pd)) return -1;
        const dnnl_query_t q[4] = {dnnl_query_src_md, dnnl_query_weights_md, dnnl_query_dst_md,
                                   dnnl_query_scratchpad_md};
        for (int i = 0; i < (scratch ? 4 : 3); i++)
            if (dnnl_memory_create(&s->m[i], dnnl_primitive_desc_query_md(pd, q[i], 0), g_engine,
                                   DNNL_MEMORY_NONE)) {
                tl_mem_clear(s);
                return -1;
            }
        s->gen = e->gen;
    }
    void *h[4] = {(void *)A, (void *)B, C, scratch};
    for (int i = 0; i < (scratch ? 4 : 3); i++)
        if (!s->m[i] || dnnl_memory_set_data_handle(s->m[i], h[i])) {
            tl_mem_clear(s);
            return -1;
        }
    *out = s;
    return 0;
}

/* The implementation a product runs: oneDNN's first choice (brgemm), except for products that
 * write fp32 where its gemm driver (`gemm:jit`) measured faster:
 * - with AVX512_BF16 but no AMX: the weight gradients (a transposed A, dW = dy^T x) and products
 *   with N >= 1024 or K >= 65536 (the lm_head's, 0.6B's projections);
 * - with AMX: products with K >= 65536 (the lm_head's input gradient dy W, K = the vocabulary:
 *   brgemm 448 -> gemm:jit 1250 GFLOP/s at 448x512x151936, 459 -> 1178 at 448x1024x151936) and
 *   the backward's (B not transposed) with N >= 1024 and K >= 2048 (0.6B's dx and dW: 1049-1137
 *   -> 1208-1275 at 2048x1024x2048, 2048x1024x3072, 3072x1024x2048). brgemm stays ahead on every
 *   forward product and at N = 512 (the bench model's dW 1277-1418 vs 1077-1196). Intel Xeon with
 *   AMX-BF16, 2 threads, medians of 5 interleaved runs, bench/RESULTS.md "Session 19".
 * Measured on an AMD EPYC Zen 4 (2 threads, oneDNN 2.6.3, medians of 7-11 interleaved runs,
 * build/bench_dnnl_impls; bench/RESULTS.md "Session 12" and "Session 13"), brgemm -> gemm:jit in
 * GFLOP/s: 0.6B's dW 343 -> 379, 327 -> 362; x W^T 448x151936x512 322 -> 345, 2048x3072x1024
 * 331 -> 367, 2048x1536x512 302 -> 338; dy W 448x512x151936 302 -> 335, 2048x3072x1024 274 ->
 * 304, 2048x1024x2048 272 -> 305; while at N = 512 with K <= 1536 brgemm stays ahead (x W^T
 * 2048x512x512 274 vs 218, dy W 2048x512x1536 346 vs 320). TITAN_DNNL_IMPL=PREFIX picks the first
 * implementation whose name starts with PREFIX for every product (an experiment knob, e.g. "brg" or
 * "gemm:jit"). The choice depends on the shape and CPU only, so a run stays deterministic. */
static int pd_pick(dnnl_primitive_desc_t *pd, const dnnl_matmul_desc_t *md,
                   const_dnnl_primitive_attr_t attr, const dnnl_entry *k) {
    static int amx = -1;
    if (amx < 0) amx = ops_cpu_has_flag("amx_bf16");
    const char *env = getenv("TITAN_DNNL_IMPL");
    /* not for a bf16 destination: the gemm driver stages all of C in fp32 in its scratchpad
     * (the lm_head's 448 x 151936 logits: +272 MB resident) */
    const int gemm_jit = !k->c16 && (amx ? k->K >= 65536 || (!k->tb && k->N >= 1024 && k->K >= 2048)
                                         : k->ta || k->N >= 1024 || k->K >= 65536);
    const char *want = env && *env ? env : gemm_jit ? "gemm:jit" : NULL;
    *pd = NULL;
    if (want) {
        dnnl_primitive_desc_iterator_t it;
        if (!dnnl_primitive_desc_iterator_create(&it, md, attr, g_engine, NULL)) {
            do {
                dnnl_primitive_desc_t p = dnnl_primitive_desc_iterator_fetch(it);
                const char *impl = NULL;
                if (p && !dnnl_primitive_desc_query(p, dnnl_query_impl_info_str, 0, &impl) &&
                    impl && !strncmp(impl, want, strlen(want))) {
                    *pd = p;
                    break;
                }
                if (p) dnnl_primitive_desc_destroy(p);
            } while (dnnl_primitive_desc_iterator_next(it) == dnnl_success);
            dnnl_primitive_desc_iterator_destroy(it);
        }
        if (*pd) return 0;
        static int warned; /* under g_dnnl_lock (bf16_dnnl_get) */
        if (want == env && !warned) {
            warned = 1;
            base_log(BASE_LOG_WARN,
                     "TITAN_DNNL_IMPL=%s: no oneDNN implementation of a %dx%dx%d bf16 product "
                     "starts so; oneDNN's own choice runs (said once)",
                     env, k->M, k->N, k->K);
        }
    }
    return dnnl_primitive_desc_create(pd, md, attr, g_engine, NULL) ? -1 : 0;
}

static dnnl_primitive_t bf16_dnnl_make(const dnnl_entry *k, size_t *scratch) {
    dnnl_memory_desc_t a, b, c;
    const dnnl_dims_t ad = {k->M, k->K}, bd = {k->K, k->N}, cd = {k->M, k->N};
    const dnnl_dims_t as = {k->ta ? 1 : k->lda, k->ta ? k->lda : 1};
    const dnnl_dims_t bs = {k->tb ? 1 : k->ldb, k->tb ? k->ldb : 1};
    const dnnl_dims_t cs = {k->ldc, 1};
    if (dnnl_memory_desc_init_by_strides(&a, 2, ad, dnnl_bf16, as) ||
        dnnl_memory_desc_init_by_strides(&b, 2, bd, dnnl_bf16, bs) ||
        dnnl_memory_desc_init_by_strides(&c, 2, cd, k->c16 ? dnnl_bf16 : dnnl_f32, cs))
        return NULL;
    dnnl_matmul_desc_t md;
    if (dnnl_matmul_desc_init(&md, &a, &b, NULL, &c)) return NULL;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t p = NULL;
    if (dnnl_primitive_attr_create(&attr)) return NULL;
    if (dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user)) goto out;
    if (k->acc && (dnnl_post_ops_create(&po) || dnnl_post_ops_append_sum(po, 1.0f) ||
                   dnnl_primitive_attr_set_post_ops(attr, po)))
        goto out;
    if (pd_pick(&pd, &md, attr, k)) goto out;
    const dnnl_memory_desc_t *sd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    *scratch = sd ? dnnl_memory_desc_get_size(sd) : 0;
    if (dnnl_primitive_create(&p, pd)) p = NULL;
out:
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (po) dnnl_post_ops_destroy(po);
    dnnl_primitive_attr_destroy(attr);
    return p;
}

/* The cached primitive of key k (created on a miss), marked busy; NULL if it cannot be made.
 * A shape oneDNN refuses is cached too (prim NULL), so that later calls fall back at once
 * instead of retrying the creation under the lock. *owned: not cached (every entry busy), the
 * caller destroys it. */
static dnnl_entry *bf16_dnnl_get(const dnnl_entry *k, dnnl_entry *tmp, int *owned) {
    dnnl_entry *e = NULL;
    *owned = 0;
    pthread_mutex_lock(&g_dnnl_lock);
    if (!g_engine && dnnl_engine_create(&g_engine, dnnl_cpu, 0)) g_engine = NULL;
    if (g_engine) e = index_find(k);
    if (g_engine && !e) {
        size_t scratch = 0;
        dnnl_primitive_t p = bf16_dnnl_make(k, &scratch);
        int fresh = 0;
        if (g_cache_n < DNNL_CACHE) {
            e = &g_cache[g_cache_n++];
            fresh = 1;
        } else { /* full: replace round robin, skipping entries in use */
            for (int i = 0; i < DNNL_CACHE && !e; i++) {
                dnnl_entry *c = &g_cache[g_cache_next];
                g_cache_next = (g_cache_next + 1) % DNNL_CACHE;
                if (!c->busy) e = c;
            }
            if (e && e->prim) dnnl_primitive_destroy(e->prim);
        }
        if (!e && p) {
            e = tmp;
            *owned = 1;
        }
        if (e) {
            *e = *k;
            e->prim = p;
            e->scratch = scratch;
            e->gen = ++g_gen;
            if (fresh) {
                index_put((int)(e - g_cache));
            } else if (!*owned) { /* a key evicted: the index again, from the entries */
                memset(g_index, 0, sizeof g_index);
                for (int i = 0; i < g_cache_n; i++) index_put(i);
            }
        }
    }
    if (e && !e->prim) e = NULL; /* refused */
    if (e) e->busy++;
    pthread_mutex_unlock(&g_dnnl_lock);
    return e;
}

/* C[M,N] (+)= op(A) op(B) with bf16 A, B and an fp32 C, or with c16 a bf16 C (the fp32 sums
 * rounded once, to nearest even; no acc); 0 on success (the caller falls back otherwise).
 * Thread-safe: the primitive is looked up under the lock and executed outside it, on this
 * thread's stream with its own scratchpad; inside a parallel region oneDNN runs it on the
 * calling thread alone. */
static int onednn_gemm(int ta, int tb, int M, int N, int K, const uint16_t *A, int lda,
                       const uint16_t *B, int ldb, int acc, int c16, void *C, int ldc) {
    const dnnl_entry key = {ta, tb, M, N, K, lda, ldb, ldc, acc, c16, NULL, 0, 0, 0};
    dnnl_entry tmp;
    int owned, rc = -1;
    dnnl_entry *e = bf16_dnnl_get(&key, &tmp, &owned);
    if (!e) return -1;
    if (!tl_stream) {
        tl_register();
        if (dnnl_stream_create(&tl_stream, g_engine, dnnl_stream_default_flags)) tl_stream = NULL;
    }
    void *scratch = e->scratch ? scratch_get(e->scratch) : NULL;
    tl_mem_slot own = {0}, *mem;
    if (tl_stream && (!e->scratch || scratch) &&
        !tl_mem_get(e, !owned, A, B, C, scratch, &own, &mem)) {
        const dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, mem->m[0]},
                                        {DNNL_ARG_WEIGHTS, mem->m[1]},
                                        {DNNL_ARG_DST, mem->m[2]},
                                        {DNNL_ARG_SCRATCHPAD, mem->m[3]}};
        /* past this point C may be written: no fallback (it would add the product twice
         * where acc is set) */
        if (dnnl_primitive_execute(e->prim, tl_stream, scratch ? 4 : 3, args) ||
            dnnl_stream_wait(tl_stream)) {
            base_log(BASE_LOG_ERROR, "bf16 engine: oneDNN failed to execute a %dx%dx%d matmul", M,
                     N, K);
            abort(); /* a void op cannot report it */
        }
        rc = 0;
    }
    tl_mem_clear(&own);
    if (owned) {
        dnnl_primitive_destroy(e->prim);
    } else {
        pthread_mutex_lock(&g_dnnl_lock);
        e->busy--;
        pthread_mutex_unlock(&g_dnnl_lock);
    }
    return rc;
}
#endif

#ifdef TITAN_HAVE_DNNL
typedef int (*gemm16_fn)(int ta, int tb, int M, int N, int K, const uint16_t *A, int lda,
                         const uint16_t *B, int ldb, int acc, int c16, void *C, int ldc);

/* A bf16 GEMM engine checked once against exact arithmetic before it is trusted: every
 * transpose combination titan uses (x W^T, dy W, dy^T x), with and without accumulation (beta
 * 1), on padded leading dimensions, with small integers (exact in bf16, their products and sums
 * exact in fp32), so any difference is a wrong stride, transpose, edge or post-op, not
 * rounding; the bf16 destination against the exact sum rounded to nearest even. Returns 0, or
 * -1 with the failing case in why. */
static int gemm_selfcheck(gemm16_fn f, int M, int N, int K, char *why, size_t n) {
    enum { PAD = 3 };
    static const int tt[3][2] = {{0, 1}, {0, 0}, {1, 0}};
    const size_t sz = (size_t)(K + PAD) * (size_t)((M > N ? M : N) + PAD),
                 csz = (size_t)M * (N + PAD);
    uint16_t *a = malloc(sizeof *a * sz), *b = malloc(sizeof *b * sz),
             *c16 = malloc(sizeof *c16 * csz);
    float *c = malloc(sizeof *c * csz), *want = malloc(sizeof *want * csz);
    int bad = !a || !b || !c16 || !c || !want ? -1 : 0;
    for (size_t i = 0; !bad && i < sz; i++) {
        a[i] = ops_cpu_bf16_bits((float)((int)((i * 7 + 3) % 5) - 2));
        b[i] = ops_cpu_bf16_bits((float)((int)((i * 5 + 1) % 7) - 3));
    }
    for (int t = 0; !bad && t < 3; t++)
        for (int acc = 0; !bad && acc <= 1; acc++) {
            const int ta = tt[t][0], tb = tt[t][1];
            const int lda = (ta ? M : K) + PAD, ldb = (tb ? K : N) + PAD, ldc = N + PAD;
            for (size_t i = 0; i < csz; i++) c[i] = want[i] = (float)(i % 3);
            for (int i = 0; i < M; i++)
                for (int j = 0; j < N; j++) {
                    float sum = acc ? want[i * ldc + j] : 0.0f;
                    for (int k = 0; k < K; k++)
                        sum += ops_cpu_bf16_value(a[ta ? k * lda + i : i * lda + k]) *
                               ops_cpu_bf16_value(b[tb ? j * ldb + k : k * ldb + j]);
                    want[i * ldc + j] = sum;
                }
            bad = f(ta, tb, M, N, K, a, lda, b, ldb, acc, 0, c, ldc);
            for (int i = 0; !bad && i < M; i++)
                for (int j = 0; j < N; j++) bad |= c[i * ldc + j] != want[i * ldc + j];
            if (!bad && !acc) { /* the bf16 destination (lmhead_ce's logits) */
                bad = f(ta, tb, M, N, K, a, lda, b, ldb, 0, 1, c16, ldc);
                for (int i = 0; !bad && i < M; i++)
                    for (int j = 0; j < N; j++)
                        bad |= c16[i * ldc + j] != ops_cpu_bf16_bits(want[i * ldc + j]);
            }
            if (bad)
                snprintf(why, n, "%s%s GEMM%s (%dx%dx%d) %s", ta ? "A^T" : "A", tb ? " B^T" : " B",
                         acc ? " with accumulation" : "", M, N, K,
                         bad == -1 ? "could not be run" : "gave a wrong result");
        }
    free(a);
    free(b);
    free(c16);
    free(c);
    free(want);
    return bad ? -1 : 0;
}

/* ---- titan's own AMX GEMM (amx_gemm.c) ---------------------------------------------- */

#ifdef TITAN_HAVE_AMX_GEMM
/* Which bf16 products run on titan's AMX kernel instead of oneDNN: TITAN_AMX_GEMM unset: the
 * products it measured faster in the training step (bench/RESULTS.md "Session 21"), "1" all of
 * them, "0" none. Only with the onednn engine on a CPU where ops_cpu_amx_usable() and the
 * kernel passed gemm_selfcheck (edges, K blocks). Decided once per process. */
enum { AMX_GEMM_OFF = 1, AMX_GEMM_MEASURED, AMX_GEMM_ALL };

static int amx_gemm_mode(void) {
    static int mode;
    int m = __atomic_load_n(&mode, __ATOMIC_ACQUIRE);
    if (!m) {
        m = AMX_GEMM_OFF;
        const int sw = ops_cpu_env_switch("TITAN_AMX_GEMM", "titan's AMX GEMM stays off"),
                  all = sw == 1, none = sw == 0;
        if (sw != -2 && !none && ops_cpu_amx_usable()) {
            char why[160];
            /* 37 x 45: edges in both; K 2100: two K blocks (A not transposed; padded, so packed
             * per block) and five (A^T), the last a partial one; 3 rows: the few-rows path
             * (computed transposed). test_amx_gemm covers rows read in place. */
            if (gemm_selfcheck(ops_cpu_amx_gemm, 37, 45, 2100, why, sizeof why) ||
                gemm_selfcheck(ops_cpu_amx_gemm, 3, 45, 1100, why, sizeof why))
                base_log(BASE_LOG_WARN,
                         "bf16 engine: titan's AMX GEMM failed its check (%s); oneDNN runs "
                         "every product",
                         why);
            else
                m = all ? AMX_GEMM_ALL : AMX_GEMM_MEASURED;
        }
        __atomic_store_n(&mode, m, __ATOMIC_RELEASE);
    }
    return m;
}

/* The products titan's AMX kernel measured faster than oneDNN in the training step: those with
 * an fp32 result called outside a parallel region (the projections' three products, the
 * lm_head's input and weight gradients). Not the lm_head's bf16 logits (level with oneDNN's
 * brgemm in the step: lmhead_ce 892 / 868 / 1046 against 899 / 894 / 927 ms, alternated) nor
 * attention's per-head products, run by each thread inside its own parallel region (slower on
 * the AMX kernel: its per-call packing is not amortised on 64-wide heads). Bench model,
 * profiled steps (bench/RESULTS.md "Session 21"): lmhead_ce 990 -> 875-893 ms a step, the
 * projections' backward 200-207 -> 184-190 and forward 93-106 -> 73-81; with attention's
 * products attention forward 37 -> 57 ms. */
static int amx_gemm_measured(int c16) {
    /* omp_get_level, not omp_in_parallel: a one-thread team is a parallel region too, and
     * which engine runs a product must not depend on the thread count (bitwise results) */
    return !c16 && omp_get_level() == 0;
}
#endif

/* Whether titan's AMX kernel takes a product with a bf16 (c16) or fp32 result here */
static int amx_takes(int c16) {
#ifdef TITAN_HAVE_AMX_GEMM
    const int mode = amx_gemm_mode();
    return mode == AMX_GEMM_ALL || (mode == AMX_GEMM_MEASURED && amx_gemm_measured(c16));
#else
    (void)c16;
    return 0;
#endif
}

/* C[M,N] (+)= op(A) op(B) on the engine's bf16 GEMM: titan's AMX kernel for the products it
 * takes, oneDNN's matmul for the rest; 0 on success (the caller falls back otherwise). */
static int bf16_engine_gemm(int ta, int tb, int M, int N, int K, const uint16_t *A, int lda,
                            const uint16_t *B, int ldb, int acc, int c16, void *C, int ldc) {
    if (amx_takes(c16) && !ops_cpu_amx_gemm(ta, tb, M, N, K, A, lda, B, ldb, acc, c16, C, ldc))
        return 0;
    return onednn_gemm(ta, tb, M, N, K, A, lda, B, ldb, acc, c16, C, ldc);
}

static int dnnl_selfcheck(char *why, size_t n) {
    return gemm_selfcheck(onednn_gemm, 5, 7, 9, why, n);
}
#endif

/* oneDNN where the CPU has bf16 units (or TITAN_BF16_ENGINE=onednn), its bf16 matmul can be
 * made and it passes dnnl_selfcheck: oneDNN 2.6 has no bf16 matmul at all below AVX-512
 * (dnnl_unimplemented on an AVX2 CPU, even its reference kernel), so there the emulated engine
 * serves (with a warning only when onednn was asked for by name). */
static int engine(void) {
    static int chosen;
    int e = __atomic_load_n(&chosen, __ATOMIC_ACQUIRE);
    if (!e) {
        const char *env = getenv("TITAN_BF16_ENGINE");
        const int forced = env && !strcmp(env, "onednn");
        e = ops_bf16_native() || forced ? ENGINE_ONEDNN : ENGINE_EMULATED;
        if (env && !strcmp(env, "emulated")) e = ENGINE_EMULATED;
#ifdef TITAN_HAVE_DNNL
        char why[160];
        if (e == ENGINE_ONEDNN && dnnl_selfcheck(why, sizeof why)) {
            /* on a CPU with bf16 units a failure is a defect worth seeing; below them (oneDNN
             * has no bf16 matmul there) only a user who asked for onednn hears of it */
            if (ops_bf16_native() || forced)
                base_log(BASE_LOG_WARN,
                         "bf16 engine: oneDNN's bf16 matmul failed its check (%s); "
                         "bf16 GEMMs run emulated",
                         why);
            e = ENGINE_EMULATED;
        }
#else
        e = ENGINE_EMULATED;
#endif
        __atomic_store_n(&chosen, e, __ATOMIC_RELEASE);
    }
    return e;
}

const char *ops_bf16_engine(void) {
    return engine() == ENGINE_ONEDNN ? "onednn" : "emulated";
}

const char *ops_bf16_amx_gemm(void) {
#if defined(TITAN_HAVE_DNNL) && defined(TITAN_HAVE_AMX_GEMM)
    /* the mode first: TITAN_AMX_GEMM's value is checked (a bad one said) on the emulated
     * engine too */
    const int m = amx_gemm_mode();
    if (engine() == ENGINE_ONEDNN) {
        if (m == AMX_GEMM_ALL) return "all products";
        if (m == AMX_GEMM_MEASURED) return "fp32-result products";
    }
#endif
    return "none";
}

/* One of titan's AMX kernels beyond the GEMM, switched by the environment variable var (0 or
 * 1; unset: dflt): on with the onednn engine and titan's AMX GEMM on; another value is warned
 * about and leaves the default (`keeps`: what stays as it is). *state caches it (0 unknown, 1
 * on, -1 off): decided once per process. */
static int amx_kernel_on(int *state, const char *var, int dflt, const char *keeps) {
    int st = __atomic_load_n(state, __ATOMIC_ACQUIRE);
    if (!st) {
        const int sw = ops_cpu_env_switch(var, keeps), want = sw >= 0 ? sw : dflt;
        st = -1;
#if defined(TITAN_HAVE_DNNL) && defined(TITAN_HAVE_AMX_GEMM)
        if (want && engine() == ENGINE_ONEDNN && amx_gemm_mode() != AMX_GEMM_OFF) st = 1;
#else
        (void)want;
#endif
        __atomic_store_n(state, st, __ATOMIC_RELEASE);
    }
    return st > 0;
}

int ops_cpu_bf16_fused_lmhead_ce(void) {
    static int state;
    return amx_kernel_on(&state, "TITAN_AMX_LMHEAD_CE", 1, "lm_head + CE stays fused where it can");
}

int ops_cpu_bf16_amx_attention(void) {
    static int state;
    /* the variable first: a bad value is reported on every CPU, not only where the layout
     * would be used (an AMX-only check let it pass unseen elsewhere) */
    return amx_kernel_on(&state, "TITAN_AMX_ATTENTION", 1,
                         "attention's products stay on AMX tiles where they can") &&
           (ops_cpu_bf16_amx_layouts() & OPS_CPU_AMX_ATTENTION);
}

int ops_cpu_bf16_grouped_amx(void) {
    static int state;
    /* opt-in: measured slower than the per-expert products on an AMX Xeon (docs/kernels.md) */
    return amx_kernel_on(&state, "TITAN_GROUPED_AMX", 0,
                         "grouped_mm/bf16's experts stay as they are");
}

int ops_lmhead_ce_fused(int D) {
    return D > 0 && D % 32 == 0 && ops_cpu_bf16_fused_lmhead_ce();
}

const char *ops_bf16_lmhead_ce(void) {
    return ops_cpu_bf16_fused_lmhead_ce() ? "fused on AMX tiles" : "chunked logits";
}

const char *ops_bf16_attention(void) {
    if (ops_cpu_bf16_amx_attention()) return "AMX tiles";
    if (engine() != ENGINE_ONEDNN) return "emulated";
    return ops_cpu_attention_dpbf16_usable() ? "AVX512_BF16 forward, oneDNN backward" : "oneDNN";
}

const char *ops_bf16_grouped_mm(void) {
    if (engine() != ENGINE_ONEDNN) return "emulated";
    /* one product per expert: titan's AMX GEMM takes them (fp32 results, top level) where it
     * is on, oneDNN elsewhere */
    if (!ops_cpu_grouped_dpbf16_usable())
        return strcmp(ops_bf16_amx_gemm(), "none") ? "titan's AMX GEMM per expert" : "oneDNN";
    return ops_cpu_bf16_grouped_amx() ? "AMX tiles and AVX512_BF16" : "AVX512_BF16";
}

const char *ops_bf16_layouts(void) {
    static const char *const names[] = {"none", "attention", "lmhead_ce", "attention, lmhead_ce"};
    const int all = OPS_CPU_AMX_ATTENTION | OPS_CPU_AMX_LMHEAD_CE; /* names' index: the mask */
    const int v = ops_cpu_bf16_amx_layouts(); /* read (a bad value said) on every engine */
    return names[engine() == ENGINE_ONEDNN ? v & all : 0];
}

#ifndef TITAN_HAVE_AMX_GEMM
/* a build without titan's AMX kernel (not x86-64, or a compiler without -mamx-tile) */
int ops_cpu_amx_usable(void) {
    return 0;
}

int ops_cpu_amx_gemm(int ta, int tb, int M, int N, int K, const uint16_t *A, int lda,
                     const uint16_t *B, int ldb, int acc, int c16, void *C, int ldc) {
    (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)A, (void)lda, (void)B, (void)ldb;
    (void)acc, (void)c16, (void)C, (void)ldc;
    return -1;
}

int ops_cpu_amx_gemm_keep(int ta, int tb, int M, int N, int K, const uint16_t *A, int lda,
                          const uint16_t *B, int ldb, float *C, int ldc, uint16_t *bits) {
    (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)A, (void)lda, (void)B, (void)ldb;
    (void)C, (void)ldc, (void)bits;
    return -1;
}

void ops_cpu_amx_pack(uint32_t *dst, int tb, const void *B, int f32, int ldb, int K, int N) {
    (void)dst, (void)tb, (void)B, (void)f32, (void)ldb, (void)K, (void)N;
    abort(); /* ops_cpu_bf16_amx_attention() is 0 here: never called */
}

void ops_cpu_amx_pack_both(uint32_t *xt, uint32_t *xn, const float *x, int ld, int T, int hd) {
    (void)xt, (void)xn, (void)x, (void)ld, (void)T, (void)hd;
    abort(); /* ops_cpu_bf16_amx_attention() is 0 here: never called */
}

void ops_cpu_amx_transpose(uint16_t *dst, const uint16_t *A, int lda, int rows, int cols) {
    (void)dst, (void)A, (void)lda, (void)rows, (void)cols;
    abort();
}

void ops_cpu_amx_gemm_packed(int M, int N, int K, const uint16_t *A, int lda, const uint32_t *Bp,
                             size_t bs, int acc, float *C, int ldc) {
    (void)M, (void)N, (void)K, (void)A, (void)lda, (void)Bp, (void)bs, (void)acc, (void)C;
    (void)ldc;
    abort();
}

void ops_cpu_amx_softmax_rows(uint16_t *p16, const float *s, int M, int n, int r0, float scale,
                              float *lse, float *rl) {
    (void)p16, (void)s, (void)M, (void)n, (void)r0, (void)scale, (void)lse, (void)rl;
    abort();
}

void ops_cpu_amx_attn_grad_scores(uint16_t *p16, uint16_t *ds16, const uint16_t *kc,
                                  const uint16_t *vc, int lda, const uint32_t *qt,
                                  const uint32_t *dot, size_t bs, int M, int n, int hd, float scale,
                                  const float *lse, const float *D, int qk) {
    (void)p16, (void)ds16, (void)kc, (void)vc, (void)lda, (void)qt, (void)dot, (void)bs, (void)M;
    (void)n, (void)hd, (void)scale, (void)lse, (void)D, (void)qk;
    abort();
}

int ops_cpu_amx_lmhead_ce(float *dx, float *dw, int dw_acc, const uint16_t *x16,
                          const uint16_t *w16, const int32_t *targets, int N, int D, int V,
                          float grad_scale, double *loss) {
    (void)dx, (void)dw, (void)dw_acc, (void)x16, (void)w16, (void)targets, (void)N, (void)D;
    (void)V, (void)grad_scale, (void)loss;
    return -1;
}

long ops_cpu_amx_gemm_panels_calls(void) {
    return 0;
}
#endif

/* ---- the bf16 GEMM --------------------------------------------------------------------- */

static void gemm_bf16(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                      const float *B, int ldb, float beta, float *C, int ldc) {
    const int ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    operand a, b;
#ifdef TITAN_HAVE_DNNL
    if (engine() == ENGINE_ONEDNN && alpha == 1.0f && (beta == 0.0f || beta == 1.0f)) {
        if (!operand_get(&a, A, ar, ac, lda, 0)) {
            int done = 0;
            if (!operand_get(&b, B, br, bc, ldb, 0)) {
                /* the keep asked for C (ops_bf16_keep_begin) as the AMX kernel stores it */
                if (tl_keep.x == C && !tl_keep.done && beta == 0.0f && ldc == N &&
                    (size_t)M * (size_t)N == tl_keep.n && amx_takes(0) &&
                    !ops_cpu_amx_gemm_keep(ta, tb, M, N, K, a.h, a.ld, b.h, b.ld, C, ldc,
                                           tl_keep.bits))
                    done = tl_keep.done = 1;
                else
                    done = !bf16_engine_gemm(ta, tb, M, N, K, a.h, a.ld, b.h, b.ld, beta != 0.0f, 0,
                                             C, ldc);
                free(b.own);
            }
            free(a.own);
            if (done) return;
        }
    }
#endif
    /* emulated (and the fallback when oneDNN refuses a shape or memory runs out) */
    if (operand_get(&a, A, ar, ac, lda, 1)) abort(); /* out of memory in a void op */
    if (operand_get(&b, B, br, bc, ldb, 1)) abort();
    ops_cpu_sgemm(ta, tb, M, N, K, alpha, a.f, a.ld, b.f, b.ld, beta, C, ldc);
    free(a.own);
    free(b.own);
}

/* C[M,N] (+ C when acc) = op(A) op(B) for bf16 bits A, B that oneDNN did not take: their exact
 * fp32 expansions, then ops_cpu_sgemm_task (on the calling thread inside a parallel region). */
static void gemm16_expanded(int ta, int tb, int M, int N, int K, const uint16_t *A, int lda,
                            const uint16_t *B, int ldb, int acc, float *C, int ldc) {
    const int ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    float *a = malloc(sizeof(float) * ((size_t)ar * ac + 1)),
          *b = malloc(sizeof(float) * ((size_t)br * bc + 1));
    if (!a || !b) abort(); /* out of memory in a void op */
    for (int r = 0; r < ar; r++)
        ops_bf16_to_f32(a + (size_t)r * ac, A + (size_t)r * lda, (size_t)ac);
    for (int r = 0; r < br; r++)
        ops_bf16_to_f32(b + (size_t)r * bc, B + (size_t)r * ldb, (size_t)bc);
    ops_cpu_sgemm_task(ta, tb, M, N, K, a, ac, b, bc, acc, C, ldc);
    free(a);
    free(b);
}

void ops_cpu_gemm16(int ta, int tb, int M, int N, int K, const void *A, int lda, const void *B,
                    int ldb, int acc, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    if (engine() != ENGINE_ONEDNN || K <= 0) { /* rounded fp32 values (or an empty sum) */
        ops_cpu_sgemm_task(ta, tb, M, N, K, A, lda, B, ldb, acc, C, ldc);
        return;
    }
#ifdef TITAN_HAVE_DNNL
    if (!bf16_engine_gemm(ta, tb, M, N, K, A, lda, B, ldb, acc, 0, C, ldc)) return;
#endif
    gemm16_expanded(ta, tb, M, N, K, A, lda, B, ldb, acc, C, ldc);
}

void ops_cpu_gemm16_bf16out(int ta, int tb, int M, int N, int K, const uint16_t *A, int lda,
                            const uint16_t *B, int ldb, uint16_t *C, int ldc) {
    if (M <= 0 || N <= 0) return;
#ifdef TITAN_HAVE_DNNL
    if (engine() == ENGINE_ONEDNN && K > 0 &&
        !bf16_engine_gemm(ta, tb, M, N, K, A, lda, B, ldb, 0, 1, C, ldc))
        return;
#endif
    /* without oneDNN's bf16 destination: fp32 C, then each element rounded (slow: said once) */
    static int warned;
    if (engine() == ENGINE_ONEDNN && K > 0 && !__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
        base_log(BASE_LOG_WARN,
                 "bf16 engine: oneDNN refused a %dx%dx%d product with a bf16 result; such "
                 "products run on the fp32 SGEMM",
                 M, N, K);
    float *c = malloc(sizeof(float) * (size_t)M * N);
    if (!c) abort(); /* out of memory in a void op */
    gemm16_expanded(ta, tb, M, N, K, A, lda, B, ldb, 0, c, N);
    for (int i = 0; i < M; i++)
        ops_bf16_from_f32(C + (size_t)i * ldc, c + (size_t)i * N, (size_t)N);
    free(c);
}

void ops_cpu_gemm(ops_prec prec, int ta, int tb, int M, int N, int K, float alpha, const float *A,
                  int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    if (prec == OPS_PREC_BF16 && M > 0 && N > 0 && K > 0)
        gemm_bf16(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    else
        ops_cpu_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
