// model/dims.h: the dimensions one device computes with.
//
// The Config holds the model's global dimensions (base_num_query_heads, base_mlp_dim,
// vocab_size, ...), the same on every device. Tensor parallelism (base/tensor.h) gives
// each device of the `tensor` axis a slice of the heads, of the MLP and expert widths and
// of the vocabulary, so the buffers a layer allocates and the matmuls it runs have the
// local sizes. Those sizes live here, apart from the Config, so that a layer reads global
// counts from `c` and per-device counts from `ld` and the reader always knows which.
// Everything else (embedding width, head dims, expert count, sequence length) is not
// split by `tensor` and is read from the Config. One device (tensor = 1): every field
// equals its Config key.
#ifndef MESHMOE_DIMS_H
#define MESHMOE_DIMS_H
#include "base/config.h"

typedef struct {
    int num_query_heads;   // base_num_query_heads / tensor: this device's query heads
    int num_kv_heads;      // base_num_kv_heads / tensor; MLA: num_query_heads (every query
                           // head has its own key and value head, made from the latent)
    int mlp_dim;           // base_mlp_dim / tensor: the dense layers' hidden width (0 without dense layers)
    int expert_dim;        // cfg_expert_dim / tensor: each routed and shared expert's hidden width
    int vocab_size;        // vocab_size / tensor: this device's rows of the embedding, columns of the logits
    int vocab_first;       // the global token id of this device's first vocabulary row
} LocalDims;

// The dimensions of the device at position `rank` of a tensor axis of size `tensor`.
// The splits must be exact. Model init checks that first, naming the tensor or the
// numbers (the layout's cuts in model/params.c, base/tensor.c:tp_check); a caller that
// skips those checks gets a split that leaves a remainder refused here, naming the key.
LocalDims local_dims(const Config *c, int tensor, int rank);
#endif
