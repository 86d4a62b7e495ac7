/* train: the job-config schema shared by config.c (the table, loading, the command line,
 * printing) and translate.c (whole-config checks and the translation to train_opts). Private
 * to those two files. */
#ifndef TITAN_TRAIN_CONFIG_SCHEMA_H
#define TITAN_TRAIN_CONFIG_SCHEMA_H

#include "train/train.h"

/* T_ANY: any TOML value, checked and stored nowhere (torchtitan keys whose types titan has no
 * slot for, such as list[list[str]]; only ever P_INERT). */
typedef enum { T_STR, T_INT, T_FLOAT, T_BOOL, T_STRS, T_INTS, T_FLOATS, T_ANY } ftype;

/* What titan does with a field. torchtitan keys for features titan lacks are accepted at
 * their default (inert) value; set otherwise, P_NOTE logs that the setting has no effect on
 * the run and P_REFUSE stops train_config_to_opts with the field's name. */
typedef enum { P_USED, P_INERT, P_NOTE, P_REFUSE } fpolicy;

/* Extra per-value check: returns 0, or -1 with the reason in why. */
typedef int (*fcheck)(const base_toml_value *v, char *why, size_t n);

typedef struct {
    const char *section, *key;
    ftype type;
    int optional; /* INT / BOOL stored as train_opt_int, FLOAT as train_opt_float */
    size_t off;
    const char *def_s;   /* T_STR default */
    double def;          /* T_INT / T_FLOAT / T_BOOL default */
    double min, max;     /* inclusive range of numbers (and of T_INTS items) */
    int open;            /* 1: min is exclusive, 2: max is exclusive, 3: both */
    const char *choices; /* T_STR: "a|b|c", or NULL for any string */
    fcheck check;
    const char *help;
    fpolicy policy; /* P_USED unless a torchtitan-compatibility entry says otherwise */
} field;

#define BIG 1073741824.0 /* 2^30: sizes and counts */

/* The schema: every field of train_config, in printing order (config.c). */
extern const field g_fields[];
extern const int train_cfg_n_fields;
#define N_FIELDS train_cfg_n_fields

/* Index of section.key in g_fields, -1 when absent. */
int find_field(const char *section, const char *key);
/* Keeps p in c's pool (freed with c); returns p, or NULL (p freed) when out of memory. */
void *pool_keep(train_config *c, void *p);
/* Where field f's value lives in c. */
void *slot(const train_config *c, const field *f);
/* Whether f is a list (T_STRS, T_INTS, T_FLOATS), and its items' scalar type. */
int is_list_type(ftype t);
ftype item_type(ftype t);
/* Whether an optional field (or a string) holds no value. */
int is_unset(const field *fd, const void *s);
/* Field fd's value at s as TOML ("none" when unset), cut to n bytes: for messages. */
void value_text(const field *fd, const void *s, char *out, size_t n);
/* The same whole, malloc'ed (NULL when out of memory): for comparing two values. */
char *value_text_dup(const field *fd, const void *s);
/* "FILE:LINE:COL: section.key" (or the command-line option) for messages. */
void describe(const field *f, const char *where, int line, int col, char *out, size_t n);
/* A [kernels] override's implementation name: 0, or -1 with the reason in why. */
int check_kernel_impl(const char *s, char *why, size_t n);
/* The flags `titan train` had before job configs, each an alias of config fields (config.c).
 * A flag listed on several rows sets each of them; `value` NULL takes the argument. */
enum { ALIAS_FIELD, ALIAS_SET, ALIAS_GRAD_ACCUM };
typedef struct {
    const char *flag, *field, *value;
    int kind;
} train_cfg_alias;
extern const train_cfg_alias g_aliases[];
extern const int train_cfg_n_aliases;
#define N_ALIASES train_cfg_n_aliases
/* Whether alias flag takes an argument. */
int alias_takes_value(const char *flag);
/* "a, b" of a field's choices "a|b|!c" (refused = 0: those titan accepts), or "c" (refused =
 * 1: torchtitan's values marked '!', which titan refuses by name). */
void choices_list(const char *choices, int refused, char *out, size_t n);
/* A number field's range for messages and help: "in [lo, hi]" (open ends as "(" / ")"),
 * or ">= lo" when unbounded above. */
void range_text(const field *f, char *out, size_t n);
/* The config.json the model is built from ("" = the flavor; translate.c). */
const char *model_config_path(const train_config *c);

/* Keeps the nearest candidate seen so far. */
typedef struct {
    const char *word;
    char best[128];
    int dist;
} nearest;
void consider(nearest *n, const char *cand);
/* The valid field to suggest for section.key (a typo away, or the same key in another
 * section), or -1. */
int suggest_field(const char *section, const char *key);
/* "a string", "an integer", ... for messages. */
const char *type_name(const field *f);
/* The [[optimizer.param_groups]] of a parsed file (param_groups.c) into c (replacing any
 * earlier file's), checked; marks the tables it read in handled[doc->n_tables]. */
int train_param_groups_load(train_config *c, const base_toml_doc *doc, unsigned char *handled,
                            base_err *err);
/* Whether f is one of [optimizer]'s own hyperparameters (name, lr, beta1, beta2, eps,
 * weight_decay), which each [[optimizer.param_groups]] entry carries instead. */
int train_param_groups_replace(const field *f);
/* DistMuon's adjust_lr_fn name of an OPTIM_MUON_* value ("original", ...) (param_groups.c). */
const char *train_muon_adjust_name(int adjust);
/* Checks and stores a value for field fi; errors start with the value's origin. */
int assign(train_config *c, int fi, base_toml_value *v, const char *where, int line, int col,
           base_err *err);
/* The unknown names of one file, gathered so one error lists them all. */
typedef struct {
    char text[sizeof(((base_err *)0)->msg) - 64];
    int n, shown;
} unknowns;
void unknown_add(unknowns *u, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
