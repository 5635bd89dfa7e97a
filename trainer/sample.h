// trainer/sample.h: generate text from the model, so a person can see what it learned.
#ifndef MESHMOE_SAMPLE_H
#define MESHMOE_SAMPLE_H
#include "model/model.h"
#include "data/loader.h"
#include "trainer/sampling.h"

// Prompts with the nprompt tokens prompt_ids (the prompt key's, trainer/sampling.h), or with
// the start of the held-out split where there are none, and prints `len` tokens chosen by
// rule (bytes are printed as text when vocab_size is 256, token ids otherwise).
void sample_print(Model *m, const DataLoader *dl, const int *prompt_ids, int nprompt, int len, const SamplingRule *rule);
#endif
