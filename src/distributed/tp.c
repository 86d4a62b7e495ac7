/* dist: tensor-parallel pieces and full-model assembly over flat buffers (see dist.h). The
 * trainer describes a sliced model as runs (dist_tp_run); nothing here knows the model. */
#include <stdlib.h>
#include <string.h>

#include "distributed/dist.h"

/* ---- the model's collectives (trampolines for model_tp / model_ep; ctx: a dist_comm) --- */
void dist_tp_allgather(void *ctx, float *full, const float *local, size_t n, int bf16) {
    dist_allgather_f32(ctx, local, full, n, bf16 ? DIST_BF16 : DIST_F32);
}
void dist_tp_reduce_scatter(void *ctx, float *local, const float *full, size_t n) {
    dist_reduce_scatter_block_f32(ctx, full, local, n);
}
void dist_tp_allreduce(void *ctx, double *x, int n, int max) {
    if (max)
        dist_allreduce_max_f64(ctx, x, n);
    else
        dist_allreduce_f64(ctx, x, n);
}
void dist_ep_alltoall(void *ctx, const int32_t *send, int32_t *recv, int n) {
    dist_alltoall_i32(ctx, send, recv, n);
}
void dist_ep_alltoallv(void *ctx, const void *send, const int32_t *scount, void *recv,
                       const int32_t *rcount, size_t row) {
    dist_alltoallv_rows(ctx, send, scount, recv, rcount, row);
}

/* Appends piece x to v[*n], merged into the last one when both are single rows that are
 * adjacent in both layouts. Inlined: called out of line, GCC 12 (x86-64-v3) built each 40-byte
 * argument in a ymm register and emitted no vzeroupper anywhere in dist_tp_pieces_init, and the
 * dirty upper halves made every later call of glibc's SSE-encoded log() wrapper 40x slower (the
 * random init after it: base_rng_normal; tests/unit/test_upper_state.c). Inlined, the loop ends
 * in a vzeroupper. */
static inline __attribute__((always_inline)) void piece_add(dist_piece *v, int *n, dist_piece x) {
    dist_piece *p = *n ? &v[*n - 1] : NULL;
    if (p && p->rows == 1 && x.rows == 1 && p->shard_off + p->row_len == x.shard_off &&
        p->global_off + p->row_len == x.global_off) {
        p->row_len += x.row_len;
        p->stride = p->row_len;
    } else {
        v[(*n)++] = x;
    }
}

int dist_tp_pieces_init(dist_tp_pieces *t, const dist_tp_run *runs, size_t n, int tp_size,
                        int tp_rank, base_err *err) {
    memset(t, 0, sizeof *t);
    t->all = calloc(n + 1, sizeof *t->all);
    t->save = calloc(n + 1, sizeof *t->save);
    t->rep = calloc(n + 1, sizeof *t->rep);
    if (!t->all || !t->save || !t->rep) return base_fail(err, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const dist_tp_run *u = &runs[i];
        const dist_piece x = {u->shard_off, u->full_offset, u->row_len, u->rows, u->full_stride};
        piece_add(t->all, &t->n_all, x);
        if (tp_size == 1) continue;
        if (!u->replicated || tp_rank == 0) piece_add(t->save, &t->n_save, x);
        if (u->replicated) { /* norm weights: never column-split, so one row */
            piece_add(t->rep, &t->n_rep,
                      (dist_piece){u->shard_off, u->offset, u->row_len, 1, u->row_len});
            t->rep_len += u->row_len;
        }
    }
    if (tp_size == 1) {
        memcpy(t->save, t->all, sizeof *t->all * (size_t)t->n_all);
        t->n_save = t->n_all;
    }
    if (t->rep_len && !(t->rep_buf = base_alloc(t->rep_len * sizeof(float))))
        return base_fail(err, "out of memory");
    return 0;
}

void dist_tp_pieces_free(dist_tp_pieces *t) {
    free(t->all);
    free(t->save);
    free(t->rep);
    base_free(t->rep_buf);
    memset(t, 0, sizeof *t);
}

double dist_tp_grad_sumsq(dist_tp_pieces *t, float *gs, size_t ns,
                          double (*sumsq)(const float *, size_t), dist_comm *c) {
    /* the replicated gradients, packed into one all-reduce over the group */
    float *buf = t->rep_buf;
    size_t at = 0;
    for (int i = 0; i < t->n_rep; at += t->rep[i++].row_len)
        memcpy(buf + at, gs + t->rep[i].shard_off, t->rep[i].row_len * sizeof(float));
    dist_allreduce_f32(c, buf, t->rep_len);
    at = 0;
    for (int i = 0; i < t->n_rep; at += t->rep[i++].row_len)
        memcpy(gs + t->rep[i].shard_off, buf + at, t->rep[i].row_len * sizeof(float));
    const double rep_sq = sumsq(buf, t->rep_len);
    /* the group's squares, the replicated ones counted once */
    const int tp = dist_comm_size(c);
    double s = sumsq(gs, ns) - rep_sq * (tp - 1) / tp;
    dist_allreduce_f64(c, &s, 1);
    return s;
}

void dist_tp_copy(const dist_tp_run *runs, size_t n, float *local, float *full, int to_full,
                  int rank) {
    for (size_t i = 0; i < n; i++) {
        const dist_tp_run *u = &runs[i];
        for (size_t k = 0; k < u->rows; k++) {
            float *l = local + u->offset + k * u->row_len;
            float *w = full + u->full_offset + k * u->full_stride;
            if (!to_full)
                memcpy(l, w, u->row_len * sizeof(float));
            else if (!u->replicated || rank == 0)
                memcpy(w, l, u->row_len * sizeof(float));
        }
    }
}

void dist_tp_assemble(const dist_tp_run *runs, size_t n, float *local, float *full, size_t full_n,
                      int rank, dist_comm *group) {
    memset(full, 0, full_n * sizeof(float));
    dist_tp_copy(runs, n, local, full, 1, rank);
    dist_allreduce_f32(group, full, full_n);
}
