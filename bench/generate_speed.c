/* Decode speed: the KV-cache generator (model_infer_forward, one token per step) against the
 * naive sampler it replaced (model_logits over a fixed window of T tokens per new token), on a
 * randomly initialised model of a flavor (default 0.6B) with optional --set overrides.
 * usage: generate_speed [FLAVOR] [N_PROMPT] [N_NEW] [KEY=VALUE ...] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"

int main(int argc, char **argv) {
    base_err e = {{0}};
    model_args a;
    const char *flavor = argc > 1 ? argv[1] : "0.6B";
    const int n_prompt = argc > 2 ? atoi(argv[2]) : 64, n_new = argc > 3 ? atoi(argv[3]) : 16;
    if (model_flavor(flavor, &a, &e)) return fprintf(stderr, "%s\n", e.msg), 1;
    for (int i = 4; i < argc; i++) {
        char *eq = strchr(argv[i], '=');
        if (!eq) return 1;
        *eq = 0;
        if (model_args_set(&a, argv[i], eq + 1, 1, &e)) return fprintf(stderr, "%s\n", e.msg), 1;
    }
    const int T = n_prompt + n_new, V = a.vocab_size;
    model m;
    model_build_opts o = {1, T, MODEL_AC_NONE, 0, NULL, 0, 0, MODEL_BALANCE_NONE, 0, NULL, NULL};
    if (model_build(&m, &a, &o, &e)) return fprintf(stderr, "%s\n", e.msg), 1;
    model_init_weights(&m, 1);
    int32_t *tok = malloc(sizeof(int32_t) * T);
    float *logits = malloc(sizeof(float) * (size_t)T * V);
    for (int t = 0; t < T; t++) tok[t] = (int32_t)(base_rng_u64(2, 0, (uint64_t)t) % V);
    model_infer *s = NULL;
    if (model_infer_new(&s, &m, T, &e)) return fprintf(stderr, "%s\n", e.msg), 1;
    model_infer_forward(s, tok, n_prompt, logits, 0, &e); /* warm-up */
    model_infer_reset(s);
    double t0 = base_now();
    model_infer_forward(s, tok, n_prompt, logits, 0, &e);
    const double t_prefill = base_now() - t0;
    t0 = base_now();
    for (int i = n_prompt; i < T; i++) model_infer_forward(s, tok + i, 1, logits, 0, &e);
    const double t_cached = base_now() - t0;
    /* naive: one full forward over the T-token window per new token (3 of them suffice) */
    const int reps = 3;
    t0 = base_now();
    for (int i = 0; i < reps; i++) model_logits(&m, tok, logits);
    const double t_naive = (base_now() - t0) / reps;
    printf("%s (L=%d D=%d V=%d): prefill %d tokens %.3f s (%.1f tok/s); cached decode %.2f "
           "tok/s; naive full re-forward (window %d) %.2f tok/s; speed-up %.1fx\n",
           flavor, a.n_layers, a.dim, V, n_prompt, t_prefill, n_prompt / t_prefill,
           n_new / t_cached, T, 1 / t_naive, (n_new / t_cached) * t_naive);
    model_infer_free(s);
    model_free(&m);
    free(tok);
    free(logits);
    return 0;
}
