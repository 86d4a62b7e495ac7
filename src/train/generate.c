/* train: loading a model for inference, the generation loop and the streaming text output. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint/checkpoint.h"
#include "train/internal.h"

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}
static int is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* Model arguments from a training checkpoint's "train"."model" object (written by train.c). */
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
    if (train_moe_args_from_json(j, a, where, err)) return -1;
    base_err why;
    if (model_args_validate(a, &why)) return base_fail(err, "%s: %s", where, why.msg);
    return 0;
}

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

static int load_step(model *m, const char *folder, int64_t step, base_err *err) {
    char *tj = NULL, where[4200];
    int world = 0;
    snprintf(where, sizeof where, "%s/step-%lld/metadata.json", folder, (long long)step);
    if (ckpt_step_read_meta(folder, step, &tj, &world, err)) return -1;
    json_error_t je;
    json_t *t = json_loads(tj, 0, &je);
    free(tj);
    model_args a;
    int rc = args_from_json(where, json_object_get(t, "model"), &a, err);
    /* an MoE trained with the expert bias routes with it */
    model_build_opts bo = {1,
                           1,
                           MODEL_AC_NONE,
                           0,
                           NULL,
                           0,
                           0,
                           json_object_get(t, "expert_bias") ? MODEL_BALANCE_BIAS
                                                             : MODEL_BALANCE_NONE,
                           0};
    if (!rc) rc = model_build(m, &a, &bo, err);
    if (!rc) {
        ckpt_step_buf b = {"model", NULL, m->w, 0, m->n_floats, m->n_floats};
        rc = ckpt_step_load(folder, step, &b, 1, err) || train_moe_bias_load(m, t, where, err);
    }
    json_decref(t);
    return rc;
}

int train_load_model(model *m, const char *path, const model_args *fallback, base_err *err) {
    memset(m, 0, sizeof *m);
    char p[4096], folder[4096];
    int64_t step;
    snprintf(p, sizeof p, "%s/metadata.json", path);
    if (is_file(p)) {
        if (split_step_dir(path, folder, sizeof folder, &step))
            return base_fail(err, "%s: a checkpoint step folder must be named step-N", path);
        return load_step(m, folder, step, err);
    }
    const char *weights = path;
    if (is_dir(path)) {
        snprintf(p, sizeof p, "%s/model.safetensors", path);
        if (!is_file(p)) {
            if (ckpt_step_latest(path, &step) == 0 && step >= 0)
                return load_step(m, path, step, err);
            return base_fail(err,
                             "%s: not a model folder (no model.safetensors, no metadata.json, no "
                             "complete step-N checkpoint)",
                             path);
        }
        weights = p;
    } else if (!is_file(path)) {
        return base_fail(err, "%s: no such model file or folder", path);
    }
    model_build_opts bo = {1, 1, MODEL_AC_NONE, 0, NULL, 0, 0, MODEL_BALANCE_NONE, 0};
    if (model_build(m, fallback, &bo, err)) return -1;
    base_err why;
    if (ckpt_load_model(m, m->w, weights, &why))
        return base_fail(err, "%s (model arguments from --flavor %s / --set)", why.msg,
                         fallback->flavor);
    return 0;
}

/* ---- streaming text ------------------------------------------------------------------ */

/* Length of the complete UTF-8 prefix of b[0..n): an unfinished character at the end (a lead
 * byte with fewer continuation bytes than it announces) is held back; anything invalid is
 * let through (it will never complete). */
static int utf8_complete(const unsigned char *b, int n) {
    for (int back = 1; back <= 3 && back <= n; back++) {
        const unsigned char c = b[n - back];
        if ((c & 0xC0) == 0x80) continue; /* continuation: look further back */
        const int need = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 1;
        return need > back ? n - back : n;
    }
    return n;
}

int train_stream_token(train_text_stream *ts, int32_t id, base_err *err) {
    if (!ts->tok) {
        if (ts->as_ids)
            fprintf(ts->out, "%d ", id);
        else
            fputc(id < 256 ? id : '?', ts->out);
        fflush(ts->out);
        return 0;
    }
    char *text = NULL;
    size_t len = 0;
    if (data_tok_decode(ts->tok, &id, 1, 0, &text, &len, err)) return -1;
    size_t i = 0;
    while (i < len) { /* move bytes through the pending buffer, writing complete characters */
        while (i < len && ts->n_pending < (int)sizeof ts->pending)
            ts->pending[ts->n_pending++] = (unsigned char)text[i++];
        const int k = utf8_complete(ts->pending, ts->n_pending);
        fwrite(ts->pending, 1, (size_t)k, ts->out);
        memmove(ts->pending, ts->pending + k, (size_t)(ts->n_pending - k));
        ts->n_pending -= k;
    }
    free(text);
    fflush(ts->out);
    return 0;
}

void train_stream_finish(train_text_stream *ts) {
    fwrite(ts->pending, 1, (size_t)ts->n_pending, ts->out);
    ts->n_pending = 0;
    fflush(ts->out);
}

/* ---- the generation loop ------------------------------------------------------------- */

int train_generate(model_infer *s, const int32_t *prompt, int n_prompt, const train_gen_opts *o,
                   train_gen_result *r, base_err *err) {
    memset(r, 0, sizeof *r);
    if (n_prompt < 1) return base_fail(err, "generate: the prompt is empty");
    if (o->max_new_tokens < 0) return base_fail(err, "generate: max_new_tokens < 0");
    const int max_len = model_infer_max_len(s), V = model_infer_vocab(s);
    int32_t *seq = malloc(sizeof(int32_t) * ((size_t)n_prompt + (size_t)o->max_new_tokens));
    float *logits = base_alloc(sizeof(float) * (size_t)V);
    if (!seq || !logits) {
        free(seq);
        base_free(logits);
        return base_fail(err, "out of memory");
    }
    memcpy(seq, prompt, sizeof(int32_t) * (size_t)n_prompt);
    int n = n_prompt;
    const int start = n > max_len ? n - max_len : 0;
    model_infer_reset(s);
    double t0 = base_now();
    int rc = model_infer_forward(s, seq + start, n - start, logits, 0, err);
    r->n_prompt = n - start;
    r->prefill_s = base_now() - t0;
    t0 = base_now();
    while (!rc && r->n_new < o->max_new_tokens) {
        const int32_t id = model_sample(logits, V, &o->sampler, (uint64_t)n);
        if (id < 0) {
            rc = base_fail(err, "out of memory");
            break;
        }
        seq[n++] = id;
        r->n_new++;
        int stop = 0;
        for (int i = 0; i < o->n_stop; i++) stop |= id == o->stop[i];
        if (stop) {
            r->stopped = 1;
            break;
        }
        if (o->stream && train_stream_token(o->stream, id, err)) {
            rc = -1;
            break;
        }
        if (r->n_new == o->max_new_tokens) break; /* its logits are not needed */
        if (model_infer_len(s) < max_len) {
            rc = model_infer_forward(s, &seq[n - 1], 1, logits, 0, err);
        } else { /* full: continue from the last half of the context */
            const int keep = max_len / 2 > 0 ? max_len / 2 : 1;
            model_infer_reset(s);
            rc = model_infer_forward(s, seq + n - keep, keep, logits, 0, err);
        }
    }
    r->decode_s = base_now() - t0;
    base_free(logits);
    if (rc) {
        free(seq);
        return -1;
    }
    r->tokens = seq;
    r->n_tokens = n;
    return 0;
}
