/* Cached inference (a KV cache per layer, the block forward shared with training) and
 * next-token sampling. See model.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/internal.h"

/* Rows per forward call: prefill runs in chunks of this many tokens, which bounds the
 * scratch (about chunk * (4 D + 4 H hd + 3 F) floats: 176 MB at Qwen3-0.6B, ~1 GB at 32B, as
 * much as 2048 positions' KV cache there) while keeping the GEMMs wide. The first chunk's
 * attention is training's tiled kernel, a later chunk's attention_kv (a query at a time over
 * the cache): with 256-row chunks a 2059-token prompt took 41 s at 0.6B in bf16, 2.96 s with
 * one chunk (bench/RESULTS.md "Session 46"). */
#define INFER_CHUNK 2048

struct model_infer {
    const model *m;
    int max_len, chunk, len;
    float *k, *v;               /* [L, max_len, G, hd]: k after q/k norm + RoPE, v */
    float *rope_cos, *rope_sin; /* [max_len, hd/2] */
    layer_acts la;              /* [chunk] rows; la.k / la.v are set per layer to cache rows */
    float *xa, *xb;             /* [chunk, D] residual stream, ping-pong between blocks */
    float *xn, *rstd_f;         /* [chunk, D], [chunk] final norm */
    float *norm_out, *hact;     /* [chunk, D], [chunk, F] block scratch (MoE: [chunk*K, Fe]) */
    float *moe, *xs;            /* MoE: the saved routing state, routed rows [chunk*K, D] */
};

void model_infer_free(model_infer *s) {
    if (!s) return;
    float *bufs[] = {s->k,        s->v,        s->rope_cos,  s->rope_sin,  s->la.xm,   s->la.qp,
                     s->la.kp,    s->la.q,     s->la.o,      s->la.lse,    s->la.gate, s->la.up,
                     s->la.rstd1, s->la.rstd2, s->la.q_rstd, s->la.k_rstd, s->xa,      s->xb,
                     s->xn,       s->rstd_f,   s->norm_out,  s->hact,      s->moe,     s->xs};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) base_free(bufs[i]);
    free(s);
}

int model_infer_check(const model *m, int max_len, base_err *err) {
    const int chunk = max_len < INFER_CHUNK ? max_len : INFER_CHUNK;
    base_err why;
    for (int t = 1; t <= chunk; t++) /* a prompt's last chunk, and decoding, take any count */
        if (model_kernels_fit(m, 1, t, &why))
            return base_fail(err,
                             "inference runs the model at batch 1 and 1 to %d tokens per call, "
                             "and a call of %d breaks a kernel's constraint: %s (kernel overrides "
                             "are checked at build for the training shape)",
                             chunk, t, why.msg);
    return 0;
}

int model_infer_new(model_infer **out, const model *m, int max_len, base_err *err) {
    *out = NULL;
    const model_args *a = &m->args;
    if (max_len <= 0)
        return base_fail(err, "inference: max_len must be positive (got %d)", max_len);
    if (model_infer_check(m, max_len, err)) return -1;
    if (m->tp.size > 1)
        return base_fail(err,
                         "inference: the model is tensor-parallel (tp %d); gather a full "
                         "model first",
                         m->tp.size);
    model_bf16_sync_all(m);
    const size_t L = (size_t)a->n_layers, D = (size_t)a->dim, Q = (size_t)a->n_heads * a->head_dim,
                 KV = (size_t)a->n_kv_heads * a->head_dim,
                 F = a->n_experts > 0 ? (size_t)a->top_k * a->moe_ffn_dim : (size_t)a->ffn_dim;
    const double cache_bytes = 2.0 * L * (double)max_len * KV * sizeof(float);
    if (cache_bytes > (double)(SIZE_MAX / 2))
        return base_fail(err, "inference: a KV cache of %d positions is too large", max_len);
    model_infer *s = calloc(1, sizeof *s);
    if (!s) return base_fail(err, "out of memory");
    s->m = m;
    s->max_len = max_len;
    s->chunk = max_len < INFER_CHUNK ? max_len : INFER_CHUNK;
    const size_t C = (size_t)s->chunk;
    s->k = base_alloc(L * max_len * KV * sizeof(float));
    s->v = base_alloc(L * max_len * KV * sizeof(float));
    s->rope_cos = base_alloc((size_t)max_len * a->head_dim / 2 * sizeof(float));
    s->rope_sin = base_alloc((size_t)max_len * a->head_dim / 2 * sizeof(float));
    s->la.xm = base_alloc(C * D * sizeof(float));
    s->la.qp = base_alloc(C * Q * sizeof(float));
    s->la.kp = base_alloc(C * KV * sizeof(float));
    s->la.q = base_alloc(C * Q * sizeof(float));
    s->la.o = base_alloc(C * Q * sizeof(float));
    s->la.lse = base_alloc(C * a->n_heads * sizeof(float));
    s->la.gate = base_alloc(C * F * sizeof(float));
    s->la.up = base_alloc(C * F * sizeof(float));
    s->la.rstd1 = base_alloc(C * sizeof(float));
    s->la.rstd2 = base_alloc(C * sizeof(float));
    s->la.q_rstd = base_alloc(C * a->n_heads * sizeof(float));
    s->la.k_rstd = base_alloc(C * a->n_kv_heads * sizeof(float));
    s->xa = base_alloc(C * D * sizeof(float));
    s->xb = base_alloc(C * D * sizeof(float));
    s->xn = base_alloc(C * D * sizeof(float));
    s->rstd_f = base_alloc(C * sizeof(float));
    s->norm_out = base_alloc(C * D * sizeof(float));
    s->hact = base_alloc(C * F * sizeof(float));
    if (a->n_experts > 0) {
        s->moe = base_alloc(model_moe_saved_floats(a, C, 1) * sizeof(float));
        s->xs = base_alloc(C * a->top_k * D * sizeof(float));
        if (!s->moe || !s->xs) {
            model_infer_free(s);
            return base_fail(err, "out of memory");
        }
        model_moe_carve(a, C, s->moe, &s->la.moe, 1);
    }
    if (!s->k || !s->v || !s->rope_cos || !s->rope_sin || !s->la.xm || !s->la.qp || !s->la.kp ||
        !s->la.q || !s->la.o || !s->la.lse || !s->la.gate || !s->la.up || !s->la.rstd1 ||
        !s->la.rstd2 || !s->la.q_rstd || !s->la.k_rstd || !s->xa || !s->xb || !s->xn ||
        !s->rstd_f || !s->norm_out || !s->hact) {
        model_infer_free(s);
        return base_fail(err, "out of memory: a KV cache of %d positions needs %.2f GiB", max_len,
                         cache_bytes / (1 << 30));
    }
    /* The same table function as training, over more positions: row t is identical. */
    ops_rope_table(s->rope_cos, s->rope_sin, max_len, a->head_dim, a->rope_theta);
    *out = s;
    return 0;
}

int model_infer_len(const model_infer *s) {
    return s->len;
}
int model_infer_max_len(const model_infer *s) {
    return s->max_len;
}
int model_infer_vocab(const model_infer *s) {
    return s->m->args.vocab_size;
}
void model_infer_reset(model_infer *s) {
    s->len = 0;
}

int model_infer_forward(model_infer *s, const int32_t *tokens, int n, float *logits, int all_logits,
                        base_err *err) {
    const model *m = s->m;
    const model_args *a = &m->args;
    const int L = a->n_layers, D = a->dim, V = a->vocab_size, h = a->head_dim / 2;
    const size_t KV = (size_t)a->n_kv_heads * a->head_dim, layer = (size_t)s->max_len * KV;
    if (n < 0 || n > s->max_len - s->len)
        return base_fail(err, "inference: %d more tokens after %d exceed the cache of %d positions",
                         n, s->len, s->max_len);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= V)
            return base_fail(err,
                             "inference: token %d (input %d) is outside the vocabulary [0, %d)",
                             tokens[i], i, V);
    for (int done = 0; done < n;) {
        const int c = n - done < s->chunk ? n - done : s->chunk, pos0 = s->len;
        float *x = s->xa, *y = s->xb;
        m->ops[0].embedding_fwd(x, tokens + done, embed_at(m, m->w), c, D);
        for (int l = 0; l < L; l++) {
            float *kc = s->k + l * layer, *vc = s->v + l * layer;
            block_geom g = {.B = 1,
                            .T = c,
                            .cos = s->rope_cos + (size_t)pos0 * h,
                            .sin = s->rope_sin + (size_t)pos0 * h,
                            .pos0 = pos0,
                            .k_cache = kc,
                            .v_cache = vc,
                            .norm_out = s->norm_out,
                            .hact = s->hact,
                            .xs = s->xs};
            s->la.x = x;
            s->la.k = kc + (size_t)pos0 * KV;
            s->la.v = vc + (size_t)pos0 * KV;
            model_block_forward(m, l, &s->la, &g, y);
            float *t = x;
            x = y;
            y = t;
        }
        s->len += c;
        done += c;
        if (logits && all_logits) {
            model_final_norm(m, s->xn, s->rstd_f, x, c);
            model_lm_head(m, logits + (size_t)(done - c) * V, s->xn, c);
        } else if (logits && done == n) { /* only the last position's row */
            model_final_norm(m, s->xn, s->rstd_f, x + (size_t)(c - 1) * D, 1);
            model_lm_head(m, logits, s->xn, 1);
        }
    }
    return 0;
}

/* ---- sampling ---------------------------------------------------------------------- */

typedef struct {
    double v; /* (logit - max logit) / temperature: <= 0, -inf where a tiny temperature
               * overflows (exp gives 0, the max's exp(0) = 1: any T > 0 is a softmax) */
    int32_t id;
} cand;

/* a ranks before b: larger value, then lower id (a total order: results never depend on the
 * sort algorithm) */
static int cand_before(const cand *a, const cand *b) {
    return a->v > b->v || (a->v == b->v && a->id < b->id);
}
static int cand_cmp(const void *pa, const void *pb) {
    const cand *a = pa, *b = pb;
    return cand_before(a, b) ? -1 : cand_before(b, a) ? 1 : 0;
}

/* Keeps the k best of c[0..n) in c[0..k) (a min-heap on rank: its root is the worst kept). */
static int select_top_k(cand *c, int n, int k) {
    int size = 0;
    for (int i = 0; i < n; i++) {
        cand x = c[i];
        int j;
        if (size < k) { /* sift up */
            j = size++;
            while (j > 0 && cand_before(&c[(j - 1) / 2], &x)) {
                c[j] = c[(j - 1) / 2];
                j = (j - 1) / 2;
            }
        } else if (cand_before(&x, &c[0])) { /* replace the root, sift down */
            j = 0;
            for (;;) {
                int ch = 2 * j + 1;
                if (ch >= size) break;
                if (ch + 1 < size && cand_before(&c[ch], &c[ch + 1])) ch++;
                if (!cand_before(&x, &c[ch])) break;
                c[j] = c[ch];
                j = ch;
            }
        } else {
            continue;
        }
        c[j] = x;
    }
    return size;
}

/* A logit's softmax exponent at temperature temp > 0, relative to the max logit (<= 0) */
static double scaled(float logit, double lmax, double temp) {
    return ((double)logit - lmax) / temp;
}

int32_t model_sample(const float *logits, int V, const model_sampler *s, uint64_t index) {
    int32_t best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    if (!(s->temperature > 0) || V <= 1) return best;
    /* scaled in double, from the max: a float temperature underflows below ~1e-38 and
     * logit / T overflows, which gave inf - inf = NaN weights (token 0) for a tiny T */
    const double temp = s->temperature, lmax = logits[best];
    const double top_p = s->top_p > 0 && s->top_p < 1 ? s->top_p : 1.0;
    cand *c = malloc(sizeof(cand) * (size_t)V);
    if (!c) return -1;
    int n = 0;
    double total = -1; /* the softmax denominator over the top-k survivors (or all tokens) */
    if (s->top_k > 0 && s->top_k < V) {
        for (int i = 0; i < V; i++) c[i] = (cand){scaled(logits[i], lmax, temp), i};
        n = select_top_k(c, V, s->top_k);
        qsort(c, (size_t)n, sizeof(cand), cand_cmp);
        /* HF's TopKLogitsWarper removes only logits below the k-th best: every token tied
         * with it stays (top_k 1 with a tied best samples among them). The better ones keep
         * their order; all the ties follow them, in id order. */
        const float kth = logits[c[n - 1].id];
        int better = 0;
        for (int j = 0; j < n; j++)
            if (logits[c[j].id] != kth) c[better++] = c[j];
        n = better;
        for (int i = 0; i < V; i++)
            if (logits[i] == kth) c[n++] = (cand){scaled(logits[i], lmax, temp), i};
    } else if (top_p < 1) {
        /* Only tokens with p >= (1 - top_p) / V can be in the nucleus: all smaller ones together
         * hold less than 1 - top_p, so the mass ranked above any of them exceeds top_p. Dropping
         * them first leaves the cumulative sums of the others unchanged and the sort short. */
        double z = 0;
        for (int i = 0; i < V; i++) z += exp(scaled(logits[i], lmax, temp));
        const double floor_w = (1 - top_p) / V * z;
        for (int i = 0; i < V; i++) {
            const double v = scaled(logits[i], lmax, temp);
            if (exp(v) >= floor_w) c[n++] = (cand){v, i};
        }
        qsort(c, (size_t)n, sizeof(cand), cand_cmp);
        total = z;
    } else {
        /* plain temperature sampling: no sort, the draw walks the ids in order */
        for (int i = 0; i < V; i++) c[n++] = (cand){scaled(logits[i], lmax, temp), i};
    }
    if (total < 0) {
        total = 0;
        for (int i = 0; i < n; i++) total += exp(c[i].v);
    }
    int kept = n;
    double kept_mass = total;
    if (top_p < 1) { /* keep while the mass ranked above the token is below top_p */
        double above = 0;
        for (kept = 0; kept < n && (kept == 0 || above < top_p * total); kept++)
            above += exp(c[kept].v);
        kept_mass = above;
    }
    const double u = base_rng_uniform(s->seed, MODEL_SAMPLE_STREAM, index) * kept_mass;
    int32_t pick = c[kept - 1].id;
    double acc = 0;
    for (int i = 0; i < kept; i++) {
        acc += exp(c[i].v);
        if (acc > u) {
            pick = c[i].id;
            break;
        }
    }
    free(c);
    return pick;
}
