// tests/test_memory.c: the tagged allocator's host-side records and its use of the
// backend's memory operations (base/memory.c, kernels/kernels.h MemoryOps).
//   1. thousands of buffers made and freed in a shuffled order: every one 64-byte aligned,
//      its size and name found from its address, the live bytes the sum of the survivors;
//   2. a backend whose memory operations count their calls: device buffers come from its
//      alloc and zero and go back through its free; mem_zero, mem_copy and mem_transfer go
//      through its zero, copy, to_host and to_device, the offload moves (mem_to_host,
//      mem_to_device) through its to_host_async and to_device_async, or through to_host and
//      to_device when it has none; host (offload) buffers come from its alloc_host and go
//      back through its free_host;
//   3. the zeroed gradients' record (base/fresh.h): a block is fresh once, inside the armed
//      region only, not where a claim or a leaf tree's touch overlaps it, and never once
//      disarmed or re-armed elsewhere;
//   4. the weights' 16-bit copies (model/weights16.h): a range inside a recorded tensor
//      finds its place in the copy, one outside none, one across a tensor's edge stops the
//      run; the widened floats are the copy's values; a dropped copy is found no more.
#include "base/memory.h"
#include "base/fresh.h"
#include "model/weights16.h"
#include "kernels/bf16.h"
#include "core/common.h"
#include "kernels/kernels.h"
#include "tests/test.h"
#include <stdint.h>
#include <stdlib.h>

enum { N = 3000 };

static void records_under_load(void) {
    static void *buf[N];
    static char names[N][16];
    static int order[N];
    Device *d = mem_device();
    size_t live = 0;
    int aligned = 1, found = 1;
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "buf %d", i);
        buf[i] = mem_alloc((MemTag)(i % MEM_NTAGS), (size_t)(i % 7) * 100, names[i]);   // sizes 0..600
        aligned &= ((uintptr_t)buf[i] % 64) == 0;
        live += (size_t)(i % 7) * 100;
    }
    CHECK(aligned, "every buffer 64-byte aligned");
    CHECK(d->live_total == live, "live bytes %zu, the buffers' sum %zu", d->live_total, live);
    for (int i = 0; i < N; i++) order[i] = i;
    srand(7);
    for (int i = N - 1; i > 0; i--) { int j = rand() % (i + 1), t = order[i]; order[i] = order[j]; order[j] = t; }
    for (int k = 0; k < N / 2; k++) {   // free half, shuffled
        int i = order[k];
        live -= mem_size(buf[i]);
        mem_free(buf[i]);
        buf[i] = NULL;
    }
    for (int i = 0; i < N; i++)
        if (buf[i]) found &= mem_size(buf[i]) == (size_t)(i % 7) * 100 && mem_name(buf[i]) == names[i];
    CHECK(found, "after %d shuffled frees every survivor's size and name found from its address", N / 2);
    CHECK(d->live_total == live, "live bytes %zu after the frees, the survivors' sum %zu", d->live_total, live);
    for (int i = 0; i < N; i++) mem_free(buf[i]);
    CHECK(d->live_total == 0 && d->head == NULL, "all freed: %zu bytes live", d->live_total);
}

// A CPU backend whose memory operations count their calls and bytes.
static long n_alloc, n_free, n_alloc_host, n_free_host, n_zero, n_fill, n_copy, n_to_host, n_to_device;
static long n_to_host_async, n_to_device_async;
static size_t freed_bytes, to_host_bytes, to_device_bytes;
static void *c_alloc(size_t b) { n_alloc++; return memory_cpu.alloc(b); }
static void c_free(void *p, size_t b) { n_free++; freed_bytes += b; memory_cpu.free(p, b); }
static void *c_alloc_host(size_t b) { n_alloc_host++; return memory_cpu.alloc_host(b); }
static void c_free_host(void *p, size_t b) { n_free_host++; memory_cpu.free_host(p, b); }
static void c_zero(void *p, size_t b) { n_zero++; memory_cpu.zero(p, b); }
static void c_fill(void *p, int v, size_t b) { n_fill++; memory_cpu.fill(p, v, b); }
static void c_copy(void *d, const void *s, size_t b) { n_copy++; memory_cpu.copy(d, s, b); }
static void c_to_host(void *d, const void *s, size_t b) { n_to_host++; to_host_bytes += b; memory_cpu.to_host(d, s, b); }
static void c_to_device(void *d, const void *s, size_t b) { n_to_device++; to_device_bytes += b; memory_cpu.to_device(d, s, b); }
static void c_to_host_async(void *d, const void *s, size_t b) { n_to_host_async++; c_to_host(d, s, b); n_to_host--; }
static void c_to_device_async(void *d, const void *s, size_t b) { n_to_device_async++; c_to_device(d, s, b); n_to_device--; }
static const MemoryOps counting = {c_alloc, c_free, c_alloc_host, c_free_host, c_zero, c_fill, c_copy, c_to_host,
                                   c_to_device, c_to_host_async, c_to_device_async};
static const MemoryOps counting_sync = {c_alloc, c_free, c_alloc_host, c_free_host, c_zero, c_fill, c_copy, c_to_host,
                                        c_to_device, NULL, NULL};

static void backend_memory(void) {
    Backend b = backend_cpu;
    b.mem = &counting;
    kern_use(&b);
    Device *d = mem_device();
    float *x = mem_floats(MEM_PARAMS, 100, "x"), *y = mem_floats_uninit(MEM_TEMP, 100, "y");
    CHECK(n_alloc == 2 && n_zero == 1, "two device buffers: alloc called %ld times, zero %ld", n_alloc, n_zero);
    for (int i = 0; i < 100; i++) x[i] = (float)i;
    mem_copy(y, x, sizeof(float) * 100);
    CHECK(n_copy == 1 && y[99] == 99.0f, "mem_copy: the backend's copy (%ld calls), y[99] %g", n_copy, y[99]);
    mem_zero(x, sizeof(float) * 100);
    CHECK(n_zero == 2 && x[5] == 0.0f, "mem_zero: the backend's zero (%ld calls)", n_zero);
    float *h = mem_alloc_host(MEM_OPTIMIZER, sizeof(float) * 100, "h");
    CHECK(n_alloc == 2 && n_alloc_host == 1, "a host buffer from alloc_host (%ld calls), not alloc (%ld calls)",
          n_alloc_host, n_alloc);
    y = mem_to_host(y);
    CHECK(mem_is_host(y) && n_to_host_async == 1 && n_to_host == 0 && to_host_bytes == 400 && n_free == 1 &&
          freed_bytes == 448, "mem_to_host: to_host_async %ld calls (to_host %ld), %zu bytes; the device buffer freed "
          "(%ld calls, %zu bytes: 7 lines)", n_to_host_async, n_to_host, to_host_bytes, n_free, freed_bytes);
    CHECK(d->to_host_bytes == 400, "counted: %zu bytes to host", d->to_host_bytes);
    y = mem_to_device(y);
    CHECK(!mem_is_host(y) && n_to_device_async == 1 && n_to_device == 0 && to_device_bytes == 400 && n_alloc == 3 &&
          y[99] == 99.0f, "mem_to_device: to_device_async %ld calls (to_device %ld), %zu bytes, a new device buffer, "
          "y[99] %g", n_to_device_async, n_to_device, to_device_bytes, y[99]);
    mem_transfer(h, y, sizeof(float) * 100);
    CHECK(n_to_host == 1 && n_to_host_async == 1 && h[42] == 42.0f,
          "mem_transfer device -> host: to_host (%ld calls, async %ld), h[42] %g", n_to_host, n_to_host_async, h[42]);
    b.mem = &counting_sync;   // a backend without offload copies of its own: the moves use to_host, to_device
    float *z = mem_floats_uninit(MEM_TEMP, 100, "z");
    mem_copy(z, y, sizeof(float) * 100);
    z = mem_to_device(mem_to_host(z));
    CHECK(n_to_host == 2 && n_to_device == 1 && n_to_host_async == 1 && n_to_device_async == 1 && z[7] == 7.0f,
          "no async copies: mem_to_host and mem_to_device by to_host (%ld calls) and to_device (%ld), z[7] %g",
          n_to_host, n_to_device, z[7]);
    mem_free(z);
    b.mem = &counting;
    mem_free(h);
    CHECK(n_free == 3 && n_free_host == 3, "host buffers back through free_host (%ld calls: h and y's copies), not free (%ld)",
          n_free_host, n_free);
    mem_free(x);
    mem_free(y);
    CHECK(n_free == 5 && d->live_total == 0, "device buffers back through the backend's free: %ld calls", n_free);
    kern_use(NULL);
}

static void fresh_blocks(void) {
    float *g = mem_floats(MEM_GRADS, 1000, "gradients");   // zeroed
    CHECK(!fresh_claim(g, 10), "not fresh before fresh_arm");
    fresh_arm(g, 1000);
    CHECK(fresh_claim(g + 100, 50), "[100,150) fresh once armed");
    CHECK(!fresh_claim(g + 100, 50), "[100,150) not fresh a second time");
    CHECK(!fresh_claim(g + 140, 20), "[140,160) overlaps [100,150): not fresh");
    CHECK(!fresh_claim(g + 155, 10), "[155,165) overlaps the widened claim [100,160): not fresh");
    CHECK(fresh_claim(g + 165, 5), "[165,170) touches no claim: fresh");
    CHECK(fresh_claim(g + 0, 100), "[0,100), just below a claim: fresh");
    CHECK(!fresh_claim(g + 990, 20), "[990,1010) reaches past the armed region: not fresh");
    CHECK(fresh_claim(g + 990, 10), "[990,1000) inside it: fresh");
    fresh_touch(g + 300, 100);
    CHECK(!fresh_claim(g + 350, 10), "[350,360) inside a touched block: not fresh");
    CHECK(fresh_claim(g + 400, 10), "[400,410) just past it: fresh");
    fresh_touch(g + 500, 10);
    fresh_touch(g + 520, 10);
    CHECK(!fresh_claim(g + 505, 20), "[505,525) over two touched blocks: not fresh");
    CHECK(fresh_claim(g + 530, 1), "[530,531) after the merged block: fresh");
    CHECK(!fresh_claim(g + 510, 10), "[510,520), now inside the merged [500,530): not fresh");
    fresh_arm(g, 1000);
    CHECK(fresh_claim(g + 100, 50), "re-armed: [100,150) fresh again");
    fresh_disarm();
    CHECK(!fresh_claim(g + 600, 10), "disarmed: nothing fresh");
    float other[16];
    fresh_arm(g, 500);
    CHECK(!fresh_claim(other, 16), "a block outside the armed region: not fresh");
    CHECK(!fresh_claim(g + 500, 10), "[500,510) past the armed 500 floats: not fresh");
    fresh_disarm();
    mem_free(g);
}

static void weights16_records(void) {
    float w[160], other[8];   // two tensors side by side: a (100 floats) and b (60)
    uint16_t h[160];
    for (int i = 0; i < 160; i++) {
        w[i] = 1.001f + i / 3.0f;   // none a bf16 value: the copy rounds each
        h[i] = bf16_bits(w[i]);
    }
    weights16_add(w, 100, h);
    weights16_add(w + 100, 60, h + 100);
    CHECK(weights16_find(w, 100) == h, "a whole tensor: its copy");
    CHECK(weights16_find(w + 10, 20) == h + 10, "rows 10..29 of a: the copy at 10");
    CHECK(weights16_find(w + 100, 60) == h + 100 && weights16_find(w + 159, 1) == h + 159, "b, and b's last value");
    CHECK(weights16_find(other, 8) == NULL && weights16_find(NULL, 4) == NULL, "outside every tensor, or NULL: none");
    jmp_buf jump;
    const uint16_t *across = NULL;
    int stopped = 0;
    die_set_jump(&jump, 1);
    if (setjmp(jump) == 0) across = weights16_find(w + 90, 20);   // a's last 10 and b's first 10
    else stopped = 1;
    die_set_jump(NULL, 0);
    CHECK(stopped && !across, "a range across a's edge into b: stopped (%s)", stopped ? die_last_message() : "not stopped");
    float *x = weights16_widened(w + 40, 8, "test: widened");
    int same = x != NULL;
    for (int i = 0; x && i < 8; i++) same &= x[i] == bf16_float(h[40 + i]) && x[i] != w[40 + i];
    CHECK(same, "widened: the copy's rounded values, not the float32 ones");
    mem_free(x);
    CHECK(weights16_widened(other, 8, "test: none") == NULL, "widened without a copy: NULL (read the floats)");
    weights16_drop(h, 100);
    CHECK(weights16_find(w + 10, 20) == NULL && weights16_find(w + 100, 60) == h + 100, "a's copy dropped, b's kept");
    weights16_drop(h + 100, 60);
    CHECK(weights16_find(w + 100, 60) == NULL, "b's dropped too");
}

int main(void) {
    Device dev;
    device_init(&dev, 0, 0);
    mem_set_device(&dev);
    records_under_load();
    backend_memory();
    fresh_blocks();
    weights16_records();
    device_release_all(&dev);
    TEST_SUMMARY();
}
