/* Kernel plugins: shared objects speaking include/titan/kernel_abi.h.
 *
 * Loading (ops_plugin_load): dlopen(RTLD_NOW | RTLD_LOCAL), read the data symbol
 * titan_kernel_abi_version and refuse another version before calling any plugin code, then
 * call titan_kernel_plugin_init with a host whose register_kernel validates each descriptor
 * and registers an ops_impl with the kernel's ops_binding (internal.h): the registry calls
 * back through it to check, bind and release, so this file calls the registry and never the
 * reverse. A failed init rolls the registry back to where it was and closes the library.
 *
 * Calling: the hot path calls typed function pointers with no context argument, so a plugin
 * implementation is bound, per unit (layer) that resolves to it, to a SLOT: a numbered
 * trampoline per op and direction (generated below for every op of the list, oplist.h, whose
 * plugin flag is set) that knows its slot, and through
 * it the kernel, the unit's path and the unit's saved-state buffer. The trampoline packs the
 * typed arguments into titan_kernel_args (plg_call):
 *   - inputs with a heads axis are transposed BSHD -> BHSD into scratch when the kernel asks
 *     for BHSD; other inputs are passed as they are;
 *   - every output goes to scratch first and is then copied (forward outputs, and a gradient
 *     that aliases the titan input it replaces) or added (gradients) into titan's buffer,
 *     converting the layout back; so the kernel never sees aliasing pointers, and in-place
 *     calls of titan's (rope) still work; except that a backward declaring
 *     TITAN_KERNEL_BWD_ACCUMULATES gets titan's gradient buffer itself wherever neither a
 *     layout conversion nor an in-place replacement is involved (else zeroed scratch);
 *   - grouped_mm's int32 group offsets go in args->offs;
 *   - the slot's saved buffer (saved_bytes, kept across calls, grown preserving content, new
 *     bytes zeroed) and a workspace (workspace_bytes) are passed along.
 * Scratch is one arena shared by all slots (calls are sequential), grown on demand.
 * The typed signatures return void, so a kernel returning an error, or an allocation failure
 * here, is reported and aborts the process, like the built-in kernels' allocation failures. */
#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/internal.h"
#include "titan/kernel_abi.h"

#define PLG_MAX_LIBS 16
#define PLG_MAX_KERNELS 64
#define PLG_SLOTS 200 /* units per op served by plugin kernels at a time (see PLG_LIST) */

typedef struct {
    ops_binding b; /* first: the registry hands it back to plg_check / plg_bind */
    titan_kernel_desc d;
    ops_kind kind;
    char name[64], constraints[160], path[256];
} plg_kernel;

typedef struct {
    const plg_kernel *k;
    char path[64]; /* the unit, for messages */
    void *saved;
    size_t saved_size;
    int used;
} plg_slot;

static struct {
    void *handle;
    char path[256];
} g_libs[PLG_MAX_LIBS];
static int g_n_libs;
static plg_kernel g_kernels[PLG_MAX_KERNELS];
static int g_n_kernels;
static plg_slot g_slots[OPS_COUNT][PLG_SLOTS];
static void *g_arena;
static size_t g_arena_size;
static int g_checking;    /* ops_plugin_checking */
static char g_fault[512]; /* under checking: the first write outside a buffer, for FAIL */

void ops_plugin_checking(int on) {
    g_checking = on;
    g_fault[0] = 0;
}

int ops_plugin_fault(char *msg, size_t n) {
    if (!g_fault[0]) return 0;
    snprintf(msg, n, "%s", g_fault);
    g_fault[0] = 0;
    return 1;
}

static void *plg_alloc(size_t bytes) {
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64 + 64 * (bytes == 0));
    if (!p) {
        base_log(BASE_LOG_ERROR, "kernel plugin: out of memory allocating %zu bytes", bytes);
        abort();
    }
    return p;
}

/* ---- layouts ------------------------------------------------------------------------- */

/* x[B,T,nh,hd] <-> [B,nh,T,hd]. to_bhsd: dst BHSD from src BSHD; else the reverse. With acc
 * the converted values are added to dst. */
static void plg_convert(float *dst, const float *src, int B, int T, int nh, int hd, int to_bhsd,
                        int acc) {
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < nh; h++) {
                const size_t s = (((size_t)b * T + t) * nh + h) * hd; /* BSHD offset */
                const size_t d = (((size_t)b * nh + h) * T + t) * hd; /* BHSD offset */
                float *o = dst + (to_bhsd ? d : s);
                const float *in = src + (to_bhsd ? s : d);
                if (acc)
                    for (int j = 0; j < hd; j++) o[j] += in[j];
                else
                    for (int j = 0; j < hd; j++) o[j] = in[j];
            }
}

static void plg_put(float *dst, const float *src, size_t n, int acc) {
    if (!acc) {
        memcpy(dst, src, n * sizeof(float));
        return;
    }
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

/* ---- the call adapter -------------------------------------------------------------- */

typedef struct {
    const float *p;
    size_t n;
    int nh; /* heads of a [B,T,nh,hd] tensor; 0 = no heads axis */
} plg_in;

typedef struct {
    float *p; /* titan's buffer; NULL = not wanted */
    size_t n;
    int nh;
    int acc; /* add into p (gradients) rather than write */
} plg_out;

static size_t plg_round(size_t bytes) {
    return (bytes + 63) / 64 * 64;
}

/* Right after each output and the workspace in the arena (before the rounding to 64 bytes):
 * PLG_GUARD bytes of PLG_GUARD_BYTE, checked after the call (a kernel writing past a buffer
 * would corrupt the next one or the heap). */
#define PLG_GUARD 1024
#define PLG_GUARD_BYTE 0xA5

static void plg_guard_set(char *g) {
    memset(g, PLG_GUARD_BYTE, PLG_GUARD);
}

static int plg_guard_ok(const char *g) {
    for (int i = 0; i < PLG_GUARD; i++)
        if ((unsigned char)g[i] != PLG_GUARD_BYTE) return 0;
    return 1;
}

/* Under conformance a writing kernel's output starts as NaN: an element it leaves unwritten (an
 * expert without rows) is a NaN in titan's tensor, which fails the check every time, rather
 * than what an earlier call left in the arena (which passed or failed by chance). Not in
 * training: one more pass over the outputs each call (rope_bhsd's forward 0.55 -> 0.84 ms at
 * `titan kernels bench`'s shape on a Zen 4, session 34), for what conformance already rules
 * out. */
static void plg_poison(float *x, size_t n) {
#pragma omp parallel for schedule(static) if (n > ((size_t)1 << 16))
    for (size_t i = 0; i < n; i++) x[i] = NAN;
}

/* B, T, hd: the sizes of heads tensors (unused when no tensor has nh > 0). */
/* offs: grouped_mm's group offsets (args->offs), NULL for the other ops. */
static void plg_call(ops_kind kind, int slot, int phase, const int dims[8], float eps,
                     const int32_t *offs, int B, int T, int hd, const plg_in *in, int nin,
                     const plg_out *out, int nout) {
    plg_slot *s = &g_slots[kind][slot];
    const plg_kernel *k = s->k;
    const int bhsd = k->d.layout == TITAN_LAYOUT_BHSD;
    titan_kernel_args a;
    memset(&a, 0, sizeof a);
    memcpy(a.dims, dims, sizeof a.dims);
    a.eps = eps;
    a.offs = offs;
    if (phase == 0 && k->d.saved_bytes) {
        size_t want = k->d.saved_bytes(dims);
        if (want > s->saved_size) {
            void *p = plg_alloc(want);
            if (s->saved) memcpy(p, s->saved, s->saved_size);
            memset((char *)p + s->saved_size, 0, want - s->saved_size); /* new bytes: zero */
            free(s->saved);
            s->saved = p;
            s->saved_size = want;
        }
    }
    a.saved = s->saved;
    a.saved_size = s->saved_size;
    a.workspace_size = k->d.workspace_bytes ? k->d.workspace_bytes(phase, dims) : 0;
    /* arena: converted inputs, then outputs, then the workspace, each output and the
     * workspace followed by a guard */
    size_t need = plg_round(a.workspace_size + PLG_GUARD);
    for (int i = 0; i < nin; i++)
        if (bhsd && in[i].nh) need += plg_round(in[i].n * sizeof(float));
    /* a kernel that accumulates gets titan's gradient itself where no conversion or in-place
     * replacement is needed (zeroed first where titan wants it written: a weight gradient's
     * first write, dw_acc 0); under conformance a guarded copy of it (mirror), put back whole */
    const int accum = phase == 1 && (k->d.flags & TITAN_KERNEL_BWD_ACCUMULATES);
    int direct[4] = {0}, mirror[4] = {0};
    for (int i = 0; i < nout; i++) {
        if (!out[i].p) continue;
        direct[i] = accum && !(bhsd && out[i].nh);
        for (int j = 0; j < nin; j++)
            if (in[j].p == out[i].p) direct[i] = 0;
        mirror[i] = direct[i] && g_checking;
        direct[i] &= !g_checking;
        if (!direct[i]) need += plg_round(out[i].n * sizeof(float) + PLG_GUARD);
    }
    if (need > g_arena_size) {
        free(g_arena);
        g_arena = plg_alloc(need);
        g_arena_size = need;
    }
    char *cur = g_arena;
    for (int i = 0; i < nin; i++) {
        a.in[i] = in[i].p;
        if (!(bhsd && in[i].nh)) continue;
        float *t = (float *)cur;
        cur += plg_round(in[i].n * sizeof(float));
        plg_convert(t, in[i].p, B, T, in[i].nh, hd, 1, 0);
        a.in[i] = t;
    }
    for (int i = 0; i < nout; i++) {
        if (!out[i].p) continue;
        if (direct[i]) {
            if (!out[i].acc) ops_zero(out[i].p, out[i].n); /* on the pool's threads */
            a.out[i] = out[i].p;
            continue;
        }
        a.out[i] = (float *)cur;
        plg_guard_set(cur + out[i].n * sizeof(float));
        cur += plg_round(out[i].n * sizeof(float) + PLG_GUARD);
        if (mirror[i] && out[i].acc)
            memcpy(a.out[i], out[i].p, out[i].n * sizeof(float));
        else if (accum)
            memset(a.out[i], 0, out[i].n * sizeof(float));
        else if (g_checking)
            plg_poison(a.out[i], out[i].n);
    }
    a.workspace = a.workspace_size ? cur : NULL;
    char *ws_guard = cur + a.workspace_size;
    plg_guard_set(ws_guard);
    const int rc = (phase ? k->d.backward : k->d.forward)(&a);
    if (rc != 0) {
        base_fatal("kernel %s/%s (plugin %s) at %s: %s returned %d", ops_kind_name(kind), k->name,
                   k->path, s->path, phase ? "backward" : "forward", rc);
    }
    for (int i = 0; i <= nout; i++) {
        const char *g = i == nout                ? ws_guard
                        : out[i].p && !direct[i] ? (const char *)a.out[i] + out[i].n * sizeof(float)
                                                 : NULL;
        if (g && !plg_guard_ok(g)) {
            char what[96];
            if (i == nout)
                snprintf(what, sizeof what, "its workspace (%zu bytes)", a.workspace_size);
            else
                snprintf(what, sizeof what, "output %d (%zu floats)", i, out[i].n);
            char msg[sizeof g_fault];
            if (snprintf(msg, sizeof msg,
                         "kernel %s/%s (plugin %s) at %s: its %s wrote into the %d bytes after %s",
                         ops_kind_name(kind), k->name, k->path, s->path,
                         phase ? "backward" : "forward", PLG_GUARD, what) >= (int)sizeof msg) {
                /* long paths: the message is cut, the fault still reported (Debug builds'
                 * -Wformat-truncation wants the length looked at) */
            }
            if (!g_checking) base_fatal("%s", msg); /* training: the heap may be damaged */
            if (!g_fault[0]) snprintf(g_fault, sizeof g_fault, "%s", msg);
        }
    }
    for (int i = 0; i < nout; i++) {
        if (!out[i].p || direct[i]) continue;
        int acc = out[i].acc && !mirror[i];
        for (int j = 0; j < nin; j++) /* a gradient replacing its own input (rope in place) */
            if (in[j].p == out[i].p) acc = 0;
        if (bhsd && out[i].nh)
            plg_convert(out[i].p, a.out[i], B, T, out[i].nh, hd, 0, acc);
        else
            plg_put(out[i].p, a.out[i], out[i].n, acc);
    }
}

/* ---- per-op adapters (typed signature + slot -> plg_call) --------------------------- */

static void plg_rope_fwd(int slot, float *out, const float *inp, const float *cos, const float *sin,
                         int B, int T, int nh, int hd) {
    const size_t n = (size_t)B * T * nh * hd, tab = (size_t)T * (hd / 2);
    const int dims[8] = {B, T, nh, hd};
    const plg_in in[] = {{inp, n, nh}, {cos, tab, 0}, {sin, tab, 0}};
    const plg_out o[] = {{out, n, nh, 0}};
    plg_call(OPS_ROPE, slot, 0, dims, 0, NULL, B, T, hd, in, 3, o, 1);
}

static void plg_rope_bwd(int slot, float *dinp, const float *dout, const float *cos,
                         const float *sin, int B, int T, int nh, int hd) {
    const size_t n = (size_t)B * T * nh * hd, tab = (size_t)T * (hd / 2);
    const int dims[8] = {B, T, nh, hd};
    const plg_in in[] = {{dout, n, nh}, {cos, tab, 0}, {sin, tab, 0}};
    const plg_out o[] = {{dinp, n, nh, 1}};
    plg_call(OPS_ROPE, slot, 1, dims, 0, NULL, B, T, hd, in, 3, o, 1);
}

static void plg_attention_fwd(int slot, float *out, float *lse, const float *q, const float *k,
                              const float *v, int B, int T, int H, int G, int hd) {
    const size_t nq = (size_t)B * T * H * hd, nkv = (size_t)B * T * G * hd;
    const int dims[8] = {B, T, H, G, hd};
    const plg_in in[] = {{q, nq, H}, {k, nkv, G}, {v, nkv, G}};
    const plg_out o[] = {{out, nq, H, 0}, {lse, (size_t)B * H * T, 0, 0}};
    plg_call(OPS_ATTENTION, slot, 0, dims, 0, NULL, B, T, hd, in, 3, o, 2);
}

static void plg_attention_bwd(int slot, float *dq, float *dk, float *dv, const float *dout,
                              const float *out, const float *lse, const float *q, const float *k,
                              const float *v, int B, int T, int H, int G, int hd, int dx_acc) {
    const size_t nq = (size_t)B * T * H * hd, nkv = (size_t)B * T * G * hd;
    const int dims[8] = {B, T, H, G, hd};
    const plg_in in[] = {{dout, nq, H}, {out, nq, H}, {lse, (size_t)B * H * T, 0},
                         {q, nq, H},    {k, nkv, G},  {v, nkv, G}};
    const plg_out o[] = {{dq, nq, H, dx_acc}, {dk, nkv, G, dx_acc}, {dv, nkv, G, dx_acc}};
    plg_call(OPS_ATTENTION, slot, 1, dims, 0, NULL, B, T, hd, in, 6, o, 3);
}

static void plg_rmsnorm_fwd(int slot, float *out, float *rstd, const float *inp, const float *w,
                            int N, int C, float eps) {
    const size_t n = (size_t)N * C;
    const int dims[8] = {N, C};
    const plg_in in[] = {{inp, n, 0}, {w, (size_t)C, 0}};
    const plg_out o[] = {{out, n, 0, 0}, {rstd, (size_t)N, 0, 0}};
    plg_call(OPS_RMSNORM, slot, 0, dims, eps, NULL, 0, 0, 0, in, 2, o, 2);
}

/* rmsnorm's backward, also add_rmsnorm's (kind): the same call. A gradient titan asks written
 * (dx_acc or dw_acc 0: the output's acc 0) needs nothing of the plugin, whose backward always
 * accumulates or always writes (TITAN_KERNEL_BWD_ACCUMULATES): plg_call zeroes it before an
 * accumulating kernel adds into it, or copies a writing kernel's result over it. So in every
 * adapter. */
static void plg_norm_bwd(ops_kind kind, int slot, float *dinp, float *dw, const float *dout,
                         const float *inp, const float *w, const float *rstd, int N, int C,
                         int dx_acc, int dw_acc) {
    const size_t n = (size_t)N * C;
    const int dims[8] = {N, C};
    const plg_in in[] = {{dout, n, 0}, {inp, n, 0}, {w, (size_t)C, 0}, {rstd, (size_t)N, 0}};
    const plg_out o[] = {{dinp, n, 0, dx_acc}, {dw, (size_t)C, 0, dw_acc}};
    plg_call(kind, slot, 1, dims, 0, NULL, 0, 0, 0, in, 4, o, 2);
}

static void plg_rmsnorm_bwd(int slot, float *dinp, float *dw, const float *dout, const float *inp,
                            const float *w, const float *rstd, int N, int C, int dx_acc,
                            int dw_acc) {
    plg_norm_bwd(OPS_RMSNORM, slot, dinp, dw, dout, inp, w, rstd, N, C, dx_acc, dw_acc);
}

static void plg_add_rmsnorm_bwd(int slot, float *dinp, float *dw, const float *dout,
                                const float *inp, const float *w, const float *rstd, int N, int C,
                                int dx_acc, int dw_acc) {
    plg_norm_bwd(OPS_ADD_RMSNORM, slot, dinp, dw, dout, inp, w, rstd, N, C, dx_acc, dw_acc);
}

static void plg_add_rmsnorm_fwd(int slot, float *h, float *out, float *rstd, const float *x,
                                const float *y, const float *w, int N, int C, float eps) {
    const size_t n = (size_t)N * C;
    const int dims[8] = {N, C};
    const plg_in in[] = {{x, n, 0}, {y, n, 0}, {w, (size_t)C, 0}};
    const plg_out o[] = {{h, n, 0, 0}, {out, n, 0, 0}, {rstd, (size_t)N, 0, 0}};
    plg_call(OPS_ADD_RMSNORM, slot, 0, dims, eps, NULL, 0, 0, 0, in, 3, o, 3);
}

static void plg_swiglu_fwd(int slot, float *out, const float *gate, const float *up, int N, int F) {
    const size_t n = (size_t)N * F;
    const int dims[8] = {N, F};
    const plg_in in[] = {{gate, n, 0}, {up, n, 0}};
    const plg_out o[] = {{out, n, 0, 0}};
    plg_call(OPS_SWIGLU, slot, 0, dims, 0, NULL, 0, 0, 0, in, 2, o, 1);
}

static void plg_swiglu_bwd(int slot, float *dgate, float *dup, const float *dout, const float *gate,
                           const float *up, int N, int F, int dx_acc) {
    const size_t n = (size_t)N * F;
    const int dims[8] = {N, F};
    const plg_in in[] = {{dout, n, 0}, {gate, n, 0}, {up, n, 0}};
    const plg_out o[] = {{dgate, n, 0, dx_acc}, {dup, n, 0, dx_acc}};
    plg_call(OPS_SWIGLU, slot, 1, dims, 0, NULL, 0, 0, 0, in, 3, o, 2);
}

static void plg_matmul_fwd(int slot, float *out, const float *inp, const float *w, int N, int C,
                           int OC) {
    const int dims[8] = {N, C, OC};
    const plg_in in[] = {{inp, (size_t)N * C, 0}, {w, (size_t)OC * C, 0}};
    const plg_out o[] = {{out, (size_t)N * OC, 0, 0}};
    plg_call(OPS_MATMUL, slot, 0, dims, 0, NULL, 0, 0, 0, in, 2, o, 1);
}

static void plg_matmul_bwd(int slot, float *dinp, float *dw, const float *dout, const float *inp,
                           const float *w, int N, int C, int OC, int dx_acc, int dw_acc) {
    const int dims[8] = {N, C, OC};
    const plg_in in[] = {
        {dout, (size_t)N * OC, 0}, {inp, (size_t)N * C, 0}, {w, (size_t)OC * C, 0}};
    const plg_out o[] = {{dinp, (size_t)N * C, 0, dx_acc}, {dw, (size_t)OC * C, 0, dw_acc}};
    plg_call(OPS_MATMUL, slot, 1, dims, 0, NULL, 0, 0, 0, in, 3, o, 2);
}

/* grouped_mm: R = offs[E] rows; dims {R, C, OC, E} */
static void plg_grouped_mm_fwd(int slot, float *out, const float *inp, const float *w,
                               const int32_t *offs, int E, int C, int OC) {
    const size_t R = (size_t)offs[E];
    const int dims[8] = {(int)R, C, OC, E};
    const plg_in in[] = {{inp, R * C, 0}, {w, (size_t)E * OC * C, 0}};
    const plg_out o[] = {{out, R * OC, 0, 0}};
    plg_call(OPS_GROUPED_MM, slot, 0, dims, 0, offs, 0, 0, 0, in, 2, o, 1);
}

static void plg_grouped_mm_bwd(int slot, float *dinp, float *dw, const float *dout,
                               const float *inp, const float *w, const int32_t *offs, int E, int C,
                               int OC, int dx_acc, int dw_acc) {
    const size_t R = (size_t)offs[E];
    const int dims[8] = {(int)R, C, OC, E};
    const plg_in in[] = {{dout, R * OC, 0}, {inp, R * C, 0}, {w, (size_t)E * OC * C, 0}};
    const plg_out o[] = {{dinp, R * C, 0, dx_acc}, {dw, (size_t)E * OC * C, 0, dw_acc}};
    plg_call(OPS_GROUPED_MM, slot, 1, dims, 0, offs, 0, 0, 0, in, 3, o, 2);
}

/* ---- trampolines: one function per (op, direction, slot), for every op of the list
 * (oplist.h) whose plugin flag is set ---------------------------------------------------- */

/* PLG_LIST(M, ...) expands M(0, ...) M(1, ...) ... M(199, ...): runs of ten with prefixes
 * "", 1 .. 19. */
/* clang-format off */
#define PLG_D(M, p, ...)                                                                           \
    M(p##0, __VA_ARGS__) M(p##1, __VA_ARGS__) M(p##2, __VA_ARGS__) M(p##3, __VA_ARGS__)            \
    M(p##4, __VA_ARGS__) M(p##5, __VA_ARGS__) M(p##6, __VA_ARGS__) M(p##7, __VA_ARGS__)            \
    M(p##8, __VA_ARGS__) M(p##9, __VA_ARGS__)
#define PLG_LIST(M, ...)                                                                           \
    PLG_D(M, , __VA_ARGS__)  PLG_D(M, 1, __VA_ARGS__)  PLG_D(M, 2, __VA_ARGS__)                    \
    PLG_D(M, 3, __VA_ARGS__) PLG_D(M, 4, __VA_ARGS__)  PLG_D(M, 5, __VA_ARGS__)                    \
    PLG_D(M, 6, __VA_ARGS__) PLG_D(M, 7, __VA_ARGS__)  PLG_D(M, 8, __VA_ARGS__)                    \
    PLG_D(M, 9, __VA_ARGS__) PLG_D(M, 10, __VA_ARGS__) PLG_D(M, 11, __VA_ARGS__)                   \
    PLG_D(M, 12, __VA_ARGS__) PLG_D(M, 13, __VA_ARGS__) PLG_D(M, 14, __VA_ARGS__)                  \
    PLG_D(M, 15, __VA_ARGS__) PLG_D(M, 16, __VA_ARGS__) PLG_D(M, 17, __VA_ARGS__)                  \
    PLG_D(M, 18, __VA_ARGS__) PLG_D(M, 19, __VA_ARGS__)
/* clang-format on */

/* plg_NAME_fwd_I / plg_NAME_bwd_I: the op's typed signature, calling its adapter with slot I */
#define PLG_TR(i, name, fp, fa, bp, ba)                                                            \
    static void plg_##name##_fwd_##i fp {                                                          \
        plg_##name##_fwd(i, OPS_UNPAREN fa);                                                       \
    }                                                                                              \
    static void plg_##name##_bwd_##i bp {                                                          \
        plg_##name##_bwd(i, OPS_UNPAREN ba);                                                       \
    }
#define PLG_TR_FB(K, name, sub, plg, fp, fa, bp, ba)                                               \
    OPS_IF_##plg(PLG_LIST(PLG_TR, name, fp, fa, bp, ba))
#define PLG_TR_F(K, name, sub, plg, ...) /* one-function ops have no plugin form */                \
    _Static_assert(!plg, "kernel plugins provide ops with a forward and a backward only");
OPS_LIST(PLG_TR_FB, PLG_TR_F)

/* g_NAME_fwd[slot], g_NAME_bwd[slot]: the trampolines' addresses */
#define PLG_ADDR(i, name, dir) plg_##name##_##dir##_##i,
#define PLG_ADDRS_FB(K, name, sub, plg, ...)                                                       \
    OPS_IF_##plg(                                                                                  \
        static const ops_##name##_fwd_fn g_##name##_fwd[] = {PLG_LIST(PLG_ADDR, name, fwd)};       \
        static const ops_##name##_bwd_fn g_##name##_bwd[] = {PLG_LIST(PLG_ADDR, name, bwd)};       \
        _Static_assert(sizeof g_##name##_fwd / sizeof g_##name##_fwd[0] == PLG_SLOTS,              \
                       "PLG_LIST != PLG_SLOTS");)
#define PLG_ADDRS_F(...)
OPS_LIST(PLG_ADDRS_FB, PLG_ADDRS_F)

/* ---- binding (the registry calls these through the kernel's ops_binding) ------------- */

static int plg_bind(const ops_binding *b, ops_table *t, ops_kind k, const char *path,
                    base_err *err) {
    const plg_kernel *pk = (const plg_kernel *)b;
    int slot = -1;
    for (int i = 0; i < PLG_SLOTS && slot < 0; i++)
        if (!g_slots[k][i].used) slot = i;
    if (slot < 0)
        return base_fail(err,
                         "kernel %s/%s at %s: more than %d units use plugin kernels of %s at "
                         "once (select it for fewer layers)",
                         ops_kind_name(k), pk->name, path, PLG_SLOTS, ops_kind_name(k));
    plg_slot *s = &g_slots[k][slot];
    memset(s, 0, sizeof *s);
    s->k = pk;
    s->used = 1;
    snprintf(s->path, sizeof s->path, "%s", path);
    switch (k) {
#define PLG_BIND_FB(K, name, sub, plg, ...)                                                        \
    OPS_IF_##plg(case OPS_##K                                                                      \
                 : t->name##_fwd = g_##name##_fwd[slot];                                           \
                 t->name##_bwd = g_##name##_bwd[slot]; break;)
#define PLG_BIND_F(...)
        OPS_LIST(PLG_BIND_FB, PLG_BIND_F)
    default: /* registration refuses other ops */
        s->used = 0;
        return base_fail(err, "kernel %s/%s: op cannot come from a plugin", ops_kind_name(k),
                         pk->name);
    }
    t->plugin_slot[k] = slot + 1;
    return 0;
}

static void plg_unbind(ops_table *t, ops_kind k) {
    if (!t->plugin_slot[k]) return;
    plg_slot *s = &g_slots[k][t->plugin_slot[k] - 1];
    free(s->saved);
    memset(s, 0, sizeof *s);
    t->plugin_slot[k] = 0;
}

static int plg_check(const ops_binding *b, const ops_ctx *ctx, base_err *err) {
    const plg_kernel *pk = (const plg_kernel *)b;
    if (!pk->d.check) return 0;
    const titan_model_shape sh = {ctx->batch,      ctx->seq_len,  ctx->dim,        ctx->n_heads,
                                  ctx->n_kv_heads, ctx->head_dim, ctx->ffn_dim,    ctx->vocab,
                                  ctx->n_experts,  ctx->top_k,    ctx->moe_ffn_dim};
    char why[256] = "";
    if (pk->d.check(&sh, why, sizeof why) == 0) return 0;
    why[sizeof why - 1] = '\0';
    if (why[0]) return base_fail(err, "%s", why);
    /* the plugin gave no reason: its declared constraints, else that its check refused */
    return base_fail(err, "%s (the constraint check of plugin %s refused this shape)",
                     pk->constraints[0] ? pk->constraints : "no reason given", pk->path);
}

/* The registry entry's fwd/bwd of a plugin implementation: only reached if something calls
 * an implementation without resolving it into a table first (a titan bug). */
static void plg_direct_call(void) {
    base_log(BASE_LOG_ERROR, "kernel plugin: implementation called without ops_resolve");
    abort();
}

/* ---- loading ----------------------------------------------------------------------- */

typedef struct {
    const char *path;
    base_err *err;
    int failed; /* an error is already in err */
} plg_load;

static int plg_name_ok(const char *s) {
    size_t n = 0;
    for (; s[n]; n++) {
        const char c = s[n];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-'))
            return 0;
    }
    return n > 0 && n < 64;
}

static int plg_register(const titan_kernel_host *host, const titan_kernel_desc *d) {
    plg_load *L = host->host_private;
    if (L->failed) return -1;
    L->failed = 1;
    if (!d) return base_fail(L->err, "kernel plugin %s: register_kernel(NULL)", L->path);
    if (d->abi_version < 1 || d->abi_version > TITAN_KERNEL_ABI_VERSION)
        return base_fail(L->err,
                         "kernel plugin %s: a kernel descriptor says ABI version %u; this titan "
                         "speaks versions 1 to %u (rebuild the plugin against its "
                         "include/titan/kernel_abi.h)",
                         L->path, d->abi_version, TITAN_KERNEL_ABI_VERSION);
    /* a version-1 descriptor ends before flags (appended by version 2) */
    const size_t want =
        d->abi_version >= 2 ? sizeof(titan_kernel_desc) : offsetof(titan_kernel_desc, flags);
    if (d->struct_size < want) {
        /* op and name come before every field a shorter descriptor may lack: named when the
         * struct is that long (a valid name) */
        const int named = d->struct_size >= offsetof(titan_kernel_desc, constraints) && d->op &&
                          d->name && plg_name_ok(d->name) && ops_kind_from_name(d->op) >= 0;
        return base_fail(L->err,
                         "kernel plugin %s: kernel %s%s%s: descriptor of %u bytes (struct_size); "
                         "a version-%u descriptor has %zu (set struct_size = "
                         "sizeof(titan_kernel_desc))",
                         L->path, named ? d->op : "", named ? "/" : "?", named ? d->name : "",
                         d->struct_size, d->abi_version, want);
    }
    const char *nm = d->name ? d->name : "(null)";
    const int kind = ops_kind_from_name(d->op);
    if (kind < 0 || !ops_kind_plugin((ops_kind)kind)) {
        char ops[256];
        ops_kind_names(ops, sizeof ops, 1);
        return base_fail(L->err,
                         "kernel plugin %s: kernel '%s' is for op '%s'; plugins can provide %s",
                         L->path, nm, d->op ? d->op : "(null)", ops);
    }
    if (d->abi_version < (uint32_t)ops_kind_plugin((ops_kind)kind))
        return base_fail(L->err,
                         "kernel plugin %s: kernel %s/%s: op '%s' came with kernel ABI version "
                         "%d; the descriptor says version %u (rebuild the plugin against this "
                         "titan's include/titan/kernel_abi.h)",
                         L->path, d->op, nm, d->op, ops_kind_plugin((ops_kind)kind),
                         d->abi_version);
    if (!d->name || !plg_name_ok(d->name))
        return base_fail(L->err,
                         "kernel plugin %s: %s kernel name '%s' must be 1-63 characters of "
                         "[A-Za-z0-9_-]",
                         L->path, d->op, nm);
    if (!d->forward || !d->backward)
        return base_fail(L->err, "kernel plugin %s: kernel %s/%s has no %s function", L->path,
                         d->op, nm, d->forward ? "backward" : "forward");
    titan_kernel_desc dv; /* the descriptor as this titan reads it: only what the plugin has */
    memset(&dv, 0, sizeof dv);
    memcpy(&dv, d, want);
    if (dv.flags & ~TITAN_KERNEL_BWD_ACCUMULATES)
        return base_fail(L->err, "kernel plugin %s: kernel %s/%s: unknown flags 0x%x", L->path,
                         d->op, nm, (unsigned)dv.flags);
    if (d->layout != TITAN_LAYOUT_BSHD && d->layout != TITAN_LAYOUT_BHSD)
        return base_fail(L->err, "kernel plugin %s: kernel %s/%s: unknown layout %d", L->path,
                         d->op, nm, (int)d->layout);
    const ops_impl *clash = ops_find((ops_kind)kind, d->name);
    if (clash) {
        const char *origin = ops_impl_origin(clash);
        return base_fail(L->err,
                         "kernel plugin %s: kernel %s/%s is already registered (%s%s); give it "
                         "another name",
                         L->path, d->op, nm, origin ? "by plugin " : "a built-in",
                         origin ? origin : "");
    }
    if (g_n_kernels >= PLG_MAX_KERNELS)
        return base_fail(L->err, "kernel plugin %s: more than %d plugin kernels", L->path,
                         PLG_MAX_KERNELS);
    plg_kernel *k = &g_kernels[g_n_kernels];
    memset(k, 0, sizeof *k);
    k->d = dv;
    k->kind = (ops_kind)kind;
    snprintf(k->name, sizeof k->name, "%s", d->name);
    snprintf(k->constraints, sizeof k->constraints, "%s", d->constraints ? d->constraints : "");
    snprintf(k->path, sizeof k->path, "%s", L->path);
    k->b = (ops_binding){k->path, plg_check, plg_bind, plg_unbind};
    /* fwd/bwd of the registry entry are never called for a plugin (the table gets
     * trampolines); they must be non-NULL for ops_register's checks. */
    const ops_impl impl = {(ops_kind)kind,  k->name,         k->constraints, NULL,
                           plg_direct_call, plg_direct_call, OPS_PREC_F32};
    base_err e;
    if (ops_register_bound(&impl, &k->b, &e))
        return base_fail(L->err, "kernel plugin %s: %s", L->path, e.msg);
    g_n_kernels++; /* after the registry accepted it */
    L->failed = 0;
    return 0;
}

static void plg_error(const titan_kernel_host *host, const char *msg) {
    plg_load *L = host->host_private;
    if (L->failed) return; /* keep the first reason */
    L->failed = 1;
    base_fail(L->err, "kernel plugin %s: %s", L->path, msg ? msg : "init failed");
}

int ops_plugin_load(const char *path, base_err *err) {
    ops_register_builtin();
    if (!path || !path[0]) return base_fail(err, "kernel plugin: empty path");
    if (strlen(path) >= sizeof g_libs[0].path)
        return base_fail(err, "kernel plugin: path too long (%zu bytes)", strlen(path));
    for (int i = 0; i < g_n_libs; i++)
        if (!strcmp(g_libs[i].path, path)) return 0;
    if (g_n_libs >= PLG_MAX_LIBS)
        return base_fail(err, "kernel plugin %s: more than %d plugins", path, PLG_MAX_LIBS);
    /* A bare name would make dlopen search the library path; a plugin is a file. */
    char file[300];
    snprintf(file, sizeof file, "%s%s", strchr(path, '/') ? "" : "./", path);
    void *h = dlopen(file, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        return base_fail(err, "kernel plugin %s: cannot load: %s", path, why ? why : "?");
    }
    const uint32_t *ver = dlsym(h, "titan_kernel_abi_version");
    if (!ver) {
        dlclose(h);
        return base_fail(err,
                         "kernel plugin %s: not a titan kernel plugin (no symbol "
                         "titan_kernel_abi_version; declare TITAN_KERNEL_PLUGIN_ABI from "
                         "include/titan/kernel_abi.h)",
                         path);
    }
    if (*ver < 1 || *ver > TITAN_KERNEL_ABI_VERSION) { /* older versions: see kernel_abi.h */
        const uint32_t v = *ver;
        dlclose(h);
        return base_fail(err,
                         "kernel plugin %s: built against kernel ABI version %u; this titan "
                         "speaks versions 1 to %u (rebuild the plugin against this titan's "
                         "include/titan/kernel_abi.h)",
                         path, v, TITAN_KERNEL_ABI_VERSION);
    }
    titan_kernel_plugin_init_fn init;
    void *sym = dlsym(h, "titan_kernel_plugin_init");
    if (!sym) {
        dlclose(h);
        return base_fail(err,
                         "kernel plugin %s: missing symbol titan_kernel_plugin_init (the entry "
                         "point that registers its kernels)",
                         path);
    }
    memcpy(&init, &sym, sizeof init); /* object pointer -> function pointer, as POSIX allows */
    const int mark = ops_registry_mark(), kmark = g_n_kernels;
    plg_load L = {.path = path, .err = err, .failed = 0};
    const titan_kernel_host host = {.abi_version = TITAN_KERNEL_ABI_VERSION,
                                    .register_kernel = plg_register,
                                    .error = plg_error,
                                    .host_private = &L};
    const int rc = init(&host);
    if (rc != 0 || L.failed) {
        if (!L.failed) base_fail(err, "kernel plugin %s: init returned %d", path, rc);
        ops_registry_rollback(mark);
        g_n_kernels = kmark;
        dlclose(h);
        return -1;
    }
    g_libs[g_n_libs].handle = h;
    snprintf(g_libs[g_n_libs].path, sizeof g_libs[g_n_libs].path, "%s", path);
    g_n_libs++;
    base_log(BASE_LOG_DEBUG, "kernel plugin %s: %d kernel(s)", path, g_n_kernels - kmark);
    return 0;
}
