/* train: the model's side of parallelism (see internal.h): FSDP units and hooks from the
 * model's layout, and its tensor/expert-parallel slices described as runs for dist, which
 * moves the flat buffers (src/distributed/tp.c). */
#include <stdlib.h>
#include <string.h>

#include "train/internal.h"

_Static_assert((int)MODEL_FWD_BEGIN == (int)DIST_FWD_BEGIN &&
                   (int)MODEL_FWD_END == (int)DIST_FWD_END &&
                   (int)MODEL_BWD_BEGIN == (int)DIST_BWD_BEGIN &&
                   (int)MODEL_BWD_END == (int)DIST_BWD_END,
               "model and dist phases agree");

static int fsdp_hook(void *ctx, int unit, model_phase p) {
    const int in16 = dist_fsdp_hook(ctx, unit, (dist_phase)p);
    /* dist's local part is the unit's EP expert stacks (train_setup_fsdp) */
    return (in16 & DIST_W16_DENSE ? MODEL_W16_DENSE : 0) |
           (in16 & DIST_W16_LOCAL ? MODEL_W16_EXPERTS : 0);
}

/* The parameters some fp32 op reads (model_param_prec), as spans of the flat buffer, adjacent
 * ones merged: what FSDP's bf16 transport gathers exact. NULL when out of memory. */
static dist_span *exact_spans(const model *m, int *n) {
    dist_span *s = calloc((size_t)m->n_params + 1, sizeof *s);
    *n = 0;
    for (int k = 0; s && k < m->n_params; k++) {
        const model_param *p = &m->params[k];
        if (model_param_prec(m, p) == OPS_PREC_BF16) continue;
        if (*n && s[*n - 1].offset + s[*n - 1].len == p->offset)
            s[*n - 1].len += p->numel;
        else
            s[(*n)++] = (dist_span){p->offset, p->numel};
    }
    return s;
}

int train_setup_fsdp(model *m, const dist_mesh *mesh, const train_opts *o, dist_fsdp **f,
                     base_err *err) {
    dist_unit *u = calloc((size_t)m->n_units, sizeof *u);
    int n_exact = 0;
    dist_span *exact = exact_spans(m, &n_exact);
    if (!u || !exact) {
        free(u);
        free(exact);
        return base_fail(err, "out of memory");
    }
    /* TITAN_FSDP_BWD_GATHER=all gathers every unit for its backward, as before the model said
     * which backward reads no parameters (the tests' reference: bitwise the same steps) */
    const char *bg = getenv("TITAN_FSDP_BWD_GATHER");
    if (bg && bg[0] && strcmp(bg, "all") && strcmp(bg, "auto")) {
        free(u);
        free(exact);
        return base_fail(err, "TITAN_FSDP_BWD_GATHER: '%s': expected all or auto", bg);
    }
    const int bwd_all = bg && !strcmp(bg, "all");
    for (int i = 0; i < m->n_units; i++) {
        u[i] = (dist_unit){m->units[i].offset, m->units[i].numel, 0,
                           !bwd_all && !model_unit_bwd_reads_params(m, i)};
        /* EP: a block's expert stacks (its last parameters) are this rank's own */
        for (int k = 0; k < m->n_params; k++)
            if (m->params[k].unit == i && m->params[k].tp_split == MODEL_EP_EXPERTS)
                u[i].local += m->params[k].numel;
    }
    /* bf16: parameters only bf16 GEMMs read travel as bf16 (bitwise the same steps: see
     * dist.h); TITAN_BF16_TRANSPORT=float32 keeps every gather fp32 (the tests' reference) */
    dist_fsdp_cfg c = {.units = u,
                       .n_units = m->n_units,
                       .n_floats = m->n_floats,
                       .reshard = o->reshard,
                       .head_unit = m->n_units - 1,
                       .pinned_unit = o->model.tie_embeddings ? 0 : -1,
                       .w = m->w,
                       .g = m->g,
                       .gather_bf16 = m->prec == OPS_PREC_BF16 && !o->transport_f32,
                       /* a 2-byte copy takes the bf16 gathers as they arrive */
                       .w16 =
                           m->w16 && ops_bf16_mirror_bytes(1) == sizeof(uint16_t) ? m->w16 : NULL,
                       .exact = exact,
                       .n_exact = n_exact};
    int rc = dist_fsdp_new(f, mesh, &c, err);
    free(u);
    free(exact);
    if (rc) return -1;
    m->w = dist_fsdp_full_params(*f);
    m->g = dist_fsdp_full_grads(*f);
    m->hook = fsdp_hook;
    m->hook_ctx = *f;
    m->w16_transient = mesh->dp_shard > 1; /* bf16: each unit's copy only while it is gathered */
    return 0;
}

/* The model's runs (model_tp_runs) over the local ranges r[nr], in order, as dist's runs:
 * shard_off = where each lies in the vector the ranges tile. *n gets the count; NULL when
 * out of memory (free() the result). */
static dist_tp_run *model_runs(const model *m, const dist_range *r, int nr, size_t *n) {
    size_t total = 0;
    for (int k = 0; k < nr; k++) total += model_tp_runs(m, r[k].global_off, r[k].len, NULL, 0);
    model_run *runs = calloc(total + 1, sizeof *runs);
    dist_tp_run *out = calloc(total + 1, sizeof *out);
    if (!runs || !out) {
        free(runs);
        free(out);
        return NULL;
    }
    *n = 0;
    for (int k = 0; k < nr; k++) {
        const size_t nk = model_tp_runs(m, r[k].global_off, r[k].len, runs, total);
        for (size_t i = 0; i < nk; i++) {
            const model_run *u = &runs[i];
            out[(*n)++] = (dist_tp_run){r[k].shard_off + (u->offset - r[k].global_off),
                                        u->offset,
                                        u->full_offset,
                                        u->row_len,
                                        u->rows,
                                        u->full_stride,
                                        u->replicated};
        }
    }
    free(runs);
    return out;
}

/* The runs of the whole local layout [0, n_floats). */
static dist_tp_run *whole_runs(const model *m, size_t *n) {
    const dist_range all = {0, 0, m->n_floats};
    return model_runs(m, &all, 1, n);
}

int train_tp_pieces(dist_tp_pieces *t, const model *m, const dist_fsdp *f, int tp_rank,
                    base_err *err) {
    memset(t, 0, sizeof *t);
    int nr;
    const dist_range *r = dist_fsdp_ranges(f, &nr);
    size_t n = 0;
    dist_tp_run *runs = model_runs(m, r, nr, &n);
    if (!runs) return base_fail(err, "out of memory");
    const int rc = dist_tp_pieces_init(t, runs, n, m->tp.size, tp_rank, err);
    free(runs);
    return rc;
}

/* The group whose ranks hold slices of one model: TP's, or EP's (they never combine). */
static int slice_rank(const model *m) {
    return m->tp.size > 1 ? m->tp.rank : m->ep.rank;
}

int train_take_slices(model *m, float *full, base_err *err) {
    size_t n = 0;
    dist_tp_run *runs = whole_runs(m, &n);
    if (!runs) return base_fail(err, "out of memory");
    dist_tp_copy(runs, n, m->w, full, 0, slice_rank(m));
    free(runs);
    return 0;
}

int train_full_model(model *full, const model *m, const train_opts *o, dist_comm *group,
                     base_err *err) {
    model_build_opts bo = {.batch = 1,
                           .seq_len = 1,
                           .ac = MODEL_AC_NONE,
                           .overrides = o->kernel_overrides,
                           .n_overrides = o->n_kernel_overrides,
                           .prec = o->prec, /* the end-of-run sample runs as training did */
                           .balance = m->balance};
    if (model_build(full, &o->model, &bo, err)) return -1;
    size_t n = 0;
    dist_tp_run *runs = whole_runs(m, &n);
    if (!runs) return base_fail(err, "out of memory");
    dist_tp_assemble(runs, n, m->w, full->w, full->n_floats, slice_rank(m), group);
    free(runs);
    if (full->moe_bias && m->moe_bias) /* MoE bias balancing: [L, E], every expert on each
                                        * rank (the router sees them all), not in w */
        memcpy(full->moe_bias, m->moe_bias,
               (size_t)full->args.n_layers * full->args.n_experts * sizeof(float));
    return 0;
}
