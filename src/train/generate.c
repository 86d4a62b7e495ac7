/* train: loading a model for inference, the generation loop and the streaming text output. */
#include <jansson.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/checkpoint.h"
#include "train/internal.h"

/* Any model source (checkpoint.h): arguments from it, or from fallback for a bare file. A
 * training checkpoint of an MoE trained with the expert bias also restores the bias (the
 * model routes with it). */
int train_load_model(model *m, const char *path, const model_args *fallback, ops_prec prec,
                     base_err *err) {
    memset(m, 0, sizeof *m);
    ckpt_source src;
    model_args a = *fallback;
    json_t *t = NULL; /* a training checkpoint's "train" state */
    if (ckpt_source_open(&src, path, err)) return -1;
    if (src.kind != CKPT_SRC_FILE && ckpt_source_args(&src, &a, err)) return -1;
    if (src.kind == CKPT_SRC_STEP && !(t = train_step_state(src.folder, src.step, err))) return -1;
    model_build_opts bo = {.batch = 1,
                           .seq_len = 1,
                           .prec = prec,
                           .balance = json_object_get(t, "expert_bias") ? MODEL_BALANCE_BIAS
                                                                        : MODEL_BALANCE_NONE};
    base_err built;
    int rc = model_build_unset(m, &a, &bo, &built); /* ckpt_source_load writes every weight */
    if (rc) /* (out of memory for what the source describes: name it) */
        strstr(built.msg, path) ? base_fail(err, "%s", built.msg)
                                : base_fail(err, "%s: %s", path, built.msg);
    if (!rc && t) rc = train_moe_bias_load(m, t, path, err);
    json_decref(t);
    if (rc) return -1;
    base_err why;
    if (ckpt_source_load(&src, m, m->w, &why))
        return src.kind == CKPT_SRC_FILE
                   ? base_fail(err, "%s (model arguments from --flavor %s / --set)", why.msg,
                               fallback->flavor)
                   : base_fail(err, "%s", why.msg);
    return 0;
}

int train_generate_tokenizer(const char *path, const char **tok_dir, char *buf, size_t n,
                             int *is_ckpt, base_err *err) {
    if (!*tok_dir && base_has_file(path, "tokenizer.json")) *tok_dir = path;
    ckpt_source src;
    base_err ignore; /* not a model: train_load_model says why */
    *is_ckpt = ckpt_source_open(&src, path, &ignore) == 0 && src.kind == CKPT_SRC_STEP;
    if (!*is_ckpt) return 0;
    char where[4200];
    json_t *t = train_step_state(src.folder, src.step, err);
    if (!t) return -1;
    snprintf(where, sizeof where, "%s/step-%lld", src.folder, (long long)src.step);
    const json_t *rec = json_object_get(t, "tokenizer");
    const json_t *vocab = json_object_get(json_object_get(t, "model"), "vocab_size");
    const char *rpath = json_string_value(json_object_get(rec, "path"));
    const char *rhash = json_string_value(json_object_get(rec, "tokenizer_json_fnv1a64"));
    char have[17] = "";
    uint64_t h;
    if (*tok_dir && ckpt_tokenizer_hash(*tok_dir, &h) == 0)
        snprintf(have, sizeof have, "%016llx", (unsigned long long)h);
    int rc = 0;
    if (json_is_string(rec) && !strcmp(json_string_value(rec), "bytes")) {
        if (*tok_dir)
            rc = base_fail(err,
                           "%s was trained on bytes (one token per byte), not with a tokenizer: "
                           "drop --tokenizer %s",
                           where, *tok_dir);
    } else if (rpath && rhash) {
        if (*tok_dir && strcmp(have, rhash))
            rc = base_fail(err,
                           "%s was trained with the tokenizer %s (tokenizer.json FNV-1a 64 %s); "
                           "%s/tokenizer.json is another (%s)",
                           where, rpath, rhash, *tok_dir, have[0] ? have : "unreadable");
        if (!*tok_dir) {
            const int gone = ckpt_tokenizer_hash(rpath, &h) != 0;
            if (!gone) snprintf(have, sizeof have, "%016llx", (unsigned long long)h);
            if (gone)
                rc = base_fail(err,
                               "%s was trained with the tokenizer %s, which is gone: pass "
                               "--tokenizer DIR with that tokenizer (tokenizer.json FNV-1a 64 %s)",
                               where, rpath, rhash);
            else if (strcmp(have, rhash))
                rc = base_fail(err,
                               "%s was trained with the tokenizer %s, whose tokenizer.json has "
                               "changed since (FNV-1a 64 %s, recorded %s): pass --tokenizer DIR "
                               "with the tokenizer it was trained with",
                               where, rpath, have, rhash);
            else {
                snprintf(buf, n, "%s", rpath);
                *tok_dir = buf;
            }
        }
    } else if (!rec && !*tok_dir && json_integer_value(vocab) != 256) {
        rc = base_fail(err,
                       "%s does not record the tokenizer it was trained with and its vocabulary "
                       "is %lld, not 256 (bytes): pass --tokenizer DIR",
                       where, (long long)json_integer_value(vocab));
    }
    json_decref(t);
    return rc;
}

/* ---- streaming text ------------------------------------------------------------------ */

/* Length of the complete UTF-8 prefix of b[0..n): an unfinished character at the end (a lead
 * byte with fewer continuation bytes than it announces) is held back; anything invalid is
 * let through (it will never complete). */
static int utf8_complete(const unsigned char *b, int n) {
    for (int back = 1; back <= 3 && back <= n; back++) {
        const unsigned char c = b[n - back];
        if ((c & 0xC0) == 0x80) continue; /* continuation: look further back */
        const int need = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 1;
        return need > back ? n - back : n;
    }
    return n;
}

/* Flushes ts->out after each token: a failed write (a full disk, a closed pipe with SIGPIPE
 * ignored) stops generation at the first lost token. */
static int stream_flush(train_text_stream *ts, base_err *err) {
    return base_flush(ts->out, ts->out == stdout ? "standard output" : "the output", err);
}

int train_stream_token(train_text_stream *ts, int32_t id, base_err *err) {
    if (!ts->tok) {
        if (ts->as_ids)
            fprintf(ts->out, "%d ", id);
        else
            fputc(id < 256 ? id : '?', ts->out);
        return stream_flush(ts, err);
    }
    /* An id past the tokenizer's (the model's vocabulary is padded: Qwen3's has 151936 rows
     * for 151669 tokenizer ids) or in a hole of it has no text: nothing, as HF's decode. */
    if (!data_tok_token(ts->tok, id)) return stream_flush(ts, err);
    char *text = NULL;
    size_t len = 0;
    if (data_tok_decode(ts->tok, &id, 1, 0, &text, &len, err)) return -1;
    size_t i = 0;
    while (i < len) { /* move bytes through the pending buffer, writing complete characters */
        while (i < len && ts->n_pending < (int)sizeof ts->pending)
            ts->pending[ts->n_pending++] = (unsigned char)text[i++];
        const int k = utf8_complete(ts->pending, ts->n_pending);
        fwrite(ts->pending, 1, (size_t)k, ts->out);
        memmove(ts->pending, ts->pending + k, (size_t)(ts->n_pending - k));
        ts->n_pending -= k;
    }
    free(text);
    return stream_flush(ts, err);
}

void train_stream_finish(train_text_stream *ts) {
    fwrite(ts->pending, 1, (size_t)ts->n_pending, ts->out);
    ts->n_pending = 0;
    fflush(ts->out);
}

/* ---- the generation loop ------------------------------------------------------------- */

/* Tokens a full context of max_len positions keeps when it slides: its last half (at least 1). */
static int slide_keep(int max_len) {
    return max_len / 2 > 0 ? max_len / 2 : 1;
}

int train_generate(model_infer *s, const int32_t *prompt, int n_prompt, const train_gen_opts *o,
                   train_gen_result *r, base_err *err) {
    memset(r, 0, sizeof *r);
    if (n_prompt < 1) return base_fail(err, "generate: the prompt is empty");
    if (o->max_new_tokens < 0) return base_fail(err, "generate: max_new_tokens < 0");
    const int max_len = model_infer_max_len(s), V = model_infer_vocab(s);
    int32_t *seq = malloc(sizeof(int32_t) * ((size_t)n_prompt + (size_t)o->max_new_tokens));
    float *logits = base_alloc(sizeof(float) * (size_t)V);
    if (!seq || !logits) {
        free(seq);
        base_free(logits);
        return base_fail(err, "out of memory");
    }
    memcpy(seq, prompt, sizeof(int32_t) * (size_t)n_prompt);
    int n = n_prompt;
    const int start = n > max_len ? n - max_len : 0;
    model_infer_reset(s);
    double t0 = base_now();
    int rc = model_infer_forward(s, seq + start, n - start, logits, 0, err);
    r->n_prompt = n - start;
    r->prefill_s = base_now() - t0;
    t0 = base_now();
    while (!rc && r->n_new < o->max_new_tokens) {
        if (o->cancel && o->cancel()) {
            r->cancelled = 1;
            break;
        }
        const int32_t id = model_sample(logits, V, &o->sampler, (uint64_t)n);
        if (id < 0) {
            rc = base_fail(err, "out of memory");
            break;
        }
        seq[n++] = id;
        r->n_new++;
        int stop = 0;
        for (int i = 0; i < o->n_stop; i++) stop |= id == o->stop[i];
        if (stop) {
            r->stopped = 1;
            break;
        }
        if (o->stream && train_stream_token(o->stream, id, err)) {
            rc = -1;
            break;
        }
        if (r->n_new == o->max_new_tokens) break; /* its logits are not needed */
        if (model_infer_len(s) < max_len) {
            rc = model_infer_forward(s, &seq[n - 1], 1, logits, 0, err);
        } else { /* full: continue from the last half of the context */
            const int keep = slide_keep(max_len);
            r->slides++;
            model_infer_reset(s);
            rc = model_infer_forward(s, seq + n - keep, keep, logits, 0, err);
        }
    }
    r->decode_s = base_now() - t0;
    base_free(logits);
    if (rc) {
        free(seq);
        return -1;
    }
    r->tokens = seq;
    r->n_tokens = n;
    return 0;
}

void train_cmd_generate_usage(FILE *f) {
    fprintf(
        f, "usage: titan generate --model PATH [options]\n"
           "Streams the model's continuation of a prompt to stdout as tokens are produced (KV\n"
           "cache), stopping at max-new-tokens or an eos: a Hugging Face folder's\n"
           "generation_config.json / config.json eos_token_id, else the tokenizer's eos /\n"
           "<|im_end|> / <|endoftext|>; speed on stderr.\n"
           "  --model PATH         a training checkpoint (FOLDER/step-N, or FOLDER: its newest\n"
           "                       step, or a run folder holding checkpoint/), or a folder with\n"
           "                       model.safetensors (HF names; its arguments from --flavor /\n"
           "                       --set) or such a file\n"
           "  --flavor NAME, --set KEY=VALUE   model arguments for a model.safetensors\n"
           "  --tokenizer DIR      HF tokenizer folder (default: the model folder when it has\n"
           "                       tokenizer.json, the one a checkpoint records, else one\n"
           "                       token per byte for a checkpoint trained on bytes or a\n"
           "                       vocabulary of 256)\n"
           "  --bytes              one token per byte, no tokenizer: a byte-level model whose\n"
           "                       folder has no tokenizer.json and a vocabulary other than 256\n"
           "  --prompt TEXT        the prompt (default: stdin)\n"
           "  --chat JSON|FILE     a JSON list of {role, content} messages (or a file holding\n"
           "                       it), rendered with the Qwen3 chat template + generation prompt\n"
           "  --no-thinking        with --chat: an empty <think></think> block (enable_thinking\n"
           "                       false)\n"
           "  --max-new-tokens N   tokens to generate at most (256)\n"
           "  --ids                print token ids (decimal, space-separated) instead of text\n"
           "  --temperature T      0 = greedy (0.6)\n"
           "  --top-k K            keep the K most likely tokens, 0 = all (20)\n"
           "  --top-p P            nucleus: the smallest set with probability >= P (0.95)\n"
           "                       (defaults for an HF folder with generation_config.json:\n"
           "                       its do_sample / temperature / top_k / top_p, as\n"
           "                       transformers' generate() takes them)\n"
           "  --seed S             sampling seed (0): same seed, same text\n"
           "  --max-seq-len N      context; the KV cache holds min(N, prompt + new tokens)\n"
           "                       positions (default: the model's max_seq_len, as a\n"
           "                       checkpoint records it or config.json's\n"
           "                       max_position_embeddings; 4096 where none is known)\n"
           "  --threads N          OpenMP/BLAS threads (default: all cores)\n"
           "  --precision P        bfloat16 (bf16 GEMM operands, fp32 accumulation) or float32\n"
           "                       (default: the one a training checkpoint records, else\n"
           "                       training.mixed_precision_param's: bfloat16 where the CPU\n"
           "                       has bf16 units, else float32)\n");
}

/* Stop ids at most: a folder's eos_token_id list is refused past it. */
#define GEN_MAX_STOP 64

/* Adds id to stop[] when it exists (>= 0), is not there yet and there is room. */
static void add_stop(int32_t id, int32_t *stop, int *n) {
    if (id < 0 || *n >= GEN_MAX_STOP) return;
    for (int i = 0; i < *n; i++)
        if (stop[i] == id) return;
    stop[(*n)++] = id;
}

/* DIR/name parsed into *out, its path in p[n]; *out NULL when there is no such file. A file
 * that is not a JSON object is refused by name. */
static int folder_json(const char *dir, const char *name, json_t **out, char *p, size_t n,
                       base_err *err) {
    *out = NULL;
    if (base_path_join(p, n, dir, name, err)) return -1;
    if (!base_has_file(dir, name)) return 0;
    json_error_t je;
    json_t *j = json_load_file(p, JSON_REJECT_DUPLICATES, &je);
    if (!j)
        return base_fail(err, "%s: not valid JSON: %s (line %d column %d)", p, je.text, je.line,
                         je.column);
    if (!json_is_object(j)) {
        json_decref(j);
        return base_fail(err, "%s: not a JSON object", p);
    }
    *out = j;
    return 0;
}

/* The eos ids j (the file p) declares (key eos_token_id: an id or a list of ids) added to
 * stop[]; *declared: whether it declares any (no file, no key or null: no). A malformed value
 * is refused by name. */
static int json_eos_ids(const json_t *j, const char *p, int32_t *stop, int *n, int *declared,
                        base_err *err) {
    const json_t *e = json_object_get(j, "eos_token_id");
    const size_t count = json_is_array(e) ? json_array_size(e) : json_is_integer(e) ? 1 : 0;
    *declared = 0;
    if (e && !json_is_null(e) && !count && !json_is_array(e))
        return base_fail(err, "%s: eos_token_id must be a token id or a list of them", p);
    if (count > GEN_MAX_STOP)
        return base_fail(err, "%s: eos_token_id lists %zu ids, more than %d", p, count,
                         GEN_MAX_STOP);
    for (size_t i = 0; i < count; i++) {
        const json_t *v = json_is_array(e) ? json_array_get(e, i) : e;
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
            return base_fail(err, "%s: eos_token_id: entry %zu is not a token id", p, i);
        add_stop((int32_t)json_integer_value(v), stop, n);
    }
    *declared = count > 0;
    return 0;
}

/* The ids generation stops at, in stop[GEN_MAX_STOP]. A Hugging Face folder hf (NULL: another
 * source) that declares eos ids gives exactly transformers' generate()'s: its
 * generation_config.json eos_token_id (gen, the file gen_path; NULL when absent), else its
 * config.json's. Any other source (or a folder declaring none): the tokenizer's eos,
 * <|im_end|> and <|endoftext|> (Qwen3's generation_config.json list and its tokenizer eos);
 * without a tokenizer, none. */
static int stop_ids(const char *hf, const json_t *gen, const char *gen_path, const data_tok *tok,
                    int32_t *stop, int *n, base_err *err) {
    *n = 0;
    int declared = 0;
    if (gen && json_eos_ids(gen, gen_path, stop, n, &declared, err)) return -1;
    if (hf && !declared) {
        json_t *cfg;
        char p[4200];
        if (folder_json(hf, "config.json", &cfg, p, sizeof p, err)) return -1;
        const int rc = cfg ? json_eos_ids(cfg, p, stop, n, &declared, err) : 0;
        json_decref(cfg);
        if (rc) return -1;
    }
    if (!declared && tok) {
        add_stop(data_tok_eos_id(tok), stop, n);
        add_stop(data_tok_token_id(tok, "<|im_end|>"), stop, n);
        add_stop(data_tok_token_id(tok, "<|endoftext|>"), stop, n);
    }
    return 0;
}

/* The sampling settings the command line leaves unset (set[0..2]: --temperature, --top-k,
 * --top-p given) from a Hugging Face folder's generation_config.json (gen, the file p), as
 * transformers' generate() takes them: do_sample, temperature, top_k, top_p, with its defaults
 * (false, 1.0, 50, 1.0) for absent keys; do_sample false with no sampling option given is
 * greedy. why[n] names the source. A value out of range is refused by name. */
static int gen_config_sampling(const json_t *gen, const char *p, const int set[3],
                               model_sampler *smp, char *why, size_t n, base_err *err) {
    const json_t *ds = json_object_get(gen, "do_sample"), *t = json_object_get(gen, "temperature"),
                 *k = json_object_get(gen, "top_k"), *tp = json_object_get(gen, "top_p");
    if ((ds && !json_is_boolean(ds) && !json_is_null(ds)) ||
        (t && !json_is_null(t) && !(json_is_number(t) && json_number_value(t) >= 0)) ||
        (k && !json_is_null(k) && !(json_is_integer(k) && json_integer_value(k) >= 0)) ||
        (tp && !json_is_null(tp) &&
         !(json_is_number(tp) && json_number_value(tp) > 0 && json_number_value(tp) <= 1)))
        return base_fail(err,
                         "%s: do_sample must be a boolean, temperature >= 0, top_k an integer "
                         ">= 0, top_p in (0, 1]",
                         p);
    /* settings transformers applies and titan does not: said, not silently dropped (a key
     * at its neutral value, or null, changes nothing) */
    static const struct {
        const char *key;
        double neutral;
    } unapplied[] = {
        {"repetition_penalty", 1}, {"min_p", 0},       {"typical_p", 1},
        {"epsilon_cutoff", 0},     {"eta_cutoff", 0},  {"no_repeat_ngram_size", 0},
        {"num_beams", 1},          {"min_length", 0},  {"min_new_tokens", 0},
        {"max_new_tokens", -1},    {"max_length", -1}, {"encoder_repetition_penalty", 1}};
    for (size_t i = 0; i < sizeof unapplied / sizeof unapplied[0]; i++) {
        const json_t *v = json_object_get(gen, unapplied[i].key);
        if (v && !json_is_null(v) &&
            !(json_is_number(v) && json_number_value(v) == unapplied[i].neutral))
            base_log(BASE_LOG_WARN,
                     "%s sets %s, which titan generate does not apply (transformers' generate() "
                     "would)%s",
                     p, unapplied[i].key,
                     unapplied[i].neutral < 0 ? ": the length is --max-new-tokens" : "");
    }
    if (!set[0]) smp->temperature = json_is_number(t) ? json_number_value(t) : 1.0;
    if (!set[1]) smp->top_k = json_is_integer(k) ? (int)json_integer_value(k) : 50;
    if (!set[2]) smp->top_p = json_is_number(tp) ? json_number_value(tp) : 1.0;
    const int greedy = !json_is_true(ds) && !set[0] && !set[1] && !set[2];
    if (greedy) smp->temperature = 0;
    snprintf(why, n, "%s %s", greedy ? "greedy: do_sample false in" : "from", p);
    return 0;
}

/* The prompt's text (malloc'ed) and its length in *n (stdin's may hold NUL bytes, which are
 * text like any other, as for titan encode): --prompt, the --chat messages (a JSON list, or a
 * file holding one) rendered with the chat template and a generation prompt, or stdin. NULL
 * with err filled on failure. */
static char *prompt_text(const char *prompt, const char *chat, int thinking, size_t *n,
                         base_err *err) {
    char *text = NULL;
    size_t len = 0;
    if (chat) {
        const char *j = chat;
        char *in = NULL;
        while (*j == ' ' || *j == '\n' || *j == '\t') j++;
        if (*j == '[') {
            len = strlen(chat);
        } else if (*j == '{') { /* one message, not a list: say so rather than "no such file" */
            base_fail(err, "generate: --chat takes a JSON list of messages ([{\"role\": ..., "
                           "\"content\": ...}]) or a file holding one; got one object");
            return NULL;
        } else {
            if (!(in = base_read_file(chat, (size_t)1 << 30, &len, err))) return NULL;
        }
        data_chat_msg *msgs = NULL;
        int n = 0;
        int bad = data_chat_parse_json(in ? in : chat, in ? len : strlen(chat), &msgs, &n, err) ||
                  data_chat_render(msgs, n, 1, thinking, &text, err);
        data_chat_msgs_free(msgs);
        free(in);
        if (bad) {
            free(text);
            return NULL;
        }
    } else if (prompt) {
        text = strdup(prompt);
    } else {
        return base_read_file(NULL, (size_t)1 << 30, n, err);
    }
    if (!text) base_fail(err, "out of memory");
    if (text) *n = strlen(text);
    return text;
}

/* The prompt's token ids (ids empty on entry): text[0..len) encoded by tok, or one id per
 * byte without a tokenizer (the model's vocabulary, V ids, must then hold the 256 bytes). An
 * empty prompt is the tokenizer's eos (a new document); every id must be < V. */
static int prompt_ids(data_tok *tok, const char *text, size_t len, int V, data_tok_ids *ids,
                      base_err *err) {
    if (tok) {
        if (data_tok_encode(tok, text, len, ids, err)) return -1;
        if (data_tok_vocab_size(tok) > V)
            base_log(BASE_LOG_WARN, "the tokenizer has %d ids, the model %d",
                     data_tok_vocab_size(tok), V);
    } else { /* one token per byte */
        if (V < 256)
            return base_fail(err,
                             "generate: without a tokenizer the model needs a vocabulary of at "
                             "least 256 (bytes), it has %d",
                             V);
        ids->ids = malloc(len * sizeof(int32_t) + 4);
        if (!ids->ids) return base_fail(err, "out of memory");
        for (size_t i = 0; i < len; i++) ids->ids[i] = (unsigned char)text[i];
        ids->n = len;
    }
    if (ids->n == 0) {
        if (tok && data_tok_eos_id(tok) >= 0) { /* an empty prompt starts a new document */
            ids->ids = realloc(ids->ids, sizeof(int32_t));
            ids->ids[0] = data_tok_eos_id(tok);
            ids->n = 1;
        } else {
            return base_fail(err, "generate: the prompt is empty");
        }
    }
    for (size_t i = 0; i < ids->n; i++)
        if (ids->ids[i] >= V)
            return base_fail(err,
                             "generate: prompt token %d is outside the model's vocabulary (%d)",
                             ids->ids[i], V);
    return 0;
}

/* The compute precision a training checkpoint at path records (metadata "train"
 * "mixed_precision_param", the run's resolved training.mixed_precision_param) in buf[n]: ""
 * for any other source and for older checkpoints without it. */
static int recorded_precision(const char *path, char *buf, size_t n, base_err *err) {
    buf[0] = 0;
    ckpt_source src;
    base_err ignore; /* not a model: train_load_model says why */
    if (ckpt_source_open(&src, path, &ignore) || src.kind != CKPT_SRC_STEP) return 0;
    json_t *t = train_step_state(src.folder, src.step, err);
    if (!t) return -1;
    const char *p = json_string_value(json_object_get(t, "mixed_precision_param"));
    if (p) snprintf(buf, n, "%s", p);
    json_decref(t);
    return 0;
}

/* The precision to generate in: --precision when given, else the one a training checkpoint
 * records (the weights were trained, and validated, in it), else the unset default (the CPU's,
 * or $TITAN_MIXED_PRECISION). why[n] says which and why. */
static int generate_precision(const char *path, const char *precision, ops_prec *prec, char *why,
                              size_t n, base_err *err) {
    char rec[32];
    if (precision) return train_precision_resolve("--precision", precision, prec, why, n, err);
    if (recorded_precision(path, rec, sizeof rec, err)) return -1;
    if (!rec[0]) return train_precision_resolve("--precision", NULL, prec, why, n, err);
    char key[4200], res[256];
    snprintf(key, sizeof key, "%s's recorded training.mixed_precision_param", path);
    if (train_precision_resolve(key, rec, prec, res, sizeof res, err)) return -1;
    const char *emulated = strchr(res, ';'); /* "; emulated: no bf16 units" */
    snprintf(why, n, "%s (recorded by the training checkpoint; --precision overrides)%s", rec,
             emulated ? emulated : "");
    return 0;
}

/* titan generate: prompt -> streamed continuation. */
int train_cmd_generate(int argc, char **argv, base_err *err) {
    model_args a;
    model_flavor("debugmodel", &a, err);
    const char *path = NULL, *tok_dir = NULL, *prompt = NULL, *chat = NULL, *precision = NULL;
    int max_new = 256, thinking = 1, threads = 0, max_seq = 0, seed = 0, as_ids = 0, bytes = 0;
    int args_at[64], n_args = 0; /* where --flavor / --set are: a bare file's arguments */
    model_sampler smp = {.temperature = 0.6, .top_k = 20, .top_p = 0.95, .seed = 0};
    int smp_set[3] = {0, 0, 0}; /* --temperature, --top-k, --top-p given */
    base_args it = {argc, argv, 0, err};
    for (it.i = 2; it.i < argc; it.i++) {
        const char *o = argv[it.i];
        int st = 0;
        const int at = it.i;
        if (model_args_cli_opt(&it, &a, &st)) {
            if (st) return -1;
            if (n_args == (int)(sizeof args_at / sizeof args_at[0]))
                return base_fail(err, "generate: more than %d --flavor / --set options", n_args);
            args_at[n_args++] = at;
            continue;
        }
        if (base_args_is_help(&it)) {
            train_cmd_generate_usage(stdout);
            return 0;
        } else if (!strcmp(o, "--model")) {
            st = (path = base_args_value(&it)) ? 0 : -1;
        } else if (!strcmp(o, "--tokenizer")) {
            st = (tok_dir = base_args_value(&it)) ? 0 : -1;
        } else if (!strcmp(o, "--prompt")) {
            st = (prompt = base_args_value(&it)) ? 0 : -1;
        } else if (!strcmp(o, "--chat")) {
            st = (chat = base_args_value(&it)) ? 0 : -1;
        } else if (!strcmp(o, "--no-thinking")) {
            thinking = 0;
        } else if (!strcmp(o, "--ids")) {
            as_ids = 1;
        } else if (!strcmp(o, "--bytes")) {
            bytes = 1;
        } else if (!strcmp(o, "--max-new-tokens")) {
            st = base_args_int(&it, &max_new, 0);
        } else if (!strcmp(o, "--temperature")) {
            st = base_args_f64(&it, &smp.temperature, 0, 1e6);
            smp_set[0] = 1;
        } else if (!strcmp(o, "--top-k")) {
            st = base_args_int(&it, &smp.top_k, 0);
            smp_set[1] = 1;
        } else if (!strcmp(o, "--top-p")) {
            st = base_args_f64(&it, &smp.top_p, 1e-9, 1);
            smp_set[2] = 1;
        } else if (!strcmp(o, "--seed")) {
            st = base_args_int(&it, &seed, 0);
        } else if (!strcmp(o, "--max-seq-len")) {
            st = base_args_int(&it, &max_seq, 1);
        } else if (!strcmp(o, "--threads")) {
            st = base_args_int(&it, &threads, 1);
        } else if (!strcmp(o, "--precision")) {
            st = (precision = base_args_value(&it)) ? 0 : -1;
        } else {
            train_cmd_generate_usage(stderr);
            return base_fail(err, "generate: unknown option '%s'", o);
        }
        if (st) return -1;
    }
    if (!path) return base_fail(err, "generate: --model PATH is required");
    /* a source that records its arguments takes --flavor / --set only where they agree with
     * it (they are applied to its arguments, which must come out unchanged), never silently
     * overridden */
    ckpt_source src;
    base_err ignore; /* not a model: train_load_model says why */
    model_args rec, over;
    if (n_args && ckpt_source_open(&src, path, &ignore) == 0 && src.kind != CKPT_SRC_FILE &&
        ckpt_source_args(&src, &rec, &ignore) == 0) {
        over = rec;
        for (int k = 0; k < n_args; k++) {
            base_args again = {argc, argv, args_at[k], err};
            int st = 0;
            model_args_cli_opt(&again, &over, &st);
            if (st) return -1;
        }
        if (!model_args_equal(&over, &rec)) {
            char have[1024];
            model_args_describe(&rec, have, sizeof have);
            return base_fail(err,
                             "generate: --flavor / --set give a bare .safetensors file's model "
                             "arguments; %s (%s) records its own, which they would change (%s): "
                             "drop them",
                             path, ckpt_source_kind_name(src.kind), have);
        }
    }
    if (prompt && chat) return base_fail(err, "generate: --prompt and --chat exclude each other");
    if (!thinking && !chat) return base_fail(err, "generate: --no-thinking needs --chat");
    if (bytes && (tok_dir || chat))
        return base_fail(err, "generate: --bytes (no tokenizer) excludes --%s",
                         tok_dir ? "tokenizer" : "chat");
    smp.seed = (uint64_t)seed;
    if (threads > 0) omp_set_num_threads(base_threads_bound(threads, "generate --threads"));
    base_log_all_to_stderr(1); /* stdout is the generated text */

    char rec_tok[4096]; /* the tokenizer a training checkpoint records */
    int is_ckpt;
    if (train_generate_tokenizer(path, &tok_dir, rec_tok, sizeof rec_tok, &is_ckpt, err)) return -1;
    if (bytes && tok_dir)
        return base_fail(err, "generate: --bytes, but %s comes with the tokenizer %s: drop --bytes",
                         path, tok_dir);
    data_tok *tok = NULL;
    json_t *gen_cfg = NULL; /* a Hugging Face folder's generation_config.json */
    model m = {0};
    model_infer *s = NULL;
    char *text = NULL;
    data_tok_ids ids = {0};
    train_gen_result r = {0};
    int rc = -1;
    if (tok_dir && data_tok_load(tok_dir, &tok, err)) goto out;
    if (chat && !tok) {
        base_fail(err, "generate: --chat needs a tokenizer (--tokenizer DIR)");
        goto out;
    }
    base_err tw; /* the messages are rendered with Qwen3's template whatever the tokenizer's */
    if (chat && data_chat_template_check(tok, &tw))
        base_log(BASE_LOG_WARN, "generate --chat: %s; rendering with Qwen3's", tw.msg);
    size_t text_len = 0;
    if (!(text = prompt_text(prompt, chat, thinking, &text_len, err))) goto out;
    ops_prec prec;
    char why[256];
    if (generate_precision(path, precision, &prec, why, sizeof why, err)) goto out;
    base_log(BASE_LOG_INFO, "generate: precision %s", why);
    if (train_load_model(&m, path, &a, prec, err)) goto out;
    /* One token per byte is right for a vocabulary of exactly the 256 bytes, a checkpoint that
     * records byte training (train_generate_tokenizer has checked what it records) or --bytes;
     * any other model without a tokenizer would print its ids >= 256 as '?': refused, as a
     * checkpoint that records no tokenizer is. */
    if (!tok && !bytes && m.args.vocab_size != 256 && !is_ckpt) {
        base_fail(err,
                  "%s has no tokenizer.json and its vocabulary is %d, not 256 (bytes): pass "
                  "--tokenizer DIR (or --bytes for a byte-level model)",
                  path, m.args.vocab_size);
        goto out;
    }
    if (prompt_ids(tok, text, text_len, m.args.vocab_size, &ids, err)) goto out;
    int ctx = max_seq > 0 ? max_seq : m.args.max_seq_len > 0 ? m.args.max_seq_len : 4096;
    if ((int64_t)ids.n > ctx) {
        base_fail(err,
                  "generate: the prompt has %zu tokens, more than the context of %d "
                  "(--max-seq-len)",
                  ids.n, ctx);
        goto out;
    }
    const int64_t want = (int64_t)ids.n + max_new;
    if (model_infer_new(&s, &m, want < ctx ? (int)want : ctx, err)) goto out;
    /* a Hugging Face folder's generation_config.json: its eos ids and sampling defaults */
    const char *hf =
        ckpt_source_open(&src, path, &ignore) == 0 && src.kind == CKPT_SRC_HF ? src.path : NULL;
    char gen_path[4200] = "", smp_why[4300] = "Qwen3's recommended defaults";
    if (hf && folder_json(hf, "generation_config.json", &gen_cfg, gen_path, sizeof gen_path, err))
        goto out;
    if (gen_cfg &&
        gen_config_sampling(gen_cfg, gen_path, smp_set, &smp, smp_why, sizeof smp_why, err))
        goto out;
    const int n_set = smp_set[0] + smp_set[1] + smp_set[2];
    base_log(BASE_LOG_INFO, "generate: temperature %g, top-k %d, top-p %g: %s%s", smp.temperature,
             smp.top_k, smp.top_p,
             n_set == 3 ? "set"
             : n_set    ? "as set, the rest "
                        : "",
             n_set == 3 ? "" : smp_why);
    int32_t stop[GEN_MAX_STOP];
    int n_stop = 0;
    if (stop_ids(hf, gen_cfg, gen_path, tok, stop, &n_stop, err)) goto out;
    train_text_stream ts = {.tok = as_ids ? NULL : tok, .as_ids = as_ids, .out = stdout};
    train_gen_opts go = {
        .sampler = smp, .max_new_tokens = max_new, .stop = stop, .n_stop = n_stop, .stream = &ts};
    rc = train_generate(s, ids.ids, (int)ids.n, &go, &r, err);
    train_stream_finish(&ts);
    if (!rc) {
        printf("\n");
        rc = stream_flush(&ts, err);
    }
    if (!rc) {
        fprintf(stderr,
                "prompt: %d tokens in %.3f s (%.1f tokens/s); generated %d tokens in %.3f s "
                "(%.2f tokens/s)%s\n",
                r.n_prompt, r.prefill_s, r.prefill_s > 0 ? r.n_prompt / r.prefill_s : 0.0, r.n_new,
                r.decode_s, r.decode_s > 0 ? r.n_new / r.decode_s : 0.0,
                r.stopped ? "; stopped at a stop token" : "");
        if (r.slides) /* the model saw less than the whole text: said, not silent */
            fprintf(stderr,
                    "the context of %d positions (--max-seq-len) filled %d time%s: each time "
                    "generation went on from its last %d tokens\n",
                    model_infer_max_len(s), r.slides, r.slides > 1 ? "s" : "",
                    slide_keep(model_infer_max_len(s)));
    }
out:
    json_decref(gen_cfg);
    free(r.tokens);
    model_infer_free(s);
    model_free(&m);
    data_tok_ids_free(&ids);
    data_tok_free(tok);
    free(text);
    return rc;
}
