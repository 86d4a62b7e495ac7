/* Custom kernels: override syntax (op names, globs, N-M ranges, module sub-paths, last wins,
 * overrides that match nothing, overrides acting and logged only where their op is called),
 * constraint errors through model_build, kernel plugins (hostile plugins refused with clear
 * messages and rolled back; the example BHSD RoPE plugin bit-identical to the default through
 * layout conversion and its saved table; a BSHD plugin with workspace and saved state inside a
 * training step), and the conformance harness catching a wrong kernel. Plugin paths come from
 * tests/kernels.cmake. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "model/model.h"
#include "ops/cpu/cpu.h"
#include "ops/ops.h"

#define PLUGIN(c) TITAN_TEST_PLUGIN_DIR "/libtest_plugin_" c ".so"

static const ops_ctx g_ctx = {2, 100, 64, 4, 2, 16, 128, 256, 0, 0, 0, OPS_PREC_F32, 0, 0, 0, 0};

static int has(const char *msg, const char *a, const char *b) {
    return strstr(msg, a) && (!b || strstr(msg, b));
}

static const char *impl_at(const char *path, const ops_override *o, int n, ops_kind k) {
    ops_table t;
    base_err e;
    if (ops_resolve(&t, path, &g_ctx, o, n, &e)) return "(error)";
    const char *name = t.impl[k]->name;
    ops_release(&t);
    return name;
}

static void test_override_syntax(void) {
    const ops_override range[] = {{"layers.0-3.attention", "reference"}};
    CHECK(!strcmp(impl_at("layers.0", range, 1, OPS_ATTENTION), "reference"), "range: layer 0");
    CHECK(!strcmp(impl_at("layers.3", range, 1, OPS_ATTENTION), "reference"), "range: layer 3");
    CHECK(!strcmp(impl_at("layers.4", range, 1, OPS_ATTENTION), "default"), "range: layer 4");
    CHECK(!strcmp(impl_at("layers.12", range, 1, OPS_ATTENTION), "default"),
          "range: '0-3' does not match the prefix of 12");
    const ops_override wide[] = {{"layers.10-12.*", "reference"}};
    CHECK(!strcmp(impl_at("layers.11", wide, 1, OPS_SWIGLU), "reference") &&
              !strcmp(impl_at("layers.1", wide, 1, OPS_SWIGLU), "default"),
          "range with a glob after it");

    const ops_override sub[] = {{"layers.*.attention.rope", "reference"},
                                {"layers.*.feed_forward.swiglu", "reference"}};
    CHECK(!strcmp(impl_at("layers.5", sub, 2, OPS_ROPE), "reference") &&
              !strcmp(impl_at("layers.5", sub, 2, OPS_SWIGLU), "reference") &&
              !strcmp(impl_at("layers.5", sub, 2, OPS_ATTENTION), "default"),
          "sub-paths attention.rope / feed_forward.swiglu select only their op");
    const ops_override last[] = {{"rope", "reference"}, {"layers.2.attention.rope", "default"}};
    CHECK(!strcmp(impl_at("layers.2", last, 2, OPS_ROPE), "default") &&
              !strcmp(impl_at("layers.1", last, 2, OPS_ROPE), "reference"),
          "the last matching override wins");

    /* over a whole model: an override that matches no op is an error naming it */
    const char *paths[] = {"tok_embeddings", "layers.0", "layers.1", "head"};
    ops_table t[4];
    base_err e = {{0}};
    const ops_override typo[] = {{"layers.*.attention.rop", "reference"}};
    CHECK(ops_resolve_units(t, paths, NULL, 4, &g_ctx, typo, 1, &e) != 0 &&
              has(e.msg, "'layers.*.attention.rop' = 'reference' matches no op", NULL),
          "typo in a sub-path: %s", e.msg);
    const ops_override past[] = {{"rope", "reference"}, {"layers.2-9.rope", "default"}};
    CHECK(ops_resolve_units(t, paths, NULL, 4, &g_ctx, past, 2, &e) != 0 &&
              has(e.msg, "'layers.2-9.rope'", "matches no op"),
          "range past the last layer: %s", e.msg);
    const ops_override fine[] = {{"layers.0-1.attention.rope", "reference"}};
    CHECK(ops_resolve_units(t, paths, NULL, 4, &g_ctx, fine, 1, &e) == 0 &&
              !strcmp(t[2].impl[OPS_ROPE]->name, "reference"),
          "resolve_units: %s", e.msg);
    for (int i = 0; i < 4; i++) ops_release(&t[i]);
}

/* A constrained implementation refused by model_build with kernel, layer and rule. */
static int check_seq64(const ops_ctx *c, base_err *err) {
    if (c->seq_len % 64 == 0) return 0;
    return base_fail(err, "seq_len %% 64 == 0 (seq_len = %d)", c->seq_len);
}

static void tiny_args(model_args *a) {
    base_err e;
    model_flavor("debugmodel", a, &e);
    a->dim = 32;
    a->n_layers = 2;
    a->n_heads = 4;
    a->n_kv_heads = 2;
    a->head_dim = 8;
    a->ffn_dim = 48;
    a->vocab_size = 64;
}

static void test_constraint_errors(void) {
    const ops_impl seq64 = {OPS_ATTENTION,
                            "seq64",
                            "seq_len % 64 == 0",
                            check_seq64,
                            (ops_fn)ops_cpu_attention_fwd,
                            (ops_fn)ops_cpu_attention_bwd,
                            OPS_PREC_F32};
    base_err e = {{0}};
    CHECK(ops_register(&seq64, &e) == 0, "register: %s", e.msg);
    model_args a;
    tiny_args(&a);
    const ops_override ov[] = {{"layers.1.attention", "seq64"}};
    model_build_opts bo = {.batch = 2, .seq_len = 48, .overrides = ov, .n_overrides = 1};
    model m;
    CHECK(model_build(&m, &a, &bo, &e) != 0 &&
              has(e.msg, "kernel attention/seq64 at layers.1: seq_len % 64 == 0 (seq_len = 48)",
                  NULL),
          "constraint error names kernel, layer and rule: %s", e.msg);
    model_free(&m);
    bo.seq_len = 64;
    CHECK(model_build(&m, &a, &bo, &e) == 0 &&
              !strcmp(m.ops[2].impl[OPS_ATTENTION]->name, "seq64") &&
              !strcmp(m.ops[1].impl[OPS_ATTENTION]->name, "default"),
          "constraint met: %s", e.msg);
    model_free(&m);
}

/* What the checks of "seen" implementations were called with: one entry per call. */
static struct {
    ops_kind k;
    ops_ctx c;
} g_seen[64];
static int g_n_seen;
#define SEEN_CHECK(kind)                                                                           \
    static int seen_##kind(const ops_ctx *c, base_err *err) {                                      \
        (void)err;                                                                                 \
        if (g_n_seen < 64) g_seen[g_n_seen].k = OPS_##kind, g_seen[g_n_seen++].c = *c;             \
        return 0;                                                                                  \
    }
SEEN_CHECK(RMSNORM)
SEEN_CHECK(ADD_RMSNORM)
SEEN_CHECK(MATMUL)
SEEN_CHECK(GROUPED_MM)
SEEN_CHECK(LMHEAD_CE)
SEEN_CHECK(SWIGLU)
SEEN_CHECK(ATTENTION)
#undef SEEN_CHECK

/* an attention kernel for windows of 8 tokens or more */
static int min8_check(const ops_ctx *c, base_err *err) {
    return c->seq_len >= 8 ? 0 : base_fail(err, "seq_len >= 8 (seq_len = %d)", c->seq_len);
}

/* Whether a check of op k was called with batch, seq_len, n_heads, vocab, n_experts (each
 * -1: any) and a ctx that splits nothing further. */
static int seen(ops_kind k, int batch, int seq_len, int n_heads, int vocab, int n_experts) {
    for (int i = 0; i < g_n_seen; i++) {
        const ops_ctx *c = &g_seen[i].c;
        if (g_seen[i].k == k && (batch < 0 || c->batch == batch) &&
            (seq_len < 0 || c->seq_len == seq_len) && (n_heads < 0 || c->n_heads == n_heads) &&
            (vocab < 0 || c->vocab == vocab) && (n_experts < 0 || c->n_experts == n_experts) &&
            c->sp <= 1 && c->ep <= 1 && !c->ce_vocab)
            return 1;
    }
    return 0;
}

/* Whether a check of op k was called with ffn_dim f. */
static int seen_ffn(ops_kind k, int f) {
    for (int i = 0; i < g_n_seen; i++)
        if (g_seen[i].k == k && g_seen[i].c.ffn_dim == f) return 1;
    return 0;
}

/* A check sees the shapes this rank's calls of its op get (ops_ctx_sites), built in one
 * process with a tensor- or expert-parallel group of 2 (no collective runs at build; the
 * multi-rank runs: tests/scripts/dist_kernel_shapes.sh). Tensor parallelism at batch 2 x 24
 * tokens, 4 heads, vocabulary 64, loss parallel off: add_rmsnorm on the residual stream's shard
 * (batch 1 x 24 tokens), rmsnorm there and on every token with this rank's 2 heads (the q/k
 * norms), matmul on every token with 2 heads, lmhead_ce on the whole vocabulary (64; 32 rows a
 * rank otherwise); expert parallelism: grouped_mm on 8 / 2 experts, the router's matmul on all
 * 8, swiglu (an MoE model's, between the expert GEMMs) on the 2 x 24 x top_k 2 routed rows,
 * moe_ffn_dim 16 wide (not ffn_dim 48), also on one rank. Inference (model_kernels_fit) checks the
 * whole model: 4 heads, 8 experts. */
static void test_rank_shapes(void) {
    base_err e = {{0}};
    static const ops_kind kinds[] = {OPS_RMSNORM,   OPS_ADD_RMSNORM, OPS_MATMUL,   OPS_GROUPED_MM,
                                     OPS_LMHEAD_CE, OPS_SWIGLU,      OPS_ATTENTION};
    int (*const checks[])(const ops_ctx *, base_err *) = {
        seen_RMSNORM,   seen_ADD_RMSNORM, seen_MATMUL,   seen_GROUPED_MM,
        seen_LMHEAD_CE, seen_SWIGLU,      seen_ATTENTION};
    for (int i = 0; i < 7; i++) {
        const ops_impl im = {kinds[i],
                             "seen",
                             "",
                             checks[i],
                             ops_find(kinds[i], "default")->fwd,
                             ops_find(kinds[i], "default")->bwd,
                             OPS_PREC_F32};
        CHECK(ops_register(&im, &e) == 0, "register: %s", e.msg);
    }
    const ops_override ov[] = {{"rmsnorm", "seen"},    {"add_rmsnorm", "seen"}, {"matmul", "seen"},
                               {"grouped_mm", "seen"}, {"lmhead_ce", "seen"},   {"swiglu", "seen"},
                               {"attention", "seen"}};
    model_args a;
    tiny_args(&a);
    model_tp tp = {.size = 2};
    model_build_opts bo = {.batch = 2,
                           .seq_len = 24,
                           .tp = &tp,
                           .loss_parallel_off = 1,
                           .overrides = ov,
                           .n_overrides = 7};
    model m;
    g_n_seen = 0;
    CHECK(model_build(&m, &a, &bo, &e) == 0, "tp build: %s", e.msg);
    CHECK(seen(OPS_ADD_RMSNORM, 1, 24, -1, -1, -1) && !seen(OPS_ADD_RMSNORM, 2, 24, -1, -1, -1),
          "sequence parallelism: add_rmsnorm checked for batch 1 x 24 tokens only");
    CHECK(seen(OPS_RMSNORM, 1, 24, 2, -1, -1) && seen(OPS_RMSNORM, 2, 24, 2, -1, -1),
          "rmsnorm checked for the shard (1 x 24) and every token with 2 heads (2 x 24)");
    CHECK(seen(OPS_MATMUL, 2, 24, 2, -1, -1) && !seen(OPS_MATMUL, 1, 24, -1, -1, -1),
          "matmul checked for every token, this rank's 2 heads");
    CHECK(seen(OPS_SWIGLU, 2, 24, -1, -1, -1) && seen_ffn(OPS_SWIGLU, 24) &&
              !seen_ffn(OPS_SWIGLU, 48),
          "swiglu checked for every token, this rank's 24 of 48 FFN columns");
    CHECK(seen(OPS_LMHEAD_CE, 2, 24, -1, 64, -1) && !seen(OPS_LMHEAD_CE, -1, -1, -1, 32, -1),
          "loss parallel off: lmhead_ce checked for the whole vocabulary");
    CHECK(seen(OPS_ATTENTION, 2, 24, 2, -1, -1) && !seen(OPS_ATTENTION, 1, -1, -1, -1, -1),
          "causal windows: attention checked for batch 2 x 24 tokens, this rank's 2 heads");
    g_n_seen = 0;
    CHECK(model_kernels_fit(&m, 1, 5, &e) == 0 && seen(OPS_RMSNORM, 1, 5, 4, -1, -1) &&
              seen(OPS_ADD_RMSNORM, 1, 5, 4, -1, -1) && !seen(OPS_RMSNORM, -1, -1, 2, -1, -1),
          "inference checks the whole model (4 heads, no sequence split): %s", e.msg);
    model_free(&m);
    bo.loss_parallel_off = 0;
    g_n_seen = 0;
    CHECK(model_build(&m, &a, &bo, &e) == 0 && seen(OPS_LMHEAD_CE, 2, 24, -1, 32, -1) &&
              !seen(OPS_LMHEAD_CE, -1, -1, -1, 64, -1),
          "loss parallel: lmhead_ce checked for this rank's 32 vocabulary rows: %s", e.msg);
    model_free(&m);
    /* document masking: attention runs once per document, 1 to 24 tokens, batch 1; a kernel
     * for 8 tokens or more is refused naming why */
    bo.docs = 1;
    g_n_seen = 0;
    CHECK(model_build(&m, &a, &bo, &e) == 0 && seen(OPS_ATTENTION, 1, 1, 2, -1, -1) &&
              seen(OPS_ATTENTION, 1, 24, 2, -1, -1) && !seen(OPS_ATTENTION, 2, -1, -1, -1, -1) &&
              seen(OPS_MATMUL, 2, 24, 2, -1, -1),
          "documents: attention checked for batch 1 x 1 and 1 x 24 tokens: %s", e.msg);
    model_free(&m);
    const ops_impl min8 = {OPS_ATTENTION,
                           "min8",
                           "seq_len >= 8",
                           min8_check,
                           ops_find(OPS_ATTENTION, "default")->fwd,
                           ops_find(OPS_ATTENTION, "default")->bwd,
                           OPS_PREC_F32};
    const ops_override ov8 = {"attention", "min8"};
    CHECK(ops_register(&min8, &e) == 0, "register: %s", e.msg);
    model_build_opts b8 = {.batch = 2, .seq_len = 24, .overrides = &ov8, .n_overrides = 1};
    CHECK(model_build(&m, &a, &b8, &e) == 0, "min8, causal windows of 24: %s", e.msg);
    model_free(&m);
    b8.docs = 1;
    CHECK(model_build(&m, &a, &b8, &e) != 0 && strstr(e.msg, "seq_len >= 8") &&
              strstr(e.msg, "document masking: attention runs per document, batch 1 x 1 to 24"),
          "min8 with documents: %s", e.msg);
    model_free(&m);
    bo.docs = 0;

    a.n_experts = 8, a.top_k = 2, a.moe_ffn_dim = 16;
    model_ep ep = {.size = 2};
    model_build_opts eo = {.batch = 2, .seq_len = 24, .ep = &ep, .overrides = ov, .n_overrides = 7};
    g_n_seen = 0;
    CHECK(model_build(&m, &a, &eo, &e) == 0, "ep build: %s", e.msg);
    CHECK(seen(OPS_GROUPED_MM, 2, 24, -1, -1, 4) && !seen(OPS_GROUPED_MM, -1, -1, -1, -1, 8),
          "expert parallelism: grouped_mm checked for 4 experts");
    CHECK(seen(OPS_MATMUL, 2, 24, -1, -1, 8) && seen(OPS_ADD_RMSNORM, 2, 24, -1, -1, -1),
          "the router's matmul for all 8 experts, the norms for every token");
    CHECK(seen(OPS_SWIGLU, 1, 96, -1, -1, -1) && seen_ffn(OPS_SWIGLU, 16) &&
              !seen_ffn(OPS_SWIGLU, 48) && !seen(OPS_SWIGLU, 2, 24, -1, -1, -1),
          "MoE: swiglu checked for the 96 routed rows, moe_ffn_dim 16 wide");
    g_n_seen = 0;
    CHECK(model_kernels_fit(&m, 1, 3, &e) == 0 && seen(OPS_GROUPED_MM, 1, 3, -1, -1, 8),
          "inference checks the whole model's 8 experts: %s", e.msg);
    model_free(&m);
}

/* Builds a model with log lines sent to a temporary file; returns them (malloc'ed). */
static char *build_logged(model *m, const model_args *a, const model_build_opts *bo, int *rc,
                          base_err *e) {
    fflush(stdout);
    fflush(stderr);
    FILE *tmp = tmpfile();
    const int saved = dup(2);
    if (!tmp || saved < 0 || dup2(fileno(tmp), 2) < 0) {
        *rc = -1;
        return NULL;
    }
    base_log_all_to_stderr(1);
    *rc = model_build(m, a, bo, e);
    fflush(stderr);
    base_log_all_to_stderr(0);
    dup2(saved, 2);
    close(saved);
    const long n = ftell(tmp);
    char *log = calloc((size_t)(n > 0 ? n : 0) + 1, 1);
    rewind(tmp);
    if (log && n > 0 && fread(log, 1, (size_t)n, tmp) != (size_t)n) log[0] = 0;
    fclose(tmp);
    return log;
}

static int count(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = s; p && (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

/* An override acts (is logged, checked, put in the table) only in units that call its op:
 * grouped_mm in MoE blocks, embedding in tok_embeddings, rmsnorm in the blocks and the head. */
static void test_override_units(void) {
    model_args a;
    tiny_args(&a);
    const ops_override ov[] = {
        {"grouped_mm", "reference"}, {"rmsnorm", "reference"}, {"embedding", "reference"}};
    model_build_opts bo = {
        .batch = 2, .seq_len = 16, .ac = MODEL_AC_NONE, .overrides = ov, .n_overrides = 3};
    model m;
    base_err e = {{0}};
    int rc;
    char *log = build_logged(&m, &a, &bo, &rc, &e); /* dense: no unit calls grouped_mm */
    CHECK(rc == 0 && log, "dense build: %s", e.msg);
    if (rc == 0 && log) {
        CHECK(count(log, "kernel grouped_mm/") == 0, "grouped_mm logged on a dense model:\n%s",
              log);
        CHECK(count(log, "'grouped_mm' = 'reference': no unit of this model calls grouped_mm; "
                         "ignored") == 1,
              "one warning for grouped_mm on a dense model:\n%s", log);
        CHECK(count(log, "kernel rmsnorm/reference at ") == 3 &&
                  count(log, "kernel rmsnorm/reference at layers.0 ") == 1 &&
                  count(log, "kernel rmsnorm/reference at layers.1 ") == 1 &&
                  count(log, "kernel rmsnorm/reference at head ") == 1,
              "rmsnorm logged in the 2 blocks and the head only:\n%s", log);
        CHECK(count(log, "kernel embedding/reference at ") == 1 &&
                  count(log, "kernel embedding/reference at tok_embeddings ") == 1,
              "embedding logged in tok_embeddings only:\n%s", log);
        CHECK(!strcmp(m.ops[1].impl[OPS_GROUPED_MM]->name, "default") &&
                  !strcmp(m.ops[0].impl[OPS_RMSNORM]->name, "default") &&
                  !strcmp(m.ops[3].impl[OPS_RMSNORM]->name, "reference") &&
                  !strcmp(m.ops[0].impl[OPS_EMBEDDING]->name, "reference"),
              "tables: an op a unit does not call keeps its default");
    }
    model_free(&m);
    free(log);
    a.n_experts = 4; /* MoE: grouped_mm in each block, nowhere else */
    a.top_k = 2;
    a.moe_ffn_dim = 16;
    log = build_logged(&m, &a, &bo, &rc, &e);
    CHECK(rc == 0 && log, "MoE build: %s", e.msg);
    if (rc == 0 && log)
        CHECK(count(log, "kernel grouped_mm/reference at ") == 2 &&
                  count(log, "kernel grouped_mm/reference at layers.0 ") == 1 &&
                  count(log, "kernel grouped_mm/reference at layers.1 ") == 1 &&
                  count(log, "no unit of this model calls") == 0,
              "grouped_mm logged in the 2 MoE blocks only:\n%s", log);
    model_free(&m);
    free(log);
    /* last wins: an override every later one hides, wherever it matches, is warned about */
    const ops_override hidden[] = {{"layers.1.feed_forward.swiglu", "reference"},
                                   {"swiglu", "default"}};
    bo.overrides = hidden;
    bo.n_overrides = 2;
    log = build_logged(&m, &a, &bo, &rc, &e);
    CHECK(rc == 0 && log &&
              count(log, "kernel override 'layers.1.feed_forward.swiglu' = 'reference' has no "
                         "effect: a later override replaces it everywhere it matches") == 1 &&
              count(log, "has no effect") == 1,
          "a hidden override is warned about:\n%s", log ? log : e.msg);
    model_free(&m);
    free(log);
    const ops_override shown[] = {{"swiglu", "reference"},
                                  {"layers.1.feed_forward.swiglu", "default"}};
    bo.overrides = shown;
    log = build_logged(&m, &a, &bo, &rc, &e);
    CHECK(rc == 0 && log && count(log, "has no effect") == 0 &&
              count(log, "kernel swiglu/reference at layers.0 ") == 1,
          "an override still choosing somewhere is not warned about:\n%s", log ? log : e.msg);
    model_free(&m);
    free(log);
    const ops_override head[] = {{"head.grouped_mm", "reference"}};
    bo.overrides = head;
    bo.n_overrides = 1;
    log = build_logged(&m, &a, &bo, &rc, &e);
    CHECK(rc != 0 && has(e.msg, "'head.grouped_mm' = 'reference' matches no op", NULL),
          "a glob naming an op its unit does not call matches nothing: %s", rc ? e.msg : "built");
    model_free(&m);
    free(log);
}

static void test_hostile_plugins(void) {
    base_err e = {{0}};
    CHECK(ops_plugin_load("/nonexistent/libx.so", &e) != 0 &&
              has(e.msg, "kernel plugin /nonexistent/libx.so: cannot load", NULL),
          "bad path: %s", e.msg);
    CHECK(ops_plugin_load(PLUGIN("version"), &e) != 0 &&
              has(e.msg, "built against kernel ABI version 999", "speaks versions 1 to 2"),
          "ABI mismatch: %s", e.msg);
    CHECK(ops_plugin_load(PLUGIN("nosym"), &e) != 0 &&
              has(e.msg, "not a titan kernel plugin", "titan_kernel_abi_version"),
          "no version symbol: %s", e.msg);
    CHECK(ops_plugin_load(PLUGIN("noinit"), &e) != 0 &&
              has(e.msg, "missing symbol titan_kernel_plugin_init", NULL),
          "no init: %s", e.msg);
    CHECK(ops_plugin_load(PLUGIN("badop"), &e) != 0 &&
              has(e.msg, "op 'embedding'; plugins can provide", "rope") &&
              has(e.msg, "grouped_mm", NULL),
          "unsupported op: %s", e.msg);
    /* ABI version 1: its plugins keep loading and running; an op version 2 added is refused
     * by name */
    CHECK(ops_plugin_load(PLUGIN("v1moe"), &e) != 0 &&
              has(e.msg,
                  "libtest_plugin_v1moe.so: kernel grouped_mm/swiglu_v1: op 'grouped_mm' "
                  "came with kernel ABI version 2; the descriptor says version 1",
                  NULL),
          "a v1 descriptor for grouped_mm: %s", e.msg);
    CHECK(!ops_find(OPS_GROUPED_MM, "swiglu_v1"), "the refused v1 kernel is not registered");
    CHECK(ops_plugin_load(PLUGIN("v1"), &e) == 0 && ops_find(OPS_SWIGLU, "swiglu_v1"),
          "a version-1 plugin loads: %s", e.msg);
    ops_conform_opts o1 = {3, 1, 0, 0, 0};
    CHECK(ops_conform_test("swiglu/swiglu_v1", &o1, &e) == 0, "the v1 plugin conforms: %s", e.msg);
    CHECK(ops_plugin_load(PLUGIN("badflags"), &e) != 0 &&
              has(e.msg, "kernel swiglu/swiglu_ws: unknown flags 0x80", NULL),
          "unknown descriptor flags: %s", e.msg);
    /* a backward that adds into titan's gradients: conformance starts them from random values,
     * so a titan that passed scratch without zeroing it, or added twice, fails */
    CHECK(ops_plugin_load(PLUGIN("accum"), &e) == 0, "accumulating plugin: %s", e.msg);
    CHECK(ops_conform_test("swiglu/swiglu_acc", &o1, &e) == 0, "accumulating backward conforms");
    /* a backward that declares TITAN_KERNEL_BWD_ACCUMULATES but writes: titan's gradients lose
     * what they held, which the conformance check sees */
    CHECK(ops_plugin_load(PLUGIN("noacc"), &e) == 0, "noacc plugin: %s", e.msg);
    CHECK(ops_conform_test("swiglu/swiglu_noacc", &o1, &e) == 1,
          "a backward that does not accumulate as declared fails conformance");
    CHECK(ops_plugin_load(PLUGIN("nan"), &e) == 0, "nan plugin: %s", e.msg);
    CHECK(ops_conform_test("swiglu/swiglu_nan", &o1, &e) == 1, "a NaN output fails conformance");
    CHECK(ops_plugin_load(PLUGIN("nobwd"), &e) != 0 && has(e.msg, "swiglu/swiglu_ws", "backward"),
          "no backward: %s", e.msg);
    CHECK(ops_plugin_load(PLUGIN("initfail"), &e) != 0 &&
              has(e.msg, "lacks the instructions", NULL),
          "init error: %s", e.msg);
    CHECK(ops_plugin_load(PLUGIN("badlayout"), &e) != 0 && has(e.msg, "unknown layout 7", NULL),
          "bad layout: %s", e.msg);
    CHECK(ops_plugin_load(PLUGIN("dup"), &e) != 0 &&
              has(e.msg, "kernel rope/default is already registered (a built-in)", NULL),
          "name clash: %s", e.msg);
    CHECK(ops_plugin_load(PLUGIN("badsize"), &e) != 0 &&
              has(e.msg,
                  "libtest_plugin_badsize.so: kernel swiglu/swiglu_ws: descriptor of 80 bytes",
                  "version-2 descriptor has 88"),
          "a v2 descriptor of v1 size: %s", e.msg);
    CHECK(ops_plugin_load(PLUGIN("nofwd"), &e) != 0 &&
              has(e.msg, "kernel swiglu/swiglu_ws has no forward function", NULL),
          "no forward: %s", e.msg);
    CHECK(!ops_find(OPS_SWIGLU, "swiglu_ws"), "a failed plugin's kernels are rolled back");
}

/* The example plugin (BHSD layout, cached table) against the default RoPE, bit for bit. */
static void test_example_plugin(void) {
    base_err e = {{0}};
    CHECK(ops_plugin_load(TITAN_EXAMPLE_PLUGIN, &e) == 0, "load example: %s", e.msg);
    CHECK(ops_plugin_load(TITAN_EXAMPLE_PLUGIN, &e) == 0, "loading twice is a no-op: %s", e.msg);
    const ops_impl *impl = ops_find(OPS_ROPE, "rope_bhsd");
    CHECK(impl && ops_impl_origin(impl) && !strcmp(ops_impl_origin(impl), TITAN_EXAMPLE_PLUGIN),
          "registered with its origin");
    const ops_override ov = {"layers.*.attention.rope", "rope_bhsd"};
    ops_table t;
    CHECK(ops_resolve(&t, "layers.0", &g_ctx, &ov, 1, &e) == 0 && t.rope_fwd != ops_cpu_rope_fwd,
          "resolve binds a trampoline: %s", e.msg);
    ops_ctx odd = g_ctx;
    odd.head_dim = 7;
    ops_table t2;
    CHECK(
        ops_resolve(&t2, "layers.3", &odd, &ov, 1, &e) != 0 &&
            has(e.msg, "kernel rope/rope_bhsd at layers.3: head_dim % 2 == 0 (head_dim = 7)", NULL),
        "plugin constraint error: %s", e.msg);
    const int B = 2, T = 9, nh = 3, hd = 8;
    const size_t n = (size_t)B * T * nh * hd;
    float cs[9 * 4], sn[9 * 4], x[2 * 9 * 3 * 8], y1[2 * 9 * 3 * 8], y2[2 * 9 * 3 * 8],
        d1[2 * 9 * 3 * 8], d2[2 * 9 * 3 * 8];
    ops_rope_table(cs, sn, T, hd, 10000.0);
    for (size_t i = 0; i < n; i++) x[i] = sinf((float)i * 0.37f) + 0.1f;
    t.rope_fwd(y1, x, cs, sn, B, T, nh, hd);
    ops_cpu_rope_fwd(y2, x, cs, sn, B, T, nh, hd);
    CHECK(!memcmp(y1, y2, sizeof y1), "plugin forward == default (bits)");
    for (size_t i = 0; i < n; i++) d1[i] = d2[i] = 0.5f;
    t.rope_bwd(d1, x, cs, sn, B, T, nh, hd); /* accumulates into 0.5 */
    ops_cpu_rope_bwd(d2, x, cs, sn, B, T, nh, hd);
    CHECK(!memcmp(d1, d2, sizeof d1), "plugin backward accumulates like the default");
    memcpy(d1, x, sizeof d1);
    t.rope_fwd(d1, d1, cs, sn, B, T, nh, hd);
    CHECK(!memcmp(d1, y2, sizeof d1), "plugin forward in place");
    ops_release(&t);
    CHECK(ops_conform_test("rope/rope_bhsd", NULL, &e) == 0, "conformance: %s", e.msg);
}

/* A loaded plugin none of whose kernels the model runs is warned about (once), naming it and
 * its kernels; one the overrides select is not. */
static void test_unused_plugin(void) {
    model_args a;
    tiny_args(&a);
    const ops_override ov[] = {{"layers.1.attention.rope", "rope_bhsd"}};
    model_build_opts bo = {.batch = 2, .seq_len = 16, .overrides = ov, .n_overrides = 1};
    model m;
    base_err e = {{0}};
    int rc;
    const char *warn = "kernel plugin " TITAN_EXAMPLE_PLUGIN " is loaded, but no unit of this "
                       "model runs its kernels (rope/rope_bhsd)";
    char *log = build_logged(&m, &a, &bo, &rc, &e);
    CHECK(rc == 0 && log && count(log, warn) == 0, "selected: no warning:\n%s", log ? log : e.msg);
    model_free(&m);
    free(log);
    bo.n_overrides = 0;
    log = build_logged(&m, &a, &bo, &rc, &e);
    CHECK(rc == 0 && log && count(log, warn) == 1, "unselected plugin warned about:\n%s",
          log ? log : e.msg);
    model_free(&m);
    free(log);
    log = build_logged(&m, &a, &bo, &rc, &e);
    CHECK(rc == 0 && log && count(log, warn) == 0, "warned once per process:\n%s",
          log ? log : e.msg);
    model_free(&m);
    free(log);
}

/* What a run records of its kernels (header, report, the non-finite error): every unit's
 * non-default choice, not only layers.0's, with runs of layers collapsed and plugin paths. */
static void test_choices(void) {
    const char *paths[] = {"tok_embeddings", "layers.0", "layers.1", "layers.2",
                           "layers.3",       "layers.4", "head"};
    const ops_override ov[] = {{"layers.1-3.attention.rope", "rope_bhsd"},
                               {"attention", "reference"},
                               {"layers.2.attention", "default"},
                               {"head.rmsnorm", "reference"}};
    ops_table t[7];
    base_err e = {{0}};
    char buf[512];
    CHECK(ops_resolve_units(t, paths, NULL, 7, &g_ctx, ov, 4, &e) == 0, "resolve: %s", e.msg);
    const int n = ops_choices(t, paths, 7, OPS_PREC_F32, buf, sizeof buf);
    const char *want =
        "rmsnorm=reference at head; rope=rope_bhsd at layers.1-3 (plugin " TITAN_EXAMPLE_PLUGIN
        "); attention=reference at tok_embeddings, layers.0-1, layers.3-4, head";
    CHECK(n == 3 && !strcmp(buf, want), "choices (%d): %s\nwant: %s", n, buf, want);
    char small[40];
    ops_choices(t, paths, 7, OPS_PREC_F32, small, sizeof small);
    CHECK(strlen(small) == sizeof small - 1 && !strcmp(small + sizeof small - 4, "..."),
          "cut with '...': %s", small);
    for (int i = 0; i < 7; i++) ops_release(&t[i]);
    CHECK(ops_resolve_units(t, paths, NULL, 7, &g_ctx, NULL, 0, &e) == 0 &&
              ops_choices(t, paths, 7, OPS_PREC_F32, buf, sizeof buf) == 0 && !buf[0],
          "defaults only: '%s'", buf);
    for (int i = 0; i < 7; i++) ops_release(&t[i]);
}

/* The example MoE plugin: selection by layer path (range + the moe.grouped_mm sub-path), its
 * constraint at resolution with the layer path named, and conformance through the trampolines
 * and its per-layer saved tile plan. Training with it: tests/scripts/moe_plugin.sh. */
static void test_moe_plugin(void) {
    base_err e = {{0}};
    CHECK(ops_plugin_load(TITAN_MOE_PLUGIN, &e) == 0, "load grouped_tiles: %s", e.msg);
    ops_ctx c = g_ctx;
    c.n_experts = 8, c.top_k = 2, c.moe_ffn_dim = 24;
    const ops_override ov = {"layers.0-1.moe.grouped_mm", "grouped_tiles"};
    ops_table t;
    CHECK(ops_resolve(&t, "layers.1", &c, &ov, 1, &e) == 0 &&
              !strcmp(t.impl[OPS_GROUPED_MM]->name, "grouped_tiles") &&
              t.grouped_mm_fwd != ops_cpu_grouped_mm_fwd && t.plugin_slot[OPS_GROUPED_MM] > 0,
          "layers.0-1.moe.grouped_mm selects the plugin at layers.1: %s", e.msg);
    ops_release(&t);
    CHECK(!strcmp(impl_at("layers.2", &ov, 1, OPS_GROUPED_MM), "default"),
          "layers.0-1.moe.grouped_mm leaves layers.2 alone");
    c.moe_ffn_dim = 20;
    CHECK(ops_resolve(&t, "layers.1", &c, &ov, 1, &e) != 0 &&
              has(e.msg,
                  "kernel grouped_mm/grouped_tiles at layers.1: dim % 8 == 0 and moe_ffn_dim % 8 "
                  "== 0 (dim = 64, moe_ffn_dim = 20)",
                  NULL),
          "plugin constraint on the MoE shape: %s", e.msg);
    ops_conform_opts o = {8, 3, 0, 0, 0};
    CHECK(ops_conform_test("grouped_mm/grouped_tiles", &o, &e) == 0, "conformance: %s", e.msg);
}

/* One training microbatch with and without overrides: losses and gradients agree. */
static double grad_diff(const ops_override *ov, int n_ov, double *loss_a, double *loss_b) {
    model_args a;
    tiny_args(&a);
    base_err e = {{0}};
    model ma, mb;
    model_build_opts bo = {.batch = 2, .seq_len = 16, .with_grads = 1};
    if (model_build(&ma, &a, &bo, &e)) return printf("%s\n", e.msg), INFINITY;
    bo.overrides = ov;
    bo.n_overrides = n_ov;
    if (model_build(&mb, &a, &bo, &e)) return printf("%s\n", e.msg), INFINITY;
    model_init_weights(&ma, 3);
    model_init_weights(&mb, 3);
    int32_t tok[32], tgt[32];
    for (int i = 0; i < 32; i++) tok[i] = (i * 7) % 64, tgt[i] = (i * 5 + 1) % 64;
    model_zero_grad(&ma);
    model_zero_grad(&mb);
    int64_t nv;
    *loss_a = model_step_microbatch(&ma, tok, tgt, 1.0f / 32, &nv);
    *loss_b = model_step_microbatch(&mb, tok, tgt, 1.0f / 32, &nv);
    double d = 0, mx = 0;
    for (size_t i = 0; i < ma.n_floats; i++) {
        d = fmax(d, fabs((double)ma.g[i] - mb.g[i]));
        mx = fmax(mx, fabs((double)ma.g[i]));
    }
    model_free(&ma);
    model_free(&mb);
    return d / mx;
}

static void test_plugins_in_training(void) {
    base_err e = {{0}};
    CHECK(ops_plugin_load(PLUGIN("good"), &e) == 0, "load BSHD test plugin: %s", e.msg);
    CHECK(ops_plugin_load(PLUGIN("marker"), &e) != 0 &&
              has(e.msg,
                  "libtest_plugin_marker.so: kernel swiglu/swiglu_ws is already "
                  "registered (by plugin " PLUGIN("good") ")",
                  NULL),
          "two plugins, one kernel name: %s", e.msg);
    double la, lb;
    const ops_override rope[] = {{"layers.*.attention.rope", "rope_bhsd"}};
    double d = grad_diff(rope, 1, &la, &lb);
    CHECK(la == lb && d == 0, "rope_bhsd in training: loss %.9g vs %.9g, grad rel diff %g", la, lb,
          d);
    const ops_override sw[] = {{"layers.1.feed_forward.swiglu", "swiglu_ws"}};
    d = grad_diff(sw, 1, &la, &lb);
    CHECK(fabs(la - lb) <= 1e-6 * fabs(la) && d < 1e-5,
          "swiglu_ws (workspace + saved) in training: loss %.9g vs %.9g, grad rel diff %g", la, lb,
          d);
    /* the fused residual add + norm: the plugin's float sums vs titan's double ones; the
     * built-in unfused pair is the same arithmetic in two passes, so bitwise */
    const ops_override nrm[] = {{"layers.*.ffn_norm", "add_rmsnorm_plain"}};
    d = grad_diff(nrm, 1, &la, &lb);
    CHECK(fabs(la - lb) <= 1e-6 * fabs(la) && d < 1e-5,
          "add_rmsnorm_plain (plugin, in place over the residual) in training: loss %.9g vs "
          "%.9g, grad rel diff %g",
          la, lb, d);
    const ops_override unf[] = {{"add_rmsnorm", "unfused"}};
    d = grad_diff(unf, 1, &la, &lb);
    CHECK(la == lb && d == 0, "add_rmsnorm unfused: loss %.9g vs %.9g, grad rel diff %g", la, lb,
          d);
    const ops_override refs[] = {{"*", "reference"}};
    d = grad_diff(refs, 1, &la, &lb);
    CHECK(fabs(la - lb) <= 1e-5 * fabs(la) && d < 1e-4,
          "every op 'reference': loss %.9g vs %.9g, grad rel diff %g", la, lb, d);
}

/* The harness must catch a wrong kernel: silu(g) * up with the wrong sign of the gradient. */
static void wrong_bwd(float *dgate, float *dup, const float *dout, const float *gate,
                      const float *up, int N, int F, int dx_acc) {
    ops_cpu_swiglu_bwd(dgate, dup, dout, gate, up, N, F, dx_acc);
    dgate[0] += 1.0f;
}

static void test_conformance_catches(void) {
    const ops_impl bad = {OPS_SWIGLU,        "wrong",     "", NULL, (ops_fn)ops_cpu_swiglu_fwd,
                          (ops_fn)wrong_bwd, OPS_PREC_F32};
    base_err e = {{0}};
    CHECK(ops_register(&bad, &e) == 0, "register: %s", e.msg);
    ops_conform_opts o = {2, 5, 0, 0, 0};
    CHECK(ops_conform_test("swiglu/wrong", &o, &e) == 1, "a wrong gradient fails the test");
    CHECK(ops_conform_test("swiglu_ws", &o, &e) == 0, "the BSHD test plugin passes");
    CHECK(ops_conform_test("nope", &o, &e) < 0 && has(e.msg, "no implementation 'nope'", NULL),
          "unknown name: %s", e.msg);
}

int main(void) {
    ops_register_builtin();
    test_override_syntax();
    test_constraint_errors();
    test_override_units();
    test_rank_shapes();
    test_hostile_plugins();
    test_example_plugin();
    test_unused_plugin();
    test_choices();
    test_moe_plugin();
    test_plugins_in_training();
    test_conformance_catches();
    if (failures)
        printf("%d check(s) failed\n", failures);
    else
        printf("test_kernels: all passed\n");
    return failures != 0;
}
