/* A strict parser for the TOML subset job configs use (see base.h). The input is hostile:
 * it is checked to be UTF-8 without NUL bytes, every read is bounds-checked against `end`,
 * sizes are capped, and every error names file:line:column (columns count bytes, from 1). */
#include "base/base.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Caps that keep a hostile file from costing more than a job config ever needs (table and
 * key lookups are linear scans). */
#define TOML_MAX_TABLES 1024
#define TOML_MAX_KEYS 8192
#define TOML_MAX_ITEMS 65536
#define TOML_MAX_DEPTH 8 /* nested arrays */
#define TOML_MAX_PARTS 8 /* key path components: a.b.c */

/* How a table came to exist: as the parent of another, by a [header], by dotted keys, as an
 * array of tables' container (its elements are tables "name[i]", each made by a [[header]]),
 * or as an inline table (closed: nothing adds to it afterwards). */
enum { DEF_IMPLICIT, DEF_HEADER, DEF_DOTTED, DEF_AOT, DEF_INLINE };

typedef struct {
    const char *p, *end, *line_start, *file;
    int line;
    int header; /* index of the table the last [header] opened (0 = root) */
    int n_keys, n_items;
    base_toml_doc *doc;
    base_err *err;
} parser;

static int col(const parser *t) {
    return (int)(t->p - t->line_start) + 1;
}

static int fail_at(const parser *t, int line, int c, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail_at(const parser *t, int line, int c, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return base_fail(t->err, "%s:%d:%d: %s", t->file, line, c, msg);
}
#define FAIL(t, ...) fail_at(t, (t)->line, col(t), __VA_ARGS__)
#define UNSUPPORTED " is not supported by titan's TOML subset"

const char *base_toml_type_name(base_toml_type type) {
    static const char *names[] = {"a string", "an integer", "a float", "a boolean", "an array"};
    return (unsigned)type < 5 ? names[type] : "?";
}

/* ---- the DOM ---------------------------------------------------------------------- */

static void value_free(base_toml_value *v) {
    free(v->s);
    for (int i = 0; i < v->n_items; i++) value_free(&v->items[i]);
    free(v->items);
    memset(v, 0, sizeof *v);
}

void base_toml_free(base_toml_doc *doc) {
    for (int i = 0; i < doc->n_tables; i++) {
        base_toml_table *tb = &doc->tables[i];
        for (int k = 0; k < tb->n_kv; k++) {
            free(tb->kv[k].key);
            value_free(&tb->kv[k].val);
        }
        free(tb->kv);
        free(tb->name);
    }
    free(doc->tables);
    memset(doc, 0, sizeof *doc);
}

static int find_table(const base_toml_doc *d, const char *name) {
    for (int i = 0; i < d->n_tables; i++)
        if (!strcmp(d->tables[i].name, name)) return i;
    return -1;
}

static int find_key(const base_toml_table *tb, const char *key) {
    for (int k = 0; k < tb->n_kv; k++)
        if (!strcmp(tb->kv[k].key, key)) return k;
    return -1;
}

/* "a.b" + "c" -> "a.b.c" (malloc'ed); the root table's name is "". */
static char *join(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    char *s = malloc(la + lb + 2);
    if (!s) return NULL;
    memcpy(s, a, la);
    if (la) s[la++] = '.';
    memcpy(s + la, b, lb + 1);
    return s;
}

static int add_table(parser *t, char *name, int line, int c, int how) {
    base_toml_doc *d = t->doc;
    if (d->n_tables >= TOML_MAX_TABLES) {
        free(name);
        return fail_at(t, line, c, "more than %d tables", TOML_MAX_TABLES);
    }
    if (d->n_tables == d->cap) {
        int cap = d->cap ? d->cap * 2 : 16;
        base_toml_table *nt = realloc(d->tables, sizeof *nt * (size_t)cap);
        if (!nt) {
            free(name);
            return FAIL(t, "out of memory");
        }
        d->tables = nt;
        d->cap = cap;
    }
    base_toml_table *tb = &d->tables[d->n_tables];
    memset(tb, 0, sizeof *tb);
    tb->name = name;
    tb->line = line;
    tb->col = c;
    tb->defined_by = how;
    tb->owner = t->header;
    tb->n_elems = 0;
    return d->n_tables++;
}

/* Is `name` (a dotted path) already a key holding a value? Then it cannot be a table. */
static int is_value(const base_toml_doc *d, const char *name, int *line) {
    const char *dot = strrchr(name, '.');
    char *parent = strndup(name, dot ? (size_t)(dot - name) : 0);
    const int ti = parent ? find_table(d, parent) : -1;
    const int k = ti >= 0 ? find_key(&d->tables[ti], dot ? dot + 1 : name) : -1;
    free(parent);
    if (k >= 0) *line = d->tables[ti].kv[k].line;
    return k >= 0;
}

/* "a.b" and 3 -> "a.b[3]" (malloc'ed): element 3 of the array of tables a.b. */
static char *element_name(const char *aot, int i) {
    const size_t n = strlen(aot) + 16;
    char *s = malloc(n);
    if (s) snprintf(s, n, "%s[%d]", aot, i);
    return s;
}

/* Makes sure the table `name` exists, creating it and its parents as `how`; applies TOML's
 * rules: a table is defined once, by a header, by dotted keys in one section or inline, and a
 * key is a value or a table, never both. A path through an array of tables goes into its
 * last element ([[a]] then [a.b]: b in that a). how DEF_IMPLICIT: every part is a parent (a
 * [[header]]'s path before its last part). Returns its index. */
static int open_table(parser *t, char **parts, int n, const char *base, int how, int line, int c) {
    char *name = NULL;
    int idx = find_table(t->doc, base);
    for (int i = 0; i < n; i++) {
        char *next = join(name ? name : base, parts[i]);
        free(name);
        if (!(name = next)) return FAIL(t, "out of memory");
        const int last = i == n - 1 && how != DEF_IMPLICIT;
        int vline;
        if (is_value(t->doc, name, &vline)) {
            fail_at(t, line, c, "'%.200s' already has a value (line %d); it cannot also be a table",
                    name, vline);
            free(name);
            return -1;
        }
        idx = find_table(t->doc, name);
        if (idx >= 0 && t->doc->tables[idx].defined_by == DEF_AOT) {
            const base_toml_table *tb = &t->doc->tables[idx];
            if (last || how == DEF_DOTTED) {
                fail_at(t, line, c,
                        how == DEF_HEADER ? "table [%.200s] is an array of tables (line %d): "
                                            "[[%.200s]] adds an element to it"
                                          : "'%.200s' is an array of tables (line %d); %.200s "
                                            "cannot add to it",
                        name, tb->line, how == DEF_HEADER ? name : "a dotted key");
                free(name);
                return -1;
            }
            next = element_name(name, tb->n_elems - 1);
            free(name);
            if (!(name = next)) return FAIL(t, "out of memory");
            idx = find_table(t->doc, name);
            continue;
        }
        if (idx >= 0) {
            base_toml_table *tb = &t->doc->tables[idx];
            const int mine = tb->defined_by == DEF_INLINE ? 1
                             : how == DEF_HEADER          ? last && tb->defined_by != DEF_IMPLICIT
                             : how == DEF_IMPLICIT
                                 ? 0
                                 : tb->defined_by != DEF_DOTTED || tb->owner != t->header;
            if (mine) {
                fail_at(t, line, c,
                        tb->defined_by == DEF_INLINE
                            ? "table %.200s was defined inline (line %d); nothing can add to it"
                        : how == DEF_HEADER && tb->defined_by == DEF_HEADER
                            ? "table [%.200s] is defined twice (first at line %d)"
                        : how == DEF_HEADER
                            ? "table [%.200s] was already defined by dotted keys (line %d)"
                            : "dotted keys cannot add to table [%.200s] (defined at line %d) "
                              "from another section",
                        name, tb->line);
                free(name);
                return -1;
            }
            if (how == DEF_HEADER && last) {
                tb->defined_by = DEF_HEADER;
                tb->line = line;
                tb->col = c;
            }
            continue;
        }
        char *copy = strdup(name);
        if (!copy) {
            free(name);
            return FAIL(t, "out of memory");
        }
        idx = add_table(t, copy, line, c,
                        how == DEF_IMPLICIT || (how == DEF_HEADER && !last) ? DEF_IMPLICIT
                        : how == DEF_INLINE && !last                        ? DEF_DOTTED
                                                                            : how);
        if (idx < 0) {
            free(name);
            return -1;
        }
    }
    free(name);
    return idx;
}

/* ---- lexing ----------------------------------------------------------------------- */

static void skip_ws(parser *t) {
    while (t->p < t->end && (*t->p == ' ' || *t->p == '\t')) t->p++;
}

static int at_eol(const parser *t) {
    return t->p >= t->end || *t->p == '\n' || *t->p == '\r';
}

/* Consumes one newline ("\n" or "\r\n"); a lone CR is an error. */
static int newline(parser *t) {
    if (t->p >= t->end) return 0;
    if (*t->p == '\r') {
        if (t->p + 1 >= t->end || t->p[1] != '\n')
            return FAIL(t, "carriage return without newline");
        t->p++;
    }
    t->p++;
    t->line++;
    t->line_start = t->p;
    return 0;
}

static int is_control(unsigned char ch) {
    return (ch < 0x20 && ch != '\t') || ch == 0x7f;
}

static int comment(parser *t) {
    for (t->p++; !at_eol(t); t->p++)
        if (is_control((unsigned char)*t->p))
            return FAIL(t, "control character 0x%02x in a comment", (unsigned char)*t->p);
    return 0;
}

/* After a value or header: spaces, an optional comment, then the end of the line. */
static int end_of_line(parser *t, const char *after) {
    skip_ws(t);
    if (t->p < t->end && *t->p == '#' && comment(t)) return -1;
    if (!at_eol(t))
        return FAIL(t, "unexpected '%c' after %s; expected the end of the line", *t->p, after);
    return newline(t);
}

/* Spaces, newlines and comments inside an array. */
static int skip_blank(parser *t) {
    for (;;) {
        skip_ws(t);
        if (t->p >= t->end) return 0;
        if (*t->p == '#') {
            if (comment(t)) return -1;
        } else if (*t->p == '\n' || *t->p == '\r') {
            if (newline(t)) return -1;
        } else {
            return 0;
        }
    }
}

static int put_utf8(base_strbuf *b, uint32_t cp) {
    char u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xc0 | cp >> 6);
        u[1] = (char)(0x80 | (cp & 0x3f));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xe0 | cp >> 12);
        u[1] = (char)(0x80 | (cp >> 6 & 0x3f));
        u[2] = (char)(0x80 | (cp & 0x3f));
        n = 3;
    } else {
        u[0] = (char)(0xf0 | cp >> 18);
        u[1] = (char)(0x80 | (cp >> 12 & 0x3f));
        u[2] = (char)(0x80 | (cp >> 6 & 0x3f));
        u[3] = (char)(0x80 | (cp & 0x3f));
        n = 4;
    }
    return base_strbuf_put(b, u, n);
}

/* A single-line basic ("...", escapes) or literal ('...') string; t->p is on the quote.
 * *out is malloc'ed. */
static int string(parser *t, char **out) {
    const char q = *t->p;
    if (t->end - t->p >= 3 && t->p[1] == q && t->p[2] == q)
        return FAIL(t, "multi-line strings (%c%c%c)" UNSUPPORTED, q, q, q);
    t->p++;
    base_strbuf b = {0};
    if (base_strbuf_put(&b, "", 0)) return FAIL(t, "out of memory");
    for (;;) {
        if (at_eol(t)) {
            free(b.s);
            return FAIL(t, "unterminated string (strings end on the line they start)");
        }
        const char *run = t->p;
        while (t->p < t->end && *t->p != q && !(q == '"' && *t->p == '\\') &&
               !is_control((unsigned char)*t->p))
            t->p++;
        if (base_strbuf_put(&b, run, (size_t)(t->p - run))) goto oom;
        if (t->p >= t->end || *t->p == '\n' || *t->p == '\r') continue; /* unterminated */
        if (*t->p == q) {
            t->p++;
            *out = b.s;
            return 0;
        }
        if (*t->p != '\\') {
            FAIL(t, "control character 0x%02x in a string (use an escape)", (unsigned char)*t->p);
            goto bad;
        }
        const char e = t->p + 1 < t->end ? t->p[1] : 0;
        const char *simple = strchr("btnfr\"\\", e);
        if (e && simple) {
            static const char map[] = "\b\t\n\f\r\"\\";
            if (base_strbuf_put(&b, &map[simple - "btnfr\"\\"], 1)) goto oom;
            t->p += 2;
            continue;
        }
        if (e != 'u' && e != 'U') {
            FAIL(t,
                 "invalid escape '\\%c' (valid: \\b \\t \\n \\f \\r \\\" \\\\ \\uXXXX "
                 "\\UXXXXXXXX)",
                 e >= 0x20 && e < 0x7f ? e : '?');
            goto bad;
        }
        const int nd = e == 'u' ? 4 : 8;
        uint32_t cp = 0;
        for (int i = 0; i < nd; i++) {
            const char *h = t->p + 2 + i;
            const int d = h >= t->end              ? -1
                          : *h >= '0' && *h <= '9' ? *h - '0'
                          : *h >= 'a' && *h <= 'f' ? *h - 'a' + 10
                          : *h >= 'A' && *h <= 'F' ? *h - 'A' + 10
                                                   : -1;
            if (d < 0) {
                FAIL(t, "\\%c needs %d hex digits", e, nd);
                goto bad;
            }
            cp = cp << 4 | (uint32_t)d;
        }
        if (cp == 0 || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
            FAIL(t, "\\%c%0*X is %s", e, nd, cp,
                 cp == 0 ? "NUL, which titan's TOML subset does not support in strings"
                         : "not a Unicode scalar value");
            goto bad;
        }
        if (put_utf8(&b, cp)) goto oom;
        t->p += 2 + nd;
    }
oom:
    FAIL(t, "out of memory");
bad:
    free(b.s);
    return -1;
}

static int is_bare(char ch) {
    return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
           ch == '_' || ch == '-';
}

/* key = part ('.' part)*, part = bare | "basic" | 'literal'. Parts are malloc'ed.
 * A quoted part may contain '.' only as the last part of a key/value key (last_may_dot):
 * tables are named by their dotted paths, so a dot inside a table-path part would be
 * ambiguous; a final key part is stored whole (e.g. [kernels] "layers.*.rope" = "x"). '[' and
 * ']' never: an array of tables' elements are tables "a[i]". */
static int key_path(parser *t, char **parts, int *n, int last_may_dot) {
    *n = 0;
    int dot_line = 0, dot_col = 0, dot_part = -1;
    for (;;) {
        skip_ws(t);
        if (*n == TOML_MAX_PARTS) return FAIL(t, "key has more than %d parts", TOML_MAX_PARTS);
        char *part = NULL;
        const int c = col(t);
        if (t->p < t->end && (*t->p == '"' || *t->p == '\'')) {
            if (string(t, &part)) return -1;
            if (!part[0]) { /* "" is the root table's path: a key "" would collide with it */
                free(part);
                return fail_at(t, t->line, c, "empty quoted keys ('' or \"\")" UNSUPPORTED);
            }
            if (strpbrk(part, "[]")) { /* "a.b[0]" names an array of tables' element */
                free(part);
                return fail_at(t, t->line, c, "quoted keys containing '[' or ']'" UNSUPPORTED);
            }
            if (strchr(part, '.') && dot_part < 0) {
                dot_line = t->line;
                dot_col = c;
                dot_part = *n;
            }
        } else {
            const char *s = t->p;
            while (t->p < t->end && is_bare(*t->p)) t->p++;
            if (t->p == s) {
                if (t->p < t->end && (unsigned char)*t->p >= 0x20 && (unsigned char)*t->p < 0x7f)
                    return FAIL(t, "expected a key, got '%c' (bare keys use A-Z a-z 0-9 _ -)",
                                *t->p);
                return FAIL(t, "expected a key");
            }
            if (!(part = strndup(s, (size_t)(t->p - s)))) return FAIL(t, "out of memory");
        }
        parts[(*n)++] = part;
        skip_ws(t);
        if (t->p >= t->end || *t->p != '.') {
            if (dot_part >= 0 && (!last_may_dot || dot_part != *n - 1))
                return fail_at(
                    t, dot_line, dot_col,
                    "quoted keys containing '.' (except as the last part of a key)" UNSUPPORTED);
            return 0;
        }
        t->p++;
    }
}

static void free_parts(char **parts, int n) {
    for (int i = 0; i < n; i++) free(parts[i]);
}

/* Digits with single '_' between digits. Appends the digits to out (without '_'). */
static int digits(parser *t, const char *s, const char *e, int base, char *out, size_t *n,
                  size_t cap, const char **stop) {
    const char *p = s;
    int prev_digit = 0;
    for (; p < e; p++) {
        const char ch = *p;
        int d = ch >= '0' && ch <= '9'   ? ch - '0'
                : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
                : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
                                         : 99;
        if (ch == '_') {
            if (!prev_digit || p + 1 >= e) return FAIL(t, "'_' must sit between two digits");
            prev_digit = 0;
            continue;
        }
        if (d >= base || (base == 10 && (ch == 'e' || ch == 'E'))) break;
        if (*n + 1 >= cap) return FAIL(t, "number is too long");
        out[(*n)++] = ch;
        prev_digit = 1;
    }
    if (p > s && p[-1] == '_') return FAIL(t, "'_' must sit between two digits");
    if (!prev_digit) return FAIL(t, "expected a digit");
    *stop = p;
    return 0;
}

/* Integers (decimal, 0x, 0o, 0b; '_' between digits; no leading zeros), floats (fraction
 * and/or exponent, inf, nan). Dates and times are recognised only to be refused. */
static int number(parser *t, base_toml_value *v) {
    const char *s = t->p, *e = s;
    while (e < t->end && (is_bare(*e) || *e == '.' || *e == '+' || *e == ':')) e++;
    const int c = col(t);
    const size_t len = (size_t)(e - s);
    if ((len >= 5 && s[4] == '-' && strspn(s, "0123456789") == 4) ||
        (len >= 3 && s[2] == ':' && strspn(s, "0123456789") == 2))
        return FAIL(t, "dates and times" UNSUPPORTED);
    v->type = BASE_TOML_FLOAT;
    const char *u = s + (*s == '+' || *s == '-');
    const int neg = *s == '-';
    if ((size_t)(e - u) == 3 && (!strncmp(u, "inf", 3) || !strncmp(u, "nan", 3))) {
        v->f = u[0] == 'i' ? (neg ? -INFINITY : INFINITY) : NAN;
        t->p = e;
        return 0;
    }
    char clean[128];
    size_t n = 0;
    const char *p;
    if (u == s && len > 2 && s[0] == '0' && strchr("xob", s[1])) {
        const int base = s[1] == 'x' ? 16 : s[1] == 'o' ? 8 : 2;
        t->p = s + 2;
        if (digits(t, s + 2, e, base, clean, &n, sizeof clean, &p)) return -1;
        if (p != e) return fail_at(t, t->line, c, "invalid base-%d integer", base);
        clean[n] = 0;
        errno = 0;
        unsigned long long x = strtoull(clean, NULL, base);
        if (errno || x > INT64_MAX)
            return fail_at(t, t->line, c, "integer does not fit in 64 bits");
        v->type = BASE_TOML_INT;
        v->i = (int64_t)x;
        t->p = e;
        return 0;
    }
    if (neg) clean[n++] = '-';
    t->p = u;
    if (digits(t, u, e, 10, clean, &n, sizeof clean, &p)) return -1;
    if (u[0] == '0' && p - u > 1) return fail_at(t, t->line, c, "leading zeros are not allowed");
    int is_float = 0;
    if (p < e && *p == '.') {
        clean[n++] = '.';
        t->p = p + 1;
        if (digits(t, p + 1, e, 10, clean, &n, sizeof clean, &p)) return -1;
        is_float = 1;
    }
    if (p < e && (*p == 'e' || *p == 'E')) {
        clean[n++] = 'e';
        p++;
        if (p < e && (*p == '+' || *p == '-')) clean[n++] = *p++;
        t->p = p;
        if (digits(t, p, e, 10, clean, &n, sizeof clean, &p)) return -1;
        is_float = 1;
    }
    if (p != e) {
        t->p = p;
        return FAIL(t, "invalid number");
    }
    clean[n] = 0;
    errno = 0;
    char *end;
    if (is_float) {
        v->f = strtod(clean, &end);
        if (errno == ERANGE && isinf(v->f)) return fail_at(t, t->line, c, "float is out of range");
    } else {
        long long x = strtoll(clean, &end, 10);
        if (errno) return fail_at(t, t->line, c, "integer does not fit in 64 bits");
        v->type = BASE_TOML_INT;
        v->i = x;
    }
    t->p = e;
    return 0;
}

static int value(parser *t, base_toml_value *v, int depth);

/* depth: of the arrays around this one (0 for a key's value). */
static int array(parser *t, base_toml_value *v, int depth) {
    v->type = BASE_TOML_ARRAY;
    int cap = 0;
    t->p++;
    for (;;) {
        if (skip_blank(t)) return -1;
        if (t->p >= t->end) return FAIL(t, "unterminated array");
        if (*t->p == ']') break;
        if (++t->n_items > TOML_MAX_ITEMS)
            return FAIL(t, "more than %d array items", TOML_MAX_ITEMS);
        if (v->n_items == cap) {
            cap = cap ? cap * 2 : 8;
            base_toml_value *ni = realloc(v->items, sizeof *ni * (size_t)cap);
            if (!ni) return FAIL(t, "out of memory");
            v->items = ni;
        }
        base_toml_value *it = &v->items[v->n_items];
        memset(it, 0, sizeof *it);
        v->n_items++;
        if (value(t, it, depth + 1)) return -1;
        if (skip_blank(t)) return -1;
        if (t->p < t->end && *t->p == ',') {
            t->p++;
            continue;
        }
        if (t->p < t->end && *t->p == ']') break;
        return t->p >= t->end ? FAIL(t, "unterminated array")
                              : FAIL(t, "expected ',' or ']' in an array");
    }
    t->p++;
    return 0;
}

static int word(const parser *t, const char *w) {
    size_t n = strlen(w);
    return (size_t)(t->end - t->p) >= n && !strncmp(t->p, w, n) &&
           (t->p + n == t->end || !is_bare(t->p[n]));
}

/* depth: arrays around the value; nesting is capped (recursion on hostile input). */
static int value(parser *t, base_toml_value *v, int depth) {
    v->line = t->line;
    v->col = col(t);
    if (t->p >= t->end || at_eol(t)) return FAIL(t, "expected a value");
    const char ch = *t->p;
    if (ch == '"' || ch == '\'') {
        v->type = BASE_TOML_STRING;
        return string(t, &v->s);
    }
    if (word(t, "true") || word(t, "false")) {
        v->type = BASE_TOML_BOOL;
        v->i = ch == 't';
        t->p += v->i ? 4 : 5;
        return 0;
    }
    if (ch == '[') {
        if (depth >= TOML_MAX_DEPTH)
            return FAIL(t, "arrays nested more than %d deep", TOML_MAX_DEPTH);
        return array(t, v, depth);
    }
    if (ch == '{') /* a key's inline table is key_value's */
        return FAIL(t, "inline tables ({...}) inside arrays or inline tables" UNSUPPORTED);
    if ((ch >= '0' && ch <= '9') || ch == '+' || ch == '-' || word(t, "inf") || word(t, "nan"))
        return number(t, v);
    return FAIL(t, "expected a value (a quoted string, number, true/false or [array])");
}

size_t base_utf8_prefix(const char *text, size_t n) {
    const unsigned char *s = (const unsigned char *)text, *e = s + n;
    for (const unsigned char *p = s; p < e;) {
        if (*p == 0) return (size_t)(p - s);
        if (*p < 0x80) {
            p++;
            continue;
        }
        const int k = *p >= 0xf0 && *p <= 0xf4  ? 4
                      : *p >= 0xe0 && *p < 0xf0 ? 3
                      : *p >= 0xc2 && *p < 0xe0 ? 2
                                                : 0;
        uint32_t cp = k == 4 ? *p & 7u : k == 3 ? *p & 15u : *p & 31u;
        int ok = k > 0 && e - p >= k;
        for (int i = 1; ok && i < k; i++) {
            ok = (p[i] & 0xc0) == 0x80;
            cp = cp << 6 | (p[i] & 0x3fu);
        }
        if (ok)
            ok = !(k == 3 && cp < 0x800) && !(k == 4 && (cp < 0x10000 || cp > 0x10ffff)) &&
                 !(cp >= 0xd800 && cp <= 0xdfff);
        if (!ok) return (size_t)(p - s);
        p += k;
    }
    return n;
}

/* Rejects NUL bytes and invalid UTF-8 (overlong forms, surrogates, > U+10FFFF) up front,
 * so the rest of the parser can treat the text as C strings of valid UTF-8. */
static int check_utf8(parser *t) {
    const size_t n = (size_t)(t->end - t->p), bad = base_utf8_prefix(t->p, n);
    if (bad == n) return 0;
    int line = 1;
    const char *ls = t->p;
    for (const char *p = t->p; p < t->p + bad; p++)
        if (*p == '\n') line++, ls = p + 1;
    return fail_at(t, line, (int)(t->p + bad - ls) + 1,
                   t->p[bad] ? "invalid UTF-8" : "NUL byte in the file");
}

/* Appends key = *v to table ti, taking both (v is left zeroed) or neither. */
static int add_kv(parser *t, int ti, char *key, int line, int c, base_toml_value *v) {
    base_toml_table *tb = &t->doc->tables[ti];
    if (++t->n_keys > TOML_MAX_KEYS) return fail_at(t, line, c, "more than %d keys", TOML_MAX_KEYS);
    if (tb->n_kv == tb->cap_kv) {
        int cap = tb->cap_kv ? tb->cap_kv * 2 : 8;
        base_toml_kv *nk = realloc(tb->kv, sizeof *nk * (size_t)cap);
        if (!nk) return FAIL(t, "out of memory");
        tb->kv = nk;
        tb->cap_kv = cap;
    }
    tb->kv[tb->n_kv++] = (base_toml_kv){key, line, c, *v};
    memset(v, 0, sizeof *v);
    return 0;
}

/* Is `key` already in table ti, as a value or as a table? Then it is said, as defined twice. */
static int defined_twice(parser *t, int ti, const char *key, int line, int c) {
    const base_toml_table *tb = &t->doc->tables[ti];
    char *full = join(tb->name, key);
    if (!full) return FAIL(t, "out of memory");
    const int k = find_key(tb, key), tab = find_table(t->doc, full);
    if (k >= 0 || tab >= 0)
        fail_at(t, line, c, "'%.200s' is defined twice (first at line %d)", full,
                k >= 0 ? tb->kv[k].line : t->doc->tables[tab].line);
    free(full);
    return k >= 0 || tab >= 0;
}

/* The rest of `key = {a = 1, b = "x"}` after the key, on one line (TOML 1.0): the table
 * `name` (just made) gets the pairs. Its keys are single parts and its values those of the
 * subset (arrays may span lines; no inline table inside). */
static int inline_table(parser *t, int ti) {
    t->p++; /* '{' */
    skip_ws(t);
    if (t->p < t->end && *t->p == '}') {
        t->p++;
        return 0;
    }
    for (;;) {
        char *parts[TOML_MAX_PARTS];
        int n;
        const int line = t->line, c = col(t);
        if (at_eol(t)) return FAIL(t, "an inline table must close ('}') on the line it opens");
        if (key_path(t, parts, &n, 1)) {
            free_parts(parts, n);
            return -1;
        }
        base_toml_value v = {0};
        int rc = -1;
        if (n > 1) {
            fail_at(t, line, c, "dotted keys inside inline tables" UNSUPPORTED);
        } else if (t->p >= t->end || *t->p != '=') {
            FAIL(t, "expected '=' after the key");
        } else {
            t->p++;
            skip_ws(t);
            if (!value(t, &v, 0) && !defined_twice(t, ti, parts[0], line, c) &&
                !add_kv(t, ti, parts[0], line, c, &v)) {
                parts[0] = NULL; /* the table's now */
                rc = 0;
            }
        }
        value_free(&v);
        free_parts(parts, n);
        if (rc) return -1;
        skip_ws(t);
        if (t->p < t->end && *t->p == '}') {
            t->p++;
            return 0;
        }
        if (t->p >= t->end || *t->p != ',')
            return at_eol(t) ? FAIL(t, "an inline table must close ('}') on the line it opens")
                             : FAIL(t, "expected ',' or '}' in an inline table");
        t->p++;
        skip_ws(t);
        if (t->p < t->end && *t->p == '}')
            return FAIL(t, "a trailing ',' in an inline table is not TOML");
    }
}

/* One `key = value` line: the value lands in the table the key's dotted prefix names; an
 * inline table `key = {...}` is the table the whole key names. */
static int key_value(parser *t) {
    char *parts[TOML_MAX_PARTS];
    int n;
    const int line = t->line, c = col(t);
    if (key_path(t, parts, &n, 1)) {
        free_parts(parts, n);
        return -1;
    }
    int rc = -1, ti = t->header;
    base_toml_value v = {0};
    if (t->p >= t->end || *t->p != '=') {
        if (at_eol(t))
            FAIL(t, "expected '=' after the key");
        else
            FAIL(t, "expected '=' after the key, got '%c'", *t->p);
        goto out;
    }
    t->p++;
    skip_ws(t);
    const int is_inline = t->p < t->end && *t->p == '{';
    if (!is_inline && value(t, &v, 0)) goto out;
    if (n > 1 &&
        (ti = open_table(t, parts, n - 1, t->doc->tables[t->header].name, DEF_DOTTED, line, c)) < 0)
        goto out;
    if (defined_twice(t, ti, parts[n - 1], line, c)) goto out;
    if (is_inline && strchr(parts[n - 1], '.')) { /* the key names a table: as in a path */
        fail_at(t, line, c,
                "an inline table's key containing '.' in quotes (a table path)" UNSUPPORTED);
        goto out;
    }
    if (is_inline) {
        const int it =
            open_table(t, parts + n - 1, 1, t->doc->tables[ti].name, DEF_INLINE, line, c);
        if (it < 0 || inline_table(t, it)) goto out;
    } else if (add_kv(t, ti, parts[n - 1], line, c, &v)) {
        goto out;
    } else {
        parts[--n] = NULL;
    }
    rc = end_of_line(t, is_inline ? "an inline table" : "a value");
out:
    value_free(&v);
    free_parts(parts, n);
    return rc;
}

/* [a.b] opens table a.b; [[a.b]] adds an element "a.b[i]" to the array of tables a.b. */
static int header(parser *t) {
    const int line = t->line, c = col(t);
    const int aot = t->p + 1 < t->end && t->p[1] == '[';
    t->p += 1 + aot;
    char *parts[TOML_MAX_PARTS];
    int n;
    int rc = key_path(t, parts, &n, 0);
    if (!rc && (t->end - t->p < 1 + aot || t->p[0] != ']' || (aot && t->p[1] != ']')))
        rc =
            FAIL(t, aot ? "expected ']]' to close the header" : "expected ']' to close the header");
    if (!rc) {
        t->p += 1 + aot;
        rc = end_of_line(t, "a table header");
    }
    int ti = -1;
    if (!rc && !aot && (ti = open_table(t, parts, n, "", DEF_HEADER, line, c)) < 0) rc = -1;
    if (!rc && aot) {
        /* the container: made on the first [[a.b]], then each element after the last */
        const int pi = n > 1 ? open_table(t, parts, n - 1, "", DEF_IMPLICIT, line, c) : 0;
        char *name = pi < 0 ? NULL : join(t->doc->tables[pi].name, parts[n - 1]), *elem = NULL;
        int ci = name ? find_table(t->doc, name) : -1, vline;
        if (pi < 0)
            rc = -1;
        else if (!name)
            rc = FAIL(t, "out of memory");
        else if (is_value(t->doc, name, &vline))
            rc = fail_at(t, line, c, "'%.200s' already has a value (line %d)", name, vline);
        else if (ci >= 0 && t->doc->tables[ci].defined_by != DEF_AOT)
            rc = fail_at(t, line, c, "[[%.200s]]: '%.200s' is already a table (line %d)", name,
                         name, t->doc->tables[ci].line);
        else if (ci < 0) {
            ci = add_table(t, name, line, c, DEF_AOT); /* takes the name, or frees it */
            name = NULL;
            if (ci < 0) rc = -1;
        }
        if (!rc && !(elem = element_name(t->doc->tables[ci].name, t->doc->tables[ci].n_elems)))
            rc = FAIL(t, "out of memory");
        if (!rc && (ti = add_table(t, elem, line, c, DEF_HEADER)) < 0) rc = -1;
        if (!rc) t->doc->tables[ci].n_elems++;
        free(name);
    }
    free_parts(parts, n);
    if (!rc) t->header = ti;
    return rc;
}

int base_toml_parse(const char *text, size_t len, const char *file, base_toml_doc *doc,
                    base_err *err) {
    memset(doc, 0, sizeof *doc);
    parser t = {text, text + len, text, file ? file : "<toml>", 1, 0, 0, 0, doc, err};
    if (check_utf8(&t)) return -1;
    char *root = strdup("");
    if (!root || add_table(&t, root, 1, 1, DEF_HEADER) < 0) {
        base_toml_free(doc);
        return base_fail(err, "%s: out of memory", t.file);
    }
    if (len >= 3 && !memcmp(text, "\xef\xbb\xbf", 3)) t.p = t.line_start = text + 3; /* BOM */
    while (t.p < t.end) {
        skip_ws(&t);
        int rc = 0;
        if (t.p >= t.end)
            break;
        else if (*t.p == '#')
            rc = comment(&t) || newline(&t);
        else if (*t.p == '\n' || *t.p == '\r')
            rc = newline(&t);
        else if (*t.p == '[')
            rc = header(&t);
        else
            rc = key_value(&t);
        if (rc) {
            base_toml_free(doc);
            return -1;
        }
    }
    return 0;
}

int base_toml_parse_value(const char *text, base_toml_value *v, base_err *err) {
    memset(v, 0, sizeof *v);
    base_toml_doc doc = {0};
    parser t = {text, text + strlen(text), text, "value", 1, 0, 0, 0, &doc, err};
    if (check_utf8(&t)) return -1;
    skip_ws(&t);
    if (value(&t, v, 0)) {
        value_free(v);
        return -1;
    }
    skip_ws(&t);
    if (t.p < t.end) {
        FAIL(&t, "unexpected '%c' after the value", *t.p);
        value_free(v);
        return -1;
    }
    return 0;
}

void base_toml_value_free(base_toml_value *v) {
    value_free(v);
}
