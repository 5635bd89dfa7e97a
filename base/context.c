// base/context.c: context parallelism: the leaf order, the K/V exchange and the
// per-sequence statistics over the context group (see context.h).
#include "base/context.h"
#include "base/mesh.h"
#include "base/collectives.h"
#include "base/memory.h"
#include "base/fresh.h"
#include "core/common.h"

static Group *context_group(void) { return mesh_axis_size(AX_CONTEXT) > 1 ? mesh_axis_group(AX_CONTEXT) : NULL; }

int cp_size(void) { return mesh_axis_size(AX_CONTEXT); }

int cp_rank(void) { return mesh_axis_rank(AX_CONTEXT); }

void cp_check(const Config *c, int context) {
    int C = cfg_context_chunks(c);
    if (C % context)
        die("ici_context_parallelism=%d must divide context_reduce_chunks (%d): each context device holds whole "
            "chunks of every sequence; set context_reduce_chunks to a power of two that %d divides (and that "
            "divides max_target_length %d), on the runs you compare with too", context, C, context,
            c->max_target_length);
}

// ---------------------------------------------------------------------------------------
// The leaves

Leaves leaves_of(const Config *c, int B, int S) {
    Leaves lv;
    lv.B = B;
    lv.S = S;
    int whole = S * cp_size(), C = cfg_context_chunks(c);
    if (C < 1 || whole % C || S % (whole / C))
        die("internal: a sequence of %d tokens (%d here) cannot be cut into %d chunks held whole", whole, S, C);
    lv.chunk = whole / C;
    lv.len = c->reduce_leaf_tokens > 0 ? c->reduce_leaf_tokens : lv.chunk;
    if (lv.chunk % lv.len) die("internal: leaves of %d tokens do not tile chunks of %d", lv.len, lv.chunk);
    lv.nchunks = S / lv.chunk;
    lv.n = (long)B * S / lv.len;
    return lv;
}

Leaves leaves_flat(int T, int len) {
    if (len <= 0 || T % len) die("internal: leaves of %d tokens do not tile %d tokens", len, T);
    return (Leaves){1, T, len, T, 1, T / len};
}

// The chunk-slot stride of the unit whose gradient the calling device is computing.
static _Thread_local size_t grad_slot_stride;
void cp_set_grad_slots(size_t stride) { grad_slot_stride = stride; }

// The sequence's real length when a caller padded it (sampling), else 0.
static _Thread_local int sequence_length;
void cp_set_sequence_length(int len) { sequence_length = len; }
int cp_sequence_length(int S) { return sequence_length > 0 ? sequence_length : S * cp_size(); }

void leafsum_begin(LeafSum *s, Leaves lv, float *dst, size_t n, const char *name) {
    memset(s, 0, sizeof *s);
    s->lv = lv;
    s->dst = dst;
    s->n = n;
    s->name = name;
    s->slot = lv.nchunks > 1 ? grad_slot_stride : 0;
    treesum_begin(&s->leaves, n, MEM_TEMP, name);
    treesum_begin(&s->chunks, n, MEM_TEMP, name);
}

float *leafsum_leaf(LeafSum *s) { return treesum_leaf(&s->leaves); }
float *leafsum_leaf_onto(LeafSum *s, int *onto) { return treesum_leaf_onto(&s->leaves, onto); }

void leafsum_push(LeafSum *s) {
    treesum_push(&s->leaves);
    long per_chunk = (long)s->lv.B * (s->lv.chunk / s->lv.len);   // leaves of one chunk, all sequences
    if (++s->pushed % per_chunk) return;
    // Chunk j is complete: its sum goes to dst (the only chunk here), to its slot, or into
    // the tree over this device's chunks.
    long j = s->pushed / per_chunk - 1;
    if (s->lv.nchunks == 1) {
        fresh_touch(s->dst, s->n);
        treesum_end(&s->leaves, s->dst);
    } else if (s->slot) {
        fresh_touch(s->dst + (size_t)j * s->slot, s->n);
        treesum_end(&s->leaves, s->dst + (size_t)j * s->slot);
    } else {
        treesum_end(&s->leaves, treesum_leaf(&s->chunks));   // a zeroed buffer += the chunk's sum
        treesum_push(&s->chunks);
    }
    treesum_begin(&s->leaves, s->n, MEM_TEMP, s->name);
}

void leafsum_end(LeafSum *s) {
    if (s->pushed != s->lv.n) die("internal: %s: %ld leaves pushed of %ld", s->name, s->pushed, s->lv.n);
    if (s->lv.nchunks > 1 && !s->slot) {
        fresh_touch(s->dst, s->n);
        treesum_end(&s->chunks, s->dst);
    }
}

// ---------------------------------------------------------------------------------------
// Keys and values

float *cp_gather(const float *local, size_t n, const char *name) {
    Group *g = context_group();
    if (!g) return (float *)local;
    float *all = mem_floats(MEM_COMM, (size_t)group_size(g) * n, name);
    coll_all_gather(g, local, all, sizeof(float) * n);
    return all;
}

void cp_gather_free(float *all, const float *local) {
    if (all != local) mem_free(all);
}

void cp_reduce_scatter(float *all, size_t n) {
    Group *g = context_group();
    if (g) coll_reduce_scatter(g, all, all, n);   // the result may overwrite the own send piece 0:
                                                  // it is written after every member has read
}

void cp_ring_pass(const float *send, float *recv, size_t n) {
    Group *g = context_group();
    if (!g) die("internal: a ring pass without a context group");
    int P = group_size(g), perm[P];
    for (int q = 0; q < P; q++) perm[q] = (q + 1) % P;   // every member's destination
    coll_ppermute(g, send, recv, sizeof(float) * n, perm);
}

// ---------------------------------------------------------------------------------------
// Per-sequence statistics

void cp_chunk_tree(double *out, const double *part, int B, int nchunks, int m) {
    Group *g = context_group();
    int P = g ? group_size(g) : 1, C = P * nchunks;
    size_t mine = (size_t)B * nchunks * m;
    const double *all = part;   // (P,B,nchunks,m)
    double *got = NULL;
    if (g) {
        got = (double *)mem_alloc(MEM_COMM, sizeof(double) * mine * P, "sequence statistics, all parts");
        coll_all_gather(g, part, got, sizeof(double) * mine);
        all = got;
    }
    // The sums on the host, over a host copy of every part (device data), into out.
    double *xh = malloc(sizeof(double) * C), *sums = malloc(sizeof(double) * (size_t)B * m);
    double *allh = mem_host_copy(all, sizeof(double) * mine * P);
    if (!xh || !sums) die("host out of memory for the sequence statistics");
    for (int b = 0; b < B; b++)
        for (int i = 0; i < m; i++) {
            // chunk r*nchunks + j of sequence b sits in part r, chunk j
            for (int r = 0; r < P; r++)
                for (int j = 0; j < nchunks; j++)
                    xh[r * nchunks + j] = allh[(((size_t)r * B + b) * nchunks + j) * m + i];
            sums[(size_t)b * m + i] = tree_sum_double(xh, C);
        }
    mem_upload(out, sums, sizeof(double) * (size_t)B * m);
    free(xh); free(sums); free(allh);
    mem_free(got);
}

// The counts added on the host, over a host copy of the gathered ones (device data).
void cp_counts_before(int *before, const int *mine, size_t n) {
    mem_zero(before, sizeof(int) * n);
    Group *g = context_group();
    if (!g) return;
    int P = group_size(g), r = cp_rank();
    int *all = (int *)mem_alloc(MEM_COMM, sizeof(int) * n * P, "counts of all parts");
    coll_all_gather(g, mine, all, sizeof(int) * n);
    int *allh = mem_host_copy(all, sizeof(int) * n * P), *sum = calloc(n ? n : 1, sizeof(int));
    if (!sum) die("host out of memory for the counts of all parts");
    for (int q = 0; q < r; q++)
        for (size_t i = 0; i < n; i++) sum[i] += allh[(size_t)q * n + i];
    mem_upload(before, sum, sizeof(int) * n);
    free(allh); free(sum);
    mem_free(all);
}
