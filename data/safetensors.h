// data/safetensors.h: the safetensors file format, written and read without any library.
//
// A file is: 8 bytes (little-endian u64) N, then N bytes of JSON (padded with spaces to a
// multiple of 8), then the raw tensor bytes. The JSON maps each tensor name to
//   {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}
// (offsets relative to the end of the header), plus an optional "__metadata__" object of
// string -> string. Python's `safetensors` package reads what we write, and we read what
// it writes.
#ifndef MESHMOE_SAFETENSORS_H
#define MESHMOE_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

typedef enum { ST_F32, ST_I32, ST_BF16, ST_F16, ST_I64, ST_F64, ST_U8, ST_I8, ST_U16, ST_I16, ST_F8_E4M3, ST_NDTYPES } StDtype;

// Bytes per element and the format's dtype name ("F32", ...).
size_t st_dtype_size(StDtype d);
const char *st_dtype_name(StDtype d);

// ---- writing ----
typedef struct StWriter StWriter;
StWriter *st_writer_new(void);
// Adds a metadata entry; key and value are copied.
void st_writer_meta(StWriter *w, const char *key, const char *value);
// Adds a tensor. ndim 0 is a scalar (shape may be NULL). The name is copied; the data is
// NOT copied and must stay valid until st_write_file returns.
void st_writer_add(StWriter *w, const char *name, StDtype dtype, int ndim, const int64_t *shape,
                   const void *data);
// Writes PATH atomically (base/paths.h: a unique temporary beside it, fsync, rename). On any
// error or signal it stops with a message and leaves neither a temporary nor a partial PATH.
void st_write_file(StWriter *w, const char *path);
// The same, held under its temporary name until atomic_files_commit (base/paths.h) renames
// it with the other files of its set.
void st_write_file_held(StWriter *w, const char *path);
void st_writer_free(StWriter *w);

// ---- reading ----
typedef struct {
    char *name;
    StDtype dtype;
    int ndim;
    int64_t shape[8];
    const void *data;   // points into the file's buffer
    size_t nbytes;
} StTensor;

typedef struct StFile StFile;
// Opens and validates a file. On failure returns NULL and writes the reason (naming the
// path) into err.
StFile *st_open_try(const char *path, char *err, size_t cap);
const StTensor *st_get(const StFile *f, const char *name);   // NULL when absent
const StTensor *st_tensor(const StFile *f, int i);           // i-th tensor, in file order
int st_count(const StFile *f);
const char *st_meta(const StFile *f, const char *key);      // NULL when absent
void st_close(StFile *f);

// ---- reading piece by piece (each device of a mesh reads only its slices) ----
// Opens a file and validates its header (every tensor inside the file) without reading the
// tensor bytes: the tensors' `data` is NULL. st_get, st_tensor, st_count, st_meta and
// st_close work as above. NULL and a reason in err on failure.
StFile *st_open_header_try(const char *path, char *err, size_t cap);
// Reads bytes [byte_off, byte_off + nbytes) of tensor t (of f) into dst. Dies naming the
// tensor and the file if the read fails. Safe to call from several threads at once.
void st_read_at(const StFile *f, const StTensor *t, size_t byte_off, void *dst, size_t nbytes);

#endif
