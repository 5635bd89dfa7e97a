// tests/fuzz/fuzz.h: what the libFuzzer harnesses share. Each harness feeds one parser of
// meshmoe the fuzzer's bytes; a refused input ends in die(), which here jumps back to the
// harness instead of exiting (core/common.h: die_set_jump), so that only a crash, a sanitizer
// report or a broken property stops the fuzzer.
#ifndef MESHMOE_FUZZ_H
#define MESHMOE_FUZZ_H

#include "core/common.h"
#include <sys/mman.h>
#include <unistd.h>

// A file whose contents are the fuzzer's input, for the readers that take a path: a
// memory-backed file (memfd), reached as /proc/self/fd/N.
static const char *fuzz_file(const uint8_t *data, size_t size) {
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        fd = memfd_create("meshmoe-fuzz", 0);
        if (fd < 0) { perror("memfd_create"); abort(); }
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) != 0 || (size && pwrite(fd, data, size, 0) != (ssize_t)size)) { perror("memfd"); abort(); }
    return path;
}

// A NUL-terminated copy of the input (malloc'd), for the parsers that take a string.
static char *fuzz_string(const uint8_t *data, size_t size) {
    char *s = malloc(size + 1);
    if (!s) abort();
    memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

#endif
