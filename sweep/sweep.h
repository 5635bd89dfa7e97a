// sweep/sweep.h: `./train sweep CONFIG [key=value ...]`, every optimization of the catalog
// toggled against the baseline, losses compared and memory measured (sweep/sweep.c).
#ifndef MESHMOE_SWEEP_H
#define MESHMOE_SWEEP_H

// argv[1] is "sweep", argv[2] the preset. Returns the exit status: 0 when every "bit" row
// is bit-identical and no run failed.
int cmd_sweep(int argc, char **argv);

// argv[1] is "figure": `./train figure KIND OUT.svg ...`, the figures of docs/ (sweep/figure.c).
int cmd_figure(int argc, char **argv);

#endif
