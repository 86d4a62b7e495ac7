/* The contract between a fuzz target and its drivers (libFuzzer, or tests/fuzz/driver.c).
 *
 * A target defines fuzz_target_run(): it parses data[size] as hostile input and returns 1 if
 * it was accepted, 0 if it was rejected with an error; it abort()s on any broken promise
 * (a rejection without a message naming the input, an accepted result that points outside
 * the input, ...). Crashes and sanitizer reports are failures too. The same file defines
 * LLVMFuzzerTestOneInput as a call of fuzz_target_run (FUZZ_DEFINE_LIBFUZZER_ENTRY). */
#ifndef TITAN_FUZZ_H
#define TITAN_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int fuzz_target_run(const uint8_t *data, size_t size);

#define FUZZ_DEFINE_LIBFUZZER_ENTRY                                                                \
    int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);                                  \
    int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {                                 \
        fuzz_target_run(data, size);                                                               \
        return 0;                                                                                  \
    }

#endif
