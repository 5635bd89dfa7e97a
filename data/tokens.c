// data/tokens.c: byte-level text, llm.c token files and the synthetic corpus.
// Token arrays are host memory (the data set, not a device tensor), so plain malloc.
#include "data/tokens.h"
#include "base/paths.h"
#include "core/common.h"
#include <sys/stat.h>
#include <errno.h>
#include <unistd.h>

static uint32_t *alloc_tokens(size_t n) {
    uint32_t *t = malloc(sizeof(uint32_t) * (n ? n : 1));
    if (!t) die("out of host memory for %zu tokens", n);
    return t;
}

static FILE *open_data(const char *path) {
    FILE *fp = fopen_input(path);
    if (!fp) die("cannot open data file '%s': %s", path, strerror(errno));
    return fp;
}

// The size of a regular file; anything else (a directory, a pipe) is refused by name.
static size_t file_size(FILE *fp, const char *path) {
    struct stat st;
    if (fstat(fileno(fp), &st) != 0) die("cannot read data file '%s': %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode)) { fclose(fp); die("data file '%s' is a directory; dataset_path must name a file", path); }
    if (!S_ISREG(st.st_mode)) { fclose(fp); die("data file '%s' is not a regular file", path); }
    return (size_t)st.st_size;
}

uint32_t *text_read_bytes(const char *path, size_t *n) {
    FILE *fp = open_data(path);
    size_t sz = file_size(fp, path);
    if (sz == 0) { fclose(fp); die("data file '%s' is empty", path); }
    unsigned char *bytes = malloc(sz);
    if (!bytes) { fclose(fp); die("out of host memory reading '%s' (%zu bytes)", path, sz); }
    size_t got = fread(bytes, 1, sz, fp);
    fclose(fp);
    if (got != sz) { free(bytes); die("cannot read '%s'", path); }
    uint32_t *tok = alloc_tokens(sz);
    for (size_t i = 0; i < sz; i++) tok[i] = bytes[i];
    free(bytes);
    *n = sz;
    return tok;
}

void tokfile_write(const char *path, const uint32_t *tok, size_t n) {
    if (n > INT32_MAX) die("too many tokens (%zu) for an llm.c token file", n);
    int wide = 0;
    for (size_t i = 0; i < n; i++) wide |= tok[i] > 0xFFFF;
    int32_t hdr[TOKFILE_HEADER_INTS] = {wide ? TOKFILE_MAGIC32 : TOKFILE_MAGIC, wide ? TOKFILE_VERSION32 : TOKFILE_VERSION,
                                        (int32_t)n};
    FILE *fp = atomic_file_open(path);
    // The format is little-endian; so is every machine this runs on (x86-64, arm64).
    fwrite(hdr, sizeof hdr, 1, fp);
    if (wide) fwrite(tok, sizeof(uint32_t), n, fp);
    uint16_t part[4096];   // (narrowed a piece at a time)
    for (size_t i = 0; !wide && i < n; i += 4096) {
        size_t k = MM_MIN(n - i, (size_t)4096);
        for (size_t j = 0; j < k; j++) part[j] = (uint16_t)tok[i + j];
        fwrite(part, sizeof(uint16_t), k, fp);
    }
    atomic_file_commit(fp);   // checks every write: the stream's error flag is sticky
}

// The bytes of one token in a file with this header: 2 (GPT-2's format), 4 (LLaMA-3's), or
// 0 when the magic and version are neither.
static size_t token_bytes(const int32_t *hdr) {
    if (hdr[0] == TOKFILE_MAGIC && hdr[1] == TOKFILE_VERSION) return sizeof(uint16_t);
    if (hdr[0] == TOKFILE_MAGIC32 && hdr[1] == TOKFILE_VERSION32) return sizeof(uint32_t);
    return 0;
}

// Why a token file of sz bytes with this header cannot be read (a message naming the path),
// or NULL when it can.
static const char *tokfile_check(const int32_t *hdr, size_t sz, const char *path) {
    static _Thread_local char msg[600];
    size_t hb = sizeof(int32_t) * TOKFILE_HEADER_INTS, w = token_bytes(hdr);
    if (sz < hb)
        snprintf(msg, sizeof msg, "token file '%s' is truncated: %zu bytes, shorter than the %zu-byte header", path, sz, hb);
    else if (hdr[0] != TOKFILE_MAGIC && hdr[0] != TOKFILE_MAGIC32)
        snprintf(msg, sizeof msg, "'%s' is not an llm.c token file: magic number %d, expected %d (uint16 tokens) or %d "
                 "(uint32)", path, hdr[0], TOKFILE_MAGIC, TOKFILE_MAGIC32);
    else if (!w)
        snprintf(msg, sizeof msg, "token file '%s' has version %d; this reader knows version %d with magic %d (uint16 "
                 "tokens) and version %d with magic %d (uint32)", path, hdr[1], TOKFILE_VERSION, TOKFILE_MAGIC,
                 TOKFILE_VERSION32, TOKFILE_MAGIC32);
    else if (hdr[2] <= 0)
        snprintf(msg, sizeof msg, "token file '%s' says it holds %d tokens", path, hdr[2]);
    else if ((sz - hb) % w)
        snprintf(msg, sizeof msg, "token file '%s' has %zu bytes after its header, not a multiple of %zu: tokens are %zu "
                 "bytes each, so the file is cut or has a stray byte", path, sz - hb, w, w);
    else if ((sz - hb) / w != (size_t)hdr[2])
        snprintf(msg, sizeof msg, "token file '%s' is %s: the header says %d tokens, the file holds %zu", path,
                 (sz - hb) / w < (size_t)hdr[2] ? "truncated" : "longer than its header says", hdr[2], (sz - hb) / w);
    else
        return NULL;
    return msg;
}

uint32_t *tokfile_read(const char *path, size_t *n) {
    FILE *fp = open_data(path);
    size_t sz = file_size(fp, path);
    int32_t hdr[TOKFILE_HEADER_INTS] = {0};
    if (sz >= sizeof hdr && fread(hdr, sizeof hdr, 1, fp) != 1) { fclose(fp); die("cannot read '%s'", path); }
    const char *bad = tokfile_check(hdr, sz, path);
    if (bad) { fclose(fp); die("%s", bad); }
    size_t count = (size_t)hdr[2], w = token_bytes(hdr);
    uint32_t *tok = malloc(sizeof(uint32_t) * count);
    if (!tok) { fclose(fp); die("out of host memory for the %zu tokens of '%s'", count, path); }
    size_t got = fread(tok, w, count, fp);   // uint16 tokens fill the first half, widened below
    fclose(fp);
    if (got != count) { free(tok); die("cannot read '%s'", path); }
    for (size_t i = count; w == sizeof(uint16_t) && i-- > 0;) {   // from the end: no write reaches a token not yet read
        uint16_t t16;
        memcpy(&t16, (const char *)tok + i * sizeof t16, sizeof t16);
        tok[i] = t16;
    }
    *n = count;
    return tok;
}

// ---------------------------------------------------------------------------------------
// The synthetic corpus: sentences "the <adj> <noun> <verb> the <noun> ." with a few
// fixed rules (a noun decides its verb ending, some nouns always take one adjective), so
// that a tiny model has real structure to learn and the loss falls far below ln(256).

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static const char *NOUNS[] = {"expert", "router", "token", "device", "layer", "gradient", "mesh", "shard",
                              "experts", "routers", "tokens", "devices"};
static const char *ADJS[] = {"small", "sparse", "quick", "tired", "clever", "quiet", "busy", "bright"};
static const char *VERBS[] = {"route", "shard", "learn", "count", "reduce", "gather", "split", "follow"};

static void put(uint32_t *tok, size_t *k, size_t cap, const char *s) {
    for (; *s && *k < cap; s++) tok[(*k)++] = (unsigned char)*s;
}

uint32_t *synthetic_tokens(size_t n_target, uint64_t seed, size_t *n) {
    size_t cap = n_target;
    uint32_t *tok = alloc_tokens(cap);
    size_t k = 0;
    uint64_t s = seed;
    int nn = (int)(sizeof NOUNS / sizeof *NOUNS), na = (int)(sizeof ADJS / sizeof *ADJS),
        nv = (int)(sizeof VERBS / sizeof *VERBS);
    while (k < cap) {
        int subj = (int)(splitmix64(&s) % (uint64_t)nn), obj = (int)(splitmix64(&s) % (uint64_t)nn);
        int verb = (int)(splitmix64(&s) % (uint64_t)nv);
        // Nouns 0..3 always take the adjective of their own index; the rest a random one.
        int adj = subj < 4 ? subj : (int)(splitmix64(&s) % (uint64_t)na);
        put(tok, &k, cap, "the ");
        put(tok, &k, cap, ADJS[adj]);
        put(tok, &k, cap, " ");
        put(tok, &k, cap, NOUNS[subj]);
        put(tok, &k, cap, " ");
        put(tok, &k, cap, VERBS[verb]);
        put(tok, &k, cap, subj < 8 ? "s the " : " the ");   // singular subjects: verb + s
        put(tok, &k, cap, NOUNS[obj]);
        put(tok, &k, cap, splitmix64(&s) % 4 == 0 ? ".\n" : ". ");
    }
    *n = k;
    return tok;
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

// A token file starts with either magic, or its name ends in .bin.
static int is_token_file(const char *path) {
    FILE *fp = open_data(path);
    int32_t magic = 0;
    size_t got = fread(&magic, sizeof magic, 1, fp);
    fclose(fp);
    return (got == 1 && (magic == TOKFILE_MAGIC || magic == TOKFILE_MAGIC32)) || ends_with(path, ".bin");
}

uint32_t *data_load_as(const char *dataset_path, size_t *n, int *bytes) {
    int synthetic = !strcmp(dataset_path, "synthetic"), text = synthetic || !is_token_file(dataset_path);
    if (bytes) *bytes = text;
    if (synthetic) return synthetic_tokens(200000, 0x5eedULL, n);
    return text ? text_read_bytes(dataset_path, n) : tokfile_read(dataset_path, n);
}

uint32_t *data_load(const char *dataset_path, size_t *n) { return data_load_as(dataset_path, n, NULL); }

void data_check_vocab(const uint32_t *tok, size_t n, int vocab, const char *path) {
    for (size_t i = 0; i < n; i++)
        if (tok[i] >= (uint32_t)vocab)
            die("'%s': token %u at position %zu is outside the vocabulary (vocab_size=%d)", path, tok[i], i, vocab);
}

uint64_t data_hash(const uint32_t *tok, size_t n) {
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < n; i++) h = (h ^ tok[i]) * 1099511628211ull;
    return h;
}
