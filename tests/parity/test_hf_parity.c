/* Numerical parity of titan against Hugging Face transformers' Qwen3ForCausalLM and
 * Qwen3MoeForCausalLM (MoE: every expert and the router; with the auxiliary load-balancing loss
 * on or off: loss = CE mean + router_aux_loss_coef * aux, aux also compared on its own).
 *
 * Usage: test_hf_parity DIR, where DIR holds weights.safetensors and ref.safetensors written by
 * tests/reference/hf_reference.py. Checks, from the same initial weights:
 *   - logits:            max |titan - HF| <= 1e-4
 *   - loss:              relative error <= 1e-5 (and the same count of valid targets)
 *   - every gradient:    ||g - g_ref|| / ||g_ref|| <= 1e-4 (a per-tensor table is printed)
 *   - 10 training steps (clip + AdamW + warmup-stable-decay LR): losses within 1e-4 relative,
 *     pre-clip grad norms within 1e-3 relative, LRs within 1e-12.
 * Also writes titan's gradients to DIR/titan_grads.safetensors (checked by
 * tests/reference/check_safetensors.py --grads with the Python safetensors package).
 *
 * Usage: test_hf_parity --prec bf16 DIR builds titan's bf16 mixed-precision model instead
 * (bf16 GEMM operands, fp32 accumulation, fp32 master weights) and checks it against the same
 * forward/backward under torch.autocast("cpu", bfloat16) in DIR/autocast.safetensors:
 *   - loss:              relative error <= 1e-2 (issue 16)
 *   - every gradient:    rel L2 <= TOL_BF16_GRAD against autocast's, and against the fp32
 *                        reference's (both sides round differently, so each is also measured
 *                        against fp32: the printed table has all three pairs). MoE only: where
 *                        autocast's own gradient is further than TOL_BF16_GRAD from fp32 (its
 *                        bf16 router logits flipped a token's top-k choice), titan is held to
 *                        one bound: autocast's when titan flipped the same way (counted as
 *                        shared), else fp32's (counted as waived)
 *   - bf16 is in effect: titan's worst rel L2 against fp32 >= TOL_BF16_FLOOR (an fp32 path
 *                        is within 1e-4 and would fail here)
 * No training steps and no gradient file in this mode.
 * Exits non-zero on any failure, naming each one. */
#include "checkpoint/checkpoint.h"
#include "model/model.h"
#include "optim/optim.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL_LOGITS 1e-4
#define TOL_LOSS 1e-5
#define TOL_GRAD 1e-4
#define TOL_TRAIN_LOSS 1e-4
#define TOL_TRAIN_NORM 1e-3
#define TOL_LR 1e-12
/* bf16 (--prec bf16). Measured (AMD EPYC, AVX2, titan's emulated bf16 engine; torch 2.15,
 * transformers 5.23): worst per-tensor rel L2 titan-bf16 vs autocast / titan-bf16 vs fp32 /
 * autocast vs fp32 = 1.26e-2 / 1.07e-2 / 1.26e-2 on gqa_tied, 1.20e-2 / 1.19e-2 / 1.21e-2 on
 * moe; 1.0-1.6e-2 on untied, mha_long and moe_aux (outside its routing flip: there autocast
 * is 0.3 from fp32, titan 1.2e-2); losses agree to 5e-5. bf16 keeps 8 significant bits (unit
 * roundoff 2^-9 = 2e-3) and a gradient passes through a few rounded GEMMs, so ~1e-2 is the
 * expected order, and titan is as far from autocast as autocast is from fp32. 3e-2 is ~1.8x
 * the worst measured (room for a different GEMM engine's accumulation order) and far below a
 * wrong gradient (O(1)). */
#define TOL_BF16_LOSS 1e-2
#define TOL_BF16_GRAD 3e-2
#define TOL_BF16_FLOOR 1e-3

static int g_fail = 0;
static char g_failures[4096];

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...) {
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "FAIL: %s\n", line);
    size_t n = strlen(g_failures);
    if (n + strlen(line) + 3 < sizeof g_failures)
        snprintf(g_failures + n, sizeof g_failures - n, "  %s\n", line);
    g_fail++;
}

static void die(const char *what, const base_err *err) {
    fprintf(stderr, "FAIL: %s: %s\n", what, err->msg);
    exit(1);
}

static const char *meta(const ckpt_file *f, const char *key) {
    const char *v = ckpt_meta_get(f, key);
    if (!v) {
        fprintf(stderr, "FAIL: %s: __metadata__ has no '%s'\n", f->path, key);
        exit(1);
    }
    return v;
}

static int64_t meta_i64(const ckpt_file *f, const char *key) {
    int64_t v;
    if (base_parse_i64(meta(f, key), &v) != 0) {
        fprintf(stderr, "FAIL: %s: __metadata__ '%s' = '%s' is not an integer\n", f->path, key,
                meta(f, key));
        exit(1);
    }
    return v;
}

static double meta_f64(const ckpt_file *f, const char *key) {
    double v;
    if (base_parse_f64(meta(f, key), &v) != 0) {
        fprintf(stderr, "FAIL: %s: __metadata__ '%s' = '%s' is not a number\n", f->path, key,
                meta(f, key));
        exit(1);
    }
    return v;
}

/* A tensor converted to the wanted type; dies unless it has exactly `want` elements. */
static void *need(const ckpt_file *f, const char *name, int64_t want, char type) {
    base_err err;
    int64_t n = 0;
    void *p = type == 'f'   ? (void *)ckpt_get_f32(f, name, &n, &err)
              : type == 'd' ? (void *)ckpt_get_f64(f, name, &n, &err)
                            : (void *)ckpt_get_i32(f, name, &n, &err);
    if (!p) die(name, &err);
    if (n != want) {
        fprintf(stderr, "FAIL: %s: tensor '%s' has %lld elements, expected %lld\n", f->path, name,
                (long long)n, (long long)want);
        exit(1);
    }
    return p;
}

/* Document masking: a docs reference's positions tensor (n elements from element `at`) set
 * as the model's documents; nothing for a reference without one. */
static void set_docs(model *m, const ckpt_file *f, const char *name, int64_t at, int64_t n) {
    const ckpt_tensor *t = ckpt_find(f, name);
    if (!t) return;
    int64_t all = 1;
    for (int d = 0; d < t->ndim; d++) all *= t->shape[d];
    int32_t *p = need(f, name, all, 'i');
    base_err err;
    if (at + n > all || model_set_positions(m, p + at, &err) != 0) die(name, &err);
    base_free(p);
}

/* An optional __metadata__ integer (dense references have no MoE keys). */
static int64_t meta_i64_or(const ckpt_file *f, const char *key, int64_t dflt) {
    return ckpt_meta_get(f, key) ? meta_i64(f, key) : dflt;
}

/* ||x - ref|| / ||ref|| in double (0 when x equals ref, also where both are zero); *norm_ref,
 * *norm_diff get the two norms. */
static double rel_l2(const float *x, const float *ref, size_t n, double *norm_ref,
                     double *norm_diff) {
    double s_ref = 0, s_diff = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)x[i] - ref[i];
        s_diff += d * d;
        s_ref += (double)ref[i] * ref[i];
    }
    *norm_ref = sqrt(s_ref);
    *norm_diff = sqrt(s_diff);
    /* both exactly zero (an expert no token reached): equal, not 0 / 0; a zero reference with a
     * nonzero x stays infinite, a failure */
    return s_diff == 0 ? 0.0 : *norm_diff / *norm_ref;
}

static int64_t count_valid(const int32_t *targets, int64_t n) {
    int64_t c = 0;
    for (int64_t i = 0; i < n; i++) c += targets[i] != OPS_IGNORE_INDEX;
    return c;
}

/* --prec bf16: titan's bf16 model m (weights loaded) against HF under bf16 autocast (DIR's
 * autocast.safetensors) and both against the fp32 reference ref; see the top of the file. */
static void check_bf16(model *m, const char *dir, const ckpt_file *ref, const int32_t *tokens,
                       const int32_t *targets, int64_t BT, int V, int64_t nv_ref, double coef,
                       int moe) {
    char path[1024];
    snprintf(path, sizeof path, "%s/autocast.safetensors", dir);
    base_err err;
    ckpt_file ac;
    if (ckpt_open(&ac, path, &err) != 0) die("autocast reference", &err);
    printf("bf16: titan prec bf16 (engine %s, native bf16 units: %s) against %s\n",
           ops_bf16_engine(), ops_bf16_native() ? "yes" : "no", meta(&ac, "reference"));

    /* logits: autocast's are bf16 (rounded), titan's fp32-accumulated; printed, not bounded
     * (the loss and the gradients below carry the check) */
    float *ac_logits = need(&ac, "logits", BT * V, 'f');
    float *f32_logits = need(ref, "logits", BT * V, 'f');
    float *logits = base_alloc((size_t)(BT * V) * sizeof(float));
    model_logits(m, tokens, logits);
    double d_ac = 0, d_f32 = 0, d_pair = 0;
    for (int64_t i = 0; i < BT * V; i++) {
        d_ac = fmax(d_ac, fabs((double)logits[i] - ac_logits[i]));
        d_f32 = fmax(d_f32, fabs((double)logits[i] - f32_logits[i]));
        d_pair = fmax(d_pair, fabs((double)ac_logits[i] - f32_logits[i]));
    }
    printf("logits max abs diff: titan-bf16 vs autocast %.3e, titan-bf16 vs fp32 %.3e, "
           "autocast vs fp32 %.3e\n",
           d_ac, d_f32, d_pair);
    if (!(d_ac == d_ac && d_f32 == d_f32)) fail("bf16 logits: NaN");

    double *ac_loss = need(&ac, "loss", 1, 'd'), *f32_loss = need(ref, "loss", 1, 'd');
    model_zero_grad(m);
    int64_t nv = -1;
    double loss_sum = model_step_microbatch(m, tokens, targets, 1.0f / (float)nv_ref, &nv);
    double loss = loss_sum / (double)nv + coef * m->moe_aux_loss;
    const double e_ac = fabs(loss - ac_loss[0]) / fabs(ac_loss[0]);
    printf("loss: titan-bf16 %.8f autocast %.8f fp32 %.8f; rel err vs autocast %.2e, titan-bf16 "
           "vs fp32 %.2e, autocast vs fp32 %.2e\n",
           loss, ac_loss[0], f32_loss[0], e_ac, fabs(loss - f32_loss[0]) / fabs(f32_loss[0]),
           fabs(ac_loss[0] - f32_loss[0]) / fabs(f32_loss[0]));
    if (nv != nv_ref) fail("bf16 n_valid: titan %lld, HF %lld", (long long)nv, (long long)nv_ref);
    if (!(e_ac <= TOL_BF16_LOSS))
        fail("bf16 loss: titan %.8f autocast %.8f rel err %.2e > %.0e", loss, ac_loss[0], e_ac,
             TOL_BF16_LOSS);

    printf("%-48s %12s %12s %12s\n", "gradient rel L2 (HF name)", "titan-vs-ac", "titan-vs-f32",
           "ac-vs-f32");
    double w_pair = 0, w_titan = 0, w_ac = 0, w_kept = 0, nr, nd; /* kept: not waived */
    double w_titan_kept = 0; /* titan vs fp32 over the tensors not flipped alike */
    int n_waived = 0, n_shared = 0;
    ckpt_entry *es;
    int n_es;
    if (ckpt_expected(m, CKPT_NAMES_HF, &es, &n_es, &err) != 0) die("ckpt_expected", &err);
    for (int p = 0; p < n_es; p++) {
        char name[160];
        snprintf(name, sizeof name, "grad.%s", es[p].name);
        float *ga = need(&ac, name, (int64_t)es[p].numel, 'f');
        float *gf = need(ref, name, (int64_t)es[p].numel, 'f');
        const float *g = m->g + es[p].offset;
        const double r_pair = rel_l2(g, ga, es[p].numel, &nr, &nd);
        const double r_titan = rel_l2(g, gf, es[p].numel, &nr, &nd);
        const double r_ac = rel_l2(ga, gf, es[p].numel, &nr, &nd);
        /* autocast itself off fp32 by more than bf16 rounding explains: a top-k routing flip
         * under its bf16 router logits. titan's bf16 path may flip the same token (then it
         * matches autocast, both off fp32) or not (then it matches fp32): either passes */
        const int flip = moe && !(r_ac <= TOL_BF16_GRAD);
        const int waived = flip && !(r_pair <= TOL_BF16_GRAD); /* checked vs fp32 only */
        const int shared = flip && r_pair <= TOL_BF16_GRAD;    /* checked vs autocast only */
        const int bad =
            !(r_pair <= TOL_BF16_GRAD || waived) || !(r_titan <= TOL_BF16_GRAD || shared);
        n_waived += waived;
        n_shared += shared;
        if (!waived) w_kept = fmax(w_kept, r_pair);
        if (!shared) w_titan_kept = fmax(w_titan_kept, r_titan);
        printf("%-48s %12.2e %12.2e %12.2e%s\n", es[p].name, r_pair, r_titan, r_ac,
               bad      ? "  <-- FAIL"
               : waived ? "  (autocast off fp32: titan vs fp32 only)"
               : shared ? "  (both bf16 sides off fp32 alike: titan vs autocast only)"
                        : "");
        if (bad)
            fail("bf16 gradient %s: rel L2 vs autocast %.2e, vs fp32 %.2e (bound %.0e)", es[p].name,
                 r_pair, r_titan, TOL_BF16_GRAD);
        w_pair = fmax(w_pair, r_pair), w_titan = fmax(w_titan, r_titan), w_ac = fmax(w_ac, r_ac);
        base_free(ga);
        base_free(gf);
    }
    free(es);
    printf("bf16 gradients, max over %d tensors of rel L2: titan-bf16 vs autocast %.2e, "
           "titan-bf16 vs fp32 %.2e, autocast vs fp32 %.2e\n",
           n_es, w_pair, w_titan, w_ac);
    if (n_waived)
        printf("bf16: %d tensor(s) where autocast's gradient is > %.0e from fp32 (a top-k routing "
               "flip under its bf16 router logits) checked against fp32 only; titan-bf16 vs "
               "autocast over the other %d: %.2e\n",
               n_waived, TOL_BF16_GRAD, n_es - n_waived, w_kept);
    if (n_shared)
        printf("bf16: %d tensor(s) off fp32 by more than %.0e on both bf16 sides alike (the same "
               "routing flip under bf16 router logits in titan and autocast) checked against "
               "autocast only; titan-bf16 vs fp32 over the other %d: %.2e\n",
               n_shared, TOL_BF16_GRAD, n_es - n_shared, w_titan_kept);
    if (!(w_titan >= TOL_BF16_FLOOR))
        fail("bf16 gradients within %.2e of fp32 (< %.0e): the bf16 path did not run", w_titan,
             TOL_BF16_FLOOR);
    base_free(ac_loss);
    base_free(f32_loss);
    base_free(ac_logits);
    base_free(f32_logits);
    base_free(logits);
    ckpt_close(&ac);
}

int main(int argc, char **argv) {
    const int bf16 = argc == 4 && !strcmp(argv[1], "--prec") && !strcmp(argv[2], "bf16");
    if (argc != 2 && !bf16) {
        fprintf(stderr,
                "usage: %s [--prec bf16] DIR (written by tests/reference/hf_reference.py)\n",
                argv[0]);
        return 2;
    }
    const char *dir = argv[argc - 1];
    char ref_path[1024], w_path[1024], g_path[1024];
    snprintf(ref_path, sizeof ref_path, "%s/ref.safetensors", dir);
    snprintf(w_path, sizeof w_path, "%s/weights.safetensors", dir);
    snprintf(g_path, sizeof g_path, "%s/titan_grads.safetensors", dir);

    base_err err;
    ckpt_file ref;
    if (ckpt_open(&ref, ref_path, &err) != 0) die("reference", &err);

    /* ---- the model, from the reference's arguments --------------------------------- */
    model_args a;
    if (model_flavor("debugmodel", &a, &err) != 0) die("model_flavor", &err);
    static const char *const keys[] = {"dim",      "n_layers",      "n_heads",    "n_kv_heads",
                                       "head_dim", "ffn_dim",       "vocab_size", "rope_theta",
                                       "norm_eps", "tie_embeddings"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (model_args_set(&a, keys[i], meta(&ref, keys[i]), 1, &err) != 0)
            die("model_args_set", &err);
    static const char *const moe_keys[] = {"n_experts", "top_k", "moe_ffn_dim", "norm_topk_prob",
                                           "router_aux_loss_coef"};
    const int moe = meta_i64_or(&ref, "n_experts", 0) > 0;
    for (size_t i = 0; moe && i < sizeof moe_keys / sizeof moe_keys[0]; i++)
        if (model_args_set(&a, moe_keys[i], meta(&ref, moe_keys[i]), 1, &err) != 0)
            die("model_args_set", &err);
    const int aux_on = moe && meta_i64_or(&ref, "aux", 0) != 0;
    const double coef = aux_on ? a.router_aux_loss_coef : 0.0;
    if (model_args_validate(&a, &err) != 0) die("model_args_validate", &err);
    const int B = (int)meta_i64(&ref, "batch"), T = (int)meta_i64(&ref, "seq_len");
    const int V = a.vocab_size;
    const int64_t BT = (int64_t)B * T;
    printf("config %s: dim %d, layers %d, heads %d/%d, head_dim %d, ffn %d, vocab %d, %s, "
           "theta %g, eps %g, batch %d x %d\n",
           meta(&ref, "config"), a.dim, a.n_layers, a.n_heads, a.n_kv_heads, a.head_dim, a.ffn_dim,
           a.vocab_size, a.tie_embeddings ? "tied" : "untied", a.rope_theta, a.norm_eps, B, T);

    model m;
    if (moe)
        printf(
            "MoE: %d experts, top-%d, expert width %d, norm_topk_prob %d, aux loss %s (coef %g)\n",
            a.n_experts, a.top_k, a.moe_ffn_dim, a.norm_topk_prob, aux_on ? "on" : "off", coef);
    model_build_opts bo = {.batch = B,
                           .seq_len = T,
                           .ac = MODEL_AC_NONE,
                           .with_grads = 1,
                           .balance = aux_on ? MODEL_BALANCE_AUX_LOSS : MODEL_BALANCE_NONE,
                           .prec = bf16 ? OPS_PREC_BF16 : OPS_PREC_F32,
                           .docs = ckpt_find(&ref, "positions") != NULL};
    if (model_build(&m, &a, &bo, &err) != 0) die("model_build", &err);
    if (ckpt_load_model(&m, m.w, w_path, &err) != 0) die("load weights", &err);

    int32_t *tokens = need(&ref, "input_ids", BT, 'i');
    int32_t *targets = need(&ref, "targets", BT, 'i');
    set_docs(&m, &ref, "positions", 0, BT);
    if (m.seg) printf("documents: %d in %d windows (block-causal attention)\n", m.n_seg, B);
    if (bf16) {
        double *nvd = need(&ref, "n_valid", 1, 'd');
        check_bf16(&m, dir, &ref, tokens, targets, BT, V, (int64_t)nvd[0], coef, moe);
        base_free(nvd);
        base_free(tokens);
        base_free(targets);
        model_free(&m);
        ckpt_close(&ref);
        if (g_fail) {
            fprintf(stderr, "test_hf_parity --prec bf16 %s: %d failure(s):\n%s", dir, g_fail,
                    g_failures);
            return 1;
        }
        printf("test_hf_parity --prec bf16 %s: PASS\n", dir);
        return 0;
    }

    /* ---- logits --------------------------------------------------------------------- */
    float *ref_logits = need(&ref, "logits", BT * V, 'f');
    float *logits = base_alloc((size_t)(BT * V) * sizeof(float));
    model_logits(&m, tokens, logits);
    double max_diff = 0, max_ref = 0;
    int64_t at = 0;
    for (int64_t i = 0; i < BT * V; i++) {
        double d = fabs((double)logits[i] - ref_logits[i]);
        if (!(d <= max_diff)) max_diff = d, at = i; /* NaN sticks */
        if (fabs(ref_logits[i]) > max_ref) max_ref = fabs(ref_logits[i]);
    }
    printf("logits: max |titan - HF| = %.3e at [token %lld, vocab %lld] (max |HF| %.3f)\n",
           max_diff, (long long)(at / V), (long long)(at % V), max_ref);
    if (!(max_diff <= TOL_LOGITS))
        fail("logits: max abs diff %.3e > %.0e (token %lld, vocab %lld: titan %.6f HF %.6f)",
             max_diff, TOL_LOGITS, (long long)(at / V), (long long)(at % V), logits[at],
             ref_logits[at]);

    /* ---- loss and gradients --------------------------------------------------------- */
    double *nvd = need(&ref, "n_valid", 1, 'd');
    const int64_t nv_ref = (int64_t)nvd[0];
    base_free(nvd);
    double *ref_loss = need(&ref, "loss", 1, 'd');
    model_zero_grad(&m);
    int64_t nv = -1;
    double loss_sum = model_step_microbatch(&m, tokens, targets, 1.0f / (float)nv_ref, &nv);
    double loss = loss_sum / (double)nv + coef * m.moe_aux_loss;
    if (aux_on) {
        double *ref_aux = need(&ref, "aux_loss", 1, 'd');
        const double ea = fabs(m.moe_aux_loss - ref_aux[0]) / fabs(ref_aux[0]);
        printf("aux loss: titan %.8f HF %.8f rel err %.2e\n", m.moe_aux_loss, ref_aux[0], ea);
        if (!(ea <= TOL_LOSS))
            fail("aux loss: titan %.8f HF %.8f rel err %.2e > %.0e", m.moe_aux_loss, ref_aux[0], ea,
                 TOL_LOSS);
        base_free(ref_aux);
    }
    double loss_rel = fabs(loss - ref_loss[0]) / fabs(ref_loss[0]);
    printf("loss: titan %.8f HF %.8f rel err %.2e (valid targets titan %lld, HF %lld)\n", loss,
           ref_loss[0], loss_rel, (long long)nv, (long long)nv_ref);
    if (nv != nv_ref || nv != count_valid(targets, BT))
        fail("n_valid: titan %lld, HF %lld", (long long)nv, (long long)nv_ref);
    if (!(loss_rel <= TOL_LOSS))
        fail("loss: titan %.8f HF %.8f rel err %.2e > %.0e", loss, ref_loss[0], loss_rel, TOL_LOSS);
    base_free(ref_loss);

    printf("%-48s %12s %12s %10s\n", "gradient (HF name)", "|g_ref|", "|g-g_ref|", "rel err");
    double worst = 0;
    int n_grads = 0;
    /* one entry per HF tensor: an expert stack [E, out, in] is E tensors */
    ckpt_entry *es;
    int n_es;
    if (ckpt_expected(&m, CKPT_NAMES_HF, &es, &n_es, &err) != 0) die("ckpt_expected", &err);
    for (int p = 0; p < n_es; p++) {
        const ckpt_entry *mp = &es[p];
        char name[160];
        snprintf(name, sizeof name, "grad.%s", mp->name);
        float *gr = need(&ref, name, (int64_t)mp->numel, 'f');
        double n_ref, n_diff;
        const double rel = rel_l2(m.g + mp->offset, gr, mp->numel, &n_ref, &n_diff);
        printf("%-48s %12.4e %12.4e %10.2e%s\n", mp->name, n_ref, n_diff, rel,
               rel <= TOL_GRAD ? "" : "  <-- FAIL");
        if (!(rel <= TOL_GRAD)) fail("gradient %s: rel err %.2e > %.0e", mp->name, rel, TOL_GRAD);
        if (!(rel <= worst)) worst = rel;
        base_free(gr);
        n_grads++;
    }
    int n_ref_grads = 0;
    for (int i = 0; i < ref.n_tensors; i++)
        if (strncmp(ref.tensors[i].name, "grad.", 5) == 0) {
            n_ref_grads++;
            int found = 0;
            for (int k = 0; k < n_es && !found; k++)
                found = !strcmp(es[k].name, ref.tensors[i].name + 5);
            if (!found) fail("reference gradient %s has no titan parameter", ref.tensors[i].name);
        }
    free(es);
    printf("gradients: %d tensors, worst rel err %.2e\n", n_grads, worst);
    if (n_ref_grads != n_grads)
        fail("reference has %d gradients, titan %d parameters", n_ref_grads, n_grads);

    ckpt_kv gmeta[2] = {{"writer", "titan test_hf_parity"}, {"config", meta(&ref, "config")}};
    if (ckpt_save_model(&m, m.g, g_path, gmeta, 2, &err) != 0) fail("%s", err.msg);

    /* ---- training steps ------------------------------------------------------------- */
    const int steps = (int)meta_i64(&ref, "steps");
    const double max_norm = meta_f64(&ref, "max_norm");
    optim_adamw_cfg cfg = {.lr = meta_f64(&ref, "lr"),
                           .beta1 = meta_f64(&ref, "beta1"),
                           .beta2 = meta_f64(&ref, "beta2"),
                           .eps = meta_f64(&ref, "eps"),
                           .weight_decay = meta_f64(&ref, "weight_decay")};
    optim_lr_cfg lrc = {.warmup_steps = meta_i64(&ref, "warmup_steps"),
                        .total_steps = steps,
                        .decay_ratio = meta_f64(&ref, "decay_ratio"),
                        .min_lr_factor = meta_f64(&ref, "min_lr_factor")};
    if (optim_decay_type_parse(meta(&ref, "decay_type"), &lrc.decay_type) != 0) {
        fprintf(stderr, "FAIL: unknown decay_type '%s'\n", meta(&ref, "decay_type"));
        return 1;
    }
    int32_t *t_ids = need(&ref, "train_input_ids", steps * BT, 'i');
    int32_t *t_tgt = need(&ref, "train_targets", steps * BT, 'i');
    double *r_loss = need(&ref, "train_losses", steps, 'd');
    double *r_norm = need(&ref, "train_grad_norms", steps, 'd');
    double *r_lr = need(&ref, "train_lrs", steps, 'd');
    double *r_aux = aux_on ? need(&ref, "train_aux_losses", steps, 'd') : NULL;

    if (ckpt_load_model(&m, m.w, w_path, &err) != 0) die("reload weights", &err);
    optim_adamw opt;
    if (optim_adamw_init(&opt, m.n_floats, 0, &err) != 0) die("optim_adamw_init", &err);
    printf("train: lr %g betas %g/%g eps %g wd %g max_norm %g warmup %lld decay %g %s min %g\n",
           cfg.lr, cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay, max_norm,
           (long long)lrc.warmup_steps, lrc.decay_ratio, meta(&ref, "decay_type"),
           lrc.min_lr_factor);
    printf("%4s %12s %12s %9s %10s %10s %9s %12s %12s\n", "step", "loss titan", "loss HF",
           "rel err", "norm titan", "norm HF", "rel err", "lr titan", "lr HF");
    int n_clipped = 0;
    for (int k = 1; k <= steps; k++) {
        const int32_t *ids = t_ids + (int64_t)(k - 1) * BT;
        const int32_t *tgt = t_tgt + (int64_t)(k - 1) * BT;
        int64_t want_nv = count_valid(tgt, BT);
        set_docs(&m, &ref, "train_positions", (int64_t)(k - 1) * BT, BT);
        model_zero_grad(&m);
        int64_t nvk = -1;
        double ls = model_step_microbatch(&m, ids, tgt, 1.0f / (float)want_nv, &nvk);
        double lk = ls / (double)nvk + coef * m.moe_aux_loss;
        if (r_aux && !(fabs(m.moe_aux_loss - r_aux[k - 1]) <= TOL_TRAIN_LOSS * fabs(r_aux[k - 1])))
            fail("step %d: aux loss titan %.8f HF %.8f", k, m.moe_aux_loss, r_aux[k - 1]);
        double sumsq = optim_sumsq(m.g, m.n_floats);
        double norm;
        const float clip = optim_clip_coef(sumsq, max_norm, &norm);
        const double f = optim_lr_factor(&lrc, k - 1), lr = cfg.lr * f;
        const optim_span all = {.lo = 0, .hi = m.n_floats, .c = &cfg};
        optim_adamw_step(&opt, m.w, m.g, clip, &all, 1, f, NULL);
        n_clipped += norm > max_norm;

        const double el = fabs(lk - r_loss[k - 1]) / fabs(r_loss[k - 1]);
        const double en = fabs(norm - r_norm[k - 1]) / fabs(r_norm[k - 1]);
        const double elr = fabs(lr - r_lr[k - 1]);
        printf("%4d %12.8f %12.8f %9.2e %10.6f %10.6f %9.2e %12.6e %12.6e%s\n", k, lk,
               r_loss[k - 1], el, norm, r_norm[k - 1], en, lr, r_lr[k - 1],
               (el <= TOL_TRAIN_LOSS && en <= TOL_TRAIN_NORM && elr <= TOL_LR) ? "" : "  <-- FAIL");
        if (nvk != want_nv)
            fail("step %d: n_valid titan %lld, expected %lld", k, (long long)nvk,
                 (long long)want_nv);
        if (!(el <= TOL_TRAIN_LOSS))
            fail("step %d: loss titan %.8f HF %.8f rel err %.2e > %.0e", k, lk, r_loss[k - 1], el,
                 TOL_TRAIN_LOSS);
        if (!(en <= TOL_TRAIN_NORM))
            fail("step %d: grad norm titan %.6f HF %.6f rel err %.2e > %.0e", k, norm,
                 r_norm[k - 1], en, TOL_TRAIN_NORM);
        if (!(elr <= TOL_LR)) fail("step %d: lr titan %.17g HF %.17g", k, lr, r_lr[k - 1]);
    }
    printf("train: clipping active in %d of %d steps\n", n_clipped, steps);

    optim_adamw_free(&opt);
    base_free(t_ids);
    base_free(t_tgt);
    base_free(r_loss);
    base_free(r_norm);
    base_free(r_lr);
    base_free(r_aux);
    base_free(tokens);
    base_free(targets);
    base_free(ref_logits);
    base_free(logits);
    model_free(&m);
    ckpt_close(&ref);

    if (g_fail) {
        fprintf(stderr, "test_hf_parity %s: %d failure(s):\n%s", dir, g_fail, g_failures);
        return 1;
    }
    printf("test_hf_parity %s: PASS\n", dir);
    return 0;
}
