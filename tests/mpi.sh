#!/usr/bin/env bash
# tests/mpi.sh: the mesh over real processes (./train_mpi under mpirun, docs/mpi.md). Each
# run over 2 or 4 processes, forced over TCP sockets (--mca btl tcp,self) so that the bytes
# really leave the process, must print the same losses and grad norms, bit for bit, as
# ./train on the same global mesh in one process (dcn x ici devices along each axis); that
# run is itself tied to one device by tests/mesh.sh. Then what is refused, and the faults.
# Then the devices' memory over processes: ./train_mpi under device=cpu_strict, and the GPU
# backend emulated over processes (build/train_emu_mpi). Needs mpirun, ./train_mpi and
# build/train_emu_mpi (make mpi); tests/run_all.sh skips it with a reason without.
set -u
cd "$(dirname "$0")/.."
source tests/lib.sh
TRAIN=${TRAIN:-./train}
T=$(mktemp -d /tmp/meshmoe-mpi.XXXXXX)
trap 'rm -rf "$T"' EXIT
FAST="steps=5 sample_length=0 eval_steps=1 eval_interval=0 max_target_length=64 log_period=100"
# As root OpenMPI wants --allow-run-as-root; more processes than cores, --oversubscribe. One
# OpenMP thread per device: the processes share the cores (the bits do not depend on it).
MPIRUN="mpirun --allow-run-as-root --oversubscribe --mca btl tcp,self"
mpi_run() {   # mpi_run NAME NPROC PRESET ARGS...
    local name=$1 np=$2 preset=$3; shift 3
    if ! timeout 120 $MPIRUN -np "$np" ./train_mpi configs/$preset.yml $FAST num_threads=1 "$@" \
            metrics_file=$T/$name.jsonl < /dev/null > $T/$name.out 2>&1; then
        echo "  (run failed: $(grep meshmoe: $T/$name.out | tail -1))"; : > $T/$name.jsonl
    fi
}

# NAME | PROCESSES | PRESETS | the ./train_mpi keys | ./train's keys for the same global
# mesh. The global batch is 8 sequences (per_device_batch_size x the global devices).
while IFS='|' read -r name np presets dcn ici; do
    name=$(echo $name); np=$(echo $np); ici=$(echo $ici)
    for preset in $presets; do
        run one $preset $ici
        mpi_run many "$np" $preset $dcn
        printf '  %-8s %-34s %s\n' "$preset" "$name" "$(bits many | sed 's/"loss_bits": //g')"
        check "$preset $name over $np processes: 5 losses and grad norms bit-identical to one process ($ici)" \
            same_run many one
    done
done <<'MESHES'
dcn data=2                     | 2 | mixtral-tiny deepseek-tiny | dcn_data_parallelism=2 per_device_batch_size=4 | ici_data_parallelism=2 per_device_batch_size=4
dcn fsdp=2                     | 2 | mixtral-tiny deepseek-tiny | dcn_fsdp_parallelism=2 per_device_batch_size=4 | ici_fsdp_parallelism=2 per_device_batch_size=4
dcn expert=2                   | 2 | mixtral-tiny deepseek-tiny | dcn_expert_parallelism=2 per_device_batch_size=4 | ici_expert_parallelism=2 per_device_batch_size=4
dcn pipeline=2                 | 2 | mixtral-tiny               | dcn_pipeline_parallelism=2 per_device_batch_size=4 | ici_pipeline_parallelism=2 per_device_batch_size=4
dcn pipeline=2, 5 layers       | 2 | deepseek-tiny              | dcn_pipeline_parallelism=2 per_device_batch_size=4 base_num_decoder_layers=5 | ici_pipeline_parallelism=2 per_device_batch_size=4 base_num_decoder_layers=5
dcn tensor=2                   | 2 | mixtral-tiny               | dcn_tensor_parallelism=2 per_device_batch_size=4 | ici_tensor_parallelism=2 per_device_batch_size=4
dcn tensor=2,ici expert=2 adafactor | 2 | mixtral-tiny deepseek-tiny | dcn_tensor_parallelism=2 ici_expert_parallelism=2 per_device_batch_size=2 opt_type=adafactor | ici_tensor_parallelism=2 ici_expert_parallelism=2 per_device_batch_size=2 opt_type=adafactor
dcn fsdp=2,ici tensor=2 muon   | 2 | mixtral-tiny               | dcn_fsdp_parallelism=2 ici_tensor_parallelism=2 per_device_batch_size=2 opt_type=muon | ici_fsdp_parallelism=2 ici_tensor_parallelism=2 per_device_batch_size=2 opt_type=muon
dcn context=2                  | 2 | mixtral-tiny               | dcn_context_parallelism=2 per_device_batch_size=4 | ici_context_parallelism=2 per_device_batch_size=4
dcn data=2,ici fsdp=2          | 2 | mixtral-tiny deepseek-tiny | dcn_data_parallelism=2 ici_fsdp_parallelism=2 per_device_batch_size=2 | ici_data_parallelism=2 ici_fsdp_parallelism=2 per_device_batch_size=2
dcn fsdp=2,ici expert=2        | 2 | mixtral-tiny deepseek-tiny | dcn_fsdp_parallelism=2 ici_expert_parallelism=2 per_device_batch_size=2 | ici_fsdp_parallelism=2 ici_expert_parallelism=2 per_device_batch_size=2
dcn fsdp=2,ici fsdp=2 +overlap | 2 | mixtral-tiny               | dcn_fsdp_parallelism=2 ici_fsdp_parallelism=2 per_device_batch_size=2 overlap_collectives=true | ici_fsdp_parallelism=4 per_device_batch_size=2 overlap_collectives=true
dcn context=2 ring             | 2 | mixtral-tiny               | dcn_context_parallelism=2 context_parallel_strategy=ring per_device_batch_size=4 | ici_context_parallelism=2 context_parallel_strategy=ring per_device_batch_size=4
dcn fsdp=4                     | 4 | mixtral-tiny               | dcn_fsdp_parallelism=4 per_device_batch_size=2 | ici_fsdp_parallelism=4 per_device_batch_size=2
dcn data=2,fsdp=2              | 4 | mixtral-tiny deepseek-tiny | dcn_data_parallelism=2 dcn_fsdp_parallelism=2 per_device_batch_size=2 | ici_data_parallelism=2 ici_fsdp_parallelism=2 per_device_batch_size=2
dcn fsdp=2,expert=2            | 4 | mixtral-tiny deepseek-tiny | dcn_fsdp_parallelism=2 dcn_expert_parallelism=2 per_device_batch_size=2 | ici_fsdp_parallelism=2 ici_expert_parallelism=2 per_device_batch_size=2
MESHES

# The bytes that cross between processes, counted apart (metrics file, last step). On dcn
# data=2 x ici fsdp=2 the fsdp groups stay inside a process and the data groups cross, so
# the reduce-scatter sends nothing between processes and the all-reduce (2 members, one per
# process) all it sends; process 0's report has every device's line, with those bytes.
mpi_run net 2 mixtral-tiny dcn_data_parallelism=2 ici_fsdp_parallelism=2 per_device_batch_size=2
sent() { tail -1 $T/net.jsonl | grep -o "\"$1\": {[^}]*}" | grep -o "\"$2\": [0-9]*" | grep -o '[0-9]*$' | tr '\n' ' '; }
rs_net=$(sent net_bytes_sent reduce-scatter); rs=$(sent comm_bytes_sent reduce-scatter)
ar_net=$(sent net_bytes_sent all-reduce); ar=$(sent comm_bytes_sent all-reduce)
a0=$(echo $ar | cut -d' ' -f1); n0=$(echo $ar_net | cut -d' ' -f1)
check "dcn data=2 x ici fsdp=2, per device: reduce-scatter bytes sent $rs, between processes $rs_net; all-reduce $ar, between processes $ar_net (device 0: over 99%; the rest is the loss summed over the whole mesh)" \
    test -n "$rs" -a "$rs_net" = "0 0 0 0 " -a -n "$a0" -a -n "$n0" -a "$((n0 * 100))" -ge "$((a0 * 99))" -a "$n0" -le "$a0"
check "  ... process 0 reports all 4 devices, each with its bytes between processes" \
    test "$(grep -c '^device [0-3] peak .*| between processes: sent' $T/net.out)" -eq 4

# The sample over processes: a pipeline's stages and a context's parts on two processes, the
# logits of the last real position given to every device (trainer/sample.c): ./train's text
# on the same global mesh.
text() { sed -n '/^---- sample/{n;p;}' "$T/$1.out"; }
for mesh in pipeline context; do
    run s1-$mesh mixtral-tiny ici_${mesh}_parallelism=2 per_device_batch_size=4 sample_length=24
    mpi_run s2-$mesh 2 mixtral-tiny dcn_${mesh}_parallelism=2 per_device_batch_size=4 sample_length=24
    check "sample over 2 processes (dcn $mesh=2): ./train's text on ici $mesh=2 ($(text s2-$mesh))" \
        test -n "$(text s1-$mesh)" -a "$(text s2-$mesh)" = "$(text s1-$mesh)"
done

# load_hf over processes: each process reads the export on its host, each device takes its
# part of every tensor; the run is ./train's load_hf on the same global mesh.
$TRAIN configs/deepseek-tiny.yml $FAST steps=2 per_device_batch_size=2 save_checkpoint=$T/hfck.safetensors > $T/hfck.out 2>&1
$TRAIN export-hf $T/hfck.safetensors $T/hf > $T/hfexp.out 2>&1
run hf1 deepseek-tiny ici_fsdp_parallelism=2 ici_tensor_parallelism=2 per_device_batch_size=2 load_hf=$T/hf
mpi_run hf2 2 deepseek-tiny dcn_fsdp_parallelism=2 ici_tensor_parallelism=2 per_device_batch_size=2 load_hf=$T/hf
check "load_hf over 2 processes (dcn fsdp=2, ici tensor=2): ./train's losses and grad norms with load_hf on fsdp=2 tensor=2: $(bits hf2 | sed 's/"loss_bits": //g')" \
    sh -c '[ -n "$1" ] && [ "$1" = "$2" ] && [ "$3" = "$4" ] && grep -q "^loaded the Hugging Face model" "$5"' _ \
    "$(bits hf2)" "$(bits hf1)" "$(norms hf2)" "$(norms hf1)" $T/hf2.out

# attn_block_autotune: process 0 times the block sizes and every process uses its choice;
# the run equals one process given those sizes.
mpi_run tune 2 mixtral-tiny dcn_data_parallelism=2 per_device_batch_size=4 attention=flash attn_block_autotune=true
picked=$(grep -o 'picked attn_block_q=[0-9]* attn_block_kv=[0-9]*' $T/tune.out | cut -d' ' -f2-)
run tune1 mixtral-tiny ici_data_parallelism=2 per_device_batch_size=4 attention=flash ${picked:-attn_block_q=0}
check "attn_block_autotune over 2 processes: timed once (on process 0), picked ${picked:-nothing}; the bits of one process given those sizes" \
    test "$(grep -c 'attn_block_autotune: picked' $T/tune.out)" -eq 1 -a -n "$picked" -a "$(bits tune)" = "$(bits tune1)" -a -n "$(bits tune)"

# Checkpoints: saved by 4 processes, byte-identical to the one-process save of the same
# global mesh (same path and keys, so the config metadata too: it records the global mesh);
# then loaded by 2 processes on another mesh and resumed with one process's bits.
CK="configs/deepseek-tiny.yml $FAST steps=8 run_steps=5 num_threads=1 per_device_batch_size=2 save_checkpoint=$T/ck.safetensors"
$TRAIN $CK ici_data_parallelism=2 ici_fsdp_parallelism=2 > $T/ck1.out 2>&1 && mv $T/ck.safetensors $T/ck1.safetensors
timeout 120 $MPIRUN -np 4 ./train_mpi $CK dcn_data_parallelism=2 dcn_fsdp_parallelism=2 < /dev/null > $T/ck4.out 2>&1
check "deepseek-tiny checkpoint saved by 4 processes (dcn data=2,fsdp=2) is byte-identical to one process's (ici data=2,fsdp=2): $(stat -c %s $T/ck.safetensors 2>/dev/null) bytes" \
    cmp -s $T/ck1.safetensors $T/ck.safetensors
run res1 deepseek-tiny ici_fsdp_parallelism=2 per_device_batch_size=4 load_checkpoint=$T/ck1.safetensors steps=8
mpi_run res2 2 deepseek-tiny dcn_fsdp_parallelism=2 per_device_batch_size=4 load_checkpoint=$T/ck.safetensors steps=8
check "  ... resumed by 2 processes (dcn fsdp=2) for steps 5-7: losses and grad norms bit-identical to one process (ici fsdp=2): $(bits res2 | sed 's/"loss_bits": //g')" \
    same_run res2 res1

# SIGTERM to mpirun: mpirun passes it on to every process odls_base_sigkill_timeout seconds
# later (and SIGKILL as long after that, so a step and the save must fit: 5 s here, room for
# a machine busy with make test's other lane); each finishes its step, all stop after the
# same one (the signal travels in the gathered figures) and save the checkpoint together.
$MPIRUN --mca odls_base_sigkill_timeout 5 -np 2 ./train_mpi configs/mixtral-tiny.yml dcn_data_parallelism=2 \
    per_device_batch_size=4 num_threads=1 steps=100000 log_period=1 eval_interval=0 sample_length=0 \
    save_checkpoint=$T/sig.safetensors metrics_file=$T/sig.jsonl < /dev/null > $T/sig.out 2>&1 &
job=$!
for _ in $(seq 300); do [ "$(cat $T/sig.jsonl 2>/dev/null | wc -l)" -ge 3 ] && break; sleep 0.1; done
kill -TERM $job
wait $job
stopped=$(grep -o 'stopped by SIGTERM after [0-9]* of [0-9]* steps' $T/sig.out)
$TRAIN configs/mixtral-tiny.yml steps=100000 run_steps=1 eval_steps=1 sample_length=0 load_checkpoint=$T/sig.safetensors \
    > $T/sig1.out 2>&1
check "SIGTERM to mpirun during training: every process stops after the same step and the checkpoint is saved (${stopped:-no message}), and ./train resumes from it" \
    test -n "$stopped" -a -s $T/sig.safetensors -a "$(grep -c 'received: stopping after this step' $T/sig.out)" -eq 2 \
    -a -n "$(grep '^resumed from' $T/sig1.out)"

# The devices' memory over processes (docs/mpi.md#gpus-over-processes): what a device sends
# to another process leaves its memory through the backend (base/span.c stages it through
# host memory, as a GPU needs). device=cpu_strict closes the devices' memory to the host
# outside the backend's calls, so a host access on the way is caught; build/train_emu_mpi
# runs the GPU backend emulated (gpu/emu.h) with device=gpu, whose kernels give the CPU's
# bits (one mesh: an emulated run takes about 20 s). Each: the losses and grad norms of
# ./train on the same global mesh in one process.
F2="steps=2 sample_length=0 eval_steps=1 eval_interval=0 max_target_length=32 log_period=100 base_num_decoder_layers=2"
while IFS='|' read -r name preset dcn ici how; do
    name=$(echo $name); preset=$(echo $preset); ici=$(echo $ici); how=$(echo $how)
    FAST=$F2 run one $preset $ici per_device_batch_size=2 save_checkpoint=$T/ck-one.safetensors
    set -- $how
    if ! timeout 120 $MPIRUN -np 2 "$1" configs/$preset.yml $F2 num_threads=1 $dcn per_device_batch_size=2 "$2" \
            save_checkpoint=$T/ck-many.safetensors metrics_file=$T/many.jsonl < /dev/null > $T/many.out 2>&1; then
        echo "  (run failed: $(grep meshmoe: $T/many.out | tail -1))"; : > $T/many.jsonl
    fi
    check "$preset $name over 2 processes, $how: ./train's losses and grad norms ($ici): $(bits many | sed 's/"loss_bits": //g')" \
        same_run many one
    # The checkpoint saved from the devices' memory: ./train's tensors, byte for byte
    # (tests/st_tool.py same: the config in its metadata records the device and the dcn mesh).
    r=$(python3 tests/st_tool.py same $T/ck-one.safetensors $T/ck-many.safetensors 2>&1)
    check "  ... its checkpoint, saved by the 2 processes: ./train's tensors: $r" grep -q "the same bytes" <<<"$r"
    rm -f $T/ck-one.safetensors $T/ck-many.safetensors
done <<'MESHES'
dcn fsdp=2,ici expert=2 | deepseek-tiny | dcn_fsdp_parallelism=2 ici_expert_parallelism=2 | ici_fsdp_parallelism=2 ici_expert_parallelism=2 | ./train_mpi device=cpu_strict
dcn tensor=2            | mixtral-tiny  | dcn_tensor_parallelism=2                       | ici_tensor_parallelism=2                       | ./train_mpi device=cpu_strict
dcn pipeline=2          | mixtral-tiny  | dcn_pipeline_parallelism=2                     | ici_pipeline_parallelism=2                     | ./train_mpi device=cpu_strict
dcn fsdp=2,ici expert=2 | deepseek-tiny | dcn_fsdp_parallelism=2 ici_expert_parallelism=2 | ici_fsdp_parallelism=2 ici_expert_parallelism=2 | build/train_emu_mpi device=gpu
MESHES

# Refused, each with a message naming the key and what to do, before any training.
expect_error "./train refuses a mesh over processes" "./train_mpi" \
    $TRAIN configs/mixtral-tiny.yml dcn_data_parallelism=2 $FAST
# mpi_fails NAME PHRASE MAXLINES NPROC ARGS...: the job ends non-zero within 60 s, with at
# most MAXLINES "meshmoe:" lines, each with PHRASE, and no training step (the model's line at
# start-up, "meshmoe: mixtral model, ...", is not counted).
mpi_fails() {
    local name=$1 phrase=$2 most=$3 np=$4; shift 4
    local t0=$SECONDS rc
    timeout 60 $MPIRUN -np "$np" "$@" < /dev/null > $T/fail.out 2>&1; rc=$?
    local msgs; msgs=$(grep '^meshmoe:' $T/fail.out | grep -v 'interrupted by SIGTERM' | grep -v '^meshmoe: [a-z]* model, ')
    local n; n=$(printf '%s\n' "$msgs" | grep -c .)
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$n" -ge 1 ] && [ "$n" -le "$most" ] &&
       [ "$(printf '%s\n' "$msgs" | grep -cF -- "$phrase")" -eq "$n" ] && ! grep -q '^step' $T/fail.out; then
        pass "$name: exit $rc after $((SECONDS - t0)) s: $(printf '%s\n' "$msgs" | head -1 | cut -c1-150)"
    else
        fail "$name: exit $rc, wanted non-zero and 1 to $most messages with '$phrase', no step; got: $(cat $T/fail.out)"
    fi
}
mpi_fails "3 processes for dcn_data_parallelism=2: one message, from process 0" "ask for 2 processes" 1 \
    3 ./train_mpi configs/mixtral-tiny.yml dcn_data_parallelism=2 $FAST
mpi_fails "dump_parity over processes (it runs on one device) is refused, said once" "dump_parity runs on one device" 1 \
    2 ./train_mpi configs/mixtral-tiny.yml dcn_data_parallelism=2 dump_parity=$T/dump $FAST
mpi_fails "export-hf under mpirun with 2 processes (each would write the export): refused, said once" \
    "'export-hf' runs as one process" 1 2 ./train_mpi export-hf $T/hfck.safetensors $T/hf-twice
check "  ...and nothing written" [ ! -e $T/hf-twice ]
mpi_fails "an environment value every process has wrong: said once" "MESHMOE_GEMM_KERNEL='avx1024' is not one of" 1 \
    2 -x MESHMOE_GEMM_KERNEL=avx1024 ./train_mpi configs/mixtral-tiny.yml dcn_data_parallelism=2 $FAST
# The ici sizes that do not make num_devices, which every process finds alike: said once, with
# what the global figures are.
mpi_fails "ici_fsdp_parallelism=2 and num_devices=4 a process, over dcn data=2: said once, the figures explained" \
    "(over the 2 processes: each ici_* value and num_devices here is the whole mesh's, the value given times its dcn_* axis)" 1 \
    2 ./train_mpi configs/mixtral-tiny.yml dcn_data_parallelism=2 ici_fsdp_parallelism=2 num_devices=4 $FAST
# Any other message that names an ici_* value (here the whole tensor axis's 4, of ici 2 x dcn
# 2) says the same.
mpi_fails "ici_tensor_parallelism=2 over dcn tensor=2 against tensor_reduce_chunks=2: the 4 explained" \
    "ici_tensor_parallelism=4 must divide tensor_reduce_chunks (2): each device adds a whole subtree of the pieces; raise tensor_reduce_chunks (a power of two) to a multiple of 4 (over the 2 processes: each ici_* value" 2 \
    2 ./train_mpi configs/mixtral-tiny.yml dcn_tensor_parallelism=2 ici_tensor_parallelism=2 tensor_reduce_chunks=2 $FAST
mpi_fails "dcn_data_parallelism=0: its range, said once" "dcn_data_parallelism must be in [1, 256], or -1" 1 \
    2 ./train_mpi configs/mixtral-tiny.yml dcn_data_parallelism=0 $FAST
# A data file every process finds too short: said once.
printf 'To be, or not to be' > $T/short.txt
mpi_fails "a data file too short for a train and an eval split: said once" "the data set has 19 tokens: too few" 1 \
    2 ./train_mpi configs/mixtral-tiny.yml dcn_data_parallelism=2 dataset_path=$T/short.txt $FAST
# A checkpoint every process checks alike, before training: its mismatch said once too.
mpi_fails "a checkpoint of another global batch (8 sequences a step, 4 here): said once" \
    "the global batch is 8 sequences per step in the checkpoint" 1 \
    2 ./train_mpi configs/deepseek-tiny.yml dcn_fsdp_parallelism=2 per_device_batch_size=2 $FAST \
    load_checkpoint=$T/ck.safetensors steps=8
# Each host's own copy of the checkpoint, at another step on one of them (mpirun's MPMD form,
# a working directory each): said before training, since one process would wait for steps the
# others never take.
mkdir -p $T/ca $T/cb
$TRAIN configs/deepseek-tiny.yml $FAST steps=8 run_steps=2 per_device_batch_size=4 save_checkpoint=$T/ca/ck.st > /dev/null 2>&1
$TRAIN configs/deepseek-tiny.yml $FAST steps=8 run_steps=3 per_device_batch_size=4 save_checkpoint=$T/cb/ck.st > /dev/null 2>&1
MPMD="$PWD/train_mpi $PWD/configs/deepseek-tiny.yml $FAST steps=8 num_threads=1 dcn_data_parallelism=2 per_device_batch_size=2 load_checkpoint=ck.st"
mpi_fails "another checkpoint at load_checkpoint's path on process 1: said once, before training" \
    "load_checkpoint 'ck.st' is another file here than on process 0" 1 1 --wdir $T/ca $MPMD : -np 1 --wdir $T/cb $MPMD
# The same for load_hf: each host's own copy of the export (hf/ in a working directory each).
# Copies with the same files train; one whose weight file (a bit of its last value: the same
# size), config.json (a key the run does not check) or list of files (2 shards and an index)
# differs on process 1 is refused before training, naming the file.
for h in ha hs hw hc hl; do rm -rf $T/$h && mkdir -p $T/$h && cp -r $T/hf $T/$h/hf; done
python3 -c 'import sys; b = bytearray(open(sys.argv[1], "rb").read()); b[-4] ^= 1; open(sys.argv[1], "wb").write(b)' \
    $T/hw/hf/model.safetensors
sed -i 's/"max_position_embeddings": 4096/"max_position_embeddings": 8192/' $T/hc/hf/config.json
python3 tests/st_tool.py shard $T/hl/hf 2
HF="$PWD/train_mpi $PWD/configs/deepseek-tiny.yml $FAST num_threads=1 dcn_fsdp_parallelism=2 ici_tensor_parallelism=2 per_device_batch_size=2 load_hf=hf"
timeout 120 $MPIRUN -np 1 --wdir $T/ha $HF : -np 1 --wdir $T/hs $HF < /dev/null > $T/hfsame.out 2>&1; rc=$?
check "two hosts' copies of load_hf's directory with the same files: compared, and trained (exit $rc)" \
    test "$rc" -eq 0 -a -n "$(grep '^step' $T/hfsame.out)" -a -n "$(grep '^loaded the Hugging Face model' $T/hfsame.out)"
mpi_fails "another model.safetensors in load_hf's directory on process 1: said once, before training" \
    "process 1: load_hf 'hf': its file 'model.safetensors' is another file here than on process 0" 1 \
    1 --wdir $T/ha $HF : -np 1 --wdir $T/hw $HF
mpi_fails "another config.json in load_hf's directory on process 1: said once, before training" \
    "process 1: load_hf 'hf': its file 'config.json' is another file here than on process 0" 1 \
    1 --wdir $T/ha $HF : -np 1 --wdir $T/hc $HF
mpi_fails "load_hf's directory in 2 shards on process 1, one file on process 0: the lists compared, said once" \
    "process 1: load_hf 'hf' holds other files here than on process 0 (4 to read here, 2 there; file 2: 'model.safetensors.index.json' here, 'model.safetensors' there)" 1 \
    1 --wdir $T/ha $HF : -np 1 --wdir $T/hl $HF

# memory_trace over processes: each writes its devices' events, process 0 the file; on dcn
# fsdp=2 x ici data=2 process 0 holds devices 0 and 2. The file is ./train's, byte for byte.
$TRAIN configs/deepseek-tiny.yml $FAST steps=2 ici_data_parallelism=2 ici_fsdp_parallelism=2 per_device_batch_size=2 \
    memory_trace=$T/trace1.csv > $T/trace1.out 2>&1
mpi_run trace 2 deepseek-tiny steps=2 dcn_fsdp_parallelism=2 ici_data_parallelism=2 per_device_batch_size=2 \
    memory_trace=$T/trace2.csv
check "memory_trace from 2 processes (dcn fsdp=2, ici data=2) is ./train's on ici data=2 fsdp=2, byte for byte ($(wc -l < $T/trace2.csv 2>/dev/null) lines)" \
    cmp -s $T/trace1.csv $T/trace2.csv

# A dry run over processes: process 0 plans the global mesh alone; its plan is ./train's.
D="configs/deepseek-tiny.yml per_device_batch_size=2 dry_run=true"
$TRAIN $D ici_data_parallelism=2 ici_expert_parallelism=2 > $T/plan1.out 2>/dev/null
timeout 60 $MPIRUN -np 2 ./train_mpi $D dcn_data_parallelism=2 ici_expert_parallelism=2 < /dev/null > $T/plan2.out 2>/dev/null
same_plan() { grep -q '^device 0: peak' $T/plan1.out && cmp -s $T/plan1.out $T/plan2.out; }
check "dry_run over 2 processes (dcn data=2, ici expert=2) prints the plan of ./train on ici data=2 expert=2, line for line ($(wc -l < $T/plan2.out) lines)" \
    same_plan

# A bad input that only one process sees (a file missing on one host): process 1 gets
# another dataset_path (mpirun's MPMD form); every process stops, with process 1's message.
mpi_fails "a dataset missing on one host stops every process, with that host's message" "process 1: cannot open dataset_path" 1 \
    1 ./train_mpi configs/mixtral-tiny.yml dcn_data_parallelism=2 $FAST : \
    -np 1 ./train_mpi configs/mixtral-tiny.yml dcn_data_parallelism=2 $FAST dataset_path=$T/missing.bin

# Processes given different configs (mpirun's MPMD form): before, a learning rate of its own
# trained on with the replicas parting ways, and other steps left one process waiting forever.
mpi_fails "process 1 with its own learning_rate: refused before training, naming the key" \
    "process 1: learning_rate is 0.01 here and 0.003 on process 0" 1 \
    1 ./train_mpi configs/mixtral-tiny.yml dcn_data_parallelism=2 $FAST : \
    -np 1 ./train_mpi configs/mixtral-tiny.yml dcn_data_parallelism=2 $FAST learning_rate=0.01
# Another dcn layout: the dcn key named, not the ici size that it multiplies.
mpi_fails "process 1 with dcn_fsdp_parallelism where process 0 has dcn_data_parallelism: the dcn key named" \
    "process 1: dcn_data_parallelism is 1 here and 2 on process 0" 1 \
    1 ./train_mpi configs/mixtral-tiny.yml dcn_data_parallelism=2 $FAST : \
    -np 1 ./train_mpi configs/mixtral-tiny.yml dcn_fsdp_parallelism=2 $FAST

# Two hosts whose copies of the data file differ (here two working directories, each with its
# d.txt, the second's bytes one later): refused before training, by the host that differs.
mkdir -p $T/h1 $T/h2
printf 'It was the best of times, it was the worst of times, it was the age of wisdom, %.0s' $(seq 40) > $T/h1/d.txt
cut -c2- $T/h1/d.txt > $T/h2/d.txt; printf x >> $T/h2/d.txt
mpi_fails "two hosts' copies of dataset_path differ: refused, naming the path" \
    "process 1: dataset_path 'd.txt' holds other tokens here than on process 0" 1 \
    1 --wdir $T/h1 $PWD/train_mpi $PWD/configs/mixtral-tiny.yml dcn_data_parallelism=2 $FAST dataset_path=d.txt : \
    -np 1 --wdir $T/h2 $PWD/train_mpi $PWD/configs/mixtral-tiny.yml dcn_data_parallelism=2 $FAST dataset_path=d.txt

printf 'short' > $T/h2/s.txt; cp $T/h1/d.txt $T/h1/s.txt
mpi_fails "a data file too short on one host only: said by that host" "process 1: the data set has 5 tokens: too few" 1 \
    1 --wdir $T/h1 $PWD/train_mpi $PWD/configs/mixtral-tiny.yml dcn_data_parallelism=2 $FAST dataset_path=s.txt : \
    -np 1 --wdir $T/h2 $PWD/train_mpi $PWD/configs/mixtral-tiny.yml dcn_data_parallelism=2 $FAST dataset_path=s.txt

# A fault that one process finds once the devices run (here device 1, on process 1, out of
# its hbm_capacity): die() there aborts the whole job, with that process's message.
mpi_fails "a device out of memory on one process ends the job, with its message" "process 1: device 1 out of memory" 1 \
    1 ./train_mpi configs/mixtral-tiny.yml dcn_data_parallelism=2 per_device_batch_size=4 $FAST : \
    -np 1 ./train_mpi configs/mixtral-tiny.yml dcn_data_parallelism=2 per_device_batch_size=4 $FAST hbm_capacity=20MiB

# Processes on one host share its memory (here said to be 80 MB, and 5 GB): each compares
# what its devices hold with its part of it, half for two. One device's run (about 50 MB)
# fits the whole host, not half of it: stopped at the buffer that passes 40 MB. A run whose
# largest tensor (3.3 GB on each device) fits 5 GB, not 2.5: refused before the mesh starts.
fits_whole() { env MESHMOE_HOST_MEMORY=80000000 $TRAIN configs/mixtral-tiny.yml $FAST > /dev/null 2>&1; }
check "one device's run fits a host of 80 MB (MESHMOE_HOST_MEMORY): the run that 2 processes make next" fits_whole
mpi_fails "2 processes on a host of 80 MB: each stops at its half, naming it" "this process's 1/2 of this host's memory" 2 \
    2 -x MESHMOE_HOST_MEMORY=80000000 ./train_mpi configs/mixtral-tiny.yml dcn_data_parallelism=2 $FAST
mpi_fails "2 processes on a host of 5 GB, 3.3 GB tensors: refused before the mesh starts, said once" \
    "on each of this process's 1 devices, 3276800000 bytes in all: more than 2.33 GiB, this process's 1/2" 1 \
    2 -x MESHMOE_HOST_MEMORY=5000000000 ./train_mpi configs/mixtral-tiny.yml dcn_data_parallelism=2 $FAST \
    eval_per_device_batch_size=25000

# A process killed (SIGKILL) in the middle of training: the job ends within 30 s, and
# mpirun names the process.
$MPIRUN -np 2 ./train_mpi configs/mixtral-tiny.yml dcn_data_parallelism=2 per_device_batch_size=4 num_threads=1 \
    steps=100000 log_period=1 eval_interval=0 sample_length=0 metrics_file=$T/kill.jsonl < /dev/null > $T/kill.out 2>&1 &
job=$!
for _ in $(seq 300); do [ "$(cat $T/kill.jsonl 2>/dev/null | wc -l)" -ge 3 ] && break; sleep 0.1; done
victim=
for c in $(grep -l "^PPid:[[:space:]]*$job\$" /proc/[0-9]*/status 2>/dev/null | cut -d/ -f3); do   # mpirun's children
    tr '\0' '\n' < /proc/$c/environ 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1 && victim=$c
done
t0=$(date +%s%N)
[ -n "$victim" ] && kill -9 "$victim"
while kill -0 $job 2>/dev/null && [ $(( ($(date +%s%N) - t0) / 1000000000 )) -lt 30 ]; do sleep 0.1; done
if kill -0 $job 2>/dev/null; then kill -9 $job; fi   # (our own mpirun, still there after 30 s)
wait $job; rc=$?
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
check "process 1 killed after step 2 (pid ${victim:-none}): the job ends in $ms ms (exit $rc), naming it: $(grep -o 'process rank 1 [^(]*' $T/kill.out | head -1)" \
    test -n "$victim" -a "$ms" -lt 30000 -a "$rc" -ne 0 -a -n "$(grep 'process rank 1 ' $T/kill.out)"

# Random combinations of the model's options, meshes and switches, one axis cut between 2
# processes (tests/combos.py --mode mpi; more draws: --n and --seed): ./train's bits and text,
# or a checkpoint saved by the processes and resumed by ./train on another mesh.
combos=$(python3 tests/combos.py --mode mpi --n 3 --seed 3 2>&1)   # (two on the mesh, one resumed)
printf '%s\n' "$combos" | sed -n 's/^  \(ok\|FAIL\|refused\) /  combos: \1 /p'
check "random combinations over 2 processes: $(printf '%s\n' "$combos" | tail -1)" \
    test -n "$(printf '%s\n' "$combos" | grep -x '[1-9][0-9]* passed, 0 failed')"

summary
