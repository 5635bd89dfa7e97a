// data/tokens.h: where training tokens come from.
//   - byte-level text: every byte is a token (vocab 256);
//   - llm.c token files: a header of 256 int32 (magic 20240520, version 1, token count),
//     then the tokens as uint16;
//   - "synthetic": a deterministic, learnable text generated here, needing no file.
#ifndef MESHMOE_TOKENS_H
#define MESHMOE_TOKENS_H

#include <stddef.h>
#include <stdint.h>

#define TOKFILE_MAGIC 20240520
#define TOKFILE_VERSION 1
#define TOKFILE_HEADER_INTS 256

// Reads a file's bytes as tokens (malloc'd; caller frees). Dies on a missing/empty file.
uint16_t *text_read_bytes(const char *path, size_t *n);
// Writes tokens as an llm.c token file, atomically (base/paths.h).
void tokfile_write(const char *path, const uint16_t *tok, size_t n);
// Reads an llm.c token file; dies naming the path on wrong magic/version or truncation.
uint16_t *tokfile_read(const char *path, size_t *n);
// The synthetic corpus: about n_target tokens of ASCII sentences from a small grammar.
uint16_t *synthetic_tokens(size_t n_target, uint64_t seed, size_t *n);
// dataset_path as the config gives it: "synthetic", a token file (starts with the magic
// or ends in .bin), or else a byte-level text.
uint16_t *data_load(const char *dataset_path, size_t *n);
// Dies if any token is >= vocab (naming the first such token and where it is).
void data_check_vocab(const uint16_t *tok, size_t n, int vocab, const char *path);

#endif
