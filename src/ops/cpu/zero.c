/* Zeroing large fp32 buffers on the pool's threads (ops.h: ops_zero): base_zero's. */
#include "base/base.h"
#include "ops/ops.h"

void ops_zero(float *x, size_t n) {
    base_zero(x, n * sizeof(float));
}
