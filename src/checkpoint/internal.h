/* Private to the checkpoint module. */
#ifndef TITAN_CHECKPOINT_INTERNAL_H
#define TITAN_CHECKPOINT_INTERNAL_H

#include <jansson.h>

#include "checkpoint/checkpoint.h"

/* The model arguments file of a titan model folder (ckpt_train_save_model, source.c). */
#define CKPT_ARGS_FILE "model_args.json"

/* Writes v to path atomically as Python's json.dumps(v, indent=2, sort_keys=True) + "\n"
 * would (the layout transformers uses for config.json and model.safetensors.index.json),
 * reals with the fewest digits that read back exactly. */
int ckpt_write_json(const char *path, json_t *v, base_err *err);

/* Builds m from a (with opts, parameters not zeroed) and loads every weight from s, after
 * checking s holds exactly the model's tensors with its shapes (before allocating); closes s. */
int ckpt_build_from_set(model *m, const model_args *a, ckpt_set *s, ckpt_names names,
                        const model_build_opts *opts, base_err *err);

/* A CRC-32C as titan's files record it: exactly 8 hex digits (a tensor's "<name>.crc32c", a
 * shard's "header_crc32c"); 0 and *out set, or -1. */
int ckpt_hex32(const char *s, uint32_t *out);

/* [begin, end) of a range that one piece claims; idx: the caller's tag for the piece. */
typedef struct {
    uint64_t begin, end;
    int idx;
} ckpt_span;

typedef enum { CKPT_SPANS_OK, CKPT_SPANS_GAP, CKPT_SPANS_OVERLAP, CKPT_SPANS_SHORT } ckpt_spans;
/* Sorts s[n] by (begin, end, idx) and checks that they tile [begin, end) exactly. On a fault,
 * *at is the piece it is found at (GAP: it begins after, OVERLAP: before, *cursor, where the
 * pieces before it end); SHORT: the pieces end at *cursor, before `end`. */
ckpt_spans ckpt_spans_tile(ckpt_span *s, size_t n, uint64_t begin, uint64_t end, size_t *at,
                           uint64_t *cursor);

#endif
