/* The assertion the unit tests share: count a failure, say where and why, keep going. */
#ifndef TITAN_TEST_CHECK_H
#define TITAN_TEST_CHECK_H

#include <stdio.h>

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

#endif
