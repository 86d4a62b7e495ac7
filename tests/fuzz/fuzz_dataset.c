/* Fuzz target: the dataset readers behind the packing loader (token shard header, offsets and
 * ids; JSON Lines, strict and skipping bad lines; plain text). The first input byte picks the
 * format (mod 4: tokens, jsonl, jsonl with skip_bad_lines, text), the rest is the file. See
 * fuzz.h for the contract. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/data.h"
#include "fuzz.h"

static char path[256];

static void cleanup(void) {
    unlink(path);
}

static void broken(const char *what, const char *detail) {
    fprintf(stderr, "fuzz_dataset: %s: %s\n", what, detail);
    abort();
}

int fuzz_target_run(const uint8_t *data, size_t size) {
    if (!path[0]) {
        snprintf(path, sizeof path, "/tmp/titan_fuzz_dataset_%d.input", (int)getpid());
        atexit(cleanup);
        base_log_set_level(BASE_LOG_ERROR);
    }
    if (size < 1) return 0;
    static const data_format formats[4] = {DATA_FMT_TOKENS, DATA_FMT_JSONL, DATA_FMT_JSONL,
                                           DATA_FMT_TEXT};
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data + 1, 1, size - 1, f) != size - 1) broken("cannot write", path);
    fclose(f);
    data_loader_cfg c = {0};
    c.path = path;
    c.format = formats[data[0] % 4];
    c.skip_bad_lines = data[0] % 4 == 2;
    c.enc.vocab_size = 1 << 20;
    c.seq_len = 3;
    c.batch = 2;
    c.dp_size = 1;
    c.infinite = 0;
    c.doc_shift = data[0] >> 2 & 1; /* document masking's packing, with positions */
    base_err err;
    err.msg[0] = 0;
    data_loader *l = NULL;
    int rc = data_loader_open(&l, &c, &err);
    int32_t x[6], y[6], pos[6];
    for (int b = 0; rc == 0 && b < 4096; b++) {
        /* document positions: runs of 0, 1, 2 within each window */
        int got = data_loader_next(l, x, y, c.doc_shift ? pos : NULL, &err);
        if (got < 0) rc = -1;
        if (got <= 0) break;
        for (int i = 0; i < 6; i++) {
            if (x[i] < 0 || x[i] >= c.enc.vocab_size || y[i] < 0 || y[i] >= c.enc.vocab_size)
                broken("id outside the vocabulary", path);
            if (c.doc_shift &&
                (pos[i] < 0 || pos[i] > i % 3 || (i % 3 && pos[i] && pos[i] != pos[i - 1] + 1)))
                broken("document positions are not runs from 0", path);
        }
    }
    if (rc == 0) { /* the state must restore into the same loader */
        data_loader_state s;
        data_loader_get_state(l, &s);
        if (data_loader_set_state(l, &s, &err) != 0) broken("own state refused", err.msg);
    }
    data_loader_free(l);
    if (rc != 0 && !strstr(err.msg, path) && strcmp(err.msg, "out of memory") != 0)
        broken("rejection does not name the input", err.msg);
    return rc == 0;
}

FUZZ_DEFINE_LIBFUZZER_ENTRY
