/* train: the run's hold on the folders it writes (see internal.h). */
#include <dirent.h>
#include <errno.h>
#include <time.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* dir made absolute against this process's working directory (a relative checkpoint folder
 * is relative to each rank's own). */
static void absolute(const char *dir, char *out, size_t n) {
    char cwd[4096];
    const int len = dir[0] == '/' || !getcwd(cwd, sizeof cwd) ? snprintf(out, n, "%s", dir)
                                                              : snprintf(out, n, "%s/%s", cwd, dir);
    if (len >= (int)n) snprintf(out, n, "%s", dir); /* too long whole: as given */
}

/* Opens every folder on the way to path's folder, top down: on NFS a lookup that found
 * nothing is remembered (a negative entry, trusted until the parent's cached attributes
 * expire, 30 s by default); opening the parent revalidates it with the server. */
static void revalidate(const char *path) {
    char p[4300];
    snprintf(p, sizeof p, "%s", path);
    for (char *s = strchr(p + 1, '/'); s; s = strchr(s + 1, '/')) {
        *s = 0;
        DIR *d = opendir(p);
        if (d) closedir(d);
        *s = '/';
    }
}

/* Whether every rank sees the checkpoint folder rank 0 writes (collective): rank 0 creates a
 * file of a random name there, every other rank looks for it (for up to
 * TITAN_SHARED_FOLDER_WAIT seconds, 20 by default: a network file system may show a new file
 * late). Every rank writes its shard into that folder and rank 0 commits the step, so on
 * machines with node-local folders at the same path each save failed (or worse, a resume
 * found another machine's leftovers) hours into the run; now the first seconds say so, and
 * whether the ranks' working directories differ (a relative folder) or their machines. */
static int check_shared(const train_opts *o, dist_comm *comm, int rank, base_err *err) {
    char dir[4096], path[4300];
    struct {
        uint64_t nonce;            /* the probe file's name */
        char host[256], dir[4096]; /* rank 0's machine and absolute folder */
    } r0 = {0, "", ""};
    train_ckpt_folder(o, dir, sizeof dir);
    int rc = 0;
    if (rank == 0) {
        gethostname(r0.host, sizeof r0.host - 1);
        absolute(dir, r0.dir, sizeof r0.dir);
        uint64_t r = 0;
        if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r)
            r = (uint64_t)getpid() ^ (uint64_t)(base_now() * 1e9);
        r0.nonce = r | 1;
        snprintf(path, sizeof path, "%s/.titan.shared-%016llx", dir, (unsigned long long)r0.nonce);
        const int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0)
            rc = base_fail(err,
                           "%s: cannot create (to check that every rank sees the checkpoint "
                           "folder): %s",
                           path, strerror(errno));
        else
            close(fd);
    }
    if (dist_agree(comm, rc, "could not create its file in the checkpoint folder", err)) return -1;
    dist_bcast_bytes(comm, &r0, sizeof r0, 0);
    if (rank != 0) {
        char mine[4096], host[256] = "";
        absolute(dir, mine, sizeof mine);
        gethostname(host, sizeof host - 1);
        snprintf(path, sizeof path, "%s/.titan.shared-%016llx", mine, (unsigned long long)r0.nonce);
        int64_t wait_s = 20;
        const char *env = getenv("TITAN_SHARED_FOLDER_WAIT");
        if (env && (base_parse_i64(env, &wait_s) || wait_s < 0)) wait_s = 20;
        struct stat st;
        const double t0 = base_now();
        int seen = 0;
        for (long nap_ms = 50;; nap_ms = nap_ms < 1000 ? 2 * nap_ms : 1000) {
            revalidate(path);
            if ((seen = stat(path, &st) == 0) || base_now() - t0 >= (double)wait_s) break;
            const struct timespec ts = {nap_ms / 1000, nap_ms % 1000 * 1000000L};
            nanosleep(&ts, NULL);
        }
        if (!seen) {
            if (!strcmp(host, r0.host) && strcmp(mine, r0.dir))
                rc = base_fail(err,
                               "the checkpoint folder %s is %s on this rank but %s on rank 0, "
                               "on the same machine (%s): the ranks' working directories "
                               "differ; set checkpoint.folder (or job.dump_folder) to an "
                               "absolute path",
                               dir, mine, r0.dir, host);
            else
                rc = base_fail(err,
                               "%s is not the folder rank 0 writes: its file %s is not there "
                               "on this rank's machine (%s; rank 0's: %s) after %lld s. Every "
                               "rank writes its shard into that folder and rank 0 commits the "
                               "step, so it must be one folder all ranks share (NFS, Lustre, "
                               "...: as torchtitan's checkpoints); set checkpoint.folder (or "
                               "job.dump_folder) to a path every machine mounts",
                               mine, path, host[0] ? host : "unknown host",
                               r0.host[0] ? r0.host : "unknown host", (long long)wait_s);
        }
    }
    rc = dist_agree(comm, rc, "cannot use the checkpoint folder", err);
    if (rank == 0) unlink(path);
    return rc;
}

int train_lock_outputs(train_lock *l, const train_opts *o, dist_comm *comm, int rank,
                       base_err *err) {
    l->n = 0;
    /* every rank learns whether rank 0 got the locks, so none goes on alone into a collective */
    const int rc = rank == 0 && lock_outputs(l, o, err) != 0;
    if (dist_agree(comm, rc, "could not lock the run's output folders", err)) return -1;
    if (!o->ckpt.enable || dist_comm_size(comm) < 2 || check_shared(o, comm, rank, err) == 0)
        return 0;
    train_unlock_outputs(l);
    return -1;
}

void train_unlock_outputs(train_lock *l) {
    for (int i = l->n - 1; i >= 0; i--) base_dir_unlock(&l->held[i]);
    l->n = 0;
}
