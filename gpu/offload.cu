// gpu/offload.cu: the copies of host offload (the *_offloaded remat policies, parameter and
// optimizer offload: base/memory.c moves a buffer to host memory and back), made
// asynchronous. Each host thread (a mesh device) has a copy stream beside its compute stream
// (gpu/runtime.cu), and events order the two where one uses what the other wrote:
//
//   to host:   compute ──(event: the data is written)──> copy stream: device -> pinned host
//              The compute stream goes on at once: the next layer's kernels run while the
//              activations stream out. The device source is freed by the allocator right
//              after; the pool keeps its piece until the copy is done (gpu/pool.cu).
//   to device: compute ──(event: the new buffer's piece is no longer in use)──> copy stream:
//              pinned host -> device ──(event: arrived)──> compute waits there, on the GPU
//              The host does not wait: it goes on queuing the kernels that use the data.
//              The host source is freed right after; the pinned cache (gpu/pool.cu) keeps it
//              until the copy is done.
//
// Both copies are on the one copy stream of the thread, in the order issued, so a buffer
// moved out and back comes back after it went out. Host code that reads or writes device or
// host data goes through to_host / to_device (gpu/runtime.cu), which wait for the copy
// stream as well as the compute stream: the host never reads a buffer before its copy is done.
//
// Each copy's source is remembered with the event that marks the copy done, until the
// source is freed (gpu_copy_reading: the pool or the pinned cache takes the event then) or
// the copy is found done.
#include "gpu/gpu.h"
#include "gpu/backend.h"

static thread_local cudaStream_t copy_stream;
static thread_local int made;
static thread_local cudaEvent_t ready;   // recorded on the compute stream before each copy

typedef struct { const void *src; cudaEvent_t done; } Reading;   // a copy in flight, by its source
static thread_local Reading *reading;
static thread_local int nreading, capreading;

static cudaStream_t copies(void) {
    if (!made) {   // on the thread's GPU: gpu_bind has chosen it
        GPU_CHECK(cudaStreamCreateWithFlags(&copy_stream, cudaStreamNonBlocking));
        GPU_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
        made = 1;
    }
    return copy_stream;
}

// The copies found done are forgotten (their events destroyed).
static void forget_done(void) {
    int k = 0;
    for (int i = 0; i < nreading; i++) {
        cudaError_t q = cudaEventQuery(reading[i].done);
        if (q == cudaSuccess) { GPU_CHECK(cudaEventDestroy(reading[i].done)); continue; }
        if (q != cudaErrorNotReady) GPU_CHECK(q);
        reading[k++] = reading[i];
    }
    nreading = k;
}

// The copy stream waits for the work queued on the compute stream so far.
static void after_compute(void) {
    cudaStream_t copy = copies();   // first: on the thread's first copy it makes `ready`
    GPU_CHECK(cudaEventRecord(ready, gpu_stream()));
    GPU_CHECK(cudaStreamWaitEvent(copy, ready, 0));
}

// The copy just queued reads src: an event after it, remembered with src.
static cudaEvent_t remember(const void *src) {
    forget_done();
    if (nreading == capreading) {
        capreading = capreading ? 2 * capreading : 64;
        reading = (Reading *)realloc(reading, sizeof(Reading) * capreading);
        if (!reading) { fprintf(stderr, "meshmoe: out of host memory (offload copy records)\n"); exit(1); }
    }
    cudaEvent_t done;
    GPU_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    GPU_CHECK(cudaEventRecord(done, copies()));
    reading[nreading++] = (Reading){src, done};
    return done;
}

extern "C" void gpu_to_host_async(void *host, const void *src, size_t bytes) {
    after_compute();
    GPU_CHECK(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, copies()));
    remember(src);
}

extern "C" void gpu_to_device_async(void *dst, const void *host, size_t bytes) {
    after_compute();   // dst's piece may have been another buffer's, freed with kernels still queued
    GPU_CHECK(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, copies()));
    GPU_CHECK(cudaStreamWaitEvent(gpu_stream(), remember(host), 0));   // the kernels that use dst wait
}

// The event of the calling thread's copy in flight that reads p (no longer remembered
// here: the caller destroys it), or NULL when none does.
cudaEvent_t gpu_copy_reading(const void *p) {
    for (int i = 0; i < nreading; i++)
        if (reading[i].src == p) {
            cudaEvent_t done = reading[i].done;
            reading[i] = reading[--nreading];
            return done;
        }
    return NULL;
}

// The host is about to read or write data: the copies queued so far are done.
void gpu_copies_wait(void) {
    if (made) GPU_CHECK(cudaStreamSynchronize(copy_stream));
}

// The thread's end (or its move to another GPU): the copies done, the stream gone.
void gpu_copies_end(void) {
    if (!made) return;
    GPU_CHECK(cudaStreamSynchronize(copy_stream));
    forget_done();   // (all of them: the stream is done)
    free(reading);
    reading = NULL;
    capreading = 0;
    GPU_CHECK(cudaEventDestroy(ready));
    GPU_CHECK(cudaStreamDestroy(copy_stream));
    made = 0;
}
