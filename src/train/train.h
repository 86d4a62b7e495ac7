/* train: job configs (TOML files + command-line overrides), the training loop, metrics,
 * and sampling. */
#ifndef TITAN_TRAIN_H
#define TITAN_TRAIN_H

#include <stdint.h>
#include <stdio.h>

#include "base/base.h"
#include "checkpoint/checkpoint.h"
#include "data/data.h"
#include "distributed/dist.h"
#include "model/model.h"
#include "optim/optim.h"

/* One [[optimizer.param_groups]] (torchtitan 0.3's ParamGroupConfig, train/param_groups.c):
 * the parameters whose torchtitan FQN the pattern finds (Python's re.search; the first group
 * whose pattern finds a parameter takes it) step with these hyperparameters. optimizer_name
 * "AdamW" or "Adam" (c.adam: weight_decay coupled, torch.optim.Adam's); kwargs not given take
 * torch.optim's defaults (betas (0.9, 0.999), eps 1e-8, weight_decay 0.01 AdamW / 0 Adam). */
#define TRAIN_MAX_PARAM_GROUPS 64
typedef struct {
    const char *pattern, *optimizer_name;
    optim_adamw_cfg c;  /* c.lr: the group's peak learning rate */
    int fused, foreach; /* optimizer_kwargs' (-1: not given): no effect, but torch refuses both */
    const char *where;  /* its [[header]]: file, line and column */
    int line, col;
} train_param_group;

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
    unsigned exclude; /* train_ckpt_part bits a resume leaves as a fresh run has them */
    int load_only;    /* load as usual, never save */
    int first_step;   /* also save after step 1 (enable_first_step_checkpoint) */
    int create_seed;  /* build, initialise, save step-0 (weights only), exit */
} train_ckpt_opts;

/* The parts of a training checkpoint, under torchtitan's state names (checkpoint.
 * exclude_from_loading): "model" (weights, MoE expert bias), "optimizer" (AdamW moments and
 * step count), "lr_scheduler" (the schedule's position), "dataloader" (the data position,
 * random-token counter), "train_state" (the step and tokens seen). */
typedef enum {
    TRAIN_CKPT_MODEL = 1,
    TRAIN_CKPT_OPTIMIZER = 2,
    TRAIN_CKPT_LR_SCHEDULER = 4,
    TRAIN_CKPT_DATALOADER = 8,
    TRAIN_CKPT_TRAIN_STATE = 16
} train_ckpt_part;
/* The part a state name names; 0 when it names none. */
unsigned train_ckpt_part_parse(const char *name);

typedef struct {
    model_args model;
    const char *dump_folder; /* job.dump_folder: checkpoints (and outputs) go under it */
    train_ckpt_opts ckpt;
    const char *data_path; /* dataset (file, folder, glob); NULL = random tokens */
    /* the sources read (data_mix_cfg): training.dataset_sources (data_paths[n_data]; data_path
     * is the first), else data_path alone (data_paths NULL, n_data 1; 0: random tokens); weights
     * NULL = 1 each */
    const char *const *data_paths;
    const double *data_weights;
    const char *const *data_fields; /* n_data of them (NULL: data_field for all) */
    int n_data;
    uint64_t mix_seed;
    const char *tokenizer_dir; /* HF tokenizer folder; NULL = one token per byte */
    data_format data_format;
    const char *data_field; /* JSONL text field (NULL = "text") */
    int skip_bad_lines;
    int map_style; /* training.dataset_streaming false (resolved): data_loader_cfg.map_style */
    int steps, batch, seq_len, grad_accum;
    int stop_after_step;   /* > 0: exit cleanly after this step (the schedule still spans steps) */
    optim_adamw_cfg adamw; /* with param_groups: the first group's (its lr the one logged) */
    int adam_bf16;         /* optimizer.implementation "fused_opt_states_bf16": moments in bf16 */
    /* [[optimizer.param_groups]] (n_param_groups 0: every parameter steps with adamw) */
    const train_param_group *param_groups;
    int n_param_groups;
    optim_lr_cfg lr;
    double max_norm;
    uint64_t seed;
    model_ac_mode ac;
    int log_freq;
    const char *jsonl_path; /* per-step metrics, one JSON object per line (NULL = none) */
    const char *tb_dir;     /* TensorBoard folder: each run in tb_dir/YYYYmmdd-HHMM (NULL = none) */
    const char *report_path; /* the report page, rewritten at logged steps (NULL = none) */
    int metrics_all_ranks;   /* every rank writes metrics (under rank_N/), not rank 0 alone */
    const char *config_toml; /* the resolved job config, saved at start as config_path */
    const char *config_path; /* (NULL = not saved) */
    struct {                 /* [validation]: held-out loss every freq steps (path NULL = off) */
        const char *path;
        int freq, steps, batch, seq_len; /* steps <= 0: the whole set */
    } val;
    const char *out_dir;     /* final weights as safetensors with HF names (NULL = none) */
    ckpt_dtype export_dtype; /* HF exports and model-only saves: CKPT_F32 (0), BF16 or F16 */
    const char *assets_dir;  /* HF exports copy the tokenizer files from here (NULL = none) */
    int sample_tokens;       /* after training, sample this many tokens (0 = none) */
    double peak_flops;       /* fp32 FLOP/s for MFU; <= 0 = measure */
    int ce_chunk;            /* tokens per fused lm_head+CE chunk (0 = automatic) */
    ops_prec prec;           /* training.mixed_precision_param (resolved against the CPU) */
    char prec_why[160];      /* how prec was chosen, for the header */
    /* $TITAN_BF16_TRANSPORT=float32 (tests and debugging only): every collective a bf16 run
     * would move in bf16 moves fp32, the reference of the bf16 ones (bitwise the same steps):
     * the FSDP parameter all-gathers (train_setup_fsdp) and the TP / EP exchanges
     * (model_build_opts.exchange_f32) */
    int transport_f32;
    /* model_build_opts.acts_in_grads: one rank and one microbatch a step, unless
     * $TITAN_ACTS_IN_GRADS=0 (the A/B reference: the losses are bitwise the same) */
    int acts_in_grads;
    const ops_override *kernel_overrides; /* [kernels] overrides, for ops_resolve */
    int n_kernel_overrides;
    dist_mesh_cfg par;         /* [parallelism] degrees (dp_shard resolved against the world) */
    dist_reshard reshard;      /* parallelism.fsdp_reshard_after_forward */
    model_balance moe_balance; /* MoE load balancing (model_build_opts.balance) */
    double moe_bias_rate;      /* expert-bias update step (0 = 1e-3) */
    model_init init;           /* model.init_weights, model.depth_init */
    int block_causal;          /* model.attn_mask_type (resolved): document masking */
    int ac_every;              /* selective AC: every N-th block (model_build_opts.ac_every) */
    int moe_force_balance;     /* debug.moe_force_load_balance (model_build_opts) */
    int loss_parallel_off;     /* parallelism.disable_loss_parallel (model_build_opts) */
    int memory_estimation;     /* memory_estimation.enable: print titan plan's figures at start */
    int preemption_signal;     /* job.preemption_signal: a signal number, 0 = none */
    double comm_init_timeout;  /* [comm] watchdog timeouts, seconds (0 = off): until step 1 */
    double comm_train_timeout; /* ... ends, and after it */
    int ignore_memory_check;   /* training.ignore_memory_check: skip train_preflight's memory */
    uint64_t config_hash;      /* fingerprint of the resolved config: ranks must agree */
    struct {                   /* [profiling] (train/prof.c): dir NULL = off */
        const char *dir;       /* {dump_folder}/{save_traces_folder} */
        int freq, active, warmup;
    } prof;
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
typedef struct {
    const double *v;
    int n;
} train_float_list;

#define TRAIN_CONFIG_MAX_FIELDS 256

typedef struct {
    struct {
        const char *dump_folder, *description, *preemption_signal;
        int64_t sample_tokens;
        /* torchtitan's: config_file (= --config), print_config (print, then train),
         * save_config_file, custom_config_module (refused when set) */
        const char *config_file, *save_config_file, *custom_config_module;
        int print_config;
    } job;
    struct {
        const char *name, *flavor, *hf_assets_path, *config_path;
        /* overrides of the flavor's arguments, one per MODEL_ARGS_TABLE row, named by its
         * cfg_key (unset = the flavor's value) */
#define TRAIN_OPT_INT train_opt_int
#define TRAIN_OPT_BOOL train_opt_int
#define TRAIN_OPT_POS train_opt_float
#define TRAIN_OPT_NONNEG train_opt_float
#define TRAIN_MODEL_OVERRIDE(field, type, kind, group, key, ...) TRAIN_OPT_##kind key;
        MODEL_ARGS_TABLE(TRAIN_MODEL_OVERRIDE)
#undef TRAIN_MODEL_OVERRIDE
#undef TRAIN_OPT_INT
#undef TRAIN_OPT_BOOL
#undef TRAIN_OPT_POS
#undef TRAIN_OPT_NONNEG
        const char *moe_load_balance; /* none | aux_loss | bias */
        double moe_bias_update_rate;
        train_int_list mlp_only_layers;
        const char *init_weights;   /* normal | torchtitan */
        train_opt_int depth_init;   /* torchtitan's depth_init (unset = true) */
        const char *attn_backend;   /* sdpa | flex | varlen: names of titan's one attention */
        const char *attn_mask_type; /* causal | block_causal | "" (unset: by attn_backend) */
        const char *tokenizer_path; /* torchtitan's deprecated alias of hf_assets_path */
        train_str_list converters;  /* torchtitan's model converters: refused when set */
        int print_after_conversion;
    } model;
    struct {
        const char *dataset, *dataset_path, *dataset_format, *dataset_field;
        int64_t local_batch_size, global_batch_size, seq_len, steps, seed, threads, ce_chunk,
            stop_after_step;
        int skip_bad_lines, ignore_memory_check;
        train_opt_int dataset_streaming; /* unset: false with chat, else true */
        train_str_list dataset_sources;  /* a mixture in place of dataset_path */
        train_float_list dataset_weights;
        train_str_list dataset_fields;  /* a JSONL field a source; "" = dataset_field */
        train_opt_int dataset_mix_seed; /* unset: 42 */
        double max_norm;
        /* torchtitan keys for features titan does not have (train_config_compat) */
        int enable_cpu_offload, gc_debug;
        int64_t gc_freq;
        const char *dtype, *mixed_precision_param, *mixed_precision_reduce;
        struct {
            int64_t num_workers;
            int persistent_workers, pin_memory;
            train_opt_int prefetch_factor;
        } dataloader;
    } training;
    struct {
        const char *name, *implementation;
        double lr, beta1, beta2, eps, weight_decay;
        int early_step_in_backward;
        const train_param_group *param_groups; /* [n_param_groups] (the config's pool) */
        int n_param_groups;
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
            last_save_in_hf, load_only, enable_first_step_checkpoint, create_seed_checkpoint;
        train_str_list exclude_from_loading;
        const char *folder, *initial_load_path, *export_dtype, *async_mode, *hf_export_folder;
        int64_t interval, keep_latest_k, load_step;
        int enable_ft_dataloader_checkpoints, initial_load_in_hf_quantized;
    } checkpoint;
    struct {
        int64_t data_parallel_replicate_degree, data_parallel_shard_degree, tensor_parallel_degree,
            pipeline_parallel_degree, context_parallel_degree, expert_parallel_degree;
        const char *fsdp_reshard_after_forward;
        int disable_loss_parallel, enable_async_tensor_parallel;
        /* pipeline / context parallel tuning: used only when their degree > 1 */
        int64_t pipeline_parallel_first_stage_less_layers, pipeline_parallel_last_stage_less_layers,
            pipeline_parallel_microbatch_size;
        train_opt_int pipeline_parallel_layers_per_stage;
        const char *pipeline_parallel_schedule, *pipeline_parallel_schedule_csv,
            *context_parallel_load_balancer, *context_parallel_rotate_method;
        int pipeline_parallel_expert_parallel_overlap;
        int64_t expert_tensor_parallel_degree;
        const char *expert_parallel_comm_backend;
    } parallelism;
    struct {
        const char *mode, *selective_ac_option;
        /* torchtitan's tuning of selective / memory_budget AC (accepted, no effect) */
        train_str_list per_op_sac_force_recompute_mm_shapes_by_fqns;
        int early_stop, visualize_memory_budget_pareto, preserve_rng_state, debug;
        double memory_budget;
        const char *determinism_check;
    } activation_checkpoint;
    struct {
        int moe_force_load_balance;
        train_opt_int seed; /* torchtitan's seed: overrides training.seed when set */
        int deterministic, deterministic_warn_only;
    } debug;
    struct {
        int64_t log_freq;
        int enable_tensorboard, save_for_all_ranks, enable_jsonl;
        const char *save_tb_folder, *save_jsonl_file, *save_report_file;
        double peak_tflops;
        int enable_wandb, disable_color_printing;
    } metrics;
    struct {
        int enable;
        const char *dataset, *dataset_path;
        int64_t freq, steps, local_batch_size, seq_len;
        struct {
            int64_t num_workers;
            int persistent_workers, pin_memory;
            train_opt_int prefetch_factor;
        } dataloader;
    } validation;
    struct {
        train_str_list overrides; /* "op=impl" or "layer.glob.op=impl", ops_resolve's rules;
                                     then the [kernels] "pattern" = "impl" table entries */
        train_str_list plugins;   /* kernel plugin paths, loaded by train_config_to_opts */
    } kernels;

    /* torchtitan v0.2.2 sections for features titan does not have: accepted at their inert
     * values, refused (or noted) by name otherwise (train_config_compat) */
    struct {
        int enable_profiling, enable_memory_snapshot;
        const char *save_traces_folder, *save_memory_snapshot_folder;
        int64_t profile_freq, profiler_active, profiler_warmup;
    } profiling;
    struct {
        int enable;
        train_str_list components;
        const char *backend;
    } compile;
    struct {
        struct {
            struct {
                int enable_fsdp_float8_all_gather, precompute_float8_dynamic_scale_for_fsdp,
                    emulate;
                const char *recipe_name;
                train_str_list filter_fqns;
            } float8;
            struct {
                const char *mxfp8_dim1_cast_kernel_choice, *recipe_name;
                train_str_list filter_fqns;
            } mx;
        } linear;
        struct {
            struct {
                train_str_list fqns;
            } float8;
            struct {
                const char *recipe_name;
                train_str_list fqns;
            } mx;
        } grouped_mm;
    } quantize;
    struct {
        int64_t init_timeout_seconds, train_timeout_seconds, trace_buf_size;
        const char *save_traces_folder, *save_traces_file_prefix, *mode;
    } comm;
    struct {
        int enable, disable_fake_mode; /* enable: print titan plan's figures at start */
    } memory_estimation;
    struct {
        int enable;
        const char *process_group, *semi_sync_method;
        int64_t process_group_timeout_ms, replica_id, group_size, min_replica_size;
    } fault_tolerance;
    struct {
        const char *custom_import, *custom_args_module;
    } experimental;

    /* private: --grad-accum K (0: not given, or overridden by a later
     * training.global_batch_size): K microbatches per step on every data-parallel rank, so
     * global_batch_size = K x local_batch_size x the data-parallel degree, set by
     * train_config_translate once that degree is known */
    int64_t grad_accum_steps;
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
 * "none" unsets an optional number); `where` names it in errors and is kept as the field's
 * origin, so it must live as long as c (argv, a literal, or a string in c's pool). */
int train_config_set(train_config *c, const char *name, const char *value, const char *where,
                     base_err *err);
/* argv[first..argc-1] of `titan train`: --config FILE (applied first, wherever it is), then
 * every override and alias in order, then train_config_validate. */
int train_config_from_args(train_config *c, int argc, char **argv, int first, train_cli *cli,
                           base_err *err);
/* Whether the config says what to train: a file was loaded, or some [model] field, a
 * training.dataset* field or a [checkpoint] field was set. A bare `titan train` (none of them)
 * prints its usage instead of a random-token run of the default flavor. */
int train_config_names_job(const train_config *c);
/* Checks that combine fields (torchtitan's rules, the model's arguments, kernel overrides).
 * No side effects: it reads no file and opens no plugin (a model from a config.json is
 * checked by train_config_translate, the plugins' kernels by train_config_to_opts). */
int train_config_validate(const train_config *c, base_err *err);
/* The whole config as TOML that train_config_load_text reads back to the same config. */
void train_config_print(const train_config *c, FILE *f);
/* `titan train --help`: options, aliases, and every field with its default and help. */
void train_config_usage(FILE *f);
/* The activation checkpointing of c's [activation_checkpoint] (selective 'op' runs as full;
 * the schema has checked the fields). */
void train_config_ac(const train_config *c, model_ac_mode *ac, int *ac_every);
/* training.mixed_precision_param resolved against this CPU: set -> that; unset ->
 * $TITAN_MIXED_PRECISION when set (the test suite pins float32 so fp32 references hold on any
 * CPU), else bfloat16 where the CPU has bf16 units and float32 elsewhere. why (n bytes)
 * receives the choice and its reason for the run's header; bfloat16 on a CPU without bf16
 * units logs a one-line warning (it runs emulated, slower). */
int train_config_precision(const train_config *c, ops_prec *prec, char *why, size_t n,
                           base_err *err);
/* training.mixed_precision_param's spelling of a resolved precision: "bfloat16" / "float32". */
const char *train_prec_name(ops_prec p);
/* model.moe_load_balance's name of b ("none", "aux_loss", "bias"). */
const char *train_balance_name(model_balance b);
/* The same rule for a value from elsewhere (generate's --precision; NULL or "" = unset),
 * refusing anything but bfloat16 / float32 by name; key names the setting in the refusal and
 * in the emulation warning. */
int train_precision_resolve(const char *key, const char *value, ops_prec *prec, char *why, size_t n,
                            base_err *err);
/* The one translation of a config into train_opts for a job on `world` ranks (o points into
 * c: keep c alive), shared by titan train and titan plan. Every value of *o comes from c, so
 * the schema is the only place a default lives; strings become enums here. Refuses, naming
 * the field, any setting titan cannot honour yet (pipeline / context parallelism, ...). The
 * parallel degrees are checked against world; grad_accum = global_batch_size /
 * (local_batch_size x dp_replicate x dp_shard). Reads the model's config.json (model.config_path
 * or an initial load's HF folder); opens no plugin and writes nothing. */
int train_config_translate(train_config *c, int world, train_opts *o, base_err *err);
/* A run's translation: loads the kernels.plugins (the only step that runs code from outside
 * titan: validation, printing and plans do not) and checks the overrides naming their kernels,
 * then train_config_translate for dist_world_size() ranks, and fills the config to save at
 * start (config_toml, config_path) and config_hash. */
int train_config_to_opts(train_config *c, train_opts *o, base_err *err);
/* The one seed debug.seed and training.seed name, resolved into them as a run resolves it
 * (for --print-config, which prints without translating); -1 with err for two different
 * values on the command line. */
int train_config_resolve_seed(train_config *c, base_err *err);

/* ---- the training loop (train/train.c) --------------------------------------------------- */
/* Returns 0; -1 with err; or 128 + N after stopping cleanly on signal N (SIGTERM, SIGINT or
 * job.preemption_signal: the step finished, a checkpoint saved when enabled): the exit status. */
int train_run(const train_opts *o, base_err *err);
/* "none" -> 0, "SIGUSR1" -> SIGUSR1, ... (job.preemption_signal's choices); -1 if unknown. */
int train_stop_signal_parse(const char *name, int *sig);

/* ---- before a run (src/train/preflight.c) ---------------------------------------------
 * What train_run checks before it opens data or builds the model, so that a run that cannot
 * finish fails in seconds, naming the config field at fault:
 *   - every rank runs the same config (o->config_hash against rank 0's; names the first rank
 *     that differs);
 *   - inputs exist: training / validation dataset (file, folder or a glob matching something),
 *     tokenizer folder, checkpoint.initial_load_path;
 *   - output folders can be created and written (base_check_output_dir): checkpoint folder,
 *     TensorBoard folder, the metrics file's folder, the HF export folder;
 *   - memory: titan plan's per-rank estimate (train_plan_compute; times the ranks on this
 *     machine under OpenMPI) against base_available_ram(), refused with both figures and what
 *     would fit (full activation checkpointing, batch 1, more ranks) unless
 *     o->ignore_memory_check. */
int train_preflight(const train_opts *o, const dist_mesh *mesh, base_err *err);

/* ---- generation (src/train/generate.c) ------------------------------------------------ */

/* Builds m (batch 1, seq_len 1: inference keeps its own buffers) and loads its weights from
 * path, which is one of:
 *   - a training checkpoint step folder FOLDER/step-N (metadata.json; the arguments from its
 *     "train"."model" object, the weights from buffer "model", any number of rank shards);
 *   - a training checkpoint folder holding step-N folders: its newest complete one, or a
 *     run folder (job.dump_folder) whose checkpoint/ folder holds them;
 *   - a folder with model.safetensors (HF names), or such a .safetensors file: the arguments
 *     are *fallback (--flavor / --set), checked against every tensor's shape.
 * Errors name the file at fault. Call model_free afterwards whether or not it succeeded. */
int train_load_model(model *m, const char *path, const model_args *fallback, ops_prec prec,
                     base_err *err);
/* The tokenizer to generate with for the model at path (*tok_dir: --tokenizer, or NULL).
 * A folder with tokenizer.json supplies it. A training checkpoint says what it was trained
 * on (metadata "tokenizer", train_tokenizer_json): a tokenizer is used from its recorded
 * path (copied into buf[n]) when its tokenizer.json still has the recorded FNV-1a 64 hash;
 * a missing or changed one, a --tokenizer other than the recorded one, or a tokenizer for a
 * model trained on bytes is refused by name, as is no tokenizer for a checkpoint that records
 * none and whose vocabulary is not 256 (bytes). Other sources are left as they are.
 * *is_ckpt: whether path is a training checkpoint (these rules applied). */
int train_generate_tokenizer(const char *path, const char **tok_dir, char *buf, size_t n,
                             int *is_ckpt, base_err *err);

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
    int (*cancel)(void);       /* NULL, or asked before each new token: nonzero ends generation */
} train_gen_opts;

typedef struct {
    int n_prompt, n_new; /* prompt tokens fed, tokens generated (stop token included) */
    int stopped;         /* ended on a stop token */
    int slides;          /* times the context was full and its last half prefilled again */
    int cancelled;       /* ended by o->cancel */
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
 * alone (nothing of the model is allocated). fp32 everywhere but the bf16 copy and scratch of
 * a bf16 run (collectives move fp32); bytes. */
typedef struct {
    model_args model;
    int world, batch, seq_len, grad_accum;
    dist_mesh_cfg par; /* dp_shard may be -1 */
    dist_reshard reshard;
    model_ac_mode ac;      /* the configured mode (none and full are always reported) */
    int ac_every;          /* SELECTIVE: every N-th block (model_build_opts.ac_every) */
    int loss_parallel_off; /* tp > 1: parallelism.disable_loss_parallel */
    ops_prec prec;         /* training.mixed_precision_param (resolved) */
    const char *prec_why;  /* how prec was chosen (train_opts.prec_why), printed; NULL: not */
    int ckpt_async;        /* checkpoint.enable with async saves: the saver's snapshot (saver.c) */
    int adam_bf16;         /* AdamW's moments in bf16 (fused_opt_states_bf16): 2 bytes each */
    int acts_in_grads;     /* train_opts.acts_in_grads (taking effect where world is 1) */
} train_plan_in;

typedef struct {
    dist_mesh_cfg par; /* resolved */
    int64_t n_params;
    double params, grads, adam;  /* this rank's shards */
    double gathered;             /* peak of whole units in flight (FSDP), params + grads */
    double comm_buffers;         /* reduce-scatter receive buffer */
    double act_none, act_full;   /* activations without / with full activation checkpointing */
    double act_conf, total_conf; /* the configured mode's (= one of the above unless selective) */
    /* acts_in_grads: the configured mode's saved activations placed in the gradients' pages
     * (inside grads; act_* above leave them out) */
    double act_in_grads;
    double runtime; /* libraries, MPI, thread stacks: a measured constant */
    /* bf16: the bf16 copy of this rank's (tp-local) weights (2 bytes per parameter; 4 for
     * the emulated engine's rounded fp32): whole, made once per step, without FSDP; under
     * FSDP only the units in use (made after each gather, released with the unit), and the largest
     * activation operands converted per call: the lm_head+CE chunk's logit gradient or attention
     * backward's q, k, v and dout (4 bytes each emulated, 2 on bf16 units) */
    double bf16_copy, bf16_scratch;
    /* async checkpoints: the snapshot a background save copies this rank's parameter and
     * AdamW shards into (3 floats per shard element), resident from the first save; 0 and
     * ckpt_sync set where the saver's rule (train_saver_async_fits, this machine's RAM) makes
     * the saves synchronous */
    double ckpt_snapshot;
    int ckpt_sync;
    double total_none, total_full;
    /* per step, per rank */
    double allgather_bytes, reduce_scatter_bytes, allreduce_bytes, scalar_bytes;
    double allgather_bf16_bytes; /* of allgather_bytes, moved as bf16 (bf16 plans) */
    int64_t allgathers, reduce_scatters;
    /* tensor parallelism (tp > 1): the sequence-parallel all-gathers / reduce-scatters of
     * [batch*seq_len, dim] activations and the loss-parallel CE's row reductions, per step */
    double tp_bytes;
    int64_t tp_collectives;
    /* bf16 plans: the bytes of tp_bytes / ep_bytes moved in bf16 (model_bf16_wire: TP's
     * all-gathers read only by GEMMs, EP's dispatches; model_bf16_wire_kept: EP's forward
     * returns of the expert outputs); the rest is fp32 */
    double tp_bf16_bytes, ep_bf16_bytes;
    /* expert parallelism (ep > 1): this rank's expert stacks (whole, inside params), the
     * all-to-all buffers (inside the activations: [R ep, D] x2 plus the expert-side rows),
     * and the token dispatch per step: 4 alltoallv of [R, D] routed rows per MoE block and
     * microbatch (6 under full AC) sending (ep-1)/ep of them when the routing is balanced,
     * plus the [ep, E/ep] count exchange */
    double ep_experts, ep_buffers, ep_bytes;
    int64_t ep_collectives;
} train_plan;

int train_plan_compute(const train_plan_in *in, train_plan *p, base_err *err);
/* The plan input of the run o describes on `world` ranks (the one translation titan train,
 * memory_estimation and the start-up memory check share). */
train_plan_in train_plan_in_of(const train_opts *o, int world);
/* memory_estimation.enable: the plan of the run o describes on this run's ranks, printed to
 * f (rank 0 only). */
int train_plan_print_for(const train_opts *o, FILE *f, base_err *err);
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
/* The same for bf16 GEMMs through the bf16 matmul op (ops_bf16_engine's engine). */
double train_measure_peak_flops_bf16(void);

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
/* The peak for a run on comm's ranks, of prec's GEMMs (bf16: cached under the key plus
 * " | bf16 ENGINE", plausible up to 16x the fp32 bound): configured (> 0, --peak-tflops) as
 * it is; else rank 0
 * reads the cache, measures (measure, NULL = train_measure_peak_flops), takes
 * train_peak_choose's value, writes the cache when that says so, and every rank gets rank
 * 0's figures. Fails (on every rank) when nothing could be measured. */
int train_peak_resolve(double configured, int threads, ops_prec prec, dist_comm *comm,
                       double (*measure)(void), train_peak *out, base_err *err);

/* ---- Subcommands: titan train (train/cli.c), plan (plan.c), generate (generate.c) -------
 * argv[1] is the subcommand, its options follow. They return 0, or -1 with err filled;
 * --help prints the usage to stdout and returns 0. train also returns 2 when it printed its
 * short usage (nothing to train), and 128 + N when it stopped on signal N after saving. */
int train_cmd_train(int argc, char **argv, base_err *err);
int train_cmd_plan(int argc, char **argv, base_err *err);
void train_cmd_plan_usage(FILE *f);
int train_cmd_generate(int argc, char **argv, base_err *err);
void train_cmd_generate_usage(FILE *f);
/* titan report (report.c): a run's report page from its metrics.jsonl, or several overlaid. */
int train_cmd_report(int argc, char **argv, base_err *err);
void train_cmd_report_usage(FILE *f);
/* The version the report pages name (main.c sets it: "0.1.0 (commit abc123)"). */
void train_report_set_version(const char *version);

#endif
