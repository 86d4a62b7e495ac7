#include "train.h"

#include <cblas.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint/checkpoint.h"
#include "train/internal.h"

void train_opts_defaults(train_opts *o) {
    memset(o, 0, sizeof *o);
    base_err e;
    model_flavor("debugmodel", &o->model, &e);
    o->steps = 100;
    o->batch = 8;
    o->seq_len = 128;
    o->grad_accum = 1;
    o->adamw = optim_adamw_defaults();
    o->lr.warmup_steps = 10;
    o->lr.decay_ratio = -1;
    o->lr.decay_type = OPTIM_DECAY_LINEAR;
    o->max_norm = 1.0;
    o->seed = 42;
    o->log_freq = 1;
    o->dump_folder = "./outputs";
    o->ckpt.folder = "checkpoint";
    o->ckpt.interval = 500;
    o->ckpt.keep_latest_k = 10;
    o->ckpt.load_step = -1;
    o->ckpt.last_save_model_only = 1;
    o->ckpt.async = 1;
}

double train_measure_peak_flops(void) {
    /* Best of repeated 1536^3 GEMMs (~30 ms each) over at least 0.6 s: the best, not the
     * mean, so a moment of contention from another process does not lower the peak. */
    const int n = 1536;
    float *a = base_alloc(sizeof(float) * n * n), *b = base_alloc(sizeof(float) * n * n),
          *c = base_alloc(sizeof(float) * n * n);
    double best = 0;
    if (a && b && c) {
        for (int i = 0; i < n * n; i++) a[i] = b[i] = base_rng_uniform(1, 0, (uint64_t)i) - 0.5f;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1, a, n, b, n, 0, c, n);
        const double start = base_now();
        for (int r = 0; r < 100 && (r < 5 || base_now() - start < 0.6); r++) {
            double t0 = base_now();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1, a, n, b, n, 0, c, n);
            double rate = 2.0 * n * n * (double)n / (base_now() - t0);
            if (rate > best) best = rate;
        }
    }
    base_free(a);
    base_free(b);
    base_free(c);
    return best;
}

/* Token source: the packing loader over a dataset, or uniformly random tokens. */
typedef struct {
    data_tok *tok;
    data_loader *loader;
    uint64_t seed, counter;
    int vocab;
} token_source;

static void source_close(token_source *s) {
    data_loader_free(s->loader);
    data_tok_free(s->tok);
    memset(s, 0, sizeof *s);
}

static int source_open(token_source *s, const train_opts *o, base_err *err) {
    memset(s, 0, sizeof *s);
    s->seed = o->seed;
    s->vocab = o->model.vocab_size;
    if (!o->data_path) return 0;
    if (o->tokenizer_dir && data_tok_load(o->tokenizer_dir, &s->tok, err)) return -1;
    data_loader_cfg c = {.path = o->data_path,
                         .format = o->data_format,
                         .field = o->data_field,
                         .skip_bad_lines = o->skip_bad_lines,
                         .enc = {s->tok, o->model.vocab_size},
                         .seq_len = o->seq_len,
                         .batch = o->batch,
                         .dp_rank = 0,
                         .dp_size = 1,
                         .infinite = 1};
    if (data_loader_open(&s->loader, &c, err)) {
        source_close(s);
        return -1;
    }
    return 0;
}

/* Fills one [B, T] microbatch of inputs and next-token targets. */
static int source_next(token_source *s, int32_t *tok, int32_t *tgt, int B, int T, base_err *err) {
    if (s->loader) return data_loader_next(s->loader, tok, tgt, err) == 1 ? 0 : -1;
    for (int b = 0; b < B; b++) {
        int32_t *x = tok + (size_t)b * T, *y = tgt + (size_t)b * T;
        for (int t = 0; t <= T; t++) {
            int32_t v = (int32_t)(base_rng_u64(s->seed, 0xda7a, s->counter++) % s->vocab);
            if (t < T) x[t] = v;
            if (t > 0) y[t - 1] = v;
        }
    }
    return 0;
}

/* Samples o->sample_tokens tokens at temperature 0.8 with the cached generator, starting from
 * the tokenizer's eos (a document boundary), a newline (byte data) or token 0. The context is
 * the training seq_len: past it the generator slides (keeps the last half), as training windows
 * start at arbitrary offsets. Prints bytes (byte data), decoded text (tokenizer) or ids. */
static int sample(const model *m, const train_opts *o, const token_source *src, base_err *err) {
    const int32_t eos = src->tok ? data_tok_eos_id(src->tok) : -1;
    const int32_t start = src->tok ? (eos >= 0 ? eos : 0) : src->loader ? '\n' : 0;
    train_text_stream ts = {src->tok, !src->tok && !src->loader, stdout, {0}, 0};
    train_gen_opts go = {{0.8, 0, 1.0, o->seed}, o->sample_tokens, NULL, 0, &ts};
    train_gen_result r;
    model_infer *s = NULL;
    if (model_infer_new(&s, m, o->seq_len, err)) return -1;
    printf("sample (temperature %.1f):\n", go.sampler.temperature);
    int rc = train_generate(s, &start, 1, &go, &r, err);
    train_stream_finish(&ts);
    printf("\n");
    if (!rc)
        base_log(BASE_LOG_INFO, "sampled %d tokens at %.1f tokens/s", r.n_new,
                 r.decode_s > 0 ? r.n_new / r.decode_s : 0.0);
    free(r.tokens);
    model_infer_free(s);
    return rc;
}

/* The arguments that must match for a checkpoint to load into this model. */
static json_t *args_json(const model_args *a) {
    json_t *j =
        json_pack("{si si si si si si si sf sf si}", "dim", a->dim, "n_layers", a->n_layers,
                  "n_heads", a->n_heads, "n_kv_heads", a->n_kv_heads, "head_dim", a->head_dim,
                  "ffn_dim", a->ffn_dim, "vocab_size", a->vocab_size, "rope_theta", a->rope_theta,
                  "norm_eps", a->norm_eps, "tie_embeddings", a->tie_embeddings);
    train_moe_args_json(j, a);
    return j;
}

/* The trainer's part of a checkpoint (metadata.json "train"), as a JSON string. */
static char *train_state_json(const train_opts *o, const token_source *src, const optim_adamw *opt,
                              const model *m, int64_t step, int model_only, int64_t tokens_seen) {
    json_t *root = json_object();
    json_object_set_new(root, "step", json_integer(step));
    json_object_set_new(root, "model_only", json_boolean(model_only));
    json_object_set_new(root, "adam_step", json_integer(opt->step));
    json_object_set_new(root, "random_tokens_counter", json_integer((json_int_t)src->counter));
    json_object_set_new(root, "tokens_seen", json_integer(tokens_seen));
    json_object_set_new(root, "seed", json_integer((json_int_t)o->seed));
    json_object_set_new(root, "model", args_json(&o->model));
    train_moe_bias_json(root, m);
    if (src->loader) {
        data_loader_state ds;
        char buf[512];
        data_loader_get_state(src->loader, &ds);
        data_loader_state_format(&ds, buf, sizeof buf);
        json_object_set_new(root, "data_loader", json_loads(buf, 0, NULL));
    } else {
        json_object_set_new(root, "data_loader", json_null());
    }
    char *text = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(root);
    return text;
}

/* Restores a run from dir/step-N: weights, AdamW moments and step, data position, RNG.
 * Returns the step to continue after, or -1 with err. */
static int64_t resume(const train_opts *o, const char *dir, int64_t step, model *m,
                      optim_adamw *opt, token_source *src, int64_t *tokens_seen, base_err *err) {
    char *tj = NULL;
    int world;
    if (ckpt_step_read_meta(dir, step, &tj, &world, err)) return -1;
    json_t *t = json_loads(tj, 0, NULL), *want = args_json(&o->model);
    free(tj);
    int64_t rc = -1;
    json_t *dl = json_object_get(t, "data_loader");
    const int model_only = json_is_true(json_object_get(t, "model_only"));
    if (!json_equal(json_object_get(t, "model"), want)) {
        char *have = json_dumps(json_object_get(t, "model"), JSON_COMPACT | JSON_SORT_KEYS);
        char *need = json_dumps(want, JSON_COMPACT | JSON_SORT_KEYS);
        base_fail(err, "%s/step-%lld: the checkpoint's model %s is not this run's %s", dir,
                  (long long)step, have ? have : "?", need ? need : "?");
        free(have);
        free(need);
        goto out;
    }
    ckpt_step_buf b[3] = {{"model", NULL, m->w, 0, m->n_floats, m->n_floats},
                          {"adam_m", NULL, opt->m, 0, m->n_floats, m->n_floats},
                          {"adam_v", NULL, opt->v, 0, m->n_floats, m->n_floats}};
    if (ckpt_step_load(dir, step, b, model_only ? 1 : 3, err)) goto out;
    if (train_moe_bias_load(m, t, dir, err)) goto out;
    if (model_only) { /* weights only: a fresh start from them */
        base_log(BASE_LOG_INFO, "checkpoint: loaded weights of %s/step-%lld (model only)", dir,
                 (long long)step);
        rc = 0;
        goto out;
    }
    opt->step = json_integer_value(json_object_get(t, "adam_step"));
    src->counter = (uint64_t)json_integer_value(json_object_get(t, "random_tokens_counter"));
    *tokens_seen = json_integer_value(json_object_get(t, "tokens_seen"));
    if (src->loader != NULL) {
        data_loader_state ds;
        char *text = json_is_object(dl) ? json_dumps(dl, JSON_COMPACT) : NULL;
        int bad = !text || data_loader_state_parse(text, &ds, err) ||
                  data_loader_set_state(src->loader, &ds, err);
        free(text);
        if (bad) {
            if (!text)
                base_fail(err, "%s/step-%lld has no data-loader state", dir, (long long)step);
            goto out;
        }
    }
    base_log(BASE_LOG_INFO, "checkpoint: resumed from %s/step-%lld", dir, (long long)step);
    rc = step;
out:
    json_decref(t);
    json_decref(want);
    return rc;
}

/* Names the first parameter with a non-finite gradient (for the error message). */
static const char *first_nonfinite_param(const model *m) {
    for (int i = 0; i < m->n_params; i++) {
        const float *g = m->g + m->params[i].offset;
        for (size_t k = 0; k < m->params[i].numel; k++)
            if (!isfinite(g[k])) return m->params[i].name;
    }
    return "(none found)";
}

/* Mean loss over the validation set (or its first o->val.steps batches) with the weights of
 * `train`: on the training model itself when the shapes match, else on `ev`, a forward-only
 * model of the validation shape. Returns 0 and fills *loss, *ntok. */
static int validate(const train_opts *o, const token_source *src, model *train, model *ev,
                    double *loss, int64_t *ntok, base_err *err) {
    data_loader_cfg c = {.path = o->val.path,
                         .format = o->data_format,
                         .field = o->data_field,
                         .skip_bad_lines = o->skip_bad_lines,
                         .enc = {src->tok, o->model.vocab_size},
                         .seq_len = o->val.seq_len,
                         .batch = o->val.batch,
                         .dp_size = 1,
                         .infinite = 0};
    model *m = ev ? ev : train;
    if (ev) memcpy(ev->w, train->w, train->n_floats * sizeof(float));
    data_loader *l;
    if (data_loader_open(&l, &c, err)) return -1;
    const size_t n = (size_t)c.batch * (size_t)c.seq_len;
    int32_t *x = base_alloc(n * sizeof *x), *y = base_alloc(n * sizeof *y);
    double sum = 0;
    int64_t valid = 0;
    int rc = x && y ? 0 : base_fail(err, "out of memory");
    for (int b = 0; !rc && (o->val.steps <= 0 || b < o->val.steps); b++) {
        int got = data_loader_next(l, x, y, err);
        if (got < 0) rc = -1;
        if (got <= 0) break;
        int64_t v = 0;
        sum += model_step_microbatch(m, x, y, 0.0f, &v); /* grad_scale 0: forward only */
        valid += v;
    }
    if (!rc && valid == 0)
        rc = base_fail(err, "%s: validation data is shorter than one batch of %d x %d tokens",
                       o->val.path, c.batch, c.seq_len + 1);
    data_loader_free(l);
    base_free(x);
    base_free(y);
    *loss = valid ? sum / (double)valid : 0;
    *ntok = valid;
    return rc;
}

/* The header `titan train` prints before the first step. */
static void print_header(const train_opts *o, const model *m, const token_source *src, double peak,
                         double fpt) {
    model_counts cnt;
    model_count_params(&o->model, &cnt);
    const model_args *a = &o->model;
    printf("titan train: model %s: %.2fM parameters (%d layers, dim %d, %d/%d heads x %d, ffn "
           "%d, vocab %d, %s embeddings), %.3f GFLOP/token\n",
           a->flavor, cnt.total / 1e6, a->n_layers, a->dim, a->n_heads, a->n_kv_heads, a->head_dim,
           a->ffn_dim, a->vocab_size, a->tie_embeddings ? "tied" : "untied", fpt / 1e9);
    char desc[1024] = "uniform random tokens";
    if (src->loader) data_loader_describe(src->loader, desc, sizeof desc);
    printf("  data: %s\n  step: %d x %d tokens x %d microbatches = %lld tokens; %d steps\n", desc,
           o->batch, o->seq_len, o->grad_accum, (long long)o->batch * o->seq_len * o->grad_accum,
           o->steps);
    const double gib = 1 << 30, pb = (double)m->n_floats * sizeof(float);
    const double act = (double)model_activation_bytes(m);
    printf("  parallelism: 1 process, %d threads; activation checkpointing %s\n",
           omp_get_max_threads(), o->ac == MODEL_AC_FULL ? "full" : "none");
    printf("  memory estimate: %.2f GiB = weights %.2f + gradients %.2f + AdamW %.2f + "
           "activations %.2f (of %.1f GiB RAM)\n",
           (4 * pb + act) / gib, pb / gib, pb / gib, 2 * pb / gib, act / gib,
           (double)base_total_ram() / gib);
    printf("  kernels (layers.0):");
    const ops_table *t = &m->ops[1 < m->n_units ? 1 : 0];
    for (int k = 0; k < OPS_COUNT; k++)
        if (t->impl[k]) printf(" %s=%s", ops_kind_name((ops_kind)k), t->impl[k]->name);
    printf("\n  fp32 GEMM peak for MFU: %.1f GFLOP/s (%s)\n", peak / 1e9,
           o->peak_flops > 0 ? "configured" : "measured");
    fflush(stdout);
}

int train_run(const train_opts *o, base_err *err) {
    int rc = -1;
    if (o->steps <= 0 || o->grad_accum <= 0)
        return base_fail(err, "steps and grad_accum must be positive");
    token_source src;
    if (source_open(&src, o, err)) return -1;
    model m;
    model_build_opts bo = {o->batch,    o->seq_len,          o->ac,
                           1,           o->kernel_overrides, o->n_kernel_overrides,
                           o->ce_chunk, o->moe_balance,      o->moe_bias_rate};
    optim_adamw opt = {0};
    FILE *jl = NULL;
    int32_t *tok = NULL, *tgt = NULL;
    train_saver *saver = NULL;
    train_tb *tb = NULL;
    model ev = {0};
    int have_ev = 0;
    char *state = NULL;
    if (model_build(&m, &o->model, &bo, err)) goto out;
    model_init_weights(&m, o->seed);
    /* the step's aux loss is the mean over its microbatches */
    if (m.balance == MODEL_BALANCE_AUX_LOSS)
        m.aux_scale = (float)(o->model.router_aux_loss_coef / o->grad_accum);
    const int aux_on = m.balance == MODEL_BALANCE_AUX_LOSS;
    if (optim_adamw_init(&opt, m.n_floats, err)) goto out;
    const size_t NT = (size_t)o->batch * o->seq_len;
    tok = base_alloc(NT * o->grad_accum * sizeof(int32_t));
    tgt = base_alloc(NT * o->grad_accum * sizeof(int32_t));
    if (!tok || !tgt) {
        base_fail(err, "out of memory");
        goto out;
    }
    if (o->jsonl_path) {
        if (base_mkdir_parent(o->jsonl_path, err)) goto out;
        if (!(jl = fopen(o->jsonl_path, "w"))) {
            base_fail(err, "%s: cannot open metrics file for writing: %s", o->jsonl_path,
                      strerror(errno));
            goto out;
        }
    }
    const double peak = o->peak_flops > 0 ? o->peak_flops : train_measure_peak_flops();
    if (!(peak > 0)) {
        base_fail(err,
                  "could not measure the GEMM peak for MFU (out of memory?); pass --peak-tflops");
        goto out;
    }
    const double fpt = model_flops_per_token(&o->model, o->seq_len);
    print_header(o, &m, &src, peak, fpt);
    if (o->tb_dir && train_tb_open(&tb, o->tb_dir, err)) goto out;
    if (o->val.path && (o->val.batch != o->batch || o->val.seq_len != o->seq_len)) {
        model_build_opts vo = {
            o->val.batch,        o->val.seq_len,        MODEL_AC_NONE, 0,
            o->kernel_overrides, o->n_kernel_overrides, o->ce_chunk,   o->moe_balance,
            o->moe_bias_rate};
        have_ev = 1;
        if (model_build(&ev, &o->model, &vo, err)) goto out;
    }
    /* checkpoints: resume from the newest (or load_step), else start from initial_load_path */
    char ckdir[4096] = "";
    int64_t start = 0, tokens_seen = 0;
    if (o->ckpt.enable) {
        const char *f = o->ckpt.folder ? o->ckpt.folder : "checkpoint";
        if (f[0] == '/' || !o->dump_folder)
            snprintf(ckdir, sizeof ckdir, "%s", f);
        else
            snprintf(ckdir, sizeof ckdir, "%s/%s", o->dump_folder, f);
        int64_t step = o->ckpt.load_step;
        if (step < 0) ckpt_step_latest(ckdir, &step);
        if (step >= 0 && (start = resume(o, ckdir, step, &m, &opt, &src, &tokens_seen, err)) < 0)
            goto out;
        if (step < 0 && o->ckpt.initial_load_path) {
            if (ckpt_load_model(&m, m.w, o->ckpt.initial_load_path, err)) goto out;
            base_log(BASE_LOG_INFO, "checkpoint: initial weights from %s",
                     o->ckpt.initial_load_path);
        }
        if (train_saver_init(&saver, ckdir, m.n_floats, o->ckpt.async, o->ckpt.keep_latest_k, err))
            goto out;
    }
    optim_lr_cfg lrc = o->lr;
    if (lrc.total_steps <= 0) lrc.total_steps = o->steps;
    double t_total = 0;
    int64_t tokens_total = 0;
    const int last =
        o->stop_after_step > 0 && o->stop_after_step < o->steps ? o->stop_after_step : o->steps;
    const int tty = isatty(STDOUT_FILENO); /* a progress line on terminals, plain lines else */
    const double t_run = base_now();
    for (int step = (int)start + 1; step <= last; step++) {
        double t0 = base_now();
        int64_t valid = 0;
        for (int mb = 0; mb < o->grad_accum; mb++) {
            if (source_next(&src, tok + mb * NT, tgt + mb * NT, o->batch, o->seq_len, err))
                goto out;
            for (size_t i = 0; i < NT; i++) valid += tgt[mb * NT + i] != OPS_IGNORE_INDEX;
        }
        double t_data = base_now() - t0;
        model_zero_grad(&m);
        double loss_sum = 0, sumsq = 0, aux_sum = 0;
        for (int mb = 0; mb < o->grad_accum; mb++) {
            const double l = model_step_microbatch(&m, tok + mb * NT, tgt + mb * NT,
                                                   valid ? 1.0f / (float)valid : 0.0f, NULL);
            loss_sum += l;
            aux_sum += m.moe_aux_loss;
            /* checked per microbatch (cumulative gradients) so the error names the one */
            sumsq = optim_sumsq(m.g, m.n_floats);
            if (!isfinite(l) || !isfinite(sumsq)) {
                base_fail(err,
                          "step %d, microbatch %d of %d: non-finite %s (loss %g); first "
                          "non-finite gradient: %s; stopping (the last checkpoint is intact)",
                          step, mb + 1, o->grad_accum, isfinite(l) ? "gradient" : "loss",
                          l / (valid ? (double)valid : 1.0), first_nonfinite_param(&m));
                goto out;
            }
        }
        const double aux = aux_sum / o->grad_accum; /* MoE aux loss (0 when off) */
        const double loss =
            (valid ? loss_sum / (double)valid : 0.0) + o->model.router_aux_loss_coef * aux * aux_on;
        const double norm = optim_clip_apply(m.g, m.n_floats, sumsq, o->max_norm);
        const double lr = o->adamw.lr * optim_lr_factor(&lrc, step - 1);
        model_moe_update_bias(&m, NULL); /* expert bias (no-op unless balancing by bias) */
        optim_adamw_step(&opt, m.w, m.g, &o->adamw, lr);
        const double dt = base_now() - t0;
        const int64_t ntok = (int64_t)NT * o->grad_accum;
        tokens_seen += ntok;
        if (step > 1 || o->steps == 1) { /* step 1 includes first-touch page faults */
            t_total += dt;
            tokens_total += ntok;
        }
        const double tps = ntok / dt, mfu = 100.0 * fpt * tps / peak;
        const double mem = (double)base_peak_rss() / (1 << 30);
        const double mem_pct = 100.0 * base_peak_rss() / (double)base_total_ram();
        if (tty) printf("\r\033[K"); /* erase the progress line */
        double val_loss = NAN;
        int64_t val_tok = 0;
        if (o->val.path && (step % o->val.freq == 0 || step == last)) {
            if (validate(o, &src, &m, have_ev ? &ev : NULL, &val_loss, &val_tok, err)) goto out;
            printf("validate: step %d  loss: %.5f  perplexity: %.3f  (%lld tokens)\n", step,
                   val_loss, exp(val_loss), (long long)val_tok);
        }
        const int log_now = step % o->log_freq == 0 || step == last;
        if (log_now) {
            printf("step: %4d  loss: %8.5f  grad_norm: %8.4f  lr: %.3e  memory: %.2fGiB(%.1f%%)  "
                   "tps: %.1f  tflops: %.3f  mfu: %.1f%%  data: %.3fs",
                   step, loss, norm, lr, mem, mem_pct, tps, fpt * tps / 1e12, mfu, t_data);
            if (aux_on) printf("  aux_loss: %.5f", aux);
            printf("\n");
            train_moe_log(&m, stdout, NULL);
        }
        if (tty && step < last) { /* progress: steps done, ETA, tokens/s */
            const double avg = (base_now() - t_run) / (step - start);
            const int w = 30, done = (int)((double)w * step / last);
            printf("  [%.*s%*s] step %d/%d  eta %.0fs  %.0f tok/s", done,
                   "##############################", w - done, "", step, last, avg * (last - step),
                   ntok / avg);
        }
        fflush(stdout);
        if (jl) {
            fprintf(jl,
                    "{\"step\": %d, \"loss\": %.17g, \"grad_norm\": %.17g, \"lr\": %.9g, "
                    "\"tps\": %.17g, \"tflops\": %.17g, \"mfu\": %.17g, \"memory_gib\": %.17g, "
                    "\"data_s\": %.17g",
                    step, loss, norm, lr, tps, fpt * tps / 1e12, mfu, mem, t_data);
            if (isfinite(val_loss)) fprintf(jl, ", \"val_loss\": %.17g", val_loss);
            if (aux_on) fprintf(jl, ", \"aux_loss\": %.17g", aux);
            train_moe_log(&m, NULL, jl);
            fprintf(jl, "}\n");
            fflush(jl);
        }
        if (tb && (log_now || isfinite(val_loss))) { /* torchtitan's tag names */
            const char *tags[] = {"loss_metrics/global_avg_loss",
                                  "loss_metrics/global_max_loss",
                                  "grad_norm",
                                  "lr",
                                  "throughput(tps)",
                                  "tflops",
                                  "mfu(%)",
                                  "memory/max_reserved(GiB)",
                                  "memory/max_reserved(%)",
                                  "time_metrics/data_loading(s)",
                                  "time_metrics/end_to_end(s)",
                                  "n_tokens_seen",
                                  "validation_metrics/loss"};
            const double vals[] = {loss,    loss, norm,    lr,     tps, fpt * tps / 1e12,
                                   mfu,     mem,  mem_pct, t_data, dt,  (double)tokens_seen,
                                   val_loss};
            if (train_tb_scalars(tb, step, tags, vals, isfinite(val_loss) ? 13 : 12, err)) goto out;
            const char *aux_tag = "loss_metrics/aux_loss";
            if (aux_on && train_tb_scalars(tb, step, &aux_tag, &aux, 1, err)) goto out;
        }
        if (saver && (step % o->ckpt.interval == 0 || step == last)) {
            const int model_only = step == o->steps && o->ckpt.last_save_model_only;
            free(state);
            state = train_state_json(o, &src, &opt, &m, step, model_only, tokens_seen);
            if (!state || train_saver_save(saver, step, m.w, opt.m, opt.v, model_only, state, err))
                goto out;
        }
    }
    if (train_saver_finish(saver, err)) goto out;
    const double tps = t_total > 0 ? tokens_total / t_total : 0;
    printf("summary: steps=%d tokens_per_s=%.2f mfu=%.2f peak_rss_gib=%.3f\n", o->steps, tps,
           100.0 * fpt * tps / peak, (double)base_peak_rss() / (1 << 30));
    if (o->out_dir) {
        if (ckpt_export_hf(&m, o->out_dir, NULL, err)) goto out;
        base_log(BASE_LOG_INFO,
                 "exported Hugging Face model to %s (config.json, model.safetensors)", o->out_dir);
    }
    if (o->sample_tokens > 0 && sample(&m, o, &src, err)) goto out;
    rc = 0;
out:
    if (jl) fclose(jl);
    base_free(tok);
    base_free(tgt);
    optim_adamw_free(&opt);
    if (rc != 0) { /* report the original error; a background save still finishes */
        base_err e2;
        if (train_saver_finish(saver, &e2)) base_log(BASE_LOG_ERROR, "%s", e2.msg);
    }
    train_saver_free(saver);
    train_tb_close(tb);
    if (have_ev) model_free(&ev);
    free(state);
    model_free(&m);
    source_close(&src);
    return rc;
}
