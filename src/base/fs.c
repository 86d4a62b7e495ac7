/* base: writing and removing files without touching anything outside the run (base.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"

/* Deeper than any folder titan writes; bounds the recursion on hostile trees. */
#define MAX_DEPTH 64

/* Empties the directory open as dirfd (shown: its path, for errors; a buffer of cap bytes
 * that is extended in place with each entry's name and restored). Links are unlinked;
 * directories are opened O_NOFOLLOW relative to their parent, so nothing outside is reached
 * even if an entry is swapped for a link meanwhile. */
static int empty_dir(int dirfd, char *shown, size_t cap, int depth, base_err *err) {
    if (depth > MAX_DEPTH) return base_fail(err, "%s: folders nested too deep to remove", shown);
    int dup_fd = dup(dirfd);
    DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
    if (!d) {
        if (dup_fd >= 0) close(dup_fd);
        return base_fail(err, "%s: cannot list to remove: %s", shown, strerror(errno));
    }
    const size_t len = strlen(shown);
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d))) {
        const char *name = e->d_name;
        if (!strcmp(name, ".") || !strcmp(name, "..")) continue;
        snprintf(shown + len, cap - len, "/%s", name);
        struct stat st;
        if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
            if (errno != ENOENT) rc = base_fail(err, "%s: %s", shown, strerror(errno));
        } else if (S_ISDIR(st.st_mode)) {
            const int sub = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub < 0)
                rc = base_fail(err, "%s: cannot open to remove: %s", shown, strerror(errno));
            else {
                rc = empty_dir(sub, shown, cap, depth + 1, err);
                close(sub);
            }
            if (rc == 0 && unlinkat(dirfd, name, AT_REMOVEDIR) != 0 && errno != ENOENT)
                rc = base_fail(err, "%s: cannot remove: %s", shown, strerror(errno));
        } else if (unlinkat(dirfd, name, 0) != 0 && errno != ENOENT) {
            rc = base_fail(err, "%s: cannot remove: %s", shown, strerror(errno));
        }
        shown[len] = 0;
    }
    closedir(d);
    return rc;
}

int base_remove_tree(const char *path, base_err *err) {
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? 0 : base_fail(err, "%s: %s", path, strerror(errno));
    int fd = -1;
    if (S_ISDIR(st.st_mode) &&
        (fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0 && errno != ELOOP &&
        errno != ENOTDIR)
        return base_fail(err, "%s: cannot open to remove: %s", path, strerror(errno));
    if (fd < 0) { /* a file or a link (perhaps swapped in since the lstat): the entry itself */
        if (unlink(path) != 0 && errno != ENOENT)
            return base_fail(err, "%s: cannot remove: %s", path, strerror(errno));
        return 0;
    }
    char shown[4096];
    snprintf(shown, sizeof shown, "%s", path);
    int rc = empty_dir(fd, shown, sizeof shown, 0, err);
    close(fd);
    if (rc == 0 && rmdir(path) != 0 && errno != ENOENT)
        rc = base_fail(err, "%s: cannot remove: %s", path, strerror(errno));
    return rc;
}

/* `--metrics /dev/null` (or /dev/stdout, a link to the terminal or a pipe) would otherwise,
 * as root, replace the system's node with a file. */
int base_output_path_ok(const char *path, base_err *err) {
    struct stat ls, st;
    if (lstat(path, &ls) != 0)
        return errno == ENOENT ? 0
                               : base_fail(err, "%s: cannot inspect: %s", path, strerror(errno));
    const int link = S_ISLNK(ls.st_mode);
    if (link && stat(path, &st) != 0) return 0; /* a dangling link */
    const mode_t m = link ? st.st_mode : ls.st_mode;
    if (S_ISREG(m)) return 0;
    const char *kind = S_ISDIR(m)    ? "a folder"
                       : S_ISCHR(m)  ? "a character device"
                       : S_ISBLK(m)  ? "a block device"
                       : S_ISFIFO(m) ? "a FIFO"
                       : S_ISSOCK(m) ? "a socket"
                                     : "not a regular file";
    return base_fail(err,
                     "%s: %s%s: titan writes regular files only and does not replace it; name a "
                     "file path",
                     path, link ? "a link to " : "is ", kind);
}

/* Whether another open file holds an flock on path's file (base_atomic_open's temporary,
 * while another process writes it). A file that cannot be opened is not. A shared lock: it
 * needs only a read descriptor (NFS emulates flock with POSIX locks) and is held for the test
 * alone (a writer's exclusive one waits it out). */
static int locked_elsewhere(const char *path) {
    const int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return 0;
    const int busy = flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    close(fd);
    return busy;
}

int base_create_file(const char *path, base_err *err) {
    if (base_output_path_ok(path, err)) return -1;
    if (locked_elsewhere(path)) /* not stale: another writer's, in use */
        return base_fail(err,
                         "%s: another process is writing it now (the file is locked): try again "
                         "when it has finished",
                         path);
    if (unlink(path) != 0 && errno != ENOENT && errno != EISDIR)
        return base_fail(err, "%s: cannot replace: %s", path, strerror(errno));
    const int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) return base_fail(err, "%s: cannot create: %s", path, strerror(errno));
    return fd;
}

FILE *base_fopen_new(const char *path, base_err *err) {
    const int fd = base_create_file(path, err);
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (fd >= 0 && !f) {
        base_fail(err, "%s: cannot open a stream: %s", path, strerror(errno));
        close(fd);
    }
    return f;
}

int base_reopen_if_deleted(FILE **fp, const char *path, int64_t step, int *was_empty) {
    struct stat st, nst;
    if (!*fp || fstat(fileno(*fp), &st) != 0 || st.st_nlink > 0) return 0;
    base_err e = {{0}};
    const int fd = base_mkdir_parent(path, &e)
                       ? -1
                       : open(path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    FILE *f = fd >= 0 && fstat(fd, &nst) == 0 && S_ISREG(nst.st_mode) ? fdopen(fd, "a") : NULL;
    if (!f) {
        if (!e.msg[0])
            snprintf(e.msg, sizeof e.msg, "%s", fd >= 0 ? "not a regular file" : strerror(errno));
        if (fd >= 0) close(fd);
        base_log_once(BASE_LOG_WARN,
                      "%s was deleted during the run and cannot be written anew (%s): what the "
                      "run writes there from here is lost",
                      path, e.msg);
        return 0;
    }
    fclose(*fp);
    *fp = f;
    if (was_empty) *was_empty = nst.st_size == 0;
    base_log(BASE_LOG_WARN,
             "%s was deleted during the run: %s from step %lld (the steps before it are not in it)",
             path, nst.st_size ? "appended to the file now there" : "written anew",
             (long long)step);
    return 1;
}

int base_append_whole(FILE *fp, const void *data, size_t n) {
    struct stat st;
    const int fd = fileno(fp);
    if (fstat(fd, &st) != 0) return -1;
    clearerr(fp); /* an earlier failure's flag would fail this record and leave errno stale */
    errno = 0;
    if (fwrite(data, 1, n, fp) == n && !ferror(fp) && fflush(fp) == 0) return 0;
    const int e = errno ? errno : EIO;
    __fpurge(fp); /* what is left in the buffer would be written past the cut by fclose */
    clearerr(fp);
    if (ftruncate(fd, st.st_size) == 0) fseeko(fp, 0, SEEK_END);
    errno = e;
    return -1;
}

int base_atomic_open(base_atomic *a, const char *path, base_err *err) {
    const size_t n = strlen(path);
    *a = (base_atomic){-1, NULL, malloc(2 * n + 6), NULL};
    if (!a->path) return base_fail(err, "%s: out of memory", path);
    a->tmp = a->path + n + 1;
    memcpy(a->path, path, n + 1);
    memcpy(a->tmp, path, n);
    memcpy(a->tmp + n, ".tmp", 5);
    if (base_output_path_ok(path, err) || (a->fd = base_create_file(a->tmp, err)) < 0) {
        free(a->path);
        a->path = a->tmp = NULL;
        return -1;
    }
    /* held until the rename: a second writer of path (two `titan report --out` of one file)
     * finds it in use rather than unlinking it as stale and having its own renamed by us.
     * Blocking: only another writer's test (locked_elsewhere) can hold it, for microseconds;
     * where the file system has no flock the commit's identity check remains */
    while (flock(a->fd, LOCK_EX) != 0 && errno == EINTR) {
    }
    return 0;
}

FILE *base_atomic_stream(base_atomic *a, base_err *err) {
    if (!a->fp && !(a->fp = fdopen(a->fd, "wb")))
        base_fail(err, "%s: cannot open a stream: %s", a->tmp, strerror(errno));
    return a->fp;
}

/* Flushes the temporary's stream and, with sync, its bytes to the disk (its descriptor stays
 * open, and locked); 0, or -1 with errno. */
static int flush_tmp(base_atomic *a, int sync) {
    if (a->fp && fflush(a->fp) != 0) return -1;
    return sync ? fsync(a->fd) : 0;
}

/* Closes the temporary (and its stream, unlocking it); 0, or -1 with errno. */
static int close_tmp(base_atomic *a) {
    const int closed = (a->fp ? fclose(a->fp) : close(a->fd)) == 0;
    a->fp = NULL;
    a->fd = -1;
    return closed ? 0 : -1;
}

/* fsync of the folder holding path, so a rename into it survives a crash. */
static void fsync_dir_of(const char *path) {
    char dir[4096];
    const char *slash = strrchr(path, '/');
    const size_t n = !slash ? 1 : slash == path ? 1 : (size_t)(slash - path);
    if (n >= sizeof dir) return;
    memcpy(dir, slash ? path : ".", n);
    dir[n] = 0;
    const int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

int base_atomic_commit(base_atomic *a, base_err *err) {
    if (!a->path) return base_fail(err, "atomic write: no file open");
    int rc = 0, replaced = 0;
    struct stat mine, there;
    if (flush_tmp(a, 1) != 0) {
        rc = base_fail(err, "%s: write failed: %s", a->tmp, strerror(errno));
    } else if (fstat(a->fd, &mine) != 0 || lstat(a->tmp, &there) != 0 ||
               mine.st_dev != there.st_dev || mine.st_ino != there.st_ino) {
        replaced = 1;
        rc = base_fail(err, "%s: another process replaced its temporary %s meanwhile: not written",
                       a->path, a->tmp);
    } else if (rename(a->tmp, a->path) != 0) { /* still locked: no other writer unlinks it */
        rc = base_fail(err, "%s: rename from %s failed: %s", a->path, a->tmp, strerror(errno));
    }
    if (rc && !replaced) unlink(a->tmp); /* ours, before the close drops its lock */
    if (close_tmp(a) != 0 && !rc)
        rc = base_fail(err, "%s: write failed: %s", a->path, strerror(errno));
    if (!rc) fsync_dir_of(a->path);
    free(a->path);
    a->path = a->tmp = NULL;
    return rc;
}

void base_atomic_abort(base_atomic *a) {
    if (!a->path) return;
    unlink(a->tmp); /* before the close drops its lock */
    close_tmp(a);
    free(a->path);
    a->path = a->tmp = NULL;
}

int base_write_all(int fd, const void *buf, size_t n) {
    const unsigned char *p = buf;
    while (n > 0) {
        const size_t chunk = n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n;
        const ssize_t w = write(fd, p, chunk);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int base_write_file_atomic(const char *path, const void *buf, size_t n, base_err *err) {
    base_atomic a;
    if (base_atomic_open(&a, path, err)) return -1;
    if (base_write_all(a.fd, buf, n) == 0) return base_atomic_commit(&a, err);
    base_fail(err, "%s: write to %s failed: %s", path, a.tmp, strerror(errno));
    base_atomic_abort(&a);
    return -1;
}

int base_dir_lock_take(base_dir_lock *l, const char *dir, base_err *err) {
    l->fd = -1;
    l->path = NULL;
    if (base_mkdir_p(dir, err)) return -1;
    const size_t n = strlen(dir) + sizeof BASE_LOCK_FILE + 1;
    char *path = malloc(n);
    if (!path) return base_fail(err, "out of memory");
    snprintf(path, n, "%s/%s", dir, BASE_LOCK_FILE);
    /* A holder releasing the lock unlinks the file after we opened it: we would then hold a
     * lock on a file nobody else can find, so the lock counts only when path is still ours. */
    int failed = 0;
    for (int tries = 0; !failed && tries < 16; tries++) {
        const int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0) {
            failed = base_fail(err, "%s: cannot open the run lock: %s", path, strerror(errno));
            break;
        }
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            const int e = errno;
            char pid[32] = "";
            const ssize_t r = pread(fd, pid, sizeof pid - 1, 0);
            pid[r > 0 ? r : 0] = 0;
            pid[strcspn(pid, "\n")] = 0;
            close(fd);
            if (e == EWOULDBLOCK)
                failed =
                    base_fail(err,
                              "%s is in use by another titan run (pid %s, lock file %s): two runs "
                              "writing one folder would mix their files",
                              dir, pid[0] ? pid : "unknown", path);
            else
                failed = base_fail(err, "%s: cannot lock: %s", path, strerror(e));
            break;
        }
        struct stat a, b;
        if (fstat(fd, &a) == 0 && lstat(path, &b) == 0 && a.st_dev == b.st_dev &&
            a.st_ino == b.st_ino) {
            char pid[32];
            const int k = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
            if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)k, 0) != k)
                base_log(BASE_LOG_WARN, "%s: could not record this run's pid", path);
            l->fd = fd;
            l->path = path;
            return 0;
        }
        close(fd);
    }
    if (!failed) base_fail(err, "%s: the run lock kept changing hands", path);
    free(path);
    return -1;
}

void base_dir_unlock(base_dir_lock *l) {
    if (l->fd < 0) return;
    unlink(l->path); /* while still held: a waiting opener sees the file is gone and retries */
    close(l->fd);
    free(l->path);
    l->fd = -1;
    l->path = NULL;
}
