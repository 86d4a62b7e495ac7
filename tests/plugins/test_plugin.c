/* Test plugins for tests/unit/test_kernels.c: one source, one shared object per case
 * (tests/kernels.cmake defines PLUGIN_CASE_<name>):
 *   good      swiglu/swiglu_ws: a correct BSHD kernel that uses a workspace and the saved
 *             buffer (it saves silu(gate) in forward and reads it back in backward)
 *   version   declares ABI version 999           nosym   no titan_kernel_abi_version
 *   noinit    no titan_kernel_plugin_init         badop   a kernel for op "grouped_mm"
 *   nobwd     a kernel without backward           initfail init reports an error
 *   dup       registers rope/default (a built-in's name), after a valid kernel
 *   badlayout asks for layout 7 */
#include <math.h>
#include <string.h>

#include "titan/kernel_abi.h"

#if defined(PLUGIN_CASE_version)
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
                           saved_bytes};
    static titan_kernel_desc keep; /* descriptors must stay valid: static storage */
#if defined(PLUGIN_CASE_initfail)
    host->error(host, "this CPU lacks the instructions the kernel needs");
    return 1;
#endif
#if defined(PLUGIN_CASE_badop)
    d.op = "grouped_mm";
#elif defined(PLUGIN_CASE_nobwd)
    d.backward = NULL;
#elif defined(PLUGIN_CASE_badlayout)
    d.layout = (titan_layout)7;
#endif
    keep = d;
    if (host->register_kernel(host, &keep)) return 1;
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
