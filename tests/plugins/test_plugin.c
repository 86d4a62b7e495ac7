/* Test plugins for tests/unit/test_kernels.c: one source, one shared object per case
 * (tests/kernels.cmake defines PLUGIN_CASE_<name>):
 *   good      swiglu/swiglu_ws: a correct BSHD kernel that uses a workspace and the saved
 *             buffer (it saves silu(gate) in forward and reads it back in backward); and
 *             add_rmsnorm/add_rmsnorm_plain: the fused residual add + norm, plain loops
 *   version   declares ABI version 999           nosym   no titan_kernel_abi_version
 *   noinit    no titan_kernel_plugin_init         badop   a kernel for op "embedding"
 *   nobwd     a kernel without backward           initfail init reports an error
 *   dup       registers rope/default (a built-in's name), after a valid kernel
 *   badlayout asks for layout 7
 *   v1        built for kernel ABI version 1 (symbol and descriptor): swiglu/swiglu_v1, which
 *             must keep loading and working under version 2
 *   v1moe     version 1 as well, registering grouped_mm (added by version 2): refused by name
 *   badflags  a descriptor with an unknown flag
 *   accum     swiglu/swiglu_acc: backward ADDS into its outputs (TITAN_KERNEL_BWD_ACCUMULATES)
 *   marker    as swiglu of good, plus a constructor that creates the file named by
 *             $TITAN_TEST_PLUGIN_MARKER: shows when titan opened the library (code ran)
 *   badsize   a version-2 descriptor whose struct_size is a version-1 one's
 *   nofwd     a kernel without forward
 *   nan       swiglu/swiglu_nan: forward writes NaN into its first output element
 *   fail      swiglu/swiglu_fail: forward returns 3 (an error code); with
 *             $TITAN_TEST_FAIL_RANK set only on that MPI rank (swiglu elsewhere); with
 *             $TITAN_TEST_FAIL_AFTER = N only after N calls that run swiglu (a later step)
 *   noacc     swiglu/swiglu_noacc: declares TITAN_KERNEL_BWD_ACCUMULATES but writes (=)
 *   qwen      swiglu/swiglu_qwen: constrained to real Qwen3 shapes (head_dim 128, GQA ratio
 *             8, dim % 512 == 0), which the small random conformance shapes never draw
 *   tile32    swiglu/swiglu_tile32 and add_rmsnorm/add_rmsnorm_tile32: rows in tiles of 32
 *             (batch * seq_len % 32 == 0), forward and backward return 5 on other row counts;
 *             grouped_mm/grouped_x8: experts in groups of 8 (n_experts % 8 == 0), forward and
 *             backward return 6 on other expert counts (dist_kernel_shapes: what the checks
 *             see under sequence and expert parallelism)
 *   rankfail  init fails on MPI rank 1 only ($OMPI_COMM_WORLD_RANK / $PMI_RANK): a plugin that
 *             loads on one rank and not on another
 *   unwritten swiglu/swiglu_unwritten: backward leaves the last element of its first output
 *             unwritten (as a grouped_mm that skips experts without rows): NaN, not what an
 *             earlier call left in titan's arena
 *   oob       swiglu/swiglu_oob: forward writes one float past the end of its output
 *   oobws     swiglu/swiglu_oobws: forward writes one float past the end of its workspace */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "titan/kernel_abi.h"

#if defined(PLUGIN_CASE_v1) || defined(PLUGIN_CASE_v1moe)
#define TEST_ABI 1u /* what a plugin built against the version-1 header declares */
TITAN_KERNEL_EXPORT const uint32_t titan_kernel_abi_version = TEST_ABI;
#elif defined(PLUGIN_CASE_version)
TITAN_KERNEL_EXPORT const uint32_t titan_kernel_abi_version = 999;
#elif !defined(PLUGIN_CASE_nosym)
TITAN_KERNEL_PLUGIN_ABI;
#endif

/* swiglu: y = silu(g) * u. Forward writes silu(g) to the workspace, then keeps it in the
 * saved buffer; backward reads it back (so a titan that lost the saved state fails). */
static size_t ws_bytes(int phase, const int dims[8]) {
    return phase == 0 ? sizeof(float) * (size_t)dims[0] * dims[1] : 0;
}
static size_t saved_bytes(const int dims[8]) {
    return sizeof(float) * (size_t)dims[0] * dims[1];
}
static int swiglu_fwd(const titan_kernel_args *a) {
    const size_t n = (size_t)a->dims[0] * a->dims[1];
    float *silu = a->workspace;
    if (!silu || a->workspace_size < n * sizeof(float) || a->saved_size < n * sizeof(float))
        return 1;
    for (size_t i = 0; i < n; i++) silu[i] = a->in[0][i] / (1.0f + expf(-a->in[0][i]));
    for (size_t i = 0; i < n; i++) a->out[0][i] = silu[i] * a->in[1][i];
    memcpy(a->saved, silu, n * sizeof(float));
    return 0;
}
static int swiglu_bwd(const titan_kernel_args *a) {
    const size_t n = (size_t)a->dims[0] * a->dims[1];
    const float *silu = a->saved, *dy = a->in[0], *g = a->in[1], *u = a->in[2];
    for (size_t i = 0; i < n; i++) {
        const float sig = 1.0f / (1.0f + expf(-g[i]));
        if (a->out[0]) a->out[0][i] = dy[i] * u[i] * sig * (1.0f + g[i] * (1.0f - sig));
        if (a->out[1]) a->out[1][i] = dy[i] * silu[i];
    }
    return 0;
}

#if defined(PLUGIN_CASE_accum)
/* swiglu's backward adding into its outputs, for TITAN_KERNEL_BWD_ACCUMULATES */
static int swiglu_bwd_acc(const titan_kernel_args *a) {
    const size_t n = (size_t)a->dims[0] * a->dims[1];
    const float *silu = a->saved, *dy = a->in[0], *g = a->in[1], *u = a->in[2];
    for (size_t i = 0; i < n; i++) {
        const float sig = 1.0f / (1.0f + expf(-g[i]));
        if (a->out[0]) a->out[0][i] += dy[i] * u[i] * sig * (1.0f + g[i] * (1.0f - sig));
        if (a->out[1]) a->out[1][i] += dy[i] * silu[i];
    }
    return 0;
}
#endif

#if defined(PLUGIN_CASE_good) || defined(PLUGIN_CASE_tile32)
/* add_rmsnorm: h = x + y, out = w * h * rstd, rstd = 1/sqrt(mean(h^2) + eps) (float sums,
 * unlike titan's double ones: within the op's tolerance, not bitwise). */
static int add_rmsnorm_fwd(const titan_kernel_args *a) {
    const int N = a->dims[0], C = a->dims[1];
    const float *x = a->in[0], *y = a->in[1], *w = a->in[2];
    for (int n = 0; n < N; n++) {
        float *h = a->out[0] + (size_t)n * C, *o = a->out[1] + (size_t)n * C, ss = 0;
        for (int c = 0; c < C; c++) {
            h[c] = x[(size_t)n * C + c] + y[(size_t)n * C + c];
            ss += h[c] * h[c];
        }
        const float r = 1.0f / sqrtf(ss / (float)C + a->eps);
        for (int c = 0; c < C; c++) o[c] = w[c] * (h[c] * r);
        a->out[2][n] = r;
    }
    return 0;
}
/* dh = r * (g - hhat * mean(g * hhat)), g = dy * w; dw = sum over rows of dy * hhat */
static int add_rmsnorm_bwd(const titan_kernel_args *a) {
    const int N = a->dims[0], C = a->dims[1];
    const float *dy = a->in[0], *h = a->in[1], *w = a->in[2], *rstd = a->in[3];
    if (a->out[1]) memset(a->out[1], 0, sizeof(float) * (size_t)C);
    for (int n = 0; n < N; n++) {
        const float *d = dy + (size_t)n * C, *x = h + (size_t)n * C, r = rstd[n];
        float dot = 0;
        for (int c = 0; c < C; c++) dot += d[c] * w[c] * x[c] * r;
        for (int c = 0; c < C; c++) {
            if (a->out[0]) a->out[0][(size_t)n * C + c] = r * (d[c] * w[c] - x[c] * r * dot / C);
            if (a->out[1]) a->out[1][c] += d[c] * x[c] * r;
        }
    }
    return 0;
}
#endif

#if defined(PLUGIN_CASE_unwritten)
static int swiglu_bwd_unwritten(const titan_kernel_args *a) {
    const size_t n = (size_t)a->dims[0] * a->dims[1];
    float keep = 0;
    if (a->out[0]) keep = a->out[0][n - 1];
    const int rc = swiglu_bwd(a);
    if (a->out[0]) a->out[0][n - 1] = keep; /* as it was: not written */
    return rc;
}
#endif
#if defined(PLUGIN_CASE_oob)
static int swiglu_fwd_oob(const titan_kernel_args *a) {
    const int rc = swiglu_fwd(a);
    a->out[0][(size_t)a->dims[0] * a->dims[1]] = 1e30f; /* one past the end */
    return rc;
}
#endif
#if defined(PLUGIN_CASE_oobws)
static int swiglu_fwd_oobws(const titan_kernel_args *a) {
    const int rc = swiglu_fwd(a);
    ((float *)a->workspace)[a->workspace_size / sizeof(float)] = 1e30f; /* one past the end */
    return rc;
}
#endif
#if defined(PLUGIN_CASE_nan)
static int swiglu_fwd_nan(const titan_kernel_args *a) {
    const int rc = swiglu_fwd(a);
    a->out[0][0] = NAN;
    return rc;
}
#endif
#if defined(PLUGIN_CASE_fail) || defined(PLUGIN_CASE_rankfail)
/* the MPI rank mpirun gives this process, NULL outside mpirun */
static const char *mpi_rank(void) {
    const char *r = getenv("OMPI_COMM_WORLD_RANK");
    return r ? r : getenv("PMI_RANK");
}
#endif
#if defined(PLUGIN_CASE_fail)
/* fails on the rank named by $TITAN_TEST_FAIL_RANK (unset: on every call), else swiglu */
static int swiglu_fwd_fail(const titan_kernel_args *a) {
    const char *only = getenv("TITAN_TEST_FAIL_RANK"), *me = mpi_rank();
    const char *after = getenv("TITAN_TEST_FAIL_AFTER");
    static int calls; /* forward calls so far (titan calls a kernel from one thread) */
    if (after && calls++ < atoi(after)) return swiglu_fwd(a);
    if (!only || (me && !strcmp(only, me))) return 3;
    return swiglu_fwd(a);
}
#endif

#if defined(PLUGIN_CASE_marker)
__attribute__((constructor)) static void leave_marker(void) {
    const char *p = getenv("TITAN_TEST_PLUGIN_MARKER");
    FILE *f = p ? fopen(p, "w") : NULL;
    if (f) fclose(f);
}
#endif

#if defined(PLUGIN_CASE_qwen)
/* a kernel specialised for real Qwen3 shapes: head_dim 128, 8 query heads per kv head (the
 * MoE flavors' 32/4, 64/8), dim a multiple of 512 */
static int qwen_shapes(const titan_model_shape *s, char *why, size_t n) {
    if (s->head_dim == 128 && s->n_kv_heads > 0 && s->n_heads == 8 * s->n_kv_heads &&
        s->dim % 512 == 0)
        return 0;
    snprintf(why, n, "head_dim == 128, n_heads == 8 * n_kv_heads, dim %% 512 == 0");
    return 1;
}
#endif

#if defined(PLUGIN_CASE_tile32)
/* rows in tiles of 32: batch * seq_len % 32 == 0, and a forward that refuses other row counts
 * (where a real tiled kernel would read past its rows) */
static int rows32(const titan_model_shape *s, char *why, size_t n) {
    if ((s->batch * s->seq_len) % 32 == 0) return 0;
    snprintf(why, n, "batch * seq_len %% 32 == 0 (batch = %d, seq_len = %d)", s->batch, s->seq_len);
    return 1;
}
static int swiglu_fwd_tile32(const titan_kernel_args *a) {
    return a->dims[0] % 32 ? 5 : swiglu_fwd(a);
}
static int add_rmsnorm_fwd_tile32(const titan_kernel_args *a) {
    return a->dims[0] % 32 ? 5 : add_rmsnorm_fwd(a);
}
static int add_rmsnorm_bwd_tile32(const titan_kernel_args *a) {
    return a->dims[0] % 32 ? 5 : add_rmsnorm_bwd(a);
}

/* grouped_mm with the experts in groups of 8: n_experts % 8 == 0, and calls with another
 * expert count (dims[3]) refused, where a real kernel would index past its expert groups.
 * Plain loops: y[r] = x[r] @ w[e]^T for the rows r of expert e; backward writes dx and dw. */
static int experts8(const titan_model_shape *s, char *why, size_t n) {
    if (s->n_experts % 8 == 0) return 0;
    snprintf(why, n, "n_experts %% 8 == 0 (n_experts = %d)", s->n_experts);
    return 1;
}
static int grouped_fwd_x8(const titan_kernel_args *a) {
    const int C = a->dims[1], OC = a->dims[2], E = a->dims[3];
    if (E % 8) return 6;
    for (int e = 0; e < E; e++)
        for (int r = a->offs[e]; r < a->offs[e + 1]; r++)
            for (int o = 0; o < OC; o++) {
                const float *x = a->in[0] + (size_t)r * C, *w = a->in[1] + ((size_t)e * OC + o) * C;
                double acc = 0;
                for (int c = 0; c < C; c++) acc += (double)x[c] * w[c];
                a->out[0][(size_t)r * OC + o] = (float)acc;
            }
    return 0;
}
static int grouped_bwd_x8(const titan_kernel_args *a) {
    const int C = a->dims[1], OC = a->dims[2], E = a->dims[3];
    if (E % 8) return 6;
    const float *dy = a->in[0], *x = a->in[1], *w = a->in[2];
    for (int e = 0; e < E; e++) {
        for (int r = a->offs[e]; r < a->offs[e + 1] && a->out[0]; r++)
            for (int c = 0; c < C; c++) {
                double acc = 0;
                for (int o = 0; o < OC; o++)
                    acc += (double)dy[(size_t)r * OC + o] * w[((size_t)e * OC + o) * C + c];
                a->out[0][(size_t)r * C + c] = (float)acc;
            }
        for (int o = 0; o < OC && a->out[1]; o++)
            for (int c = 0; c < C; c++) {
                double acc = 0;
                for (int r = a->offs[e]; r < a->offs[e + 1]; r++)
                    acc += (double)dy[(size_t)r * OC + o] * x[(size_t)r * C + c];
                a->out[1][((size_t)e * OC + o) * C + c] = (float)acc;
            }
    }
    return 0;
}
#endif

#if defined(PLUGIN_CASE_silentcheck)
/* a constraint check that refuses every shape and says nothing: the host names the plugin */
static int refuse_silently(const titan_model_shape *s, char *why, size_t n) {
    (void)s, (void)why, (void)n;
    return 1;
}
#endif

#if defined(PLUGIN_CASE_noinit)
/* the kernels exist, the entry point does not */
TITAN_KERNEL_EXPORT const void *test_plugin_kernels[] = {swiglu_fwd, swiglu_bwd, ws_bytes,
                                                         saved_bytes};
#else
TITAN_KERNEL_EXPORT int titan_kernel_plugin_init(const titan_kernel_host *host) {
    titan_kernel_desc d = {TITAN_KERNEL_ABI_VERSION,
                           sizeof(titan_kernel_desc),
                           "swiglu",
                           "swiglu_ws",
                           "",
                           NULL,
                           TITAN_LAYOUT_BSHD,
                           swiglu_fwd,
                           swiglu_bwd,
                           ws_bytes,
                           saved_bytes,
                           0};
    static titan_kernel_desc keep; /* descriptors must stay valid: static storage */
#if defined(PLUGIN_CASE_initfail)
    host->error(host, "this CPU lacks the instructions the kernel needs");
    return 1;
#endif
#if defined(PLUGIN_CASE_rankfail)
    const char *rank = mpi_rank();
    if (rank && !strcmp(rank, "1")) {
        host->error(host, "not on this rank");
        return 1;
    }
#endif
#if defined(TEST_ABI)
    d.abi_version = TEST_ABI;
    d.struct_size = offsetof(titan_kernel_desc, flags); /* the version-1 descriptor's size */
    d.name = "swiglu_v1";
#if defined(PLUGIN_CASE_v1moe)
    d.op = "grouped_mm";
#endif
#endif
#if defined(PLUGIN_CASE_badflags)
    d.flags = 0x80;
#elif defined(PLUGIN_CASE_accum)
    d.name = "swiglu_acc";
    d.backward = swiglu_bwd_acc;
    d.flags = TITAN_KERNEL_BWD_ACCUMULATES;
#elif defined(PLUGIN_CASE_noacc)
    d.name = "swiglu_noacc";
    d.flags = TITAN_KERNEL_BWD_ACCUMULATES; /* a lie: swiglu_bwd writes */
#elif defined(PLUGIN_CASE_nan)
    d.name = "swiglu_nan";
    d.forward = swiglu_fwd_nan;
#elif defined(PLUGIN_CASE_unwritten)
    d.name = "swiglu_unwritten";
    d.backward = swiglu_bwd_unwritten;
#elif defined(PLUGIN_CASE_oob)
    d.name = "swiglu_oob";
    d.forward = swiglu_fwd_oob;
#elif defined(PLUGIN_CASE_oobws)
    d.name = "swiglu_oobws";
    d.forward = swiglu_fwd_oobws;
#elif defined(PLUGIN_CASE_fail)
    d.name = "swiglu_fail";
    d.forward = swiglu_fwd_fail;
#elif defined(PLUGIN_CASE_badsize)
    d.struct_size = offsetof(titan_kernel_desc, flags);
#endif
#if defined(PLUGIN_CASE_silentcheck)
    d.check = refuse_silently;
#endif
#if defined(PLUGIN_CASE_tile32)
    d.name = "swiglu_tile32";
    d.check = rows32;
    d.forward = swiglu_fwd_tile32;
#endif
#if defined(PLUGIN_CASE_qwen)
    d.name = "swiglu_qwen";
    d.check = qwen_shapes;
#endif
#if defined(PLUGIN_CASE_badop)
    d.op = "embedding";
#elif defined(PLUGIN_CASE_nobwd)
    d.backward = NULL;
#elif defined(PLUGIN_CASE_nofwd)
    d.forward = NULL;
#elif defined(PLUGIN_CASE_badlayout)
    d.layout = (titan_layout)7;
#endif
    keep = d;
    if (host->register_kernel(host, &keep)) return 1;
#if defined(PLUGIN_CASE_good)
    static const titan_kernel_desc norm = {TITAN_KERNEL_ABI_VERSION,
                                           sizeof(titan_kernel_desc),
                                           "add_rmsnorm",
                                           "add_rmsnorm_plain",
                                           "",
                                           NULL,
                                           TITAN_LAYOUT_BSHD,
                                           add_rmsnorm_fwd,
                                           add_rmsnorm_bwd,
                                           NULL,
                                           NULL,
                                           0};
    if (host->register_kernel(host, &norm)) return 1;
#endif
#if defined(PLUGIN_CASE_tile32)
    static const titan_kernel_desc norm32 = {TITAN_KERNEL_ABI_VERSION,
                                             sizeof(titan_kernel_desc),
                                             "add_rmsnorm",
                                             "add_rmsnorm_tile32",
                                             "batch * seq_len % 32 == 0",
                                             rows32,
                                             TITAN_LAYOUT_BSHD,
                                             add_rmsnorm_fwd_tile32,
                                             add_rmsnorm_bwd_tile32,
                                             NULL,
                                             NULL,
                                             0};
    static const titan_kernel_desc x8 = {TITAN_KERNEL_ABI_VERSION,
                                         sizeof(titan_kernel_desc),
                                         "grouped_mm",
                                         "grouped_x8",
                                         "n_experts % 8 == 0",
                                         experts8,
                                         TITAN_LAYOUT_BSHD,
                                         grouped_fwd_x8,
                                         grouped_bwd_x8,
                                         NULL,
                                         NULL,
                                         0};
    if (host->register_kernel(host, &norm32) || host->register_kernel(host, &x8)) return 1;
#endif
#if defined(PLUGIN_CASE_dup)
    static titan_kernel_desc dup;
    dup = d;
    dup.op = "rope";
    dup.name = "default";
    return host->register_kernel(host, &dup);
#endif
    return 0;
}
#endif
