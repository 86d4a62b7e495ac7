/* safetensors reader (mmap + validation) and atomic writer. See checkpoint.h. */
#include "checkpoint/internal.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#if defined(__AVX2__) || defined(__F16C__)
#include <immintrin.h>
#endif

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "titan's safetensors code assumes a little-endian host"
#endif

/* The reference implementation refuses headers over 100 MB; so do we. */
#define CKPT_MAX_HEADER ((uint64_t)100 * 1000 * 1000)

/* Every dtype of the format (safetensors 0.8) with its element size in bytes; 0 marks the
 * ones titan names but cannot hold (sub-byte F4/F6 packing, complex). Indexed by ckpt_dtype. */
static const struct {
    const char *name;
    size_t size;
} g_dtypes[CKPT_DTYPE_COUNT] = {
    [CKPT_F32] = {"F32", 4},         [CKPT_F64] = {"F64", 8},
    [CKPT_I32] = {"I32", 4},         [CKPT_I64] = {"I64", 8},
    [CKPT_BF16] = {"BF16", 2},       [CKPT_F16] = {"F16", 2},
    [CKPT_BOOL] = {"BOOL", 1},       [CKPT_U8] = {"U8", 1},
    [CKPT_I8] = {"I8", 1},           [CKPT_I16] = {"I16", 2},
    [CKPT_U16] = {"U16", 2},         [CKPT_U32] = {"U32", 4},
    [CKPT_U64] = {"U64", 8},         [CKPT_F8_E4M3] = {"F8_E4M3", 1},
    [CKPT_F8_E5M2] = {"F8_E5M2", 1}, [CKPT_F8_E8M0] = {"F8_E8M0", 1},
};

/* Names the format defines that titan refuses, with the reason (for the error message). */
static const char *const g_refused[][2] = {
    {"F4", "4-bit packed"}, {"F6_E2M3", "6-bit packed"},     {"F6_E3M2", "6-bit packed"},
    {"C64", "complex"},     {"F8_E4M3FNUZ", "FNUZ variant"}, {"F8_E5M2FNUZ", "FNUZ variant"},
};

const char *ckpt_dtype_name(ckpt_dtype d) {
    return (unsigned)d < CKPT_DTYPE_COUNT ? g_dtypes[d].name : "?";
}

size_t ckpt_dtype_size(ckpt_dtype d) {
    return (unsigned)d < CKPT_DTYPE_COUNT ? g_dtypes[d].size : 0;
}

int ckpt_dtype_parse(const char *s, ckpt_dtype *out) {
    for (int i = 0; i < CKPT_DTYPE_COUNT; i++) {
        if (strcmp(s, g_dtypes[i].name) == 0) {
            *out = (ckpt_dtype)i;
            return 0;
        }
    }
    return -1;
}

int ckpt_dtype_is_float(ckpt_dtype d) {
    return d == CKPT_F32 || d == CKPT_F64 || d == CKPT_BF16 || d == CKPT_F16 || d == CKPT_F8_E4M3 ||
           d == CKPT_F8_E5M2 || d == CKPT_F8_E8M0;
}

/* ---- scalar conversions ------------------------------------------------------------ */

float ckpt_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float ckpt_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    uint32_t u;
    if (exp == 0x1f) { /* inf / nan: a NaN comes out quiet, payload kept, as vcvtph2ps does */
        u = sign | 0x7f800000u | (man << 13) | (man ? 0x400000u : 0);
    } else if (exp != 0) {
        u = sign | ((exp + 112) << 23) | (man << 13); /* normal: rebias 15 -> 127 */
    } else if (man == 0) {
        u = sign; /* +-0 */
    } else {
        /* subnormal: man * 2^-24, exact in fp32 */
        float f = ldexpf((float)man, -24);
        return sign ? -f : f;
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t ckpt_f32_to_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

uint16_t ckpt_f32_to_f16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    const uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu)); /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to inf */
    if (a < 0x38800000u) {
        /* below 2^-14: a subnormal half, |x| * 2^24 rounded to an integer (ties to even;
         * the scaling is exact), 1024 being the smallest normal's encoding */
        float f;
        memcpy(&f, &a, 4);
        return (uint16_t)(sign | (uint32_t)lrintf(f * 16777216.0f));
    }
    /* normal: round the 13 dropped mantissa bits to nearest even, rebias 127 -> 15 */
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u) - (112u << 23);
    return (uint16_t)(sign | (r >> 13));
}

/* float8 e4m3fn (torch.float8_e4m3fn): bias 7, no infinities, S.1111.111 is NaN. */
static float f8_e4m3_to_f32(uint8_t b) {
    const int exp = (b >> 3) & 0xf, man = b & 7;
    float v;
    if (exp == 15 && man == 7)
        v = NAN;
    else if (exp == 0)
        v = ldexpf((float)man, -9);
    else
        v = ldexpf((float)(8 + man), exp - 10);
    return (b & 0x80) ? -v : v;
}

/* float8 e8m0 (MX scales): 2^(e-127), 0xff is NaN. */
static float f8_e8m0_to_f32(uint8_t b) {
    return b == 0xff ? NAN : ldexpf(1.0f, (int)b - 127);
}

/* Element i of a tensor's raw bytes as double (any dtype of the table). */
static double elem_f64(ckpt_dtype d, const unsigned char *p, size_t i) {
    union {
        float f;
        double d;
        int8_t i8;
        uint8_t u8;
        int16_t i16;
        uint16_t u16;
        int32_t i32;
        uint32_t u32;
        int64_t i64;
        uint64_t u64;
    } v;
    memcpy(&v, p + i * g_dtypes[d].size, g_dtypes[d].size);
    switch (d) {
    case CKPT_F32:
        return v.f;
    case CKPT_F64:
        return v.d;
    case CKPT_BF16:
        return ckpt_bf16_to_f32(v.u16);
    case CKPT_F16:
        return ckpt_f16_to_f32(v.u16);
    case CKPT_F8_E4M3:
        return f8_e4m3_to_f32(v.u8);
    case CKPT_F8_E5M2:
        return ckpt_f16_to_f32((uint16_t)(v.u8 << 8)); /* the top byte of f16 */
    case CKPT_F8_E8M0:
        return f8_e8m0_to_f32(v.u8);
    case CKPT_BOOL:
        return v.u8 != 0;
    case CKPT_U8:
        return v.u8;
    case CKPT_I8:
        return v.i8;
    case CKPT_I16:
        return v.i16;
    case CKPT_U16:
        return v.u16;
    case CKPT_I32:
        return v.i32;
    case CKPT_U32:
        return v.u32;
    case CKPT_I64:
        return (double)v.i64;
    case CKPT_U64:
        return (double)v.u64;
    default:
        return NAN;
    }
}

/* ---- reader ------------------------------------------------------------------------ */

static uint64_t load_le64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static void file_clear(ckpt_file *f) {
    memset(f, 0, sizeof *f);
}

void ckpt_close(ckpt_file *f) {
    if (!f) return;
    if (f->tensors) {
        for (int i = 0; i < f->n_tensors; i++) free(f->tensors[i].name);
        free(f->tensors);
    }
    if (f->meta) {
        for (int i = 0; i < f->n_meta; i++) {
            free((char *)f->meta[i].key);
            free((char *)f->meta[i].value);
        }
        free(f->meta);
    }
    if (f->map && f->mapped) munmap(f->map, f->size);
    free(f->by_name);
    free(f->path);
    file_clear(f);
}

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

static int span_cmp(const void *a, const void *b) {
    const ckpt_span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return x->idx - y->idx;
}

ckpt_spans ckpt_spans_tile(ckpt_span *s, size_t n, uint64_t begin, uint64_t end, size_t *at,
                           uint64_t *cursor) {
    qsort(s, n, sizeof *s, span_cmp);
    *cursor = begin;
    for (*at = 0; *at < n; (*at)++) {
        if (s[*at].begin != *cursor)
            return s[*at].begin > *cursor ? CKPT_SPANS_GAP : CKPT_SPANS_OVERLAP;
        *cursor = s[*at].end;
    }
    return *cursor == end ? CKPT_SPANS_OK : CKPT_SPANS_SHORT;
}

static int kv_cmp(const void *a, const void *b) {
    return strcmp(((const ckpt_kv *)a)->key, ((const ckpt_kv *)b)->key);
}

/* f->meta, sorted by key for ckpt_meta_get's binary search (a training checkpoint's shard
 * holds a few keys per tensor). */
static int parse_metadata(ckpt_file *f, json_t *obj, base_err *err) {
    const char *path = f->path;
    if (json_is_null(obj)) return 0; /* "__metadata__": null (Option::None in the reference) */
    if (!json_is_object(obj))
        return base_fail(err, "%s: __metadata__ is not a JSON object of strings", path);
    size_t n = json_object_size(obj);
    f->meta = calloc(n ? n : 1, sizeof *f->meta);
    if (!f->meta) return base_fail(err, "%s: out of memory for __metadata__", path);
    const char *key;
    json_t *val;
    json_object_foreach(obj, key, val) {
        if (!json_is_string(val))
            return base_fail(err, "%s: __metadata__ field '%s' is not a string", path, key);
        ckpt_kv *kv = &f->meta[f->n_meta];
        kv->key = dup_str(key);
        kv->value = dup_str(json_string_value(val));
        f->n_meta++;
        if (!kv->key || !kv->value)
            return base_fail(err, "%s: out of memory for __metadata__", path);
    }
    qsort(f->meta, (size_t)f->n_meta, sizeof *f->meta, kv_cmp);
    return 0;
}

static int get_offset(json_t *v, uint64_t *out) {
    if (!json_is_integer(v)) return -1;
    json_int_t x = json_integer_value(v);
    if (x < 0) return -1;
    *out = (uint64_t)x;
    return 0;
}

static int parse_tensor(ckpt_file *f, const char *name, json_t *obj, uint64_t data_size,
                        ckpt_tensor *t, ckpt_span *sp, base_err *err) {
    const char *path = f->path;
    if (!json_is_object(obj))
        return base_fail(err, "%s: tensor '%s': header entry is not a JSON object", path, name);

    json_t *jd = json_object_get(obj, "dtype");
    if (!jd) return base_fail(err, "%s: tensor '%s': missing field 'dtype'", path, name);
    if (!json_is_string(jd))
        return base_fail(err, "%s: tensor '%s': field 'dtype' is not a string", path, name);
    const char *dname = json_string_value(jd);
    if (ckpt_dtype_parse(dname, &t->dtype) != 0) {
        for (size_t i = 0; i < sizeof g_refused / sizeof g_refused[0]; i++)
            if (strcmp(dname, g_refused[i][0]) == 0)
                return base_fail(err, "%s: tensor '%s': dtype %s (%s) is not supported", path, name,
                                 dname, g_refused[i][1]);
        return base_fail(err, "%s: tensor '%s': unknown dtype '%s'", path, name, dname);
    }

    json_t *js = json_object_get(obj, "shape");
    if (!js) return base_fail(err, "%s: tensor '%s': missing field 'shape'", path, name);
    if (!json_is_array(js))
        return base_fail(err, "%s: tensor '%s': field 'shape' is not an array", path, name);
    size_t nd = json_array_size(js);
    if (nd > CKPT_MAX_DIMS)
        return base_fail(err, "%s: tensor '%s': shape has %zu dimensions (at most %d supported)",
                         path, name, nd, CKPT_MAX_DIMS);
    t->ndim = (int)nd;
    int64_t numel = 1;
    for (size_t i = 0; i < nd; i++) {
        json_t *d = json_array_get(js, i);
        if (!json_is_integer(d) || json_integer_value(d) < 0)
            return base_fail(err, "%s: tensor '%s': shape[%zu] is not a non-negative integer", path,
                             name, i);
        t->shape[i] = (int64_t)json_integer_value(d);
        if (__builtin_mul_overflow(numel, t->shape[i], &numel))
            return base_fail(err, "%s: tensor '%s': shape product overflows 64 bits", path, name);
    }
    t->numel = numel;
    uint64_t nbytes;
    if (__builtin_mul_overflow((uint64_t)numel, (uint64_t)ckpt_dtype_size(t->dtype), &nbytes))
        return base_fail(err, "%s: tensor '%s': byte size of the shape overflows 64 bits", path,
                         name);

    json_t *jo = json_object_get(obj, "data_offsets");
    if (!jo) return base_fail(err, "%s: tensor '%s': missing field 'data_offsets'", path, name);
    uint64_t b, e;
    if (!json_is_array(jo) || json_array_size(jo) != 2 || get_offset(json_array_get(jo, 0), &b) ||
        get_offset(json_array_get(jo, 1), &e))
        return base_fail(err,
                         "%s: tensor '%s': field 'data_offsets' is not an array of two "
                         "non-negative integers",
                         path, name);
    if (e < b)
        return base_fail(err, "%s: tensor '%s': data_offsets [%llu, %llu] end before begin", path,
                         name, (unsigned long long)b, (unsigned long long)e);
    if (e > data_size)
        return base_fail(err,
                         "%s: tensor '%s': data_offsets [%llu, %llu] out of bounds of the data "
                         "section (%llu bytes)",
                         path, name, (unsigned long long)b, (unsigned long long)e,
                         (unsigned long long)data_size);
    if (e - b != nbytes)
        return base_fail(err,
                         "%s: tensor '%s': data_offsets span %llu bytes but shape x %s needs %llu",
                         path, name, (unsigned long long)(e - b), ckpt_dtype_name(t->dtype),
                         (unsigned long long)nbytes);
    t->nbytes = (size_t)nbytes;
    sp->begin = b;
    sp->end = e;
    return 0;
}

/* Best effort: the key jansson rejected as a duplicate ends just before `pos`. */
static void duplicate_key_near(const char *hdr, size_t len, int pos, char *out, size_t cap) {
    out[0] = 0;
    if (pos <= 0 || (size_t)pos > len) return;
    int end = pos - 1;
    while (end >= 0 && hdr[end] != '"') end--;
    if (end <= 0) return;
    int beg = end - 1;
    while (beg >= 0 && !(hdr[beg] == '"' && (beg == 0 || hdr[beg - 1] != '\\'))) beg--;
    if (beg < 0) return;
    size_t n = (size_t)(end - beg - 1);
    if (n >= cap) n = cap - 1;
    memcpy(out, hdr + beg + 1, n);
    out[n] = 0;
}

/* f->by_name: tensor indices sorted by name, for ckpt_find's binary search (a 30B MoE file
 * holds thousands of tensors, looked up one by one). */
static int by_name_cmp(const void *a, const void *b, void *ctx) {
    const ckpt_file *f = ctx;
    return strcmp(f->tensors[*(const int *)a].name, f->tensors[*(const int *)b].name);
}

int ckpt_open(ckpt_file *f, const char *path, base_err *err) {
    file_clear(f);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return base_fail(err, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return base_fail(err, "%s: not a regular file", path);
    }
    size_t size = (size_t)st.st_size;
    void *map = NULL;
    if (size >= 8) {
        map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            close(fd);
            return base_fail(err, "%s: mmap failed: %s", path, strerror(errno));
        }
    }
    close(fd);
    if (ckpt_open_mem(f, path, map, size, err) != 0) {
        if (map) munmap(map, size);
        return -1;
    }
    f->mapped = map != NULL;
    f->dev = (uint64_t)st.st_dev;
    f->ino = (uint64_t)st.st_ino;
    return 0;
}

int ckpt_open_mem(ckpt_file *f, const char *path, const void *buf, size_t size, base_err *err) {
    file_clear(f);
    f->path = dup_str(path);
    if (!f->path) return base_fail(err, "%s: out of memory", path);
    if (size < 8) {
        base_fail(err, "%s: file is %zu bytes, too short for the 8-byte header length", path, size);
        goto fail;
    }
    f->map = (unsigned char *)buf;
    f->size = size;

    uint64_t hlen = load_le64(f->map);
    if (hlen > size - 8) {
        base_fail(err, "%s: header length %llu exceeds the file size (%zu bytes)", path,
                  (unsigned long long)hlen, size);
        goto fail;
    }
    if (hlen > CKPT_MAX_HEADER) {
        base_fail(err, "%s: header length %llu exceeds the limit of %llu bytes", path,
                  (unsigned long long)hlen, (unsigned long long)CKPT_MAX_HEADER);
        goto fail;
    }
    if (hlen < 2 || f->map[8] != '{') {
        base_fail(err, "%s: invalid JSON header: does not start with '{'", path);
        goto fail;
    }
    uint64_t data_size = size - 8 - hlen;
    const unsigned char *data = f->map + 8 + hlen;

    json_error_t jerr;
    const char *hdr = (const char *)f->map + 8;
    json_t *root = json_loadb(hdr, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        if (json_error_code(&jerr) == json_error_duplicate_key) {
            char key[256];
            duplicate_key_near(hdr, (size_t)hlen, jerr.position, key, sizeof key);
            base_fail(err,
                      "%s: invalid JSON header: duplicate tensor name '%s' (line %d column %d)",
                      path, key, jerr.line, jerr.column);
        } else {
            base_fail(err, "%s: invalid JSON header: %s (line %d column %d)", path, jerr.text,
                      jerr.line, jerr.column);
        }
        goto fail;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        base_fail(err, "%s: JSON header is not an object", path);
        goto fail;
    }

    size_t n_entries = json_object_size(root);
    f->tensors = calloc(n_entries ? n_entries : 1, sizeof *f->tensors);
    ckpt_span *spans = calloc(n_entries ? n_entries : 1, sizeof *spans);
    if (!f->tensors || !spans) {
        free(spans);
        json_decref(root);
        base_fail(err, "%s: out of memory for %zu header entries", path, n_entries);
        goto fail;
    }
    const char *key;
    json_t *val;
    int rc = 0;
    json_object_foreach(root, key, val) {
        if (strcmp(key, "__metadata__") == 0) {
            if ((rc = parse_metadata(f, val, err)) != 0) break;
            continue;
        }
        ckpt_tensor *t = &f->tensors[f->n_tensors];
        ckpt_span *sp = &spans[f->n_tensors];
        if ((rc = parse_tensor(f, key, val, data_size, t, sp, err)) != 0) break;
        t->name = dup_str(key);
        if (!t->name) {
            rc = base_fail(err, "%s: out of memory", path);
            break;
        }
        t->data = data + sp->begin;
        sp->idx = f->n_tensors;
        f->n_tensors++;
    }
    json_decref(root);

    /* The tensors must tile the data section exactly: no gaps, no overlaps, no tail. */
    size_t at;
    uint64_t cur;
    const ckpt_spans tiled =
        rc ? CKPT_SPANS_OK : ckpt_spans_tile(spans, (size_t)f->n_tensors, 0, data_size, &at, &cur);
    if (tiled == CKPT_SPANS_GAP || tiled == CKPT_SPANS_OVERLAP)
        rc = base_fail(err,
                       "%s: tensor '%s': data begins at byte %llu, %s the previous tensor, "
                       "which ends at %llu%s",
                       path, f->tensors[spans[at].idx].name, (unsigned long long)spans[at].begin,
                       tiled == CKPT_SPANS_GAP ? "after" : "overlapping", (unsigned long long)cur,
                       tiled == CKPT_SPANS_GAP ? " (a gap in the data section)" : "");
    else if (tiled == CKPT_SPANS_SHORT)
        rc = base_fail(err,
                       "%s: tensors cover %llu bytes of the data section but it has %llu "
                       "(trailing bytes)",
                       path, (unsigned long long)cur, (unsigned long long)data_size);
    free(spans);
    if (rc != 0) goto fail;
    f->by_name = malloc(sizeof *f->by_name * (size_t)(f->n_tensors ? f->n_tensors : 1));
    if (!f->by_name) {
        base_fail(err, "%s: out of memory", path);
        goto fail;
    }
    for (int i = 0; i < f->n_tensors; i++) f->by_name[i] = i;
    qsort_r(f->by_name, (size_t)f->n_tensors, sizeof *f->by_name, by_name_cmp, f);
    return 0;

fail:
    ckpt_close(f);
    return -1;
}

const ckpt_tensor *ckpt_find(const ckpt_file *f, const char *name) {
    int lo = 0, hi = f->n_tensors - 1;
    while (lo <= hi) {
        const int mid = lo + (hi - lo) / 2;
        const ckpt_tensor *t = &f->tensors[f->by_name[mid]];
        const int c = strcmp(name, t->name);
        if (c == 0) return t;
        if (c < 0)
            hi = mid - 1;
        else
            lo = mid + 1;
    }
    return NULL;
}

const char *ckpt_meta_get(const ckpt_file *f, const char *key) {
    const ckpt_kv k = {key, NULL};
    const ckpt_kv *kv =
        f->n_meta ? bsearch(&k, f->meta, (size_t)f->n_meta, sizeof k, kv_cmp) : NULL;
    return kv ? kv->value : NULL;
}

const float *ckpt_tensor_f32(const ckpt_tensor *t) {
    return t->dtype == CKPT_F32 && ((uintptr_t)t->data & 3) == 0 ? (const float *)t->data : NULL;
}

void ckpt_tensor_release(const ckpt_file *f, const ckpt_tensor *t) {
    if (!f->mapped || t->nbytes == 0) return;
    /* only the pages wholly inside the tensor: neighbours may still be wanted */
    base_release_pages((void *)t->data, t->nbytes);
}

/* n bf16 (bf16 != 0) or f16 values at p (any alignment) to fp32, 8 at a time where the
 * baseline ISA has the instructions (AVX2's widening shift; F16C's vcvtph2ps, exact like the
 * scalar conversion), the rest one by one. */
void ckpt_half_to_f32_n(const void *src, float *out, size_t n, int bf16) {
    const unsigned char *p = src;
    size_t i = 0;
#if defined(__AVX2__)
    if (bf16)
        for (; i + 8 <= n; i += 8) {
            const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p + 2 * i)));
            _mm256_storeu_ps(out + i, _mm256_castsi256_ps(_mm256_slli_epi32(h, 16)));
        }
#endif
#if defined(__F16C__) && defined(__AVX__)
    if (!bf16)
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(out + i,
                             _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 2 * i))));
#endif
    for (; i < n; i++) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        out[i] = bf16 ? ckpt_bf16_to_f32(h) : ckpt_f16_to_f32(h);
    }
}

int ckpt_tensor_to_f32(const ckpt_file *f, const ckpt_tensor *t, float *out, base_err *err) {
    const unsigned char *p = t->data;
    const size_t n = (size_t)t->numel;
    if (!ckpt_dtype_is_float(t->dtype))
        return base_fail(err, "%s: tensor '%s': dtype %s is not a floating type", f->path, t->name,
                         ckpt_dtype_name(t->dtype));
    /* the common dtypes get their own loops (a big model is mostly these); the rest go
     * through the generic element reader */
    if (t->dtype == CKPT_F32) {
        memcpy(out, p, n * 4);
    } else if (t->dtype == CKPT_BF16 || t->dtype == CKPT_F16) {
        /* in blocks of 64K elements over the threads: the first touch of a fresh output
         * buffer page-faults, and the faults then run in parallel too */
        const size_t block = (size_t)1 << 16, nb = (n + block - 1) / block;
        const int bf = t->dtype == CKPT_BF16;
#pragma omp parallel for schedule(static) if (n > (1 << 20))
        for (size_t b = 0; b < nb; b++) {
            const size_t lo = b * block, m = n - lo < block ? n - lo : block;
            ckpt_half_to_f32_n(p + 2 * lo, out + lo, m, bf);
        }
    } else {
        for (size_t i = 0; i < n; i++) out[i] = (float)elem_f64(t->dtype, p, i);
    }
    return 0;
}

int ckpt_tensor_to_f64(const ckpt_file *f, const ckpt_tensor *t, double *out, base_err *err) {
    if ((unsigned)t->dtype >= CKPT_DTYPE_COUNT)
        return base_fail(err, "%s: tensor '%s': unsupported dtype", f->path, t->name);
    for (size_t i = 0; i < (size_t)t->numel; i++) out[i] = elem_f64(t->dtype, t->data, i);
    return 0;
}

int ckpt_tensor_to_i32(const ckpt_file *f, const ckpt_tensor *t, int32_t *out, base_err *err) {
    const unsigned char *p = t->data;
    size_t n = (size_t)t->numel;
    if (t->dtype == CKPT_I32) {
        memcpy(out, p, n * 4);
        return 0;
    }
    if (ckpt_dtype_is_float(t->dtype))
        return base_fail(err, "%s: tensor '%s': dtype %s is not an integer type", f->path, t->name,
                         ckpt_dtype_name(t->dtype));
    for (size_t i = 0; i < n; i++) {
        /* integers up to 2^53 are exact in double; larger ones fail the range check anyway */
        double x = elem_f64(t->dtype, p, i);
        if (!(x >= INT32_MIN && x <= INT32_MAX))
            return base_fail(err, "%s: tensor '%s': element %zu = %.17g does not fit in int32",
                             f->path, t->name, i, x);
        out[i] = (int32_t)x;
    }
    return 0;
}

static void *get_converted(const ckpt_file *f, const char *name, size_t elsize, int kind,
                           int64_t *numel, base_err *err) {
    const ckpt_tensor *t = ckpt_find(f, name);
    if (!t) {
        base_fail(err, "%s: no tensor '%s'", f->path, name);
        return NULL;
    }
    void *out = base_alloc_uninit((size_t)t->numel * elsize); /* written whole, or freed */
    if (!out) {
        base_fail(err, "%s: tensor '%s': out of memory", f->path, name);
        return NULL;
    }
    int rc = kind == 0   ? ckpt_tensor_to_f32(f, t, out, err)
             : kind == 1 ? ckpt_tensor_to_f64(f, t, out, err)
                         : ckpt_tensor_to_i32(f, t, out, err);
    if (rc != 0) {
        base_free(out);
        return NULL;
    }
    if (numel) *numel = t->numel;
    return out;
}

float *ckpt_get_f32(const ckpt_file *f, const char *name, int64_t *numel, base_err *err) {
    return get_converted(f, name, sizeof(float), 0, numel, err);
}

double *ckpt_get_f64(const ckpt_file *f, const char *name, int64_t *numel, base_err *err) {
    return get_converted(f, name, sizeof(double), 1, numel, err);
}

int32_t *ckpt_get_i32(const ckpt_file *f, const char *name, int64_t *numel, base_err *err) {
    return get_converted(f, name, sizeof(int32_t), 2, numel, err);
}

/* ---- writer ------------------------------------------------------------------------ */

/* A tensor's bytes: raw, or fp32 values converted to its dtype a chunk at a time (so a
 * bf16 export of a large model never holds a converted copy). */
/* Writes t's nbytes; *crc: the CRC-32C of the bytes written (when t->crc32c). */
static int write_tensor_data(int fd, const ckpt_wtensor *t, size_t nbytes, uint32_t *crc) {
    *crc = 0;
    if (!t->from_f32 || t->dtype == CKPT_F32) {
        if (t->crc32c) *crc = base_crc32c(0, t->data, nbytes);
        return base_write_all(fd, t->data, nbytes);
    }
    enum { CHUNK = 1 << 20 }; /* elements per conversion chunk (2 MiB of output) */
    uint16_t *buf = malloc(CHUNK * sizeof *buf);
    if (!buf) return errno = 0, -1;
    const float *src = t->data;
    const size_t n = nbytes / 2;
    const int bf = t->dtype == CKPT_BF16;
    int rc = 0;
    for (size_t c = 0; c < n && rc == 0; c += CHUNK) {
        const size_t m = n - c < CHUNK ? n - c : CHUNK;
        ckpt_f32_to_half_n(src + c, buf, m, bf);
        if (t->crc32c) *crc = base_crc32c(*crc, buf, m * sizeof *buf);
        rc = base_write_all(fd, buf, m * sizeof *buf);
    }
    free(buf);
    return rc;
}

/* key[CRC_KEY_CAP] = "<name>.crc32c", the __metadata__ key of a tensor's checksum; -1 when the
 * name does not fit (the writer refuses such a name, so no such key is ever recorded). */
enum { CRC_KEY_CAP = 1024 };
static int crc_key(char *key, const char *name) {
    return snprintf(key, CRC_KEY_CAP, "%s.crc32c", name) < CRC_KEY_CAP ? 0 : -1;
}

int ckpt_tensor_verify(const ckpt_file *f, const ckpt_tensor *t, base_err *err) {
    char key[CRC_KEY_CAP];
    if (crc_key(key, t->name)) return 0;
    const char *v = ckpt_meta_get(f, key);
    if (!v) {
        /* a file that checks some tensors checks all (titan writes one per tensor): a key
         * missing beside others is a damaged or edited header, not an older file */
        for (int i = 0; i < f->n_meta; i++) {
            const char *k = f->meta[i].key, *dot = strrchr(k, '.');
            if (dot && !strncmp(dot, ".crc32", 6))
                return base_fail(err,
                                 "%s: __metadata__ has no \"%s\" but has \"%s\": the file "
                                 "records a CRC-32C for some tensors, not for \"%s\" (a damaged "
                                 "or edited header)",
                                 f->path, key, k, t->name);
        }
        return 0;
    }
    uint32_t want;
    if (ckpt_hex32(v, &want))
        return base_fail(err, "%s: __metadata__ \"%s\" is \"%s\", not 8 hex digits", f->path, key,
                         v);
    const uint32_t got = base_crc32c(0, t->data, t->nbytes);
    if (got != want)
        return base_fail(err,
                         "%s: tensor \"%s\" is corrupt: its %zu bytes have CRC-32C %08x, the "
                         "file recorded %08x when it was written",
                         f->path, t->name, t->nbytes, got, want);
    return 1;
}

int ckpt_hex32(const char *s, uint32_t *out) {
    int hex = s && strlen(s) == 8;
    for (int i = 0; hex && i < 8; i++) hex = isxdigit((unsigned char)s[i]) != 0;
    if (!hex) return -1;
    *out = (uint32_t)strtoul(s, NULL, 16);
    return 0;
}

void ckpt_f32_to_half_n(const float *src, uint16_t *dst, size_t n, int bf16) {
    size_t i = 0;
#if defined(__AVX2__)
    if (bf16) /* ckpt_f32_to_bf16 on 8 lanes: round to nearest even, NaN quieted */
        for (; i + 8 <= n; i += 8) {
            const __m256i u = _mm256_loadu_si256((const __m256i *)(src + i));
            const __m256i nan = _mm256_cmpgt_epi32(
                _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
            const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
            const __m256i rnd = _mm256_srli_epi32(
                _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), odd)), 16);
            const __m256i qnan = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
            const __m256i r = _mm256_blendv_epi8(rnd, qnan, nan); /* 8 x 16 bits in 32 */
            /* pack within 128-bit lanes, then gather the two lanes' low halves */
            const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
            _mm_storeu_si128((__m128i *)(dst + i), _mm256_castsi256_si128(p));
        }
#endif
#if defined(__F16C__) && defined(__AVX__)
    if (!bf16) /* IEEE round to nearest even, like ckpt_f32_to_f16 (tested over bit patterns) */
        for (; i + 8 <= n; i += 8)
            _mm_storeu_si128((__m128i *)(dst + i),
                             _mm256_cvtps_ph(_mm256_loadu_ps(src + i),
                                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
    for (; i < n; i++) dst[i] = bf16 ? ckpt_f32_to_bf16(src[i]) : ckpt_f32_to_f16(src[i]);
}

/* Builds the compact JSON header; sizes[i] receives each tensor's byte count. crcs[i]: the
 * "<name>.crc32c" of a tensor with crc32c (NULL: 00000000, a placeholder of the same length,
 * which ckpt_write overwrites once the data are written). */
static char *build_header(const char *path, const ckpt_wtensor *ts, int n, const ckpt_kv *meta,
                          int n_meta, const uint32_t *crcs, size_t *sizes, base_err *err) {
    json_t *root = json_object();
    if (!root) {
        base_fail(err, "%s: out of memory", path);
        return NULL;
    }
    char *out = NULL;
    int any_crc = 0;
    for (int i = 0; i < n; i++) any_crc |= ts[i].crc32c;
    if (n_meta > 0 || any_crc) {
        json_t *m = json_object();
        if (!m || json_object_set_new(root, "__metadata__", m) != 0) {
            base_fail(err, "%s: out of memory", path);
            goto done;
        }
        for (int i = 0; i < n_meta; i++) {
            if (!meta[i].key || !meta[i].value) {
                base_fail(err, "%s: __metadata__ entry %d has a NULL key or value", path, i);
                goto done;
            }
            json_t *s = json_string(meta[i].value);
            if (!s || json_object_set_new(m, meta[i].key, s) != 0) {
                base_fail(err, "%s: __metadata__ field '%s': not valid UTF-8", path, meta[i].key);
                goto done;
            }
        }
        for (int i = 0; i < n; i++) {
            char key[CRC_KEY_CAP], val[16];
            if (!ts[i].crc32c || !ts[i].name) continue;
            if (crc_key(key, ts[i].name)) {
                base_fail(err, "%s: tensor '%s': name too long", path, ts[i].name);
                goto done;
            }
            snprintf(val, sizeof val, "%08x", crcs ? crcs[i] : 0u);
            if (json_object_get(m, key)) {
                base_fail(err, "%s: __metadata__ field '%s' given twice", path, key);
                goto done;
            }
            json_t *sv = json_string(val);
            if (!sv || json_object_set_new(m, key, sv) != 0) {
                base_fail(err, "%s: __metadata__ field '%s': not valid UTF-8", path, key);
                goto done;
            }
        }
    }
    uint64_t offset = 0;
    for (int i = 0; i < n; i++) {
        const ckpt_wtensor *t = &ts[i];
        if (!t->name) {
            base_fail(err, "%s: tensor %d has no name", path, i);
            goto done;
        }
        if (strcmp(t->name, "__metadata__") == 0 || json_object_get(root, t->name)) {
            base_fail(err, "%s: tensor '%s': duplicate or reserved name", path, t->name);
            goto done;
        }
        if ((unsigned)t->dtype >= CKPT_DTYPE_COUNT || t->ndim < 0 || t->ndim > CKPT_MAX_DIMS ||
            (t->from_f32 && t->dtype != CKPT_F32 && t->dtype != CKPT_BF16 &&
             t->dtype != CKPT_F16)) {
            base_fail(err, "%s: tensor '%s': bad dtype or ndim %d", path, t->name, t->ndim);
            goto done;
        }
        uint64_t numel = 1;
        json_t *shape = json_array();
        json_t *ent = json_object();
        json_t *offs = json_array();
        if (!shape || !ent || !offs) {
            json_decref(shape);
            json_decref(ent);
            json_decref(offs);
            base_fail(err, "%s: out of memory", path);
            goto done;
        }
        json_object_set_new(ent, "dtype", json_string(ckpt_dtype_name(t->dtype)));
        json_object_set_new(ent, "shape", shape);
        json_object_set_new(ent, "data_offsets", offs);
        if (json_object_set_new(root, t->name, ent) != 0) {
            base_fail(err, "%s: tensor '%s': name is not valid UTF-8", path, t->name);
            goto done;
        }
        for (int d = 0; d < t->ndim; d++) {
            if (t->shape[d] < 0 || __builtin_mul_overflow(numel, (uint64_t)t->shape[d], &numel)) {
                base_fail(err, "%s: tensor '%s': bad shape[%d] = %lld", path, t->name, d,
                          (long long)t->shape[d]);
                goto done;
            }
            json_array_append_new(shape, json_integer(t->shape[d]));
        }
        uint64_t nbytes;
        if (__builtin_mul_overflow(numel, (uint64_t)ckpt_dtype_size(t->dtype), &nbytes) ||
            nbytes > (uint64_t)LLONG_MAX - offset) {
            base_fail(err, "%s: tensor '%s': size overflows", path, t->name);
            goto done;
        }
        if (nbytes > 0 && !t->data) {
            base_fail(err, "%s: tensor '%s': NULL data", path, t->name);
            goto done;
        }
        json_array_append_new(offs, json_integer((json_int_t)offset));
        json_array_append_new(offs, json_integer((json_int_t)(offset + nbytes)));
        offset += nbytes;
        sizes[i] = (size_t)nbytes;
    }
    out = json_dumps(root, JSON_COMPACT);
    if (!out) base_fail(err, "%s: cannot serialise the JSON header", path);
done:
    json_decref(root);
    return out;
}

int ckpt_write_bytes(const char *path, const void *buf, size_t n, base_err *err) {
    return base_write_file_atomic(path, buf, n, err);
}

int ckpt_write(const char *path, const ckpt_wtensor *tensors, int n_tensors, const ckpt_kv *meta,
               int n_meta, base_err *err) {
    if (n_tensors < 0 || n_meta < 0 || (n_tensors > 0 && !tensors) || (n_meta > 0 && !meta))
        return base_fail(err, "%s: bad tensor or metadata list", path);
    size_t *sizes = calloc((size_t)(n_tensors > 0 ? n_tensors : 1), sizeof *sizes);
    uint32_t *crcs = calloc((size_t)(n_tensors > 0 ? n_tensors : 1), sizeof *crcs);
    char *hdr = NULL, *hdr2 = NULL;
    int any_crc = 0, rc = 0;
    for (int i = 0; i < n_tensors; i++) any_crc |= tensors[i].crc32c;
    if (!sizes || !crcs) {
        rc = base_fail(err, "%s: out of memory", path);
        goto out;
    }
    if (!(hdr = build_header(path, tensors, n_tensors, meta, n_meta, NULL, sizes, err))) {
        rc = -1;
        goto out;
    }
    size_t hlen = strlen(hdr);
    size_t padded = (hlen + 7) / 8 * 8; /* the data section starts 8-byte aligned */

    base_atomic a;
    if (base_atomic_open(&a, path, err)) {
        rc = -1;
        goto out;
    }
    const int fd = a.fd;
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    static const char spaces[8] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};
    if (base_write_all(fd, len8, 8) || base_write_all(fd, hdr, hlen) ||
        base_write_all(fd, spaces, padded - hlen)) {
        rc = base_fail(err, "%s: write to %s failed: %s", path, a.tmp, strerror(errno));
    }
    for (int i = 0; i < n_tensors && rc == 0; i++) {
        errno = 0;
        if (sizes[i] && write_tensor_data(fd, &tensors[i], sizes[i], &crcs[i]))
            rc = base_fail(err, "%s: tensor '%s': write to %s failed: %s", path, tensors[i].name,
                           a.tmp, errno ? strerror(errno) : "out of memory");
    }
    /* the checksums are known once the data are written: the same header with them, the
     * same length (8 hex digits each), over the placeholders */
    if (rc == 0 && any_crc) {
        if (!(hdr2 = build_header(path, tensors, n_tensors, meta, n_meta, crcs, sizes, err)))
            rc = -1;
        else if (strlen(hdr2) != hlen)
            rc = base_fail(err, "%s: the header changed length with its checksums", path);
        else if (lseek(fd, 8, SEEK_SET) != 8 || base_write_all(fd, hdr2, hlen))
            rc = base_fail(err, "%s: write to %s failed: %s", path, a.tmp, strerror(errno));
    }
    if (rc)
        base_atomic_abort(&a);
    else
        rc = base_atomic_commit(&a, err);
out:
    free(hdr);
    free(hdr2);
    free(sizes);
    free(crcs);
    return rc;
}
