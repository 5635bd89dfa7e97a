// data/loader.c: train/eval split and the order in which training windows are visited.
#include "data/loader.h"
#include "core/common.h"

void loader_init(DataLoader *dl, const uint32_t *tokens, size_t n, int S, double eval_fraction) {
    size_t n_eval = (size_t)((double)n * eval_fraction);
    size_t need = (size_t)S + 1;
    if (n_eval < need || n - n_eval < need)
        die("the data set has %zu tokens: too few for a train and an eval split of at least "
            "max_target_length+1 = %zu tokens each with eval_fraction=%g (use more text, or a "
            "smaller max_target_length)", n, need, eval_fraction);
    dl->tokens = tokens;
    dl->ntok = n;
    dl->S = S;
    dl->train_begin = 0;
    dl->train_end = n - n_eval;
    dl->eval_begin = dl->train_end;
    dl->eval_end = n;
}

static int64_t windows(size_t begin, size_t end, int S) {
    // A window of S+1 tokens starts every S tokens (the last target of one window is the
    // first input of the next, so no token is skipped).
    return (int64_t)((end - begin - 1) / (size_t)S);
}

int64_t loader_num_train_windows(const DataLoader *dl) { return windows(dl->train_begin, dl->train_end, dl->S); }
int64_t loader_num_eval_windows(const DataLoader *dl) { return windows(dl->eval_begin, dl->eval_end, dl->S); }

static uint64_t mix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t gcd(uint64_t a, uint64_t b) {
    while (b) { uint64_t t = a % b; a = b; b = t; }
    return a;
}

static void copy_window(const DataLoader *dl, size_t start, int *ids, int *targets) {
    for (int t = 0; t < dl->S; t++) {
        ids[t] = dl->tokens[start + (size_t)t];
        targets[t] = dl->tokens[start + (size_t)t + 1];
    }
}

void loader_train_sequence(const DataLoader *dl, int64_t g, int *ids, int *targets) {
    uint64_t W = (uint64_t)loader_num_train_windows(dl);
    uint64_t e = (uint64_t)g / W, i = (uint64_t)g % W;
    // This epoch's permutation: a multiplier coprime to W and an offset, both from e.
    uint64_t a = W > 1 ? 1 + mix64(2 * e) % (W - 1) : 1;
    while (gcd(a, W) != 1) a = a % (W - 1) + 1;
    uint64_t b = mix64(2 * e + 1) % W;
    uint64_t w = (uint64_t)(((unsigned __int128)a * i + b) % W);
    copy_window(dl, dl->train_begin + (size_t)w * (size_t)dl->S, ids, targets);
}

void loader_eval_sequence(const DataLoader *dl, int64_t i, int *ids, int *targets) {
    if (i < 0 || i >= loader_num_eval_windows(dl))
        die("eval window %lld out of range (%lld windows)", (long long)i, (long long)loader_num_eval_windows(dl));
    copy_window(dl, dl->eval_begin + (size_t)i * (size_t)dl->S, ids, targets);
}
