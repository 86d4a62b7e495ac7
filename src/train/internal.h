/* train: internals shared by the trainer's files. The run loop (train.c: train_run) strings
 * together the token source (source.c), the step and validation (step.c), the resumable
 * state (state.c), the saver (saver.c), metrics output (metrics.c, tb.c), start-up planning
 * (start.c), preflight (preflight.c), locks (lock.c), stop signals (stop.c) and the model's
 * side of parallelism (parallelize.c; dist moves the buffers). */
#ifndef TITAN_TRAIN_INTERNAL_H
#define TITAN_TRAIN_INTERNAL_H

#include "checkpoint/checkpoint.h"
#include "train/train.h"

/* Writes training checkpoints, in a background thread when that is safe: a save creates the
 * step folder (collective), copies this rank's buffers into a snapshot and returns; the thread
 * writes this rank's shard while training goes on; the commit (every rank's shard written,
 * then rank 0's metadata and rename) is collective and happens in the training thread, at the
 * first train_saver_poll after every rank's write is done, or at the next save or finish. */
typedef struct train_saver train_saver;

/* One checkpoint buffer per (name, piece) for nb buffers x np pieces of the shard vector
 * (malloc'ed, free()): names[i], or "names[i]@k" for piece k > 0 when piece_names
 * ([nb * np][32], filled here) is given (a save's shard tensors); data = src[i] + shard_off
 * (src may be NULL) and dst = dst[i] + shard_off (dst may be NULL) elements: floats, or bf16
 * bits for the buffers whose bit i is set in bf16 (AdamW's moments in bf16). */
ckpt_step_buf *train_piece_bufs(const char *const *names, int nb, const dist_piece *p, int np,
                                size_t global_n, const void *const *src, void *const *dst,
                                unsigned bf16, char (*piece_names)[32]);

/* Where this rank's buffers go in a checkpoint: the pieces of its shard vector (n elements)
 * in the global buffers of global_n elements; rank 0 creates and commits the step, every
 * writer writes shard file `writer` (HSDP replicas other than the first write none: -1);
 * all-reduces on comm separate the three, so a failure on one rank fails the save on all. */
typedef struct {
    dist_comm *comm;
    int rank, writer, n_writers;
    const dist_piece *pieces;
    int n_pieces;
    size_t global_n;
} train_saver_layout;

/* dir: the checkpoint folder; n: elements per buffer (the shard vector); mv_bf16: AdamW's
 * moments are bf16 (saved as BF16 tensors); async: use the thread when every rank's snapshot
 * fits in memory (ranks x (4 + 2 x 4 or 2 x 2) n bytes <= a quarter of this machine's RAM);
 * otherwise saves are synchronous. */
int train_saver_init(train_saver **out, const char *dir, size_t n, int mv_bf16,
                     const train_saver_layout *lay, int async, int keep_latest_k, base_err *err);
/* Whether async saves keep their snapshot: bytes per rank (3 n floats) x ranks within a quarter
 * of this machine's RAM (the saver's rule; titan plan counts the snapshot by it). */
int train_saver_async_fits(double bytes, int ranks);
/* Saves step: model weights w, and AdamW moments m, v unless model_only (NULL ok then; the
 * weights are then stored as model_dtype: F32, or BF16 / F16 rounded to nearest even, as
 * torchtitan's last save in export_dtype). train_json is the trainer's state object (copied). */
int train_saver_save(train_saver *s, int64_t step, const float *w, const void *m, const void *v,
                     int model_only, ckpt_dtype model_dtype, const char *train_json, base_err *err);
/* Every rank calls these at the same points (they are collective while a save is in flight).
 * finish: waits for the save in flight and commits it; returns its error if it failed.
 * poll (once per step): commits the save in flight if every rank has written its shard, else
 * returns at once (one small all-reduce while a save is in flight, nothing otherwise). */
int train_saver_finish(train_saver *s, base_err *err);
int train_saver_poll(train_saver *s, base_err *err);
/* After an error on this rank (no collectives): waits for the write in flight; commits it
 * only with one rank, else leaves step-N.tmp, which is never loaded, and says so in err. */
int train_saver_abandon(train_saver *s, base_err *err);
void train_saver_free(train_saver *s);

/* Stopping on a signal (stop.c). SIGTERM, SIGINT and extra_sig (job.preemption_signal, 0 =
 * none) set a flag and print one line; a second one exits at once (_exit(128 + N)). The loop
 * asks at the end of every step whether any rank got one (train_stop_agree, one 8-byte
 * all-reduce over the world with several ranks), so every rank stops after the same step. */
int train_stop_install(int extra_sig, base_err *err);
void train_stop_uninstall(void); /* the dispositions train_stop_install replaced */
/* 0, or the signal all ranks stop on (the highest number any of them received). Collective. */
int train_stop_agree(dist_comm *world);
/* 0, or the first signal this rank received (not collective: rank 0's sampling asks it). */
int train_stop_pending(void);
const char *train_stop_signal_name(int sig); /* "SIGTERM", ...; "signal" for others */
/* After step `step` saved its checkpoint (or with s NULL: no saves, no_saves says why):
 * commits the save in flight, says what the last complete checkpoint is, and returns 128 + sig,
 * or -1 with err if the save failed. Collective over the saver's ranks. */
int train_stop_finish(train_saver *s, int sig, int step, const char *ckdir, const char *no_saves,
                      base_err *err);

/* The trainer's state object of dir/step-N (metadata.json "train", state_check.c): every
 * field present, of its type and in range (0 <= adam_step <= step, counts >= 0, ...).
 * Errors name the file and the field. */
struct json_t;
/* folder/step-N's trainer state (metadata.json "train", ckpt_step_read_meta validates the
 * file), parsed; NULL with err set when it cannot be read. json_decref it. */
struct json_t *train_step_state(const char *folder, int64_t step, base_err *err);
int train_state_check(const struct json_t *t, const char *dir, int64_t step, base_err *err);
/* Positions loader l, data-parallel rank dp_rank of dp_size, where a checkpoint's "train"
 * object t says (train.data_loader; train.data_loaders[dp_rank] when dp_size > 1). Errors
 * name dir/step-N/metadata.json and the field. */
int train_loader_state_restore(const struct json_t *t, data_mix *l, int dp_rank, int dp_size,
                               const char *dir, int64_t step, base_err *err);
/* The checkpoint's model (train.model, decoded by model_args_from_json) is this run's
 * (model_args_equal); the error shows both identities. */
int train_model_check(const struct json_t *t, const model_args *run, const char *dir, int64_t step,
                      base_err *err);

/* The [model] field of titan train's config that sets the model argument ARG[0, n) (titan
 * inspect's names: n_experts -> num_experts, moe_ffn_dim -> moe_inter_dim, the rest the same),
 * or NULL when no [model] field sets it (translate.c's table; titan plan's --set). */
const char *train_model_override_field(const char *arg, size_t n);

/* The run's hold on the folders it writes (lock.c): rank 0 locks the checkpoint folder, the
 * folders of the metrics file, the report page and config.toml (the run folder), the
 * TensorBoard folder and the export folder (each once, created
 * if missing; base_dir_lock_take), so a second run writing any of them refuses at once,
 * naming this one's PID; then it finishes what a killed run left in the checkpoint folder
 * (ckpt_step_cleanup). Other ranks hold nothing; collective over comm (all fail when rank 0
 * does). Unlock at the end of the run. */
/* The folders a run holds: checkpoint, metrics, report page, config.toml, TensorBoard, export. */
#define TRAIN_LOCKS 6
typedef struct {
    base_dir_lock held[TRAIN_LOCKS];
    int n;
} train_lock;
int train_lock_outputs(train_lock *l, const train_opts *o, dist_comm *comm, int rank,
                       base_err *err);
void train_unlock_outputs(train_lock *l);
/* The checkpoint folder: checkpoint.folder, under dump_folder unless absolute. */
void train_ckpt_folder(const train_opts *o, char *buf, size_t cap);

/* TensorBoard scalars (tb.c): DIR/events.out.tfevents.<time>.<host>.<pid>, readable by
 * TensorBoard's own reader. One event per call holds n (tag, value) pairs at one step. */
typedef struct train_tb train_tb;
int train_tb_open(train_tb **out, const char *dir, base_err *err);
int train_tb_scalars(train_tb *t, int64_t step, const char *const *tags, const double *values,
                     int n, base_err *err);
void train_tb_close(train_tb *t);

/* MoE pieces of the trainer (moe.c). The expert bias is trainer state, not a parameter: it
 * goes into the checkpoint's "train" object as "expert_bias" ([L*E] numbers, exact: fp32
 * values printed with 17 digits), never into the parameter buffers nor HF exports. */
struct json_t;
/* "expert_bias" into / from a "train" object (no-op for dense models; absent = zeros). */
void train_moe_bias_json(struct json_t *train, const model *m);
int train_moe_bias_load(model *m, const struct json_t *train, const char *where, base_err *err);
/* Tokens per expert of each block this step (min/mean/max over the experts) as JSONL keys
 * "tokens_per_expert_min" / "_mean" / "_max" (arrays over blocks), written inside the step's
 * object after a comma (nothing for a dense model). */
void train_moe_jsonl(const model *m, FILE *jl);
/* The step's expert load in one console line into buf: min / mean / max tokens per expert
 * over all blocks, and the most loaded block. Returns 0 (buf untouched) for a dense model. */
int train_moe_summary(const model *m, char *buf, size_t n);

/* Metrics output (metrics.c), its one home: the console's step / validate / MoE lines,
 * metrics.jsonl, TensorBoard, and {dump_folder}/config.toml. Every rank calls every function
 * (open is collective); rank 0 writes the console, and the files unless
 * o->metrics_all_ranks, where every rank writes its own under rank_N/. */
typedef struct train_metrics train_metrics;
/* One step's figures. Per rank: ntokens (this rank's tokens), step_s, data_s, comm_s;
 * global: loss (token mean), max_loss (max over data-parallel ranks of their own mean),
 * tokens_seen (all ranks). val_loss is NAN on steps without validation. */
typedef struct {
    int step, dp_size;
    double loss, max_loss, grad_norm, lr, aux;
    double lr_factor; /* the schedule's factor: every group's lr is its own x it */
    int64_t ntokens, tokens_seen;
    double step_s, data_s, comm_s;
    double val_loss, val_s; /* validation: mean loss, seconds; val_tokens tokens */
    int64_t val_tokens;
    double gather_bytes, reduce_bytes; /* this rank's FSDP all-gathers / reduce-scatters */
    /* a dataset mixture's windows from each source, per rank (every rank draws the same),
     * since the run's step 1 (a resume carries them): src_windows[n_src]; n_src 0 otherwise */
    const int64_t *src_windows;
    int n_src;
} train_step_metrics;
/* start: the step resumed after (0 = a fresh run: a new metrics.jsonl; else the file keeps
 * its lines up to start and is appended to); last: the run's last step. TensorBoard goes to
 * a new run folder o->tb_dir/YYYYmmdd-HHMM[-k]. */
int train_metrics_open(train_metrics **out, const train_opts *o, const dist_mesh *mesh,
                       int64_t start, int last, double peak_flops, double flops_per_token,
                       int aux_on, base_err *err);
/* Every step: the console (step 1, every log_freq steps and the last; the validate line when
 * val_loss is set), the JSONL line (every step), TensorBoard (logged and validation steps).
 * tps / tflops / mfu / data loading of logged steps are averages over the window of steps
 * since the last logged one. A failed write is an error naming the file. */
int train_metrics_log_step(train_metrics *t, const train_step_metrics *s, const model *m,
                           base_err *err);
/* The run ends at step (a stop signal): it is logged as the last step (console, TensorBoard)
 * and the report page stops refreshing, as for the planned last step. */
void train_metrics_end_at(train_metrics *t, int step);
/* The run ends with an error (why): the report page is drawn once more, final (no refresh),
 * with every step logged so far and the error. A failed write is a warning. */
void train_metrics_failed(train_metrics *t, const char *why);
/* The step whose TensorBoard scalars this rank could not write (0: none, or no TensorBoard). */
int train_metrics_tb_failed(const train_metrics *t);
/* The report page's run of these metrics (rank 0 with metrics.save_report_file), else NULL. */
struct train_report_run *train_metrics_report(train_metrics *t);
/* Closes the files (NULL ok); err (may be NULL) gets a failed final write. */
int train_metrics_close(train_metrics *t, base_err *err);

/* What a run starts from (start.c), decided before the model is initialised so that the
 * random init is skipped where a load overwrites it. */
typedef struct {
    char ckdir[4096];    /* the checkpoint folder ("" when checkpoints are off) */
    char from[4096];     /* the folder of the step-N resumed: ckdir, or (the full-state initial
                          * load, checkpoint.initial_load_model_only = false) the initial one */
    int64_t resume_step; /* the step-N to resume from; -1: none */
    unsigned load;       /* train_ckpt_part bits the resume loads (a weights-only one: model) */
    int64_t start;       /* training continues after this step */
    int64_t lr_base;     /* the schedule's position is step - 1 + lr_base */
    const char *initial; /* no resume: the initial load's source, or NULL */
    int skip_init;       /* a load overwrites every weight */
} train_start;
/* Resolves the checkpoint folder, the step to resume (checkpoint.load_step or the newest
 * complete one) and what it loads; refuses a resume past training.steps (naming the folder
 * and how to start afresh) and create_seed_checkpoint into a folder that holds steps. */
int train_start_plan(const train_opts *o, train_start *p, base_err *err);
/* A resume of dir's newest step (load_step unset) refused: err gains the step before it that
 * checkpoint.load_step would resume from, if dir holds one; returns -1. */
int train_hint_earlier_step(const train_opts *o, const char *dir, int64_t step, base_err *err);
/* A start-up phase that can take seconds on a large model (weight init, a load, the GEMM
 * peak): a line before it; after it, its time when that was a second or more. */
double train_phase_begin(const char *what);
/* " model optimizer ..." for the train_ckpt_part bits in parts ("" for none). */
void train_ckpt_parts_str(unsigned parts, char *buf, size_t n);
#define TRAIN_CKPT_ALL 31u /* every train_ckpt_part */
void train_phase_end(const char *what, double t0);
/* The tokenizer a run's data is encoded with, as checkpoint metadata "tokenizer":
 * {"path", "tokenizer_json_fnv1a64", and those of bos_token_id, eos_token_id, pad_token_id it
 * has} (a tokenizer; without one, the tokenizer token shards in loader record: no ids),
 * "bytes" (byte data) or null (random tokens); NULL when out of memory. */
struct json_t *train_tokenizer_json(const train_opts *o, const data_tok *tok,
                                    const data_mix *loader);
/* {bos, eos, pad} of tok (-1 for one it has not; all -1 without a tokenizer). */
void train_token_ids(const data_tok *tok, int32_t ids[3]);

/* The model's side of parallelism (parallelize.c); dist moves the buffers. */
/* FSDP over the model's units: the model computes on the full (virtual) buffers (m->w, m->g
 * become FSDP's, with its hook), the optimizer and checkpoints see this rank's shard vector. */
int train_setup_fsdp(model *m, const dist_mesh *mesh, const train_opts *o, dist_fsdp **f,
                     base_err *err);
/* Where this rank's shard vector goes in the full (tp = 1) layout (dist_tp_pieces). */
int train_tp_pieces(dist_tp_pieces *t, const model *m, const dist_fsdp *f, int tp_rank,
                    base_err *err);
/* *full = the whole model (built for batch 1, seq_len 1: exports, sampling, loading)
 * assembled from every TP (or EP) rank's slices: all ranks of the group call it, with the
 * parameters gathered over FSDP. */
int train_full_model(model *full, const model *m, const train_opts *o, dist_comm *group,
                     base_err *err);
/* This rank's slices (m->w, local layout) from the whole model's weights full. */
int train_take_slices(model *m, float *full, base_err *err);

/* The token source (source.c): the packing loader over a dataset or a mixture of them, or
 * uniformly random tokens. */
typedef struct {
    data_tok *tok;
    data_mix *loader;
    uint64_t seed, counter;
    int vocab;
    int dp_rank, dp_size; /* this rank's share of the data */
} train_source;
int train_source_open(train_source *s, const train_opts *o, const dist_mesh *mesh, base_err *err);
/* Fills one [B, T] microbatch of inputs and next-token targets. Random tokens: the windows
 * of T + 1 tokens come from one counter stream; each round of microbatches takes dp_size * B
 * windows, this rank's B starting dp_rank * B windows in. Any split of the same global batch
 * over ranks and accumulation steps therefore draws the same windows (equivalence tests,
 * resuming on another number of ranks). pos (NULL: not wanted): each token's position in its
 * document (data_loader_next's; random tokens: one document per window), the targets then
 * never another document's first token. */
int train_source_next(train_source *s, int32_t *tok, int32_t *tgt, int32_t *pos, int B, int T,
                      base_err *err);
void train_source_close(train_source *s); /* a zeroed one too */
/* The run's data in one line (the header's and the report facts'): the loader's description
 * (or uniform random tokens), and whether documents are masked (block_causal). */
void train_source_describe(const train_source *s, const train_opts *o, char *buf, size_t n);

/* The report page (report.c): one self-contained HTML file (inline CSS and SVG; no script,
 * nothing fetched) with a run's facts and charts of its metrics.jsonl figures (loss and
 * validation loss, lr, grad norm, the window's tokens/s and MFU, memory, MoE expert-load
 * imbalance), a dashed mark where a line says "resumed_from". Rank 0 rewrites it atomically
 * at every logged step (metrics.c); `titan report` draws it afterwards, or overlays runs. */
typedef struct train_report_run train_report_run; /* one run: its records and facts */
typedef struct {
    int log_steps;      /* steps on a log10 axis */
    int refresh_s;      /* > 0: the page asks the browser to reload it after this many seconds */
    const char *failed; /* NULL, or the error the run ended with (shown above the charts) */
} train_report_opts;
int train_report_run_new(train_report_run **out, const char *name, base_err *err);
void train_report_run_free(train_report_run *r);  /* NULL ok */
void train_report_run_clear(train_report_run *r); /* forgets the records */
/* One metrics.jsonl line (len bytes, no newline): an object with an integer "step" above the
 * last one's; the figures it has are numbers. where ("FILE:LINE") names it in errors. */
int train_report_add_line(train_report_run *r, const char *line, size_t len, const char *where,
                          base_err *err);
/* Every line of a metrics.jsonl: a bad one fails naming FILE:LINE; an unfinished last line
 * (no newline: being written, or torn by a kill) is left out with a warning. */
int train_report_read_jsonl(train_report_run *r, const char *path, base_err *err);
/* This run's facts (model and parameters, data, tokens per step, parallelism, precision,
 * kernels, machine and MFU peak, start time, titan version) into r (NULL: no-op), also
 * written atomically beside the page as PAGE-without-extension.facts.json. */
int train_report_facts(train_report_run *r, const char *page, const train_opts *o, const model *m,
                       const train_source *src, const dist_mesh *mesh, double peak_flops,
                       base_err *err);
/* The facts file beside page, when there is one ([[label, text], ...]; errors name it). */
int train_report_read_facts(train_report_run *r, const char *page, base_err *err);
/* The page for n_runs runs (one: facts, headline figures and charts; several: a table of the
 * runs and every chart overlaid, a colour per run), atomically at path. po may be NULL. */
int train_report_write(train_report_run *const *runs, int n_runs, const char *path,
                       const train_report_opts *po, base_err *err);

/* What a training step works on and a checkpoint saves: the run's options and mesh, the
 * model (computing on FSDP's full buffers), FSDP, the TP pieces, the optimizer over this
 * rank's shard vector and the token source; tok, tgt [grad_accum][batch * seq_len]. */
typedef struct {
    const train_opts *o;
    const dist_mesh *mesh;
    model *m;
    dist_fsdp *f;
    dist_tp_pieces *tpp;
    optim_adamw *opt;
    train_source *src;
    optim_lr_cfg lr; /* o->lr with total_steps resolved */
    int64_t lr_base; /* the schedule's position is step - 1 + lr_base */
    int32_t *tok, *tgt;
    int32_t *pos; /* block_causal: each token's position in its document (NULL: causal) */
    /* bf16, unsharded: the weights' bf16 copy AdamW refreshes (c16.n 0: none); w16_current:
     * the last step's AdamW did, so the next step remakes no unit's copy */
    optim_bf16_copy c16;
    int w16_current;
    optim_span *spans; /* [n_spans] the shard vector's parameter groups (train_optim_spans) */
    int n_spans;
    int val_bad_said; /* a validation ran: the set's malformed lines were logged (once) */
    /* the step whose TensorBoard scalars could not be written (the run stops after saving it:
     * its checkpoint records it, and a resume says so); 0: none */
    int tb_lost;
} train_job;

/* Each named parameter's group (group_of[n_names]): the first of g[n] whose pattern finds its
 * name (Python's re.search); counts[n] the parameters each took. A pattern that finds none,
 * or a parameter none finds, is an error (as in torchtitan). */
int train_param_groups_assign(const train_param_group *g, int n, const char *const *names,
                              int n_names, int *group_of, int64_t *counts, base_err *err);
/* The same over the parameters of o->model, before anything is built (train_preflight). */
int train_param_groups_check(const train_opts *o, base_err *err);
/* A group's hyperparameters as the start-up log and titan plan say them ("lr 0.001, betas
 * (0.9, 0.95), eps 1e-08, weight_decay 0.1") into buf[n]. */
void train_param_group_hyper(const train_param_group *g, char *buf, size_t n);
/* ... and with each group's parameters, elements and hyperparameters printed to f (titan plan). */
int train_param_groups_print(const train_opts *o, FILE *f, base_err *err);
/* A DistMuon group under the mesh's FSDP sharding or tensor parallelism (dp_shard, tp > 1):
 * refused by name (titan's DistMuon needs whole matrices on each rank), before the model is
 * built (train_preflight, titan plan). */
int train_param_groups_mesh_check(const train_opts *o, int dp_shard, int tp, base_err *err);
/* The spans of this rank's shard vector [0, dist_fsdp_shard_len) and the hyperparameters each
 * steps with (o->param_groups', or o->adamw for all), in order, covering it (malloc'ed);
 * counts: NULL, or [o->n_param_groups] the parameters of each group. */
int train_optim_spans(const train_opts *o, const model *m, const dist_fsdp *f, optim_span **out,
                      int *n_out, int64_t *counts, base_err *err);

/* One training step (step.c): grad_accum microbatches of this rank's tokens, forward and
 * backward with the loss normalised by the valid targets of the whole step on all ranks;
 * the MoE token counts afresh; the global gradient norm (HSDP replicas, TP's replicated
 * parameters once, every shard once), clipping, the MoE expert bias from all ranks' counts,
 * AdamW at the scheduled learning rate. A non-finite loss or gradient is an error naming
 * the microbatch and the first non-finite parameter. */
typedef struct {
    double loss;     /* token mean over all ranks, plus the MoE aux loss when on */
    double max_loss; /* the max over data-parallel ranks of their own mean (+ aux) */
    double norm, lr, aux;
    double lr_factor;                  /* the schedule's: each group's lr x it (lr: the first's) */
    int64_t ntok;                      /* this rank's tokens */
    double step_s, data_s, comm_s;     /* this rank's seconds: the step, loading, collectives */
    double gather_bytes, reduce_bytes; /* this rank's FSDP traffic in the step (dist_fsdp_stats) */
} train_step_result;
/* 0, or -1 with err; TRAIN_STEP_DIVERGED (with err) when every rank stops at the same
 * microbatch on a non-finite loss or gradient (the ranks agree on it), so the ranks can still
 * commit the save in flight together. */
#define TRAIN_STEP_DIVERGED (-2)
int train_step(train_job *j, int step, train_step_result *r, base_err *err);
/* The first parameter of x, one of this rank's shard vectors (weights, gradients, AdamW m or
 * v: all laid out as the weights' shard; bf16: x holds bf16 bits, AdamW's moments in bf16), holding
 * a NaN or an infinity (nonneg: or a negative value): by parameter when the shard is the whole
 * buffer, else by FSDP unit; NULL when none does. */
const char *train_first_bad(const model *m, const dist_fsdp *f, const void *x, int bf16,
                            int nonneg);
/* Mean loss over the validation set (or its first o->val.steps batches) with the weights of
 * the training model: on it when the shapes match (ev NULL), else on ev, a forward-only model
 * of the validation shape. Fills *loss and *ntok. A stop signal (the ranks agree before each
 * batch: they run the same batches) abandons it: *loss NaN (nothing logged), said once. */
int train_validate(train_job *j, model *ev, double *loss, int64_t *ntok, base_err *err);

/* The resumable state (state.c): the trainer's part of a checkpoint (metadata.json
 * "train": steps, optimizer step, data position, model arguments, tokenizer, MoE bias),
 * resuming from it, and the initial load. */
/* Loads what the plan says: a resume of plan->resume_step (weights, moments, data position,
 * counters per plan->load) or the initial weights from plan->initial (the whole model, then
 * this rank's slices), into FSDP's shards. *start: the step training continues after (0 when
 * fresh); *tokens_seen when restored. Collective. */
int train_state_load(train_job *j, const train_start *plan, int64_t *start, int64_t *tokens_seen,
                     base_err *err);
/* Saves step through the saver: this rank's shard of the weights (and AdamW moments unless
 * model_only; a model-only save stores the weights in o->export_dtype) with the train object, every
 * data-parallel rank's loader position gathered into it. Collective. */
int train_state_save(const train_job *j, train_saver *s, int64_t step, int model_only,
                     int64_t tokens_seen, base_err *err);
/* The profiler (prof.c), torchtitan's schedule over o->prof: each cycle of freq steps ends
 * with `active` recorded steps, after `warmup` steps run with the op wrappers attached but
 * nothing recorded. From the first step of a window the model's op tables are swapped for
 * ops_prof's wrappers (and put back after its last step); after the last recorded step (a
 * multiple of freq) it writes {dir}/iteration_{step}/rank{r}_trace.json atomically and prints
 * the time per op kind. NULL (profiling off): every call is a no-op. */
typedef struct train_prof train_prof;
/* Collective (every rank calls it): the traces' time origin is agreed here. */
int train_prof_open(train_prof **out, const train_opts *o, model *m, const dist_mesh *mesh,
                    base_err *err);
/* Around one loop iteration of step: begin before train_step, done after it (the step's own
 * event), end after the iteration's validation and checkpoint (a window's last step writes
 * its trace there). */
int train_prof_step_begin(train_prof *p, int step, base_err *err);
void train_prof_step_done(train_prof *p);
int train_prof_step_end(train_prof *p, int step, base_err *err);
/* After the run's last step (planned, a stop signal, or failed: a step that failed is closed
 * as a step event where it stopped): a window it ended inside is written as iteration_{last
 * step} with the steps recorded so far (torchtitan's profiler writes its trace on exit, an
 * exception's too). */
int train_prof_finish(train_prof *p, int failed, base_err *err);
/* Puts the model's tables back and drops an unwritten window. */
void train_prof_close(train_prof *p);
/* A phase of the trainer ("optimizer step") from t0 (base_now) to now, on the compute track,
 * while a window records. */
void train_prof_phase(const char *name, double t0);

/* The group holding one model's slices (TP's or EP's: they never combine), or NULL when the
 * model is whole on every rank. */
dist_comm *train_slice_group(const dist_mesh *mesh);

#endif
