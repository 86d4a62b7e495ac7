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

/* A step-N folder of dir without metadata.json: not a titan checkpoint (titan writes step-N.tmp
 * and renames it once complete), so most likely torchtitan's DCP one (.metadata, *.distcp).
 * Refused where it is newer than dir's newest titan checkpoint (torchtitan would resume it,
 * titan would silently train from an older state or from scratch), warned about otherwise. */
static int check_foreign_steps(const char *dir, int64_t newest, base_err *err) {
    int64_t foreign = -1;
    ckpt_step_foreign_latest(dir, &foreign);
    if (foreign < 0) return 0;
    char sub[4200];
    snprintf(sub, sizeof sub, "%s/step-%lld", dir, (long long)foreign);
    if (foreign > newest && base_has_file(sub, "config.json"))
        return base_fail(err,
                         "%s is a Hugging Face folder (checkpoint.last_save_in_hf writes the last "
                         "save so), not a titan checkpoint: it holds weights only, so it cannot "
                         "be resumed. To train on from its weights, set "
                         "checkpoint.initial_load_path to it with checkpoint.initial_load_in_hf = "
                         "true and another checkpoint.folder (or job.dump_folder)",
                         sub);
    if (foreign > newest && base_has_file(sub, ".metadata"))
        return base_fail(err,
                         "%s is a torchtitan (DCP) checkpoint (.metadata), which titan cannot "
                         "resume and does not read: it is newer than any titan checkpoint in %s. "
                         "To train on from its weights, convert it to a Hugging Face folder with "
                         "torchtitan's scripts/checkpoint_conversion/convert_to_hf.py and set "
                         "checkpoint.initial_load_path to that with checkpoint.initial_load_in_hf "
                         "= true and another checkpoint.folder (or job.dump_folder)",
                         sub, dir);
    if (foreign > newest)
        return base_fail(err,
                         "%s/step-%lld is not a titan checkpoint (no metadata.json: torchtitan's "
                         "DCP format?) and is newer than any titan checkpoint there, so it cannot "
                         "be resumed; move it out of %s (or set checkpoint.folder / "
                         "job.dump_folder elsewhere) to %s",
                         dir, (long long)foreign, dir,
                         newest >= 0 ? "resume the newest titan checkpoint" : "start afresh");
    base_log(BASE_LOG_WARN,
             "checkpoint: %s/step-%lld is not a titan checkpoint (no metadata.json); "
             "ignored",
             dir, (long long)foreign);
    return 0;
}

/* A load_step rewind to step among newer checkpoints (an earlier run's) in dir: said once, as
 * they outlive this run's saves until it reaches their steps (keep_latest_k prunes only up to
 * the step just saved), and a later resume without load_step would take the newest. */
static void warn_newer_steps(const char *dir, int64_t step) {
    int64_t *s;
    int n, at = 0;
    char names[512] = "";
    ckpt_step_list(dir, &s, &n);
    int first = n;
    while (first > 0 && s[first - 1] > step) first--;
    for (int i = first; i < n && at < (int)sizeof names; i++)
        at += snprintf(names + at, sizeof names - (size_t)at, "%s step-%lld", i > first ? "," : "",
                       (long long)s[i]);
    if (first < n)
        base_log(BASE_LOG_WARN,
                 "checkpoint: checkpoint.load_step rewinds to step-%lld, but %s holds newer "
                 "checkpoints of an earlier run:%s. This run's saves replace them only as it "
                 "reaches their steps (keep_latest_k never prunes them), and a later resume "
                 "without checkpoint.load_step picks the newest of them, step-%lld, not this "
                 "run's last save",
                 (long long)step, dir, names, (long long)s[n - 1]);
    free(s);
}

/* The resume of from/step-N: what it loads and from which step training continues. */
static int plan_resume(const train_opts *o, train_start *p, const char *from, int64_t step,
                       int initial, base_err *err) {
    json_t *t = train_step_state(from, step, err);
    if (!t) return -1;
    const int model_only = json_is_true(json_object_get(t, "model_only"));
    json_decref(t);
    if (initial && model_only)
        return base_fail(err,
                         "checkpoint.initial_load_model_only = false loads the whole training "
                         "state, but %s/step-%lld holds weights only (a model-only save): set "
                         "checkpoint.initial_load_model_only = true to start from its weights",
                         from, (long long)step);
    snprintf(p->from, sizeof p->from, "%s", from);
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
                         from, (long long)step, o->steps, from, from);
    if (p->start == o->steps)
        base_log(BASE_LOG_INFO,
                 "checkpoint: %s/step-%lld is at training.steps = %d: it is loaded and no step "
                 "is trained (as torchtitan)",
                 from, (long long)step, o->steps);
    return 0;
}

/* checkpoint.initial_load_model_only = false (torchtitan: the initial load restores the whole
 * state: weights, optimizer, schedule, data position, step): a resume from the initial
 * source, which must be a titan training checkpoint; saves still go to ckdir. */
static int plan_initial_full(const train_opts *o, train_start *p, base_err *err) {
    ckpt_source s;
    if (ckpt_source_open(&s, o->ckpt.initial_load_path, err)) return -1;
    if (s.kind != CKPT_SRC_STEP)
        return base_fail(err,
                         "checkpoint.initial_load_model_only = false loads the whole training "
                         "state (optimizer, schedule, data position, step), which only a titan "
                         "training checkpoint (FOLDER/step-N) holds; %s is %s, weights only: set "
                         "checkpoint.initial_load_model_only = true",
                         o->ckpt.initial_load_path, ckpt_source_kind_name(s.kind));
    return plan_resume(o, p, s.folder, s.step, 1, err);
}

int train_start_plan(const train_opts *o, train_start *p, base_err *err) {
    memset(p, 0, sizeof *p);
    p->resume_step = -1;
    if (!o->ckpt.enable) return 0;
    train_ckpt_folder(o, p->ckdir, sizeof p->ckdir);
    int64_t step = o->ckpt.load_step;
    if (ckpt_step_folder_check(p->ckdir, step, err)) return -1; /* a named step: that one */
    if (step < 0) {
        ckpt_step_latest(p->ckdir, &step);
        if (check_foreign_steps(p->ckdir, step, err)) return -1;
    }
    if (o->ckpt.create_seed) { /* a seed is the first checkpoint of its folder */
        if (step >= 0)
            return base_fail(err,
                             "checkpoint.create_seed_checkpoint: %s already holds step-%lld; a "
                             "seed checkpoint goes into a folder without checkpoints",
                             p->ckdir, (long long)step);
        return 0;
    }
    if (step < 0) {
        if (o->ckpt.initial_load_path && !o->ckpt.initial_load_model_only)
            return plan_initial_full(o, p, err);
        p->initial = o->ckpt.initial_load_path;
        p->skip_init = p->initial != NULL; /* ckpt_source_load writes every weight */
        return 0;
    }
    if (plan_resume(o, p, p->ckdir, step, 0, err))
        return train_hint_earlier_step(o, p->ckdir, step, err);
    /* A fresh start (from step 1: a weights-only last save, an excluded train_state) in a
     * folder holding later steps would write its checkpoints among the newer ones of the run
     * before: every later resume picks the old newest again, so its training would be lost
     * without a word (torchtitan fails such a load). A load_step rewind (the training state
     * of an earlier step, named) stays allowed, as in torchtitan: its saves replace the later
     * steps as it reaches them (warn_newer_steps). */
    int64_t newest = step;
    ckpt_step_latest(p->ckdir, &newest);
    if (!o->ckpt.load_only && p->start == 0 && newest > 0) {
        /* a finished run rerun: its export killed or failed leaves no config.json there,
         * while the weights-only last save holds what it would have written */
        char cfg[4200], hint[9000] = "";
        snprintf(cfg, sizeof cfg, "%s/config.json", o->out_dir ? o->out_dir : "");
        if (o->out_dir && !base_is_file(cfg))
            snprintf(hint, sizeof hint,
                     ". The run's Hugging Face export %s is missing or incomplete: `titan convert "
                     "%s/step-%lld %s` writes it from that checkpoint",
                     o->out_dir, p->ckdir, (long long)step, o->out_dir);
        return base_fail(err,
                         "%s holds step-%lld%s, but this run starts at step 1: its checkpoints "
                         "would be written among that run's newer ones, which every later resume "
                         "picks first. "
                         "To train on from those weights, set checkpoint.initial_load_path = "
                         "%s/step-%lld and another checkpoint.folder (or job.dump_folder); or "
                         "remove the old checkpoints; or set checkpoint.load_only = true%s",
                         p->ckdir, (long long)newest,
                         p->load & TRAIN_CKPT_TRAIN_STATE ? "" : " (loaded as weights only)",
                         p->ckdir, (long long)step, hint);
    }
    if (o->ckpt.load_step >= 0 && !o->ckpt.load_only) warn_newer_steps(p->ckdir, step);
    return 0;
}

int train_hint_earlier_step(const train_opts *o, const char *dir, int64_t step, base_err *err) {
    int64_t *steps = NULL, best = -1;
    int n = 0;
    if (o->ckpt.load_step >= 0 || ckpt_step_list(dir, &steps, &n)) return -1;
    for (int i = 0; i < n; i++)
        if (steps[i] < step && steps[i] > best) best = steps[i];
    free(steps);
    const size_t len = strlen(err->msg);
    if (best >= 0 && len < sizeof err->msg - 1)
        snprintf(err->msg + len, sizeof err->msg - len,
                 " (if step-%lld is damaged, checkpoint.load_step = %lld resumes from the one "
                 "before it)",
                 (long long)step, (long long)best);
    return -1;
}

double train_phase_begin(const char *what) {
    base_log(BASE_LOG_INFO, "%s ...", what);
    return base_now();
}

void train_phase_end(const char *what, double t0) {
    const double dt = base_now() - t0;
    if (dt >= 1.0) base_log(BASE_LOG_INFO, "%s: done in %.1f s", what, dt);
}

void train_token_ids(const data_tok *tok, int32_t ids[3]) {
    ids[0] = tok ? data_tok_bos_id(tok) : -1;
    ids[1] = tok ? data_tok_eos_id(tok) : -1;
    ids[2] = tok ? data_tok_pad_id(tok) : -1;
}

json_t *train_tokenizer_json(const train_opts *o, const data_tok *tok, const data_mix *loader) {
    const char *shard_tok;
    uint64_t shard_hash;
    if (!tok && loader && data_mix_shard_tokenizer(loader, &shard_tok, &shard_hash) == 0) {
        /* token shards trained on without a tokenizer: theirs (never "bytes") */
        char hex[17];
        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)shard_hash);
        return json_pack("{ss ss}", "path", shard_tok, "tokenizer_json_fnv1a64", hex);
    }
    if (!tok) return o->data_path ? json_string("bytes") : json_null();
    char hex[17], *abs = realpath(o->tokenizer_dir, NULL); /* generate may run elsewhere */
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)data_tok_fingerprint(tok));
    json_t *j =
        json_pack("{ss ss}", "path", abs ? abs : o->tokenizer_dir, "tokenizer_json_fnv1a64", hex);
    free(abs);
    /* for `titan convert` of the checkpoint: the ids the run's own export writes */
    int32_t ids[3];
    train_token_ids(tok, ids);
    for (int i = 0; i < 3; i++)
        if (ids[i] >= 0) json_object_set_new(j, ckpt_token_id_keys[i], json_integer(ids[i]));
    return j;
}
