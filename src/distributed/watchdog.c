/* dist: the collective watchdog (see dist.h).
 *
 * Every rank keeps a record in an MPI window (MPI_Win_allocate over the world, one passive
 * lock_all epoch for the whole run): a heartbeat its watchdog thread bumps every tick, and per
 * communicator slot the number of collectives it has started there, plus the one it is in. A
 * collective costs its caller a few plain stores into its own record; no MPI call is added.
 * When this rank has waited in collective number s of a group for longer than the timeout,
 * its watchdog thread reads the group's records (MPI_Rget, polled with a deadline): a rank
 * that has started fewer than s collectives on the group has not arrived, and a heartbeat
 * that stands still over half a second says its process is not running (SIGSTOP, a hung
 * kernel call). It prints that and stops every rank with MPI_Abort. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "distributed/internal.h"

/* One rank's record, as the window holds it (int64 words: a plain copy is a valid read). */
typedef struct {
    int64_t beat;                 /* the watchdog thread's ticks */
    int64_t op;                   /* dist_wd_op + 1 of the collective it is in, 0: none */
    int64_t slot, seq;            /* its communicator slot and number there (1-based) */
    int64_t count[DIST_WD_SLOTS]; /* collectives started per slot */
} wd_rec;

static const char *const g_slot_names[DIST_WD_SLOTS] = {
    "world",           "dp_shard (FSDP)", "dp_replicate (HSDP)", "data-parallel",
    "tensor-parallel", "expert-parallel", "expert-FSDP"};
static const char *const g_op_names[] = {
    "communicator split", "barrier",    "all-reduce",
    "all-gather",         "all-to-all", "all-to-all-v (MoE dispatch)",
    "reduce-scatter",     "broadcast",  "all-gather (FSDP parameters)"};

_Static_assert(sizeof g_op_names / sizeof g_op_names[0] == DIST_OP_IALLGATHER + 1,
               "a name per dist_wd_op");

static wd_rec g_local; /* the record when there is no window (one process, no MPI) */
static wd_rec *g_rec = &g_local;
static double g_since;   /* when the collective in progress started (base_now) */
static dist_comm *g_cur; /* its group */
static double g_bytes;   /* its size (dist_wd_enter's bytes) */
static double g_timeout; /* seconds, 0: off (atomic) */
static const char *g_setting = "the timeout"; /* where it comes from, for the message */
static int g_run, g_thread_on, g_multiple;
static pthread_t g_thread;
#ifdef TITAN_HAVE_MPI
static MPI_Win g_win = MPI_WIN_NULL;
#endif

static const double TICK = 0.1; /* seconds between heartbeats and checks */

double dist_wd_enter(dist_comm *c, dist_wd_op op, int64_t seq, double bytes) {
    double t = base_now(); /* not const: clang's __atomic_store takes a non-const pointer */
    g_bytes = bytes;
    if (seq <= 0) seq = ++g_rec->count[c->slot]; /* a blocking collective starts now */
    __atomic_store(&g_since, &t, __ATOMIC_RELAXED);
    __atomic_store_n(&g_cur, c, __ATOMIC_RELAXED);
    __atomic_store_n(&g_rec->slot, c->slot, __ATOMIC_RELAXED);
    __atomic_store_n(&g_rec->seq, seq, __ATOMIC_RELAXED);
    __atomic_store_n(&g_rec->op, (int64_t)op + 1, __ATOMIC_RELEASE);
    return t;
}

int64_t dist_wd_start(dist_comm *c) {
    return ++g_rec->count[c->slot];
}

void dist_wd_posted(const dist_comm *c, double t0) {
    if (!base_trace_recording) return;
    const base_trace_event e = {.t0 = t0,
                                .t1 = base_now(),
                                .name = "all-gather (FSDP parameters) launch",
                                .cat = "collective",
                                .impl = g_slot_names[c->slot % DIST_WD_SLOTS],
                                .track = BASE_TRACE_COMM};
    base_trace_add(&e);
}

double dist_wd_leave(double t0) {
    const int64_t op = __atomic_load_n(&g_rec->op, __ATOMIC_RELAXED);
    __atomic_store_n(&g_rec->op, 0, __ATOMIC_RELEASE);
    const double t1 = base_now();
    if (base_trace_recording && op > 0) {
        const base_trace_event e = {.t0 = t0,
                                    .t1 = t1,
                                    .name = g_op_names[op - 1],
                                    .cat = "collective",
                                    .impl = g_slot_names[g_rec->slot % DIST_WD_SLOTS],
                                    .track = BASE_TRACE_COMM,
                                    .bytes = g_bytes};
        base_trace_add(&e);
    }
    return t1 - t0;
}

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* The heartbeat. Bumped every tick, and while this rank diagnoses a stall too: other ranks
 * that time out at the same moment read it then, and a still heartbeat would have them name
 * this running rank as stopped (four ranks: most lines blamed ranks that were running). */
static void beat(void) {
    __atomic_fetch_add(&g_rec->beat, 1, __ATOMIC_RELAXED);
}

/* Sleeps s seconds, beating every tick. */
static void sleep_beating(double s) {
    for (double left = s; left > 0; left -= TICK) {
        sleep_s(left < TICK ? left : TICK);
        beat();
    }
}

#ifdef TITAN_HAVE_MPI
/* Reads the records of the group's ranks into recs[world] (ok[r] = 1 when read), waiting at
 * most `wait` seconds for them. Returns 0 when all were read, 1 when some are still pending
 * (their buffers may yet be written: never freed). */
static int read_records(const dist_comm *c, wd_rec *recs, int *ok, MPI_Request *req, double wait) {
    for (int i = 0; i < c->size; i++) {
        const int r = c->members[i];
        ok[r] = 0;
        MPI_Rget(&recs[r], (int)sizeof(wd_rec), MPI_BYTE, r, 0, (int)sizeof(wd_rec), MPI_BYTE,
                 g_win, &req[i]);
    }
    const double t0 = base_now();
    for (;;) {
        int pending = 0;
        for (int i = 0; i < c->size; i++) {
            int done = req[i] == MPI_REQUEST_NULL;
            if (!done) MPI_Test(&req[i], &done, MPI_STATUS_IGNORE);
            if (done)
                ok[c->members[i]] = 1;
            else
                pending = 1;
        }
        if (!pending || base_now() - t0 > wait) return pending;
        sleep_s(0.01);
        beat();
    }
}
#endif

/* Prints what this rank waits for and who has not arrived, then stops every rank. */
static _Noreturn void fire(double waited, double timeout, double self_gap) {
    dist_comm *c = __atomic_load_n(&g_cur, __ATOMIC_RELAXED);
    const int me = dist_world_rank(), slot = (int)g_rec->slot;
    const int64_t seq = g_rec->seq, op = g_rec->op - 1;
    char who[2048] = "";
#ifdef TITAN_HAVE_MPI
    size_t at = 0;
    const int W = dist_world_size();
    wd_rec *a = calloc((size_t)W * 2, sizeof *a), *b = a ? a + W : NULL;
    int *oka = calloc((size_t)W * 2, sizeof(int)), *okb = oka ? oka + W : NULL;
    MPI_Request *req = calloc((size_t)c->size * 2, sizeof *req); /* a read's each */
    int pending = 0;
    if (g_multiple && a && oka && req) {
        const double gap = 5 * TICK; /* heartbeats 5 ticks apart */
        /* both reads wait as long: the second one's 0.5 s ran out on a loaded machine, and a
         * stopped rank whose record had landed but not completed was said to run */
        pending = read_records(c, a, oka, req, 2.0);
        sleep_beating(gap);
        pending |= read_records(c, b, okb, req + c->size, 2.0);
        int missing = 0;
        for (int i = 0; i < c->size && at < sizeof who - 256; i++) {
            const int r = c->members[i];
            if (r == me) continue;
            const int still = oka[r] && okb[r] && a[r].beat == b[r].beat;
            if (!oka[r] || !okb[r]) { /* b[r] may hold part of a read: not said */
                at += (size_t)snprintf(who + at, sizeof who - at,
                                       "%s rank %d: its record could not be read%s (not "
                                       "responding)",
                                       missing++ ? ";" : "", r, oka[r] ? " again" : "");
            } else if (a[r].count[slot] < seq || still) {
                const int arrived = a[r].count[slot] >= seq;
                at += (size_t)snprintf(who + at, sizeof who - at,
                                       "%s rank %d %s (%lld collectives started on this group)",
                                       missing++ ? ";" : "", r,
                                       arrived ? "arrived but stalled" : "did not arrive",
                                       (long long)a[r].count[slot]);
                if (still)
                    at += (size_t)snprintf(who + at, sizeof who - at,
                                           ": its process has not run for %.1f s (stopped, or "
                                           "hung in the kernel)",
                                           gap);
                else if (b[r].op > 0)
                    at += (size_t)snprintf(who + at, sizeof who - at,
                                           ": it runs, waiting in %s #%lld over its %s group",
                                           g_op_names[b[r].op - 1], (long long)b[r].seq,
                                           g_slot_names[b[r].slot % DIST_WD_SLOTS]);
                else
                    at += (size_t)snprintf(who + at, sizeof who - at,
                                           ": it runs, outside any collective");
            }
        }
        if (!missing) snprintf(who, sizeof who, " every rank of the group has started it and runs");
    } else {
        snprintf(who, sizeof who,
                 " (the ranks that did not arrive cannot be named: MPI gave no "
                 "MPI_THREAD_MULTIPLE)");
    }
    if (!pending) { /* else MPI may still write them: the job is stopping anyway */
        free(a);
        free(oka);
        free(req);
    }
#endif
    char members[256] = "";
    size_t m = 0;
    for (int i = 0; i < c->size && m < sizeof members - 16; i++)
        m += (size_t)snprintf(members + m, sizeof members - m, "%s%d", i ? " " : "", c->members[i]);
    char self[160] = "";
    if (self_gap > 0)
        snprintf(self, sizeof self,
                 " (this rank itself did not run for %.1f s before: stopped, or its machine "
                 "stalled)",
                 self_gap);
    fprintf(stderr,
            "titan: rank %d: watchdog: %s #%lld over the %s group (ranks %s) has waited %.1f s, "
            "past %s = %g:%s%s; stopping every rank\n",
            me, g_op_names[op], (long long)seq, g_slot_names[slot], members, waited,
            __atomic_load_n(&g_setting, __ATOMIC_RELAXED), timeout, who, self);
    dist_abort(3);
}

/* A tick that came this late means this process itself was not running (SIGSTOP, a stalled
 * machine); then it waits SELF_GRACE before judging the others: its own collective may now
 * complete, or the rank that found it stalled is stopping the job, and a rank just woken had
 * named its waiting peers as the culprits. */
static const double SELF_GAP = 1.0, SELF_GRACE = 3.0;

static void *wd_main(void *arg) {
    (void)arg;
    double last = base_now(), woke = -1, gap = 0;
    while (__atomic_load_n(&g_run, __ATOMIC_ACQUIRE)) {
        sleep_s(TICK);
        beat();
        const double now = base_now();
        if (now - last > SELF_GAP) {
            woke = now;
            gap = now - last;
        }
        last = now;
        if (woke >= 0 && now - woke < SELF_GRACE) continue;
        double timeout, since;
        __atomic_load(&g_timeout, &timeout, __ATOMIC_RELAXED);
        const int64_t seq = __atomic_load_n(&g_rec->seq, __ATOMIC_RELAXED);
        if (timeout <= 0 || !__atomic_load_n(&g_rec->op, __ATOMIC_ACQUIRE)) continue;
        __atomic_load(&g_since, &since, __ATOMIC_RELAXED);
        const double waited = now - since;
        /* the same collective still (not a new one entered between the loads) */
        if (waited > timeout && __atomic_load_n(&g_rec->op, __ATOMIC_ACQUIRE) &&
            __atomic_load_n(&g_rec->seq, __ATOMIC_RELAXED) == seq)
            fire(waited, timeout, woke >= since ? gap : 0); /* a gap within this wait */
    }
    return NULL;
}

int dist_watchdog_start(double timeout_s, const char *setting, base_err *err) {
    dist_watchdog_set_timeout(timeout_s, setting);
    if (g_thread_on || dist_world_size() <= 1) return 0;
#ifdef TITAN_HAVE_MPI
    if (g_win == MPI_WIN_NULL) {
        wd_rec *base;
        if (MPI_Win_allocate((MPI_Aint)sizeof(wd_rec), 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base,
                             &g_win) != MPI_SUCCESS)
            return base_fail(err, "watchdog: MPI_Win_allocate failed");
        *base = g_local; /* the collectives counted so far */
        g_rec = base;
        MPI_Win_lock_all(MPI_MODE_NOCHECK, g_win);
        int level;
        MPI_Query_thread(&level);
        g_multiple = level == MPI_THREAD_MULTIPLE;
    }
#endif
    __atomic_store_n(&g_run, 1, __ATOMIC_RELEASE);
    if (pthread_create(&g_thread, NULL, wd_main, NULL) != 0) {
        g_run = 0;
        return base_fail(err, "watchdog: cannot start its thread");
    }
    g_thread_on = 1;
    return 0;
}

void dist_watchdog_set_timeout(double timeout_s, const char *setting) {
    if (setting) __atomic_store_n(&g_setting, setting, __ATOMIC_RELAXED);
    __atomic_store(&g_timeout, &timeout_s, __ATOMIC_RELAXED);
}

void dist_watchdog_stop(void) {
    dist_watchdog_set_timeout(0, NULL);
    if (!g_thread_on) return;
    __atomic_store_n(&g_run, 0, __ATOMIC_RELEASE);
    pthread_join(g_thread, NULL);
    g_thread_on = 0;
}

void dist_wd_finalize(void) {
    dist_watchdog_stop();
#ifdef TITAN_HAVE_MPI
    if (g_win != MPI_WIN_NULL) { /* collective: every rank finalizes */
        g_local = *g_rec;
        g_rec = &g_local;
        MPI_Win_unlock_all(g_win);
        MPI_Win_free(&g_win);
    }
#endif
}
