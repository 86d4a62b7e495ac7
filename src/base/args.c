/* base: the command-line option helpers every subcommand shares (base.h). */
#include <stdint.h>
#include <string.h>

#include "base.h"

const char *base_args_value(base_args *it) {
    if (it->i + 1 >= it->argc) {
        base_fail(it->err, "option %s needs a value", it->argv[it->i]);
        return NULL;
    }
    return it->argv[++it->i];
}

int base_args_int(base_args *it, int *out, int min) {
    const char *opt = it->argv[it->i], *v = base_args_value(it);
    int64_t x;
    if (!v) return -1;
    if (base_parse_i64(v, &x) || x < min || x > 1 << 30)
        return base_fail(it->err, "option %s: '%s' is not an integer in [%d, %d]", opt, v, min,
                         1 << 30);
    *out = (int)x;
    return 0;
}

int base_args_f64(base_args *it, double *out, double min, double max) {
    const char *opt = it->argv[it->i], *v = base_args_value(it);
    if (!v) return -1;
    if (base_parse_f64(v, out) || *out < min || *out > max)
        return base_fail(it->err, "option %s: '%s' is not a number in [%g, %g]", opt, v, min, max);
    return 0;
}

int base_args_is_help(const base_args *it) {
    const char *a = it->argv[it->i];
    return !strcmp(a, "--help") || !strcmp(a, "-h");
}
