// base/paths.h: the files a run reads and writes, checked before training starts, and
// written so that an interruption loses nothing.
//
// Checks (each dies with one message naming the config key and the path):
//   check_input_file    the path exists, is not a directory, and can be read;
//   check_output_path   a file will be written here: the target is absent or a regular file
//                       (never a directory, device, pipe or socket), its directory exists,
//                       and a probe file can be created and removed in that directory;
//   check_output_dir    a directory will be written into: it exists, or its parent can
//                       hold it, and a probe file can be created where the files will go.
//
// Saves: atomic_file_open gives a stream onto a fresh temporary file in the target's own
// directory (mkstemp: two writers never share it), and atomic_file_commit flushes it, fsyncs
// it, renames it over the target and fsyncs the directory. Until the rename the target is
// untouched; any error dies naming the path and the reason, and removes the temporary.
// One file is written at a time. Files saved together (an export's config and weights) are
// each written out by atomic_file_hold, which keeps them under their temporary names, and
// renamed by atomic_files_commit once all are written: a failure while any of them is being
// written leaves every target as it was. A file that grows after its first complete part
// (the metrics file, a line a step) is opened by atomic_stream_open, beside any saves, and
// renamed by atomic_stream_publish once that part is written; its stream stays open, the
// caller's to write on and to fclose. A directory made for a set of files (export-hf's
// OUT_DIR) is made by output_dir_make, which removes it again if the command dies before
// atomic_files_commit has put the files in it, or is stopped by a signal.
//
// Signals (signals_install): SIGINT, SIGTERM or SIGHUP during a save removes the temporary files
// and exits with a message (status 128 + the signal); one that comes while the files saved
// together are renamed into place waits for the last rename, then acts as below. During training (signals_allow_stop) the
// first one asks the loop to stop after the current step (train.c saves the checkpoint if
// save_checkpoint is set, then exits 128 + the signal); a second one exits at once. At any
// other time the signal exits at once with a message. SIGXFSZ is ignored, so a write past
// `ulimit -f` fails with EFBIG and is reported like a full disk.
#ifndef MESHMOE_PATHS_H
#define MESHMOE_PATHS_H

#include <stdint.h>
#include <stdio.h>

// DIR/NAME into out (cap bytes, as snprintf, whose count it returns), with one '/' between
// them where DIR ends in one already ("hf/" and "hf" give "hf/config.json").
int path_join(char *out, size_t cap, const char *dir, const char *name);

// The FNV-1a hash of the file at path and its size, for hosts to compare their copies; 0 where
// it cannot be read (errno says why), else 1.
int file_hash(const char *path, uint64_t *hash, size_t *size);

void check_input_file(const char *key, const char *path);
void check_output_path(const char *key, const char *path);
void check_output_dir(const char *key, const char *path);

FILE *atomic_file_open(const char *path);
void atomic_file_commit(FILE *f);
void atomic_file_hold(FILE *f);
void atomic_files_commit(void);
void output_dir_make(const char *key, const char *dir);
FILE *atomic_stream_open(const char *path);
void atomic_stream_publish(FILE *f);

void signals_install(void);
void signals_allow_stop(int on);
// Words said after "meshmoe: interrupted by SIG..." (a static string): where the signal may
// come from (mpirun's, net_mpi.c).
void signals_note(const char *note);
int signals_stop_requested(void);   // the signal that asked the loop to stop, 0 if none
const char *signal_name(int sig);

#endif
