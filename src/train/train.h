/* train: the training loop (a first version driven by command-line options; TOML job
 * configs come with the trainer issue), metrics, and sampling. */
#ifndef TITAN_TRAIN_H
#define TITAN_TRAIN_H

#include <stdint.h>

#include "../base/base.h"
#include "../data/data.h"
#include "../model/model.h"
#include "../optim/optim.h"

typedef struct {
    model_args model;
    const char *data_path;     /* dataset (file, folder, glob); NULL = random tokens */
    const char *tokenizer_dir; /* HF tokenizer folder; NULL = one token per byte */
    data_format data_format;
    const char *data_field; /* JSONL text field (NULL = "text") */
    int skip_bad_lines;
    int steps, batch, seq_len, grad_accum;
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
