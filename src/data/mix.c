/* data: a weighted mixture of datasets, torchtitan 0.3's interleaved loaders (see the mixture
 * section of data.h).
 *
 * 0.3's InterleavedDataset draws the source of every sample (one packed window) with
 * random.Random(seed).choices(range(n), weights=probs, k=1), probs = [w / sum(weights)]:
 * Python's Mersenne Twister (MT19937, seeded by init_by_array with the seed's 32-bit words),
 * random() = 53 bits from two 32-bit outputs, and choices' bisect_right of random() * total
 * into the running sums of probs (total their last). Written out here as CPython's
 * _randommodule.c and random.py compute them, so the draws are Python's bit for bit (checked
 * against Python in test_loader and check_mix.py). Python 3.12's sum() of floats is
 * compensated (3.11's, torchtitan's minimum, adds left to right, as here): weights whose sum
 * rounds differently move a probability by an ulp, which changes a draw with a chance of
 * about 2^-52 each. */
#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/internal.h"

enum { MT_N = 624, MT_M = 397 };

typedef struct {
    uint32_t mt[MT_N];
    int index;
} mt19937;

static void mt_init(mt19937 *g, uint32_t s) {
    g->mt[0] = s;
    for (int i = 1; i < MT_N; i++)
        g->mt[i] = 1812433253u * (g->mt[i - 1] ^ (g->mt[i - 1] >> 30)) + (uint32_t)i;
    g->index = MT_N;
}

/* random.seed(seed) for a non-negative int: init_by_array over its 32-bit words, least
 * significant first (one word for seeds below 2^32, zero included). */
static void mt_seed(mt19937 *g, uint64_t seed) {
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    const int n = seed >> 32 ? 2 : 1;
    mt_init(g, 19650218u);
    uint32_t *mt = g->mt;
    int i = 1, j = 0;
    for (int k = MT_N > n ? MT_N : n; k; k--) {
        mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1664525u)) + key[j] + (uint32_t)j;
        i++;
        j++;
        if (i >= MT_N) {
            mt[0] = mt[MT_N - 1];
            i = 1;
        }
        if (j >= n) j = 0;
    }
    for (int k = MT_N - 1; k; k--) {
        mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1566083941u)) - (uint32_t)i;
        i++;
        if (i >= MT_N) {
            mt[0] = mt[MT_N - 1];
            i = 1;
        }
    }
    mt[0] = 0x80000000u;
    g->index = MT_N;
}

/* The next 624 words, in place (each word reads ones already renewed, as the reference). */
static void mt_twist(mt19937 *g) {
    uint32_t *mt = g->mt;
    for (int k = 0; k < MT_N; k++) {
        const uint32_t y = (mt[k] & 0x80000000u) | (mt[(k + 1) % MT_N] & 0x7fffffffu);
        mt[k] = mt[(k + MT_M) % MT_N] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
    }
    g->index = 0;
}

static uint32_t mt_next(mt19937 *g) {
    if (g->index >= MT_N) mt_twist(g);
    uint32_t y = g->mt[g->index++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    return y ^ (y >> 18);
}

/* random.random(): [0, 1) from 27 + 26 bits of two outputs. */
static double mt_random(mt19937 *g) {
    const uint32_t a = mt_next(g) >> 5, b = mt_next(g) >> 6;
    return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
}

struct data_mix {
    int n;
    data_loader **src; /* n == 1: the one loader, at the caller's batch; else one row a call */
    char **paths;
    double *weights, *cum; /* as given; the running sums of weights / sum(weights) */
    uint64_t seed;
    int64_t draws; /* rows drawn so far (the state says it; the generator's own state resumes) */
    int batch, seq_len;
    int64_t *rows; /* rows each source gave since the start (the state carries them) */
    mt19937 g;
};

/* err's message prefixed with the source (1-based i) that gave it; -1. */
static int source_fail(base_err *err, int i) {
    char msg[sizeof err->msg];
    snprintf(msg, sizeof msg, "%s", err->msg);
    return base_fail(err, "dataset mixture, source %d: %s", i + 1, msg);
}

int data_mix_weights_check(const double *w, int n, base_err *err) {
    double total = 0;
    for (int i = 0; i < n; i++) {
        if (!isfinite(w[i]) || w[i] < 0)
            return base_fail(err, "weight %d (%g) must be a finite number >= 0", i + 1, w[i]);
        total += w[i];
    }
    if (!(total > 0) || !isfinite(total))
        return base_fail(err, "the weights must have a finite sum above 0 (they sum to %g)", total);
    return 0;
}

/* choices' running sums of the probabilities w / sum(w), each a left-to-right sum (Python
 * 3.11's sum() and itertools.accumulate) */
static void mix_cum(const double *w, int n, double *cum) {
    double total = 0, run = 0;
    for (int i = 0; i < n; i++) total += w[i];
    for (int i = 0; i < n; i++) cum[i] = run += w[i] / total;
}

/* choices' index: bisect_right(cum, random() * total, 0, n - 1) */
static int draw(data_mix *m) {
    const double x = mt_random(&m->g) * m->cum[m->n - 1];
    int i = 0;
    while (i < m->n - 1 && !(x < m->cum[i])) i++;
    return i;
}

void data_mix_draws(uint64_t seed, const double *weights, int n, int64_t skip, int count,
                    int *out) {
    if (n < 1 || n > DATA_MIX_MAX) return;
    data_mix m = {.n = n, .seed = seed};
    double cum[DATA_MIX_MAX];
    mix_cum(weights, n, cum);
    m.cum = cum;
    mt_seed(&m.g, seed);
    for (int64_t i = 0; i < 2 * skip; i++) mt_next(&m.g);
    for (int i = 0; i < count; i++) out[i] = draw(&m);
}

void data_mix_free(data_mix *m) {
    if (!m) return;
    for (int i = 0; i < m->n; i++) {
        if (m->src) data_loader_free(m->src[i]);
        if (m->paths) free(m->paths[i]);
    }
    free(m->src);
    free(m->paths);
    free(m->weights);
    free(m->cum);
    free(m->rows);
    free(m);
}

int data_mix_open(data_mix **out, const data_mix_cfg *cfg, base_err *err) {
    *out = NULL;
    const int n = cfg->n;
    if (n < 1 || n > DATA_MIX_MAX)
        return base_fail(err, "a dataset mixture has 1 to %d sources, not %d", DATA_MIX_MAX, n);
    base_err e;
    if (n > 1 && cfg->weights && data_mix_weights_check(cfg->weights, n, &e))
        return base_fail(err, "dataset mixture: %s", e.msg);
    if (n > 1 && !cfg->loader.infinite)
        return base_fail(err, "a dataset mixture re-loops each of its sources (torchtitan 0.3's "
                              "training sources, infinite); a finite loader reads one dataset");
    data_mix *m = calloc(1, sizeof *m);
    if (!m) return base_fail(err, "out of memory");
    m->n = n;
    m->seed = cfg->seed;
    m->batch = cfg->loader.batch;
    m->seq_len = cfg->loader.seq_len;
    m->src = calloc((size_t)n, sizeof *m->src);
    m->paths = calloc((size_t)n, sizeof *m->paths);
    m->weights = malloc((size_t)n * sizeof *m->weights);
    m->cum = malloc((size_t)n * sizeof *m->cum);
    m->rows = calloc((size_t)n, sizeof *m->rows);
    if (!m->src || !m->paths || !m->weights || !m->cum || !m->rows) {
        data_mix_free(m);
        return base_fail(err, "out of memory");
    }
    /* + 0.0: a -0 (an underflow of a negative) is kept and said as 0 */
    for (int i = 0; i < n; i++) m->weights[i] = (cfg->weights ? cfg->weights[i] : 1.0) + 0.0;
    mix_cum(m->weights, n, m->cum);
    mt_seed(&m->g, m->seed);
    for (int i = 0; i < n; i++) {
        data_loader_cfg c = cfg->loader;
        c.path = cfg->paths[i];
        if (cfg->fields && cfg->fields[i] && cfg->fields[i][0]) c.field = cfg->fields[i];
        if (n > 1) c.batch = 1; /* a source gives one window per draw */
        if (!(m->paths[i] = strdup(c.path))) {
            data_mix_free(m);
            return base_fail(err, "out of memory");
        }
        if (data_loader_open(&m->src[i], &c, err)) {
            if (n > 1) source_fail(err, i);
            data_mix_free(m);
            return -1;
        }
    }
    /* without a tokenizer, text and JSONL are byte tokens: beside another source's token shards
     * (ids of the tokenizer they record) two vocabularies would share the batches */
    int at_shard = -1, at_bytes = -1;
    for (int i = 0; i < n && !cfg->loader.enc.tok; i++) {
        if (at_shard < 0 && data_loader_file_of(m->src[i], 1)) at_shard = i;
        if (at_bytes < 0 && data_loader_file_of(m->src[i], 0)) at_bytes = i;
    }
    if (at_shard >= 0 && at_bytes >= 0) {
        const data_file *sh = data_loader_file_of(m->src[at_shard], 1);
        base_fail(err,
                  "dataset mixture: source %d's token shards (%s, ids of the tokenizer %s) and "
                  "source %d's text or JSONL files (%s) need that tokenizer to tokenize the text "
                  "the same way (without one it would be byte tokens, another vocabulary in the "
                  "same batches): set model.hf_assets_path, or train on them apart",
                  at_shard + 1, sh->path, sh->tok_path ? sh->tok_path : "?", at_bytes + 1,
                  data_loader_file_of(m->src[at_bytes], 0)->path);
        data_mix_free(m);
        return -1;
    }
    /* token shards trained on without a tokenizer name theirs: one for the whole mixture */
    const char *first = NULL, *p;
    uint64_t h0 = 0, h;
    int at = 0;
    for (int i = 0; i < n && !cfg->loader.enc.tok; i++) {
        if (data_loader_shard_tokenizer(m->src[i], &p, &h)) continue;
        if (!first) {
            first = p;
            h0 = h;
            at = i;
        } else if (h != h0) {
            base_fail(err,
                      "dataset mixture: source %d (%s) holds token shards of the tokenizer %s, "
                      "source %d (%s) of %s: one run encodes with one tokenizer (give it with "
                      "model.hf_assets_path to have each source checked against it)",
                      at + 1, m->paths[at], first, i + 1, m->paths[i], p);
            data_mix_free(m);
            return -1;
        }
    }
    *out = m;
    return 0;
}

int data_mix_sources(const data_mix *m) {
    return m->n;
}

int data_mix_next(data_mix *m, int32_t *inputs, int32_t *labels, int32_t *positions,
                  base_err *err) {
    if (m->n == 1) {
        const int rc = data_loader_next(m->src[0], inputs, labels, positions, err);
        if (rc == 1) m->rows[0] += m->batch;
        return rc;
    }
    const size_t T = (size_t)m->seq_len;
    for (int b = 0; b < m->batch; b++) {
        const int i = draw(m);
        m->draws++;
        const size_t at = (size_t)b * T;
        const int rc = data_loader_next(m->src[i], inputs + at, labels + at,
                                        positions ? positions + at : NULL, err);
        if (rc < 0) return source_fail(err, i); /* the loader's error names the file */
        if (rc == 0) /* an infinite loader ends only on an error it reports */
            return base_fail(err, "dataset mixture: source %d (%s) gave no window", i + 1,
                             m->paths[i]);
        m->rows[i]++;
    }
    return 1;
}

int data_mix_shard_tokenizer(const data_mix *m, const char **path, uint64_t *hash) {
    for (int i = 0; i < m->n; i++)
        if (!data_loader_shard_tokenizer(m->src[i], path, hash)) return 0;
    return -1;
}

void data_mix_describe(const data_mix *m, char *buf, size_t n) {
    if (!n) return;
    if (m->n == 1) {
        data_loader_describe(m->src[0], buf, n);
        return;
    }
    size_t k = (size_t)snprintf(buf, n,
                                "a mixture of %d sources, each window's drawn as torchtitan 0.3's "
                                "interleaved loader draws it (seed %llu, weights",
                                m->n, (unsigned long long)m->seed);
    for (int i = 0; i < m->n && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%g", i ? " / " : " ", m->weights[i]);
    for (int i = 0; i < m->n && k < n; i++) {
        k += (size_t)snprintf(buf + k, n - k, i ? "; [%d] " : "): [%d] ", i + 1);
        if (k < n) data_loader_describe_files(m->src[i], buf + k, n - k);
        k += k < n ? strlen(buf + k) : 0;
    }
    data_loader_describe_rank(m->src[0], buf, n); /* the same for every source */
}

void data_mix_rows(const data_mix *m, int64_t *rows) {
    memcpy(rows, m->rows, (size_t)m->n * sizeof *rows);
}

size_t data_mix_state_max(const data_mix *m) {
    return m->n == 1 ? DATA_LOADER_STATE_MAX
                     : DATA_MIX_STATE_FIXED + (size_t)m->n * DATA_MIX_STATE_SOURCE;
}

int data_mix_state_format(const data_mix *m, char *buf, size_t n) {
    data_loader_state s;
    if (m->n == 1) {
        data_loader_get_state(m->src[0], &s);
        return data_loader_state_format(&s, buf, n);
    }
    /* k only grows while it is below n: each write is checked before the next */
    size_t k = 0;
#define PUT(...)                                                                                   \
    do {                                                                                           \
        const int w_ = k < n ? snprintf(buf + k, n - k, __VA_ARGS__) : -1;                         \
        if (w_ < 0 || (size_t)w_ >= n - k) return -1;                                              \
        k += (size_t)w_;                                                                           \
    } while (0)
    PUT("{\"mix_seed\": %llu, \"mix_draws\": %lld, \"mix_rng_index\": %d, \"mix_rng\": \"",
        (unsigned long long)m->seed, (long long)m->draws, m->g.index);
    for (int i = 0; i < MT_N; i++) PUT("%08x", (unsigned)m->g.mt[i]);
    PUT("\", \"mix_weights\": [");
    for (int i = 0; i < m->n; i++) PUT("%s%.17g", i ? ", " : "", m->weights[i]);
    PUT("], \"mix_rows\": [");
    for (int i = 0; i < m->n; i++) PUT("%s%lld", i ? ", " : "", (long long)m->rows[i]);
    PUT("], \"sources\": [");
    for (int i = 0; i < m->n; i++) {
        if (i) PUT(", ");
        data_loader_get_state(m->src[i], &s);
        if (data_loader_state_format(&s, buf + k, n - k)) return -1;
        k += strlen(buf + k);
    }
    PUT("]}");
#undef PUT
    return 0;
}

/* One source's state (a JSON object) into loader l; errors say which source. */
static int restore_source(data_loader *l, const json_t *j, int i, int n, const char *path,
                          base_err *err) {
    char *text = json_is_object(j) ? json_dumps(j, JSON_COMPACT) : NULL;
    data_loader_state s;
    base_err e;
    int rc = !text ? base_fail(&e, "not a JSON object")
                   : data_loader_state_parse(text, &s, &e) || data_loader_set_state(l, &s, &e);
    free(text);
    if (rc && n > 1) return base_fail(err, "source %d (%s): %s", i + 1, path, e.msg);
    if (rc) *err = e;
    return rc ? -1 : 0;
}

/* The generator of a mixture's state: "mix_rng" (624 words, 8 hex digits each) and
 * "mix_rng_index" (0 .. 624). */
static int parse_rng(const json_t *j, mt19937 *g, base_err *err) {
    const json_t *r = json_object_get(j, "mix_rng"), *ix = json_object_get(j, "mix_rng_index");
    const char *x = json_is_string(r) ? json_string_value(r) : "";
    int ok = strlen(x) == 8 * MT_N && json_is_integer(ix) && json_integer_value(ix) >= 0 &&
             json_integer_value(ix) <= MT_N;
    for (int i = 0; ok && i < 8 * MT_N; i++) ok = isxdigit((unsigned char)x[i]) != 0;
    if (!ok)
        return base_fail(err,
                         "data-loader state: a mixture's \"mix_rng\" (%d words, 8 hex digits "
                         "each) and \"mix_rng_index\" (0 to %d) are missing or bad",
                         MT_N, MT_N);
    for (int i = 0; i < MT_N; i++) {
        char w[9];
        memcpy(w, x + 8 * i, 8);
        w[8] = 0;
        g->mt[i] = (uint32_t)strtoul(w, NULL, 16);
    }
    g->index = (int)json_integer_value(ix);
    return 0;
}

/* -1 with err when the saved positions are this run's sources in another order: source i's
 * fingerprint (its files and setup) is not this run's i-th but is another's. */
static int reordered(const data_mix *m, const json_t *srcs, base_err *err) {
    uint64_t now[DATA_MIX_MAX];
    for (int i = 0; i < m->n; i++) {
        data_loader_state s;
        data_loader_get_state(m->src[i], &s);
        now[i] = s.fingerprint;
    }
    for (int i = 0; i < m->n; i++) {
        const char *x =
            json_string_value(json_object_get(json_array_get(srcs, (size_t)i), "fingerprint"));
        const uint64_t saved = x && strlen(x) == 16 ? strtoull(x, NULL, 16) : 0;
        if (!saved || saved == now[i]) continue;
        for (int k = 0; k < m->n; k++)
            if (k != i && saved == now[k] && strcmp(m->paths[i], m->paths[k]))
                return base_fail(err,
                                 "the position's source %d is this run's source %d (%s): give "
                                 "training.dataset_sources in the order the checkpoint was "
                                 "trained with",
                                 i + 1, k + 1, m->paths[k]);
    }
    return 0;
}

/* A mixture's state j into m (n > 1): the keys checked first, then every source's position,
 * then the generator. */
static int restore_mix(data_mix *m, const json_t *j, const json_t *srcs, base_err *err) {
    const json_t *dr = json_object_get(j, "mix_draws"), *sd = json_object_get(j, "mix_seed");
    const json_t *w = json_object_get(j, "mix_weights");
    if (!json_is_array(srcs))
        return base_fail(err, "data-loader state: a mixture's \"sources\" must be an array of "
                              "the sources' positions");
    if (json_array_size(srcs) != (size_t)m->n)
        return base_fail(err,
                         "the position is of a mixture of %d sources; this run reads %d: resume "
                         "with the same training.dataset_sources, or leave the position out "
                         "(checkpoint.exclude_from_loading = [\"dataloader\"])",
                         (int)json_array_size(srcs), m->n);
    /* counters below 2^62, as the loader's own: counting on from them never overflows */
    if (!json_is_integer(dr) || json_integer_value(dr) < 0 ||
        json_integer_value(dr) >= ((json_int_t)1 << 62))
        return base_fail(err, "data-loader state: a mixture's \"mix_draws\" must be an integer "
                              "from 0 to 2^62");
    if (!json_is_integer(sd) || json_integer_value(sd) < 0)
        return base_fail(err, "data-loader state: a mixture's \"mix_seed\" must be an integer "
                              ">= 0");
    int ok_w = json_is_array(w) && json_array_size(w) == (size_t)m->n, same_w = 1;
    for (int i = 0; ok_w && i < m->n; i++) {
        const json_t *x = json_array_get(w, (size_t)i);
        ok_w = json_is_number(x);
        same_w &= ok_w && json_number_value(x) == m->weights[i];
    }
    if (!ok_w)
        return base_fail(err,
                         "data-loader state: a mixture's \"mix_weights\" must be %d numbers, "
                         "one a source",
                         m->n);
    const json_t *rw = json_object_get(j, "mix_rows");
    int ok_r = json_is_array(rw) && json_array_size(rw) == (size_t)m->n;
    for (int i = 0; ok_r && i < m->n; i++) {
        const json_t *x = json_array_get(rw, (size_t)i);
        ok_r = json_is_integer(x) && json_integer_value(x) >= 0 &&
               json_integer_value(x) < ((json_int_t)1 << 62);
    }
    if (!ok_r)
        return base_fail(err,
                         "data-loader state: a mixture's \"mix_rows\" must be %d integers "
                         "from 0 to 2^62, one a source",
                         m->n);
    mt19937 g;
    if (parse_rng(j, &g, err)) return -1;
    if (reordered(m, srcs, err)) return -1;
    for (int i = 0; i < m->n; i++)
        if (restore_source(m->src[i], json_array_get(srcs, (size_t)i), i, m->n, m->paths[i], err))
            return -1;
    const uint64_t seed = (uint64_t)json_integer_value(sd);
    if (seed != m->seed)
        base_log(BASE_LOG_WARN,
                 "data: the position's source draws were seeded %llu; they go on from that "
                 "generator's state (as torchtitan restores its interleaver's), not from this "
                 "run's training.dataset_mix_seed %llu",
                 (unsigned long long)seed, (unsigned long long)m->seed);
    if (!same_w)
        base_log(BASE_LOG_INFO, "data: the mixture's weights differ from the position's; the "
                                "draws from here use this run's");
    m->seed = seed;
    m->g = g;
    m->draws = json_integer_value(dr);
    for (int i = 0; i < m->n; i++) m->rows[i] = json_integer_value(json_array_get(rw, (size_t)i));
    return 0;
}

int data_mix_state_restore(data_mix *m, const char *text, base_err *err) {
    json_error_t je;
    json_t *j = json_loads(text, JSON_REJECT_DUPLICATES, &je);
    if (!j) return base_fail(err, "data-loader state: not JSON (%s)", je.text);
    if (!json_is_object(j)) {
        json_decref(j);
        return base_fail(err, "data-loader state: not a JSON object");
    }
    const json_t *srcs = json_object_get(j, "sources");
    const int n_saved = json_is_array(srcs) ? (int)json_array_size(srcs) : -1;
    char many[48] = "a mixture of sources";
    if (n_saved >= 0) snprintf(many, sizeof many, "a mixture of %d sources", n_saved);
    int rc = -1;
    if (m->n == 1 && srcs)
        base_fail(err,
                  "the position is of %s (training.dataset_sources); this run reads one dataset: "
                  "give it the same sources, or leave the position out "
                  "(checkpoint.exclude_from_loading = [\"dataloader\"])",
                  many);
    else if (m->n == 1)
        rc = restore_source(m->src[0], j, 0, 1, m->paths[0], err);
    else if (!srcs)
        base_fail(err,
                  "the position is of one dataset; this run reads a mixture of %d sources "
                  "(training.dataset_sources): give it that dataset alone, or leave the position "
                  "out (checkpoint.exclude_from_loading = [\"dataloader\"])",
                  m->n);
    else
        rc = restore_mix(m, j, srcs, err);
    json_decref(j);
    return rc;
}
