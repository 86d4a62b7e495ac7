/* dist: processes, communicators, collectives and the mesh (see dist.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distributed/internal.h"
#include "ops/ops.h"

static int g_mpi; /* MPI initialised by dist_init */
static int g_rank, g_world = 1;
static double g_comm_s; /* seconds inside collectives */

int dist_have_mpi(void) {
#ifdef TITAN_HAVE_MPI
    return 1;
#else
    return 0;
#endif
}

/* Started by an MPI launcher: OpenMPI's mpirun, or a PMI/PMIx one (MPICH, Slurm). */
static int launched_by_mpi(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

/* Appends t to out[cap] at *n, or (no room) stops every later append too. */
static void append(char *out, size_t cap, size_t *n, const char *t) {
    const size_t l = strlen(t);
    if (*n + l >= cap) {
        *n = cap;
        return;
    }
    memcpy(out + *n, t, l + 1);
    *n += l;
}

/* Appends " s" to out[cap] (a string) as one shell word: single-quoted unless plainly safe.
 * Returns -1, out unchanged, when it does not fit. */
static int shell_word(char *out, size_t cap, const char *s) {
    const size_t n0 = strlen(out);
    size_t n = n0;
    if (*s && strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                        "0123456789_-./=:,+@%") == strlen(s)) {
        append(out, cap, &n, " ");
        append(out, cap, &n, s);
    } else {
        append(out, cap, &n, " '");
        for (const char *c = s; *c; c++)
            append(out, cap, &n, *c == '\'' ? "'\\''" : (char[]){*c, 0});
        append(out, cap, &n, "'");
    }
    if (n < cap) return 0;
    out[n0] = 0;
    return -1;
}

/* torchrun (torch.distributed.run) starts WORLD_SIZE copies of the command with WORLD_SIZE,
 * RANK and LOCAL_RANK set; titan reads none of them, so each copy would train alone into one
 * dump folder. Refused unless an MPI launcher started the process (its variables win), with
 * the mpirun line of the same run printed (by RANK 0 only) for copying. */
static int refuse_torchrun(int argc, char **argv, base_err *err) {
    static const char *const vars[] = {"WORLD_SIZE", "RANK", "LOCAL_RANK"};
    char set[160] = "";
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i]))
            snprintf(set + strlen(set), sizeof set - strlen(set), "%s%s=%.20s", set[0] ? ", " : "",
                     vars[i], getenv(vars[i]));
    if (!set[0] || launched_by_mpi()) return 0;
    const char *ws = getenv("WORLD_SIZE"), *lws = getenv("LOCAL_WORLD_SIZE");
    const long n = ws ? strtol(ws, NULL, 10) : 0, local = lws ? strtol(lws, NULL, 10) : 0;
    char line[8192];
    if (n > 0)
        snprintf(line, sizeof line, "mpirun -np %ld", n);
    else
        snprintf(line, sizeof line, "mpirun -np N");
    if (n > 0 && local > 0 && local < n) /* several nodes: torchrun's --nproc-per-node each */
        snprintf(line + strlen(line), sizeof line - strlen(line),
                 " --npernode %ld --hostfile HOSTFILE", local);
    for (int i = 0; i < argc; i++)
        if (shell_word(line, sizeof line, argv[i])) {
            snprintf(line + strlen(line), sizeof line - strlen(line), " ... (too long)");
            break;
        }
    const char *rank = getenv("RANK");
    const int printer = !rank || !strcmp(rank, "0");
    if (printer)
        fprintf(stderr, "titan: the same run under MPI (one process per rank):\n  %s\n", line);
    return base_fail(err,
                     "started by torchrun (%s) and not by an MPI launcher: titan ranks are MPI "
                     "processes, and it reads none of torchrun's variables, so each process "
                     "would train alone into the same dump folder. Launch it with mpirun (%s)%s",
                     set, printer ? "the line above" : "RANK 0 prints the line",
                     n > 0 && local > 0 && local < n
                         ? "; HOSTFILE lists the nodes, one slot per process on each"
                         : "");
}

int dist_init(int *argc, char ***argv, base_err *err) {
    if (g_mpi) return 0;
    if (refuse_torchrun(*argc, *argv, err)) return -1;
#ifdef TITAN_HAVE_MPI
    if (launched_by_mpi()) {
        int provided; /* MULTIPLE: the watchdog thread reads the other ranks' records */
        if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
            return base_fail(err, "MPI_Init failed");
        g_mpi = 1;
        /* the default, said explicitly: an MPI error stops every rank, never a hang */
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
        MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
        MPI_Comm_size(MPI_COMM_WORLD, &g_world);
    }
#else
    (void)argc;
    (void)argv;
    if (launched_by_mpi() && getenv("OMPI_COMM_WORLD_SIZE") &&
        atoi(getenv("OMPI_COMM_WORLD_SIZE")) > 1)
        return base_fail(err,
                         "started by mpirun with %s ranks, but this titan was built without "
                         "MPI (install libopenmpi-dev and rebuild)",
                         getenv("OMPI_COMM_WORLD_SIZE"));
#endif
    return 0;
}

void dist_finalize(void) {
#ifdef TITAN_HAVE_MPI
    if (g_mpi) dist_wd_finalize();
    if (g_mpi) MPI_Finalize();
#endif
    g_mpi = 0;
}

int dist_world_rank(void) {
    return g_rank;
}

int dist_world_size(void) {
    return g_world;
}

_Noreturn void dist_abort(int code) {
    fflush(stdout);
    fflush(stderr);
#ifdef TITAN_HAVE_MPI
    if (g_mpi && g_world > 1) MPI_Abort(MPI_COMM_WORLD, code);
#endif
    exit(code);
}

double dist_comm_seconds(void) {
    return g_comm_s;
}

/* ---- communicators -------------------------------------------------------------------- */

static dist_comm *comm_single(int slot) {
    dist_comm *c = calloc(1, sizeof *c);
    if (!c || !(c->members = malloc(sizeof(int)))) {
        free(c);
        return NULL;
    }
#ifdef TITAN_HAVE_MPI
    c->comm = MPI_COMM_NULL;
#endif
    c->size = 1;
    c->slot = slot;
    c->members[0] = g_rank;
    return c;
}

/* The group of ranks sharing `color`, ordered by key (MPI_Comm_split); slot: which of the
 * mesh's groups it is (the watchdog counts collectives per slot). */
static dist_comm *comm_split(int color, int key, int slot) {
#ifdef TITAN_HAVE_MPI
    if (g_mpi) {
        dist_comm *c = calloc(1, sizeof *c);
        if (!c || !(c->members = malloc(sizeof(int) * (size_t)g_world))) {
            free(c);
            return NULL;
        }
        /* the world as a group, for the watchdog's record of the split itself */
        int *everyone = c->members;
        for (int r = 0; r < g_world; r++) everyone[r] = r;
        dist_comm world = {.comm = MPI_COMM_WORLD,
                           .size = g_world,
                           .rank = g_rank,
                           .slot = DIST_WD_WORLD,
                           .members = everyone};
        const double t0 = dist_wd_enter(&world, DIST_OP_SPLIT, 0, 0);
        MPI_Comm_split(MPI_COMM_WORLD, color, key, &c->comm);
        g_comm_s += dist_wd_leave(t0);
        MPI_Comm_size(c->comm, &c->size);
        MPI_Comm_rank(c->comm, &c->rank);
        c->slot = slot;
        MPI_Group wg, cg;
        MPI_Comm_group(MPI_COMM_WORLD, &wg);
        MPI_Comm_group(c->comm, &cg);
        int *mine = malloc(sizeof(int) * (size_t)c->size);
        for (int i = 0; mine && i < c->size; i++) mine[i] = i;
        if (mine) MPI_Group_translate_ranks(cg, c->size, mine, wg, c->members);
        MPI_Group_free(&wg);
        MPI_Group_free(&cg);
        free(mine);
        return c;
    }
#endif
    (void)color;
    (void)key;
    return comm_single(slot);
}

static void comm_free(dist_comm *c) {
    if (!c) return;
#ifdef TITAN_HAVE_MPI
    if (c->comm != MPI_COMM_NULL) MPI_Comm_free(&c->comm);
#endif
    free(c->members);
    free(c);
}

int dist_comm_size(const dist_comm *c) {
    return c->size;
}

int dist_comm_rank(const dist_comm *c) {
    return c->rank;
}

#ifdef TITAN_HAVE_MPI
#define MULTI(c) ((c)->size > 1)
#endif

void dist_barrier(dist_comm *c) {
#ifdef TITAN_HAVE_MPI
    if (MULTI(c)) {
        const double t0 = dist_wd_enter(c, DIST_OP_BARRIER, 0, 0);
        MPI_Barrier(c->comm);
        g_comm_s += dist_wd_leave(t0);
    }
#else
    (void)c;
#endif
}

#ifdef TITAN_HAVE_MPI
static void allreduce(dist_comm *c, void *x, int n, MPI_Datatype t, MPI_Op op) {
    int tsize;
    MPI_Type_size(t, &tsize);
    const double t0 = dist_wd_enter(c, DIST_OP_ALLREDUCE, 0, (double)n * tsize);
    MPI_Allreduce(MPI_IN_PLACE, x, n, t, op, c->comm);
    g_comm_s += dist_wd_leave(t0);
}
#endif

void dist_allreduce_f64(dist_comm *c, double *x, int n) {
#ifdef TITAN_HAVE_MPI
    if (MULTI(c)) allreduce(c, x, n, MPI_DOUBLE, MPI_SUM);
#else
    (void)c, (void)x, (void)n;
#endif
}

void dist_allreduce_max_f64(dist_comm *c, double *x, int n) {
#ifdef TITAN_HAVE_MPI
    if (MULTI(c)) allreduce(c, x, n, MPI_DOUBLE, MPI_MAX);
#else
    (void)c, (void)x, (void)n;
#endif
}

void dist_allreduce_i64(dist_comm *c, int64_t *x, int n) {
#ifdef TITAN_HAVE_MPI
    if (MULTI(c)) allreduce(c, x, n, MPI_INT64_T, MPI_SUM);
#else
    (void)c, (void)x, (void)n;
#endif
}

void dist_allreduce_f32(dist_comm *c, float *x, size_t n) {
#ifdef TITAN_HAVE_MPI
    const size_t chunk = (size_t)1 << 30; /* MPI counts are int */
    for (size_t i = 0; MULTI(c) && i < n; i += chunk)
        allreduce(c, x + i, (int)(n - i < chunk ? n - i : chunk), MPI_FLOAT, MPI_SUM);
#else
    (void)c, (void)x, (void)n;
#endif
}

void dist_allgather_bytes(dist_comm *c, const void *send, void *recv, size_t bytes) {
#ifdef TITAN_HAVE_MPI
    if (MULTI(c)) {
        const double t0 = dist_wd_enter(c, DIST_OP_ALLGATHER, 0, (double)bytes * c->size);
        MPI_Allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, c->comm);
        g_comm_s += dist_wd_leave(t0);
        return;
    }
#endif
    if (recv != send) memcpy(recv, send, bytes);
}

void dist_bcast_bytes(dist_comm *c, void *buf, size_t bytes, int root) {
#ifdef TITAN_HAVE_MPI
    if (MULTI(c)) {
        const double t0 = dist_wd_enter(c, DIST_OP_BCAST, 0, (double)bytes);
        MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, c->comm);
        g_comm_s += dist_wd_leave(t0);
        return;
    }
#endif
    (void)c;
    (void)buf;
    (void)bytes;
    (void)root;
}

int dist_agree(dist_comm *c, int rc, const char *what, base_err *err) {
    int64_t bad = rc != 0;
    dist_allreduce_i64(c, &bad, 1);
    if (!bad) return 0;
    /* the lowest failing world rank (a max of its negation), then its message from it alone:
     * two small collectives, nothing sized by the group, only on the failure path */
    double lowest = rc ? -(double)dist_world_rank() : -1e300,
           who = rc ? (double)dist_comm_rank(c) : -1;
    double v[2] = {lowest, 0};
    dist_allreduce_max_f64(c, v, 1);
    v[1] = rc && v[0] == lowest ? who : -1; /* that rank's place in c */
    dist_allreduce_max_f64(c, v + 1, 1);
    char msg[sizeof err->msg];
    if (rc) snprintf(msg, sizeof msg, "%s", err->msg[0] ? err->msg : "(no message)");
    dist_bcast_bytes(c, msg, sizeof msg, (int)v[1]);
    if (!rc) base_fail(err, "rank %.0f %s: %s", -v[0], what, msg);
    return -1;
}

void dist_alltoall_i32(dist_comm *c, const int32_t *send, int32_t *recv, int n) {
#ifdef TITAN_HAVE_MPI
    if (MULTI(c)) {
        const double t0 = dist_wd_enter(c, DIST_OP_ALLTOALL, 0, 4.0 * n * c->size);
        MPI_Alltoall(send, n, MPI_INT32_T, recv, n, MPI_INT32_T, c->comm);
        g_comm_s += dist_wd_leave(t0);
        return;
    }
#endif
    if (recv != send) memcpy(recv, send, sizeof(int32_t) * (size_t)n);
}

void dist_alltoallv_rows(dist_comm *c, const void *send, const int32_t *scount, void *recv,
                         const int32_t *rcount, size_t row) {
#ifdef TITAN_HAVE_MPI
    if (MULTI(c)) {
        /* counts and displacements in rows of a contiguous type: int rows, not int bytes */
        const int P = c->size;
        int *sc = malloc(sizeof(int) * 4 * (size_t)P), *sd = sc + P, *rc = sd + P, *rd = rc + P;
        if (!sc) {
            fprintf(stderr, "dist: out of memory in alltoallv\n");
            dist_abort(1);
        }
        for (int r = 0, s = 0, q = 0; r < P; s += scount[r], q += rcount[r], r++)
            sc[r] = scount[r], sd[r] = s, rc[r] = rcount[r], rd[r] = q;
        MPI_Datatype t;
        MPI_Type_contiguous((int)row, MPI_BYTE, &t);
        MPI_Type_commit(&t);
        const double t0 = dist_wd_enter(c, DIST_OP_ALLTOALLV, 0,
                                        (double)sd[P - 1] * row + (double)sc[P - 1] * row);
        MPI_Alltoallv(send, sc, sd, t, recv, rc, rd, t, c->comm);
        g_comm_s += dist_wd_leave(t0);
        MPI_Type_free(&t);
        free(sc);
        return;
    }
#endif
    if (recv != send) memcpy(recv, send, row * (size_t)scount[0]);
    (void)rcount;
}

/* x[0, n) = the bf16 values held in x's first 2n bytes, as fp32, in place. The elements are
 * expanded top half first, then the top half of the rest, and so on: a pass over [lo, hi),
 * lo = ceil(hi / 2), writes bytes [4 lo, 4 hi) and reads [2 lo, 2 hi), which do not overlap
 * (2 hi <= 4 lo) and which no earlier pass wrote (those wrote at and above byte 4 hi): so
 * every pass is one parallel conversion and no staging buffer is needed. */
static void bf16_expand_in_place(float *x, size_t n) {
    const uint16_t *h = (const uint16_t *)x;
    size_t hi = n;
    for (; hi > 1; hi = (hi + 1) / 2) ops_bf16_to_f32(x + (hi + 1) / 2, h + (hi + 1) / 2, hi / 2);
    if (hi == 1) ops_bf16_to_f32(x, h, 1); /* element 0 reads its bytes before writing them */
}

void dist_allgather_f32(dist_comm *c, const float *send, float *recv, size_t n, dist_dtype t) {
    if (t == DIST_BF16) { /* this rank's part rounded into its slot of recv's bf16 view */
        uint16_t *h = (uint16_t *)recv;
        ops_bf16_from_f32(h + (size_t)c->rank * n, send, n);
#ifdef TITAN_HAVE_MPI
        if (MULTI(c)) {
            const double t0 = dist_wd_enter(c, DIST_OP_ALLGATHER, 0, 2.0 * n * c->size);
            MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, h, (int)n, MPI_UINT16_T, c->comm);
            g_comm_s += dist_wd_leave(t0);
        }
#endif
        bf16_expand_in_place(recv, n * (size_t)c->size);
        return;
    }
#ifdef TITAN_HAVE_MPI
    if (MULTI(c)) {
        const double t0 = dist_wd_enter(c, DIST_OP_ALLGATHER, 0, 4.0 * n * c->size);
        MPI_Allgather(send, (int)n, MPI_FLOAT, recv, (int)n, MPI_FLOAT, c->comm);
        g_comm_s += dist_wd_leave(t0);
        return;
    }
#endif
    if (recv != send) memcpy(recv, send, n * sizeof(float));
}

void dist_reduce_scatter_block_f32(dist_comm *c, const float *send, float *recv, size_t n) {
#ifdef TITAN_HAVE_MPI
    if (MULTI(c)) {
        const double t0 = dist_wd_enter(c, DIST_OP_REDUCE_SCATTER, 0, 4.0 * n * c->size);
        MPI_Reduce_scatter_block(send, recv, (int)n, MPI_FLOAT, MPI_SUM, c->comm);
        g_comm_s += dist_wd_leave(t0);
        return;
    }
#endif
    if (recv != send) memcpy(recv, send, n * sizeof(float));
}

void dist_iallgatherv(dist_comm *c, const void *send, void *recv, const int *counts,
                      const int *displs, size_t elem, dist_req *r) {
    r->active = 0;
#ifdef TITAN_HAVE_MPI
    if (MULTI(c)) {
        double t0 = base_now();
        const MPI_Datatype t = elem == 2 ? MPI_UINT16_T : MPI_FLOAT;
        r->comm = c;
        r->seq = dist_wd_start(c);
        r->bytes = 0;
        for (int i = 0; i < c->size; i++) r->bytes += (double)elem * counts[i];
        MPI_Iallgatherv(send, counts[c->rank], t, recv, counts, displs, t, c->comm, &r->req);
        dist_wd_posted(c, t0);
        g_comm_s += base_now() - t0;
        r->active = 1;
        return;
    }
#endif
    char *at = (char *)recv + elem * (size_t)displs[0];
    if (at != send) memcpy(at, send, elem * (size_t)counts[0]);
}

double dist_wait(dist_req *r) {
    if (!r->active) return 0;
    double t = 0;
#ifdef TITAN_HAVE_MPI
    const double t0 = dist_wd_enter(r->comm, DIST_OP_IALLGATHER, r->seq, r->bytes);
    MPI_Wait(&r->req, MPI_STATUS_IGNORE);
    t = dist_wd_leave(t0);
    g_comm_s += t;
#endif
    r->active = 0;
    return t;
}

double dist_reduce_scatter_f32(dist_comm *c, const float *send, float *recv, const int *counts) {
#ifdef TITAN_HAVE_MPI
    if (MULTI(c)) {
        double bytes = 0;
        for (int i = 0; i < c->size; i++) bytes += 4.0 * counts[i];
        const double t0 = dist_wd_enter(c, DIST_OP_REDUCE_SCATTER, 0, bytes);
        MPI_Reduce_scatter(send, recv, counts, MPI_FLOAT, MPI_SUM, c->comm);
        const double t = dist_wd_leave(t0);
        g_comm_s += t;
        return t;
    }
#endif
    if (recv != send) memcpy(recv, send, sizeof(float) * (size_t)counts[0]);
    return 0;
}

/* ---- the mesh ------------------------------------------------------------------------- */

int dist_mesh_resolve(dist_mesh_cfg *c, int world, base_err *err) {
    if (c->pp > 1)
        return base_fail(err,
                         "parallelism.pipeline_parallel_degree: %d: pipeline parallelism is "
                         "not supported (use 1)",
                         c->pp);
    if (c->cp > 1)
        return base_fail(err,
                         "parallelism.context_parallel_degree: %d: context parallelism is "
                         "not supported (use 1)",
                         c->cp);
    if (c->ep <= 0) c->ep = 1;
    if (c->dp_replicate < 1 || c->tp < 1 || c->dp_shard == 0 || c->dp_shard < -1)
        return base_fail(err, "parallelism: degrees must be positive (data_parallel_shard_degree "
                              "may be -1)");
    const long rest = (long)c->dp_replicate * c->tp;
    if (c->dp_shard == -1) {
        if (world % rest)
            return base_fail(err,
                             "parallelism: %d ranks do not divide into "
                             "data_parallel_replicate_degree %d x tensor_parallel_degree %d",
                             world, c->dp_replicate, c->tp);
        c->dp_shard = (int)(world / rest);
    }
    if (rest * c->dp_shard != world)
        return base_fail(err,
                         "parallelism: data_parallel_replicate_degree %d x "
                         "data_parallel_shard_degree %d x tensor_parallel_degree %d = %ld, "
                         "but there are %d ranks (mpirun -np)",
                         c->dp_replicate, c->dp_shard, c->tp, rest * c->dp_shard, world);
    if (c->ep > 1 && c->tp > 1)
        return base_fail(err,
                         "parallelism.expert_parallel_degree %d with tensor_parallel_degree %d: "
                         "expert parallelism needs tp = 1 (TP does not support MoE)",
                         c->ep, c->tp);
    if (c->ep > 1 && c->dp_shard % c->ep)
        return base_fail(err,
                         "parallelism.expert_parallel_degree %d must divide "
                         "data_parallel_shard_degree %d (EP is carved from the FSDP ranks)",
                         c->ep, c->dp_shard);
    return 0;
}

int dist_mesh_init(dist_mesh *m, const dist_mesh_cfg *cfg, base_err *err) {
    memset(m, 0, sizeof *m);
    dist_mesh_cfg c = *cfg;
    if (dist_mesh_resolve(&c, g_world, err)) return -1;
    m->rank = g_rank;
    m->world = g_world;
    m->dp_replicate = c.dp_replicate;
    m->dp_shard = c.dp_shard;
    m->tp = c.tp;
    m->tp_rank = g_rank % c.tp;
    m->shard_rank = g_rank / c.tp % c.dp_shard;
    m->replicate_rank = g_rank / c.tp / c.dp_shard;
    m->dp_rank = m->replicate_rank * c.dp_shard + m->shard_rank;
    m->dp_size = c.dp_replicate * c.dp_shard;
    m->world_comm = comm_split(0, g_rank, DIST_WD_WORLD);
    m->shard_comm = comm_split(m->replicate_rank * c.tp + m->tp_rank, m->shard_rank, DIST_WD_SHARD);
    m->replicate_comm =
        comm_split(m->shard_rank * c.tp + m->tp_rank, m->replicate_rank, DIST_WD_REPLICATE);
    m->dp_comm = comm_split(m->tp_rank, m->dp_rank, DIST_WD_DP);
    m->tp_comm = comm_split(m->dp_rank, m->tp_rank, DIST_WD_TP);
    m->ep = c.ep;
    m->ep_rank = m->shard_rank % c.ep;
    m->ep_comm =
        comm_split((m->replicate_rank * c.dp_shard + m->shard_rank / c.ep) * c.tp + m->tp_rank,
                   m->ep_rank, DIST_WD_EP);
    m->efsdp = c.dp_shard / c.ep;
    m->efsdp_rank = m->shard_rank / c.ep;
    m->efsdp_comm = comm_split((m->replicate_rank * c.ep + m->ep_rank) * c.tp + m->tp_rank,
                               m->efsdp_rank, DIST_WD_EFSDP);
    if (!m->world_comm || !m->shard_comm || !m->replicate_comm || !m->dp_comm || !m->tp_comm ||
        !m->ep_comm || !m->efsdp_comm) {
        dist_mesh_free(m);
        return base_fail(err, "out of memory");
    }
    return 0;
}

void dist_mesh_free(dist_mesh *m) {
    comm_free(m->world_comm);
    comm_free(m->shard_comm);
    comm_free(m->replicate_comm);
    comm_free(m->dp_comm);
    comm_free(m->tp_comm);
    comm_free(m->ep_comm);
    comm_free(m->efsdp_comm);
    memset(m, 0, sizeof *m);
}

int dist_reshard_parse(const char *s, dist_reshard *out) {
    if (!strcmp(s, "default"))
        *out = DIST_RESHARD_DEFAULT;
    else if (!strcmp(s, "always"))
        *out = DIST_RESHARD_ALWAYS;
    else if (!strcmp(s, "never"))
        *out = DIST_RESHARD_NEVER;
    else
        return -1;
    return 0;
}
