// trainer/same_start.c: the files each host starts from against process 0's (see the header).
#include "trainer/same_start.h"
#include "trainer/hf.h"     // hf_read_names: the files load_hf reads
#include "base/net.h"       // share: process 0's copy to every process
#include "base/paths.h"     // file_hash, path_join
#include "core/common.h"
#include <errno.h>
#include <limits.h>

// One file as a process holds it: its hash and size, 1 in unread where it cannot be read
// (err: why), and its name in load_hf's directory ("" for a checkpoint).
typedef struct { uint64_t hash, size, unread, err; char name[NAME_MAX + 1]; } Copy;

// The file at path here (NULL: none, this process reading fewer files) into mine and process
// 0's into zero: a share every process makes.
static void share_copy(const char *path, const char *name, Copy *mine, Copy *zero) {
    size_t size = 0;
    memset(mine, 0, sizeof *mine);
    mine->unread = path && !file_hash(path, &mine->hash, &size);
    mine->err = (uint64_t)errno;
    mine->size = size;
    snprintf(mine->name, sizeof mine->name, "%s", name);
    *zero = *mine;
    net_current()->share(zero, sizeof *zero);
}

// Why this host's copy of a file (`what`: the key and the path or file, as said) is not
// process 0's, into msg: it cannot be read here, or its size or hash differs ("" if neither).
static void why_other(char *msg, size_t cap, const char *key, const char *path, const char *what, const Copy *mine,
                      const Copy *zero) {
    if (mine->unread) snprintf(msg, cap, "cannot read %s '%s': %s", key, path, strerror((int)mine->err));
    else if (mine->hash != zero->hash || mine->size != zero->size)
        snprintf(msg, cap, "%s is another file here than on process 0 (%llu bytes, hash %016llx; there %llu, %016llx): "
                 "every host needs the same copy", what, (unsigned long long)mine->size,
                 (unsigned long long)mine->hash, (unsigned long long)zero->size, (unsigned long long)zero->hash);
}

static void check_same_file(const char *key, const char *path) {
    Copy mine, zero;
    char what[CFG_STR + 64], msg[2 * CFG_STR + 256] = "";
    share_copy(path, "", &mine, &zero);
    snprintf(what, sizeof what, "%s '%s'", key, path);
    why_other(msg, sizeof msg, key, path, what, &mine, &zero);
    if (msg[0]) die("%s", msg);
}

// The lists of load_hf's files part at file i (from 0): its name here and on process 0 ("" for
// none), into msg.
static void other_files(char *msg, size_t cap, const char *dir, int n, int n0, int i, const char *here,
                        const char *there) {
    char a[NAME_MAX + 3] = "none", b[NAME_MAX + 3] = "none";
    if (here[0]) snprintf(a, sizeof a, "'%s'", here);
    if (there[0]) snprintf(b, sizeof b, "'%s'", there);
    snprintf(msg, cap, "load_hf '%s' holds other files here than on process 0 (%d to read here, %d there; file %d: "
             "%s here, %s there): every host needs the same copy", dir, n, n0, i + 1, a, b);
}

// load_hf's files in the order it reads them: their count shared first, then as many copies as
// process 0 has files (a process that reads fewer shares empty ones for the rest), so that the
// shares stay matched; the first file that differs, or the first place the lists part, is said.
static void check_same_hf(const char *dir) {
    int n, count[1];
    char **names = hf_read_names(dir, &n);   // (hf_check has read the index already: no death here)
    count[0] = n;
    net_current()->share(count, sizeof count);
    char path[CFG_STR + NAME_MAX + 2], what[CFG_STR + NAME_MAX + 32], msg[2 * CFG_STR + 3 * NAME_MAX + 256] = "";
    for (int i = 0; i < count[0]; i++) {
        Copy mine, zero;
        if (i < n) path_join(path, sizeof path, dir, names[i]);
        share_copy(i < n ? path : NULL, i < n ? names[i] : "", &mine, &zero);
        if (msg[0]) continue;
        if (strcmp(mine.name, zero.name)) {
            other_files(msg, sizeof msg, dir, n, count[0], i, mine.name, zero.name);
        } else {
            snprintf(what, sizeof what, "load_hf '%s': its file '%s'", dir, names[i]);
            why_other(msg, sizeof msg, "load_hf", path, what, &mine, &zero);
        }
    }
    if (!msg[0] && n > count[0]) other_files(msg, sizeof msg, dir, n, count[0], count[0], names[count[0]], "");
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    if (msg[0]) die("%s", msg);
}

void same_start_check(const Config *c) {
    if (c->load_checkpoint[0]) check_same_file("load_checkpoint", c->load_checkpoint);
    if (c->load_parameters_path[0]) check_same_file("load_parameters_path", c->load_parameters_path);
    if (c->load_hf[0]) check_same_hf(c->load_hf);
}
