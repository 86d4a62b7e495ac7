/* titan: command-line entry point. One table of subcommands (each handler lives in the module
 * it drives), the dispatch, and the process set-up: the BLAS re-exec and MPI start-up. */
#include <math.h>
#include <pthread.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "base/base.h"
#include "checkpoint/checkpoint.h"
#include "data/data.h"
#include "distributed/dist.h"
#include "model/model.h"
#include "ops/ops.h"
#include "train/train.h"
#include "titan_version.h" /* TITAN_VERSION, TITAN_GIT_COMMIT: written by the build */

/* A stack limit below Linux's default 8 MiB (`ulimit -s 64`) crashed titan with a bare
 * SIGSEGV: glibc sizes every thread's stack by it too (OpenMP's, OpenBLAS's). The soft limit
 * is raised to 8 MiB, or to the hard limit, before the re-execution below, so the new image's
 * threads get it as well. Returns whether it was raised. */
static int raise_stack_limit(void) {
    const rlim_t want = (rlim_t)8 << 20;
    struct rlimit r;
    if (getrlimit(RLIMIT_STACK, &r) || r.rlim_cur == RLIM_INFINITY || r.rlim_cur >= want) return 0;
    const rlim_t to = r.rlim_max == RLIM_INFINITY || r.rlim_max >= want ? want : r.rlim_max;
    if (to <= r.rlim_cur) return 0;
    r.rlim_cur = to;
    return setrlimit(RLIMIT_STACK, &r) == 0;
}

/* After raise_stack_limit: a hard limit under 256 KiB (`ulimit -s 64` sets both) is refused
 * by name rather than left to a SIGSEGV in the first deep call (128 KiB ran a whole demo-sized
 * run here; 64 did not reach its first step). */
static int stack_limit_check(base_err *err) {
    if (raise_stack_limit()) { /* not re-executed (TITAN_NO_REEXEC): threads started from here */
        pthread_attr_t a;
        if (!pthread_attr_init(&a)) {
            if (!pthread_attr_setstacksize(&a, (size_t)8 << 20)) pthread_setattr_default_np(&a);
            pthread_attr_destroy(&a);
        }
    }
    struct rlimit r;
    if (getrlimit(RLIMIT_STACK, &r) || r.rlim_cur == RLIM_INFINITY || r.rlim_cur >= (256 << 10))
        return 0;
    return base_fail(err,
                     "the stack limit (ulimit -s) is %llu KiB and its hard limit allows no more: "
                     "titan needs at least 256 KiB (Linux's default is 8 MiB: ulimit -s 8192)",
                     (unsigned long long)(r.rlim_cur >> 10));
}

/* Debian's OpenBLAS 0.3.21 does not recognise recent CPUs and falls back to its SSE3
 * "Prescott" kernels (~7x slower here). It reads OPENBLAS_CORETYPE once, when the library
 * loads, so titan sets it from the CPU's features and re-executes itself before any BLAS
 * call (also when the stack limit was raised). A value already in the environment is
 * respected. */
static void reexec_for_setup(char **argv) {
    if (getenv("TITAN_NO_REEXEC")) return;
    int again = raise_stack_limit();
#if defined(__x86_64__)
    __builtin_cpu_init();
    const char *core = __builtin_cpu_supports("avx512f") ? "SkylakeX"
                       : __builtin_cpu_supports("avx2")  ? "Haswell"
                                                         : NULL;
    if (core && !getenv("OPENBLAS_CORETYPE")) {
        setenv("OPENBLAS_CORETYPE", core, 1);
        again = 1;
    }
#endif
    if (!again) return;
    setenv("TITAN_NO_REEXEC", "1", 1);
    /* the binary's own path, not /proc/self/exe: the kernel names the process (ps, top) after
     * the file executed, which would be "exe" */
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return;
    self[n] = 0;
    execv(self, argv);
    /* exec failed: carry on with whatever kernels OpenBLAS chose. */
}

/* What a subcommand needs before its handler runs. */
enum {
    CMD_BLAS = 1, /* OpenBLAS's kernels chosen for this CPU (re-executes the process) */
    CMD_MPI = 2,  /* every rank under mpirun runs it: MPI started, errors abort all ranks */
};

typedef struct {
    const char *name;
    const char *summary;                              /* one line of the top-level usage */
    int (*run)(int argc, char **argv, base_err *err); /* argv[1] is name; 0, -1 or exit status */
    void (*usage)(FILE *f);                           /* what `titan NAME --help` prints */
    unsigned setup;                                   /* CMD_* */
} titan_cmd;

/* The kernels bench takes a flavor's dims from the model registry, which ops sits below. */
static int cmd_kernels(int argc, char **argv, base_err *err) {
    return ops_cmd_kernels(argc, argv, model_flavor_dims, err);
}

/* The subcommands, in the order the top-level usage lists them. */
static const titan_cmd g_cmds[] = {
    {.name = "train",
     .summary = "train a Qwen3 model: a job config (TOML) and --section.key=value overrides",
     .run = train_cmd_train,
     .usage = train_config_usage,
     .setup = CMD_BLAS | CMD_MPI},
    {.name = "inspect",
     .summary = "a flavor's arguments and parameter counts, or validate a checkpoint / HF file",
     .run = ckpt_cmd_inspect,
     .usage = ckpt_cmd_inspect_usage},
    {.name = "convert",
     .summary = "HF model folder -> training checkpoint, or training checkpoint -> HF folder",
     .run = ckpt_cmd_convert,
     .usage = ckpt_cmd_convert_usage},
    {.name = "kernels",
     .summary = "list the op implementations; test them against the defaults, time them",
     .run = cmd_kernels,
     .usage = ops_cmd_kernels_usage},
    {.name = "encode",
     .summary = "text (or chat messages) -> token ids",
     .run = data_cmd_encode,
     .usage = data_cmd_encode_usage},
    {.name = "decode",
     .summary = "token ids -> text",
     .run = data_cmd_decode,
     .usage = data_cmd_decode_usage},
    {.name = "generate",
     .summary = "sample text from a model, streamed as it is produced",
     .run = train_cmd_generate,
     .usage = train_cmd_generate_usage,
     .setup = CMD_BLAS},
    {.name = "tokenize",
     .summary = "text / JSONL dataset -> token shards",
     .run = data_cmd_tokenize,
     .usage = data_cmd_tokenize_usage},
    {.name = "data",
     .summary = "print the training windows the loader makes",
     .run = data_cmd_data,
     .usage = data_cmd_data_usage},
    {.name = "plan",
     .summary = "per-rank memory and traffic of a config on N ranks",
     .run = train_cmd_plan,
     .usage = train_cmd_plan_usage},
    {.name = "report",
     .summary = "a run's report page (HTML charts) from metrics.jsonl; several runs overlaid",
     .run = train_cmd_report,
     .usage = train_cmd_report_usage},
};
#define N_CMDS ((int)(sizeof g_cmds / sizeof g_cmds[0]))

/* Prints text's words from column col on, wrapped under the description column (23) within
 * 90 columns, and a newline. */
static void wrap_words(FILE *f, const char *text, int col) {
    while (*text) {
        const size_t w = strcspn(text, " ");
        if (col && col + 1 + (int)w > 90) {
            fputc('\n', f);
            col = 0;
        }
        col += fprintf(f, "%*s%.*s", col ? 1 : 23, "", (int)w, text);
        text += w + strspn(text + w, " ");
    }
    fputc('\n', f);
}

static void usage(FILE *f) {
    fprintf(f, "usage: titan <command> [options]   (titan <command> --help for its options)\n"
               "       titan --version\n"
               "\n"
               "commands:\n");
    for (int i = 0; i < N_CMDS; i++) fprintf(f, "  %-9s %s\n", g_cmds[i].name, g_cmds[i].summary);
    fprintf(f, "\n"
               "model options (train, inspect, generate, plan):\n"
               "  --flavor NAME        a registered flavor (default debugmodel):\n");
    char list[1024];
    size_t at = 0;
    const char *const *names = model_flavor_names();
    for (int i = 0; names[i] && at < sizeof list; i++)
        at += (size_t)snprintf(list + at, sizeof list - at, "%s%s", i ? ", " : "", names[i]);
    wrap_words(f, list, 0);
    model_args_names(list, sizeof list);
    wrap_words(f, list, fprintf(f, "  --set KEY=VALUE      override a model argument:"));
}

/* titan --version: the release, the commit built, and the copy of the CPU kernels this CPU
 * runs (src/ops/cpu/dispatch.c; TITAN_ISA=default forces the baseline). */
static void version(void) {
    printf("titan %s (commit %s)\n", TITAN_VERSION, TITAN_GIT_COMMIT);
    printf("CPU kernels ISA: %s\n", ops_cpu_isa());
}

/* Flushes stdout at exit: output lost to a full disk or a closed pipe (SIGPIPE ignored) must
 * not end in status 0. Returns rc, or 1 with a message when stdout failed. */
static int stdout_status(int rc) {
    base_err e;
    if (!base_flush(stdout, "standard output", &e)) return rc;
    fprintf(stderr, "titan: error: %s\n", e.msg);
    return 1;
}

int main(int argc, char **argv) {
    base_std_fds_open();
    train_report_set_version(TITAN_VERSION " (commit " TITAN_GIT_COMMIT ")");
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : stdout_status(0);
    }
    if (!strcmp(argv[1], "--version")) {
        version();
        return stdout_status(0);
    }
    const titan_cmd *cmd = NULL;
    for (int i = 0; i < N_CMDS && !cmd; i++)
        if (!strcmp(argv[1], g_cmds[i].name)) cmd = &g_cmds[i];
    base_err err = {{0}};
    int rc = 0;
    if (!cmd) {
        usage(stderr);
        base_fail(&err, "unknown command '%s'", argv[1]);
        rc = -1;
    } else if (argc == 3 && (!strcmp(argv[2], "--help") || !strcmp(argv[2], "-h"))) {
        cmd->usage(stdout); /* before any set-up: help needs neither BLAS nor MPI */
        return stdout_status(0);
    } else {
        if (cmd->setup & CMD_BLAS) reexec_for_setup(argv);
        /* under mpirun every rank runs this; one plain process otherwise */
        if (cmd->setup & CMD_MPI) rc = dist_init(&argc, &argv, &err);
        /* after the BLAS re-exec (said once) and MPI's start (its handlers first) */
        base_explain_sigbus();
        if (!rc && dist_world_rank() <= 0) base_warn_vm_limit();
        if (!rc && (cmd->setup & CMD_BLAS)) rc = stack_limit_check(&err);
        /* every line from here carries its rank (the config's translation warns before the
         * mesh is built), other ranks' on stderr, as training logs them later */
        if (!rc && dist_world_size() > 1) {
            base_log_set_rank(dist_world_rank());
            if (dist_world_rank()) base_log_all_to_stderr(1);
        }
        /* OMP_NUM_THREADS far past the CPUs (100000: a typo) crashed inside oneDNN; it is
         * bounded as --threads is, with that warning */
        if (!rc) {
            const int t = omp_get_max_threads(), b = base_threads_bound(t, "OMP_NUM_THREADS");
            if (b < t) omp_set_num_threads(b);
        }
        /* unset, OpenMP takes a thread per CPU it sees; in a container whose CPU quota pays
         * for fewer (docker --cpus, a Kubernetes limit) that many threads are throttled in
         * turn and wait on each other at every barrier: as many threads as the quota's CPUs
         * (rounded up), said once; --threads or OMP_NUM_THREADS still choose */
        const double quota = rc || getenv("OMP_NUM_THREADS") ? 0 : base_cpu_quota();
        if (quota > 0 && (int)ceil(quota) < omp_get_max_threads())
            omp_set_num_threads((int)ceil(quota)); /* train's header says why */
        /* after MPI_Init (its threads keep ordinary stacks and their masks), before any
         * OpenMP region */
        if (!rc) rc = base_signals_to_own_thread(&err);
        if (!rc) rc = cmd->run(argc, argv, &err);
    }
    if (rc > 0) { /* usage printed (2), or train stopped on a signal after saving: 128 + N */
        dist_finalize();
        return rc;
    }
    if (rc) {
        if (dist_world_size() > 1) { /* one rank's error stops them all (MPI_Abort) */
            fprintf(stderr, "titan: error (rank %d of %d): %s\n", dist_world_rank(),
                    dist_world_size(), err.msg);
            dist_abort(1);
        }
        fprintf(stderr, "titan: error: %s\n", err.msg);
        dist_finalize();
        return 1;
    }
    dist_finalize();
    return stdout_status(0);
}
