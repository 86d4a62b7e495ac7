/* Byte-level BPE tokenizer (see data.h). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "data/data.h"
#include "data/unicode_extra.h"

#include <jansson.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <utf8proc.h>

#define TOK_MAX_ID (1 << 24)
#define TOK_CACHE_MAX_ENTRIES (1 << 20)
#define TOK_CACHE_MAX_PIECE 256

static const char *GPT2_PATTERN =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* ---- string -> int32 hash map (open addressing, keys owned) ---- */
typedef struct {
    char *key;
    size_t klen;
    int32_t val;
} smap_slot;
typedef struct {
    smap_slot *slots;
    size_t cap, n;
} smap;

static uint64_t hash_bytes(const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

static int smap_grow(smap *m) {
    size_t nc = m->cap ? m->cap * 2 : 1024;
    smap_slot *ns = calloc(nc, sizeof *ns);
    if (!ns) return -1;
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->slots[i].key) continue;
        size_t j = hash_bytes(m->slots[i].key, m->slots[i].klen) & (nc - 1);
        while (ns[j].key) j = (j + 1) & (nc - 1);
        ns[j] = m->slots[i];
    }
    free(m->slots);
    m->slots = ns;
    m->cap = nc;
    return 0;
}

static smap_slot *smap_find(const smap *m, const char *k, size_t kl) {
    if (!m->cap) return NULL;
    size_t j = hash_bytes(k, kl) & (m->cap - 1);
    while (m->slots[j].key) {
        if (m->slots[j].klen == kl && memcmp(m->slots[j].key, k, kl) == 0) return &m->slots[j];
        j = (j + 1) & (m->cap - 1);
    }
    return NULL;
}

/* Inserts or overwrites. */
static int smap_put(smap *m, const char *k, size_t kl, int32_t v) {
    smap_slot *s = smap_find(m, k, kl);
    if (s) {
        s->val = v;
        return 0;
    }
    if ((m->n + 1) * 2 > m->cap && smap_grow(m)) return -1;
    size_t j = hash_bytes(k, kl) & (m->cap - 1);
    while (m->slots[j].key) j = (j + 1) & (m->cap - 1);
    char *key = malloc(kl + 1);
    if (!key) return -1;
    memcpy(key, k, kl);
    key[kl] = 0;
    m->slots[j] = (smap_slot){key, kl, v};
    m->n++;
    return 0;
}

static void smap_free(smap *m) {
    for (size_t i = 0; i < m->cap; i++) free(m->slots[i].key);
    free(m->slots);
    memset(m, 0, sizeof *m);
}

/* ---- (id, id) -> (rank, merged id) hash map ---- */
typedef struct {
    uint64_t key; /* (a << 32 | b) + 1; 0 = empty */
    int32_t rank, id;
} pmap_slot;
typedef struct {
    pmap_slot *slots;
    size_t cap, n;
} pmap;

static uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

static const pmap_slot *pmap_find(const pmap *m, int32_t a, int32_t b) {
    if (!m->cap) return NULL;
    uint64_t k = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
    size_t j = mix64(k) & (m->cap - 1);
    while (m->slots[j].key) {
        if (m->slots[j].key == k) return &m->slots[j];
        j = (j + 1) & (m->cap - 1);
    }
    return NULL;
}

/* Keeps the first (lowest) rank for a duplicate pair, like HF. */
static int pmap_put(pmap *m, int32_t a, int32_t b, int32_t rank, int32_t id) {
    if ((m->n + 1) * 2 > m->cap) {
        size_t nc = m->cap ? m->cap * 2 : 1024;
        pmap_slot *ns = calloc(nc, sizeof *ns);
        if (!ns) return -1;
        for (size_t i = 0; i < m->cap; i++) {
            if (!m->slots[i].key) continue;
            size_t j = mix64(m->slots[i].key) & (nc - 1);
            while (ns[j].key) j = (j + 1) & (nc - 1);
            ns[j] = m->slots[i];
        }
        free(m->slots);
        m->slots = ns;
        m->cap = nc;
    }
    uint64_t k = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
    size_t j = mix64(k) & (m->cap - 1);
    while (m->slots[j].key) {
        if (m->slots[j].key == k) return 0;
        j = (j + 1) & (m->cap - 1);
    }
    m->slots[j] = (pmap_slot){k, rank, id};
    m->n++;
    return 0;
}

/* ---- tokenizer ---- */
typedef struct {
    char *content;
    size_t len;
    int32_t id;
    int special;
} added_tok;

struct data_tok {
    smap vocab;    /* token -> id (model vocab) */
    pmap merges;   /* (id, id) -> rank, merged id */
    char **id_tok; /* id -> token string (added tokens override) */
    size_t *id_len;
    unsigned char *id_special;
    int32_t n_ids;
    added_tok *added;
    size_t n_added;
    unsigned char added_first[256];
    smap added_map;        /* content -> index into added */
    size_t added_lens[64]; /* distinct lengths, descending */
    size_t n_added_lens;
    int nfc;
    pcre2_code *re;
    int hf_unicode; /* the split made as HF's Unicode 16.0 reads it (hf_unicode_ok): split_view */
    pcre2_match_data *md;
    int32_t byte_id[256]; /* vocab id of each byte's byte-level char, -1 if none */
    char byte_str[256][3];
    int16_t char_byte[324]; /* reverse map: code point -> byte, -1 if not in alphabet */
    smap cache;             /* byte-level piece -> offset into cache_ids */
    int32_t *cache_ids;
    uint64_t json_hash; /* FNV-1a 64 of tokenizer.json's bytes */
    uint64_t chat_hash; /* of its chat template's text (chat_template.jinja, else
                           tokenizer_config.json's "chat_template"); 0 none, 1 not a string */
    size_t cache_n, cache_cap;
    int32_t bos, eos, pad;
};

void data_tok_ids_free(data_tok_ids *v) {
    free(v->ids);
    memset(v, 0, sizeof *v);
}

static int ids_push(data_tok_ids *v, int32_t id) {
    if (v->n == v->cap) {
        size_t nc = v->cap ? v->cap * 2 : 64;
        int32_t *p = realloc(v->ids, nc * sizeof *p);
        if (!p) return -1;
        v->ids = p;
        v->cap = nc;
    }
    v->ids[v->n++] = id;
    return 0;
}

static void init_bytes(data_tok *t) {
    int n = 0;
    for (int i = 0; i < 324; i++) t->char_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        int cp;
        if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))
            cp = b;
        else
            cp = 256 + n++;
        t->char_byte[cp] = (int16_t)b;
        if (cp < 0x80) {
            t->byte_str[b][0] = (char)cp;
            t->byte_str[b][1] = 0;
        } else {
            t->byte_str[b][0] = (char)(0xC0 | (cp >> 6));
            t->byte_str[b][1] = (char)(0x80 | (cp & 0x3F));
            t->byte_str[b][2] = 0;
        }
    }
}

static int set_id_token(data_tok *t, int32_t id, const char *s, size_t len, int special) {
    char *c = malloc(len + 1);
    if (!c) return -1;
    memcpy(c, s, len);
    c[len] = 0;
    free(t->id_tok[id]);
    t->id_tok[id] = c;
    t->id_len[id] = len;
    t->id_special[id] = (unsigned char)special;
    return 0;
}

/* jansson refuses NUL in object keys, and byte-level vocabularies of non-GPT-2 style (like
 * test_tokenizer's) have the key "\u0000". The raw JSON is rewritten so that every escaped
 * \u0000 becomes the placeholder U+10FFFF, which unmap_nul turns back into NUL; a file that
 * already holds U+10FFFF is refused (it would be ambiguous). */
#define NUL_PH "\xF4\x8F\xBF\xBF"

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int hex4(const char *p, size_t avail) {
    if (avail < 4) return -1;
    int v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p[i]);
        if (h < 0) return -1;
        v = v * 16 + h;
    }
    return v;
}

static char *rewrite_nul(const char *in, size_t n, size_t *out_n, const char *path, base_err *err) {
    char *o = malloc(n * 2 + 1);
    if (!o) {
        base_fail(err, "%s: out of memory", path);
        return NULL;
    }
    size_t w = 0;
    int in_str = 0;
    for (size_t i = 0; i < n; i++) {
        char c = in[i];
        if (i + 4 <= n && memcmp(in + i, NUL_PH, 4) == 0) {
            free(o);
            base_fail(err, "%s: contains U+10FFFF (not supported)", path);
            return NULL;
        }
        if (in_str && c == '\\' && i + 1 < n) {
            if (in[i + 1] == 'u') {
                int v = hex4(in + i + 2, n - i - 2);
                if (v == 0) {
                    memcpy(o + w, "\\uDBFF\\uDFFF", 12);
                    w += 12;
                    i += 5;
                    continue;
                }
                if (v == 0xDBFF && i + 12 <= n && in[i + 6] == '\\' && in[i + 7] == 'u' &&
                    hex4(in + i + 8, n - i - 8) == 0xDFFF) {
                    free(o);
                    base_fail(err, "%s: contains U+10FFFF (not supported)", path);
                    return NULL;
                }
            }
            o[w++] = c;
            o[w++] = in[++i];
            continue;
        }
        if (c == '"') in_str = !in_str;
        o[w++] = c;
    }
    o[w] = 0;
    *out_n = w;
    return o;
}

/* Copies s[0..len) into buf (>= len + 1 bytes) turning the placeholder back into NUL. */
static size_t unmap_nul(const char *s, size_t len, char *buf) {
    size_t w = 0;
    for (size_t i = 0; i < len; i++) {
        if (i + 4 <= len && memcmp(s + i, NUL_PH, 4) == 0) {
            buf[w++] = 0;
            i += 3;
        } else {
            buf[w++] = s[i];
        }
    }
    buf[w] = 0;
    return w;
}

/* hash (may be NULL): FNV-1a 64 of the file's bytes. */
static int read_json(const char *path, int required, json_t **out, uint64_t *hash, base_err *err) {
    json_error_t je;
    *out = NULL;
    if (!required && access(path, F_OK) != 0) return 0; /* optional file absent */
    size_t sz;
    char *raw = base_read_file(path, (size_t)1 << 30, &sz, err);
    if (!raw) return -1;
    if (hash) *hash = base_hash_bytes(BASE_HASH_INIT, raw, sz);
    size_t rn;
    char *txt = rewrite_nul(raw, sz, &rn, path, err);
    free(raw);
    if (!txt) return -1;
    json_t *j = json_loadb(txt, rn, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    free(txt);
    if (!j) return base_fail(err, "%s: invalid JSON at line %d: %s", path, je.line, je.text);
    if (!json_is_object(j)) {
        json_decref(j);
        return base_fail(err, "%s: top level is not an object", path);
    }
    *out = j;
    return 0;
}

/* "null or empty string" check for optional string fields. */
static int null_or_empty(json_t *v) {
    return !v || json_is_null(v) || (json_is_string(v) && json_string_length(v) == 0);
}

static int false_or_absent(json_t *v) {
    return !v || json_is_false(v);
}

static int check_byte_level(json_t *bl, const char *path, const char *where, int want_regex,
                            base_err *err) {
    json_t *aps = json_object_get(bl, "add_prefix_space");
    if (!false_or_absent(aps))
        return base_fail(err, "%s: %s.add_prefix_space: only false is supported", path, where);
    json_t *ur = json_object_get(bl, "use_regex");
    int use_regex = !ur || json_is_true(ur);
    if (ur && !json_is_boolean(ur))
        return base_fail(err, "%s: %s.use_regex: not a boolean", path, where);
    if (use_regex != want_regex)
        return base_fail(err, "%s: %s.use_regex: must be %s here", path, where,
                         want_regex ? "true" : "false");
    return 0;
}

/* Unicode's White_Space, what the pre-tokenizer's \s is in Hugging Face tokenizers; PCRE2's
 * \s adds U+180E (a space before Unicode 6.3, a format character since) */
/* clang-format off */
#define WHITE_SPACE \
    "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}" \
    "\\x{205F}\\x{3000}"
/* its complement, for a \S inside a class */
#define NOT_WHITE_SPACE \
    "\\x{0}-\\x{8}\\x{E}-\\x{1F}\\x{21}-\\x{84}\\x{86}-\\x{9F}\\x{A1}-\\x{167F}" \
    "\\x{1681}-\\x{1FFF}\\x{200B}-\\x{2027}\\x{202A}-\\x{202E}\\x{2030}-\\x{205E}" \
    "\\x{2060}-\\x{2FFF}\\x{3001}-\\x{10FFFF}"
/* clang-format on */

static int sb_str(base_strbuf *b, const char *s) {
    return base_strbuf_put(b, s, strlen(s));
}

/* The pre-tokenizer pattern p[n] with \s and \S (outside and inside classes) spelled as
 * Hugging Face tokenizers' regex engine reads them, Unicode's White_Space (PCRE2's \s adds
 * U+180E). Letters and numbers PCRE2 may not know are split_view's. NULL when out of memory
 * (free() the result; *len its length). */
static char *unicode_pattern(const char *p, size_t n, size_t *len) {
    base_strbuf b = {NULL, 0, 0};
    int in_class = 0, rc = 0;
    for (size_t i = 0; i < n && !rc;) {
        const char c = p[i];
        if (c == '\\' && i + 1 < n) {
            const char e = p[i + 1];
            if (e == 's' || e == 'S') {
                rc |= in_class   ? sb_str(&b, e == 's' ? WHITE_SPACE : NOT_WHITE_SPACE)
                      : e == 's' ? sb_str(&b, "[" WHITE_SPACE "]")
                                 : sb_str(&b, "[^" WHITE_SPACE "]");
                i += 2;
            } else { /* any other escape, copied whole: its second character is no class bracket */
                rc |= base_strbuf_put(&b, p + i, 2);
                i += 2;
            }
            continue;
        }
        if (!in_class && c == '[') { /* a class opens; "]" first in it (after "^") is literal */
            size_t j = i + 1;
            if (j < n && p[j] == '^') j++;
            if (j < n && p[j] == ']') j++;
            rc |= base_strbuf_put(&b, p + i, j - i);
            in_class = 1;
            i = j;
            continue;
        }
        if (in_class && c == '[' && i + 1 < n && p[i + 1] == ':') { /* [:alpha:] */
            const char *end = memmem(p + i + 2, n - i - 2, ":]", 2),
                       *close = memchr(p + i + 2, ']', n - i - 2);
            if (close && end && close < end + 1) end = NULL; /* no POSIX class: a literal [ */
            const size_t len = end ? (size_t)(end - (p + i)) + 2 : 1;
            rc |= base_strbuf_put(&b, p + i, len);
            i += len;
            continue;
        }
        if (in_class && c == ']') in_class = 0;
        rc |= base_strbuf_put(&b, p + i, 1);
        i++;
    }
    if (rc || (!b.s && base_strbuf_put(&b, "", 0))) {
        free(b.s);
        return NULL;
    }
    *len = b.n;
    return b.s;
}

/* Whether pattern p[n] reads Unicode only through \p{L}, \p{N} (or \pL, \pN), \s and \S
 * (Qwen2/3's, GPT-2's and Llama 3's patterns do), with none of the constructs unicode_pattern
 * does not follow (\Q..\E, \c, comments, extended mode): then unicode_pattern and split_view
 * make its split HF's. Another pattern (\d, \w, \b, \X, \p{Lu}, \p{M} ... read by category,
 * which split_view's stand-ins do not keep) is used as written, with this machine's PCRE2's
 * Unicode version. */
static int hf_unicode_ok(const char *p, size_t n) {
    for (size_t i = 0; i + 1 < n; i++) {
        if (p[i] == '(' && p[i + 1] == '?') {
            for (size_t j = i + 2; j < n && p[j] != ')' && p[j] != ':'; j++)
                if (p[j] == '#' || p[j] == 'x') return 0; /* a comment, extended mode */
            continue;
        }
        if (p[i] != '\\') continue;
        const char e = p[++i];
        if (e == 'p' || e == 'P') {
            const int braced = i + 3 < n && p[i + 1] == '{' && p[i + 3] == '}';
            const char k = braced ? p[i + 2] : i + 1 < n ? p[i + 1] : 0;
            if (k != 'L' && k != 'N') return 0;
            i += braced ? 3 : 1;
        } else if (strchr("QEcdDwWbBXRhHvVN", e)) {
            return 0;
        }
    }
    return 1;
}

static int compile_re(data_tok *t, const char *pattern, size_t len, const char *path,
                      base_err *err) {
    int ec;
    PCRE2_SIZE eo;
    /* the pattern as written first, so that an error's offset is the file's */
    t->re = pcre2_compile((PCRE2_SPTR)pattern, len, PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
    t->hf_unicode = hf_unicode_ok(pattern, len);
    if (t->re && t->hf_unicode) {
        pcre2_code_free(t->re);
        size_t ulen;
        char *up = unicode_pattern(pattern, len, &ulen);
        if (!up) return base_fail(err, "%s: out of memory", path);
        t->re = pcre2_compile((PCRE2_SPTR)up, ulen, PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
        free(up);
    }
    if (!t->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return base_fail(err, "%s: pre_tokenizer regex: PCRE2 error at offset %zu: %s", path,
                         (size_t)eo, (char *)msg);
    }
    pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE); /* falls back to the interpreter on failure */
    t->md = pcre2_match_data_create_from_pattern(t->re, NULL);
    if (!t->md) return base_fail(err, "%s: out of memory", path);
    return 0;
}

static int parse_pre_tokenizer(data_tok *t, json_t *pt, const char *path, base_err *err) {
    if (!json_is_object(pt)) return base_fail(err, "%s: pre_tokenizer: not an object", path);
    const char *type = json_string_value(json_object_get(pt, "type"));
    if (!type) return base_fail(err, "%s: pre_tokenizer.type: missing or not a string", path);
    if (strcmp(type, "ByteLevel") == 0) {
        if (check_byte_level(pt, path, "pre_tokenizer", 1, err)) return -1;
        return compile_re(t, GPT2_PATTERN, strlen(GPT2_PATTERN), path, err);
    }
    if (strcmp(type, "Sequence") != 0)
        return base_fail(err, "%s: pre_tokenizer.type: \"%s\" is not supported", path, type);
    json_t *seq = json_object_get(pt, "pretokenizers");
    if (!json_is_array(seq) || json_array_size(seq) != 2)
        return base_fail(err, "%s: pre_tokenizer.pretokenizers: must be [Split, ByteLevel]", path);
    json_t *sp = json_array_get(seq, 0), *bl = json_array_get(seq, 1);
    if (!json_is_object(sp) || !json_is_object(bl))
        return base_fail(err, "%s: pre_tokenizer.pretokenizers: entries must be objects", path);
    const char *t0 = json_string_value(json_object_get(sp, "type"));
    const char *t1 = json_string_value(json_object_get(bl, "type"));
    if (!t0 || strcmp(t0, "Split") != 0 || !t1 || strcmp(t1, "ByteLevel") != 0)
        return base_fail(err, "%s: pre_tokenizer.pretokenizers: must be [Split, ByteLevel]", path);
    const char *beh = json_string_value(json_object_get(sp, "behavior"));
    if (!beh || strcmp(beh, "Isolated") != 0)
        return base_fail(err, "%s: pre_tokenizer.pretokenizers[0].behavior: only \"Isolated\"",
                         path);
    if (!false_or_absent(json_object_get(sp, "invert")))
        return base_fail(err, "%s: pre_tokenizer.pretokenizers[0].invert: only false", path);
    json_t *pat = json_object_get(sp, "pattern");
    json_t *rx = json_is_object(pat) ? json_object_get(pat, "Regex") : NULL;
    if (!json_is_string(rx))
        return base_fail(err, "%s: pre_tokenizer.pretokenizers[0].pattern.Regex: missing", path);
    if (check_byte_level(bl, path, "pre_tokenizer.pretokenizers[1]", 0, err)) return -1;
    return compile_re(t, json_string_value(rx), json_string_length(rx), path, err);
}

static int parse_model(data_tok *t, json_t *model, const char *path, base_err *err) {
    if (!json_is_object(model)) return base_fail(err, "%s: model: not an object", path);
    const char *type = json_string_value(json_object_get(model, "type"));
    if (!type || strcmp(type, "BPE") != 0)
        return base_fail(err, "%s: model.type: only \"BPE\" is supported", path);
    json_t *v;
    if ((v = json_object_get(model, "dropout")) && !json_is_null(v))
        return base_fail(err, "%s: model.dropout: only null is supported", path);
    if ((v = json_object_get(model, "unk_token")) && !json_is_null(v))
        return base_fail(err, "%s: model.unk_token: only null is supported", path);
    if (!false_or_absent(json_object_get(model, "byte_fallback")))
        return base_fail(err, "%s: model.byte_fallback: only false is supported", path);
    if (!false_or_absent(json_object_get(model, "ignore_merges")))
        return base_fail(err, "%s: model.ignore_merges: only false is supported", path);
    if (!null_or_empty(json_object_get(model, "continuing_subword_prefix")))
        return base_fail(err, "%s: model.continuing_subword_prefix: only null/\"\"", path);
    if (!null_or_empty(json_object_get(model, "end_of_word_suffix")))
        return base_fail(err, "%s: model.end_of_word_suffix: only null/\"\"", path);
    json_t *vocab = json_object_get(model, "vocab");
    if (!json_is_object(vocab)) return base_fail(err, "%s: model.vocab: not an object", path);
    const char *key;
    size_t klen;
    json_t *val;
    int32_t max_id = -1;
    char kbuf[4096];
    json_object_keylen_foreach(vocab, key, klen, val) {
        if (klen >= sizeof kbuf)
            return base_fail(err, "%s: model.vocab: token longer than %zu bytes", path,
                             sizeof kbuf);
        if (!json_is_integer(val) || json_integer_value(val) < 0 ||
            json_integer_value(val) >= TOK_MAX_ID)
            return base_fail(err, "%s: model.vocab[\"%.64s\"]: id not an integer in [0, %d)", path,
                             key, TOK_MAX_ID);
        int32_t id = (int32_t)json_integer_value(val);
        if (id > max_id) max_id = id;
        size_t kl = unmap_nul(key, klen, kbuf);
        if (smap_put(&t->vocab, kbuf, kl, id)) return base_fail(err, "out of memory");
    }
    t->n_ids = max_id + 1;
    json_t *merges = json_object_get(model, "merges");
    if (!json_is_array(merges)) return base_fail(err, "%s: model.merges: not an array", path);
    size_t i;
    json_array_foreach(merges, i, val) {
        const char *a, *b;
        size_t al, bl;
        char buf[1024];
        if (json_is_string(val)) {
            const char *s = json_string_value(val);
            const char *sp = strchr(s, ' ');
            if (!sp || strchr(sp + 1, ' '))
                return base_fail(err, "%s: model.merges[%zu]: not \"a b\"", path, i);
            a = s;
            al = (size_t)(sp - s);
            b = sp + 1;
            bl = strlen(b);
        } else if (json_is_array(val) && json_array_size(val) == 2 &&
                   json_is_string(json_array_get(val, 0)) &&
                   json_is_string(json_array_get(val, 1))) {
            a = json_string_value(json_array_get(val, 0));
            al = json_string_length(json_array_get(val, 0));
            b = json_string_value(json_array_get(val, 1));
            bl = json_string_length(json_array_get(val, 1));
        } else {
            return base_fail(err, "%s: model.merges[%zu]: not a string or a pair of strings", path,
                             i);
        }
        if (al + bl >= sizeof buf)
            return base_fail(err, "%s: model.merges[%zu]: token too long", path, i);
        char ab[1024], bb[1024];
        al = unmap_nul(a, al, ab);
        bl = unmap_nul(b, bl, bb);
        smap_slot *sa = smap_find(&t->vocab, ab, al), *sb = smap_find(&t->vocab, bb, bl);
        memcpy(buf, ab, al);
        memcpy(buf + al, bb, bl);
        smap_slot *sm = smap_find(&t->vocab, buf, al + bl);
        if (!sa || !sb || !sm)
            return base_fail(err, "%s: model.merges[%zu]: token not in model.vocab", path, i);
        if (pmap_put(&t->merges, sa->val, sb->val, (int32_t)i, sm->val))
            return base_fail(err, "out of memory");
    }
    return 0;
}

/* Appends the added tokens of arr (objects with id, content, special and the flags) to t.
 * Errors name an entry by its JSON path: `field`[i] for tokenizer.json's list ("added_tokens"),
 * or `field` alone when `one` (arr wraps the single object tokenizer_config.json names
 * "bos_token", "added_tokens_decoder[\"7\"]", ...). */
static int parse_added(data_tok *t, json_t *arr, const char *path, const char *field, int one,
                       base_err *err) {
    if (!arr || json_is_null(arr)) return 0;
    if (!json_is_array(arr)) return base_fail(err, "%s: %s: not an array", path, field);
    size_t n = json_array_size(arr);
    added_tok *grown = realloc(t->added, (t->n_added + n + 1) * sizeof *t->added);
    if (!grown) return base_fail(err, "out of memory");
    t->added = grown;
    size_t i;
    json_t *a;
    json_array_foreach(arr, i, a) {
        char name[200]; /* the entry's JSON path */
        if (one)
            snprintf(name, sizeof name, "%.180s", field);
        else
            snprintf(name, sizeof name, "%.160s[%zu]", field, i);
        if (!json_is_object(a)) return base_fail(err, "%s: %s: not an object", path, name);
        json_t *id = json_object_get(a, "id"), *c = json_object_get(a, "content");
        if (!json_is_integer(id) || json_integer_value(id) < 0 ||
            json_integer_value(id) >= TOK_MAX_ID)
            return base_fail(err, "%s: %s.id: not an integer in range", path, name);
        if (!json_is_string(c) || json_string_length(c) == 0)
            return base_fail(err, "%s: %s.content: not a non-empty string", path, name);
        static const char *const flags[] = {"lstrip", "rstrip", "single_word", "normalized"};
        for (int f = 0; f < 4; f++)
            if (!false_or_absent(json_object_get(a, flags[f])))
                return base_fail(err, "%s: %s.%s: only false is supported", path, name, flags[f]);
        json_t *sp = json_object_get(a, "special");
        if (sp && !json_is_boolean(sp))
            return base_fail(err, "%s: %s.special: not a boolean", path, name);
        added_tok *at = &t->added[t->n_added++];
        at->content = malloc(json_string_length(c) + 1);
        if (!at->content) return base_fail(err, "out of memory");
        at->len = unmap_nul(json_string_value(c), json_string_length(c), at->content);
        at->id = (int32_t)json_integer_value(id);
        at->special = sp && json_is_true(sp);
        if (at->id >= t->n_ids) t->n_ids = at->id + 1;
        if (smap_put(&t->added_map, at->content, at->len, (int32_t)(t->n_added - 1)))
            return base_fail(err, "out of memory");
        t->added_first[(unsigned char)at->content[0]] = 1;
        size_t k = 0;
        while (k < t->n_added_lens && t->added_lens[k] > at->len) k++;
        if (k < t->n_added_lens && t->added_lens[k] == at->len) continue;
        if (t->n_added_lens == sizeof t->added_lens / sizeof t->added_lens[0])
            return base_fail(err, "%s: %s: too many distinct lengths", path, field);
        memmove(&t->added_lens[k + 1], &t->added_lens[k], (t->n_added_lens - k) * sizeof(size_t));
        t->added_lens[k] = at->len;
        t->n_added_lens++;
    }
    return 0;
}

typedef struct {
    int64_t key; /* the entry's key: an id, which only orders the entries */
    json_t *tok;
} decoder_entry;

static int cmp_decoder_entry(const void *a, const void *b) {
    const int64_t x = ((const decoder_entry *)a)->key, y = ((const decoder_entry *)b)->key;
    return (x > y) - (x < y);
}

/* One token of tokenizer_config.json ({content, special, ...}) becomes an added token unless
 * its content already is one: at its id in model.vocab when the vocabulary has it, else at the
 * next free id (transformers 5's AddedVocabulary). `named` (bos_token, ...) makes it special
 * whatever the entry says, as transformers' special-token attributes are. */
static int add_config_token(data_tok *t, json_t *entry, int named, const char *cpath,
                            const char *field, base_err *err) {
    json_t *c = json_object_get(entry, "content");
    if (!json_is_string(c) || json_string_length(c) == 0)
        return base_fail(err, "%s: %s.content: not a non-empty string", cpath, field);
    char buf[4096];
    if (json_string_length(c) >= sizeof buf)
        return base_fail(err, "%s: %s.content: longer than %zu bytes", cpath, field, sizeof buf);
    const size_t len = unmap_nul(json_string_value(c), json_string_length(c), buf);
    if (smap_find(&t->added_map, buf, len)) return 0; /* already an added token */
    const smap_slot *in_vocab = smap_find(&t->vocab, buf, len);
    const int32_t id = in_vocab ? in_vocab->val : t->n_ids;
    if (id >= TOK_MAX_ID)
        return base_fail(err, "%s: %s: no id left below %d", cpath, field, TOK_MAX_ID);
    json_t *one = json_array(), *tok = json_deep_copy(entry);
    const int oom = !one || !tok || json_object_set_new(tok, "id", json_integer(id)) ||
                    (named && json_object_set_new(tok, "special", json_true())) ||
                    json_array_append(one, tok);
    const int rc =
        oom ? base_fail(err, "out of memory") : parse_added(t, one, cpath, field, 1, err);
    if (tok) json_decref(tok);
    if (one) json_decref(one);
    return rc;
}

/* tokenizer_config.json's added_tokens_decoder ({"id": {content, special, ...}}), as
 * transformers 5 loads it (TokenizersBackend.__init__, then `tokenizers`' AddedVocabulary):
 * the entries, in the order of their keys as numbers, whose content is not already an added
 * token are added one by one. An entry's id is not its key: it is the content's id in
 * model.vocab when the vocabulary has it (the token becomes an added token there), otherwise
 * the next free id, one past the largest id so far (vocab and added tokens). So torchtitan's
 * v0.2.2 test tokenizer (2002 vocab ids; keys 128000 and 128001 for <|begin_of_text|> and
 * <|end_of_text|>) gets them at 2002 and 2003, as AutoTokenizer and torchtitan's
 * HuggingFaceTokenizer do, and an entry whose key lies inside the vocabulary but whose content
 * does not is appended too. The named special tokens follow (parse_named_specials). */
static int parse_added_decoder(data_tok *t, json_t *cfg, const char *cpath, base_err *err) {
    json_t *dec = cfg ? json_object_get(cfg, "added_tokens_decoder") : NULL;
    if (!dec || json_is_null(dec)) return 0;
    if (!json_is_object(dec))
        return base_fail(err, "%s: added_tokens_decoder: not an object", cpath);
    const size_t n = json_object_size(dec);
    decoder_entry *e = malloc((n ? n : 1) * sizeof *e);
    if (!e) return base_fail(err, "out of memory");
    const char *key;
    json_t *v;
    size_t k = 0;
    int rc = 0;
    json_object_foreach(dec, key, v) {
        int64_t id;
        if (base_parse_i64(key, &id) || id < 0 || id >= TOK_MAX_ID || !json_is_object(v)) {
            rc =
                base_fail(err, "%s: added_tokens_decoder[\"%.32s\"]: wants a token id -> {content}",
                          cpath, key);
            break;
        }
        e[k++] = (decoder_entry){id, v};
    }
    if (!rc) qsort(e, k, sizeof *e, cmp_decoder_entry);
    for (size_t i = 0; !rc && i < k; i++) {
        char field[64];
        snprintf(field, sizeof field, "added_tokens_decoder[\"%lld\"]", (long long)e[i].key);
        rc = add_config_token(t, e[i].tok, 0, cpath, field, err);
    }
    free(e);
    return rc;
}

/* A token named in tokenizer_config.json (a string or {content, ...}; absent or null: none)
 * becomes a special added token unless it is an added token already (add_config_token). */
static int add_named(data_tok *t, json_t *v, const char *cpath, const char *field, base_err *err) {
    if (!v || json_is_null(v)) return 0;
    json_t *entry = json_is_object(v)   ? json_incref(v)
                    : json_is_string(v) ? json_pack("{sO}", "content", v)
                                        : NULL;
    if (!entry)
        return json_is_object(v) || json_is_string(v)
                   ? base_fail(err, "out of memory")
                   : base_fail(err, "%s: %s: not a string, null or {content}", cpath, field);
    const int rc = add_config_token(t, entry, 1, cpath, field, err);
    json_decref(entry);
    return rc;
}

/* The special tokens tokenizer_config.json names, after added_tokens_decoder and in
 * transformers 5's order: bos, eos, unk, sep, pad, cls, mask, then additional_special_tokens
 * (a list) and extra_special_tokens (a list, or an object of name -> token). A named token
 * missing from the vocabulary is appended, and one that is an ordinary vocabulary word becomes
 * a special added token (split out of text whole), as AutoTokenizer does. (torchtitan v0.2.2's
 * HuggingFaceTokenizer adds the same tokens, the named ones before added_tokens_decoder's: the
 * ids differ only where both kinds hold new tokens.) */
static int parse_named_specials(data_tok *t, json_t *cfg, const char *cpath, base_err *err) {
    if (!cfg) return 0;
    static const char *const names[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                        "pad_token", "cls_token", "mask_token"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (add_named(t, json_object_get(cfg, names[i]), cpath, names[i], err)) return -1;
    static const char *const lists[] = {"additional_special_tokens", "extra_special_tokens"};
    for (int l = 0; l < 2; l++) {
        json_t *list = json_object_get(cfg, lists[l]), *v;
        char field[160];
        if (!list || json_is_null(list)) continue;
        if (json_is_array(list)) {
            size_t k;
            json_array_foreach(list, k, v) {
                snprintf(field, sizeof field, "%s[%zu]", lists[l], k);
                if (add_named(t, v, cpath, field, err)) return -1;
            }
        } else if (l == 1 && json_is_object(list)) {
            const char *key;
            json_object_foreach(list, key, v) {
                snprintf(field, sizeof field, "%s[\"%.64s\"]", lists[l], key);
                if (add_named(t, v, cpath, field, err)) return -1;
            }
        } else {
            return base_fail(err, "%s: %s: not a list%s", cpath, lists[l],
                             l == 1 ? " or an object of name -> token" : "");
        }
    }
    return 0;
}

static int config_token(data_tok *t, json_t *cfg, const char *field, const char *path, int32_t *out,
                        base_err *err) {
    *out = -1;
    if (!cfg) return 0;
    json_t *v = json_object_get(cfg, field);
    if (!v || json_is_null(v)) return 0;
    if (json_is_object(v)) v = json_object_get(v, "content");
    if (!json_is_string(v))
        return base_fail(err, "%s: %s: not a string, null or {content}", path, field);
    int32_t id = data_tok_token_id(t, json_string_value(v));
    if (id < 0)
        return base_fail(err, "%s: %s: token \"%.64s\" not in the vocabulary", path, field,
                         json_string_value(v));
    *out = id;
    return 0;
}

static int load_impl(data_tok *t, const char *dir, base_err *err) {
    char path[4096], cpath[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    snprintf(cpath, sizeof cpath, "%s/tokenizer_config.json", dir);
    json_t *root = NULL, *cfg = NULL;
    int rc = -1;
    if (read_json(path, 1, &root, &t->json_hash, err)) goto done;
    json_t *norm = json_object_get(root, "normalizer");
    if (norm && !json_is_null(norm)) {
        const char *nt =
            json_is_object(norm) ? json_string_value(json_object_get(norm, "type")) : NULL;
        if (!nt || strcmp(nt, "NFC") != 0) {
            base_fail(err, "%s: normalizer: only null or {\"type\": \"NFC\"} is supported", path);
            goto done;
        }
        t->nfc = 1;
    }
    if (parse_pre_tokenizer(t, json_object_get(root, "pre_tokenizer"), path, err)) goto done;
    if (parse_model(t, json_object_get(root, "model"), path, err)) goto done;
    if (parse_added(t, json_object_get(root, "added_tokens"), path, "added_tokens", 0, err))
        goto done;
    if (read_json(cpath, 0, &cfg, NULL, err) || parse_added_decoder(t, cfg, cpath, err) ||
        parse_named_specials(t, cfg, cpath, err))
        goto done;
    /* the chat template, as transformers takes it: a chat_template.jinja beside wins */
    char jpath[4200];
    snprintf(jpath, sizeof jpath, "%s/chat_template.jinja", dir);
    if (access(jpath, F_OK) == 0) {
        size_t jn;
        char *jt = base_read_file(jpath, (size_t)1 << 24, &jn, err);
        if (!jt) goto done;
        t->chat_hash = base_hash_bytes(BASE_HASH_INIT, jt, jn);
        free(jt);
    } else if (cfg && json_object_get(cfg, "chat_template")) {
        const json_t *ct = json_object_get(cfg, "chat_template");
        t->chat_hash = json_is_string(ct) ? base_hash_bytes(BASE_HASH_INIT, json_string_value(ct),
                                                            json_string_length(ct))
                                          : 1;
    }
    json_t *dec = json_object_get(root, "decoder");
    if (dec && !json_is_null(dec)) {
        const char *dt =
            json_is_object(dec) ? json_string_value(json_object_get(dec, "type")) : NULL;
        if (!dt || strcmp(dt, "ByteLevel") != 0) {
            base_fail(err, "%s: decoder: only null or ByteLevel is supported", path);
            goto done;
        }
    }
    t->id_tok = calloc((size_t)t->n_ids + 1, sizeof *t->id_tok);
    t->id_special = calloc((size_t)t->n_ids + 1, 1);
    t->id_len = calloc((size_t)t->n_ids + 1, sizeof *t->id_len);
    if (!t->id_tok || !t->id_special || !t->id_len) {
        base_fail(err, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < t->vocab.cap; i++) {
        smap_slot *s = &t->vocab.slots[i];
        if (s->key && set_id_token(t, s->val, s->key, s->klen, 0)) {
            base_fail(err, "out of memory");
            goto done;
        }
    }
    for (size_t i = 0; i < t->n_added; i++)
        if (set_id_token(t, t->added[i].id, t->added[i].content, t->added[i].len,
                         t->added[i].special)) {
            base_fail(err, "out of memory");
            goto done;
        }
    for (int b = 0; b < 256; b++) {
        smap_slot *s = smap_find(&t->vocab, t->byte_str[b], strlen(t->byte_str[b]));
        t->byte_id[b] = s ? s->val : -1;
    }
    if (config_token(t, cfg, "bos_token", cpath, &t->bos, err) ||
        config_token(t, cfg, "eos_token", cpath, &t->eos, err) ||
        config_token(t, cfg, "pad_token", cpath, &t->pad, err))
        goto done;
    rc = 0;
done:
    if (root) json_decref(root);
    if (cfg) json_decref(cfg);
    return rc;
}

int data_tok_load(const char *dir, data_tok **out, base_err *err) {
    *out = NULL;
    data_tok *t = calloc(1, sizeof *t);
    if (!t) return base_fail(err, "out of memory");
    t->bos = t->eos = t->pad = -1;
    init_bytes(t);
    if (load_impl(t, dir, err)) {
        data_tok_free(t);
        return -1;
    }
    *out = t;
    return 0;
}

uint64_t data_tok_fingerprint(const data_tok *t) {
    return t->json_hash;
}

uint64_t data_tok_chat_template(const data_tok *t) {
    return t->chat_hash;
}

void data_tok_free(data_tok *t) {
    if (!t) return;
    smap_free(&t->vocab);
    smap_free(&t->added_map);
    smap_free(&t->cache);
    free(t->merges.slots);
    if (t->id_tok)
        for (int32_t i = 0; i < t->n_ids; i++) free(t->id_tok[i]);
    free(t->id_tok);
    free(t->id_special);
    free(t->id_len);
    for (size_t i = 0; i < t->n_added; i++) free(t->added[i].content);
    free(t->added);
    if (t->md) pcre2_match_data_free(t->md);
    if (t->re) pcre2_code_free(t->re);
    free(t->cache_ids);
    free(t);
}

/* ---- BPE on one pre-token (raw bytes) ---- */
typedef struct {
    int32_t id;
    int32_t prev, next;
    int alive;
} sym;
typedef struct {
    int32_t rank, pos, id;
} hent;

static int hless(const hent *a, const hent *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void hpush(hent *h, size_t *n, hent e) {
    size_t i = (*n)++;
    h[i] = e;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!hless(&h[i], &h[p])) break;
        hent tmp = h[i];
        h[i] = h[p];
        h[p] = tmp;
        i = p;
    }
}

static hent hpop(hent *h, size_t *n) {
    hent top = h[0];
    h[0] = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < *n && hless(&h[l], &h[m])) m = l;
        if (r < *n && hless(&h[r], &h[m])) m = r;
        if (m == i) break;
        hent tmp = h[i];
        h[i] = h[m];
        h[m] = tmp;
        i = m;
    }
    return top;
}

static int bpe_piece(data_tok *t, const unsigned char *p, size_t len, data_tok_ids *out) {
    /* cache lookup */
    if (len <= TOK_CACHE_MAX_PIECE) {
        smap_slot *s = smap_find(&t->cache, (const char *)p, len);
        if (s) {
            size_t off = (size_t)s->val;
            int32_t cnt = t->cache_ids[off];
            for (int32_t i = 0; i < cnt; i++)
                if (ids_push(out, t->cache_ids[off + 1 + (size_t)i])) return -1;
            return 0;
        }
    }
    sym *sy = malloc(len * sizeof *sy + 1);
    hent *h = malloc(3 * len * sizeof *h + 1); /* pushes <= (ns-1) + 2 merges */
    if (!sy || !h) {
        free(sy);
        free(h);
        return -1;
    }
    int32_t ns = 0;
    for (size_t i = 0; i < len; i++) {
        int32_t id = t->byte_id[p[i]];
        if (id < 0) continue; /* no unk token: HF drops the character */
        sy[ns] = (sym){id, ns - 1, ns + 1, 1};
        ns++;
    }
    if (ns) sy[ns - 1].next = -1;
    size_t nh = 0;
    for (int32_t i = 0; i + 1 < ns; i++) {
        const pmap_slot *m = pmap_find(&t->merges, sy[i].id, sy[i + 1].id);
        if (m) hpush(h, &nh, (hent){m->rank, i, m->id});
    }
    while (nh) {
        hent e = hpop(h, &nh);
        sym *a = &sy[e.pos];
        if (!a->alive || a->next < 0) continue;
        sym *b = &sy[a->next];
        const pmap_slot *m = pmap_find(&t->merges, a->id, b->id);
        if (!m || m->id != e.id) continue;
        a->id = e.id;
        b->alive = 0;
        a->next = b->next;
        if (b->next >= 0) sy[b->next].prev = e.pos;
        if (a->prev >= 0) {
            const pmap_slot *pm = pmap_find(&t->merges, sy[a->prev].id, a->id);
            if (pm) hpush(h, &nh, (hent){pm->rank, a->prev, pm->id});
        }
        if (a->next >= 0) {
            const pmap_slot *nm = pmap_find(&t->merges, a->id, sy[a->next].id);
            if (nm) hpush(h, &nh, (hent){nm->rank, e.pos, nm->id});
        }
    }
    size_t start = out->n;
    int rc = 0;
    for (int32_t i = 0; ns && i >= 0; i = sy[i].next)
        if (ids_push(out, sy[i].id)) {
            rc = -1;
            break;
        }
    free(sy);
    free(h);
    if (rc) return -1;
    if (len <= TOK_CACHE_MAX_PIECE && t->cache.n < TOK_CACHE_MAX_ENTRIES) {
        size_t cnt = out->n - start;
        if (t->cache_n + cnt + 1 > t->cache_cap) {
            size_t nc = t->cache_cap ? t->cache_cap * 2 : 4096;
            while (nc < t->cache_n + cnt + 1) nc *= 2;
            int32_t *np = realloc(t->cache_ids, nc * sizeof *np);
            if (!np) return 0; /* cache is optional */
            t->cache_ids = np;
            t->cache_cap = nc;
        }
        if (t->cache_n > INT32_MAX) return 0;
        if (smap_put(&t->cache, (const char *)p, len, (int32_t)t->cache_n)) return 0;
        t->cache_ids[t->cache_n] = (int32_t)cnt;
        if (cnt) memcpy(t->cache_ids + t->cache_n + 1, out->ids + start, cnt * sizeof(int32_t));
        t->cache_n += cnt + 1;
    }
    return 0;
}

static int in_ranges(const uint32_t (*r)[2], size_t n, uint32_t c) {
    size_t lo = 0, hi = n; /* the first range ending at or after c */
    while (lo < hi) {
        const size_t mid = (lo + hi) / 2;
        if (r[mid][1] < c)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && r[lo][0] <= c;
}

/* s[len] (valid UTF-8) for the pre-tokenizer's split, as Hugging Face tokenizers' regex engine
 * reads it: its letters and numbers of Unicode 16.0 that this machine's PCRE2 may not know
 * (Unicode 15-16; unicode_extra.h, over Debian 12's PCRE2 of Unicode 14.0) replaced by stand-ins
 * of the same UTF-8 length that every PCRE2 counts so (U+4E00 / U+20000 letters, U+0966 /
 * U+104A0 digits), so the split is made on this copy and the pieces are cut from s at the same
 * offsets. Spelling them into the pattern instead made \p{L}+ a class and the split of plain
 * ASCII a third slower. NULL (split s itself) when s has none; *oom on a failed allocation. */
static char *split_view(const char *s, size_t len, int *oom) {
    char *v = NULL;
    *oom = 0;
    for (size_t i = 0; i < len;) {
        uint64_t w; /* 8 ASCII bytes at a time (most text) */
        if (i + 8 <= len && (memcpy(&w, s + i, 8), !(w & 0x8080808080808080ull))) {
            i += 8;
            continue;
        }
        const unsigned char b = (unsigned char)s[i];
        if (b < 0xE1) { /* under U+1000: below every added code point (U+1C89 on) */
            i += b < 0x80 ? 1 : b < 0xE0 ? 2 : 3;
            continue;
        }
        const size_t k = b < 0xF0 ? 3 : 4;
        if (i + k > len) break;
        uint32_t c = b & (k == 3 ? 0x0F : 0x07);
        for (size_t j = 1; j < k; j++) c = c << 6 | ((unsigned char)s[i + j] & 0x3F);
        const int l = in_ranges(UNICODE_EXTRA_L, sizeof UNICODE_EXTRA_L / sizeof *UNICODE_EXTRA_L,
                                c),
                  n = !l && in_ranges(UNICODE_EXTRA_N,
                                      sizeof UNICODE_EXTRA_N / sizeof *UNICODE_EXTRA_N, c);
        if (l || n) {
            if (!v) {
                if (!(v = malloc(len ? len : 1))) {
                    *oom = 1;
                    return NULL;
                }
                memcpy(v, s, len);
            }
            static const char stand_in[2][2][5] = {{"\xE4\xB8\x80", "\xF0\xA0\x80\x80"},
                                                   {"\xE0\xA5\xA6", "\xF0\x90\x92\xA0"}};
            memcpy(v + i, stand_in[n][k == 4], k);
        }
        i += k;
    }
    return v;
}

/* Pre-tokenize a (valid UTF-8, normalized) segment and BPE each piece. */
static int encode_segment(data_tok *t, const char *s, size_t len, data_tok_ids *out,
                          base_err *err) {
    int oom;
    char *view = t->hf_unicode ? split_view(s, len, &oom) : (oom = 0, NULL);
    if (oom) return base_fail(err, "out of memory");
    const char *sv = view ? view : s; /* where the split is made; pieces are cut from s */
    size_t pos = 0, last = 0;
    int rc = 0;
    while (!rc && pos <= len) {
        int m = pcre2_match(t->re, (PCRE2_SPTR)sv, len, pos, PCRE2_NO_UTF_CHECK, t->md, NULL);
        if (m == PCRE2_ERROR_NOMATCH) break;
        if (m < 0) {
            rc = base_fail(err, "tokenizer: regex match failed (PCRE2 error %d)", m);
            break;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(t->md);
        size_t ms = ov[0], me = ov[1];
        if (me < ms || me > len) {
            rc = base_fail(err, "tokenizer: bad regex match");
            break;
        }
        if ((ms > last && bpe_piece(t, (const unsigned char *)s + last, ms - last, out)) ||
            (me > ms && bpe_piece(t, (const unsigned char *)s + ms, me - ms, out))) {
            rc = base_fail(err, "out of memory");
            break;
        }
        last = me;
        if (me == ms) { /* empty match: step one character */
            if (me >= len) break;
            pos = me + 1;
            while (pos < len && ((unsigned char)s[pos] & 0xC0) == 0x80) pos++;
        } else {
            pos = me;
        }
    }
    free(view);
    if (!rc && last < len && bpe_piece(t, (const unsigned char *)s + last, len - last, out))
        rc = base_fail(err, "out of memory");
    return rc;
}

static int encode_text(data_tok *t, const char *s, size_t len, data_tok_ids *out, base_err *err) {
    if (!len) return 0;
    if (t->nfc) {
        int ascii = 1;
        for (size_t i = 0; i < len && ascii; i++)
            if ((unsigned char)s[i] >= 0x80) ascii = 0;
        if (!ascii) {
            utf8proc_uint8_t *n = NULL;
            utf8proc_ssize_t nl = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)len,
                                               &n, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
            if (nl < 0) return base_fail(err, "tokenizer: NFC failed: %s", utf8proc_errmsg(nl));
            int rc = encode_segment(t, (const char *)n, (size_t)nl, out, err);
            free(n);
            return rc;
        }
    }
    return encode_segment(t, s, len, out, err);
}

/* The UTF-8 sequence at s[0..n) (n >= 1): returns its length and sets *ok when it is a
 * well-formed one (Unicode Table 3-7: no overlong, surrogate or > U+10FFFF); otherwise returns
 * the length of its maximal subpart (>= 1) and clears *ok: a valid lead byte (C2..F4) and the
 * continuation bytes after it that could still start a well-formed sequence (E0 needs A0..BF
 * next, ED 80..9F, F0 90..BF, F4 80..8F, any other 80..BF), or the one byte that cannot start
 * one (80..C1, F5..FF). */
static size_t utf8_next(const unsigned char *s, size_t n, int *ok) {
    const unsigned c = s[0];
    *ok = 1;
    if (c < 0x80) return 1;
    size_t need;                   /* continuation bytes after the lead */
    unsigned lo = 0x80, hi = 0xBF; /* the range of the next one */
    if (c >= 0xC2 && c <= 0xDF) {
        need = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        if (c == 0xE0) lo = 0xA0; /* else overlong */
        if (c == 0xED) hi = 0x9F; /* else a surrogate */
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        if (c == 0xF0) lo = 0x90; /* else overlong */
        if (c == 0xF4) hi = 0x8F; /* else > U+10FFFF */
    } else {
        *ok = 0;
        return 1;
    }
    size_t k = 1;
    for (; k <= need && k < n && s[k] >= lo && s[k] <= hi; k++) lo = 0x80, hi = 0xBF;
    *ok = k > need;
    return k;
}

/* Copies text, replacing each maximal subpart of an ill-formed sequence (utf8_next) with one
 * U+FFFD: Unicode's recommended substitution, as Python's bytes.decode("utf-8", "replace"),
 * Rust's String::from_utf8_lossy and WHATWG's decoder do ("x\xE4\xB8y" -> "x\uFFFDy"). */
char *data_utf8_repair(const char *s, size_t len, size_t *out_len) {
    size_t cap = len * 3 + 1, n = 0; /* at most one U+FFFD (3 bytes) per input byte */
    char *o = malloc(cap);
    if (!o) return NULL;
    size_t i = 0;
    while (i < len) {
        int ok;
        const size_t k = utf8_next((const unsigned char *)s + i, len - i, &ok);
        if (ok) {
            memcpy(o + n, s + i, k);
            n += k;
        } else {
            memcpy(o + n, "\xEF\xBF\xBD", 3);
            n += 3;
        }
        i += k;
    }
    o[n] = 0;
    *out_len = n;
    return o;
}

int data_tok_encode(data_tok *t, const char *text, size_t len, data_tok_ids *out, base_err *err) {
    char *clean = NULL;
    {
        /* validate quickly; sanitize only when needed */
        size_t i = 0;
        while (i < len) {
            if ((unsigned char)text[i] < 0x80) {
                i++;
                continue;
            }
            int ok;
            const size_t k = utf8_next((const unsigned char *)text + i, len - i, &ok);
            if (!ok) break;
            i += k;
        }
        if (i < len) {
            clean = data_utf8_repair(text, len, &len);
            if (!clean) return base_fail(err, "out of memory");
            text = clean;
        }
    }
    int rc = 0;
    size_t seg = 0, i = 0;
    while (i < len && !rc) {
        if (t->n_added && t->added_first[(unsigned char)text[i]]) {
            smap_slot *hit = NULL;
            for (size_t k = 0; k < t->n_added_lens && !hit; k++)
                if (t->added_lens[k] <= len - i)
                    hit = smap_find(&t->added_map, text + i, t->added_lens[k]);
            if (hit) {
                const added_tok *a = &t->added[hit->val];
                rc = encode_text(t, text + seg, i - seg, out, err);
                if (!rc && ids_push(out, a->id)) rc = base_fail(err, "out of memory");
                i += a->len;
                seg = i;
                continue;
            }
        }
        i++;
    }
    if (!rc) rc = encode_text(t, text + seg, len - seg, out, err);
    free(clean);
    return rc;
}

int data_tok_decode(const data_tok *t, const int32_t *ids, size_t n, int skip_special, char **out,
                    size_t *out_len, base_err *err) {
    *out = NULL;
    *out_len = 0;
    size_t cap = 64, len = 0;
    char *o = malloc(cap);
    if (!o) return base_fail(err, "out of memory");
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= t->n_ids || !t->id_tok[id]) {
            free(o);
            return base_fail(err,
                             "tokenizer decode: id %d at position %zu is not in the vocabulary",
                             (int)id, i);
        }
        if (skip_special && t->id_special[id]) continue;
        const char *s = t->id_tok[id];
        size_t sl = t->id_len[id];
        if (len + sl + 1 > cap) {
            while (len + sl + 1 > cap) cap *= 2;
            char *no = realloc(o, cap);
            if (!no) {
                free(o);
                return base_fail(err, "out of memory");
            }
            o = no;
        }
        /* all characters in the byte-level alphabet -> bytes; otherwise raw UTF-8 */
        size_t j = 0, w = len;
        int ok = 1;
        while (j < sl) {
            utf8proc_int32_t cp;
            utf8proc_ssize_t k =
                utf8proc_iterate((const utf8proc_uint8_t *)s + j, (utf8proc_ssize_t)(sl - j), &cp);
            if (k <= 0 || cp >= 324 || t->char_byte[cp] < 0) {
                ok = 0;
                break;
            }
            o[w++] = (char)t->char_byte[cp];
            j += (size_t)k;
        }
        if (ok) {
            len = w;
        } else {
            memcpy(o + len, s, sl);
            len += sl;
        }
    }
    o[len] = 0;
    *out = o;
    *out_len = len;
    return 0;
}

int32_t data_tok_vocab_size(const data_tok *t) {
    return t->n_ids;
}

const char *data_tok_token(const data_tok *t, int32_t id) {
    return id >= 0 && id < t->n_ids ? t->id_tok[id] : NULL;
}

int32_t data_tok_token_id(const data_tok *t, const char *token) {
    size_t l = strlen(token);
    smap_slot *s = smap_find(&t->added_map, token, l);
    if (s) return t->added[s->val].id;
    s = smap_find(&t->vocab, token, l);
    return s ? s->val : -1;
}

int data_tok_is_special(const data_tok *t, int32_t id) {
    return id >= 0 && id < t->n_ids && t->id_special[id];
}

int32_t data_tok_bos_id(const data_tok *t) {
    return t->bos;
}
int32_t data_tok_eos_id(const data_tok *t) {
    return t->eos;
}
int32_t data_tok_pad_id(const data_tok *t) {
    return t->pad;
}
