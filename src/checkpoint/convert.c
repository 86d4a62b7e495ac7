/* The training checkpoint's model part (titan names + model_args.json), and the command
 * line's checkpoint commands: titan inspect PATH and titan convert SRC DST. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint/internal.h"

#define MODEL_FILE "model.safetensors"

/* ---- training checkpoint: the model part -------------------------------------------- */

int ckpt_train_save_model(const model *m, const char *dir, base_err *err) {
    if (base_mkdir_p(dir, err)) return -1;
    char path[4096];
    const ckpt_kv meta[] = {{"format", "titan"}};
    if (base_path_join(path, sizeof path, dir, MODEL_FILE, err) ||
        ckpt_save_model_names(m, m->w, path, CKPT_NAMES_TITAN, meta, 1, err))
        return -1;
    json_t *j = model_args_json(&m->args, MODEL_ARGS_JSON_FULL);
    if (!j) return base_fail(err, "%s: cannot build %s", dir, CKPT_ARGS_FILE);
    int rc = base_path_join(path, sizeof path, dir, CKPT_ARGS_FILE, err);
    if (rc == 0) rc = ckpt_write_json(path, j, err);
    json_decref(j);
    return rc;
}

int ckpt_train_load_model(model *m, const char *dir, const model_build_opts *opts, base_err *err) {
    memset(m, 0, sizeof *m);
    model_args a;
    char path[4096];
    if (ckpt_train_read_args(dir, &a, err) ||
        base_path_join(path, sizeof path, dir, MODEL_FILE, err))
        return -1;
    ckpt_set s;
    if (ckpt_set_open_file(&s, path, err)) return -1;
    return ckpt_build_from_set(m, &a, &s, CKPT_NAMES_TITAN, opts, err);
}

/* ---- titan inspect ------------------------------------------------------------------ */

void ckpt_print_model(const model_args *a) {
    model_counts c;
    model_count_params(a, &c);
    char line[1024];
    model_args_format(a, MODEL_ARG_SHAPE, line, sizeof line);
    printf("model %s: %s\n", a->flavor, line);
    if (a->n_experts > 0) {
        model_moe_mem mm;
        model_moe_memory(a, 1, 4096, MODEL_AC_NONE, 1, &mm);
        const double gib = 1 << 30;
        model_args_format(a, MODEL_ARG_MOE, line, sizeof line);
        printf("MoE: %s\n", line);
        printf("MoE memory (fp32; 4096 tokens, ac none): experts %.2f GiB + router %.3f GiB of "
               "weights (x4 training), routed activations %.2f GiB per block, scratch %.2f GiB\n",
               mm.expert_params / gib, mm.router_params / gib, mm.per_block_saved / gib,
               mm.scratch / gib);
    }
    printf("%-22s %16s\n", "component", "parameters");
    printf("%-22s %16lld%s\n", "embedding", (long long)c.embedding,
           a->tie_embeddings ? "  (tied with lm_head, counted once)" : "");
    printf("%-22s %16lld\n", "attention (q,k,v,o)", (long long)c.attention);
    printf("%-22s %16lld\n", "q_norm/k_norm", (long long)c.qk_norm);
    if (a->n_experts > 0) {
        printf("%-22s %16lld\n", "moe router", (long long)c.router);
        printf("%-22s %16lld\n", "moe experts", (long long)c.experts);
    } else {
        printf("%-22s %16lld\n", "feed_forward", (long long)c.ffn);
    }
    printf("%-22s %16lld\n", "rmsnorm (block+final)", (long long)c.norms);
    printf("%-22s %16lld\n", "lm_head", (long long)c.lm_head);
    printf("%-22s %16lld  (%.3fB)\n", "total", (long long)c.total, c.total / 1e9);
    if (a->n_experts > 0)
        printf("%-22s %16lld  (%.3fB)\n", "active per token", (long long)c.active, c.active / 1e9);
}

static void print_tensors(const ckpt_set *s) {
    for (int i = 0; i < s->n_files; i++) {
        const ckpt_file *f = &s->files[i];
        uint64_t bytes = 0;
        for (int t = 0; t < f->n_tensors; t++) bytes += f->tensors[t].nbytes;
        printf("file %s: %d tensors, %llu bytes of data\n", f->path, f->n_tensors,
               (unsigned long long)bytes);
        for (int k = 0; k < f->n_meta; k++)
            printf("  __metadata__ %s = %s\n", f->meta[k].key, f->meta[k].value);
        for (int t = 0; t < f->n_tensors; t++) {
            const ckpt_tensor *x = &f->tensors[t];
            char sh[128];
            ckpt_shape_str(sh, sizeof sh, x->ndim, x->shape);
            printf("  %-64s %-8s %s\n", x->name, ckpt_dtype_name(x->dtype), sh);
        }
    }
}

/* Prints the tensors of s and the model of a, then checks one against the other. */
static int inspect_set(const ckpt_set *s, const model_args *a, ckpt_names names, base_err *err) {
    print_tensors(s);
    int64_t numel = 0, n = 0;
    for (int i = 0; i < s->n_files; i++)
        for (int t = 0; t < s->files[i].n_tensors; t++, n++) numel += s->files[i].tensors[t].numel;
    printf("%lld tensors, %lld elements in %d file(s)\n", (long long)n, (long long)numel,
           s->n_files);
    if (!a) return 0;
    ckpt_print_model(a);
    model desc;
    int rc = model_describe(&desc, a, err);
    if (rc == 0) rc = ckpt_check_model(&desc, s, names, err);
    model_free(&desc);
    if (rc == 0 && a->tie_embeddings) rc = ckpt_check_tied_head(s, names, NULL, 0, NULL, err);
    if (rc == 0) printf("ok: the tensors match the model (names, shapes, floating dtypes)\n");
    return rc;
}

/* A training checkpoint step-N: its model, each rank's shard, and the weights buffer's size
 * against the model's parameter count. */
static int inspect_step(const ckpt_source *src, base_err *err) {
    char *train = NULL, p[4200];
    int world = 0;
    model_args a;
    if (ckpt_step_read_meta(src->folder, src->step, &train, &world, err)) return -1;
    free(train);
    if (ckpt_step_check_shards(src->folder, src->step, err)) return -1;
    if (ckpt_source_args(src, &a, err)) return -1;
    printf("training checkpoint %s/step-%lld (%d rank shard%s)\n", src->folder,
           (long long)src->step, world, world == 1 ? "" : "s");
    model desc;
    if (model_describe(&desc, &a, err)) return -1;
    const size_t want = desc.n_floats;
    model_free(&desc);
    int rc = 0, checked = 0;
    for (int r = 0; rc == 0 && r < world; r++) {
        ckpt_set s;
        snprintf(p, sizeof p, "%s/step-%lld/rank-%05d.safetensors", src->folder,
                 (long long)src->step, r);
        if (ckpt_set_open_file(&s, p, err)) return -1;
        print_tensors(&s);
        const char *gn = ckpt_meta_get(&s.files[0], "model.global_numel");
        int64_t n;
        if (!gn || base_parse_i64(gn, &n) || (size_t)n != want)
            rc = base_fail(err, "%s: buffer \"model\" holds %s elements, the model has %zu", p,
                           gn ? gn : "(unknown)", want);
        for (int i = 0; rc == 0 && i < s.files[0].n_tensors; i++) {
            const int v = ckpt_tensor_verify(&s.files[0], &s.files[0].tensors[i], err);
            ckpt_tensor_release(&s.files[0], &s.files[0].tensors[i]);
            if (v < 0) rc = -1;
            checked += v > 0;
        }
        ckpt_set_close(&s);
    }
    if (rc) return rc;
    ckpt_print_model(&a);
    printf("ok: every shard opens, the weights buffer fits the model and %s\n",
           checked ? "every recorded CRC-32C matches its tensor's bytes"
                   : "no tensor records a checksum (written before titan recorded them)");
    return 0;
}

int ckpt_inspect(const char *path, base_err *err) {
    struct stat st;
    if (stat(path, &st) != 0) return base_fail(err, "%s: no such file or folder", path);
    char p[4096];
    model_args a;
    ckpt_set s;
    int rc;
    if (S_ISDIR(st.st_mode)) {
        if (base_has_file(path, "config.json")) {
            printf("Hugging Face folder %s\n", path);
            if (base_path_join(p, sizeof p, path, "config.json", err) ||
                ckpt_hf_config_read(p, &a, err) || ckpt_set_open_dir(&s, path, err))
                return -1;
            rc = inspect_set(&s, &a, CKPT_NAMES_HF, err);
        } else if (base_has_file(path, CKPT_ARGS_FILE)) {
            printf("training checkpoint %s\n", path);
            if (ckpt_train_read_args(path, &a, err) ||
                base_path_join(p, sizeof p, path, MODEL_FILE, err) ||
                ckpt_set_open_file(&s, p, err))
                return -1;
            rc = inspect_set(&s, &a, CKPT_NAMES_TITAN, err);
        } else {
            ckpt_source src; /* a training checkpoint step-N (or its folder: the newest) */
            if (ckpt_source_open(&src, path, err)) return -1; /* its reason: more precise */
            if (src.kind != CKPT_SRC_STEP)
                return base_fail(err,
                                 "%s: neither a Hugging Face folder (no config.json) nor a "
                                 "training checkpoint (no %s, metadata.json or step-N)",
                                 path, CKPT_ARGS_FILE);
            return inspect_step(&src, err);
        }
        ckpt_set_close(&s);
        return rc;
    }
    size_t len = strlen(path);
    if (len >= 5 && !strcmp(path + len - 5, ".json")) {
        if (ckpt_hf_config_read(path, &a, err)) return -1;
        printf("Hugging Face config %s\n", path);
        ckpt_print_model(&a);
        return 0;
    }
    if (ckpt_set_open_file(&s, path, err)) return -1;
    rc = inspect_set(&s, NULL, CKPT_NAMES_HF, err);
    ckpt_set_close(&s);
    return rc;
}

/* ---- titan convert ------------------------------------------------------------------ */

/* Bytes of weight data in a checkpoint folder's safetensors files (for the throughput line). */
static double data_gb(const ckpt_set *s) {
    double b = 0;
    for (int i = 0; i < s->n_files; i++) b += (double)s->files[i].size;
    return b / 1e9;
}

/* A titan model folder is written into dst: refused where dst holds a Hugging Face model
 * (config.json, a safetensors index) or a model.safetensors that is not a titan model folder's
 * (no model_args.json beside it), whose weights it would replace with a model of neither
 * kind. An empty or new folder, or an earlier convert's output, is fine. */
static int titan_target_ok(const char *dst, base_err *err) {
    static const char *const hf[] = {"config.json", "model.safetensors.index.json"};
    for (size_t i = 0; i < sizeof hf / sizeof hf[0]; i++)
        if (base_has_file(dst, hf[i]))
            return base_fail(err,
                             "%s: holds %s (a Hugging Face model folder): a training checkpoint "
                             "would replace its weights; write it into another folder",
                             dst, hf[i]);
    if (base_has_file(dst, MODEL_FILE) && !base_has_file(dst, CKPT_ARGS_FILE))
        return base_fail(err,
                         "%s: holds a %s without %s (not a titan model folder): converting "
                         "would replace it; write into another folder",
                         dst, MODEL_FILE, CKPT_ARGS_FILE);
    return 0;
}

static int convert(const char *src, const char *dst, const ckpt_export_opts *opts, base_err *err) {
    const model_build_opts bo = {.batch = 1, .seq_len = 1, .ac = MODEL_AC_NONE};
    model m = {0}; /* freed below even when the arguments fail to read */
    int rc;
    ckpt_source cs;
    if (ckpt_source_open(&cs, src, err)) return -1;
    if (cs.kind == CKPT_SRC_FILE)
        return base_fail(err,
                         "%s: neither a Hugging Face folder (no config.json) nor a training "
                         "checkpoint (no metadata.json, step-N or %s)",
                         src, CKPT_ARGS_FILE);
    const int from_hf = cs.kind == CKPT_SRC_HF;
    if (cs.kind == CKPT_SRC_STEP) { /* a step-N checkpoint: arguments from its metadata */
        model_args a;
        const double t0 = base_now();
        rc = ckpt_source_args(&cs, &a, err) || model_build_unset(&m, &a, &bo, err) ||
                     ckpt_source_load(&cs, &m, m.w, err)
                 ? -1
                 : 0;
        if (rc == 0)
            printf("loaded %s/step-%lld: %.3f GB in %.2f s\n", cs.folder, (long long)cs.step,
                   (double)m.n_floats * 4 / 1e9, base_now() - t0);
        /* what the run's own export writes: its tokenizer's ids (config.json), the word on the
         * expert bias, and its tokenizer's files unless assets are given */
        ckpt_export_opts eo = opts ? *opts : (ckpt_export_opts){.dtype = CKPT_F32};
        ckpt_export_facts fx;
        if (rc == 0 && ckpt_source_export_facts(&cs, &fx, err)) rc = -1;
        if (rc == 0) {
            if (fx.have_ids) eo.token_ids = fx.ids;
            eo.expert_bias = fx.expert_bias;
            if (!eo.assets_dir && fx.tokenizer == 1) {
                eo.assets_dir = fx.tokenizer_dir;
                printf("tokenizer files from %s (the run's tokenizer, recorded in the "
                       "checkpoint; --assets DIR to choose others)\n",
                       fx.tokenizer_dir);
            }
            if (!eo.assets_dir && fx.tokenizer == 2)
                base_log(BASE_LOG_WARN,
                         "%s: the run's tokenizer %s is gone or its tokenizer.json changed: the "
                         "export gets no tokenizer files (--assets DIR with the tokenizer the run "
                         "used)",
                         dst, fx.tokenizer_dir);
        }
        const double t1 = base_now();
        if (rc == 0) rc = ckpt_export_hf(&m, dst, &eo, err);
        if (rc == 0)
            printf("wrote %s (%s) in %.2f s, %zu parameters, peak RSS %.2f GiB\n", dst,
                   ckpt_dtype_name(opts ? opts->dtype : CKPT_F32), base_now() - t1, m.n_floats,
                   (double)base_peak_rss() / (1 << 30));
        model_free(&m);
        return rc;
    }
    if (from_hf && opts && opts->given)
        return base_fail(err,
                         "%s: %s is an export option (training checkpoint -> Hugging Face); "
                         "a Hugging Face folder converts to an fp32 training checkpoint",
                         src, opts->given);
    if (from_hf && (rc = titan_target_ok(dst, err))) return rc;
    double t0 = base_now(), gb = 0;
    ckpt_set s;
    char p[4096];
    /* the input's size, from its headers (opening is cheap: nothing is read yet) */
    if ((from_hf ? ckpt_set_open_dir(&s, src, err)
                 : base_path_join(p, sizeof p, src, MODEL_FILE, err) ||
                       ckpt_set_open_file(&s, p, err)) == 0) {
        gb = data_gb(&s);
        ckpt_set_close(&s);
    }
    rc = from_hf ? ckpt_load_hf(&m, src, &bo, err) : ckpt_train_load_model(&m, src, &bo, err);
    const double t1 = base_now();
    if (rc == 0)
        printf("loaded %s: %.3f GB in %.2f s (%.2f GB/s), peak RSS %.2f GiB\n", src, gb, t1 - t0,
               gb / (t1 - t0), (double)base_peak_rss() / (1 << 30));
    if (rc == 0)
        rc = from_hf ? ckpt_train_save_model(&m, dst, err) : ckpt_export_hf(&m, dst, opts, err);
    if (rc == 0)
        printf("wrote %s (%s) in %.2f s, %zu parameters, peak RSS %.2f GiB\n", dst,
               from_hf ? "training checkpoint, F32"
                       : ckpt_dtype_name(opts ? opts->dtype : CKPT_F32),
               base_now() - t1, m.n_floats, (double)base_peak_rss() / (1 << 30));
    model_free(&m);
    return rc;
}

int ckpt_convert(const char *src, const char *dst, const ckpt_export_opts *opts, base_err *err) {
    /* never into a folder a training run (or another convert) is writing */
    const int existed = base_is_dir(dst);
    base_dir_lock lock;
    if (base_dir_lock_take(&lock, dst, err)) return -1;
    /* nor into the source itself or a folder holding it (the export's files would mix with
     * the source's, and a run folder would turn into a Hugging Face one) */
    base_err why;
    char *rs = realpath(src, NULL), *rd = realpath(dst, NULL);
    const size_t nd = rd ? strlen(rd) : 0;
    const int inside = rs && rd && !strncmp(rs, rd, nd) && (rs[nd] == 0 || rs[nd] == '/');
    free(rs);
    free(rd);
    const int rc = inside ? base_fail(err,
                                      "%s: the output folder is (or holds) the source %s: "
                                      "write the export elsewhere",
                                      dst, src)
                          : convert(src, dst, opts, &why);
    if (rc && !inside) /* every failure names the source (out of memory for its model too) */
        strstr(why.msg, src) || strstr(why.msg, dst) ? base_fail(err, "%s", why.msg)
                                                     : base_fail(err, "%s: %s", src, why.msg);
    base_dir_unlock(&lock);
    if (rc && !existed) rmdir(dst); /* the lock's folder, when nothing was written into it */
    return rc;
}
