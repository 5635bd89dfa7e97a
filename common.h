// common.h: the few helpers every file of meshmoe uses.
// Errors: a single clear message on stderr and a non-zero exit, before anything is half-written.
#ifndef MESHMOE_COMMON_H
#define MESHMOE_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

// die: print "meshmoe: <message>" and exit(1). Use it for every user-facing error:
// bad config, bad data file, impossible shapes. The message says what was wrong and
// what to do about it.
void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

// die_cleanup: a hook called by die() before exiting, so that a half-written file
// (a checkpoint being saved, a dump) is removed. At most one is registered at a time.
void die_set_cleanup(void (*fn)(void *), void *arg);

#define MM_MIN(a, b) ((a) < (b) ? (a) : (b))
#define MM_MAX(a, b) ((a) > (b) ? (a) : (b))

#endif
