// base/collectives.c: the thread backend of the collectives.
//
// A group has one slot per member. A collective is: every member posts a pointer to its
// data in its slot, waits at the group's barrier, copies what it needs from the other
// members' posted buffers into its own memory, and waits at the barrier again (so no
// member reuses or frees its buffer while another is still reading it). The barrier
// blocks in the kernel (pthread_barrier_wait), so a mesh larger than the core count does
// not spin. Received data lands in device memory: in the caller's output buffer where
// the collective has one (all-gather, all-to-all, ppermute, broadcast), or, where pieces
// from several devices must be added (reduce-scatter, all-reduce), in a staging buffer
// that holds every piece, tagged `comm`. That is the direct algorithm; a ring would hold
// two pieces, but would add them in an order that depends on the mesh. The all-reduce
// divides the work of the direct algorithm: each member sums one slice of the elements,
// every element along the same tree (its own piece added in place, the others from the
// staging buffer), and the members then copy each other's summed slices.
//
// A group that spans processes (base/group.h) runs the same steps among its members here,
// with the pieces that the members read of remote buffers exchanged by its leader
// (base/span.c) between the posting and the reading.
#include "base/group.h"       // Group and its posting steps, also over processes
#include "base/memory.h"      // mem_alloc (MEM_COMM), the bytes counted
#include "kernels/kernels.h"  // kern()->sum: the tree merges
#include "core/common.h"      // die

const char *const COLL_NAMES[COLL_NKINDS] = {"all-gather", "reduce-scatter", "all-reduce", "all-to-all",
                                             "ppermute", "broadcast"};

Group *group_new(const Mesh *mesh, int n, const int *members, int tag) {
    Group *g = calloc(1, sizeof *g);
    g->n = n;
    g->tag = tag;
    g->members = malloc(sizeof(int) * (size_t)n);
    memcpy(g->members, members, sizeof(int) * (size_t)n);
    g->slot = calloc((size_t)n, sizeof(void *));
    g->slot_off = calloc((size_t)n, sizeof(size_t *));
    g->slot_bytes = calloc((size_t)n, sizeof(size_t *));
    g->slot_recv = calloc((size_t)n, sizeof(size_t *));
    g->reduced = calloc((size_t)n, sizeof(float *));
    span_init(g, mesh);
    for (int q = 0; q < n; q++) g->nhere += !span_remote(g, q);
    pthread_barrier_init(&g->barrier, NULL, (unsigned)g->nhere);
    return g;
}

void group_free(Group *g) {
    pthread_barrier_destroy(&g->barrier);
    span_free(g);
    free(g->members); free(g->slot); free(g->slot_off); free(g->slot_bytes); free(g->slot_recv); free(g->reduced);
    free(g);
}

int group_size(const Group *g) { return g->n; }

// The calling device's rank in g.
static int my_rank(const Group *g) {
    int dev = mesh_device_id();
    for (int r = 0; r < g->n; r++)
        if (g->members[r] == dev) return r;
    die("internal: device %d called a collective of a group it is not in", dev);
}

// A dry run that plans one device per class (base/mesh.h, mesh_run_classes) runs each
// representative alone: its collectives wait for nobody, and every member is taken to post
// what the caller posts (in a dry run only sizes travel, and those are the same on every
// member of a group: base/mesh.c says why). posted(g, q, mine) is what member q posted.
static int solo(void) {
    const Mesh *m = mesh_current();
    return m && m->solo;
}
static const void *posted(const Group *g, int q, const void *mine) { return solo() ? mine : g->slot[q]; }

// The members here wait for each other (in one process: every member). Each first waits
// for the work it queued (a GPU stream's kernels and copies; nothing on the CPU), so that
// no member reads a buffer still being written, nor writes one still being read.
static void barrier_here(Group *g) {
    if (g->nhere > 1 && !solo()) {
        kern_sync();
        pthread_barrier_wait(&g->barrier);
    }
}

// Every member has posted, and what the members here read of the buffers of members in
// other processes (the pieces p) has arrived. Member r calls it.
static void all_posted(Group *g, int r, const Pieces *p) {
    barrier_here(g);
    if (!g->span) return;
    if (r == g->lead) span_exchange(g, p);
    barrier_here(g);
}

// Every member here is done reading: no buffer posted here, nor a piece that arrived, is
// still read (in one process, every member is done).
static void done_reading(Group *g) { barrier_here(g); }

// Where member r reads member q's bytes from `off` on: q's posted buffer `base`, or, for a
// member in another process, where its piece for r arrived.
static const void *at(const Group *g, int q, int r, const void *base, size_t off) {
    return span_remote(g, q) ? (const void *)g->piece[(size_t)q * g->n + r] : (const void *)((const char *)base + off);
}

void coll_barrier(Group *g) {
    if (g->n == 1) return;
    all_posted(g, my_rank(g), &(Pieces){PIECE_NONE, COLL_BROADCAST, NULL, 0, 0});
}

// A dry run (base/memory.h) moves no payload: the buffers hold nothing. The staging
// buffers are still allocated and the bytes counted; copies under 4 KiB still happen,
// since those are the small exchanges of counts (the expert all-to-all's sizes) that
// decide the sizes of later buffers, and those live in real memory. A dry run's large
// buffers overlap in address space (base/memory.c, the void), so a copy from or into one,
// however short (a slice of a large gradient), would be undefined for memcpy and a race
// between the devices that share those addresses: such copies are skipped too.
// Every copy is the backend's (kern()->mem->copy): the buffers are device memory, or host
// memory for the few host values summed over the mesh (a token count), which a copy of the
// process's memory moves too (on a GPU, a copy whose direction follows the pointers).
static void move(void *dst, const void *src, size_t bytes) {
    if (dst == src) return;
    if (mem_dry() && (bytes >= 4096 || mem_in_void(dst) || mem_in_void(src))) return;
#ifdef MESHMOE_PLANT_HOST_ACCESS
    // tests/strict.sh's planted bug (build/plant/train, MESHMOE_PLANT=memcpy): the copy by the
    // host instead of the backend, which the strict mode must stop on.
    const char *plant = getenv("MESHMOE_PLANT");
    if (plant && !strcmp(plant, "memcpy")) { memcpy(dst, src, bytes); return; }
#endif
    kern()->mem->copy(dst, src, bytes);
}

// Atomic: a device's prefetch helper thread (sharding/overlap.h) counts its all-gathers on
// the device while the device thread counts its own collectives.
static void count(CollKind k, size_t sent, size_t recv) {
    Device *d = mem_device();
    __atomic_fetch_add(&d->comm_sent[k], sent, __ATOMIC_RELAXED);
    __atomic_fetch_add(&d->comm_recv[k], recv, __ATOMIC_RELAXED);
}

// x[0..len) = tree sum of the n pieces x + k * stride (len floats each); the left subtree
// is the largest power of two below n.
static void tree_reduce_strided(float *x, int n, size_t stride, size_t len) {
    if (n <= 1) return;
    int p = 1;
    while (2 * p < n) p *= 2;
    tree_reduce_strided(x, p, stride, len);
    tree_reduce_strided(x + (size_t)p * stride, n - p, stride, len);
    kern()->sum->tree_add(x, x + (size_t)p * stride, len);   // left subtree += right subtree
}

void tree_reduce_inplace(float *x, int n, size_t len) { tree_reduce_strided(x, n, len, len); }

static void tree_reduce_double(double *x, int n, size_t len) {
    if (n <= 1) return;
    int p = 1;
    while (2 * p < n) p *= 2;
    tree_reduce_double(x, p, len);
    tree_reduce_double(x + (size_t)p * len, n - p, len);
    for (size_t i = 0; i < len; i++) x[i] += x[(size_t)p * len + i];
}

void coll_all_gather(Group *g, const void *send, void *recv, size_t bytes_each) {
    int r = my_rank(g);
    g->slot[r] = send;
    all_posted(g, r, &(Pieces){PIECE_WHOLE, COLL_ALL_GATHER, g->slot, bytes_each, 0});
    for (int q = 0; q < g->n; q++)
        move((char *)recv + (size_t)q * bytes_each, at(g, q, r, posted(g, q, send), 0), bytes_each);
    done_reading(g);
    count(COLL_ALL_GATHER, bytes_each * (size_t)(g->n - 1), bytes_each * (size_t)(g->n - 1));
}

void coll_reduce_scatter(Group *g, const float *send, float *recv, size_t n_each) {
    int r = my_rank(g);
    if (g->n == 1) { move(recv, send, sizeof(float) * n_each); return; }
    g->slot[r] = send;
    float *stage = mem_floats_uninit(MEM_COMM, (size_t)g->n * n_each, "reduce-scatter pieces");   // written whole
    all_posted(g, r, &(Pieces){PIECE_SLICE_OF_T, COLL_REDUCE_SCATTER, g->slot, sizeof(float) * n_each, 0});
    for (int q = 0; q < g->n; q++)
        move(stage + (size_t)q * n_each, at(g, q, r, posted(g, q, send), sizeof(float) * r * n_each),
             sizeof(float) * n_each);
    done_reading(g);
    tree_reduce_inplace(stage, g->n, n_each);
    move(recv, stage, sizeof(float) * n_each);
    mem_free(stage);
    size_t b = sizeof(float) * n_each * (size_t)(g->n - 1);
    count(COLL_REDUCE_SCATTER, b, b);
}

// The tree sum of the n pieces x[0..n) (len floats each), left in the piece that is the
// caller's own buffer (`mine`, a member of x): a merge adds the right subtree into the left
// one, or, where the right one holds `mine`, the left into the right (left + right ==
// right + left, the same bits).
static float *tree_reduce_onto(float *const *x, int n, size_t len, const float *mine) {
    if (n == 1) return x[0];
    int p = 1;
    while (2 * p < n) p *= 2;
    float *a = tree_reduce_onto(x, p, len, mine), *b = tree_reduce_onto(x + p, n - p, len, mine);
    if (b == mine) { kern()->sum->tree_add(b, a, len); return b; }
    kern()->sum->tree_add(a, b, len);
    return a;
}

// The reduce-scatter half of an all-reduce, in place: rank r copies slice r (slice_at) of
// every other member's buf into the staging slots (member q's at stage + q * stride), and
// sums them with its own slice along the tree into that slice of its own buf (which no
// other member reads: each reads only its own slice of the others). No barrier after: the
// caller's next step is one. The bytes that cross processes are counted under k.
static void reduce_own_slice(Group *g, int r, CollKind k, float *buf, size_t n, float *stage, size_t stride) {
    int P = g->n;
    size_t lo = slice_at(n, r, P), len = slice_at(n, r + 1, P) - lo;
    g->slot[r] = buf;
    all_posted(g, r, &(Pieces){PIECE_SPLIT_T, k, g->slot, n, 0});
    float *piece[P];
    for (int q = 0; q < P; q++) {
        piece[q] = q == r ? buf + lo : stage + (size_t)q * stride;
        if (q != r) move(piece[q], at(g, q, r, posted(g, q, buf), sizeof(float) * lo), sizeof(float) * len);
    }
    tree_reduce_onto(piece, P, len, buf + lo);
}

// The staging of the direct reduce-scatter: a slot of one slice per member (the largest
// slice, ceil(n / P) floats), charged whole.
void coll_reduce_scatter_inplace(Group *g, float *buf, size_t n) {
    if (g->n == 1) return;
    int r = my_rank(g), P = g->n;
    size_t slot = (n + (size_t)P - 1) / (size_t)P;
    float *stage = mem_floats_uninit(MEM_COMM, (size_t)P * slot, "reduce-scatter pieces");   // its slots written
    reduce_own_slice(g, r, COLL_REDUCE_SCATTER, buf, n, stage, slot);
    done_reading(g);
    mem_free(stage);
    size_t b = sizeof(float) * (n - (slice_at(n, r + 1, P) - slice_at(n, r, P)));
    count(COLL_REDUCE_SCATTER, b, b);
}

// Reduce-scatter, then all-gather, with the staging buffer of the direct algorithm (a slot
// of n, or cap, floats per member, charged whole): the reduce-scatter above, each member's
// summed slice posted; then every member copies every other summed slice into its buffer.
// Each element is summed by one member along the same tree, so the bits are those of every
// member summing everything. Counted as the direct algorithm's bytes.
void coll_all_reduce(Group *g, float *buf, size_t n) { coll_all_reduce_cap(g, buf, n, n); }

void coll_all_reduce_cap(Group *g, float *buf, size_t n, size_t cap) {
    if (g->n == 1) return;
    if (cap < n) die("internal: an all-reduce of %zu floats staged for %zu", n, cap);
    int r = my_rank(g), P = g->n;
    float *stage = mem_floats_uninit(MEM_COMM, (size_t)P * cap, "all-reduce pieces");   // its slice of each slot written
    reduce_own_slice(g, r, COLL_ALL_REDUCE, buf, n, stage + slice_at(n, r, P), cap);
    g->reduced[r] = buf;
    all_posted(g, r, &(Pieces){PIECE_SPLIT_S, COLL_ALL_REDUCE, (const void *const *)g->reduced, n, 0});
    for (int q = 0; q < P; q++) {
        size_t qlo = slice_at(n, q, P), qlen = slice_at(n, q + 1, P) - qlo;
        // A dry run's lone representative has only its own slice summed (base/mesh.h).
        if (q != r && !solo()) move(buf + qlo, at(g, q, r, g->reduced[q], sizeof(float) * qlo), sizeof(float) * qlen);
    }
    done_reading(g);
    mem_free(stage);
    size_t b = sizeof(float) * n * (size_t)(g->n - 1);
    count(COLL_ALL_REDUCE, b, b);
}

// The members' buffers of `each` bytes side by side in stage (n * each), for the sums of
// doubles and integers.
static void gather_whole(Group *g, int r, const void *buf, void *stage, size_t each) {
    g->slot[r] = buf;
    all_posted(g, r, &(Pieces){PIECE_WHOLE, COLL_ALL_REDUCE, g->slot, each, 0});
    for (int q = 0; q < g->n; q++) move((char *)stage + (size_t)q * each, at(g, q, r, posted(g, q, buf), 0), each);
    done_reading(g);
    size_t b = each * (size_t)(g->n - 1);
    count(COLL_ALL_REDUCE, b, b);
}

// The sums of doubles and integers (the loss's leaves, expert counts: a few numbers) are
// added on the host: the gathered pieces are read once into a host copy, summed there, and
// the sums copied back into buf.
void coll_all_reduce_double(Group *g, double *buf, size_t n) {
    if (g->n == 1) return;
    double *stage = (double *)mem_alloc(MEM_COMM, sizeof(double) * (size_t)g->n * n, "all-reduce pieces");
    gather_whole(g, my_rank(g), buf, stage, sizeof(double) * n);
    double *sum = mem_host_copy(stage, sizeof(double) * (size_t)g->n * n);
    tree_reduce_double(sum, g->n, n);
    move(buf, sum, sizeof(double) * n);
    free(sum);
    mem_free(stage);
}

void coll_all_reduce_long(Group *g, long *buf, size_t n) {
    if (g->n == 1) return;
    long *stage = (long *)mem_alloc(MEM_COMM, sizeof(long) * (size_t)g->n * n, "all-reduce pieces");
    gather_whole(g, my_rank(g), buf, stage, sizeof(long) * n);
    long *pieces = mem_host_copy(stage, sizeof(long) * (size_t)g->n * n);
    for (size_t i = 0; i < n; i++) {   // integer sums are exact in any order
        long s = 0;
        for (int q = 0; q < g->n; q++) s += pieces[(size_t)q * n + i];
        pieces[i] = s;
    }
    move(buf, pieces, sizeof(long) * n);
    free(pieces);
    mem_free(stage);
}

void coll_all_to_all(Group *g, const void *send, const size_t *send_off, const size_t *send_bytes,
                     void *recv, const size_t *recv_off, const size_t *recv_bytes) {
    int r = my_rank(g);
    g->slot[r] = send;
    g->slot_off[r] = send_off;
    g->slot_bytes[r] = send_bytes;
    g->slot_recv[r] = recv_bytes;
    all_posted(g, r, &(Pieces){PIECE_ALL_TO_ALL, COLL_ALL_TO_ALL, g->slot, 0, 0});
    size_t sent = 0, got = 0;
    for (int q = 0; q < g->n; q++) {
        if (solo()) {
            // Member q sends r what r sends itself, as much as r expects: that is q's part
            // where it does not depend on the sender (the expert row counts); elsewhere the
            // bytes are only counted (a dry run moves no payload).
            move((char *)recv + recv_off[q], (const char *)send + send_off[r], MM_MIN(recv_bytes[q], send_bytes[r]));
        } else if (span_remote(g, q)) {   // its length was checked with the whole message (base/net.h)
            move((char *)recv + recv_off[q], g->piece[(size_t)q * g->n + r], recv_bytes[q]);
        } else {
            if (g->slot_bytes[q][r] != recv_bytes[q])
                die("internal: all-to-all size mismatch: rank %d sends %zu bytes to rank %d, which expects %zu",
                    q, g->slot_bytes[q][r], r, recv_bytes[q]);
            move((char *)recv + recv_off[q], (const char *)g->slot[q] + g->slot_off[q][r], recv_bytes[q]);
        }
        if (q != r) { got += recv_bytes[q]; sent += send_bytes[q]; }
    }
    done_reading(g);
    count(COLL_ALL_TO_ALL, sent, got);
}

// Every member passes the same permutation; the first member here posts it.
void coll_ppermute(Group *g, const void *send, void *recv, size_t bytes, const int *perm) {
    int r = my_rank(g);
    g->slot[r] = send;
    if (r == g->lead) g->perm = perm;
    all_posted(g, r, &(Pieces){PIECE_PERMUTE, COLL_PPERMUTE, g->slot, bytes, 0});
    size_t got = 0;
    const int *pm = solo() ? perm : g->perm;
    for (int q = 0; q < g->n; q++)
        if (pm[q] == r) {
            move(recv, at(g, q, r, posted(g, q, send), 0), bytes);
            if (q != r) got = bytes;
        }
    done_reading(g);
    count(COLL_PPERMUTE, perm[r] >= 0 && perm[r] != r ? bytes : 0, got);
}

void coll_broadcast(Group *g, void *buf, size_t bytes, int root) {
    int r = my_rank(g);
    if (r == root) g->slot[root] = buf;
    all_posted(g, r, &(Pieces){PIECE_ROOT, COLL_BROADCAST, g->slot, bytes, root});
    if (r != root) move(buf, at(g, root, r, posted(g, root, buf), 0), bytes);
    done_reading(g);
    count(COLL_BROADCAST, r == root ? bytes * (size_t)(g->n - 1) : 0, r == root ? 0 : bytes);
}
