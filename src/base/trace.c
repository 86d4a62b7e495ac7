/* base: the trace-event recorder (see base.h) and its Chrome trace-event JSON writer. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

int base_trace_recording;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static base_trace_event *g_ev;
static size_t g_n, g_cap, g_dropped;

void base_trace_start(void) {
    pthread_mutex_lock(&g_lock);
    g_n = g_dropped = 0;
    pthread_mutex_unlock(&g_lock);
    __atomic_store_n(&base_trace_recording, 1, __ATOMIC_RELEASE);
}

void base_trace_stop(void) {
    __atomic_store_n(&base_trace_recording, 0, __ATOMIC_RELEASE);
}

void base_trace_add(const base_trace_event *e) {
    if (!__atomic_load_n(&base_trace_recording, __ATOMIC_ACQUIRE)) return;
    pthread_mutex_lock(&g_lock);
    if (g_n == g_cap) { /* doubling: a step of a large model is ~10^4 events */
        size_t cap = g_cap ? 2 * g_cap : 4096;
        base_trace_event *p = realloc(g_ev, cap * sizeof *p);
        if (p) g_ev = p, g_cap = cap;
    }
    if (g_n < g_cap)
        g_ev[g_n++] = *e;
    else
        g_dropped++;
    pthread_mutex_unlock(&g_lock);
}

const base_trace_event *base_trace_events(size_t *n, size_t *dropped) {
    *n = g_n;
    if (dropped) *dropped = g_dropped;
    return g_ev;
}

/* s as the inside of a JSON string: quotes, backslashes and control bytes escaped (names
 * can come from kernel plugins). */
static void put_json_str(FILE *f, const char *s) {
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20 || *p == 0x7f)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
}

static const char *const g_track_names[BASE_TRACE_TRACKS] = {"compute", "collectives"};

int base_trace_write(const char *path, int rank, double t_origin, base_err *err) {
    if (base_mkdir_parent(path, err)) return -1;
    base_atomic a;
    if (base_atomic_open(&a, path, err)) return -1;
    FILE *f = base_atomic_stream(&a, err);
    if (!f) {
        base_atomic_abort(&a);
        return -1;
    }
    fprintf(f, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n");
    fprintf(f,
            "{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": %d, \"tid\": 0, "
            "\"args\": {\"name\": \"rank %d\"}}",
            rank, rank);
    for (int t = 0; t < BASE_TRACE_TRACKS; t++)
        fprintf(f,
                ",\n{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": %d, \"tid\": %d, "
                "\"args\": {\"name\": \"%s\"}}",
                rank, t, g_track_names[t]);
    for (size_t i = 0; i < g_n; i++) {
        const base_trace_event *e = &g_ev[i];
        const double dur = e->t1 - e->t0;
        fputs(",\n{\"ph\": \"X\", \"name\": \"", f);
        if (e->scope) {
            put_json_str(f, e->scope);
            fputc('/', f);
        }
        put_json_str(f, e->name);
        fprintf(f, "\", \"cat\": \"%s\", \"pid\": %d, \"tid\": %d, \"ts\": %.3f, \"dur\": %.3f",
                e->cat ? e->cat : "", rank, (int)e->track, (e->t0 - t_origin) * 1e6, dur * 1e6);
        fputs(", \"args\": {", f);
        const char *sep = "";
        if (e->impl) {
            fputs(e->track == BASE_TRACE_COMM ? "\"group\": \"" : "\"impl\": \"", f);
            put_json_str(f, e->impl);
            fputc('"', f);
            sep = ", ";
        }
        if (e->flops > 0) {
            fprintf(f, "%s\"flops\": %.0f, \"GFLOP/s\": %.3f", sep, e->flops,
                    dur > 0 ? e->flops / dur * 1e-9 : 0.0);
            sep = ", ";
        }
        if (e->bytes > 0)
            fprintf(f, "%s\"bytes\": %.0f, \"GB/s\": %.3f", sep, e->bytes,
                    dur > 0 ? e->bytes / dur * 1e-9 : 0.0);
        fputs("}}", f);
    }
    fprintf(f, "\n]}\n");
    return base_atomic_commit(&a, err);
}
