/* Unit tests of the safetensors reader and writer (src/checkpoint/safetensors.c).
 *
 * Without arguments: round trips, the byte layout, dtype conversions, hand-made malformed
 * files (each must fail with a message naming the file), a truncation/corruption sweep, and
 * (when built with TITAN_SHARED_DIR) the BF16 tiny_qwen3 fixture; then loading and saving a
 * small titan model's parameters under HF names (missing/unexpected/mis-shaped keys, BF16,
 * tied lm_head).
 * --write-fixture PATH: writes the fixed file tests/reference/check_safetensors.py --check reads.
 * --check-python PATH: verifies the file check_safetensors.py --make wrote with the Python
 * safetensors package. */
#include "checkpoint/checkpoint.h"

#include "check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char g_tmpdir[256];

/* A fresh temp path (mkstemp), left empty; removed by the caller. */
static void temp_path(char *out, size_t cap, const char *tag) {
    snprintf(out, cap, "%s/st_%s_XXXXXX", g_tmpdir, tag);
    int fd = mkstemp(out);
    if (fd < 0) {
        perror("mkstemp");
        exit(2);
    }
    close(fd);
}

static void write_bytes(const char *path, const void *buf, size_t n) {
    FILE *fp = fopen(path, "wb");
    if (!fp || (n && fwrite(buf, 1, n, fp) != n)) {
        perror(path);
        exit(2);
    }
    fclose(fp);
}

static unsigned char *read_bytes(const char *path, size_t *n) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    long sz = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)sz + 1);
    if (fread(buf, 1, (size_t)sz, fp) != (size_t)sz) {
        fclose(fp);
        free(buf);
        return NULL;
    }
    fclose(fp);
    *n = (size_t)sz;
    return buf;
}

/* A file with an explicit header length field, the header text and the data bytes. */
static void make_raw(const char *path, uint64_t hlen_field, const char *hdr, const void *data,
                     size_t data_len) {
    size_t hl = strlen(hdr);
    size_t n = 8 + hl + data_len;
    unsigned char *buf = malloc(n);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(hlen_field >> (8 * i));
    memcpy(buf + 8, hdr, hl);
    if (data_len) memcpy(buf + 8 + hl, data, data_len);
    write_bytes(path, buf, n);
    free(buf);
}

static void make_file(const char *path, const char *hdr, const void *data, size_t data_len) {
    make_raw(path, strlen(hdr), hdr, data, data_len);
}

/* Expects ckpt_open to fail with a message naming the file and containing `want`. */
static void expect_bad(const char *what, const char *path, const char *want) {
    ckpt_file f;
    base_err err;
    err.msg[0] = 0;
    int rc = ckpt_open(&f, path, &err);
    CHECK(rc != 0, "[%s] malformed file was accepted", what);
    if (rc == 0) {
        ckpt_close(&f);
        return;
    }
    CHECK(strstr(err.msg, path) != NULL, "[%s] message does not name the file: %s", what, err.msg);
    if (want)
        CHECK(strstr(err.msg, want) != NULL, "[%s] message lacks '%s': %s", what, want, err.msg);
    CHECK(f.tensors == NULL && f.map == NULL && f.n_tensors == 0, "[%s] not cleared", what);
    ckpt_close(&f); /* safe on a failed open */
    printf("ok   malformed %-28s -> %s\n", what, err.msg);
}

static void bad_hdr(const char *what, const char *hdr, size_t data_len, const char *want) {
    char path[512];
    temp_path(path, sizeof path, "bad");
    unsigned char data[64] = {0};
    make_file(path, hdr, data, data_len);
    expect_bad(what, path, want);
    unlink(path);
}

/* ---- round trip -------------------------------------------------------------------- */

static const float k_f32[6] = {-1.0f, -0.5f, 0.0f, 0.5f, 1.0f, 1.5f};
static const int64_t k_i64[4] = {0, -1, 1099511627776LL, -9223372036854775807LL};
static const int32_t k_i32[4] = {1, -2, 2147483647, -2147483647 - 1};
static const float k_scalar = 3.25f;

/* fp32 values around the BF16/F16 rounding edges (ties, overflow, subnormals), written by
 * titan's converting writer; check_safetensors.py --check compares them with torch's casts. */
static const float k_edges[14] = {1.00390625f,
                                  1.01171875f,
                                  65519.0f,
                                  65520.0f,
                                  1e-8f,
                                  2.98023224e-08f /* 2^-25 */,
                                  8.94069672e-08f /* 3*2^-25 */,
                                  1e5f,
                                  -0.0f,
                                  0.1f,
                                  0.333333343f,
                                  -65504.0f,
                                  6.097555e-05f,
                                  3.4028235e38f};

static int write_fixture(const char *path, base_err *err) {
    ckpt_wtensor ts[7] = {
        {.name = "f32", .dtype = CKPT_F32, .ndim = 2, .shape = {2, 3}, .data = k_f32},
        {.name = "i64", .dtype = CKPT_I64, .ndim = 1, .shape = {4}, .data = k_i64},
        {.name = "i32", .dtype = CKPT_I32, .ndim = 2, .shape = {2, 2}, .data = k_i32},
        {.name = "scalar", .dtype = CKPT_F32, .ndim = 0, .data = &k_scalar},
        {.name = "empty", .dtype = CKPT_F32, .ndim = 2, .shape = {0, 3}, .data = NULL},
        {.name = "edges_bf16",
         .dtype = CKPT_BF16,
         .ndim = 1,
         .shape = {14},
         .data = k_edges,
         .from_f32 = 1},
        {.name = "edges_f16",
         .dtype = CKPT_F16,
         .ndim = 1,
         .shape = {14},
         .data = k_edges,
         .from_f32 = 1},
    };
    ckpt_kv meta[2] = {{"format", "pt"}, {"note", "quote \" backslash \\ unicode \xc3\xa9"}};
    return ckpt_write(path, ts, 7, meta, 2, err);
}

static void test_round_trip(void) {
    char path[512], tmp[600];
    temp_path(path, sizeof path, "rt");
    base_err err;
    CHECK(write_fixture(path, &err) == 0, "write: %s", err.msg);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    CHECK(access(tmp, F_OK) != 0, "temporary file %s left behind", tmp);

    ckpt_file f;
    int rc = ckpt_open(&f, path, &err);
    CHECK(rc == 0, "open: %s", err.msg);
    if (rc != 0) return;
    CHECK(f.n_tensors == 7, "n_tensors %d", f.n_tensors);
    const char *order[7] = {"f32", "i64", "i32", "scalar", "empty", "edges_bf16", "edges_f16"};
    for (int i = 0; i < 7 && i < f.n_tensors; i++)
        CHECK(strcmp(f.tensors[i].name, order[i]) == 0, "order %d: %s", i, f.tensors[i].name);
    CHECK(f.n_meta == 2, "n_meta %d", f.n_meta);
    const char *fm = ckpt_meta_get(&f, "format");
    CHECK(fm && strcmp(fm, "pt") == 0, "format meta");
    const char *note = ckpt_meta_get(&f, "note");
    CHECK(note && strcmp(note, "quote \" backslash \\ unicode \xc3\xa9") == 0, "note meta: %s",
          note ? note : "(null)");
    CHECK(ckpt_meta_get(&f, "nope") == NULL, "absent meta");

    const ckpt_tensor *t = ckpt_find(&f, "f32");
    CHECK(t && t->dtype == CKPT_F32 && t->ndim == 2 && t->shape[0] == 2 && t->shape[1] == 3 &&
              t->numel == 6 && t->nbytes == 24,
          "f32 descriptor");
    int64_t n = 0;
    float *x = ckpt_get_f32(&f, "f32", &n, &err);
    CHECK(x && n == 6 && memcmp(x, k_f32, sizeof k_f32) == 0, "f32 values");
    base_free(x);
    /* zero copy: an F32 tensor of a file titan wrote is a float pointer into the mapping */
    const float *view = ckpt_tensor_f32(t);
    CHECK(view == t->data && memcmp(view, k_f32, sizeof k_f32) == 0, "f32 zero-copy view");
    CHECK(ckpt_tensor_f32(ckpt_find(&f, "i64")) == NULL, "no f32 view of I64");
    ckpt_tensor_release(&f, t); /* the data stays readable afterwards */
    CHECK(memcmp(view, k_f32, sizeof k_f32) == 0, "f32 readable after release");
    const ckpt_tensor *eb = ckpt_find(&f, "edges_bf16"), *eh = ckpt_find(&f, "edges_f16");
    CHECK(eb && eb->dtype == CKPT_BF16 && eb->nbytes == 28 && eh && eh->dtype == CKPT_F16,
          "converted tensors");
    x = ckpt_get_f32(&f, "edges_f16", &n, &err);
    CHECK(x && x[2] == 65504.0f && isinf(x[3]) && x[8] == 0.0f && signbit(x[8]), "f16 edges");
    base_free(x);

    double *d = ckpt_get_f64(&f, "i64", &n, &err);
    CHECK(d && n == 4 && d[2] == 1099511627776.0 && d[1] == -1.0, "i64 as f64");
    base_free(d);
    t = ckpt_find(&f, "i64");
    CHECK(t && t->dtype == CKPT_I64 && memcmp(t->data, k_i64, sizeof k_i64) == 0, "i64 bytes");
    int32_t *iv = ckpt_get_i32(&f, "i64", &n, &err);
    CHECK(iv == NULL, "i64 with values beyond int32 converted to i32");
    CHECK(strstr(err.msg, path) && strstr(err.msg, "'i64'"), "range message: %s", err.msg);
    base_free(iv);

    iv = ckpt_get_i32(&f, "i32", &n, &err);
    CHECK(iv && n == 4 && memcmp(iv, k_i32, sizeof k_i32) == 0, "i32 values");
    base_free(iv);

    t = ckpt_find(&f, "scalar");
    CHECK(t && t->ndim == 0 && t->numel == 1, "scalar descriptor");
    x = ckpt_get_f32(&f, "scalar", &n, &err);
    CHECK(x && n == 1 && x[0] == 3.25f, "scalar value");
    base_free(x);

    t = ckpt_find(&f, "empty");
    CHECK(t && t->ndim == 2 && t->shape[0] == 0 && t->numel == 0 && t->nbytes == 0, "empty");
    x = ckpt_get_f32(&f, "empty", &n, &err);
    CHECK(x && n == 0, "empty get");
    base_free(x);

    CHECK(ckpt_get_f32(&f, "missing", &n, &err) == NULL, "missing tensor");
    CHECK(strstr(err.msg, path) && strstr(err.msg, "missing"), "missing message: %s", err.msg);
    CHECK(ckpt_get_f32(&f, "i64", &n, &err) == NULL, "i64 as f32 must fail");
    CHECK(strstr(err.msg, path) && strstr(err.msg, "i64"), "dtype message: %s", err.msg);
    ckpt_close(&f);

    /* Overwriting an existing file works (rename over it). */
    CHECK(write_fixture(path, &err) == 0, "rewrite: %s", err.msg);
    unlink(path);
    printf("ok   round trip F32/I64/I32/scalar/empty + metadata\n");
}

static void test_layout(void) {
    char path[512];
    temp_path(path, sizeof path, "layout");
    base_err err;
    /* Three tensors of odd sizes so the header is unlikely to be a multiple of 8 already. */
    float a[3] = {1, 2, 3};
    int64_t b[1] = {42};
    float c[1] = {7};
    for (int variant = 0; variant < 8; variant++) {
        char name[32];
        snprintf(name, sizeof name, "t%.*s", variant, "abcdefgh"); /* vary header length */
        ckpt_wtensor ts[3] = {
            {.name = name, .dtype = CKPT_F32, .ndim = 1, .shape = {3}, .data = a},
            {.name = "b", .dtype = CKPT_I64, .ndim = 1, .shape = {1}, .data = b},
            {.name = "c", .dtype = CKPT_F32, .ndim = 1, .shape = {1}, .data = c},
        };
        ckpt_kv meta[1] = {{"k", "v"}};
        CHECK(ckpt_write(path, ts, 3, meta, variant & 1, &err) == 0, "write: %s", err.msg);
        size_t n;
        unsigned char *buf = read_bytes(path, &n);
        CHECK(buf != NULL, "read back");
        if (!buf) continue;
        uint64_t hlen = 0;
        for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | buf[i];
        CHECK(hlen % 8 == 0, "header length %llu not a multiple of 8", (unsigned long long)hlen);
        CHECK(n == 8 + hlen + 12 + 8 + 4, "file size %zu, header %llu", n,
              (unsigned long long)hlen);
        CHECK(buf[8] == '{', "header starts with '{'");
        /* the JSON ends with '}' followed only by space padding (< 8 of them) */
        size_t end = 8 + (size_t)hlen;
        size_t k = end;
        while (k > 8 && buf[k - 1] == ' ') k--;
        CHECK(buf[k - 1] == '}' && end - k < 8, "padding: %zu spaces", end - k);
        buf[k] = 0;
        const char *hdr = (const char *)buf + 8;
        char key[40];
        snprintf(key, sizeof key, "\"%s\"", name);
        const char *pa = strstr(hdr, key), *pb = strstr(hdr, "\"b\""), *pc = strstr(hdr, "\"c\"");
        CHECK(pa && pb && pc && pa < pb && pb < pc, "tensor order in the header: %s", hdr);
        if (variant & 1)
            CHECK(strstr(hdr, "\"__metadata__\"") == hdr + 1, "__metadata__ first: %s", hdr);
        CHECK(strstr(hdr, "\"data_offsets\":[0,12]") && strstr(hdr, "\"data_offsets\":[12,20]") &&
                  strstr(hdr, "\"data_offsets\":[20,24]"),
              "offsets: %s", hdr);
        /* the data section: a, b, c contiguous right after the padded header */
        const unsigned char *data = buf + 8 + hlen;
        CHECK(memcmp(data, a, 12) == 0 && memcmp(data + 12, b, 8) == 0 &&
                  memcmp(data + 20, c, 4) == 0,
              "data bytes");
        free(buf);
    }
    unlink(path);
    printf("ok   byte layout (LE header length, 8-byte padding, order, contiguous data)\n");
}

/* ---- conversions ------------------------------------------------------------------- */

static void test_conversions(void) {
    { /* the 8-wide narrowing against the scalar one, bit for bit: every sign, exponent and
       * top mantissa bits, with low bits that hit ties, round-ups, NaN payloads; an odd count
       * so the scalar tail runs too */
        static const uint32_t low[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff,
                                       0x0fff, 0x1000, 0x1001, 0x17ff, 0x1800, 0x2345};
        const size_t nlow = sizeof low / sizeof low[0], n = ((size_t)1 << 16) * nlow + 5;
        float *x = malloc(n * sizeof *x);
        uint16_t *got = malloc(n * sizeof *got);
        int bad_bf = 0, bad_f16 = 0;
        if (x && got) {
            for (size_t k = 0; k < n; k++) {
                const uint32_t u = (uint32_t)((k / nlow) & 0xffff) << 16 | low[k % nlow];
                memcpy(&x[k], &u, 4);
            }
            ckpt_f32_to_half_n(x, got, n, 1);
            for (size_t k = 0; k < n; k++) bad_bf += got[k] != ckpt_f32_to_bf16(x[k]);
            ckpt_f32_to_half_n(x, got, n, 0);
            for (size_t k = 0; k < n; k++) bad_f16 += got[k] != ckpt_f32_to_f16(x[k]);
        }
        CHECK(x && got && bad_bf == 0, "bf16 narrowing, 8-wide vs scalar: %d differ", bad_bf);
        CHECK(x && got && bad_f16 == 0, "f16 narrowing, 8-wide vs scalar: %d differ", bad_f16);
        free(x);
        free(got);
    }
    CHECK(ckpt_bf16_to_f32(0x3F80) == 1.0f, "bf16 1.0");
    CHECK(ckpt_bf16_to_f32(0xC020) == -2.5f, "bf16 -2.5");
    CHECK(ckpt_bf16_to_f32(0x0000) == 0.0f, "bf16 0");
    CHECK(isinf(ckpt_bf16_to_f32(0x7F80)), "bf16 inf");
    CHECK(ckpt_f16_to_f32(0x3C00) == 1.0f, "f16 1.0");
    CHECK(ckpt_f16_to_f32(0xC100) == -2.5f, "f16 -2.5");
    CHECK(ckpt_f16_to_f32(0x7BFF) == 65504.0f, "f16 max");
    CHECK(ckpt_f16_to_f32(0x0001) == ldexpf(1.0f, -24), "f16 smallest subnormal");
    CHECK(ckpt_f16_to_f32(0x03FF) == ldexpf(1023.0f, -24), "f16 largest subnormal");
    CHECK(ckpt_f16_to_f32(0x0400) == ldexpf(1.0f, -14), "f16 smallest normal");
    CHECK(ckpt_f16_to_f32(0x8000) == 0.0f && signbit(ckpt_f16_to_f32(0x8000)), "f16 -0");
    CHECK(isinf(ckpt_f16_to_f32(0xFC00)) && ckpt_f16_to_f32(0xFC00) < 0, "f16 -inf");
    CHECK(isnan(ckpt_f16_to_f32(0x7E00)), "f16 nan");
    CHECK(ckpt_f16_to_f32(0x3555) == 0.333251953125f, "f16 1/3");
    CHECK(ckpt_f32_to_bf16(1.0f) == 0x3F80, "to bf16 1.0");
    CHECK(ckpt_f32_to_bf16(-2.5f) == 0xC020, "to bf16 -2.5");
    /* ties to even: 1 + 2^-8 is halfway between 1 and 1 + 2^-7 */
    CHECK(ckpt_f32_to_bf16(1.0f + ldexpf(1.0f, -8)) == 0x3F80, "bf16 tie to even (down)");
    CHECK(ckpt_f32_to_bf16(1.0f + 3 * ldexpf(1.0f, -8)) == 0x3F82, "bf16 tie to even (up)");
    CHECK(isnan(ckpt_bf16_to_f32(ckpt_f32_to_bf16(NAN))), "bf16 nan");
    /* f32 -> f16, against the IEEE half encodings */
    CHECK(ckpt_f32_to_f16(1.0f) == 0x3C00 && ckpt_f32_to_f16(-2.5f) == 0xC100, "to f16");
    CHECK(ckpt_f32_to_f16(65504.0f) == 0x7BFF, "to f16 max");
    CHECK(ckpt_f32_to_f16(65519.0f) == 0x7BFF && ckpt_f32_to_f16(65520.0f) == 0x7C00,
          "to f16 overflow edge");
    CHECK(ckpt_f32_to_f16(ldexpf(1.0f, -24)) == 0x0001, "to f16 smallest subnormal");
    CHECK(ckpt_f32_to_f16(ldexpf(1.0f, -25)) == 0x0000, "to f16 2^-25 ties to even (0)");
    CHECK(ckpt_f32_to_f16(ldexpf(3.0f, -25)) == 0x0002, "to f16 3*2^-25 ties to even (2)");
    CHECK(ckpt_f32_to_f16(ldexpf(1023.0f, -24)) == 0x03FF, "to f16 largest subnormal");
    CHECK(ckpt_f32_to_f16(1.0f + ldexpf(1.0f, -11)) == 0x3C00, "to f16 tie to even (down)");
    CHECK(ckpt_f32_to_f16(1.0f + ldexpf(3.0f, -11)) == 0x3C02, "to f16 tie to even (up)");
    CHECK(ckpt_f32_to_f16(-0.0f) == 0x8000 && ckpt_f32_to_f16(INFINITY) == 0x7C00, "f16 -0 inf");
    CHECK((ckpt_f32_to_f16(NAN) & 0x7E00) == 0x7E00, "f16 nan");
    for (uint32_t h = 0; h < 0x10000; h++) { /* every finite half survives f16 -> f32 -> f16 */
        if ((h & 0x7C00) == 0x7C00) continue;
        if (ckpt_f32_to_f16(ckpt_f16_to_f32((uint16_t)h)) != h) {
            CHECK(0, "f16 round trip of 0x%04x", h);
            break;
        }
    }

    /* BF16 / F16 / F64 tensors in a hand-made file, read via ckpt_get_f32 */
    char path[512];
    temp_path(path, sizeof path, "dt");
    const char *hdr = "{\"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]},"
                      "\"h\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[4,10]},"
                      "\"d\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[10,18]}}";
    unsigned char data[18];
    uint16_t b16[2] = {0x3F80, 0xC020}, h16[3] = {0x3C00, 0xC100, 0x7BFF};
    double dv = -0.125;
    memcpy(data, b16, 4);
    memcpy(data + 4, h16, 6);
    memcpy(data + 10, &dv, 8); /* unaligned on purpose */
    make_file(path, hdr, data, sizeof data);
    ckpt_file f;
    base_err err;
    int rc = ckpt_open(&f, path, &err);
    CHECK(rc == 0, "open: %s", err.msg);
    if (rc == 0) {
        float *b = ckpt_get_f32(&f, "b", NULL, &err);
        float *h = ckpt_get_f32(&f, "h", NULL, &err);
        float *d = ckpt_get_f32(&f, "d", NULL, &err);
        CHECK(b && b[0] == 1.0f && b[1] == -2.5f, "bf16 tensor");
        CHECK(h && h[0] == 1.0f && h[1] == -2.5f && h[2] == 65504.0f, "f16 tensor");
        CHECK(d && d[0] == -0.125f, "f64 tensor");
        base_free(b);
        base_free(h);
        base_free(d);
        ckpt_close(&f);
    }
    unlink(path);
    printf("ok   BF16/F16/F64 conversions\n");
}

/* The fp32 bits of a 16-bit float with `ebits` exponent bits (bf16: 8, f16: 5), from its
 * value (computed in double, exact) rather than by moving bits; a NaN keeps its payload in
 * the top mantissa bits, quiet when `quiet` (f16, as vcvtph2ps gives it). */
static uint32_t half_bits_ref(uint16_t h, int ebits, int quiet) {
    const int mbits = 15 - ebits, bias = (1 << (ebits - 1)) - 1;
    const uint32_t man = h & ((1u << mbits) - 1), exp = (h >> mbits) & ((1u << ebits) - 1);
    const uint32_t sign = (uint32_t)(h >> 15) << 31;
    if (exp == (1u << ebits) - 1) /* inf / NaN */
        return sign | 0x7f800000u | (man << (23 - mbits)) | (man && quiet ? 0x400000u : 0);
    double v = exp ? ldexp((double)((1u << mbits) + man), (int)exp - bias - mbits)
                   : ldexp((double)man, 1 - bias - mbits);
    float f = (float)(sign ? -v : v);
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* Every BF16 and F16 bit pattern through the bulk loader (vector body, scalar tail, several
 * threads' blocks, unaligned data) and the scalar conversion, against half_bits_ref. */
static void test_widening_exhaustive(void) {
    enum { REPS = 17, TAIL = 5, N = REPS * 65536 + TAIL };
    static const uint16_t tail[TAIL] = {0x0001, 0x7c01, 0x8000, 0x3c00, 0xfe00};
    uint16_t *v = malloc((size_t)N * 2);
    unsigned char *data = malloc(1 + 4 * (size_t)N);
    for (size_t i = 0; i < N; i++) v[i] = i < REPS * 65536 ? (uint16_t)i : tail[i - REPS * 65536];
    data[0] = 7; /* one byte first: the 16-bit data is unaligned */
    memcpy(data + 1, v, (size_t)N * 2);
    memcpy(data + 1 + 2 * (size_t)N, v, (size_t)N * 2);
    char hdr[512], path[512];
    snprintf(hdr, sizeof hdr,
             "{\"pad\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
             "\"b\":{\"dtype\":\"BF16\",\"shape\":[%d],\"data_offsets\":[1,%d]},"
             "\"h\":{\"dtype\":\"F16\",\"shape\":[%d],\"data_offsets\":[%d,%d]}}",
             N, 1 + 2 * N, N, 1 + 2 * N, 1 + 4 * N);
    temp_path(path, sizeof path, "widen");
    make_file(path, hdr, data, 1 + 4 * (size_t)N);
    ckpt_file f;
    base_err err;
    int rc = ckpt_open(&f, path, &err);
    CHECK(rc == 0, "open: %s", err.msg);
    float *b = rc ? NULL : ckpt_get_f32(&f, "b", NULL, &err);
    float *h = rc ? NULL : ckpt_get_f32(&f, "h", NULL, &err);
    CHECK(b && h, "read: %s", err.msg);
    int bad_b = 0, bad_h = 0, bad_s = 0;
    for (size_t i = 0; b && h && i < N; i++) {
        uint32_t ub, uh, us;
        const float s = ckpt_f16_to_f32(v[i]);
        memcpy(&ub, &b[i], 4);
        memcpy(&uh, &h[i], 4);
        memcpy(&us, &s, 4);
        if (ub != half_bits_ref(v[i], 8, 0) && bad_b++ < 3)
            CHECK(0, "bf16 0x%04x [%zu] -> 0x%08x, want 0x%08x", v[i], i, ub,
                  half_bits_ref(v[i], 8, 0));
        if (uh != half_bits_ref(v[i], 5, 1) && bad_h++ < 3)
            CHECK(0, "f16 0x%04x [%zu] -> 0x%08x, want 0x%08x", v[i], i, uh,
                  half_bits_ref(v[i], 5, 1));
        if (us != half_bits_ref(v[i], 5, 1) && bad_s++ < 3)
            CHECK(0, "scalar f16 0x%04x -> 0x%08x, want 0x%08x", v[i], us,
                  half_bits_ref(v[i], 5, 1));
    }
    base_free(b);
    base_free(h);
    if (rc == 0) ckpt_close(&f);
    unlink(path);
    free(v);
    free(data);
    printf("ok   every BF16 / F16 value widens exactly (%d elements each)\n", N);
}

/* ---- malformed files --------------------------------------------------------------- */

#define T1(body) "{\"x\":{" body "}}"

static void test_malformed(void) {
    char path[512];
    base_err err;

    temp_path(path, sizeof path, "empty");
    expect_bad("empty file", path, "too short");
    write_bytes(path, "\x10\x00\x00", 3);
    expect_bad("truncated header length", path, "too short");
    make_raw(path, 1000, "{}", NULL, 0);
    expect_bad("header length > file", path, "exceeds the file size");
    make_raw(path, UINT64_MAX, "{}", NULL, 0);
    expect_bad("header length 2^64-1", path, "exceeds the file size");
    make_raw(path, 0, "", NULL, 0);
    expect_bad("zero header length", path, "'{'");
    unlink(path);

    bad_hdr("invalid JSON", "{\"x\":{\"dtype\":", 0, "invalid JSON");
    bad_hdr("trailing garbage", "{} x", 0, "invalid JSON");
    bad_hdr("array root", "[1,2]   ", 0, "'{'");
    bad_hdr("invalid UTF-8", "{\"\xff\xfe\":1}", 0, "invalid JSON");
    bad_hdr("NUL in a name", "{\"a\\u0000b\":{}}", 0, "invalid JSON");
    bad_hdr("entry not an object", "{\"x\":5}", 0, "'x'");
    bad_hdr("missing dtype", T1("\"shape\":[1],\"data_offsets\":[0,4]"), 4, "'dtype'");
    bad_hdr("missing shape", T1("\"dtype\":\"F32\",\"data_offsets\":[0,4]"), 4, "'shape'");
    bad_hdr("missing data_offsets", T1("\"dtype\":\"F32\",\"shape\":[1]"), 4, "'data_offsets'");
    bad_hdr("unknown dtype", T1("\"dtype\":\"F7\",\"shape\":[1],\"data_offsets\":[0,1]"), 1, "F7");
    bad_hdr("dtype not a string", T1("\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]"), 4,
            "'dtype'");
    bad_hdr("shape not an array", T1("\"dtype\":\"F32\",\"shape\":1,\"data_offsets\":[0,4]"), 4,
            "'shape'");
    bad_hdr("offsets out of bounds", T1("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]"),
            4, "out of bounds");
    bad_hdr("offsets far out of bounds",
            T1("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[9223372036854775800,"
               "9223372036854775804]"),
            4, "out of bounds");
    bad_hdr("end before begin", T1("\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,0]"), 4,
            "end before begin");
    bad_hdr("three offsets", T1("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]"), 8,
            "'data_offsets'");
    bad_hdr("negative offset", T1("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]"), 4,
            "'data_offsets'");
    bad_hdr("float offset", T1("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4.0]"), 4,
            "'data_offsets'");
    bad_hdr("shape*dtype != length", T1("\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]"),
            8, "needs 12");
    bad_hdr("negative dim", T1("\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]"), 4,
            "shape[0]");
    bad_hdr("float dim", T1("\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]"), 4,
            "shape[0]");
    bad_hdr("dims overflow int64",
            T1("\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],\"data_offsets\":[0,4]"), 4,
            "overflows");
    bad_hdr("bytes overflow",
            T1("\"dtype\":\"F64\",\"shape\":[4611686018427387904],\"data_offsets\":[0,4]"), 4,
            "overflows");
    bad_hdr("bytes wrap to the length",
            T1("\"dtype\":\"F32\",\"shape\":[4611686018427387905],\"data_offsets\":[0,4]"), 4,
            "overflows");
    bad_hdr("huge dim beyond json int",
            T1("\"dtype\":\"F32\",\"shape\":[99999999999999999999999],\"data_offsets\":[0,4]"), 4,
            "invalid JSON");
    bad_hdr("too many dims",
            T1("\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]"), 4,
            "dimensions");
    bad_hdr("overlapping offsets",
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
            "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
            12, "overlapping");
    bad_hdr("identical offsets",
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
            "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
            8, "overlapping");
    bad_hdr("gap between tensors",
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
            "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
            12, "gap");
    bad_hdr("gap at the start", T1("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]"), 8,
            "gap");
    bad_hdr("trailing data bytes", T1("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]"), 8,
            "trailing");
    bad_hdr("data but no tensors", "{}", 4, "trailing");
    bad_hdr("duplicate names",
            "{\"dup.w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
            "\"dup.w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
            8, "dup.w");
    bad_hdr("metadata not an object", "{\"__metadata__\":[1]}", 0, "__metadata__");
    bad_hdr("metadata value not a string", "{\"__metadata__\":{\"k\":1}}", 0, "'k'");
    bad_hdr("tensor error names tensor",
            "{\"ok\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
            "\"bad.one\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,8]}}",
            8, "'bad.one'");

    /* valid edge cases must still open */
    temp_path(path, sizeof path, "edge");
    make_file(path, "{}", NULL, 0);
    ckpt_file f;
    CHECK(ckpt_open(&f, path, &err) == 0 && f.n_tensors == 0, "empty header {}: %s", err.msg);
    ckpt_close(&f);
    make_file(path, "{\"__metadata__\":{}}  ", NULL, 0);
    CHECK(ckpt_open(&f, path, &err) == 0 && f.n_meta == 0, "padded header: %s", err.msg);
    ckpt_close(&f);
    make_file(path, "{\"__metadata__\":null}", NULL, 0);
    CHECK(ckpt_open(&f, path, &err) == 0 && f.n_meta == 0, "null metadata: %s", err.msg);
    ckpt_close(&f);
    make_file(path,
              "{\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]},"
              "\"a\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
              "\x01\x00\x00\x00", 4);
    CHECK(ckpt_open(&f, path, &err) == 0 && f.n_tensors == 2, "out-of-order offsets: %s", err.msg);
    ckpt_close(&f);
    unlink(path);

    expect_bad("nonexistent file", "/nonexistent/dir/x.safetensors", "cannot open");
    CHECK(ckpt_open(&f, g_tmpdir, &err) != 0 && strstr(err.msg, g_tmpdir), "directory: %s",
          err.msg);
}

static void test_writer_errors(void) {
    base_err err;
    float v[2] = {1, 2};
    char path[512];
    temp_path(path, sizeof path, "werr");
    ckpt_wtensor dup[2] = {{.name = "w", .dtype = CKPT_F32, .ndim = 1, .shape = {1}, .data = v},
                           {.name = "w", .dtype = CKPT_F32, .ndim = 1, .shape = {1}, .data = v}};
    CHECK(ckpt_write(path, dup, 2, NULL, 0, &err) != 0 && strstr(err.msg, path) &&
              strstr(err.msg, "'w'"),
          "duplicate names: %s", err.msg);
    ckpt_wtensor neg = {.name = "n", .dtype = CKPT_F32, .ndim = 1, .shape = {-2}, .data = v};
    CHECK(ckpt_write(path, &neg, 1, NULL, 0, &err) != 0 && strstr(err.msg, "'n'"),
          "negative dim: %s", err.msg);
    ckpt_wtensor reserved = {
        .name = "__metadata__", .dtype = CKPT_F32, .ndim = 1, .shape = {1}, .data = v};
    CHECK(ckpt_write(path, &reserved, 1, NULL, 0, &err) != 0, "reserved name accepted");
    ckpt_wtensor nul = {.name = "x", .dtype = CKPT_F32, .ndim = 1, .shape = {2}, .data = NULL};
    CHECK(ckpt_write(path, &nul, 1, NULL, 0, &err) != 0, "NULL data accepted");
    ckpt_wtensor ok = {.name = "x", .dtype = CKPT_F32, .ndim = 1, .shape = {2}, .data = v};
    const char *bad_dir = "/nonexistent/dir/out.safetensors";
    CHECK(ckpt_write(bad_dir, &ok, 1, NULL, 0, &err) != 0 && strstr(err.msg, bad_dir),
          "unwritable dir: %s", err.msg);
    /* failures leave neither the target nor the temporary behind */
    unlink(path);
    CHECK(ckpt_write(path, dup, 2, NULL, 0, &err) != 0 && access(path, F_OK) != 0, "left target");
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    CHECK(access(tmp, F_OK) != 0, "left temporary");
    printf("ok   writer rejects bad input\n");
}

/* Every truncation of a valid file, and byte corruptions of its header: no crash, and a
 * failure always names the file. */
static void test_corruption_sweep(void) {
    char src[512], path[512];
    temp_path(src, sizeof src, "sweep_src");
    temp_path(path, sizeof path, "sweep");
    base_err err;
    CHECK(write_fixture(src, &err) == 0, "fixture: %s", err.msg);
    size_t n;
    unsigned char *good = read_bytes(src, &n);
    unsigned char *buf = malloc(n);
    int n_ok = 0, n_bad = 0;
    for (size_t len = 0; len < n; len++) {
        write_bytes(path, good, len);
        ckpt_file f;
        if (ckpt_open(&f, path, &err) == 0) {
            n_ok++;
            ckpt_close(&f);
        } else {
            n_bad++;
            CHECK(strstr(err.msg, path) != NULL, "truncated to %zu: %s", len, err.msg);
        }
    }
    CHECK(n_ok == 0, "%d truncations accepted", n_ok);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | good[i];
    static const unsigned char repl[] = {'0', '9', '-', '"', '{',  '}', '[', ']',
                                         ',', ':', ' ', 0,   0xff, 'e', '.', '1'};
    for (uint64_t it = 0; it < 3000; it++) {
        memcpy(buf, good, n);
        int flips = 1 + (int)(base_rng_u64(7, 1, it) % 3);
        for (int k = 0; k < flips; k++) {
            uint64_t r = base_rng_u64(7, 2, it * 4 + (uint64_t)k);
            size_t pos = 8 + (size_t)(r % hlen);
            buf[pos] = repl[(r >> 32) % sizeof repl];
        }
        write_bytes(path, buf, n);
        ckpt_file f;
        if (ckpt_open(&f, path, &err) == 0) {
            /* accepted: every tensor must lie inside the file */
            for (int i = 0; i < f.n_tensors; i++) {
                const unsigned char *d = f.tensors[i].data;
                CHECK(d >= f.map && d + f.tensors[i].nbytes <= f.map + f.size, "tensor escapes");
            }
            n_ok++;
            ckpt_close(&f);
        } else {
            n_bad++;
            CHECK(strstr(err.msg, path) != NULL, "corruption %llu: %s", (unsigned long long)it,
                  err.msg);
        }
    }
    free(buf);
    free(good);
    unlink(src);
    unlink(path);
    printf("ok   corruption sweep: %d rejected, %d accepted (all in bounds)\n", n_bad, n_ok);
}

static void test_tiny_qwen3(void) {
#ifdef TITAN_SHARED_DIR
    char path[1024];
    snprintf(path, sizeof path, "%s/data/tiny_qwen3/model.safetensors", TITAN_SHARED_DIR);
    if (access(path, R_OK) != 0) {
        printf("skip tiny_qwen3 fixture (%s not readable)\n", path);
        return;
    }
    ckpt_file f;
    base_err err;
    int rc = ckpt_open(&f, path, &err);
    CHECK(rc == 0, "tiny_qwen3: %s", err.msg);
    if (rc != 0) return;
    CHECK(f.n_tensors == 25, "tiny_qwen3 has %d tensors", f.n_tensors);
    for (int i = 0; i < f.n_tensors; i++) CHECK(f.tensors[i].dtype == CKPT_BF16, "dtype");
    const ckpt_tensor *e = ckpt_find(&f, "model.embed_tokens.weight");
    CHECK(e && e->ndim == 2 && e->shape[0] == 256 && e->shape[1] == 64, "embed shape");
    const ckpt_tensor *k = ckpt_find(&f, "model.layers.1.self_attn.k_proj.weight");
    CHECK(k && k->shape[0] == 32 && k->shape[1] == 64, "k_proj shape");
    int64_t n;
    float *norm = ckpt_get_f32(&f, "model.norm.weight", &n, &err);
    int ones = norm != NULL && n == 64;
    for (int64_t i = 0; ones && i < n; i++) ones = norm[i] == 1.0f;
    CHECK(ones, "model.norm.weight is all ones");
    base_free(norm);
    float *emb = ckpt_get_f32(&f, "model.embed_tokens.weight", &n, &err);
    double s = 0, s2 = 0;
    for (int64_t i = 0; emb && i < n; i++) s += emb[i], s2 += (double)emb[i] * emb[i];
    double sd = emb ? sqrt(s2 / (double)n - (s / (double)n) * (s / (double)n)) : 0;
    CHECK(emb && sd > 0.015 && sd < 0.025, "embed std %g", sd);
    base_free(emb);
    ckpt_close(&f);
    printf("ok   tiny_qwen3 BF16 fixture (25 tensors, embed std %.4f)\n", sd);
#else
    printf("skip tiny_qwen3 fixture (built without TITAN_SHARED_DIR)\n");
#endif
}

/* ---- model parameters under HF names (src/checkpoint/hf_params.c) ------------------ */

static int tiny_model(model *m, int tied, int n_layers) {
    model_args a;
    base_err err;
    char nl[16];
    snprintf(nl, sizeof nl, "%d", n_layers);
    const char *kv[][2] = {{"dim", "32"},        {"n_layers", nl},
                           {"n_heads", "2"},     {"n_kv_heads", "1"},
                           {"head_dim", "16"},   {"ffn_dim", "48"},
                           {"vocab_size", "64"}, {"tie_embeddings", tied ? "1" : "0"}};
    int rc = model_flavor("debugmodel", &a, &err);
    for (size_t i = 0; rc == 0 && i < sizeof kv / sizeof kv[0]; i++)
        rc = model_args_set(&a, kv[i][0], kv[i][1], 1, &err);
    model_build_opts o = {.batch = 1, .seq_len = 4, .ac = MODEL_AC_NONE, .with_grads = 0};
    if (rc == 0) rc = model_build(m, &a, &o, &err);
    CHECK(rc == 0, "tiny model: %s", err.msg);
    if (rc == 0) model_init_weights(m, 42);
    return rc;
}

/* The model's tensors as writer entries (data from base). */
static ckpt_wtensor *model_wtensors(const model *m, const float *base) {
    ckpt_wtensor *ts = calloc((size_t)m->n_params + 2, sizeof *ts);
    for (int i = 0; i < m->n_params; i++) {
        const model_param *p = &m->params[i];
        ts[i].name = p->hf_name;
        ts[i].dtype = CKPT_F32;
        ts[i].ndim = p->ndim;
        for (int d = 0; d < p->ndim; d++) ts[i].shape[d] = p->shape[d];
        ts[i].data = base + p->offset;
    }
    return ts;
}

static void test_model_io(void) {
    char path[512];
    temp_path(path, sizeof path, "model");
    base_err err;
    model m;
    if (tiny_model(&m, 0, 1) != 0) return;
    float *buf = base_alloc(m.n_floats * sizeof(float));

    /* save -> load round trip, bit exact, HF names in layout order; the buffer holds junk
     * first: a load writes every element (model_build_unset relies on it) */
    CHECK(ckpt_save_model(&m, m.w, path, NULL, 0, &err) == 0, "save: %s", err.msg);
    memset(buf, 0xA5, m.n_floats * sizeof(float));
    CHECK(ckpt_load_model(&m, buf, path, &err) == 0, "load: %s", err.msg);
    CHECK(memcmp(buf, m.w, m.n_floats * sizeof(float)) == 0, "round trip not bit exact");
    ckpt_file f;
    if (ckpt_open(&f, path, &err) == 0) {
        CHECK(f.n_tensors == m.n_params, "%d tensors for %d params", f.n_tensors, m.n_params);
        for (int i = 0; i < f.n_tensors && i < m.n_params; i++)
            CHECK(strcmp(f.tensors[i].name, m.params[i].hf_name) == 0 &&
                      f.tensors[i].dtype == CKPT_F32,
                  "tensor %d: %s", i, f.tensors[i].name);
        CHECK(ckpt_find(&f, "lm_head.weight") != NULL, "untied model saves lm_head.weight");
        ckpt_close(&f);
    }

    /* missing + unexpected + wrong shape, all in one message */
    ckpt_wtensor *ts = model_wtensors(&m, m.w);
    const model_param *drop = &m.params[1], *reshape = &m.params[2];
    int n = 0;
    ckpt_wtensor *bad = calloc((size_t)m.n_params + 2, sizeof *bad);
    float *big = base_alloc((reshape->numel + 64) * sizeof(float));
    for (int i = 0; i < m.n_params; i++) {
        if (i == 1) continue;
        bad[n] = ts[i];
        if (i == 2) {
            bad[n].shape[0] += 1; /* one row too many */
            bad[n].data = big;
        }
        n++;
    }
    bad[n++] = (ckpt_wtensor){
        .name = "model.extra.weight", .dtype = CKPT_F32, .ndim = 1, .shape = {4}, .data = big};
    CHECK(ckpt_write(path, bad, n, NULL, 0, &err) == 0, "write bad: %s", err.msg);
    CHECK(ckpt_load_model(&m, buf, path, &err) != 0, "bad file loaded");
    CHECK(strstr(err.msg, path) && strstr(err.msg, "3 problem(s)") && strstr(err.msg, "missing") &&
              strstr(err.msg, drop->hf_name) && strstr(err.msg, reshape->hf_name) &&
              strstr(err.msg, "unexpected 'model.extra.weight'"),
          "message: %s", err.msg);
    printf("ok   model load problems -> %s\n", err.msg);

    /* integer tensor under a parameter name */
    memcpy(bad, ts, sizeof *ts * (size_t)m.n_params);
    bad[0].dtype = CKPT_I32;
    CHECK(ckpt_write(path, bad, m.n_params, NULL, 0, &err) == 0, "write i32: %s", err.msg);
    CHECK(ckpt_load_model(&m, buf, path, &err) != 0 && strstr(err.msg, m.params[0].hf_name) &&
              strstr(err.msg, "I32"),
          "integer dtype: %s", err.msg);

    /* BF16 weights load as their exact fp32 values */
    uint16_t *b16 = base_alloc(m.n_floats * sizeof(uint16_t));
    for (size_t i = 0; i < m.n_floats; i++) b16[i] = ckpt_f32_to_bf16(m.w[i]);
    for (int i = 0; i < m.n_params; i++) {
        bad[i] = ts[i];
        bad[i].dtype = CKPT_BF16;
        bad[i].data = b16 + m.params[i].offset;
    }
    CHECK(ckpt_write(path, bad, m.n_params, NULL, 0, &err) == 0, "write bf16: %s", err.msg);
    memset(buf, 0xA5, m.n_floats * sizeof(float));
    CHECK(ckpt_load_model(&m, buf, path, &err) == 0, "load bf16: %s", err.msg);
    int same = 1;
    for (size_t i = 0; i < m.n_floats; i++) same &= buf[i] == ckpt_bf16_to_f32(b16[i]);
    CHECK(same, "bf16 load values");
    base_free(b16);

    /* a tied model: no lm_head written; a copy in the file must equal the embedding */
    model t;
    if (tiny_model(&t, 1, 1) == 0) {
        float *tb = base_alloc(t.n_floats * sizeof(float));
        CHECK(ckpt_save_model(&t, t.w, path, NULL, 0, &err) == 0, "save tied: %s", err.msg);
        if (ckpt_open(&f, path, &err) == 0) {
            CHECK(ckpt_find(&f, "lm_head.weight") == NULL, "tied model wrote lm_head.weight");
            ckpt_close(&f);
        }
        CHECK(ckpt_load_model(&t, tb, path, &err) == 0, "load tied: %s", err.msg);
        /* an untied model cannot load it: lm_head.weight is missing */
        CHECK(ckpt_load_model(&m, buf, path, &err) != 0 &&
                  strstr(err.msg, "missing 'lm_head.weight'"),
              "untied from tied: %s", err.msg);
        ckpt_wtensor *tt = model_wtensors(&t, t.w);
        const model_param *emb = model_find_hf_param(&t, "model.embed_tokens.weight");
        CHECK(emb != NULL, "tied embed");
        if (emb) {
            tt[t.n_params] = (ckpt_wtensor){.name = "lm_head.weight",
                                            .dtype = CKPT_F32,
                                            .ndim = 2,
                                            .shape = {emb->shape[0], emb->shape[1]},
                                            .data = t.w + emb->offset};
            CHECK(ckpt_write(path, tt, t.n_params + 1, NULL, 0, &err) == 0, "write: %s", err.msg);
            CHECK(ckpt_load_model(&t, tb, path, &err) == 0, "equal lm_head: %s", err.msg);
            float *other = base_alloc(emb->numel * sizeof(float));
            memcpy(other, t.w + emb->offset, emb->numel * sizeof(float));
            other[5] += 1.0f;
            tt[t.n_params].data = other;
            CHECK(ckpt_write(path, tt, t.n_params + 1, NULL, 0, &err) == 0, "write: %s", err.msg);
            CHECK(ckpt_load_model(&t, tb, path, &err) != 0 && strstr(err.msg, "lm_head.weight") &&
                      strstr(err.msg, path),
                  "different lm_head: %s", err.msg);
            printf("ok   tied model, different lm_head -> %s\n", err.msg);
            base_free(other);
        }
        free(tt);
        base_free(tb);
        model_free(&t);
    }

    /* many problems: a 1-layer file into a 4-layer model; the message stays bounded */
    model deep;
    if (tiny_model(&deep, 0, 4) == 0) {
        CHECK(ckpt_save_model(&m, m.w, path, NULL, 0, &err) == 0, "save: %s", err.msg);
        float *db = base_alloc(deep.n_floats * sizeof(float));
        CHECK(ckpt_load_model(&deep, db, path, &err) != 0 && strstr(err.msg, "33 problem(s)") &&
                  strstr(err.msg, "more"),
              "many problems: %s", err.msg);
        printf("ok   many problems -> %.160s...\n", err.msg);
        base_free(db);
        model_free(&deep);
    }

    base_free(big);
    free(bad);
    free(ts);
    base_free(buf);
    model_free(&m);
    unlink(path);
    printf("ok   model parameters under HF names (round trip, problems, BF16, tied)\n");
}

/* Verifies the file tests/reference/check_safetensors.py --make wrote with Python. */
static int check_python_file(const char *path) {
    ckpt_file f;
    base_err err;
    if (ckpt_open(&f, path, &err) != 0) {
        fprintf(stderr, "FAIL %s\n", err.msg);
        return 1;
    }
    const char *fmt = ckpt_meta_get(&f, "format");
    CHECK(fmt && strcmp(fmt, "pt") == 0, "metadata format");
    const char *who = ckpt_meta_get(&f, "writer");
    CHECK(who && strcmp(who, "python safetensors") == 0, "metadata writer");
    /* every float tensor holds [1.0, -2.5, 0.15625, 0.0, 3.0, -0.0] in its dtype */
    const float want[6] = {1.0f, -2.5f, 0.15625f, 0.0f, 3.0f, -0.0f};
    const char *names[6] = {"bf16", "f16", "f32", "f64", "f8_e4m3", "f8_e5m2"};
    const ckpt_dtype dts[6] = {CKPT_BF16, CKPT_F16, CKPT_F32, CKPT_F64, CKPT_F8_E4M3, CKPT_F8_E5M2};
    for (int i = 0; i < 6; i++) {
        const ckpt_tensor *t = ckpt_find(&f, names[i]);
        CHECK(t && t->dtype == dts[i] && t->ndim == 2 && t->shape[0] == 2 && t->shape[1] == 3,
              "%s descriptor", names[i]);
        int64_t n;
        float *x = ckpt_get_f32(&f, names[i], &n, &err);
        CHECK(x && n == 6 && memcmp(x, want, sizeof want) == 0, "%s values", names[i]);
        base_free(x);
    }
    const ckpt_tensor *t = ckpt_find(&f, "f16_special");
    float *x = ckpt_get_f32(&f, "f16_special", NULL, &err);
    CHECK(t && x && x[0] == 65504.0f && x[1] == ldexpf(1.0f, -24) && isinf(x[2]), "f16 specials");
    base_free(x);
    x = ckpt_get_f32(&f, "f8_e4m3_special", NULL, &err);
    CHECK(x && x[0] == 448.0f && x[1] == ldexpf(1.0f, -9) && x[2] == -ldexpf(1.0f, -6),
          "f8_e4m3 specials");
    base_free(x);
    x = ckpt_get_f32(&f, "f8_e5m2_special", NULL, &err);
    CHECK(x && x[0] == 57344.0f && x[1] == ldexpf(1.0f, -16) && isinf(x[2]) && x[2] < 0,
          "f8_e5m2 specials");
    base_free(x);
    /* every integer type (and BOOL) as double, in the order they were written */
    const struct {
        const char *name;
        ckpt_dtype dt;
        double v[3];
    } ints[] = {{"u8", CKPT_U8, {0, 255, 7}},
                {"i8", CKPT_I8, {-128, 127, -1}},
                {"i16", CKPT_I16, {-32768, 32767, 5}},
                {"u16", CKPT_U16, {0, 65535, 9}},
                {"u32", CKPT_U32, {0, 4294967295.0, 11}},
                {"u64", CKPT_U64, {0, 1099511627776.0, 13}},
                {"bool", CKPT_BOOL, {1, 0, 1}}};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        const ckpt_tensor *ti = ckpt_find(&f, ints[i].name);
        double *d = ckpt_get_f64(&f, ints[i].name, NULL, &err);
        CHECK(ti && ti->dtype == ints[i].dt && d && d[0] == ints[i].v[0] && d[1] == ints[i].v[1] &&
                  d[2] == ints[i].v[2],
              "%s values", ints[i].name);
        base_free(d);
    }
    CHECK(ckpt_get_f32(&f, "u8", NULL, &err) == NULL && strstr(err.msg, "'u8'"), "u8 as float");
    int64_t n;
    int32_t *ids = ckpt_get_i32(&f, "u32", &n, &err);
    CHECK(ids == NULL && strstr(err.msg, "4294967295"), "u32 beyond int32: %s", err.msg);
    base_free(ids);
    ids = ckpt_get_i32(&f, "i64", &n, &err);
    CHECK(ids && n == 4 && ids[0] == 0 && ids[1] == -100 && ids[2] == 151935 &&
              ids[3] == 2147483647,
          "i64 token ids");
    base_free(ids);
    ids = ckpt_get_i32(&f, "i32", &n, &err);
    CHECK(ids && n == 3 && ids[0] == -1 && ids[1] == 7 && ids[2] == -2147483647 - 1, "i32");
    base_free(ids);
    ckpt_close(&f);
    if (failures) return 1;
    printf("ok   %s (written by Python safetensors) reads back exactly\n", path);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--write-fixture") == 0) {
        base_err err;
        if (write_fixture(argv[2], &err) != 0) {
            fprintf(stderr, "FAIL %s\n", err.msg);
            return 1;
        }
        printf("wrote %s\n", argv[2]);
        return 0;
    }
    if (argc == 3 && strcmp(argv[1], "--check-python") == 0) return check_python_file(argv[2]);
    if (argc != 1) {
        fprintf(stderr, "usage: %s [--write-fixture PATH | --check-python PATH]\n", argv[0]);
        return 2;
    }
    check_tmpdir(g_tmpdir, sizeof g_tmpdir, "test_safetensors");

    test_round_trip();
    test_layout();
    test_conversions();
    test_widening_exhaustive();
    test_malformed();
    test_writer_errors();
    test_corruption_sweep();
    test_tiny_qwen3();
    test_model_io();
    check_tmpdir_remove(g_tmpdir);
    return check_report("test_safetensors");
}
