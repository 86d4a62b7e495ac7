/* train: the profiler's schedule, its trace files and its console table (see internal.h and
 * docs/profiling.md). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "train/internal.h"

struct train_prof {
    model *m;
    const char *dir;
    int freq, active, warmup, rank;
    const char **paths; /* [n_units] the model's unit names, the ops wrappers' layer paths */
    int attached;
    double t_origin;   /* ts 0 in the traces (base_now seconds): rank 0's realtime clock's
                        * whole second when profiling opened, the same instant on every rank */
    double t_step;     /* the current step's start */
    int step;          /* the current step */
    char (*names)[32]; /* [active] "ProfilerStep#N": the step events' names */
    int n_steps;       /* steps recorded in the window so far */
    int done;          /* the step train_prof_step_done closed last */
};

void train_prof_phase(const char *name, double t0) {
    if (!base_trace_recording) return;
    const base_trace_event e = {
        .t0 = t0, .t1 = base_now(), .name = name, .cat = "train", .track = BASE_TRACE_COMPUTE};
    base_trace_add(&e);
}

int train_prof_open(train_prof **out, const train_opts *o, model *m, const dist_mesh *mesh,
                    base_err *err) {
    *out = NULL;
    if (!o->prof.dir) return 0;
    /* One time origin for every rank's trace, on the realtime clock (shared by the processes of
     * a machine, NTP-close across machines; durations stay on the monotonic one): a rank's own
     * first step as ts 0 shifted each rank by its start skew (rank 0 logs between steps while
     * the others wait in the next step's first collective), so merged traces did not line up. */
    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    const double mono = base_now(), real = (double)rt.tv_sec + 1e-9 * (double)rt.tv_nsec;
    double ref = mesh->rank == 0 ? floor(real) : 0.0; /* collective: before any return */
    dist_allreduce_max_f64(mesh->world_comm, &ref, 1);
    train_prof *p = calloc(1, sizeof *p);
    if (!p || !(p->paths = malloc(sizeof *p->paths * (size_t)m->n_units)) ||
        !(p->names = calloc((size_t)o->prof.active, sizeof *p->names))) {
        train_prof_close(p);
        return base_fail(err, "out of memory");
    }
    for (int u = 0; u < m->n_units; u++) p->paths[u] = m->units[u].name;
    p->m = m;
    p->dir = o->prof.dir;
    p->freq = o->prof.freq;
    p->active = o->prof.active;
    p->warmup = o->prof.warmup;
    p->rank = mesh->rank;
    p->t_origin = mono - (real - ref);
    *out = p;
    base_log(BASE_LOG_INFO,
             "profiling: steps %d-%d of every %d traced (after %d warmup), into %s/iteration_N",
             p->freq - p->active + 1, p->freq, p->freq, p->warmup, p->dir);
    return 0;
}

/* Where step falls in its cycle: 2 recorded, 1 warmup, 0 neither. */
static int prof_phase_of(const train_prof *p, int step) {
    const int left = (p->freq - step % p->freq) % p->freq; /* steps after it in the cycle */
    return left < p->active ? 2 : left < p->active + p->warmup ? 1 : 0;
}

int train_prof_step_begin(train_prof *p, int step, base_err *err) {
    if (!p) return 0;
    const int ph = prof_phase_of(p, step);
    if (ph && !p->attached) {
        if (ops_prof_attach(p->m->ops, p->paths, p->m->n_units, err)) return -1;
        p->attached = 1;
    }
    p->t_step = base_now();
    p->step = step;
    if (ph == 2 && !base_trace_recording) {
        base_trace_start();
        p->n_steps = 0;
    }
    return 0;
}

void train_prof_step_done(train_prof *p) {
    if (!p || !base_trace_recording || p->n_steps >= p->active) return;
    char *name = p->names[p->n_steps++];
    snprintf(name, sizeof p->names[0], "ProfilerStep#%d", p->step);
    p->done = p->step;
    const base_trace_event e = {.t0 = p->t_step,
                                .t1 = base_now(),
                                .name = name,
                                .cat = "step",
                                .track = BASE_TRACE_COMPUTE};
    base_trace_add(&e);
}

/* One line of the console table: an op kind (over layers), a trainer phase or a collective. */
typedef struct {
    const char *name;
    int comm;
    long calls;
    double s, flops, bytes;
} prof_row;

static int prof_row_cmp(const void *a, const void *b) {
    const double x = ((const prof_row *)a)->s, y = ((const prof_row *)b)->s;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Whether e lies within one of the intervals ev[idx[0..n)] (sorted by start, disjoint). */
static int prof_within(const base_trace_event *e, const base_trace_event *ev, const size_t *idx,
                       size_t n) {
    size_t lo = 0, hi = n; /* the last interval starting at or before e */
    while (lo < hi) {
        const size_t mid = (lo + hi) / 2;
        if (ev[idx[mid]].t0 <= e->t0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo > 0 && e->t1 <= ev[idx[lo - 1]].t1;
}

/* The window's events inside its step events, summed by name (op kinds over layers), sorted
 * by time, with their share of the steps' time and achieved rates; then the steps' time in no
 * event. Inside a step the compute track's events never overlap (ops run one after another
 * on the training thread), so they come in start order; a collective is counted in that
 * remainder only when it is not inside a compute event (TP's all-reduces within lmhead_ce). */
static void prof_table(const train_prof *p, int step, const char *path) {
    size_t n, dropped;
    const base_trace_event *ev = base_trace_events(&n, &dropped);
    enum { MAX_ROWS = 96 };
    prof_row rows[MAX_ROWS];
    int nr = 0;
    double t_steps = 0, t_covered = 0;
    const base_trace_event *steps[p->n_steps > 0 ? p->n_steps : 1];
    int ns = 0;
    size_t *comp = malloc(sizeof *comp * (n ? n : 1)), nc = 0;
    if (!comp) return;
    for (size_t i = 0; i < n; i++)
        if (!strcmp(ev[i].cat, "step") && ns < p->n_steps) {
            steps[ns++] = &ev[i];
            t_steps += ev[i].t1 - ev[i].t0;
        }
    for (int pass = 0; pass < 2; pass++) /* compute events, then collectives against them */
        for (size_t i = 0; i < n; i++) {
            const base_trace_event *e = &ev[i];
            if (!strcmp(e->cat, "step") || (e->track == BASE_TRACE_COMM) != pass) continue;
            int inside = 0; /* events outside the steps (validation, checkpoints) are not shares */
            for (int j = 0; j < ns && !inside; j++)
                inside = e->t0 >= steps[j]->t0 && e->t1 <= steps[j]->t1;
            if (!inside) continue;
            if (!pass) comp[nc++] = i;
            if (!pass || !prof_within(e, ev, comp, nc)) t_covered += e->t1 - e->t0;
            int r = 0;
            while (r < nr && (strcmp(rows[r].name, e->name) || rows[r].comm != pass)) r++;
            if (r == nr) {
                if (nr == MAX_ROWS) continue;
                rows[nr++] = (prof_row){.name = e->name, .comm = pass};
            }
            rows[r].calls++;
            rows[r].s += e->t1 - e->t0;
            rows[r].flops += e->flops;
            rows[r].bytes += e->bytes;
        }
    free(comp);
    qsort(rows, (size_t)nr, sizeof *rows, prof_row_cmp);
    const int k = p->n_steps > 0 ? p->n_steps : 1;
    const double share = t_steps > 0 ? 100.0 / t_steps : 0;
    printf("profile: steps %d-%d, %.1f ms/step -> %s\n", step - p->n_steps + 1, step,
           1e3 * t_steps / k, path);
    printf("  %-30s %7s %10s %7s %10s %9s\n", "op (all layers) / phase", "calls", "ms/step",
           "share", "GFLOP/s", "GB/s");
    for (int r = 0; r < nr; r++) {
        const prof_row *w = &rows[r];
        char rate[2][16] = {"", ""}, name[64];
        if (w->flops > 0 && w->s > 0) snprintf(rate[0], 16, "%.2f", w->flops / w->s * 1e-9);
        if (w->bytes > 0 && w->s > 0) snprintf(rate[1], 16, "%.2f", w->bytes / w->s * 1e-9);
        snprintf(name, sizeof name, "%s%s", w->comm ? "[comm] " : "", w->name);
        printf("  %-30.30s %7ld %10.3f %6.1f%% %10s %9s\n", name, w->calls / k, 1e3 * w->s / k,
               w->s * share, rate[0], rate[1]);
    }
    printf("  %-30s %7s %10.3f %6.1f%%\n", "(in no event)", "", 1e3 * (t_steps - t_covered) / k,
           (t_steps - t_covered) * share);
    if (dropped) printf("  (%zu events dropped: out of memory)\n", dropped);
    fflush(stdout);
}

/* The window ends at step: stop, put the tables back, write the trace, print the table. */
static int prof_window_end(train_prof *p, int step, base_err *err) {
    base_trace_stop();
    ops_prof_detach();
    p->attached = 0;
    char path[4300];
    if (snprintf(path, sizeof path, "%s/iteration_%d/rank%d_trace.json", p->dir, step, p->rank) >=
        (int)sizeof path)
        return base_fail(err, "profiling.save_traces_folder: path too long (%s)", p->dir);
    if (base_trace_write(path, p->rank, p->t_origin, err)) return -1;
    if (p->rank == 0) prof_table(p, step, path);
    return 0;
}

int train_prof_step_end(train_prof *p, int step, base_err *err) {
    if (!p || prof_phase_of(p, step) != 2 || step % p->freq) return 0;
    return prof_window_end(p, step, err);
}

int train_prof_finish(train_prof *p, int failed, base_err *err) {
    /* torch.profiler's exit in a recording window calls on_trace_ready: torchtitan writes
     * iteration_{its last step} with the steps recorded so far */
    if (p && failed && base_trace_recording && p->done != p->step) train_prof_step_done(p);
    if (!p || !base_trace_recording || p->n_steps == 0) return 0;
    base_log(BASE_LOG_INFO,
             "profiling: the run ended inside a window: its %d recorded step%s "
             "written",
             p->n_steps, p->n_steps > 1 ? "s" : "");
    return prof_window_end(p, p->step, err);
}

void train_prof_close(train_prof *p) {
    if (!p) return;
    if (p->attached) {
        base_trace_stop();
        ops_prof_detach();
    }
    free(p->paths);
    free(p->names);
    free(p);
}
