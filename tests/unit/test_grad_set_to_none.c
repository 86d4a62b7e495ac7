/* model_grad_set_to_none (PyTorch's zero_grad(set_to_none=True)): a backward after it writes
 * every parameter's gradient, reading none. With the gradient buffer full of NaN beforehand, its
 * gradients must equal those of a backward into zeros (model_zero_grad), element for element
 * (== : a written -0 and 0 + -0 = +0 are the same value), none left NaN; the microbatch after it
 * adds, as before; and on a buffer of zeros with set_to_none(zeros = 1), FSDP's case, where the
 * untied embedding is not zeroed again. Dense tied and untied (the embedding's scatter only adds:
 * an untied table is zeroed first, a tied one holds the lm_head's), MoE with experts that get no
 * rows (their gradients written as zeros), each in fp32 and bf16. */
#include <math.h>
#include <string.h>

#include "check.h"
#include "model/model.h"

/* The first parameter whose gradient differs from want (NaN counts as different), or NULL. */
static const char *first_diff(const model *m, const float *want, size_t *at) {
    for (int i = 0; i < m->n_params; i++) {
        const model_param *p = &m->params[i];
        for (size_t j = 0; j < p->numel; j++)
            if (!(m->g[p->offset + j] == want[p->offset + j])) {
                *at = j;
                return p->name;
            }
    }
    return NULL;
}

static void check_case(const char *what, const model_args *a, ops_prec prec) {
    base_err e = {{0}};
    model m;
    const model_build_opts bo = {.batch = 2, .seq_len = 8, .with_grads = 1, .prec = prec};
    CHECK(model_build(&m, a, &bo, &e) == 0, "%s: build: %s", what, e.msg);
    if (failures) return;
    model_init_weights(&m, 11);
    const int N = bo.batch * bo.seq_len;
    int32_t tok[2][16], tgt[2][16];
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < N; i++) {
            tok[k][i] = (i * 37 + k * 101 + 5) % a->vocab_size;
            tgt[k][i] = i % 7 == 3 ? -100 : (i * 53 + k * 17 + 1) % a->vocab_size;
        }
    const size_t n = m.n_floats;
    float *one = malloc(sizeof(float) * n), *two = malloc(sizeof(float) * n);
    if (!one || !two) abort();
    const float scale = 1.0f / 20;
    const int failed_before = failures;

    /* reference: zeroed gradients, one microbatch, then a second one adding to it */
    model_zero_grad(&m);
    const double l1 = model_step_microbatch(&m, tok[0], tgt[0], scale, NULL);
    memcpy(one, m.g, sizeof(float) * n);
    int idle = 0; /* MoE: experts without rows in some block (their gradients must be zeros) */
    for (int i = 0; m.moe_counts && i < a->n_layers * a->n_experts; i++) idle += !m.moe_counts[i];
    CHECK(!m.moe_counts || idle > 0, "%s: every expert got rows: the case tests nothing", what);
    const double l2 = model_step_microbatch(&m, tok[1], tgt[1], scale, NULL);
    memcpy(two, m.g, sizeof(float) * n);

    /* the same after NaN everywhere and set_to_none */
    for (size_t i = 0; i < n; i++) m.g[i] = NAN;
    model_grad_set_to_none(&m, 0);
    const double k1 = model_step_microbatch(&m, tok[0], tgt[0], scale, NULL);
    size_t at = 0;
    const char *bad = first_diff(&m, one, &at);
    CHECK(!bad && k1 == l1, "%s: first microbatch after set_to_none: %s[%zu] = %g, want %g", what,
          bad ? bad : "(loss)", at, bad ? m.g[model_find_param(&m, bad)->offset + at] : k1,
          bad ? one[model_find_param(&m, bad)->offset + at] : l1);
    const double k2 = model_step_microbatch(&m, tok[1], tgt[1], scale, NULL);
    bad = first_diff(&m, two, &at);
    CHECK(!bad && k2 == l2, "%s: second microbatch (adds): %s[%zu]", what, bad ? bad : "(loss)",
          at);
    /* zeros: g reads as zeros already (FSDP's dropped gradients): the same, nothing zeroed */
    memset(m.g, 0, sizeof(float) * n);
    model_grad_set_to_none(&m, 1);
    const double z1 = model_step_microbatch(&m, tok[0], tgt[0], scale, NULL);
    bad = first_diff(&m, one, &at);
    CHECK(!bad && z1 == l1, "%s: set_to_none on zeros: %s[%zu]", what, bad ? bad : "(loss)", at);
    /* and it did write: a parameter's gradient is not all zeros */
    int nonzero = 0;
    for (size_t i = 0; i < n && !nonzero; i++) nonzero = one[i] != 0.0f;
    CHECK(nonzero, "%s: all gradients zero", what);
    if (failures == failed_before)
        printf("ok   %-16s gradients after NaN + set_to_none == after zeroing (%zu floats; %d idle "
               "experts), the second microbatch adds\n",
               what, n, idle);
    free(one);
    free(two);
    model_free(&m);
}

int main(void) {
    base_err e = {{0}};
    model_args a;
    model_flavor("debugmodel", &a, &e);
    model_args_set(&a, "dim", "64", 1, &e);
    model_args_set(&a, "n_layers", "2", 1, &e);
    model_args_set(&a, "n_heads", "4", 1, &e);
    model_args_set(&a, "n_kv_heads", "2", 1, &e);
    model_args_set(&a, "head_dim", "16", 1, &e);
    model_args_set(&a, "ffn_dim", "96", 1, &e);
    model_args_set(&a, "vocab_size", "300", 1, &e);
    for (int p = 0; p < 2; p++) {
        const ops_prec prec = p ? OPS_PREC_BF16 : OPS_PREC_F32;
        const char *ps = p ? "bf16" : "fp32";
        char what[64];
        model_args d = a;
        model_args_set(&d, "tie_embeddings", "0", 1, &e);
        snprintf(what, sizeof what, "dense untied %s", ps);
        check_case(what, &d, prec);
        model_args_set(&d, "tie_embeddings", "1", 1, &e);
        snprintf(what, sizeof what, "dense tied %s", ps);
        check_case(what, &d, prec);
        /* 16 experts, top 1, 16 tokens a microbatch: experts without rows (checked above) */
        model_args moe = a;
        model_args_set(&moe, "tie_embeddings", "0", 1, &e);
        model_args_set(&moe, "n_experts", "16", 1, &e);
        model_args_set(&moe, "top_k", "1", 1, &e);
        model_args_set(&moe, "moe_ffn_dim", "32", 1, &e);
        snprintf(what, sizeof what, "MoE untied %s", ps);
        check_case(what, &moe, prec);
    }
    return check_report("test_grad_set_to_none");
}
