/* train: loading a model for inference, the generation loop and the streaming text output. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/checkpoint.h"
#include "train/internal.h"

/* Any model source (checkpoint.h): arguments from it, or from fallback for a bare file. A
 * training checkpoint of an MoE trained with the expert bias also restores the bias (the
 * model routes with it). */
int train_load_model(model *m, const char *path, const model_args *fallback, base_err *err) {
    memset(m, 0, sizeof *m);
    ckpt_source src;
    model_args a = *fallback;
    json_t *t = NULL; /* a training checkpoint's "train" state */
    if (ckpt_source_open(&src, path, err)) return -1;
    if (src.kind != CKPT_SRC_FILE && ckpt_source_args(&src, &a, err)) return -1;
    if (src.kind == CKPT_SRC_STEP) {
        char *tj = NULL;
        int world = 0;
        if (ckpt_step_read_meta(src.folder, src.step, &tj, &world, err)) return -1;
        t = json_loads(tj, 0, NULL);
        free(tj);
    }
    model_build_opts bo = {.batch = 1,
                           .seq_len = 1,
                           .balance = json_object_get(t, "expert_bias") ? MODEL_BALANCE_BIAS
                                                                        : MODEL_BALANCE_NONE};
    int rc = model_build_unset(m, &a, &bo, err); /* ckpt_source_load writes every weight */
    if (!rc && t) rc = train_moe_bias_load(m, t, path, err);
    json_decref(t);
    if (rc) return -1;
    base_err why;
    if (ckpt_source_load(&src, m, m->w, &why))
        return src.kind == CKPT_SRC_FILE
                   ? base_fail(err, "%s (model arguments from --flavor %s / --set)", why.msg,
                               fallback->flavor)
                   : base_fail(err, "%s", why.msg);
    return 0;
}

/* FNV-1a 64 of DIR/tokenizer.json's bytes (data_tok_fingerprint's value); -1 when unreadable. */
static int tokenizer_hash(const char *dir, uint64_t *h) {
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

int train_generate_tokenizer(const char *path, const char **tok_dir, char *buf, size_t n,
                             base_err *err) {
    if (!*tok_dir && base_has_file(path, "tokenizer.json")) *tok_dir = path;
    ckpt_source src;
    base_err ignore; /* not a model: train_load_model says why */
    if (ckpt_source_open(&src, path, &ignore) || src.kind != CKPT_SRC_STEP) return 0;
    char *tj = NULL, where[4200];
    int world = 0;
    if (ckpt_step_read_meta(src.folder, src.step, &tj, &world, err)) return -1;
    snprintf(where, sizeof where, "%s/step-%lld", src.folder, (long long)src.step);
    json_t *t = json_loads(tj, 0, NULL), *rec = json_object_get(t, "tokenizer");
    free(tj);
    const json_t *vocab = json_object_get(json_object_get(t, "model"), "vocab_size");
    const char *rpath = json_string_value(json_object_get(rec, "path"));
    const char *rhash = json_string_value(json_object_get(rec, "tokenizer_json_fnv1a64"));
    char have[17] = "";
    uint64_t h;
    if (*tok_dir && tokenizer_hash(*tok_dir, &h) == 0)
        snprintf(have, sizeof have, "%016llx", (unsigned long long)h);
    int rc = 0;
    if (json_is_string(rec) && !strcmp(json_string_value(rec), "bytes")) {
        if (*tok_dir)
            rc = base_fail(err,
                           "%s was trained on bytes (one token per byte), not with a tokenizer: "
                           "drop --tokenizer %s",
                           where, *tok_dir);
    } else if (rpath && rhash) {
        if (*tok_dir && strcmp(have, rhash))
            rc = base_fail(err,
                           "%s was trained with the tokenizer %s (tokenizer.json FNV-1a 64 %s); "
                           "%s/tokenizer.json is another (%s)",
                           where, rpath, rhash, *tok_dir, have[0] ? have : "unreadable");
        if (!*tok_dir) {
            const int gone = tokenizer_hash(rpath, &h) != 0;
            if (!gone) snprintf(have, sizeof have, "%016llx", (unsigned long long)h);
            if (gone)
                rc = base_fail(err,
                               "%s was trained with the tokenizer %s, which is gone: pass "
                               "--tokenizer DIR with that tokenizer (tokenizer.json FNV-1a 64 %s)",
                               where, rpath, rhash);
            else if (strcmp(have, rhash))
                rc = base_fail(err,
                               "%s was trained with the tokenizer %s, whose tokenizer.json has "
                               "changed since (FNV-1a 64 %s, recorded %s): pass --tokenizer DIR "
                               "with the tokenizer it was trained with",
                               where, rpath, have, rhash);
            else {
                snprintf(buf, n, "%s", rpath);
                *tok_dir = buf;
            }
        }
    } else if (!rec && !*tok_dir && json_integer_value(vocab) != 256) {
        rc = base_fail(err,
                       "%s does not record the tokenizer it was trained with and its vocabulary "
                       "is %lld, not 256 (bytes): pass --tokenizer DIR",
                       where, (long long)json_integer_value(vocab));
    }
    json_decref(t);
    return rc;
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
