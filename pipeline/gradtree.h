// pipeline/gradtree.h: the canonical tree sum (base/treesum.h) over leaves that arrive in
// any order.
//
// A pipeline finishes the microbatches of a weight in the order of its schedule: MaxText's
// loop runs the backward iterations in reverse (microbatch M-1 first), 1F1B in order, and
// a circular pipeline visits a chunk's microbatches at other ticks than its neighbour's.
// The step's gradient must still be the sum along the fixed tree over microbatch 0..M-1
// (the left subtree holds the largest power of two of leaves below the count, as
// tree_sum_double and treesum_end do). So each leaf goes to its place in the tree: when a
// node's two children are both complete they are added (float addition is commutative,
// so which buffer receives the sum does not change a bit) and the sum moves up; a child
// whose sibling is not there yet waits. Leaves in order need log2(n)+1 buffers at most,
// as TreeSum; in reverse order the same. One of them is the destination itself: the first
// leaf is computed straight into it (it starts at zero), and every sum that involves it
// stays in it, so the total ends there without a copy.
#ifndef MESHMOE_GRADTREE_H
#define MESHMOE_GRADTREE_H
#include <stddef.h>

typedef struct {
    int n;              // leaves
    size_t len;         // floats per leaf
    int nslots;         // node ids (heap numbering: children of i are 2i+1, 2i+2)
    float **wait;       // (nslots) a complete subtree waiting for its sibling, or NULL
    float *root;        // the total, once every leaf is in
    float *home;        // the destination (zero at the start), lent to the first leaf
    int home_lent;
    int pushed;
} GradTree;

// dst (len floats, all zero) receives the total.
void gradtree_begin(GradTree *t, int n, size_t len, float *dst);
// A zeroed buffer of len floats for the next leaf: dst the first time, then mem_floats.
float *gradtree_buffer(GradTree *t, const char *name);
// Leaf `leaf` (0 .. n-1) in a buffer from gradtree_buffer; the tree takes it over.
void gradtree_push(GradTree *t, int leaf, float *buf);
// Checks that every leaf came; the total is in dst. Frees everything.
void gradtree_end(GradTree *t);

#endif
