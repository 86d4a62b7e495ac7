/* data: the Qwen3 chat template in C (see the chat section of data.h). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "data/data.h"

typedef struct {
    char *p;
    size_t n, cap;
    int oom;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t len) {
    if (b->oom) return;
    if (b->n + len + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + len + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, len);
    b->n += len;
    b->p[b->n] = 0;
}

static void sb_str(sbuf *b, const char *s) {
    sb_add(b, s, strlen(s));
}

/* A [begin, end) slice of a string. */
typedef struct {
    const char *b, *e;
} slice;

static const char *find_in(slice s, const char *needle) {
    size_t nl = strlen(needle);
    for (const char *p = s.b; p + nl <= s.e; p++)
        if (memcmp(p, needle, nl) == 0) return p;
    return NULL;
}

static const char *rfind_in(slice s, const char *needle) {
    size_t nl = strlen(needle);
    if ((size_t)(s.e - s.b) < nl) return NULL;
    for (const char *p = s.e - nl;; p--) {
        if (memcmp(p, needle, nl) == 0) return p;
        if (p == s.b) return NULL;
    }
}

static slice lstrip_nl(slice s) {
    while (s.b < s.e && *s.b == '\n') s.b++;
    return s;
}

static slice rstrip_nl(slice s) {
    while (s.e > s.b && s.e[-1] == '\n') s.e--;
    return s;
}

static int starts_with(const char *s, const char *pre) {
    return strncmp(s, pre, strlen(pre)) == 0;
}

static int ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && memcmp(s + n - m, suf, m) == 0;
}

static int check_role(int i, const char *role, base_err *err) {
    if (!role) return base_fail(err, "chat template: messages[%d].role: missing", i);
    if (!strcmp(role, "system") || !strcmp(role, "user") || !strcmp(role, "assistant")) return 0;
    if (!strcmp(role, "tool"))
        return base_fail(err, "chat template: messages[%d]: role 'tool' is not supported yet", i);
    return base_fail(err, "chat template: messages[%d]: role '%s' is not supported", i, role);
}

int data_chat_render(const data_chat_msg *msgs, int n, int add_generation_prompt,
                     int enable_thinking, char **out, base_err *err) {
    *out = NULL;
    if (n <= 0 || !msgs)
        return base_fail(err, "chat template: no messages (the template reads messages[0])");
    for (int i = 0; i < n; i++) {
        if (check_role(i, msgs[i].role, err)) return -1;
        if (!msgs[i].content)
            return base_fail(err,
                             "chat template: messages[%d].content: non-string content is not "
                             "supported yet",
                             i);
    }
    sbuf b = {0};
    if (!strcmp(msgs[0].role, "system")) {
        sb_str(&b, "<|im_start|>system\n");
        sb_str(&b, msgs[0].content);
        sb_str(&b, "<|im_end|>\n");
    }
    /* The last user message that is not a bare <tool_response> (n - 1 when none). */
    int last_query = n - 1;
    for (int i = n - 1; i >= 0; i--) {
        const char *c = msgs[i].content;
        if (!strcmp(msgs[i].role, "user") &&
            !(starts_with(c, "<tool_response>") && ends_with(c, "</tool_response>"))) {
            last_query = i;
            break;
        }
    }
    for (int i = 0; i < n; i++) {
        const char *role = msgs[i].role;
        if (!strcmp(role, "user") || (!strcmp(role, "system") && i > 0)) {
            sb_str(&b, "<|im_start|>");
            sb_str(&b, role);
            sb_str(&b, "\n");
            sb_str(&b, msgs[i].content);
            sb_str(&b, "<|im_end|>\n");
            continue;
        }
        if (strcmp(role, "assistant")) continue; /* leading system: already written */
        slice content = {msgs[i].content, msgs[i].content + strlen(msgs[i].content)};
        slice reasoning = {"", ""};
        if (msgs[i].reasoning_content) {
            reasoning.b = msgs[i].reasoning_content;
            reasoning.e = reasoning.b + strlen(reasoning.b);
        } else {
            const char *first_close = find_in(content, "</think>");
            if (first_close) {
                /* content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') */
                slice r = rstrip_nl((slice){content.b, first_close});
                const char *open = rfind_in(r, "<think>");
                if (open) r.b = open + strlen("<think>");
                reasoning = lstrip_nl(r);
                /* content.split('</think>')[-1].lstrip('\n') */
                const char *last_close = rfind_in(content, "</think>");
                content = lstrip_nl((slice){last_close + strlen("</think>"), content.e});
            }
        }
        sb_str(&b, "<|im_start|>assistant\n");
        if (i > last_query && (i == n - 1 || reasoning.e > reasoning.b)) {
            slice r = rstrip_nl(lstrip_nl(reasoning));
            sb_str(&b, "<think>\n");
            sb_add(&b, r.b, (size_t)(r.e - r.b));
            sb_str(&b, "\n</think>\n\n");
            content = lstrip_nl(content);
        }
        sb_add(&b, content.b, (size_t)(content.e - content.b));
        sb_str(&b, "<|im_end|>\n");
    }
    if (add_generation_prompt) {
        sb_str(&b, "<|im_start|>assistant\n");
        if (!enable_thinking) sb_str(&b, "<think>\n\n</think>\n\n");
    }
    if (!b.p) sb_add(&b, "", 0);
    if (b.oom) {
        free(b.p);
        return base_fail(err, "chat template: out of memory");
    }
    *out = b.p;
    return 0;
}

static int tool_calls_present(json_t *tc) {
    if (!tc || json_is_null(tc) || json_is_false(tc)) return 0;
    if (json_is_array(tc)) return json_array_size(tc) > 0;
    if (json_is_object(tc)) return json_object_size(tc) > 0;
    if (json_is_string(tc)) return json_string_length(tc) > 0;
    return 1;
}

int data_chat_parse_json(const char *json_text, size_t len, data_chat_msg **msgs, int *n,
                         base_err *err) {
    *msgs = NULL;
    *n = 0;
    json_error_t je;
    json_t *root = json_loadb(json_text, len, JSON_ALLOW_NUL, &je); /* a NUL: said below */
    if (!root)
        return base_fail(err, "chat messages: invalid JSON at line %d column %d: %s", je.line,
                         je.column, je.text);
    const int rc = data_chat_from_json(root, msgs, n, err);
    json_decref(root);
    return rc;
}

int data_chat_from_json(const json_t *root, data_chat_msg **msgs, int *n, base_err *err) {
    *msgs = NULL;
    *n = 0;
    if (!json_is_array(root))
        return base_fail(err, "chat messages: top level must be a JSON array of message objects");
    size_t cnt = json_array_size(root);
    if (cnt > (size_t)1 << 24) return base_fail(err, "chat messages: too many messages (%zu)", cnt);
    static const char *const fields[3] = {"role", "content", "reasoning_content"};
    int rc = -1;
    size_t bytes = cnt * sizeof(data_chat_msg), i;
    json_t *m;
    json_array_foreach((json_t *)root, i, m) {
        if (!json_is_object(m)) {
            base_fail(err, "chat messages: messages[%zu]: must be an object", i);
            goto done;
        }
        for (int f = 0; f < 3; f++) {
            json_t *v = json_object_get(m, fields[f]);
            if (f == 2 && (!v || json_is_null(v))) continue;
            if (!v) {
                base_fail(err, "chat messages: messages[%zu].%s: missing", i, fields[f]);
                goto done;
            }
            if (!json_is_string(v)) {
                base_fail(err,
                          f == 1 ? "chat messages: messages[%zu].%s: non-string content is not "
                                   "supported yet"
                                 : "chat messages: messages[%zu].%s: must be a string",
                          i, fields[f]);
                goto done;
            }
            if (strlen(json_string_value(v)) != json_string_length(v)) {
                base_fail(err, "chat messages: messages[%zu].%s: contains a NUL character", i,
                          fields[f]);
                goto done;
            }
            bytes += json_string_length(v) + 1;
        }
        if (tool_calls_present(json_object_get(m, "tool_calls"))) {
            base_fail(err,
                      "chat messages: messages[%zu].tool_calls: tool calls are not supported yet",
                      i);
            goto done;
        }
        if (check_role((int)i, json_string_value(json_object_get(m, "role")), err)) goto done;
    }
    data_chat_msg *out = malloc(bytes ? bytes : 1);
    if (!out) {
        base_fail(err, "chat messages: out of memory");
        goto done;
    }
    char *s = (char *)(out + cnt);
    json_array_foreach((json_t *)root, i, m) {
        const char **dst[3] = {&out[i].role, &out[i].content, &out[i].reasoning_content};
        for (int f = 0; f < 3; f++) {
            json_t *v = json_object_get(m, fields[f]);
            if (!json_is_string(v)) {
                *dst[f] = NULL;
                continue;
            }
            size_t l = json_string_length(v);
            memcpy(s, json_string_value(v), l + 1);
            *dst[f] = s;
            s += l + 1;
        }
    }
    *msgs = out;
    *n = (int)cnt;
    rc = 0;
done:
    return rc;
}

void data_chat_msgs_free(data_chat_msg *msgs) {
    free(msgs);
}

int data_chat_template_check(const data_tok *t, base_err *err) {
    /* FNV-1a 64 of the Qwen3 models' chat_template (tokenizer_config.json): the newer one,
     * which checks `message.content is string`, and the first release's */
    static const uint64_t qwen3[] = {0x959a4551391a6549ULL, 0x2bfdb7aa9754484eULL};
    const uint64_t h = data_tok_chat_template(t);
    for (size_t i = 0; i < sizeof qwen3 / sizeof *qwen3; i++)
        if (h == qwen3[i]) return 0;
    return base_fail(err,
                     "%s: titan renders the Qwen3 chat template only (src/data/chat.c), and this "
                     "template differs (FNV-1a 64 %016llx): its chat text would not be what "
                     "transformers' apply_chat_template makes",
                     h == 0   ? "the tokenizer has no chat template"
                     : h == 1 ? "the tokenizer's chat_template is not one string"
                              : "the tokenizer's chat template is not Qwen3's",
                     (unsigned long long)h);
}
