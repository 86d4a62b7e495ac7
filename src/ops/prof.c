/* ops: per-op profiling wrappers (see ops.h), generated from the op list (oplist.h). Each
 * event's work is the cost model's (work.c) for the call's own arguments. */
#include <stdlib.h>
#include <string.h>

#include "ops/internal.h"

static ops_table *g_tables; /* the attached tables (the model's), NULL: none */
static ops_table *g_real;   /* [g_n]: their entries as resolved */
static const char **g_paths;
static int g_n;
static int g_unit;

void ops_prof_unit(int unit) {
    g_unit = unit;
}

/* The real table of the current unit (a unit out of range falls back to unit 0 rather than
 * reading past the side table). */
static const ops_table *prof_real(void) {
    const unsigned u = (unsigned)g_unit;
    return &g_real[u < (unsigned)g_n ? u : 0];
}

static void prof_done(const ops_table *r, ops_kind k, const char *label, double t0, ops_work w) {
    const double t1 = base_now();
    const base_trace_event e = {.t0 = t0,
                                .t1 = t1,
                                .scope = g_paths[r - g_real],
                                .name = label,
                                .cat = "op",
                                .impl = r->impl[k] ? r->impl[k]->name : NULL,
                                .track = BASE_TRACE_COMPUTE,
                                .flops = w.flops ? w.value : 0,
                                .bytes = w.flops ? 0 : w.value};
    base_trace_add(&e);
}

/* A value-returning call kept in ret_ (F ops return void or double). */
#define PROF_KEEP_void(call) call
#define PROF_KEEP_double(call) const double ret_ = call
#define PROF_RETURN_void
#define PROF_RETURN_double return ret_

#define PROF_WRAP_FB(K, name, sub, plg, fp, fa, bp, ba)                                            \
    static void prof_##name##_fwd fp {                                                             \
        const ops_table *r = prof_real();                                                          \
        const double t0 = base_now();                                                              \
        r->name##_fwd fa;                                                                          \
        prof_done(r, OPS_##K, #name "_fwd", t0, OPS_WORK_CALL_##name##_fwd fa);                    \
    }                                                                                              \
    static void prof_##name##_bwd bp {                                                             \
        const ops_table *r = prof_real();                                                          \
        const double t0 = base_now();                                                              \
        r->name##_bwd ba;                                                                          \
        prof_done(r, OPS_##K, #name "_bwd", t0, OPS_WORK_CALL_##name##_bwd ba);                    \
    }
#define PROF_WRAP_F(K, name, sub, plg, ret, p, a)                                                  \
    static ret prof_##name p {                                                                     \
        const ops_table *r = prof_real();                                                          \
        const double t0 = base_now();                                                              \
        PROF_KEEP_##ret(r->name a);                                                                \
        prof_done(r, OPS_##K, #name, t0, OPS_WORK_CALL_##name a);                                  \
        PROF_RETURN_##ret;                                                                         \
    }
OPS_LIST(PROF_WRAP_FB, PROF_WRAP_F)
#undef PROF_WRAP_FB
#undef PROF_WRAP_F

int ops_prof_attach(ops_table *tables, const char *const *paths, int n, base_err *err) {
    if (g_tables) return base_fail(err, "ops profiling: tables are already attached");
    g_real = malloc(sizeof *g_real * (size_t)(n > 0 ? n : 1));
    g_paths = malloc(sizeof *g_paths * (size_t)(n > 0 ? n : 1));
    if (!g_real || !g_paths) {
        free(g_real);
        free(g_paths);
        g_real = NULL;
        g_paths = NULL;
        return base_fail(err, "out of memory");
    }
    for (int u = 0; u < n; u++) {
        g_real[u] = tables[u];
        g_paths[u] = paths[u];
        ops_table *t = &tables[u];
        /* an entry left NULL (no implementation bound) stays NULL */
#define PROF_SET_FB(K, name, ...)                                                                  \
    if (t->name##_fwd) t->name##_fwd = prof_##name##_fwd;                                          \
    if (t->name##_bwd) t->name##_bwd = prof_##name##_bwd;
#define PROF_SET_F(K, name, ...)                                                                   \
    if (t->name) t->name = prof_##name;
        OPS_LIST(PROF_SET_FB, PROF_SET_F)
#undef PROF_SET_FB
#undef PROF_SET_F
    }
    g_tables = tables;
    g_n = n;
    return 0;
}

void ops_prof_detach(void) {
    if (!g_tables) return;
    for (int u = 0; u < g_n; u++) g_tables[u] = g_real[u];
    free(g_real);
    free(g_paths);
    g_tables = g_real = NULL;
    g_paths = NULL;
    g_n = 0;
}
