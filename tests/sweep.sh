#!/usr/bin/env bash
# tests/sweep.sh: `./train sweep` (sweep/sweep.c) on three rows that exist in this build:
# the table has a line for each, each bit-identical to its baseline, and the sweep exits 0;
# a row whose key the build lacks is printed as not implemented (and one that it has is
# run); a bad sweep_only names the problem in one message.
set -u
cd "$(dirname "$0")/.."
source tests/lib.sh
TRAIN=${TRAIN:-./train}
T=$(mktemp -d /tmp/meshmoe-sweep-test.XXXXXX)
trap 'rm -rf "$T"' EXIT
SMALL="sweep_steps=2 max_target_length=32 per_device_batch_size=4"

$TRAIN sweep configs/mixtral-tiny.yml sweep_only=pipeline_shift_impl,shard_optimizer_over_data,ici_fsdp_parallelism \
    $SMALL > $T/out.md 2> $T/err
rc=$?
cat $T/out.md
check "sweep of 3 rows exits 0 (exit $rc)" [ "$rc" -eq 0 ]
for key in pipeline_shift_impl shard_optimizer_over_data ici_fsdp_parallelism; do
    line=$(grep "| \`$key\` |" $T/out.md)
    check "row $key is in the table" [ -n "$line" ]
    check "row $key: bit class, bit-identical" grep -q "| bit | bit-identical |" <<< "$line"
done
check "the table has exactly 3 result lines" [ "$(grep -c '^| [0-9]' $T/out.md)" -eq 3 ]
check "6 runs: 3 baselines + 3 toggles (stage=2, 1 device, data=2 baselines)" [ "$(grep -c '^sweep: run' $T/err)" -eq 6 ]
# Progress on stderr: each row started and finished, the runs counted ahead equal to the
# runs made; nothing of it on stdout.
check "progress: 3 rows started" [ "$(grep -c '^\[[1-3]/3\] row [0-9]* [a-z_]* \.\.\.$' $T/err)" -eq 3 ]
check "progress: 3 rows done, with the time so far" [ "$(grep -c '^\[[1-3]/3\] row .* done in [0-9.]* s, elapsed ' $T/err)" -eq 3 ]
check "progress: the 6 runs were counted ahead (run 6 of 6, nothing left)" \
    bash -c "grep -q '^sweep: run 6 of 6: ' $T/err && tail -1 $T/err | grep -q 'nothing left\$'"
check "progress: none of it on stdout" bash -c "! grep -q -e '^\[' -e '^sweep: run' $T/out.md"

# The skip_trivial_specs row, selected by its catalog number (2), is data: it runs when the
# build knows its key, and says so when it does not.
$TRAIN sweep configs/mixtral-tiny.yml sweep_only=2 $SMALL > $T/row2.md 2>&1
if $TRAIN --help-config | grep -q '^skip_trivial_specs '; then
    check "skip_trivial_specs exists: its row ran" grep -q '| 2 | `skip_trivial_specs` | [a-z]* (baseline' $T/row2.md
else
    check "skip_trivial_specs missing: 'not implemented in this build'" grep -q 'not implemented in this build' $T/row2.md
fi

# The exit status follows the table: with matmul_impl=openblas (not row-stable) fsdp=2 may
# differ from one device in the last bits; then the row says so and the sweep exits 1.
$TRAIN sweep configs/mixtral-tiny.yml sweep_only=ici_fsdp_parallelism matmul_impl=openblas $SMALL > $T/blas.md 2>&1
rc=$?
if grep -q 'NOT bit-identical' $T/blas.md; then
    check "openblas: fsdp=2 not bit-identical, so the sweep exits 1 (exit $rc)" [ "$rc" -eq 1 ]
else
    check "openblas: fsdp=2 bit-identical here, so the sweep exits 0 (exit $rc)" [ "$rc" -eq 0 ]
fi

expect_error "bad sweep_only key" "sweep_only: 'fsdp_typo' is no row of the sweep" \
    $TRAIN sweep configs/mixtral-tiny.yml sweep_only=ici_fsdp_parallelism,fsdp_typo
expect_error "mesh keys are the rows' choice" "sets the mesh" \
    $TRAIN sweep configs/mixtral-tiny.yml ici_fsdp_parallelism=2
summary
