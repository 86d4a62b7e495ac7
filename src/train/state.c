/* train: the resumable state (see internal.h). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/checkpoint.h"
#include "train/internal.h"

/* The size of one rank's data-loader state as JSON text (data_mix_state_format: it always
 * fits; the same on every rank, whose loaders have the same sources). */
static size_t loader_state_bytes(const train_source *src) {
    return src->loader ? data_mix_state_max(src->loader) : DATA_LOADER_STATE_MAX;
}

/* optim_adamw_cfg's fields as the checkpoint names them (train.optimizer), and their values */
static const char *const k_adamw_keys[5] = {"lr", "beta1", "beta2", "eps", "weight_decay"};

static void adamw_values(const optim_adamw_cfg *c, double v[5]) {
    const double x[5] = {c->lr, c->beta1, c->beta2, c->eps, c->weight_decay};
    memcpy(v, x, sizeof x);
}

/* A parameter group's hyperparameters as the checkpoint names them: AdamW's / Adam's
 * (k_adamw_keys), or DistMuon's; returns how many. */
#define GROUP_KEYS_MAX 10
static int group_values(const optim_adamw_cfg *c, const char **keys, double *v) {
    static const char *const muon[GROUP_KEYS_MAX] = {
        "lr",       "eps",  "weight_decay", "momentum", "nesterov",
        "ns_steps", "ns_a", "ns_b",         "ns_c",     "adjust_lr_fn"};
    if (!c->muon) {
        adamw_values(c, v);
        memcpy(keys, k_adamw_keys, sizeof k_adamw_keys);
        return 5;
    }
    const double x[GROUP_KEYS_MAX] = {c->lr,       c->eps,      c->weight_decay, c->momentum,
                                      c->nesterov, c->ns_steps, c->ns[0],        c->ns[1],
                                      c->ns[2],    c->adjust};
    memcpy(v, x, sizeof x);
    memcpy(keys, muon, sizeof muon);
    return GROUP_KEYS_MAX;
}

/* optimizer.name, as train.optimizer records it (checkpoints before Adam's L2 decay have none) */
static const char *adamw_name(const optim_adamw_cfg *c) {
    return c->adam ? "Adam" : "AdamW";
}

/* [[optimizer.param_groups]] as the checkpoint records them: [{"pattern", "optimizer_name",
 * "lr", "beta1", "beta2", "eps", "weight_decay"}, ...] (a resume says a change). */
static json_t *param_groups_json(const train_opts *o) {
    json_t *a = json_array();
    for (int k = 0; k < o->n_param_groups; k++) {
        const train_param_group *g = &o->param_groups[k];
        json_t *e = json_object();
        json_object_set_new(e, "pattern", json_string(g->pattern));
        json_object_set_new(e, "optimizer_name", json_string(g->optimizer_name));
        double hp[GROUP_KEYS_MAX];
        const char *keys[GROUP_KEYS_MAX];
        const int nk = group_values(&g->c, keys, hp);
        for (int i = 0; i < nk; i++) json_object_set_new(e, keys[i], json_real(hp[i]));
        json_array_append_new(a, e);
    }
    return a;
}

/* How the checkpoint's param_groups (NULL: one group, [optimizer]'s) and this run's differ:
 * "" when alike, else the first difference into buf; shape: in the groups' count, patterns or
 * optimizers only (not their hyperparameters). */
static void groups_diff(const json_t *saved, const train_opts *o, char *buf, size_t n, int shape) {
    buf[0] = 0;
    const int ns = json_is_array(saved) ? (int)json_array_size(saved) : 0;
    if (!ns && !o->n_param_groups) return;
    if (!ns || !o->n_param_groups || ns != o->n_param_groups) {
        snprintf(buf, n, "%d parameter group%s (%s); this run has %d", ns ? ns : 1,
                 ns > 1 ? "s" : "", ns ? "[[optimizer.param_groups]]" : "[optimizer]'s",
                 o->n_param_groups ? o->n_param_groups : 1);
        return;
    }
    for (int k = 0; k < ns; k++) {
        const json_t *e = json_array_get(saved, (size_t)k);
        const train_param_group *g = &o->param_groups[k];
        const char *pat = json_string_value(json_object_get(e, "pattern")),
                   *name = json_string_value(json_object_get(e, "optimizer_name"));
        if (!pat || strcmp(pat, g->pattern) || !name || strcmp(name, g->optimizer_name)) {
            snprintf(buf, n, "group %d %s '%.100s'; this run's is %s '%.100s'", k,
                     name ? name : "?", pat ? pat : "?", g->optimizer_name, g->pattern);
            return;
        }
        if (shape) continue;
        double hp[GROUP_KEYS_MAX];
        const char *keys[GROUP_KEYS_MAX];
        const int nk = group_values(&g->c, keys, hp);
        for (int i = 0; i < nk; i++) {
            const json_t *v = json_object_get(e, keys[i]);
            if (!json_is_number(v) || json_number_value(v) != hp[i]) {
                snprintf(buf, n, "group %d ('%.100s') %s = %g; this run sets %g", k, g->pattern,
                         keys[i], json_is_number(v) ? json_number_value(v) : NAN, hp[i]);
                return;
            }
        }
    }
}

/* Sequences per optimizer step over all data-parallel ranks (torchtitan's global batch). */
static json_int_t global_batch(const train_opts *o, const train_source *src) {
    return (json_int_t)o->batch * o->grad_accum * src->dp_size;
}

/* The trainer's part of a checkpoint (metadata.json "train"), as a JSON string. states: every
 * data-parallel rank's loader state (dp_size x loader_state_bytes), or NULL. */
/* The attention mask a run trains with (the train state records it; a resume says a change). */
static const char *mask_name(const train_opts *o) {
    return o->block_causal ? "block_causal" : "causal";
}

static char *train_state_json(const train_opts *o, const train_source *src, const optim_adamw *opt,
                              const model *m, int64_t step, int model_only, int64_t tokens_seen,
                              const char *states, int tb_lost) {
    json_t *root = json_object();
    /* TensorBoard's scalars of this step were not written (a full disk stopped the run after
     * this save): the resumed run's series starts in a new run folder without them, said then
     * (metrics.jsonl's missing line is found in the file itself) */
    if (tb_lost) json_object_set_new(root, "tensorboard_lost_step", json_integer(tb_lost));
    json_object_set_new(root, "step", json_integer(step));
    json_object_set_new(root, "model_only", json_boolean(model_only));
    json_object_set_new(root, "adam_step", json_integer(opt->step));
    json_object_set_new(root, "random_tokens_counter", json_integer((json_int_t)src->counter));
    json_object_set_new(root, "tokens_seen", json_integer(tokens_seen));
    json_object_set_new(root, "seed", json_integer((json_int_t)o->seed));
    /* the run's shape, so a resume with another one is said (resume) */
    json_object_set_new(root, "global_batch_size", json_integer(global_batch(o, src)));
    json_object_set_new(root, "seq_len", json_integer(o->seq_len));
    /* and its compute precision: the weights are fp32 either way, but an unset
     * mixed_precision_param follows the CPU, so a resume elsewhere may change it (resume) */
    json_object_set_new(root, "mixed_precision_param", json_string(train_prec_name(o->prec)));
    /* and the kernels other than the defaults, where they ran (model_kernel_choices; "" for
     * none): they change compute only, so a resume with others is allowed and said (resume) */
    char kern[2048];
    model_kernel_choices(m, kern, sizeof kern);
    json_object_set_new(root, "kernel_overrides", json_string(kern));
    /* the settings a resume may change (resume says so): AdamW's, and an MoE's balancing */
    json_t *oj = json_object();
    double hp[5];
    adamw_values(&o->adamw, hp);
    for (int i = 0; i < 5; i++) json_object_set_new(oj, k_adamw_keys[i], json_real(hp[i]));
    json_object_set_new(oj, "name", json_string(adamw_name(&o->adamw)));
    /* the moments' dtype (optimizer.implementation = "fused_opt_states_bf16": bfloat16), as
     * the shard files store them; a resume says a change */
    json_object_set_new(oj, "states", json_string(o->adam_bf16 ? "bfloat16" : "float32"));
    json_object_set_new(root, "optimizer", oj);
    if (o->n_param_groups) json_object_set_new(root, "param_groups", param_groups_json(o));
    if (o->model.n_experts > 0)
        json_object_set_new(root, "moe_load_balance",
                            json_string(train_balance_name(o->moe_balance)));
    json_object_set_new(root, "attn_mask_type", json_string(mask_name(o)));
    /* the identity, and the INFO rows (max_seq_len: the RoPE context an export writes as
     * max_position_embeddings) */
    json_object_set_new(root, "model", model_args_json(&o->model, MODEL_ARGS_JSON_CHECKPOINT));
    json_object_set_new(root, "tokenizer", train_tokenizer_json(o, src->tok, src->loader));
    train_moe_bias_json(root, m);
    if (src->loader) { /* rank 0's as "data_loader"; all of them when there are several */
        json_object_set_new(root, "data_loader", json_loads(states, 0, NULL));
        if (src->dp_size > 1) {
            json_t *all = json_array();
            for (int r = 0; r < src->dp_size; r++)
                json_array_append_new(
                    all, json_loads(states + (size_t)r * loader_state_bytes(src), 0, NULL));
            json_object_set_new(root, "data_loaders", all);
        }
    } else {
        json_object_set_new(root, "data_loader", json_null());
    }
    char *text = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(root);
    return text;
}

/* Loads buffers names[nb] of dir/step-N into this rank's pieces p[np] of the shard vectors
 * dst[nb] (global offsets in the full layout of n_floats; bf16: the buffers, by bit, that
 * hold bf16 bits). */
static int load_pieces(const char *dir, int64_t step, const char *const *names, void *const *dst,
                       int nb, const dist_piece *p, int np, size_t n_floats, unsigned bf16,
                       base_err *err) {
    ckpt_step_buf *b = train_piece_bufs(names, nb, p, np, n_floats, NULL, dst, bf16, NULL);
    if (!b) return base_fail(err, "out of memory");
    int rc = ckpt_step_load(dir, step, b, nb * np, err);
    free(b);
    return rc;
}

/* "bytes", "random tokens" or "the tokenizer PATH (tokenizer.json FNV-1a 64 HASH)". */
static void tokenizer_str(const json_t *j, char *buf, size_t n) {
    if (json_is_string(j))
        snprintf(buf, n, "%s", json_string_value(j));
    else if (json_is_object(j))
        snprintf(buf, n, "the tokenizer %s (tokenizer.json FNV-1a 64 %s)",
                 json_string_value(json_object_get(j, "path")),
                 json_string_value(json_object_get(j, "tokenizer_json_fnv1a64")));
    else
        snprintf(buf, n, "random tokens");
}

/* A data position is only meaningful with the tokenizer it was counted in: the checkpoint's
 * "tokenizer" (absent in older ones: not checked) against this run's (by hash: the folder may
 * have moved). */
static int check_tokenizer(const json_t *t, const train_opts *o, const train_source *src,
                           const char *dir, int64_t step, base_err *err) {
    const json_t *rec = json_object_get(t, "tokenizer");
    if (!rec) return 0;
    json_t *now = train_tokenizer_json(o, src->tok, src->loader);
    const char *const key = "tokenizer_json_fnv1a64";
    const int same = json_is_object(rec) && json_is_object(now)
                         ? json_equal(json_object_get(rec, key), json_object_get(now, key))
                         : json_equal(rec, now);
    int rc = 0;
    if (!same) {
        char was[700], is[700];
        tokenizer_str(rec, was, sizeof was);
        tokenizer_str(now, is, sizeof is);
        rc = base_fail(err,
                       "%s/step-%lld: its data position was counted with %s, this run's data "
                       "uses %s: resume with the same tokenizer (model.hf_assets_path), or leave "
                       "the position out (checkpoint.exclude_from_loading = [\"dataloader\"])",
                       dir, (long long)step, was, is);
    }
    json_decref(now);
    return rc;
}

/* The data position of a checkpoint's "train" object: the random-token counter and this
 * rank's loader state. */
static int restore_data(const json_t *t, const train_opts *o, train_source *src, const char *dir,
                        int64_t step, base_err *err) {
    if (check_tokenizer(t, o, src, dir, step, err)) return -1;
    src->counter = (uint64_t)json_integer_value(json_object_get(t, "random_tokens_counter"));
    if (src->loader == NULL) return 0;
    return train_loader_state_restore(t, src->loader, src->dp_rank, src->dp_size, dir, step, err);
}

int train_loader_state_restore(const json_t *t, data_mix *l, int dp_rank, int dp_size,
                               const char *dir, int64_t step, base_err *err) {
    json_t *dl = json_object_get(t, "data_loader"), *dls = json_object_get(t, "data_loaders");
    const int saved_dp = json_is_array(dls) ? (int)json_array_size(dls) : 1;
    if (saved_dp != dp_size)
        return base_fail(err,
                         "%s/step-%lld: the data loaders' positions belong to %d data-parallel "
                         "ranks, this run has %d: resume a dataset on the same data-parallel "
                         "size (random tokens reshard freely), or set "
                         "checkpoint.exclude_from_loading = [\"dataloader\"] to read the data "
                         "from its start again",
                         dir, (long long)step, saved_dp, dp_size);
    if (dp_size > 1) dl = json_array_get(dls, (size_t)dp_rank);
    char *text = json_is_object(dl) ? json_dumps(dl, JSON_COMPACT) : NULL;
    if (!text) return base_fail(err, "%s/step-%lld has no data-loader state", dir, (long long)step);
    base_err e;
    int bad = data_mix_state_restore(l, text, &e);
    free(text);
    /* the loader's errors name the dataset; say which checkpoint's position it was */
    char field[48] = "data_loader";
    if (dp_size > 1) snprintf(field, sizeof field, "data_loaders[%d]", dp_rank);
    if (bad)
        base_fail(err, "%s/step-%lld/metadata.json: train.%s: %s", dir, (long long)step, field,
                  e.msg);
    return bad ? -1 : 0;
}

/* Every data-parallel rank's loader position into states[dp_size][loader_state_bytes]
 * (collective over dp); nothing for random tokens. */
static void gather_loader_states(const train_source *src, dist_comm *dp, char *states) {
    if (!src->loader) return;
    const size_t n = loader_state_bytes(src);
    /* not the heap: every rank must reach the gather; n <= DATA_MIX_STATE_CAP (at most
     * DATA_MIX_MAX sources) */
    char mine[DATA_MIX_STATE_CAP] = {0};
    if (data_mix_state_format(src->loader, mine, n))
        base_log(BASE_LOG_ERROR, "data: the loader's state does not fit its %zu bytes", n);
    dist_allgather_bytes(dp, mine, states, n);
}

json_t *train_step_state(const char *folder, int64_t step, base_err *err) {
    char *tj = NULL;
    int world;
    if (ckpt_step_read_meta(folder, step, &tj, &world, err)) return NULL;
    json_t *t = json_loads(tj, 0, NULL);
    free(tj);
    if (!t) base_fail(err, "%s/step-%lld/metadata.json: out of memory", folder, (long long)step);
    return t;
}

/* The settings a resume takes from this run's config where the checkpoint recorded others
 * (older checkpoints record none): said, not silent. AdamW's hyperparameters (torchtitan
 * restores the checkpoint's param-group values; titan applies the config's), the seed where
 * it draws the data (random tokens), an MoE's balancing (the learned expert bias steers
 * routing in "bias" only). */
static void said_changes(const json_t *t, const train_opts *o, const train_source *src,
                         int64_t step, unsigned load) {
    const char *mask = json_string_value(json_object_get(t, "attn_mask_type"));
    if (mask && strcmp(mask, mask_name(o))) /* absent in older checkpoints */
        base_log(BASE_LOG_WARN,
                 "checkpoint: step-%lld was trained with model.attn_mask_type = \"%s\"; this run "
                 "uses \"%s\": allowed (the data position carries on at the next input token), "
                 "but from here attention %s%s%s",
                 (long long)step, mask, mask_name(o),
                 o->block_causal ? "stays within each document" : "crosses documents",
                 src->loader ? " and the data is packed as torchtitan " : "",
                 !src->loader      ? ""
                 : o->block_causal ? "0.3 packs (labels within each document)"
                                   : "v0.2.2 packs");
    const json_t *oj = json_object_get(t, "optimizer"), *pg = json_object_get(t, "param_groups");
    if (!json_is_array(pg) || !json_array_size(pg)) pg = NULL; /* (a hostile null, {} or []) */
    char gd[400];
    groups_diff(pg, o, gd, sizeof gd, 0);
    if (gd[0])
        base_log(BASE_LOG_WARN,
                 "checkpoint: step-%lld was trained with %s, which apply from here (%s; "
                 "torchtitan 0.3 would keep the checkpoint's group hyperparameters, AdamW's betas, "
                 "eps and weight decay or DistMuon's, and take this run's lr after one step at "
                 "the checkpoint's)",
                 (long long)step, gd,
                 (load & TRAIN_CKPT_OPTIMIZER) ? "the optimizer state carries on"
                                               : "the optimizer state is not loaded");
    /* no name: a checkpoint from before Adam's coupled decay, when every run stepped as AdamW
     * (Adam was taken with weight_decay 0 only: AdamW's step) */
    const char *name = json_string_value(json_object_get(oj, "name"));
    if (!name && json_is_object(oj)) name = "AdamW";
    /* without weight decay on both sides the two are one step: nothing to say */
    const double wd0 = json_number_value(json_object_get(oj, "weight_decay"));
    if (name && !pg && !o->n_param_groups && strcmp(name, adamw_name(&o->adamw)) &&
        (wd0 != 0 || o->adamw.weight_decay != 0))
        base_log(BASE_LOG_WARN,
                 "checkpoint: step-%lld was trained with optimizer.name = %.20s; this run's %s "
                 "applies from here (the moments carry on; %s)",
                 (long long)step, name, adamw_name(&o->adamw),
                 /* torch's AdamW.__setstate__ forces decoupled_weight_decay on any state it
                  * loads; Adam keeps what the checkpoint's groups say */
                 o->adamw.adam ? "torchtitan would keep the checkpoint's decoupled weight decay"
                               : "as in torchtitan, whose AdamW loads any state as decoupled");
    const json_t *lost = json_object_get(t, "tensorboard_lost_step");
    if (json_is_integer(lost))
        base_log(BASE_LOG_WARN,
                 "checkpoint: step-%lld's run could not write TensorBoard's scalars of step "
                 "%lld (the write failed, and the run stopped after saving it): they are in no "
                 "event file, and this run's series starts in a new run folder",
                 (long long)step, (long long)json_integer_value(lost));
    const char *states = json_string_value(json_object_get(oj, "states")), /* absent: older */
        *mine = o->adam_bf16 ? "bfloat16" : "float32";
    if (states && strcmp(states, mine) && (load & TRAIN_CKPT_OPTIMIZER))
        base_log(BASE_LOG_WARN,
                 "checkpoint: step-%lld keeps the AdamW moments in %.10s; this run in %s "
                 "(optimizer.implementation = \"%s\"): %s",
                 (long long)step, states, mine, o->adam_bf16 ? "fused_opt_states_bf16" : "fused",
                 o->adam_bf16 ? "rounded to bf16 (nearest even) as loaded"
                              : "widened to fp32 as loaded (exact)");
    double hp[5];
    adamw_values(&o->adamw, hp);
    for (int i = 0; i < 5 && !pg && !o->n_param_groups; i++) {
        const json_t *v = json_object_get(oj, k_adamw_keys[i]);
        if (json_is_number(v) && json_number_value(v) != hp[i])
            base_log(BASE_LOG_WARN,
                     "checkpoint: step-%lld was trained with optimizer.%s = %g; this run sets "
                     "%g, which applies from here (torchtitan would keep the checkpoint's%s)",
                     (long long)step, k_adamw_keys[i], json_number_value(v), hp[i],
                     /* 0.3 restores the groups' settings but not LambdaLR's base_lrs */
                     i == 0 ? " (0.3: for one step, then this run's)" : "");
    }
    const json_t *seed = json_object_get(t, "seed");
    if (!src->loader && json_is_integer(seed) && (uint64_t)json_integer_value(seed) != o->seed)
        base_log(BASE_LOG_WARN,
                 "checkpoint: step-%lld was trained on random tokens drawn with seed %llu; this "
                 "run's seed %llu draws other tokens from here",
                 (long long)step, (unsigned long long)json_integer_value(seed),
                 (unsigned long long)o->seed);
    const char *bal = json_string_value(json_object_get(t, "moe_load_balance"));
    const char *now = train_balance_name(o->moe_balance);
    if (bal && o->model.n_experts > 0 && strcmp(bal, now))
        base_log(BASE_LOG_WARN,
                 "checkpoint: step-%lld was trained with model.moe_load_balance = \"%s\"; this "
                 "run uses \"%s\"%s",
                 (long long)step, bal, now,
                 !strcmp(bal, "bias") ? ": the checkpoint's learned expert bias no longer steers "
                                        "the routing"
                 : o->moe_balance == MODEL_BALANCE_BIAS ? ": the expert bias starts from zero"
                                                        : "");
}

/* DistMuon keeps a momentum buffer where AdamW / Adam keep two moments (in adam_m; adam_v stays
 * zero): a resume whose groups put parameters under another kind of optimizer than the
 * checkpoint's would take one for the other (AdamW after DistMuon would divide by a zero second
 * moment: steps ~30x too large). Refused when DistMuon is on either side and the groups'
 * patterns or optimizers differ, as torchtitan fails a load whose optimizer states do not
 * match; the optimizer can be left out (checkpoint.exclude_from_loading). */
static int muon_state_check(const json_t *t, const train_opts *o, const char *dir, int64_t step,
                            base_err *err) {
    const json_t *pg = json_object_get(t, "param_groups");
    if (!json_is_array(pg) || !json_array_size(pg)) pg = NULL;
    int muon = 0;
    for (int k = 0; k < o->n_param_groups; k++) muon |= o->param_groups[k].c.muon;
    for (size_t k = 0; pg && k < json_array_size(pg); k++) {
        const char *name =
            json_string_value(json_object_get(json_array_get(pg, k), "optimizer_name"));
        muon |= name && !strcmp(name, "DistMuon");
    }
    char gd[400];
    if (muon) groups_diff(pg, o, gd, sizeof gd, 1);
    if (!muon || !gd[0]) return 0;
    return base_fail(err,
                     "checkpoint: %s/step-%lld was trained with %s: with DistMuon on either side "
                     "the optimizer state would pass to another kind of optimizer (DistMuon keeps "
                     "a momentum buffer, AdamW / Adam two moments), which torchtitan refuses too; "
                     "keep the checkpoint's groups, or set checkpoint.exclude_from_loading = "
                     "[\"optimizer\"] to start the optimizer afresh",
                     dir, (long long)step, gd);
}

/* Restores a run from dir/step-N: weights, AdamW moments and step, data position, RNG.
 * Returns the step to continue after, or -1 with err. */
static int64_t resume(const train_opts *o, const train_start *plan, model *m, const dist_fsdp *f,
                      const dist_piece *pieces, int n_pieces, optim_adamw *opt, train_source *src,
                      int64_t *tokens_seen, base_err *err) {
    const char *dir = plan->from;
    const int64_t step = plan->resume_step;
    const unsigned load = plan->load;
    json_t *t = train_step_state(dir, step, err);
    if (!t) return -1;
    int64_t rc = -1;
    if (train_state_check(t, dir, step, err)) goto out;
    const int model_only = json_is_true(json_object_get(t, "model_only"));
    if (train_model_check(t, &o->model, dir, step, err)) goto out;
    if ((load & TRAIN_CKPT_OPTIMIZER) && muon_state_check(t, o, dir, step, err)) goto out;
    /* this rank's shard of every buffer it loads, from any number of shard files */
    const char *names[3];
    void *dst[3];
    unsigned bf16 = 0; /* AdamW's moments in bf16: their buffers' bits */
    int nb = 0;
    if (load & TRAIN_CKPT_MODEL) {
        names[nb] = "model";
        dst[nb++] = dist_fsdp_shard_params(f);
    }
    if (load & TRAIN_CKPT_OPTIMIZER) {
        names[nb] = "adam_m";
        bf16 |= (unsigned)opt->bf16 << nb;
        dst[nb++] = opt->m;
        names[nb] = "adam_v";
        bf16 |= (unsigned)opt->bf16 << nb;
        dst[nb++] = opt->v;
    }
    if (nb && load_pieces(dir, step, names, dst, nb, pieces, n_pieces, m->full_floats, bf16, err))
        goto out;
    if ((load & TRAIN_CKPT_MODEL) && train_moe_bias_load(m, t, dir, err)) goto out;
    if (model_only) { /* weights only: a fresh start from them */
        if (load & TRAIN_CKPT_MODEL)
            base_log(BASE_LOG_INFO, "checkpoint: loaded weights of %s/step-%lld (model only)", dir,
                     (long long)step);
        else
            base_log(BASE_LOG_INFO,
                     "checkpoint: %s/step-%lld holds weights only, and checkpoint."
                     "exclude_from_loading leaves them out: nothing loaded (a fresh init)",
                     dir, (long long)step);
        rc = plan->start;
        goto out;
    }
    if (load & TRAIN_CKPT_OPTIMIZER)
        opt->step = json_integer_value(json_object_get(t, "adam_step"));
    if (load & TRAIN_CKPT_TRAIN_STATE)
        *tokens_seen = json_integer_value(json_object_get(t, "tokens_seen"));
    if ((load & TRAIN_CKPT_DATALOADER) && restore_data(t, o, src, dir, step, err)) goto out;
    char left_out[80] = ""; /* checkpoint.exclude_from_loading */
    train_ckpt_parts_str(~load & TRAIN_CKPT_ALL, left_out, sizeof left_out);
    base_log(BASE_LOG_INFO, "checkpoint: resumed from %s/step-%lld%s%s", dir, (long long)step,
             left_out[0] ? "; not loaded:" : "", left_out);
    const json_t *gb = json_object_get(t, "global_batch_size"), *sl = json_object_get(t, "seq_len");
    if (json_is_integer(gb) && json_is_integer(sl) && /* absent in older checkpoints */
        (json_integer_value(gb) != global_batch(o, src) || json_integer_value(sl) != o->seq_len))
        base_log(BASE_LOG_WARN,
                 "checkpoint: step-%lld was trained with a global batch of %lld x %lld tokens; "
                 "this run uses %lld x %d (allowed, as in torchtitan: the data position, step "
                 "and LR schedule carry on, each step now takes another number of tokens)",
                 (long long)step, (long long)json_integer_value(gb),
                 (long long)json_integer_value(sl), (long long)global_batch(o, src), o->seq_len);
    const char *was = json_string_value(json_object_get(t, "mixed_precision_param"));
    if (was && strcmp(was, train_prec_name(o->prec))) /* absent in older checkpoints */
        base_log(BASE_LOG_WARN,
                 "checkpoint: step-%lld was trained in %s; this run computes in %s: "
                 "allowed (the checkpoint holds fp32 master weights), but the steps from here "
                 "are not those the run would have taken; set training.mixed_precision_param = "
                 "%s to keep its precision",
                 (long long)step, was, o->prec_why, was);
    const char *kwas = json_string_value(json_object_get(t, "kernel_overrides"));
    char kern[2048];
    model_kernel_choices(m, kern, sizeof kern);
    if (kwas && strcmp(kwas, kern)) /* absent in older checkpoints */
        base_log(BASE_LOG_WARN,
                 "checkpoint: step-%lld was trained with kernel overrides %s%s%s; this run "
                 "with %s%s%s: allowed (kernels change compute only, not what a checkpoint "
                 "holds), but the steps from here differ from those the run would have taken "
                 "by what the kernels compute differently",
                 (long long)step, kwas[0] ? "'" : "", kwas[0] ? kwas : "none (the defaults)",
                 kwas[0] ? "'" : "", kern[0] ? "'" : "", kern[0] ? kern : "none (the defaults)",
                 kern[0] ? "'" : "");
    said_changes(t, o, src, step, load);
    rc = plan->start;
out:
    json_decref(t);
    return rc;
}

/* checkpoint.initial_load_path: weights from an HF folder, a titan checkpoint or model
 * folder, or a safetensors file, into w; a source that names its model must name this one.
 * A titan checkpoint's MoE expert bias (part of the model's state, as torchtitan's persistent
 * expert_bias buffer) goes to the training model m (w itself, or under TP / EP the whole
 * model w is sliced into); other sources have none: it stays zero. */
static int initial_load(const train_opts *o, model *w, model *m, base_err *err) {
    ckpt_source s;
    model_args a;
    const char *p = o->ckpt.initial_load_path;
    if (ckpt_source_open(&s, p, err)) return -1;
    if (s.kind != CKPT_SRC_FILE) {
        if (ckpt_source_args(&s, &a, err)) return -1;
        a.router_aux_loss_coef = o->model.router_aux_loss_coef; /* a loss weight: the run's */
        if (!model_args_equal(&a, &o->model)) {
            char diff[1024], have[1024], want[1024];
            model_args_diff(&a, &o->model, diff, sizeof diff);
            model_args_describe(&a, have, sizeof have);
            model_args_describe(&o->model, want, sizeof want);
            return base_fail(err,
                             "%s describes another model than this run's: %s; set "
                             "model.config_path to it (its model %s, this run's %s)",
                             p, diff, have, want);
        }
    }
    if (ckpt_source_load(&s, w, w->w, err)) return -1;
    int bias = 0;
    if (s.kind == CKPT_SRC_STEP && m->moe_bias) {
        json_t *t = train_step_state(s.folder, s.step, err);
        if (!t) return -1;
        bias = json_object_get(t, "expert_bias") != NULL;
        const int rc = train_moe_bias_load(m, t, p, err);
        json_decref(t);
        if (rc) return -1;
    }
    base_log(BASE_LOG_INFO, "checkpoint: initial weights%s from %s (%s)",
             bias ? " and MoE expert bias" : "", p, ckpt_source_kind_name(s.kind));
    return 0;
}

dist_comm *train_slice_group(const dist_mesh *mesh) {
    if (mesh->tp == 1 && mesh->ep == 1) return NULL;
    return mesh->tp > 1 ? mesh->tp_comm : mesh->ep_comm;
}

int train_state_load(train_job *j, const train_start *plan, int64_t *start, int64_t *tokens_seen,
                     base_err *err) {
    const train_opts *o = j->o;
    model *m = j->m;
    /* checkpoints: resume from the newest (or load_step), else start from initial_load_path */
    const double t_load = base_now();
    if (plan->resume_step >= 0) {
        base_log(BASE_LOG_INFO, "checkpoint: loading %s/step-%lld ...", plan->from,
                 (long long)plan->resume_step);
        if ((*start = resume(o, plan, m, j->f, j->tpp->all, j->tpp->n_all, j->opt, j->src,
                             tokens_seen, err)) < 0)
            return strcmp(plan->from, plan->ckdir)
                       ? -1 /* an initial full-state load: load_step names another folder */
                       : train_hint_earlier_step(o, plan->from, plan->resume_step, err);
    }
    if (plan->initial) {
        base_log(BASE_LOG_INFO, "checkpoint: loading the initial weights from %s ...",
                 plan->initial);
        dist_comm *slices = train_slice_group(j->mesh);
        if (!slices && initial_load(o, m, m, err)) return -1;
        if (slices) { /* the whole model, then this rank's slices of it */
            model full = {0};
            const int bad = train_full_model(&full, m, o, slices, err) ||
                            initial_load(o, &full, m, err) || train_take_slices(m, full.w, err);
            model_free(&full);
            if (bad) return -1;
        }
        for (int u = 0; u < m->n_units; u++) dist_fsdp_store_unit(j->f, u);
    }
    if (plan->resume_step >= 0 || plan->initial) {
        /* a NaN or inf in a loaded weight (or AdamW moment, or a negative second moment)
         * would only surface steps later, as a non-finite gradient: refused here, naming the
         * parameter and the source (files with checksums fail earlier, on a changed byte) */
        const int loaded =
            (plan->resume_step >= 0 && (plan->load & TRAIN_CKPT_MODEL)) || plan->initial;
        const char *bad =
            loaded ? train_first_bad(m, j->f, dist_fsdp_shard_params(j->f), 0, 0) : NULL;
        if (bad) {
            if (plan->initial)
                return base_fail(err, "%s: weight %s holds a NaN or an infinity", plan->initial,
                                 bad);
            return base_fail(err, "%s/step-%lld: weight %s holds a NaN or an infinity", plan->from,
                             (long long)plan->resume_step, bad);
        }
        if (plan->resume_step >= 0 && (plan->load & TRAIN_CKPT_OPTIMIZER)) {
            const char *bm = train_first_bad(m, j->f, j->opt->m, j->opt->bf16, 0);
            const char *bv = bm ? NULL : train_first_bad(m, j->f, j->opt->v, j->opt->bf16, 1);
            if (bm || bv)
                return base_fail(err, "%s/step-%lld: %s of %s holds a NaN or an infinity%s",
                                 plan->from, (long long)plan->resume_step, bm ? "adam_m" : "adam_v",
                                 bm ? bm : bv,
                                 bm ? "" : " or a negative value (a second moment is never < 0)");
        }
        train_phase_end("checkpoint: loading", t_load);
    }
    return 0;
}

int train_state_save(const train_job *j, train_saver *s, int64_t step, int model_only,
                     int64_t tokens_seen, base_err *err) {
    char *states = calloc((size_t)j->mesh->dp_size, loader_state_bytes(j->src));
    if (!states) return base_fail(err, "out of memory");
    gather_loader_states(j->src, j->mesh->dp_comm, states);
    char *state = train_state_json(j->o, j->src, j->opt, j->m, step, model_only, tokens_seen,
                                   states, j->tb_lost);
    free(states);
    int rc = state ? train_saver_save(s, step, dist_fsdp_shard_params(j->f), j->opt->m, j->opt->v,
                                      model_only, j->o->export_dtype, state, err)
                   : base_fail(err, "out of memory");
    free(state);
    return rc;
}
