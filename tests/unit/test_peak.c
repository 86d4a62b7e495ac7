/* The MFU peak (src/train/peak.c) without timing anything: the machine key, where the cache
 * lives, the cache file read back, refused when corrupt, hostile or implausible and replaced
 * atomically (a symlink is replaced, never followed), the rule that the cache only raises
 * the peak, --peak-tflops winning, and, under mpirun (tests/scripts/dist_peak.sh), rank 0's
 * figure reaching every rank with only rank 0 measuring. The measurement is a stand-in
 * function returning fixed figures, so no result depends on the machine's load. */
#include <dirent.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "train/train.h"

static char dir[256];
static int calls;   /* stand-in measurements made on this rank */
static double fake; /* what the stand-in measures */

static double measure_fake(void) {
    calls++;
    return fake;
}

static const char *path_of(const char *name) {
    return check_path(dir, name);
}

static void write_str(const char *path, const char *s) {
    FILE *f = fopen(path, "wb");
    if (f) {
        fputs(s, f);
        fclose(f);
    }
}

static void test_key_and_path(void) {
    char k2[320], k4[320], p[512];
    train_peak_key(2, k2, sizeof k2);
    train_peak_key(4, k4, sizeof k4);
    const size_t n = strlen(k2);
    CHECK(n > 12 && !strcmp(k2 + n - 12, " | 2 threads") && k2[0] != ' ', "key '%s'", k2);
    CHECK(strcmp(k2, k4) != 0, "2 and 4 threads share the key '%s'", k2);
    setenv("XDG_CACHE_HOME", "/xdg", 1);
    setenv("HOME", "/tmp", 1);
    CHECK(train_peak_cache_path(p, sizeof p) == 0 && !strcmp(p, "/xdg/titan/peak_flops.json"),
          "XDG path: %s", p);
    setenv("XDG_CACHE_HOME", "relative", 1); /* not absolute: ignored, as the XDG spec says */
    CHECK(train_peak_cache_path(p, sizeof p) == 0 &&
              !strcmp(p, "/tmp/.cache/titan/peak_flops.json"),
          "HOME path: %s", p);
    setenv("HOME", "/nonexistent-titan-home", 1); /* a daemon's: no cache (root had made it) */
    CHECK(train_peak_cache_path(p, sizeof p) == -1, "a HOME that does not exist: '%s'", p);
    unsetenv("XDG_CACHE_HOME");
    unsetenv("HOME");
    CHECK(train_peak_cache_path(p, sizeof p) == -1 && p[0] == 0, "no home: '%s'", p);
}

static int count_files(const char *d) {
    DIR *dp = opendir(d);
    int n = 0;
    struct dirent *e;
    while (dp && (e = readdir(dp)))
        if (e->d_name[0] != '.') n++;
    if (dp) closedir(dp);
    return n;
}

static void test_cache_file(void) {
    base_err err;
    const char *cache = path_of("c/titan/peak_flops.json");
    CHECK(train_peak_cache_read(cache, "K", 2) == 0, "missing file reads as no value");
    CHECK(train_peak_cache_write(cache, "K", 123456789012.25, &err) == 0, "write: %s", err.msg);
    CHECK(train_peak_cache_read(cache, "K", 2) == 123456789012.25, "read back exactly");
    CHECK(train_peak_cache_read(cache, "K2", 2) == 0, "another key has no value");
    CHECK(train_peak_cache_write(cache, "K2", 5e10, &err) == 0, "second key: %s", err.msg);
    CHECK(train_peak_cache_read(cache, "K", 2) == 123456789012.25 &&
              train_peak_cache_read(cache, "K2", 2) == 5e10,
          "both keys kept");
    CHECK(count_files(path_of("c/titan")) == 1, "a temporary was left beside the cache");

    /* hostile or corrupt: ignored (0), then replaced by the next write */
    const char *bad[] = {
        "not json {",
        "[]",
        "{\"version\": 2, \"peaks\": {\"K\": {\"flops\": 1e11}}}",
        "{\"version\": 1, \"peaks\": [1]}",
        "{\"version\": 1, \"peaks\": {\"K\": {\"flops\": \"fast\"}}}",
        "{\"version\": 1, \"peaks\": {\"K\": {\"flops\": -5}}}",
        "{\"version\": 1, \"peaks\": {\"K\": {\"flops\": 0}}}",
        "{\"version\": 1, \"peaks\": {\"K\": {\"flops\": 1e30}}}", /* no 2 threads do that */
        "{\"version\": 1, \"peaks\": {\"K\": {}}}",
        "{\"version\": 1, \"peaks\": {\"K\": {\"flops\": 1e11}, \"K\": {\"flops\": 2e11}}}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        write_str(cache, bad[i]);
        CHECK(train_peak_cache_read(cache, "K", 2) == 0, "accepted '%s'", bad[i]);
    }
    write_str(cache, "{\"version\": 1, \"peaks\": {\"K\": {\"flops\": 7e11}}}");
    CHECK(train_peak_cache_read(cache, "K", 2) == 7e11, "768 GFLOP/s is plausible on 2 threads");
    CHECK(train_peak_cache_read(cache, "K", 1) == 0, "... and not on 1 thread");
    FILE *f = fopen(cache, "wb"); /* larger than any cache: not read */
    for (int i = 0; f && i < (2 << 20) / 8; i++) fputs("        ", f);
    if (f) fclose(f);
    CHECK(train_peak_cache_read(cache, "K", 2) == 0, "a 2 MiB file was read");
    CHECK(train_peak_cache_write(cache, "K", 9e10, &err) == 0 &&
              train_peak_cache_read(cache, "K", 2) == 9e10,
          "write over a corrupt file: %s", err.msg);

    /* a symlink at the cache path is replaced, its target untouched */
    write_str(path_of("target"), "keep");
    unlink(cache);
    CHECK(symlink(path_of("target"), cache) == 0, "symlink");
    CHECK(train_peak_cache_write(cache, "K", 1e11, &err) == 0, "write: %s", err.msg);
    struct stat st;
    char buf[8] = {0};
    FILE *t = fopen(path_of("target"), "rb");
    if (t) {
        CHECK(fread(buf, 1, sizeof buf - 1, t) == 4 && !strcmp(buf, "keep"), "target changed");
        fclose(t);
    }
    CHECK(lstat(cache, &st) == 0 && S_ISREG(st.st_mode), "the link was not replaced by a file");
}

static void test_choose(void) {
    int w;
    CHECK(train_peak_choose(1e11, 0, &w) == 1e11 && w == 1, "no cache: the measurement, written");
    CHECK(train_peak_choose(5e10, 1e11, &w) == 1e11 && w == 0, "busy run: the cache, kept");
    CHECK(train_peak_choose(2e11, 1e11, &w) == 2e11 && w == 1, "quieter run: replaces the cache");
    CHECK(train_peak_choose(1e11, 1e11, &w) == 1e11 && w == 0, "equal: not rewritten");
    CHECK(train_peak_choose(0, 1e11, &w) == 1e11 && w == 0, "failed measurement: the cache");
    CHECK(train_peak_choose(0, 0, &w) == 0 && w == 0, "nothing: 0, not written");
}

/* One process: --peak-tflops, then a sequence of runs with the stand-in measurement. */
static void test_resolve(dist_comm *comm) {
    base_err err;
    train_peak pk;
    setenv("XDG_CACHE_HOME", path_of("r"), 1);
    char key[320];
    train_peak_key(2, key, sizeof key);
    const char *cache = path_of("r/titan/peak_flops.json");
    calls = 0;
    CHECK(train_peak_resolve(5e12, 2, OPS_PREC_F32, comm, measure_fake, &pk, &err) == 0 &&
              pk.flops == 5e12 && !strcmp(pk.how, "configured") && calls == 0,
          "configured: %g (%s), %d measurements", pk.flops, pk.how, calls);
    CHECK(train_peak_cache_read(cache, key, 2) == 0, "configured runs write no cache");
    const struct {
        double measured, peak, cached;
        const char *how;
    } runs[] = {{1e11, 1e11, 1e11, "measured"},
                {4e10, 1e11, 1e11, "cached from a quieter run; 40.0 measured now"},
                {3e11, 3e11, 3e11, "measured"},
                {0, 3e11, 3e11, "cached"}};
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
        fake = runs[i].measured;
        calls = 0;
        int rc = train_peak_resolve(0, 2, OPS_PREC_F32, comm, measure_fake, &pk, &err);
        CHECK(rc == 0 && pk.flops == runs[i].peak && pk.measured == runs[i].measured &&
                  calls == 1 && strstr(pk.how, runs[i].how),
              "run %zu: peak %g measured %g (%s), %d measurements: %s", i, pk.flops, pk.measured,
              pk.how, calls, rc ? err.msg : "");
        CHECK(train_peak_cache_read(cache, key, 2) == runs[i].cached, "run %zu: cache %g", i,
              train_peak_cache_read(cache, key, 2));
    }
    CHECK(train_peak_cache_read(cache, "other | 2 threads", 2) == 0, "another machine's key");
    setenv("XDG_CACHE_HOME", path_of("empty"), 1);
    fake = 0;
    CHECK(train_peak_resolve(0, 2, OPS_PREC_F32, comm, measure_fake, &pk, &err) != 0 &&
              strstr(err.msg, "--peak-tflops"),
          "nothing measured, nothing cached: an error naming --peak-tflops");
}

/* Under mpirun: rank r's stand-in measures (r + 1) x 100 GFLOP/s; every rank must get rank
 * 0's 100, from one measurement in all; then a busy rank 0 (50) gets the cached 100. The cache
 * folder is argv[1], shared by the ranks. */
static void test_ranks(dist_comm *comm, const char *cache_dir) {
    base_err err;
    train_peak pk;
    const int rank = dist_comm_rank(comm);
    setenv("XDG_CACHE_HOME", cache_dir, 1);
    const double first[2] = {1e11, 5e10};
    for (int run = 0; run < 2; run++) {
        fake = (rank + 1) * first[run];
        calls = 0;
        int rc = train_peak_resolve(0, 2, OPS_PREC_F32, comm, measure_fake, &pk, &err);
        double total = calls, got[2] = {pk.flops, -pk.flops};
        dist_allreduce_f64(comm, &total, 1);
        dist_allreduce_max_f64(comm, got, 2); /* max and -min */
        printf("rank %d run %d: peak %.1f GFLOP/s (%s)\n", rank, run, pk.flops / 1e9, pk.how);
        CHECK(rc == 0 && pk.flops == 1e11, "rank %d run %d: peak %g, not rank 0's 1e11", rank, run,
              pk.flops);
        CHECK(got[0] == -got[1], "run %d: ranks differ: %g .. %g", run, -got[1], got[0]);
        CHECK(total == 1, "run %d: %g measurements over the ranks, not 1 (rank 0's)", run, total);
    }
}

int main(int argc, char **argv) {
    base_err err;
    dist_mesh mesh;
    if (dist_init(&argc, &argv, &err) ||
        dist_mesh_init(&mesh, &(dist_mesh_cfg){1, -1, 1, 1, 1, 1}, &err)) {
        printf("FAIL dist: %s\n", err.msg);
        return 1;
    }
    if (mesh.world > 1) {
        test_ranks(mesh.world_comm, argc > 1 ? argv[1] : "/nonexistent");
    } else {
        check_tmpdir(dir, sizeof dir, "titan_test_peak");
        base_log_set_level(BASE_LOG_ERROR); /* the refused cache files each warn */
        test_key_and_path();
        test_cache_file();
        test_choose();
        test_resolve(mesh.world_comm);
        check_tmpdir_remove(dir);
    }
    dist_mesh_free(&mesh);
    dist_finalize();
    return check_report("test_peak");
}
