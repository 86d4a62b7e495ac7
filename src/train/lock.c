/* train: the run's hold on the folders it writes (see internal.h). */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "train/internal.h"

void train_ckpt_folder(const train_opts *o, char *buf, size_t cap) {
    const char *fo = o->ckpt.folder ? o->ckpt.folder : "checkpoint";
    if (fo[0] == '/' || !o->dump_folder)
        snprintf(buf, cap, "%s", fo);
    else
        snprintf(buf, cap, "%s/%s", o->dump_folder, fo);
}

/* Rank 0's part of train_lock_outputs. */
static int lock_outputs(train_lock *l, const train_opts *o, base_err *err) {
    char dirs[TRAIN_LOCKS][4096];
    int nd = 0;
    if (o->ckpt.enable) train_ckpt_folder(o, dirs[nd++], sizeof dirs[0]);
    /* the files' folders: metrics, and the report page and config.toml (the run folder's: a
     * second run there was accepted and rewrote them over the first one's) */
    const char *files[] = {o->jsonl_path, o->report_path, o->config_path};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        if (!files[i]) continue; /* "." for a bare file name, "/" for "/name" */
        const char *p = files[i], *slash = strrchr(p, '/');
        const int len = !slash ? 1 : slash == p ? 1 : (int)(slash - p);
        snprintf(dirs[nd++], sizeof dirs[0], "%.*s", len, slash ? p : ".");
    }
    if (o->tb_dir) snprintf(dirs[nd++], sizeof dirs[0], "%s", o->tb_dir);
    if (o->out_dir) snprintf(dirs[nd++], sizeof dirs[0], "%s", o->out_dir);
    struct stat held[TRAIN_LOCKS];
    for (int i = 0; i < nd; i++) {
        struct stat st;
        if (base_mkdir_p(dirs[i], err)) return train_unlock_outputs(l), -1;
        if (stat(dirs[i], &st) != 0) continue; /* the lock reports it */
        int dup = 0; /* one folder named twice ("a" and "./a"): a second flock would fail */
        for (int k = 0; k < l->n; k++)
            dup |= held[k].st_dev == st.st_dev && held[k].st_ino == st.st_ino;
        if (dup) continue;
        if (base_dir_lock_take(&l->held[l->n], dirs[i], err)) return train_unlock_outputs(l), -1;
        held[l->n++] = st;
    }
    return o->ckpt.enable ? ckpt_step_cleanup(dirs[0], err) : 0;
}

int train_lock_outputs(train_lock *l, const train_opts *o, dist_comm *comm, int rank,
                       base_err *err) {
    l->n = 0;
    /* every rank learns whether rank 0 got the locks, so none goes on alone into a collective */
    int64_t bad = rank == 0 && lock_outputs(l, o, err) != 0;
    dist_allreduce_i64(comm, &bad, 1);
    if (bad && rank != 0) base_fail(err, "rank 0 could not lock the run's output folders");
    return bad ? -1 : 0;
}

void train_unlock_outputs(train_lock *l) {
    for (int i = l->n - 1; i >= 0; i--) base_dir_unlock(&l->held[i]);
    l->n = 0;
}
