/* data: byte-level BPE tokenizer loaded from a Hugging Face tokenizer folder
 * (tokenizer.json + tokenizer_config.json), encoding exactly as HF `tokenizers` does for
 * the Qwen3 tokenizer and for plain GPT-2-style ByteLevel tokenizers.
 *
 * Supported tokenizer.json (anything else is refused with an error naming file and field):
 *   model:          type "BPE", vocab {token: id}, merges as "a b" strings or ["a", "b"] pairs,
 *                   dropout null, unk_token null, byte_fallback false, ignore_merges false,
 *                   continuing_subword_prefix / end_of_word_suffix null or "".
 *   normalizer:     null or {"type": "NFC"} (utf8proc).
 *   pre_tokenizer:  Sequence[Split(Regex, Isolated, invert false),
 *                            ByteLevel(add_prefix_space false, use_regex false)]
 *                   or ByteLevel(add_prefix_space false, use_regex true) (GPT-2 regex).
 *                   Regexes run on PCRE2 (UTF + UCP, JIT).
 *   added_tokens:   lstrip, rstrip, single_word and normalized must be false; special any.
 * tokenizer_config.json is optional; bos_token / eos_token / pad_token may be a string,
 * null, or an object with "content"; the token must exist (id -1 when null or absent).
 *
 * Encode pipeline: split on added tokens (leftmost, longest match; never split further),
 * NFC the other segments, pre-tokenize, map bytes to the GPT-2 byte-level alphabet, apply
 * rank-ordered BPE merges (pair -> rank hash map, heap; pre-token -> ids cache).
 * No special tokens are added (Qwen3 adds none: like add_special_tokens=False).
 *
 * Invalid UTF-8 input: each byte that does not start a valid UTF-8 sequence (overlong,
 * surrogate, > U+10FFFF, truncated) is replaced by U+FFFD before anything else, then the
 * text is encoded as usual. Encode never fails on content; it only fails on allocation.
 *
 * A data_tok is not safe for concurrent data_tok_encode calls (the cache is shared);
 * data_tok_decode and the lookups are read-only. */
#ifndef TITAN_DATA_TOKENIZER_H
#define TITAN_DATA_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

typedef struct data_tok data_tok;

/* Growable id list: data_tok_encode appends to it. Zero-initialise; free with
 * data_tok_ids_free. */
typedef struct {
    int32_t *ids;
    size_t n, cap;
} data_tok_ids;

void data_tok_ids_free(data_tok_ids *v);

/* Loads dir/tokenizer.json and (if present) dir/tokenizer_config.json. */
int data_tok_load(const char *dir, data_tok **out, base_err *err);
void data_tok_free(data_tok *t);

/* Appends the ids of text[0..len) to out. */
int data_tok_encode(data_tok *t, const char *text, size_t len, data_tok_ids *out, base_err *err);

/* Decodes ids to bytes (reverse byte-level mapping; a token with a character outside the
 * byte-level alphabet contributes its raw UTF-8). Added tokens marked special are skipped
 * when skip_special is non-zero. Output is NUL-terminated raw bytes (not repaired to valid
 * UTF-8); *out is malloc'ed, free with free(). Fails on an id outside the vocabulary. */
int data_tok_decode(const data_tok *t, const int32_t *ids, size_t n, int skip_special, char **out,
                    size_t *out_len, base_err *err);

/* One more than the largest id (vocab and added tokens). */
int32_t data_tok_vocab_size(const data_tok *t);
/* Token string of an id (NULL when none); id of a token string (-1 when none). */
const char *data_tok_token(const data_tok *t, int32_t id);
int32_t data_tok_token_id(const data_tok *t, const char *token);
int data_tok_is_special(const data_tok *t, int32_t id);
/* From tokenizer_config.json; -1 when unset. */
int32_t data_tok_bos_id(const data_tok *t);
int32_t data_tok_eos_id(const data_tok *t);
int32_t data_tok_pad_id(const data_tok *t);

/* ---- chat template (src/data/chat.c) ----
 * The Qwen3 chat template (tokenizer_config.json "chat_template") rendered in C for the
 * plain cases: messages with role "system" / "user" / "assistant" and string content,
 * add_generation_prompt and enable_thinking. Matches the Jinja template byte for byte:
 * a leading system message goes first; assistant turns have their <think>...</think>
 * reasoning taken out of content (or from reasoning_content when non-NULL); turns after the
 * last real user query keep the reasoning as "<think>\n...\n</think>\n\n" (the final
 * assistant turn always does), earlier ones drop it; enable_thinking == 0 with
 * add_generation_prompt appends an empty think block.
 * Not supported (an error names the feature): tools, tool calls, role "tool",
 * non-string content, any other role (the Jinja template silently drops unknown roles;
 * here they are refused). The rendered text still has to be encoded with data_tok_encode
 * (the special tokens <|im_start|> etc. are added tokens, matched there). */
typedef struct {
    const char *role;
    const char *content;
    const char *reasoning_content; /* optional: NULL means absent */
} data_chat_msg;

/* Renders msgs[0..n) (n >= 1: the template reads messages[0]) to a malloc'ed NUL-terminated
 * string *out (free with free()). */
int data_chat_render(const data_chat_msg *msgs, int n, int add_generation_prompt,
                     int enable_thinking, char **out, base_err *err);

/* Parses a JSON array of {"role": string, "content": string[, "reasoning_content": string
 * or null]} objects (other keys ignored; a non-empty "tool_calls" is refused). *msgs is one
 * allocation holding the strings too; free with data_chat_msgs_free. Errors name the index
 * and field. */
int data_chat_parse_json(const char *json_text, size_t len, data_chat_msg **msgs, int *n,
                         base_err *err);
void data_chat_msgs_free(data_chat_msg *msgs);

#endif
