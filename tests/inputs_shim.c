// tests/inputs_shim.c: an LD_PRELOAD library for tests/inputs.sh that makes the moment of a
// save reproducible. Every save calls fsync once its bytes are written, before the rename
// (base/paths.c); here fsync first does what MESHMOE_SHIM says: "term" raises SIGTERM (a
// signal in the middle of a save), "kill" raises SIGKILL (the process killed there, with no
// chance to clean up), "sleep" waits one second (two saves overlapping). "term_rename" raises
// SIGTERM right after the first rename of the run (files saved together, put in place one
// after another, interrupted between two of them).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int rename(const char *from, const char *to) {
    static int renamed;
    int (*real)(const char *, const char *) = (int (*)(const char *, const char *))dlsym(RTLD_NEXT, "rename");
    int rc = real(from, to);
    const char *what = getenv("MESHMOE_SHIM");
    if (what && !strcmp(what, "term_rename") && !renamed++) raise(SIGTERM);
    return rc;
}

int fsync(int fd) {
    const char *what = getenv("MESHMOE_SHIM");
    if (what && !strcmp(what, "term")) raise(SIGTERM);
    if (what && !strcmp(what, "kill")) raise(SIGKILL);
    if (what && !strcmp(what, "sleep")) sleep(1);
    int (*real)(int) = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    return real(fd);
}
