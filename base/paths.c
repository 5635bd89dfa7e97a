// base/paths.c: up-front checks of the run's files, atomic saves, and what a signal does
// (see the header).
#include "base/paths.h"
#include "core/common.h"
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <unistd.h>

// The directory part of path ("." when it has none).
static void dir_of(const char *path, char *dir, size_t cap) {
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, cap, ".");
    else if (slash == path) snprintf(dir, cap, "/");
    else snprintf(dir, cap, "%.*s", (int)(slash - path), path);
}

static void check_path_length(const char *key, const char *path) {
    if (strlen(path) + 32 >= PATH_MAX) die("%s '%.64s...' is too long (%zu bytes)", key, path, strlen(path));
}

int file_hash(const char *path, uint64_t *hash, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    uint64_t h = 14695981039346656037ull;   // FNV-1a over 4-byte words, the tail zero-padded
    uint32_t buf[16384];
    size_t n, total = 0;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) {
        if (n % 4) memset((char *)buf + n, 0, 4 - n % 4);
        for (size_t i = 0; i < (n + 3) / 4; i++) h = (h ^ buf[i]) * 1099511628211ull;
        total += n;
    }
    int ok = !ferror(f), err = errno;
    fclose(f);
    errno = err;
    *hash = h;
    *size = total;
    return ok;
}

int path_join(char *out, size_t cap, const char *dir, const char *name) {
    size_t n = strlen(dir);
    return snprintf(out, cap, "%s%s%s", dir, n && dir[n - 1] == '/' ? "" : "/", name);
}

void check_input_file(const char *key, const char *path) {
    struct stat st;
    check_path_length(key, path);
    if (stat(path, &st) != 0) die("cannot open %s '%s': %s", key, path, strerror(errno));
    if (S_ISDIR(st.st_mode)) die("%s '%s' is a directory; it must name a file", key, path);
    if (access(path, R_OK) != 0) die("cannot read %s '%s': %s", key, path, strerror(errno));
}

// A file can be created in dir: make a probe there and remove it.
static void probe_dir(const char *key, const char *path, const char *dir) {
    struct stat st;
    if (stat(dir, &st) != 0)
        die("%s '%s': directory '%s' %s", key, path, dir,
            errno == ENOENT ? "does not exist" : strerror(errno));
    if (!S_ISDIR(st.st_mode)) die("%s '%s': '%s' is not a directory", key, path, dir);
    char probe[PATH_MAX];
    snprintf(probe, sizeof probe, "%s/.meshmoe-probe-XXXXXX", dir);
    int fd = mkstemp(probe);
    if (fd < 0) die("%s '%s': cannot create a file in directory '%s': %s", key, path, dir, strerror(errno));
    close(fd);
    unlink(probe);
}

void check_output_path(const char *key, const char *path) {
    struct stat st;
    check_path_length(key, path);
    size_t n = strlen(path);
    if (n == 0 || path[n - 1] == '/') die("%s '%s' names a directory; it must name a file", key, path);
    if (stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode)) die("%s '%s' is a directory; it must name a file", key, path);
        if (!S_ISREG(st.st_mode))
            die("%s '%s' exists and is not a regular file (a device, pipe or socket): a save is written "
                "beside it and renamed over it, which would replace it; give a regular file's path", key, path);
    } else if (errno != ENOENT) {
        die("%s '%s': %s", key, path, strerror(errno));
    }
    char dir[PATH_MAX];
    dir_of(path, dir, sizeof dir);
    probe_dir(key, path, dir);
}

void check_output_dir(const char *key, const char *path) {
    struct stat st;
    check_path_length(key, path);
    if (stat(path, &st) == 0) {
        if (!S_ISDIR(st.st_mode)) die("%s '%s' exists and is not a directory", key, path);
        probe_dir(key, path, path);
        return;
    }
    if (errno != ENOENT) die("%s '%s': %s", key, path, strerror(errno));
    char dir[PATH_MAX], trimmed[PATH_MAX];
    snprintf(trimmed, sizeof trimmed, "%s", path);
    for (size_t n = strlen(trimmed); n > 1 && trimmed[n - 1] == '/'; n--) trimmed[n - 1] = '\0';
    dir_of(trimmed, dir, sizeof dir);
    probe_dir(key, path, dir);
}

// ---------------------------------------------------------------------------------------
// The files in flight, their targets and temporary names, read by the signal handler: the
// saves (one written at a time; a set saved together keeps its written files here, under
// their temporary names, until atomic_files_commit renames them all), and apart from them a
// stream not yet published (the metrics file before its first line).

typedef struct {
    char path[PATH_MAX], tmp[PATH_MAX + 16];
    FILE *f;   // open while it is written (a save), NULL once written out
} Pending;

enum { SAVES = 4 };
static Pending save[SAVES], stream;
static atomic_int save_active[SAVES], stream_active;   // its temporary file exists
static int nsaves;                                     // save slots in use, in order
static char made_dir[PATH_MAX];                        // output_dir_make's directory,
static atomic_int made_dir_active;                     // until files are committed into it

static void remove_tmps(void *unused) {
    (void)unused;
    for (int i = 0; i < SAVES; i++)
        if (atomic_exchange(&save_active[i], 0)) {
            if (save[i].f) fclose(save[i].f);
            save[i].f = NULL;
            unlink(save[i].tmp);
        }
    nsaves = 0;
    if (atomic_exchange(&stream_active, 0)) unlink(stream.tmp);
    if (atomic_exchange(&made_dir_active, 0)) rmdir(made_dir);   // only if empty
}

// The clean-up hook while any temporary file exists.
static void cleanup_update(void) {
    int any = nsaves > 0 || atomic_load(&stream_active) || atomic_load(&made_dir_active);
    die_set_cleanup(any ? remove_tmps : NULL, NULL);
}

// A fresh temporary file beside path's target (a link followed: the file it points to is
// replaced, the link stays), with the target's mode or the usual one; p's names set.
static FILE *open_beside(const char *path, Pending *p) {
    if (strlen(path) + 16 >= PATH_MAX) die("cannot write '%.64s...': the path is too long", path);
    memcpy(p->path, path, strlen(path) + 1);
    struct stat st;
    char real[PATH_MAX];
    if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode) && realpath(path, real)) snprintf(p->path, PATH_MAX, "%s", real);
    int exists = stat(p->path, &st) == 0;
    if (exists && !S_ISREG(st.st_mode))
        die("cannot write '%s': it exists and is not a regular file (a directory, device, pipe or socket)", path);
    size_t n = strlen(p->path);   // tmp = path ".tmp.XXXXXX" (tmp has room for 16 more)
    memcpy(p->tmp, p->path, n);
    memcpy(p->tmp + n, ".tmp.XXXXXX", sizeof ".tmp.XXXXXX");
    int fd = mkstemp(p->tmp);
    if (fd < 0) die("cannot write '%s': cannot create a temporary file beside it: %s", path, strerror(errno));
    // mkstemp makes the file 0600; the saved file gets the target's mode, or the usual one.
    mode_t um = umask(0);
    umask(um);
    fchmod(fd, exists ? (st.st_mode & 07777) : (0666 & ~um));
    FILE *f = fdopen(fd, "wb");
    if (!f) { close(fd); unlink(p->tmp); die("cannot write '%s': %s", path, strerror(errno)); }
    return f;
}

FILE *atomic_file_open(const char *path) {
    if (nsaves > 0 && save[nsaves - 1].f) die("internal: a save of '%s' is already being written", save[nsaves - 1].path);
    if (nsaves == SAVES) die("internal: more than %d files saved together", SAVES);
    int slot = nsaves;
    save[slot].f = open_beside(path, &save[slot]);
    nsaves++;
    atomic_store(&save_active[slot], 1);
    cleanup_update();
    return save[slot].f;
}

// The directory holding path synced, so that a rename into it is durable.
static void sync_dir_of(const char *path) {
    char dir[PATH_MAX];
    dir_of(path, dir, sizeof dir);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) { fsync(dfd); close(dfd); }
}

void atomic_file_hold(FILE *f) {
    int slot = nsaves - 1;
    if (slot < 0 || f != save[slot].f) die("internal: atomic_file_hold without atomic_file_open");
    int ok = !ferror(f) && fflush(f) == 0 && fsync(fileno(f)) == 0;
    int err = errno;
    save[slot].f = NULL;
    if (fclose(f) != 0 && ok) { ok = 0; err = errno; }
    if (!ok) die("cannot write '%s': %s", save[slot].path, strerror(err ? err : EIO));
}

// While the files saved together are renamed into place, committing is 1, and 2 once a signal
// came meanwhile (its number in commit_sig): the handler then leaves it to the commit's end, so
// that the files are all the new ones or all the old ones (on_signal).
static atomic_int committing, commit_sig, after_commit;
static void on_signal(int sig);

void atomic_files_commit(void) {
    if (nsaves == 0 || save[nsaves - 1].f) die("internal: atomic_files_commit with a file still being written");
    atomic_store(&commit_sig, 0);
    atomic_store(&committing, 1);
    for (int i = 0; i < nsaves; i++) {
        if (rename(save[i].tmp, save[i].path) != 0) {
            int err = errno;
            atomic_store(&committing, 0);   // (a signal during die's clean-up acts at once)
            die("cannot rename '%s' to '%s': %s", save[i].tmp, save[i].path, strerror(err));
        }
        atomic_store(&save_active[i], 0);
    }
    for (int i = 0; i < nsaves; i++) sync_dir_of(save[i].path);
    nsaves = 0;
    atomic_store(&made_dir_active, 0);   // it holds the files now
    cleanup_update();
    if (atomic_exchange(&committing, 0) == 2) {   // as if it came now, with every file saved
        atomic_store(&after_commit, 1);
        on_signal(atomic_load(&commit_sig));
    }
}

void output_dir_make(const char *key, const char *dir) {
    if (strlen(dir) >= PATH_MAX) die("%s: the path '%.64s...' is too long", key, dir);
    if (mkdir(dir, 0777) == 0) {
        memcpy(made_dir, dir, strlen(dir) + 1);
        atomic_store(&made_dir_active, 1);
        cleanup_update();
    } else if (errno != EEXIST) {
        die("%s: cannot create directory '%s': %s", key, dir, strerror(errno));
    }
    struct stat st;
    if (stat(dir, &st) || !S_ISDIR(st.st_mode) || access(dir, W_OK)) die("%s: '%s' is not a writable directory", key, dir);
}

void atomic_file_commit(FILE *f) {
    atomic_file_hold(f);
    atomic_files_commit();
}

FILE *atomic_stream_open(const char *path) {
    if (atomic_load(&stream_active)) die("internal: a stream to '%s' is already waiting", stream.path);
    stream.f = open_beside(path, &stream);
    atomic_store(&stream_active, 1);
    cleanup_update();
    return stream.f;
}

void atomic_stream_publish(FILE *f) {
    if (!atomic_load(&stream_active) || f != stream.f) die("internal: atomic_stream_publish without atomic_stream_open");
    if (ferror(f) || fflush(f) != 0 || fsync(fileno(f)) != 0)
        die("cannot write '%s': %s", stream.path, strerror(errno ? errno : EIO));
    if (rename(stream.tmp, stream.path) != 0)
        die("cannot rename '%s' to '%s': %s", stream.tmp, stream.path, strerror(errno));
    atomic_store(&stream_active, 0);
    stream.f = NULL;   // the caller's now
    sync_dir_of(stream.path);
    cleanup_update();
}

// ---------------------------------------------------------------------------------------
// Signals. The handler uses only async-signal-safe calls (write, unlink, rmdir, _exit).

static atomic_int stop_armed, stop_sig;
static const char *signal_note = "";   // (signals_note)

void signals_note(const char *note) { signal_note = note; }

const char *signal_name(int sig) {
    return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : sig == SIGHUP ? "SIGHUP" : "a signal";
}

static void say(const char *a, const char *b, const char *c) {
    const char *parts[3] = {a, b, c};
    for (int i = 0; i < 3; i++)
        if (parts[i] && write(2, parts[i], strlen(parts[i])) < 0) return;
}

static void on_signal(int sig) {
    if (atomic_load(&committing)) {   // the renames finish first (atomic_files_commit)
        atomic_store(&commit_sig, sig);
        int one = 1;
        if (atomic_compare_exchange_strong(&committing, &one, 2) || one == 2) return;
    }
    const char *name = signal_name(sig);
    int saving = 0;
    for (int i = 0; i < SAVES; i++) {
        if (!atomic_load(&save_active[i])) continue;
        unlink(save[i].tmp);
        saving = 1;
        say("meshmoe: interrupted by ", name, " while saving '");
        say(save[i].path, "': the unfinished temporary file was removed and '", save[i].path);
        say("' is as it was\n", NULL, NULL);
    }
    if (!saving && atomic_load(&stop_armed) && !atomic_exchange(&stop_sig, sig)) {
        say("(", name, " received: stopping after this step; send it again to stop at once)");
        say(signal_note, "\n", NULL);
        return;
    }
    if (atomic_load(&stream_active)) unlink(stream.tmp);   // a fresh metrics file, not yet begun
    if (atomic_load(&made_dir_active)) rmdir(made_dir);      // made for the files just removed (if empty)
    if (saving) _exit(128 + sig);
    const char *when = atomic_load(&after_commit) ? ", once the files being saved were all in place" : "";
    say("meshmoe: interrupted by ", name, when);
    say(signal_note, "\n", NULL);
    _exit(128 + sig);
}

void signals_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);   // (a closed terminal or ssh session: as SIGTERM)
    signal(SIGXFSZ, SIG_IGN);
}

void signals_allow_stop(int on) { atomic_store(&stop_armed, on); }
int signals_stop_requested(void) { return atomic_load(&stop_sig); }
