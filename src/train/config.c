/* Job configs: one schema table describes every field (section, key, type, where it lives
 * in train_config, default, range, help); loading a TOML file, command-line overrides,
 * printing, help and the checks all walk that table. */
#include "train.h"

#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/checkpoint.h"

typedef enum { T_STR, T_INT, T_FLOAT, T_BOOL, T_STRS, T_INTS } ftype;

/* Extra per-value check: returns 0, or -1 with the reason in why. */
typedef int (*fcheck)(const base_toml_value *v, char *why, size_t n);

typedef struct {
    const char *section, *key;
    ftype type;
    int optional; /* INT / BOOL stored as train_opt_int, FLOAT as train_opt_float */
    size_t off;
    const char *def_s;   /* T_STR default */
    double def;          /* T_INT / T_FLOAT / T_BOOL default */
    double min, max;     /* inclusive range of numbers (and of T_INTS items) */
    int open;            /* 1: min is exclusive, 2: max is exclusive, 3: both */
    const char *choices; /* T_STR: "a|b|c", or NULL for any string */
    fcheck check;
    const char *help;
} field;

static int check_not_zero(const base_toml_value *v, char *why, size_t n);
static int check_not_one(const base_toml_value *v, char *why, size_t n);
static int check_flavor(const base_toml_value *v, char *why, size_t n);
static int check_sac_option(const base_toml_value *v, char *why, size_t n);
static int check_kernel_override(const base_toml_value *v, char *why, size_t n);
static int check_plugin_path(const base_toml_value *v, char *why, size_t n);

#define OFF(sec, key) offsetof(train_config, sec.key)
#define BIG 1073741824.0 /* 2^30: sizes and counts */
#define STR(sec, key, def, choices, help)                                                          \
    { #sec, #key, T_STR, 0, OFF(sec, key), def, 0, 0, 0, 0, choices, NULL, help }
#define STRC(sec, key, def, check, help)                                                           \
    { #sec, #key, T_STR, 0, OFF(sec, key), def, 0, 0, 0, 0, NULL, check, help }
#define INT(sec, key, def, lo, hi, help)                                                           \
    { #sec, #key, T_INT, 0, OFF(sec, key), NULL, def, lo, hi, 0, NULL, NULL, help }
#define INTC(sec, key, def, lo, hi, check, help)                                                   \
    { #sec, #key, T_INT, 0, OFF(sec, key), NULL, def, lo, hi, 0, NULL, check, help }
#define FLT(sec, key, def, lo, hi, open, help)                                                     \
    { #sec, #key, T_FLOAT, 0, OFF(sec, key), NULL, def, lo, hi, open, NULL, NULL, help }
#define BOOL(sec, key, def, help)                                                                  \
    { #sec, #key, T_BOOL, 0, OFF(sec, key), NULL, def, 0, 1, 0, NULL, NULL, help }
#define OINT(sec, key, lo, hi, help)                                                               \
    { #sec, #key, T_INT, 1, OFF(sec, key), NULL, 0, lo, hi, 0, NULL, NULL, help }
#define OFLT(sec, key, lo, hi, open, help)                                                         \
    { #sec, #key, T_FLOAT, 1, OFF(sec, key), NULL, 0, lo, hi, open, NULL, NULL, help }
#define OBOOL(sec, key, help)                                                                      \
    { #sec, #key, T_BOOL, 1, OFF(sec, key), NULL, 0, 0, 1, 0, NULL, NULL, help }
#define STRS(sec, key, check, help)                                                                \
    { #sec, #key, T_STRS, 0, OFF(sec, key), NULL, 0, 0, 0, 0, NULL, check, help }
#define INTS(sec, key, lo, hi, help)                                                               \
    { #sec, #key, T_INTS, 0, OFF(sec, key), NULL, 0, lo, hi, 0, NULL, NULL, help }

/* Defaults are torchtitan v0.2.2's (research notes §4.1) except where titan cannot do what
 * torchtitan's default asks (activation_checkpoint.mode: no selective AC yet) or has no
 * counterpart (dataset "random", paths that name assets torchtitan ships). */
static const field g_fields[] = {
    STR(job, dump_folder, ".", NULL,
        "folder for this job's outputs; relative output paths below are joined to it"),
    STR(job, description, "titan job", NULL, "a description of the job"),
    INT(job, sample_tokens, 0, 0, BIG, "after training, sample this many tokens (titan)"),

    STR(model, name, "qwen3", "qwen3", "model family"),
    STRC(model, flavor, "debugmodel", check_flavor, "registry flavor (titan inspect lists one)"),
    STR(model, hf_assets_path, "", NULL,
        "Hugging Face folder whose tokenizer encodes the dataset; none = one token per byte"),
    STR(model, config_path, "", NULL, "a Hugging Face config.json to build the model from"),
    OINT(model, dim, 1, BIG, "override: model width (titan)"),
    OINT(model, n_layers, 1, BIG, "override: transformer blocks (titan)"),
    OINT(model, n_heads, 1, BIG, "override: query heads (titan)"),
    OINT(model, n_kv_heads, 1, BIG, "override: key/value heads (titan)"),
    OINT(model, head_dim, 1, BIG, "override: per-head width (titan)"),
    OINT(model, ffn_dim, 1, BIG, "override: SwiGLU hidden width (titan)"),
    OINT(model, vocab_size, 1, BIG, "override: vocabulary size (titan)"),
    OINT(model, max_seq_len, 1, BIG, "override: RoPE context of the flavor (titan)"),
    OBOOL(model, tie_embeddings, "override: lm_head shares the embedding (titan)"),
    OFLT(model, rope_theta, 0, INFINITY, 1, "override: RoPE base (titan)"),
    OFLT(model, norm_eps, 0, 1, 1, "override: RMSNorm epsilon (titan)"),
    OINT(model, num_experts, 1, 65536, "override: MoE routed experts (titan)"),
    OINT(model, top_k, 1, 64, "override: MoE experts per token (titan)"),
    OINT(model, moe_inter_dim, 1, BIG, "override: MoE expert hidden width (titan)"),
    OFLT(model, router_aux_loss_coef, 0, INFINITY, 0,
         "override: weight of the aux loss (moe_load_balance = aux_loss; HF, titan)"),
    STR(model, moe_load_balance, "none", "none|aux_loss|bias",
        "MoE load balancing: none, HF's auxiliary loss, or torchtitan's expert bias (titan)"),
    FLT(model, moe_bias_update_rate, 1e-3, 0, 1, 1,
        "expert-bias step per optimizer step (torchtitan load_balance_coeff; titan)"),
    INTS(model, mlp_only_layers, 0, BIG, "MoE: blocks with a dense MLP (HF mlp_only_layers)"),

    STR(training, dataset, "random", NULL,
        "dataset name; 'random' without dataset_path = uniform random tokens"),
    STR(training, dataset_path, "", NULL,
        "dataset: a text, JSONL or token-shard file, a folder, or a glob (docs/data.md)"),
    STR(training, dataset_format, "auto", "auto|text|jsonl|tokens",
        "format of dataset_path's files; auto = by shard magic / extension (titan)"),
    STR(training, dataset_field, "text", NULL, "JSONL field holding the text (titan)"),
    BOOL(training, skip_bad_lines, 0, "skip (count, log) malformed JSONL lines (titan)"),
    INT(training, stop_after_step, 0, 0, BIG,
        "exit after this step; 0 = run all steps (the schedule still spans steps) (titan)"),
    INT(training, local_batch_size, 8, 1, BIG, "sequences per microbatch per rank"),
    INTC(training, global_batch_size, -1, -1, BIG, check_not_zero,
         "sequences per step; -1 = local_batch_size x data-parallel ranks (no accumulation)"),
    INT(training, seq_len, 2048, 1, BIG, "tokens per sequence"),
    INT(training, steps, 10000, 1, BIG, "optimizer steps"),
    FLT(training, max_norm, 1.0, 0, INFINITY, 0, "gradient clipping threshold (global L2 norm)"),
    INT(training, seed, 42, 0, 9.2e18, "weight init and data seed (titan keeps one, default 42)"),
    INT(training, threads, 0, 0, 4096, "OpenMP/BLAS threads; 0 = all cores (titan)"),
    INT(training, ce_chunk, 0, 0, BIG, "tokens per fused lm_head+CE chunk; 0 = auto (titan)"),

    STR(optimizer, name, "AdamW", "AdamW|Adam", "optimizer"),
    FLT(optimizer, lr, 8e-4, 0, INFINITY, 0, "peak learning rate"),
    FLT(optimizer, beta1, 0.9, 0, 1, 2, "AdamW beta1"),
    FLT(optimizer, beta2, 0.95, 0, 1, 2, "AdamW beta2"),
    FLT(optimizer, eps, 1e-8, 0, INFINITY, 1, "AdamW epsilon"),
    FLT(optimizer, weight_decay, 0.1, 0, INFINITY, 0, "decoupled weight decay (all params)"),
    STR(optimizer, implementation, "fused", "fused|foreach|for-loop",
        "torch's variants; titan has one AdamW kernel for all three"),

    INT(lr_scheduler, warmup_steps, 200, 0, BIG, "linear warmup steps"),
    OINT(lr_scheduler, total_steps, 1, BIG, "schedule length; unset = training.steps"),
    OFLT(lr_scheduler, decay_ratio, 0, 1, 0,
         "fraction of steps spent decaying; unset = every step after warmup"),
    STR(lr_scheduler, decay_type, "linear", "linear|sqrt|cosine", "decay curve"),
    FLT(lr_scheduler, min_lr_factor, 0.0, 0, 1, 0, "final LR as a fraction of the peak"),

    BOOL(checkpoint, enable, 0, "save checkpoints and resume from the newest"),
    STR(checkpoint, folder, "checkpoint", NULL, "checkpoint folder, under job.dump_folder"),
    INT(checkpoint, interval, 500, 1, BIG, "steps between checkpoints"),
    INTC(checkpoint, keep_latest_k, 10, 0, BIG, check_not_one, "checkpoints kept; 0 = all"),
    INT(checkpoint, load_step, -1, -1, BIG, "step to resume from; -1 = the latest"),
    STR(checkpoint, initial_load_path, "", NULL,
        "weights to start from when there is nothing to resume: a titan step-N folder or a "
        "safetensors file / folder under HF names"),
    BOOL(checkpoint, initial_load_in_hf, 0, "initial_load_path is a Hugging Face folder"),
    BOOL(checkpoint, initial_load_model_only, 1, "initial load: weights only"),
    BOOL(checkpoint, last_save_model_only, 1, "final save: weights only"),
    BOOL(checkpoint, last_save_in_hf, 0, "final save in Hugging Face format"),
    STR(checkpoint, export_dtype, "float32", "float32|bfloat16|float16", "final save dtype"),
    STR(checkpoint, async_mode, "async", "disabled|async|async_with_pinned_mem",
        "save from a snapshot in a background thread when it fits in memory (titan's "
        "default; torchtitan's is disabled)"),
    STR(checkpoint, hf_export_folder, "", NULL,
        "after training, export the model as a Hugging Face folder here (titan)"),

    INT(parallelism, data_parallel_replicate_degree, 1, 1, BIG, "DDP/HSDP replicas"),
    INTC(parallelism, data_parallel_shard_degree, -1, -1, BIG, check_not_zero,
         "FSDP shards; -1 = all remaining ranks"),
    INT(parallelism, tensor_parallel_degree, 1, 1, BIG, "tensor parallel ranks"),
    INT(parallelism, pipeline_parallel_degree, 1, 1, BIG, "pipeline stages"),
    INT(parallelism, context_parallel_degree, 1, 1, BIG, "context parallel ranks"),
    INT(parallelism, expert_parallel_degree, 1, 1, BIG, "expert parallel ranks"),
    STR(parallelism, fsdp_reshard_after_forward, "default", "default|always|never",
        "free gathered block weights after forward"),

    STR(activation_checkpoint, mode, "none", "none|full|selective",
        "recompute activations in backward (torchtitan's default is selective)"),
    STRC(activation_checkpoint, selective_ac_option, "2", check_sac_option,
         "selective: every N-th block, or 'op'"),

    INT(metrics, log_freq, 10, 1, BIG, "console line every N steps"),
    BOOL(metrics, enable_tensorboard, 0, "write TensorBoard scalars (torchtitan's tags)"),
    STR(metrics, save_tb_folder, "tb", NULL, "TensorBoard folder, under job.dump_folder"),
    BOOL(metrics, save_for_all_ranks, 0, "every rank writes metrics"),
    BOOL(metrics, enable_jsonl, 0, "write every step's metrics as JSON lines (titan)"),
    STR(metrics, save_jsonl_file, "metrics.jsonl", NULL, "JSON lines file, under job.dump_folder"),
    FLT(metrics, peak_tflops, 0, 0, INFINITY, 0,
        "fp32 peak for MFU; 0 = measured on rank 0, cached (titan)"),

    BOOL(validation, enable, 0, "evaluate the loss on held-out data every freq steps"),
    STR(validation, dataset, "c4_validation", NULL, "validation dataset name"),
    STR(validation, dataset_path, "", NULL, "validation dataset file"),
    INT(validation, freq, 10, 1, BIG, "validate every N steps"),
    INTC(validation, steps, -1, -1, BIG, check_not_zero, "validation steps; -1 = whole set"),
    INT(validation, local_batch_size, 8, 1, BIG, "validation sequences per microbatch"),
    INT(validation, seq_len, 2048, 1, BIG, "validation tokens per sequence"),

    STRS(kernels, overrides, check_kernel_override,
         "'op=impl' or 'layers.*.op=impl' (titan kernels lists impls); the last match wins"),
    STRS(kernels, plugins, check_plugin_path,
         "kernel plugin .so files (include/titan/kernel_abi.h), loaded before the overrides"),
};
#define N_FIELDS ((int)(sizeof g_fields / sizeof g_fields[0]))
_Static_assert(sizeof g_fields / sizeof g_fields[0] <= TRAIN_CONFIG_MAX_FIELDS,
               "raise TRAIN_CONFIG_MAX_FIELDS");

/* ---- names and suggestions -------------------------------------------------------- */

/* Optimal-string-alignment distance (edits, and swaps of neighbours), on at most 63 bytes. */
static int edit_distance(const char *a, const char *b) {
    int la = (int)strnlen(a, 63), lb = (int)strnlen(b, 63);
    int d[64][64];
    for (int i = 0; i <= la; i++) d[i][0] = i;
    for (int j = 0; j <= lb; j++) d[0][j] = j;
    for (int i = 1; i <= la; i++) {
        for (int j = 1; j <= lb; j++) {
            int c = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < c) c = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < c) c = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < c)
                c = d[i - 2][j - 2] + 1;
            d[i][j] = c;
        }
    }
    return d[la][lb];
}

/* Keeps the nearest candidate seen so far. */
typedef struct {
    const char *word;
    char best[128];
    int dist;
} nearest;

static void consider(nearest *n, const char *cand) {
    int d = edit_distance(n->word, cand);
    if (!n->best[0] || d < n->dist) {
        snprintf(n->best, sizeof n->best, "%s", cand);
        n->dist = d;
    }
}

static int find_field(const char *section, const char *key) {
    for (int i = 0; i < N_FIELDS; i++)
        if (!strcmp(g_fields[i].section, section) && !strcmp(g_fields[i].key, key)) return i;
    return -1;
}

static int is_section(const char *s) {
    for (int i = 0; i < N_FIELDS; i++)
        if (!strcmp(g_fields[i].section, s)) return 1;
    return 0;
}

/* The valid field nearest to section.key: in a known section, its nearest key, unless that
 * is more than one edit away and the key exists in another section (seed in [job] ->
 * training.seed); otherwise the nearest "section.key" overall. Returns the field index. */
static int suggest_field(const char *section, const char *key) {
    int best = -1, dist = 1 << 30;
    if (is_section(section)) {
        for (int i = 0; i < N_FIELDS; i++) {
            if (strcmp(g_fields[i].section, section)) continue;
            const int d = edit_distance(key, g_fields[i].key);
            if (d < dist) best = i, dist = d;
        }
        if (dist > 1)
            for (int i = 0; i < N_FIELDS; i++)
                if (!strcmp(g_fields[i].key, key)) return i;
        return best;
    }
    char want[200];
    snprintf(want, sizeof want, "%s.%s", section, key);
    for (int i = 0; i < N_FIELDS; i++) {
        char full[128];
        snprintf(full, sizeof full, "%s.%s", g_fields[i].section, g_fields[i].key);
        const int d = edit_distance(want, full);
        if (d < dist) best = i, dist = d;
    }
    return best;
}

static void suggest_section(const char *section, char *out, size_t n) {
    nearest nr = {section, "", 0};
    for (int i = 0; i < N_FIELDS; i++) consider(&nr, g_fields[i].section);
    snprintf(out, n, "; did you mean [%s]?", nr.best);
}

/* "a|b|c" -> "a, b, c" */
static void choices_list(const char *choices, char *out, size_t n) {
    size_t len = 0;
    for (const char *p = choices; *p && len + 3 < n; p++) {
        if (*p == '|') {
            out[len++] = ',';
            out[len++] = ' ';
        } else {
            out[len++] = *p;
        }
    }
    out[len] = 0;
}

/* The nearest "a|b|c" choice. */
static void suggest_choice(const char *choices, const char *word, char *out, size_t n) {
    nearest nr = {word, "", 0};
    for (const char *p = choices; *p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        char c[64];
        snprintf(c, sizeof c, "%.*s", (int)len, p);
        consider(&nr, c);
        p += len + (bar != NULL);
    }
    snprintf(out, n, "%s", nr.best);
}

static int is_choice(const char *choices, const char *s) {
    size_t len = strlen(s);
    for (const char *p = choices; *p;) {
        const char *bar = strchr(p, '|');
        size_t cl = bar ? (size_t)(bar - p) : strlen(p);
        if (cl == len && !strncmp(p, s, len)) return 1;
        p += cl + (bar != NULL);
    }
    return 0;
}

/* ---- per-value checks ------------------------------------------------------------- */

static int check_not_zero(const base_toml_value *v, char *why, size_t n) {
    if (v->i != 0) return 0;
    snprintf(why, n, "must be -1 or positive, not 0");
    return -1;
}

static int check_not_one(const base_toml_value *v, char *why, size_t n) {
    if (v->i != 1) return 0;
    snprintf(why, n, "must be 0 (keep all) or >= 2, not 1 (torchtitan refuses 1)");
    return -1;
}

static int check_flavor(const base_toml_value *v, char *why, size_t n) {
    char all[512] = "";
    const char *const *names = model_flavor_names();
    for (int i = 0; names[i]; i++) {
        if (!strcmp(v->s, names[i])) return 0;
        size_t l = strlen(all);
        snprintf(all + l, sizeof all - l, "%s%s", l ? "|" : "", names[i]);
    }
    char best[64], list[600];
    suggest_choice(all, v->s, best, sizeof best);
    choices_list(all, list, sizeof list);
    snprintf(why, n, "'%.64s' is not a flavor (%s); did you mean '%s'?", v->s, list, best);
    return -1;
}

static int check_sac_option(const base_toml_value *v, char *why, size_t n) {
    int64_t k;
    if (!strcmp(v->s, "op") || (base_parse_i64(v->s, &k) == 0 && k >= 1)) return 0;
    snprintf(why, n, "must be 'op' or a positive integer N (every N-th block)");
    return -1;
}

/* "pattern=impl" with ops_resolve's rules: pattern is an op name or a layer glob. Only the
 * pattern is checked here: the implementation may come from a plugin of kernels.plugins, so
 * train_config_validate checks it once the plugins are loaded. */
static int check_kernel_override(const base_toml_value *v, char *why, size_t n) {
    const char *eq = strchr(v->s, '=');
    if (!eq || eq == v->s || !eq[1]) {
        snprintf(why, n, "must read 'op=impl' or 'layers.*.op=impl'");
        return -1;
    }
    char pattern[256];
    snprintf(pattern, sizeof pattern, "%.*s", (int)(eq - v->s), v->s);
    const ops_override ov = {pattern, "default"}; /* every op has a default */
    ops_table t;
    base_err e;
    if (ops_resolve(&t, "layers.0", NULL, &ov, 1, &e)) {
        /* name the implementation the user wrote, not the placeholder */
        char *at = strstr(e.msg, "= 'default'");
        snprintf(why, n, "%.*s= '%s'%s", at ? (int)(at - e.msg) : (int)strlen(e.msg), e.msg, eq + 1,
                 at ? at + strlen("= 'default'") : "");
        return -1;
    }
    return 0;
}

/* An implementation some op has (after the plugins are loaded), and that the pattern's ops
 * have when it applies to a block; "" when fine, else the reason in why. */
static int check_kernel_impl(const char *s, char *why, size_t n) {
    const char *eq = strchr(s, '=');
    char pattern[256];
    snprintf(pattern, sizeof pattern, "%.*s", (int)(eq - s), s);
    const ops_override ov = {pattern, eq + 1};
    ops_table t;
    base_err e;
    /* Resolving one block path checks, where the pattern applies there, that the
     * implementation exists for the op; the model build resolves every path again. */
    if (ops_resolve(&t, "layers.0", NULL, &ov, 1, &e)) {
        snprintf(why, n, "%.590s", e.msg);
        return -1;
    }
    ops_release(&t);
    for (int k = 0; k < OPS_COUNT; k++)
        if (ops_find((ops_kind)k, eq + 1)) return 0;
    snprintf(why, n, "no op has an implementation named '%s' (see titan kernels)", eq + 1);
    return -1;
}

static int check_plugin_path(const base_toml_value *v, char *why, size_t n) {
    if (v->s[0]) return 0;
    snprintf(why, n, "must name a shared object (e.g. \"./libmykernels.so\")");
    return -1;
}

/* ---- storage ---------------------------------------------------------------------- */

static void *slot(const train_config *c, const field *f) {
    return (char *)c + f->off;
}

/* Owned by the config: freed by train_config_free. */
static void *pool_keep(train_config *c, void *p) {
    if (!p) return NULL;
    if (c->n_pool == c->cap_pool) {
        int cap = c->cap_pool ? c->cap_pool * 2 : 32;
        void **np = realloc(c->pool, sizeof *np * (size_t)cap);
        if (!np) {
            free(p);
            return NULL;
        }
        c->pool = np;
        c->cap_pool = cap;
    }
    return c->pool[c->n_pool++] = p;
}

void train_config_defaults(train_config *c) {
    memset(c, 0, sizeof *c);
    for (int i = 0; i < N_FIELDS; i++) {
        const field *f = &g_fields[i];
        void *s = slot(c, f);
        if (f->optional) continue; /* zeroed: unset */
        switch (f->type) {
        case T_STR:
            *(const char **)s = f->def_s;
            break;
        case T_INT:
            *(int64_t *)s = (int64_t)f->def;
            break;
        case T_FLOAT:
            *(double *)s = f->def;
            break;
        case T_BOOL:
            *(int *)s = (int)f->def;
            break;
        case T_STRS:
        case T_INTS:
            break; /* empty */
        }
    }
}

void train_config_free(train_config *c) {
    for (int i = 0; i < c->n_pool; i++) free(c->pool[i]);
    free(c->pool);
    free(c->ovr);
    memset(c, 0, sizeof *c);
}

/* Names field f and where its value came from: "configs/a.toml:12:9: training.steps",
 * "command line: --training.steps", "command line: --steps (training.steps)", or
 * "training.steps (default)". */
static void describe(const field *f, const char *where, int line, int col, char *out, size_t n) {
    char name[96];
    snprintf(name, sizeof name, "%s.%s", f->section, f->key);
    const size_t len = strlen(name);
    if (!where)
        snprintf(out, n, "%s (default)", name);
    else if (line > 0)
        snprintf(out, n, "%s:%d:%d: %s", where, line, col, name);
    else if (!strncmp(where, "--", 2) && !strncmp(where + 2, name, len) &&
             (!where[len + 2] || where[len + 2] == '='))
        snprintf(out, n, "command line: --%s", name);
    else
        snprintf(out, n, "command line: %.100s (%s)", where, name);
}

static const char *type_name(const field *f) {
    switch (f->type) {
    case T_STR:
        return "a string";
    case T_INT:
        return "an integer";
    case T_FLOAT:
        return "a number";
    case T_BOOL:
        return "a boolean (true or false)";
    case T_STRS:
        return "an array of strings";
    case T_INTS:
        return "an array of integers";
    }
    return "?";
}

/* "in [1, 1073741824]", "> 0", ">= 0", "in [0, 1)" */
static void range_text(const field *f, char *out, size_t n) {
    const int int_like = f->type != T_FLOAT;
    char lo[32], hi[32];
    snprintf(lo, sizeof lo, int_like ? "%.0f" : "%g", f->min);
    snprintf(hi, sizeof hi, int_like ? "%.0f" : "%g", f->max);
    if (isinf(f->max))
        snprintf(out, n, "%s %s", f->open & 1 ? ">" : ">=", lo);
    else
        snprintf(out, n, "in %s%s, %s%s", f->open & 1 ? "(" : "[", lo, hi, f->open & 2 ? ")" : "]");
}

/* Checks one scalar against field f (for arrays: one item); fills why on failure. */
static int check_scalar(const field *f, base_toml_value *v, char *why, size_t n) {
    const ftype t = f->type == T_STRS ? T_STR : f->type == T_INTS ? T_INT : f->type;
    const base_toml_type want = t == T_STR     ? BASE_TOML_STRING
                                : t == T_INT   ? BASE_TOML_INT
                                : t == T_FLOAT ? BASE_TOML_FLOAT
                                               : BASE_TOML_BOOL;
    if (t == T_FLOAT && v->type == BASE_TOML_INT) { /* lr = 1 means 1.0 */
        v->type = BASE_TOML_FLOAT;
        v->f = (double)v->i;
    }
    if (v->type != want) {
        snprintf(why, n, "expected %s, got %s",
                 f->type == T_STRS   ? "strings"
                 : f->type == T_INTS ? "integers"
                                     : type_name(f),
                 base_toml_type_name(v->type));
        return -1;
    }
    if (t == T_FLOAT && !isfinite(v->f)) {
        snprintf(why, n, "must be a finite number");
        return -1;
    }
    if (t == T_INT || t == T_FLOAT) {
        const double x = t == T_INT ? (double)v->i : v->f;
        const int below = (f->open & 1) ? x <= f->min : x < f->min;
        const int above = (f->open & 2) ? x >= f->max : x > f->max;
        if (below || above) {
            char r[96];
            range_text(f, r, sizeof r);
            if (t == T_INT)
                snprintf(why, n, "%lld is out of range (must be %s)", (long long)v->i, r);
            else
                snprintf(why, n, "%g is out of range (must be %s)", v->f, r);
            return -1;
        }
    }
    if (t == T_STR && f->choices && !is_choice(f->choices, v->s)) {
        char best[64], list[160];
        suggest_choice(f->choices, v->s, best, sizeof best);
        choices_list(f->choices, list, sizeof list);
        snprintf(why, n, "'%.100s' is not one of %s; did you mean '%s'?", v->s, list, best);
        return -1;
    }
    return f->check ? f->check(v, why, n) : 0;
}

/* Stores v (already checked) into field fi. */
static int store(train_config *c, int fi, const base_toml_value *v) {
    const field *f = &g_fields[fi];
    void *s = slot(c, f);
    switch (f->type) {
    case T_STR: {
        char *copy = pool_keep(c, strdup(v->s));
        if (!copy) return -1;
        *(const char **)s = copy;
        break;
    }
    case T_INT:
    case T_BOOL:
        if (f->optional)
            *(train_opt_int *)s = (train_opt_int){1, v->i};
        else if (f->type == T_INT)
            *(int64_t *)s = v->i;
        else
            *(int *)s = (int)v->i;
        break;
    case T_FLOAT:
        if (f->optional)
            *(train_opt_float *)s = (train_opt_float){1, v->f};
        else
            *(double *)s = v->f;
        break;
    case T_STRS: {
        const char **items = pool_keep(c, calloc((size_t)v->n_items + 1, sizeof *items));
        if (!items) return -1;
        for (int i = 0; i < v->n_items; i++)
            if (!(items[i] = pool_keep(c, strdup(v->items[i].s)))) return -1;
        *(train_str_list *)s = (train_str_list){items, v->n_items};
        break;
    }
    case T_INTS: {
        int64_t *items = pool_keep(c, calloc((size_t)v->n_items + 1, sizeof *items));
        if (!items) return -1;
        for (int i = 0; i < v->n_items; i++) items[i] = v->items[i].i;
        *(train_int_list *)s = (train_int_list){items, v->n_items};
        break;
    }
    }
    return 0;
}

/* Checks and stores a value for field fi; errors start with the value's origin. */
static int assign(train_config *c, int fi, base_toml_value *v, const char *where, int line, int col,
                  base_err *err) {
    const field *f = &g_fields[fi];
    char why[600] = "", pre[300];
    const int is_list = f->type == T_STRS || f->type == T_INTS;
    if (is_list && v->type != BASE_TOML_ARRAY)
        snprintf(why, sizeof why, "expected %s, got %s", type_name(f),
                 base_toml_type_name(v->type));
    else if (!is_list && v->type == BASE_TOML_ARRAY)
        snprintf(why, sizeof why, "expected %s, got an array", type_name(f));
    else if (is_list) {
        for (int i = 0; i < v->n_items && !why[0]; i++) {
            char item[500];
            if (check_scalar(f, &v->items[i], item, sizeof item)) {
                line = line > 0 ? v->items[i].line : line;
                col = line > 0 ? v->items[i].col : col;
                snprintf(why, sizeof why, "item %d: %s", i + 1, item);
            }
        }
    } else {
        check_scalar(f, v, why, sizeof why);
    }
    describe(f, where, line, col, pre, sizeof pre);
    if (why[0]) return base_fail(err, "%s: %s", pre, why);
    if (store(c, fi, v)) return base_fail(err, "%s: out of memory", pre);
    c->origin[fi].where = where;
    c->origin[fi].line = line;
    c->origin[fi].col = col;
    return 0;
}

/* ---- files ------------------------------------------------------------------------ */

/* [kernels] table entries collected while loading a file. */
typedef struct {
    const char **v;
    int n;
} kern_pending;

/* [kernels] "pattern" = "impl" (the table form of kernels.overrides; `prefix` is the table
 * path after "kernels." when a bare dotted key made a sub-table): checked like a list item
 * and collected in file order into *pending (items owned by the config's pool). */
static int kernel_table_entry(train_config *c, const char *prefix, const base_toml_kv *kv,
                              kern_pending *pending, base_err *err) {
    const size_t len = (prefix ? strlen(prefix) + 1 : 0) + strlen(kv->key) + strlen(kv->val.s) + 2;
    char *item = pool_keep(c, malloc(len));
    const char **grown = realloc(pending->v, sizeof *grown * (size_t)(pending->n + 1));
    if (!item || !grown) {
        if (grown) pending->v = grown;
        return base_fail(err, "out of memory");
    }
    pending->v = grown;
    snprintf(item, len, "%s%s%s=%s", prefix ? prefix : "", prefix ? "." : "", kv->key, kv->val.s);
    base_toml_value v = kv->val;
    v.s = item;
    char why[600];
    if (strchr(kv->key, '=') || check_kernel_override(&v, why, sizeof why)) {
        if (strchr(kv->key, '=')) snprintf(why, sizeof why, "a pattern cannot contain '='");
        return base_fail(err, "%s:%d:%d: kernels.\"%s%s%s\": %s", c->file, kv->line, kv->col,
                         prefix ? prefix : "", prefix ? "." : "", kv->key, why);
    }
    pending->v[pending->n++] = item;
    return 0;
}

/* kernels.overrides += pending: the list's entries first, then the table's. */
static int kernel_table_append(train_config *c, const kern_pending *pending, int line, int col,
                               base_err *err) {
    const int fi = find_field("kernels", "overrides"), n0 = c->kernels.overrides.n;
    const char **items = pool_keep(c, calloc((size_t)(n0 + pending->n + 1), sizeof *items));
    if (!items) return base_fail(err, "out of memory");
    for (int i = 0; i < n0; i++) items[i] = c->kernels.overrides.v[i];
    for (int i = 0; i < pending->n; i++) items[n0 + i] = pending->v[i];
    c->kernels.overrides = (train_str_list){items, n0 + pending->n};
    if (!c->origin[fi].where || c->origin[fi].where != c->file) {
        /* errors about the merged list point at the first table entry */
        c->origin[fi].where = c->file;
        c->origin[fi].line = line;
        c->origin[fi].col = col;
    }
    return 0;
}

int train_config_load_text(train_config *c, const char *text, size_t len, const char *name,
                           base_err *err) {
    /* The name errors and origins refer to; kept until train_config_free. */
    if (!(c->file = pool_keep(c, strdup(name ? name : "<config>"))))
        return base_fail(err, "out of memory");
    base_toml_doc doc;
    if (base_toml_parse(text, len, c->file, &doc, err)) return -1;
    int rc = 0;
    kern_pending pending = {NULL, 0};  /* [kernels] "pattern" = "impl" entries, file order */
    int first_line = 0, first_col = 0; /* of the first of them */
    for (int t = 0; t < doc.n_tables && !rc; t++) {
        base_toml_table *tb = &doc.tables[t];
        char hint[160];
        if (!tb->name[0]) { /* root: keys outside any [section] */
            if (tb->n_kv == 0) continue;
            const base_toml_kv *kv = &tb->kv[0];
            hint[0] = 0;
            for (int i = 0; i < N_FIELDS && !hint[0]; i++)
                if (!strcmp(g_fields[i].key, kv->key))
                    snprintf(hint, sizeof hint, "; did you mean '%s' in [%s]?", kv->key,
                             g_fields[i].section);
            rc = base_fail(err, "%s:%d:%d: key '%.100s' is outside any [section]%s", c->file,
                           kv->line, kv->col, kv->key, hint);
            break;
        }
        const int kern_sub = !strncmp(tb->name, "kernels.", 8); /* from a bare dotted key */
        if (!is_section(tb->name) && !kern_sub) {
            suggest_section(tb->name, hint, sizeof hint);
            rc = base_fail(err, "%s:%d:%d: unknown section [%.100s]%s", c->file, tb->line, tb->col,
                           tb->name, hint);
            break;
        }
        for (int k = 0; k < tb->n_kv && !rc; k++) {
            base_toml_kv *kv = &tb->kv[k];
            const int fi = kern_sub ? -1 : find_field(tb->name, kv->key);
            if (fi < 0 && (kern_sub || !strcmp(tb->name, "kernels")) &&
                kv->val.type == BASE_TOML_STRING) {
                if (!pending.n) first_line = kv->line, first_col = kv->col;
                rc = kernel_table_entry(c, kern_sub ? tb->name + 8 : NULL, kv, &pending, err);
            } else if (fi < 0) {
                const field *g = &g_fields[suggest_field(tb->name, kv->key)];
                if (strcmp(g->section, tb->name))
                    snprintf(hint, sizeof hint, "; did you mean '%s' in [%s]?", g->key, g->section);
                else
                    snprintf(hint, sizeof hint, "; did you mean '%s'?", g->key);
                rc = base_fail(err, "%s:%d:%d: unknown key '%.100s' in [%s]%s", c->file, kv->line,
                               kv->col, kv->key, tb->name, hint);
            } else {
                rc = assign(c, fi, &kv->val, c->file, kv->val.line, kv->val.col, err);
            }
        }
    }
    base_toml_free(&doc);
    if (!rc && pending.n) rc = kernel_table_append(c, &pending, first_line, first_col, err);
    free((void *)pending.v);
    return rc;
}

int train_config_load_file(train_config *c, const char *path, base_err *err) {
    size_t len = 0;
    char *text = base_read_file(path, 1 << 20, &len, err); /* a job config is small */
    if (!text) return -1;
    int rc = train_config_load_text(c, text, len, path, err);
    free(text);
    return rc;
}

/* ---- the command line ------------------------------------------------------------- */

/* A command-line string as a TOML value of field f's type. Numbers take TOML's syntax or
 * anything strtod/strtoll read whole ("1e-3", ".5"); lists are TOML arrays or a
 * comma-separated list; booleans are true/false/1/0. */
static int cli_value(const field *f, const char *text, base_toml_value *v, char *why, size_t n) {
    memset(v, 0, sizeof *v);
    v->type = BASE_TOML_STRING;
    if (f->type == T_STR) return (v->s = strdup(text)) ? 0 : -1;
    base_err e;
    if (f->type == T_STRS || f->type == T_INTS) {
        if (text[0] == '[') {
            if (base_toml_parse_value(text, v, &e) == 0) return 0;
            snprintf(why, n, "not a TOML array: %.300s", e.msg);
            return -1;
        }
        v->type = BASE_TOML_ARRAY;
        for (const char *p = text; *p;) {
            const char *comma = strchr(p, ',');
            size_t len = comma ? (size_t)(comma - p) : strlen(p);
            base_toml_value *ni = realloc(v->items, sizeof *ni * (size_t)(v->n_items + 1));
            if (!ni) return -1;
            v->items = ni;
            base_toml_value *it = &v->items[v->n_items++];
            memset(it, 0, sizeof *it);
            char *item = strndup(p, len);
            if (!item) return -1;
            if (f->type == T_STRS) {
                it->type = BASE_TOML_STRING;
                it->s = item;
            } else {
                it->type = BASE_TOML_INT;
                int bad = base_parse_i64(item, &it->i);
                free(item);
                if (bad) {
                    snprintf(why, n, "item %d: expected an integer, got '%.*s'", v->n_items,
                             (int)len, p);
                    return -1;
                }
            }
            p += len + (comma != NULL);
        }
        return 0;
    }
    if (f->type == T_BOOL && (!strcmp(text, "1") || !strcmp(text, "0"))) {
        v->type = BASE_TOML_BOOL;
        v->i = text[0] == '1';
        return 0;
    }
    if (base_toml_parse_value(text, v, &e) == 0 && v->type != BASE_TOML_STRING &&
        v->type != BASE_TOML_ARRAY)
        return 0;
    base_toml_value_free(v);
    if (f->type == T_INT && base_parse_i64(text, &v->i) == 0) return v->type = BASE_TOML_INT, 0;
    if (f->type == T_FLOAT && base_parse_f64(text, &v->f) == 0) return v->type = BASE_TOML_FLOAT, 0;
    snprintf(why, n, "expected %s, got '%.100s'", type_name(f), text);
    return -1;
}

int train_config_set(train_config *c, const char *name, const char *value, const char *where,
                     base_err *err) {
    char sec[96], pre[300];
    const char *dot = strchr(name, '.');
    int fi = -1;
    sec[0] = 0;
    if (dot && (size_t)(dot - name) < sizeof sec) {
        snprintf(sec, sizeof sec, "%.*s", (int)(dot - name), name);
        fi = find_field(sec, dot + 1);
    }
    if (fi < 0) {
        const field *g = &g_fields[suggest_field(dot ? sec : "", dot ? dot + 1 : name)];
        return base_fail(err, "command line: unknown option '--%.100s'; did you mean '--%s.%s'?",
                         name, g->section, g->key);
    }
    const field *f = &g_fields[fi];
    describe(f, where, 0, 0, pre, sizeof pre);
    if (!value && f->type != T_BOOL)
        return base_fail(err, "%s: needs a value (%s)", pre, type_name(f));
    if (f->optional && value && (!strcmp(value, "none") || !strcmp(value, "None"))) {
        memset(slot(c, f), 0, f->type == T_FLOAT ? sizeof(train_opt_float) : sizeof(train_opt_int));
        c->origin[fi].where = where;
        c->origin[fi].line = 0;
        return 0;
    }
    base_toml_value v;
    char why[400] = "";
    int rc;
    if (!value) {
        memset(&v, 0, sizeof v);
        v.type = BASE_TOML_BOOL;
        v.i = 1;
        rc = 0;
    } else {
        rc = cli_value(f, value, &v, why, sizeof why);
    }
    if (rc)
        rc = base_fail(err, "%s: %s", pre, why[0] ? why : "out of memory");
    else
        rc = assign(c, fi, &v, where, 0, 0, err);
    base_toml_value_free(&v);
    return rc;
}

/* The flags `titan train` had before job configs, each an alias of config fields. A flag
 * listed on several rows sets each of them; `value` NULL takes the argument. */
enum { ALIAS_FIELD, ALIAS_SET, ALIAS_GRAD_ACCUM };
static const struct {
    const char *flag, *field, *value;
    int kind;
} g_aliases[] = {
    {"--flavor", "model.flavor", NULL, ALIAS_FIELD},
    {"--set", NULL, NULL, ALIAS_SET}, /* KEY=VALUE -> model.KEY */
    {"--data", "training.dataset_path", NULL, ALIAS_FIELD},
    {"--random-tokens", "training.dataset_path", "", ALIAS_FIELD},
    {"--random-tokens", "training.dataset", "random", ALIAS_FIELD},
    {"--steps", "training.steps", NULL, ALIAS_FIELD},
    {"--batch", "training.local_batch_size", NULL, ALIAS_FIELD},
    {"--seq-len", "training.seq_len", NULL, ALIAS_FIELD},
    /* K microbatches per step: global_batch_size = K x local_batch_size (at the end). */
    {"--grad-accum", "training.global_batch_size", NULL, ALIAS_GRAD_ACCUM},
    {"--lr", "optimizer.lr", NULL, ALIAS_FIELD},
    {"--warmup", "lr_scheduler.warmup_steps", NULL, ALIAS_FIELD},
    {"--decay-ratio", "lr_scheduler.decay_ratio", NULL, ALIAS_FIELD},
    {"--decay-type", "lr_scheduler.decay_type", NULL, ALIAS_FIELD},
    {"--min-lr-factor", "lr_scheduler.min_lr_factor", NULL, ALIAS_FIELD},
    {"--weight-decay", "optimizer.weight_decay", NULL, ALIAS_FIELD},
    {"--max-norm", "training.max_norm", NULL, ALIAS_FIELD},
    {"--seed", "training.seed", NULL, ALIAS_FIELD},
    {"--ac", "activation_checkpoint.mode", NULL, ALIAS_FIELD},
    {"--threads", "training.threads", NULL, ALIAS_FIELD},
    {"--log-freq", "metrics.log_freq", NULL, ALIAS_FIELD},
    {"--metrics", "metrics.save_jsonl_file", NULL, ALIAS_FIELD},
    {"--metrics", "metrics.enable_jsonl", "true", ALIAS_FIELD},
    {"--out", "checkpoint.hf_export_folder", NULL, ALIAS_FIELD},
    {"--sample", "job.sample_tokens", NULL, ALIAS_FIELD},
    {"--peak-tflops", "metrics.peak_tflops", NULL, ALIAS_FIELD},
    {"--ce-chunk", "training.ce_chunk", NULL, ALIAS_FIELD},
    {"--tokenizer", "model.hf_assets_path", NULL, ALIAS_FIELD},
    {"--data-format", "training.dataset_format", NULL, ALIAS_FIELD},
    {"--data-field", "training.dataset_field", NULL, ALIAS_FIELD},
    {"--skip-bad-lines", "training.skip_bad_lines", "true", ALIAS_FIELD},
    {"--stop-after-step", "training.stop_after_step", NULL, ALIAS_FIELD},
    {"--dump-folder", "job.dump_folder", NULL, ALIAS_FIELD},
    {"--checkpoint-interval", "checkpoint.interval", NULL, ALIAS_FIELD},
    {"--checkpoint-interval", "checkpoint.enable", "true", ALIAS_FIELD},
    {"--checkpoint-folder", "checkpoint.folder", NULL, ALIAS_FIELD},
    {"--checkpoint-folder", "checkpoint.enable", "true", ALIAS_FIELD},
    {"--keep-latest-k", "checkpoint.keep_latest_k", NULL, ALIAS_FIELD},
    {"--load-step", "checkpoint.load_step", NULL, ALIAS_FIELD},
    {"--initial-load-path", "checkpoint.initial_load_path", NULL, ALIAS_FIELD},
    {"--initial-load-path", "checkpoint.enable", "true", ALIAS_FIELD},
    {"--last-save-full", "checkpoint.last_save_model_only", "false", ALIAS_FIELD},
    {"--sync-checkpoint", "checkpoint.async_mode", "disabled", ALIAS_FIELD},
};
#define N_ALIASES ((int)(sizeof g_aliases / sizeof g_aliases[0]))

static int alias_takes_value(const char *flag) {
    for (int i = 0; i < N_ALIASES; i++)
        if (!strcmp(g_aliases[i].flag, flag) && !g_aliases[i].value) return 1;
    return 0;
}

static int apply_alias(train_config *c, const char *flag, const char *arg, int64_t *grad_accum,
                       base_err *err) {
    for (int i = 0; i < N_ALIASES; i++) {
        if (strcmp(g_aliases[i].flag, flag)) continue;
        const char *v = g_aliases[i].value ? g_aliases[i].value : arg;
        if (g_aliases[i].kind == ALIAS_SET) {
            const char *eq = strchr(v, '=');
            char name[128];
            if (!eq || eq == v || (size_t)(eq - v) > 64)
                return base_fail(err, "command line (--set): wants KEY=VALUE, got '%.100s'", v);
            snprintf(name, sizeof name, "model.%.*s", (int)(eq - v), v);
            if (train_config_set(c, name, eq + 1, flag, err)) return -1;
        } else if (g_aliases[i].kind == ALIAS_GRAD_ACCUM) {
            if (base_parse_i64(v, grad_accum) || *grad_accum < 1 || *grad_accum > BIG)
                return base_fail(err,
                                 "command line (--grad-accum): '%.100s' is not an integer >= 1", v);
        } else if (train_config_set(c, g_aliases[i].field, v, flag, err)) {
            return -1;
        }
    }
    return 0;
}

static int is_alias(const char *flag) {
    for (int i = 0; i < N_ALIASES; i++)
        if (!strcmp(g_aliases[i].flag, flag)) return 1;
    return 0;
}

int train_config_from_args(train_config *c, int argc, char **argv, int first, train_cli *cli,
                           base_err *err) {
    memset(cli, 0, sizeof *cli);
    const char *config = NULL;
    for (int i = first; i < argc; i++) { /* the file first: the command line overrides it */
        const char *a = argv[i];
        if (strcmp(a, "--config") && strncmp(a, "--config=", 9)) continue;
        if (config) return base_fail(err, "command line: --config given twice");
        config = a[8] == '=' ? a + 9 : i + 1 < argc ? argv[++i] : NULL;
        if (!config || !config[0]) return base_fail(err, "command line: --config needs a file");
    }
    if (config && train_config_load_file(c, config, err)) return -1;
    int64_t grad_accum = 0;
    for (int i = first; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--config")) {
            i++;
            continue;
        }
        if (!strncmp(a, "--config=", 9)) continue;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            cli->help = 1;
            continue;
        }
        if (!strcmp(a, "--print-config")) {
            cli->print_config = 1;
            continue;
        }
        if (strncmp(a, "--", 2) || !a[2]) {
            return base_fail(err,
                             "command line: unexpected argument '%.100s' (options start "
                             "with --; see titan train --help)",
                             a);
        }
        if (is_alias(a)) {
            const char *arg = NULL;
            if (alias_takes_value(a)) {
                if (i + 1 >= argc) return base_fail(err, "command line (%s): needs a value", a);
                arg = argv[++i];
            }
            if (apply_alias(c, a, arg, &grad_accum, err)) return -1;
            continue;
        }
        /* --section.key=value, --section.key value, or a bare boolean --section.key */
        const char *eq = strchr(a, '=');
        char name[160];
        snprintf(name, sizeof name, "%.*s", eq ? (int)(eq - a - 2) : (int)strlen(a + 2), a + 2);
        const char *value = eq ? eq + 1 : NULL;
        if (!strchr(name, '.')) { /* neither an alias nor section.key: suggest either */
            nearest nr = {a, "", 0};
            for (int k = 0; k < N_ALIASES; k++) consider(&nr, g_aliases[k].flag);
            for (int k = 0; k < N_FIELDS; k++) {
                char full[128];
                snprintf(full, sizeof full, "--%s.%s", g_fields[k].section, g_fields[k].key);
                consider(&nr, full);
            }
            return base_fail(err, "command line: unknown option '%.100s'; did you mean '%s'?", a,
                             nr.best);
        }
        if (!eq && i + 1 < argc && strncmp(argv[i + 1], "--", 2)) {
            const char *d = strchr(name, '.');
            char sec[96];
            snprintf(sec, sizeof sec, "%.*s", (int)(d - name), name);
            const int fi = find_field(sec, d + 1);
            if (fi < 0 || g_fields[fi].type != T_BOOL || !strcmp(argv[i + 1], "true") ||
                !strcmp(argv[i + 1], "false") || !strcmp(argv[i + 1], "1") ||
                !strcmp(argv[i + 1], "0"))
                value = argv[++i];
        }
        if (train_config_set(c, name, value, a, err)) return -1;
    }
    if (grad_accum > 0) {
        char v[32];
        snprintf(v, sizeof v, "%lld", (long long)(grad_accum * c->training.local_batch_size));
        if (train_config_set(c, "training.global_batch_size", v, "--grad-accum", err)) return -1;
    }
    return train_config_validate(c, err);
}

/* ---- whole-config checks ---------------------------------------------------------- */

static int fail_field(const train_config *c, const char *section, const char *key, base_err *err,
                      const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static int fail_field(const train_config *c, const char *section, const char *key, base_err *err,
                      const char *fmt, ...) {
    const int fi = find_field(section, key); /* always found: callers name schema fields */
    char pre[300], msg[700];
    describe(&g_fields[fi], c->origin[fi].where, c->origin[fi].line, c->origin[fi].col, pre,
             sizeof pre);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return base_fail(err, "%s: %s", pre, msg);
}

/* The model the config describes: the flavor with the [model] overrides applied. */
static int apply_model_overrides(const train_config *c, model_args *a, base_err *err);
#define NOT_YET(sec, key, ...) fail_field(c, #sec, #key, err, __VA_ARGS__)

static int resolve_model(const train_config *c, model_args *a, base_err *err) {
    if (c->model.config_path[0]) { /* a HF config.json (or a folder holding one) */
        char p[4200];
        const char *cp = c->model.config_path;
        if (base_is_dir(cp)) {
            snprintf(p, sizeof p, "%s/config.json", cp);
            cp = p;
        }
        base_err why;
        if (!base_is_file(cp))
            return fail_field(c, "model", "config_path", err,
                              "%s: no such file (a Hugging Face config.json, or a folder with one)",
                              cp);
        if (ckpt_hf_config_read(cp, a, &why))
            return fail_field(c, "model", "config_path", err, "%s", why.msg);
    } else if (model_flavor(c->model.flavor, a, err)) {
        return -1;
    }
    return apply_model_overrides(c, a, err);
}

int train_config_model_args(const train_config *c, const model_args *base, model_args *a,
                            base_err *err) {
    if (!base) return resolve_model(c, a, err);
    *a = *base;
    if (c->model.num_experts.set) a->n_experts = (int)c->model.num_experts.v;
    if (c->model.top_k.set) a->top_k = (int)c->model.top_k.v;
    if (c->model.moe_inter_dim.set) a->moe_ffn_dim = (int)c->model.moe_inter_dim.v;
    return apply_model_overrides(c, a, err);
}

static int apply_model_overrides(const train_config *c, model_args *a, base_err *err) {
    const struct {
        const char *key;
        const train_opt_int *v;
        int *dst;
    } ints[] = {{"dim", &c->model.dim, &a->dim},
                {"n_layers", &c->model.n_layers, &a->n_layers},
                {"n_heads", &c->model.n_heads, &a->n_heads},
                {"n_kv_heads", &c->model.n_kv_heads, &a->n_kv_heads},
                {"head_dim", &c->model.head_dim, &a->head_dim},
                {"ffn_dim", &c->model.ffn_dim, &a->ffn_dim},
                {"vocab_size", &c->model.vocab_size, &a->vocab_size},
                {"max_seq_len", &c->model.max_seq_len, &a->max_seq_len},
                {"tie_embeddings", &c->model.tie_embeddings, &a->tie_embeddings},
                {"num_experts", &c->model.num_experts, &a->n_experts},
                {"top_k", &c->model.top_k, &a->top_k},
                {"moe_inter_dim", &c->model.moe_inter_dim, &a->moe_ffn_dim}};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (ints[i].v->set) *ints[i].dst = (int)ints[i].v->v;
    if (c->model.rope_theta.set) a->rope_theta = c->model.rope_theta.v;
    if (c->model.norm_eps.set) a->norm_eps = c->model.norm_eps.v;
    if (c->model.router_aux_loss_coef.set)
        a->router_aux_loss_coef = c->model.router_aux_loss_coef.v;
    if (model_args_validate(a, err)) {
        /* Blame the first override the message names, else the flavor. */
        char msg[sizeof err->msg];
        snprintf(msg, sizeof msg, "%s", err->msg);
        const char *key = "flavor";
        for (size_t i = 0; i < sizeof ints / sizeof ints[0] && !strcmp(key, "flavor"); i++)
            if (ints[i].v->set && strstr(msg, ints[i].key == ints[9].key    ? "n_experts"
                                              : ints[i].key == ints[11].key ? "moe_ffn_dim"
                                                                            : ints[i].key))
                key = ints[i].key;
        return fail_field(c, "model", key, err, "%s with the [model] overrides: %s",
                          c->model.flavor, msg);
    }
    return 0;
}

int train_config_validate(const train_config *c, base_err *err) {
    /* Plugins first: the overrides may name their kernels. */
    for (int i = 0; i < c->kernels.plugins.n; i++) {
        base_err e;
        if (ops_plugin_load(c->kernels.plugins.v[i], &e))
            return fail_field(c, "kernels", "plugins", err, "item %d: %s", i + 1, e.msg);
    }
    for (int i = 0; i < c->kernels.overrides.n; i++) {
        char why[600];
        if (check_kernel_impl(c->kernels.overrides.v[i], why, sizeof why))
            return fail_field(c, "kernels", "overrides", err, "item %d: %s", i + 1, why);
    }
    if (c->model.top_k.set && c->model.num_experts.set && c->model.top_k.v > c->model.num_experts.v)
        return fail_field(c, "model", "top_k", err, "%lld is more than model.num_experts (%lld)",
                          (long long)c->model.top_k.v, (long long)c->model.num_experts.v);
    model_args a;
    if (!c->model.config_path[0]) { /* a config.json is read when training starts */
        if (resolve_model(c, &a, err)) return -1;
        for (int i = 0; i < c->model.mlp_only_layers.n; i++)
            if (c->model.mlp_only_layers.v[i] >= a.n_layers)
                return fail_field(c, "model", "mlp_only_layers", err,
                                  "layer %lld does not exist (the model has %d)",
                                  (long long)c->model.mlp_only_layers.v[i], a.n_layers);
        if (a.n_experts == 0 && strcmp(c->model.moe_load_balance, "none"))
            return fail_field(c, "model", "moe_load_balance", err,
                              "'%s' needs a mixture-of-experts model (%s is dense)",
                              c->model.moe_load_balance, c->model.flavor);
    }
    if (c->checkpoint.initial_load_in_hf && !c->checkpoint.initial_load_model_only)
        return fail_field(c, "checkpoint", "initial_load_in_hf", err,
                          "needs checkpoint.initial_load_model_only = true");
    if (c->checkpoint.last_save_in_hf && !c->checkpoint.last_save_model_only)
        return fail_field(c, "checkpoint", "last_save_in_hf", err,
                          "needs checkpoint.last_save_model_only = true");
    const int64_t gbs = c->training.global_batch_size, lbs = c->training.local_batch_size;
    if (gbs > 0 && gbs % lbs)
        return fail_field(c, "training", "global_batch_size", err,
                          "%lld is not a multiple of training.local_batch_size (%lld)",
                          (long long)gbs, (long long)lbs);
    if (c->lr_scheduler.total_steps.set && c->lr_scheduler.total_steps.v < c->training.steps)
        return fail_field(c, "lr_scheduler", "total_steps", err,
                          "%lld is shorter than training.steps (%lld)",
                          (long long)c->lr_scheduler.total_steps.v, (long long)c->training.steps);
    return 0;
}

/* ---- to train_run ------------------------------------------------------------------- */

/* Joins a relative output path to job.dump_folder ("" = none -> NULL). */
static const char *output_path(train_config *c, const char *p) {
    if (!p[0]) return NULL;
    const char *d = c->job.dump_folder;
    if (p[0] == '/' || !d[0] || !strcmp(d, ".")) return p;
    char *s = malloc(strlen(d) + strlen(p) + 2);
    if (!s) return NULL;
    sprintf(s, "%s%s%s", d, d[strlen(d) - 1] == '/' ? "" : "/", p);
    return pool_keep(c, s);
}

int train_config_to_opts(train_config *c, train_opts *o, base_err *err) {
    if (train_config_validate(c, err)) return -1;
    train_opts_defaults(o);
    /* What titan cannot do yet is refused by name rather than ignored. */
    if (c->model.mlp_only_layers.n)
        return NOT_YET(model, mlp_only_layers,
                       "MoE models with dense blocks are not implemented (every block is MoE)");
    if (!c->training.dataset_path[0] && strcmp(c->training.dataset, "random"))
        return NOT_YET(training, dataset,
                       "'%s' is not built in: set training.dataset_path (or dataset = 'random')",
                       c->training.dataset);
    if (strcmp(c->optimizer.name, "AdamW"))
        return NOT_YET(optimizer, name, "%s is not implemented (AdamW is)", c->optimizer.name);
    if (c->parallelism.pipeline_parallel_degree > 1)
        return NOT_YET(parallelism, pipeline_parallel_degree,
                       "%lld: pipeline parallelism is not supported (use 1)",
                       (long long)c->parallelism.pipeline_parallel_degree);
    if (c->parallelism.context_parallel_degree > 1)
        return NOT_YET(parallelism, context_parallel_degree,
                       "%lld: context parallelism is not supported (use 1)",
                       (long long)c->parallelism.context_parallel_degree);
    o->par = (dist_mesh_cfg){(int)c->parallelism.data_parallel_replicate_degree,
                             (int)c->parallelism.data_parallel_shard_degree,
                             (int)c->parallelism.tensor_parallel_degree,
                             1,
                             1,
                             (int)c->parallelism.expert_parallel_degree};
    dist_reshard_parse(c->parallelism.fsdp_reshard_after_forward,
                       &o->reshard); /* checked by the schema */
    if (dist_mesh_resolve(&o->par, dist_world_size(), err)) return -1;
    const int64_t dp = (int64_t)o->par.dp_replicate * o->par.dp_shard;
    if (c->training.global_batch_size > 0 &&
        c->training.global_batch_size % (c->training.local_batch_size * dp))
        return fail_field(c, "training", "global_batch_size", err,
                          "%lld is not a multiple of local_batch_size %lld x %lld data-parallel "
                          "ranks",
                          (long long)c->training.global_batch_size,
                          (long long)c->training.local_batch_size, (long long)dp);
    if (!strcmp(c->activation_checkpoint.mode, "selective"))
        return NOT_YET(activation_checkpoint, mode,
                       "selective activation checkpointing is not implemented yet (none or full)");
    if (c->checkpoint.initial_load_path[0] && !c->checkpoint.enable)
        return NOT_YET(checkpoint, initial_load_path, "needs checkpoint.enable = true");

    if (resolve_model(c, &o->model, err)) return -1;
    if (o->model.max_seq_len > 0 && c->training.seq_len > o->model.max_seq_len)
        return fail_field(c, "training", "seq_len", err,
                          "%lld is above the model's max_seq_len %d (its RoPE context; "
                          "model.max_seq_len raises it)",
                          (long long)c->training.seq_len, o->model.max_seq_len);
    o->moe_balance = !strcmp(c->model.moe_load_balance, "aux_loss") ? MODEL_BALANCE_AUX_LOSS
                     : !strcmp(c->model.moe_load_balance, "bias")   ? MODEL_BALANCE_BIAS
                                                                    : MODEL_BALANCE_NONE;
    o->moe_bias_rate = c->model.moe_bias_update_rate;
    o->data_path = c->training.dataset_path[0] ? c->training.dataset_path : NULL;
    o->tokenizer_dir = c->model.hf_assets_path[0] ? c->model.hf_assets_path : NULL;
    data_format_parse(c->training.dataset_format, &o->data_format); /* checked by the schema */
    o->data_field = c->training.dataset_field;
    o->skip_bad_lines = c->training.skip_bad_lines;
    o->stop_after_step = (int)c->training.stop_after_step;
    o->dump_folder = NULL; /* output paths are joined here, by output_path */
    o->ckpt.enable = c->checkpoint.enable;
    o->ckpt.folder = output_path(c, c->checkpoint.folder);
    o->ckpt.interval = (int)c->checkpoint.interval;
    o->ckpt.keep_latest_k = (int)c->checkpoint.keep_latest_k;
    o->ckpt.load_step = c->checkpoint.load_step;
    o->ckpt.initial_load_path =
        c->checkpoint.initial_load_path[0] ? c->checkpoint.initial_load_path : NULL;
    o->ckpt.initial_load_in_hf = c->checkpoint.initial_load_in_hf;
    o->ckpt.initial_load_model_only = c->checkpoint.initial_load_model_only;
    o->ckpt.last_save_model_only = c->checkpoint.last_save_model_only;
    o->ckpt.async = strcmp(c->checkpoint.async_mode, "disabled") != 0;
    o->ckpt.last_save_in_hf = c->checkpoint.last_save_in_hf;
    o->export_dtype = c->checkpoint.export_dtype;
    o->assets_dir = o->tokenizer_dir;
    if (o->ckpt.enable && !o->ckpt.folder) return base_fail(err, "out of memory");
    o->batch = (int)c->training.local_batch_size;
    o->seq_len = (int)c->training.seq_len;
    o->steps = (int)c->training.steps;
    /* global = local x data-parallel ranks x accumulation steps */
    o->grad_accum = c->training.global_batch_size > 0
                        ? (int)(c->training.global_batch_size / c->training.local_batch_size / dp)
                        : 1;
    o->max_norm = c->training.max_norm;
    o->seed = (uint64_t)c->training.seed;
    o->ce_chunk = (int)c->training.ce_chunk;
    o->adamw = (optim_adamw_cfg){c->optimizer.lr, c->optimizer.beta1, c->optimizer.beta2,
                                 c->optimizer.eps, c->optimizer.weight_decay};
    o->lr.warmup_steps = c->lr_scheduler.warmup_steps;
    o->lr.total_steps = c->lr_scheduler.total_steps.set ? c->lr_scheduler.total_steps.v : 0;
    o->lr.decay_ratio = c->lr_scheduler.decay_ratio.set ? c->lr_scheduler.decay_ratio.v : -1;
    optim_decay_type_parse(c->lr_scheduler.decay_type, &o->lr.decay_type);
    o->lr.min_lr_factor = c->lr_scheduler.min_lr_factor;
    o->ac = !strcmp(c->activation_checkpoint.mode, "full") ? MODEL_AC_FULL : MODEL_AC_NONE;
    o->log_freq = (int)c->metrics.log_freq;
    o->peak_flops = c->metrics.peak_tflops * 1e12;
    o->sample_tokens = (int)c->job.sample_tokens;
    if (c->metrics.enable_jsonl && !(o->jsonl_path = output_path(c, c->metrics.save_jsonl_file)))
        return NOT_YET(metrics, save_jsonl_file, "must name a file (or out of memory)");
    if (c->metrics.enable_tensorboard && !(o->tb_dir = output_path(c, c->metrics.save_tb_folder)))
        return NOT_YET(metrics, save_tb_folder, "must name a folder (or out of memory)");
    if (c->validation.enable) {
        if (!c->validation.dataset_path[0])
            return NOT_YET(validation, dataset_path, "must name the held-out data");
        o->val.path = c->validation.dataset_path;
        o->val.freq = (int)c->validation.freq;
        o->val.steps = (int)c->validation.steps;
        o->val.batch = (int)c->validation.local_batch_size;
        o->val.seq_len = (int)c->validation.seq_len;
    }
    if (c->checkpoint.hf_export_folder[0] &&
        !(o->out_dir = output_path(c, c->checkpoint.hf_export_folder)))
        return base_fail(err, "out of memory");
    const int n = c->kernels.overrides.n;
    free(c->ovr);
    c->ovr = calloc((size_t)n + 1, sizeof *c->ovr);
    if (!c->ovr) return base_fail(err, "out of memory");
    for (int i = 0; i < n; i++) { /* "pattern=impl", checked on assignment */
        const char *s = c->kernels.overrides.v[i], *eq = strchr(s, '=');
        char *pattern = pool_keep(c, strndup(s, (size_t)(eq - s)));
        if (!pattern) return base_fail(err, "out of memory");
        c->ovr[i] = (ops_override){pattern, eq + 1};
    }
    o->kernel_overrides = c->ovr;
    o->n_kernel_overrides = n;
    return 0;
}

/* ---- printing and help -------------------------------------------------------------- */

static void print_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        const char *esc = *p == '"'    ? "\\\""
                          : *p == '\\' ? "\\\\"
                          : *p == '\n' ? "\\n"
                          : *p == '\t' ? "\\t"
                          : *p == '\r' ? "\\r"
                                       : NULL;
        if (esc)
            fputs(esc, f);
        else if (*p < 0x20 || *p == 0x7f)
            fprintf(f, "\\u%04X", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

/* The shortest %g form that reads back to the same double, always with '.' or 'e' so TOML
 * reads a float. */
static void print_float(FILE *f, double x) {
    char s[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(s, sizeof s, "%.*g", prec, x);
        if (strtod(s, NULL) == x) break;
    }
    fputs(s, f);
    if (!strpbrk(s, ".e")) fputs(".0", f);
}

static void print_value(FILE *out, const field *fd, const void *s) {
    switch (fd->type) {
    case T_STR:
        print_string(out, *(const char *const *)s);
        break;
    case T_INT:
        fprintf(out, "%lld",
                (long long)(fd->optional ? ((const train_opt_int *)s)->v : *(const int64_t *)s));
        break;
    case T_BOOL:
        fputs((fd->optional ? ((const train_opt_int *)s)->v : *(const int *)s) ? "true" : "false",
              out);
        break;
    case T_FLOAT:
        print_float(out, fd->optional ? ((const train_opt_float *)s)->v : *(const double *)s);
        break;
    case T_STRS: {
        const train_str_list *l = s;
        fputc('[', out);
        for (int i = 0; i < l->n; i++) {
            if (i) fputs(", ", out);
            print_string(out, l->v[i]);
        }
        fputc(']', out);
        break;
    }
    case T_INTS: {
        const train_int_list *l = s;
        fputc('[', out);
        for (int i = 0; i < l->n; i++) fprintf(out, "%s%lld", i ? ", " : "", (long long)l->v[i]);
        fputc(']', out);
        break;
    }
    }
}

static int is_unset(const field *fd, const void *s) {
    if (!fd->optional) return 0;
    return fd->type == T_FLOAT ? !((const train_opt_float *)s)->set
                               : !((const train_opt_int *)s)->set;
}

void train_config_print(const train_config *c, FILE *f) {
    fprintf(f, "# titan job config, resolved (titan train --print-config)\n");
    for (int i = 0; i < N_FIELDS; i++) {
        const field *fd = &g_fields[i];
        if (i == 0 || strcmp(fd->section, g_fields[i - 1].section))
            fprintf(f, "%s[%s]\n", i ? "\n" : "", fd->section);
        const void *s = slot(c, fd);
        if (is_unset(fd, s))
            fprintf(f, "# %s = (unset)  # %s\n", fd->key, fd->help);
        else {
            fprintf(f, "%s = ", fd->key);
            print_value(f, fd, s);
            fputc('\n', f);
        }
    }
}

void train_config_usage(FILE *f) {
    fprintf(f, "usage: titan train [--config FILE] [--section.key VALUE | --section.key=VALUE]...\n"
               "                   [--print-config] [--help]\n"
               "  --config FILE       a TOML job config (see configs/); the command line "
               "overrides it\n"
               "  --print-config      print the resolved config as TOML and exit\n"
               "  --section.key V     set one field (booleans: a bare --section.key means true;\n"
               "                      optional numbers: 'none' unsets; lists: [\"a\", \"b\"] or "
               "a,b)\n\n"
               "older flags, aliases of config fields:\n");
    for (int i = 0; i < N_ALIASES; i++) {
        if (i && !strcmp(g_aliases[i].flag, g_aliases[i - 1].flag)) continue;
        char lhs[64];
        snprintf(lhs, sizeof lhs, "%s%s", g_aliases[i].flag,
                 alias_takes_value(g_aliases[i].flag) ? " V" : "");
        if (g_aliases[i].kind == ALIAS_SET)
            fprintf(f, "  %-20s --model.KEY V\n", "--set KEY=V");
        else if (g_aliases[i].kind == ALIAS_GRAD_ACCUM)
            fprintf(f, "  %-20s --training.global_batch_size (V x local_batch_size)\n", lhs);
        else {
            fprintf(f, "  %-20s", lhs);
            for (int j = i; j < N_ALIASES && !strcmp(g_aliases[j].flag, g_aliases[i].flag); j++)
                fprintf(f, " --%s%s%s", g_aliases[j].field, g_aliases[j].value ? "=" : "",
                        g_aliases[j].value ? (g_aliases[j].value[0] ? g_aliases[j].value : "\"\"")
                                           : "");
            fputc('\n', f);
        }
    }
    train_config d; /* defaults allocate nothing: no train_config_free needed */
    train_config_defaults(&d);
    for (int i = 0; i < N_FIELDS; i++) {
        const field *fd = &g_fields[i];
        if (i == 0 || strcmp(fd->section, g_fields[i - 1].section))
            fprintf(f, "\n[%s]\n", fd->section);
        char def[96] = "";
        const void *s = slot(&d, fd);
        if (is_unset(fd, s))
            snprintf(def, sizeof def, "unset");
        else {
            char *buf = NULL;
            size_t len = 0;
            FILE *m = open_memstream(&buf, &len);
            if (m) {
                print_value(m, fd, s);
                fclose(m);
                snprintf(def, sizeof def, "%s", buf);
                free(buf);
            }
        }
        char range[96] = "";
        if (fd->choices)
            choices_list(fd->choices, range, sizeof range);
        else if (fd->type == T_INT || fd->type == T_FLOAT || fd->type == T_INTS)
            range_text(fd, range, sizeof range);
        fprintf(f, "  %-30s %-14s %s%s%s%s\n", fd->key, def, fd->help, range[0] ? " (" : "", range,
                range[0] ? ")" : "");
    }
}
