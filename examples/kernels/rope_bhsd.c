/* Example titan kernel plugin: RoPE (Hugging Face rotate_half) in BHSD layout.
 *
 * It asks titan for its heads tensors as [B, nh, T, hd] (titan transposes from and to its
 * token-major [B, T, nh, hd]), so each (b, head) is one contiguous [T, hd] plane that it walks
 * position by position. Forward interleaves titan's cos/sin tables ([T, hd/2] each) into one
 * [T, hd/2, 2] table of (cos, sin) pairs kept in the SAVED buffer titan holds for it from
 * forward to backward; backward reuses that cached table instead of the tables titan passes.
 *
 *   y[j]     = x[j] cos[j] - x[j+h] sin[j]        dx[j]     = dy[j] cos[j] + dy[j+h] sin[j]
 *   y[j+h]   = x[j+h] cos[j] + x[j] sin[j]        dx[j+h]   = dy[j+h] cos[j] - dy[j] sin[j]
 * (h = hd/2), the same fp32 products and one add as titan's built-in rope, so results agree
 * bit for bit (checked by `titan kernels test rope/rope_bhsd --plugin ...`).
 *
 * Build (see examples/kernels/README.md):
 *   cc -O2 -fPIC -shared -fopenmp -I include examples/kernels/rope_bhsd.c -o librope_bhsd.so */
#include <stdio.h>
#include <string.h>

#include "titan/kernel_abi.h"

TITAN_KERNEL_PLUGIN_ABI;

/* Saved buffer: this header, then the [T, hd/2, 2] table. */
typedef struct {
    int T, hd;
    char pad[56]; /* the table starts 64 bytes in */
} rope_saved;

static size_t rope_saved_bytes(const int dims[8]) {
    return sizeof(rope_saved) + sizeof(float) * (size_t)dims[1] * (size_t)dims[3];
}

static int rope_check(const titan_model_shape *s, char *why, size_t n) {
    if (s->head_dim % 2 == 0) return 0;
    snprintf(why, n, "head_dim %% 2 == 0 (head_dim = %d)", s->head_dim);
    return 1;
}

/* out = R in over the planes [B*nh, T, hd], R the rotation by the table's angles (backward:
 * by minus the angles, the transpose). */
static void rope_apply(float *out, const float *in, const float *tab, int planes, int T, int hd,
                       int backward) {
    const int h = hd / 2;
#pragma omp parallel for schedule(static)
    for (long pt = 0; pt < (long)planes * T; pt++) {
        const int t = (int)(pt % T);
        const float *x = in + (size_t)pt * hd;
        float *y = out + (size_t)pt * hd;
        const float *cs = tab + (size_t)t * h * 2;
        for (int j = 0; j < h; j++) {
            const float c = cs[2 * j], s = cs[2 * j + 1], x1 = x[j], x2 = x[j + h];
            if (backward) {
                y[j] = x1 * c + x2 * s;
                y[j + h] = x2 * c - x1 * s;
            } else {
                y[j] = x1 * c - x2 * s;
                y[j + h] = x2 * c + x1 * s;
            }
        }
    }
}

static int rope_forward(const titan_kernel_args *a) {
    const int B = a->dims[0], T = a->dims[1], nh = a->dims[2], hd = a->dims[3], h = hd / 2;
    rope_saved *sv = a->saved;
    if (!sv || a->saved_size < rope_saved_bytes(a->dims)) return 1;
    float *tab = (float *)(sv + 1);
    for (int t = 0; t < T; t++)
        for (int j = 0; j < h; j++) {
            tab[((size_t)t * h + j) * 2] = a->in[1][(size_t)t * h + j];
            tab[((size_t)t * h + j) * 2 + 1] = a->in[2][(size_t)t * h + j];
        }
    sv->T = T;
    sv->hd = hd;
    rope_apply(a->out[0], a->in[0], tab, B * nh, T, hd, 0);
    return 0;
}

static int rope_backward(const titan_kernel_args *a) {
    const int B = a->dims[0], T = a->dims[1], nh = a->dims[2], hd = a->dims[3];
    const rope_saved *sv = a->saved;
    /* the cached table must be the forward's: titan runs forward before backward */
    if (!sv || sv->T != T || sv->hd != hd) return 2;
    if (a->out[0]) rope_apply(a->out[0], a->in[0], (const float *)(sv + 1), B * nh, T, hd, 1);
    return 0;
}

TITAN_KERNEL_EXPORT int titan_kernel_plugin_init(const titan_kernel_host *host) {
    static const titan_kernel_desc rope = {
        .abi_version = TITAN_KERNEL_ABI_VERSION,
        .struct_size = sizeof(titan_kernel_desc),
        .op = "rope",
        .name = "rope_bhsd",
        .constraints = "head_dim % 2 == 0",
        .check = rope_check,
        .layout = TITAN_LAYOUT_BHSD,
        .forward = rope_forward,
        .backward = rope_backward,
        .workspace_bytes = NULL,
        .saved_bytes = rope_saved_bytes,
    };
    return host->register_kernel(host, &rope);
}
