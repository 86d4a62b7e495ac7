/* data: the packing loader (see the loader section of data.h). */
#include <ctype.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/internal.h"

/* A document (of this rank) whose tokens are in the buffer. */
typedef struct {
    data_pos pos;
    int64_t epoch;
    int64_t ntok;
} seg;

struct data_loader {
    data_loader_cfg cfg;
    char *path;
    data_reader rd;
    int64_t epoch;
    int from_start;       /* this epoch's reading began at document 0 */
    int64_t epoch_tokens; /* tokens this rank got in this epoch */
    int64_t epoch_text;   /* of its documents, those with text (tokens besides bos / eos) */
    int64_t docs_read;    /* documents this rank read, all epochs: the early warning */
    int warned_empty;
    int chat;                    /* DATA_FMT_CHAT: ChatDataset's examples, packed whole */
    int64_t chat_long, chat_bad; /* examples dropped this epoch: too long, malformed (skipped) */
    int said_long;               /* the first too-long example was said */
    int chat_bad_said;           /* malformed examples said (the first 20 of the loader's life) */
    int64_t epoch_docs;          /* documents this rank got in this epoch (empty ones too) */
    int32_t *buf;                /* pending tokens buf[head .. len); doc_shift: pending inputs */
    int32_t *lab;                /* doc_shift: their labels, lab[head .. len) (else NULL) */
    size_t head, len, cap;
    seg *q; /* documents in the buffer, oldest first: q[qh .. qn) */
    size_t qh, qn, qcap;
    int64_t front_used; /* tokens (doc_shift: inputs) of q[qh] already consumed */
    uint64_t fingerprint;
    uint64_t setup; /* data_loader_state.setup: the fingerprint's part that is no file */
    data_tok_ids ids;
    /* map_style: the documents' reader positions in file order (idx[n_idx]); chat: Dataset.
     * shuffle(42)'s order of them (order[n_idx]; NULL: file order); this rank's block of that
     * order, [blk0, blk0 + n_mine); from epoch 1 the epoch's order of the block (sigma[n_mine]:
     * shuffle(42 + epoch); NULL in epoch 0: as is); the next of it to read (k) */
    data_pos *idx;
    int64_t n_idx, *order, blk0, n_mine, *sigma, k;
    uint64_t idx_hash; /* of the index's document places (map_content's part that cannot change) */
};

/* torchtitan 0.3's seed of Dataset.shuffle: 42, and 42 + epoch at each reloop */
enum { MAP_SEED = 42 };

/* map_style: the dataset index of the k-th document of this rank in this epoch. */
static int64_t map_doc(const data_loader *l, int64_t k) {
    const int64_t j = l->blk0 + (l->sigma ? l->sigma[k] : k);
    return l->order ? l->order[j] : j;
}

/* map_style: the place of this rank's k-th document in this epoch, its doc that count k (the
 * state's); k = n_mine (all read): past the last file. */
static data_pos map_pos(const data_loader *l, int64_t k) {
    data_pos p = k < l->n_mine ? l->idx[map_doc(l, k)] : (data_pos){0, l->rd.n_files, 0, 0, 0};
    p.doc = k;
    return p;
}

static uint64_t file_content(const data_loader *l, int i, int64_t *size);

/* map_style: the state's `content`, of every file (the epoch has read documents of all of them):
 * their content hashes (first and last 64 KiB, size) and the index's document places (idx_hash:
 * a file rewritten with its size, its lines reordered, has other line starts). Never 0. */
static uint64_t map_content(const data_loader *l) {
    uint64_t h = l->idx_hash;
    for (int i = 0; i < l->rd.n_files; i++) {
        int64_t size;
        const uint64_t c = file_content(l, i, &size);
        h = base_hash_bytes(h, &c, sizeof c);
    }
    return h + !h;
}

/* map_style: this epoch's order of the rank's block (0.3's reloop: shuffle(seed=42 + epoch) of
 * the rank's part; epoch 0 reads it as it is). */
static int map_epoch(data_loader *l, base_err *err) {
    free(l->sigma);
    l->sigma = NULL;
    if (l->epoch == 0 || l->n_mine == 0) return 0;
    l->sigma = malloc((size_t)l->n_mine * sizeof *l->sigma);
    if (!l->sigma)
        return base_fail(err, "%s: out of memory ordering %lld documents", l->path,
                         (long long)l->n_mine);
    data_shuffle_permutation((uint64_t)(MAP_SEED + l->epoch), l->n_mine, l->sigma);
    return 0;
}

/* map_style: reads every document's position (one pass: its malformed lines counted and said
 * here), then this rank's block of the dataset's order. */
static int map_index(data_loader *l, base_err *err) {
    size_t cap = 0;
    data_doc d;
    int rc;
    while ((rc = data_reader_next(&l->rd, NULL, NULL, &d, err)) > 0) {
        if ((size_t)l->n_idx == cap) {
            cap = cap ? 2 * cap : 1024;
            data_pos *ni = realloc(l->idx, cap * sizeof *ni);
            if (!ni) return base_fail(err, "%s: out of memory indexing its documents", l->path);
            l->idx = ni;
        }
        l->idx[l->n_idx++] = d.pos;
    }
    if (rc < 0) return -1;
    data_reader_rewind(&l->rd);
    l->rd.bad_counted = 1; /* counted (and said) in this pass */
    l->idx_hash = BASE_HASH_INIT;
    for (int64_t i = 0; i < l->n_idx; i++) {
        const int64_t at[2] = {l->idx[i].file, l->idx[i].byte_off};
        l->idx_hash = base_hash_bytes(l->idx_hash, at, sizeof at);
    }
    const int64_t n = l->n_idx, dp = l->cfg.dp_size, r = l->cfg.dp_rank;
    if (l->chat && n > 0) {
        if (!(l->order = malloc((size_t)n * sizeof *l->order)))
            return base_fail(err, "%s: out of memory ordering %lld documents", l->path,
                             (long long)n);
        data_shuffle_permutation(MAP_SEED, n, l->order);
    }
    l->blk0 = n / dp * r + (r < n % dp ? r : n % dp);
    l->n_mine = n / dp + (r < n % dp);
    return 0;
}

/* Documents of the dataset read so far in this epoch's pass (all of them at its end). */
static int64_t docs_read_pass(const data_loader *l) {
    return l->cfg.map_style ? l->n_idx : l->rd.next.doc;
}

/* File i's data_content_hash and the bytes it covers (*size): of the bytes the reader opened (the
 * position saved is in them, though another file may have been renamed over the path since, or
 * the file grown), else of the file at the path (one not opened yet, and at a resume); 128 KiB
 * of reads. 1 when it cannot be read. */
static uint64_t file_content(const data_loader *l, int i, int64_t *size) {
    *size = 0;
    if (i < 0 || i >= l->rd.n_files) return 0;
    const data_file *f = &l->rd.files[i];
    if (f->content) {
        *size = f->content_size;
        return f->content;
    }
    const int fd = open(f->path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        if (fd >= 0) close(fd);
        return 1;
    }
    *size = (int64_t)st.st_size;
    const uint64_t h = data_content_hash_fd(fd, *size);
    close(fd);
    return h;
}

/* The bytes of file i the reader read, for hashes at a save: its open mapping (*map) or
 * descriptor (*fd), else (the reader has moved on to later files while the position's document is
 * still buffered) the file at the path when it is the one the reader opened (device and inode)
 * or one it has not opened (*fd opened here: *own). -1 when neither (replaced since). */
static int read_bytes(const data_loader *l, int i, const unsigned char **map, int *fd, int *own) {
    const data_reader *r = &l->rd;
    *map = NULL, *fd = -1, *own = 0;
    if (r->text_file == i && r->tmap) {
        *map = r->tmap;
        return 0;
    }
    if (r->fp_file == i && r->fp) {
        *fd = fileno(r->fp);
        return 0;
    }
    const data_file *f = &r->files[i];
    struct stat st;
    *fd = open(f->path, O_RDONLY | O_CLOEXEC);
    *own = *fd >= 0;
    if (*fd >= 0 && fstat(*fd, &st) == 0 &&
        (!f->ino || (f->dev == (uint64_t)st.st_dev && f->ino == (uint64_t)st.st_ino)))
        return 0;
    if (*own) close(*fd);
    *fd = -1, *own = 0;
    return -1;
}

/* The state's `window` (and, for a JSON Lines file that grew while the run read it, `size` and
 * `content` moved up to the position, so that the lines read past the size it had at its open
 * are checked as read, and the size said is the one read) from the bytes the reader read. At
 * offset 0 (a token shard's position, a file's start) the window is empty: nothing is read.
 * When the bytes are gone (the file unreadable or replaced at this save) the window is left
 * unrecorded (0, not checked, as a state from before titan recorded it) and size and content
 * as they were: a passing fault at a save must not refuse every later resume on the same
 * data. */
static void state_window(const data_loader *l, data_loader_state *s) {
    if (s->file < 0 || s->file >= l->rd.n_files) return;
    if (s->byte_off <= 0) {
        s->window = data_window_hash(NULL, -1, 0); /* n = 0: no read */
        return;
    }
    const unsigned char *map;
    int fd, own;
    if (read_bytes(l, s->file, &map, &fd, &own)) return;
    s->window = data_window_hash(map, fd, s->byte_off);
    if (s->byte_off > s->size && !map) {
        s->size = s->byte_off;
        s->content = data_content_hash_fd(fd, s->byte_off);
    }
    if (own) close(fd);
}

/* Interleaved: HF split_dataset_by_node's case of an IterableDataset whose shard count the
 * world size does not divide (not its contiguous split of a map-style Dataset: data.h). */
static int want_doc(int64_t doc, void *arg) {
    const data_loader *l = arg;
    return doc % l->cfg.dp_size == l->cfg.dp_rank;
}

static int reserve(data_loader *l, size_t extra) {
    if (l->head > 0 && l->head >= l->len / 2) { /* compact */
        memmove(l->buf, l->buf + l->head, (l->len - l->head) * sizeof *l->buf);
        if (l->lab) memmove(l->lab, l->lab + l->head, (l->len - l->head) * sizeof *l->lab);
        l->len -= l->head;
        l->head = 0;
    }
    if (l->len + extra <= l->cap) return 0;
    size_t cap = l->cap ? l->cap : 4096;
    while (cap < l->len + extra) cap *= 2;
    int32_t *nb = realloc(l->buf, cap * sizeof *nb);
    if (!nb) return -1;
    l->buf = nb;
    if (l->cfg.doc_shift) {
        int32_t *nl = realloc(l->lab, cap * sizeof *nl);
        if (!nl) return -1; /* buf grew alone: cap still bounds both */
        l->lab = nl;
    }
    l->cap = cap;
    return 0;
}

static int push(data_loader *l, int32_t id) {
    if (reserve(l, 1)) return -1;
    l->buf[l->len++] = id;
    return 0;
}

/* doc_shift: the n tokens appended to buf at d0 become n - 1 pairs, inputs d[:-1] and labels
 * d[1:], the first `masked` labels pad_label (a chat example's prompt). */
static void shift_pairs(data_loader *l, size_t d0, int64_t n, int64_t masked) {
    for (int64_t i = 0; i + 1 < n; i++)
        l->lab[d0 + (size_t)i] = i < masked ? l->cfg.pad_label : l->buf[d0 + (size_t)i + 1];
    l->len--; /* the last token is no input */
}

/* Queues a document whose n tokens (doc_shift: pairs) were appended to the buffer. */
static int push_seg(data_loader *l, const data_pos *pos, int64_t n) {
    if (l->qn == l->qcap) {
        if (l->qh > 0) {
            memmove(l->q, l->q + l->qh, (l->qn - l->qh) * sizeof *l->q);
            l->qn -= l->qh;
            l->qh = 0;
        } else {
            size_t cap = l->qcap ? 2 * l->qcap : 64;
            seg *nq = realloc(l->q, cap * sizeof *nq);
            if (!nq) return -1;
            l->q = nq;
            l->qcap = cap;
        }
    }
    l->q[l->qn++] = (seg){*pos, l->epoch, n};
    l->epoch_tokens += n;
    return 0;
}

/* One chat example as torchtitan 0.3's ChatDataset._tokenize_sample makes it: a [user,
 * assistant] pair (titan also takes a system message before them) rendered with the chat
 * template (no generation prompt), trailing newlines stripped, encoded with bos where the
 * tokenizer has one, eos appended unless it ends so; inputs its tokens but the last, labels
 * its tokens but the first with those of the prompt (the turns before the answer rendered with
 * the generation prompt, less one: the label at its last token is the answer's first) set to
 * pad_label. An example of more than seq_len + 1 tokens is dropped (counted); a malformed one
 * is an error naming its line, or skipped with skip_bad_lines. */
static int append_chat(data_loader *l, const data_doc *d, base_err *err) {
    const data_file *f = &l->rd.files[d->pos.file];
    const long long line = (long long)d->pos.line + 1;
    data_tok *t = l->cfg.enc.tok;
    const int32_t bos = data_tok_bos_id(t), eos = data_tok_eos_id(t);
    data_chat_msg *m = NULL;
    int n = 0;
    char *full = NULL, *prompt = NULL;
    base_err why;
    int rc = data_chat_from_json(d->chat, &m, &n, &why);
    /* 0.3's [user, assistant], or after a system message (0.3 refuses it; its prompt is the
     * system and user turns, as the user turn alone is otherwise) */
    const int sys = !rc && n == 3 && !strcmp(m[0].role, "system");
    if (!rc &&
        (n != 2 + sys || strcmp(m[sys].role, "user") || strcmp(m[sys + 1].role, "assistant")))
        rc = base_fail(&why,
                       "a chat example is one user message and the assistant's answer, after "
                       "an optional system message, got %d message%s%s%s%s%s%s",
                       n, n == 1 ? "" : "s", n ? " (" : "", n ? m[0].role : "", n > 1 ? ", " : "",
                       n > 1 ? m[1].role : "",
                       n > 2 ? ", ...)"
                       : n   ? ")"
                             : "");
    if (!rc)
        rc = data_chat_render(m, n, 0, 1, &full, &why) ||
             data_chat_render(m, n - 1, 1, 1, &prompt, &why);
    data_chat_msgs_free(m);
    l->docs_read++;
    l->epoch_docs++;
    if (rc) {
        free(full);
        free(prompt);
        if (!l->cfg.skip_bad_lines)
            return base_fail(err, "%s:%lld: %s (set skip_bad_lines to skip such lines)", f->path,
                             line, why.msg);
        l->chat_bad++;
        if (!l->cfg.bad_lines_said && l->chat_bad_said++ < 20) /* said once per loader */
            base_log(BASE_LOG_WARN, "%s:%lld: skipped: %s%s", f->path, line, why.msg,
                     l->chat_bad_said == 20 ? " (further ones counted only)" : "");
        return 0;
    }
    size_t fl = strlen(full);
    while (fl > 0 && full[fl - 1] == '\n') fl--;
    l->ids.n = 0;
    rc = data_tok_encode(t, prompt, strlen(prompt), &l->ids, err);
    const int64_t np = (int64_t)l->ids.n + (bos >= 0);
    l->ids.n = 0;
    if (!rc) rc = data_tok_encode(t, full, fl, &l->ids, err);
    free(full);
    free(prompt);
    if (rc) return -1;
    const int add_eos = !l->ids.n || l->ids.ids[l->ids.n - 1] != eos;
    const int64_t nt = (int64_t)l->ids.n + (bos >= 0) + add_eos; /* the example's tokens */
    l->epoch_text++;
    if (nt - 1 > l->cfg.seq_len) {
        l->chat_long++;
        if (!l->said_long)
            base_log(BASE_LOG_INFO,
                     "%s:%lld: a chat example of %lld tokens, more than seq_len + 1 = %d: "
                     "dropped, as torchtitan's ChatDataset drops them (counted at each epoch's "
                     "end)",
                     f->path, line, (long long)nt, l->cfg.seq_len + 1);
        l->said_long = 1;
        return 0;
    }
    if (reserve(l, (size_t)nt)) goto oom;
    const size_t d0 = l->len;
    if (bos >= 0) l->buf[l->len++] = bos;
    if (l->ids.n) memcpy(l->buf + l->len, l->ids.ids, l->ids.n * sizeof *l->buf);
    l->len += l->ids.n;
    if (add_eos) l->buf[l->len++] = eos;
    shift_pairs(l, d0, nt, np - 1); /* np - 1 <= nt - 1: the prompt is the example's start */
    if (push_seg(l, &d->pos, nt - 1)) goto oom;
    return 0;
oom:
    return base_fail(err, "%s: out of memory buffering document %lld", f->path,
                     (long long)d->pos.doc);
}

/* Appends one document's [bos] + ids + [eos] to the buffer. */
static int append_doc(data_loader *l, const data_doc *d, base_err *err) {
    if (l->chat) return append_chat(l, d, err);
    const data_file *f = &l->rd.files[d->pos.file];
    const size_t start = l->len - l->head;
    int32_t bos = -1, eos = -1;
    if (l->cfg.enc.tok) {
        bos = data_tok_bos_id(l->cfg.enc.tok);
        eos = data_tok_eos_id(l->cfg.enc.tok);
    }
    if (d->shard) {
        const data_shard *s = d->shard;
        data_tok *t = l->cfg.enc.tok;
        if (t && (s->vocab_size != data_tok_vocab_size(t) || s->bos != bos || s->eos != eos))
            return base_fail(err,
                             "%s: shard was written by another tokenizer%s%.*s (vocab_size %d, "
                             "bos %d, eos %d; this one has %d, %d, %d)",
                             f->path, s->tok_path && s->tok_path_len ? ", " : "",
                             s->tok_path ? (int)s->tok_path_len : 0, s->tok_path ? s->tok_path : "",
                             s->vocab_size, s->bos, s->eos, data_tok_vocab_size(t), bos, eos);
        if (t && s->tok_path && s->tok_hash != data_tok_fingerprint(t))
            return base_fail(err,
                             "%s: shard was written with the tokenizer %.*s (tokenizer.json FNV-1a "
                             "64 %016llx); this run's tokenizer is another (%016llx): "
                             "re-tokenize the data with it, or train with that one",
                             f->path, (int)s->tok_path_len, s->tok_path,
                             (unsigned long long)s->tok_hash,
                             (unsigned long long)data_tok_fingerprint(t));
        if (s->vocab_size > l->cfg.enc.vocab_size)
            return base_fail(err, "%s: shard vocab_size %d is larger than the model's %d", f->path,
                             s->vocab_size, l->cfg.enc.vocab_size);
        bos = s->bos;
        eos = s->eos;
        if (bos >= 0 && push(l, bos)) goto oom;
        if (reserve(l, (size_t)d->n_ids)) goto oom;
        for (uint64_t i = 0; i < d->n_ids; i++) {
            const unsigned char *p = s->tokens + 4 * (d->first + i);
            uint32_t v =
                (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
            if (v >= (uint32_t)s->vocab_size)
                return base_fail(err, "%s: document %lld, token %llu: id %u >= vocab_size %d",
                                 f->path, (long long)d->pos.file_doc, (unsigned long long)i, v,
                                 s->vocab_size);
            l->buf[l->len++] = (int32_t)v;
        }
    } else {
        if (bos >= 0 && push(l, bos)) goto oom;
        if (l->cfg.enc.tok) {
            l->ids.n = 0;
            if (data_tok_encode(l->cfg.enc.tok, d->text, d->len, &l->ids, err)) return -1;
            if (reserve(l, l->ids.n)) goto oom;
            if (l->ids.n) /* an empty document has no ids (and buf may not exist yet) */
                memcpy(l->buf + l->len, l->ids.ids, l->ids.n * sizeof *l->buf);
            l->len += l->ids.n;
        } else { /* byte tokens: a text paragraph keeps its separator "\n\n" (there is no
                    eos) */
            const size_t n = d->len + d->sep;
            if (reserve(l, n)) goto oom;
            for (size_t i = 0; i < d->len; i++) l->buf[l->len++] = (unsigned char)d->text[i];
            for (size_t i = 0; i < d->sep; i++) l->buf[l->len++] = '\n';
        }
    }
    if (eos >= 0 && push(l, eos)) goto oom;
    /* A dataset whose texts are all empty (a field filled with "", a broken export) would
     * train on nothing but the eos each document ends with: said early, refused at the end
     * of the first pass (read_doc). */
    int64_t n = (int64_t)(l->len - l->head - start);
    l->epoch_text += n > (bos >= 0) + (eos >= 0);
    l->docs_read++;
    l->epoch_docs++;
    if (l->cfg.doc_shift && n > 0) { /* inputs d[:-1], labels d[1:]: one pair fewer */
        shift_pairs(l, l->head + start, n, 0);
        n--;
    }
    if (n == 0)
        return 0; /* an empty document of byte tokens (or of one token, shifted) adds
                     nothing */
    if (push_seg(l, &d->pos, n)) goto oom;
    return 0;
oom:
    return base_fail(err, "%s: out of memory buffering document %lld", f->path,
                     (long long)d->pos.doc);
}

/* Reads this rank's next document into the buffer, restarting at the end of the dataset
 * when infinite. Returns 1, 0 at the end (not infinite), -1 on error. */
static int read_doc(data_loader *l, base_err *err) {
    for (;;) {
        data_doc d;
        int rc = 0;
        if (!l->cfg.map_style) {
            rc = data_reader_next(&l->rd, want_doc, l, &d, err);
        } else if (l->k < l->n_mine) {
            const data_pos want = map_pos(l, l->k++);
            data_reader_jump(&l->rd, &want);
            rc = data_reader_next(&l->rd, NULL, NULL, &d, err);
            /* indexed at open: a file that shrank or changed since reads on elsewhere (the next
             * file's first document) */
            if (rc >= 0 && (rc == 0 || d.pos.file != want.file || d.pos.byte_off != want.byte_off))
                rc = base_fail(err,
                               "%s: its document at byte %lld (line %lld) is gone: the file "
                               "changed during the run, after the map-style loader indexed it",
                               l->rd.files[want.file].path, (long long)want.byte_off,
                               (long long)want.line + 1);
            d.pos.doc = want.doc; /* the state's count: this rank's, in the epoch's order */
        }
        if (rc < 0) return -1;
        if (rc > 0) return append_doc(l, &d, err) ? -1 : 1;
        /* (with doc_shift a document of its eos alone adds no pair: epoch_tokens stays 0; a
         * chat example counts as text once it parses) */
        if (l->from_start && (l->epoch_tokens > 0 || (l->cfg.doc_shift && l->epoch_docs > 0)) &&
            l->epoch_text == 0)
            return l->chat
                       ? base_fail(err,
                                   "%s: every chat example of data-parallel rank %d of %d is "
                                   "malformed (%lld skipped with skip_bad_lines; the warnings "
                                   "above say why)",
                                   l->path, l->cfg.dp_rank, l->cfg.dp_size, (long long)l->chat_bad)
                       : base_fail(err,
                                   "%s: every document of data-parallel rank %d of %d has "
                                   "empty text (the dataset has %lld documents): training "
                                   "would see only the eos each ends with; check the file "
                                   "and its text field",
                                   l->path, l->cfg.dp_rank, l->cfg.dp_size,
                                   (long long)docs_read_pass(l));
        char dropped[160] = ""; /* chat examples this epoch left out */
        if (l->chat_long || l->chat_bad)
            snprintf(dropped, sizeof dropped,
                     "; %lld chat examples longer than seq_len + 1 tokens dropped, %lld malformed "
                     "skipped",
                     (long long)l->chat_long, (long long)l->chat_bad);
        const long long ep = (long long)l->epoch; /* said as the restarts are (below) */
        if ((l->chat_long || l->chat_bad) && !l->cfg.bad_lines_said && (ep < 4 || !(ep & (ep - 1))))
            base_log(BASE_LOG_INFO, "data: %s, epoch %lld, data-parallel rank %d%s", l->path, ep,
                     l->cfg.dp_rank, dropped);
        l->chat_long = l->chat_bad = 0;
        if (!l->cfg.infinite) return 0;
        if (l->from_start && l->epoch_tokens == 0)
            return base_fail(err,
                             "%s: no tokens for data-parallel rank %d of %d (the dataset has %lld "
                             "documents%s)",
                             l->path, l->cfg.dp_rank, l->cfg.dp_size, (long long)docs_read_pass(l),
                             dropped);
        /* a line an epoch would flood the log for a small dataset and long windows (millions
         * of epochs): the first four, then at powers of two */
        const long long e = (long long)l->epoch;
        if (e < 4 || !(e & (e - 1))) {
            char bad[96] = "";
            if (e == 0 && l->rd.bad_lines)
                snprintf(bad, sizeof bad, " (%lld malformed lines skipped, not counted again)",
                         (long long)l->rd.bad_lines);
            base_log(BASE_LOG_INFO,
                     "data: %s exhausted after %lld documents (epoch %lld)%s; restarting from the "
                     "beginning%s",
                     l->path, (long long)docs_read_pass(l), e, bad,
                     e == 3 ? " (further epochs said at 4, 8, 16, ...)" : "");
        }
        data_reader_rewind(&l->rd);
        l->epoch++;
        l->k = 0;
        if (l->cfg.map_style && map_epoch(l, err)) return -1;
        l->rd.bad_counted = 1;
        l->from_start = 1;
        l->epoch_tokens = 0;
        l->epoch_text = 0;
        l->epoch_docs = 0;
    }
}

static void consume(data_loader *l, int64_t k) {
    l->head += (size_t)k;
    while (k > 0 && l->qh < l->qn) {
        const int64_t rem = l->q[l->qh].ntok - l->front_used;
        if (k >= rem) {
            k -= rem;
            l->qh++;
            l->front_used = 0;
        } else {
            l->front_used += k;
            k = 0;
        }
    }
}

int data_loader_open(data_loader **out, const data_loader_cfg *cfg, base_err *err) {
    *out = NULL;
    if (cfg->seq_len < 1 || cfg->batch < 1)
        return base_fail(err, "data loader: seq_len (%d) and batch (%d) must be >= 1", cfg->seq_len,
                         cfg->batch);
    const int dp = cfg->dp_size ? cfg->dp_size : 1;
    if (dp < 1 || cfg->dp_rank < 0 || cfg->dp_rank >= dp)
        return base_fail(err, "data loader: dp_rank %d is not in [0, dp_size %d)", cfg->dp_rank,
                         dp);
    data_loader *l = calloc(1, sizeof *l);
    if (!l) return base_fail(err, "out of memory");
    l->cfg = *cfg;
    l->cfg.dp_size = dp;
    l->path = strdup(cfg->path ? cfg->path : "");
    l->from_start = 1;
    if (!l->path ||
        data_reader_open(&l->rd, cfg->path, cfg->format, cfg->field, cfg->skip_bad_lines, err)) {
        if (!l->path) base_fail(err, "out of memory");
        data_loader_free(l);
        return -1;
    }
    l->cfg.path = l->path;
    l->rd.bad_counted = cfg->bad_lines_said;
    l->chat = cfg->format == DATA_FMT_CHAT;
    if (l->chat) l->cfg.doc_shift = 1;  /* pairs, with the prompt's labels masked */
    l->said_long = cfg->bad_lines_said; /* an earlier loader of this file said it */
    base_err why;
    if (l->chat && (!cfg->enc.tok || data_tok_eos_id(cfg->enc.tok) < 0)) {
        base_fail(err,
                  "%s: chat examples need a tokenizer with an eos token (model.hf_assets_path "
                  "/ --tokenizer): the chat template's special tokens are its",
                  cfg->path);
        data_loader_free(l);
        return -1;
    }
    if (l->chat && data_chat_template_check(cfg->enc.tok, &why)) {
        base_fail(err, "%s: chat examples: %s", cfg->path, why.msg);
        data_loader_free(l);
        return -1;
    }
    l->cfg.field = l->rd.field;
    const int32_t V = cfg->enc.vocab_size;
    data_tok *t = cfg->enc.tok;
    if (t && data_tok_vocab_size(t) > V) {
        base_fail(err,
                  "%s: the tokenizer has %d ids but the model's vocab_size is %d (set the model's "
                  "vocab_size to at least %d)",
                  cfg->path, data_tok_vocab_size(t), V, data_tok_vocab_size(t));
        data_loader_free(l);
        return -1;
    }
    /* without a tokenizer, text and JSONL are byte tokens: beside token shards (ids of the
     * tokenizer they record) that would pack two vocabularies into one stream */
    const data_file *shard = t ? NULL : data_loader_file_of(l, 1);
    const data_file *bytes = t ? NULL : data_loader_file_of(l, 0);
    if (shard && bytes) {
        base_fail(err,
                  "%s: token shards (%s, ids of the tokenizer %s) and text or JSONL files (%s) "
                  "together need that tokenizer to tokenize the text the same way (without one "
                  "it would be byte tokens, another vocabulary in the same stream): pass "
                  "--tokenizer, or train on the shards and the text apart",
                  cfg->path, shard->path, shard->tok_path ? shard->tok_path : "?", bytes->path);
        data_loader_free(l);
        return -1;
    }
    /* without a tokenizer nothing checks a shard's ids against one (append_doc): shards of two
     * tokenizers (a glob over tokenize folders) would pack two vocabularies into one stream, and
     * the checkpoint would record the first's (data_loader_shard_tokenizer) */
    const data_file *first = NULL;
    for (int i = 0; !t && i < l->rd.n_files; i++) {
        const data_file *f = &l->rd.files[i];
        if (f->format != DATA_FMT_TOKENS || !f->tok_path) continue;
        if (!first) {
            first = f;
        } else if (f->tok_hash != first->tok_hash) {
            base_fail(err,
                      "%s: token shards written by two tokenizers: %s by %s (tokenizer.json FNV-1a "
                      "64 %016llx), %s by %s (%016llx); without --tokenizer their ids would be two "
                      "vocabularies in one stream: train on them apart, or re-tokenize one with "
                      "the other's tokenizer",
                      cfg->path, first->path, first->tok_path, (unsigned long long)first->tok_hash,
                      f->path, f->tok_path, (unsigned long long)f->tok_hash);
            data_loader_free(l);
            return -1;
        }
    }
    for (int i = 0; !t && i < l->rd.n_files; i++)
        if (l->rd.files[i].format != DATA_FMT_TOKENS && V < 256) {
            base_fail(err, "%s: byte tokens (no tokenizer) need vocab_size >= 256 (got %d)",
                      l->rd.files[i].path, V);
            data_loader_free(l);
            return -1;
        }
    for (int i = 0; cfg->map_style && i < l->rd.n_files; i++)
        if (l->rd.files[i].format == DATA_FMT_TOKENS) {
            base_fail(err,
                      "%s: token shards are read in order, not as a map-style dataset "
                      "(training.dataset_streaming = false): read them streaming, or give the "
                      "text or JSON Lines files they came from",
                      l->rd.files[i].path);
            data_loader_free(l);
            return -1;
        }
    if (cfg->map_style && map_index(l, err)) {
        data_loader_free(l);
        return -1;
    }
    int32_t enc[4] = {t ? data_tok_vocab_size(t) : 0, t ? data_tok_bos_id(t) : -1,
                      t ? data_tok_eos_id(t) : -1, dp * 65536 + cfg->dp_rank};
    l->fingerprint = base_hash_bytes(data_reader_fingerprint(&l->rd), enc, sizeof enc);
    const uint64_t setup = base_hash_bytes(
        base_hash_bytes(BASE_HASH_INIT, l->rd.field, strlen(l->rd.field) + 1), enc, sizeof enc);
    l->setup = setup + !setup;                                    /* 0 is "not recorded" */
    if (l->chat) l->setup = base_hash_bytes(l->setup, "chat", 4); /* as the fingerprint */
    *out = l;
    return 0;
}

void data_loader_free(data_loader *l) {
    if (!l) return;
    data_reader_close(&l->rd);
    free(l->path);
    free(l->buf);
    free(l->lab);
    free(l->q);
    free(l->idx);
    free(l->order);
    free(l->sigma);
    data_tok_ids_free(&l->ids);
    free(l);
}

/* data_loader_next's positions of rows [0, rows) (doc_shift windows of T pairs from head; the
 * documents q[qh ..) of which front_used pairs are consumed); a missing row is one document. */
static void doc_positions(const data_loader *l, int rows, int32_t *pos) {
    const int T = l->cfg.seq_len;
    size_t qi = l->qh;
    int64_t ds = -l->front_used; /* where document qi starts, relative to head */
    for (int b = 0; b < l->cfg.batch; b++) {
        const int64_t w0 = (int64_t)b * T;
        for (int t = 0; t < T; t++) {
            const int64_t a = w0 + t;
            while (b < rows && qi < l->qn && a >= ds + l->q[qi].ntok) ds += l->q[qi++].ntok;
            pos[(size_t)b * T + t] = b < rows ? (int32_t)(a - (ds > w0 ? ds : w0)) : t;
        }
    }
}

/* Chat's rows (torchtitan 0.3's ChatDataset._iter_greedy_packed): each takes whole examples
 * while the next fits, then is padded (inputs eos, labels pad_label, positions 0, 1, ... as
 * another document); the end of the data ends a row (its examples are one epoch's). An
 * example's positions count from 0. A missing row of a short last batch: inputs 0, labels
 * pad_label, positions 0..seq_len-1. */
static int next_chat(data_loader *l, int32_t *inputs, int32_t *labels, int32_t *positions,
                     base_err *err) {
    const int T = l->cfg.seq_len;
    const int32_t eos = data_tok_eos_id(l->cfg.enc.tok);
    int rows = 0, end = 0;
    for (int b = 0; b < l->cfg.batch && !end; b++) {
        int32_t *in = inputs + (size_t)b * T, *lab = labels + (size_t)b * T;
        int32_t *pos = positions ? positions + (size_t)b * T : NULL;
        int t = 0;
        int64_t epoch = -1;
        while (t < T) {
            if (l->qh == l->qn) { /* read on: an example dropped or skipped queues nothing */
                const int rc = read_doc(l, err);
                if (rc < 0) return -1;
                if (rc == 0) {
                    end = 1;
                    break;
                }
                continue;
            }
            const seg *s = &l->q[l->qh];
            if (epoch < 0) epoch = s->epoch;
            if (s->epoch != epoch || s->ntok > T - t) break;
            const size_t k = (size_t)s->ntok;
            memcpy(in + t, l->buf + l->head, k * sizeof *in);
            memcpy(lab + t, l->lab + l->head, k * sizeof *lab);
            for (size_t i = 0; pos && i < k; i++) pos[t + (int)i] = (int32_t)i;
            t += (int)k;
            consume(l, (int64_t)k);
        }
        if (t == 0) break; /* the end, with no example for this row */
        for (int p = t; p < T; p++) {
            in[p] = eos;
            lab[p] = l->cfg.pad_label;
            if (pos) pos[p] = p - t;
        }
        rows++;
    }
    if (rows == 0 || (rows < l->cfg.batch && (l->cfg.infinite || !l->cfg.partial_last))) return 0;
    for (int b = rows; b < l->cfg.batch; b++)
        for (int t = 0; t < T; t++) {
            const size_t i = (size_t)b * T + (size_t)t;
            inputs[i] = 0;
            labels[i] = l->cfg.pad_label;
            if (positions) positions[i] = t;
        }
    return 1;
}

int data_loader_next(data_loader *l, int32_t *inputs, int32_t *labels, int32_t *positions,
                     base_err *err) {
    const int T = l->cfg.seq_len;
    if (l->chat) return next_chat(l, inputs, labels, positions, err);
    if (positions && !l->cfg.doc_shift)
        return base_fail(err, "%s: document positions need doc_shift packing", l->path);
    const size_t stride = (size_t)T + !l->cfg.doc_shift; /* buffered entries a window takes */
    size_t need = (size_t)l->cfg.batch * stride;
    while (l->len - l->head < need) {
        int rc = read_doc(l, err);
        if (rc < 0) return rc;
        if (rc > 0) continue;
        /* the end: the whole windows left make a short last batch, where allowed */
        const size_t whole = (l->len - l->head) / stride;
        if (l->cfg.infinite || !l->cfg.partial_last || whole == 0) return 0;
        need = whole * stride;
    }
    const int rows = (int)(need / stride);
    for (int b = 0; b < l->cfg.batch; b++) {
        int32_t *in = inputs + (size_t)b * T, *lab = labels + (size_t)b * T;
        if (b >= rows) {
            memset(in, 0, (size_t)T * sizeof *in);
            for (int t = 0; t < T; t++) lab[t] = l->cfg.pad_label;
            continue;
        }
        const size_t at = l->head + (size_t)b * stride;
        memcpy(in, l->buf + at, (size_t)T * sizeof *in);
        memcpy(lab, l->cfg.doc_shift ? l->lab + at : l->buf + at + 1, (size_t)T * sizeof *lab);
    }
    if (positions) doc_positions(l, rows, positions);
    consume(l, (int64_t)need);
    /* said once, after the first batch of a pass read from document 0 that came from empty
     * documents only (not after a resume that lands among some) */
    if (!l->warned_empty && l->from_start && l->epoch == 0 && l->docs_read > 1 &&
        l->epoch_text == 0) {
        l->warned_empty = 1;
        base_log(BASE_LOG_WARN,
                 "data: the first %lld documents of %s (data-parallel rank %d) all have empty "
                 "text: training sees only the eos the tokenizer ends each with",
                 (long long)l->docs_read, l->path, l->cfg.dp_rank);
    }
    return 1;
}

int data_loader_shard_tokenizer(const data_loader *l, const char **path, uint64_t *hash) {
    for (int i = 0; i < l->rd.n_files; i++)
        if (l->rd.files[i].format == DATA_FMT_TOKENS && l->rd.files[i].tok_path) {
            *path = l->rd.files[i].tok_path;
            *hash = l->rd.files[i].tok_hash;
            return 0;
        }
    return -1;
}

void data_loader_describe(const data_loader *l, char *buf, size_t n) {
    data_loader_describe_files(l, buf, n);
    data_loader_describe_rank(l, buf, n);
}

void data_loader_describe_rank(const data_loader *l, char *buf, size_t n) {
    const size_t k = strnlen(buf, n);
    if (k + 1 < n)
        snprintf(buf + k, n - k, "; %s; data-parallel rank %d of %d",
                 l->cfg.enc.tok ? "tokenizer" : "byte tokens", l->cfg.dp_rank, l->cfg.dp_size);
}

const data_file *data_loader_file_of(const data_loader *l, int tokens) {
    for (int i = 0; i < l->rd.n_files; i++)
        if ((l->rd.files[i].format == DATA_FMT_TOKENS) == !!tokens) return &l->rd.files[i];
    return NULL;
}

void data_loader_describe_files(const data_loader *l, char *buf, size_t n) {
    if (!n) return;
    int count[DATA_FMT_COUNT] = {0};
    uint64_t docs = 0, toks = 0;
    for (int i = 0; i < l->rd.n_files; i++) {
        const data_file *f = &l->rd.files[i];
        count[f->format]++;
        data_shard s;
        base_err e;
        if (f->format == DATA_FMT_TOKENS && data_shard_open(&s, f->path, &e) == 0) {
            docs += s.n_docs;
            toks += s.n_tokens;
            data_shard_close(&s);
        }
    }
    size_t k = (size_t)snprintf(buf, n, "%s: %d file%s", l->path, l->rd.n_files,
                                l->rd.n_files == 1 ? "" : "s");
    if (count[DATA_FMT_TEXT] && k < n)
        k += (size_t)snprintf(buf + k, n - k, ", %d text (a document per paragraph)",
                              count[DATA_FMT_TEXT]);
    if (count[DATA_FMT_JSONL] && k < n)
        k +=
            (size_t)snprintf(buf + k, n - k, ", %d JSONL (field \"%s\", %s)", count[DATA_FMT_JSONL],
                             l->rd.field, l->cfg.map_style ? "indexed" : "streamed");
    if (count[DATA_FMT_TOKENS] && k < n)
        k += (size_t)snprintf(buf + k, n - k, ", %d token shards (%llu documents, %llu tokens)",
                              count[DATA_FMT_TOKENS], (unsigned long long)docs,
                              (unsigned long long)toks);
    if (l->cfg.map_style && k < n)
        k +=
            (size_t)snprintf(buf + k, n - k,
                             "; map-style: %lld documents, %s, this rank's block of %lld, "
                             "reshuffled each later epoch (seed 42 + epoch)",
                             (long long)l->n_idx, l->order ? "shuffled (seed 42)" : "in file order",
                             (long long)l->n_mine);
}

/* data_loader_state.name of a file: its base name and format, never 0 (0 is "past the last
 * file"). */
static uint64_t name_hash(const data_file *f) {
    const uint64_t h = data_file_hash(BASE_HASH_INIT, f, 0);
    return h + !h;
}

static const char k_leave_out[] =
    "checkpoint.exclude_from_loading = [\"dataloader\"] reads the data from its start";

/* The refusal of a state that fits none of this dataset; why: what differs, in parentheses. */
static int another_dataset(const data_loader *l, const char *why, base_err *err) {
    return base_fail(err,
                     "%s: the saved data-loader state belongs to another dataset or setup (%s); %s",
                     l->path, why, k_leave_out);
}

/* The position's file rewritten with its size (the fingerprint cannot see it). */
static int changed_same_size(const data_file *f, const data_loader_state *s, base_err *err) {
    return base_fail(err,
                     "%s: changed since the checkpoint (the same size, other bytes at its "
                     "start, its end or before the saved position: regenerated or reshuffled?): "
                     "the saved position (document "
                     "%lld) would point into other documents; restore the file, or leave the "
                     "position out (checkpoint.exclude_from_loading = [\"dataloader\"])",
                     f->path, (long long)s->doc);
}

void data_loader_get_state(const data_loader *l, data_loader_state *s) {
    memset(s, 0, sizeof *s);
    /* the document holding the next token: the buffer's oldest, else the next to read */
    const data_pos p = l->qh < l->qn      ? l->q[l->qh].pos
                       : l->cfg.map_style ? map_pos(l, l->k)
                                          : l->rd.next;
    s->epoch = l->qh < l->qn ? l->q[l->qh].epoch : l->epoch;
    s->doc = p.doc;
    s->doc_tokens = l->qh < l->qn ? l->front_used : 0;
    s->file = p.file;
    s->file_doc = p.file_doc;
    s->byte_off = p.byte_off;
    s->line = p.line;
    s->map_style = l->cfg.map_style;
    s->bad_lines = l->rd.bad_lines;
    s->fingerprint = l->fingerprint;
    s->content = file_content(l, s->file, &s->size);
    if (l->cfg.map_style) s->content = map_content(l);
    s->setup = l->setup;
    s->before = data_reader_files_hash(&l->rd, s->file);
    s->name = s->file < l->rd.n_files ? name_hash(&l->rd.files[s->file]) : 0;
    state_window(l, s);
}

/* Of the file at path now (a resume's check): the content hash of its first `end` bytes, or
 * (window) the window hash of the 64 KiB before byte `end`; 1 when it cannot be read. */
static uint64_t path_hash(const char *path, int64_t end, int window) {
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 1;
    const uint64_t h = window ? data_window_hash(NULL, fd, end) : data_content_hash_fd(fd, end);
    close(fd);
    return h;
}

/* Whether the window s records reads the same in the file at f's path now (s->window 0: a state
 * saved before titan recorded it, not checked). */
static int window_same(const data_file *f, const data_loader_state *s) {
    if (!s->window || s->byte_off <= 0) return 1; /* unrecorded, or empty */
    return path_hash(f->path, s->byte_off, 1) == s->window;
}

/* The fingerprint differs (the file list changed): whether the dataset only grew after the
 * saved position, so that the documents before it, which number it, are the ones the run read.
 * Files [0, file) must be as they were (names, sizes, formats, text flags), the position's file
 * the same name and format, at least as long, its first `size` bytes the same (content hash)
 * and read into the same documents up to the position (data_reader_check_grown, which may move
 * *p past a newline); what follows the position (the file's new bytes, the files after it, new
 * ones listed after it) is read as it is now, as in any epoch. Refusals name the file and what
 * changed. */
static int check_growth(const data_loader *l, const data_loader_state *s, data_pos *p,
                        base_err *err) {
    const data_reader *r = &l->rd;
    const int k = s->file, n = r->n_files;
    if (k > n)
        return base_fail(err,
                         "%s: the saved position is in file %lld of the listing, which has %d "
                         "files now: files were removed or renamed; %s",
                         l->path, (long long)k + 1, n, k_leave_out);
    /* where the position's file is listed now (its name and format; base names repeat in a
     * glob over folders: the nearest to where it was) */
    int at = -1;
    for (int d = 0; s->name && at < 0 && (k - d >= 0 || k + d < n); d++)
        for (int i = k - d; at < 0 && i <= k + d; i += d ? 2 * d : 1)
            if (i >= 0 && i < n && name_hash(&r->files[i]) == s->name) at = i;
    if (data_reader_files_hash(r, k) != s->before) {
        if (at >= 0 && at != k)
            return base_fail(err,
                             "%s: the saved position's file, listed %s now (file %d, file %d at "
                             "the checkpoint): files before it were added, removed or renamed, "
                             "and their documents number the position's (document %lld); %s",
                             r->files[at].path, at > k ? "later" : "earlier", at + 1, k + 1,
                             (long long)s->doc, k_leave_out);
        {
            char files[32];
            snprintf(files, sizeof files, k == 1 ? "file" : "%d files", k);
            return base_fail(
                err,
                "%s: the %s before the saved position's (%s) %s the checkpoint read: %s "
                "changed size, name or format, or a file was added, removed or renamed "
                "%s; %s documents number the position's (document %lld), so it cannot "
                "be resumed; restore %s, or %s",
                l->path, files, at == k ? r->files[k].path : "gone: removed or renamed",
                k == 1 ? "is not the one" : "are not the ones", k == 1 ? "it" : "one",
                k == 1 ? "before it" : "among them", k == 1 ? "its" : "their", (long long)s->doc,
                k == 1 ? "it" : "them", k_leave_out);
        }
    }
    if (!s->name) { /* past the last file then: the files added after it are read from here */
        if (p->file_doc || p->byte_off || p->line || s->doc_tokens)
            return base_fail(err,
                             "%s: data-loader state does not fit the data (past the last file, "
                             "with a place inside one)",
                             l->path);
        return 0;
    }
    if (k == n)
        return base_fail(err,
                         "%s: the saved position's file (the last, file %d) is gone: removed or "
                         "renamed; %s",
                         l->path, k + 1, k_leave_out);
    const data_file *f = &r->files[k];
    if (name_hash(f) != s->name) {
        for (int fmt = DATA_FMT_TEXT; fmt < DATA_FMT_COUNT; fmt++) {
            data_file g = *f;
            g.format = (data_format)fmt;
            if (fmt != (int)f->format && name_hash(&g) == s->name)
                return base_fail(err,
                                 "%s: read as %s at the checkpoint, as %s now (its format or "
                                 "training.dataset_format changed): the saved position is no "
                                 "place in it; %s",
                                 f->path, data_format_name(g.format), data_format_name(f->format),
                                 k_leave_out);
        }
        if (at > k)
            return base_fail(err,
                             "%s: added before the saved position's file (%s), whose documents "
                             "would come before the position (document %lld); %s",
                             f->path, r->files[at].path, (long long)s->doc, k_leave_out);
        return base_fail(err,
                         "%s: the file holding the saved position (file %d of the listing then) "
                         "is gone: removed or renamed (%s is listed there now), or the state is "
                         "another dataset's; %s",
                         l->path, k + 1, f->path, k_leave_out);
    }
    if (f->size < s->size)
        return base_fail(err,
                         "%s: %lld bytes now, %lld when the run read it: shrunk, the saved "
                         "position (document %lld) would point into other documents; restore it, "
                         "or %s",
                         f->path, (long long)f->size, (long long)s->size, (long long)s->doc,
                         k_leave_out);
    if (path_hash(f->path, s->size, 0) != s->content) {
        if (f->size == s->size) return changed_same_size(f, s, err);
        return base_fail(err,
                         "%s: grew since the checkpoint (%lld bytes then, %lld now), but its "
                         "first %lld bytes are not the ones the run read (other bytes at their "
                         "start or end: rewritten, not only appended to): the saved position "
                         "(document %lld) would point into other documents; restore it, or %s",
                         f->path, (long long)s->size, (long long)f->size, (long long)s->size,
                         (long long)s->doc, k_leave_out);
    }
    if (!window_same(f, s))
        return base_fail(err,
                         "%s: grew since the checkpoint (%lld bytes then, %lld now), but the "
                         "%lld bytes before the saved position (byte %lld) are not the ones the "
                         "run read (rewritten, not only appended to): the saved position "
                         "(document %lld) would point into other documents; restore it, or %s",
                         f->path, (long long)s->size, (long long)f->size,
                         (long long)(s->byte_off < 65536 ? s->byte_off : 65536),
                         (long long)s->byte_off, (long long)s->doc, k_leave_out);
    return data_reader_check_grown(r, p, s->size, s->doc_tokens > 0, err);
}

/* The info line of a resume that check_growth let through. */
static void said_growth(const data_loader *l, const data_loader_state *s) {
    const data_file *f = s->file < l->rd.n_files ? &l->rd.files[s->file] : NULL;
    char where[4300];
    if (f && s->name && f->size > s->size)
        snprintf(where, sizeof where, "%s: %lld bytes then, %lld now", f->path, (long long)s->size,
                 (long long)f->size);
    else if (f && s->name && s->file + 1 < l->rd.n_files)
        snprintf(where, sizeof where, "files listed after %s changed or were added", f->path);
    else if (f && s->name) { /* nothing after it: its size when the run listed it was another */
        base_log(BASE_LOG_INFO,
                 "data: %s grew while the run read it, before the checkpoint (%s: %lld bytes, as "
                 "the run last read it, and now): resuming at its saved position (epoch %lld, "
                 "document %lld)",
                 l->path, f->path, (long long)s->size, (long long)s->epoch, (long long)s->doc);
        return;
    } else
        snprintf(where, sizeof where, "files listed after the last it had read, from %s",
                 f ? f->path : "?");
    base_log(BASE_LOG_INFO,
             "data: %s grew since the checkpoint (%s): resuming at its saved position (epoch "
             "%lld, document %lld); the new data is read after it",
             l->path, where, (long long)s->epoch, (long long)s->doc);
}

/* data_loader_set_state's streaming reader at the saved position (a dataset that only grew
 * after it too: check_growth). */
static int stream_set_position(data_loader *l, const data_loader_state *s, base_err *err) {
    data_pos p = {s->doc, s->file, s->file_doc, s->byte_off, s->line};
    const int grown = s->fingerprint != l->fingerprint;
    /* states saved before titan recorded what a grown dataset is checked by (setup 0), and
     * those of another setup: the fingerprint's refusal, as ever */
    if (grown && !s->setup)
        return another_dataset(l,
                               "files, their order, sizes, tokenizer or data-parallel rank "
                               "changed; a folder of more than 99,999 token shards is read in "
                               "shard-N.tok's order N since titan 2026-12-05, not as strings",
                               err);
    if (grown && s->setup != l->setup)
        return another_dataset(l,
                               "the JSONL field, the tokenizer (vocab_size, bos, eos) or the "
                               "data-parallel rank or size differ",
                               err);
    if (grown && check_growth(l, s, &p, err)) return -1;
    int64_t size;
    if (!grown && s->content && s->file < l->rd.n_files &&
        s->content != file_content(l, s->file, &size))
        return changed_same_size(&l->rd.files[s->file], s, err);
    if (data_reader_seek(&l->rd, &p, err)) return -1;
    /* after the seek, which names a position that is no place in the file */
    if (!grown && s->file < l->rd.n_files && !window_same(&l->rd.files[s->file], s))
        return changed_same_size(&l->rd.files[s->file], s, err);
    return 0;
}

/* data_loader_set_state's map-style position: the same files (the order is of all their
 * documents), the saved count k of this rank's documents in the epoch's order, whose
 * document must be at the saved place. */
static int map_set_position(data_loader *l, const data_loader_state *s, base_err *err) {
    if (s->fingerprint != l->fingerprint)
        return another_dataset(l,
                               "files, their order or sizes, the tokenizer or the data-parallel "
                               "rank or size changed: a map-style dataset's order is of all its "
                               "documents, so it resumes on the same files only",
                               err);
    if (s->doc > l->n_mine)
        return base_fail(err,
                         "%s: data-loader state does not fit the data (document %lld of this "
                         "rank's %lld)",
                         l->path, (long long)s->doc, (long long)l->n_mine);
    l->epoch = s->epoch;
    if (map_epoch(l, err)) return -1;
    const data_pos p = map_pos(l, s->doc);
    if (p.file != s->file || p.file_doc != s->file_doc || p.byte_off != s->byte_off ||
        p.line != s->line)
        return base_fail(err,
                         "%s: data-loader state does not fit the data (this rank's document "
                         "%lld of epoch %lld is not at file %d of the listing, its document "
                         "%lld, byte %lld)",
                         l->path, (long long)s->doc, (long long)s->epoch, s->file + 1,
                         (long long)s->file_doc + 1, (long long)s->byte_off);
    /* every file's: the epoch has read documents of all of them, and reads the rest from all */
    if (s->content && s->content != map_content(l))
        return base_fail(err,
                         "%s: a file of the dataset changed since the checkpoint (the same "
                         "names and sizes, other bytes at a file's start or end, or other line "
                         "starts: regenerated or reshuffled?): the rest of the saved epoch's "
                         "order would read other documents; restore the files, or %s",
                         l->path, k_leave_out);
    if (s->file < l->rd.n_files && !window_same(&l->rd.files[s->file], s))
        return changed_same_size(&l->rd.files[s->file], s, err);
    l->k = s->doc;
    return 0;
}

int data_loader_set_state(data_loader *l, const data_loader_state *s, base_err *err) {
    if (s->epoch < 0 || s->doc_tokens < 0 || s->bad_lines < 0 || s->file < 0)
        return base_fail(err, "%s: data-loader state has negative fields", l->path);
    /* counters the reader adds to (a hand-edited state near INT64_MAX would overflow them):
     * no dataset holds 2^62 documents, lines or bytes */
    const int64_t big = (int64_t)1 << 62;
    if (s->epoch >= big || s->doc >= big || s->doc_tokens >= big || s->file_doc >= big ||
        s->byte_off >= big || s->line >= big || s->bad_lines >= big || s->size >= big)
        return base_fail(err, "%s: data-loader state has a field of 2^62 or more", l->path);
    if (!s->map_style != !l->cfg.map_style)
        return base_fail(err,
                         "%s: the saved data-loader state read the data %s; this run reads it %s: "
                         "set training.dataset_streaming = %s as the run did, or %s",
                         l->path,
                         s->map_style ? "as a map-style dataset (each rank a contiguous block)"
                                      : "streaming (document i on data-parallel rank i mod size)",
                         l->cfg.map_style ? "as a map-style dataset" : "streaming",
                         s->map_style ? "false" : "true", k_leave_out);
    if (l->cfg.map_style) {
        if (map_set_position(l, s, err)) return -1;
    } else if (stream_set_position(l, s, err)) {
        return -1;
    }
    const int grown = s->fingerprint != l->fingerprint;
    l->rd.bad_lines = s->bad_lines;
    /* a later epoch counted its bad lines in the first, but a grown file's new lines were in no
     * pass: counted (and said) for the rest of this epoch, an old bad line after the position
     * counted twice, which overcounts where not counting would lose the new ones silently */
    l->rd.bad_counted = (s->epoch > 0 && !grown) || l->cfg.map_style; /* map: the index's pass */
    l->epoch = s->epoch;
    /* the dataset's very start: a position with document 0 elsewhere (past the last file, or
     * after files without documents) has not read this epoch from its start, so the checks of
     * a whole epoch (read_doc) must wait for the next one */
    l->from_start = s->doc == 0 && s->doc_tokens == 0 &&
                    (l->cfg.map_style ||
                     (s->file == 0 && s->file_doc == 0 && s->byte_off == 0 && s->line == 0));
    l->epoch_tokens = 0;
    l->epoch_text = 0;
    l->epoch_docs = 0;
    l->head = l->len = 0;
    l->qh = l->qn = 0;
    l->front_used = 0;
    if (s->doc_tokens == 0) {
        if (grown) said_growth(l, s);
        return 0;
    }
    if (l->chat) /* examples are consumed whole */
        return base_fail(err,
                         "%s: data-loader state does not fit chat examples (document %lld, token "
                         "%lld: a chat run's position is always at an example's start)",
                         l->path, (long long)s->doc, (long long)s->doc_tokens);
    const int64_t epoch = l->epoch;
    int rc = read_doc(l, err);
    if (rc < 0) return -1;
    /* doc_shift: a state saved without it whose next input is a document's last token (no
     * input here) resumes at the next document's first, where that token's window would have
     * gone on */
    if (rc == 0 || l->qh == l->qn || l->q[l->qh].pos.doc != s->doc || l->q[l->qh].epoch != epoch ||
        l->q[l->qh].ntok + l->cfg.doc_shift <= s->doc_tokens)
        return base_fail(err,
                         "%s: data-loader state does not fit the data (document %lld, token %lld)",
                         l->path, (long long)s->doc, (long long)s->doc_tokens);
    consume(l, s->doc_tokens);
    if (grown) said_growth(l, s);
    return 0;
}

int data_loader_state_format(const data_loader_state *s, char *buf, size_t n) {
    int k = snprintf(buf, n,
                     "{\"epoch\": %lld, \"doc\": %lld, \"doc_tokens\": %lld, \"file\": %d, "
                     "\"file_doc\": %lld, \"byte_off\": %lld, \"line\": %lld, \"bad_lines\": "
                     "%lld, \"fingerprint\": \"%016llx\", \"content\": \"%016llx\", \"setup\": "
                     "\"%016llx\", \"before\": \"%016llx\", \"name\": \"%016llx\", \"size\": %lld, "
                     "\"window\": \"%016llx\"%s}",
                     (long long)s->epoch, (long long)s->doc, (long long)s->doc_tokens, s->file,
                     (long long)s->file_doc, (long long)s->byte_off, (long long)s->line,
                     (long long)s->bad_lines, (unsigned long long)s->fingerprint,
                     (unsigned long long)s->content, (unsigned long long)s->setup,
                     (unsigned long long)s->before, (unsigned long long)s->name, (long long)s->size,
                     (unsigned long long)s->window, s->map_style ? ", \"map_style\": 1" : "");
    return k < 0 || (size_t)k >= n ? -1 : 0;
}

/* *out = v's value when v is a string of exactly 16 hex digits (data_loader_state_format's
 * %016llx); -1 otherwise. */
static int hex16(const json_t *v, uint64_t *out) {
    const char *x = json_is_string(v) ? json_string_value(v) : "";
    int ok = strlen(x) == 16;
    for (int i = 0; ok && i < 16; i++) ok = isxdigit((unsigned char)x[i]) != 0;
    if (ok) *out = strtoull(x, NULL, 16);
    return ok ? 0 : -1;
}

int data_loader_state_parse(const char *text, data_loader_state *s, base_err *err) {
    memset(s, 0, sizeof *s);
    json_error_t je;
    json_t *j = json_loads(text, JSON_REJECT_DUPLICATES, &je);
    if (!j || !json_is_object(j)) {
        if (j) json_decref(j);
        return base_fail(err, "data-loader state: not a JSON object (%s)", j ? "" : je.text);
    }
    static const char *const keys[] = {"epoch",    "doc",      "doc_tokens", "file",
                                       "file_doc", "byte_off", "line",       "bad_lines"};
    int64_t v[8];
    for (int i = 0; i < 8; i++) {
        json_t *x = json_object_get(j, keys[i]);
        if (!json_is_integer(x) || json_integer_value(x) < 0) {
            json_decref(j);
            return base_fail(err, "data-loader state: \"%s\" must be a non-negative integer",
                             keys[i]);
        }
        v[i] = json_integer_value(x);
    }
    uint64_t h, c = 0;
    if (hex16(json_object_get(j, "fingerprint"), &h) || v[3] > INT32_MAX) {
        json_decref(j);
        return base_fail(err, "data-loader state: bad \"fingerprint\" or \"file\"");
    }
    json_t *ct = json_object_get(j, "content"); /* absent in states saved before it */
    if (ct && hex16(ct, &c)) {
        json_decref(j);
        return base_fail(err, "data-loader state: bad \"content\"");
    }
    /* what a resume after growth checks: all four, or none (a state saved before them) */
    static const char *const gkeys[3] = {"setup", "before", "name"};
    uint64_t g[3] = {0, 0, 0};
    json_t *sz = json_object_get(j, "size");
    const int has = json_object_get(j, "setup") != NULL;
    int bad = has && (!json_is_integer(sz) || json_integer_value(sz) < 0);
    for (int i = 0; i < 3; i++) {
        json_t *x = json_object_get(j, gkeys[i]);
        bad |= has ? hex16(x, &g[i]) != 0 : x != NULL;
    }
    bad |= !has && sz;
    const int64_t size = has && !bad ? json_integer_value(sz) : 0;
    json_t *ms = json_object_get(j, "map_style"); /* absent: streaming */
    const int bad_ms = ms && (!json_is_integer(ms) || json_integer_value(ms) < 0 ||
                              json_integer_value(ms) > 1 || !has);
    const int map_style = ms && !bad_ms ? (int)json_integer_value(ms) : 0;
    uint64_t w = 0; /* absent in states saved before it: not checked */
    json_t *wt = json_object_get(j, "window");
    const int bad_w = wt && (hex16(wt, &w) || !has);
    json_decref(j);
    if (bad)
        return base_fail(err, "data-loader state: \"setup\", \"before\", \"name\" (16 hex "
                              "digits each) and \"size\" (a non-negative integer) go together");
    if (bad_w)
        return base_fail(err, "data-loader state: bad \"window\" (16 hex digits, with \"setup\", "
                              "\"before\", \"name\" and \"size\")");
    if (bad_ms)
        return base_fail(err, "data-loader state: bad \"map_style\" (0 or 1, with \"setup\", "
                              "\"before\", \"name\" and \"size\")");
    *s = (data_loader_state){v[0], v[1], v[2], (int32_t)v[3], v[4], v[5], v[6], v[7],
                             h,    c,    g[0], g[1],          g[2], size, w,    map_style};
    return 0;
}
