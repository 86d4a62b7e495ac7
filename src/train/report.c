/* train: the report page (internal.h, "The report page"). One self-contained HTML file (inline
 * CSS and SVG, no script, nothing fetched) drawn from a run's metrics.jsonl records and facts:
 * rewritten by rank 0 at every logged step of a run, and by `titan report` afterwards, which
 * also overlays several runs. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "train/internal.h"

/* The figures a page plots, one per metrics.jsonl key (R_MOE is derived: the largest over MoE
 * blocks of max / mean tokens per expert, 1 = balanced). tps and MFU are the logging window's
 * (console) figures, present on logged steps only. */
enum { R_LOSS, R_VAL, R_LR, R_GNORM, R_TPS, R_MFU, R_MEM, R_MEM_ACTIVE, R_MOE, R_NF };

static const struct {
    const char *key;   /* metrics.jsonl key (R_MOE: the page's own name) */
    const char *label; /* legend */
    const char *color; /* single-run colour */
    const char *fmt;   /* the printed last value */
    int dots;          /* sparse series: a marker per point */
} g_field[R_NF] = {
    {"loss", "training loss", "#ee4c2c", "%.4f", 0},
    {"val_loss", "validation loss", "#2563eb", "%.4f", 1},
    {"lr", "learning rate", "#7c3aed", "%.3e", 0},
    {"grad_norm", "grad norm", "#0891b2", "%.4f", 0},
    {"window_tps", "tokens/s per rank", "#059669", "%.1f", 1},
    {"window_mfu", "MFU %", "#d97706", "%.2f", 1},
    {"memory_gib", "peak RSS (GiB)", "#db2777", "%.3f", 0},
    {"memory_active_gib", "max active (GiB)", "#64748b", "%.3f", 1},
    {"moe_imbalance", "max / mean tokens per expert", "#9333ea", "%.3f", 0},
};

/* The charts, in page order; one with no data in any run is left out. */
static const struct {
    const char *title;
    int fields[2], nf, wide;
} g_chart[] = {
    {"Loss", {R_LOSS, R_VAL}, 2, 1},
    {"Learning rate", {R_LR}, 1, 0},
    {"Gradient norm (before clipping)", {R_GNORM}, 1, 0},
    {"Throughput (tokens/s per rank)", {R_TPS}, 1, 0},
    {"MFU (%)", {R_MFU}, 1, 0},
    {"Memory (GiB)", {R_MEM, R_MEM_ACTIVE}, 2, 0},
    {"MoE expert-load imbalance", {R_MOE}, 1, 0},
};
#define N_CHARTS ((int)(sizeof g_chart / sizeof g_chart[0]))

/* Runs overlaid on one page take these colours, in order. */
static const char *const g_run_color[] = {"#ee4c2c", "#2563eb", "#059669", "#d97706",
                                          "#7c3aed", "#0891b2", "#db2777", "#65a30d"};
#define N_RUN_COLORS ((int)(sizeof g_run_color / sizeof g_run_color[0]))

#define REPORT_MAX_LINE (1 << 20)     /* bytes per metrics.jsonl line */
#define REPORT_MAX_RECORDS 100000000L /* lines per file */
#define REPORT_MAX_POINTS 4000        /* per polyline: longer series their buckets' extremes */
#define REPORT_MAX_RUNS 64            /* runs on one page */

typedef struct {
    int64_t step;
    int64_t resumed_from; /* "resumed_from": the step this line's run resumed after; -1 */
    double v[R_NF];       /* NAN where the line has no such figure */
} report_rec;

#define REPORT_MAX_SOURCES 64 /* a dataset mixture's sources (DATA_MIX_MAX) */

struct train_report_run {
    char *name;
    report_rec *rec;
    size_t n, cap;
    json_t *facts; /* [[label, text], ...], or NULL */
    /* a dataset mixture: the windows each source gave, of the last line that says them */
    int64_t src_windows[REPORT_MAX_SOURCES];
    int n_src;
    int64_t src_step;
};

static const char *g_version = "unknown";

void train_report_set_version(const char *version) {
    g_version = version;
}

int train_report_run_new(train_report_run **out, const char *name, base_err *err) {
    char cwd[512]; /* "." says little on a page: the folder's name instead */
    if (!strcmp(name, ".") && getcwd(cwd, sizeof cwd)) name = cwd;
    *out = calloc(1, sizeof **out);
    if (!*out || !((*out)->name = strdup(name))) {
        free(*out);
        *out = NULL;
        return base_fail(err, "out of memory");
    }
    return 0;
}

void train_report_run_free(train_report_run *r) {
    if (!r) return;
    free(r->name);
    free(r->rec);
    json_decref(r->facts);
    free(r);
}

void train_report_run_clear(train_report_run *r) {
    r->n = 0;
    r->n_src = 0;
}

/* "data_source_windows" (a dataset mixture's windows per source) into r when the line has it. */
static int rec_sources(train_report_run *r, const json_t *o, int64_t step, const char *where,
                       base_err *err) {
    const json_t *a = json_object_get(o, "data_source_windows");
    if (!a) return 0;
    int ok =
        json_is_array(a) && json_array_size(a) >= 1 && json_array_size(a) <= REPORT_MAX_SOURCES;
    for (size_t i = 0; ok && i < json_array_size(a); i++) {
        const json_t *x = json_array_get(a, i);
        ok = json_is_integer(x) && json_integer_value(x) >= 0;
    }
    if (!ok)
        return base_fail(err,
                         "%s: \"data_source_windows\" must be an array of 1 to %d integers >= 0",
                         where, REPORT_MAX_SOURCES);
    r->n_src = (int)json_array_size(a);
    for (int i = 0; i < r->n_src; i++)
        r->src_windows[i] = json_integer_value(json_array_get(a, (size_t)i));
    r->src_step = step;
    return 0;
}

/* The line's number at key into *v (NAN when absent); a present non-number fails. */
static int rec_number(const json_t *o, const char *key, double *v, const char *where,
                      base_err *err) {
    const json_t *x = json_object_get(o, key);
    *v = NAN;
    if (!x) return 0;
    if (!json_is_number(x)) return base_fail(err, "%s: \"%s\" is not a number", where, key);
    *v = json_number_value(x);
    return 0;
}

/* The largest max / mean over blocks of the tokens-per-expert arrays (NAN without them). */
static int rec_moe(const json_t *o, double *v, const char *where, base_err *err) {
    const json_t *mx = json_object_get(o, "tokens_per_expert_max");
    const json_t *mean = json_object_get(o, "tokens_per_expert_mean");
    *v = NAN;
    if (!mx && !mean) return 0;
    if (!json_is_array(mx) || !json_is_array(mean) || json_array_size(mx) != json_array_size(mean))
        return base_fail(err,
                         "%s: \"tokens_per_expert_max\" and \"tokens_per_expert_mean\" must be "
                         "arrays of one length",
                         where);
    for (size_t i = 0; i < json_array_size(mx); i++) {
        const json_t *a = json_array_get(mx, i), *b = json_array_get(mean, i);
        if (!json_is_number(a) || !json_is_number(b))
            return base_fail(err, "%s: tokens_per_expert item %zu is not a number", where, i);
        const double m = json_number_value(b), r = json_number_value(a) / m;
        if (m > 0 && isfinite(r) && (isnan(*v) || r > *v)) *v = r; /* dense blocks: no tokens */
    }
    return 0;
}

int train_report_add_line(train_report_run *r, const char *line, size_t len, const char *where,
                          base_err *err) {
    json_error_t je;
    json_t *o = json_loadb(line, len, JSON_REJECT_DUPLICATES, &je);
    if (!o) return base_fail(err, "%s: not JSON: %s", where, je.text);
    int rc = 0;
    report_rec rec = {.resumed_from = -1};
    const json_t *st = json_object_get(o, "step"), *res = json_object_get(o, "resumed_from");
    if (!json_is_object(o))
        rc = base_fail(err, "%s: not a JSON object", where);
    else if (!json_is_integer(st) || json_integer_value(st) < 1 ||
             json_integer_value(st) > INT32_MAX)
        rc = base_fail(err, "%s: \"step\" must be an integer from 1 to %d", where, INT32_MAX);
    else if (r->n && json_integer_value(st) <= r->rec[r->n - 1].step)
        rc = base_fail(err, "%s: step %lld after step %lld (steps must increase)", where,
                       (long long)json_integer_value(st), (long long)r->rec[r->n - 1].step);
    else if (res && (!json_is_integer(res) || json_integer_value(res) < 0 ||
                     json_integer_value(res) >= json_integer_value(st)))
        rc = base_fail(err, "%s: \"resumed_from\" must be an integer below the step", where);
    else if (r->n >= (size_t)REPORT_MAX_RECORDS)
        rc = base_fail(err, "%s: more than %ld lines", where, REPORT_MAX_RECORDS);
    if (!rc) {
        rec.step = json_integer_value(st);
        if (res) rec.resumed_from = json_integer_value(res);
        for (int f = 0; f < R_NF && !rc; f++)
            rc = f == R_MOE ? rec_moe(o, &rec.v[f], where, err)
                            : rec_number(o, g_field[f].key, &rec.v[f], where, err);
        if (!rc) rc = rec_sources(r, o, rec.step, where, err);
    }
    json_decref(o);
    if (rc) return -1;
    if (r->n == r->cap) {
        const size_t cap = r->cap ? 2 * r->cap : 256;
        report_rec *p = realloc(r->rec, cap * sizeof *p);
        if (!p) return base_fail(err, "out of memory");
        r->rec = p;
        r->cap = cap;
    }
    r->rec[r->n++] = rec;
    return 0;
}

int train_report_read_jsonl(train_report_run *r, const char *path, base_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return base_fail(err, "%s: cannot open: %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    long no = 0;
    int rc = 0;
    while (!rc && (len = getline(&line, &cap, f)) > 0) {
        char where[4200];
        snprintf(where, sizeof where, "%s:%ld", path, ++no);
        if (len > REPORT_MAX_LINE) {
            rc = base_fail(err, "%s: a line of more than %d bytes", where, REPORT_MAX_LINE);
        } else if (line[len - 1] != '\n') { /* a run writing it, or one killed mid-line */
            base_err e;
            if (train_report_add_line(r, line, (size_t)len, where, &e))
                base_log(BASE_LOG_WARN, "%s: an unfinished last line, left out", where);
        } else if (len > 1) { /* blank lines are nothing */
            rc = train_report_add_line(r, line, (size_t)len - 1, where, err);
        }
    }
    if (!rc && ferror(f)) rc = base_fail(err, "%s: cannot read: %s", path, strerror(errno));
    free(line);
    fclose(f);
    return rc;
}

/* ---- facts ------------------------------------------------------------------------------ */

static void fact(json_t *facts, const char *label, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void fact(json_t *facts, const char *label, const char *fmt, ...) {
    char text[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    json_array_append_new(facts, json_pack("[ss]", label, text));
}

/* The facts file of a page: PAGE with its extension replaced by ".facts.json". */
static char *facts_path(const char *page) {
    const char *dot = strrchr(page, '.'), *slash = strrchr(page, '/');
    const size_t stem = dot && (!slash || dot > slash) ? (size_t)(dot - page) : strlen(page);
    char *p = malloc(stem + 12);
    if (p) snprintf(p, stem + 12, "%.*s.facts.json", (int)stem, page);
    return p;
}

int train_report_facts(train_report_run *r, const char *page, const train_opts *o, const model *m,
                       const train_source *src, const dist_mesh *mesh, double peak_flops,
                       base_err *err) {
    if (!r) return 0;
    json_t *f = json_array();
    if (!f) return base_fail(err, "out of memory");
    model_counts cnt;
    model_count_params(&o->model, &cnt);
    const model_args *a = &o->model;
    char moe[160] = "";
    if (a->n_experts > 0)
        snprintf(moe, sizeof moe, ", %d experts (top %d, %.2fM active)", a->n_experts, a->top_k,
                 cnt.active / 1e6);
    fact(f, "model",
         "qwen3 %s: %.2fM parameters (%d layers, dim %d, %d/%d heads x %d, ffn %d, vocab %d, %s "
         "embeddings%s)",
         a->flavor, cnt.total / 1e6, a->n_layers, a->dim, a->n_heads, a->n_kv_heads, a->head_dim,
         a->ffn_dim, a->vocab_size, a->tie_embeddings ? "tied" : "untied", moe);
    char desc[1200];
    train_source_describe(src, o, desc, sizeof desc);
    fact(f, "data", "%s", desc);
    if (o->val.path)
        fact(f, "validation", "%s, every %d steps (%d x %d tokens)", o->val.path, o->val.freq,
             o->val.batch, o->val.seq_len);
    fact(f, "tokens per step", "%lld = %d x %d tokens x %d microbatches x %d data-parallel ranks",
         (long long)o->batch * o->seq_len * o->grad_accum * mesh->dp_size, o->batch, o->seq_len,
         o->grad_accum, mesh->dp_size);
    if (!o->n_param_groups)
        fact(f, "steps", "%d (lr %.3g, warmup %lld, %s weight decay %.3g, max norm %.3g)", o->steps,
             o->adamw.lr, (long long)o->lr.warmup_steps, o->adamw.adam ? "Adam (L2)" : "AdamW",
             o->adamw.weight_decay, o->max_norm);
    else
        fact(f, "steps", "%d (warmup %lld, max norm %.3g; %d parameter groups)", o->steps,
             (long long)o->lr.warmup_steps, o->max_norm, o->n_param_groups);
    for (int k = 0; k < o->n_param_groups; k++) {
        const train_param_group *g = &o->param_groups[k];
        char label[32];
        snprintf(label, sizeof label, "param group %d", k);
        char hyper[320];
        train_param_group_hyper(g, hyper, sizeof hyper);
        fact(f, label, "%s [%.300s]: %s", g->optimizer_name, g->pattern, hyper);
    }
    if (mesh->world > 1)
        fact(f, "parallelism",
             "%d processes = dp_replicate %d x dp_shard %d x tp %d (ep %d), %d threads each",
             mesh->world, mesh->dp_replicate, mesh->dp_shard, mesh->tp, mesh->ep,
             omp_get_max_threads());
    else
        fact(f, "parallelism", "1 process, %d threads", omp_get_max_threads());
    if (o->prec == OPS_PREC_BF16)
        fact(f, "precision",
             "%s; bf16 GEMM operands (engine %s), fp32 master weights, gradients, AdamW",
             o->prec_why, ops_bf16_engine());
    else
        fact(f, "precision", "%s; fp32 parameters, gradients, AdamW state and compute",
             o->prec_why);
    char kern[1024] = "";
    size_t at = 0;
    const ops_table *t = &m->ops[1 < m->n_units ? 1 : 0];
    for (int k = 0; k < OPS_COUNT && at < sizeof kern; k++)
        if (t->impl[k])
            at += (size_t)snprintf(kern + at, sizeof kern - at, "%s%s=%s", at ? ", " : "",
                                   ops_kind_name((ops_kind)k), t->impl[k]->name);
    fact(f, "kernels", "layers.0: %s; CPU ISA %s", kern, ops_cpu_isa());
    char choices[2048]; /* every unit's non-default kernels, plugins with their paths */
    if (model_kernel_choices(m, choices, sizeof choices))
        fact(f, "kernel overrides", "%s", choices);
    char cpu[256];
    train_peak_key(omp_get_max_threads(), cpu, sizeof cpu);
    fact(f, "machine", "%s; MFU against %.1f GFLOP/s", cpu, peak_flops / 1e9);
    const time_t now = time(NULL);
    struct tm tm;
    char when[64];
    gmtime_r(&now, &tm);
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
    fact(f, "started", "%s", when);
    fact(f, "titan", "%s", g_version);
    json_decref(r->facts);
    r->facts = f;
    /* beside the page, for `titan report` */
    char *path = facts_path(page);
    char *text = json_dumps(f, JSON_INDENT(1));
    int rc = !path || !text ? base_fail(err, "out of memory")
                            : base_write_file_atomic(path, text, strlen(text), err);
    free(text);
    free(path);
    return rc;
}

int train_report_read_facts(train_report_run *r, const char *page, base_err *err) {
    char *path = facts_path(page);
    if (!path) return base_fail(err, "out of memory");
    if (access(path, F_OK)) { /* a page without facts */
        free(path);
        return 0;
    }
    size_t len;
    char *text = base_read_file(path, 1 << 20, &len, err);
    json_error_t je;
    json_t *f = text ? json_loadb(text, len, 0, &je) : NULL;
    int rc = text ? 0 : -1;
    if (text && !f) rc = base_fail(err, "%s:%d: not JSON: %s", path, je.line, je.text);
    for (size_t i = 0; !rc && i < json_array_size(f); i++) {
        const json_t *p = json_array_get(f, i);
        if (!json_is_array(p) || json_array_size(p) != 2 || !json_is_string(json_array_get(p, 0)) ||
            !json_is_string(json_array_get(p, 1)))
            rc = base_fail(err, "%s: fact %zu is not a [label, text] pair of strings", path, i + 1);
    }
    if (!rc && !json_is_array(f)) rc = base_fail(err, "%s: not an array of facts", path);
    free(text);
    free(path);
    if (rc) {
        json_decref(f);
        return -1;
    }
    json_decref(r->facts);
    r->facts = f;
    return 0;
}

/* ---- drawing ------------------------------------------------------------------------------ */

/* s as HTML text (attribute-safe). */
static void put_esc(FILE *o, const char *s) {
    for (; *s; s++) switch (*s) {
        case '&':
            fputs("&amp;", o);
            break;
        case '<':
            fputs("&lt;", o);
            break;
        case '>':
            fputs("&gt;", o);
            break;
        case '"':
            fputs("&quot;", o);
            break;
        case '\'':
            fputs("&#39;", o);
            break;
        default:
            fputc(*s, o);
        }
}

/* The plot area's margins in the SVG's user units. */
enum { PAD_L = 64, PAD_R = 16, PAD_T = 14, PAD_B = 36 };

typedef struct {
    double x0, x1, y0, y1; /* data range */
    int w, h;              /* SVG size (user units) */
    int log_x;             /* log10(step) on x */
} axes;

static double map_x(const axes *a, double x) {
    const double u = a->log_x ? (log10(x) - log10(a->x0)) / (log10(a->x1) - log10(a->x0))
                              : (x - a->x0) / (a->x1 - a->x0);
    return PAD_L + u * (a->w - PAD_L - PAD_R);
}

static double map_y(const axes *a, double y) {
    if (y > a->y1) y = a->y1; /* clamped: hostile magnitudes stay on the page */
    if (y < a->y0) y = a->y0;
    return a->h - PAD_B - (y - a->y0) / (a->y1 - a->y0) * (a->h - PAD_T - PAD_B);
}

/* 1, 2 or 5 x 10^k near span / want. */
static double nice_step(double span, int want) {
    const double raw = span / want, p = pow(10, floor(log10(raw))), f = raw / p;
    return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * p;
}

/* A tick label: as many decimals as the tick step needs; exponents for tiny or huge. */
static void tick_label(char *buf, size_t n, double v, double step) {
    const double mag = fmax(fabs(v), step);
    if (fabs(v) < 1e-12 * step)
        snprintf(buf, n, "0");
    else if (mag < 1e-3 || mag >= 1e7)
        snprintf(buf, n, "%.3g", v);
    else if (mag >= 1e4 && step >= 1000)
        snprintf(buf, n, "%gk", v / 1000);
    else
        snprintf(buf, n, "%.*f", step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9), v);
}

/* One series of a chart: the points of one figure of one run. */
typedef struct {
    const train_report_run *run;
    int field, run_index;
    const char *color;
    char label[256];
} series;

static int series_has(const series *s) {
    for (size_t i = 0; i < s->run->n; i++)
        if (!isnan(s->run->rec[i].v[s->field])) return 1;
    return 0;
}

/* Data ranges over the series: x every step of their runs, y their values (padded to nice
 * bounds; magnitudes past 1e100 clamped). */
static void fit_axes(axes *a, const series *s, int ns) {
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    for (int k = 0; k < ns; k++)
        for (size_t i = 0; i < s[k].run->n; i++) {
            const report_rec *r = &s[k].run->rec[i];
            const double v = r->v[s[k].field];
            x0 = fmin(x0, (double)r->step); /* every chart spans the runs' steps */
            x1 = fmax(x1, (double)r->step);
            if (isnan(v) || isinf(v)) continue;
            y0 = fmin(y0, fmax(v, -1e100));
            y1 = fmax(y1, fmin(v, 1e100));
        }
    if (!(x1 > x0)) x1 = x0 + 1;
    if (!(x1 > 2 * x0)) a->log_x = 0;                   /* too short a range for a log axis */
    if (!(y1 - y0 > 1e-9 * fmax(fabs(y0), fabs(y1)))) { /* flat: a band around it */
        const double d = fabs(y0) * 0.05 > 1e-300 ? fabs(y0) * 0.05 : 1;
        y0 -= d;
        y1 += d;
    }
    const double st = nice_step(y1 - y0, 5);
    if (isfinite(st) && st > 0) {
        y0 = floor(y0 / st) * st;
        y1 = ceil(y1 / st) * st;
    }
    a->x0 = x0;
    a->x1 = x1;
    a->y0 = y0;
    a->y1 = y1;
}

/* A grid line at v and its label: on the y axis a horizontal line, the label on the left;
 * on the x axis a vertical one, the label below. */
static void grid_line(FILE *o, const axes *a, int y_axis, double v, const char *label) {
    const int xr = a->w - PAD_R, yb = a->h - PAD_B;
    if (y_axis) {
        const double y = map_y(a, v);
        fprintf(o,
                "<line class=\"grid\" x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\"/>"
                "<text class=\"tick\" x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
                PAD_L, xr, y, y, PAD_L - 6, y + 4, label);
    } else {
        const double x = map_x(a, v);
        fprintf(o,
                "<line class=\"grid\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\"/>"
                "<text class=\"tick\" x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n",
                x, x, PAD_T, yb, x, yb + 16, label);
    }
}

/* Grid lines at the multiples of st within the axis's range (none past 40 of them). */
static void grid(FILE *o, const axes *a, int y_axis, double st) {
    const double lo = y_axis ? a->y0 : a->x0, hi = y_axis ? a->y1 : a->x1;
    if (!isfinite(st) || !(st > 0) || !((hi - lo) / st <= 40)) return;
    const double first = ceil(lo / st - 1e-9) * st;
    char label[64];
    for (int i = 0; i <= 41 && first + i * st <= hi + st * 1e-9; i++) {
        tick_label(label, sizeof label, first + i * st, st);
        grid_line(o, a, y_axis, first + i * st, label);
    }
}

static void draw_axes(FILE *o, const axes *a) {
    const int xr = a->w - PAD_R, yb = a->h - PAD_B;
    grid(o, a, 1, nice_step(a->y1 - a->y0, 5));
    if (a->log_x) { /* 1, 2, 5 x 10^k */
        char label[64];
        for (double d = pow(10, floor(log10(a->x0))); d <= a->x1; d *= 10)
            for (int m = 1; m <= 5; m += m == 1 ? 1 : 3)
                if (d * m >= a->x0 && d * m <= a->x1) {
                    snprintf(label, sizeof label, "%g", d * m);
                    grid_line(o, a, 0, d * m, label);
                }
    } else {
        grid(o, a, 0, fmax(1, nice_step(a->x1 - a->x0, 6)));
    }
    fprintf(o,
            "<line class=\"axis\" x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\"/>"
            "<line class=\"axis\" x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\"/>"
            "<text class=\"axlabel\" x=\"%d\" y=\"%d\" text-anchor=\"end\">step%s</text>\n",
            PAD_L, xr, yb, yb, PAD_L, PAD_L, PAD_T, yb, xr, a->h - 4,
            a->log_x ? " (log scale)" : "");
}

/* A point of a polyline. */
typedef struct {
    double v;
    int64_t step;
} pt;

static void put_pt(FILE *o, const axes *a, pt p, size_t *k) {
    fprintf(o, "%s%.1f,%.1f", (*k)++ ? " " : "", map_x(a, (double)p.step), map_y(a, p.v));
}

/* The series as one polyline: its values, or with smooth in (0, 1) their exponential moving
 * average (TensorBoard's smoothing, debiased), named key "_smoothed". At most
 * REPORT_MAX_POINTS points: a longer series is cut into REPORT_MAX_POINTS / 2 - 1 buckets of
 * consecutive points, each drawn as its lowest and highest point in step order, so a one-step
 * spike is always drawn (every k-th point had drawn a 100,000-step loss with a spike flat, the
 * axis fitted to a value no line reached). */
static void polyline(FILE *o, const axes *a, const series *s, size_t n, double smooth,
                     const char *attrs) {
    const train_report_run *r = s->run;
    const size_t nb = REPORT_MAX_POINTS / 2 - 1; /* 2 points a bucket and the last: <= MAX */
    const size_t per = n > REPORT_MAX_POINTS ? (n + nb - 1) / nb : 1;
    fprintf(o,
            "<polyline class=\"series\" data-series=\"%s%s\" data-run=\"%d\" stroke=\"%s\"%s "
            "points=\"",
            g_field[s->field].key, smooth > 0 ? "_smoothed" : "", s->run_index, s->color, attrs);
    size_t k = 0, in = 0, j = 0; /* points drawn, in the bucket, taken */
    double ema = 0, debias = 1;
    pt lo = {0, 0}, hi = {0, 0};
    for (size_t i = 0; i < r->n; i++) {
        double v = r->rec[i].v[s->field];
        if (isnan(v)) continue;
        if (smooth > 0) {
            ema = smooth * ema + (1 - smooth) * fmax(-1e100, fmin(v, 1e100));
            debias *= smooth;
            v = ema / (1 - debias);
        }
        const pt p = {v, r->rec[i].step};
        if (!in++) lo = hi = p;
        if (p.v < lo.v) lo = p;
        if (p.v > hi.v) hi = p;
        const int last = ++j == n;
        if (in < per && !last) continue;
        /* the bucket: its extremes in step order (one point when they are one), and the
         * series' last point, where its line ends */
        const pt first = lo.step <= hi.step ? lo : hi, second = lo.step <= hi.step ? hi : lo;
        put_pt(o, a, first, &k);
        if (second.step != first.step) put_pt(o, a, second, &k);
        if (last && p.step != second.step) put_pt(o, a, p, &k);
        in = 0;
    }
    fprintf(o, "\"/>\n");
}

/* A series: its polyline (dashed for the second figure of a chart); a marker per point when
 * sparse; noisy per-step series of 50 points or more (loss, grad norm) faint, under their
 * smoothed curve (weight 0.6, TensorBoard's default). */
static void draw_series(FILE *o, const axes *a, const series *s) {
    const train_report_run *r = s->run;
    size_t n = 0;
    for (size_t i = 0; i < r->n; i++) n += !isnan(r->rec[i].v[s->field]);
    const int smooth = (s->field == R_LOSS || s->field == R_GNORM) && n >= 50;
    const int dashed = s->field == R_VAL || s->field == R_MEM_ACTIVE;
    polyline(o, a, s, n, 0,
             smooth   ? " stroke-opacity=\"0.3\""
             : dashed ? " stroke-dasharray=\"5 3\""
                      : "");
    if (smooth) polyline(o, a, s, n, 0.6, "");
    /* a series of one point (a 1-step run) is a lone moveto, which SVG draws as nothing:
     * its dot shows it */
    if ((g_field[s->field].dots && n <= 400) || n == 1)
        for (size_t i = 0; i < r->n; i++) {
            const double v = r->rec[i].v[s->field];
            if (!isnan(v))
                fprintf(o, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.6\" fill=\"%s\"/>",
                        map_x(a, (double)r->rec[i].step), map_y(a, v), s->color);
        }
}

/* A dashed line at each step a run resumed after. */
static void draw_resumes(FILE *o, const axes *a, const series *s, int ns) {
    for (int k = 0; k < ns; k++) {
        if (k && s[k].run == s[k - 1].run) continue;
        for (size_t i = 0; i < s[k].run->n; i++) {
            const int64_t at = s[k].run->rec[i].resumed_from;
            if (at < 0 || (a->log_x && at < 1)) continue;
            const double x = map_x(a, at < a->x0 ? a->x0 : (double)at);
            fprintf(
                o,
                "<line class=\"resume\" data-step=\"%lld\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" "
                "y2=\"%d\"/><text class=\"resumetext\" x=\"%.1f\" y=\"%d\">resumed @%lld</text>\n",
                (long long)at, x, x, PAD_T, a->h - PAD_B, x + 3, PAD_T + 9, (long long)at);
        }
    }
}

/* The last finite value of a series, its step in *step; 0 when none. */
static int series_last(const series *s, double *v, int64_t *step) {
    for (size_t i = s->run->n; i-- > 0;)
        if (!isnan(s->run->rec[i].v[s->field])) {
            *v = s->run->rec[i].v[s->field];
            *step = s->run->rec[i].step;
            return 1;
        }
    return 0;
}

static void put_value(FILE *o, int field, double v) {
    char buf[64];
    snprintf(buf, sizeof buf, g_field[field].fmt, v);
    fputs(buf, o);
}

/* One chart card: title, legend with each series' last value, the SVG. */
static void draw_chart(FILE *o, int c, const series *s, int ns, int log_x) {
    const int wide = g_chart[c].wide;
    axes a = {.w = wide ? 1160 : 560, .h = wide ? 320 : 250, .log_x = log_x};
    fit_axes(&a, s, ns);
    fprintf(o, "<section class=\"card%s\" data-chart=\"%s\">\n<h2>", wide ? " wide" : "",
            g_field[g_chart[c].fields[0]].key);
    put_esc(o, g_chart[c].title);
    fprintf(o, "</h2>\n<div class=\"legend\">");
    for (int k = 0; k < ns; k++) {
        double v;
        int64_t step;
        fprintf(o, "<span class=\"item\"><i style=\"background:%s\"%s></i>", s[k].color,
                s[k].field == R_VAL || s[k].field == R_MEM_ACTIVE ? " class=\"dash\"" : "");
        put_esc(o, s[k].label);
        if (series_last(&s[k], &v, &step)) {
            fprintf(o, " <b class=\"last\" data-series=\"%s\" data-run=\"%d\" data-step=\"%lld\">",
                    g_field[s[k].field].key, s[k].run_index, (long long)step);
            put_value(o, s[k].field, v);
            fprintf(o, "</b><small> @ step %lld</small>", (long long)step);
        }
        fprintf(o, "</span>");
    }
    fprintf(o, "</div>\n<svg viewBox=\"0 0 %d %d\" role=\"img\" aria-label=\"", a.w, a.h);
    put_esc(o, g_chart[c].title);
    fprintf(o, "\">\n");
    draw_axes(o, &a);
    draw_resumes(o, &a, s, ns);
    for (int k = 0; k < ns; k++) draw_series(o, &a, &s[k]);
    fprintf(o, "</svg>\n</section>\n");
}

static const char g_css[] =
    ":root{--fg:#1f2937;--mut:#6b7280;--line:#e5e7eb;--bg:#f6f7f9;--card:#fff;--acc:#ee4c2c}"
    "*{box-sizing:border-box}"
    "body{margin:0;background:var(--bg);color:var(--fg);font:14px/1.45 system-ui,-apple-system,"
    "'Segoe UI',Roboto,'Helvetica Neue',Arial,sans-serif}"
    "header{background:#111827;color:#f9fafb;padding:18px 28px;border-bottom:3px solid var(--acc)}"
    "header .brand{font-weight:700;letter-spacing:.08em;color:var(--acc);font-size:12px;"
    "text-transform:uppercase}"
    "header h1{margin:2px 0 2px;font-size:22px;font-weight:600}"
    "header .sub{color:#cbd5e1;font-size:13px}"
    ".failed{background:#fef2f2;border:1px solid #fca5a5;color:#991b1b;border-radius:8px;"
    "padding:10px 14px;margin:0 0 14px}"
    "main{padding:20px 28px;max-width:1240px;margin:0 auto}"
    ".kpis{display:flex;flex-wrap:wrap;gap:12px;margin-bottom:16px}"
    ".kpi{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:10px 16px;"
    "min-width:150px}"
    ".kpi .k{color:var(--mut);font-size:12px;text-transform:uppercase;letter-spacing:.04em}"
    ".kpi .v{font-size:22px;font-weight:600;font-variant-numeric:tabular-nums}"
    ".kpi .s{color:var(--mut);font-size:12px}"
    ".facts{background:var(--card);border:1px solid var(--line);border-radius:10px;"
    "padding:12px 16px 6px;margin:16px 0}"
    ".facts h2{font-size:15px;margin:0 0 4px;font-weight:600}"
    ".facts table{border-collapse:collapse;width:100%}"
    ".facts th{text-align:left;color:var(--mut);font-weight:500;padding:5px 16px 5px 0;"
    "white-space:nowrap;vertical-align:top;width:1%}"
    ".facts td{padding:5px 0;border-bottom:1px solid #f3f4f6;word-break:break-word}"
    ".facts tr:last-child td{border-bottom:0}"
    ".grid{display:grid;grid-template-columns:repeat(2,minmax(0,1fr));gap:16px}"
    ".card{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:12px "
    "14px 6px}"
    ".card.wide{grid-column:1/-1}"
    ".card h2{font-size:15px;margin:0 0 4px;font-weight:600}"
    ".legend{display:flex;flex-wrap:wrap;gap:4px "
    "18px;font-size:13px;color:#374151;margin-bottom:2px}"
    ".legend i{display:inline-block;width:18px;height:3px;border-radius:2px;margin-right:6px;"
    "vertical-align:middle}"
    ".legend i.dash{background-image:linear-gradient(90deg,transparent 60%,#fff 60%);"
    "background-size:6px 3px}"
    ".legend b{font-variant-numeric:tabular-nums}"
    ".legend small{color:var(--mut)}"
    "svg{width:100%;height:auto;display:block}"
    "svg .grid{stroke:#eef0f3;stroke-width:1}"
    "svg .axis{stroke:#9ca3af;stroke-width:1}"
    "svg .tick{fill:#6b7280;font-size:11px;font-variant-numeric:tabular-nums}"
    "svg .axlabel{fill:#6b7280;font-size:11px}"
    "svg .series{fill:none;stroke-width:1.8;stroke-linejoin:round;stroke-linecap:round}"
    "svg .resume{stroke:#9ca3af;stroke-dasharray:3 3}"
    "svg .resumetext{fill:#6b7280;font-size:10px}"
    ".runs{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:6px 16px;"
    "margin-bottom:16px;width:100%;border-collapse:collapse}"
    ".runs th,.runs td{text-align:left;padding:6px 12px 6px 0;border-bottom:1px solid #f3f4f6}"
    ".runs th{color:var(--mut);font-weight:500}"
    ".runs td.n{font-variant-numeric:tabular-nums}"
    ".empty{color:var(--mut);padding:24px;text-align:center}"
    "footer{color:var(--mut);font-size:12px;text-align:center;padding:8px 0 24px}"
    "@media (max-width:900px){.grid{grid-template-columns:1fr}}";

/* A headline figure: the last value of field in run r. */
static void kpi(FILE *o, const train_report_run *r, int field, const char *title) {
    const series s = {r, field, 0, "", ""};
    double v;
    int64_t step;
    if (!series_last(&s, &v, &step)) return;
    fprintf(o, "<div class=\"kpi\"><div class=\"k\">%s</div><div class=\"v\" data-kpi=\"%s\">",
            title, g_field[field].key);
    put_value(o, field, v);
    fprintf(o, "</div><div class=\"s\">step %lld</div></div>\n", (long long)step);
}

static const char *fact_of(const train_report_run *r, const char *label) {
    for (size_t i = 0; i < json_array_size(r->facts); i++) {
        const json_t *p = json_array_get(r->facts, i);
        if (!strcmp(json_string_value(json_array_get(p, 0)), label))
            return json_string_value(json_array_get(p, 1));
    }
    return NULL;
}

/* The model fact up to its details: "qwen3 debugmodel: 20.49M parameters". */
static void put_model(FILE *o, const train_report_run *r) {
    const char *model = fact_of(r, "model");
    if (!model) return;
    const char *paren = strstr(model, " (");
    char head[256];
    snprintf(head, sizeof head, "%.*s", paren ? (int)(paren - model) : 255, model);
    put_esc(o, head);
}

static void page(FILE *o, train_report_run *const *runs, int nr, const train_report_opts *po) {
    const int multi = nr > 1;
    const train_report_run *r0 = runs[0];
    char when[64];
    const time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
    fprintf(o, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
               "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\n");
    if (po->refresh_s > 0) /* a run's page while it trains: the browser reloads the file */
        fprintf(o, "<meta http-equiv=\"refresh\" content=\"%d\">\n", po->refresh_s);
    fprintf(o, "<title>");
    if (multi)
        fprintf(o, "titan: %d runs", nr);
    else {
        fputs("titan: ", o);
        put_esc(o, r0->name);
    }
    fprintf(o,
            "</title>\n<style>%s</style></head>\n<body>\n<header><div class=\"brand\">titan "
            "report</div><h1>",
            g_css);
    if (multi) {
        fprintf(o, "%d runs compared", nr);
    } else {
        put_esc(o, r0->name);
    }
    fprintf(o, "</h1><div class=\"sub\">");
    if (!multi && fact_of(r0, "model")) {
        put_model(o, r0);
        fprintf(o, " &middot; ");
    }
    if (!multi && r0->n) {
        const char *steps = fact_of(r0, "steps");
        fprintf(o, "step %lld", (long long)r0->rec[r0->n - 1].step);
        if (steps) fprintf(o, " of %d", atoi(steps));
        fprintf(o, " &middot; ");
    }
    fprintf(o, "updated %s</div></header>\n<main>\n", when);
    if (po->failed) { /* the run stopped on an error: the page is final, and says why */
        fprintf(o, "<p class=\"failed\">The run ended with an error: ");
        put_esc(o, po->failed);
        fprintf(o, "</p>\n");
    }
    if (multi) { /* one row per run: its colour, name, model, and last figures */
        fprintf(o, "<table class=\"runs\"><tr><th></th><th>run</th><th>model</th><th>steps</th>"
                   "<th>loss</th><th>validation loss</th><th>tokens/s</th></tr>\n");
        for (int i = 0; i < nr; i++) {
            fprintf(o,
                    "<tr data-run=\"%d\"><td><span style=\"display:inline-block;width:12px;"
                    "height:12px;border-radius:3px;background:%s\"></span></td><td>",
                    i, g_run_color[i % N_RUN_COLORS]);
            put_esc(o, runs[i]->name);
            fprintf(o, "</td><td>");
            put_model(o, runs[i]);
            fprintf(o, "</td><td class=\"n\">%lld</td>",
                    runs[i]->n ? (long long)runs[i]->rec[runs[i]->n - 1].step : 0LL);
            const int cols[] = {R_LOSS, R_VAL, R_TPS};
            for (int c = 0; c < 3; c++) {
                const series s = {runs[i], cols[c], i, "", ""};
                double v;
                int64_t st;
                fprintf(o, "<td class=\"n\">");
                if (series_last(&s, &v, &st)) put_value(o, cols[c], v);
                fprintf(o, "</td>");
            }
            fprintf(o, "</tr>\n");
        }
        fprintf(o, "</table>\n");
    } else {
        fprintf(o, "<div class=\"kpis\">\n");
        kpi(o, r0, R_LOSS, "loss");
        kpi(o, r0, R_VAL, "validation loss");
        kpi(o, r0, R_TPS, "tokens/s per rank");
        kpi(o, r0, R_MFU, "MFU %");
        kpi(o, r0, R_MEM, "peak memory GiB");
        fprintf(o, "</div>\n");
    }
    int drawn = 0;
    fprintf(o, "<div class=\"grid\">\n");
    for (int c = 0; c < N_CHARTS; c++) {
        series s[2 * REPORT_MAX_RUNS];
        int ns = 0;
        for (int i = 0; i < nr && i < REPORT_MAX_RUNS; i++)
            for (int f = 0; f < g_chart[c].nf; f++) {
                const int field = g_chart[c].fields[f];
                series x = {runs[i], field, i, g_field[field].color, ""};
                snprintf(x.label, sizeof x.label, "%s", g_field[field].label);
                if (multi) { /* a colour per run; a chart's second figure says which it is */
                    x.color = g_run_color[i % N_RUN_COLORS];
                    snprintf(x.label, sizeof x.label, "%.180s%s%s", runs[i]->name,
                             f > 0 ? ": " : "", f > 0 ? g_field[field].label : "");
                }
                if (series_has(&x)) s[ns++] = x;
            }
        if (!ns) continue;
        draw_chart(o, c, s, ns, po->log_steps);
        drawn++;
    }
    fprintf(o, "</div>\n");
    if (!drawn) fprintf(o, "<div class=\"empty\">no steps logged yet</div>\n");
    if (!multi && r0->n_src) { /* a dataset mixture: the windows each source gave so far */
        double total = 0;      /* in double: 64 counts up to 2^63 would overflow an int64 sum */
        for (int i = 0; i < r0->n_src; i++) total += (double)r0->src_windows[i];
        fprintf(o,
                "<section class=\"facts\" data-section=\"sources\" data-step=\"%lld\"><h2>Data "
                "sources (windows drawn by step %lld, counted from the data's start or its last "
                "restart; the data line below names them)</h2><table>\n",
                (long long)r0->src_step, (long long)r0->src_step);
        for (int i = 0; i < r0->n_src; i++)
            fprintf(o, "<tr data-source=\"%d\"><th>source %d</th><td>%lld (%.1f%%)</td></tr>\n",
                    i + 1, i + 1, (long long)r0->src_windows[i],
                    total > 0 ? 100.0 * (double)r0->src_windows[i] / total : 0.0);
        fprintf(o, "</table></section>\n");
    }
    if (!multi) {
        if (json_array_size(r0->facts)) {
            fprintf(o, "<section class=\"facts\"><h2>Run</h2><table>\n");
            for (size_t i = 0; i < json_array_size(r0->facts); i++) {
                const json_t *p = json_array_get(r0->facts, i);
                const char *k = json_string_value(json_array_get(p, 0));
                fprintf(o, "<tr data-fact=\"");
                put_esc(o, k);
                fprintf(o, "\"><th>");
                put_esc(o, k);
                fprintf(o, "</th><td>");
                put_esc(o, json_string_value(json_array_get(p, 1)));
                fprintf(o, "</td></tr>\n");
            }
            fprintf(o, "</table></section>\n");
        }
    }
    fprintf(o, "</main>\n<footer>titan ");
    put_esc(o, g_version);
    fprintf(o, " &middot; from metrics.jsonl");
    if (!multi) fprintf(o, " &middot; %zu steps", r0->n);
    fprintf(o, "</footer>\n</body></html>\n");
}

int train_report_write(train_report_run *const *runs, int n_runs, const char *path,
                       const train_report_opts *po, base_err *err) {
    base_atomic a;
    if (base_atomic_open(&a, path, err)) return -1;
    FILE *o = base_atomic_stream(&a, err);
    if (!o) {
        base_atomic_abort(&a);
        return -1;
    }
    const train_report_opts none = {0};
    page(o, runs, n_runs, po ? po : &none);
    if (ferror(o)) {
        base_atomic_abort(&a);
        return base_fail(err, "%s: cannot write the report: %s", path, strerror(errno));
    }
    return base_atomic_commit(&a, err);
}

/* ---- titan report ------------------------------------------------------------------------ */

void train_cmd_report_usage(FILE *f) {
    fprintf(
        f, "usage: titan report RUN [RUN ...] [--out FILE] [--log-steps]\n"
           "\n"
           "Draws a run's report page (one self-contained HTML file: facts, loss, learning rate,\n"
           "grad norm, tokens/s, MFU, memory, MoE expert load) from its metrics.jsonl; a run\n"
           "writes the same page as it trains ({dump_folder}/report.html). Several runs put their\n"
           "curves on one set of charts.\n"
           "\n"
           "  RUN              a dump folder (its metrics.jsonl and report.facts.json), or a\n"
           "                   metrics .jsonl file (facts from report.facts.json beside it)\n"
           "  --out FILE       the page (one run: default RUN/report.html; needed for several)\n"
           "  --log-steps      steps on a log scale\n"
           "\n"
           "A malformed metrics line is an error naming the file and line; an unfinished last\n"
           "line (a run writing it, or killed mid-line) is left out with a warning.\n");
}

/* Where RUN's metrics and facts are: a folder's metrics.jsonl (rank_0/metrics.jsonl when
 * every rank wrote its own), or the file itself. */
static int run_paths(const char *run, char **jsonl, char **page, base_err *err) {
    *jsonl = *page = NULL;
    if (base_is_dir(run)) {
        const size_t n = strlen(run) + 32;
        *jsonl = malloc(n);
        *page = malloc(n);
        if (*jsonl && *page) {
            snprintf(*jsonl, n, "%s/metrics.jsonl", run);
            snprintf(*page, n, "%s/report.html", run);
            /* metrics.save_for_all_ranks: every rank's under rank_N/; rank 0's is the run's */
            if (!base_is_file(*jsonl)) {
                snprintf(*jsonl, n, "%s/rank_0/metrics.jsonl", run);
                if (!base_is_file(*jsonl)) snprintf(*jsonl, n, "%s/metrics.jsonl", run);
            }
            return 0;
        }
    } else if (base_is_file(run)) {
        const char *slash = strrchr(run, '/');
        const size_t dir = slash ? (size_t)(slash - run + 1) : 0, n = dir + 16;
        *jsonl = strdup(run);
        *page = malloc(n);
        if (*jsonl && *page) {
            snprintf(*page, n, "%.*sreport.html", (int)dir, run);
            return 0;
        }
    } else {
        return base_fail(err, "%s: no such run folder or metrics file", run);
    }
    free(*jsonl);
    free(*page);
    return base_fail(err, "out of memory");
}

int train_cmd_report(int argc, char **argv, base_err *err) {
    base_args it = {argc, argv, 2, err};
    const char *out = NULL;
    train_report_opts po = {0};
    const char **names = calloc((size_t)argc, sizeof *names);
    int nr = 0, rc = names ? 0 : base_fail(err, "out of memory");
    for (; !rc && it.i < argc; it.i++) {
        const char *a = argv[it.i];
        if (base_args_is_help(&it)) {
            train_cmd_report_usage(stdout);
            free(names);
            return 0;
        } else if (!strcmp(a, "--out")) {
            if (!(out = base_args_value(&it))) rc = -1;
        } else if (!strcmp(a, "--log-steps")) {
            po.log_steps = 1;
        } else if (a[0] == '-' && a[1]) {
            rc = base_fail(err, "unknown option '%s' (titan report --help)", a);
        } else {
            names[nr++] = a;
        }
    }
    if (!rc && !nr) rc = base_fail(err, "no run given (titan report --help)");
    if (!rc && nr > REPORT_MAX_RUNS)
        rc = base_fail(err, "%d runs: at most %d on one page", nr, REPORT_MAX_RUNS);
    if (!rc && nr > 1 && !out)
        rc = base_fail(err, "%d runs: --out FILE names the page that compares them", nr);
    train_report_run **runs = rc ? NULL : calloc((size_t)nr, sizeof *runs);
    if (!rc && !runs) rc = base_fail(err, "out of memory");
    char *page0 = NULL;
    for (int i = 0; !rc && i < nr; i++) {
        char *jsonl, *page, name[512];
        if (run_paths(names[i], &jsonl, &page, err)) {
            rc = -1;
            break;
        }
        snprintf(name, sizeof name, "%s", names[i]);
        for (size_t n = strlen(name); n > 1 && name[n - 1] == '/';) name[--n] = 0;
        rc = train_report_run_new(&runs[i], name, err) ||
                     train_report_read_jsonl(runs[i], jsonl, err) ||
                     train_report_read_facts(runs[i], page, err)
                 ? -1
                 : 0;
        free(jsonl);
        if (i == 0)
            page0 = page;
        else
            free(page);
    }
    const char *dest = out ? out : page0;
    if (!rc) rc = train_report_write(runs, nr, dest, &po, err);
    if (!rc) printf("wrote %s (%d run%s)\n", dest, nr, nr > 1 ? "s" : "");
    for (int i = 0; runs && i < nr; i++) train_report_run_free(runs[i]);
    free(runs);
    free(page0);
    free(names);
    return rc;
}
