/* data: dataset files (text, JSON Lines, token shards) and a sequential document reader
 * (see the datasets section of data.h). */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/internal.h"

/* Text files are split into documents at blank lines, as Hugging Face datasets' text loader
 * with sample_by="paragraph": it reads the file in Python's text mode (universal newlines:
 * "\r\n" and a lone "\r" become "\n") and splits at "\n\n", dropping empty pieces. Here a
 * line end is "\r\n", "\r" or "\n" in the file's bytes, a blank line two of them in a row,
 * and a paragraph holding a "\r" is handed out with its line ends rewritten to "\n" (a copy);
 * positions (data_pos.byte_off) stay offsets into the file's own bytes. */
#define TEXT_SEP_LEN 2 /* the "\n\n" a byte-token paragraph keeps (data_doc.sep) */
/* A JSONL line may be at most this long. */
#define JSONL_LINE_MAX ((size_t)1 << 30)
/* Skipped bad lines are logged one by one up to this many, then only counted. */
#define BAD_LINES_LOGGED 20

static const char *const format_names[] = {"auto", "text", "jsonl", "tokens", "chat"};
_Static_assert(sizeof format_names / sizeof *format_names == DATA_FMT_COUNT,
               "a name for every data_format");

int data_format_parse(const char *s, data_format *out) {
    for (int i = 0; i < DATA_FMT_COUNT; i++)
        if (s && strcmp(s, format_names[i]) == 0) {
            *out = (data_format)i;
            return 0;
        }
    return -1;
}

const char *data_format_name(data_format f) {
    return (unsigned)f < DATA_FMT_COUNT ? format_names[f] : "?";
}

/* ---- token shards ---- */

static uint32_t rd_u32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t rd_u64(const unsigned char *p) {
    return (uint64_t)rd_u32(p) | (uint64_t)rd_u32(p + 4) << 32;
}

uint64_t data_shard_offset(const data_shard *s, uint64_t i) {
    return rd_u64(s->offsets + 8 * i) & ~DATA_SHARD_SKIPPED;
}

int data_shard_skipped(const data_shard *s, uint64_t i) {
    return (rd_u64(s->offsets + 8 * (i + 1)) & DATA_SHARD_SKIPPED) != 0;
}

void data_shard_close(data_shard *s) {
    if (s->map) munmap(s->map, s->size);
    memset(s, 0, sizeof *s);
}

enum { CONTENT_PART = 64 << 10 }; /* bytes hashed at each end */

/* size, then the first part (a) and the last (z: from max(size - PART, PART)). */
static uint64_t content_parts(int64_t size, const void *a, size_t na, const void *z, size_t nz) {
    uint64_t h = base_hash_bytes(BASE_HASH_INIT, &size, sizeof size);
    h = base_hash_bytes(h, a, na);
    h = base_hash_bytes(h, z, nz);
    return h + !h;
}

/* The parts hashed of `size` bytes: the first *na at 0, the last *nz at *tail = max(size - PART,
 * PART) (the two never overlap). One rule for the mapping and the descriptor form, which must
 * agree for resumes (the reader hashes a text file's mapping, the resume reads it through a
 * descriptor). */
static void content_span(int64_t size, size_t *na, int64_t *tail, size_t *nz) {
    *tail = size > 2 * CONTENT_PART ? size - CONTENT_PART : CONTENT_PART;
    *na = (size_t)(size < CONTENT_PART ? size : CONTENT_PART);
    *nz = size > *tail ? (size_t)(size - *tail < CONTENT_PART ? size - *tail : CONTENT_PART) : 0;
}

/* n bytes at off, all of them (a short read: the file ends before). */
static int pread_all(int fd, unsigned char *b, size_t n, int64_t off) {
    while (n > 0) {
        const ssize_t got = pread(fd, b, n, (off_t)off);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return -1;
        b += got, n -= (size_t)got, off += got;
    }
    return 0;
}

uint64_t data_window_hash(const unsigned char *map, int fd, int64_t end) {
    if (end < 0) return 1;
    const int64_t start = end > CONTENT_PART ? end - CONTENT_PART : 0;
    const size_t n = (size_t)(end - start);
    if (map) return content_parts(end, map + start, n, NULL, 0);
    unsigned char *b = malloc(n + 1);
    const uint64_t h = b && !pread_all(fd, b, n, start) ? content_parts(end, b, n, NULL, 0) : 1;
    free(b);
    return h;
}

uint64_t data_content_hash(const unsigned char *map, size_t size) {
    size_t na, nz;
    int64_t tail;
    content_span((int64_t)size, &na, &tail, &nz);
    return content_parts((int64_t)size, map, na, map ? map + tail : NULL, nz);
}

uint64_t data_content_hash_fd(int fd, int64_t size) {
    size_t na, nz;
    int64_t tail;
    content_span(size, &na, &tail, &nz);
    unsigned char *b = size >= 0 ? malloc(na + nz + 1) : NULL;
    uint64_t h = 1;
    if (b && !pread_all(fd, b, na, 0) && !pread_all(fd, b + na, nz, tail))
        h = content_parts(size, b, na, b + na, nz);
    free(b);
    return h;
}

/* The reader opened file f and found bytes hashing to h: recorded (the resume's identity of
 * the bytes trained on, not of whatever is at the path at save time); other bytes than at its
 * last open (replaced by a rename, rewritten, appended to during the run) are said once: the
 * run reads the new bytes from here. */
static void note_content(const data_reader *r, data_file *f, uint64_t h, int64_t size) {
    if (f->content && f->content != h && !f->changed_said) {
        f->changed_said = 1;
        base_log(BASE_LOG_WARN,
                 "%s: other bytes at this path than when the run last opened it (replaced or "
                 "changed during the run): read from here, at document %lld",
                 f->path, (long long)r->next.doc);
    }
    f->content = h;
    f->content_size = size;
}

/* Maps a regular file read-only; an empty file gives *map = NULL, *size = 0. Its identity (device,
 * inode) into id[2] when id is not NULL. */
static int map_file(const char *path, unsigned char **map, size_t *size, uint64_t *id,
                    base_err *err) {
    *map = NULL;
    *size = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return base_fail(err, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return base_fail(err, "%s: not a regular file", path);
    }
    void *m = st.st_size ? mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    close(fd);
    if (id) id[0] = (uint64_t)st.st_dev, id[1] = (uint64_t)st.st_ino;
    if (m == MAP_FAILED) return base_fail(err, "%s: mmap failed: %s", path, strerror(errno));
    *map = m;
    *size = (size_t)st.st_size;
    return 0;
}

int data_shard_open(data_shard *s, const char *path, base_err *err) {
    memset(s, 0, sizeof *s);
    if (map_file(path, &s->map, &s->size, NULL, err)) return -1;
    const size_t size = s->size;
    if (size < DATA_SHARD_HEADER_BYTES) {
        data_shard_close(s);
        return base_fail(err, "%s: token shard truncated: %zu bytes, the header alone is %d", path,
                         size, DATA_SHARD_HEADER_BYTES);
    }
    const unsigned char *h = s->map;
    if (memcmp(h, DATA_SHARD_MAGIC, 8) != 0) {
        data_shard_close(s);
        return base_fail(err, "%s: not a titan token shard (bad magic)", path);
    }
    const uint32_t version = rd_u32(h + 8), dtype = rd_u32(h + 12);
    if (version < 1 || version > DATA_SHARD_VERSION) {
        data_shard_close(s);
        return base_fail(err,
                         "%s: token shard version %u is not supported (this titan reads 1 to %u)",
                         path, version, DATA_SHARD_VERSION);
    }
    if (dtype != 1) {
        data_shard_close(s);
        return base_fail(err, "%s: token shard dtype %u is not supported (1 = uint32)", path,
                         dtype);
    }
    s->n_docs = rd_u64(h + 16);
    s->n_tokens = rd_u64(h + 24);
    s->vocab_size = (int32_t)rd_u32(h + 32);
    s->bos = (int32_t)rd_u32(h + 36);
    s->eos = (int32_t)rd_u32(h + 40);
    uint64_t hb = DATA_SHARD_HEADER_BYTES; /* header bytes: version 2 adds the tokenizer */
    if (version >= 2) {
        s->tok_path_len = rd_u32(h + 44);
        hb = 56 + ((uint64_t)s->tok_path_len + 7) / 8 * 8;
    }
    const char *bad = NULL;
    if (version == 1 && rd_u32(h + 44) != 0)
        bad = "reserved field is not 0";
    else if (s->tok_path_len > DATA_SHARD_MAX_PATH)
        bad = "tokenizer path longer than 4096 bytes";
    else if (hb > size)
        bad = "shorter than its tokenizer record";
    else if (version >= 2 && memchr(h + 56, 0, s->tok_path_len))
        bad = "tokenizer path holds a NUL byte";
    else if (s->vocab_size <= 0)
        bad = "vocab_size must be positive";
    else if (s->bos < -1 || s->bos >= s->vocab_size)
        bad = "bos_id out of range";
    else if (s->eos < -1 || s->eos >= s->vocab_size)
        bad = "eos_id out of range";
    if (bad) {
        data_shard_close(s);
        return base_fail(err, "%s: bad token shard header: %s", path, bad);
    }
    if (version >= 2) {
        s->tok_hash = rd_u64(h + 48);
        s->tok_path = (const char *)h + 56;
    }
    /* Exact size: header, tokens, padding to 8, offsets; every product checked. */
    const uint64_t lim = (uint64_t)1 << 60, nd = s->n_docs, nt = s->n_tokens;
    if (nt > lim / 4 || nd > lim / 8) {
        data_shard_close(s);
        return base_fail(err,
                         "%s: token shard header counts are out of range (n_docs %llu, "
                         "n_tokens %llu)",
                         path, (unsigned long long)nd, (unsigned long long)nt);
    }
    const uint64_t off_start = (hb + 4 * nt + 7) / 8 * 8;
    const uint64_t want = off_start + 8 * (nd + 1);
    if (want != size) {
        data_shard_close(s);
        return base_fail(err,
                         "%s: token shard %s: header says %llu documents and %llu tokens "
                         "(%llu bytes), the file has %zu bytes",
                         path, want > size ? "truncated" : "has trailing bytes",
                         (unsigned long long)nd, (unsigned long long)nt, (unsigned long long)want,
                         size);
    }
    s->tokens = h + hb;
    s->offsets = h + off_start;
    uint64_t prev = rd_u64(s->offsets);
    if (prev != 0) {
        data_shard_close(s);
        return base_fail(err, "%s: token shard doc_offsets[0] is %llu, not 0", path,
                         (unsigned long long)prev);
    }
    for (uint64_t i = 1; i <= nd; i++) {
        const uint64_t raw = rd_u64(s->offsets + 8 * i), o = raw & ~DATA_SHARD_SKIPPED;
        if ((raw & DATA_SHARD_SKIPPED) && (version < 3 || o != prev)) {
            data_shard_close(s);
            return base_fail(err,
                             "%s: token shard doc_offsets[%llu] marks document %llu skipped, %s",
                             path, (unsigned long long)i, (unsigned long long)(i - 1),
                             version < 3 ? "which only version 3 may" : "but it has ids");
        }
        if (o < prev || o > nt) {
            data_shard_close(s);
            return base_fail(err,
                             "%s: token shard doc_offsets[%llu] = %llu is out of order or past "
                             "n_tokens %llu",
                             path, (unsigned long long)i, (unsigned long long)o,
                             (unsigned long long)nt);
        }
        prev = o;
    }
    if (prev != nt) {
        data_shard_close(s);
        return base_fail(err, "%s: token shard doc_offsets[n_docs] = %llu, not n_tokens %llu", path,
                         (unsigned long long)prev, (unsigned long long)nt);
    }
    return 0;
}

/* ---- file lists ---- */

static int has_suffix(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && strcasecmp(s + n - m, suf) == 0;
}

/* A path with titan tokenize's shard name, shard-N.tok, widened to 20 digits (other paths as
 * they are): sorted as strings, such keys put shard-99999 before shard-100000, the order
 * tokenize wrote them in (plain names sorted shard-100000 between shard-10000 and
 * shard-10001: documents read out of order past 100,000 shards). NULL: out of memory. */
static char *sort_key(const char *path) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t digits = 0;
    if (!strncmp(base, "shard-", 6))
        while (base[6 + digits] >= '0' && base[6 + digits] <= '9') digits++;
    if (!digits || digits > 20 || strcmp(base + 6 + digits, ".tok")) return strdup(path);
    const size_t pre = (size_t)(base - path) + 6, len = pre + 20 + 4 + 1;
    char *k = malloc(len);
    if (k) {
        memcpy(k, path, pre);
        memset(k + pre, '0', 20 - digits);
        memcpy(k + pre + 20 - digits, base + 6, digits);
        memcpy(k + pre + 20, ".tok", 5);
    }
    return k;
}

typedef struct {
    char *key, *path;
} keyed_path;

static int cmp_keyed(const void *a, const void *b) {
    const keyed_path *x = a, *y = b;
    const int c = strcmp(x->key, y->key);
    return c ? c : strcmp(x->path, y->path); /* shard-1.tok beside shard-00001.tok */
}

/* Sorts v[n] by sort_key; -1 when out of memory (v unchanged). */
static int sort_paths(char **v, int n) {
    keyed_path *kv = calloc((size_t)(n ? n : 1), sizeof *kv);
    int ok = kv != NULL;
    for (int i = 0; ok && i < n; i++) ok = (kv[i] = (keyed_path){sort_key(v[i]), v[i]}).key != NULL;
    if (ok) {
        qsort(kv, (size_t)n, sizeof *kv, cmp_keyed);
        for (int i = 0; i < n; i++) v[i] = kv[i].path;
    }
    for (int i = 0; kv && i < n; i++) free(kv[i].key);
    free(kv);
    return ok ? 0 : -1;
}

/* Text and JSON Lines files are read as they are: a compressed or binary file would train on
 * its bytes as "text" (Hugging Face's C4 ships as .json.gz). Refused by its first bytes: a
 * known compressed or columnar format's magic, or, in a file guessed to be text (auto), a NUL
 * byte in the first 64 KiB (an explicit dataset_format = "text" takes such bytes as they are;
 * JSON Lines reports a NUL as invalid JSON at its line). */
static int check_plain_text(const char *path, const unsigned char *head, size_t got, int guessed,
                            base_err *err) {
    static const struct {
        const char *magic;
        size_t len;
        const char *what, *hint;
    } kinds[] = {
        {DATA_SHARD_MAGIC, 8, "titan token shard",
         "set training.dataset_format = \"tokens\" (or \"auto\")"},
        {"\x1f\x8b", 2, "gzip-compressed file", "decompress it (gunzip)"},
        {"\x28\xb5\x2f\xfd", 4, "zstd-compressed file", "decompress it (unzstd)"},
        {"\xfd"
         "7zXZ\0",
         6, "xz-compressed file", "decompress it (unxz)"},
        {"PK\x03\x04", 4, "zip archive", "extract it"},
        {"PAR1", 4, "Parquet file", "export its text column to JSON Lines"},
        {"ARROW1", 6, "Arrow file", "export its text column to JSON Lines"},
    };
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        if (got >= kinds[k].len && memcmp(head, kinds[k].magic, kinds[k].len) == 0)
            return base_fail(err,
                             "%s: a %s, not plain text: titan reads text, JSON Lines and token "
                             "shards as they are; %s",
                             path, kinds[k].what, kinds[k].hint);
    const unsigned char *nul = guessed ? memchr(head, 0, got) : NULL;
    if (nul)
        return base_fail(err,
                         "%s: binary data (a NUL byte at offset %zu), not text or JSON Lines: "
                         "titan reads text, JSON Lines (UTF-8) and token shards (titan "
                         "tokenize); if it is text, pass --format text (training.dataset_format "
                         "= \"text\") to read it as text",
                         path, (size_t)(nul - head));
    return 0;
}

/* Resolves the format of one file and records its size. */
static int file_init(data_file *f, const char *path, data_format format, base_err *err) {
    struct stat st;
    if (stat(path, &st) != 0) return base_fail(err, "%s: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode)) return base_fail(err, "%s: not a regular file", path);
    if (has_suffix(path, ".tok.tmp")) /* its data, unfinished, is no text either */
        return base_fail(err,
                         "%s: an unfinished shard of a titan tokenize that was stopped (killed?): "
                         "its folder holds part of the data; tokenize again into an empty folder",
                         path);
    f->path = strdup(path);
    if (!f->path) return base_fail(err, "out of memory");
    f->size = (int64_t)st.st_size;
    f->format = format;
    /* the first 64 KiB, read once: the shard magic (auto) and check_plain_text's look */
    unsigned char head[65536];
    size_t got = 0;
    if (format != DATA_FMT_TOKENS) {
        FILE *fp = fopen(path, "rb");
        if (!fp) return base_fail(err, "%s: cannot open: %s", path, strerror(errno));
        got = fread(head, 1, sizeof head, fp);
        fclose(fp);
    }
    if (format == DATA_FMT_AUTO) {
        if (got >= 8 && memcmp(head, DATA_SHARD_MAGIC, 8) == 0)
            f->format = DATA_FMT_TOKENS;
        else if (has_suffix(path, ".jsonl") || has_suffix(path, ".json") ||
                 has_suffix(path, ".ndjson"))
            f->format = DATA_FMT_JSONL;
        else
            f->format = DATA_FMT_TEXT;
    }
    if (f->format == DATA_FMT_TOKENS) { /* validate the header and offsets now */
        data_shard s;
        if (data_shard_open(&s, path, err)) return -1;
        if (s.tok_path && !(f->tok_path = strndup(s.tok_path, s.tok_path_len))) {
            data_shard_close(&s);
            return base_fail(err, "out of memory");
        }
        f->tok_hash = s.tok_hash;
        data_shard_close(&s);
    } else if (f->format == DATA_FMT_TEXT) {
        f->text_cr = memchr(head, '\r', got) != NULL;
    }
    if (f->format != DATA_FMT_TOKENS &&
        check_plain_text(path, head, got, format == DATA_FMT_AUTO && f->format == DATA_FMT_TEXT,
                         err)) {
        return -1;
    }
    return 0;
}

/* Refuses a folder titan tokenize has not finished (its DATA_TOKENIZE_MARK is there). */
static int unfinished_tokenize(const char *dir, base_err *err) {
    char p[4300];
    if (snprintf(p, sizeof p, "%.4200s/%s", dir, DATA_TOKENIZE_MARK) >= (int)sizeof p ||
        access(p, F_OK) != 0)
        return 0;
    return base_fail(err,
                     "%s: a titan tokenize is writing this folder, or one stopped midway (%s is "
                     "there): its shards are part of the data; tokenize again into an empty "
                     "folder",
                     dir, DATA_TOKENIZE_MARK);
}

static int list_once(const char *path, char ***out, int *n, base_err *err) {
    *out = NULL;
    *n = 0;
    struct stat st;
    /* a path that exists is the file or folder it names, even with * ? [ in its name (a
     * glob of "data[1].jsonl" reads data1.jsonl); only one that does not is a pattern */
    if (strpbrk(path, "*?[") && stat(path, &st) != 0) {
        glob_t g;
        int rc = glob(path, GLOB_ERR, NULL, &g);
        if (rc == GLOB_NOMATCH) return base_fail(err, "%s: no files match", path);
        if (rc != 0) return base_fail(err, "%s: glob failed", path);
        char **v = calloc(g.gl_pathc ? g.gl_pathc : 1, sizeof *v);
        int k = 0;
        for (size_t i = 0; v && i < g.gl_pathc; i++) {
            if (stat(g.gl_pathv[i], &st) != 0 || !S_ISREG(st.st_mode)) continue;
            char dir[4200]; /* each match's folder: one tokenize has not finished? */
            const char *sl = strrchr(g.gl_pathv[i], '/');
            snprintf(dir, sizeof dir, "%.*s", sl ? (int)(sl - g.gl_pathv[i]) : 1,
                     sl ? g.gl_pathv[i] : ".");
            if (unfinished_tokenize(dir[0] ? dir : "/", err)) {
                globfree(&g);
                for (int j = 0; j < k; j++) free(v[j]);
                free(v);
                return -1;
            }
            if (!(v[k] = strdup(g.gl_pathv[i]))) break;
            k++;
        }
        globfree(&g);
        *out = v;
        *n = k;
        if (!v || sort_paths(v, k)) return base_fail(err, "out of memory");
        return k ? 0 : base_fail(err, "%s: no regular files match", path);
    }
    if (stat(path, &st) != 0) return base_fail(err, "%s: %s", path, strerror(errno));
    if (S_ISREG(st.st_mode)) {
        *out = calloc(1, sizeof **out);
        if (!*out || !((*out)[0] = strdup(path))) return base_fail(err, "out of memory");
        *n = 1;
        return 0;
    }
    if (!S_ISDIR(st.st_mode)) return base_fail(err, "%s: not a file or directory", path);
    if (unfinished_tokenize(path, err)) return -1;
    DIR *d = opendir(path);
    if (!d) return base_fail(err, "%s: cannot open directory: %s", path, strerror(errno));
    int cap = 16, k = 0;
    char **v = malloc(sizeof *v * (size_t)cap);
    struct dirent *e;
    while (v && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        size_t len = strlen(path) + strlen(e->d_name) + 2;
        char *full = malloc(len);
        if (!full) break;
        snprintf(full, len, "%s/%s", path, e->d_name);
        if (stat(full, &st) != 0 || !S_ISREG(st.st_mode)) {
            free(full);
            continue;
        }
        if (k == cap) {
            char **nv = realloc(v, sizeof *v * (size_t)(cap *= 2));
            if (!nv) {
                free(full);
                break;
            }
            v = nv;
        }
        v[k++] = full;
    }
    closedir(d);
    *out = v;
    *n = k;
    if (!v) return base_fail(err, "out of memory");
    if (sort_paths(v, k)) return base_fail(err, "out of memory");
    return k ? 0 : base_fail(err, "%s: directory has no data files", path);
}

static void free_paths(char **v, int n) {
    for (int i = 0; i < n; i++) free(v[i]);
    free(v);
}

/* The data's files, sorted: listed twice, the unfinished-tokenize mark checked before each,
 * until two listings agree. A titan tokenize makes its mark before its first shard and removes
 * it after its last, so a listing taken while one ran (a part of its shards) differs from the
 * next or meets the mark (a run that started beside a tokenize had trained on the shards it
 * had written so far). */
static int list_paths(const char *path, char ***out, int *n, base_err *err) {
    *out = NULL;
    *n = 0;
    for (int tries = 0; tries < 5; tries++) {
        char **a, **b;
        int na, nb, same;
        if (list_once(path, &a, &na, err)) {
            free_paths(a, na); /* what a failed listing left (it may have made the list) */
            return -1;
        }
        if (list_once(path, &b, &nb, err)) {
            free_paths(a, na);
            free_paths(b, nb);
            return -1;
        }
        same = na == nb;
        for (int i = 0; same && i < na; i++) same = !strcmp(a[i], b[i]);
        free_paths(b, nb);
        if (same) {
            *out = a;
            *n = na;
            return 0;
        }
        free_paths(a, na);
    }
    return base_fail(err,
                     "%s: its files changed each time titan listed them (a titan tokenize, or "
                     "another writer, at work there?): start when it has finished",
                     path);
}

/* ---- the reader ---- */

/* Bytes of the line end at s[i] (of n): 2 for "\r\n", 1 for a lone "\r" or "\n", 0 when s[i]
 * ends no line. */
static size_t eol_len(const char *s, size_t n, size_t i) {
    if (s[i] == '\n') return 1;
    if (s[i] != '\r') return 0;
    return i + 1 < n && s[i + 1] == '\n' ? 2 : 1;
}

/* The paragraph starting at s[off] (of n) ends at the returned offset: the first of two line
 * ends in a row; *next is the byte after them. At the end of the file without one: n, and
 * *sep = 0 (else 1). Line ends are read left to right from a paragraph start, as Python's
 * newline translation reads them: "\r\n" is one line end, "\r\r" and "\n\r" are two. */
static size_t para_end(const char *s, size_t n, size_t off, size_t *next, int *sep) {
    for (size_t i = off; i < n;) {
        const size_t a = eol_len(s, n, i);
        if (!a) {
            i++;
            continue;
        }
        const size_t b = i + a < n ? eol_len(s, n, i + a) : 0;
        if (b) {
            *next = i + a + b;
            *sep = 1;
            return i;
        }
        i += a;
    }
    *next = n;
    *sep = 0;
    return n;
}

/* p[0..len) with "\r\n" and lone "\r" rewritten to "\n" into r->norm; NULL when out of
 * memory. */
static const char *normalize_eol(data_reader *r, const char *p, size_t len, size_t *out_len) {
    if (len > r->norm_cap) {
        char *nb = realloc(r->norm, len);
        if (!nb) return NULL;
        r->norm = nb;
        r->norm_cap = len;
    }
    size_t k = 0;
    for (size_t i = 0; i < len; i++) {
        if (p[i] == '\r' && i + 1 < len && p[i + 1] == '\n') continue; /* its "\n" follows */
        r->norm[k++] = p[i] == '\r' ? '\n' : p[i];
    }
    *out_len = k;
    return r->norm;
}

int data_reader_open(data_reader *r, const char *path, data_format format, const char *field,
                     int skip_bad, base_err *err) {
    memset(r, 0, sizeof *r);
    r->fp_file = r->shard_file = r->text_file = -1;
    if (!path || !*path) return base_fail(err, "no dataset path given");
    r->chat = format == DATA_FMT_CHAT;
    if (r->chat) format = DATA_FMT_JSONL; /* every file, whatever its name */
    r->field = strdup(field && *field ? field : r->chat ? "messages" : "text");
    r->skip_bad = skip_bad;
    char **paths;
    int n;
    int rc = list_paths(path, &paths, &n, err);
    if (rc == 0 && !(r->files = calloc((size_t)n, sizeof *r->files))) rc = base_fail(err, "oom");
    for (int i = 0; rc == 0 && i < n; i++) {
        rc = file_init(&r->files[i], paths[i], format, err);
        r->n_files = i + 1;
    }
    for (int i = 0; paths && i < n; i++) free(paths[i]);
    free(paths);
    if (rc == 0 && !r->field) rc = base_fail(err, "out of memory");
    if (rc) data_reader_close(r);
    return rc;
}

static void release_doc(data_reader *r) {
    if (r->json) json_decref((json_t *)r->json);
    r->json = NULL;
}

static void close_file(data_reader *r) {
    if (r->fp) fclose(r->fp);
    r->fp = NULL;
    r->fp_file = -1;
    data_shard_close(&r->shard);
    r->shard_file = -1;
    if (r->tmap) munmap(r->tmap, r->tsize);
    r->tmap = NULL;
    r->tsize = 0;
    r->text_file = -1;
}

void data_reader_close(data_reader *r) {
    release_doc(r);
    close_file(r);
    for (int i = 0; i < r->n_files; i++) free(r->files[i].path), free(r->files[i].tok_path);
    free(r->files);
    free(r->field);
    free(r->line);
    free(r->norm);
    memset(r, 0, sizeof *r);
    r->fp_file = r->shard_file = r->text_file = -1;
}

static void next_file(data_reader *r) {
    close_file(r);
    r->next.file++;
    r->next.file_doc = 0;
    r->next.byte_off = 0;
    r->next.line = 0;
}

/* A bad JSONL line: an error, or a counted and logged skip. Returns 0 to skip, -1 to fail. */
static int bad_line(data_reader *r, const data_file *f, int64_t line, base_err *err,
                    const char *fmt, const char *detail) {
    char msg[512];
    snprintf(msg, sizeof msg, fmt, r->field, detail ? detail : "");
    if (!r->skip_bad)
        return base_fail(err, "%s:%lld: %s (set skip_bad_lines to skip such lines)", f->path,
                         (long long)line, msg);
    if (r->bad_counted) return 0;
    r->bad_lines++;
    if (r->bad_lines <= BAD_LINES_LOGGED)
        base_log(BASE_LOG_WARN, "%s:%lld: %s; skipped%s", f->path, (long long)line, msg,
                 r->bad_lines == BAD_LINES_LOGGED ? " (further bad lines are only counted)" : "");
    return 0;
}

/* Whether a JSONL line holds nothing but JSON's whitespace (space, tab, LF, CR): no document.
 * A line of \v or \f (C's isspace) is no JSON value: invalid, not blank. */
static int blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\n' && s[i] != '\r') return 0;
    return 1;
}

/* A skipped bad line's slot, returned where the reader's bad_slots asks for it. */
static int skipped_slot(data_doc *d, const data_pos *pos) {
    d->pos = *pos;
    d->skipped = 1;
    return 1;
}

int data_reader_next(data_reader *r, int (*want)(int64_t doc, void *arg), void *arg, data_doc *d,
                     base_err *err) {
    release_doc(r);
    memset(d, 0, sizeof *d);
    for (;;) {
        if (r->next.file >= r->n_files) return 0;
        const data_file *f = &r->files[r->next.file];
        if (f->format == DATA_FMT_TEXT) {
            if (r->text_file != r->next.file) {
                close_file(r);
                uint64_t id[2];
                if (map_file(f->path, &r->tmap, &r->tsize, id, err)) return -1;
                r->text_file = r->next.file;
                r->files[r->next.file].dev = id[0];
                r->files[r->next.file].ino = id[1];
                note_content(r, &r->files[r->next.file], data_content_hash(r->tmap, r->tsize),
                             (int64_t)r->tsize);
            }
            const char *s = (const char *)r->tmap;
            const size_t off = (size_t)r->next.byte_off;
            if (off >= r->tsize) {
                next_file(r);
                continue;
            }
            size_t next;
            int sep;
            const size_t end = para_end(s, r->tsize, off, &next, &sep);
            d->pos = r->next;
            r->next.byte_off = (int64_t)next;
            if (end == off) continue; /* an empty paragraph is not a document */
            r->next.doc++;
            r->next.file_doc++;
            if (want && !want(d->pos.doc, arg)) continue;
            d->text = s + off;
            d->len = end - off;
            if (memchr(d->text, '\r', d->len) &&
                !(d->text = normalize_eol(r, s + off, end - off, &d->len)))
                return base_fail(err, "%s: out of memory (a paragraph of %zu bytes)", f->path,
                                 end - off);
            d->sep = sep ? TEXT_SEP_LEN : 0;
            return 1;
        }
        if (f->format == DATA_FMT_TOKENS) {
            if (r->shard_file != r->next.file) {
                close_file(r);
                if (data_shard_open(&r->shard, f->path, err)) return -1;
                r->shard_file = r->next.file;
                note_content(r, &r->files[r->next.file],
                             data_content_hash(r->shard.map, r->shard.size),
                             (int64_t)r->shard.size);
            }
            if ((uint64_t)r->next.file_doc >= r->shard.n_docs) {
                next_file(r);
                continue;
            }
            d->pos = r->next;
            r->next.doc++;
            r->next.file_doc++;
            /* a skipped malformed line: its number taken, as in its JSONL file (tokenize logged
             * and counted it) */
            if (data_shard_skipped(&r->shard, (uint64_t)d->pos.file_doc)) continue;
            if (want && !want(d->pos.doc, arg)) continue;
            d->shard = &r->shard;
            d->first = data_shard_offset(&r->shard, (uint64_t)d->pos.file_doc);
            d->n_ids = data_shard_offset(&r->shard, (uint64_t)d->pos.file_doc + 1) - d->first;
            return 1;
        }
        /* JSON Lines */
        if (r->fp_file != r->next.file) {
            close_file(r);
            r->fp = fopen(f->path, "rb");
            if (!r->fp) return base_fail(err, "%s: cannot open: %s", f->path, strerror(errno));
            struct stat st; /* the hash covers exactly the size recorded with it */
            const int64_t size = fstat(fileno(r->fp), &st) == 0 ? (int64_t)st.st_size : -1;
            r->files[r->next.file].dev = size < 0 ? 0 : (uint64_t)st.st_dev;
            r->files[r->next.file].ino = size < 0 ? 0 : (uint64_t)st.st_ino;
            note_content(r, &r->files[r->next.file], data_content_hash_fd(fileno(r->fp), size),
                         size < 0 ? 0 : size);
            if (fseeko(r->fp, (off_t)r->next.byte_off, SEEK_SET) != 0)
                return base_fail(err, "%s: cannot seek to byte %lld", f->path,
                                 (long long)r->next.byte_off);
            r->fp_file = r->next.file;
        }
        errno = 0;
        ssize_t got = getline(&r->line, &r->line_cap, r->fp);
        if (got < 0) {
            /* not the end of the file: a read error, or (glibc sets no error flag for it) no
             * memory for a long line, which must not pass for the end of the data */
            if (ferror(r->fp) || !feof(r->fp))
                return base_fail(err, "%s:%lld: cannot read the line: %s", f->path,
                                 (long long)r->next.line + 1, strerror(errno ? errno : EIO));
            next_file(r);
            continue;
        }
        const int64_t line_no = r->next.line + 1;
        const data_pos pos = r->next; /* pos.line: lines before this one */
        r->next.byte_off += got;
        r->next.line = line_no;
        size_t len = (size_t)got;
        if (len > JSONL_LINE_MAX)
            return base_fail(err, "%s:%lld: line of %zu bytes is longer than the %zu limit",
                             f->path, (long long)line_no, len, JSONL_LINE_MAX);
        /* A UTF-8 byte-order mark opening the file (Windows editors write one) is not part of
         * any JSON value: skipped, as Python's "utf-8-sig" reads it. Positions stay file
         * offsets (the next line's counts its 3 bytes; a resume at byte 0 skips it again). */
        const char *ln = r->line;
        if (pos.line == 0 && len >= 3 && memcmp(ln, "\xEF\xBB\xBF", 3) == 0) ln += 3, len -= 3;
        if (blank(ln, len)) continue; /* blank lines are not documents */
        r->next.doc++;
        r->next.file_doc++;
        if (want && !want(pos.doc, arg)) continue;
        json_error_t je;
        json_t *j =
            json_loadb(ln, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL | JSON_DECODE_ANY, &je);
        if (!j) {
            char detail[256];
            snprintf(detail, sizeof detail, "column %d: %s", je.column, je.text);
            if (bad_line(r, f, line_no, err, "invalid JSON (%.0s%s)", detail)) return -1;
            if (r->bad_slots) return skipped_slot(d, &pos);
            continue;
        }
        json_t *v = json_is_object(j) ? json_object_get(j, r->field) : NULL;
        const char *why = !json_is_object(j)               ? "the line is not a JSON object%.0s%s"
                          : !v                             ? "no \"%s\" field%s"
                          : !r->chat && !json_is_string(v) ? "field \"%s\" is not a string%s"
                          : r->chat && !json_is_array(v)
                              ? "field \"%s\" is not a JSON array of chat messages%s"
                              : NULL;
        if (why) {
            json_decref(j);
            if (bad_line(r, f, line_no, err, why, NULL)) return -1;
            if (r->bad_slots) return skipped_slot(d, &pos);
            continue;
        }
        r->json = j;
        d->pos = pos;
        if (r->chat) { /* the loader reads the messages where they are */
            d->chat = v;
            d->text = "";
            d->len = 0;
            return 1;
        }
        d->text = json_string_value(v);
        d->len = json_string_length(v);
        return 1;
    }
}

/* Bytes of the line end ("\r\n", "\n" or "\r") that ends just before c[e]; 0 if none. */
static int64_t eol_before(const char *c, int64_t e) {
    if (e >= 2 && c[e - 2] == '\r' && c[e - 1] == '\n') return 2;
    return e >= 1 && (c[e - 1] == '\n' || c[e - 1] == '\r');
}

int data_reader_seek(data_reader *r, const data_pos *p, base_err *err) {
    release_doc(r);
    close_file(r);
    if (p->file < 0 || p->file > r->n_files || p->doc < 0 || p->file_doc < 0 || p->byte_off < 0 ||
        p->line < 0)
        return base_fail(err, "data position out of range (file %d of %d)", p->file, r->n_files);
    /* past the last file (the reader's own state once a pass has ended): no place inside a file,
     * as the reader leaves it (data_reader_next zeroes them when it moves to the next file) */
    if (p->file == r->n_files && (p->file_doc || p->byte_off || p->line))
        return base_fail(err,
                         "data position past the last file (file %d of %d) with a place inside a "
                         "file (document %lld, byte %lld, line %lld)",
                         p->file, r->n_files, (long long)p->file_doc, (long long)p->byte_off,
                         (long long)p->line);
    if (p->file < r->n_files) {
        const data_file *f = &r->files[p->file];
        /* the reader counts both together from (0, 0), file_doc from 0 again at each file: a
         * global index below the in-file one, or other than it in the first file, is no
         * position the reader was at (it would deal other documents to each dp rank) */
        if (p->doc < p->file_doc || (p->file == 0 && p->doc != p->file_doc))
            return base_fail(err,
                             "%s: data position document %lld cannot be its document %lld "
                             "(file %d of the dataset)",
                             f->path, (long long)p->doc, (long long)p->file_doc, p->file);
        if (f->format == DATA_FMT_TEXT) {
            if (p->byte_off > f->size)
                return base_fail(err, "%s: data position byte %lld is past the end (%lld bytes)",
                                 f->path, (long long)p->byte_off, (long long)f->size);
            /* must follow a blank line (two line ends: "\n\n", "\r\n\r\n", "\r\r", ...) and not
             * split a "\r\n", or be the file's end (the last paragraph ended a window: the
             * loader's own state; most files end in one newline) */
            if (p->byte_off > 0 && p->byte_off < f->size) {
                char c[5] = {0}; /* the 4 bytes before the position (fewer at the start) and its
                                    own: c[k] is the byte at the position */
                const int64_t k = p->byte_off < 4 ? p->byte_off : 4;
                int fd = open(f->path, O_RDONLY | O_CLOEXEC);
                ssize_t got = fd >= 0 ? pread(fd, c, (size_t)k + 1, (off_t)(p->byte_off - k)) : -1;
                if (fd >= 0) close(fd);
                const int64_t e = eol_before(c, k); /* the blank line's own line end */
                const int ok = got == k + 1 && e > 0 && !(c[k - 1] == '\r' && c[k] == '\n') &&
                               eol_before(c, k - e) > 0;
                if (!ok)
                    return base_fail(err,
                                     "%s: data position byte %lld is not the start of a paragraph",
                                     f->path, (long long)p->byte_off);
            }
        }
        if (f->format == DATA_FMT_TOKENS) {
            data_shard s;
            if (data_shard_open(&s, f->path, err)) return -1;
            uint64_t nd = s.n_docs;
            data_shard_close(&s);
            if ((uint64_t)p->file_doc > nd)
                return base_fail(err, "%s: data position names document %lld of %llu", f->path,
                                 (long long)p->file_doc, (unsigned long long)nd);
        }
        if (f->format == DATA_FMT_JSONL) {
            if (p->byte_off > f->size)
                return base_fail(err, "%s: data position byte %lld is past the end (%lld bytes)",
                                 f->path, (long long)p->byte_off, (long long)f->size);
            /* a line start, or the end (a last line without its newline ended a window) */
            if (p->byte_off > 0 && p->byte_off < f->size) {
                char c = 0;
                int fd = open(f->path, O_RDONLY | O_CLOEXEC);
                ssize_t got = fd >= 0 ? pread(fd, &c, 1, (off_t)p->byte_off - 1) : -1;
                if (fd >= 0) close(fd);
                if (got != 1 || c != '\n')
                    return base_fail(err, "%s: data position byte %lld is not a line start",
                                     f->path, (long long)p->byte_off);
            }
        }
    }
    r->next = *p;
    return 0;
}

void data_reader_jump(data_reader *r, const data_pos *p) {
    release_doc(r);
    /* the open JSON Lines file read on from p (another file is opened at p's byte by the read) */
    if (r->fp && r->fp_file == p->file && fseeko(r->fp, (off_t)p->byte_off, SEEK_SET) != 0)
        close_file(r); /* the read reopens it and says why it cannot seek */
    r->next = *p;
}

void data_reader_rewind(data_reader *r) {
    release_doc(r);
    close_file(r);
    memset(&r->next, 0, sizeof r->next);
}

uint64_t data_file_hash(uint64_t h, const data_file *f, int whole) {
    const char *slash = strrchr(f->path, '/'), *base = slash ? slash + 1 : f->path;
    h = base_hash_bytes(h, base, strlen(base) + 1); /* the folder may move */
    if (whole) h = base_hash_bytes(h, &f->size, sizeof f->size);
    h = base_hash_bytes(h, &f->format, sizeof f->format);
    if (f->format == DATA_FMT_TEXT) /* paragraphs: a whole-file state no longer fits */
        h = base_hash_bytes(h, "\n\n", 2);
    /* "\r" line ends: a state saved before titan read them no longer fits (a grown file's own
     * flag may change with its new bytes, and a state that records growth is of a titan that
     * reads them) */
    if (whole && f->text_cr) h = base_hash_bytes(h, "\r", 1);
    return h;
}

uint64_t data_reader_files_hash(const data_reader *r, int n) {
    uint64_t h = BASE_HASH_INIT;
    for (int i = 0; i < n && i < r->n_files; i++) h = data_file_hash(h, &r->files[i], 1);
    return h;
}

uint64_t data_reader_fingerprint(const data_reader *r) {
    const uint64_t h =
        base_hash_bytes(data_reader_files_hash(r, r->n_files), r->field, strlen(r->field) + 1);
    return r->chat ? base_hash_bytes(h, "chat", 4) : h; /* other documents than the same JSONL's */
}

/* Whether the paragraph at s[off] reads the same in the file's first old_n bytes as in all n:
 * where it ends, whether a blank line ends it and (next) where the one after it starts. */
static int para_same(const char *s, size_t old_n, size_t n, size_t off, int next) {
    size_t n1, n2;
    int s1, s2;
    const size_t e1 = para_end(s, old_n, off, &n1, &s1), e2 = para_end(s, n, off, &n2, &s2);
    return e1 == e2 && s1 == s2 && (!next || n1 == n2);
}

int data_reader_check_grown(const data_reader *r, data_pos *p, int64_t old_size, int in_doc,
                            base_err *err) {
    const data_file *f = &r->files[p->file];
    /* a negative offset is data_reader_seek's to refuse */
    if (f->format == DATA_FMT_TOKENS || f->size == old_size || p->byte_off < 0) return 0;
    /* past the bytes checked: a JSON Lines file appended to while the run read it (its lines
     * read as they were; nothing to compare them with); a text file's mapping has no more */
    if (p->byte_off > old_size) {
        if (f->format == DATA_FMT_JSONL) return 0;
        return base_fail(err, "%s: data position byte %lld is past the %lld bytes it was read with",
                         f->path, (long long)p->byte_off, (long long)old_size);
    }
    unsigned char *map;
    size_t n;
    if (map_file(f->path, &map, &n, NULL, err)) return -1;
    const char *s = (const char *)map;
    const size_t S = (size_t)old_size, off = (size_t)p->byte_off;
    const char *what = NULL;
    if (n < S) { /* since it was listed */
        what = "it is shorter now than when the run read it";
    } else if (n == S) {
        /* no new bytes (cut back since it was listed): the position reads as it was */
    } else if (f->format == DATA_FMT_TEXT) {
        /* Paragraphs are read left to right and a line end may take the byte after it ("\r\n"),
         * so the last paragraph of the old bytes may run on into the new ones (no blank line
         * ended it), or end elsewhere. Before off every paragraph ends within the old bytes
         * (the one before ends at a blank line, off is where the next starts): read alike.
         * At the old end, the paragraphs from the last byte that is no line end (inside the
         * last paragraph with text, whose start it does not need) must read alike, ending
         * where they ended; at a partly consumed one, that one. */
        if (off == S) {
            size_t q = S;
            while (q > 0 && (s[q - 1] == '\n' || s[q - 1] == '\r')) q--;
            q = q ? q - 1 : 0;
            while (!what && q < S) {
                size_t next;
                int sep;
                para_end(s, S, q, &next, &sep);
                if (!para_same(s, S, n, q, 1))
                    what = "its last paragraph then (the file's end) runs on into the new text, or "
                           "ends elsewhere now";
                q = next > q ? next : S;
            }
        } else if (in_doc && !para_same(s, S, n, off, 0)) {
            what = "the paragraph at the saved position, partly trained on, ran to the file's end "
                   "then and runs on into the new text now";
        }
    } else {                                            /* JSON Lines: a line ends at "\n" */
        const int open_end = S > 0 && s[S - 1] != '\n'; /* the old last line had no newline */
        if (off == S && open_end) {
            if (s[S] != '\n')
                what =
                    "its last line then (the file's end, without a newline) runs on into the new "
                    "bytes";
            else
                p->byte_off++; /* the newline that ends it now: the next line starts after it */
        } else if (in_doc && off < S && !memchr(s + off, '\n', S - off) && s[S] != '\n') {
            what = "the line at the saved position, partly trained on, ran to the file's end then "
                   "(no newline) and runs on into the new bytes now";
        }
    }
    if (map) munmap(map, n);
    if (what)
        return base_fail(err,
                         "%s: grew since the checkpoint (%lld bytes then, %lld now), but %s: the "
                         "documents the run had read from it are not the ones it holds now; "
                         "restore it, or leave the position out (checkpoint.exclude_from_loading "
                         "= [\"dataloader\"])",
                         f->path, (long long)old_size, (long long)n, what);
    return 0;
}

/* Stops the reader at document limit - 1 (arg: the limit; <= 0 never): the others are
 * only counted. */
static int at_limit(int64_t doc, void *arg) {
    const int64_t limit = *(const int64_t *)arg;
    return limit > 0 && doc + 1 >= limit;
}

int data_count_docs(const char *path, data_format format, const char *field, int64_t limit,
                    int64_t *n, base_err *err) {
    data_reader r;
    *n = 0;
    if (data_reader_open(&r, path, format, field, 1, err)) return -1;
    data_doc d;
    const int rc = data_reader_next(&r, at_limit, &limit, &d, err);
    *n = r.next.doc;
    data_reader_close(&r);
    return rc < 0 ? -1 : 0;
}
