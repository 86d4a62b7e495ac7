/* train: whole-config checks and the one translation of a job config into train_opts
 * (titan train and titan plan both use it). The schema it reads is config.c's. */
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint/checkpoint.h"
#include "train/config_schema.h"

static int64_t lr_decay_steps(const train_config *c, int64_t *asked);

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

/* [[optimizer.param_groups]] carry each group's whole optimizer (torchtitan: "no implicit
 * inheritance"): [optimizer]'s own hyperparameters set beside them would be ignored, so they
 * are refused by name. */
static int param_groups_check(const train_config *c, base_err *err) {
    if (!c->optimizer.n_param_groups) return 0;
    const train_param_group *g = c->optimizer.param_groups;
    for (int fi = 0; fi < N_FIELDS; fi++) /* (in the schema's order: name, lr, beta1, ...) */
        if (train_param_groups_replace(&g_fields[fi]) && c->origin[fi].where)
            return fail_field(c, g_fields[fi].section, g_fields[fi].key, err,
                              "set beside [[optimizer.param_groups]] (%s:%d), whose groups each "
                              "carry their own optimizer_name and optimizer_kwargs: set it in "
                              "each group instead",
                              g->where, g->line);
    /* torchtitan passes {fused, foreach} from optimizer.implementation, then the group's
     * kwargs over them, and torch refuses both true (torch.optim's AdamW / Adam: DistMuon
     * takes neither) */
    const char *impl = c->optimizer.implementation;
    const int fused0 = !strcmp(impl, "fused") || !strcmp(impl, "fused_opt_states_bf16"),
              foreach0 = !strcmp(impl, "foreach");
    int muon = -1;
    for (int k = 0; k < c->optimizer.n_param_groups; k++) {
        const train_param_group *e = &g[k];
        const int fused = e->fused >= 0 ? e->fused : fused0,
                  foreach = e->foreach >= 0 ? e->foreach : foreach0;
        /* DistMuon's _validate_groups: one group, neither flag true */
        if (e->c.muon && muon >= 0)
            return base_fail(err,
                             "%s:%d:%d: optimizer.param_groups[%d]: a second DistMuon group "
                             "(the first is [%d]): torchtitan's DistMuon takes exactly one "
                             "parameter group (\"DistMuon requires exactly one parameter group\")",
                             e->where, e->line, e->col, k, muon);
        if (e->c.muon) muon = k;
        if (e->c.muon && (fused || foreach))
            return base_fail(err,
                             "%s:%d:%d: optimizer.param_groups[%d]: DistMuon with %s true "
                             "(torchtitan gives every group optimizer.implementation's fused / "
                             "foreach, \"%s\" here, and DistMuon refuses either): set "
                             "optimizer_kwargs %s, or optimizer.implementation = \"for-loop\"",
                             e->where, e->line, e->col, k,
                             fused && foreach ? "fused and foreach"
                             : fused          ? "fused"
                                              : "foreach",
                             impl,
                             fused && foreach ? "fused = false, foreach = false"
                             : fused          ? "fused = false"
                                              : "foreach = false");
        if (e->c.muon && !strcmp(impl, "fused_opt_states_bf16"))
            return base_fail(err,
                             "%s:%d:%d: optimizer.param_groups[%d] (DistMuon): "
                             "optimizer.implementation = \"fused_opt_states_bf16\" (AdamW's "
                             "moments in bf16) beside a DistMuon group is not implemented "
                             "(titan's moment buffer is bf16 for every parameter or for none, and "
                             "Muon's momentum stays fp32): use \"for-loop\"",
                             e->where, e->line, e->col, k);
        if (e->c.muon) continue;
        if (fused && foreach)
            return base_fail(err,
                             "%s:%d:%d: optimizer.param_groups[%d]: fused and foreach both true "
                             "(optimizer.implementation = \"%s\" and the group's "
                             "optimizer_kwargs): torch refuses them together",
                             e->where, e->line, e->col, k, impl);
    }
    return 0;
}

/* A sequence longer than the model's max_seq_len (its RoPE context, recorded in checkpoints and
 * exported as max_position_embeddings) raises it, with torchtitan's warning (its model args
 * take max_seq_len = training.seq_len); RoPE itself has no limit, so nothing else changes. */
static void raise_context(model_args *m, const char *what, int64_t seq_len) {
    if (m->max_seq_len <= 0 || seq_len <= m->max_seq_len) return;
    base_log(BASE_LOG_WARN,
             "Sequence length %lld exceeds original maximum %d: %s raises the model's "
             "max_seq_len to it, as torchtitan does",
             (long long)seq_len, m->max_seq_len, what);
    m->max_seq_len = (int)seq_len;
}

/* training.dataset_sources (a mixture) against dataset_path and its own weights and seed. */
static int mix_check(const train_config *c, base_err *err) {
    const train_str_list *src = &c->training.dataset_sources;
    const train_float_list *w = &c->training.dataset_weights;
    if (src->n && c->training.dataset_path[0])
        return fail_field(c, "training", "dataset_sources", err,
                          "set beside training.dataset_path: give the data one way (a "
                          "dataset_path alone, or every source of the mixture here)");
    if (src->n > DATA_MIX_MAX)
        return fail_field(c, "training", "dataset_sources", err, "%d sources; at most %d", src->n,
                          DATA_MIX_MAX);
    for (int i = 0; i < src->n; i++)
        if (!src->v[i][0])
            return fail_field(c, "training", "dataset_sources", err, "source %d is \"\"", i + 1);
    if (w->n && !src->n)
        return fail_field(c, "training", "dataset_weights", err,
                          "set without training.dataset_sources: dataset_path is one dataset, "
                          "nothing to weigh");
    if (w->n && w->n != src->n)
        return fail_field(c, "training", "dataset_weights", err,
                          "%d weights for %d training.dataset_sources: one a source", w->n, src->n);
    const train_str_list *f = &c->training.dataset_fields;
    if (f->n && f->n != src->n)
        return fail_field(c, "training", "dataset_fields", err,
                          "%d fields for %d training.dataset_sources: one a source (\"\" for "
                          "dataset_field)",
                          f->n, src->n);
    base_err e;
    if (w->n && data_mix_weights_check(w->v, w->n, &e))
        return fail_field(c, "training", "dataset_weights", err, "%s", e.msg);
    static const char *const mix_only[2] = {"dataset_weights", "dataset_mix_seed"};
    const int set[2] = {w->n > 0, c->training.dataset_mix_seed.set};
    for (int i = 0; i < 2; i++)
        if (set[i] && src->n == 1)
            return fail_field(c, "training", mix_only[i], err,
                              "set for one source: nothing is drawn (a mixture is two or more "
                              "training.dataset_sources)");
    if (c->training.dataset_mix_seed.set && !src->n)
        return fail_field(c, "training", "dataset_mix_seed", err,
                          "set without a mixture (training.dataset_sources of two or more): "
                          "nothing is drawn");
    return 0;
}

/* Whether the run reads files (a dataset_path or a mixture), not random tokens. */
static int has_data(const train_config *c) {
    return c->training.dataset_path[0] || c->training.dataset_sources.n;
}

/* A dataset_path is read by its files' format (text, JSON Lines' dataset_field, token shards),
 * whatever training.dataset says (a label then: torchtitan's c4 loaders read the same "text"
 * field, docs/config.md). "random" asked for on the command line beside a path contradicts
 * it: said (a file's is not: a saved config.toml writes the default beside the path). */

static void dataset_random_note(const train_config *c) {
    const int f = find_field("training", "dataset");
    if (has_data(c) && !strcmp(c->training.dataset, "random") && c->origin[f].where &&
        !c->origin[f].line)
        base_log(BASE_LOG_WARN,
                 "--training.dataset random is given, but training.dataset_path names files: "
                 "reading them (--random-tokens, or dataset_path = \"\", trains on random "
                 "tokens)");
}

/* debug.seed (torchtitan's key) and training.seed (titan's, --seed) name one seed: set in a
 * file and on the command line, the command line's wins (as for any field); both in the file,
 * debug.seed (a saved config.toml writes training.seed beside it); two different values on the
 * command line are refused, naming both, rather than one silently dropped. The seed resolved
 * is written into training.seed, and into debug.seed when that is set (the saved config and
 * --print-config say it so). */
static int resolve_seed(train_config *c, uint64_t *seed, base_err *err) {
    const int d = find_field("debug", "seed"), t = find_field("training", "seed");
    /* training.seed wins only when given on the command line and debug.seed is not */
    const int d_cli = c->origin[d].where && !c->origin[d].line,
              t_cli = c->origin[t].where && !c->origin[t].line;
    if (c->debug.seed.set && d_cli && t_cli && c->training.seed != c->debug.seed.v)
        return fail_field(c, "training", "seed", err,
                          "%lld, and debug.seed %lld set on the command line too: they name the "
                          "same seed; set one",
                          (long long)c->training.seed, (long long)c->debug.seed.v);
    *seed =
        (uint64_t)(c->debug.seed.set && !(t_cli && !d_cli) ? c->debug.seed.v : c->training.seed);
    c->training.seed = (int64_t)*seed;
    if (c->debug.seed.set) c->debug.seed.v = (int64_t)*seed;
    return 0;
}

int train_config_resolve_seed(train_config *c, base_err *err) {
    uint64_t seed;
    return resolve_seed(c, &seed, err);
}

/* What an initial load reads: checkpoint.initial_load_path, else (initial_load_in_hf, as
 * torchtitan) model.hf_assets_path; "" for none. */
static const char *initial_load_source(const train_config *c) {
    if (c->checkpoint.initial_load_path[0]) return c->checkpoint.initial_load_path;
    return c->checkpoint.initial_load_in_hf ? c->model.hf_assets_path : "";
}

/* The config.json the model is built from: model.config_path; else, while model.flavor is
 * left at its default, that of the Hugging Face folder an initial load reads (a fine-tune
 * names its folder once); "" = the flavor. */
const char *model_config_path(const train_config *c) {
    if (c->model.config_path[0]) return c->model.config_path;
    const char *src = initial_load_source(c);
    if (!c->checkpoint.enable || !src[0] || c->origin[find_field("model", "flavor")].where ||
        !base_has_file(src, "config.json"))
        return "";
    return src;
}

static int resolve_model(const train_config *c, model_args *a, base_err *err) {
    if (c->model.config_path[0] && c->origin[find_field("model", "flavor")].where)
        base_log(BASE_LOG_WARN,
                 "model.flavor = \"%s\" is ignored: model.config_path %s names the model",
                 c->model.flavor, c->model.config_path);
    if (model_config_path(c)[0]) { /* a HF config.json (or a folder holding one) */
        char p[4200];
        const char *cp = model_config_path(c);
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
    } else if (!strcmp(a->flavor, "235B-A22B") && !c->model.rope_theta.set) {
        /* once: the model is resolved repeatedly */
        base_log_once(BASE_LOG_INFO,
                      "flavor 235B-A22B: RoPE base 1e6, as HF's Qwen3-235B-A22B config.json; "
                      "torchtitan's flavor has 5e6 (the 2507 checkpoints'): "
                      "--model.rope_theta 5e6 for it (docs/moe.md)");
    }
    return apply_model_overrides(c, a, err);
}

/* The [model] overrides of titan train's config and the model arguments they set, one per
 * MODEL_ARGS_TABLE row (the field named by the row's cfg_key, the argument by its field): the
 * translation's and titan plan's --set's table. */
static const struct {
    const char *field, *arg;
    size_t cfg, dst; /* offsets in train_config, model_args */
    int real;        /* a train_opt_float field and a double argument (else _int and int) */
} model_overrides[] = {
#define OV(f, type, kind, group, key, ...)                                                         \
    {#key, #f, offsetof(train_config, model.key), offsetof(model_args, f),                         \
     _Generic(((model_args *)0)->f, double : 1, int : 0)},
    MODEL_ARGS_TABLE(OV)
#undef OV
};
/* A kind's train_opt type and the field's C type agree (MODEL_ARGS_TABLE's POS and NONNEG
 * rows are doubles, INT and BOOL ints): the copy above depends on it. */
#define OV_TYPES(f, type, kind, group, key, ...)                                                   \
    _Static_assert(_Generic(((train_config *)0)->model.key, train_opt_float : 1, default : 0) ==   \
                       _Generic(((model_args *)0)->f, double : 1, default : 0),                    \
                   "model." #key ": the override's type is not the argument's");
MODEL_ARGS_TABLE(OV_TYPES)
#undef OV_TYPES
#define N_OVERRIDES (sizeof model_overrides / sizeof model_overrides[0])

const char *train_model_override_field(const char *arg, size_t n) {
    for (size_t i = 0; i < N_OVERRIDES; i++)
        if (strlen(model_overrides[i].arg) == n && !strncmp(arg, model_overrides[i].arg, n))
            return model_overrides[i].field;
    return NULL;
}

static int apply_model_overrides(const train_config *c, model_args *a, base_err *err) {
    const char *cb = (const char *)c;
    char *ab = (char *)a;
    for (size_t i = 0; i < N_OVERRIDES; i++) {
        const size_t co = model_overrides[i].cfg, ao = model_overrides[i].dst;
        if (model_overrides[i].real) {
            const train_opt_float *v = (const train_opt_float *)(cb + co);
            if (v->set) *(double *)(ab + ao) = v->v;
        } else {
            const train_opt_int *v = (const train_opt_int *)(cb + co);
            if (v->set) *(int *)(ab + ao) = (int)v->v;
        }
    }
    if (model_args_validate(a, err)) {
        /* Blame the first override whose argument the message names, else the flavor. */
        char msg[sizeof err->msg];
        snprintf(msg, sizeof msg, "%s", err->msg);
        const char *key = "flavor";
        for (size_t i = 0; i < N_OVERRIDES && !strcmp(key, "flavor"); i++) {
            const int set = model_overrides[i].real
                                ? ((const train_opt_float *)(cb + model_overrides[i].cfg))->set
                                : ((const train_opt_int *)(cb + model_overrides[i].cfg))->set;
            if (set && strstr(msg, model_overrides[i].arg)) key = model_overrides[i].field;
        }
        return fail_field(c, "model", key, err, "%s with the [model] overrides: %s",
                          c->model.flavor, msg);
    }
    return 0;
}

/* Whether the model may come from a config.json (model_config_path without looking at the
 * disk): validation, which reads no file, leaves its checks to the translation then. */
static int model_from_file(const train_config *c) {
    return c->model.config_path[0] || (c->checkpoint.enable && initial_load_source(c)[0] &&
                                       !c->origin[find_field("model", "flavor")].where);
}

/* The [model] fields that depend on the resolved model a. */
static int check_model(const train_config *c, const model_args *a, base_err *err) {
    for (int i = 0; i < c->model.mlp_only_layers.n; i++)
        if (c->model.mlp_only_layers.v[i] >= a->n_layers)
            return fail_field(c, "model", "mlp_only_layers", err,
                              "layer %lld does not exist (the model has %d)",
                              (long long)c->model.mlp_only_layers.v[i], a->n_layers);
    if (a->n_experts == 0 && strcmp(c->model.moe_load_balance, "none"))
        return fail_field(c, "model", "moe_load_balance", err,
                          "'%s' needs a mixture-of-experts model (%s is dense)",
                          c->model.moe_load_balance, a->flavor);
    if (c->model.depth_init.set && strcmp(c->model.init_weights, "torchtitan"))
        return fail_field(c, "model", "depth_init", err,
                          "applies to init_weights = \"torchtitan\" only (init_weights is "
                          "\"%s\")",
                          c->model.init_weights);
    /* torchtitan's varlen (v0.2.2: block_causal only) never attends across documents, nor does
     * 0.3's flex (block_causal always: get_attention_config, which refuses sdpa for language
     * models); v0.2.2's flex and sdpa default to causal. Said once: the model is resolved
     * repeatedly. */
    const char *mask = c->model.attn_mask_type;
    /* torchtitan 0.3's chat examples are packed whole with padding and attended one by one */
    if (!strcmp(c->training.dataset_format, "chat") && !strcmp(mask, "causal"))
        return fail_field(c, "model", "attn_mask_type", err,
                          "'causal' with training.dataset_format = chat: chat examples are packed "
                          "several to a row and attended one by one (block_causal, the default "
                          "with chat)");
    if (mix_check(c, err)) return -1;
    if (!strcmp(c->training.dataset_format, "chat") && !has_data(c))
        return fail_field(c, "training", "dataset_format", err,
                          "chat without training.dataset_path: chat examples are read from a "
                          "JSON Lines file (random tokens have none)");
    if (c->training.dataset_streaming.set && !has_data(c))
        return fail_field(c, "training", "dataset_streaming", err,
                          "set without training.dataset_path: random tokens are no dataset to "
                          "read in either order");
    if (!strcmp(c->training.dataset_format, "chat") && !c->model.hf_assets_path[0])
        return fail_field(c, "training", "dataset_format", err,
                          "chat needs model.hf_assets_path: the tokenizer whose chat template "
                          "and eos the examples are rendered with");
    if (!strcmp(c->model.attn_backend, "varlen") && !strcmp(mask, "causal"))
        return fail_field(c, "model", "attn_mask_type", err,
                          "'causal' with attn_backend = varlen: torchtitan's varlen attention "
                          "masks documents (block_causal, its default here)");
    if (!strcmp(c->model.attn_backend, "varlen") && !mask[0])
        base_log_once(BASE_LOG_INFO,
                      "model.attn_backend = varlen: attention within each document "
                      "(attn_mask_type block_causal, as torchtitan's varlen; until titan "
                      "2026-12-06 titan ran it causal over the window: attn_backend = \"sdpa\" "
                      "for those losses)");
    if (!strcmp(c->model.attn_backend, "flex") && !mask[0] &&
        strcmp(c->training.dataset_format, "chat"))
        base_log_once(BASE_LOG_WARN,
                      "model.attn_backend = flex with attn_mask_type unset: causal over the whole "
                      "window (v0.2.2's default); torchtitan 0.3's flex is always block_causal "
                      "(each document attended alone, positions and labels restarting at each): "
                      "set model.attn_mask_type = \"block_causal\" for it (docs/training.md)");
    return 0;
}

/* The overrides' implementations exist (with the plugins' kernels once they are loaded). */
static int check_kernel_impls(const train_config *c, base_err *err) {
    for (int i = 0; i < c->kernels.overrides.n; i++) {
        char why[600];
        if (check_kernel_impl(c->kernels.overrides.v[i], why, sizeof why))
            return fail_field(c, "kernels", "overrides", err, "item %d: %s", i + 1, why);
    }
    return 0;
}

int train_config_validate(const train_config *c, base_err *err) {
    /* Validation has no side effects: plugins (native code: their constructors run when they
     * are opened) are loaded by train_config_to_opts, for a run, and only then can overrides
     * naming their kernels be checked. */
    if (!c->kernels.plugins.n && check_kernel_impls(c, err)) return -1;
    if (c->model.top_k.set && c->model.num_experts.set && c->model.top_k.v > c->model.num_experts.v)
        return fail_field(c, "model", "top_k", err, "%lld is more than model.num_experts (%lld)",
                          (long long)c->model.top_k.v, (long long)c->model.num_experts.v);
    model_args a; /* a config.json is read by the translation, which checks the model then */
    if (!model_from_file(c) && (resolve_model(c, &a, err) || check_model(c, &a, err))) return -1;
    /* torchtitan strips it first: "" would join to the dump folder itself, " " to a folder
     * named by a space */
    const char *cf = c->checkpoint.folder;
    while (isspace((unsigned char)*cf)) cf++;
    if (!*cf)
        return fail_field(c, "checkpoint", "folder", err,
                          "cannot be empty (a folder under job.dump_folder, or an absolute "
                          "path)");
    if (c->checkpoint.initial_load_in_hf && !c->checkpoint.initial_load_model_only)
        return fail_field(c, "checkpoint", "initial_load_in_hf", err,
                          "needs checkpoint.initial_load_model_only = true");
    if (c->checkpoint.last_save_in_hf && !c->checkpoint.last_save_model_only)
        return fail_field(c, "checkpoint", "last_save_in_hf", err,
                          "needs checkpoint.last_save_model_only = true");
    if (!strcmp(c->training.mixed_precision_reduce, "bfloat16"))
        return fail_field(c, "training", "mixed_precision_reduce", err,
                          "bfloat16 gradient reduction is not supported: titan reduce-scatters "
                          "and all-reduces gradients in float32 (torchtitan's default); set "
                          "float32 or leave it out");
    const int64_t gbs = c->training.global_batch_size, lbs = c->training.local_batch_size;
    if (gbs > 0 && gbs % lbs)
        return fail_field(c, "training", "global_batch_size", err,
                          "%lld is not a multiple of training.local_batch_size (%lld)",
                          (long long)gbs, (long long)lbs);
    if (c->lr_scheduler.total_steps.set && c->lr_scheduler.total_steps.v < c->training.steps &&
        lr_decay_steps(c, NULL) == 0 && c->training.steps > c->lr_scheduler.total_steps.v + 1)
        return fail_field(c, "lr_scheduler", "total_steps", err,
                          "%lld is shorter than training.steps (%lld) and leaves no decay steps: "
                          "torchtitan's schedule stops with an assertion after step %lld",
                          (long long)c->lr_scheduler.total_steps.v, (long long)c->training.steps,
                          (long long)c->lr_scheduler.total_steps.v + 1);
    return 0;
}

int train_config_precision(const train_config *c, ops_prec *prec, char *why, size_t n,
                           base_err *err) {
    return train_precision_resolve("training.mixed_precision_param",
                                   c->training.mixed_precision_param, prec, why, n, err);
}

const char *train_prec_name(ops_prec p) {
    return p == OPS_PREC_BF16 ? "bfloat16" : "float32";
}

/* model_balance's values by model.moe_load_balance's names (the schema checks the field) */
static const char *const k_balance_names[3] = {"none", "aux_loss", "bias"};

const char *train_balance_name(model_balance b) {
    return k_balance_names[b];
}

int train_precision_resolve(const char *key, const char *v, ops_prec *prec, char *why, size_t n,
                            base_err *err) {
    if (v && v[0] && strcmp(v, "bfloat16") && strcmp(v, "float32"))
        return base_fail(err, "%s '%s': expected bfloat16 or float32", key, v);
    const int native = ops_bf16_native();
    const char *env = getenv("TITAN_MIXED_PRECISION");
    if ((!v || !v[0]) && env && env[0]) { /* the test suite's pin of the CPU-dependent default */
        if (strcmp(env, "float32") && strcmp(env, "bfloat16"))
            return base_fail(err, "TITAN_MIXED_PRECISION=%s: expected float32 or bfloat16", env);
        v = env;
        snprintf(why, n, "%s (TITAN_MIXED_PRECISION)", env);
    } else if (!v || !v[0]) {
        v = native ? "bfloat16" : "float32";
        snprintf(why, n, "%s (default: this CPU %s bf16 units, AMX-BF16 / AVX512_BF16)", v,
                 native ? "has" : "has no");
    } else {
        snprintf(why, n, "%s (set)", v);
    }
    *prec = strcmp(v, "bfloat16") ? OPS_PREC_F32 : OPS_PREC_BF16;
    if (*prec == OPS_PREC_BF16 && !native) {
        if (dist_world_rank() == 0) /* once per job, not once per rank */
            base_log(BASE_LOG_WARN,
                     "%s: bfloat16 on a CPU without bf16 units (no AMX-BF16 / AVX512_BF16): bf16 "
                     "GEMMs are emulated (bf16 numerics, slower than float32)",
                     v == env ? "TITAN_MIXED_PRECISION" : key);
        snprintf(why + strlen(why), n - strlen(why), "; emulated: no bf16 units");
    }
    return 0;
}

/* The steps the LR schedule spans: lr_scheduler.total_steps, else training.steps. */
static int64_t lr_total_steps(const train_config *c) {
    return c->lr_scheduler.total_steps.set ? c->lr_scheduler.total_steps.v : c->training.steps;
}

/* Decay steps of the LR schedule, as torchtitan's build_lr_schedulers counts them; *asked
 * (may be NULL): before its clamp to the steps warmup leaves. */
static int64_t lr_decay_steps(const train_config *c, int64_t *asked) {
    const int64_t n = lr_total_steps(c);
    const int64_t w = c->lr_scheduler.warmup_steps < n ? c->lr_scheduler.warmup_steps : n;
    int64_t d = c->lr_scheduler.decay_ratio.set
                    ? (int64_t)nearbyint((double)n * c->lr_scheduler.decay_ratio.v)
                    : n - w;
    if (asked) *asked = d;
    return w + d > n ? n - w : d;
}

/* Whether field f holds its default: for torchtitan keys titan does not act on, the value
 * that asks for nothing. */
static int at_default(const train_config *c, const field *f) {
    const void *s = slot(c, f);
    if (f->optional || f->type == T_ANY) return is_unset(f, s);
    switch (f->type) {
    case T_STR:
        return !strcmp(*(const char *const *)s, f->def_s);
    case T_INT:
        return *(const int64_t *)s == (int64_t)f->def;
    case T_BOOL:
        return *(const int *)s == (int)f->def;
    case T_FLOAT:
        return *(const double *)s == f->def;
    case T_STRS:
        return ((const train_str_list *)s)->n == 0;
    case T_INTS:
        return ((const train_int_list *)s)->n == 0;
    case T_FLOATS:
        return ((const train_float_list *)s)->n == 0;
    case T_ANY:
        break;
    }
    return 1;
}

/* torchtitan keys for features titan lacks: a P_REFUSE field away from its default is refused
 * by name, a P_NOTE one is logged (the run goes on); torchtitan's deprecated and renamed keys
 * are applied with its warnings. */
/* A file or folder setting titan uses (its key ends in path, folder or file; not one it
 * accepts and ignores) given as a URL: titan reads and writes local paths only, where
 * "s3://b/ck" would silently be a local folder "s3:/b/ck" (torchtitan 0.3's checkpointer
 * takes any "scheme://" folder through fsspec, tools/filesystem.py). */
static int remote_path_check(train_config *c, base_err *err) {
    static const char *const ends[] = {"path", "folder", "file"};
    for (int i = 0; i < N_FIELDS; i++) {
        const field *f = &g_fields[i];
        const char *v =
            f->type == T_STR && f->policy == P_USED ? *(const char *const *)slot(c, f) : NULL;
        const size_t k = strlen(f->key);
        if (!v || !strstr(v, "://")) continue;
        for (size_t e = 0; e < sizeof ends / sizeof ends[0]; e++)
            if (k >= strlen(ends[e]) && !strcmp(f->key + k - strlen(ends[e]), ends[e]))
                return fail_field(c, f->section, f->key, err,
                                  "'%.200s' is a URL; titan reads and writes local paths only "
                                  "(%s)",
                                  v,
                                  !strncmp(v, "file://", 7)
                                      ? "give the path itself, without file://"
                                      : "mount the storage, or copy to and from it; torchtitan "
                                        "0.3's checkpointer takes fsspec URLs");
    }
    return 0;
}

static int compat_check(train_config *c, base_err *err) {
    if (remote_path_check(c, err)) return -1;
    if (strcmp(c->model.name, "qwen3"))
        return NOT_YET(model, name, "'%s' is not implemented (qwen3 is)", c->model.name);
    if (!strcmp(c->activation_checkpoint.mode, "memory_budget"))
        return NOT_YET(activation_checkpoint, mode,
                       "memory_budget (torch's min-cut recomputation) is not implemented (none, "
                       "full or selective)");
    for (int i = 0; i < N_FIELDS; i++) {
        const field *f = &g_fields[i];
        if ((f->policy != P_REFUSE && f->policy != P_NOTE) || at_default(c, f)) continue;
        if (f->policy == P_REFUSE)
            return fail_field(c, f->section, f->key, err, "not supported by titan: %s", f->help);
        base_log(BASE_LOG_WARN, "%s.%s is set but has no effect in titan: %s", f->section, f->key,
                 f->help);
    }
    if (c->model.tokenizer_path[0]) { /* torchtitan's manager.py: the same warning */
        base_log(BASE_LOG_WARN, "tokenizer_path is deprecated, use model.hf_assets_path instead. "
                                "Setting hf_assets_path to tokenizer_path temporarily.");
        c->model.hf_assets_path = c->model.tokenizer_path;
    }
    if (c->lr_scheduler.total_steps.set && c->lr_scheduler.total_steps.v < c->training.steps)
        base_log(BASE_LOG_WARN,
                 "lr_scheduler.total_steps %lld < training.steps %lld: as in torchtitan, the "
                 "decay curve continues past its end (linear and sqrt go below min_lr_factor)",
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

/* The resolved config as train_config_print writes it (the TOML --config loads back), once:
 * its FNV-1a is what every rank of a run must share (o->config_hash), and the trainer saves
 * it as {dump_folder}/config.toml, as torchtitan saves its job config, never over the
 * --config file itself, which would replace the user's file and its comments. */
static int config_resolved(train_config *c, train_opts *o, base_err *err) {
    char *text = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&text, &n);
    if (!f) return base_fail(err, "out of memory");
    train_config_print(c, f);
    const char *path = fclose(f) ? NULL : output_path(c, "config.toml");
    if (!pool_keep(c, text) || !path) return base_fail(err, "out of memory");
    o->config_hash = base_hash_bytes(BASE_HASH_INIT, text, n);
    struct stat a, b;
    if (c->file && !stat(c->file, &a) && !stat(path, &b) && a.st_dev == b.st_dev &&
        a.st_ino == b.st_ino) {
        base_log(BASE_LOG_INFO, "%s is this job's --config: the resolved config is not saved",
                 path);
        return 0;
    }
    o->config_toml = text;
    o->config_path = path;
    return 0;
}

int train_config_to_opts(train_config *c, train_opts *o, base_err *err) {
    if (train_config_validate(c, err)) return -1;
    for (int i = 0; i < c->kernels.plugins.n; i++) { /* before the overrides that use them */
        base_err e;
        if (ops_plugin_load(c->kernels.plugins.v[i], &e))
            return fail_field(c, "kernels", "plugins", err, "item %d: %s", i + 1, e.msg);
    }
    if (c->kernels.plugins.n && check_kernel_impls(c, err)) return -1;
    return train_config_translate(c, dist_world_size(), o, err) || config_resolved(c, o, err) ? -1
                                                                                              : 0;
}

int train_config_translate(train_config *c, int world, train_opts *o, base_err *err) {
    if (train_config_validate(c, err)) return -1;
    /* every field of o comes from the schema's values: defaults live there alone */
    memset(o, 0, sizeof *o);
    if (compat_check(c, err)) return -1;
    /* What titan cannot do yet is refused by name rather than ignored. */
    if (c->model.mlp_only_layers.n)
        return NOT_YET(model, mlp_only_layers,
                       "MoE models with dense blocks are not implemented (every block is MoE)");
    if (!has_data(c) && strcmp(c->training.dataset, "random"))
        return NOT_YET(training, dataset,
                       "'%s' is not built in: set training.dataset_path (or dataset = 'random')",
                       c->training.dataset);
    dataset_random_note(c);
    if (param_groups_check(c, err)) return -1;
    if (c->parallelism.pipeline_parallel_degree > 1)
        return NOT_YET(parallelism, pipeline_parallel_degree,
                       "%lld: pipeline parallelism is not supported (use 1)",
                       (long long)c->parallelism.pipeline_parallel_degree);
    if (c->parallelism.context_parallel_degree > 1)
        return NOT_YET(parallelism, context_parallel_degree,
                       "%lld: context parallelism is not supported (use 1)",
                       (long long)c->parallelism.context_parallel_degree);
    o->par = (dist_mesh_cfg){.dp_replicate = (int)c->parallelism.data_parallel_replicate_degree,
                             .dp_shard = (int)c->parallelism.data_parallel_shard_degree,
                             .tp = (int)c->parallelism.tensor_parallel_degree,
                             .pp = 1,
                             .cp = 1,
                             .ep = (int)c->parallelism.expert_parallel_degree};
    dist_reshard_parse(c->parallelism.fsdp_reshard_after_forward,
                       &o->reshard); /* checked by the schema */
    if (dist_mesh_resolve(&o->par, world, err)) return -1;
    /* sequence parallelism splits each microbatch's tokens over the tp ranks: refused here,
     * naming the fields, for plan as for train (the model refused it at build, naming none) */
    const int64_t tp = o->par.tp;
    if (tp > 1 && c->training.local_batch_size * c->training.seq_len % tp)
        return fail_field(c, "parallelism", "tensor_parallel_degree", err,
                          "%lld: training.local_batch_size x training.seq_len (%lld x %lld "
                          "tokens) must be a multiple of it (sequence parallelism splits them)",
                          (long long)tp, (long long)c->training.local_batch_size,
                          (long long)c->training.seq_len);
    if (tp > 1 && c->validation.enable &&
        c->validation.local_batch_size * c->validation.seq_len % tp)
        return fail_field(c, "parallelism", "tensor_parallel_degree", err,
                          "%lld: validation.local_batch_size x validation.seq_len (%lld x %lld "
                          "tokens) must be a multiple of it (sequence parallelism splits them)",
                          (long long)tp, (long long)c->validation.local_batch_size,
                          (long long)c->validation.seq_len);
    const int64_t dp = (int64_t)o->par.dp_replicate * o->par.dp_shard;
    if (c->grad_accum_steps > 0) /* --grad-accum K: K microbatches on each rank */
        c->training.global_batch_size = c->grad_accum_steps * c->training.local_batch_size * dp;
    if (c->training.global_batch_size > 0 &&
        c->training.global_batch_size % (c->training.local_batch_size * dp))
        return fail_field(c, "training", "global_batch_size", err,
                          "%lld is not a multiple of local_batch_size %lld x %lld data-parallel "
                          "ranks",
                          (long long)c->training.global_batch_size,
                          (long long)c->training.local_batch_size, (long long)dp);
    /* initial_load_path turns checkpointing on unless checkpoint.enable was set: the same
     * whether it came from --initial-load-path, --checkpoint.initial_load_path or a file */
    if (c->checkpoint.initial_load_path[0] && !c->checkpoint.enable) {
        if (c->origin[find_field("checkpoint", "enable")].where)
            return NOT_YET(checkpoint, initial_load_path, "needs checkpoint.enable = true");
        c->checkpoint.enable = 1;
        /* torchtitan ignores initial_load_path while checkpointing is off: say what differs */
        base_log(BASE_LOG_INFO,
                 "checkpoint.initial_load_path is set: checkpointing is on (checkpoint.enable = "
                 "true; saves go to checkpoint.folder, every checkpoint.interval steps and at "
                 "the end); set checkpoint.enable = false to refuse instead");
    }
    if (c->checkpoint.initial_load_in_hf && !c->checkpoint.enable)
        return NOT_YET(checkpoint, initial_load_in_hf, "needs checkpoint.enable = true");
    if (c->checkpoint.initial_load_in_hf && !initial_load_source(c)[0])
        return NOT_YET(checkpoint, initial_load_in_hf,
                       "names no folder to load: set checkpoint.initial_load_path or "
                       "model.hf_assets_path");
    if (c->checkpoint.create_seed_checkpoint && !c->checkpoint.enable)
        return NOT_YET(checkpoint, create_seed_checkpoint, "needs checkpoint.enable = true");
    if (c->checkpoint.create_seed_checkpoint && c->checkpoint.load_only)
        return NOT_YET(checkpoint, create_seed_checkpoint,
                       "saves a checkpoint: it cannot go with checkpoint.load_only");
    if (c->checkpoint.create_seed_checkpoint && world > 1)
        return NOT_YET(checkpoint, create_seed_checkpoint,
                       "runs on 1 rank (this job has %d); the seed loads into any number", world);

    if (resolve_model(c, &o->model, err) || check_model(c, &o->model, err)) return -1;
    raise_context(&o->model, "training.seq_len", c->training.seq_len);
    o->moe_balance = MODEL_BALANCE_NONE;
    for (int b = 0; b < 3; b++)
        if (!strcmp(c->model.moe_load_balance, k_balance_names[b]))
            o->moe_balance = (model_balance)b;
    o->moe_bias_rate = c->model.moe_bias_update_rate;
    model_init_parse(c->model.init_weights, &o->init.scheme, err); /* checked by the schema */
    o->init.std_by_n_layers = c->model.depth_init.set && !c->model.depth_init.v;
    o->block_causal =
        !strcmp(c->model.attn_mask_type, "block_causal") ||
        (!c->model.attn_mask_type[0] &&
         (!strcmp(c->model.attn_backend, "varlen") || !strcmp(c->training.dataset_format, "chat")));
    const train_str_list *mix = &c->training.dataset_sources;
    o->data_path = mix->n                        ? mix->v[0]
                   : c->training.dataset_path[0] ? c->training.dataset_path
                                                 : NULL;
    o->n_data = mix->n ? mix->n : o->data_path != NULL;
    o->data_paths = mix->n ? mix->v : NULL;
    o->data_weights =
        mix->n > 1 && c->training.dataset_weights.n ? c->training.dataset_weights.v : NULL;
    o->data_fields = c->training.dataset_fields.n ? c->training.dataset_fields.v : NULL;
    o->mix_seed = c->training.dataset_mix_seed.set ? (uint64_t)c->training.dataset_mix_seed.v : 42;
    o->tokenizer_dir = c->model.hf_assets_path[0] ? c->model.hf_assets_path : NULL;
    data_format_parse(c->training.dataset_format, &o->data_format); /* checked by the schema */
    o->data_field = c->training.dataset_field;
    o->skip_bad_lines = c->training.skip_bad_lines;
    o->map_style = c->training.dataset_streaming.set ? !c->training.dataset_streaming.v
                                                     : o->data_format == DATA_FMT_CHAT;
    o->stop_after_step = (int)c->training.stop_after_step;
    o->dump_folder = NULL; /* output paths are joined here, by output_path */
    o->ckpt.enable = c->checkpoint.enable;
    o->ckpt.folder = output_path(c, c->checkpoint.folder);
    o->ckpt.interval = (int)c->checkpoint.interval;
    o->ckpt.keep_latest_k = (int)c->checkpoint.keep_latest_k;
    o->ckpt.load_step = c->checkpoint.load_step;
    o->ckpt.initial_load_path = initial_load_source(c)[0] ? initial_load_source(c) : NULL;
    o->ckpt.initial_load_in_hf = c->checkpoint.initial_load_in_hf;
    o->ckpt.initial_load_model_only = c->checkpoint.initial_load_model_only;
    o->ckpt.last_save_model_only = c->checkpoint.last_save_model_only;
    o->ckpt.async = strcmp(c->checkpoint.async_mode, "disabled") != 0;
    o->ckpt.last_save_in_hf = c->checkpoint.last_save_in_hf;
    for (int i = 0; i < c->checkpoint.exclude_from_loading.n; i++)
        o->ckpt.exclude |= train_ckpt_part_parse(c->checkpoint.exclude_from_loading.v[i]);
    o->ckpt.load_only = c->checkpoint.load_only;
    o->ckpt.first_step = c->checkpoint.enable_first_step_checkpoint;
    o->ckpt.create_seed = c->checkpoint.create_seed_checkpoint;
    ckpt_export_dtype_parse(c->checkpoint.export_dtype, &o->export_dtype); /* schema-checked */
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
    if (resolve_seed(c, &o->seed, err)) return -1;
    o->ce_chunk = (int)c->training.ce_chunk;
    if (train_config_precision(c, &o->prec, o->prec_why, sizeof o->prec_why, err)) return -1;
    /* the tests' fp32 reference of every bf16 transport; the two switches it replaced are
     * refused, not ignored (a run that meant to set one would silently move bf16) */
    const char *const old_env[] = {"TITAN_FSDP_GATHER", "TITAN_BF16_EXCHANGE"};
    for (size_t i = 0; i < sizeof old_env / sizeof *old_env; i++)
        if (getenv(old_env[i]))
            return base_fail(err,
                             "%s is no longer read: set TITAN_BF16_TRANSPORT=float32 instead "
                             "(every collective a bf16 run moves in bf16 moves fp32) and unset %s",
                             old_env[i], old_env[i]);
    const char *xf = getenv("TITAN_BF16_TRANSPORT");
    if (xf && xf[0] && strcmp(xf, "float32") && strcmp(xf, "auto"))
        return base_fail(err, "TITAN_BF16_TRANSPORT: '%s': expected float32 or auto", xf);
    o->transport_f32 = xf && !strcmp(xf, "float32");
    const char *ag = getenv("TITAN_ACTS_IN_GRADS");
    if (ag && ag[0] && strcmp(ag, "0") && strcmp(ag, "1"))
        return base_fail(err, "TITAN_ACTS_IN_GRADS: '%s': expected 0 or 1", ag);
    /* a gradient written once a step, after the saved activations it shares pages with are
     * read: one microbatch (accumulation keeps gradients across forwards), one rank (FSDP owns
     * the gradients; the tests of TP / EP / DDP run without it) */
    o->acts_in_grads = world == 1 && o->grad_accum == 1 && !(ag && !strcmp(ag, "0"));
    o->adamw = (optim_adamw_cfg){.lr = c->optimizer.lr,
                                 .beta1 = c->optimizer.beta1,
                                 .beta2 = c->optimizer.beta2,
                                 .eps = c->optimizer.eps,
                                 .weight_decay = c->optimizer.weight_decay,
                                 .adam = !strcmp(c->optimizer.name, "Adam")};
    /* torchtitan 0.3: Adam / AdamW moments created in bf16 for torch's fused mixed-precision
     * kernel (fp32 parameters, bf16 states) */
    o->adam_bf16 = !strcmp(c->optimizer.implementation, "fused_opt_states_bf16");
    o->param_groups = c->optimizer.param_groups;
    o->n_param_groups = c->optimizer.n_param_groups;
    if (o->n_param_groups) o->adamw = o->param_groups[0].c;
    o->lr.warmup_steps = c->lr_scheduler.warmup_steps;
    /* clamped by the schedule; torchtitan's warning, where warmup_steps was set (its default,
     * 200, is above any short run's steps) */
    if (c->lr_scheduler.warmup_steps > lr_total_steps(c) &&
        c->origin[find_field("lr_scheduler", "warmup_steps")].where)
        base_log(BASE_LOG_WARN,
                 "Warmup steps (%lld) exceed total steps (%lld). Adjusting warmup steps to %lld.",
                 (long long)c->lr_scheduler.warmup_steps, (long long)lr_total_steps(c),
                 (long long)lr_total_steps(c));
    int64_t asked; /* torchtitan's second warning: decay_ratio's steps clamped */
    const int64_t decay = lr_decay_steps(c, &asked);
    if (asked != decay)
        base_log(BASE_LOG_WARN,
                 "Warmup (%lld) + decay (%lld) steps exceed total steps (%lld). Adjusting decay "
                 "steps to %lld.",
                 (long long)(lr_total_steps(c) - decay), (long long)asked,
                 (long long)lr_total_steps(c), (long long)decay);
    o->lr.total_steps = c->lr_scheduler.total_steps.set ? c->lr_scheduler.total_steps.v : 0;
    o->lr.decay_ratio = c->lr_scheduler.decay_ratio.set ? c->lr_scheduler.decay_ratio.v : -1;
    optim_decay_type_parse(c->lr_scheduler.decay_type, &o->lr.decay_type);
    o->lr.min_lr_factor = c->lr_scheduler.min_lr_factor;
    train_config_ac(c, &o->ac, &o->ac_every);
    if (!strcmp(c->activation_checkpoint.mode, "selective") &&
        !strcmp(c->activation_checkpoint.selective_ac_option, "op"))
        base_log(BASE_LOG_INFO, "activation_checkpoint.selective_ac_option 'op': titan has no "
                                "per-op recompute; every block is checkpointed (full)");
    if (o->ac == MODEL_AC_SELECTIVE && model_ac_blocks(o->ac, o->ac_every, o->model.n_layers) == 0)
        base_log(BASE_LOG_WARN,
                 "activation_checkpoint.selective_ac_option = \"%s\" checkpoints no block of "
                 "%d (every %d-th block is): activation checkpointing does nothing",
                 c->activation_checkpoint.selective_ac_option, o->model.n_layers, o->ac_every);
    /* MoE settings on a dense model, and the aux-loss weight without the aux loss: no effect */
    if (o->model.n_experts == 0 &&
        (c->model.top_k.set || c->model.moe_inter_dim.set || c->model.norm_topk_prob.set))
        base_log(BASE_LOG_WARN, "model.top_k / moe_inter_dim / norm_topk_prob have no effect: the "
                                "model is dense (no experts)");
    if (c->model.router_aux_loss_coef.set && o->moe_balance != MODEL_BALANCE_AUX_LOSS)
        base_log(BASE_LOG_WARN, "model.router_aux_loss_coef has no effect: model.moe_load_balance "
                                "is not \"aux_loss\"");
    /* torchtitan turns expert-bias balancing on by setting load_balance_coeff; titan by the
     * mode, so a rate set alone would port that setting as nothing */
    const int fr = find_field("model", "moe_bias_update_rate");
    /* set to another value than the default (a saved config.toml writes the default out) */
    if (c->origin[fr].where && c->model.moe_bias_update_rate != g_fields[fr].def &&
        o->moe_balance != MODEL_BALANCE_BIAS)
        base_log(BASE_LOG_WARN, "model.moe_bias_update_rate has no effect: model.moe_load_balance "
                                "is not \"bias\" (torchtitan's load_balance_coeff turns the "
                                "expert bias on; here moe_load_balance = \"bias\" does)");
    o->moe_force_balance = c->debug.moe_force_load_balance;
    o->loss_parallel_off = c->parallelism.disable_loss_parallel;
    o->log_freq = (int)c->metrics.log_freq;
    o->peak_flops = c->metrics.peak_tflops * 1e12;
    o->sample_tokens = (int)c->job.sample_tokens;
    train_stop_signal_parse(c->job.preemption_signal, &o->preemption_signal); /* schema-checked */
    o->comm_init_timeout = (double)c->comm.init_timeout_seconds;
    o->comm_train_timeout = (double)c->comm.train_timeout_seconds;
    if (c->metrics.enable_jsonl && !(o->jsonl_path = output_path(c, c->metrics.save_jsonl_file)))
        return NOT_YET(metrics, save_jsonl_file, "must name a file (or out of memory)");
    if (c->metrics.enable_tensorboard && !(o->tb_dir = output_path(c, c->metrics.save_tb_folder)))
        return NOT_YET(metrics, save_tb_folder, "must name a folder (or out of memory)");
    /* "" turns the page off, and so does none / None: a page named "none" is nobody's wish */
    const char *rep = c->metrics.save_report_file;
    if (rep[0] && strcmp(rep, "none") && strcmp(rep, "None") &&
        !(o->report_path = output_path(c, rep)))
        return base_fail(err, "out of memory");
    o->metrics_all_ranks = c->metrics.save_for_all_ranks;
    if (c->profiling.enable_profiling) {
        const struct {
            int64_t freq, active, warmup;
        } p = {c->profiling.profile_freq, c->profiling.profiler_active,
               c->profiling.profiler_warmup};
        if (p.active + p.warmup > p.freq) /* torchtitan asserts the same (its wait >= 0) */
            return NOT_YET(profiling, profile_freq,
                           "%lld must be at least profiler_active + profiler_warmup (%lld + %lld)",
                           (long long)p.freq, (long long)p.active, (long long)p.warmup);
        if (!(o->prof.dir = output_path(c, c->profiling.save_traces_folder)))
            return NOT_YET(profiling, save_traces_folder, "must name a folder (or out of memory)");
        if (p.freq > c->training.steps)
            base_log(BASE_LOG_WARN,
                     "profiling.profile_freq = %lld is above training.steps = %lld: no step is "
                     "traced",
                     (long long)p.freq, (long long)c->training.steps);
        const int64_t cap = 1 << 30; /* past any run's steps (int) */
        o->prof.freq = (int)(p.freq < cap ? p.freq : cap);
        o->prof.active = (int)(p.active < cap ? p.active : cap);
        o->prof.warmup = (int)(p.warmup < cap ? p.warmup : cap);
    }
    if (c->validation.enable) {
        if (!c->validation.dataset_path[0])
            return NOT_YET(validation, dataset_path, "must name the held-out data");
        o->val.path = c->validation.dataset_path;
        o->val.freq = (int)c->validation.freq;
        o->val.steps = (int)c->validation.steps;
        o->val.batch = (int)c->validation.local_batch_size;
        o->val.seq_len = (int)c->validation.seq_len;
        raise_context(&o->model, "validation.seq_len", o->val.seq_len);
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
        c->ovr[i] = (ops_override){.pattern = pattern, .impl = eq + 1};
    }
    o->kernel_overrides = c->ovr;
    o->n_kernel_overrides = n;
    o->memory_estimation = c->memory_estimation.enable;
    o->ignore_memory_check = c->training.ignore_memory_check;
    return 0;
}

void train_config_ac(const train_config *c, model_ac_mode *ac, int *ac_every) {
    const char *mode = c->activation_checkpoint.mode,
               *opt = c->activation_checkpoint.selective_ac_option;
    int64_t k = 0;
    *ac_every = 0;
    *ac = !strcmp(mode, "full") ? MODEL_AC_FULL : MODEL_AC_NONE;
    if (strcmp(mode, "selective")) return;
    if (!strcmp(opt, "op")) { /* torchtitan's per-op SAC: titan recomputes whole blocks */
        *ac = MODEL_AC_FULL;
        return;
    }
    base_parse_i64(opt, &k); /* checked by the schema */
    *ac = MODEL_AC_SELECTIVE;
    *ac_every = (int)k;
}
