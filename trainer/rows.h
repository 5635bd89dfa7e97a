// trainer/rows.h: one row of the optimization catalog (docs/optimizations.md) as data: the key
// the sweep toggles, the values it tries, the mesh that exercises it, its numerics class
// and a line of why. trainer/rows.c holds the table; sweep/sweep.c runs it.
#ifndef MESHMOE_SWEEP_ROWS_H
#define MESHMOE_SWEEP_ROWS_H

typedef enum {
    SW_BIT,     // must give a bit-identical loss trajectory to the baseline
    SW_TOL,     // changes rounding or math on purpose: the difference is reported
    SW_OTHER,   // a different algorithm (another optimizer): the difference is reported
} SweepClass;

typedef struct {
    const char *num;       // the catalog's row number ("29" may have several entries)
    const char *key;       // the config key toggled; "mesh" for the mesh-shape sweep
    const char *values;    // comma-separated values tried; one equal to the baseline's is skipped
    const char *mesh;      // space-separated key=value set on both runs: the mesh that exercises
                           // the switch and any prerequisite ("@stages": the pipeline's stage count)
    SweepClass cls;
    const char *why;       // what the switch saves, and why
    const char *why_same;  // why the measured peak may not move on the tiny presets
} SweepRow;

// The rows, in catalog order; *n receives their count.
const SweepRow *sweep_rows(int *n);
// "bit", "tol" or "other".
const char *sweep_class_name(SweepClass c);

#endif
