/* data: `titan tokenize`, text / JSONL datasets to token shards (format in data.h). */
#include <dirent.h>
#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/internal.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "token shards are written with the host byte order, which must be little endian"
#endif

/* Documents are read in chunks of this many (or this many bytes of text), then encoded in
 * parallel, then written in order. */
#define CHUNK_DOCS 4096
#define CHUNK_BYTES ((size_t)16 << 20)

typedef struct {
    const char *dir;
    int index; /* next shard number */
    char path[4096];
    base_atomic out; /* shard-NNNNN.tok, written through fp */
    FILE *fp;
    uint64_t n_tokens;
    uint64_t *offs; /* [n_docs + 1] */
    size_t n_docs, cap;
    int any_skipped; /* a slot marked DATA_SHARD_SKIPPED: version 3, else 2 */
    int32_t vocab, bos, eos;
    uint64_t tok_hash; /* the tokenizer record (data.h): tokenizer.json's FNV-1a 64, */
    char tok_path[DATA_SHARD_MAX_PATH + 8]; /* its folder's absolute path, */
    size_t header;                          /* and the header's size with it */
} shard_writer;

static int sw_open(shard_writer *w, base_err *err) {
    snprintf(w->path, sizeof w->path, "%s/shard-%05d.tok", w->dir, w->index++);
    if (base_atomic_open(&w->out, w->path, err)) return -1;
    if (!(w->fp = base_atomic_stream(&w->out, err))) {
        base_atomic_abort(&w->out);
        return -1;
    }
    static const unsigned char zero[56 + DATA_SHARD_MAX_PATH + 8];
    if (fwrite(zero, 1, w->header, w->fp) != w->header)
        return base_fail(err, "%s: write failed: %s", w->out.tmp, strerror(errno));
    w->n_tokens = 0;
    w->n_docs = 0;
    w->any_skipped = 0;
    w->offs[0] = 0;
    return 0;
}

/* Appends a document, or a skipped malformed line's slot (no ids; DATA_SHARD_SKIPPED). */
static int sw_add(shard_writer *w, const data_tok_ids *ids, int skipped, base_err *err) {
    if (w->n_docs + 2 > w->cap) {
        size_t cap = w->cap * 2;
        uint64_t *no = realloc(w->offs, cap * sizeof *no);
        if (!no) return base_fail(err, "out of memory");
        w->offs = no;
        w->cap = cap;
    }
    if (ids->n && fwrite(ids->ids, sizeof *ids->ids, ids->n, w->fp) != ids->n)
        return base_fail(err, "%s: write failed: %s", w->out.tmp, strerror(errno));
    w->n_tokens += ids->n;
    w->offs[++w->n_docs] = w->n_tokens | (skipped ? DATA_SHARD_SKIPPED : 0);
    w->any_skipped |= skipped;
    return 0;
}

static void put32(unsigned char *p, uint32_t v) {
    memcpy(p, &v, 4);
}

static void put64(unsigned char *p, uint64_t v) {
    memcpy(p, &v, 8);
}

/* Pads, writes the offsets and the header, then commits (fsync, rename into place). */
static int sw_close(shard_writer *w, base_err *err) {
    static const unsigned char pad[8];
    unsigned char h[56 + DATA_SHARD_MAX_PATH + 8] = {0};
    memcpy(h, DATA_SHARD_MAGIC, 8);
    put32(h + 8, w->any_skipped ? DATA_SHARD_VERSION : 2u); /* older titans read a v2 */
    put32(h + 12, 1);
    put64(h + 16, w->n_docs);
    put64(h + 24, w->n_tokens);
    put32(h + 32, (uint32_t)w->vocab);
    put32(h + 36, (uint32_t)w->bos);
    put32(h + 40, (uint32_t)w->eos);
    put32(h + 44, (uint32_t)strlen(w->tok_path));
    put64(h + 48, w->tok_hash);
    memcpy(h + 56, w->tok_path, strlen(w->tok_path));
    const size_t npad = (size_t)(w->n_tokens % 2) * 4;
    int ok = (!npad || fwrite(pad, 1, npad, w->fp) == npad) &&
             fwrite(w->offs, 8, w->n_docs + 1, w->fp) == w->n_docs + 1 &&
             fseek(w->fp, 0, SEEK_SET) == 0 && fwrite(h, 1, w->header, w->fp) == w->header;
    w->fp = NULL;
    if (ok) return base_atomic_commit(&w->out, err);
    base_fail(err, "%s: write failed: %s", w->out.tmp, strerror(errno));
    base_atomic_abort(&w->out);
    return -1;
}

/* Whether dir holds shards or an unfinished tokenize's mark; a stale unfinished shard
 * (*.tok.tmp, no mark: an older titan's, or a link planted there) is removed, said, so the
 * finished folder holds none for readers to refuse. */
static int dir_has_shards(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    int found = 0, stale = 0;
    while (!found && (e = readdir(d))) {
        size_t n = strlen(e->d_name);
        found = (n > 4 && strcmp(e->d_name + n - 4, ".tok") == 0) ||
                !strcmp(e->d_name, DATA_TOKENIZE_MARK);
        if (n > 8 && !strcmp(e->d_name + n - 8, ".tok.tmp")) {
            char p[4400];
            snprintf(p, sizeof p, "%.4096s/%s", dir, e->d_name);
            stale += unlink(p) == 0; /* a link itself, never what it points at */
        }
    }
    closedir(d);
    if (stale)
        base_log(BASE_LOG_INFO, "tokenize: removed %d unfinished shard file%s (.tok.tmp) from %s",
                 stale, stale == 1 ? "" : "s", dir);
    return found;
}

int data_tokenize(const data_tokenize_cfg *cfg, int64_t *n_docs_out, int64_t *n_tokens_out,
                  base_err *err) {
    if (cfg->format == DATA_FMT_CHAT) /* before any allocation */
        return base_fail(err,
                         "%s: chat examples are rendered, masked and packed whole by the "
                         "training loader; token shards hold documents only: train on the JSON "
                         "Lines (format chat)",
                         cfg->path);
    /* OMP_NUM_THREADS, else the CPUs (the cgroup's CPU quota: main) */
    const int nt = cfg->threads > 0 ? cfg->threads : omp_get_max_threads();
    const uint64_t shard_tokens =
        cfg->shard_tokens > 0 ? (uint64_t)cfg->shard_tokens : (uint64_t)1 << 28;
    data_tok **toks = calloc((size_t)nt, sizeof *toks);
    data_tok_ids *ids = calloc(CHUNK_DOCS, sizeof *ids);
    size_t *text_off = malloc(sizeof(size_t) * (CHUNK_DOCS + 1));
    unsigned char *skip = malloc(CHUNK_DOCS); /* a chunk's skipped malformed lines' slots */
    char *arena = NULL;
    size_t arena_cap = 0;
    data_reader rd;
    memset(&rd, 0, sizeof rd);
    shard_writer w = {.dir = cfg->out_dir, .cap = 1024};
    w.offs = malloc(w.cap * sizeof *w.offs);
    int64_t docs = 0, tokens = 0;
    int rc = -1, writing = 0;
    base_dir_lock lock = {.fd = -1};
    char mark[4200] = "";
    if (!toks || !ids || !text_off || !skip || !w.offs) {
        base_fail(err, "out of memory");
        goto done;
    }
    for (int i = 0; i < nt; i++) /* one per thread: a tokenizer's cache is not shared */
        if (data_tok_load(cfg->tokenizer, &toks[i], err)) goto done;
    w.vocab = data_tok_vocab_size(toks[0]);
    w.bos = data_tok_bos_id(toks[0]);
    w.eos = data_tok_eos_id(toks[0]);
    w.tok_hash = data_tok_fingerprint(toks[0]);
    char *abs = realpath(cfg->tokenizer, NULL);
    const int fits = abs && strlen(abs) <= DATA_SHARD_MAX_PATH;
    if (fits) snprintf(w.tok_path, sizeof w.tok_path, "%s", abs);
    free(abs);
    if (!fits) {
        base_fail(err, "%s: cannot resolve the tokenizer's path (or it is over %d bytes)",
                  cfg->tokenizer, DATA_SHARD_MAX_PATH);
        goto done;
    }
    w.header = 56 + (strlen(w.tok_path) + 7) / 8 * 8;
    if (data_reader_open(&rd, cfg->path, cfg->format, cfg->field, cfg->skip_bad_lines, err))
        goto done;
    rd.bad_slots = 1; /* a skipped line keeps its document number in the shards */
    for (int i = 0; i < rd.n_files; i++)
        if (rd.files[i].format == DATA_FMT_TOKENS) {
            base_fail(err, "%s: already a token shard", rd.files[i].path);
            goto done;
        }
    if (!cfg->out_dir || base_mkdir_p(cfg->out_dir, err)) {
        if (!cfg->out_dir) base_fail(err, "tokenize: no output folder given");
        goto done;
    }
    /* one tokenize per folder: another's shards are never this one's to remove */
    if (base_dir_lock_take(&lock, cfg->out_dir, err)) goto done;
    if (dir_has_shards(cfg->out_dir)) {
        base_fail(err,
                  "%s: already holds .tok shards (or an unfinished tokenize's %s); remove "
                  "them or choose another folder",
                  cfg->out_dir, DATA_TOKENIZE_MARK);
        goto done;
    }
    snprintf(mark, sizeof mark, "%s/%s", cfg->out_dir, DATA_TOKENIZE_MARK);
    {
        const int fd = base_create_file(mark, err);
        if (fd < 0) {
            mark[0] = 0;
            goto done;
        }
        close(fd);
    }
    writing = 1; /* from here every shard in the folder is this run's */
    for (int end = 0; !end;) {
        /* read a chunk of documents (their text copied: the reader reuses its buffers) */
        int n = 0;
        size_t used = 0;
        while (n < CHUNK_DOCS && used < CHUNK_BYTES) {
            data_doc d;
            int r = data_reader_next(&rd, NULL, NULL, &d, err);
            if (r < 0) goto done;
            if (r == 0) {
                end = 1;
                break;
            }
            skip[n] = (unsigned char)d.skipped;
            if (used + d.len > arena_cap) {
                size_t cap = arena_cap ? arena_cap : (size_t)1 << 20;
                while (cap < used + d.len) cap *= 2;
                char *na = realloc(arena, cap);
                if (!na) {
                    base_fail(err, "out of memory");
                    goto done;
                }
                arena = na;
                arena_cap = cap;
            }
            if (d.len) memcpy(arena + used, d.text, d.len);
            text_off[n++] = used;
            used += d.len;
        }
        text_off[n] = used;
        int failed = 0;
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
        for (int i = 0; i < n; i++) {
            ids[i].n = 0;
            base_err e;
            if (!skip[i] && data_tok_encode(toks[omp_get_thread_num()], arena + text_off[i],
                                            text_off[i + 1] - text_off[i], &ids[i], &e)) {
#pragma omp atomic write
                failed = 1;
            }
        }
        if (failed) {
            base_fail(err, "tokenize: out of memory while encoding");
            goto done;
        }
        for (int i = 0; i < n; i++) {
            if (!w.fp && sw_open(&w, err)) goto done;
            if (sw_add(&w, &ids[i], skip[i], err)) goto done;
            docs += !skip[i];
            tokens += (int64_t)ids[i].n;
            if (w.n_tokens >= shard_tokens && sw_close(&w, err)) goto done;
        }
    }
    if (docs == 0) { /* before the last close: a shard of skipped slots alone is aborted */
        base_fail(err, "%s: no documents", cfg->path);
        goto done;
    }
    if (w.fp && sw_close(&w, err)) goto done;
    if (rd.bad_lines)
        base_log(BASE_LOG_WARN, "tokenize: skipped %lld malformed JSONL lines",
                 (long long)rd.bad_lines);
    if (n_docs_out) *n_docs_out = docs;
    if (n_tokens_out) *n_tokens_out = tokens;
    rc = unlink(mark) == 0 ? 0 : base_fail(err, "%s: cannot remove: %s", mark, strerror(errno));
    if (!rc) mark[0] = 0;
done:
    if (w.fp) base_atomic_abort(&w.out);
    if (rc && writing) { /* the shards written before the failure go too: a folder with some of
                          * them looks complete, and trains on part of the data unsaid */
        int removed = 0, left = 0;
        for (int i = 0; i < w.index; i++) {
            char p[sizeof w.path];
            snprintf(p, sizeof p, "%s/shard-%05d.tok", w.dir, i);
            if (unlink(p) == 0)
                removed++;
            else if (errno != ENOENT)
                left++;
        }
        if (!left && mark[0] && unlink(mark) == 0) mark[0] = 0;
        const size_t len = strlen(err->msg);
        if (removed || left)
            snprintf(err->msg + len, sizeof err->msg - len,
                     " (%d shard%s written before it removed%s: the folder would look complete "
                     "with part of the data)",
                     removed, removed == 1 ? "" : "s",
                     left ? "; some could not be, and the folder keeps " DATA_TOKENIZE_MARK : "");
    }
    base_dir_unlock(&lock);
    data_reader_close(&rd);
    for (int i = 0; toks && i < nt; i++) data_tok_free(toks[i]);
    for (int i = 0; ids && i < CHUNK_DOCS; i++) data_tok_ids_free(&ids[i]);
    free(toks);
    free(ids);
    free(text_off);
    free(skip);
    free(arena);
    free(w.offs);
    return rc;
}
