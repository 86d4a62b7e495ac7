/* train: job configs (TOML files + command-line overrides), the training loop, metrics,
 * and sampling. */
#ifndef TITAN_TRAIN_H
#define TITAN_TRAIN_H

#include <stdint.h>
#include <stdio.h>

#include "../base/base.h"
#include "../data/data.h"
#include "../dist/dist.h"
#include "../model/model.h"
#include "../optim/optim.h"

/* [checkpoint] as torchtitan v0.2.2 (shared/research/torchtitan_qwen3.md §4.1). */
typedef struct {
    int enable;
    const char *folder;            /* under dump_folder unless absolute ("checkpoint") */
    int interval;                  /* save every this many steps, and at the last step */
    int keep_latest_k;             /* keep the newest k complete checkpoints (0 = all) */
    int64_t load_step;             /* resume from this step; -1 = the latest complete one */
    const char *initial_load_path; /* weights to start from when there is nothing to resume */
    int initial_load_model_only;   /* (titan loads only weights from initial_load_path) */
    int initial_load_in_hf;        /* initial_load_path is a Hugging Face folder or file */
    int last_save_model_only;      /* the save at the last step holds only the weights */
    int last_save_in_hf;           /* ... written as a Hugging Face folder, step-N/ */
    int async;                     /* save in a background thread (when memory allows) */
} train_ckpt_opts;

typedef struct {
    model_args model;
    const char *dump_folder; /* job.dump_folder: checkpoints (and outputs) go under it */
    train_ckpt_opts ckpt;
    const char *data_path;     /* dataset (file, folder, glob); NULL = random tokens */
    const char *tokenizer_dir; /* HF tokenizer folder; NULL = one token per byte */
    data_format data_format;
    const char *data_field; /* JSONL text field (NULL = "text") */
    int skip_bad_lines;
    int steps, batch, seq_len, grad_accum;
    int stop_after_step; /* > 0: exit cleanly after this step (the schedule still spans steps) */
    optim_adamw_cfg adamw;
    optim_lr_cfg lr;
    double max_norm;
    uint64_t seed;
    model_ac_mode ac;
    int log_freq;
    const char *jsonl_path; /* per-step metrics, one JSON object per line (NULL = none) */
    const char *tb_dir;     /* TensorBoard event folder (NULL = none) */
    struct {                /* [validation]: held-out loss every freq steps (path NULL = off) */
        const char *path;
        int freq, steps, batch, seq_len; /* steps <= 0: the whole set */
    } val;
    const char *out_dir;      /* final weights as safetensors with HF names (NULL = none) */
    const char *export_dtype; /* HF exports: float32 (NULL), bfloat16, float16 */
    const char *assets_dir;   /* HF exports copy the tokenizer files from here (NULL = none) */
    int sample_tokens;        /* after training, sample this many tokens (0 = none) */
    double peak_flops;        /* fp32 FLOP/s for MFU; <= 0 = measure */
    int ce_chunk;             /* tokens per fused lm_head+CE chunk (0 = automatic) */
    const ops_override *kernel_overrides; /* [kernels] overrides, for ops_resolve */
    int n_kernel_overrides;
    dist_mesh_cfg par;         /* [parallelism] degrees (dp_shard resolved against the world) */
    dist_reshard reshard;      /* parallelism.fsdp_reshard_after_forward */
    model_balance moe_balance; /* MoE load balancing (model_build_opts.balance) */
    double moe_bias_rate;      /* expert-bias update step (0 = 1e-3) */
} train_opts;

/* ---- job configs (train/config.c) -------------------------------------------------------
 * torchtitan v0.2.2's JobConfig sections and field names ([job], [model], [training],
 * [optimizer], [lr_scheduler], [checkpoint], [parallelism], [activation_checkpoint],
 * [metrics], [validation]) plus titan's [kernels] and a few titan extras, described by one
 * schema table in config.c (type, default, range, help per field). Values come from the
 * defaults, then a TOML file, then command-line overrides (`--section.key value`,
 * `--section.key=value`, or one of the older flags such as --steps, each an alias of one
 * field); the last setting wins. Every error names where the value came from (file:line:col
 * or the command-line option) and suggests the nearest valid name.
 *
 * Strings are never NULL ("" = None); optional numbers use train_opt_*, whose `set` = 0 is
 * torchtitan's None. All strings and lists are owned by the config (train_config_free). */
typedef struct {
    int set;
    int64_t v;
} train_opt_int;
typedef struct {
    int set;
    double v;
} train_opt_float;
typedef struct {
    const char *const *v;
    int n;
} train_str_list;
typedef struct {
    const int64_t *v;
    int n;
} train_int_list;

#define TRAIN_CONFIG_MAX_FIELDS 128

typedef struct {
    struct {
        const char *dump_folder, *description;
        int64_t sample_tokens;
    } job;
    struct {
        const char *name, *flavor, *hf_assets_path, *config_path;
        /* overrides of the flavor's arguments (unset = the flavor's value) */
        train_opt_int dim, n_layers, n_heads, n_kv_heads, head_dim, ffn_dim, vocab_size,
            max_seq_len, tie_embeddings;
        train_opt_float rope_theta, norm_eps;
        train_opt_int num_experts, top_k, moe_inter_dim; /* MoE overrides */
        train_opt_float router_aux_loss_coef;
        const char *moe_load_balance; /* none | aux_loss | bias */
        double moe_bias_update_rate;
        train_int_list mlp_only_layers;
    } model;
    struct {
        const char *dataset, *dataset_path, *dataset_format, *dataset_field;
        int64_t local_batch_size, global_batch_size, seq_len, steps, seed, threads, ce_chunk,
            stop_after_step;
        int skip_bad_lines;
        double max_norm;
    } training;
    struct {
        const char *name, *implementation;
        double lr, beta1, beta2, eps, weight_decay;
    } optimizer;
    struct {
        int64_t warmup_steps;
        train_opt_int total_steps;
        train_opt_float decay_ratio;
        const char *decay_type;
        double min_lr_factor;
    } lr_scheduler;
    struct {
        int enable, initial_load_in_hf, initial_load_model_only, last_save_model_only,
            last_save_in_hf;
        const char *folder, *initial_load_path, *export_dtype, *async_mode, *hf_export_folder;
        int64_t interval, keep_latest_k, load_step;
    } checkpoint;
    struct {
        int64_t data_parallel_replicate_degree, data_parallel_shard_degree, tensor_parallel_degree,
            pipeline_parallel_degree, context_parallel_degree, expert_parallel_degree;
        const char *fsdp_reshard_after_forward;
    } parallelism;
    struct {
        const char *mode, *selective_ac_option;
    } activation_checkpoint;
    struct {
        int64_t log_freq;
        int enable_tensorboard, save_for_all_ranks, enable_jsonl;
        const char *save_tb_folder, *save_jsonl_file;
        double peak_tflops;
    } metrics;
    struct {
        int enable;
        const char *dataset, *dataset_path;
        int64_t freq, steps, local_batch_size, seq_len;
    } validation;
    struct {
        train_str_list overrides; /* "op=impl" or "layer.glob.op=impl", ops_resolve's rules;
                                     then the [kernels] "pattern" = "impl" table entries */
        train_str_list plugins;   /* kernel plugin paths, loaded by train_config_validate */
    } kernels;

    /* private: where each schema field was last set, and the config's allocations */
    struct {
        const char *where; /* file name or command-line option; NULL = default */
        int line, col;     /* line 0 = the command line */
    } origin[TRAIN_CONFIG_MAX_FIELDS];
    const char *file; /* the last file loaded (in the pool) */
    void **pool;
    int n_pool, cap_pool;
    ops_override *ovr;
} train_config;

/* What `titan train` was asked for besides a config. */
typedef struct {
    int help, print_config;
} train_cli;

void train_config_defaults(train_config *c);
void train_config_free(train_config *c);
/* Applies a TOML file / text over the current values. */
int train_config_load_file(train_config *c, const char *path, base_err *err);
int train_config_load_text(train_config *c, const char *text, size_t len, const char *name,
                           base_err *err);
/* One override: name "section.key", value as on a command line (NULL = a bare boolean flag;
 * "none" unsets an optional number); `where` names it in errors. */
int train_config_set(train_config *c, const char *name, const char *value, const char *where,
                     base_err *err);
/* argv[first..argc-1] of `titan train`: --config FILE (applied first, wherever it is), then
 * every override and alias in order, then train_config_validate. */
int train_config_from_args(train_config *c, int argc, char **argv, int first, train_cli *cli,
                           base_err *err);
/* Checks that combine fields (torchtitan's rules, the model's arguments, kernel overrides). */
int train_config_validate(const train_config *c, base_err *err);
/* The whole config as TOML that train_config_load_text reads back to the same config. */
void train_config_print(const train_config *c, FILE *f);
/* `titan train --help`: options, aliases, and every field with its default and help. */
void train_config_usage(FILE *f);
/* Fills *o for train_run (o points into c: keep c alive). Refuses, naming the field, any
 * setting titan cannot honour yet (pipeline / context / expert parallelism, MoE, ...).
 * The parallel degrees are checked against dist_world_size() (the ranks of this run);
 * grad_accum = global_batch_size / (local_batch_size x dp_replicate x dp_shard). */
int train_config_to_opts(train_config *c, train_opts *o, base_err *err);

/* The model a config describes: its flavor (base NULL; a MoE flavor then needs a base) or
 * *base (a Hugging Face config.json's arguments), with the [model] overrides applied. */
int train_config_model_args(const train_config *c, const model_args *base, model_args *a,
                            base_err *err);

/* ---- the training loop (train/train.c) --------------------------------------------------- */
void train_opts_defaults(train_opts *o);
int train_run(const train_opts *o, base_err *err);

/* ---- generation (src/train/generate.c) ------------------------------------------------ */

/* Builds m (batch 1, seq_len 1: inference keeps its own buffers) and loads its weights from
 * path, which is one of:
 *   - a training checkpoint step folder FOLDER/step-N (metadata.json; the arguments from its
 *     "train"."model" object, the weights from buffer "model", any number of rank shards);
 *   - a training checkpoint folder holding step-N folders: its newest complete one;
 *   - a folder with model.safetensors (HF names), or such a .safetensors file: the arguments
 *     are *fallback (--flavor / --set), checked against every tensor's shape.
 * Errors name the file at fault. Call model_free afterwards whether or not it succeeded. */
int train_load_model(model *m, const char *path, const model_args *fallback, base_err *err);

/* Decoded text to a FILE as tokens arrive: with a tokenizer, each token's bytes are appended
 * and only complete UTF-8 characters are written (a token may end inside a character; an
 * invalid sequence is written as it is); without one, ids < 256 are bytes and others '?' (the
 * byte-level models) or, with as_ids, every id is written in decimal followed by a space. */
typedef struct {
    const data_tok *tok;
    int as_ids;
    FILE *out;
    unsigned char pending[8]; /* bytes of an unfinished UTF-8 character */
    int n_pending;
} train_text_stream;

int train_stream_token(train_text_stream *ts, int32_t id, base_err *err);
/* Writes what is pending (an incomplete character at the end of the text) and flushes. */
void train_stream_finish(train_text_stream *ts);

typedef struct {
    model_sampler sampler;
    int max_new_tokens;
    const int32_t *stop; /* generation ends after producing one of these (not streamed) */
    int n_stop;
    train_text_stream *stream; /* NULL: nothing is printed */
} train_gen_opts;

typedef struct {
    int n_prompt, n_new; /* prompt tokens fed, tokens generated (stop token included) */
    int stopped;         /* ended on a stop token */
    double prefill_s, decode_s;
    int32_t *tokens; /* malloc'ed (free()): the prompt and the generated tokens */
    int n_tokens;
} train_gen_result;

/* Generates from prompt[0..n_prompt) (n_prompt >= 1) with s (reset first): one prefill,
 * then one cached step per token, each sampled with index = its position in the sequence.
 * When the cache is full, the sequence's last max_len / 2 tokens are prefilled again and
 * generation goes on (a sliding context, as training windows start anywhere); a prompt longer
 * than the cache keeps its last max_len tokens. */
int train_generate(model_infer *s, const int32_t *prompt, int n_prompt, const train_gen_opts *o,
                   train_gen_result *r, base_err *err);

/* ---- titan plan (src/train/plan.c) ---------------------------------------------------
 * Per-rank memory and per-step traffic of a training run on `world` ranks, from the shapes
 * alone (nothing of the model is allocated). fp32 everywhere; bytes. */
typedef struct {
    model_args model;
    int world, batch, seq_len, grad_accum;
    dist_mesh_cfg par; /* dp_shard may be -1 */
    dist_reshard reshard;
    model_ac_mode ac; /* the configured mode (both are reported) */
} train_plan_in;

typedef struct {
    dist_mesh_cfg par; /* resolved */
    int64_t n_params;
    double params, grads, adam; /* this rank's shards */
    double gathered;            /* peak of whole units in flight (FSDP), params + grads */
    double comm_buffers;        /* reduce-scatter receive buffer */
    double act_none, act_full;  /* activations without / with full activation checkpointing */
    double runtime;             /* libraries, MPI, thread stacks: a measured constant */
    double total_none, total_full;
    /* per step, per rank */
    double allgather_bytes, reduce_scatter_bytes, allreduce_bytes, scalar_bytes;
    int64_t allgathers, reduce_scatters;
    /* tensor parallelism (tp > 1): the sequence-parallel all-gathers / reduce-scatters of
     * [batch*seq_len, dim] activations and the loss-parallel CE's row reductions, per step */
    double tp_bytes;
    int64_t tp_collectives;
    /* expert parallelism (ep > 1): this rank's expert stacks (whole, inside params), the
     * all-to-all buffers (inside the activations: [R ep, D] x2 plus the expert-side rows),
     * and the token dispatch per step: 4 alltoallv of [R, D] routed rows per MoE block and
     * microbatch (6 under full AC) sending (ep-1)/ep of them when the routing is balanced,
     * plus the [ep, E/ep] count exchange */
    double ep_experts, ep_buffers, ep_bytes;
    int64_t ep_collectives;
} train_plan;

int train_plan_compute(const train_plan_in *in, train_plan *p, base_err *err);
/* The table `titan plan` prints; budget_gib > 0 adds whether the run fits. */
void train_plan_print(const train_plan_in *in, const train_plan *p, double budget_gib, FILE *f);

/* `titan plan`'s data check: whether the dataset (training.dataset_path; "" = random tokens,
 * nothing to check) has a document for each of the dp data-parallel ranks. Prints one line:
 * how it stands, or a warning naming the ranks left without data. Returns 1 when it warned. */
int train_plan_data(const char *path, const char *format, const char *field, int dp, FILE *f);

/* ---- the fp32 GEMM peak for MFU (src/train/peak.c) ----------------------------------
 * Measures this machine's fp32 GEMM rate (FLOP/s) with the linked BLAS: the best of 3-10
 * short bursts of 1024^3 GEMMs (20 ms pauses between, at most about 1.5 s); 0 when out of
 * memory. */
double train_measure_peak_flops(void);

typedef struct {
    double flops;    /* what MFU divides by, FLOP/s */
    double measured; /* this run's measurement on rank 0 (0 when configured) */
    char how[96];    /* for the header: "configured", "measured ...", "cached ..." */
} train_peak;

/* The machine key the cache is kept under: /proc/cpuinfo's first "model name" (or "unknown
 * CPU") and the thread count, e.g. "AMD EPYC 9454 48-Core Processor | 2 threads". */
void train_peak_key(int threads, char *buf, size_t n);
/* $XDG_CACHE_HOME/titan/peak_flops.json, else $HOME/.cache/titan/peak_flops.json (absolute
 * paths only); -1 with buf "" when neither is set. */
int train_peak_cache_path(char *buf, size_t n);
/* The cached FLOP/s for key, 0 when none. A file that is not a version-1 cache
 * ({"version": 1, "peaks": {key: {"flops": F, "time": unix seconds}}}, at most 1 MiB) or an
 * entry that is not a positive number at most threads x 384 GFLOP/s (more than any core
 * does) is ignored with a warning. */
double train_peak_cache_read(const char *path, const char *key, int threads);
/* Sets key's entry to flops (the other keys kept; a bad file replaced): written to a unique
 * temporary beside path (O_EXCL), fsynced and renamed over it, creating the folder. */
int train_peak_cache_write(const char *path, const char *key, double flops, base_err *err);
/* The cache only raises the peak: returns max(measured, cached), *write = 1 when the
 * measurement is higher (a quieter run replaces the cached value). */
double train_peak_choose(double measured, double cached, int *write);
/* The peak for a run on comm's ranks: configured (> 0, --peak-tflops) as it is; else rank 0
 * reads the cache, measures (measure, NULL = train_measure_peak_flops), takes
 * train_peak_choose's value, writes the cache when that says so, and every rank gets rank
 * 0's figures. Fails (on every rank) when nothing could be measured. */
int train_peak_resolve(double configured, int threads, dist_comm *comm, double (*measure)(void),
                       train_peak *out, base_err *err);

#endif
