// data/tokens.c: byte-level text, llm.c token files and the synthetic corpus.
// Token arrays are host memory (the data set, not a device tensor), so plain malloc.
#include "data/tokens.h"
#include "common.h"
#include <errno.h>
#include <unistd.h>

static uint16_t *alloc_tokens(size_t n) {
    uint16_t *t = malloc(sizeof(uint16_t) * (n ? n : 1));
    if (!t) die("out of host memory for %zu tokens", n);
    return t;
}

static FILE *open_data(const char *path) {
    FILE *fp = fopen(path, "rb");
    if (!fp) die("cannot open data file '%s': %s", path, strerror(errno));
    return fp;
}

static size_t file_size(FILE *fp) {
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    return n < 0 ? 0 : (size_t)n;
}

uint16_t *text_read_bytes(const char *path, size_t *n) {
    FILE *fp = open_data(path);
    size_t sz = file_size(fp);
    if (sz == 0) die("data file '%s' is empty", path);
    unsigned char *bytes = malloc(sz);
    if (!bytes) die("out of host memory reading '%s'", path);
    if (fread(bytes, 1, sz, fp) != sz) die("cannot read '%s'", path);
    fclose(fp);
    uint16_t *tok = alloc_tokens(sz);
    for (size_t i = 0; i < sz; i++) tok[i] = bytes[i];
    free(bytes);
    *n = sz;
    return tok;
}

static void remove_tmp(void *path) { unlink((const char *)path); }

void tokfile_write(const char *path, const uint16_t *tok, size_t n) {
    if (n > INT32_MAX) die("too many tokens (%zu) for an llm.c token file", n);
    int32_t hdr[TOKFILE_HEADER_INTS] = {TOKFILE_MAGIC, TOKFILE_VERSION, (int32_t)n};
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *fp = fopen(tmp, "wb");
    if (!fp) die("cannot write '%s': %s", tmp, strerror(errno));
    die_set_cleanup(remove_tmp, tmp);
    // The format is little-endian; so is every machine this runs on (x86-64, arm64).
    int ok = fwrite(hdr, sizeof hdr, 1, fp) == 1 && fwrite(tok, sizeof(uint16_t), n, fp) == n;
    ok = ok && fflush(fp) == 0 && fsync(fileno(fp)) == 0;
    if (fclose(fp) != 0) ok = 0;
    if (!ok) die("cannot write '%s': %s", tmp, strerror(errno));
    if (rename(tmp, path) != 0) die("cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
    die_set_cleanup(NULL, NULL);
}

uint16_t *tokfile_read(const char *path, size_t *n) {
    FILE *fp = open_data(path);
    size_t sz = file_size(fp);
    int32_t hdr[TOKFILE_HEADER_INTS];
    if (sz < sizeof hdr || fread(hdr, sizeof hdr, 1, fp) != 1)
        die("token file '%s' is truncated: %zu bytes, shorter than the %zu-byte header", path, sz, sizeof hdr);
    if (hdr[0] != TOKFILE_MAGIC)
        die("'%s' is not an llm.c token file: magic number %d, expected %d", path, hdr[0], TOKFILE_MAGIC);
    if (hdr[1] != TOKFILE_VERSION)
        die("token file '%s' has version %d; this reader knows version %d (uint16 tokens)", path, hdr[1], TOKFILE_VERSION);
    if (hdr[2] <= 0) die("token file '%s' says it holds %d tokens", path, hdr[2]);
    size_t count = (size_t)hdr[2], have = (sz - sizeof hdr) / sizeof(uint16_t);
    if (have != count)
        die("token file '%s' is %s: the header says %zu tokens, the file holds %zu", path,
            have < count ? "truncated" : "longer than its header says", count, have);
    uint16_t *tok = alloc_tokens(count);
    if (fread(tok, sizeof(uint16_t), count, fp) != count) die("cannot read '%s'", path);
    fclose(fp);
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

static void put(uint16_t *tok, size_t *k, size_t cap, const char *s) {
    for (; *s && *k < cap; s++) tok[(*k)++] = (uint16_t)(unsigned char)*s;
}

uint16_t *synthetic_tokens(size_t n_target, uint64_t seed, size_t *n) {
    size_t cap = n_target;
    uint16_t *tok = alloc_tokens(cap);
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

uint16_t *data_load(const char *dataset_path, size_t *n) {
    if (!strcmp(dataset_path, "synthetic")) return synthetic_tokens(200000, 0x5eedULL, n);
    FILE *fp = open_data(dataset_path);
    int32_t magic = 0;
    size_t got = fread(&magic, sizeof magic, 1, fp);
    fclose(fp);
    if ((got == 1 && magic == TOKFILE_MAGIC) || ends_with(dataset_path, ".bin")) return tokfile_read(dataset_path, n);
    return text_read_bytes(dataset_path, n);
}

void data_check_vocab(const uint16_t *tok, size_t n, int vocab, const char *path) {
    for (size_t i = 0; i < n; i++)
        if (tok[i] >= vocab)
            die("'%s': token %u at position %zu is outside the vocabulary (vocab_size=%d)", path, tok[i], i, vocab);
}
