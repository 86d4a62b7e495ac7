/* Fuzz target: a Hugging Face config.json (ckpt_hf_config_read, what titan train, convert and
 * generate build a model from). An accepted config must write back (ckpt_hf_config_write, the
 * export's config.json) as a file that reads back to the same model arguments. See fuzz.h
 * for the contract. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint/checkpoint.h"
#include "fuzz.h"

static char path[256], back_path[256];

static void cleanup(void) {
    unlink(path);
    unlink(back_path);
}

static void broken(const char *what, const char *detail) {
    fprintf(stderr, "fuzz_hf_config: %s: %s\n", what, detail);
    abort();
}

int fuzz_target_run(const uint8_t *data, size_t size) {
    if (!path[0]) {
        snprintf(path, sizeof path, "/tmp/titan_fuzz_hf_config_%d.json", (int)getpid());
        snprintf(back_path, sizeof back_path, "/tmp/titan_fuzz_hf_config_%d.back.json",
                 (int)getpid());
        atexit(cleanup);
    }
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size)) broken("cannot write", path);
    fclose(f);
    base_err err;
    err.msg[0] = 0;
    model_args a;
    if (ckpt_hf_config_read(path, &a, &err) != 0) {
        if (!strstr(err.msg, path) && strcmp(err.msg, "out of memory") != 0)
            broken("rejection does not name the file", err.msg);
        return 0;
    }
    if (model_args_validate(&a, &err) != 0) broken("accepted arguments do not validate", err.msg);
    const int32_t ids[3] = {1, 2, -1};
    if (ckpt_hf_config_write(&a, CKPT_BF16, ids, back_path, &err) != 0)
        broken("cannot write the config back", err.msg);
    model_args b;
    if (ckpt_hf_config_read(back_path, &b, &err) != 0)
        broken("the written config does not read back", err.msg);
    /* max_seq_len 0 (max_position_embeddings absent or 0) is written as 4096 */
    if (!model_args_equal(&a, &b) || (a.max_seq_len && a.max_seq_len != b.max_seq_len) ||
        strcmp(a.flavor, b.flavor))
        broken("the written config reads back to other arguments", back_path);
    return 1;
}

FUZZ_DEFINE_LIBFUZZER_ENTRY
