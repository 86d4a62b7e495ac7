/* train: what a run starts from. The resume decision (which step-N, which of its parts, from
 * which step training continues) is made before the model is initialised, so that the random
 * init is skipped for weights a load overwrites, and a resume past training.steps is refused
 * before anything large is built. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/internal.h"

/* torchtitan's state-dict keys (components/checkpoint.py), in train_ckpt_part's bit order */
static const char *const part_names[] = {"model", "optimizer", "lr_scheduler", "dataloader",
                                         "train_state"};

unsigned train_ckpt_part_parse(const char *name) {
    for (unsigned i = 0; i < sizeof part_names / sizeof part_names[0]; i++)
        if (!strcmp(name, part_names[i])) return 1u << i;
    return 0;
}

void train_ckpt_parts_str(unsigned parts, char *buf, size_t n) {
    size_t at = 0;
    buf[0] = 0;
    for (unsigned i = 0; i < sizeof part_names / sizeof part_names[0]; i++)
        if (parts & (1u << i) && at < n)
            at += (size_t)snprintf(buf + at, n - at, " %s", part_names[i]);
}

int train_start_plan(const train_opts *o, train_start *p, base_err *err) {
    memset(p, 0, sizeof *p);
    p->resume_step = -1;
    if (!o->ckpt.enable) return 0;
    train_ckpt_folder(o, p->ckdir, sizeof p->ckdir);
    int64_t step = o->ckpt.load_step;
    if (step < 0) ckpt_step_latest(p->ckdir, &step);
    if (o->ckpt.create_seed) { /* a seed is the first checkpoint of its folder */
        if (step >= 0)
            return base_fail(err,
                             "checkpoint.create_seed_checkpoint: %s already holds step-%lld; a "
                             "seed checkpoint goes into a folder without checkpoints",
                             p->ckdir, (long long)step);
        return 0;
    }
    if (step < 0) {
        p->initial = o->ckpt.initial_load_path;
        p->skip_init = p->initial != NULL; /* ckpt_source_load writes every weight */
        return 0;
    }
    char *tj = NULL;
    int world;
    if (ckpt_step_read_meta(p->ckdir, step, &tj, &world, err)) return -1;
    json_t *t = json_loads(tj, 0, NULL);
    free(tj);
    const int model_only = json_is_true(json_object_get(t, "model_only"));
    json_decref(t);
    p->resume_step = step;
    p->load = TRAIN_CKPT_ALL & ~o->ckpt.exclude;
    if (model_only) p->load &= TRAIN_CKPT_MODEL; /* weights only: a fresh start from them */
    p->start = p->load & TRAIN_CKPT_TRAIN_STATE ? step : 0;
    p->lr_base = (p->load & TRAIN_CKPT_LR_SCHEDULER ? step : 0) - p->start;
    p->skip_init = (p->load & TRAIN_CKPT_MODEL) != 0;
    if (p->start > o->steps)
        return base_fail(err,
                         "%s/step-%lld is past training.steps = %d: the run in %s has trained "
                         "further than this job asks, so it would train nothing. To start "
                         "afresh use another job.dump_folder (or checkpoint.folder) or remove "
                         "%s; to continue, raise training.steps; checkpoint.load_step picks an "
                         "earlier step",
                         p->ckdir, (long long)step, o->steps, p->ckdir, p->ckdir);
    if (p->start == o->steps)
        base_log(BASE_LOG_INFO,
                 "checkpoint: %s/step-%lld is at training.steps = %d: it is loaded and no step "
                 "is trained (as torchtitan)",
                 p->ckdir, (long long)step, o->steps);
    return 0;
}

double train_phase_begin(const char *what) {
    base_log(BASE_LOG_INFO, "%s ...", what);
    return base_now();
}

void train_phase_end(const char *what, double t0) {
    const double dt = base_now() - t0;
    if (dt >= 1.0) base_log(BASE_LOG_INFO, "%s: done in %.1f s", what, dt);
}

json_t *train_tokenizer_json(const train_opts *o, const data_tok *tok) {
    if (!tok) return o->data_path ? json_string("bytes") : json_null();
    char hex[17], *abs = realpath(o->tokenizer_dir, NULL); /* generate may run elsewhere */
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)data_tok_fingerprint(tok));
    json_t *j =
        json_pack("{ss ss}", "path", abs ? abs : o->tokenizer_dir, "tokenizer_json_fnv1a64", hex);
    free(abs);
    return j;
}
