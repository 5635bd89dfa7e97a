// gpu/cast.cu: bf16 rounding and 16-bit packing on the GPU (kernels/cast.h), the twin of
// kernels/cpu/cast.c; the rounding is gpu/gpu.h:bf16_round_dev, the same bits as kernels/bf16.h.
//
// Launch geometry: one thread per element, GPU_THREADS per block; the rounding in place, the
// step's most frequent pass over activations, the rounded copy, the packing and unpacking
// take four elements a thread (16-byte accesses to floats, 8-byte ones to bits) where the
// arrays' alignment allows.
#include "gpu/gpu.h"
#include "gpu/backend.h"

__global__ static void round_kernel(float *x, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = bf16_round_dev(x[i]);
}

__global__ static void round4_kernel(float4 *x, size_t n4) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n4) return;
    float4 v = x[i];
    v.x = bf16_round_dev(v.x);
    v.y = bf16_round_dev(v.y);
    v.z = bf16_round_dev(v.z);
    v.w = bf16_round_dev(v.w);
    x[i] = v;
}

__global__ static void round_copy_kernel(float *out, const float *x, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = bf16_round_dev(x[i]);
}

__global__ static void round_copy4_kernel(float4 *out, const float4 *x, size_t n4) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n4) return;
    float4 v = x[i];
    out[i] = make_float4(bf16_round_dev(v.x), bf16_round_dev(v.y), bf16_round_dev(v.z), bf16_round_dev(v.w));
}

// Between floats x and their bf16 bits h, one element a thread: h = bits(x) when pack, else
// x = the floats of h.
__global__ static void bits_kernel(uint16_t *h, float *x, size_t n, int pack) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    if (pack) h[i] = bf16_bits_dev(x[i]);
    else x[i] = bf16_float_dev(h[i]);
}

// The same four elements a thread: a 16-byte access to the floats and an 8-byte one to their
// bits (one element a thread, the packing and unpacking ran at half the copy bandwidth, 2.1
// TB/s on an H200).
__global__ static void bits4_kernel(uint2 *h, float4 *x, size_t n4, int pack) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n4) return;
    if (pack) {
        h[i] = bf16_bits4_dev(x[i]);
    } else {
        x[i] = bf16_float4_dev(h[i]);
    }
}

// x (n) = rb(x), in place.
// (x 16-byte aligned: its whole quads four at a time, the last 0-3 elements one at a time;
// otherwise all one at a time.)
static void round_to_bf16(float *x, size_t n) {
    if (n == 0) return;
    size_t quads = quads_of(n, (uintptr_t)x), done = 4 * quads;
    if (quads) {
        GPU_LAUNCH(round4_kernel, blocks_for(quads, GPU_THREADS), GPU_THREADS, 0)((float4 *)x, quads);
        GPU_CHECK_LAUNCH();
    }
    if (done < n) {
        GPU_LAUNCH(round_kernel, blocks_for(n - done, GPU_THREADS), GPU_THREADS, 0)(x + done, n - done);
        GPU_CHECK_LAUNCH();
    }
}

// out (n) = rb(x (n)): as round_to_bf16, four at a time where both arrays are 16-byte aligned.
static void round_copy_bf16(float *out, const float *x, size_t n) {
    if (n == 0) return;
    size_t quads = quads_of(n, (uintptr_t)x | (uintptr_t)out), done = 4 * quads;
    if (quads) {
        GPU_LAUNCH(round_copy4_kernel, blocks_for(quads, GPU_THREADS), GPU_THREADS, 0)((float4 *)out,
                                                                                    (const float4 *)x, quads);
        GPU_CHECK_LAUNCH();
    }
    if (done < n) {
        GPU_LAUNCH(round_copy_kernel, blocks_for(n - done, GPU_THREADS), GPU_THREADS, 0)(out + done, x + done,
                                                                                      n - done);
        GPU_CHECK_LAUNCH();
    }
}

// h (n) = bits(x (n)) when pack, else x = the floats of h: four at a time where x is 16-byte
// aligned and h 8-byte aligned, as round_copy_bf16, the rest one at a time.
static void move_bits(uint16_t *h, float *x, size_t n, int pack) {
    if (n == 0) return;
    // (h's 8-byte alignment asked as that of h * 2: the bits hold half the floats' bytes)
    size_t quads = quads_of(n, (uintptr_t)x | (uintptr_t)h * 2), done = 4 * quads;
    if (quads) {
        GPU_LAUNCH(bits4_kernel, blocks_for(quads, GPU_THREADS), GPU_THREADS, 0)((uint2 *)h, (float4 *)x, quads, pack);
        GPU_CHECK_LAUNCH();
    }
    if (done < n) {
        GPU_LAUNCH(bits_kernel, blocks_for(n - done, GPU_THREADS), GPU_THREADS, 0)(h + done, x + done, n - done, pack);
        GPU_CHECK_LAUNCH();
    }
}

// h (n) = the bf16 bits of x (n) (x only read).
static void pack_bf16(uint16_t *h, const float *x, size_t n) { move_bits(h, (float *)x, n, 1); }

// x (n) = the floats of the bf16 bits h (n) (h only read).
static void unpack_bf16(float *x, const uint16_t *h, size_t n) { move_bits((uint16_t *)h, x, n, 0); }

#if GPU_HOST_PASS
extern "C" const CastKernels cast_cuda = {round_to_bf16, round_copy_bf16, pack_bf16, unpack_bf16};
#endif
