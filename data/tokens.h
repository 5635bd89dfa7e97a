// data/tokens.h: where training tokens come from.
//   - byte-level text: every byte is a token (vocab 256);
//   - llm.c token files: a header of 256 int32 (magic, version, token count), then the
//     tokens: GPT-2's format (magic 20240520, version 1) as uint16, LLaMA-3's (magic
//     20240801, version 7) as uint32, for vocabularies over 65536 (DeepSeek-V3's 129280);
//   - "synthetic": a deterministic, learnable text generated here, needing no file.
#ifndef MESHMOE_TOKENS_H
#define MESHMOE_TOKENS_H

#include <stddef.h>
#include <stdint.h>

// In memory every token is a uint32_t, whatever the file held.
#define TOKFILE_MAGIC 20240520     // uint16 tokens
#define TOKFILE_VERSION 1
#define TOKFILE_MAGIC32 20240801   // uint32 tokens
#define TOKFILE_VERSION32 7
#define TOKFILE_HEADER_INTS 256

// Reads a file's bytes as tokens (malloc'd; caller frees). Dies on a missing/empty file.
uint32_t *text_read_bytes(const char *path, size_t *n);
// Writes tokens as an llm.c token file, atomically (base/paths.h): as uint16 when every
// token is below 65536, else as uint32.
void tokfile_write(const char *path, const uint32_t *tok, size_t n);
// Reads an llm.c token file of either format; dies naming the path on a wrong magic or
// version, or a truncated file.
uint32_t *tokfile_read(const char *path, size_t *n);
// The synthetic corpus: about n_target tokens of ASCII sentences from a small grammar.
uint32_t *synthetic_tokens(size_t n_target, uint64_t seed, size_t *n);
// dataset_path as the config gives it: "synthetic", a token file (starts with either
// magic or ends in .bin), or else a byte-level text.
uint32_t *data_load(const char *dataset_path, size_t *n);
// The same, and *bytes (if not NULL): 1 where the tokens are bytes (a text, or the synthetic
// corpus), 0 for a token file's ids.
uint32_t *data_load_as(const char *dataset_path, size_t *n, int *bytes);
// Dies if any token is >= vocab (naming the first such token and where it is).
void data_check_vocab(const uint32_t *tok, size_t n, int vocab, const char *path);
// An FNV-1a hash of the n tokens' values: two copies of a data set compared without sending it.
uint64_t data_hash(const uint32_t *tok, size_t n);

#endif
