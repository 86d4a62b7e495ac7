/* data: internals shared by the dataset reader (dataset.c), the packing loader (loader.c)
 * and the shard writer (tokenize.c). Not a public header. */
#ifndef TITAN_DATA_INTERNAL_H
#define TITAN_DATA_INTERNAL_H

#include <stdio.h>

#include "data/data.h"

typedef struct {
    char *path;
    data_format format;   /* resolved: never AUTO */
    int64_t size;         /* bytes, at open */
    char *tok_path;       /* tokens: the tokenizer folder its header records (version 2), or NULL */
    uint64_t tok_hash;    /* and its tokenizer.json's FNV-1a 64 */
    int text_cr;          /* text: a "\r" in its first 64 KiB (hashed into the fingerprint) */
    uint64_t content;     /* data_content_hash of the bytes the reader last opened (0: not yet) */
    int64_t content_size; /* and how many bytes those were (a resume after growth checks them) */
    int changed_said;     /* other bytes found at its path at a later open: said once */
    uint64_t dev, ino;    /* of the bytes the reader last opened (0, 0: not yet) */
} data_file;

/* A file's identity for resumes: a hash of its size and its first and last 64 KiB (whole files
 * up to 128 KiB), never 0 (0 is "not recorded"). Of the bytes in memory (a mapping of size
 * bytes), or of the first size bytes read through fd (1 when they cannot be read: an I/O error,
 * a file shorter than size), so the hash of a grown file's first size bytes is the hash its
 * whole was when it had size bytes. One hash: a file regenerated with the same size (another
 * shuffle, an edit near either end) changes it. */
uint64_t data_content_hash(const unsigned char *map, size_t size);
uint64_t data_content_hash_fd(int fd, int64_t size);
/* The same hash of the (up to) 64 KiB just before byte `end` (a resume position): of map when
 * non-NULL, else read through fd (1 when they cannot be read). A file's middle is in neither end
 * of its content hash; this covers the bytes that were read last before the position. */
uint64_t data_window_hash(const unsigned char *map, int fd, int64_t end);

/* data_loader_describe's line is its files' part (written to buf[n]), then its encoding and
 * rank's (appended to the text buf[n] holds): a mixture says the first for each source, the
 * second once for all. */
void data_loader_describe_files(const data_loader *l, char *buf, size_t n);
void data_loader_describe_rank(const data_loader *l, char *buf, size_t n);
/* l's first token shard (tokens != 0), or its first text or JSON Lines file; NULL if none. */
const data_file *data_loader_file_of(const data_loader *l, int tokens);

/* A validated, mmap'ed token shard. */
typedef struct {
    unsigned char *map;
    size_t size;
    uint64_t n_docs, n_tokens;
    int32_t vocab_size, bos, eos;
    uint64_t tok_hash;            /* version 2: FNV-1a 64 of the tokenizer.json that wrote it */
    const char *tok_path;         /* its folder (tok_path_len bytes, not NUL-terminated); */
    uint32_t tok_path_len;        /* version 1: NULL, 0 */
    const unsigned char *tokens;  /* u32 LE [n_tokens] */
    const unsigned char *offsets; /* u64 LE [n_docs + 1] */
} data_shard;

int data_shard_open(data_shard *s, const char *path, base_err *err);
void data_shard_close(data_shard *s);
/* doc_offsets[i] without the DATA_SHARD_SKIPPED mark; whether document i is a skipped slot. */
uint64_t data_shard_offset(const data_shard *s, uint64_t i);
int data_shard_skipped(const data_shard *s, uint64_t i);

/* Position of a document in the dataset (also the reader's "next document"). */
typedef struct {
    int64_t doc;      /* global index */
    int32_t file;     /* == n_files: past the end */
    int64_t file_doc; /* index within the file */
    int64_t byte_off; /* paragraph start (text), line start (jsonl) */
    int64_t line;     /* lines before it in the file (jsonl) */
} data_pos;

/* One document as read: text (text, jsonl) or stored ids (tokens). */
typedef struct {
    data_pos pos;
    const char *text;
    size_t len;
    size_t sep; /* text: 2 when a blank line ended it, 0 at the end of the file: byte tokens
                   append that many "\n" (the separator as read in text mode, whatever its
                   bytes in the file), having no eos */
    const data_shard *shard; /* tokens: ids are shard tokens [first, first + n_ids) */
    uint64_t first, n_ids;
    int skipped;      /* a malformed JSONL line skipped (data_reader.bad_slots): no text */
    const void *chat; /* a chat file's: the field's messages (json_t *, an array) instead of
                         text, valid until the next read */
} data_doc;

/* Sequential reader over a dataset's documents. */
typedef struct {
    data_file *files;
    int n_files;
    char *field;
    int skip_bad;
    int bad_counted; /* a later pass: its bad lines were counted and logged in the first */
    int bad_slots;   /* a skipped bad line is returned as a data_doc with skipped set (tokenize
                        records its slot), not passed over */
    data_pos next;
    int64_t bad_lines; /* skipped in the first pass (a line of every pass counted once) */
    FILE *fp;          /* open jsonl file */
    int fp_file;       /* which file fp is (-1 none) */
    data_shard shard;
    int shard_file; /* which file shard is (-1 none) */
    char *line;
    size_t line_cap;
    unsigned char *tmap; /* the open text file, mmap'ed (NULL when empty or none) */
    size_t tsize;
    int text_file; /* which file tmap is (-1 none) */
    char *norm;    /* a paragraph with "\r" line ends, rewritten to "\n" (normalize_eol) */
    size_t norm_cap;
    void *json; /* current JSONL object (json_t *) */
    int chat;   /* DATA_FMT_CHAT: the files are JSON Lines whose field is an array of messages
                   (data_doc.chat) */
} data_reader;

int data_reader_open(data_reader *r, const char *path, data_format format, const char *field,
                     int skip_bad, base_err *err);
void data_reader_close(data_reader *r);
/* Reads the next document. When want (NULL = all) returns 0 for a document index the document is
 * only counted (not parsed or loaded: other ranks' documents). Returns 1 with *d filled for a
 * wanted document, 0 at the end of the dataset, -1 on error. */
int data_reader_next(data_reader *r, int (*want)(int64_t doc, void *arg), void *arg, data_doc *d,
                     base_err *err);
/* Positions the reader so the next document read is the one at p (validated). */
int data_reader_seek(data_reader *r, const data_pos *p, base_err *err);
/* Positions the reader at p, a position it gave a document of an earlier pass over the same
 * files (the loader's index of a map-style dataset): unchecked; an open JSON Lines file is
 * kept open when p is in it. */
void data_reader_jump(data_reader *r, const data_pos *p);
/* Back to document 0 (next epoch). */
void data_reader_rewind(data_reader *r);
/* Hash of the file list (base names, sizes, formats) and the JSONL field (and chat). */
uint64_t data_reader_fingerprint(const data_reader *r);
/* One file's part of it, chained onto h: whole = base name, size, format and text flags (the
 * fingerprint's); else base name and format only (a file that may have grown). */
uint64_t data_file_hash(uint64_t h, const data_file *f, int whole);
/* The fingerprint's chain over files [0, n) (no field): what numbers a position in file n. */
uint64_t data_reader_files_hash(const data_reader *r, int n);
/* The position p is in a file that had old_size bytes when the run read it and has grown, its
 * first old_size bytes unchanged (the caller checked their content hash): 0 when the documents
 * read up to p (in_doc: and the one at p, partly consumed) read the same from the grown file, so
 * a resume at p continues exactly; -1 with err naming the file and what reads otherwise (a last
 * paragraph or line without its end then, run on into the new bytes). A JSON Lines position at
 * the old end of a last line without its newline moves past the newline that ends it now. */
int data_reader_check_grown(const data_reader *r, data_pos *p, int64_t old_size, int in_doc,
                            base_err *err);

#endif
