/* Fuzz target: a training checkpoint's step-N/metadata.json as a resume reads it: the file
 * (ckpt_step_read_meta, through train_step_state), the trainer's state in "train"
 * (train_state_check), its model (train_model_check against the debugmodel flavor), its MoE
 * expert bias (train_moe_bias_load into a 2-layer, 4-expert model) and the data-loader
 * position (train_loader_state_restore, dp 1 of 1, or dp rank 1 of 2 when train.data_loaders
 * is an array; then a few batches from there) into a dataset of two small files: text, JSON
 * Lines or token shards. The input is the metadata.json of step-1. So that seeds can hold a
 * position that fits, 16-byte placeholders in it are replaced: FUZZFINGERPRINTx by the
 * fingerprint of the test loader x (1 / 2: text, dp 1 of 1 / 1 of 2; J / K: JSON Lines; T / U:
 * token shards) and FUZZCONTENTHASHx (0 text, J, T) by the content hash of its first file; the
 * first FUZZFINGERPRINTx also picks the dataset (text when there is none). A resume on a
 * dataset that grew takes the state's growth fields where the fingerprint differs:
 * FUZZGROWTHSETUPx (tags as the fingerprint's) is loader x's "setup", FUZZNAMEOFFILE0x (0, J,
 * T) the first file's "name" (its "before" is the empty chain, written as it is, and its "size"
 * the file's); the first FUZZGROWTHSETUPx picks the dataset too. Every rejection must name step-1.
 * See fuzz.h for the contract. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz.h"
#include "train/internal.h"

enum { TEXT, JSONL, TOKENS, N_SETS };
static const char set_name[N_SETS][8] = {"text", "jsonl", "tokens"};
static const data_format set_format[N_SETS] = {DATA_FMT_TEXT, DATA_FMT_JSONL, DATA_FMT_TOKENS};
static const char fp_tag[N_SETS][2] = {{'1', '2'}, {'J', 'K'}, {'T', 'U'}};
static const char content_tag[N_SETS] = {'0', 'J', 'T'};

static char dir[128], step_dir[160], meta[192], set_dir[N_SETS][160], files[N_SETS][2][192];
static char fp_hex[N_SETS][2][17], content_hex[N_SETS][17], setup_hex[N_SETS][2][17],
    name_hex[N_SETS][17];

static void cleanup(void) {
    unlink(meta);
    rmdir(step_dir);
    for (int k = 0; k < N_SETS; k++) {
        unlink(files[k][0]);
        unlink(files[k][1]);
        rmdir(set_dir[k]);
    }
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

/* A version 1 token shard (src/data/data.h): a 48-byte header, the uint32 ids (padded to 8
 * bytes), the n_docs + 1 uint64 document offsets. Vocabulary 300, no bos, eos 299. */
static void put_shard(const char *p, const uint32_t *ids, const uint64_t *offs, uint64_t n_docs) {
    const uint64_t n_ids = offs[n_docs];
    const size_t n = 48 + (size_t)(n_ids + n_ids % 2) * 4 + (size_t)(n_docs + 1) * 8;
    uint8_t *b = calloc(1, n);
    const uint32_t version = 1, dtype = 1;
    const int32_t vocab = 300, bos = -1, eos = 299;
    memcpy(b, "TITANTOK", 8);
    memcpy(b + 8, &version, 4);
    memcpy(b + 12, &dtype, 4);
    memcpy(b + 16, &n_docs, 8);
    memcpy(b + 24, &n_ids, 8);
    memcpy(b + 32, &vocab, 4);
    memcpy(b + 36, &bos, 4);
    memcpy(b + 40, &eos, 4);
    memcpy(b + 48, ids, (size_t)n_ids * 4);
    memcpy(b + 48 + (n_ids + n_ids % 2) * 4, offs, (size_t)(n_docs + 1) * 8);
    put(p, b, n);
    free(b);
}

/* The loader settings of dataset `set` on data-parallel rank dp_rank of dp_size. */
static data_loader_cfg loader_cfg(int set, int dp_rank, int dp_size) {
    data_loader_cfg c = {0};
    c.path = set_dir[set];
    c.format = set_format[set];
    c.enc.vocab_size = 1 << 20;
    c.seq_len = 5;
    c.batch = 2;
    c.dp_rank = dp_rank;
    c.dp_size = dp_size;
    c.infinite = 1;
    return c;
}

static data_loader *open_loader(int set, int dp_rank, int dp_size) {
    const data_loader_cfg c = loader_cfg(set, dp_rank, dp_size);
    base_err err;
    data_loader *l = NULL;
    if (data_loader_open(&l, &c, &err) != 0) broken("cannot open the test dataset", err.msg);
    return l;
}

/* The same dataset as the trainer opens it: a mixture of n_src sources, each this set. */
static data_mix *open_mix(int set, int dp_rank, int dp_size, int n_src) {
    const char *paths[4] = {set_dir[set], set_dir[set], set_dir[set], set_dir[set]};
    const data_mix_cfg mc = {
        .loader = loader_cfg(set, dp_rank, dp_size), .paths = paths, .n = n_src, .seed = 42};
    base_err err;
    data_mix *l = NULL;
    if (data_mix_open(&l, &mc, &err) != 0) broken("cannot open the test dataset", err.msg);
    return l;
}

static void setup(void) {
    base_log_set_level(BASE_LOG_ERROR);
    snprintf(dir, sizeof dir, "/tmp/titan_fuzz_ckpt_meta_%d", (int)getpid());
    snprintf(step_dir, sizeof step_dir, "%s/step-1", dir);
    snprintf(meta, sizeof meta, "%s/metadata.json", step_dir);
    mkdir(dir, 0700);
    mkdir(step_dir, 0700);
    atexit(cleanup);
    for (int k = 0; k < N_SETS; k++) {
        snprintf(set_dir[k], sizeof set_dir[k], "%s/%s", dir, set_name[k]);
        mkdir(set_dir[k], 0700);
        for (int i = 0; i < 2; i++)
            snprintf(files[k][i], sizeof files[k][i], "%s/%c.%s", set_dir[k], 'a' + i,
                     k == TEXT    ? "txt"
                     : k == JSONL ? "jsonl"
                                  : "bin");
    }
    /* text: paragraphs start at bytes 0, 31, 60 of a.txt and 0, 17, 40, 43 of b.txt */
    static const char ta[] = "First paragraph, a few words.\n\nSecond one\nwith two lines.\n\n\n"
                             "Third \xc3\xa9t\xc3\xa9.\n";
    static const char tb[] = "Another file.\r\n\r\nIts second paragraph.\n\nx\n\ny";
    /* JSON Lines: lines start at bytes 0, 22, 23 of a.jsonl and 0, 13 of b.jsonl */
    static const char ja[] =
        "{\"text\": \"first doc\"}\n\n{\"text\": \"s\\u00e9cond\", \"x\": 1}\n";
    static const char jb[] = "{\"text\": \"\"}\n{\"text\": \"last one\"}";
    put(files[TEXT][0], ta, strlen(ta));
    put(files[TEXT][1], tb, strlen(tb));
    put(files[JSONL][0], ja, strlen(ja));
    put(files[JSONL][1], jb, strlen(jb));
    static const uint32_t ids_a[] = {1, 2, 3, 10, 20, 30, 40, 50, 298};
    static const uint64_t offs_a[] = {0, 3, 3, 8, 9}; /* 4 documents, one empty */
    static const uint32_t ids_b[] = {7, 8, 9, 11, 12};
    static const uint64_t offs_b[] = {0, 2, 5};
    put_shard(files[TOKENS][0], ids_a, offs_a, 4);
    put_shard(files[TOKENS][1], ids_b, offs_b, 2);
    for (int k = 0; k < N_SETS; k++)
        for (int dp = 1; dp <= 2; dp++) {
            data_loader *l = open_loader(k, dp - 1, dp);
            data_loader_state s;
            data_loader_get_state(l, &s);
            snprintf(fp_hex[k][dp - 1], 17, "%016llx", (unsigned long long)s.fingerprint);
            snprintf(setup_hex[k][dp - 1], 17, "%016llx", (unsigned long long)s.setup);
            if (dp == 1) snprintf(content_hex[k], 17, "%016llx", (unsigned long long)s.content);
            if (dp == 1) snprintf(name_hex[k], 17, "%016llx", (unsigned long long)s.name);
            data_loader_free(l);
        }
}

/* Replaces the placeholders in d[n]; returns the dataset the first fingerprint (or growth
 * setup) one names. */
static int fill_placeholders(uint8_t *d, size_t n) {
    int set = -1;
    for (uint8_t *p = d; (p = memmem(p, n - (size_t)(p - d), "FUZZ", 4)) && p + 16 <= d + n; p++) {
        for (int k = 0; k < N_SETS; k++) {
            for (int i = 0; i < 2; i++)
                if (!memcmp(p, "FUZZFINGERPRINT", 15) && p[15] == (uint8_t)fp_tag[k][i]) {
                    if (set < 0) set = k;
                    memcpy(p, fp_hex[k][i], 16);
                } else if (!memcmp(p, "FUZZGROWTHSETUP", 15) && p[15] == (uint8_t)fp_tag[k][i]) {
                    if (set < 0) set = k;
                    memcpy(p, setup_hex[k][i], 16);
                }
            if (!memcmp(p, "FUZZCONTENTHASH", 15) && p[15] == (uint8_t)content_tag[k])
                memcpy(p, content_hex[k], 16);
            if (!memcmp(p, "FUZZNAMEOFFILE0", 15) && p[15] == (uint8_t)content_tag[k])
                memcpy(p, name_hex[k], 16);
        }
    }
    return set < 0 ? TEXT : set;
}

/* A rejection must name the checkpoint's step folder. */
static int rejected(const base_err *err) {
    if (!strstr(err->msg, step_dir) && strcmp(err->msg, "out of memory") != 0)
        broken("rejection does not name the checkpoint", err->msg);
    if (getenv("FUZZ_VERBOSE")) fprintf(stderr, "rejected: %s\n", err->msg);
    return 0;
}

int fuzz_target_run(const uint8_t *data, size_t size) {
    if (!dir[0]) setup();
    uint8_t *d = malloc(size ? size : 1);
    memcpy(d, data, size);
    const int set = fill_placeholders(d, size);
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
    /* a mixture's position (its "sources") is restored into a mixture of as many, up to 4 */
    const json_t *dl = json_object_get(t, dp > 1 ? "data_loaders" : "data_loader");
    if (dp > 1) dl = json_array_get(dl, (size_t)(dp - 1));
    const json_t *srcs = json_object_get(dl, "sources");
    const size_t ns = json_is_array(srcs) ? json_array_size(srcs) : 1;
    data_mix *l = open_mix(set, dp - 1, dp, ns >= 2 && ns <= 4 ? (int)ns : 1);
    int rc = train_loader_state_restore(t, l, dp - 1, dp, dir, 1, &err);
    json_decref(t);
    int32_t x[10], y[10];
    for (int b = 0; rc == 0 && b < 8; b++) {
        int got = data_mix_next(l, x, y, NULL, &err);
        if (got != 1) broken("no batch after a restored position", err.msg);
        for (int i = 0; i < 10; i++)
            if (x[i] < 0 || x[i] >= 1 << 20 || y[i] < 0 || y[i] >= 1 << 20)
                broken("id outside the vocabulary", "");
    }
    data_mix_free(l);
    return rc == 0 ? 1 : rejected(&err);
}

FUZZ_DEFINE_LIBFUZZER_ENTRY
