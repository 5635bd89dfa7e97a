// trainer/sampling.h: the next token from the last position's logits, by MaxText's decode
// strategies (decode_sampling_strategy), and the prompt key read as tokens.
#ifndef MESHMOE_SAMPLING_H
#define MESHMOE_SAMPLING_H
#include "base/config.h"

typedef struct {
    DecodeSampling strategy;
    int top_k;           // topk: the largest logits drawn among
    float nucleus_p;     // nucleus: the probability mass they hold
    float temperature;   // weighted, topk, nucleus: the draw is from softmax(z / temperature)
} SamplingRule;

SamplingRule sampling_rule(const Config *c);

// The token chosen from z (V logits) with u, a uniform draw in [0, 1) (read by every
// strategy but greedy). p: (V) floats of scratch.
int sampling_choose(const float *z, int V, const SamplingRule *r, double u, float *p);

// The prompt key's tokens into out (room for strlen(prompt) of them; NULL: only counted),
// their count returned. "[ID][ID]..." (blanks and '|' between them allowed, as the sample
// prints ids) are token ids on any data; any other text is its bytes, where the data's tokens
// are bytes (bytes = 1), with \n, \t and \\ for a newline, a tab and a backslash. Dies naming
// the key on an id or byte outside the vocabulary, or a text where the tokens are not bytes.
int sampling_prompt(const char *prompt, int vocab, int bytes, int *out);
#endif
