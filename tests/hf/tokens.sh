#!/usr/bin/env bash
# tests/hf/tokens.sh: data/hf_tokens.py, text as a Hugging Face model's tokens in the llm.c
# token file that dataset_path reads, against the trainer's own reader. Part of make hf-check
# (tests/hf/check.sh runs it): it needs the `tokenizers` package of .venv-hf.
#
# Two tokenizers made here with `tokenizers` and saved as tokenizer.json beside a meshmoe
# export (./train export-hf) of mixtral-tiny with that vocabulary: a byte-level BPE of 300 ids
# with a beginning-of-text token its post-processor adds (as Mixtral's does), 16-bit tokens;
# and a word-level one of 70000 ids, so that the file is LLaMA-3's 32-bit layout. For each:
# the file holds the tokenizer's ids (read here with struct) and they decode to the text; the
# trainer trains on it (hf-preset, load_hf, dataset_path) and every row of its first batch
# (the parity dump's batch/inputs) is a run of those ids; sample_length's printed ids decode
# with `decode` to a piece of the text, and a piece of it made ids by `ids` prompts the sample.
# Then the refusals. Ends with `N passed, N failed`.
set -u
cd "$(dirname "$0")/../.."
source tests/lib.sh
PYTHON=${PYTHON:-.venv-hf/bin/python}
TRAIN=${TRAIN:-./train}
T=$(mktemp -d /tmp/meshmoe-hftok.XXXXXX)
trap 'rm -rf "$T"' EXIT
FAST="sample_length=0 eval_steps=1 eval_interval=0 max_target_length=32 per_device_batch_size=2 log_period=100"
cat README.md docs/model.md > $T/text.txt   # real prose, some of it beyond ASCII

# model VOCAB DIR: mixtral-tiny of that vocabulary trained 1 step and exported to DIR.
model() {
    $TRAIN configs/mixtral-tiny.yml $FAST steps=1 vocab_size=$1 save_checkpoint=$T/ck.st > $T/m.out 2>&1 &&
        $TRAIN export-hf $T/ck.st $2 > /dev/null 2>&1 || fail "vocab $1: $(grep meshmoe: $T/m.out | tail -1)"
}

"$PYTHON" - $T <<'EOF'
import random, sys
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, processors, trainers
t = sys.argv[1]
bpe = Tokenizer(models.BPE())
bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
bpe.decoder = decoders.ByteLevel()
bpe.train([f"{t}/text.txt"], trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>"],
                                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
bpe.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", bpe.token_to_id("<s>"))])
bpe.save(f"{t}/bpe.json")
words = {f"w{i}": i for i in range(69999)} | {"<unk>": 69999}
wl = Tokenizer(models.WordLevel(words, unk_token="<unk>"))
wl.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
wl.decoder = decoders.WordPiece(prefix="##")   # joins the words with spaces
wl.save(f"{t}/words.json")
r = random.Random(7)
open(f"{t}/words.txt", "w").write(" ".join(f"w{r.choice([r.randrange(69999), r.randrange(65536, 69999)])}" for _ in range(3000)))
EOF
[ -s $T/bpe.json ] && [ -s $T/words.json ] || { fail "the tokenizers could not be made"; summary; exit; }

# case NAME TOKENIZER VOCAB TEXT BITS
case_() {
    local name=$1 tj=$2 vocab=$3 text=$4 bits=$5 d=$T/$1 r
    model $vocab $d && cp $tj $d/tokenizer.json
    out=$("$PYTHON" data/hf_tokens.py encode $d $text $T/$name.bin 2>&1)
    echo "  $out"
    r=$("$PYTHON" - $d/tokenizer.json $text $T/$name.bin <<'EOF'
import struct, sys
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1]); text = open(sys.argv[2], encoding="utf-8").read()
raw = open(sys.argv[3], "rb").read()
magic, version, n = struct.unpack("<3i", raw[:12])
width = {20240520: 2, 20240801: 4}[magic]
ids = list(struct.unpack(f"<{n}{'H' if width == 2 else 'I'}", raw[1024:]))
same = ids == tok.encode(text).ids and len(raw) == 1024 + n * width
back = tok.decode(ids) == text
print(f"{n} tokens, {8 * width}-bit (magic {magic}, version {version}), "
      f"{'the tokenizer' if same else 'NOT the tokenizer'}'s ids, {'decoding' if back else 'NOT decoding'} to the text")
EOF
)
    check "$name: $r" sh -c 'printf "%s" "$1" | grep -q "$2-bit.*the tokenizer.s ids, decoding to the text"' _ "$r" $bits
    if $TRAIN hf-preset $d > $T/gen.yml 2> $T/gen.err &&
       $TRAIN $T/gen.yml $FAST steps=2 load_hf=$d dataset_path=$T/$name.bin dump_parity=$T/dp parity_steps=1 \
           > $T/run.out 2>&1; then
        r=$("$PYTHON" - $T/$name.bin $T/dp/dump.safetensors <<'EOF'
import struct, sys
import numpy as np
from safetensors.numpy import load_file
raw = open(sys.argv[1], "rb").read()
magic, _, n = struct.unpack("<3i", raw[:12])
ids = np.frombuffer(raw[1024:], dtype=np.uint16 if magic == 20240520 else np.uint32).astype(np.int64)
rows = load_file(sys.argv[2])["batch/inputs"][0]
found = sum(any((ids[p:p + len(row)] == row).all() for p in np.flatnonzero(ids == row[0])) for row in rows)
print(f"{found} of {len(rows)} rows of the first batch are runs of the file's ids (largest {rows.max()})")
EOF
)
        check "$name: the trainer reads them: $r" sh -c 'printf "%s" "$1" | grep -Eq "^([0-9]+) of \1 rows"' _ "$r"
        $TRAIN $T/gen.yml $FAST steps=1 load_hf=$d dataset_path=$T/$name.bin sample_length=6 > $T/run.out 2>&1
        printed=$(grep -A1 -- '---- sample' $T/run.out | tail -1)
        said=$("$PYTHON" data/hf_tokens.py decode $d "$printed" 2>&1)
        prompt=${said%% | *}
        check "$name: sample_length's ids decode, the prompt a piece of the text: '${said:0:70}'" \
            "$PYTHON" -c 'import sys; sys.exit(not sys.argv[1] or sys.argv[1] not in open(sys.argv[2], encoding="utf-8").read())' \
            "$prompt" $text
        # The other way: a text of the same tokens as the prompt key's ids (hf_tokens.py ids),
        # the sample starting with them, and decoding back to that text.
        piece=$(head -c 300 $text | tr -s ' \n' ' ' | cut -d' ' -f3-6)
        ids=$("$PYTHON" data/hf_tokens.py ids $d "$piece" 2>&1)
        $TRAIN $T/gen.yml $FAST steps=1 load_hf=$d dataset_path=$T/$name.bin sample_length=4 "prompt=$ids" > $T/run.out 2>&1
        printed=$(grep -A1 -- '---- sample' $T/run.out | tail -1)
        said=$("$PYTHON" data/hf_tokens.py decode $d "${printed%% |*}" 2>&1)
        check "$name: prompt=$ids ('$piece', hf_tokens.py ids): the sample starts with them, decoding to '$said'" \
            bash -c '[ -n "$2" ] && [ "${1%% |*}" = "$2" ] && [ "${3%$4}" != "$3" ]' _ "$printed" "$ids" "$said" "$piece"
    else
        fail "$name: training on it: $(cat $T/gen.err; grep meshmoe: $T/run.out | tail -1)"
    fi
}
echo "== a byte-level BPE of 300 ids with a beginning-of-text token"
case_ bpe $T/bpe.json 300 $T/text.txt 16
echo "== a word-level tokenizer of 70000 ids"
case_ words $T/words.json 70000 $T/words.txt 32

echo "== refusals: one message naming the file, exit 1"
model 256 $T/small && cp $T/bpe.json $T/small/tokenizer.json
expect_error "a tokenizer larger than the model's vocabulary" "outside config.json's vocab_size 256" \
    "$PYTHON" data/hf_tokens.py encode $T/small $T/text.txt $T/x.bin
check "  ... and nothing written" [ ! -e $T/x.bin ]
cp $T/text.txt $T/keep.txt
expect_error "the output is the text" "would overwrite an input" "$PYTHON" data/hf_tokens.py encode $T/bpe $T/keep.txt $T/keep.txt
check "  ... and the text is as it was" cmp -s $T/keep.txt $T/text.txt
expect_error "no tokenizer.json" "$T/none/tokenizer.json" "$PYTHON" data/hf_tokens.py encode $T/none $T/text.txt $T/x.bin
summary
