/* checkpoint: safetensors reader and writer, the Hugging Face adapter (config.json <-> model
 * arguments, HF names, sharded folders with model.safetensors.index.json, export dtypes,
 * tokenizer files), the training-checkpoint model file, and `titan inspect` / `titan convert`.
 *
 * safetensors layout: u64 little-endian header length n, n bytes of JSON
 *   {"__metadata__": {str: str}, "<name>": {"dtype": "F32", "shape": [..],
 *    "data_offsets": [begin, end]}, ...}
 * then the data section; offsets are relative to its start. The reader treats the file as
 * hostile: every size, offset and shape is checked (the tensors must cover the data section
 * exactly, without gaps or overlaps, in any order), and every error names the file and the
 * tensor or field. The writer pads the header with spaces to a multiple of 8 bytes (so the
 * data section is 8-byte aligned) and writes atomically (base_atomic_open: "<path>.tmp" created
 * O_EXCL | O_NOFOLLOW, fsync, rename). */
#ifndef TITAN_CHECKPOINT_H
#define TITAN_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "model/model.h"

#define CKPT_MAX_DIMS 8

/* Every dtype of the safetensors format that titan can hold. F4, F6_*, C64 and the FNUZ
 * float8 variants are recognised and refused by name. */
typedef enum {
    CKPT_F32,
    CKPT_F64,
    CKPT_I32,
    CKPT_I64,
    CKPT_BF16,
    CKPT_F16,
    CKPT_BOOL,
    CKPT_U8,
    CKPT_I8,
    CKPT_I16,
    CKPT_U16,
    CKPT_U32,
    CKPT_U64,
    CKPT_F8_E4M3, /* torch.float8_e4m3fn */
    CKPT_F8_E5M2,
    CKPT_F8_E8M0,
    CKPT_DTYPE_COUNT
} ckpt_dtype;

/* The format's names ("F32", "BF16", "F8_E4M3", ...) and element sizes in bytes. */
const char *ckpt_dtype_name(ckpt_dtype d);
size_t ckpt_dtype_size(ckpt_dtype d);
/* Parses a dtype name; -1 when unknown. */
int ckpt_dtype_parse(const char *s, ckpt_dtype *out);
/* F32, F64, BF16, F16 and the float8 types. */
int ckpt_dtype_is_float(ckpt_dtype d);

typedef struct {
    char *name;
    ckpt_dtype dtype;
    int ndim; /* 0 for a scalar */
    int64_t shape[CKPT_MAX_DIMS];
    int64_t numel;
    size_t nbytes;
    const void *data; /* points into the file image: may be unaligned (use the getters) */
} ckpt_tensor;

typedef struct {
    const char *key, *value;
} ckpt_kv;

typedef struct {
    char *path;
    unsigned char *map; /* the whole file: a read-only mapping, or the caller's buffer */
    size_t size;
    int mapped;    /* map is ours (ckpt_open): unmapped by ckpt_close */
    int n_tensors; /* in header order */
    ckpt_tensor *tensors;
    int n_meta;
    ckpt_kv *meta;     /* __metadata__ sorted by key, strings owned by the file */
    int *by_name;      /* [n_tensors] tensor indices sorted by name (ckpt_find) */
    uint64_t dev, ino; /* the file ckpt_open opened (0, 0 for an image in memory) */
} ckpt_file;

/* Maps and validates a safetensors file. On failure *f is left empty (ckpt_close is safe). */
int ckpt_open(ckpt_file *f, const char *path, base_err *err);
/* Validates a safetensors image already in memory (buf[size], kept by the caller until
 * ckpt_close); path only names it in messages. */
int ckpt_open_mem(ckpt_file *f, const char *path, const void *buf, size_t size, base_err *err);
void ckpt_close(ckpt_file *f);

const ckpt_tensor *ckpt_find(const ckpt_file *f, const char *name);
/* The __metadata__ value for key, or NULL. */
const char *ckpt_meta_get(const ckpt_file *f, const char *key);

/* Zero copy: the tensor's data as floats when it is F32 and 4-byte aligned (always so in a
 * file whose header length is a multiple of 8, as the writer makes it), else NULL. */
const float *ckpt_tensor_f32(const ckpt_tensor *t);
/* Drops the tensor's pages from this process's memory (madvise DONTNEED on the mapping):
 * loaders call it after copying a tensor out, so a whole-file mapping never costs its size
 * in resident memory. The data stays readable (it is read again from the file). */
void ckpt_tensor_release(const ckpt_file *f, const ckpt_tensor *t);

/* Converts a tensor of a floating dtype (F32, F64, BF16, F16, F8_*) into out[t->numel]. */
int ckpt_tensor_to_f32(const ckpt_file *f, const ckpt_tensor *t, float *out, base_err *err);
/* Converts any floating or integer tensor into out[t->numel] as double. */
int ckpt_tensor_to_f64(const ckpt_file *f, const ckpt_tensor *t, double *out, base_err *err);
/* Converts an integer or BOOL tensor into out[t->numel]; values must fit in int32. */
int ckpt_tensor_to_i32(const ckpt_file *f, const ckpt_tensor *t, int32_t *out, base_err *err);

/* Look up `name` and return a freshly base_alloc'ed converted copy (base_free it), or NULL
 * with err filled (missing tensor, wrong dtype, out-of-range value). *numel (if non-NULL)
 * receives the element count. */
float *ckpt_get_f32(const ckpt_file *f, const char *name, int64_t *numel, base_err *err);
double *ckpt_get_f64(const ckpt_file *f, const char *name, int64_t *numel, base_err *err);
int32_t *ckpt_get_i32(const ckpt_file *f, const char *name, int64_t *numel, base_err *err);

/* Checks t's bytes against the "<name>.crc32c" its file's __metadata__ records (ckpt_wtensor's
 * crc32c): 1 when they match, 0 when the file records none at all (older checkpoints, other
 * programs' files), -1 when they differ or the value is malformed, err naming the file and
 * tensor: a corrupt file never loads silently. */
int ckpt_tensor_verify(const ckpt_file *f, const ckpt_tensor *t, base_err *err);

/* Scalar conversions (exposed for tests and for bf16 export). */
float ckpt_bf16_to_f32(uint16_t h);
float ckpt_f16_to_f32(uint16_t h);
uint16_t ckpt_f32_to_bf16(float x); /* round to nearest even; NaN stays NaN */
uint16_t ckpt_f32_to_f16(float x);  /* round to nearest even, overflow to inf, subnormals */
/* n values: dst[i] = ckpt_f32_to_bf16(src[i]) (bf16 != 0) or ckpt_f32_to_f16(src[i]), bit for
 * bit, 8 at a time where the build's ISA has AVX2 (bf16) or F16C (f16). */
void ckpt_f32_to_half_n(const float *src, uint16_t *dst, size_t n, int bf16);
/* The inverse (exact): n bf16 (bf16 != 0) or f16 values at src (any alignment) to fp32. */
void ckpt_half_to_f32_n(const void *src, float *out, size_t n, int bf16);

/* One tensor to write: raw little-endian elements of `dtype`, numel = product of shape; or,
 * with from_f32, fp32 values written as `dtype` (F32, BF16 or F16; round to nearest even),
 * converted a chunk at a time while writing. With crc32c, __metadata__ also records
 * "<name>.crc32c": the CRC-32C of the tensor's bytes as written, 8 lowercase hex digits
 * (titan's checkpoint shards: ckpt_tensor_verify checks it on load; Hugging Face exports
 * carry none, to stay byte-identical to save_pretrained's). */
typedef struct {
    const char *name;
    ckpt_dtype dtype;
    int ndim;
    int64_t shape[CKPT_MAX_DIMS];
    const void *data;
    int from_f32;
    int crc32c;
} ckpt_wtensor;

/* Writes tensors in the given order (data contiguous, in that order) with optional
 * __metadata__ (n_meta may be 0), atomically: "<path>.tmp", fsync, rename. */
int ckpt_write(const char *path, const ckpt_wtensor *tensors, int n_tensors, const ckpt_kv *meta,
               int n_meta, base_err *err);
/* Writes n bytes to path atomically ("<path>.tmp", fsync, rename). */
int ckpt_write_bytes(const char *path, const void *buf, size_t n, base_err *err);

/* ---- checkpoint sets: a model in one or many safetensors files (hf_params.c) -------- */

/* Files read as one checkpoint: one file, or a Hugging Face folder (model.safetensors, or
 * model.safetensors.index.json + the shards it names). */
typedef struct {
    char dir[4096]; /* the folder ("" for a single file) */
    int n_files;
    ckpt_file *files;
} ckpt_set;

int ckpt_set_open_file(ckpt_set *s, const char *path, base_err *err);
/* DIR/model.safetensors if present (as transformers, it wins over an index), else the index
 * and every shard it names, validated: each file fully (ckpt_open), the index against the
 * shards (every indexed tensor in its shard, every shard tensor indexed there, no name in two
 * shards, no file names outside DIR). Only headers are read; data pages are mapped lazily. */
int ckpt_set_open_dir(ckpt_set *s, const char *dir, base_err *err);
void ckpt_set_close(ckpt_set *s);
const ckpt_tensor *ckpt_set_find(const ckpt_set *s, const char *name, const ckpt_file **file);

/* Which names a checkpoint uses: Hugging Face ("model.layers.0.self_attn.q_proj.weight",
 * experts one tensor each) or titan's (torchtitan v0.2.2: "layers.0.attention.wq.weight",
 * experts stacked [E, out, in]). */
typedef enum { CKPT_NAMES_HF, CKPT_NAMES_TITAN } ckpt_names;

/* One tensor a model expects in a checkpoint, and where it goes in the parameter buffer. */
typedef struct {
    char name[112];
    int ndim;
    int64_t shape[3];
    size_t offset, numel; /* floats */
} ckpt_entry;

/* The tensors of m under `names`, in layout order (malloc'ed; free()). */
int ckpt_expected(const model *m, ckpt_names names, ckpt_entry **out, int *n, base_err *err);
/* Strict check of a set against a model (headers only): every missing key, unexpected key,
 * shape mismatch and non-floating dtype is listed in one error. A tied model accepts (does
 * not require) an lm_head ("lm_head.weight" / "output.weight"). */
int ckpt_check_model(const model *m, const ckpt_set *s, ckpt_names names, base_err *err);
/* A tied model's lm_head copy in s ("lm_head.weight" / "output.weight"), if any, must be the
 * embedding emb (fp32, shape[ndim]; NULL: the set's own embedding tensor) bit for bit after
 * conversion to fp32: what a load accepts (the load and titan inspect both check it here). 0
 * when absent or equal. */
int ckpt_check_tied_head(const ckpt_set *s, ckpt_names names, const float *emb, int ndim,
                         const int64_t *shape, base_err *err);
/* Checks, then loads every parameter into base (m->w or a buffer of the same layout),
 * converting any floating dtype to fp32, file by file, dropping each tensor's pages once
 * copied (resident memory stays near the model's fp32 size). A tied model's lm_head in the
 * files must equal the embedding. On success every element of base[0, m->n_floats) has been
 * written (the check finds every parameter, and the parameters tile the buffer), so base may
 * come unzeroed (model_build_unset); after a failure its contents are undefined. */
int ckpt_load_model_set(const model *m, float *base, const ckpt_set *s, ckpt_names names,
                        base_err *err);
/* One file under HF names (the two forms: a path, an opened file). */
int ckpt_load_model(const model *m, float *base, const char *path, base_err *err);
int ckpt_load_model_file(const model *m, float *base, const ckpt_file *f, base_err *err);
/* Writes every parameter of m, read from base (m->w for weights, m->g for gradients), as F32
 * under its `names` name in layout order (the tied lm_head is not written), with optional
 * __metadata__. ckpt_save_model: HF names. */
int ckpt_save_model_names(const model *m, const float *base, const char *path, ckpt_names names,
                          const ckpt_kv *meta, int n_meta, base_err *err);
int ckpt_save_model(const model *m, const float *base, const char *path, const ckpt_kv *meta,
                    int n_meta, base_err *err);
/* "[a,b,c]" */
void ckpt_shape_str(char *out, size_t cap, int ndim, const int64_t *shape);

/* ---- Hugging Face config.json (hf_config.c) ------------------------------------------- */

/* Builds model arguments from a HF config.json: Qwen3ForCausalLM (model_type qwen3) or
 * Qwen3MoeForCausalLM (qwen3_moe), every field that affects the math (hidden_size,
 * num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim, intermediate_size,
 * vocab_size, rope_theta or rope_parameters.rope_theta, rms_norm_eps, tie_word_embeddings;
 * MoE: num_experts, num_experts_per_tok, moe_intermediate_size, norm_topk_prob,
 * router_aux_loss_coef), HF's defaults for omitted optional fields. Refused with an error
 * naming the file and field: other architectures, rope_scaling / non-default RoPE, sliding
 * windows in use, activations other than silu, attention bias, MoE with dense layers
 * (decoder_sparse_step != 1, mlp_only_layers), and arguments model_args_validate rejects. */
int ckpt_hf_config_read(const char *path, model_args *a, base_err *err);
/* Writes config.json for a (Qwen3ForCausalLM, or Qwen3MoeForCausalLM when a->n_experts > 0),
 * torch_dtype from dtype, atomically. token_ids: {bos, eos, pad} written as bos_token_id,
 * eos_token_id and pad_token_id, each where >= 0 (NULL: none). */
int ckpt_hf_config_write(const model_args *a, ckpt_dtype dtype, const int32_t *token_ids,
                         const char *path, base_err *err);
/* HF's names of {bos, eos, pad} (config.json's, and a training checkpoint's "tokenizer"). */
extern const char *const ckpt_token_id_keys[3];

/* ---- Hugging Face folders (hf_export.c) -------------------------------------------- */

typedef struct {
    ckpt_dtype dtype;              /* CKPT_F32 (default), CKPT_BF16 or CKPT_F16 */
    uint64_t max_shard_bytes;      /* 0: CKPT_DEFAULT_SHARD_BYTES */
    const char *assets_dir;        /* tokenizer files and generation_config.json copied from here */
    const char *generation_config; /* a generation_config.json to copy (wins over assets) */
    const char *given; /* convert: the first export option on its command line (NULL: none) */
    /* {bos, eos, pad} of the tokenizer the model was trained with (-1: that one has none), for
     * config.json, from which transformers' generate takes its stop token when the folder has
     * no generation_config.json; NULL: not known (no token ids written) */
    const int32_t *token_ids;
    /* the model routes with an expert bias (moe_load_balance = "bias") that HF's Qwen3-MoE
     * cannot hold: the export says it leaves it out (also when m->moe_bias is nonzero) */
    int expert_bias;
} ckpt_export_opts;

#define CKPT_DEFAULT_SHARD_BYTES ((uint64_t)5000000000) /* "5GB", transformers 4's default */

/* Writes a Hugging Face model folder DIR (created if needed) from m's weights m->w:
 * config.json; the weights in opts->dtype under HF names, as transformers' save_pretrained
 * does: tensors in its state_dict order, split greedily into shards of at most
 * max_shard_bytes (a tensor larger than that alone), model.safetensors when one shard holds
 * everything, else model-0000i-of-0000n.safetensors + model.safetensors.index.json; each file's
 * tensors sorted by name, __metadata__ {"format": "pt"}; no lm_head for a tied model (so no
 * empty shard either). Then the tokenizer files and generation_config.json found in
 * opts->assets_dir, and stale weight files of an earlier export are removed. opts may be NULL. */
int ckpt_export_hf(const model *m, const char *dir, const ckpt_export_opts *opts, base_err *err);
/* "float32" / "fp32" / "F32", "bfloat16" / "bf16", "float16" / "fp16" / "half". */
int ckpt_export_dtype_parse(const char *s, ckpt_dtype *out);
/* A size as transformers writes it: "5GB", "200MB", "10KB" (decimal), "2GiB" (binary), or bytes. */
int ckpt_size_parse(const char *s, uint64_t *out);

/* Builds and loads a model from a Hugging Face folder: config.json -> arguments, then every
 * weight (ckpt_load_model_set, HF names). m is built with opts (batch, seq_len, ...). */
int ckpt_load_hf(model *m, const char *dir, const model_build_opts *opts, base_err *err);

/* ---- training checkpoints' model part, titan names (convert.c; reading the arguments:
 * source.c) ---------------------------------------------------------------------------- */

/* A folder with model.safetensors (every parameter, F32, titan names) and model_args.json
 * (the model arguments under their --set names, plus "flavor"). It is the model part of a
 * training checkpoint: the step-N/ layout points these two functions at its folder. */
int ckpt_train_save_model(const model *m, const char *dir, base_err *err);
int ckpt_train_load_model(model *m, const char *dir, const model_build_opts *opts, base_err *err);
int ckpt_train_read_args(const char *dir, model_args *a, base_err *err);

/* ---- model sources (source.c): where weights can be loaded from ------------------------
 * One resolver for `titan generate --model`, checkpoint.initial_load_path and `titan convert`:
 *   CKPT_SRC_STEP         a training checkpoint FOLDER/step-N (metadata.json), a checkpoint
 *                         folder (its newest complete step-N), or a run folder whose
 *                         checkpoint/ is one: arguments from metadata.json, weights from
 *                         buffer "model"
 *   CKPT_SRC_HF           a Hugging Face folder (config.json + model.safetensors or index)
 *   CKPT_SRC_TITAN_MODEL  a titan model folder (model_args.json + model.safetensors)
 *   CKPT_SRC_FILE         one .safetensors file (HF or titan names; no arguments in it) */
typedef enum { CKPT_SRC_FILE, CKPT_SRC_HF, CKPT_SRC_TITAN_MODEL, CKPT_SRC_STEP } ckpt_src_kind;
typedef struct {
    ckpt_src_kind kind;
    char path[4096];   /* the file or folder */
    char folder[4096]; /* STEP: the checkpoint folder */
    int64_t step;      /* STEP: N */
} ckpt_source;
int ckpt_source_open(ckpt_source *s, const char *path, base_err *err);
/* The model arguments the source describes (fails for a bare file). */
int ckpt_source_args(const ckpt_source *s, model_args *a, base_err *err);
/* What a training checkpoint's trainer state says for an HF export of it (one read of a STEP
 * source's metadata.json; a source of another kind says nothing). */
typedef struct {
    /* {bos, eos, pad} of the tokenizer the run used ("tokenizer": bos_token_id, eos_token_id,
     * pad_token_id; -1 for one it does not record); have_ids: it records any (not a checkpoint
     * written before they were recorded, nor a run on bytes or random tokens) */
    int32_t ids[3];
    int have_ids;
    int expert_bias; /* a nonzero MoE expert bias */
    /* the tokenizer folder the run recorded ("tokenizer".path): 1 when its tokenizer.json is
     * still the recorded one, 2 when it is gone or changed, 0 when there is no such record */
    int tokenizer;
    char tokenizer_dir[4096];
} ckpt_export_facts;
/* Fills *f; -1 for a value that is not what it should be (error naming the file and field). */
int ckpt_source_export_facts(const ckpt_source *s, ckpt_export_facts *f, base_err *err);
/* FNV-1a 64 of DIR/tokenizer.json's bytes (data_tok_fingerprint's value, which a checkpoint
 * records); -1 when unreadable. */
int ckpt_tokenizer_hash(const char *dir, uint64_t *h);
/* Loads every weight into base (m's layout), strictly (missing/unexpected/shape errors, a
 * step checkpoint's pieces overlapping or leaving a gap); on success every element of
 * base[0, m->n_floats) has been written (see ckpt_load_model_set). */
int ckpt_source_load(const ckpt_source *s, const model *m, float *base, base_err *err);
const char *ckpt_source_kind_name(ckpt_src_kind k);

/* ---- the command line's checkpoint commands (convert.c) ------------------------------ */

/* Prints model arguments and per-component parameter counts (titan inspect). */
void ckpt_print_model(const model_args *a);
/* titan inspect PATH: a .safetensors file, a config.json, a HF folder or a training
 * checkpoint folder; validates it and prints its tensors (name, dtype, shape), the model it
 * describes and its parameter count, checked against the tensors. */
int ckpt_inspect(const char *path, base_err *err);
/* titan convert SRC DST: an HF folder -> a training checkpoint folder, or a training
 * checkpoint -> an HF folder (opts: dtype, shard size, assets); the kind of SRC decides.
 * DST is locked while it is written (base_dir_lock_take): a folder a training run or another
 * convert is writing is refused, naming its PID. */
int ckpt_convert(const char *src, const char *dst, const ckpt_export_opts *opts, base_err *err);

/* ---- training checkpoints (src/checkpoint/step.c) -------------------------------------
 * FOLDER/step-N/ holds everything needed to continue a run exactly:
 *   rank-RRRRR.safetensors  one per rank: each named fp32 buffer's slice that rank owns, with
 *                           its place in the whole flat buffer in __metadata__:
 *                           "<name>.offset" and "<name>.global_numel"; a 1-D F32 tensor is a
 *                           contiguous range at offset, a 2-D F32 tensor [rows, row_len] is
 *                           strided: row i holds elements [offset + i * stride, + row_len)
 *                           with "<name>.stride" >= row_len (a TP rank's column slice of a
 *                           row-parallel [D, F] weight: one tensor, not one per row)
 *   metadata.json           {"format": "titan-checkpoint", "version": 3, "step": N,
 *                            "world_size": W, "shards": [...], "shard_headers": {...},
 *                            "train": {...}} where "train" is the trainer's own state
 *                           (schedule, data loader, RNG, args) and "shard_headers" each
 *                           shard's {"bytes", "header_crc32c"} (ckpt_step_check_shards)
 * Versions 2 (no shard identities) and 1 (also before strided pieces: 1-D tensors only, a
 * column slice written one row per tensor) are still read. A save writes into step-N.tmp/ (every
 * file fsynced), writes metadata.json last, fsyncs the folder and renames it to step-N: a step-N
 * folder with metadata.json is complete by construction, and nothing else is ever loaded. Because
 * pieces carry their offsets, a checkpoint written by W ranks loads into any other number of ranks
 * and any other TP split (ckpt_step_load gathers each wanted piece from every shard piece that
 * overlaps it, and fails naming the file and tensor for pieces that overlap each other or
 * leave the buffer, and naming the buffer and element where a wanted piece is not covered).
 * A rank whose slice is several pieces (FSDP: its shard of every unit; TP: its slice of every
 * tensor) writes them as buffers "NAME", "NAME@1", "NAME@2", ... (each with its own offset);
 * loading NAME reads all of them. */
typedef struct {
    const char *name; /* "model", "adam_m", ... */
    const void *data; /* save: this rank's slice (numel contiguous elements: float, or bf16) */
    void *dst;        /* load: where this rank's slice goes (numel contiguous elements) */
    size_t offset;    /* slice start within the whole buffer (elements) */
    size_t numel;     /* slice length: rows x (numel / rows) */
    size_t global_numel;
    size_t rows;      /* 0 or 1: contiguous; else numel / rows elements per row */
    size_t stride;    /* rows > 1: distance between row starts in the whole buffer */
    ckpt_dtype dtype; /* save: how the fp32 data is stored: CKPT_F32 (0, the default), or
                       * rounded to CKPT_BF16 / CKPT_F16 (the last model-only save in
                       * checkpoint.export_dtype); load: any of them, expanded to fp32 */
    int bf16;         /* data / dst hold bf16 bits (uint16_t), not floats (AdamW's moments
                       * in bf16): saved as BF16 as they are (dtype ignored); loaded from any
                       * stored dtype, BF16 as it is, F32 / F16 rounded to nearest even */
} ckpt_step_buf;

/* Save, in three parts so many ranks can share it: rank 0 creates step-N.tmp/ (removing one
 * left by a crash); every rank writes its shard; after all shards are written (a barrier
 * when distributed), rank 0 commits: metadata.json with train_json (a JSON object), fsync,
 * rename to step-N (ckpt_step_place), then prunes (ckpt_step_prune up to step N; keep_latest_k
 * 0 keeps all). Removal never follows a link: only real step-N folders holding a real
 * metadata.json are pruned (a link named step-N may be resumed from, and is only ever unlinked
 * when the same step is saved again), and a link inside a removed folder is unlinked, not
 * entered. */
int ckpt_step_begin(const char *folder, int64_t step, int rank, base_err *err);
int ckpt_step_write_shard(const char *folder, int64_t step, int rank, const ckpt_step_buf *bufs,
                          int n, base_err *err);
int ckpt_step_commit(const char *folder, int64_t step, int world, const char *train_json,
                     int keep_latest_k, base_err *err);
/* Puts folder/step-N.tmp (complete, its files fsynced) in place as step-N: fsyncs it, moves an
 * older step-N aside to step-N.old (ckpt_step_cleanup puts it back should the process die
 * before the next rename), renames, fsyncs folder and removes the old one, so step-N is
 * always the old folder or the new one whole. Every save ends with it, a checkpoint's and
 * titan train's checkpoint.last_save_in_hf export. */
int ckpt_step_place(const char *folder, int64_t step, base_err *err);
/* Deletes all but the newest keep_latest_k complete checkpoints of folder at or below step
 * upto (the one just saved; newer ones are an earlier run's, left by a load_step rewind: not
 * pruned, not counted). A deleted folder is renamed to step-N.deleting first. A folder that
 * cannot be removed (EBUSY, EACCES) is kept with a warning: the save itself is complete. */
void ckpt_step_prune(const char *folder, int keep_latest_k, int64_t upto);
/* Finishes what a killed run left in folder (rank 0, before the run's first save, with the
 * folder locked): step-N.deleting (a prune) and step-N.tmp (a save) are removed, step-N.old
 * (a re-save) is put back as step-N when that is missing and removed otherwise; each is
 * logged. A link named step-N is reported (never pruned). Symlink-safe, as every removal. */
int ckpt_step_cleanup(const char *folder, base_err *err);
/* The steps of folder's complete checkpoints, ascending, in *steps (malloc'ed; NULL when
 * *n = 0). */
int ckpt_step_list(const char *folder, int64_t **steps, int *n);
/* The newest complete checkpoint's step; -1 (and *step = -1) when there is none. */
int ckpt_step_latest(const char *folder, int64_t *step);
/* Whether folder's checkpoints can all be seen: the folder lists (or does not exist) and every
 * step-N's metadata.json that exists can be read (only step-`only` when only >= 0: a named
 * load_step). The listings above take what they cannot read for no checkpoint: a resume would
 * then go back to an older step, or start over and replace the checkpoints it could not read,
 * without a word. */
int ckpt_step_folder_check(const char *folder, int64_t only, base_err *err);
/* The newest step-N folder of folder that is NOT a complete titan checkpoint (no
 * metadata.json: another program's, such as torchtitan's DCP), or -1 (return -1) when none. */
int ckpt_step_foreign_latest(const char *folder, int64_t *step);
/* Validates step-N/metadata.json; *train_json (malloc'ed) is its "train" object. */
int ckpt_step_read_meta(const char *folder, int64_t step, char **train_json, int *world,
                        base_err *err);
/* Whether every shard of step-N is the one its metadata.json recorded: from version 3 on, each
 * shard's size and the CRC-32C of its header (which holds every tensor's own CRC-32C), so a
 * shard of another step or run copied into the folder is refused, naming it; earlier versions
 * record none (0). ckpt_step_load checks every shard it opens so. */
int ckpt_step_check_shards(const char *folder, int64_t step, base_err *err);
/* Fills each bufs[i].dst with its piece (offset, rows, stride) of buffer bufs[i].name; fails
 * unless the shards' pieces cover that piece exactly once (no gap, no overlap), so on success
 * every element of dst has been written. */
int ckpt_step_load(const char *folder, int64_t step, const ckpt_step_buf *bufs, int n,
                   base_err *err);

/* ---- Subcommands (checkpoint/cli.c) -----------------------------------------------------
 * titan inspect and titan convert: argv[1] is the subcommand, its options follow. They
 * return 0 or -1 with err filled; --help prints the usage to stdout and returns 0. */
int ckpt_cmd_inspect(int argc, char **argv, base_err *err);
void ckpt_cmd_inspect_usage(FILE *f);
int ckpt_cmd_convert(int argc, char **argv, base_err *err);
void ckpt_cmd_convert_usage(FILE *f);

#endif
