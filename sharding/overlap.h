// sharding/overlap.h: collectives overlapping compute (overlap_collectives,
// docs/optimizations.md#overlap_collectives). Under FSDP every unit's weights are all-gathered just before use
// (sharding/fsdp.h), and the device waits for the gather. With overlap_collectives the
// gather of the NEXT unit is started on a helper thread while the current unit computes:
// a prefetch. The forward prefetches unit u+1 while unit u runs, the backward unit u-1.
//
// What it costs: the next unit's full buffer is held while the current one is in use, so
// the params tag peaks one gathered unit higher. The buffer's lifetime does not depend on
// thread timing: the device thread allocates it when it starts the prefetch (right after
// acquiring the current unit) and it becomes the unit's gathered buffer, freed at that
// unit's release, as without overlap. The helper allocates nothing (an all-gather writes
// straight into the caller's buffer), so the dry-run planner sees the same sequence.
//
// Numerics: the same all-gather of the same shards: the same bits, no sum involved.
//
// Deadlock freedom: a collective is a barrier among the group's threads. The helpers
// gather over a group of their own (mesh_prefetch_group: the fsdp members, another barrier),
// so a helper's all-gather can only meet the other devices' helpers. Every device starts
// the same prefetches in the same order (the layer loop is the same on all of them) and
// waits for one before starting the next, so the helpers' collectives match one to one.
#ifndef MESHMOE_OVERLAP_H
#define MESHMOE_OVERLAP_H

struct Model;
// Start all-gathering unit u in the background (overlap_collectives, under FSDP, unit u held
// by this device, no prefetch already running); otherwise does nothing.
void overlap_prefetch(struct Model *m, int u);
// If unit u is being prefetched: wait for the helper and return the unit's full buffer
// (the caller owns it now); otherwise NULL.
float *overlap_take(struct Model *m, int u);
// Wait for and free a prefetch nobody took (end of a pass), and the state.
void overlap_drain(struct Model *m);
void overlap_free(struct Model *m);

#endif
