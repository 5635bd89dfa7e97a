// sweep/run.h: one training run of the sweep, as a child process of this same binary
// (/proc/self/exe) with metrics_file=, and what its metrics lines say.
#ifndef MESHMOE_SWEEP_RUN_H
#define MESHMOE_SWEEP_RUN_H
#include <stddef.h>

#define SW_MAXSTEPS 64
#define SW_MAXTAGS 16
#define SW_MAXARGS 96
#define SW_MAXDEV 256

typedef enum {
    RUN_OK,        // every step's metrics line written
    RUN_REFUSED,   // exited with a meshmoe: message before its first step (the config refused)
    RUN_FAILED,    // crashed, or stopped after training began
} RunStatus;

typedef struct {
    RunStatus status;
    char message[400];            // the child's last "meshmoe:" line when it did not finish
    int ndev, batch;              // devices, sequences per optimizer step
    int nsteps;
    float loss[SW_MAXSTEPS], grad_norm[SW_MAXSTEPS];
    double ms[SW_MAXSTEPS];
    size_t peak;                  // highest device peak over the steps and devices
    size_t peak_min_dev;          // the lowest device's peak (devices differ: pipeline, experts)
    int ndev_seen;
    size_t dev_peak[SW_MAXDEV];   // each device's highest peak over the steps
    int ntags;                    // tags seen in "peak_bytes_by_tag", in order
    char tag[SW_MAXTAGS][32];
    size_t tag_peak[SW_MAXTAGS];  // highest per-device peak of each tag over steps and devices
    size_t host_peak;             // host memory (offload), highest device; 0 when the build has none
    size_t host_copied;           // bytes copied between host and device in a step, all devices, highest step
    size_t init_peak, eval_peak;  // "init peak N bytes" / "eval peak N bytes" lines of the output, if any
    size_t comm_first, comm_last; // bytes sent, all devices, all kinds: after step 0 and the last step
} RunResult;

// Run `exe argv...` (argv NULL-terminated after argc entries) with its output in `log`,
// and read `metrics`. The caller puts metrics_file=metrics among the arguments.
void sweep_run(const char *exe, int argc, char **argv, const char *log, const char *metrics, RunResult *r);

// SIGINT, SIGTERM and SIGHUP handled by the sweep: the run in flight is sent SIGTERM (again
// on every further signal) and sweep_run returns once it has exited, its result unread.
void sweep_signals_install(void);
// The first of those signals received, 0 if none.
int sweep_stop_signal(void);

// Bytes sent per step by all devices (steps after the first), or 0 with one step.
size_t run_comm_per_step(const RunResult *r);
// Lowest step time over the steps (the least disturbed by other work on the machine).
double run_min_ms(const RunResult *r);
// Peak of a tag (0 if the run did not report it).
size_t run_tag_peak(const RunResult *r, const char *tag);

#endif
