/* Job configs: exact values from TOML, every error with its file:line:column, field and
 * suggestion, command-line precedence and syntax, the print-config round trip, every shipped
 * config, and that configs/qwen3_debug.toml is exactly the old `make train` command line. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "train/internal.h"
#include "train/train.h"

#include "check.h"

#ifndef TITAN_SOURCE_DIR
#define TITAN_SOURCE_DIR "."
#endif

static int load(train_config *c, const char *text, base_err *err) {
    train_config_defaults(c);
    err->msg[0] = 0;
    int rc = train_config_load_text(c, text, strlen(text), "x.toml", err);
    return rc ? rc : train_config_validate(c, err);
}

static int from_args(train_config *c, char **argv, base_err *err) {
    int argc = 0;
    while (argv[argc]) argc++;
    train_cli cli;
    train_config_defaults(c);
    err->msg[0] = 0;
    return train_config_from_args(c, argc, argv, 0, &cli, err);
}

static char *print_to_string(const train_config *c) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    train_config_print(c, f);
    fclose(f);
    return buf;
}

/* print -> load -> print gives the same text (and so the same config). */
static void check_round_trip(const train_config *c, const char *what) {
    char *a = print_to_string(c);
    train_config d;
    base_err err;
    int rc = load(&d, a, &err);
    CHECK(rc == 0, "%s: printed config does not load: %s\n%s", what, err.msg, a);
    if (rc == 0) {
        char *b = print_to_string(&d);
        CHECK(!strcmp(a, b), "%s: round trip differs:\n%s\n---\n%s", what, a, b);
        free(b);
    }
    train_config_free(&d);
    free(a);
}

static void defaults(void) {
    train_config c;
    train_config_defaults(&c);
    base_err err;
    CHECK(train_config_validate(&c, &err) == 0, "defaults do not validate: %s", err.msg);
    /* torchtitan v0.2.2's defaults (research notes §4.1) */
    CHECK(c.training.steps == 10000 && c.training.local_batch_size == 8 &&
              c.training.seq_len == 2048 && c.training.global_batch_size == -1 &&
              c.training.max_norm == 1.0,
          "training defaults");
    CHECK(c.optimizer.lr == 8e-4 && c.optimizer.beta1 == 0.9 && c.optimizer.beta2 == 0.95 &&
              c.optimizer.eps == 1e-8 && c.optimizer.weight_decay == 0.1 &&
              !strcmp(c.optimizer.name, "AdamW") && !strcmp(c.optimizer.implementation, "fused"),
          "optimizer defaults");
    CHECK(c.lr_scheduler.warmup_steps == 200 && !c.lr_scheduler.decay_ratio.set &&
              !c.lr_scheduler.total_steps.set && !strcmp(c.lr_scheduler.decay_type, "linear") &&
              c.lr_scheduler.min_lr_factor == 0,
          "lr_scheduler defaults");
    CHECK(!c.checkpoint.enable && !strcmp(c.checkpoint.folder, "checkpoint") &&
              c.checkpoint.interval == 500 && c.checkpoint.keep_latest_k == 10 &&
              c.checkpoint.load_step == -1 && c.checkpoint.initial_load_model_only &&
              c.checkpoint.last_save_model_only && !c.checkpoint.last_save_in_hf &&
              !strcmp(c.checkpoint.export_dtype, "float32") &&
              !strcmp(c.checkpoint.async_mode, "async"),
          "checkpoint defaults");
    CHECK(c.parallelism.data_parallel_shard_degree == -1 &&
              c.parallelism.data_parallel_replicate_degree == 1 &&
              c.parallelism.tensor_parallel_degree == 1 &&
              !strcmp(c.parallelism.fsdp_reshard_after_forward, "default"),
          "parallelism defaults");
    CHECK(c.metrics.log_freq == 10 && !c.metrics.enable_tensorboard &&
              !strcmp(c.metrics.save_tb_folder, "tb"),
          "metrics defaults");
    CHECK(!strcmp(c.model.flavor, "debugmodel") && !c.model.dim.set && c.kernels.overrides.n == 0,
          "model defaults");
    check_round_trip(&c, "defaults");
    train_config_free(&c);
}

static void exact_values(void) {
    const char *text = "[job]\n"
                       "description = \"t\\u00e9st \\\"q\\\"\\n\\tend\"\n"
                       "dump_folder = 'C:\\runs'\n"
                       "[model]\n"
                       "flavor = \"0.6B\"\n"
                       "n_layers = 2\n"
                       "tie_embeddings = false\n"
                       "rope_theta = 1e4\n"
                       "[training]\n"
                       "steps = 1_000\n"
                       "max_norm = 2  # an integer where a float goes\n"
                       "seed = 0x10\n"
                       "global_batch_size = 32\n"
                       "[lr_scheduler]\n"
                       "decay_ratio = 0.25\n"
                       "total_steps = 2_000\n"
                       "[optimizer]\n"
                       "lr = 3.5e-4\n"
                       "beta2 = 0.999\n"
                       "[checkpoint]\n"
                       "keep_latest_k = 0\n"
                       "[kernels]\n"
                       "overrides = [\"attention=default\", 'layers.*.rope=default']\n";
    train_config c;
    base_err err;
    int rc = load(&c, text, &err);
    CHECK(rc == 0, "exact values: %s", err.msg);
    CHECK(!strcmp(c.job.description, "t\xc3\xa9st \"q\"\n\tend"), "description '%s'",
          c.job.description);
    CHECK(!strcmp(c.job.dump_folder, "C:\\runs"), "literal string '%s'", c.job.dump_folder);
    CHECK(!strcmp(c.model.flavor, "0.6B") && c.model.n_layers.set && c.model.n_layers.v == 2 &&
              c.model.tie_embeddings.set && c.model.tie_embeddings.v == 0 &&
              c.model.rope_theta.set && c.model.rope_theta.v == 1e4 && !c.model.dim.set,
          "model values");
    CHECK(c.training.steps == 1000 && c.training.max_norm == 2.0 && c.training.seed == 16 &&
              c.training.global_batch_size == 32,
          "training values");
    CHECK(c.lr_scheduler.decay_ratio.set && c.lr_scheduler.decay_ratio.v == 0.25 &&
              c.lr_scheduler.total_steps.v == 2000,
          "lr_scheduler values");
    CHECK(c.optimizer.lr == 3.5e-4 && c.optimizer.beta2 == 0.999, "optimizer values");
    CHECK(c.kernels.overrides.n == 2 && !strcmp(c.kernels.overrides.v[1], "layers.*.rope=default"),
          "kernel overrides");
    check_round_trip(&c, "exact values");

    /* Mapped onto train_run's options. */
    train_opts o;
    rc = train_config_to_opts(&c, &o, &err);
    CHECK(rc == 0, "to_opts: %s", err.msg);
    CHECK(o.model.n_layers == 2 && o.model.dim == 1024 && o.model.tie_embeddings == 0 &&
              o.model.rope_theta == 1e4,
          "model args");
    CHECK(o.grad_accum == 4 && o.batch == 8 && o.steps == 1000 && o.seed == 16, "batching");
    CHECK(o.lr.decay_ratio == 0.25 && o.lr.total_steps == 2000 && o.adamw.lr == 3.5e-4 &&
              o.adamw.beta2 == 0.999,
          "schedule");
    CHECK(o.n_kernel_overrides == 2 && !strcmp(o.kernel_overrides[1].pattern, "layers.*.rope") &&
              !strcmp(o.kernel_overrides[1].impl, "default"),
          "kernel overrides reach train_opts");
    CHECK(o.data_path == NULL && o.jsonl_path == NULL && o.out_dir == NULL, "no outputs");
    train_config_free(&c);
}

/* Each bad config and the error it must give (a substring, from the start). */
static void errors(void) {
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"[trainig]\nsteps = 1\n",
         "x.toml:1:1: unknown section [trainig]; did you mean [training]?"},
        {"[training]\nstpes = 1\n",
         "x.toml:2:1: unknown key 'stpes' in [training]; did you mean 'steps'?"},
        {"[training]\n\n  lr = 1e-3\n",
         "x.toml:3:3: unknown key 'lr' in [training]; did you mean 'lr' in [optimizer]?"},
        {"[job]\nseed = 1\n", "x.toml:2:1: unknown key 'seed' in [job]; did you mean 'seed' in "
                              "[training]?"},
        {"steps = 1\n", "x.toml:1:1: key 'steps' is outside any [section]; did you mean 'steps' "
                        "in [training]?"},
        {"training.steps = 5\ntraining.stepz = 1\n",
         "x.toml:2:1: unknown key 'stepz' in [training]; did you mean 'steps'?"},
        {"[training.dataloadr]\nnum_workers = 1\n", "x.toml:1:1: unknown section "
                                                    "[training.dataloadr]; did you mean "
                                                    "[training.dataloader]?"},
        /* suggestions only a typo away: [profiling] once suggested [training] */
        {"[profilling_x]\nenable = 1\n", "x.toml:1:1: unknown section [profilling_x]; did you "
                                         "mean [profiling]?"},
        {"[tracing]\nenable = 1\n", "x.toml:1:1: unknown section [tracing]"},
        {"[compile]\nbackend_name = 1\n", "x.toml:2:1: unknown key 'backend_name' in [compile]"},
        {"[training]\nsteps = \"10\"\n", "x.toml:2:9: training.steps: expected an integer, got a "
                                         "string"},
        {"[training]\nsteps = 1.5\n",
         "x.toml:2:9: training.steps: expected an integer, got a float"},
        {"[training]\nsteps = 0\n",
         "x.toml:2:9: training.steps: 0 is out of range (must be in [1, 1073741824])"},
        {"[optimizer]\nlr = -1e-3\n", "x.toml:2:6: optimizer.lr: -0.001 is out of range (must be "
                                      ">= 0)"},
        {"[optimizer]\nbeta2 = 1.0\n", "x.toml:2:9: optimizer.beta2: 1 is out of range (must be "
                                       "in [0, 1))"},
        {"[optimizer]\nlr = inf\n", "x.toml:2:6: optimizer.lr: must be a finite number"},
        {"[optimizer]\neps = nan\n", "x.toml:2:7: optimizer.eps: must be a finite number"},
        {"[optimizer]\nname = \"adamw\"\n", "x.toml:2:8: optimizer.name: 'adamw' is not one of "
                                            "AdamW, Adam; did you mean 'AdamW'?"},
        {"[lr_scheduler]\ndecay_type = \"cosin\"\n",
         "x.toml:2:14: lr_scheduler.decay_type: 'cosin' is not one of linear, sqrt, cosine; did "
         "you mean 'cosine'?"},
        {"[lr_scheduler]\ndecay_ratio = 1.5\n", "x.toml:2:15: lr_scheduler.decay_ratio: 1.5 is out "
                                                "of range (must be in [0, 1])"},
        {"[model]\nflavor = \"0.6b\"\n", "x.toml:2:10: model.flavor: '0.6b' is not a flavor "},
        {"[model]\ntie_embeddings = 1\n", "x.toml:2:18: model.tie_embeddings: expected a boolean "
                                          "(true or false), got an integer"},
        {"[model]\nn_heads = 5\n", "x.toml:2:11: model.n_heads: debugmodel with the [model] "
                                   "overrides: n_heads (5) must be a multiple of n_kv_heads (8)"},
        {"[model]\nmlp_only_layers = [0, 9]\n", "x.toml:2:19: model.mlp_only_layers: layer 9 does "
                                                "not exist (the model has 8)"},
        {"[model]\nmlp_only_layers = [0, -1]\n", "x.toml:2:23: model.mlp_only_layers: item 2: -1 "
                                                 "is out of range"},
        {"[model]\nmlp_only_layers = 3\n", "x.toml:2:19: model.mlp_only_layers: expected an array "
                                           "of integers, got an integer"},
        {"[training]\ndataset_sources = [\"a\", \"b\"]\ndataset_weights = [1, 2, 3]\n",
         "x.toml:3:19: training.dataset_weights: 3 weights for 2 training.dataset_sources"},
        {"[training]\ndataset_sources = [\"a\", \"b\"]\ndataset_weights = [0, 0.0]\n",
         "x.toml:3:19: training.dataset_weights: the weights must have a finite sum above 0"},
        {"[training]\ndataset_weights = [1, -2]\n",
         "x.toml:2:23: training.dataset_weights: item 2: -2 is out of range (must be >= 0)"},
        {"[training]\ndataset_weights = [\"a\"]\n",
         "x.toml:2:20: training.dataset_weights: item 1: expected numbers, got a string"},
        {"[training]\ndataset_weights = [1.5]\n",
         "x.toml:2:19: training.dataset_weights: set without training.dataset_sources"},
        {"[training]\ndataset_sources = [\"a\"]\ndataset_path = \"b\"\n",
         "x.toml:2:19: training.dataset_sources: set beside training.dataset_path"},
        {"[training]\ndataset_sources = [\"a\", \"b\"]\ndataset_fields = [\"text\"]\n",
         "x.toml:3:18: training.dataset_fields: 1 fields for 2 training.dataset_sources"},
        {"[training]\ndataset_sources = [\"a\", \"\"]\n",
         "x.toml:2:19: training.dataset_sources: source 2 is \"\""},
        {"[training]\ndataset_sources = [\"a\"]\ndataset_mix_seed = 3\n",
         "x.toml:3:20: training.dataset_mix_seed: set for one source: nothing is drawn"},
        {"[training]\ndataset_sources = [\"a\"]\ndataset_weights = [2]\n",
         "x.toml:3:19: training.dataset_weights: set for one source: nothing is drawn"},
        {"[training]\ndataset_mix_seed = 3\n",
         "x.toml:2:20: training.dataset_mix_seed: set without a mixture"},
        {"[checkpoint]\nkeep_latest_k = 1\n", "x.toml:2:17: checkpoint.keep_latest_k: must be 0 "
                                              "(keep all) or >= 2"},
        {"[checkpoint]\nenable = \"yes\"\n", "x.toml:2:10: checkpoint.enable: expected a boolean"},
        {"[checkpoint]\ninitial_load_in_hf = true\ninitial_load_model_only = false\n",
         "x.toml:2:22: checkpoint.initial_load_in_hf: needs checkpoint.initial_load_model_only = "
         "true"},
        {"[parallelism]\ndata_parallel_shard_degree = 0\n",
         "x.toml:2:30: parallelism.data_parallel_shard_degree: must be -1 or positive, not 0"},
        {"[parallelism]\nfsdp_reshard_after_forward = \"alway\"\n",
         "x.toml:2:30: parallelism.fsdp_reshard_after_forward: 'alway' is not one of default, "
         "always, never; did you mean 'always'?"},
        {"[activation_checkpoint]\nselective_ac_option = \"ops\"\n",
         "x.toml:2:23: activation_checkpoint.selective_ac_option: must be 'op' or an integer N "
         ">= 0"},
        {"[training]\nlocal_batch_size = 3\nglobal_batch_size = 8\n",
         "x.toml:3:21: training.global_batch_size: 8 is not a multiple of "
         "training.local_batch_size (3)"},
        {"[kernels]\noverrides = [\"attention=default\",\n  \"atention=default\"]\n",
         "x.toml:3:3: kernels.overrides: item 2: kernel override 'atention' = 'default': "
         "'atention' is not an op name"},
        {"[kernels]\noverrides = [\"attention=flash\"]\n",
         "x.toml:2:13: kernels.overrides: item 1: kernel override 'attention' = 'flash' at "
         "layers.0.attention: no implementation 'flash' of attention"},
        {"[kernels]\natention = \"reference\"\n",
         "x.toml:2:1: kernels.\"atention\": kernel override 'atention' = 'reference': "
         "'atention' is not an op name"},
        {"[kernels]\n\"layers.*.rope\" = \"flash\"\n",
         "x.toml:2:1: kernels.overrides: item 1: kernel override 'layers.*.rope' = 'flash' at "
         "layers.0.rope: no implementation 'flash' of rope"},
        {"[kernels]\nplugins = [\"\"]\n",
         "x.toml:2:12: kernels.plugins: item 1: must name a shared object"},
        {"[kernels]\noverrides = [\"attention\"]\n",
         "x.toml:2:14: kernels.overrides: item 1: must read 'op=impl'"},
        {"[kernels]\noverrides = [1]\n", "x.toml:2:14: kernels.overrides: item 1: expected "
                                         "strings, got an integer"},
        {"[training]\nsteps = 1\nsteps = 2\n", "x.toml:3:1: 'training.steps' is defined twice"},
        {"[[training]]\n", "x.toml:1:1: unknown array of tables [[training]]"},
        /* [[optimizer.param_groups]]: each entry checked where it is written */
        {"[optimizer]\nparam_groups = []\n",
         "x.toml:2:1: optimizer.param_groups is an array of tables: [[optimizer.param_groups]]"},
        {"[[optimizer.param_groups]]\npattern = '.*'\noptimizer_name = 'AdamW'\n",
         "x.toml:1:1: optimizer.param_groups[0] has no optimizer_kwargs.lr (torchtitan: \"Must "
         "include all required kwargs (e.g. lr)\")"},
        {"[[optimizer.param_groups]]\noptimizer_name = 'AdamW'\noptimizer_kwargs = {lr = 1}\n",
         "x.toml:1:1: optimizer.param_groups[0] has no pattern"},
        {"[[optimizer.param_groups]]\npattern = 'x'\noptimizer_kwargs = {lr = "
         "1}\n[[optimizer.param_groups]]\n",
         "x.toml:1:1: optimizer.param_groups[0] has no optimizer_name"},
        {"[[optimizer.param_groups]]\npattern = '(x'\n",
         "x.toml:2:1: optimizer.param_groups[0].pattern: '(x' is not a "
         "regular expression: missing closing parenthesis (near character 2)"},
        {"[[optimizer.param_groups]]\npattern = '[[:digit:]]'\n",
         "x.toml:2:1: optimizer.param_groups[0].pattern: "
         "'[[:digit:]]': a POSIX class or collating element inside [...] (at character 1) is "
         "not read alike by Python's re and PCRE2"},
        {"[optimizer.param_groups]\npattern = 'x'\n",
         "x.toml:2:1: optimizer.param_groups is an array of tables: one [[optimizer.param_groups]] "
         "per group (then pattern, optimizer_name, optimizer_kwargs), not [optimizer.param_groups] "
         "or dotted keys"},
        {"[optimizer]\nparam_groups.pattern = 'x'\n",
         "x.toml:2:1: optimizer.param_groups is an array of tables"},
        {"[[optimizer.param_groups]]\noptimizer_kwargs = 3\n",
         "x.toml:2:1: optimizer.param_groups[0].optimizer_kwargs: "
         "expected a table, got an integer"},
        {"[[optimizer.param_groups]]\npattern = 3\n",
         "x.toml:2:1: optimizer.param_groups[0].pattern: expected a string, "
         "got an integer"},
        {"[[optimizer.param_groups]]\noptimizer_name = 'Muon'\n",
         "x.toml:2:1: optimizer.param_groups[0].optimizer_name: 'Muon' is not an optimizer "
         "torchtitan 0.3 builds (AdamW, Adam, DistMuon)"},
        /* DistMuon's kwargs: theirs alone, each checked as torchtitan's DistMuon checks it */
        {"[[optimizer.param_groups]]\npattern = 'x'\noptimizer_name = 'AdamW'\n"
         "optimizer_kwargs = {lr = 1, momentum = 0.9}\n",
         "x.toml:1:1: optimizer.param_groups[0].optimizer_kwargs.momentum: not a keyword "
         "argument of AdamW (momentum, nesterov, ns_steps, ns_coefficients and adjust_lr_fn are "
         "DistMuon's)"},
        {"[[optimizer.param_groups]]\npattern = 'x'\noptimizer_name = 'DistMuon'\n"
         "optimizer_kwargs = {lr = 1, betas = [0.9, 0.95]}\n",
         "x.toml:1:1: optimizer.param_groups[0].optimizer_kwargs.betas: not a keyword argument "
         "of DistMuon (DistMuon takes lr, weight_decay, momentum, nesterov, ns_coefficients, eps, "
         "ns_steps, adjust_lr_fn)"},
        {"[[optimizer.param_groups]]\noptimizer_kwargs = {ns_steps = 100}\n",
         "x.toml:2:21: optimizer.param_groups[0].optimizer_kwargs.ns_steps: expected an integer "
         "in [0, 100)"},
        {"[[optimizer.param_groups]]\noptimizer_kwargs = {ns_coefficients = [3.4, -4.7]}\n",
         "x.toml:2:21: optimizer.param_groups[0].optimizer_kwargs.ns_coefficients: expected three "
         "numbers"},
        {"[[optimizer.param_groups]]\noptimizer_kwargs = {adjust_lr_fn = 'none'}\n",
         "x.toml:2:21: optimizer.param_groups[0].optimizer_kwargs.adjust_lr_fn: expected "
         "\"original\", \"match_rms_adamw\" or \"spectral_unclamped\""},
        {"[[optimizer.param_groups]]\noptimizer_kwargs = {nesterov = 1}\n",
         "x.toml:2:21: optimizer.param_groups[0].optimizer_kwargs.nesterov: expected true or "
         "false"},
        {"[[optimizer.param_groups]]\noptimizer_kwargs = {lr = -1}\n",
         "x.toml:2:21: optimizer.param_groups[0]."
         "optimizer_kwargs.lr: -1 is out of range: "
         "torch.optim takes [0, inf)"},
        {"[[optimizer.param_groups]]\n[[optimizer.param_groups]]\noptimizer_kwargs = {betas = "
         "[0.9, 1.0]}\n",
         "x.toml:3:21: optimizer.param_groups[1].optimizer_kwargs.betas: 1 is out of range: "
         "torch.optim takes [0, 1)"},
        {"[[optimizer.param_groups]]\noptimizer_kwargs = {betas = [0.9]}\n",
         "x.toml:2:21: optimizer.param_groups[0].optimizer_kwargs.betas: expected two numbers"},
        {"[[optimizer.param_groups]]\noptimizer_kwargs = {amsgrad = true}\n",
         "x.toml:2:21: optimizer.param_groups[0].optimizer_kwargs.amsgrad: true is not "
         "implemented"},
        {"[[optimizer.param_groups]]\noptimizer_kwargs = {fused = 1}\n",
         "x.toml:2:21: optimizer.param_groups[0].optimizer_kwargs.fused: expected true or false"},
        {"[[optimizer.param_groups]]\noptimizer_kwargs.dampening = 0.9\n",
         "x.toml:2:1: optimizer.param_groups[0].optimizer_kwargs.dampening: not a keyword argument "
         "of torch.optim.AdamW / Adam or torchtitan's DistMuon that titan takes"},
        {"[[optimizer.param_groups]]\nlr = 1\n",
         "x.toml:2:1: optimizer.param_groups[0].lr: unknown key (a "
         "[[optimizer.param_groups]] entry has pattern, optimizer_name and "
         "optimizer_kwargs"},
        {"[[optimizer.param_groups]]\n[optimizer.param_groups.extra]\n",
         "x.toml:2:1: [optimizer.param_groups[0].extra]: a [[optimizer.param_groups]] entry has "
         "pattern, optimizer_name and optimizer_kwargs (a table), nothing else"},
        {"[job]\ndescription = \"\"\"x\"\"\"\n", "x.toml:2:15: multi-line strings"},
        /* a torchtitan value titan refuses is listed as such, never suggested */
        {"[training]\nmixed_precision_reduce = \"float16\"\n",
         "x.toml:2:26: training.mixed_precision_reduce: 'float16' is not float32 (torchtitan's "
         "bfloat16 is refused by titan); did you mean 'float32'?"},
        {"[training]\ndtype = \"float16\"\n",
         "x.toml:2:9: training.dtype: 'float16' is not float32 (torchtitan's bfloat16 is refused "
         "by titan); did you mean 'float32'?"},
        {"[comm]\nmode = \"fake\"\n",
         "x.toml:2:8: comm.mode: 'fake' is not default (torchtitan's fake_backend, local_tensor "
         "are refused by titan); did you mean 'default'?"},
        /* a key in a parent table of known sections is an unknown key there */
        {"[quantize]\nlinear_x = 1\n", "x.toml:2:1: unknown key 'linear_x' in [quantize]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        train_config c;
        base_err err;
        int rc = load(&c, cases[i].text, &err);
        CHECK(rc != 0, "case %zu accepted:\n%s", i, cases[i].text);
        if (rc)
            CHECK(!strncmp(err.msg, cases[i].want, strlen(cases[i].want)),
                  "case %zu:\n  got  %s\n  want %s...", i, err.msg, cases[i].want);
        train_config_free(&c);
    }
}

/* The table form of [kernels]: "pattern" = "impl" entries after the overrides list, in
 * file order; bare dotted keys (attention.rope = ...) make a sub-table, read the same. */
static void kernels_table(void) {
    train_config c;
    base_err err;
    const char *text = "[kernels]\n\"layers.0-3.attention.rope\" = \"reference\"\n"
                       "overrides = [\"rope=default\"]\nattention = \"reference\"\n"
                       "layers.rope = \"default\"\n";
    int rc = load(&c, text, &err);
    CHECK(rc == 0, "kernels table: %s", err.msg);
    const char *want[] = {"rope=default", "layers.0-3.attention.rope=reference",
                          "attention=reference", "layers.rope=default"};
    CHECK(!rc && c.kernels.overrides.n == 4, "kernels table: %d overrides", c.kernels.overrides.n);
    for (int i = 0; !rc && i < 4 && i < c.kernels.overrides.n; i++)
        CHECK(!strcmp(c.kernels.overrides.v[i], want[i]), "override %d: %s, want %s", i,
              c.kernels.overrides.v[i], want[i]);
    train_opts o;
    if (!rc) {
        rc = train_config_to_opts(&c, &o, &err);
        CHECK(rc == 0 && o.n_kernel_overrides == 4 &&
                  !strcmp(o.kernel_overrides[1].pattern, "layers.0-3.attention.rope") &&
                  !strcmp(o.kernel_overrides[1].impl, "reference"),
              "kernels table reaches train_opts: %s", rc ? err.msg : "");
    }
    train_config_free(&c);
    /* a bare dotted key before a plain one: the parser puts it in a sub-table read after
     * [kernels] itself, but file order decides (the last match wins: here rope=reference
     * everywhere, layers.1 included) */
    text = "[kernels]\nlayers.1.attention.rope = \"default\"\nrope = \"reference\"\n"
           "[kernels.layers.0]\nswiglu = \"reference\"\n";
    rc = load(&c, text, &err);
    const char *order[] = {"layers.1.attention.rope=default", "rope=reference",
                           "layers.0.swiglu=reference"};
    CHECK(rc == 0 && c.kernels.overrides.n == 3, "kernels table, dotted first: %s",
          rc ? err.msg : "");
    for (int i = 0; !rc && i < 3 && i < c.kernels.overrides.n; i++)
        CHECK(!strcmp(c.kernels.overrides.v[i], order[i]), "dotted first: override %d: %s, want %s",
              i, c.kernels.overrides.v[i], order[i]);
    train_config_free(&c);
}

static void command_line(void) {
    const char *path = "/tmp/titan_test_config.toml";
    FILE *f = fopen(path, "w");
    fprintf(f, "[training]\nsteps = 50\nseq_len = 64\n[optimizer]\nlr = 1e-3\nweight_decay = 0.2\n"
               "[lr_scheduler]\ndecay_ratio = 0.5\n");
    fclose(f);
    train_config c;
    base_err err;
    /* The file applies first wherever --config sits; the command line wins, in order. */
    char *a1[] = {"--training.steps",
                  "7",
                  "--optimizer.lr=2e-3",
                  "--config",
                  (char *)path,
                  "--steps",
                  "9",
                  "--checkpoint.enable",
                  "--metrics.enable_tensorboard",
                  "false",
                  "--lr_scheduler.decay_ratio",
                  "none",
                  "--kernels.overrides",
                  "attention=default,rope=default",
                  "--model.mlp_only_layers",
                  "[1, 2]",
                  NULL};
    int rc = from_args(&c, a1, &err);
    CHECK(rc == 0, "command line: %s", err.msg);
    CHECK(c.training.steps == 9, "last setting wins: steps %lld", (long long)c.training.steps);
    CHECK(c.optimizer.lr == 2e-3, "CLI over file: lr %g", c.optimizer.lr);
    CHECK(c.training.seq_len == 64 && c.optimizer.weight_decay == 0.2, "file over defaults");
    CHECK(c.training.local_batch_size == 8, "defaults under all");
    CHECK(c.checkpoint.enable == 1 && c.metrics.enable_tensorboard == 0, "bare boolean flags");
    CHECK(!c.lr_scheduler.decay_ratio.set, "'none' unsets an optional number");
    CHECK(c.kernels.overrides.n == 2 && !strcmp(c.kernels.overrides.v[1], "rope=default"),
          "comma list");
    CHECK(c.model.mlp_only_layers.n == 2 && c.model.mlp_only_layers.v[1] == 2, "TOML array");
    train_opts o;
    rc = train_config_to_opts(&c, &o, &err);
    CHECK(rc != 0 && !strcmp(err.msg, "command line: --model.mlp_only_layers: MoE models with "
                                      "dense blocks are not implemented (every block is MoE)"),
          "refusal names the option: %s", err.msg);
    train_config_free(&c);

    /* A list of numbers from the command line, comma-separated or a TOML array. */
    char *a3[] = {"--training.dataset_sources", "a.txt,b.txt", "--training.dataset_weights",
                  "0.25,3", NULL};
    rc = from_args(&c, a3, &err);
    CHECK(rc == 0 && c.training.dataset_weights.n == 2 && c.training.dataset_weights.v[0] == 0.25 &&
              c.training.dataset_weights.v[1] == 3 && c.training.dataset_sources.n == 2,
          "comma-separated numbers: %s", rc ? err.msg : "");
    train_config_free(&c);
    char *a4[] = {"--training.dataset_weights", "[1e-3, 2]", "--training.dataset_sources",
                  "[\"a\", \"b\"]", NULL};
    rc = from_args(&c, a4, &err);
    CHECK(rc == 0 && c.training.dataset_weights.n == 2 && c.training.dataset_weights.v[0] == 1e-3,
          "a TOML array of numbers: %s", rc ? err.msg : "");
    train_config_free(&c);

    /* Old flags are aliases; --grad-accum uses the final local batch size. */
    char *a2[] = {"--grad-accum",
                  "3",
                  "--batch",
                  "4",
                  "--set",
                  "n_layers=2",
                  "--set",
                  "tie_embeddings=0",
                  "--random-tokens",
                  "--ac",
                  "full",
                  "--metrics",
                  "m.jsonl",
                  "--job.dump_folder",
                  "runs/x",
                  "--out",
                  "/abs/hf",
                  NULL};
    rc = from_args(&c, a2, &err);
    CHECK(rc == 0, "aliases: %s", err.msg);
    CHECK(c.training.global_batch_size == 12 && c.training.local_batch_size == 4, "grad accum");
    CHECK(c.model.n_layers.v == 2 && c.model.tie_embeddings.set && c.model.tie_embeddings.v == 0,
          "--set");
    rc = train_config_to_opts(&c, &o, &err);
    CHECK(rc == 0, "aliases to_opts: %s", err.msg);
    CHECK(o.grad_accum == 3 && o.ac == MODEL_AC_FULL && o.model.n_layers == 2, "mapped aliases");
    CHECK(o.jsonl_path && !strcmp(o.jsonl_path, "runs/x/m.jsonl"), "jsonl under dump_folder: %s",
          o.jsonl_path ? o.jsonl_path : "NULL");
    CHECK(o.out_dir && !strcmp(o.out_dir, "/abs/hf"), "absolute paths stay");
    check_round_trip(&c, "aliases");
    train_config_free(&c);

    static const struct {
        char *argv[6];
        const char *want;
    } bad[] = {
        {{"--stpes", "3"}, "command line: unknown option '--stpes'; did you mean '--steps'?"},
        {{"--trainig.steps", "3"},
         "command line: unknown option '--trainig.steps'; did you mean '--training.steps'?"},
        {{"--training.stpes=3"},
         "command line: unknown option '--training.stpes'; did you mean '--training.steps'?"},
        {{"--job.seed", "3"},
         "command line: unknown option '--job.seed'; did you mean "
         "'--training.seed'?"},
        {{"--training.steps", "x"}, "command line: --training.steps: expected an integer, got 'x'"},
        {{"--steps", "0"}, "command line: --steps (training.steps): 0 is out of range"},
        {{"--training.steps"}, "command line: --training.steps: needs a value (an integer)"},
        {{"--steps"}, "command line (--steps): needs a value"},
        {{"--checkpoint.enable=maybe"}, "command line: --checkpoint.enable: expected a boolean"},
        {{"--set", "dim"}, "command line (--set): wants KEY=VALUE, got 'dim'"},
        {{"--set", "dimm=3"},
         "command line: unknown option '--model.dimm'; did you mean "
         "'--model.dim'?"},
        {{"--config", "/nonexistent.toml"}, "/nonexistent.toml: "},
        {{"--config", "a", "--config=b"}, "command line: --config given twice"},
        {{"stray"}, "command line: unexpected argument 'stray'"},
        {{"--lr_scheduler.total_steps", "5", "--steps", "10"}, /* warmup 200: cut to 5 */
         "command line: --lr_scheduler.total_steps: 5 is shorter than training.steps (10) and "
         "leaves no decay steps"},
        /* strings must be UTF-8, as in a file: the saved config.toml must load back */
        {{"--job.description", "caf\xe9"},
         "command line: --job.description: invalid UTF-8 at byte 4"},
        {{"--kernels.plugins", "ok.so,\xff.so"},
         "command line: --kernels.plugins: invalid UTF-8 at byte 7"},
        /* numbers past 64 bits / a double: out of range, not "expected an integer" */
        {{"--training.seed", "99999999999999999999"},
         "command line: --training.seed: 99999999999999999999 is out of range (must be in [0, "
         "9200000000000000000])"},
        {{"--optimizer.lr", "1e400"},
         "command line: --optimizer.lr: 1e400 is out of range (must be >= 0)"},
        /* a trailing comma is an empty last item, as a leading one is a first */
        {{"--checkpoint.exclude_from_loading", "dataloader,"},
         "command line: --checkpoint.exclude_from_loading: item 2: '' is not a checkpoint part"},
        {{"--model.mlp_only_layers", "1,"},
         "command line: --model.mlp_only_layers: item 2: expected an integer, got ''"},
        {{"--training.dataset_weights", "0.5,x"},
         "command line: --training.dataset_weights: item 2: expected a number, got 'x'"},
        {{"--model.num_experts", "4", "--model.top_k", "8"},
         "command line: --model.top_k: 8 is more than model.num_experts (4)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rc = from_args(&c, (char **)bad[i].argv, &err);
        CHECK(rc != 0 && !strncmp(err.msg, bad[i].want, strlen(bad[i].want)),
              "bad command line %zu:\n  got  %s\n  want %s...", i, rc ? err.msg : "(accepted)",
              bad[i].want);
        train_config_free(&c);
    }

    /* Settings titan cannot honour yet are refused by name. */
    static const struct {
        char *argv[4];
        const char *want;
    } refused[] = {
        {{"--parallelism.tensor_parallel_degree", "2"},
         "parallelism: 1 ranks do not divide into data_parallel_replicate_degree 1 x "
         "tensor_parallel_degree 2"},
        {{"--parallelism.pipeline_parallel_degree", "2"},
         "command line: --parallelism.pipeline_parallel_degree: 2: pipeline parallelism is not "
         "supported"},
        {{"--parallelism.context_parallel_degree", "4"},
         "command line: --parallelism.context_parallel_degree: 4: context parallelism is not "
         "supported"},
        {{"--parallelism.data_parallel_shard_degree", "2"},
         "parallelism: data_parallel_replicate_degree 1 x data_parallel_shard_degree 2 x "
         "tensor_parallel_degree 1 = 2, but there are 1 ranks (mpirun -np)"},
        {{"--validation.enable"}, "validation.dataset_path (default): must name the held-out data"},
        {{"--checkpoint.enable=false", "--checkpoint.initial_load_path", "x"},
         "command line: --checkpoint.initial_load_path: needs checkpoint.enable = true"},
        {{"--model.mlp_only_layers", "1"},
         "command line: --model.mlp_only_layers: MoE models with dense blocks"},
        {{"--training.dataset", "c4"}, "command line: --training.dataset: 'c4' is not built in"},
        /* torchtitan 0.3 reads and writes URLs through fsspec; titan would make a local
         * folder "s3:" of one */
        {{"--checkpoint.folder", "s3://bucket/ck"},
         "command line: --checkpoint.folder: 's3://bucket/ck' is a URL; titan reads and writes "
         "local paths only (mount the storage"},
        {{"--job.dump_folder", "file:///tmp/x"},
         "command line: --job.dump_folder: 'file:///tmp/x' is a URL; titan reads and writes "
         "local paths only (give the path itself, without file://)"},
        {{"--metrics.save_jsonl_file", "gs://b/m.jsonl"},
         "command line: --metrics.save_jsonl_file: 'gs://b/m.jsonl' is a URL"},
        {{"--checkpoint.initial_load_path", "hf://Qwen/Qwen3-0.6B"},
         "command line: --checkpoint.initial_load_path: 'hf://Qwen/Qwen3-0.6B' is a URL"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        rc = from_args(&c, (char **)refused[i].argv, &err);
        CHECK(rc == 0, "refused %zu should parse: %s", i, err.msg);
        rc = train_config_to_opts(&c, &o, &err);
        CHECK(rc != 0 && !strncmp(err.msg, refused[i].want, strlen(refused[i].want)),
              "refused %zu:\n  got  %s\n  want %s...", i, rc ? err.msg : "(accepted)",
              refused[i].want);
        train_config_free(&c);
    }
    /* a URL in a setting titan accepts and ignores (torchtitan's flight recorder folder) is
     * left alone: titan never writes there */
    {
        char *argv[] = {"--comm.save_traces_folder", "gs://b/t", NULL};
        rc = from_args(&c, argv, &err) || train_config_to_opts(&c, &o, &err);
        CHECK(rc == 0, "a URL in an ignored setting: %s", err.msg);
        train_config_free(&c);
    }
    /* tensor parallelism on 2 ranks: the tokens of a microbatch (training's, validation's) must
     * split over them, refused naming the fields (titan plan had accepted it, the run's model
     * refused it naming none) */
    const struct {
        char *argv[12];
        const char *want;
    } tp_bad[] = {
        {{"--parallelism.tensor_parallel_degree", "2", "--training.seq_len", "31",
          "--training.local_batch_size", "1"},
         "command line: --parallelism.tensor_parallel_degree: 2: training.local_batch_size x "
         "training.seq_len (1 x 31 tokens) must be a multiple of it"},
        {{"--parallelism.tensor_parallel_degree", "2", "--validation.enable",
          "--validation.dataset_path", (char *)path, "--validation.seq_len", "31",
          "--validation.local_batch_size", "3"},
         "command line: --parallelism.tensor_parallel_degree: 2: validation.local_batch_size x "
         "validation.seq_len (3 x 31 tokens) must be a multiple of it"},
    };
    for (size_t i = 0; i < sizeof tp_bad / sizeof tp_bad[0]; i++) {
        rc = from_args(&c, (char **)tp_bad[i].argv, &err);
        CHECK(rc == 0, "tp case %zu should parse: %s", i, err.msg);
        rc = train_config_translate(&c, 2, &o, &err);
        CHECK(rc != 0 && !strncmp(err.msg, tp_bad[i].want, strlen(tp_bad[i].want)),
              "tp case %zu:\n  got  %s\n  want %s...", i, rc ? err.msg : "(accepted)",
              tp_bad[i].want);
        train_config_free(&c);
    }
    remove(path);
}

/* [activation_checkpoint] selective, [debug] and parallelism.disable_loss_parallel reach
 * train_opts: torchtitan's layer SAC (selective_ac_option N, 0 = every block), 'op' as full. */
static void ac_and_debug(void) {
    static const struct {
        char *argv[6];
        model_ac_mode ac;
        int every, force, lp; /* lp: loss parallel off */
    } cases[] = {
        {{"--ac", "selective"}, MODEL_AC_SELECTIVE, 2, 0, 0}, /* torchtitan's default option */
        {{"--ac", "selective", "--activation_checkpoint.selective_ac_option", "3"},
         MODEL_AC_SELECTIVE,
         3,
         0,
         0},
        {{"--ac", "selective", "--activation_checkpoint.selective_ac_option", "0"},
         MODEL_AC_SELECTIVE,
         0,
         0,
         0},
        {{"--ac", "selective", "--activation_checkpoint.selective_ac_option", "op"},
         MODEL_AC_FULL,
         0,
         0,
         0},
        {{"--ac", "full", "--debug.moe_force_load_balance"}, MODEL_AC_FULL, 0, 1, 0},
        {{"--parallelism.disable_loss_parallel"}, MODEL_AC_NONE, 0, 0, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        train_config c;
        train_opts o;
        base_err err;
        int rc = from_args(&c, (char **)cases[i].argv, &err);
        if (!rc) rc = train_config_to_opts(&c, &o, &err);
        CHECK(rc == 0, "ac case %zu: %s", i, err.msg);
        CHECK(!rc && o.ac == cases[i].ac && o.ac_every == cases[i].every &&
                  o.moe_force_balance == cases[i].force && o.loss_parallel_off == cases[i].lp,
              "ac case %zu: ac %d every %d force %d loss parallel off %d", i, (int)o.ac, o.ac_every,
              o.moe_force_balance, o.loss_parallel_off);
        train_config_free(&c);
    }
}

/* Plugins are native code: validation does not open them (a missing one is only found by
 * train_config_to_opts, for a run); overrides naming a plugin's kernels are checked then. */
static void plugins_loaded_for_runs_only(void) {
    train_config c;
    base_err err;
    int rc = load(&c, "[kernels]\nplugins = [\"/nonexistent/libk.so\"]\n", &err);
    CHECK(rc == 0, "a config naming a plugin validates without opening it: %s", err.msg);
    train_opts o;
    rc = train_config_to_opts(&c, &o, &err);
    const char *want =
        "x.toml:2:11: kernels.plugins: item 1: kernel plugin /nonexistent/libk.so: cannot load";
    CHECK(rc != 0 && !strncmp(err.msg, want, strlen(want)),
          "plugin at to_opts:\n  got  %s\n  want %s", rc ? err.msg : "(accepted)", want);
    train_config_free(&c);
}

/* checkpoint.initial_load_path turns checkpointing on whichever way it is set (the field, the
 * --initial-load-path alias, with or without =value); an explicit enable = false refuses. */
static void initial_load_enables(void) {
    static const char *const args[][3] = {{"--checkpoint.initial_load_path", "x", NULL},
                                          {"--initial-load-path", "x", NULL},
                                          {"--initial-load-path=x", NULL, NULL},
                                          {"--checkpoint.initial_load_path=x", NULL, NULL}};
    for (size_t i = 0; i < sizeof args / sizeof args[0]; i++) {
        train_config c;
        train_opts o;
        base_err err;
        int rc = from_args(&c, (char **)args[i], &err);
        if (!rc) rc = train_config_to_opts(&c, &o, &err);
        CHECK(rc == 0 && o.ckpt.enable && o.ckpt.initial_load_path &&
                  !strcmp(o.ckpt.initial_load_path, "x"),
              "%s: %s", args[i][0], rc ? err.msg : "checkpointing off");
        train_config_free(&c);
    }
}

/* Every shipped config loads, validates and round-trips; qwen3_debug.toml trains. */
static void shipped_configs(void) {
    const char *dir = TITAN_SOURCE_DIR "/configs";
    DIR *d = opendir(dir);
    CHECK(d != NULL, "no %s", dir);
    if (!d) return;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 5, ".toml")) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        train_config c;
        base_err err;
        train_config_defaults(&c);
        int rc = train_config_load_file(&c, path, &err);
        if (!rc) rc = train_config_validate(&c, &err);
        CHECK(rc == 0, "%s: %s", e->d_name, err.msg);
        if (!rc) check_round_trip(&c, e->d_name);
        train_config_free(&c);
        n++;
    }
    closedir(d);
    CHECK(n >= 6, "only %d configs in %s", n, dir);
}

/* configs/qwen3_debug.toml is exactly the same job as these flags (the demo of `make train`). */
static void debug_config_is_make_train(void) {
    char *old[] = {"--flavor",
                   "debugmodel",
                   "--tokenizer",
                   "../shared/data/qwen3_tokenizer",
                   "--set",
                   "vocab_size=151936",
                   "--set",
                   "dim=128",
                   "--set",
                   "n_layers=4",
                   "--set",
                   "n_heads=4",
                   "--set",
                   "n_kv_heads=2",
                   "--set",
                   "head_dim=32",
                   "--set",
                   "ffn_dim=384",
                   "--set",
                   "tie_embeddings=1",
                   "--data",
                   "runs/data/shakespeare_train.txt",
                   "--steps",
                   "200",
                   "--batch",
                   "8",
                   "--seq-len",
                   "128",
                   "--lr",
                   "3e-3",
                   "--warmup",
                   "20",
                   "--decay-ratio",
                   "0.5",
                   "--log-freq",
                   "10",
                   "--dump-folder",
                   "runs/debug",
                   "--metrics",
                   "metrics.jsonl",
                   "--out",
                   "hf",
                   "--sample",
                   "120",
                   "--checkpoint-interval",
                   "100",
                   "--keep-latest-k",
                   "2",
                   "--last-save-full",
                   "--metrics.enable_tensorboard",
                   "--validation.enable",
                   "--validation.dataset_path",
                   "runs/data/shakespeare_val.txt",
                   "--validation.freq",
                   "50",
                   "--validation.steps",
                   "20",
                   "--validation.seq_len",
                   "128",
                   NULL};
    char *cfg[] = {"--config", TITAN_SOURCE_DIR "/configs/qwen3_debug.toml", NULL};
    train_config a, b;
    train_opts oa, ob;
    base_err err;
    int rc = from_args(&a, old, &err) || train_config_to_opts(&a, &oa, &err);
    CHECK(rc == 0, "old flags: %s", err.msg);
    rc = from_args(&b, cfg, &err) || train_config_to_opts(&b, &ob, &err);
    CHECK(rc == 0, "qwen3_debug.toml: %s", err.msg);
    CHECK(!memcmp(&oa.model, &ob.model, sizeof oa.model), "model args differ");
    CHECK(oa.data_path && ob.data_path && !strcmp(oa.data_path, ob.data_path), "data");
    CHECK(oa.jsonl_path && ob.jsonl_path && !strcmp(oa.jsonl_path, ob.jsonl_path), "metrics %s",
          ob.jsonl_path ? ob.jsonl_path : "NULL");
    CHECK(oa.out_dir && ob.out_dir && !strcmp(oa.out_dir, ob.out_dir), "export %s",
          ob.out_dir ? ob.out_dir : "NULL");
    CHECK(oa.steps == ob.steps && oa.batch == ob.batch && oa.seq_len == ob.seq_len &&
              oa.grad_accum == ob.grad_accum && oa.max_norm == ob.max_norm && oa.seed == ob.seed &&
              oa.ac == ob.ac && oa.log_freq == ob.log_freq &&
              oa.sample_tokens == ob.sample_tokens && oa.peak_flops == ob.peak_flops &&
              oa.ce_chunk == ob.ce_chunk && oa.n_kernel_overrides == ob.n_kernel_overrides,
          "scalars differ");
    CHECK(!memcmp(&oa.adamw, &ob.adamw, sizeof oa.adamw) && !memcmp(&oa.lr, &ob.lr, sizeof oa.lr),
          "optimizer or schedule differ");
    CHECK(ob.steps == 200 && ob.adamw.lr == 3e-3 && ob.lr.decay_ratio == 0.5 &&
              ob.lr.warmup_steps == 20 && ob.sample_tokens == 120,
          "qwen3_debug.toml values");
    CHECK(oa.tokenizer_dir && ob.tokenizer_dir && !strcmp(oa.tokenizer_dir, ob.tokenizer_dir) &&
              oa.tb_dir && ob.tb_dir && !strcmp(oa.tb_dir, ob.tb_dir) && ob.val.path &&
              oa.val.path && !strcmp(oa.val.path, ob.val.path) && oa.val.freq == ob.val.freq &&
              oa.val.steps == ob.val.steps && oa.val.batch == ob.val.batch &&
              oa.val.seq_len == ob.val.seq_len,
          "tokenizer, TensorBoard or validation differ");
    CHECK(oa.ckpt.enable && ob.ckpt.enable && !strcmp(oa.ckpt.folder, ob.ckpt.folder) &&
              oa.ckpt.interval == ob.ckpt.interval &&
              oa.ckpt.keep_latest_k == ob.ckpt.keep_latest_k &&
              oa.ckpt.last_save_model_only == ob.ckpt.last_save_model_only,
          "checkpoint settings differ");
    train_config_free(&a);
    train_config_free(&b);
}

/* Hostile input: single-byte corruptions of a shipped config load or fail cleanly (ASan). */
static void mutations(void) {
    size_t n = 0;
    base_err err;
    char *text = base_read_file(TITAN_SOURCE_DIR "/configs/qwen3_debug.toml", 1 << 20, &n, &err);
    CHECK(text != NULL, "%s", err.msg);
    if (!text) return;
    const char bytes[] = {'"', '=', '[', ']', '\n', '.', '0', 'x', '-', ',', '#', 0, (char)0x80};
    char *copy = malloc(n);
    int ok = 0;
    for (uint64_t i = 0; i < 3000; i++) {
        memcpy(copy, text, n);
        const size_t at = base_rng_u64(7, 1, i) % n;
        copy[at] = bytes[base_rng_u64(7, 2, i) % sizeof bytes];
        train_config c;
        train_config_defaults(&c);
        if (train_config_load_text(&c, copy, n, "m.toml", &err) == 0 &&
            train_config_validate(&c, &err) == 0)
            ok++;
        else
            CHECK(!strncmp(err.msg, "m.toml:", 7), "mutation %llu: error without position: %s",
                  (unsigned long long)i, err.msg);
        train_config_free(&c);
    }
    free(copy);
    free(text);
    CHECK(ok > 0, "no mutation loaded");
}

/* One error per file for all its unknown names, each with its place; the no-suggestion and the
 * suggestion forms both appear. */
static void unknown_names_at_once(void) {
    train_config c;
    base_err err;
    const char *text = "stray = 1\n[profilin]\na = 1\n[job]\nfoo = 2\n[training]\nstpes = 3\n"
                       "[quantize.linear.float9]\nx = 1\n";
    CHECK(load(&c, text, &err) != 0, "unknown names accepted");
    const char *want = "x.toml: 5 unknown names:\n"
                       "  x.toml:1:1: key 'stray' is outside any [section]\n"
                       "  x.toml:2:1: unknown section [profilin]; did you mean [profiling]?\n"
                       "  x.toml:5:1: unknown key 'foo' in [job]\n"
                       "  x.toml:7:1: unknown key 'stpes' in [training]; did you mean 'steps'?\n"
                       "  x.toml:8:1: unknown section [quantize.linear.float9]; did you mean "
                       "[quantize.linear.float8]?";
    CHECK(!strcmp(err.msg, want), "unknown names:\n  got  %s\n  want %s", err.msg, want);
    train_config_free(&c);
    /* the command line's too, before anything is applied */
    char *argv[] = {"--profilin.enable_profiling",
                    "--training.stpes",
                    "3",
                    "--steps",
                    "2",
                    "--tracing.x=1",
                    NULL};
    CHECK(from_args(&c, argv, &err) != 0, "unknown options accepted");
    const char *want_cli = "command line: 3 unknown options:\n"
                           "  unknown option '--profilin.enable_profiling'; did you mean "
                           "'--profiling.enable_profiling'?\n"
                           "  unknown option '--training.stpes'; did you mean '--training.steps'?\n"
                           "  unknown option '--tracing.x' (titan train --help lists them)";
    CHECK(!strcmp(err.msg, want_cli), "unknown options:\n  got  %s\n  want %s", err.msg, want_cli);
    train_config_free(&c);
}

/* torchtitan v0.2.2 keys: every section parses; keys for features titan lacks are accepted at
 * their defaults and refused by name when set otherwise; the renamed / deprecated ones map. */
static void torchtitan_compat(void) {
    train_config c;
    base_err err;
    train_opts o;
    /* torchtitan's defaults (and non-defaults of inert keys) load and translate */
    const char *inert =
        "[profiling]\nenable_profiling = false\nprofile_freq = 100\n"
        "[compile]\nenable = true\ncomponents = [\"model\", \"loss\"]\n"
        "[quantize.linear.float8]\nfilter_fqns = [\"output\"]\n"
        "[quantize.grouped_mm.float8]\nfqns = \"experts\"\n"
        "[parallelism]\nmodule_fqns_per_model_part = [[\"tok_embeddings\"]]\n"
        "pipeline_parallel_schedule = \"Interleaved1F1B\"\n"
        "[training]\ngc_freq = 7\n[training.dataloader]\nnum_workers = 4\n"
        "[validation.dataloader]\npin_memory = true\n"
        "[metrics]\nenable_wandb = true\ndisable_color_printing = true\n"
        "[fault_tolerance]\nreplica_id = 3\n[comm]\ninit_timeout_seconds = 60\n"
        "[debug]\nseed = 1234\ndeterministic = true\nmoe_force_load_balance = true\n"
        "[memory_estimation]\nenable = true\n[job]\nprint_config = true\n"
        "[checkpoint]\nexclude_from_loading = [\"optimizer\"]\nload_only = true\n"
        "[model]\ntokenizer_path = \"/tok\"\n";
    int rc = load(&c, inert, &err);
    CHECK(rc == 0, "torchtitan keys: %s", err.msg);
    if (!rc) {
        check_round_trip(&c, "torchtitan keys");
        rc = train_config_to_opts(&c, &o, &err);
        CHECK(rc == 0, "torchtitan keys to opts: %s", err.msg);
        CHECK(!rc && o.seed == 1234, "debug.seed is the seed");
        CHECK(!rc && o.tokenizer_dir && !strcmp(o.tokenizer_dir, "/tok"),
              "model.tokenizer_path sets hf_assets_path");
        CHECK(!rc && o.moe_force_balance && o.memory_estimation && o.ckpt.load_only &&
                  o.ckpt.exclude == TRAIN_CKPT_OPTIMIZER && o.comm_init_timeout == 60 &&
                  o.comm_train_timeout == 100,
              "parsed keys reach train_opts");
        CHECK(c.job.print_config == 1, "job.print_config");
    }
    train_config_free(&c);

    /* set to something that would change training: refused, naming the key */
    static const struct {
        const char *text, *want;
    } refused[] = {
        {"[model]\nconverters = [\"float8\"]\n", "x.toml:2:14: model.converters: not supported"},
        {"[model]\nname = \"llama3\"\n", "x.toml:2:8: model.name: 'llama3' is not implemented"},
        {"[training]\nenable_cpu_offload = true\n",
         "x.toml:2:22: training.enable_cpu_offload: not supported"},
        {"[fault_tolerance]\nenable = true\n",
         "x.toml:2:10: fault_tolerance.enable: not supported"},
        {"[experimental]\ncustom_import = \"m\"\n",
         "x.toml:2:17: experimental.custom_import: not supported"},
        {"[job]\ncustom_config_module = \"m\"\n",
         "x.toml:2:24: job.custom_config_module: not supported"},
        {"[parallelism]\nexpert_tensor_parallel_degree = 2\n",
         "x.toml:2:33: parallelism.expert_tensor_parallel_degree: not supported"},
        {"[parallelism]\nexpert_parallel_comm_backend = \"deepep\"\n",
         "x.toml:2:32: parallelism.expert_parallel_comm_backend: not supported"},
        {"[parallelism]\nenable_async_tensor_parallel = true\n",
         "x.toml:2:32: parallelism.enable_async_tensor_parallel: not supported"},
        {"[optimizer]\nearly_step_in_backward = true\n",
         "x.toml:2:26: optimizer.early_step_in_backward: not supported"},
        {"[comm]\nmode = \"fake_backend\"\n", "x.toml:2:8: comm.mode: not supported"},
        {"[activation_checkpoint]\nmode = \"memory_budget\"\n",
         "x.toml:2:8: activation_checkpoint.mode: memory_budget"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        rc = load(&c, refused[i].text, &err);
        CHECK(rc == 0, "refused case %zu must load: %s", i, err.msg);
        if (!rc) rc = train_config_to_opts(&c, &o, &err);
        CHECK(rc != 0, "refused case %zu translated:\n%s", i, refused[i].text);
        if (rc)
            CHECK(!strncmp(err.msg, refused[i].want, strlen(refused[i].want)),
                  "refused case %zu:\n  got  %s\n  want %s...", i, err.msg, refused[i].want);
        train_config_free(&c);
    }

    /* torchtitan's run script passes --job.config_file; tyro spells keys with '-' too */
    const char *path = "/tmp/titan_test_config_tt.toml";
    FILE *f = fopen(path, "w");
    fprintf(f, "[training]\nsteps = 33\n");
    fclose(f);
    char *a1[] = {"--job.config_file", (char *)path, "--training.local-batch-size", "3", NULL};
    char *a2[] = {"--job.config-file=/tmp/titan_test_config_tt.toml", NULL};
    rc = from_args(&c, a1, &err);
    CHECK(rc == 0 && c.training.steps == 33 && c.training.local_batch_size == 3,
          "--job.config_file FILE: %s", err.msg);
    train_config_free(&c);
    rc = from_args(&c, a2, &err);
    CHECK(rc == 0 && c.training.steps == 33, "--job.config-file=FILE: %s", err.msg);
    train_config_free(&c);
    remove(path);

    /* total_steps < steps: allowed (the schedule runs on past its end, as torchtitan's) */
    char *a3[] = {"--lr_scheduler.total_steps", "5", "--steps", "10", "--warmup", "1", NULL};
    rc = from_args(&c, a3, &err);
    if (!rc) rc = train_config_to_opts(&c, &o, &err);
    CHECK(rc == 0 && o.lr.total_steps == 5 && o.steps == 10, "total_steps < steps: %s", err.msg);
    train_config_free(&c);
}

/* A call of from_args or train_config_to_opts, for with_stderr. */
typedef struct {
    train_config *c;
    train_opts *o;
    char **argv;
    base_err *err;
} config_call;

static int call_from_args(void *p) {
    const config_call *k = p;
    return from_args(k->c, k->argv, k->err);
}

static int call_to_opts(void *p) {
    const config_call *k = p;
    return train_config_to_opts(k->c, k->o, k->err);
}

/* fn(arg) with stderr (the warnings) captured into log. */
static int with_stderr(int (*fn)(void *), void *arg, char *log, size_t n) {
    fflush(stderr);
    const int saved = dup(2);
    FILE *tmp = tmpfile();
    if (saved < 0 || !tmp) return -2;
    dup2(fileno(tmp), 2);
    const int rc = fn(arg);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(tmp);
    log[fread(log, 1, n - 1, tmp)] = 0;
    fclose(tmp);
    return rc;
}

static int from_args_log(train_config *c, char **argv, base_err *err, char *log, size_t n) {
    config_call k = {c, NULL, argv, err};
    return with_stderr(call_from_args, &k, log, n);
}

static int to_opts_log(train_config *c, train_opts *o, base_err *err, char *log, size_t n) {
    config_call k = {c, o, NULL, err};
    return with_stderr(call_to_opts, &k, log, n);
}

/* A field set twice on the command line: the later setting wins, as torchtitan's tyro parser
 * keeps the last (`--training.steps 5 --training.steps 7` is 7, a repeated list option replaces
 * the list), and a warning names the field and both settings. A second setting to the same
 * value, and the command line over the file, are no news. tyro's negative booleans
 * `--section.no_key` / `--section.no-key` (torchtitan's docs/debugging.md) set false. */
static void command_line_repeats(void) {
    train_config c;
    base_err err;
    char log[4096];
    char *a1[] = {"--training.steps", "5", "--training.steps=7", NULL};
    int rc = from_args_log(&c, a1, &err, log, sizeof log);
    CHECK(rc == 0 && c.training.steps == 7, "repeat: %s, steps %lld", err.msg,
          (long long)c.training.steps);
    CHECK(strstr(log, "training.steps is set twice on the command line: --training.steps=7 gives "
                      "7, replacing 5 from --training.steps; the later setting wins"),
          "repeat not named: '%s'", log);
    train_config_free(&c);

    char *a2[] = {"--kernels.overrides", "attention=default", "--kernels.overrides", "rope=default",
                  NULL};
    rc = from_args_log(&c, a2, &err, log, sizeof log);
    CHECK(rc == 0 && c.kernels.overrides.n == 1 &&
              !strcmp(c.kernels.overrides.v[0], "rope=default"),
          "a repeated list option replaces the list (tyro): %s", err.msg);
    CHECK(strstr(log, "kernels.overrides is set twice") && strstr(log, "[\"attention=default\"]"),
          "list repeat not named: '%s'", log);
    train_config_free(&c);

    char *a3[] = {"--grad-accum", "2", "--training.global_batch_size", "16", NULL};
    rc = from_args_log(&c, a3, &err, log, sizeof log);
    CHECK(rc == 0 && c.training.global_batch_size == 16, "grad-accum then gbs: %s", err.msg);
    CHECK(strstr(log, "training.global_batch_size is set twice") && strstr(log, "--grad-accum"),
          "--grad-accum dropped without a word: '%s'", log);
    train_config_free(&c);

    /* two 300-byte paths that differ in their last byte: still two settings (a 160-byte
     * rendering had cut both to the same text and said nothing) */
    char p1[320], p2[320];
    memset(p1, 'd', 300);
    p1[0] = '/';
    p1[300] = 0;
    memcpy(p2, p1, sizeof p1);
    p2[299] = 'e';
    char *alp[] = {"--job.dump_folder", p1, "--job.dump_folder", p2, NULL};
    rc = from_args_log(&c, alp, &err, log, sizeof log);
    CHECK(rc == 0 && !strcmp(c.job.dump_folder, p2), "long path repeat: %s", err.msg);
    CHECK(strstr(log, "job.dump_folder is set twice") && strstr(log, p2) && strstr(log, p1),
          "two long paths differing late not told apart: '%s'", log);
    train_config_free(&c);

    const char *path = "/tmp/titan_test_config_rep.toml";
    FILE *f = fopen(path, "w");
    fprintf(f, "[training]\nsteps = 50\n[profiling]\nenable_profiling = true\n");
    fclose(f);
    char *a4[] = {"--config",
                  (char *)path,
                  "--training.steps",
                  "7",
                  "--checkpoint-interval",
                  "5",
                  "--checkpoint-folder",
                  "ck",
                  "--profiling.no-enable-profiling",
                  "--checkpoint.no_initial_load_model_only",
                  NULL};
    rc = from_args_log(&c, a4, &err, log, sizeof log);
    CHECK(rc == 0 && c.training.steps == 7 && c.checkpoint.enable, "file then CLI: %s", err.msg);
    CHECK(!strstr(log, "twice"), "no news warned: '%s'", log);
    CHECK(rc == 0 && !c.profiling.enable_profiling && !c.checkpoint.initial_load_model_only,
          "--section.no_key / --section.no-key set false: profiling %d, initial_load_model_only %d",
          c.profiling.enable_profiling, c.checkpoint.initial_load_model_only);
    train_config_free(&c);
    remove(path);

    /* fields of nested sections ([training.dataloader], [quantize.linear.float8]) */
    char *a5[] = {"--training.dataloader.num_workers",   "4",
                  "--validation.dataloader.pin-memory",  "--quantize.linear.float8.emulate",
                  "--quantize.linear.float8.no-emulate", NULL};
    rc = from_args(&c, a5, &err);
    CHECK(rc == 0 && c.training.dataloader.num_workers == 4 && c.validation.dataloader.pin_memory &&
              !c.quantize.linear.float8.emulate,
          "nested sections on the command line: %s", err.msg);
    train_config_free(&c);

    static const struct {
        char *argv[3];
        const char *want;
    } bad[] = {
        {{"--checkpoint.no_enable=true"},
         "command line: --checkpoint.no_enable=true: takes no value (it sets "
         "checkpoint.enable = false)"},
        {{"--training.no_steps"}, "command line: unknown option '--training.no_steps'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rc = from_args(&c, (char **)bad[i].argv, &err);
        CHECK(rc != 0 && !strncmp(err.msg, bad[i].want, strlen(bad[i].want)),
              "bad negation %zu:\n  got  %s\n  want %s...", i, rc ? err.msg : "(accepted)",
              bad[i].want);
        train_config_free(&c);
    }
}

/* debug.seed (torchtitan's key) and training.seed (--seed) name one seed: the command line's
 * wins over the file's, two different values from one place are refused (the file's debug.seed
 * had silently beaten --seed); a seq_len above the model's max_seq_len raises it with
 * torchtitan's warning (it was refused); 'none' unsets a path (tyro's None), not a choice. */
static void seed_context_none(void) {
    char path[] = "/tmp/titan_test_config_XXXXXX";
    const int fd = mkstemp(path);
    const char *toml[] = {"[debug]\nseed = 1\n", "[training]\nseed = 3\n",
                          "[debug]\nseed = 1\n[training]\nseed = 2\n"};
    static const struct {
        int file;         /* toml[file], -1 none */
        const char *a[5]; /* after --config */
        long long seed;   /* -1: refused */
    } cases[] = {
        {0, {"--seed", "7"}, 7},
        {0, {"--training.seed", "7"}, 7},
        {0, {NULL}, 1},
        {1, {"--debug.seed", "9"}, 9},
        {1, {NULL}, 3},
        {2, {NULL}, 1}, /* both in one file: debug.seed, as a saved config.toml has them */
        {2, {"--seed", "2"}, 2},
        {-1, {"--seed", "5", "--debug.seed", "6"}, -1},
        {-1, {"--seed", "5", "--debug.seed", "5"}, 5},
        {-1, {"--debug.seed", "6"}, 6},
    };
    CHECK(fd >= 0, "mkstemp");
    for (size_t i = 0; fd >= 0 && i < sizeof cases / sizeof *cases; i++) {
        char *argv[8] = {0};
        int n = 0;
        if (cases[i].file >= 0) {
            FILE *f = fopen(path, "w");
            fputs(toml[cases[i].file], f);
            fclose(f);
            argv[n++] = "--config";
            argv[n++] = path;
        }
        for (int k = 0; cases[i].a[k]; k++) argv[n++] = (char *)cases[i].a[k];
        train_config c;
        train_opts o;
        base_err err;
        int rc = from_args(&c, argv, &err);
        if (!rc) rc = train_config_to_opts(&c, &o, &err);
        if (cases[i].seed < 0)
            CHECK(rc != 0 && strstr(err.msg, "training.seed") &&
                      strstr(err.msg, "they name the same seed; set one"),
                  "seed case %zu: not refused (%s)", i, rc ? err.msg : "accepted");
        else
            CHECK(rc == 0 && o.seed == (uint64_t)cases[i].seed, "seed case %zu: %s, seed %llu", i,
                  rc ? err.msg : "", rc ? 0ULL : (unsigned long long)o.seed);
        train_config_free(&c);
    }
    if (fd >= 0) close(fd), unlink(path);

    train_config c;
    train_opts o;
    base_err err;
    char log[4096];
    char *a1[] = {"--training.seq_len",
                  "8192",
                  "--validation.enable",
                  "--validation.dataset_path",
                  "v.txt",
                  "--validation.seq_len",
                  "9000",
                  NULL};
    int rc = from_args_log(&c, a1, &err, log, sizeof log);
    CHECK(rc == 0, "seq_len: %s", err.msg);
    if (!rc) rc = to_opts_log(&c, &o, &err, log, sizeof log);
    CHECK(rc == 0 && o.seq_len == 8192 && o.model.max_seq_len == 9000,
          "seq_len above max_seq_len: %s, max_seq_len %d", rc ? err.msg : "", o.model.max_seq_len);
    CHECK(strstr(log, "Sequence length 8192 exceeds original maximum 4096: training.seq_len") &&
              strstr(log, "Sequence length 9000 exceeds original maximum 8192: validation"),
          "raise not said: '%s'", log);
    train_config_free(&c);

    char *a2[] = {"--checkpoint.initial_load_path",
                  "None",
                  "--training.dataset_path",
                  "none",
                  "--model.tokenizer_path=None",
                  "--activation_checkpoint.mode",
                  "none",
                  NULL};
    rc = from_args(&c, a2, &err);
    if (!rc) rc = train_config_to_opts(&c, &o, &err);
    CHECK(rc == 0 && !o.ckpt.enable && !o.ckpt.initial_load_path && !o.data_path &&
              !c.model.tokenizer_path[0] && !strcmp(c.activation_checkpoint.mode, "none"),
          "'none' paths: %s", rc ? err.msg : "set");
    train_config_free(&c);
}

/* --set takes titan inspect's argument names as well as the [model] fields (n_experts =
 * num_experts, moe_ffn_dim = moe_inter_dim), and norm_topk_prob is an override (train refused
 * it while inspect, plan and generate took it: an audit's finding). */
static void set_names(void) {
    char *a[] = {"--flavor", "debugmodel_moe", "--set", "n_experts=4",      "--set", "top_k=2",
                 "--set",    "moe_ffn_dim=32", "--set", "norm_topk_prob=0", NULL};
    train_config c;
    train_opts o;
    base_err err;
    int rc = from_args(&c, a, &err);
    if (!rc) rc = train_config_to_opts(&c, &o, &err);
    CHECK(rc == 0 && o.model.n_experts == 4 && o.model.top_k == 2 && o.model.moe_ffn_dim == 32 &&
              o.model.norm_topk_prob == 0 && c.model.num_experts.v == 4,
          "--set with inspect's names: %s", rc ? err.msg : "not applied");
    train_config_free(&c);
}

/* A saved config.toml (every field written out, defaults too) runs without warnings about
 * settings the user never made: the expert-bias rate at its default in a dense model, and
 * dataset = "random" beside the path of a run started with --data (an audit's finding); the
 * same settings given on the command line, or the rate at another value, are still said.
 * metrics.save_report_file none / None is no page, as "" (an audit's leftover: a page named
 * "none" had been written). */
static void saved_config_quiet(void) {
    char path[] = "/tmp/titan_test_config_XXXXXX";
    const int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    if (fd < 0) return;
    FILE *f = fdopen(fd, "w");
    fputs("[model]\nmoe_bias_update_rate = 0.001\n[training]\ndataset = \"random\"\n"
          "dataset_path = \"x.txt\"\n",
          f);
    fclose(f);
    static const struct {
        const char *a[3];
        const char *want; /* NULL: no warning */
    } cases[] = {
        {{NULL}, NULL},
        {{"--training.dataset", "random"}, "--training.dataset random is given"},
        {{"--model.moe_bias_update_rate", "0.01"}, "moe_bias_update_rate has no effect"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *argv[6] = {"--config", path, (char *)cases[i].a[0], (char *)cases[i].a[1], NULL};
        train_config c;
        train_opts o;
        base_err err;
        char log[4096] = "";
        int rc = from_args(&c, argv, &err);
        if (!rc) rc = to_opts_log(&c, &o, &err, log, sizeof log);
        CHECK(rc == 0, "saved config case %zu: %s", i, err.msg);
        if (cases[i].want)
            CHECK(strstr(log, cases[i].want), "case %zu: '%s' not said: '%s'", i, cases[i].want,
                  log);
        else
            CHECK(!strstr(log, "[titan warn]"), "case %zu: a warning: '%s'", i, log);
        train_config_free(&c);
    }
    unlink(path);
    for (int i = 0; i < 3; i++) { /* "", none, None: no page; a name: a page under dump_folder */
        char *argv[] = {"--metrics.save_report_file",
                        i == 0   ? "none"
                        : i == 1 ? "None"
                                 : "r.html",
                        "--job.dump_folder", "/tmp/d", NULL};
        train_config c;
        train_opts o;
        base_err err;
        int rc = from_args(&c, argv, &err);
        if (!rc) rc = train_config_to_opts(&c, &o, &err);
        CHECK(rc == 0 && (i < 2 ? !o.report_path
                                : o.report_path && !strcmp(o.report_path, "/tmp/d/r.html")),
              "save_report_file case %d: %s", i,
              rc              ? err.msg
              : o.report_path ? o.report_path
                              : "(none)");
        train_config_free(&c);
    }
    /* a config with debug.seed, translated, printed as the saved config.toml is and loaded
     * again: the same seed, not a refusal (the printed file has training.seed beside it) */
    char saved[] = "/tmp/titan_test_config_XXXXXX";
    const int sfd = mkstemp(saved);
    f = sfd >= 0 ? fdopen(sfd, "w") : NULL;
    CHECK(f != NULL, "mkstemp");
    if (f) {
        train_config c1, c2;
        train_opts o1, o2;
        base_err e1, e2;
        char *a1[] = {"--debug.seed", "7", NULL};
        int r1 = from_args(&c1, a1, &e1);
        if (!r1) r1 = train_config_to_opts(&c1, &o1, &e1);
        if (!r1) train_config_print(&c1, f);
        fclose(f);
        char *a2[] = {"--config", saved, NULL};
        int r2 = r1 ? -1 : from_args(&c2, a2, &e2);
        if (!r2) r2 = train_config_to_opts(&c2, &o2, &e2);
        CHECK(!r1 && !r2 && o1.seed == 7 && o2.seed == 7, "saved seed round trip: %s",
              r1   ? e1.msg
              : r2 ? e2.msg
                   : "another seed");
        train_config_free(&c1);
        if (!r1) train_config_free(&c2);
        unlink(saved);
    }
    /* 'none' empties a path whose default is "" only: job.dump_folder's "" is no folder */
    char *a[] = {"--checkpoint.hf_export_folder", "none", "--job.dump_folder", "none", NULL};
    train_config c;
    base_err err;
    const int rc = from_args(&c, a, &err);
    CHECK(rc == 0 && !c.checkpoint.hf_export_folder[0] && !strcmp(c.job.dump_folder, "none"),
          "none: %s", rc ? err.msg : "hf_export_folder not emptied, or dump_folder emptied");
    train_config_free(&c);
}

/* Every model argument reaches the model from each front end: [model] in a TOML file by its
 * config name, train's --set by either name, the JSON codec of checkpoints and model folders
 * (and back), inspect's --set (model_args_set). The list is this test's own: an argument the
 * model has and the list lacks fails the completeness check, so a new one gets a case. */
static void model_args_every_front_end(void) {
    /* group: 's' identity, 'm' an MoE's identity, 'i' informational (in a checkpoint, not
     * compared); kind: what model_args_set takes at the edge: 'i' integer >= 0, 'b' 0 / 1,
     * 'p' real > 0, 'n' real >= 0 */
    static const struct {
        const char *field, *cfg_key, *value; /* value: TOML and --set text */
        double want;
        char group, kind;
    } cases[] = {
        {"dim", "dim", "320", 320, 's', 'i'},
        {"n_layers", "n_layers", "3", 3, 's', 'i'},
        {"n_heads", "n_heads", "8", 8, 's', 'i'},
        {"n_kv_heads", "n_kv_heads", "4", 4, 's', 'i'},
        {"head_dim", "head_dim", "64", 64, 's', 'i'},
        {"ffn_dim", "ffn_dim", "1000", 1000, 's', 'i'},
        {"vocab_size", "vocab_size", "3000", 3000, 's', 'i'},
        {"rope_theta", "rope_theta", "5e5", 5e5, 's', 'p'},
        {"norm_eps", "norm_eps", "1e-5", 1e-5, 's', 'p'},
        {"tie_embeddings", "tie_embeddings", "true", 1, 's', 'b'},
        {"max_seq_len", "max_seq_len", "8192", 8192, 'i', 'i'},
        {"n_experts", "num_experts", "16", 16, 'm', 'i'},
        {"top_k", "top_k", "2", 2, 'm', 'i'},
        {"moe_ffn_dim", "moe_inter_dim", "96", 96, 'm', 'i'},
        {"norm_topk_prob", "norm_topk_prob", "false", 0, 'm', 'b'},
        {"router_aux_loss_coef", "router_aux_loss_coef", "0.01", 0.01, 'm', 'n'},
    };
    const int n = (int)(sizeof cases / sizeof cases[0]);
    base_err err;
    model_args base;
    CHECK(model_flavor("debugmodel_moe", &base, &err) == 0, "flavor: %s", err.msg);
    json_t *full = model_args_json(&base, MODEL_ARGS_JSON_FULL);
    CHECK(full && (int)json_object_size(full) == n + 1, /* + flavor */
          "the model has %d arguments, this test %d: give the new one a case",
          full ? (int)json_object_size(full) - 1 : -1, n);
    for (int i = 0; i < n; i++) {
        const char *f = cases[i].field;
        CHECK(full && json_object_get(full, f), "%s: not a model argument", f);
        json_t *b = full ? json_object_get(full, f) : NULL;
        CHECK(b && json_number_value(b) != cases[i].want, "%s: the flavor's value is the case's",
              f);
        for (int front = 0; front < 5; front++) {
            char toml[256], set[96];
            train_config c;
            train_opts o;
            model_args a = base;
            int rc;
            if (front == 0) {
                snprintf(toml, sizeof toml, "[model]\nflavor = \"debugmodel_moe\"\n%s = %s\n",
                         cases[i].cfg_key, cases[i].value);
                rc = load(&c, toml, &err);
            } else if (front <= 2) {
                snprintf(set, sizeof set, "%s=%s", front == 1 ? f : cases[i].cfg_key,
                         cases[i].value);
                char *argv[] = {"--flavor", "debugmodel_moe", "--set", set, NULL};
                rc = from_args(&c, argv, &err);
            } else { /* inspect's --set by either name */
                rc = model_args_set(&a, front == 3 ? f : cases[i].cfg_key, cases[i].value, 1, &err);
            }
            if (front < 3) {
                if (!rc) rc = train_config_to_opts(&c, &o, &err);
                if (!rc) a = o.model;
                train_config_free(&c);
            }
            CHECK(rc == 0, "%s, front end %d: %s", f, front, err.msg);
            if (rc) continue;
            /* the value in the model's arguments, then through the JSON codec and back */
            json_t *j = model_args_json(&a, MODEL_ARGS_JSON_FULL);
            json_t *v = j ? json_object_get(j, f) : NULL;
            CHECK(v && json_number_value(v) == cases[i].want, "%s, front end %d: %g, want %g", f,
                  front, v ? json_number_value(v) : NAN, cases[i].want);
            model_args back;
            memset(&back, 0, sizeof back);
            rc = j ? model_args_from_json(j, "x", &back, &err) : -1;
            CHECK(rc == 0 && model_args_equal(&a, &back) && back.max_seq_len == a.max_seq_len,
                  "%s: JSON round trip: %s", f, rc ? err.msg : "differs");
            json_decref(j);
        }
    }
    /* Each argument's group: in which JSON forms of a dense and an MoE model it is. */
    model_args dense;
    CHECK(model_flavor("debugmodel", &dense, &err) == 0, "flavor: %s", err.msg);
    json_t *forms[4] = {model_args_json(&dense, MODEL_ARGS_JSON_IDENTITY),
                        model_args_json(&base, MODEL_ARGS_JSON_IDENTITY),
                        model_args_json(&dense, MODEL_ARGS_JSON_CHECKPOINT),
                        model_args_json(&base, MODEL_ARGS_JSON_CHECKPOINT)};
    for (int i = 0; i < n; i++) {
        const char g = cases[i].group;
        const int want[4] = {g == 's', g != 'i', g != 'm', 1};
        for (int k = 0; k < 4; k++)
            CHECK(forms[k] && (json_object_get(forms[k], cases[i].field) != NULL) == want[k],
                  "%s: %sin the %s form of a %s model", cases[i].field, want[k] ? "not " : "",
                  k < 2 ? "identity" : "checkpoint", k % 2 ? "MoE" : "dense");
        /* the kind, at its edges (a checkpoint's model_args.json: no override's range) */
        const char *const edge[][2] = {/* accepted, refused */
                                       {"0", "-1"},
                                       {"1", "2"},
                                       {"1e-300", "0"},
                                       {"0", "-1e-300"}};
        const int e = cases[i].kind == 'i'   ? 0
                      : cases[i].kind == 'b' ? 1
                      : cases[i].kind == 'p' ? 2
                                             : 3;
        model_args t = base;
        CHECK(model_args_set(&t, cases[i].field, edge[e][0], 0, &err) == 0, "%s=%s refused: %s",
              cases[i].field, edge[e][0], err.msg);
        CHECK(model_args_set(&t, cases[i].field, edge[e][1], 0, &err) != 0, "%s=%s accepted",
              cases[i].field, edge[e][1]);
    }
    /* a command line's --set holds the [model] field's range; a checkpoint's model_args.json
     * (what a HF config.json gave: top_k 100 of 128 experts, rms_norm_eps 2) is read as it is */
    const char *const beyond[][2] = {{"top_k", "100"}, {"norm_eps", "2"}, {"n_experts", "0"}};
    for (int i = 0; i < 3; i++) {
        model_args t = base;
        CHECK(model_args_set(&t, beyond[i][0], beyond[i][1], 0, &err) == 0,
              "model_args.json %s=%s refused: %s", beyond[i][0], beyond[i][1], err.msg);
        CHECK((model_args_set(&t, beyond[i][0], beyond[i][1], 1, &err) != 0) == (i < 2),
              "--set %s=%s: %s", beyond[i][0], beyond[i][1], i < 2 ? "accepted" : err.msg);
    }
    for (int k = 0; k < 4; k++) json_decref(forms[k]);
    json_decref(full);
}

/* Group patterns are Python re's (torchtitan's re.search), run by PCRE2: over 141 names of a
 * 12-layer model (dense blocks and MoE ones alternating), each pattern, as the first of two
 * groups (then '.*'), takes the names Python 3.11's re.search finds: the rows below (count,
 * first and last index) are Python's, printed once over the same names. The patterns cover the
 * rewrites ({,n} {,} {1, 2} {} as Python reads them, a comment holding '['), flags, classes,
 * escapes, lookaround and non-ASCII text (UTF mode); syntax the two read differently is
 * refused by name; a match past PCRE2's backtracking limit is an error, not a miss. */
static void param_group_patterns(void) {
    static char store[141][48];
    const char *names[141];
    int n = 0;
    snprintf(store[n++], 48, "tok_embeddings.weight");
    static const char *const attn[] = {"attention_norm.weight",   "attention.wq.weight",
                                       "attention.wk.weight",     "attention.wv.weight",
                                       "attention.q_norm.weight", "attention.k_norm.weight",
                                       "attention.wo.weight",     "ffn_norm.weight"};
    for (int l = 0; l < 12; l++) {
        for (int t = 0; t < 8; t++) snprintf(store[n++], 48, "layers.%d.%s", l, attn[t]);
        if (l % 2) {
            snprintf(store[n++], 48, "layers.%d.moe.router.gate.weight", l);
            for (int w = 0; w < 3; w++)
                snprintf(store[n++], 48, "layers.%d.moe.experts.w%d", l, "132"[w] - '0');
        } else {
            for (int w = 0; w < 3; w++)
                snprintf(store[n++], 48, "layers.%d.feed_forward.w%d.weight", l, "132"[w] - '0');
        }
    }
    snprintf(store[n++], 48, "norm.weight");
    snprintf(store[n++], 48, "output.weight");
    for (int i = 0; i < n; i++) names[i] = store[i];
    static const struct {
        const char *pattern;
        int count, first, last;
    } py[] = {
        {"(?:tok_embeddings|output)\\.", 2, 0, 140},
        {"\\.router\\.gate\\.", 6, 20, 135},
        {"_norm", 48, 1, 134},
        {"^norm", 1, 139, 139},
        {"\\.w[qk]{,1}\\.", 24, 2, 129},
        {"layers\\.\\d{,1}\\.attention\\.", 60, 2, 110},
        {"layers\\.\\d{1, 2}\\.|norm\\.weight$", 49, 1, 139},
        {"layers\\.1\\d\\.", 23, 116, 138},
        {"w{,}q", 24, 2, 131},
        {"w{}|wq", 12, 2, 128},
        {"(?i)NORM", 49, 1, 139},
        {"(?i:NORM)|wk", 61, 1, 139},
        {"(?#[)^norm|layers\\.\\d{,1}\\.attention\\.", 61, 2, 139},
        {"\\bq_norm\\b", 12, 5, 131},
        {"\\Anorm", 1, 139, 139},
        {"(?P<n>n)(?P=n)?orm", 49, 1, 139},
        {"(?<=\\.)wq", 12, 2, 128},
        {"experts\\.w[13]$", 12, 21, 137},
        {"[\\]]|experts", 18, 21, 138},
        {"[]a]|wv", 138, 1, 138},
        {"\\x6eorm", 49, 1, 139},
        {"\xc3\xa9?norm", 49, 1, 139},
        {"norm++", 49, 1, 139},
        {"(?>norm)\\.", 49, 1, 139},
        {"(?s)norm", 49, 1, 139},
        {"(?-i:norm)", 49, 1, 139},
    };
    base_err err;
    int go[141];
    int64_t counts[2];
    for (size_t k = 0; k < sizeof py / sizeof py[0]; k++) {
        const train_param_group g[2] = {{.pattern = py[k].pattern, .where = "x.toml", .line = 1},
                                        {.pattern = ".*", .where = "x.toml", .line = 5}};
        const int rc = train_param_groups_assign(g, 2, names, n, go, counts, &err);
        int first = -1, last = -1;
        for (int i = 0; i < n && !rc; i++)
            if (go[i] == 0) last = i, first = first < 0 ? i : first;
        CHECK(!rc && counts[0] == py[k].count && first == py[k].first && last == py[k].last,
              "pattern '%s': titan %lld names (%d..%d), Python %d (%d..%d): %s", py[k].pattern,
              rc ? -1LL : (long long)counts[0], first, last, py[k].count, py[k].first, py[k].last,
              rc ? err.msg : "");
    }
    /* read otherwise by PCRE2 (or by another PCRE2 version) than by Python: refused */
    static const char *const unlike[] = {
        "(?x)norm",   "[[:digit:]]", "[[.a.]]",   "\\u006eorm", "\\N{LATIN SMALL LETTER N}orm",
        "\\Qnorm\\E", "norm\\K",     "\\p{L}orm", "\\x{6e}orm", "\\horm",
        "norm\\z",    "(?<n>norm)",  "(?|a|b)",   "norm(?i)al", "(*UTF)norm",
        "\\e",        "(?R)",        "(?P>n)",    "(?#x",       "\\x6",
        "(?-i)norm",  "(?i-s)norm",
    };
    for (size_t k = 0; k < sizeof unlike / sizeof unlike[0]; k++) {
        const train_param_group g[2] = {{.pattern = unlike[k], .where = "x.toml", .line = 1},
                                        {.pattern = ".*", .where = "x.toml", .line = 5}};
        const int rc = train_param_groups_assign(g, 2, names, n, go, counts, &err);
        CHECK(rc && strstr(err.msg, "is not read alike by Python's re and PCRE2"),
              "pattern '%s' should be refused: %s", unlike[k], rc ? err.msg : "(accepted)");
    }
    /* a match that runs out of PCRE2's backtracking limit is an error, not a miss */
    const train_param_group slow[2] = {
        {.pattern = "(?:(?:\\w|\\.)+)+z|norm", .where = "x.toml", .line = 1},
        {.pattern = ".*", .where = "x.toml", .line = 5}};
    CHECK(train_param_groups_assign(slow, 2, names, n, go, counts, &err) &&
              strstr(err.msg, "x.toml:1:0: optimizer param_groups pattern"),
          "a match limit: %s", err.msg);
}

/* model_param_name_03: the patterns of [[optimizer.param_groups]] see torchtitan 0.3's names.
 * The reference: the names torchtitan 0.3.0's own models give (PyPI wheel
 * torchtitan-0.3.0, `model_registry(flavor).model.build()` on the meta device,
 * `named_parameters()`, layer numbers as N) for debugmodel (tied: no lm_head), 0.6B (the same
 * set) and debugmodel_moe / 30B-A3B (untied), against titan's flavors' names mapped. */
static void names_03_collect(void *ctx, const char *name, int64_t numel) {
    (void)numel;
    char(*set)[200] = ctx, b[160], norm[200];
    model_param_name_03(name, b, sizeof b);
    /* layers.<digits>. -> layers.N. */
    const char *d = strncmp(b, "layers.", 7) ? NULL : b + 7;
    if (d) {
        while (*d >= '0' && *d <= '9') d++;
        snprintf(norm, sizeof norm, "layers.N%s", d);
    } else {
        snprintf(norm, sizeof norm, "%s", b);
    }
    int i = 0;
    while (set[i][0] && strcmp(set[i], norm)) i++;
    if (!set[i][0] && i < 31) snprintf(set[i], sizeof set[i], "%s", norm);
}

static void param_names_03(void) {
    static const char *const dense[] = {"tok_embeddings.weight",
                                        "layers.N.attention.qkv_linear.wqkv.weight",
                                        "layers.N.attention.wo.weight",
                                        "layers.N.attention.q_norm.weight",
                                        "layers.N.attention.k_norm.weight",
                                        "layers.N.feed_forward.w1.weight",
                                        "layers.N.feed_forward.w2.weight",
                                        "layers.N.feed_forward.w3.weight",
                                        "layers.N.attention_norm.weight",
                                        "layers.N.ffn_norm.weight",
                                        "norm.weight",
                                        NULL};
    static const char *const moe[] = {"tok_embeddings.weight",
                                      "layers.N.attention.qkv_linear.wqkv.weight",
                                      "layers.N.attention.wo.weight",
                                      "layers.N.attention.q_norm.weight",
                                      "layers.N.attention.k_norm.weight",
                                      "layers.N.moe.routed_experts.inner_experts.w1_EFD",
                                      "layers.N.moe.routed_experts.inner_experts.w2_EDF",
                                      "layers.N.moe.routed_experts.inner_experts.w3_EFD",
                                      "layers.N.moe.router.gate.weight",
                                      "layers.N.attention_norm.weight",
                                      "layers.N.ffn_norm.weight",
                                      "norm.weight",
                                      "lm_head.weight",
                                      NULL};
    static const struct {
        const char *flavor;
        int untie;
        const char *const *want;
    } cases[] = {{"debugmodel", 0, dense},
                 {"0.6B", 0, dense},
                 {"debugmodel_moe", 1, moe},
                 {"30B-A3B", 1, moe}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        model_args a;
        base_err err;
        CHECK(model_flavor(cases[c].flavor, &a, &err) == 0, "flavor: %s", err.msg);
        if (cases[c].untie) a.tie_embeddings = 0;
        char set[32][200] = {{0}};
        model_param_names(&a, names_03_collect, set);
        int n = 0, same = 1;
        while (set[n][0]) n++;
        int w = 0;
        for (; cases[c].want[w]; w++) {
            int i = 0;
            while (i < n && strcmp(set[i], cases[c].want[w])) i++;
            if (i == n)
                same = 0,
                printf("  %s: torchtitan 0.3's %s missing\n", cases[c].flavor, cases[c].want[w]);
        }
        CHECK(same && n == w, "%s: titan's parameters under 0.3's names: %d distinct, 0.3 has %d",
              cases[c].flavor, n, w);
    }
    char b[64];
    CHECK(!strcmp(model_param_name_03("layers.12.attention.wk.weight", b, sizeof b),
                  "layers.12.attention.qkv_linear.wqkv.weight") &&
              !strcmp(model_param_name_03("output.weight", b, sizeof b), "lm_head.weight") &&
              !strcmp(model_param_name_03("xoutput.weight", b, sizeof b), "xoutput.weight") &&
              !strcmp(model_param_name_03("layers.1.xmoe.experts.w1", b, sizeof b),
                      "layers.1.xmoe.experts.w1"),
          "model_param_name_03 rewrites whole name parts only");
}

/* [[optimizer.param_groups]] (torchtitan 0.3's ParamGroupConfig): values as written,
 * torch.optim's constructor defaults for the kwargs not given (AdamW: betas (0.9, 0.999), eps
 * 1e-8, weight_decay 0.01; Adam: weight_decay 0), file order kept, the print round trip, the
 * options refused beside them, and a later file's list replacing an earlier one's. */
static void param_groups(void) {
    train_config c2;
    const char *text = "[[optimizer.param_groups]]\n"
                       "pattern = '(?:tok_embeddings|output)\\.'\n"
                       "optimizer_name = \"AdamW\"\n"
                       "optimizer_kwargs = {lr = 8e-4, betas = [0.9, 0.95], eps = 1e-7, "
                       "weight_decay = 0, fused = true}\n"
                       "[[optimizer.param_groups]]\n"
                       "pattern = '\\.router\\.gate\\.'\n"
                       "optimizer_name = \"Adam\"\n"
                       "optimizer_kwargs.lr = 1e-4\n"
                       "[[optimizer.param_groups]]\n"
                       "pattern = '.*'\n"
                       "optimizer_name = \"AdamW\"\n"
                       "[optimizer.param_groups.optimizer_kwargs]\n"
                       "lr = 3\n";
    train_config c;
    base_err err;
    int rc = load(&c, text, &err);
    CHECK(rc == 0, "param groups: %s", err.msg);
    if (rc) return;
    const train_param_group *g = c.optimizer.param_groups;
    CHECK(c.optimizer.n_param_groups == 3, "param groups: %d", c.optimizer.n_param_groups);
    CHECK(!strcmp(g[0].pattern, "(?:tok_embeddings|output)\\.") &&
              !strcmp(g[0].optimizer_name, "AdamW") && g[0].c.lr == 8e-4 && g[0].c.beta1 == 0.9 &&
              g[0].c.beta2 == 0.95 && g[0].c.eps == 1e-7 && g[0].c.weight_decay == 0 &&
              g[0].line == 1,
          "param group 0 as written");
    CHECK(!strcmp(g[1].optimizer_name, "Adam") && g[1].c.lr == 1e-4 && g[1].c.beta1 == 0.9 &&
              g[1].c.beta2 == 0.999 && g[1].c.eps == 1e-8 && g[1].c.weight_decay == 0 &&
              g[1].line == 5 && g[1].c.adam && !g[0].c.adam && !g[2].c.adam,
          "param group 1: Adam's defaults");
    CHECK(g[2].c.lr == 3 && g[2].c.beta2 == 0.999 && g[2].c.weight_decay == 0.01 &&
              !strcmp(g[2].pattern, ".*"),
          "param group 2: AdamW's defaults, an integer lr");
    check_round_trip(&c, "param groups");
    /* DistMuon: its defaults (DistMuon's, torch.optim.Muon's), and every kwarg as written */
    {
        const char *mu =
            "[[optimizer.param_groups]]\npattern = 'w[123]'\n"
            "optimizer_name = \"DistMuon\"\noptimizer_kwargs = {lr = 0.02, fused = false}\n"
            "[[optimizer.param_groups]]\npattern = 'wo'\n"
            "optimizer_name = \"DistMuon\"\noptimizer_kwargs = {lr = 0.01, "
            "weight_decay = 0, momentum = 0.9, nesterov = false, ns_steps = 3, "
            "ns_coefficients = [1.875, -1.25, 0.375], eps = 1e-6, "
            "adjust_lr_fn = \"match_rms_adamw\", fused = true}\n"
            "[[optimizer.param_groups]]\npattern = '.*'\n"
            "optimizer_name = \"AdamW\"\noptimizer_kwargs = {lr = 1e-3}\n";
        train_config d;
        rc = load(&d, mu, &err);
        CHECK(rc == 0, "DistMuon groups: %s", err.msg);
        if (!rc) {
            const optim_adamw_cfg *a = &d.optimizer.param_groups[0].c,
                                  *b = &d.optimizer.param_groups[1].c,
                                  *w = &d.optimizer.param_groups[2].c;
            CHECK(a->muon && a->lr == 0.02 && a->weight_decay == 0.1 && a->momentum == 0.95 &&
                      a->nesterov && a->ns_steps == 5 && a->ns[0] == 3.4445 &&
                      a->ns[1] == -4.7750 && a->ns[2] == 2.0315 && a->eps == 1e-7 &&
                      a->adjust == OPTIM_MUON_ORIGINAL && !a->adam,
                  "DistMuon's defaults");
            CHECK(b->muon && b->lr == 0.01 && b->weight_decay == 0 && b->momentum == 0.9 &&
                      !b->nesterov && b->ns_steps == 3 && b->ns[0] == 1.875 && b->ns[1] == -1.25 &&
                      b->ns[2] == 0.375 && b->eps == 1e-6 &&
                      b->adjust == OPTIM_MUON_MATCH_RMS_ADAMW,
                  "DistMuon's kwargs as written");
            CHECK(!w->muon && w->eps == 1e-8 && w->weight_decay == 0.01, "AdamW beside DistMuon");
            check_round_trip(&d, "DistMuon groups");
            train_opts mo;
            rc = train_config_to_opts(&d, &mo, &err);
            CHECK(rc && strstr(err.msg, "x.toml:5:1: optimizer.param_groups[1]: a second DistMuon "
                                        "group (the first is [0])"),
                  "two DistMuon groups: %s", rc ? err.msg : "(accepted)");
            train_config_free(&d);
        }
        /* DistMuon refuses a group with fused or foreach true, and torchtitan gives every group
         * optimizer.implementation's ("fused" by default); the group's own flags win */
        static const char *const kw[] = {
            "", ", fused = false", "", ", fused = false", ", foreach = false", ", fused = false"};
        static const char *const impl[] = {NULL,      NULL,      "for-loop",
                                           "foreach", "foreach", "fused_opt_states_bf16"};
        static const char *const want[] = {
            "x.toml:1:1: optimizer.param_groups[0]: DistMuon with fused true (torchtitan gives "
            "every group optimizer.implementation's fused / foreach, \"fused\" here, and DistMuon "
            "refuses either): set optimizer_kwargs fused = false, or optimizer.implementation = "
            "\"for-loop\"",
            NULL, NULL, "DistMuon with foreach true", NULL,
            /* and the bf16 AdamW states beside it (titan's moments are bf16 for all or none) */
            "x.toml:1:1: optimizer.param_groups[0] (DistMuon): optimizer.implementation = "
            "\"fused_opt_states_bf16\""};
        for (int i = 0; i < 6; i++) {
            char t[300];
            snprintf(t, sizeof t,
                     "[[optimizer.param_groups]]\npattern = 'w'\noptimizer_name = 'DistMuon'\n"
                     "optimizer_kwargs = {lr = 1%s}\n",
                     kw[i]);
            train_config e;
            train_opts eo;
            char *argv[] = {"--optimizer.implementation", (char *)impl[i], NULL};
            rc = load(&e, t, &err) ||
                 (impl[i] && train_config_from_args(&e, 2, argv, 0, &(train_cli){0}, &err)) ||
                 train_config_to_opts(&e, &eo, &err);
            CHECK(want[i] ? rc && strstr(err.msg, want[i]) : !rc, "DistMuon flags case %d: %s", i,
                  rc ? err.msg : "(accepted)");
            /* and what --print-config writes loads back and translates alike (the flags kept) */
            if (!want[i]) {
                char *buf = NULL;
                size_t len = 0;
                FILE *pf = open_memstream(&buf, &len);
                train_config_print(&e, pf);
                fclose(pf);
                train_config r;
                train_opts ro;
                rc = load(&r, buf, &err) || train_config_to_opts(&r, &ro, &err);
                CHECK(!rc, "DistMuon flags case %d printed and loaded back: %s", i,
                      rc ? err.msg : "");
                train_config_free(&r);
                free(buf);
            }
            train_config_free(&e);
        }
    }
    train_opts o;
    rc = train_config_to_opts(&c, &o, &err);
    CHECK(rc == 0 && o.n_param_groups == 3 && o.param_groups == g && o.adamw.lr == 8e-4 &&
              o.adamw.weight_decay == 0,
          "param groups translated (the first group's hyperparameters logged): %s", err.msg);
    /* [optimizer]'s own hyperparameters beside the groups are refused by name */
    static const char *const beside[] = {"--optimizer.lr", "--lr", "--optimizer.weight_decay",
                                         "--optimizer.name"};
    static const char *const val[] = {"1e-3", "1e-3", "0", "AdamW"};
    static const char *const field[] = {"--optimizer.lr", "--lr (optimizer.lr)",
                                        "--optimizer.weight_decay", "--optimizer.name"};
    for (int i = 0; i < 4; i++) {
        train_config d;
        char *argv[] = {(char *)beside[i], (char *)val[i], NULL};
        rc = load(&d, text, &err) || train_config_from_args(&d, 2, argv, 0, &(train_cli){0}, &err);
        CHECK(rc == 0, "beside %s: %s", beside[i], err.msg);
        rc = train_config_to_opts(&d, &o, &err);
        char want[300];
        snprintf(want, sizeof want,
                 "command line: %s: set beside [[optimizer.param_groups]] (x.toml:1), whose groups "
                 "each carry their own optimizer_name and optimizer_kwargs",
                 field[i]);
        CHECK(rc != 0 && !strncmp(err.msg, want, strlen(want)), "beside %s:\n  got  %s\n  want %s",
              beside[i], rc ? err.msg : "(accepted)", want);
        train_config_free(&d);
    }
    /* torchtitan's implementation kwargs under the group's: fused (the default
     * implementation) and a group's foreach = true are refused together, as torch does */
    static const char *const impl[] = {"", "fused = false, ", "", ""};
    static const char *const impl_cli[] = {NULL, NULL, "foreach", "for-loop"};
    static const int refused[] = {1, 0, 0, 0};
    for (int i = 0; i < 4; i++) {
        char t[300];
        snprintf(t, sizeof t,
                 "[[optimizer.param_groups]]\npattern = '.*'\noptimizer_name = 'AdamW'\n"
                 "optimizer_kwargs = {lr = 1, %sforeach = true}\n",
                 impl[i]);
        train_config d;
        char *argv[] = {"--optimizer.implementation", (char *)impl_cli[i], NULL};
        rc = load(&d, t, &err) ||
             (impl_cli[i] && train_config_from_args(&d, 2, argv, 0, &(train_cli){0}, &err)) ||
             train_config_to_opts(&d, &o, &err);
        CHECK(refused[i] ? rc && strstr(err.msg, "x.toml:1:1: optimizer.param_groups[0]: fused "
                                                 "and foreach both true")
                         : !rc,
              "fused + foreach case %d: %s", i, rc ? err.msg : "(accepted)");
        train_config_free(&d);
    }
    /* an empty [optimizer.param_groups] (single brackets) is refused, as with keys; 64 groups
     * are the most (the step keeps per-group arrays of that size) */
    rc = load(&c2, "[optimizer.param_groups]\n", &err);
    CHECK(rc && strstr(err.msg, "x.toml:1:1: optimizer.param_groups is an array of tables"),
          "an empty [optimizer.param_groups]: %s", rc ? err.msg : "(accepted)");
    train_config_free(&c2);
    char many[65 * 96 + 1] = "";
    for (int k = 0; k < 65; k++)
        snprintf(many + strlen(many), sizeof many - strlen(many),
                 "[[optimizer.param_groups]]\npattern = 'x'\noptimizer_name = 'AdamW'\n"
                 "optimizer_kwargs.lr = 1\n");
    rc = load(&c2, many, &err);
    CHECK(rc && strstr(err.msg, "x.toml:257:1: [[optimizer.param_groups]]: more than 64 groups"),
          "65 groups: %s", rc ? err.msg : "(accepted)");
    train_config_free(&c2);
    many[64 * strlen("[[optimizer.param_groups]]\npattern = 'x'\noptimizer_name = 'AdamW'\n"
                     "optimizer_kwargs.lr = 1\n")] = 0;
    rc = load(&c2, many, &err);
    CHECK(!rc && c2.optimizer.n_param_groups == 64, "64 groups: %s", err.msg);
    train_config_free(&c2);
    /* [optimizer] name = "Adam": torch.optim.Adam's coupled (L2) weight decay, torchtitan's
     * default 0.1 included; AdamW's decoupled one otherwise */
    for (int k = 0; k < 3; k++) {
        char *argv[][5] = {{"--optimizer.name", "Adam", NULL},
                           {"--optimizer.name", "Adam", "--optimizer.weight_decay", "0", NULL},
                           {"--optimizer.name", "AdamW", NULL}};
        rc = from_args(&c2, argv[k], &err) || train_config_to_opts(&c2, &o, &err);
        CHECK(!rc && o.adamw.weight_decay == (k == 1 ? 0 : 0.1) && o.adamw.adam == (k < 2) &&
                  !o.n_param_groups,
              "optimizer.name %s, weight decay %s: %s", argv[k][1], k == 1 ? "0" : "0.1", err.msg);
        train_config_free(&c2);
    }
    /* a group's Adam with weight decay: coupled, as torch.optim.Adam's */
    {
        const char *adam = "[[optimizer.param_groups]]\npattern = 'x'\noptimizer_name = 'Adam'\n"
                           "optimizer_kwargs = {lr = 1, weight_decay = 0.1}\n";
        rc = load(&c2, adam, &err);
        CHECK(!rc && c2.optimizer.param_groups[0].c.adam &&
                  c2.optimizer.param_groups[0].c.weight_decay == 0.1,
              "an Adam group with weight decay 0.1: %s", err.msg);
        train_config_free(&c2);
    }
    /* a second file's groups replace the first's; a file without any keeps them */
    const char *two = "[[optimizer.param_groups]]\npattern = 'w'\noptimizer_name = 'AdamW'\n"
                      "optimizer_kwargs = {lr = 2}\n";
    rc = train_config_load_text(&c, two, strlen(two), "y.toml", &err) ||
         train_config_load_text(&c, "[training]\nsteps = 3\n", 20, "z.toml", &err);
    CHECK(rc == 0 && c.optimizer.n_param_groups == 1 && c.optimizer.param_groups[0].c.lr == 2 &&
              !strcmp(c.optimizer.param_groups[0].where, "y.toml"),
          "later file's groups: %s", err.msg);
    train_config_free(&c);
}

int main(void) {
    kernels_table();
    mutations();
    unknown_names_at_once();
    torchtitan_compat();
    command_line_repeats();
    defaults();
    exact_values();
    errors();
    command_line();
    ac_and_debug();
    shipped_configs();
    debug_config_is_make_train();
    plugins_loaded_for_runs_only();
    initial_load_enables();
    seed_context_none();
    saved_config_quiet();
    set_names();
    model_args_every_front_end();
    param_groups();
    param_group_patterns();
    param_names_03();
    printf(failures ? "FAILED: %d checks\n" : "all checks passed\n", failures);
    return failures != 0;
}
