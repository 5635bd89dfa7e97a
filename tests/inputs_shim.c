// tests/inputs_shim.c: an LD_PRELOAD library for tests/inputs.sh that makes the moment of a
// save reproducible. Every save calls fsync once its bytes are written, before the rename
// (base/paths.c); here fsync first does what MESHMOE_SHIM says: "term" raises SIGTERM (a
// signal in the middle of a save), "kill" raises SIGKILL (the process killed there, with no
// chance to clean up), "sleep" waits one second (two saves overlapping).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int fsync(int fd) {
    const char *what = getenv("MESHMOE_SHIM");
    if (what && !strcmp(what, "term")) raise(SIGTERM);
    if (what && !strcmp(what, "kill")) raise(SIGKILL);
    if (what && !strcmp(what, "sleep")) sleep(1);
    int (*real)(int) = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    return real(fd);
}
