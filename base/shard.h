// base/shard.h: the units of the parameter layout and each device's share of them:
// which floats of the flat state a device holds under data parallelism, FSDP (ZeRO-3) and
// ZeRO-1 (sharding/fsdp.h says how the strategies use it). Pure arithmetic on the mesh
// coordinates; nothing here moves data.
#ifndef MESHMOE_SHARD_H
#define MESHMOE_SHARD_H
#include <stddef.h>
#include "base/mesh.h"
#include "base/collectives.h"
#include "base/config.h"

// Units are padded to a multiple of F*Z*NORM_CHUNK floats when split (a round size).
#define NORM_CHUNK 256

typedef struct {
    int nunits;
    size_t *unit_off;        // (nunits) first float of the unit in the global flat layout
    size_t *unit_size;       // (nunits) floats in the unit
    size_t *unit_pad;        // (nunits) padded size (a multiple of F*Z*NORM_CHUNK, or = size)
    size_t *local_off;       // (nunits) where this device's shard of the unit starts locally
    size_t local_n;          // floats of params (and of grads) held per device
    int F, frank;            // fsdp size and this device's rank along it
    int Z, zrank;            // ZeRO-1: pieces of each shard (data size) and this device's piece
    int nbatch, brank;       // devices sharing the batch (data*fsdp*expert) and this device's rank
    unsigned char *here;     // (nunits) 1 if this device holds the unit: all of them, except under
                             // pipeline parallelism, where a stage holds its own (pipeline/)
    int nctx, crank;         // devices sharing each sequence (context) and this device's part
    int grad_slots;          // gradients kept per unit: one per chunk (base/context.h), or 1
    Group *fsdp, *data, *expert, *batch, *context;
    Group *tokens;           // every device with tokens of the step: data x fsdp x expert x context
} StateShard;

// The units of the layout and this device's share (mesh_current(), or one device).
void shard_init(StateShard *s, const Config *c, const int *spec_unit, const size_t *spec_off,
                const size_t *spec_size, int nspecs);
void shard_free(StateShard *s);
static inline int shard_is_split(const StateShard *s) { return s->F * s->Z > 1; }
// The shard of unit u's parameters this device holds: global elements [first, first+n)
// (n = 0 for a unit on another pipeline stage).
size_t shard_first(const StateShard *s, int u);
size_t shard_len(const StateShard *s, int u);
// ZeRO-1's piece of a shard of len floats (shard_optimizer_over_data): the part this data
// replica updates and needs summed, from *off on; the whole shard when Z = 1.
static inline size_t shard_zero1_piece(const StateShard *s, size_t len, size_t *off) {
    *off = len / (size_t)s->Z * (size_t)s->zrank;
    return len / (size_t)s->Z;
}
// Whether `dev` holds the first copy of something split over the mesh axes in `split` (a
// bit mask): coordinate 0 along every axis that holds replicas of it (data, context,
// tensor, expert). One device per distinct piece answers yes (mesh NULL: one device).
int shard_first_copy(const Mesh *mesh, int dev, unsigned split);

#endif
