// pipeline/shift.c: one rotation of the stage outputs (see shift.h).
#include "pipeline/shift.h"
#include "pipeline/pipeline.h"
#include "base/memory.h"
#include "core/common.h"

void shift_init(Shift *sh, int impl, Group *group, int P, int s, int dir, size_t n) {
    memset(sh, 0, sizeof *sh);
    sh->impl = impl;
    sh->group = group;
    sh->nstages = P;
    sh->s = s;
    sh->dir = dir;
    sh->n = n;
    if (impl == PP_PPERMUTE) {   // held in the loop state for the loop's whole life
        sh->send = mem_floats(MEM_COMM, n, dir > 0 ? "ppermute send (shift)" : "ppermute send (shift grad)");
        sh->recv = mem_floats(MEM_COMM, n, dir > 0 ? "ppermute recv (shift)" : "ppermute recv (shift grad)");
    }
}

void shift_free(Shift *sh) {
    mem_free(sh->send);
    mem_free(sh->recv);
    memset(sh, 0, sizeof *sh);
}

float *shift_rotate(Shift *sh, float *out, const int *sends, const char *name) {
    int P = sh->nstages, from = (sh->s - sh->dir + P) % P;
    int perm[256];   // the mesh has at most 256 devices
    for (int r = 0; r < P; r++) perm[r] = sends[r] ? (r + sh->dir + P) % P : -1;
    if (!!out != !!sends[sh->s]) die("internal: stage %d %s a shift output it was not scheduled to", sh->s,
                                     out ? "has" : "lacks");
    size_t bytes = sizeof(float) * sh->n;
    float *got = sends[from] ? mem_floats(MEM_ACTIVATIONS, sh->n, name) : NULL;
    if (sh->impl == PP_PPERMUTE) {
        if (out) { mem_copy(sh->send, out, bytes); mem_free(out); }
        coll_ppermute(sh->group, sh->send, sh->recv, bytes, perm);
        if (got) mem_copy(got, sh->recv, bytes);
    } else {
        // The old row goes straight into the neighbour's new row; then the old row is gone.
        coll_ppermute(sh->group, out, got, bytes, perm);
        mem_free(out);
    }
    return got;
}
