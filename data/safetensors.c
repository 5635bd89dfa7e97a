// data/safetensors.c: writer and reader of the safetensors format (see the header).
// The reader loads the whole file into one buffer: checkpoints and dumps of this trainer
// are small, and it keeps the code short. The buffer is host staging memory, not device
// memory, so it does not go through base/memory.c.
#include "data/safetensors.h"
#include "base/paths.h"
#include "core/common.h"
#include <errno.h>
#include <unistd.h>
#include <fcntl.h>
#include <sys/stat.h>

static const char *DTYPE_NAMES[ST_NDTYPES] = {"F32", "I32", "BF16", "F16", "I64", "F64", "U8", "I8", "U16", "I16", "F8_E4M3"};
static const size_t DTYPE_SIZES[ST_NDTYPES] = {4, 4, 2, 2, 8, 8, 1, 1, 2, 2, 1};

size_t st_dtype_size(StDtype d) { return DTYPE_SIZES[d]; }
const char *st_dtype_name(StDtype d) { return DTYPE_NAMES[d]; }

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) die("out of host memory (%zu bytes)", n);
    return p;
}

static char *xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    return memcpy(xmalloc(n), s, n);
}

// ---------------------------------------------------------------------------------------
// Writing

typedef struct { char *name; StDtype dtype; int ndim; int64_t shape[8]; const void *data; } WTensor;

struct StWriter {
    WTensor *t;  int nt, capt;
    char **keys, **vals;  int nm, capm;
};

StWriter *st_writer_new(void) {
    StWriter *w = xmalloc(sizeof *w);
    memset(w, 0, sizeof *w);
    return w;
}

void st_writer_meta(StWriter *w, const char *key, const char *value) {
    if (w->nm == w->capm) {
        w->capm = w->capm ? 2 * w->capm : 8;
        w->keys = realloc(w->keys, sizeof(char *) * (size_t)w->capm);
        w->vals = realloc(w->vals, sizeof(char *) * (size_t)w->capm);
        if (!w->keys || !w->vals) die("out of host memory");
    }
    w->keys[w->nm] = xstrdup(key);
    w->vals[w->nm++] = xstrdup(value);
}

void st_writer_add(StWriter *w, const char *name, StDtype dtype, int ndim, const int64_t *shape,
                   const void *data) {
    if (ndim < 0 || ndim > 8) die("safetensors: tensor '%s' has %d dimensions (at most 8)", name, ndim);
    if (w->nt == w->capt) {
        w->capt = w->capt ? 2 * w->capt : 64;
        w->t = realloc(w->t, sizeof(WTensor) * (size_t)w->capt);
        if (!w->t) die("out of host memory");
    }
    WTensor *t = &w->t[w->nt++];
    t->name = xstrdup(name);
    t->dtype = dtype;
    t->ndim = ndim;
    for (int d = 0; d < ndim; d++) t->shape[d] = shape[d];
    t->data = data;
}

static size_t wtensor_bytes(const WTensor *t) {
    size_t n = DTYPE_SIZES[t->dtype];
    for (int d = 0; d < t->ndim; d++) n *= (size_t)t->shape[d];
    return n;
}

// A growing string for the JSON header.
typedef struct { char *s; size_t n, cap; } Buf;

static void buf_put(Buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        while (b->n + n + 1 > b->cap) b->cap = b->cap ? 2 * b->cap : 4096;
        b->s = realloc(b->s, b->cap);
        if (!b->s) die("out of host memory");
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

static void buf_printf(Buf *b, const char *fmt, long long a, long long c) {
    char tmp[64];
    int n = snprintf(tmp, sizeof tmp, fmt, a, c);
    buf_put(b, tmp, (size_t)n);
}

// A JSON string literal: quotes, backslashes and control characters escaped.
static void buf_json_string(Buf *b, const char *s) {
    buf_put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') { char e[2] = {'\\', (char)ch}; buf_put(b, e, 2); }
        else if (ch == '\n') buf_put(b, "\\n", 2);
        else if (ch == '\t') buf_put(b, "\\t", 2);
        else if (ch < 0x20) { char e[8]; snprintf(e, sizeof e, "\\u%04x", ch); buf_put(b, e, 6); }
        else buf_put(b, (const char *)&ch, 1);
    }
    buf_put(b, "\"", 1);
}

// The file's bytes (the header's length, the header, the tensors) onto fp.
static void write_stream(const StWriter *w, FILE *fp) {
    Buf h = {0};
    buf_put(&h, "{", 1);
    if (w->nm) {
        buf_put(&h, "\"__metadata__\":{", 16);
        for (int i = 0; i < w->nm; i++) {
            if (i) buf_put(&h, ",", 1);
            buf_json_string(&h, w->keys[i]);
            buf_put(&h, ":", 1);
            buf_json_string(&h, w->vals[i]);
        }
        buf_put(&h, "}", 1);
    }
    size_t off = 0;
    for (int i = 0; i < w->nt; i++) {
        const WTensor *t = &w->t[i];
        if (i || w->nm) buf_put(&h, ",", 1);
        buf_json_string(&h, t->name);
        buf_put(&h, ":{\"dtype\":\"", 11);
        buf_put(&h, DTYPE_NAMES[t->dtype], strlen(DTYPE_NAMES[t->dtype]));
        buf_put(&h, "\",\"shape\":[", 11);
        for (int d = 0; d < t->ndim; d++) buf_printf(&h, d ? ",%lld" : "%lld", (long long)t->shape[d], 0);
        size_t nb = wtensor_bytes(t);
        buf_printf(&h, "],\"data_offsets\":[%lld,%lld]}", (long long)off, (long long)(off + nb));
        off += nb;
    }
    buf_put(&h, "}", 1);
    while (h.n % 8) buf_put(&h, " ", 1);   // the data starts 8-byte aligned

    uint64_t hn = h.n;
    unsigned char le[8];
    for (int i = 0; i < 8; i++) le[i] = (unsigned char)(hn >> (8 * i));
    fwrite(le, 1, 8, fp);
    fwrite(h.s, 1, h.n, fp);
    for (int i = 0; i < w->nt; i++) fwrite(w->t[i].data, 1, wtensor_bytes(&w->t[i]), fp);
    free(h.s);
}

static int name_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

// Refuses a header that would name a tensor or a metadata key twice (st_open refuses to read
// one), before PATH or its temporary is made.
static void check_unique(const StWriter *w, const char *path) {
    int n = w->nt > w->nm ? w->nt : w->nm;
    char **names = xmalloc(sizeof(char *) * (size_t)(n ? n : 1));
    for (int pass = 0; pass < 2; pass++) {
        int k = pass ? w->nm : w->nt;
        for (int i = 0; i < k; i++) names[i] = pass ? w->keys[i] : w->t[i].name;
        qsort(names, (size_t)k, sizeof *names, name_cmp);
        for (int i = 1; i < k; i++)
            if (!strcmp(names[i - 1], names[i]))
                die("safetensors: %s: %s '%s' named twice", path, pass ? "metadata key" : "tensor", names[i]);
    }
    free(names);
}

void st_write_file(StWriter *w, const char *path) {
    check_unique(w, path);
    FILE *fp = atomic_file_open(path);
    write_stream(w, fp);
    atomic_file_commit(fp);   // checks every write: the stream's error flag is sticky
}

void st_write_file_held(StWriter *w, const char *path) {
    check_unique(w, path);
    FILE *fp = atomic_file_open(path);
    write_stream(w, fp);
    atomic_file_hold(fp);
}

void st_writer_free(StWriter *w) {
    if (!w) return;
    for (int i = 0; i < w->nt; i++) free(w->t[i].name);
    for (int i = 0; i < w->nm; i++) { free(w->keys[i]); free(w->vals[i]); }
    free(w->t); free(w->keys); free(w->vals);
    free(w);
}

// ---------------------------------------------------------------------------------------
// Reading: a small JSON parser for exactly the header's shape.

struct StFile {
    unsigned char *buf;  size_t size;
    StTensor *t;  int nt;
    char **keys, **vals;  int nm;
    int fd;              // st_open_header_try: the open file, read piece by piece (-1 otherwise)
    const char *path;    // st_open_header_try: for the read errors' messages
    size_t *file_off;    // st_open_header_try: (nt) where each tensor's bytes start in the file
    StTensor **by_name;  // (nt) the tensors in the order of their names, for st_get
};

typedef struct { const char *p, *end; char *err; size_t cap; const char *path; } Parser;

static int fail(Parser *ps, const char *what) {
    if (ps->err[0] == 0) snprintf(ps->err, ps->cap, "'%s': bad safetensors header (%s)", ps->path, what);
    return 0;
}

static void skip_ws(Parser *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\n' || *ps->p == '\r' || *ps->p == '\t')) ps->p++;
}

static int expect(Parser *ps, char ch) {
    skip_ws(ps);
    if (ps->p >= ps->end || *ps->p != ch) {
        char what[32];
        snprintf(what, sizeof what, "expected '%c'", ch);
        return fail(ps, what);
    }
    ps->p++;
    return 1;
}

// Appends code point cp as UTF-8.
static char *put_utf8(char *o, unsigned cp) {
    if (cp < 0x80) *o++ = (char)cp;
    else if (cp < 0x800) { *o++ = (char)(0xC0 | cp >> 6); *o++ = (char)(0x80 | (cp & 63)); }
    else if (cp < 0x10000) { *o++ = (char)(0xE0 | cp >> 12); *o++ = (char)(0x80 | (cp >> 6 & 63)); *o++ = (char)(0x80 | (cp & 63)); }
    else { *o++ = (char)(0xF0 | cp >> 18); *o++ = (char)(0x80 | (cp >> 12 & 63)); *o++ = (char)(0x80 | (cp >> 6 & 63)); *o++ = (char)(0x80 | (cp & 63)); }
    return o;
}

static int hex4(const char *p, unsigned *v) {
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return 0;
        *v = *v * 16 + (unsigned)d;
    }
    return 1;
}

// Parses a JSON string into a fresh malloc'd buffer (escapes decoded).
static char *parse_string(Parser *ps) {
    if (!expect(ps, '"')) return NULL;
    const char *s = ps->p;
    while (ps->p < ps->end && *ps->p != '"') ps->p += *ps->p == '\\' ? 2 : 1;
    if (ps->p >= ps->end) { fail(ps, "unterminated string"); return NULL; }
    char *out = xmalloc((size_t)(ps->p - s) + 1), *o = out;
    for (const char *q = s; q < ps->p; q++) {
        if (*q != '\\') { *o++ = *q; continue; }
        q++;
        switch (*q) {
        case 'n': *o++ = '\n'; break;
        case 't': *o++ = '\t'; break;
        case 'r': *o++ = '\r'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'u': {
            unsigned cp, lo;
            if (q + 4 >= ps->p || !hex4(q + 1, &cp)) { free(out); fail(ps, "bad \\u escape"); return NULL; }
            q += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && q + 6 < ps->p && q[1] == '\\' && q[2] == 'u' && hex4(q + 3, &lo)) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                q += 6;
            }
            o = put_utf8(o, cp);
            break;
        }
        default: *o++ = *q;   // \" \\ \/
        }
    }
    *o = 0;
    ps->p++;
    return out;
}

static int parse_int(Parser *ps, int64_t *v) {
    skip_ws(ps);
    const char *s = ps->p;
    *v = 0;
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
        if (*v > (INT64_MAX - 9) / 10) return fail(ps, "integer too large");
        *v = *v * 10 + (*ps->p++ - '0');
    }
    return ps->p > s ? 1 : fail(ps, "expected a non-negative integer");
}

// [a, b, ...] of non-negative integers; at most `max` of them.
static int parse_int_array(Parser *ps, int64_t *out, int max, int *n) {
    if (!expect(ps, '[')) return 0;
    *n = 0;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == ']') { ps->p++; return 1; }
    for (;;) {
        if (*n == max) return fail(ps, "array too long");
        if (!parse_int(ps, &out[(*n)++])) return 0;
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') { ps->p++; continue; }
        return expect(ps, ']');
    }
}

// Does the next token close the object? Consumes ',' between members.
static int next_member(Parser *ps, int first, int *done) {
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == '}') { ps->p++; *done = 1; return 1; }
    *done = 0;
    return first ? 1 : expect(ps, ',');
}

static int parse_metadata(Parser *ps, StFile *f) {
    if (!expect(ps, '{')) return 0;
    for (int first = 1;; first = 0) {
        int done;
        if (!next_member(ps, first, &done)) return 0;
        if (done) return 1;
        char *k = parse_string(ps);
        if (!k) return 0;
        char *v = expect(ps, ':') ? parse_string(ps) : NULL;
        if (!v) { free(k); return fail(ps, "metadata values must be strings"); }
        f->keys = realloc(f->keys, sizeof(char *) * (size_t)(f->nm + 1));
        f->vals = realloc(f->vals, sizeof(char *) * (size_t)(f->nm + 1));
        if (!f->keys || !f->vals) die("out of host memory");
        f->keys[f->nm] = k;
        f->vals[f->nm++] = v;
    }
}

static int parse_tensor(Parser *ps, StTensor *t, int64_t off[2]) {
    int have_dtype = 0, have_shape = 0, have_off = 0;
    if (!expect(ps, '{')) return 0;
    for (int first = 1;; first = 0) {
        int done;
        if (!next_member(ps, first, &done)) return 0;
        if (done) break;
        char *k = parse_string(ps);
        if (!k || !expect(ps, ':')) { free(k); return 0; }
        int ok = 1;
        if (!strcmp(k, "dtype")) {
            char *d = parse_string(ps);
            ok = d != NULL;
            int found = 0;
            for (int i = 0; ok && i < ST_NDTYPES; i++)
                if (!strcmp(d, DTYPE_NAMES[i])) { t->dtype = (StDtype)i; found = 1; }
            if (ok && !found) ok = fail(ps, "unsupported dtype");
            free(d);
            have_dtype = 1;
        } else if (!strcmp(k, "shape")) {
            ok = parse_int_array(ps, t->shape, 8, &t->ndim);
            have_shape = 1;
        } else if (!strcmp(k, "data_offsets")) {
            int n;
            ok = parse_int_array(ps, off, 2, &n) && (n == 2 || fail(ps, "data_offsets needs two numbers"));
            have_off = 1;
        } else {
            ok = fail(ps, "unknown tensor field");
        }
        free(k);
        if (!ok) return 0;
    }
    if (!have_dtype || !have_shape || !have_off) return fail(ps, "tensor entry lacks dtype, shape or data_offsets");
    return 1;
}

// The tensors sorted by name: st_get is a binary search, which a checkpoint of ninety thousand
// tensors in 163 files needs (a scan per name would be billions of comparisons). A name held
// twice is refused: which of the two a reader took would be arbitrary.
static int by_name_cmp(const void *a, const void *b) {
    return strcmp((*(StTensor *const *)a)->name, (*(StTensor *const *)b)->name);
}

static int index_names(Parser *ps, StFile *f) {
    f->by_name = xmalloc(sizeof(StTensor *) * (size_t)(f->nt ? f->nt : 1));
    for (int i = 0; i < f->nt; i++) f->by_name[i] = &f->t[i];
    qsort(f->by_name, (size_t)f->nt, sizeof(StTensor *), by_name_cmp);
    for (int i = 1; i < f->nt; i++)
        if (!strcmp(f->by_name[i - 1]->name, f->by_name[i]->name)) {
            char what[160];
            snprintf(what, sizeof what, "tensor '%.100s' named twice", f->by_name[i]->name);
            return fail(ps, what);
        }
    return 1;
}

static int parse_header(Parser *ps, StFile *f, size_t data_size) {
    if (!expect(ps, '{')) return 0;
    for (int first = 1;; first = 0) {
        int done;
        if (!next_member(ps, first, &done)) return 0;
        if (done) break;
        char *k = parse_string(ps);
        if (!k || !expect(ps, ':')) { free(k); return 0; }
        if (!strcmp(k, "__metadata__")) {
            free(k);
            if (!parse_metadata(ps, f)) return 0;
            continue;
        }
        f->t = realloc(f->t, sizeof(StTensor) * (size_t)(f->nt + 1));
        if (!f->t) die("out of host memory");
        StTensor *t = &f->t[f->nt++];
        memset(t, 0, sizeof *t);
        t->name = k;
        int64_t off[2];
        if (!parse_tensor(ps, t, off)) return 0;
        size_t want = DTYPE_SIZES[t->dtype];
        for (int d = 0; d < t->ndim; d++) want *= (size_t)t->shape[d];
        if (off[1] < off[0] || (size_t)off[1] > data_size || (size_t)(off[1] - off[0]) != want) {
            char what[200];
            snprintf(what, sizeof what, "tensor '%.100s' has offsets [%lld,%lld] for %zu bytes in a %zu-byte data section",
                     t->name, (long long)off[0], (long long)off[1], want, data_size);
            return fail(ps, what);
        }
        t->nbytes = want;
        t->data = (const void *)(uintptr_t)off[0];   // an offset until the caller adds the base
    }
    skip_ws(ps);
    if (ps->p != ps->end) return fail(ps, "trailing bytes after the header object");
    return index_names(ps, f);
}

// The error of a path that is no regular file (a directory, a FIFO, a device).
static void not_a_file(char *err, size_t cap, const char *path, mode_t mode) {
    snprintf(err, cap, "'%s' is %s, not a safetensors file", path, S_ISDIR(mode) ? "a directory" : "not a regular file");
}

StFile *st_open_try(const char *path, char *err, size_t cap) {
    err[0] = 0;
    FILE *fp = fopen_input(path);
    if (!fp) { snprintf(err, cap, "cannot open '%s': %s", path, strerror(errno)); return NULL; }
    struct stat st;
    if (fstat(fileno(fp), &st) != 0 || !S_ISREG(st.st_mode)) {
        not_a_file(err, cap, path, st.st_mode);
        fclose(fp);
        return NULL;
    }
    StFile *f = xmalloc(sizeof *f);
    memset(f, 0, sizeof *f);
    f->fd = -1;   // the whole file is in buf: no descriptor stays open (st_close closes fd >= 0)
    f->size = (size_t)st.st_size;
    f->buf = xmalloc(f->size);
    size_t got = fread(f->buf, 1, f->size, fp);
    fclose(fp);
    uint64_t hn = 0;
    if (got != f->size) snprintf(err, cap, "cannot read '%s'", path);
    else if (f->size < 8) snprintf(err, cap, "'%s' is not a safetensors file (%zu bytes, too short)", path, f->size);
    else {
        for (int i = 0; i < 8; i++) hn |= (uint64_t)f->buf[i] << (8 * i);
        if (hn < 2 || hn > f->size - 8 || f->buf[8] != '{')
            snprintf(err, cap, "'%s' is not a safetensors file (its first 8 bytes do not give a JSON header length)", path);
    }
    if (!err[0]) {
        Parser ps = {(const char *)f->buf + 8, (const char *)f->buf + 8 + hn, err, cap, path};
        if (parse_header(&ps, f, f->size - 8 - (size_t)hn))
            for (int i = 0; i < f->nt; i++)
                f->t[i].data = f->buf + 8 + hn + (uintptr_t)f->t[i].data;
    }
    if (err[0]) { st_close(f); return NULL; }
    return f;
}

const StTensor *st_get(const StFile *f, const char *name) {
    int lo = 0, hi = f->nt;   // the answer, if any, is among by_name[lo, hi)
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2, c = strcmp(f->by_name[mid]->name, name);
        if (c == 0) return f->by_name[mid];
        if (c < 0) lo = mid + 1; else hi = mid;
    }
    return NULL;
}

const StTensor *st_tensor(const StFile *f, int i) { return i >= 0 && i < f->nt ? &f->t[i] : NULL; }
int st_count(const StFile *f) { return f->nt; }

const char *st_meta(const StFile *f, const char *key) {
    for (int i = 0; i < f->nm; i++)
        if (!strcmp(f->keys[i], key)) return f->vals[i];
    return NULL;
}

void st_close(StFile *f) {
    if (!f) return;
    for (int i = 0; i < f->nt; i++) free(f->t[i].name);
    free(f->by_name);
    for (int i = 0; i < f->nm; i++) { free(f->keys[i]); free(f->vals[i]); }
    free(f->t); free(f->keys); free(f->vals); free(f->buf);
    if (f->fd >= 0) close(f->fd);
    free(f->file_off); free((char *)f->path);
    free(f);
}

// ---------------------------------------------------------------------------------------
// Reading piece by piece: the header parsed, the tensor bytes read where they are needed.

StFile *st_open_header_try(const char *path, char *err, size_t cap) {
    err[0] = 0;
    int fd = open_input(path);
    if (fd < 0) { snprintf(err, cap, "cannot open '%s': %s", path, strerror(errno)); return NULL; }
    StFile *f = xmalloc(sizeof *f);
    memset(f, 0, sizeof *f);
    f->fd = fd;
    f->path = xstrdup(path);
    struct stat sb;
    unsigned char le[8];
    uint64_t hn = 0;
    if (fstat(fd, &sb) != 0) snprintf(err, cap, "cannot read '%s': %s", path, strerror(errno));
    else if (!S_ISREG(sb.st_mode)) not_a_file(err, cap, path, sb.st_mode);
    else if (sb.st_size < 8 || pread(fd, le, 8, 0) != 8)
        snprintf(err, cap, "'%s' is not a safetensors file (%lld bytes, too short)", path, (long long)sb.st_size);
    else {
        for (int i = 0; i < 8; i++) hn |= (uint64_t)le[i] << (8 * i);
        if (hn < 2 || hn > (uint64_t)sb.st_size - 8)
            snprintf(err, cap, "'%s' is not a safetensors file (its first 8 bytes do not give a JSON header length)", path);
    }
    if (!err[0]) {
        f->buf = xmalloc((size_t)hn);
        f->size = (size_t)hn;
        if (pread(fd, f->buf, (size_t)hn, 8) != (ssize_t)hn) snprintf(err, cap, "cannot read '%s': short header", path);
        else if (f->buf[0] != '{')
            snprintf(err, cap, "'%s' is not a safetensors file (its first 8 bytes do not give a JSON header length)", path);
    }
    if (!err[0]) {
        Parser ps = {(const char *)f->buf, (const char *)f->buf + hn, err, cap, path};
        if (parse_header(&ps, f, (size_t)sb.st_size - 8 - (size_t)hn)) {
            f->file_off = xmalloc(sizeof(size_t) * (size_t)(f->nt ? f->nt : 1));
            for (int i = 0; i < f->nt; i++) {
                f->file_off[i] = 8 + (size_t)hn + (uintptr_t)f->t[i].data;
                f->t[i].data = NULL;   // not in memory: st_read_at reads it
            }
        }
    }
    if (err[0]) { st_close(f); return NULL; }
    return f;
}

void st_read_at(const StFile *f, const StTensor *t, size_t byte_off, void *dst, size_t nbytes) {
    int i = (int)(t - f->t);
    if (f->fd < 0 || i < 0 || i >= f->nt) die("internal: st_read_at needs a tensor of a file opened by st_open_header_try");
    if (byte_off > t->nbytes || nbytes > t->nbytes - byte_off)
        die("internal: st_read_at: bytes [%zu, %zu) are outside tensor '%s' (%zu bytes)", byte_off, byte_off + nbytes,
            t->name, t->nbytes);
    size_t done = 0;
    while (done < nbytes) {
        ssize_t got = pread(f->fd, (char *)dst + done, nbytes - done, (off_t)(f->file_off[i] + byte_off + done));
        if (got <= 0) die("cannot read tensor '%s' of '%s': %s", t->name, f->path, got ? strerror(errno) : "file truncated");
        done += (size_t)got;
    }
}
