/* train: the training loop (a first version driven by command-line options; TOML job
 * configs come with the trainer issue), metrics, and sampling. */
#ifndef TITAN_TRAIN_H
#define TITAN_TRAIN_H

#include <stdint.h>

#include "../base/base.h"
#include "../data/data.h"
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
    const char *out_dir;    /* final weights as safetensors with HF names (NULL = none) */
    int sample_tokens;      /* after training, sample this many tokens (0 = none) */
    double peak_flops;      /* fp32 FLOP/s for MFU; <= 0 = measure */
    int ce_chunk;           /* tokens per fused lm_head+CE chunk (0 = automatic) */
} train_opts;

void train_opts_defaults(train_opts *o);
int train_run(const train_opts *o, base_err *err);

/* Measures this machine's fp32 GEMM rate (FLOP/s) with the linked BLAS. */
double train_measure_peak_flops(void);

#endif
