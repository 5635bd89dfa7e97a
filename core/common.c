// core/common.c: die(), the thread that reports a fault, and the clean-up hook; OpenMP's wait
// policy, chosen before OpenMP starts.
#include "core/common.h"
#include <stdatomic.h>
#include <unistd.h>
#include <stdarg.h>

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

// How OpenMP's waiting threads wait. A device's OpenMP threads wait at the end of every
// parallel loop and are woken for the next one, thousands of times a step. Sleeping at once
// (OMP_WAIT_POLICY=passive) costs a futex wake-up per loop; spinning long (libgomp's
// default: 300000 spins, milliseconds) takes the cores from the working threads whenever
// there are more threads than cores, from other work on the machine, and a step can take
// several times as long. So unless the user chose, a waiting thread spins SPIN_COUNT times
// (tens of microseconds) and then sleeps. Measured on the -small presets' step, 2 cores
// (docs/performance.md, "Waiting threads"): alone on the machine 0.83-0.87 of passive's
// step time; beside a second training run 1.2 times it (300000 spins: about 2 times).
// libgomp reads OMP_WAIT_POLICY and GOMP_SPINCOUNT once, in its own initialiser, before
// main(). Setting the variable earlier does not work: the executable's .preinit_array runs
// before any library's initialiser, but the C library's initialiser then resets `environ`
// to the environment the process started with. So the answer is given where libgomp asks:
// this getenv, which the dynamic linker binds libgomp's calls to (a definition in the
// executable comes first), answers SPIN_COUNT for GOMP_SPINCOUNT when the user set neither
// it nor OMP_WAIT_POLICY, and reads every other variable from the environment as the C
// library does. The user's choice wins; the environment itself is not changed.
#define SPIN_COUNT "1000"
extern char **environ;

static char *env_lookup(const char *name) {
    size_t n = strlen(name);
    for (char **e = environ; e && *e; e++)
        if (!strncmp(*e, name, n) && (*e)[n] == '=') return *e + n + 1;
    return NULL;
}

char *getenv(const char *name) {
    char *v = env_lookup(name);
    if (!v && !strcmp(name, "GOMP_SPINCOUNT") && !env_lookup("OMP_WAIT_POLICY")) return (char *)SPIN_COUNT;
    return v;
}
