/* Standalone fuzz driver (no libFuzzer needed; gcc and ASan friendly), for any target that
 * follows tests/fuzz/fuzz.h.
 *
 * usage: fuzz_<target> [--mutations N] [--seed S] FILE_OR_DIR...
 *
 * Runs the target on every input file (a directory: every regular file in it, sorted by
 * name): a file named bad_* must be rejected, good_* must be accepted, any other may be
 * either. Then, for each good_* file (the seeds), runs N deterministic mutations of it
 * (bit flips, interesting bytes and words, the 8-byte little-endian length prefix many
 * formats start with, truncation, insertion, deletion, duplication, splices of the other
 * seeds). The target abort()s on a broken promise; the sanitizers catch the rest. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "fuzz.h"

typedef struct {
    char *path;
    uint8_t *data;
    size_t size;
} input;

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int load(const char *path, input *in) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return -1;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    in->data = malloc((size_t)n + 1);
    in->size = (size_t)n;
    in->path = strdup(path);
    int ok = in->data && in->path && fread(in->data, 1, (size_t)n, fp) == (size_t)n;
    fclose(fp);
    return ok ? 0 : -1;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* Appends the inputs at path (a file, or a directory's regular files sorted by name). */
static int collect(const char *path, input **ins, int *n, int *cap) {
    struct stat st;
    if (stat(path, &st) != 0) return fprintf(stderr, "cannot stat %s\n", path), -1;
    char **names = NULL;
    int nn = 0;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            if (e->d_name[0] == '.') continue;
            names = realloc(names, sizeof *names * (size_t)(nn + 1));
            names[nn] = malloc(strlen(path) + strlen(e->d_name) + 2);
            sprintf(names[nn++], "%s/%s", path, e->d_name);
        }
        if (d) closedir(d);
        qsort(names, (size_t)nn, sizeof *names, cmp_str);
    } else {
        names = malloc(sizeof *names);
        names[nn++] = strdup(path);
    }
    for (int i = 0; i < nn; i++) {
        if (*n == *cap) *ins = realloc(*ins, sizeof **ins * (size_t)(*cap = *cap ? *cap * 2 : 64));
        if (load(names[i], &(*ins)[*n]) != 0)
            return fprintf(stderr, "cannot read %s\n", names[i]), -1;
        (*n)++;
        free(names[i]);
    }
    free(names);
    return 0;
}

/* One random mutation of src into buf (capacity cap); returns the new size. */
static size_t mutate(const input *src, const input *all, int n_all, uint8_t *buf, size_t cap,
                     uint64_t *rng) {
    static const uint8_t bytes[] = {0,   1,   0x7f, 0x80, 0xff, '0', '9', '-',  '"', '{', '}',
                                    '[', ']', ',',  ':',  ' ',  'e', '.', '\\', 'n', 'u'};
    size_t n = src->size < cap ? src->size : cap;
    memcpy(buf, src->data, n);
    int rounds = 1 + (int)(splitmix(rng) % 4);
    for (int r = 0; r < rounds; r++) {
        uint64_t x = splitmix(rng);
        size_t pos = n ? (size_t)(splitmix(rng) % n) : 0;
        switch (x % 9) {
        case 0: /* bit flip */
            if (n) buf[pos] ^= (uint8_t)(1u << (x >> 8) % 8);
            break;
        case 1: /* interesting byte (JSON structure, extremes) */
            if (n) buf[pos] = bytes[(x >> 8) % sizeof bytes];
            break;
        case 2: { /* the 8-byte little-endian length prefix: near its value, or extreme */
            if (n < 8) break;
            uint64_t v = 0;
            for (int i = 7; i >= 0; i--) v = (v << 8) | buf[i];
            static const int64_t deltas[] = {-9, -8, -1, 1, 7, 8};
            uint64_t pick = (x >> 8) % 10;
            v = pick < 6    ? v + (uint64_t)deltas[pick]
                : pick == 6 ? 0
                : pick == 7 ? UINT64_MAX
                : pick == 8 ? (uint64_t)n - 8
                            : (uint64_t)1 << 63;
            for (int i = 0; i < 8; i++) buf[i] = (uint8_t)(v >> (8 * i));
        } break;
        case 3: /* truncate */
            n = pos;
            break;
        case 4: /* delete a run */
            if (n) {
                size_t len = 1 + (x >> 8) % 16;
                if (len > n - pos) len = n - pos;
                memmove(buf + pos, buf + pos + len, n - pos - len);
                n -= len;
            }
            break;
        case 5: /* insert a byte */
            if (n < cap) {
                memmove(buf + pos + 1, buf + pos, n - pos);
                buf[pos] = bytes[(x >> 8) % sizeof bytes];
                n++;
            }
            break;
        case 6: { /* duplicate a run in place */
            size_t len = 1 + (x >> 8) % 32;
            if (pos + len > n) len = n - pos;
            if (n + len <= cap) {
                memmove(buf + pos + len, buf + pos, n - pos);
                n += len;
            }
        } break;
        case 7: { /* splice: the tail from another input */
            const input *o = &all[(x >> 8) % (uint64_t)n_all];
            size_t at = o->size ? (size_t)(splitmix(rng) % o->size) : 0;
            size_t len = o->size - at;
            if (pos + len > cap) len = cap - pos;
            memcpy(buf + pos, o->data + at, len);
            n = pos + len;
        } break;
        default: /* an ASCII digit run (numbers in a header) */
            for (size_t i = pos; i < n && i < pos + 1 + (x >> 8) % 20; i++)
                buf[i] = (uint8_t)('0' + splitmix(rng) % 10);
            break;
        }
    }
    return n;
}

int main(int argc, char **argv) {
    long mutations = 2000;
    uint64_t seed = 1;
    input *ins = NULL;
    int n = 0, cap = 0, bad = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--mutations") && i + 1 < argc)
            mutations = atol(argv[++i]);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 10);
        else if (collect(argv[i], &ins, &n, &cap) != 0)
            return 2;
    }
    if (n == 0) {
        fprintf(stderr, "usage: %s [--mutations N] [--seed S] FILE_OR_DIR...\n", argv[0]);
        return 2;
    }
    clock_t t0 = clock();
    int n_seeds = 0;
    for (int i = 0; i < n; i++) {
        const char *b = base_name(ins[i].path);
        int got = fuzz_target_run(ins[i].data, ins[i].size);
        int want = !strncmp(b, "bad_", 4) ? 0 : !strncmp(b, "good_", 5) ? 1 : got;
        n_seeds += !strncmp(b, "good_", 5);
        if (got != want) {
            fprintf(stderr, "FAIL %s: %s, expected %s\n", ins[i].path,
                    got ? "accepted" : "rejected", want ? "accepted" : "rejected");
            bad++;
        }
    }
    long accepted = 0, total = 0;
    uint64_t rng = seed;
    for (int i = 0; i < n && n_seeds; i++) {
        if (strncmp(base_name(ins[i].path), "good_", 5)) continue;
        size_t cap_bytes = ins[i].size * 2 + 64;
        uint8_t *buf = malloc(cap_bytes);
        for (long k = 0; k < mutations; k++) {
            size_t len = mutate(&ins[i], ins, n, buf, cap_bytes, &rng);
            /* an exact-size copy, so ASan catches a read one past the end */
            uint8_t *exact = malloc(len ? len : 1);
            memcpy(exact, buf, len);
            accepted += fuzz_target_run(exact, len);
            free(exact);
            total++;
        }
        free(buf);
    }
    printf("%d input files (%d seeds), %ld mutations: %ld accepted, %ld rejected, %.2f s\n", n,
           n_seeds, total, accepted, total - accepted, (double)(clock() - t0) / CLOCKS_PER_SEC);
    for (int i = 0; i < n; i++) {
        free(ins[i].data);
        free(ins[i].path);
    }
    free(ins);
    if (bad) fprintf(stderr, "%d input file(s) with the wrong outcome\n", bad);
    return bad ? 1 : 0;
}
