# tests/lib.sh: helpers for the shell tests. Each check prints PASS/FAIL with what it
# compared; summary prints "N passed, N failed" like the C tests.
PASSED=0
FAILED=0
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}   # idle OpenMP threads sleep (tests/run_all.sh says why)
pass() { PASSED=$((PASSED + 1)); echo "  ok   $*"; }
fail() { FAILED=$((FAILED + 1)); echo "  FAIL $*"; }
check() { # check DESCRIPTION COMMAND...: passes if the command succeeds
    local what=$1; shift
    if "$@"; then pass "$what"; else fail "$what"; fi
}
summary() { echo "$PASSED passed, $FAILED failed"; [ "$FAILED" -eq 0 ]; }
# expect_error DESCRIPTION PHRASE COMMAND...: the command must exit non-zero, print exactly
# one "meshmoe:" line on stderr containing PHRASE, and not crash (exit 1, no signal). Its
# stdout is kept in the file $EXPECT_STDOUT where that is set, for the caller to look into.
expect_error() {
    local what=$1 phrase=$2; shift 2
    local err rc
    err=$("$@" 2>&1 >"${EXPECT_STDOUT:-/dev/null}"); rc=$?
    local lines; lines=$(printf '%s\n' "$err" | grep -c '^meshmoe:')
    if [ "$rc" -eq 1 ] && [ "$lines" -eq 1 ] && printf '%s' "$err" | grep -qF -- "$phrase"; then
        pass "$what: $(printf '%s' "$err" | grep '^meshmoe:' | head -1 | cut -c1-150)"
    else
        fail "$what: exit $rc, wanted exit 1 and one message containing '$phrase'; got: $err"
    fi
}
# The trainer a script runs: $TRAIN (./train unless set; a GPU session sets ./train_gpu),
# with $TRAIN_ARGS (key=value arguments, e.g. device=cpu_strict or device=gpu) added after
# every training run's own (not to the commands that train nothing: prepare, export-hf,
# figure, plot, the help). A script that honours both sets TRAIN=train_with_args after
# sourcing this file; the function is exported for its `bash -c` checks.
TRAIN_BIN=${TRAIN:-./train}
TRAIN_ARGS=${TRAIN_ARGS:-}
train_with_args() {
    case ${1:-} in
        prepare | export-hf | figure | plot | -h | --help | --help-config) "$TRAIN_BIN" "$@" ;;
        *) "$TRAIN_BIN" "$@" $TRAIN_ARGS ;;
    esac
}
export TRAIN_BIN TRAIN_ARGS
export -f train_with_args
# losses FILE: the "loss" field of every line of a metrics file, as printed (%.9g of a float).
losses() { sed -n 's/.*"loss": \([^,]*\),.*/\1/p' "$1"; }

# For the scripts that keep each run's metrics in $T/NAME.jsonl and pass the flags $FAST
# (set both before calling; a script may define its own versions after sourcing this):
run() {   # run NAME PRESET ARGS...: $TRAIN configs/PRESET.yml $FAST ARGS into $T/NAME.jsonl
    local name=$1 preset=$2; shift 2
    if ! $TRAIN configs/$preset.yml $FAST "$@" metrics_file=$T/$name.jsonl > $T/$name.out 2>&1; then
        fail "$name: run failed: $(tail -1 $T/$name.out)"; : > $T/$name.jsonl
    fi
}
bits() { grep -o '"loss_bits": "[^"]*"' "$T/$1.jsonl" | tr '\n' ' '; }   # every step's loss bits
same() { [ -n "$(bits "$1")" ] && [ "$(bits "$1")" = "$(bits "$2")" ]; }   # the same loss bits, and some
norms() { grep -o '"grad_norm": [^,]*' "$T/$1.jsonl" 2>/dev/null | cut -d' ' -f2 | tr '\n' ' '; }   # every step's grad norm
# The same loss bits and the same grad norms (the loss's rounding can hide the gradients' last bits).
same_run() { same "$1" "$2" && [ -n "$(norms "$1")" ] && [ "$(norms "$1")" = "$(norms "$2")" ]; }
# opt_bytes NAME DEVICE: the optimizer's peak bytes of DEVICE in the last line of NAME's metrics.
opt_bytes() { tail -1 "$T/$1.jsonl" | grep -o "\"device\": $2, \"peak_bytes\": [0-9]*, \"peak_bytes_by_tag\": {[^}]*}" |
    grep -o '"optimizer": [0-9]*' | grep -o '[0-9]*$'; }
# mixtral-tiny's tensors in layout order (model/params.c, D=128 H=4 KV=2 hd=32 F=256 E=4 V=256
# L=4), one a line: unit (0 the embedding, 1+l layer l, 5 the head), name, global shape.
mixtral_tiny_layout() {
    echo "0 embedding 256 128"
    for l in 1 2 3 4; do
        echo "$l norm 128"; echo "$l query 128 4 32"; echo "$l key 128 2 32"; echo "$l value 128 2 32"; echo "$l out 4 32 128"
        echo "$l post_norm 128"; echo "$l gate 128 4"
        echo "$l wi_0 4 128 256"; echo "$l wi_1 4 128 256"; echo "$l wo 4 256 128"
    done
    echo "5 decoder_norm 128"; echo "5 logits_dense 128 256"
}
# mixtral_tiny_params SPLIT: "P P'": mixtral-tiny's parameter count, and the count stored when
# each unit is split SPLIT ways (fsdp x zero1; model/params.c): each unit padded up to a
# multiple of SPLIT x 256 elements, unpadded when SPLIT is 1. From the shapes above, not from
# the trainer.
mixtral_tiny_params() {
    mixtral_tiny_layout | awk -v S="$1" '{ n = 1; for (i = 3; i <= NF; i++) n *= $i; used[$1] += n; P += n }
        END { for (u in used) Pp += S > 1 ? int((used[u] + S * 256 - 1) / (S * 256)) * S * 256 : used[u]; print P, Pp }'
}
