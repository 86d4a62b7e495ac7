/* Qwen3 arguments, flavor registry, parameter layout and init. */
#include "model/internal.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    const char *name;
    int dim, n_layers, n_heads, n_kv_heads, ffn_dim, vocab, tied, max_seq_len;
    int n_experts, top_k, moe_ffn_dim; /* 0: dense */
} flavor_row;

/* torchtitan HEAD qwen3_configs (spec §1.6): head_dim 128, eps 1e-6, theta 1e6 throughout.
 * MoE flavors: every block is MoE (no dense layers, no shared experts), norm_topk_prob 1,
 * router_aux_loss_coef 0.001 (HF's config.json values); ffn_dim is HF's intermediate_size
 * (unused by an all-MoE model, kept so config.json round-trips). 235B-A22B: theta 1e6 as in
 * HF's Qwen3-235B-A22B config.json (torchtitan says 5e6, the later 2507 checkpoints' value).
 * 30B-A3B-reduced: the source article's reduced 30B-A3B (4 blocks, 64 experts, top-4). */
static const flavor_row g_flavors[] = {
    {"debugmodel", 256, 8, 16, 8, 3072, 2048, 1, 4096, 0, 0, 0},
    {"0.6B", 1024, 28, 16, 8, 3072, 151936, 1, 40960, 0, 0, 0},
    {"1.7B", 2048, 28, 16, 8, 6144, 151936, 1, 40960, 0, 0, 0},
    {"4B", 2560, 36, 32, 8, 9728, 151936, 1, 40960, 0, 0, 0},
    {"8B", 4096, 36, 32, 8, 12288, 151936, 0, 40960, 0, 0, 0},
    {"14B", 5120, 40, 40, 8, 17408, 151936, 0, 40960, 0, 0, 0},
    {"32B", 5120, 64, 64, 8, 25600, 151936, 0, 40960, 0, 0, 0},
    {"debugmodel_moe", 256, 8, 16, 8, 3072, 2048, 0, 4096, 64, 8, 768},
    {"30B-A3B", 2048, 48, 32, 4, 6144, 151936, 0, 40960, 128, 8, 768},
    {"30B-A3B-reduced", 2048, 4, 32, 4, 6144, 151936, 0, 40960, 64, 4, 768},
    {"235B-A22B", 4096, 94, 64, 4, 12288, 151936, 0, 40960, 128, 8, 1536},
};
#define N_FLAVORS ((int)(sizeof g_flavors / sizeof g_flavors[0]))

const char *const *model_flavor_names(void) {
    static const char *names[N_FLAVORS + 1];
    for (int i = 0; i < N_FLAVORS; i++) names[i] = g_flavors[i].name;
    names[N_FLAVORS] = NULL;
    return names;
}

int model_flavor(const char *name, model_args *out, base_err *err) {
    for (int i = 0; i < N_FLAVORS; i++) {
        const flavor_row *f = &g_flavors[i];
        if (strcmp(f->name, name) != 0) continue;
        memset(out, 0, sizeof *out);
        snprintf(out->flavor, sizeof out->flavor, "%s", f->name);
        out->dim = f->dim;
        out->n_layers = f->n_layers;
        out->n_heads = f->n_heads;
        out->n_kv_heads = f->n_kv_heads;
        out->head_dim = 128;
        out->ffn_dim = f->ffn_dim;
        out->vocab_size = f->vocab;
        out->rope_theta = 1e6;
        out->norm_eps = 1e-6;
        out->tie_embeddings = f->tied;
        out->max_seq_len = f->max_seq_len;
        out->n_experts = f->n_experts;
        out->top_k = f->top_k;
        out->moe_ffn_dim = f->moe_ffn_dim;
        out->norm_topk_prob = f->n_experts > 0;
        out->router_aux_loss_coef = f->n_experts > 0 ? 0.001 : 0.0;
        return 0;
    }
    char list[1024] = "";
    for (int i = 0; i < N_FLAVORS; i++) {
        strncat(list, i ? ", " : "", sizeof list - strlen(list) - 1);
        strncat(list, g_flavors[i].name, sizeof list - strlen(list) - 1);
    }
    return base_fail(err, "unknown model flavor '%s' (known: %s)", name, list);
}

/* The arguments --set (and model_args.json's reader) take, by field or cfg_key name: one
 * table (MODEL_ARGS_TABLE) for the parser, its list of names and the ranges a config's
 * [model] row takes (so `titan inspect --set` and `titan train --set` accept the same values),
 * except that an MoE count may also be 0: a dense model's. */
enum { K_INT, K_BOOL, K_POS, K_NONNEG };
typedef struct {
    const char *key, *alt; /* the field's name, its cfg_key (the same, or another name) */
    size_t off;            /* offsetof(model_args, field) */
    int kind;              /* K_INT integer, K_BOOL, K_POS real in (lo, hi], K_NONNEG [lo, hi] */
    int moe;               /* the row's group is MODEL_ARG_MOE */
    double lo, hi;         /* the row's range */
} set_field;
static const set_field g_set[] = {
#define SET_F(f, type, kind, group, key, lo, hi, ...)                                              \
    {#f, #key, offsetof(model_args, f), K_##kind, MODEL_ARG_##group == MODEL_ARG_MOE, lo, hi},
    MODEL_ARGS_TABLE(SET_F)
#undef SET_F
};
#define N_SET ((int)(sizeof g_set / sizeof g_set[0]))

int model_args_names(char *buf, size_t n) {
    size_t at = 0;
    if (n) buf[0] = 0;
    for (int i = 0; i < N_SET; i++) {
        const int alt = strcmp(g_set[i].key, g_set[i].alt) != 0;
        at +=
            (size_t)snprintf(at < n ? buf + at : NULL, at < n ? n - at : 0,
                             alt ? "%s%s (%s)" : "%s%s", i ? ", " : "", g_set[i].key, g_set[i].alt);
    }
    return (int)at;
}

int model_args_set(model_args *a, const char *key, const char *value, int override, base_err *err) {
    const set_field *f = NULL;
    for (int i = 0; !f && i < N_SET; i++)
        if (!strcmp(key, g_set[i].key) || !strcmp(key, g_set[i].alt)) f = &g_set[i];
    if (!f) {
        char known[512];
        model_args_names(known, sizeof known);
        return base_fail(err, "unknown model argument '%s' (known: %s)", key, known);
    }
    /* without override: the kind's own range (a real > 0 or >= 0, an integer in [0, 2^30]) */
    const double lo = override ? f->lo : 0, hi = override ? f->hi : INFINITY;
    char *field = (char *)a + f->off;
    if (f->kind == K_POS || f->kind == K_NONNEG) {
        double v;
        if (base_parse_f64(value, &v) != 0 || !isfinite(v))
            return base_fail(err, "model argument %s: '%s' is not a number", key, value);
        if (f->kind == K_POS ? !(v > lo && v <= hi) : !(v >= lo && v <= hi))
            return base_fail(err, "model argument %s: %s is out of range (must be in %c%g, %g%c)",
                             key, value, f->kind == K_POS ? '(' : '[', lo, hi,
                             isinf(hi) ? ')' : ']');
        memcpy(field, &v, sizeof v);
        return 0;
    }
    int64_t v;
    if (f->kind == K_BOOL && (!strcmp(value, "true") || !strcmp(value, "false"))) /* as train's */
        v = value[0] == 't';
    else if (base_parse_i64(value, &v) != 0 || (f->kind == K_BOOL && v != 0 && v != 1))
        return base_fail(err,
                         f->kind == K_BOOL
                             ? "model argument %s: '%s' must be true / false (or 1 / 0)"
                             : "model argument %s: '%s' is not an integer",
                         key, value);
    const double ihi = override ? hi : MODEL_ARG_MAX;
    if ((v < lo || v > ihi) && !(f->moe && v == 0))
        return base_fail(err, "model argument %s: %s is out of range (must be %sin [%.0f, %.0f])",
                         key, value, f->moe && lo > 0 ? "0 or " : "", lo, ihi);
    const int iv = (int)v;
    memcpy(field, &iv, sizeof iv);
    return 0;
}

int model_args_validate(const model_args *a, base_err *err) {
    const struct {
        const char *name;
        int v;
    } pos[] = {{"dim", a->dim},
               {"n_layers", a->n_layers},
               {"n_heads", a->n_heads},
               {"n_kv_heads", a->n_kv_heads},
               {"head_dim", a->head_dim},
               {"ffn_dim", a->ffn_dim},
               {"vocab_size", a->vocab_size}};
    for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
        if (pos[i].v <= 0)
            return base_fail(err, "model argument %s must be positive (got %d)", pos[i].name,
                             pos[i].v);
    if (a->n_heads % a->n_kv_heads != 0)
        return base_fail(err, "n_heads (%d) must be a multiple of n_kv_heads (%d)", a->n_heads,
                         a->n_kv_heads);
    if (a->head_dim % 2 != 0)
        return base_fail(err, "head_dim (%d) must be even for RoPE", a->head_dim);
    if (!(a->rope_theta > 0) || !(a->norm_eps > 0))
        return base_fail(err, "rope_theta and norm_eps must be positive");
    if (a->tie_embeddings != 0 && a->tie_embeddings != 1)
        return base_fail(err, "tie_embeddings must be 0 or 1");
    /* Bounds far above any real Qwen3 (94 layers, 64 heads) that keep the parameter table's
     * int counts and every size product in range. */
    if (a->n_layers > 65536 || a->n_heads > 65536 || a->n_kv_heads > 65536)
        return base_fail(err,
                         "n_layers, n_heads and n_kv_heads must be at most 65536 (got %d, "
                         "%d, %d)",
                         a->n_layers, a->n_heads, a->n_kv_heads);
    if (a->n_experts < 0 || a->n_experts > 65536)
        return base_fail(err, "n_experts must be in [0, 65536] (got %d)", a->n_experts);
    if (a->n_experts > 0 && (a->top_k < 1 || a->top_k > a->n_experts || a->moe_ffn_dim <= 0))
        return base_fail(err,
                         "MoE arguments: top_k (%d) must be in [1, n_experts = %d] and "
                         "moe_ffn_dim (%d) positive",
                         a->top_k, a->n_experts, a->moe_ffn_dim);
    if (a->norm_topk_prob != 0 && a->norm_topk_prob != 1)
        return base_fail(err, "norm_topk_prob must be 0 or 1");
    if (!(a->router_aux_loss_coef >= 0))
        return base_fail(err, "router_aux_loss_coef must be non-negative");
    /* Every buffer is indexed with size_t, but per-op sizes are int: keep each matrix < 2^31. */
    const double big = 2147483647.0;
    if ((double)a->vocab_size * a->dim > big || (double)a->n_heads * a->head_dim * a->dim > big ||
        (double)a->ffn_dim * a->dim > big || (double)a->moe_ffn_dim * a->dim > big)
        return base_fail(err, "model too large: a single weight matrix exceeds 2^31 elements");
    return 0;
}

/* The size table: every parameter of the model in its fixed order. `emit` is called once
 * per parameter with its shape (d1 = 0: 1-D; d2 = 0: at most 2-D) and the ops that read it
 * (model_param.readers); the same walk serves counting, layout and inspection. */
typedef void (*param_emit)(void *ctx, int unit, const char *name, const char *hf_name, int64_t d0,
                           int64_t d1, int64_t d2, int is_norm, unsigned readers);

#define RD(K) (1u << OPS_##K)
static void walk_params(const model_args *a, param_emit emit, void *ctx) {
    const int64_t D = a->dim, q = (int64_t)a->n_heads * a->head_dim,
                  kv = (int64_t)a->n_kv_heads * a->head_dim, hd = a->head_dim, F = a->ffn_dim,
                  V = a->vocab_size, E = a->n_experts, Fe = a->moe_ffn_dim,
                  El = a->n_local_experts > 0 ? a->n_local_experts : E; /* EP: this rank's */
    const unsigned head = RD(LMHEAD_CE) | RD(MATMUL); /* the loss; model_lm_head's logits */
    emit(ctx, 0, "tok_embeddings.weight", "model.embed_tokens.weight", V, D, 0, 0,
         RD(EMBEDDING) | (a->tie_embeddings ? head : 0));
    for (int l = 0; l < a->n_layers; l++) {
        char n[96], h[96];
        const int u = 1 + l;
#define P(tt, hf, d0, d1, d2, norm, readers)                                                       \
    do {                                                                                           \
        snprintf(n, sizeof n, "layers.%d." tt, l);                                                 \
        snprintf(h, sizeof h, "model.layers.%d." hf, l);                                           \
        emit(ctx, u, n, h, d0, d1, d2, norm, readers);                                             \
    } while (0)
        P("attention_norm.weight", "input_layernorm.weight", D, 0, 0, 1, RD(RMSNORM));
        P("attention.wq.weight", "self_attn.q_proj.weight", q, D, 0, 0, RD(MATMUL));
        P("attention.wk.weight", "self_attn.k_proj.weight", kv, D, 0, 0, RD(MATMUL));
        P("attention.wv.weight", "self_attn.v_proj.weight", kv, D, 0, 0, RD(MATMUL));
        P("attention.q_norm.weight", "self_attn.q_norm.weight", hd, 0, 0, 1, RD(RMSNORM));
        P("attention.k_norm.weight", "self_attn.k_norm.weight", hd, 0, 0, 1, RD(RMSNORM));
        P("attention.wo.weight", "self_attn.o_proj.weight", D, q, 0, 0, RD(MATMUL));
        /* forward and backward add_rmsnorm; backward's recomputed norm output rmsnorm */
        P("ffn_norm.weight", "post_attention_layernorm.weight", D, 0, 0, 1,
          RD(ADD_RMSNORM) | RD(RMSNORM));
        if (E > 0) {
            /* torchtitan v0.2.2 names; experts stacked [E, out, in] (spec §3.1, §3.2) */
            P("moe.router.gate.weight", "mlp.gate.weight", E, D, 0, 0, RD(MATMUL));
            P("moe.experts.w1", "mlp.experts.*.gate_proj.weight", El, Fe, D, 0, RD(GROUPED_MM));
            P("moe.experts.w3", "mlp.experts.*.up_proj.weight", El, Fe, D, 0, RD(GROUPED_MM));
            P("moe.experts.w2", "mlp.experts.*.down_proj.weight", El, D, Fe, 0, RD(GROUPED_MM));
        } else {
            P("feed_forward.w1.weight", "mlp.gate_proj.weight", F, D, 0, 0, RD(MATMUL));
            P("feed_forward.w3.weight", "mlp.up_proj.weight", F, D, 0, 0, RD(MATMUL));
            P("feed_forward.w2.weight", "mlp.down_proj.weight", D, F, 0, 0, RD(MATMUL));
        }
#undef P
    }
    emit(ctx, 1 + a->n_layers, "norm.weight", "model.norm.weight", D, 0, 0, 1, RD(RMSNORM));
    if (!a->tie_embeddings)
        emit(ctx, 1 + a->n_layers, "output.weight", "lm_head.weight", V, D, 0, 0, head);
}

#undef RD

static void count_emit(void *ctx, int unit, const char *name, const char *hf, int64_t d0,
                       int64_t d1, int64_t d2, int is_norm, unsigned readers) {
    model_counts *c = ctx;
    int64_t n = d0 * (d1 ? d1 : 1) * (d2 ? d2 : 1);
    c->total += n;
    if (!strcmp(name, "tok_embeddings.weight"))
        c->embedding += n;
    else if (!strcmp(name, "output.weight"))
        c->lm_head += n;
    else if (strstr(name, "q_norm") || strstr(name, "k_norm"))
        c->qk_norm += n;
    else if (is_norm)
        c->norms += n;
    else if (strstr(name, ".attention."))
        c->attention += n;
    else if (strstr(name, ".moe.router."))
        c->router += n;
    else if (strstr(name, ".moe.experts."))
        c->experts += n;
    else
        c->ffn += n;
}

void model_count_params(const model_args *a, model_counts *c) {
    memset(c, 0, sizeof *c);
    walk_params(a, count_emit, c);
    /* a token runs top_k of the n_experts experts of each block */
    c->active =
        c->total - (a->n_experts > 0 ? c->experts / a->n_experts * (a->n_experts - a->top_k) : 0);
}

typedef struct {
    void (*fn)(void *ctx, const char *name, int64_t numel);
    void *ctx;
} names_ctx;

static void names_emit(void *ctx, int unit, const char *name, const char *hf, int64_t d0,
                       int64_t d1, int64_t d2, int is_norm, unsigned readers) {
    const names_ctx *nc = ctx;
    nc->fn(nc->ctx, name, d0 * (d1 ? d1 : 1) * (d2 ? d2 : 1));
}

void model_param_names(const model_args *a, void (*fn)(void *ctx, const char *name, int64_t numel),
                       void *ctx) {
    names_ctx nc = {fn, ctx};
    walk_params(a, names_emit, &nc);
}

const char *model_param_name_03(const char *name, char *buf, size_t n) {
    /* a name's last parts (after "layers.N.") and 0.3's for them; its Qwen3 module tree:
     * models/common/attention.py (qkv_linear, fuse_qkv = True in every registry flavor but
     * debugmodel_non_fused_qkv, which titan has no counterpart of),
     * models/common/moe.py (routed_experts.inner_experts, the dims in the names) */
    static const char *const map[][2] = {
        {"attention.wq.weight", "attention.qkv_linear.wqkv.weight"},
        {"attention.wk.weight", "attention.qkv_linear.wqkv.weight"},
        {"attention.wv.weight", "attention.qkv_linear.wqkv.weight"},
        {"moe.experts.w1", "moe.routed_experts.inner_experts.w1_EFD"},
        {"moe.experts.w3", "moe.routed_experts.inner_experts.w3_EFD"},
        {"moe.experts.w2", "moe.routed_experts.inner_experts.w2_EDF"},
    };
    const size_t len = strlen(name);
    if (!strcmp(name, "output.weight")) {
        snprintf(buf, n, "lm_head.weight");
        return buf;
    }
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        const size_t k = strlen(map[i][0]);
        if (len > k && name[len - k - 1] == '.' && !strcmp(name + len - k, map[i][0])) {
            snprintf(buf, n, "%.*s%s", (int)(len - k), name, map[i][1]);
            return buf;
        }
    }
    snprintf(buf, n, "%s", name);
    return buf;
}

typedef struct {
    model *m;
    size_t offset;
} layout_ctx;

static void layout_emit(void *ctx, int unit, const char *name, const char *hf, int64_t d0,
                        int64_t d1, int64_t d2, int is_norm, unsigned readers) {
    layout_ctx *lc = ctx;
    model *m = lc->m;
    model_param *p = &m->params[m->n_params++];
    snprintf(p->name, sizeof p->name, "%s", name);
    snprintf(p->hf_name, sizeof p->hf_name, "%s", hf);
    p->unit = unit;
    p->offset = lc->offset;
    p->ndim = d2 ? 3 : d1 ? 2 : 1;
    p->shape[0] = d0;
    p->shape[1] = d1;
    p->shape[2] = d2;
    p->numel = (size_t)d0 * (size_t)(d1 ? d1 : 1) * (size_t)(d2 ? d2 : 1);
    p->is_norm = is_norm;
    p->readers = readers;
    model_unit *u = &m->units[unit];
    if (u->numel == 0) u->offset = lc->offset;
    u->numel += p->numel;
    lc->offset += p->numel;
}

/* The full layout's walk (same order as the local one): records each parameter's full
 * offset and how the local tensor slices it. */
static void full_emit(void *ctx, int unit, const char *name, const char *hf, int64_t d0, int64_t d1,
                      int64_t d2, int is_norm, unsigned readers) {
    layout_ctx *lc = ctx;
    model_param *p = &lc->m->params[lc->m->n_params++];
    p->full_offset = lc->offset;
    p->tp_split = d2 && d0 != p->shape[0] ? MODEL_EP_EXPERTS /* only expert stacks are 3-D */
                  : d0 != p->shape[0]     ? MODEL_TP_ROWS
                  : d1 != p->shape[1]     ? MODEL_TP_COLS
                                          : MODEL_TP_REPLICATED;
    lc->offset += (size_t)d0 * (size_t)(d1 ? d1 : 1) * (size_t)(d2 ? d2 : 1);
}

static void count_only(void *ctx, int unit, const char *name, const char *hf, int64_t d0,
                       int64_t d1, int64_t d2, int is_norm, unsigned readers) {
    (*(int *)ctx)++;
}

/* Fills m->params / m->units (allocated here) from the size table. */
int model_layout(model *m, base_err *err) {
    int n = 0;
    walk_params(&m->args, count_only, &n);
    m->n_units = m->args.n_layers + 2;
    m->params = base_alloc(sizeof(model_param) * (size_t)n);
    m->units = base_alloc(sizeof(model_unit) * (size_t)m->n_units);
    if (!m->params || !m->units) return base_fail(err, "out of memory laying out parameters");
    snprintf(m->units[0].name, sizeof m->units[0].name, "tok_embeddings");
    for (int l = 0; l < m->args.n_layers; l++)
        snprintf(m->units[1 + l].name, sizeof m->units[1 + l].name, "layers.%d", l);
    snprintf(m->units[m->n_units - 1].name, sizeof m->units[0].name, "head");
    layout_ctx lc = {m, 0};
    m->n_params = 0;
    walk_params(&m->args, layout_emit, &lc);
    m->n_floats = lc.offset;
    layout_ctx fc = {m, 0};
    m->n_params = 0;
    walk_params(&m->full_args, full_emit, &fc);
    m->full_floats = fc.offset;
    return 0;
}

int model_describe(model *m, const model_args *a, base_err *err) {
    memset(m, 0, sizeof *m);
    if (model_args_validate(a, err)) return -1;
    m->args = m->full_args = *a;
    m->tp.size = 1;
    return model_layout(m, err);
}

/* How many of p's readers (in the tables of the units that use it) are bf16 implementations,
 * and how many there are. */
static void bf16_readers(const model *m, const model_param *p, int *n16, int *n) {
    const int head = m->args.n_layers + 1, tied = p->unit == 0 && m->args.tie_embeddings;
    *n16 = *n = 0;
    for (int k = 0; k < OPS_COUNT; k++) {
        if (!(p->readers & (1u << k))) continue;
        /* the unit whose table runs reader k: a tied embedding's lookup is unit 0's, its
         * lm_head readers (lmhead_ce, matmul) the head's */
        const int u = tied && k != OPS_EMBEDDING ? head : p->unit;
        const ops_prec pr =
            m->ops ? m->ops[u].impl[k]->prec : ops_default_prec_of((ops_kind)k, m->prec);
        *n16 += pr == OPS_PREC_BF16;
        ++*n;
    }
}

ops_prec model_param_prec(const model *m, const model_param *p) {
    if (m->prec != OPS_PREC_BF16 || !p->readers) return OPS_PREC_F32;
    int n16, n;
    bf16_readers(m, p, &n16, &n);
    return n16 == n ? OPS_PREC_BF16 : OPS_PREC_F32;
}

int model_param_in_bf16_copy(const model *m, const model_param *p) {
    if (m->prec != OPS_PREC_BF16) return 0;
    int n16, n;
    bf16_readers(m, p, &n16, &n);
    return n16 > 0;
}

const model_param *model_find_param(const model *m, const char *name) {
    for (int i = 0; i < m->n_params; i++)
        if (!strcmp(m->params[i].name, name)) return &m->params[i];
    return NULL;
}

const model_param *model_find_hf_param(const model *m, const char *hf_name) {
    for (int i = 0; i < m->n_params; i++)
        if (!strcmp(m->params[i].hf_name, hf_name)) return &m->params[i];
    return NULL;
}

int model_tp_local_args(const model_args *a, int tp, model_args *l, base_err *err) {
    *l = *a;
    if (tp == 1) return 0;
    if (a->n_experts > 0)
        return base_fail(err,
                         "tensor parallelism (tp %d) is not supported for MoE models "
                         "(n_experts %d): dense Qwen3 only",
                         tp, a->n_experts);
    const struct {
        const char *name;
        int v;
        int *out;
    } d[] = {{"n_heads", a->n_heads, &l->n_heads},
             {"n_kv_heads", a->n_kv_heads, &l->n_kv_heads},
             {"ffn_dim", a->ffn_dim, &l->ffn_dim},
             {"vocab_size", a->vocab_size, &l->vocab_size}};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++) {
        if (d[i].v % tp)
            return base_fail(err,
                             "tensor parallelism: %s (%d) must be a multiple of "
                             "tensor_parallel_degree (%d)%s",
                             d[i].name, d[i].v, tp,
                             i == 1 ? ": kv heads are split, never replicated" : "");
        *d[i].out = d[i].v / tp;
    }
    return 0;
}

/* Index in the full tensor of element e of this rank's slice of parameter p. */
static size_t full_index(const model *m, const model_param *p, size_t e) {
    const size_t r = (size_t)m->tp.rank;
    switch (p->tp_split) {
    case MODEL_EP_EXPERTS: /* this rank's experts are contiguous in the stack */
        return (size_t)m->ep.rank * p->numel + e;
    case MODEL_TP_ROWS:
        return r * p->numel + e; /* the rows are contiguous */
    case MODEL_TP_COLS: {
        const size_t c = (size_t)p->shape[1], row = e / c;
        return row * c * (size_t)m->tp.size + r * c + e % c;
    }
    default:
        return e;
    }
}

size_t model_tp_runs(const model *m, size_t off, size_t len, model_run *out, size_t max) {
    size_t n = 0;
    for (int i = 0; i < m->n_params && len; i++) {
        const model_param *p = &m->params[i];
        if (off >= p->offset + p->numel || off + len <= p->offset) continue;
        const size_t lo = off > p->offset ? off - p->offset : 0;
        const size_t hi = off + len < p->offset + p->numel ? off + len - p->offset : p->numel;
        const size_t c = p->tp_split == MODEL_TP_COLS ? (size_t)p->shape[1] : p->numel;
        const size_t full_stride = p->tp_split == MODEL_TP_COLS ? c * (size_t)m->tp.size : c;
        for (size_t e = lo; e < hi;) {
            /* whole rows as one strided run; a cut row (or a non-column tensor) alone */
            const size_t whole = e % c == 0 ? (hi - e) / c : 0;
            const size_t row_len = whole ? c : ((e / c + 1) * c < hi ? (e / c + 1) * c : hi) - e;
            const size_t rows = whole ? whole : 1;
            if (out && n < max)
                out[n] = (model_run){p->offset + e,
                                     p->full_offset + full_index(m, p, e),
                                     row_len,
                                     rows,
                                     rows > 1 ? full_stride : row_len,
                                     p->tp_split == MODEL_TP_REPLICATED};
            n++;
            e += rows * row_len;
        }
    }
    return n;
}

int model_init_parse(const char *name, model_init_scheme *out, base_err *err) {
    if (!strcmp(name, "normal"))
        *out = MODEL_INIT_NORMAL;
    else if (!strcmp(name, "torchtitan"))
        *out = MODEL_INIT_TORCHTITAN;
    else if (!strcmp(name, "torchtitan_0.3"))
        *out = MODEL_INIT_TORCHTITAN_03;
    else
        return base_fail(
            err, "unknown init scheme '%s' (known: normal, torchtitan, torchtitan_0.3)", name);
    return 0;
}

/* The std and the absolute cut (0 = none) of parameter p's draws under init (model.h). */
static void init_rule(const model *m, const model_param *p, const model_init *init, double *std,
                      double *cut) {
    *std = 0.02;
    *cut = 0;
    if (!init || init->scheme == MODEL_INIT_NORMAL) return;
    const model_args *a = &m->full_args;
    if (init->scheme == MODEL_INIT_TORCHTITAN_03) { /* an MoE's residual outputs scaled */
        if (a->n_experts > 0 &&
            (strstr(p->name, ".attention.wo.") || strstr(p->name, ".moe.experts.w2")))
            *std = 0.02 / sqrt(2.0 * a->n_layers);
        return;
    }
    const double out_std = 1.0 / sqrt((double)a->dim);
    int layer = -1;
    if (sscanf(p->name, "layers.%d.", &layer) != 1) {
        /* tok_embeddings (the lm_head too when tied) or output */
        const int lm_head = a->tie_embeddings || !strcmp(p->name, "output.weight");
        *std = lm_head ? out_std : 1.0;
        *cut = lm_head ? 3 * out_std : 0;
        return;
    }
    const double depth = 0.02 / sqrt(2.0 * (init->std_by_n_layers ? a->n_layers : layer + 1));
    /* 0.02: the q/k/v projections and the first SwiGLU matrix (gate); depth std: the rest */
    const int plain = strstr(p->name, ".wq.") || strstr(p->name, ".wk.") ||
                      strstr(p->name, ".wv.") || strstr(p->name, ".w1");
    *std = plain ? 0.02 : depth;
    *cut = 2.0; /* torchtitan's trunc_normal_ default: absolute, 100 std at 0.02 */
}

void model_init_unit(model *m, int unit, uint64_t seed, const model_init *init) {
    for (int i = 0; i < m->n_params; i++) {
        const model_param *p = &m->params[i];
        if (p->unit != unit) continue;
        float *w = m->w + p->offset;
        const uint64_t stream = base_hash_str(p->name);
        const size_t n = p->numel;
        if (p->is_norm) {
            for (size_t e = 0; e < n; e++) w[e] = 1.0f;
            continue;
        }
        double std_d, cut;
        init_rule(m, p, init, &std_d, &cut);
        const float std = (float)std_d;
        /* each element drawn at its index in the full tensor (TP), which runs on contiguously
         * for a whole row of a column-split tensor and for all of any other: pieces of at most
         * PIECE elements within those runs, filled by the threads */
        enum { PIECE = 16384 };
        const size_t run = p->tp_split == MODEL_TP_COLS ? (size_t)p->shape[1] : n;
        if (!run) continue;
        const size_t per_run = (run + PIECE - 1) / PIECE, pieces = n / run * per_run;
#pragma omp parallel for schedule(static)
        for (size_t q = 0; q < pieces; q++) {
            const size_t j = q % per_run * PIECE, e = q / per_run * run + j,
                         len = run - j < PIECE ? run - j : PIECE;
            base_rng_normal_fill(w + e, len, seed, stream, full_index(m, p, e), std, cut);
        }
    }
}

void model_init_unit_weights(model *m, int unit, uint64_t seed) {
    model_init_unit(m, unit, seed, NULL);
}

void model_init_weights(model *m, uint64_t seed) {
    for (int u = 0; u < m->n_units; u++) model_init_unit(m, u, seed, NULL);
}

double model_flops_per_token(const model_args *a, int seq_len) {
    model_counts c;
    model_count_params(a, &c);
    /* Untied: the embedding is a lookup, not a matmul. Tied: the shared matrix is the lm_head
     * matmul and is counted once (c.total holds it once). */
    double p_matmul = (double)(a->tie_embeddings ? c.active : c.active - c.embedding);
    return 6.0 * p_matmul + 12.0 * a->n_layers * a->n_heads * a->head_dim * (double)seq_len;
}
