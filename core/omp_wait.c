// core/omp_wait.c: how long OpenMP's waiting threads spin before they sleep, chosen before
// OpenMP starts, from what a wake-up costs on this machine.
//
// A device's OpenMP threads wait at the end of every parallel loop and are woken for the next
// one, thousands of times a step. A thread that sleeps (OMP_WAIT_POLICY=passive) must be
// woken by the next loop, and the loop waits for it; a thread that spins takes its core from
// whatever else wants it. libgomp spins GOMP_SPINCOUNT times, then sleeps (its default,
// 300000 spins, is milliseconds). What a sleep costs is the machine's: microseconds on a
// bare machine, 65-80 us on the Intel Xeon virtual machine of docs/performance.md, whose idle
// cores halt and are woken by the hypervisor. A thread that spins for as long as a sleep
// costs never loses more than twice what the better choice would have cost (spinning when
// the next loop comes soon, sleeping when it comes late). So, unless the user chose, the
// spin count is the sleep's cost measured at start-up (wake_probe) in spins
// (spin_probe), within [SPIN_MIN, SPIN_MAX]; and SPIN_MIN where other work is already
// running when the trainer starts, whose cores a spinning thread would take (and whose
// wake-ups measure its time slices rather than the machine). "Waiting threads" in
// docs/performance.md gives the step times of each choice, alone and beside a second run.
//
// libgomp reads OMP_WAIT_POLICY and GOMP_SPINCOUNT once, in its own initialiser, before
// main(). Setting the variable earlier does not work: the executable's .preinit_array runs
// before any library's initialiser, but the C library's initialiser then resets `environ`
// to the environment the process started with. So the answer is given where libgomp asks:
// this getenv, which the dynamic linker binds libgomp's calls to (a definition in the
// executable comes first), answers the spin count for GOMP_SPINCOUNT when the user set
// neither it nor OMP_WAIT_POLICY, and reads every other variable from the environment as the
// C library does. The user's choice wins; the environment itself is not changed.
#include "core/common.h"
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

enum { SPIN_MIN = 1000, SPIN_MAX = 20000, WAKES = 7 };
extern char **environ;

static char *env_lookup(const char *name) {
    size_t n = strlen(name);
    for (char **e = environ; e && *e; e++)
        if (!strncmp(*e, name, n) && (*e)[n] == '=') return *e + n + 1;
    return NULL;
}

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

// One spin of libgomp's waiting loop (config/linux/wait.h): a relaxed load of the word it
// waits on, then the CPU's pause. ns each, the fastest of five runs of 20000.
static double spin_probe(void) {
    atomic_int word = 0;
    double best = 1e30;
    for (int run = 0; run < 5; run++) {
        double t = now_ns();
        for (int i = 0; i < 20000; i++) {
            if (atomic_load_explicit(&word, memory_order_relaxed)) break;
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#endif
        }
        best = MM_MIN(best, (now_ns() - t) / 20000);
    }
    return best;
}

// What a sleep costs: a thread asleep in futex_wait is woken by another, which then sleeps
// until the first wakes it back; ns for the round trip (two wake-ups), the median of WAKES.
// Each starts 200 us after the last, long enough for an idle core to halt, as between two
// loops of a step. Two, because a loop whose thread slept is late twice: its start waits for
// that thread, and the thread that started it, if it spins for less than that wake-up at
// the loop's end, sleeps there in turn and is woken late too. On the Intel Xeon of
// docs/performance.md the round trip took 65-80 us, and a parallel loop after 20-320 us
// without one took 150-210 us with 1000 spins (15 us), 2-45 us with 5000.
typedef struct { atomic_int word, back; } Probe;

static void futex_wait(atomic_int *w, int old) { syscall(SYS_futex, w, FUTEX_WAIT_PRIVATE, old, NULL, NULL, 0); }
static void futex_wake(atomic_int *w) { syscall(SYS_futex, w, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0); }

static void *sleeper(void *arg) {
    Probe *p = arg;
    for (int n = 0; n < WAKES; n++) {
        while (atomic_load(&p->word) == n) futex_wait(&p->word, n);
        atomic_store(&p->back, n + 1);
        futex_wake(&p->back);
    }
    return NULL;
}

static double wake_probe(void) {
    Probe p = {0};
    pthread_t th;
    if (pthread_create(&th, NULL, sleeper, &p)) return 0;
    double lat[WAKES];
    for (int n = 0; n < WAKES; n++) {
        nanosleep(&(struct timespec){0, 200000}, NULL);
        double t0 = now_ns();
        atomic_store(&p.word, n + 1);
        futex_wake(&p.word);
        while (atomic_load(&p.back) <= n) futex_wait(&p.back, n);
        lat[n] = now_ns() - t0;
    }
    pthread_join(th, NULL);
    for (int i = 1; i < WAKES; i++)   // sort, for the median
        for (int j = i; j > 0 && lat[j] < lat[j - 1]; j--) {
            double x = lat[j];
            lat[j] = lat[j - 1], lat[j - 1] = x;
        }
    return lat[WAKES / 2];
}

// Tasks running on the machine now, this one included (/proc/stat's procs_running); 0 if
// unknown.
static int running_tasks(void) {
    FILE *f = fopen("/proc/stat", "r");
    if (!f) return 0;
    char line[256];
    int n = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "procs_running %d", &n) == 1) break;
    fclose(f);
    return n;
}

static char spin_text[16];
static double wake_us, spin_ns_each;
static int busy_at_start;

static const char *spin_count(void) {
    if (!spin_text[0]) {
        long spins = SPIN_MIN;
        int running = running_tasks();   // the fewest of three looks, a few ms apart: a program
                                         // started beside this one (`| tee`) runs for a moment
        if (sysconf(_SC_NPROCESSORS_ONLN) > 1) {
            spin_ns_each = spin_probe();
            running = MM_MIN(running, running_tasks());
            wake_us = wake_probe() / 1e3;
            running = MM_MIN(running, running_tasks());
            busy_at_start = running > 1;
            if (spin_ns_each > 0 && !busy_at_start) spins = (long)(wake_us * 1e3 / spin_ns_each);
        }
        snprintf(spin_text, sizeof spin_text, "%ld", MM_MAX((long)SPIN_MIN, MM_MIN((long)SPIN_MAX, spins)));
    }
    return spin_text;
}

char *getenv(const char *name) {
    char *v = env_lookup(name);
    if (!v && !strcmp(name, "GOMP_SPINCOUNT") && !env_lookup("OMP_WAIT_POLICY")) return (char *)spin_count();
    return v;
}

const char *omp_wait_describe(char *buf, size_t n) {
    const char *policy = env_lookup("OMP_WAIT_POLICY"), *spins = env_lookup("GOMP_SPINCOUNT");
    if (policy || spins)
        snprintf(buf, n, "as the environment says (%s%s%s%s%s)", policy ? "OMP_WAIT_POLICY=" : "",
                 policy ? policy : "", policy && spins ? ", " : "", spins ? "GOMP_SPINCOUNT=" : "", spins ? spins : "");
    else if (!spin_text[0])
        snprintf(buf, n, "libgomp's default (it did not ask)");
    else if (busy_at_start)
        snprintf(buf, n, "spin %s times, then sleep (other work was running at start)", spin_text);
    else
        snprintf(buf, n, "spin %s times, then sleep (two wake-ups took %.0f us here, a spin %.1f ns)", spin_text,
                 wake_us, spin_ns_each);
    return buf;
}
