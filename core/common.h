// core/common.h: the few helpers every file of meshmoe uses.
// Errors: a single clear message on stderr and a non-zero exit, before anything is half-written.
#ifndef MESHMOE_COMMON_H
#define MESHMOE_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <setjmp.h>

// die: print "meshmoe: <message>" and exit(1). Use it for every user-facing error:
// bad config, bad data file, impossible shapes. The message says what was wrong and
// what to do about it.
void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

// die_claim: the calling thread becomes the one that reports the fault. Devices are threads,
// and several can find the same fault at once (a shape every device checks, a capacity every
// device exceeds): the first to claim reports it, every later one waits for the exit. A
// caller that prints details before its die() claims first, so that no other device's lines
// land between them. die() claims for itself when its thread has not.
void die_claim(void);

// die_cleanup: a hook called by die() before exiting, so that a half-written file
// (a checkpoint being saved, a dump) is removed. At most one is registered at a time.
void die_set_cleanup(void (*fn)(void *), void *arg);

// While a jump buffer is set, die() runs the clean-up hook and longjmps there instead of
// exiting (printing the message unless quiet): the fuzz harnesses (tests/fuzz/) feed a
// parser many inputs that it refuses in one process, and ./train_mpi checks its config on
// every process before they agree who reports (train.c).
void die_set_jump(jmp_buf *jump, int quiet);
// The line of the last die() ("meshmoe: ..."), printed or not: a run over several processes
// checks its config under a jump, quietly, and the first process that failed prints it.
const char *die_last_message(void);

// die_set_note: every later message that contains one of `words` (a NULL-terminated list)
// ends with `note`; a NULL note, none. A run over several processes (base/hybrid.c) notes that
// the ici_* values and num_devices it names are the whole mesh's, not the ones given.
void die_set_note(const char *const *words, const char *note);
// A run over several processes (base/net.h): die() names the process in its message
// ("meshmoe: process 1: ...") and ends with end(1) instead of exit(1), which stops every
// process of the job, so that no peer waits forever for one that is gone.
void die_set_process(int process, void (*end)(int code));

// How OpenMP's idle threads wait in this process, in words (core/omp_wait.c): the spin count
// it chose from the machine's wake-up, or the environment's choice.
const char *omp_wait_describe(char *buf, size_t n);

// open_input, fopen_input: path opened for reading without waiting. open() of a FIFO waits
// for a writer, forever where there is none; opened non-blocking and then set back to
// blocking reads, the caller's fstat sees the FIFO and refuses it by name, as it does a
// directory or a device. -1 (NULL) with errno set when the path cannot be opened.
int open_input(const char *path);
FILE *fopen_input(const char *path);
// fopen_regular: fopen_input of a path that must be a regular file, else die() with the
// caller's prefix ("load_hf", "plot") and the path.
FILE *fopen_regular(const char *path, const char *prefix);

#define MM_MIN(a, b) ((a) < (b) ? (a) : (b))
#define MM_MAX(a, b) ((a) > (b) ? (a) : (b))

#endif
