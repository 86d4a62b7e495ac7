/* Job configs: one schema table describes every field (section, key, type, where it lives
 * in train_config, default, range, help); loading a TOML file, command-line overrides,
 * printing, help and the checks all walk that table. */
#include "train/train.h"

#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint/checkpoint.h"
#include "train/config_schema.h"

static int check_not_zero(const base_toml_value *v, char *why, size_t n);
static int check_not_one(const base_toml_value *v, char *why, size_t n);
static int check_flavor(const base_toml_value *v, char *why, size_t n);
static int check_sac_option(const base_toml_value *v, char *why, size_t n);
static int check_kernel_override(const base_toml_value *v, char *why, size_t n);
static int check_plugin_path(const base_toml_value *v, char *why, size_t n);
static int check_ckpt_part(const base_toml_value *v, char *why, size_t n);

#define OFF(sec, key) offsetof(train_config, sec.key)
#define STR(sec, key, def, choices, help)                                                          \
    { #sec, #key, T_STR, 0, OFF(sec, key), def, 0, 0, 0, 0, choices, NULL, help, P_USED }
#define STRC(sec, key, def, check, help)                                                           \
    { #sec, #key, T_STR, 0, OFF(sec, key), def, 0, 0, 0, 0, NULL, check, help, P_USED }
#define INT(sec, key, def, lo, hi, help)                                                           \
    { #sec, #key, T_INT, 0, OFF(sec, key), NULL, def, lo, hi, 0, NULL, NULL, help, P_USED }
#define INTC(sec, key, def, lo, hi, check, help)                                                   \
    { #sec, #key, T_INT, 0, OFF(sec, key), NULL, def, lo, hi, 0, NULL, check, help, P_USED }
#define FLT(sec, key, def, lo, hi, open, help)                                                     \
    { #sec, #key, T_FLOAT, 0, OFF(sec, key), NULL, def, lo, hi, open, NULL, NULL, help, P_USED }
#define BOOL(sec, key, def, help)                                                                  \
    { #sec, #key, T_BOOL, 0, OFF(sec, key), NULL, def, 0, 1, 0, NULL, NULL, help, P_USED }
#define OINT(sec, key, lo, hi, help)                                                               \
    { #sec, #key, T_INT, 1, OFF(sec, key), NULL, 0, lo, hi, 0, NULL, NULL, help, P_USED }
#define OFLT(sec, key, lo, hi, open, help)                                                         \
    { #sec, #key, T_FLOAT, 1, OFF(sec, key), NULL, 0, lo, hi, open, NULL, NULL, help, P_USED }
#define OBOOL(sec, key, help)                                                                      \
    { #sec, #key, T_BOOL, 1, OFF(sec, key), NULL, 0, 0, 1, 0, NULL, NULL, help, P_USED }
#define STRS(sec, key, check, help)                                                                \
    { #sec, #key, T_STRS, 0, OFF(sec, key), NULL, 0, 0, 0, 0, NULL, check, help, P_USED }
#define INTS(sec, key, lo, hi, help)                                                               \
    { #sec, #key, T_INTS, 0, OFF(sec, key), NULL, 0, lo, hi, 0, NULL, NULL, help, P_USED }
#define FLTS(sec, key, lo, hi, help)                                                               \
    { #sec, #key, T_FLOATS, 0, OFF(sec, key), NULL, 0, lo, hi, 0, NULL, NULL, help, P_USED }
/* torchtitan keys with a policy (fpolicy): the same shapes, one more argument */
#define PSTR(sec, key, def, choices, pol, help)                                                    \
    { #sec, #key, T_STR, 0, OFF(sec, key), def, 0, 0, 0, 0, choices, NULL, help, pol }
#define PINT(sec, key, def, lo, hi, pol, help)                                                     \
    { #sec, #key, T_INT, 0, OFF(sec, key), NULL, def, lo, hi, 0, NULL, NULL, help, pol }
#define PFLT(sec, key, def, lo, hi, pol, help)                                                     \
    { #sec, #key, T_FLOAT, 0, OFF(sec, key), NULL, def, lo, hi, 0, NULL, NULL, help, pol }
#define PBOOL(sec, key, def, pol, help)                                                            \
    { #sec, #key, T_BOOL, 0, OFF(sec, key), NULL, def, 0, 1, 0, NULL, NULL, help, pol }
#define POINT(sec, key, lo, hi, pol, help)                                                         \
    { #sec, #key, T_INT, 1, OFF(sec, key), NULL, 0, lo, hi, 0, NULL, NULL, help, pol }
#define PSTRS(sec, key, pol, help)                                                                 \
    { #sec, #key, T_STRS, 0, OFF(sec, key), NULL, 0, 0, 0, 0, NULL, NULL, help, pol }
#define ANY(sec, key, help)                                                                        \
    { #sec, #key, T_ANY, 0, 0, NULL, 0, 0, 0, 0, NULL, NULL, help, P_INERT }

/* Defaults are torchtitan v0.2.2's (research notes §4.1) except where titan chooses otherwise
 * (activation_checkpoint.mode none: recomputing blocks costs time that a run with the memory
 * to spare need not pay) or has no counterpart (dataset "random", paths that name assets
 * torchtitan ships). */
const field g_fields[] = {
    STR(job, dump_folder, ".", NULL,
        "folder for this job's outputs; relative output paths below are joined to it"),
    STR(job, description, "titan job", NULL, "a description of the job"),
    INT(job, sample_tokens, 0, 0, BIG, "after training, sample this many tokens (titan)"),
    PSTR(job, config_file, "", NULL, P_INERT,
         "the TOML file: --job.config_file FILE is --config FILE (torchtitan's run script)"),
    PBOOL(job, print_config, 0, P_USED, "print the resolved config, then train"),
    PSTR(job, save_config_file, "", NULL, P_NOTE,
         "torchtitan's JSON copy of the config; titan writes the resolved TOML to "
         "job.dump_folder/config.toml instead"),
    PSTR(job, custom_config_module, "", NULL, P_REFUSE,
         "a Python module extending JobConfig (titan has no Python)"),
    STR(job, preemption_signal, "none", "none|SIGUSR1|SIGUSR2|SIGHUP|SIGXCPU",
        "besides SIGTERM and SIGINT: finish the step, save a checkpoint, exit 128 + its "
        "number (Slurm --signal=USR1@120) (titan)"),

    STR(model, name, "qwen3", NULL, "model family (qwen3; others are refused by name)"),
    STRC(model, flavor, "debugmodel", check_flavor, "registry flavor (titan inspect lists one)"),
    STR(model, hf_assets_path, "", NULL,
        "Hugging Face folder whose tokenizer encodes the dataset (none = one token per byte); "
        "with checkpoint.initial_load_in_hf also the weights and, flavor unset, config.json"),
    STR(model, config_path, "", NULL, "a Hugging Face config.json to build the model from"),
/* the model's arguments (MODEL_ARGS_TABLE): a POS range's lo is exclusive */
#define MODEL_ROW_INT(key, lo, hi, help) OINT(model, key, lo, hi, help)
#define MODEL_ROW_BOOL(key, lo, hi, help) OBOOL(model, key, help)
#define MODEL_ROW_POS(key, lo, hi, help) OFLT(model, key, lo, hi, 1, help)
#define MODEL_ROW_NONNEG(key, lo, hi, help) OFLT(model, key, lo, hi, 0, help)
#define MODEL_ROW(field, type, kind, group, key, lo, hi, help) MODEL_ROW_##kind(key, lo, hi, help),
    /* the expansion ends in a comma the formatter cannot see */
    /* clang-format off */
    MODEL_ARGS_TABLE(MODEL_ROW)
#undef MODEL_ROW
#undef MODEL_ROW_INT
#undef MODEL_ROW_BOOL
#undef MODEL_ROW_POS
#undef MODEL_ROW_NONNEG
    STR(model, moe_load_balance, "none", "none|aux_loss|bias",
        "MoE load balancing: none, HF's auxiliary loss, or torchtitan's expert bias (titan)"),
    /* clang-format on */
    FLT(model, moe_bias_update_rate, 1e-3, 0, 1, 1,
        "expert-bias step per optimizer step (torchtitan load_balance_coeff; titan)"),
    INTS(model, mlp_only_layers, 0, BIG, "MoE: blocks with a dense MLP (HF mlp_only_layers)"),
    STR(model, init_weights, "normal", "normal|torchtitan|torchtitan_0.3",
        "initial weights: normal = N(0, 0.02), norms 1; torchtitan = v0.2.2's init_weights; "
        "torchtitan_0.3 = 0.3's (an MoE's wo and expert w2 std 0.02/sqrt(2 n_layers)) "
        "(docs/training.md) (titan)"),
    OBOOL(model, depth_init,
          "init_weights = torchtitan: std 0.02/sqrt(2(layer+1)) (true, unset) or "
          "0.02/sqrt(2 n_layers) (torchtitan Qwen3ModelArgs.depth_init)"),
    STR(model, attn_backend, "sdpa", "sdpa|flex|varlen",
        "torchtitan's attention backends: one attention in titan, causal or document-masked by "
        "attn_mask_type (docs/training.md)"),
    STR(model, attn_mask_type, "", "causal|block_causal",
        "causal = over the whole window; block_causal = within each document (labels and "
        "positions inside each document, packed as torchtitan 0.3: docs/data.md); unset = "
        "block_causal with attn_backend varlen or dataset_format chat, else causal "
        "(docs/training.md)"),
    PSTR(model, tokenizer_path, "", NULL, P_USED,
         "deprecated (torchtitan): sets hf_assets_path, with torchtitan's warning"),
    PSTRS(model, converters, P_REFUSE,
          "torchtitan model converters (float8, mx; 0.3's lora): not implemented; titan's GEMMs "
          "run in fp32 or bf16 (training.mixed_precision_param) and it trains every weight"),
    PBOOL(model, print_after_conversion, 0, P_INERT, "print the model after converters"),

    STR(training, dataset, "random", NULL,
        "dataset name; 'random' without dataset_path = uniform random tokens"),
    STR(training, dataset_path, "", NULL,
        "dataset: a text, JSONL or token-shard file, a folder, or a glob (docs/data.md)"),
    STR(training, dataset_format, "auto", "auto|text|jsonl|tokens|chat",
        "format of dataset_path's files; auto = by shard magic / extension; chat = JSON Lines of "
        "[user, assistant] messages, torchtitan 0.3's ChatDataset (docs/data.md; titan)"),
    STR(training, dataset_field, "", NULL,
        "JSONL field holding the text; unset = text (chat: messages) (titan)"),
    BOOL(training, skip_bad_lines, 0, "skip (count, log) malformed JSONL lines (titan)"),
    OBOOL(training, dataset_streaming,
          "false = read as a map-style HF Dataset, as torchtitan 0.3's ChatDataset and c4_test: "
          "a contiguous block of documents per data-parallel rank, reshuffled each epoch after "
          "the first (chat: shuffled from the start); true = streamed in file order, document i "
          "on rank i mod size; unset = false with dataset_format chat, else true; validation "
          "streams (docs/data.md; titan)"),
    STRS(training, dataset_sources, NULL,
         "a weighted mixture of datasets in place of dataset_path, torchtitan 0.3's interleaved "
         "loaders (dataloader.sources): each a file, folder or glob, read as dataset_path is "
         "(one dataset_format, dataset_field, dataset_streaming), split over the data-parallel "
         "ranks and re-looped on its own; each window of a batch comes from one source, drawn "
         "with 0.3's random.Random(dataset_mix_seed).choices (docs/data.md)"),
    FLTS(training, dataset_weights, 0, INFINITY,
         "dataset_sources' sampling weights (0.3's HFDataSource.weight, normalised: each "
         "window's chance, so a share of the tokens, not of the documents); empty = 1 each"),
    STRS(training, dataset_fields, NULL,
         "the JSONL field of each of dataset_sources (0.3's sources each have their dataset's "
         "own sample_processor); \"\" = dataset_field; empty = dataset_field for all"),
    OINT(training, dataset_mix_seed, 0, 9.2e18,
         "the seed of dataset_sources' draws (0.3's dataloader seed); unset = 42"),
    INT(training, stop_after_step, 0, 0, BIG,
        "exit after this step; 0 = run all steps (the schedule still spans steps) (titan)"),
    INT(training, local_batch_size, 8, 1, BIG, "sequences per microbatch per rank"),
    INTC(training, global_batch_size, -1, -1, BIG, check_not_zero,
         "sequences per step; -1 = local_batch_size x data-parallel ranks (no accumulation)"),
    INT(training, seq_len, 2048, 1, BIG, "tokens per sequence"),
    INT(training, steps, 10000, 1, BIG, "optimizer steps"),
    FLT(training, max_norm, 1.0, 0, INFINITY, 0, "gradient clipping threshold (global L2 norm)"),
    INT(training, seed, 42, 0, 9.2e18, "weight init and data seed (titan keeps one, default 42)"),
    INT(training, threads, 0, 0, 4096,
        "OpenMP/BLAS threads; 0 = OMP_NUM_THREADS, else all cores (the cgroup's CPU quota) "
        "(titan)"),
    INT(training, ce_chunk, 0, 0, BIG, "tokens per fused lm_head+CE chunk; 0 = auto (titan)"),
    PBOOL(training, enable_cpu_offload, 0, P_REFUSE,
          "offload parameters, gradients and optimizer state to host memory (not implemented)"),
    PSTR(training, dtype, "float32", "float32|!bfloat16", P_REFUSE,
         "parameter dtype without FSDP: titan keeps fp32 parameters"),
    STR(training, mixed_precision_param, "", "bfloat16|float32",
        "compute precision: bfloat16 = GEMM operands in bf16, fp32 accumulation, fp32 master "
        "weights, gradients, optimizer and loss; unset = bfloat16 where the CPU has bf16 units "
        "(AMX-BF16 / AVX512_BF16), else float32"),
    STR(training, mixed_precision_reduce, "float32", "float32|!bfloat16",
        "gradient reduce dtype (titan reduces gradients in fp32)"),
    PINT(training, gc_freq, 50, 1, BIG, P_INERT, "Python garbage collection interval (no GC)"),
    PBOOL(training, gc_debug, 0, P_INERT, "Python garbage collection debugging (no GC)"),
    BOOL(training, ignore_memory_check, 0,
         "start even when titan plan's memory estimate exceeds the available memory (titan)"),

    PINT(training.dataloader, num_workers, 0, 0, BIG, P_INERT,
         "torch DataLoader workers (titan's loader is in-process)"),
    PBOOL(training.dataloader, persistent_workers, 0, P_INERT, "torch DataLoader option"),
    PBOOL(training.dataloader, pin_memory, 0, P_INERT, "torch DataLoader option"),
    POINT(training.dataloader, prefetch_factor, 1, BIG, P_INERT, "torch DataLoader option"),

    STR(optimizer, name, "AdamW", "AdamW|Adam",
        "optimizer (Adam: weight_decay is an L2 penalty added to the gradient, as "
        "torch.optim.Adam; per-parameter groups: [[optimizer.param_groups]])"),
    FLT(optimizer, lr, 8e-4, 0, INFINITY, 0, "peak learning rate"),
    FLT(optimizer, beta1, 0.9, 0, 1, 2, "AdamW beta1"),
    FLT(optimizer, beta2, 0.95, 0, 1, 2, "AdamW beta2"),
    FLT(optimizer, eps, 1e-8, 0, INFINITY, 1, "AdamW epsilon"),
    FLT(optimizer, weight_decay, 0.1, 0, INFINITY, 0,
        "weight decay, AdamW's decoupled or Adam's L2 (all params; per group: "
        "[[optimizer.param_groups]])"),
    STR(optimizer, implementation, "fused", "fused|foreach|for-loop|fused_opt_states_bf16",
        "torch's variants (titan has one AdamW kernel for all); fused_opt_states_bf16: the AdamW "
        "moments in bf16 (stepped in fp32, stored rounded), 2 bytes each instead of 4"),
    PBOOL(optimizer, early_step_in_backward, 0, P_REFUSE,
          "step each parameter during backward (not implemented)"),

    INT(lr_scheduler, warmup_steps, 200, 0, BIG, "linear warmup steps"),
    OINT(lr_scheduler, total_steps, 1, BIG, "schedule length; unset = training.steps"),
    OFLT(lr_scheduler, decay_ratio, 0, 1, 0,
         "fraction of steps spent decaying; unset = every step after warmup"),
    STR(lr_scheduler, decay_type, "linear", "linear|sqrt|cosine", "decay curve"),
    FLT(lr_scheduler, min_lr_factor, 0.0, 0, 1, 0, "final LR as a fraction of the peak"),

    BOOL(checkpoint, enable, 0,
         "save checkpoints and resume from the newest (one past training.steps is refused)"),
    STR(checkpoint, folder, "checkpoint", NULL, "checkpoint folder, under job.dump_folder"),
    INT(checkpoint, interval, 500, 1, BIG, "steps between checkpoints"),
    INTC(checkpoint, keep_latest_k, 10, 0, BIG, check_not_one,
         "checkpoints kept; 0 = all, 1 is refused (as torchtitan)"),
    INT(checkpoint, load_step, -1, -1, BIG, "step to resume from; -1 = the latest"),
    STR(checkpoint, initial_load_path, "", NULL,
        "weights to start from when there is nothing to resume: a titan step-N folder or a "
        "safetensors file / folder under HF names"),
    BOOL(checkpoint, initial_load_in_hf, 0,
         "initial load from a Hugging Face folder: initial_load_path, else model.hf_assets_path"),
    BOOL(checkpoint, initial_load_model_only, 1,
         "initial load: weights only; false: the whole training state (optimizer, schedule, "
         "data position, step) of a titan checkpoint, as torchtitan"),
    BOOL(checkpoint, last_save_model_only, 1, "final save: weights only"),
    BOOL(checkpoint, last_save_in_hf, 0, "final save in Hugging Face format"),
    STR(checkpoint, export_dtype, "float32", "float32|bfloat16|float16",
        "dtype of the last save when it is weights only (last_save_model_only, as torchtitan; a "
        "seed checkpoint too) and of the Hugging Face exports; resumable saves stay float32"),
    STR(checkpoint, async_mode, "async", "disabled|async|async_with_pinned_mem",
        "save from a snapshot in a background thread when it fits in memory (titan's "
        "default; torchtitan's is disabled)"),
    STR(checkpoint, hf_export_folder, "", NULL,
        "after training, export the model as a Hugging Face folder here (titan)"),
    PBOOL(checkpoint, enable_ft_dataloader_checkpoints, 1, P_INERT,
          "fault tolerance: dataloader state per replica (no fault tolerance)"),
    PBOOL(checkpoint, initial_load_in_hf_quantized, 0, P_REFUSE,
          "initial_load_path holds quantized HF weights (not implemented)"),
    STRS(checkpoint, exclude_from_loading, check_ckpt_part,
         "parts a resume does not load: model, optimizer, lr_scheduler, dataloader, train_state"),
    BOOL(checkpoint, load_only, 0, "load checkpoints as usual but never save one"),
    BOOL(checkpoint, enable_first_step_checkpoint, 0, "also save a checkpoint after step 1"),
    BOOL(checkpoint, create_seed_checkpoint, 0,
         "build and initialise the model, save it as step-0 (weights only) and exit; 1 rank"),

    INT(parallelism, data_parallel_replicate_degree, 1, 1, BIG, "DDP/HSDP replicas"),
    INTC(parallelism, data_parallel_shard_degree, -1, -1, BIG, check_not_zero,
         "FSDP shards; -1 = all remaining ranks"),
    INT(parallelism, tensor_parallel_degree, 1, 1, BIG, "tensor parallel ranks"),
    INT(parallelism, pipeline_parallel_degree, 1, 1, BIG, "pipeline stages"),
    INT(parallelism, context_parallel_degree, 1, 1, BIG, "context parallel ranks"),
    INT(parallelism, expert_parallel_degree, 1, 1, BIG, "expert parallel ranks"),
    STR(parallelism, fsdp_reshard_after_forward, "default", "default|always|never",
        "free gathered block weights after forward"),
    BOOL(parallelism, disable_loss_parallel, 0,
         "tp > 1: gather the lm_head weight and compute the loss on the whole vocabulary on "
         "every rank instead of on vocabulary shards"),

    PBOOL(parallelism, enable_async_tensor_parallel, 0, P_REFUSE,
          "async tensor parallel (torch.compile micro-pipelining; not implemented)"),
    ANY(parallelism, module_fqns_per_model_part,
        "pipeline stages' modules (used only when pipeline_parallel_degree > 1)"),
    PINT(parallelism, pipeline_parallel_first_stage_less_layers, 1, 0, BIG, P_INERT,
         "pipeline (degree > 1 only)"),
    PINT(parallelism, pipeline_parallel_last_stage_less_layers, 1, 0, BIG, P_INERT,
         "pipeline (degree > 1 only)"),
    POINT(parallelism, pipeline_parallel_layers_per_stage, 1, BIG, P_INERT,
          "pipeline (degree > 1 only)"),
    PSTR(parallelism, pipeline_parallel_schedule, "1F1B", NULL, P_INERT,
         "pipeline (degree > 1 only)"),
    PSTR(parallelism, pipeline_parallel_schedule_csv, "", NULL, P_INERT,
         "pipeline (degree > 1 only)"),
    PINT(parallelism, pipeline_parallel_microbatch_size, 1, 1, BIG, P_INERT,
         "pipeline (degree > 1 only)"),
    PBOOL(parallelism, pipeline_parallel_expert_parallel_overlap, 1, P_INERT,
          "pipeline (degree > 1 only)"),
    PSTR(parallelism, context_parallel_load_balancer, "headtail", NULL, P_INERT,
         "context parallel (degree > 1 only)"),
    PSTR(parallelism, context_parallel_rotate_method, "allgather", "allgather|alltoall", P_INERT,
         "context parallel (degree > 1 only)"),
    PINT(parallelism, expert_tensor_parallel_degree, 1, 1, BIG, P_REFUSE,
         "tensor parallel inside experts (not implemented: 1)"),
    PSTR(parallelism, expert_parallel_comm_backend, "standard", "standard|!deepep", P_REFUSE,
         "expert all-to-all: titan's own (standard)"),

    STR(activation_checkpoint, mode, "none", "none|full|selective|!memory_budget",
        "recompute activations in backward: full = every block, selective = per "
        "selective_ac_option (torchtitan's default is selective)"),
    STRC(activation_checkpoint, selective_ac_option, "2", check_sac_option,
         "selective: checkpoint every N-th block (blocks N, 2N, .. counting from 1; 0 = "
         "all), or 'op' (runs as full: titan has no per-op recompute)"),
    PSTRS(activation_checkpoint, per_op_sac_force_recompute_mm_shapes_by_fqns, P_INERT,
          "selective 'op' tuning of torchtitan"),
    PBOOL(activation_checkpoint, early_stop, 0, P_INERT, "torch checkpoint tuning"),
    PFLT(activation_checkpoint, memory_budget, 0.5, 0, 1, P_INERT, "memory_budget mode only"),
    PBOOL(activation_checkpoint, visualize_memory_budget_pareto, 0, P_INERT,
          "memory_budget mode only"),
    PBOOL(activation_checkpoint, preserve_rng_state, 1, P_INERT,
          "torch checkpoint option (titan's recompute uses no RNG)"),
    PSTR(activation_checkpoint, determinism_check, "default", NULL, P_INERT,
         "torch checkpoint option"),
    PBOOL(activation_checkpoint, debug, 0, P_INERT, "torch checkpoint option"),

    BOOL(debug, moe_force_load_balance, 0,
         "MoE: route token n's k-th choice to expert (n*top_k + k) mod n_experts (benchmarking)"),
    POINT(debug, seed, 0, 9.2e18, P_USED,
          "the seed (torchtitan's key); training.seed names it too: the command line's wins, "
          "in one file this one"),
    PBOOL(debug, deterministic, 0, P_INERT, "titan is always deterministic"),
    PBOOL(debug, deterministic_warn_only, 0, P_INERT, "titan is always deterministic"),

    INT(metrics, log_freq, 10, 1, BIG, "console/TensorBoard at step 1 and every N steps"),
    BOOL(metrics, enable_tensorboard, 0, "write TensorBoard scalars (torchtitan's tags)"),
    STR(metrics, save_tb_folder, "tb", NULL,
        "TensorBoard folder, under job.dump_folder; a run folder YYYYmmdd-HHMM per run"),
    BOOL(metrics, save_for_all_ranks, 0,
         "every rank writes its own metrics (rank_N/) with its memory"),
    BOOL(metrics, enable_jsonl, 0, "write every step's metrics as JSON lines (titan)"),
    STR(metrics, save_jsonl_file, "metrics.jsonl", NULL, "JSON lines file, under job.dump_folder"),
    STR(metrics, save_report_file, "report.html", NULL,
        "report page (HTML: facts and charts), under job.dump_folder, rewritten at logged "
        "steps; \"\" or none = no page (titan)"),
    FLT(metrics, peak_tflops, 0, 0, INFINITY, 0,
        "the GEMM peak MFU is against, in the run's precision (bf16's in a bf16 run); 0 = "
        "measured on rank 0, cached (titan)"),
    PBOOL(metrics, enable_wandb, 0, P_NOTE,
          "Weights & Biases logging: titan has none (TensorBoard and JSON lines)"),
    PBOOL(metrics, disable_color_printing, 0, P_INERT, "titan's logs have no colour"),

    BOOL(validation, enable, 0, "evaluate the loss on held-out data every freq steps"),
    STR(validation, dataset, "c4_validation", NULL, "validation dataset name"),
    STR(validation, dataset_path, "", NULL, "validation dataset file"),
    INT(validation, freq, 10, 1, BIG, "validate every N steps"),
    INTC(validation, steps, -1, -1, BIG, check_not_zero,
         "validation batches; -1 = the whole set once (N > its batches: repeats it)"),
    INT(validation, local_batch_size, 8, 1, BIG, "validation sequences per microbatch"),
    INT(validation, seq_len, 2048, 1, BIG, "validation tokens per sequence"),

    PINT(validation.dataloader, num_workers, 0, 0, BIG, P_INERT,
         "torch DataLoader workers (titan's loader is in-process)"),
    PBOOL(validation.dataloader, persistent_workers, 0, P_INERT, "torch DataLoader option"),
    PBOOL(validation.dataloader, pin_memory, 0, P_INERT, "torch DataLoader option"),
    POINT(validation.dataloader, prefetch_factor, 1, BIG, P_INERT, "torch DataLoader option"),

    STRS(kernels, overrides, check_kernel_override,
         "'op=impl' or 'layers.*.op=impl' (titan kernels lists impls); the last match wins"),
    STRS(kernels, plugins, check_plugin_path,
         "kernel plugin .so files (include/titan/kernel_abi.h), loaded before the overrides"),

    /* [profiling]: op-level Chrome traces (docs/profiling.md) */
    BOOL(profiling, enable_profiling, 0,
         "trace the last profiler_active steps of every profile_freq (docs/profiling.md)"),
    STR(profiling, save_traces_folder, "profile_traces", NULL,
        "traces: {dump_folder}/{this}/iteration_{step}/rank{r}_trace.json"),
    INT(profiling, profile_freq, 10, 1, BIG, "steps per profiling cycle (a trace each)"),
    INT(profiling, profiler_active, 1, 1, BIG, "steps recorded per cycle (its last ones)"),
    INT(profiling, profiler_warmup, 3, 0, BIG,
        "steps run profiled but not recorded before them (active + warmup <= profile_freq)"),
    PBOOL(profiling, enable_memory_snapshot, 0, P_REFUSE,
          "CUDA memory snapshots: none (titan plan gives the memory)"),

    /* torchtitan v0.2.2 sections of features titan does not have (docs/config.md) */
    PSTR(profiling, save_memory_snapshot_folder, "memory_snapshot", NULL, P_INERT,
         "memory snapshots"),

    PBOOL(compile, enable, 0, P_NOTE, "torch.compile: titan is compiled code already"),
    PSTRS(compile, components, P_INERT, "torch.compile's components"),
    PSTR(compile, backend, "inductor", NULL, P_INERT, "torch.compile's backend"),

    PBOOL(quantize.linear.float8, enable_fsdp_float8_all_gather, 0, P_INERT,
          "float8 (needs model.converters)"),
    PBOOL(quantize.linear.float8, precompute_float8_dynamic_scale_for_fsdp, 0, P_INERT,
          "float8 (needs model.converters)"),
    PSTR(quantize.linear.float8, recipe_name, "", NULL, P_INERT, "float8 (needs model.converters)"),
    PSTRS(quantize.linear.float8, filter_fqns, P_INERT, "float8 (needs model.converters)"),
    PBOOL(quantize.linear.float8, emulate, 0, P_INERT, "float8 (needs model.converters)"),
    PSTR(quantize.linear.mx, mxfp8_dim1_cast_kernel_choice, "triton", "triton|cuda|torch", P_INERT,
         "MX (needs model.converters)"),
    PSTR(quantize.linear.mx, recipe_name, "mxfp8_cublas", NULL, P_INERT,
         "MX (needs model.converters)"),
    PSTRS(quantize.linear.mx, filter_fqns, P_INERT, "MX (needs model.converters)"),
    ANY(quantize.grouped_mm.float8, fqns, "float8 grouped GEMMs (needs model.converters)"),
    PSTR(quantize.grouped_mm.mx, recipe_name, "mxfp8", "mxfp8", P_INERT,
         "MX grouped GEMMs (needs model.converters)"),
    ANY(quantize.grouped_mm.mx, fqns, "MX grouped GEMMs (needs model.converters)"),

    PINT(comm, init_timeout_seconds, 300, 0, BIG, P_USED,
         "collective timeout during setup and the first step, seconds; 0 = never"),
    PINT(comm, train_timeout_seconds, 100, 0, BIG, P_USED,
         "the same after step 1 (the watchdog names the ranks that did not arrive); 0 = never"),
    PINT(comm, trace_buf_size, 20000, 0, BIG, P_INERT, "NCCL flight recorder entries (no NCCL)"),
    PSTR(comm, save_traces_folder, "comm_traces", NULL, P_INERT, "flight recorder folder"),
    PSTR(comm, save_traces_file_prefix, "rank_", NULL, P_INERT, "flight recorder file prefix"),
    PSTR(comm, mode, "default", "default|!fake_backend|!local_tensor", P_REFUSE,
         "torch's fake / local-tensor process groups (not implemented)"),

    PBOOL(memory_estimation, enable, 0, P_USED, "print titan plan's memory figures at start"),
    PBOOL(memory_estimation, disable_fake_mode, 0, P_INERT, "torch FakeTensorMode (none)"),

    PBOOL(fault_tolerance, enable, 0, P_REFUSE, "TorchFT replicas (not implemented)"),
    PSTR(fault_tolerance, process_group, "gloo", NULL, P_INERT, "fault tolerance"),
    PINT(fault_tolerance, process_group_timeout_ms, 10000, 1, BIG, P_INERT, "fault tolerance"),
    PINT(fault_tolerance, replica_id, 0, 0, BIG, P_INERT, "fault tolerance"),
    PINT(fault_tolerance, group_size, 0, 0, BIG, P_INERT, "fault tolerance"),
    PINT(fault_tolerance, min_replica_size, 1, 1, BIG, P_INERT, "fault tolerance"),
    PSTR(fault_tolerance, semi_sync_method, "", NULL, P_INERT, "fault tolerance"),

    PSTR(experimental, custom_import, "", NULL, P_REFUSE, "a Python module to import"),
    PSTR(experimental, custom_args_module, "", NULL, P_REFUSE,
         "a Python module extending JobConfig"),

};
const int train_cfg_n_fields = (int)(sizeof g_fields / sizeof g_fields[0]);
int is_unset(const field *fd, const void *s);
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

void consider(nearest *n, const char *cand) {
    int d = edit_distance(n->word, cand);
    if (!n->best[0] || d < n->dist) {
        snprintf(n->best, sizeof n->best, "%s", cand);
        n->dist = d;
    }
}

int find_field(const char *section, const char *key) {
    for (int i = 0; i < N_FIELDS; i++)
        if (!strcmp(g_fields[i].section, section) && !strcmp(g_fields[i].key, key)) return i;
    return -1;
}

static int is_section(const char *s) {
    for (int i = 0; i < N_FIELDS; i++)
        if (!strcmp(g_fields[i].section, s)) return 1;
    return 0;
}

/* [quantize] and [quantize.linear]: the tables above [quantize.linear.float8]. */
static int is_parent_section(const char *s) {
    const size_t n = strlen(s);
    for (int i = 0; i < N_FIELDS; i++)
        if (!strncmp(g_fields[i].section, s, n) && g_fields[i].section[n] == '.') return 1;
    return 0;
}

/* Whether a name d edits from `word` is close enough to suggest: a typo, not another name
 * ([profiling] is 5 edits from [training]). */
static int near_enough(const char *word, int d) {
    const int len = (int)strnlen(word, 63);
    return d <= (len / 3 > 2 ? len / 3 : 2);
}

/* The valid field to suggest for section.key, or -1: in a known section, its nearest key when
 * that is a typo away; else the same key in another section (seed in [job] ->
 * training.seed). In an unknown section: the nearest "section.key" a typo away. */
int suggest_field(const char *section, const char *key) {
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
        return best >= 0 && near_enough(key, dist) ? best : -1;
    }
    char want[200];
    snprintf(want, sizeof want, "%s.%s", section, key);
    for (int i = 0; i < N_FIELDS; i++) {
        char full[128];
        snprintf(full, sizeof full, "%s.%s", g_fields[i].section, g_fields[i].key);
        const int d = edit_distance(want, full);
        if (d < dist) best = i, dist = d;
    }
    return near_enough(want, dist) ? best : -1;
}

/* "; did you mean [x]?" for the section a typo away, else "". */
static void suggest_section(const char *section, char *out, size_t n) {
    nearest nr = {section, "", 0};
    for (int i = 0; i < N_FIELDS; i++) consider(&nr, g_fields[i].section);
    if (near_enough(section, nr.dist))
        snprintf(out, n, "; did you mean [%s]?", nr.best);
    else
        out[0] = 0;
}

/* Choices are "a|b|!c": a '!' marks a value torchtitan accepts and titan refuses by name
 * later (train_config_to_opts), with the reason; it parses, is never suggested, and messages
 * list it apart. */

/* The choices of "a|b|!c" with (refused = 1) or without the '!' mark, as "a, b" / "c". */
void choices_list(const char *choices, int refused, char *out, size_t n) {
    size_t len = 0;
    out[0] = 0;
    for (const char *p = choices; *p;) {
        const char *bar = strchr(p, '|');
        const size_t cl = bar ? (size_t)(bar - p) : strlen(p);
        if ((*p == '!') == refused && len < n) {
            const int skip = *p == '!';
            const int w =
                snprintf(out + len, n - len, "%s%.*s", len ? ", " : "", (int)cl - skip, p + skip);
            len = w > 0 && len + (size_t)w < n ? len + (size_t)w : n - 1;
        }
        p += cl + (bar != NULL);
    }
}

/* The nearest choice of "a|b|!c" titan accepts (not a '!' one). */
static void suggest_choice(const char *choices, const char *word, char *out, size_t n) {
    nearest nr = {word, "", 0};
    for (const char *p = choices; *p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        char c[64];
        snprintf(c, sizeof c, "%.*s", (int)len, p);
        if (c[0] != '!') consider(&nr, c);
        p += len + (bar != NULL);
    }
    snprintf(out, n, "%s", nr.best);
}

/* Whether s is one of "a|b|!c" (a refused '!' one too: it is refused later, by name). */
static int is_choice(const char *choices, const char *s) {
    size_t len = strlen(s);
    for (const char *p = choices; *p;) {
        const char *bar = strchr(p, '|');
        size_t cl = bar ? (size_t)(bar - p) : strlen(p);
        const int skip = *p == '!';
        if (cl - skip == len && !strncmp(p + skip, s, len)) return 1;
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
    choices_list(all, 0, list, sizeof list);
    snprintf(why, n, "'%.64s' is not a flavor (%s); did you mean '%s'?", v->s, list, best);
    return -1;
}

static int check_sac_option(const base_toml_value *v, char *why, size_t n) {
    int64_t k;
    if (!strcmp(v->s, "op") || (base_parse_i64(v->s, &k) == 0 && k >= 0 && k <= BIG)) return 0;
    snprintf(why, n, "must be 'op' or an integer N >= 0 (every N-th block; 0 = all)");
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
    const ops_override ov = {.pattern = pattern, .impl = "default"}; /* every op has a default */
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
int check_kernel_impl(const char *s, char *why, size_t n) {
    const char *eq = strchr(s, '=');
    char pattern[256];
    snprintf(pattern, sizeof pattern, "%.*s", (int)(eq - s), s);
    const ops_override ov = {.pattern = pattern, .impl = eq + 1};
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

static int check_ckpt_part(const base_toml_value *v, char *why, size_t n) {
    if (train_ckpt_part_parse(v->s)) return 0;
    snprintf(why, n,
             "'%.100s' is not a checkpoint part (model, optimizer, lr_scheduler, dataloader, "
             "train_state)",
             v->s);
    return -1;
}

/* ---- storage ---------------------------------------------------------------------- */

void *slot(const train_config *c, const field *f) {
    return (char *)c + f->off;
}

/* Owned by the config: freed by train_config_free. */
void *pool_keep(train_config *c, void *p) {
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
        case T_FLOATS:
        case T_ANY:
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
void describe(const field *f, const char *where, int line, int col, char *out, size_t n) {
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

int is_list_type(ftype t) {
    return t == T_STRS || t == T_INTS || t == T_FLOATS;
}

ftype item_type(ftype t) {
    return t == T_STRS ? T_STR : t == T_INTS ? T_INT : t == T_FLOATS ? T_FLOAT : t;
}

const char *type_name(const field *f) {
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
    case T_FLOATS:
        return "an array of numbers";
    case T_ANY:
        return "any value";
    }
    return "?";
}

/* "in [1, 1073741824]", "> 0", ">= 0", "in [0, 1)" */
void range_text(const field *f, char *out, size_t n) {
    const int int_like = f->type != T_FLOAT && f->type != T_FLOATS;
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
    const ftype t = item_type(f->type);
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
                 f->type == T_STRS     ? "strings"
                 : f->type == T_INTS   ? "integers"
                 : f->type == T_FLOATS ? "numbers"
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
    /* "" is the unset value of a choice field whose default is unset (resolved later, e.g.
     * mixed_precision_param against the CPU): a printed config loads back */
    const int unset_ok = f->def_s && !f->def_s[0] && !v->s[0];
    if (t == T_STR && f->choices && !unset_ok && !is_choice(f->choices, v->s)) {
        char best[64], list[160], refused[160], also[220] = "";
        suggest_choice(f->choices, v->s, best, sizeof best);
        choices_list(f->choices, 0, list, sizeof list);
        choices_list(f->choices, 1, refused, sizeof refused);
        if (refused[0])
            snprintf(also, sizeof also, " (torchtitan's %s %s refused by titan)", refused,
                     strchr(refused, ',') ? "are" : "is");
        snprintf(why, n, "'%.100s' is not %s%s%s; did you mean '%s'?", v->s,
                 strchr(list, ',') ? "one of " : "", list, also, best);
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
    case T_FLOATS: {
        double *items = pool_keep(c, calloc((size_t)v->n_items + 1, sizeof *items));
        if (!items) return -1;
        for (int i = 0; i < v->n_items; i++) items[i] = v->items[i].f;
        *(train_float_list *)s = (train_float_list){items, v->n_items};
        break;
    }
    case T_ANY:
        break; /* accepted, kept nowhere */
    }
    return 0;
}

/* Checks and stores a value for field fi; errors start with the value's origin. */
int assign(train_config *c, int fi, base_toml_value *v, const char *where, int line, int col,
           base_err *err) {
    const field *f = &g_fields[fi];
    char why[600] = "", pre[300];
    const int is_list = is_list_type(f->type);
    if (f->type == T_ANY)
        ; /* any value */
    else if (is_list && v->type != BASE_TOML_ARRAY)
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

/* [kernels] table entries collected while loading a file, with where each was written: the
 * parser groups keys by table, and a bare dotted key (layers.1.attention.rope = ...) makes a
 * sub-table of its own, so the tables' order is not the file's. */
typedef struct {
    const char *v; /* "pattern=impl" */
    int line, col;
} kern_entry;
typedef struct {
    kern_entry *e;
    int n;
} kern_pending;

/* File order: a position names one key, so no two entries compare equal. */
static int kern_entry_cmp(const void *a, const void *b) {
    const kern_entry *x = a, *y = b;
    return x->line != y->line ? (x->line > y->line) - (x->line < y->line)
                              : (x->col > y->col) - (x->col < y->col);
}

/* [kernels] "pattern" = "impl" (the table form of kernels.overrides; `prefix` is the table
 * path after "kernels." when a bare dotted key made a sub-table): checked like a list item
 * and collected in file order into *pending (items owned by the config's pool). */
static int kernel_table_entry(train_config *c, const char *prefix, const base_toml_kv *kv,
                              kern_pending *pending, base_err *err) {
    const size_t len = (prefix ? strlen(prefix) + 1 : 0) + strlen(kv->key) + strlen(kv->val.s) + 2;
    char *item = pool_keep(c, malloc(len));
    kern_entry *grown = realloc(pending->e, sizeof *grown * (size_t)(pending->n + 1));
    if (grown) pending->e = grown;
    if (!item || !grown) return base_fail(err, "out of memory");
    snprintf(item, len, "%s%s%s=%s", prefix ? prefix : "", prefix ? "." : "", kv->key, kv->val.s);
    base_toml_value v = kv->val;
    v.s = item;
    char why[600];
    if (strchr(kv->key, '=') || check_kernel_override(&v, why, sizeof why)) {
        if (strchr(kv->key, '=')) snprintf(why, sizeof why, "a pattern cannot contain '='");
        return base_fail(err, "%s:%d:%d: kernels.\"%s%s%s\": %s", c->file, kv->line, kv->col,
                         prefix ? prefix : "", prefix ? "." : "", kv->key, why);
    }
    pending->e[pending->n++] = (kern_entry){item, kv->line, kv->col};
    return 0;
}

/* kernels.overrides += pending: the list's entries first, then the table's in file order
 * (sorted by line and column: the last matching override wins, so their order is meaning). */
static int kernel_table_append(train_config *c, kern_pending *pending, base_err *err) {
    qsort(pending->e, (size_t)pending->n, sizeof *pending->e, kern_entry_cmp);
    const int line = pending->e[0].line, col = pending->e[0].col;
    const int fi = find_field("kernels", "overrides"), n0 = c->kernels.overrides.n;
    const char **items = pool_keep(c, calloc((size_t)(n0 + pending->n + 1), sizeof *items));
    if (!items) return base_fail(err, "out of memory");
    for (int i = 0; i < n0; i++) items[i] = c->kernels.overrides.v[i];
    for (int i = 0; i < pending->n; i++) items[n0 + i] = pending->e[i].v;
    c->kernels.overrides = (train_str_list){items, n0 + pending->n};
    if (!c->origin[fi].where || c->origin[fi].where != c->file) {
        /* errors about the merged list point at the first table entry */
        c->origin[fi].where = c->file;
        c->origin[fi].line = line;
        c->origin[fi].col = col;
    }
    return 0;
}

void unknown_add(unknowns *u, const char *fmt, ...) {
    char line[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    const size_t len = strlen(u->text);
    if (len + strlen(line) + 3 < sizeof u->text) {
        snprintf(u->text + len, sizeof u->text - len, "%s%s", u->n ? "\n  " : "", line);
        u->shown++;
    }
    u->n++;
}

int train_config_load_text(train_config *c, const char *text, size_t len, const char *name,
                           base_err *err) {
    /* The name errors and origins refer to; kept until train_config_free. */
    if (!(c->file = pool_keep(c, strdup(name ? name : "<config>"))))
        return base_fail(err, "out of memory");
    base_toml_doc doc;
    if (base_toml_parse(text, len, c->file, &doc, err)) return -1;
    kern_pending pending = {NULL, 0}; /* [kernels] "pattern" = "impl" entries */
    unknowns unk = {"", 0, 0};
    unsigned char *handled = calloc((size_t)doc.n_tables, 1); /* [[optimizer.param_groups]] */
    int rc =
        !handled ? base_fail(err, "out of memory") : train_param_groups_load(c, &doc, handled, err);
    for (int t = 0; t < doc.n_tables && !rc; t++) {
        base_toml_table *tb = &doc.tables[t];
        char hint[160];
        if (handled[t]) continue;
        const char *elem = strchr(tb->name, '['); /* another array of tables' element */
        if (elem) {
            if (!strcmp(elem, "[0]"))
                unknown_add(&unk, "%s:%d:%d: unknown array of tables [[%.*s]]", c->file, tb->line,
                            tb->col, (int)(elem - tb->name), tb->name);
            continue;
        }
        if (!tb->n_kv && t + 1 < doc.n_tables &&
            !strncmp(doc.tables[t + 1].name, tb->name, strlen(tb->name)) &&
            !strcmp(doc.tables[t + 1].name + strlen(tb->name), "[0]"))
            continue;       /* an array of tables' container: its elements are said */
        if (!tb->name[0]) { /* root: keys outside any [section] */
            for (int k = 0; k < tb->n_kv; k++) {
                const base_toml_kv *kv = &tb->kv[k];
                hint[0] = 0;
                for (int i = 0; i < N_FIELDS && !hint[0]; i++)
                    if (!strcmp(g_fields[i].key, kv->key))
                        snprintf(hint, sizeof hint, "; did you mean '%s' in [%s]?", kv->key,
                                 g_fields[i].section);
                unknown_add(&unk, "%s:%d:%d: key '%.100s' is outside any [section]%s", c->file,
                            kv->line, kv->col, kv->key, hint);
            }
            continue;
        }
        const int kern_sub = !strncmp(tb->name, "kernels.", 8); /* from a bare dotted key */
        if (!tb->n_kv && is_parent_section(tb->name)) continue;
        if (!is_section(tb->name) && !kern_sub && !is_parent_section(tb->name)) {
            suggest_section(tb->name, hint, sizeof hint);
            unknown_add(&unk, "%s:%d:%d: unknown section [%.100s]%s", c->file, tb->line, tb->col,
                        tb->name, hint);
            continue;
        }
        for (int k = 0; k < tb->n_kv && !rc; k++) {
            base_toml_kv *kv = &tb->kv[k];
            const int fi = kern_sub ? -1 : find_field(tb->name, kv->key);
            if (fi < 0 && (kern_sub || !strcmp(tb->name, "kernels")) &&
                kv->val.type == BASE_TOML_STRING) {
                rc = kernel_table_entry(c, kern_sub ? tb->name + 8 : NULL, kv, &pending, err);
            } else if (fi < 0 && !strcmp(tb->name, "optimizer") &&
                       !strcmp(kv->key, "param_groups")) {
                unknown_add(&unk,
                            "%s:%d:%d: optimizer.param_groups is an array of tables: "
                            "[[optimizer.param_groups]] then pattern = ..., optimizer_name = "
                            "..., optimizer_kwargs = {lr = ...}, once per group",
                            c->file, kv->line, kv->col);
            } else if (fi < 0) {
                const int gi = suggest_field(tb->name, kv->key);
                const field *g = gi >= 0 ? &g_fields[gi] : NULL;
                if (!g)
                    hint[0] = 0;
                else if (strcmp(g->section, tb->name))
                    snprintf(hint, sizeof hint, "; did you mean '%s' in [%s]?", g->key, g->section);
                else
                    snprintf(hint, sizeof hint, "; did you mean '%s'?", g->key);
                unknown_add(&unk, "%s:%d:%d: unknown key '%.100s' in [%s]%s", c->file, kv->line,
                            kv->col, kv->key, tb->name, hint);
            } else {
                rc = assign(c, fi, &kv->val, c->file, kv->val.line, kv->val.col, err);
            }
        }
    }
    base_toml_free(&doc);
    free(handled);
    if (!rc && unk.n == 1) rc = base_fail(err, "%s", unk.text);
    if (!rc && unk.n > 1)
        rc = base_fail(err, "%s: %d unknown names:\n  %s%s", c->file, unk.n, unk.text,
                       unk.shown < unk.n ? "\n  ..." : "");
    if (!rc && pending.n) rc = kernel_table_append(c, &pending, err);
    free(pending.e);
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
