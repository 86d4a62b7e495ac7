/* agree (under mpirun, 4 ranks): dist_agree, the collective by which a step that
 * failed on one rank fails on all (4 ranks: dp_shard 2 x tp 2). Ranks 1 and 2 fail with a message
 * each; every rank must return -1, ranks 1 and 2 keeping their own message and every other rank
 * holding the lowest failing rank's: "rank 1 <what>: <message>" (one rank's error aborts them all
 * and whichever rank prints first must name the cause: a shard write that failed on rank 1 had been
 * reported as "another rank could not write its shard"). Then on the tensor-parallel group
 * of 2 (ranks 0 1, 2 3, ...) only the group's second rank fails: its partner names it by its
 * world rank. Then all succeed: 0 everywhere, err untouched. Exit 0 when all that holds. */
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
    const dist_mesh_cfg c = {1, -1, 2, 1, 1, 1}; /* tp 2 */
    if (dist_mesh_init(&m, &c, &err)) {
        fprintf(stderr, "agree: %s\n", err.msg);
        return 2;
    }
    const int me = dist_world_rank();
    int bad = 0;
    const int rc = me == 1 || me == 2 ? base_fail(&err, "boom on rank %d", me) : 0;
    if (dist_agree(m.world_comm, rc, "could not do its part", &err) != -1) bad = 1;
    char want[128];
    snprintf(want, sizeof want,
             rc ? "boom on rank %d" : "rank 1 could not do its part: boom on rank 1", me);
    if (strcmp(err.msg, want)) bad = 1;
    fprintf(stderr, "agree: rank %d: '%s'\n", me, err.msg);
    if (m.tp > 1) { /* a sub-communicator: world ranks in the message */
        base_err e2 = {{0}};
        const int r2 = me % 2 ? base_fail(&e2, "tp boom") : 0;
        if (dist_agree(m.tp_comm, r2, "failed", &e2) != -1) bad = 1;
        snprintf(want, sizeof want, r2 ? "tp boom" : "rank %d failed: tp boom", me + 1);
        if (strcmp(e2.msg, want)) bad = 1;
        fprintf(stderr, "agree: rank %d (tp): '%s'\n", me, e2.msg);
    }
    base_err ok = {{0}};
    if (dist_agree(m.world_comm, 0, "could not", &ok) != 0 || ok.msg[0]) bad = 1;
    dist_mesh_free(&m);
    dist_finalize();
    return bad;
}
