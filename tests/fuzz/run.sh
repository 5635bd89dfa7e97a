#!/usr/bin/env bash
# tests/fuzz/run.sh SECONDS: runs every libFuzzer harness built by `make fuzz` for SECONDS
# each, two at a time, from the committed seeds (seeds/NAME) with the dictionary NAME.dict.
# New inputs go to a scratch corpus under build/fuzz/, never into the seeds. A target passes
# when it ran and found nothing: no crash, sanitizer report, leak or timeout. A finding is
# kept in build/fuzz/artifacts/ and its report printed.
set -u
cd "$(dirname "$0")/../.."
SECONDS_EACH=${1:-60}
. tests/lib.sh
names=()
for f in tests/fuzz/fuzz_*.c; do n=$(basename "$f" .c); names+=("${n#fuzz_}"); done
mkdir -p build/fuzz/artifacts
fuzz_one() {   # fuzz_one NAME: runs the target, its log in build/fuzz/NAME.log
    local name=$1 corpus=build/fuzz/corpus/$1
    rm -rf "$corpus"; mkdir -p "$corpus"
    # detect_leaks: the harnesses free what they allocate, refused inputs included (die jumps
    # back through the clean-up hook); -rss_limit_mb bounds a reader that allocates too much.
    ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    build/fuzz/fuzz_$name "$corpus" tests/fuzz/seeds/$name -dict=tests/fuzz/$name.dict \
        -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 -max_len=8192 -print_final_stats=1 \
        -artifact_prefix=build/fuzz/artifacts/$name- > build/fuzz/$name.log 2>&1
    echo $? > build/fuzz/$name.rc
}
# Two at a time: on 2 cores the five targets take about 3 x SECONDS.
for ((i = 0; i < ${#names[@]}; i += 2)); do
    fuzz_one "${names[i]}" &
    [ $((i + 1)) -lt ${#names[@]} ] && fuzz_one "${names[i + 1]}" &
    wait
done
for name in "${names[@]}"; do
    rc=$(cat build/fuzz/$name.rc)
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' build/fuzz/$name.log)
    if [ "$rc" -eq 0 ] && [ "${execs:-0}" -gt 0 ]; then
        pass "fuzz $name: $execs executions in $SECONDS_EACH s, 0 crashes"
    else
        fail "fuzz $name: exit $rc after ${execs:-?} executions; report:"
        grep -E -A25 'ERROR|runtime error|deadly signal|Test unit written' build/fuzz/$name.log | head -60
    fi
done
summary
