#include "train.h"

#include <cblas.h>
#include <errno.h>
#include "../checkpoint/checkpoint.h"
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void train_opts_defaults(train_opts *o) {
    memset(o, 0, sizeof *o);
    base_err e;
    model_flavor("debugmodel", &o->model, &e);
    o->steps = 100;
    o->batch = 8;
    o->seq_len = 128;
    o->grad_accum = 1;
    o->adamw = optim_adamw_defaults();
    o->lr.warmup_steps = 10;
    o->lr.decay_ratio = -1;
    o->lr.decay_type = OPTIM_DECAY_LINEAR;
    o->max_norm = 1.0;
    o->seed = 42;
    o->log_freq = 1;
}

double train_measure_peak_flops(void) {
    /* Best of repeated 1536^3 GEMMs (~30 ms each) over at least 0.6 s: the best, not the
     * mean, so a moment of contention from another process does not lower the peak. */
    const int n = 1536;
    float *a = base_alloc(sizeof(float) * n * n), *b = base_alloc(sizeof(float) * n * n),
          *c = base_alloc(sizeof(float) * n * n);
    double best = 0;
    if (a && b && c) {
        for (int i = 0; i < n * n; i++) a[i] = b[i] = base_rng_uniform(1, 0, (uint64_t)i) - 0.5f;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1, a, n, b, n, 0, c, n);
        const double start = base_now();
        for (int r = 0; r < 100 && (r < 5 || base_now() - start < 0.6); r++) {
            double t0 = base_now();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1, a, n, b, n, 0, c, n);
            double rate = 2.0 * n * n * (double)n / (base_now() - t0);
            if (rate > best) best = rate;
        }
    }
    base_free(a);
    base_free(b);
    base_free(c);
    return best;
}

/* Token source: bytes of a text file in disjoint windows of seq_len+1, or random tokens. */
typedef struct {
    unsigned char *text;
    size_t len, pos;
    uint64_t seed, counter;
    int vocab;
} token_source;

static int source_open(token_source *s, const train_opts *o, base_err *err) {
    memset(s, 0, sizeof *s);
    s->seed = o->seed;
    s->vocab = o->model.vocab_size;
    if (!o->data_path) return 0;
    if (o->model.vocab_size < 256)
        return base_fail(err, "%s: byte tokens need vocab_size >= 256 (got %d)", o->data_path,
                         o->model.vocab_size);
    size_t n = 0;
    s->text = (unsigned char *)base_read_file(o->data_path, (size_t)1 << 40, &n, err);
    if (!s->text) return -1;
    if (n < (size_t)o->seq_len + 1) {
        free(s->text);
        s->text = NULL;
        return base_fail(err, "%s: %zu bytes is shorter than one window of seq_len+1 = %d",
                         o->data_path, n, o->seq_len + 1);
    }
    s->len = n;
    return 0;
}

/* Fills one [B, T] microbatch of inputs and next-token targets. */
static void source_next(token_source *s, int32_t *tok, int32_t *tgt, int B, int T) {
    for (int b = 0; b < B; b++) {
        int32_t *x = tok + (size_t)b * T, *y = tgt + (size_t)b * T;
        if (!s->text) {
            for (int t = 0; t <= T; t++) {
                int32_t v = (int32_t)(base_rng_u64(s->seed, 0xda7a, s->counter++) % s->vocab);
                if (t < T) x[t] = v;
                if (t > 0) y[t - 1] = v;
            }
            continue;
        }
        if (s->pos + T + 1 > s->len) s->pos = 0; /* next epoch */
        for (int t = 0; t < T; t++) {
            x[t] = s->text[s->pos + t];
            y[t] = s->text[s->pos + t + 1];
        }
        s->pos += (size_t)T + 1;
    }
}

/* Samples o->sample_tokens tokens at temperature 0.8, starting from a newline (byte data)
 * or token 0. The model sees the last seq_len tokens: past seq_len the window slides, as
 * training windows start at arbitrary offsets. */
static void sample(model *m, const train_opts *o, const token_source *src) {
    const int T = m->seq_len, V = m->args.vocab_size, total = o->sample_tokens + 1;
    const double temp = 0.8;
    int32_t *seq = base_alloc(sizeof(int32_t) * (size_t)total);
    int32_t *win = base_alloc(sizeof(int32_t) * (size_t)T);
    float *logits = base_alloc(sizeof(float) * (size_t)T * V);
    if (!seq || !win || !logits) goto done;
    seq[0] = src->text ? '\n' : 0;
    printf("sample (temperature %.1f):\n", temp);
    for (int n = 1; n < total; n++) {
        const int len = n < T ? n : T;
        memcpy(win, seq + (n - len), sizeof(int32_t) * (size_t)len);
        /* Causal: logits at position len-1 depend only on win[0..len-1]; the rest is padding. */
        model_logits(m, win, logits);
        const float *row = logits + (size_t)(len - 1) * V;
        double mx = -INFINITY, z = 0;
        for (int v = 0; v < V; v++) mx = row[v] > mx ? row[v] : mx;
        for (int v = 0; v < V; v++) z += exp((row[v] - mx) / temp);
        double u = base_rng_uniform(o->seed, 0x5a3e, (uint64_t)n) * z, acc = 0;
        int pick = V - 1;
        for (int v = 0; v < V; v++) {
            acc += exp((row[v] - mx) / temp);
            if (acc >= u) {
                pick = v;
                break;
            }
        }
        seq[n] = pick;
        if (src->text)
            putchar(pick < 256 ? pick : '?');
        else
            printf("%d ", pick);
    }
    printf("\n");
done:
    base_free(seq);
    base_free(win);
    base_free(logits);
}

int train_run(const train_opts *o, base_err *err) {
    int rc = -1;
    if (o->steps <= 0 || o->grad_accum <= 0)
        return base_fail(err, "steps and grad_accum must be positive");
    token_source src;
    if (source_open(&src, o, err)) return -1;
    model m;
    model_build_opts bo = {o->batch, o->seq_len, o->ac, 1, NULL, 0, o->ce_chunk};
    optim_adamw opt = {0};
    FILE *jl = NULL;
    int32_t *tok = NULL, *tgt = NULL;
    if (model_build(&m, &o->model, &bo, err)) goto out;
    model_init_weights(&m, o->seed);
    if (optim_adamw_init(&opt, m.n_floats, err)) goto out;
    const size_t NT = (size_t)o->batch * o->seq_len;
    tok = base_alloc(NT * o->grad_accum * sizeof(int32_t));
    tgt = base_alloc(NT * o->grad_accum * sizeof(int32_t));
    if (!tok || !tgt) {
        base_fail(err, "out of memory");
        goto out;
    }
    if (o->jsonl_path) {
        if (base_mkdir_parent(o->jsonl_path, err)) goto out;
        if (!(jl = fopen(o->jsonl_path, "w"))) {
            base_fail(err, "%s: cannot open metrics file for writing: %s", o->jsonl_path,
                      strerror(errno));
            goto out;
        }
    }
    const double peak = o->peak_flops > 0 ? o->peak_flops : train_measure_peak_flops();
    if (!(peak > 0)) {
        base_fail(err,
                  "could not measure the GEMM peak for MFU (out of memory?); pass --peak-tflops");
        goto out;
    }
    const double fpt = model_flops_per_token(&o->model, o->seq_len);
    model_counts cnt;
    model_count_params(&o->model, &cnt);
    base_log(BASE_LOG_INFO,
             "model %s: %lld parameters, %d layers, dim %d; batch %d x seq %d x accum %d; "
             "%d threads; fp32 GEMM peak %.1f GFLOP/s; %.3f GFLOP/token",
             o->model.flavor, (long long)cnt.total, o->model.n_layers, o->model.dim, o->batch,
             o->seq_len, o->grad_accum, omp_get_max_threads(), peak / 1e9, fpt / 1e9);

    optim_lr_cfg lrc = o->lr;
    if (lrc.total_steps <= 0) lrc.total_steps = o->steps;
    double t_total = 0;
    int64_t tokens_total = 0;
    for (int step = 1; step <= o->steps; step++) {
        double t0 = base_now();
        int64_t valid = 0;
        for (int mb = 0; mb < o->grad_accum; mb++) {
            source_next(&src, tok + mb * NT, tgt + mb * NT, o->batch, o->seq_len);
            for (size_t i = 0; i < NT; i++) valid += tgt[mb * NT + i] != OPS_IGNORE_INDEX;
        }
        double t_data = base_now() - t0;
        model_zero_grad(&m);
        double loss_sum = 0;
        for (int mb = 0; mb < o->grad_accum; mb++)
            loss_sum += model_step_microbatch(&m, tok + mb * NT, tgt + mb * NT,
                                              valid ? 1.0f / (float)valid : 0.0f, NULL);
        const double loss = valid ? loss_sum / (double)valid : 0.0;
        const double sumsq = optim_sumsq(m.g, m.n_floats);
        if (!isfinite(loss) || !isfinite(sumsq)) {
            base_fail(err, "step %d: non-finite %s (loss %g, grad sumsq %g)", step,
                      isfinite(loss) ? "gradient norm" : "loss", loss, sumsq);
            goto out;
        }
        const double norm = optim_clip_apply(m.g, m.n_floats, sumsq, o->max_norm);
        const double lr = o->adamw.lr * optim_lr_factor(&lrc, step - 1);
        optim_adamw_step(&opt, m.w, m.g, &o->adamw, lr);
        const double dt = base_now() - t0;
        const int64_t ntok = (int64_t)NT * o->grad_accum;
        if (step > 1 || o->steps == 1) { /* step 1 includes first-touch page faults */
            t_total += dt;
            tokens_total += ntok;
        }
        const double tps = ntok / dt, mfu = 100.0 * fpt * tps / peak;
        const double mem = (double)base_peak_rss() / (1 << 30);
        if (step % o->log_freq == 0 || step == o->steps)
            printf("step: %4d  loss: %8.5f  grad_norm: %8.4f  lr: %.3e  memory: %.2fGiB(%.1f%%)  "
                   "tps: %.1f  tflops: %.3f  mfu: %.1f%%  data: %.3fs\n",
                   step, loss, norm, lr, mem, 100.0 * base_peak_rss() / (double)base_total_ram(),
                   tps, fpt * tps / 1e12, mfu, t_data);
        fflush(stdout);
        if (jl) {
            fprintf(jl,
                    "{\"step\": %d, \"loss\": %.17g, \"grad_norm\": %.17g, \"lr\": %.9g, "
                    "\"tps\": %.6g, \"tflops\": %.6g, \"mfu\": %.6g, \"memory_gib\": %.6g, "
                    "\"data_s\": %.6g}\n",
                    step, loss, norm, lr, tps, fpt * tps / 1e12, mfu, mem, t_data);
            fflush(jl);
        }
    }
    const double tps = t_total > 0 ? tokens_total / t_total : 0;
    printf("summary: steps=%d tokens_per_s=%.2f mfu=%.2f peak_rss_gib=%.3f\n", o->steps, tps,
           100.0 * fpt * tps / peak, (double)base_peak_rss() / (1 << 30));
    if (o->out_dir) {
        if (ckpt_export_hf(&m, o->out_dir, NULL, err)) goto out;
        base_log(BASE_LOG_INFO,
                 "exported Hugging Face model to %s (config.json, model.safetensors)", o->out_dir);
    }
    if (o->sample_tokens > 0) {
        model gm;
        model_build_opts go = {1, o->seq_len, MODEL_AC_NONE, 0, NULL, 0, 0};
        if (model_build(&gm, &o->model, &go, err)) {
            model_free(&gm);
            goto out;
        }
        memcpy(gm.w, m.w, m.n_floats * sizeof(float));
        sample(&gm, o, &src);
        model_free(&gm);
    }
    rc = 0;
out:
    if (jl) fclose(jl);
    base_free(tok);
    base_free(tgt);
    optim_adamw_free(&opt);
    model_free(&m);
    free(src.text);
    return rc;
}
