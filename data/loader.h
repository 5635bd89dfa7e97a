// data/loader.h: cuts the token stream into training and eval sequences.
//
// The last eval_fraction of the tokens is held out. Each split is cut into
// non-overlapping windows of S+1 tokens (inputs are the first S, targets the last S).
// Training sequence number g (counting over all steps and all devices) is a pure function
// of g: epoch e = g / W visits all W windows once, in an order given by an affine
// permutation i -> (a_e * i + b_e) mod W with a_e coprime to W. A pure function of g is
// what makes resuming from a checkpoint bit-identical, and what lets every device of a
// mesh pick its own sequences without talking to the others.
#ifndef MESHMOE_LOADER_H
#define MESHMOE_LOADER_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const uint32_t *tokens;
    size_t ntok;
    int S;
    size_t train_begin, train_end;   // [begin, end) token ranges
    size_t eval_begin, eval_end;
} DataLoader;

void loader_init(DataLoader *dl, const uint32_t *tokens, size_t n, int S, double eval_fraction);
int64_t loader_num_train_windows(const DataLoader *dl);
// ids, targets: (S). Sequence g of the training stream.
void loader_train_sequence(const DataLoader *dl, int64_t g, int *ids, int *targets);
int64_t loader_num_eval_windows(const DataLoader *dl);
// ids, targets: (S). Eval window i, 0 <= i < loader_num_eval_windows.
void loader_eval_sequence(const DataLoader *dl, int64_t i, int *ids, int *targets);

#endif
