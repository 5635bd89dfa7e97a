// sweep/progress.h: progress of a long command on stderr (stdout keeps its table): each
// item as it starts and as it finishes, with the time it took, the time so far, and the
// time left estimated from the child runs still to do.
//     [3/12] shard_optimizer_over_data ...
//     [3/12] shard_optimizer_over_data done in 3.1 s, elapsed 1m02s, about 2m10s left
#ifndef MESHMOE_SWEEP_PROGRESS_H
#define MESHMOE_SWEEP_PROGRESS_H

typedef struct {
    double t0, item_t0;   // seconds (monotonic clock): the start, the current item's start
    int k, n;             // the current item (1-based) of n
    int runs_total;       // child runs planned: the estimate of the time left counts them
} Progress;

// Now, in seconds on the monotonic clock.
double progress_now(void);
void progress_start(Progress *p, int nitems, int runs_total);
void progress_item_begin(Progress *p, const char *what);
// runs_done: child runs finished so far (all items).
void progress_item_end(Progress *p, const char *what, int runs_done);
// "42s", "3m05s", "1h02m".
void progress_duration(double seconds, char *buf, int cap);

#endif
