// trainer/sample.h: generate text from the model, so a person can see what it learned.
#ifndef MESHMOE_SAMPLE_H
#define MESHMOE_SAMPLE_H
#include "model/model.h"
#include "data/loader.h"

// Prompts with the start of the held-out split and prints `len` sampled tokens (bytes are
// printed as text when vocab_size is 256, token ids otherwise).
void sample_print(Model *m, const DataLoader *dl, int len, float temperature);
#endif
