/* agree (under mpirun, 2 ranks or more): dist_agree, the collective by which a step that
 * failed on one rank fails on all. Rank 1 fails with a message; every rank must return -1,
 * rank 1 keeping its own message and every other rank holding "rank 1 <what>: <message>"
 * (one rank's error aborts them all and whichever rank prints first must name the cause: a
 * shard write that failed on rank 1 had been reported as "another rank could not write its
 * shard"). Then all succeed: 0 everywhere, err untouched. Exit 0 when all that holds. */
#include <stdio.h>
#include <string.h>

#include "distributed/dist.h"

int main(int argc, char **argv) {
    base_err err = {{0}};
    if (dist_init(&argc, &argv, &err)) {
        fprintf(stderr, "agree: %s\n", err.msg);
        return 2;
    }
    dist_mesh m;
    const dist_mesh_cfg c = {1, -1, 1, 1, 1, 1};
    if (dist_mesh_init(&m, &c, &err)) {
        fprintf(stderr, "agree: %s\n", err.msg);
        return 2;
    }
    const int me = dist_world_rank();
    int bad = 0;
    const int rc = me == 1 ? base_fail(&err, "boom on rank %d", me) : 0;
    if (dist_agree(m.world_comm, rc, "could not do its part", &err) != -1) bad = 1;
    const char *want = me == 1 ? "boom on rank 1" : "rank 1 could not do its part: boom on rank 1";
    if (strcmp(err.msg, want)) bad = 1;
    fprintf(stderr, "agree: rank %d: '%s'\n", me, err.msg);
    base_err ok = {{0}};
    if (dist_agree(m.world_comm, 0, "could not", &ok) != 0 || ok.msg[0]) bad = 1;
    dist_mesh_free(&m);
    dist_finalize();
    return bad;
}
