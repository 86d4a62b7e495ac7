/* train: the ranges of the trainer's state in a checkpoint (metadata.json "train"), checked
 * before any of it is used: a hand-edited or corrupted value stops the resume with the file
 * and the field named instead of producing NaN (a negative AdamW step) or a wrong data
 * position. */
#include <jansson.h>
#include <stdio.h>

#include "train/internal.h"

/* An integer field in [lo, hi]; absent fails too (every titan checkpoint writes them all). */
static int int_in(const json_t *t, const char *key, json_int_t lo, json_int_t hi, const char *where,
                  base_err *err) {
    const json_t *v = json_object_get(t, key);
    if (!json_is_integer(v))
        return base_fail(err, "%s: train.%s is %s, not an integer", where, key,
                         v ? "of another type" : "missing");
    const json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return base_fail(err, "%s: train.%s = %lld is out of range [%lld, %lld]", where, key,
                         (long long)x, (long long)lo, (long long)hi);
    return 0;
}

int train_state_check(const json_t *t, const char *dir, int64_t step, base_err *err) {
    char where[4300];
    snprintf(where, sizeof where, "%s/step-%lld/metadata.json", dir, (long long)step);
    if (!json_is_object(t)) return base_fail(err, "%s: \"train\" is not an object", where);
    const json_int_t big = (json_int_t)1 << 62;
    if (int_in(t, "step", step, step, where, err) ||
        int_in(t, "adam_step", 0, step, where, err) || /* one AdamW step per training step */
        int_in(t, "tokens_seen", 0, big, where, err) ||
        int_in(t, "random_tokens_counter", 0, big, where, err) ||
        int_in(t, "seed", 0, INT64_MAX, where, err)) /* training.seed's whole range */
        return -1;
    if (!json_is_boolean(json_object_get(t, "model_only")))
        return base_fail(err, "%s: train.model_only is not a boolean", where);
    if (!json_is_object(json_object_get(t, "model")))
        return base_fail(err, "%s: train.model is not an object", where);
    const json_t *dl = json_object_get(t, "data_loader"), *dls = json_object_get(t, "data_loaders");
    if (!json_is_null(dl) && !json_is_object(dl))
        return base_fail(err, "%s: train.data_loader is neither null nor an object", where);
    if (dls && (!json_is_array(dls) || json_array_size(dls) < 2))
        return base_fail(err, "%s: train.data_loaders is not an array of 2 or more states", where);
    return 0;
}

int train_model_check(const json_t *t, const model_args *run, const char *dir, int64_t step,
                      base_err *err) {
    char where[4300];
    snprintf(where, sizeof where, "%s/step-%lld/metadata.json", dir, (long long)step);
    model_args saved = *run; /* what the identity leaves out is the run's */
    if (model_args_from_json(json_object_get(t, "model"), where, &saved, err)) return -1;
    if (model_args_equal(&saved, run)) return 0;
    char diff[1024], have[1024], want[1024];
    model_args_diff(&saved, run, diff, sizeof diff);
    model_args_describe(&saved, have, sizeof have);
    model_args_describe(run, want, sizeof want);
    return base_fail(err,
                     "%s/step-%lld: the checkpoint's model is not this run's: %s (the "
                     "checkpoint's %s, this run's %s)",
                     dir, (long long)step, diff, have, want);
}
