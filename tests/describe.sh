#!/usr/bin/env bash
# tests/describe.sh: `./train describe` (trainer/describe.h) names every tensor a parity
# dump of the same config holds, with the same global shape, and its config is the dump's
# config; it rejects a bad key like a training run, and it allocates nothing (a 3-billion-
# parameter preset is described in a few MB of memory). The dump's header is read here
# directly (a safetensors file starts with its JSON header), not by the code under test.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
make -s train >/dev/null || { echo "build failed"; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# compare DESCRIBE.json DUMP.safetensors: prints what differs, exits 1 if anything does
compare() {
    python3 - "$1" "$2" <<'PY'
import json, struct, sys
d = json.load(open(sys.argv[1]))
with open(sys.argv[2], "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    head = json.loads(f.read(n))
cfg = json.loads(head["__metadata__"]["config"])
dump = {k[len("param/"):]: v["shape"] for k, v in head.items() if k.startswith("param/")}
dump.update({k[len("state/"):]: v["shape"] for k, v in head.items() if k.startswith("state/")})
mine = dict(d["params"]); mine.update(d["state"])
bad = [k for k in set(dump) | set(mine) if dump.get(k) != mine.get(k)]
bad += [f"config {k}: dump {cfg[k]!r} describe {d['config'].get(k)!r}" for k in cfg if cfg[k] != d["config"].get(k)]
print(f"{len(mine)} tensors, {len(d['config'])} keys; differences: {bad[:5] or 'none'}")
sys.exit(1 if bad or not mine else 0)
PY
}

for preset in mixtral-tiny deepseek-tiny; do
    args="per_device_batch_size=2 max_target_length=16 base_num_decoder_layers=3 dump_parity=$dir/$preset parity_steps=1"
    ./train describe configs/$preset.yml $args > "$dir/$preset.json" 2> "$dir/err"
    ./train configs/$preset.yml $args > /dev/null 2>&1
    out=$(compare "$dir/$preset.json" "$dir/$preset/"*.safetensors 2>&1)
    check "$preset: describe names the dump's tensors and shapes and its config: $out" \
        grep -q "differences: none" <<< "$out"
done
expect_error "describe refuses an unknown key like a run" "unknown config key 'num_expert'" \
    ./train describe configs/mixtral-tiny.yml num_expert=4
expect_error "describe runs the run's config checks" "num_experts_per_tok" \
    ./train describe configs/mixtral-tiny.yml num_experts_per_tok=9
kb=$( { /usr/bin/time -f %M ./train describe configs/mixtral-medium.yml > "$dir/medium.json"; } 2>&1 )
n=$(python3 -c "import json, math; print(sum(math.prod(s) for s in json.load(open('$dir/medium.json'))['params'].values()))")
check "mixtral-medium described without allocating it: $n parameters, $kb KB resident" \
    test "$n" -gt 3000000000 -a "$kb" -lt 65536
summary
