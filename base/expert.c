// base/expert.c: the all-to-all exchange of routed rows (see expert.h).
#include "base/expert.h"
#include "base/mesh.h"
#include "base/memory.h"
#include "kernels/kernels.h"   // kern()->moe->gather_rows: the rows put in order
#include "core/common.h"

static Group *expert_group(void) { return mesh_axis_group(AX_EXPERT); }

int ep_size(void) { return mesh_axis_size(AX_EXPERT); }

int ep_rank(void) { return mesh_axis_rank(AX_EXPERT); }

// Byte offsets and sizes of `rows[q]` rows of `w` bytes each, packed back to back.
static void layout(size_t *off, size_t *bytes, const size_t *rows, int n, size_t w) {
    size_t at = 0;
    for (int q = 0; q < n; q++) { off[q] = at; bytes[q] = rows[q] * w; at += bytes[q]; }
}

// Host memory for the plan (the allocator's tags count device and offload memory, not the
// host's bookkeeping).
static void *host_array(size_t bytes) {
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p) die("host out of memory for the expert dispatch plan (%zu bytes)", bytes);
    return p;
}

// The plan is host data (the sizes and offsets the collectives take, the row layout the
// layer sizes its products with); what crosses the mesh is device data: the counts and
// tokens go through device buffers and are read back once each, and the row permutations
// that the kernels apply (from, to) are written to the device once.
static void plan_counts(ExpertDispatch *d, const int *row_start) {
    int ep = d->ep, El = d->El;
    int *send_h = malloc(sizeof(int) * (size_t)ep * El);
    for (int q = 0; q < ep; q++) {
        d->send_first[q] = (size_t)row_start[q * El];
        d->send_rows[q] = (size_t)(row_start[(q + 1) * El] - row_start[q * El]);
        for (int e = 0; e < El; e++) send_h[q * El + e] = row_start[q * El + e + 1] - row_start[q * El + e];
    }
    int *send_count = (int *)mem_alloc(MEM_COMM, sizeof(int) * (size_t)ep * El, "expert send counts");
    int *got = (int *)mem_alloc(MEM_COMM, sizeof(int) * (size_t)ep * El, "expert recv counts");
    mem_upload(send_count, send_h, sizeof(int) * (size_t)ep * El);
    size_t *cnt_off = malloc(sizeof(size_t) * ep), *cnt_bytes = malloc(sizeof(size_t) * ep);
    for (int q = 0; q < ep; q++) { cnt_off[q] = sizeof(int) * (size_t)q * El; cnt_bytes[q] = sizeof(int) * El; }
    coll_all_to_all(d->group, send_count, cnt_off, cnt_bytes, got, cnt_off, cnt_bytes);
    mem_download(d->recv_count, got, sizeof(int) * (size_t)ep * El);
    mem_free(send_count);
    mem_free(got);
    free(send_h); free(cnt_off); free(cnt_bytes);
    d->nrecv = 0;
    for (int p = 0; p < ep; p++) {
        d->recv_rows[p] = 0;
        for (int e = 0; e < El; e++) d->recv_rows[p] += (size_t)d->recv_count[p * El + e];
        d->nrecv += (int)d->recv_rows[p];
    }
}

// Expert-major order: local expert e's rows from rank 0, then rank 1, ... (each in token
// order): the group's token order. tok: the received rows' tokens (host), rank p's block at
// r_off[p]. from (nrecv): each row's place in the receive buffer; to: its inverse.
static void plan_rows(ExpertDispatch *d, const int *tok, const size_t *r_off, int *from, int *to) {
    int ep = d->ep, El = d->El, r = 0;
    for (int e = 0; e < El; e++) {
        d->row_start[e] = r;
        for (int p = 0; p < ep; p++) {
            int at = (int)(r_off[p] / sizeof(int));   // rank p's block, then its experts before e
            for (int e2 = 0; e2 < e; e2++) at += d->recv_count[p * El + e2];
            for (int i = 0; i < d->recv_count[p * El + e]; i++, r++) {
                if (mem_dry()) continue;   // a dry run needs the counts only
                from[r] = at + i;
                to[at + i] = r;
                d->row_token[r] = p * d->T + tok[at + i];
            }
        }
    }
    d->row_start[El] = r;
}

ExpertDispatch *ep_plan(const int *row_start, const int *row_token, int E, int K, int T) {
    ExpertDispatch *d = host_array(sizeof *d);
    d->group = expert_group();
    d->ep = ep_size();
    d->rank = ep_rank();
    d->El = E / d->ep;
    d->T = T;
    int ep = d->ep, El = d->El;
    d->cap = ep * T * MM_MIN(K, El);
    d->send_rows = host_array(sizeof(size_t) * ep);
    d->send_first = host_array(sizeof(size_t) * ep);
    d->recv_rows = host_array(sizeof(size_t) * ep);
    d->recv_count = host_array(sizeof(int) * (size_t)ep * El);
    // 1. Counts: to rank q, the rows of each of q's experts.
    plan_counts(d, row_start);
    // 2. The tokens of the rows, so the owner knows each row's leaf.
    size_t *s_off = malloc(sizeof(size_t) * ep), *s_bytes = malloc(sizeof(size_t) * ep);
    size_t *r_off = malloc(sizeof(size_t) * ep), *r_bytes = malloc(sizeof(size_t) * ep);
    for (int q = 0; q < ep; q++) { s_off[q] = sizeof(int) * d->send_first[q]; s_bytes[q] = sizeof(int) * d->send_rows[q]; }
    layout(r_off, r_bytes, d->recv_rows, ep, sizeof(int));
    int *tok_dev = (int *)mem_alloc(MEM_COMM, sizeof(int) * (size_t)d->cap, "expert recv tokens");
    coll_all_to_all(d->group, row_token, s_off, s_bytes, tok_dev, r_off, r_bytes);
    int *tok = mem_dry() ? NULL : mem_host_copy(tok_dev, sizeof(int) * (size_t)d->cap);
    mem_free(tok_dev);
    // 3. The layout, on the host; the permutations to the device.
    d->row_start = host_array(sizeof(int) * (size_t)(El + 1));
    d->row_token = host_array(sizeof(int) * (size_t)d->cap);
    d->from = (int *)mem_alloc(MEM_ACTIVATIONS, sizeof(int) * (size_t)d->cap, "expert row source");
    d->to = (int *)mem_alloc(MEM_ACTIVATIONS, sizeof(int) * (size_t)d->cap, "expert row destination");
    int *from = malloc(sizeof(int) * (size_t)d->cap), *to = malloc(sizeof(int) * (size_t)d->cap);
    plan_rows(d, tok, r_off, from, to);
    if (!mem_dry()) {
        mem_upload(d->from, from, sizeof(int) * (size_t)d->nrecv);
        mem_upload(d->to, to, sizeof(int) * (size_t)d->nrecv);
    }
    free(tok); free(from); free(to);
    free(s_off); free(s_bytes); free(r_off); free(r_bytes);
    return d;
}

// The received rows, expert-major: out[r] = stage[from[r]] (a gather kernel).
void ep_send(ExpertDispatch *d, const float *rows, float *out, int w) {
    int ep = d->ep;
    size_t s_off[ep], s_bytes[ep], r_off[ep], r_bytes[ep], wb = sizeof(float) * (size_t)w;
    for (int q = 0; q < ep; q++) { s_off[q] = d->send_first[q] * wb; s_bytes[q] = d->send_rows[q] * wb; }
    layout(r_off, r_bytes, d->recv_rows, ep, wb);
    float *stage = mem_floats(MEM_COMM, (size_t)d->cap * w, "expert all-to-all receive");
    coll_all_to_all(d->group, rows, s_off, s_bytes, stage, r_off, r_bytes);
    kern()->moe->gather_rows(out, stage, d->from, 0, mem_dry() ? 0 : d->nrecv, w);
    mem_free(stage);
}

// Back in the order they came: stage[from[r]] = in[r], which is stage[j] = in[to[j]].
void ep_return(ExpertDispatch *d, const float *in, float *rows, int w) {
    int ep = d->ep;
    size_t s_off[ep], s_bytes[ep], r_off[ep], r_bytes[ep], wb = sizeof(float) * (size_t)w;
    float *stage = mem_floats(MEM_COMM, (size_t)d->cap * w, "expert all-to-all send");
    kern()->moe->gather_rows(stage, in, d->to, 0, mem_dry() ? 0 : d->nrecv, w);
    layout(s_off, s_bytes, d->recv_rows, ep, wb);
    for (int q = 0; q < ep; q++) { r_off[q] = d->send_first[q] * wb; r_bytes[q] = d->send_rows[q] * wb; }
    coll_all_to_all(d->group, stage, s_off, s_bytes, rows, r_off, r_bytes);
    mem_free(stage);
}

void ep_free(ExpertDispatch *d) {
    if (!d) return;
    free(d->send_rows); free(d->send_first); free(d->recv_rows); free(d->recv_count);
    free(d->row_start); mem_free(d->from); mem_free(d->to); free(d->row_token);
    mem_free(d->x); mem_free(d->h0); mem_free(d->h1);
    free(d);
}
