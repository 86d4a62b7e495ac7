/* The kernel registry: named implementations per op, defaults, overrides, resolution;
 * plus the RoPE tables. The op kinds come from the op list (oplist.h), the built-in
 * implementations from the CPU backend's table (cpu/table.c); implementations bound per unit
 * (plugins) are reached through their ops_binding, never by calling plugin.c. */
#include "ops/ops.h"
#include "ops/cpu/cpu.h"
#include "ops/internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OPS_MAX_IMPLS 64

/* Registered implementations, copied in registration order. The strings they point to
 * (name, constraints) must outlive the registry, i.e. be static. Registration is meant to
 * happen at start-up, from one thread. */
static ops_impl g_impls[OPS_MAX_IMPLS];
static const ops_binding *g_binds[OPS_MAX_IMPLS]; /* g_impls[i]'s binding, NULL for most */
static int g_n_impls;
static int g_builtin_done;

/* From the op list (oplist.h): each op's name, the module sub-path it also answers to in
 * overrides (NULL: none), whether it has a separate backward, and whether a plugin may
 * provide it. */
#define OPS_DESC_FB(K, name, sub, plg, ...) [OPS_##K] = {#name, sub, 1, plg},
#define OPS_DESC_F(K, name, sub, plg, ...) [OPS_##K] = {#name, sub, 0, plg},
static const struct {
    const char *name, *subpath;
    int has_bwd, plugin;
} g_kinds[OPS_COUNT] = {OPS_LIST(OPS_DESC_FB, OPS_DESC_F)};
#undef OPS_DESC_FB
#undef OPS_DESC_F

const char *ops_kind_name(ops_kind k) {
    if ((int)k < 0 || k >= OPS_COUNT) return "unknown";
    return g_kinds[k].name;
}

static int ops_register_impl(const ops_impl *impl, const ops_binding *bind, base_err *err) {
    if (!impl) return base_fail(err, "ops_register: NULL implementation");
    if ((int)impl->op < 0 || impl->op >= OPS_COUNT) {
        return base_fail(err, "ops_register: invalid op %d", (int)impl->op);
    }
    const char *op = ops_kind_name(impl->op);
    if (!impl->name || !impl->name[0]) {
        return base_fail(err, "ops_register: implementation of %s has no name", op);
    }
    if (!impl->fwd) return base_fail(err, "ops_register: %s/%s has no function", op, impl->name);
    if (g_kinds[impl->op].has_bwd && !impl->bwd) {
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
    g_binds[g_n_impls] = bind;
    if (!g_impls[g_n_impls].constraints) g_impls[g_n_impls].constraints = "";
    g_n_impls++;
    return 0;
}

/* The built-ins go in first, so the CPU kernels are always the defaults. */
int ops_register(const ops_impl *impl, base_err *err) {
    ops_register_builtin();
    return ops_register_impl(impl, NULL, err);
}

int ops_register_bound(const ops_impl *impl, const ops_binding *b, base_err *err) {
    return ops_register_impl(impl, b, err);
}

/* The binding registered with impl (a registry entry, or a copy of one: found by op and
 * name), or NULL. */
static const ops_binding *ops_binding_of(const ops_impl *impl) {
    if (!impl) return NULL;
    if (impl >= g_impls && impl < g_impls + g_n_impls) return g_binds[impl - g_impls];
    for (int i = 0; i < g_n_impls; i++)
        if (g_impls[i].op == impl->op && !strcmp(g_impls[i].name, impl->name)) return g_binds[i];
    return NULL;
}

const char *ops_impl_origin(const ops_impl *impl) {
    const ops_binding *b = ops_binding_of(impl);
    return b ? b->origin : NULL;
}

int ops_registry_mark(void) {
    return g_n_impls;
}

void ops_registry_rollback(int mark) {
    if (mark >= 0 && mark < g_n_impls) g_n_impls = mark;
}

void ops_kind_names(char *buf, size_t size, int plugin_only) {
    size_t len = 0;
    buf[0] = '\0';
    for (int k = 0; k < OPS_COUNT; k++) {
        if (plugin_only && !g_kinds[k].plugin) continue;
        int w = snprintf(buf + len, size - len, "%s%s", len ? ", " : "", g_kinds[k].name);
        if (w < 0 || (size_t)w >= size - len) break;
        len += (size_t)w;
    }
}

int ops_kind_plugin(ops_kind k) {
    return (int)k >= 0 && k < OPS_COUNT ? g_kinds[k].plugin : 0;
}

int ops_kind_from_name(const char *s) {
    for (int k = 0; s && k < OPS_COUNT; k++)
        if (strcmp(s, g_kinds[k].name) == 0) return k;
    return -1;
}

/* The CPU backend's implementations (ops/cpu/table.c) go in first, so they are the defaults;
 * an accelerator backend would register its table here, after them. */
static int ops_register_plain(const ops_impl *impl, base_err *err) {
    return ops_register_impl(impl, NULL, err);
}

void ops_register_builtin(void) {
    if (g_builtin_done) return;
    g_builtin_done = 1;
    ops_cpu_register(ops_register_plain);
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

/* The default under a precision: the op's first implementation of that precision, else its
 * (fp32) default. */
static const ops_impl *ops_default_prec(ops_kind op, ops_prec prec) {
    for (int i = 0; prec != OPS_PREC_F32 && i < g_n_impls; i++) {
        if (g_impls[i].op == op && g_impls[i].prec == prec) return &g_impls[i];
    }
    return ops_default(op);
}

const ops_impl *ops_default_impl(ops_kind op) {
    ops_register_builtin();
    return ops_default(op);
}

ops_prec ops_default_prec_of(ops_kind op, ops_prec prec) {
    ops_register_builtin();
    const ops_impl *d = ops_default_prec(op, prec);
    return d ? d->prec : OPS_PREC_F32;
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

static int ops_is_kind_name(const char *s) {
    for (int k = 0; k < OPS_COUNT; k++) {
        if (strcmp(s, g_kinds[k].name) == 0) return 1;
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

int ops_ctx_sites(const ops_ctx *ctx, ops_kind k, ops_ctx out[OPS_MAX_SITES],
                  char why[OPS_MAX_SITES][OPS_SITE_WHY]) {
    ops_ctx c = *ctx;
    c.sp = c.ep = c.ce_vocab = c.docs = 0;
    out[0] = out[1] = c;
    if (why) why[0][0] = why[1][0] = '\0';
    const int sp = ctx->sp > 1 ? ctx->sp : 1;
    if (sp > 1 && (k == OPS_RMSNORM || k == OPS_ADD_RMSNORM)) {
        out[0].batch = 1;
        out[0].seq_len = (int)((long)ctx->batch * ctx->seq_len / sp);
        if (why)
            snprintf(why[0], OPS_SITE_WHY,
                     "sequence parallelism: this rank's calls get batch x seq_len / tp = %d x %d / "
                     "%d tokens",
                     ctx->batch, ctx->seq_len, sp);
        return k == OPS_RMSNORM ? 2 : 1; /* rmsnorm: also the per-head norms, on every token */
    }
    if (ctx->docs && k == OPS_ATTENTION) { /* one call per document */
        out[0].batch = out[1].batch = 1;
        out[0].seq_len = 1;
        if (why)
            for (int i = 0; i < 2; i++)
                snprintf(why[i], OPS_SITE_WHY,
                         "document masking: attention runs per document, batch 1 x 1 to %d "
                         "tokens",
                         ctx->seq_len);
        return 2;
    }
    if (ctx->n_experts > 0 && k == OPS_SWIGLU) { /* an MoE block's: between the expert GEMMs */
        out[0].batch = 1;
        out[0].seq_len = (int)((long)ctx->batch * ctx->seq_len * ctx->top_k);
        out[0].ffn_dim = ctx->moe_ffn_dim;
        if (why)
            snprintf(why[0], OPS_SITE_WHY,
                     "MoE: this rank's calls get the routed rows, batch x seq_len x top_k = %d x "
                     "%d x %d, moe_ffn_dim wide",
                     ctx->batch, ctx->seq_len, ctx->top_k);
    }
    if (ctx->ep > 1 && k == OPS_GROUPED_MM) {
        out[0].n_experts = ctx->n_experts / ctx->ep;
        if (why)
            snprintf(why[0], OPS_SITE_WHY,
                     "expert parallelism: this rank's calls get n_experts / ep = %d / %d experts",
                     ctx->n_experts, ctx->ep);
    }
    if (ctx->ce_vocab > 0 && ctx->ce_vocab != ctx->vocab && k == OPS_LMHEAD_CE) {
        out[0].vocab = ctx->ce_vocab;
        if (why)
            snprintf(why[0], OPS_SITE_WHY,
                     "loss parallel off: this rank's calls get the whole vocabulary, not its %d "
                     "rows",
                     ctx->vocab);
    }
    return 1;
}

/* impl's constraints on the shapes of its op's calls (ops_ctx_sites of ctx; its check, or its
 * plugin's): 0, or -1 with "kernel OP/NAME at PATH: rule" in err, and when the failing shape
 * is not ctx's, the split that made it ("(sequence parallelism: ...)"). */
static int ops_check_impl(const ops_impl *impl, const ops_ctx *ctx, const char *path,
                          base_err *err) {
    const ops_binding *bound = ops_binding_of(impl);
    if (!impl->check && !bound) return 0;
    ops_ctx site[OPS_MAX_SITES];
    char split[OPS_MAX_SITES][OPS_SITE_WHY];
    const int n = ops_ctx_sites(ctx, impl->op, site, split);
    for (int i = 0; i < n; i++) {
        base_err why;
        why.msg[0] = '\0';
        if ((bound ? bound->check(bound, &site[i], &why) : impl->check(&site[i], &why)) == 0)
            continue;
        return base_fail(err, "kernel %s/%s at %s: %s%s%s%s", ops_kind_name(impl->op), impl->name,
                         path, why.msg[0] ? why.msg : impl->constraints, split[i][0] ? " (" : "",
                         split[i], split[i][0] ? ")" : "");
    }
    return 0;
}

int ops_check_table(const ops_table *t, const char *path, uint32_t calls, const ops_ctx *ctx,
                    base_err *err) {
    for (int k = 0; k < OPS_COUNT; k++)
        if ((calls >> k & 1) && t->impl[k] && ops_check_impl(t->impl[k], ctx, path, err)) return -1;
    return 0;
}

/* Later overrides take precedence over earlier ones (the last matching entry wins), so a
 * config can set an op globally and then single out layers. */
/* hits[i]: override i matched an op some unit calls (1), and was the last to match there, so
 * chose its implementation (2); NULL: not counted. */
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
            char names[512];
            ops_kind_names(names, sizeof names, 0);
            return base_fail(err,
                             "kernel override '%s' = '%s': '%s' is not an op name (%s) or a "
                             "layer glob such as 'layers.*.attention'",
                             pat, overrides[i].impl, pat, names);
        }
    }

    for (int k = 0; k < OPS_COUNT; k++) {
        const char *opname = g_kinds[k].name;
        char full[512], sub[512];
        snprintf(full, sizeof full, "%s%s%s", path, path[0] ? "." : "", opname);
        const char *alias = g_kinds[k].subpath;
        snprintf(sub, sizeof sub, "%s%s%s", path, path[0] ? "." : "", alias ? alias : "");
        const ops_impl *const dflt = ops_default_prec((ops_kind)k, ctx ? ctx->prec : OPS_PREC_F32);
        const ops_impl *impl = dflt;
        if (!impl) return base_fail(err, "kernel %s: no implementation registered", opname);
        const ops_override *chosen = NULL;
        /* an op the unit never calls keeps its default: no override, check or log there */
        for (int i = 0; (calls >> k & 1) && i < n_overrides; i++) {
            const char *pat = overrides[i].pattern;
            if (strcmp(pat, opname) == 0 || ops_glob(pat, full) || (alias && ops_glob(pat, sub))) {
                chosen = &overrides[i];
                if (hits && !hits[i]) hits[i] = 1;
            }
        }
        if (chosen && hits) hits[chosen - overrides] = 2;
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
        if (ctx && ops_check_impl(impl, ctx, path[0] ? path : "(model)", err)) return -1;
        if (ctx && impl != dflt) { /* ctx NULL: a config check */
            const char *origin = ops_impl_origin(impl);
            base_log(BASE_LOG_INFO, "kernel %s/%s at %s (override '%s'%s%s)", opname, impl->name,
                     path[0] ? path : "(model)", chosen ? chosen->pattern : "?",
                     origin ? ", plugin " : "", origin ? origin : "");
        }
        t->impl[k] = impl;
    }

#define OPS_SET_FB(K, name, ...)                                                                   \
    t->name##_fwd = (ops_##name##_fwd_fn)t->impl[OPS_##K]->fwd;                                    \
    t->name##_bwd = (ops_##name##_bwd_fn)t->impl[OPS_##K]->bwd;
#define OPS_SET_F(K, name, ...) t->name = (ops_##name##_fn)t->impl[OPS_##K]->fwd;
    OPS_LIST(OPS_SET_FB, OPS_SET_F)
#undef OPS_SET_FB
#undef OPS_SET_F
    for (int k = 0; k < OPS_COUNT; k++) {
        const ops_binding *b = ops_binding_of(t->impl[k]);
        if (!b) continue;
        if (b->bind(b, t, (ops_kind)k, path[0] ? path : "(model)", err)) {
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
    if (!t) return;
    for (int k = 0; k < OPS_COUNT; k++) {
        const ops_binding *b = t->plugin_slot[k] ? ops_binding_of(t->impl[k]) : NULL;
        if (b) b->unbind(t, (ops_kind)k);
    }
}

/* Appends to buf (len so far in *len); at the end of space, "..." and the rest dropped. */
static void ops_cat(char *buf, size_t size, size_t *len, const char *fmt, ...) {
    if (*len + 1 >= size) return;
    va_list ap;
    va_start(ap, fmt);
    const int w = vsnprintf(buf + *len, size - *len, fmt, ap);
    va_end(ap);
    if (w >= 0 && (size_t)w < size - *len) {
        *len += (size_t)w;
        return;
    }
    if (size >= 4) memcpy(buf + size - 4, "...", 4);
    *len = size - 1;
}

/* A loaded plugin none of whose kernels any of the n tables runs was loaded for nothing (an
 * override forgotten or misspelt to another implementation): warned about, naming its
 * kernels. */
static void ops_warn_unused_plugins(const ops_table *tables, int n) {
    static unsigned char warned[OPS_MAX_IMPLS]; /* once per plugin (its first kernel's index) and
                                                   process, not per model built */
    for (int i = 0; i < g_n_impls; i++) {
        const ops_binding *b = g_binds[i];
        int first = b != NULL;
        for (int j = 0; j < i && first; j++)
            first = !g_binds[j] || strcmp(g_binds[j]->origin, b->origin);
        if (!first) continue; /* no plugin, or one already looked at */
        char names[512];
        size_t len = 0;
        int used = 0;
        names[0] = '\0';
        for (int j = i; j < g_n_impls; j++) {
            if (!g_binds[j] || strcmp(g_binds[j]->origin, b->origin)) continue;
            ops_cat(names, sizeof names, &len, "%s%s/%s", len ? ", " : "",
                    ops_kind_name(g_impls[j].op), g_impls[j].name);
            for (int u = 0; u < n && !used; u++)
                used = tables[u].impl[g_impls[j].op] == &g_impls[j];
        }
        if (!used && !warned[i]++)
            base_log(BASE_LOG_WARN,
                     "kernel plugin %s is loaded, but no unit of this model runs its kernels (%s): "
                     "[kernels] overrides select them",
                     b->origin, names);
    }
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
        if (hits[i] == 1) { /* last-wins hid it everywhere it matched: say so */
            base_log(BASE_LOG_WARN,
                     "kernel override '%s' = '%s' has no effect: a later override replaces it "
                     "everywhere it matches (the last matching one wins)",
                     overrides[i].pattern, overrides[i].impl);
            continue;
        }
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
    if (!rc) ops_warn_unused_plugins(tables, n);
    return rc;
}

/* layer number of "layers.N", else -1 */
static int ops_layer_of(const char *path) {
    long v;
    const char *p = path;
    if (strncmp(p, "layers.", 7)) return -1;
    p += 7;
    return ops_digits(&p, &v) && !*p ? (int)v : -1;
}

int ops_choices(const ops_table *t, const char *const *paths, int n, ops_prec prec, char *buf,
                size_t size) {
    ops_register_builtin();
    size_t len = 0;
    int items = 0;
    if (size) buf[0] = '\0';
    for (int k = 0; k < OPS_COUNT; k++) {
        const ops_impl *dflt = ops_default_prec((ops_kind)k, prec);
        for (int u = 0; u < n; u++) {
            const ops_impl *im = t[u].impl[k];
            int seen = !im || im == dflt;
            for (int v = 0; v < u && !seen; v++) seen = t[v].impl[k] == im;
            if (seen) continue; /* a default, or listed with an earlier unit */
            ops_cat(buf, size, &len, "%s%s=%s at ", items++ ? "; " : "", ops_kind_name((ops_kind)k),
                    im->name);
            for (int v = u, first = 1; v < n; v++) {
                if (t[v].impl[k] != im) continue;
                const int a = ops_layer_of(paths[v]);
                int w = v; /* the run of consecutive layers a, a+1, ... that run im */
                while (a >= 0 && w + 1 < n && t[w + 1].impl[k] == im &&
                       ops_layer_of(paths[w + 1]) == a + (w + 1 - v))
                    w++;
                if (w > v)
                    ops_cat(buf, size, &len, "%slayers.%d-%d", first ? "" : ", ", a, a + (w - v));
                else
                    ops_cat(buf, size, &len, "%s%s", first ? "" : ", ", paths[v]);
                first = 0;
                v = w;
            }
            const char *origin = ops_impl_origin(im);
            if (origin) ops_cat(buf, size, &len, " (plugin %s)", origin);
        }
    }
    return items;
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
