/* train: per-parameter-group optimizers, torchtitan 0.3's OptimizersContainer.Config.param_groups
 * (a list of ParamGroupConfig(pattern, optimizer_name, optimizer_kwargs)): their TOML form
 * [[optimizer.param_groups]], and each parameter's group and the spans of this rank's shard
 * vector each group steps. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <math.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/config_schema.h"
#include "train/internal.h"

#define PG "optimizer.param_groups"

/* ---- the config: [[optimizer.param_groups]] ----------------------------------------- */

/* Python re's escapes that are ASCII letters, outside and inside [...]: to Python every other
 * letter is a "bad escape", where PCRE2 has meanings (\K \Q \p \h \z \e \g \R ...). */
static const char k_esc_out[] = "aAbBdDfnrsStvwWZ", k_esc_in[] = "abdDfnrsStvwW";

/* Refuses, into why, Python syntax titan's PCRE2 reading would not match alike. */
static int unlike(char *why, size_t n, const char *what, size_t at) {
    snprintf(why, n, "%s (at character %zu) is not read alike by Python's re and PCRE2", what, at);
    return -1;
}

/* A Python re pattern as PCRE2 (any version) reads it the same, into out (2 x strlen + 1
 * bytes); Python's rules where the two differ:
 * - `{`: a quantifier to Python only as {m}, {m,}, {,n}, {m,n}, {,} (digits, no spaces) and
 *   then written {m,n} with m's 0 spelled out; any other `{` is text, written `\{` (PCRE2 10.42
 *   reads {,n} as text, 10.43 reads {1, 2} as a quantifier);
 * - escapes: an ASCII letter Python does not know is its error, not PCRE2's meaning; \x takes
 *   two hex digits; \u, \U, \N (Python's character names) are refused (write the character);
 * - groups: (?#...) copied as it is; inline flags i, m, s only (x, verbose, refused; a global
 *   flag group only at the start, as Python 3.11 requires); PCRE2's own (?<name>, (?|, (?R,
 *   (?&, (?P>, (?C, (?1, (*VERB) refused;
 * - [...]: a POSIX class or collating element ([:name:], [.x.], [=x=]) refused (characters
 *   to Python).
 * The pattern is compiled in UTF mode with Unicode properties (PCRE2_UTF | PCRE2_UCP), as
 * Python's str patterns are. Returns 0, or -1 with why. */
static int python_re(const char *pat, char *out, char *why, size_t n) {
    int in_class = 0, class_start = 0;
    for (const char *p = pat; *p; p++) {
        const size_t at = (size_t)(p - pat);
        if (*p == '\\') {
            const char e = p[1];
            if (!e) return unlike(why, n, "a trailing backslash", at);
            if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) {
                if (e == 'x') {
                    const int h1 = p[2] && strchr("0123456789abcdefABCDEF", p[2]),
                              h2 = h1 && p[3] && strchr("0123456789abcdefABCDEF", p[3]);
                    if (!h2) return unlike(why, n, "\\x without two hex digits", at);
                } else if (!strchr(in_class ? k_esc_in : k_esc_out, e)) {
                    char what[64];
                    snprintf(what, sizeof what, "the escape \\%c%s", e,
                             strchr("uUN", e) ? " (write the character itself)" : "");
                    return unlike(why, n, what, at);
                }
            }
            *out++ = *p++;
            *out++ = *p;
            class_start = 0;
            continue;
        }
        if (in_class) {
            if (*p == '[' && (p[1] == ':' || p[1] == '.' || p[1] == '='))
                return unlike(why, n, "a POSIX class or collating element inside [...]", at);
            if (*p == ']' && !class_start) in_class = 0;
            class_start = 0;
            *out++ = *p;
            continue;
        }
        if (*p == '[') {
            in_class = class_start = 1;
            *out++ = *p;
            if (p[1] == '^') *out++ = *++p;
            continue;
        }
        if (*p == '(' && p[1] == '*') return unlike(why, n, "a PCRE2 verb (*...)", at);
        if (*p == '(' && p[1] == '?') {
            const char g = p[2];
            if (g == '#') { /* a comment: to the first ')', as both read it */
                const char *e = strchr(p, ')');
                if (!e) return unlike(why, n, "an unclosed (?#", at);
                memcpy(out, p, (size_t)(e - p + 1));
                out += e - p + 1;
                p = e;
                continue;
            }
            if (strchr("aiLmsux-", g) && g) {
                const char *f = p + 2;
                while (*f && strchr("aiLmsux-", *f)) f++;
                for (const char *q = p + 2; q < f; q++)
                    if (!strchr("ims-", *q)) {
                        char what[48];
                        snprintf(what, sizeof what, "the inline flag %c", *q);
                        return unlike(why, n, what, at);
                    }
                if (*f == ')' && at != 0)
                    return unlike(why, n, "a global flag group not at the start", at);
                if (*f == ')' && memchr(p + 2, '-', (size_t)(f - p - 2)))
                    return unlike(why, n,
                                  "a global flag group turning flags off (Python: (?-i:...))", at);
            } else if ((g == '<' && p[3] != '=' && p[3] != '!') || g == '|' || g == '\'' ||
                       g == 'R' || g == '&' || g == '+' || g == 'C' || (g >= '0' && g <= '9') ||
                       (g == 'P' && p[3] == '>')) {
                return unlike(why, n, "PCRE2's own group syntax", at);
            }
        }
        if (*p == '{') {
            const char *q = p + 1, *lo = q;
            while (*q >= '0' && *q <= '9') q++;
            const char *lo_end = q, *hi = NULL, *hi_end = NULL;
            if (*q == ',') {
                hi = ++q;
                while (*q >= '0' && *q <= '9') q++;
                hi_end = q;
            }
            if (*q == '}' && q != p + 1) { /* Python's quantifier: {m,n} with m spelled out */
                *out++ = '{';
                if (lo == lo_end) *out++ = '0';
                memcpy(out, lo, (size_t)(lo_end - lo));
                out += lo_end - lo;
                if (hi) {
                    *out++ = ',';
                    memcpy(out, hi, (size_t)(hi_end - hi));
                    out += hi_end - hi;
                }
                *out++ = '}';
                p = q;
                continue;
            }
            *out++ = '\\'; /* text to Python */
        }
        *out++ = *p;
    }
    *out = 0;
    return 0;
}

/* Compiles a group's pattern (Python re syntax, read by PCRE2 through python_re); *err names
 * the pattern and where it fails. */
static pcre2_code *compile(const char *pattern, base_err *err) {
    int ec;
    PCRE2_SIZE eo;
    char why[200];
    char *pcre = malloc(2 * strlen(pattern) + 1);
    if (!pcre) {
        base_fail(err, "out of memory");
        return NULL;
    }
    if (python_re(pattern, pcre, why, sizeof why)) {
        base_fail(err, "'%.200s': %s", pattern, why);
        free(pcre);
        return NULL;
    }
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pcre, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                                   &ec, &eo, NULL);
    free(pcre);
    if (!re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ec, msg, sizeof msg);
        base_fail(err, "'%.200s' is not a regular expression: %s (near character %zu)", pattern,
                  (const char *)msg, (size_t)eo);
    }
    return re;
}

/* A number in [0, hi) (hi 1: betas; INFINITY: finite): TOML's integers count as numbers. */
static int number(const base_toml_value *v, double hi, double *out, char *why, size_t n) {
    if (v->type != BASE_TOML_FLOAT && v->type != BASE_TOML_INT) {
        snprintf(why, n, "expected a number, got %s", base_toml_type_name(v->type));
        return -1;
    }
    const double x = v->type == BASE_TOML_INT ? (double)v->i : v->f;
    if (!(x >= 0 && x < hi)) {
        snprintf(why, n, "%g is out of range: torch.optim takes [0, %s)", x,
                 isinf(hi) ? "inf" : "1");
        return -1;
    }
    *out = x;
    return 0;
}

/* One key of optimizer_kwargs into g (set: a mask of those given, bit i = k_kwargs[i]). The
 * AdamW / Adam keys, then DistMuon's (torchtitan 0.3's); whether a key belongs to the group's
 * optimizer is checked once the entry's optimizer_name is read too (train_param_groups_load's
 * defaults pass). */
static const char *const k_kwargs[] = {
    "lr",       "betas",    "eps",      "weight_decay",    "fused",
    "foreach",  "amsgrad",  "maximize", "capturable",      "differentiable",
    "momentum", "nesterov", "ns_steps", "ns_coefficients", "adjust_lr_fn"};
enum {
    KW_LR,
    KW_BETAS,
    KW_EPS,
    KW_WD,
    KW_FUSED,
    KW_FOREACH,
    KW_MOMENTUM = 10,
    KW_NESTEROV,
    KW_NS_STEPS,
    KW_NS_COEF,
    KW_ADJUST
};
#define N_KW ((int)(sizeof k_kwargs / sizeof k_kwargs[0]))
/* the keys of AdamW / Adam (betas, the four torch flags) and of DistMuon alone */
#define KW_ADAM_ONLY (1u << KW_BETAS | 0xfu << 6)
#define KW_MUON_ONLY (0x1fu << KW_MOMENTUM)
static const char *const k_adjust[] = {"original", "match_rms_adamw", "spectral_unclamped"};

const char *train_muon_adjust_name(int adjust) {
    return k_adjust[adjust];
}

/* A number of any sign, finite (ns_coefficients). */
static int real(const base_toml_value *v, double *out, char *why, size_t n) {
    if (v->type != BASE_TOML_FLOAT && v->type != BASE_TOML_INT) {
        snprintf(why, n, "expected a number, got %s", base_toml_type_name(v->type));
        return -1;
    }
    *out = v->type == BASE_TOML_INT ? (double)v->i : v->f;
    if (isfinite(*out)) return 0;
    snprintf(why, n, "%g is not finite", *out);
    return -1;
}

static int kwarg(train_param_group *g, const base_toml_kv *kv, unsigned *set, char *why, size_t n) {
    int k = 0;
    while (k < N_KW && strcmp(kv->key, k_kwargs[k])) k++;
    if (k == N_KW) {
        snprintf(why, n,
                 "not a keyword argument of torch.optim.AdamW / Adam or torchtitan's DistMuon "
                 "that titan takes (AdamW / Adam: lr, betas, eps, weight_decay; DistMuon: lr, "
                 "weight_decay, momentum, nesterov, ns_coefficients, eps, ns_steps, adjust_lr_fn; "
                 "fused and foreach are accepted and change nothing)");
        return -1;
    }
    *set |= 1u << k;
    const base_toml_value *v = &kv->val;
    double x;
    switch (k) {
    case KW_MOMENTUM:
        return number(v, INFINITY, &g->c.momentum, why, n);
    case KW_NESTEROV:
        if (v->type != BASE_TOML_BOOL) {
            snprintf(why, n, "expected true or false, got %s", base_toml_type_name(v->type));
            return -1;
        }
        g->c.nesterov = (int)v->i;
        return 0;
    case KW_NS_STEPS: /* DistMuon's _validate_groups: an int in [0, 100) */
        if (v->type != BASE_TOML_INT || v->i < 0 || v->i >= 100) {
            snprintf(why, n, "expected an integer in [0, 100) (DistMuon's bound)");
            return -1;
        }
        g->c.ns_steps = (int)v->i;
        return 0;
    case KW_NS_COEF:
        if (v->type != BASE_TOML_ARRAY || v->n_items != 3) {
            snprintf(why, n, "expected three numbers, [a, b, c]");
            return -1;
        }
        for (int i = 0; i < 3; i++)
            if (real(&v->items[i], &x, why, n))
                return -1;
            else
                g->c.ns[i] = x;
        return 0;
    case KW_ADJUST:
        for (int i = 0; v->type == BASE_TOML_STRING && i < 3; i++)
            if (!strcmp(v->s, k_adjust[i])) {
                g->c.adjust = i;
                return 0;
            }
        snprintf(why, n,
                 "expected \"original\", \"match_rms_adamw\" or \"spectral_unclamped\" "
                 "(DistMuon's; leave it out for None, which is \"original\")");
        return -1;
    default:
        break;
    }
    switch (k) {
    case KW_LR:
        return number(v, INFINITY, &g->c.lr, why, n);
    case KW_EPS:
        return number(v, INFINITY, &g->c.eps, why, n);
    case KW_WD:
        return number(v, INFINITY, &g->c.weight_decay, why, n);
    case KW_BETAS:
        if (v->type != BASE_TOML_ARRAY || v->n_items != 2) {
            snprintf(why, n, "expected two numbers, [beta1, beta2]");
            return -1;
        }
        return number(&v->items[0], 1, &g->c.beta1, why, n) ||
               number(&v->items[1], 1, &g->c.beta2, why, n);
    default: /* booleans: fused / foreach choose torch's implementation; the rest change it */
        if (v->type != BASE_TOML_BOOL) {
            snprintf(why, n, "expected true or false, got %s", base_toml_type_name(v->type));
            return -1;
        }
        if (k == KW_FUSED) g->fused = (int)v->i;
        if (k == KW_FOREACH) g->foreach = (int)v->i;
        if (k > KW_FOREACH && v->i) {
            snprintf(why, n, "true is not implemented (titan's AdamW is torch's with false)");
            return -1;
        }
        return 0;
    }
}

int train_param_groups_replace(const field *f) {
    static const char *const keys[] = {"name", "lr", "beta1", "beta2", "eps", "weight_decay"};
    if (strcmp(f->section, "optimizer")) return 0;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (!strcmp(f->key, keys[i])) return 1;
    return 0;
}

void train_param_group_hyper(const train_param_group *g, char *buf, size_t n) {
    if (g->c.muon)
        snprintf(buf, n,
                 "lr %g, weight_decay %g, momentum %g, nesterov %s, ns_coefficients (%g, %g, %g), "
                 "eps %g, ns_steps %d, adjust_lr_fn %s",
                 g->c.lr, g->c.weight_decay, g->c.momentum, g->c.nesterov ? "True" : "False",
                 g->c.ns[0], g->c.ns[1], g->c.ns[2], g->c.eps, g->c.ns_steps,
                 k_adjust[g->c.adjust]);
    else
        snprintf(buf, n, "lr %g, betas (%g, %g), eps %g, weight_decay %g", g->c.lr, g->c.beta1,
                 g->c.beta2, g->c.eps, g->c.weight_decay);
}

/* The element's index from "optimizer.param_groups[3]..." and what follows it ("" for the
 * element itself); -1 for other names. */
static int element_of(const char *name, const char **rest) {
    const size_t n = strlen(PG);
    if (strncmp(name, PG, n) || name[n] != '[') return -1;
    char *end;
    const long i = strtol(name + n + 1, &end, 10);
    if (*end != ']' || i < 0 || i > 1 << 20) return -1;
    *rest = end + 1;
    return (int)i;
}

int train_param_groups_load(train_config *c, const base_toml_doc *doc, unsigned char *handled,
                            base_err *err) {
    int n = 0, container = -1;
    for (int t = 0; t < doc->n_tables; t++) {
        const char *rest;
        const int i = element_of(doc->tables[t].name, &rest);
        if (!strcmp(doc->tables[t].name, PG)) container = t;
        if (i >= 0 && !rest[0] && (n = i + 1) == TRAIN_MAX_PARAM_GROUPS + 1)
            return base_fail(err, "%s:%d:%d: [[" PG "]]: more than %d groups", c->file,
                             doc->tables[t].line, doc->tables[t].col, TRAIN_MAX_PARAM_GROUPS);
    }
    if (container >= 0) { /* only an array of tables' container: no keys, elements after it */
        const base_toml_table *tb = &doc->tables[container];
        if (tb->n_kv || !n)
            return base_fail(
                err,
                "%s:%d:%d: " PG " is an array of tables: one [[" PG "]] per group "
                "(then pattern, optimizer_name, optimizer_kwargs), not [" PG "] or dotted keys",
                c->file, tb->n_kv ? tb->kv[0].line : tb->line, tb->n_kv ? tb->kv[0].col : tb->col);
        handled[container] = 1;
    }
    if (!n) return 0;
    train_param_group *g = pool_keep(c, calloc((size_t)n, sizeof *g));
    unsigned *set = calloc((size_t)n, sizeof *set);
    if (!g || !set) {
        free(set);
        return base_fail(err, "out of memory");
    }
    for (int i = 0; i < n; i++) g[i].fused = g[i].foreach = -1;
    char why[400];
    int rc = 0;
    for (int t = 0; t < doc->n_tables && !rc; t++) {
        const base_toml_table *tb = &doc->tables[t];
        const char *rest;
        const int i = element_of(tb->name, &rest);
        if (i < 0) continue;
        handled[t] = 1;
        const int kw = !strcmp(rest, ".optimizer_kwargs");
        if (rest[0] && !kw) {
            rc = base_fail(err,
                           "%s:%d:%d: [%s]: a [[" PG "]] entry has pattern, optimizer_name and "
                           "optimizer_kwargs (a table), nothing else",
                           c->file, tb->line, tb->col, tb->name);
            break;
        }
        if (!rest[0]) {
            g[i].where = c->file;
            g[i].line = tb->line;
            g[i].col = tb->col;
        }
        for (int k = 0; k < tb->n_kv && !rc; k++) {
            const base_toml_kv *kv = &tb->kv[k];
            why[0] = 0;
            if (kw) {
                kwarg(&g[i], kv, &set[i], why, sizeof why);
            } else if (!strcmp(kv->key, "pattern") || !strcmp(kv->key, "optimizer_name")) {
                const int pat = kv->key[0] == 'p';
                if (kv->val.type != BASE_TOML_STRING) {
                    snprintf(why, sizeof why, "expected a string, got %s",
                             base_toml_type_name(kv->val.type));
                } else if (!pat && strcmp(kv->val.s, "AdamW") && strcmp(kv->val.s, "Adam") &&
                           strcmp(kv->val.s, "DistMuon")) {
                    snprintf(why, sizeof why,
                             "'%.100s' is not an optimizer torchtitan 0.3 builds (AdamW, Adam, "
                             "DistMuon)",
                             kv->val.s);
                } else {
                    char *s = pool_keep(c, strdup(kv->val.s));
                    if (!s) {
                        rc = base_fail(err, "out of memory");
                        break;
                    }
                    *(pat ? &g[i].pattern : &g[i].optimizer_name) = s;
                    base_err re_err;
                    pcre2_code *re = pat ? compile(s, &re_err) : NULL;
                    if (pat && !re) snprintf(why, sizeof why, "%.390s", re_err.msg);
                    pcre2_code_free(re);
                }
            } else if (!strcmp(kv->key, "optimizer_kwargs")) {
                snprintf(why, sizeof why,
                         "expected a table, got %s: optimizer_kwargs = {lr = ..., betas = [..., "
                         "...], eps = ..., weight_decay = ...}",
                         base_toml_type_name(kv->val.type));
            } else {
                snprintf(why, sizeof why,
                         "unknown key (a [[" PG "]] entry has pattern, optimizer_name and "
                         "optimizer_kwargs = {lr = ..., betas = [..., ...], eps = ..., "
                         "weight_decay = ...})");
            }
            if (why[0])
                rc = base_fail(err, "%s:%d:%d: " PG "[%d]%s.%s: %s", c->file, kv->line, kv->col, i,
                               kw ? ".optimizer_kwargs" : "", kv->key, why);
        }
    }
    /* torch.optim's defaults where not given; what is required */
    for (int i = 0; i < n && !rc; i++) {
        const char *miss = !g[i].where               ? "is missing (a gap in the array?)"
                           : !g[i].pattern           ? "has no pattern"
                           : !g[i].optimizer_name    ? "has no optimizer_name"
                           : !(set[i] & 1u << KW_LR) ? "has no optimizer_kwargs.lr (torchtitan: "
                                                       "\"Must include all required kwargs (e.g. "
                                                       "lr)\")"
                                                     : NULL;
        if (miss) {
            rc = base_fail(err, "%s:%d:%d: " PG "[%d] %s", c->file, g[i].line, g[i].col, i, miss);
            break;
        }
        const int adam = !strcmp(g[i].optimizer_name, "Adam"),
                  muon = !strcmp(g[i].optimizer_name, "DistMuon");
        const unsigned wrong = set[i] & (muon ? KW_ADAM_ONLY : KW_MUON_ONLY);
        if (wrong) {
            int k = 0;
            while (!(wrong & 1u << k)) k++;
            rc = base_fail(err,
                           "%s:%d:%d: " PG "[%d].optimizer_kwargs.%s: not a keyword argument of "
                           "%s (%s)",
                           c->file, g[i].line, g[i].col, i, k_kwargs[k], g[i].optimizer_name,
                           muon ? "DistMuon takes lr, weight_decay, momentum, nesterov, "
                                  "ns_coefficients, eps, ns_steps, adjust_lr_fn"
                                : "momentum, nesterov, ns_steps, ns_coefficients and "
                                  "adjust_lr_fn are DistMuon's");
            break;
        }
        if (!(set[i] & 1u << KW_BETAS)) g[i].c.beta1 = 0.9, g[i].c.beta2 = 0.999;
        /* torch.optim's defaults, DistMuon's for its groups */
        if (!(set[i] & 1u << KW_EPS)) g[i].c.eps = muon ? 1e-7 : 1e-8;
        if (!(set[i] & 1u << KW_WD)) g[i].c.weight_decay = muon ? 0.1 : adam ? 0.0 : 0.01;
        g[i].c.adam = adam;
        g[i].c.muon = muon;
        if (muon && !(set[i] & 1u << KW_MOMENTUM)) g[i].c.momentum = 0.95;
        if (muon && !(set[i] & 1u << KW_NESTEROV)) g[i].c.nesterov = 1;
        if (muon && !(set[i] & 1u << KW_NS_STEPS)) g[i].c.ns_steps = 5;
        if (muon && !(set[i] & 1u << KW_NS_COEF))
            g[i].c.ns[0] = 3.4445, g[i].c.ns[1] = -4.7750, g[i].c.ns[2] = 2.0315;
    }
    free(set);
    if (!rc) {
        c->optimizer.param_groups = g;
        c->optimizer.n_param_groups = n;
    }
    return rc;
}

/* ---- the groups over the model and this rank's shard ---------------------------------- */

/* train_param_groups_assign's matching; strict 0: a pattern that finds no name is no error
 * (group_of -1 where none finds a name, never an error). */
static int match_groups(const train_param_group *g, int n, const char *const *names, int n_names,
                        int *group_of, int64_t *counts, int strict, base_err *err) {
    for (int p = 0; p < n_names; p++) group_of[p] = -1;
    int rc = 0;
    for (int k = 0; k < n && !rc; k++) {
        pcre2_code *re = compile(g[k].pattern, err);
        pcre2_match_data *md = re ? pcre2_match_data_create_from_pattern(re, NULL) : NULL;
        if (!md) {
            pcre2_code_free(re);
            return re ? base_fail(err, "out of memory") : -1;
        }
        counts[k] = 0;
        for (int p = 0; p < n_names && !rc; p++) {
            if (group_of[p] >= 0) continue;
            const int m = pcre2_match(re, (PCRE2_SPTR)names[p], strlen(names[p]), 0, 0, md, NULL);
            if (m == PCRE2_ERROR_NOMATCH) continue;
            if (m < 0) { /* a match limit (runaway backtracking): no answer is not "no" */
                PCRE2_UCHAR msg[160];
                pcre2_get_error_message(m, msg, sizeof msg);
                rc = base_fail(err, "%s:%d:%d: optimizer param_groups pattern '%s' on %s: %s",
                               g[k].where, g[k].line, g[k].col, g[k].pattern, names[p],
                               (const char *)msg);
                break;
            }
            group_of[p] = k;
            counts[k]++;
        }
        if (rc) {
            pcre2_match_data_free(md);
            pcre2_code_free(re);
            break;
        }
        if (!counts[k] && strict) /* torchtitan's ValueError */
            rc = base_fail(err,
                           "%s:%d:%d: optimizer param_groups pattern '%s' matched no parameters "
                           "(of those earlier patterns left; patterns see torchtitan 0.3's "
                           "names: tok_embeddings.weight, layers.0.attention.qkv_linear.wqkv."
                           "weight, layers.0.attention.wo.weight, layers.0.feed_forward.w1."
                           "weight, layers.0.moe.router.gate.weight, layers.0.moe."
                           "routed_experts.inner_experts.w1_EFD, norm.weight, lm_head.weight, "
                           "...)",
                           g[k].where, g[k].line, g[k].col, g[k].pattern);
        pcre2_match_data_free(md);
        pcre2_code_free(re);
    }
    return rc;
}

int train_param_groups_assign(const train_param_group *g, int n, const char *const *names,
                              int n_names, int *group_of, int64_t *counts, base_err *err) {
    int rc = match_groups(g, n, names, n_names, group_of, counts, 1, err);
    for (int p = 0; p < n_names && !rc; p++)
        if (group_of[p] < 0) /* torchtitan asserts every trainable parameter has an optimizer */
            rc = base_fail(err,
                           "%s: [[optimizer.param_groups]]: no pattern matches parameter %s: "
                           "every parameter needs a group (end with a catch-all pattern such as "
                           "'.*')",
                           g[0].where, names[p]);
    return rc;
}

/* torchtitan 0.3's parameters for titan's names[n] (model_param_name_03): the distinct 0.3
 * names u[nu] in first-occurrence order and each titan parameter's index idx[n] among them. */
typedef struct {
    char **u;
    int nu, *idx;
} names03;

static void names03_free(names03 *v) {
    for (int i = 0; i < v->nu; i++) free(v->u[i]);
    free(v->u);
    free(v->idx);
}

static int names03_init(names03 *v, const char *const *names, int n) {
    *v = (names03){malloc(sizeof *v->u * (size_t)(n ? n : 1)), 0,
                   malloc(sizeof *v->idx * (size_t)(n ? n : 1))};
    if (!v->u || !v->idx) return -1;
    for (int i = 0; i < n; i++) {
        char b[sizeof((model_param *)0)->name + 64];
        model_param_name_03(names[i], b, sizeof b);
        int j = v->nu; /* a fused tensor's parts are neighbours: look back from the last */
        while (j > 0 && strcmp(v->u[j - 1], b)) j--;
        if (j == 0 || strcmp(v->u[j - 1], b)) {
            if (!(v->u[v->nu] = strdup(b))) return -1;
            j = ++v->nu;
        }
        v->idx[i] = j - 1;
    }
    return 0;
}

/* Each of titan's parameters names[n]'s group (group_of[n]) as torchtitan 0.3 groups them: the
 * patterns see 0.3's names (train_param_groups_assign over them; counts[k]: the 0.3
 * parameters group k took, as its log counts them). warn: say where a pattern finds a
 * parameter's titan (v0.2.2) name and not its 0.3 name (a pattern written for the old names:
 * `output`, `\.wq\.`, `experts\.w1`), and would so have taken it before the group 0.3's name
 * falls in. */
static int assign03(const train_opts *o, const char *const *names, int n, int *group_of,
                    int64_t *counts, int warn, base_err *err) {
    names03 v;
    int *gu = NULL, *old = NULL;
    int64_t oc[TRAIN_MAX_PARAM_GROUPS];
    int rc = names03_init(&v, names, n) || !(gu = malloc(sizeof *gu * (size_t)(v.nu ? v.nu : 1)))
                 ? base_fail(err, "out of memory")
                 : train_param_groups_assign(o->param_groups, o->n_param_groups,
                                             (const char *const *)v.u, v.nu, gu, counts, err);
    for (int i = 0; i < n && !rc; i++) group_of[i] = gu[v.idx[i]];
    if (!rc && warn && !(old = malloc(sizeof *old * (size_t)(n ? n : 1))))
        rc = base_fail(err, "out of memory");
    if (!rc && warn)
        rc = match_groups(o->param_groups, o->n_param_groups, names, n, old, oc, 0, err);
    int said = 0, more = 0;
    for (int i = 0; i < n && !rc && warn; i++) {
        const int k = old[i], now = group_of[i];
        /* a part of a fused 0.3 tensor whose own name no pattern before `now` finds, while a
         * sibling part's name is found by now's: regrouped with it (`\.wq` takes wk, wv) */
        int sib = -1;
        for (int j = 0; j < n && k != now && sib < 0; j++)
            if (j != i && v.idx[j] == v.idx[i] && old[j] == now) sib = j;
        const int renamed = k >= 0 && k < now && strcmp(names[i], v.u[v.idx[i]]);
        if (!renamed && sib < 0) continue;
        if (said == 3) {
            more++;
            continue;
        }
        said++;
        if (renamed)
            base_log(BASE_LOG_WARN,
                     "[[optimizer.param_groups]]: group %d's pattern '%s' finds %s (titan's and "
                     "torchtitan v0.2.2's name) but not %s, torchtitan 0.3's name of it, which "
                     "patterns are matched against (as 0.3's param_groups are): it steps with "
                     "group %d ('%s')",
                     k, o->param_groups[k].pattern, names[i], v.u[v.idx[i]], now,
                     o->param_groups[now].pattern);
        else
            base_log(BASE_LOG_WARN,
                     "[[optimizer.param_groups]]: group %d's pattern '%s' finds titan's %s, which "
                     "torchtitan 0.3 holds in one tensor with %s (%s), matched as one (as 0.3's "
                     "param_groups are): %s steps with group %d too",
                     now, o->param_groups[now].pattern, names[sib], names[i], v.u[v.idx[i]],
                     names[i], now);
    }
    if (more)
        base_log(BASE_LOG_WARN, "[[optimizer.param_groups]]: and %d more parameters alike", more);
    free(old);
    free(gu);
    names03_free(&v);
    return rc;
}

/* model_param_names' callback: appends to a growing list (oom once out of memory). */
typedef struct {
    const char **v;
    char **own;
    int64_t *numel;
    int n, cap, oom;
} name_list;

static void add_name(void *ctx, const char *name, int64_t numel) {
    name_list *l = ctx;
    if (l->oom) return;
    if (l->n == l->cap) {
        const int cap = l->cap ? l->cap * 2 : 64;
        char **own = realloc(l->own, sizeof *own * (size_t)cap);
        if (own) l->own = own;
        const char **v = own ? realloc(l->v, sizeof *v * (size_t)cap) : NULL;
        if (v) l->v = v;
        int64_t *ne = v ? realloc(l->numel, sizeof *ne * (size_t)cap) : NULL;
        if (!ne) {
            l->oom = 1;
            return;
        }
        l->numel = ne;
        l->cap = cap;
    }
    if (!(l->own[l->n] = strdup(name))) {
        l->oom = 1;
        return;
    }
    l->v[l->n] = l->own[l->n];
    l->numel[l->n++] = numel;
}

/* Each of o->model's parameters' group (as train_param_groups_assign), and f NULL or where to
 * print the groups: their parameters and elements (the whole model's), and hyperparameters. */
static int groups_of_model(const train_opts *o, FILE *f, base_err *err) {
    if (!o->n_param_groups) return 0;
    name_list l = {0};
    model_param_names(&o->model, add_name, &l);
    int *group_of = malloc(sizeof *group_of * (size_t)(l.n ? l.n : 1));
    int64_t counts[TRAIN_MAX_PARAM_GROUPS], elems[TRAIN_MAX_PARAM_GROUPS] = {0}, total = 0;
    const int rc = l.oom || !group_of ? base_fail(err, "out of memory")
                                      : assign03(o, l.v, l.n, group_of, counts, 1, err);
    for (int i = 0; i < l.n && !rc; i++) {
        elems[group_of[i]] += l.numel[i];
        total += l.numel[i];
    }
    if (!rc && f) {
        fprintf(f, "optimizer parameter groups ([[optimizer.param_groups]], first match wins)\n");
        for (int k = 0; k < o->n_param_groups; k++) {
            const train_param_group *g = &o->param_groups[k];
            char hyper[320];
            train_param_group_hyper(g, hyper, sizeof hyper);
            fprintf(f, "  %d %-5s [%s]: %lld parameters, %lld elements (%.1f%%); %s\n", k,
                    g->optimizer_name, g->pattern, (long long)counts[k], (long long)elems[k],
                    total ? 100.0 * (double)elems[k] / (double)total : 0.0, hyper);
        }
    }
    for (int i = 0; i < l.n; i++) free(l.own[i]);
    free(l.own);
    free(l.v);
    free(l.numel);
    free(group_of);
    return rc;
}

int train_param_groups_check(const train_opts *o, base_err *err) {
    return groups_of_model(o, NULL, err);
}

int train_param_groups_print(const train_opts *o, FILE *f, base_err *err) {
    return groups_of_model(o, f, err);
}

int train_param_groups_mesh_check(const train_opts *o, int dp_shard, int tp, base_err *err) {
    for (int k = 0; k < o->n_param_groups && (dp_shard > 1 || tp > 1); k++) {
        const train_param_group *g = &o->param_groups[k];
        if (g->c.muon)
            return base_fail(err,
                             "%s:%d:%d: [[optimizer.param_groups]] %d (DistMuon) with "
                             "data_parallel_shard_degree %d and tensor_parallel_degree %d: "
                             "titan's DistMuon orthogonalises whole matrices on each rank and "
                             "does not yet gather FSDP shards or TP slices (torchtitan "
                             "redistributes them), so it needs both 1 "
                             "(data_parallel_replicate_degree may be larger)",
                             g->where, g->line, g->col, k, dp_shard, tp);
    }
    return 0;
}

/* A DistMuon group's parameter q (its shard elements [slo, shi)) as a span of whole matrices
 * [rows, cols] (mats of them: an expert stack's experts, as 0.3's per-expert compute layout),
 * or its rows appended to the span before it where 0.3 holds both in one tensor (wq, wk, wv:
 * one qkv_linear.wqkv matrix, prev03 the last Muon parameter's 0.3 name). Refused: a parameter
 * not 2D or 3D (DistMuon's error), and one this rank holds in part (FSDP's shards, TP's
 * slices): Newton-Schulz needs the whole matrix. */
static int muon_span(const train_opts *o, const model *m, const dist_fsdp *f, const model_param *q,
                     int group, const optim_adamw_cfg *c, size_t slo, size_t shi, char *prev03,
                     size_t n03, optim_span *s, int *n, base_err *err) {
    char n03_[sizeof q->name + 64];
    model_param_name_03(q->name, n03_, sizeof n03_);
    const train_param_group *g = &o->param_groups[group];
    if (q->ndim != 2 && q->ndim != 3)
        return base_fail(err,
                         "%s:%d:%d: [[optimizer.param_groups]] %d (DistMuon, '%s') takes %s, "
                         "whose shape has %d dimensions: a Muon parameter must be 2D or "
                         "batch-first 3D (torchtitan's DistMuon refuses it too); give it to "
                         "an earlier AdamW group",
                         g->where, g->line, g->col, group, g->pattern, n03_, q->ndim);
    if (dist_fsdp_shard_params(f) != m->w || shi - slo != q->numel ||
        q->tp_split == MODEL_TP_ROWS || q->tp_split == MODEL_TP_COLS)
        return base_fail(
            err,
            "[[optimizer.param_groups]] %d (DistMuon): %s is not whole on each "
            "rank (%s): titan's DistMuon orthogonalises whole matrices on each rank and "
            "does not yet gather them (torchtitan redistributes them), so it needs "
            "data_parallel_shard_degree = 1 and tensor_parallel_degree = 1 "
            "(data_parallel_replicate_degree may be larger)",
            group, n03_,
            q->tp_split == MODEL_TP_ROWS || q->tp_split == MODEL_TP_COLS
                ? "tensor parallelism slices it"
                : "FSDP shards it");
    const int rows = (int)q->shape[q->ndim - 2], cols = (int)q->shape[q->ndim - 1],
              mats = q->ndim == 3 ? (int)q->shape[0] : 1;
    optim_span *last = *n ? &s[*n - 1] : NULL;
    if (last && last->c == c && !strcmp(prev03, n03_) && mats == 1 && last->mats == 1 &&
        last->cols == cols && last->hi == slo) { /* wk after wq, wv after wk: one matrix */
        last->rows += rows;
        last->hi = shi;
        return 0;
    }
    snprintf(prev03, n03, "%s", n03_);
    s[(*n)++] = (optim_span){slo, shi, c, slo, rows, cols, mats};
    return 0;
}

int train_optim_spans(const train_opts *o, const model *m, const dist_fsdp *f, optim_span **out,
                      int *n_out, int64_t *counts, base_err *err) {
    *out = NULL;
    *n_out = 0;
    const size_t ns = dist_fsdp_shard_len(f);
    if (!o->n_param_groups) {
        optim_span *s = malloc(sizeof *s);
        if (!s) return base_fail(err, "out of memory");
        *s = (optim_span){0, ns, &o->adamw, 0, 0, 0, 0};
        *out = s;
        *n_out = 1;
        return 0;
    }
    int *group_of = malloc(sizeof *group_of * (size_t)(m->n_params ? m->n_params : 1));
    const char **names = malloc(sizeof *names * (size_t)(m->n_params ? m->n_params : 1));
    int64_t *mine = counts ? NULL : malloc(sizeof *mine * (size_t)o->n_param_groups);
    if (!counts) counts = mine;
    int nr;
    const dist_range *r = dist_fsdp_ranges(f, &nr);
    /* at most one span a parameter piece, plus the padding */
    const size_t cap = (size_t)m->n_params * (size_t)(nr + 1) + 1;
    optim_span *s = malloc(sizeof *s * cap);
    int rc = !group_of || !names || !counts || !s ? base_fail(err, "out of memory") : 0;
    for (int p = 0; p < m->n_params && !rc; p++) names[p] = m->params[p].name;
    if (!rc) rc = assign03(o, names, m->n_params, group_of, counts, 0, err);
    free(names);
    if (rc) {
        free(group_of);
        free(mine);
        free(s);
        return -1;
    }
    /* each range of the shard vector (shard_off, global_off = the model's offset, len) over
     * the parameters it holds; m->params is in offset order (model.h) */
    int n = 0;
    char prev03[sizeof m->params[0].name + 64] = "";
    for (int k = 0; k < nr && !rc; k++) {
        const size_t g0 = r[k].global_off, g1 = g0 + r[k].len;
        for (int p = 0; p < m->n_params && !rc; p++) {
            const model_param *q = &m->params[p];
            const size_t lo = q->offset > g0 ? q->offset : g0,
                         hi = q->offset + q->numel < g1 ? q->offset + q->numel : g1;
            if (lo >= hi) continue;
            const optim_adamw_cfg *c = &o->param_groups[group_of[p]].c;
            const size_t slo = r[k].shard_off + (lo - g0), shi = slo + (hi - lo);
            if (c->muon) {
                rc = muon_span(o, m, f, q, group_of[p], c, slo, shi, prev03, sizeof prev03, s, &n,
                               err);
                continue;
            }
            if (n && s[n - 1].c == c && s[n - 1].hi == slo)
                s[n - 1].hi = shi;
            else
                s[n++] = (optim_span){slo, shi, c, 0, 0, 0, 0};
        }
    }
    if (rc) {
        free(group_of);
        free(mine);
        free(s);
        return -1;
    }
    /* the shard vector's padding (elements no parameter holds: zero weights and gradients,
     * which AdamW leaves zero whatever its hyperparameters) joins the span before it */
    int ok = 1;
    for (int k = 1; k < n; k++) ok &= s[k].lo >= s[k - 1].hi;
    for (int k = 0; k + 1 < n && ok; k++) s[k].hi = s[k + 1].lo;
    if (n) {
        s[0].lo = 0;
        s[n - 1].hi = ns;
    } else {
        s[n++] = (optim_span){0, ns, &o->param_groups[0].c, 0, 0, 0, 0};
    }
    free(group_of);
    free(mine);
    if (!ok) {
        free(s);
        return base_fail(err, "internal error: the shard vector's ranges are not in order");
    }
    *out = s;
    *n_out = n;
    return 0;
}
