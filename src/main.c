/* titan: command-line entry point. */
#include <math.h>
#include <omp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "checkpoint/checkpoint.h"
#include "data/data.h"
#include "dist/dist.h"
#include "model/model.h"
#include "ops/ops.h"
#include "optim/optim.h"
#include "train/train.h"

/* Debian's OpenBLAS 0.3.21 does not recognise recent CPUs and falls back to its SSE3
 * "Prescott" kernels (~7x slower here). It reads OPENBLAS_CORETYPE once, when the library
 * loads, so titan sets it from the CPU's features and re-executes itself before any BLAS
 * call. A value already in the environment is respected. */
static void ensure_blas_coretype(char **argv) {
#if defined(__x86_64__)
    if (getenv("OPENBLAS_CORETYPE") || getenv("TITAN_NO_REEXEC")) return;
    __builtin_cpu_init();
    const char *core = __builtin_cpu_supports("avx512f") ? "SkylakeX"
                       : __builtin_cpu_supports("avx2")  ? "Haswell"
                                                         : NULL;
    if (!core) return;
    setenv("OPENBLAS_CORETYPE", core, 1);
    setenv("TITAN_NO_REEXEC", "1", 1);
    /* the binary's own path, not /proc/self/exe: the kernel names the process (ps, top) after
     * the file executed, which would be "exe" */
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return;
    self[n] = 0;
    execv(self, argv);
    /* exec failed: carry on with whatever kernels OpenBLAS chose. */
#else
    (void)argv;
#endif
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: titan <command> [options]\n"
            "\n"
            "commands:\n"
            "  train     train a Qwen3 model (see `titan train --help`)\n"
            "  inspect   print a flavor's arguments and parameter counts (--flavor, --set), or\n"
            "            inspect PATH: validate a .safetensors file, a HF config.json, a HF model\n"
            "            folder or a training checkpoint; list its tensors, model and counts\n"
            "  convert   convert SRC DST: HF folder -> training checkpoint, or training\n"
            "            checkpoint -> HF folder [--dtype float32|bfloat16|float16]\n"
            "            [--max-shard-size 5GB] [--assets DIR (tokenizer files)]\n"
            "            [--generation-config FILE]\n"
            "  kernels   list the registered op implementations; `kernels test [NAME]` checks\n"
            "            them against the defaults, `kernels bench [NAME]` times them\n"
            "            [--plugin PATH.so] (see `titan kernels --help`)\n"
            "  encode    text -> token ids: --tokenizer DIR [--file F] (default stdin);\n"
            "            --chat: the input is a JSON list of {role, content} messages, rendered\n"
            "            with the Qwen3 chat template [--no-generation-prompt] [--no-thinking]\n"
            "  decode    token ids -> text: --tokenizer DIR [--file F] [--skip-special]\n"
            "  generate  sample text from a model (see `titan generate --help`)\n"
            "  tokenize  text / JSONL dataset -> token shards (see `titan tokenize --help`)\n"
            "  data      print the training windows the loader makes (`titan data --help`)\n"
            "  plan      per-rank memory and traffic of a config on N ranks (`titan plan --help`)\n"
            "\n"
            "model options (train, inspect):\n"
            "  --flavor NAME        debugmodel (default), 0.6B, 1.7B, 4B, 8B, 14B, 32B\n"
            "  --set KEY=VALUE      override a model argument: dim, n_layers, n_heads,\n"
            "                       n_kv_heads, head_dim, ffn_dim, vocab_size, rope_theta,\n"
            "                       norm_eps, tie_embeddings\n");
}

typedef struct {
    int argc;
    char **argv;
    int i;
    base_err *err;
} args_iter;

static const char *need_value(args_iter *it) {
    if (it->i + 1 >= it->argc) {
        base_fail(it->err, "option %s needs a value", it->argv[it->i]);
        return NULL;
    }
    return it->argv[++it->i];
}

static int parse_int(args_iter *it, int *out, int min) {
    const char *opt = it->argv[it->i], *v = need_value(it);
    int64_t x;
    if (!v) return -1;
    if (base_parse_i64(v, &x) || x < min || x > 1 << 30)
        return base_fail(it->err, "option %s: '%s' is not an integer >= %d", opt, v, min);
    *out = (int)x;
    return 0;
}

static int parse_dbl(args_iter *it, double *out, double min, double max) {
    const char *opt = it->argv[it->i], *v = need_value(it);
    if (!v) return -1;
    if (base_parse_f64(v, out) || *out < min || *out > max)
        return base_fail(it->err, "option %s: '%s' is not a number in [%g, %g]", opt, v, min, max);
    return 0;
}

/* --flavor and --set, shared by inspect and generate. Returns 1 if the option was consumed. */
static int parse_model_opt(args_iter *it, model_args *a, int *status) {
    const char *o = it->argv[it->i];
    *status = 0;
    if (!strcmp(o, "--flavor")) {
        const char *v = need_value(it);
        *status = !v || model_flavor(v, a, it->err) ? -1 : 0;
        return 1;
    }
    if (!strcmp(o, "--set")) {
        const char *v = need_value(it);
        if (!v) return *status = -1, 1;
        const char *eq = strchr(v, '=');
        if (!eq || eq == v)
            return *status = base_fail(it->err, "--set wants KEY=VALUE, got '%s'", v), 1;
        char key[64];
        snprintf(key, sizeof key, "%.*s", (int)(eq - v), v);
        *status = model_args_set(a, key, eq + 1, it->err);
        return 1;
    }
    return 0;
}

/* titan inspect [--flavor NAME] [--set K=V]... | titan inspect PATH */
static int cmd_inspect(int argc, char **argv, base_err *err) {
    if (argc == 3 && argv[2][0] != '-') return ckpt_inspect(argv[2], err);
    if (argc > 3 && argv[2][0] != '-')
        return base_fail(err, "inspect: one path expected, got %d (titan inspect PATH)", argc - 2);
    model_args a;
    model_flavor("debugmodel", &a, err);
    args_iter it = {argc, argv, 0, err};
    for (it.i = 2; it.i < argc; it.i++) {
        int st;
        if (parse_model_opt(&it, &a, &st)) {
            if (st) return -1;
            continue;
        }
        return base_fail(err, "inspect: unknown option '%s'", argv[it.i]);
    }
    if (model_args_validate(&a, err)) return -1;
    ckpt_print_model(&a);
    return 0;
}

/* Export options shared by convert: --dtype, --max-shard-size, --assets, --generation-config.
 * Returns 1 if the option was consumed (*status: 0 or -1). */
static int parse_export_opt(args_iter *it, ckpt_export_opts *o, int *status) {
    const char *a = it->argv[it->i], *v;
    *status = 0;
    if (strcmp(a, "--dtype") && strcmp(a, "--max-shard-size") && strcmp(a, "--assets") &&
        strcmp(a, "--generation-config"))
        return 0;
    if (!(v = need_value(it))) return *status = -1, 1;
    if (!strcmp(a, "--dtype") && ckpt_export_dtype_parse(v, &o->dtype))
        *status = base_fail(it->err, "--dtype: '%s' is not float32, bfloat16 or float16", v);
    else if (!strcmp(a, "--max-shard-size") && ckpt_size_parse(v, &o->max_shard_bytes))
        *status = base_fail(it->err,
                            "--max-shard-size: '%s' is not a size (5GB, 200MB, 1GiB, "
                            "bytes)",
                            v);
    else if (!strcmp(a, "--assets"))
        o->assets_dir = v;
    else if (!strcmp(a, "--generation-config"))
        o->generation_config = v;
    return 1;
}

/* titan convert SRC DST [export options] */
static int cmd_convert(int argc, char **argv, base_err *err) {
    ckpt_export_opts o = {.dtype = CKPT_F32};
    const char *pos[2] = {NULL, NULL};
    int n_pos = 0;
    args_iter it = {argc, argv, 0, err};
    for (it.i = 2; it.i < argc; it.i++) {
        int st;
        if (parse_export_opt(&it, &o, &st)) {
            if (st) return -1;
        } else if (argv[it.i][0] != '-' && n_pos < 2) {
            pos[n_pos++] = argv[it.i];
        } else {
            return base_fail(err, "convert: unexpected argument '%s'", argv[it.i]);
        }
    }
    if (n_pos != 2) return base_fail(err, "convert: usage: titan convert SRC DST [options]");
    return ckpt_convert(pos[0], pos[1], &o, err);
}

/* titan kernels [list|test|bench] [NAME] [--plugin PATH]...: the registry, conformance
 * against the default implementations, and timings (ops/conform.c). */
static int cmd_kernels(int argc, char **argv, base_err *err) {
    ops_register_builtin();
    const char *mode = "list", *name = NULL;
    ops_conform_opts o = {.shapes = 0, .seed = 1, .verbose = 0, .min_sec = 0.3};
    /* bench shape: bench/bench_train.sh's model and batch, or a small one for smoke tests */
    ops_ctx ctx = {.batch = 4,
                   .seq_len = 512,
                   .dim = 512,
                   .n_heads = 8,
                   .n_kv_heads = 4,
                   .head_dim = 64,
                   .ffn_dim = 1536,
                   .vocab = 151936,
                   .n_experts = 64,
                   .top_k = 4,
                   .moe_ffn_dim = 768};
    /* --flavor replaces the model dims of --shape, --batch and --seq its batch and sequence */
    const char *flavor = NULL;
    int batch = 0, seq = 0;
    args_iter it = {argc, argv, 0, err};
    int i = 2;
    if (i < argc &&
        (!strcmp(argv[i], "list") || !strcmp(argv[i], "test") || !strcmp(argv[i], "bench")))
        mode = argv[i++];
    for (it.i = i; it.i < argc; it.i++) {
        const char *a = argv[it.i];
        if (!strcmp(a, "--plugin")) {
            const char *v = need_value(&it);
            if (!v || ops_plugin_load(v, err)) return -1;
        } else if (!strcmp(a, "--shapes")) {
            if (parse_int(&it, &o.shapes, 1)) return -1;
        } else if (!strcmp(a, "--seed")) {
            int seed;
            if (parse_int(&it, &seed, 0)) return -1;
            o.seed = (uint64_t)seed + 1;
        } else if (!strcmp(a, "--min-time")) {
            if (parse_dbl(&it, &o.min_sec, 0, 60)) return -1;
        } else if (!strcmp(a, "--shape")) {
            const char *v = need_value(&it);
            if (!v) return -1;
            if (!strcmp(v, "small"))
                ctx = (ops_ctx){1, 64, 64, 4, 2, 16, 128, 512, 8, 2, 32};
            else if (strcmp(v, "bench"))
                return base_fail(err, "kernels: --shape is 'bench' or 'small', not '%s'", v);
        } else if (!strcmp(a, "--flavor")) {
            if (!(flavor = need_value(&it))) return -1;
        } else if (!strcmp(a, "--batch")) {
            if (parse_int(&it, &batch, 1)) return -1;
        } else if (!strcmp(a, "--seq")) {
            if (parse_int(&it, &seq, 1)) return -1;
        } else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
            o.verbose = 1;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: titan kernels [list]                     registered implementations\n"
                   "       titan kernels test [NAME] [--shapes N] [--seed S] [-v]\n"
                   "       titan kernels bench [NAME] [--shape bench|small] [--min-time SEC]\n"
                   "                           [--flavor FLAVOR] [--batch N] [--seq N]\n"
                   "NAME: IMPL or OP/IMPL (default: every implementation). test compares\n"
                   "forward outputs and input gradients with the op's default (the default\n"
                   "with 'reference') on random shapes; bench times it against the default.\n"
                   "bench shapes: --shape bench (bench_train.sh's model, batch 4, seq 512) or\n"
                   "small; --flavor takes the model dims from a registry flavor (0.6B, ...),\n"
                   "--batch and --seq replace the batch size and sequence length.\n"
                   "--plugin PATH (repeatable) loads a kernel plugin first.\n");
            return 0;
        } else if (a[0] != '-' && !name && strcmp(mode, "list")) {
            name = a;
        } else {
            return base_fail(err, "kernels: unexpected argument '%s' (titan kernels --help)", a);
        }
    }
    if (flavor) {
        model_args ma;
        if (model_flavor(flavor, &ma, err)) return -1;
        ctx.dim = ma.dim;
        ctx.n_heads = ma.n_heads;
        ctx.n_kv_heads = ma.n_kv_heads;
        ctx.head_dim = ma.head_dim;
        ctx.ffn_dim = ma.ffn_dim;
        ctx.vocab = ma.vocab_size;
        ctx.n_experts = ma.n_experts;
        ctx.top_k = ma.top_k;
        ctx.moe_ffn_dim = ma.moe_ffn_dim;
    }
    if (batch) ctx.batch = batch;
    if (seq) ctx.seq_len = seq;
    /* the per-call "kernel X at conformance" replacement lines would drown the results */
    if (strcmp(mode, "list")) base_log_set_level(BASE_LOG_WARN);
    if (!strcmp(mode, "test")) {
        printf("CPU kernels ISA: %s\n", ops_cpu_isa());
        const int failed = ops_conform_test(name, &o, err);
        if (failed < 0) return -1;
        if (failed) return base_fail(err, "kernels test: %d implementation(s) failed", failed);
        return 0;
    }
    if (!strcmp(mode, "bench")) return ops_conform_bench(name, &ctx, &o, err) ? -1 : 0;
    const ops_impl *impls[128];
    int n = ops_list(impls, 128);
    /* which compiled copy the built-in CPU kernels run (TITAN_ISA=default forces the baseline) */
    printf("CPU kernels ISA: %s\n", ops_cpu_isa());
    printf("%-12s %-12s %-8s %s\n", "op", "impl", "default", "constraints");
    for (int k = 0; k < n; k++) {
        const char *origin = ops_impl_origin(impls[k]);
        int is_default = 1; /* the first registered for its op */
        for (int j = 0; j < k; j++) is_default &= impls[j]->op != impls[k]->op;
        char where[300] = "";
        if (origin) snprintf(where, sizeof where, "  (plugin %s)", origin);
        printf("%-12s %-12s %-8s %s%s\n", ops_kind_name(impls[k]->op), impls[k]->name,
               is_default ? "yes" : "", impls[k]->constraints[0] ? impls[k]->constraints : "-",
               where);
    }
    return 0;
}

/* titan encode / decode: the tokenizer on the command line (ids space-separated, one line). */
static int cmd_codec(int argc, char **argv, int encode, base_err *err) {
    const char *dir = NULL, *file = NULL;
    int skip_special = 0, chat = 0, gen_prompt = 1, thinking = 1;
    args_iter it = {argc, argv, 0, err};
    for (it.i = 2; it.i < argc; it.i++) {
        const char *a = argv[it.i];
        if (!strcmp(a, "--tokenizer")) {
            if (!(dir = need_value(&it))) return -1;
        } else if (!strcmp(a, "--file")) {
            if (!(file = need_value(&it))) return -1;
        } else if (!encode && !strcmp(a, "--skip-special")) {
            skip_special = 1;
        } else if (encode && !strcmp(a, "--chat")) {
            chat = 1;
        } else if (encode && !strcmp(a, "--no-generation-prompt")) {
            gen_prompt = 0;
        } else if (encode && !strcmp(a, "--no-thinking")) {
            thinking = 0;
        } else {
            return base_fail(err, "%s: unknown option '%s'", argv[1], a);
        }
    }
    if (!dir) return base_fail(err, "%s: --tokenizer DIR is required", argv[1]);
    data_tok *tok = NULL;
    if (data_tok_load(dir, &tok, err)) return -1;
    size_t len = 0;
    char *in = base_read_file(file, (size_t)1 << 40, &len, err);
    int rc = in ? 0 : -1;
    if (!rc && encode && chat) { /* the input is a JSON list of messages: render it first */
        data_chat_msg *msgs = NULL;
        int n = 0;
        char *text = NULL;
        rc = data_chat_parse_json(in, len, &msgs, &n, err);
        if (!rc) rc = data_chat_render(msgs, n, gen_prompt, thinking, &text, err);
        data_chat_msgs_free(msgs);
        if (!rc) {
            free(in);
            in = text;
            len = strlen(text);
        } else {
            free(text);
        }
    }
    if (!rc && encode) {
        data_tok_ids ids = {0};
        rc = data_tok_encode(tok, in, len, &ids, err);
        for (size_t i = 0; !rc && i < ids.n; i++) printf(i ? " %d" : "%d", ids.ids[i]);
        if (!rc) printf("\n");
        data_tok_ids_free(&ids);
    } else if (!rc) {
        data_tok_ids ids = {0};
        char *p = in, *end = in + len;
        while (!rc) {
            while (p < end && (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')) p++;
            if (p >= end) break;
            char *q = p;
            while (q < end && *q != ' ' && *q != '\n' && *q != '\t' && *q != '\r') q++;
            char word[32];
            int64_t v;
            if (q - p >= (ptrdiff_t)sizeof word) {
                char head[21], shown[4 * sizeof head];
                snprintf(head, sizeof head, "%.*s", 20, p);
                base_escape(head, shown, sizeof shown);
                rc = base_fail(err, "%s: token id '%s...' (byte %td) is too long",
                               file ? file : "stdin", shown, p - in);
                break;
            }
            memcpy(word, p, (size_t)(q - p));
            word[q - p] = 0;
            if (base_parse_i64(word, &v) || v < 0 || v > INT32_MAX) {
                char shown[4 * sizeof word]; /* the input may be binary: never echo raw bytes */
                base_escape(word, shown, sizeof shown);
                rc = base_fail(err, "%s: '%s' (byte %td) is not a token id", file ? file : "stdin",
                               shown, p - in);
                break;
            }
            if (ids.n == ids.cap) {
                size_t cap = ids.cap ? ids.cap * 2 : 1024;
                int32_t *nid = realloc(ids.ids, cap * sizeof(int32_t));
                if (!nid) {
                    rc = base_fail(err, "out of memory");
                    break;
                }
                ids.ids = nid;
                ids.cap = cap;
            }
            ids.ids[ids.n++] = (int32_t)v;
            p = q;
        }
        char *text = NULL;
        size_t tlen = 0;
        if (!rc) rc = data_tok_decode(tok, ids.ids, ids.n, skip_special, &text, &tlen, err);
        if (!rc) fwrite(text, 1, tlen, stdout);
        free(text);
        data_tok_ids_free(&ids);
    }
    free(in);
    data_tok_free(tok);
    return rc;
}

/* titan train: a job config (defaults, --config FILE, then command-line overrides). */
static int cmd_train(int argc, char **argv, base_err *err) {
    train_config c;
    train_config_defaults(&c);
    train_cli cli;
    train_opts o;
    int rc = train_config_from_args(&c, argc, argv, 2, &cli, err);
    if (!rc && cli.help) {
        train_config_usage(stdout);
    } else if (!rc && cli.print_config) {
        train_config_print(&c, stdout);
    } else if (!rc && !train_config_names_job(&c)) {
        fprintf(stderr, "usage: titan train --config FILE [--section.key=value ...]\n"
                        "       titan train --flavor NAME (--data PATH | --random-tokens) "
                        "[options]\n"
                        "nothing to train: give a config file, a flavor or a dataset "
                        "(titan train --help lists every option)\n");
        rc = 2;
    } else if (!rc && !(rc = train_config_to_opts(&c, &o, err))) {
        if (c.training.threads > 0)
            omp_set_num_threads(base_threads_bound((int)c.training.threads, "training.threads"));
        if (c.job.print_config && dist_world_rank() == 0) train_config_print(&c, stdout);
        if (o.memory_estimation) rc = train_plan_print_for(&o, stdout, err);
        if (!rc) rc = train_run(&o, err);
    }
    train_config_free(&c);
    return rc;
}

static void plan_usage(FILE *f) {
    fprintf(f,
            "usage: titan plan [--config FILE] [--world N] [--budget-gib G] [--hf-config FILE]\n"
            "                  [--set KEY=VALUE] [--section.key=value ...]\n"
            "Prints the per-rank memory (parameters, gradients, AdamW state, units in flight,\n"
            "communication buffers, activations with and without activation checkpointing) and\n"
            "the bytes each collective moves per step, for the job config run on N ranks\n"
            "(default 1), without allocating the model.\n"
            "  --hf-config FILE   model arguments from a Hugging Face config.json (MoE flavors);\n"
            "                     the config's [model] overrides still apply\n"
            "  --set KEY=VALUE    override a model argument afterwards (as titan inspect)\n"
            "  --budget-gib G     say whether the total fits G GiB per rank\n");
}

/* titan plan: memory and traffic of a config on N ranks (train/plan.c). */
static int cmd_plan(int argc, char **argv, base_err *err) {
    int world = 1;
    double budget = 0;
    const char *hf = NULL;
    char **rest = calloc((size_t)argc + 1, sizeof *rest), *sets[64];
    int n_rest = 2, n_sets = 0;
    if (!rest) return base_fail(err, "out of memory");
    rest[0] = argv[0];
    rest[1] = argv[1];
    int rc = 0;
    for (int i = 2; i < argc && !rc; i++) {
        const char *a = argv[i];
        const int has = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            plan_usage(stdout);
            free(rest);
            return 0;
        } else if (!strcmp(a, "--world") || !strcmp(a, "--budget-gib") ||
                   !strcmp(a, "--hf-config") || !strcmp(a, "--set")) {
            if (!has) {
                rc = base_fail(err, "option %s needs a value", a);
                break;
            }
            const char *v = argv[++i];
            int64_t n;
            if (!strcmp(a, "--world")) {
                if (base_parse_i64(v, &n) || n < 1 || n > 1 << 24)
                    rc = base_fail(err, "--world: '%s' is not a positive rank count", v);
                world = (int)n;
            } else if (!strcmp(a, "--budget-gib")) {
                if (base_parse_f64(v, &budget) || !(budget > 0) || budget > 1e9)
                    rc = base_fail(err, "--budget-gib: '%s' is not a positive number of GiB", v);
            } else if (!strcmp(a, "--hf-config")) {
                hf = v;
            } else if (n_sets < 64) {
                sets[n_sets++] = argv[i];
            }
        } else {
            rest[n_rest++] = argv[i];
        }
    }
    /* titan train's translation for `world` ranks; --hf-config is model.config_path, --set
     * edits the resolved arguments */
    train_config c;
    train_config_defaults(&c);
    train_cli cli;
    train_opts o;
    train_plan_in in = {0};
    train_plan p;
    if (!rc) rc = train_config_from_args(&c, n_rest, rest, 2, &cli, err);
    if (!rc && hf) rc = train_config_set(&c, "model.config_path", hf, "--hf-config", err);
    if (!rc) rc = train_config_translate(&c, world, &o, err);
    for (int i = 0; !rc && i < n_sets; i++) {
        char *eq = strchr(sets[i], '=');
        if (!eq) {
            rc = base_fail(err, "--set %s: expected KEY=VALUE", sets[i]);
            break;
        }
        *eq = 0;
        rc = model_args_set(&o.model, sets[i], eq + 1, err);
        *eq = '=';
    }
    if (!rc) rc = model_args_validate(&o.model, err);
    if (!rc) in = train_plan_in_of(&o, world);
    if (!rc) rc = train_plan_compute(&in, &p, err);
    if (!rc) train_plan_print(&in, &p, budget, stdout);
    if (!rc)
        train_plan_data(c.training.dataset_path, c.training.dataset_format,
                        c.training.dataset_field, p.par.dp_replicate * p.par.dp_shard, stdout);
    train_config_free(&c);
    free(rest);
    return rc;
}

static void generate_usage(FILE *f) {
    fprintf(
        f, "usage: titan generate --model PATH [options]\n"
           "Streams the model's continuation of a prompt to stdout as tokens are produced (KV\n"
           "cache), stopping at max-new-tokens or the tokenizer's eos / <|im_end|> /\n"
           "<|endoftext|>; speed on stderr.\n"
           "  --model PATH         a training checkpoint (FOLDER/step-N, or FOLDER: its newest\n"
           "                       step, or a run folder holding checkpoint/), or a folder with\n"
           "                       model.safetensors (HF names; its arguments from --flavor /\n"
           "                       --set) or such a file\n"
           "  --flavor NAME, --set KEY=VALUE   model arguments for a model.safetensors\n"
           "  --tokenizer DIR      HF tokenizer folder (default: the model folder when it has\n"
           "                       tokenizer.json, the one a checkpoint records, else one\n"
           "                       token per byte)\n"
           "  --prompt TEXT        the prompt (default: stdin)\n"
           "  --chat JSON|FILE     a JSON list of {role, content} messages (or a file holding\n"
           "                       it), rendered with the Qwen3 chat template + generation prompt\n"
           "  --no-thinking        with --chat: an empty <think></think> block (enable_thinking\n"
           "                       false)\n"
           "  --max-new-tokens N   tokens to generate at most (256)\n"
           "  --temperature T      0 = greedy (0.6)\n"
           "  --top-k K            keep the K most likely tokens, 0 = all (20)\n"
           "  --top-p P            nucleus: the smallest set with probability >= P (0.95)\n"
           "  --seed S             sampling seed (0): same seed, same text\n"
           "  --max-seq-len N      context; the KV cache holds min(N, prompt + new tokens)\n"
           "                       positions (default: the flavor's, 4096 for checkpoints)\n"
           "  --threads N          OpenMP/BLAS threads (default: all cores)\n");
}

/* Adds id to stop[] when it exists (>= 0) and is not there yet. */
static void add_stop(int32_t id, int32_t *stop, int *n) {
    if (id < 0) return;
    for (int i = 0; i < *n; i++)
        if (stop[i] == id) return;
    stop[(*n)++] = id;
}

/* titan generate: prompt -> streamed continuation. */
static int cmd_generate(int argc, char **argv, base_err *err) {
    model_args a;
    model_flavor("debugmodel", &a, err);
    const char *path = NULL, *tok_dir = NULL, *prompt = NULL, *chat = NULL;
    int max_new = 256, thinking = 1, threads = 0, max_seq = 0, seed = 0, as_ids = 0;
    model_sampler smp = {0.6, 20, 0.95, 0};
    args_iter it = {argc, argv, 0, err};
    for (it.i = 2; it.i < argc; it.i++) {
        const char *o = argv[it.i];
        int st = 0;
        if (parse_model_opt(&it, &a, &st)) {
            if (st) return -1;
            continue;
        }
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
            generate_usage(stdout);
            return 0;
        } else if (!strcmp(o, "--model")) {
            st = (path = need_value(&it)) ? 0 : -1;
        } else if (!strcmp(o, "--tokenizer")) {
            st = (tok_dir = need_value(&it)) ? 0 : -1;
        } else if (!strcmp(o, "--prompt")) {
            st = (prompt = need_value(&it)) ? 0 : -1;
        } else if (!strcmp(o, "--chat")) {
            st = (chat = need_value(&it)) ? 0 : -1;
        } else if (!strcmp(o, "--no-thinking")) {
            thinking = 0;
        } else if (!strcmp(o, "--ids")) {
            as_ids = 1;
        } else if (!strcmp(o, "--max-new-tokens")) {
            st = parse_int(&it, &max_new, 0);
        } else if (!strcmp(o, "--temperature")) {
            st = parse_dbl(&it, &smp.temperature, 0, 1e6);
        } else if (!strcmp(o, "--top-k")) {
            st = parse_int(&it, &smp.top_k, 0);
        } else if (!strcmp(o, "--top-p")) {
            st = parse_dbl(&it, &smp.top_p, 1e-9, 1);
        } else if (!strcmp(o, "--seed")) {
            st = parse_int(&it, &seed, 0);
        } else if (!strcmp(o, "--max-seq-len")) {
            st = parse_int(&it, &max_seq, 1);
        } else if (!strcmp(o, "--threads")) {
            st = parse_int(&it, &threads, 1);
        } else {
            generate_usage(stderr);
            return base_fail(err, "generate: unknown option '%s'", o);
        }
        if (st) return -1;
    }
    if (!path) return base_fail(err, "generate: --model PATH is required");
    if (prompt && chat) return base_fail(err, "generate: --prompt and --chat exclude each other");
    smp.seed = (uint64_t)seed;
    if (threads > 0) omp_set_num_threads(base_threads_bound(threads, "generate --threads"));
    base_log_all_to_stderr(1); /* stdout is the generated text */

    char rec_tok[4096]; /* the tokenizer a training checkpoint records */
    if (train_generate_tokenizer(path, &tok_dir, rec_tok, sizeof rec_tok, err)) return -1;
    data_tok *tok = NULL;
    model m = {0};
    model_infer *s = NULL;
    char *text = NULL, *in = NULL;
    data_tok_ids ids = {0};
    train_gen_result r = {0};
    int rc = -1;
    if (tok_dir && data_tok_load(tok_dir, &tok, err)) goto out;
    if (chat && !tok) {
        base_fail(err, "generate: --chat needs a tokenizer (--tokenizer DIR)");
        goto out;
    }
    /* the prompt text: --prompt, the rendered --chat messages, or stdin */
    size_t len = 0;
    if (chat) {
        const char *j = chat;
        while (*j == ' ' || *j == '\n' || *j == '\t') j++;
        if (*j == '[') {
            len = strlen(chat);
        } else {
            if (!(in = base_read_file(chat, (size_t)1 << 30, &len, err))) goto out;
        }
        data_chat_msg *msgs = NULL;
        int n = 0;
        int bad = data_chat_parse_json(in ? in : chat, in ? len : strlen(chat), &msgs, &n, err) ||
                  data_chat_render(msgs, n, 1, thinking, &text, err);
        data_chat_msgs_free(msgs);
        if (bad) goto out;
    } else if (prompt) {
        text = strdup(prompt);
    } else if (!(text = base_read_file(NULL, (size_t)1 << 30, &len, err))) {
        goto out;
    }
    if (!text) {
        base_fail(err, "out of memory");
        goto out;
    }
    len = strlen(text);
    if (train_load_model(&m, path, &a, err)) goto out;
    const int V = m.args.vocab_size;
    if (tok) {
        if (data_tok_encode(tok, text, len, &ids, err)) goto out;
        if (data_tok_vocab_size(tok) > V)
            base_log(BASE_LOG_WARN, "the tokenizer has %d ids, the model %d",
                     data_tok_vocab_size(tok), V);
    } else { /* one token per byte */
        if (V < 256) {
            base_fail(err,
                      "generate: without a tokenizer the model needs a vocabulary of at "
                      "least 256 (bytes), it has %d",
                      V);
            goto out;
        }
        ids.ids = malloc(len * sizeof(int32_t) + 4);
        if (!ids.ids) {
            base_fail(err, "out of memory");
            goto out;
        }
        for (size_t i = 0; i < len; i++) ids.ids[i] = (unsigned char)text[i];
        ids.n = len;
    }
    if (ids.n == 0) {
        if (tok && data_tok_eos_id(tok) >= 0) { /* an empty prompt starts a new document */
            ids.ids = realloc(ids.ids, sizeof(int32_t));
            ids.ids[0] = data_tok_eos_id(tok);
            ids.n = 1;
        } else {
            base_fail(err, "generate: the prompt is empty");
            goto out;
        }
    }
    for (size_t i = 0; i < ids.n; i++)
        if (ids.ids[i] >= V) {
            base_fail(err, "generate: prompt token %d is outside the model's vocabulary (%d)",
                      ids.ids[i], V);
            goto out;
        }
    int ctx = max_seq > 0 ? max_seq : m.args.max_seq_len > 0 ? m.args.max_seq_len : 4096;
    if ((int64_t)ids.n > ctx) {
        base_fail(err,
                  "generate: the prompt has %zu tokens, more than the context of %d "
                  "(--max-seq-len)",
                  ids.n, ctx);
        goto out;
    }
    const int64_t want = (int64_t)ids.n + max_new;
    if (model_infer_new(&s, &m, want < ctx ? (int)want : ctx, err)) goto out;
    int32_t stop[3];
    int n_stop = 0;
    if (tok) {
        add_stop(data_tok_eos_id(tok), stop, &n_stop);
        add_stop(data_tok_token_id(tok, "<|im_end|>"), stop, &n_stop);
        add_stop(data_tok_token_id(tok, "<|endoftext|>"), stop, &n_stop);
    }
    train_text_stream ts = {as_ids ? NULL : tok, as_ids, stdout, {0}, 0};
    train_gen_opts go = {smp, max_new, stop, n_stop, &ts};
    rc = train_generate(s, ids.ids, (int)ids.n, &go, &r, err);
    train_stream_finish(&ts);
    if (!rc) {
        printf("\n");
        fflush(stdout);
        fprintf(stderr,
                "prompt: %d tokens in %.3f s (%.1f tokens/s); generated %d tokens in %.3f s "
                "(%.2f tokens/s)%s\n",
                r.n_prompt, r.prefill_s, r.prefill_s > 0 ? r.n_prompt / r.prefill_s : 0.0, r.n_new,
                r.decode_s, r.decode_s > 0 ? r.n_new / r.decode_s : 0.0,
                r.stopped ? "; stopped at a stop token" : "");
    }
out:
    free(r.tokens);
    model_infer_free(s);
    model_free(&m);
    data_tok_ids_free(&ids);
    data_tok_free(tok);
    free(text);
    free(in);
    return rc;
}

/* Dataset options shared by tokenize and data. Returns 1 if the option was consumed. */
typedef struct {
    const char *path, *field, *tokenizer;
    data_format format;
    int skip_bad;
} data_args;

static int parse_data_opt(args_iter *it, data_args *d, int *status) {
    const char *o = it->argv[it->i], *v;
    *status = 0;
    if (!strcmp(o, "--skip-bad-lines")) {
        d->skip_bad = 1;
        return 1;
    }
    if (strcmp(o, "--data") && strcmp(o, "--field") && strcmp(o, "--format") &&
        strcmp(o, "--tokenizer"))
        return 0;
    if (!(v = need_value(it))) return *status = -1, 1;
    if (!strcmp(o, "--data")) d->path = v;
    if (!strcmp(o, "--field")) d->field = v;
    if (!strcmp(o, "--tokenizer")) d->tokenizer = v;
    if (!strcmp(o, "--format") && data_format_parse(v, &d->format))
        *status = base_fail(it->err, "--format: '%s' is not auto, text, jsonl or tokens", v);
    return 1;
}

static const char data_opts_help[] =
    "  --data PATH        a file, a folder (its files, sorted) or a quoted glob\n"
    "  --format F         auto (default: shard magic, .jsonl/.json/.ndjson, else text), text\n"
    "                     (a document per blank-line paragraph), jsonl, tokens (shards)\n"
    "  --field NAME       JSONL field holding the text (text)\n"
    "  --skip-bad-lines   skip (count, log) malformed JSONL lines instead of failing\n";

/* titan tokenize: dataset -> token shards, on all cores. */
static int cmd_tokenize(int argc, char **argv, base_err *err) {
    data_args d = {0};
    data_tokenize_cfg c = {0};
    args_iter it = {argc, argv, 0, err};
    for (it.i = 2; it.i < argc; it.i++) {
        const char *a = argv[it.i];
        int st = 0;
        if (parse_data_opt(&it, &d, &st)) {
            if (st) return -1;
        } else if (!strcmp(a, "--out")) {
            if (!(c.out_dir = need_value(&it))) return -1;
        } else if (!strcmp(a, "--threads")) {
            if (parse_int(&it, &c.threads, 1)) return -1;
        } else if (!strcmp(a, "--shard-tokens")) {
            int n;
            if (parse_int(&it, &n, 1)) return -1;
            c.shard_tokens = n;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: titan tokenize --tokenizer DIR --data PATH --out DIR [options]\n"
                   "Encodes every document (order kept) into OUT/shard-00000.tok, ...\n%s"
                   "  --out DIR          output folder (must not hold .tok files yet)\n"
                   "  --shard-tokens N   start a new shard after N tokens (2^28)\n"
                   "  --threads N        encoding threads (default: all cores)\n",
                   data_opts_help);
            return 0;
        } else {
            return base_fail(err, "tokenize: unknown option '%s'", a);
        }
    }
    if (!d.path || !d.tokenizer || !c.out_dir)
        return base_fail(err, "tokenize: --data, --tokenizer and --out are required");
    c.path = d.path;
    c.format = d.format;
    c.field = d.field;
    c.skip_bad_lines = d.skip_bad;
    c.tokenizer = d.tokenizer;
    if (c.threads > 0) c.threads = base_threads_bound(c.threads, "tokenize --threads");
    int64_t docs, tokens;
    const double t0 = base_now();
    if (data_tokenize(&c, &docs, &tokens, err)) return -1;
    printf("tokenized %lld documents into %lld tokens in %s (%.2f s)\n", (long long)docs,
           (long long)tokens, c.out_dir, base_now() - t0);
    return 0;
}

/* titan data: prints the loader's windows ([seq_len + 1] ids per line) and its final state. */
static int cmd_data(int argc, char **argv, base_err *err) {
    data_args d = {0};
    data_loader_cfg c = {0};
    c.seq_len = 128;
    c.batch = 1;
    c.dp_size = 1;
    c.infinite = 1;
    c.enc.vocab_size = INT32_MAX;
    int batches = 1;
    const char *state = NULL;
    args_iter it = {argc, argv, 0, err};
    for (it.i = 2; it.i < argc; it.i++) {
        const char *a = argv[it.i];
        int st = 0;
        if (parse_data_opt(&it, &d, &st)) {
        } else if (!strcmp(a, "--seq-len")) {
            st = parse_int(&it, &c.seq_len, 1);
        } else if (!strcmp(a, "--batch")) {
            st = parse_int(&it, &c.batch, 1);
        } else if (!strcmp(a, "--batches")) {
            st = parse_int(&it, &batches, 0);
        } else if (!strcmp(a, "--dp-rank")) {
            st = parse_int(&it, &c.dp_rank, 0);
        } else if (!strcmp(a, "--dp-size")) {
            st = parse_int(&it, &c.dp_size, 1);
        } else if (!strcmp(a, "--vocab-size")) {
            st = parse_int(&it, &c.enc.vocab_size, 1);
        } else if (!strcmp(a, "--finite")) {
            c.infinite = 0;
        } else if (!strcmp(a, "--state")) {
            st = (state = need_value(&it)) ? 0 : -1;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: titan data --data PATH [--tokenizer DIR] [options]\n"
                   "Prints the loader's windows, one line of seq_len + 1 ids each (input =\n"
                   "window[:-1], labels = window[1:]), batch after batch, then its state\n"
                   "as JSON on stderr (`state: {...}`).\n%s"
                   "  --tokenizer DIR    HF tokenizer folder (default: one token per byte)\n"
                   "  --seq-len T        tokens per window, without the extra label (128)\n"
                   "  --batch B          windows per batch (1)\n"
                   "  --batches N        batches to print (1)\n"
                   "  --dp-rank R, --dp-size N   this rank's share of the documents (0, 1)\n"
                   "  --vocab-size V     model vocabulary the ids must fit (no limit)\n"
                   "  --finite           stop at the end of the data instead of restarting\n"
                   "  --state JSON       resume from a state printed by an earlier run\n",
                   data_opts_help);
            return 0;
        } else {
            return base_fail(err, "data: unknown option '%s'", a);
        }
        if (st) return -1;
    }
    if (!d.path) return base_fail(err, "data: --data PATH is required");
    base_log_all_to_stderr(1); /* stdout is the windows */
    c.path = d.path;
    c.format = d.format;
    c.field = d.field;
    c.skip_bad_lines = d.skip_bad;
    if (d.tokenizer && data_tok_load(d.tokenizer, &c.enc.tok, err)) return -1;
    data_loader *l = NULL;
    const size_t n = (size_t)c.batch * (size_t)c.seq_len;
    int32_t *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    int rc = !x || !y ? base_fail(err, "out of memory") : data_loader_open(&l, &c, err);
    if (!rc && state) {
        data_loader_state s;
        rc = data_loader_state_parse(state, &s, err);
        if (!rc) rc = data_loader_set_state(l, &s, err);
    }
    for (int b = 0; !rc && b < batches; b++) {
        int got = data_loader_next(l, x, y, err);
        if (got <= 0) {
            rc = got;
            break;
        }
        for (int w = 0; w < c.batch; w++) {
            const int32_t *xw = x + (size_t)w * c.seq_len, *yw = y + (size_t)w * c.seq_len;
            for (int t = 0; t < c.seq_len; t++) printf("%d ", xw[t]);
            printf("%d\n", yw[c.seq_len - 1]);
        }
    }
    if (!rc) {
        data_loader_state s;
        char buf[512];
        data_loader_get_state(l, &s);
        data_loader_state_format(&s, buf, sizeof buf);
        fflush(stdout);
        fprintf(stderr, "state: %s\n", buf);
    }
    data_loader_free(l);
    data_tok_free(c.enc.tok);
    free(x);
    free(y);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    base_err err = {{0}};
    int rc;
    if (!strcmp(argv[1], "train")) {
        ensure_blas_coretype(argv);
        /* under mpirun every rank runs this; one plain process otherwise */
        rc = dist_init(&argc, &argv, &err);
        if (!rc) rc = cmd_train(argc, argv, &err);
        if (rc == 2) { /* usage printed */
            dist_finalize();
            return 2;
        }
    } else if (!strcmp(argv[1], "generate")) {
        ensure_blas_coretype(argv);
        rc = cmd_generate(argc, argv, &err);
    } else if (!strcmp(argv[1], "plan")) {
        rc = cmd_plan(argc, argv, &err);
    } else if (!strcmp(argv[1], "inspect")) {
        rc = cmd_inspect(argc, argv, &err);
    } else if (!strcmp(argv[1], "convert")) {
        rc = cmd_convert(argc, argv, &err);
    } else if (!strcmp(argv[1], "encode") || !strcmp(argv[1], "decode")) {
        rc = cmd_codec(argc, argv, !strcmp(argv[1], "encode"), &err);
    } else if (!strcmp(argv[1], "tokenize")) {
        rc = cmd_tokenize(argc, argv, &err);
    } else if (!strcmp(argv[1], "data")) {
        rc = cmd_data(argc, argv, &err);
    } else if (!strcmp(argv[1], "kernels")) {
        rc = cmd_kernels(argc, argv, &err);
    } else {
        usage(stderr);
        base_fail(&err, "unknown command '%s'", argv[1]);
        rc = -1;
    }
    if (rc > 0) { /* train stopped on a signal after saving: 128 + its number */
        dist_finalize();
        return rc;
    }
    if (rc) {
        if (dist_world_size() > 1) { /* one rank's error stops them all (MPI_Abort) */
            fprintf(stderr, "titan: error (rank %d of %d): %s\n", dist_world_rank(),
                    dist_world_size(), err.msg);
            dist_abort(1);
        }
        fprintf(stderr, "titan: error: %s\n", err.msg);
        dist_finalize();
        return 1;
    }
    dist_finalize();
    return 0;
}
