/* Chat template tests: the Qwen3 template cases of ../shared tokenizer vectors (rendered text
 * and its ids), the assistant-history reasoning logic, and refused inputs. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "data/data.h"

#ifndef TITAN_SHARED_DIR
#define TITAN_SHARED_DIR "../shared"
#endif

static void check_vectors(data_tok *t) {
    char path[1024];
    snprintf(path, sizeof path, "%s/data/tokenizer_vectors/qwen3_generated_vectors.json",
             TITAN_SHARED_DIR);
    json_error_t je;
    json_t *root = json_load_file(path, JSON_ALLOW_NUL, &je);
    CHECK(root, "cannot load %s", path);
    if (!root) return;
    json_t *arr = json_object_get(root, "chat_template"), *c;
    CHECK(json_array_size(arr) == 6, "expected 6 chat_template cases, got %zu",
          json_array_size(arr));
    size_t i;
    json_array_foreach(arr, i, c) {
        const char *name = json_string_value(json_object_get(c, "name"));
        char *msgs_json = json_dumps(json_object_get(c, "messages"), 0);
        data_chat_msg *msgs = NULL;
        int n = 0;
        base_err err;
        int rc = data_chat_parse_json(msgs_json, strlen(msgs_json), &msgs, &n, &err);
        free(msgs_json);
        CHECK(rc == 0, "%s: parse: %s", name, err.msg);
        if (rc) continue;
        json_t *opt = json_object_get(c, "options");
        json_t *agp = json_object_get(opt, "add_generation_prompt");
        json_t *et = json_object_get(opt, "enable_thinking");
        char *out = NULL;
        rc = data_chat_render(msgs, n, json_is_true(agp), et ? json_is_true(et) : 1, &out, &err);
        CHECK(rc == 0, "%s: render: %s", name, err.msg);
        const char *want = json_string_value(json_object_get(c, "rendered"));
        CHECK(rc == 0 && want && strcmp(out, want) == 0, "%s: rendered differs:\n%s\n--- want\n%s",
              name, out ? out : "(null)", want ? want : "(null)");
        if (rc == 0 && t) {
            data_tok_ids v = {0};
            rc = data_tok_encode(t, out, strlen(out), &v, &err);
            CHECK(rc == 0, "%s: encode: %s", name, err.msg);
            json_t *ids = json_object_get(c, "ids");
            int same = json_array_size(ids) == v.n;
            for (size_t k = 0; same && k < v.n; k++)
                same = json_integer_value(json_array_get(ids, k)) == v.ids[k];
            CHECK(same, "%s: ids differ", name);
            data_tok_ids_free(&v);
        }
        free(out);
        data_chat_msgs_free(msgs);
    }
    json_decref(root);
}

static void check_render(const data_chat_msg *m, int n, int agp, int et, const char *want) {
    char *out = NULL;
    base_err err;
    int rc = data_chat_render(m, n, agp, et, &out, &err);
    CHECK(rc == 0 && strcmp(out, want) == 0, "render: got %s want %s", rc ? err.msg : out, want);
    free(out);
}

/* Hand-worked against the Jinja template. */
static void check_history(void) {
    char *o = NULL;
    base_err err;
    CHECK(data_chat_render(NULL, 0, 1, 1, &o, &err) != 0 && o == NULL, "empty list must fail");
    /* assistant after the last user query, not last, with reasoning: kept */
    data_chat_msg a[] = {{"user", "q", NULL},
                         {"assistant", "<think>\n\nr1\n\n</think>\n\n\na1", NULL},
                         {"assistant", "a2", NULL}};
    check_render(a, 3, 0, 1,
                 "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\nr1\n</think>\n\n"
                 "a1<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\na2<|im_end|>\n");
    /* non-last without reasoning: plain; reasoning_content field wins over the content */
    data_chat_msg b[] = {{"user", "q", NULL},
                         {"assistant", "a1", NULL},
                         {"assistant", "<think>x</think>a2", "given"}};
    check_render(
        b, 3, 0, 1,
        "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\na1<|im_end|>\n"
        "<|im_start|>assistant\n<think>\ngiven\n</think>\n\n<think>x</think>a2<|im_end|>\n");
    /* no real user query (a bare <tool_response> does not count): last_query_index is the last
     * message, so the reasoning is dropped; a later system message is rendered in place */
    data_chat_msg c[] = {{"system", "s", NULL},
                         {"assistant", "p<think>a<think>\nb\n</think>mid</think>\nend", NULL},
                         {"system", "s2", NULL},
                         {"user", "<tool_response>r</tool_response>", NULL}};
    check_render(c, 4, 1, 0,
                 "<|im_start|>system\ns<|im_end|>\n<|im_start|>assistant\nend<|im_end|>\n<|im_"
                 "start|>system\ns2<|im_end|>\n<|im_start|>user\n"
                 "<tool_response>r</tool_response><|im_end|>\n<|im_start|>assistant\n"
                 "<think>\n\n</think>\n\n");
    /* split semantics: the first </think> ends the reasoning, the last <think> before it starts
     * it, the content is what follows the last </think> */
    data_chat_msg d[] = {{"user", "q", NULL},
                         {"assistant", "p<think>a<think>\nb\n</think>mid</think>\nend", NULL}};
    check_render(d, 2, 0, 1,
                 "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\nb\n</think>\n\n"
                 "end<|im_end|>\n");
}

static void check_error(const char *json, const char *needle) {
    data_chat_msg *m = NULL;
    int n = 0;
    base_err err = {{0}};
    int rc = data_chat_parse_json(json, strlen(json), &m, &n, &err);
    CHECK(rc != 0 && m == NULL && strstr(err.msg, needle),
          "%s: want error with '%s', got rc %d: %s", json, needle, rc, err.msg);
    data_chat_msgs_free(m);
}

static void check_errors(void) {
    check_error("[{\"role\":\"tool\",\"content\":\"x\"}]", "role 'tool' is not supported");
    check_error("[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\",\"content\":[1]}]",
                "messages[1].content: non-string content");
    check_error("[{\"role\":\"user\",\"content\":null}]", "messages[0].content");
    check_error("[{\"role\":\"user\",\"content\":", "invalid JSON");
    check_error("[{\"content\":\"x\"}]", "messages[0].role: missing");
    check_error("[{\"role\":\"user\"}]", "messages[0].content: missing");
    check_error("[{\"role\":7,\"content\":\"x\"}]", "messages[0].role: must be a string");
    check_error("{\"role\":\"user\",\"content\":\"x\"}", "top level");
    check_error("[\"x\"]", "messages[0]: must be an object");
    check_error("[{\"role\":\"developer\",\"content\":\"x\"}]", "role 'developer'");
    check_error("[{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{}]}]", "tool calls");
    check_error("[{\"role\":\"user\",\"content\":\"a\\u0000b\"}]", "contains a NUL character");
    /* the render API refuses the same */
    data_chat_msg t[] = {{"tool", "x", NULL}}, u[] = {{"user", NULL, NULL}};
    char *out = (char *)1;
    base_err err;
    CHECK(data_chat_render(t, 1, 1, 1, &out, &err) != 0 && out == NULL &&
              strstr(err.msg, "role 'tool' is not supported"),
          "render role tool");
    CHECK(data_chat_render(u, 1, 1, 1, &out, &err) != 0 && strstr(err.msg, "non-string content"),
          "render NULL content");
    /* a well-formed list with optional fields */
    const char *ok = "[{\"role\":\"user\",\"content\":\"hi\",\"name\":\"x\",\"tool_calls\":[]},"
                     "{\"role\":\"assistant\",\"content\":\"a\",\"reasoning_content\":null}]";
    data_chat_msg *m;
    int n;
    CHECK(data_chat_parse_json(ok, strlen(ok), &m, &n, &err) == 0 && n == 2 &&
              !strcmp(m[1].role, "assistant") && m[1].reasoning_content == NULL,
          "parse ok: %s", err.msg);
    if (n == 2) data_chat_msgs_free(m);
    CHECK(data_chat_parse_json("[]", 2, &m, &n, &err) == 0 && n == 0, "parse empty");
    data_chat_msgs_free(m);
}

int main(void) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/data/qwen3_tokenizer", TITAN_SHARED_DIR);
    data_tok *t = NULL;
    base_err err;
    int rc = data_tok_load(dir, &t, &err);
    CHECK(rc == 0, "data_tok_load %s: %s", dir, err.msg);
    check_vectors(t);
    check_history();
    check_errors();
    data_tok_free(t);
    if (failures)
        printf("%d failure(s)\n", failures);
    else
        printf("test_chat: ok\n");
    return failures != 0;
}
