// tests/test_gpu_attention.cpp: the GPU's attention kernels run on this machine's CPU
// (tests/gpu_emu.h emulates the part of CUDA they use), so that they are tested where there
// is no GPU. gpu/attention.cu and gpu/attn_tiles.cu are compiled as they are, with g++, with
// GPU_EMULATE; the table under test is attention_cuda, the one the GPU backend runs.
// Compared bit for bit, on random inputs, every kernel of kernels/attention.h (dot-product
// forward and backward over query chunks, flash at several block sizes, ring blocks at every
// offset), float32 and with each bf16 rounding point, on ragged shapes:
//   1. the tiles (gpu/attn_tiles.cu) against the per-row kernels (gpu_attention=rows): the
//      tiles promise the per-row kernels' sums in their order;
//   2. the tiles with their threads run in descending order between barriers against
//      ascending: a thread reading what another writes between the same two barriers (a
//      race on the GPU) gives different numbers here;
//   3. the per-row kernels against the CPU's per-row loops (attention_cpu_plain), which
//      define the sums: the same C library expf here, so the same bits (on a GPU the
//      device's expf differs by a few ulp: tests/gpu.sh checks within tolerances there).
// What the emulation cannot show: the GPU's speed, its expf, its memory model across blocks
// (here blocks run one after another; the kernels write disjoint outputs per block) and
// resource limits; tests/gpu.sh's conformance and sanitizer steps run the same kernels on a GPU.
#include "gpu/gpu.h"
#include "gpu/attention.h"
#include "gpu/backend.h"
#include "tests/attn_cases.h"
#include <omp.h>

cudaStream_t gpu_stream(void) { return nullptr; }

// The ways: 0 the tiles (threads ascending between barriers), 1 the tiles (descending), 2 the
// per-row GPU kernels, 3 the CPU's per-row loops; compared 0 with 1, 0 with 2, 2 with 3.
static const AttentionKernels *use(int way) {
    gpu_attention_use_tiles(way <= 1);
    emu_order = way == 1;
    return way == 3 ? &attention_cpu_plain : &attention_cuda;
}
static const char *const way_names[4] = {"tiles", "tiles, threads descending", "per-row kernels",
                                         "CPU per-row loops"};
static const int way_pairs[3][2] = {{0, 1}, {0, 2}, {2, 3}};
static const AttnWays ways = {4, use, way_names, 3, way_pairs};

int main(void) {
    omp_set_num_threads(1);   // the CPU's per-row loops: the same bits on any count, and no waits
    attn_rng = 11;
    for (int si = 0; si < ATTN_SHAPES; si++)
        for (int ri = 0; ri < ATTN_ROUNDINGS; ri++) attn_compare(&attn_shapes[si], attn_roundings[ri], NULL, "", &ways);
    // the widest heads of the presets: MLA's 192-wide queries and keys, 128-wide values
    AttnShape mla = {"MLA medium (192, 128)", 1, 20, 2, 2, 192, 128, 1, 0, 20};
    for (int ri = 0; ri < ATTN_ROUNDINGS; ri++) attn_compare(&mla, attn_roundings[ri], NULL, "", &ways);
    printf("  emulated GPU attention: tiles = tiles with threads reversed = per-row kernels = CPU per-row loops, "
           "bit for bit: %d shapes x %d roundings, %d comparisons\n", ATTN_SHAPES + 1, ATTN_ROUNDINGS, test_passed);
    TEST_SUMMARY();
}
