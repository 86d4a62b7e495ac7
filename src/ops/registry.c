/* The kernel registry: named implementations per op, defaults, overrides, resolution;
 * plus the RoPE tables. */
#include "ops/ops.h"
#include "ops/cpu/cpu.h"
#include "ops/internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OPS_MAX_IMPLS 64

/* Registered implementations, copied in registration order. The strings they point to
 * (name, constraints) must outlive the registry, i.e. be static. Registration is meant to
 * happen at start-up, from one thread. */
static ops_impl g_impls[OPS_MAX_IMPLS];
static int g_n_impls;
static int g_builtin_done;

static const char *const g_kind_names[OPS_COUNT] = {
    [OPS_EMBEDDING] = "embedding",
    [OPS_RMSNORM] = "rmsnorm",
    [OPS_MATMUL] = "matmul",
    [OPS_ROPE] = "rope",
    [OPS_ATTENTION] = "attention",
    [OPS_SWIGLU] = "swiglu",
    [OPS_LMHEAD_CE] = "lmhead_ce",
    [OPS_ADAMW] = "adamw",
    [OPS_ATTENTION_KV] = "attention_kv",
    [OPS_GROUPED_MM] = "grouped_mm",
    [OPS_ADD_RMSNORM] = "add_rmsnorm",
};

const char *ops_kind_name(ops_kind k) {
    if ((int)k < 0 || k >= OPS_COUNT) return "unknown";
    return g_kind_names[k];
}

/* Ops whose whole computation is the one `fwd` function (no separate backward). */
static int ops_has_bwd(ops_kind k) {
    return k != OPS_LMHEAD_CE && k != OPS_ADAMW && k != OPS_ATTENTION_KV;
}

static int ops_register_impl(const ops_impl *impl, base_err *err) {
    if (!impl) return base_fail(err, "ops_register: NULL implementation");
    if ((int)impl->op < 0 || impl->op >= OPS_COUNT) {
        return base_fail(err, "ops_register: invalid op %d", (int)impl->op);
    }
    const char *op = ops_kind_name(impl->op);
    if (!impl->name || !impl->name[0]) {
        return base_fail(err, "ops_register: implementation of %s has no name", op);
    }
    if (!impl->fwd) return base_fail(err, "ops_register: %s/%s has no function", op, impl->name);
    if (ops_has_bwd(impl->op) && !impl->bwd) {
        return base_fail(err, "ops_register: %s/%s has no backward", op, impl->name);
    }
    for (int i = 0; i < g_n_impls; i++) {
        if (g_impls[i].op == impl->op && strcmp(g_impls[i].name, impl->name) == 0) {
            return base_fail(err, "ops_register: %s/%s is already registered", op, impl->name);
        }
    }
    if (g_n_impls >= OPS_MAX_IMPLS) {
        return base_fail(err, "ops_register: registry full (%d implementations), cannot add %s/%s",
                         OPS_MAX_IMPLS, op, impl->name);
    }
    g_impls[g_n_impls] = *impl;
    if (!g_impls[g_n_impls].constraints) g_impls[g_n_impls].constraints = "";
    g_n_impls++;
    return 0;
}

/* The built-ins go in first, so the CPU kernels are always the defaults. */
int ops_register(const ops_impl *impl, base_err *err) {
    ops_register_builtin();
    return ops_register_impl(impl, err);
}

int ops_register_nobuiltin(const ops_impl *impl, base_err *err) {
    return ops_register_impl(impl, err);
}

int ops_registry_mark(void) {
    return g_n_impls;
}

void ops_registry_rollback(int mark) {
    if (mark >= 0 && mark < g_n_impls) g_n_impls = mark;
}

int ops_kind_from_name(const char *s) {
    for (int k = 0; s && k < OPS_COUNT; k++)
        if (g_kind_names[k] && strcmp(s, g_kind_names[k]) == 0) return k;
    return -1;
}

static int check_rope_default(const ops_ctx *ctx, base_err *err) {
    if (ctx->head_dim % 2 != 0)
        return base_fail(err, "head_dim %% 2 == 0 (head_dim = %d)", ctx->head_dim);
    return 0;
}

static int check_attention_default(const ops_ctx *ctx, base_err *err) {
    if (ctx->n_kv_heads > 0 && ctx->n_heads % ctx->n_kv_heads != 0) {
        return base_fail(err, "n_heads %% n_kv_heads == 0 (n_heads = %d, n_kv_heads = %d)",
                         ctx->n_heads, ctx->n_kv_heads);
    }
    return 0;
}

/* add_rmsnorm "unfused": the residual add as its own pass, then the default rmsnorm; the
 * baseline that `titan kernels bench add_rmsnorm` measures the fusion against. */
static void add_rmsnorm_unfused(float *h, float *out, float *rstd, const float *x, const float *y,
                                const float *w, int N, int C, float eps) {
    const size_t n = (size_t)N * C;
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) h[i] = x[i] + y[i];
    ops_cpu_rmsnorm_fwd(out, rstd, h, w, N, C, eps);
}

void ops_register_builtin(void) {
    if (g_builtin_done) return;
    g_builtin_done = 1;
    const ops_impl builtin[] = {
        {OPS_EMBEDDING, "default", "", NULL, (ops_fn)ops_cpu_embedding_fwd,
         (ops_fn)ops_cpu_embedding_bwd},
        {OPS_RMSNORM, "default", "", NULL, (ops_fn)ops_cpu_rmsnorm_fwd,
         (ops_fn)ops_cpu_rmsnorm_bwd},
        {OPS_MATMUL, "default", "", NULL, (ops_fn)ops_cpu_matmul_fwd, (ops_fn)ops_cpu_matmul_bwd},
        {OPS_ROPE, "default", "head_dim % 2 == 0", check_rope_default, (ops_fn)ops_cpu_rope_fwd,
         (ops_fn)ops_cpu_rope_bwd},
        {OPS_ATTENTION, "default", "n_heads % n_kv_heads == 0", check_attention_default,
         (ops_fn)ops_cpu_attention_fwd, (ops_fn)ops_cpu_attention_bwd},
        {OPS_SWIGLU, "default", "", NULL, (ops_fn)ops_cpu_swiglu_fwd, (ops_fn)ops_cpu_swiglu_bwd},
        {OPS_LMHEAD_CE, "default", "", NULL, (ops_fn)ops_cpu_lmhead_ce, NULL},
        {OPS_ADAMW, "default", "", NULL, (ops_fn)ops_cpu_adamw, NULL},
        {OPS_ATTENTION_KV, "default", "n_heads % n_kv_heads == 0", check_attention_default,
         (ops_fn)ops_cpu_attention_kv, NULL},
        {OPS_GROUPED_MM, "default", "", NULL, (ops_fn)ops_cpu_grouped_mm_fwd,
         (ops_fn)ops_cpu_grouped_mm_bwd},
        {OPS_GROUPED_MM, "grouped", "", NULL, (ops_fn)ops_cpu_grouped_mm_tiled_fwd,
         (ops_fn)ops_cpu_grouped_mm_tiled_bwd},
        /* the add's backward is the identity: the backward is rmsnorm's (ops.h) */
        {OPS_ADD_RMSNORM, "default", "", NULL, (ops_fn)ops_cpu_add_rmsnorm_fwd,
         (ops_fn)ops_cpu_rmsnorm_bwd},
        {OPS_ADD_RMSNORM, "unfused", "", NULL, (ops_fn)add_rmsnorm_unfused,
         (ops_fn)ops_cpu_rmsnorm_bwd},
    };
    for (size_t i = 0; i < sizeof builtin / sizeof builtin[0]; i++) {
        /* cannot fail: distinct ops, valid fields, an empty table */
        (void)ops_register_impl(&builtin[i], NULL);
    }
    ops_cpu_register_extra(ops_register_impl);
}

const ops_impl *ops_find(ops_kind op, const char *name) {
    ops_register_builtin();
    if (!name) return NULL;
    for (int i = 0; i < g_n_impls; i++) {
        if (g_impls[i].op == op && strcmp(g_impls[i].name, name) == 0) return &g_impls[i];
    }
    return NULL;
}

int ops_list(const ops_impl **out, int max) {
    ops_register_builtin();
    int n = 0;
    for (int i = 0; i < g_n_impls && n < max; i++) out[n++] = &g_impls[i];
    return n;
}

static const ops_impl *ops_default(ops_kind op) {
    for (int i = 0; i < g_n_impls; i++) {
        if (g_impls[i].op == op) return &g_impls[i];
    }
    return NULL;
}

const ops_impl *ops_default_impl(ops_kind op) {
    ops_register_builtin();
    return ops_default(op);
}

/* A decimal run at *s (at most 9 digits) into *v, advancing *s; 0 when there is none. */
static int ops_digits(const char **s, long *v) {
    const char *p = *s;
    long x = 0;
    int n = 0;
    while (*p >= '0' && *p <= '9' && n < 9) x = x * 10 + (*p++ - '0'), n++;
    if (n == 0 || (*p >= '0' && *p <= '9')) return 0;
    *s = p;
    *v = x;
    return 1;
}

/* Glob match of the whole string: '*' matches any run of characters (dots included),
 * '?' any one character, "N-M" (digits, dash, digits) a whole decimal number in [N, M];
 * everything else matches itself. Recursion depth is bounded by the number of '*'s and
 * ranges in the pattern (patterns come from configs: a few of each). */
static int ops_glob(const char *pat, const char *s) {
    for (;;) {
        if (*pat == '*') {
            while (*pat == '*') pat++;
            for (const char *t = s;; t++) {
                if (ops_glob(pat, t)) return 1;
                if (!*t) return 0;
            }
        }
        const char *p = pat;
        long lo, hi, v;
        if (ops_digits(&p, &lo) && *p == '-' && (p++, ops_digits(&p, &hi))) {
            const char *t = s;
            if (!ops_digits(&t, &v) || v < lo || v > hi) return 0;
            pat = p;
            s = t;
            continue;
        }
        if (!*pat) return !*s;
        if (!*s || (*pat != '?' && *pat != *s)) return 0;
        pat++;
        s++;
    }
}

/* Module sub-paths an op also answers to, besides "<unit>.<op>" (torchtitan's module
 * names). Only ops that have one call site per block get one: a per-call-site name for
 * rmsnorm or matmul would suggest a finer choice than the per-unit table makes. */
static const char *ops_subpath(ops_kind k) {
    switch (k) {
    case OPS_ROPE:
        return "attention.rope";
    case OPS_SWIGLU:
        return "feed_forward.swiglu";
    case OPS_ATTENTION_KV:
        return "attention.kv";
    case OPS_ADD_RMSNORM:
        return "ffn_norm";
    default:
        return NULL;
    }
}

static int ops_is_kind_name(const char *s) {
    for (int k = 0; k < OPS_COUNT; k++) {
        if (strcmp(s, g_kind_names[k]) == 0) return 1;
    }
    return 0;
}

/* "default, flash" into buf: the implementations registered for op. */
static void ops_names_of(ops_kind op, char *buf, size_t size) {
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < g_n_impls; i++) {
        if (g_impls[i].op != op) continue;
        int w = snprintf(buf + len, size - len, "%s%s", len ? ", " : "", g_impls[i].name);
        if (w < 0 || (size_t)w >= size - len) break;
        len += (size_t)w;
    }
}

/* Later overrides take precedence over earlier ones (the last matching entry wins), so a
 * config can set an op globally and then single out layers. */
static int ops_resolve_hits(ops_table *t, const char *layer_path, uint32_t calls,
                            const ops_ctx *ctx, const ops_override *overrides, int n_overrides,
                            int *hits, base_err *err) {
    ops_register_builtin();
    memset(t, 0, sizeof *t);
    const char *path = layer_path ? layer_path : "";

    /* A plain name (no glob, no dot) must be an op name: catches typos like "atention". */
    for (int i = 0; i < n_overrides; i++) {
        const char *pat = overrides[i].pattern;
        if (!pat || !overrides[i].impl) {
            return base_fail(err, "kernel override %d: missing pattern or implementation", i);
        }
        if (!strpbrk(pat, ".*?") && !ops_is_kind_name(pat)) {
            return base_fail(err,
                             "kernel override '%s' = '%s': '%s' is not an op name (embedding, "
                             "rmsnorm, matmul, rope, attention, swiglu, lmhead_ce, adamw, "
                             "attention_kv, grouped_mm, add_rmsnorm) or a "
                             "layer glob such as 'layers.*.attention'",
                             pat, overrides[i].impl, pat);
        }
    }

    for (int k = 0; k < OPS_COUNT; k++) {
        const char *opname = g_kind_names[k];
        char full[512], sub[512];
        snprintf(full, sizeof full, "%s%s%s", path, path[0] ? "." : "", opname);
        const char *alias = ops_subpath((ops_kind)k);
        snprintf(sub, sizeof sub, "%s%s%s", path, path[0] ? "." : "", alias ? alias : "");
        const ops_impl *impl = ops_default((ops_kind)k);
        if (!impl) return base_fail(err, "kernel %s: no implementation registered", opname);
        const ops_override *chosen = NULL;
        /* an op the unit never calls keeps its default: no override, check or log there */
        for (int i = 0; (calls >> k & 1) && i < n_overrides; i++) {
            const char *pat = overrides[i].pattern;
            if (strcmp(pat, opname) == 0 || ops_glob(pat, full) || (alias && ops_glob(pat, sub))) {
                chosen = &overrides[i];
                if (hits) hits[i] = 1;
            }
        }
        if (chosen) {
            const ops_impl *found = ops_find((ops_kind)k, chosen->impl);
            if (!found) {
                char names[512];
                ops_names_of((ops_kind)k, names, sizeof names);
                return base_fail(err,
                                 "kernel override '%s' = '%s' at %s: no implementation '%s' of "
                                 "%s (available: %s)",
                                 chosen->pattern, chosen->impl, full, chosen->impl, opname, names);
            }
            impl = found;
        }
        if (ctx && (impl->check || ops_plugin_is(impl))) {
            base_err why;
            why.msg[0] = '\0';
            if ((ops_plugin_is(impl) ? ops_plugin_check(impl, ctx, &why)
                                     : impl->check(ctx, &why)) != 0) {
                return base_fail(err, "kernel %s/%s at %s: %s", opname, impl->name,
                                 path[0] ? path : "(model)",
                                 why.msg[0] ? why.msg : impl->constraints);
            }
        }
        if (ctx && impl != ops_default((ops_kind)k)) { /* ctx NULL: a config check */
            const char *origin = ops_impl_origin(impl);
            base_log(BASE_LOG_INFO, "kernel %s/%s at %s (override '%s'%s%s)", opname, impl->name,
                     path[0] ? path : "(model)", chosen ? chosen->pattern : "?",
                     origin ? ", plugin " : "", origin ? origin : "");
        }
        t->impl[k] = impl;
    }

    t->embedding_fwd = (ops_embedding_fwd_fn)t->impl[OPS_EMBEDDING]->fwd;
    t->embedding_bwd = (ops_embedding_bwd_fn)t->impl[OPS_EMBEDDING]->bwd;
    t->rmsnorm_fwd = (ops_rmsnorm_fwd_fn)t->impl[OPS_RMSNORM]->fwd;
    t->rmsnorm_bwd = (ops_rmsnorm_bwd_fn)t->impl[OPS_RMSNORM]->bwd;
    t->matmul_fwd = (ops_matmul_fwd_fn)t->impl[OPS_MATMUL]->fwd;
    t->matmul_bwd = (ops_matmul_bwd_fn)t->impl[OPS_MATMUL]->bwd;
    t->rope_fwd = (ops_rope_fwd_fn)t->impl[OPS_ROPE]->fwd;
    t->rope_bwd = (ops_rope_bwd_fn)t->impl[OPS_ROPE]->bwd;
    t->attention_fwd = (ops_attention_fwd_fn)t->impl[OPS_ATTENTION]->fwd;
    t->attention_bwd = (ops_attention_bwd_fn)t->impl[OPS_ATTENTION]->bwd;
    t->swiglu_fwd = (ops_swiglu_fwd_fn)t->impl[OPS_SWIGLU]->fwd;
    t->swiglu_bwd = (ops_swiglu_bwd_fn)t->impl[OPS_SWIGLU]->bwd;
    t->lmhead_ce = (ops_lmhead_ce_fn)t->impl[OPS_LMHEAD_CE]->fwd;
    t->adamw = (ops_adamw_fn)t->impl[OPS_ADAMW]->fwd;
    t->attention_kv = (ops_attention_kv_fn)t->impl[OPS_ATTENTION_KV]->fwd;
    t->grouped_mm_fwd = (ops_grouped_mm_fwd_fn)t->impl[OPS_GROUPED_MM]->fwd;
    t->grouped_mm_bwd = (ops_grouped_mm_bwd_fn)t->impl[OPS_GROUPED_MM]->bwd;
    t->add_rmsnorm_fwd = (ops_add_rmsnorm_fwd_fn)t->impl[OPS_ADD_RMSNORM]->fwd;
    t->add_rmsnorm_bwd = (ops_add_rmsnorm_bwd_fn)t->impl[OPS_ADD_RMSNORM]->bwd;
    for (int k = 0; k < OPS_COUNT; k++) {
        if (!ops_plugin_is(t->impl[k])) continue;
        if (ops_plugin_bind(t, (ops_kind)k, t->impl[k], path[0] ? path : "(model)", err)) {
            ops_release(t);
            return -1;
        }
    }
    return 0;
}

int ops_resolve(ops_table *t, const char *layer_path, const ops_ctx *ctx,
                const ops_override *overrides, int n_overrides, base_err *err) {
    return ops_resolve_hits(t, layer_path, OPS_CALLS_ALL, ctx, overrides, n_overrides, NULL, err);
}

void ops_release(ops_table *t) {
    if (t) ops_plugin_unbind(t);
}

int ops_resolve_units(ops_table *tables, const char *const *paths, const uint32_t *calls, int n,
                      const ops_ctx *ctx, const ops_override *overrides, int n_overrides,
                      base_err *err) {
    int *hits = n_overrides > 0 ? calloc((size_t)n_overrides, sizeof *hits) : NULL;
    if (n_overrides > 0 && !hits) return base_fail(err, "out of memory");
    int rc = 0, done = 0;
    for (; done < n && !rc; done++)
        rc = ops_resolve_hits(&tables[done], paths[done], calls ? calls[done] : OPS_CALLS_ALL, ctx,
                              overrides, n_overrides, hits, err);
    if (!rc)
        done = n;
    else
        done--; /* the failed table released itself */
    for (int i = 0; i < n_overrides && !rc; i++) {
        if (hits[i]) continue;
        if (ops_is_kind_name(overrides[i].pattern)) { /* a dense model and grouped_mm, say */
            base_log(BASE_LOG_WARN,
                     "kernel override '%s' = '%s': no unit of this model calls %s; ignored",
                     overrides[i].pattern, overrides[i].impl, overrides[i].pattern);
            continue;
        }
        rc = base_fail(err,
                       "kernel override '%s' = '%s' matches no op of the model (op paths read "
                       "'%s.<op>', e.g. layers.0.attention, layers.*.attention.rope, "
                       "layers.0-3.rmsnorm, head.lmhead_ce; units: %s .. %s)",
                       overrides[i].pattern, overrides[i].impl, n > 1 ? paths[1] : "layers.N",
                       n ? paths[0] : "-", n ? paths[n - 1] : "-");
    }
    if (rc)
        for (int i = 0; i < done; i++) ops_release(&tables[i]);
    free(hits);
    return rc;
}

/* Hugging Face's default RoPE init and forward, in fp32:
 *   inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2).float() / hd))
 *     (theta ** float_tensor runs in fp32 with theta cast to float; computed here in double
 *      from the same fp32 operands and rounded once, i.e. correctly rounded powf)
 *   freqs = inv_freq[None, :] @ pos[:, None]   (an fp32 product per element, K = 1)
 *   cos = freqs.cos(), sin = freqs.sin()       (fp32 cos/sin of the fp32 angle, correctly
 *                                               rounded here, within 1 ulp of torch's) */
void ops_rope_table(float *cos_out, float *sin_out, int T, int hd, double theta) {
    int h = hd / 2;
    float base = (float)theta;
    for (int i = 0; i < h; i++) {
        float expo = (float)(2 * i) / (float)hd;
        float p = (float)pow((double)base, (double)expo);
        float inv_freq = 1.0f / p;
        for (int t = 0; t < T; t++) {
            float angle = (float)t * inv_freq;
            cos_out[(size_t)t * h + i] = (float)cos((double)angle);
            sin_out[(size_t)t * h + i] = (float)sin((double)angle);
        }
    }
}
