/* model_args <-> JSON: the one encoder, decoder and comparison of model arguments (training
 * checkpoint metadata "train.model", titan model folders' model_args.json). */
#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

typedef struct {
    const char *key; /* JSON key = the field's name */
    size_t off;      /* offsetof(model_args, field) */
    int real;        /* double field (else int) */
    int group;       /* model_arg_group: SHAPE identifies a model, MOE an MoE, INFO only saved */
} arg_field;

static const arg_field g_fields[] = {
#define ARG_F(f, type, kind, group, ...)                                                           \
    {#f, offsetof(model_args, f), _Generic(((model_args *)0)->f, double : 1, int : 0),             \
     MODEL_ARG_##group},
    MODEL_ARGS_TABLE(ARG_F)
#undef ARG_F
};
#define N_FIELDS (sizeof g_fields / sizeof g_fields[0])

static int get_int(const model_args *a, const arg_field *f) {
    return *(const int *)((const char *)a + f->off);
}
static double get_real(const model_args *a, const arg_field *f) {
    return *(const double *)((const char *)a + f->off);
}

/* Whether field f is in the identity of arguments a. */
static int in_identity(const arg_field *f, const model_args *a) {
    return f->group == MODEL_ARG_SHAPE || (f->group == MODEL_ARG_MOE && a->n_experts > 0);
}

struct json_t *model_args_json(const model_args *a, model_args_json_form form) {
    const int full = form == MODEL_ARGS_JSON_FULL;
    json_t *j = json_object();
    if (!j) return NULL;
    if (full) json_object_set_new(j, "flavor", json_string(a->flavor));
    /* the identity's rows (every row in the full form), then a checkpoint's INFO rows */
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < N_FIELDS; i++) {
            const arg_field *f = &g_fields[i];
            const int set = f->real ? get_real(a, f) != 0 : get_int(a, f) != 0;
            if (pass == 0
                    ? !(full || in_identity(f, a))
                    : !(form == MODEL_ARGS_JSON_CHECKPOINT && f->group == MODEL_ARG_INFO && set))
                continue;
            json_object_set_new(j, f->key,
                                f->real ? json_real(get_real(a, f)) : json_integer(get_int(a, f)));
        }
    return j;
}

int model_args_format(const model_args *a, model_arg_group group, char *buf, size_t n) {
    size_t at = 0;
    if (n) buf[0] = 0;
    for (size_t i = 0; i < N_FIELDS; i++) {
        const arg_field *f = &g_fields[i];
        if (f->group != (int)group) continue;
        char *p = at < n ? buf + at : NULL;
        const size_t left = at < n ? n - at : 0;
        const char *sep = at ? ", " : "";
        at += (size_t)(f->real ? snprintf(p, left, "%s%s %g", sep, f->key, get_real(a, f))
                               : snprintf(p, left, "%s%s %d", sep, f->key, get_int(a, f)));
    }
    return (int)at;
}

int model_args_describe(const model_args *a, char *buf, size_t n) {
    json_t *j = model_args_json(a, MODEL_ARGS_JSON_IDENTITY);
    char *text = j ? json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(j);
    snprintf(buf, n, "%s", text ? text : "?");
    free(text);
    return text ? 0 : -1;
}

int model_args_diff(const model_args *have, const model_args *want, char *buf, size_t n) {
    json_t *h = model_args_json(have, MODEL_ARGS_JSON_IDENTITY);
    json_t *w = model_args_json(want, MODEL_ARGS_JSON_IDENTITY);
    size_t at = 0;
    if (n) buf[0] = 0;
    const char *key;
    json_t *hv;
    json_object_foreach(h, key, hv) {
        json_t *wv = json_object_get(w, key);
        if (wv && json_equal(hv, wv)) continue;
        char *a = json_dumps(hv, JSON_ENCODE_ANY | JSON_COMPACT);
        char *b = wv ? json_dumps(wv, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
        if (at < n)
            at += (size_t)snprintf(buf + at, n - at, "%s%s %s (this run %s)", at ? ", " : "", key,
                                   a ? a : "?", b ? b : "none");
        free(a);
        free(b);
    }
    json_t *wv;
    json_object_foreach(w, key, wv) { /* the run's fields the other has not (MoE onto dense) */
        if (json_object_get(h, key)) continue;
        char *b = json_dumps(wv, JSON_ENCODE_ANY | JSON_COMPACT);
        if (at < n)
            at += (size_t)snprintf(buf + at, n - at, "%s%s none (this run %s)", at ? ", " : "", key,
                                   b ? b : "?");
        free(b);
    }
    json_decref(h);
    json_decref(w);
    return h && w ? 0 : -1;
}

int model_args_from_json(const struct json_t *j, const char *where, model_args *a, base_err *err) {
    if (!json_is_object(j)) return base_fail(err, "%s: not a JSON object", where);
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)j, key, v) {
        if (!strcmp(key, "flavor") && json_is_string(v)) {
            snprintf(a->flavor, sizeof a->flavor, "%s", json_string_value(v));
            continue;
        }
        /* numbers go through model_args_set: one place checks names and ranges */
        char val[64];
        if (json_is_integer(v))
            snprintf(val, sizeof val, "%lld", (long long)json_integer_value(v));
        else if (json_is_real(v))
            snprintf(val, sizeof val, "%.17g", json_real_value(v));
        else
            return base_fail(err, "%s: field '%s' is not a number", where, key);
        base_err why;
        if (model_args_set(a, key, val, 0, &why)) return base_fail(err, "%s: %s", where, why.msg);
    }
    /* the identity must be complete: the shape always, the MoE fields with n_experts; no
     * n_experts is a dense model (the MoE fields as a dense flavor's) */
    const int moe = json_object_get(j, "n_experts") != NULL;
    for (size_t i = 0; i < N_FIELDS && !moe; i++)
        if (g_fields[i].group == MODEL_ARG_MOE)
            memset((char *)a + g_fields[i].off, 0, g_fields[i].real ? sizeof(double) : sizeof(int));
    for (size_t i = 0; i < N_FIELDS; i++) {
        const arg_field *f = &g_fields[i];
        if ((f->group == MODEL_ARG_SHAPE || (f->group == MODEL_ARG_MOE && moe)) &&
            !json_object_get(j, f->key))
            return base_fail(err, "%s: model argument %s is missing", where, f->key);
    }
    base_err why;
    if (model_args_validate(a, &why)) return base_fail(err, "%s: %s", where, why.msg);
    return 0;
}

int model_args_equal(const model_args *a, const model_args *b) {
    if (a->n_experts != b->n_experts) return 0;
    for (size_t i = 0; i < N_FIELDS; i++) {
        const arg_field *f = &g_fields[i];
        if (!in_identity(f, a)) continue;
        if (f->real ? get_real(a, f) != get_real(b, f) : get_int(a, f) != get_int(b, f)) return 0;
    }
    return 1;
}
