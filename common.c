// common.c: die() and its clean-up hook.
#include "common.h"
#include <stdatomic.h>
#include <unistd.h>
#include <stdarg.h>

static void (*cleanup_fn)(void *);
static void *cleanup_arg;

void die_set_cleanup(void (*fn)(void *), void *arg) {
    cleanup_fn = fn;
    cleanup_arg = arg;
}

void die(const char *fmt, ...) {
    // Devices are threads: when several find the same fault (a shape every device checks),
    // the first one reports it and exits; the others wait for the exit.
    static atomic_int dying = 0;
    if (atomic_exchange(&dying, 1)) for (;;) pause();
    fflush(stdout);
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "meshmoe: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    if (cleanup_fn) {
        void (*fn)(void *) = cleanup_fn;
        cleanup_fn = NULL; // never re-enter
        fn(cleanup_arg);
    }
    exit(1);
}
