/* A model's parameters in safetensors files: checkpoint sets (one file, or an HF folder with
 * model.safetensors or index + shards), the name maps (HF / titan), the strict key check and
 * streaming loads. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint/internal.h"

#define HF_LM_HEAD "lm_head.weight"
#define HF_EMBED "model.embed_tokens.weight"

/* ---- checkpoint sets --------------------------------------------------------------- */

void ckpt_set_close(ckpt_set *s) {
    for (int i = 0; i < s->n_files; i++) ckpt_close(&s->files[i]);
    free(s->files);
    memset(s, 0, sizeof *s);
}

static int set_add(ckpt_set *s, const char *path, base_err *err) {
    ckpt_file *nf = realloc(s->files, sizeof *nf * (size_t)(s->n_files + 1));
    if (!nf) return base_fail(err, "%s: out of memory", path);
    s->files = nf;
    if (ckpt_open(&s->files[s->n_files], path, err) != 0) return -1;
    s->n_files++;
    return 0;
}

const ckpt_tensor *ckpt_set_find(const ckpt_set *s, const char *name, const ckpt_file **file) {
    for (int i = 0; i < s->n_files; i++) {
        const ckpt_tensor *t = ckpt_find(&s->files[i], name);
        if (t) {
            if (file) *file = &s->files[i];
            return t;
        }
    }
    return NULL;
}

int ckpt_set_open_file(ckpt_set *s, const char *path, base_err *err) {
    memset(s, 0, sizeof *s);
    if (set_add(s, path, err) != 0) {
        ckpt_set_close(s);
        return -1;
    }
    return 0;
}

/* Reads DIR/model.safetensors.index.json, opens each shard it names once, and checks that
 * the index and the shards agree: every indexed tensor is in its shard, every shard tensor is
 * indexed to that shard, no name twice. */
static int open_index(ckpt_set *s, const char *dir, const char *ipath, base_err *err) {
    json_error_t jerr;
    json_t *root = json_load_file(ipath, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return base_fail(err, "%s: invalid JSON: %s (line %d column %d)", ipath, jerr.text,
                         jerr.line, jerr.column);
    int rc = 0;
    json_t *wm = json_object_get(root, "weight_map");
    if (!json_is_object(root) || !json_is_object(wm)) {
        rc = base_fail(err, "%s: no 'weight_map' object", ipath);
        goto out;
    }
    const char *key;
    json_t *v;
    char path[4096];
    json_object_foreach(wm, key, v) {
        const char *fn = json_is_string(v) ? json_string_value(v) : NULL;
        if (!fn || !*fn || strchr(fn, '/') || !strcmp(fn, ".") || !strcmp(fn, "..")) {
            rc =
                base_fail(err, "%s: weight_map['%s'] is not a file name in the folder", ipath, key);
            goto out;
        }
        if (snprintf(path, sizeof path, "%s/%s", dir, fn) >= (int)sizeof path) {
            rc = base_fail(err, "%s: path too long", dir);
            goto out;
        }
        int seen = 0;
        for (int i = 0; i < s->n_files && !seen; i++) seen = !strcmp(s->files[i].path, path);
        if (seen) continue;
        if (!base_is_file(path)) {
            rc = base_fail(err, "%s: weight_map['%s'] names %s, which does not exist", ipath, key,
                           fn);
            goto out;
        }
        if ((rc = set_add(s, path, err)) != 0) goto out;
    }
    /* a tensor in two shards first: otherwise it would read as the index's mistake */
    for (int i = 0; i < s->n_files; i++) {
        const ckpt_file *f = &s->files[i];
        for (int t = 0; t < f->n_tensors; t++) {
            const ckpt_file *g = NULL;
            ckpt_set_find(s, f->tensors[t].name, &g);
            if (g != f) {
                rc = base_fail(err, "%s: tensor '%s' is in two shards: also in %s", f->path,
                               f->tensors[t].name, g->path);
                goto out;
            }
        }
    }
    /* index <-> shards agreement */
    json_object_foreach(wm, key, v) {
        const ckpt_file *f = NULL;
        const char *fn = json_string_value(v);
        if (!ckpt_set_find(s, key, &f)) {
            rc = base_fail(err, "%s: tensor '%s' is indexed to %s but no shard holds it", ipath,
                           key, fn);
            goto out;
        }
        snprintf(path, sizeof path, "%s/%s", dir, fn);
        if (strcmp(f->path, path) != 0) {
            rc = base_fail(err, "%s: tensor '%s' is indexed to %s but is in %s", ipath, key, fn,
                           f->path);
            goto out;
        }
    }
    for (int i = 0; i < s->n_files; i++) {
        const ckpt_file *f = &s->files[i];
        for (int t = 0; t < f->n_tensors; t++) {
            const char *name = f->tensors[t].name;
            if (!json_object_get(wm, name)) {
                rc = base_fail(err, "%s: tensor '%s' is not in the index %s", f->path, name, ipath);
                goto out;
            }
        }
    }
out:
    json_decref(root);
    return rc;
}

/* Whether path is still the file (dev, ino) that was read: 0, else -1 with err naming it. */
static int same_file(const char *path, uint64_t dev, uint64_t ino, const char *dir, base_err *err) {
    struct stat st;
    if (stat(path, &st) == 0 && (uint64_t)st.st_dev == dev && (uint64_t)st.st_ino == ino) return 0;
    return base_fail(err,
                     "%s: replaced while titan read %s (a titan convert or an export writing "
                     "that folder?): its files may be of two models; read it again when the "
                     "writer has finished",
                     path, dir);
}

int ckpt_set_open_dir(ckpt_set *s, const char *dir, base_err *err) {
    memset(s, 0, sizeof *s);
    char single[4096], index[4096];
    if (snprintf(single, sizeof single, "%s/model.safetensors", dir) >= (int)sizeof single ||
        snprintf(index, sizeof index, "%s/model.safetensors.index.json", dir) >= (int)sizeof index)
        return base_fail(err, "%s: path too long", dir);
    snprintf(s->dir, sizeof s->dir, "%s", dir);
    int rc;
    if (base_is_file(single)) {
        /* as transformers: the single file wins; both is an export mixed with another (an
         * older titan's re-export cut short, a copy over a folder): said (once: a command may
         * open the folder twice), as it may be stale */
        if (base_is_file(index))
            base_log_once(
                BASE_LOG_WARN,
                "%s holds both model.safetensors and model.safetensors.index.json: reading "
                "model.safetensors, as transformers does (the shards the index names are "
                "ignored; remove the stale one)",
                dir);
        rc = set_add(s, single, err);
    } else if (base_is_file(index)) {
        /* the index and then each shard are opened by name: a writer replacing the folder's
         * files meanwhile (a re-export into it) had the index of one model and shards of
         * another pass unsaid (their tensor names agree); every file is checked to be still
         * the one read once all are open */
        struct stat ist;
        const int known = stat(index, &ist) == 0;
        rc = open_index(s, dir, index, err);
        if (!rc && known)
            rc = same_file(index, (uint64_t)ist.st_dev, (uint64_t)ist.st_ino, dir, err);
        for (int i = 0; !rc && i < s->n_files; i++)
            rc = same_file(s->files[i].path, s->files[i].dev, s->files[i].ino, dir, err);
    } else
        rc = base_fail(err,
                       "%s: no model.safetensors or model.safetensors.index.json (not a Hugging "
                       "Face model folder)",
                       dir);
    if (rc != 0) ckpt_set_close(s);
    return rc;
}

/* ---- the expected tensors of a model ---------------------------------------------------- */

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

void ckpt_shape_str(char *out, size_t cap, int ndim, const int64_t *shape) {
    size_t len = (size_t)snprintf(out, cap, "[");
    for (int i = 0; i < ndim && len < cap; i++)
        len += (size_t)snprintf(out + len, cap - len, i ? ",%lld" : "%lld", (long long)shape[i]);
    if (len < cap) snprintf(out + len, cap - len, "]");
}

int ckpt_expected(const model *m, ckpt_names names, ckpt_entry **out, int *n_out, base_err *err) {
    int n = 0;
    for (int i = 0; i < m->n_params; i++)
        n += names == CKPT_NAMES_HF && strchr(m->params[i].hf_name, '*')
                 ? (int)m->params[i].shape[0]
                 : 1;
    ckpt_entry *es = calloc((size_t)(n ? n : 1), sizeof *es);
    if (!es) return base_fail(err, "out of memory for %d tensor names", n);
    int k = 0;
    for (int i = 0; i < m->n_params; i++) {
        const model_param *p = &m->params[i];
        const char *star = names == CKPT_NAMES_HF ? strchr(p->hf_name, '*') : NULL;
        if (!star) {
            ckpt_entry *e = &es[k++];
            snprintf(e->name, sizeof e->name, "%s", names == CKPT_NAMES_HF ? p->hf_name : p->name);
            e->ndim = p->ndim;
            memcpy(e->shape, p->shape, sizeof e->shape);
            e->offset = p->offset;
            e->numel = p->numel;
            continue;
        }
        /* an expert stack [E, a, b]: HF has E tensors [a, b], "*" = the expert index */
        const size_t per = p->numel / (size_t)p->shape[0];
        for (int64_t x = 0; x < p->shape[0]; x++) {
            ckpt_entry *e = &es[k++];
            snprintf(e->name, sizeof e->name, "%.*s%lld%s", (int)(star - p->hf_name), p->hf_name,
                     (long long)x, star + 1);
            e->ndim = p->ndim - 1;
            e->shape[0] = p->shape[1];
            e->shape[1] = p->shape[2];
            e->offset = p->offset + (size_t)x * per;
            e->numel = per;
        }
    }
    *out = es;
    *n_out = n;
    return 0;
}

static int entry_cmp(const void *a, const void *b) {
    return strcmp(((const ckpt_entry *)a)->name, ((const ckpt_entry *)b)->name);
}
static int entry_key_cmp(const void *key, const void *b) {
    return strcmp(key, ((const ckpt_entry *)b)->name);
}

static const char *set_name(const ckpt_set *s) {
    return s->n_files == 1 ? s->files[0].path : s->dir[0] ? s->dir : "checkpoint";
}

/* The name a tied model's lm_head may appear under (accepted if equal to the embedding). */
static const char *tied_alias(ckpt_names names) {
    return names == CKPT_NAMES_HF ? HF_LM_HEAD : "output.weight";
}
static const char *embed_name(ckpt_names names) {
    return names == CKPT_NAMES_HF ? HF_EMBED : "tok_embeddings.weight";
}

int ckpt_check_model(const model *m, const ckpt_set *s, ckpt_names names, base_err *err) {
    ckpt_entry *es;
    int n;
    if (ckpt_expected(m, names, &es, &n, err)) return -1;
    problems p;
    memset(&p, 0, sizeof p);
    for (int i = 0; i < n; i++) {
        const ckpt_file *tf = NULL;
        const ckpt_tensor *t = ckpt_set_find(s, es[i].name, &tf);
        if (!t) {
            add_problem(&p, "missing '%s'", es[i].name);
            continue;
        }
        int same = t->ndim == es[i].ndim;
        for (int d = 0; same && d < t->ndim; d++) same = t->shape[d] == es[i].shape[d];
        if (!same) {
            char a[96], b[96];
            ckpt_shape_str(a, sizeof a, t->ndim, t->shape);
            ckpt_shape_str(b, sizeof b, es[i].ndim, es[i].shape);
            add_problem(&p, "'%s' has shape %s, model expects %s", es[i].name, a, b);
        } else if (!ckpt_dtype_is_float(t->dtype)) {
            add_problem(&p, "'%s' in %s has non-floating dtype %s", es[i].name, tf->path,
                        ckpt_dtype_name(t->dtype));
        } else if (ckpt_dtype_size(t->dtype) == 1) {
            /* an 8-bit float weight is a quantized checkpoint's (Qwen3-*-FP8: F8_E4M3 blocks
             * whose scales sit in '<name>_scale_inv'): its values alone are not the weights */
            add_problem(&p,
                        "'%s' in %s has dtype %s (a quantized checkpoint: titan loads "
                        "BF16/F16/F32/F64 weights and applies no quantization scales)",
                        es[i].name, tf->path, ckpt_dtype_name(t->dtype));
        }
    }
    qsort(es, (size_t)n, sizeof *es, entry_cmp);
    for (int f = 0; f < s->n_files; f++) {
        for (int t = 0; t < s->files[f].n_tensors; t++) {
            const char *name = s->files[f].tensors[t].name;
            if (bsearch(name, es, (size_t)n, sizeof *es, entry_key_cmp)) continue;
            if (m->args.tie_embeddings && !strcmp(name, tied_alias(names))) continue;
            add_problem(&p, "unexpected '%s'", name);
        }
    }
    free(es);
    if (p.n > 0) {
        if (p.n_dropped)
            return base_fail(err, "%s: %d problem(s) loading the model: %s; ... and %d more",
                             set_name(s), p.n, p.buf, p.n_dropped);
        return base_fail(err, "%s: %d problem(s) loading the model: %s", set_name(s), p.n, p.buf);
    }
    return 0;
}

/* Checks out[0, part->numel), part (elements [first, ...) of tensor t of file f) converted to
 * fp32: a NaN or an infinity is refused, naming the file, the tensor and the element (it would
 * only surface later, as NaN logits or a non-finite gradient), and an F64 value that is finite
 * in the file but overflows float32 is said as such. *rounded counts the F64 values float32
 * rounds (said once per load). */
static int check_converted(const ckpt_file *f, const ckpt_tensor *t, const ckpt_tensor *part,
                           size_t first, const float *out, size_t *rounded, base_err *err) {
    const int f64 = part->dtype == CKPT_F64;
    const size_t n = (size_t)part->numel;
    if (!f64) { /* the common case, in one vectorised pass: an all-ones exponent anywhere? */
        const uint32_t *u = (const uint32_t *)(const void *)out;
        uint32_t bad = 0;
#pragma omp parallel for reduction(| : bad) schedule(static) if (n > (1 << 20))
        for (size_t k = 0; k < n; k++) bad |= (u[k] & 0x7f800000u) == 0x7f800000u;
        if (!bad) return 0;
    }
    for (size_t k = 0; k < n; k++) {
        double src = 0;
        if (f64) {
            memcpy(&src, (const unsigned char *)part->data + 8 * k, 8);
            *rounded += (double)out[k] != src && isfinite(src);
        }
        if (isfinite(out[k])) continue;
        if (f64 && isfinite(src))
            return base_fail(err,
                             "%s: tensor '%s': element %zu = %.17g (F64) overflows float32, "
                             "titan's weight type",
                             f->path, t->name, first + k, src);
        return base_fail(err,
                         "%s: tensor '%s': element %zu is %s in the file (a weight must be "
                         "finite)",
                         f->path, t->name, first + k, isnan(out[k]) ? "NaN" : "infinite");
    }
    return 0;
}

int ckpt_load_model_set(const model *m, float *base, const ckpt_set *s, ckpt_names names,
                        base_err *err) {
    if (ckpt_check_model(m, s, names, err)) return -1;
    ckpt_entry *es;
    int n;
    if (ckpt_expected(m, names, &es, &n, err)) return -1;
    /* the parameters tile [0, n_floats) (model_layout lays them end to end): checked, as the
     * caller may pass an unzeroed buffer and rely on every element being written */
    size_t end = 0;
    for (int i = 0; i < n && end != SIZE_MAX; i++)
        end = es[i].offset == end ? end + es[i].numel : SIZE_MAX;
    if (end != m->n_floats) {
        free(es);
        return base_fail(err, "%s: the model's parameters do not tile its %zu weights", set_name(s),
                         m->n_floats);
    }
    int rc = 0;
    size_t rounded = 0; /* F64 values float32 rounds */
    const char *rounded_in = NULL;
    /* file by file, in file order: each shard is read once, front to back, and its pages are
     * dropped as soon as a tensor is copied, so resident memory stays near the model's size */
    for (int f = 0; f < s->n_files && rc == 0; f++) {
        const ckpt_file *file = &s->files[f];
        for (int i = 0; i < n && rc == 0; i++) {
            const ckpt_tensor *t = ckpt_find(file, es[i].name);
            if (!t) continue;
            /* in chunks of 16M elements, each released once converted: a 1.2 GB embedding
             * never sits in memory twice */
            const size_t chunk = (size_t)1 << 24, esz = ckpt_dtype_size(t->dtype);
            for (size_t c = 0; c < (size_t)t->numel && rc == 0; c += chunk) {
                ckpt_tensor part = *t;
                part.numel = (int64_t)((size_t)t->numel - c < chunk ? (size_t)t->numel - c : chunk);
                part.nbytes = (size_t)part.numel * esz;
                part.data = (const unsigned char *)t->data + c * esz;
                const size_t before = rounded;
                rc = ckpt_tensor_to_f32(file, &part, base + es[i].offset + c, err);
                if (rc == 0)
                    rc = check_converted(file, t, &part, c, base + es[i].offset + c, &rounded, err);
                if (rounded > before && !rounded_in) rounded_in = t->name;
                ckpt_tensor_release(file, &part);
            }
        }
    }
    free(es);
    if (rc) return rc;
    if (rounded)
        base_log(BASE_LOG_WARN,
                 "%s: %zu weight value(s) stored as F64 (first in '%s') rounded to float32, "
                 "titan's weight type",
                 set_name(s), rounded, rounded_in);

    /* A tied model has no lm_head: a file copy is fine only if it equals the embedding. */
    const model_param *emb = m->args.tie_embeddings ? model_find_hf_param(m, HF_EMBED) : NULL;
    return emb ? ckpt_check_tied_head(s, names, base + emb->offset, emb->ndim, emb->shape, err) : 0;
}

int ckpt_check_tied_head(const ckpt_set *s, ckpt_names names, const float *emb, int ndim,
                         const int64_t *shape, base_err *err) {
    const ckpt_file *hf = NULL, *ef = NULL;
    const ckpt_tensor *head = ckpt_set_find(s, tied_alias(names), &hf);
    if (!head) return 0;
    const char *en = embed_name(names), *hn = tied_alias(names);
    float *own = NULL; /* emb NULL: the set's own embedding, converted */
    if (!emb) {
        const ckpt_tensor *e = ckpt_set_find(s, en, &ef);
        if (!e || !ckpt_dtype_is_float(e->dtype))
            return base_fail(err, "%s: '%s' without a floating '%s' in a tied model", hf->path, hn,
                             en);
        own = base_alloc_uninit((size_t)e->numel * sizeof(float));
        if (!own) return base_fail(err, "%s: out of memory", ef->path);
        if (ckpt_tensor_to_f32(ef, e, own, err)) {
            base_free(own);
            return -1;
        }
        emb = own, ndim = e->ndim, shape = e->shape;
    }
    int same = head->ndim == ndim && ckpt_dtype_is_float(head->dtype);
    size_t numel = 1;
    for (int d = 0; same && d < ndim; d++) same = head->shape[d] == shape[d];
    for (int d = 0; same && d < ndim; d++) numel *= (size_t)shape[d];
    float *tmp = same ? base_alloc_uninit(numel * sizeof(float)) : NULL; /* written whole */
    int rc = !same  ? base_fail(err,
                                "%s: '%s' does not match '%s' (shape or dtype) but the model "
                                 "ties its embeddings",
                                hf->path, hn, en)
             : !tmp ? base_fail(err, "%s: out of memory", hf->path)
                    : ckpt_tensor_to_f32(hf, head, tmp, err);
    ckpt_tensor_release(hf, head);
    if (rc == 0 && memcmp(tmp, emb, numel * sizeof(float)) != 0)
        rc = base_fail(err, "%s: '%s' differs from '%s' but the model ties its embeddings",
                       hf->path, hn, en);
    base_free(tmp);
    base_free(own);
    return rc;
}

int ckpt_build_from_set(model *m, const model_args *a, ckpt_set *s, ckpt_names names,
                        const model_build_opts *opts, base_err *err) {
    /* check names and shapes before allocating the model */
    model desc;
    int rc = model_describe(&desc, a, err);
    if (rc == 0) rc = ckpt_check_model(&desc, s, names, err);
    model_free(&desc);
    if (rc == 0) rc = model_build_unset(m, a, opts, err); /* loaded whole next */
    if (rc == 0) rc = ckpt_load_model_set(m, m->w, s, names, err);
    ckpt_set_close(s);
    return rc;
}

int ckpt_load_model_file(const model *m, float *base, const ckpt_file *f, base_err *err) {
    /* a one-file set that borrows f (not closed here) */
    ckpt_set s;
    memset(&s, 0, sizeof s);
    s.files = (ckpt_file *)f;
    s.n_files = 1;
    return ckpt_load_model_set(m, base, &s, CKPT_NAMES_HF, err);
}

int ckpt_load_model(const model *m, float *base, const char *path, base_err *err) {
    ckpt_set s;
    if (ckpt_set_open_file(&s, path, err) != 0) return -1;
    int rc = ckpt_load_model_set(m, base, &s, CKPT_NAMES_HF, err);
    ckpt_set_close(&s);
    return rc;
}

int ckpt_save_model_names(const model *m, const float *base, const char *path, ckpt_names names,
                          const ckpt_kv *meta, int n_meta, base_err *err) {
    ckpt_entry *es;
    int n;
    if (ckpt_expected(m, names, &es, &n, err)) return -1;
    ckpt_wtensor *ts = calloc((size_t)(n > 0 ? n : 1), sizeof *ts);
    if (!ts) {
        free(es);
        return base_fail(err, "%s: out of memory", path);
    }
    for (int i = 0; i < n; i++) {
        ts[i].name = es[i].name;
        ts[i].dtype = CKPT_F32;
        ts[i].ndim = es[i].ndim;
        for (int d = 0; d < es[i].ndim; d++) ts[i].shape[d] = es[i].shape[d];
        ts[i].data = base + es[i].offset;
    }
    int rc = ckpt_write(path, ts, n, meta, n_meta, err);
    free(ts);
    free(es);
    return rc;
}

int ckpt_save_model(const model *m, const float *base, const char *path, const ckpt_kv *meta,
                    int n_meta, base_err *err) {
    return ckpt_save_model_names(m, base, path, CKPT_NAMES_HF, meta, n_meta, err);
}
