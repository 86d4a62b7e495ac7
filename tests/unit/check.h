/* What the unit tests share: the assertion (count a failure, say where and why, keep going)
 * and a private temporary folder. */
#ifndef TITAN_TEST_CHECK_H
#define TITAN_TEST_CHECK_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static int failures;
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                            \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

/* A uniform value in [-1, 1) from the xorshift64 state *s (nonzero): test data that needs no
 * library's generator. */
static inline float check_uniform(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return (float)((double)(*s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* Makes a fresh folder $TMPDIR/NAME_XXXXXX (/tmp without TMPDIR) and writes its path to
 * dir[cap]; exits with status 2 when it cannot, as no test could run without it. */
static inline void check_tmpdir(char *dir, size_t cap, const char *name) {
    const char *td = getenv("TMPDIR");
    if (snprintf(dir, cap, "%s/%s_XXXXXX", td && *td ? td : "/tmp", name) >= (int)cap ||
        !mkdtemp(dir)) {
        perror(name);
        exit(2);
    }
}

/* Removes a folder check_tmpdir made, and everything in it. */
static inline void check_tmpdir_remove(const char *dir) {
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) printf("could not remove %s\n", dir);
}

/* The end of a test's main: prints the failure count (or that all passed) under the test's
 * name and returns the exit status. */
static inline int check_report(const char *test) {
    if (failures)
        printf("%s: %d check(s) failed\n", test, failures);
    else
        printf("%s: all checks passed\n", test);
    return failures != 0;
}

/* dir/name in one of four rotating buffers, so a call can take a few such paths at once. */
static inline const char *check_path(const char *dir, const char *name) {
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

#endif
