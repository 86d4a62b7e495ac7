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

#include "internal.h"

#define STEP_META "metadata.json"

static void step_dir(char *buf, size_t n, const char *folder, int64_t step, const char *suffix) {
    snprintf(buf, n, "%s/step-%lld%s", folder, (long long)step, suffix);
}

static void shard_name(char *buf, size_t n, int rank) {
    snprintf(buf, n, "rank-%05d.safetensors", rank);
}

static int fsync_path(const char *path, base_err *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return base_fail(err, "%s: cannot open to sync: %s", path, strerror(errno));
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    return rc == 0 ? 0 : base_fail(err, "%s: fsync failed: %s", path, strerror(e));
}

/* rm -rf of a checkpoint folder (two levels at most: files directly inside). */
static void remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        char p[4096];
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(dir);
}

int ckpt_step_begin(const char *folder, int64_t step, int rank, base_err *err) {
    char tmp[4096];
    step_dir(tmp, sizeof tmp, folder, step, ".tmp");
    if (rank == 0) {
        if (base_mkdir_p(folder, err)) return -1;
        remove_tree(tmp); /* left by a crashed save */
        if (mkdir(tmp, 0755) != 0)
            return base_fail(err, "%s: cannot create checkpoint folder: %s", tmp, strerror(errno));
    }
    return 0;
}

int ckpt_step_write_shard(const char *folder, int64_t step, int rank, const ckpt_step_buf *bufs,
                          int n, base_err *err) {
    char tmp[4096], name[64], path[4200];
    step_dir(tmp, sizeof tmp, folder, step, ".tmp");
    shard_name(name, sizeof name, rank);
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    ckpt_wtensor *t = calloc((size_t)n + 1, sizeof *t);
    ckpt_kv *kv = calloc(2 * (size_t)n + 1, sizeof *kv);
    char(*vals)[64] = calloc(2 * (size_t)n + 1, 64);
    char(*keys)[160] = calloc(2 * (size_t)n + 1, 160);
    int rc = -1;
    if (!t || !kv || !vals || !keys) {
        base_fail(err, "out of memory");
        goto done;
    }
    for (int i = 0; i < n; i++) {
        if (bufs[i].offset + bufs[i].numel > bufs[i].global_numel) {
            base_fail(err, "%s: buffer %s range [%zu, %zu) exceeds its size %zu", path,
                      bufs[i].name, bufs[i].offset, bufs[i].offset + bufs[i].numel,
                      bufs[i].global_numel);
            goto done;
        }
        t[i] = (ckpt_wtensor){bufs[i].name, CKPT_F32, 1, {(int64_t)bufs[i].numel}, bufs[i].data, 0};
        snprintf(keys[2 * i], 160, "%s.offset", bufs[i].name);
        snprintf(vals[2 * i], 64, "%zu", bufs[i].offset);
        snprintf(keys[2 * i + 1], 160, "%s.global_numel", bufs[i].name);
        snprintf(vals[2 * i + 1], 64, "%zu", bufs[i].global_numel);
        kv[2 * i] = (ckpt_kv){keys[2 * i], vals[2 * i]};
        kv[2 * i + 1] = (ckpt_kv){keys[2 * i + 1], vals[2 * i + 1]};
    }
    rc = ckpt_write(path, t, n, kv, 2 * n, err);
done:
    free(t);
    free(kv);
    free(vals);
    free(keys);
    return rc;
}

int ckpt_step_commit(const char *folder, int64_t step, int world, const char *train_json,
                     int keep_latest_k, base_err *err) {
    char tmp[4096], fin[4096], path[4200], old[4200];
    step_dir(tmp, sizeof tmp, folder, step, ".tmp");
    step_dir(fin, sizeof fin, folder, step, "");
    json_error_t je;
    json_t *train = json_loads(train_json ? train_json : "{}", 0, &je);
    if (!train || !json_is_object(train)) {
        if (train) json_decref(train);
        return base_fail(err, "checkpoint step %lld: train state is not a JSON object",
                         (long long)step);
    }
    json_t *root = json_object(), *files = json_array();
    json_object_set_new(root, "format", json_string("titan-checkpoint"));
    json_object_set_new(root, "version", json_integer(1));
    json_object_set_new(root, "step", json_integer(step));
    json_object_set_new(root, "world_size", json_integer(world));
    for (int r = 0; r < world; r++) {
        char name[64];
        shard_name(name, sizeof name, r);
        json_array_append_new(files, json_string(name));
    }
    json_object_set_new(root, "shards", files);
    json_object_set_new(root, "train", train);
    char *text = json_dumps(root, JSON_INDENT(1) | JSON_SORT_KEYS);
    json_decref(root);
    if (!text) return base_fail(err, "out of memory");
    snprintf(path, sizeof path, "%s/%s", tmp, STEP_META);
    FILE *f = fopen(path, "wb");
    int ok = f && fputs(text, f) >= 0 && fflush(f) == 0 && fsync(fileno(f)) == 0;
    int e = errno;
    if (f) ok = (fclose(f) == 0) && ok;
    free(text);
    if (!ok) return base_fail(err, "%s: cannot write: %s", path, strerror(e));
    if (fsync_path(tmp, err)) return -1;
    /* an older step-N (same step saved again) is moved aside first: rename needs an empty or
     * absent target, and step-N must never be missing while a good one exists */
    snprintf(old, sizeof old, "%s.old", fin);
    remove_tree(old);
    struct stat st;
    int had_old = stat(fin, &st) == 0;
    if (had_old && rename(fin, old) != 0)
        return base_fail(err, "%s: cannot move the old checkpoint aside: %s", fin, strerror(errno));
    if (rename(tmp, fin) != 0) {
        e = errno;
        if (had_old) rename(old, fin);
        return base_fail(err, "%s: cannot rename into place: %s", fin, strerror(e));
    }
    if (fsync_path(folder, err)) return -1;
    if (had_old) remove_tree(old);
    return keep_latest_k > 0 ? ckpt_step_prune(folder, keep_latest_k, err) : 0;
}

/* Complete checkpoints: step-<digits> folders with a metadata.json. Sorted ascending. */
static int list_steps(const char *folder, int64_t **steps, int *n) {
    *steps = NULL;
    *n = 0;
    DIR *d = opendir(folder);
    if (!d) return 0;
    int cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *s = e->d_name;
        if (strncmp(s, "step-", 5) != 0 || !s[5]) continue;
        int64_t v = 0, ok = 1;
        for (const char *p = s + 5; *p; p++) {
            if (*p < '0' || *p > '9' || v > INT64_MAX / 10 - 10)
                ok = 0;
            else
                v = v * 10 + (*p - '0');
        }
        char meta[4200];
        snprintf(meta, sizeof meta, "%s/%s/%s", folder, s, STEP_META);
        if (!ok || access(meta, R_OK) != 0) continue;
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

int ckpt_step_latest(const char *folder, int64_t *step) {
    int64_t *s;
    int n;
    list_steps(folder, &s, &n);
    *step = n ? s[n - 1] : -1;
    free(s);
    return n ? 0 : -1;
}

int ckpt_step_prune(const char *folder, int keep_latest_k, base_err *err) {
    int64_t *s;
    int n;
    list_steps(folder, &s, &n);
    for (int i = 0; i + keep_latest_k < n; i++) {
        char dir[4096], del[4200];
        step_dir(dir, sizeof dir, folder, s[i], "");
        /* renamed first, so a half-deleted folder never looks like a checkpoint */
        snprintf(del, sizeof del, "%s.deleting", dir);
        if (rename(dir, del) != 0) {
            free(s);
            return base_fail(err, "%s: cannot remove old checkpoint: %s", dir, strerror(errno));
        }
        remove_tree(del);
    }
    free(s);
    return 0;
}

int ckpt_step_read_meta(const char *folder, int64_t step, char **train_json, int *world,
                        base_err *err) {
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
    else if (!json_is_integer(ver) || json_integer_value(ver) != 1)
        bad = "\"version\" is not 1";
    else if (!json_is_integer(st) || json_integer_value(st) != step)
        bad = "\"step\" does not match the folder name";
    else if (!json_is_integer(ws) || json_integer_value(ws) < 1 || json_integer_value(ws) > 1 << 20)
        bad = "\"world_size\" is not a positive integer";
    else if (!json_is_object(tr))
        bad = "\"train\" is not an object";
    if (bad) {
        if (root) json_decref(root);
        return base_fail(err, "%s: %s", path, bad);
    }
    *world = (int)json_integer_value(ws);
    *train_json = json_dumps(tr, JSON_SORT_KEYS | JSON_COMPACT);
    json_decref(root);
    return *train_json ? 0 : base_fail(err, "out of memory");
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
 * ranges (FSDP shards of every unit), as "NAME", "NAME@1", "NAME@2", ... */
static int piece_of(const char *tensor, const char *buf) {
    const size_t k = strlen(buf);
    return !strncmp(tensor, buf, k) && (tensor[k] == 0 || tensor[k] == '@');
}

/* Whether the pieces filled (fs[nf], idx = the buffer) cover each buffer's range exactly once:
 * a hostile or mixed-up checkpoint (two ranks claiming the same elements) must not leave
 * elements unwritten. */
static int check_filled(const char *folder, int64_t step, const ckpt_step_buf *bufs, int n,
                        const ckpt_span *fs, size_t nf, base_err *err) {
    ckpt_span *mine = malloc((nf ? nf : 1) * sizeof *mine);
    if (!mine) return base_fail(err, "out of memory");
    int rc = 0;
    for (int i = 0; rc == 0 && i < n; i++) {
        size_t k = 0, at;
        uint64_t cur;
        for (size_t j = 0; j < nf; j++)
            if (fs[j].idx == i) mine[k++] = fs[j];
        const uint64_t end = bufs[i].offset + bufs[i].numel;
        const ckpt_spans t = ckpt_spans_tile(mine, k, bufs[i].offset, end, &at, &cur);
        if (t == CKPT_SPANS_OVERLAP)
            rc =
                base_fail(err, "%s/step-%lld: buffer \"%s\": two pieces hold elements %llu..%llu",
                          folder, (long long)step, bufs[i].name, (unsigned long long)mine[at].begin,
                          (unsigned long long)(cur < mine[at].end ? cur : mine[at].end) - 1);
        else if (t != CKPT_SPANS_OK)
            rc = base_fail(err,
                           "%s/step-%lld: buffer \"%s\" is incomplete: no shard holds elements "
                           "%llu..%llu",
                           folder, (long long)step, bufs[i].name, (unsigned long long)cur,
                           (unsigned long long)(t == CKPT_SPANS_GAP ? mine[at].begin : end) - 1);
    }
    free(mine);
    return rc;
}

int ckpt_step_load(const char *folder, int64_t step, const ckpt_step_buf *bufs, int n,
                   base_err *err) {
    char *train;
    int world;
    if (ckpt_step_read_meta(folder, step, &train, &world, err)) return -1;
    free(train);
    ckpt_span *fs = NULL;
    size_t nf = 0, cap = 0;
    int rc = 0;
    for (int r = 0; rc == 0 && r < world; r++) {
        char name[64], path[4300];
        shard_name(name, sizeof name, r);
        snprintf(path, sizeof path, "%s/step-%lld/%s", folder, (long long)step, name);
        ckpt_file f;
        if (ckpt_open(&f, path, err)) {
            rc = -1;
            break;
        }
        for (int i = 0; rc == 0 && i < n; i++) {
            int found = 0;
            for (int j = 0; rc == 0 && j < f.n_tensors; j++) {
                const ckpt_tensor *t = &f.tensors[j];
                if (!piece_of(t->name, bufs[i].name)) continue;
                found++;
                size_t off, gn;
                if (meta_size(&f, t->name, "offset", &off, err) ||
                    meta_size(&f, t->name, "global_numel", &gn, err)) {
                    rc = -1;
                    break;
                }
                if (t->dtype != CKPT_F32 || t->ndim != 1 || gn != bufs[i].global_numel ||
                    off + (size_t)t->numel > gn) {
                    rc = base_fail(err,
                                   "%s: tensor \"%s\" (%s, %lld elements at %zu of %zu) does not "
                                   "fit the model's %zu elements",
                                   path, t->name, ckpt_dtype_name(t->dtype), (long long)t->numel,
                                   off, gn, bufs[i].global_numel);
                    break;
                }
                /* the overlap of [off, off + numel) with the wanted [o, o + k) */
                const size_t o = bufs[i].offset, k = bufs[i].numel;
                const size_t lo = off > o ? off : o;
                const size_t hi = off + (size_t)t->numel < o + k ? off + (size_t)t->numel : o + k;
                if (lo < hi) {
                    if (nf == cap) {
                        cap = cap ? 2 * cap : 16;
                        ckpt_span *g = realloc(fs, cap * sizeof *g);
                        if (!g) {
                            rc = base_fail(err, "out of memory");
                            break;
                        }
                        fs = g;
                    }
                    fs[nf++] = (ckpt_span){lo, hi, i};
                    memcpy(bufs[i].dst + (lo - o), (const char *)t->data + 4 * (lo - off),
                           4 * (hi - lo));
                }
            }
            if (rc == 0 && !found) rc = base_fail(err, "%s: no tensor \"%s\"", path, bufs[i].name);
        }
        ckpt_close(&f);
    }
    if (rc == 0) rc = check_filled(folder, step, bufs, n, fs, nf, err);
    free(fs);
    return rc;
}
