/* Cached inference and sampling (src/model/generate.c).
 *
 * 1. Logits: for small random models (GQA and MHA, tied and untied), feeding a sequence to
 *    the KV-cache state in pieces (a prefill, a second prefill chunk that attends to the
 *    first, then one token per step; and a prompt longer than one 2048-row chunk) gives at
 *    every position the logits of the training forward (model_logits) on the whole sequence.
 *    Tolerance: max |diff| <= 1e-5 * max(1, max |logit|) per row. Not bitwise: the GEMMs run
 *    with other row counts (OpenBLAS may block the K sums differently) and decode steps use
 *    attention_kv (a plain softmax) instead of the tiled online-softmax kernel.
 *    In bf16 (titan generate --precision bfloat16) the same, against the bf16 training forward:
 *    decode steps must round what it rounds (q, k, v and the probabilities P before P.V), so
 *    only fp32 summation order and the bf16 roundings it flips remain: 2e-3 of the scale
 *    (measured: bitwise on the onednn engine, worst 4.3e-4 emulated; a decode that left P
 *    unrounded was off by 8.6e-3 to 1.3e-2).
 * 2. Sampling: temperature 0 and top_k 1 are the argmax; top-k picks only the k best; top-p
 *    picks only inside the nucleus of a known distribution and matches a brute-force HF-style
 *    reference (full sort) draw for draw; same seed -> same draws, another seed -> others.
 * 3. Bad input: tokens outside the vocabulary and cache overflow are refused.
 * 4. Streaming text (train_stream_token): with the Qwen3 tokenizer, text whose tokens end
 *    inside UTF-8 characters is written one token at a time, and after every token the output
 *    so far is complete UTF-8 and a prefix of the text; at the end it is the text. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "train/train.h"

#include "check.h"

/* got[T, V]: the logits of tok[0, T) through s from position 0: a prefill of n_prefill, a
 * second of n_second, then one token per call (odd positions all_logits, even ones the
 * last-row-only mode, which must give the same row). */
static void run_calls(model_infer *s, const int32_t *tok, int T, int n_prefill, int n_second, int V,
                      float *got) {
    base_err e = {{0}};
    int pos = 0;
    CHECK(model_infer_forward(s, tok, n_prefill, got, 1, &e) == 0, "prefill: %s", e.msg);
    pos = n_prefill;
    if (n_second > 0) {
        CHECK(model_infer_forward(s, tok + pos, n_second, got + (size_t)pos * V, 1, &e) == 0,
              "second prefill: %s", e.msg);
        pos += n_second;
    }
    for (; pos < T; pos++)
        CHECK(model_infer_forward(s, tok + pos, 1, got + (size_t)pos * V, pos % 2, &e) == 0,
              "step %d: %s", pos, e.msg);
}

static double check_model(int H, int G, int tied, int T, int n_prefill, int n_second,
                          ops_prec prec) {
    const double tol = prec == OPS_PREC_BF16 ? 2e-3 : 1e-5;
    base_err e = {{0}};
    model_args a;
    model_flavor("debugmodel", &a, &e);
    a.dim = 64;
    a.n_layers = 2;
    a.n_heads = H;
    a.n_kv_heads = G;
    a.head_dim = 16;
    a.ffn_dim = 96;
    a.vocab_size = 97;
    a.tie_embeddings = tied;
    a.rope_theta = 10000;
    model m;
    model_build_opts o = {.batch = 1, .seq_len = T, .prec = prec};
    double worst = 0;
    int rc = model_build(&m, &a, &o, &e);
    CHECK(rc == 0, "build: %s", e.msg);
    if (rc) {
        model_free(&m);
        return 1;
    }
    model_init_weights(&m, 7);
    /* scale the weights up and perturb the norm weights, so logits are O(1) and every
     * parameter matters */
    for (size_t i = 0; i < m.n_floats; i++) m.w[i] *= 4;
    for (int p = 0; p < m.n_params; p++)
        if (m.params[p].is_norm)
            for (size_t i = 0; i < m.params[p].numel; i++)
                m.w[m.params[p].offset + i] = 1 + 0.5f * base_rng_normal(3, (uint64_t)p, i);
    const int V = a.vocab_size;
    int32_t *tok = malloc(sizeof(int32_t) * T);
    float *ref = malloc(sizeof(float) * (size_t)T * V),
          *got = malloc(sizeof(float) * (size_t)T * V);
    for (int t = 0; t < T; t++) tok[t] = (int32_t)(base_rng_u64(11, 0, (uint64_t)t) % V);
    model_logits(&m, tok, ref);

    model_infer *s = NULL;
    rc = model_infer_new(&s, &m, T, &e);
    CHECK(rc == 0, "infer_new: %s", e.msg);
    if (rc == 0) {
        run_calls(s, tok, T, n_prefill, n_second, V, got);
        CHECK(model_infer_len(s) == T, "len %d != %d", model_infer_len(s), T);
        for (int t = 0; t < T; t++) {
            double mx = 1, d = 0;
            for (int v = 0; v < V; v++) {
                const double r = ref[(size_t)t * V + v], g = got[(size_t)t * V + v];
                mx = fabs(r) > mx ? fabs(r) : mx;
                d = fabs(r - g) > d || g != g ? fabs(r - g) : d;
            }
            CHECK(d <= tol * mx, "%s H=%d G=%d tied=%d position %d: max |diff| %g (scale %g)",
                  prec == OPS_PREC_BF16 ? "bf16" : "fp32", H, G, tied, t, d, mx);
            if (d / mx > worst) worst = d / mx;
        }
        /* hostile input: nothing changes on refusal */
        int32_t bad = V;
        CHECK(model_infer_forward(s, &bad, 1, NULL, 0, &e) != 0, "cache overflow accepted");
        model_infer_reset(s);
        CHECK(model_infer_forward(s, &bad, 1, NULL, 0, &e) != 0 && strstr(e.msg, "vocabulary"),
              "token %d accepted (%s)", bad, e.msg);
        bad = -1;
        CHECK(model_infer_forward(s, &bad, 1, NULL, 0, &e) != 0, "token -1 accepted");
        CHECK(model_infer_len(s) == 0, "refused input changed the length");
        /* after reset, the same calls give the same logits bitwise (the cache is overwritten);
         * not the one-call prefill's: past 2048 rows it runs attention_kv on the later chunks,
         * within tol of ref only (bf16 rounds P at other points) */
        float *again = malloc(sizeof(float) * (size_t)T * V);
        run_calls(s, tok, T, n_prefill, n_second, V, again);
        CHECK(!memcmp(got, again, sizeof(float) * (size_t)T * V),
              "the same calls after a reset give other logits");
        free(again);
    }
    printf("logits %s H=%d G=%d tied=%d T=%d prefill %d+%d: max |diff| / scale = %.3g\n",
           prec == OPS_PREC_BF16 ? "bf16" : "fp32", H, G, tied, T, n_prefill, n_second, worst);
    model_infer_free(s);
    free(tok);
    free(ref);
    free(got);
    model_free(&m);
    return worst;
}

/* Hugging Face semantics by brute force: sort everything, top-k = every token whose logit is
 * >= the k-th best's (TopKLogitsWarper removes only scores below it: ties stay), nucleus =
 * tokens whose mass ranked above is < top_p, draw with the same uniform, walking the survivors
 * by rank (by id when neither top-k nor top-p is on, as model_sample does). */
static int32_t ref_sample(const float *logits, int V, const model_sampler *s, uint64_t index) {
    int *ord = malloc(sizeof(int) * V);
    const float temp = (float)s->temperature;
    for (int i = 0; i < V; i++) ord[i] = i;
    for (int i = 1; i < V; i++) { /* insertion sort: decreasing value, then increasing id */
        int x = ord[i], j = i - 1;
        while (j >= 0 && (logits[ord[j]] / temp < logits[x] / temp)) {
            ord[j + 1] = ord[j];
            j--;
        }
        ord[j + 1] = x;
    }
    const double vmax = logits[ord[0]] / temp;
    const int top_k = s->top_k > 0 && s->top_k < V;
    int n = top_k ? s->top_k : V;
    while (top_k && n < V && logits[ord[n]] == logits[ord[s->top_k - 1]]) n++;
    if (!top_k && s->top_p >= 1)
        for (int i = 0; i < V; i++) ord[i] = i;
    double total = 0;
    for (int i = 0; i < n; i++) /* over all ids in id order, or the top k by rank */
        total += exp((double)(logits[top_k ? ord[i] : i] / temp - vmax));
    int kept = n;
    double mass = total;
    if (s->top_p < 1) {
        double above = 0;
        for (kept = 0; kept < n && (kept == 0 || above < s->top_p * total); kept++)
            above += exp((double)(logits[ord[kept]] / temp - vmax));
        mass = above;
    }
    const double u = base_rng_uniform(s->seed, MODEL_SAMPLE_STREAM, index) * mass;
    double acc = 0;
    int32_t pick = ord[kept - 1];
    for (int i = 0; i < kept; i++) {
        acc += exp((double)(logits[ord[i]] / temp - vmax));
        if (acc > u) {
            pick = ord[i];
            break;
        }
    }
    free(ord);
    return pick;
}

static void check_sampling(void) {
    /* known distribution: p = 0.5, 0.3, 0.1, 0.06, 0.04 at ids 3, 0, 4, 1, 2 */
    const float p[5] = {0.3f, 0.06f, 0.04f, 0.5f, 0.1f};
    float lg[5];
    for (int i = 0; i < 5; i++) lg[i] = logf(p[i]);
    model_sampler g = {0, 0, 1, 1};
    CHECK(model_sample(lg, 5, &g, 0) == 3, "greedy is not the argmax");
    int count[5] = {0};
    model_sampler nuc = {1.0, 0, 0.7, 5};
    for (int i = 0; i < 4000; i++) count[model_sample(lg, 5, &nuc, (uint64_t)i)]++;
    /* nucleus at 0.7: {3 (above 0), 0 (above 0.5)}; 4 has 0.8 above it */
    CHECK(count[1] + count[2] + count[4] == 0, "top-p 0.7 picked outside {3, 0}: %d %d %d",
          count[1], count[2], count[4]);
    CHECK(fabs(count[3] / 4000.0 - 0.625) < 0.04, "top-p 0.7: id 3 drawn %d / 4000 (want ~0.625)",
          count[3]);
    memset(count, 0, sizeof count);
    model_sampler nuc2 = {1.0, 0, 0.85, 5}; /* {3, 0, 4}: above 4 is 0.8 < 0.85 */
    for (int i = 0; i < 4000; i++) count[model_sample(lg, 5, &nuc2, (uint64_t)i)]++;
    CHECK(count[1] + count[2] == 0 && count[4] > 0, "top-p 0.85: %d %d %d", count[1], count[2],
          count[4]);
    model_sampler tiny = {1.0, 0, 1e-9, 5}; /* always at least one token: the best */
    for (int i = 0; i < 50; i++) CHECK(model_sample(lg, 5, &tiny, (uint64_t)i) == 3, "top-p ~0");

    /* top-k keeps every token tied with the k-th best, as HF's TopKLogitsWarper (it removes
     * scores < the k-th largest): k 2 of {1, 3, 3, 3, 0} keeps ids 1, 2, 3 (1/3 each), k 1 of
     * {2, 2, 0} samples ids 0 and 1 (1/2 each); titan kept exactly k, never drawing id 3 / 1 */
    const float tie3[5] = {1, 3, 3, 3, 0}, tie2[3] = {2, 2, 0};
    memset(count, 0, sizeof count);
    model_sampler k2 = {1.0, 2, 1, 6};
    for (int i = 0; i < 3000; i++) count[model_sample(tie3, 5, &k2, (uint64_t)i)]++;
    CHECK(count[0] + count[4] == 0 && fabs(count[3] / 3000.0 - 1.0 / 3) < 0.04,
          "top-k 2 with a 3-way tie at the 2nd: ids 1,2,3 drawn %d %d %d (want ~1000 each)",
          count[1], count[2], count[3]);
    memset(count, 0, sizeof count);
    model_sampler kt1 = {1.0, 1, 1, 7};
    for (int i = 0; i < 2000; i++) count[model_sample(tie2, 3, &kt1, (uint64_t)i)]++;
    CHECK(count[2] == 0 && fabs(count[1] / 2000.0 - 0.5) < 0.04,
          "top-k 1 with a tie at the best: ids 0,1 drawn %d %d (want ~1000 each)", count[0],
          count[1]);

    /* a larger random vocabulary: top_k 1 == greedy; top-k only from the k best; every mode
     * equals the brute-force reference draw for draw; same seed -> same draws */
    const int V = 3000;
    float *l = malloc(sizeof(float) * V);
    for (int i = 0; i < V; i++) l[i] = 3 * base_rng_normal(9, 0, (uint64_t)i);
    int32_t am = 0;
    for (int i = 1; i < V; i++) am = l[i] > l[am] ? i : am;
    model_sampler k1 = {0.9, 1, 1, 3};
    for (int i = 0; i < 20; i++) CHECK(model_sample(l, V, &k1, (uint64_t)i) == am, "top_k 1");
    const model_sampler modes[] = {{1.0, 0, 1, 1},    {0.7, 0, 0.9, 2}, {1.3, 40, 1, 3},
                                   {0.8, 50, 0.8, 4}, {1.0, 0, 0.3, 5}, {2.0, 0, 0.99, 6}};
    for (size_t mi = 0; mi < sizeof modes / sizeof modes[0]; mi++) {
        int mismatch = 0, diff_seed = 0;
        model_sampler other = modes[mi];
        other.seed += 100;
        for (int i = 0; i < 300; i++) {
            const int32_t a = model_sample(l, V, &modes[mi], (uint64_t)i);
            mismatch += a != ref_sample(l, V, &modes[mi], (uint64_t)i);
            mismatch += a != model_sample(l, V, &modes[mi], (uint64_t)i);
            diff_seed += a != model_sample(l, V, &other, (uint64_t)i);
        }
        CHECK(mismatch == 0, "mode %zu: %d draws differ from the reference", mi, mismatch);
        CHECK(diff_seed > 0, "mode %zu: another seed gives the same 300 draws", mi);
    }
    free(l);
}

/* 1 when b[0..n) is complete, valid UTF-8 */
static int utf8_ok(const unsigned char *b, size_t n) {
    for (size_t i = 0; i < n;) {
        const int k = b[i] < 0x80             ? 1
                      : (b[i] & 0xE0) == 0xC0 ? 2
                      : (b[i] & 0xF0) == 0xE0 ? 3
                      : (b[i] & 0xF8) == 0xF0 ? 4
                                              : 0;
        if (!k || i + k > n) return 0;
        for (int j = 1; j < k; j++)
            if ((b[i + j] & 0xC0) != 0x80) return 0;
        i += k;
    }
    return 1;
}

static void check_stream(void) {
#ifdef TITAN_SHARED_DIR
    base_err e = {{0}};
    data_tok *tok = NULL;
    if (data_tok_load(TITAN_SHARED_DIR "/data/qwen3_tokenizer", &tok, &e)) {
        CHECK(0, "tokenizer: %s", e.msg);
        return;
    }
    const char *text = "caf\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd\xf0\x9f\xa4\x96\xf0\x9f\xa6\x80 "
                       "\xe2\x88\x80x\xe2\x88\x88\xe2\x84\x9d \xf0\x9f\xab\xa0\xf0\x9d\x94\x98"
                       "\xea\x99\xae\xe9\xbe\x98!"; /* rare ones split: U+1FAE0, U+1D518, ... */
    data_tok_ids ids = {0};
    CHECK(data_tok_encode(tok, text, strlen(text), &ids, &e) == 0, "encode: %s", e.msg);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    train_text_stream ts = {tok, 0, f, {0}, 0};
    int split = 0;
    for (size_t i = 0; i < ids.n; i++) {
        char *piece = NULL;
        size_t plen = 0;
        data_tok_decode(tok, &ids.ids[i], 1, 0, &piece, &plen, &e);
        split += !utf8_ok((const unsigned char *)piece, plen);
        free(piece);
        CHECK(train_stream_token(&ts, ids.ids[i], &e) == 0, "stream: %s", e.msg);
        fflush(f);
        CHECK(utf8_ok((const unsigned char *)buf, len) && strncmp(buf, text, len) == 0,
              "after token %zu the output is not a complete UTF-8 prefix", i);
    }
    train_stream_finish(&ts);
    fclose(f);
    CHECK(split > 0, "no token of the test text ends inside a character (test premise)");
    CHECK(len == strlen(text) && memcmp(buf, text, len) == 0, "streamed text differs");
    printf("stream: %zu tokens, %d end inside a character; output complete UTF-8 throughout\n",
           ids.n, split);
    free(buf);
    data_tok_ids_free(&ids);
    data_tok_free(tok);
#endif
}

int main(void) {
    for (int p = 0; p < 2; p++) {
        const ops_prec prec = p ? OPS_PREC_BF16 : OPS_PREC_F32;
        check_model(4, 2, 1, 40, 17, 5, prec);   /* GQA, tied */
        check_model(4, 4, 0, 40, 1, 12, prec);   /* MHA, untied; prefill of one token */
        check_model(4, 1, 0, 33, 33, 0, prec);   /* MQA, untied, whole sequence in one prefill */
        check_model(2, 1, 1, 2100, 2090, 3, prec); /* more than one 2048-row chunk, then steps */
    }
    check_sampling();
    check_stream();
    if (failures) printf("%d failures\n", failures);
    return failures != 0;
}
