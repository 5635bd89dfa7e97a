// common.c: die(), the thread that reports a fault, and the clean-up hook.
#include "common.h"
#include <stdatomic.h>
#include <unistd.h>
#include <stdarg.h>

static void (*cleanup_fn)(void *);
static void *cleanup_arg;
static jmp_buf *die_jump;
static int die_quiet;
static atomic_int dying = 0;
static _Thread_local int claimed;

void die_set_cleanup(void (*fn)(void *), void *arg) {
    cleanup_fn = fn;
    cleanup_arg = arg;
}

void die_set_jump(jmp_buf *jump, int quiet) {
    die_jump = jump;
    die_quiet = quiet;
}

void die_claim(void) {
    if (claimed) return;
    if (atomic_exchange(&dying, 1)) for (;;) pause();
    claimed = 1;
}

void die(const char *fmt, ...) {
    die_claim();
    fflush(stdout);
    if (!die_jump || !die_quiet) {
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "meshmoe: ");
        vfprintf(stderr, fmt, ap);
        fprintf(stderr, "\n");
        va_end(ap);
    }
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
    exit(1);
}
