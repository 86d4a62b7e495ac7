/* train: the token source (see internal.h). */
#include <stdio.h>
#include <string.h>

#include "train/internal.h"

void train_source_close(train_source *s) {
    data_mix_free(s->loader);
    data_tok_free(s->tok);
    memset(s, 0, sizeof *s);
}

int train_source_open(train_source *s, const train_opts *o, const dist_mesh *mesh, base_err *err) {
    memset(s, 0, sizeof *s);
    s->seed = o->seed;
    s->vocab = o->model.vocab_size;
    s->dp_rank = mesh->dp_rank;
    s->dp_size = mesh->dp_size;
    if (!o->data_path) return 0;
    if (o->tokenizer_dir && data_tok_load(o->tokenizer_dir, &s->tok, err)) return -1;
    data_loader_cfg c = {.format = o->data_format,
                         .field = o->data_field,
                         .skip_bad_lines = o->skip_bad_lines,
                         .enc = {s->tok, o->model.vocab_size},
                         .seq_len = o->seq_len,
                         .batch = o->batch,
                         .dp_rank = mesh->dp_rank,
                         .dp_size = mesh->dp_size,
                         .infinite = 1,
                         .pad_label = OPS_IGNORE_INDEX,
                         .doc_shift = o->block_causal,
                         .map_style = o->map_style};
    const data_mix_cfg mc = {.loader = c,
                             .paths = o->data_paths ? o->data_paths : &o->data_path,
                             .weights = o->data_weights,
                             .fields = o->data_fields,
                             .n = o->n_data,
                             .seed = o->mix_seed};
    if (data_mix_open(&s->loader, &mc, err)) {
        train_source_close(s);
        return -1;
    }
    return 0;
}

void train_source_describe(const train_source *s, const train_opts *o, char *buf, size_t n) {
    if (!n) return;
    snprintf(buf, n, "uniform random tokens");
    if (s->loader) data_mix_describe(s->loader, buf, n);
    const size_t at = strlen(buf);
    if (o->block_causal)
        snprintf(buf + at, n - at,
                 "; documents masked (block_causal: attention and labels within each document, "
                 "packed as torchtitan 0.3)");
}

/* Random tokens: one counter stream of windows, this rank's B of each round's dp_size * B. */
int train_source_next(train_source *s, int32_t *tok, int32_t *tgt, int32_t *pos, int B, int T,
                      base_err *err) {
    if (s->loader) return data_mix_next(s->loader, tok, tgt, pos, err) == 1 ? 0 : -1;
    for (size_t i = 0; pos && i < (size_t)B * T; i++) pos[i] = (int32_t)(i % (size_t)T);
    const uint64_t window = (uint64_t)B * (uint64_t)(T + 1);
    uint64_t at = s->counter + (uint64_t)s->dp_rank * window;
    for (int b = 0; b < B; b++) {
        int32_t *x = tok + (size_t)b * T, *y = tgt + (size_t)b * T;
        for (int t = 0; t <= T; t++) {
            int32_t v = (int32_t)(base_rng_u64(s->seed, 0xda7a, at++) % s->vocab);
            if (t < T) x[t] = v;
            if (t > 0) y[t - 1] = v;
        }
    }
    s->counter += (uint64_t)s->dp_size * window;
    return 0;
}
