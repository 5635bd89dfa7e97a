// tests/fuzz/fuzz_safetensors.c: the safetensors reader (the 8-byte length, the JSON header,
// every tensor's offsets against the data section) and, when the file has one, the config
// JSON of its metadata. Every tensor the reader accepts must lie inside the input and hold
// exactly its shape's elements of its dtype.
#include "fuzz.h"
#include "data/safetensors.h"
#include "base/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    jmp_buf jump;
    char err[512];
    StFile *f = st_open_try(fuzz_file(data, size), err, sizeof err);
    if (!f) return 0;
    for (int i = 0; i < st_count(f); i++) {
        const StTensor *t = st_tensor(f, i);
        if (t->nbytes > size) abort();
        size_t elems = 1;   // (within nbytes <= size: no overflow once the reader accepted it)
        for (int d = 0; d < t->ndim; d++) elems *= (size_t)t->shape[d];
        if (t->ndim < 0 || t->ndim > 8 || elems * st_dtype_size(t->dtype) != t->nbytes) {
            fprintf(stderr, "tensor '%s' accepted with %zu bytes for %zu elements of %s\n", t->name, t->nbytes, elems,
                    st_dtype_name(t->dtype));
            abort();
        }
        volatile unsigned char sum = 0;   // touch every byte: ASan reports one outside the buffer
        for (size_t k = 0; k < t->nbytes; k++) sum += ((const unsigned char *)t->data)[k];
        (void)sum;
        if (st_get(f, t->name) == NULL) abort();
    }
    const char *json = st_meta(f, "config");
    if (json && !setjmp(jump)) {
        die_set_jump(&jump, 1);
        Config c;
        config_defaults(&c);
        config_from_json(&c, json, "fuzz.safetensors");
    }
    die_set_jump(NULL, 0);
    st_close(f);
    return 0;
}
