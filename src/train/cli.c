/* train: `titan train`, the job config from the command line (defaults, --config FILE, then
 * overrides) and the run. */
#include <omp.h>
#include <signal.h>
#include <stdio.h>

#include "train/train.h"

/* titan train: a job config (defaults, --config FILE, then command-line overrides). */
int train_cmd_train(int argc, char **argv, base_err *err) {
    train_config c;
    train_config_defaults(&c);
    train_cli cli;
    train_opts o;
    int rc = train_config_from_args(&c, argc, argv, 2, &cli, err);
    if (!rc && cli.help) {
        train_config_usage(stdout);
    } else if (!rc && cli.print_config) {
        if (!(rc = train_config_resolve_seed(&c, err))) train_config_print(&c, stdout);
    } else if (!rc && !train_config_names_job(&c)) {
        fprintf(stderr, "usage: titan train --config FILE [--section.key=value ...]\n"
                        "       titan train --flavor NAME (--data PATH | --random-tokens) "
                        "[options]\n"
                        "nothing to train: give a config file, a flavor or a dataset "
                        "(titan train --help lists every option)\n");
        rc = 2;
    } else if (!rc && !(rc = train_config_to_opts(&c, &o, err))) {
        /* a console that goes away (`titan train | tee log`, tee killed; `| head`) must not
         * end the training: its writes fail (EPIPE), the run goes on with its checkpoints,
         * metrics and export, and ends in status 1 naming standard output (it had been
         * killed by SIGPIPE in silence, mid-run) */
        signal(SIGPIPE, SIG_IGN);
        if (c.training.threads > 0)
            omp_set_num_threads(base_threads_bound((int)c.training.threads, "training.threads"));
        if (c.job.print_config && dist_world_rank() == 0) train_config_print(&c, stdout);
        if (o.memory_estimation) rc = train_plan_print_for(&o, stdout, err);
        if (!rc) rc = train_run(&o, err);
    }
    train_config_free(&c);
    return rc;
}
