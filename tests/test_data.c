// tests/test_data.c: the data formats. safetensors written and read back bit for bit, a
// file laid out by hand (as Python's safetensors writes it) read correctly, malformed
// files refused with a reason; llm.c token files (header checked byte by byte, wrong magic
// and truncation refused); the synthetic corpus; the loader's split and epoch order.
// Paths that must die() run in a forked child whose exit code and message are checked.
#include "core/common.h"
#include "data/safetensors.h"
#include "data/tokens.h"
#include "data/loader.h"
#include "tests/test.h"
#include <sys/wait.h>
#include <unistd.h>
#include <fcntl.h>

static char dir[] = "/tmp/meshmoe-test-data-XXXXXX";

static void path_in(char *buf, size_t cap, const char *name) { snprintf(buf, cap, "%s/%s", dir, name); }

static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    fwrite(p, 1, n, f);
    fclose(f);
}

// Runs fn(arg) in a child with stderr captured. Passes if the child exits with status 1
// and its message contains `phrase`.
static void expect_die(const char *what, void (*fn)(const void *), const void *arg, const char *phrase) {
    int fd[2];
    if (pipe(fd) != 0) { CHECK(0, "pipe failed"); return; }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 2);
        close(fd[0]);
        fn(arg);
        _exit(0);   // fn returned: it should have died
    }
    close(fd[1]);
    char msg[1024] = {0};
    size_t got = 0;
    ssize_t r;
    while (got < sizeof msg - 1 && (r = read(fd[0], msg + got, sizeof msg - 1 - got)) > 0) got += (size_t)r;
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    int ok = WIFEXITED(status) && WEXITSTATUS(status) == 1 && strstr(msg, phrase) && !strncmp(msg, "meshmoe: ", 9);
    CHECK(ok, "%s: wanted exit 1 and a message with '%s'; got status %d, message '%s'", what, phrase, status, msg);
    if (ok) printf("  ok   %s: %s", what, msg);
}

// ---- safetensors ----
static void test_safetensors_roundtrip(void) {
    char path[256];
    path_in(path, sizeof path, "rt.safetensors");
    float a[6] = {1.5f, -2.0f, 3.25f, 1e-30f, -0.0f, 65504.0f};
    int32_t b[3] = {7, -1, 2147483647};
    float scalar = 0.1f;
    uint16_t h[2] = {0x3f80, 0xc000};   // bf16 1.0 and -2.0
    int64_t sa[2] = {2, 3}, sb[1] = {3}, sh[1] = {2};
    StWriter *w = st_writer_new();
    st_writer_meta(w, "config", "{\"key\": \"va\\lue\"}\nline two\ttab");
    st_writer_meta(w, "step", "42");
    st_writer_add(w, "params/a", ST_F32, 2, sa, a);
    st_writer_add(w, "b \"quoted\"", ST_I32, 1, sb, b);
    st_writer_add(w, "s", ST_F32, 0, NULL, &scalar);
    st_writer_add(w, "h", ST_BF16, 1, sh, h);
    st_write_file(w, path);
    st_writer_free(w);
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    CHECK(access(tmp, F_OK) != 0, "temporary file %s left behind", tmp);

    // The header length field: a multiple of 8, so the data is 8-byte aligned.
    FILE *f = fopen(path, "rb");
    unsigned char le[8];
    CHECK(fread(le, 1, 8, f) == 8, "short file");
    fclose(f);
    uint64_t hn = 0;
    for (int i = 0; i < 8; i++) hn |= (uint64_t)le[i] << (8 * i);
    CHECK(hn % 8 == 0, "header length %llu is not a multiple of 8", (unsigned long long)hn);

    char err[256];
    StFile *r = st_open_try(path, err, sizeof err);
    CHECK(r != NULL, "cannot read back: %s", err);
    if (!r) return;
    CHECK(st_count(r) == 4, "4 tensors, got %d", st_count(r));
    CHECK(!strcmp(st_meta(r, "config"), "{\"key\": \"va\\lue\"}\nline two\ttab"), "metadata with escapes: '%s'", st_meta(r, "config"));
    CHECK(!strcmp(st_meta(r, "step"), "42"), "metadata step");
    CHECK(st_meta(r, "nope") == NULL, "absent metadata key");
    const StTensor *ta = st_get(r, "params/a"), *tb = st_get(r, "b \"quoted\""), *ts = st_get(r, "s"), *th = st_get(r, "h");
    CHECK(ta && ta->dtype == ST_F32 && ta->ndim == 2 && ta->shape[0] == 2 && ta->shape[1] == 3 &&
          ta->nbytes == sizeof a && !memcmp(ta->data, a, sizeof a), "F32 (2,3) tensor round trip, bit for bit");
    CHECK(tb && tb->dtype == ST_I32 && tb->ndim == 1 && !memcmp(tb->data, b, sizeof b), "I32 tensor with a quoted name");
    CHECK(ts && ts->ndim == 0 && ts->nbytes == 4 && !memcmp(ts->data, &scalar, 4), "scalar tensor");
    CHECK(th && th->dtype == ST_BF16 && !memcmp(th->data, h, sizeof h), "BF16 tensor");
    CHECK(st_get(r, "params/b") == NULL, "absent tensor");
    CHECK(((uintptr_t)ta->data - (uintptr_t)st_tensor(r, 0)->data) % 4 == 0, "alignment");
    st_close(r);
}

// A file laid out by hand the way Python's safetensors writes it (spaces, metadata last,
// a \u escape), independent of our writer.
static void test_safetensors_by_hand(void) {
    const char *json = "{\"x\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}, "
                       "\"__metadata__\": {\"format\": \"pt\", \"note\": \"caf\\u00e9 \\\"q\\\"\"}}";
    size_t n = strlen(json), pad = (8 - n % 8) % 8;
    unsigned char buf[512] = {0};
    uint64_t hn = n + pad;
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(hn >> (8 * i));
    memcpy(buf + 8, json, n);
    memset(buf + 8 + n, ' ', pad);
    float x[2] = {3.0f, -4.5f};
    memcpy(buf + 8 + hn, x, 8);
    char path[256], err[256];
    path_in(path, sizeof path, "hand.safetensors");
    write_bytes(path, buf, 8 + hn + 8);
    StFile *r = st_open_try(path, err, sizeof err);
    CHECK(r != NULL, "hand-made file: %s", err);
    if (!r) return;
    const StTensor *t = st_get(r, "x");
    CHECK(t && t->ndim == 1 && t->shape[0] == 2 && ((const float *)t->data)[1] == -4.5f, "hand-made tensor values");
    CHECK(st_meta(r, "note") && !strcmp(st_meta(r, "note"), "caf\xc3\xa9 \"q\""), "\\u00e9 decoded to UTF-8: '%s'", st_meta(r, "note"));
    // A file read whole keeps no descriptor, and closing it closes none of the process's:
    // here descriptor 0 (stdin set aside) is another file, still open after st_close. (It
    // once closed descriptor 0: several device threads loading at once closed one another's
    // files, the metrics file among them.)
    int saved = dup(0);
    close(0);
    int mine = open("/dev/null", O_RDONLY);   // the lowest free number: 0
    st_close(r);
    int still = fcntl(mine, F_GETFD) != -1;
    CHECK(mine == 0 && still, "st_close of a file read whole leaves descriptor %d open: %s", mine, still ? "open" : "closed");
    if (still) close(mine);
    if (saved >= 0) { dup2(saved, 0); close(saved); }
}

static void check_refused(const char *name, const void *bytes, size_t n, const char *phrase) {
    char path[256], err[256];
    path_in(path, sizeof path, name);
    write_bytes(path, bytes, n);
    StFile *r = st_open_try(path, err, sizeof err);
    CHECK(r == NULL && strstr(err, phrase) && strstr(err, name), "%s refused with '%s': got '%s'", name, phrase, r ? "(accepted)" : err);
    if (r) st_close(r);
    else printf("  ok   %s: %s\n", name, err);
    r = st_open_header_try(path, err, sizeof err);   // the same checks when only the header is read
    CHECK(r == NULL && strstr(err, phrase) && strstr(err, name), "%s refused by st_open_header_try with '%s': got '%s'",
          name, phrase, r ? "(accepted)" : err);
    if (r) st_close(r);
}

// Reading piece by piece (checkpoints on a mesh): the header alone, then byte ranges.
static void test_safetensors_pieces(void) {
    char path[256], err[256];
    path_in(path, sizeof path, "rt.safetensors");   // written by test_safetensors_roundtrip
    StFile *r = st_open_header_try(path, err, sizeof err);
    CHECK(r != NULL, "header of rt.safetensors: %s", err);
    if (!r) return;
    const StTensor *ta = st_get(r, "params/a"), *tb = st_get(r, "b \"quoted\"");
    CHECK(ta && tb && ta->data == NULL && ta->nbytes == 24 && ta->shape[1] == 3, "params/a: 24 bytes, not in memory");
    CHECK(st_meta(r, "step") && !strcmp(st_meta(r, "step"), "42"), "metadata step");
    float got[3], want[3] = {3.25f, 1e-30f, -0.0f};   // elements 2..4 of params/a
    int32_t last;
    if (ta && tb) {
        st_read_at(r, ta, 8, got, sizeof got);
        st_read_at(r, tb, 8, &last, sizeof last);
        CHECK(!memcmp(got, want, sizeof got) && last == 2147483647, "bytes [8, 20) of params/a and [8, 12) of b, bit for bit");
    }
    st_close(r);
}

// A file of many tensors (a published checkpoint's shard holds hundreds, a whole one ninety
// thousand): st_get finds each by name, whole file or header only, and no name it lacks.
static void test_safetensors_many(void) {
    enum { N = 20000 };
    char path[256], name[32], err[256];
    path_in(path, sizeof path, "many.safetensors");
    StWriter *w = st_writer_new();
    static float v[N];
    for (int i = 0; i < N; i++) {
        int k = (int)((i * 7919L) % N);   // the file's order is not the names' order
        v[i] = (float)k;
        snprintf(name, sizeof name, "layers.%d.w", k);
        st_writer_add(w, name, ST_F32, 0, NULL, &v[i]);
    }
    st_write_file(w, path);
    st_writer_free(w);
    for (int headers = 0; headers < 2; headers++) {
        StFile *r = headers ? st_open_header_try(path, err, sizeof err) : st_open_try(path, err, sizeof err);
        CHECK(r != NULL, "many.safetensors: %s", err);
        if (!r) return;
        int found = 0;
        for (int k = 0; k < N; k++) {
            snprintf(name, sizeof name, "layers.%d.w", k);
            const StTensor *t = st_get(r, name);
            float x = -1;
            if (t && headers) st_read_at(r, t, 0, &x, sizeof x);
            else if (t) memcpy(&x, t->data, sizeof x);
            found += t && !strcmp(t->name, name) && x == (float)k;
        }
        CHECK(found == N, "%s: %d of %d tensors found by name with their values", headers ? "header" : "whole", found, N);
        const char *absent[] = {"", "layers.", "layers.20000.w", "layers.0.w ", "a", "z"};
        int none = 1;
        for (int i = 0; i < 6; i++) none &= st_get(r, absent[i]) == NULL;
        CHECK(none, "names the file lacks are not found");
        st_close(r);
    }
}

static void test_safetensors_malformed(void) {
    check_refused("short.st", "abc", 3, "too short");
    unsigned char big[16] = {0xff, 0xff, 0xff, 0, 0, 0, 0, 0, '{', '}'};
    check_refused("hugelen.st", big, sizeof big, "not a safetensors file");
    const char *texts[][2] = {
        {"{\"x\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}}", "data section"},   // data missing
        {"{\"x\": {\"dtype\": \"F99\", \"shape\": [1], \"data_offsets\": [0, 4]}}", "unsupported dtype"},
        {"{\"x\": {\"dtype\": \"F32\", \"shape\": [1] \"data_offsets\": [0, 4]}}", "expected"},
        {"{\"x\": {\"dtype\": \"F32\", \"shape\": [1]}}", "lacks"},
        {"{\"x\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 4]}}", "offsets"},
        {"{\"x\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}, "
         "\"x\": {\"dtype\": \"F32\", \"shape\": [], \"data_offsets\": [0, 4]}}", "tensor 'x' named twice"},
    };
    for (int i = 0; i < 6; i++) {
        unsigned char buf[256] = {0};
        size_t n = strlen(texts[i][0]);
        for (int k = 0; k < 8; k++) buf[k] = (unsigned char)(n >> (8 * k));
        memcpy(buf + 8, texts[i][0], n);
        char name[32];
        snprintf(name, sizeof name, "bad%d.st", i);
        check_refused(name, buf, 8 + n + 4, texts[i][1]);
    }
    char err[256];
    CHECK(st_open_try("/nonexistent/x.st", err, sizeof err) == NULL && strstr(err, "cannot open"), "missing file: %s", err);
}

static void write_into_missing_dir(const void *arg) {
    (void)arg;
    float v = 1.0f;
    StWriter *w = st_writer_new();
    st_writer_add(w, "v", ST_F32, 0, NULL, &v);
    st_write_file(w, "/nonexistent-dir/ckpt.safetensors");
}

// A tensor (or metadata key) named twice is refused before the file is made: none is left.
static void write_name_twice(const void *arg) {
    static float v[2] = {1.0f, 2.0f};
    StWriter *w = st_writer_new();
    st_writer_meta(w, "step", "1");
    st_writer_add(w, "a", ST_F32, 0, NULL, &v[0]);
    st_writer_add(w, "b", ST_F32, 0, NULL, &v[1]);
    if (*(const int *)arg) st_writer_meta(w, "step", "2");
    else st_writer_add(w, "a", ST_F32, 0, NULL, &v[1]);
    char path[600];
    snprintf(path, sizeof path, "%s/twice.safetensors", dir);
    st_write_file(w, path);
}

// ---- token files ----
static void test_tokfile(void) {
    char path[256];
    path_in(path, sizeof path, "tok.bin");
    uint32_t tok[5] = {1, 65535, 0, 256, 42};
    tokfile_write(path, tok, 5);
    // The header by hand: int32 magic, version, count at offsets 0, 4, 8; tokens at 1024.
    FILE *f = fopen(path, "rb");
    unsigned char raw[1024 + 10];
    size_t got = fread(raw, 1, sizeof raw + 1, f);
    fclose(f);
    CHECK(got == 1034, "file size %zu, want 1034", got);
    int32_t magic, version, count;
    memcpy(&magic, raw, 4); memcpy(&version, raw + 4, 4); memcpy(&count, raw + 8, 4);
    CHECK(magic == 20240520 && version == 1 && count == 5, "header %d %d %d", magic, version, count);
    CHECK(raw[1024] == 1 && raw[1025] == 0 && raw[1026] == 0xff && raw[1027] == 0xff, "tokens little-endian uint16");
    size_t n;
    uint32_t *back = tokfile_read(path, &n);
    CHECK(n == 5 && !memcmp(back, tok, sizeof tok), "token file round trip");
    free(back);
    // data_load picks the token reader by the magic, whatever the name says.
    char renamed[256];
    path_in(renamed, sizeof renamed, "tok.txt");
    rename(path, renamed);
    back = data_load(renamed, &n);
    CHECK(n == 5 && back[1] == 65535, "data_load reads a token file by its magic");
    free(back);
    // A token over 65535 (DeepSeek-V3's vocabulary is 129280): written in llm.c's uint32
    // format (magic 20240801, version 7), 4 bytes a token from offset 1024, and read back.
    path_in(path, sizeof path, "tok32.bin");
    uint32_t wide[3] = {129279, 7, 65536};
    tokfile_write(path, wide, 3);
    unsigned char raw32[1024 + 13];
    f = fopen(path, "rb");
    got = fread(raw32, 1, sizeof raw32, f);
    fclose(f);
    memcpy(&magic, raw32, 4); memcpy(&version, raw32 + 4, 4); memcpy(&count, raw32 + 8, 4);
    CHECK(got == 1024 + 12 && magic == 20240801 && version == 7 && count == 3, "uint32 file: %zu bytes, header %d %d %d",
          got, magic, version, count);
    CHECK(raw32[1024] == 0xff && raw32[1025] == 0xf8 && raw32[1026] == 0x01 && raw32[1027] == 0 && raw32[1032] == 0 &&
          raw32[1034] == 1, "tokens little-endian uint32");
    back = data_load(path, &n);
    CHECK(n == 3 && !memcmp(back, wide, sizeof wide), "uint32 token file round trip");
    free(back);
    // A text file: every byte a token.
    char text[256];
    path_in(text, sizeof text, "t.txt");
    write_bytes(text, "hi\xff", 3);
    back = data_load(text, &n);
    CHECK(n == 3 && back[0] == 'h' && back[1] == 'i' && back[2] == 255, "bytes are tokens");
    free(back);
}

static char bad_magic[256], truncated[256], longer[256], empty[256], cut32[256], mixed[256];
static void load_path(const void *p) { size_t n; data_load((const char *)p, &n); }
static void check_vocab_fails(const void *p) {
    uint32_t t[3] = {1, 300, 2};
    data_check_vocab(t, 3, 256, (const char *)p);
}

static void make_bad_tokfiles(void) {
    int32_t hdr[256] = {20240520, 1, 100};
    uint16_t body[100] = {0};
    unsigned char buf[1024 + 200];
    memcpy(buf, hdr, 1024);
    memcpy(buf + 1024, body, 200);
    path_in(truncated, sizeof truncated, "trunc.bin");
    write_bytes(truncated, buf, 1024 + 150);
    path_in(longer, sizeof longer, "long.bin");
    hdr[2] = 50;
    memcpy(buf, hdr, 1024);
    write_bytes(longer, buf, 1024 + 200);
    path_in(cut32, sizeof cut32, "cut32.bin");   // uint32 tokens, the last one cut
    hdr[0] = 20240801; hdr[1] = 7;
    memcpy(buf, hdr, 1024);
    write_bytes(cut32, buf, 1024 + 198);
    path_in(mixed, sizeof mixed, "mixed.bin");   // the uint32 format's magic with the uint16 one's version
    hdr[1] = 1;
    memcpy(buf, hdr, 1024);
    write_bytes(mixed, buf, 1024 + 200);
    path_in(bad_magic, sizeof bad_magic, "magic.bin");
    hdr[0] = 1234;
    memcpy(buf, hdr, 1024);
    write_bytes(bad_magic, buf, 1024 + 200);
    path_in(empty, sizeof empty, "empty.txt");
    write_bytes(empty, "", 0);
}

// ---- synthetic corpus ----
static void test_synthetic(void) {
    size_t n1, n2;
    uint32_t *a = synthetic_tokens(200000, 0x5eedULL, &n1), *b = data_load("synthetic", &n2);
    CHECK(n1 == 200000 && n2 == n1 && !memcmp(a, b, n1 * sizeof *a), "synthetic corpus is deterministic (%zu tokens)", n1);
    int ascii = 1, hist[128] = {0};
    for (size_t i = 0; i < n1; i++) { ascii &= a[i] < 128; if (a[i] < 128) hist[a[i]]++; }
    int distinct = 0;
    for (int i = 0; i < 128; i++) distinct += hist[i] > 0;
    CHECK(ascii && distinct > 15 && distinct < 40, "ASCII text with a small alphabet (%d symbols)", distinct);
    size_t n3;
    uint32_t *c = synthetic_tokens(1000, 99, &n3);
    CHECK(memcmp(a, c, 1000 * sizeof *a) != 0, "another seed gives another text");
    free(a); free(b); free(c);
}

// ---- loader ----
static void test_loader(void) {
    enum { N = 1000, S = 16 };
    uint32_t tok[N];
    for (int i = 0; i < N; i++) tok[i] = (uint32_t)i;
    DataLoader dl;
    loader_init(&dl, tok, N, S, 0.2);
    CHECK(dl.train_end == 800 && dl.eval_begin == 800 && dl.eval_end == 1000, "split 800/200");
    int64_t W = loader_num_train_windows(&dl);
    CHECK(W == (800 - 1) / S, "train windows %lld", (long long)W);
    CHECK(loader_num_eval_windows(&dl) == (200 - 1) / S, "eval windows");
    int ids[S], tg[S], ids2[S], tg2[S];
    // Each epoch visits every window exactly once; windows start at multiples of S.
    int perm_ok = 1, differs = 0, shift_ok = 1;
    int64_t first_of_epoch[3];
    for (int e = 0; e < 3; e++) {
        int seen[64] = {0};
        for (int64_t i = 0; i < W; i++) {
            loader_train_sequence(&dl, e * W + i, ids, tg);
            int pos = ids[0];   // token i is the number i, so a window names its start
            perm_ok &= pos >= 0 && pos + S < 800 && pos % S == 0 && !seen[pos / S];
            if (pos >= 0) seen[pos / S] = 1;
            for (int t = 0; t + 1 < S; t++) shift_ok &= tg[t] == ids[t + 1];
            if (i == 0) first_of_epoch[e] = pos;
        }
        for (int64_t i = 0; i < W; i++) perm_ok &= seen[i];
    }
    differs = first_of_epoch[0] != first_of_epoch[1] || first_of_epoch[1] != first_of_epoch[2];
    CHECK(perm_ok, "every epoch is a permutation of the %lld windows", (long long)W);
    CHECK(shift_ok, "targets are the inputs shifted by one");
    CHECK(differs, "epochs are shuffled differently");
    loader_train_sequence(&dl, 12345, ids, tg);
    loader_train_sequence(&dl, 12345, ids2, tg2);
    CHECK(!memcmp(ids, ids2, sizeof ids) && !memcmp(tg, tg2, sizeof tg), "sequence g is a pure function of g");
    loader_eval_sequence(&dl, 2, ids, tg);
    CHECK(ids[0] == (int)tok[800 + 2 * S] && tg[S - 1] == (int)tok[800 + 3 * S], "eval window 2 is tokens [832, 849)");
}

static void loader_too_small(const void *arg) {
    (void)arg;
    static uint32_t tok[50];
    DataLoader dl;
    loader_init(&dl, tok, 50, 32, 0.1);
}

int main(void) {
    if (!mkdtemp(dir)) { printf("cannot make a temporary directory\n"); return 1; }
    test_safetensors_roundtrip();
    test_safetensors_by_hand();
    test_safetensors_malformed();
    test_safetensors_many();
    test_safetensors_pieces();
    expect_die("writing into a missing directory", write_into_missing_dir, NULL, "cannot write");
    static const int tensor = 0, key = 1;
    expect_die("writing a tensor named twice", write_name_twice, &tensor, "twice.safetensors: tensor 'a' named twice");
    expect_die("writing a metadata key named twice", write_name_twice, &key, "metadata key 'step' named twice");
    char twice[600];
    snprintf(twice, sizeof twice, "%s/twice.safetensors", dir);
    CHECK(access(twice, F_OK) != 0, "no file left by the refused writes (%s)", twice);
    test_tokfile();
    make_bad_tokfiles();
    expect_die("wrong magic", load_path, bad_magic, "magic number 1234");
    expect_die("truncated token file", load_path, truncated, "truncated: the header says 100 tokens, the file holds 75");
    expect_die("token file longer than its header", load_path, longer, "longer than its header");
    expect_die("uint32 token file cut inside a token", load_path, cut32, "198 bytes after its header, not a multiple of 4");
    expect_die("uint32 magic with the uint16 version", load_path, mixed, "has version 1; this reader knows version 1 with magic 20240520");
    expect_die("missing data file", load_path, "/nonexistent/data.txt", "cannot open data file '/nonexistent/data.txt'");
    expect_die("empty text file", load_path, empty, "is empty");
    expect_die("token outside the vocabulary", check_vocab_fails, "v.bin", "token 300 at position 1");
    test_synthetic();
    test_loader();
    expect_die("too little data for one sequence", loader_too_small, NULL, "too few");
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) printf("note: could not remove %s\n", dir);
    TEST_SUMMARY();
}
