/* train: printing a job config (TOML that --config loads back) and `titan train --help`. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/config_schema.h"

/* ---- printing and help -------------------------------------------------------------- */

static void print_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        const char *esc = *p == '"'    ? "\\\""
                          : *p == '\\' ? "\\\\"
                          : *p == '\n' ? "\\n"
                          : *p == '\t' ? "\\t"
                          : *p == '\r' ? "\\r"
                                       : NULL;
        if (esc)
            fputs(esc, f);
        else if (*p < 0x20 || *p == 0x7f)
            fprintf(f, "\\u%04X", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

/* The shortest %g form that reads back to the same double, always with '.' or 'e' so TOML
 * reads a float. */
static void print_float(FILE *f, double x) {
    char s[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(s, sizeof s, "%.*g", prec, x);
        if (strtod(s, NULL) == x) break;
    }
    fputs(s, f);
    if (!strpbrk(s, ".e")) fputs(".0", f);
}

static void print_value(FILE *out, const field *fd, const void *s) {
    switch (fd->type) {
    case T_STR:
        print_string(out, *(const char *const *)s);
        break;
    case T_INT:
        fprintf(out, "%lld",
                (long long)(fd->optional ? ((const train_opt_int *)s)->v : *(const int64_t *)s));
        break;
    case T_BOOL:
        fputs((fd->optional ? ((const train_opt_int *)s)->v : *(const int *)s) ? "true" : "false",
              out);
        break;
    case T_FLOAT:
        print_float(out, fd->optional ? ((const train_opt_float *)s)->v : *(const double *)s);
        break;
    case T_STRS: {
        const train_str_list *l = s;
        fputc('[', out);
        for (int i = 0; i < l->n; i++) {
            if (i) fputs(", ", out);
            print_string(out, l->v[i]);
        }
        fputc(']', out);
        break;
    }
    case T_INTS: {
        const train_int_list *l = s;
        fputc('[', out);
        for (int i = 0; i < l->n; i++) fprintf(out, "%s%lld", i ? ", " : "", (long long)l->v[i]);
        fputc(']', out);
        break;
    }
    case T_FLOATS: {
        const train_float_list *l = s;
        fputc('[', out);
        for (int i = 0; i < l->n; i++) {
            if (i) fputs(", ", out);
            print_float(out, l->v[i]);
        }
        fputc(']', out);
        break;
    }
    case T_ANY:
        break; /* is_unset: printed as a comment */
    }
}

int is_unset(const field *fd, const void *s) {
    if (fd->type == T_ANY) return 1;
    if (!fd->optional) return 0;
    return fd->type == T_FLOAT ? !((const train_opt_float *)s)->set
                               : !((const train_opt_int *)s)->set;
}

char *value_text_dup(const field *fd, const void *s) {
    if (is_unset(fd, s)) return strdup(fd->type == T_ANY ? "(any value)" : "none");
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    if (!m) return NULL;
    print_value(m, fd, s);
    if (fclose(m)) {
        free(buf);
        return NULL;
    }
    return buf;
}

void value_text(const field *fd, const void *s, char *out, size_t n) {
    char *buf = value_text_dup(fd, s);
    snprintf(out, n, "%s", buf ? buf : "");
    free(buf);
}

/* [optimizer]'s own hyperparameters, which [[optimizer.param_groups]] replace (translate.c
 * refuses both): their defaults printed as comments beside groups, so the output loads back
 * (a value set stays, refused as the input is). */
static int replaced_by_groups(const train_config *c, const field *fd) {
    return c->optimizer.n_param_groups && train_param_groups_replace(fd) &&
           !c->origin[fd - g_fields].where;
}

/* Each group with every kwarg (torch's defaults resolved), after [optimizer]'s keys. */
static void print_param_groups(const train_config *c, FILE *f) {
    for (int k = 0; k < c->optimizer.n_param_groups; k++) {
        const train_param_group *g = &c->optimizer.param_groups[k];
        fputs("\n[[optimizer.param_groups]]\npattern = ", f);
        print_string(f, g->pattern);
        fputs("\noptimizer_name = ", f);
        print_string(f, g->optimizer_name);
        fputs("\noptimizer_kwargs = {lr = ", f);
        print_float(f, g->c.lr);
        if (g->c.muon) { /* DistMuon's */
            fputs(", weight_decay = ", f);
            print_float(f, g->c.weight_decay);
            fputs(", momentum = ", f);
            print_float(f, g->c.momentum);
            fprintf(f, ", nesterov = %s, ns_coefficients = [", g->c.nesterov ? "true" : "false");
            for (int i = 0; i < 3; i++) {
                if (i) fputs(", ", f);
                print_float(f, g->c.ns[i]);
            }
            fputs("], eps = ", f);
            print_float(f, g->c.eps);
            fprintf(f, ", ns_steps = %d, adjust_lr_fn = \"%s\"", g->c.ns_steps,
                    train_muon_adjust_name(g->c.adjust));
        } else {
            fputs(", betas = [", f);
            print_float(f, g->c.beta1);
            fputs(", ", f);
            print_float(f, g->c.beta2);
            fputs("], eps = ", f);
            print_float(f, g->c.eps);
            fputs(", weight_decay = ", f);
            print_float(f, g->c.weight_decay);
        }
        /* the implementation flags as given (they decide what translate refuses: DistMuon's
         * fused = false over optimizer.implementation's "fused") */
        if (g->fused >= 0) fprintf(f, ", fused = %s", g->fused ? "true" : "false");
        if (g->foreach >= 0) fprintf(f, ", foreach = %s", g->foreach ? "true" : "false");
        fputs("}\n", f);
    }
}

void train_config_print(const train_config *c, FILE *f) {
    fprintf(f, "# titan job config, resolved (titan train --print-config)\n");
    for (int i = 0; i < N_FIELDS; i++) {
        const field *fd = &g_fields[i];
        if (i && !strcmp(g_fields[i - 1].section, "optimizer") && strcmp(fd->section, "optimizer"))
            print_param_groups(c, f);
        if (i == 0 || strcmp(fd->section, g_fields[i - 1].section))
            fprintf(f, "%s[%s]\n", i ? "\n" : "", fd->section);
        const void *s = slot(c, fd);
        /* a fine-tune's config.json from its HF folder (the printed flavor is set, so it
         * would no longer apply): printed so the output builds the same model */
        const char *implied = model_config_path(c);
        if (s == (const void *)&c->model.config_path && implied[0]) s = &implied;
        if (fd->type == T_ANY)
            fprintf(f, "# %s = (any value, not kept)  # %s\n", fd->key, fd->help);
        else if (replaced_by_groups(c, fd))
            fprintf(f, "# %s: each [[optimizer.param_groups]] sets its own\n", fd->key);
        else if (is_unset(fd, s))
            fprintf(f, "# %s = (unset)  # %s\n", fd->key, fd->help);
        else {
            fprintf(f, "%s = ", fd->key);
            print_value(f, fd, s);
            fputc('\n', f);
        }
    }
    if (!strcmp(g_fields[N_FIELDS - 1].section, "optimizer")) print_param_groups(c, f);
}

void train_config_usage(FILE *f) {
    fprintf(f, "usage: titan train [--config FILE] [--section.key VALUE | --section.key=VALUE]...\n"
               "                   [--print-config] [--help]\n"
               "  --config FILE       a TOML job config (see configs/); the command line "
               "overrides it\n"
               "                      (torchtitan's --job.config_file FILE is the same)\n"
               "  --print-config      print the resolved config as TOML and exit\n"
               "  --section.key V     set one field (booleans: a bare --section.key means true,\n"
               "                      --section.no_key false; optional numbers and paths\n"
               "                      that default to \"\": 'none' unsets; lists: [\"a\", \"b\"]\n"
               "                      or a,b); set twice, the later wins (warned)\n\n"
               "older flags, aliases of config fields:\n");
    for (int i = 0; i < N_ALIASES; i++) {
        if (i && !strcmp(g_aliases[i].flag, g_aliases[i - 1].flag)) continue;
        char lhs[64];
        snprintf(lhs, sizeof lhs, "%s%s", g_aliases[i].flag,
                 alias_takes_value(g_aliases[i].flag) ? " V" : "");
        if (g_aliases[i].kind == ALIAS_SET)
            fprintf(f, "  %-20s --model.KEY V\n", "--set KEY=V");
        else if (g_aliases[i].kind == ALIAS_GRAD_ACCUM)
            fprintf(f, "  %-20s --training.global_batch_size (V x local_batch_size x dp ranks)\n",
                    lhs);
        else {
            fprintf(f, "  %-20s", lhs);
            for (int j = i; j < N_ALIASES && !strcmp(g_aliases[j].flag, g_aliases[i].flag); j++)
                fprintf(f, " --%s%s%s", g_aliases[j].field, g_aliases[j].value ? "=" : "",
                        g_aliases[j].value ? (g_aliases[j].value[0] ? g_aliases[j].value : "\"\"")
                                           : "");
            fputc('\n', f);
        }
    }
    train_config d; /* defaults allocate nothing: no train_config_free needed */
    train_config_defaults(&d);
    for (int i = 0; i < N_FIELDS; i++) {
        const field *fd = &g_fields[i];
        if (i == 0 || strcmp(fd->section, g_fields[i - 1].section))
            fprintf(f, "\n[%s]\n", fd->section);
        char def[96] = "";
        const void *s = slot(&d, fd);
        if (is_unset(fd, s))
            snprintf(def, sizeof def, "unset");
        else {
            char *buf = NULL;
            size_t len = 0;
            FILE *m = open_memstream(&buf, &len);
            if (m) {
                print_value(m, fd, s);
                fclose(m);
                snprintf(def, sizeof def, "%s", buf);
                free(buf);
            }
        }
        char range[96] = "";
        if (fd->choices) {
            char refused[64];
            choices_list(fd->choices, 0, range, sizeof range);
            choices_list(fd->choices, 1, refused, sizeof refused);
            if (refused[0])
                snprintf(range + strlen(range), sizeof range - strlen(range), "; refused: %s",
                         refused);
        } else if (fd->type == T_INT || fd->type == T_FLOAT || fd->type == T_INTS ||
                   fd->type == T_FLOATS)
            range_text(fd, range, sizeof range);
        static const char *const tag[] = {"", " [inert]", " [no effect: noted when set]",
                                          " [refused when set]"};
        fprintf(f, "  %-30s %-14s %s%s%s%s%s\n", fd->key, def, fd->help, range[0] ? " (" : "",
                range, range[0] ? ")" : "", tag[fd->policy]);
    }
}
