/* Fuzz target: the safetensors reader (ckpt_open_mem), every element conversion of an
 * accepted file and its recorded checksums (ckpt_tensor_verify). See fuzz.h for the
 * contract. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/checkpoint.h"
#include "fuzz.h"

#define NAME "fuzz-input.safetensors"

static void broken(const char *what, const char *detail) {
    fprintf(stderr, "fuzz_safetensors: %s: %s\n", what, detail);
    abort();
}

int fuzz_target_run(const uint8_t *data, size_t size) {
    ckpt_file f;
    base_err err;
    err.msg[0] = 0;
    if (ckpt_open_mem(&f, NAME, data, size, &err) != 0) {
        if (!strstr(err.msg, NAME)) broken("rejection does not name the input", err.msg);
        if (f.tensors || f.map || f.n_tensors) broken("rejected file not cleared", err.msg);
        return 0;
    }
    for (int i = 0; i < f.n_tensors; i++) {
        const ckpt_tensor *t = &f.tensors[i];
        const uint8_t *p = t->data;
        if (p < data || p > data + size || t->nbytes > (size_t)(data + size - p))
            broken("accepted tensor outside the input", t->name);
        if ((size_t)t->numel * ckpt_dtype_size(t->dtype) != t->nbytes)
            broken("accepted tensor with inconsistent size", t->name);
        /* read every element (ASan sees any out-of-bounds byte) */
        double *out = malloc(((size_t)t->numel + 1) * sizeof(double));
        if (!out) broken("out of memory", t->name);
        if (ckpt_tensor_to_f64(&f, t, out, &err) != 0) broken("conversion failed", err.msg);
        if (ckpt_dtype_is_float(t->dtype) && ckpt_tensor_to_f32(&f, t, (float *)out, &err) != 0)
            broken("f32 conversion failed", err.msg);
        free(out);
        /* a recorded "<name>.crc32c" (any text) is checked or refused, never a crash */
        if (ckpt_tensor_verify(&f, t, &err) < 0 && !strstr(err.msg, NAME))
            broken("checksum rejection does not name the input", err.msg);
    }
    for (int i = 0; i < f.n_meta; i++)
        if (!f.meta[i].key || !f.meta[i].value) broken("metadata entry without text", NAME);
    ckpt_close(&f);
    return 1;
}

FUZZ_DEFINE_LIBFUZZER_ENTRY
