/* train: TensorBoard scalar events written in C (see internal.h).
 *
 * An event file is a sequence of TFRecords:
 *   u64 length (LE) | u32 masked_crc32c(length bytes) | data[length] | u32 masked_crc32c(data)
 * masked_crc(c) = ((c >> 15) | (c << 17)) + 0xa282ead8, CRC-32C (Castagnoli, reflected
 * polynomial 0x82f63b78). Each data is a protobuf-encoded tensorflow.Event:
 *   1: wall_time (double), 2: step (int64), 3: file_version (string), 5: summary (Summary)
 *   Summary { 1: repeated Value }   Value { 1: tag (string), 2: simple_value (float) }
 * The first record is Event{wall_time, file_version: "brain.Event:2"}. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "train/internal.h"

struct train_tb {
    FILE *fp;
    char *path;
};

static uint32_t masked(uint32_t c) {
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

/* A small protobuf encoder into a fixed buffer (events here are < 1 KiB). */
/* 4 KiB: a step's 16 scalars and up to 64 parameter groups' learning rates take ~2.1 KiB.
 * over: something did not fit (the message is not written: an error, never a cut one). */
typedef struct {
    unsigned char b[4096];
    size_t n;
    int over;
} pb;

static void pb_varint(pb *p, uint64_t v) {
    while (v >= 0x80 && p->n < sizeof p->b) {
        p->b[p->n++] = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    if (p->n < sizeof p->b)
        p->b[p->n++] = (unsigned char)v;
    else
        p->over = 1;
}

static void pb_bytes(pb *p, int field, const void *data, size_t len) {
    pb_varint(p, (uint64_t)field << 3 | 2);
    pb_varint(p, len);
    if (p->n + len <= sizeof p->b) {
        memcpy(p->b + p->n, data, len);
        p->n += len;
    } else {
        p->over = 1;
    }
}

static void pb_fixed(pb *p, int field, const void *v, int bytes) { /* double: 1, float: 5 */
    pb_varint(p, (uint64_t)field << 3 | (bytes == 8 ? 1 : 5));
    if (p->n + (size_t)bytes <= sizeof p->b) {
        memcpy(p->b + p->n, v, (size_t)bytes); /* x86-64 is little endian, as protobuf */
        p->n += (size_t)bytes;
    } else {
        p->over = 1;
    }
}

/* One TFRecord, whole or not at all (base_append_whole: a reader never meets half of one). */
static int write_record(train_tb *t, const pb *e) {
    unsigned char rec[12 + sizeof e->b + 4];
    uint64_t len = e->n;
    memcpy(rec, &len, 8);
    uint32_t c = masked(base_crc32c(0, rec, 8)), d = masked(base_crc32c(0, e->b, e->n));
    memcpy(rec + 8, &c, 4);
    memcpy(rec + 12, e->b, e->n);
    memcpy(rec + 12 + e->n, &d, 4);
    return base_append_whole(t->fp, rec, 12 + e->n + 4);
}

static double wall_time(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + tv.tv_usec * 1e-6;
}

/* The file's first record, TensorBoard's file version. */
static int write_version(train_tb *t, double now) {
    pb e = {.n = 0};
    pb_fixed(&e, 1, &now, 8);
    pb_bytes(&e, 3, "brain.Event:2", 13);
    return write_record(t, &e);
}

int train_tb_open(train_tb **out, const char *dir, base_err *err) {
    *out = NULL;
    if (base_mkdir_p(dir, err)) return -1;
    char host[256] = "localhost", path[4096];
    gethostname(host, sizeof host - 1);
    const double now = wall_time();
    snprintf(path, sizeof path, "%s/events.out.tfevents.%lld.%s.%d", dir, (long long)now, host,
             (int)getpid());
    train_tb *t = calloc(1, sizeof *t);
    if (!t || !(t->path = strdup(path))) {
        free(t);
        return base_fail(err, "out of memory");
    }
    if (!(t->fp = base_fopen_new(path, err))) {
        train_tb_close(t);
        return -1;
    }
    if (write_version(t, now)) {
        base_fail(err, "%s: write failed: %s", path, strerror(errno));
        train_tb_close(t);
        return -1;
    }
    *out = t;
    return 0;
}

int train_tb_scalars(train_tb *t, int64_t step, const char *const *tags, const double *values,
                     int n, base_err *err) {
    pb summary = {.n = 0};
    for (int i = 0; i < n; i++) {
        pb v = {.n = 0};
        const float f = (float)values[i];
        pb_bytes(&v, 1, tags[i], strlen(tags[i]));
        pb_fixed(&v, 2, &f, 4);
        pb_bytes(&summary, 1, v.b, v.n);
        summary.over |= v.over;
    }
    pb e = {.n = 0};
    const double now = wall_time();
    pb_fixed(&e, 1, &now, 8);
    pb_varint(&e, 2 << 3 | 0);
    pb_varint(&e, (uint64_t)step);
    pb_bytes(&e, 5, summary.b, summary.n);
    if (summary.over || e.over) return base_fail(err, "%s: event too large", t->path);
    /* deleted during the run (a cleanup of the tb folder): written anew, said (the scalars
     * had gone to the unlinked file in silence) */
    int empty = 0;
    if (base_reopen_if_deleted(&t->fp, t->path, step, &empty) && empty &&
        write_version(t, now) != 0)
        return base_fail(err, "%s: write failed: %s", t->path, strerror(errno));
    if (write_record(t, &e))
        return base_fail(err, "%s: write failed: %s", t->path, strerror(errno));
    return 0;
}

void train_tb_close(train_tb *t) {
    if (!t) return;
    if (t->fp) fclose(t->fp);
    free(t->path);
    free(t);
}
