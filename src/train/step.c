/* train: one training step and validation (see internal.h). */
#include <math.h>
#include <string.h>

#include "train/internal.h"

/* Element i of a shard vector of floats, or of bf16 bits (widened: exact). */
static inline float shard_elem(const void *x, size_t i, int bf16) {
    if (!bf16) return ((const float *)x)[i];
    const uint32_t u = (uint32_t)((const uint16_t *)x)[i] << 16;
    float v;
    memcpy(&v, &u, sizeof v);
    return v;
}

const char *train_first_bad(const model *m, const dist_fsdp *f, const void *x, int bf16,
                            int nonneg) {
#define BAD(v) (!isfinite(v) || (nonneg && (v) < 0))
    /* one parallel pass decides (loads check every weight and moment); the search that names
     * the parameter runs only when something is bad */
    const size_t n = dist_fsdp_shard_len(f);
    int any = 0;
#pragma omp parallel for reduction(| : any) schedule(static)
    for (size_t i = 0; i < n; i++) any |= BAD(shard_elem(x, i, bf16));
    if (!any) return NULL;
    if (dist_fsdp_shard_params(f) != m->w) { /* sharded: by FSDP unit */
        for (size_t i = 0; i < dist_fsdp_shard_len(f); i++)
            if (BAD(shard_elem(x, i, bf16))) return m->units[dist_fsdp_unit_of(f, i)].name;
        return NULL;
    }
    for (int i = 0; i < m->n_params; i++)
        for (size_t k = 0; k < m->params[i].numel; k++)
            if (BAD(shard_elem(x, m->params[i].offset + k, bf16))) return m->params[i].name;
    return NULL;
#undef BAD
}

int train_validate(train_job *j, model *ev, double *loss, int64_t *ntok, base_err *err) {
    const train_opts *o = j->o;
    const train_source *src = j->src;
    model *train = j->m;
    dist_fsdp *f = j->f;
    data_loader_cfg c = {.path = o->val.path,
                         .format = o->data_format,
                         .field = o->data_field,
                         .skip_bad_lines = o->skip_bad_lines,
                         .bad_lines_said = j->val_bad_said,
                         .enc = {src->tok, o->model.vocab_size},
                         .seq_len = o->val.seq_len,
                         .batch = o->val.batch,
                         .dp_size = 1,
                         .infinite = o->val.steps > 0,
                         .partial_last = 1,
                         .pad_label = OPS_IGNORE_INDEX,
                         .doc_shift = o->block_causal};
    /* Streamed whatever training.dataset_streaming: a pass over the whole set (steps -1) has
     * the same chat losses in any order (each example attended alone), and token shards, which
     * a map-style loader refuses, stay a validation set.
     * Every rank evaluates the whole set (dp_size 1): the ranks stay in step for FSDP's
     * gathers whatever the documents' split. steps -1: one pass; the last batch may be short
     * (torchtitan's validation loader keeps it): its missing rows carry ignored labels, so the
     * loss is the token mean over every whole window of the set. steps N: N whole batches of
     * the set read as a repeating stream, as torchtitan repeats a bounded validation set (more
     * batches than it holds wrap around, the loader saying so). */
    model *m = ev ? ev : train;
    if (ev) {
        dist_fsdp_gather_all(f);
        memcpy(ev->w, train->w, train->n_floats * sizeof(float));
        dist_fsdp_release_all(f);
        if (ev->moe_bias && train->moe_bias) /* MoE bias balancing: [L, E] routing state, not a
                                              * weight; without it ev routed unbiased */
            memcpy(ev->moe_bias, train->moe_bias,
                   (size_t)ev->args.n_layers * ev->args.n_experts * sizeof(float));
    }
    model_weights_changed(m); /* bf16: after the step's AdamW */
    data_loader *l;
    if (data_loader_open(&l, &c, err)) return -1;
    j->val_bad_said = 1;
    const size_t n = (size_t)c.batch * (size_t)c.seq_len;
    int32_t *x = base_alloc(n * sizeof *x), *y = base_alloc(n * sizeof *y);
    int32_t *pos = o->block_causal ? base_alloc(n * sizeof *pos) : NULL;
    double sum = 0;
    int64_t valid = 0;
    int rc = x && y && (pos || !o->block_causal) ? 0 : base_fail(err, "out of memory");
    int stopped = 0; /* a stop signal: the whole set may take minutes, past a scheduler's grace */
    for (int b = 0; !rc && (o->val.steps <= 0 || b < o->val.steps); b++) {
        const int sig = train_stop_agree(j->mesh->world_comm);
        if (sig) {
            base_log(BASE_LOG_INFO,
                     "%s: validation abandoned after %d batches (no validation loss logged)",
                     train_stop_signal_name(sig), b);
            stopped = 1;
            break;
        }
        int got = data_loader_next(l, x, y, pos, err);
        if (got > 0 && pos && model_set_positions(m, pos, err)) got = -1;
        if (got < 0) rc = -1;
        if (got <= 0) break;
        int64_t v = 0;
        sum += model_step_microbatch(m, x, y, 0.0f, &v); /* grad_scale 0: forward only */
        valid += v;
    }
    if (!rc && !stopped && valid == 0)
        rc = o->data_format == DATA_FMT_CHAT
                 ? base_fail(err,
                             "%s: no validation chat example fits a row (all longer than "
                             "seq_len + 1 = %d tokens, or malformed)",
                             o->val.path, c.seq_len + 1)
                 : base_fail(err, "%s: validation data is shorter than one window of %d tokens",
                             o->val.path, c.seq_len + !c.doc_shift);
    data_loader_free(l);
    base_free(x);
    base_free(y);
    base_free(pos);
    *loss = stopped ? NAN : valid ? sum / (double)valid : 0;
    *ntok = valid;
    return rc;
}

int train_step(train_job *j, int step, train_step_result *r, base_err *err) {
    const train_opts *o = j->o;
    const dist_mesh *mesh = j->mesh;
    model *m = j->m;
    dist_fsdp *f = j->f;
    float *const ws = dist_fsdp_shard_params(f), *const gs = dist_fsdp_shard_grads(f);
    const size_t ns = dist_fsdp_shard_len(f);
    const size_t NT = (size_t)o->batch * o->seq_len;
    const int aux_on = m->balance == MODEL_BALANCE_AUX_LOSS;
    double t0 = base_now();
    const double comm0 = dist_comm_seconds();
    dist_fsdp_stats st0, st1;
    dist_fsdp_get_stats(f, &st0);
    int64_t valid = 0;
    for (int mb = 0; mb < o->grad_accum; mb++) {
        if (train_source_next(j->src, j->tok + mb * NT, j->tgt + mb * NT,
                              j->pos ? j->pos + mb * NT : NULL, o->batch, o->seq_len, err))
            return -1;
        for (size_t i = 0; i < NT; i++) valid += j->tgt[mb * NT + i] != OPS_IGNORE_INDEX;
    }
    const int64_t local_valid = valid; /* for this rank's own mean (max_loss) */
    /* torchtitan's data_loading: the batches alone, not the all-reduce below, whose wait for
     * the slowest rank (rank 0 logging the last step) would count as data time */
    const double t_data = base_now() - t0;
    train_prof_phase("data loading", t0);
    /* the loss is normalised by the valid targets of the whole step on all ranks */
    dist_allreduce_i64(mesh->dp_comm, &valid, 1);
    /* torchtitan's zero_grad (PyTorch's set_to_none=True): the backward writes each gradient
     * the first time in the step instead of adding it to zeros, so no pass zeroes them; a step
     * without a valid target runs no backward and steps on zero gradients, as before */
    const int set_to_none = valid > 0, dropped = dist_fsdp_drops_grads(f);
    const double t_zero = base_now();
    dist_fsdp_begin_step(f, set_to_none); /* without set_to_none a pass over the shard */
    train_prof_phase("zero grad", t_zero);
    if (!j->w16_current) /* bf16: the last step's AdamW (or a load) changed them */
        model_weights_changed(m);
    j->w16_current = 0;
    if (m->moe_counts) /* MoE: tokens per expert, counted afresh each step */
        memset(m->moe_counts, 0,
               (size_t)m->args.n_layers * m->args.n_experts * sizeof(*m->moe_counts));
    double loss_sum = 0, sumsq = 0, aux_sum = 0;
    for (int mb = 0; mb < o->grad_accum; mb++) {
        /* the model's gradients hold nothing to keep: the first microbatch's, or every one's
         * where FSDP moved them into the shard and zeroed them after each unit's backward */
        if (set_to_none && (mb == 0 || dropped)) model_grad_set_to_none(m, dropped);
        if (j->pos && model_set_positions(m, j->pos + mb * NT, err)) return -1;
        const double l = model_step_microbatch(m, j->tok + mb * NT, j->tgt + mb * NT,
                                               valid ? 1.0f / (float)valid : 0.0f, NULL);
        /* no valid target, so no backward: the forward left its saved activations in the
         * gradients' pages (model_build_opts.acts_in_grads) where the zeros to step on were */
        if (!set_to_none && m->acts_in_grads) ops_zero(gs, ns);
        loss_sum += l;
        aux_sum += m->moe_aux_loss;
        /* checked per microbatch (cumulative gradients) so the error names the one */
        const double t_norm = base_now();
        sumsq = optim_sumsq(gs, ns);
        train_prof_phase("grad norm", t_norm);
        /* every rank's verdict: a NaN may reach one rank's shard only, and a rank stopping
         * alone would leave the others in the next collective (the save in flight lost) */
        double diverged = !isfinite(l) || !isfinite(sumsq);
        dist_allreduce_max_f64(mesh->world_comm, &diverged, 1); /* nothing with one rank */
        if (diverged && isfinite(l) && isfinite(sumsq)) {
            base_fail(err,
                      "step %d, microbatch %d of %d: non-finite loss or gradient on another "
                      "rank; stopping",
                      step, mb + 1, o->grad_accum);
            return TRAIN_STEP_DIVERGED;
        }
        if (diverged) {
            const char *bad = train_first_bad(m, f, dist_fsdp_shard_grads(f), 0, 0);
            /* the first non-finite gradient is where a NaN arrives in backward, not which
             * kernel made it: with kernel overrides the kernels are the first suspects, named
             * with where they run */
            char kern[1024];
            const int nk = model_kernel_choices(m, kern, sizeof kern);
            base_fail(err,
                      "step %d, microbatch %d of %d: non-finite %s (loss %g); first "
                      "non-finite gradient: %s; stopping%s%s",
                      step, mb + 1, o->grad_accum, isfinite(l) ? "gradient" : "loss",
                      l / (valid ? (double)valid : 1.0), bad ? bad : "(none found)",
                      nk ? "; kernel overrides in use (`titan kernels test NAME` checks "
                           "each against its op's default): "
                         : "",
                      nk ? kern : "");
            return TRAIN_STEP_DIVERGED;
        }
    }
    if (mesh->dp_replicate > 1) { /* HSDP: replicas sum their shard gradients */
        dist_fsdp_sync_replicas(f);
        sumsq = optim_sumsq(gs, ns);
    }
    if (mesh->tp > 1) /* replicated norm weights: their gradients summed, counted once */
        sumsq = dist_tp_grad_sumsq(j->tpp, gs, ns, optim_sumsq, mesh->tp_comm);
    /* the global norm: every shard once (replicas hold the same shard) */
    dist_allreduce_f64(mesh->shard_comm, &sumsq, 1);
    double max_loss = local_valid ? loss_sum / (double)local_valid : 0.0;
    dist_allreduce_max_f64(mesh->dp_comm, &max_loss, 1);
    dist_allreduce_f64(mesh->dp_comm, &loss_sum, 1);
    dist_allreduce_f64(mesh->dp_comm, &aux_sum, 1);
    const double aux = aux_sum / ((double)o->grad_accum * mesh->dp_size); /* 0 when off */
    const double loss =
        (valid ? loss_sum / (double)valid : 0.0) + o->model.router_aux_loss_coef * aux * aux_on;
    max_loss += o->model.router_aux_loss_coef * aux * aux_on;
    double norm;
    const float clip = optim_clip_coef(sumsq, o->max_norm, &norm); /* applied by the step */
    const double lr_factor = optim_lr_factor(&j->lr, step - 1 + j->lr_base),
                 lr = o->adamw.lr * lr_factor; /* the first group's, as torchtitan logs */
    if (m->moe_counts) /* the step's tokens per expert on all ranks: the bias update and the
                        * logged expert load count the global batch in every balance mode */
        dist_allreduce_i64(mesh->dp_comm, m->moe_counts,
                           (size_t)m->args.n_layers * m->args.n_experts);
    if (m->balance == MODEL_BALANCE_BIAS) model_moe_update_bias(m, NULL);
    const double t_opt = base_now();
    optim_adamw_step(j->opt, ws, gs, clip, j->spans, j->n_spans, lr_factor,
                     &j->c16); /* c16.n 0: no copy */
    /* (0 where the copy has no registration the GEMMs find it by: the next step remakes it) */
    if (j->c16.n) j->w16_current = model_bf16_copy_current(m);
    train_prof_phase("optimizer step", t_opt);
    const double dt = base_now() - t0, comm = dist_comm_seconds() - comm0;
    dist_fsdp_get_stats(f, &st1);
    *r = (train_step_result){.loss = loss,
                             .max_loss = max_loss,
                             .norm = norm,
                             .lr = lr,
                             .lr_factor = lr_factor,
                             .aux = aux,
                             .ntok = (int64_t)NT * o->grad_accum,
                             .step_s = dt,
                             .data_s = t_data,
                             .comm_s = comm,
                             .gather_bytes = st1.gather_bytes - st0.gather_bytes,
                             .reduce_bytes = st1.reduce_bytes - st0.reduce_bytes};
    return 0;
}
