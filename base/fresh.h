// base/fresh.h: gradient memory known to hold zeros. A training step zeroes its gradient
// buffer and then adds every weight's gradient into it (trainer/step.c); a weight gradient's
// product asks here whether its block is still untouched since that zeroing, and if so
// writes its result onto 0.0f instead of reading the zeros back to add it to them: the same
// bits (0.0f + x is x + 0.0f), without a pass over cold memory (an add onto C would read
// each of its rows back from memory, 4 KiB apart: kernels/cpu/gemm_tree.c).
//
// Per device (base/memory.h's Device): fresh_arm names the region just zeroed; fresh_claim
// answers for a block [p, p + n) and records it, so a second product into the same block
// (a pipeline stage's next microbatch) adds onto the first as before; the leaf trees of
// base/context.c (context chunks, vocabulary tiles) record the blocks they add onto
// (fresh_touch); fresh_disarm ends the window, after the step's backward passes. A block
// outside the armed region is never fresh. The other writers of gradients (norm scales, the
// embedding's rows, the collectives) write blocks that no claim covers, or write after the
// claims, so a claimed block holds zeros when claimed: the sanitizer builds and
// MESHMOE_POISON_UNINIT check it, reading the block back (make asan, the tests under them).
#ifndef MESHMOE_FRESH_H
#define MESHMOE_FRESH_H
#include <stddef.h>

// The current device's region [p, p + n floats) now holds zeros; earlier claims are forgotten.
void fresh_arm(float *p, size_t n);
// 1 if [p, p + n floats) lies in the armed region and overlaps no block claimed since
// fresh_arm (it then holds zeros, and the caller writes all of it); 0 otherwise. Either
// way a block in the region is recorded as claimed.
int fresh_claim(float *p, size_t n);
// Records [p, p + n floats) as written (a leaf tree's sum added onto it, base/context.c),
// so that no later claim over it is fresh.
void fresh_touch(float *p, size_t n);
// The window ends: nothing is fresh until the next fresh_arm.
void fresh_disarm(void);

#endif
