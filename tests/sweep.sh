#!/usr/bin/env bash
# tests/sweep.sh: `./train sweep` (sweep/sweep.c) on three rows that exist in this build:
# the table has a line for each, each bit-identical to its baseline, and the sweep exits 0;
# a row whose key the build lacks is printed as not implemented (and one that it has is
# run); a bad sweep_only names the problem in one message. The keys of a run's own files are
# refused before any run, nothing written; a signal stops the run in flight and removes the
# sweep's temporary directory.
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

# The keys of a run's own files: every run would write the same file in turn, stop without
# training, or start elsewhere than its baseline. Each refused before the first run, naming
# the key; nothing written.
ONE="sweep_only=1 sweep_steps=1"
expect_error "memory_trace refused" "sweep: memory_trace=$T/tr.csv: every run of the sweep would write" \
    $TRAIN sweep configs/mixtral-tiny.yml $ONE memory_trace=$T/tr.csv
expect_error "dump_parity refused" "sweep: dump_parity=$T/dp: a run with it writes the dump and exits without training" \
    $TRAIN sweep configs/mixtral-tiny.yml $ONE dump_parity=$T/dp parity_steps=1
expect_error "load_checkpoint refused, before its path is checked" "sweep: load_checkpoint=$T/nope.st: every run" \
    $TRAIN sweep configs/mixtral-tiny.yml $ONE load_checkpoint=$T/nope.st
expect_error "save_checkpoint refused" "sweep: save_checkpoint=$T/sv.st: the sweep's runs save nothing" \
    $TRAIN sweep configs/mixtral-tiny.yml $ONE save_checkpoint=$T/sv.st
expect_error "metrics_file refused" "sweep: metrics_file=$T/mf.jsonl: the sweep keeps each run's metrics" \
    $TRAIN sweep configs/mixtral-tiny.yml $ONE metrics_file=$T/mf.jsonl
expect_error "dry_run refused" "sweep: dry_run=true: a dry run computes nothing" \
    $TRAIN sweep configs/mixtral-tiny.yml $ONE dry_run=true
expect_error "prompt refused" "sweep: prompt=hello: the sweep's runs sample nothing" \
    $TRAIN sweep configs/mixtral-tiny.yml $ONE prompt=hello
for f in tr.csv dp sv.st mf.jsonl; do check "refused: no $f written" [ ! -e "$T/$f" ]; done

# A signal (SIGINT to the process group, as a terminal's ^C sends it; SIGTERM or SIGHUP to
# the sweep alone): the run in flight is stopped and waited for, the temporary directory
# (read from the run's metrics_file argument) removed, one line said, exit 128 + the signal.
mkdir -p "$T/tmp"
for sig in INT:130 TERM:143 HUP:129; do
    name=${sig%:*} want=${sig#*:} child= dir=
    TMPDIR=$T/tmp setsid $TRAIN sweep configs/mixtral-tiny.yml sweep_only=1 sweep_steps=60 > /dev/null 2> "$T/sig.err" &
    pid=$!
    for _ in $(seq 100); do child=$(pgrep -P "$pid" | head -1); [ -n "$child" ] && break; sleep 0.1; done
    [ -n "$child" ] && dir=$(tr '\0' '\n' < "/proc/$child/cmdline" | sed -n 's|^metrics_file=\(.*\)/run0.jsonl$|\1|p')
    for _ in $(seq 100); do [ -e "$dir/run0.jsonl" ] && break; sleep 0.1; done   # its first step done: training
    if [ "$name" = INT ]; then kill -INT -- "-$pid"; else kill "-$name" "$pid"; fi
    wait "$pid"; rc=$?
    check "SIG$name: the run and its directory were seen ('$dir')" [ -n "$child" -a -n "$dir" ]
    check "SIG$name: exit $rc, wanted $want" [ "$rc" -eq "$want" ]
    check "SIG$name: one line, 'interrupted by SIG$name'" bash -c "[ \$(grep -c '^meshmoe:' $T/sig.err) -eq 1 ] &&
        grep -q '^meshmoe: sweep: interrupted by SIG$name' $T/sig.err"
    check "SIG$name: the temporary directory is gone" [ -n "$dir" -a ! -e "$dir" ]
    check "SIG$name: the run is gone" bash -c "[ -n '$child' ] && ! kill -0 '$child' 2>/dev/null"
    [ -n "$child" ] && kill "$child" 2>/dev/null   # (a run left running would be ended here)
done
check "nothing left under TMPDIR" [ -z "$(ls -A "$T/tmp")" ]
summary
