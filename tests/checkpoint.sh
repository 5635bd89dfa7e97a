#!/usr/bin/env bash
# tests/checkpoint.sh: checkpoints saved on one mesh and resumed on another (trainer/checkpoint.h).
# Each round trip trains 2 of 4 steps on mesh A and saves, then resumes on mesh B for the
# last 2; the 4 losses (float32 bits) must equal those of one device running all 4 steps
# without a stop. The files saved after the same 2 steps on different meshes must hold the
# same tensors, bit for bit (their config metadata names the mesh, so the tensors are
# compared, by tests/st_tool.py). A run resumed with more steps than it was saved with (the
# schedule's length kept by learning_rate_schedule_steps) must equal one run of all of them.
# Then the metadata a load refuses, each with one message, and the data: a resume must read
# the tokens the checkpoint was trained on, under any name (their count and hash are kept).
set -u
cd "$(dirname "$0")/.."
source tests/lib.sh
TRAIN=train_with_args   # $TRAIN (./train) with $TRAIN_ARGS (tests/lib.sh)
T=$(mktemp -d /tmp/meshmoe-ckpt.XXXXXX)
trap 'rm -rf "$T"' EXIT
FAST="steps=4 sample_length=0 eval_steps=1 eval_interval=0 max_target_length=32 log_period=100"
ST="python3 tests/st_tool.py"

# roundtrip PRESET NAME "MESH A" "MESH B" [KEY=VALUE...]: save after 2 steps on A into
# $T/PRESET-NAME.st, resume on B (the metrics file gets the 2 steps of each run), compare
# with the uninterrupted run $T/PRESET-ref$REF.jsonl.
roundtrip() {
    local preset=$1 name=$1-$2 a=$3 b=$4; shift 4
    run $name $preset $a "$@" run_steps=2 save_checkpoint=$T/$name.st
    run $name $preset $b "$@" load_checkpoint=$T/$name.st
    check "$name: 2 + 2 steps = 4 losses of one device, bit for bit: $(bits $name)" same $name $preset-ref${REF:-}
}
same_file() {   # same_file LABEL A B: $T/A.st and $T/B.st hold the same tensors, bit for bit
    local out rc
    out=$($ST same $T/$2.st $T/$3.st 2>&1); rc=$?
    check "$1: $out" [ "$rc" -eq 0 ]
}

for preset in mixtral-tiny deepseek-tiny; do
    echo "== $preset: global batch 4, saved after 2 steps, resumed for 2"
    run $preset-ref $preset per_device_batch_size=4
    roundtrip $preset fsdp4-to-1 "ici_fsdp_parallelism=4 per_device_batch_size=1" "per_device_batch_size=4"
    roundtrip $preset 1-to-fsdp2-tensor2 "per_device_batch_size=4" \
        "ici_fsdp_parallelism=2 ici_tensor_parallelism=2 per_device_batch_size=1 remat_policy=minimal num_vocab_tiling=2"
    roundtrip $preset zero1-to-expert2 "ici_data_parallelism=2 shard_optimizer_over_data=true per_device_batch_size=2" \
        "ici_expert_parallelism=2 per_device_batch_size=2"
    for f in fsdp4-to-1 zero1-to-expert2; do
        same_file "$preset: tensors saved on ${f%%-to-*} = saved on 1 device" $preset-1-to-fsdp2-tensor2 $preset-$f
    done
    # Mixtral with head_dim=128: the query, key and value kernels (128, heads, 128) are
    # factored over dims 0 and 2, so their row means are stored (128, heads), not in the
    # device's (heads, 128) order: the file's layout is really reordered and back.
    af="opt_type=adafactor"
    [ $preset = mixtral-tiny ] && af="opt_type=adafactor head_dim=128"
    echo "== $preset: $af, fsdp=2 -> 1 device; tensor=2 x expert=2 -> fsdp=2 x tensor=2; the same with muon"
    run $preset-ref-af $preset per_device_batch_size=4 $af
    REF=-af roundtrip $preset af-fsdp2-to-1 "ici_fsdp_parallelism=2 per_device_batch_size=2" "per_device_batch_size=4" $af
    # Tensor and expert pieces: each device keeps the means of its piece's leading indices
    # (the experts, Mixtral's heads) over every row and column, and saves and loads those.
    REF=-af roundtrip $preset af-te-to-fsdp2-tensor2 "ici_tensor_parallelism=2 ici_expert_parallelism=2 per_device_batch_size=1" \
        "ici_fsdp_parallelism=2 ici_tensor_parallelism=2 per_device_batch_size=1" $af
    same_file "$preset adafactor: tensors saved on tensor=2 x expert=2 = saved on fsdp=2" $preset-af-te-to-fsdp2-tensor2 \
        $preset-af-fsdp2-to-1
    REF=-af roundtrip $preset af-zero1-to-expert2 "ici_data_parallelism=2 shard_optimizer_over_data=true per_device_batch_size=2" \
        "ici_expert_parallelism=2 per_device_batch_size=2" $af
    same_file "$preset adafactor: tensors saved on data=2 with ZeRO-1 = saved on fsdp=2" $preset-af-zero1-to-expert2 \
        $preset-af-fsdp2-to-1
    # opt_type=muon: mu for every weight, nu for the AdamW tensors only (packed per tensor).
    run $preset-ref-mu $preset per_device_batch_size=4 opt_type=muon
    REF=-mu roundtrip $preset mu-te-to-fsdp2 "ici_tensor_parallelism=2 ici_expert_parallelism=2 per_device_batch_size=1" \
        "ici_fsdp_parallelism=2 per_device_batch_size=2" opt_type=muon
    REF=-mu roundtrip $preset mu-1-to-tensor2 "per_device_batch_size=4" "ici_tensor_parallelism=2 per_device_batch_size=2" \
        opt_type=muon
    REF=-mu roundtrip $preset mu-zero1-to-expert2 \
        "ici_data_parallelism=2 shard_optimizer_over_data=true per_device_batch_size=2" \
        "ici_expert_parallelism=2 per_device_batch_size=2" opt_type=muon
    same_file "$preset muon: tensors saved on data=2 with ZeRO-1 = saved on 1 device" $preset-mu-zero1-to-expert2 \
        $preset-mu-1-to-tensor2
    run $preset-ref-mu16 $preset per_device_batch_size=4 opt_type=muon mu_dtype=bfloat16
    REF=-mu16 roundtrip $preset mu16-te-to-zero1 "ici_tensor_parallelism=2 ici_expert_parallelism=2 per_device_batch_size=1" \
        "ici_data_parallelism=2 shard_optimizer_over_data=true per_device_batch_size=2" opt_type=muon mu_dtype=bfloat16
    same_file "$preset muon: tensors saved on tensor=2 x expert=2 = saved on 1 device" $preset-mu-te-to-fsdp2 \
        $preset-mu-1-to-tensor2
done

echo "== mixtral-tiny: pipeline stage=2 -> 1 device; adafactor 1 device -> fsdp=2; sgd fsdp=2 -> 1 device"
roundtrip mixtral-tiny stage2-to-1 "ici_pipeline_parallelism=2 per_device_batch_size=2" "per_device_batch_size=4"
same_file "mixtral-tiny: tensors saved on stage=2 = saved on 1 device" mixtral-tiny-1-to-fsdp2-tensor2 \
    mixtral-tiny-stage2-to-1
# A checkpoint loaded with no step left to make (steps at the checkpoint's step, its schedule
# kept) is evaluated once and sampled (how a context mesh's run, which skips the sample, gets
# its text): the stage=2 checkpoint on one device, the eval loss and the text of the one-device
# run stopped at that step.
sample() { sed -n '/^---- sample/,/^----$/p' "$T/$1.out"; }
evals() { grep -o 'eval loss [0-9.]*' "$T/$1.out" | tail -1; }
run sample-ref mixtral-tiny per_device_batch_size=4 run_steps=2 sample_length=24
run sample-ck mixtral-tiny per_device_batch_size=4 steps=2 learning_rate_schedule_steps=4 sample_length=24 \
    load_checkpoint=$T/mixtral-tiny-stage2-to-1.st
check "mixtral-tiny: the stage=2 checkpoint sampled on 1 device, no step made: one eval ($(evals sample-ck)), \
the text and eval loss of the run stopped there" \
    test -n "$(sample sample-ck)" -a "$(sample sample-ck)" = "$(sample sample-ref)" \
    -a "$(evals sample-ck)" = "$(evals sample-ref)" -a "$(grep -c 'eval loss' $T/sample-ck.out)" -eq 1
# A run that started from a Hugging Face export (load_hf: where the first weights came from, not
# what the run trains) resumes from its own checkpoint, on another mesh, without load_hf: the
# 4 losses of the run from the export that was never stopped.
./train export-hf $T/mixtral-tiny-stage2-to-1.st $T/hf > $T/export.out 2>&1 || fail "export-hf: $(tail -1 $T/export.out)"
run hf-ref mixtral-tiny per_device_batch_size=4 load_hf=$T/hf
run hf-2-to-fsdp2 mixtral-tiny per_device_batch_size=4 load_hf=$T/hf run_steps=2 save_checkpoint=$T/hf.st
run hf-2-to-fsdp2 mixtral-tiny ici_fsdp_parallelism=2 per_device_batch_size=2 load_checkpoint=$T/hf.st
check "mixtral-tiny from load_hf, saved after 2 steps, resumed on fsdp=2 without it: the 4 losses of the run from \
load_hf, bit for bit: $(bits hf-2-to-fsdp2)" same_run hf-2-to-fsdp2 hf-ref

echo "== load_parameters_path: a checkpoint's weights alone (step 0, a fresh optimizer, another schedule and mesh)"
# The start that load_hf makes from the checkpoint's export (tests/hf.sh ties an export and its
# load_hf to the checkpoint's tensors, bit for bit): the losses and grad norms bit for bit;
# DeepSeek's with its routing biases, trained for 2 steps, which decide its experts.
P="steps=3 opt_type=adafactor learning_rate=1e-3"
run lp-mixtral-hf mixtral-tiny per_device_batch_size=4 $P load_hf=$T/hf
run lp-mixtral mixtral-tiny ici_fsdp_parallelism=2 per_device_batch_size=2 $P \
    load_parameters_path=$T/mixtral-tiny-stage2-to-1.st
check "mixtral-tiny: the stage=2 checkpoint's weights on fsdp=2, Adafactor, 3 steps of a new schedule: load_hf's \
losses from its export, bit for bit: $(bits lp-mixtral)" same_run lp-mixtral lp-mixtral-hf
./train export-hf $T/deepseek-tiny-fsdp4-to-1.st $T/hf-ds > $T/export.out 2>&1 || fail "export-hf: $(tail -1 $T/export.out)"
run lp-deepseek-hf deepseek-tiny per_device_batch_size=4 $P load_hf=$T/hf-ds
run lp-deepseek deepseek-tiny ici_expert_parallelism=2 per_device_batch_size=2 $P \
    load_parameters_path=$T/deepseek-tiny-fsdp4-to-1.st
check "deepseek-tiny: the fsdp=4 checkpoint's weights and routing biases on expert=2: load_hf's losses from its \
export, bit for bit: $(bits lp-deepseek)" same_run lp-deepseek lp-deepseek-hf
LP="$TRAIN configs/mixtral-tiny.yml $FAST"
expect_error "load_parameters_path with load_checkpoint" "load_checkpoint and load_parameters_path both given" \
    $LP load_parameters_path=$T/hf.st load_checkpoint=$T/hf.st
expect_error "load_parameters_path: another model's weights" \
    "load_parameters_path $T/hf.st: tensor 'params/token_embedder/embedding' is F32 [256,128], this run needs F32 [256,64]" \
    $LP load_parameters_path=$T/hf.st base_emb_dim=64
expect_error "load_parameters_path: routing biases this run does not have" \
    "is not one of this model's (a model's with routed_bias; this run has routed_bias=false)" \
    $TRAIN configs/deepseek-tiny.yml $FAST load_parameters_path=$T/deepseek-tiny-fsdp4-to-1.st routed_bias=false
expect_error "load_parameters_path: a safetensors file that is no checkpoint" \
    "load_parameters_path $T/hf/model.safetensors: a safetensors file but not a meshmoe checkpoint" \
    $LP load_parameters_path=$T/hf/model.safetensors
expect_error "load_parameters_path: saved over" "save_checkpoint '$T/hf.st' is the same file as load_parameters_path" \
    $LP load_parameters_path=$T/hf.st save_checkpoint=$T/hf.st
REF=-af roundtrip mixtral-tiny af-1-to-fsdp2 "per_device_batch_size=4" "ici_fsdp_parallelism=2 per_device_batch_size=2" \
    opt_type=adafactor head_dim=128
same_file "mixtral-tiny adafactor: tensors saved on fsdp=2 = saved on 1 device" mixtral-tiny-af-1-to-fsdp2 \
    mixtral-tiny-af-fsdp2-to-1
out=$($ST factored $T/mixtral-tiny-af-1-to-fsdp2.st 2>&1); rc=$?
check "mixtral-tiny adafactor: v_row, v_col in optax's layout (per leading index, C sum v_row = R sum v_col): $out" \
    [ "$rc" -eq 0 ]
run mixtral-tiny-ref-sgd mixtral-tiny per_device_batch_size=4 opt_type=sgd
REF=-sgd roundtrip mixtral-tiny sgd-fsdp2-to-1 "ici_fsdp_parallelism=2 per_device_batch_size=2" "per_device_batch_size=4" \
    opt_type=sgd
echo "== mixtral-tiny: context=2 -> data=2 x fsdp=2, both with 2 reduction chunks per sequence"
run mixtral-tiny-ref-c2 mixtral-tiny per_device_batch_size=4 context_reduce_chunks=2
REF=-c2 roundtrip mixtral-tiny context2-to-data2-fsdp2 "ici_context_parallelism=2 per_device_batch_size=2" \
    "ici_data_parallelism=2 ici_fsdp_parallelism=2 per_device_batch_size=1" context_reduce_chunks=2
echo "== deepseek-tiny: pipeline stage=3 -> 1 device (global batch 6)"
run deepseek-tiny-ref6 deepseek-tiny per_device_batch_size=6
REF=6 roundtrip deepseek-tiny stage3-to-1 "ici_pipeline_parallelism=3 per_device_batch_size=2" "per_device_batch_size=6"

echo "== mixtral-tiny: train longer: steps=2, then resumed with steps=4, learning_rate_schedule_steps=4 in both"
# The schedule's length is fixed, so the first run's 2 steps are the first 2 of the 4-step run,
# and the resumed 2 its last 2; with the length equal to steps, the default schedule's bits.
run mixtral-tiny-sched4 mixtral-tiny per_device_batch_size=4 learning_rate_schedule_steps=4
check "learning_rate_schedule_steps=4 with steps=4 = the default (-1, steps): $(bits mixtral-tiny-sched4)" \
    same mixtral-tiny-sched4 mixtral-tiny-ref
run mixtral-tiny-longer mixtral-tiny per_device_batch_size=4 learning_rate_schedule_steps=4 steps=2 \
    save_checkpoint=$T/longer.st
run mixtral-tiny-longer mixtral-tiny per_device_batch_size=4 learning_rate_schedule_steps=4 steps=4 \
    load_checkpoint=$T/longer.st
check "steps=2, resumed to steps=4 = one 4-step run, bit for bit: $(bits mixtral-tiny-longer)" \
    same mixtral-tiny-longer mixtral-tiny-sched4

echo "== mixtral-tiny: saved by device=cpu, resumed by device=cpu_strict (device may change; GPU: tests/gpu.sh)"
if [[ "$TRAIN_ARGS" != *device=* ]]; then   # (a run that sets the device for every command has one device)
    roundtrip mixtral-tiny cpu-to-strict "per_device_batch_size=4 device=cpu" "per_device_batch_size=4 device=cpu_strict"
    said=$(grep -m1 "device is cpu in the checkpoint; this run continues with cpu_strict" $T/mixtral-tiny-cpu-to-strict.out)
    check "the change of device said at start-up: ${said:-nothing}" [ -n "$said" ]
fi

echo "== keys that change only the rounding may change on a resume, said at start-up"
# matmul_impl=plain makes the ordered GEMM's chains: the same bits, and the change said.
roundtrip mixtral-tiny ordered-to-plain "per_device_batch_size=4" "per_device_batch_size=4 matmul_impl=plain"
said=$(grep -m1 "matmul_impl is ordered in the checkpoint; this run continues with plain" $T/mixtral-tiny-ordered-to-plain.out)
check "the change of matmul_impl said at start-up: ${said:-nothing}" [ -n "$said" ]
# OpenBLAS rounds by the products' shapes: resumed on another mesh, which cuts other pieces,
# the run says its losses leave by rounding; on the checkpoint's mesh it says nothing and
# keeps the uninterrupted run's bits.
if ldd ./train | grep -q openblas; then
    run blas-ref deepseek-tiny per_device_batch_size=4 matmul_impl=openblas
    run blas-1to1 deepseek-tiny per_device_batch_size=4 matmul_impl=openblas run_steps=2 save_checkpoint=$T/blas.st
    run blas-1to1 deepseek-tiny per_device_batch_size=4 matmul_impl=openblas load_checkpoint=$T/blas.st
    run blas-to-fsdp2 deepseek-tiny ici_fsdp_parallelism=2 per_device_batch_size=2 matmul_impl=openblas load_checkpoint=$T/blas.st
    said=$(grep -m1 "this run cuts the step into other per-device pieces .* matmul_impl=openblas rounds by the shapes" \
        $T/blas-to-fsdp2.out)
    check "openblas, 1 device -> fsdp=2: the rounding by shape said at start-up: ${said:0:90}" [ -n "$said" ]
    blas_same_mesh() { ! grep -q "other per-device pieces" $T/blas-1to1.out && same blas-1to1 blas-ref; }
    check "openblas, 1 device -> 1 device: 2 + 2 steps = 4 losses of one run, bit for bit, and nothing said" blas_same_mesh
else
    echo "  (OpenBLAS's resume on another mesh: this build has no OpenBLAS)"
fi
# Saved on context=2 (2 chunks a sequence), resumed on context=4, which cannot keep 2 chunks
# (each context device holds whole chunks): the sums' order changes, so the last 2 losses
# may leave the uninterrupted run's in the last bits, and the run says so. (Measured: the same
# bits here; a whole run with 4 chunks against one with 2 differs by a float32 ulp of a loss,
# 7.7e-8 relative; 1e-6 allows 13 of them.)
run mixtral-tiny-c2-to-c4 mixtral-tiny ici_context_parallelism=2 per_device_batch_size=2 run_steps=2 \
    save_checkpoint=$T/c2.st
run mixtral-tiny-c2-to-c4 mixtral-tiny ici_context_parallelism=4 per_device_batch_size=1 load_checkpoint=$T/c2.st
said=$(grep -m1 "sums over tokens use 2 chunk(s) per sequence in the checkpoint; this run continues with 4" \
    $T/mixtral-tiny-c2-to-c4.out)
check "context=2 -> context=4: the change of reduction chunks said at start-up: ${said:-nothing}" [ -n "$said" ]
rel=$(paste <(losses $T/mixtral-tiny-c2-to-c4.jsonl) <(losses $T/mixtral-tiny-ref-c2.jsonl) |
    awk '{ d = ($1 - $2) / $2; d = d < 0 ? -d : d; if (d > m) m = d; n++ } END { if (n == 4) printf "%.1e", m }')
check "context=2 -> context=4: 4 losses within 1e-6 of one device's with 2 chunks (worst ${rel:-missing})" \
    awk -v r="${rel:-1}" 'BEGIN { exit !(r <= 1e-6) }'

echo "== metadata a load refuses: one message naming the key and the file"
C="configs/mixtral-tiny.yml $FAST per_device_batch_size=4"
CK=$T/mixtral-tiny-1-to-fsdp2-tensor2.st
$ST set-meta $CK $T/neg.st step -5
$ST set-meta $CK $T/abc.st step abc
$ST set-meta $CK $T/big.st step 99
expect_error "step -5" "load_checkpoint $T/neg.st: metadata key 'step' must be a non-negative integer, got '-5'" \
    $TRAIN $C load_checkpoint=$T/neg.st
expect_error "step abc" "load_checkpoint $T/abc.st: metadata key 'step' must be a non-negative integer, got 'abc'" \
    $TRAIN $C load_checkpoint=$T/abc.st
expect_error "step past the run's steps" "load_checkpoint $T/big.st: step 99 is past this run's steps (4)" \
    $TRAIN $C load_checkpoint=$T/big.st
# (steps=1 also shortens the schedule, the next check's refusal: the step's comes first, as
# the one to fix)
expect_error "steps=1 on a checkpoint of step 2 of 4" "load_checkpoint $CK: step 2 is past this run's steps (1): steps is the whole run's length" \
    $TRAIN $C load_checkpoint=$CK steps=1
expect_error "a shape key" "load_checkpoint $CK: base_emb_dim is 128 in the checkpoint, 64 in this run" \
    $TRAIN $C base_emb_dim=64 load_checkpoint=$CK
expect_error "a math key that keeps the shapes" "load_checkpoint $CK: z_loss_multiplier is 0 in the checkpoint, 0.001 in this run" \
    $TRAIN $C z_loss_multiplier=1e-3 load_checkpoint=$CK
expect_error "steps=8: another schedule length" "the learning-rate schedule's length is 4 in the checkpoint (learning_rate_schedule_steps -1, steps 4), 8 in this run (learning_rate_schedule_steps -1, steps 8): set learning_rate_schedule_steps=4" \
    $TRAIN $C steps=8 load_checkpoint=$CK
expect_error "the optimizer" "load_checkpoint $CK: opt_type is adamw in the checkpoint, adafactor in this run" \
    $TRAIN $C opt_type=adafactor load_checkpoint=$CK
$TRAIN $C opt_type=muon run_steps=1 save_checkpoint=$T/mu.st > /dev/null 2>&1
expect_error "muon's momentum decay" "load_checkpoint $T/mu.st: muon_beta is 0.95 in the checkpoint, 0.9 in this run" \
    $TRAIN $C opt_type=muon muon_beta=0.9 load_checkpoint=$T/mu.st
expect_error "the global batch" "load_checkpoint $CK: the global batch is 4 sequences per step in the checkpoint" \
    $TRAIN $C ici_fsdp_parallelism=2 load_checkpoint=$CK
$ST add-tensor $CK $T/extra.st opt_state/v/stray
expect_error "a tensor the run has no use for" "load_checkpoint $T/extra.st: tensor 'opt_state/v/stray' is not one of this run's (opt_type=adamw)" \
    $TRAIN $C load_checkpoint=$T/extra.st
expect_error "a missing file" "cannot open load_checkpoint '$T/nope.st'" $TRAIN $C load_checkpoint=$T/nope.st

echo "== the data a checkpoint was trained on: its tokens, wherever dataset_path finds them"
# A text (its bytes the tokens: vocab 256) and its token file hold the same tokens; another
# file put where the first was holds others.
mkdir -p $T/d1 $T/d2
awk 'BEGIN { srand(7); for (i = 0; i < 2500; i++) printf "%s%s", substr("the a of to in and MoE expert router", 1 + int(rand() * 30), 1 + int(rand() * 6)), (i % 11 ? " " : ".\n") }' > $T/d1/text.txt
head -c 6000 $T/d1/text.txt > $T/d2/text.txt
./train prepare $T/d1/text.txt $T/d1/data.bin > /dev/null && ./train prepare $T/d2/text.txt $T/d2/data.bin > /dev/null
run data-ref mixtral-tiny per_device_batch_size=4 dataset_path=$T/d1/data.bin
run data-text mixtral-tiny per_device_batch_size=4 dataset_path=$T/d1/data.bin run_steps=2 save_checkpoint=$T/data.st
run data-text mixtral-tiny per_device_batch_size=4 dataset_path=$T/d2/../d1/text.txt load_checkpoint=$T/data.st
check "saved on d1/data.bin, resumed on the text it was made from, named another way: 2 + 2 steps = 4 losses of the run on d1/data.bin, bit for bit" \
    same data-text data-ref
mv $T/d1 $T/d1-was && mv $T/d2 $T/d1
expect_error "another file at the checkpoint's dataset_path" \
    "load_checkpoint $T/data.st: trained on $(wc -c < $T/d1-was/text.txt | tr -d ' ') tokens (hash " \
    $TRAIN configs/mixtral-tiny.yml $FAST per_device_batch_size=4 dataset_path=$T/d1/data.bin load_checkpoint=$T/data.st
# With steps at the checkpoint's step no step is taken: its eval and sample may read other data.
$TRAIN configs/mixtral-tiny.yml $FAST per_device_batch_size=4 steps=2 dataset_path=$T/d1/data.bin \
    load_checkpoint=$T/data.st > $T/data-eval.out 2>&1
check "steps=2 on the step-2 checkpoint, other data: evaluated, and said (exit $?): $(grep -o 'no step to take.*(6000 tokens)' $T/data-eval.out)" \
    bash -c 'grep -q "^load_checkpoint .*: no step to take: the eval and the sample read dataset_path .* (6000 tokens), not the" $1 &&
             grep -q "^step     2 | eval loss" $1' _ $T/data-eval.out
# Saved with no step taken, the state is the loaded one's, and so are its config and data: not
# this run's other data and schedule length, which a resume of the copy would take for its own.
$TRAIN configs/mixtral-tiny.yml $FAST per_device_batch_size=4 steps=2 learning_rate_schedule_steps=3 \
    dataset_path=$T/d1/data.bin load_checkpoint=$T/data.st save_checkpoint=$T/data-copy.st > $T/data-copy.out 2>&1
check "the same, another schedule, saved with no step taken: the loaded file byte for byte (exit $?)" \
    cmp $T/data.st $T/data-copy.st
mv $T/d1 $T/d2 && mv $T/d1-was $T/d1
# A checkpoint without the "dataset" metadata (meshmoe's before it kept one): dataset_path's text.
$ST del-meta $T/data.st $T/data-old.st dataset
expect_error "no 'dataset' metadata: dataset_path compared as text" \
    "load_checkpoint $T/data-old.st: dataset_path is $T/d1/data.bin in the checkpoint, $T/d1/text.txt in this run" \
    $TRAIN configs/mixtral-tiny.yml $FAST per_device_batch_size=4 dataset_path=$T/d1/text.txt load_checkpoint=$T/data-old.st
$TRAIN configs/mixtral-tiny.yml $FAST per_device_batch_size=4 dataset_path=$T/d1/data.bin load_checkpoint=$T/data-old.st \
    > $T/data-old.out 2>&1
check "no 'dataset' metadata, the same dataset_path: resumed (exit $?)" grep -q "^resumed from $T/data-old.st at step 2$" $T/data-old.out
# The parity dump's keys say what it writes, not what it trains: a dump from the checkpoint
# without the per-step snapshots, where the checkpoint was saved with them (the default).
$TRAIN configs/mixtral-tiny.yml $FAST per_device_batch_size=4 dataset_path=$T/d1/data.bin load_checkpoint=$T/data.st \
    dump_parity=$T/pdump parity_steps=1 parity_snapshots=false > $T/pdump.out 2>&1
check "the checkpoint's parity dump with parity_snapshots=false, saved with true: written (exit $?)" \
    test -s $T/pdump/dump.safetensors
$ST set-meta $T/data.st $T/data-bad.st dataset "6000 not-hex"
expect_error "a 'dataset' metadata that is not a count and a hash" \
    "load_checkpoint $T/data-bad.st: metadata 'dataset' is '6000 not-hex', not a token count and a hexadecimal hash" \
    $TRAIN configs/mixtral-tiny.yml $FAST per_device_batch_size=4 dataset_path=$T/d1/data.bin load_checkpoint=$T/data-bad.st
summary
