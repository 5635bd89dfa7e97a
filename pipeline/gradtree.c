// pipeline/gradtree.c: the canonical tree over leaves pushed in any order (gradtree.h).
#include "pipeline/gradtree.h"
#include "base/memory.h"
#include "kernels/kernels.h"
#include "core/common.h"

void gradtree_begin(GradTree *t, int n, size_t len, float *dst) {
    memset(t, 0, sizeof *t);
    t->n = n;
    t->len = len;
    t->home = dst;
    int depth = 0;
    while ((1 << depth) < n) depth++;
    t->nslots = 1 << (depth + 2);   // the tree is at most depth + 1 levels deep
    t->wait = calloc((size_t)t->nslots, sizeof(float *));
}

// The split of the leaves [lo, hi) of a node: the left child takes the largest power of
// two below hi - lo.
static int split(int lo, int hi) {
    int h = 1;
    while (2 * h < hi - lo) h *= 2;
    return lo + h;
}

float *gradtree_buffer(GradTree *t, const char *name) {
    if (!t->home_lent) { t->home_lent = 1; return t->home; }
    return mem_floats(MEM_GRADS, t->len, name);
}

void gradtree_push(GradTree *t, int leaf, float *buf) {
    if (leaf < 0 || leaf >= t->n) die("internal: gradient tree leaf %d of %d", leaf, t->n);
    // The path from the root down to the leaf.
    int path[64], depth = 0, id = 0, lo = 0, hi = t->n;
    while (hi - lo > 1) {
        path[depth++] = id;
        int mid = split(lo, hi);
        if (leaf < mid) { hi = mid; id = 2 * id + 1; }
        else { lo = mid; id = 2 * id + 2; }
    }
    // Up again: add to a waiting sibling, or wait for it.
    float *cur = buf;
    while (depth > 0) {
        int sibling = id % 2 ? id + 1 : id - 1;
        if (!t->wait[sibling]) { t->wait[id] = cur; t->pushed++; return; }
        float *other = t->wait[sibling];
        t->wait[sibling] = NULL;
        if (cur == t->home) { float *x = cur; cur = other; other = x; }   // the sum stays in the destination
        kern()->sum->tree_add(other, cur, t->len);   // left + right == right + left
        mem_free(cur);
        cur = other;
        id = path[--depth];
    }
    t->root = cur;
    t->pushed++;
}

void gradtree_end(GradTree *t) {
    if (t->pushed != t->n || t->root != t->home) die("internal: gradient tree has %d of %d leaves", t->pushed, t->n);
    free(t->wait);
    memset(t, 0, sizeof *t);
}
