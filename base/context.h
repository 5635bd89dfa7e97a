// base/context.h: context parallelism over the mesh axis `context`: the sequence is
// cut into c equal parts and device r of the axis holds part r (positions r*S/c ..) of
// every sequence of its batch. Weights are replicated over `context` (and still sharded
// over `fsdp`); the batch is split over data*fsdp as without it.
//
// What a device needs from the other parts of its sequences:
//   - attention: a query sees the keys of every earlier position. Each device all-gathers
//     the keys and values (after projection and RoPE) of its context group, runs its own
//     queries against them with the causal mask on global positions, and in the backward
//     pass sends each part's dK and dV back to the device that holds it (a reduce-scatter).
//     Only this device's own K and V are kept between the passes: the backward pass
//     gathers them again, so saved activations shrink with c (the cost: the gather twice).
//   - RoPE: global positions (this device's first position is r*S/c).
//   - the MoE block's per-sequence statistics (load-balance loss, capacity).
//   - every sum over tokens: the weight gradients, dK/dV, the loss.
//
// The canonical order (docs/model.md#summation-order). Whatever the mesh, one device too, every
// sequence is cut into `context_reduce_chunks` (C, a power of two) chunks of S/C tokens,
// and every sum over tokens is "chunk outermost": the pairwise tree (base/treesum.h) over
// the C chunks of, per chunk, the pairwise tree over that chunk's leaves in (sequence,
// leaf) order, the sequences of the whole step (all microbatches). A context device holds
// C/c consecutive chunks, a whole subtree, so the reduction over `context` is the
// outermost level of the tree, after expert, fsdp, data and the microbatches
// (sharding/fsdp.c). The query rows of attention are cut into the same chunks for dK and
// dV (model/attn_core.c), and the MoE statistics of a sequence are summed per chunk, then
// over the chunks along the tree. So context=c gives the same bits as one device, and
// gradient accumulation the same bits as one big batch.
//
// C defaults to the context size (1 without context parallelism: whole sequences are the
// leaves and nothing changes). So context=c is bit-identical to one device run with
// context_reduce_chunks=c, not to one device with the default C = 1: the chunks change the
// order of the sums (tests/mesh.sh compares the two). What C > 1 costs:
//   - leaves are 1/C sequences (reduce_leaf_tokens defaults to one chunk): C times as many
//     per-leaf products and tree additions for every weight gradient;
//   - a device that holds several chunks of its sequences while other sequences of the
//     same chunks are added in between (the batch split over data/fsdp/expert, or several
//     microbatches) cannot add its chunks first. It keeps one gradient per chunk ("chunk
//     slots", fsdp.c): for the unit being reduced, each slot reduced on its own (C/c times
//     the gradient bytes over data/fsdp/expert, C/c unit gradients of memory), and for
//     gradient accumulation C/c copies of the microbatch gradient buffers.
// With C = c (the default under context parallelism) a device holds one chunk of each
// sequence and keeps one gradient per unit.
#ifndef MESHMOE_CONTEXT_H
#define MESHMOE_CONTEXT_H
#include <stddef.h>
#include "base/config.h"
#include "base/treesum.h"

// Devices along `context` around the calling device, and its rank among them (1 and 0
// without a mesh).
int cp_size(void);
int cp_rank(void);
// Dies with a message naming the numbers if the context size does not fit the config.
void cp_check(const Config *c, int context);

// ---------------------------------------------------------------------------------------
// The leaves of this device's tokens. A layer's B*S token rows are B sequences of S tokens
// (this device's part of each); leaf i, in tree order, is `len` consecutive rows starting
// at row leaf_token(lv, i). Tree order is chunk by chunk, then sequence by sequence, then
// leaf by leaf within the chunk.
typedef struct {
    int B, S;        // sequences, and tokens of each on this device
    int len;         // tokens per leaf (reduce_leaf_tokens; default one chunk)
    int chunk;       // tokens per chunk: the whole sequence (S * cp_size()) / context_reduce_chunks
    int nchunks;     // chunks of each sequence on this device: S / chunk
    long n;          // leaves on this device: B * S / len
} Leaves;

Leaves leaves_of(const Config *c, int B, int S);
// T tokens in one chunk of one sequence (tests, and sums that never meet other devices).
Leaves leaves_flat(int T, int len);

// The first token row of leaf i (0 <= i < lv.n).
static inline long leaf_token(Leaves lv, long i) {
    long per = lv.chunk / lv.len;                 // leaves of one chunk of one sequence
    long j = i / (per * lv.B), b = i / per % lv.B, k = i % per;
    return b * lv.S + j * lv.chunk + k * lv.len;
}
// The index, in the step's whole tree, of this device's leaf i: the step has nseq
// sequences (all microbatches), this device holds sequences [b0, b0+B) and chunks from
// chunk0 on. Chunk outermost: the chunks are above the microbatches too.
static inline long leaf_global(Leaves lv, long i, long nseq, long b0, int chunk0) {
    long per = lv.chunk / lv.len;
    long j = i / (per * lv.B), b = i / per % lv.B, k = i % per;
    return ((chunk0 + j) * nseq + b0 + b) * per + k;
}

// Adds per-leaf contributions along the canonical tree: each chunk's leaves along the tree,
// then the chunks along the tree (or, with chunk slots, each chunk into its own slot):
//     LeafSum ls; leafsum_begin(&ls, lv, dst, n, "dW leaf");
//     for (long i = 0; i < lv.n; i++) { float *g = leafsum_leaf(&ls); ...leaf i...; leafsum_push(&ls); }
//     leafsum_end(&ls);      // dst[0..n) += the sum
typedef struct {
    Leaves lv;
    float *dst;
    size_t n, slot;   // slot: floats between two chunks' destinations (0: the chunks are added here)
    const char *name;
    TreeSum leaves;   // the leaves of the current chunk
    TreeSum chunks;   // the finished chunks (when added here)
    long pushed;
} LeafSum;

void leafsum_begin(LeafSum *s, Leaves lv, float *dst, size_t n, const char *name);
float *leafsum_leaf(LeafSum *s);
float *leafsum_leaf_onto(LeafSum *s, int *onto);   // a product adds onto it if *onto (base/treesum.h)
void leafsum_push(LeafSum *s);
void leafsum_end(LeafSum *s);

// Chunk slots (sharding/fsdp.c): while a unit's gradient is computed with one slot per
// chunk, the gradient of chunk j of every tensor goes to its pointer + j*stride floats.
// fsdp_grad_begin sets the stride, fsdp_grad_end sets it back to 0 (no slots).
void cp_set_grad_slots(size_t stride);

// ---------------------------------------------------------------------------------------
// Keys and values. A "part" is S positions of each of B sequences: (B,S,H,d) floats.

// The parts of the whole context group, in rank order: (P,B,S,H,d), P = cp_size(), in a
// buffer of tag comm; local itself (no copy) when P = 1. n: floats of one part.
float *cp_gather(const float *local, size_t n, const char *name);
// Frees what cp_gather returned.
void cp_gather_free(float *all, const float *local);
// all (P*n floats, every part's gradient from this device): all[0..n) becomes the sum over
// the context group of every device's piece for this device's part, along the tree over
// ranks (a reduce-scatter). Nothing to do when P = 1.
void cp_reduce_scatter(float *all, size_t n);

// context_parallel_strategy=ring (model/attn_ring.c): one hop round the ring of the context
// group. Every device sends n floats from `send` to the next rank (r+1 mod P) and receives
// the previous rank's n floats in `recv` (a ppermute; send and recv must not overlap).
void cp_ring_pass(const float *send, float *recv, size_t n);

// ---------------------------------------------------------------------------------------
// Per-sequence statistics.

// out (B,m) = for every sequence b and entry i, the sum over all C chunks of the sequence,
// along the tree over chunks, of part (B,nchunks,m): this device's chunks' partial sums.
void cp_chunk_tree(double *out, const double *part, int B, int nchunks, int m);
// before (n) = the sum of `mine` (n) over the context devices of lower rank (integers,
// exact): e.g. how many tokens of each sequence the earlier parts sent to each expert.
void cp_counts_before(int *before, const int *mine, size_t n);
// The length of the whole sequence whose part of S tokens this device holds: S * cp_size(),
// or the real length a caller set with cp_set_sequence_length (sampling pads the growing
// sequence with token 0 to a whole number of parts; the MoE capacity counts the real tokens,
// as one device's pass over them does). 0 sets it back.
int cp_sequence_length(int S);
void cp_set_sequence_length(int len);

#endif
