/* Private to the dist module: the communicator and the few MPI calls FSDP needs, with
 * their one-process forms. */
#ifndef TITAN_DIST_INTERNAL_H
#define TITAN_DIST_INTERNAL_H

#include "dist.h"

#ifdef TITAN_HAVE_MPI
#include <mpi.h>
#endif

struct dist_comm {
#ifdef TITAN_HAVE_MPI
    MPI_Comm comm; /* MPI_COMM_NULL: the one-process group */
#endif
    int size, rank;
};

/* A non-blocking collective in flight (active = 0: none). */
typedef struct {
#ifdef TITAN_HAVE_MPI
    MPI_Request req;
#endif
    int active;
} dist_req;

/* recv[displs[r] .. + counts[r]) = rank r's send[counts[r]]: started, finished by
 * dist_wait. With one rank: a copy (nothing when send == recv). */
void dist_iallgatherv_f32(dist_comm *c, const float *send, float *recv, const int *counts,
                          const int *displs, dist_req *r);
/* Waits for r; returns the seconds waited. */
double dist_wait(dist_req *r);
/* recv[counts[me]] = the sum over ranks of their send[displs[me] .. + counts[me]) (send holds
 * every rank's segment, in rank order). Returns the seconds it took. */
double dist_reduce_scatter_f32(dist_comm *c, const float *send, float *recv, const int *counts);

#endif
