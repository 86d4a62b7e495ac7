/* Unit test of base_signals_to_own_thread: after it, a process-directed stop signal's handler
 * never runs on the calling thread or on a thread created later (OpenMP's team), where oneDNN
 * 2.6's JIT fp32 GEMMs may have pointed the stack into the heap (a signal frame written there
 * had crashed 1-30% of fp32 runs stopped by SIGTERM); the compute threads have the signals
 * blocked; a child forked after it has them open; and a signal without a handler still ends
 * the process by its default action. */
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/base.h"
#include "check.h"

#define TEAM 4
#define SIGNALS 40

static int g_count;    /* handler runs */
static long g_bad_tid; /* a team thread the handler ran on (0: none) */
static long g_team[TEAM];

static long tid(void) {
    return (long)syscall(SYS_gettid);
}

static void on_term(int sig) {
    (void)sig;
    const long me = tid();
    for (int i = 0; i < TEAM; i++)
        if (g_team[i] == me) __atomic_store_n(&g_bad_tid, me, __ATOMIC_SEQ_CST);
    __atomic_fetch_add(&g_count, 1, __ATOMIC_SEQ_CST);
}

/* A child that sends itself SIGUSR1 with no handler: killed by it, as without the thread. */
static void test_default_action(void) {
    const pid_t pid = fork();
    if (pid == 0) {
        base_err err;
        if (base_signals_to_own_thread(&err)) _exit(3);
        kill(getpid(), SIGUSR1);
        sleep(5);
        _exit(4); /* the signal did nothing */
    }
    int st = 0;
    CHECK(pid > 0 && waitpid(pid, &st, 0) == pid, "fork / wait");
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGUSR1,
          "a signal without a handler: child status %#x, want killed by SIGUSR1", st);
}

int main(void) {
    test_default_action();
    base_err err;
    CHECK(base_signals_to_own_thread(&err) == 0, "base_signals_to_own_thread: %s", err.msg);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigemptyset(&sa.sa_mask);
    CHECK(sigaction(SIGTERM, &sa, NULL) == 0, "sigaction");
    /* a child forked after the block (a plugin's) starts with the signals open */
    const pid_t child = fork();
    if (child == 0) {
        sigset_t cur;
        pthread_sigmask(SIG_BLOCK, NULL, &cur);
        _exit(sigismember(&cur, SIGTERM) || sigismember(&cur, SIGINT) ? 1 : 0);
    }
    int st = 0;
    CHECK(child > 0 && waitpid(child, &st, 0) == child && WIFEXITED(st) && WEXITSTATUS(st) == 0,
          "a forked child has SIGTERM / SIGINT blocked (status %#x)", st);
    int blocked[TEAM] = {0}, done = 0;
    /* the team spins while the master (one of them) signals the process SIGNALS times, each
     * one after the last was handled (a pending signal of one kind is not queued twice) */
#pragma omp parallel num_threads(TEAM)
    {
        const int me = omp_get_thread_num();
        g_team[me] = tid();
        sigset_t cur;
        pthread_sigmask(SIG_BLOCK, NULL, &cur);
        blocked[me] = sigismember(&cur, SIGTERM) == 1 && sigismember(&cur, SIGINT) == 1;
#pragma omp barrier
        if (me == 0) {
            for (int s = 0; s < SIGNALS; s++) {
                const int before = __atomic_load_n(&g_count, __ATOMIC_SEQ_CST);
                kill(getpid(), SIGTERM);
                for (long w = 0;
                     w < 2000000000L && __atomic_load_n(&g_count, __ATOMIC_SEQ_CST) == before;
                     w++) {
                }
            }
            __atomic_store_n(&done, 1, __ATOMIC_SEQ_CST);
        } else {
            volatile double x = 1.0; /* busy, as a GEMM's threads are */
            while (!__atomic_load_n(&done, __ATOMIC_SEQ_CST)) x = x * 1.0000001 + 1e-9;
        }
    }
    for (int i = 0; i < TEAM; i++) CHECK(blocked[i], "team thread %d has SIGTERM / SIGINT open", i);
    CHECK(g_count == SIGNALS, "%d of %d signals handled", g_count, SIGNALS);
    CHECK(g_bad_tid == 0, "the handler ran on team thread %ld", g_bad_tid);
    printf("%d SIGTERMs handled off the %d compute threads\n", g_count, TEAM);
    return check_report("test_signals");
}
