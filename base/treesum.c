// base/treesum.c: pairwise summation of leaf contributions in a fixed tree order; each
// merge adds the later block into the earlier one (kernels/sum.h:tree_add).
#include "base/treesum.h"    // TreeSum, LeafSum, this file's functions
#include "kernels/kernels.h" // kern()->sum: the elementwise adds of the merges
#include "core/common.h"     // die

void treesum_begin(TreeSum *t, size_t n, MemTag tag, const char *name) {
    memset(t, 0, sizeof(*t));
    t->n = n;
    t->tag = tag;
    t->name = name;
}

// The next leaf's buffer: the spare one if a merge freed one, else a new allocation;
// zeroed when the caller adds into it.
static float *next_leaf(TreeSum *t, int zero) {
    if (t->spare) {
        t->leaf = t->spare;
        t->spare = NULL;
        if (zero) mem_zero(t->leaf, t->n * sizeof(float));
    } else {
        t->leaf = zero ? mem_floats(t->tag, t->n, t->name) : mem_floats_uninit(t->tag, t->n, t->name);
    }
    return t->leaf;
}
float *treesum_leaf(TreeSum *t) { return next_leaf(t, 1); }

float *treesum_leaf_onto(TreeSum *t, int *onto) {
    *onto = t->onto = t->level[0] != NULL;
    return t->onto ? t->level[0] : next_leaf(t, 0);
}

void treesum_push(TreeSum *t) {
    // Like incrementing a binary counter: while a block of the same size is waiting,
    // merge (earlier + later) and carry the result one level up.
    float *carry = t->leaf;
    t->leaf = NULL;
    int k = 0;
    if (t->onto) {   // the first merge is done: level 0 holds it
        carry = t->level[0];
        t->level[0] = NULL;
        t->onto = 0;
        k = 1;
    }
    while (t->level[k]) {
        kern()->sum->tree_add(t->level[k], carry, t->n);
        if (t->spare) mem_free(t->spare);
        t->spare = carry;
        carry = t->level[k];
        t->level[k] = NULL;
        k++;
        if (k >= TREESUM_LEVELS) die("internal: treesum overflow");
    }
    t->level[k] = carry;
    t->count++;
}

void treesum_end(TreeSum *t, float *dst) {
    // Leftover blocks (when the leaf count is not a power of two) are joined from the
    // lowest level up, each time as (earlier block) + (everything after it). This is the
    // tree whose left subtree holds the largest power of two of leaves below the count,
    // the same tree as tree_sum_double() below.
    float *acc = NULL;
    for (int k = 0; k < TREESUM_LEVELS; k++) {
        if (!t->level[k]) continue;
        if (acc) { kern()->sum->tree_add(t->level[k], acc, t->n); mem_free(acc); }
        acc = t->level[k];
        t->level[k] = NULL;
    }
    if (acc) { kern()->sum->tree_add(dst, acc, t->n); mem_free(acc); }
    mem_free(t->spare);
    mem_free(t->leaf);
    t->spare = t->leaf = NULL;
}

double tree_sum_double(const double *x, long n) {
    if (n <= 0) return 0.0;
    if (n == 1) return x[0];
    long h = 1;
    while (h * 2 < n) h *= 2;   // the largest power of two below n
    return tree_sum_double(x, h) + tree_sum_double(x + h, n - h);
}
