/* Hugging Face folders: export (config.json, sharded safetensors + index in an export dtype,
 * tokenizer files, generation_config.json) and building a model from one. */
#include <dirent.h>
#include <jansson.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint/internal.h"

int ckpt_export_dtype_parse(const char *s, ckpt_dtype *out) {
    static const struct {
        const char *name;
        ckpt_dtype d;
    } names[] = {{"float32", CKPT_F32},   {"fp32", CKPT_F32},  {"F32", CKPT_F32},
                 {"bfloat16", CKPT_BF16}, {"bf16", CKPT_BF16}, {"BF16", CKPT_BF16},
                 {"float16", CKPT_F16},   {"fp16", CKPT_F16},  {"F16", CKPT_F16},
                 {"half", CKPT_F16}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(s, names[i].name)) return *out = names[i].d, 0;
    return -1;
}

int ckpt_size_parse(const char *s, uint64_t *out) {
    static const struct {
        const char *unit;
        double mult;
    } units[] = {{"KiB", 1024.0},
                 {"MiB", 1048576.0},
                 {"GiB", 1073741824.0},
                 {"TiB", 1099511627776.0},
                 {"KB", 1e3},
                 {"MB", 1e6},
                 {"GB", 1e9},
                 {"TB", 1e12},
                 {"B", 1},
                 {"", 1}};
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !(v > 0)) return -1;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(end, units[i].unit) != 0) continue;
        double b = v * units[i].mult;
        if (b >= 1.8e19) return -1;
        *out = (uint64_t)b; /* int(value * multiplier), as transformers */
        return *out > 0 ? 0 : -1;
    }
    return -1;
}

/* Rank of a block tensor in the order transformers writes it.
 * Dense (Qwen3ForCausalLM has no weight conversions): the state_dict order, i.e. module
 * registration order of Qwen3DecoderLayer: self_attn q,k,v,o,q_norm,k_norm; mlp gate,up,down;
 * the two norms.
 * MoE (transformers 5 fuses the experts in memory and reverts that on save,
 * core_model_loading.revert_weight_conversion): the in-memory state dict sorted by
 * dot_natural_key (names split on ".", numbers numerically), each fused tensor then expanded
 * to its per-expert tensors in expert order: lm_head, embed_tokens, then per block
 * input_layernorm, experts.down_proj (mlp.experts.down_proj sorts before gate_up_proj),
 * experts.gate_proj, experts.up_proj (gate_up_proj splits into all gates, then all ups),
 * mlp.gate, post_attention_layernorm, self_attn k_norm, k_proj, o_proj, q_norm, q_proj,
 * v_proj; then model.norm. */
static int hf_moe_block_rank(const char *suffix) {
    static const char *const order[] = {"input_layernorm.weight",
                                        "mlp.experts.*.down_proj.weight",
                                        "mlp.experts.*.gate_proj.weight",
                                        "mlp.experts.*.up_proj.weight",
                                        "mlp.gate.weight",
                                        "post_attention_layernorm.weight",
                                        "self_attn.k_norm.weight",
                                        "self_attn.k_proj.weight",
                                        "self_attn.o_proj.weight",
                                        "self_attn.q_norm.weight",
                                        "self_attn.q_proj.weight",
                                        "self_attn.v_proj.weight"};
    int expert_pos = 0;
    if (!strncmp(suffix, "mlp.experts.", 12)) /* skip the expert index */
        sscanf(suffix + 12, "%*d.%n", &expert_pos);
    for (int i = 0; i < (int)(sizeof order / sizeof order[0]); i++) {
        const char *o = order[i];
        if (expert_pos > 0 && !strncmp(o, "mlp.experts.*.", 14)) {
            if (!strcmp(suffix + 12 + expert_pos, o + 14)) return i;
        } else if (!strcmp(suffix, o)) {
            return i;
        }
    }
    return 100;
}

static int hf_block_rank(const char *suffix) {
    static const char *const order[] = {"self_attn.q_proj.weight",
                                        "self_attn.k_proj.weight",
                                        "self_attn.v_proj.weight",
                                        "self_attn.o_proj.weight",
                                        "self_attn.q_norm.weight",
                                        "self_attn.k_norm.weight",
                                        "mlp.gate_proj.weight",
                                        "mlp.up_proj.weight",
                                        "mlp.down_proj.weight",
                                        "mlp.gate.weight",
                                        "mlp.experts.",
                                        "input_layernorm.weight",
                                        "post_attention_layernorm.weight"};
    for (int i = 0; i < (int)(sizeof order / sizeof order[0]); i++)
        if (!strncmp(suffix, order[i], strlen(order[i]))) return i;
    return 100;
}

typedef struct {
    const ckpt_entry *e;
    int group, rank, idx; /* embed 0, layer l -> 1 + l, final norm L + 1, lm_head L + 2 */
    size_t bytes;
    int shard;
    int follows; /* an expert of a stack after expert 0: shares its storage and shard */
} out_tensor;

static int state_dict_cmp(const void *a, const void *b) {
    const out_tensor *x = a, *y = b;
    if (x->group != y->group) return x->group - y->group;
    if (x->rank != y->rank) return x->rank - y->rank;
    return x->idx - y->idx;
}

static int name_cmp(const void *a, const void *b) {
    return strcmp((*(const out_tensor *const *)a)->e->name,
                  (*(const out_tensor *const *)b)->e->name);
}

static void shard_name(char *out, size_t cap, int i, int n) {
    if (n == 1)
        snprintf(out, cap, "model.safetensors");
    else
        snprintf(out, cap, "model-%05d-of-%05d.safetensors", i + 1, n);
}

/* Is name a weight file of an HF folder (model.safetensors, the index, a shard)? */
static int is_weight_file(const char *name) {
    int a, b, len = 0;
    if (!strcmp(name, "model.safetensors") || !strcmp(name, "model.safetensors.index.json"))
        return 1;
    return sscanf(name, "model-%5d-of-%5d.safetensors%n", &a, &b, &len) == 2 &&
           len == (int)strlen(name) && strlen(name) == strlen("model-00001-of-00001.safetensors");
}

/* Copies src to dst atomically (small text files: tokenizer, generation config). */
static int copy_file(const char *src, const char *dst, base_err *err) {
    size_t len;
    char *buf = base_read_file(src, (size_t)1 << 30, &len, err);
    if (!buf) return -1;
    int rc = ckpt_write_bytes(dst, buf, len, err);
    free(buf);
    return rc;
}

/* Writes the weight files. */
static int write_weights(const model *m, const char *dir, ckpt_dtype dtype, uint64_t max_bytes,
                         base_err *err) {
    ckpt_entry *es;
    int n;
    if (ckpt_expected(m, CKPT_NAMES_HF, &es, &n, err)) return -1;
    out_tensor *ts = calloc((size_t)(n ? n : 1), sizeof *ts);
    out_tensor **file_ts = calloc((size_t)(n ? n : 1), sizeof *file_ts);
    ckpt_wtensor *wts = calloc((size_t)(n ? n : 1), sizeof *wts);
    int rc = 0;
    if (!ts || !file_ts || !wts) {
        rc = base_fail(err, "%s: out of memory", dir);
        goto out;
    }
    const int L = m->args.n_layers, moe = m->args.n_experts > 0;
    for (int i = 0; i < n; i++) {
        out_tensor *t = &ts[i];
        t->e = &es[i];
        t->idx = i; /* experts of one stack are consecutive, in expert order */
        t->bytes = es[i].numel * ckpt_dtype_size(dtype);
        int layer, pos = 0;
        if (sscanf(es[i].name, "model.layers.%d.%n", &layer, &pos) == 1 && pos > 0) {
            t->group = 1 + layer;
            t->rank = moe ? hf_moe_block_rank(es[i].name + pos) : hf_block_rank(es[i].name + pos);
        } else {
            t->group = !strcmp(es[i].name, "model.embed_tokens.weight") ? 0
                       : !strcmp(es[i].name, "lm_head.weight")          ? (moe ? -1 : L + 2)
                                                                        : L + 1;
        }
    }
    qsort(ts, (size_t)n, sizeof *ts, state_dict_cmp);
    /* transformers 5 hands huggingface_hub one [E, out, in] storage per expert projection,
     * viewed as E tensors: the split counts the storage once, at expert 0 (all E tensors'
     * bytes), and puts every tensor of that storage into expert 0's shard. */
    for (int i = n - 1; moe && i > 0; i--)
        if (ts[i].group == ts[i - 1].group && ts[i].rank == ts[i - 1].rank &&
            strstr(ts[i].e->name, ".mlp.experts.")) {
            ts[i].follows = 1;
            ts[i - 1].bytes += ts[i].bytes;
            ts[i].bytes = 0;
        }

    /* huggingface_hub split_torch_state_dict_into_shards: greedy in state_dict order; a
     * tensor larger than the limit gets a shard of its own. Shards are numbered in the order
     * they are completed: an oversized tensor's at once, the running shard when it is full
     * (or at the end). `bins` counts provisional shards, number[] maps them to final ones. */
    int n_shards = 0, bins = 0, cur = -1;
    int *number = malloc(sizeof *number * (size_t)(n + 1));
    if (!number) {
        rc = base_fail(err, "%s: out of memory", dir);
        goto out;
    }
    uint64_t cur_bytes = 0;
    for (int i = 0; i < n; i++) {
        if (ts[i].follows) {
            ts[i].shard = ts[i - 1].shard;
            continue;
        }
        if (ts[i].bytes > max_bytes) {
            ts[i].shard = bins;
            number[bins++] = n_shards++;
            continue;
        }
        if (cur < 0 || cur_bytes + ts[i].bytes > max_bytes) {
            if (cur >= 0) number[cur] = n_shards++;
            cur = bins++;
            cur_bytes = 0;
        }
        ts[i].shard = cur;
        cur_bytes += ts[i].bytes;
    }
    if (cur >= 0) number[cur] = n_shards++;
    for (int i = 0; i < n; i++) ts[i].shard = number[ts[i].shard];
    free(number);
    if (n_shards > 99999) {
        rc = base_fail(err, "%s: %d shards (at most 99999); raise the shard size", dir, n_shards);
        goto out;
    }

    char path[4096], fname[64];
    const ckpt_kv meta[] = {{"format", "pt"}};
    json_t *wm = json_object();
    uint64_t total = 0;
    for (int s = 0; s < n_shards && rc == 0; s++) {
        int k = 0;
        for (int i = 0; i < n; i++)
            if (ts[i].shard == s) file_ts[k++] = &ts[i];
        /* the Rust safetensors writer orders a file's tensors by name (all share one dtype) */
        qsort(file_ts, (size_t)k, sizeof *file_ts, name_cmp);
        shard_name(fname, sizeof fname, s, n_shards);
        for (int i = 0; i < k; i++) {
            const ckpt_entry *e = file_ts[i]->e;
            wts[i] = (ckpt_wtensor){.name = e->name,
                                    .dtype = dtype,
                                    .ndim = e->ndim,
                                    .data = m->w + e->offset,
                                    .from_f32 = 1};
            for (int d = 0; d < e->ndim; d++) wts[i].shape[d] = e->shape[d];
            json_object_set_new(wm, e->name, json_string(fname));
            total += file_ts[i]->bytes;
        }
        if ((rc = base_path_join(path, sizeof path, dir, fname, err)) == 0)
            rc = ckpt_write(path, wts, k, meta, 1, err);
    }
    if (rc == 0 && n_shards > 1) {
        model_counts c;
        model_count_params(&m->args, &c);
        json_t *idx =
            json_pack("{s:{s:I,s:I},s:O}", "metadata", "total_parameters", (json_int_t)c.total,
                      "total_size", (json_int_t)total, "weight_map", wm);
        if ((rc = base_path_join(path, sizeof path, dir, "model.safetensors.index.json", err)) == 0)
            rc = ckpt_write_json(path, idx, err);
        json_decref(idx);
    }
    json_decref(wm);
out:
    free(wts);
    free(file_ts);
    free(ts);
    free(es);
    return rc;
}

/* A weight that the export dtype cannot hold: a finite value the conversion would turn into
 * an infinity (float16: |x| >= 65520, halfway past its 65504, rounds to inf; bfloat16: past
 * 0x7f7f8000), which transformers would load without a word. Refused naming the HF tensor and
 * the element, before anything is written. */
static int check_export_range(const model *m, ckpt_dtype dtype, const char *dir, base_err *err) {
    if (dtype != CKPT_F16 && dtype != CKPT_BF16) return 0;
    const uint32_t bf16_inf_from = 0x7f7f8000u;
    float bf_lim;
    memcpy(&bf_lim, &bf16_inf_from, sizeof bf_lim);
    const float lim = dtype == CKPT_F16 ? 65520.0f : bf_lim;
    ckpt_entry *es;
    int n;
    if (ckpt_expected(m, CKPT_NAMES_HF, &es, &n, err)) return -1;
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        const float *w = m->w + es[i].offset;
        int any = 0;
        for (size_t k = 0; k < es[i].numel; k++) any |= fabsf(w[k]) >= lim; /* vectorised */
        for (size_t k = 0; any && k < es[i].numel; k++)
            if (fabsf(w[k]) >= lim && isfinite(w[k])) {
                rc = base_fail(err,
                               "%s: tensor '%s': element %zu = %.9g is beyond %s's range (it "
                               "would be written as infinity); export in %s",
                               dir, es[i].name, k, w[k], dtype == CKPT_F16 ? "float16" : "bfloat16",
                               dtype == CKPT_F16 ? "bfloat16 or float32" : "float32");
                break;
            }
    }
    free(es);
    return rc;
}

/* Tokenizer and generation files an HF folder carries, copied when the assets folder has them. */
static const char *const g_asset_files[] = {
    "tokenizer.json",      "tokenizer_config.json",   "vocab.json",
    "merges.txt",          "special_tokens_map.json", "added_tokens.json",
    "chat_template.jinja", "generation_config.json"};
#define N_ASSETS (sizeof g_asset_files / sizeof *g_asset_files)

static int same_file(const char *a, const char *b) {
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

/* Removes from dir what an earlier export wrote there before this one writes anything:
 * config.json (written last, so that a folder a killed or failed export leaves has none, and
 * neither transformers nor titan take it for a model: each file is replaced atomically, the
 * folder is not, and old and new shards had loaded together), the weight files (an old
 * model.safetensors beside new shards is the one transformers loads), the generation config
 * (written again only when this export has one: an old one had kept changing generate's stop
 * ids) and, when assets are copied, every tokenizer file (one the new tokenizer lacks, such as
 * an old vocab.json, would stay beside it). Without assets the tokenizer files stay, said. */
static int clear_earlier(const char *dir, const ckpt_export_opts *o, base_err *err) {
    const int with_assets = o->assets_dir != NULL;
    DIR *d = opendir(dir);
    if (!d) return base_fail(err, "%s: cannot list: %s", dir, strerror(errno));
    struct dirent *de;
    char path[4096], kept[256] = "";
    int rc = 0;
    while (rc == 0 && (de = readdir(d))) {
        const char *f = de->d_name;
        int asset = 0;
        for (size_t i = 0; i < N_ASSETS && !asset; i++) asset = !strcmp(f, g_asset_files[i]);
        const int gen = !strcmp(f, "generation_config.json");
        if (asset && !gen && !with_assets) {
            if (strlen(kept) + strlen(f) + 3 < sizeof kept)
                snprintf(kept + strlen(kept), sizeof kept - strlen(kept), "%s%s", *kept ? ", " : "",
                         f);
            continue;
        }
        if (!asset && !is_weight_file(f) && strcmp(f, "config.json")) continue;
        if ((rc = base_path_join(path, sizeof path, dir, f, err))) break;
        /* a file this export copies from (the assets folder or generation config given inside
         * the export folder): copied onto itself below, not lost */
        char src[4096];
        if (asset &&
            ((gen && o->generation_config && same_file(path, o->generation_config)) ||
             (with_assets && base_path_join(src, sizeof src, o->assets_dir, f, NULL) == 0 &&
              same_file(path, src))))
            continue;
        if (unlink(path) != 0 && errno != ENOENT)
            rc = base_fail(err, "%s: cannot remove (an earlier export's file): %s", path,
                           strerror(errno));
    }
    closedir(d);
    if (rc == 0 && *kept)
        base_log(BASE_LOG_WARN,
                 "%s: an earlier export's tokenizer files stay as they were (%s): this one copies "
                 "none (give the tokenizer folder as its assets to replace them)",
                 dir, kept);
    return rc;
}

int ckpt_export_hf(const model *m, const char *dir, const ckpt_export_opts *opts, base_err *err) {
    ckpt_export_opts o = {.dtype = CKPT_F32};
    if (opts) o = *opts;
    if (!o.max_shard_bytes) o.max_shard_bytes = CKPT_DEFAULT_SHARD_BYTES;
    if (o.dtype != CKPT_F32 && o.dtype != CKPT_BF16 && o.dtype != CKPT_F16)
        return base_fail(err, "%s: export dtype %s is not float32, bfloat16 or float16", dir,
                         ckpt_dtype_name(o.dtype));
    /* what would be copied, checked before anything is written: a missing assets folder or
     * one without a tokenizer would leave an export no tokenizer loads, silently */
    if (o.assets_dir && !base_is_dir(o.assets_dir))
        return base_fail(err, "%s: no such assets folder (the tokenizer files to copy)",
                         o.assets_dir);
    if (o.assets_dir && !base_has_file(o.assets_dir, "tokenizer.json"))
        base_log(BASE_LOG_WARN, "%s has no tokenizer.json: the export in %s gets no tokenizer",
                 o.assets_dir, dir);
    if (o.generation_config) {
        json_error_t je;
        json_t *g = json_load_file(o.generation_config, JSON_REJECT_DUPLICATES, &je);
        if (!g)
            return base_fail(err, "%s: not valid JSON: %s (line %d column %d)", o.generation_config,
                             je.text, je.line, je.column);
        const int obj = json_is_object(g);
        json_decref(g);
        if (!obj) return base_fail(err, "%s: not a JSON object", o.generation_config);
    }
    int bias = o.expert_bias;
    const size_t n_bias = (size_t)m->args.n_layers * (size_t)m->args.n_experts;
    for (size_t i = 0; m->moe_bias && i < n_bias && !bias; i++) bias = m->moe_bias[i] != 0;
    if (bias)
        base_log(BASE_LOG_WARN,
                 "%s: the model's MoE expert bias (moe_load_balance = \"bias\") is not part of "
                 "Hugging Face's Qwen3-MoE, whose router has none: the exported model picks its "
                 "experts without it (as torchtitan's export; titan's checkpoint keeps it)",
                 dir);
    if (check_export_range(m, o.dtype, dir, err) || base_mkdir_p(dir, err) ||
        clear_earlier(dir, &o, err))
        return -1;

    /* the weights, the tokenizer files and the generation config, then config.json */
    char path[4096];
    int rc = write_weights(m, dir, o.dtype, o.max_shard_bytes, err);
    for (size_t i = 0; rc == 0 && o.assets_dir && i < N_ASSETS; i++) {
        char src[4096];
        if ((rc = base_path_join(src, sizeof src, o.assets_dir, g_asset_files[i], err))) break;
        if (access(src, R_OK) != 0) continue;
        if ((rc = base_path_join(path, sizeof path, dir, g_asset_files[i], err)) == 0)
            rc = copy_file(src, path, err);
    }
    if (rc == 0 && o.generation_config &&
        (rc = base_path_join(path, sizeof path, dir, "generation_config.json", err)) == 0)
        rc = copy_file(o.generation_config, path, err);
    if (rc == 0 && (rc = base_path_join(path, sizeof path, dir, "config.json", err)) == 0)
        rc = ckpt_hf_config_write(&m->args, o.dtype, o.token_ids, path, err);
    return rc;
}

int ckpt_load_hf(model *m, const char *dir, const model_build_opts *opts, base_err *err) {
    memset(m, 0, sizeof *m);
    char path[4096];
    model_args a;
    if (base_path_join(path, sizeof path, dir, "config.json", err) ||
        ckpt_hf_config_read(path, &a, err))
        return -1;
    ckpt_set s;
    if (ckpt_set_open_dir(&s, dir, err)) return -1;
    return ckpt_build_from_set(m, &a, &s, CKPT_NAMES_HF, opts, err);
}
