// kernels/backend.c: which backend a device computes with (kernels/kernels.h).
#include "kernels/kernels.h"

static const Backend *process_default = &backend_cpu;
static _Thread_local const Backend *mine;

const Backend *kern(void) { return mine ? mine : process_default; }
void kern_use_default(const Backend *b) { process_default = b; }
void kern_use(const Backend *b) { mine = b; }

void kern_bind(int device, int slot) { if (kern()->bind) kern()->bind(device, slot); }
void kern_unbind(void) { if (kern()->unbind) kern()->unbind(); }
void kern_sync(void) { if (kern()->sync) kern()->sync(); }
