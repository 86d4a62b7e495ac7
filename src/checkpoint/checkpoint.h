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
 * data section is 8-byte aligned) and writes atomically ("<path>.tmp", fsync, rename). */
#ifndef TITAN_CHECKPOINT_H
#define TITAN_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "../base/base.h"
#include "../model/model.h"

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
    ckpt_kv *meta; /* __metadata__, strings owned by the file */
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

/* Scalar conversions (exposed for tests and for bf16 export). */
float ckpt_bf16_to_f32(uint16_t h);
float ckpt_f16_to_f32(uint16_t h);
uint16_t ckpt_f32_to_bf16(float x); /* round to nearest even; NaN stays NaN */
uint16_t ckpt_f32_to_f16(float x);  /* round to nearest even, overflow to inf, subnormals */

/* One tensor to write: raw little-endian elements of `dtype`, numel = product of shape; or,
 * with from_f32, fp32 values written as `dtype` (F32, BF16 or F16; round to nearest even),
 * converted a chunk at a time while writing. */
typedef struct {
    const char *name;
    ckpt_dtype dtype;
    int ndim;
    int64_t shape[CKPT_MAX_DIMS];
    const void *data;
    int from_f32;
} ckpt_wtensor;

/* Writes tensors in the given order (data contiguous, in that order) with optional
 * __metadata__ (n_meta may be 0), atomically: "<path>.tmp", fsync, rename. */
int ckpt_write(const char *path, const ckpt_wtensor *tensors, int n_tensors, const ckpt_kv *meta,
               int n_meta, base_err *err);
/* Writes n bytes to path atomically ("<path>.tmp", fsync, rename). */
int ckpt_write_bytes(const char *path, const void *buf, size_t n, base_err *err);

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

#endif
