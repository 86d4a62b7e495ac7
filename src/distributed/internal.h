/* Private to the dist module: the communicator and the few MPI calls FSDP needs, with
 * their one-process forms. */
#ifndef TITAN_DIST_INTERNAL_H
#define TITAN_DIST_INTERNAL_H

#include "distributed/dist.h"

#ifdef TITAN_HAVE_MPI
#include <mpi.h>
#endif

struct dist_comm {
#ifdef TITAN_HAVE_MPI
    MPI_Comm comm; /* MPI_COMM_NULL: the one-process group */
#endif
    int size, rank;
    int slot;     /* which of the mesh's groups (dist_wd_slot): the watchdog's counters */
    int *members; /* [size] world ranks, in group rank order */
};

/* A non-blocking collective in flight (active = 0: none). */
typedef struct {
#ifdef TITAN_HAVE_MPI
    MPI_Request req;
#endif
    int active;
    dist_comm *comm;
    int64_t seq;  /* its number on comm's slot (the watchdog's) */
    double bytes; /* what it moves (the profiler's event) */
} dist_req;

/* ---- the watchdog's record of this rank (watchdog.c) -------------------------------------
 * Slots: the mesh's groups in the order dist_mesh_init splits them (the same on every rank;
 * a rank belongs to one group per slot). */
enum {
    DIST_WD_WORLD,
    DIST_WD_SHARD,
    DIST_WD_REPLICATE,
    DIST_WD_DP,
    DIST_WD_TP,
    DIST_WD_EP,
    DIST_WD_EFSDP,
    DIST_WD_SLOTS
};
typedef enum {
    DIST_OP_SPLIT,
    DIST_OP_BARRIER,
    DIST_OP_ALLREDUCE,
    DIST_OP_ALLGATHER,
    DIST_OP_ALLTOALL,
    DIST_OP_ALLTOALLV,
    DIST_OP_REDUCE_SCATTER,
    DIST_OP_BCAST,
    DIST_OP_IALLGATHER
} dist_wd_op;
/* Entering collective op on c: seq 0 for a blocking one (counted now), or the number
 * dist_wd_start gave a non-blocking one when it started; bytes: the size of the collective's
 * whole buffer (all-gather: the gathered output, reduce-scatter: the input, all-reduce: the
 * vector, all-to-all: what this rank sends), for the profiler. Returns base_now(). */
double dist_wd_enter(dist_comm *c, dist_wd_op op, int64_t seq, double bytes);
/* A non-blocking collective starts on c: its number there. */
int64_t dist_wd_start(dist_comm *c);
/* The non-blocking all-gather on c, posted since t0 (base_now), is posted: while the profiler
 * records, its posting is an event of its own on the collectives track ("all-gather (FSDP
 * parameters) launch", no bytes: they are the wait's). OpenMPI builds the collective's schedule
 * and starts its first round in MPI_Iallgatherv: 0.5-6 ms a post on 2 ranks of a 2-core VM,
 * which, in no event, left dist_profile's steps covered 85-89% by their events. */
void dist_wd_posted(const dist_comm *c, double t0);
/* Left the collective entered at t0: returns the seconds spent in it. While the profiler
 * records (base_trace_recording), adds the collective's event to the collectives track. */
double dist_wd_leave(double t0);
/* Stops the thread and frees the window (collective over the world; dist_finalize). */
void dist_wd_finalize(void);

/* recv[displs[r] .. + counts[r]) = rank r's send[counts[r]], elements of elem bytes (4:
 * fp32, 2: bf16 bit patterns): started, finished by dist_wait. With one rank: a copy
 * (nothing when send == recv). */
void dist_iallgatherv(dist_comm *c, const void *send, void *recv, const int *counts,
                      const int *displs, size_t elem, dist_req *r);
/* Waits for r; returns the seconds waited. */
double dist_wait(dist_req *r);
/* recv[counts[me]] = the sum over ranks of their send[displs[me] .. + counts[me]) (send holds
 * every rank's segment, in rank order). Returns the seconds it took. */
double dist_reduce_scatter_f32(dist_comm *c, const float *send, float *recv, const int *counts);

#endif
