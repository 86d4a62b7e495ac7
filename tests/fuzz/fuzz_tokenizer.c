/* Fuzz target: loading a tokenizer folder (tokenizer.json and tokenizer_config.json), then
 * encoding and decoding with whatever was accepted. The input is tokenizer.json, optionally
 * followed by "\n@@config@@\n" and tokenizer_config.json. See fuzz.h for the contract. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/data.h"
#include "fuzz.h"

#define SEP "\n@@config@@\n"

static char dir[256], tok_path[300], cfg_path[300];

static void cleanup(void) {
    unlink(tok_path);
    unlink(cfg_path);
    rmdir(dir);
}

static void broken(const char *what, const char *detail) {
    fprintf(stderr, "fuzz_tokenizer: %s: %s\n", what, detail);
    abort();
}

static void put(const char *p, const uint8_t *data, size_t n) {
    FILE *f = fopen(p, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n)) broken("cannot write", p);
    fclose(f);
}

int fuzz_target_run(const uint8_t *data, size_t size) {
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/titan_fuzz_tokenizer_%d", (int)getpid());
        snprintf(tok_path, sizeof tok_path, "%s/tokenizer.json", dir);
        snprintf(cfg_path, sizeof cfg_path, "%s/tokenizer_config.json", dir);
        mkdir(dir, 0700);
        atexit(cleanup);
    }
    const uint8_t *sep = memmem(data, size, SEP, strlen(SEP));
    put(tok_path, data, sep ? (size_t)(sep - data) : size);
    if (sep) {
        const uint8_t *c = sep + strlen(SEP);
        put(cfg_path, c, size - (size_t)(c - data));
    } else {
        unlink(cfg_path);
    }
    data_tok *t = NULL;
    base_err err;
    err.msg[0] = 0;
    if (data_tok_load(dir, &t, &err) != 0) {
        if (!strstr(err.msg, dir) && strcmp(err.msg, "out of memory") != 0)
            broken("rejection does not name the file", err.msg);
        return 0;
    }
    static const char *const texts[] = {
        "Hello world! It's 2024, DON'T   stop.\n\n\ttabs",
        "<|im_start|>user\nhi<|im_end|><|endoftext|>",
        "\xe6\xbc\xa2\xe5\xad\x97 \xf0\x9f\x99\x82 e\xcc\x81 \xc3\xa9",
        "bad \xff\xfe utf8 \xc0\xaf \xed\xa0\x80 end", ""};
    const int32_t V = data_tok_vocab_size(t);
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
        data_tok_ids ids = {0};
        if (data_tok_encode(t, texts[i], strlen(texts[i]), &ids, &err) != 0)
            broken("encode failed", err.msg);
        for (size_t k = 0; k < ids.n; k++)
            if (ids.ids[k] < 0 || ids.ids[k] >= V) broken("encode gave an id out of range", "");
        char *out = NULL;
        size_t len;
        for (int skip = 0; skip < 2; skip++) {
            if (data_tok_decode(t, ids.ids, ids.n, skip, &out, &len, &err) != 0)
                broken("decode of encoded ids failed", err.msg);
            free(out);
        }
        data_tok_ids_free(&ids);
    }
    for (int32_t id = 0; id < V && id < 4096; id++) { /* every id decodes or is refused */
        char *out = NULL;
        size_t len;
        if (data_tok_decode(t, &id, 1, 0, &out, &len, &err) == 0) free(out);
        (void)data_tok_token(t, id);
    }
    (void)data_tok_bos_id(t);
    data_tok_free(t);
    return 1;
}

FUZZ_DEFINE_LIBFUZZER_ENTRY
