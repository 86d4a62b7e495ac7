/* train: a job config from the command line (`--section.key value`, the older flag aliases,
 * --config / --job.config_file), every unknown option in one error. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train/config_schema.h"
#include "train/internal.h"

/* ---- the command line ------------------------------------------------------------- */

/* A command-line string as a TOML value of field f's type. Numbers take TOML's syntax or
 * anything strtod/strtoll read whole ("1e-3", ".5"); lists are TOML arrays or a
 * comma-separated list (torchtitan's split(",")); booleans are true/false/1/0. */
static int cli_value(const field *f, const char *text, base_toml_value *v, char *why, size_t n) {
    memset(v, 0, sizeof *v);
    v->type = BASE_TOML_STRING;
    base_err e;
    /* as in a file: the resolved config is saved as TOML (config.toml), which must load back */
    const size_t tl = strlen(text), bad = base_utf8_prefix(text, tl);
    if (bad < tl) {
        snprintf(why, n, "invalid UTF-8 at byte %zu", bad + 1);
        return -1;
    }
    if (f->type == T_ANY) { /* a TOML value, else the text as a string */
        if (base_toml_parse_value(text, v, &e) == 0) return 0;
        memset(v, 0, sizeof *v);
        v->type = BASE_TOML_STRING;
    }
    if (f->type == T_STR || f->type == T_ANY) return (v->s = strdup(text)) ? 0 : -1;
    if (is_list_type(f->type)) {
        if (text[0] == '[') {
            if (base_toml_parse_value(text, v, &e) == 0) return 0;
            snprintf(why, n, "not a TOML array: %.300s", e.msg);
            return -1;
        }
        v->type = BASE_TOML_ARRAY; /* "" is the empty list; "a," has an empty last item */
        for (const char *p = text; *text;) {
            const char *comma = strchr(p, ',');
            size_t len = comma ? (size_t)(comma - p) : strlen(p);
            base_toml_value *ni = realloc(v->items, sizeof *ni * (size_t)(v->n_items + 1));
            if (!ni) return -1;
            v->items = ni;
            base_toml_value *it = &v->items[v->n_items++];
            memset(it, 0, sizeof *it);
            char *item = strndup(p, len);
            if (!item) return -1;
            if (f->type == T_STRS) {
                it->type = BASE_TOML_STRING;
                it->s = item;
            } else {
                const int ints = f->type == T_INTS;
                it->type = ints ? BASE_TOML_INT : BASE_TOML_FLOAT;
                int bad = ints ? base_parse_i64(item, &it->i) : base_parse_f64(item, &it->f);
                free(item);
                if (bad) {
                    snprintf(why, n, "item %d: expected %s, got '%.*s'", v->n_items,
                             ints ? "an integer" : "a number", (int)len, p);
                    return -1;
                }
            }
            if (!comma) break;
            p = comma + 1;
        }
        return 0;
    }
    if (f->type == T_BOOL && (!strcmp(text, "1") || !strcmp(text, "0"))) {
        v->type = BASE_TOML_BOOL;
        v->i = text[0] == '1';
        return 0;
    }
    if (base_toml_parse_value(text, v, &e) == 0 && v->type != BASE_TOML_STRING &&
        v->type != BASE_TOML_ARRAY)
        return 0;
    base_toml_value_free(v);
    if (f->type == T_INT && base_parse_i64(text, &v->i) == 0) return v->type = BASE_TOML_INT, 0;
    if (f->type == T_FLOAT && base_parse_f64(text, &v->f) == 0) return v->type = BASE_TOML_FLOAT, 0;
    /* a number past an int64 or a double: said as out of range, as a value in the file is */
    char *end;
    errno = 0;
    const double x = strtod(text, &end);
    if ((f->type == T_INT || f->type == T_FLOAT) && text[0] && !*end &&
        (errno == ERANGE || (f->type == T_INT && x == nearbyint(x)))) {
        char r[96];
        range_text(f, r, sizeof r);
        snprintf(why, n, "%.100s is out of range (must be %s)", text, r);
        return -1;
    }
    snprintf(why, n, "expected %s, got '%.100s'", type_name(f), text);
    return -1;
}

static int set_value(train_config *c, int fi, const char *value, const char *where, const char *pre,
                     base_err *err);

int train_config_set(train_config *c, const char *name, const char *value, const char *where,
                     base_err *err) {
    char sec[96], pre[300];
    const char *dot = strrchr(name, '.');
    int fi = -1;
    sec[0] = 0;
    if (dot && (size_t)(dot - name) < sizeof sec) {
        snprintf(sec, sizeof sec, "%.*s", (int)(dot - name), name);
        fi = find_field(sec, dot + 1);
    }
    if (fi < 0) {
        const int gi = suggest_field(dot ? sec : "", dot ? dot + 1 : name);
        if (gi < 0)
            return base_fail(err,
                             "command line: unknown option '--%.100s' (titan train --help "
                             "lists them)",
                             name);
        return base_fail(err, "command line: unknown option '--%.100s'; did you mean '--%s.%s'?",
                         name, g_fields[gi].section, g_fields[gi].key);
    }
    const field *f = &g_fields[fi];
    describe(f, where, 0, 0, pre, sizeof pre);
    if (!value && f->type != T_BOOL)
        return base_fail(err, "%s: needs a value (%s)", pre, type_name(f));
    /* set on the command line before (a file's origin has a line): the later setting wins, as
     * torchtitan's tyro keeps the last, and a different value is said, never lost silently */
    const char *before_where =
        c->origin[fi].where && !c->origin[fi].line ? c->origin[fi].where : NULL;
    /* whole: two long paths (or lists) that differ late are still told apart */
    char *before = before_where ? value_text_dup(f, slot(c, f)) : NULL;
    int rc = 0;
    /* 'none' unsets an optional number and a path or name whose unset value is its default ""
     * (torchtitan's str | None fields: dataset_path, initial_load_path, tokenizer_path, ...;
     * tyro reads None as None); not a choice (activation_checkpoint.mode = "none"), a checked
     * value (selective_ac_option) or a field with another default (job.dump_folder: "" is no
     * folder there) */
    const int none_str = f->type == T_STR && !f->choices && !f->check && !f->def_s[0];
    if ((f->optional || none_str) && value && (!strcmp(value, "none") || !strcmp(value, "None"))) {
        if (none_str)
            *(const char **)slot(c, f) = "";
        else
            memset(slot(c, f), 0,
                   f->type == T_FLOAT ? sizeof(train_opt_float) : sizeof(train_opt_int));
        c->origin[fi].where = where;
        c->origin[fi].line = 0;
    } else {
        rc = set_value(c, fi, value, where, pre, err);
    }
    char *after = !rc && before ? value_text_dup(f, slot(c, f)) : NULL;
    if (after && strcmp(before, after))
        base_log(BASE_LOG_WARN,
                 "%s.%s is set twice on the command line: %s gives %s, replacing %s from %s; "
                 "the later setting wins",
                 f->section, f->key, where, after, before, before_where);
    free(before);
    free(after);
    return rc;
}

/* Parses value (NULL: a bare boolean, true) for field fi and assigns it; pre names the field
 * and the option in errors. */
static int set_value(train_config *c, int fi, const char *value, const char *where, const char *pre,
                     base_err *err) {
    const field *f = &g_fields[fi];
    base_toml_value v;
    char why[400] = "";
    int rc;
    if (!value) {
        memset(&v, 0, sizeof v);
        v.type = BASE_TOML_BOOL;
        v.i = 1;
        rc = 0;
    } else {
        rc = cli_value(f, value, &v, why, sizeof why);
    }
    if (rc)
        rc = base_fail(err, "%s: %s", pre, why[0] ? why : "out of memory");
    else
        rc = assign(c, fi, &v, where, 0, 0, err);
    base_toml_value_free(&v);
    return rc;
}

/* The flags `titan train` had before job configs, each an alias of config fields. A flag
 * listed on several rows sets each of them; `value` NULL takes the argument. */
const train_cfg_alias g_aliases[] = {
    {"--flavor", "model.flavor", NULL, ALIAS_FIELD},
    {"--set", NULL, NULL, ALIAS_SET}, /* KEY=VALUE -> model.KEY */
    {"--data", "training.dataset_path", NULL, ALIAS_FIELD},
    {"--random-tokens", "training.dataset_path", "", ALIAS_FIELD},
    {"--random-tokens", "training.dataset", "random", ALIAS_FIELD},
    {"--steps", "training.steps", NULL, ALIAS_FIELD},
    {"--batch", "training.local_batch_size", NULL, ALIAS_FIELD},
    {"--seq-len", "training.seq_len", NULL, ALIAS_FIELD},
    /* K microbatches per step on each data-parallel rank: global_batch_size = K x
     * local_batch_size x the dp degree (at the end, and in translate); a later
     * --training.global_batch_size wins, as any later setting. */
    {"--grad-accum", "training.global_batch_size", NULL, ALIAS_GRAD_ACCUM},
    {"--lr", "optimizer.lr", NULL, ALIAS_FIELD},
    {"--warmup", "lr_scheduler.warmup_steps", NULL, ALIAS_FIELD},
    {"--decay-ratio", "lr_scheduler.decay_ratio", NULL, ALIAS_FIELD},
    {"--decay-type", "lr_scheduler.decay_type", NULL, ALIAS_FIELD},
    {"--min-lr-factor", "lr_scheduler.min_lr_factor", NULL, ALIAS_FIELD},
    {"--weight-decay", "optimizer.weight_decay", NULL, ALIAS_FIELD},
    {"--max-norm", "training.max_norm", NULL, ALIAS_FIELD},
    {"--seed", "training.seed", NULL, ALIAS_FIELD},
    {"--ac", "activation_checkpoint.mode", NULL, ALIAS_FIELD},
    {"--threads", "training.threads", NULL, ALIAS_FIELD},
    {"--log-freq", "metrics.log_freq", NULL, ALIAS_FIELD},
    {"--metrics", "metrics.save_jsonl_file", NULL, ALIAS_FIELD},
    {"--metrics", "metrics.enable_jsonl", "true", ALIAS_FIELD},
    {"--out", "checkpoint.hf_export_folder", NULL, ALIAS_FIELD},
    {"--sample", "job.sample_tokens", NULL, ALIAS_FIELD},
    {"--peak-tflops", "metrics.peak_tflops", NULL, ALIAS_FIELD},
    {"--ce-chunk", "training.ce_chunk", NULL, ALIAS_FIELD},
    {"--tokenizer", "model.hf_assets_path", NULL, ALIAS_FIELD},
    {"--data-format", "training.dataset_format", NULL, ALIAS_FIELD},
    {"--data-field", "training.dataset_field", NULL, ALIAS_FIELD},
    {"--skip-bad-lines", "training.skip_bad_lines", "true", ALIAS_FIELD},
    {"--stop-after-step", "training.stop_after_step", NULL, ALIAS_FIELD},
    {"--dump-folder", "job.dump_folder", NULL, ALIAS_FIELD},
    {"--checkpoint-interval", "checkpoint.interval", NULL, ALIAS_FIELD},
    {"--checkpoint-interval", "checkpoint.enable", "true", ALIAS_FIELD},
    {"--checkpoint-folder", "checkpoint.folder", NULL, ALIAS_FIELD},
    {"--checkpoint-folder", "checkpoint.enable", "true", ALIAS_FIELD},
    {"--keep-latest-k", "checkpoint.keep_latest_k", NULL, ALIAS_FIELD},
    {"--load-step", "checkpoint.load_step", NULL, ALIAS_FIELD},
    {"--initial-load-path", "checkpoint.initial_load_path", NULL, ALIAS_FIELD},
    {"--last-save-full", "checkpoint.last_save_model_only", "false", ALIAS_FIELD},
    {"--sync-checkpoint", "checkpoint.async_mode", "disabled", ALIAS_FIELD},
    {"--force", "training.ignore_memory_check", "true", ALIAS_FIELD},
};
const int train_cfg_n_aliases = (int)(sizeof g_aliases / sizeof g_aliases[0]);

int alias_takes_value(const char *flag) {
    for (int i = 0; i < N_ALIASES; i++)
        if (!strcmp(g_aliases[i].flag, flag) && !g_aliases[i].value) return 1;
    return 0;
}

static int apply_alias(train_config *c, const char *flag, const char *arg, int64_t *grad_accum,
                       base_err *err) {
    for (int i = 0; i < N_ALIASES; i++) {
        if (strcmp(g_aliases[i].flag, flag)) continue;
        const char *v = g_aliases[i].value ? g_aliases[i].value : arg;
        if (g_aliases[i].kind == ALIAS_SET) {
            const char *eq = strchr(v, '=');
            char name[128];
            if (!eq || eq == v || (size_t)(eq - v) > 64)
                return base_fail(err, "command line (--set): wants KEY=VALUE, got '%.100s'", v);
            /* titan inspect's argument names (n_experts, moe_ffn_dim) name their fields too */
            const char *field = train_model_override_field(v, (size_t)(eq - v));
            if (field)
                snprintf(name, sizeof name, "model.%s", field);
            else
                snprintf(name, sizeof name, "model.%.*s", (int)(eq - v), v);
            /* the field's origin is kept with the config: "--set KEY=VALUE" in its pool */
            const size_t wn = strlen(v) + 8;
            char *where = pool_keep(c, malloc(wn));
            if (!where) return base_fail(err, "out of memory");
            snprintf(where, wn, "--set %s", v);
            if (train_config_set(c, name, eq + 1, where, err)) return -1;
        } else if (g_aliases[i].kind == ALIAS_GRAD_ACCUM) {
            const int64_t before = *grad_accum;
            if (base_parse_i64(v, grad_accum) || *grad_accum < 1 || *grad_accum > BIG)
                return base_fail(err,
                                 "command line (--grad-accum): '%.100s' is not an integer in [1, "
                                 "%lld]",
                                 v, (long long)BIG);
            if (before > 0 && before != *grad_accum)
                base_log(BASE_LOG_WARN,
                         "--grad-accum is given twice on the command line: %lld replaces %lld; "
                         "the later setting wins",
                         (long long)*grad_accum, (long long)before);
        } else if (train_config_set(c, g_aliases[i].field, v, g_aliases[i].flag, err)) {
            return -1;
        }
    }
    return 0;
}

static int is_alias(const char *flag) {
    for (int i = 0; i < N_ALIASES; i++)
        if (!strcmp(g_aliases[i].flag, flag)) return 1;
    return 0;
}

/* The length of the flag naming the config file: --config, or torchtitan's --job.config_file
 * (its run script's) and --job.config-file; followed by "=FILE" or nothing. 0: not one. */
static size_t config_flag(const char *a) {
    static const char *const flags[] = {"--config", "--job.config_file", "--job.config-file"};
    for (int i = 0; i < 3; i++) {
        const size_t k = strlen(flags[i]);
        if (!strncmp(a, flags[i], k) && (!a[k] || a[k] == '=')) return k;
    }
    return 0;
}

/* "--section.key[=v]" as a field name: section.key, with tyro's '-' spelling as '_'. The
 * key is after the last '.': sections nest ([training.dataloader], [quantize.linear.mx]),
 * keys never hold one. */
static void cli_name(const char *a, char *name, size_t n) {
    const char *eq = strchr(a, '=');
    snprintf(name, n, "%.*s", eq ? (int)(eq - a - 2) : (int)strlen(a + 2), a + 2);
    for (char *p = name; *p; p++) /* torchtitan's CLI (tyro) also spells keys with '-' */
        if (*p == '-') *p = '_';
}

/* An option without its "=value" into flag ("--lr=0.5" -> "--lr"); returns the value after
 * '=', or NULL when there is none. */
static const char *option_flag(const char *a, char *flag, size_t n) {
    const char *eq = strchr(a, '=');
    snprintf(flag, n, "%.*s", eq ? (int)(eq - a) : (int)strlen(a), a);
    return eq ? eq + 1 : NULL;
}

/* tyro's negative boolean: the boolean field "section.no_key" (cli_name's spelling of
 * --section.no_key and --section.no-key) sets to false, or -1 when name is not one. */
static int negated_bool(const char *name) {
    const char *dot = strrchr(name, '.');
    char sec[96];
    if (!dot || strncmp(dot + 1, "no_", 3) || (size_t)(dot - name) >= sizeof sec) return -1;
    snprintf(sec, sizeof sec, "%.*s", (int)(dot - name), name);
    const int fi = find_field(sec, dot + 4);
    return fi >= 0 && g_fields[fi].type == T_BOOL ? fi : -1;
}

/* Whether option a ("--...") names neither an alias nor a field; if so, why says so with
 * the nearest name (an alias or --section.key for a bare word, a field for section.key). */
static int cli_unknown(const char *a, char *why, size_t n) {
    char name[160], sec[96], flag[64];
    option_flag(a, flag, sizeof flag);
    if (is_alias(flag) || config_flag(a)) return 0;
    cli_name(a, name, sizeof name);
    const char *dot = strrchr(name, '.');
    if (!dot) { /* neither an alias nor section.key: suggest either */
        nearest nr = {a, "", 0};
        for (int k = 0; k < N_ALIASES; k++) consider(&nr, g_aliases[k].flag);
        for (int k = 0; k < N_FIELDS; k++) {
            char full[128];
            snprintf(full, sizeof full, "--%s.%s", g_fields[k].section, g_fields[k].key);
            consider(&nr, full);
        }
        snprintf(why, n, "unknown option '%.100s'; did you mean '%s'?", a, nr.best);
        return 1;
    }
    snprintf(sec, sizeof sec, "%.*s", (int)(dot - name), name);
    if (find_field(sec, dot + 1) >= 0 || negated_bool(name) >= 0) return 0;
    const int gi = suggest_field(sec, dot + 1);
    if (gi < 0)
        snprintf(why, n, "unknown option '--%.100s' (titan train --help lists them)", name);
    else
        snprintf(why, n, "unknown option '--%.100s'; did you mean '--%s.%s'?", name,
                 g_fields[gi].section, g_fields[gi].key);
    return 1;
}

int train_config_from_args(train_config *c, int argc, char **argv, int first, train_cli *cli,
                           base_err *err) {
    memset(cli, 0, sizeof *cli);
    unknowns unk = {"", 0, 0};         /* every unknown option, in one error */
    for (int i = first; i < argc; i++) /* torchtitan 0.3's launch line: said before the rest */
        if (!strcmp(argv[i], "--module") || !strncmp(argv[i], "--module=", 9))
            return base_fail(err, "command line: --module: torchtitan 0.3's --module M --config "
                                  "NAME names a Python config function, which titan cannot run; "
                                  "titan reads TOML job configs (torchtitan v0.2.2's): "
                                  "docs/config.md, \"Coming from torchtitan 0.3\", gives each "
                                  "Qwen3 config's titan command");
    for (int i = first; i < argc; i++) {
        char why[400];
        if (!strncmp(argv[i], "--", 2) && argv[i][2] && strcmp(argv[i], "--help") &&
            strcmp(argv[i], "--print-config") && cli_unknown(argv[i], why, sizeof why))
            unknown_add(&unk, "%s", why);
    }
    if (unk.n > 1)
        return base_fail(err, "command line: %d unknown options:\n  %s%s", unk.n, unk.text,
                         unk.shown < unk.n ? "\n  ..." : "");
    const char *config = NULL;
    for (int i = first; i < argc; i++) { /* the file first: the command line overrides it */
        const char *a = argv[i];
        const size_t k = config_flag(a);
        if (!k) continue;
        if (config) return base_fail(err, "command line: --config given twice");
        config = a[k] == '=' ? a + k + 1 : i + 1 < argc ? argv[++i] : NULL;
        if (!config || !config[0])
            return base_fail(err, "command line: %.*s needs a file", (int)k, a);
    }
    if (config && train_config_load_file(c, config, err)) {
        /* "qwen3_0_6b": a name, not a path, that is not here: torchtitan 0.3's config names */
        if (access(config, F_OK) != 0 && !strpbrk(config, "./") && config[0] != '-') {
            char msg[sizeof err->msg];
            snprintf(msg, sizeof msg, "%s", err->msg);
            base_fail(err,
                      "%s (torchtitan 0.3's --config names a Python config function, which "
                      "titan cannot run: docs/config.md, \"Coming from torchtitan 0.3\", gives "
                      "each Qwen3 config's titan command)",
                      msg);
        }
        return -1;
    }
    int64_t grad_accum = 0;
    for (int i = first; i < argc; i++) {
        const char *a = argv[i];
        const size_t k = config_flag(a);
        if (k) {
            i += !a[k];
            continue;
        }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            cli->help = 1;
            continue;
        }
        if (!strcmp(a, "--print-config")) {
            cli->print_config = 1;
            continue;
        }
        if (strncmp(a, "--", 2) || !a[2]) {
            return base_fail(err,
                             "command line: unexpected argument '%.100s' (options start "
                             "with --; see titan train --help)",
                             a);
        }
        char flag[64]; /* an alias, without any "=value" */
        const char *aval = option_flag(a, flag, sizeof flag);
        if (is_alias(flag)) {
            const char *arg = aval;
            if (alias_takes_value(flag) && !arg) {
                if (i + 1 >= argc) return base_fail(err, "command line (%s): needs a value", a);
                arg = argv[++i];
            } else if (!alias_takes_value(flag) && arg) {
                return base_fail(err, "command line (%s): %s takes no value", a, flag);
            }
            if (apply_alias(c, flag, arg, &grad_accum, err)) return -1;
            continue;
        }
        /* --section.key=value, --section.key value, or a bare boolean --section.key */
        const char *eq = strchr(a, '=');
        char name[160];
        cli_name(a, name, sizeof name);
        const char *value = eq ? eq + 1 : NULL;
        char why[400];
        if (cli_unknown(a, why, sizeof why)) return base_fail(err, "command line: %s", why);
        const char *d = strrchr(name, '.');
        char sec[96];
        snprintf(sec, sizeof sec, "%.*s", (int)(d - name), name);
        const int fi = find_field(sec, d + 1), neg = fi < 0 ? negated_bool(name) : -1;
        if (neg >= 0) { /* --section.no_key: false, and takes no value (as tyro) */
            const field *f = &g_fields[neg];
            char field_name[160];
            snprintf(field_name, sizeof field_name, "%s.%s", f->section, f->key);
            if (eq)
                return base_fail(err, "command line: %s: takes no value (it sets %s = false)", a,
                                 field_name);
            if (train_config_set(c, field_name, "false", a, err)) return -1;
            continue;
        }
        if (!eq && i + 1 < argc && strncmp(argv[i + 1], "--", 2)) {
            if (fi < 0 || g_fields[fi].type != T_BOOL || !strcmp(argv[i + 1], "true") ||
                !strcmp(argv[i + 1], "false") || !strcmp(argv[i + 1], "1") ||
                !strcmp(argv[i + 1], "0"))
                value = argv[++i];
        }
        if (train_config_set(c, name, value, a, err)) return -1;
        if (!strcmp(name, "training.global_batch_size") && grad_accum > 0) { /* a later one wins */
            base_log(BASE_LOG_WARN,
                     "training.global_batch_size is set twice on the command line: %s replaces "
                     "--grad-accum %lld; the later setting wins",
                     a, (long long)grad_accum);
            grad_accum = 0;
        }
    }
    if (grad_accum > 0) { /* as on one rank here; translate multiplies in the dp degree */
        char v[32];
        snprintf(v, sizeof v, "%lld", (long long)(grad_accum * c->training.local_batch_size));
        if (train_config_set(c, "training.global_batch_size", v, "--grad-accum", err)) return -1;
        c->grad_accum_steps = grad_accum;
    }
    return train_config_validate(c, err);
}

int train_config_names_job(const train_config *c) {
    if (c->file) return 1; /* a config file */
    for (int i = 0; i < N_FIELDS; i++)
        if (c->origin[i].where &&
            (!strcmp(g_fields[i].section, "model") || !strncmp(g_fields[i].key, "dataset", 7) ||
             !strcmp(g_fields[i].section, "checkpoint")))
            return 1;
    return 0;
}
