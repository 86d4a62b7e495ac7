/* data: the subcommands that drive the tokenizer and the loader (titan encode, decode,
 * tokenize, data). */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data.h"

void data_cmd_encode_usage(FILE *f) {
    fprintf(f, "usage: titan encode --tokenizer DIR [--file F] [--chat] [--no-generation-prompt]\n"
               "                    [--no-thinking]\n"
               "Text -> token ids, space-separated on one line. The text is F's or stdin's.\n"
               "  --chat                  the input is a JSON list of {role, content} messages,\n"
               "                          rendered with the Qwen3 chat template first\n"
               "  --no-generation-prompt  with --chat: no assistant turn opened at the end\n"
               "  --no-thinking           with --chat: an empty <think></think> block\n"
               "                          (enable_thinking false)\n");
}

void data_cmd_decode_usage(FILE *f) {
    fprintf(f, "usage: titan decode --tokenizer DIR [--file F] [--skip-special]\n"
               "Token ids (whitespace-separated, from F or stdin) -> text.\n"
               "  --skip-special   leave out special tokens (<|im_end|>, ...)\n");
}

/* titan encode / decode: the tokenizer on the command line (ids space-separated, one line). */
static int codec(int argc, char **argv, int encode, base_err *err) {
    const char *dir = NULL, *file = NULL;
    int skip_special = 0, chat = 0, gen_prompt = 1, thinking = 1;
    base_args it = {argc, argv, 0, err};
    for (it.i = 2; it.i < argc; it.i++) {
        const char *a = argv[it.i];
        if (base_args_is_help(&it)) {
            (encode ? data_cmd_encode_usage : data_cmd_decode_usage)(stdout);
            return 0;
        } else if (!strcmp(a, "--tokenizer")) {
            if (!(dir = base_args_value(&it))) return -1;
        } else if (!strcmp(a, "--file")) {
            if (!(file = base_args_value(&it))) return -1;
        } else if (!encode && !strcmp(a, "--skip-special")) {
            skip_special = 1;
        } else if (encode && !strcmp(a, "--chat")) {
            chat = 1;
        } else if (encode && !strcmp(a, "--no-generation-prompt")) {
            gen_prompt = 0;
        } else if (encode && !strcmp(a, "--no-thinking")) {
            thinking = 0;
        } else {
            return base_fail(err, "%s: unknown option '%s'", argv[1], a);
        }
    }
    if (!dir) return base_fail(err, "%s: --tokenizer DIR is required", argv[1]);
    if (!chat && (!gen_prompt || !thinking))
        return base_fail(err, "encode: %s needs --chat",
                         !gen_prompt ? "--no-generation-prompt" : "--no-thinking");
    data_tok *tok = NULL;
    if (data_tok_load(dir, &tok, err)) return -1;
    size_t len = 0;
    char *in = base_read_file(file, (size_t)1 << 40, &len, err);
    int rc = in ? 0 : -1;
    base_err tw; /* rendered with Qwen3's template whatever the tokenizer's: said */
    if (!rc && encode && chat && data_chat_template_check(tok, &tw))
        base_log(BASE_LOG_WARN, "encode --chat: %s; rendering with Qwen3's", tw.msg);
    if (!rc && encode && chat) { /* the input is a JSON list of messages: render it first */
        data_chat_msg *msgs = NULL;
        int n = 0;
        char *text = NULL;
        rc = data_chat_parse_json(in, len, &msgs, &n, err);
        if (!rc) rc = data_chat_render(msgs, n, gen_prompt, thinking, &text, err);
        data_chat_msgs_free(msgs);
        if (!rc) {
            free(in);
            in = text;
            len = strlen(text);
        } else {
            free(text);
        }
    }
    if (!rc && encode) {
        data_tok_ids ids = {0};
        rc = data_tok_encode(tok, in, len, &ids, err);
        for (size_t i = 0; !rc && i < ids.n; i++) printf(i ? " %d" : "%d", ids.ids[i]);
        if (!rc) printf("\n");
        if (!rc) rc = base_flush(stdout, "standard output", err);
        data_tok_ids_free(&ids);
    } else if (!rc) {
        data_tok_ids ids = {0};
        char *p = in, *end = in + len;
        while (!rc) {
            while (p < end && (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')) p++;
            if (p >= end) break;
            char *q = p;
            while (q < end && *q != ' ' && *q != '\n' && *q != '\t' && *q != '\r') q++;
            char word[32];
            int64_t v;
            if (q - p >= (ptrdiff_t)sizeof word) {
                char shown[4 * 20 + 1];
                base_escape(p, 20, shown, sizeof shown);
                rc = base_fail(err, "%s: token id '%s...' (byte %td) is too long",
                               file ? file : "stdin", shown, p - in);
                break;
            }
            memcpy(word, p, (size_t)(q - p));
            word[q - p] = 0;
            /* a NUL inside the token would end the C string early: "9707\0junk" is no id */
            if (memchr(word, 0, (size_t)(q - p)) || base_parse_i64(word, &v) || v < 0 ||
                v > INT32_MAX) {
                char shown[4 * sizeof word]; /* the input may be binary: never echo raw bytes */
                base_escape(p, (size_t)(q - p), shown, sizeof shown);
                rc = base_fail(err, "%s: '%s' (byte %td) is not a token id", file ? file : "stdin",
                               shown, p - in);
                break;
            }
            if (ids.n == ids.cap) {
                size_t cap = ids.cap ? ids.cap * 2 : 1024;
                int32_t *nid = realloc(ids.ids, cap * sizeof(int32_t));
                if (!nid) {
                    rc = base_fail(err, "out of memory");
                    break;
                }
                ids.ids = nid;
                ids.cap = cap;
            }
            ids.ids[ids.n++] = (int32_t)v;
            p = q;
        }
        char *text = NULL;
        size_t tlen = 0;
        if (!rc) rc = data_tok_decode(tok, ids.ids, ids.n, skip_special, &text, &tlen, err);
        if (!rc) { /* text, as HF's decode makes it: bytes that end mid-character (a token
                      that is part of one) become U+FFFD, not invalid UTF-8 */
            char *fixed = data_utf8_repair(text, tlen, &tlen);
            free(text);
            text = fixed;
            if (!text) rc = base_fail(err, "out of memory");
        }
        if (!rc) fwrite(text, 1, tlen, stdout);
        if (!rc) rc = base_flush(stdout, "standard output", err);
        free(text);
        data_tok_ids_free(&ids);
    }
    free(in);
    data_tok_free(tok);
    return rc;
}

int data_cmd_encode(int argc, char **argv, base_err *err) {
    return codec(argc, argv, 1, err);
}

int data_cmd_decode(int argc, char **argv, base_err *err) {
    return codec(argc, argv, 0, err);
}

/* Dataset options shared by tokenize and data. Returns 1 if the option was consumed. */
typedef struct {
    const char *path, *field, *tokenizer;
    data_format format;
    int skip_bad;
} data_args;

static int parse_data_opt(base_args *it, data_args *d, int *status) {
    const char *o = it->argv[it->i], *v;
    *status = 0;
    if (!strcmp(o, "--skip-bad-lines")) {
        d->skip_bad = 1;
        return 1;
    }
    if (strcmp(o, "--data") && strcmp(o, "--field") && strcmp(o, "--format") &&
        strcmp(o, "--tokenizer"))
        return 0;
    if (!(v = base_args_value(it))) return *status = -1, 1;
    if (!strcmp(o, "--data")) d->path = v;
    if (!strcmp(o, "--field")) d->field = v;
    if (!strcmp(o, "--tokenizer")) d->tokenizer = v;
    if (!strcmp(o, "--format") && data_format_parse(v, &d->format))
        *status = base_fail(it->err, "--format: '%s' is not auto, text, jsonl, tokens or chat", v);
    return 1;
}

static const char data_opts_help[] =
    "  --data PATH        a file, a folder (its files, sorted) or a quoted glob\n"
    "  --format F         auto (default: shard magic, .jsonl/.json/.ndjson, else text), text\n"
    "                     (a document per blank-line paragraph), jsonl, tokens (shards),\n"
    "                     chat (JSON Lines of [user, assistant] messages: torchtitan 0.3's\n"
    "                     ChatDataset; titan data prints them as --documents does)\n"
    "  --field NAME       JSONL field holding the text (text; chat: messages)\n"
    "  --skip-bad-lines   skip (count, log) malformed JSONL lines instead of failing\n";

void data_cmd_tokenize_usage(FILE *f) {
    fprintf(f,
            "usage: titan tokenize --tokenizer DIR --data PATH --out DIR [options]\n"
            "Encodes every document (order kept) into OUT/shard-00000.tok, ...\n%s"
            "  --out DIR          output folder (must not hold .tok files yet)\n"
            "  --shard-tokens N   start a new shard after N tokens (2^28)\n"
            "  --threads N        encoding threads (default: all cores)\n",
            data_opts_help);
}

/* titan tokenize: dataset -> token shards, on all cores. */
int data_cmd_tokenize(int argc, char **argv, base_err *err) {
    data_args d = {0};
    data_tokenize_cfg c = {0};
    base_args it = {argc, argv, 0, err};
    for (it.i = 2; it.i < argc; it.i++) {
        const char *a = argv[it.i];
        int st = 0;
        if (parse_data_opt(&it, &d, &st)) {
            if (st) return -1;
        } else if (!strcmp(a, "--out")) {
            if (!(c.out_dir = base_args_value(&it))) return -1;
        } else if (!strcmp(a, "--threads")) {
            if (base_args_int(&it, &c.threads, 1)) return -1;
        } else if (!strcmp(a, "--shard-tokens")) {
            int n;
            if (base_args_int(&it, &n, 1)) return -1;
            c.shard_tokens = n;
        } else if (base_args_is_help(&it)) {
            data_cmd_tokenize_usage(stdout);
            return 0;
        } else {
            return base_fail(err, "tokenize: unknown option '%s'", a);
        }
    }
    if (!d.path || !d.tokenizer || !c.out_dir)
        return base_fail(err, "tokenize: --data, --tokenizer and --out are required");
    c.path = d.path;
    c.format = d.format;
    c.field = d.field;
    c.skip_bad_lines = d.skip_bad;
    c.tokenizer = d.tokenizer;
    if (c.threads > 0) c.threads = base_threads_bound(c.threads, "tokenize --threads");
    int64_t docs, tokens;
    const double t0 = base_now();
    if (data_tokenize(&c, &docs, &tokens, err)) return -1;
    printf("tokenized %lld documents into %lld tokens in %s (%.2f s)\n", (long long)docs,
           (long long)tokens, c.out_dir, base_now() - t0);
    return 0;
}

/* The comma-separated items of option opt's value v (each may be empty), copied into buf[cap]:
 * items[*n], at most DATA_MIX_MAX (one a source); `what` names them in the error. */
static int split_list(const char *opt, const char *what, const char *v, char *buf, size_t cap,
                      const char **items, int *n, base_err *err) {
    if (strlen(v) >= cap) return base_fail(err, "data: %s: too long", opt);
    strcpy(buf, v);
    *n = 0;
    for (char *p = buf;;) {
        if (*n == DATA_MIX_MAX)
            return base_fail(err, "data: %s: more than %d %s", opt, DATA_MIX_MAX, what);
        items[(*n)++] = p;
        char *q = strchr(p, ',');
        if (!q) return 0;
        *q = 0;
        p = q + 1;
    }
}

/* "0.7,0.3" -> w[*n] (each a finite number >= 0, as the config's dataset_weights; the sum is
 * checked at open). */
static int parse_weights(const char *v, double *w, int *n, base_err *err) {
    char buf[4096];
    const char *items[DATA_MIX_MAX];
    if (split_list("--weights", "weights", v, buf, sizeof buf, items, n, err)) return -1;
    for (int i = 0; i < *n; i++) {
        if (strlen(items[i]) >= 64)
            return base_fail(err, "data: --weights: '%.20s...' is no number", items[i]);
        if (base_parse_f64(items[i], &w[i]) || !(w[i] >= 0))
            return base_fail(err, "data: --weights: '%s' is no finite number >= 0", items[i]);
    }
    return 0;
}

void data_cmd_data_usage(FILE *f) {
    fprintf(f,
            "usage: titan data --data PATH [--tokenizer DIR] [options]\n"
            "Prints the loader's windows, one line of seq_len + 1 ids each (input =\n"
            "window[:-1], labels = window[1:]; --documents and chat: inputs -> labels),\n"
            "batch after batch, then its state as JSON on stderr (`state: {...}`).\n%s"
            "  --tokenizer DIR    HF tokenizer folder (default: one token per byte)\n"
            "  --seq-len T        tokens per window, without the extra label (128)\n"
            "  --batch B          windows per batch (1)\n"
            "  --batches N        batches to print (1)\n"
            "  --dp-rank R, --dp-size N   this rank's share of the documents (0, 1)\n"
            "  --vocab-size V     model vocabulary the ids must fit (no limit)\n"
            "  --finite           stop at the end of the data instead of restarting\n"
            "  --documents        document masking's packing (attn_mask_type block_causal,\n"
            "                     torchtitan 0.3's): a line per window of its seq_len\n"
            "                     inputs, ' -> ', their labels, each with a '|' before the\n"
            "                     first of each document\n"
            "  --streaming BOOL   false: read as a map-style dataset (torchtitan 0.3's\n"
            "                     chat examples: shuffled, a contiguous block per rank,\n"
            "                     reshuffled each epoch; docs/data.md); default true,\n"
            "                     chat false\n"
            "  --state JSON       resume from a state printed by an earlier run\n"
            "  --data PATH ...    given more than once: a mixture of those sources, each\n"
            "                     window drawn from one as torchtitan 0.3's interleaved\n"
            "                     loaders draw it (docs/data.md)\n"
            "  --weights W,W,...  the sources' sampling weights (1 each)\n"
            "  --fields F,F,...   the sources' JSONL fields (\"\": --field's)\n"
            "  --mix-seed S       the draws' seed (42)\n",
            data_opts_help);
}

/* titan data: prints the loader's windows ([seq_len + 1] ids per line) and its final state. */
int data_cmd_data(int argc, char **argv, base_err *err) {
    data_args d = {0};
    data_loader_cfg c = {0};
    c.seq_len = 128;
    c.batch = 1;
    c.dp_size = 1;
    c.infinite = 1;
    c.enc.vocab_size = INT32_MAX;
    int batches = 1, documents = 0, streaming = -1, n_paths = 0, n_weights = 0;
    const char *state = NULL, *paths[DATA_MIX_MAX];
    double weights[DATA_MIX_MAX];
    int64_t mix_seed = 42;
    int mix_seed_set = 0, n_fields = 0;
    char fields_buf[4096];
    const char *fields[DATA_MIX_MAX];
    base_args it = {argc, argv, 0, err};
    for (it.i = 2; it.i < argc; it.i++) {
        const char *a = argv[it.i];
        int st = 0;
        if (!strcmp(a, "--data")) {
            const char *v = base_args_value(&it);
            st = !v ? -1
                 : n_paths < DATA_MIX_MAX
                     ? (paths[n_paths++] = v, 0)
                     : base_fail(err, "data: at most %d --data sources", DATA_MIX_MAX);
        } else if (!strcmp(a, "--weights")) {
            const char *v = base_args_value(&it);
            st = v ? parse_weights(v, weights, &n_weights, err) : -1;
        } else if (!strcmp(a, "--fields")) { /* one a source, comma-separated */
            const char *v = base_args_value(&it);
            st = v ? split_list("--fields", "fields", v, fields_buf, sizeof fields_buf, fields,
                                &n_fields, err)
                   : -1;
        } else if (!strcmp(a, "--mix-seed")) {
            const char *v = base_args_value(&it);
            st = !v ? -1
                 : base_parse_i64(v, &mix_seed) || mix_seed < 0
                     ? base_fail(err, "data: --mix-seed takes an integer >= 0, not '%.40s'", v)
                     : (mix_seed_set = 1, 0);
        } else if (parse_data_opt(&it, &d, &st)) {
        } else if (!strcmp(a, "--seq-len")) {
            st = base_args_int(&it, &c.seq_len, 1);
        } else if (!strcmp(a, "--batch")) {
            st = base_args_int(&it, &c.batch, 1);
        } else if (!strcmp(a, "--batches")) {
            st = base_args_int(&it, &batches, 0);
        } else if (!strcmp(a, "--dp-rank")) {
            st = base_args_int(&it, &c.dp_rank, 0);
        } else if (!strcmp(a, "--dp-size")) {
            st = base_args_int(&it, &c.dp_size, 1);
        } else if (!strcmp(a, "--vocab-size")) {
            st = base_args_int(&it, &c.enc.vocab_size, 1);
        } else if (!strcmp(a, "--finite")) {
            c.infinite = 0;
        } else if (!strcmp(a, "--documents")) {
            documents = 1;
        } else if (!strcmp(a, "--streaming")) {
            const char *v = base_args_value(&it);
            st = !v                   ? -1
                 : !strcmp(v, "true") ? (streaming = 1, 0)
                 : !strcmp(v, "false")
                     ? (streaming = 0, 0)
                     : base_fail(err, "data: --streaming takes true or false, not '%s'", v);
        } else if (!strcmp(a, "--state")) {
            st = (state = base_args_value(&it)) ? 0 : -1;
        } else if (base_args_is_help(&it)) {
            data_cmd_data_usage(stdout);
            return 0;
        } else {
            return base_fail(err, "data: unknown option '%s'", a);
        }
        if (st) return -1;
    }
    if (!n_paths) return base_fail(err, "data: --data PATH is required");
    if ((n_weights || mix_seed_set || n_fields) && n_paths < 2)
        return base_fail(err, "data: --weights, --fields and --mix-seed need two or more --data "
                              "sources (one dataset: --field)");
    if (n_fields && n_fields != n_paths)
        return base_fail(err, "data: --fields has %d fields for %d --data sources", n_fields,
                         n_paths);
    if (n_weights && n_weights != n_paths)
        return base_fail(err, "data: --weights has %d weights for %d --data sources", n_weights,
                         n_paths);
    base_log_all_to_stderr(1); /* stdout is the windows */
    c.format = d.format;
    c.field = d.field;
    c.skip_bad_lines = d.skip_bad;
    documents |= d.format == DATA_FMT_CHAT; /* pairs, prompts masked: only that view shows them */
    c.doc_shift = documents;
    c.map_style = streaming < 0 ? d.format == DATA_FMT_CHAT : !streaming;
    c.pad_label = -100; /* a masked label, printed as torchtitan's IGNORE_INDEX */
    if (d.tokenizer && data_tok_load(d.tokenizer, &c.enc.tok, err)) return -1;
    const data_mix_cfg mc = {.loader = c,
                             .paths = paths,
                             .weights = n_weights ? weights : NULL,
                             .fields = n_fields ? fields : NULL,
                             .n = n_paths,
                             .seed = (uint64_t)mix_seed};
    data_mix *l = NULL;
    const size_t n = (size_t)c.batch * (size_t)c.seq_len;
    int32_t *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    int32_t *pos = documents ? malloc(n * sizeof *pos) : NULL;
    int rc = !x || !y || (documents && !pos) ? base_fail(err, "out of memory")
                                             : data_mix_open(&l, &mc, err);
    if (!rc && state) rc = data_mix_state_restore(l, state, err);
    for (int b = 0; !rc && b < batches; b++) {
        int got = data_mix_next(l, x, y, pos, err);
        if (got <= 0) {
            rc = got;
            break;
        }
        for (int w = 0; w < c.batch; w++) {
            const size_t at = (size_t)w * c.seq_len;
            const int32_t *xw = x + at, *yw = y + at;
            if (!pos) {
                for (int t = 0; t < c.seq_len; t++) printf("%d ", xw[t]);
                printf("%d\n", yw[c.seq_len - 1]);
                continue;
            }
            for (int half = 0; half < 2; half++)
                for (int t = 0; t < c.seq_len; t++)
                    printf(t > 0 && pos[at + t] == 0 ? " | %d"
                           : t                       ? " %d"
                           : half                    ? " -> %d"
                                                     : "%d",
                           (half ? yw : xw)[t]);
            printf("\n");
        }
    }
    if (!rc) {
        const size_t cap = data_mix_state_max(l);
        char *buf = malloc(cap);
        int64_t rows[DATA_MIX_MAX];
        data_mix_rows(l, rows);
        rc = !buf || data_mix_state_format(l, buf, cap) ? base_fail(err, "out of memory") : 0;
        fflush(stdout);
        for (int i = 0; !rc && n_paths > 1 && i < n_paths; i++)
            fprintf(stderr, "source %d: %lld rows (%s)\n", i + 1, (long long)rows[i], paths[i]);
        if (!rc) fprintf(stderr, "state: %s\n", buf);
        free(buf);
    }
    data_mix_free(l);
    data_tok_free(c.enc.tok);
    free(x);
    free(y);
    free(pos);
    return rc;
}
