/* The profiler's op wrappers (ops/prof.c) and trace recorder (base/trace.c):
 *  - attached tables call the real kernels of the current unit: outputs bitwise those of the
 *    unwrapped table, lmhead_ce's returned loss included; each call is one event named by
 *    the unit and op with the implementation, and FLOPs from the call's arguments;
 *  - detaching restores every entry; nothing is recorded while not recording;
 *  - the JSON writer escapes quotes, backslashes and control bytes in names;
 *  - the cost of a wrapped call against a direct one (printed: the overhead in docs). */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "check.h"
#include "ops/ops.h"

static void fill(float *x, size_t n, uint64_t seed) {
    for (size_t i = 0; i < n; i++) x[i] = base_rng_uniform(seed, 0, i) - 0.5f;
}

int main(void) {
    enum { N = 16, C = 24, OC = 8, V = 40, UNITS = 3 };
    const char *paths[UNITS] = {"tok_embeddings", "layers.0", "head"};
    ops_table t[UNITS], orig[UNITS];
    base_err err;
    ops_ctx ctx = {.batch = 2,
                   .seq_len = 8,
                   .dim = C,
                   .n_heads = 2,
                   .n_kv_heads = 1,
                   .head_dim = 12,
                   .ffn_dim = OC,
                   .vocab = V};
    CHECK(ops_resolve_units(t, paths, NULL, UNITS, &ctx, NULL, 0, &err) == 0, "%s", err.msg);
    memcpy(orig, t, sizeof t);

    static float inp[N * C], w[V * C], want[N * OC], got[N * OC], scratch[N * V];
    static int32_t tgt[N];
    fill(inp, N * C, 1);
    fill(w, V * C, 2);
    for (int i = 0; i < N; i++) tgt[i] = (i * 7) % V;
    t[1].matmul_fwd(want, inp, w, N, C, OC);
    const double loss_want =
        t[2].lmhead_ce(NULL, NULL, inp, w, tgt, N, C, V, 0, scratch, 8, NULL, NULL, 1);

    CHECK(ops_prof_attach(t, paths, UNITS, &err) == 0, "%s", err.msg);
    CHECK(ops_prof_attach(t, paths, UNITS, &err) != 0, "a second attach is refused");
    CHECK(t[1].matmul_fwd != orig[1].matmul_fwd, "the entry is swapped for its wrapper");
    base_trace_start();
    ops_prof_unit(1);
    t[1].matmul_fwd(got, inp, w, N, C, OC);
    CHECK(!memcmp(got, want, sizeof got), "wrapped matmul_fwd differs from the kernel");
    ops_prof_unit(2);
    const double loss =
        t[2].lmhead_ce(NULL, NULL, inp, w, tgt, N, C, V, 0, scratch, 8, NULL, NULL, 1);
    CHECK(loss == loss_want, "wrapped lmhead_ce returned %.17g, the kernel %.17g", loss, loss_want);
    base_trace_stop();
    t[2].lmhead_ce(NULL, NULL, inp, w, tgt, N, C, V, 0, scratch, 8, NULL, NULL,
                   1); /* not recorded */
    size_t n, dropped;
    const base_trace_event *ev = base_trace_events(&n, &dropped);
    CHECK(n == 2 && dropped == 0, "%zu events (%zu dropped), expected 2", n, dropped);
    if (n == 2) {
        CHECK(!strcmp(ev[0].scope, "layers.0") && !strcmp(ev[0].name, "matmul_fwd"),
              "event 0 is %s/%s", ev[0].scope, ev[0].name);
        CHECK(ev[0].flops == 2.0 * N * C * OC, "matmul_fwd FLOPs %g", ev[0].flops);
        CHECK(!strcmp(ev[0].impl, "default"), "impl %s", ev[0].impl);
        CHECK(ev[0].t1 >= ev[0].t0 && ev[1].t0 >= ev[0].t1, "times out of order");
        CHECK(!strcmp(ev[1].scope, "head") && !strcmp(ev[1].name, "lmhead_ce"), "event 1 is %s/%s",
              ev[1].scope, ev[1].name);
        CHECK(ev[1].flops == 2.0 * N * C * V, "lmhead_ce forward-only FLOPs %g", ev[1].flops);
    }

    /* overhead of a wrapped call (recording) over a direct one, on a tiny op, one thread (a
     * parallel region's start-up would hide it) */
    omp_set_num_threads(1);
    enum { REPS = 200000 };
    static float out[4 * C], rstd[4];
    double best[2] = {INFINITY, INFINITY};
    base_trace_start();
    for (int round = 0; round < 5; round++)
        for (int k = 0; k < 2; k++) {
            const ops_table *tk = k ? &t[1] : &orig[1];
            if (k) base_trace_start(); /* keeps the buffer at one round's events */
            const double t0 = base_now();
            for (int r = 0; r < REPS; r++) tk->rmsnorm_fwd(out, rstd, inp, w, 4, C, 1e-6f);
            const double dt = (base_now() - t0) / REPS;
            if (dt < best[k]) best[k] = dt;
        }
    base_trace_stop();
    printf("rmsnorm_fwd [4, %d]: direct %.1f ns, wrapped and recorded %.1f ns: %.1f ns per "
           "event\n",
           C, 1e9 * best[0], 1e9 * best[1], 1e9 * (best[1] - best[0]));

    ops_prof_detach();
    CHECK(!memcmp(t, orig, sizeof t), "detach did not restore the tables");
    ops_prof_detach(); /* a second one is a no-op */

    /* JSON strings from hostile names */
    char dir[256];
    check_tmpdir(dir, sizeof dir, "test_prof");
    const base_trace_event e = {.t0 = 1.0,
                                .t1 = 1.5,
                                .scope = "a\"b",
                                .name = "c\\d\ne\x01",
                                .cat = "op",
                                .impl = "x\"y",
                                .bytes = 100};
    base_trace_start();
    base_trace_add(&e);
    base_trace_stop();
    const char *path = check_path(dir, "sub/rank0_trace.json");
    CHECK(base_trace_write(path, 0, 1.0, &err) == 0, "%s", err.msg);
    size_t len;
    char *text = base_read_file(path, 1 << 20, &len, &err);
    CHECK(text && strstr(text, "\"name\": \"a\\\"b/c\\\\d\\u000ae\\u0001\""),
          "name not escaped: %s", text ? text : err.msg);
    CHECK(text && strstr(text, "\"impl\": \"x\\\"y\""), "impl not escaped");
    CHECK(text && strstr(text, "\"ts\": 0.000, \"dur\": 500000.000"), "ts/dur in microseconds");
    CHECK(text && strstr(text, "\"GB/s\": 0.000"), "GB/s of 100 bytes in 0.5 s");
    free(text);
    check_tmpdir_remove(dir);
    for (int u = 0; u < UNITS; u++) ops_release(&t[u]);
    return check_report("test_prof");
}
