// sweep/run.c: run one configuration as a child process and read its metrics file.
//
// Each configuration of the sweep is a fresh process, so that nothing (allocator peaks,
// the mesh's threads, OpenBLAS state) leaks from one run into the next, and a run the
// config refuses stops only itself. The metrics file has one JSON object per step
// (trainer/metrics.c:metrics_write); only the fields the sweep needs are read, with a small scanner.
#include "sweep/run.h"
#include "core/common.h"
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>

// ---- signals: SIGINT, SIGTERM or SIGHUP stop the running child ----
// The handler only records the signal and sends SIGTERM to the child in flight (kill is
// async-signal-safe); the sweep then waits for the child and removes its files itself.

static atomic_int stop_sig, child_pid;
static const int STOP_SIGNALS[] = {SIGINT, SIGTERM, SIGHUP};
#define NSTOP (sizeof STOP_SIGNALS / sizeof STOP_SIGNALS[0])

static void on_signal(int sig) {
    int none = 0;
    atomic_compare_exchange_strong(&stop_sig, &none, sig);   // the first signal is the one named
    int pid = atomic_load(&child_pid);
    if (pid > 0) kill(pid, SIGTERM);   // again on a second signal: the child then stops at once
}

void sweep_signals_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < NSTOP; i++) sigaction(STOP_SIGNALS[i], &sa, NULL);
}

int sweep_stop_signal(void) { return atomic_load(&stop_sig); }

// The stop signals blocked (on) or restored to how they were (off).
static void block_stop_signals(int on, sigset_t *old) {
    sigset_t set;
    sigemptyset(&set);
    for (size_t i = 0; i < NSTOP; i++) sigaddset(&set, STOP_SIGNALS[i]);
    sigprocmask(on ? SIG_BLOCK : SIG_SETMASK, on ? &set : old, on ? old : NULL);
}

// Pointer just after the first `key` in [p, end), or NULL.
static const char *after(const char *p, const char *end, const char *key) {
    const char *q = strstr(p, key);
    return q && q < end ? q + strlen(key) : NULL;
}

static double num_after(const char *p, const char *end, const char *key) {
    const char *q = after(p, end, key);
    return q ? strtod(q, NULL) : 0;
}

static int tag_index(RunResult *r, const char *name) {
    for (int i = 0; i < r->ntags; i++)
        if (!strcmp(r->tag[i], name)) return i;
    if (r->ntags == SW_MAXTAGS) return -1;
    snprintf(r->tag[r->ntags], sizeof r->tag[0], "%s", name);
    r->tag_peak[r->ntags] = 0;
    return r->ntags++;
}

// Walks a flat object {"name": number, ...} at p and returns the sum of its numbers; with
// keep_tags, each entry also raises that tag's peak (tags named host* are host memory).
static size_t read_object(const char *p, RunResult *r, int keep_tags) {
    size_t sum = 0;
    if (!p || *p != '{') return 0;
    for (p++;;) {
        while (*p == ' ' || *p == ',') p++;
        if (*p != '"') break;
        char name[32];
        int n = 0;
        for (p++; *p && *p != '"'; p++) if (n < 31) name[n++] = *p;
        name[n] = '\0';
        if (*p) p++;
        while (*p == ':' || *p == ' ') p++;
        char *e;
        size_t v = strtoull(p, &e, 10);
        p = e;
        sum += v;
        if (keep_tags) {
            int t = tag_index(r, name);
            if (t >= 0) r->tag_peak[t] = MM_MAX(r->tag_peak[t], v);
            if (!strncmp(name, "host", 4)) r->host_peak = MM_MAX(r->host_peak, v);
        }
    }
    return sum;
}

// One metrics line: the step's loss, grad norm and time, and every device's figures.
static void read_line(char *line, RunResult *r) {
    if (r->nsteps == SW_MAXSTEPS) return;
    char *end = line + strlen(line);
    const char *q = after(line, end, "\"loss_bits\": \"");
    union { uint32_t u; float f; } bits = {q ? (uint32_t)strtoul(q, NULL, 16) : 0};
    int s = r->nsteps++;
    r->loss[s] = bits.f;
    r->grad_norm[s] = (float)num_after(line, end, "\"grad_norm\": ");
    r->ms[s] = num_after(line, end, "\"ms\": ");
    size_t comm = 0, copied = 0;
    char *dev = strstr(line, "{\"device\": ");
    while (dev) {
        char *next = strstr(dev + 1, "{\"device\": ");
        char *dend = next ? next : end;
        size_t peak = (size_t)num_after(dev, dend, "\"peak_bytes\": ");
        r->peak = MM_MAX(r->peak, peak);
        int d = (int)num_after(dev, dend, "{\"device\": ");
        if (d >= 0 && d < SW_MAXDEV) {
            r->dev_peak[d] = MM_MAX(r->dev_peak[d], peak);
            r->ndev_seen = MM_MAX(r->ndev_seen, d + 1);
        }
        read_object(after(dev, dend, "\"peak_bytes_by_tag\": "), r, 1);
        comm += read_object(after(dev, dend, "\"comm_bytes_sent\": "), r, 0);
        // host memory reported as its own field rather than a tag
        const char *h = after(dev, dend, "\"host_peak_bytes\": ");
        if (h) r->host_peak = MM_MAX(r->host_peak, (size_t)strtoull(h, NULL, 10));
        copied += (size_t)num_after(dev, dend, "\"to_host\": ") + (size_t)num_after(dev, dend, "\"to_device\": ");
        dev = next;
    }
    r->host_copied = MM_MAX(r->host_copied, copied);
    if (s == 0) r->comm_first = comm;
    r->comm_last = comm;
}

// The init and eval peaks a run prints ("init peak N bytes ...", "eval peak N bytes ..."),
// where the build measures them: they are outside the training step the metrics cover.
static void read_printed_peaks(const char *log, RunResult *r) {
    FILE *f = fopen(log, "r");
    if (!f) return;
    char *line = NULL;
    size_t n = 0;
    while (getline(&line, &n, f) >= 0) {
        if (!strncmp(line, "init peak ", 10)) r->init_peak = MM_MAX(r->init_peak, (size_t)strtoull(line + 10, NULL, 10));
        if (!strncmp(line, "eval peak ", 10)) r->eval_peak = MM_MAX(r->eval_peak, (size_t)strtoull(line + 10, NULL, 10));
    }
    free(line);
    fclose(f);
}

// The last "meshmoe:" line of the log (the reason a run stopped), or its last line.
static void last_message(const char *log, char *out, size_t cap) {
    FILE *f = fopen(log, "r");
    snprintf(out, cap, "no message (see the run's output)");
    if (!f) return;
    char *line = NULL;
    size_t n = 0;
    int found = 0;
    while (getline(&line, &n, f) >= 0) {
        line[strcspn(line, "\n")] = '\0';
        int is_msg = !strncmp(line, "meshmoe: ", 9);
        if (is_msg || (!found && line[0])) snprintf(out, cap, "%s", is_msg ? line + 9 : line);
        found |= is_msg;
    }
    free(line);
    fclose(f);
}

void sweep_run(const char *exe, int argc, char **argv, const char *log, const char *metrics, RunResult *r) {
    int ndev = r->ndev, batch = r->batch;
    memset(r, 0, sizeof *r);
    r->ndev = ndev;
    r->batch = batch;
    unlink(metrics);
    fflush(stdout);
    fflush(stderr);
    // The signals stay blocked from before the fork until the parent knows the child's pid, so
    // that a signal in between is not lost: the child gets the default actions back before it
    // runs, and the parent's handler, run once they are unblocked, finds the pid to stop.
    sigset_t old;
    block_stop_signals(1, &old);
    pid_t pid = fork();
    if (pid < 0) { block_stop_signals(0, &old); die("sweep: cannot start a run: %s", strerror(errno)); }
    if (pid == 0) {
        for (size_t i = 0; i < NSTOP; i++) signal(STOP_SIGNALS[i], SIG_DFL);
        block_stop_signals(0, &old);
        if (atomic_load(&stop_sig)) _exit(128 + atomic_load(&stop_sig));   // stopped before the fork
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) { dup2(fd, 1); dup2(fd, 2); close(fd); }
        (void)argc;
        execv(exe, argv);
        fprintf(stderr, "meshmoe: sweep: cannot run %s: %s\n", exe, strerror(errno));
        _exit(127);
    }
    atomic_store(&child_pid, pid);
    block_stop_signals(0, &old);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    atomic_store(&child_pid, 0);
    if (atomic_load(&stop_sig)) return;   // stopped: the caller removes the files and exits
    FILE *f = fopen(metrics, "r");
    if (f) {
        char *line = NULL;
        size_t n = 0;
        while (getline(&line, &n, f) >= 0)
            if (line[0] == '{') read_line(line, r);
        free(line);
        fclose(f);
    }
    for (int d = 0; d < r->ndev_seen; d++)
        r->peak_min_dev = d ? MM_MIN(r->peak_min_dev, r->dev_peak[d]) : r->dev_peak[d];
    read_printed_peaks(log, r);
    int exited_ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    if (exited_ok) { r->status = RUN_OK; return; }
    last_message(log, r->message, sizeof r->message);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 1 && r->nsteps == 0) r->status = RUN_REFUSED;
    else {
        r->status = RUN_FAILED;
        if (WIFSIGNALED(st)) {
            size_t l = strlen(r->message);
            snprintf(r->message + l, sizeof r->message - l, " (killed by signal %d)", WTERMSIG(st));
        }
    }
}

size_t run_comm_per_step(const RunResult *r) {
    return r->nsteps > 1 ? (r->comm_last - r->comm_first) / (size_t)(r->nsteps - 1) : 0;
}

double run_min_ms(const RunResult *r) {
    double m = r->nsteps ? r->ms[0] : 0;
    for (int s = 1; s < r->nsteps; s++) m = MM_MIN(m, r->ms[s]);
    return m;
}

size_t run_tag_peak(const RunResult *r, const char *tag) {
    for (int i = 0; i < r->ntags; i++)
        if (!strcmp(r->tag[i], tag)) return r->tag_peak[i];
    return 0;
}
