/* base: errors, logging, aligned allocation, counter-based RNG, timers.
 * Everything else in titan depends on this module; it depends on nothing. */
#ifndef TITAN_BASE_H
#define TITAN_BASE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Library code never exits: a failing function returns a non-zero status and fills
 * a base_err with a message naming the file, field, key or line at fault. */
typedef struct {
    char msg[4096]; /* room for a message naming a few PATH_MAX-long paths */
} base_err;

/* Formats into err (if non-NULL) and returns -1, so callers can `return base_fail(...)`; a
 * message longer than msg ends in "...", so a cut one is never taken for whole. */
int base_fail(base_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

typedef enum { BASE_LOG_DEBUG, BASE_LOG_INFO, BASE_LOG_WARN, BASE_LOG_ERROR } base_log_level;
void base_log(base_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* base_log, but a line with the text of one logged through base_log_once before is left out
 * (a command that opens a folder twice says that folder's warning once). */
void base_log_once(base_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void base_log_set_level(base_log_level level);
/* Debug and info lines go to stdout unless this is on (commands whose stdout is data). */
void base_log_all_to_stderr(int on);
/* Rank shown in every log line once a run has more than one process (-1 hides it). */
void base_log_set_rank(int rank);
/* Where a void function cannot report an error (a kernel plugin's error code inside an op):
 * logs the message as an error, hands it to the hook (once; NULL: none) and aborts. The hook
 * lets a command leave its outputs final (the trainer's report page); it must not return to
 * the failed code. */
_Noreturn void base_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void base_set_fatal_hook(void (*hook)(const char *msg));

/* The process-directed signals a run may stop on (SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2,
 * SIGXCPU) are delivered to a thread of their own, never to the calling thread or a thread it
 * creates later (OpenMP's, the saver's), so a handler (train's clean stop) runs on that
 * thread's stack. Why: oneDNN 2.6's JIT fp32 GEMM kernels point rsp into heap memory while
 * they run (oneDNN issue 4845, fixed in 3.11), and a handler run on such a thread wrote its
 * signal frame over the heap (an audit: SIGTERM crashed 1-30% of fp32 runs with "corrupted
 * size" or SIGSEGV). Call once, before the first OpenMP region; a signal without a handler
 * still ends the process by its default action, and a child forked later starts with the
 * signals open. Threads created before the call (MPI's, a pthread OpenBLAS's pool) keep their
 * masks: their stacks are ordinary. Never fails (without the thread: a warning). */
int base_signals_to_own_thread(base_err *err);
/* Opens /dev/null on whichever of descriptors 0, 1, 2 the process started without (`titan
 * train >&-` from a script or cron): otherwise the first file opened takes that number and
 * the console's lines go into it (the run lock's pid was overwritten so). Call first. */
void base_std_fds_open(void);
/* A SIGBUS says what it likely means on stderr (a memory-mapped dataset, shard or checkpoint
 * made shorter while read, an I/O error on its pages, /dev/shm full; a machine check) before
 * the process ends by it as before (it ended with a bare "Bus error"). Installed only where
 * no handler is (after MPI_Init: Open MPI's own backtrace printer stays). */
void base_explain_sigbus(void);
/* A virtual memory limit (ulimit -v) under 1 GiB is warned of: OpenBLAS retries its buffer
 * allocation forever below ~600 MiB, spinning without a message. */
void base_warn_vm_limit(void);

/* 64-byte aligned, zero-filled (base_zero); NULL on failure (sizes of 0 return a valid
 * pointer). */
void *base_alloc(size_t bytes);
/* p[0, bytes) = 0; over 1 MiB on the pool's threads, one contiguous piece each (unless called
 * inside a parallel region). A single thread's stores do not reach a socket's bandwidth, and a
 * piece past glibc's non-temporal threshold is stored past the caches (a 2.4 GB gradient buffer:
 * 45-58 ms on 2 threads, against 113-175 ms in 256 KiB chunks, which take the cached path, and
 * 56-232 ms on one thread); fresh memory is first touched, and each fresh page zeroed by the
 * kernel, on all of them (a Qwen3-0.6B start zeroed its AdamW moments for ~6 s on one thread:
 * 2 GiB on 2 MiB pages, AMX Xeon VM, 6.7 GB/s on one thread, 12.4 on two). Called from a thread
 * that is not the pool's (none does), libgomp would start a pool of its own for it, sized by the
 * process default rather than training.threads. */
void base_zero(void *p, size_t bytes);
/* base_alloc without the zero fill, for a buffer its caller writes whole before reading it
 * (a checkpoint load): the fill is a pass over the memory that faults every page in. */
void *base_alloc_uninit(size_t bytes);
void base_free(void *p);
/* Returns the pages wholly inside [p, p + bytes) to the system (madvise MADV_DONTNEED): of an
 * anonymous mapping they read as zeros afterwards, of a file mapping as the file again. The
 * partial pages at either end are left as they are (a neighbour may live there). */
void base_release_pages(void *p, size_t bytes);

/* A growing NUL-terminated string: {0} is empty; free(b.s) when done. */
typedef struct {
    char *s;
    size_t n, cap;
} base_strbuf;
/* Appends s[n] (any bytes); -1 when out of memory (b unchanged). */
int base_strbuf_put(base_strbuf *b, const char *s, size_t n);

/* Seconds on a monotonic clock. */
double base_now(void);
/* Resident set size of this process now, in bytes (VmRSS; 0 without /proc). */
size_t base_rss(void);
/* Peak resident set size of this process in bytes (VmHWM, never below VmRSS nor getrusage's
 * ru_maxrss). */
size_t base_peak_rss(void);
/* Physical memory of the machine in bytes. */
size_t base_total_ram(void);

/* Memory this process can still take, in bytes: MemAvailable of /proc/meminfo, lowered to
 * what the cgroup's limit leaves (v2 memory.max - memory.current, v1 memory.limit_in_bytes -
 * memory.usage_in_bytes). TITAN_MEM_AVAILABLE (bytes) replaces the measurement (tests). */
size_t base_available_ram(void);

/* Online CPUs (at least 1). */
int base_cpu_count(void);
/* The CPUs this process's cgroup may use (its CPU quota / period, the lowest along its
 * hierarchy; v2 cpu.max, v1 cpu.cfs_quota_us): 2.5 for a container started with --cpus 2.5;
 * 0 when unlimited or unknown. OpenMP starts a thread per CPU it sees, not per CPU the quota
 * pays for: 64 threads throttled to 2 CPUs' time wait on each other at every barrier. */
double base_cpu_quota(void);
/* Thread counts asked for on a command line or in a config are capped at this many per CPU:
 * more only adds scheduling and per-thread memory (100000 OpenMP threads exhaust the stacks). */
#define BASE_THREADS_PER_CPU 4
/* requested capped at BASE_THREADS_PER_CPU x the CPUs, with a warning naming `what` when it is
 * lowered. One bound for every subcommand. */
int base_threads_bound(int requested, const char *what);

/* Counter-based RNG: every value is a pure function of (seed, stream, index), so the
 * same seed gives the same numbers whatever the thread count or parallel layout. */
uint64_t base_rng_u64(uint64_t seed, uint64_t stream, uint64_t index);
/* Uniform in [0, 1) with 24 random bits (exactly representable as float). */
float base_rng_uniform(uint64_t seed, uint64_t stream, uint64_t index);
/* Standard normal (Box-Muller on two 32-bit halves of one u64). */
float base_rng_normal(uint64_t seed, uint64_t stream, uint64_t index);
/* The standard normal base_rng_normal makes of one 64-bit draw r: Box-Muller on its halves,
 * u1 = (r_hi + 1) 2^-32, u2 = r_lo 2^-32, sqrt(-2 ln u1) cos(2 pi u2) in double (glibc's log
 * and cos), rounded to float. base_normals_of_bits: the same for n draws, bit for bit,
 * vectorised: where its double result lies too near a float rounding boundary for its own log
 * and cos to decide the float, base_normal_of_bits does (about 1 draw in 4400, most of them small:
 * every |value| < 2^-16); returns how many. */
float base_normal_of_bits(uint64_t r);
size_t base_normals_of_bits(float *out, const uint64_t *r, size_t n);
/* out[i] = scale * base_rng_normal(seed, stream, index0 + i) for i < n, bit for bit, drawn
 * again at index + k 2^40 (k = 1, 2, ...) while |out[i]| > cut (cut > 0: a truncated normal;
 * cut <= 0: none); vectorised, ~3.7x faster than the calls one by one. Serial: callers split
 * large fills between threads. */
void base_rng_normal_fill(float *out, size_t n, uint64_t seed, uint64_t stream, uint64_t index0,
                          float scale, double cut);
/* FNV-1a of a string: the stream id of a named parameter. */
uint64_t base_hash_str(const char *s);
/* FNV-1a continued over n more bytes (start from BASE_HASH_INIT): fingerprints. */
#define BASE_HASH_INIT 0xcbf29ce484222325ULL
uint64_t base_hash_bytes(uint64_t h, const void *p, size_t n);
/* CRC-32C (Castagnoli, reflected, the checksum of TensorBoard's records and of iSCSI / ext4)
 * of n bytes continued from crc: base_crc32c(0, p, n) is the CRC of p, and
 * base_crc32c(base_crc32c(0, a, na), b, nb) that of a then b. SSE4.2's crc32 instruction where
 * the CPU has it (~8 GB/s), a table otherwise. */
uint32_t base_crc32c(uint32_t crc, const void *p, size_t n);

/* DIR "/" NAME into out[cap]; fails, naming dir, when it does not fit. */
int base_path_join(char *out, size_t cap, const char *dir, const char *name, base_err *err);
/* Whether path is a regular file / a directory (links followed; false when absent). */
int base_is_file(const char *path);
int base_is_dir(const char *path);
/* Whether DIR/NAME is a regular file (false too when the joined path is too long). */
int base_has_file(const char *dir, const char *name);

/* Creates a directory and its missing parents (mkdir -p). */
int base_mkdir_p(const char *dir, base_err *err);
/* Creates the directory that will hold `file` (no-op for a bare file name). */
int base_mkdir_parent(const char *file, base_err *err);

/* Whether dir can be an output folder: it, or the nearest of its parents that exists, is a
 * writable folder (nothing is created). Fails naming dir and the part at fault (a file where a
 * folder is needed, no write permission). */
int base_check_output_dir(const char *dir, base_err *err);

/* ---- writing and removing without touching anything outside the run (base/fs.c) ------
 * Nothing here follows a symbolic link it is asked to write or remove: a link found where
 * titan writes or deletes is itself replaced or unlinked, and its target is left alone. */

/* rm -rf path, symlink-safe: a link (at path or anywhere below it) is unlinked, never
 * entered, so removal never leaves path. Absent is success. Fails naming the first entry it
 * could not remove. */
int base_remove_tree(const char *path, base_err *err);

/* Creates path as a new, empty regular file open for writing and returns its descriptor:
 * whatever was there (a stale file, a link) is unlinked first, not followed, and the file is
 * opened O_CREAT | O_EXCL | O_NOFOLLOW. A device, FIFO, socket or folder at path, or a link
 * to one, is refused, never replaced (base_atomic_open likewise). -1 (err names path) on
 * failure. */
int base_create_file(const char *path, base_err *err);
/* 0 when path may be written as a regular file: absent, a regular file, or a link to one (or
 * to nothing). A device, FIFO, socket or folder, or a link to one, fails naming its kind. */
int base_output_path_ok(const char *path, base_err *err);
/* base_create_file as a stdio stream (fopen "wb" that never writes through a link); NULL
 * (err names path) on failure. */
FILE *base_fopen_new(const char *path, base_err *err);
/* An output file kept open for a run (metrics.jsonl, TensorBoard events) that was deleted
 * meanwhile (st_nlink 0: rm, a cleanup job; its writes would go to the unlinked file in
 * silence): *fp is replaced by the file at path, appended to when one was renamed there (an
 * edit), else created with its folder; either is said, naming step, the first written there
 * (or, once, that it cannot be). Returns 1 when reopened (*was_empty: the new file is empty,
 * for a header), else 0. */
int base_reopen_if_deleted(FILE **fp, const char *path, int64_t step, int *was_empty);
/* Appends n bytes to fp (a stream kept flushed between records) and flushes: all of them or
 * none. On a failure (disk full, EIO) the file is cut back to its length before and the
 * stream's buffer dropped, so a line or record is never left half written for a reader or a
 * resume; returns 0, or -1 with errno the failure's. */
int base_append_whole(FILE *fp, const void *data, size_t n);

/* Atomic file write: the bytes go to "<path>.tmp" (made by base_create_file, through fd or
 * through fp after base_atomic_stream); commit fsyncs it, renames it over path (a link at
 * path is replaced, not followed) and fsyncs the folder; abort (and a failed commit)
 * removes it. A crash leaves path as it was, or whole. */
typedef struct {
    int fd;
    FILE *fp;         /* once base_atomic_stream was called */
    char *path, *tmp; /* path and "<path>.tmp", one allocation */
} base_atomic;
int base_atomic_open(base_atomic *a, const char *path, base_err *err);
/* A stdio stream on the temporary (closed by commit / abort); NULL (err set) on failure. */
FILE *base_atomic_stream(base_atomic *a, base_err *err);
int base_atomic_commit(base_atomic *a, base_err *err);
void base_atomic_abort(base_atomic *a);
/* write(2) until all n bytes are written (0), or -1 with errno. */
int base_write_all(int fd, const void *buf, size_t n);
/* path's bytes, atomically. */
int base_write_file_atomic(const char *path, const void *buf, size_t n, base_err *err);

/* An exclusive lock on a folder for as long as a process runs: flock on DIR/.titan.lock,
 * which holds the holder's PID. The kernel drops it when the process dies (SIGKILL leaves
 * a file but no lock); base_dir_unlock removes the file. Taking a held lock fails at once,
 * naming the folder and the holder's PID. The folder is created when missing. */
#define BASE_LOCK_FILE ".titan.lock"
typedef struct {
    int fd; /* -1: not held */
    char *path;
} base_dir_lock;
int base_dir_lock_take(base_dir_lock *l, const char *dir, base_err *err);
void base_dir_unlock(base_dir_lock *l);

/* ---- reading, escaping and parsing numbers (base/base.c) ---------------------------- */

/* Reads a whole file (stdin when path is NULL), pipes included, into a malloc'ed,
 * NUL-terminated buffer (free with free()); *len receives the byte count (without the NUL).
 * Fails, naming the file, when it cannot be opened or read (a folder says so) or exceeds
 * max_bytes. */
char *base_read_file(const char *path, size_t max_bytes, size_t *len, base_err *err);

/* s[0, n) with every byte outside printable ASCII (and '\\', and NUL: the input may be
 * binary) written as \xNN, into out[cap] (truncated to fit): untrusted input quoted in an
 * error message. */
void base_escape(const char *s, size_t n, char *out, size_t cap);
/* Flushes f; a write that failed since the last flush (a full disk, a closed pipe with SIGPIPE
 * ignored) fails as "writing NAME: reason". */
int base_flush(FILE *f, const char *name, base_err *err);

/* Parses a whole decimal integer / float; returns -1 on junk, overflow or empty input (a float
 * that underflows is its subnormal or 0). */
int base_parse_i64(const char *s, int64_t *out);
int base_parse_f64(const char *s, double *out);

/* ---- Command-line options (base/args.c) ------------------------------------------------
 * A subcommand walks argv[i] for i from 2 (argv[1] is its name); an option's value is the
 * next word. The helpers fail into err naming the option, and advance i past the value. */
typedef struct {
    int argc;
    char **argv;
    int i; /* the word being read */
    base_err *err;
} base_args;

/* The value of option argv[i] (i advances to it), or NULL with "option X needs a value". */
const char *base_args_value(base_args *it);
/* An integer value in [min, 2^30]; an out-of-range or malformed one names the option. */
int base_args_int(base_args *it, int *out, int min);
/* A number value in [min, max]. */
int base_args_f64(base_args *it, double *out, double min, double max);
/* Whether argv[i] asks for help (--help or -h). */
int base_args_is_help(const base_args *it);

/* ---- TOML subset (base/toml.c) --------------------------------------------------------
 * A strict parser for the part of TOML 1.0 that job configs use: comments, bare and quoted
 * keys, dotted keys, [table] headers, [[array of tables]] headers, single-line basic strings
 * (escapes \b \t \n \f \r \" \\ \uXXXX \UXXXXXXXX) and literal strings, integers (decimal
 * with '_' separators, 0x / 0o / 0b), floats (fraction and/or exponent, inf, nan), booleans,
 * arrays of those (nested up to 8 deep, may span lines), and a key's inline table
 * (`k = {a = 1, b = [2]}`: one line, single-part keys, values of the above). The rest of TOML
 * (multi-line strings, dates and times, inline tables inside arrays or inline tables, dotted
 * keys inside inline tables) is refused with "... is not supported by titan's TOML subset",
 * as is a quoted key part containing '.' anywhere but as the last part of a key = value key
 * ("layers.*.rope" = "x" is fine; ["a.b"] and "a.b" = {...} are not), one containing '[' or
 * ']' anywhere (they name arrays of tables' elements), and an empty quoted key part ("" names
 * the root table). Input is hostile: it must be UTF-8 without NUL bytes,
 * sizes are capped, and every error reads "FILE:LINE:COLUMN: message" (columns count bytes
 * from 1).
 *
 * The document is flattened into tables named by their dotted path ("" is the root,
 * "training" for [training], "a.b" for [a.b], for the `b.x = 1` keys of [a] or for its
 * `b = {x = 1}`), each with its key/value pairs in file order. An array of tables [[a.b]] is
 * a table "a.b" without keys followed by its elements, tables "a.b[0]", "a.b[1]", ... in file
 * order (a header or dotted key through a.b goes into its last element: "a.b[1].c"). TOML's
 * definition rules are enforced: duplicate keys and tables are errors, a key is a value or a
 * table, never both, and an inline table is closed. */
typedef enum {
    BASE_TOML_STRING,
    BASE_TOML_INT,
    BASE_TOML_FLOAT,
    BASE_TOML_BOOL,
    BASE_TOML_ARRAY
} base_toml_type;

typedef struct base_toml_value {
    base_toml_type type;
    int line, col;                 /* where the value starts */
    char *s;                       /* STRING: UTF-8, NUL-terminated (\u0000 is refused) */
    int64_t i;                     /* INT; BOOL as 0 / 1 */
    double f;                      /* FLOAT */
    struct base_toml_value *items; /* ARRAY: [n_items] scalars */
    int n_items;
} base_toml_value;

typedef struct {
    char *key; /* the last part of a dotted key */
    int line, col;
    base_toml_value val;
} base_toml_kv;

typedef struct {
    char *name; /* dotted path; "" = root */
    int line, col;
    /* private: how the table was defined, from which section, and (an array of tables'
     * container) its elements so far */
    int defined_by, owner, n_elems;
    base_toml_kv *kv;
    int n_kv, cap_kv;
} base_toml_table;

typedef struct {
    base_toml_table *tables; /* [n_tables]; tables[0] is the root */
    int n_tables, cap;
} base_toml_doc;

/* Parses text[len] (`file` names it in errors). On failure *doc is left empty. */
int base_toml_parse(const char *text, size_t len, const char *file, base_toml_doc *doc,
                    base_err *err);
void base_toml_free(base_toml_doc *doc);
/* Parses one whole value ("3e-4", "[1, 2]", "'x'"), e.g. from a command line. */
int base_toml_parse_value(const char *text, base_toml_value *v, base_err *err);
void base_toml_value_free(base_toml_value *v);
/* "a string", "an integer", "a float", "a boolean", "an array". */
const char *base_toml_type_name(base_toml_type type);
/* The length of text[n]'s longest prefix of valid UTF-8 without NUL bytes (n: all of it), by
 * the rules the parser holds a file to (no overlong forms, surrogates or > U+10FFFF). */
size_t base_utf8_prefix(const char *text, size_t n);

/* ---- Trace events (base/trace.c) ---------------------------------------------------------
 * A recorder of timed events for the profiler ([profiling]), written as Chrome trace-event
 * JSON (Perfetto, chrome://tracing). Every layer records into it (ops wrappers, collectives,
 * the trainer's phases); nothing is recorded unless base_trace_recording is set, so a caller
 * pays one predictable branch when the profiler is off. Events may come from any thread. */
typedef enum { BASE_TRACE_COMPUTE, BASE_TRACE_COMM, BASE_TRACE_TRACKS } base_trace_track;
typedef struct {
    double t0, t1;     /* base_now() seconds */
    const char *scope; /* "layers.3" (shown as "layers.3/name") or NULL; like every string here
                          it must stay valid until the recording is written */
    const char *name;  /* "attention_fwd", "optimizer step", "all-gather" */
    const char *cat;   /* "op", "train", "step", "collective" */
    const char *impl;  /* the op's implementation, a collective's group; NULL: none */
    base_trace_track track;
    double flops, bytes; /* work done: FLOPs, bytes moved (0 = unknown) */
} base_trace_event;
extern int base_trace_recording;
/* Starts a recording (dropping the previous one's events) / stops adding to it. */
void base_trace_start(void);
void base_trace_stop(void);
/* Adds e when recording (a failed allocation drops it and counts it). */
void base_trace_add(const base_trace_event *e);
/* The events recorded since base_trace_start, in the order added; *dropped: lost ones. */
const base_trace_event *base_trace_events(size_t *n, size_t *dropped);
/* Writes the recording to path atomically as {"traceEvents": [...]}: one complete ("X")
 * event each, ts/dur in microseconds from t_origin, pid = rank, tid = track (named by
 * metadata events), args {impl, flops, bytes, GFLOP/s or GB/s}. */
int base_trace_write(const char *path, int rank, double t_origin, base_err *err);

#endif
