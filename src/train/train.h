/* train: the training loop (a first version driven by command-line options; TOML job
 * configs come with the trainer issue), metrics, and sampling. */
#ifndef TITAN_TRAIN_H
#define TITAN_TRAIN_H

#include <stdint.h>
#include <stdio.h>

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

/* Measures this machine's fp32 GEMM rate (FLOP/s) with the linked BLAS. */
double train_measure_peak_flops(void);

#endif
