/* Training checkpoint folders (src/checkpoint/step.c): a checkpoint written by 2 ranks loads
 * into 1 and 3 ranks (resharding), incomplete folders are never picked, keep_latest_k
 * prunes only complete old ones, saving the same step twice replaces it, malformed
 * metadata and shards give errors naming the file, and an unwritable folder fails cleanly
 * leaving the previous checkpoint loadable. Strided pieces: a 2-D tensor inside a flat buffer
 * written as TP-like column slices (one tensor per rank, not one per row) reads back into
 * every other layout (whole, row ranges, other column splits, 2-D blocks, FSDP-cut rows), a
 * version-1 checkpoint (one 1-D tensor per row) still loads, and hostile shards (overlapping
 * pieces, pieces past the buffer, a stride below the row length, a missing stride, 2-D in
 * version 1, a gap) fail naming the file and the tensor. A killed run's leftovers are
 * finished without following links (test_cleanup). Checksums (test_checksums): every shard
 * tensor records the CRC-32C of its bytes (checked against the textbook bitwise CRC-32C, whose
 * check value for "123456789" is 0xe3069283); one flipped byte fails the load naming the file
 * and the tensor, as does a malformed recorded value; a shard without checksums still loads. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "checkpoint/checkpoint.h"

static char dir[256];

/* Saves step with buffer "a" (n floats, value i + step) split over `world` ranks. */
static int save(const char *folder, int64_t step, size_t n, int world, int keep) {
    base_err err;
    float *a = malloc(n * sizeof *a);
    for (size_t i = 0; i < n; i++) a[i] = (float)i + (float)step;
    int rc = ckpt_step_begin(folder, step, 0, &err);
    for (int r = 0; rc == 0 && r < world; r++) {
        size_t lo = n * (size_t)r / (size_t)world, hi = n * (size_t)(r + 1) / (size_t)world;
        ckpt_step_buf b = {"a", a + lo, NULL, lo, hi - lo, n, 1, hi - lo, CKPT_F32, 0};
        rc = ckpt_step_write_shard(folder, step, r, &b, 1, &err);
    }
    if (rc == 0) rc = ckpt_step_commit(folder, step, world, "{\"x\": 1}", keep, &err);
    if (rc) printf("save step %lld: %s\n", (long long)step, err.msg);
    free(a);
    return rc;
}

/* Loads "a" of step as `world` ranks and checks every element. */
static int load_check(const char *folder, int64_t step, size_t n, int world) {
    float *a = calloc(n, sizeof *a);
    int ok = 1;
    for (int r = 0; r < world; r++) {
        size_t lo = n * (size_t)r / (size_t)world, hi = n * (size_t)(r + 1) / (size_t)world;
        ckpt_step_buf b = {"a", NULL, a + lo, lo, hi - lo, n, 1, hi - lo, CKPT_F32, 0};
        base_err err;
        if (ckpt_step_load(folder, step, &b, 1, &err)) {
            printf("load step %lld as %d ranks: %s\n", (long long)step, world, err.msg);
            ok = 0;
        }
    }
    for (size_t i = 0; ok && i < n; i++) ok = a[i] == (float)i + (float)step;
    free(a);
    return ok;
}

/* bf16 memory (AdamW's moments in bf16): saved as BF16 as it is, over 2 ranks; loaded as 3
 * ranks into bf16 (the bits back) and into fp32 (widened, exact); an F32 buffer loaded into
 * bf16 is rounded to nearest even (0x3f808000: a tie, to even 0x3f80; 0x3f818000: up). */
static void bf16_buffers(const char *folder) {
    enum { N = 301 };
    uint16_t h[N], back[N];
    float f[N], wide[N];
    for (int i = 0; i < N; i++) {
        h[i] = (uint16_t)(0x3f80 + i * 37 % 4000); /* 1.0 upward, bf16 bits */
        const uint32_t u = (uint32_t)h[i] << 16;
        memcpy(&f[i], &u, 4);
    }
    base_err err;
    int rc = ckpt_step_begin(folder, 40, 0, &err);
    for (int r = 0; rc == 0 && r < 2; r++) {
        const size_t lo = (size_t)N * r / 2, hi = (size_t)N * (r + 1) / 2;
        ckpt_step_buf b = {"m", h + lo, NULL, lo, hi - lo, N, 1, hi - lo, CKPT_F32, 1};
        rc = ckpt_step_write_shard(folder, 40, r, &b, 1, &err);
    }
    if (!rc) rc = ckpt_step_commit(folder, 40, 2, "{}", 0, &err);
    CHECK(rc == 0, "save bf16 memory: %s", err.msg);
    char path[400];
    snprintf(path, sizeof path, "%s/step-40/rank-00000.safetensors", folder);
    ckpt_file cf;
    const ckpt_tensor *t = ckpt_open(&cf, path, &err) == 0 ? ckpt_find(&cf, "m") : NULL;
    CHECK(t && t->dtype == CKPT_BF16, "bf16 memory stored as BF16");
    ckpt_close(&cf);
    int same = 1;
    for (int into = 0; into < 2; into++)
        for (int r = 0; r < 3; r++) {
            const size_t lo = (size_t)N * r / 3, hi = (size_t)N * (r + 1) / 3;
            ckpt_step_buf b = {"m",  NULL,    into ? (void *)(wide + lo) : (void *)(back + lo),
                               lo,   hi - lo, N,
                               1,    hi - lo, CKPT_F32,
                               !into};
            same &= ckpt_step_load(folder, 40, &b, 1, &err) == 0;
        }
    CHECK(same && !memcmp(back, h, sizeof h) && !memcmp(wide, f, sizeof f),
          "BF16 loaded into bf16 (bits) and into fp32 (widened): %s", same ? "values" : err.msg);
    /* an F32 buffer into bf16 memory: rounded to nearest even */
    float x[4];
    const uint32_t xb[4] = {0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0xbf808001u};
    const uint16_t want[4] = {0x3f80, 0x3f82, 0x3f81, 0xbf81};
    memcpy(x, xb, sizeof x);
    ckpt_step_buf w = {"x", x, NULL, 0, 4, 4, 1, 4, CKPT_F32, 0};
    rc = ckpt_step_begin(folder, 41, 0, &err) ||
         ckpt_step_write_shard(folder, 41, 0, &w, 1, &err) ||
         ckpt_step_commit(folder, 41, 1, "{}", 0, &err);
    uint16_t got[4] = {0};
    ckpt_step_buf l = {"x", NULL, got, 0, 4, 4, 1, 4, CKPT_F32, 1};
    CHECK(rc == 0 && ckpt_step_load(folder, 41, &l, 1, &err) == 0 && !memcmp(got, want, sizeof got),
          "F32 into bf16 memory rounds to nearest even: %04x %04x %04x %04x", got[0], got[1],
          got[2], got[3]);
}

static void write_str(const char *path, const char *s) {
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(s, f);
        fclose(f);
    }
}

/* ---- strided pieces ------------------------------------------------------------------
 * Buffer "a" of GN elements: a prefix of P, a [R, C] matrix, a suffix of S; element i is
 * 1000 + i (the reference every load is compared with). */
enum { P = 5, R = 6, C = 12, S = 7, GN = P + R * C + S };

typedef struct {
    size_t off, row_len, rows, stride;
} tpiece;
typedef struct {
    int n;
    tpiece p[6];
} trank;
typedef struct {
    const char *name;
    int world;
    trank r[6];
} tlayout;

/* rows [r0, r0 + nr) x columns [c0, c0 + nc) of the matrix; a contiguous range [lo, hi) */
#define BLOCK(r0, nr, c0, nc)                                                                      \
    { P + (r0)*C + (c0), (nc), (nr), C }
#define RANGE(lo, hi)                                                                              \
    { (lo), (hi) - (lo), 1, (hi) - (lo) }
#define PREFIX RANGE(0, P)
#define SUFFIX RANGE(P + R * C, GN)

static const tlayout layouts[] = {
    {"tp3 columns",
     3,
     {{2, {PREFIX, BLOCK(0, R, 0, 4)}},
      {1, {BLOCK(0, R, 4, 4)}},
      {2, {BLOCK(0, R, 8, 4), SUFFIX}}}},
    {"dp2 x tp2 blocks",
     4,
     {{2, {PREFIX, BLOCK(0, 3, 0, 6)}},
      {1, {BLOCK(0, 3, 6, 6)}},
      {1, {BLOCK(3, 3, 0, 6)}},
      {2, {BLOCK(3, 3, 6, 6), SUFFIX}}}},
    /* tp2 column slices cut by FSDP in the middle of row 2: a partial row alone */
    {"fsdp-cut tp2",
     4,
     {{3, {PREFIX, BLOCK(0, 2, 0, 6), BLOCK(2, 1, 0, 3)}},
      {2, {BLOCK(0, 2, 6, 6), BLOCK(2, 1, 6, 3)}},
      {2, {BLOCK(2, 1, 3, 3), BLOCK(3, 3, 0, 6)}},
      {3, {BLOCK(2, 1, 9, 3), BLOCK(3, 3, 6, 6), SUFFIX}}}},
    {"whole", 1, {{1, {RANGE(0, GN)}}}},
    {"3 row ranges", 3, {{1, {RANGE(0, 28)}}, {1, {RANGE(28, 56)}}, {1, {RANGE(56, GN)}}}},
    {"tp2 columns", 2, {{3, {PREFIX, BLOCK(0, R, 0, 6), SUFFIX}}, {1, {BLOCK(0, R, 6, 6)}}}},
    {"tp4 columns",
     4,
     {{2, {PREFIX, BLOCK(0, R, 0, 3)}},
      {1, {BLOCK(0, R, 3, 3)}},
      {1, {BLOCK(0, R, 6, 3)}},
      {2, {BLOCK(0, R, 9, 3), SUFFIX}}}},
    {"tp6 columns, 1 row each",
     6,
     {{2, {PREFIX, BLOCK(0, R, 0, 2)}},
      {1, {BLOCK(0, R, 2, 2)}},
      {1, {BLOCK(0, R, 4, 2)}},
      {1, {BLOCK(0, R, 6, 2)}},
      {1, {BLOCK(0, R, 8, 2)}},
      {2, {BLOCK(0, R, 10, 2), SUFFIX}}}},
};
enum { N_SAVE_LAYOUTS = 3, N_LAYOUTS = sizeof layouts / sizeof *layouts };

static float ref(size_t i) {
    return 1000.0f + (float)i;
}

/* Rank r's pieces of layout L as buffers "a", "a@1", ... (rows > 1: strided); data (save)
 * holds each piece's elements packed from the reference, dst (load) gets room for them. */
static int rank_bufs(const trank *tr, ckpt_step_buf *b, char (*names)[16], float **mem, int save) {
    size_t total = 0;
    for (int k = 0; k < tr->n; k++) total += tr->p[k].rows * tr->p[k].row_len;
    float *m = calloc(total + 1, sizeof *m);
    *mem = m;
    for (int k = 0; k < tr->n; k++) {
        const tpiece *p = &tr->p[k];
        snprintf(names[k], 16, k ? "a@%d" : "a", k);
        for (size_t i = 0; save && i < p->rows; i++)
            for (size_t c = 0; c < p->row_len; c++)
                m[i * p->row_len + c] = ref(p->off + i * p->stride + c);
        b[k] = (ckpt_step_buf){save ? names[k] : "a",
                               save ? m : NULL,
                               save ? NULL : m,
                               p->off,
                               p->rows * p->row_len,
                               GN,
                               p->rows,
                               p->stride,
                               CKPT_F32,
                               0};
        m += p->rows * p->row_len;
    }
    return 0;
}

static int save_layout(const char *folder, int64_t step, const tlayout *L) {
    base_err err;
    int rc = ckpt_step_begin(folder, step, 0, &err);
    for (int r = 0; rc == 0 && r < L->world; r++) {
        ckpt_step_buf b[6];
        char names[6][16];
        float *mem;
        rank_bufs(&L->r[r], b, names, &mem, 1);
        rc = ckpt_step_write_shard(folder, step, r, b, L->r[r].n, &err);
        free(mem);
    }
    if (rc == 0) rc = ckpt_step_commit(folder, step, L->world, "{}", 0, &err);
    if (rc) printf("save %s: %s\n", L->name, err.msg);
    return rc;
}

/* Loads every rank of L and compares each element with the reference; err (if given) gets
 * the first load error. Returns 1 when all loads succeed and every element matches. */
static int load_layout(const char *folder, int64_t step, const tlayout *L, base_err *first) {
    int ok = 1;
    for (int r = 0; r < L->world; r++) {
        ckpt_step_buf b[6];
        char names[6][16];
        float *mem;
        rank_bufs(&L->r[r], b, names, &mem, 0);
        base_err err;
        if (ckpt_step_load(folder, step, b, L->r[r].n, &err)) {
            if (ok && first) *first = err;
            ok = 0;
        }
        for (int k = 0; ok && k < L->r[r].n; k++) {
            const tpiece *p = &L->r[r].p[k];
            for (size_t i = 0; ok && i < p->rows; i++)
                for (size_t c = 0; ok && c < p->row_len; c++)
                    if (((float *)b[k].dst)[i * p->row_len + c] !=
                        ref(p->off + i * p->stride + c)) {
                        printf("%s rank %d: element %zu is %g\n", L->name, r,
                               p->off + i * p->stride + c, ((float *)b[k].dst)[i * p->row_len + c]);
                        ok = 0;
                    }
        }
        free(mem);
    }
    return ok;
}

/* Writes rank-00000.safetensors of step-N by hand: "a" (the prefix), "a@1" (F32, shape
 * [rows, row_len] when ndim is 2, else [rows * row_len]) with the given __metadata__ values
 * (NULL: omitted), "a@2" (the suffix). */
static void write_raw(const char *folder, int64_t step, int ndim, size_t rows, size_t row_len,
                      const char *off, const char *gn, const char *stride) {
    char path[400];
    snprintf(path, sizeof path, "%s/step-%lld/rank-00000.safetensors", folder, (long long)step);
    float *d = calloc(rows * row_len + GN, sizeof *d);
    for (size_t i = 0; i < GN; i++) d[i] = ref(i);
    ckpt_wtensor t[3] = {{"a", CKPT_F32, 1, {P}, d, 0, 0},
                         {"a@1", CKPT_F32, ndim, {0}, d + GN, 0, 0},
                         {"a@2", CKPT_F32, 1, {S}, d + P + R * C, 0, 0}};
    t[1].shape[0] = (int64_t)(ndim == 2 ? rows : rows * row_len);
    t[1].shape[1] = (int64_t)row_len;
    ckpt_kv kv[7] = {{"a.offset", "0"},
                     {"a.global_numel", "84"},
                     {"a@2.offset", "77"},
                     {"a@2.global_numel", "84"}};
    int n = 4;
    if (off) kv[n++] = (ckpt_kv){"a@1.offset", off};
    if (gn) kv[n++] = (ckpt_kv){"a@1.global_numel", gn};
    if (stride) kv[n++] = (ckpt_kv){"a@1.stride", stride};
    base_err err;
    if (ckpt_write(path, t, 3, kv, n, &err)) printf("write_raw: %s\n", err.msg);
    free(d);
}

static int has(const char *msg, const char *a, const char *b, const char *c) {
    return strstr(msg, a) && strstr(msg, b) && (!c || strstr(msg, c));
}

static void test_strided(const char *folder) {
    char meta[400], path[400];
    base_err err;
    /* every save layout reads back into every layout */
    for (int s = 0; s < N_SAVE_LAYOUTS; s++) {
        CHECK(save_layout(folder, 100 + s, &layouts[s]) == 0, "save %s", layouts[s].name);
        for (int l = 0; l < N_LAYOUTS; l++) {
            err.msg[0] = 0;
            CHECK(load_layout(folder, 100 + s, &layouts[l], &err), "%s -> %s: %s", layouts[s].name,
                  layouts[l].name, err.msg);
        }
    }
    /* one tensor per piece: the tp3 save's rank 1 holds its [R, C/3] slice as one 2-D tensor */
    ckpt_file f;
    snprintf(path, sizeof path, "%s/step-100/rank-00001.safetensors", folder);
    CHECK(ckpt_open(&f, path, &err) == 0 && f.n_tensors == 1 && f.tensors[0].ndim == 2 &&
              f.tensors[0].shape[0] == R && f.tensors[0].shape[1] == 4 &&
              !strcmp(ckpt_meta_get(&f, "a.stride"), "12"),
          "tp3 rank 1: one [6, 4] tensor with stride 12 (%d tensors)", f.n_tensors);
    ckpt_close(&f);

    /* the writer refuses what the reader would */
    {
        float d[12] = {0};
        ckpt_step_buf w[2] = {{"a", d, NULL, 0, 12, GN, 2, 5, CKPT_F32, 0},
                              {"b", d, NULL, 80, 6, GN, 1, 0, CKPT_F32, 0}};
        CHECK(ckpt_step_begin(folder, 130, 0, &err) == 0, "begin: %s", err.msg);
        for (int i = 0; i < 2; i++) {
            CHECK(ckpt_step_write_shard(folder, 130, 0, &w[i], 1, &err) != 0 &&
                      has(err.msg, "rank-00000.safetensors", i ? "buffer b" : "buffer a",
                          i ? "exceed" : "stride 5 is smaller"),
                  "writing a bad piece %d: %s", i, err.msg);
        }
    }

    /* version 1: the same columns as one 1-D tensor per row still load everywhere */
    {
        tlayout v1 = {"version 1, one tensor per row", 2, {{0}}};
        for (int r = 0; r < 2; r++) {
            trank *t = &v1.r[r];
            for (int i = 0; i < R; i++)
                t->p[t->n++] = (tpiece)RANGE(P + i * C + 6 * r, P + i * C + 6 * r + 6);
        }
        /* prefix and suffix as a third rank, to stay within 6 pieces a rank */
        v1.world = 3;
        v1.r[2] = (trank){2, {PREFIX, SUFFIX}};
        CHECK(save_layout(folder, 110, &v1) == 0, "save version 1 layout");
        snprintf(meta, sizeof meta, "%s/step-110/metadata.json", folder);
        write_str(meta, "{\"format\": \"titan-checkpoint\", \"version\": 1, \"step\": 110, "
                        "\"world_size\": 3, \"train\": {}}");
        for (int l = 0; l < N_LAYOUTS; l++) {
            err.msg[0] = 0;
            CHECK(load_layout(folder, 110, &layouts[l], &err), "version 1 -> %s: %s",
                  layouts[l].name, err.msg);
        }
        /* a 2-D tensor has no meaning in version 1 */
        write_raw(folder, 110, 2, R, 6, "5", "84", "12");
        CHECK(!load_layout(folder, 110, &layouts[3], &err) &&
                  has(err.msg, "rank-00000.safetensors", "\"a@1\"", "1-D"),
              "version 1 with a 2-D tensor: %s", err.msg);
    }

    /* hostile shards, in a copy of the tp2 save (rank 0: a, a@1 = its columns, a@2) */
    CHECK(save_layout(folder, 120, &layouts[5]) == 0, "save tp2");
    CHECK(load_layout(folder, 120, &layouts[3], NULL), "tp2 loads before tampering");
    /* as a version 2 checkpoint (no shard identities), so that each piece's own check is what
     * refuses it: a version 3 one refuses any rewritten shard first (shard identity, below) */
    char v2[256];
    snprintf(meta, sizeof meta, "%s/step-120/metadata.json", folder);
    snprintf(v2, sizeof v2,
             "{\"format\": \"titan-checkpoint\", \"version\": 2, \"step\": 120, "
             "\"world_size\": %d, \"train\": {}}",
             layouts[5].world);
    write_str(meta, v2);
    CHECK(load_layout(folder, 120, &layouts[3], NULL), "tp2 loads as version 2");
    struct {
        const char *what;
        int ndim;
        size_t rows, row_len;
        const char *off, *gn, *stride, *expect;
    } bad[] = {
        /* rank 0's columns one wider: they overlap rank 1's first column */
        {"overlap", 2, R, 7, "5", "84", "12", "overlap"},
        {"past the buffer", 2, R, 6, "20", "84", "12", "exceed"},
        {"offset past the buffer", 1, 1, 6, "84", "84", NULL, "exceed"},
        {"stride below the row length", 2, R, 6, "5", "84", "5", "stride 5 is smaller"},
        {"no stride", 2, R, 6, "5", "84", NULL, "a@1.stride"},
        {"another buffer size", 2, R, 6, "5", "85", "12", "85"},
        {"a row missing", 2, R - 1, 6, "5", "84", "12", "incomplete"},
        {"one row, stride 0: a row missing", 2, 1, 6, "5", "84", "0", "incomplete"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        write_raw(folder, 120, bad[i].ndim, bad[i].rows, bad[i].row_len, bad[i].off, bad[i].gn,
                  bad[i].stride);
        err.msg[0] = 0;
        const int loaded = load_layout(folder, 120, &layouts[3], &err);
        printf("%s: %s\n", bad[i].what, err.msg);
        CHECK(!loaded && strstr(err.msg, bad[i].expect), "%s: %s", bad[i].what, err.msg);
        if (strcmp(bad[i].expect, "incomplete") != 0)
            CHECK(has(err.msg, "rank-00000.safetensors", "a@1", NULL), "%s: names: %s", bad[i].what,
                  err.msg);
        else
            CHECK(has(err.msg, "step-120", "buffer \"a\"", NULL), "%s: names: %s", bad[i].what,
                  err.msg);
    }
}

/* What a killed run leaves, finished by ckpt_step_cleanup: a re-save cut between its two
 * renames (step-2 moved to step-2.old, no step-2) is put back and loads; a step-1.old beside
 * a good step-1, a crashed save's step-3.tmp and a killed prune's step-4.deleting (holding a
 * link to a file outside and one to step-1) are removed, the link targets untouched. */
/* Bits of bf16(x), round to nearest even (x finite), widened back to fp32. */
static float bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}

/* A buffer stored as BF16 / F16 (a model-only save in export_dtype) by 2 ranks: the shard
 * tensors carry that dtype, and a load by 3 ranks gets every element rounded once (bf16: the
 * round-to-nearest-even formula above; f16: exact for these small integers plus halves). */
static void test_half_pieces(const char *folder) {
    const size_t n = 1000;
    float *a = malloc(n * sizeof *a), *back = calloc(n, sizeof *back);
    for (size_t i = 0; i < n; i++) a[i] = 1.0f + (float)i * 1.001e-3f;
    for (int h = 0; h < 2; h++) {
        const ckpt_dtype dt = h ? CKPT_F16 : CKPT_BF16;
        const int64_t step = 300 + h;
        base_err err;
        int rc = ckpt_step_begin(folder, step, 0, &err);
        for (int r = 0; rc == 0 && r < 2; r++) {
            const size_t lo = n * (size_t)r / 2, hi = n * (size_t)(r + 1) / 2;
            ckpt_step_buf b = {"a", a + lo, NULL, lo, hi - lo, n, 1, hi - lo, dt, 0};
            rc = ckpt_step_write_shard(folder, step, r, &b, 1, &err);
        }
        if (rc == 0) rc = ckpt_step_commit(folder, step, 2, "{}", 0, &err);
        CHECK(rc == 0, "save %s pieces: %s", ckpt_dtype_name(dt), err.msg);
        char path[512];
        snprintf(path, sizeof path, "%s/step-%lld/rank-00001.safetensors", folder, (long long)step);
        ckpt_file f;
        CHECK(ckpt_open(&f, path, &err) == 0 && f.n_tensors == 1 && f.tensors[0].dtype == dt,
              "the %s piece is stored as %s", ckpt_dtype_name(dt), ckpt_dtype_name(dt));
        ckpt_close(&f);
        memset(back, 0, n * sizeof *back);
        for (int r = 0; r < 3; r++) {
            const size_t lo = n * (size_t)r / 3, hi = n * (size_t)(r + 1) / 3;
            ckpt_step_buf b = {"a", NULL, back + lo, lo, hi - lo, n, 1, hi - lo, CKPT_F32, 0};
            CHECK(ckpt_step_load(folder, step, &b, 1, &err) == 0, "load %s pieces: %s",
                  ckpt_dtype_name(dt), err.msg);
        }
        int ok = 1;
        for (size_t i = 0; i < n; i++) {
            uint16_t hb;
            ckpt_f32_to_half_n(&a[i], &hb, 1, 0);
            const float want = h ? ckpt_f16_to_f32(hb) : bf16_round(a[i]);
            ok &= back[i] == want && (h || back[i] != a[i] || bf16_round(a[i]) == a[i]);
        }
        CHECK(ok, "%s pieces load as the values rounded once", ckpt_dtype_name(dt));
    }
    free(a);
    free(back);
}

static void test_cleanup(const char *base, size_t n) {
    char folder[300], p[500], q[500], outside[300];
    base_err err;
    snprintf(folder, sizeof folder, "%s/leftovers", base);
    snprintf(outside, sizeof outside, "%s/outside.txt", base);
    write_str(outside, "keep");
    CHECK(save(folder, 1, n, 1, 0) == 0 && save(folder, 2, n, 1, 0) == 0, "save 1, 2");
    snprintf(p, sizeof p, "%s/step-2", folder);
    snprintf(q, sizeof q, "%s/step-2.old", folder);
    CHECK(rename(p, q) == 0, "rename");
    snprintf(p, sizeof p, "%s/step-1.old", folder);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/step-1.old/metadata.json", folder);
    write_str(p, "{}");
    snprintf(p, sizeof p, "%s/step-3.tmp", folder);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/step-3.tmp/rank-00000.safetensors", folder);
    write_str(p, "partial");
    snprintf(p, sizeof p, "%s/step-4.deleting", folder);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/step-4.deleting/a", folder);
    CHECK(symlink(outside, p) == 0, "symlink");
    snprintf(p, sizeof p, "%s/step-4.deleting/b", folder);
    snprintf(q, sizeof q, "%s/step-1", folder);
    CHECK(symlink(q, p) == 0, "symlink");
    CHECK(ckpt_step_cleanup(folder, &err) == 0, "cleanup: %s", err.msg);
    const char *gone[3] = {"step-1.old", "step-3.tmp", "step-4.deleting"};
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", folder, gone[i]);
        CHECK(access(p, F_OK) != 0, "%s is left", gone[i]);
    }
    snprintf(p, sizeof p, "%s/step-2.old", folder);
    CHECK(access(p, F_OK) != 0 && load_check(folder, 2, n, 1), "step-2 was not put back");
    CHECK(load_check(folder, 1, n, 1), "step-1 (a link's target) no longer loads");
    FILE *f = fopen(outside, "r");
    char buf[8] = "";
    CHECK(f && fgets(buf, sizeof buf, f) && !strcmp(buf, "keep"), "the outside file changed");
    if (f) fclose(f);
}

/* CRC-32C bit by bit (Castagnoli polynomial, reflected 0x82f63b78): the reference. */
static uint32_t crc_bitwise(const unsigned char *p, size_t n) {
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    }
    return ~c;
}

static void flip_byte(const char *path, long at) {
    FILE *f = fopen(path, "r+b");
    int c = f && fseek(f, at, SEEK_SET) == 0 ? fgetc(f) : EOF;
    if (c != EOF && fseek(f, at, SEEK_SET) == 0) fputc(c ^ 0x10, f);
    if (f) fclose(f);
}

static void test_checksums(const char *folder, size_t n) {
    /* the CRC itself: the standard check value, odd lengths and alignments, chaining */
    CHECK(base_crc32c(0, "123456789", 9) == 0xe3069283u, "CRC-32C check value: %08x",
          base_crc32c(0, "123456789", 9));
    unsigned char buf[4099];
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (unsigned char)(i * 131 + (i >> 7));
    const size_t lens[] = {0, 1, 7, 8, 9, 63, 1000, 4096};
    for (size_t k = 0; k < sizeof lens / sizeof *lens; k++)
        for (size_t off = 0; off < 3; off++)
            CHECK(base_crc32c(0, buf + off, lens[k]) == crc_bitwise(buf + off, lens[k]),
                  "CRC-32C of %zu bytes at offset %zu", lens[k], off);
    CHECK(base_crc32c(base_crc32c(0, buf, 1001), buf + 1001, 3000) == crc_bitwise(buf, 4001),
          "CRC-32C continued over a second part");

    /* every shard tensor records the CRC of its bytes */
    char path[400];
    base_err err;
    CHECK(save(folder, 40, n, 2, 0) == 0, "save step 40");
    snprintf(path, sizeof path, "%s/step-40/rank-00001.safetensors", folder);
    ckpt_file f;
    CHECK(ckpt_open(&f, path, &err) == 0, "open: %s", err.msg);
    const ckpt_tensor *t = ckpt_find(&f, "a");
    const char *rec = ckpt_meta_get(&f, "a.crc32c");
    char want[16] = "";
    if (t) snprintf(want, sizeof want, "%08x", crc_bitwise(t->data, t->nbytes));
    CHECK(t && rec && !strcmp(rec, want), "a.crc32c is %s, the bytes' CRC-32C %s",
          rec ? rec : "(none)", want);
    const long at = t ? (long)((const unsigned char *)t->data - f.map) + 17 : 0;
    ckpt_close(&f);

    /* shard identity (version 3): rank 1's shard of step 50 put into step 40 (a partial copy
     * or restore) is refused by the load and by inspect's check, naming the file, although
     * every tensor's own CRC matches; put back, it loads */
    {
        char other[400], keep[420];
        CHECK(save(folder, 50, n, 2, 0) == 0, "save step 50");
        snprintf(other, sizeof other, "%s/step-50/rank-00001.safetensors", folder);
        snprintf(keep, sizeof keep, "%s.keep", path);
        CHECK(rename(path, keep) == 0 && link(other, path) == 0, "swap in step 50's shard");
        float *x = calloc(n, sizeof *x);
        ckpt_step_buf bx = {"a", NULL, x, 0, n, n, 0, 0, CKPT_F32, 0};
        CHECK(ckpt_step_load(folder, 40, &bx, 1, &err) != 0 &&
                  has(err.msg, path, "not the shard", "metadata.json recorded"),
              "a shard of another step loaded or was not named: %s", err.msg);
        CHECK(ckpt_step_check_shards(folder, 40, &err) != 0 &&
                  has(err.msg, path, "another step or run", NULL),
              "shard check passed a shard of another step: %s", err.msg);
        CHECK(ckpt_step_check_shards(folder, 50, &err) == 0, "its own step: %s", err.msg);
        CHECK(unlink(path) == 0 && rename(keep, path) == 0, "restore");
        CHECK(ckpt_step_check_shards(folder, 40, &err) == 0, "restored: %s", err.msg);
        CHECK(load_check(folder, 40, n, 1), "the restored shard loads");
        free(x);
    }

    /* one flipped byte of rank 1's data: the load names the file and the tensor */
    flip_byte(path, at);
    float *a = calloc(n, sizeof *a);
    ckpt_step_buf b = {"a", NULL, a, 0, n, n, 0, 0, CKPT_F32, 0};
    CHECK(ckpt_step_load(folder, 40, &b, 1, &err) != 0 && has(err.msg, path, "\"a\"", "corrupt"),
          "a corrupt shard loaded or was not named: %s", err.msg);
    flip_byte(path, at); /* restored: loads again */
    CHECK(load_check(folder, 40, n, 1), "the restored shard loads");

    /* a malformed recorded value fails naming the key; no value at all (an older checkpoint,
     * written without checksums) loads */
    const char *bad[] = {"xyz", "0x123456", "1234567g", "123456789"};
    float *d = malloc(n * sizeof *d);
    for (size_t i = 0; i < n; i++) d[i] = (float)i + 40.0f;
    for (size_t i = 0; i <= sizeof bad / sizeof *bad; i++) {
        char gn[32];
        snprintf(gn, sizeof gn, "%zu", n);
        ckpt_wtensor w = {"a", CKPT_F32, 1, {(int64_t)n}, d, 0, 0};
        ckpt_kv kv[3] = {{"a.offset", "0"}, {"a.global_numel", gn}, {"a.crc32c", NULL}};
        kv[2].value = i < sizeof bad / sizeof *bad ? bad[i] : NULL;
        snprintf(path, sizeof path, "%s/step-40/rank-00000.safetensors", folder);
        CHECK(ckpt_write(path, &w, 1, kv, kv[2].value ? 3 : 2, &err) == 0, "write: %s", err.msg);
        snprintf(path, sizeof path, "%s/step-40/metadata.json", folder);
        write_str(path, "{\"format\": \"titan-checkpoint\", \"version\": 2, \"step\": 40, "
                        "\"world_size\": 1, \"shards\": [\"rank-00000.safetensors\"], "
                        "\"train\": {}}");
        if (kv[2].value)
            CHECK(ckpt_step_load(folder, 40, &b, 1, &err) != 0 &&
                      has(err.msg, "rank-00000", "a.crc32c", "not 8 hex digits"),
                  "crc32c \"%s\" accepted or unclear: %s", bad[i], err.msg);
        else
            CHECK(load_check(folder, 40, n, 1), "a shard without checksums must load");
    }
    /* a file that records a CRC for another tensor but none for "a" (its key dropped or
     * renamed, as one flipped bit of the header does): refused, not loaded unchecked */
    for (int renamed = 0; renamed <= 1; renamed++) {
        char gn[32], crc_b[16];
        snprintf(gn, sizeof gn, "%zu", n);
        snprintf(crc_b, sizeof crc_b, "%08x", crc_bitwise((const unsigned char *)d, n * sizeof *d));
        ckpt_wtensor w[2] = {{"a", CKPT_F32, 1, {(int64_t)n}, d, 0, 0},
                             {"b", CKPT_F32, 1, {(int64_t)n}, d, 0, 0}};
        ckpt_kv kv[4] = {
            {"a.offset", "0"}, {"a.global_numel", gn}, {"b.crc32c", crc_b}, {"a.crc32b", crc_b}};
        snprintf(path, sizeof path, "%s/step-40/rank-00000.safetensors", folder);
        CHECK(ckpt_write(path, w, 2, kv, 3 + renamed, &err) == 0, "write: %s", err.msg);
        CHECK(ckpt_step_load(folder, 40, &b, 1, &err) != 0 &&
                  has(err.msg, "rank-00000", "no \"a.crc32c\"", "damaged or edited header"),
              "a tensor without its CRC beside checked ones loaded (renamed key %d): %s", renamed,
              err.msg);
    }
    free(d);
    free(a);
}

int main(void) {
    check_tmpdir(dir, sizeof dir, "titan_test_ckpt_step");
    char folder[300], path[400];
    snprintf(folder, sizeof folder, "%s/ck", dir);
    base_err err;
    const size_t n = 1001;

    {
        char bf[320];
        snprintf(bf, sizeof bf, "%s/bf16", dir);
        bf16_buffers(bf);
    }
    CHECK(save(folder, 10, n, 2, 0) == 0, "save as 2 ranks");
    for (int w = 1; w <= 3; w++) CHECK(load_check(folder, 10, n, w), "reshard 2 -> %d ranks", w);
    int64_t latest;
    CHECK(ckpt_step_latest(folder, &latest) == 0 && latest == 10, "latest 10");

    /* incomplete: a crashed save (step-20.tmp), a step folder without metadata */
    snprintf(path, sizeof path, "%s/step-20.tmp", folder);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/step-30", folder);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/step-x1", folder);
    mkdir(path, 0755);
    CHECK(ckpt_step_latest(folder, &latest) == 0 && latest == 10,
          "incomplete folders must be ignored (got %lld)", (long long)latest);

    /* same step again replaces it; keep_latest_k = 2 prunes the oldest complete ones */
    CHECK(save(folder, 10, n, 1, 0) == 0 && load_check(folder, 10, n, 2), "re-save step 10");
    CHECK(save(folder, 11, n, 1, 2) == 0 && save(folder, 12, n, 3, 2) == 0, "save 11, 12");
    snprintf(path, sizeof path, "%s/step-10", folder);
    CHECK(access(path, F_OK) != 0, "step-10 should be pruned (keep 2)");
    CHECK(load_check(folder, 11, n, 1) && load_check(folder, 12, n, 2), "11 and 12 kept");
    CHECK(ckpt_step_latest(folder, &latest) == 0 && latest == 12, "latest 12");
    snprintf(path, sizeof path, "%s/step-30", folder);
    CHECK(access(path, F_OK) == 0, "an incomplete folder is not pruned as a checkpoint");

    /* metadata problems */
    char *tj;
    int world;
    CHECK(ckpt_step_read_meta(folder, 12, &tj, &world, &err) == 0 && world == 3 &&
              strstr(tj, "\"x\""),
          "read meta: %s", err.msg);
    free(tj);
    snprintf(path, sizeof path, "%s/step-12/metadata.json", folder);
    const char *bad[] = {"{",
                         "[]",
                         "{\"format\": \"x\"}",
                         "{\"format\": \"titan-checkpoint\", \"version\": 3, \"step\": 12, "
                         "\"world_size\": 3, \"train\": {}}",
                         "{\"format\": \"titan-checkpoint\", \"version\": 1, \"step\": 13, "
                         "\"world_size\": 3, \"train\": {}}",
                         "{\"format\": \"titan-checkpoint\", \"version\": 1, \"step\": 12, "
                         "\"world_size\": 0, \"train\": {}}"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        write_str(path, bad[i]);
        CHECK(ckpt_step_read_meta(folder, 12, &tj, &world, &err) != 0 &&
                  strstr(err.msg, "metadata.json"),
              "bad metadata %zu accepted or unnamed: %s", i, err.msg);
    }
    /* a missing shard, a shard with the wrong size */
    write_str(path, "{\"format\": \"titan-checkpoint\", \"version\": 1, \"step\": 12, "
                    "\"world_size\": 4, \"train\": {}}");
    CHECK(!load_check(folder, 12, n, 1), "a missing rank-00003 shard must fail");
    CHECK(!load_check(folder, 11, n + 1, 1), "a buffer of another size must fail");
    /* two ranks claiming the same elements: [0, 600) and [0, 401) add up to n but leave
     * [600, n) unwritten */
    const size_t ends[2] = {600, 401};
    float *a = calloc(n, sizeof *a);
    int rc = ckpt_step_begin(folder, 14, 0, &err);
    for (int r = 0; rc == 0 && r < 2; r++) {
        ckpt_step_buf b = {"a", a, NULL, 0, ends[r], n, 0, 0, CKPT_F32, 0};
        rc = ckpt_step_write_shard(folder, 14, r, &b, 1, &err);
    }
    if (rc == 0) rc = ckpt_step_commit(folder, 14, 2, "{}", 0, &err);
    CHECK(rc == 0, "save overlapping: %s", err.msg);
    ckpt_step_buf want = {"a", NULL, a, 0, n, n, 0, 0, CKPT_F32, 0};
    CHECK(ckpt_step_load(folder, 14, &want, 1, &err) != 0 && strstr(err.msg, "step-14") &&
              strstr(err.msg, "overlap: both hold element 0"),
          "overlapping pieces accepted or unclear: %s", err.msg);
    free(a);

    /* an unwritable folder (a path through a regular file) fails and leaves 11 intact */
    snprintf(path, sizeof path, "%s/file", dir);
    write_str(path, "x");
    snprintf(path, sizeof path, "%s/file/ck", dir);
    CHECK(save(path, 13, n, 1, 1) != 0, "saving under a file must fail");
    CHECK(load_check(folder, 11, n, 1), "step 11 still loads");

    test_strided(folder);
    test_half_pieces(folder);
    test_cleanup(dir, n);
    test_checksums(folder, n);

    check_tmpdir_remove(dir);
    return check_report("test_ckpt_step");
}
