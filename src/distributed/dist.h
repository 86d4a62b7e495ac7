/* dist: the process mesh, collectives and FSDP (ZeRO-3) over flat parameter buffers.
 *
 * Built with MPI (TITAN_HAVE_MPI) and launched by mpirun, every rank runs the same program;
 * built without MPI, or run as one plain process, the mesh has one rank and every collective
 * is trivial (a copy or nothing): the same calls serve 1 and N ranks.
 *
 * Mesh: world = dp_replicate x dp_shard x tp, tp innermost (ranks of one TP group are
 * adjacent, so they share a machine under a by-slot hostfile), then dp_shard, then
 * dp_replicate: rank = (replicate_rank * dp_shard + shard_rank) * tp + tp_rank.
 * The data-parallel index (which documents / windows a rank reads) is
 * dp_rank = replicate_rank * dp_shard + shard_rank of dp_size = dp_replicate * dp_shard.
 *
 * dist moves flat float buffers it is given; it never includes model internals. */
#ifndef TITAN_DIST_H
#define TITAN_DIST_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

/* ---- processes ---------------------------------------------------------------------- */

/* Initialises MPI when titan was built with it and started by an MPI launcher (mpirun sets
 * OMPI_COMM_WORLD_SIZE / PMI_SIZE / PMIX_RANK); otherwise one process. Idempotent. */
int dist_init(int *argc, char ***argv, base_err *err);
/* MPI_Finalize when dist_init started MPI. */
void dist_finalize(void);
int dist_world_rank(void);
int dist_world_size(void);
/* 1 when built with MPI. */
int dist_have_mpi(void);
/* Stops every rank (MPI_Abort) after this one has printed its error; exit(code) alone. */
_Noreturn void dist_abort(int code);

/* ---- communicators and collectives ---------------------------------------------------
 * A dist_comm is a group of ranks (an MPI communicator, or the single process). Every
 * collective is called by all ranks of the group in the same order; an MPI error stops all
 * ranks (MPI_ERRORS_ARE_FATAL), never a hang. Sums are in place. */
typedef struct dist_comm dist_comm;

int dist_comm_size(const dist_comm *c);
int dist_comm_rank(const dist_comm *c);
void dist_barrier(dist_comm *c);
void dist_allreduce_f64(dist_comm *c, double *x, int n);
void dist_allreduce_max_f64(dist_comm *c, double *x, int n);
void dist_allreduce_i64(dist_comm *c, int64_t *x, int n);
/* Sum of x[n] over the group, in place (chunked: n may exceed 2^31). */
void dist_allreduce_f32(dist_comm *c, float *x, size_t n);
/* What an exchange of fp32 values moves. DIST_BF16: each value rounded to bf16 (round to
 * nearest even, ops_bf16_from_f32) before it leaves and received as that bf16 value in fp32:
 * 2 bytes per element on the wire instead of 4. Exact (the receiver computes what fp32 transport
 * gives, bit for bit) exactly when every consumer of the received values rounds them to bf16
 * itself (rounding is idempotent): GEMM operands in a bf16 run. Never for sums. */
typedef enum { DIST_F32, DIST_BF16 } dist_dtype;
/* Tensor/sequence parallelism: recv[size * n] = every rank's send[n], in rank order, moved
 * as t (DIST_BF16: send must not overlap recv). */
void dist_allgather_f32(dist_comm *c, const float *send, float *recv, size_t n, dist_dtype t);
/* recv[n] = the sum over ranks of their send[rank * n, (rank + 1) * n) (send: size * n). */
void dist_reduce_scatter_block_f32(dist_comm *c, const float *send, float *recv, size_t n);
/* Expert parallelism: recv[size * n] = the n ints every rank sent to this one (send[r * n ..]
 * goes to rank r), in rank order. */
void dist_alltoall_i32(dist_comm *c, const int32_t *send, int32_t *recv, int n);
/* Rows of `row` bytes: send holds scount[r] rows for each rank r in rank order, recv gets
 * rcount[r] rows from each rank in rank order (the counts exchanged beforehand). */
void dist_alltoallv_rows(dist_comm *c, const void *send, const int32_t *scount, void *recv,
                         const int32_t *rcount, size_t row);
/* recv[size * bytes] = every rank's send[bytes], in rank order. */
void dist_allgather_bytes(dist_comm *c, const void *send, void *recv, size_t bytes);
/* buf[bytes] on every rank of c = root's (root: a rank of c). */
void dist_bcast_bytes(dist_comm *c, void *buf, size_t bytes, int root);
/* Whether rc was 0 on every rank of c (collective): 0 if so, else -1. When a rank failed, a
 * rank that did not gets "rank N <what>: <rank N's err>" in err (N the lowest failing world
 * rank; what says what it was doing, "could not write its shard"), and a failing rank keeps
 * its own: one rank's error aborts them all, and whichever prints first names the cause. */
int dist_agree(dist_comm *c, int rc, const char *what, base_err *err);
/* Seconds this process has spent inside collectives (waiting included) since the start. */
double dist_comm_seconds(void);

/* ---- the collective watchdog ----------------------------------------------------------
 * With several MPI ranks, a thread per rank stops every rank (MPI_Abort, exit 3) once this
 * rank has waited in one collective longer than the timeout, after printing the collective,
 * its group, and which of the group's ranks did not arrive and whether their processes run
 * (their records, read through an MPI window: see watchdog.c). A collective costs a few
 * plain stores. Naming the ranks needs MPI_THREAD_MULTIPLE (dist_init asks for it); without
 * it the message names the collective and the group only. One process: nothing runs. */
/* Collective over the world (an MPI window): call on every rank, early. timeout_s 0 = off;
 * setting names where it comes from in the message (a static string). */
int dist_watchdog_start(double timeout_s, const char *setting, base_err *err);
/* The timeout from now on (torchtitan's init timeout until step 1 ends, then its train
 * timeout); 0 = off; setting NULL keeps the last name. */
void dist_watchdog_set_timeout(double timeout_s, const char *setting);
/* Stops the thread (not collective; the window stays until dist_finalize). */
void dist_watchdog_stop(void);

/* ---- the mesh ------------------------------------------------------------------------- */
typedef struct {
    int dp_replicate; /* >= 1 */
    int dp_shard;     /* >= 1, or -1: the ranks left over, world / (dp_replicate * tp) */
    int tp;           /* >= 1 */
    int pp, cp;       /* must be 1: pipeline and context parallelism are not supported */
    int ep;           /* expert parallelism (0 reads as 1): carved from dp_shard, which it must
                         divide (experts FSDP-sharded over dp_shard / ep ranks); tp = 1 */
} dist_mesh_cfg;

typedef struct {
    int rank, world;
    int dp_replicate, dp_shard, tp;
    int replicate_rank, shard_rank, tp_rank;
    int dp_rank, dp_size;
    dist_comm *world_comm;
    dist_comm *shard_comm;     /* the dp_shard ranks holding one model's shards (FSDP) */
    dist_comm *replicate_comm; /* the dp_replicate ranks holding the same shard (HSDP) */
    dist_comm *dp_comm;        /* dp_replicate x dp_shard: token counts, loss */
    dist_comm *tp_comm;        /* the tp ranks of one tensor-parallel group */
    /* Expert parallelism: the ep consecutive shard ranks of one group split the experts
     * (ep_rank = shard_rank % ep); ep = 1: ep_comm is the one-process group. */
    int ep, ep_rank;
    dist_comm *ep_comm;
    /* The dp_shard / ep shard ranks with this ep_rank (the same experts): FSDP shards the
     * expert stacks over them (efsdp_rank = shard_rank / ep); ep = dp_shard: one process. */
    int efsdp, efsdp_rank;
    dist_comm *efsdp_comm;
} dist_mesh;

/* Checks the degrees against the world size (errors name the field) and splits the
 * communicators (MPI_Comm_split). */
int dist_mesh_init(dist_mesh *m, const dist_mesh_cfg *c, base_err *err);
/* Resolves dp_shard = -1 and checks the product against world (no communicators): what
 * dist_mesh_init and `titan plan` agree on. */
int dist_mesh_resolve(dist_mesh_cfg *c, int world, base_err *err);
void dist_mesh_free(dist_mesh *m);

/* ---- FSDP ------------------------------------------------------------------------------
 * A model's parameters are one flat fp32 buffer of n floats split into units (contiguous
 * ranges). Each unit is sharded evenly over the dp_shard ranks: shard length
 * S_u = ceil(numel_u / dp_shard) (padded, so any size divides), rank r owning elements
 * [r S_u, min((r + 1) S_u, numel_u)) of the unit. This rank's shards of all units, in unit
 * order, form its flat shard vector (parameters, gradients; the optimizer's moments mirror
 * it); padding elements stay zero.
 *
 * The full buffers (parameters and gradients, n floats each) are virtual: a unit's range is
 * resident only between its gather and its release (pages returned with madvise), so a rank
 * holds the shards plus the few units in flight. With dp_shard = 1 the shard IS the full
 * buffer (the model's own allocation), and gather, release and reduce-scatter do nothing.
 *
 * Per unit, driven by the model's hooks (dist_fsdp_hook):
 *   forward begin  : wait for / do the all-gather of its parameters, then start the next
 *                    unit's all-gather (non-blocking: prefetch while this one computes)
 *   forward end    : release its parameters (reshard_after_forward; see dist_reshard)
 *   backward begin : gather again if released; prefetch the previous unit
 *   backward end   : reduce-scatter its gradients with SUM into the shard (the loss is
 *                    already divided by the global token count), release grads and params
 * A unit whose backward reads none of its parameters (bwd_without_params: the embedding,
 * whose backward scatters rows of the output gradient into its gradient) is neither gathered
 * at its backward begin nor prefetched for it; its gradients are reduce-scattered all the
 * same. The pinned unit (a tied embedding, read by the head's backward) is gathered then
 * anyway: it stays from its forward on.
 * Expert parallelism: a unit's last `local` elements (its blocks' expert stacks, this EP
 * rank's experts) are sharded the same way but over the efsdp ranks (those holding the same
 * experts) instead: shard length L_u = ceil(local_u / efsdp), after the unit's dp_shard part
 * in the shard vector; gathered and reduce-scattered over efsdp alongside the rest (each EP
 * group's owner saw every token of its group routed to the expert; efsdp sums the groups).
 * ep = dp_shard: efsdp = 1, the local part whole in the shard, copied and kept as it is.
 * HSDP (dp_replicate > 1): dist_fsdp_sync_replicas all-reduces the shard gradients over the
 * replicas once per step.
 * bf16 transport (dist_fsdp_cfg.gather_bf16, bf16 mixed precision): the all-gathers move each
 * shard rounded to bf16 (round to nearest even), 2 bytes an element, except the elements of
 * the `exact` spans (parameters some fp32 op reads), which arrive exact: a unit without such
 * elements is one bf16 all-gather, a unit of exact ones only one fp32 all-gather, and a mixed
 * unit one bf16 all-gather of the whole plus one fp32 all-gather of its exact elements,
 * written over their rounded values (when exact ones are under half the unit; else fp32).
 * The full buffer then holds bf16-rounded values outside the spans. Rounding is idempotent,
 * so a consumer that rounds them to bf16 itself (a bf16 GEMM) sees bitwise what it would
 * have seen: the caller names as exact whatever else reads them. Gradients are
 * reduce-scattered in fp32, the shards are never rounded, and dist_fsdp_gather_all gathers
 * exact values (exports, evaluation copies). A group of one rank copies, exact. */
typedef enum {
    DIST_RESHARD_DEFAULT, /* blocks and an untied embedding after forward; the head stays */
    DIST_RESHARD_ALWAYS,  /* every unit after its forward */
    DIST_RESHARD_NEVER    /* parameters stay gathered from forward until their backward */
} dist_reshard;
int dist_reshard_parse(const char *s, dist_reshard *out); /* "default" | "always" | "never" */

typedef enum { DIST_FWD_BEGIN, DIST_FWD_END, DIST_BWD_BEGIN, DIST_BWD_END } dist_phase;

typedef struct {
    size_t offset, numel;   /* the unit's range in the flat buffer */
    size_t local;           /* its last `local` elements are sharded over efsdp (EP experts) */
    int bwd_without_params; /* 1: its backward reads none of its parameters: not gathered
                               for it (0, the safe default: gathered again if released) */
} dist_unit;

typedef struct {
    size_t shard_off, global_off, len; /* a piece of the shard vector and where it belongs */
} dist_range;

typedef struct dist_fsdp dist_fsdp;

typedef struct {
    size_t offset, len; /* elements [offset, offset + len) of the flat buffer */
} dist_span;

typedef struct {
    const dist_unit *units; /* [n_units], in buffer order, covering [0, n_floats) */
    int n_units;
    size_t n_floats;
    dist_reshard reshard;
    int head_unit;   /* the unit whose parameters stay by default (the last) */
    int pinned_unit; /* a unit kept gathered from forward to backward (tied embedding
                        used by the head), or -1 */
    float *w, *g;    /* dp_shard = 1: the model's own buffers (aliased as the shard) */
    int gather_bf16; /* 1: bf16 transport (above); 0: every all-gather fp32 */
    /* bf16 transport: the caller's bf16 copy of the parameters ([n_floats] bf16 bits, at w's
     * element offsets; the model's weight copy when its engine's format is 2-byte bf16), or
     * NULL. A part that travels as bf16 is received straight into it (then expanded into the
     * full buffer), so the caller need not convert it again: dist_fsdp_hook says which. */
    uint16_t *w16;
    const dist_span *exact; /* [n_exact] in buffer order, disjoint: what stays fp32 */
    int n_exact;
} dist_fsdp_cfg;

int dist_fsdp_new(dist_fsdp **out, const dist_mesh *mesh, const dist_fsdp_cfg *c, base_err *err);
void dist_fsdp_free(dist_fsdp *f);
/* The full (virtual) parameter and gradient buffers [n_floats]: what the model computes on. */
float *dist_fsdp_full_params(const dist_fsdp *f);
float *dist_fsdp_full_grads(const dist_fsdp *f);
/* This rank's shard vector: parameters and gradients [dist_fsdp_shard_len]. */
float *dist_fsdp_shard_params(const dist_fsdp *f);
float *dist_fsdp_shard_grads(const dist_fsdp *f);
size_t dist_fsdp_shard_len(const dist_fsdp *f);
/* The shard vector's pieces (adjacent ones merged; one piece when dp_shard = 1). */
const dist_range *dist_fsdp_ranges(const dist_fsdp *f, int *n);
/* The unit holding shard-vector element i (for error messages). */
int dist_fsdp_unit_of(const dist_fsdp *f, size_t i);

/* The parts of a unit: its elements before the local part, and the local part. */
enum { DIST_W16_DENSE = 1, DIST_W16_LOCAL = 2 };
/* One model hook call: unit u reached phase p. Returns, for a BEGIN phase that completed a
 * gather of u, the DIST_W16_* mask of the parts it received into dist_fsdp_cfg.w16: there,
 * w16 now holds the bf16 bits of every element of the part (exact ones included, rounded
 * from their fp32 values); 0 otherwise (nothing gathered now, an fp32 part, no w16). */
int dist_fsdp_hook(dist_fsdp *f, int unit, dist_phase p);
/* Start of a step: zero the shard gradients, or with set_to_none leave them to be written:
 * P > 1, each unit's first reduce of the step stores its shard instead of adding (every unit
 * is reduced once a microbatch); P = 1, the shard is the model's gradient buffer, which the
 * trainer has the model's backward write (model_grad_set_to_none). Forget gathered parameters
 * (they are stale after the optimizer step). */
void dist_fsdp_begin_step(dist_fsdp *f, int set_to_none);
/* 1 when the hooks reduce each unit's gradients after its backward and leave them zero
 * (P > 1): every microbatch's backward may then write them (model_grad_set_to_none). */
int dist_fsdp_drops_grads(const dist_fsdp *f);
/* Copies this rank's shard of unit u out of the full buffer (written there by the caller:
 * initialisation, loading) and releases the unit. */
void dist_fsdp_store_unit(dist_fsdp *f, int unit);
/* All-gathers every unit into the full buffer, exact (fp32) under bf16 transport too (HF
 * export, sampling, a second model). */
void dist_fsdp_gather_all(dist_fsdp *f);
/* Releases every gathered unit. */
void dist_fsdp_release_all(dist_fsdp *f);
/* HSDP: sums the shard gradients over the dp_replicate ranks. */
void dist_fsdp_sync_replicas(dist_fsdp *f);

/* Traffic of this rank since creation: bytes received by all-gathers (of them
 * gather_bf16_bytes as bf16), bytes sent into reduce-scatters and replica all-reduces, and the
 * seconds spent waiting for them. A gather's bytes count the whole unit (its own shard too). */
typedef struct {
    double gather_bytes, gather_bf16_bytes, reduce_bytes, allreduce_bytes;
    double gather_s, reduce_s, allreduce_s;
    int64_t gathers, reduces;
} dist_fsdp_stats;
void dist_fsdp_get_stats(const dist_fsdp *f, dist_fsdp_stats *s);
/* What one all-gather of a part of len elements, exact of them fp32-only, moves (bytes of the
 * whole part, as dist_fsdp_stats counts them) under bf16 transport (bf16 1) or not; *bf16_bytes
 * (may be NULL) gets the part that travels as bf16, *collectives how many all-gathers it takes
 * (1, or 2 for a mixed part). `titan plan` counts with it. */
double dist_fsdp_part_bytes(size_t len, size_t exact, int bf16, double *bf16_bytes,
                            int *collectives);

/* ---- tensor parallelism: slices of a model in the full layout ------------------------
 * dist knows no model: the trainer describes this rank's slices as runs (what the model's
 * layout says, model_tp_runs), and dist moves the flat buffers they point into. A piece is
 * rows x row_len elements, contiguous at shard_off in this rank's shard vector, rows
 * global_off + i * stride in the global (tp = 1) buffer (a TP rank's column slice of a
 * row-parallel weight is one piece, not one per row). */
typedef struct {
    size_t shard_off, global_off, row_len, rows, stride;
} dist_piece;

/* One run of a sliced model: rows x row_len elements contiguous at offset in the local
 * layout (at shard_off in the shard vector), rows full_offset + i * full_stride in the full
 * one; replicated: the same on every rank of the group (norm weights; one row). */
typedef struct {
    size_t shard_off, offset, full_offset, row_len, rows, full_stride;
    int replicated;
} dist_tp_run;

/* Where this rank's shard vector goes in the full layout: `all` every piece (what a resume
 * loads), `save` those this rank writes (replicated ones by TP rank 0 only), `rep` the
 * pieces of replicated parameters (global_off in the local layout, one row each; their
 * gradients are summed over the group), rep_buf [rep_len] their packed gradients. Adjacent
 * contiguous pieces are merged; a column slice's rows stay one strided piece. With
 * tp_size 1, all = save = the runs (the FSDP ranges) and rep is empty. */
typedef struct {
    dist_piece *all, *save, *rep;
    int n_all, n_save, n_rep;
    size_t rep_len;
    float *rep_buf;
} dist_tp_pieces;
/* runs[n]: this rank's shard vector in order (shard_off set). */
int dist_tp_pieces_init(dist_tp_pieces *t, const dist_tp_run *runs, size_t n, int tp_size,
                        int tp_rank, base_err *err);
void dist_tp_pieces_free(dist_tp_pieces *t);
/* The global squared gradient norm over the TP group c from this rank's shard gradients
 * gs[ns]: sums the replicated parameters' gradients (each rank saw its sequence rows or its
 * heads only) over c in one packed all-reduce, then the group's squares with the replicated
 * ones counted once. sumsq: the trainer's sum of squares (its fixed reduction order). */
double dist_tp_grad_sumsq(dist_tp_pieces *t, float *gs, size_t ns,
                          double (*sumsq)(const float *, size_t), dist_comm *c);
/* Copies between this rank's slices (local, local layout) and a full buffer over runs[n]
 * (offset = local layout): to_full = 1 writes them into full (replicated ones from rank 0
 * only), 0 reads them. */
void dist_tp_copy(const dist_tp_run *runs, size_t n, float *local, float *full, int to_full,
                  int rank);
/* full[full_n] = the whole model from every rank's slices: zeroed, this rank's written
 * (rank: its index in group), summed over group. Collective over group. */
void dist_tp_assemble(const dist_tp_run *runs, size_t n, float *local, float *full, size_t full_n,
                      int rank, dist_comm *group);
/* The model's collectives as model_tp / model_ep call them; ctx: the group's dist_comm
 * (allgather's bf16: moved as DIST_BF16). */
void dist_tp_allgather(void *ctx, float *full, const float *local, size_t n, int bf16);
void dist_tp_reduce_scatter(void *ctx, float *local, const float *full, size_t n);
void dist_tp_allreduce(void *ctx, double *x, int n, int max);
void dist_ep_alltoall(void *ctx, const int32_t *send, int32_t *recv, int n);
void dist_ep_alltoallv(void *ctx, const void *send, const int32_t *scount, void *recv,
                       const int32_t *rcount, size_t row);

#endif
