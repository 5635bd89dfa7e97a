// core/common.c: die(), the thread that reports a fault, and the clean-up hook.
#include "core/common.h"
#include <stdatomic.h>
#include <unistd.h>
#include <stdarg.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <errno.h>

static void (*cleanup_fn)(void *);
static void *cleanup_arg;
static jmp_buf *die_jump;
static int die_quiet;
static atomic_int dying = 0;
static int die_process = -1;
static void (*die_end)(int code);
static _Thread_local int claimed;

void die_set_cleanup(void (*fn)(void *), void *arg) {
    cleanup_fn = fn;
    cleanup_arg = arg;
}

void die_set_jump(jmp_buf *jump, int quiet) {
    die_jump = jump;
    die_quiet = quiet;
}

void die_set_process(int process, void (*end)(int code)) {
    die_process = process;
    die_end = end;
}

static const char *const *note_words;
static const char *note_text;

void die_set_note(const char *const *words, const char *note) {
    note_words = words;
    note_text = note;
}

void die_claim(void) {
    if (claimed) return;
    if (atomic_exchange(&dying, 1)) for (;;) pause();
    claimed = 1;
}

// The last message, whole: one write of the line, so that the lines of several processes do
// not mix; kept for die_last_message.
static char last_line[8192];

const char *die_last_message(void) { return last_line; }

void die(const char *fmt, ...) {
    die_claim();
    fflush(stdout);
    int at = snprintf(last_line, sizeof last_line, "meshmoe: ");
    if (die_process >= 0) at += snprintf(last_line + at, sizeof last_line - at, "process %d: ", die_process);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_line + at, sizeof last_line - at, fmt, ap);
    va_end(ap);
    for (int w = 0; note_text && note_words[w]; w++)
        if (strstr(last_line, note_words[w])) {
            size_t n = strlen(last_line);
            snprintf(last_line + n, sizeof last_line - n, "%s", note_text);
            break;
        }
    if (!die_jump || !die_quiet) fprintf(stderr, "%s\n", last_line);
    if (cleanup_fn) {
        void (*fn)(void *) = cleanup_fn;
        cleanup_fn = NULL; // never re-enter
        fn(cleanup_arg);
    }
    if (die_jump) {   // the fuzz harness: back to its loop, ready for the next input
        claimed = 0;
        atomic_store(&dying, 0);
        longjmp(*die_jump, 1);
    }
    if (die_end) die_end(1);
    exit(1);
}

int open_input(const char *path) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return -1;
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

FILE *fopen_input(const char *path) {
    int fd = open_input(path);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int e = errno;
        close(fd);
        errno = e;
    }
    return f;
}

FILE *fopen_regular(const char *path, const char *prefix) {
    FILE *f = fopen_input(path);
    if (!f) die("%s: cannot open '%s': %s", prefix, path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0) die("%s: cannot read '%s': %s", prefix, path, strerror(errno));
    if (S_ISDIR(st.st_mode)) die("%s: '%s' is a directory, not a file", prefix, path);
    if (!S_ISREG(st.st_mode)) die("%s: '%s' is not a regular file (a device, pipe or socket)", prefix, path);
    return f;
}
