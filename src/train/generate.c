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
