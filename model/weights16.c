// model/weights16.c: which float32 tensor a 16-bit copy belongs to (model/weights16.h).
#include "model/weights16.h"
#include "base/memory.h"     // mem_alloc_uninit
#include "kernels/kernels.h" // kern()->cast->unpack_bf16
#include "core/common.h"     // die

static Bf16Storage mode = BF16_STORAGE_OFF;
void weights16_use(Bf16Storage m) { mode = m; }
int weights16_on(void) { return mode != BF16_STORAGE_OFF; }
Bf16Storage weights16_mode(void) { return mode; }

// A unit has at most a dozen tensors (a MoE layer with shared experts and MLA: 14), and
// model_unit_acquire records one unit at a time: a short list, searched in order.
enum { RECORDS = 64 };
typedef struct { const float *w; size_t n; const uint16_t *h; } Record;
static _Thread_local Record records[RECORDS];
static _Thread_local int nrecords;

void weights16_add(const float *w, size_t n, const uint16_t *h) {
    if (nrecords == RECORDS) die("internal: more than %d tensors with a 16-bit copy at once", RECORDS);
    records[nrecords++] = (Record){w, n, h};
}

void weights16_drop(const uint16_t *copy, size_t n) {
    uintptr_t lo = (uintptr_t)copy, hi = lo + sizeof(uint16_t) * n;
    int kept = 0;
    for (int i = 0; i < nrecords; i++)
        if ((uintptr_t)records[i].h < lo || (uintptr_t)records[i].h >= hi) records[kept++] = records[i];
    nrecords = kept;
}

// (Addresses compared as integers: the pointers may belong to different buffers.) A range
// that straddles a recorded tensor's edge would be read half rounded and half not: no
// reader asks for one, and one that did is stopped here.
const uint16_t *weights16_find(const float *w, size_t n) {
    if (!w) return NULL;
    uintptr_t a = (uintptr_t)w, b = a + sizeof(float) * n;
    for (int i = 0; i < nrecords; i++) {
        const Record *r = &records[i];
        uintptr_t lo = (uintptr_t)r->w, hi = lo + sizeof(float) * r->n;
        if (a >= lo && b <= hi) return r->h + (a - lo) / sizeof(float);
        if (a < hi && b > lo) die("internal: %zu weights read across the edge of a tensor with a 16-bit copy", n);
    }
    return NULL;
}

float *weights16_widened(const float *w, size_t n, const char *name) {
    const uint16_t *h = weights16_find(w, n);
    if (!h) return NULL;
    float *x = mem_alloc_uninit(MEM_TEMP, sizeof(float) * (n ? n : 1), name);
    kern()->cast->unpack_bf16(x, h, n);
    return x;
}
