/* Loading and saving a titan model's parameters under Hugging Face names. */
#include "checkpoint.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HF_LM_HEAD "lm_head.weight"
#define HF_EMBED "model.embed_tokens.weight"

/* Collects problems into one message; entries past the buffer are counted, not lost. */
typedef struct {
    char buf[900];
    size_t len;
    int n, n_dropped;
} problems;

static void add_problem(problems *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add_problem(problems *p, const char *fmt, ...) {
    char one[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(one, sizeof one, fmt, ap);
    va_end(ap);
    size_t n = strlen(one);
    if (p->len + n + 2 >= sizeof p->buf) {
        p->n_dropped++;
    } else {
        if (p->len) {
            memcpy(p->buf + p->len, "; ", 2);
            p->len += 2;
        }
        memcpy(p->buf + p->len, one, n + 1);
        p->len += n;
    }
    p->n++;
}

static void shape_str(char *out, size_t cap, int ndim, const int64_t *shape) {
    size_t len = 0;
    len += (size_t)snprintf(out + len, cap - len, "[");
    for (int i = 0; i < ndim && len < cap; i++)
        len += (size_t)snprintf(out + len, cap - len, i ? ",%lld" : "%lld", (long long)shape[i]);
    if (len < cap) snprintf(out + len, cap - len, "]");
}

int ckpt_load_model_file(const model *m, float *base, const ckpt_file *f, base_err *err) {
    problems p;
    memset(&p, 0, sizeof p);
    const int tied = m->args.tie_embeddings;

    /* missing keys and shape / dtype mismatches */
    for (int i = 0; i < m->n_params; i++) {
        const model_param *mp = &m->params[i];
        const ckpt_tensor *t = ckpt_find(f, mp->hf_name);
        if (!t) {
            add_problem(&p, "missing '%s'", mp->hf_name);
            continue;
        }
        int same = t->ndim == mp->ndim;
        for (int d = 0; same && d < t->ndim; d++) same = t->shape[d] == mp->shape[d];
        if (!same) {
            char a[96], b[96];
            shape_str(a, sizeof a, t->ndim, t->shape);
            shape_str(b, sizeof b, mp->ndim, mp->shape);
            add_problem(&p, "'%s' has shape %s, model expects %s", mp->hf_name, a, b);
        } else if (!ckpt_dtype_is_float(t->dtype)) {
            add_problem(&p, "'%s' has non-floating dtype %s", mp->hf_name,
                        ckpt_dtype_name(t->dtype));
        }
    }
    /* unexpected keys */
    for (int i = 0; i < f->n_tensors; i++) {
        const char *name = f->tensors[i].name;
        if (model_find_hf_param(m, name)) continue;
        if (tied && strcmp(name, HF_LM_HEAD) == 0) continue; /* checked below */
        add_problem(&p, "unexpected '%s'", name);
    }
    if (p.n > 0) {
        if (p.n_dropped)
            return base_fail(err, "%s: %d problem(s) loading the model: %s; ... and %d more",
                             f->path, p.n, p.buf, p.n_dropped);
        return base_fail(err, "%s: %d problem(s) loading the model: %s", f->path, p.n, p.buf);
    }

    for (int i = 0; i < m->n_params; i++) {
        const model_param *mp = &m->params[i];
        if (ckpt_tensor_to_f32(f, ckpt_find(f, mp->hf_name), base + mp->offset, err) != 0)
            return -1;
    }

    /* A tied model has no lm_head: a file copy is fine only if it equals the embedding. */
    const ckpt_tensor *head = tied ? ckpt_find(f, HF_LM_HEAD) : NULL;
    if (head) {
        const model_param *emb = model_find_hf_param(m, HF_EMBED);
        if (!emb) return base_fail(err, "%s: tied model has no parameter '%s'", f->path, HF_EMBED);
        int same = head->ndim == emb->ndim && ckpt_dtype_is_float(head->dtype);
        for (int d = 0; same && d < head->ndim; d++) same = head->shape[d] == emb->shape[d];
        if (!same)
            return base_fail(err,
                             "%s: '%s' does not match '%s' (shape or dtype) but the model ties "
                             "its embeddings",
                             f->path, HF_LM_HEAD, HF_EMBED);
        float *tmp = base_alloc(emb->numel * sizeof(float));
        if (!tmp) return base_fail(err, "%s: out of memory", f->path);
        int rc = ckpt_tensor_to_f32(f, head, tmp, err);
        if (rc == 0 && memcmp(tmp, base + emb->offset, emb->numel * sizeof(float)) != 0)
            rc = base_fail(err, "%s: '%s' differs from '%s' but the model ties its embeddings",
                           f->path, HF_LM_HEAD, HF_EMBED);
        base_free(tmp);
        if (rc != 0) return rc;
    }
    return 0;
}

int ckpt_load_model(const model *m, float *base, const char *path, base_err *err) {
    ckpt_file f;
    if (ckpt_open(&f, path, err) != 0) return -1;
    int rc = ckpt_load_model_file(m, base, &f, err);
    ckpt_close(&f);
    return rc;
}

int ckpt_save_model(const model *m, const float *base, const char *path, const ckpt_kv *meta,
                    int n_meta, base_err *err) {
    ckpt_wtensor *ts = calloc((size_t)(m->n_params > 0 ? m->n_params : 1), sizeof *ts);
    if (!ts) return base_fail(err, "%s: out of memory", path);
    for (int i = 0; i < m->n_params; i++) {
        const model_param *mp = &m->params[i];
        ts[i].name = mp->hf_name;
        ts[i].dtype = CKPT_F32;
        ts[i].ndim = mp->ndim;
        for (int d = 0; d < mp->ndim; d++) ts[i].shape[d] = mp->shape[d];
        ts[i].data = base + mp->offset;
    }
    int rc = ckpt_write(path, ts, m->n_params, meta, n_meta, err);
    free(ts);
    return rc;
}
