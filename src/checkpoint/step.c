/* checkpoint: training checkpoints, FOLDER/step-N/ (see the training-checkpoint section of
 * checkpoint.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint/internal.h"

#define STEP_META "metadata.json"
/* 4: metadata.json records its own CRC-32C ("crc32c", meta_crc); 3: each shard's identity
 * ("shard_headers", shard_id); 2: strided pieces (2-D tensors with "<name>.stride"); 1: 1-D
 * pieces only */
#define CKPT_STEP_VERSION 4

/* The CRC-32C of metadata.json's contents but its "crc32c" member: of their compact dump with
 * sorted keys, which a parse and a dump reproduce whatever the file's spacing (jansson writes a
 * real with 17 significant digits, which reads back as the same double). So an in-range change
 * of the trainer state (a flipped digit of adam_step or the data position: it would load and
 * train silently otherwise) is refused, while the tensors' own bytes carry their own CRCs.
 * Returns -1 when out of memory. */
static int meta_crc(const json_t *root, uint32_t *crc) {
    json_t *c = json_copy((json_t *)root); /* shallow: the members are shared, not changed */
    if (!c) return -1;
    json_object_del(c, "crc32c");
    char *text = json_dumps(c, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(c);
    if (!text) return -1;
    *crc = base_crc32c(0, text, strlen(text));
    free(text);
    return 0;
}

static void step_dir(char *buf, size_t n, const char *folder, int64_t step, const char *suffix) {
    snprintf(buf, n, "%s/step-%lld%s", folder, (long long)step, suffix);
}

static void shard_name(char *buf, size_t n, int rank) {
    snprintf(buf, n, "rank-%05d.safetensors", rank);
}

/* A shard file's identity: its size and the CRC-32C of its header (the 8-byte length and the
 * JSON, which lists every tensor's offsets and records each one's CRC-32C of its bytes). A
 * shard of another step or run put into a step-N folder (a partial copy or restore) differs,
 * where each tensor's own checksum would still match. */
typedef struct {
    uint64_t bytes;
    uint32_t header_crc;
} shard_id;

static shard_id shard_id_of(const ckpt_file *f) {
    uint64_t hl = 0; /* ckpt_open checked that 8 + hl bytes lie in the file */
    for (int i = 7; i >= 0; i--) hl = hl << 8 | f->map[i];
    return (shard_id){f->size, base_crc32c(0, f->map, 8 + (size_t)hl)};
}

static int fsync_path(const char *path, base_err *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return base_fail(err, "%s: cannot open to sync: %s", path, strerror(errno));
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    return rc == 0 ? 0 : base_fail(err, "%s: fsync failed: %s", path, strerror(e));
}

int ckpt_step_begin(const char *folder, int64_t step, int rank, base_err *err) {
    char tmp[4096];
    step_dir(tmp, sizeof tmp, folder, step, ".tmp");
    if (rank == 0) {
        /* step-N.tmp: left by a crashed save */
        if (base_mkdir_p(folder, err) || base_remove_tree(tmp, err)) return -1;
        if (mkdir(tmp, 0755) != 0)
            return base_fail(err, "%s: cannot create checkpoint folder: %s", tmp, strerror(errno));
    }
    return 0;
}

/* A piece of a flat buffer of gn elements: rows x row_len elements, row i at
 * off + i * stride. */
typedef struct {
    size_t off, row_len, rows, stride, gn;
    ckpt_dtype dtype; /* a shard tensor's: F32, or BF16 / F16 (expanded when copied) */
} piece;

/* Why p is not a piece of its buffer, or NULL. */
static const char *piece_bad(const piece *p, char *buf, size_t cap) {
    if (p->rows > 1 && p->stride < p->row_len)
        snprintf(buf, cap, "row stride %zu is smaller than the row length %zu", p->stride,
                 p->row_len);
    else if (p->row_len > p->gn || p->off > p->gn - p->row_len ||
             (p->rows > 1 && p->rows - 1 > (p->gn - p->row_len - p->off) / p->stride))
        snprintf(buf, cap, "%zu row%s of %zu at %zu, stride %zu, exceed the buffer's %zu elements",
                 p->rows, p->rows == 1 ? "" : "s", p->row_len, p->off, p->stride, p->gn);
    else
        return NULL;
    return buf;
}

/* The piece a caller's buffer describes (rows 0 or 1: one contiguous row). */
static int buf_piece(const ckpt_step_buf *b, piece *p, const char *where, base_err *err) {
    const size_t rows = b->rows > 1 ? b->rows : 1;
    if (b->numel % rows)
        return base_fail(err, "%s: buffer %s: %zu elements are not %zu whole rows", where, b->name,
                         b->numel, rows);
    *p = (piece){b->offset,       b->numel / rows, rows, rows > 1 ? b->stride : b->numel / rows,
                 b->global_numel, b->dtype};
    char why[200];
    if (p->row_len && piece_bad(p, why, sizeof why))
        return base_fail(err, "%s: buffer %s: %s", where, b->name, why);
    return 0;
}

int ckpt_step_write_shard(const char *folder, int64_t step, int rank, const ckpt_step_buf *bufs,
                          int n, base_err *err) {
    char tmp[4096], name[64], path[4200];
    step_dir(tmp, sizeof tmp, folder, step, ".tmp");
    shard_name(name, sizeof name, rank);
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    ckpt_wtensor *t = calloc((size_t)n + 1, sizeof *t);
    ckpt_kv *kv = calloc(3 * (size_t)n + 1, sizeof *kv);
    char(*vals)[64] = calloc(3 * (size_t)n + 1, 64);
    char(*keys)[160] = calloc(3 * (size_t)n + 1, 160);
    int rc = -1, nkv = 0;
    if (!t || !kv || !vals || !keys) {
        base_fail(err, "out of memory");
        goto done;
    }
    for (int i = 0; i < n; i++) {
        piece p;
        if (buf_piece(&bufs[i], &p, path, err)) goto done;
        /* strided: [rows, row_len] and its stride; contiguous: 1-D as in version 1 */
        /* bf16 memory: its bits as they are; fp32: converted to dtype as written */
        const ckpt_dtype dt = bufs[i].bf16 ? CKPT_BF16 : bufs[i].dtype;
        t[i] = p.rows > 1
                   ? (ckpt_wtensor){bufs[i].name,
                                    dt,
                                    2,
                                    {(int64_t)p.rows, (int64_t)p.row_len},
                                    bufs[i].data,
                                    !bufs[i].bf16,
                                    1}
                   : (ckpt_wtensor){bufs[i].name,  dt, 1, {(int64_t)bufs[i].numel}, bufs[i].data,
                                    !bufs[i].bf16, 1};
        const char *what[3] = {"offset", "global_numel", "stride"};
        const size_t val[3] = {p.off, p.gn, p.stride};
        for (int k = 0; k < (p.rows > 1 ? 3 : 2); k++, nkv++) {
            snprintf(keys[nkv], 160, "%s.%s", bufs[i].name, what[k]);
            snprintf(vals[nkv], 64, "%zu", val[k]);
            kv[nkv] = (ckpt_kv){keys[nkv], vals[nkv]};
        }
    }
    rc = ckpt_write(path, t, n, kv, nkv, err);
done:
    free(t);
    free(kv);
    free(vals);
    free(keys);
    return rc;
}

int ckpt_step_commit(const char *folder, int64_t step, int world, const char *train_json,
                     int keep_latest_k, base_err *err) {
    char tmp[4096], path[4200];
    step_dir(tmp, sizeof tmp, folder, step, ".tmp");
    json_error_t je;
    json_t *train = json_loads(train_json ? train_json : "{}", 0, &je);
    if (!train || !json_is_object(train)) {
        if (train) json_decref(train);
        return base_fail(err, "checkpoint step %lld: train state is not a JSON object",
                         (long long)step);
    }
    json_t *root = json_object(), *files = json_array(), *ids = json_object();
    json_object_set_new(root, "format", json_string("titan-checkpoint"));
    json_object_set_new(root, "version", json_integer(CKPT_STEP_VERSION));
    json_object_set_new(root, "step", json_integer(step));
    json_object_set_new(root, "world_size", json_integer(world));
    json_object_set_new(root, "shards", files); /* root owns them: filled below */
    json_object_set_new(root, "shard_headers", ids);
    json_object_set_new(root, "train", train);
    for (int r = 0; r < world; r++) {
        char name[64], crc[16];
        shard_name(name, sizeof name, r);
        json_array_append_new(files, json_string(name));
        snprintf(path, sizeof path, "%s/%s", tmp, name);
        ckpt_file f;
        int rc = ckpt_open(&f, path, err); /* every rank's shard is written by now */
        if (!rc) {
            const shard_id id = shard_id_of(&f);
            ckpt_close(&f);
            snprintf(crc, sizeof crc, "%08x", id.header_crc);
            json_t *e = json_pack("{s:I,s:s}", "bytes", (json_int_t)id.bytes, "header_crc32c", crc);
            /* never a metadata.json without it */
            if (!e || json_object_set_new(ids, name, e)) rc = base_fail(err, "out of memory");
        }
        if (rc) {
            json_decref(root);
            return -1;
        }
    }
    uint32_t self;
    char crc[16];
    if (meta_crc(root, &self)) {
        json_decref(root);
        return base_fail(err, "out of memory");
    }
    snprintf(crc, sizeof crc, "%08x", self);
    char *text = json_object_set_new(root, "crc32c", json_string(crc))
                     ? NULL
                     : json_dumps(root, JSON_INDENT(1) | JSON_SORT_KEYS);
    json_decref(root);
    if (!text) return base_fail(err, "out of memory");
    snprintf(path, sizeof path, "%s/%s", tmp, STEP_META);
    const int wrote = ckpt_write_bytes(path, text, strlen(text), err);
    free(text);
    if (wrote) return -1;
    if (ckpt_step_place(folder, step, err)) return -1;
    if (keep_latest_k > 0) ckpt_step_prune(folder, keep_latest_k, step);
    return 0;
}

int ckpt_step_place(const char *folder, int64_t step, base_err *err) {
    char tmp[4096], fin[4096], old[4200];
    step_dir(tmp, sizeof tmp, folder, step, ".tmp");
    step_dir(fin, sizeof fin, folder, step, "");
    if (fsync_path(tmp, err)) return -1;
    /* an older step-N (same step saved again) is moved aside first: rename needs an empty or
     * absent target, and step-N must never be missing while a good one exists. A link named
     * step-N is moved aside and unlinked like a folder; its target is never touched. */
    snprintf(old, sizeof old, "%s.old", fin);
    if (base_remove_tree(old, err)) return -1;
    struct stat st;
    int had_old = lstat(fin, &st) == 0, e;
    if (had_old && rename(fin, old) != 0)
        return base_fail(err, "%s: cannot move the old checkpoint aside: %s", fin, strerror(errno));
    if (rename(tmp, fin) != 0) {
        e = errno;
        if (had_old) rename(old, fin);
        return base_fail(err, "%s: cannot rename into place: %s", fin, strerror(e));
    }
    if (fsync_path(folder, err)) return -1;
    base_err why; /* the new step is in place: a leftover is not a failed save */
    if (had_old && base_remove_tree(old, &why))
        base_log(BASE_LOG_WARN, "checkpoint: %s (retried at the next start)", why.msg);
    return 0;
}

/* The N of a name "step-N<suffix>" (N: decimal digits, no sign, fits in int64), or -1. */
static int64_t step_of(const char *name, const char *suffix) {
    if (strncmp(name, "step-", 5) != 0) return -1;
    const char *p = name + 5;
    if (p[0] == '0' && p[1] >= '0' && p[1] <= '9') return -1; /* step-04 is not step-4's name */
    int64_t v = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > (INT64_MAX - 9) / 10) return -1;
        v = v * 10 + (*p - '0');
    }
    return p > name + 5 && !strcmp(p, suffix) ? v : -1;
}

/* Whether folder/name/sub (sub may be NULL) is a real directory (sub NULL) or a regular file
 * under a real directory: no link anywhere past folder. */
static int is_real(const char *folder, const char *name, const char *sub) {
    char p[4200];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", folder, name);
    if (lstat(p, &st) != 0 || !S_ISDIR(st.st_mode)) return 0;
    if (!sub) return 1;
    snprintf(p, sizeof p, "%s/%s/%s", folder, name, sub);
    return lstat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* Complete checkpoints: step-<digits> folders with a metadata.json, sorted ascending. own:
 * only real folders holding a real metadata.json (what this run may prune), not links to
 * checkpoints elsewhere (which may still be resumed from). foreign: instead, the step-<digits>
 * folders WITHOUT a metadata.json (another program's: never this code's, which renames a
 * folder to step-N only once complete). */
static int list_steps(const char *folder, int own, int foreign, int64_t **steps, int *n) {
    *steps = NULL;
    *n = 0;
    DIR *d = opendir(folder);
    if (!d) return 0;
    int cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        const int64_t v = step_of(e->d_name, "");
        char meta[4200];
        snprintf(meta, sizeof meta, "%s/%s/%s", folder, e->d_name, STEP_META);
        if (v < 0) continue;
        if (foreign ? !is_real(folder, e->d_name, NULL) || access(meta, F_OK) == 0
                    : access(meta, R_OK) != 0 || (own && !is_real(folder, e->d_name, STEP_META)))
            continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            int64_t *ns = realloc(*steps, sizeof *ns * (size_t)cap);
            if (!ns) break;
            *steps = ns;
        }
        (*steps)[(*n)++] = v;
    }
    closedir(d);
    for (int i = 1; i < *n; i++) /* insertion sort: few entries */
        for (int j = i; j > 0 && (*steps)[j - 1] > (*steps)[j]; j--) {
            int64_t t = (*steps)[j];
            (*steps)[j] = (*steps)[j - 1];
            (*steps)[j - 1] = t;
        }
    return 0;
}

/* The newest step of list_steps(folder, 0, foreign); -1 (and *step = -1) when there is none. */
static int newest_step(const char *folder, int foreign, int64_t *step) {
    int64_t *s;
    int n;
    list_steps(folder, 0, foreign, &s, &n);
    *step = n ? s[n - 1] : -1;
    free(s);
    return n ? 0 : -1;
}

int ckpt_step_folder_check(const char *folder, int64_t only, base_err *err) {
    DIR *d = opendir(folder);
    if (!d)
        return errno == ENOENT ? 0
                               : base_fail(err,
                                           "%s: cannot list the checkpoint folder: %s (its "
                                           "checkpoints would be taken for none)",
                                           folder, strerror(errno));
    struct dirent *e;
    int rc = 0;
    while (!rc && (e = readdir(d))) {
        const int64_t v = step_of(e->d_name, "");
        if (v < 0 || (only >= 0 && v != only)) continue;
        char meta[4200];
        snprintf(meta, sizeof meta, "%s/%s/%s", folder, e->d_name, STEP_META);
        /* no file there (ENOENT), a step-N that is a file (ENOTDIR) or a link loop (ELOOP):
         * no checkpoint, as the listings say (and warn of); anything else hides one */
        if (access(meta, R_OK) != 0 && errno != ENOENT && errno != ENOTDIR && errno != ELOOP)
            rc = base_fail(err,
                           "%s: cannot read: %s (the checkpoint would be passed over for an "
                           "older one; checkpoint.load_step names the one to load)",
                           meta, strerror(errno));
    }
    closedir(d);
    return rc;
}

int ckpt_step_list(const char *folder, int64_t **steps, int *n) {
    return list_steps(folder, 0, 0, steps, n);
}

int ckpt_step_foreign_latest(const char *folder, int64_t *step) {
    return newest_step(folder, 1, step);
}

int ckpt_step_latest(const char *folder, int64_t *step) {
    return newest_step(folder, 0, step);
}

void ckpt_step_prune(const char *folder, int keep_latest_k, int64_t upto) {
    int64_t *s;
    int n;
    list_steps(folder, 1, 0, &s, &n);
    while (n > 0 && s[n - 1] > upto) n--; /* an earlier run's, past a load_step rewind */
    for (int i = 0; i + keep_latest_k < n; i++) {
        char dir[4096], del[4200];
        step_dir(dir, sizeof dir, folder, s[i], "");
        /* renamed first, so a half-deleted folder never looks like a checkpoint. A failure
         * keeps the old step (the save itself is complete): warned, as torchtitan's purge */
        snprintf(del, sizeof del, "%s.deleting", dir);
        base_err why;
        if (base_remove_tree(del, &why)) /* one a killed prune left */
            base_log(BASE_LOG_WARN, "checkpoint: %s; %s is kept", why.msg, dir);
        else if (rename(dir, del) != 0)
            base_log(BASE_LOG_WARN, "checkpoint: %s: cannot remove old checkpoint: %s; it is kept",
                     dir, strerror(errno));
        else if (base_remove_tree(del, &why)) /* pruned: a leftover is not a failed save */
            base_log(BASE_LOG_WARN, "checkpoint: %s (retried at the next start)", why.msg);
    }
    free(s);
}

int ckpt_step_cleanup(const char *folder, base_err *err) {
    DIR *d = opendir(folder);
    if (!d) return 0; /* no folder, nothing left over */
    static const char *const kinds[3] = {".deleting", ".old", ".tmp"};
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d))) {
        char path[4200], fin[4200];
        int k = 0;
        while (k < 3 && step_of(e->d_name, kinds[k]) < 0) k++;
        if (k == 3) {
            if (step_of(e->d_name, "") >= 0 && !is_real(folder, e->d_name, NULL))
                base_log(BASE_LOG_WARN,
                         "checkpoint: %s/%s is not a folder this run wrote (a link?): it may be "
                         "resumed from but is never pruned",
                         folder, e->d_name);
            continue;
        }
        snprintf(path, sizeof path, "%s/%s", folder, e->d_name);
        step_dir(fin, sizeof fin, folder, step_of(e->d_name, kinds[k]), "");
        struct stat st;
        /* .old: a re-save killed between its two renames; the old step-N (a checkpoint, or
         * a last_save_in_hf export: config.json) goes back */
        if (k == 1 && lstat(fin, &st) != 0 &&
            (is_real(folder, e->d_name, STEP_META) || is_real(folder, e->d_name, "config.json"))) {
            if (rename(path, fin) != 0)
                rc = base_fail(err, "%s: cannot put back as %s: %s", path, fin, strerror(errno));
            else
                base_log(BASE_LOG_INFO, "checkpoint: %s put back as %s (a re-save was cut short)",
                         path, fin);
            continue;
        }
        if ((rc = base_remove_tree(path, err)) == 0)
            base_log(BASE_LOG_INFO, "checkpoint: removed %s, left by an interrupted %s", path,
                     k == 2   ? "save"
                     : k == 1 ? "re-save"
                              : "prune");
    }
    closedir(d);
    return rc;
}

/* Whether "shards" differs from the list a save writes: rank r's file name at index r. */
static int shards_bad(const json_t *shards, int world) {
    if (!json_is_array(shards) || json_array_size(shards) != (size_t)world) return 1;
    for (int r = 0; r < world; r++) {
        char name[64];
        shard_name(name, sizeof name, r);
        const json_t *v = json_array_get(shards, (size_t)r);
        if (!json_is_string(v) || strcmp(json_string_value(v), name)) return 1;
    }
    return 0;
}

/* metadata.json's "shard_headers" (version 3): for each of the world shards, by name, its
 * {"bytes": size, "header_crc32c": 8 hex digits}, into ids[world]; why not, or NULL. */
static const char *shard_ids_read(const json_t *h, int world, shard_id *ids) {
    if (!json_is_object(h)) return "\"shard_headers\" is not an object";
    if (json_object_size(h) != (size_t)world)
        return "\"shard_headers\" does not name each of the world_size shards once";
    for (int r = 0; r < world; r++) {
        char name[64];
        shard_name(name, sizeof name, r);
        const json_t *e = json_object_get(h, name), *b = json_object_get(e, "bytes"),
                     *c = json_object_get(e, "header_crc32c");
        uint32_t crc;
        if (!json_is_integer(b) || json_integer_value(b) < 8 ||
            ckpt_hex32(json_string_value(c), &crc))
            return "\"shard_headers\" lacks a shard's {\"bytes\": size, \"header_crc32c\": 8 "
                   "hex digits}";
        ids[r] = (shard_id){(uint64_t)json_integer_value(b), crc};
    }
    return NULL;
}

/* Whether shard file f is the one metadata.json recorded (shard_id). */
static int shard_check(const ckpt_file *f, const shard_id *want, const char *meta, base_err *err) {
    const shard_id got = shard_id_of(f);
    if (got.bytes == want->bytes && got.header_crc == want->header_crc) return 0;
    return base_fail(err,
                     "%s: not the shard %s recorded (%llu bytes, header CRC-32C %08x; the file "
                     "has %llu bytes, %08x): a shard of another step or run, or one rewritten "
                     "since that save",
                     f->path, meta, (unsigned long long)want->bytes, want->header_crc,
                     (unsigned long long)got.bytes, got.header_crc);
}

/* The check of metadata.json's own CRC-32C (version 4 on, or any version holding the member):
 * NULL when it matches; a message when it does not or is malformed. Without the member (removed
 * by hand after an edit, as the refusal says to) the file loads unchecked, said once per file
 * in a row. */
static const char *meta_crc_bad(const json_t *root, const char *path) {
    const json_t *c = json_object_get(root, "crc32c");
    uint32_t want, got;
    if (!c) { /* said once: a resume reads it more than once */
        base_log_once(BASE_LOG_WARN,
                      "%s: no \"crc32c\" (removed after an edit?): its trainer state is loaded "
                      "unchecked",
                      path);
        return NULL;
    }
    if (!json_is_string(c) || ckpt_hex32(json_string_value(c), &want))
        return "\"crc32c\" is not 8 hex digits";
    if (meta_crc(root, &got)) return "out of memory";
    if (got == want) return NULL;
    return "its contents do not match its \"crc32c\" (changed since titan wrote it: a damaged "
           "copy or disk, or an edit; to load an edit you made on purpose, delete the "
           "\"crc32c\" line)";
}

/* ckpt_step_read_meta, the format version (1 to 4) and, from version 3 on, each shard's
 * identity (*ids: malloc'ed [world]; NULL before version 3, or where ids is NULL). */
static int read_meta(const char *folder, int64_t step, char **train_json, int *world, int *version,
                     shard_id **ids, base_err *err) {
    char path[4200];
    snprintf(path, sizeof path, "%s/step-%lld/%s", folder, (long long)step, STEP_META);
    *train_json = NULL;
    size_t len;
    char *text = base_read_file(path, (size_t)1 << 30, &len, err);
    if (!text) return -1;
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    free(text);
    const char *bad = NULL;
    json_t *fmt = root ? json_object_get(root, "format") : NULL;
    json_t *ver = root ? json_object_get(root, "version") : NULL;
    json_t *st = root ? json_object_get(root, "step") : NULL;
    json_t *ws = root ? json_object_get(root, "world_size") : NULL;
    json_t *tr = root ? json_object_get(root, "train") : NULL;
    if (!root)
        bad = je.text;
    else if (!json_is_string(fmt) || strcmp(json_string_value(fmt), "titan-checkpoint"))
        bad = "\"format\" is not \"titan-checkpoint\"";
    else if (!json_is_integer(ver) || json_integer_value(ver) < 1 ||
             json_integer_value(ver) > CKPT_STEP_VERSION)
        bad = "\"version\" is not 1 to 4 (a newer titan's checkpoint?)";
    else if (!json_is_integer(st) || json_integer_value(st) != step)
        bad = "\"step\" does not match the folder name";
    else if (!json_is_integer(ws) || json_integer_value(ws) < 1 || json_integer_value(ws) > 1 << 20)
        bad = "\"world_size\" is not a positive integer";
    else if (!json_is_object(tr))
        bad = "\"train\" is not an object";
    else if (json_object_get(root, "shards") && /* absent: not checked (hand-made, older) */
             shards_bad(json_object_get(root, "shards"), (int)json_integer_value(ws)))
        bad = "\"shards\" is not [\"rank-00000.safetensors\", ...] for each of the world_size "
              "ranks (the files a step-N holds)";
    /* whatever the version where the member is there: a downgraded or damaged "version"
     * must not turn the check off */
    if (!bad && (json_integer_value(ver) >= 4 || json_object_get(root, "crc32c")))
        bad = meta_crc_bad(root, path);
    shard_id *id = NULL;
    if (!bad && json_integer_value(ver) >= 3) {
        id = malloc(sizeof *id * (size_t)json_integer_value(ws));
        bad = !id ? "out of memory"
                  : shard_ids_read(json_object_get(root, "shard_headers"),
                                   (int)json_integer_value(ws), id);
    }
    if (bad) {
        free(id);
        if (root) json_decref(root);
        return base_fail(err, "%s: %s", path, bad);
    }
    if (ids)
        *ids = id;
    else
        free(id);
    *world = (int)json_integer_value(ws);
    *version = (int)json_integer_value(ver);
    /* a shard past world_size is never read: said (once), not ignored in silence */
    char extra[4300], name[64];
    shard_name(name, sizeof name, *world);
    snprintf(extra, sizeof extra, "%s/step-%lld/%s", folder, (long long)step, name);
    if (base_is_file(extra))
        base_log_once(BASE_LOG_WARN,
                      "%s: not a shard of this checkpoint (its metadata.json has world_size %d): "
                      "ignored (a copy from another run?)",
                      extra, *world);
    *train_json = json_dumps(tr, JSON_SORT_KEYS | JSON_COMPACT);
    json_decref(root);
    return *train_json ? 0 : base_fail(err, "out of memory");
}

int ckpt_step_read_meta(const char *folder, int64_t step, char **train_json, int *world,
                        base_err *err) {
    int version;
    return read_meta(folder, step, train_json, world, &version, NULL, err);
}

int ckpt_step_check_shards(const char *folder, int64_t step, base_err *err) {
    char *train, meta[4200], path[4300];
    int world, version;
    shard_id *ids;
    if (read_meta(folder, step, &train, &world, &version, &ids, err)) return -1;
    free(train);
    snprintf(meta, sizeof meta, "%s/step-%lld/%s", folder, (long long)step, STEP_META);
    int rc = 0;
    for (int r = 0; ids && !rc && r < world; r++) {
        char name[64];
        shard_name(name, sizeof name, r);
        snprintf(path, sizeof path, "%s/step-%lld/%s", folder, (long long)step, name);
        ckpt_file f;
        rc = ckpt_open(&f, path, err) ? -1 : shard_check(&f, &ids[r], meta, err);
        ckpt_close(&f);
    }
    free(ids);
    return rc;
}

/* Reads one size_t from a shard's __metadata__. */
static int meta_size(const ckpt_file *f, const char *buf, const char *what, size_t *out,
                     base_err *err) {
    char key[160];
    snprintf(key, sizeof key, "%s.%s", buf, what);
    const char *v = ckpt_meta_get(f, key);
    int64_t x;
    if (!v || base_parse_i64(v, &x) || x < 0)
        return base_fail(err, "%s: __metadata__ \"%s\" is missing or not a size", f->path, key);
    *out = (size_t)x;
    return 0;
}

/* A shard file holds a buffer as one tensor "NAME" or, when its rank's slice is several
 * pieces (FSDP shards of every unit, TP slices of every tensor), as "NAME", "NAME@1", ... */
static int piece_of(const char *tensor, const char *buf) {
    const size_t k = strlen(buf);
    return !strncmp(tensor, buf, k) && (tensor[k] == 0 || tensor[k] == '@');
}

/* The piece a shard tensor holds: version 1 1-D only; version 2 also 2-D [rows, row_len]
 * with a stride. Errors name the file and the tensor. */
static int tensor_piece(const ckpt_file *f, const ckpt_tensor *t, int version, piece *p,
                        base_err *err) {
    const int fp = t->dtype == CKPT_F32 || t->dtype == CKPT_BF16 || t->dtype == CKPT_F16;
    if (!fp || t->ndim < 1 || t->ndim > (version >= 2 ? 2 : 1))
        return base_fail(err,
                         "%s: tensor \"%s\" is %s with %d dimension%s, not a %s F32 (BF16, F16) "
                         "piece",
                         f->path, t->name, ckpt_dtype_name(t->dtype), t->ndim,
                         t->ndim == 1 ? "" : "s", version >= 2 ? "1-D or 2-D" : "1-D");
    const int strided = t->ndim == 2;
    *p = (piece){0, (size_t)t->shape[strided], strided ? (size_t)t->shape[0] : 1, 0, 0, t->dtype};
    if (meta_size(f, t->name, "offset", &p->off, err) ||
        meta_size(f, t->name, "global_numel", &p->gn, err))
        return -1;
    p->stride = p->row_len;
    if (strided && meta_size(f, t->name, "stride", &p->stride, err)) return -1;
    if (p->rows == 1) p->stride = p->row_len; /* unused for one row; never a zero divisor */
    char why[200];
    if (p->row_len && p->rows && piece_bad(p, why, sizeof why))
        return base_fail(err, "%s: tensor \"%s\": %s", f->path, t->name, why);
    return 0;
}

/* Rows r of p with p.off + r * stride < hi and p.off + r * stride + row_len > lo: [*r0, *r1). */
static void rows_within(const piece *p, size_t lo, size_t hi, size_t *r0, size_t *r1) {
    *r0 = lo < p->off + p->row_len ? 0 : (lo - p->off - p->row_len) / p->stride + 1;
    *r1 = hi <= p->off ? 0 : (hi - p->off - 1) / p->stride + 1;
    if (*r1 > p->rows) *r1 = p->rows;
}

/* The elements of a wanted piece's data (its own order) that shard tensors filled: spans
 * [begin, end) tagged (idx) with the tensor's index in the load's source table. */
typedef struct {
    ckpt_span *v;
    size_t n, cap;
} spans;

static int spans_add(spans *s, size_t lo, size_t hi, int src) {
    if (s->n && s->v[s->n - 1].end == lo && s->v[s->n - 1].idx == src) {
        s->v[s->n - 1].end = hi; /* the next row of the same tensor: one span */
        return 0;
    }
    if (s->n == s->cap) {
        const size_t cap = s->cap ? 2 * s->cap : 16;
        ckpt_span *v = realloc(s->v, cap * sizeof *v);
        if (!v) return -1;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = (ckpt_span){lo, hi, src};
    return 0;
}

/* Elements [0, n) of a stored piece's data (dtype dt) into bf16 bits: BF16 as it is, F32 /
 * F16 rounded to nearest even (through fp32: exact for F16). */
static void to_bf16_n(const unsigned char *data, ckpt_dtype dt, uint16_t *out, size_t n) {
    if (dt == CKPT_BF16) {
        memcpy(out, data, 2 * n);
        return;
    }
    float f[256];
    for (size_t c = 0; c < n; c += 256) {
        const size_t k = n - c < 256 ? n - c : 256;
        if (dt == CKPT_F32)
            memcpy(f, data + 4 * c, 4 * k);
        else
            ckpt_half_to_f32_n(data + 2 * c, f, k, 0);
        ckpt_f32_to_half_n(f, out + c, k, 1);
    }
}

/* Copies the overlap of shard piece a (data: its rows, row after row) into wanted piece b
 * (dst: floats, or bf16 bits when bf16), recording the elements of b it filled in s. */
static int copy_overlap(const piece *a, const unsigned char *data, const piece *b, void *dst,
                        int bf16, spans *s, int src) {
    const size_t blo = b->off, bhi = b->off + (b->rows - 1) * b->stride + b->row_len;
    size_t ra0, ra1;
    rows_within(a, blo, bhi, &ra0, &ra1);
    for (size_t ra = ra0; ra < ra1; ra++) {
        const size_t a0 = a->off + ra * a->stride, a1 = a0 + a->row_len;
        size_t rb0, rb1;
        rows_within(b, a0, a1, &rb0, &rb1);
        for (size_t rb = rb0; rb < rb1; rb++) {
            const size_t b0 = b->off + rb * b->stride;
            const size_t lo = a0 > b0 ? a0 : b0;
            const size_t hi = a1 < b0 + b->row_len ? a1 : b0 + b->row_len;
            if (lo >= hi) continue;
            const size_t at = rb * b->row_len + (lo - b0);
            const size_t from = ra * a->row_len + (lo - a0);
            const unsigned char *in = data + (a->dtype == CKPT_F32 ? 4 : 2) * from;
            if (bf16)
                to_bf16_n(in, a->dtype, (uint16_t *)dst + at, hi - lo);
            else if (a->dtype == CKPT_F32)
                memcpy((float *)dst + at, in, 4 * (hi - lo));
            else
                ckpt_half_to_f32_n(in, (float *)dst + at, hi - lo, a->dtype == CKPT_BF16);
            if (spans_add(s, at, at + (hi - lo), src)) return -1;
        }
    }
    return 0;
}

/* Element `at` of wanted piece p's data: its index in the whole buffer. */
static size_t global_index(const piece *p, size_t at) {
    return p->off + at / p->row_len * p->stride + at % p->row_len;
}

typedef struct {
    int rank;
    char *tensor;
} source;

int ckpt_step_load(const char *folder, int64_t step, const ckpt_step_buf *bufs, int n,
                   base_err *err) {
    char *train, where[4200], meta[4300];
    int world, version;
    shard_id *ids;
    if (read_meta(folder, step, &train, &world, &version, &ids, err)) return -1;
    free(train);
    snprintf(where, sizeof where, "%s/step-%lld", folder, (long long)step);
    snprintf(meta, sizeof meta, "%s/%s", where, STEP_META);
    piece *want = calloc((size_t)n + 1, sizeof *want);
    spans *got = calloc((size_t)n + 1, sizeof *got);
    int *name_id = calloc((size_t)n + 1, sizeof *name_id); /* bufs[i]'s first same-name index */
    int *found = calloc((size_t)n + 1, sizeof *found);
    source *srcs = NULL;
    int n_srcs = 0, cap_srcs = 0, rc = 0;
    if (!want || !got || !name_id || !found) rc = base_fail(err, "out of memory");
    for (int i = 0; rc == 0 && i < n; i++) {
        rc = buf_piece(&bufs[i], &want[i], where, err);
        name_id[i] = i;
        for (int j = 0; j < i; j++)
            if (!strcmp(bufs[j].name, bufs[i].name)) {
                name_id[i] = name_id[j];
                break;
            }
    }
    for (int r = 0; rc == 0 && r < world; r++) {
        char name[64], path[4300];
        shard_name(name, sizeof name, r);
        snprintf(path, sizeof path, "%s/%s", where, name);
        ckpt_file f;
        if (ckpt_open(&f, path, err)) {
            rc = -1;
            break;
        }
        if (ids && shard_check(&f, &ids[r], meta, err)) {
            ckpt_close(&f);
            rc = -1;
            break;
        }
        memset(found, 0, sizeof *found * (size_t)n);
        for (int j = 0; rc == 0 && j < f.n_tensors; j++) {
            const ckpt_tensor *t = &f.tensors[j];
            int id = -1;
            for (int i = 0; id < 0 && i < n; i++)
                if (name_id[i] == i && piece_of(t->name, bufs[i].name)) id = i;
            if (id < 0) continue; /* another buffer's */
            found[id] = 1;
            piece a;
            if (tensor_piece(&f, t, version, &a, err)) {
                rc = -1;
                break;
            }
            if (a.gn != bufs[id].global_numel) {
                rc = base_fail(err,
                               "%s: tensor \"%s\" is a piece of a %zu-element buffer, the model's "
                               "\"%s\" has %zu elements",
                               path, t->name, a.gn, bufs[id].name, bufs[id].global_numel);
                break;
            }
            if (!a.row_len || !a.rows) continue;
            if (n_srcs == cap_srcs) {
                cap_srcs = cap_srcs ? 2 * cap_srcs : 64;
                source *ns = realloc(srcs, sizeof *ns * (size_t)cap_srcs);
                if (!ns) {
                    rc = base_fail(err, "out of memory");
                    break;
                }
                srcs = ns;
            }
            if (!(srcs[n_srcs].tensor = strdup(t->name))) {
                rc = base_fail(err, "out of memory");
                break;
            }
            srcs[n_srcs++].rank = r;
            const size_t alo = a.off, ahi = a.off + (a.rows - 1) * a.stride + a.row_len;
            int checked = 0; /* a tensor is read (and its CRC checked) only if it is wanted */
            for (int i = 0; rc == 0 && i < n; i++) {
                const piece *b = &want[i];
                if (name_id[i] != id || !b->row_len || !b->rows) continue;
                const size_t blo = b->off, bhi = b->off + (b->rows - 1) * b->stride + b->row_len;
                if (ahi <= blo || bhi <= alo) continue;
                if (!checked++ && ckpt_tensor_verify(&f, t, err) < 0) {
                    rc = -1;
                    break;
                }
                if (copy_overlap(&a, t->data, b, bufs[i].dst, bufs[i].bf16, &got[i], n_srcs - 1))
                    rc = base_fail(err, "out of memory");
            }
        }
        for (int i = 0; rc == 0 && i < n; i++)
            if (name_id[i] == i && !found[i])
                rc = base_fail(err, "%s: no tensor \"%s\"", path, bufs[i].name);
        ckpt_close(&f);
    }
    /* every wanted element exactly once: the spans tile [0, numel) */
    for (int i = 0; rc == 0 && i < n; i++) {
        spans *s = &got[i];
        size_t at;
        uint64_t cur;
        const ckpt_spans t = ckpt_spans_tile(s->v, s->n, 0, bufs[i].numel, &at, &cur);
        if (t == CKPT_SPANS_GAP || t == CKPT_SPANS_SHORT) {
            const uint64_t upto = t == CKPT_SPANS_GAP ? s->v[at].begin : bufs[i].numel;
            rc = base_fail(err,
                           "%s: buffer \"%s\" is incomplete: no shard holds its element %zu "
                           "(%llu of the %zu elements wanted there are missing)",
                           where, bufs[i].name, global_index(&want[i], (size_t)cur),
                           (unsigned long long)(upto - cur), bufs[i].numel);
        } else if (t == CKPT_SPANS_OVERLAP) { /* s->v[at] begins inside s->v[at - 1] */
            const source *x = &srcs[s->v[at].idx], *y = &srcs[s->v[at - 1].idx];
            char nx[64], ny[64];
            shard_name(nx, sizeof nx, x->rank);
            shard_name(ny, sizeof ny, y->rank);
            rc = base_fail(err,
                           "%s: %s tensor \"%s\" and %s tensor \"%s\" overlap: both hold "
                           "element %zu of buffer \"%s\"",
                           where, nx, x->tensor, ny, y->tensor,
                           global_index(&want[i], (size_t)s->v[at].begin), bufs[i].name);
        }
    }
    for (int i = 0; got && i < n; i++) free(got[i].v);
    for (int k = 0; k < n_srcs; k++) free(srcs[k].tensor);
    free(srcs);
    free(want);
    free(got);
    free(name_id);
    free(found);
    free(ids);
    return rc;
}
