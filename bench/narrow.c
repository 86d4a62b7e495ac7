/* Export's fp32 -> bf16 / f16 narrowing: the 8-wide ckpt_f32_to_half_n against the scalar
 * conversions it must equal, on 64M floats, one thread, best of 3.
 *   cmake --build build --target bench_narrow && build/bench_narrow */
#include <stdio.h>
#include <stdlib.h>

#include "checkpoint/checkpoint.h"

int main(void) {
    const size_t n = (size_t)1 << 26;
    float *x = malloc(n * sizeof *x);
    uint16_t *d = malloc(n * sizeof *d);
    if (!x || !d) return 1;
    for (size_t i = 0; i < n; i++) x[i] = (float)i * 1e-3f - 3.0f;
    for (int bf = 1; bf >= 0; bf--) {
        double scalar = 1e9, wide = 1e9;
        for (int r = 0; r < 3; r++) {
            const double t0 = base_now();
            for (size_t i = 0; i < n; i++)
                d[i] = bf ? ckpt_f32_to_bf16(x[i]) : ckpt_f32_to_f16(x[i]);
            const double t1 = base_now();
            ckpt_f32_to_half_n(x, d, n, bf);
            const double t2 = base_now();
            if (t1 - t0 < scalar) scalar = t1 - t0;
            if (t2 - t1 < wide) wide = t2 - t1;
        }
        printf("%-4s scalar %6.1f ms (%5.2f GB/s of fp32), 8-wide %6.1f ms (%5.2f GB/s): %.1fx\n",
               bf ? "bf16" : "f16", scalar * 1e3, 4.0 * n / scalar / 1e9, wide * 1e3,
               4.0 * n / wide / 1e9, scalar / wide);
    }
    free(x);
    free(d);
    return 0;
}
