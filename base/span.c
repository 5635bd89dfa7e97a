// base/span.c: the part of a collective that crosses between processes (base/group.h).
//
// The leader of a spanning group sends each other process of the group one message per
// collective: the pieces that the members there read of the buffers posted here, packed in
// order (sender's rank, then receiver's rank), and receives theirs the same way. A piece
// that every member of a process reads alike (an all-gather's buffer) travels once per
// process. Both sides compute every piece's length from what they know, so a message's
// length is checked on arrival (base/net.h). Host memory: a device's buffers would be
// staged here before they leave (a GPU backend's copies), and the pieces that arrive land
// here; they are not charged to any device's allocator.
#include "base/group.h"
#include "base/net.h"
#include "base/memory.h"   // mem_download: the posted device buffers into the messages
#include "core/common.h"

void span_init(Group *g, const Mesh *mesh) {
    int n = g->n, here = mesh ? mesh->process : 0;
    g->process = malloc(sizeof(int) * (size_t)n);
    g->peer = malloc(sizeof(int) * (size_t)n);
    g->lead = -1;
    for (int q = 0; q < n; q++) {
        g->process[q] = mesh ? mesh_process_of(mesh, g->members[q]) : 0;
        if (g->process[q] == here && g->lead < 0) g->lead = q;
        if (g->process[q] == here) continue;
        int known = 0;
        for (int i = 0; i < g->npeer; i++) known |= g->peer[i] == g->process[q];
        if (!known) g->peer[g->npeer++] = g->process[q];
    }
    g->span = g->npeer > 0;
    for (int i = 1; i < g->npeer; i++)   // ascending (insertion sort of a few)
        for (int j = i; j > 0 && g->peer[j - 1] > g->peer[j]; j--) {
            int x = g->peer[j]; g->peer[j] = g->peer[j - 1]; g->peer[j - 1] = x;
        }
    g->tx = calloc((size_t)n, sizeof(char *));
    g->rx = calloc((size_t)n, sizeof(char *));
    g->txcap = calloc((size_t)n, sizeof(size_t));
    g->rxcap = calloc((size_t)n, sizeof(size_t));
    g->piece = g->span ? calloc((size_t)n * n, sizeof(char *)) : NULL;
}

void span_free(Group *g) {
    for (int i = 0; i < g->npeer; i++) { free(g->tx[i]); free(g->rx[i]); }
    free(g->tx); free(g->rx); free(g->txcap); free(g->rxcap);
    free(g->process); free(g->peer); free(g->piece);
}

// The collectives whose members each read their own piece of a buffer; in the others every
// member of a process reads the same piece, sent once per process.
static int per_member(PieceKind k) {
    return k == PIECE_SLICE_OF_T || k == PIECE_SPLIT_T || k == PIECE_ALL_TO_ALL || k == PIECE_PERMUTE;
}

// The bytes of member s's piece for member t, and (on s's process) where they start in the
// buffer s posted. An all-to-all's receiver knows the length from its own table.
static size_t piece_len(const Group *g, const Pieces *p, int s, int t, int sender, size_t *off) {
    *off = 0;
    switch (p->kind) {
    case PIECE_NONE: return 0;
    case PIECE_WHOLE: return p->bytes;
    case PIECE_SLICE_OF_T: *off = (size_t)t * p->bytes; return p->bytes;
    case PIECE_SPLIT_T:
    case PIECE_SPLIT_S: {
        int r = p->kind == PIECE_SPLIT_T ? t : s;
        size_t lo = slice_at(p->bytes, r, g->n);
        *off = sizeof(float) * lo;
        return sizeof(float) * (slice_at(p->bytes, r + 1, g->n) - lo);
    }
    case PIECE_ALL_TO_ALL:
        if (!sender) return g->slot_recv[t][s];
        *off = g->slot_off[s][t];
        return g->slot_bytes[s][t];
    case PIECE_PERMUTE: return g->perm[s] == t ? p->bytes : 0;
    case PIECE_ROOT: return s == p->root ? p->bytes : 0;
    }
    return 0;
}

// The (sender, receiver) pairs of the message from process `from` to process `to`, in
// packing order; one receiver per process (the first) unless pieces are per member.
static int pairs(const Group *g, int pm, int from, int to, int *ps, int *pt) {
    int k = 0;
    for (int s = 0; s < g->n; s++) {
        if (g->process[s] != from) continue;
        for (int t = 0; t < g->n; t++) {
            if (g->process[t] != to) continue;
            ps[k] = s; pt[k++] = t;
            if (!pm) break;
        }
    }
    return k;
}

static void grow(char **buf, size_t *cap, size_t need) {
    if (need <= *cap && *buf) return;
    free(*buf);
    *buf = malloc(need ? need : 1);
    if (!*buf) die("out of host memory for %zu bytes of a collective between processes", need);
    *cap = need;
}

static void count_net(const Group *g, int q, CollKind k, size_t sent, size_t got) {
    Device *d = &mesh_current()->devices[g->members[q]];
    __atomic_fetch_add(&d->net_sent[k], sent, __ATOMIC_RELAXED);
    __atomic_fetch_add(&d->net_recv[k], got, __ATOMIC_RELAXED);
}

void span_exchange(Group *g, const Pieces *p) {
    const Net *net = net_current();
    int n = g->n, here = g->process[g->lead], pm = per_member(p->kind);
    int *ps = malloc(sizeof(int) * (size_t)n * n), *pt = malloc(sizeof(int) * (size_t)n * n);
    size_t *txlen = calloc((size_t)g->npeer, sizeof(size_t)), *rxlen = calloc((size_t)g->npeer, sizeof(size_t)), off;
    for (int i = 0; i < g->npeer; i++) {
        int k = pairs(g, pm, here, g->peer[i], ps, pt);
        for (int j = 0; j < k; j++) txlen[i] += piece_len(g, p, ps[j], pt[j], 1, &off);
        grow(&g->tx[i], &g->txcap[i], txlen[i]);
        size_t at = 0;
        for (int j = 0; j < k; j++) {
            size_t len = piece_len(g, p, ps[j], pt[j], 1, &off);
            // The posted buffers are device data (a barrier posts nothing): read by the backend.
            if (len) mem_download(g->tx[i] + at, (const char *)p->posted[ps[j]] + off, len);
            at += len;
            count_net(g, ps[j], p->coll, len, 0);
        }
        k = pairs(g, pm, g->peer[i], here, ps, pt);
        for (int j = 0; j < k; j++) rxlen[i] += piece_len(g, p, ps[j], pt[j], 0, &off);
        grow(&g->rx[i], &g->rxcap[i], rxlen[i]);
    }
    net->exchange(g->tag, g->npeer, g->peer, (const void *const *)g->tx, txlen, (void *const *)g->rx, rxlen);
    for (int i = 0; i < g->npeer; i++) {   // where each piece arrived
        int k = pairs(g, pm, g->peer[i], here, ps, pt);
        size_t at = 0;
        for (int j = 0; j < k; j++) {
            size_t len = piece_len(g, p, ps[j], pt[j], 0, &off);
            for (int t = 0; t < n; t++)
                if (t == pt[j] || (!pm && g->process[t] == here)) g->piece[(size_t)ps[j] * n + t] = g->rx[i] + at;
            count_net(g, pm ? pt[j] : g->lead, p->coll, 0, len);
            at += len;
        }
    }
    free(ps); free(pt); free(txlen); free(rxlen);
}
