#include "train/train.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/checkpoint.h"
#include "train/internal.h"

/* Samples o->sample_tokens tokens at temperature 0.8 with the cached generator, starting from
 * the tokenizer's eos (a document boundary), a newline (byte data) or token 0. The context is
 * the training seq_len: past it the generator slides (keeps the last half), as training windows
 * start at arbitrary offsets. Prints bytes (byte data), decoded text (tokenizer) or ids. */
static int sample(const model *m, const train_opts *o, const train_source *src, base_err *err) {
    const int32_t eos = src->tok ? data_tok_eos_id(src->tok) : -1;
    const int32_t start = src->tok ? (eos >= 0 ? eos : 0) : src->loader ? '\n' : 0;
    train_text_stream ts = {src->tok, !src->tok && !src->loader, stdout, {0}, 0};
    /* a stop signal ends the sample at the next token (it could run for hours) */
    train_gen_opts go = {{0.8, 0, 1.0, o->seed}, o->sample_tokens, NULL, 0, &ts,
                         train_stop_pending};
    train_gen_result r;
    model_infer *s = NULL;
    if (model_infer_new(&s, m, o->seq_len, err)) return -1;
    printf("sample (temperature %.1f):\n", go.sampler.temperature);
    int rc = train_generate(s, &start, 1, &go, &r, err);
    train_stream_finish(&ts);
    printf("\n");
    if (!rc)
        base_log(BASE_LOG_INFO, "sampled %d tokens at %.1f tokens/s%s", r.n_new,
                 r.decode_s > 0 ? r.n_new / r.decode_s : 0.0,
                 r.cancelled ? " (cut short by the stop signal)" : "");
    free(r.tokens);
    model_infer_free(s);
    return rc;
}

/* A Hugging Face folder of the current weights (export_dtype, tokenizer files from assets) in
 * dir, or (step >= 0: checkpoint.last_save_in_hf) in checkpoint folder dir as step-N: written
 * as step-N.tmp and put in place as a checkpoint is (ckpt_step_place), so an older step-N (an
 * earlier run's, before a load_step rewind) is replaced whole, never mixed with it, and a kill
 * mid-export leaves the old step-N. */
static int export_hf(const train_opts *o, const model *m, const data_tok *tok, const char *dir,
                     int step, base_err *err) {
    int32_t ids[3];
    train_token_ids(tok, ids);
    const ckpt_export_opts eo = {
        .dtype = o->export_dtype, .assets_dir = o->assets_dir, .token_ids = tok ? ids : NULL};
    char tmp[4200], fin[4200];
    snprintf(tmp, sizeof tmp, "%s/step-%d.tmp", dir, step);
    snprintf(fin, sizeof fin, "%s/step-%d", dir, step);
    if (step < 0 ? ckpt_export_hf(m, dir, &eo, err)
                 : ckpt_step_begin(dir, step, 0, err) || ckpt_export_hf(m, tmp, &eo, err) ||
                       ckpt_step_place(dir, step, err))
        return -1;
    base_log(BASE_LOG_INFO, "exported Hugging Face model to %s (%s%s)", step < 0 ? dir : fin,
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
static void print_header(const train_opts *o, const model *m, const train_source *src,
                         const dist_mesh *mesh, const train_peak peak[2], double fpt) {
    model_counts cnt;
    model_count_params(&o->model, &cnt);
    const model_args *a = &o->model;
    printf("titan train: model %s: %.2fM parameters (%d layers, dim %d, %d/%d heads x %d, ffn "
           "%d, vocab %d, %s embeddings), %.3f GFLOP/token\n",
           a->flavor, cnt.total / 1e6, a->n_layers, a->dim, a->n_heads, a->n_kv_heads, a->head_dim,
           a->ffn_dim, a->vocab_size, a->tie_embeddings ? "tied" : "untied", fpt / 1e9);
    char desc[1200];
    train_source_describe(src, o, desc, sizeof desc);
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
    char acn[64], quota[160] = "";
    static const char *const reshard[] = {"default", "always", "never"};
    const double q = base_cpu_quota(); /* main took its CPUs when no count was given */
    if (q > 0 && omp_get_max_threads() == (int)ceil(q))
        snprintf(quota, sizeof quota,
                 " (this process's cgroup gives it %.2f CPUs: its CPU quota; --threads or "
                 "OMP_NUM_THREADS choose another count)",
                 q);
    char epd[32] = ""; /* expert parallelism is carved from dp_shard */
    if (mesh->ep > 1) snprintf(epd, sizeof epd, " x ep %d", mesh->ep);
    if (mesh->world > 1)
        printf("  parallelism: %d processes = dp_replicate %d x dp_shard %d x tp %d%s, %d threads "
               "each%s; FSDP reshard_after_forward %s; activation checkpointing %s%s\n",
               mesh->world, mesh->dp_replicate, mesh->dp_shard, mesh->tp, epd,
               omp_get_max_threads(), quota, reshard[o->reshard], ac_name(o, acn, sizeof acn),
               mesh->tp > 1 && o->loss_parallel_off ? "; loss parallel off (whole-vocabulary CE)"
                                                    : "");
    else
        printf("  parallelism: 1 process, %d threads%s; activation checkpointing %s\n",
               omp_get_max_threads(), quota, ac_name(o, acn, sizeof acn));
    /* titan plan's estimate, the one the start checks against the machine's memory: with the
     * bf16 weight copy, operand scratch, units in flight, buffers and the runtime, which the
     * four terms alone left out (a bf16 MoE run estimated at 10.6 GiB peaked at 12.0; plan
     * says 11.8) */
    train_plan pl;
    base_err perr;
    const train_plan_in pin = train_plan_in_of(o, mesh->world);
    if (!train_plan_compute(&pin, &pl, &perr)) {
        const double other =
            pl.total_conf - pl.params - pl.grads - pl.adam - pl.act_conf - pl.bf16_copy;
        printf("  memory estimate%s: %.2f GiB = weights %.2f + gradients %.2f + AdamW %.2f + "
               "activations %.2f",
               mesh->world > 1 ? " per rank (titan plan for details)" : "", pl.total_conf / gib,
               pl.params / gib, pl.grads / gib, pl.adam / gib, pl.act_conf / gib);
        if (pl.bf16_copy > 0) printf(" + bf16 weight copy %.2f", pl.bf16_copy / gib);
        printf(" + other %.2f (of %.1f GiB RAM)\n", (other > 0 ? other : 0) / gib,
               (double)base_total_ram() / gib);
    } else { /* a layout plan does not model: the four terms this run allocated */
        printf("  memory estimate%s: %.2f GiB = weights %.2f + gradients %.2f + AdamW %.2f + "
               "activations %.2f, and more (titan plan: %s) (of %.1f GiB RAM)\n",
               mesh->world > 1 ? " per rank" : "", (4 * pb + act) / gib, pb / gib, pb / gib,
               2 * pb / gib, act / gib, perr.msg, (double)base_total_ram() / gib);
    }
    printf("  kernels (layers.0):");
    const ops_table *t = &m->ops[1 < m->n_units ? 1 : 0];
    for (int k = 0; k < OPS_COUNT; k++)
        if (t->impl[k]) printf(" %s=%s", ops_kind_name((ops_kind)k), t->impl[k]->name);
    printf("; CPU kernels ISA %s", ops_cpu_isa());
    char choices[2048]; /* every unit's, not only layers.0's: which kernel ran where */
    if (model_kernel_choices(m, choices, sizeof choices))
        printf("\n  kernel overrides: %s", choices);
    printf("\n  precision: %s", o->prec_why);
    if (o->prec == OPS_PREC_BF16)
        printf("; GEMM operands (attention's products included) bf16 (engine %s, AMX layouts "
               "%s, titan's AMX GEMM: %s, lm_head + CE: %s, attention: %s%s%s), fp32 master "
               "weights, gradients, AdamW, norms, softmax and loss",
               ops_bf16_engine(), ops_bf16_layouts(), ops_bf16_amx_gemm(), ops_bf16_lmhead_ce(),
               ops_bf16_attention(), m->args.n_experts > 0 ? ", experts: " : "",
               m->args.n_experts > 0 ? ops_bf16_grouped_mm() : "");
    if (o->prec == OPS_PREC_BF16 && (mesh->tp > 1 || mesh->ep > 1))
        printf("; %s exchanges of values rounded to bf16 on arrival anyway moved in %s",
               mesh->tp > 1 ? "TP" : "EP",
               o->transport_f32 ? "fp32 (TITAN_BF16_TRANSPORT)" : "bf16");
    printf("\n  GEMM peak: fp32 %.1f GFLOP/s (%s)", peak[0].flops / 1e9, peak[0].how);
    if (o->prec == OPS_PREC_BF16)
        printf("; bf16 %.1f GFLOP/s (%s)", peak[1].flops / 1e9, peak[1].how);
    printf("; MFU against the %s peak\n", o->prec == OPS_PREC_BF16 ? "bf16" : "fp32");
    fflush(stdout);
}

/* Tokens one rank trains on per step. */
static double ntok_per_step(const train_opts *o) {
    return (double)o->batch * o->seq_len * o->grad_accum;
}

/* Everything one run holds: opened by run_open, set up by run_setup, freed by run_close. */
typedef struct {
    const train_opts *o;
    dist_mesh mesh;
    int lead; /* rank 0: writes the console, metrics and the HF export */
    train_lock lock;
    train_source src;
    model m, ev, full; /* the training model; validation's shape; tp > 1: the whole model */
    int have_ev;
    const model *whole; /* what exports and sampling read: m, or full when sliced */
    dist_fsdp *f;
    dist_tp_pieces tpp;
    optim_adamw opt;
    train_job job;
    train_start plan;
    train_saver *saver;
    train_metrics *mx;
    train_prof *prof; /* [profiling] (NULL: off) */
    double peak, fpt; /* the GEMM peak (FLOP/s) and model FLOPs per token for MFU */
    int64_t start, tokens_seen;
    int last;                   /* the last step this run trains */
    double t_total, comm_total; /* seconds over the timed steps (all but step 1) */
    int64_t tokens_total;       /* this rank's tokens over the timed steps */
    base_err late; /* the run's last step's metrics failure: said once it has finished */
} run;

/* Why a run saves nothing (r->saver NULL), for its messages. */
static const char *no_saves_why(const train_opts *o) {
    return o->ckpt.enable ? "checkpoint.load_only is set"
                          : "checkpointing is disabled "
                            "(checkpoint.enable)";
}

/* The mesh, this rank's output, preflight checks, the output locks and the token source.
 * On failure nothing is left to free. */
static int run_open(run *r, base_err *err) {
    const train_opts *o = r->o;
    /* the watchdog first: it covers start-up's collectives too */
    if (dist_watchdog_start(o->comm_init_timeout, "comm.init_timeout_seconds", err)) return -1;
    if (dist_mesh_init(&r->mesh, &o->par, err)) {
        dist_watchdog_stop();
        return -1;
    }
    const dist_mesh *mesh = &r->mesh;
    r->lead = mesh->rank == 0;
    if (mesh->world > 1) {
        base_log_set_rank(mesh->rank);
        if (!r->lead) { /* other ranks log to stderr only, with their rank */
            base_log_all_to_stderr(1);
            if (!freopen("/dev/null", "w", stdout)) base_log(BASE_LOG_WARN, "stdout stays open");
        }
    }
    if (train_preflight(o, mesh, err) ||
        train_lock_outputs(&r->lock, o, mesh->world_comm, mesh->rank, err) ||
        train_source_open(&r->src, o, mesh, err)) {
        train_unlock_outputs(&r->lock);
        dist_mesh_free(&r->mesh);
        dist_watchdog_stop();
        return -1;
    }
    return 0;
}

/* bf16 without sharding (this rank's shard vector is the model's whole w): AdamW refreshes the
 * weights' bf16 copy as it writes them (optim_bf16_copy), over the parameters the copy holds,
 * neighbours merged. Sharded: each unit's copy is made after its gather, as before. */
static int bf16_copy_ranges(train_job *j, base_err *err) {
    const model *m = j->m;
    if (!m->w16 || m->w16_transient || dist_fsdp_shard_params(j->f) != m->w ||
        dist_fsdp_shard_len(j->f) != m->n_floats)
        return 0;
    optim_range *r = malloc(sizeof *r * (size_t)(m->n_params ? m->n_params : 1));
    if (!r) return base_fail(err, "out of memory");
    int k = 0; /* m->params is in offset order (model.h): a neighbour extends the last range */
    for (int i = 0; i < m->n_params; i++) {
        const model_param *p = &m->params[i];
        if (!model_param_in_bf16_copy(m, p) || !p->numel) continue;
        if (k && r[k - 1].hi == p->offset)
            r[k - 1].hi += p->numel;
        else
            r[k++] = (optim_range){p->offset, p->offset + p->numel};
    }
    j->c16 = (optim_bf16_copy){m->w16, r, k};
    return 0;
}

/* The optimizer's parameter groups over this rank's shard (train_optim_spans), said once as
 * torchtitan's OptimizersContainer logs them. */
static int optim_groups(run *r, base_err *err) {
    const train_opts *o = r->o;
    int64_t counts[TRAIN_MAX_PARAM_GROUPS];
    if (train_optim_spans(o, r->job.m, r->f, &r->job.spans, &r->job.n_spans, counts, err) ||
        optim_muon_reserve(&r->opt, r->job.spans, r->job.n_spans, err))
        return -1;
    for (int k = 0; k < o->n_param_groups && r->lead; k++) {
        const train_param_group *g = &o->param_groups[k];
        char hyper[320];
        train_param_group_hyper(g, hyper, sizeof hyper);
        base_log(BASE_LOG_INFO, "optimizer: group %d, %s: %lld parameters [%s] %s", k,
                 g->optimizer_name, (long long)counts[k], g->pattern, hyper);
    }
    return 0;
}

/* The model under FSDP (and TP / EP), its weights (initialised or loaded), the optimizer,
 * the header, the validation model and the saver. */
static int run_setup(run *r, base_err *err) {
    const train_opts *o = r->o;
    const dist_mesh *mesh = &r->mesh;
    model *m = &r->m;
    const model_tp tpg = {.size = mesh->tp,
                          .rank = mesh->tp_rank,
                          .allgather = dist_tp_allgather,
                          .reduce_scatter = dist_tp_reduce_scatter,
                          .allreduce = dist_tp_allreduce,
                          .ctx = mesh->tp_comm};
    const model_ep epg = {.size = mesh->ep,
                          .rank = mesh->ep_rank,
                          .alltoall = dist_ep_alltoall,
                          .alltoallv = dist_ep_alltoallv,
                          .ctx = mesh->ep_comm};
    model_build_opts bo = {.batch = o->batch,
                           .seq_len = o->seq_len,
                           .ac = o->ac,
                           .with_grads = 1,
                           .overrides = o->kernel_overrides,
                           .n_overrides = o->n_kernel_overrides,
                           .ce_chunk = o->ce_chunk,
                           .balance = o->moe_balance,
                           .bias_rate = o->moe_bias_rate,
                           .tp = &tpg,
                           .ep = &epg,
                           .ac_every = o->ac_every,
                           .moe_force_balance = o->moe_force_balance,
                           .loss_parallel_off = o->loss_parallel_off,
                           .prec = o->prec,
                           .exchange_f32 = o->transport_f32,
                           .acts_in_grads = o->acts_in_grads, /* one rank (translate) */
                           .docs = o->block_causal};
    if (train_stop_install(o->preemption_signal, err)) return -1;
    /* dp_shard > 1: FSDP owns the parameter and gradient buffers */
    if ((mesh->dp_shard > 1 ? model_build_external(m, &o->model, &bo, err)
                            : model_build(m, &o->model, &bo, err)) ||
        train_setup_fsdp(m, mesh, o, &r->f, err) ||
        train_tp_pieces(&r->tpp, m, r->f, mesh->tp_rank, err))
        return -1;
    /* the sample after training runs the same kernels at batch 1: refused now, not then */
    base_err why;
    if (o->sample_tokens > 0 && model_infer_check(m, o->seq_len, &why))
        return base_fail(err,
                         "job.sample_tokens = %d: %s; set job.sample_tokens = 0 to train "
                         "with these kernels without sampling",
                         o->sample_tokens, why.msg);
    /* before the init: a load that overwrites every weight skips it */
    if (train_start_plan(o, &r->plan, err)) return -1;
    if (!r->plan.skip_init) { /* unit by unit: with FSDP only one unit is ever whole in memory */
        const double t0 = train_phase_begin("initialising the weights");
        for (int u = 0; u < m->n_units; u++) {
            model_init_unit(m, u, o->seed, &o->init);
            dist_fsdp_store_unit(r->f, u);
        }
        train_phase_end("initialising the weights", t0);
    }
    const size_t ns = dist_fsdp_shard_len(r->f);
    if (optim_adamw_init(&r->opt, ns, o->adam_bf16, err)) return -1;
    /* MoE aux loss: the step's is the mean over its microbatches and data-parallel ranks */
    if (m->balance == MODEL_BALANCE_AUX_LOSS)
        m->aux_scale = (float)(o->model.router_aux_loss_coef / (o->grad_accum * mesh->dp_size));
    const size_t NT = (size_t)o->batch * o->seq_len;
    train_job *j = &r->job;
    *j = (train_job){.o = o,
                     .mesh = &r->mesh,
                     .m = m,
                     .f = r->f,
                     .tpp = &r->tpp,
                     .opt = &r->opt,
                     .src = &r->src,
                     .lr = o->lr,
                     .lr_base = r->plan.lr_base,
                     .tok = base_alloc(NT * o->grad_accum * sizeof(int32_t)),
                     .tgt = base_alloc(NT * o->grad_accum * sizeof(int32_t)),
                     .pos =
                         o->block_causal ? base_alloc(NT * o->grad_accum * sizeof(int32_t)) : NULL};
    if (j->lr.total_steps <= 0) j->lr.total_steps = o->steps;
    if (!j->tok || !j->tgt || (o->block_causal && !j->pos)) return base_fail(err, "out of memory");
    if (bf16_copy_ranges(j, err) || optim_groups(r, err)) return -1;
    /* pk[0] the fp32 GEMM peak, pk[1] the bf16 one (bf16 runs): MFU divides by the peak of the
     * run's precision, as torchtitan uses the GPU's bf16 peak; a configured peak is that one.
     * A seed checkpoint trains nothing: no measurement (1 FLOP/s stands in). */
    train_peak pk[2];
    memset(pk, 0, sizeof pk);
    const int bf16 = o->prec == OPS_PREC_BF16;
    const int seed_only = o->ckpt.create_seed && !(o->peak_flops > 0);
    for (int p = 0; p <= bf16; p++) {
        const int for_mfu = p == bf16;
        const double fixed = seed_only ? 1 : for_mfu ? o->peak_flops : 0;
        char what[64];
        snprintf(what, sizeof what, "the %s GEMM peak%s", p ? "bf16" : "fp32",
                 for_mfu ? " for MFU" : "");
        const double t_peak = fixed > 0 ? 0 : train_phase_begin(what);
        if (train_peak_resolve(fixed, omp_get_max_threads(), p ? OPS_PREC_BF16 : OPS_PREC_F32,
                               mesh->world_comm, NULL, &pk[p], err))
            return -1;
        if (!(fixed > 0)) train_phase_end(what, t_peak);
    }
    r->peak = pk[bf16].flops;
    r->fpt = model_flops_per_token(&o->model, o->seq_len);
    print_header(o, m, &r->src, mesh, pk, r->fpt);
    if (o->val.path && (o->val.batch != o->batch || o->val.seq_len != o->seq_len)) {
        model_build_opts vo = bo; /* the training model's, at the validation shape */
        vo.batch = o->val.batch;
        vo.seq_len = o->val.seq_len;
        vo.ac = MODEL_AC_NONE;
        vo.with_grads = 0;
        r->have_ev = 1;
        if (model_build(&r->ev, &o->model, &vo, err)) return -1;
    }
    if (train_state_load(j, &r->plan, &r->start, &r->tokens_seen, err)) return -1;
    if (o->ckpt.enable && !o->ckpt.load_only) {
        /* TP: a rank's slices are pieces of the full layout (checkpoints reshard to any tp) */
        train_saver_layout lay = {
            mesh->world_comm,
            mesh->rank,
            mesh->replicate_rank == 0 ? mesh->shard_rank * mesh->tp + mesh->tp_rank : -1,
            mesh->dp_shard * mesh->tp,
            r->tpp.save,
            r->tpp.n_save,
            m->full_floats};
        if (train_saver_init(&r->saver, r->plan.ckdir, ns, r->opt.bf16, &lay, o->ckpt.async,
                             o->ckpt.keep_latest_k, err))
            return -1;
    }
    return 0;
}

/* The whole weights on every rank (FSDP gathered, TP / EP slices assembled) in r->whole. */
static int run_gather_whole(run *r, base_err *err) {
    dist_fsdp_gather_all(r->f);
    dist_comm *slices = train_slice_group(&r->mesh);
    if (slices && r->whole == &r->m) {
        if (train_full_model(&r->full, &r->m, r->o, slices, err)) return -1;
        r->whole = &r->full;
    }
    return 0;
}

/* After step: the HF folder at the last step (last_save_in_hf), else a checkpoint on the
 * interval, the run's last step, a stop signal, or step 1
 * (checkpoint.enable_first_step_checkpoint). */
static int run_checkpoint(run *r, int step, int stop_sig, base_err *err) {
    const train_opts *o = r->o;
    if (!r->saver) return 0;
    if (step == o->steps && o->ckpt.last_save_in_hf) { /* HF folder, step-N/ */
        if (train_saver_finish(r->saver, err) || run_gather_whole(r, err)) return -1;
        /* rank 0 writes them */
        return r->lead ? export_hf(o, r->whole, r->src.tok, r->plan.ckdir, step, err) : 0;
    }
    if (step % o->ckpt.interval == 0 || step == r->last || stop_sig ||
        (step == 1 && o->ckpt.first_step)) {
        const int model_only = step == o->steps && o->ckpt.last_save_model_only;
        const double t0 = base_now();
        const int rc = train_state_save(&r->job, r->saver, step, model_only, r->tokens_seen, err);
        train_prof_phase("checkpoint save", t0);
        return rc;
    }
    return 0;
}

/* Step `step` (before the run's last) trained, but its metrics could not be written (err
 * says why, on every rank): it is saved as a stop signal's step is, and the run ends with err
 * and where it stands (a stop, not a loss of the steps since the last checkpoint). A stop
 * signal of the same step (sig) is said too. Returns -1. */
static int run_stop_failed(run *r, int step, int sig, base_err *err) {
    const base_err why = *err;
    char also[96] = "";
    if (sig) snprintf(also, sizeof also, "; %s came in the same step", train_stop_signal_name(sig));
    if (!r->saver)
        return base_fail(err, "%s; stopped after step %d (%s, so nothing was saved)%s", why.msg,
                         step, no_saves_why(r->o), also);
    /* a TensorBoard write that failed on any rank: the checkpoint records its step */
    double lost = train_metrics_tb_failed(r->mx);
    dist_allreduce_max_f64(r->mesh.world_comm, &lost, 1);
    r->job.tb_lost = (int)lost;
    base_err e;
    if (train_saver_poll(r->saver, &e) || run_checkpoint(r, step, 1, &e) ||
        train_saver_finish(r->saver, &e))
        return base_fail(err, "%s; stopped after step %d, which could not be saved either: %s%s",
                         why.msg, step, e.msg, also);
    return base_fail(err,
                     "%s; stopped after step %d: the last complete checkpoint is %s/step-%d (the "
                     "same command resumes from it once the file can be written; that step's "
                     "metrics are not in the file)%s",
                     why.msg, step, r->plan.ckdir, step, also);
}

/* Steps start + 1 .. last. Returns 0, -1 with err, or 128 + N after a stop on signal N. */
static int run_steps(run *r, base_err *err) {
    const train_opts *o = r->o;
    for (int step = (int)r->start + 1; step <= r->last; step++) {
        train_step_result s;
        if (train_prof_step_begin(r->prof, step, err)) return -1;
        const int st = train_step(&r->job, step, &s, err);
        if (st == TRAIN_STEP_DIVERGED) { /* every rank is here: the save in flight commits */
            base_err e;
            const int lost = train_saver_finish(r->saver, &e);
            if (lost) base_log(BASE_LOG_ERROR, "%s", e.msg);
            /* what the stop leaves: said as it is (checkpointing may be off) */
            const base_err was = *err;
            return base_fail(err, "%s (%s%s)", was.msg,
                             !r->saver ? no_saves_why(o)
                             : lost    ? "the save in flight failed: see above"
                                       : "the checkpoints saved before this step are intact",
                             !r->saver ? ": nothing was saved" : "");
        }
        if (st) return -1;
        train_prof_step_done(r->prof);
        r->tokens_seen += s.ntok * r->mesh.dp_size;
        /* a run's first step includes first-touch page faults and the first bf16 copy (a
         * resumed run's too): counted only when it is the run's only step */
        if (step > r->start + 1 || r->last == r->start + 1) {
            r->t_total += s.step_s;
            r->comm_total += s.comm_s;
            r->tokens_total += s.ntok;
        }
        double val_loss = NAN, val_s = 0;
        int64_t val_tok = 0;
        /* torchtitan's steps (step 1 and every freq-th), and the last one */
        if (o->val.path && (step == 1 || step % o->val.freq == 0 || step == r->last)) {
            const double t_val = base_now();
            if (train_validate(&r->job, r->have_ev ? &r->ev : NULL, &val_loss, &val_tok, err))
                return -1;
            train_prof_phase("validation", t_val);
            val_s = base_now() - t_val;
        }
        int64_t windows[DATA_MIX_MAX];
        const int n_src = r->src.loader ? data_mix_sources(r->src.loader) : 0;
        if (n_src > 1) data_mix_rows(r->src.loader, windows);
        const train_step_metrics sm = {.step = step,
                                       .dp_size = r->mesh.dp_size,
                                       .loss = s.loss,
                                       .max_loss = s.max_loss,
                                       .grad_norm = s.norm,
                                       .lr = s.lr,
                                       .lr_factor = s.lr_factor,
                                       .aux = s.aux,
                                       .ntokens = s.ntok,
                                       .tokens_seen = r->tokens_seen,
                                       .step_s = s.step_s,
                                       .data_s = s.data_s,
                                       .comm_s = s.comm_s,
                                       .val_loss = val_loss,
                                       .val_s = val_s,
                                       .val_tokens = val_tok,
                                       .gather_bytes = s.gather_bytes,
                                       .reduce_bytes = s.reduce_bytes,
                                       .src_windows = windows,
                                       .n_src = n_src > 1 ? n_src : 0};
        /* a stop signal: save this step and stop; it is the run's last logged step */
        const int stop_sig = train_stop_agree(r->mesh.world_comm);
        if (stop_sig) train_metrics_end_at(r->mx, step);
        /* a metrics file that cannot be written (disk full) on any rank stops every rank after
         * saving this step, as a stop signal does (the run had ended at once, losing the steps
         * since the last checkpoint) */
        if (dist_agree(r->mesh.world_comm, train_metrics_log_step(r->mx, &sm, &r->m, err),
                       "could not write its metrics", err)) {
            if (step < r->last) return run_stop_failed(r, step, stop_sig, err);
            r->late = *err; /* the last step: its save, export and sample go on, then the error */
        }
        if (train_saver_poll(r->saver, err)) return -1; /* commits a finished background save */
        if (run_checkpoint(r, step, stop_sig, err)) return -1;
        if (train_prof_step_end(r->prof, step, err)) return -1;
        /* at the last step the run has finished training: run_finish exports and stops */
        if (stop_sig && step < r->last)
            return train_stop_finish(r->saver, stop_sig, step, r->plan.ckdir, no_saves_why(o), err);
        if (step == (int)r->start + 1)
            dist_watchdog_set_timeout(o->comm_train_timeout, "comm.train_timeout_seconds");
    }
    return 0;
}

/* After the last step: the summary line, the HF export and the sample (rank 0). A stop signal
 * that came during the last step or after it: the export (the run's product, bounded) is still
 * written, the sample is skipped or cut short, and the run returns 128 + its number, saying
 * what was done. Returns 0, -1 with err, or 128 + N. */
static int run_finish(run *r, base_err *err) {
    const train_opts *o = r->o;
    const dist_mesh *mesh = &r->mesh;
    dist_watchdog_set_timeout(0, NULL); /* rank 0 alone exports and samples from here */
    if (train_saver_finish(r->saver, err)) return -1;
    const int sig = train_stop_agree(mesh->world_comm); /* every rank: the gather is collective */
    /* tokens_total: one data-parallel rank's; its tp ranks share them (tokens/s per rank) */
    const double tps = r->t_total > 0 ? r->tokens_total / r->t_total / mesh->tp : 0;
    const double mfu = 100.0 * r->fpt * tps / r->peak, rss = (double)base_peak_rss() / (1 << 30);
    if (mesh->world > 1) {
        const double n = ntok_per_step(o), t = (double)r->tokens_total;
        printf("summary: steps=%d tokens_per_s=%.2f tokens_per_s_per_rank=%.2f mfu=%.2f "
               "peak_rss_gib=%.3f comm_s_per_step=%.4f step_s=%.4f ranks=%d\n",
               r->last, tps * mesh->world, tps, mfu, rss, t ? r->comm_total * n / t : 0,
               t ? r->t_total * n / t : 0, mesh->world);
    } else {
        printf("summary: steps=%d tokens_per_s=%.2f mfu=%.2f peak_rss_gib=%.3f\n", r->last, tps,
               mfu, rss);
    }
    const int sampling = o->sample_tokens > 0 && !sig;
    if ((o->out_dir || sampling) && run_gather_whole(r, err)) return -1;
    if (o->out_dir && r->lead && export_hf(o, r->whole, r->src.tok, o->out_dir, -1, err)) {
        /* the same command would not redo it (the last step's checkpoint holds weights only,
         * and a new run refuses to start among it): say where the weights are */
        if (r->saver && !(r->last == o->steps && o->ckpt.last_save_in_hf)) {
            base_err e = *err;
            base_fail(err,
                      "%s; training finished: %s/step-%d holds its weights, and `titan convert "
                      "%s/step-%d %s` (with --dtype, --assets as wanted) writes the export",
                      e.msg, r->plan.ckdir, r->last, r->plan.ckdir, r->last, o->out_dir);
        }
        return -1;
    }
    if (sampling && r->lead && sample(r->whole, o, &r->src, err)) return -1;
    const int late = sig ? sig : train_stop_pending(); /* or one during the export or sample */
    if (!late) return 0;
    char ck[4300];
    snprintf(ck, sizeof ck, "%s, so nothing was saved", no_saves_why(o));
    if (r->saver) snprintf(ck, sizeof ck, "its checkpoint is %s/step-%d", r->plan.ckdir, r->last);
    base_log(BASE_LOG_INFO, "%s: training had finished (step %d, the run's last); %s%s%s",
             train_stop_signal_name(late), r->last, ck,
             o->out_dir && r->lead ? "; the Hugging Face export was written" : "",
             o->sample_tokens <= 0 || !r->lead ? ""
             : sig                             ? "; the sample was skipped"
                                               : "; the sample was cut short");
    return 128 + late;
}

/* The running job's metrics for base_fatal's hook (one run per process at a time). */
static train_metrics *g_fatal_mx;

static void on_fatal(const char *msg) { /* a kernel's error code: the page says why, final */
    train_metrics_failed(g_fatal_mx, msg);
}

/* Frees everything run_setup made; a background save still finishes. Returns rc, or -1 when
 * closing the metrics failed. */
static int run_close(run *r, int rc, base_err *err) {
    base_set_fatal_hook(NULL);
    g_fatal_mx = NULL;
    if (rc < 0) train_metrics_failed(r->mx, err->msg);
    if (train_metrics_close(r->mx, rc ? NULL : err) && rc <= 0) rc = -1;
    train_prof_close(r->prof);
    train_stop_uninstall();
    dist_watchdog_stop();
    free((void *)r->job.c16.r);
    free(r->job.spans);
    base_free(r->job.tok);
    base_free(r->job.tgt);
    base_free(r->job.pos);
    optim_adamw_free(&r->opt);
    if (rc != 0) { /* report the original error; a background save still finishes */
        base_err e2;
        if (train_saver_abandon(r->saver, &e2)) base_log(BASE_LOG_ERROR, "%s", e2.msg);
    }
    train_saver_free(r->saver);
    if (r->have_ev) model_free(&r->ev);
    /* gathers still in flight may be receiving into the model's bf16 copy (dist_fsdp_cfg.w16) */
    if (r->f) dist_fsdp_release_all(r->f);
    model_free(&r->m);
    model_free(&r->full);
    dist_tp_pieces_free(&r->tpp);
    dist_fsdp_free(r->f);
    train_source_close(&r->src);
    train_unlock_outputs(&r->lock);
    dist_mesh_free(&r->mesh);
    return rc;
}

int train_run(const train_opts *o, base_err *err) {
    if (o->steps <= 0 || o->grad_accum <= 0)
        return base_fail(err, "steps and grad_accum must be positive");
    run *r = calloc(1, sizeof *r);
    if (!r) return base_fail(err, "out of memory");
    r->o = o;
    r->whole = &r->m;
    r->last =
        o->stop_after_step > 0 && o->stop_after_step < o->steps ? o->stop_after_step : o->steps;
    if (run_open(r, err)) {
        free(r);
        return -1;
    }
    int rc = run_setup(r, err);
    if (!rc && o->ckpt.create_seed) { /* torchtitan: the initialised weights as step-0, exit */
        rc = train_state_save(&r->job, r->saver, 0, 1, 0, err) || train_saver_finish(r->saver, err)
                 ? -1
                 : 0;
        if (!rc)
            base_log(BASE_LOG_INFO, "checkpoint: seed checkpoint %s/step-0 written", r->plan.ckdir);
    } else if (!rc) {
        const int aux_on = r->m.balance == MODEL_BALANCE_AUX_LOSS;
        rc =
            train_metrics_open(&r->mx, o, &r->mesh, r->start, r->last, r->peak, r->fpt, aux_on, err)
                ? -1
                : 0;
        base_err e; /* the page is a view: without its facts file, training goes on */
        if (!rc && train_report_facts(train_metrics_report(r->mx), o->report_path, o, &r->m,
                                      &r->src, &r->mesh, r->peak, &e))
            base_log(BASE_LOG_WARN, "report page: %s", e.msg);
        if (!rc) { /* a kernel plugin's error aborts inside an op: the page is drawn first */
            g_fatal_mx = r->mx;
            base_set_fatal_hook(on_fatal);
        }
        if (!rc) rc = train_prof_open(&r->prof, o, &r->m, &r->mesh, err);
        if (!rc) rc = run_steps(r, err);
        base_err pe; /* a failed run's window too (its error kept): the trace that shows it */
        if (rc >= 0 && train_prof_finish(r->prof, 0, err))
            rc = -1;
        else if (rc < 0 && train_prof_finish(r->prof, 1, &pe))
            base_log(BASE_LOG_WARN, "profiling: %s", pe.msg);
        train_prof_close(r->prof); /* the tables as resolved for export and sampling */
        r->prof = NULL;
        if (!rc) rc = run_finish(r, err);
        if (rc >= 0 && r->late.msg[0]) { /* the last step's metrics line: lost, said last */
            char sig[96] = "";
            if (rc > 0) snprintf(sig, sizeof sig, "; %s came", train_stop_signal_name(rc - 128));
            rc = base_fail(err,
                           "%s; training had finished (step %d, the run's last: its checkpoint, "
                           "export and sample as configured were written); that step's metrics "
                           "are not in the file%s",
                           r->late.msg, r->last, sig);
        }
    }
    rc = run_close(r, rc, err);
    free(r);
    return rc;
}
