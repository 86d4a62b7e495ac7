/* The TOML subset parser: the accepted subset with exact values, and one expected
 * "file:line:column: message" per malformed input (hostile inputs must fail cleanly). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

#include "check.h"

static const base_toml_value *get(const base_toml_doc *d, const char *table, const char *key) {
    for (int i = 0; i < d->n_tables; i++) {
        if (strcmp(d->tables[i].name, table)) continue;
        for (int k = 0; k < d->tables[i].n_kv; k++)
            if (!strcmp(d->tables[i].kv[k].key, key)) return &d->tables[i].kv[k].val;
    }
    return NULL;
}

static int table_at(const base_toml_doc *d, const char *name) {
    for (int i = 0; i < d->n_tables; i++)
        if (!strcmp(d->tables[i].name, name)) return i;
    return -1;
}

static void valid_subset(void) {
    const char *text = "\xef\xbb\xbf# a job config, after a byte order mark\n"
                       "top = 1 # root key\n"
                       "[job]\n"
                       "dump_folder = \"runs/a b\"  # comment\n"
                       "'quoted key' = 'C:\\no\\escapes'\n"
                       "\"esc\" = \"q\\\" bs\\\\ nl\\n tab\\t \\u00e9 \\U0001F600 \\b\\f\\r\"\n"
                       "utf8 = \"h\xc3\xa9llo \xe4\xb8\x96\"\n"
                       "\n"
                       "[ training ]\r\n"
                       "steps = 1_000_000\r\n"
                       "neg = -42\n"
                       "plus = +7\n"
                       "zero = 0\n"
                       "hex = 0xdead_BEEF\n"
                       "oct = 0o755\n"
                       "bin = 0b1010\n"
                       "big = 9223372036854775807\n"
                       "small = -9223372036854775808\n"
                       "lr = 3e-4\n"
                       "f1 = 1.5\n"
                       "f2 = -0.25e+2\n"
                       "f3 = 6.022_140E2_3\n"
                       "pinf = +inf\n"
                       "nnan = -nan\n"
                       "yes = true\n"
                       "no = false\n"
                       "empty = []\n"
                       "arr = [ \"a\", 'b' , # comment inside\n"
                       "  \"c\", ]\n"
                       "ints = [1,\n 2,\n\n 3]\n"
                       "[a.b]\n"
                       "x = 1\n"
                       "[a]\n"
                       "c.d = 2\n"
                       "c.e = 3\n"
                       "inl = { s = 'x', n = 2 , arr = [1,\n 2] } # inline\n"
                       "nil = {}\n"
                       "[[p.g]]\n"
                       "pattern = '\\.bias$'\n"
                       "kw = {lr = 1e-4}\n"
                       "[[p.g]]\n"
                       "kw.lr = 2e-4\n"
                       "[p.g.sub]\n"
                       "z = 5\n"
                       "[[p.g.deep]]\n"
                       "y = 6\n"
                       "[[p.g]]\n";
    base_toml_doc d;
    base_err err = {{0}};
    int rc = base_toml_parse(text, strlen(text), "t.toml", &d, &err);
    CHECK(rc == 0, "valid subset rejected: %s", err.msg);
    if (rc) return;
    const base_toml_value *v;
#define EXPECT_INT(tb, k, want)                                                                    \
    v = get(&d, tb, k);                                                                            \
    CHECK(v && v->type == BASE_TOML_INT && v->i == (want), "%s.%s", tb, k)
#define EXPECT_FLOAT(tb, k, want)                                                                  \
    v = get(&d, tb, k);                                                                            \
    CHECK(v && v->type == BASE_TOML_FLOAT && v->f == (want), "%s.%s = %.17g", tb, k, v ? v->f : 0)
#define EXPECT_STR(tb, k, want)                                                                    \
    v = get(&d, tb, k);                                                                            \
    CHECK(v && v->type == BASE_TOML_STRING && !strcmp(v->s, want), "%s.%s = '%s'", tb, k,          \
          v && v->s ? v->s : "?")
    EXPECT_INT("", "top", 1);
    EXPECT_STR("job", "dump_folder", "runs/a b");
    EXPECT_STR("job", "quoted key", "C:\\no\\escapes");
    EXPECT_STR("job", "esc", "q\" bs\\ nl\n tab\t \xc3\xa9 \xf0\x9f\x98\x80 \b\f\r");
    EXPECT_STR("job", "utf8", "h\xc3\xa9llo \xe4\xb8\x96");
    EXPECT_INT("training", "steps", 1000000);
    EXPECT_INT("training", "neg", -42);
    EXPECT_INT("training", "plus", 7);
    EXPECT_INT("training", "zero", 0);
    EXPECT_INT("training", "hex", 0xdeadbeefLL);
    EXPECT_INT("training", "oct", 0755);
    EXPECT_INT("training", "bin", 10);
    EXPECT_INT("training", "big", INT64_MAX);
    EXPECT_INT("training", "small", INT64_MIN);
    EXPECT_FLOAT("training", "lr", 3e-4);
    EXPECT_FLOAT("training", "f1", 1.5);
    EXPECT_FLOAT("training", "f2", -25.0);
    EXPECT_FLOAT("training", "f3", 6.022140e23);
    v = get(&d, "training", "pinf");
    CHECK(v && v->type == BASE_TOML_FLOAT && isinf(v->f) && v->f > 0, "+inf");
    v = get(&d, "training", "nnan");
    CHECK(v && v->type == BASE_TOML_FLOAT && isnan(v->f), "-nan");
    v = get(&d, "training", "yes");
    CHECK(v && v->type == BASE_TOML_BOOL && v->i == 1, "true");
    v = get(&d, "training", "no");
    CHECK(v && v->type == BASE_TOML_BOOL && v->i == 0, "false");
    v = get(&d, "training", "empty");
    CHECK(v && v->type == BASE_TOML_ARRAY && v->n_items == 0, "empty array");
    v = get(&d, "training", "arr");
    CHECK(v && v->type == BASE_TOML_ARRAY && v->n_items == 3 && !strcmp(v->items[2].s, "c") &&
              v->items[1].line == 28 && v->items[2].line == 29,
          "string array");
    v = get(&d, "training", "ints");
    CHECK(v && v->n_items == 3 && v->items[2].i == 3 && v->items[2].line == 33, "int array");
    EXPECT_INT("a.b", "x", 1);
    EXPECT_INT("a.c", "d", 2);
    EXPECT_INT("a.c", "e", 3);
    EXPECT_STR("a.inl", "s", "x");
    EXPECT_INT("a.inl", "n", 2);
    v = get(&d, "a.inl", "arr");
    CHECK(v && v->n_items == 2 && v->items[1].i == 2 && v->items[1].line == 40, "inline array");
    CHECK(table_at(&d, "a.nil") >= 0, "empty inline table");
    EXPECT_STR("p.g[0]", "pattern", "\\.bias$");
    EXPECT_FLOAT("p.g[0].kw", "lr", 1e-4);
    EXPECT_FLOAT("p.g[1].kw", "lr", 2e-4);
    EXPECT_INT("p.g[1].sub", "z", 5);
    EXPECT_INT("p.g[1].deep[0]", "y", 6);
    /* the container has no keys; the third element none either; nothing past it */
    const int pg = table_at(&d, "p.g");
    CHECK(pg >= 0 && d.tables[pg].n_kv == 0 && table_at(&d, "p.g[2]") >= 0 &&
              d.tables[table_at(&d, "p.g[2]")].n_kv == 0 && table_at(&d, "p.g[3]") < 0 &&
              table_at(&d, "p.g[1].deep[1]") < 0,
          "arrays of tables' elements");
    CHECK(table_at(&d, "p.g[0]") < table_at(&d, "p.g[1]") &&
              table_at(&d, "p.g[1]") < table_at(&d, "p.g[2]"),
          "elements in file order");
    v = get(&d, "training", "steps");
    CHECK(v && v->line == 10 && v->col == 9, "position of training.steps: %d:%d", v ? v->line : 0,
          v ? v->col : 0);
    base_toml_free(&d);

    /* A single value, as the command line passes them. */
    base_toml_value one;
    CHECK(base_toml_parse_value(" [\"x\", 'y'] ", &one, &err) == 0 && one.n_items == 2,
          "parse_value array: %s", err.msg);
    base_toml_value_free(&one);
    /* nested arrays (torchtitan's parallelism.module_fqns_per_model_part: list[list[str]]) */
    CHECK(base_toml_parse_value("[[\"a\", \"b\"], [], [\"c\"]]", &one, &err) == 0 &&
              one.n_items == 3 && one.items[0].type == BASE_TOML_ARRAY &&
              one.items[0].n_items == 2 && !strcmp(one.items[0].items[1].s, "b") &&
              one.items[1].n_items == 0 && !strcmp(one.items[2].items[0].s, "c"),
          "nested arrays: %s", err.msg);
    base_toml_value_free(&one);
    CHECK(base_toml_parse_value("1 2", &one, &err) != 0 && strstr(err.msg, "after the value"),
          "parse_value trailing junk: %s", err.msg);
}

/* Each malformed input and the start of the error it must give. */
static void malformed(void) {
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"a = \"\"\"x\"\"\"\n",
         "t.toml:1:5: multi-line strings (\"\"\") is not supported by titan's TOML subset"},
        {"a = '''x'''\n", "t.toml:1:5: multi-line strings (''')"},
        {"a = 1979-05-27\n", "t.toml:1:5: dates and times is not supported"},
        {"a = 07:32:00\n", "t.toml:1:5: dates and times"},
        /* inline tables: one line, single-part keys, no trailing comma, closed after */
        {"a = [{x = 1}]\n", "t.toml:1:6: inline tables ({...}) inside arrays or inline tables "
                            "is not supported"},
        {"a = {x = {y = 1}}\n", "t.toml:1:10: inline tables ({...}) inside arrays"},
        {"a = {x.y = 1}\n", "t.toml:1:6: dotted keys inside inline tables is not supported"},
        {"a = {x = 1,}\n", "t.toml:1:12: a trailing ',' in an inline table is not TOML"},
        {"a = {x = 1\n}\n", "t.toml:1:11: an inline table must close ('}') on the line"},
        {"a = {x = 1 y = 2}\n", "t.toml:1:12: expected ',' or '}' in an inline table"},
        {"a = {x = 1, x = 2}\n", "t.toml:1:13: 'a.x' is defined twice (first at line 1)"},
        {"a = {x = 1}\na.y = 2\n", "t.toml:2:1: table a was defined inline (line 1); nothing "
                                   "can add to it"},
        {"a = {x = 1}\n[a]\n", "t.toml:2:1: table a was defined inline"},
        {"a = {x = 1}\n[a.b]\n", "t.toml:2:1: table a was defined inline"},
        {"a = 1\na = {x = 1}\n", "t.toml:2:1: 'a' is defined twice (first at line 1)"},
        {"[a.b]\n[x]\na = {}\n[a]\nb = {y = 1}\n", "t.toml:5:1: 'a.b' is defined twice"},
        {"a = {x = 1} y\n", "t.toml:1:13: unexpected 'y' after an inline table"},
        /* arrays of tables */
        {"[[a]\n", "t.toml:1:4: expected ']]' to close the header"},
        {"[a]\n[[a]]\n", "t.toml:2:1: [[a]]: 'a' is already a table (line 1)"},
        {"[[a]]\n[a]\n", "t.toml:2:1: table [a] is an array of tables (line 1): [[a]] adds an "
                         "element to it"},
        {"a = 1\n[[a]]\n", "t.toml:2:1: 'a' already has a value (line 1)"},
        {"[[a.b]]\n[a]\nb = 1\n", "t.toml:3:1: 'a.b' is defined twice (first at line 1)"},
        {"[[a.b]]\n[a]\nb.c = 1\n", "t.toml:3:1: 'a.b' is an array of tables (line 1); a "
                                    "dotted key cannot add to it"},
        {"[[a]]\nx = 1\n[[a]]\nx = 1\nx = 2\n", "t.toml:5:1: 'a[1].x' is defined twice"},
        {"[[a]]\n[a.b]\n[[a]]\n[a.b]\n[a.b]\n", "t.toml:5:1: table [a[1].b] is defined twice"},
        {"[\"a[0]\"]\n", "t.toml:1:2: quoted keys containing '[' or ']' is not supported"},
        /* (a '[' names an element: "x[0]" = ... beside [[x]] would be two tables x[0]) */
        {"[a]\n\"b[0]\" = 1\n", "t.toml:2:1: quoted keys containing '[' or ']' is not supported"},
        {"\"x[0]\" = {c = 1}\n", "t.toml:1:1: quoted keys containing '[' or ']'"},
        /* an inline table's key is a table name: a quoted '.' would be a path */
        {"\"a.b\" = {c = 1}\n", "t.toml:1:1: an inline table's key containing '.' in quotes (a "
                                "table path) is not supported"},
        {"a = [[[[[[[[[1]]]]]]]]]\n", "t.toml:1:13: arrays nested more than 8 deep"},
        {"a = 1\na = 2\n", "t.toml:2:1: 'a' is defined twice (first at line 1)"},
        {"[x]\n[x]\n", "t.toml:2:1: table [x] is defined twice (first at line 1)"},
        {"[x]\na.b = 1\n[x.a]\n", "t.toml:3:1: table [x.a] was already defined by dotted keys"},
        {"[x.a]\n[x]\na.b = 1\n", "t.toml:3:1: dotted keys cannot add to table [x.a]"},
        {"a = 1\n[a]\n", "t.toml:2:1: 'a' already has a value (line 1)"},
        {"a = 1\na.b = 2\n", "t.toml:2:1: 'a' already has a value"},
        {"[x.y]\n[x]\ny = 1\n", "t.toml:3:1: 'x.y' is defined twice"},
        {"a = 01\n", "t.toml:1:5: leading zeros are not allowed"},
        {"a = 1__0\n", "t.toml:1:5: '_' must sit between two digits"},
        {"a = 1_\n", "t.toml:1:5: '_' must sit between two digits"},
        {"a = _1\n", "t.toml:1:5: expected a value"},
        {"a = 1.\n", "t.toml:1:7: expected a digit"},
        {"a = .5\n", "t.toml:1:5: expected a value"},
        {"a = 1e\n", "t.toml:1:7: expected a digit"},
        {"a = 9223372036854775808\n", "t.toml:1:5: integer does not fit in 64 bits"},
        {"a = 1e999\n", "t.toml:1:5: float is out of range"},
        {"a = 0xZZ\n", "t.toml:1:7: expected a digit"},
        {"a = 12abc\n", "t.toml:1:7: invalid number"},
        {"a = \"unterminated\n", "t.toml:1:18: unterminated string"},
        {"a = \"bad \\q escape\"\n", "t.toml:1:10: invalid escape '\\q'"},
        {"a = \"\\u12\"\n", "t.toml:1:6: \\u needs 4 hex digits"},
        {"a = \"\\uD800\"\n", "t.toml:1:6: \\uD800 is not a Unicode scalar value"},
        {"a = \"\\u0000\"\n", "t.toml:1:6: \\u0000 is NUL"},
        {"a = \"\\U00110000\"\n", "t.toml:1:6: \\U00110000 is not a Unicode scalar value"},
        {"a = \"tab\tok but \x01 not\"\n", "t.toml:1:17: control character 0x01 in a string"},
        {"a = bare\n", "t.toml:1:5: expected a value (a quoted string"},
        {"a = \n", "t.toml:1:5: expected a value"},
        {"a 1\n", "t.toml:1:3: expected '=' after the key, got '1'"},
        {"a\n", "t.toml:1:2: expected '=' after the key"},
        {"= 1\n", "t.toml:1:1: expected a key, got '='"},
        {"a = 1 2\n", "t.toml:1:7: unexpected '2' after a value"},
        {"[x] y\n", "t.toml:1:5: unexpected 'y' after a table header"},
        {"[x\n", "t.toml:1:3: expected ']' to close the header"},
        {"a = [1, 2\n", "t.toml:2:1: unterminated array"},
        {"a = [1 2]\n", "t.toml:1:8: expected ',' or ']' in an array"},
        {"a = 1\rb = 2\n", "t.toml:1:6: carriage return without newline"},
        {"a = 1 # \x7f\n", "t.toml:1:9: control character 0x7f in a comment"},
        {"a = \"\xc3\x28\"\n", "t.toml:1:6: invalid UTF-8"},
        {"a = \"\xed\xa0\x80\"\n", "t.toml:1:6: invalid UTF-8"}, /* surrogate */
        {"a = \"\xe0\x80\xaf\"\n", "t.toml:1:6: invalid UTF-8"}, /* overlong */
        {"a = \"\xf8\x88\x80\x80\"\n", "t.toml:1:6: invalid UTF-8"},
        {"\n\na = \"\xff\"\n", "t.toml:3:6: invalid UTF-8"},
        {"\"a.b\".c = 1\n", "t.toml:1:1: quoted keys containing '.' (except as the last part "
                            "of a key) is not supported"},
        {"[x.\"a.b\"]\n", "t.toml:1:4: quoted keys containing '.' (except as the last part"},
        {"a.b.c.d.e.f.g.h.i = 1\n", "t.toml:1:17: key has more than 8 parts"},
        /* valid TOML, but "" names the root table: said as unsupported, not "defined twice" */
        {"\"\" = 1\n", "t.toml:1:1: empty quoted keys ('' or \"\") is not supported"},
        {"[a]\nb.'' = 1\n", "t.toml:2:3: empty quoted keys ('' or \"\") is not supported"},
        {"[\"\"]\n", "t.toml:1:2: empty quoted keys ('' or \"\") is not supported"},
        {"a = truex\n", "t.toml:1:5: expected a value"},
        {"a = +0x10\n", "t.toml:1:7: invalid number"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        base_toml_doc d;
        base_err err = {{0}};
        int rc = base_toml_parse(cases[i].text, strlen(cases[i].text), "t.toml", &d, &err);
        CHECK(rc != 0, "case %zu accepted: %s", i, cases[i].text);
        if (rc == 0) {
            base_toml_free(&d);
            continue;
        }
        CHECK(!strncmp(err.msg, cases[i].want, strlen(cases[i].want)),
              "case %zu:\n  got  %s\n  want %s...", i, err.msg, cases[i].want);
        CHECK(d.n_tables == 0 && d.tables == NULL, "case %zu: doc not left empty", i);
    }
    /* A NUL byte inside the buffer (the length, not strlen, bounds the text). */
    base_toml_doc d;
    base_err err = {{0}};
    CHECK(base_toml_parse("a = 1\nb\0 = 2\n", 13, "t.toml", &d, &err) != 0 &&
              !strcmp(err.msg, "t.toml:2:2: NUL byte in the file"),
          "NUL byte: %s", err.msg);
}

/* Every prefix of a valid document, and single-byte corruptions of it, parse or fail
 * without touching memory they should not (run under ASan by `make asan`). */
static void truncations_and_flips(void) {
    const char *text = "[job]\ndump_folder = \"a\\u00e9\" # c\n[training]\nsteps = 1_0\n"
                       "lr = -3.5e-4\nxs = ['a', \"b\",\n]\nok = true\n[[g.h]]\nk = {a = 1, "
                       "b = [2]}\n[g.h.i]\n[[g.h]]\n";
    const size_t n = strlen(text);
    int ok = 0;
    for (size_t len = 0; len <= n; len++) {
        char *copy = malloc(len ? len : 1); /* exact size: reads past len trip ASan */
        memcpy(copy, text, len);
        base_toml_doc d;
        base_err err;
        if (base_toml_parse(copy, len, "t", &d, &err) == 0) {
            ok++;
            base_toml_free(&d);
        }
        free(copy);
    }
    CHECK(ok > 0, "no prefix parsed");
    const char flips[] = {'"', '\'', '[', ']',  '=', '\\', '\n',      '#',
                          '.', ',',  0,   '\r', '{', '}',  (char)0xc3};
    char *copy = malloc(n);
    for (size_t i = 0; i < n; i++) {
        for (size_t f = 0; f < sizeof flips; f++) {
            memcpy(copy, text, n);
            copy[i] = flips[f];
            base_toml_doc d;
            base_err err;
            if (base_toml_parse(copy, n, "t", &d, &err) == 0) base_toml_free(&d);
        }
    }
    free(copy);
}

int main(void) {
    valid_subset();
    malformed();
    truncations_and_flips();
    printf(failures ? "FAILED: %d checks\n" : "all checks passed\n", failures);
    return failures != 0;
}
