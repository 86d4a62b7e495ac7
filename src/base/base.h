/* base: errors, logging, aligned allocation, counter-based RNG, timers.
 * Everything else in titan depends on this module; it depends on nothing. */
#ifndef TITAN_BASE_H
#define TITAN_BASE_H

#include <stddef.h>
#include <stdint.h>

/* Library code never exits: a failing function returns a non-zero status and fills
 * a base_err with a message naming the file, field, key or line at fault. */
typedef struct {
    char msg[1024];
} base_err;

/* Formats into err (if non-NULL) and returns -1, so callers can `return base_fail(...)`. */
int base_fail(base_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

typedef enum { BASE_LOG_DEBUG, BASE_LOG_INFO, BASE_LOG_WARN, BASE_LOG_ERROR } base_log_level;
void base_log(base_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void base_log_set_level(base_log_level level);
/* Debug and info lines go to stdout unless this is on (commands whose stdout is data). */
void base_log_all_to_stderr(int on);
/* Rank shown in every log line once a run has more than one process (-1 hides it). */
void base_log_set_rank(int rank);

/* 64-byte aligned, zero-filled; NULL on failure (sizes of 0 return a valid pointer). */
void *base_alloc(size_t bytes);
void base_free(void *p);

/* Seconds on a monotonic clock. */
double base_now(void);
/* Peak resident set size of this process in bytes (getrusage). */
size_t base_peak_rss(void);
/* Physical memory of the machine in bytes. */
size_t base_total_ram(void);

/* Counter-based RNG: every value is a pure function of (seed, stream, index), so the
 * same seed gives the same numbers whatever the thread count or parallel layout. */
uint64_t base_rng_u64(uint64_t seed, uint64_t stream, uint64_t index);
/* Uniform in [0, 1) with 24 random bits (exactly representable as float). */
float base_rng_uniform(uint64_t seed, uint64_t stream, uint64_t index);
/* Standard normal (Box-Muller on two 32-bit halves of one u64). */
float base_rng_normal(uint64_t seed, uint64_t stream, uint64_t index);
/* FNV-1a of a string: the stream id of a named parameter. */
uint64_t base_hash_str(const char *s);
/* FNV-1a continued over n more bytes (start from BASE_HASH_INIT): fingerprints. */
#define BASE_HASH_INIT 0xcbf29ce484222325ULL
uint64_t base_hash_bytes(uint64_t h, const void *p, size_t n);

/* Creates a directory and its missing parents (mkdir -p). */
int base_mkdir_p(const char *dir, base_err *err);
/* Creates the directory that will hold `file` (no-op for a bare file name). */
int base_mkdir_parent(const char *file, base_err *err);

/* Reads a whole file (stdin when path is NULL), pipes included, into a malloc'ed,
 * NUL-terminated buffer (free with free()); *len receives the byte count (without the NUL).
 * Fails, naming the file, when it cannot be opened or read or exceeds max_bytes. */
char *base_read_file(const char *path, size_t max_bytes, size_t *len, base_err *err);

/* Parses a whole decimal integer / float; returns -1 on junk, overflow or empty input. */
int base_parse_i64(const char *s, int64_t *out);
int base_parse_f64(const char *s, double *out);

#endif
