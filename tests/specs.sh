#!/usr/bin/env bash
# tests/specs.sh: sharding constraints on activations and where reshards happen
# (skip_trivial_specs, remove_size_one_mesh_axis and shard_mode in docs/optimizations.md;
# model/constraint.h, base/tensor.c).
#   skip_trivial_specs=false: a constraint whose spec splits nothing on the mesh copies
#     the tensor (on one device every spec is trivial; on fsdp=2 the batch is split, so none is);
#   remove_size_one_mesh_axis=false: a spec that keeps a size-1 mesh axis copies (an
#     identity reshard): activation_batch names data, fsdp and expert, so on one device and
#     on fsdp=2 (data and expert are 1) every constraint copies;
#   shard_mode=explicit: a row-parallel product's partial sums are reduced in a temporary
#     and resharded into its output (tensor=2 only; on one device there is nothing to reshard).
# Each: losses bit-identical, the copies measured against sizes worked out here from the
# test's shapes, the dry-run plan equal to the measured step (tests/planner.sh has a case).
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
make -s train >/dev/null || { echo "build failed"; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# Mixtral shapes of the runs below (configs/mixtral-tiny.yml with these overrides).
B=2 S=32 L=2 D=128 V=256
T=$((B * S))
TINY="steps=2 per_device_batch_size=$B max_target_length=$S base_num_decoder_layers=$L sample_length=0 eval_steps=1"
# Constraint points of one forward pass: per layer the layer input, the attention input,
# the residual after attention and the MLP input ((T,D) each); the decoder output (T,D)
# and the logits (T,V).
NPOINTS=$((4 * L + 2))
# Copies in one training step when each point copies: the forward's, the recomputation's
# under remat_policy=full (the layers' 4 per layer again) and the gradients' at the same
# points (d mlp input, d attention output, d attention input per layer; d logits). The
# memory trace shows one step.
NCOPIES=$((NPOINTS + 4 * L + 3 * L + 1))

run() { local name=$1 preset=$2; shift 2; ./train "$preset" "$@" metrics_file="$dir/$name.json" >"$dir/$name.out" 2>&1; }
field() { python3 -c "import json,sys; d=json.loads(open(sys.argv[1]).readlines()[-1])[sys.argv[2]]; print(d[sys.argv[3]] if len(sys.argv) > 3 else d)" "$dir/$1.json" "${@:2}"; }
bits() { grep -o '"loss_bits": "[^"]*"' "$dir/$1.json" | tr '\n' ' '; }
same_bits() { [ -n "$(bits "$1")" ] && [ "$(bits "$1")" = "$(bits "$2")" ]; }
# grows NAME_BASE NAME_TOGGLED KEY TAG BYTES: toggled's KEY[TAG] >= base's + BYTES
grows() {
    local a b; a=$(field "$1" "$3" "$4"); b=$(field "$2" "$3" "$4")
    echo "       $3.$4: $a -> $b (+$((b - a)), at least +$5 expected)"
    [ $((b - a)) -ge "$5" ]
}
same_peaks() {
    local a b; a=$(field "$1" peak_bytes); b=$(field "$2" peak_bytes)
    echo "       peak_bytes: $a -> $b"
    [ -n "$a" ] && [ "$a" = "$b" ]
}
# copies NAME PATTERN: allocations on device 0 in run NAME's memory trace whose name matches
trace() { run "$@" memory_trace="$dir/$1.csv"; }
copies() { grep -c "^0,[0-9]*,alloc,temp,.*\"$2" "$dir/$1.csv"; }
# sizes NAME PATTERN: the distinct byte sizes of those allocations, sorted, space-separated
sizes() { grep "^0,[0-9]*,alloc,temp,.*\"$2" "$dir/$1.csv" | cut -d, -f5 | sort -nu | tr '\n' ' '; }
at_least() { echo "       $1 (at least $2 expected)"; [ "$1" -ge "$2" ]; }
equals() { echo "       '$1' (expected '$2')"; [ "$1" = "$2" ]; }

# skip_trivial_specs=false on one device: every spec is trivial, so every constraint copies.
trace base configs/mixtral-tiny.yml $TINY
trace triv configs/mixtral-tiny.yml $TINY skip_trivial_specs=false
check "skip_trivial_specs=false: losses bit-identical" same_bits base triv
check "skip_trivial_specs=true (default): no constraint copies" equals "$(copies base 'constraint copy')" 0
check "skip_trivial_specs=false: a copy at each of the $NPOINTS forward constraint points, their recomputation and gradients" \
    equals "$(copies triv 'constraint copy')" $NCOPIES
check "skip_trivial_specs=false: the copies are (T,D) and (T,V) floats" equals "$(sizes triv 'constraint copy')" \
    "$((T * D * 4)) $((T * V * 4)) "
check "skip_trivial_specs=false: the forward temp peak grows by a (T,D) copy" \
    grows base triv forward_peak_bytes_by_tag temp $((T * D * 4))

# remove_size_one_mesh_axis=false on one device: the same points copy, as identity reshards.
trace one configs/mixtral-tiny.yml $TINY remove_size_one_mesh_axis=false
check "remove_size_one_mesh_axis=false: losses bit-identical" same_bits base one
check "remove_size_one_mesh_axis=false: copies at every constraint point" \
    equals "$(copies one 'constraint copy')" $NCOPIES
check "remove_size_one_mesh_axis=false: the forward temp peak grows by a (T,D) copy" \
    grows base one forward_peak_bytes_by_tag temp $((T * D * 4))

# fsdp=2: the batch is split, so no spec is trivial (skip_trivial_specs changes nothing), but each names
# data and expert, both of size 1 (remove_size_one_mesh_axis=false copies). A device holds B sequences.
trace f2 configs/mixtral-tiny.yml $TINY ici_fsdp_parallelism=2
trace f2_triv configs/mixtral-tiny.yml $TINY ici_fsdp_parallelism=2 skip_trivial_specs=false
trace f2_one configs/mixtral-tiny.yml $TINY ici_fsdp_parallelism=2 remove_size_one_mesh_axis=false
check "fsdp=2, skip_trivial_specs=false: losses bit-identical" same_bits f2 f2_triv
check "fsdp=2, skip_trivial_specs=false: the specs are (fsdp, -, -), no copies" equals "$(copies f2_triv 'constraint copy')" 0
check "fsdp=2, skip_trivial_specs=false: the same peak" same_peaks f2 f2_triv
check "fsdp=2, remove_size_one_mesh_axis=false: losses bit-identical" same_bits f2 f2_one
check "fsdp=2, remove_size_one_mesh_axis=false: copies at every constraint point" \
    equals "$(copies f2_one 'constraint copy')" $NCOPIES
check "fsdp=2, remove_size_one_mesh_axis=false: the forward temp peak grows by a (T,D) copy" \
    grows f2 f2_one forward_peak_bytes_by_tag temp $((T * D * 4))

# shard_mode=explicit on tensor=2: the batch is not split over tensor, so a device holds all 2*B
# sequences (Tt tokens). Each row-parallel product (attention's out projection and each
# expert's wo; the experts' temporaries are sized for their bound of Tt rows) reduces its
# (Tt,D) partial sums in a temporary under explicit.
Tt=$((2 * T))
trace t2 configs/mixtral-tiny.yml $TINY ici_tensor_parallelism=2
trace t2_exp configs/mixtral-tiny.yml $TINY ici_tensor_parallelism=2 shard_mode=explicit
check "tensor=2, shard_mode=explicit: losses bit-identical" same_bits t2 t2_exp
check "tensor=2, shard_mode=auto: no partial-sum temporaries" equals "$(copies t2 'row-parallel partial sums')" 0
check "tensor=2, shard_mode=explicit: a partial-sum temporary per row-parallel product (attention + each expert, per layer)" \
    at_least "$(copies t2_exp 'row-parallel partial sums')" $((L * (1 + 4)))
check "tensor=2, shard_mode=explicit: each one (Tt,D) floats" equals "$(sizes t2_exp 'row-parallel partial sums')" "$((Tt * D * 4)) "
check "tensor=2, shard_mode=explicit: the forward temp peak grows by a (Tt,D) temporary" \
    grows t2 t2_exp forward_peak_bytes_by_tag temp $((Tt * D * 4))
run one_exp configs/mixtral-tiny.yml $TINY shard_mode=explicit
check "one device, shard_mode=explicit: losses bit-identical" same_bits base one_exp
check "one device, shard_mode=explicit: nothing to reshard, the same peak" same_peaks base one_exp

# DeepSeek (MLA, shared experts) and bf16 with all three switches flipped.
run ds configs/deepseek-tiny.yml $TINY ici_tensor_parallelism=2
run ds_all configs/deepseek-tiny.yml $TINY ici_tensor_parallelism=2 skip_trivial_specs=false \
    remove_size_one_mesh_axis=false shard_mode=explicit
check "deepseek, tensor=2, all three flipped: losses bit-identical" same_bits ds ds_all
run bf configs/mixtral-tiny.yml $TINY dtype=bfloat16
run bf_all configs/mixtral-tiny.yml $TINY dtype=bfloat16 skip_trivial_specs=false remove_size_one_mesh_axis=false
check "dtype=bfloat16, both constraint switches flipped: losses bit-identical" same_bits bf bf_all

# print_sharding says what the constraints cost on the mesh.
out=$(./train configs/mixtral-tiny.yml $TINY steps=1 ici_tensor_parallelism=2 skip_trivial_specs=false print_sharding=true 2>&1)
check "print_sharding, tensor=2, skip_trivial_specs=false: the residual's (-, -, -) copies, the logits' (-, -, tensor) do not" \
    grep -q '^sharding constraints .*: each copies the residual, no copies of the logits' <<<"$out"

expect_error "shard_mode=manual" "shard_mode must be 'auto' or 'explicit'" ./train configs/mixtral-tiny.yml shard_mode=manual
expect_error "skip_trivial_specs=maybe" "skip_trivial_specs" ./train configs/mixtral-tiny.yml skip_trivial_specs=maybe
summary
