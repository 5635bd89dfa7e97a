// base/runfiles.h: every path one command reads and writes, checked against the others
// before any work, so that no run destroys its own inputs or outputs.
//
// A command lists its files (runfiles_input, runfiles_output, runfiles_output_dir with the
// names it writes there), then runfiles_check dies, naming both keys and the path, on
//   - an output that is the same file as an input or as another output;
//   - an output that lies inside a directory another output writes into.
// Paths are compared by file identity, not spelling: a file that exists is identified by
// its device and inode (so a hard link is the same file), and every path by its resolved
// form (realpath of the path, or of its nearest existing directory followed by the rest),
// so `x`, `./x`, `d/../x` and a symbolic link to x are all the same file.
//
// One pair may be allowed to name the same file (runfiles_allow_same): the trainer resumes
// from load_checkpoint and saves in place, which is safe because the save is written
// beside the file and renamed over it only once complete (base/paths.h).
#ifndef MESHMOE_RUNFILES_H
#define MESHMOE_RUNFILES_H

typedef struct RunFile RunFile;

typedef struct {
    RunFile *f;
    int n, cap;
    const char *same_a, *same_b;   // the keys of the pair that may name one file
} RunFiles;

void runfiles_init(RunFiles *r);
void runfiles_free(RunFiles *r);
// key: the config key or argument that names the path (it appears in the messages).
void runfiles_input(RunFiles *r, const char *key, const char *path);
void runfiles_output(RunFiles *r, const char *key, const char *path);
// A directory the command writes into, and the names of the files it writes there (n of them).
void runfiles_output_dir(RunFiles *r, const char *key, const char *dir, const char *const *names, int n);
// Files read inside directory dir (load_hf: the files of a Hugging Face export).
void runfiles_inputs_in(RunFiles *r, const char *key, const char *dir, const char *const *names, int n);
void runfiles_allow_same(RunFiles *r, const char *key_a, const char *key_b);
void runfiles_check(const RunFiles *r);

#endif
