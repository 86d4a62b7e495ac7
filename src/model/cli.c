/* model: the model options of the command line, shared by the subcommands that build or
 * describe a model (inspect, generate). */
#include <stdio.h>
#include <string.h>

#include "model/model.h"

int model_args_cli_opt(base_args *it, model_args *a, int *status) {
    const char *o = it->argv[it->i];
    *status = 0;
    if (!strcmp(o, "--flavor")) {
        const char *v = base_args_value(it);
        *status = !v || model_flavor(v, a, it->err) ? -1 : 0;
        return 1;
    }
    if (!strcmp(o, "--set")) {
        const char *v = base_args_value(it);
        if (!v) return *status = -1, 1;
        const char *eq = strchr(v, '=');
        if (!eq || eq == v)
            return *status = base_fail(it->err, "--set wants KEY=VALUE, got '%s'", v), 1;
        char key[64];
        snprintf(key, sizeof key, "%.*s", (int)(eq - v), v);
        *status = model_args_set(a, key, eq + 1, 1, it->err);
        return 1;
    }
    return 0;
}

int model_flavor_dims(const char *flavor, ops_ctx *ctx, base_err *err) {
    model_args ma;
    if (model_flavor(flavor, &ma, err)) return -1;
    ctx->dim = ma.dim;
    ctx->n_heads = ma.n_heads;
    ctx->n_kv_heads = ma.n_kv_heads;
    ctx->head_dim = ma.head_dim;
    ctx->ffn_dim = ma.ffn_dim;
    ctx->vocab = ma.vocab_size;
    ctx->n_experts = ma.n_experts;
    ctx->top_k = ma.top_k;
    ctx->moe_ffn_dim = ma.moe_ffn_dim;
    return 0;
}
