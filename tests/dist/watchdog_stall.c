/* watchdog_stall TIMEOUT (under mpirun, 2 ranks or more): the watchdog during start-up. Every
 * rank starts the watchdog with TIMEOUT seconds as comm.init_timeout_seconds, as train_run
 * does first; rank 1 then stops itself (SIGSTOP) before the mesh's first collective, the
 * communicator split. The other ranks' watchdogs must stop the job naming the split and rank
 * 1; reaching the end is a failure (exit 1). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "distributed/dist.h"

int main(int argc, char **argv) {
    base_err err;
    if (argc != 2) {
        fprintf(stderr, "usage: watchdog_stall TIMEOUT\n");
        return 2;
    }
    if (dist_init(&argc, &argv, &err) ||
        dist_watchdog_start(atof(argv[1]), "comm.init_timeout_seconds", &err)) {
        fprintf(stderr, "watchdog_stall: %s\n", err.msg);
        return 2;
    }
    if (dist_world_rank() == 1) raise(SIGSTOP);
    dist_mesh m;
    const dist_mesh_cfg c = {1, -1, 1, 1, 1, 1};
    if (dist_mesh_init(&m, &c, &err)) {
        fprintf(stderr, "watchdog_stall: %s\n", err.msg);
        return 2;
    }
    fprintf(stderr, "watchdog_stall: rank %d got past the stalled split\n", dist_world_rank());
    dist_mesh_free(&m);
    dist_finalize();
    return 1;
}
