/* train: the checkpoint saver (see internal.h). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/checkpoint.h"
#include "train/internal.h"

struct train_saver {
    char *dir;
    size_t n;
    train_saver_layout lay;
    int async, keep;
    int mv_bf16;   /* adam_m, adam_v hold bf16 bits */
    void *snap[3]; /* model, adam_m, adam_v copies (async only) */
    pthread_t thread;
    int running;
    /* the job of the thread */
    int64_t step;
    int model_only;
    ckpt_dtype model_dtype; /* how the weights are stored (a model-only save's export_dtype) */
    const void *buf[3];
    char *train_json;
    int rc, written; /* written: the thread's write is done (atomic) */
    base_err err;
    double t0, seconds;
};

ckpt_step_buf *train_piece_bufs(const char *const *names, int nb, const dist_piece *p, int np,
                                size_t global_n, const void *const *src, void *const *dst,
                                unsigned bf16, char (*piece_names)[32]) {
    ckpt_step_buf *b = calloc((size_t)nb * (size_t)np + 1, sizeof *b);
    if (!b) return NULL;
    for (int i = 0; i < nb; i++)
        for (int k = 0; k < np; k++) {
            const size_t j = (size_t)i * (size_t)np + (size_t)k;
            const char *name = names[i];
            if (piece_names) { /* piece k of buffer i: "model", "model@1", ... */
                if (k)
                    snprintf(piece_names[j], 32, "%s@%d", names[i], k);
                else
                    snprintf(piece_names[j], 32, "%s", names[i]);
                name = piece_names[j];
            }
            const int h = bf16 >> i & 1;
            const size_t at = p[k].shard_off * (h ? 2 : 4); /* bytes */
            b[j] = (ckpt_step_buf){name,
                                   src ? (const char *)src[i] + at : NULL,
                                   dst ? (char *)dst[i] + at : NULL,
                                   p[k].global_off,
                                   p[k].row_len * p[k].rows,
                                   global_n,
                                   p[k].rows,
                                   p[k].stride,
                                   CKPT_F32,
                                   h};
        }
    return b;
}

/* Whether every rank's part of a save succeeded: a collective, so a failure on one rank fails
 * the save on all (each naming the failing rank's cause) and no rank waits in a collective for
 * one that gave up. */
static int all_ok(train_saver *s, int rc, const char *what) {
    return dist_agree(s->lay.comm, rc, what, &s->err) == 0;
}

/* A save in three parts. begin and commit are collective over the layout's ranks and run in
 * the training thread; write touches only this rank's shard file and may run in the
 * background thread while training goes on. */
static int save_begin(train_saver *s) {
    s->t0 = base_now();
    const int rc = s->lay.rank == 0 && ckpt_step_begin(s->dir, s->step, 0, &s->err);
    return all_ok(s, rc, "could not create the step folder") ? 0 : -1;
}

static int save_write(train_saver *s) {
    static const char *const names[3] = {"model", "adam_m", "adam_v"};
    const train_saver_layout *L = &s->lay;
    if (L->writer < 0) return 0; /* an HSDP replica other than the first */
    const int nb = s->model_only ? 1 : 3, np = L->n_pieces;
    char(*nm)[32] = calloc((size_t)(nb * np) + 1, 32);
    const unsigned bf16 = s->mv_bf16 ? 1u << 1 | 1u << 2 : 0u; /* adam_m, adam_v */
    ckpt_step_buf *b =
        nm ? train_piece_bufs(names, nb, L->pieces, np, L->global_n, s->buf, NULL, bf16, nm) : NULL;
    for (int k = 0; b && k < np; k++) b[k].dtype = s->model_dtype; /* buffer 0: the weights */
    int rc = !b || !nm ? base_fail(&s->err, "out of memory")
                       : ckpt_step_write_shard(s->dir, s->step, L->writer, b, nb * np, &s->err);
    free(b);
    free(nm);
    return rc;
}

/* write_rc: this rank's save_write result. Rank 0 commits once every shard is written. */
static int save_commit(train_saver *s, int write_rc) {
    if (!all_ok(s, write_rc, "could not write its shard")) return -1;
    const int rc = s->lay.rank == 0 && ckpt_step_commit(s->dir, s->step, s->lay.n_writers,
                                                        s->train_json, s->keep, &s->err);
    if (!all_ok(s, rc, "could not commit the step")) return -1;
    s->seconds = base_now() - s->t0;
    return 0;
}

static void *thread_main(void *arg) {
    train_saver *s = arg;
    s->rc = save_write(s);
    __atomic_store_n(&s->written, 1, __ATOMIC_RELEASE);
    return NULL;
}

int train_saver_async_fits(double bytes, int ranks) {
    return bytes * ranks <= (double)base_total_ram() / 4;
}

/* Bytes of buffer i (0 the weights, 1-2 the moments) of n elements. */
static size_t buf_bytes(const train_saver *s, int i) {
    return s->n * (i && s->mv_bf16 ? 2 : sizeof(float));
}

int train_saver_init(train_saver **out, const char *dir, size_t n, int mv_bf16,
                     const train_saver_layout *lay, int async, int keep_latest_k, base_err *err) {
    *out = NULL;
    train_saver *s = calloc(1, sizeof *s);
    if (!s || !(s->dir = strdup(dir))) {
        free(s);
        return base_fail(err, "out of memory");
    }
    s->n = n;
    s->mv_bf16 = mv_bf16;
    s->lay = *lay;
    s->keep = keep_latest_k;
    /* every rank keeps a snapshot of its shard; ranks may share a machine, so the budget is a
     * quarter of this machine's RAM split over all of them (conservative across machines) */
    const int ranks = dist_comm_size(lay->comm);
    const double bytes = (double)(buf_bytes(s, 0) + 2 * buf_bytes(s, 1));
    s->async = async && train_saver_async_fits(bytes, ranks);
    if (async && !s->async)
        base_log(BASE_LOG_INFO,
                 "checkpoint: %d snapshot(s) of %.2f GiB would not fit comfortably in memory; "
                 "saving synchronously",
                 ranks, bytes / (1 << 30));
    /* untouched until the first save copies into them: no resident memory before it */
    for (int i = 0; s->async && i < 3; i++)
        if (!(s->snap[i] = base_alloc_uninit(buf_bytes(s, i)))) {
            train_saver_free(s);
            return base_fail(err, "out of memory for the checkpoint snapshot");
        }
    *out = s;
    return 0;
}

/* Joins the background write and commits it (collective). */
static int finish(train_saver *s, base_err *err) {
    pthread_join(s->thread, NULL);
    s->running = 0;
    if (save_commit(s, s->rc))
        return base_fail(err, "checkpoint at step %lld failed: %s", (long long)s->step, s->err.msg);
    base_log(BASE_LOG_INFO, "checkpoint: step %lld saved to %s/step-%lld in %.2f s (background)",
             (long long)s->step, s->dir, (long long)s->step, s->seconds);
    return 0;
}

int train_saver_finish(train_saver *s, base_err *err) {
    return s && s->running ? finish(s, err) : 0;
}

int train_saver_poll(train_saver *s, base_err *err) {
    if (!s || !s->running) return 0;
    int64_t pending = !__atomic_load_n(&s->written, __ATOMIC_ACQUIRE);
    dist_allreduce_i64(s->lay.comm, &pending, 1);
    return pending ? 0 : finish(s, err);
}

int train_saver_abandon(train_saver *s, base_err *err) {
    if (!s || !s->running) return 0;
    if (dist_comm_size(s->lay.comm) == 1) return finish(s, err);
    pthread_join(s->thread, NULL);
    s->running = 0;
    return base_fail(err,
                     "checkpoint at step %lld left uncommitted (%s/step-%lld.tmp): training "
                     "stopped on an error before every rank had written its shard",
                     (long long)s->step, s->dir, (long long)s->step);
}

int train_saver_save(train_saver *s, int64_t step, const float *w, const void *m, const void *v,
                     int model_only, ckpt_dtype model_dtype, const char *train_json,
                     base_err *err) {
    if (train_saver_finish(s, err)) return -1;
    free(s->train_json);
    if (!(s->train_json = strdup(train_json))) return base_fail(err, "out of memory");
    s->step = step;
    s->model_only = model_only;
    s->model_dtype = model_only ? model_dtype : CKPT_F32; /* a resumable state stays fp32 */
    const void *src[3] = {w, m, v};
    if (save_begin(s))
        return base_fail(err, "checkpoint at step %lld failed: %s", (long long)step, s->err.msg);
    if (s->async) {
        for (int i = 0; i < (model_only ? 1 : 3); i++) {
            memcpy(s->snap[i], src[i], buf_bytes(s, i));
            s->buf[i] = s->snap[i];
        }
        s->written = 0;
        if (pthread_create(&s->thread, NULL, thread_main, s) == 0) {
            s->running = 1;
            return 0;
        }
    } else { /* (or the thread could not start: write from the snapshot now) */
        for (int i = 0; i < 3; i++) s->buf[i] = src[i];
    }
    if (save_commit(s, save_write(s)))
        return base_fail(err, "checkpoint at step %lld failed: %s", (long long)step, s->err.msg);
    base_log(BASE_LOG_INFO, "checkpoint: step %lld saved to %s/step-%lld in %.2f s",
             (long long)step, s->dir, (long long)step, s->seconds);
    return 0;
}

void train_saver_free(train_saver *s) {
    if (!s) return;
    if (s->running) pthread_join(s->thread, NULL);
    for (int i = 0; i < 3; i++) base_free(s->snap[i]);
    free(s->train_json);
    free(s->dir);
    free(s);
}
