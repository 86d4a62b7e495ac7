/* Data loader tests: packing and data-parallel sharding on byte tokens (expected windows
 * written out by hand; text files split into paragraphs), exact resume from every batch
 * boundary for JSONL, text and token shards (across epoch restarts), resume on a dataset that
 * grew after the checkpoint (and the refusal of every other change, by name), and hostile input:
 * bad JSONL lines, bad shards and bad states get errors naming the file and line, never a crash.
 * The comparison with HF `tokenizers` and torchtitan's packing is tests/reference/check_loader.py.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "data/data.h"

#ifndef TITAN_SHARED_DIR
#define TITAN_SHARED_DIR "../shared"
#endif

static char dir[256];

static const char *path_of(const char *name) {
    return check_path(dir, name);
}

static void write_file(const char *name, const void *data, size_t n) {
    FILE *f = fopen(path_of(name), "wb");
    if (f) {
        fwrite(data, 1, n, f);
        fclose(f);
    }
}

static void write_str(const char *name, const char *s) {
    write_file(name, s, strlen(s));
}

static data_loader_cfg cfg(const char *name, int T, int B) {
    data_loader_cfg c = {0};
    c.path = path_of(name);
    c.seq_len = T;
    c.batch = B;
    c.dp_size = 1;
    c.infinite = 1;
    c.enc.vocab_size = 256;
    return c;
}

/* Runs the loader for n batches; returns the windows as a string of bytes (byte tokens). */
static int run_bytes(data_loader_cfg c, int n, char *out, base_err *err) {
    data_loader *l;
    if (data_loader_open(&l, &c, err)) return -1;
    int32_t x[64], y[64];
    int k = 0;
    for (int b = 0; b < n; b++) {
        int rc = data_loader_next(l, x, y, NULL, err);
        if (rc <= 0) {
            data_loader_free(l);
            return rc < 0 ? -1 : b;
        }
        for (int w = 0; w < c.batch; w++) {
            for (int t = 0; t < c.seq_len; t++) out[k++] = (char)x[w * c.seq_len + t];
            out[k++] = (char)y[w * c.seq_len + c.seq_len - 1];
            out[k++] = '|';
            for (int t = 1; t < c.seq_len; t++) /* labels are the inputs shifted by one */
                CHECK(y[w * c.seq_len + t - 1] == x[w * c.seq_len + t], "labels not shifted");
        }
    }
    out[k] = 0;
    data_loader_free(l);
    return n;
}

static void test_packing(void) {
    base_err err;
    char out[4096];
    /* three documents, blank lines are not documents, other keys are ignored */
    write_str("p.jsonl", "{\"text\": \"abc\"}\n\n{\"x\": 1, \"text\": \"defgh\"}\n  \n"
                         "{\"text\": \"ij\"}\n");
    CHECK(run_bytes(cfg("p.jsonl", 3, 2), 3, out, &err) == 3, "%s", err.msg);
    CHECK(!strcmp(out, "abcd|efgh|ijab|cdef|ghij|abcd|"), "packing: got %s", out);
    data_loader_cfg c = cfg("p.jsonl", 3, 1);
    c.dp_size = 2;
    c.dp_rank = 1; /* document 1 only */
    CHECK(run_bytes(c, 3, out, &err) == 3, "%s", err.msg);
    CHECK(!strcmp(out, "defg|hdef|ghde|"), "rank 1 of 2: got %s", out);
    c.dp_rank = 0; /* documents 0 and 2 */
    CHECK(run_bytes(c, 2, out, &err) == 2, "%s", err.msg);
    CHECK(!strcmp(out, "abci|jabc|"), "rank 0 of 2: got %s", out);
    c = cfg("p.jsonl", 3, 2); /* not infinite: 10 tokens give one batch of 2 x 4 */
    c.infinite = 0;
    CHECK(run_bytes(c, 5, out, &err) == 1, "finite loader should stop after 1 batch");
    c = cfg("p.jsonl", 3, 1);
    c.dp_size = 5;
    c.dp_rank = 4;
    CHECK(run_bytes(c, 1, out, &err) < 0 && strstr(err.msg, "no tokens for data-parallel rank 4"),
          "empty rank: %s", err.msg);
    c.dp_rank = 5;
    CHECK(run_bytes(c, 1, out, &err) < 0 && strstr(err.msg, "dp_rank"), "rank >= dp_size");
}

/* A text file is one document per paragraph (split at "\n\n", empty pieces dropped, as HF
 * datasets' sample_by="paragraph"), so a single file feeds several data-parallel ranks. With
 * byte tokens a paragraph keeps its separator: "ab\n\n", "cd\n\n", "ef\n\n", "\n". */
static void test_text_paragraphs(void) {
    base_err err;
    char out[4096];
    write_str("para.txt", "ab\n\ncd\n\n\n\nef\n\n\n");
    data_loader_cfg c = cfg("para.txt", 3, 1);
    c.dp_size = 2;
    c.dp_rank = 1; /* paragraphs 1 and 3 */
    CHECK(run_bytes(c, 3, out, &err) == 3, "text rank 1 of 2: %s", err.msg);
    CHECK(!strcmp(out, "cd\n\n|\ncd\n|\n\ncd|"), "text rank 1 of 2: got '%s'", out);
    c.dp_rank = 0; /* paragraphs 0 and 2 */
    CHECK(run_bytes(c, 3, out, &err) == 3, "text rank 0 of 2: %s", err.msg);
    CHECK(!strcmp(out, "ab\n\n|ef\n\n|ab\n\n|"), "text rank 0 of 2: got '%s'", out);
    c.dp_size = 4;
    c.dp_rank = 3; /* the fourth paragraph, "\n" (the file's last byte) */
    CHECK(run_bytes(c, 1, out, &err) == 1 && !strcmp(out, "\n\n\n\n|"), "rank 3 of 4: '%s'", out);
    c.dp_size = 5;
    c.dp_rank = 4;
    CHECK(run_bytes(c, 1, out, &err) < 0 && strstr(err.msg, "(the dataset has 4 documents)"),
          "4 paragraphs, rank 4 of 5: %s", err.msg);
    /* a resumed position must be a paragraph start */
    data_loader *l;
    c = cfg("para.txt", 3, 1);
    if (data_loader_open(&l, &c, &err) == 0) {
        data_loader_state s;
        int32_t x[4], y[4];
        CHECK(data_loader_next(l, x, y, NULL, &err) == 1, "%s", err.msg);
        data_loader_get_state(l, &s); /* paragraph 1, "cd", at byte 4 */
        CHECK(s.doc == 1 && s.file_doc == 1 && s.byte_off == 4 && s.doc_tokens == 0,
              "state after one window: doc %lld byte %lld", (long long)s.doc,
              (long long)s.byte_off);
        s.byte_off = 5;
        CHECK(data_loader_set_state(l, &s, &err) != 0 && strstr(err.msg, "start of a paragraph"),
              "byte offset inside a paragraph: %s", err.msg);
        s.byte_off = 99;
        CHECK(data_loader_set_state(l, &s, &err) != 0 && strstr(err.msg, "past the end"),
              "byte offset past the end: %s", err.msg);
        data_loader_free(l);
    }
}

/* CR and CRLF line ends: HF datasets' text loader reads the file in Python's text mode, whose
 * universal newlines make "\r\n" and a lone "\r" a "\n" before the split at blank lines.
 * "ab\r\ncd\r\n\r\nef\r\rgh\n\r\nij\r" reads as "ab\ncd\n\nef\n\ngh\n\nij\n": the paragraphs
 * "ab\ncd", "ef", "gh", "ij\n" (byte tokens keep "\n\n" after each but the last). Positions
 * stay file offsets: "ef" starts at byte 10, and an offset between a "\r" and its "\n" is not
 * a paragraph start. */
static void test_text_crlf(void) {
    base_err err;
    char out[4096];
    write_str("crlf.txt", "ab\r\ncd\r\n\r\nef\r\rgh\n\r\nij\r");
    data_loader_cfg c = cfg("crlf.txt", 3, 1);
    CHECK(run_bytes(c, 4, out, &err) == 4, "crlf: %s", err.msg);
    CHECK(!strcmp(out, "ab\nc|d\n\ne|f\n\ng|h\n\ni|"), "crlf: got '%s'", out);
    c.dp_size = 4;
    c.dp_rank = 3; /* the fourth paragraph, "ij\r" read as "ij\n" */
    CHECK(run_bytes(c, 1, out, &err) == 1 && !strcmp(out, "ij\ni|"), "crlf rank 3 of 4: '%s'", out);
    data_loader *l;
    c = cfg("crlf.txt", 6, 1);
    if (data_loader_open(&l, &c, &err) == 0) {
        data_loader_state s;
        int32_t x[8], y[8];
        CHECK(data_loader_next(l, x, y, NULL, &err) == 1, "%s", err.msg);
        data_loader_get_state(l, &s); /* paragraph 1, "ef", after "\r\n\r\n" */
        CHECK(s.doc == 1 && s.byte_off == 10 && s.doc_tokens == 0, "crlf state: doc %lld byte %lld",
              (long long)s.doc, (long long)s.byte_off);
        CHECK(data_loader_set_state(l, &s, &err) == 0, "crlf state back: %s", err.msg);
        s.byte_off = 9; /* between "\r\n\r" and its "\n" */
        CHECK(data_loader_set_state(l, &s, &err) != 0 && strstr(err.msg, "start of a paragraph"),
              "offset inside a CRLF: %s", err.msg);
        s.byte_off = 14; /* after "\r\r": "gh" */
        s.doc = 2;
        s.file_doc = 2;
        s.window = 0; /* a position made by hand: the bytes before it not recorded */
        CHECK(data_loader_set_state(l, &s, &err) == 0 &&
                  data_loader_next(l, x, y, NULL, &err) == 1 && x[0] == 'g' && x[1] == 'h' &&
                  x[2] == '\n' && x[4] == 'i',
              "resume after \\r\\r: %s", err.msg);
        data_loader_free(l);
    }
}

/* Uninterrupted run vs. resuming from the state after every batch. */
static void check_resume(data_loader_cfg c, int n, const char *what) {
    base_err err;
    const int per = c.batch * c.seq_len;
    int32_t *ref = malloc(sizeof(int32_t) * (size_t)(n * per)), x[512], y[512];
    char(*states)[512] = malloc((size_t)n * 512);
    data_loader *l;
    if (data_loader_open(&l, &c, &err)) {
        CHECK(0, "%s: %s", what, err.msg);
        free(ref);
        free(states);
        return;
    }
    int64_t epochs = 0;
    for (int b = 0; b < n; b++) {
        data_loader_state s;
        data_loader_get_state(l, &s);
        data_loader_state_format(&s, states[b], 512);
        epochs = s.epoch;
        CHECK(data_loader_next(l, ref + b * per, y, NULL, &err) == 1, "%s: %s", what, err.msg);
    }
    data_loader_free(l);
    CHECK(epochs >= 2, "%s: only %lld epochs covered", what, (long long)epochs);
    for (int k = 0; k < n; k++) {
        data_loader_state s;
        int ok = data_loader_open(&l, &c, &err) == 0;
        ok = ok && data_loader_state_parse(states[k], &s, &err) == 0;
        ok = ok && data_loader_set_state(l, &s, &err) == 0;
        CHECK(ok, "%s: resume at %d: %s", what, k, err.msg);
        for (int b = k; ok && b < n; b++) {
            ok = data_loader_next(l, x, y, NULL, &err) == 1 &&
                 memcmp(x, ref + b * per, sizeof(int32_t) * (size_t)per) == 0;
            CHECK(ok, "%s: resumed at batch %d, batch %d differs", what, k, b);
        }
        if (l) data_loader_free(l);
        l = NULL;
    }
    free(ref);
    free(states);
}

/* titan tokenize of the test folder's file jsonl into its folder out, one document a shard. */
static int tokenize_to(const char *jsonl, const char *out, int threads, int64_t *nd,
                       base_err *err) {
    data_tokenize_cfg tc = {0};
    int64_t nt = 0;
    tc.path = path_of(jsonl);
    tc.tokenizer = TITAN_SHARED_DIR "/data/test_tokenizer";
    tc.out_dir = path_of(out);
    tc.shard_tokens = 1;
    tc.threads = threads;
    return data_tokenize(&tc, nd, &nt, err);
}

static void test_resume(data_tok *tok) {
    write_str("r.jsonl", "{\"text\": \"The first document.\"}\n\n{\"text\": \"second, longer, "
                         "with \\u00e9 and \\ud83d\\ude42\"}\n{\"text\": \"\"}\n"
                         "{\"text\": \"3\"}\n{\"text\": \"a fourth one here\"}\n");
    data_loader_cfg c = cfg("r.jsonl", 7, 2);
    check_resume(c, 30, "jsonl bytes");
    c.dp_size = 2;
    c.dp_rank = 1;
    check_resume(c, 20, "jsonl bytes rank 1/2");
    if (tok) {
        c = cfg("r.jsonl", 5, 3);
        c.enc.tok = tok;
        c.enc.vocab_size = data_tok_vocab_size(tok);
        check_resume(c, 20, "jsonl test tokenizer");
        /* the same through token shards (one document per shard) */
        base_err err;
        int64_t nd = 0;
        CHECK(tokenize_to("r.jsonl", "shards", 2, &nd, &err) == 0 && nd == 5, "tokenize: %s",
              err.msg);
        CHECK(tokenize_to("r.jsonl", "shards", 2, &nd, &err) != 0 &&
                  strstr(err.msg, "already holds"),
              "tokenize into a folder with shards must refuse");
        c.path = path_of("shards");
        check_resume(c, 20, "token shards");
    }
    base_mkdir_p(path_of("txt"), NULL);
    write_str("txt/a", "one document");
    write_str("txt/b", "");
    write_str("txt/c", "and a third, the last of them");
    c = cfg("txt", 6, 2);
    check_resume(c, 20, "text folder bytes");
    /* paragraphs of one file, on data-parallel rank 1 of 2, with bos/eos per paragraph; the
     * same with CRLF, CR and mixed line ends */
    const struct {
        const char *file, *text, *what;
    } paras[] = {
        {"paras.txt",
         "First Citizen:\nBefore we proceed.\n\nAll:\nSpeak, speak.\n\n\n\n"
         "You are all resolved.\n\nFirst:\nResolved.\n",
         "text paragraphs"},
        {"paras_crlf.txt",
         "First Citizen:\r\nBefore we proceed.\r\n\r\nAll:\rSpeak, "
         "speak.\r\r\r\rYou are all resolved.\n\r\nFirst:\r\nResolved.\r\n",
         "crlf paragraphs"},
    };
    for (size_t i = 0; i < sizeof paras / sizeof paras[0]; i++) {
        char what[96];
        write_str(paras[i].file, paras[i].text);
        c = cfg(paras[i].file, 5, 2);
        c.dp_size = 2;
        c.dp_rank = 1;
        snprintf(what, sizeof what, "%s bytes rank 1/2", paras[i].what);
        check_resume(c, 20, what);
        if (tok) {
            c.enc.tok = tok;
            c.enc.vocab_size = data_tok_vocab_size(tok);
            snprintf(what, sizeof what, "%s test tokenizer rank 1/2", paras[i].what);
            check_resume(c, 20, what);
        }
    }
}

/* The first window of n batches (finite) from path, into out[n * T]. */
static int first_ids(data_loader_cfg c, int32_t *out, int n) {
    base_err err;
    data_loader *l;
    int32_t y[64];
    if (data_loader_open(&l, &c, &err)) {
        CHECK(0, "%s", err.msg);
        return -1;
    }
    int b = 0;
    while (b < n && data_loader_next(l, out + b * c.seq_len, y, NULL, &err) == 1) b++;
    data_loader_free(l);
    return b;
}

/* Token shards past shard-99999 are read in tokenize's order, not the names' string order
 * (shard-10000, shard-100000, shard-10001 had put the 100,001st shard's documents before the
 * 10,002nd's): three one-document shards renamed so, read from the folder and through a glob,
 * give the windows of a JSONL with the documents in numeric order. */
static void test_shard_order(data_tok *tok) {
    if (!tok) return;
    base_mkdir_p(path_of("order"), NULL);
    write_str("order.jsonl",
              "{\"text\": \"alpha\"}\n{\"text\": \"beta\"}\n{\"text\": \"gamma\"}\n");
    write_str("order_want.jsonl",
              "{\"text\": \"alpha\"}\n{\"text\": \"gamma\"}\n{\"text\": \"beta\"}\n");
    base_err err;
    int64_t nd = 0;
    CHECK(tokenize_to("order.jsonl", "order", 1, &nd, &err) == 0 && nd == 3, "tokenize: %s",
          err.msg);
    const char *from[3] = {"order/shard-00000.tok", "order/shard-00001.tok",
                           "order/shard-00002.tok"};
    const char *to[3] = {"order/shard-10000.tok", "order/shard-100000.tok",
                         "order/shard-10001.tok"};
    for (int i = 0; i < 3; i++) {
        char a[512];
        snprintf(a, sizeof a, "%s", path_of(from[i]));
        CHECK(rename(a, path_of(to[i])) == 0, "rename %s", from[i]);
    }
    data_loader_cfg c = cfg("order_want.jsonl", 4, 1);
    c.enc.tok = tok;
    c.enc.vocab_size = data_tok_vocab_size(tok);
    c.infinite = 0;
    int32_t want[64], got[64];
    const int n = first_ids(c, want, 3);
    CHECK(n == 3, "%d windows of the JSONL", n);
    const char *paths[2] = {"order", "order/shard-*.tok"};
    for (int p = 0; p < 2; p++) {
        c.path = path_of(paths[p]);
        CHECK(first_ids(c, got, n) == n && !memcmp(got, want, sizeof(int32_t) * (size_t)(n * 4)),
              "%s: the shards read out of tokenize's order", paths[p]);
    }
}

static void expect_error(data_loader_cfg c, const char *needle, const char *what) {
    base_err err = {{0}};
    data_loader *l = NULL;
    int32_t x[256], y[256];
    int rc = data_loader_open(&l, &c, &err);
    for (int b = 0; rc == 0 && b < 8; b++) rc = data_loader_next(l, x, y, NULL, &err) == 1 ? 0 : -1;
    data_loader_free(l);
    CHECK(rc != 0 && strstr(err.msg, needle), "%s: want an error with '%s', got '%s'", what, needle,
          rc ? err.msg : "success");
}

static void test_bad_jsonl(void) {
    write_str("b1.jsonl", "{\"text\": \"ok\"}\n{\"text\": \"unterminated}\n");
    expect_error(cfg("b1.jsonl", 4, 1), "b1.jsonl:2: invalid JSON", "malformed line");
    write_str("b2.jsonl", "{\"text\": \"ok\"}\n\n{\"body\": \"x\"}\n");
    expect_error(cfg("b2.jsonl", 4, 1), "b2.jsonl:3: no \"text\" field", "missing field");
    write_str("b3.jsonl", "{\"text\": [1]}\n");
    expect_error(cfg("b3.jsonl", 4, 1), "b3.jsonl:1: field \"text\" is not a string", "type");
    write_str("b4.jsonl", "\"just a string\"\n");
    expect_error(cfg("b4.jsonl", 4, 1), "b4.jsonl:1: the line is not a JSON object", "object");
    write_str("b5.jsonl", "{\"text\": \"a\", \"text\": \"b\"}\n");
    expect_error(cfg("b5.jsonl", 4, 1), "b5.jsonl:1: invalid JSON", "duplicate key");
    write_file("b6.jsonl", "{\"text\": \"a\0b\"}\n", 16); /* raw NUL inside the line */
    expect_error(cfg("b6.jsonl", 4, 1), "b6.jsonl:1: invalid JSON", "raw NUL");
    /* a line of \v / \f is no JSON (only space, tab, LF, CR are JSON's whitespace) */
    write_str("b7.jsonl", "{\"text\": \"ok\"}\n \v\f\n");
    expect_error(cfg("b7.jsonl", 4, 1), "b7.jsonl:2: invalid JSON", "vertical tab line");
    expect_error(cfg("missing.jsonl", 4, 1), "missing.jsonl: No such file", "missing file");
    expect_error(cfg("nomatch*.jsonl", 4, 1), "no files match", "glob without matches");
    /* a path that exists is read as named, * ? [ in its name or not: not the glob's match */
    write_str("lit[1].jsonl", "{\"text\": \"RIGHT\"}\n");
    write_str("lit1.jsonl", "{\"text\": \"WRONG\"}\n");
    {
        char lit[64];
        base_err err;
        CHECK(run_bytes(cfg("lit[1].jsonl", 4, 1), 1, lit, &err) == 1 && !strncmp(lit, "RIGHT", 5),
              "a file named lit[1].jsonl read as %s (%s)", lit, err.msg);
    }
    data_loader_cfg c = cfg("b2.jsonl", 4, 1);
    c.field = "body";
    expect_error(c, "b2.jsonl:1: no \"body\" field", "custom field");
    /* skip mode: bad lines are counted in the state */
    write_str("s.jsonl", "{\"text\": \"abcdef\"}\n{bad\n{\"text\": 5}\n{\"text\": \"ghij\"}\n");
    c = cfg("s.jsonl", 4, 1);
    c.skip_bad_lines = 1;
    char out[256];
    base_err err;
    CHECK(run_bytes(c, 2, out, &err) == 2 && !strcmp(out, "abcde|fghij|"), "skip: %s", out);
    data_loader *l;
    int32_t x[8], y[8];
    if (data_loader_open(&l, &c, &err) == 0) {
        data_loader_state s;
        CHECK(data_loader_next(l, x, y, NULL, &err) == 1 &&
                  data_loader_next(l, x, y, NULL, &err) == 1,
              "skip");
        data_loader_get_state(l, &s);
        CHECK(s.bad_lines == 2, "bad lines counted: %lld", (long long)s.bad_lines);
        data_loader_free(l);
    }
}

/* A JSONL file that opens with a UTF-8 byte-order mark: the mark is skipped (it is not part of
 * any JSON value; Python's "utf-8-sig"), the first line is a document like the others, and the
 * positions stay file offsets (line 2 starts at byte 3 + 16), resumed exactly; a mark on a later
 * line is still invalid JSON there. */
static void test_jsonl_bom(data_tok *tok) {
    base_err err;
    char out[256];
    write_str("bom.jsonl", "\xEF\xBB\xBF{\"text\": \"abc\"}\n{\"text\": \"defgh\"}\n"
                           "{\"text\": \"ij\"}\n");
    data_loader_cfg c = cfg("bom.jsonl", 3, 2);
    CHECK(run_bytes(c, 2, out, &err) == 2, "bom: %s", err.msg);
    CHECK(!strcmp(out, "abcd|efgh|ijab|cdef|"), "bom: got '%s'", out);
    data_loader *l;
    c = cfg("bom.jsonl", 2, 1);
    if (data_loader_open(&l, &c, &err) == 0) {
        int32_t x[2], y[2];
        data_loader_state s;
        CHECK(data_loader_next(l, x, y, NULL, &err) == 1, "%s", err.msg);
        data_loader_get_state(l, &s); /* "abc" read: document 1 at its line's byte */
        CHECK(s.doc == 1 && s.byte_off == 19 && s.line == 1 && s.doc_tokens == 0,
              "bom state: doc %lld byte %lld line %lld", (long long)s.doc, (long long)s.byte_off,
              (long long)s.line);
        data_loader_free(l);
    }
    c = cfg("bom.jsonl", 2, 2);
    check_resume(c, 12, "jsonl with a BOM, bytes");
    if (tok) {
        c.enc.tok = tok;
        c.enc.vocab_size = data_tok_vocab_size(tok);
        check_resume(c, 12, "jsonl with a BOM, test tokenizer");
    }
    write_str("bom2.jsonl", "{\"text\": \"abc\"}\n\xEF\xBB\xBF{\"text\": \"de\"}\n");
    expect_error(cfg("bom2.jsonl", 4, 1), "bom2.jsonl:2: invalid JSON", "BOM on line 2");
}

/* A NUL in a file taken for text (auto): refused as binary, naming the way out, which works. */
static void test_text_nul(void) {
    base_err err;
    char out[256];
    write_file("nul.txt", "abc\0def\n", 8);
    expect_error(cfg("nul.txt", 3, 1),
                 "nul.txt: binary data (a NUL byte at offset 3), not text or JSON Lines: titan "
                 "reads text, JSON Lines (UTF-8) and token shards (titan tokenize); if it is "
                 "text, pass --format text (training.dataset_format = \"text\") to read it as "
                 "text",
                 "NUL in auto text");
    data_loader_cfg c = cfg("nul.txt", 3, 1);
    c.format = DATA_FMT_TEXT;
    CHECK(run_bytes(c, 1, out, &err) == 1 && !memcmp(out, "abc\0|", 5), "--format text: %s",
          err.msg);
}

/* Every text empty: a tokenizer still ends each document with eos, so the windows would be
 * eos only; the loader refuses it at the end of the first pass (the warning after the first
 * batch: cli_guards.sh). Byte tokens have no eos: the "no tokens" error. Some empty texts
 * among others are fine (test_resume's r.jsonl). */
static void test_empty_texts(data_tok *tok) {
    write_str("e.jsonl", "{\"text\": \"\"}\n{\"text\": \"\"}\n{\"text\": \"\"}\n");
    expect_error(cfg("e.jsonl", 4, 1), "no tokens for data-parallel rank 0", "empty, bytes");
    if (!tok) return;
    data_loader_cfg c = cfg("e.jsonl", 4, 1);
    c.enc.tok = tok;
    c.enc.vocab_size = data_tok_vocab_size(tok);
    expect_error(c, "e.jsonl: every document of data-parallel rank 0 of 1 has empty text",
                 "empty, tokenizer");
    c.infinite = 0; /* a validation set too */
    expect_error(c, "has empty text", "empty, tokenizer, one pass");
}

static void test_bad_shards(data_tok *tok) {
    if (!tok) return;
    size_t n;
    base_err err;
    char *good = base_read_file(path_of("shards/shard-00000.tok"), 1 << 20, &n, &err);
    CHECK(good != NULL && n > 56, "no shard to corrupt: %s", err.msg);
    if (!good) return;
    data_loader_cfg c = cfg("bad.tok", 4, 1);
    c.format = DATA_FMT_TOKENS;
    c.enc.tok = tok;
    c.enc.vocab_size = data_tok_vocab_size(tok);
    char *b = malloc(n + 8);
    struct {
        size_t off;
        uint32_t val;
        const char *needle;
    } cases[] = {{0, 0x4e415449, "bad magic"},
                 {8, 4, "version 4 is not supported"},
                 {12, 2, "dtype 2 is not supported"},
                 {44, 5000, "tokenizer path longer than 4096"},
                 {44, 0xfffffff0u, "tokenizer path longer than 4096"},
                 {56, 0x41410041, "tokenizer path holds a NUL"},
                 /* another tokenizer.json than the run's (the hash's high half differs) */
                 {52, 0x12345678, "shard was written with the tokenizer /"},
                 /* another vocabulary: the recorded tokenizer named too */
                 {36, 7, "shard was written by another tokenizer, /"},
                 {32, 0, "vocab_size must be positive"},
                 {40, 99999, "eos_id out of range"},
                 {24, 3, "header says"},
                 {16, 0xffffffffu, "truncated"},
                 {28, 0x7fffffff, "out of range"}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        memcpy(b, good, n);
        memcpy(b + cases[i].off, &cases[i].val, 4);
        write_file("bad.tok", b, n);
        expect_error(c, cases[i].needle, cases[i].needle);
    }
    write_file("bad.tok", good, n - 4);
    expect_error(c, "truncated", "short file");
    memcpy(b, good, n);
    memset(b + n, 0, 8);
    write_file("bad.tok", b, n + 8);
    expect_error(c, "trailing bytes", "long file");
    write_file("bad.tok", good, 20);
    expect_error(c, "header alone", "file shorter than the header");
    memcpy(b, good, n); /* doc_offsets[1] past n_tokens */
    uint64_t nt, nd;
    memcpy(&nd, good + 16, 8);
    memcpy(&nt, good + 24, 8);
    uint32_t plen; /* version 2: the header holds the tokenizer's path */
    memcpy(&plen, good + 44, 4);
    const size_t hb = 56 + (plen + 7) / 8 * 8;
    uint64_t big = nt + 1, off_start = (hb + 4 * nt + 7) / 8 * 8;
    memcpy(b + off_start + 8, &big, 8);
    write_file("bad.tok", b, n);
    expect_error(c, "out of order or past n_tokens", "offsets");
    /* version 3's skipped-slot mark on a document with ids, and on a version 2 shard (what
     * tokenize writes where no slot is marked) */
    memcpy(b, good, n);
    uint64_t end1;
    memcpy(&end1, good + off_start + 8, 8);
    end1 |= DATA_SHARD_SKIPPED;
    memcpy(b + off_start + 8, &end1, 8);
    const uint32_t v2 = 2, v3 = 3;
    memcpy(b + 8, &v3, 4);
    write_file("bad.tok", b, n);
    expect_error(c, "marks document 0 skipped, but it has ids", "a skipped slot with ids");
    memcpy(b + 8, &v2, 4);
    write_file("bad.tok", b, n);
    expect_error(c, "marks document 0 skipped, which only version 3 may", "a mark in version 2");
    memcpy(b, good, n); /* a token id >= vocab_size */
    uint32_t id = (uint32_t)data_tok_vocab_size(tok) + 5;
    memcpy(b + hb, &id, 4);
    write_file("bad.tok", b, n);
    expect_error(c, "document 0, token 0: id", "token id out of range");
    c.enc.vocab_size = 100; /* the model's vocabulary is smaller than the tokenizer's */
    c.path = path_of("shards");
    c.format = DATA_FMT_AUTO;
    expect_error(c, "vocab_size is 100", "model vocab too small");
    c.enc.tok = NULL; /* byte tokens with shards of a bigger vocabulary */
    expect_error(c, "larger than the model's 100", "shard vocab vs model");
    free(b);
    free(good);
}

static void test_bad_state(void) {
    base_err err;
    data_loader *l, *l2;
    data_loader_cfg c = cfg("r.jsonl", 4, 1), c2 = cfg("p.jsonl", 4, 1);
    if (data_loader_open(&l, &c, &err) || data_loader_open(&l2, &c2, &err)) {
        CHECK(0, "%s", err.msg);
        return;
    }
    data_loader_state s, s2;
    int32_t x[4], y[4];
    CHECK(data_loader_next(l, x, y, NULL, &err) == 1, "%s", err.msg);
    data_loader_get_state(l, &s);
    data_loader_get_state(l2, &s2);
    CHECK(data_loader_set_state(l, &s2, &err) != 0 && strstr(err.msg, "another dataset") &&
              strstr(err.msg, "exclude_from_loading = [\"dataloader\"]"),
          "state of another dataset: %s", err.msg);
    data_loader_state t = s;
    t.byte_off += 1;
    CHECK(data_loader_set_state(l, &t, &err) != 0 && strstr(err.msg, "not a line start"),
          "byte offset inside a line: %s", err.msg);
    t = s;
    t.byte_off = 1 << 20;
    CHECK(data_loader_set_state(l, &t, &err) != 0 && strstr(err.msg, "past the end"),
          "byte offset past the end: %s", err.msg);
    t = s;
    t.doc_tokens = 1000;
    CHECK(data_loader_set_state(l, &t, &err) != 0 && strstr(err.msg, "does not fit"),
          "token offset past the document: %s", err.msg);
    t = s;
    t.file = 7;
    CHECK(data_loader_set_state(l, &t, &err) != 0, "file index out of range");
    const char *bad[] = {"", "[]", "{\"epoch\": 0}", "{\"epoch\": -1, \"doc\": 0}",
                         "{\"epoch\": 0, \"doc\": 0, \"doc_tokens\": 0, \"file\": 0, \"file_doc\": "
                         "0, \"byte_off\": 0, \"line\": 0, \"bad_lines\": 0, \"fingerprint\": 5}"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK(data_loader_state_parse(bad[i], &t, &err) != 0, "state '%s' accepted", bad[i]);
    char buf[512];
    CHECK(data_loader_state_format(&s, buf, sizeof buf) == 0 &&
              data_loader_state_parse(buf, &t, &err) == 0 && !memcmp(&t, &s, sizeof s),
          "state format/parse round trip");
    CHECK(data_loader_set_state(l, &s, &err) == 0, "own state: %s", err.msg);
    /* the file rewritten with the same size (one word's case changed): the fingerprint (names,
     * sizes) is the same, the content hash is not; a state saved before titan recorded the
     * hash (no "content") still loads; a malformed one is refused */
    CHECK(s.content != 0, "the state records no content hash");
    const char *orig = "{\"text\": \"The first document.\"}\n\n{\"text\": \"second, longer, "
                       "with \\u00e9 and \\ud83d\\ude42\"}\n{\"text\": \"\"}\n"
                       "{\"text\": \"3\"}\n{\"text\": \"a fourth one here\"}\n";
    char *edited = strdup(orig);
    memcpy(strstr(edited, "first"), "FIRST", 5);
    write_str("r.jsonl", edited);
    data_loader *l3;
    if (data_loader_open(&l3, &c, &err) == 0) {
        CHECK(data_loader_set_state(l3, &s, &err) != 0 &&
                  strstr(err.msg, "r.jsonl: changed since") &&
                  strstr(err.msg, "exclude_from_loading"),
              "a same-size rewrite resumed: %s", err.msg);
        t = s;
        t.content = 0;
        CHECK(data_loader_set_state(l3, &t, &err) == 0, "a state without content: %s", err.msg);
        data_loader_free(l3);
    }
    write_str("r.jsonl", orig);
    CHECK(data_loader_set_state(l, &s, &err) == 0, "the restored file: %s", err.msg);
    /* another file renamed over the path while a reader has the first one open (an editor's
     * save, a regenerated dataset): the state names the bytes the reader read, so the resume
     * on the new file is refused (the hash had been of the file at the path at save time:
     * the run resumed in the new file without a word) */
    data_loader *l4;
    if (data_loader_open(&l4, &c, &err) == 0) {
        CHECK(data_loader_next(l4, x, y, NULL, &err) == 1, "%s", err.msg);
        char from[512], to[520]; /* path_of's buffer is the config's path too */
        snprintf(to, sizeof to, "%s", path_of("r.jsonl"));
        write_str("r.jsonl.new", edited);
        snprintf(from, sizeof from, "%s", path_of("r.jsonl.new"));
        path_of("r.jsonl");
        CHECK(rename(from, to) == 0, "rename %s", strerror(errno));
        data_loader_state s4;
        data_loader_get_state(l4, &s4);
        CHECK(s4.content == s.content, "the state's content is not of the bytes read");
        data_loader *l5;
        if (data_loader_open(&l5, &c, &err) == 0) {
            CHECK(data_loader_set_state(l5, &s4, &err) != 0 &&
                      strstr(err.msg, "r.jsonl: changed since"),
                  "a file renamed over the data mid-run resumed: %s", err.msg);
            data_loader_free(l5);
        }
        data_loader_free(l4);
    }
    free(edited);
    write_str("r.jsonl", orig);
    const char *nc = "{\"epoch\": 0, \"doc\": 0, \"doc_tokens\": 0, \"file\": 0, \"file_doc\": 0, "
                     "\"byte_off\": 0, \"line\": 0, \"bad_lines\": 0, \"fingerprint\": "
                     "\"0123456789abcdef\"%s}";
    const char *tails[] = {"", ", \"content\": \"xyz\"", ", \"content\": 5",
                           ", \"content\": \"0123456789abcdef\""};
    for (int i = 0; i < 4; i++) {
        char text[400];
        snprintf(text, sizeof text, nc, tails[i]);
        const int ok = data_loader_state_parse(text, &t, &err) == 0;
        CHECK(ok == (i == 0 || i == 3) && (!ok || t.content == (i ? 0x0123456789abcdefULL : 0)),
              "state with '%s': %s", tails[i], ok ? "accepted" : err.msg);
    }
    data_loader_free(l);
    data_loader_free(l2);
}

/* ---- a dataset that grew after a checkpoint ----
 * A resume on data appended to (a JSONL or text file), or a shard folder or glob that gained
 * shards listed after the saved one, continues at the saved position: the windows are those of
 * an uninterrupted run over the grown data from there, computed apart from the resume path, from
 * a fresh loader over the grown data: its token stream (epoch after epoch of the grown data) from
 * the token the state points at. That token is the one the state was saved before, less the old
 * epochs the run had read (the caller counts a rank's tokens per epoch of the old data from the
 * documents themselves): the documents before it are the same in both, so it is the same token
 * of the same document. */

/* The token stream of n batches of a fresh loader: each window's inputs and its last label, one
 * window after the other (consecutive windows are consecutive stretches of the stream). */
static int32_t *fresh_stream(data_loader_cfg c, int n) {
    base_err err;
    data_loader *l;
    const int T = c.seq_len, per = c.batch * T;
    int32_t *x = malloc(sizeof(int32_t) * (size_t)per), *y = malloc(sizeof(int32_t) * (size_t)per);
    int32_t *s = malloc(sizeof(int32_t) * (size_t)(n * c.batch * (T + 1)));
    const int opened = data_loader_open(&l, &c, &err) == 0;
    int ok = opened;
    CHECK(ok, "fresh loader: %s", err.msg);
    size_t k = 0;
    for (int b = 0; ok && b < n; b++) {
        ok = data_loader_next(l, x, y, NULL, &err) == 1;
        CHECK(ok, "fresh loader, batch %d: %s", b, err.msg);
        for (int w = 0; ok && w < c.batch; w++) {
            memcpy(s + k, x + w * T, sizeof(int32_t) * (size_t)T);
            s[k + (size_t)T] = y[w * T + T - 1];
            k += (size_t)T + 1;
        }
    }
    if (opened) data_loader_free(l);
    free(x);
    free(y);
    if (!ok) {
        free(s);
        return NULL;
    }
    return s;
}

typedef struct {
    data_loader_cfg c;
    int64_t epoch_tokens; /* this rank's tokens in one epoch of the data before it grew */
} grow_rank;

/* States saved after each of n_states batches on every rank (the data as it is), then grow(),
 * then each state restored on a loader over the grown data: n batches equal to the fresh grown
 * stream's from the state's token. Covers several epochs of the old data when n_states does. */
static void check_grown(const grow_rank *ranks, int n_ranks, int n_states, int n,
                        void (*grow)(void), const char *what) {
    base_err err;
    char(*states)[DATA_LOADER_STATE_MAX] =
        malloc((size_t)(n_ranks * n_states) * DATA_LOADER_STATE_MAX);
    int32_t x[256], y[256];
    for (int r = 0; r < n_ranks; r++) {
        data_loader *l;
        if (data_loader_open(&l, &ranks[r].c, &err)) {
            CHECK(0, "%s: %s", what, err.msg);
            free(states);
            return;
        }
        for (int k = 0; k < n_states; k++) {
            data_loader_state s;
            data_loader_get_state(l, &s);
            CHECK(data_loader_state_format(&s, states[r * n_states + k], DATA_LOADER_STATE_MAX) ==
                      0,
                  "%s: state format", what);
            CHECK(data_loader_next(l, x, y, NULL, &err) == 1, "%s: %s", what, err.msg);
        }
        data_loader_free(l);
    }
    grow();
    int64_t epochs = 0;
    for (int r = 0; r < n_ranks; r++) {
        const data_loader_cfg c = ranks[r].c;
        const int T = c.seq_len, W = c.batch * (T + 1);
        /* enough of the grown stream for n batches from any token of the old data's epoch */
        const int fresh = (int)(ranks[r].epoch_tokens / W) + n + 2;
        int32_t *ref = fresh_stream(c, fresh);
        if (!ref) continue;
        for (int k = 0; k < n_states; k++) {
            data_loader_state s;
            data_loader *l = NULL;
            int ok = data_loader_state_parse(states[r * n_states + k], &s, &err) == 0 &&
                     data_loader_open(&l, &c, &err) == 0 && data_loader_set_state(l, &s, &err) == 0;
            CHECK(ok, "%s: rank %d, state after batch %d refused: %s", what, c.dp_rank, k, err.msg);
            const int64_t o = (int64_t)k * W - s.epoch * ranks[r].epoch_tokens;
            CHECK(o >= 0 && o <= ranks[r].epoch_tokens,
                  "%s: rank %d, batch %d: epoch %lld does not fit %lld tokens read", what,
                  c.dp_rank, k, (long long)s.epoch, (long long)k * W);
            if (s.epoch > epochs) epochs = s.epoch;
            for (int b = 0; ok && o >= 0 && o <= ranks[r].epoch_tokens && b < n; b++) {
                ok = data_loader_next(l, x, y, NULL, &err) == 1;
                CHECK(ok, "%s: %s", what, err.msg);
                for (int w = 0; ok && w < c.batch; w++)
                    for (int t = 0; ok && t < T; t++) {
                        const int64_t at = o + (int64_t)(b * W + w * (T + 1) + t);
                        ok = x[w * T + t] == ref[at] && y[w * T + t] == ref[at + 1];
                        CHECK(ok,
                              "%s: rank %d, resumed after batch %d (epoch %lld): batch %d, "
                              "window %d, token %d is %d -> %d, the grown data's %d -> %d",
                              what, c.dp_rank, k, (long long)s.epoch, b, w, t, x[w * T + t],
                              y[w * T + t], ref[at], ref[at + 1]);
                    }
            }
            data_loader_free(l);
        }
        free(ref);
    }
    CHECK(epochs >= 2, "%s: states of %lld epochs only", what, (long long)epochs + 1);
    free(states);
}

/* The JSON Lines and text datasets of the growth tests, their documents and what is appended. */
static const char *const g_old_docs[] = {"alpha one", "the second document", "", "3", "a fourth",
                                         "xyz"};
static const char *const g_new_docs[] = {"fifth doc", "sixth and last"};
enum { G_OLD = 6, G_NEW = 2 };
static int g_newline_end = 1; /* the old JSONL file's last line has its newline */

static void jsonl_of(char *buf, size_t cap, const char *const *docs, int n, int last_nl) {
    size_t k = 0;
    for (int i = 0; i < n; i++)
        k += (size_t)snprintf(buf + k, cap - k, "{\"text\": \"%s\"}%s", docs[i],
                              i < n - 1 || last_nl ? "\n" : "");
}

static void grow_jsonl(void) {
    char old[1024], add[512], all[1600];
    jsonl_of(old, sizeof old, g_old_docs, G_OLD, g_newline_end);
    jsonl_of(add, sizeof add, g_new_docs, G_NEW, 1);
    snprintf(all, sizeof all, "%s%s%s", old, g_newline_end ? "" : "\n", add);
    write_str("g.jsonl", all);
}

static const char g_old_text[] = "First para.\n\nSecond one\nwith two lines.\n\n\n\nThird.\n\n";
static const char g_add_text[] = "Fourth, new.\n\nFifth\n";

static void grow_text(void) {
    char all[256];
    snprintf(all, sizeof all, "%s%s", g_old_text, g_add_text);
    write_str("g.txt", all);
}

/* a token shard folder and a glob over it gain two shards, listed after the old ones */
static void grow_shards(void) {
    base_err err;
    int64_t nd = 0;
    CHECK(tokenize_to("g_new.jsonl", "gs_new", 1, &nd, &err) == 0 && nd == 2, "tokenize: %s",
          err.msg);
    for (int i = 0; i < 2; i++) {
        char from[600], to[600], a[64], b[64];
        snprintf(a, sizeof a, "gs_new/shard-%05d.tok", i);
        snprintf(b, sizeof b, "gs/shard-%05d.tok", 10 + i);
        snprintf(from, sizeof from, "%s", path_of(a));
        snprintf(to, sizeof to, "%s", path_of(b));
        CHECK(rename(from, to) == 0, "rename %s: %s", from, strerror(errno));
    }
}

/* Byte tokens of this rank's documents (a JSONL text, or a paragraph and its "\n\n"). */
static int64_t rank_bytes(const char *const *docs, int n, int sep, int rank, int dp) {
    int64_t t = 0;
    for (int i = rank; i < n; i += dp) t += (int64_t)strlen(docs[i]) + sep;
    return t;
}

/* A token shard's tokens as the loader packs them: ids plus a bos and an eos each document. */
static int64_t shard_tokens(const char *name) {
    size_t n;
    base_err err;
    char *b = base_read_file(path_of(name), 1 << 20, &n, &err);
    int64_t nd, nt;
    int32_t bos, eos;
    if (!b || n < 44) {
        CHECK(0, "%s: %s", name, b ? "short" : err.msg);
        free(b);
        return 0;
    }
    memcpy(&nd, b + 16, 8);
    memcpy(&nt, b + 24, 8);
    memcpy(&bos, b + 36, 4);
    memcpy(&eos, b + 40, 4);
    free(b);
    return nt + nd * ((bos >= 0) + (eos >= 0));
}

static base_err err_unused;

static void test_grow(data_tok *tok) {
    static char jpath[512], tpath[512], spath[512], gpath[512];
    char buf[1024];
    snprintf(jpath, sizeof jpath, "%s", path_of("g.jsonl"));
    /* JSON Lines, 40 byte tokens an epoch on one rank (a window of 4: the old end is a batch
     * boundary, the position past its last line), and on each of 2 ranks */
    for (int nl = 1; nl >= 0; nl--) {
        g_newline_end = nl; /* without it: the old last line's end is the newline appended */
        jsonl_of(buf, sizeof buf, g_old_docs, G_OLD, nl);
        write_str("g.jsonl", buf);
        grow_rank one = {cfg("g.jsonl", 3, 1), rank_bytes(g_old_docs, G_OLD, 0, 0, 1)};
        one.c.path = jpath;
        CHECK(one.epoch_tokens == 40, "40 tokens an epoch, not %lld", (long long)one.epoch_tokens);
        check_grown(&one, 1, 30, 12, grow_jsonl,
                    nl ? "grown jsonl" : "grown jsonl, old end without a newline");
        write_str("g.jsonl", buf);
        grow_rank two[2];
        for (int r = 0; r < 2; r++) {
            two[r] = (grow_rank){cfg("g.jsonl", 2, 2), rank_bytes(g_old_docs, G_OLD, 0, r, 2)};
            two[r].c.path = jpath;
            two[r].c.dp_size = 2;
            two[r].c.dp_rank = r;
        }
        check_grown(two, 2, 24, 8, grow_jsonl,
                    nl ? "grown jsonl, dp 2" : "grown jsonl, dp 2, no newline");
    }
    g_newline_end = 1;
    /* a text file's paragraphs (the old file ends with a blank line) */
    static const char *const paras[] = {"First para.", "Second one\nwith two lines.", "Third."};
    snprintf(tpath, sizeof tpath, "%s", path_of("g.txt"));
    write_str("g.txt", g_old_text);
    grow_rank tr = {cfg("g.txt", 4, 1), rank_bytes(paras, 3, 2, 0, 1)};
    tr.c.path = tpath;
    check_grown(&tr, 1, 30, 10, grow_text, "grown text");
    write_str("g.txt", g_old_text);
    grow_rank t2[2];
    for (int r = 0; r < 2; r++) {
        t2[r] = (grow_rank){cfg("g.txt", 3, 1), rank_bytes(paras, 3, 2, r, 2)};
        t2[r].c.path = tpath;
        t2[r].c.dp_size = 2;
        t2[r].c.dp_rank = r;
    }
    check_grown(t2, 2, 30, 10, grow_text, "grown text, dp 2");
    if (!tok) return;
    /* JSON Lines through the tokenizer: [bos] + ids + [eos] a document */
    jsonl_of(buf, sizeof buf, g_old_docs, G_OLD, 1);
    write_str("g.jsonl", buf);
    grow_rank jt = {cfg("g.jsonl", 3, 2), 0};
    jt.c.path = jpath;
    jt.c.enc.tok = tok;
    jt.c.enc.vocab_size = data_tok_vocab_size(tok);
    for (int i = 0; i < G_OLD; i++) {
        data_tok_ids ids = {0};
        CHECK(data_tok_encode(tok, g_old_docs[i], strlen(g_old_docs[i]), &ids, &err_unused) == 0,
              "encode");
        jt.epoch_tokens +=
            (int64_t)ids.n + (data_tok_bos_id(tok) >= 0) + (data_tok_eos_id(tok) >= 0);
        data_tok_ids_free(&ids);
    }
    check_grown(&jt, 1, 24, 8, grow_jsonl, "grown jsonl, test tokenizer");
    /* token shards, one document each: the folder and a glob over it gain two */
    jsonl_of(buf, sizeof buf, g_old_docs, G_OLD, 1);
    write_str("g_old.jsonl", buf);
    jsonl_of(buf, sizeof buf, g_new_docs, G_NEW, 1);
    write_str("g_new.jsonl", buf);
    snprintf(spath, sizeof spath, "%s", path_of("gs"));
    snprintf(gpath, sizeof gpath, "%s", path_of("gs/shard-*.tok"));
    for (int g = 0; g < 2; g++) {
        check_tmpdir_remove(path_of("gs"));
        check_tmpdir_remove(path_of("gs_new"));
        base_err err;
        int64_t nd = 0;
        CHECK(tokenize_to("g_old.jsonl", "gs", 1, &nd, &err) == 0 && nd == G_OLD, "tokenize: %s",
              err.msg);
        grow_rank sr = {cfg("gs", 5, 2), 0};
        sr.c.path = g ? gpath : spath;
        sr.c.enc.tok = tok;
        sr.c.enc.vocab_size = data_tok_vocab_size(tok);
        for (int i = 0;; i++) { /* the empty document shares a shard with the next */
            char name[64];
            snprintf(name, sizeof name, "gs/shard-%05d.tok", i);
            if (access(path_of(name), F_OK) != 0) break;
            sr.epoch_tokens += shard_tokens(name);
        }
        check_grown(&sr, 1, 20, 8, grow_shards,
                    g ? "a glob of shards gained two" : "a shard folder gained two");
    }
}

/* The state after n batches of c (-1: c fails). */
static int state_after(data_loader_cfg c, int n, data_loader_state *s) {
    base_err err;
    data_loader *l;
    int32_t x[64], y[64];
    if (data_loader_open(&l, &c, &err)) {
        CHECK(0, "%s", err.msg);
        return -1;
    }
    for (int b = 0; b < n; b++) CHECK(data_loader_next(l, x, y, NULL, &err) == 1, "%s", err.msg);
    data_loader_get_state(l, s);
    data_loader_free(l);
    return 0;
}

/* Restoring s on c's data as it is now: refused with needle in the message (needle NULL:
 * accepted, and then its next batch is batch `skip` of a fresh loader over the data). */
static void expect_resume(data_loader_cfg c, const data_loader_state *s, const char *needle,
                          int skip, const char *what) {
    base_err err = {{0}};
    data_loader *l;
    if (data_loader_open(&l, &c, &err)) {
        CHECK(0, "%s: %s", what, err.msg);
        return;
    }
    const int rc = data_loader_set_state(l, s, &err);
    if (needle)
        CHECK(rc != 0 && strstr(err.msg, needle) && strstr(err.msg, "exclude_from_loading"),
              "%s: want a refusal with '%s', got '%s'", what, needle, rc ? err.msg : "resumed");
    else
        CHECK(rc == 0, "%s: refused: %s", what, err.msg);
    if (!needle && rc == 0) {
        const int T = c.seq_len, W = c.batch * (T + 1);
        int32_t x[64], y[64], *ref = fresh_stream(c, skip + 1);
        CHECK(data_loader_next(l, x, y, NULL, &err) == 1, "%s: %s", what, err.msg);
        for (int w = 0; ref && w < c.batch; w++)
            CHECK(!memcmp(x + w * T, ref + skip * W + w * (T + 1), sizeof(int32_t) * (size_t)T),
                  "%s: the resumed batch is not the grown data's", what);
        free(ref);
    }
    data_loader_free(l);
}

/* Everything but growth after the position is refused, naming the file and what changed; a
 * state saved before titan recorded the growth fields is refused on any change, as before. */
static void test_grow_refused(void) {
    static char jpath[512], fpath[512], tpath[512];
    char old[1024], add[512], all[1600];
    jsonl_of(old, sizeof old, g_old_docs, G_OLD, 1);
    jsonl_of(add, sizeof add, g_new_docs, G_NEW, 1);
    snprintf(all, sizeof all, "%s%s", old, add);
    snprintf(jpath, sizeof jpath, "%s", path_of("h.jsonl"));
    data_loader_cfg c = cfg("h.jsonl", 3, 1);
    c.path = jpath;
    data_loader_state s, t;
    write_str("h.jsonl", old);
    if (state_after(c, 3, &s)) return; /* 12 of 40 tokens: in "the second document" */
    /* a shrink */
    write_file("h.jsonl", old, strlen(old) - 5);
    expect_resume(c, &s, "h.jsonl: 113 bytes now, 118 when the run read it: shrunk", 0, "shrunk");
    /* grown, with a byte changed in what the run had read */
    char *edited = strdup(all);
    memcpy(strstr(edited, "alpha"), "ALPHA", 5);
    write_str("h.jsonl", edited);
    expect_resume(c, &s,
                  "h.jsonl: grew since the checkpoint (118 bytes then, 167 now), but its first "
                  "118 bytes are not the ones the run read",
                  0, "a rewrite that also grew");
    free(edited);
    /* another field, another format, another data-parallel rank */
    write_str("h.jsonl", old);
    data_loader_cfg d = c;
    d.field = "body";
    expect_resume(d, &s, "another dataset or setup (the JSONL field", 0, "another field");
    d = c;
    d.format = DATA_FMT_TEXT;
    expect_resume(d, &s, "h.jsonl: read as jsonl at the checkpoint, as text now", 0,
                  "another format");
    d = c;
    d.dp_size = 2;
    d.dp_rank = 1;
    expect_resume(d, &s, "another dataset or setup (the JSONL field, the tokenizer", 0,
                  "another rank");
    /* a state written before titan recorded the growth fields: grown data refused with the
     * fingerprint's message of then; the same data resumes */
    char text[DATA_LOADER_STATE_MAX];
    CHECK(data_loader_state_format(&s, text, sizeof text) == 0, "format");
    char *cut = strstr(text, ", \"setup\"");
    if (cut) strcpy(cut, "}");
    CHECK(data_loader_state_parse(text, &t, &err_unused) == 0 && t.setup == 0 && t.size == 0,
          "an old state: %s", text);
    write_str("h.jsonl", all);
    expect_resume(c, &t,
                  "h.jsonl: the saved data-loader state belongs to another dataset or setup "
                  "(files, their order, sizes, tokenizer or data-parallel rank changed; a folder",
                  0, "an old state on grown data");
    expect_resume(c, &s, NULL, 3, "its new state on grown data");
    write_str("h.jsonl", old);
    expect_resume(c, &t, NULL, 3, "an old state on its data");
    /* a folder: the position in b.jsonl, after a.jsonl's 40 tokens; then in a.jsonl */
    base_mkdir_p(path_of("hf"), NULL);
    snprintf(fpath, sizeof fpath, "%s", path_of("hf"));
    write_str("hf/a.jsonl", old);
    write_str("hf/c.jsonl", add);
    data_loader_cfg f = cfg("hf", 3, 1);
    f.path = fpath;
    data_loader_state sa, sc;
    if (state_after(f, 2, &sa) || state_after(f, 11, &sc)) return;
    CHECK(sa.file == 0 && sc.file == 1 && sc.doc_tokens > 0, "positions in a and c: %d, %d",
          sa.file, sc.file);
    write_str("hf/b.jsonl", add); /* a file listed before the saved one (c) */
    expect_resume(f, &sc, "hf/b.jsonl: added before the saved position's file (", 0,
                  "a file added before the saved one");
    expect_resume(f, &sa, NULL, 2, "the same file added after the saved one");
    unlink(path_of("hf/b.jsonl"));
    write_str("hf/a.jsonl", all); /* the file before the saved one grew */
    expect_resume(f, &sc, "the file before the saved position's (", 0,
                  "a file before the saved one grew");
    expect_resume(f, &sa, NULL, 2, "its own file grew");
    write_str("hf/a.jsonl", old);
    unlink(path_of("hf/a.jsonl")); /* removed */
    expect_resume(f, &sc,
                  "hf/c.jsonl: the saved position's file, listed earlier now (file 1, "
                  "file 2 at the checkpoint)",
                  0, "a file before the saved one removed");
    write_str("hf/a.jsonl", old);
    char from[600], to[600]; /* the saved file renamed */
    snprintf(from, sizeof from, "%s", path_of("hf/c.jsonl"));
    snprintf(to, sizeof to, "%s", path_of("hf/d.jsonl"));
    CHECK(rename(from, to) == 0, "rename");
    expect_resume(f, &sc,
                  "hf: the file holding the saved position (file 2 of the listing then) is "
                  "gone: removed or renamed (",
                  0, "the saved file renamed");
    CHECK(rename(to, from) == 0, "rename back");
    /* the saved file rewritten with its size while a later one grew */
    char *same = strdup(old);
    memcpy(strstr(same, "alpha"), "ALPHA", 5);
    write_str("hf/a.jsonl", same);
    write_str("hf/c.jsonl", all);
    expect_resume(f, &sa, "hf/a.jsonl: changed since the checkpoint (the same size", 0,
                  "a same-size rewrite beside growth");
    free(same);
    /* a finite loader's end (past the last file): a file added after it is read next */
    base_mkdir_p(path_of("pe"), NULL);
    write_str("pe/a.jsonl", old);
    data_loader_cfg e = cfg("pe", 3, 1);
    snprintf(fpath, sizeof fpath, "%s", path_of("pe"));
    e.path = fpath;
    e.infinite = 0;
    data_loader *l;
    int32_t x[8], y[8];
    if (data_loader_open(&l, &e, &err_unused) == 0) {
        int b = 0;
        while (data_loader_next(l, x, y, NULL, &err_unused) == 1) b++;
        data_loader_get_state(l, &s);
        data_loader_free(l);
        CHECK(b == 10 && s.file == 1 && s.name == 0 && s.doc == G_OLD,
              "the finite end: %d batches, file %d", b, s.file);
        write_str("pe/b.jsonl", add);
        e.infinite = 1;
        expect_resume(e, &s, NULL, 10, "past the last file, a file added");
    }
    /* a text file whose last paragraph had no blank line after it, continued: a position up
     * to its start resumes, one in it or after it is refused */
    snprintf(tpath, sizeof tpath, "%s", path_of("h.txt"));
    write_str("h.txt", "A.\n\nB end");
    data_loader_cfg tc = cfg("h.txt", 2, 1);
    tc.path = tpath;
    data_loader_state st[4];
    for (int k = 0; k < 4; k++)
        if (state_after(tc, k, &st[k])) return;
    write_str("h.txt", "A.\n\nB end goes on\n\nC.\n");
    expect_resume(tc, &st[1], NULL, 1, "text, a position in a closed paragraph");
    expect_resume(tc, &st[2],
                  "h.txt: grew since the checkpoint (9 bytes then, 22 now), but the paragraph at "
                  "the saved position, partly trained on, ran to the file's end then",
                  0, "text, a position in the open last paragraph");
    expect_resume(tc, &st[3], "but its last paragraph then (the file's end) runs on", 0,
                  "text, a position at the old end");
    /* a blank line first: "B end" the same text, but ended by a blank line, not the file's end
     * (byte tokens keep the separator, another document) */
    write_str("h.txt", "A.\n\nB end\n\nC.\n");
    expect_resume(tc, &st[3], "but its last paragraph then (the file's end) runs on", 0,
                  "text, a blank line appended first");
    /* a JSON Lines file whose last line had no newline, continued on that line */
    write_str("h.jsonl", "{\"text\": \"abc\"}");
    data_loader_cfg jc = cfg("h.jsonl", 2, 1);
    jc.path = jpath;
    if (state_after(jc, 1, &s)) return; /* "abc" read: the position at the old end */
    write_str("h.jsonl", "{\"text\": \"abc\"}{\"text\": \"d\"}\n");
    expect_resume(jc, &s, "but its last line then (the file's end, without a newline) runs on", 0,
                  "jsonl, the last line continued");
    /* ... and a position inside that last line (part of it trained on), continued */
    write_str("h.jsonl", "{\"text\": \"abc\"}\n{\"text\": \"defghijk\"}");
    if (state_after(jc, 2, &s)) return; /* 6 tokens: "abc", then 3 of "defghijk" */
    CHECK(s.doc == 1 && s.doc_tokens == 3, "in the last line: doc %lld, token %lld",
          (long long)s.doc, (long long)s.doc_tokens);
    write_str("h.jsonl", "{\"text\": \"abc\"}\n{\"text\": \"defghijk\"}{\"text\": \"z\"}\n");
    expect_resume(jc, &s,
                  "but the line at the saved position, partly trained on, ran to the file's end "
                  "then (no newline) and runs on into the new bytes now",
                  0, "jsonl, a position in the last line, continued");
}

/* A file over 128 KiB: a same-length edit in the consumed bytes between its first and last
 * 64 KiB, just before the position, plus an append, is refused (the window before the position);
 * an edit outside every hashed window is not seen (the documented limit). */
static void test_grow_window(void) {
    static char p[512];
    snprintf(p, sizeof p, "%s", path_of("w.jsonl"));
    const size_t n_lines = 3000, L = 64; /* 192,000 bytes */
    char *old = malloc(n_lines * L + 1), *all = malloc(n_lines * L + 2 * L + 1);
    if (!old || !all) return;
    for (size_t i = 0; i < n_lines; i++)
        snprintf(old + i * L, L + 1, "{\"text\": \"x%05zu %-44s\"}\n", i, "abcdefghij");
    data_loader_cfg c = cfg("w.jsonl", 7, 8); /* 64 tokens a batch (state_after's buffers) */
    c.path = p;
    write_str("w.jsonl", old);
    data_loader_state s;
    if (state_after(c, 1250, &s)) return; /* 80,000 tokens (51 a line): about byte 100,000 */
    CHECK(s.byte_off > 80000 && s.byte_off < 120000 && s.window, "position at byte %lld",
          (long long)s.byte_off);
    memcpy(all, old, n_lines * L + 1);
    strcat(all, "{\"text\": \"new line one\"}\n{\"text\": \"new line two\"}\n");
    write_str("w.jsonl", all);
    expect_resume(c, &s, NULL, 1250, "a file over 128 KiB appended to");
    const size_t at = (size_t)s.byte_off - 10 * L; /* a line 10 lines before the position */
    memcpy(all + at + 10, "MMMMMM", 6);
    write_str("w.jsonl", all);
    expect_resume(c, &s,
                  "w.jsonl: grew since the checkpoint (192000 bytes then, 192050 now), but the "
                  "65536 bytes before the saved position",
                  0, "a same-length edit before the position plus an append");
    /* a position at about byte 150,000: the window from about 84,000; bytes 65,536 to there
     * are in no window */
    memcpy(all + at + 10, old + at + 10, 6);
    write_str("w.jsonl", old);
    if (state_after(c, 1875, &s)) return;
    memcpy(all + 70000, "MMMMMM", 6);
    write_str("w.jsonl", all);
    expect_resume(c, &s, NULL, 1875, "an edit outside the hashed windows");
    free(old);
    free(all);
}

/* A JSON Lines file appended to while the run read it, its new lines read: the state's size is at
 * least the position's offset (the info line's "bytes then"), and a same-length rewrite of those
 * lines before a resume is refused (they were taken as read, unchecked). */
static void test_grow_while_read(void) {
    static char p[512];
    snprintf(p, sizeof p, "%s", path_of("live.jsonl"));
    char line[80], *old = malloc(200 * 64 + 1);
    if (!old) return;
    for (int i = 0; i < 200; i++) /* 64 bytes, 51 byte tokens a line: 12,800 bytes */
        snprintf(old + i * 64, 65, "{\"text\": \"d%05d %-44s\"}\n", i, "q");
    write_str("live.jsonl", old);
    data_loader_cfg c = cfg("live.jsonl", 7, 8);
    c.path = p;
    base_err err;
    data_loader *l;
    int32_t x[64], y[64];
    if (data_loader_open(&l, &c, &err)) {
        CHECK(0, "%s", err.msg);
        return;
    }
    CHECK(data_loader_next(l, x, y, NULL, &err) == 1, "%s",
          err.msg); /* the file open, 12,800 bytes */
    FILE *f = fopen(p, "ab");
    for (int i = 0; f && i < 100; i++) fprintf(f, "{\"text\": \"n%05d %-44s\"}\n", i, "q");
    if (f) fclose(f);
    for (int b = 1; b < 200; b++) /* 12,800 tokens: past the old 10,200 */
        CHECK(data_loader_next(l, x, y, NULL, &err) == 1, "%s", err.msg);
    data_loader_state s;
    data_loader_get_state(l, &s);
    data_loader_free(l);
    CHECK(s.byte_off > 12800 && s.size >= s.byte_off && s.epoch == 0,
          "read past the size at open: byte %lld, size %lld, epoch %lld", (long long)s.byte_off,
          (long long)s.size, (long long)s.epoch);
    expect_resume(c, &s, NULL, 200, "grown while read, unchanged since");
    FILE *g = fopen(p, "r+b"); /* rewrite the first appended line, read before the position */
    snprintf(line, sizeof line, "{\"text\": \"X%05d", 0);
    if (g && fseek(g, 12800, SEEK_SET) == 0) fwrite(line, 1, strlen(line), g);
    if (g) fclose(g);
    expect_resume(c, &s,
                  "live.jsonl: grew since the checkpoint (16000 bytes then, 19200 now), but its "
                  "first 16000 bytes are not",
                  0, "grown while read, a line read past the size then rewritten");
    free(old);
}

/* A resume at epoch 1 on a JSON Lines file that grew with a malformed line, skip_bad_lines: the
 * new bad line is counted (a later epoch's are not: they were counted in the first). */
static void test_grow_bad_lines(void) {
    static char p[512];
    snprintf(p, sizeof p, "%s", path_of("bad.jsonl"));
    write_str("bad.jsonl", "{\"text\": \"one two\"}\n{\"text\": \"three\"}\n");
    data_loader_cfg c = cfg("bad.jsonl", 3, 1);
    c.path = p;
    c.skip_bad_lines = 1;
    data_loader_state s;
    if (state_after(c, 5, &s)) return; /* 12 tokens an epoch: in epoch 1 */
    CHECK(s.epoch == 1 && s.bad_lines == 0, "epoch %lld, %lld bad", (long long)s.epoch,
          (long long)s.bad_lines);
    write_str("bad.jsonl",
              "{\"text\": \"one two\"}\n{\"text\": \"three\"}\n{\"text\": \"bro\n{\"text\": "
              "\"four\"}\n");
    base_err err;
    data_loader *l;
    int32_t x[8], y[8];
    if (data_loader_open(&l, &c, &err)) return;
    CHECK(data_loader_set_state(l, &s, &err) == 0, "%s", err.msg);
    for (int b = 0; b < 3; b++) CHECK(data_loader_next(l, x, y, NULL, &err) == 1, "%s", err.msg);
    data_loader_state t;
    data_loader_get_state(l, &t);
    data_loader_free(l);
    CHECK(t.bad_lines == 1, "the grown file's bad line at epoch 1: %lld counted (epoch %lld)",
          (long long)t.bad_lines, (long long)t.epoch);
}

/* JSON Lines text written to NAME.jsonl and tokenized into folder NAME (one document a shard);
 * *c: a loader of it, 3-token windows on 1 rank. 0, or -1 (said) when the tokenize failed. */
static int tokenized(const char *name, const char *text, data_loader_cfg *c) {
    char src[128];
    base_err err;
    int64_t nd = 0;
    snprintf(src, sizeof src, "%s.jsonl", name);
    write_str(src, text);
    if (tokenize_to(src, name, 1, &nd, &err)) {
        CHECK(0, "tokenize %s: %s", src, err.msg);
        return -1;
    }
    *c = cfg(name, 3, 1);
    c->enc.vocab_size = 1 << 20;
    return 0;
}

/* Token shards trained on without a tokenizer: shards that record two tokenizers (a glob over
 * tokenize folders) are refused at open, naming both shards and both tokenizers. */
static void test_shards_two_tokenizers(data_tok *tok) {
    base_err err;
    data_loader_cfg c;
    if (!tok || tokenized("tk2", "{\"text\": \"one\"}\n{\"text\": \"two\"}\n", &c)) return;
    data_loader *l;
    CHECK(data_loader_open(&l, &c, &err) == 0, "one tokenizer: %s", err.msg);
    if (l) data_loader_free(l);
    /* shard 1's tokenizer.json hash (header bytes 48..55) another's */
    FILE *f = fopen(path_of("tk2/shard-00001.tok"), "r+b");
    unsigned char b = 0;
    if (f && fseek(f, 48, SEEK_SET) == 0 && fread(&b, 1, 1, f) == 1 && fseek(f, 48, SEEK_SET) == 0)
        b ^= 0x5a, fwrite(&b, 1, 1, f);
    if (f) fclose(f);
    l = NULL;
    CHECK(data_loader_open(&l, &c, &err) != 0 && strstr(err.msg, "written by two tokenizers") &&
              strstr(err.msg, "shard-00000.tok by ") && strstr(err.msg, "shard-00001.tok by ") &&
              strstr(err.msg, "test_tokenizer"),
          "shards of two tokenizers, no tokenizer: %s", l ? "opened" : err.msg);
    if (l) data_loader_free(l);
}

/* A save while the position's file cannot be opened by its path (renamed away for a moment,
 * a network file system's hiccup) records no window it cannot read: the resume on the same
 * data, the file back, continues (it had recorded an unreadable window and refused every
 * resume from that checkpoint: a review's finding). A token shard's position (byte offset 0)
 * reads nothing for its window at all. */
static void test_save_while_away(data_tok *tok) {
    base_err err;
    data_loader_cfg c;
    if (!tok ||
        tokenized("away", "{\"text\": \"one two three four\"}\n{\"text\": \"five six\"}\n", &c))
        return;
    data_loader *l = NULL, *m = NULL;
    int32_t in[3], lab[3];
    CHECK(data_loader_open(&l, &c, &err) == 0, "open: %s", err.msg);
    if (!l) return;
    CHECK(data_loader_next(l, in, lab, NULL, &err) == 1, "a batch: %s", err.msg);
    char from[512], to[520];
    snprintf(from, sizeof from, "%s", path_of("away/shard-00000.tok"));
    snprintf(to, sizeof to, "%s.away", from);
    data_loader_state st;
    CHECK(rename(from, to) == 0, "rename away");
    data_loader_get_state(l, &st);
    CHECK(rename(to, from) == 0, "rename back");
    CHECK(data_loader_open(&m, &c, &err) == 0, "reopen: %s", err.msg);
    if (m) {
        CHECK(data_loader_set_state(m, &st, &err) == 0,
              "resume on the same data after a save with the shard away: %s", err.msg);
        data_loader_free(m);
    }
    data_loader_free(l);
}

/* The state's JSON fits DATA_LOADER_STATE_MAX whatever its values (callers' buffers, the
 * checkpoint's per-rank slot); the growth fields come together or not at all. */
static void test_state_bounds(void) {
    data_loader_state s = {INT64_MAX,  INT64_MAX, INT64_MAX,  INT32_MAX,  INT64_MAX,  INT64_MAX,
                           INT64_MAX,  INT64_MAX, UINT64_MAX, UINT64_MAX, UINT64_MAX, UINT64_MAX,
                           UINT64_MAX, INT64_MAX, UINT64_MAX, 1},
                      t;
    char buf[DATA_LOADER_STATE_MAX];
    int ok = data_loader_state_format(&s, buf, sizeof buf) == 0;
    CHECK(ok, "the largest state does not fit");
    CHECK(strlen(buf) == 470, "the largest state is %zu bytes (docs/data.md says 470)",
          strlen(buf));
    ok = ok && data_loader_state_parse(buf, &t, &err_unused) == 0;
    CHECK(ok && t.epoch == s.epoch && t.doc == s.doc && t.doc_tokens == s.doc_tokens &&
              t.file == s.file && t.file_doc == s.file_doc && t.byte_off == s.byte_off &&
              t.line == s.line && t.bad_lines == s.bad_lines && t.fingerprint == s.fingerprint &&
              t.content == s.content && t.setup == s.setup && t.before == s.before &&
              t.name == s.name && t.size == s.size && t.window == s.window &&
              t.map_style == s.map_style,
          "the largest state back: %s (%s)", buf, ok ? "differs" : err_unused.msg);
    const char *head = "{\"epoch\": 0, \"doc\": 0, \"doc_tokens\": 0, \"file\": 0, \"file_doc\": "
                       "0, \"byte_off\": 0, \"line\": 0, \"bad_lines\": 0, \"fingerprint\": "
                       "\"0123456789abcdef\", \"content\": \"0123456789abcdef\"";
    const char *tails[] = {", \"setup\": \"0123456789abcdef\"}", ", \"size\": 5}",
                           ", \"setup\": \"1\", \"before\": \"1\", \"name\": \"1\", \"size\": 5}",
                           ", \"setup\": \"0123456789abcdef\", \"before\": \"0123456789abcdef\", "
                           "\"name\": \"0123456789abcdef\", \"size\": -1}"};
    for (int i = 0; i < 4; i++) {
        char text[DATA_LOADER_STATE_MAX];
        snprintf(text, sizeof text, "%s%s", head, tails[i]);
        CHECK(data_loader_state_parse(text, &t, &err_unused) != 0 &&
                  strstr(err_unused.msg, "go together"),
              "state with '%s' accepted", tails[i]);
    }
}

/* A hand-edited state whose counters are near INT64_MAX is refused before the reader adds to
 * them (a signed overflow under UBSan before) */
static void test_state_huge(void) {
    write_str("huge.jsonl", "{\"text\": \"abc\"}\n{\"text\": \"defg\"}\n");
    data_loader_cfg c = cfg("huge.jsonl", 3, 1);
    data_loader *l = NULL;
    data_loader_state s;
    base_err err;
    CHECK(data_loader_open(&l, &c, &err) == 0, "%s", err.msg);
    if (!l) return;
    data_loader_get_state(l, &s);
    int64_t *fields[] = {&s.epoch,    &s.doc,  &s.doc_tokens, &s.file_doc,
                         &s.byte_off, &s.line, &s.bad_lines,  &s.size};
    for (int i = 0; i < 8; i++) {
        const int64_t keep = *fields[i];
        *fields[i] = INT64_MAX;
        CHECK(data_loader_set_state(l, &s, &err) != 0 && strstr(err.msg, "2^62"),
              "field %d at INT64_MAX: %s", i, err.msg);
        *fields[i] = keep;
    }
    CHECK(data_loader_set_state(l, &s, &err) == 0, "the state itself: %s", err.msg);
    data_loader_free(l);
}

/* A shard folder that grows is still refused while a titan tokenize writes it (its mark) or
 * holds an unfinished shard, before any position is looked at. */
static void test_grow_tokenize_marks(data_tok *tok) {
    if (!tok) return;
    base_err err;
    data_loader_cfg c = cfg("gs", 5, 2);
    c.enc.tok = tok;
    c.enc.vocab_size = data_tok_vocab_size(tok);
    write_str("gs/" DATA_TOKENIZE_MARK, "");
    data_loader *l;
    CHECK(data_loader_open(&l, &c, &err) != 0 && strstr(err.msg, "a titan tokenize is writing"),
          "a folder with the tokenize mark opened: %s", err.msg);
    unlink(path_of("gs/" DATA_TOKENIZE_MARK));
    write_str("gs/shard-00012.tok.tmp", "");
    c.path = path_of("gs");
    CHECK(data_loader_open(&l, &c, &err) != 0 && strstr(err.msg, "an unfinished shard"),
          "a folder with a .tok.tmp opened: %s", err.msg);
    unlink(path_of("gs/shard-00012.tok.tmp"));
}

/* Document masking's packing (doc_shift, torchtitan 0.3's): documents of one repeated letter
 * each (byte tokens: no bos / eos; lens[d] letters 'a' + d, an empty one and some of one letter
 * among them), so each document adds lens[d] - 1 inputs whose labels are the same letter, one of
 * a letter adds none, and a position is 0 where the letter changes or the window starts. The
 * expected stream is built here from lens[] (this rank's documents, cycled); checked over
 * epochs, on rank 1 of 2, after a resume, in a short last batch, and with positions asked
 * without doc_shift (refused). */
static const int g_doc_lens[] = {1, 5, 40, 3, 0, 1, 1, 17, 64, 2, 9, 1, 30};
#define N_DOC_LENS ((int)(sizeof g_doc_lens / sizeof g_doc_lens[0]))

static void check_docs(data_loader_cfg c, int n, const char *what) {
    base_err err;
    enum { NMAX = 4 * 33, SMAX = 8192 };
    const int T = c.seq_len, NT = c.batch * T;
    const int dp = c.dp_size ? c.dp_size : 1;
    char want[SMAX]; /* the expected inputs, this rank's documents cycled */
    int want_pos[SMAX], k = 0;
    for (int d = 0; k < SMAX - 64; d = (d + 1) % N_DOC_LENS)
        for (int i = 0; d % dp == c.dp_rank && i + 1 < g_doc_lens[d]; i++) {
            want[k] = (char)('a' + d);
            want_pos[k++] = i;
        }
    data_loader *docs = NULL, *again = NULL;
    c.pad_label = -100;
    c.doc_shift = 1;
    CHECK(data_loader_open(&docs, &c, &err) == 0, "%s: %s", what, err.msg);
    int32_t x[NMAX], y[NMAX], pos[NMAX], x3[NMAX], y3[NMAX], p3[NMAX];
    data_loader_state st;
    int bad = 0, at = 0, rows_seen = 0;
    for (int b = 0; docs && b < n && NT <= NMAX; b++) {
        const int got = data_loader_next(docs, x, y, pos, &err);
        CHECK(got == 1, "%s batch %d: %s", what, b, err.msg);
        if (got != 1) break;
        for (int i = 0; i < NT && !bad; i++) {
            const int t = i % T, row_at = at + i - t; /* where this row starts in want */
            const int missing = c.partial_last && y[i] == -100;
            const int wp = want_pos[at + i] - (t && want_pos[at + i] >= t ? want_pos[row_at] : 0);
            /* a position normalised per window: the window's first document part from 0 */
            const int wpos =
                missing ? t : (t == 0 ? 0 : (want[at + i] != want[at + i - 1] ? 0 : wp));
            bad = missing ? (x[i] != 0 || pos[i] != t)
                          : (x[i] != want[at + i] || y[i] != want[at + i] || pos[i] != wpos);
            CHECK(!bad, "%s batch %d token %d: input %c (want %c) label %d position %d (want %d)",
                  what, b, i, x[i], want[at + i], y[i], pos[i], wpos);
            rows_seen += t == 0 && !missing;
        }
        at += NT;
        if (b == n / 2) { /* a resume gives the next batch's inputs, labels and positions */
            data_loader_get_state(docs, &st);
            CHECK(data_loader_open(&again, &c, &err) == 0 &&
                      data_loader_set_state(again, &st, &err) == 0,
                  "%s: resume: %s", what, err.msg);
        } else if (b == n / 2 + 1 && again) {
            CHECK(data_loader_next(again, x3, y3, p3, &err) == 1 && !memcmp(x, x3, NT * 4) &&
                      !memcmp(y, y3, NT * 4) && !memcmp(p3, pos, NT * 4),
                  "%s: the resumed batch differs", what);
        }
    }
    CHECK(rows_seen > 0, "%s: no rows", what);
    data_loader_free(docs);
    data_loader_free(again);
}

static void test_documents(data_tok *tok) {
    char buf[4096];
    size_t k = 0;
    for (int d = 0; d < N_DOC_LENS; d++) {
        k += (size_t)snprintf(buf + k, sizeof buf - k, "{\"text\": \"");
        for (int i = 0; i < g_doc_lens[d]; i++) buf[k++] = (char)('a' + d);
        k += (size_t)snprintf(buf + k, sizeof buf - k, "\"}\n");
    }
    buf[k] = 0;
    write_str("docs.jsonl", buf);
    check_docs(cfg("docs.jsonl", 16, 3), 9, "T 16 x 3"); /* ~2.7 epochs of 161 inputs */
    check_docs(cfg("docs.jsonl", 33, 4), 5, "T 33 x 4"); /* 63 inputs of one document cross */
    data_loader_cfg c = cfg("docs.jsonl", 5, 2);
    c.dp_size = 2, c.dp_rank = 1;
    check_docs(c, 12, "rank 1 of 2");
    c = cfg("docs.jsonl", 16, 4);
    c.infinite = 0, c.partial_last = 1; /* 161 inputs: 3 batches, the third 2 of 4 rows */
    check_docs(c, 3, "short last batch");
    base_err err;
    data_loader *a = NULL;
    int32_t x[32], y[32], pos[32];
    c = cfg("docs.jsonl", 16, 2);
    CHECK(data_loader_open(&a, &c, &err) == 0 && data_loader_next(a, x, y, pos, &err) < 0 &&
              strstr(err.msg, "doc_shift"),
          "positions without doc_shift: %s", err.msg);
    data_loader_free(a);
    /* with a tokenizer (bos and eos): no eos is an input, each bos input starts a document at
     * position 0, a label is the next input in its document, and the last input's the eos */
    c = cfg("docs.jsonl", 16, 2);
    c.enc = (data_encoder){tok, tok ? data_tok_vocab_size(tok) : 0}; /* none: failed in main */
    c.doc_shift = 1;
    a = NULL;
    CHECK(tok && data_loader_open(&a, &c, &err) == 0, "%s", tok ? err.msg : "no test tokenizer");
    const int32_t bos = tok ? data_tok_bos_id(tok) : -1, eos = tok ? data_tok_eos_id(tok) : -1;
    int n_ends = 0;
    for (int r = 0; a && r < 10; r++) {
        CHECK(data_loader_next(a, x, y, pos, &err) == 1, "%s", err.msg);
        for (int i = 0; i < 32; i++) {
            const int last = i % 16 == 15; /* the next input is in the next window */
            const int ends = !last && x[i + 1] == bos;
            n_ends += ends;
            CHECK(x[i] != eos && (i % 16 == 0 || x[i] == bos) == !pos[i] &&
                      (last || y[i] == (ends ? eos : x[i + 1])),
                  "tokenizer: token %d: input %d label %d position %d", i, x[i], y[i], pos[i]);
        }
    }
    CHECK(bos >= 0 && eos >= 0 && n_ends > 5, "tokenizer: %d document ends seen (bos %d, eos %d)",
          n_ends, bos, eos);
    data_loader_free(a);
}

/* A map-style loader reads documents of every file in each epoch: a file that shrinks during the
 * run stops it naming the file (the reader had gone on to the next file's first document in place
 * of each missing one), and a resume after a same-size rewrite of a file other than the saved
 * position's (its lines reordered) is refused (the position's own file alone was checked). */
static void test_map_style_changes(void) {
    char a[4096], b[4096];
    size_t ka = 0, kb = 0;
    for (int i = 0; i < 40; i++) {
        ka += (size_t)snprintf(a + ka, sizeof a - ka, "{\"text\": \"a%02d%.*s\"}\n", i, i % 7,
                               "xxxxxxx");
        kb += (size_t)snprintf(b + kb, sizeof b - kb, "{\"text\": \"b%02d%.*s\"}\n", i, i % 5,
                               "yyyyy");
    }
    char sub[300];
    snprintf(sub, sizeof sub, "%s", path_of("ms"));
    mkdir(sub, 0755);
    write_str("ms/a.jsonl", a);
    write_str("ms/b.jsonl", b);
    data_loader_cfg c = cfg("ms", 8, 2);
    c.map_style = 1;
    base_err err;
    data_loader *l = NULL;
    int32_t x[16], y[16];
    int ok = data_loader_open(&l, &c, &err) == 0 && data_loader_next(l, x, y, NULL, &err) == 1;
    CHECK(ok, "map-style open: %s", err.msg);
    data_loader_state st;
    if (l) data_loader_get_state(l, &st);
    CHECK(ok && st.map_style == 1, "the state records map_style");
    data_loader *m = NULL; /* the same files: resumed */
    CHECK(ok && data_loader_open(&m, &c, &err) == 0 && data_loader_set_state(m, &st, &err) == 0,
          "a map-style resume on the same files: %s", err.msg);
    data_loader_free(m);
    /* b.jsonl's lines in another order, the same bytes and size: refused at the resume */
    char b2[4096];
    size_t k2 = 0;
    for (int i = 39; i >= 0; i--)
        k2 += (size_t)snprintf(b2 + k2, sizeof b2 - k2, "{\"text\": \"b%02d%.*s\"}\n", i, i % 5,
                               "yyyyy");
    CHECK(k2 == kb, "the rewrite keeps the size");
    write_str("ms/b.jsonl", b2);
    m = NULL;
    ok = data_loader_open(&m, &c, &err) == 0;
    CHECK(ok && st.file == 0, "reopen: %s (the position is in a.jsonl: %d)", err.msg, st.file);
    CHECK(ok && data_loader_set_state(m, &st, &err) < 0 &&
              strstr(err.msg, "a file of the dataset changed since the checkpoint"),
          "a same-size rewrite of another file resumed map-style: %s", err.msg);
    data_loader_free(m);
    write_str("ms/b.jsonl", b);
    /* a.jsonl cut to 5 lines while read: the first document gone from where it was indexed
     * stops the run, naming the file */
    write_file("ms/a.jsonl", a, (size_t)(strchr(strstr(a, "a05"), '\n') - a + 1));
    int rc = 1;
    for (int i = 0; l && rc == 1 && i < 200; i++) rc = data_loader_next(l, x, y, NULL, &err);
    CHECK(rc < 0 && strstr(err.msg, "a.jsonl: its document at byte") &&
              strstr(err.msg, "is gone: the file changed during the run"),
          "a file shrunk during a map-style run: rc %d (%s)", rc, err.msg);
    data_loader_free(l);
}

/* torchtitan 0.3's interleaver draws: random.Random(seed).choices(range(n), weights=w / sum(w))
 * as Python 3.11 computes them (its outputs below; seeds of one and two 32-bit words, draws
 * after 1000 and 100000 others, a zero and a negligible weight). */
static void test_mix_draws(void) {
    static const struct {
        uint64_t seed;
        int n;
        double w[4];
        int64_t skip;
        int k, want[24];
    } cases[] = {
        {42, 3, {0.5, 0.3, 0.2}, 0, 24, {1, 0, 0, 0, 1, 1, 2, 0, 0, 0, 0, 1,
                                         0, 0, 1, 1, 0, 1, 2, 0, 2, 1, 0, 0}},
        {0, 2, {1, 1}, 0, 24, {1, 1, 0, 0, 1, 0, 1, 0, 0, 1, 1, 1,
                               0, 1, 1, 0, 1, 1, 1, 1, 0, 1, 1, 1}},
        {4294967297ull, 4, {1, 2, 3, 4}, 0, 24, {1, 2, 2, 0, 3, 3, 3, 1, 3, 1, 2, 3,
                                                 3, 3, 3, 3, 3, 1, 3, 0, 0, 3, 0, 3}},
        {9223372036854788153ull, 3, {0.1, 0, 0.9}, 1000, 24, {2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
                                                              2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 0, 2}},
        {7, 3, {1, 1e-12, 1}, 100000, 3, {0, 0, 2}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        int got[24];
        data_mix_draws(cases[c].seed, cases[c].w, cases[c].n, cases[c].skip, cases[c].k, got);
        int bad = -1;
        for (int i = 0; i < cases[c].k && bad < 0; i++)
            if (got[i] != cases[c].want[i]) bad = i;
        CHECK(bad < 0, "mixture draws (seed %llu, case %zu) differ from Python's at draw %d",
              (unsigned long long)cases[c].seed, c, bad);
    }
    base_err e;
    const double neg[2] = {1, -0.5}, zero[2] = {0, 0}, inf[2] = {1, INFINITY}, ok[2] = {0, 2};
    CHECK(data_mix_weights_check(neg, 2, &e) && strstr(e.msg, "weight 2"), "a negative weight");
    CHECK(data_mix_weights_check(zero, 2, &e) && strstr(e.msg, "sum"), "weights summing to 0");
    CHECK(data_mix_weights_check(inf, 2, &e), "an infinite weight");
    CHECK(!data_mix_weights_check(ok, 2, &e), "a zero weight beside a positive one");
}

/* Dataset.shuffle(seed)'s order: numpy's own permutations (numpy 2.4, the venv's), printed by
 *   python -c "import numpy as np; print(np.random.default_rng(42).permutation(10).tolist())"
 * and, for the million, p[:6], p[-3:] and sum((i + 1) * p[i]) of default_rng(44).permutation(
 * 1000003) (64-bit wrap); a seed of 33 bits takes SeedSequence's second entropy word. The
 * end-to-end orders (chat, text; epochs, ranks) are checked against numpy in check_loader.py. */
static void test_shuffle_permutation(void) {
    static const struct {
        uint64_t seed;
        int64_t n, want[12];
    } small[] = {{42, 10, {5, 6, 0, 7, 3, 2, 4, 9, 1, 8}},
                 {43, 7, {2, 6, 5, 1, 4, 0, 3}},
                 {42, 1, {0}},
                 {42, 2, {1, 0}},
                 {4294967301ull, 12, {6, 9, 5, 8, 2, 4, 7, 0, 11, 10, 3, 1}}};
    for (size_t c = 0; c < sizeof small / sizeof *small; c++) {
        int64_t got[12];
        data_shuffle_permutation(small[c].seed, small[c].n, got);
        CHECK(!memcmp(got, small[c].want, (size_t)small[c].n * sizeof *got),
              "permutation(seed %llu, n %lld) is not numpy's (first %lld, want %lld)",
              (unsigned long long)small[c].seed, (long long)small[c].n, (long long)got[0],
              (long long)small[c].want[0]);
    }
    const int64_t n = 1000003;
    int64_t *p = malloc((size_t)n * sizeof *p);
    CHECK(p != NULL, "out of memory");
    if (!p) return;
    data_shuffle_permutation(44, n, p);
    static const int64_t head[6] = {507916, 639691, 955189, 137532, 623470, 240507},
                         tail[3] = {924806, 29703, 439927};
    uint64_t sum = 0;
    for (int64_t i = 0; i < n; i++) sum += (uint64_t)(i + 1) * (uint64_t)p[i];
    CHECK(!memcmp(p, head, sizeof head) && !memcmp(p + n - 3, tail, sizeof tail) &&
              sum == 250097863606870479ull,
          "permutation(seed 44, n 1000003) is not numpy's (p[0] %lld, weighted sum %llu)",
          (long long)p[0], (unsigned long long)sum);
    free(p);
}

int main(void) {
    check_tmpdir(dir, sizeof dir, "titan_test_loader");
    base_err err;
    base_log_set_level(BASE_LOG_ERROR); /* epoch restarts and skips would flood the log */
    data_tok *tok = NULL;
    if (data_tok_load(TITAN_SHARED_DIR "/data/test_tokenizer", &tok, &err)) {
        printf("FAIL test tokenizer: %s\n", err.msg);
        failures++;
    }
    test_packing();
    test_text_paragraphs();
    test_text_crlf();
    test_resume(tok);
    test_shard_order(tok);
    test_bad_jsonl();
    test_jsonl_bom(tok);
    test_text_nul();
    test_empty_texts(tok);
    test_bad_shards(tok);
    test_bad_state();
    test_grow(tok);
    test_grow_refused();
    test_grow_window();
    test_grow_while_read();
    test_grow_bad_lines();
    test_shards_two_tokenizers(tok);
    test_save_while_away(tok);
    test_state_bounds();
    test_state_huge();
    test_grow_tokenize_marks(tok);
    test_documents(tok);
    test_shuffle_permutation();
    test_mix_draws();
    test_map_style_changes();
    data_tok_free(tok);
    check_tmpdir_remove(dir);
    return check_report("test_loader");
}
