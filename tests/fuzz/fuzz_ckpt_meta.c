/* Fuzz target: a training checkpoint's step-N/metadata.json as a resume reads it: the file
 * (ckpt_step_read_meta, through train_step_state), the trainer's state in "train"
 * (train_state_check), its model (train_model_check against the debugmodel flavor), its MoE
 * expert bias (train_moe_bias_load into a 2-layer, 4-expert model) and the data-loader
 * position (train_loader_state_restore into a loader of two small text files, dp 1 of 1, or
 * dp rank 1 of 2 when train.data_loaders is an array; then a few batches from there). The
 * input is the metadata.json of step-1; the 16-byte placeholders FUZZFINGERPRINT1 /
 * FUZZFINGERPRINT2 and FUZZCONTENTHASH0 in it are replaced by the test loader's fingerprint
 * (dp 1 of 1 / 1 of 2) and its first file's content hash, so seeds can hold a position that
 * fits. Every rejection must name step-1. See fuzz.h for the contract. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz.h"
#include "train/internal.h"

static char dir[256], step_dir[300], meta[340], data_dir[300], text_a[340], text_b[340];
static char fp_hex[2][17], content_hex[17];

static void cleanup(void) {
    unlink(meta);
    rmdir(step_dir);
    unlink(text_a);
    unlink(text_b);
    rmdir(data_dir);
    rmdir(dir);
}

static void broken(const char *what, const char *detail) {
    fprintf(stderr, "fuzz_ckpt_meta: %s: %s\n", what, detail);
    abort();
}

static void put(const char *p, const void *data, size_t n) {
    FILE *f = fopen(p, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n)) broken("cannot write", p);
    fclose(f);
}

static data_loader *open_loader(int dp_rank, int dp_size) {
    data_loader_cfg c = {0};
    c.path = data_dir;
    c.format = DATA_FMT_TEXT;
    c.enc.vocab_size = 1 << 20;
    c.seq_len = 5;
    c.batch = 2;
    c.dp_rank = dp_rank;
    c.dp_size = dp_size;
    c.infinite = 1;
    base_err err;
    data_loader *l = NULL;
    if (data_loader_open(&l, &c, &err) != 0) broken("cannot open the test dataset", err.msg);
    return l;
}

static void setup(void) {
    base_log_set_level(BASE_LOG_ERROR);
    snprintf(dir, sizeof dir, "/tmp/titan_fuzz_ckpt_meta_%d", (int)getpid());
    snprintf(step_dir, sizeof step_dir, "%s/step-1", dir);
    snprintf(meta, sizeof meta, "%s/metadata.json", step_dir);
    snprintf(data_dir, sizeof data_dir, "%s/data", dir);
    snprintf(text_a, sizeof text_a, "%s/a.txt", data_dir);
    snprintf(text_b, sizeof text_b, "%s/b.txt", data_dir);
    mkdir(dir, 0700);
    mkdir(step_dir, 0700);
    mkdir(data_dir, 0700);
    atexit(cleanup);
    static const char a[] = "First paragraph, a few words.\n\nSecond one\nwith two lines.\n\n\n"
                            "Third \xc3\xa9t\xc3\xa9.\n";
    static const char b[] = "Another file.\r\n\r\nIts second paragraph.\n\nx\n\ny";
    put(text_a, a, strlen(a));
    put(text_b, b, strlen(b));
    for (int k = 0; k < 2; k++) {
        data_loader *l = open_loader(k, k + 1);
        data_loader_state s;
        data_loader_get_state(l, &s);
        snprintf(fp_hex[k], sizeof fp_hex[k], "%016llx", (unsigned long long)s.fingerprint);
        if (k == 0)
            snprintf(content_hex, sizeof content_hex, "%016llx", (unsigned long long)s.content);
        data_loader_free(l);
    }
}

static void replace_all(uint8_t *d, size_t n, const char *from, const char *to) {
    for (uint8_t *p = d; (p = memmem(p, n - (size_t)(p - d), from, 16)); p += 16) memcpy(p, to, 16);
}

/* A rejection must name the checkpoint's step folder. */
static int rejected(const base_err *err) {
    if (!strstr(err->msg, step_dir) && strcmp(err->msg, "out of memory") != 0)
        broken("rejection does not name the checkpoint", err->msg);
    return 0;
}

int fuzz_target_run(const uint8_t *data, size_t size) {
    if (!dir[0]) setup();
    uint8_t *d = malloc(size ? size : 1);
    memcpy(d, data, size);
    replace_all(d, size, "FUZZFINGERPRINT1", fp_hex[0]);
    replace_all(d, size, "FUZZFINGERPRINT2", fp_hex[1]);
    replace_all(d, size, "FUZZCONTENTHASH0", content_hex);
    put(meta, d, size);
    free(d);
    base_err err;
    err.msg[0] = 0;
    json_t *t = train_step_state(dir, 1, &err);
    if (!t) return rejected(&err);
    model_args run;
    if (model_flavor("debugmodel", &run, &err) != 0) broken("no debugmodel flavor", err.msg);
    if (train_state_check(t, dir, 1, &err) || train_model_check(t, &run, dir, 1, &err)) {
        json_decref(t);
        return rejected(&err);
    }
    model m;
    memset(&m, 0, sizeof m);
    float bias[8];
    m.args = run;
    m.args.n_layers = 2;
    m.args.n_experts = 4;
    m.moe_bias = bias;
    if (train_moe_bias_load(&m, t, meta, &err)) {
        json_decref(t);
        return rejected(&err);
    }
    const json_t *dls = json_object_get(t, "data_loaders");
    const int dp = json_is_array(dls) ? 2 : 1;
    data_loader *l = open_loader(dp - 1, dp);
    int rc = train_loader_state_restore(t, l, dp - 1, dp, dir, 1, &err);
    json_decref(t);
    int32_t x[10], y[10];
    for (int b = 0; rc == 0 && b < 8; b++) {
        int got = data_loader_next(l, x, y, &err);
        if (got != 1) broken("no batch after a restored position", err.msg);
        for (int i = 0; i < 10; i++)
            if (x[i] < 0 || x[i] >= 1 << 20 || y[i] < 0 || y[i] >= 1 << 20)
                broken("id outside the vocabulary", "");
    }
    data_loader_free(l);
    return rc == 0 ? 1 : rejected(&err);
}

FUZZ_DEFINE_LIBFUZZER_ENTRY
