// data/tokens.c: byte-level text, llm.c token files and the synthetic corpus.
// Token arrays are host memory (the data set, not a device tensor), so plain malloc.
#include "data/tokens.h"
#include "base/paths.h"
#include "core/common.h"
#include <sys/stat.h>
#include <errno.h>
#include <unistd.h>

static uint16_t *alloc_tokens(size_t n) {
    uint16_t *t = malloc(sizeof(uint16_t) * (n ? n : 1));
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

uint16_t *text_read_bytes(const char *path, size_t *n) {
    FILE *fp = open_data(path);
    size_t sz = file_size(fp, path);
    if (sz == 0) { fclose(fp); die("data file '%s' is empty", path); }
    unsigned char *bytes = malloc(sz);
    if (!bytes) { fclose(fp); die("out of host memory reading '%s' (%zu bytes)", path, sz); }
    size_t got = fread(bytes, 1, sz, fp);
    fclose(fp);
    if (got != sz) { free(bytes); die("cannot read '%s'", path); }
    uint16_t *tok = alloc_tokens(sz);
    for (size_t i = 0; i < sz; i++) tok[i] = bytes[i];
    free(bytes);
    *n = sz;
    return tok;
}

void tokfile_write(const char *path, const uint16_t *tok, size_t n) {
    if (n > INT32_MAX) die("too many tokens (%zu) for an llm.c token file", n);
    int32_t hdr[TOKFILE_HEADER_INTS] = {TOKFILE_MAGIC, TOKFILE_VERSION, (int32_t)n};
    FILE *fp = atomic_file_open(path);
    // The format is little-endian; so is every machine this runs on (x86-64, arm64).
    fwrite(hdr, sizeof hdr, 1, fp);
    fwrite(tok, sizeof(uint16_t), n, fp);
    atomic_file_commit(fp);   // checks both writes: the stream's error flag is sticky
}

// Why a token file of sz bytes with this header cannot be read (a message naming the path),
// or NULL when it can.
static const char *tokfile_check(const int32_t *hdr, size_t sz, const char *path) {
    static _Thread_local char msg[600];
    size_t hb = sizeof(int32_t) * TOKFILE_HEADER_INTS;
    if (sz < hb)
        snprintf(msg, sizeof msg, "token file '%s' is truncated: %zu bytes, shorter than the %zu-byte header", path, sz, hb);
    else if (hdr[0] != TOKFILE_MAGIC)
        snprintf(msg, sizeof msg, "'%s' is not an llm.c token file: magic number %d, expected %d", path, hdr[0], TOKFILE_MAGIC);
    else if (hdr[1] != TOKFILE_VERSION)
        snprintf(msg, sizeof msg, "token file '%s' has version %d; this reader knows version %d (uint16 tokens)", path,
                 hdr[1], TOKFILE_VERSION);
    else if (hdr[2] <= 0)
        snprintf(msg, sizeof msg, "token file '%s' says it holds %d tokens", path, hdr[2]);
    else if ((sz - hb) % sizeof(uint16_t))
        snprintf(msg, sizeof msg, "token file '%s' has %zu bytes after its header, an odd number: tokens are 2 bytes "
                 "each, so the file is cut or has a stray byte", path, sz - hb);
    else if ((sz - hb) / sizeof(uint16_t) != (size_t)hdr[2])
        snprintf(msg, sizeof msg, "token file '%s' is %s: the header says %d tokens, the file holds %zu", path,
                 (sz - hb) / sizeof(uint16_t) < (size_t)hdr[2] ? "truncated" : "longer than its header says", hdr[2],
                 (sz - hb) / sizeof(uint16_t));
    else
        return NULL;
    return msg;
}

uint16_t *tokfile_read(const char *path, size_t *n) {
    FILE *fp = open_data(path);
    size_t sz = file_size(fp, path);
    int32_t hdr[TOKFILE_HEADER_INTS] = {0};
    if (sz >= sizeof hdr && fread(hdr, sizeof hdr, 1, fp) != 1) { fclose(fp); die("cannot read '%s'", path); }
    const char *bad = tokfile_check(hdr, sz, path);
    if (bad) { fclose(fp); die("%s", bad); }
    size_t count = (size_t)hdr[2];
    uint16_t *tok = malloc(sizeof(uint16_t) * count);
    if (!tok) { fclose(fp); die("out of host memory for the %zu tokens of '%s'", count, path); }
    size_t got = fread(tok, sizeof(uint16_t), count, fp);
    fclose(fp);
    if (got != count) { free(tok); die("cannot read '%s'", path); }
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
