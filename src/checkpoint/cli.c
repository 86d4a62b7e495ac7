/* checkpoint: the subcommands that read and convert checkpoints (titan inspect, titan
 * convert). */
#include <stdio.h>
#include <string.h>

#include "checkpoint/checkpoint.h"

void ckpt_cmd_inspect_usage(FILE *f) {
    fprintf(f, "usage: titan inspect [--flavor NAME] [--set KEY=VALUE]...\n"
               "       titan inspect PATH\n"
               "Prints a flavor's arguments and parameter counts (--flavor, default debugmodel;\n"
               "--set overrides a model argument), or validates PATH: a .safetensors file, a HF\n"
               "config.json, a HF model folder or a training checkpoint, and lists its tensors,\n"
               "model and counts.\n");
}

/* titan inspect [--flavor NAME] [--set K=V]... | titan inspect PATH */
int ckpt_cmd_inspect(int argc, char **argv, base_err *err) {
    if (argc == 3 && argv[2][0] != '-') return ckpt_inspect(argv[2], err);
    if (argc > 3 && argv[2][0] != '-')
        return base_fail(err, "inspect: one path expected, got %d (titan inspect PATH)", argc - 2);
    model_args a;
    model_flavor("debugmodel", &a, err);
    base_args it = {argc, argv, 0, err};
    for (it.i = 2; it.i < argc; it.i++) {
        int st;
        if (base_args_is_help(&it)) {
            ckpt_cmd_inspect_usage(stdout);
            return 0;
        }
        if (model_args_cli_opt(&it, &a, &st)) {
            if (st) return -1;
            continue;
        }
        return base_fail(err, "inspect: unknown option '%s'", argv[it.i]);
    }
    if (model_args_validate(&a, err)) return -1;
    ckpt_print_model(&a);
    return 0;
}

void ckpt_cmd_convert_usage(FILE *f) {
    fprintf(f, "usage: titan convert SRC DST [options]\n"
               "Converts a HF model folder into a training checkpoint, or a training checkpoint\n"
               "into a HF folder (the export options apply to the latter):\n"
               "  --dtype T                 float32 (default), bfloat16 or float16\n"
               "  --max-shard-size SIZE     largest safetensors shard (5GB; 200MB, 1GiB, bytes)\n"
               "  --assets DIR              copy the tokenizer files and generation_config.json\n"
               "                            found in DIR (default: the tokenizer the\n"
               "                            checkpoint records, while unchanged)\n"
               "  --generation-config FILE  the generation_config.json to copy (wins over\n"
               "                            --assets)\n");
}

/* Export options of convert: --dtype, --max-shard-size, --assets, --generation-config.
 * Returns 1 if the option was consumed (*status: 0 or -1). */
static int parse_export_opt(base_args *it, ckpt_export_opts *o, int *status) {
    const char *a = it->argv[it->i], *v;
    *status = 0;
    if (strcmp(a, "--dtype") && strcmp(a, "--max-shard-size") && strcmp(a, "--assets") &&
        strcmp(a, "--generation-config"))
        return 0;
    if (!(v = base_args_value(it))) return *status = -1, 1;
    if (!o->given) o->given = a;
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
int ckpt_cmd_convert(int argc, char **argv, base_err *err) {
    ckpt_export_opts o = {.dtype = CKPT_F32};
    const char *pos[2] = {NULL, NULL};
    int n_pos = 0;
    base_args it = {argc, argv, 0, err};
    for (it.i = 2; it.i < argc; it.i++) {
        int st;
        if (base_args_is_help(&it)) {
            ckpt_cmd_convert_usage(stdout);
            return 0;
        } else if (parse_export_opt(&it, &o, &st)) {
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
