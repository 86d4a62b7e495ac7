/* train: stopping cleanly on a signal (see internal.h). Cluster schedulers send SIGTERM (or a
 * configured signal ahead of time) before SIGKILL: the step in progress finishes, a checkpoint
 * of it is saved, and the process exits 128 + the signal's number, as if killed by it. */
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "train/internal.h"

static const struct {
    const char *name;
    int sig;
} g_signals[] = {{"SIGTERM", SIGTERM}, {"SIGINT", SIGINT}, {"SIGUSR1", SIGUSR1},
                 {"SIGUSR2", SIGUSR2}, {"SIGHUP", SIGHUP}, {"SIGXCPU", SIGXCPU}};
#define N_SIGNALS ((int)(sizeof g_signals / sizeof g_signals[0]))

static int g_first;        /* the first signal received (0: none) */
static int g_count;        /* signals received */
static int g_installed[3]; /* the signals handled, 0-terminated */
static struct sigaction g_old[3];

const char *train_stop_signal_name(int sig) {
    for (int i = 0; i < N_SIGNALS; i++)
        if (g_signals[i].sig == sig) return g_signals[i].name;
    return "signal";
}

int train_stop_signal_parse(const char *name, int *sig) {
    *sig = 0;
    if (!strcmp(name, "none")) return 0;
    for (int i = 0; i < N_SIGNALS; i++)
        if (!strcmp(g_signals[i].name, name)) {
            *sig = g_signals[i].sig;
            return 0;
        }
    return -1;
}

/* Async-signal-safe: atomics, write(2) and _exit(2) only. It runs on main's signal thread
 * (base_signals_to_own_thread: never on a compute thread, whose stack a JIT GEMM may have
 * pointed into the heap) or an MPI library thread, two at once included: the counter decides
 * which signal is the second. */
static void on_signal(int sig) {
    const char *name = train_stop_signal_name(sig);
    if (__atomic_fetch_add(&g_count, 1, __ATOMIC_SEQ_CST) > 0) {
        static const char again[] = " again: exiting at once\n";
        if (write(STDERR_FILENO, "titan: ", 7) < 0 ||
            write(STDERR_FILENO, name, strlen(name)) < 0 ||
            write(STDERR_FILENO, again, sizeof again - 1) < 0) {
        }
        _exit(128 + sig);
    }
    static const char msg[] = ": finishing this step, then stopping (a checkpoint of it when "
                              "checkpointing is on); send it again to exit at once\n";
    if (write(STDERR_FILENO, "titan: ", 7) < 0 || write(STDERR_FILENO, name, strlen(name)) < 0 ||
        write(STDERR_FILENO, msg, sizeof msg - 1) < 0) {
    }
    /* the stop is seen by the training loop only now, after the writes: a second signal already
     * pending is delivered as this handler returns, not after the loop has begun the stop's
     * checkpoint (its writes had left that window open: a step-N.tmp behind) */
    __atomic_store_n(&g_first, sig, __ATOMIC_SEQ_CST);
}

int train_stop_install(int extra_sig, base_err *err) {
    train_stop_uninstall();
    __atomic_store_n(&g_first, 0, __ATOMIC_SEQ_CST);
    __atomic_store_n(&g_count, 0, __ATOMIC_SEQ_CST);
    const int want[3] = {SIGTERM, SIGINT, extra_sig};
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART; /* reads and writes in flight go on rather than fail with EINTR */
    sigemptyset(&sa.sa_mask);
    for (int i = 0, n = 0; i < 3; i++) {
        if (!want[i] || (i == 2 && (want[i] == SIGTERM || want[i] == SIGINT))) continue;
        if (sigaction(want[i], &sa, &g_old[n]) != 0) {
            train_stop_uninstall();
            return base_fail(err, "cannot handle %s (sigaction failed)",
                             train_stop_signal_name(want[i]));
        }
        g_installed[n++] = want[i];
    }
    return 0;
}

void train_stop_uninstall(void) {
    for (int i = 0; i < 3 && g_installed[i]; i++) {
        sigaction(g_installed[i], &g_old[i], NULL);
        g_installed[i] = 0;
    }
}

int train_stop_agree(dist_comm *world) {
    double sig = __atomic_load_n(&g_first, __ATOMIC_SEQ_CST);
    dist_allreduce_max_f64(world, &sig, 1); /* nothing with one rank */
    return (int)sig;
}

int train_stop_pending(void) {
    return __atomic_load_n(&g_first, __ATOMIC_SEQ_CST);
}

int train_stop_finish(train_saver *s, int sig, int step, const char *ckdir, const char *no_saves,
                      base_err *err) {
    if (!s) {
        base_log(BASE_LOG_INFO, "%s: stopped after step %d; %s, so nothing was saved",
                 train_stop_signal_name(sig), step, no_saves);
        return 128 + sig;
    }
    if (train_saver_finish(s, err)) return -1; /* commits the save of this step */
    base_log(BASE_LOG_INFO,
             "%s: stopped after step %d; the last complete checkpoint is %s/step-%d (the same "
             "command resumes from it)",
             train_stop_signal_name(sig), step, ckdir, step);
    return 128 + sig;
}
