/* checkpoint: where model weights come from (see the "model sources" section of
 * checkpoint.h): one resolver for titan generate --model, checkpoint.initial_load_path and
 * titan convert, and the model arguments each kind of source records. convert.c (titan
 * inspect, titan convert) calls into this file, never the other way. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/internal.h"

/* FOLDER/step-N: the folder and N, when the last path component is step-<digits>. */
static int split_step_dir(const char *path, char *folder, size_t n, int64_t *step) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", path);
    size_t len = strlen(tmp);
    while (len > 1 && tmp[len - 1] == '/') tmp[--len] = 0;
    char *slash = strrchr(tmp, '/');
    const char *base = slash ? slash + 1 : tmp;
    if (strncmp(base, "step-", 5) || base_parse_i64(base + 5, step) || *step < 0) return -1;
    if (slash == tmp)
        snprintf(folder, n, "/");
    else if (slash) {
        *slash = 0;
        snprintf(folder, n, "%s", tmp);
    } else
        snprintf(folder, n, ".");
    return 0;
}

/* A folder's newest titan step was picked: a newer step-N that is not a titan checkpoint (a
 * last_save_in_hf export, torchtitan's DCP) is said, since the user may have meant it. */
static void note_foreign(const ckpt_source *s) {
    int64_t foreign = -1;
    if (ckpt_step_foreign_latest(s->folder, &foreign) || foreign <= s->step) return;
    /* once: a command opens its source twice */
    base_log_once(
        BASE_LOG_WARN,
        "%s/step-%lld is newer but not a titan checkpoint (no metadata.json: a Hugging Face "
        "export or another program's); reading step-%lld. Name a folder to read another",
        s->folder, (long long)foreign, (long long)s->step);
}

int ckpt_source_open(ckpt_source *s, const char *path, base_err *err) {
    memset(s, 0, sizeof *s);
    if (!path || !*path) return base_fail(err, "no model path given");
    snprintf(s->path, sizeof s->path, "%s", path);
    if (base_is_file(path)) {
        s->kind = CKPT_SRC_FILE;
        return 0;
    }
    if (!base_is_dir(path)) return base_fail(err, "%s: no such model file or folder", path);
    if (base_has_file(path, "metadata.json")) {
        if (split_step_dir(path, s->folder, sizeof s->folder, &s->step))
            return base_fail(err, "%s: a checkpoint step folder must be named step-N", path);
        s->kind = CKPT_SRC_STEP;
        return 0;
    }
    if (base_has_file(path, "config.json")) {
        s->kind = CKPT_SRC_HF;
        return 0;
    }
    if (base_has_file(path, CKPT_ARGS_FILE)) {
        s->kind = CKPT_SRC_TITAN_MODEL;
        return 0;
    }
    /* a folder of steps: every one readable (an unreadable newest would be passed over) */
    if (ckpt_step_latest(path, &s->step) == 0) {
        if (ckpt_step_folder_check(path, -1, err)) return -1;
        snprintf(s->folder, sizeof s->folder, "%s", path);
        s->kind = CKPT_SRC_STEP;
        note_foreign(s);
        return 0;
    }
    /* a run folder (job.dump_folder): its checkpoint/ folder's newest step */
    snprintf(s->folder, sizeof s->folder, "%.4000s/checkpoint", path);
    if (base_is_dir(s->folder) && ckpt_step_latest(s->folder, &s->step) == 0) {
        if (ckpt_step_folder_check(s->folder, -1, err)) return -1;
        s->kind = CKPT_SRC_STEP;
        note_foreign(s);
        return 0;
    }
    s->folder[0] = 0;
    if (base_has_file(path, "model.safetensors")) {
        snprintf(s->path, sizeof s->path, "%s/model.safetensors", path);
        s->kind = CKPT_SRC_FILE;
        return 0;
    }
    /* nothing found: say so when the folder (or its steps) could not be read, not "no model" */
    char ck[4200];
    snprintf(ck, sizeof ck, "%.4000s/checkpoint", path);
    if (ckpt_step_folder_check(path, -1, err) ||
        (base_is_dir(ck) && ckpt_step_folder_check(ck, -1, err)))
        return -1;
    /* torchtitan's own checkpoints (DCP: .metadata and __R_0.distcp files), as the folder or its
     * newest step-N (or its checkpoint/'s): the conversion torchtitan ships */
    char dcp[4200] = "";
    if (base_has_file(path, ".metadata"))
        snprintf(dcp, sizeof dcp, "%.4000s", path);
    else
        for (int i = 0; i < 2 && !dcp[0]; i++) {
            const char *dir = i ? ck : path;
            char step[4200];
            int64_t foreign = -1;
            if (base_is_dir(dir) && !ckpt_step_foreign_latest(dir, &foreign) && foreign >= 0) {
                snprintf(step, sizeof step, "%.4000s/step-%lld", dir, (long long)foreign);
                if (base_has_file(step, ".metadata")) snprintf(dcp, sizeof dcp, "%s", step);
            }
        }
    if (dcp[0])
        return base_fail(
            err,
            "%s: a torchtitan (DCP) checkpoint (.metadata), which titan does not read; "
            "convert it to a Hugging Face folder with torchtitan's "
            "scripts/checkpoint_conversion/convert_to_hf.py (or save it so in "
            "torchtitan: checkpoint.last_save_in_hf) and give that folder",
            dcp);
    return base_fail(err,
                     "%s: not a model: no config.json (Hugging Face), metadata.json or complete "
                     "step-N (titan checkpoint, also under checkpoint/: a run folder), "
                     "model_args.json or model.safetensors",
                     path);
}

/* A titan model folder's model_args.json (ckpt_train_save_model writes it): the model
 * arguments codec's full form (model_args_from_json). */
int ckpt_train_read_args(const char *dir, model_args *a, base_err *err) {
    char path[4096];
    if (base_path_join(path, sizeof path, dir, CKPT_ARGS_FILE, err)) return -1;
    json_error_t jerr;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return base_fail(err, "%s: invalid JSON: %s (line %d column %d)", path, jerr.text,
                         jerr.line, jerr.column);
    memset(a, 0, sizeof *a);
    int rc = model_args_from_json(root, path, a, err);
    json_decref(root);
    return rc;
}

/* A step checkpoint's "train" object (metadata.json), parsed into *t (NULL if it is not JSON:
 * the caller's lookups then fail by name), and the metadata's path in p[n]. */
static int step_train(const ckpt_source *s, json_t **t, char *p, size_t n, base_err *err) {
    char *tj = NULL;
    int world = 0;
    snprintf(p, n, "%s/step-%lld/metadata.json", s->folder, (long long)s->step);
    *t = NULL;
    if (ckpt_step_read_meta(s->folder, s->step, &tj, &world, err)) return -1;
    *t = json_loads(tj, 0, NULL);
    free(tj);
    return 0;
}

int ckpt_source_args(const ckpt_source *s, model_args *a, base_err *err) {
    char p[4200];
    switch (s->kind) {
    case CKPT_SRC_HF:
        snprintf(p, sizeof p, "%s/config.json", s->path);
        return ckpt_hf_config_read(p, a, err);
    case CKPT_SRC_TITAN_MODEL:
        return ckpt_train_read_args(s->path, a, err);
    case CKPT_SRC_STEP: {
        json_t *t;
        if (step_train(s, &t, p, sizeof p, err)) return -1;
        /* what the metadata leaves out comes from debugmodel: max_seq_len in checkpoints
         * written before it was recorded (said: an export writes it as the context) */
        model_flavor("debugmodel", a, err);
        snprintf(a->flavor, sizeof a->flavor, "checkpoint");
        const json_t *mj = json_object_get(t, "model");
        int rc = json_is_object(mj) ? model_args_from_json(mj, p, a, err)
                                    : base_fail(err, "%s: \"train\" has no \"model\" object", p);
        if (rc == 0 && !json_object_get(mj, "max_seq_len"))
            base_log(BASE_LOG_WARN,
                     "%s: the checkpoint does not record the model's context (max_seq_len: "
                     "an older checkpoint): %d assumed, which an export writes as "
                     "max_position_embeddings",
                     p, a->max_seq_len);
        json_decref(t);
        return rc;
    }
    default:
        return base_fail(err,
                         "%s: a bare safetensors file does not say which model it holds (give the "
                         "model arguments: flavor / overrides, or use an HF folder)",
                         s->path);
    }
}

int ckpt_tokenizer_hash(const char *dir, uint64_t *h) {
    char p[4200];
    size_t n = 0;
    base_err e;
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    char *raw = base_read_file(p, (size_t)1 << 30, &n, &e);
    if (!raw) return -1;
    *h = base_hash_bytes(BASE_HASH_INIT, raw, n);
    free(raw);
    return 0;
}

int ckpt_source_export_facts(const ckpt_source *s, ckpt_export_facts *f, base_err *err) {
    memset(f, 0, sizeof *f);
    f->ids[0] = f->ids[1] = f->ids[2] = -1;
    if (s->kind != CKPT_SRC_STEP) return 0;
    char p[4200];
    json_t *t;
    if (step_train(s, &t, p, sizeof p, err)) return -1;
    int rc = 0;
    const json_t *tok = json_object_get(t, "tokenizer");
    for (int i = 0; rc == 0 && i < 3 && json_is_object(tok); i++) {
        const json_t *v = json_object_get(tok, ckpt_token_id_keys[i]);
        if (!v) continue;
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
            rc =
                base_fail(err, "%s: \"train\".\"tokenizer\".%s is not a token id (an integer >= 0)",
                          p, ckpt_token_id_keys[i]);
        else
            f->ids[i] = (int32_t)json_integer_value(v), f->have_ids = 1;
    }
    const json_t *arr = json_object_get(t, "expert_bias");
    for (size_t i = 0; json_is_array(arr) && i < json_array_size(arr) && !f->expert_bias; i++)
        f->expert_bias = json_number_value(json_array_get(arr, i)) != 0;
    const char *rpath = json_string_value(json_object_get(tok, "path"));
    const char *rhash = json_string_value(json_object_get(tok, "tokenizer_json_fnv1a64"));
    if (rc == 0 && rpath && rhash) {
        char have[17] = "";
        uint64_t h;
        if (snprintf(f->tokenizer_dir, sizeof f->tokenizer_dir, "%s", rpath) >=
            (int)sizeof f->tokenizer_dir) /* a cut path could name another folder */
            rc = base_fail(err, "%s: \"train\".\"tokenizer\".path is over %zu bytes", p,
                           sizeof f->tokenizer_dir - 1);
        else if (ckpt_tokenizer_hash(rpath, &h) == 0)
            snprintf(have, sizeof have, "%016llx", (unsigned long long)h);
        f->tokenizer = strcmp(have, rhash) ? 2 : 1;
    }
    json_decref(t);
    return rc;
}

int ckpt_source_load(const ckpt_source *s, const model *m, float *base, base_err *err) {
    char p[4200];
    if (s->kind == CKPT_SRC_STEP) {
        ckpt_step_buf b = {.name = "model",
                           .dst = base,
                           .numel = m->n_floats,
                           .global_numel = m->n_floats,
                           .rows = 1,
                           .stride = m->n_floats};
        return ckpt_step_load(s->folder, s->step, &b, 1, err);
    }
    if (s->kind == CKPT_SRC_FILE) return ckpt_load_model(m, base, s->path, err);
    ckpt_set set;
    const int hf = s->kind == CKPT_SRC_HF;
    if (!hf) snprintf(p, sizeof p, "%s/model.safetensors", s->path);
    if (hf ? ckpt_set_open_dir(&set, s->path, err) : ckpt_set_open_file(&set, p, err)) return -1;
    int rc = ckpt_load_model_set(m, base, &set, hf ? CKPT_NAMES_HF : CKPT_NAMES_TITAN, err);
    ckpt_set_close(&set);
    return rc;
}

const char *ckpt_source_kind_name(ckpt_src_kind k) {
    static const char *const names[] = {"safetensors file", "Hugging Face folder",
                                        "titan model folder", "titan training checkpoint"};
    return (unsigned)k < 4 ? names[k] : "?";
}
