/* checkpoint: where model weights come from (see the "model sources" section of
 * checkpoint.h): one resolver for titan generate --model, checkpoint.initial_load_path and
 * titan convert, and the model arguments each kind of source records. convert.c (titan
 * inspect, titan convert) calls into this file, never the other way. */
#include <jansson.h>
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
    if (ckpt_step_latest(path, &s->step) == 0) {
        snprintf(s->folder, sizeof s->folder, "%s", path);
        s->kind = CKPT_SRC_STEP;
        return 0;
    }
    /* a run folder (job.dump_folder): its checkpoint/ folder's newest step */
    snprintf(s->folder, sizeof s->folder, "%.4000s/checkpoint", path);
    if (base_is_dir(s->folder) && ckpt_step_latest(s->folder, &s->step) == 0) {
        s->kind = CKPT_SRC_STEP;
        return 0;
    }
    s->folder[0] = 0;
    if (base_has_file(path, "model.safetensors")) {
        snprintf(s->path, sizeof s->path, "%s/model.safetensors", path);
        s->kind = CKPT_SRC_FILE;
        return 0;
    }
    return base_fail(err,
                     "%s: not a model: no config.json (Hugging Face), metadata.json or complete "
                     "step-N (titan checkpoint, also under checkpoint/: a run folder), "
                     "model_args.json or model.safetensors",
                     path);
}

/* Model arguments from a checkpoint's "train.model" object. */
static int args_from_json(const char *where, const json_t *j, model_args *a, base_err *err) {
    static const char *const ints[] = {"dim",      "n_layers", "n_heads",    "n_kv_heads",
                                       "head_dim", "ffn_dim",  "vocab_size", "tie_embeddings"};
    static const char *const reals[] = {"rope_theta", "norm_eps"};
    if (!json_is_object(j)) return base_fail(err, "%s: \"train\" has no \"model\" object", where);
    model_flavor("debugmodel", a, err);
    snprintf(a->flavor, sizeof a->flavor, "checkpoint");
    char buf[64];
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        const json_t *v = json_object_get(j, ints[i]);
        if (!json_is_integer(v))
            return base_fail(err, "%s: train.model.%s is missing or not an integer", where,
                             ints[i]);
        snprintf(buf, sizeof buf, "%lld", (long long)json_integer_value(v));
        if (model_args_set(a, ints[i], buf, err)) return -1;
    }
    for (size_t i = 0; i < sizeof reals / sizeof reals[0]; i++) {
        const json_t *v = json_object_get(j, reals[i]);
        if (!json_is_number(v))
            return base_fail(err, "%s: train.model.%s is missing or not a number", where, reals[i]);
        snprintf(buf, sizeof buf, "%.17g", json_number_value(v));
        if (model_args_set(a, reals[i], buf, err)) return -1;
    }
    if (json_object_get(j, "n_experts")) { /* an MoE (written by train_moe_args_json) */
        static const char *const moe[] = {"n_experts", "top_k", "moe_ffn_dim", "norm_topk_prob",
                                          "router_aux_loss_coef"};
        for (size_t i = 0; i < sizeof moe / sizeof moe[0]; i++) {
            const json_t *v = json_object_get(j, moe[i]);
            if (!json_is_number(v))
                return base_fail(err, "%s: train.model.%s is missing or not a number", where,
                                 moe[i]);
            snprintf(buf, sizeof buf, "%.17g", json_number_value(v));
            if (model_args_set(a, moe[i], buf, err)) return -1;
        }
    }
    base_err why;
    if (model_args_validate(a, &why)) return base_fail(err, "%s: %s", where, why.msg);
    return 0;
}

/* A titan model folder's model_args.json (ckpt_train_save_model writes it): the arguments
 * under their --set names, plus "flavor". */
int ckpt_train_read_args(const char *dir, model_args *a, base_err *err) {
    char path[4096];
    if (base_path_join(path, sizeof path, dir, CKPT_ARGS_FILE, err)) return -1;
    json_error_t jerr;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return base_fail(err, "%s: invalid JSON: %s (line %d column %d)", path, jerr.text,
                         jerr.line, jerr.column);
    memset(a, 0, sizeof *a);
    int rc = json_is_object(root) ? 0 : base_fail(err, "%s: not a JSON object", path);
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (rc) break;
        char val[64];
        if (!strcmp(key, "flavor") && json_is_string(v)) {
            snprintf(a->flavor, sizeof a->flavor, "%s", json_string_value(v));
            continue;
        }
        if (json_is_integer(v))
            snprintf(val, sizeof val, "%lld", (long long)json_integer_value(v));
        else if (json_is_real(v))
            snprintf(val, sizeof val, "%.17g", json_real_value(v));
        else {
            rc = base_fail(err, "%s: field '%s' is not a number", path, key);
            break;
        }
        base_err e2;
        if (model_args_set(a, key, val, &e2)) rc = base_fail(err, "%s: %s", path, e2.msg);
    }
    json_decref(root);
    if (rc == 0 && model_args_validate(a, err)) {
        base_err e2 = *err;
        rc = base_fail(err, "%s: %s", path, e2.msg);
    }
    return rc;
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
        char *tj = NULL;
        int world = 0;
        snprintf(p, sizeof p, "%s/step-%lld/metadata.json", s->folder, (long long)s->step);
        if (ckpt_step_read_meta(s->folder, s->step, &tj, &world, err)) return -1;
        json_t *t = json_loads(tj, 0, NULL);
        free(tj);
        int rc = args_from_json(p, json_object_get(t, "model"), a, err);
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

int ckpt_source_load(const ckpt_source *s, const model *m, float *base, base_err *err) {
    char p[4200];
    if (s->kind == CKPT_SRC_STEP) {
        ckpt_step_buf b = {"model", NULL, base, 0, m->n_floats, m->n_floats, 1, m->n_floats};
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
