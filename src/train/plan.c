/* train: `titan plan`, per-rank memory and traffic of a run from its shapes (see train.h).
 *
 * The model follows what train_run + dist_fsdp do:
 *   - parameters, gradients and AdamW m, v: this rank's shard of every unit, ceil(numel /
 *     dp_shard) floats each (the whole buffer with dp_shard = 1);
 *   - with dp_shard > 1, whole units in flight: the unit computing and the one prefetched,
 *     the gradients of the unit in backward, a tied embedding (parameters and gradients)
 *     from the head's forward to the end of backward, or, with reshard "never", every
 *     unit's parameters from its forward to its backward; plus the reduce-scatter receive
 *     buffer (the largest unit shard) and MPI's own temporary for a reduce-scatter (about
 *     one whole unit: OpenMPI's tuned algorithms copy the send buffer; measured,
 *     bench/RESULTS.md);
 *   - activations: exactly what model_build allocates (model_activation_bytes_for);
 *   - traffic per rank (ring algorithms): an all-gather of n floats over k ranks receives
 *     n (k-1)/k of them, a reduce-scatter sends as much, an all-reduce twice that;
 *   - tensor parallelism (tp > 1): every unit is the rank's slice (model_tp_local_args: heads,
 *     FFN columns and vocabulary rows over tp, norm weights whole), FSDP shards those; the
 *     activations are model_build's for the local shapes and sequence shard; the TP traffic
 *     counts the [N, D] (N = batch*seq_len) all-gathers and reduce-scatters of forward_trunk,
 *     the blocks and their backward (model.h), the CE's 3 doubles per row and the norm
 *     weights' gradient all-reduce;
 *   - expert parallelism (ep > 1, dividing dp_shard): each rank holds E/ep experts of every
 *     block, FSDP-sharded over the es = dp_shard / ep ranks with the same experts (efsdp;
 *     es = 1: whole, copied instead of gathered); the expert-side activations are sized for the
 *     worst case of every rank routing all its rows here (R ep rows, R = batch*seq_len*top_k),
 *     and the all-to-all traffic is the balanced-routing expectation. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/internal.h"
#include "train/train.h"

/* RSS of titan itself (code, BLAS, OpenMP and MPI libraries, thread stacks), measured with a
 * 100K-parameter model: 20 MiB as one process, 27 MiB per rank under mpirun. */
#define RUNTIME_ONE (20.0 * (1 << 20))
#define RUNTIME_MPI (27.0 * (1 << 20))

static double dmax(double a, double b) {
    return a > b ? a : b;
}

int train_plan_compute(const train_plan_in *in, train_plan *p, base_err *err) {
    memset(p, 0, sizeof *p);
    p->par = in->par;
    if (dist_mesh_resolve(&p->par, in->world, err)) return -1;
    const int tp = p->par.tp;
    model_args local;
    if (model_tp_local_args(&in->model, tp, &local, err)) return -1;
    const int ep = p->par.ep;
    if (ep > 1 && (in->model.n_experts <= 0 || in->model.n_experts % ep))
        return base_fail(err,
                         "expert parallelism: n_experts (%d) must be a positive multiple of "
                         "expert_parallel_degree (%d)",
                         in->model.n_experts, ep);
    if (ep > 1) local.n_local_experts = in->model.n_experts / ep;
    model m;
    if (model_describe(&m, &local, err)) {
        model_free(&m);
        return -1;
    }
    const double F = sizeof(float);
    const int ds = p->par.dp_shard, dr = p->par.dp_replicate, L = in->model.n_layers;
    const int es = ep > 1 ? ds / ep : 1; /* efsdp: the ranks sharding one rank's experts */
    const int tied = in->model.tie_embeddings;
    const int n_ckpt = model_ac_blocks(in->ac, in->ac_every, L); /* blocks recomputed */
    double blk = 0, shard = 0, max_shard = 0, max_unit = 0, own = 0;
    for (int u = 0; u < m.n_units; u++) {
        size_t loc = 0; /* EP: this rank's expert stacks, sharded over efsdp */
        for (int i = 0; ep > 1 && i < m.n_params; i++)
            if (m.params[i].unit == u && strstr(m.params[i].name, ".moe.experts."))
                loc += m.params[i].numel;
        own += (double)loc;
        const double n = (double)(m.units[u].numel - loc),
                     sd = (double)((m.units[u].numel - loc + ds - 1) / ds),
                     sl = (double)((loc + es - 1) / es);
        shard += sd + sl;
        max_shard = dmax(max_shard, dmax(sd, sl)); /* the reduce-scatter result */
        max_unit = dmax(max_unit, dmax(n, es > 1 ? (double)loc : 0)); /* MPI's copy */
        if (u >= 1 && u <= L) blk = dmax(blk, n + loc); /* in flight: the own experts too */
    }
    const double emb = (double)m.units[0].numel, head = (double)m.units[L + 1].numel;
    model_counts cnt; /* the whole model's (m holds one TP rank's slices) */
    model_count_params(&in->model, &cnt);
    p->n_params = cnt.total;
    p->params = p->grads = shard * F;
    p->adam = 2 * shard * (in->adam_bf16 ? 2 : F);
    if (ds > 1) {
        const double pin = tied ? 2 * emb : 0; /* tied embedding: parameters + gradients */
        double peak;
        if (in->reshard == DIST_RESHARD_NEVER) { /* everything gathered by the loss */
            peak = (double)m.n_floats + dmax(head, blk) + (tied ? emb : 0);
        } else {
            const double fwd = 2 * blk + (tied ? emb : 0) + (tied ? 0 : emb);
            const double loss = (tied ? 2 * emb + head : 2 * head) + blk; /* + prefetch */
            const double bwd = 3 * blk + pin;                             /* u, u-1, grads u */
            /* the embedding's backward: its gradients, and its parameters only when tied
             * (pinned; untied they are not gathered for it: model_unit_bwd_reads_params) */
            const double first = (tied || model_unit_bwd_reads_params(&m, 0) ? 2 : 1) * emb + blk;
            peak = dmax(dmax(fwd, loss), dmax(bwd, first));
        }
        p->gathered = peak * F;
        p->comm_buffers = (max_shard + max_unit) * F;
        /* gathers per microbatch: released units twice (forward, backward), others once, as
         * are units whose backward reads no parameters (the embedding's); the
         * dense part over dp_shard, the own experts over efsdp (ring: (k-1)/k of the bytes).
         * bf16: what only bf16 GEMMs read travels as bf16 (dist_fsdp_part_bytes) */
        const int b16 = in->prec == OPS_PREC_BF16;
        m.prec = in->prec;
        double ag = 0, ag16 = 0, buf16 = 0;
        int64_t n_ag = 0;
        for (int u = 0; u < m.n_units; u++) {
            const int pinned = tied && u == 0, is_head = u == L + 1;
            int times = 2;
            if (in->reshard == DIST_RESHARD_NEVER || pinned || is_head ||
                !model_unit_bwd_reads_params(&m, u))
                times = 1;
            size_t loc = 0, xd = 0, xl = 0; /* own experts; exact elements of each part */
            for (int i = 0; i < m.n_params; i++) {
                const model_param *q = &m.params[i];
                if (q->unit != u) continue;
                const int mine = ep > 1 && strstr(q->name, ".moe.experts.") != NULL,
                          exact = model_param_prec(&m, q) != OPS_PREC_BF16;
                loc += mine ? q->numel : 0;
                *(mine ? &xl : &xd) += exact ? q->numel : 0;
            }
            const struct {
                size_t len, exact;
                int k;
            } part[2] = {{m.units[u].numel - loc, xd, ds}, {loc, xl, es}};
            for (int k = 0; k < 2; k++) {
                if (!part[k].len || part[k].k == 1) continue;
                double h = 0;
                int nc = 1;
                const double b = dist_fsdp_part_bytes(part[k].len, part[k].exact, b16, &h, &nc),
                             ring = (double)(part[k].k - 1) / part[k].k;
                ag += times * b * ring;
                ag16 += times * h * ring;
                buf16 = dmax(buf16, h);
                if (k == 0) n_ag += times * (nc - 1); /* a mixed part's fp32 patch */
            }
            n_ag += times;
        }
        p->allgather_bytes = ag * in->grad_accum;
        p->allgather_bf16_bytes = ag16 * in->grad_accum;
        p->allgathers = n_ag * in->grad_accum;
        /* bf16: a gather in flight receives into its own bf16 buffer (one unit at a time:
         * the prefetched one) */
        p->comm_buffers += buf16;
        p->reduce_scatter_bytes =
            (((double)m.n_floats - own) * (ds - 1) / ds + own * (es - 1) / es) * F * in->grad_accum;
        p->reduce_scatters = (int64_t)m.n_units * in->grad_accum;
    }
    if (dr > 1) p->allreduce_bytes = 2.0 * shard * F * (dr - 1) / dr;
    if (in->world > 1) p->scalar_bytes = 3 * 8 * 2; /* tokens, loss, grad norm */
    if (tp > 1) {
        const double N = (double)in->batch * in->seq_len, nd = N * in->model.dim * F,
                     ring = (double)(tp - 1) / tp;
        /* per block: forward 2 AG + 2 RS; backward 4 AG + 2 RS (+ the forward again in a
         * checkpointed block); embedding RS + AG, final norm AG + RS */
        const int64_t n = 10 * (int64_t)L + 4 * (int64_t)n_ckpt + 4;
        double rep = 0; /* replicated (norm) weights */
        for (int i = 0; i < m.n_params; i++)
            if (m.params[i].is_norm) rep += (double)m.params[i].numel;
        p->tp_collectives = (n + 2) * in->grad_accum + 1;
        /* the CE: 3 doubles per row all-reduced, or (loss parallel off) the lm_head weight
         * all-gathered */
        const double ce = in->loss_parallel_off
                              ? (double)in->model.vocab_size * in->model.dim * F * ring
                              : 3 * N * 8 * 2 * ring;
        p->tp_bytes = (n * nd * ring + ce) * in->grad_accum + 2 * rep * F * ring;
        if (in->prec == OPS_PREC_BF16) { /* model_bf16_wire: the all-gathers read only by bf16
            GEMMs move 2 bytes per element: per block 2 forward, 4 backward and a checkpointed
            block's 2 again; the final norm's output; loss parallel off, the lm_head weight */
            const double g16 =
                (6.0 * L + 2.0 * n_ckpt + 1) * nd * ring + (in->loss_parallel_off ? ce : 0);
            p->tp_bf16_bytes = g16 / 2 * in->grad_accum;
            p->tp_bytes -= p->tp_bf16_bytes;
        }
    }
    if (ep > 1) {
        const double R = (double)in->batch * in->seq_len * in->model.top_k,
                     rows = R * in->model.dim * F, ring = (double)(ep - 1) / ep;
        /* per block 4 alltoallv + 1 count exchange; a checkpointed block's recompute 2 + 1 */
        const double xchg = 4.0 * L + 2.0 * n_ckpt;
        p->ep_experts = own / es * F;
        p->ep_collectives = (int64_t)(5 * L + 3 * n_ckpt) * in->grad_accum;
        p->ep_bytes = xchg * rows * ring * in->grad_accum;
        if (in->prec == OPS_PREC_BF16) { /* the dispatches (forward, recompute, backward) and
                                            the forward and recompute returns move bf16 */
            p->ep_bf16_bytes = (3.0 * L + 2.0 * n_ckpt) * rows * ring / 2 * in->grad_accum;
            p->ep_bytes -= p->ep_bf16_bytes;
        }
    }
    model_build_opts o = {
        .batch = in->batch, .seq_len = in->seq_len, .with_grads = 1, .prec = in->prec};
    const model_tp tpo = {.size = tp};
    const model_ep epo = {.size = ep};
    o.tp = &tpo;
    o.ep = &epo;
    o.loss_parallel_off = in->loss_parallel_off;
    /* one rank only: the memory check's what-ifs ask for more ranks with the same input */
    o.acts_in_grads = in->acts_in_grads && in->world == 1;
    o.ac = MODEL_AC_NONE;
    p->act_none = (double)model_activation_bytes_for(&in->model, &o);
    o.ac = MODEL_AC_FULL;
    p->act_full = (double)model_activation_bytes_for(&in->model, &o);
    o.ac = in->ac;
    o.ac_every = in->ac_every;
    p->act_conf = (double)model_activation_bytes_for(&in->model, &o);
    if (o.acts_in_grads) { /* the same carving without the rooms: what went there */
        o.acts_in_grads = 0;
        p->act_in_grads = (double)model_activation_bytes_for(&in->model, &o) - p->act_conf;
        o.acts_in_grads = 1;
    }
    if (ep > 1) { /* what EP adds to the configured mode's activations: the all-to-all
                     buffers, the received rows and the expert-side rows sized R ep */
        const double with = (double)model_activation_bytes_for(&in->model, &o);
        o.ep = NULL;
        p->ep_buffers = with - (double)model_activation_bytes_for(&in->model, &o);
    }
    p->runtime = in->world > 1 ? RUNTIME_MPI : RUNTIME_ONE;
    if (in->prec == OPS_PREC_BF16) {
        /* whole without FSDP; with sharded units only the units in use (transient copies,
         * model.h): at most the head (or the tied embedding) and a block, prefetch aside */
        m.prec = in->prec; /* model_param_in_bf16_copy: the default implementations' */
        double live = 0, umax = 0, blk_max = 0;
        for (int u = 0; u < m.n_units; u++) { /* the elements the copy holds per unit */
            double n = 0;
            for (int i = 0; i < m.n_params; i++)
                if (m.params[i].unit == u && model_param_in_bf16_copy(&m, &m.params[i]))
                    n += (double)m.params[i].numel;
            live += n;
            umax = n > umax ? n : umax;
            if (u > 0 && u <= L) blk_max = n > blk_max ? n : blk_max;
        }
        if (ds > 1) live = umax + blk_max;
        p->bf16_copy = (double)ops_bf16_mirror_bytes(1) * live;
        /* the largest operands converted per call, one call at a time: the lm_head+CE chunk's
         * logit gradient [chunk, V/tp], about 64M elements with the automatic chunk, or
         * attention's backward (attention_gemm.c): q, k, v and dout of this rank's heads
         * converted, and D [B, H/tp, T] fp32 (its per-thread [64, T] blocks left out). On the
         * onednn engine the chunk's logit gradient is written over its bf16 logits (lmhead_ce.c)
         * and not converted; the term then stands for what the kernels' scratch pool
         * (cpu/scratch.c: per-call bf16 operand copies, kept) and the libraries' workspaces
         * hold, which nothing else counts: on a Zen 4 (session 34) 0.6B x 2048 bf16 measured
         * 10.86 GiB against 10.87 estimated with it, 10.75 without it; the bench model 2.10
         * against 2.17 / 2.06 */
        /* Attention's buffers are kept in the pool together (their slots never shrink, 1.25x
         * headroom each): the converted q, k, v and dout, the per-head dK / dV partials (fp32,
         * 2 [B*T, H*hd]: GQA or the dense layout) and the forward's workspace (~ fp32
         * [B*T, H*hd]); measured on a Zen 4 (session 38) at debugmodel's dims, 2 x 1024 tokens:
         * a pool of 80.5 MiB against 90 by this term (24 by the old one, which had the copies
         * alone and left the plan 11% low there). */
        const double es = (double)ops_bf16_mirror_bytes(1), bt = (double)in->batch * in->seq_len;
        const double logits = bt * in->model.vocab_size / (in->loss_parallel_off ? 1 : tp);
        const double H = (double)in->model.n_heads / tp, G = (double)in->model.n_kv_heads / tp;
        const double att =
            1.25 * bt * in->model.head_dim * (es * 2.0 * (H + G) + 12.0 * H) + 4.0 * bt * H;
        p->bf16_scratch = es * (logits < 64e6 ? logits : 64e6);
        if (att > p->bf16_scratch) p->bf16_scratch = att;
    }
    if (in->ckpt_async) {
        const double snap = p->params + p->adam;
        p->ckpt_sync = !train_saver_async_fits(snap, in->world);
        p->ckpt_snapshot = p->ckpt_sync ? 0 : snap;
    }
    const double fixed = p->params + p->grads + p->adam + p->gathered + p->comm_buffers +
                         p->runtime + p->bf16_copy + p->bf16_scratch + p->ckpt_snapshot;
    p->total_none = fixed + p->act_none;
    p->total_full = fixed + p->act_full;
    p->total_conf = fixed + p->act_conf;
    model_free(&m);
    return 0;
}

void train_plan_print(const train_plan_in *in, const train_plan *p, double budget_gib, FILE *f) {
    const double G = 1 << 30;
    const model_args *a = &in->model;
    static const char *const reshard[] = {"default", "always", "never"};
    fprintf(f,
            "titan plan: %s, %.3fB parameters (%d layers, dim %d%s), %d ranks = dp_replicate %d x "
            "dp_shard %d x tp %d (ep %d); reshard_after_forward %s\n",
            a->flavor[0] ? a->flavor : "model", p->n_params / 1e9, a->n_layers, a->dim,
            a->n_experts ? ", MoE" : "", in->world, p->par.dp_replicate, p->par.dp_shard, p->par.tp,
            p->par.ep, reshard[in->reshard]);
    fprintf(f, "  step: %d x %d tokens x %d microbatches per rank (%lld tokens per step)\n",
            in->batch, in->seq_len, in->grad_accum,
            (long long)in->batch * in->seq_len * in->grad_accum * p->par.dp_replicate *
                p->par.dp_shard);
    /* unset, the precision follows this CPU: a plan made here for another machine may not be
     * that machine's (the bf16 copy, activations and traffic by dtype follow it) */
    if (in->prec_why) fprintf(f, "  precision: %s\n", in->prec_why);
    fprintf(f, "memory per rank                          GiB\n");
    fprintf(f, "  parameters (fp32 shard)          %10.3f\n", p->params / G);
    fprintf(f, "  gradients (fp32 shard)           %10.3f\n", p->grads / G);
    fprintf(f, "  AdamW m + v (%s shard)         %10.3f\n", in->adam_bf16 ? "bf16" : "fp32",
            p->adam / G);
    if (p->par.ep > 1)
        fprintf(f, "    of which own experts (EP)      %10.3f   (parameters; sharded over efsdp)\n",
                p->ep_experts / G);
    fprintf(f, "  whole units in flight (FSDP)     %10.3f\n", p->gathered / G);
    fprintf(f, "  communication buffers            %10.3f\n", p->comm_buffers / G);
    fprintf(f, "  activations, no checkpointing    %10.3f\n", p->act_none / G);
    fprintf(f, "  activations, full checkpointing  %10.3f\n", p->act_full / G);
    if (in->ac == MODEL_AC_SELECTIVE)
        fprintf(f, "  activations, selective AC        %10.3f   (every %d blocks: %d of %d)\n",
                p->act_conf / G, in->ac_every, model_ac_blocks(in->ac, in->ac_every, a->n_layers),
                a->n_layers);
    if (p->par.ep > 1)
        fprintf(f,
                "    of which EP all-to-all         %10.3f   (configured mode; sized for all "
                "rows routed to one rank)\n",
                p->ep_buffers / G);
    if (p->act_in_grads > 0)
        fprintf(f,
                "  saved activations in gradients   %10.3f   (configured mode, not counted "
                "again: a block's in the pages of the gradient its backward precedes)\n",
                p->act_in_grads / G);
    if (in->prec == OPS_PREC_BF16) {
        fprintf(f, "  %-33s%10.3f   (%s per parameter)\n",
                p->par.dp_shard > 1 ? "bf16 weight copy (units in use)"
                                    : "bf16 weight copy (whole)",
                p->bf16_copy / G, ops_bf16_mirror_bytes(1) == 2 ? "2 B" : "emulated: 4 B");
        fprintf(
            f,
            "  bf16 GEMM operand scratch        %10.3f   (CE chunk's logit gradient or attention's "
            "operands and partials, %s)\n",
            p->bf16_scratch / G, ops_bf16_mirror_bytes(1) == 2 ? "bf16" : "emulated: fp32");
    }
    if (in->ckpt_async)
        fprintf(f, "  checkpoint snapshot (async)      %10.3f   (%s)\n", p->ckpt_snapshot / G,
                p->ckpt_sync ? "the ranks' snapshots exceed a quarter of this machine's RAM: "
                               "saved synchronously"
                             : "parameters + AdamW shards, from the first save");
    fprintf(f, "  runtime (libraries, MPI)         %10.3f\n", p->runtime / G);
    fprintf(f, "  total, no checkpointing          %10.3f", p->total_none / G);
    if (budget_gib > 0)
        fprintf(f, "   %s %g GiB", p->total_none / G <= budget_gib ? "fits" : "exceeds",
                budget_gib);
    fprintf(f, "\n  total, full checkpointing        %10.3f", p->total_full / G);
    if (budget_gib > 0)
        fprintf(f, "   %s %g GiB", p->total_full / G <= budget_gib ? "fits" : "exceeds",
                budget_gib);
    fprintf(f, "%s\n", in->ac == MODEL_AC_FULL ? "   (configured)" : "");
    if (in->ac == MODEL_AC_SELECTIVE) {
        fprintf(f, "  total, selective AC              %10.3f", p->total_conf / G);
        if (budget_gib > 0)
            fprintf(f, "   %s %g GiB", p->total_conf / G <= budget_gib ? "fits" : "exceeds",
                    budget_gib);
        fprintf(f, "   (configured)\n");
    }
    if (in->prec == OPS_PREC_BF16) { /* bytes by dtype: see dist.h's bf16 transport */
        fprintf(f, "traffic per rank per step (fp32, bf16 where said) GiB\n");
        fprintf(f,
                "  all-gather parameters            %10.3f   (%lld collectives; bf16 %.3f, fp32 "
                "%.3f: norm weights, embedding)\n",
                p->allgather_bytes / G, (long long)p->allgathers, p->allgather_bf16_bytes / G,
                (p->allgather_bytes - p->allgather_bf16_bytes) / G);
        fprintf(f, "  reduce-scatter gradients         %10.3f   (%lld collectives; fp32)\n",
                p->reduce_scatter_bytes / G, (long long)p->reduce_scatters);
    } else {
        fprintf(f, "traffic per rank per step (fp32)         GiB\n");
        fprintf(f, "  all-gather parameters            %10.3f   (%lld collectives)\n",
                p->allgather_bytes / G, (long long)p->allgathers);
        fprintf(f, "  reduce-scatter gradients         %10.3f   (%lld collectives)\n",
                p->reduce_scatter_bytes / G, (long long)p->reduce_scatters);
    }
    fprintf(f, "  all-reduce gradients (HSDP)      %10.3f\n", p->allreduce_bytes / G);
    fprintf(f, "  all-reduce scalars               %10.0f B\n", p->scalar_bytes);
    if (p->par.tp > 1)
        fprintf(f, "  tensor parallel (SP, CE, norms)  %10.3f   (%lld collectives)\n",
                p->tp_bytes / G, (long long)p->tp_collectives);
    if (p->par.tp > 1 && p->tp_bf16_bytes > 0)
        fprintf(f,
                "    of which bf16                  %10.3f   (the all-gathers read only by "
                "GEMMs; sums fp32)\n",
                p->tp_bf16_bytes / G);
    if (p->par.ep > 1)
        fprintf(
            f, "  all-to-all tokens (EP)           %10.3f   (%lld collectives; balanced routing)\n",
            p->ep_bytes / G, (long long)p->ep_collectives);
    if (p->par.ep > 1 && p->ep_bf16_bytes > 0)
        fprintf(f,
                "    of which bf16                  %10.3f   (dispatches, outputs sent back; "
                "the gradients sent back fp32)\n",
                p->ep_bf16_bytes / G);
}

train_plan_in train_plan_in_of(const train_opts *o, int world) {
    return (train_plan_in){.model = o->model,
                           .world = world,
                           .batch = o->batch,
                           .seq_len = o->seq_len,
                           .grad_accum = o->grad_accum,
                           .par = o->par,
                           .reshard = o->reshard,
                           .ac = o->ac,
                           .ac_every = o->ac_every,
                           .loss_parallel_off = o->loss_parallel_off,
                           .prec = o->prec,
                           .prec_why = o->prec_why,
                           .ckpt_async = o->ckpt.enable && o->ckpt.async && !o->ckpt.load_only,
                           .adam_bf16 = o->adam_bf16,
                           .acts_in_grads = o->acts_in_grads};
}

int train_plan_print_for(const train_opts *o, FILE *f, base_err *err) {
    train_plan_in in = train_plan_in_of(o, dist_world_size());
    train_plan p;
    if (train_plan_compute(&in, &p, err)) return -1;
    if (dist_world_rank() == 0) train_plan_print(&in, &p, 0, f);
    return 0;
}

int train_plan_data(const char *path, const char *format, const char *field, int dp, FILE *f) {
    if (!path || !path[0]) return 0; /* random tokens are split over any number of ranks */
    data_format fmt = DATA_FMT_AUTO;
    data_format_parse(format, &fmt); /* checked by the config schema */
    int64_t n = 0;
    base_err e;
    if (data_count_docs(path, fmt, field, dp, &n, &e)) {
        fprintf(f, "data: cannot check %s: %s\n", path, e.msg);
        return 0;
    }
    if (n >= dp) {
        fprintf(f, "data: %s has at least %d documents: every data-parallel rank gets some\n", path,
                dp);
        return 0;
    }
    char last[32] = "";
    if (n + 1 < dp) snprintf(last, sizeof last, "..%d", dp - 1);
    fprintf(f,
            "warning: %s has %lld document%s for %d data-parallel ranks (document i goes to rank "
            "i mod %d): rank%s %lld%s get%s no data and the run stops; use more files, "
            "paragraphs or lines, or fewer data-parallel ranks\n",
            path, (long long)n, n == 1 ? "" : "s", dp, dp, n + 1 < dp ? "s" : "", (long long)n,
            last, n + 1 < dp ? "" : "s");
    return 1;
}

void train_cmd_plan_usage(FILE *f) {
    fprintf(f,
            "usage: titan plan [--config FILE] [--world N] [--budget-gib G] [--hf-config FILE]\n"
            "                  [--set KEY=VALUE] [--section.key=value ...]\n"
            "Prints the per-rank memory (parameters, gradients, AdamW state, units in flight,\n"
            "communication buffers, activations with and without activation checkpointing) and\n"
            "the bytes each collective moves per step, for the job config run on N ranks\n"
            "(default 1), without allocating the model.\n"
            "  --hf-config FILE   model arguments from a Hugging Face config.json (MoE flavors);\n"
            "                     the config's [model] overrides still apply\n"
            "  --set KEY=VALUE    override a model argument (titan train's checks apply)\n"
            "  --budget-gib G     say whether the total fits G GiB per rank\n");
}

/* titan plan: memory and traffic of a config on N ranks (train/plan.c). */
int train_cmd_plan(int argc, char **argv, base_err *err) {
    int world = 1;
    double budget = 0;
    const char *hf = NULL;
    /* --set KEY=V: a model field of titan train's config becomes --model.FIELD=V (so every
     * check train makes with it runs: a seq_len past max_seq_len raising it, ...); the other model
     * arguments (titan inspect's names: norm_topk_prob, ...) are set after the translation */
    char **rest = calloc((size_t)argc + 1, sizeof *rest),
         **sets = calloc((size_t)argc + 1, sizeof *sets);
    char **owned = calloc((size_t)argc + 1, sizeof *owned);
    int n_rest = 2, n_sets = 0, n_owned = 0;
    if (!rest || !sets || !owned) {
        free(rest), free(sets), free(owned);
        return base_fail(err, "out of memory");
    }
    rest[0] = argv[0];
    rest[1] = argv[1];
    int rc = 0, help = 0;
    for (int i = 2; i < argc && !rc && !help; i++) {
        const char *a = argv[i];
        const int has = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            help = 1;
        } else if (!strcmp(a, "--world") || !strcmp(a, "--budget-gib") ||
                   !strcmp(a, "--hf-config") || !strcmp(a, "--set")) {
            if (!has) {
                rc = base_fail(err, "option %s needs a value", a);
                break;
            }
            const char *v = argv[++i];
            int64_t n;
            if (!strcmp(a, "--world")) {
                if (base_parse_i64(v, &n) || n < 1 || n > 1 << 24)
                    rc = base_fail(err, "--world: '%s' is not a positive rank count", v);
                world = (int)n;
            } else if (!strcmp(a, "--budget-gib")) {
                if (base_parse_f64(v, &budget) || !(budget > 0) || budget > 1e9)
                    rc = base_fail(err, "--budget-gib: '%s' is not a positive number of GiB", v);
            } else if (!strcmp(a, "--hf-config")) {
                hf = v;
            } else {
                const char *eq = strchr(v, '=');
                const char *field = eq ? train_model_override_field(v, (size_t)(eq - v)) : NULL;
                char *opt = field ? malloc(strlen(field) + strlen(eq) + 16) : NULL;
                if (opt) {
                    sprintf(opt, "--model.%s%s", field, eq);
                    rest[n_rest++] = owned[n_owned++] = opt;
                } else {
                    sets[n_sets++] = argv[i];
                }
            }
        } else {
            rest[n_rest++] = argv[i];
        }
    }
    /* titan train's translation for `world` ranks; --hf-config is model.config_path, --set
     * edits the resolved arguments */
    train_config c;
    train_config_defaults(&c);
    train_cli cli;
    train_opts o;
    train_plan_in in = {0};
    train_plan p;
    if (help) {
        train_cmd_plan_usage(stdout);
        goto done;
    }
    if (!rc) rc = train_config_from_args(&c, n_rest, rest, 2, &cli, err);
    if (!rc && hf) rc = train_config_set(&c, "model.config_path", hf, "--hf-config", err);
    if (!rc) rc = train_config_translate(&c, world, &o, err);
    for (int i = 0; !rc && i < n_sets; i++) {
        char *eq = strchr(sets[i], '=');
        if (!eq) {
            rc = base_fail(err, "--set %s: expected KEY=VALUE", sets[i]);
            break;
        }
        *eq = 0;
        rc = model_args_set(&o.model, sets[i], eq + 1, 1, err);
        *eq = '=';
    }
    if (!rc) rc = model_args_validate(&o.model, err);
    if (!rc) in = train_plan_in_of(&o, world);
    if (!rc) rc = train_plan_compute(&in, &p, err);
    if (!rc) rc = train_param_groups_mesh_check(&o, p.par.dp_shard, p.par.tp, err);
    if (!rc) train_plan_print(&in, &p, budget, stdout);
    if (!rc) rc = train_param_groups_print(&o, stdout, err);
    /* each source of a mixture is split over the ranks on its own */
    for (int i = 0; !rc && i < (c.training.dataset_sources.n ? c.training.dataset_sources.n : 1);
         i++)
        train_plan_data(c.training.dataset_sources.n ? c.training.dataset_sources.v[i]
                                                     : c.training.dataset_path,
                        c.training.dataset_format,
                        i < c.training.dataset_fields.n && c.training.dataset_fields.v[i][0]
                            ? c.training.dataset_fields.v[i]
                            : c.training.dataset_field,
                        p.par.dp_replicate * p.par.dp_shard, stdout);
done:
    train_config_free(&c);
    for (int i = 0; i < n_owned; i++) free(owned[i]);
    free(owned);
    free(sets);
    free(rest);
    return rc;
}
