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
    o->par = (dist_mesh_cfg){1, -1, 1, 1, 1, 1};
    o->comm_init_timeout = 300; /* torchtitan's [comm] defaults */
    o->comm_train_timeout = 100;
    o->reshard = DIST_RESHARD_DEFAULT;
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
    int dp_rank, dp_size; /* this rank's share of the data */
} token_source;

static void source_close(token_source *s) {
    data_loader_free(s->loader);
    data_tok_free(s->tok);
    memset(s, 0, sizeof *s);
}

static int source_open(token_source *s, const train_opts *o, const dist_mesh *mesh, base_err *err) {
    memset(s, 0, sizeof *s);
    s->seed = o->seed;
    s->vocab = o->model.vocab_size;
    s->dp_rank = mesh->dp_rank;
    s->dp_size = mesh->dp_size;
    if (!o->data_path) return 0;
    if (o->tokenizer_dir && data_tok_load(o->tokenizer_dir, &s->tok, err)) return -1;
    data_loader_cfg c = {.path = o->data_path,
                         .format = o->data_format,
                         .field = o->data_field,
                         .skip_bad_lines = o->skip_bad_lines,
                         .enc = {s->tok, o->model.vocab_size},
                         .seq_len = o->seq_len,
                         .batch = o->batch,
                         .dp_rank = mesh->dp_rank,
                         .dp_size = mesh->dp_size,
                         .infinite = 1};
    if (data_loader_open(&s->loader, &c, err)) {
        source_close(s);
        return -1;
    }
    return 0;
}

/* Fills one [B, T] microbatch of inputs and next-token targets. Random tokens: the windows
 * of T + 1 tokens come from one counter stream; each round of microbatches takes dp_size * B
 * windows, this rank's B starting dp_rank * B windows in. Any split of the same global batch
 * over ranks and accumulation steps therefore draws the same windows (equivalence tests,
 * resuming on another number of ranks). */
static int source_next(token_source *s, int32_t *tok, int32_t *tgt, int B, int T, base_err *err) {
    if (s->loader) return data_loader_next(s->loader, tok, tgt, err) == 1 ? 0 : -1;
    const uint64_t window = (uint64_t)B * (uint64_t)(T + 1);
    uint64_t at = s->counter + (uint64_t)s->dp_rank * window;
    for (int b = 0; b < B; b++) {
        int32_t *x = tok + (size_t)b * T, *y = tgt + (size_t)b * T;
        for (int t = 0; t <= T; t++) {
            int32_t v = (int32_t)(base_rng_u64(s->seed, 0xda7a, at++) % s->vocab);
            if (t < T) x[t] = v;
            if (t > 0) y[t - 1] = v;
        }
    }
    s->counter += (uint64_t)s->dp_size * window;
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
/* The size of one rank's data-loader state as JSON text (data_loader_state_format). */
#define LOADER_STATE_BYTES 512

/* states: every data-parallel rank's loader state (dp_size x LOADER_STATE_BYTES), or NULL. */
static char *train_state_json(const train_opts *o, const token_source *src, const optim_adamw *opt,
                              const model *m, int64_t step, int model_only, int64_t tokens_seen,
                              const char *states) {
    json_t *root = json_object();
    json_object_set_new(root, "step", json_integer(step));
    json_object_set_new(root, "model_only", json_boolean(model_only));
    json_object_set_new(root, "adam_step", json_integer(opt->step));
    json_object_set_new(root, "random_tokens_counter", json_integer((json_int_t)src->counter));
    json_object_set_new(root, "tokens_seen", json_integer(tokens_seen));
    json_object_set_new(root, "seed", json_integer((json_int_t)o->seed));
    json_object_set_new(root, "model", args_json(&o->model));
    json_object_set_new(root, "tokenizer", train_tokenizer_json(o, src->tok));
    train_moe_bias_json(root, m);
    if (src->loader) { /* rank 0's as "data_loader"; all of them when there are several */
        json_object_set_new(root, "data_loader", json_loads(states, 0, NULL));
        if (src->dp_size > 1) {
            json_t *all = json_array();
            for (int r = 0; r < src->dp_size; r++)
                json_array_append_new(all,
                                      json_loads(states + (size_t)r * LOADER_STATE_BYTES, 0, NULL));
            json_object_set_new(root, "data_loaders", all);
        }
    } else {
        json_object_set_new(root, "data_loader", json_null());
    }
    char *text = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(root);
    return text;
}

/* Restores a run from dir/step-N: weights, AdamW moments and step, data position, RNG.
 * Returns the step to continue after, or -1 with err. */
/* Loads buffers names[nb] of dir/step-N into this rank's pieces p[np] of the shard vectors
 * dst[nb] (global offsets in the full layout of n_floats). */
static int load_pieces(const char *dir, int64_t step, const char *const *names, float *const *dst,
                       int nb, const dist_piece *p, int np, size_t n_floats, base_err *err) {
    ckpt_step_buf *b = train_piece_bufs(names, nb, p, np, n_floats, NULL, dst, NULL);
    if (!b) return base_fail(err, "out of memory");
    int rc = ckpt_step_load(dir, step, b, nb * np, err);
    free(b);
    return rc;
}

/* The data position of a checkpoint's "train" object: the random-token counter and this
 * rank's loader state. */
static int restore_data(const json_t *t, token_source *src, const char *dir, int64_t step,
                        base_err *err) {
    src->counter = (uint64_t)json_integer_value(json_object_get(t, "random_tokens_counter"));
    if (src->loader == NULL) return 0;
    json_t *dl = json_object_get(t, "data_loader"), *dls = json_object_get(t, "data_loaders");
    const int saved_dp = json_is_array(dls) ? (int)json_array_size(dls) : 1;
    if (saved_dp != src->dp_size)
        return base_fail(err,
                         "%s/step-%lld: the data loaders' positions belong to %d data-parallel "
                         "ranks, this run has %d: resume a dataset on the same data-parallel "
                         "size (random tokens reshard freely)",
                         dir, (long long)step, saved_dp, src->dp_size);
    if (src->dp_size > 1) dl = json_array_get(dls, (size_t)src->dp_rank);
    data_loader_state ds;
    char *text = json_is_object(dl) ? json_dumps(dl, JSON_COMPACT) : NULL;
    if (!text) return base_fail(err, "%s/step-%lld has no data-loader state", dir, (long long)step);
    int bad =
        data_loader_state_parse(text, &ds, err) || data_loader_set_state(src->loader, &ds, err);
    free(text);
    return bad ? -1 : 0;
}

/* Every data-parallel rank's loader position into states[dp_size][LOADER_STATE_BYTES]
 * (collective over dp); nothing for random tokens. */
static void gather_loader_states(const token_source *src, dist_comm *dp, char *states) {
    if (!src->loader) return;
    char mine[LOADER_STATE_BYTES] = {0};
    data_loader_state ds;
    data_loader_get_state(src->loader, &ds);
    data_loader_state_format(&ds, mine, sizeof mine);
    dist_allgather_bytes(dp, mine, states, LOADER_STATE_BYTES);
}

static int64_t resume(const train_opts *o, const train_start *plan, model *m, const dist_fsdp *f,
                      const dist_piece *pieces, int n_pieces, optim_adamw *opt, token_source *src,
                      int64_t *tokens_seen, base_err *err) {
    const char *dir = plan->ckdir;
    const int64_t step = plan->resume_step;
    const unsigned load = plan->load;
    char *tj = NULL;
    int world;
    if (ckpt_step_read_meta(dir, step, &tj, &world, err)) return -1;
    json_t *t = json_loads(tj, 0, NULL), *want = args_json(&o->model);
    free(tj);
    int64_t rc = -1;
    if (train_state_check(t, dir, step, err)) goto out;
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
    /* this rank's shard of every buffer it loads, from any number of shard files */
    const char *names[3];
    float *dst[3];
    int nb = 0;
    if (load & TRAIN_CKPT_MODEL) {
        names[nb] = "model";
        dst[nb++] = dist_fsdp_shard_params(f);
    }
    if (load & TRAIN_CKPT_OPTIMIZER) {
        names[nb] = "adam_m";
        dst[nb++] = opt->m;
        names[nb] = "adam_v";
        dst[nb++] = opt->v;
    }
    if (nb && load_pieces(dir, step, names, dst, nb, pieces, n_pieces, m->full_floats, err))
        goto out;
    if ((load & TRAIN_CKPT_MODEL) && train_moe_bias_load(m, t, dir, err)) goto out;
    if (model_only) { /* weights only: a fresh start from them */
        base_log(BASE_LOG_INFO, "checkpoint: loaded weights of %s/step-%lld (model only)", dir,
                 (long long)step);
        rc = plan->start;
        goto out;
    }
    if (load & TRAIN_CKPT_OPTIMIZER)
        opt->step = json_integer_value(json_object_get(t, "adam_step"));
    if (load & TRAIN_CKPT_TRAIN_STATE)
        *tokens_seen = json_integer_value(json_object_get(t, "tokens_seen"));
    if ((load & TRAIN_CKPT_DATALOADER) && restore_data(t, src, dir, step, err)) goto out;
    char left_out[80] = ""; /* checkpoint.exclude_from_loading */
    train_ckpt_parts_str(~load & TRAIN_CKPT_ALL, left_out, sizeof left_out);
    base_log(BASE_LOG_INFO, "checkpoint: resumed from %s/step-%lld%s%s", dir, (long long)step,
             left_out[0] ? "; not loaded:" : "", left_out);
    rc = plan->start;
out:
    json_decref(t);
    json_decref(want);
    return rc;
}

/* Names the first parameter with a non-finite gradient (for the error message): by
 * parameter when this rank's shard is the whole buffer, else by unit. */
static const char *first_nonfinite_param(const model *m, const dist_fsdp *f) {
    const float *gs = dist_fsdp_shard_grads(f);
    if (gs != m->g) {
        for (size_t i = 0; i < dist_fsdp_shard_len(f); i++)
            if (!isfinite(gs[i])) return m->units[dist_fsdp_unit_of(f, i)].name;
        return "(none found)";
    }
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
static int validate(const train_opts *o, const token_source *src, model *train, dist_fsdp *f,
                    model *ev, double *loss, int64_t *ntok, base_err *err) {
    data_loader_cfg c = {.path = o->val.path,
                         .format = o->data_format,
                         .field = o->data_field,
                         .skip_bad_lines = o->skip_bad_lines,
                         .enc = {src->tok, o->model.vocab_size},
                         .seq_len = o->val.seq_len,
                         .batch = o->val.batch,
                         .dp_size = 1,
                         .infinite = 0};
    /* Every rank evaluates the whole set (dp_size 1): the ranks stay in step for FSDP's
     * gathers whatever the documents' split. */
    model *m = ev ? ev : train;
    if (ev) {
        dist_fsdp_gather_all(f);
        memcpy(ev->w, train->w, train->n_floats * sizeof(float));
        dist_fsdp_release_all(f);
    }
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

/* checkpoint.initial_load_path: weights from an HF folder, a titan checkpoint or model
 * folder, or a safetensors file; a source that names its model must name this one. */
static int initial_load(const train_opts *o, model *m, base_err *err) {
    ckpt_source s;
    model_args a;
    const char *p = o->ckpt.initial_load_path;
    if (ckpt_source_open(&s, p, err)) return -1;
    if (s.kind != CKPT_SRC_FILE) {
        if (ckpt_source_args(&s, &a, err)) return -1;
        const model_args *b = &o->model;
        if (a.dim != b->dim || a.n_layers != b->n_layers || a.n_heads != b->n_heads ||
            a.n_kv_heads != b->n_kv_heads || a.head_dim != b->head_dim || a.ffn_dim != b->ffn_dim ||
            a.vocab_size != b->vocab_size || a.tie_embeddings != b->tie_embeddings ||
            a.rope_theta != b->rope_theta || a.norm_eps != b->norm_eps)
            return base_fail(err,
                             "%s describes another model (dim %d, %d layers, %d/%d heads x %d, "
                             "ffn %d, vocab %d, tied %d, rope_theta %g, eps %g) than this run's "
                             "(%d, %d, %d/%d x %d, %d, %d, %d, %g, %g): set model.config_path "
                             "to it",
                             p, a.dim, a.n_layers, a.n_heads, a.n_kv_heads, a.head_dim, a.ffn_dim,
                             a.vocab_size, a.tie_embeddings, a.rope_theta, a.norm_eps, b->dim,
                             b->n_layers, b->n_heads, b->n_kv_heads, b->head_dim, b->ffn_dim,
                             b->vocab_size, b->tie_embeddings, b->rope_theta, b->norm_eps);
    }
    if (ckpt_source_load(&s, m, m->w, err)) return -1;
    base_log(BASE_LOG_INFO, "checkpoint: initial weights from %s (%s)", p,
             ckpt_source_kind_name(s.kind));
    return 0;
}

/* A Hugging Face folder of the current weights (export_dtype, tokenizer files from assets). */
static int export_hf(const train_opts *o, const model *m, const char *dir, base_err *err) {
    ckpt_export_opts eo = {CKPT_F32, 0, o->assets_dir, NULL};
    if (o->export_dtype && ckpt_export_dtype_parse(o->export_dtype, &eo.dtype))
        return base_fail(err, "export_dtype '%s' is not float32, bfloat16 or float16",
                         o->export_dtype);
    if (ckpt_export_hf(m, dir, &eo, err)) return -1;
    base_log(BASE_LOG_INFO, "exported Hugging Face model to %s (%s%s)", dir,
             ckpt_dtype_name(eo.dtype), o->assets_dir ? ", tokenizer files" : "");
    return 0;
}

/* "none", "full", or "selective (every 2 blocks: 4 of 8)". */
static const char *ac_name(const train_opts *o, char *buf, size_t n) {
    if (o->ac != MODEL_AC_SELECTIVE) return o->ac == MODEL_AC_FULL ? "full" : "none";
    snprintf(buf, n, "selective (every %d blocks: %d of %d)", o->ac_every,
             model_ac_blocks(o->ac, o->ac_every, o->model.n_layers), o->model.n_layers);
    return buf;
}

/* The header `titan train` prints before the first step. */
static void print_header(const train_opts *o, const model *m, const token_source *src,
                         const dist_mesh *mesh, double peak, double fpt) {
    model_counts cnt;
    model_count_params(&o->model, &cnt);
    const model_args *a = &o->model;
    printf("titan train: model %s: %.2fM parameters (%d layers, dim %d, %d/%d heads x %d, ffn "
           "%d, vocab %d, %s embeddings), %.3f GFLOP/token\n",
           a->flavor, cnt.total / 1e6, a->n_layers, a->dim, a->n_heads, a->n_kv_heads, a->head_dim,
           a->ffn_dim, a->vocab_size, a->tie_embeddings ? "tied" : "untied", fpt / 1e9);
    char desc[1024] = "uniform random tokens";
    if (src->loader) data_loader_describe(src->loader, desc, sizeof desc);
    printf("  data: %s\n  step: %d x %d tokens x %d microbatches x %d data-parallel ranks = %lld "
           "tokens; %d steps\n",
           desc, o->batch, o->seq_len, o->grad_accum, mesh->dp_size,
           (long long)o->batch * o->seq_len * o->grad_accum * mesh->dp_size, o->steps);
    /* per rank: parameters, gradients and AdamW state are sharded over dp_shard (FSDP), but
     * for this rank's own experts under EP (MODEL_EP_EXPERTS), sharded over efsdp */
    size_t own = 0;
    for (int i = 0; i < m->n_params; i++)
        if (m->params[i].tp_split == MODEL_EP_EXPERTS) own += m->params[i].numel;
    const double gib = 1 << 30,
                 pb = ((double)(m->n_floats - own) / mesh->dp_shard + (double)own / mesh->efsdp) *
                      sizeof(float);
    const double act = (double)model_activation_bytes(m);
    char acn[64];
    static const char *const reshard[] = {"default", "always", "never"};
    char epd[32] = ""; /* expert parallelism is carved from dp_shard */
    if (mesh->ep > 1) snprintf(epd, sizeof epd, " x ep %d", mesh->ep);
    if (mesh->world > 1)
        printf("  parallelism: %d processes = dp_replicate %d x dp_shard %d x tp %d%s, %d threads "
               "each; FSDP reshard_after_forward %s; activation checkpointing %s%s\n",
               mesh->world, mesh->dp_replicate, mesh->dp_shard, mesh->tp, epd,
               omp_get_max_threads(), reshard[o->reshard], ac_name(o, acn, sizeof acn),
               mesh->tp > 1 && o->loss_parallel_off ? "; loss parallel off (whole-vocabulary CE)"
                                                    : "");
    else
        printf("  parallelism: 1 process, %d threads; activation checkpointing %s\n",
               omp_get_max_threads(), ac_name(o, acn, sizeof acn));
    printf("  memory estimate%s: %.2f GiB = weights %.2f + gradients %.2f + AdamW %.2f + "
           "activations %.2f (of %.1f GiB RAM)\n",
           mesh->world > 1 ? " per rank (titan plan for details)" : "", (4 * pb + act) / gib,
           pb / gib, pb / gib, 2 * pb / gib, act / gib, (double)base_total_ram() / gib);
    printf("  kernels (layers.0):");
    const ops_table *t = &m->ops[1 < m->n_units ? 1 : 0];
    for (int k = 0; k < OPS_COUNT; k++)
        if (t->impl[k]) printf(" %s=%s", ops_kind_name((ops_kind)k), t->impl[k]->name);
    printf("; CPU kernels ISA %s", ops_cpu_isa());
    printf("\n  fp32 GEMM peak for MFU: %.1f GFLOP/s (%s)\n", peak / 1e9,
           o->peak_flops > 0 ? "configured" : "measured");
    fflush(stdout);
}

/* Tokens one rank trains on per step. */
static double ntok_per_step(const train_opts *o) {
    return (double)o->batch * o->seq_len * o->grad_accum;
}

int train_run(const train_opts *o, base_err *err) {
    int rc = -1;
    if (o->steps <= 0 || o->grad_accum <= 0)
        return base_fail(err, "steps and grad_accum must be positive");
    dist_mesh mesh; /* the watchdog first: it covers start-up's collectives too */
    if (dist_watchdog_start(o->comm_init_timeout, "comm.init_timeout_seconds", err) ||
        dist_mesh_init(&mesh, &o->par, err))
        return -1;
    const int lead = mesh.rank == 0; /* writes the console, metrics and the HF export */
    if (mesh.world > 1) {
        base_log_set_rank(mesh.rank);
        if (!lead) { /* other ranks log to stderr only, with their rank */
            base_log_all_to_stderr(1);
            if (!freopen("/dev/null", "w", stdout)) base_log(BASE_LOG_WARN, "stdout stays open");
        }
    }
    train_lock lock;
    token_source src;
    if (train_preflight(o, &mesh, err) ||
        train_lock_outputs(&lock, o, mesh.world_comm, mesh.rank, err) ||
        source_open(&src, o, &mesh, err)) {
        train_unlock_outputs(&lock);
        dist_mesh_free(&mesh);
        return -1;
    }
    model m;
    const model_tp tpg = {mesh.tp,           mesh.tp_rank,
                          dist_tp_allgather, dist_tp_reduce_scatter,
                          dist_tp_allreduce, mesh.tp_comm};
    const model_ep epg = {mesh.ep, mesh.ep_rank, dist_ep_alltoall, dist_ep_alltoallv, mesh.ep_comm};
    model_build_opts bo = {o->batch,
                           o->seq_len,
                           o->ac,
                           1,
                           o->kernel_overrides,
                           o->n_kernel_overrides,
                           o->ce_chunk,
                           o->moe_balance,
                           o->moe_bias_rate,
                           &tpg,
                           &epg,
                           o->ac_every,
                           o->moe_force_balance,
                           o->loss_parallel_off};
    /* the group holding one model's slices (tp and ep never combine) */
    dist_comm *slices = mesh.tp > 1 ? mesh.tp_comm : mesh.ep_comm;
    const int sliced = mesh.tp > 1 || mesh.ep > 1;
    dist_tp_pieces tpp = {0};
    model full = {0}; /* tp > 1: the whole model, for exports and sampling */
    const model *whole = &m;
    optim_adamw opt = {0};
    dist_fsdp *f = NULL;
    train_metrics *mx = NULL;
    int32_t *tok = NULL, *tgt = NULL;
    train_saver *saver = NULL;
    model ev = {0};
    int have_ev = 0;
    char *state = NULL, *states = NULL;
    if (train_stop_install(o->preemption_signal, err)) goto out;
    /* dp_shard > 1: FSDP owns the parameter and gradient buffers */
    if ((mesh.dp_shard > 1 ? model_build_external(&m, &o->model, &bo, err)
                           : model_build(&m, &o->model, &bo, err)) ||
        train_setup_fsdp(&m, &mesh, o, &f, err) || train_tp_pieces(&tpp, &m, f, mesh.tp_rank, err))
        goto out;
    train_start plan; /* before the init: a load that overwrites every weight skips it */
    if (train_start_plan(o, &plan, err)) goto out;
    if (!plan.skip_init) { /* unit by unit: with FSDP only one unit is ever whole in memory */
        const double t0 = train_phase_begin("initialising the weights");
        for (int u = 0; u < m.n_units; u++) {
            model_init_unit_weights(&m, u, o->seed);
            dist_fsdp_store_unit(f, u);
        }
        train_phase_end("initialising the weights", t0);
    }
    float *const ws = dist_fsdp_shard_params(f), *const gs = dist_fsdp_shard_grads(f);
    const size_t ns = dist_fsdp_shard_len(f);
    if (optim_adamw_init(&opt, ns, err)) goto out;
    /* MoE aux loss: the step's is the mean over its microbatches and data-parallel ranks */
    const int aux_on = m.balance == MODEL_BALANCE_AUX_LOSS;
    if (aux_on)
        m.aux_scale = (float)(o->model.router_aux_loss_coef / (o->grad_accum * mesh.dp_size));
    const size_t NT = (size_t)o->batch * o->seq_len;
    tok = base_alloc(NT * o->grad_accum * sizeof(int32_t));
    tgt = base_alloc(NT * o->grad_accum * sizeof(int32_t));
    states = calloc((size_t)mesh.dp_size, LOADER_STATE_BYTES);
    if (!tok || !tgt || !states) {
        base_fail(err, "out of memory");
        goto out;
    }
    double peak = o->peak_flops > 0 ? o->peak_flops : o->ckpt.create_seed ? 1 : 0;
    if (!(peak > 0)) {
        const double t0 = train_phase_begin("measuring the fp32 GEMM peak for MFU");
        peak = train_measure_peak_flops();
        train_phase_end("measuring the fp32 GEMM peak", t0);
    }
    if (!(peak > 0)) {
        base_fail(err,
                  "could not measure the GEMM peak for MFU (out of memory?); pass --peak-tflops");
        goto out;
    }
    const double fpt = model_flops_per_token(&o->model, o->seq_len);
    print_header(o, &m, &src, &mesh, peak, fpt);
    if (o->val.path && (o->val.batch != o->batch || o->val.seq_len != o->seq_len)) {
        model_build_opts vo = bo; /* the training model's, at the validation shape */
        vo.batch = o->val.batch;
        vo.seq_len = o->val.seq_len;
        vo.ac = MODEL_AC_NONE;
        vo.with_grads = 0;
        have_ev = 1;
        if (model_build(&ev, &o->model, &vo, err)) goto out;
    }
    /* checkpoints: resume from the newest (or load_step), else start from initial_load_path */
    const char *const ckdir = plan.ckdir;
    int64_t start = 0, tokens_seen = 0;
    const double t_load = base_now();
    if (plan.resume_step >= 0)
        base_log(BASE_LOG_INFO, "checkpoint: loading %s/step-%lld ...", ckdir,
                 (long long)plan.resume_step);
    if (plan.resume_step >= 0 &&
        (start = resume(o, &plan, &m, f, tpp.all, tpp.n_all, &opt, &src, &tokens_seen, err)) < 0)
        goto out;
    if (plan.initial) {
        base_log(BASE_LOG_INFO, "checkpoint: loading the initial weights from %s ...",
                 plan.initial);
        if (!sliced && initial_load(o, &m, err)) goto out;
        if (sliced) { /* the whole model, then this rank's slices of it */
            if (train_full_model(&full, &m, o, slices, err) || initial_load(o, &full, err))
                goto out;
            if (train_take_slices(&m, full.w, err)) goto out;
            model_free(&full);
        }
        for (int u = 0; u < m.n_units; u++) dist_fsdp_store_unit(f, u);
    }
    if (plan.resume_step >= 0 || plan.initial) train_phase_end("checkpoint: loading", t_load);
    if (o->ckpt.enable && !o->ckpt.load_only) {
        /* TP: a rank's slices are pieces of the full layout (checkpoints reshard to any tp) */
        train_saver_layout lay = {
            mesh.world_comm,
            mesh.rank,
            mesh.replicate_rank == 0 ? mesh.shard_rank * mesh.tp + mesh.tp_rank : -1,
            mesh.dp_shard * mesh.tp,
            tpp.save,
            tpp.n_save,
            m.full_floats};
        if (train_saver_init(&saver, ckdir, ns, &lay, o->ckpt.async, o->ckpt.keep_latest_k, err))
            goto out;
    }
    if (o->ckpt.create_seed) { /* torchtitan: the initialised weights as step-0, then exit */
        gather_loader_states(&src, mesh.dp_comm, states);
        state = train_state_json(o, &src, &opt, &m, 0, 1, 0, states);
        if (!state || train_saver_save(saver, 0, ws, NULL, NULL, 1, state, err) ||
            train_saver_finish(saver, err))
            goto out;
        base_log(BASE_LOG_INFO, "checkpoint: seed checkpoint %s/step-0 written", ckdir);
        rc = 0;
        goto out;
    }
    optim_lr_cfg lrc = o->lr;
    if (lrc.total_steps <= 0) lrc.total_steps = o->steps;
    double t_total = 0, comm_total = 0;
    int64_t tokens_total = 0;
    const int last =
        o->stop_after_step > 0 && o->stop_after_step < o->steps ? o->stop_after_step : o->steps;
    if (train_metrics_open(&mx, o, &mesh, start, last, peak, fpt, aux_on, err)) goto out;
    for (int step = (int)start + 1; step <= last; step++) {
        double t0 = base_now();
        const double comm0 = dist_comm_seconds();
        int64_t valid = 0;
        for (int mb = 0; mb < o->grad_accum; mb++) {
            if (source_next(&src, tok + mb * NT, tgt + mb * NT, o->batch, o->seq_len, err))
                goto out;
            for (size_t i = 0; i < NT; i++) valid += tgt[mb * NT + i] != OPS_IGNORE_INDEX;
        }
        const int64_t local_valid = valid; /* for this rank's own mean (max_loss) */
        /* the loss is normalised by the valid targets of the whole step on all ranks */
        dist_allreduce_i64(mesh.dp_comm, &valid, 1);
        double t_data = base_now() - t0;
        dist_fsdp_begin_step(f);
        if (m.moe_counts) /* MoE: tokens per expert, counted afresh each step */
            memset(m.moe_counts, 0,
                   (size_t)m.args.n_layers * m.args.n_experts * sizeof(*m.moe_counts));
        double loss_sum = 0, sumsq = 0, aux_sum = 0;
        for (int mb = 0; mb < o->grad_accum; mb++) {
            const double l = model_step_microbatch(&m, tok + mb * NT, tgt + mb * NT,
                                                   valid ? 1.0f / (float)valid : 0.0f, NULL);
            loss_sum += l;
            aux_sum += m.moe_aux_loss;
            /* checked per microbatch (cumulative gradients) so the error names the one */
            sumsq = optim_sumsq(gs, ns);
            if (!isfinite(l) || !isfinite(sumsq)) {
                base_fail(err,
                          "step %d, microbatch %d of %d: non-finite %s (loss %g); first "
                          "non-finite gradient: %s; stopping (the last checkpoint is intact)",
                          step, mb + 1, o->grad_accum, isfinite(l) ? "gradient" : "loss",
                          l / (valid ? (double)valid : 1.0), first_nonfinite_param(&m, f));
                goto out;
            }
        }
        if (mesh.dp_replicate > 1) { /* HSDP: replicas sum their shard gradients */
            dist_fsdp_sync_replicas(f);
            sumsq = optim_sumsq(gs, ns);
        }
        if (mesh.tp > 1) { /* replicated norm weights: sum their gradients over the group */
            sumsq = dist_tp_grad_sumsq(&tpp, gs, ns, optim_sumsq, mesh.tp_comm);
        }
        /* the global norm: every shard once (replicas hold the same shard) */
        dist_allreduce_f64(mesh.shard_comm, &sumsq, 1);
        double max_loss = local_valid ? loss_sum / (double)local_valid : 0.0;
        dist_allreduce_max_f64(mesh.dp_comm, &max_loss, 1);
        dist_allreduce_f64(mesh.dp_comm, &loss_sum, 1);
        dist_allreduce_f64(mesh.dp_comm, &aux_sum, 1);
        const double aux = aux_sum / ((double)o->grad_accum * mesh.dp_size); /* 0 when off */
        const double loss =
            (valid ? loss_sum / (double)valid : 0.0) + o->model.router_aux_loss_coef * aux * aux_on;
        max_loss += o->model.router_aux_loss_coef * aux * aux_on;
        const double norm = optim_clip_apply(gs, ns, sumsq, o->max_norm);
        const double lr = o->adamw.lr * optim_lr_factor(&lrc, step - 1 + plan.lr_base);
        if (m.balance == MODEL_BALANCE_BIAS) { /* expert bias from all ranks' token counts */
            dist_allreduce_i64(mesh.dp_comm, m.moe_counts,
                               (size_t)m.args.n_layers * m.args.n_experts);
            model_moe_update_bias(&m, NULL);
        }
        optim_adamw_step(&opt, ws, gs, &o->adamw, lr);
        const double dt = base_now() - t0, comm = dist_comm_seconds() - comm0;
        const int64_t ntok = (int64_t)NT * o->grad_accum; /* this rank's tokens */
        tokens_seen += ntok * mesh.dp_size;
        if (step > 1 || o->steps == 1) { /* step 1 includes first-touch page faults */
            t_total += dt;
            comm_total += comm;
            tokens_total += ntok;
        }
        double val_loss = NAN, val_s = 0;
        int64_t val_tok = 0;
        if (o->val.path && (step % o->val.freq == 0 || step == last)) {
            val_s = base_now();
            if (validate(o, &src, &m, f, have_ev ? &ev : NULL, &val_loss, &val_tok, err)) goto out;
            val_s = base_now() - val_s;
        }
        const train_step_metrics sm = {step,   mesh.dp_size, loss,     max_loss,    norm,
                                       lr,     aux,          ntok,     tokens_seen, dt,
                                       t_data, comm,         val_loss, val_s,       val_tok};
        if (train_metrics_log_step(mx, &sm, &m, err)) goto out;
        const int stop_sig = train_stop_agree(mesh.world_comm); /* save this step, then stop */
        if (train_saver_poll(saver, err)) goto out; /* commits a finished background save */
        if (saver && step == o->steps && o->ckpt.last_save_in_hf) { /* HF folder, step-N/ */
            char dir[4200];
            snprintf(dir, sizeof dir, "%s/step-%d", ckdir, step);
            if (train_saver_finish(saver, err)) goto out;
            dist_fsdp_gather_all(f); /* whole weights on every rank; rank 0 writes them */
            if (sliced && whole == &m) {
                if (train_full_model(&full, &m, o, slices, err)) goto out;
                whole = &full;
            }
            if (lead && export_hf(o, whole, dir, err)) goto out;
        } else if (saver && (step % o->ckpt.interval == 0 || step == last || stop_sig ||
                             (step == 1 && o->ckpt.first_step))) {
            const int model_only = step == o->steps && o->ckpt.last_save_model_only;
            gather_loader_states(&src, mesh.dp_comm, states);
            free(state);
            state = train_state_json(o, &src, &opt, &m, step, model_only, tokens_seen, states);
            if (!state || train_saver_save(saver, step, ws, opt.m, opt.v, model_only, state, err))
                goto out;
        }
        if (stop_sig) {
            rc = train_stop_finish(saver, stop_sig, step, ckdir, err);
            goto out;
        }
        if (step == (int)start + 1)
            dist_watchdog_set_timeout(o->comm_train_timeout, "comm.train_timeout_seconds");
    }
    dist_watchdog_set_timeout(0, NULL); /* rank 0 alone exports and samples from here */
    if (train_saver_finish(saver, err)) goto out;
    const double tps = t_total > 0 ? tokens_total / t_total : 0;
    if (mesh.world > 1) {
        dist_fsdp_stats st;
        dist_fsdp_get_stats(f, &st);
        printf("summary: steps=%d tokens_per_s=%.2f tokens_per_s_per_rank=%.2f mfu=%.2f "
               "peak_rss_gib=%.3f comm_s_per_step=%.4f step_s=%.4f ranks=%d\n",
               o->steps, tps * mesh.dp_size, tps, 100.0 * fpt * tps / peak,
               (double)base_peak_rss() / (1 << 30),
               tokens_total ? comm_total * ntok_per_step(o) / tokens_total : 0,
               tokens_total ? t_total * ntok_per_step(o) / tokens_total : 0, mesh.world);
    } else {
        printf("summary: steps=%d tokens_per_s=%.2f mfu=%.2f peak_rss_gib=%.3f\n", o->steps, tps,
               100.0 * fpt * tps / peak, (double)base_peak_rss() / (1 << 30));
    }
    if (o->out_dir || o->sample_tokens > 0) {
        dist_fsdp_gather_all(f); /* whole weights */
        if (sliced && whole == &m) {
            if (train_full_model(&full, &m, o, slices, err)) goto out;
            whole = &full;
        }
    }
    if (o->out_dir && lead && export_hf(o, whole, o->out_dir, err)) goto out;
    if (o->sample_tokens > 0 && lead && sample(whole, o, &src, err)) goto out;
    rc = 0;
out:
    if (train_metrics_close(mx, rc ? NULL : err) && rc <= 0) rc = -1;
    train_stop_uninstall();
    dist_watchdog_stop();
    base_free(tok);
    base_free(tgt);
    free(states);
    optim_adamw_free(&opt);
    if (rc != 0) { /* report the original error; a background save still finishes */
        base_err e2;
        if (train_saver_abandon(saver, &e2)) base_log(BASE_LOG_ERROR, "%s", e2.msg);
    }
    train_saver_free(saver);
    if (have_ev) model_free(&ev);
    free(state);
    model_free(&m);
    model_free(&full);
    dist_tp_pieces_free(&tpp);
    dist_fsdp_free(f);
    source_close(&src);
    train_unlock_outputs(&lock);
    dist_mesh_free(&mesh);
    return rc;
}
