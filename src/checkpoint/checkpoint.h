/* checkpoint: a single-file safetensors reader and writer, and loading / saving the
 * parameters (or gradients) of a titan model under their Hugging Face names.
 *
 * safetensors layout: u64 little-endian header length n, n bytes of JSON
 *   {"__metadata__": {str: str}, "<name>": {"dtype": "F32", "shape": [..],
 *    "data_offsets": [begin, end]}, ...}
 * then the data section; offsets are relative to its start. The reader treats the file as
 * hostile: every size, offset and shape is checked (the tensors must cover the data section
 * exactly, without gaps or overlaps), and every error names the file and the tensor or field.
 * The writer pads the header with spaces to a multiple of 8 bytes (so the data section is
 * 8-byte aligned) and writes atomically ("<path>.tmp", fsync, rename). */
#ifndef TITAN_CHECKPOINT_H
#define TITAN_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "../base/base.h"
#include "../model/model.h"

#define CKPT_MAX_DIMS 8

typedef enum {
    CKPT_F32,
    CKPT_F64,
    CKPT_I32,
    CKPT_I64,
    CKPT_BF16,
    CKPT_F16,
    CKPT_DTYPE_COUNT
} ckpt_dtype;

/* "F32", "F64", "I32", "I64", "BF16", "F16". */
const char *ckpt_dtype_name(ckpt_dtype d);
size_t ckpt_dtype_size(ckpt_dtype d);
/* Parses a dtype name; -1 when unknown. */
int ckpt_dtype_parse(const char *s, ckpt_dtype *out);

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
    unsigned char *map; /* read-only mapping of the whole file */
    size_t size;
    int n_tensors; /* in header order */
    ckpt_tensor *tensors;
    int n_meta;
    ckpt_kv *meta; /* __metadata__, strings owned by the file */
} ckpt_file;

/* Maps and validates a safetensors file. On failure *f is left empty (ckpt_close is safe). */
int ckpt_open(ckpt_file *f, const char *path, base_err *err);
void ckpt_close(ckpt_file *f);

const ckpt_tensor *ckpt_find(const ckpt_file *f, const char *name);
/* The __metadata__ value for key, or NULL. */
const char *ckpt_meta_get(const ckpt_file *f, const char *key);

/* Converts a tensor of a floating dtype (F32, F64, BF16, F16) into out[t->numel]. */
int ckpt_tensor_to_f32(const ckpt_file *f, const ckpt_tensor *t, float *out, base_err *err);
/* Converts any floating or integer tensor into out[t->numel] as double. */
int ckpt_tensor_to_f64(const ckpt_file *f, const ckpt_tensor *t, double *out, base_err *err);
/* Converts an I64 or I32 tensor into out[t->numel]; values must fit in int32. */
int ckpt_tensor_to_i32(const ckpt_file *f, const ckpt_tensor *t, int32_t *out, base_err *err);

/* Look up `name` and return a freshly base_alloc'ed converted copy (base_free it), or NULL
 * with err filled (missing tensor, wrong dtype, out-of-range value). *numel (if non-NULL)
 * receives the element count. */
float *ckpt_get_f32(const ckpt_file *f, const char *name, int64_t *numel, base_err *err);
double *ckpt_get_f64(const ckpt_file *f, const char *name, int64_t *numel, base_err *err);
int32_t *ckpt_get_i32(const ckpt_file *f, const char *name, int64_t *numel, base_err *err);

/* Scalar conversions (exposed for tests and for bf16 export). */
float ckpt_bf16_to_f32(uint16_t h);
float ckpt_f16_to_f32(uint16_t h);
uint16_t ckpt_f32_to_bf16(float x); /* round to nearest even; NaN stays NaN */

/* One tensor to write: raw little-endian elements of `dtype`, numel = product of shape. */
typedef struct {
    const char *name;
    ckpt_dtype dtype;
    int ndim;
    int64_t shape[CKPT_MAX_DIMS];
    const void *data;
} ckpt_wtensor;

/* Writes tensors in the given order (data contiguous, in that order) with optional
 * __metadata__ (n_meta may be 0), atomically: "<path>.tmp", fsync, rename. */
int ckpt_write(const char *path, const ckpt_wtensor *tensors, int n_tensors, const ckpt_kv *meta,
               int n_meta, base_err *err);

/* ---- model parameters under Hugging Face names (src/checkpoint/hf_params.c) ---------- */

/* Loads every parameter of m from the safetensors file at path into base (m->w, or any
 * buffer with the same layout), converting F32/F64/BF16/F16 to fp32. The file must hold
 * exactly the model's tensors under their HF names with matching shapes; all missing keys,
 * unexpected keys and shape mismatches are listed in one error. For a tied model, a
 * "lm_head.weight" in the file is accepted only if it equals "model.embed_tokens.weight". */
int ckpt_load_model(const model *m, float *base, const char *path, base_err *err);
/* Same, from an already opened file. */
int ckpt_load_model_file(const model *m, float *base, const ckpt_file *f, base_err *err);
/* Writes every parameter of m, read from base (m->w for weights, m->g for gradients), as F32
 * under its HF name in layout order (the tied lm_head is not written), with optional
 * __metadata__. */
int ckpt_save_model(const model *m, const float *base, const char *path, const ckpt_kv *meta,
                    int n_meta, base_err *err);

/* Writes a Hugging Face model folder: DIR/config.json (Qwen3ForCausalLM, the fields that
 * define the math) and DIR/model.safetensors (F32, HF names, no lm_head when tied), creating
 * DIR if needed. Full HF interop (sharding, dtypes, tokenizer files) is a later issue. */
int ckpt_export_hf(const model *m, const char *dir, base_err *err);

/* ---- training checkpoints (src/checkpoint/step.c) -------------------------------------
 * FOLDER/step-N/ holds everything needed to continue a run exactly:
 *   rank-RRRRR.safetensors  one per rank: each named fp32 buffer's slice that rank owns, as a
 *                           1-D F32 tensor, with __metadata__ "<name>.offset" and
 *                           "<name>.global_numel" (the slice's place in the whole buffer)
 *   metadata.json           {"format": "titan-checkpoint", "version": 1, "step": N,
 *                            "world_size": W, "shards": [...], "train": {...}} where "train"
 *                           is the trainer's own state (schedule, data loader, RNG, args)
 * A save writes into step-N.tmp/ (every file fsynced), writes metadata.json last, fsyncs the
 * folder and renames it to step-N: a step-N folder with metadata.json is complete by
 * construction, and nothing else is ever loaded. Because slices carry their offsets, a
 * checkpoint written by W ranks loads into any other number of ranks (ckpt_step_load
 * gathers each wanted range from every shard that overlaps it). */
typedef struct {
    const char *name;  /* "model", "adam_m", ... */
    const float *data; /* save: this rank's slice */
    float *dst;        /* load: where this rank's slice goes */
    size_t offset;     /* slice start within the whole buffer (elements) */
    size_t numel;      /* slice length */
    size_t global_numel;
} ckpt_step_buf;

/* Save, in three parts so many ranks can share it: rank 0 creates step-N.tmp/ (removing one
 * left by a crash); every rank writes its shard; after all shards are written (a barrier
 * when distributed), rank 0 commits: metadata.json with train_json (a JSON object), fsync,
 * rename to step-N, then deletes all but the newest keep_latest_k complete checkpoints
 * (0 = keep all; deleted folders are renamed away first). */
int ckpt_step_begin(const char *folder, int64_t step, int rank, base_err *err);
int ckpt_step_write_shard(const char *folder, int64_t step, int rank, const ckpt_step_buf *bufs,
                          int n, base_err *err);
int ckpt_step_commit(const char *folder, int64_t step, int world, const char *train_json,
                     int keep_latest_k, base_err *err);
int ckpt_step_prune(const char *folder, int keep_latest_k, base_err *err);
/* The newest complete checkpoint's step; -1 (and *step = -1) when there is none. */
int ckpt_step_latest(const char *folder, int64_t *step);
/* Validates step-N/metadata.json; *train_json (malloc'ed) is its "train" object. */
int ckpt_step_read_meta(const char *folder, int64_t step, char **train_json, int *world,
                        base_err *err);
/* Fills each bufs[i].dst with elements [offset, offset + numel) of buffer bufs[i].name. */
int ckpt_step_load(const char *folder, int64_t step, const ckpt_step_buf *bufs, int n,
                   base_err *err);

#endif
