// base/runfiles.c: the paths of one command against each other, by file identity (see the
// header).
#include "base/runfiles.h"
#include "core/common.h"
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

enum { RF_INPUT, RF_OUTPUT, RF_OUTPUT_DIR };

struct RunFile {
    char label[96];       // how messages name it: the key, or "NAME of KEY" for a file of a directory
    char *path;           // as given
    char real[PATH_MAX];  // resolved: symbolic links, ".", ".." and the working directory
    int kind;             // RF_*
    int dir;              // the output directory (index) it is written into; -1 for none
    int exists;
    dev_t dev;
    ino_t ino;
};

void runfiles_init(RunFiles *r) { memset(r, 0, sizeof *r); }

void runfiles_free(RunFiles *r) {
    for (int i = 0; i < r->n; i++) free(r->f[i].path);
    free(r->f);
    runfiles_init(r);
}

// path resolved: realpath when it exists; otherwise its directory resolved (the same way,
// up to one that exists), then its last name.
static void resolve(const char *path, char *out, size_t cap) {
    char p[PATH_MAX], dir[PATH_MAX];
    if (realpath(path, p)) { snprintf(out, cap, "%s", p); return; }
    if (!strcmp(path, ".")) { snprintf(out, cap, "."); return; }   // the working directory is gone
    snprintf(p, sizeof p, "%s", path);
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/') p[--n] = '\0';
    char *slash = strrchr(p, '/');
    const char *name = slash ? slash + 1 : p;
    if (!slash) resolve(".", dir, sizeof dir);
    else if (slash == p) snprintf(dir, sizeof dir, "/");
    else { *slash = '\0'; resolve(p, dir, sizeof dir); }
    if (!strcmp(name, ".") || !name[0]) {
        snprintf(out, cap, "%s", dir);
    } else if (!strcmp(name, "..")) {
        char *up = strrchr(dir, '/');
        if (up && up != dir) *up = '\0';
        else snprintf(dir, sizeof dir, "/");
        snprintf(out, cap, "%s", dir);
    } else {
        size_t nd = strlen(dir), nn = strlen(name), at = nd;
        if (nd + nn + 2 > cap) die("the path '%.64s...' is too long", path);
        memcpy(out, dir, nd);
        if (strcmp(dir, "/")) out[at++] = '/';
        memcpy(out + at, name, nn + 1);
    }
}

static void add(RunFiles *r, const char *label, const char *path, int kind, int dir) {
    if (!path || !path[0]) return;
    if (r->n == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 16;
        r->f = realloc(r->f, sizeof(RunFile) * (size_t)r->cap);
        if (!r->f) die("out of host memory");
    }
    RunFile *f = &r->f[r->n++];
    memset(f, 0, sizeof *f);
    snprintf(f->label, sizeof f->label, "%s", label);
    f->path = strdup(path);
    if (!f->path) die("out of host memory");
    f->kind = kind;
    f->dir = dir;
    struct stat st;
    if (stat(path, &st) == 0) { f->exists = 1; f->dev = st.st_dev; f->ino = st.st_ino; }
    resolve(path, f->real, sizeof f->real);
}

void runfiles_input(RunFiles *r, const char *key, const char *path) { add(r, key, path, RF_INPUT, -1); }
void runfiles_output(RunFiles *r, const char *key, const char *path) { add(r, key, path, RF_OUTPUT, -1); }

// The n files named in directory dir, each labelled "NAME of KEY".
static void add_in(RunFiles *r, const char *key, const char *dir, const char *const *names, int n, int kind, int at) {
    for (int i = 0; i < n; i++) {
        char label[96], path[PATH_MAX + 64];
        snprintf(label, sizeof label, "%s of %s", names[i], key);
        snprintf(path, sizeof path, "%s%s%s", dir, dir[strlen(dir) - 1] == '/' ? "" : "/", names[i]);
        add(r, label, path, kind, at);
    }
}

void runfiles_output_dir(RunFiles *r, const char *key, const char *dir, const char *const *names, int n) {
    if (!dir || !dir[0]) return;
    int at = r->n;
    add(r, key, dir, RF_OUTPUT_DIR, -1);
    add_in(r, key, dir, names, n, RF_OUTPUT, at);
}

void runfiles_inputs_in(RunFiles *r, const char *key, const char *dir, const char *const *names, int n) {
    if (dir && dir[0]) add_in(r, key, dir, names, n, RF_INPUT, -1);
}

void runfiles_allow_same(RunFiles *r, const char *key_a, const char *key_b) {
    r->same_a = key_a;
    r->same_b = key_b;
}

static int same_file(const RunFile *a, const RunFile *b) {
    return (a->exists && b->exists && a->dev == b->dev && a->ino == b->ino) || !strcmp(a->real, b->real);
}

// f lies strictly inside directory d.
static int inside(const RunFile *f, const RunFile *d) {
    size_t n = strlen(d->real);
    if (!strcmp(d->real, "/")) return f->real[1] != '\0';
    return !strncmp(f->real, d->real, n) && f->real[n] == '/';
}

static int allowed(const RunFiles *r, const RunFile *a, const RunFile *b) {
    if (!r->same_a || a->dir >= 0 || b->dir >= 0) return 0;
    return (!strcmp(a->label, r->same_a) && !strcmp(b->label, r->same_b)) ||
           (!strcmp(a->label, r->same_b) && !strcmp(b->label, r->same_a));
}

static void die_same(const RunFile *out, const RunFile *other) {
    char how[PATH_MAX + 64];
    if (!strcmp(out->real, other->real)) snprintf(how, sizeof how, "both resolve to %s", out->real);
    else snprintf(how, sizeof how, "hard links: one device and inode under two names");
    die("%s '%s' is the same file as %s '%s' (%s): %s", out->label, out->path, other->label, other->path, how,
        other->kind == RF_INPUT ? "the command would overwrite its own input; give the output another path"
                                : "one output would overwrite the other; give them different paths");
}

void runfiles_check(const RunFiles *r) {
    for (int i = 0; i < r->n; i++)
        for (int j = i + 1; j < r->n; j++) {
            const RunFile *a = &r->f[i], *b = &r->f[j];
            if (a->kind == RF_INPUT && b->kind == RF_INPUT) continue;
            if (!same_file(a, b) || allowed(r, a, b)) continue;
            if (a->kind == RF_INPUT) die_same(b, a);
            die_same(a, b);
        }
    for (int d = 0; d < r->n; d++) {
        if (r->f[d].kind != RF_OUTPUT_DIR) continue;
        for (int i = 0; i < r->n; i++) {
            const RunFile *f = &r->f[i], *dir = &r->f[d];
            if (i == d || f->kind == RF_INPUT || f->dir == d || !inside(f, dir)) continue;
            die("%s '%s' lies inside %s '%s', a directory whose files the command replaces: give %s a path "
                "outside it", f->label, f->path, dir->label, dir->path, f->label);
        }
    }
}
