/* param_diff A B TOL: loads the weights of two training checkpoints (a step folder, or a
 * checkpoint folder: its newest step; written by any number of ranks) and prints the
 * relative L2 difference ||a - b|| / ||b||. Exits 1 when it exceeds TOL (or on error). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "train/train.h"

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: param_diff CKPT_A CKPT_B TOL\n");
        return 2;
    }
    model a, b;
    model_args fallback;
    base_err err;
    model_flavor("debugmodel", &fallback, &err);
    if (train_load_model(&a, argv[1], &fallback, OPS_PREC_F32, &err) ||
        train_load_model(&b, argv[2], &fallback, OPS_PREC_F32, &err)) {
        fprintf(stderr, "param_diff: %s\n", err.msg);
        return 1;
    }
    if (a.n_floats != b.n_floats) {
        fprintf(stderr, "param_diff: %zu vs %zu parameters\n", a.n_floats, b.n_floats);
        return 1;
    }
    double d = 0, n = 0;
    for (size_t i = 0; i < a.n_floats; i++) {
        const double x = a.w[i], y = b.w[i];
        d += (x - y) * (x - y);
        n += y * y;
    }
    const double rel = sqrt(d / n), tol = atof(argv[3]);
    printf("param_diff: %zu parameters, relative L2 difference %.3e (tolerance %.0e)\n", a.n_floats,
           rel, tol);
    model_free(&a);
    model_free(&b);
    return rel <= tol ? 0 : 1;
}
