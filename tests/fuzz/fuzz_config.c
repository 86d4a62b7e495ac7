/* Fuzz target: a job config (`titan train --config FILE`): the TOML parser (base/toml.c) and
 * the config built from its document (train_config_load_text, the in-memory half of
 * train_config_load_file), then train_config_validate. An accepted config must print
 * (train_config_print, what --print-config and the run's saved config.toml write) as TOML
 * that loads back to a config printing the same text and validating the same way. See fuzz.h
 * for the contract. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "train/train.h"

#define NAME "fuzz.toml"

static void broken(const char *what, const char *detail) {
    fprintf(stderr, "fuzz_config: %s: %s\n", what, detail);
    abort();
}

/* c as train_config_print writes it (malloc'ed, NUL-terminated). */
static char *printed(const train_config *c) {
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    if (!m) broken("open_memstream", "failed");
    train_config_print(c, m);
    fclose(m);
    return buf;
}

int fuzz_target_run(const uint8_t *data, size_t size) {
    static int quiet;
    if (!quiet) { /* "set twice" and "no effect" notes are not findings */
        base_log_set_level(BASE_LOG_ERROR);
        quiet = 1;
    }
    base_err err;
    err.msg[0] = 0;
    train_config c;
    train_config_defaults(&c);
    if (train_config_load_text(&c, (const char *)data, size, NAME, &err) != 0) {
        if (!strstr(err.msg, NAME) && strcmp(err.msg, "out of memory") != 0)
            broken("rejection does not name the file", err.msg);
        train_config_free(&c);
        return 0;
    }
    const int valid = train_config_validate(&c, &err) == 0;
    if (!valid && !err.msg[0]) broken("validation failed without a message", "");
    char *text = printed(&c);
    train_config back;
    train_config_defaults(&back);
    if (train_config_load_text(&back, text, strlen(text), "printed.toml", &err) != 0) {
        fprintf(stderr, "%s\n", text);
        broken("the printed config does not load back", err.msg);
    }
    char *again = printed(&back);
    if (strcmp(text, again)) {
        fprintf(stderr, "first:\n%s\nreloaded:\n%s\n", text, again);
        broken("the printed config loads back to another config", "");
    }
    if ((train_config_validate(&back, &err) == 0) != valid)
        broken("the printed config validates differently", valid ? err.msg : "it passes now");
    free(again);
    free(text);
    train_config_free(&back);
    train_config_free(&c);
    return valid;
}

FUZZ_DEFINE_LIBFUZZER_ENTRY
