/* base/fs.c: removal never follows a link (at the top, inside, or nested); an atomic write
 * over a planted "<path>.tmp" link (or a link at path) leaves the link's target alone and
 * path a regular file; an aborted write leaves nothing; a folder lock is exclusive (a
 * second take fails naming the holder's pid), records the pid and is gone after unlock.
 * Special files are never replaced: a FIFO, a folder, a link to a FIFO or to /dev/null at an
 * output path is refused with its kind named and left as it was (as root, `--metrics
 * /dev/full` used to replace the device node with a file). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "check.h"

static char dir[256];

static void put(const char *path, const char *s) {
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(s, f);
        fclose(f);
    }
}

/* Whether path holds exactly s. */
static int holds(const char *path, const char *s) {
    char buf[256] = "";
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return !strcmp(buf, s);
}

static int is_regular(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int exists(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0;
}

static void test_remove_tree(void) {
    char p[600], q[600], victim[700], vdir[400];
    base_err err;
    snprintf(vdir, sizeof vdir, "%s/outside", dir);
    snprintf(victim, sizeof victim, "%s/keep", vdir);
    mkdir(vdir, 0755);
    put(victim, "keep");
    /* a tree with links to the outside at two depths, and a link as the top itself */
    snprintf(p, sizeof p, "%s/t", dir);
    mkdir(p, 0755);
    snprintf(q, sizeof q, "%s/t/a", dir);
    mkdir(q, 0755);
    snprintf(q, sizeof q, "%s/t/a/b", dir);
    mkdir(q, 0755);
    snprintf(q, sizeof q, "%s/t/file", dir);
    put(q, "x");
    snprintf(q, sizeof q, "%s/t/link_dir", dir);
    CHECK(symlink(vdir, q) == 0, "symlink");
    snprintf(q, sizeof q, "%s/t/a/b/link_file", dir);
    CHECK(symlink(victim, q) == 0, "symlink");
    CHECK(base_remove_tree(p, &err) == 0, "remove_tree: %s", err.msg);
    CHECK(!exists(p), "%s still exists", p);
    CHECK(holds(victim, "keep"), "the target of a link inside was changed");
    snprintf(p, sizeof p, "%s/top", dir);
    CHECK(symlink(vdir, p) == 0, "symlink");
    CHECK(base_remove_tree(p, &err) == 0, "remove_tree of a link: %s", err.msg);
    CHECK(!exists(p) && holds(victim, "keep"), "a top-level link was followed");
    CHECK(base_remove_tree(p, &err) == 0, "an absent path is not an error");
}

static void test_atomic(void) {
    char path[400], tmp[500], victim[400];
    base_err err;
    snprintf(victim, sizeof victim, "%s/victim", dir);
    snprintf(path, sizeof path, "%s/out.bin", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    put(victim, "victim");
    CHECK(symlink(victim, tmp) == 0, "symlink");
    CHECK(base_write_file_atomic(path, "new", 3, &err) == 0, "atomic write: %s", err.msg);
    CHECK(holds(victim, "victim"), "the write went through the .tmp link");
    CHECK(is_regular(path) && holds(path, "new"), "%s is not a regular file holding the data",
          path);
    CHECK(!exists(tmp), "%s is left", tmp);
    /* a link at path itself is replaced, not written through */
    unlink(path);
    CHECK(symlink(victim, path) == 0, "symlink");
    CHECK(base_write_file_atomic(path, "again", 5, &err) == 0, "atomic write: %s", err.msg);
    CHECK(holds(victim, "victim") && is_regular(path) && holds(path, "again"),
          "a link at the path was written through");
    /* abort: the temporary goes, the file stays as it was */
    base_atomic a;
    CHECK(base_atomic_open(&a, path, &err) == 0, "atomic open: %s", err.msg);
    CHECK(base_write_all(a.fd, "partial", 7) == 0, "write");
    base_atomic_abort(&a);
    CHECK(holds(path, "again") && !exists(tmp), "abort changed the file or left the temporary");
    /* a stream */
    CHECK(base_atomic_open(&a, path, &err) == 0, "atomic open: %s", err.msg);
    FILE *f = base_atomic_stream(&a, &err);
    CHECK(f && fputs("stream", f) >= 0, "stream: %s", err.msg);
    CHECK(base_atomic_commit(&a, &err) == 0, "commit: %s", err.msg);
    CHECK(holds(path, "stream"), "the stream's bytes are not in the file");
    /* base_fopen_new over a link */
    unlink(path);
    CHECK(symlink(victim, path) == 0, "symlink");
    f = base_fopen_new(path, &err);
    CHECK(f != NULL, "fopen_new: %s", err.msg);
    if (f) {
        fputs("log", f);
        fclose(f);
    }
    CHECK(holds(victim, "victim") && is_regular(path) && holds(path, "log"),
          "base_fopen_new wrote through a link");
}

static void test_special(void) {
    char fifo[400], sub[400], lf[400], ln[400];
    base_err err;
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    snprintf(sub, sizeof sub, "%s/sub", dir);
    snprintf(lf, sizeof lf, "%s/link_fifo", dir);
    snprintf(ln, sizeof ln, "%s/link_null", dir);
    CHECK(mkfifo(fifo, 0600) == 0 && mkdir(sub, 0755) == 0 && symlink(fifo, lf) == 0 &&
              symlink("/dev/null", ln) == 0,
          "setup: %s", strerror(errno));
    const struct {
        const char *path, *kind;
        mode_t mode;
    } cases[] = {{fifo, "is a FIFO", S_IFIFO},
                 {sub, "is a folder", S_IFDIR},
                 {lf, "a link to a FIFO", S_IFLNK},
                 {ln, "a link to a character device", S_IFLNK}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct stat st;
        FILE *f = base_fopen_new(cases[i].path, &err);
        CHECK(!f && strstr(err.msg, cases[i].path) && strstr(err.msg, cases[i].kind),
              "base_fopen_new over %s: %s", cases[i].path, f ? "accepted" : err.msg);
        if (f) fclose(f);
        CHECK(base_write_file_atomic(cases[i].path, "x", 1, &err) != 0 &&
                  strstr(err.msg, cases[i].kind),
              "atomic write over %s accepted", cases[i].path);
        CHECK(lstat(cases[i].path, &st) == 0 && (st.st_mode & S_IFMT) == cases[i].mode,
              "%s was replaced", cases[i].path);
    }
    struct stat st;
    CHECK(stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode), "/dev/null is not a device");
}

static void test_lock(void) {
    char sub[512], lockf[600], want[64];
    base_err err;
    snprintf(sub, sizeof sub, "%s/run/deeper", dir);
    snprintf(lockf, sizeof lockf, "%s/%s", sub, BASE_LOCK_FILE);
    base_dir_lock a, b;
    CHECK(base_dir_lock_take(&a, sub, &err) == 0, "lock: %s", err.msg);
    snprintf(want, sizeof want, "%ld\n", (long)getpid());
    CHECK(holds(lockf, want), "the lock file does not hold this pid");
    /* flock locks belong to an open file: a second open, even in this process, is refused */
    CHECK(base_dir_lock_take(&b, sub, &err) != 0, "a held lock was taken twice");
    snprintf(want, sizeof want, "(pid %ld,", (long)getpid());
    CHECK(strstr(err.msg, want) && strstr(err.msg, sub),
          "the refusal does not name pid and "
          "folder: %s",
          err.msg);
    base_dir_unlock(&a);
    CHECK(!exists(lockf), "unlock left %s", lockf);
    CHECK(base_dir_lock_take(&b, sub, &err) == 0, "lock after unlock: %s", err.msg);
    base_dir_unlock(&b);
}

int main(void) {
    check_tmpdir(dir, sizeof dir, "titan_fs");
    test_remove_tree();
    test_atomic();
    test_special();
    test_lock();
    check_tmpdir_remove(dir);
    return check_report("test_fs");
}
