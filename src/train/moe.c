/* train: the MoE parts of the trainer and of checkpoints (see internal.h). */
#include <jansson.h>
#include <math.h>
#include <string.h>

#include "train/internal.h"

void train_moe_bias_json(json_t *train, const model *m) {
    if (m->args.n_experts <= 0 || !m->moe_bias) return;
    const size_t n = (size_t)m->args.n_layers * m->args.n_experts;
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(arr, json_real(m->moe_bias[i]));
    json_object_set_new(train, "expert_bias", arr);
}

int train_moe_bias_load(model *m, const json_t *train, const char *where, base_err *err) {
    const json_t *arr = json_object_get(train, "expert_bias");
    if (m->args.n_experts <= 0 || !m->moe_bias || !arr) return 0;
    const size_t n = (size_t)m->args.n_layers * m->args.n_experts;
    if (!json_is_array(arr) || json_array_size(arr) != n)
        return base_fail(err, "%s: train.expert_bias is not an array of %zu numbers", where, n);
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_array_get(arr, i);
        if (!json_is_number(v))
            return base_fail(err, "%s: train.expert_bias[%zu] is not a number", where, i);
        m->moe_bias[i] = (float)json_number_value(v);
    }
    return 0;
}

void train_moe_jsonl(const model *m, FILE *jl) {
    const int L = m->args.n_layers;
    if (m->args.n_experts <= 0) return;
    static const char *const keys[3] = {"min", "mean", "max"};
    for (int k = 0; k < 3; k++) {
        fprintf(jl, ", \"tokens_per_expert_%s\": [", keys[k]);
        for (int l = 0; l < L; l++) {
            double v[3];
            model_moe_stats(m, l, &v[0], &v[1], &v[2]);
            fprintf(jl, "%s%.17g", l ? ", " : "", v[k]);
        }
        fprintf(jl, "]");
    }
}

int train_moe_summary(const model *m, char *buf, size_t n) {
    const int L = m->args.n_layers;
    if (m->args.n_experts <= 0 || L <= 0) return 0;
    double lo = INFINITY, sum = 0, hi = -INFINITY;
    int top = 0;
    for (int l = 0; l < L; l++) {
        double a, mean, b;
        model_moe_stats(m, l, &a, &mean, &b);
        if (a < lo) lo = a;
        if (b > hi) {
            hi = b;
            top = l;
        }
        sum += mean; /* every block routes the same tokens: the mean of means is the mean */
    }
    snprintf(buf, n,
             "moe tokens/expert over %d blocks: min %.0f  mean %.1f  max %.0f  (most loaded: "
             "block %d)",
             L, lo, sum / L, hi, top);
    return 1;
}
