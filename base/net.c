// base/net.c: which Net the run has (base/net.h); none unless a transport set one.
#include "base/net.h"

static const Net *cur;

const Net *net_current(void) { return cur; }
void net_set(const Net *net) { cur = net; }
