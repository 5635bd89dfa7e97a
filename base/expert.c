// base/expert.c: the all-to-all exchange of routed rows (see expert.h).
#include "base/expert.h"
#include "base/mesh.h"
#include "base/memory.h"
#include "core/common.h"

static Group *expert_group(void) { return mesh_axis_group(AX_EXPERT); }

int ep_size(void) { return mesh_axis_size(AX_EXPERT); }

int ep_rank(void) { return mesh_axis_rank(AX_EXPERT); }

// Byte offsets and sizes of `rows[q]` rows of `w` bytes each, packed back to back.
static void layout(size_t *off, size_t *bytes, const size_t *rows, int n, size_t w) {
    size_t at = 0;
    for (int q = 0; q < n; q++) { off[q] = at; bytes[q] = rows[q] * w; at += bytes[q]; }
}

ExpertDispatch *ep_plan(const int *row_start, const int *row_token, int E, int K, int T) {
    ExpertDispatch *d = (ExpertDispatch *)mem_alloc(MEM_ACTIVATIONS, sizeof *d, "expert dispatch plan");
    d->group = expert_group();
    d->ep = ep_size();
    d->rank = ep_rank();
    d->El = E / d->ep;
    d->T = T;
    int ep = d->ep, El = d->El;
    d->cap = ep * T * MM_MIN(K, El);
    d->send_rows = (size_t *)mem_alloc(MEM_ACTIVATIONS, sizeof(size_t) * ep, "expert send rows");
    d->send_first = (size_t *)mem_alloc(MEM_ACTIVATIONS, sizeof(size_t) * ep, "expert send first");
    d->recv_rows = (size_t *)mem_alloc(MEM_ACTIVATIONS, sizeof(size_t) * ep, "expert recv rows");
    d->recv_count = (int *)mem_alloc(MEM_ACTIVATIONS, sizeof(int) * (size_t)ep * El, "expert recv counts");
    // 1. Counts: to rank q, the rows of each of q's experts.
    int *send_count = (int *)mem_alloc(MEM_COMM, sizeof(int) * (size_t)ep * El, "expert send counts");
    for (int q = 0; q < ep; q++) {
        d->send_first[q] = (size_t)row_start[q * El];
        d->send_rows[q] = (size_t)(row_start[(q + 1) * El] - row_start[q * El]);
        for (int e = 0; e < El; e++) send_count[q * El + e] = row_start[q * El + e + 1] - row_start[q * El + e];
    }
    size_t *cnt_off = malloc(sizeof(size_t) * ep), *cnt_bytes = malloc(sizeof(size_t) * ep);
    for (int q = 0; q < ep; q++) { cnt_off[q] = sizeof(int) * (size_t)q * El; cnt_bytes[q] = sizeof(int) * El; }
    coll_all_to_all(d->group, send_count, cnt_off, cnt_bytes, d->recv_count, cnt_off, cnt_bytes);
    mem_free(send_count);
    d->nrecv = 0;
    for (int p = 0; p < ep; p++) {
        d->recv_rows[p] = 0;
        for (int e = 0; e < El; e++) d->recv_rows[p] += (size_t)d->recv_count[p * El + e];
        d->nrecv += (int)d->recv_rows[p];
    }
    // 2. The tokens of the rows, so the owner knows each row's leaf.
    size_t *s_off = malloc(sizeof(size_t) * ep), *s_bytes = malloc(sizeof(size_t) * ep);
    size_t *r_off = malloc(sizeof(size_t) * ep), *r_bytes = malloc(sizeof(size_t) * ep);
    for (int q = 0; q < ep; q++) { s_off[q] = sizeof(int) * d->send_first[q]; s_bytes[q] = sizeof(int) * d->send_rows[q]; }
    layout(r_off, r_bytes, d->recv_rows, ep, sizeof(int));
    int *tok = (int *)mem_alloc(MEM_COMM, sizeof(int) * (size_t)d->cap, "expert recv tokens");
    coll_all_to_all(d->group, row_token, s_off, s_bytes, tok, r_off, r_bytes);
    // 3. Expert-major order: local expert e's rows from rank 0, then rank 1, ... (each in
    //    token order): the group's token order.
    d->row_start = (int *)mem_alloc(MEM_ACTIVATIONS, sizeof(int) * (size_t)(El + 1), "expert row start");
    d->from = (int *)mem_alloc(MEM_ACTIVATIONS, sizeof(int) * (size_t)d->cap, "expert row source");
    d->row_token = (int *)mem_alloc(MEM_ACTIVATIONS, sizeof(int) * (size_t)d->cap, "expert row token");
    int r = 0;
    for (int e = 0; e < El; e++) {
        d->row_start[e] = r;
        for (int p = 0; p < ep; p++) {
            int at = (int)(r_off[p] / sizeof(int));   // rank p's block, then its experts before e
            for (int e2 = 0; e2 < e; e2++) at += d->recv_count[p * El + e2];
            for (int i = 0; i < d->recv_count[p * El + e]; i++, r++) {
                if (mem_dry()) continue;   // a dry run needs the counts only
                d->from[r] = at + i;
                d->row_token[r] = p * T + tok[at + i];
            }
        }
    }
    d->row_start[El] = r;
    mem_free(tok);
    free(cnt_off); free(cnt_bytes); free(s_off); free(s_bytes); free(r_off); free(r_bytes);
    return d;
}

void ep_send(ExpertDispatch *d, const float *rows, float *out, int w) {
    int ep = d->ep;
    size_t s_off[ep], s_bytes[ep], r_off[ep], r_bytes[ep], wb = sizeof(float) * (size_t)w;
    for (int q = 0; q < ep; q++) { s_off[q] = d->send_first[q] * wb; s_bytes[q] = d->send_rows[q] * wb; }
    layout(r_off, r_bytes, d->recv_rows, ep, wb);
    float *stage = mem_floats(MEM_COMM, (size_t)d->cap * w, "expert all-to-all receive");
    coll_all_to_all(d->group, rows, s_off, s_bytes, stage, r_off, r_bytes);
    for (int r = 0; r < (mem_dry() ? 0 : d->nrecv); r++) memcpy(out + (size_t)r * w, stage + (size_t)d->from[r] * w, wb);
    mem_free(stage);
}

void ep_return(ExpertDispatch *d, const float *in, float *rows, int w) {
    int ep = d->ep;
    size_t s_off[ep], s_bytes[ep], r_off[ep], r_bytes[ep], wb = sizeof(float) * (size_t)w;
    float *stage = mem_floats(MEM_COMM, (size_t)d->cap * w, "expert all-to-all send");
    for (int r = 0; r < (mem_dry() ? 0 : d->nrecv); r++) memcpy(stage + (size_t)d->from[r] * w, in + (size_t)r * w, wb);
    layout(s_off, s_bytes, d->recv_rows, ep, wb);
    for (int q = 0; q < ep; q++) { r_off[q] = d->send_first[q] * wb; r_bytes[q] = d->send_rows[q] * wb; }
    coll_all_to_all(d->group, stage, s_off, s_bytes, rows, r_off, r_bytes);
    mem_free(stage);
}

void ep_free(ExpertDispatch *d) {
    if (!d) return;
    mem_free(d->send_rows); mem_free(d->send_first); mem_free(d->recv_rows); mem_free(d->recv_count);
    mem_free(d->row_start); mem_free(d->from); mem_free(d->row_token);
    mem_free(d->x); mem_free(d->h0); mem_free(d->h1);
    mem_free(d);
}
