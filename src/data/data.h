/* data: the tokenizer, the chat template, dataset sources and the packing loader.
 *
 * ---- tokenizer (src/data/tokenizer.c) ----
 * Byte-level BPE tokenizer loaded from a Hugging Face tokenizer folder
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
 * null, or an object with "content"; the token must exist (id -1 when null or absent; where
 * transformers would append such a token, titan refuses the folder). Its added_tokens_decoder
 * ({"id": {content, special, flags}}) entries whose content tokenizer.json's added_tokens lack
 * are added tokens too, with the ids transformers 5's AutoTokenizer gives them (torchtitan's
 * test tokenizer lists its special tokens only there): in the numeric order of the keys, each
 * gets its content's id in model.vocab if the vocabulary has it, else the next free id (one
 * past the largest so far); the key itself is not the id (torchtitan v0.2.2's keys 128000 /
 * 128001 past a 2002-id vocabulary become 2002 / 2003, as AutoTokenizer and torchtitan's
 * HuggingFaceTokenizer give them).
 *
 * Encode pipeline: split on added tokens (leftmost, longest match; never split further),
 * NFC the other segments, pre-tokenize, map bytes to the GPT-2 byte-level alphabet, apply
 * rank-ordered BPE merges (pair -> rank hash map, heap; pre-token -> ids cache).
 * No special tokens are added (Qwen3 adds none: like add_special_tokens=False).
 *
 * Invalid UTF-8 input: each maximal subpart of an ill-formed sequence (a lead byte and the
 * continuation bytes that could still complete it, e.g. a truncated "\xE4\xB8"; or a byte
 * that starts nothing: a stray continuation byte, C0, C1, F5..FF, the first byte of an overlong
 * E0 80 80, surrogate ED A0 80 or > U+10FFFF F4 90 ...) is replaced by one U+FFFD before
 * anything else, as Python's bytes.decode("utf-8", "replace") does (Unicode's recommended
 * practice), then the text is encoded as usual (HF `tokenizers` takes only valid strings).
 * Encode never fails on content; it only fails on allocation.
 *
 * A data_tok is not safe for concurrent data_tok_encode calls (the cache is shared);
 * data_tok_decode and the lookups are read-only. */
#ifndef TITAN_DATA_H
#define TITAN_DATA_H

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
/* FNV-1a 64 of tokenizer.json's bytes: names the tokenizer in checkpoints and token shards
 * (any edit of the file, whitespace included, makes another tokenizer). */
uint64_t data_tok_fingerprint(const data_tok *t);
/* FNV-1a 64 of the tokenizer's chat template text (its chat_template.jinja, else
 * tokenizer_config.json's "chat_template"); 0 when it has none, 1 when that is no string. */
uint64_t data_tok_chat_template(const data_tok *t);

/* Appends the ids of text[0..len) to out. */
int data_tok_encode(data_tok *t, const char *text, size_t len, data_tok_ids *out, base_err *err);

/* s[len] with each maximal subpart of an ill-formed UTF-8 sequence replaced by one U+FFFD, as
 * Python's bytes.decode("utf-8", "replace") and Rust's String::from_utf8_lossy (HF tokenizers'
 * decode) do; NUL-terminated, malloc'ed (*out_len its length), NULL when out of memory. */
char *data_utf8_repair(const char *s, size_t len, size_t *out_len);

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
struct json_t;
/* The same from a parsed JSON array (a chat dataset's field, json_t *; errors as above). */
int data_chat_from_json(const struct json_t *messages, data_chat_msg **msgs, int *n, base_err *err);
void data_chat_msgs_free(data_chat_msg *msgs);

/* 0 when the tokenizer's chat template is one this renderer reproduces (the Qwen3 releases'
 * two: they differ only for non-string content, which is refused here), else -1 with err
 * saying that its examples would be rendered otherwise than transformers renders them. */
int data_chat_template_check(const data_tok *t, base_err *err);

/* ---- datasets (src/data/dataset.c) ----
 * A dataset is an ordered list of files, each holding documents:
 *   text    one document per paragraph, as Hugging Face datasets' text loader with
 *           sample_by="paragraph": it reads the file in Python's text mode (universal
 *           newlines: "\r\n" and a lone "\r" become "\n") and splits it at every blank line
 *           ("\n\n", the separator dropped, empty pieces skipped). So a line end here is
 *           "\r\n", "\r" or "\n", a blank line two in a row, and a paragraph's line ends reach
 *           the tokenizer as "\n"; positions are byte offsets into the file; mmap'ed;
 *   jsonl   one document per non-blank line, a JSON object whose string field `field`
 *           (default "text") is the document; streamed line by line, never read whole; a
 *           UTF-8 byte-order mark opening the file is skipped (positions count its bytes);
 *   tokens  a titan token shard (below): pre-tokenized documents, mmap'ed.
 * A path is a file, a directory (its regular files, sorted by name, hidden files skipped) or
 * a glob(3) pattern (matches sorted). Format "auto" decides per file: the shard magic ->
 * tokens, extension .jsonl / .json / .ndjson -> jsonl, anything else -> text.
 * Documents are numbered globally across the files in order, starting at 0.
 *
 * Token shard format (little endian), version 2, or 3 where a skipped slot is marked
 * (version 1: no tokenizer record, L and the hash absent, the header 48 bytes; still read):
 *   0   char[8]  magic "TITANTOK"
 *   8   u32      version (2 or 3)
 *   12  u32      dtype (1 = uint32 token ids; the only one defined)
 *   16  u64      n_docs
 *   24  u64      n_tokens
 *   32  i32      vocab_size of the tokenizer that wrote it (ids are < vocab_size)
 *   36  i32      bos_id, 40 i32 eos_id (-1 = none): the loader adds them, they are not stored
 *   44  u32      L: length of the tokenizer's path (<= 4096)
 *   48  u64      FNV-1a 64 of the tokenizer's tokenizer.json (data_tok_fingerprint)
 *   56  char[L]  the tokenizer folder's absolute path, zero-padded to a multiple of 8: H bytes
 *   H   u32      tokens[n_tokens], zero-padded to a multiple of 8 bytes
 *   ... u64      doc_offsets[n_docs + 1]   token offsets: [0] = 0, non-decreasing,
 *                                          [n_docs] = n_tokens once bit 63 (version 3's
 *                                          DATA_SHARD_SKIPPED) is masked off; the file ends
 *                                          there exactly.
 * The header and offsets are validated on open; token ids are checked as documents are read. */
/* DATA_FMT_COUNT: how many there are (a new format goes before it, with its name in
 * dataset.c's format_names) */
typedef enum {
    DATA_FMT_AUTO,
    DATA_FMT_TEXT,
    DATA_FMT_JSONL,
    DATA_FMT_TOKENS,
    /* JSON Lines whose field (default "messages") holds a chat example: torchtitan 0.3's
     * ChatDataset (data_loader_cfg: prompt masked, examples packed whole) */
    DATA_FMT_CHAT,
    DATA_FMT_COUNT
} data_format;

/* "auto", "text", "jsonl", "tokens", "chat"; -1 when unknown. */
int data_format_parse(const char *s, data_format *out);
const char *data_format_name(data_format f);

#define DATA_SHARD_MAGIC "TITANTOK"
/* In a token-shard folder while titan tokenize writes it, removed when it has finished (or
 * failed and removed its shards): a folder that still holds it is refused by every reader (a
 * killed tokenize's shards are part of the data). */
#define DATA_TOKENIZE_MARK ".titan-tokenize-unfinished"
#define DATA_SHARD_VERSION 3u
#define DATA_SHARD_HEADER_BYTES 48 /* version 1; versions 2-3: 56 + the path, padded to 8 */
/* Version 3: this bit of doc_offsets[i + 1] marks document i as a malformed line that
 * --skip-bad-lines skipped (no ids, no bos / eos): it keeps its number, so data-parallel
 * sharding of the shards deals the documents the JSONL file deals. */
#define DATA_SHARD_SKIPPED ((uint64_t)1 << 63)
#define DATA_SHARD_MAX_PATH 4096

/* Counts the documents of a dataset into *n, stopping once there are `limit` (<= 0: all);
 * only counts (JSONL lines are not parsed: a malformed line still counts, as in sharding). */
int data_count_docs(const char *path, data_format format, const char *field, int64_t limit,
                    int64_t *n, base_err *err);

/* How text becomes ids: a tokenizer (bos if it has one + tokens + eos from
 * tokenizer_config.json, as torchtitan's HF dataset), or, when tok is NULL, raw bytes
 * (id = byte value, no bos/eos: the byte-level demo; a text paragraph keeps its "\n\n"
 * separator then, so the byte stream reads like the file read in text mode). */
typedef struct {
    data_tok *tok;
    int32_t vocab_size; /* ids must be < this: the model's vocabulary */
} data_encoder;

/* ---- token shards from a dataset (src/data/tokenize.c) ---- */

/* Writes token shards from a dataset, using `threads` threads (<= 0: all cores; each has
 * its own tokenizer). Documents keep their order; a shard is closed once it holds at least
 * shard_tokens tokens (documents are never split), so out_dir gets shard-00000.tok, ...
 * Prints nothing; fills *n_docs and *n_tokens (may be NULL). */
typedef struct {
    const char *path; /* input dataset (text or jsonl; tokens refused) */
    data_format format;
    const char *field;     /* JSONL text field; NULL = "text" */
    int skip_bad_lines;    /* skip (count, log) malformed JSONL lines instead of failing */
    const char *tokenizer; /* tokenizer folder */
    const char *out_dir;
    int64_t shard_tokens; /* <= 0: 1 << 28 */
    int threads;
} data_tokenize_cfg;
int data_tokenize(const data_tokenize_cfg *cfg, int64_t *n_docs, int64_t *n_tokens, base_err *err);

/* ---- the packing loader (src/data/loader.c) ----
 * torchtitan v0.2.2's HuggingFaceTextDataset packing. Document i goes to data-parallel rank
 * i mod dp_size (interleaved). torchtitan splits its dataset with HF datasets'
 * split_dataset_by_node, and this is that split in one of its cases only: an IterableDataset
 * (streaming) whose shard count is not a multiple of the world size keeps example i on rank
 * i % world_size. A map-style Dataset (v0.2.2's c4_test: load_dataset(path, split="train")) is
 * split into contiguous blocks instead (Dataset.shard(contiguous=True): rank r gets the r-th
 * run of about N / dp_size documents; data_loader_cfg.map_style reads so), and a streaming dataset
 * whose shard count is a multiple of the world size (allenai/c4) assigns whole shard files to
 * ranks; with dp_size > 1 those give each rank other documents than titan does (with dp_size 1
 * every case is the same). Each document of this rank becomes [bos] + tokens + [eos] and is
 * appended to one stream; the stream is cut into consecutive, non-overlapping windows of
 * seq_len + 1 tokens (input = window[:-1], labels = window[1:]; windows cross document
 * boundaries); a batch is `batch` consecutive windows. When the dataset is exhausted it
 * restarts from document 0 (epoch + 1, logged once per restart), keeping the partial
 * window; a non-infinite loader (validation) ends instead, dropping the partial window (and
 * the partial batch, unless partial_last). */
typedef struct {
    const char *path;
    data_format format;
    const char *field;  /* NULL = "text" */
    int skip_bad_lines; /* skip (count, log) malformed JSONL lines instead of failing */
    int bad_lines_said; /* an earlier loader of this file logged them: skipped silently */
    data_encoder enc;
    int seq_len, batch;
    int dp_rank, dp_size; /* dp_size 0 = 1 */
    int infinite;
    /* a non-infinite loader's last batch may hold fewer than `batch` whole windows (as
     * torchtitan's validation loader, drop_last False): data_loader_next returns it with the
     * missing rows' inputs 0 and labels pad_label (validation passes OPS_IGNORE_INDEX) */
    int partial_last;
    int32_t pad_label;
    /* torchtitan 0.3's packing (document masking): each document [bos] + ids + [eos] adds its
     * tokens but the last as inputs and its tokens but the first as their labels (no label is
     * another document's, and a document's last token is no input), and a window is the next
     * seq_len of those pairs. 0: v0.2.2's, a window the next seq_len + 1 tokens of the stream
     * (inputs window[:-1], labels window[1:]). The state means the same in both (the next
     * input is token doc_tokens of document doc): a run resumes across the setting. */
    int doc_shift;
    /* Read as a map-style Hugging Face Dataset (load_dataset without streaming), as torchtitan
     * 0.3's ChatDataset and its c4_test text loader read theirs, not as a stream: every
     * document is indexed at open (~48 bytes each); data-parallel rank r reads the r-th
     * contiguous block of about N / dp_size documents (Dataset.shard(contiguous=True)), chat
     * examples of Dataset.shuffle(seed=42)'s order (data_shuffle_permutation), other formats
     * of file order; epoch e >= 1 reads the block in shuffle(seed=42 + e)'s order of it (0.3's
     * reloop). Text, JSON Lines and chat files (token shards are refused: read in order). The
     * files must not change between a checkpoint and its resume (the order depends on all of
     * them). */
    int map_style;
} data_loader_cfg;

/* Where the next window starts: everything needed to resume exactly. Restoring re-reads
 * the documents from `doc` on and drops the first `doc_tokens` tokens of that one.
 * A dataset that only grew after the position resumes there too (data_loader_set_state): the
 * documents before it number it (`doc` counts them within the epoch, and they deal documents to
 * data-parallel ranks), so they must be the ones the run read; those after it are read as they
 * are now, which an uninterrupted run over the grown data would read from there. `setup`,
 * `before`, `name`, `size` and `window` are what that is checked by (0: a state saved before
 * titan recorded them, resumed only on the unchanged dataset, as then; `window` 0: not checked).
 * Bytes of the position's file outside its first and last 64 KiB then and the 64 KiB before the
 * position are not hashed: an edit there that keeps the size is not seen. */
typedef struct {
    int64_t epoch;        /* 0-based */
    int64_t doc;          /* global document index (this epoch) holding the next token */
    int64_t doc_tokens;   /* tokens of that document ([bos] + ids + [eos]) already consumed */
    int32_t file;         /* index of the file holding it */
    int64_t file_doc;     /* document index within that file */
    int64_t byte_off;     /* byte offset of its paragraph (text) or line (jsonl); 0 shards */
    int64_t line;         /* lines before it in that file (jsonl; 0 otherwise) */
    int64_t bad_lines;    /* malformed JSONL lines skipped (in the first pass: once each) */
    uint64_t fingerprint; /* hash of the file list, sizes and encoding settings */
    uint64_t content;     /* hash of `file`'s first and last 64 KiB (0: not recorded, a
                           * state saved before titan recorded it) */
    uint64_t setup;       /* hash of the JSONL field, the tokenizer's vocab_size / bos / eos, the
                           * data-parallel rank and size: the fingerprint's part that is no file */
    uint64_t before;      /* hash of files [0, file): names, sizes, formats, text flags */
    uint64_t name;        /* hash of `file`'s base name and format (0: past the last file) */
    int64_t size;         /* bytes of `file` when the run read it: those `content` hashes */
    uint64_t window;      /* hash of the (up to) 64 KiB of `file` just before byte_off, of the
                           * bytes the run read (0: not recorded, a state saved before it) */
    int32_t map_style;    /* a map-style loader's (data_loader_cfg.map_style): `doc` counts this
                           * rank's documents in the epoch's order, `file` .. `line` are that
                           * document's own place (N of them: past the last file, 0s) */
} data_loader_state;

/* Hugging Face Dataset.shuffle(seed)'s order of n documents: numpy's
 * default_rng(seed).permutation(n) into perm[n] (PCG64 seeded by SeedSequence; data/shuffle.c). */
void data_shuffle_permutation(uint64_t seed, int64_t n, int64_t *perm);

typedef struct data_loader data_loader;

int data_loader_open(data_loader **out, const data_loader_cfg *cfg, base_err *err);
void data_loader_free(data_loader *l);
/* Fills inputs[batch * seq_len] and labels[batch * seq_len]. Returns 1 with a batch, 0 at
 * the end of a non-infinite loader, -1 on error (err names the file, line or document).
 * positions (may be NULL; only with doc_shift: document masking, torchtitan's block_causal) gets
 * each input's position in its document's part of its window: 0 where a document starts, and
 * at the window's first input (a document begun in an earlier window continues from 0, as
 * torchtitan 0.3's loader normalises it), +1 per input after (a missing row of a short last
 * batch: one document, 0..seq_len-1). */
int data_loader_next(data_loader *l, int32_t *inputs, int32_t *labels, int32_t *positions,
                     base_err *err);
void data_loader_get_state(const data_loader *l, data_loader_state *s);
/* Repositions the loader. The same files (the fingerprint matches) resume unless the position's
 * file was rewritten with its size (the content hash differs). Other files resume where the
 * dataset only grew after the position (one info line says so): the same setup, files
 * [0, file) unchanged, `file` the same name and format, at least `size` bytes long with the same
 * first `size` bytes (their content hash) read into the same documents up to the position (a
 * last paragraph or line without its end then, continued by the new bytes, is refused); the
 * files after it, and new ones listed after it, are read as they are. Anything else fails,
 * naming the file and what changed, as does a position outside the data or at no position a
 * reader reaches (doc below file_doc, or other than it in the first file). */
int data_loader_set_state(data_loader *l, const data_loader_state *s, base_err *err);
/* The tokenizer the dataset's token shards record (the first shard's that records one:
 * version 2 headers; the loader checks every shard against the run's tokenizer when it has
 * one, and without one refuses at open shards that record different ones, so it is all of
 * theirs): its folder (*path, NUL-terminated) and tokenizer.json's FNV-1a 64. 0 when found, -1
 * when no shard records one (text, JSON Lines, version 1 shards). */
int data_loader_shard_tokenizer(const data_loader *l, const char **path, uint64_t *hash);
/* One line for logs: files, formats and what is known up front (token shards: documents and
 * tokens; text: paragraphs, counted as read; JSON Lines: streamed, counted as read). */
void data_loader_describe(const data_loader *l, char *buf, size_t n);
/* The state as one line of JSON ({"epoch": 0, ...}, at most DATA_LOADER_STATE_MAX bytes with
 * its NUL, whatever the values) and back; a state without setup / before / name / size (saved
 * before titan wrote them) parses with them 0. */
#define DATA_LOADER_STATE_MAX 512
int data_loader_state_format(const data_loader_state *s, char *buf, size_t n);
int data_loader_state_parse(const char *json, data_loader_state *s, base_err *err);

/* ---- a weighted mixture of datasets (src/data/mix.c) ----
 * torchtitan 0.3's InterleavedHuggingFaceTextDataLoader / InterleavedChatDataLoader: n sources,
 * each a loader of its own (the settings in data_mix_cfg.loader, its own path; each split over
 * the data-parallel ranks and re-looped on its own, as 0.3's infinite sources), and every
 * window (row) of a batch is the next window of one source, drawn as 0.3's InterleavedDataset
 * draws it: Python's random.Random(seed).choices(range(n), weights = w / sum(w)), the same
 * draws on every rank. With n == 1 it is that one loader (no draws; its state as before).
 * The state: the generator's (Python's getstate(): 624 words and an index, as 0.3 saves its
 * interleaver's RNG state) and each source's position, with the seed, the draws made and the
 * weights for the record, and the rows each source gave since the start: {"mix_seed": S,
 * "mix_draws": D, "mix_rng_index": I, "mix_rng": "hex", "mix_weights": [...], "mix_rows": [...],
 * "sources": [...]}. */
#define DATA_MIX_MAX 64
/* A mixture's state: its own keys and generator (624 words in hex: 4992 bytes; < 5200 in all),
 * then per source its position, a weight (%.17g: <= 24 bytes), its rows (<= 20) and separators
 * (< 56 with them);
 * DATA_MIX_STATE_CAP the largest (DATA_MIX_MAX sources), ~40 KB */
#define DATA_MIX_STATE_FIXED 5200
#define DATA_MIX_STATE_SOURCE (DATA_LOADER_STATE_MAX + 56)
#define DATA_MIX_STATE_CAP (DATA_MIX_STATE_FIXED + DATA_MIX_MAX * DATA_MIX_STATE_SOURCE)
typedef struct {
    data_loader_cfg loader;   /* every source's settings (path: paths[i]; infinite when n > 1) */
    const char *const *paths; /* n of them */
    const double *weights;    /* n sampling weights (>= 0, a finite sum > 0); NULL: 1 each */
    /* n JSON Lines fields, one a source (0.3's sources each have their dataset's own
     * sample_processor); NULL, or an item NULL or "": loader.field */
    const char *const *fields;
    int n;
    uint64_t seed; /* torchtitan 0.3's interleaving seed (its default 42) */
} data_mix_cfg;
typedef struct data_mix data_mix;
/* Errors name the source (n > 1) and its file. */
int data_mix_open(data_mix **out, const data_mix_cfg *cfg, base_err *err);
void data_mix_free(data_mix *m);
int data_mix_sources(const data_mix *m);
/* data_loader_next over the mixture: `batch` rows, each from its drawn source. */
int data_mix_next(data_mix *m, int32_t *inputs, int32_t *labels, int32_t *positions, base_err *err);
/* data_loader_shard_tokenizer's of the first source that has one (sources whose shards record
 * different tokenizers are refused at open when the run has none). */
int data_mix_shard_tokenizer(const data_mix *m, const char **path, uint64_t *hash);
void data_mix_describe(const data_mix *m, char *buf, size_t n);
/* rows[n]: the rows each source gave since the start (since open, plus a restored state's). */
void data_mix_rows(const data_mix *m, int64_t *rows);
/* The state as one line of JSON into buf[data_mix_state_max(m)] (n == 1: the loader's, as
 * data_loader_state_format), and back: the sources' positions must be this mixture's count
 * (one dataset and a mixture never take each other's); each is checked as data_loader_set_state
 * checks it. A state seeded otherwise than this run goes on from its own generator (said), as
 * 0.3 restores its interleaver's RNG state. */
size_t data_mix_state_max(const data_mix *m);
int data_mix_state_format(const data_mix *m, char *buf, size_t n);
int data_mix_state_restore(data_mix *m, const char *json, base_err *err);
/* 0 when weights[n] are each finite and >= 0 with a finite sum above 0, else -1 with err. */
int data_mix_weights_check(const double *weights, int n, base_err *err);
/* The sources draws skip .. skip + count - 1 pick (out[count]): for tests. */
void data_mix_draws(uint64_t seed, const double *weights, int n, int64_t skip, int count, int *out);

/* ---- Subcommands (data/cli.c) -----------------------------------------------------------
 * titan encode, decode, tokenize and data: argv[1] is the subcommand, its options follow.
 * They return 0 or -1 with err filled; --help prints the usage to stdout and returns 0. */
int data_cmd_encode(int argc, char **argv, base_err *err);
void data_cmd_encode_usage(FILE *f);
int data_cmd_decode(int argc, char **argv, base_err *err);
void data_cmd_decode_usage(FILE *f);
int data_cmd_tokenize(int argc, char **argv, base_err *err);
void data_cmd_tokenize_usage(FILE *f);
int data_cmd_data(int argc, char **argv, base_err *err);
void data_cmd_data_usage(FILE *f);

#endif
