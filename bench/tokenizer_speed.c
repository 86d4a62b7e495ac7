/* Encode throughput of titan's byte-level BPE tokenizer (src/data/data.h).
 *
 *   tokenizer_speed TOKENIZER_DIR INPUT_FILE LABEL [REPS]
 *
 * Prints one line per measurement:
 *   titan LABEL MODE MB_PER_S TOKENS HASH
 * MB = 1e6 bytes of UTF-8 input. HASH is FNV-1a 64 over the ids (each as uint32), the same
 * function bench/tokenizer_speed.py uses, so the two sides can be compared.
 *
 * Modes (each the best of REPS runs, default 3):
 *   whole-cold   the whole file as one string, each run on a freshly loaded tokenizer
 *   whole-warm   the same on one tokenizer that has already encoded the file (pre-token cache hot)
 *   docs-cold    documents (file split on "\n\n", like Python's str.split("\n\n")) one by one,
 *                fresh tokenizer per run; bytes counted = sum of document bytes
 *   docs-warm    the same, cache hot
 *   docs2t-cold  the documents split into 2 halves of about equal bytes, one tokenizer object
 *                per thread (pthreads), fresh objects each run; aggregate MB/s over wall time
 *   docs2t-warm  the same with the objects' caches hot
 * Load time is excluded everywhere (reported separately as "load" in seconds). */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "data/data.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t fnv_ids(uint64_t h, const int32_t *ids, size_t n) {
    for (size_t i = 0; i < n; i++) {
        h ^= (uint64_t)(uint32_t)ids[i];
        h *= 1099511628211ULL;
    }
    return h;
}
#define FNV_INIT 14695981039346656037ULL

static const char *g_dir;

static data_tok *load_tok(void) {
    base_err err;
    data_tok *t = NULL;
    if (data_tok_load(g_dir, &t, &err) != 0) {
        fprintf(stderr, "tokenizer_speed: load %s: %s\n", g_dir, err.msg);
        exit(1);
    }
    return t;
}

typedef struct {
    const char *p;
    size_t n;
} doc;

typedef struct {
    data_tok *t;
    const doc *docs;
    size_t ndocs;
    size_t ntok;
    uint64_t hash;
} job;

/* Encodes docs in order, appending all ids; records count and hash. */
static void run_docs(job *j) {
    base_err err;
    data_tok_ids ids = {0};
    for (size_t i = 0; i < j->ndocs; i++) {
        if (data_tok_encode(j->t, j->docs[i].p, j->docs[i].n, &ids, &err) != 0) {
            fprintf(stderr, "tokenizer_speed: encode: %s\n", err.msg);
            exit(1);
        }
    }
    j->ntok = ids.n;
    j->hash = fnv_ids(FNV_INIT, ids.ids, ids.n);
    data_tok_ids_free(&ids);
}

static void *thread_main(void *arg) {
    run_docs((job *)arg);
    return NULL;
}

static void emit(const char *label, const char *mode, double bytes, double best, size_t ntok,
                 uint64_t hash) {
    printf("titan %s %s %.3f %zu %016llx\n", label, mode, bytes / 1e6 / best, ntok,
           (unsigned long long)hash);
    fflush(stdout);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s TOKENIZER_DIR INPUT_FILE LABEL [REPS]\n", argv[0]);
        return 2;
    }
    g_dir = argv[1];
    const char *label = argv[3];
    int reps = argc > 4 ? atoi(argv[4]) : 3;
    if (reps < 1) reps = 1;

    FILE *f = fopen(argv[2], "rb");
    if (!f) {
        perror(argv[2]);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    long flen = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)flen + 1);
    if (!text || fread(text, 1, (size_t)flen, f) != (size_t)flen) {
        fprintf(stderr, "tokenizer_speed: read %s failed\n", argv[2]);
        return 1;
    }
    fclose(f);
    size_t len = (size_t)flen;
    text[len] = 0;

    /* documents: split on "\n\n" exactly like Python's str.split("\n\n") */
    size_t cap = 1024, ndocs = 0;
    doc *docs = malloc(cap * sizeof *docs);
    size_t start = 0, i = 0;
    double doc_bytes = 0;
    while (1) {
        const char *hit = NULL;
        for (; i + 1 < len; i++)
            if (text[i] == '\n' && text[i + 1] == '\n') {
                hit = text + i;
                break;
            }
        size_t end = hit ? i : len;
        if (ndocs == cap) docs = realloc(docs, (cap *= 2) * sizeof *docs);
        docs[ndocs++] = (doc){text + start, end - start};
        doc_bytes += (double)(end - start);
        if (!hit) break;
        i += 2;
        start = i;
    }

    base_err err;
    double t0 = now_s();
    data_tok *lt = load_tok();
    printf("titan %s load %.3f 0 0\n", label, now_s() - t0);
    data_tok_free(lt);

    /* whole file */
    {
        double best = 1e30;
        size_t ntok = 0;
        uint64_t hash = 0;
        for (int r = 0; r < reps; r++) {
            data_tok *t = load_tok();
            data_tok_ids ids = {0};
            double a = now_s();
            if (data_tok_encode(t, text, len, &ids, &err) != 0) {
                fprintf(stderr, "tokenizer_speed: encode: %s\n", err.msg);
                return 1;
            }
            double e = now_s() - a;
            if (e < best) best = e;
            ntok = ids.n;
            hash = fnv_ids(FNV_INIT, ids.ids, ids.n);
            data_tok_ids_free(&ids);
            data_tok_free(t);
        }
        emit(label, "whole-cold", (double)len, best, ntok, hash);

        data_tok *t = load_tok();
        data_tok_ids ids = {0};
        data_tok_encode(t, text, len, &ids, &err); /* warm-up */
        data_tok_ids_free(&ids);
        best = 1e30;
        for (int r = 0; r < reps; r++) {
            data_tok_ids w = {0};
            double a = now_s();
            data_tok_encode(t, text, len, &w, &err);
            double e = now_s() - a;
            if (e < best) best = e;
            ntok = w.n;
            hash = fnv_ids(FNV_INIT, w.ids, w.n);
            data_tok_ids_free(&w);
        }
        emit(label, "whole-warm", (double)len, best, ntok, hash);
        data_tok_free(t);
    }

    /* documents, one thread */
    {
        double best = 1e30;
        job j = {0};
        for (int r = 0; r < reps; r++) {
            j = (job){load_tok(), docs, ndocs, 0, 0};
            double a = now_s();
            run_docs(&j);
            double e = now_s() - a;
            if (e < best) best = e;
            data_tok_free(j.t);
        }
        printf("titan %s ndocs %zu %.0f 0\n", label, ndocs, doc_bytes);
        emit(label, "docs-cold", doc_bytes, best, j.ntok, j.hash);

        j = (job){load_tok(), docs, ndocs, 0, 0};
        run_docs(&j); /* warm-up */
        best = 1e30;
        for (int r = 0; r < reps; r++) {
            double a = now_s();
            run_docs(&j);
            double e = now_s() - a;
            if (e < best) best = e;
        }
        emit(label, "docs-warm", doc_bytes, best, j.ntok, j.hash);
        data_tok_free(j.t);
    }

    /* documents, 2 threads, one tokenizer per thread; halves of about equal bytes */
    {
        size_t half = 0;
        double acc = 0;
        while (half < ndocs && acc < doc_bytes / 2) acc += (double)docs[half++].n;
        job jobs[2];
        double best_cold = 1e30, best_warm = 1e30;
        size_t ntok = 0;
        uint64_t hash = 0;
        for (int warm = 0; warm < 2; warm++) {
            if (warm) {
                jobs[0] = (job){load_tok(), docs, half, 0, 0};
                jobs[1] = (job){load_tok(), docs + half, ndocs - half, 0, 0};
                pthread_t th[2];
                for (int k = 0; k < 2; k++) pthread_create(&th[k], NULL, thread_main, &jobs[k]);
                for (int k = 0; k < 2; k++) pthread_join(th[k], NULL);
            }
            for (int r = 0; r < reps; r++) {
                if (!warm) {
                    jobs[0] = (job){load_tok(), docs, half, 0, 0};
                    jobs[1] = (job){load_tok(), docs + half, ndocs - half, 0, 0};
                }
                pthread_t th[2];
                double a = now_s();
                for (int k = 0; k < 2; k++) pthread_create(&th[k], NULL, thread_main, &jobs[k]);
                for (int k = 0; k < 2; k++) pthread_join(th[k], NULL);
                double e = now_s() - a;
                double *best = warm ? &best_warm : &best_cold;
                if (e < *best) *best = e;
                ntok = jobs[0].ntok + jobs[1].ntok;
                (void)hash;
                if (!warm) {
                    data_tok_free(jobs[0].t);
                    data_tok_free(jobs[1].t);
                }
            }
            if (warm) {
                data_tok_free(jobs[0].t);
                data_tok_free(jobs[1].t);
            }
        }
        /* the per-half hashes do not chain into the whole-sequence hash; report count only */
        emit(label, "docs2t-cold", doc_bytes, best_cold, ntok, 0);
        emit(label, "docs2t-warm", doc_bytes, best_warm, ntok, 0);
    }
    free(docs);
    free(text);
    return 0;
}
