/* Training checkpoint folders (src/checkpoint/step.c): a checkpoint written by 2 ranks loads
 * into 1 and 3 ranks (resharding), incomplete folders are never picked, keep_latest_k
 * prunes only complete old ones, saving the same step twice replaces it, malformed
 * metadata and shards give errors naming the file, and an unwritable folder fails cleanly
 * leaving the previous checkpoint loadable. */
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
        ckpt_step_buf b = {"a", a + lo, NULL, lo, hi - lo, n};
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
        ckpt_step_buf b = {"a", NULL, a + lo, lo, hi - lo, n};
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

static void write_str(const char *path, const char *s) {
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(s, f);
        fclose(f);
    }
}

int main(void) {
    check_tmpdir(dir, sizeof dir, "titan_test_ckpt_step");
    char folder[300], path[400];
    snprintf(folder, sizeof folder, "%s/ck", dir);
    base_err err;
    const size_t n = 1001;

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
                         "{\"format\": \"titan-checkpoint\", \"version\": 2}",
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
        ckpt_step_buf b = {"a", a, NULL, 0, ends[r], n};
        rc = ckpt_step_write_shard(folder, 14, r, &b, 1, &err);
    }
    if (rc == 0) rc = ckpt_step_commit(folder, 14, 2, "{}", 0, &err);
    CHECK(rc == 0, "save overlapping: %s", err.msg);
    ckpt_step_buf want = {"a", NULL, a, 0, n, n};
    CHECK(ckpt_step_load(folder, 14, &want, 1, &err) != 0 && strstr(err.msg, "step-14") &&
              strstr(err.msg, "two pieces hold elements 0..400"),
          "overlapping pieces accepted or unclear: %s", err.msg);
    free(a);

    /* an unwritable folder (a path through a regular file) fails and leaves 11 intact */
    snprintf(path, sizeof path, "%s/file", dir);
    write_str(path, "x");
    snprintf(path, sizeof path, "%s/file/ck", dir);
    CHECK(save(path, 13, n, 1, 1) != 0, "saving under a file must fail");
    CHECK(load_check(folder, 11, n, 1), "step 11 still loads");

    check_tmpdir_remove(dir);
    return check_report("test_ckpt_step");
}
