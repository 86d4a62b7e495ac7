/* train: the one home of metrics output (see internal.h): the console lines, metrics.jsonl,
 * TensorBoard, the saved config.toml, and the logging window's averages. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "train/internal.h"

struct train_metrics {
    const train_opts *o;
    int lead;      /* writes the console (rank 0) */
    int tty;       /* a progress line on terminals */
    int world;     /* ranks in the run (comm figures when > 1) */
    int non_dp;    /* ranks sharing one data-parallel rank's tokens (tp): tokens/s per rank */
    int aux_on;    /* MoE aux loss in the step's loss */
    int last;      /* the run's last step */
    int64_t start; /* the step resumed after (0: a fresh run) */
    double peak, fpt, t_run;
    int mfu_warned;
    FILE *jl;
    char *jl_path;
    train_tb *tb;
    train_report_run *rep; /* the report page's figures (rank 0, o->report_path) */
    double rep_next;       /* base_now() before which the page is not drawn again */
    double prog_next;      /* and the progress line */
    int rep_lost;          /* lines the page's history could not take (said once) */
    /* the logging window: the steps since the last logged one (this rank's figures) */
    int64_t w_tokens;
    double w_step_s, w_data_s, w_rss;
    int w_steps;
    double rss_peak; /* the run's peak RSS (bytes): never below any RSS sample (max_active) */
    int tb_failed;   /* the step whose TensorBoard write failed (0: none) */
};

int train_metrics_tb_failed(const train_metrics *t) {
    return t ? t->tb_failed : 0;
}

/* "[titan] 2026-12-01 12:03:38,123 - " (local time, torchtitan's logger's prefix), into buf. */
static void stamp(char *buf, size_t n) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    localtime_r(&tv.tv_sec, &tm);
    char day[32];
    strftime(day, sizeof day, "%Y-%m-%d %H:%M:%S", &tm);
    snprintf(buf, n, "[titan] %s,%03d - ", day, (int)(tv.tv_usec / 1000));
}

/* path with "rank_N/" inserted before its last component: dir/rank_N/name. */
static char *rank_path(const char *path, int rank) {
    const char *slash = strrchr(path, '/');
    const size_t dir = slash ? (size_t)(slash - path + 1) : 0;
    const size_t n = strlen(path) + 32;
    char *s = malloc(n);
    if (s) snprintf(s, n, "%.*srank_%d/%s", (int)dir, path, rank, path + dir);
    return s;
}

/* The first of HEAD TAIL, HEAD-2 TAIL, ... HEAD-999 TAIL (into buf) that make(path, arg)
 * creates, failing with EEXIST where it is taken: a name no other run has. Returns 0, or the
 * errno of make's other failure (EEXIST: every name taken). */
static int claim_name(char *buf, size_t n, const char *head, const char *tail,
                      int (*make)(const char *path, void *arg), void *arg) {
    for (int k = 1; k < 1000; k++) {
        char sfx[16] = "";
        if (k > 1) snprintf(sfx, sizeof sfx, "-%d", k);
        if (snprintf(buf, n, "%s%s%s", head, sfx, tail) >= (int)n) return ENAMETOOLONG;
        if (make(buf, arg) == 0) return 0;
        if (errno != EEXIST) return errno;
    }
    return EEXIST;
}

static int make_dir(const char *path, void *arg) {
    (void)arg;
    return mkdir(path, 0777);
}

/* Claims the name with an empty file (O_EXCL: never over an existing one; any file system),
 * which the rename then replaces. */
static int make_empty(const char *path, void *arg) {
    (void)arg;
    const int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    return fd < 0 ? -1 : close(fd);
}

/* A fresh run's metrics file where an earlier run's is (its dump folder reused, checkpoints
 * off or not loaded): that one is kept as STEM-YYYYmmdd-HHMMSS.jsonl (its last write, local
 * time; -2, -3 ... when taken), said, as TensorBoard keeps each run's folder (it had been
 * replaced silently). Where it cannot be kept (an unwritable folder) it is replaced, said. */
static void keep_earlier_jsonl(const char *p) {
    struct stat st;
    if (lstat(p, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) return;
    struct tm tm;
    char when[32], head[4400], to[4500];
    localtime_r(&st.st_mtime, &tm);
    strftime(when, sizeof when, "%Y%m%d-%H%M%S", &tm);
    const char *dot = strrchr(p, '.'), *slash = strrchr(p, '/');
    const int stem = dot && (!slash || dot > slash) ? (int)(dot - p) : (int)strlen(p);
    snprintf(head, sizeof head, "%.*s-%s", stem, p, when);
    int e = claim_name(to, sizeof to, head, p + stem, make_empty, NULL);
    if (!e && rename(p, to) != 0) {
        e = errno;
        unlink(to);
    }
    if (e)
        base_log(BASE_LOG_WARN, "metrics: the earlier run's %s is replaced (it cannot be kept: %s)",
                 p, strerror(e));
    else
        base_log(BASE_LOG_INFO, "metrics: the earlier run's %s kept as %s", p, to);
}

/* Opens metrics.jsonl: a fresh run starts a new file (an earlier run's kept,
 * keep_earlier_jsonl); a resumed one keeps the lines of steps <= start (a crash between a
 * checkpoint and later log lines leaves lines past it, and a crash mid-line a partial one:
 * both are cut off at their byte offset) and appends. */
static int open_jsonl(train_metrics *t, base_err *err) {
    const char *p = t->jl_path;
    if (base_mkdir_parent(p, err)) return -1;
    if (t->start == 0) keep_earlier_jsonl(p);
    /* a link at p is never written through: a fresh file replaces it, a resume refuses it */
    if (t->start > 0 && base_output_path_ok(p, err)) return -1; /* a FIFO would block getline */
    const int fd = t->start > 0 ? open(p, O_RDWR | O_NOFOLLOW | O_CLOEXEC) : -1;
    if (t->start > 0 && fd < 0 && errno != ENOENT)
        return base_fail(err, "%s: cannot open the metrics file to append: %s%s", p,
                         strerror(errno), errno == ELOOP ? " (a symbolic link)" : "");
    struct stat st;
    if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) { /* swapped in meanwhile */
        close(fd);
        return base_fail(err, "%s: not a regular file: the metrics are not appended to it", p);
    }
    if (fd < 0) return (t->jl = base_fopen_new(p, err)) ? 0 : -1;
    if (!(t->jl = fdopen(fd, "r+"))) {
        close(fd);
        return base_fail(err, "%s: %s", p, strerror(errno));
    }
    long keep = 0;
    long long last = 0; /* the last kept line's step */
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, t->jl)) > 0) {
        long long step;
        if (line[len - 1] != '\n' || sscanf(line, "{\"step\": %lld", &step) != 1 || step > t->start)
            break;
        keep += (long)len;
        last = step;
    }
    free(line);
    if (ftruncate(fd, keep) || fseek(t->jl, 0, SEEK_END))
        return base_fail(err, "%s: cannot cut the metrics after step %lld: %s", p,
                         (long long)t->start, strerror(errno));
    /* lines lost before this resume (the disk had filled: the run stopped after saving a step
     * whose line it could not write), said rather than left to be found */
    if (last < t->start) {
        char which[64];
        if (last + 1 == t->start)
            snprintf(which, sizeof which, "step %lld", (long long)t->start);
        else
            snprintf(which, sizeof which, "steps %lld-%lld", last + 1, (long long)t->start);
        base_log(BASE_LOG_WARN,
                 "%s has no line for %s, which the checkpoint resumed from includes; the run "
                 "appends from step %lld",
                 p, which, (long long)t->start + 1);
    }
    return 0;
}

/* Rank 0 names the TensorBoard run folder DIR/YYYYmmdd-HHMM (local time, torchtitan's), with
 * "-2", "-3"... when a run of the same minute has it already, so two runs never share a
 * series; every rank gets rank 0's name. */
static int tb_run_dir(train_metrics *t, const dist_mesh *mesh, char *out, size_t n, base_err *err) {
    char mine[512] = "", *all = NULL;
    int rc = 0;
    if (mesh->rank == 0) {
        const time_t now = time(NULL);
        struct tm tm;
        localtime_r(&now, &tm);
        char when[32];
        strftime(when, sizeof when, "%Y%m%d-%H%M", &tm);
        base_err e;
        if (base_mkdir_p(t->o->tb_dir, &e)) {
            snprintf(mine, sizeof mine, "!%.500s", e.msg);
        } else {
            char head[4600], dir[4700];
            snprintf(head, sizeof head, "%s/%s", t->o->tb_dir, when);
            const int ec = claim_name(dir, sizeof dir, head, "", make_dir, NULL);
            if (ec)
                snprintf(mine, sizeof mine, "!%.380s: %.100s", dir, strerror(ec));
            else
                snprintf(mine, sizeof mine, "%s", dir + strlen(t->o->tb_dir) + 1);
        }
    }
    if (mesh->world > 1) { /* rank 0's name to every rank (all of them open the same way) */
        if (!(all = calloc((size_t)mesh->world, sizeof mine)))
            return base_fail(err, "out of memory");
        dist_allgather_bytes(mesh->world_comm, mine, all, sizeof mine);
        memcpy(mine, all, sizeof mine);
        free(all);
    }
    if (mine[0] == '!')
        rc = base_fail(err, "TensorBoard folder: %s", mine + 1);
    else
        snprintf(out, n, "%s/%s", t->o->tb_dir, mine);
    return rc;
}

int train_metrics_open(train_metrics **out, const train_opts *o, const dist_mesh *mesh,
                       int64_t start, int last, double peak_flops, double flops_per_token,
                       int aux_on, base_err *err) {
    *out = NULL;
    train_metrics *t = calloc(1, sizeof *t);
    if (!t) return base_fail(err, "out of memory");
    t->o = o;
    t->lead = mesh->rank == 0;
    t->world = mesh->world;
    t->non_dp = mesh->tp; /* torchtitan's non_data_parallel_size (cp and pp are 1 here) */
    t->tty = mesh->world == 1 && isatty(STDOUT_FILENO);
    t->aux_on = aux_on;
    t->start = start;
    t->last = last;
    t->peak = peak_flops;
    t->fpt = flops_per_token;
    t->t_run = base_now();
    /* every rank writes its own files with save_for_all_ranks, else rank 0 alone */
    const int writes = t->lead || o->metrics_all_ranks;
    char tbdir[5200] = "";
    int rc = 0;
    if (o->tb_dir) { /* collective: every rank calls it */
        rc = tb_run_dir(t, mesh, tbdir, sizeof tbdir, err);
        if (!rc && o->metrics_all_ranks) {
            const size_t at = strlen(tbdir);
            snprintf(tbdir + at, sizeof tbdir - at, "/rank_%d", mesh->rank);
        }
    }
    if (!rc && writes && o->tb_dir) rc = train_tb_open(&t->tb, tbdir, err);
    if (!rc && writes && o->jsonl_path) {
        t->jl_path =
            o->metrics_all_ranks ? rank_path(o->jsonl_path, mesh->rank) : strdup(o->jsonl_path);
        rc = t->jl_path ? open_jsonl(t, err) : base_fail(err, "out of memory");
    }
    if (!rc && t->lead && o->report_path) { /* a resume's page shows the whole history */
        /* named as `titan report DUMP_FOLDER` names it: the page's folder */
        const char *slash = strrchr(o->report_path, '/');
        char name[512] = ".";
        if (slash && slash > o->report_path)
            snprintf(name, sizeof name, "%.*s", (int)(slash - o->report_path), o->report_path);
        rc = train_report_run_new(&t->rep, name, err);
        base_err e;
        if (!rc && start > 0 && t->jl_path && train_report_read_jsonl(t->rep, t->jl_path, &e)) {
            base_log(BASE_LOG_WARN, "report page: the steps before this run are left out: %s",
                     e.msg);
            train_report_run_clear(t->rep);
        }
    }
    if (!rc && t->lead && o->config_path && o->config_toml)
        rc = base_mkdir_parent(o->config_path, err) ||
             base_write_file_atomic(o->config_path, o->config_toml, strlen(o->config_toml), err);
    if (rc) {
        train_metrics_close(t, NULL);
        return -1;
    }
    *out = t;
    return 0;
}

/* Each optimizer's learning rates as torchtitan 0.3 logs them (LRSchedulersContainer.
 * get_metrics): an optimizer per optimizer_name, in the order the groups first name them, its
 * groups in file order; "lr/NAME" for an optimizer of one group, else "lr/NAME/i" (i its
 * group's index among NAME's). Without [[optimizer.param_groups]] one group, [optimizer]'s.
 * Returns the count; key[k][24], val[k]. */
#define LR_KEYS (TRAIN_MAX_PARAM_GROUPS > 1 ? TRAIN_MAX_PARAM_GROUPS : 1)
static int lr_metrics(const train_opts *o, double factor, char key[][24], double *val) {
    if (!o->n_param_groups) {
        snprintf(key[0], 24, "lr/%s", o->adamw.adam ? "Adam" : "AdamW");
        val[0] = o->adamw.lr * factor;
        return 1;
    }
    const train_param_group *g = o->param_groups;
    int n = 0;
    for (int a = 0; a < o->n_param_groups; a++) {
        int first = 1, of = 0;
        for (int b = 0; b < a; b++) first &= strcmp(g[b].optimizer_name, g[a].optimizer_name) != 0;
        if (!first) continue; /* this name's optimizer is listed already */
        for (int b = a; b < o->n_param_groups; b++)
            of += !strcmp(g[b].optimizer_name, g[a].optimizer_name);
        for (int b = a, i = 0; b < o->n_param_groups; b++) {
            if (strcmp(g[b].optimizer_name, g[a].optimizer_name)) continue;
            if (of == 1)
                snprintf(key[n], 24, "lr/%.8s", g[b].optimizer_name);
            else
                snprintf(key[n], 24, "lr/%.8s/%d", g[b].optimizer_name, i++);
            val[n++] = g[b].c.lr * factor;
        }
    }
    return n;
}

/* The JSONL line's fields for step s: this step's own figures (bitwise as before), the
 * window's averages on logged steps, validation when it ran, each optimizer's learning rates
 * under torchtitan 0.3's names (lr_metrics; "lr" is the first group's, as v0.2.2's). */
/* Validation tokens/s per rank: every data-parallel rank scores the whole set, a
 * tensor-parallel group's ranks share it (as the step's tps). */
static double val_tps(const train_metrics *t, const train_step_metrics *s) {
    return s->val_s > 0 ? (double)s->val_tokens / s->val_s / t->non_dp : 0.0;
}

static void jsonl_line(train_metrics *t, FILE *jl, const train_step_metrics *s, const model *m,
                       double tps, double mfu, double mem, int log_now, const double *win) {
    fprintf(jl,
            "{\"step\": %d, \"loss\": %.17g, \"grad_norm\": %.17g, \"lr\": %.17g, "
            "\"tps\": %.17g, \"tflops\": %.17g, \"mfu\": %.17g, \"memory_gib\": %.17g, "
            "\"data_s\": %.17g, \"max_loss\": %.17g, \"ntokens\": %lld, \"step_s\": %.17g",
            s->step, s->loss, s->grad_norm, s->lr, tps, t->fpt * tps / 1e12, mfu, mem, s->data_s,
            s->max_loss, (long long)s->ntokens, s->step_s);
    char key[LR_KEYS][24];
    double val[LR_KEYS];
    for (int k = 0, n = lr_metrics(t->o, s->lr_factor, key, val); k < n; k++)
        fprintf(jl, ", \"%s\": %.17g", key[k], val[k]);
    if (t->start > 0 && s->step == t->start + 1) /* the report page marks resumes */
        fprintf(jl, ", \"resumed_from\": %lld", (long long)t->start);
    if (t->world > 1)
        fprintf(jl,
                ", \"comm_s\": %.17g, \"fsdp_gather_bytes\": %.17g, \"fsdp_reduce_bytes\": %.17g",
                s->comm_s, s->gather_bytes, s->reduce_bytes);
    if (log_now)
        fprintf(jl,
                ", \"window_tps\": %.17g, \"window_tflops\": %.17g, \"window_mfu\": %.17g, "
                "\"window_data_s\": %.17g, \"window_data_pct\": %.17g, \"window_step_s\": %.17g, "
                "\"memory_active_gib\": %.17g",
                win[0], win[1], win[2], win[3], win[4], win[5], win[6]);
    if (isfinite(s->val_loss))
        fprintf(jl,
                ", \"val_loss\": %.17g, \"val_tokens\": %lld, \"val_tps\": %.17g, \"val_s\": %.17g",
                s->val_loss, (long long)s->val_tokens, val_tps(t, s), s->val_s);
    if (t->aux_on) fprintf(jl, ", \"aux_loss\": %.17g", s->aux);
    for (int i = 0; i < s->n_src; i++)
        fprintf(jl, i ? ", %lld" : ", \"data_source_windows\": [%lld",
                (long long)s->src_windows[i]);
    if (s->n_src) fprintf(jl, "]");
    train_moe_jsonl(m, jl);
    fprintf(jl, "}\n");
}

/* Of the wall time, at most 1 / REPORT_BUDGET goes to drawing the page: a drawing reads the
 * whole history, so at every logged step a long run of fast steps had spent more and more of
 * its time there (a 20,000-step run 6 min instead of 3 s; the long-run audit). */
#define REPORT_BUDGET 20

/* s seconds as "42s", "7:05" (m:ss), "3:07:05" (h:mm:ss) or "12d 03:07:05" (a long run's ETA
 * had read "eta 12553936s"). */
static void format_duration(char *buf, size_t n, double s) {
    if (!(s >= 0) || s > 1e12) {
        snprintf(buf, n, "?");
        return;
    }
    const long long t = llround(s), d = t / 86400, h = t / 3600 % 24, m = t / 60 % 60, sec = t % 60;
    if (t < 60)
        snprintf(buf, n, "%llds", t);
    else if (t < 3600)
        snprintf(buf, n, "%lld:%02lld", m, sec);
    else if (!d)
        snprintf(buf, n, "%lld:%02lld:%02lld", h, m, sec);
    else
        snprintf(buf, n, "%lldd %02lld:%02lld:%02lld", d, h, m, sec);
}

/* The step's line into the report's figures, and the page rewritten on logged and validation
 * steps (within the time budget; the run's last step, or the one it stops at, always). The
 * page is a view: a failure is a warning and training goes on. */
static void report_step(train_metrics *t, const char *line, size_t len, int draw, int step) {
    char where[64];
    snprintf(where, sizeof where, "the metrics of step %d", step);
    const train_report_opts po = {.refresh_s = step < t->last ? 30 : 0}; /* live until done */
    base_err e;
    const double t0 = base_now();
    draw = draw && (step >= t->last || t0 >= t->rep_next);
    /* a line it cannot take (past its 1e8 records) leaves the page drawn from the others */
    if (train_report_add_line(t->rep, line, len ? len - 1 : 0, where, &e) && !t->rep_lost++)
        base_log(BASE_LOG_WARN, "report page %s: %s (the page leaves out such steps; said once)",
                 t->o->report_path, e.msg);
    if (draw && train_report_write(&t->rep, 1, t->o->report_path, &po, &e))
        base_log_once(BASE_LOG_WARN, "report page %s: %s", t->o->report_path, e.msg);
    if (draw) t->rep_next = t0 + REPORT_BUDGET * (base_now() - t0);
}

void train_metrics_end_at(train_metrics *t, int step) {
    if (t) t->last = step;
}

void train_metrics_failed(train_metrics *t, const char *why) {
    if (!t || !t->rep) return; /* the page was last drawn at a logged step, still "live" */
    const train_report_opts po = {.failed = why};
    base_err e;
    if (train_report_write(&t->rep, 1, t->o->report_path, &po, &e))
        base_log(BASE_LOG_WARN, "report page %s: %s", t->o->report_path, e.msg);
}

struct train_report_run *train_metrics_report(train_metrics *t) {
    return t ? t->rep : NULL;
}

int train_metrics_log_step(train_metrics *t, const train_step_metrics *s, const model *m,
                           base_err *err) {
    const train_opts *o = t->o;
    /* per rank: a tensor-parallel group's ranks share its tokens (and FLOPs) */
    const double tps = (double)s->ntokens / s->step_s / t->non_dp,
                 mfu = 100.0 * t->fpt * tps / t->peak;
    if (t->lead && mfu > 100.0 && !t->mfu_warned) { /* the peak was measured while busy */
        t->mfu_warned = 1;
        if (o->peak_flops > 0)
            base_log(BASE_LOG_WARN,
                     "MFU above 100%%: the configured peak (%.1f GFLOP/s, --peak-tflops) is "
                     "below what this run computes",
                     t->peak / 1e9);
        else
            base_log(BASE_LOG_WARN,
                     "MFU above 100%%: the %s GEMM peak measured at start (%.1f GFLOP/s) "
                     "was lowered by other load on the machine; MFU figures are not "
                     "meaningful in this run (--peak-tflops sets the peak)",
                     o->prec == OPS_PREC_BF16 ? "bf16" : "fp32", t->peak / 1e9);
    }
    /* the window: tokens over the time of its steps (not the logging, validation and
     * checkpoint time between them) */
    t->w_tokens += s->ntokens;
    t->w_step_s += s->step_s;
    t->w_data_s += s->data_s;
    t->w_steps++;
    const double rss = (double)base_rss();
    if (rss > t->w_rss) t->w_rss = rss;
    /* one reading for GiB and %; a peak read after a sample can still miss it (the kernel's
     * high-water mark is updated lazily), so it is raised to every sample */
    t->rss_peak = fmax(fmax(t->rss_peak, rss), (double)base_peak_rss());
    const double gib = (double)(1 << 30), ram = (double)base_total_ram();
    const double mem = t->rss_peak / gib, mem_pct = 100.0 * t->rss_peak / ram;
    /* torchtitan's rule (step 1 and every log_freq), and the last step */
    const int log_now = s->step == 1 || s->step % o->log_freq == 0 || s->step == t->last;
    const int val = isfinite(s->val_loss);
    double win[7] = {0};
    if (log_now) {
        win[0] = (double)t->w_tokens / t->w_step_s / t->non_dp; /* tps (per rank) */
        win[1] = t->fpt * win[0] / 1e12;                        /* tflops */
        win[2] = 100.0 * t->fpt * win[0] / t->peak;             /* mfu (%) */
        win[3] = t->w_data_s / t->w_steps;                      /* data loading (s per step) */
        win[4] = 100.0 * t->w_data_s / t->w_step_s;             /* data loading (%) */
        win[5] = t->w_step_s / t->w_steps;                      /* end to end (s per step) */
        win[6] = t->w_rss / gib;                                /* max active (GiB) */
    }
    const double vtps = val ? val_tps(t, s) : 0.0;
    char ts[64];
    if (t->lead && (log_now || val)) {
        if (t->tty) printf("\r\033[K"); /* erase the progress line */
        stamp(ts, sizeof ts);
    }
    if (t->lead && log_now) {
        printf("%sstep: %4d  loss: %8.5f  grad_norm: %8.4f  lr: %.3e  memory: %.2fGiB(%.1f%%)  "
               "tps: %.1f  tflops: %.3f  mfu: %.1f%%  data: %.3fs",
               ts, s->step, s->loss, s->grad_norm, s->lr, mem, mem_pct, win[0], win[1], win[2],
               win[3]);
        if (t->aux_on) printf("  aux_loss: %.5f", s->aux);
        if (t->world > 1) printf("  comm: %.3fs", s->comm_s);
        printf("\n");
        char moe[256];
        if (train_moe_summary(m, moe, sizeof moe)) printf("%s%s\n", ts, moe);
    }
    if (t->lead && val) /* torchtitan's "validate step:" line, after the step's */
        printf("%svalidate step: %4d  loss: %8.5f  perplexity: %.3f  memory: %.2fGiB(%.1f%%)  "
               "tps: %.1f  (%lld tokens)\n",
               ts, s->step, s->val_loss, exp(s->val_loss), mem, mem_pct, vtps,
               (long long)s->val_tokens);
    /* progress: steps done, ETA, tokens/s; in place (each replaces the last: unlogged steps'
     * lines had run on into one endless line), at most 10 a second, and after a logged line */
    const double now = base_now();
    if (t->lead && t->tty && s->step < t->last && (log_now || val || now >= t->prog_next)) {
        const double avg = (now - t->t_run) / (double)(s->step - t->start);
        const int w = 30, done = (int)((double)w * s->step / t->last);
        char eta[48];
        format_duration(eta, sizeof eta, avg * (t->last - s->step));
        printf("\r\033[K  [%.*s%*s] step %d/%d  eta %s  %.0f tok/s", done,
               "##############################", w - done, "", s->step, t->last, eta,
               (double)s->ntokens * s->dp_size / avg);
        t->prog_next = now + 0.1;
    }
    if (t->lead) fflush(stdout);
    if (t->jl || t->rep) { /* one line for the file and the page */
        char *line = NULL;
        size_t len = 0;
        FILE *mf = open_memstream(&line, &len);
        if (!mf) return base_fail(err, "out of memory");
        jsonl_line(t, mf, s, m, tps, mfu, mem, log_now, win);
        if (fclose(mf)) {
            free(line);
            return base_fail(err, "out of memory");
        }
        /* deleted during the run (rm, a cleanup job): written anew, said; a file renamed over
         * it (an edit) appended to (the lines had gone to the unlinked file, in silence) */
        if (t->jl) base_reopen_if_deleted(&t->jl, t->jl_path, s->step, NULL);
        if (t->jl && base_append_whole(t->jl, line, len)) {
            free(line);
            return base_fail(err, "%s: cannot write the metrics of step %d: %s", t->jl_path,
                             s->step, strerror(errno));
        }
        if (t->rep) report_step(t, line, len, log_now || val, s->step);
        free(line);
    }
    if (t->tb && log_now) { /* torchtitan's tag names; one event a step, the lrs' after */
        const char *tags[16 + LR_KEYS] = {"loss_metrics/global_avg_loss",
                                          "loss_metrics/global_max_loss",
                                          "grad_norm",
                                          "lr",
                                          "throughput(tps)",
                                          "tflops",
                                          "mfu(%)",
                                          "memory/max_active(GiB)",
                                          "memory/max_active(%)",
                                          "memory/max_reserved(GiB)",
                                          "memory/max_reserved(%)",
                                          "time_metrics/data_loading(s)",
                                          "time_metrics/data_loading(%)",
                                          "time_metrics/end_to_end(s)",
                                          "n_tokens_seen",
                                          "loss_metrics/aux_loss"};
        double vals[16 + LR_KEYS] = {
            s->loss, s->max_loss, s->grad_norm,           s->lr, win[0],  win[1],
            win[2],  win[6],      100.0 * t->w_rss / ram, mem,   mem_pct, win[3],
            win[4],  win[5],      (double)s->tokens_seen, s->aux};
        const int base = t->aux_on ? 16 : 15;
        char key[LR_KEYS][24];
        const int n = lr_metrics(t->o, s->lr_factor, key, vals + base);
        for (int k = 0; k < n; k++) tags[base + k] = key[k];
        if (train_tb_scalars(t->tb, s->step, tags, vals, base + n, err))
            return t->tb_failed = s->step, -1;
    }
    if (t->tb && val) {
        const char *tags[] = {"validation_metrics/loss",
                              "validation_metrics/perplexity",
                              "validation_metrics/throughput(tps)",
                              "validation_metrics/memory/max_active(GiB)",
                              "validation_metrics/memory/max_active(%)",
                              "validation_metrics/memory/max_reserved(GiB)",
                              "validation_metrics/memory/max_reserved(%)"};
        const double vals[] = {s->val_loss, exp(s->val_loss), vtps, rss / gib, 100.0 * rss / ram,
                               mem,         mem_pct};
        if (train_tb_scalars(t->tb, s->step, tags, vals, 7, err)) return t->tb_failed = s->step, -1;
    }
    if (log_now) { /* a new window */
        t->w_tokens = 0;
        t->w_step_s = t->w_data_s = t->w_rss = 0;
        t->w_steps = 0;
    }
    return 0;
}

int train_metrics_close(train_metrics *t, base_err *err) {
    if (!t) return 0;
    int rc = 0;
    if (t->jl && fclose(t->jl) && err)
        rc = base_fail(err, "%s: cannot write the metrics: %s", t->jl_path, strerror(errno));
    train_tb_close(t->tb);
    train_report_run_free(t->rep);
    free(t->jl_path);
    free(t);
    return rc;
}
